//! Exactly once through lost answers: an idempotent confluent-kafka producer (`acks=all`)
//! sends 100,000 records with keys, headers and JSON or binary values to the 8 partitions of a
//! topic through a proxy that loses 5 % of the broker's answers (it closes both connections
//! instead of forwarding the answer: the request was done, its answer lost, as after a network
//! failure). Every batch whose answer was lost is sent again with its sequence numbers, and the
//! listener must acknowledge it with its first offsets without writing it twice. Then a
//! confluent-kafka consumer (`assign()` from offset 0, through the same proxy) reads every
//! partition back: each record exactly once, at the offset its delivery report gave, in the
//! order it was produced, its key, headers and value byte for byte; a sample reads the same
//! over REST, with the deduplication key the listener gave it.
//!
//! The producer's batches hold at most 100 records (`batch.num.messages`), so that a thousand
//! Produce requests and more go through the proxy and some 50 of their answers are lost. The
//! proxy counts the answers it lost by the API of their request, and the test needs a lost
//! Produce answer. Without idempotence the same run reads some 15,000 records twice.
//!
//! The proxy's losses are drawn from a seeded generator: `KAFKA_PROXY_SEED=N` replays a run's
//! draws (the interleaving of the clients' requests is the machine's).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

use super::{python, start, success};
use crate::common::Rng;
use crate::common::process::{request, seed};

/// Records produced.
const RECORDS: usize = 100_000;
/// The topic's partitions (`log.partitions_per_topic`'s default).
const PARTITIONS: usize = 8;
/// Chance, in percent, that the proxy loses an answer.
const LOSS_PERCENT: u64 = 5;
const TOPIC: &str = "exactly-once";

#[test]
fn idempotent_producer_through_lost_answers_writes_each_record_once() {
    let seed = seed("KAFKA_PROXY_SEED");
    eprintln!("kafka::idempotence: KAFKA_PROXY_SEED={seed}");
    let proxy = Proxy::bind();
    let advertised = proxy.address.to_string();
    let (_data, server) = start(&[("DURABILITY__KAFKA__ADVERTISED", advertised.as_str())]);
    let proxy = proxy.forward_to(server.kafka.expect("a Kafka listener"), seed);

    let out = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let output = python(
        "confluent_exactly_once.py",
        &[
            &advertised,
            TOPIC,
            &RECORDS.to_string(),
            out.path().to_str().expect("a UTF-8 path"),
        ],
    );
    let elapsed = started.elapsed();
    let stdout = success(&output);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|err| panic!("the script's summary ({err}):\n{stdout}"));
    let (forwarded, lost, connections) = proxy.counts();
    eprintln!("kafka::idempotence: summary {summary}");
    eprintln!(
        "kafka::idempotence: {RECORDS} records produced and read back in {elapsed:.1?}; the \
         proxy forwarded {forwarded} answers and lost {} over {connections} connections: {lost:?}",
        lost.values().sum::<u64>()
    );

    assert!(
        lost.get("Produce").is_some_and(|&lost| lost > 0),
        "the proxy lost no Produce answer ({forwarded} answers forwarded, lost {lost:?}): no \
         batch was sent again"
    );
    let delivered = summary["delivered"].as_u64();
    assert_eq!(
        (delivered, summary["failed"].as_u64()),
        (Some(RECORDS as u64), Some(0)),
        "every record delivered, none failed: {summary}"
    );
    let fatal: Vec<&String> = ["producer_errors", "consumer_errors"]
        .iter()
        .filter_map(|field| summary[field].as_object())
        .flat_map(|errors| errors.keys())
        .filter(|name| name.starts_with("FATAL"))
        .collect();
    assert!(fatal.is_empty(), "fatal client errors: {summary}");

    let produced = produced(&out.path().join("produced.jsonl"));
    let consumed = consumed(&out.path().join("consumed.jsonl"));
    check_exactly_once(&produced, &consumed);
    check_partitions(&produced, &consumed, &summary);
    check_over_rest(server.addr, &produced);
}

// ---------------------------------------------------------------------------------------------
// The check
// ---------------------------------------------------------------------------------------------

/// A record's key, headers and value as a client sent or read them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Parts {
    key: Option<Vec<u8>>,
    headers: Vec<(String, Option<Vec<u8>>)>,
    value: Option<Vec<u8>>,
}

/// Record `n` as produced: what was sent, and where its delivery report put it.
struct Produced {
    n: u64,
    partition: usize,
    offset: u64,
    parts: Parts,
}

/// A record as the consumer read it.
struct Consumed {
    partition: usize,
    offset: u64,
    parts: Parts,
}

fn bytes(value: &Value) -> Option<Vec<u8>> {
    value
        .as_str()
        .map(|text| BASE64.decode(text).expect("base64"))
}

fn parts(line: &Value) -> Parts {
    Parts {
        key: bytes(&line["key"]),
        headers: line["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|header| {
                let name = header[0].as_str().expect("a header name").to_owned();
                (name, bytes(&header[1]))
            })
            .collect(),
        value: bytes(&line["value"]),
    }
}

fn lines(path: &Path) -> impl Iterator<Item = Value> {
    let file = std::fs::File::open(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    BufReader::new(file)
        .lines()
        .map(|line| serde_json::from_str(&line.expect("a line")).expect("a JSON line"))
}

fn index(value: &Value, what: &str) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("{what} is {value}"))
}

/// The records produced, by sequence number; each delivered (checked by the summary).
fn produced(path: &Path) -> Vec<Produced> {
    let produced: Vec<Produced> = lines(path)
        .map(|line| Produced {
            n: index(&line["n"], "n"),
            partition: index(&line["partition"], "a partition") as usize,
            offset: index(&line["offset"], "an offset"),
            parts: parts(&line),
        })
        .collect();
    assert_eq!(produced.len(), RECORDS);
    assert!(produced.iter().enumerate().all(|(n, p)| p.n == n as u64));
    produced
}

/// The records read, in the order read.
fn consumed(path: &Path) -> Vec<Consumed> {
    lines(path)
        .map(|line| Consumed {
            partition: index(&line["partition"], "a partition") as usize,
            offset: index(&line["offset"], "an offset"),
            parts: parts(&line),
        })
        .collect()
}

/// The sequence number a value encodes: `\xffBIN` + 8 big-endian bytes, `seq=N ...`, a JSON
/// object's `seq` or a JSON array's first element.
fn sequence_of(value: &[u8]) -> Option<u64> {
    if let Some(rest) = value.strip_prefix(b"\xffBIN") {
        return Some(u64::from_be_bytes(rest.get(..8)?.try_into().ok()?));
    }
    if let Some(rest) = value.strip_prefix(b"seq=") {
        let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
        return std::str::from_utf8(&rest[..digits]).ok()?.parse().ok();
    }
    let json: Value = serde_json::from_slice(value).ok()?;
    json.get("seq").or_else(|| json.get(0))?.as_u64()
}

/// Every record delivered is read exactly once, at the offset its delivery report gave, byte
/// for byte as sent; nothing else is read.
fn check_exactly_once(produced: &[Produced], consumed: &[Consumed]) {
    let mut reads: Vec<Vec<(usize, u64)>> = vec![Vec::new(); produced.len()];
    let mut strangers = Vec::new();
    let mut misplaced = Vec::new();
    let mut altered = Vec::new();
    for record in consumed {
        let n = record
            .parts
            .value
            .as_deref()
            .and_then(sequence_of)
            .filter(|&n| (n as usize) < produced.len());
        let Some(n) = n else {
            strangers.push((record.partition, record.offset));
            continue;
        };
        reads[n as usize].push((record.partition, record.offset));
        let sent = &produced[n as usize];
        if (sent.partition, sent.offset) != (record.partition, record.offset) {
            misplaced.push((
                n,
                (sent.partition, sent.offset),
                (record.partition, record.offset),
            ));
        }
        if sent.parts != record.parts {
            altered.push((n, &sent.parts, &record.parts));
        }
    }
    let duplicated: Vec<(usize, &Vec<(usize, u64)>)> = reads
        .iter()
        .enumerate()
        .filter(|(_, at)| at.len() > 1)
        .collect();
    let missing: Vec<usize> = reads
        .iter()
        .enumerate()
        .filter(|(_, at)| at.is_empty())
        .map(|(n, _)| n)
        .collect();
    eprintln!(
        "kafka::idempotence: {} records read: {} duplicated, {} missing, {} not produced, {} \
         elsewhere than their delivery report said, {} altered",
        consumed.len(),
        duplicated.len(),
        missing.len(),
        strangers.len(),
        misplaced.len(),
        altered.len()
    );
    assert!(
        duplicated.is_empty(),
        "{} records read more than once (sequence number, [(partition, offset)]), first: {:?}",
        duplicated.len(),
        &duplicated[..duplicated.len().min(10)]
    );
    assert!(
        missing.is_empty(),
        "{} records delivered but not read, first: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(
        strangers.is_empty(),
        "{} records read that were not produced (partition, offset), first: {:?}",
        strangers.len(),
        &strangers[..strangers.len().min(10)]
    );
    assert!(
        misplaced.is_empty(),
        "{} records read elsewhere than their delivery report said (n, reported, read), \
         first: {:?}",
        misplaced.len(),
        &misplaced[..misplaced.len().min(10)]
    );
    assert!(
        altered.is_empty(),
        "{} records read back different from what was sent (n, sent, read), first: {:?}",
        altered.len(),
        &altered[..altered.len().min(5)]
    );
    assert_eq!(consumed.len(), produced.len());
}

/// Each partition holds offsets 0.. without a gap, read in that order, its records in the
/// order they were produced to it; its watermarks say it holds nothing more.
fn check_partitions(produced: &[Produced], consumed: &[Consumed], summary: &Value) {
    let mut by_partition: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for record in produced {
        by_partition
            .entry(record.partition)
            .or_default()
            .push(record.n);
    }
    let mut read: BTreeMap<usize, Vec<&Consumed>> = BTreeMap::new();
    for record in consumed {
        read.entry(record.partition).or_default().push(record);
    }
    let counts: Vec<usize> = (0..PARTITIONS)
        .map(|p| by_partition.get(&p).map_or(0, Vec::len))
        .collect();
    eprintln!("kafka::idempotence: records per partition {counts:?}");
    assert_eq!(
        by_partition.len(),
        PARTITIONS,
        "every partition written: {counts:?}"
    );
    for (partition, sent) in &by_partition {
        let records = &read[partition];
        let offsets: Vec<u64> = records.iter().map(|record| record.offset).collect();
        let expected: Vec<u64> = (0..sent.len() as u64).collect();
        assert!(
            offsets == expected,
            "partition {partition}: read offsets {} (first at odds: {:?}), not 0..{}",
            offsets.len(),
            offsets
                .iter()
                .zip(&expected)
                .position(|(read, expected)| read != expected),
            sent.len()
        );
        let order: Vec<u64> = records
            .iter()
            .map(|record| record.parts.value.as_deref().and_then(sequence_of).unwrap())
            .collect();
        // Produced in increasing sequence numbers: a partition's log is in that order.
        assert!(
            &order == sent,
            "partition {partition}: records out of the order they were produced in, first at \
             offset {:?}",
            order.iter().zip(sent).position(|(read, sent)| read != sent)
        );
        assert_eq!(
            summary["watermarks"][partition],
            serde_json::json!([0, sent.len()]),
            "partition {partition}'s watermarks: it holds the {} records delivered to it, no more",
            sent.len()
        );
    }
}

/// A sample of records (each kind of key, header and value) reads the same over REST, with a
/// deduplication key `kafka:{producer}:{epoch}:{sequence}`.
fn check_over_rest(server: SocketAddr, produced: &[Produced]) {
    let sample = (0..40).chain([1001, 2001, 77_777, RECORDS - 1]);
    let mut producers = BTreeMap::new();
    for n in sample {
        let sent = &produced[n];
        let path = format!(
            "/topics/{TOPIC}/partitions/{}/records?from={}&limit=1",
            sent.partition, sent.offset
        );
        let (status, page) = request(server, "GET", &path, None).expect("a REST read");
        assert_eq!(status, 200, "GET {path}: {page}");
        let record = &page["records"][0];
        assert_eq!(record["offset"], sent.offset, "GET {path}: {page}");
        let key = record["key"].as_str().unwrap_or_default();
        let fields: Vec<&str> = key.split(':').collect();
        assert!(
            fields.len() == 4
                && fields[0] == "kafka"
                && fields[1..].iter().all(|field| field.parse::<i64>().is_ok()),
            "record {n}'s deduplication key is kafka:{{producer}}:{{epoch}}:{{sequence}}: {record}"
        );
        *producers.entry(fields[1].to_owned()).or_insert(0) += 1;
        let parts = &sent.parts;
        let (text, base64) = shown(parts.key.as_deref());
        assert_eq!(
            (&record["messageKey"], &record["messageKeyBase64"]),
            (&text, &base64),
            "record {n}'s message key: {record}"
        );
        let headers: Vec<Value> = parts
            .headers
            .iter()
            .map(|(name, value)| {
                let mut header = serde_json::json!({ "name": name });
                let (text, base64) = shown(value.as_deref());
                if !text.is_null() {
                    header["value"] = text;
                }
                if !base64.is_null() {
                    header["valueBase64"] = base64;
                }
                header
            })
            .collect();
        assert_eq!(
            record["headers"],
            Value::Array(headers),
            "record {n}'s headers: {record}"
        );
        let value = parts.value.as_deref().expect("a value");
        match serde_json::from_slice::<Value>(value) {
            Ok(json) => assert_eq!(record["payload"], json, "record {n}'s payload: {record}"),
            Err(_) => assert_eq!(
                record["payloadBase64"],
                BASE64.encode(value),
                "record {n}'s payload: {record}"
            ),
        }
    }
    eprintln!("kafka::idempotence: the REST sample's records by producer id: {producers:?}");
}

/// Bytes as REST shows them: (text, base64), text where they are UTF-8.
fn shown(bytes: Option<&[u8]>) -> (Value, Value) {
    match bytes.map(std::str::from_utf8) {
        None => (Value::Null, Value::Null),
        Some(Ok(text)) => (Value::from(text), Value::Null),
        Some(Err(_)) => (Value::Null, Value::from(BASE64.encode(bytes.unwrap()))),
    }
}

// ---------------------------------------------------------------------------------------------
// The proxy that loses answers
// ---------------------------------------------------------------------------------------------

/// A TCP proxy in front of the Kafka listener: requests pass through; each answer frame is
/// forwarded, or, with chance [`LOSS_PERCENT`], lost: both connections close instead.
struct Proxy {
    address: SocketAddr,
    listener: Option<TcpListener>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    accepting: Option<JoinHandle<()>>,
}

/// What the proxy did.
#[derive(Default)]
struct Counts {
    forwarded: AtomicU64,
    connections: AtomicU64,
    /// Answers lost, by the API of their request.
    lost: Mutex<BTreeMap<&'static str, u64>>,
}

impl Counts {
    fn lost(&self) -> BTreeMap<&'static str, u64> {
        self.lost
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1, accepting nothing yet.
    fn bind() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        Self {
            address: listener.local_addr().expect("the proxy's address"),
            listener: Some(listener),
            counts: Arc::default(),
            stop: Arc::default(),
            accepting: None,
        }
    }

    /// Starts accepting, each connection relayed to `upstream`, losses drawn from `seed`.
    fn forward_to(mut self, upstream: SocketAddr, seed: u64) -> Self {
        let listener = self.listener.take().expect("not yet forwarding");
        let rng = Arc::new(Mutex::new(Rng::new(seed)));
        let (counts, stop) = (self.counts.clone(), self.stop.clone());
        self.accepting = Some(thread::spawn(move || {
            for client in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                counts.connections.fetch_add(1, Ordering::Relaxed);
                let (rng, counts) = (rng.clone(), counts.clone());
                thread::spawn(move || relay(client, upstream, &rng, &counts));
            }
        }));
        self
    }

    /// Answers forwarded, answers lost by API, connections accepted.
    fn counts(&self) -> (u64, BTreeMap<&'static str, u64>, u64) {
        (
            self.counts.forwarded.load(Ordering::Relaxed),
            self.counts.lost(),
            self.counts.connections.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(accepting) = self.accepting.take() {
            // Wakes the accepting thread, which sees `stop`.
            let _ = TcpStream::connect(self.address);
            let _ = accepting.join();
        }
    }
}

/// The name of API `key`.
fn api_name(key: i16) -> &'static str {
    match key {
        0 => "Produce",
        1 => "Fetch",
        2 => "ListOffsets",
        3 => "Metadata",
        18 => "ApiVersions",
        22 => "InitProducerId",
        _ => "other",
    }
}

/// One whole frame (its size included) from `stream`; `None` once it ends or fails.
fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let length = usize::try_from(i32::from_be_bytes(size)).ok()?;
    let mut frame = vec![0u8; 4 + length];
    frame[..4].copy_from_slice(&size);
    stream.read_exact(&mut frame[4..]).ok()?;
    Some(frame)
}

/// Relays one client connection to `upstream` until either side leaves or an answer is lost.
fn relay(client: TcpStream, upstream: SocketAddr, rng: &Mutex<Rng>, counts: &Counts) {
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (Ok(mut from_client), Ok(mut to_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    // The API of each request in flight, by correlation id, to name a lost answer's.
    let in_flight: Arc<Mutex<HashMap<i32, i16>>> = Arc::default();
    // Requests pass through whole, as they come.
    let requests = thread::spawn({
        let in_flight = in_flight.clone();
        move || {
            while let Some(frame) = read_frame(&mut from_client) {
                if frame.len() >= 12 {
                    let key = i16::from_be_bytes([frame[4], frame[5]]);
                    let correlation =
                        i32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
                    in_flight
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(correlation, key);
                }
                if to_server.write_all(&frame).is_err() {
                    break;
                }
            }
            let _ = to_server.shutdown(Shutdown::Write);
        }
    });
    let (mut from_server, mut to_client) = (server, client);
    while let Some(frame) = read_frame(&mut from_server) {
        let api = frame.get(4..8).and_then(|id| {
            let correlation = i32::from_be_bytes(id.try_into().ok()?);
            in_flight
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&correlation)
        });
        let lose = rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .below(100)
            < LOSS_PERCENT;
        if lose {
            *counts
                .lost
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .entry(api.map_or("unknown", api_name))
                .or_default() += 1;
            break;
        }
        if to_client.write_all(&frame).is_err() {
            break;
        }
        counts.forwarded.fetch_add(1, Ordering::Relaxed);
    }
    let _ = to_client.shutdown(Shutdown::Both);
    let _ = from_server.shutdown(Shutdown::Both);
    let _ = requests.join();
}
