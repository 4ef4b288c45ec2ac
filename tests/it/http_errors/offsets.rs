//! Offsets: an offset out of the log's range is `400 invalid_offset`, and one that retention
//! deleted is `410 log_truncated`.

use actix_web::http::Method;
use actix_web::{App, test};
use serde_json::json;

use super::{assert_error, build, seed, state_of};
use crate::common::{TestLog, respond, stored_partitions};

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
