//! Settling and redelivery: a batch is settled once, by ack, nack or skip; acks commit the
//! cursor in offset order, across ranges acked out of order; a nacked range is redelivered
//! under a new batch id, after its delay if it has one; and a poison range is redelivered for
//! ever without a dead-letter destination, or handed out `Exhausted` past `max_attempts` with
//! one, to be skipped (README: "Guarantees", dead letters under "Configuration"; the `leases`
//! operations of `GET /openapi.json`).

use durability::store::{Lease, LeaseOptions, LeaseOutcome, LeaseState, StoreError};

use super::{is_idle, lease_entries, lease_now, leased, leasing, not_held, pairs, spans};
use crate::common::{START_MS, append_ok, plain};

/// The lease of an `Exhausted` outcome; panics on anything else.
fn exhausted(outcome: Result<LeaseOutcome, StoreError>) -> Lease {
    match outcome {
        Ok(LeaseOutcome::Exhausted(lease)) => lease,
        other => panic!("expected an exhausted range, got {other:?}"),
    }
}

/// Two ranges held in parallel; acking the later one commits nothing, acking the
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

/// A nacked range (no delay) is redelivered by the next lease, same span, next
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

/// A settled batch cannot be settled again (ack, nack, extend or skip).
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

/// With `max_attempts` 1 and no dead-letter destination, a range is
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

/// With `max_attempts` 2 and a dead-letter destination, the third delivery
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
