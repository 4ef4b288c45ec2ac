//! Leases: groups of workers sharing one consumer group hold distinct ranges until they ack,
//! nack (with a delay), extend or skip them; holds expire and fence their old holder, poison
//! ranges are redelivered or handed out for the dead-letter trip, retention is reported once as
//! truncation, and everything is durable (SEMANTICS Part A 14-19, Part B sections 4 and 6
//! cases 22-31, 37 and 38, API "Leases").

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use durability::cold::MemoryColdStore;
use durability::store::{
    ColdTier, Lease, LeaseOptions, LeaseOutcome, LeaseRow, LeaseState, LogStore, Retention,
    StoreError, SyncMode,
};
use proptest::prelude::*;

use crate::common::{START_MS, TestStore, append_ok, block_on, body, bounds, plain};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A store whose groups lease with `leases`.
fn leasing(leases: LeaseOptions) -> TestStore {
    TestStore::with(|options| options.leases(leases))
}

/// `LogStore::lease` from synchronous tests.
fn lease_now(
    store: &LogStore,
    group: &str,
    limit: Option<usize>,
) -> Result<LeaseOutcome, StoreError> {
    block_on(store.lease(group, limit))
}

/// The lease of a `Leased` outcome; panics on anything else.
fn leased(outcome: Result<LeaseOutcome, StoreError>) -> Lease {
    match outcome {
        Ok(LeaseOutcome::Leased(lease)) => lease,
        other => panic!("expected a leased range, got {other:?}"),
    }
}

/// The lease of an `Exhausted` outcome; panics on anything else.
fn exhausted(outcome: Result<LeaseOutcome, StoreError>) -> Lease {
    match outcome {
        Ok(LeaseOutcome::Exhausted(lease)) => lease,
        other => panic!("expected an exhausted range, got {other:?}"),
    }
}

/// Whether `outcome` is `Idle`.
fn is_idle(outcome: &Result<LeaseOutcome, StoreError>) -> bool {
    matches!(outcome, Ok(LeaseOutcome::Idle))
}

/// Whether `result` is `LeaseNotHeld` naming `batch_id`.
fn not_held<T>(result: &Result<T, StoreError>, batch_id: &str) -> bool {
    matches!(result, Err(StoreError::LeaseNotHeld { batch_id: named }) if named == batch_id)
}

/// `(offset, body)` of a lease's records, bodies decoded from their JSON text.
fn lease_entries(lease: &Lease) -> Vec<(u64, String)> {
    lease
        .records
        .iter()
        .map(|record| {
            let text = serde_json::from_str(&record.payload).expect("payload is a JSON string");
            (record.offset, text)
        })
        .collect()
}

/// `(offset, body)` pairs from literals, to compare with [`lease_entries`].
fn pairs(items: &[(u64, &str)]) -> Vec<(u64, String)> {
    items
        .iter()
        .map(|(offset, text)| (*offset, (*text).to_owned()))
        .collect()
}

/// `(first, last, state)` of every lease row of `group`.
fn spans(store: &LogStore, group: &str) -> Vec<(u64, u64, LeaseState)> {
    store
        .leases(group)
        .unwrap()
        .iter()
        .map(|row| (row.first_offset, row.last_offset, row.state))
        .collect()
}

/// A cold tier in memory, as the rehydration tests use it.
fn memory_tier() -> (Arc<MemoryColdStore>, ColdTier) {
    let cold = Arc::new(MemoryColdStore::new());
    let tier = ColdTier {
        store: cold.clone(),
        prefix: "segments".into(),
        topic: "events".into(),
        partition: 0,
    };
    (cold, tier)
}

// ---------------------------------------------------------------------------------------------
// Part B section 6: the original library's lease cases
// ---------------------------------------------------------------------------------------------

/// Case 22: while a range is held, a second poller of the same group gets nothing; after the
/// ack the next range comes under a different batch id.
#[test]
fn a_held_range_is_not_delivered_to_a_second_poller() {
    let t = leasing(LeaseOptions::default());
    append_ok(&t.store, &plain(&["a", "b", "c", "d"]));

    let first = leased(lease_now(&t.store, "search", Some(2)));
    assert_eq!(lease_entries(&first), pairs(&[(0, "a"), (1, "b")]));
    assert_eq!((first.first_offset, first.last_offset), (0, 1));
    assert_eq!(first.attempt, 1);
    assert_eq!(first.group, "search");
    assert!(is_idle(&lease_now(&t.store, "search", Some(2))));

    assert_eq!(t.store.ack("search", &first.batch_id).unwrap(), Some(2));
    let second = leased(lease_now(&t.store, "search", Some(2)));
    assert_eq!(lease_entries(&second), pairs(&[(2, "c"), (3, "d")]));
    assert_ne!(second.batch_id, first.batch_id);
}

/// Case 23: two ranges held in parallel; acking the later one commits nothing, acking the
/// earlier one then commits across both.
#[test]
fn parallel_ranges_commit_in_order() {
    let t = leasing(LeaseOptions {
        max_parallelism: 2,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a", "b", "c"]));

    let first = leased(lease_now(&t.store, "search", Some(1)));
    let second = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!((first.first_offset, second.first_offset), (0, 1));
    assert!(is_idle(&lease_now(&t.store, "search", Some(1))));

    assert_eq!(t.store.ack("search", &second.batch_id).unwrap(), None);
    assert_eq!(t.store.cursor("search").unwrap(), None);
    assert_eq!(t.store.ack("search", &first.batch_id).unwrap(), Some(2));
    assert_eq!(t.store.cursor("search").unwrap(), Some(2));
    assert!(t.store.leases("search").unwrap().is_empty());
}

/// Case 24: a nacked range (no delay) is redelivered by the next lease, same span, next
/// attempt, new batch id.
#[test]
fn nack_redelivers_under_a_new_batch_id() {
    let t = leasing(LeaseOptions::default());
    append_ok(&t.store, &plain(&["a", "b"]));

    let first = leased(lease_now(&t.store, "search", Some(1)));
    t.store.nack("search", &first.batch_id, 0).unwrap();
    let again = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!(again.first_offset, 0);
    assert_eq!(again.last_offset, 0);
    assert_eq!(again.attempt, 2);
    assert_ne!(again.batch_id, first.batch_id);
    assert_eq!(lease_entries(&again), pairs(&[(0, "a")]));
}

/// Case 25: an expired hold is reclaimed by the next lease; the old holder's ack is refused
/// and the new holder's ack commits.
#[test]
fn expired_lease_is_reclaimed_and_the_old_holder_fenced() {
    let t = leasing(LeaseOptions {
        lease_ms: 1_000,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a"]));

    let held = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!(held.expires_at, START_MS + 1_000);
    assert!(is_idle(&lease_now(&t.store, "search", Some(1))));

    t.clock.advance(1_001);
    let reclaimed = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!(reclaimed.first_offset, 0);
    assert_eq!(reclaimed.attempt, 2);
    assert_eq!(reclaimed.expires_at, START_MS + 1_001 + 1_000);

    let stale = t.store.ack("search", &held.batch_id);
    assert!(not_held(&stale, &held.batch_id), "{stale:?}");
    assert_eq!(stale.unwrap_err().code(), "lease_not_held");
    assert_eq!(t.store.ack("search", &reclaimed.batch_id).unwrap(), Some(1));
}

/// Case 26: a settled batch cannot be settled again (ack, nack, extend or skip).
#[test]
fn double_settlement_is_refused() {
    let t = leasing(LeaseOptions::default());
    append_ok(&t.store, &plain(&["a"]));

    let lease = leased(lease_now(&t.store, "search", None));
    assert_eq!(lease_entries(&lease), pairs(&[(0, "a")]));
    assert_eq!(t.store.ack("search", &lease.batch_id).unwrap(), Some(1));

    let id = lease.batch_id.as_str();
    assert!(not_held(&t.store.ack("search", id), id));
    assert!(not_held(&t.store.nack("search", id, 0), id));
    assert!(not_held(&t.store.extend("search", id), id));
    assert!(not_held(&t.store.skip("search", id), id));
    assert_eq!(t.store.cursor("search").unwrap(), Some(1));
}

/// Case 27: two groups lease the same offsets independently; one group's ack commits only its
/// own cursor.
#[test]
fn groups_lease_independently() {
    let t = leasing(LeaseOptions::default());
    append_ok(&t.store, &plain(&["a", "b"]));

    let search = leased(lease_now(&t.store, "search", Some(1)));
    let billing = leased(lease_now(&t.store, "billing", Some(1)));
    assert_eq!((search.first_offset, billing.first_offset), (0, 0));
    assert_ne!(search.batch_id, billing.batch_id);

    assert_eq!(t.store.ack("search", &search.batch_id).unwrap(), Some(1));
    assert_eq!(
        t.store.cursors().unwrap(),
        BTreeMap::from([("search".to_owned(), 1)])
    );
    assert_eq!(spans(&t.store, "billing"), vec![(0, 0, LeaseState::Active)]);
}

/// Case 28 (adapted): with `max_attempts` 1 and no dead-letter destination, a range is
/// redelivered for ever (never `Exhausted`) and blocks the cursor.
#[test]
fn poison_without_dead_letter_is_redelivered_forever() {
    let t = leasing(LeaseOptions {
        max_attempts: Some(1),
        dead_letter: false,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a", "b"]));

    for attempt in 1..=4 {
        let lease = leased(lease_now(&t.store, "search", Some(1)));
        assert_eq!(lease.first_offset, 0);
        assert_eq!(lease.attempt, attempt);
        assert_eq!(lease_entries(&lease), pairs(&[(0, "a")]));
        t.store.nack("search", &lease.batch_id, 0).unwrap();
    }
    assert_eq!(t.store.cursor("search").unwrap(), None);
}

/// Case 29 (adapted): with `max_attempts` 2 and a dead-letter destination, the third delivery
/// is `Exhausted`; skipping it commits over it and the next lease moves on.
#[test]
fn poison_with_dead_letter_is_handed_out_exhausted_and_skipped() {
    let t = leasing(LeaseOptions {
        max_attempts: Some(2),
        dead_letter: true,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a", "b"]));

    for attempt in 1..=2 {
        let lease = leased(lease_now(&t.store, "search", Some(1)));
        assert_eq!((lease.first_offset, lease.attempt), (0, attempt));
        t.store.nack("search", &lease.batch_id, 0).unwrap();
    }
    let poison = exhausted(lease_now(&t.store, "search", Some(1)));
    assert_eq!(poison.first_offset, 0);
    assert_eq!(poison.last_offset, 0);
    assert_eq!(poison.attempt, 3);
    assert_eq!(lease_entries(&poison), pairs(&[(0, "a")]));
    assert_eq!(
        spans(&t.store, "search"),
        vec![(0, 0, LeaseState::Active)],
        "the exhausted range is held for its trip to the dead-letter destination"
    );

    assert_eq!(t.store.skip("search", &poison.batch_id).unwrap(), Some(1));
    let next = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!(next.first_offset, 1);
    assert_eq!(lease_entries(&next), pairs(&[(1, "b")]));
    assert_eq!(t.store.ack("search", &next.batch_id).unwrap(), Some(2));
}

/// Case 30: a nacked range flushed to the cold tier by a trim is redelivered with its records
/// read back from cold.
#[actix::test]
async fn range_flushed_while_pending_is_redelivered_from_cold() {
    let (cold, tier) = memory_tier();
    let t = TestStore::with(|options| {
        options
            .retention(Retention {
                max_records: Some(1),
                ..Retention::default()
            })
            .cold(tier)
            .leases(LeaseOptions::default())
    });
    append_ok(&t.store, &plain(&["a", "b"]));

    let lease = match t.store.lease("search", Some(1)).await {
        Ok(LeaseOutcome::Leased(lease)) => lease,
        other => panic!("expected a leased range, got {other:?}"),
    };
    assert_eq!(lease.first_offset, 0);
    t.store.nack("search", &lease.batch_id, 0).unwrap();
    assert_eq!(t.store.trim().await.unwrap(), 1);
    assert_eq!(cold.len(), 1);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 1, 2));

    let again = match t.store.lease("search", Some(1)).await {
        Ok(LeaseOutcome::Leased(lease)) => lease,
        other => panic!("expected the flushed range again, got {other:?}"),
    };
    assert_eq!((again.first_offset, again.last_offset), (0, 0));
    assert_eq!(again.attempt, 2);
    assert_eq!(lease_entries(&again), pairs(&[(0, "a")]));
    assert_eq!(t.store.ack("search", &again.batch_id).unwrap(), Some(1));
}

/// Case 31 (adapted): with leases switched off, every lease operation is refused with
/// `LeasesDisabled`, while plain reads and commits still work.
#[test]
fn lease_operations_are_refused_when_disabled() {
    let t = leasing(LeaseOptions {
        enabled: false,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a"]));

    let lease = lease_now(&t.store, "search", None);
    assert!(
        matches!(lease, Err(StoreError::LeasesDisabled)),
        "{lease:?}"
    );
    assert_eq!(lease.unwrap_err().code(), "leases_disabled");
    assert!(matches!(
        t.store.ack("search", "batch"),
        Err(StoreError::LeasesDisabled)
    ));
    assert!(matches!(
        t.store.nack("search", "batch", 0),
        Err(StoreError::LeasesDisabled)
    ));
    assert!(matches!(
        t.store.extend("search", "batch"),
        Err(StoreError::LeasesDisabled)
    ));
    assert!(matches!(
        t.store.skip("search", "batch"),
        Err(StoreError::LeasesDisabled)
    ));
    assert!(matches!(
        t.store.leases("search"),
        Err(StoreError::LeasesDisabled)
    ));

    assert_eq!(t.store.commit("search", 1).unwrap(), 1);
    assert_eq!(t.store.cursor("search").unwrap(), Some(1));
}

/// Case 37: two held ranges survive a reopen: nothing is released early (expiry is a stored
/// timestamp), and acking them after the reopen commits in order.
#[test]
fn holds_are_durable_across_reopen() {
    let t = leasing(LeaseOptions {
        max_parallelism: 2,
        lease_ms: 1_000,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a", "b", "c"]));

    let first = leased(lease_now(&t.store, "search", Some(1)));
    let second = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!((first.first_offset, second.first_offset), (0, 1));
    assert!(is_idle(&lease_now(&t.store, "search", Some(1))));

    let t = t.reopen();
    assert!(is_idle(&lease_now(&t.store, "search", Some(1))));
    let rows = t.store.leases("search").unwrap();
    assert_eq!(
        rows.iter()
            .map(|row| (row.batch_id.as_str(), row.first_offset, row.expires_at))
            .collect::<Vec<_>>(),
        vec![
            (first.batch_id.as_str(), 0, START_MS + 1_000),
            (second.batch_id.as_str(), 1, START_MS + 1_000),
        ]
    );

    assert_eq!(t.store.ack("search", &second.batch_id).unwrap(), None);
    assert_eq!(t.store.ack("search", &first.batch_id).unwrap(), Some(2));
}

/// Case 38: once the hold has expired (the clock moved 1,100 ms), the range is redelivered;
/// the old batch id is fenced and the new one commits.
#[test]
fn expiry_fences_the_old_holder() {
    let t = leasing(LeaseOptions {
        max_parallelism: 2,
        lease_ms: 1_000,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a"]));

    let old = leased(lease_now(&t.store, "search", Some(1)));
    t.clock.advance(1_100);
    let new = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!((new.first_offset, new.attempt), (0, 2));

    let stale = t.store.ack("search", &old.batch_id);
    assert!(not_held(&stale, &old.batch_id), "{stale:?}");
    assert_eq!(t.store.ack("search", &new.batch_id).unwrap(), Some(1));
}

// ---------------------------------------------------------------------------------------------
// Part A decisions 14-19
// ---------------------------------------------------------------------------------------------

/// Decision 14: many lease calls racing on several threads never receive overlapping ranges;
/// after a round of concurrent acks and nacks, the nacked ranges are redelivered exactly once
/// each, and acking everything commits the whole log.
#[test]
fn concurrent_lease_calls_never_overlap() {
    const THREADS: u64 = 4;
    const CALLS: u64 = 30;
    const RECORDS: u64 = 150;
    let t = leasing(LeaseOptions {
        max_parallelism: 1_000,
        ..LeaseOptions::default()
    });
    let texts: Vec<String> = (0..RECORDS).map(|i| format!("r{i}")).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    for chunk in refs.chunks(50) {
        append_ok(&t.store, &plain(chunk));
    }
    let store = &t.store;

    // Round 1: every thread leases fresh ranges of 1..=4 records.
    let per_thread: Vec<Vec<Lease>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                scope.spawn(move || {
                    (0..CALLS)
                        .filter_map(|call| {
                            let limit = (1 + (thread + call) % 4) as usize;
                            match lease_now(store, "search", Some(limit)).unwrap() {
                                LeaseOutcome::Leased(lease) => Some(lease),
                                LeaseOutcome::Idle => None,
                                LeaseOutcome::Exhausted(lease) => panic!("exhausted {lease:?}"),
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all: Vec<&Lease> = per_thread.iter().flatten().collect();
    all.sort_by_key(|lease| lease.first_offset);
    let mut next = 0;
    for lease in &all {
        assert_eq!(lease.first_offset, next, "ranges tile the log: {all:?}");
        assert_eq!(lease.attempt, 1);
        let offsets: Vec<u64> = lease.records.iter().map(|r| r.offset).collect();
        assert_eq!(
            offsets,
            (lease.first_offset..=lease.last_offset).collect::<Vec<_>>()
        );
        next = lease.last_offset + 1;
    }
    assert_eq!(next, RECORDS, "the calls cover the whole log");

    // Round 2: each thread nacks every other range it holds and acks the rest, all at once.
    let nacked: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = per_thread
            .iter()
            .map(|leases| {
                scope.spawn(move || {
                    let mut nacked = Vec::new();
                    for (i, lease) in leases.iter().enumerate() {
                        if i % 2 == 0 {
                            store.nack("search", &lease.batch_id, 0).unwrap();
                            nacked.push((lease.first_offset, lease.last_offset));
                        } else {
                            store.ack("search", &lease.batch_id).unwrap();
                        }
                    }
                    nacked
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });

    // Round 3: concurrent leases redeliver each nacked range to exactly one caller.
    let redelivered: Vec<Lease> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                scope.spawn(move || {
                    let mut got = Vec::new();
                    for _ in 0..CALLS {
                        match lease_now(store, "search", Some(4)).unwrap() {
                            LeaseOutcome::Leased(lease) => got.push(lease),
                            LeaseOutcome::Idle => {}
                            LeaseOutcome::Exhausted(lease) => panic!("exhausted {lease:?}"),
                        }
                    }
                    got
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let mut spans_again: Vec<(u64, u64)> = redelivered
        .iter()
        .map(|lease| {
            assert_eq!(lease.attempt, 2);
            (lease.first_offset, lease.last_offset)
        })
        .collect();
    spans_again.sort_unstable();
    let mut expected_spans = nacked;
    expected_spans.sort_unstable();
    assert_eq!(spans_again, expected_spans);

    for lease in &redelivered {
        store.ack("search", &lease.batch_id).unwrap();
    }
    assert_eq!(store.cursor("search").unwrap(), Some(RECORDS));
    assert!(store.leases("search").unwrap().is_empty());
}

/// Decision 15: ack, nack, extend and skip of another group's batch id are refused with
/// `LeaseNotHeld` and change nothing; the owner can still settle it.
#[test]
fn settling_with_the_wrong_group_is_refused_and_changes_nothing() {
    let t = leasing(LeaseOptions::default());
    append_ok(&t.store, &plain(&["a", "b"]));
    let lease = leased(lease_now(&t.store, "search", Some(1)));
    let id = lease.batch_id.as_str();
    let before = t.store.leases("search").unwrap();

    t.clock.advance(10);
    assert!(not_held(&t.store.ack("billing", id), id));
    assert!(not_held(&t.store.nack("billing", id, 0), id));
    assert!(not_held(&t.store.extend("billing", id), id));
    assert!(not_held(&t.store.skip("billing", id), id));

    assert_eq!(t.store.leases("search").unwrap(), before);
    assert!(t.store.leases("billing").unwrap().is_empty());
    assert!(t.store.cursors().unwrap().is_empty());
    assert!(is_idle(&lease_now(&t.store, "search", Some(1))));

    assert_eq!(t.store.ack("search", id).unwrap(), Some(1));
    assert_eq!(t.store.cursor("billing").unwrap(), None);
}

/// Decision 16: a nacked range with a delay is not redelivered before the delay (other work
/// still flows) and is redelivered once it has passed.
#[test]
fn nack_delay_postpones_redelivery() {
    let t = leasing(LeaseOptions {
        max_parallelism: 2,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a", "b", "c"]));

    let first = leased(lease_now(&t.store, "search", Some(1)));
    t.store.nack("search", &first.batch_id, 500).unwrap();
    let rows = t.store.leases("search").unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, LeaseState::Pending);
    assert_eq!(rows[0].expires_at, START_MS + 500);

    t.clock.advance(499);
    let other = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!(other.first_offset, 1, "the delayed range is not due yet");
    assert!(
        is_idle(&lease_now(&t.store, "search", Some(1))),
        "the pending range counts against max_parallelism"
    );

    t.clock.advance(1);
    let again = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!((again.first_offset, again.attempt), (0, 2));
    assert_eq!(lease_entries(&again), pairs(&[(0, "a")]));
}

/// Decision 16: `extend` moves the expiry to now + `lease_ms`; the range is not reclaimed at
/// its old expiry, only at the new one, and the fenced holder can no longer extend.
#[test]
fn extend_renews_the_hold() {
    let t = leasing(LeaseOptions {
        lease_ms: 1_000,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a"]));

    let held = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!(held.expires_at, START_MS + 1_000);
    t.clock.advance(600);
    assert_eq!(
        t.store.extend("search", &held.batch_id).unwrap(),
        START_MS + 1_600
    );
    assert_eq!(
        t.store.leases("search").unwrap()[0].expires_at,
        START_MS + 1_600
    );

    t.clock.advance(400); // the old expiry
    assert!(is_idle(&lease_now(&t.store, "search", Some(1))));
    t.clock.advance(599);
    assert!(is_idle(&lease_now(&t.store, "search", Some(1))));
    t.clock.advance(1); // the new expiry
    let reclaimed = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!((reclaimed.first_offset, reclaimed.attempt), (0, 2));
    assert!(not_held(
        &t.store.extend("search", &held.batch_id),
        &held.batch_id
    ));

    // A hold that expired but that nobody reclaimed can still be extended by its holder.
    t.clock.advance(1_500);
    assert_eq!(
        t.store.extend("search", &reclaimed.batch_id).unwrap(),
        START_MS + 3_100 + 1_000
    );
    assert!(is_idle(&lease_now(&t.store, "search", Some(1))));
    assert_eq!(t.store.ack("search", &reclaimed.batch_id).unwrap(), Some(1));
}

/// Decision 17: records a group never settled that retention deleted (no cold tier) are
/// reported once as `Truncated` (first lost offset, oldest offset); the group's cursor moves to
/// the oldest offset and the next lease continues there.
#[actix::test]
async fn truncation_is_reported_once_and_the_group_moves_to_oldest() {
    let t = TestStore::with(|options| {
        options
            .retention(Retention {
                max_records: Some(1),
                ..Retention::default()
            })
            .leases(LeaseOptions::default())
    });
    append_ok(&t.store, &plain(&["a", "b", "c", "d", "e"]));

    let lease = match t.store.lease("search", Some(1)).await {
        Ok(LeaseOutcome::Leased(lease)) => lease,
        other => panic!("expected a leased range, got {other:?}"),
    };
    assert_eq!(lease.first_offset, 0);
    t.store.nack("search", &lease.batch_id, 0).unwrap();
    assert_eq!(t.store.trim().await.unwrap(), 4);
    assert_eq!(t.store.bounds().unwrap(), bounds(4, 4, 5));

    let lost = t.store.lease("search", Some(1)).await;
    assert!(
        matches!(
            lost,
            Err(StoreError::Truncated {
                requested_offset: 0,
                oldest_offset: 4
            })
        ),
        "{lost:?}"
    );
    assert_eq!(
        t.store.cursor("search").unwrap(),
        Some(4),
        "the truncation answer moves the cursor to the oldest offset"
    );

    let next = t.store.lease("search", Some(1)).await;
    let next = match next {
        Ok(LeaseOutcome::Leased(lease)) => lease,
        other => panic!("expected the range at the oldest offset, got {other:?}"),
    };
    assert_eq!(next.first_offset, 4);
    assert_eq!(lease_entries(&next), pairs(&[(4, "e")]));
    assert_eq!(t.store.ack("search", &next.batch_id).unwrap(), Some(5));
}

/// Decision 17: when retention deleted several ranges the group had not settled (two nacked
/// ranges and the unleased records after them), one `Truncated` answer reports the first lost
/// offset and drops them all; the next lease continues at the oldest offset.
#[test]
fn truncation_of_several_ranges_is_reported_once() {
    let t = TestStore::with(|options| {
        options
            .retention(Retention {
                max_records: Some(1),
                ..Retention::default()
            })
            .leases(LeaseOptions {
                max_parallelism: 2,
                ..LeaseOptions::default()
            })
    });
    append_ok(&t.store, &plain(&["a", "b", "c", "d", "e"]));
    let first = leased(lease_now(&t.store, "search", Some(1)));
    let second = leased(lease_now(&t.store, "search", Some(2)));
    assert_eq!((second.first_offset, second.last_offset), (1, 2));
    t.store.nack("search", &first.batch_id, 0).unwrap();
    t.store.nack("search", &second.batch_id, 0).unwrap();
    assert_eq!(block_on(t.store.trim()).unwrap(), 4);

    let lost = lease_now(&t.store, "search", Some(1));
    assert!(
        matches!(
            lost,
            Err(StoreError::Truncated {
                requested_offset: 0,
                oldest_offset: 4
            })
        ),
        "{lost:?}"
    );
    let next = lease_now(&t.store, "search", Some(1));
    let cursor = t.store.cursor("search").unwrap();
    let next = match next {
        Ok(LeaseOutcome::Leased(lease)) => lease,
        other => panic!(
            "expected the range at the oldest offset 4 after one truncation answer, got \
             {other:?} (cursor {cursor:?})"
        ),
    };
    assert_eq!(lease_entries(&next), pairs(&[(4, "e")]));
    assert_eq!(t.store.ack("search", &next.batch_id).unwrap(), Some(5));
}

/// Decision 17: a group that never leased or committed starts at the oldest readable offset
/// without an error, while a group whose committed cursor fell below it is told once.
#[test]
fn a_group_that_never_leased_starts_at_oldest_without_error() {
    let t = TestStore::with(|options| {
        options
            .retention(Retention {
                max_records: Some(2),
                ..Retention::default()
            })
            .leases(LeaseOptions::default())
    });
    append_ok(&t.store, &plain(&["a", "b", "c", "d", "e"]));
    assert_eq!(t.store.commit("old", 1).unwrap(), 1);
    assert_eq!(block_on(t.store.trim()).unwrap(), 3);

    let fresh = leased(lease_now(&t.store, "fresh", None));
    assert_eq!(lease_entries(&fresh), pairs(&[(3, "d"), (4, "e")]));
    assert_eq!(t.store.ack("fresh", &fresh.batch_id).unwrap(), Some(5));

    let old = lease_now(&t.store, "old", None);
    assert!(
        matches!(
            old,
            Err(StoreError::Truncated {
                requested_offset: 1,
                oldest_offset: 3
            })
        ),
        "{old:?}"
    );
    assert_eq!(t.store.cursor("old").unwrap(), Some(3));
    let resumed = leased(lease_now(&t.store, "old", None));
    assert_eq!(resumed.first_offset, 3);
    assert_eq!(t.store.ack("old", &resumed.batch_id).unwrap(), Some(5));
}

/// Decision 17: a range partly flushed to the cold tier while held is redelivered whole, its
/// head read back from cold and its tail from the hot window.
#[actix::test]
async fn a_range_partly_flushed_is_redelivered_whole() {
    let (cold, tier) = memory_tier();
    let t = TestStore::with(|options| {
        options
            .retention(Retention {
                max_records: Some(2),
                ..Retention::default()
            })
            .cold(tier)
            .leases(LeaseOptions {
                lease_ms: 1_000,
                ..LeaseOptions::default()
            })
    });
    append_ok(&t.store, &plain(&["a", "b", "c", "d"]));

    let held = match t.store.lease("search", Some(3)).await {
        Ok(LeaseOutcome::Leased(lease)) => lease,
        other => panic!("expected a leased range, got {other:?}"),
    };
    assert_eq!((held.first_offset, held.last_offset), (0, 2));
    assert_eq!(t.store.trim().await.unwrap(), 2);
    assert_eq!(cold.len(), 1);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 2, 4));

    t.clock.advance(1_000);
    let again = match t.store.lease("search", Some(1)).await {
        Ok(LeaseOutcome::Leased(lease)) => lease,
        other => panic!("expected the range again, got {other:?}"),
    };
    assert_eq!((again.first_offset, again.last_offset), (0, 2));
    assert_eq!(again.attempt, 2);
    assert_eq!(
        lease_entries(&again),
        pairs(&[(0, "a"), (1, "b"), (2, "c")])
    );
    assert_eq!(t.store.ack("search", &again.batch_id).unwrap(), Some(3));
}

/// Decision 19: an exhausted range skipped after the later ranges were already acked commits
/// over all of them at once, with no further ack.
#[test]
fn skipped_range_followed_by_acked_ones_advances_immediately() {
    let t = leasing(LeaseOptions {
        max_parallelism: 3,
        max_attempts: Some(1),
        dead_letter: true,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a", "b", "c"]));

    let first = leased(lease_now(&t.store, "search", Some(1)));
    let second = leased(lease_now(&t.store, "search", Some(1)));
    let third = leased(lease_now(&t.store, "search", Some(1)));
    t.store.nack("search", &first.batch_id, 0).unwrap();
    assert_eq!(t.store.ack("search", &second.batch_id).unwrap(), None);
    assert_eq!(t.store.ack("search", &third.batch_id).unwrap(), None);

    let poison = exhausted(lease_now(&t.store, "search", Some(1)));
    assert_eq!((poison.first_offset, poison.attempt), (0, 2));
    assert_eq!(t.store.skip("search", &poison.batch_id).unwrap(), Some(3));
    assert_eq!(t.store.cursor("search").unwrap(), Some(3));
    assert!(t.store.leases("search").unwrap().is_empty());
    assert!(is_idle(&lease_now(&t.store, "search", None)));
}

/// Decision 19: later ranges acked first stay settled but uncommitted; the ack of the earliest
/// one commits across all of them, and again from an existing cursor.
#[test]
fn acked_later_ranges_commit_when_the_earlier_one_is_acked() {
    let t = leasing(LeaseOptions {
        max_parallelism: 3,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a", "b", "c", "d", "e", "f"]));

    for round in 0..2u64 {
        let base = round * 3;
        let first = leased(lease_now(&t.store, "search", Some(1)));
        let second = leased(lease_now(&t.store, "search", Some(1)));
        let third = leased(lease_now(&t.store, "search", Some(1)));
        assert_eq!(first.first_offset, base);
        let before = t.store.cursor("search").unwrap();

        assert_eq!(t.store.ack("search", &third.batch_id).unwrap(), before);
        assert_eq!(t.store.ack("search", &second.batch_id).unwrap(), before);
        assert_eq!(
            spans(&t.store, "search"),
            vec![
                (base, base, LeaseState::Active),
                (base + 1, base + 1, LeaseState::Acked),
                (base + 2, base + 2, LeaseState::Acked),
            ]
        );
        assert_eq!(
            t.store.ack("search", &first.batch_id).unwrap(),
            Some(base + 3)
        );
        assert!(t.store.leases("search").unwrap().is_empty());
    }
}

/// Deleting a group's cursor removes its leases and allocation too: its batch ids are no longer
/// held and its next lease starts again at the oldest offset.
#[test]
fn deleting_the_cursor_forgets_the_group_leases() {
    let t = leasing(LeaseOptions {
        max_parallelism: 2,
        ..LeaseOptions::default()
    });
    append_ok(&t.store, &plain(&["a", "b", "c"]));

    let first = leased(lease_now(&t.store, "search", Some(1)));
    let second = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!(t.store.ack("search", &first.batch_id).unwrap(), Some(1));
    let billing = leased(lease_now(&t.store, "billing", Some(1)));

    assert!(t.store.delete_cursor("search").unwrap());
    assert!(t.store.leases("search").unwrap().is_empty());
    assert!(not_held(
        &t.store.ack("search", &second.batch_id),
        &second.batch_id
    ));
    assert_eq!(t.store.cursor("search").unwrap(), None);
    let restarted = leased(lease_now(&t.store, "search", Some(1)));
    assert_eq!((restarted.first_offset, restarted.attempt), (0, 1));

    // A group with leases but no cursor yet.
    assert!(!t.store.delete_cursor("billing").unwrap());
    assert!(t.store.leases("billing").unwrap().is_empty());
    assert!(not_held(
        &t.store.ack("billing", &billing.batch_id),
        &billing.batch_id
    ));
}

// ---------------------------------------------------------------------------------------------
// Model test: random interleavings of workers, time and retention
// ---------------------------------------------------------------------------------------------

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

/// What the group should see: SEMANTICS Part A 14-19 with this implementation's decisions
/// (nack delays, pending ranges count against `max_parallelism`, `Exhausted` past
/// `max_attempts` with a dead letter, immediate cursor advance, truncation reported once).
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

    /// A lease that must answer `Truncated` (the first lost offset, the oldest offset): checks what Part A 17 promises of that one answer, then takes the store's rows and cursor
    /// as the model's (how exactly the lost rows are recorded is the store's business).
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
            .map(|r| (r.offset, r.payload.as_str()))
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
