//! The one place that knows HTTP status codes: every error becomes
//! `{"error": {"code", "message", ...details}}` with the status its code promises.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

use crate::cluster::peer::PeerError;
use crate::error::{Error, ErrorCode};
use crate::log::{AppendRejection, StoreError};
pub use crate::wire::{ErrorBody, ErrorDetail};

/// Seconds a client is told to wait (`Retry-After`) before retrying an `overloaded` request,
/// or one of a volume being rebuilt from the bucket.
const RETRY_AFTER_SECS: u32 = 1;

/// An error answered over HTTP: the body it answers, whose code decides the status.
#[derive(Debug)]
pub struct ApiError(ErrorBody);

impl ApiError {
    /// An error with a code of the contract and a human message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::from_detail(ErrorDetail::new(code, message))
    }

    fn from_detail(error: ErrorDetail) -> Self {
        Self(ErrorBody { error })
    }

    /// The body this error answers.
    pub(crate) fn body(&self) -> &ErrorBody {
        &self.0
    }

    /// `403 forbidden`: the caller's token lacks `permission` on `on` (a topic, or every
    /// topic).
    pub(crate) fn forbidden(permission: crate::auth::Permission, on: &str) -> Self {
        let mut detail = ErrorDetail::new(
            ErrorCode::Forbidden,
            format!("this token lacks the {permission} permission on {on}"),
        );
        detail.permission = Some(permission);
        Self::from_detail(detail)
    }

    /// `400 invalid_request`.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// The stable error code.
    pub fn code(&self) -> ErrorCode {
        self.0.error.code
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.0.error.code, self.0.error.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.code().status()).expect("every code's status is valid")
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if self.0.error.retry_after {
            response.insert_header((actix_web::http::header::RETRY_AFTER, RETRY_AFTER_SECS));
        }
        // RFC 9110: a 401 names the scheme that would be accepted.
        if self.code() == ErrorCode::Unauthorized {
            response.insert_header((actix_web::http::header::WWW_AUTHENTICATE, "Bearer"));
        }
        response.json(&self.0)
    }
}

impl From<Error> for ApiError {
    fn from(err: Error) -> Self {
        let ApiError(ErrorBody { error: mut detail }) =
            Self::new(err.code(), crate::error::with_causes(&err));
        match err {
            Error::Store(StoreError::Truncated {
                requested_offset,
                oldest_offset,
            }) => {
                detail.requested_offset = Some(requested_offset);
                detail.oldest_offset = Some(oldest_offset);
            }
            Error::Store(StoreError::LeaseNotHeld { batch_id }) => detail.batch_id = Some(batch_id),
            Error::Store(StoreError::InvalidOffset { next_offset, .. }) => {
                detail.next_offset = Some(next_offset);
            }
            Error::UnknownPartition { partitions, .. } => detail.partitions = Some(partitions),
            Error::Store(StoreError::Healing { .. }) => detail.retry_after = true,
            // Another node's error is answered as it is, with its details; its `Retry-After`
            // is not in its body, so a 503 gets one here.
            Error::Peer(PeerError::Refused(mut error)) => {
                error.retry_after = error.code.status() == 503;
                return Self::from_detail(error);
            }
            // The partition's volume is moving, or its node did not answer: retry shortly.
            Error::Peer(_) => detail.retry_after = true,
            _ => {}
        }
        Self::from_detail(detail)
    }
}

impl From<AppendRejection> for ApiError {
    fn from(rejection: AppendRejection) -> Self {
        Self::new(rejection.code(), rejection.to_string())
    }
}

#[cfg(test)]
mod tests {
    use actix_web::ResponseError;
    use actix_web::http::header::RETRY_AFTER;

    use super::{ApiError, ErrorDetail};
    use crate::cluster::peer::PeerError;
    use crate::error::{Error, ErrorCode};
    use crate::log::StoreError;

    /// `overloaded` is a 503 that tells the client when to retry; `unavailable` is not.
    #[test]
    fn overloaded_is_503_with_retry_after() {
        let overloaded = ApiError::from(Error::Overloaded {
            partition: "t:0".into(),
            open: 32,
        });
        let response = overloaded.error_response();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
        assert_eq!(overloaded.code(), "overloaded");

        let unavailable = ApiError::from(Error::PartitionStopped).error_response();
        assert_eq!(unavailable.status(), 503);
        assert!(unavailable.headers().get(RETRY_AFTER).is_none());
    }

    /// Damaged files are a 500 that no retry cures, not a 503.
    #[test]
    fn corrupted_is_500_without_retry_after() {
        let corrupted = ApiError::from(Error::Store(StoreError::Corrupted {
            reason: "the volume v.sqlite is damaged: database disk image is malformed".into(),
        }));
        let response = corrupted.error_response();
        assert_eq!(response.status(), 500);
        assert!(response.headers().get(RETRY_AFTER).is_none());
        assert_eq!(corrupted.code(), "corrupted");
    }

    /// A volume being rebuilt from the bucket is a 503 that tells the client when to retry.
    #[test]
    fn a_volume_being_rebuilt_is_503_with_retry_after() {
        let healing = ApiError::from(Error::Store(StoreError::Healing { volume: 3 }));
        let response = healing.error_response();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
        assert_eq!(healing.code(), "unavailable");
    }

    /// Another node's refusal is answered as that node answered it, details included; a
    /// partition whose node moved it, or did not answer, is a 503 that says when to retry.
    #[test]
    fn another_nodes_errors_keep_their_details_and_moving_volumes_say_when_to_retry() {
        let mut truncated = ErrorDetail::new(ErrorCode::LogTruncated, "records 0 to 9 are gone");
        truncated.requested_offset = Some(0);
        truncated.oldest_offset = Some(10);
        let refused = ApiError::from(Error::Peer(PeerError::Refused(truncated.clone())));
        assert_eq!(refused.error_response().status(), 410);
        assert_eq!(refused.body().error, truncated);

        let moved = ApiError::from(Error::Peer(PeerError::NotOwner {
            node: "http://b:8080".into(),
        }));
        let response = moved.error_response();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
    }
}
