//! A bounded soak test: several concurrent tasks produce (keyed, with deduplication keys),
//! read, poll, commit, lease, ack, nack, extend and trim against one in-process `Log` with a
//! small hot window (`max_records`) and a local-folder cold tier, checking the invariants
//! throughout: no acknowledged record is lost, cursors only move forward, no two active leases
//! of a group overlap, and resident memory stays bounded.
//!
//! It runs for `DURABILITY_SOAK_SECONDS` seconds (default 30), then verifies every
//! acknowledged record once more and prints what it did.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use durability::config::ColdKind;
use durability::store::{AppendOutcome, LeaseState, NewRecord, StoreError};
use durability::{Error, Event, EventsOutcome, Log};

use crate::common::{Rng, TestLog};

/// The topic every task works on.
const TOPIC: &str = "events";
/// A topic written rarely, so that its partitions go idle, stop and start again.
const RARE: &str = "rare";
/// Partitions per topic.
const PARTITIONS: u32 = 3;
/// The hot window: at most this many records per partition stay in SQLite.
const MAX_RECORDS: u64 = 25;
/// The largest batch and page.
const MAX_BATCH: usize = 20;
/// How long a lease holds.
const LEASE_MS: u64 = 300;
/// The group that leases.
const WORKERS: &str = "workers";
/// The group that reads and commits.
const COMMITTER: &str = "committer";
/// The largest growth of resident memory allowed between a third of the run and its end.
const MAX_RSS_GROWTH_BYTES: u64 = 200 * 1024 * 1024;

/// How long the soak runs: `DURABILITY_SOAK_SECONDS`, or 30 s.
fn soak_duration() -> Duration {
    let seconds = std::env::var("DURABILITY_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0)
        .unwrap_or(30.0);
    Duration::from_secs_f64(seconds)
}

/// The process's resident memory (`VmRSS` of `/proc/self/status`), in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Milliseconds since the Unix epoch (the log's clock is the system clock).
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64
}

/// Where an acknowledged record lives.
type Place = (&'static str, u32, u64);

/// A lease some worker holds (as far as the workers know).
#[derive(Debug, Clone)]
struct Held {
    partition: u32,
    first: u64,
    last: u64,
    expires_at: i64,
    worker: usize,
}

/// What every task shares (one thread: tasks interleave at their awaits).
#[derive(Default)]
struct Soak {
    /// Every acknowledged record: its key and payload text.
    acked: BTreeMap<Place, (Option<String>, String)>,
    /// The same places, for picking one at random.
    places: Vec<Place>,
    /// The latest place each deduplication key was acknowledged at.
    keys: HashMap<String, (u32, u64)>,
    /// Batches sent, to send again (with the same keys and payloads).
    sent: Vec<Vec<Event>>,
    /// Leases the workers hold, by batch id.
    held: HashMap<String, Held>,
    /// Operations done, by kind.
    counts: BTreeMap<&'static str, u64>,
    /// Broken invariants (the first ones).
    violations: Vec<String>,
}

impl Soak {
    fn count(&mut self, kind: &'static str) {
        *self.counts.entry(kind).or_default() += 1;
    }

    fn add(&mut self, kind: &'static str, n: u64) {
        *self.counts.entry(kind).or_default() += n;
    }

    fn violation(&mut self, what: String) {
        if self.violations.len() < 50 {
            eprintln!("soak: VIOLATION {what}");
            self.violations.push(what);
        }
    }

    /// Notes an acknowledged record; a place acknowledged before must hold the same record.
    fn acknowledge(&mut self, place: Place, key: Option<String>, payload: String) {
        match self.acked.get(&place) {
            Some(known) if *known != (key.clone(), payload.clone()) => {
                let known = known.clone();
                self.violation(format!(
                    "{place:?} acknowledged for {key:?} {payload} but it holds {known:?}"
                ));
            }
            Some(_) => {}
            None => {
                self.acked.insert(place, (key, payload));
                self.places.push(place);
            }
        }
    }
}

type Shared = Rc<RefCell<Soak>>;

/// The payload of the `j`th event of batch `n` of producer `id`.
fn payload(id: usize, n: u64, j: usize, pad: usize) -> String {
    serde_json::json!({"producer": id, "n": n, "j": j, "pad": "x".repeat(pad)}).to_string()
}

/// Produces keyed batches (sometimes sending an earlier batch again), and now and then one
/// record to the rare topic.
async fn producer(log: Log, soak: Shared, id: usize, deadline: Instant) {
    let mut rng = Rng::new(id as u64 + 1);
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let resend = {
            let soak = soak.borrow();
            // Mostly a recent batch (its records are likely still hot: deduplicated), else
            // any earlier one (likely cold by now: appended again).
            let sent = soak.sent.len() as u64;
            (rng.chance(15) && sent > 0).then(|| {
                let back = if rng.chance(70) {
                    rng.below(sent.min(5))
                } else {
                    rng.below(sent)
                };
                soak.sent[(sent - 1 - back) as usize].clone()
            })
        };
        let events = match &resend {
            Some(events) => events.clone(),
            None => (0..1 + rng.below(5) as usize)
                .map(|j| Event {
                    partition_key: format!("user-{}", rng.below(1000)),
                    key: Some(format!("p{id}-{n}-{j}")),
                    payload: payload(id, n, j, rng.below(200) as usize).into(),
                    headers: Vec::new(),
                })
                .collect(),
        };
        let outcome = log.append_events(TOPIC, events.clone()).await;
        let placed = match outcome {
            Ok(EventsOutcome::Appended(placed)) => placed,
            other => {
                soak.borrow_mut()
                    .violation(format!("producer {id}: appending {events:?}: {other:?}"));
                continue;
            }
        };
        let mut moved = Vec::new();
        {
            let mut soak = soak.borrow_mut();
            soak.count(if resend.is_some() {
                "produce (resent)"
            } else {
                "produce"
            });
            soak.add("records produced", events.len() as u64);
            for (event, (partition, offset)) in events.iter().zip(&placed) {
                let key = event.key.clone().expect("keyed");
                soak.acknowledge(
                    (TOPIC, *partition, *offset),
                    Some(key.clone()),
                    event.payload.as_json().expect("a JSON payload").to_owned(),
                );
                match soak.keys.get(&key).copied() {
                    None => {
                        soak.keys.insert(key, (*partition, *offset));
                    }
                    Some(latest) if latest == (*partition, *offset) => soak.count("dedup hits"),
                    Some(latest) => moved.push((key, latest, (*partition, *offset))),
                }
            }
            if resend.is_none() {
                if soak.sent.len() == 2000 {
                    soak.sent.remove(0);
                }
                soak.sent.push(events);
            }
        }
        // A key may append again only once its latest record left the hot window (which only
        // moves forward: a record hot now was hot when the key was appended again).
        for (key, (partition, latest), again) in moved {
            let bounds = log.bounds(TOPIC, partition).await;
            let mut soak = soak.borrow_mut();
            match bounds {
                Ok(bounds) if bounds.hot_offset > latest => {
                    soak.count("dedup expired (record cold)");
                }
                other => soak.violation(format!(
                    "key {key} appended again at {again:?} although its record \
                     {partition}:{latest} is still hot ({other:?})"
                )),
            }
            if soak.keys.get(&key) == Some(&(partition, latest)) {
                soak.keys.insert(key, again);
            }
        }
        if n.is_multiple_of(25) {
            let partition = (n / 25 % u64::from(PARTITIONS)) as u32;
            let text = payload(id, n, 99, 3);
            match log
                .append(RARE, partition, vec![NewRecord::new(text.clone())])
                .await
            {
                Ok(appended) => match appended.outcome {
                    AppendOutcome::Appended { offsets } => {
                        let mut soak = soak.borrow_mut();
                        soak.count("produce (rare topic)");
                        soak.acknowledge((RARE, partition, offsets[0]), None, text);
                    }
                    AppendOutcome::Rejected(rejection) => soak
                        .borrow_mut()
                        .violation(format!("rare append refused: {rejection:?}")),
                },
                Err(err) => soak.borrow_mut().violation(format!("rare append: {err:?}")),
            }
        }
    }
}

/// Reads acknowledged records at random, one by one (hot or cold), and polls a group.
async fn reader(log: Log, soak: Shared, deadline: Instant) {
    let mut rng = Rng::new(77);
    while Instant::now() < deadline {
        let pick = {
            let soak = soak.borrow();
            (!soak.places.is_empty()).then(|| {
                let place = soak.places[rng.below(soak.places.len() as u64) as usize];
                (place, soak.acked[&place].clone())
            })
        };
        let Some(((topic, partition, offset), (key, payload))) = pick else {
            actix::clock::sleep(Duration::from_millis(2)).await;
            continue;
        };
        let page = log.read(topic, partition, Some(offset), Some(1)).await;
        {
            let mut soak = soak.borrow_mut();
            soak.count("read");
            match page {
                Ok(page)
                    if page.records.len() == 1
                        && page.records[0].offset == offset
                        && page.records[0].key == key
                        && page.records[0].payload == payload => {}
                other => soak.violation(format!(
                    "acknowledged {topic}:{partition}:{offset} ({key:?} {payload}) read back as {other:?}"
                )),
            }
        }
        if rng.chance(10) {
            let polled = log.poll(TOPIC, "poller", Some(5), Duration::ZERO).await;
            let mut soak = soak.borrow_mut();
            soak.count("poll");
            if let Err(err) = polled {
                soak.violation(format!("poll: {err:?}"));
            }
        }
    }
}

/// Reads each partition from the committer's cursor and commits past the page; now and then
/// commits a lower offset, which must change nothing.
async fn committer(log: Log, soak: Shared, deadline: Instant) {
    let mut rng = Rng::new(5);
    while Instant::now() < deadline {
        for partition in 0..PARTITIONS {
            let cursor = match log.cursor(TOPIC, partition, COMMITTER).await {
                Ok(cursor) => cursor.unwrap_or(0),
                Err(err) => {
                    soak.borrow_mut().violation(format!("cursor: {err:?}"));
                    continue;
                }
            };
            let page = match log.read(TOPIC, partition, Some(cursor), Some(10)).await {
                Ok(page) => page,
                Err(err) => {
                    soak.borrow_mut().violation(format!(
                        "reading {TOPIC}:{partition} from the committed cursor {cursor}: {err:?}"
                    ));
                    continue;
                }
            };
            let target = if rng.chance(10) {
                cursor.saturating_sub(3)
            } else {
                page.next_offset
            };
            let committed = log.commit(TOPIC, partition, COMMITTER, target).await;
            let mut soak = soak.borrow_mut();
            soak.count("commit");
            match committed {
                Ok(effective) if effective == target.max(cursor) => {}
                other => soak.violation(format!(
                    "commit {target} over cursor {cursor} on {TOPIC}:{partition} answered {other:?}"
                )),
            }
        }
    }
}

/// Leases ranges of `WORKERS` and acks, nacks, extends or abandons them, checking each
/// range's records and that no range still held by another worker is handed out again.
async fn worker(log: Log, soak: Shared, id: usize, deadline: Instant) {
    let mut rng = Rng::new(1000 + id as u64);
    let mut partition = id as u32 % PARTITIONS;
    while Instant::now() < deadline {
        partition = (partition + 1) % PARTITIONS;
        let limit = 1 + rng.below(8) as usize;
        let lease = match log.lease(TOPIC, partition, WORKERS, Some(limit)).await {
            Ok(Some(lease)) => lease,
            Ok(None) => {
                soak.borrow_mut().count("lease (nothing available)");
                actix::clock::sleep(Duration::from_millis(2)).await;
                continue;
            }
            Err(err) => {
                soak.borrow_mut().violation(format!(
                    "worker {id}: lease on {TOPIC}:{partition}: {err:?}"
                ));
                continue;
            }
        };
        let received_at = now_ms();
        {
            let mut soak = soak.borrow_mut();
            soak.count("lease");
            soak.add("records leased", lease.records.len() as u64);
            let offsets_match = lease
                .records
                .iter()
                .map(|r| r.offset)
                .eq(lease.first_offset..=lease.last_offset);
            if !offsets_match {
                soak.violation(format!(
                    "worker {id}: lease records do not match: {lease:?}"
                ));
            }
            for record in &lease.records {
                let place = (TOPIC, partition, record.offset);
                if let Some((key, payload)) = soak.acked.get(&place).cloned()
                    && (record.key != key || record.payload != payload)
                {
                    soak.violation(format!(
                        "worker {id}: leased {place:?} as {record:?}, acknowledged as {key:?} {payload}"
                    ));
                }
            }
            let overlapping: Vec<(String, Held)> = soak
                .held
                .iter()
                .filter(|(_, held)| {
                    held.partition == partition
                        && held.first <= lease.last_offset
                        && lease.first_offset <= held.last
                })
                .map(|(batch, held)| (batch.clone(), held.clone()))
                .collect();
            for (batch, held) in overlapping {
                // Handed out again: the earlier hold must have expired before this claim.
                if received_at < held.expires_at {
                    soak.violation(format!(
                        "worker {id} got {}..={} on {partition} while worker {} holds {batch} \
                         ({}..={}) until {} (now {received_at})",
                        lease.first_offset,
                        lease.last_offset,
                        held.worker,
                        held.first,
                        held.last,
                        held.expires_at
                    ));
                }
                soak.held.remove(&batch);
                soak.count("lease (reclaimed after expiry)");
            }
            soak.held.insert(
                lease.batch_id.clone(),
                Held {
                    partition,
                    first: lease.first_offset,
                    last: lease.last_offset,
                    expires_at: lease.expires_at,
                    worker: id,
                },
            );
        }
        let action = rng.below(100);
        if action < 5 {
            // Abandoned: it expires and is handed out again.
            soak.borrow_mut().count("lease abandoned");
            continue;
        }
        if (5..15).contains(&action) {
            let extended = log.extend(TOPIC, partition, WORKERS, &lease.batch_id).await;
            let mut soak = soak.borrow_mut();
            soak.count("extend");
            match extended {
                Ok(expires_at) => {
                    if let Some(held) = soak.held.get_mut(&lease.batch_id) {
                        held.expires_at = expires_at;
                    }
                }
                Err(Error::Store(StoreError::LeaseNotHeld { .. })) => {
                    soak.count("extend (not held)");
                }
                Err(err) => soak.violation(format!("extend: {err:?}")),
            }
        }
        // Released before the answer, so another worker's claim right after it is no overlap.
        soak.borrow_mut().held.remove(&lease.batch_id);
        if action < 30 {
            let delay = rng.below(30);
            let nacked = log
                .nack(TOPIC, partition, WORKERS, &lease.batch_id, delay)
                .await;
            let mut soak = soak.borrow_mut();
            soak.count("nack");
            match nacked {
                Ok(()) => {}
                Err(Error::Store(StoreError::LeaseNotHeld { .. })) => soak.count("nack (not held)"),
                Err(err) => soak.violation(format!("nack: {err:?}")),
            }
        } else {
            let acked = log.ack(TOPIC, partition, WORKERS, &lease.batch_id).await;
            let mut soak = soak.borrow_mut();
            soak.count("ack");
            match acked {
                Ok(_) => {}
                Err(Error::Store(StoreError::LeaseNotHeld { .. })) => soak.count("ack (not held)"),
                Err(err) => soak.violation(format!("ack: {err:?}")),
            }
        }
    }
}

/// Trims every partition now and then (retention also sweeps on its own timer).
async fn trimmer(log: Log, soak: Shared, deadline: Instant) {
    while Instant::now() < deadline {
        for topic in [TOPIC, RARE] {
            for partition in 0..PARTITIONS {
                let trimmed = log.trim(topic, partition).await;
                let mut soak = soak.borrow_mut();
                soak.count("trim");
                match trimmed {
                    Ok(removed) => soak.add("records trimmed by trim", removed),
                    Err(err) => soak.violation(format!("trim {topic}:{partition}: {err:?}")),
                }
            }
        }
        actix::clock::sleep(Duration::from_millis(40)).await;
    }
}

/// Watches the cursors (they only move forward) and the workers' lease rows (no two active
/// ranges overlap).
async fn watcher(log: Log, soak: Shared, deadline: Instant) {
    let mut last: HashMap<(&str, u32), u64> = HashMap::new();
    while Instant::now() < deadline {
        for partition in 0..PARTITIONS {
            for group in [COMMITTER, WORKERS] {
                let cursor = log.cursor(TOPIC, partition, group).await;
                let mut soak = soak.borrow_mut();
                soak.count("cursor check");
                match cursor {
                    Ok(Some(cursor)) => {
                        let before = last.insert((group, partition), cursor);
                        if before.is_some_and(|before| cursor < before) {
                            soak.violation(format!(
                                "{group}'s cursor on {partition} moved back from {before:?} to {cursor}"
                            ));
                        }
                    }
                    Ok(None) => {
                        if let Some(before) = last.get(&(group, partition)) {
                            soak.violation(format!(
                                "{group}'s cursor on {partition} vanished (was {before})"
                            ));
                        }
                    }
                    Err(err) => soak.violation(format!("cursor: {err:?}")),
                }
            }
            let rows = log.leases(TOPIC, partition, WORKERS).await;
            let mut soak = soak.borrow_mut();
            soak.count("lease rows check");
            match rows {
                Ok(rows) => {
                    let mut active: Vec<_> = rows
                        .iter()
                        .filter(|row| row.state == LeaseState::Active)
                        .collect();
                    active.sort_by_key(|row| row.first_offset);
                    for pair in active.windows(2) {
                        if pair[1].first_offset <= pair[0].last_offset {
                            soak.violation(format!(
                                "active leases overlap on {partition}: {:?} and {:?}",
                                pair[0], pair[1]
                            ));
                        }
                    }
                    let mut all: Vec<_> = rows.iter().collect();
                    all.sort_by_key(|row| row.first_offset);
                    for pair in all.windows(2) {
                        if pair[1].first_offset <= pair[0].last_offset {
                            soak.violation(format!(
                                "lease rows overlap on {partition}: {:?} and {:?}",
                                pair[0], pair[1]
                            ));
                        }
                    }
                }
                Err(err) => soak.violation(format!("lease rows: {err:?}")),
            }
        }
        actix::clock::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads every partition whole, page by page from offset 0, and checks that every
/// acknowledged record is there with its key and payload. Returns how many records it read.
async fn verify_everything(log: &Log, soak: &Shared) -> u64 {
    let mut read = 0;
    for topic in [TOPIC, RARE] {
        for partition in 0..PARTITIONS {
            let bounds = match log.bounds(topic, partition).await {
                Ok(bounds) => bounds,
                Err(err) => {
                    soak.borrow_mut()
                        .violation(format!("bounds {topic}:{partition}: {err:?}"));
                    continue;
                }
            };
            if bounds.oldest_offset != 0 {
                soak.borrow_mut().violation(format!(
                    "{topic}:{partition} lost its oldest records: {bounds:?}"
                ));
            }
            let mut records = BTreeMap::new();
            let mut from = bounds.oldest_offset;
            while from < bounds.next_offset {
                match log.read(topic, partition, Some(from), None).await {
                    Ok(page) if !page.records.is_empty() => {
                        from = page.next_offset;
                        for record in page.records {
                            records.insert(record.offset, record);
                        }
                    }
                    other => {
                        soak.borrow_mut().violation(format!(
                            "reading {topic}:{partition} from {from} ({bounds:?}): {other:?}"
                        ));
                        from += 1;
                    }
                }
            }
            read += records.len() as u64;
            let mut soak = soak.borrow_mut();
            // Records acknowledged after the bounds were read are checked by the next pass.
            let expected: Vec<_> = soak
                .acked
                .range((topic, partition, 0)..(topic, partition, bounds.next_offset))
                .map(|(place, record)| (*place, record.clone()))
                .collect();
            for ((_, _, offset), (key, payload)) in expected {
                match records.get(&offset) {
                    Some(record) if record.key == key && record.payload == payload => {}
                    other => soak.violation(format!(
                        "acknowledged {topic}:{partition}:{offset} ({key:?} {payload}) is {other:?}"
                    )),
                }
            }
        }
    }
    read
}

/// Several concurrent tasks produce (keyed, deduplicated, resent), read, poll, commit, lease,
/// ack, nack, extend and trim for `DURABILITY_SOAK_SECONDS` (default 30) against a log with
/// `max_records` 25 and a local-folder cold tier; throughout, no acknowledged record is lost
/// (each reads back from hot or cold with its key and payload), cursors only move forward,
/// no two active leases of a group overlap, a range is handed out again only after its hold
/// expired, and resident memory grows by less than 200 MiB from a third of the run to its end.
#[actix::test]
async fn soak_mixed_workload_keeps_every_invariant() {
    let duration = soak_duration();
    let t = TestLog::with(|config| {
        config.cold.kind = ColdKind::Fs;
        config.log.partitions_per_topic = PARTITIONS;
        config.log.max_batch_size = MAX_BATCH;
        config.retention.max_records = MAX_RECORDS;
        config.retention.max_age_ms = 0;
        config.retention.max_bytes = 0;
        config.retention.sweep_interval_ms = 100;
        config.leases.lease_ms = LEASE_MS;
        config.leases.max_parallelism = 3;
        config.partitions.idle_stop_ms = 200;
    });
    let started = Instant::now();
    let deadline = started + duration;
    let soak: Shared = Rc::default();
    let log = &t.log;
    let mut tasks = Vec::new();
    for id in 0..2 {
        tasks.push(actix::spawn(producer(
            log.clone(),
            soak.clone(),
            id,
            deadline,
        )));
    }
    tasks.push(actix::spawn(reader(log.clone(), soak.clone(), deadline)));
    tasks.push(actix::spawn(committer(log.clone(), soak.clone(), deadline)));
    for id in 0..3 {
        tasks.push(actix::spawn(worker(
            log.clone(),
            soak.clone(),
            id,
            deadline,
        )));
    }
    tasks.push(actix::spawn(trimmer(log.clone(), soak.clone(), deadline)));
    tasks.push(actix::spawn(watcher(log.clone(), soak.clone(), deadline)));

    actix::clock::sleep(duration / 3).await;
    let rss_at_third = resident_bytes();
    let checked_at_third = verify_everything(log, &soak).await;
    for task in tasks {
        task.await.expect("a soak task panicked");
    }
    let checked_at_end = verify_everything(log, &soak).await;
    let rss_at_end = resident_bytes();

    let soak = soak.borrow();
    eprintln!(
        "soak: {:.1} s, {} acknowledged records (verified {checked_at_third} at a third, \
         {checked_at_end} at the end), {} cold flushes",
        started.elapsed().as_secs_f64(),
        soak.acked.len(),
        log.cold_flushes().flushed()
    );
    for (kind, count) in &soak.counts {
        eprintln!("soak:   {kind}: {count}");
    }
    // What the test itself keeps per acknowledged record (payload, key, map entries), roughly.
    let bookkeeping: usize = soak
        .acked
        .values()
        .map(|(key, payload)| payload.len() + key.as_ref().map_or(0, String::len) * 2 + 160)
        .sum();
    eprintln!(
        "soak: VmRSS {:.1} MiB at a third, {:.1} MiB at the end (the test's own bookkeeping \
         is about {:.1} MiB at the end)",
        rss_at_third.unwrap_or(0) as f64 / 1048576.0,
        rss_at_end.unwrap_or(0) as f64 / 1048576.0,
        bookkeeping as f64 / 1048576.0
    );
    assert!(
        soak.violations.is_empty(),
        "{} invariant violations, first ones:\n{}",
        soak.violations.len(),
        soak.violations.join("\n")
    );
    assert!(
        soak.counts.get("lease").is_some_and(|n| *n > 0),
        "no lease was taken"
    );
    assert!(
        log.cold_flushes().flushed() > 0,
        "nothing was flushed to the cold tier"
    );
    if let (Some(third), Some(end)) = (rss_at_third, rss_at_end) {
        assert!(
            end.saturating_sub(third) < MAX_RSS_GROWTH_BYTES,
            "resident memory grew from {third} to {end} bytes"
        );
    }
}
