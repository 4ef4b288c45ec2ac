//! The bearer token: without it every route but `/healthz` is `401 unauthorized`.

use actix_web::http::Method;
use actix_web::{App, test};
use serde_json::{Value, json};

use super::{assert_error, build, uri_of};
use crate::common::{TestLog, respond, routes, stored_partitions};

/// With an auth token, a missing, wrong or malformed `Authorization` is `401 unauthorized` on
/// every route of the document, and on unknown paths, and writes nothing; `/healthz` stays
/// open.
#[actix::test]
async fn unauthorized_is_401() {
    let t = TestLog::with(|config| config.server.auth_token = "s3cret".into());
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    // Every route of the document but `/healthz` (checked below), and a path that is none.
    let mut requests: Vec<(Method, String)> = routes()
        .iter()
        .filter(|route| route.path != "/healthz")
        .map(|route| (route.method.clone(), uri_of(route, &[])))
        .collect();
    requests.push((Method::GET, "/nowhere".to_owned()));
    let headers = [
        None,
        Some("Bearer wrong"),
        Some("Bearer s3cret "),
        Some("Bearer S3CRET"),
        Some("Basic s3cret"),
        Some("s3cret"),
        Some("Bearer"),
    ];
    for (method, uri) in &requests {
        for header in headers {
            let mut request = test::TestRequest::default().method(method.clone()).uri(uri);
            if let Some(header) = header {
                request = request.insert_header(("authorization", header));
            }
            if [Method::POST, Method::PUT].contains(method) {
                request = request.set_payload(r#"[{"partitionKey": "k", "payload": 1}]"#);
            }
            let response = test::call_service(&app, request.to_request()).await;
            let status = response.status().as_u16();
            let body: Value = test::read_body_json(response).await;
            assert_error(&(status, body), 401, "unauthorized");
        }
    }
    assert!(stored_partitions(&t.config.storage.data_dir).is_empty());
    let (status, body) = call!(app, Method::GET, "/healthz", None);
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    let request = test::TestRequest::get()
        .uri("/topics")
        .insert_header(("authorization", "Bearer s3cret"))
        .to_request();
    let response = test::call_service(&app, request).await;
    assert_eq!(response.status().as_u16(), 200);
}
