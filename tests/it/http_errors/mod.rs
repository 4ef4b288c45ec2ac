//! The REST server's refusals (README, REST API: "4xx means nothing changed"; the error codes of
//! the OpenAPI document): every bad input answered with its status and `error.code` in the JSON
//! error shape, and nothing changed by a refused request (bounds, cursors and leases as before,
//! no file created for a bad name). In-process, through `actix_web::test`.
//!
//! - [`bodies`]: malformed bodies and deduplication keys;
//! - [`queries`]: query parameters out of range, and the ones capped instead of refused;
//! - [`limits`]: batches, records and bodies too large;
//! - [`names`]: bad names, unknown partitions, paths that match no route;
//! - [`offsets`]: offsets out of range or deleted by retention;
//! - [`leases`]: batches not held, leases switched off;
//! - [`auth`]: the bearer token;
//! - [`every_endpoint`]: one table of bad requests of every kind over every endpoint, with a
//!   token required and a cursor and a lease in place.

use actix_web::http::Method;
use actix_web::test;
use durability::store::{AppendOutcome, NewRecord};
use serde_json::{Value, json};

use crate::common::{Route, TestLog};

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

/// The URI of `route` with `events`, `0`, `billing` and `b` as its topic, partition, group and
/// batch id, except where `names` gives another value (`("partition", "8")`). Panics on a path
/// parameter it does not know, so that a route with a new one fails the tests that go over
/// every route instead of being skipped.
fn uri_of(route: &Route, names: &[(&str, &str)]) -> String {
    route.uri(|name| {
        let given = names.iter().find(|(given, _)| *given == name);
        let value = given.map_or_else(
            || match name {
                "topic" => "events",
                "partition" => "0",
                "group" => "billing",
                "batchId" => "b",
                other => panic!("{route}: no value for the path parameter {{{other}}}"),
            },
            |(_, value)| *value,
        );
        value.to_owned()
    })
}

/// A body that `route` takes (on a topic with a record in partition 0), or `None` when it takes
/// none, by operationId. Panics on an operation whose body it does not know, so that a route
/// added with a body fails the tests that go over every route instead of being skipped.
fn valid_body(route: &Route) -> Option<&'static str> {
    route.has_body.then(|| match route.operation_id.as_str() {
        "produceEvents" => r#"[{"partitionKey": "k", "payload": 1}]"#,
        "appendRecords" => r#"[{"payload": 1}]"#,
        "commitGroup" => r#"{"offsets": {"0": 0}}"#,
        "putCursor" => r#"{"offset": 0}"#,
        "nackLease" => r#"{"delayMs": 5}"#,
        "forgetCold" => r#"{"before": 0}"#,
        "redriveLetters" => r#"{"offsets": [0]}"#,
        _ => panic!("{route}: no valid body known for it"),
    })
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

mod auth;
mod bodies;
mod every_endpoint;
mod leases;
mod limits;
mod names;
mod offsets;
mod queries;
