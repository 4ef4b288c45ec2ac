//! Size limits: too many records, a record or a body too large are refused whole and write
//! nothing.

use actix_web::http::Method;
use actix_web::{App, test};
use serde_json::{Value, json};

use super::{assert_error, build, seed, state_of, uri_of, valid_body};
use crate::common::{TestLog, respond, routes};

/// More records for one partition than `maxBatchSize` is `400 batch_too_large`, counted
/// before deduplication, for a direct append and for a keyed produce (where the whole request
/// is refused, the other partitions' events included).
#[actix::test]
async fn batch_too_large_writes_nothing() {
    let t = TestLog::with(|config| config.log.max_batch_size = 3);
    seed(&t, "events", 0, 1).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;

    let four: Vec<Value> = (0..4).map(|n| json!({"payload": n})).collect();
    let answer = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/records",
        Some(&Value::Array(four).to_string()),
    );
    assert_error(&answer, 400, "batch_too_large");
    let same_key: Vec<Value> = (0..4).map(|n| json!({"payload": n, "key": "k"})).collect();
    let answer = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/records",
        Some(&Value::Array(same_key).to_string()),
    );
    assert_error(&answer, 400, "batch_too_large");

    // Keyed: four events for "user-1" (partition 4) and one for "user-2" (partition 3).
    let mut events: Vec<Value> = (0..4)
        .map(|n| json!({"partitionKey": "user-1", "payload": n}))
        .collect();
    events.insert(0, json!({"partitionKey": "user-2", "payload": "fine"}));
    let answer = call!(
        app,
        Method::POST,
        "/topics/events/records",
        Some(&Value::Array(events).to_string()),
    );
    assert_error(&answer, 400, "batch_too_large");
    assert_eq!(state_of(&t, "events").await, before);
    assert!(!t.stores("events", 3));
    assert!(!t.stores("events", 4));

    // Spread over partitions, each at most maxBatchSize: accepted.
    let spread: Vec<Value> = ["user-1", "user-1", "user-1", "user-2", "user-2", "user-2"]
        .iter()
        .map(|key| json!({"partitionKey": key, "payload": 0}))
        .collect();
    let (status, body) = call!(
        app,
        Method::POST,
        "/topics/events/records",
        Some(&Value::Array(spread).to_string()),
    );
    assert_eq!(status, 202, "{body}");
}

/// A payload whose stored JSON text exceeds `log.max_record_bytes` is `400 record_too_large`,
/// and the batch holding it is refused whole.
#[actix::test]
async fn record_too_large_writes_nothing() {
    let t = TestLog::with(|config| config.log.max_record_bytes = 16);
    seed(&t, "events", 0, 1).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;

    // `"xxxxxxxxxxxxxx"` is 16 bytes of JSON text: the limit, inclusive.
    let at_limit = "x".repeat(14);
    let over = "x".repeat(15);
    let body = json!([{"payload": "ok"}, {"payload": over}]).to_string();
    let answer = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/records",
        Some(&body),
    );
    assert_error(&answer, 400, "record_too_large");
    let body = json!([
        {"partitionKey": "user-2", "payload": 1},
        {"partitionKey": "user-1", "payload": {"big": over}},
    ])
    .to_string();
    let answer = call!(app, Method::POST, "/topics/events/records", Some(&body));
    assert_error(&answer, 400, "record_too_large");
    assert_eq!(state_of(&t, "events").await, before);

    let body = json!([{"payload": at_limit}]).to_string();
    let (status, body) = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/records",
        Some(&body),
    );
    assert_eq!(status, 202, "{body}");
}

/// A body above `server.max_body_bytes` is `413 payload_too_large`, on every route of the
/// document that takes a body, and writes nothing.
#[actix::test]
async fn payload_too_large_is_413() {
    let t = TestLog::with(|config| {
        config.server.max_body_bytes = 64;
        config.log.max_record_bytes = 64;
    });
    seed(&t, "events", 0, 1).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;
    let big = json!([{"payload": "y".repeat(100)}]).to_string();
    let answer = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/records",
        Some(&big),
    );
    assert_error(&answer, 413, "payload_too_large");
    let big_events = json!([{"partitionKey": "user-1", "payload": "y".repeat(100)}]).to_string();
    let answer = call!(
        app,
        Method::POST,
        "/topics/events/records",
        Some(&big_events)
    );
    assert_error(&answer, 413, "payload_too_large");
    let big_commit = format!(r#"{{"offsets": {{"0": 1}}, "pad": "{}"}}"#, " ".repeat(100));
    let answer = call!(
        app,
        Method::POST,
        "/topics/events/groups/billing/commit",
        Some(&big_commit),
    );
    assert_error(&answer, 413, "payload_too_large");
    // On every route of the document that takes a body: one that it takes, padded with
    // whitespace beyond the limit.
    for route in routes().iter().filter(|route| route.has_body) {
        let body = format!("{}{}", valid_body(route).expect("a body"), " ".repeat(64));
        let answer = call!(app, route.method.clone(), &uri_of(route, &[]), Some(&body));
        assert_error(&answer, 413, "payload_too_large");
    }
    assert_eq!(state_of(&t, "events").await, before);

    // At the limit, accepted.
    let fits = json!([{"payload": "y".repeat(40)}]).to_string();
    assert!(fits.len() <= 64);
    let (status, body) = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/records",
        Some(&fits),
    );
    assert_eq!(status, 202, "{body}");
}
