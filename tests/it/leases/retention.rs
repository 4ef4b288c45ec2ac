//! Leases and retention: a range that retention flushed to the cold tier while it was pending
//! or held is redelivered whole, read back from cold; records a group never settled that
//! retention deleted are reported once as `Truncated`, and the group moves on from the oldest
//! offset (README: "Guarantees"; the `leases` operations of `GET /openapi.json`).

use std::sync::Arc;

use durability::cold::MemoryColdStore;
use durability::store::{ColdTier, LeaseOptions, LeaseOutcome, Retention, StoreError};

use super::{lease_entries, lease_now, leased, pairs};
use crate::common::{TestStore, append_ok, block_on, bounds, plain};

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

/// A store keeping at most `max_records` hot records (flushing to `cold` when given), its
/// groups leasing with `leases`.
fn retaining(max_records: u64, cold: Option<ColdTier>, leases: LeaseOptions) -> TestStore {
    TestStore::with(|options| {
        let options = options
            .retention(Retention {
                max_records: Some(max_records),
                ..Retention::default()
            })
            .leases(leases);
        match cold {
            Some(tier) => options.cold(tier),
            None => options,
        }
    })
}

/// A nacked range flushed to the cold tier by a trim is redelivered with its records
/// read back from cold.
#[actix::test]
async fn range_flushed_while_pending_is_redelivered_from_cold() {
    let (cold, tier) = memory_tier();
    let t = retaining(1, Some(tier), LeaseOptions::default());
    append_ok(&t.store, &plain(&["a", "b"]));

    let lease = leased(t.store.lease("search", Some(1)).await);
    assert_eq!(lease.first_offset, 0);
    t.store.nack("search", &lease.batch_id, 0).unwrap();
    assert_eq!(t.store.trim().await.unwrap(), 1);
    assert_eq!(cold.len(), 1);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 1, 2));

    let again = leased(t.store.lease("search", Some(1)).await);
    assert_eq!((again.first_offset, again.last_offset), (0, 0));
    assert_eq!(again.attempt, 2);
    assert_eq!(lease_entries(&again), pairs(&[(0, "a")]));
    assert_eq!(t.store.ack("search", &again.batch_id).unwrap(), Some(1));
}

/// Decision 17: a range partly flushed to the cold tier while held is redelivered whole, its
/// head read back from cold and its tail from the hot window.
#[actix::test]
async fn a_range_partly_flushed_is_redelivered_whole() {
    let (cold, tier) = memory_tier();
    let t = retaining(
        2,
        Some(tier),
        LeaseOptions {
            lease_ms: 1_000,
            ..LeaseOptions::default()
        },
    );
    append_ok(&t.store, &plain(&["a", "b", "c", "d"]));

    let held = leased(t.store.lease("search", Some(3)).await);
    assert_eq!((held.first_offset, held.last_offset), (0, 2));
    assert_eq!(t.store.trim().await.unwrap(), 2);
    assert_eq!(cold.len(), 1);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 2, 4));

    t.clock.advance(1_000);
    let again = leased(t.store.lease("search", Some(1)).await);
    assert_eq!((again.first_offset, again.last_offset), (0, 2));
    assert_eq!(again.attempt, 2);
    assert_eq!(
        lease_entries(&again),
        pairs(&[(0, "a"), (1, "b"), (2, "c")])
    );
    assert_eq!(t.store.ack("search", &again.batch_id).unwrap(), Some(3));
}

/// Decision 17: records a group never settled that retention deleted (no cold tier) are
/// reported once as `Truncated` (first lost offset, oldest offset); the group's cursor moves to
/// the oldest offset and the next lease continues there.
#[actix::test]
async fn truncation_is_reported_once_and_the_group_moves_to_oldest() {
    let t = retaining(1, None, LeaseOptions::default());
    append_ok(&t.store, &plain(&["a", "b", "c", "d", "e"]));

    let lease = leased(t.store.lease("search", Some(1)).await);
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

    let next = leased(t.store.lease("search", Some(1)).await);
    assert_eq!(next.first_offset, 4);
    assert_eq!(lease_entries(&next), pairs(&[(4, "e")]));
    assert_eq!(t.store.ack("search", &next.batch_id).unwrap(), Some(5));
}

/// Decision 17: when retention deleted several ranges the group had not settled (two nacked
/// ranges and the unleased records after them), one `Truncated` answer reports the first lost
/// offset and drops them all; the next lease continues at the oldest offset.
#[test]
fn truncation_of_several_ranges_is_reported_once() {
    let t = retaining(
        1,
        None,
        LeaseOptions {
            max_parallelism: 2,
            ..LeaseOptions::default()
        },
    );
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
    let t = retaining(2, None, LeaseOptions::default());
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
