//! Reads from a `LogStore`: a page holds at most `limit` records (capped at `max_batch_size`),
//! reports the lag it left behind and resumes from `next_offset`; reading starts at the oldest
//! offset by default and may not start beyond `next_offset` (`readRecords` in
//! `GET /openapi.json`).

use durability::store::{Page, StoreError};

use super::bodies;
use crate::common::{ReadNow, TestStore, append_ok, plain};

/// A limited read reports the lag left behind and resumes from `next_offset`.
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

/// Reading from beyond `next_offset` is an invalid offset.
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
