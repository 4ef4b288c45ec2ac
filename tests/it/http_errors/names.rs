//! Names and paths: a bad topic, group or partition is `400 invalid_name`, a partition beyond
//! the topic's count is `404 unknown_partition`, and a path matching no route is `404 not_found`;
//! none of them creates anything.

use actix_web::http::Method;
use actix_web::{App, test};
use serde_json::json;

use super::{assert_error, build, seed, state_of, uri_of, valid_body};
use crate::common::{TestLog, respond, routes, stored_partitions};

/// Bad topic names (`..`, a leading `.`, 129 characters, a space, a slash), a group with `/`,
/// and a `{partition}` that is not a non-negative integer ("abc", "-1") are
/// `400 invalid_name` on every route of the document that has such a parameter, reads and
/// writes, and nothing is created on disk.
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
        for route in routes().iter().filter(|route| route.has("topic")) {
            let uri = uri_of(route, &[("topic", topic)]);
            let answer = call!(app, route.method.clone(), &uri, valid_body(route));
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
        for route in routes().iter().filter(|route| route.has("group")) {
            let uri = uri_of(route, &[("group", group)]);
            let answer = call!(app, route.method.clone(), &uri, valid_body(route));
            assert_error(&answer, 400, "invalid_name");
        }
    }

    for partition in ["abc", "-1", "1.0", "%2B1", "0x1", "%200"] {
        for route in routes().iter().filter(|route| route.has("partition")) {
            let uri = uri_of(route, &[("partition", partition)]);
            let answer = call!(app, route.method.clone(), &uri, valid_body(route));
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

/// A group commit names each partition in canonical decimal: a key with a leading zero
/// (`"00"`, `"01"`), which could alias another key of the same body, is `400 invalid_name`
/// saying so, and the whole body is refused, its valid keys too.
#[actix::test]
async fn commit_keys_are_canonical_partition_numbers() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 3).await;
    seed(&t, "events", 1, 3).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;
    let commit = "/topics/events/groups/billing/commit";
    for body in [
        r#"{"offsets": {"00": 1}}"#,
        r#"{"offsets": {"01": 1}}"#,
        r#"{"offsets": {"0": 1, "00": 2}}"#,
        r#"{"offsets": {"1": 2, "0007": 1}}"#,
    ] {
        let answer = call!(app, Method::POST, commit, Some(body));
        let error = assert_error(&answer, 400, "invalid_name");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("leading zero"), "{body}: {message}");
    }
    assert_eq!(state_of(&t, "events").await, before);

    let answer = call!(
        app,
        Method::POST,
        commit,
        Some(r#"{"offsets": {"0": 1, "1": 2}}"#),
    );
    assert_eq!(answer, (200, json!({"cursors": {"0": 1, "1": 2}})));
}

/// A partition index at or beyond the topic's partition count, however large, is
/// `404 unknown_partition` stating the count on every route of the document with a
/// `{partition}`, and inside a group commit's body (which is then refused whole).
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
        for route in routes().iter().filter(|route| route.has("partition")) {
            let uri = uri_of(route, &[("partition", partition)]);
            let answer = call!(app, route.method.clone(), &uri, valid_body(route));
            let error = assert_error(&answer, 404, "unknown_partition");
            assert_eq!(error["partitions"], json!(8), "{uri}: {error}");
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
