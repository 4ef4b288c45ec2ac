//! Appends to a `LogStore`: offsets are contiguous from 0, a key already stored (or repeated
//! inside a batch) deduplicates to one record, every record of a batch carries the batch's
//! append time, batches, keys and payloads out of bounds are refused without writing, a group
//! commit keeps each batch atomic, and concurrent writers still get distinct, contiguous
//! offsets (README: "Guarantees").

use std::collections::HashMap;

use durability::store::{AppendOutcome, AppendRejection, MAX_KEY_BYTES, NewRecord};
use proptest::prelude::*;

use super::{bodies, keyed, read_all};
use crate::common::{ReadNow, START_MS, TestStore, append_ok, body, bounds, plain};

/// The rejection of a refused append; panics when it was accepted.
fn rejection_of(outcome: AppendOutcome) -> AppendRejection {
    match outcome {
        AppendOutcome::Rejected(rejection) => rejection,
        AppendOutcome::Appended { offsets } => {
            panic!("expected a rejection, got offsets {offsets:?}")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Offsets, deduplication and the append time
// ---------------------------------------------------------------------------------------------

/// Appends get contiguous offsets from 0 and a read returns them in order.
#[test]
fn appends_get_contiguous_offsets_and_read_back_in_order() {
    let t = TestStore::new();
    assert_eq!(
        t.store.bounds().unwrap(),
        bounds(0, 0, 0),
        "a fresh log is {{0, 0, 0}}"
    );
    assert_eq!(append_ok(&t.store, &plain(&["a", "b"])), vec![0, 1]);
    assert_eq!(append_ok(&t.store, &plain(&["c"])), vec![2]);

    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(bodies(&page), ["a", "b", "c"]);
    assert_eq!(
        page.records.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(page.next_offset, 3);
    assert_eq!(page.lag, 0);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 3));
}

/// A key that a hot record already has returns that record's offset and writes nothing.
#[test]
fn repeated_key_across_batches_reuses_its_offset() {
    let t = TestStore::new();
    assert_eq!(
        append_ok(&t.store, &keyed(&[("one", "a"), ("two", "b")])),
        vec![0, 1]
    );
    assert_eq!(
        append_ok(&t.store, &keyed(&[("two", "b"), ("three", "c")])),
        vec![1, 2]
    );

    let page = t.store.read_now(Some(0), None).unwrap();
    let keys: Vec<_> = page.records.iter().map(|r| r.key.as_deref()).collect();
    assert_eq!(keys, [Some("one"), Some("two"), Some("three")]);
    assert_eq!(bodies(&page), ["a", "b", "c"]);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 3));
}

/// The body sent with an already-stored key is ignored: the stored record keeps its payload.
#[test]
fn repeated_key_across_batches_keeps_the_original_payload() {
    let t = TestStore::new();
    append_ok(&t.store, &keyed(&[("k", "original")]));
    assert_eq!(append_ok(&t.store, &keyed(&[("k", "changed")])), vec![0]);
    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(bodies(&page), ["original"]);
}

/// A key repeated inside one batch gets one record holding the FIRST
/// occurrence's payload, and the same offset at every position.
#[test]
fn key_repeated_within_a_batch_stores_one_record_with_the_first_payload() {
    let t = TestStore::new();
    assert_eq!(
        append_ok(&t.store, &keyed(&[("same", "a"), ("same", "b")])),
        vec![0, 0]
    );

    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(page.records.len(), 1);
    assert_eq!(page.records[0].key.as_deref(), Some("same"));
    assert_eq!(bodies(&page), ["a"]);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 1));
}

/// Inside one batch, new records are numbered in order of first appearance, and a repeated key
/// maps back to its first position's offset even when other records come between.
#[test]
fn mixed_batch_numbers_new_records_by_first_appearance() {
    let t = TestStore::new();
    let batch = vec![
        NewRecord::keyed("x", body("x1")),
        NewRecord::new(body("plain")),
        NewRecord::keyed("y", body("y1")),
        NewRecord::keyed("x", body("x2")),
        NewRecord::new(body("plain")),
    ];
    assert_eq!(append_ok(&t.store, &batch), vec![0, 1, 2, 0, 3]);
    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(bodies(&page), ["x1", "plain", "y1", "plain"]);
}

/// A record appended without a key stores none (no invented key), and two keyless
/// records with the same body are two records.
#[test]
fn record_without_key_reads_back_with_no_key() {
    let t = TestStore::new();
    assert_eq!(append_ok(&t.store, &plain(&["a", "a"])), vec![0, 1]);
    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(page.records.len(), 2);
    assert!(page.records.iter().all(|record| record.key.is_none()));
}

/// Offsets are monotonic and a repeated key deduplicates.
#[test]
fn offsets_are_monotonic_and_keys_deduplicate() {
    let t = TestStore::new();
    assert_eq!(append_ok(&t.store, &keyed(&[("k1", "a")])), vec![0]);
    assert_eq!(
        append_ok(&t.store, &keyed(&[("k1", "a"), ("k2", "b")])),
        vec![0, 1]
    );
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 2));
}

/// `appended_at` is the clock's time at the append, shared by every record of a batch.
#[test]
fn appended_at_is_the_batch_time_from_the_clock() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b"]));
    t.clock.advance(5_000);
    append_ok(&t.store, &plain(&["c", "d"]));

    let times: Vec<i64> = t
        .store
        .read_now(Some(0), None)
        .unwrap()
        .records
        .iter()
        .map(|r| r.appended_at)
        .collect();
    assert_eq!(
        times,
        [START_MS, START_MS, START_MS + 5_000, START_MS + 5_000]
    );
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

/// With `max_batch_size` 2, an empty batch and an oversized batch are definite rejections, and
/// nothing is written.
#[test]
fn empty_and_oversized_batches_are_rejected_without_writing() {
    let t = TestStore::with(|o| o.max_batch_size(2));

    let empty = rejection_of(t.store.append(&[]).unwrap());
    assert!(matches!(empty, AppendRejection::EmptyBatch), "{empty:?}");
    assert_eq!(empty.code(), "invalid_request");

    let too_large = rejection_of(t.store.append(&plain(&["a", "b", "c"])).unwrap());
    assert!(
        matches!(
            too_large,
            AppendRejection::BatchTooLarge { records: 3, max: 2 }
        ),
        "{too_large:?}"
    );
    assert_eq!(too_large.code(), "batch_too_large");

    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 0));
    assert!(t.store.read_now(Some(0), None).unwrap().records.is_empty());
    assert!(
        !t.store.is_poisoned(),
        "a rejection is an answer, not a failure"
    );
    assert_eq!(
        append_ok(&t.store, &plain(&["a", "b"])),
        vec![0, 1],
        "exactly max is accepted"
    );
}

/// An empty key and a key over `MAX_KEY_BYTES` bytes are rejected; a key of exactly
/// `MAX_KEY_BYTES` bytes is accepted and read back intact.
#[test]
fn key_length_must_be_1_to_1024_bytes() {
    let t = TestStore::new();

    let empty = rejection_of(t.store.append(&keyed(&[("", "a")])).unwrap());
    assert!(
        matches!(empty, AppendRejection::InvalidKey { index: 0, bytes: 0 }),
        "{empty:?}"
    );
    assert_eq!(empty.code(), "invalid_request");

    let long_key = "k".repeat(MAX_KEY_BYTES + 1);
    let batch = vec![
        NewRecord::new(body("fine")),
        NewRecord::keyed(long_key, body("b")),
    ];
    let long = rejection_of(t.store.append(&batch).unwrap());
    assert!(
        matches!(
            long,
            AppendRejection::InvalidKey { index: 1, bytes } if bytes == MAX_KEY_BYTES + 1
        ),
        "{long:?}"
    );
    assert_eq!(
        t.store.bounds().unwrap(),
        bounds(0, 0, 0),
        "the valid record was not written either"
    );

    let max_key = "k".repeat(MAX_KEY_BYTES);
    assert_eq!(
        append_ok(&t.store, &[NewRecord::keyed(max_key.clone(), body("c"))]),
        vec![0]
    );
    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(page.records[0].key.as_deref(), Some(max_key.as_str()));
}

/// The key limit counts UTF-8 bytes, not characters: one two-byte character more than fit in
/// `MAX_KEY_BYTES` is too long.
#[test]
fn key_length_is_counted_in_bytes() {
    let t = TestStore::new();
    let wide = "é".repeat(MAX_KEY_BYTES / 2 + 1);
    let rejection = rejection_of(
        t.store
            .append(&[NewRecord::keyed(wide, body("a"))])
            .unwrap(),
    );
    assert!(
        matches!(
            rejection,
            AppendRejection::InvalidKey { index: 0, bytes } if bytes == MAX_KEY_BYTES + 2
        ),
        "{rejection:?}"
    );
    assert_eq!(
        append_ok(
            &t.store,
            &[NewRecord::keyed("é".repeat(MAX_KEY_BYTES / 2), body("a"))]
        ),
        vec![0]
    );
}

/// A payload over `max_record_bytes` rejects the whole batch with
/// `record_too_large`; a payload of exactly the limit is accepted.
#[test]
fn payload_over_the_record_limit_is_rejected_without_writing() {
    let t = TestStore::with(|o| o.max_record_bytes(8));
    let at_limit = body("abcdef"); // 8 bytes with its quotes
    let over_limit = body("abcdefg"); // 9 bytes
    assert_eq!(at_limit.len(), 8);

    let batch = vec![NewRecord::new(at_limit.clone()), NewRecord::new(over_limit)];
    let rejection = rejection_of(t.store.append(&batch).unwrap());
    assert!(
        matches!(
            rejection,
            AppendRejection::RecordTooLarge {
                index: 1,
                bytes: 9,
                max: 8
            }
        ),
        "{rejection:?}"
    );
    assert_eq!(rejection.code(), "record_too_large");
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 0));
    assert!(t.store.read_now(Some(0), None).unwrap().records.is_empty());

    assert_eq!(append_ok(&t.store, &[NewRecord::new(at_limit)]), vec![0]);
}

// ---------------------------------------------------------------------------------------------
// Group commit
// ---------------------------------------------------------------------------------------------

/// A group of batches commits together, yet each batch keeps its own outcome, contiguous
/// offsets and rejection, and a later batch sees the keys of an earlier one.
#[test]
fn group_commit_keeps_each_batch_atomic_and_ordered() {
    let t = TestStore::new();
    let first = keyed(&[("k1", "a"), ("k2", "b")]);
    let rejected: Vec<NewRecord> = vec![];
    let third = keyed(&[("k2", "ignored"), ("k3", "c")]);

    let outcomes = t.store.append_batches(&[first, rejected, third]).unwrap();
    assert_eq!(outcomes.len(), 3);
    assert!(
        matches!(&outcomes[0], AppendOutcome::Appended { offsets } if offsets == &[0, 1]),
        "{outcomes:?}"
    );
    assert!(
        matches!(
            &outcomes[1],
            AppendOutcome::Rejected(AppendRejection::EmptyBatch)
        ),
        "{outcomes:?}"
    );
    assert!(
        matches!(&outcomes[2], AppendOutcome::Appended { offsets } if offsets == &[1, 2]),
        "the reused key answers the first batch's offset: {outcomes:?}"
    );

    let page = t.store.read_now(Some(0), None).unwrap();
    let keys: Vec<_> = page.records.iter().map(|r| r.key.as_deref()).collect();
    assert_eq!(keys, [Some("k1"), Some("k2"), Some("k3")]);
    assert_eq!(bodies(&page), ["a", "b", "c"]);
    assert!(page.records.iter().all(|r| r.appended_at == START_MS));
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 3));
}

/// A group in which every batch is rejected answers every rejection and writes nothing.
#[test]
fn group_of_only_rejected_batches_writes_nothing() {
    let t = TestStore::with(|o| o.max_batch_size(1));
    let outcomes = t
        .store
        .append_batches(&[plain(&[]), plain(&["a", "b"])])
        .unwrap();
    assert!(
        matches!(
            &outcomes[0],
            AppendOutcome::Rejected(AppendRejection::EmptyBatch)
        ),
        "{outcomes:?}"
    );
    assert!(
        matches!(
            &outcomes[1],
            AppendOutcome::Rejected(AppendRejection::BatchTooLarge { records: 2, max: 1 })
        ),
        "{outcomes:?}"
    );
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// Model-based property test
// ---------------------------------------------------------------------------------------------

/// One record to append: a key from a small set (so keys repeat), and a body.
type Input = (Option<u8>, String);

/// What the log should hold: the offset of every key, and every record in order.
#[derive(Default)]
struct Model {
    offsets_by_key: HashMap<String, u64>,
    records: Vec<(u64, Option<String>, String)>,
}

impl Model {
    /// Applies one accepted batch and returns the offsets the log must answer.
    fn append(&mut self, batch: &[NewRecord]) -> Vec<u64> {
        batch
            .iter()
            .map(|record| {
                if let Some(&offset) = record
                    .key
                    .as_ref()
                    .and_then(|key| self.offsets_by_key.get(key))
                {
                    return offset;
                }
                let offset = self.records.len() as u64;
                if let Some(key) = &record.key {
                    self.offsets_by_key.insert(key.clone(), offset);
                }
                self.records.push((
                    offset,
                    record.key.clone(),
                    record.payload.as_json().unwrap().to_owned(),
                ));
                offset
            })
            .collect()
    }
}

/// The records of one generated batch; key `n` becomes `"key-n"`.
fn to_batch(inputs: &[Input]) -> Vec<NewRecord> {
    inputs
        .iter()
        .map(|(key, text)| NewRecord {
            key: key.map(|k| format!("key-{k}")),
            ..NewRecord::new(body(text))
        })
        .collect()
}

/// Batches of 1..=10 records, each flagged "join the previous batch's group commit".
fn batches() -> impl Strategy<Value = Vec<(bool, Vec<Input>)>> {
    let record = (proptest::option::of(0u8..8), "[a-z]{0,6}");
    proptest::collection::vec(
        (any::<bool>(), proptest::collection::vec(record, 1..=10)),
        1..=8,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Over random batches (alone or grouped), new records get contiguous offsets from 0, a
    /// repeated key (within or across batches) answers its original offset, and reading the
    /// whole log page by page returns exactly the model's records in order.
    #[test]
    fn appends_match_the_model(steps in batches(), page_size in 1usize..=7) {
        let t = TestStore::new();
        let mut model = Model::default();

        // Split the steps into groups: a batch flagged `true` joins the previous group.
        let mut groups: Vec<Vec<Vec<NewRecord>>> = Vec::new();
        for (join, inputs) in &steps {
            let batch = to_batch(inputs);
            match groups.last_mut() {
                Some(group) if *join => group.push(batch),
                _ => groups.push(vec![batch]),
            }
        }

        for group in &groups {
            let outcomes = if group.len() == 1 {
                vec![t.store.append(&group[0]).unwrap()]
            } else {
                t.store.append_batches(group).unwrap()
            };
            prop_assert_eq!(outcomes.len(), group.len());
            for (batch, outcome) in group.iter().zip(outcomes) {
                let expected = model.append(batch);
                prop_assert_eq!(outcome, AppendOutcome::Appended { offsets: expected });
            }
        }

        let next = model.records.len() as u64;
        prop_assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, next));

        let read: Vec<(u64, Option<String>, String)> = read_all(&t.store, page_size)
            .into_iter()
            .map(|record| (record.offset, record.key, record.payload.as_json().unwrap().to_owned()))
            .collect();
        prop_assert_eq!(read, model.records);
    }
}

// ---------------------------------------------------------------------------------------------
// Concurrent callers
// ---------------------------------------------------------------------------------------------

/// Many threads appending at once still get distinct, contiguous offsets, each batch its own
/// contiguous run, and readers running alongside always see a gap-free prefix.
#[test]
fn concurrent_appends_get_distinct_contiguous_offsets() {
    const THREADS: usize = 4;
    const BATCHES: usize = 10;
    let t = TestStore::new();
    let store = &t.store;
    let runs: Vec<Vec<u64>> = std::thread::scope(|scope| {
        let reader = scope.spawn(|| {
            for _ in 0..20 {
                let records = read_all(store, 7);
                let offsets: Vec<u64> = records.iter().map(|r| r.offset).collect();
                assert_eq!(offsets, (0..offsets.len() as u64).collect::<Vec<_>>());
            }
        });
        let writers: Vec<_> = (0..THREADS)
            .map(|thread| {
                scope.spawn(move || {
                    (0..BATCHES)
                        .map(|i| {
                            let batch =
                                plain(&[&format!("t{thread}-{i}-a"), &format!("t{thread}-{i}-b")]);
                            append_ok(store, &batch)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        reader.join().unwrap();
        writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });

    for run in &runs {
        assert_eq!(run.len(), 2);
        assert_eq!(
            run[1],
            run[0] + 1,
            "a batch's offsets are contiguous: {run:?}"
        );
    }
    let mut all: Vec<u64> = runs.concat();
    all.sort_unstable();
    let total = (THREADS * BATCHES * 2) as u64;
    assert_eq!(all, (0..total).collect::<Vec<_>>());
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, total));
}
