//! The OpenAPI document of the REST server, generated with `utoipa` from the handlers'
//! `#[utoipa::path]` attributes and schema types, and served at `GET /openapi.json` so that
//! clients can be generated from it.
//!
//! Each server serves the document of its own configuration ([`document`]): the bearer
//! requirement and its `401` answers appear only when `server.auth_token` is set, and the limits
//! a request meets are this server's (`log.max_batch_size`, `log.max_record_bytes`,
//! `server.max_body_bytes`, `server.max_wait_ms`). Write the document without a server from a
//! [`Config`]:
//!
//! ```
//! use durability::Config;
//! use durability::http::openapi::document;
//!
//! let json = document(&Config::default()).to_pretty_json().unwrap();
//! assert!(json.contains("/topics/{topic}/records"));
//! ```

use actix_web::HttpResponse;
use actix_web::http::header::ContentType;
use actix_web::web;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{HttpMethod, Operation, OperationBuilder, Parameter, PathItem};
use utoipa::openapi::request_body::RequestBody;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{
    Array, KnownFormat, Object, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, ContentBuilder, Ref, RefOr, Required};
use utoipa::{Modify, OpenApi};

use super::HttpState;
use super::error::ErrorBody;
use crate::config::Config;
use crate::error::ErrorCode;

/// Defines `ApiDoc`: every route of the API (those of [`api_routes`](super::api_routes), and
/// `/healthz`; `/metrics` is added by [`Additions`]), its bodies and its errors: the part of
/// the document that no setting changes. [`document`] adds the part that settings do.
macro_rules! api_doc {
    ($($path:literal => $($method:ident $module:ident :: $handler:ident as $need:ident),+;)*) => {
        #[derive(OpenApi)]
        #[openapi(
            info(
                title = "durability",
                version = env!("CARGO_PKG_VERSION"),
                description = "A partitioned, retained, append-only log: produce, read, consume with \
                    committed cursors or leases, and operate partitions. Every error is \
                    `{\"error\": {\"code\", \"message\", ...details}}`: a 4xx is definite (nothing \
                    changed), a 5xx is uncertain (retry a produce with the same deduplication keys)."
            ),
            paths(
                crate::http::operations::healthz,
                $($(crate::http::$module::$handler),+),*
            ),
            components(schemas(ErrorBody)),
            modifiers(&Additions),
            tags(
                (name = "produce", description = "Append records"),
                (name = "consume", description = "Read pages, poll and commit consumer groups' cursors"),
                (name = "leases", description = "Parallel consumers sharing one group through leased ranges"),
                (name = "operations", description = "Bounds, load, retention, topics, health"),
            )
        )]
        struct ApiDoc;
    };
}
super::api_routes!(api_doc);

/// The document of a server running with `config`.
///
/// With `server.auth_token` or `[[auth.tokens]]` set, every operation but `GET /healthz` (and
/// `GET /metrics` with `auth.metrics_public`) requires the bearer token and lists its `401`,
/// and with scoped tokens its `403`; without any, the document has no security requirement
/// and no `401` (the server never answers it). The produce bodies, the `413` answers and `waitMs` state this
/// server's `log.max_batch_size`, `log.max_record_bytes`, `server.max_body_bytes` and
/// `server.max_wait_ms`; `{partition}` goes up to the largest `partitions_per_topic` less one.
pub fn document(config: &Config) -> utoipa::openapi::OpenApi {
    let mut openapi = ApiDoc::openapi();
    Configured(config).modify(&mut openapi);
    openapi
}

/// What the derive cannot say: the rules of the produce and nack bodies, the `500` of damaged
/// storage, and `/metrics` (Prometheus text, not JSON).
struct Additions;

impl Modify for Additions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        // An empty batch is `400 invalid_request`.
        for id in ["produceEvents", "appendRecords"] {
            json_array(request_body(openapi, id)).min_items = Some(1);
        }
        // The forms of a record's parts exclude one another: exactly one payload (JSON, bytes,
        // or none: a tombstone), at most one form of a message key and of a header's value.
        let payload = Forms::OneOf(&["payload", "payloadBase64", "tombstone"]);
        let message_key = Forms::AtMostOne(&["messageKey", "messageKeyBase64"]);
        exclusive_forms(openapi, "RecordBody", &[payload, message_key]);
        let event_payload = Forms::OneOf(&["payload", "payloadBase64"]);
        exclusive_forms(openapi, "EventBody", &[event_payload]);
        let value = Forms::AtMostOne(&["value", "valueBase64"]);
        exclusive_forms(openapi, "HeaderJson", &[value]);
        // The body is optional (`required: false`) but, when sent, an object: the derive makes a
        // body optional only through an `Option`, which would also allow `null`.
        request_body(openapi, "nackLease").required = Some(Required::False);
        // Every operation that reaches a partition's storage may meet damaged files, and may
        // find every open partition busy.
        let corrupted = ResponseBuilder::new()
            .description(
                "`corrupted`: the partition's volume is damaged, and refuses writes until an \
                 operator clears its mark; if it lost acknowledged commits, it refuses reads \
                 too, but those of ranges that intact cold segments hold (the topic list too). \
                 Retrying does not help",
            )
            .content("application/json", error_content())
            .build();
        let retry_after = HeaderBuilder::new()
            .schema(Some(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
                    .minimum(Some(0)),
            ))
            .description(Some("With `overloaded`: seconds to wait before retrying"))
            .build();
        for operation in operations(openapi) {
            let responses = &mut operation.responses.responses;
            if let Some(RefOr::T(unavailable)) = responses.get_mut("503") {
                unavailable.description.push_str(
                    "; or `overloaded`: every open partition is busy, nothing changed, retry \
                     after `Retry-After` seconds",
                );
                unavailable
                    .headers
                    .insert("Retry-After".to_owned(), retry_after.clone().into());
                responses.insert("500".to_owned(), corrupted.clone().into());
            }
        }
        error_codes(openapi);
        let metrics = OperationBuilder::new()
            .tag("operations")
            .operation_id(Some("metrics"))
            .summary(Some("Prometheus metrics"))
            .description(Some(
                "The server's metrics in the Prometheus text exposition format.",
            ))
            .response(
                "200",
                ResponseBuilder::new().description("The metrics").content(
                    "text/plain; version=0.0.4",
                    ContentBuilder::new()
                        .schema(Some(Object::with_type(SchemaType::Type(Type::String))))
                        .build(),
                ),
            );
        openapi
            .paths
            .paths
            .entry("/metrics".to_owned())
            .or_insert_with(|| PathItem::new(HttpMethod::Get, metrics));
    }
}

/// Properties of a body of which one is given, or at most one.
#[derive(Clone, Copy)]
enum Forms<'a> {
    OneOf(&'a [&'a str]),
    AtMostOne(&'a [&'a str]),
}

/// Makes component `name` (an object) a `oneOf` of copies of it, one for each way to pick a
/// property of every group of `forms` (or none, for an `AtMostOne` group): each copy requires
/// what it picked and lacks the group's other properties, so a body has exactly the
/// combinations the server takes. A boolean property is `true` where picked, `false` (or
/// absent) elsewhere.
fn exclusive_forms(openapi: &mut utoipa::openapi::OpenApi, name: &str, forms: &[Forms<'_>]) {
    let Some(schemas) = openapi.components.as_mut().map(|c| &mut c.schemas) else {
        return;
    };
    let Some(RefOr::T(Schema::Object(object))) = schemas.get(name).cloned() else {
        return;
    };
    let mut variants = vec![object.clone()];
    for group in forms {
        let (members, optional) = match group {
            Forms::OneOf(members) => (*members, false),
            Forms::AtMostOne(members) => (*members, true),
        };
        let picks = members.iter().map(Some).chain(optional.then_some(None));
        variants = picks
            .flat_map(|pick| {
                variants.iter().map(move |variant| {
                    let mut variant = variant.clone();
                    for member in members {
                        let picked = pick == Some(member);
                        let Some(RefOr::T(Schema::Object(property))) =
                            variant.properties.get_mut(*member)
                        else {
                            continue;
                        };
                        if property.schema_type == SchemaType::from(Type::Boolean) {
                            property.enum_values = Some(vec![picked.into()]);
                        } else if !picked {
                            variant.properties.remove(*member);
                        }
                        if picked {
                            variant.required.push((*member).to_owned());
                        }
                    }
                    variant
                })
            })
            .collect();
    }
    let mut one_of = OneOfBuilder::new().description(object.description.clone());
    for mut variant in variants {
        variant.description = None;
        one_of = one_of.item(Schema::Object(variant));
    }
    schemas.insert(name.to_owned(), RefOr::T(Schema::OneOf(one_of.build())));
}

/// What a server's configuration decides: the bearer requirement, the request limits, the
/// largest partition number and the longest wait.
struct Configured<'a>(&'a Config);

impl Modify for Configured<'_> {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let config = self.0;
        if !config.server.auth_token.is_empty() || !config.auth.tokens.is_empty() {
            let unauthorized = ResponseBuilder::new()
                .description("`unauthorized`: missing or wrong bearer token")
                .content("application/json", error_content())
                .build();
            let forbidden = ResponseBuilder::new()
                .description(
                    "`forbidden`: the token lacks the permission the operation needs on its \
                     topic (named in `permission`)",
                )
                .content("application/json", error_content())
                .build();
            let scoped = !config.auth.tokens.is_empty();
            let public = |id: Option<&str>| {
                id == Some("healthz") || (id == Some("metrics") && config.auth.metrics_public)
            };
            for operation in operations(openapi) {
                let id = operation.operation_id.as_deref();
                if public(id) {
                    // `security: []`: no requirement, rather than the document-wide bearer token.
                    operation.security = Some(Vec::new());
                    continue;
                }
                let responses = &mut operation.responses.responses;
                responses.insert("401".to_owned(), unauthorized.clone().into());
                // Any known token may list the topics (it sees those it may) and read this.
                if scoped && !matches!(id, Some("listTopics" | "openapi")) {
                    responses.insert("403".to_owned(), forbidden.clone().into());
                }
            }
            openapi
                .components
                .get_or_insert_with(Default::default)
                .add_security_scheme(
                    "bearerAuth",
                    SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
                );
            openapi.security = Some(vec![SecurityRequirement::new(
                "bearerAuth",
                Vec::<String>::new(),
            )]);
        }

        let log = &config.log;
        let payload = format!(
            "each payload's JSON text at most {} bytes (`log.max_record_bytes`)",
            log.max_record_bytes
        );
        let topics = topic_limits(config);
        let events = request_body(openapi, "produceEvents");
        events.description = Some(format!(
            "The events, in order: at least one, at most {} (`log.max_batch_size`) routed to \
             any one partition, {payload}.{topics}",
            log.max_batch_size
        ));
        let records = request_body(openapi, "appendRecords");
        records.description = Some(format!(
            "The records, in order: 1 to {} (`log.max_batch_size`), {payload}.{topics}",
            log.max_batch_size
        ));
        json_array(records).max_items = Some(log.max_batch_size);

        // Past the largest partition count, every partition is `404 unknown_partition`.
        let partitions = config
            .topics
            .values()
            .map(|topic| topic.log.partitions_per_topic)
            .fold(log.partitions_per_topic, u32::max);
        for partition in parameters(openapi, "partition") {
            if let Some(RefOr::T(Schema::Object(schema))) = partition.schema.as_mut() {
                schema.maximum = Some((partitions - 1).into());
            }
        }

        let wait = format!(
            " A longer wait is cut to {} (`server.max_wait_ms`).",
            config.server.max_wait_ms
        );
        for wait_ms in parameters(openapi, "waitMs") {
            wait_ms.description.get_or_insert_default().push_str(&wait);
        }

        let too_large = format!(
            "`payload_too_large`: the body is over {} bytes (`server.max_body_bytes`)",
            config.server.max_body_bytes
        );
        for operation in operations(openapi) {
            if let Some(RefOr::T(response)) = operation.responses.responses.get_mut("413") {
                response.description.clone_from(&too_large);
            }
        }
    }
}

/// The topics whose `[topics.<name>.log]` sets other produce limits than `[log]`, as a
/// sentence for the produce bodies (empty when there are none).
fn topic_limits(config: &Config) -> String {
    let own: Vec<String> = config
        .topics
        .iter()
        .filter(|(_, topic)| {
            (topic.log.max_batch_size, topic.log.max_record_bytes)
                != (config.log.max_batch_size, config.log.max_record_bytes)
        })
        .map(|(name, topic)| {
            format!(
                "`{name}` {} records and {} bytes",
                topic.log.max_batch_size, topic.log.max_record_bytes
            )
        })
        .collect();
    if own.is_empty() {
        String::new()
    } else {
        format!(" Topics with their own limits: {}.", own.join(", "))
    }
}

/// Every operation of the document.
fn operations(openapi: &mut utoipa::openapi::OpenApi) -> impl Iterator<Item = &mut Operation> {
    openapi.paths.paths.values_mut().flat_map(|item| {
        [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
    })
}

/// Every operation's parameter called `name`.
fn parameters<'a>(
    openapi: &'a mut utoipa::openapi::OpenApi,
    name: &'a str,
) -> impl Iterator<Item = &'a mut Parameter> {
    operations(openapi)
        .flat_map(|operation| operation.parameters.iter_mut().flatten())
        .filter_map(move |parameter| match parameter {
            RefOr::T(parameter) if parameter.name == name => Some(parameter),
            _ => None,
        })
}

/// The operation `id`; every id asked for is one of [`ApiDoc`]'s.
fn operation<'a>(openapi: &'a mut utoipa::openapi::OpenApi, id: &str) -> &'a mut Operation {
    operations(openapi)
        .find(|operation| operation.operation_id.as_deref() == Some(id))
        .unwrap_or_else(|| panic!("the document has no operation {id}"))
}

/// The request body of the operation `id`, which has one.
/// States the error codes in the description of the `code` of `ErrorDetail`, by HTTP status,
/// from [`ErrorCode`] (a client may meet a code it does not know yet: the schema lists none).
fn error_codes(openapi: &mut utoipa::openapi::OpenApi) {
    let mut by_status: Vec<(u16, Vec<String>)> = Vec::new();
    for code in ErrorCode::ALL {
        let named = format!("`{code}`");
        match by_status.last_mut() {
            Some((status, codes)) if *status == code.status() => codes.push(named),
            _ => by_status.push((code.status(), vec![named])),
        }
    }
    let listed: Vec<String> = by_status
        .iter()
        .map(|(status, codes)| format!("`{status}`: {}", codes.join(", ")))
        .collect();
    let code = ObjectBuilder::new()
        .schema_type(Type::String)
        .examples([ErrorCode::InvalidRequest.as_str()])
        .description(Some(format!(
            "A stable snake_case code. {}. Every 4xx and `overloaded` changed nothing \
             (`overloaded`: retry after `Retry-After`); `unavailable` may have; `corrupted`: the \
             partition's volume is damaged, and retrying does not help.",
            listed.join(". ")
        )))
        .build();
    let detail = openapi
        .components
        .as_mut()
        .and_then(|components| components.schemas.get_mut("ErrorDetail"));
    if let Some(RefOr::T(Schema::Object(detail))) = detail {
        detail
            .properties
            .insert("code".to_owned(), RefOr::T(Schema::Object(code)));
    }
}

fn request_body<'a>(openapi: &'a mut utoipa::openapi::OpenApi, id: &str) -> &'a mut RequestBody {
    match operation(openapi, id).request_body.as_mut() {
        Some(RefOr::T(body)) => body,
        _ => panic!("{id} has no request body of its own"),
    }
}

/// The array schema of a JSON request body that is an array.
fn json_array(body: &mut RequestBody) -> &mut Array {
    match body.content.get_mut("application/json") {
        Some(RefOr::T(Content {
            schema: Some(RefOr::T(Schema::Array(array))),
            ..
        })) => array,
        _ => panic!("the request body is not a JSON array"),
    }
}

/// A JSON body of the shared error schema.
fn error_content() -> Content {
    ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("ErrorBody")))
        .build()
}

/// `GET /openapi.json`: the document of this server's configuration, with its limits, and the
/// bearer requirement only when it has a token.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses(
        (status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object),
    )
)]
pub async fn openapi(state: web::Data<HttpState>) -> HttpResponse {
    // Written by `document` on the first request, once per worker (its doc comment is the
    // operation's description, so it says nothing of this).
    let json = state.openapi.get_or_init(|| {
        document(state.log.config())
            .to_json()
            .expect("the OpenAPI document serializes")
            .into()
    });
    HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(json.clone())
}
