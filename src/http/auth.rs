//! The one check of every request but `GET /healthz`: who it comes from (its bearer token,
//! `401 unauthorized` when missing or unknown) and whether that caller may do it (the
//! permission its route needs on the path's topic, `403 forbidden` naming the permission when
//! not). It runs before anything is read or changed, forwarded requests included (the owner
//! checks them again). What each route needs is written beside it, in [`api_routes`].
//!
//! [`api_routes`]: super::api_routes

use std::sync::Arc;

use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::http::Method;
use actix_web::middleware::Next;
use actix_web::{FromRequest, HttpMessage, HttpRequest, ResponseError, web};

use super::HttpState;
use super::error::ApiError;
use crate::auth::{Permission, Principal, token_hash};
use crate::cluster::peer::{FORWARDED, NODE_SECRET};
use crate::error::ErrorCode;

/// What a route needs of its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Any known token (the topic list, which then shows only what the caller may see).
    Signed,
    /// The permission, on the path's topic (every topic for a path without one).
    Permission(Permission),
}

/// Defines [`need_of`] from [`super::api_routes`].
macro_rules! route_needs {
    ($($path:literal => $($method:ident $module:ident :: $handler:ident as $need:ident),+;)*) => {
        /// What the route `pattern` (as the router names it) needs for `method`; `None` for a
        /// route that does not exist (answered `404`/`405` by the router).
        pub(crate) fn need_of(method: &Method, pattern: &str) -> Option<Need> {
            $($(
                if pattern == $path && *method == route_needs!(@method $method) {
                    return Some(route_needs!(@need $need));
                }
            )+)*
            None
        }
    };
    (@method get) => { Method::GET };
    (@method post) => { Method::POST };
    (@method put) => { Method::PUT };
    (@method delete) => { Method::DELETE };
    (@need signed) => { Need::Signed };
    (@need produce) => { Need::Permission(Permission::Produce) };
    (@need consume) => { Need::Permission(Permission::Consume) };
    (@need admin) => { Need::Permission(Permission::Admin) };
}
super::api_routes!(route_needs);

/// The caller of a request, as [`authenticate`] found it: `None` when the server needs no
/// token (every caller may do everything).
#[derive(Debug, Clone)]
pub(crate) struct Caller(pub Option<Arc<Principal>>);

impl Caller {
    /// Whether the caller may see `topic` (in a topic list).
    pub fn sees(&self, topic: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|principal| principal.sees(topic))
    }
}

impl Caller {
    /// `403 forbidden` unless the caller may do `permission` on `topic`: for an operation
    /// that reaches topics besides its path's (a redrive appends to the letters' sources).
    pub fn check(&self, permission: Permission, topic: &str) -> Result<(), ApiError> {
        let allowed = self
            .0
            .as_ref()
            .is_none_or(|principal| principal.may(permission, Some(topic)));
        if allowed {
            Ok(())
        } else {
            Err(ApiError::forbidden(permission, &format!("topic {topic:?}")))
        }
    }
}

impl FromRequest for Caller {
    type Error = actix_web::Error;
    type Future = std::future::Ready<Result<Self, Self::Error>>;

    fn from_request(request: &HttpRequest, _: &mut Payload) -> Self::Future {
        let caller = request.extensions().get::<Caller>().cloned();
        std::future::ready(Ok(caller.unwrap_or(Caller(None))))
    }
}

/// Why a request was refused, as `durability_auth_failures_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token.
    Missing,
    /// A token no credential has.
    Unknown,
    /// A known token without the permission.
    Forbidden,
    /// A wrong cluster secret, or a node's marker without it.
    Node,
}

impl Refusal {
    /// Its `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Unknown => "unknown",
            Self::Forbidden => "forbidden",
            Self::Node => "node",
        }
    }
}

/// Finds the caller of `request` and checks what its route needs: answers `401` or `403`
/// before the request goes any further.
pub(crate) async fn authenticate(
    request: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let state = request
        .app_data::<web::Data<HttpState>>()
        .expect("the state is registered")
        .clone();
    match check(&request, &state) {
        Ok(caller) => {
            // Without credentials nothing is kept: an absent caller reads as every permission
            // (see `Caller::from_request`), and a request's extensions cost an allocation.
            if caller.0.is_some() {
                request.extensions_mut().insert(caller);
            }
            Ok(next.call(request).await?.map_into_left_body())
        }
        Err((refusal, error)) => {
            state.metrics.count_auth_failure(refusal);
            let response = error.error_response();
            Ok(request.into_response(response).map_into_right_body())
        }
    }
}

/// The caller of `request` if it may do what the request asks, else why not.
fn check(request: &ServiceRequest, state: &HttpState) -> Result<Caller, (Refusal, ApiError)> {
    let from_node = from_node(request, state)?;
    let credentials = state.log.credentials();
    let is_metrics = request.path() == "/metrics";
    if !credentials.required() || (is_metrics && state.metrics_public) {
        return Ok(Caller(None));
    }
    let token = request
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(bearer_token);
    let unauthorized = |refusal| {
        let error = ApiError::new(ErrorCode::Unauthorized, "a valid bearer token is required");
        (refusal, error)
    };
    let Some(token) = token else {
        // A node's own call (a typed one of `Peers`), made for a caller its node checked.
        return if from_node {
            Ok(Caller(None))
        } else {
            Err(unauthorized(Refusal::Missing))
        };
    };
    let principal = credentials
        .authenticate(token)
        .ok_or_else(|| unauthorized(Refusal::Unknown))?;
    let need = if is_metrics {
        Some(Need::Permission(Permission::Metrics))
    } else {
        request
            .match_pattern()
            .and_then(|pattern| need_of(request.method(), &pattern))
    };
    if let Some(Need::Permission(permission)) = need {
        let topic = topic_of(request.path());
        if !principal.may(permission, topic) {
            let on = topic.map_or_else(
                || "every topic".to_owned(),
                |topic| format!("topic {topic:?}"),
            );
            return Err((Refusal::Forbidden, ApiError::forbidden(permission, &on)));
        }
    }
    Ok(Caller(Some(principal)))
}

/// Whether `request` is another node's: it carries the cluster's secret ([`NODE_SECRET`]).
/// A wrong secret, or the node's marker ([`FORWARDED`]) without the secret when the cluster
/// has one, is refused `401`: a client may neither skip the owner check nor pass for a node.
/// In a cluster without a secret (and so without tokens) every caller may do everything, and
/// the marker is taken from anyone.
fn from_node(request: &ServiceRequest, state: &HttpState) -> Result<bool, (Refusal, ApiError)> {
    let headers = request.headers();
    let given = headers
        .get(NODE_SECRET)
        .map(|value| value.to_str().ok().map(token_hash));
    let refused = |message: &str| {
        let error = ApiError::new(ErrorCode::Unauthorized, message);
        Err((Refusal::Node, error))
    };
    match (&state.node_secret, given) {
        (Some(expected), Some(Some(given))) if *expected == given => Ok(true),
        (_, Some(_)) => refused("the cluster's secret is wrong"),
        (Some(_), None) if headers.contains_key(FORWARDED) => {
            refused("x-durability-forwarded is taken from the cluster's nodes only")
        }
        (_, None) => Ok(false),
    }
}

/// The topic a path names: its segment after `/topics/`.
fn topic_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/topics/")?;
    let topic = rest.split('/').next()?;
    (!topic.is_empty()).then_some(topic)
}

/// The token of an `Authorization: Bearer <token>` value; the scheme's case does not matter
/// (RFC 9110).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start())
        .filter(|token| !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bearer scheme is matched whatever its case; other schemes give no token.
    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    /// Every route names what it needs, and the topic comes from the path.
    #[test]
    fn routes_need_what_their_table_says() {
        let records = "/topics/{topic}/partitions/{partition}/records";
        assert_eq!(
            need_of(&Method::POST, records),
            Some(Need::Permission(Permission::Produce))
        );
        assert_eq!(
            need_of(&Method::GET, records),
            Some(Need::Permission(Permission::Consume))
        );
        let cursor = "/topics/{topic}/partitions/{partition}/cursors/{group}";
        assert_eq!(
            need_of(&Method::DELETE, cursor),
            Some(Need::Permission(Permission::Admin))
        );
        assert_eq!(need_of(&Method::GET, "/topics"), Some(Need::Signed));
        assert_eq!(need_of(&Method::PATCH, records), None);
        assert_eq!(
            topic_of("/topics/orders/partitions/0/records"),
            Some("orders")
        );
        assert_eq!(topic_of("/topics/orders"), Some("orders"));
        assert_eq!(topic_of("/topics"), None);
        assert_eq!(topic_of("/cluster"), None);
    }
}
