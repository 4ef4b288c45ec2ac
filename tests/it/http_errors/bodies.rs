//! Bodies the server refuses: malformed or mistyped JSON and bad deduplication keys are
//! `400 invalid_request`, and a refused append creates no partition.

use actix_web::http::Method;
use actix_web::{App, test};
use serde_json::json;

use super::{assert_error, build, seed, state_of};
use crate::common::{TestLog, respond, stored_partitions};

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
