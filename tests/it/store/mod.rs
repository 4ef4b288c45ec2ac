//! `LogStore` against a real SQLite file, one module per behaviour:
//!
//! - [`appends`]: contiguous offsets, deduplication by key, validation of batches, keys and
//!   payloads, group commit and concurrent writers, with a model-based property test;
//! - [`reads`]: pages, limits, lag and the readable range;
//! - [`cursors`]: consumer cursors, commits and the backlog;
//! - [`persistence`]: what survives a reopen, the "refuse writes after a failed commit" rule,
//!   and the database file itself.
//!
//! The helpers below are shared by several of them.

use durability::store::{LogStore, NewRecord, Page, Record};

use crate::common::{ReadNow, body};

mod appends;
mod cursors;
mod persistence;
mod reads;

/// A batch of keyed records: `(key, body)`.
fn keyed(records: &[(&str, &str)]) -> Vec<NewRecord> {
    records
        .iter()
        .map(|(key, text)| NewRecord::keyed(*key, body(text)))
        .collect()
}

/// The bodies of a page, decoded from their JSON text.
fn bodies(page: &Page) -> Vec<String> {
    page.records
        .iter()
        .map(|record| {
            serde_json::from_str(record.payload.as_json().expect("a JSON payload"))
                .expect("payload is a JSON string")
        })
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
