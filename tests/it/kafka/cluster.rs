//! The Kafka listener in a three-node cluster: a confluent-kafka idempotent producer
//! bootstrapped through one node follows the partitions' leaders as the busiest node is
//! killed (SIGKILL) mid-run, without a restart, and every acknowledged record is in the log
//! once, at the offset its acknowledgement named.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::program;
use crate::common::cluster::{
    LEASE_TTL_MS, Node, busiest, free_port, one_cluster_at_a_time, position, start_etcd,
    three_nodes, wait_for_owners,
};
use crate::common::process::request;
use crate::common::{block_on, fresh_s3_bucket};

const TOPIC: &str = "kafka-orders";
const RECORDS: u64 = 6_000;
/// Records a second: the run lasts about ten seconds, the kill in its middle.
const RATE: u64 = 600;

/// Every record of `partition` of [`TOPIC`], read through `node` over REST, by offset.
fn read_partition(node: std::net::SocketAddr, partition: u32) -> BTreeMap<u64, u64> {
    let mut records = BTreeMap::new();
    let mut from = 0;
    loop {
        let path = format!("/topics/{TOPIC}/partitions/{partition}/records?from={from}&limit=100");
        let (status, page) = request(node, "GET", &path, None).expect("the node answers");
        assert_eq!(status, 200, "{page}");
        let page_records = page["records"].as_array().expect("records");
        if page_records.is_empty() {
            return records;
        }
        for record in page_records {
            let offset = record["offset"].as_u64().unwrap();
            let n = record["payload"]["n"]
                .as_u64()
                .expect("a record of the producer");
            records.insert(offset, n);
        }
        from = page["nextOffset"].as_u64().unwrap();
    }
}

/// The producer bootstraps through node a; the busiest node dies four seconds in. Every
/// delivery report is a success, and the log holds each acknowledged record once, where it
/// was acknowledged.
#[test]
fn a_producer_follows_the_leaders_through_a_killed_node() {
    let _alone = one_cluster_at_a_time();
    let etcd = start_etcd(1);
    let s3 = block_on(fresh_s3_bucket());
    let mut nodes = three_nodes(|name| {
        let local = ("127.0.0.1", None);
        let mut node =
            Node::unstarted(name, &etcd.endpoint, &s3, &s3.endpoint, LEASE_TTL_MS, local);
        let kafka = format!("127.0.0.1:{}", free_port());
        node.set_env("DURABILITY__KAFKA__BIND", &kafka);
        node.set_env("DURABILITY__KAFKA__ADVERTISED", &kafka);
        node.restart();
        node
    });
    let view = wait_for_owners(nodes[0].addr(), 3);
    for node in nodes.iter() {
        let kafka = view["members"][&node.name]["kafka"].as_str();
        assert!(
            kafka.is_some(),
            "{} registered its Kafka address: {view}",
            node.name
        );
    }
    let bootstrap = view["members"]["a"]["kafka"].as_str().unwrap().to_owned();

    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-kafka/bin/python");
    assert!(python.exists(), "run scripts/install-kafka-clients");
    let mut producer = Command::new(python)
        .arg(program("cluster_producer.py"))
        .args([&bootstrap, TOPIC, &RECORDS.to_string(), &RATE.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the producer");
    let reports = BufReader::new(producer.stdout.take().unwrap());
    let started = Instant::now();
    let victim = busiest(&view);
    let at = position(&nodes, &victim);
    let mut killed = false;
    let mut acknowledged: HashMap<u64, (u32, u64)> = HashMap::new();
    let mut failed = Vec::new();
    let mut done = None;
    for line in reports.lines() {
        let line = line.expect("the producer's output");
        let report: Value = serde_json::from_str(&line).expect("a JSON line");
        if !killed && started.elapsed() > Duration::from_secs(4) {
            nodes[at].kill();
            killed = true;
        }
        if report["done"] == true {
            done = Some(report);
            break;
        }
        let n = report["n"].as_u64().unwrap();
        match report["offset"].as_u64() {
            Some(offset) => {
                let partition = report["partition"].as_u64().unwrap() as u32;
                assert!(
                    acknowledged.insert(n, (partition, offset)).is_none(),
                    "{n} twice"
                );
            }
            None => failed.push(report),
        }
    }
    assert!(killed, "the producer ran past the kill");
    assert!(producer.wait().unwrap().success());
    assert_eq!(done.expect("the producer finished")["undelivered"], 0);
    assert!(
        failed.is_empty(),
        "every record delivered; {} were not, the first: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    assert_eq!(acknowledged.len() as u64, RECORDS);

    let survivor = nodes
        .iter()
        .find(|node| node.name != victim)
        .expect("a survivor")
        .addr();
    let mut seen: HashMap<u64, (u32, u64)> = HashMap::new();
    for partition in 0..8 {
        for (offset, n) in read_partition(survivor, partition) {
            assert!(
                seen.insert(n, (partition, offset)).is_none(),
                "record {n} is in the log twice"
            );
        }
    }
    for (n, place) in &acknowledged {
        assert_eq!(
            seen.get(n),
            Some(place),
            "record {n} where it was acknowledged"
        );
    }
}
