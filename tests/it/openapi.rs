//! The OpenAPI document at `GET /openapi.json`. It is an OpenAPI 3 document that lists every
//! route of the contract (`spec/API.md`) with its methods, and it sits behind the bearer token.
//! Its schemas describe what the server really answers: real requests are checked against
//! them, status code and body.

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::Method;
use actix_web::http::header::{AUTHORIZATION, CONTENT_TYPE, ContentType};
use actix_web::{App, test};
use serde_json::{Map, Value, json};

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

/// The HTTP methods an OpenAPI path item may hold.
const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Sends `request` and returns the status and the JSON body (`Null` when empty).
async fn send<S, R, B>(app: &S, request: R) -> (u16, Value)
where
    S: Service<R, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let response = test::call_service(app, request).await;
    let status = response.status().as_u16();
    let body = test::read_body(response).await;
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).expect("a JSON body")
    };
    (status, body)
}

/// A request with `method` to `uri`, with a JSON body and a bearer token when given.
fn request(
    method: &str,
    uri: &str,
    body: Option<&Value>,
    token: Option<&str>,
) -> test::TestRequest {
    let method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).expect("a method");
    let mut request = test::TestRequest::default().method(method).uri(uri);
    if let Some(body) = body {
        request = request
            .insert_header(ContentType::json())
            .set_payload(body.to_string());
    }
    if let Some(token) = token {
        request = request.insert_header((AUTHORIZATION, format!("Bearer {token}")));
    }
    request
}

/// Sends a request for the route `$template` (as the document writes it) to `$uri`, with an
/// optional JSON body, checks the answer against the document, and evaluates to
/// `(status, body)`.
macro_rules! exchange {
    ($app:expr, $document:expr, $method:literal, $template:literal, $uri:expr $(, $body:expr)?) => {{
        let body: Option<Value> = None $(.or(Some($body)))?;
        let uri: &str = &$uri;
        let (status, answer) = send($app, request($method, uri, body.as_ref(), None).to_request()).await;
        assert_documented($document, $method, $template, status, &answer);
        (status, answer)
    }};
}

/// The document's operation `method` on `template`.
fn operation<'a>(document: &'a Value, method: &str, template: &str) -> &'a Value {
    let operation = &document["paths"][template][method];
    assert!(
        operation.is_object(),
        "the document has no {method} {template}"
    );
    operation
}

/// Every operation of the document, as `(method, path, operation)`.
fn operations(document: &Value) -> Vec<(&str, &str, &Value)> {
    let paths = document["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            METHODS.iter().filter_map(move |method| {
                item.get(*method)
                    .map(|operation| (*method, path.as_str(), operation))
            })
        })
        .collect()
}

/// Checks an answer against the document: the operation lists its status, and the body matches
/// that response's JSON schema (or is empty when the response has no content).
fn assert_documented(document: &Value, method: &str, template: &str, status: u16, body: &Value) {
    let response = &operation(document, method, template)["responses"][status.to_string()];
    assert!(
        response.is_object(),
        "{method} {template} answered {status}, which the document does not list: {body}"
    );
    let Some(content) = response.get("content") else {
        assert_eq!(
            body,
            &Value::Null,
            "{method} {template} {status}: an undocumented body"
        );
        return;
    };
    let schema = &content["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {template} {status}: no JSON schema"
    );
    let mut errors = Vec::new();
    check(document, schema, body, "$", &mut errors);
    assert!(
        errors.is_empty(),
        "{method} {template} {status}: the body does not match the document:\n{}\nbody: {body}",
        errors.join("\n")
    );
}

/// Follows a `$ref` to `#/components/schemas/...` (repeatedly).
fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
        return schema;
    };
    let name = reference
        .strip_prefix("#/components/schemas/")
        .unwrap_or_else(|| panic!("unexpected $ref {reference}"));
    let target = &document["components"]["schemas"][name];
    assert!(target.is_object(), "dangling $ref {reference}");
    resolve(document, target)
}

/// Checks `value` against `schema`, for the subset of JSON Schema that utoipa writes (`$ref`,
/// `oneOf`, `allOf`, `type`, `enum`, `minimum`, `items`, `properties`, `required`,
/// `additionalProperties`). An object may not carry a field that its schema does not describe,
/// so a field that a handler adds without documenting it fails too.
fn check(document: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let schema = resolve(document, schema);
    if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
        let matching = options
            .iter()
            .filter(|option| {
                let mut mismatches = Vec::new();
                check(document, option, value, at, &mut mismatches);
                mismatches.is_empty()
            })
            .count();
        if matching != 1 {
            errors.push(format!(
                "{at}: {value} matches {matching} of the oneOf options"
            ));
        }
        return;
    }
    if let Some(members) = schema.get("allOf").and_then(Value::as_array) {
        match value {
            Value::Object(fields) => check_object(document, schema, fields, at, errors),
            _ => members
                .iter()
                .for_each(|member| check(document, member, value, at, errors)),
        }
        return;
    }
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(name) => vec![name.as_str()],
            Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
            other => panic!("{at}: unexpected type {other}"),
        };
        if !types.iter().any(|name| has_type(value, name)) {
            errors.push(format!("{at}: {value} is not of type {types:?}"));
            return;
        }
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(value)
    {
        errors.push(format!("{at}: {value} is not one of {values:?}"));
    }
    if let (Some(minimum), Some(number)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) && number < minimum
    {
        errors.push(format!("{at}: {value} is below the minimum {minimum}"));
    }
    match value {
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (index, element) in items.iter().enumerate() {
                    check(document, item, element, &format!("{at}[{index}]"), errors);
                }
            }
        }
        Value::Object(fields) => check_object(document, schema, fields, at, errors),
        _ => {}
    }
}

/// Whether `value` is of the JSON Schema type `name`.
fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        other => panic!("unknown JSON Schema type {other}"),
    }
}

/// What an object schema and the members of its `allOf` say about an object's fields.
#[derive(Default)]
struct ObjectRules<'a> {
    properties: Map<String, Value>,
    required: Vec<&'a str>,
    additional: Option<&'a Value>,
    described: bool,
}

/// Collects the object rules of `schema` and of its `allOf` members.
fn gather<'a>(document: &'a Value, schema: &'a Value, rules: &mut ObjectRules<'a>) {
    let schema = resolve(document, schema);
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        rules.described = true;
        rules.properties.extend(properties.clone());
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        rules
            .required
            .extend(required.iter().filter_map(Value::as_str));
    }
    if let Some(additional) = schema.get("additionalProperties") {
        rules.described = true;
        rules.additional = Some(additional);
    }
    for member in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        gather(document, member, rules);
    }
}

/// Checks an object's fields: the required ones are there and each one is described.
fn check_object(
    document: &Value,
    schema: &Value,
    fields: &Map<String, Value>,
    at: &str,
    errors: &mut Vec<String>,
) {
    let mut rules = ObjectRules::default();
    gather(document, schema, &mut rules);
    for name in &rules.required {
        if !fields.contains_key(*name) {
            errors.push(format!("{at}: the required field {name} is missing"));
        }
    }
    for (name, field) in fields {
        let at = format!("{at}.{name}");
        match (rules.properties.get(name), rules.additional) {
            (Some(property), _) => check(document, property, field, &at, errors),
            (None, Some(additional)) if additional.is_object() => {
                check(document, additional, field, &at, errors)
            }
            (None, Some(Value::Bool(true))) => {}
            _ if rules.described => errors.push(format!("{at}: the document does not describe it")),
            _ => {}
        }
    }
}

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

/// Real answers of every route, successes and errors, match the document's statuses and
/// schemas.
#[actix::test]
async fn answers_match_the_document() {
    let log = TestLog::with(|config| config.log.partitions_per_topic = 2);
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    let (_, document) = send(
        &app,
        request("get", "/openapi.json", None, None).to_request(),
    )
    .await;
    let document = &document;

    exchange!(&app, document, "get", "/healthz", "/healthz");
    exchange!(&app, document, "get", "/openapi.json", "/openapi.json");

    // Produce.
    let events = json!([
        {"partitionKey": "a", "payload": {"n": 1}, "key": "k1"},
        {"partitionKey": "b", "payload": [1, "two"]},
    ]);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/records",
        "/topics/t/records",
        events
    );
    assert_eq!(status, 202);
    let records = json!([{"payload": "x"}, {"payload": null, "key": "k2"}, {"payload": 3.5}]);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records",
        records
    );
    assert_eq!(status, 202);

    // Read and consume.
    let (status, page) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records?from=0&limit=10&waitMs=0"
    );
    assert_eq!(status, 200);
    assert!(
        page["records"]
            .as_array()
            .is_some_and(|records| records.len() >= 3),
        "{page}"
    );
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/groups/{group}/poll",
        "/topics/t/groups/g/poll?limit=10"
    );
    assert_eq!(status, 200);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/groups/{group}/commit",
        "/topics/t/groups/g/commit",
        json!({"offsets": {"0": 1}})
    );
    assert_eq!(status, 200);
    let (status, _) = exchange!(
        &app,
        document,
        "put",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g",
        json!({"offset": 2})
    );
    assert_eq!(status, 200);
    let (status, cursors) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/cursors",
        "/topics/t/partitions/0/cursors"
    );
    assert_eq!((status, &cursors["cursors"]["g"]), (200, &json!(2)));
    let (status, _) = exchange!(
        &app,
        document,
        "delete",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g"
    );
    assert_eq!(status, 204);

    // Leases.
    let (status, lease) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases?limit=1"
    );
    assert_eq!(status, 200);
    let batch = lease["batchId"].as_str().expect("a batchId").to_owned();
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases?limit=1"
    );
    assert_eq!(status, 204, "max_parallelism 1: nothing more now");
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases"
    );
    assert_eq!(status, 200);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/extend",
        format!("/topics/t/partitions/0/groups/w/leases/{batch}/extend")
    );
    assert_eq!(status, 200);
    let (status, acked) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/ack",
        format!("/topics/t/partitions/0/groups/w/leases/{batch}/ack")
    );
    assert_eq!((status, &acked["cursor"]), (200, &json!(1)));
    let (status, error) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/ack",
        format!("/topics/t/partitions/0/groups/w/leases/{batch}/ack")
    );
    assert_eq!(
        (status, &error["error"]["code"]),
        (409, &json!("lease_not_held"))
    );
    let (status, lease) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/groups/{group}/leases",
        "/topics/t/groups/v/leases?limit=1"
    );
    assert_eq!(status, 200);
    let nack = format!(
        "/topics/t/partitions/{}/groups/v/leases/{}/nack",
        lease["partition"],
        lease["batchId"].as_str().expect("a batchId")
    );
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
        nack,
        json!({"delayMs": 0})
    );
    assert_eq!(status, 204);

    // Operations.
    for (template, uri) in [
        (
            "/topics/{topic}/partitions/{partition}/bounds",
            "/topics/t/partitions/0/bounds",
        ),
        (
            "/topics/{topic}/partitions/{partition}/load",
            "/topics/t/partitions/0/load",
        ),
    ] {
        let (status, body) = send(&app, request("get", uri, None, None).to_request()).await;
        assert_documented(document, "get", template, status, &body);
        assert_eq!(status, 200, "{body}");
    }
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/trim",
        "/topics/t/partitions/0/trim"
    );
    assert_eq!(status, 200);
    exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/cold/forget",
        "/topics/t/partitions/0/cold/forget",
        json!({"before": 0})
    );
    let (status, _) = exchange!(&app, document, "get", "/topics", "/topics");
    assert_eq!(status, 200);
    let (status, topic) = exchange!(&app, document, "get", "/topics/{topic}", "/topics/t");
    assert_eq!(
        (status, topic["partitions"].as_array().map(Vec::len)),
        (200, Some(2))
    );

    // Errors.
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/9/records"
    );
    assert_eq!(status, 404);
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records?from=999"
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records?limit=0"
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(&app, document, "get", "/topics/{topic}", "/topics/.hidden");
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/records",
        "/topics/t/records",
        json!([{"payload": 1}])
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/groups/{group}/commit",
        "/topics/t/groups/g/commit",
        json!({"offsets": {"0": 999}})
    );
    assert_eq!(status, 400);
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

/// The document states the rules the server enforces on requests, with this server's limits:
/// `minItems` on both produce bodies and `maxItems` (`log.max_batch_size`) on a partition's, the
/// longest long-poll wait (`server.max_wait_ms`),
/// the dedup key's `minLength`/`maxLength`, `minimum: 0` on every offset, `before` and
/// `delayMs`, the commit's partition-number keys, and a nack body that may be left out but is
/// never `null`. Requests at each edge are then answered as the document says.
#[actix::test]
async fn document_states_the_request_rules() {
    let log = TestLog::with(|config| {
        config.log.max_batch_size = 3;
        config.log.max_record_bytes = 512;
        config.server.max_body_bytes = 4096;
        config.server.max_wait_ms = 250;
    });
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    let (_, document) = send(
        &app,
        request("get", "/openapi.json", None, None).to_request(),
    )
    .await;
    let document = &document;
    let schemas = &document["components"]["schemas"];
    let body = |method: &str, path: &str| operation(document, method, path)["requestBody"].clone();

    // Produce bodies.
    let events = body("post", "/topics/{topic}/records");
    let records = body("post", "/topics/{topic}/partitions/{partition}/records");
    assert_eq!(
        events["content"]["application/json"]["schema"]["minItems"],
        1
    );
    assert_eq!(
        records["content"]["application/json"]["schema"]["minItems"],
        1
    );
    assert_eq!(
        records["content"]["application/json"]["schema"]["maxItems"],
        3
    );
    for description in [&events["description"], &records["description"]] {
        let description = description.as_str().expect("a description");
        assert!(
            description.contains("at most 3") || description.contains("1 to 3"),
            "{description}"
        );
        assert!(description.contains("512 bytes"), "{description}");
    }
    for schema in ["EventBody", "RecordBody"] {
        let key = &schemas[schema]["properties"]["key"];
        assert_eq!(key["minLength"], 1, "{schema}");
        assert_eq!(
            key["maxLength"],
            durability::store::MAX_KEY_BYTES,
            "{schema}"
        );
    }
    let too_large =
        operation(document, "post", "/topics/{topic}/records")["responses"]["413"]["description"]
            .as_str()
            .expect("a 413");
    assert!(too_large.contains("4096 bytes"), "{too_large}");

    // Offsets and delays.
    assert_eq!(schemas["CursorBody"]["properties"]["offset"]["minimum"], 0);
    assert_eq!(schemas["ForgetBody"]["properties"]["before"]["minimum"], 0);
    assert_eq!(schemas["NackBody"]["properties"]["delayMs"]["minimum"], 0);
    let offsets = &schemas["CommitBody"]["properties"]["offsets"];
    assert_eq!(offsets["additionalProperties"]["minimum"], 0);
    assert_eq!(offsets["propertyNames"]["pattern"], "^[0-9]+$");
    let read = operation(
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
    );
    for parameter in read["parameters"].as_array().expect("parameters") {
        if ["from", "waitMs"].contains(&parameter["name"].as_str().expect("a name")) {
            assert_eq!(parameter["schema"]["minimum"], 0, "{parameter}");
        }
    }

    // Long polls: the longest wait.
    for (method, path) in [
        ("get", "/topics/{topic}/partitions/{partition}/records"),
        ("get", "/topics/{topic}/groups/{group}/poll"),
    ] {
        let parameters = operation(document, method, path)["parameters"].clone();
        let wait = parameters
            .as_array()
            .expect("parameters")
            .iter()
            .find(|parameter| parameter["name"] == "waitMs")
            .expect("a waitMs parameter")
            .clone();
        let description = wait["description"].as_str().expect("a description");
        assert!(description.contains("cut to 250"), "{description}");
    }

    // The nack body: optional, and an object when sent.
    let nack = body(
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
    );
    assert_eq!(nack["required"], false);
    assert_eq!(
        nack["content"]["application/json"]["schema"],
        json!({"$ref": "#/components/schemas/NackBody"})
    );

    // The server at each edge.
    let records = "/topics/t/partitions/0/records";
    let record = |key: &str| json!({"payload": 1, "key": key});
    for (body, status) in [
        (json!([]), 400),
        (json!([record("")]), 400),
        (json!([record(&"k".repeat(1025))]), 400),
        (json!([record(&"k".repeat(1024))]), 202),
        (
            json!([{"payload": 1}, {"payload": 2}, {"payload": 3}, {"payload": 4}]),
            400,
        ),
        (json!([{"payload": 1}, {"payload": 2}, {"payload": 3}]), 202),
    ] {
        let (answered, _) = exchange!(
            &app,
            document,
            "post",
            "/topics/{topic}/partitions/{partition}/records",
            records,
            body.clone()
        );
        assert_eq!(answered, status, "{body}");
    }
    for (body, status) in [
        (json!([]), 400),
        (json!([{"partitionKey": "a", "payload": 1, "key": ""}]), 400),
        (
            json!([{"partitionKey": "a", "payload": 1, "key": "k"}]),
            202,
        ),
    ] {
        let (answered, _) = exchange!(
            &app,
            document,
            "post",
            "/topics/{topic}/records",
            "/topics/t/records",
            body.clone()
        );
        assert_eq!(answered, status, "{body}");
    }
    for (body, status) in [
        (json!({"offsets": {"x": 0}}), 400),
        (json!({"offsets": {"": 0}}), 400),
        (json!({"offsets": {"0": -1}}), 400),
        (json!({"offsets": {"0": 0}}), 200),
    ] {
        let (answered, _) = exchange!(
            &app,
            document,
            "post",
            "/topics/{topic}/groups/{group}/commit",
            "/topics/t/groups/g/commit",
            body.clone()
        );
        assert_eq!(answered, status, "{body}");
    }
    let (status, _) = exchange!(
        &app,
        document,
        "put",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g",
        json!({"offset": -1})
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/cold/forget",
        "/topics/t/partitions/0/cold/forget",
        json!({"before": -1})
    );
    assert_eq!(status, 400);
    let (status, _) = exchange!(
        &app,
        document,
        "get",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records?from=-1"
    );
    assert_eq!(status, 400);

    let (status, lease) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases?limit=1"
    );
    assert_eq!(status, 200);
    let nack = format!(
        "/topics/t/partitions/0/groups/w/leases/{}/nack",
        lease["batchId"].as_str().expect("a batchId")
    );
    for (body, status) in [
        (Some(json!(null)), 400),
        (Some(json!({"delayMs": -1})), 400),
        (None, 204),
    ] {
        let request = request("post", &nack, body.as_ref(), None).to_request();
        let (answered, answer) = send(&app, request).await;
        assert_documented(
            document,
            "post",
            "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
            answered,
            &answer,
        );
        assert_eq!(answered, status, "{body:?}");
    }
}

/// JSON Schema counts a number with a whole value as an `integer` however it is written, so
/// the server takes `1.0` and `1e0` wherever the document says `integer` in a body: commit
/// offsets, a cursor's offset, `before` and `delayMs`. `1.5` stays refused.
#[actix::test]
async fn whole_numbers_are_integers_in_bodies() {
    let log = TestLog::with(|_| {});
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    let (_, document) = send(
        &app,
        request("get", "/openapi.json", None, None).to_request(),
    )
    .await;
    let document = &document;
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/records",
        "/topics/t/partitions/0/records",
        json!([{"payload": 1}, {"payload": 2}])
    );
    assert_eq!(status, 202);

    for (body, status) in [
        (json!({"offsets": {"0": 1.5}}), 400),
        (json!({"offsets": {"0": 1.0}}), 200),
    ] {
        let (answered, _) = exchange!(
            &app,
            document,
            "post",
            "/topics/{topic}/groups/{group}/commit",
            "/topics/t/groups/g/commit",
            body.clone()
        );
        assert_eq!(answered, status, "{body}");
    }
    let (status, cursor) = exchange!(
        &app,
        document,
        "put",
        "/topics/{topic}/partitions/{partition}/cursors/{group}",
        "/topics/t/partitions/0/cursors/g",
        json!({"offset": 2.0})
    );
    assert_eq!((status, &cursor["cursor"]), (200, &json!(2)));
    let forget = test::TestRequest::post()
        .uri("/topics/t/partitions/0/cold/forget")
        .insert_header(ContentType::json())
        .set_payload(r#"{"before": 1e0}"#)
        .to_request();
    let (status, answer) = send(&app, forget).await;
    assert_documented(
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/cold/forget",
        status,
        &answer,
    );
    assert_eq!(status, 200, "{answer}");

    let (status, lease) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases",
        "/topics/t/partitions/0/groups/w/leases?limit=1"
    );
    assert_eq!(status, 200);
    let (status, _) = exchange!(
        &app,
        document,
        "post",
        "/topics/{topic}/partitions/{partition}/groups/{group}/leases/{batchId}/nack",
        format!(
            "/topics/t/partitions/0/groups/w/leases/{}/nack",
            lease["batchId"].as_str().expect("a batchId")
        ),
        json!({"delayMs": 0.0})
    );
    assert_eq!(status, 204);
}
