//! Retention without a cold tier: `trim` deletes the oldest hot records that break a limit, and
//! readers below the new oldest offset learn that they lost records (README: "Retention and the
//! cold tier", "Guarantees").

use durability::store::{NewRecord, Retention, StoreError};

use crate::common::{
    ReadNow, TestStore, append_ok, block_on, body, bounds, entries, expected, plain,
};

/// A store whose hot window is limited by `retention`, with the default batch size.
fn limited(retention: Retention) -> TestStore {
    TestStore::with(|options| options.retention(retention))
}

/// Trims, and asserts that it removed `removed` records and left exactly `kept` (offset and
/// payload) in the hot window, which nothing cold precedes.
#[track_caller]
fn assert_trim(t: &TestStore, removed: u64, kept: &[(u64, &str)]) {
    assert_eq!(block_on(t.store.trim()).unwrap(), removed);
    let (oldest, next) = (kept[0].0, kept[kept.len() - 1].0 + 1);
    assert_eq!(t.store.bounds().unwrap(), bounds(oldest, oldest, next));
    let page = t.store.read_now(Some(oldest), None).unwrap();
    assert_eq!(entries(&page), expected(kept));
}

/// Records appended longer ago than `max_age_ms` leave; younger ones stay.
#[test]
fn age_retention_removes_only_records_older_than_the_limit() {
    let t = limited(Retention {
        max_age_ms: Some(60_000),
        ..Retention::default()
    });
    append_ok(&t.store, &plain(&["a", "b"]));
    t.clock.advance(90_000);
    append_ok(&t.store, &plain(&["c"]));

    assert_trim(&t, 2, &[(2, "c")]);
}

/// `max_records` keeps the newest records and removes the oldest.
#[test]
fn count_retention_keeps_the_newest_records() {
    let t = limited(Retention {
        max_records: Some(2),
        ..Retention::default()
    });
    append_ok(&t.store, &plain(&["a", "b", "c", "d"]));

    assert_trim(&t, 2, &[(2, "c"), (3, "d")]);
}

/// A reader behind the oldest retained offset gets `Truncated` naming where it can
/// continue, and continuing there works.
#[test]
fn lagging_reader_learns_it_lost_records() {
    let t = limited(Retention {
        max_records: Some(1),
        ..Retention::default()
    });
    append_ok(&t.store, &plain(&["a", "b"]));
    assert_eq!(block_on(t.store.trim()).unwrap(), 1);

    let err = t.store.read_now(Some(0), None).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Truncated {
                requested_offset: 0,
                oldest_offset: 1
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.code(), "log_truncated");
    assert!(
        err.to_string().contains("oldest retained offset is 1"),
        "{err}"
    );

    let page = t.store.read_now(Some(1), None).unwrap();
    assert_eq!(entries(&page), expected(&[(1, "b")]));
}

/// Without retention limits `trim` removes nothing and answers 0.
#[test]
fn without_retention_trim_removes_nothing() {
    let t = TestStore::new();
    append_ok(&t.store, &plain(&["a", "b"]));

    assert_eq!(block_on(t.store.trim()).unwrap(), 0);
    let page = t.store.read_now(Some(0), None).unwrap();
    assert_eq!(entries(&page), expected(&[(0, "a"), (1, "b")]));
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 2));
}

/// An explicitly empty `Retention` is no limit: however old and many the records, `trim`
/// answers 0 and the bounds do not move.
#[test]
fn trim_with_no_limit_returns_zero() {
    let t = limited(Retention {
        max_age_ms: None,
        max_records: None,
        max_bytes: None,
    });
    for _ in 0..3 {
        append_ok(&t.store, &plain(&["a"; 100]));
    }
    t.clock.advance(365 * 24 * 3_600_000);

    assert_eq!(block_on(t.store.trim()).unwrap(), 0);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 300));
}

/// Without a cold tier, byte retention deletes the oldest records until the excess
/// is covered, and they are gone for readers.
#[test]
fn byte_retention_without_cold_storage_deletes() {
    let t = limited(Retention {
        max_bytes: Some(8),
        ..Retention::default()
    });
    // Each payload is `"xxxx"`: 6 bytes, 18 in all, 10 over the budget: two records leave.
    append_ok(&t.store, &plain(&["aaaa", "bbbb", "cccc"]));

    let removed = block_on(t.store.trim()).unwrap();
    assert!(removed > 0);
    assert_eq!(removed, 2);
    let after = t.store.bounds().unwrap();
    assert_eq!(after.oldest_offset, after.hot_offset);
    assert_eq!(after, bounds(2, 2, 3));

    let err = t.store.read_now(Some(0), None).unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Truncated {
                requested_offset: 0,
                oldest_offset: 2
            }
        ),
        "{err:?}"
    );
}

/// A trim larger than `max_batch_size` runs in several passes and removes everything
/// that breaks the limit.
#[test]
fn trim_spans_several_passes() {
    let t = TestStore::with(|options| {
        options.max_batch_size(2).retention(Retention {
            max_records: Some(1),
            ..Retention::default()
        })
    });
    append_ok(&t.store, &plain(&["a", "b"]));
    append_ok(&t.store, &plain(&["c", "d"]));
    append_ok(&t.store, &plain(&["e"]));

    assert_trim(&t, 4, &[(4, "e")]);
}

/// The offset sequence survives an empty hot window: after every record is trimmed and the
/// store is reopened, the next append continues from the old next offset, never reusing one.
#[test]
fn sequence_survives_an_empty_hot_window_across_reopen() {
    let t = limited(Retention {
        max_age_ms: Some(1_000),
        ..Retention::default()
    });
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    t.clock.advance(2_000);
    assert_eq!(block_on(t.store.trim()).unwrap(), 3);
    assert_eq!(t.store.bounds().unwrap(), bounds(3, 3, 3));

    let t = t.reopen();
    assert_eq!(
        t.store.bounds().unwrap(),
        bounds(3, 3, 3),
        "the empty log still ends at 3"
    );
    assert_eq!(append_ok(&t.store, &plain(&["d"])), vec![3]);
    let page = t.store.read_now(Some(3), None).unwrap();
    assert_eq!(entries(&page), expected(&[(3, "d")]));
    assert!(matches!(
        t.store.read_now(Some(0), None),
        Err(StoreError::Truncated {
            requested_offset: 0,
            oldest_offset: 3
        })
    ));
}

/// Deduplication lasts only while the keyed record is hot: once it is trimmed, the same key
/// appends a new record at a new offset.
#[test]
fn key_of_a_trimmed_record_appends_a_new_record() {
    let t = limited(Retention {
        max_records: Some(1),
        ..Retention::default()
    });
    let keyed = |text: &str| vec![NewRecord::keyed("k", body(text))];
    assert_eq!(append_ok(&t.store, &keyed("first")), vec![0]);
    assert_eq!(
        append_ok(&t.store, &keyed("again")),
        vec![0],
        "while hot, the key deduplicates"
    );
    append_ok(&t.store, &plain(&["x"]));
    assert_eq!(block_on(t.store.trim()).unwrap(), 1);

    assert_eq!(append_ok(&t.store, &keyed("second")), vec![2]);
    let page = t.store.read_now(Some(1), None).unwrap();
    assert_eq!(entries(&page), expected(&[(1, "x"), (2, "second")]));
    assert_eq!(page.records[1].key.as_deref(), Some("k"));
    assert_eq!(t.store.bounds().unwrap(), bounds(1, 1, 3));
}
