//! The lease model test: random interleavings of appends, of workers leasing, acking (or
//! skipping), nacking and extending, of time and of retention, checked after every step against
//! a model of what the group should see, then drained to the log's end (README: "Guarantees";
//! the `leases` operations of `GET /openapi.json`).

use std::collections::{BTreeMap, HashSet};

use durability::store::{
    Lease, LeaseOptions, LeaseOutcome, LeaseRow, LeaseState, LogStore, Retention, StoreError,
    SyncMode,
};
use proptest::prelude::*;

use super::{is_idle, not_held};
use crate::common::{START_MS, TestStore, append_ok, body, plain};

const GROUP: &str = "workers";
const WORKERS: usize = 3;
const MODEL_LEASE_MS: u64 = 1_000;
const MODEL_PARALLELISM: usize = 2;
const MODEL_MAX_ATTEMPTS: u32 = 3;
const MODEL_MAX_RECORDS: u64 = 5;
const STEPS: usize = 100;
const CASES: u32 = 100;

// The model test covers at least 10,000 random steps in total.
const _: () = assert!(CASES as usize * STEPS >= 10_000);

/// One random action.
#[derive(Debug, Clone)]
enum Step {
    /// Append this many records.
    Append(usize),
    /// `worker` leases with this limit.
    Lease { worker: usize, limit: usize },
    /// `worker` acks (or skips, when it was exhausted) one of the batches it believes it holds.
    Ack { worker: usize, pick: usize },
    /// `worker` nacks one of its batches with this delay.
    Nack {
        worker: usize,
        pick: usize,
        delay_ms: u64,
    },
    /// `worker` extends one of its batches.
    Extend { worker: usize, pick: usize },
    /// Time passes.
    Advance(i64),
    /// Retention runs.
    Trim,
}

/// A random step, weighted towards leasing and settling.
fn step() -> impl Strategy<Value = Step> {
    // Advance comes first: proptest shrinks towards earlier alternatives, and `Advance(0)`
    // changes nothing, so a minimal failing run keeps only the steps that matter.
    prop_oneof![
        2 => (0i64..2_000).prop_map(Step::Advance),
        3 => (1usize..=3).prop_map(Step::Append),
        4 => (0..WORKERS, 1usize..=4).prop_map(|(worker, limit)| Step::Lease { worker, limit }),
        3 => (0..WORKERS, 0usize..8).prop_map(|(worker, pick)| Step::Ack { worker, pick }),
        2 => (0..WORKERS, 0usize..8, prop_oneof![Just(0u64), Just(500u64)])
            .prop_map(|(worker, pick, delay_ms)| Step::Nack { worker, pick, delay_ms }),
        1 => (0..WORKERS, 0usize..8).prop_map(|(worker, pick)| Step::Extend { worker, pick }),
        1 => Just(Step::Trim),
    ]
}

/// A batch a worker believes it holds.
#[derive(Debug, Clone)]
struct Held {
    batch_id: String,
    exhausted: bool,
}

/// The model's view of one lease row.
#[derive(Debug, Clone)]
struct Range {
    last: u64,
    batch_id: String,
    state: LeaseState,
    attempt: u32,
    expires_at: i64,
}

/// How a batch is settled.
#[derive(Debug, Clone, Copy)]
enum Settle {
    Ack,
    Skip,
    Nack(u64),
    Extend,
}

/// What the group should see: the lease rules (the `leases` operations of `GET /openapi.json`)
/// with this implementation's decisions (nack delays, pending ranges count against
/// `max_parallelism`, `Exhausted` past `max_attempts` with a dead letter, immediate cursor
/// advance, truncation reported once).
#[derive(Debug)]
struct Model {
    dead_letter: bool,
    bodies: Vec<String>,
    oldest: u64,
    now: i64,
    cursor: Option<u64>,
    allocation: Option<u64>,
    ranges: BTreeMap<u64, Range>,
    /// Batch ids replaced by a redelivery (or by a loss): their holders are fenced.
    fenced: HashSet<String>,
    /// Per offset: acked, skipped (exhausted), reported lost, or below where the group started.
    released: Vec<bool>,
    /// Offsets below this were checked against `released` when the cursor passed them.
    checked: u64,
    /// The last truncation answer since the last trim: the oldest offset it named and the
    /// spans actively held (not expired) when it was given.
    told: Option<(u64, Vec<(u64, u64)>)>,
}

impl Model {
    fn new(dead_letter: bool) -> Self {
        Self {
            dead_letter,
            bodies: Vec::new(),
            oldest: 0,
            now: START_MS,
            cursor: None,
            allocation: None,
            ranges: BTreeMap::new(),
            fenced: HashSet::new(),
            released: Vec::new(),
            checked: 0,
            told: None,
        }
    }

    fn next_offset(&self) -> u64 {
        self.bodies.len() as u64
    }

    fn release(&mut self, offsets: std::ops::RangeInclusive<u64>) {
        for offset in offsets {
            self.released[offset as usize] = true;
        }
    }

    /// The cursor walk: over acked/skipped ranges contiguous with the cursor (or the lowest
    /// range when there is no cursor), forgetting what it passed.
    fn advance(&mut self) {
        let Some(start) = self.cursor.or_else(|| self.ranges.keys().next().copied()) else {
            return;
        };
        let mut position = start;
        for (first, range) in &self.ranges {
            if range.last < position {
                continue;
            }
            if *first > position || !matches!(range.state, LeaseState::Acked | LeaseState::Skipped)
            {
                break;
            }
            position = range.last + 1;
        }
        self.ranges.retain(|_, range| range.last >= position);
        if position != start {
            self.cursor = Some(position);
        }
    }

    /// Checks a lease call's outcome against the model and applies it. Returns the delivered
    /// lease and whether it is exhausted.
    fn lease(
        &mut self,
        store: &LogStore,
        limit: usize,
        outcome: Result<LeaseOutcome, StoreError>,
    ) -> Option<(Lease, bool)> {
        let now = self.now;
        if let Err(StoreError::Truncated {
            requested_offset,
            oldest_offset,
        }) = outcome
        {
            // Truncation is reported once: a second answer for the same trim may only concern
            // a range that was actively held at the first one (its holder had the records).
            if let Some((told_oldest, held)) = &self.told {
                assert!(
                    *told_oldest != oldest_offset
                        || held
                            .iter()
                            .any(|(first, last)| (*first..=*last).contains(&requested_offset)),
                    "truncation reported twice for one trim: Truncated {{ requested_offset: \
                     {requested_offset}, oldest_offset: {oldest_offset} }} after an earlier \
                     answer naming oldest {told_oldest} (holds then: {held:?}); cursor {:?}, \
                     ranges {:?}",
                    self.cursor,
                    self.ranges
                );
            }
            let held = self
                .ranges
                .iter()
                .filter(|(_, r)| r.state == LeaseState::Active && r.expires_at > now)
                .map(|(first, r)| (*first, r.last))
                .collect();
            self.told = Some((oldest_offset, held));
        }
        // Lost records the group still owed (a range nobody holds below the oldest offset, or
        // never-leased offsets below it) are reported before anything else is handed out.
        let lost_waiting = self.ranges.iter().any(|(first, r)| {
            *first < self.oldest
                && (r.state == LeaseState::Pending
                    || (r.state == LeaseState::Active && r.expires_at <= now))
        });
        let unleased = match (self.allocation, self.cursor) {
            (Some(allocation), cursor) => Some(allocation.max(cursor.unwrap_or(0))),
            (None, cursor) => cursor,
        };
        if lost_waiting || unleased.is_some_and(|start| start < self.oldest) {
            self.truncated(store, &outcome);
            return None;
        }
        let due = self
            .ranges
            .iter()
            .find(|(_, r)| {
                matches!(r.state, LeaseState::Active | LeaseState::Pending) && r.expires_at <= now
            })
            .map(|(first, r)| (*first, r.last));
        if let Some((first, last)) = due {
            if first < self.oldest {
                // Its head was deleted: lost.
                self.truncated(store, &outcome);
                return None;
            }
            let (lease, is_exhausted) = match outcome {
                Ok(LeaseOutcome::Leased(lease)) => (lease, false),
                Ok(LeaseOutcome::Exhausted(lease)) => (lease, true),
                other => panic!("expected the due range {first}..={last}, got {other:?}"),
            };
            let range = self.ranges.get_mut(&first).unwrap();
            let attempt = range.attempt + 1;
            assert_eq!(
                (lease.first_offset, lease.last_offset, lease.attempt),
                (first, last, attempt),
                "redelivery of the lowest due range"
            );
            assert_eq!(lease.expires_at, now + MODEL_LEASE_MS as i64);
            assert_eq!(
                is_exhausted,
                self.dead_letter && attempt > MODEL_MAX_ATTEMPTS,
                "exhausted only past max_attempts with a dead letter"
            );
            let old = std::mem::replace(&mut range.batch_id, lease.batch_id.clone());
            assert_ne!(old, lease.batch_id, "a redelivery gets a fresh batch id");
            self.fenced.insert(old);
            range.state = LeaseState::Active;
            range.attempt = attempt;
            range.expires_at = lease.expires_at;
            self.check_records(&lease);
            return Some((lease, is_exhausted));
        }

        let start = match (self.allocation, self.cursor) {
            (Some(allocation), cursor) => allocation.max(cursor.unwrap_or(0)),
            (None, Some(cursor)) => cursor,
            (None, None) => {
                // A group that never leased starts at the oldest offset: what lies below
                // was never its to settle.
                if self.oldest > 0 {
                    self.release(0..=self.oldest - 1);
                }
                self.oldest
            }
        };
        let held = self
            .ranges
            .values()
            .filter(|r| matches!(r.state, LeaseState::Active | LeaseState::Pending))
            .count();
        if held >= MODEL_PARALLELISM {
            // Unleased records lost while the group is at its parallelism may be reported now
            // or at the next call that would allocate.
            if start < self.oldest && !is_idle(&outcome) {
                self.truncated(store, &outcome);
            } else {
                assert!(is_idle(&outcome), "at max_parallelism: got {outcome:?}");
            }
            return None;
        }
        if start < self.oldest {
            self.truncated(store, &outcome);
            return None;
        }
        if start >= self.next_offset() {
            assert!(is_idle(&outcome), "nothing unleased: got {outcome:?}");
            return None;
        }
        let last = (start + limit as u64 - 1).min(self.next_offset() - 1);
        let lease = match outcome {
            Ok(LeaseOutcome::Leased(lease)) => lease,
            other => panic!("expected a fresh range {start}..={last}, got {other:?}"),
        };
        assert_eq!(
            (lease.first_offset, lease.last_offset, lease.attempt),
            (start, last, 1),
            "a fresh range after the allocation"
        );
        assert_eq!(lease.expires_at, now + MODEL_LEASE_MS as i64);
        self.check_records(&lease);
        self.ranges.insert(
            start,
            Range {
                last,
                batch_id: lease.batch_id.clone(),
                state: LeaseState::Active,
                attempt: 1,
                expires_at: lease.expires_at,
            },
        );
        self.allocation = Some(last + 1);
        Some((lease, false))
    }

    /// A lease that must answer `Truncated` (the first lost offset, the oldest offset): checks
    /// what that one answer promises, then takes the store's rows and cursor as the model's (how
    /// exactly the lost rows are recorded is the store's business).
    fn truncated(&mut self, store: &LogStore, outcome: &Result<LeaseOutcome, StoreError>) {
        let (now, oldest) = (self.now, self.oldest);
        // The first lost offset: the lowest range nobody holds (pending, even if its delay has
        // not passed, or expired) below the oldest offset, else the first unleased one.
        let requested = self
            .ranges
            .iter()
            .find(|(first, r)| {
                **first < oldest
                    && (r.state == LeaseState::Pending
                        || (r.state == LeaseState::Active && r.expires_at <= now))
            })
            .map(|(first, _)| *first)
            .or_else(|| self.allocation.map(|a| a.max(self.cursor.unwrap_or(0))))
            .or(self.cursor)
            .expect("a group that never leased has nothing to lose");
        assert!(
            matches!(outcome, Err(StoreError::Truncated { requested_offset, oldest_offset })
                if *requested_offset == requested && *oldest_offset == oldest),
            "expected Truncated {{ requested_offset: {requested}, oldest_offset: {oldest} }}, \
             got {outcome:?}; model ranges {:?}",
            self.ranges
        );
        let rows = store.leases(GROUP).unwrap();
        let cursor = store.cursor(GROUP).unwrap();
        // Every lost range is dropped by this one answer: nothing below the oldest offset is
        // left awaiting redelivery (now or after a nack delay).
        for row in &rows {
            assert!(
                row.first_offset >= oldest
                    || !(row.state == LeaseState::Pending
                        || (row.state == LeaseState::Active && row.expires_at <= now)),
                "after Truncated {{ {requested}, {oldest} }} a lost range is still due: \
                 {row:?}; rows {rows:?}, cursor {cursor:?}"
            );
        }
        // The cursor moves to the oldest offset, unless a live hold below it still blocks it.
        let blocked = rows
            .iter()
            .any(|row| row.first_offset < oldest && row.state == LeaseState::Active);
        assert!(
            blocked || cursor >= Some(oldest),
            "after Truncated {{ {requested}, {oldest} }} the cursor is {cursor:?}, not at the \
             oldest offset {oldest}; rows {rows:?}"
        );
        // Reported lost: what this answer names, except what is still held or was acked.
        for offset in requested..oldest {
            let kept = rows.iter().any(|row| {
                (row.first_offset..=row.last_offset).contains(&offset)
                    && matches!(row.state, LeaseState::Active | LeaseState::Acked)
            });
            if !kept {
                self.released[offset as usize] = true;
            }
        }
        // Holders of dropped ranges are fenced.
        let active: HashSet<&str> = rows
            .iter()
            .filter(|row| row.state == LeaseState::Active)
            .map(|row| row.batch_id.as_str())
            .collect();
        for range in self.ranges.values() {
            if range.state == LeaseState::Active && !active.contains(range.batch_id.as_str()) {
                self.fenced.insert(range.batch_id.clone());
            }
        }
        self.ranges = rows
            .into_iter()
            .map(|row| {
                let range = Range {
                    last: row.last_offset,
                    batch_id: row.batch_id,
                    state: row.state,
                    attempt: row.attempt,
                    expires_at: row.expires_at,
                };
                (row.first_offset, range)
            })
            .collect();
        self.allocation = Some(self.allocation.map_or(oldest, |a| a.max(oldest)));
        self.cursor = cursor;
    }

    fn check_records(&self, lease: &Lease) {
        assert_eq!(lease.group, GROUP);
        let got: Vec<(u64, &str)> = lease
            .records
            .iter()
            .map(|r| (r.offset, r.payload.as_json().unwrap()))
            .collect();
        let want: Vec<(u64, &str)> = (lease.first_offset..=lease.last_offset)
            .map(|offset| (offset, self.bodies[offset as usize].as_str()))
            .collect();
        assert_eq!(got, want, "a lease carries exactly its range's records");
    }

    /// Applies a settlement; `None` when the batch is not held (the store must refuse it),
    /// else the value the store must return (the cursor, or the new expiry for extend).
    fn settle(&mut self, batch_id: &str, how: Settle) -> Option<Option<i64>> {
        let first = self
            .ranges
            .iter()
            .find(|(_, r)| r.state == LeaseState::Active && r.batch_id == batch_id)
            .map(|(first, _)| *first)?;
        let now = self.now;
        let range = self.ranges.get_mut(&first).unwrap();
        let last = range.last;
        match how {
            Settle::Ack | Settle::Skip => {
                range.state = if matches!(how, Settle::Ack) {
                    LeaseState::Acked
                } else {
                    LeaseState::Skipped
                };
                range.expires_at = now;
                self.release(first..=last);
            }
            Settle::Nack(delay_ms) => {
                range.state = LeaseState::Pending;
                range.expires_at = now + delay_ms as i64;
            }
            Settle::Extend => {
                range.expires_at = now + MODEL_LEASE_MS as i64;
                return Some(Some(range.expires_at));
            }
        }
        self.advance();
        Some(self.cursor.map(|c| c as i64))
    }

    /// Compares the store with the model, and checks the invariants that hold whatever the
    /// model says: (a) non-overlapping rows and holds, at most `max_parallelism` held, and
    /// (c) the cursor never passes an offset that was not acked, skipped or reported lost.
    fn check(&mut self, store: &LogStore) {
        let b = store.bounds().unwrap();
        assert_eq!(
            (b.oldest_offset, b.next_offset),
            (self.oldest, self.next_offset())
        );

        let rows: Vec<LeaseRow> = store.leases(GROUP).unwrap();
        // (a) rows are ordered and disjoint; active, unexpired holds never overlap.
        for pair in rows.windows(2) {
            assert!(
                pair[0].last_offset < pair[1].first_offset,
                "overlapping lease rows: {rows:?}"
            );
        }
        let holds: Vec<&LeaseRow> = rows
            .iter()
            .filter(|r| r.state == LeaseState::Active && r.expires_at > self.now)
            .collect();
        for (i, a) in holds.iter().enumerate() {
            for b in &holds[i + 1..] {
                assert!(
                    a.last_offset < b.first_offset || b.last_offset < a.first_offset,
                    "overlapping active holds {a:?} and {b:?}"
                );
            }
        }
        let held = rows
            .iter()
            .filter(|r| matches!(r.state, LeaseState::Active | LeaseState::Pending))
            .count();
        assert!(held <= MODEL_PARALLELISM, "too many held ranges: {rows:?}");

        // The rows are the model's rows.
        assert_eq!(
            rows.len(),
            self.ranges.len(),
            "store {rows:?} model {:?}",
            self.ranges
        );
        for (row, (first, range)) in rows.iter().zip(self.ranges.iter()) {
            assert_eq!(
                (
                    row.first_offset,
                    row.last_offset,
                    row.state,
                    row.attempt,
                    row.expires_at
                ),
                (
                    *first,
                    range.last,
                    range.state,
                    range.attempt,
                    range.expires_at
                ),
                "store {rows:?}"
            );
            assert_eq!(row.batch_id, range.batch_id, "store {rows:?}");
        }

        // (c) the cursor passes only released offsets, and never moves back.
        let cursor = store.cursor(GROUP).unwrap();
        assert_eq!(cursor, self.cursor, "cursor");
        if let Some(cursor) = cursor {
            assert!(cursor >= self.checked, "the cursor moved back");
            for offset in self.checked..cursor {
                assert!(
                    self.released[offset as usize],
                    "the cursor {cursor} passed offset {offset}, never acked, skipped or lost"
                );
            }
            self.checked = cursor;
        }
    }
}

/// The store's answer to a settlement, in the model's terms.
fn settle_in_store(
    store: &LogStore,
    batch_id: &str,
    how: Settle,
) -> Result<Option<i64>, StoreError> {
    match how {
        Settle::Ack => store.ack(GROUP, batch_id).map(|c| c.map(|c| c as i64)),
        Settle::Skip => store.skip(GROUP, batch_id).map(|c| c.map(|c| c as i64)),
        Settle::Nack(delay_ms) => store
            .nack(GROUP, batch_id, delay_ms)
            .map(|()| store.cursor(GROUP).unwrap().map(|c| c as i64)),
        Settle::Extend => store.extend(GROUP, batch_id).map(Some),
    }
}

/// One run of the model test.
fn run_model(steps: &[Step], dead_letter: bool) {
    let t = TestStore::with(|options| {
        options
            .sync(SyncMode::Normal)
            .retention(Retention {
                max_records: Some(MODEL_MAX_RECORDS),
                ..Retention::default()
            })
            .leases(LeaseOptions {
                enabled: true,
                lease_ms: MODEL_LEASE_MS,
                max_parallelism: MODEL_PARALLELISM as u32,
                max_attempts: Some(MODEL_MAX_ATTEMPTS),
                dead_letter,
            })
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let store = &t.store;
    let mut model = Model::new(dead_letter);
    let mut workers: Vec<Vec<Held>> = vec![Vec::new(); WORKERS];

    let append = |model: &mut Model, count: usize| {
        let next = model.next_offset();
        let texts: Vec<String> = (next..next + count as u64)
            .map(|offset| format!("r{offset}"))
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let offsets = append_ok(store, &plain(&refs));
        assert_eq!(offsets, (next..next + count as u64).collect::<Vec<_>>());
        model.bodies.extend(texts.iter().map(|text| body(text)));
        model.released.extend(std::iter::repeat_n(false, count));
    };

    // A worker settles one of the batches it believes it holds.
    let settle = |model: &mut Model, held: &mut Vec<Held>, pick: usize, how: Settle| {
        if held.is_empty() {
            return;
        }
        let index = pick % held.len();
        let how = match how {
            Settle::Ack if held[index].exhausted => Settle::Skip,
            how => how,
        };
        let batch_id = held[index].batch_id.clone();
        let fenced = model.fenced.contains(&batch_id);
        let expected = model.settle(&batch_id, how);
        let got = settle_in_store(store, &batch_id, how);
        if fenced {
            // (b) a fenced batch id is refused.
            assert!(
                not_held(&got, &batch_id),
                "fenced {batch_id} {how:?}: {got:?}"
            );
        }
        match expected {
            None => {
                assert!(not_held(&got, &batch_id), "{how:?} {batch_id}: {got:?}");
                held.remove(index);
            }
            Some(value) => {
                assert_eq!(got.unwrap(), value, "{how:?} {batch_id}");
                if !matches!(how, Settle::Extend) {
                    held.remove(index);
                }
            }
        }
    };

    for step in steps {
        match *step {
            Step::Append(count) => append(&mut model, count),
            Step::Lease { worker, limit } => {
                let outcome = runtime.block_on(store.lease(GROUP, Some(limit)));
                if let Some((lease, exhausted)) = model.lease(store, limit, outcome) {
                    workers[worker].push(Held {
                        batch_id: lease.batch_id,
                        exhausted,
                    });
                }
            }
            Step::Ack { worker, pick } => {
                settle(&mut model, &mut workers[worker], pick, Settle::Ack);
            }
            Step::Nack {
                worker,
                pick,
                delay_ms,
            } => settle(
                &mut model,
                &mut workers[worker],
                pick,
                Settle::Nack(delay_ms),
            ),
            Step::Extend { worker, pick } => {
                settle(&mut model, &mut workers[worker], pick, Settle::Extend);
            }
            Step::Advance(ms) => {
                t.clock.advance(ms);
                model.now += ms;
            }
            Step::Trim => {
                let removed = runtime.block_on(store.trim()).unwrap();
                let oldest = model
                    .oldest
                    .max(model.next_offset().saturating_sub(MODEL_MAX_RECORDS));
                assert_eq!(removed, oldest - model.oldest, "trim");
                if oldest != model.oldest {
                    model.told = None;
                }
                model.oldest = oldest;
            }
        }
        model.check(store);
    }

    // (d) No more trimming: drain everything; the cursor reaches the log's end.
    append(&mut model, 1);
    let mut converged = false;
    for _ in 0..10 {
        let ms = MODEL_LEASE_MS as i64 + 1;
        t.clock.advance(ms);
        model.now += ms;
        loop {
            let outcome = runtime.block_on(store.lease(GROUP, Some(4)));
            let idle = is_idle(&outcome);
            let truncated = matches!(outcome, Err(StoreError::Truncated { .. }));
            match model.lease(store, 4, outcome) {
                Some((lease, exhausted)) => {
                    let how = if exhausted { Settle::Skip } else { Settle::Ack };
                    let expected = model.settle(&lease.batch_id, how);
                    let got = settle_in_store(store, &lease.batch_id, how).unwrap();
                    assert_eq!(Some(got), expected);
                }
                None if idle => break,
                None => assert!(truncated),
            }
            model.check(store);
        }
        model.check(store);
        if model
            .ranges
            .values()
            .all(|r| !matches!(r.state, LeaseState::Active | LeaseState::Pending))
        {
            converged = true;
            break;
        }
    }
    assert!(converged, "leases left after draining: {:?}", model.ranges);
    assert_eq!(store.cursor(GROUP).unwrap(), Some(model.next_offset()));
    assert!(store.leases(GROUP).unwrap().is_empty());
}

proptest! {
    // No regression file: a failure prints its minimal input, and this test writes nothing
    // outside its temporary folders.
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::with_cases(CASES)
    })]

    /// Random interleavings of appends, leases by three workers, acks, nacks (with or without a
    /// delay) and extends of batches the workers believe they hold (stale ones included), time
    /// passing and retention: the store follows the model; active holds never overlap; fenced
    /// batch ids are refused; the cursor only passes acked, skipped or reported-lost offsets;
    /// and draining everything at the end brings the cursor to the log's end.
    #[test]
    fn leases_follow_the_model(
        steps in proptest::collection::vec(step(), STEPS),
        dead_letter in any::<bool>(),
    ) {
        run_model(&steps, dead_letter);
    }
}
