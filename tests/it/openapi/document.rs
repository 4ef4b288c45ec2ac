//! The document itself: OpenAPI 3, every route of the contract with its statuses and path
//! parameters, one shared error schema, and the bearer token that it requires and states.

use std::collections::BTreeSet;

use actix_web::http::Method;
use actix_web::http::header::CONTENT_TYPE;
use actix_web::{App, test};
use serde_json::{Value, json};

use super::schema::{check, resolve};
use super::{Document, assert_documented, operation, request, send};
use crate::common::routes::operations;
use crate::common::{Route, TestLog};

/// How many operations the REST API has under `/topics` (the README's table, "REST API");
/// besides them, the document lists `/healthz`, `/metrics` and itself.
const API_OPERATIONS: usize = 23;

/// The operations that read from an offset, which retention may have deleted (`410`).
const READ_FROM_AN_OFFSET: &[&str] = &["readRecords", "pollGroup", "claimLease", "claimAnyLease"];

/// The statuses the contract gives `route` on a server with a token, stated by rule (without a
/// token, the same but `401`).
fn contract_statuses(route: &Route) -> BTreeSet<u16> {
    let post = route.method == Method::POST;
    let mut statuses = BTreeSet::new();
    // Success: a produce is accepted (202); a claim may find nothing to lease, and a deletion
    // and a nack answer without a body (204); everything else is 200.
    match route.path.rsplit('/').next().unwrap_or_default() {
        "records" if post => statuses.extend([202]),
        "leases" if post => statuses.extend([200, 204]),
        "nack" => statuses.extend([204]),
        _ if route.method == Method::DELETE => statuses.extend([204]),
        _ => statuses.extend([200]),
    }
    // `/healthz` is open and answers from memory.
    if route.path == "/healthz" {
        return statuses;
    }
    // Every other route requires the token.
    statuses.insert(401);
    // `/cluster` answers from memory, and 404 on a node that is not in a cluster.
    if route.path == "/cluster" {
        statuses.insert(404);
        return statuses;
    }
    // `/metrics` and the document do not reach the log.
    if !reaches_the_log(route) {
        return statuses;
    }
    // Anything that reaches the log may find a partition unavailable, or its files damaged.
    statuses.extend([500, 503]);
    // A name in the path, a query parameter or a body may be invalid.
    if route.path_parameters().next().is_some() || !route.query.is_empty() || route.has_body {
        statuses.insert(400);
    }
    // A partition, in the path or among a group commit's offsets, may not exist.
    if route.has("partition") || route.operation_id == "commitGroup" {
        statuses.insert(404);
    }
    // A lease may not be held, or leases may be off for the topic.
    if route.path.split('/').any(|segment| segment == "leases") {
        statuses.insert(409);
    }
    // A body may be too large.
    if route.has_body {
        statuses.insert(413);
    }
    // A read may start below the oldest offset.
    if READ_FROM_AN_OFFSET.contains(&route.operation_id.as_str()) {
        statuses.insert(410);
    }
    statuses
}

/// Whether `route` is one of the log's, under `/topics`.
fn reaches_the_log(route: &Route) -> bool {
    route.path == "/topics" || route.path.starts_with("/topics/")
}

/// The document of a server with a token is OpenAPI 3, lists as many routes as the contract
/// (the same as without a token), each with the statuses that the contract's rules give it
/// ([`contract_statuses`]), declares each path parameter, and describes errors with one shared
/// schema.
#[actix::test]
async fn document_lists_every_route_of_the_contract() {
    let log = TestLog::with(|config| config.server.auth_token = "s3cret".into());
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    let response = test::call_service(
        &app,
        request("get", "/openapi.json", None, Some("s3cret")).to_request(),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response
            .headers()
            .get(CONTENT_TYPE)
            .map(|value| value.as_bytes()),
        Some(&b"application/json"[..])
    );
    let document: Value = serde_json::from_slice(&test::read_body(response).await).expect("JSON");

    let version = document["openapi"].as_str().expect("an openapi field");
    assert!(version.starts_with("3."), "openapi {version}");
    assert_eq!(document["info"]["title"], "durability");
    assert_eq!(document["info"]["version"], env!("CARGO_PKG_VERSION"));

    // The routes: the same with a token as without one (`common::routes()`), and as many as
    // the contract has.
    let routes = operations(&document);
    let signature = |route: &Route| format!("{} {}", route.method, route.path);
    assert_eq!(
        routes.iter().map(signature).collect::<Vec<_>>(),
        crate::common::routes()
            .iter()
            .map(signature)
            .collect::<Vec<_>>(),
        "the routes of a server with a token differ"
    );
    let (api, others): (Vec<&Route>, Vec<&Route>) =
        routes.iter().partition(|route| reaches_the_log(route));
    assert_eq!(api.len(), API_OPERATIONS, "operations under /topics");
    assert_eq!(
        others.into_iter().map(signature).collect::<Vec<_>>(),
        [
            "GET /cluster",
            "GET /healthz",
            "GET /metrics",
            "GET /openapi.json"
        ]
    );

    assert_eq!(
        document["components"]["securitySchemes"]["bearerAuth"],
        json!({"type": "http", "scheme": "bearer"})
    );
    assert_eq!(document["security"], json!([{"bearerAuth": []}]));

    let error = &document["components"]["schemas"]["ErrorBody"];
    assert_eq!(error["required"], json!(["error"]), "{error}");
    let detail = resolve(&document, &error["properties"]["error"]);
    assert_eq!(detail["required"], json!(["code", "message"]), "{detail}");
    let error_ref = json!({"$ref": "#/components/schemas/ErrorBody"});
    let mut errors = Vec::new();
    let truncated = json!({"error": {
        "code": "log_truncated", "message": "gone", "requestedOffset": 0, "oldestOffset": 5,
    }});
    check(&document, &error_ref, &truncated, "$", &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
    check(
        &document,
        &error_ref,
        &json!({"error": {"code": "x"}}),
        "$",
        &mut errors,
    );
    assert_eq!(errors, ["$.error: the required field message is missing"]);
    errors.clear();
    let surprise = json!({"error": {"code": "x", "message": "m", "surprise": 1}});
    check(&document, &error_ref, &surprise, "$", &mut errors);
    assert_eq!(
        errors,
        ["$.error.surprise: the document does not describe it"]
    );

    let mut operation_ids = BTreeSet::new();
    for route in &routes {
        let (method, path) = (route.method.as_str().to_ascii_lowercase(), &route.path);
        let operation = operation(&document, &method, path);
        let id = &route.operation_id;
        assert!(operation_ids.insert(id), "operationId {id} is used twice");

        let documented: Vec<u16> = route.statuses().collect();
        let expected: Vec<u16> = contract_statuses(route).into_iter().collect();
        assert_eq!(documented, expected, "{route}");
        let responses = operation["responses"].as_object().expect("responses");
        for (status, response) in responses {
            if status.starts_with(['4', '5']) {
                assert_eq!(
                    response["content"]["application/json"]["schema"], error_ref,
                    "{method} {path} {status}"
                );
            }
        }

        let in_path: Vec<&str> = route.path_parameters().collect();
        let declared: Vec<&str> = operation["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|parameter| parameter["in"] == "path")
            .map(|parameter| parameter["name"].as_str().expect("a name"))
            .collect();
        assert_eq!(declared, in_path, "{method} {path}: path parameters");

        if path == "/healthz" {
            assert_eq!(operation["security"], json!([]), "/healthz needs no token");
        } else {
            assert!(operation.get("security").is_none(), "{method} {path}");
        }
    }

    let read = operation(
        &document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
    );
    let query: Vec<&str> = read["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter(|parameter| parameter["in"] == "query")
        .map(|parameter| parameter["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(query, ["from", "limit", "waitMs"]);
}

/// `GET /openapi.json` requires the bearer token like every route but `/healthz`, and the
/// `401` and `413` answers match the document too.
#[actix::test]
async fn document_requires_the_token() {
    let log = TestLog::with(|config| {
        config.server.auth_token = "s3cret".into();
        config.server.max_body_bytes = 64;
        config.log.max_record_bytes = 64;
    });
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    let (status, body) = send(
        &app,
        request("get", "/openapi.json", None, None).to_request(),
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (401, &json!("unauthorized"))
    );
    let wrong = request("get", "/openapi.json", None, Some("wrong")).to_request();
    assert_eq!(send(&app, wrong).await.0, 401);
    let right = request("get", "/openapi.json", None, Some("s3cret")).to_request();
    let (status, document) = send(&app, right).await;
    assert_eq!(status, 200);
    let document = &Document::new(document);
    assert_documented(document, "get", "/openapi.json", 401, &body);

    let big = json!([{"payload": "x".repeat(100)}]);
    let (status, body) = send(
        &app,
        request(
            "post",
            "/topics/t/partitions/0/records",
            Some(&big),
            Some("s3cret"),
        )
        .to_request(),
    )
    .await;
    assert_eq!(status, 413);
    assert_documented(
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/records",
        status,
        &body,
    );
}

/// A server without a token serves a document without a security requirement and without
/// `401` answers: no operation requires anything, none answers `401`, and each lists the
/// statuses of the contract but that one (with a token, see
/// `document_lists_every_route_of_the_contract`).
#[actix::test]
async fn no_security_without_a_token() {
    let open = TestLog::with(|_| {});
    let app =
        test::init_service(App::new().configure(durability::http::service(open.log.clone()))).await;
    let (_, document) = send(
        &app,
        request("get", "/openapi.json", None, None).to_request(),
    )
    .await;
    assert!(
        document.get("security").is_none(),
        "{}",
        document["security"]
    );
    assert!(
        document["components"].get("securitySchemes").is_none(),
        "{}",
        document["components"]["securitySchemes"]
    );
    for route in operations(&document) {
        let operation = operation(
            &document,
            &route.method.as_str().to_ascii_lowercase(),
            &route.path,
        );
        assert!(operation.get("security").is_none(), "{route}");
        assert!(
            operation["responses"].get("401").is_none(),
            "{route} lists a 401 that a server without a token never answers"
        );
        let mut expected = contract_statuses(&route);
        expected.remove(&401);
        assert_eq!(
            route.statuses().collect::<Vec<_>>(),
            expected.into_iter().collect::<Vec<_>>(),
            "{route}"
        );
    }
}

/// The document's prose is plain text: the handlers' doc comments become its descriptions,
/// and no Rust link (``[`name`]``, a `crate::` path) shows in any of them.
#[actix::test]
async fn descriptions_are_plain_prose() {
    let open = TestLog::with(|_| {});
    let app =
        test::init_service(App::new().configure(durability::http::service(open.log.clone()))).await;
    let (status, document) = send(
        &app,
        request("get", "/openapi.json", None, None).to_request(),
    )
    .await;
    assert_eq!(status, 200);
    let mut texts = Vec::new();
    collect_texts(&document, &mut texts);
    assert!(texts.len() > 100, "{} texts", texts.len());
    let leaks: Vec<_> = texts
        .iter()
        .filter(|text| text.contains("[`") || text.contains("crate::"))
        .collect();
    assert!(leaks.is_empty(), "{leaks:#?}");
}

/// Every `description` and `summary` of `value`, at any depth.
fn collect_texts<'a>(value: &'a Value, texts: &mut Vec<&'a str>) {
    match value {
        Value::Object(members) => {
            for (name, member) in members {
                match (name.as_str(), member) {
                    ("description" | "summary", Value::String(text)) => texts.push(text),
                    _ => collect_texts(member, texts),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_texts(item, texts)),
        _ => {}
    }
}
