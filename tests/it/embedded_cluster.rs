//! A cluster's node embedded in an application: the application opens a `Log` as one node of
//! a cluster of real etcd and the S3 test server, beside a node running as the server process,
//! and serves the log's REST routes beside its own. When its node must stop serving, the
//! library tells the application and leaves it running.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use actix_web::{App, HttpServer, web};
use durability::cluster::StopReason;
use durability::cold::S3Settings;
use durability::config::{ColdKind, ReplicationKind};
use durability::{Config, Event, EventsOutcome, Log};
use serde_json::Value;

use crate::common::bucket::Proxy;
use crate::common::cluster::{
    LEASE_TTL_MS, Node, PARTITIONS, TOPIC, VOLUMES, append, free_port, one_cluster_at_a_time,
    owners, read_all, read_partition, start_etcd, volume_of, wait_for_balance, wait_for_owners,
};
use crate::common::process::request;
use crate::common::{block_on, fresh_s3_bucket};

/// The settings of node `node` embedded in an application: its data in `data_dir`, the bucket
/// of `s3` reached at `endpoint`, etcd at `etcd`, and reached by the other nodes at `addr`.
pub(crate) fn embedded_config(
    data_dir: &std::path::Path,
    s3: &S3Settings,
    endpoint: &str,
    etcd: &str,
    node: &str,
    addr: SocketAddr,
) -> Config {
    let mut config = Config::default();
    config.storage.data_dir = data_dir.to_owned();
    config.cold.kind = ColdKind::S3;
    config.cold.s3_endpoint = endpoint.to_owned();
    config.cold.s3_bucket.clone_from(&s3.bucket);
    config.cold.s3_region.clone_from(&s3.region);
    config.cold.s3_access_key.clone_from(&s3.access_key);
    config.cold.s3_secret_key.clone_from(&s3.secret_key);
    config.cold.s3_path_style = true;
    config.replication.kind = ReplicationKind::S3;
    config.replication.node_id = node.to_owned();
    config.replication.put_retry_ms = 2000;
    config.cluster.etcd_endpoints = etcd.to_owned();
    config.cluster.advertise_url = format!("http://{addr}");
    config.cluster.lease_ttl_ms = LEASE_TTL_MS;
    config.cluster.volumes = VOLUMES.parse().expect("a count");
    config
}

/// What the embedding application reports to the test.
enum Report {
    /// Its node stopped serving, for this reason.
    Stopped(StopReason),
    /// A typed append after the stop answered this error code.
    AppendAfterStop(String),
    /// The application opened the log again, as a new incarnation of its node.
    Reopened,
}

/// Serves `log`'s routes beside the application's own (`GET /app/alive`) on `addr`.
fn serve_application(log: &Log, addr: SocketAddr) -> actix_web::dev::ServerHandle {
    let routes = log.clone();
    let server = HttpServer::new(move || {
        App::new()
            .route(
                "/app/alive",
                web::get().to(|| async { web::Json(serde_json::json!({"alive": true})) }),
            )
            .configure(durability::http::service(routes.clone()))
    })
    .bind(addr)
    .expect("bind the application")
    .run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    handle
}

/// An application embeds node `a` (its S3 traffic through a proxy) beside node `b`, a server
/// process, and serves the log's routes beside one of its own. Its node's writes are made
/// unable to land: past the lease's TTL the node stops serving. The application is told why
/// through `Log::stopped` and keeps running (its own route and its process live on; a typed
/// append answers an error, never ends it), `b` takes every volume, everything acknowledged
/// through `a` is served by `b`, and requests sent to `a` reach `b`. Then the application
/// opens the log again (as `examples/cluster_node.rs` does): a new incarnation of `a` joins
/// and takes its share back.
#[test]
fn an_embedded_node_that_stops_serving_tells_its_application_and_lives_on() {
    let _cluster = one_cluster_at_a_time();
    let s3 = block_on(fresh_s3_bucket());
    let etcd = start_etcd(1);
    let proxy = Proxy::start(&s3.endpoint);
    let dir = tempfile::tempdir().expect("temp dir");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address");
    let config = embedded_config(dir.path(), &s3, &proxy.url(), &etcd.endpoint, "a", addr);

    let (reports, reported) = mpsc::channel();
    let (reopen, reopening) = tokio::sync::oneshot::channel::<()>();
    let (finish, finished) = tokio::sync::oneshot::channel::<()>();
    let application = thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let log = Log::open(config.clone()).expect("the embedded node opens");
            let handle = serve_application(&log, addr);
            let reason = log.stopped().await;
            let _ = reports.send(Report::Stopped(reason));
            let refused = log
                .append(TOPIC, 0, vec![durability::store::NewRecord::new("{}")])
                .await;
            let code = refused.map_or_else(|err| err.code().to_string(), |_| "ok".to_owned());
            let _ = reports.send(Report::AppendAfterStop(code));
            let _ = reopening.await;
            handle.stop(true).await;
            drop(log);
            let log = Log::open(config).expect("the node opens again");
            let handle = serve_application(&log, addr);
            let _ = reports.send(Report::Reopened);
            let _ = finished.await;
            handle.stop(false).await;
            log.shutdown().await.expect("the log shuts down");
        });
    });
    let b = Node::start("b", &etcd, &s3);
    let view = wait_for_balance(b.addr(), 2);
    let held_by_a: Vec<u32> = (0..PARTITIONS)
        .filter(|&partition| owners(&view).get(&volume_of(partition)) == Some(&"a".to_owned()))
        .collect();
    assert!(!held_by_a.is_empty(), "a holds some partition: {view}");
    let acknowledged: Vec<(u32, u64, String)> = held_by_a
        .iter()
        .flat_map(|&partition| (0..5).map(move |n| (partition, format!("p{partition}-{n}"))))
        // The first appends may come while `a` is still taking the volumes it claimed.
        .map(|(partition, key)| (partition, append_when_served(addr, partition, &key), key))
        .collect();

    proxy.set_down(true);
    let reason = match reported.recv_timeout(Duration::from_secs(60)) {
        Ok(Report::Stopped(reason)) => reason,
        Ok(other) => panic!("{} before the stop", other.what()),
        Err(err) => panic!("the application was not told its node stopped: {err}"),
    };
    assert!(
        matches!(reason, StopReason::NotLanding),
        "stopped because its writes could not land: {reason}"
    );
    match reported.recv_timeout(Duration::from_secs(30)) {
        Ok(Report::AppendAfterStop(code)) => assert_ne!(code, "ok", "a stopped node appends"),
        Ok(other) => panic!("{} instead of the append's answer", other.what()),
        Err(err) => panic!("the typed append after the stop did not answer: {err}"),
    }
    assert_eq!(
        request(addr, "GET", "/app/alive", None).map(|(status, _)| status),
        Ok(200),
        "the application serves its own routes after its node stopped"
    );
    assert!(!application.is_finished(), "the application runs on");

    let view = wait_for_owners(b.addr(), 1);
    assert!(
        view["members"].get("a").is_none(),
        "a left the cluster: {view}"
    );
    proxy.set_down(false);
    for (partition, offset, key) in &acknowledged {
        for node in [b.addr(), addr] {
            let held = read_all(node, *partition);
            let found = held
                .iter()
                .find(|record| record["offset"].as_u64() == Some(*offset));
            assert_eq!(
                found.and_then(|record| record["payload"]["key"].as_str()),
                Some(key.as_str()),
                "{key}, acknowledged through a at {offset} of partition {partition}, read \
                 through {node}"
            );
        }
    }

    // The application opens the log again: a new incarnation of `a` joins, takes its share of
    // the volumes back, and serves what `b` acknowledged meanwhile.
    let during = append(b.addr(), held_by_a[0], "while-a-was-away").expect("b's append");
    let _ = reopen.send(());
    match reported.recv_timeout(Duration::from_secs(60)) {
        Ok(Report::Reopened) => {}
        Ok(other) => panic!("{} instead of the reopening", other.what()),
        Err(err) => panic!("the application did not open the log again: {err}"),
    }
    let view = wait_for_balance(b.addr(), 2);
    assert!(owners(&view).values().any(|node| node == "a"), "{view}");
    let again = append_when_served(addr, held_by_a[0], "after-a-came-back");
    assert!(again > during, "{again} follows {during}");
    let _ = finish.send(());
    application
        .join()
        .expect("the application ends when it decides to");
}

impl Report {
    fn what(&self) -> String {
        match self {
            Self::Stopped(reason) => format!("a stop ({reason})"),
            Self::AppendAfterStop(code) => format!("an append's answer ({code})"),
            Self::Reopened => "a reopening".to_owned(),
        }
    }
}

/// Appends `key` to `partition` through `node`, retrying while the volume is being taken (30 s
/// at most): its offset.
fn append_when_served(node: SocketAddr, partition: u32, key: &str) -> u64 {
    let started = Instant::now();
    loop {
        match append(node, partition, key) {
            Ok(offset) => return offset,
            Err(err) => assert!(
                started.elapsed() < Duration::from_secs(30),
                "the append of {key} through {node}: {err}"
            ),
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// What the embedded node's typed calls answered, for the test to compare with REST.
struct Answers {
    /// Each event's partition and offset, in input order.
    placed: Vec<(u32, u64)>,
    /// The group's poll: each partition's records (offset, key) and next offset, in order.
    polled: Vec<(Vec<(u64, String)>, u64)>,
}

/// One partition's page of a REST group poll, as `Answers::polled` holds it.
fn rest_pages(body: &Value) -> Vec<(Vec<(u64, String)>, u64)> {
    body["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .enumerate()
        .map(|(n, entry)| {
            assert_eq!(entry["partition"].as_u64(), Some(n as u64), "in order");
            let records = entry["records"]
                .as_array()
                .expect("records")
                .iter()
                .map(|record| {
                    let offset = record["offset"].as_u64().expect("an offset");
                    (offset, record["key"].as_str().unwrap_or("").to_owned())
                })
                .collect();
            (records, entry["nextOffset"].as_u64().expect("nextOffset"))
        })
        .collect()
}

/// An application embeds node `a` of a three-node cluster (`b` and `c` are server processes)
/// and uses the typed `Log` alone: its keyed events land on every node's partitions, its
/// group poll reads every partition wherever it is held, its group commit moves the cursors
/// on every node, and its topic list names what the other nodes hold: each the same as the
/// REST calls answer through the other nodes.
#[test]
fn an_embedded_node_polls_commits_produces_and_lists_across_the_cluster_as_rest_does() {
    let _cluster = one_cluster_at_a_time();
    let s3 = block_on(fresh_s3_bucket());
    let etcd = start_etcd(1);
    let dir = tempfile::tempdir().expect("temp dir");
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
        .parse()
        .expect("an address");
    let config = embedded_config(dir.path(), &s3, &s3.endpoint, &etcd.endpoint, "a", addr);
    let (answers, answered) = mpsc::channel();
    let (go, going) = tokio::sync::oneshot::channel::<()>();
    let (commit, committing) = tokio::sync::oneshot::channel::<()>();
    let (cursors, committed) = mpsc::channel();
    let (finish, finishing) = tokio::sync::oneshot::channel::<()>();
    let application = thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let log = Log::open(config).expect("the embedded node opens");
            let handle = serve_application(&log, addr);
            let _ = going.await;
            let events: Vec<Event> = (0..40)
                .map(|n| Event {
                    partition_key: format!("user-{n}"),
                    key: Some(format!("e-{n}")),
                    payload: format!("{{\"n\":{n}}}").into(),
                    headers: Vec::new(),
                })
                .collect();
            let placed = match log.append_events(TOPIC, events).await {
                Ok(EventsOutcome::Appended(placed)) => placed,
                other => panic!("the embedded node's events: {other:?}"),
            };
            let pages = log
                .poll(TOPIC, "billing", None, Duration::ZERO)
                .await
                .expect("the embedded node's poll");
            let polled = pages
                .iter()
                .map(|page| {
                    let records = page
                        .records
                        .iter()
                        .map(|record| (record.offset, record.key.clone().unwrap_or_default()))
                        .collect();
                    (records, page.next_offset)
                })
                .collect();
            let _ = answers.send(Answers { placed, polled });
            let _ = committing.await;
            let offsets: BTreeMap<u32, u64> = (0..)
                .zip(&pages)
                .map(|(partition, page)| (partition, page.next_offset))
                .collect();
            let done = log.commit_many(TOPIC, "billing", &offsets).await;
            let topics = log.topics_page(None, None).await;
            let _ = cursors.send((
                offsets,
                done.map_err(|err| err.to_string()),
                topics.map_err(|err| err.to_string()),
            ));
            // Serving on while the test asks the other nodes, which ask this one.
            let _ = finishing.await;
            handle.stop(false).await;
            log.shutdown().await.expect("the log shuts down");
        });
    });
    let (b, c) = (Node::start("b", &etcd, &s3), Node::start("c", &etcd, &s3));
    let view = wait_for_balance(b.addr(), 3);
    let holders: std::collections::BTreeSet<String> = (0..PARTITIONS)
        .filter_map(|partition| owners(&view).get(&volume_of(partition)).cloned())
        .collect();
    assert_eq!(
        holders.len(),
        3,
        "every node holds some of the partitions: {view}"
    );
    // Every node serves once it has taken its volumes.
    for partition in 0..PARTITIONS {
        append_when_served(addr, partition, &format!("warm-up-{partition}"));
    }
    let _ = go.send(());

    let Answers { placed, polled } = answered
        .recv_timeout(Duration::from_secs(60))
        .expect("the embedded node's answers");
    assert_eq!(placed.len(), 40);
    for (n, (partition, offset)) in placed.iter().enumerate() {
        let held = read_partition(c.addr(), TOPIC, *partition);
        let record = held
            .iter()
            .find(|record| record["offset"].as_u64() == Some(*offset))
            .unwrap_or_else(|| panic!("e-{n} at {offset} of partition {partition}"));
        assert_eq!(record["key"].as_str(), Some(format!("e-{n}").as_str()));
    }
    let poll = format!("/topics/{TOPIC}/groups/billing/poll");
    let (status, body) = request(b.addr(), "GET", &poll, None).expect("b's poll");
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        polled,
        rest_pages(&body),
        "the typed poll answers as REST does"
    );
    assert!(
        polled
            .iter()
            .map(|(records, _)| records.len())
            .sum::<usize>()
            >= 40
    );

    let _ = commit.send(());
    let (offsets, done, topics) = committed
        .recv_timeout(Duration::from_secs(60))
        .expect("the embedded node's commit");
    assert_eq!(
        done,
        Ok(offsets.clone()),
        "every partition's cursor, wherever held"
    );
    let (status, body) = request(c.addr(), "GET", &poll, None).expect("c's poll");
    assert_eq!(status, 200, "{body}");
    for (partition, (records, next)) in rest_pages(&body).into_iter().enumerate() {
        assert!(
            records.is_empty(),
            "partition {partition} read past the cursor"
        );
        assert_eq!(next, offsets[&(partition as u32)], "partition {partition}");
    }
    let (status, body) = request(b.addr(), "GET", "/topics", None).expect("b's topics");
    assert_eq!(status, 200, "{body}");
    let topics = topics.expect("the embedded node's topics");
    let typed: Vec<&str> = topics
        .topics
        .iter()
        .map(|topic| topic.name.as_str())
        .collect();
    let rest: Vec<&str> = body["topics"]
        .as_array()
        .expect("topics")
        .iter()
        .filter_map(|topic| topic["name"].as_str())
        .collect();
    assert_eq!(typed, rest, "the typed topic list answers as REST does");
    assert_eq!(typed, [TOPIC]);
    let _ = finish.send(());
    application.join().expect("the application ends");
    drop((b, c));
}
