//! The Kafka listener in a three-node cluster: a confluent-kafka idempotent producer
//! bootstrapped through one node follows the partitions' leaders as the busiest node is
//! killed (SIGKILL) mid-run, without a restart, and every acknowledged record is in the log
//! once, at the offset its acknowledgement named; a consumer group whose coordinator's node
//! is killed finds the new coordinator, and no offset it committed is lost or moved back.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::program;
use crate::common::cluster::{
    LEASE_TTL_MS, Node, VOLUMES, busiest, free_port, one_cluster_at_a_time, owners, position,
    start_etcd, three_nodes, wait_for_owners,
};
use crate::common::etcd::Etcd;
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

/// Three nodes with Kafka listeners, each registered in the view: the nodes, the view, and
/// what they need kept alive.
fn kafka_cluster() -> (Etcd, durability::cold::S3Settings, Vec<Node>, Value) {
    let etcd = start_etcd(1);
    let s3 = block_on(fresh_s3_bucket());
    let nodes = three_nodes(|name| {
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
    (etcd, s3, nodes, view)
}

/// The producer bootstraps through node a; the busiest node dies four seconds in. Every
/// delivery report is a success, and the log holds each acknowledged record once, where it
/// was acknowledged.
#[test]
fn a_producer_follows_the_leaders_through_a_killed_node() {
    let _alone = one_cluster_at_a_time();
    let (_etcd, _s3, mut nodes, view) = kafka_cluster();
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

const GROUP_TOPIC: &str = "kafka-group-orders";
const GROUP: &str = "billing";
const GROUP_RECORDS: u64 = 3_000;

/// A client program of `tests/kafka/` run with the Kafka clients' Python, its output piped.
fn client(script: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-kafka/bin/python");
    assert!(python.exists(), "run scripts/install-kafka-clients");
    Command::new(python)
        .arg(program(script))
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|err| panic!("start {script}: {err}"))
}

/// The JSON lines a child prints, each with when it was read, gathered by a thread.
type Lines = Arc<Mutex<Vec<(Instant, Value)>>>;

fn gather(child: &mut Child) -> (Lines, std::thread::JoinHandle<()>) {
    let lines: Lines = Arc::default();
    let stdout = BufReader::new(child.stdout.take().expect("piped"));
    let gathered = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { return };
            let value: Value = serde_json::from_str(&line).expect("a JSON line");
            gathered.lock().unwrap().push((Instant::now(), value));
        }
    });
    (lines, reader)
}

fn of_kind<'a>(
    lines: &'a [(Instant, Value)],
    kind: &'a str,
) -> impl Iterator<Item = &'a (Instant, Value)> {
    lines.iter().filter(move |(_, line)| line["kind"] == kind)
}

/// Two members of a group, bootstrapped through a node that does not coordinate it, consume
/// while records are produced; the coordinator's node is killed (SIGKILL) once they commit.
/// The members find the new coordinator and finish: every record is processed, no commit made
/// after the kill is below one acknowledged before it (an offset moved back would be), nothing
/// is processed again below those commits once the group rejoined, and the group's cursors end
/// at every partition's end.
#[test]
fn a_group_follows_its_coordinator_through_a_kill_and_keeps_its_offsets() {
    let _alone = one_cluster_at_a_time();
    let (_etcd, _s3, mut nodes, view) = kafka_cluster();
    let volume = durability::routing::volume_of_key(GROUP, VOLUMES.parse().expect("a count"));
    let coordinator = owners(&view)[&(volume as u64)].clone();
    let survivor = nodes
        .iter()
        .find(|node| node.name != coordinator)
        .expect("another node");
    let bootstrap = view["members"][&survivor.name]["kafka"]
        .as_str()
        .unwrap()
        .to_owned();
    let survivor = survivor.addr();
    let half = (GROUP_RECORDS / 2).to_string();

    let mut first = client(
        "confluent_group_producer.py",
        &[&bootstrap, GROUP_TOPIC, &half],
        &[],
    );
    assert!(
        first.wait().unwrap().success(),
        "the first half is produced"
    );
    let members: Vec<(Child, Lines, std::thread::JoinHandle<()>)> = (0..2)
        .map(|_| {
            let mut member = client(
                "confluent_group_consumer.py",
                &[&bootstrap, GROUP_TOPIC, GROUP],
                &[("IDLE_SECONDS", "20"), ("BATCH", "50")],
            );
            let (lines, reader) = gather(&mut member);
            (member, lines, reader)
        })
        .collect();
    let mut second = client(
        "confluent_group_producer.py",
        &[&bootstrap, GROUP_TOPIC, &half, &half],
        &[("RATE", "150")],
    );
    let (produced, producer_reader) = gather(&mut second);

    let committed_before = Instant::now() + Duration::from_secs(60);
    while members
        .iter()
        .map(|(_, lines, _)| of_kind(&lines.lock().unwrap(), "committed").count())
        .sum::<usize>()
        < 20
    {
        assert!(Instant::now() < committed_before, "the members commit");
        std::thread::sleep(Duration::from_millis(50));
    }
    let at = position(&nodes, &coordinator);
    nodes[at].kill();
    let killed = Instant::now();

    let members: Vec<Lines> = members
        .into_iter()
        .map(|(mut member, lines, reader)| {
            let status = member.wait().unwrap();
            assert!(status.success(), "a member exits by itself: {status}");
            reader.join().unwrap();
            lines
        })
        .collect();
    assert!(
        second.wait().unwrap().success(),
        "the second half is produced"
    );
    producer_reader.join().unwrap();

    let produced = produced.lock().unwrap();
    let done = &of_kind(&produced, "done")
        .next()
        .expect("the producer's last line")
        .1;
    let ends: BTreeMap<u32, u64> = done["partitions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(p, stats)| (p.parse().unwrap(), stats["end"].as_u64().unwrap()))
        .collect();
    let all: Vec<(Instant, Value)> = members
        .iter()
        .flat_map(|lines| lines.lock().unwrap().clone())
        .collect();
    let place = |line: &Value| {
        (
            line["partition"].as_u64().unwrap() as u32,
            line["offset"].as_u64().unwrap(),
        )
    };
    let mut before_kill: BTreeMap<u32, u64> = BTreeMap::new();
    for (_, line) in of_kind(&all, "committed").filter(|(when, _)| *when < killed) {
        let (partition, offset) = place(line);
        let highest = before_kill.entry(partition).or_default();
        *highest = (*highest).max(offset);
    }
    for (_, line) in of_kind(&all, "committed").filter(|(when, _)| *when > killed) {
        let (partition, offset) = place(line);
        let floor = before_kill.get(&partition).copied().unwrap_or(0);
        assert!(
            offset >= floor,
            "partition {partition}: a commit of {offset} after the kill, below {floor} committed \
             before it"
        );
    }
    // Lines read two seconds after the kill were processed after it: the group rejoins after
    // its members' sessions (6 s), from its cursors.
    for (_, line) in
        of_kind(&all, "processed").filter(|(when, _)| *when > killed + Duration::from_secs(2))
    {
        let (partition, offset) = place(line);
        let floor = before_kill.get(&partition).copied().unwrap_or(0);
        assert!(
            offset >= floor,
            "partition {partition}: offset {offset} processed again after the kill, below the \
             {floor} committed before it"
        );
    }
    let processed: std::collections::BTreeSet<String> = of_kind(&all, "processed")
        .map(|(_, line)| line["value"].as_str().unwrap().to_owned())
        .collect();
    for n in 0..GROUP_RECORDS {
        assert!(processed.contains(&format!("n-{n}")), "n-{n} was processed");
    }
    for (partition, end) in ends {
        let path = format!("/topics/{GROUP_TOPIC}/partitions/{partition}/cursors");
        let (status, cursors) = request(survivor, "GET", &path, None).expect("an answer");
        assert_eq!(status, 200, "{cursors}");
        assert_eq!(
            cursors["cursors"][GROUP].as_u64(),
            Some(end),
            "partition {partition}: the group's cursor is at its end"
        );
    }
}
