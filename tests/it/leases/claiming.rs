//! Claiming and fencing: a held range goes to one holder of a group at a time, even when lease
//! calls race; a hold lasts until it expires or is extended, after which the range is
//! reclaimed and the old holder fenced; another group's batch ids are not held; groups lease
//! apart, holds survive a reopen, deleting the cursor forgets them, and with leases switched off
//! every lease operation is refused (README: "Guarantees"; the `leases` operations of
//! `GET /openapi.json`).

use std::collections::BTreeMap;

use durability::store::{Lease, LeaseOptions, LeaseOutcome, LeaseState, StoreError};

use super::{is_idle, lease_entries, lease_now, leased, leasing, not_held, pairs, spans};
use crate::common::{START_MS, append_ok, plain};

/// While a range is held, a second poller of the same group gets nothing; after the
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

/// An expired hold is reclaimed by the next lease; the old holder's ack is refused
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

/// Two groups lease the same offsets independently; one group's ack commits only its
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

/// With leases switched off, every lease operation is refused with
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

/// Two held ranges survive a reopen: nothing is released early (expiry is a stored
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

/// Once the hold has expired (the clock moved 1,100 ms), the range is redelivered;
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
