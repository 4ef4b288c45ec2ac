//! Leases: a batch not held is `409 lease_not_held`, and leases switched off are
//! `409 leases_disabled`.

use actix_web::http::Method;
use actix_web::{App, test};
use serde_json::json;

use super::{assert_error, build, seed, state_of};
use crate::common::{TestLog, respond, stored_partitions};

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
