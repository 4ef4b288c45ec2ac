//! Bodies the server refuses: malformed or mistyped JSON and bad deduplication keys are
//! `400 invalid_request`, and a refused append creates no partition.

use std::collections::BTreeSet;

use actix_web::http::Method;
use actix_web::{App, test};
use durability::store::MAX_KEY_BYTES;
use serde_json::json;

use super::{assert_error, build, seed, state_of, uri_of};
use crate::common::{TestLog, respond, route, routes, stored_partitions};

/// Malformed JSON, wrong types, missing required fields (`payload`, `partitionKey`,
/// `offset`, `offsets`), unknown fields, an empty batch, integers that do not fit a signed
/// 64-bit value and arrays where objects are expected in a body are `400 invalid_request`, on
/// every route of the document that takes a body, and change nothing.
#[actix::test]
async fn invalid_request_for_bad_bodies() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 2).await;
    t.log.commit("events", 0, "billing", 1).await.unwrap();
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;
    let files = stored_partitions(&t.config.storage.data_dir);

    // By operationId; the last body of each is an array where an object is expected, or the
    // reverse (serde's structs would take their fields in order).
    let cases: &[(&str, &[&str])] = &[
        (
            "produceEvents",
            &[
                r#"[{"partitionKey": "user-1", "payload": 1"#,
                "not json",
                "",
                r#"{"partitionKey": "user-1", "payload": 1}"#,
                r#"[{"payload": 1}]"#,
                r#"[{"partitionKey": "user-1"}]"#,
                r#"[{"partitionKey": 7, "payload": 1}]"#,
                r#"[{"partitionKey": "user-1", "payload": 1, "key": 5}]"#,
                "[]",
                r#"[{"partitionKey": "user-1", "payload": 1}, 3]"#,
                r#"[["user-1", {"a": 1}]]"#,
            ],
        ),
        (
            "appendRecords",
            &[
                r#"[{"payload": 1},"#,
                r#"[{"key": "k"}]"#,
                r#"[{"payload": 1, "key": ["k"]}]"#,
                r#"{"payload": 1}"#,
                "[]",
                r#"[[{"a": 1}, "dedup-x"]]"#,
            ],
        ),
        (
            "commitGroup",
            &[
                "{}",
                r#"{"offsets": [1]}"#,
                r#"{"offsets": {"0": "2"}}"#,
                r#"{"offsets": {"0": 1.5}}"#,
                r#"{"offsets": {"0": 9223372036854775808}}"#,
                r#"{"offsets": {"0": 2}"#,
                r#"[{"0": 1}]"#,
            ],
        ),
        (
            "forgetCold",
            &["{}", r#"{"before": 18446744073709551616}"#, "[0]"],
        ),
        (
            "nackLease",
            &[
                r#"{"delayMs": "soon"}"#,
                r#"{"delayMs": 9223372036854775808}"#,
                r#"{"delayMs": -1}"#,
                "[5000]",
            ],
        ),
        (
            "redriveLetters",
            &[
                "",
                "{}",
                r#"{"offsets": []}"#,
                r#"{"offsets": "0"}"#,
                r#"{"offsets": [0.5]}"#,
                r#"{"offsets": [0], "also": 1}"#,
                "[0]",
            ],
        ),
        (
            "putCursor",
            &[
                "",
                "{}",
                r#"{"offset": "2"}"#,
                r#"{"offset": null}"#,
                r#"{"offset": 9223372036854775808}"#,
                r#"{"offset": 2"#,
                r#"{"cursor": 2}"#,
                "[1]",
            ],
        ),
    ];
    // Every operation of the document that takes a body has its cases.
    let known: BTreeSet<&str> = cases.iter().map(|(id, _)| *id).collect();
    let with_a_body: BTreeSet<&str> = routes()
        .iter()
        .filter(|route| route.has_body)
        .map(|route| route.operation_id.as_str())
        .collect();
    assert_eq!(known, with_a_body, "the operations that take a body");
    for (operation_id, bodies) in cases {
        let route = route(operation_id);
        let uri = uri_of(route, &[("batchId", "nope")]);
        for body in *bodies {
            let answer = call!(app, route.method.clone(), &uri, Some(body));
            assert_error(&answer, 400, "invalid_request");
        }
    }

    assert_eq!(state_of(&t, "events").await, before);
    assert_eq!(stored_partitions(&t.config.storage.data_dir), files);
}

/// A deduplication key must be 1 to `MAX_KEY_BYTES` bytes: an empty key or a key one byte
/// longer is `400 invalid_request` (the whole request is refused, valid events included), and
/// a key of exactly `MAX_KEY_BYTES` bytes is accepted.
#[actix::test]
async fn invalid_request_for_bad_dedup_keys() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 1).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;
    let files = stored_partitions(&t.config.storage.data_dir);
    let too_long = "k".repeat(MAX_KEY_BYTES + 1);
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

    // Multi-byte characters count in bytes: `MAX_KEY_BYTES` is the limit, inclusive.
    let longest = "é".repeat(MAX_KEY_BYTES / 2);
    let (status, body) = call!(
        app,
        Method::POST,
        "/topics/events/partitions/0/records",
        Some(&json!([{"payload": 1, "key": longest}]).to_string()),
    );
    assert_eq!(status, 202, "{body}");
    assert_eq!(t.log.bounds("events", 0).await.unwrap().next_offset, 2);
    let over = format!("{}x", "é".repeat(MAX_KEY_BYTES / 2));
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
        assert_eq!(
            topics,
            (200, json!({"topics": [], "next": null})),
            "after {code}"
        );
        assert!(
            stored_partitions(&t.config.storage.data_dir).is_empty(),
            "after {code}: {:?}",
            stored_partitions(&t.config.storage.data_dir)
        );
    }
}
