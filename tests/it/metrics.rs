//! `GET /metrics` through the real route table (`http::service`) without sockets: what the
//! handlers count, what a scrape reads from the log, what the stores count of cold flushes,
//! and that the endpoint sits behind the bearer token.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use actix_web::App;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::{Method, header};
use actix_web::test::{self, TestRequest};
use durability::cold::{ColdStore, FailingColdStore, MemoryColdStore};
use durability::{Config, Log};
use serde_json::{Value, json};

use crate::common::{TestLog, eventually, routes};

/// Sends one request; answers its status and body.
async fn send<S, R, B>(app: &S, request: R) -> (u16, String)
where
    S: Service<R, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let response = test::call_service(app, request).await;
    let status = response.status().as_u16();
    let body = test::read_body(response).await;
    (
        status,
        String::from_utf8(body.to_vec()).expect("a UTF-8 body"),
    )
}

/// Sends `method uri` (with an optional JSON body), asserts the answer's status and answers
/// its text.
macro_rules! expect {
    ($app:expr, $method:expr, $uri:expr, $body:expr, $status:expr) => {{
        let mut request = TestRequest::default().method($method).uri($uri);
        let body: Option<Value> = $body;
        if let Some(body) = body {
            request = request.set_json(body);
        }
        let (status, text) = send(&$app, request.to_request()).await;
        assert_eq!(status, $status, "{}: {text}", $uri);
        text
    }};
}

/// Scrapes `/metrics` (no token), answering the text.
macro_rules! scrape {
    ($app:expr) => {
        expect!($app, Method::GET, "/metrics", None, 200)
    };
}

/// Partition 0 of `events`, where most tests append.
const RECORDS: &str = "/topics/events/partitions/0/records";

/// Appends the JSON array `records` to [`RECORDS`].
macro_rules! append {
    ($app:expr, $records:expr) => {
        expect!($app, Method::POST, RECORDS, Some($records), 202)
    };
}

/// Asserts that the scrape `text` has the sample `line` (name, labels and value).
fn assert_sample(text: &str, line: &str) {
    assert!(
        text.lines().any(|sample| sample == line),
        "no sample {line:?} in:\n{text}"
    );
}

/// Appends (both produce routes), a read, a committed cursor and a lease all show up in one
/// scrape: per-topic counters, lag and lease gauges per group, and request durations
/// labelled by route pattern (never by topic name), with unknown paths as `unmatched`.
#[actix::test]
async fn scrape_reports_appends_reads_lag_leases_and_requests() {
    let log = TestLog::with(|_| {});
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;

    append!(
        app,
        json!([{"payload": {"n": 1}}, {"payload": {"n": 2}}, {"payload": {"n": 3}}])
    );
    let events = json!([
        {"partitionKey": "a", "payload": "x"},
        {"partitionKey": "b", "payload": "yy"},
    ]);
    expect!(
        app,
        Method::POST,
        "/topics/orders/records",
        Some(events),
        202
    );
    let read = "/topics/events/partitions/0/records?from=0";
    expect!(app, Method::GET, read, None, 200);
    let cursor = "/topics/events/partitions/0/cursors/billing";
    expect!(app, Method::PUT, cursor, Some(json!({"offset": 1})), 200);
    let lease = "/topics/events/partitions/0/groups/billing/leases?limit=1";
    expect!(app, Method::POST, lease, None, 200);
    expect!(app, Method::GET, "/no/such/route", None, 404);

    let text = scrape!(app);
    assert_sample(
        &text,
        r#"durability_appended_records_total{topic="events"} 3"#,
    );
    // `{"n":1}` is 7 bytes of stored payload text; `"x"` and `"yy"` are 3 and 4.
    assert_sample(
        &text,
        r#"durability_appended_bytes_total{topic="events"} 21"#,
    );
    assert_sample(
        &text,
        r#"durability_appended_records_total{topic="orders"} 2"#,
    );
    assert_sample(
        &text,
        r#"durability_appended_bytes_total{topic="orders"} 7"#,
    );
    assert_sample(&text, r#"durability_read_records_total{topic="events"} 3"#);
    assert_sample(
        &text,
        r#"durability_consumer_lag{group="billing",partition="0",topic="events"} 2"#,
    );
    assert_sample(
        &text,
        r#"durability_leases{group="billing",partition="0",state="active",topic="events"} 1"#,
    );
    assert_sample(
        &text,
        r#"durability_leases{group="billing",partition="0",state="pending",topic="events"} 0"#,
    );
    assert_sample(&text, r#"durability_cold_flushes_total{result="ok"} 0"#);
    assert_sample(&text, r#"durability_cold_flushes_total{result="error"} 0"#);
    assert_sample(
        &text,
        r#"durability_http_request_duration_seconds_count{method="POST",route="/topics/{topic}/partitions/{partition}/records",status="202"} 1"#,
    );
    assert_sample(
        &text,
        r#"durability_http_request_duration_seconds_count{method="GET",route="/topics/{topic}/partitions/{partition}/records",status="200"} 1"#,
    );
    assert_sample(
        &text,
        r#"durability_http_request_duration_seconds_count{method="GET",route="unmatched",status="404"} 1"#,
    );
    assert!(text.contains("# TYPE durability_http_request_duration_seconds histogram"));

    // Gauges are refilled, not accumulated: a second scrape after an ack shows the new state.
    let cursor = log.log.cursor("events", 0, "billing").await.unwrap();
    assert!(matches!(cursor, Some(1)));
    let batch = log.log.leases("events", 0, "billing").await.unwrap()[0]
        .batch_id
        .clone();
    log.log.ack("events", 0, "billing", &batch).await.unwrap();
    let text = scrape!(app);
    assert_sample(
        &text,
        r#"durability_consumer_lag{group="billing",partition="0",topic="events"} 1"#,
    );
    assert_sample(
        &text,
        r#"durability_leases{group="billing",partition="0",state="active",topic="events"} 0"#,
    );
}

/// The request labels are bounded and speak the document's language: a method the server
/// does not know is counted as `other` (a client inventing methods adds no series), and the
/// `route` label of each route is its path exactly as the OpenAPI document writes it.
#[actix::test]
async fn request_labels_are_bounded_and_name_the_documented_paths() {
    let log = TestLog::with(|_| {});
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    for invented in ["FOOBAR1", "FOOBAR2"] {
        let method = Method::from_bytes(invented.as_bytes()).unwrap();
        let request = TestRequest::default().method(method).uri("/topics");
        assert_eq!(send(&app, request.to_request()).await.0, 405);
    }
    for route in routes() {
        let uri = route.uri(|name| if name == "partition" { "0" } else { "x" }.to_owned());
        let request = TestRequest::default()
            .method(route.method.clone())
            .uri(&uri);
        send(&app, request.to_request()).await;
    }

    let text = scrape!(app);
    assert!(!text.contains("FOOBAR"), "{text}");
    assert_sample(
        &text,
        r#"durability_http_request_duration_seconds_count{method="other",route="/topics",status="405"} 2"#,
    );
    let labelled: BTreeSet<&str> = text
        .lines()
        .filter(|line| line.starts_with("durability_http_request_duration_seconds_count{"))
        .filter_map(|line| line.split("route=\"").nth(1)?.split('"').next())
        .collect();
    // `/healthz` is not timed; every other documented path is, under its own name.
    let documented: BTreeSet<&str> = routes()
        .iter()
        .map(|route| route.path.as_str())
        .filter(|path| *path != "/healthz")
        .collect();
    assert_eq!(labelled, documented);
}

/// With a token configured, `/metrics` answers 401 without it and the text format with it.
#[actix::test]
async fn scrape_requires_the_token() {
    let log = TestLog::with(|config| config.server.auth_token = "s3cret".into());
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;

    let anonymous = TestRequest::get().uri("/metrics").to_request();
    let (status, body) = send(&app, anonymous).await;
    assert_eq!(status, 401);
    assert!(!body.contains("durability_"));

    let response = test::call_service(
        &app,
        TestRequest::get()
            .uri("/metrics")
            .insert_header((header::AUTHORIZATION, "Bearer s3cret"))
            .to_request(),
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    let content_type = response.headers().get(header::CONTENT_TYPE).unwrap();
    assert!(content_type.to_str().unwrap().starts_with("text/plain"));
    let text = String::from_utf8(test::read_body(response).await.to_vec()).unwrap();
    // The refused scrape was still timed.
    assert_sample(
        &text,
        r#"durability_http_request_duration_seconds_count{method="GET",route="/metrics",status="401"} 1"#,
    );
}

/// Every partition's store counts its cold flushes into the log's shared counters, by result:
/// a trim while the cold store is down counts an error, the retried trim an `ok`.
#[actix::test]
async fn cold_flushes_are_counted_by_result() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::for_tests(dir.path());
    config.retention.max_records = 1;
    let cold = Arc::new(FailingColdStore::new(Arc::new(MemoryColdStore::new())));
    let log = Log::builder(config)
        .cold_store(Some(cold.clone() as Arc<dyn ColdStore>))
        .open()
        .unwrap();
    let app =
        test::init_service(App::new().configure(durability::http::service(log.clone()))).await;

    append!(app, json!([{"payload": 1}, {"payload": 2}]));
    let trim = "/topics/events/partitions/0/trim";
    cold.go_down();
    expect!(app, Method::POST, trim, None, 503);
    cold.recover();
    let (status, body) = send(&app, TestRequest::post().uri(trim).to_request()).await;
    assert_eq!((status, body.as_str()), (200, r#"{"removed":1}"#));

    let text = scrape!(app);
    assert_sample(&text, r#"durability_cold_flushes_total{result="ok"} 1"#);
    assert_sample(&text, r#"durability_cold_flushes_total{result="error"} 1"#);
    assert!(matches!(
        (log.cold_flushes().flushed(), log.cold_flushes().failed()),
        (1, 1)
    ));
}

/// A group appears as soon as it leases, before it ever commits (its lag counts from the first
/// offset it leased), and only groups that lease get lease series.
#[actix::test]
async fn a_leasing_group_shows_before_its_first_ack_and_only_leasing_groups_get_lease_series() {
    let log = TestLog::with(|_| {});
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    append!(app, json!([{"payload": 1}, {"payload": 2}, {"payload": 3}]));
    let lease = "/topics/events/partitions/0/groups/workers/leases?limit=1";
    expect!(app, Method::POST, lease, None, 200);
    let cursor = "/topics/events/partitions/0/cursors/audit";
    expect!(app, Method::PUT, cursor, Some(json!({"offset": 1})), 200);

    let text = scrape!(app);
    assert_sample(
        &text,
        r#"durability_consumer_lag{group="workers",partition="0",topic="events"} 3"#,
    );
    assert_sample(
        &text,
        r#"durability_leases{group="workers",partition="0",state="active",topic="events"} 1"#,
    );
    assert_sample(
        &text,
        r#"durability_consumer_lag{group="audit",partition="0",topic="events"} 2"#,
    );
    assert!(
        !text.contains(r#"durability_leases{group="audit""#),
        "a group that never leased has no lease series:\n{text}"
    );
}

/// A scrape neither reopens a stopped partition nor keeps an idle one open, and a stopped
/// partition's series keep the values they had.
#[actix::test]
async fn scrapes_leave_partitions_to_stop_and_stopped_partitions_keep_their_series() {
    let log = TestLog::with(|config| config.partitions.idle_stop_ms = 300);
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    append!(app, json!([{"payload": 1}, {"payload": 2}, {"payload": 3}]));
    log.log.commit("events", 0, "audit", 1).await.unwrap();
    let lag = r#"durability_consumer_lag{group="audit",partition="0",topic="events"} 2"#;

    // Scraping far more often than the idle timeout does not keep the partition open.
    let mut scrapes = 0;
    let stopped = eventually(Duration::from_secs(20), async || {
        assert_sample(&scrape!(app), lag);
        scrapes += 1;
        log.log.running_partitions().await.unwrap().is_empty()
    })
    .await;
    assert!(stopped, "the partition stopped while being scraped");
    assert!(scrapes > 1);

    assert_sample(&scrape!(app), lag);
    assert!(
        log.log.running_partitions().await.unwrap().is_empty(),
        "a scrape does not reopen a stopped partition"
    );
}

/// Each damaged volume shows as one series with its kind, for alerting: one that holds fewer
/// commits than its high-water mark says were acknowledged is `lost`, one that cannot be
/// opened `unopenable`; an intact one shows nothing.
#[actix::test]
async fn damaged_volumes_show_by_kind() {
    let log = TestLog::with(|config| {
        config.storage.volumes = 3;
        let data_dir = &config.storage.data_dir;
        std::fs::create_dir_all(data_dir).unwrap();
        std::fs::write(data_dir.join("volume-0.sqlite-hwm"), "100\n").unwrap();
        std::fs::write(data_dir.join("volume-1.sqlite"), [0xA5; 4096]).unwrap();
    });
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    let text = scrape!(app);
    assert_sample(
        &text,
        r#"durability_damaged_volumes{kind="lost",volume="0"} 1"#,
    );
    assert_sample(
        &text,
        r#"durability_damaged_volumes{kind="unopenable",volume="1"} 1"#,
    );
    assert!(!text.contains(r#"volume="2""#), "{text}");
}

/// With 10⁴ topics and `max_topics = 100`, the per-topic families have 101 series each (the
/// first 100 topics, and the rest summed under `(other)`), and only topics with series of
/// their own have lag series; the scrape's size does not follow the topics. Each topic used
/// to keep two series for ever.
#[actix::test]
async fn series_stay_within_the_bound_whatever_the_topics() {
    const TOPICS: usize = 10_000;
    const MAX_TOPICS: usize = 100;
    let log = TestLog::with(|config| config.metrics.max_topics = MAX_TOPICS);
    let app =
        test::init_service(App::new().configure(durability::http::service(log.log.clone()))).await;
    for topic in 0..TOPICS {
        let uri = format!("/topics/t{topic}/partitions/0/records");
        expect!(app, Method::POST, &uri, Some(json!([{"payload": 1}])), 202);
    }
    // A group on a topic with series of its own, and one on a topic past the bound.
    log.log.commit("t0", 0, "audit", 1).await.unwrap();
    log.log.commit("t9999", 0, "audit", 1).await.unwrap();

    let text = scrape!(app);
    let series = |name: &str| {
        text.lines()
            .filter(|line| line.starts_with(&format!("{name}{{")))
            .count()
    };
    assert_eq!(series("durability_appended_records_total"), MAX_TOPICS + 1);
    assert_eq!(series("durability_appended_bytes_total"), MAX_TOPICS + 1);
    assert_sample(&text, r#"durability_appended_records_total{topic="t0"} 1"#);
    assert_sample(
        &text,
        &format!(
            r#"durability_appended_records_total{{topic="(other)"}} {}"#,
            TOPICS - MAX_TOPICS
        ),
    );
    assert_sample(
        &text,
        r#"durability_consumer_lag{group="audit",partition="0",topic="t0"} 0"#,
    );
    assert!(!text.contains(r#"topic="t9999""#), "{text}");
    assert!(text.len() < 64 * 1024, "{} bytes", text.len());
}
