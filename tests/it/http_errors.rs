//! The REST server's refusals (API.md, error codes): every code of the contract answered with
//! its status and `error.code` in the JSON error shape, and nothing changed by a refused
//! request (bounds and cursors as before, no file created for a bad name). In-process, through
//! `actix_web::test`.

use std::time::{Duration, Instant};

use actix_web::http::Method;
use actix_web::{App, test};
use durability::store::{AppendOutcome, NewRecord};
use serde_json::{Value, json};

use crate::common::{TestLog, respond, stored_partitions};

/// `call!(app, method, uri, body)`: sends a request (`body`: an optional JSON text) to the
/// service and answers its status and JSON body (`Null` when empty).
macro_rules! call {
    ($app:expr, $method:expr, $uri:expr, $body:expr $(,)?) => {
        respond(&$app, build($method, $uri, $body).to_request()).await
    };
}

/// A test request with an optional JSON body.
fn build(method: Method, uri: &str, body: Option<&str>) -> test::TestRequest {
    let mut request = test::TestRequest::default().method(method).uri(uri);
    if let Some(body) = body {
        request = request
            .insert_header(("content-type", "application/json"))
            .set_payload(body.to_owned());
    }
    request
}

/// Asserts that `answer` is the contract's error shape with this status and code, and
/// returns the `error` object.
#[track_caller]
fn assert_error(answer: &(u16, Value), status: u16, code: &str) -> Value {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    let error = &body["error"];
    assert_eq!(error["code"], json!(code), "{body}");
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    error.clone()
}

/// Appends keyless string records through the library; panics unless accepted.
async fn seed(t: &TestLog, topic: &str, partition: u32, count: usize) {
    let records = (0..count)
        .map(|n| NewRecord::new(serde_json::to_string(&format!("r{n}")).unwrap()))
        .collect();
    let appended = t.log.append(topic, partition, records).await.unwrap();
    assert!(matches!(appended.outcome, AppendOutcome::Appended { .. }));
}

/// Every partition's `(oldest, hot, next)` and cursors, to compare before and after.
async fn state_of(t: &TestLog, topic: &str) -> Vec<(u64, u64, u64, Vec<(String, u64)>)> {
    let mut state = Vec::new();
    for partition in 0..t.log.partitions(topic).unwrap() {
        let bounds = t.log.bounds(topic, partition).await.unwrap();
        let cursors = t.log.cursors(topic, partition).await.unwrap();
        state.push((
            bounds.oldest_offset,
            bounds.hot_offset,
            bounds.next_offset,
            cursors.into_iter().collect(),
        ));
    }
    state
}

/// Malformed JSON, wrong types, missing required fields (`payload`, `partitionKey`,
/// `offset`, `offsets`), unknown fields, an empty batch, integers that do not fit a signed
/// 64-bit value and arrays where objects are expected in a body are `400 invalid_request`, and
/// change nothing.
#[actix::test]
async fn invalid_request_for_bad_bodies() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 2).await;
    t.log.commit("events", 0, "billing", 1).await.unwrap();
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;
    let files = stored_partitions(&t.config.storage.data_dir);

    let cases: &[(&str, &str)] = &[
        // Produce, keyed.
        (
            "/topics/events/records",
            r#"[{"partitionKey": "user-1", "payload": 1"#,
        ),
        ("/topics/events/records", "not json"),
        ("/topics/events/records", ""),
        (
            "/topics/events/records",
            r#"{"partitionKey": "user-1", "payload": 1}"#,
        ),
        ("/topics/events/records", r#"[{"payload": 1}]"#),
        ("/topics/events/records", r#"[{"partitionKey": "user-1"}]"#),
        (
            "/topics/events/records",
            r#"[{"partitionKey": 7, "payload": 1}]"#,
        ),
        (
            "/topics/events/records",
            r#"[{"partitionKey": "user-1", "payload": 1, "key": 5}]"#,
        ),
        ("/topics/events/records", "[]"),
        (
            "/topics/events/records",
            r#"[{"partitionKey": "user-1", "payload": 1}, 3]"#,
        ),
        // Produce, one partition.
        ("/topics/events/partitions/0/records", r#"[{"payload": 1},"#),
        ("/topics/events/partitions/0/records", r#"[{"key": "k"}]"#),
        (
            "/topics/events/partitions/0/records",
            r#"[{"payload": 1, "key": ["k"]}]"#,
        ),
        ("/topics/events/partitions/0/records", r#"{"payload": 1}"#),
        ("/topics/events/partitions/0/records", "[]"),
        // Group commit.
        ("/topics/events/groups/billing/commit", "{}"),
        (
            "/topics/events/groups/billing/commit",
            r#"{"offsets": [1]}"#,
        ),
        (
            "/topics/events/groups/billing/commit",
            r#"{"offsets": {"0": "2"}}"#,
        ),
        (
            "/topics/events/groups/billing/commit",
            r#"{"offsets": {"0": 1.5}}"#,
        ),
        (
            "/topics/events/groups/billing/commit",
            r#"{"offsets": {"0": 9223372036854775808}}"#,
        ),
        (
            "/topics/events/groups/billing/commit",
            r#"{"offsets": {"0": 2}"#,
        ),
        // Cold forget.
        ("/topics/events/partitions/0/cold/forget", "{}"),
        (
            "/topics/events/partitions/0/cold/forget",
            r#"{"before": 18446744073709551616}"#,
        ),
        // Nack.
        (
            "/topics/events/partitions/0/groups/billing/leases/nope/nack",
            r#"{"delayMs": "soon"}"#,
        ),
        (
            "/topics/events/partitions/0/groups/billing/leases/nope/nack",
            r#"{"delayMs": 9223372036854775808}"#,
        ),
        (
            "/topics/events/partitions/0/groups/billing/leases/nope/nack",
            r#"{"delayMs": -1}"#,
        ),
        // Arrays where objects are expected (serde's structs would take their fields in order).
        (
            "/topics/events/partitions/0/records",
            r#"[[{"a": 1}, "dedup-x"]]"#,
        ),
        ("/topics/events/records", r#"[["user-1", {"a": 1}]]"#),
        ("/topics/events/groups/billing/commit", r#"[{"0": 1}]"#),
        ("/topics/events/partitions/0/cold/forget", "[0]"),
        (
            "/topics/events/partitions/0/groups/billing/leases/nope/nack",
            "[5000]",
        ),
    ];
    for (uri, body) in cases {
        let answer = call!(app, Method::POST, uri, Some(body));
        assert_error(&answer, 400, "invalid_request");
    }

    let put_cases = [
        "",
        "{}",
        r#"{"offset": "2"}"#,
        r#"{"offset": null}"#,
        r#"{"offset": 9223372036854775808}"#,
        r#"{"offset": 2"#,
        r#"{"cursor": 2}"#,
        "[1]",
    ];
    for body in put_cases {
        let answer = call!(
            app,
            Method::PUT,
            "/topics/events/partitions/0/cursors/billing",
            Some(body),
        );
        assert_error(&answer, 400, "invalid_request");
    }

    assert_eq!(state_of(&t, "events").await, before);
    assert_eq!(stored_partitions(&t.config.storage.data_dir), files);
}

/// Query parameters out of range are `400 invalid_request`: `limit` 0, negative or not a
/// number, a negative or non-numeric `waitMs`, and a `from` or `limit` that does not fit a
/// signed 64-bit integer; on reads, group polls and lease claims alike.
#[actix::test]
async fn invalid_request_for_bad_query_parameters() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 2).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;

    let queries = [
        "limit=0",
        "limit=-3",
        "limit=ten",
        "limit=",
        "limit=1.5",
        "limit=9223372036854775808",
        "waitMs=-1",
        "waitMs=soon",
        "waitMs=9223372036854775808",
        "from=abc",
        "from=",
        "from=1e3",
        "from=9223372036854775808",
        "from=18446744073709551615",
    ];
    for query in queries {
        let answer = call!(
            app,
            Method::GET,
            &format!("/topics/events/partitions/0/records?{query}"),
            None,
        );
        assert_error(&answer, 400, "invalid_request");
    }
    for query in [
        "limit=0",
        "limit=x",
        "waitMs=-5",
        "waitMs=9223372036854775808",
    ] {
        let answer = call!(
            app,
            Method::GET,
            &format!("/topics/events/groups/billing/poll?{query}"),
            None,
        );
        assert_error(&answer, 400, "invalid_request");
    }
    for uri in [
        "/topics/events/partitions/0/groups/billing/leases?limit=0",
        "/topics/events/partitions/0/groups/billing/leases?limit=many",
        "/topics/events/groups/billing/leases?limit=0",
    ] {
        let answer = call!(app, Method::POST, uri, None);
        assert_error(&answer, 400, "invalid_request");
    }
    // A lease claim with a bad limit leased nothing.
    assert!(
        t.log
            .leases("events", 0, "billing")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(state_of(&t, "events").await, before);
}

/// A deduplication key must be 1 to 1024 bytes: an empty key or a 1025-byte key is
/// `400 invalid_request` (the whole request is refused, valid events included), and a
/// 1024-byte key is accepted.
#[actix::test]
async fn invalid_request_for_bad_dedup_keys() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 1).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;
    let files = stored_partitions(&t.config.storage.data_dir);
    let too_long = "k".repeat(1025);
    let bodies = [
        json!([{"payload": 1, "key": ""}]),
        json!([{"payload": 1, "key": "fine"}, {"payload": 2, "key": too_long}]),
    ];
    for body in &bodies {
        let answer = call!(
            app,
            Method::POST,
            "/topics/events/partitions/0/records",
            Some(&body.to_string()),
        );
        assert_error(&answer, 400, "invalid_request");
    }
    let keyed = [
        json!([{"partitionKey": "user-1", "payload": 1, "key": ""}]),
        json!([
            {"partitionKey": "user-2", "payload": 1, "key": "fine"},
            {"partitionKey": "user-1", "payload": 2, "key": too_long},
        ]),
    ];
    for body in &keyed {
        let answer = call!(
            app,
            Method::POST,
            "/topics/events/records",
            Some(&body.to_string()),
        );
        assert_error(&answer, 400, "invalid_request");
    }
    assert_eq!(state_of(&t, "events").await, before);
    assert_eq!(stored_partitions(&t.config.storage.data_dir), files);

    // Multi-byte characters count in bytes: 1024 bytes is the limit, inclusive.
    let longest = "é".repeat(512);
    let (status, body) = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/records",
        Some(&json!([{"payload": 1, "key": longest}]).to_string()),
    );
    assert_eq!(status, 202, "{body}");
    assert_eq!(t.log.bounds("events", 0).await.unwrap().next_offset, 2);
    let over = format!("{}x", "é".repeat(512));
    let answer = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/records",
        Some(&json!([{"payload": 1, "key": over}]).to_string()),
    );
    assert_error(&answer, 400, "invalid_request");
    assert_eq!(t.log.bounds("events", 0).await.unwrap().next_offset, 2);
}

/// A direct append refused with a 4xx (empty batch, bad dedup key, too many records, a record
/// too large) to a partition never written leaves it unwritten: no database file, and the
/// topic does not appear in `GET /topics` ("4xx means definite: nothing was changed").
#[actix::test]
async fn refused_direct_append_creates_no_partition() {
    let t = TestLog::with(|config| {
        config.log.max_batch_size = 2;
        config.log.max_record_bytes = 16;
    });
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let cases = [
        ("[]", "invalid_request"),
        (r#"[{"payload": 1, "key": ""}]"#, "invalid_request"),
        (
            r#"[{"payload": 1}, {"payload": 2}, {"payload": 3}]"#,
            "batch_too_large",
        ),
        (
            r#"[{"payload": "far more than sixteen bytes"}]"#,
            "record_too_large",
        ),
    ];
    for (body, code) in cases {
        let answer = call!(
            app,
            Method::POST,
            "/topics/fresh/partitions/5/records",
            Some(body)
        );
        assert_error(&answer, 400, code);
        let topics = call!(app, Method::GET, "/topics", None);
        assert_eq!(topics, (200, json!({"topics": []})), "after {code}");
        assert!(
            stored_partitions(&t.config.storage.data_dir).is_empty(),
            "after {code}: {:?}",
            stored_partitions(&t.config.storage.data_dir)
        );
    }
}

/// Bad topic names (`..`, a leading `.`, 129 characters, a space, a slash), a group with `/`,
/// and a `{partition}` that is not a non-negative integer ("abc", "-1") are
/// `400 invalid_name`, on reads and writes, and nothing is created on disk.
#[actix::test]
async fn invalid_name_creates_nothing() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 1).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let files = stored_partitions(&t.config.storage.data_dir);
    let before = state_of(&t, "events").await;

    let long = "t".repeat(129);
    let bad_topics = [
        "..",
        "%2E%2E",
        ".",
        "..%2Fetc",
        ".hidden",
        long.as_str(),
        "with%20space",
        "a%2Fb",
        "caf%C3%A9",
        "star*",
    ];
    for topic in bad_topics {
        let cases = [
            (
                Method::POST,
                format!("/topics/{topic}/partitions/0/records"),
                Some(r#"[{"payload": 1}]"#),
            ),
            (
                Method::POST,
                format!("/topics/{topic}/records"),
                Some(r#"[{"partitionKey": "k", "payload": 1}]"#),
            ),
            (
                Method::GET,
                format!("/topics/{topic}/partitions/0/records"),
                None,
            ),
            (
                Method::GET,
                format!("/topics/{topic}/partitions/0/bounds"),
                None,
            ),
            (
                Method::GET,
                format!("/topics/{topic}/groups/billing/poll"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/{topic}/groups/billing/commit"),
                Some(r#"{"offsets": {"0": 0}}"#),
            ),
            (
                Method::PUT,
                format!("/topics/{topic}/partitions/0/cursors/billing"),
                Some(r#"{"offset": 0}"#),
            ),
            (
                Method::POST,
                format!("/topics/{topic}/partitions/0/groups/billing/leases"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/{topic}/partitions/0/trim"),
                None,
            ),
            (Method::GET, format!("/topics/{topic}"), None),
        ];
        for (method, uri, body) in cases {
            let answer = call!(app, method, &uri, body);
            assert_error(&answer, 400, "invalid_name");
        }
    }
    // A 128-character topic is fine (and answers like an empty one).
    let longest = "t".repeat(128);
    let (status, _) = call!(
        app,
        Method::GET,
        &format!("/topics/{longest}/partitions/0/bounds"),
        None,
    );
    assert_eq!(status, 200);

    let long_group = "g".repeat(257);
    let bad_groups = [
        "a%2Fb",
        "with%20space",
        "%2E%2E%2F%2E%2E",
        long_group.as_str(),
        "caf%C3%A9",
    ];
    for group in bad_groups {
        let cases = [
            (
                Method::GET,
                format!("/topics/events/groups/{group}/poll"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/groups/{group}/commit"),
                Some(r#"{"offsets": {"0": 1}}"#),
            ),
            (
                Method::PUT,
                format!("/topics/events/partitions/0/cursors/{group}"),
                Some(r#"{"offset": 1}"#),
            ),
            (
                Method::DELETE,
                format!("/topics/events/partitions/0/cursors/{group}"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/partitions/0/groups/{group}/leases"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/groups/{group}/leases"),
                None,
            ),
            (
                Method::GET,
                format!("/topics/events/partitions/0/groups/{group}/leases"),
                None,
            ),
        ];
        for (method, uri, body) in cases {
            let answer = call!(app, method, &uri, body);
            assert_error(&answer, 400, "invalid_name");
        }
    }

    for partition in ["abc", "-1", "1.0", "%2B1", "0x1", "%200"] {
        let cases = [
            (
                Method::GET,
                format!("/topics/events/partitions/{partition}/records"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/partitions/{partition}/records"),
                Some(r#"[{"payload": 1}]"#),
            ),
            (
                Method::GET,
                format!("/topics/events/partitions/{partition}/bounds"),
                None,
            ),
            (
                Method::GET,
                format!("/topics/events/partitions/{partition}/load"),
                None,
            ),
            (
                Method::GET,
                format!("/topics/events/partitions/{partition}/cursors"),
                None,
            ),
            (
                Method::PUT,
                format!("/topics/events/partitions/{partition}/cursors/billing"),
                Some(r#"{"offset": 0}"#),
            ),
            (
                Method::POST,
                format!("/topics/events/partitions/{partition}/trim"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/partitions/{partition}/cold/forget"),
                Some(r#"{"before": 0}"#),
            ),
        ];
        for (method, uri, body) in cases {
            let answer = call!(app, method, &uri, body);
            assert_error(&answer, 400, "invalid_name");
        }
        // In a group commit's body as well.
        let body = json!({"offsets": {partition: 0}}).to_string();
        let answer = call!(
            app,
            Method::POST,
            "/topics/events/groups/billing/commit",
            Some(&body),
        );
        assert_error(&answer, 400, "invalid_name");
    }

    assert_eq!(state_of(&t, "events").await, before);
    assert_eq!(stored_partitions(&t.config.storage.data_dir), files);
    let topics = t.log.topics().await.unwrap();
    assert_eq!(topics.len(), 1, "{topics:?}");
}

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

/// A negative `from` or one beyond `nextOffset`, and a commit (group or single cursor) that is
/// negative or beyond `nextOffset`, are `400 invalid_offset`, and no cursor moves.
#[actix::test]
async fn invalid_offset_moves_nothing() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 2).await;
    seed(&t, "events", 1, 1).await;
    t.log.commit("events", 0, "billing", 1).await.unwrap();
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;
    let files = stored_partitions(&t.config.storage.data_dir);

    for uri in [
        "/topics/events/partitions/0/records?from=3",
        "/topics/events/partitions/0/records?from=-1",
        "/topics/events/partitions/0/records?from=3&waitMs=100",
        "/topics/events/partitions/5/records?from=1",
    ] {
        let answer = call!(app, Method::GET, uri, None);
        assert_error(&answer, 400, "invalid_offset");
    }
    // `from` equal to nextOffset is fine.
    let (status, _) = call!(
        app,
        Method::GET,
        "/topics/events/partitions/0/records?from=2",
        None,
    );
    assert_eq!(status, 200);

    for body in [
        r#"{"offsets": {"0": 3}}"#,
        r#"{"offsets": {"0": -1}}"#,
        r#"{"offsets": {"0": 2, "1": 2}}"#,
        r#"{"offsets": {"1": 1, "0": 5}}"#,
        r#"{"offsets": {"6": 1}}"#,
    ] {
        let answer = call!(
            app,
            Method::POST,
            "/topics/events/groups/billing/commit",
            Some(body),
        );
        assert_error(&answer, 400, "invalid_offset");
    }
    for (uri, body) in [
        (
            "/topics/events/partitions/0/cursors/billing",
            r#"{"offset": 3}"#,
        ),
        (
            "/topics/events/partitions/0/cursors/billing",
            r#"{"offset": -1}"#,
        ),
        (
            "/topics/events/partitions/0/cursors/search",
            r#"{"offset": 3}"#,
        ),
        (
            "/topics/events/partitions/6/cursors/search",
            r#"{"offset": 1}"#,
        ),
    ] {
        let answer = call!(app, Method::PUT, uri, Some(body));
        assert_error(&answer, 400, "invalid_offset");
    }
    let answer = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/cold/forget",
        Some(r#"{"before": -1}"#),
    );
    assert_error(&answer, 400, "invalid_offset");

    assert_eq!(state_of(&t, "events").await, before);
    assert_eq!(stored_partitions(&t.config.storage.data_dir), files);
}

/// A partition index at or beyond the topic's partition count is `404 unknown_partition` on
/// every partition route and inside a group commit's body (which is then refused whole).
#[actix::test]
async fn unknown_partition_is_404() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 2).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;
    let files = stored_partitions(&t.config.storage.data_dir);

    for partition in [
        "8",
        "9",
        "4294967295",
        "4294967296",
        "99999999999999999999999",
    ] {
        let cases = [
            (
                Method::GET,
                format!("/topics/events/partitions/{partition}/records"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/partitions/{partition}/records"),
                Some(r#"[{"payload": 1}]"#),
            ),
            (
                Method::GET,
                format!("/topics/events/partitions/{partition}/bounds"),
                None,
            ),
            (
                Method::GET,
                format!("/topics/events/partitions/{partition}/load"),
                None,
            ),
            (
                Method::GET,
                format!("/topics/events/partitions/{partition}/cursors"),
                None,
            ),
            (
                Method::PUT,
                format!("/topics/events/partitions/{partition}/cursors/billing"),
                Some(r#"{"offset": 0}"#),
            ),
            (
                Method::DELETE,
                format!("/topics/events/partitions/{partition}/cursors/billing"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/partitions/{partition}/groups/billing/leases"),
                None,
            ),
            (
                Method::GET,
                format!("/topics/events/partitions/{partition}/groups/billing/leases"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/partitions/{partition}/groups/billing/leases/b/ack"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/partitions/{partition}/trim"),
                None,
            ),
            (
                Method::POST,
                format!("/topics/events/partitions/{partition}/cold/forget"),
                Some(r#"{"before": 0}"#),
            ),
        ];
        for (method, uri, body) in cases {
            let answer = call!(app, method, &uri, body);
            assert_error(&answer, 404, "unknown_partition");
        }
    }
    for body in [
        r#"{"offsets": {"8": 0}}"#,
        r#"{"offsets": {"0": 1, "8": 0}}"#,
        r#"{"offsets": {"0": 2, "12345678901": 0}}"#,
    ] {
        let answer = call!(
            app,
            Method::POST,
            "/topics/events/groups/billing/commit",
            Some(body),
        );
        assert_error(&answer, 404, "unknown_partition");
    }
    assert_eq!(state_of(&t, "events").await, before);
    assert_eq!(stored_partitions(&t.config.storage.data_dir), files);
}

/// With `retention.max_records` 1 and no cold tier, a read from an offset retention deleted is
/// `410 log_truncated` with `requestedOffset` and `oldestOffset`; reading from the oldest
/// offset still works.
#[actix::test]
async fn log_truncated_is_410_with_offsets() {
    let t = TestLog::with(|config| {
        config.retention.max_records = 1;
        config.retention.sweep_interval_ms = 3_600_000;
    });
    seed(&t, "events", 0, 3).await;
    t.log.commit("events", 0, "billing", 1).await.unwrap();
    // "workers" leased offset 0 and handed it back (pending): unsettled.
    let held = t.log.lease("events", 0, "workers", Some(1)).await.unwrap();
    assert!(matches!(held, Some(ref lease) if lease.first_offset == 0));
    let held = held.unwrap();
    t.log
        .nack("events", 0, "workers", &held.batch_id, 0)
        .await
        .unwrap();
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let (status, body) = call!(app, Method::POST, "/topics/events/partitions/0/trim", None);
    assert_eq!((status, body), (200, json!({"removed": 2})));
    let before = state_of(&t, "events").await;

    for from in [0, 1] {
        let answer = call!(
            app,
            Method::GET,
            &format!("/topics/events/partitions/0/records?from={from}"),
            None,
        );
        let error = assert_error(&answer, 410, "log_truncated");
        assert_eq!(error["requestedOffset"], json!(from), "{error}");
        assert_eq!(error["oldestOffset"], json!(2), "{error}");
    }
    // Reading from the oldest readable offset (the default `from`) still works.
    let (status, page) = call!(
        app,
        Method::GET,
        "/topics/events/partitions/0/records",
        None
    );
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["records"][0]["offset"], json!(2));
    // A group poll from a committed cursor below the oldest offset is truncated as well.
    let answer = call!(app, Method::GET, "/topics/events/groups/billing/poll", None);
    let error = assert_error(&answer, 410, "log_truncated");
    assert_eq!(error["requestedOffset"], json!(1), "{error}");
    assert_eq!(error["oldestOffset"], json!(2), "{error}");
    assert_eq!(state_of(&t, "events").await, before);

    // A leasing group that lost unsettled records is told once, and continues from the
    // oldest offset: its cursor moved there durably.
    let leases = "/topics/events/partitions/0/groups/workers/leases";
    let answer = call!(app, Method::POST, leases, None);
    let error = assert_error(&answer, 410, "log_truncated");
    assert_eq!(error["requestedOffset"], json!(0), "{error}");
    assert_eq!(error["oldestOffset"], json!(2), "{error}");
    assert_eq!(t.log.cursor("events", 0, "workers").await.unwrap(), Some(2));
    let (status, lease) = call!(app, Method::POST, leases, None);
    assert_eq!(status, 200, "{lease}");
    assert_eq!(lease["firstOffset"], json!(2));
}

/// Ack, nack and extend of an unknown `batchId`, or of a batch held by another group, are
/// `409 lease_not_held` naming the `batchId`, and the real holder's lease is untouched.
#[actix::test]
async fn lease_not_held_is_409_with_batch_id() {
    let t = TestLog::with(|_| {});
    seed(&t, "jobs", 0, 3).await;
    let lease = t
        .log
        .lease("jobs", 0, "workers", Some(2))
        .await
        .unwrap()
        .expect("a range");
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let rows_before = t.log.leases("jobs", 0, "workers").await.unwrap();
    let before = state_of(&t, "jobs").await;

    for action in ["ack", "nack", "extend"] {
        for (group, batch) in [
            ("workers", "no-such-batch"),
            ("others", lease.batch_id.as_str()),
            ("workers", "00000000-0000-0000-0000-000000000000"),
        ] {
            let body = (action == "nack").then_some(r#"{"delayMs": 10}"#);
            let answer = call!(
                app,
                Method::POST,
                &format!("/topics/jobs/partitions/0/groups/{group}/leases/{batch}/{action}"),
                body,
            );
            let error = assert_error(&answer, 409, "lease_not_held");
            assert_eq!(error["batchId"], json!(batch), "{error}");
        }
        // On another partition of the topic, the batch is not held either.
        let answer = call!(
            app,
            Method::POST,
            &format!(
                "/topics/jobs/partitions/1/groups/workers/leases/{}/{action}",
                lease.batch_id
            ),
            None,
        );
        let error = assert_error(&answer, 409, "lease_not_held");
        assert_eq!(error["batchId"], json!(lease.batch_id));
    }
    assert_eq!(
        t.log.leases("jobs", 0, "workers").await.unwrap(),
        rows_before
    );
    assert!(t.log.leases("jobs", 0, "others").await.unwrap().is_empty());
    assert_eq!(state_of(&t, "jobs").await, before);

    // An already settled batch is not held any more.
    t.log
        .ack("jobs", 0, "workers", &lease.batch_id)
        .await
        .unwrap();
    let answer = call!(
        app,
        Method::POST,
        &format!(
            "/topics/jobs/partitions/0/groups/workers/leases/{}/ack",
            lease.batch_id
        ),
        None,
    );
    assert_error(&answer, 409, "lease_not_held");
}

/// With `leases.enabled = false`, every lease route is `409 leases_disabled`, and nothing is
/// leased or created.
#[actix::test]
async fn leases_disabled_is_409() {
    let t = TestLog::with(|config| config.leases.enabled = false);
    seed(&t, "jobs", 0, 2).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "jobs").await;
    let files = stored_partitions(&t.config.storage.data_dir);
    let cases = [
        (
            Method::POST,
            "/topics/jobs/partitions/0/groups/workers/leases",
            None,
        ),
        (
            Method::POST,
            "/topics/jobs/partitions/0/groups/workers/leases?limit=1",
            None,
        ),
        (Method::POST, "/topics/jobs/groups/workers/leases", None),
        (
            Method::GET,
            "/topics/jobs/partitions/0/groups/workers/leases",
            None,
        ),
        (
            Method::POST,
            "/topics/jobs/partitions/0/groups/workers/leases/b/ack",
            None,
        ),
        (
            Method::POST,
            "/topics/jobs/partitions/0/groups/workers/leases/b/nack",
            Some(r#"{"delayMs": 5}"#),
        ),
        (
            Method::POST,
            "/topics/jobs/partitions/0/groups/workers/leases/b/extend",
            None,
        ),
        (
            Method::POST,
            "/topics/jobs/partitions/3/groups/workers/leases",
            None,
        ),
    ];
    for (method, uri, body) in cases {
        let answer = call!(app, method, uri, body);
        assert_error(&answer, 409, "leases_disabled");
    }
    assert_eq!(state_of(&t, "jobs").await, before);
    assert_eq!(stored_partitions(&t.config.storage.data_dir), files);
}

/// With an auth token, a missing, wrong or malformed `Authorization` is `401 unauthorized` on
/// every route, including unknown paths, and writes nothing; `/healthz` stays open.
#[actix::test]
async fn unauthorized_is_401() {
    let t = TestLog::with(|config| config.server.auth_token = "s3cret".into());
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let requests = [
        (Method::GET, "/topics"),
        (Method::GET, "/topics/events"),
        (Method::POST, "/topics/events/partitions/0/records"),
        (Method::POST, "/topics/events/records"),
        (Method::GET, "/topics/events/partitions/0/records"),
        (Method::GET, "/topics/events/groups/g/poll"),
        (Method::POST, "/topics/events/partitions/0/trim"),
        (Method::GET, "/nowhere"),
    ];
    let headers = [
        None,
        Some("Bearer wrong"),
        Some("Bearer s3cret "),
        Some("Bearer S3CRET"),
        Some("Basic s3cret"),
        Some("s3cret"),
        Some("Bearer"),
    ];
    for (method, uri) in requests {
        for header in headers {
            let mut request = test::TestRequest::default().method(method.clone()).uri(uri);
            if let Some(header) = header {
                request = request.insert_header(("authorization", header));
            }
            if method == Method::POST {
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

/// A body above `server.max_body_bytes` is `413 payload_too_large` and writes nothing.
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

/// A request that matches no route (an unknown path, an empty path segment, an unknown
/// method) is `404 not_found` in the JSON error shape.
#[actix::test]
async fn not_found_is_404_json() {
    let t = TestLog::with(|_| {});
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let cases = [
        (Method::GET, "/nope"),
        (Method::GET, "/"),
        (Method::GET, "/topics/events/partitions/0/nope"),
        (Method::GET, "/topics//partitions/0/records"),
        (Method::GET, "/topics/events/partitions//records"),
        (Method::POST, "/topics//records"),
        (Method::GET, "/topics/events/groups//poll"),
        (Method::PUT, "/topics/events/partitions/0/cursors/"),
        (
            Method::POST,
            "/topics/events/partitions/0/groups/g/leases//ack",
        ),
        (Method::GET, "/topics/events/partitions/0"),
        (Method::GET, "/topics/"),
        (Method::GET, "/topics/events/"),
    ];
    for (method, uri) in cases {
        let answer = call!(app, method, uri, None);
        assert_error(&answer, 404, "not_found");
    }
    assert!(stored_partitions(&t.config.storage.data_dir).is_empty());
}

/// `waitMs` above 30000 is accepted (capped), not refused: with records available the read
/// and the group poll answer at once.
#[actix::test]
async fn wait_above_the_cap_is_accepted() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 2).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let started = Instant::now();
    for uri in [
        "/topics/events/partitions/0/records?waitMs=30001",
        "/topics/events/partitions/0/records?waitMs=9223372036854775807",
        "/topics/events/groups/billing/poll?waitMs=600000",
    ] {
        let (status, body) = call!(app, Method::GET, uri, None);
        assert_eq!(status, 200, "{uri}: {body}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// `limit` above `maxBatchSize` is capped, not refused: reads, group polls and lease claims
/// answer at most `maxBatchSize` records.
#[actix::test]
async fn limit_above_max_batch_size_is_capped() {
    let t = TestLog::with(|config| config.log.max_batch_size = 3);
    seed(&t, "events", 0, 3).await;
    seed(&t, "events", 0, 3).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    for uri in [
        "/topics/events/partitions/0/records?limit=1000",
        "/topics/events/partitions/0/records?limit=9223372036854775807",
        "/topics/events/partitions/0/records",
    ] {
        let (status, page) = call!(app, Method::GET, uri, None);
        assert_eq!(status, 200, "{uri}: {page}");
        assert_eq!(page["records"].as_array().unwrap().len(), 3, "{uri}");
        assert_eq!(page["nextOffset"], json!(3));
        assert_eq!(page["lag"], json!(3));
    }
    let (status, polled) = call!(
        app,
        Method::GET,
        "/topics/events/groups/billing/poll?limit=1000",
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(
        polled["partitions"][0]["records"].as_array().unwrap().len(),
        3
    );
    let (status, lease) = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/groups/workers/leases?limit=1000",
        None,
    );
    assert_eq!(status, 200, "{lease}");
    assert_eq!(lease["records"].as_array().unwrap().len(), 3);
    assert_eq!(
        (lease["firstOffset"].clone(), lease["lastOffset"].clone()),
        (json!(0), json!(2))
    );
}
