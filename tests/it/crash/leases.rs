//! The leasing worker: it leases on every partition in turn and acks, abandoning every third
//! fresh range, and keeps a book of the ranges it acked and the one it still holds on each
//! partition, which the checks after a restart hold the server to.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use serde_json::Value;

use super::{GROUP, PARTITIONS, TOPIC};
use crate::common::process::request;

/// A leased range as the server answered it.
#[derive(Clone, Debug)]
pub(super) struct Leased {
    pub(super) batch_id: String,
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) attempt: u64,
    /// `(offset, key, payload)` of each record.
    pub(super) records: Vec<(u64, Option<String>, Value)>,
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
pub(super) enum Failure {
    /// Transport error or 5xx: the change may or may not have happened.
    Unknown(String),
    /// An answer the contract does not allow here.
    Wrong(String),
}

/// `POST .../leases?limit=5`: `Some` range, or `None` on `204`.
pub(super) fn lease(addr: SocketAddr, partition: u32) -> Result<Option<Leased>, Failure> {
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
pub(super) fn ack(
    addr: SocketAddr,
    partition: u32,
    batch_id: &str,
) -> Result<Option<u64>, Failure> {
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
pub(super) struct Outstanding {
    pub(super) lease: Leased,
    /// The ack was sent but its answer never came: it may or may not be settled.
    pub(super) ack_unknown: bool,
}

/// What the worker knows about one partition of the group, across cycles.
#[derive(Clone, Debug, Default)]
pub(super) struct PartitionBook {
    /// Every range whose ack answered `200`.
    pub(super) acked: Vec<(u64, u64)>,
    /// The highest cursor an ack answered.
    pub(super) acked_cursor: Option<u64>,
    /// The range leased last and not acked, if any.
    pub(super) outstanding: Option<Outstanding>,
    /// A lease call failed without an answer: a range may have been claimed unseen.
    pub(super) claim_unknown: bool,
}

/// The worker's knowledge of every partition, and counters.
#[derive(Clone, Debug)]
pub(super) struct LeaseBook {
    pub(super) partitions: Vec<PartitionBook>,
    pub(super) leases: usize,
    pub(super) acks: usize,
    pub(super) abandoned: usize,
    redelivered: usize,
}

impl LeaseBook {
    pub(super) fn new() -> Self {
        Self {
            partitions: vec![PartitionBook::default(); PARTITIONS as usize],
            leases: 0,
            acks: 0,
            abandoned: 0,
            redelivered: 0,
        }
    }

    pub(super) fn leased(&mut self, partition: u32, leased: &Leased) {
        self.leases += 1;
        if leased.attempt > 1 {
            self.redelivered += 1;
        }
        self.partitions[partition as usize].outstanding = Some(Outstanding {
            lease: leased.clone(),
            ack_unknown: false,
        });
    }

    pub(super) fn acked(&mut self, partition: u32, leased: &Leased, cursor: Option<u64>) {
        self.acks += 1;
        let book = &mut self.partitions[partition as usize];
        book.acked.push((leased.first, leased.last));
        book.acked_cursor = book.acked_cursor.max(cursor);
        book.outstanding = None;
    }
}

/// The end of the run of acked ranges that starts at offset 0 (0 when none does).
pub(super) fn contiguous_acked_end(ranges: &[(u64, u64)]) -> u64 {
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
pub(super) fn lease_shape_problems(partition: u32, leased: &Leased) -> Vec<String> {
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
pub(super) fn work(
    addr: SocketAddr,
    mut book: LeaseBook,
    stop: &AtomicBool,
) -> (LeaseBook, Vec<String>) {
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
