//! `LogStore` against a real SQLite file: appends (validation, deduplication, contiguous
//! offsets, group commit), reads, cursors, backlog, durability across reopen, and the
//! "refuse writes after a failed commit" rule (SEMANTICS Part A 1-9, Part B section 6).

use std::collections::{BTreeMap, HashMap};

use durability::store::{
    AppendOutcome, AppendRejection, Bounds, INDEX_EVERY_ROWS, LogStore, MAX_KEY_BYTES, NewRecord,
    Page, Record, StoreError, StoreOptions, SyncMode, Volume,
};
use proptest::prelude::*;

use crate::common::{ReadNow, START_MS, TestStore};

/// The JSON text of the string `text` (the payload of a record whose body is `text`).
fn body(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// A batch of keyless records with these bodies.
fn plain(bodies: &[&str]) -> Vec<NewRecord> {
    bodies
        .iter()
        .map(|text| NewRecord::new(body(text)))
        .collect()
}

/// A batch of keyed records: `(key, body)`.
fn keyed(records: &[(&str, &str)]) -> Vec<NewRecord> {
    records
        .iter()
        .map(|(key, text)| NewRecord::keyed(*key, body(text)))
        .collect()
}

/// The offsets of an accepted append; panics on a rejection.
fn offsets_of(outcome: AppendOutcome) -> Vec<u64> {
    match outcome {
        AppendOutcome::Appended { offsets } => offsets,
        AppendOutcome::Rejected(rejection) => {
            panic!("expected an accepted append, got {rejection:?}")
        }
    }
}

/// Appends `batch` and returns its offsets; panics on a rejection or an error.
fn append_ok(store: &LogStore, batch: &[NewRecord]) -> Vec<u64> {
    offsets_of(store.append(batch).expect("append"))
}

/// The rejection of a refused append; panics when it was accepted.
fn rejection_of(outcome: AppendOutcome) -> AppendRejection {
    match outcome {
        AppendOutcome::Rejected(rejection) => rejection,
        AppendOutcome::Appended { offsets } => {
            panic!("expected a rejection, got offsets {offsets:?}")
        }
    }
}

/// The bodies of a page, decoded from their JSON text.
fn bodies(page: &Page) -> Vec<String> {
    page.records
        .iter()
        .map(|record| serde_json::from_str(&record.payload).expect("payload is a JSON string"))
        .collect()
}

/// Every record of the log from offset 0, read page by page with pages of at most `limit`.
fn read_all(store: &LogStore, limit: usize) -> Vec<Record> {
    let mut records = Vec::new();
    let mut from = 0;
    loop {
        let page = store.read_now(Some(from), Some(limit)).expect("read");
        assert!(
            page.records.len() <= limit,
            "a page holds at most `limit` records"
        );
        if page.records.is_empty() {
            assert_eq!(page.next_offset, from, "an empty page echoes `from`");
            assert_eq!(page.lag, 0, "an empty page at the end has no lag");
            return records;
        }
        from = page.next_offset;
        records.extend(page.records);
    }
}

/// Bounds `{oldest, hot, next}`, as the spec writes them.
fn bounds(oldest_offset: u64, hot_offset: u64, next_offset: u64) -> Bounds {
    Bounds {
        oldest_offset,
        hot_offset,
        next_offset,
    }
}

// ---------------------------------------------------------------------------------------------
// Part B section 6, cases 1-7, 32, 34, 35, 39 (adapted to Part A)
// ---------------------------------------------------------------------------------------------

/// Case 1: appends get contiguous offsets from 0 and a read returns them in order.
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

/// Case 2: a limited read reports the lag left behind and resumes from `next_offset`.
#[test]
fn limited_reads_report_lag_and_resume_from_next_offset() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c", "d"]));

    let first = t.store.read_now(Some(0), Some(2)).unwrap();
    assert_eq!(bodies(&first), ["a", "b"]);
    assert_eq!((first.next_offset, first.lag), (2, 2));

    let second = t.store.read_now(Some(first.next_offset), Some(2)).unwrap();
    assert_eq!(bodies(&second), ["c", "d"]);
    assert_eq!((second.next_offset, second.lag), (4, 0));

    let end = t.store.read_now(Some(4), None).unwrap();
    assert!(end.records.is_empty());
    assert_eq!((end.next_offset, end.lag), (4, 0));
}

/// Case 3: consumers commit independently, and committing consumes nothing.
#[test]
fn consumers_commit_independently_and_history_stays_readable() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b"]));
    assert_eq!(t.store.cursor("search").unwrap(), None);

    assert_eq!(t.store.commit("search", 2).unwrap(), 2);
    assert_eq!(t.store.commit("billing", 1).unwrap(), 1);
    let expected = BTreeMap::from([("billing".to_owned(), 1), ("search".to_owned(), 2)]);
    assert_eq!(t.store.cursors().unwrap(), expected);
    assert_eq!(t.store.cursor("search").unwrap(), Some(2));
    assert_eq!(t.store.cursor("billing").unwrap(), Some(1));

    assert_eq!(t.store.read_now(Some(0), None).unwrap().records.len(), 2);
}

/// Case 4: a commit at or below the cursor changes nothing and answers the cursor in effect.
#[test]
fn cursor_regressions_are_ignored() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    assert_eq!(t.store.commit("search", 3).unwrap(), 3);
    assert_eq!(
        t.store.commit("search", 1).unwrap(),
        3,
        "the regression answers the kept cursor"
    );
    assert_eq!(t.store.commit("search", 3).unwrap(), 3);
    assert_eq!(t.store.cursor("search").unwrap(), Some(3));
}

/// Case 5: a key that a hot record already has returns that record's offset and writes nothing.
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

/// Case 6 under Part A 6: a key repeated inside one batch gets one record holding the FIRST
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

/// Part A 6: a record appended without a key stores none (no invented key), and two keyless
/// records with the same body are two records.
#[test]
fn record_without_key_reads_back_with_no_key() {
    let t = TestStore::new();
    assert_eq!(append_ok(&t.store, &plain(&["a", "a"])), vec![0, 1]);
    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(page.records.len(), 2);
    assert!(page.records.iter().all(|record| record.key.is_none()));
}

/// Case 7 (with `max_batch_size` 2): an empty batch and an oversized batch are definite
/// rejections, and nothing is written.
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

/// Part A 5: an empty key and a key over 1024 bytes are rejected; a 1024-byte key is accepted
/// and read back intact.
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
            AppendRejection::InvalidKey {
                index: 1,
                bytes: 1025
            }
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

/// The key limit counts UTF-8 bytes, not characters: 513 two-byte characters are too long.
#[test]
fn key_length_is_counted_in_bytes() {
    let t = TestStore::new();
    let wide = "é".repeat(513);
    let rejection = rejection_of(
        t.store
            .append(&[NewRecord::keyed(wide, body("a"))])
            .unwrap(),
    );
    assert!(
        matches!(
            rejection,
            AppendRejection::InvalidKey {
                index: 0,
                bytes: 1026
            }
        ),
        "{rejection:?}"
    );
    assert_eq!(
        append_ok(&t.store, &[NewRecord::keyed("é".repeat(512), body("a"))]),
        vec![0]
    );
}

/// Part A 5: a payload over `max_record_bytes` rejects the whole batch with
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

/// Case 32: the backlog is counted from the slowest cursor, and is 0 without cursors.
#[test]
fn backlog_counts_from_the_slowest_cursor() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    assert_eq!(
        t.store.pending_deliveries().unwrap(),
        0,
        "no cursor, no backlog"
    );

    t.store.commit("search", 3).unwrap();
    t.store.commit("billing", 1).unwrap();
    assert_eq!(t.store.pending_deliveries().unwrap(), 2);

    t.store.commit("billing", 3).unwrap();
    assert_eq!(t.store.pending_deliveries().unwrap(), 0);
}

/// Case 39: a fast and a slow consumer leave the slow one's backlog.
#[test]
fn backlog_is_the_slow_consumers_distance_to_the_end() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["e1", "e2", "e3"]));
    t.store.commit("fast", 3).unwrap();
    t.store.commit("slow", 1).unwrap();
    assert_eq!(t.store.pending_deliveries().unwrap(), 2);
}

/// Case 34: records and cursors survive closing and reopening the database.
#[test]
fn history_and_cursors_survive_reopen() {
    let t = TestStore::new();
    assert_eq!(append_ok(&t.store, &plain(&["a", "b"])), vec![0, 1]);
    t.store.commit("search", 2).unwrap();

    let t = t.reopen();
    let expected = BTreeMap::from([("search".to_owned(), 2)]);
    assert_eq!(t.store.cursors().unwrap(), expected);
    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(bodies(&page), ["a", "b"]);
    assert_eq!((page.next_offset, page.lag), (2, 0));
}

/// Case 35: offsets are monotonic and a repeated key deduplicates.
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

// ---------------------------------------------------------------------------------------------
// Reads, commits and cursors: Part A 8-9 and input validation
// ---------------------------------------------------------------------------------------------

/// Part A 8: reading from beyond `next_offset` is an invalid offset.
#[test]
fn read_beyond_next_offset_is_invalid_offset() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    let err = t.store.read_now(Some(4), None).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InvalidOffset {
                offset: 4,
                next_offset: 3
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code(), "invalid_offset");

    let fresh = TestStore::new();
    let err = fresh.store.read_now(Some(1), None).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InvalidOffset {
                offset: 1,
                next_offset: 0
            }
        ),
        "{err:?}"
    );
}

/// Reading from exactly `next_offset` is not an error: an empty page that echoes `from`.
#[test]
fn read_at_next_offset_is_an_empty_page() {
    let t = TestStore::new();
    let empty = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(
        empty,
        Page {
            records: vec![],
            next_offset: 0,
            lag: 0
        }
    );

    append_ok(&t.store, &plain(&["a", "b", "c"]));
    let page = t.store.read_now(Some(3), None).unwrap();
    assert!(page.records.is_empty());
    assert_eq!((page.next_offset, page.lag), (3, 0));
}

/// Without `from`, a read starts at the oldest readable offset.
#[test]
fn read_without_from_starts_at_the_oldest_offset() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b"]));
    let page = t.store.read_now(None, None).unwrap();
    assert_eq!(bodies(&page), ["a", "b"]);
    assert_eq!(page.records[0].offset, 0);
}

/// A zero limit is refused; a limit above `max_batch_size` is capped to it, as is the default.
#[test]
fn read_limit_must_be_positive_and_is_capped_at_max_batch_size() {
    let t = TestStore::with(|o| o.max_batch_size(2));
    append_ok(&t.store, &plain(&["a", "b"]));
    append_ok(&t.store, &plain(&["c"]));

    let err = t.store.read_now(Some(0), Some(0)).unwrap_err();
    assert!(matches!(err, StoreError::InvalidLimit), "{err:?}");
    assert_eq!(err.code(), "invalid_request");

    let capped = t.store.read_now(Some(0), Some(50)).unwrap();
    assert_eq!(bodies(&capped), ["a", "b"]);
    assert_eq!((capped.next_offset, capped.lag), (2, 1));

    let default = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(default, capped, "the default limit is max_batch_size");

    let one = t.store.read_now(Some(1), Some(1)).unwrap();
    assert_eq!(bodies(&one), ["b"]);
    assert_eq!((one.next_offset, one.lag), (2, 1));
}

/// Part A 8: a commit beyond `next_offset` is an invalid offset and changes nothing (nor does it
/// poison the store); a commit of exactly `next_offset` is fine.
#[test]
fn commit_beyond_next_offset_is_invalid_offset_and_changes_nothing() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c"]));

    let err = t.store.commit("search", 4).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InvalidOffset {
                offset: 4,
                next_offset: 3
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code(), "invalid_offset");
    assert_eq!(t.store.cursor("search").unwrap(), None);
    assert!(t.store.cursors().unwrap().is_empty());

    t.store.commit("search", 1).unwrap();
    let err = t.store.commit("search", 10).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::InvalidOffset {
                offset: 10,
                next_offset: 3
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        t.store.cursor("search").unwrap(),
        Some(1),
        "the cursor kept its value"
    );

    assert!(!t.store.is_poisoned(), "a definite error does not poison");
    assert_eq!(
        t.store.commit("search", 3).unwrap(),
        3,
        "committing next_offset is valid"
    );
    assert_eq!(append_ok(&t.store, &plain(&["d"])), vec![3]);
}

/// Part A 9: deleting a cursor removes it from the listing and the backlog, and a later commit
/// may start below where it was.
#[test]
fn deleted_cursor_stops_counting_and_may_restart_lower() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c", "d"]));
    t.store.commit("slow", 1).unwrap();
    t.store.commit("fast", 4).unwrap();
    assert_eq!(t.store.pending_deliveries().unwrap(), 3);

    assert!(
        t.store.delete_cursor("slow").unwrap(),
        "there was a cursor to delete"
    );
    assert!(!t.store.delete_cursor("slow").unwrap(), "it is gone now");
    assert_eq!(t.store.cursor("slow").unwrap(), None);
    assert_eq!(
        t.store.cursors().unwrap(),
        BTreeMap::from([("fast".to_owned(), 4)])
    );
    assert_eq!(
        t.store.pending_deliveries().unwrap(),
        0,
        "the deleted cursor no longer counts"
    );

    assert!(t.store.delete_cursor("fast").unwrap());
    assert_eq!(
        t.store.commit("fast", 2).unwrap(),
        2,
        "a lower commit is accepted after deletion"
    );
    assert_eq!(t.store.cursor("fast").unwrap(), Some(2));
    assert_eq!(t.store.pending_deliveries().unwrap(), 2);

    assert!(!t.store.delete_cursor("never-committed").unwrap());
}

/// Group names that break the naming rules are refused by every cursor operation, and refusing
/// them changes nothing.
#[test]
fn invalid_group_names_are_refused() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a"]));
    for name in ["", "a b"] {
        let err = t.store.commit(name, 1).unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidName(_)),
            "commit {name:?}: {err:?}"
        );
        assert_eq!(err.code(), "invalid_name");
        let err = t.store.cursor(name).unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidName(_)),
            "cursor {name:?}: {err:?}"
        );
        let err = t.store.delete_cursor(name).unwrap_err();
        assert!(
            matches!(err, StoreError::InvalidName(_)),
            "delete_cursor {name:?}: {err:?}"
        );
    }
    assert!(t.store.cursors().unwrap().is_empty());
    assert!(!t.store.is_poisoned());
    assert_eq!(
        t.store.commit("group-1.a_b:c", 1).unwrap(),
        1,
        "a name using every allowed sign"
    );
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
// Group commit (Part A 3)
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
// Durability across reopen (Part A 1)
// ---------------------------------------------------------------------------------------------

/// Reopening keeps records, cursors and the offset sequence: new appends continue from the old
/// next offset and old keys still deduplicate.
#[test]
fn reopen_keeps_records_cursors_and_sequence() {
    let t = TestStore::new();
    assert_eq!(
        append_ok(&t.store, &keyed(&[("k1", "a"), ("k2", "b")])),
        vec![0, 1]
    );
    assert_eq!(append_ok(&t.store, &plain(&["c"])), vec![2]);
    t.store.commit("search", 2).unwrap();

    let t = t.reopen();
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 3));
    assert_eq!(t.store.cursor("search").unwrap(), Some(2));
    assert_eq!(
        append_ok(&t.store, &keyed(&[("k2", "again"), ("k3", "d")])),
        vec![1, 3]
    );
    assert_eq!(append_ok(&t.store, &plain(&["e"])), vec![4]);

    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(bodies(&page), ["a", "b", "c", "d", "e"]);
    assert_eq!(t.store.pending_deliveries().unwrap(), 3);
}

// ---------------------------------------------------------------------------------------------
// Failed commits (Part A 4)
// ---------------------------------------------------------------------------------------------

/// A failed append commit is an `unavailable` storage error that leaves the store refusing
/// writes (reads still work); after a reopen the failed batch left nothing behind and appends
/// continue from the old next offset.
#[test]
fn failed_append_commit_poisons_until_reopen_and_writes_nothing() {
    let t = TestStore::new();
    assert_eq!(
        append_ok(&t.store, &keyed(&[("k1", "a"), ("k2", "b")])),
        vec![0, 1]
    );
    t.store.commit("search", 1).unwrap();

    t.store.fail_next_commit();
    let err = t
        .store
        .append(&keyed(&[("k3", "lost"), ("k4", "lost")]))
        .unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err:?}");
    assert_eq!(err.code(), "unavailable");
    assert!(err.is_uncertain());
    assert!(t.store.is_poisoned());

    let err = t.store.append(&plain(&["c"])).unwrap_err();
    assert!(matches!(err, StoreError::Poisoned), "{err:?}");
    assert_eq!(err.code(), "unavailable");
    let err = t.store.commit("search", 2).unwrap_err();
    assert!(matches!(err, StoreError::Poisoned), "{err:?}");
    let err = t.store.delete_cursor("search").unwrap_err();
    assert!(matches!(err, StoreError::Poisoned), "{err:?}");

    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(bodies(&page), ["a", "b"], "reads still work");
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 2));
    assert_eq!(t.store.cursor("search").unwrap(), Some(1));

    let t = t.reopen();
    assert!(!t.store.is_poisoned());
    assert_eq!(
        t.store.bounds().unwrap(),
        bounds(0, 0, 2),
        "the failed batch left nothing"
    );
    assert_eq!(t.store.cursor("search").unwrap(), Some(1));
    assert_eq!(
        append_ok(&t.store, &keyed(&[("k3", "c"), ("k1", "dup")])),
        vec![2, 0],
        "the failed batch's key k3 was never stored, k1 still is"
    );
    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(bodies(&page), ["a", "b", "c"]);
    assert_eq!(t.store.commit("search", 3).unwrap(), 3);
}

/// A failed cursor commit poisons the store too, and after a reopen the cursor is unchanged.
#[test]
fn failed_cursor_commit_poisons_and_keeps_the_old_cursor() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    t.store.commit("search", 1).unwrap();

    t.store.fail_next_commit();
    let err = t.store.commit("search", 3).unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err:?}");
    assert_eq!(err.code(), "unavailable");
    assert!(t.store.is_poisoned());
    assert_eq!(t.store.cursor("search").unwrap(), Some(1));

    let t = t.reopen();
    assert_eq!(t.store.cursor("search").unwrap(), Some(1));
    assert_eq!(t.store.commit("search", 3).unwrap(), 3);
}

/// A failed group commit fails every batch of the group; none of them is written.
#[test]
fn failed_group_commit_fails_every_batch() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a"]));

    t.store.fail_next_commit();
    let err = t
        .store
        .append_batches(&[plain(&["b"]), plain(&["c", "d"])])
        .unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err:?}");
    assert!(t.store.is_poisoned());

    let t = t.reopen();
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 1));
    let outcomes = t
        .store
        .append_batches(&[plain(&["b"]), plain(&["c", "d"])])
        .unwrap();
    assert_eq!(
        outcomes.into_iter().map(offsets_of).collect::<Vec<_>>(),
        [vec![1], vec![2, 3]]
    );
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
                self.records
                    .push((offset, record.key.clone(), record.payload.clone()));
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
            payload: body(text),
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
            .map(|record| (record.offset, record.key, record.payload))
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

/// Part A 4 under concurrency: once a commit has failed, no write may commit, including writes
/// that were already waiting for the writer when the failure happened. The fault is armed
/// before any thread starts, so the first transaction fails and every other write comes after
/// it and must be refused with `Poisoned`.
#[test]
fn writes_queued_behind_a_failed_commit_are_refused() {
    const THREADS: usize = 8;
    for round in 0..20 {
        let t = TestStore::new();
        t.store.fail_next_commit();
        let barrier = std::sync::Barrier::new(THREADS);
        let results: Vec<Result<AppendOutcome, StoreError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..THREADS)
                .map(|i| {
                    let (store, barrier) = (&t.store, &barrier);
                    scope.spawn(move || {
                        barrier.wait();
                        store.append(&plain(&[&format!("r{i}")]))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });

        let failed = results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::Sqlite(_))))
            .count();
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(StoreError::Poisoned)))
            .count();
        let committed = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(
            failed, 1,
            "round {round}: exactly the first write fails: {results:?}"
        );
        assert_eq!(
            (committed, refused),
            (0, THREADS - 1),
            "round {round}: writes after the failed commit must be refused, yet {committed} \
             committed (bounds now {:?})",
            t.store.bounds().unwrap()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The database file
// ---------------------------------------------------------------------------------------------

/// Part A 1: the partition's database file is in WAL mode and holds the whole log.
#[test]
fn database_file_is_in_wal_mode() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a"]));
    let conn = rusqlite::Connection::open(t.store.path()).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode.to_ascii_lowercase(), "wal");
    let records: i64 = conn
        .query_row("SELECT COUNT(*) FROM records", [], |row| row.get(0))
        .unwrap();
    assert_eq!(records, 1);
}

/// A database written by a newer schema version is refused, not opened.
#[test]
fn database_from_a_newer_version_is_refused() {
    let t = TestStore::new();
    let conn = rusqlite::Connection::open(t.store.path()).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);

    let err = LogStore::open(t.store.path(), t.options.clone()).unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found: 99, .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), "unavailable");
}

/// Partitions sharing one volume keep their own offsets, deduplication keys and cursors, and
/// a group of appends to several of them commits together.
#[test]
fn partitions_of_one_volume_are_independent_logs() {
    let dir = tempfile::tempdir().unwrap();
    let volume = Volume::open(dir.path().join("volume.sqlite"), SyncMode::Full).unwrap();
    let open = |topic: &str, partition: u32| {
        LogStore::open_in(&volume, topic, partition, StoreOptions::default(), true)
            .unwrap()
            .expect("created")
    };
    let (a, b, c) = (open("a", 0), open("a", 1), open("b", 0));
    assert_eq!(
        append_ok(&a, &keyed(&[("k", "a0"), ("j", "a1")])),
        vec![0, 1]
    );
    assert_eq!(append_ok(&b, &keyed(&[("k", "b0")])), vec![0]);
    assert_eq!(append_ok(&c, &plain(&["c0", "c1", "c2"])), vec![0, 1, 2]);
    // The same key is a duplicate in its own partition only.
    assert_eq!(append_ok(&a, &keyed(&[("k", "again")])), vec![0]);
    assert_eq!(append_ok(&b, &keyed(&[("j", "b1")])), vec![1]);
    assert_eq!(a.commit("g", 2).unwrap(), 2);
    assert_eq!(b.cursor("g").unwrap(), None);
    assert_eq!(bodies(&a.read_now(Some(0), None).unwrap()), ["a0", "a1"]);
    assert_eq!(bodies(&b.read_now(Some(0), None).unwrap()), ["b0", "b1"]);
    assert_eq!(c.bounds().unwrap(), bounds(0, 0, 3));
    // A partition that was never added is not there unless created.
    assert!(
        LogStore::open_in(&volume, "nobody", 0, StoreOptions::default(), false)
            .unwrap()
            .is_none()
    );
}

/// Records read back the same before and after the background index takes them in (more than
/// `INDEX_EVERY_ROWS` of them), and after the volume is reopened; keys still deduplicate and
/// the log's end is where it was.
#[test]
fn records_read_back_across_index_passes_and_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("volume.sqlite");
    let total = (INDEX_EVERY_ROWS + 500) as u64;
    {
        let volume = Volume::open(&path, SyncMode::Normal).unwrap();
        let open = |partition| {
            LogStore::open_in(&volume, "t", partition, StoreOptions::default(), true)
                .unwrap()
                .unwrap()
        };
        let (even, odd) = (open(0), open(1));
        for n in 0..total {
            let store = if n % 2 == 0 { &even } else { &odd };
            let record = NewRecord::keyed(format!("key-{n}"), format!("{n}"));
            append_ok(store, &[record]);
        }
        let records = read_all(&even, 100);
        assert_eq!(records.len() as u64, total / 2);
        assert!(
            records
                .iter()
                .enumerate()
                .all(|(i, r)| r.payload == format!("{}", 2 * i))
        );
        assert_eq!(append_ok(&odd, &keyed(&[("key-1", "dup")])), vec![0]);
    }
    let volume = Volume::open(&path, SyncMode::Normal).unwrap();
    let odd = LogStore::open_in(&volume, "t", 1, StoreOptions::default(), false)
        .unwrap()
        .expect("known after a reopen");
    assert_eq!(odd.bounds().unwrap(), bounds(0, 0, total / 2));
    assert_eq!(append_ok(&odd, &keyed(&[("key-3", "dup")])), vec![1]);
    assert_eq!(append_ok(&odd, &plain(&["new"])), vec![total / 2]);
    let records = read_all(&odd, 100);
    assert_eq!(records.len() as u64, total / 2 + 1);
    assert_eq!(records.last().unwrap().payload, body("new"));
}
