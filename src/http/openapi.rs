//! The OpenAPI document of the REST server, generated with `utoipa` from the handlers'
//! `#[utoipa::path]` attributes and schema types, and served at `GET /openapi.json` so that
//! clients can be generated from it. It requires the bearer token like every route except
//! `/healthz`.
//!
//! Use [`ApiDoc`] to write the document without a server:
//!
//! ```
//! use durability::http::openapi::{ApiDoc, OpenApi};
//!
//! let json = ApiDoc::openapi().to_pretty_json().unwrap();
//! assert!(json.contains("/topics/{topic}/records"));
//! ```

use std::sync::LazyLock;

use actix_web::HttpResponse;
use actix_web::http::header::ContentType;
/// The trait behind [`ApiDoc::openapi`], re-exported so that callers need no `utoipa`
/// dependency of their own.
pub use utoipa::OpenApi;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{Object, SchemaType, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref};

use super::{consume, leases, operations, produce, schema};

/// The document: every route of the API, its bodies and its errors.
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
        produce::events,
        produce::records,
        consume::read,
        consume::poll,
        consume::commit,
        consume::put_cursor,
        consume::cursors,
        consume::delete_cursor,
        leases::claim,
        leases::claim_any,
        leases::ack,
        leases::nack,
        leases::extend,
        leases::list,
        operations::bounds,
        operations::load,
        operations::trim,
        operations::forget_cold,
        operations::topics,
        operations::topic,
        operations::healthz,
        openapi,
    ),
    components(schemas(schema::ErrorBody)),
    modifiers(&Additions),
    security(("bearerAuth" = [])),
    tags(
        (name = "produce", description = "Append records"),
        (name = "consume", description = "Read pages, poll and commit consumer groups' cursors"),
        (name = "leases", description = "Parallel consumers sharing one group through leased ranges"),
        (name = "operations", description = "Bounds, load, retention, topics, health"),
    )
)]
pub struct ApiDoc;

/// What the derive cannot say: the bearer scheme, `/healthz` open to all, and `/metrics`
/// (Prometheus text, not JSON).
struct Additions;

impl utoipa::Modify for Additions {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearerAuth",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        // `security: []` (no requirement) rather than the document-wide bearer token.
        if let Some(get) = openapi
            .paths
            .paths
            .get_mut("/healthz")
            .and_then(|item| item.get.as_mut())
        {
            get.security = Some(Vec::new());
        }
        // Every operation that reaches a partition's storage may meet damaged files.
        let corrupted = ResponseBuilder::new()
            .description(
                "`corrupted`: the partition's files are damaged; it refuses writes and retrying \
                 does not help",
            )
            .content(
                "application/json",
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("ErrorBody")))
                    .build(),
            )
            .build();
        for item in openapi.paths.paths.values_mut() {
            let operations = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for operation in operations.into_iter().flatten() {
                if operation.responses.responses.contains_key("503") {
                    operation
                        .responses
                        .responses
                        .insert("500".to_owned(), corrupted.clone().into());
                }
            }
        }
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
            )
            .response(
                "401",
                ResponseBuilder::new()
                    .description("`unauthorized`: missing or wrong bearer token")
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ErrorBody")))
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

/// The document as JSON, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    ApiDoc::openapi()
        .to_json()
        .expect("the OpenAPI document serializes")
});

/// `GET /openapi.json`: the OpenAPI document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses(
        (status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object),
        (status = 401, description = "`unauthorized`: missing or wrong bearer token", body = schema::ErrorBody),
    )
)]
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type(ContentType::json())
        .body(DOCUMENT.as_str())
}
