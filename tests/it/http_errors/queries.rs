//! Query parameters: out of range is `400 invalid_request`; a `waitMs` or `limit` above the
//! server's cap is capped, not refused.

use std::time::{Duration, Instant};

use actix_web::http::Method;
use actix_web::{App, test};
use serde_json::json;

use super::{assert_error, build, seed, state_of, uri_of, valid_body};
use crate::common::{TestLog, respond, routes};

/// Query parameters out of range are `400 invalid_request`: `limit` 0, negative or not a
/// number, a negative or non-numeric `waitMs`, and a `from` or `limit` that does not fit a
/// signed 64-bit integer; on every route of the document that declares the parameter (reads,
/// group polls and lease claims alike).
#[actix::test]
async fn invalid_request_for_bad_query_parameters() {
    let t = TestLog::with(|_| {});
    seed(&t, "events", 0, 2).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "events").await;

    // The bad values of each query parameter, by name: every parameter that a route of the
    // document declares must be here.
    let bad_values: &[(&str, &[&str])] = &[
        (
            "from",
            &[
                "abc",
                "",
                "1e3",
                "9223372036854775808",
                "18446744073709551615",
            ],
        ),
        (
            "limit",
            &[
                "0",
                "-3",
                "ten",
                "x",
                "many",
                "",
                "1.5",
                "9223372036854775808",
            ],
        ),
        ("waitMs", &["-1", "-5", "soon", "9223372036854775808"]),
        ("after", &["", ".hidden", "a/b", "%2E%2E"]),
    ];
    for route in routes() {
        for parameter in &route.query {
            let (_, values) = bad_values
                .iter()
                .find(|(name, _)| name == parameter)
                .unwrap_or_else(|| panic!("{route}: no bad values known for {parameter}"));
            for value in *values {
                let uri = format!("{}?{parameter}={value}", uri_of(route, &[]));
                let answer = call!(app, route.method.clone(), &uri, valid_body(route));
                assert_error(&answer, 400, "invalid_request");
            }
        }
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
