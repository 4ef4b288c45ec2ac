//! Acknowledged writes across SIGKILL: producers and a leasing worker run against the server,
//! which is killed mid-flight and restarted on the same data folder, cycle after cycle.
//! Whatever was acknowledged (a `202` for an append, a `200` for a lease ack) must be there
//! after every restart: each record exactly once, at its place, with its payload, and every
//! acked range still settled; ranges leased but not acked come back. With replication to
//! object storage, the same holds when the data folder is deleted after every kill.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::leases::{
    Failure, LeaseBook, ack, contiguous_acked_end, lease, lease_shape_problems, work,
};
use super::records::{Readback, Sent, bounds, produce, read_all, resend};
use super::{GROUP, LEASE_MS, MAX_RECORDS, PARTITIONS, TOPIC, seed, start_server};
use crate::common::Rng;
use crate::common::process::{replication_env, request};

/// How long a check waits for a range to lease after a restart (the lease expiry included).
const LEASE_WAIT_MS: u64 = LEASE_MS + 30_000;
/// Kill/restart cycles.
const KILLS: usize = 6;
/// Producer threads per cycle.
const PRODUCERS: usize = 4;

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
    let mut readbacks: Vec<Readback> = Vec::new();
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
                // The group's next lease may deliver it: it is part of the log now.
                let readback = &mut readbacks[partition as usize];
                let sent = known.sent[key].payload.clone();
                readback.records.insert(offset, (Some(key.clone()), sent));
                readback.next = readback.next.max(offset + 1);
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

// ---------------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------------

/// Records and lease acks acknowledged before a SIGKILL are all there after a restart on the
/// same data folder, across repeated kills during concurrent produce, retention and leasing.
#[test]
fn acknowledged_writes_survive_repeated_sigkill() {
    survive_kills(&[], Wipe::Never);
}

/// With every write replicated to object storage, records, cursors and lease acks acknowledged
/// before a SIGKILL are all there after a restart whose data folder was deleted (every other
/// cycle): the node rebuilds its volumes from the bucket. The other restarts keep the folder,
/// whose copies may hold groups committed locally whose window never landed (a group is
/// answered only once landed): those copies are set aside and rebuilt, and nothing
/// unacknowledged that they held may stand in for what the bucket holds. Re-sent
/// deduplication keys answer their original offsets (the check after each restart re-sends
/// them).
#[test]
fn acknowledged_writes_survive_sigkill_and_a_deleted_data_folder() {
    let s3 = crate::common::block_on(crate::common::fresh_s3_bucket());
    let mut overrides = replication_env(&s3, &s3.endpoint, "crash").to_vec();
    // Fewer appends per second than on the local disk: a smaller hot window, so retention
    // flushes to the cold tier within the run.
    overrides.push(("DURABILITY__RETENTION__MAX_RECORDS", "20"));
    survive_kills(&overrides, Wipe::EveryOtherRestart);
}

/// Which restarts of [`survive_kills`] delete the data folder first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wipe {
    Never,
    EveryOtherRestart,
}

/// Kill/restart cycles under load, with the server started with `overrides`.
fn survive_kills(overrides: &[(&str, &str)], wipe: Wipe) {
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
    let mut server = start_server(dir.path(), overrides);
    let mut set_aside = HashSet::new();
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

        if wipe == Wipe::EveryOtherRestart && cycle % 2 == 1 {
            std::fs::remove_dir_all(dir.path().join("data")).expect("delete the data folder");
        }
        server = start_server(dir.path(), overrides);
        // Copies the restart found off their history (holding a window that never landed).
        set_aside.extend(
            std::fs::read_dir(dir.path().join("data"))
                .expect("the data folder")
                .filter_map(Result::ok)
                .map(|entry| entry.file_name())
                .filter(|name| name.to_string_lossy().contains("set-aside")),
        );
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
         {} acks kept, {} abandoned, {} ranges redelivered after a restart; {} copies set \
         aside; seed {seed}; {:.1} s",
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
        set_aside.len(),
        started.elapsed().as_secs_f64()
    );
}
