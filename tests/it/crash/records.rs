//! Records over HTTP: producer threads that send batches of keyed events until told to stop or
//! until a request fails, re-sends of known events, and the read-back of a partition from
//! offset 0, page by page, that the checks after a restart compare with what was sent.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};

use super::TOPIC;
use crate::common::Rng;
use crate::common::process::request;

/// Events re-sent per request in the checks.
const RESEND_CHUNK: usize = 40;
/// Read page size (`log.max_batch_size`, the default).
const PAGE: u64 = 100;

// ---------------------------------------------------------------------------------------------
// Producers
// ---------------------------------------------------------------------------------------------

/// An event as it was sent (its deduplication key is the map key it is stored under).
#[derive(Clone, Debug)]
pub(super) struct Sent {
    partition_key: String,
    pub(super) payload: Value,
}

fn event_json(key: &str, sent: &Sent) -> Value {
    json!({"partitionKey": sent.partition_key, "key": key, "payload": sent.payload})
}

/// What one producer thread did during one cycle.
#[derive(Default)]
pub(super) struct ProducerReport {
    /// Every event sent (acknowledged or not), in order.
    pub(super) attempted: Vec<(String, Sent)>,
    /// `key → (partition, offset)` for every event of a `202`.
    pub(super) acked: Vec<(String, (u32, u64))>,
    /// Answers that break the contract.
    pub(super) problems: Vec<String>,
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
pub(super) fn produce(
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
// Re-sends and read-back
// ---------------------------------------------------------------------------------------------

/// Re-sends `keys` (with their original partition keys and payloads) in chunks; the places the
/// server answered, in order, or the problem.
pub(super) fn resend(
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

/// A partition as read back after a restart.
pub(super) struct Readback {
    pub(super) oldest: u64,
    pub(super) hot: u64,
    pub(super) next: u64,
    /// `offset → (key, payload)`.
    pub(super) records: BTreeMap<u64, (Option<String>, Value)>,
}

/// `GET .../bounds`: `(oldest, hot, next)`.
pub(super) fn bounds(addr: SocketAddr, partition: u32) -> Result<(u64, u64, u64), String> {
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
pub(super) fn read_all(
    addr: SocketAddr,
    partition: u32,
    next: u64,
    problems: &mut Vec<String>,
) -> Readback {
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
