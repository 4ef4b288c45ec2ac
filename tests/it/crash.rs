//! Crash safety of the `durability` binary: producers and a leasing worker run against the real
//! server, which is killed with SIGKILL mid-flight and restarted on the same data folder, cycle
//! after cycle. Whatever was acknowledged (a `202` for an append, a `200` for a lease ack) must
//! be there after every restart: each record exactly once, at its place, with its payload, and
//! every acked range still settled; ranges leased but not acked come back. A second test kills
//! the server while partitions trim and checks that the cold folder ends up holding exactly the
//! indexed segments.
//!
//! The seed of the random choices (batch sizes, partition keys, when to kill) is printed in the
//! summary and in every failure; `CRASH_SEED=<n>` replays one.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::Rng;

const TOPIC: &str = "crash";
const GROUP: &str = "workers";
/// Partitions of the topic (fewer than the default 8, so retention flushes sooner).
const PARTITIONS: u32 = 4;
/// `retention.max_records`: the hot window of each partition.
const MAX_RECORDS: u64 = 200;
/// `leases.lease_ms`: how soon an unacked range is redelivered.
const LEASE_MS: u64 = 300;
/// How long a check waits for a range to lease after a restart (the lease expiry included).
const LEASE_WAIT_MS: u64 = LEASE_MS + 30_000;
/// Kill/restart cycles.
const KILLS: usize = 6;
/// Producer threads per cycle.
const PRODUCERS: usize = 4;
/// Events re-sent per request in the checks.
const RESEND_CHUNK: usize = 40;
/// Read page size (`log.max_batch_size`, the default).
const PAGE: u64 = 100;

/// The seed of a run: `CRASH_SEED`, or the clock.
fn seed() -> u64 {
    match std::env::var("CRASH_SEED") {
        Ok(seed) => seed.trim().parse().expect("CRASH_SEED is an integer"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|time| time.as_nanos() as u64)
            .unwrap_or(1),
    }
}

// ---------------------------------------------------------------------------------------------
// The server process
// ---------------------------------------------------------------------------------------------

/// The `durability` binary on an ephemeral port over `dir/data` and `dir/cold`; killed (SIGKILL)
/// when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Server {
    fn start(dir: &Path) -> Self {
        Self::start_with(dir, &[])
    }

    /// Started with these environment variables on top of (and overriding) the usual ones.
    fn start_with(dir: &Path, overrides: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_durability"));
        command
            .env("DURABILITY__SERVER__BIND", "127.0.0.1:0")
            .env("DURABILITY__STORAGE__DATA_DIR", dir.join("data"))
            .env("DURABILITY__STORAGE__SYNC", "full")
            .env("DURABILITY__COLD__KIND", "fs")
            .env("DURABILITY__COLD__DIR", dir.join("cold"))
            .env(
                "DURABILITY__LOG__PARTITIONS_PER_TOPIC",
                PARTITIONS.to_string(),
            )
            .env(
                "DURABILITY__RETENTION__MAX_RECORDS",
                MAX_RECORDS.to_string(),
            )
            .env("DURABILITY__RETENTION__SWEEP_INTERVAL_MS", "50")
            .env("DURABILITY__LEASES__ENABLED", "true")
            .env("DURABILITY__LEASES__LEASE_MS", LEASE_MS.to_string())
            .env("RUST_LOG", "error");
        let mut child = command
            .envs(overrides.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server binary");
        let stdout = child.stdout.take().expect("piped stdout");
        let (announce, announced) = mpsc::channel();
        // Reads the address, then keeps draining stdout until the process dies.
        thread::spawn(move || {
            let mut announce = Some(announce);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some((_, addr)) = line.split_once("listening on http://")
                    && let Some(announce) = announce.take()
                {
                    let _ = announce.send(addr.trim().to_owned());
                }
            }
        });
        let addr = match announced.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => addr,
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the server did not announce its address within 20 s ({err})");
            }
        };
        let addr = addr
            .parse()
            .expect("the announced address is a socket address");
        Self { child, addr }
    }

    /// SIGKILL, and reap the process.
    fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the server");
        self.child.wait().expect("reap the server");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client: one request per connection, every failure reported, never a panic
// ---------------------------------------------------------------------------------------------

/// Sends one request; `Err` when the exchange failed (refused, reset, timed out, cut short), in
/// which case the outcome of the request is unknown.
fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if method != "GET" {
        text.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    text.push_str("\r\n");
    text.push_str(&body);
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|err| format!("connect: {err}"))?;
    let timeout = Some(Duration::from_secs(15));
    stream
        .set_read_timeout(timeout)
        .and_then(|()| stream.set_write_timeout(timeout))
        .map_err(|err| format!("socket options: {err}"))?;
    stream
        .write_all(text.as_bytes())
        .map_err(|err| format!("send: {err}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|err| format!("receive: {err}"))?;
    parse_response(&response)
}

fn parse_response(response: &[u8]) -> Result<(u16, Value), String> {
    let split = response
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or("no complete HTTP head")?;
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let mut body = response[split + 4..].to_vec();
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or("no status line")?;
    let header = |name: &str| {
        head.lines()
            .find_map(|line| line.strip_prefix(name).map(|value| value.trim().to_owned()))
    };
    if header("transfer-encoding:").is_some_and(|value| value.contains("chunked")) {
        body = dechunk(&body).ok_or("chunked body cut short")?;
    } else if let Some(length) = header("content-length:") {
        let length: usize = length.parse().map_err(|_| "bad content-length")?;
        if body.len() < length {
            return Err(format!("body cut short: {} of {length} bytes", body.len()));
        }
        body.truncate(length);
    }
    let value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&body).map_err(|err| format!("body is not JSON: {err}"))?
    };
    Ok((status, value))
}

/// Decodes a chunked body; `None` when it is incomplete.
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let end = data.windows(2).position(|window| window == b"\r\n")?;
        let line = std::str::from_utf8(&data[..end]).ok()?;
        let size = usize::from_str_radix(line.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        let start = end + 2;
        body.extend_from_slice(data.get(start..start + size)?);
        data = data.get(start + size + 2..)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Producers
// ---------------------------------------------------------------------------------------------

/// An event as it was sent (its deduplication key is the map key it is stored under).
#[derive(Clone, Debug)]
struct Sent {
    partition_key: String,
    payload: Value,
}

fn event_json(key: &str, sent: &Sent) -> Value {
    json!({"partitionKey": sent.partition_key, "key": key, "payload": sent.payload})
}

/// What one producer thread did during one cycle.
#[derive(Default)]
struct ProducerReport {
    /// Every event sent (acknowledged or not), in order.
    attempted: Vec<(String, Sent)>,
    /// `key → (partition, offset)` for every event of a `202`.
    acked: Vec<(String, (u32, u64))>,
    /// Answers that break the contract.
    problems: Vec<String>,
}

/// Parses a `202` of `POST /topics/{topic}/records` for `count` events.
fn placements(answer: &Value, count: usize) -> Option<Vec<(u32, u64)>> {
    let records = answer["records"].as_array()?;
    if records.len() != count {
        return None;
    }
    records
        .iter()
        .map(|place| {
            let partition = u32::try_from(place["partition"].as_u64()?).ok()?;
            Some((partition, place["offset"].as_u64()?))
        })
        .collect()
}

/// The events of one request that land on one partition get consecutive offsets, in input
/// order (distinct keys, so no deduplication inside the batch).
fn batch_problem(places: &[(u32, u64)]) -> Option<String> {
    let mut last: HashMap<u32, u64> = HashMap::new();
    for &(partition, offset) in places {
        if let Some(previous) = last.insert(partition, offset)
            && offset != previous + 1
        {
            return Some(format!(
                "one request got offsets {previous} then {offset} on partition {partition}"
            ));
        }
    }
    None
}

/// Sends batches of 1 to 5 keyed events until `stop` or until a request fails.
fn produce(
    addr: SocketAddr,
    cycle: usize,
    thread: usize,
    seed: u64,
    stop: &AtomicBool,
) -> ProducerReport {
    let mut rng = Rng::new(seed);
    let mut report = ProducerReport::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let size = 1 + rng.below(5);
        let batch: Vec<(String, Sent)> = (0..size)
            .map(|_| {
                n += 1;
                let key = format!("c{cycle}-p{thread}-{n}");
                let partition_key = format!("user-{}", rng.below(97));
                let payload = json!({
                    "key": key,
                    "partitionKey": partition_key,
                    "cycle": cycle,
                    "producer": thread,
                    "n": n,
                    "pad": "x".repeat(rng.below(48) as usize),
                });
                (
                    key,
                    Sent {
                        partition_key,
                        payload,
                    },
                )
            })
            .collect();
        let body = Value::Array(
            batch
                .iter()
                .map(|(key, sent)| event_json(key, sent))
                .collect(),
        );
        report.attempted.extend(batch.iter().cloned());
        match request(
            addr,
            "POST",
            &format!("/topics/{TOPIC}/records"),
            Some(&body),
        ) {
            Ok((202, answer)) => match placements(&answer, batch.len()) {
                Some(places) => {
                    if let Some(problem) = batch_problem(&places) {
                        report.problems.push(format!("{problem}: {answer}"));
                    }
                    report
                        .acked
                        .extend(batch.into_iter().map(|(key, _)| key).zip(places));
                }
                None => {
                    report.problems.push(format!(
                        "a 202 that does not place the {size} events: {answer}"
                    ));
                    break;
                }
            },
            // Uncertain: the server may or may not have written the batch. Stop.
            Ok((status, _)) if status >= 500 => break,
            Ok((status, answer)) => {
                report
                    .problems
                    .push(format!("produce answered {status} {answer}"));
                break;
            }
            // The server is gone (or the exchange was cut): unknown outcome. Stop.
            Err(_) => break,
        }
    }
    report
}

// ---------------------------------------------------------------------------------------------
// Leases
// ---------------------------------------------------------------------------------------------

/// A leased range as the server answered it.
#[derive(Clone, Debug)]
struct Leased {
    batch_id: String,
    first: u64,
    last: u64,
    attempt: u64,
    /// `(offset, key, payload)` of each record.
    records: Vec<(u64, Option<String>, Value)>,
}

fn parse_lease(body: &Value) -> Option<Leased> {
    let records = body["records"]
        .as_array()?
        .iter()
        .map(|record| {
            Some((
                record["offset"].as_u64()?,
                record["key"].as_str().map(str::to_owned),
                record["payload"].clone(),
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Leased {
        batch_id: body["batchId"].as_str()?.to_owned(),
        first: body["firstOffset"].as_u64()?,
        last: body["lastOffset"].as_u64()?,
        attempt: body["attempt"].as_u64()?,
        records,
    })
}

/// How a lease call or an ack went wrong.
enum Failure {
    /// Transport error or 5xx: the change may or may not have happened.
    Unknown(String),
    /// An answer the contract does not allow here.
    Wrong(String),
}

/// `POST .../leases?limit=5`: `Some` range, or `None` on `204`.
fn lease(addr: SocketAddr, partition: u32) -> Result<Option<Leased>, Failure> {
    let path = format!("/topics/{TOPIC}/partitions/{partition}/groups/{GROUP}/leases?limit=5");
    match request(addr, "POST", &path, None) {
        Ok((200, body)) => match parse_lease(&body) {
            Some(leased) => Ok(Some(leased)),
            None => Err(Failure::Wrong(format!("unreadable lease: {body}"))),
        },
        Ok((204, _)) => Ok(None),
        Ok((status, body)) if status >= 500 => Err(Failure::Unknown(format!("{status} {body}"))),
        Ok((status, body)) => Err(Failure::Wrong(format!(
            "lease on partition {partition} answered {status} {body}"
        ))),
        Err(err) => Err(Failure::Unknown(err)),
    }
}

/// `POST .../leases/{batchId}/ack`: the cursor after the ack.
fn ack(addr: SocketAddr, partition: u32, batch_id: &str) -> Result<Option<u64>, Failure> {
    let path =
        format!("/topics/{TOPIC}/partitions/{partition}/groups/{GROUP}/leases/{batch_id}/ack");
    match request(addr, "POST", &path, None) {
        Ok((200, body)) if body["cursor"].is_null() => Ok(None),
        Ok((200, body)) => match body["cursor"].as_u64() {
            Some(cursor) => Ok(Some(cursor)),
            None => Err(Failure::Wrong(format!("unreadable ack answer: {body}"))),
        },
        Ok((status, body)) if status >= 500 => Err(Failure::Unknown(format!("{status} {body}"))),
        Ok((status, body)) => Err(Failure::Wrong(format!(
            "ack of {batch_id} on partition {partition} answered {status} {body}"
        ))),
        Err(err) => Err(Failure::Unknown(err)),
    }
}

/// A range leased and not (knowingly) settled.
#[derive(Clone, Debug)]
struct Outstanding {
    lease: Leased,
    /// The ack was sent but its answer never came: it may or may not be settled.
    ack_unknown: bool,
}

/// What the worker knows about one partition of the group, across cycles.
#[derive(Clone, Debug, Default)]
struct PartitionBook {
    /// Every range whose ack answered `200`.
    acked: Vec<(u64, u64)>,
    /// The highest cursor an ack answered.
    acked_cursor: Option<u64>,
    /// The range leased last and not acked, if any.
    outstanding: Option<Outstanding>,
    /// A lease call failed without an answer: a range may have been claimed unseen.
    claim_unknown: bool,
}

/// The worker's knowledge of every partition, and counters.
#[derive(Clone, Debug)]
struct LeaseBook {
    partitions: Vec<PartitionBook>,
    leases: usize,
    acks: usize,
    abandoned: usize,
    redelivered: usize,
}

impl LeaseBook {
    fn new() -> Self {
        Self {
            partitions: vec![PartitionBook::default(); PARTITIONS as usize],
            leases: 0,
            acks: 0,
            abandoned: 0,
            redelivered: 0,
        }
    }

    fn leased(&mut self, partition: u32, leased: &Leased) {
        self.leases += 1;
        if leased.attempt > 1 {
            self.redelivered += 1;
        }
        self.partitions[partition as usize].outstanding = Some(Outstanding {
            lease: leased.clone(),
            ack_unknown: false,
        });
    }

    fn acked(&mut self, partition: u32, leased: &Leased, cursor: Option<u64>) {
        self.acks += 1;
        let book = &mut self.partitions[partition as usize];
        book.acked.push((leased.first, leased.last));
        book.acked_cursor = book.acked_cursor.max(cursor);
        book.outstanding = None;
    }
}

/// The end of the run of acked ranges that starts at offset 0 (0 when none does).
fn contiguous_acked_end(ranges: &[(u64, u64)]) -> u64 {
    let mut ranges = ranges.to_vec();
    ranges.sort_unstable();
    let mut end = 0;
    for (first, last) in ranges {
        if first > end {
            break;
        }
        end = end.max(last + 1);
    }
    end
}

/// Checks that a lease carries the records `first..=last`, each with its own key in its payload.
fn lease_shape_problems(partition: u32, leased: &Leased) -> Vec<String> {
    let offsets: Vec<u64> = leased.records.iter().map(|record| record.0).collect();
    let expected: Vec<u64> = (leased.first..=leased.last).collect();
    let mut problems = Vec::new();
    if offsets != expected {
        problems.push(format!(
            "lease {} on partition {partition} spans {}..={} but carries offsets {offsets:?}",
            leased.batch_id, leased.first, leased.last
        ));
    }
    for (offset, key, payload) in &leased.records {
        if key.as_deref() != payload["key"].as_str() {
            problems.push(format!(
                "leased record {partition}/{offset} has key {key:?} but payload {payload}"
            ));
        }
    }
    problems
}

/// Leases on every partition in turn and acks, abandoning every third fresh range (it is
/// redelivered after `LEASE_MS`), until `stop` or until a call fails.
fn work(addr: SocketAddr, mut book: LeaseBook, stop: &AtomicBool) -> (LeaseBook, Vec<String>) {
    let mut problems = Vec::new();
    let mut fresh = 0u64;
    'run: while !stop.load(Ordering::Relaxed) {
        let mut idle = true;
        for partition in 0..PARTITIONS {
            let leased = match lease(addr, partition) {
                Ok(Some(leased)) => leased,
                Ok(None) => continue,
                Err(Failure::Unknown(_)) => {
                    book.partitions[partition as usize].claim_unknown = true;
                    break 'run;
                }
                Err(Failure::Wrong(problem)) => {
                    problems.push(problem);
                    break 'run;
                }
            };
            idle = false;
            problems.extend(lease_shape_problems(partition, &leased));
            if let Some(held) = &book.partitions[partition as usize].outstanding
                && (held.lease.first, held.lease.last) != (leased.first, leased.last)
            {
                // With max_parallelism 1 the only range available is the unsettled one.
                problems.push(format!(
                    "partition {partition}: leased {}..={} while {}..={} was still unacked",
                    leased.first, leased.last, held.lease.first, held.lease.last
                ));
            }
            book.leased(partition, &leased);
            if leased.attempt == 1 {
                fresh += 1;
                if fresh.is_multiple_of(3) {
                    book.abandoned += 1;
                    continue;
                }
            }
            match ack(addr, partition, &leased.batch_id) {
                Ok(cursor) => book.acked(partition, &leased, cursor),
                Err(Failure::Unknown(_)) => {
                    if let Some(outstanding) = &mut book.partitions[partition as usize].outstanding
                    {
                        outstanding.ack_unknown = true;
                    }
                    break 'run;
                }
                Err(Failure::Wrong(problem)) => {
                    problems.push(problem);
                    break 'run;
                }
            }
        }
        if idle {
            thread::sleep(Duration::from_millis(10));
        }
    }
    (book, problems)
}

// ---------------------------------------------------------------------------------------------
// What the test knows, and the checks after each restart
// ---------------------------------------------------------------------------------------------

/// Everything the test knows across cycles.
struct Knowledge {
    /// Every event ever sent, by key.
    sent: HashMap<String, Sent>,
    /// Keys whose place was acknowledged with a `202`.
    acked: HashSet<String>,
    /// `key → (partition, offset)`: acknowledged places, and places of unacknowledged events
    /// found after a restart (from then on they must stay put too).
    placed: HashMap<String, (u32, u64)>,
    /// The worker's view of the group.
    book: LeaseBook,
    /// Unacknowledged events found after a restart.
    found_unacked: usize,
    /// Unacknowledged events not found after a restart (re-sent, then acknowledged).
    lost_unacked: usize,
    /// Hot records re-sent for the duplicate check.
    resent_hot: usize,
    /// Ranges redelivered right after a restart (leased, not acked, before the kill).
    redelivered_after_restart: usize,
    /// Acknowledged events checked by the last verification.
    verified: usize,
    /// Records below the hot window (served from the cold folder) at the last verification.
    cold: u64,
}

/// A partition as read back after a restart.
struct Readback {
    oldest: u64,
    hot: u64,
    next: u64,
    /// `offset → (key, payload)`.
    records: BTreeMap<u64, (Option<String>, Value)>,
}

/// `GET .../bounds`: `(oldest, hot, next)`.
fn bounds(addr: SocketAddr, partition: u32) -> Result<(u64, u64, u64), String> {
    let path = format!("/topics/{TOPIC}/partitions/{partition}/bounds");
    match request(addr, "GET", &path, None)? {
        (200, body) => Some((
            body["oldestOffset"].as_u64(),
            body["hotOffset"].as_u64(),
            body["nextOffset"].as_u64(),
        ))
        .and_then(|(oldest, hot, next)| Some((oldest?, hot?, next?)))
        .ok_or_else(|| format!("unreadable bounds: {body}")),
        (status, body) => Err(format!("bounds of {partition} answered {status} {body}")),
    }
}

/// Reads partition `partition` page by page from offset 0 up to `next`.
fn read_all(addr: SocketAddr, partition: u32, next: u64, problems: &mut Vec<String>) -> Readback {
    let mut records = BTreeMap::new();
    let mut from = 0;
    while from < next {
        let path =
            format!("/topics/{TOPIC}/partitions/{partition}/records?from={from}&limit={PAGE}");
        let page = match request(addr, "GET", &path, None) {
            Ok((200, page)) => page,
            Ok((status, body)) => {
                problems.push(format!(
                    "reading partition {partition} from {from} (nextOffset {next}) answered \
                     {status} {body}"
                ));
                break;
            }
            Err(err) => {
                problems.push(format!("reading partition {partition} from {from}: {err}"));
                break;
            }
        };
        let Some(page_records) = page["records"]
            .as_array()
            .filter(|records| !records.is_empty())
        else {
            problems.push(format!(
                "partition {partition}: no record at {from} although nextOffset is {next}: {page}"
            ));
            break;
        };
        let mut expected = from;
        for record in page_records {
            let Some(offset) = record["offset"].as_u64() else {
                problems.push(format!(
                    "partition {partition}: record without offset {record}"
                ));
                return Readback {
                    oldest: 0,
                    hot: 0,
                    next,
                    records,
                };
            };
            if offset != expected {
                problems.push(format!(
                    "partition {partition}: gap, expected offset {expected}, read {offset} \
                     (page from {from})"
                ));
            }
            let key = record["key"].as_str().map(str::to_owned);
            records.insert(offset, (key, record["payload"].clone()));
            expected = offset + 1;
        }
        from = expected;
    }
    Readback {
        oldest: 0,
        hot: 0,
        next,
        records,
    }
}

/// Re-sends `keys` (with their original partition keys and payloads) in chunks; the places the
/// server answered, in order, or the problem.
fn resend(
    addr: SocketAddr,
    sent: &HashMap<String, Sent>,
    keys: &[String],
) -> Result<Vec<(u32, u64)>, String> {
    let mut places = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(RESEND_CHUNK) {
        let body = Value::Array(
            chunk
                .iter()
                .map(|key| event_json(key, &sent[key]))
                .collect(),
        );
        match request(
            addr,
            "POST",
            &format!("/topics/{TOPIC}/records"),
            Some(&body),
        ) {
            Ok((202, answer)) => places.extend(
                placements(&answer, chunk.len())
                    .ok_or_else(|| format!("a 202 that does not place the events: {answer}"))?,
            ),
            Ok((status, answer)) => return Err(format!("re-send answered {status} {answer}")),
            Err(err) => return Err(format!("re-send: {err}")),
        }
    }
    Ok(places)
}

/// After a restart: every placed record is where it was acknowledged (or first found), exactly
/// once, with its payload; partitions have no gaps; re-sending hot keys writes nothing;
/// acknowledged acks stay settled and unacked ranges come back.
fn verify(addr: SocketAddr, known: &mut Knowledge) -> Vec<String> {
    let mut problems = Vec::new();
    // Retention now, so that the hot window is at most MAX_RECORDS and stays put while the
    // duplicate check writes nothing.
    for partition in 0..PARTITIONS {
        let path = format!("/topics/{TOPIC}/partitions/{partition}/trim");
        match request(addr, "POST", &path, None) {
            Ok((200, _)) => {}
            Ok((status, body)) => problems.push(format!("trim {partition}: {status} {body}")),
            Err(err) => problems.push(format!("trim {partition}: {err}")),
        }
    }
    let mut readbacks = Vec::new();
    for partition in 0..PARTITIONS {
        let (oldest, hot, next) = match bounds(addr, partition) {
            Ok(bounds) => bounds,
            Err(err) => {
                problems.push(err);
                return problems;
            }
        };
        if oldest != 0 {
            problems.push(format!(
                "partition {partition}: oldestOffset {oldest} (nothing was ever forgotten)"
            ));
        }
        if next > hot + MAX_RECORDS {
            problems.push(format!(
                "partition {partition}: {} hot records after a trim (max_records {MAX_RECORDS})",
                next - hot
            ));
        }
        let mut readback = read_all(addr, partition, next, &mut problems);
        readback.oldest = oldest;
        readback.hot = hot;
        readbacks.push(readback);
    }
    if !problems.is_empty() {
        return problems;
    }
    known.cold = readbacks.iter().map(|readback| readback.hot).sum();

    // Where every key is now.
    let mut found: HashMap<String, Vec<(u32, u64)>> = HashMap::new();
    for (partition, readback) in (0..PARTITIONS).zip(&readbacks) {
        for (offset, (key, payload)) in &readback.records {
            let Some(key) = key else {
                problems.push(format!("{partition}/{offset} has no key: {payload}"));
                continue;
            };
            match known.sent.get(key) {
                None => problems.push(format!(
                    "{partition}/{offset} holds key {key} that was never sent: {payload}"
                )),
                Some(sent) if sent.payload != *payload => problems.push(format!(
                    "{partition}/{offset} key {key}: payload {payload}, sent {}",
                    sent.payload
                )),
                Some(_) => {}
            }
            found
                .entry(key.clone())
                .or_default()
                .push((partition, *offset));
        }
    }
    for (key, places) in &found {
        if places.len() > 1 {
            problems.push(format!(
                "key {key} is stored {} times: {places:?}",
                places.len()
            ));
        }
    }

    // Every placed record (acknowledged, or found after an earlier restart) is still there.
    let mut verified = 0;
    for (key, place) in &known.placed {
        let here = found.get(key).map(Vec::as_slice).unwrap_or_default();
        if here != [*place] {
            let what = if known.acked.contains(key) {
                "acknowledged"
            } else {
                "found after an earlier restart"
            };
            let (partition, offset) = place;
            let readback = &readbacks[*partition as usize];
            problems.push(format!(
                "key {key} ({what} at {partition}/{offset}) is found at {here:?}; partition \
                 {partition} bounds oldest {} hot {} next {}, record at {offset}: {:?}",
                readback.oldest,
                readback.hot,
                readback.next,
                readback.records.get(offset),
            ));
        } else if known.acked.contains(key) {
            verified += 1;
        }
    }
    known.verified = verified;

    // Unacknowledged events: found ones must stay put from now on; lost ones are re-sent below.
    let mut lost: Vec<String> = Vec::new();
    for key in known.sent.keys() {
        if known.placed.contains_key(key) {
            continue;
        }
        match found.get(key).map(Vec::as_slice) {
            Some([place]) => {
                known.placed.insert(key.clone(), *place);
                known.found_unacked += 1;
            }
            Some(_) => {} // reported above
            None => lost.push(key.clone()),
        }
    }
    lost.sort();
    if !problems.is_empty() {
        return problems;
    }

    // Re-sending a key whose record is still hot returns its place and writes nothing.
    let mut hot_keys: Vec<String> = known
        .placed
        .iter()
        .filter(|(_, (partition, offset))| *offset >= readbacks[*partition as usize].hot)
        .map(|(key, _)| key.clone())
        .collect();
    hot_keys.sort();
    match resend(addr, &known.sent, &hot_keys) {
        Ok(places) => {
            for (key, place) in hot_keys.iter().zip(places) {
                if known.placed[key] != place {
                    problems.push(format!(
                        "re-sent hot key {key} (at {:?}) answered {place:?}",
                        known.placed[key]
                    ));
                }
            }
        }
        Err(err) => problems.push(err),
    }
    known.resent_hot += hot_keys.len();
    for (partition, readback) in (0..PARTITIONS).zip(&readbacks) {
        match bounds(addr, partition) {
            Ok((_, _, next)) if next == readback.next => {}
            Ok((_, _, next)) => problems.push(format!(
                "re-sending {} hot keys moved partition {partition}'s nextOffset from {} to {next}",
                hot_keys.len(),
                readback.next
            )),
            Err(err) => problems.push(err),
        }
    }
    if !problems.is_empty() {
        return problems;
    }

    // The producer's retry of events that were never acknowledged and are not stored: new
    // records, now acknowledged.
    match resend(addr, &known.sent, &lost) {
        Ok(places) => {
            for (key, (partition, offset)) in lost.iter().zip(places) {
                let before = readbacks[partition as usize].next;
                if offset < before {
                    problems.push(format!(
                        "lost key {key} re-sent landed at {partition}/{offset}, below the \
                         nextOffset {before} it had before"
                    ));
                }
                known.placed.insert(key.clone(), (partition, offset));
                known.acked.insert(key.clone());
            }
            known.lost_unacked += lost.len();
        }
        Err(err) => problems.push(err),
    }

    // Leases.
    for (partition, readback) in (0..PARTITIONS).zip(&readbacks) {
        problems.extend(verify_leases(addr, partition, readback, known));
    }
    problems
}

/// The group on one partition after a restart: its cursor is past every acknowledged ack, and
/// the range it had leased without acking is redelivered whole.
fn verify_leases(
    addr: SocketAddr,
    partition: u32,
    readback: &Readback,
    known: &mut Knowledge,
) -> Vec<String> {
    let mut problems = Vec::new();
    let path = format!("/topics/{TOPIC}/partitions/{partition}/cursors");
    let cursor = match request(addr, "GET", &path, None) {
        Ok((200, body)) => body["cursors"][GROUP].as_u64(),
        Ok((status, body)) => return vec![format!("cursors of {partition}: {status} {body}")],
        Err(err) => return vec![format!("cursors of {partition}: {err}")],
    };
    let book = known.book.partitions[partition as usize].clone();
    let acked_end = contiguous_acked_end(&book.acked);
    if cursor < book.acked_cursor || (acked_end > 0 && cursor < Some(acked_end)) {
        problems.push(format!(
            "partition {partition}: group cursor {cursor:?} after restart, but acks answered \
             cursor {:?} and the acked ranges cover 0..{acked_end}",
            book.acked_cursor
        ));
    }
    let start = cursor.unwrap_or(0);
    if let Some(outstanding) = &book.outstanding
        && !outstanding.ack_unknown
        && start > outstanding.lease.first
    {
        problems.push(format!(
            "partition {partition}: range {}..={} was leased and never acked, yet the cursor \
             is {start}",
            outstanding.lease.first, outstanding.lease.last
        ));
    }
    if !problems.is_empty() {
        return problems;
    }
    // Lease until a range comes (an unacked one is held until it expires), then ack it. The
    // wait is generous, as a loaded machine answers late; it ends at once when nothing is left.
    let deadline = Instant::now() + Duration::from_millis(LEASE_WAIT_MS);
    let leased = loop {
        match lease(addr, partition) {
            Ok(Some(leased)) => break Some(leased),
            Ok(None) if start < readback.next && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => break None,
            Err(Failure::Unknown(err) | Failure::Wrong(err)) => return vec![err],
        }
    };
    let Some(leased) = leased else {
        if start < readback.next {
            problems.push(format!(
                "partition {partition}: nothing could be leased for {} ms after the restart \
                 although the cursor is {start} and nextOffset {}",
                LEASE_WAIT_MS, readback.next
            ));
        }
        return problems;
    };
    problems.extend(lease_shape_problems(partition, &leased));
    if leased.first != start {
        problems.push(format!(
            "partition {partition}: the first lease after the restart starts at {} but the \
             cursor is {start}",
            leased.first
        ));
    }
    for (offset, key, payload) in &leased.records {
        let stored = readback.records.get(offset);
        if stored != Some(&(key.clone(), payload.clone())) {
            problems.push(format!(
                "partition {partition}: leased record {offset} is ({key:?}, {payload}) but reads \
                 as {stored:?}"
            ));
        }
    }
    if let Some(outstanding) = &book.outstanding {
        let held = &outstanding.lease;
        let same = leased.first == held.first && leased.last == held.last;
        if same {
            if leased.attempt <= held.attempt {
                problems.push(format!(
                    "partition {partition}: range {}..={} redelivered with attempt {} after \
                     attempt {}",
                    held.first, held.last, leased.attempt, held.attempt
                ));
            }
            known.redelivered_after_restart += 1;
        } else if !(outstanding.ack_unknown && leased.first == held.last + 1) {
            problems.push(format!(
                "partition {partition}: range {}..={} (attempt {}, ack {}) was leased before \
                 the kill, but the first lease after the restart is {}..={} attempt {}",
                held.first,
                held.last,
                held.attempt,
                if outstanding.ack_unknown {
                    "sent, answer lost"
                } else {
                    "not sent"
                },
                leased.first,
                leased.last,
                leased.attempt
            ));
        }
    }
    known.book.leased(partition, &leased);
    match ack(addr, partition, &leased.batch_id) {
        Ok(cursor) if cursor == Some(leased.last + 1) => {
            known.book.acked(partition, &leased, cursor);
        }
        Ok(cursor) => problems.push(format!(
            "partition {partition}: acking {}..={} answered cursor {cursor:?}",
            leased.first, leased.last
        )),
        Err(Failure::Unknown(err) | Failure::Wrong(err)) => problems.push(err),
    }
    known.book.partitions[partition as usize].claim_unknown = false;
    problems
}

/// Records and lease acks acknowledged before a SIGKILL are all there after a restart on the
/// same data folder, across repeated kills during concurrent produce, retention and leasing.
#[test]
fn acknowledged_writes_survive_repeated_sigkill() {
    let started = Instant::now();
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut known = Knowledge {
        sent: HashMap::new(),
        acked: HashSet::new(),
        placed: HashMap::new(),
        book: LeaseBook::new(),
        found_unacked: 0,
        lost_unacked: 0,
        resent_hot: 0,
        redelivered_after_restart: 0,
        verified: 0,
        cold: 0,
    };
    let mut server = Server::start(dir.path());
    for cycle in 0..KILLS {
        let addr = server.addr;
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|thread| {
                let stop = Arc::clone(&stop);
                let seed = rng.next();
                thread::spawn(move || produce(addr, cycle, thread, seed, &stop))
            })
            .collect();
        let worker = {
            let stop = Arc::clone(&stop);
            let book = known.book.clone();
            thread::spawn(move || work(addr, book, &stop))
        };
        let run_ms = 100 + rng.below(500);
        thread::sleep(Duration::from_millis(run_ms));
        server.kill();
        stop.store(true, Ordering::Relaxed);

        let mut problems = Vec::new();
        let mut acked_now = 0;
        for producer in producers {
            let report = producer.join().expect("a producer thread");
            known.sent.extend(report.attempted);
            acked_now += report.acked.len();
            for (key, place) in report.acked {
                known.acked.insert(key.clone());
                known.placed.insert(key, place);
            }
            problems.extend(report.problems);
        }
        let (book, worker_problems) = worker.join().expect("the worker thread");
        known.book = book;
        problems.extend(worker_problems);
        assert!(
            problems.is_empty(),
            "seed {seed}, cycle {cycle} (killed after {run_ms} ms), before the kill:\n{}",
            problems.join("\n")
        );

        server = Server::start(dir.path());
        let problems = verify(server.addr, &mut known);
        assert!(
            problems.is_empty(),
            "seed {seed}, cycle {cycle}: after SIGKILL at {run_ms} ms ({acked_now} events \
             acknowledged in that cycle) and a restart, {} problem(s):\n{}",
            problems.len(),
            problems
                .iter()
                .take(30)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    server.kill();
    assert!(
        known.verified > 0,
        "no event was acknowledged (seed {seed})"
    );
    assert!(known.book.acks > 0, "no lease was acked (seed {seed})");
    assert!(
        known.cold > 0,
        "retention never flushed to cold (seed {seed})"
    );
    eprintln!(
        "crash: {KILLS} SIGKILLs survived; {} events acknowledged (with retries of lost \
         unacknowledged ones), {} verified in place after the last restart ({} unacknowledged \
         found, {} lost unacknowledged re-sent, {} hot keys re-sent without a write, {} records \
         read back from cold); {} leases, \
         {} acks kept, {} abandoned, {} ranges redelivered after a restart; seed {seed}; \
         {:.1} s",
        known.acked.len(),
        known.verified,
        known.found_unacked,
        known.lost_unacked,
        known.resent_hot,
        known.cold,
        known.book.leases,
        known.book.acks,
        known.book.abandoned,
        known.redelivered_after_restart,
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// Kills during trims: nothing is left in the cold folder for good
// ---------------------------------------------------------------------------------------------

/// Kill/restart cycles of the leftovers test.
const TRIM_KILLS: usize = 8;

/// The locator of every segment indexed in the volumes of `data_dir` (the server is stopped).
fn indexed_locators(data_dir: &Path) -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(data_dir).expect("the data folder") {
        let path = entry.expect("a data folder entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if !(name.starts_with("volume-") && name.ends_with(".sqlite")) {
            continue;
        }
        let conn = rusqlite::Connection::open(&path).expect("open a volume");
        let mut statement = conn
            .prepare("SELECT locator FROM segments")
            .expect("the segment index");
        let rows = statement
            .query_map([], |row| row.get::<_, String>(0))
            .expect("read the segment index");
        found.extend(rows.map(|row| row.expect("a segment row")));
    }
    found
}

/// Every file under `cold`, as a path relative to it with `/` separators.
fn cold_files(cold: &Path) -> std::collections::BTreeSet<String> {
    crate::common::files_under(cold)
        .into_iter()
        .filter(|path| path.is_file())
        .map(|path| {
            let relative = path.strip_prefix(cold).expect("under the cold folder");
            relative.to_string_lossy().replace('\\', "/")
        })
        .collect()
}

/// SIGKILLs while partitions trim continuously (a hot window of 10 records, retention every
/// 5 ms, passes of at most 7 records) leave objects stored but never indexed and partial
/// temporary files; once the server is restarted and every partition trimmed, the cold folder
/// holds exactly the segments the index names and no temporary file, and every partition still
/// reads from offset 0 to its end with no gap.
#[test]
fn sigkills_during_trims_leave_no_cold_leftovers() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = [
        ("DURABILITY__RETENTION__MAX_RECORDS", "10"),
        ("DURABILITY__RETENTION__SWEEP_INTERVAL_MS", "5"),
        ("DURABILITY__LOG__MAX_BATCH_SIZE", "7"),
        ("DURABILITY__LEASES__ENABLED", "false"),
    ];
    let mut server = Server::start_with(dir.path(), &settings);
    for cycle in 0..TRIM_KILLS {
        let addr = server.addr;
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..2)
            .map(|thread| {
                let stop = Arc::clone(&stop);
                let seed = rng.next();
                thread::spawn(move || produce(addr, cycle, thread, seed, &stop))
            })
            .collect();
        let run_ms = 100 + rng.below(300);
        thread::sleep(Duration::from_millis(run_ms));
        server.kill();
        stop.store(true, Ordering::Relaxed);
        for producer in producers {
            let report = producer.join().expect("a producer thread");
            assert!(
                report.problems.is_empty(),
                "seed {seed}, cycle {cycle}: {}",
                report.problems.join("\n")
            );
        }
        server = Server::start_with(dir.path(), &settings);
    }

    let addr = server.addr;
    let mut problems = Vec::new();
    for partition in 0..PARTITIONS {
        let path = format!("/topics/{TOPIC}/partitions/{partition}/trim");
        match request(addr, "POST", &path, None) {
            Ok((200, _)) => {}
            Ok((status, body)) => problems.push(format!("trim {partition}: {status} {body}")),
            Err(err) => problems.push(format!("trim {partition}: {err}")),
        }
        match bounds(addr, partition) {
            Ok((_, _, next)) => {
                let readback = read_all(addr, partition, next, &mut problems);
                if readback.records.len() as u64 != next {
                    problems.push(format!(
                        "partition {partition}: {} records read below nextOffset {next}",
                        readback.records.len()
                    ));
                }
            }
            Err(err) => problems.push(err),
        }
    }
    server.kill();
    assert!(problems.is_empty(), "seed {seed}:\n{}", problems.join("\n"));

    let stored = cold_files(&dir.path().join("cold"));
    let indexed = indexed_locators(&dir.path().join("data"));
    assert!(!indexed.is_empty(), "nothing was flushed (seed {seed})");
    let is_temporary = |path: &&String| {
        let name = path.rsplit('/').next().unwrap_or_default();
        name.starts_with(".tmp-")
    };
    let temporaries: Vec<_> = stored.iter().filter(is_temporary).collect();
    let unindexed: Vec<_> = stored
        .difference(&indexed)
        .filter(|path| !is_temporary(path))
        .collect();
    let missing: Vec<_> = indexed.difference(&stored).collect();
    assert!(
        temporaries.is_empty() && unindexed.is_empty() && missing.is_empty(),
        "seed {seed}: {} temporary files left: {temporaries:?}; {} segments stored that no \
         index names: {unindexed:?}; {} indexed segments not stored: {missing:?}",
        temporaries.len(),
        unindexed.len(),
        missing.len()
    );
}
