//! Cold-store faults seen through the REST API, against a real S3-compatible server: a store
//! that is stopped, one that answers errors, and one that returns a damaged object. No hot
//! record is lost, appends keep working, trim answers 503, a damaged segment reads as
//! `log_truncated` (never as data), and once the store is back the next trim completes.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::{App, test};
use durability::cold::{ColdStore, FailingColdStore, S3ColdStore, S3Settings, SegmentKey};
use durability::{Config, Log};
use serde_json::{Value, json};

use crate::common::fresh_s3_bucket;
use crate::common::respond;

/// A log whose cold tier is `cold`, retention keeping 1 hot record, served in-process.
fn log_with(dir: &std::path::Path, cold: Arc<dyn ColdStore>) -> Log {
    let mut config = Config::for_tests(dir);
    config.retention.max_records = 1;
    Log::builder(config)
        .cold_store(Some(cold))
        .open()
        .expect("open the log")
}

/// A test request: method, path and an optional JSON body.
fn request(method: &str, path: &str, body: Option<Value>) -> test::TestRequest {
    let request = match method {
        "GET" => test::TestRequest::get(),
        _ => test::TestRequest::post(),
    }
    .uri(path);
    match body {
        Some(body) => request.set_json(body),
        None => request,
    }
}

/// `call!(app, method, path[, body])`: status and JSON body.
macro_rules! call {
    ($app:expr, $method:expr, $path:expr) => {
        respond(&$app, request($method, $path, None).to_request()).await
    };
    ($app:expr, $method:expr, $path:expr, $body:expr) => {
        respond(&$app, request($method, $path, $body).to_request()).await
    };
}

fn payloads(page: &Value) -> Vec<Value> {
    page["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|record| record["payload"].clone())
        .collect()
}

/// An S3 store answering errors: trim answers 503 and removes nothing, appends and reads keep
/// working, and once it recovers the next trim flushes and every record reads back.
#[actix::test]
async fn failing_s3_store_keeps_hot_records() {
    let dir = tempfile::tempdir().unwrap();
    let s3 = Arc::new(S3ColdStore::new(&fresh_s3_bucket().await).unwrap());
    let cold = Arc::new(FailingColdStore::new(s3));
    let app = test::init_service(App::new().configure(durability::http::service(log_with(
        dir.path(),
        cold.clone(),
    ))))
    .await;
    let records = "/topics/events/partitions/0/records";
    assert_eq!(
        call!(
            app,
            "POST",
            records,
            Some(json!([{"payload": 1}, {"payload": 2}]))
        )
        .0,
        202
    );

    cold.go_down();
    let (status, body) = call!(app, "POST", "/topics/events/partitions/0/trim");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("unavailable"))
    );
    assert_eq!(
        call!(app, "POST", records, Some(json!([{"payload": 3}]))).0,
        202,
        "appends keep working"
    );
    let (_, bounds) = call!(app, "GET", "/topics/events/partitions/0/bounds");
    assert_eq!(
        bounds,
        json!({"oldestOffset": 0, "hotOffset": 0, "nextOffset": 3}),
        "nothing left the hot window"
    );

    cold.recover();
    let (status, body) = call!(app, "POST", "/topics/events/partitions/0/trim");
    assert_eq!((status, body), (200, json!({"removed": 2})));
    let (_, page) = call!(app, "GET", "/topics/events/partitions/0/records?from=0");
    assert_eq!(payloads(&page), vec![json!(1), json!(2), json!(3)]);
}

/// A segment whose object was replaced by other bytes reads as `410 log_truncated`, never as
/// data; the hot records after it still read.
#[actix::test]
async fn damaged_s3_segment_is_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let s3: Arc<dyn ColdStore> = Arc::new(S3ColdStore::new(&fresh_s3_bucket().await).unwrap());
    let app = test::init_service(
        App::new().configure(durability::http::service(log_with(dir.path(), s3.clone()))),
    )
    .await;
    call!(
        app,
        "POST",
        "/topics/events/partitions/0/records",
        Some(json!([{"payload": "a"}, {"payload": "b"}]))
    );
    assert_eq!(
        call!(app, "POST", "/topics/events/partitions/0/trim").1,
        json!({"removed": 1})
    );

    let key = SegmentKey::new("segments", "events", 0, 0, 0);
    let original = s3
        .get(&key)
        .await
        .unwrap()
        .expect("the segment was flushed");
    let mut damaged = original.clone();
    let last = damaged.len() - 2;
    damaged[last] ^= 0x01;
    s3.delete(&key).await.unwrap();
    s3.put(&key, &damaged).await.unwrap();

    let (status, body) = call!(app, "GET", "/topics/events/partitions/0/records?from=0");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (410, Some("log_truncated")),
        "{body}"
    );
    assert_eq!(body["error"]["requestedOffset"], json!(0));
    let (status, page) = call!(app, "GET", "/topics/events/partitions/0/records?from=1");
    assert_eq!((status, payloads(&page)), (200, vec![json!("b")]));
}

/// A local S3 server of its own, so the test can stop it (moto keeps its state in memory: a
/// restarted server has no bucket until one is created).
struct OwnS3 {
    child: Child,
    settings: S3Settings,
}

impl OwnS3 {
    async fn start(port: u16, bucket: &str) -> Self {
        let moto = concat!(env!("CARGO_MANIFEST_DIR"), "/.venv-s3/bin/moto_server");
        let child = Command::new(moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server (installed by scripts/test into .venv-s3)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            actix::clock::sleep(Duration::from_millis(50)).await;
        }
        let settings = S3Settings {
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: bucket.into(),
            region: "eu-central-1".into(),
            access_key: "test".into(),
            secret_key: "test".into(),
            path_style: true,
        };
        s3::Bucket::create_with_path_style(
            bucket,
            settings.region().unwrap(),
            settings.credentials().unwrap(),
            s3::BucketConfiguration::default(),
        )
        .await
        .expect("create the bucket");
        Self { child, settings }
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OwnS3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The S3 server stopped during trims: trim answers 503 and removes nothing, appends keep
/// working; when the server is back (same address), the next trim completes and every record
/// reads back, from the cold tier and the hot window.
#[actix::test]
async fn stopped_s3_server_then_back() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let first = OwnS3::start(port, "segments").await;
    let dir = tempfile::tempdir().unwrap();
    let s3: Arc<dyn ColdStore> = Arc::new(S3ColdStore::new(&first.settings).unwrap());
    let app = test::init_service(
        App::new().configure(durability::http::service(log_with(dir.path(), s3))),
    )
    .await;
    let records = "/topics/events/partitions/0/records";
    call!(
        app,
        "POST",
        records,
        Some(json!([{"payload": 1}, {"payload": 2}, {"payload": 3}]))
    );

    first.stop();
    let (status, body) = call!(app, "POST", "/topics/events/partitions/0/trim");
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    assert_eq!(
        call!(app, "POST", records, Some(json!([{"payload": 4}]))).0,
        202
    );
    let (_, page) = call!(app, "GET", "/topics/events/partitions/0/records?from=0");
    assert_eq!(payloads(&page).len(), 4, "every record is still hot");

    let _back = OwnS3::start(port, "segments").await;
    let (status, body) = call!(app, "POST", "/topics/events/partitions/0/trim");
    assert_eq!((status, body), (200, json!({"removed": 3})));
    let (_, page) = call!(app, "GET", "/topics/events/partitions/0/records?from=0");
    assert_eq!(
        payloads(&page),
        vec![json!(1), json!(2), json!(3), json!(4)]
    );
    let (_, bounds) = call!(app, "GET", "/topics/events/partitions/0/bounds");
    assert_eq!(
        bounds,
        json!({"oldestOffset": 0, "hotOffset": 3, "nextOffset": 4})
    );
}
