//! Leases: a batch not held is `409 lease_not_held`, and leases switched off are
//! `409 leases_disabled`.

use actix_web::http::Method;
use actix_web::{App, test};
use serde_json::json;

use super::{assert_error, build, seed, state_of, uri_of, valid_body};
use crate::common::{TestLog, respond, routes, stored_partitions};

/// Ack, nack and extend (every route of the document with a `{batchId}`) of an unknown
/// `batchId`, or of a batch held by another group, are `409 lease_not_held` naming the
/// `batchId`, and the real holder's lease is untouched.
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

    for route in routes().iter().filter(|route| route.has("batchId")) {
        for (group, batch) in [
            ("workers", "no-such-batch"),
            ("others", lease.batch_id.as_str()),
            ("workers", "00000000-0000-0000-0000-000000000000"),
        ] {
            let names = [("topic", "jobs"), ("group", group), ("batchId", batch)];
            let uri = uri_of(route, &names);
            let answer = call!(app, route.method.clone(), &uri, valid_body(route));
            let error = assert_error(&answer, 409, "lease_not_held");
            assert_eq!(error["batchId"], json!(batch), "{error}");
        }
        // On another partition of the topic, the batch is not held either.
        let names = [
            ("topic", "jobs"),
            ("partition", "1"),
            ("group", "workers"),
            ("batchId", lease.batch_id.as_str()),
        ];
        let answer = call!(app, route.method.clone(), &uri_of(route, &names), None);
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

/// With `leases.enabled = false`, every lease route (every route of the document under
/// `.../leases`) is `409 leases_disabled`, and nothing is leased or created.
#[actix::test]
async fn leases_disabled_is_409() {
    let t = TestLog::with(|config| config.leases.enabled = false);
    seed(&t, "jobs", 0, 2).await;
    let app =
        test::init_service(App::new().configure(durability::http::service(t.log.clone()))).await;
    let before = state_of(&t, "jobs").await;
    let files = stored_partitions(&t.config.storage.data_dir);
    let lease_routes = routes()
        .iter()
        .filter(|route| route.path.split('/').any(|segment| segment == "leases"));
    let names = [("topic", "jobs"), ("group", "workers")];
    let mut cases: Vec<(Method, String, Option<&str>)> = lease_routes
        .map(|route| {
            (
                route.method.clone(),
                uri_of(route, &names),
                valid_body(route),
            )
        })
        .collect();
    assert!(cases.len() >= 6, "{cases:?}");
    // With a limit, and on another partition.
    cases.extend([
        (
            Method::POST,
            "/topics/jobs/partitions/0/groups/workers/leases?limit=1".to_owned(),
            None,
        ),
        (
            Method::POST,
            "/topics/jobs/partitions/3/groups/workers/leases".to_owned(),
            None,
        ),
    ]);
    for (method, uri, body) in cases {
        let answer = call!(app, method, &uri, body);
        assert_error(&answer, 409, "leases_disabled");
    }
    assert_eq!(state_of(&t, "jobs").await, before);
    assert_eq!(stored_partitions(&t.config.storage.data_dir), files);
}
