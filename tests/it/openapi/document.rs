//! The document itself: OpenAPI 3, every route of the contract with its statuses and path
//! parameters, one shared error schema, and the bearer token that it requires and states.

use actix_web::http::header::CONTENT_TYPE;
use actix_web::{App, test};
use serde_json::{Value, json};

use super::schema::{check, resolve};
use super::{assert_documented, operation, operations, request, send};
use crate::common::TestLog;

/// Every `(method, path)` of `spec/API.md`, plus the document itself, with the statuses the
/// contract gives it on a server with a token (without one, no `401`).
const ROUTES: &[(&str, &str, &str)] = &[
    ("post", "/topics/{topic}/records", "202 400 401 413 500 503"),
    (
        "post",
        "/topics/{topic}/partitions/{partition}/records",
        "202 400 401 404 413 500 503",
    ),
    (
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "200 400 401 404 410 500 503",
    ),
    (
        "get",
        "/topics/{topic}/groups/{group}/poll",
        "200 400 401 410 500 503",
    ),
    (
        "post",
        "/topics/{topic}/groups/{group}/commit",
        "200 400 401 404 413 500 503",
    ),
    (
        "put",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "200 400 401 404 413 500 503",
    ),
    (
        "get",
        "/topics/{topic}/partitions/{partition}/cursors",
        "200 400 401 404 500 503",
    ),
    (
        "delete",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "204 400 401 404 500 503",
    ),
    (
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "200 204 400 401 404 409 410 500 503",
    ),
    (
        "post",
        "/topics/{topic}/groups/{group}/leases",
        "200 204 400 401 409 410 500 503",
    ),
    (
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/ack",
        "200 400 401 404 409 500 503",
    ),
    (
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
        "204 400 401 404 409 413 500 503",
    ),
    (
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/extend",
        "200 400 401 404 409 500 503",
    ),
    (
        "get",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "200 400 401 404 409 500 503",
    ),
    (
        "get",
        "/topics/{topic}/partitions/{partition}/bounds",
        "200 400 401 404 500 503",
    ),
    (
        "get",
        "/topics/{topic}/partitions/{partition}/load",
        "200 400 401 404 500 503",
    ),
    (
        "post",
        "/topics/{topic}/partitions/{partition}/trim",
        "200 400 401 404 500 503",
    ),
    (
        "post",
        "/topics/{topic}/partitions/{partition}/cold/forget",
        "200 400 401 404 413 500 503",
    ),
    ("get", "/topics", "200 401 500 503"),
    ("get", "/topics/{topic}", "200 400 401 500 503"),
    ("get", "/healthz", "200"),
    ("get", "/metrics", "200 401"),
    ("get", "/openapi.json", "200 401"),
];

/// The document of a server with a token is OpenAPI 3, lists exactly the routes of the contract
/// with their methods and statuses, declares each path parameter, and describes errors with one
/// shared schema.
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

    let mut listed: Vec<(String, String)> = operations(&document)
        .into_iter()
        .map(|(method, path, _)| (method.to_owned(), path.to_owned()))
        .collect();
    listed.sort();
    let mut expected: Vec<(String, String)> = ROUTES
        .iter()
        .map(|(method, path, _)| (method.to_string(), path.to_string()))
        .collect();
    expected.sort();
    assert_eq!(
        listed, expected,
        "the document's routes differ from the contract's"
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

    let mut operation_ids = std::collections::BTreeSet::new();
    for (method, path, statuses) in ROUTES {
        let operation = operation(&document, method, path);
        let id = operation["operationId"].as_str().expect("an operationId");
        assert!(operation_ids.insert(id), "operationId {id} is used twice");

        let responses = operation["responses"].as_object().expect("responses");
        let documented: Vec<&str> = responses.keys().map(String::as_str).collect();
        let expected: Vec<&str> = statuses.split(' ').collect();
        assert_eq!(documented, expected, "{method} {path}");
        for (status, response) in responses {
            if status.starts_with(['4', '5']) {
                assert_eq!(
                    response["content"]["application/json"]["schema"], error_ref,
                    "{method} {path} {status}"
                );
            }
        }

        let in_path: Vec<&str> = path
            .split('/')
            .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        let declared: Vec<&str> = operation["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|parameter| parameter["in"] == "path")
            .map(|parameter| parameter["name"].as_str().expect("a name"))
            .collect();
        assert_eq!(declared, in_path, "{method} {path}: path parameters");

        if *path == "/healthz" {
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
    assert_documented(&document, "get", "/openapi.json", 401, &body);

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
        &document,
        "post",
        "/topics/{topic}/partitions/{partition}/records",
        status,
        &body,
    );
}

/// A server without a token serves a document without a security requirement and without
/// `401` answers: no operation requires anything, and none answers `401` (with a token, see
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
    for (method, path, operation) in operations(&document) {
        assert!(operation.get("security").is_none(), "{method} {path}");
        assert!(
            operation["responses"].get("401").is_none(),
            "{method} {path} lists a 401 that a server without a token never answers"
        );
    }
}
