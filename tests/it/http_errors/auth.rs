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

/// What each operation of the document needs of a scoped token, as the README's Security and
/// the API contract say: written here, apart from the server's own table, so that the two are
/// checked against each other. A new operation fails this test until it is placed here.
fn permission_of(operation_id: &str) -> Option<&'static str> {
    match operation_id {
        "appendRecords" | "produceEvents" => Some("produce"),
        "readRecords" | "pollGroup" | "commitGroup" | "listCursors" | "putCursor" | "getCursor"
        | "claimAnyLease" | "claimLease" | "listLeases" | "ackLease" | "nackLease"
        | "extendLease" | "getBounds" | "getLoad" | "getTopic" | "getTopicGroups" => {
            Some("consume")
        }
        // And `produce` on each letter's source, checked once the letters are read.
        "redriveLetters" => Some("consume"),
        "deleteCursor" | "trimPartition" | "forgetCold" | "getCluster" => Some("admin"),
        "metrics" => Some("metrics"),
        // Any known token; the list shows only the topics it may see.
        "listTopics" | "openapi" => None,
        other => panic!("{other}: no permission known for it"),
    }
}

/// `[[auth.tokens]]` of `(name, grant)`: the token of each is `token-{name}`.
fn scoped(tokens: &[(&str, &str)]) -> Vec<durability::config::TokenSettings> {
    tokens
        .iter()
        .map(|(name, grant)| durability::config::TokenSettings {
            name: (*name).to_owned(),
            sha256: hex::encode(durability::auth::token_hash(&format!("token-{name}"))),
            grants: vec![(*grant).to_owned()],
        })
        .collect()
}

/// The scoped tokens of the matrix: one permission each on topic `events` (`*` for
/// `metrics`), and one with every permission but on other topics only.
const TOKENS: [(&str, &str); 5] = [
    ("producer", "events:produce"),
    ("consumer", "events:consume"),
    ("admin", "events:admin"),
    ("metrics", "*:metrics"),
    ("stranger", "others.*:produce,consume,admin,metrics"),
];

/// Every route of the document (and `GET /metrics`, `GET /openapi.json`) × no token, a wrong
/// token, each scoped token: a route is allowed exactly where the token holds the permission
/// it needs on the path's topic (on every topic for `GET /cluster` and `/metrics`). Allowed,
/// it is never answered 401 or 403; denied, it is `401 unauthorized` (no or a wrong token) or
/// `403 forbidden` naming the permission, and the topic's bounds and cursors and the stored
/// partitions are as before. The topic list shows each token only the topics it may see.
#[actix::test]
async fn every_route_allows_exactly_the_tokens_with_its_permission() {
    let t = TestLog::with(|config| config.auth.tokens = scoped(&TOKENS));
    super::seed(&t, "events", 0, 3).await;
    super::seed(&t, "others.a", 0, 1).await;
    t.log.commit("events", 0, "billing", 1).await.unwrap();
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let callers: Vec<(Option<String>, Option<&str>)> = [(None, None), (Some("wrong".into()), None)]
        .into_iter()
        .chain(
            TOKENS
                .iter()
                .map(|(name, grant)| (Some(format!("token-{name}")), Some(*grant))),
        )
        .collect();
    let (mut allowed, mut denied) = (0, 0);
    for route in routes().iter().filter(|route| route.path != "/healthz") {
        let (method, operation) = (&route.method, route.operation_id.as_str());
        let (need, body, uri) = (
            permission_of(operation),
            super::valid_body(route),
            uri_of(route, &[]),
        );
        for (token, grant) in &callers {
            let before = (
                super::state_of(&t, "events").await,
                stored_partitions(&t.config.storage.data_dir),
            );
            let mut request = build(method.clone(), &uri, body);
            if let Some(token) = token {
                request = request.insert_header(("authorization", format!("Bearer {token}")));
            }
            let answer = respond(&app, request.to_request()).await;
            let may = grant.is_some_and(|grant| {
                need.is_none_or(|need| {
                    let (pattern, permissions) = grant.split_once(':').unwrap();
                    let on_topic = operation != "getCluster" && operation != "metrics";
                    let covers = pattern == "*" || (on_topic && pattern == "events");
                    covers && permissions.split(',').any(|held| held == need)
                })
            });
            let who = format!("{method} {uri} ({operation}) with {token:?}");
            if may {
                allowed += 1;
                assert!(![401, 403].contains(&answer.0), "{who}: {answer:?}");
                continue;
            }
            denied += 1;
            if grant.is_none() {
                assert_error(&answer, 401, "unauthorized");
            } else {
                let error = assert_error(&answer, 403, "forbidden");
                assert_eq!(error["permission"], json!(need.unwrap()), "{who}");
            }
            let after = (
                super::state_of(&t, "events").await,
                stored_partitions(&t.config.storage.data_dir),
            );
            assert_eq!(before, after, "{who} changed something");
        }
    }
    println!("the permission matrix: {allowed} requests allowed, {denied} denied");

    for (name, sees) in [
        ("producer", vec!["events"]),
        ("metrics", vec![]),
        ("stranger", vec!["others.a"]),
    ] {
        let request = build(Method::GET, "/topics", None)
            .insert_header(("authorization", format!("Bearer token-{name}")));
        let (status, body) = respond(&app, request.to_request()).await;
        assert_eq!(status, 200, "{body}");
        let listed: Vec<&str> = body["topics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|topic| topic["name"].as_str().unwrap())
            .collect();
        assert_eq!(listed, sees, "{name} sees");
    }
}

/// `durability_auth_failures_total` counts the refusals by reason (no token, an unknown one, a
/// known one without the permission), and `GET /metrics` needs the `metrics` permission on
/// every topic unless `auth.metrics_public`.
#[actix::test]
async fn refusals_are_counted_and_metrics_may_be_public() {
    for public in [false, true] {
        let t = TestLog::with(|config| {
            config.auth.tokens =
                scoped(&[("watcher", "*:metrics"), ("producer", "events:produce")]);
            config.auth.metrics_public = public;
        });
        let app =
            test::init_service(App::new().configure(durability::http::service(t.log.clone())))
                .await;
        let status = |request: test::TestRequest| {
            let app = &app;
            async move {
                test::call_service(app, request.to_request())
                    .await
                    .status()
                    .as_u16()
            }
        };
        let as_caller = |request: test::TestRequest, name: &str| {
            request.insert_header(("authorization", format!("Bearer token-{name}")))
        };
        assert_eq!(status(test::TestRequest::get().uri("/topics")).await, 401);
        let wrong = test::TestRequest::get()
            .uri("/topics")
            .insert_header(("authorization", "Bearer nobody"));
        assert_eq!(status(wrong).await, 401);
        let denied = build(
            Method::POST,
            "/topics/events/partitions/0/records",
            Some("[{\"payload\": 1}]"),
        );
        assert_eq!(status(as_caller(denied, "watcher")).await, 403);
        let metrics = || test::TestRequest::get().uri("/metrics");
        let (open, producer) = if public { (200, 200) } else { (401, 403) };
        assert_eq!(status(metrics()).await, open, "public: {public}");
        assert_eq!(status(as_caller(metrics(), "producer")).await, producer);

        let response = test::call_service(&app, as_caller(metrics(), "watcher").to_request()).await;
        assert_eq!(response.status().as_u16(), 200);
        let text = String::from_utf8(test::read_body(response).await.to_vec()).unwrap();
        let (missing, forbidden) = if public { (1, 1) } else { (2, 2) };
        for (reason, count) in [
            ("missing", missing),
            ("unknown", 1),
            ("forbidden", forbidden),
        ] {
            let line = format!("durability_auth_failures_total{{reason=\"{reason}\"}} {count}");
            assert!(
                text.lines().any(|l| l == line),
                "public {public}: no {line:?} in\n{text}"
            );
        }
    }
}
