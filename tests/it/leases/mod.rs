//! Leases: groups of workers sharing one consumer group hold distinct ranges until they ack,
//! nack (with a delay), extend or skip them; holds expire and fence their old holder, poison
//! ranges are redelivered or handed out for the dead-letter trip, retention is reported once as
//! truncation, and everything is durable (README: "Guarantees"; the `leases` operations of
//! `GET /openapi.json`). One module per behaviour:
//!
//! - [`claiming`]: one holder per range, expiry and fencing, extending a hold, groups apart,
//!   holds across a reopen, leases switched off;
//! - [`settling`]: acks that commit in order, nacks and their delays, skips, poison ranges with
//!   and without a dead letter;
//! - [`retention`]: ranges flushed to the cold tier and records deleted before they were
//!   settled;
//! - [`model`]: random interleavings of workers, time and retention against a model.
//!
//! The helpers below are shared by several of them.

use durability::store::{Lease, LeaseOptions, LeaseOutcome, LeaseState, LogStore, StoreError};

use crate::common::{TestStore, block_on};

mod claiming;
mod model;
mod retention;
mod settling;

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
#[track_caller]
fn leased(outcome: Result<LeaseOutcome, StoreError>) -> Lease {
    match outcome {
        Ok(LeaseOutcome::Leased(lease)) => lease,
        other => panic!("expected a leased range, got {other:?}"),
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
            let text = serde_json::from_str(record.payload.as_json().expect("a JSON payload"))
                .expect("payload is a JSON string");
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
