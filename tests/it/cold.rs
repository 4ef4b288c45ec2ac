//! The cold tier against each backend: memory, a local folder, and a real S3 server.
//!
//! Every scenario is written once as an `async fn` taking the backend wrapped in a
//! [`FailingColdStore`], and `on_every_backend!` runs it against the in-memory store, an
//! [`FsColdStore`] in a temporary folder and an [`S3ColdStore`] on a fresh bucket of the test
//! S3 server (README: "Retention and the cold tier").

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use durability::cold::{
    ColdStep, ColdStore, ColdStoreError, FailingColdStore, FsColdStore, MemoryColdStore,
    PutOutcome, S3ColdStore, SegmentKey,
};
use durability::store::{ColdTier, LogStore, Retention, StoreError};

use crate::common::{TestStore, append_ok, bounds, entries, expected, fresh_s3_bucket, plain};

// ---------------------------------------------------------------------------------------------
// Backends and helpers
// ---------------------------------------------------------------------------------------------

/// One test's cold store, and whatever must live as long as the test (the fs folder).
struct Backend {
    /// The backend, wrapped so a scenario can make it fail.
    cold: Arc<FailingColdStore>,
    /// The folder of the fs backend, removed when the test ends.
    _folder: Option<tempfile::TempDir>,
}

impl Backend {
    fn wrap(inner: Arc<dyn ColdStore>, folder: Option<tempfile::TempDir>) -> Self {
        Self {
            cold: Arc::new(FailingColdStore::new(inner)),
            _folder: folder,
        }
    }

    /// A [`MemoryColdStore`].
    fn memory() -> Self {
        Self::wrap(Arc::new(MemoryColdStore::new()), None)
    }

    /// An [`FsColdStore`] in a new temporary folder.
    fn fs() -> Self {
        let folder = tempfile::tempdir().expect("temp dir");
        let store = FsColdStore::new(folder.path().join("cold"));
        Self::wrap(Arc::new(store), Some(folder))
    }

    /// An [`S3ColdStore`] on a new bucket of the test S3 server.
    async fn s3() -> Self {
        let store = S3ColdStore::new(&fresh_s3_bucket().await).expect("an S3 cold store");
        Self::wrap(Arc::new(store), None)
    }
}

/// Runs each named scenario against every backend: `scenario::{memory, fs, s3}`.
macro_rules! on_every_backend {
    ($($scenario:ident),+ $(,)?) => {$(
        #[doc = concat!("`", stringify!($scenario), "` against each cold backend.")]
        mod $scenario {
            use super::Backend;

            #[doc = concat!("`", stringify!($scenario), "` holds with the in-memory cold store.")]
            #[actix::test]
            async fn memory() {
                let backend = Backend::memory();
                super::$scenario(backend.cold.clone()).await;
            }

            #[doc = concat!("`", stringify!($scenario), "` holds with a local-folder cold store.")]
            #[actix::test]
            async fn fs() {
                let backend = Backend::fs();
                super::$scenario(backend.cold.clone()).await;
            }

            #[doc = concat!("`", stringify!($scenario), "` holds with the S3 cold store.")]
            #[actix::test]
            async fn s3() {
                let backend = Backend::s3().await;
                super::$scenario(backend.cold.clone()).await;
            }
        }
    )+};
}

/// The key prefix every scenario's partition writes under.
const PREFIX: &str = "segments";

/// The cold tier of partition `events:0` on `cold`.
fn tier(cold: &Arc<FailingColdStore>) -> ColdTier {
    ColdTier {
        store: cold.clone() as Arc<dyn ColdStore>,
        prefix: PREFIX.into(),
        topic: "events".into(),
        partition: 0,
    }
}

/// The key of the segment holding `first..=last` of partition `events:0`.
fn key(first: u64, last: u64) -> SegmentKey {
    SegmentKey::new(PREFIX, "events", 0, first, last)
}

/// A store flushing to `cold`, with these limits.
fn open(cold: &Arc<FailingColdStore>, max_batch_size: usize, retention: Retention) -> TestStore {
    TestStore::with(|options| {
        options
            .max_batch_size(max_batch_size)
            .retention(retention)
            .cold(tier(cold))
    })
}

/// At most `max` hot records.
fn max_records(max: u64) -> Retention {
    Retention {
        max_records: Some(max),
        ..Retention::default()
    }
}

/// Every segment key under the prefix, as the cold store lists it.
async fn listed(cold: &Arc<FailingColdStore>) -> Vec<SegmentKey> {
    cold.list(&format!("{PREFIX}/")).await.expect("list")
}

/// The `(first, last)` span of every listed segment, parsed from `.../{first:020}-{last:020}`.
async fn listed_spans(cold: &Arc<FailingColdStore>) -> Vec<(u64, u64)> {
    listed(cold)
        .await
        .iter()
        .map(|key| {
            let name = key.as_str().rsplit('/').next().expect("a key has a name");
            let (first, last) = name.split_once('-').expect("a segment name is first-last");
            assert_eq!((first.len(), last.len()), (20, 20), "{key}: zero-padded");
            (first.parse().expect("first"), last.parse().expect("last"))
        })
        .collect()
}

/// `(offset, body)` of the records inside a stored segment object, read with plain JSON
/// tools (the format is documented so that an operator can).
fn segment_entries(object: &[u8]) -> Vec<(u64, String)> {
    let text = std::str::from_utf8(object).expect("a segment is UTF-8");
    let (header, body) = text.split_once('\n').expect("a header line");
    assert!(
        header.starts_with("durability-segment v1 sha256="),
        "{header}"
    );
    let body: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
    body["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|record| {
            let payload = record["payload"].as_str().expect("payload text");
            let text = serde_json::from_str(payload).expect("payload is a JSON string");
            (record["offset"].as_u64().expect("offset"), text)
        })
        .collect()
}

/// Trims a store holding `a`, `b`, `c` under `max_records(1)` and asserts that it worked
/// whole: `a` and `b` flushed as the one segment `0..=1` (never twice), all three still read.
async fn assert_abc_trimmed_to_one_segment(t: &TestStore, cold: &Arc<FailingColdStore>) {
    assert_eq!(t.store.trim().await.unwrap(), 2);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 2, 3));
    assert_eq!(
        listed_spans(cold).await,
        [(0, 1)],
        "one segment, stored once"
    );
    assert_eq!(
        read_all(&t.store, 100).await,
        expected(&[(0, "a"), (1, "b"), (2, "c")])
    );
}

/// Every record from offset 0 as `(offset, body)`, page by page with pages of at most
/// `limit`, checking that pages chain and that the log ends empty.
async fn read_all(store: &LogStore, limit: usize) -> Vec<(u64, String)> {
    let mut all = Vec::new();
    let mut from = 0;
    loop {
        let page = store.read(Some(from), Some(limit)).await.expect("read");
        assert!(page.records.len() <= limit, "a page holds at most `limit`");
        if page.records.is_empty() {
            assert_eq!(page.next_offset, from, "an empty page echoes `from`");
            return all;
        }
        from = page.next_offset;
        all.extend(entries(&page));
    }
}

/// Asserts that `result` is truncation at `requested` with reading possible from `oldest`.
fn assert_truncated<T: std::fmt::Debug>(
    result: Result<T, StoreError>,
    requested: u64,
    oldest: u64,
) {
    let err = result.expect_err("a truncated read");
    assert!(
        matches!(
            err,
            StoreError::Truncated { requested_offset, oldest_offset }
                if requested_offset == requested && oldest_offset == oldest
        ),
        "expected Truncated {{ {requested}, {oldest} }}, got {err:?}"
    );
    assert_eq!(err.code(), "log_truncated");
}

// ---------------------------------------------------------------------------------------------
// Flushing and reading back: a segment is written before its hot rows go, and reads cross it
// ---------------------------------------------------------------------------------------------

/// A trim stores the expiring records (0,a),(1,b) as one segment, in order, before
/// deleting them, and reading them back returns exactly those records.
async fn flush_happens_before_deletion(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b", "c"]));

    assert_eq!(t.store.trim().await.unwrap(), 2);
    assert_eq!(listed(&cold).await, vec![key(0, 1)]);
    let object = cold.get(&key(0, 1)).await.unwrap().expect("the segment");
    assert_eq!(segment_entries(&object), expected(&[(0, "a"), (1, "b")]));
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 2, 3));

    let page = t.store.read(Some(0), Some(2)).await.unwrap();
    assert_eq!(entries(&page), expected(&[(0, "a"), (1, "b")]));
}
on_every_backend!(flush_happens_before_deletion);

/// When the segment cannot be written, trim fails with a cold-store error and every
/// record stays hot.
async fn failed_cold_write_keeps_records(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b"]));
    cold.fail_at(ColdStep::BeforeWrite);

    let err = t.store.trim().await.unwrap_err();
    assert!(matches!(err, StoreError::Cold(_)), "{err:?}");
    assert_eq!(err.code(), "unavailable");
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 2));
    assert!(listed(&cold).await.is_empty());
    let page = t.store.read(Some(0), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(0, "a"), (1, "b")]));
}
on_every_backend!(failed_cold_write_keeps_records);

/// 30 records trimmed to 1 in passes of 5 are flushed exactly once each: the listed
/// segments cover 0..=28 with no overlap and no gap, and the flushed records stay readable.
async fn each_record_flushed_exactly_once(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 5, max_records(1));
    let names: Vec<String> = (0..30).map(|n| format!("r{n}")).collect();
    for batch in names.chunks(5) {
        let batch: Vec<&str> = batch.iter().map(String::as_str).collect();
        append_ok(&t.store, &plain(&batch));
    }

    assert_eq!(t.store.trim().await.unwrap(), 29);
    let spans = listed_spans(&cold).await;
    assert_eq!(
        spans,
        [(0, 4), (5, 9), (10, 14), (15, 19), (20, 24), (25, 28)]
    );
    let mut seen = BTreeSet::new();
    for (first, last) in &spans {
        for offset in *first..=*last {
            assert!(seen.insert(offset), "offset {offset} flushed twice");
        }
    }
    assert_eq!(seen, (0..=28).collect());
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 29, 30));

    let all = read_all(&t.store, 5).await;
    let want: Vec<(u64, String)> = (0..30).map(|n| (n, format!("r{n}"))).collect();
    assert_eq!(all, want);
}
on_every_backend!(each_record_flushed_exactly_once);

/// Records flushed for the byte budget stay readable from the cold tier.
async fn byte_budget_flush_stays_readable(cold: Arc<FailingColdStore>) {
    let t = open(
        &cold,
        100,
        Retention {
            max_bytes: Some(12),
            ..Retention::default()
        },
    );
    // Each payload is `"xxx"`: 5 bytes, 20 in all, 8 over the budget: two records leave.
    append_ok(&t.store, &plain(&["aaa", "bbb", "ccc", "ddd"]));

    let removed = t.store.trim().await.unwrap();
    assert!(removed > 0);
    let after = t.store.bounds().unwrap();
    assert_eq!(after.oldest_offset, 0);
    assert!(after.hot_offset > 0, "{after:?}");
    assert_eq!(after.hot_offset, removed);
    assert!(!listed(&cold).await.is_empty());

    let page = t.store.read(Some(0), None).await.unwrap();
    assert_eq!(entries(&page)[0], (0, "aaa".to_owned()));
    assert_eq!(
        entries(&page),
        expected(&[(0, "aaa"), (1, "bbb"), (2, "ccc"), (3, "ddd")])
    );
}
on_every_backend!(byte_budget_flush_stays_readable);

/// A page of cold records is followed by hot ones, and a page that starts
/// in cold storage continues into the hot window up to its limit.
async fn rehydrated_page_then_hot_page(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    assert_eq!(t.store.trim().await.unwrap(), 2);

    let cold_page = t.store.read(Some(0), Some(2)).await.unwrap();
    assert_eq!(entries(&cold_page), expected(&[(0, "a"), (1, "b")]));
    assert_eq!((cold_page.next_offset, cold_page.lag), (2, 1));

    let hot_page = t.store.read(Some(2), None).await.unwrap();
    assert_eq!(entries(&hot_page), expected(&[(2, "c")]));
    assert_eq!((hot_page.next_offset, hot_page.lag), (3, 0));

    let whole = t.store.read(Some(0), Some(10)).await.unwrap();
    assert_eq!(entries(&whole), expected(&[(0, "a"), (1, "b"), (2, "c")]));
    assert_eq!((whole.next_offset, whole.lag), (3, 0));
}
on_every_backend!(rehydrated_page_then_hot_page);

/// A read from a cold segment continues into the hot window;
/// after the segment is forgotten, reading below the hot window is truncation.
async fn forgetting_segments_truncates(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b"]));
    assert_eq!(t.store.trim().await.unwrap(), 1);
    assert_eq!(listed_spans(&cold).await, [(0, 0)]);

    let page = t.store.read(Some(0), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(0, "a"), (1, "b")]));

    assert_eq!(t.store.forget_cold_before(1).unwrap(), 1);
    assert_eq!(t.store.bounds().unwrap(), bounds(1, 1, 2));
    assert_truncated(t.store.read(Some(0), None).await, 0, 1);
    assert_eq!(
        listed_spans(&cold).await,
        [(0, 0)],
        "forgetting leaves the object to the store's lifecycle"
    );
}
on_every_backend!(forgetting_segments_truncates);

/// A segment object that disappeared from the cold store is truncation, not an
/// empty page or a jump forward.
async fn lost_cold_object_truncates(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b"]));
    assert_eq!(t.store.trim().await.unwrap(), 1);

    let keys = listed(&cold).await;
    assert_eq!(keys.len(), 1);
    for key in &keys {
        cold.delete(key).await.unwrap();
    }
    assert!(listed(&cold).await.is_empty());

    assert_truncated(t.store.read(Some(0), None).await, 0, 1);
    let page = t.store.read(Some(1), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(1, "b")]));
}
on_every_backend!(lost_cold_object_truncates);

/// 150 rounds of (append, trim) with batches of 1 leave 149 one-record segments,
/// each readable; forgetting all of them truncates.
async fn many_one_record_segments(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 1, max_records(1));
    let mut removed = 0;
    for i in 0..150 {
        append_ok(&t.store, &plain(&[&format!("v{i}")]));
        removed += t.store.trim().await.unwrap();
    }
    assert_eq!(removed, 149);
    let spans = listed_spans(&cold).await;
    assert_eq!(spans.len(), 149);
    assert_eq!(spans, (0..149).map(|n| (n, n)).collect::<Vec<_>>());
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 149, 150));

    let first = t.store.read(Some(0), None).await.unwrap();
    assert_eq!(entries(&first), expected(&[(0, "v0")]));
    let late = t.store.read(Some(140), None).await.unwrap();
    assert_eq!(entries(&late), expected(&[(140, "v140")]));

    assert_eq!(t.store.forget_cold_before(149).unwrap(), 149);
    assert_truncated(t.store.read(Some(0), None).await, 0, 149);
    let hot = t.store.read(Some(149), None).await.unwrap();
    assert_eq!(entries(&hot), expected(&[(149, "v149")]));
}
on_every_backend!(many_one_record_segments);

/// With a cold tier, a trim in several passes writes one segment per pass, and the
/// flushed records page back in order.
async fn trim_passes_flush_one_segment_each(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 2, max_records(1));
    append_ok(&t.store, &plain(&["a", "b"]));
    append_ok(&t.store, &plain(&["c", "d"]));
    append_ok(&t.store, &plain(&["e"]));

    assert_eq!(t.store.trim().await.unwrap(), 4);
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 4, 5));
    assert_eq!(listed_spans(&cold).await, [(0, 1), (2, 3)]);

    let page = t.store.read(Some(0), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(0, "a"), (1, "b")]));
    let page = t.store.read(Some(page.next_offset), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(2, "c"), (3, "d")]));
    let page = t.store.read(Some(page.next_offset), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(4, "e")]));
    assert_eq!((page.next_offset, page.lag), (5, 0));
}
on_every_backend!(trim_passes_flush_one_segment_each);

// ---------------------------------------------------------------------------------------------
// Faults: every step of a flush can fail, and nothing is lost or duplicated
// ---------------------------------------------------------------------------------------------

/// A write that failed before storing anything is simply retried by the next trim, and every
/// record is then readable exactly once, in order.
async fn failed_write_is_retried_after_recovery(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    cold.fail_at(ColdStep::BeforeWrite);
    assert!(matches!(t.store.trim().await, Err(StoreError::Cold(_))));
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 3));

    cold.recover();
    assert_abc_trimmed_to_one_segment(&t, &cold).await;
}
on_every_backend!(failed_write_is_retried_after_recovery);

/// A put that stored the object but reported failure (a lost acknowledgement) fails the trim
/// without removing anything; the retry finds the identical object, accepts it, and no span is
/// stored twice.
async fn lost_put_acknowledgement_is_accepted_on_retry(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    cold.fail_at(ColdStep::AfterWrite);

    let err = t.store.trim().await.unwrap_err();
    assert!(matches!(err, StoreError::Cold(_)), "{err:?}");
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 3));
    assert_eq!(listed_spans(&cold).await, [(0, 1)], "the object was stored");

    cold.recover();
    assert_abc_trimmed_to_one_segment(&t, &cold).await;
}
on_every_backend!(lost_put_acknowledgement_is_accepted_on_retry);

/// A storage failure after the segment was indexed and before the hot records were deleted
/// rolls both back and poisons the store; after a reopen the bounds are unchanged and the
/// retried trim accepts the already-stored object, leaving every record readable once.
async fn crash_after_indexing_rolls_back_and_retries(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    t.store.fail_next_trim_after_index();

    let err = t.store.trim().await.unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err:?}");
    assert!(t.store.is_poisoned());
    assert!(matches!(
        t.store.append(&plain(&["refused"])),
        Err(StoreError::Poisoned)
    ));
    assert_eq!(listed_spans(&cold).await, [(0, 1)], "the object is stored");

    let t = t.reopen();
    assert!(!t.store.is_poisoned());
    assert_eq!(
        t.store.bounds().unwrap(),
        bounds(0, 0, 3),
        "the index entry was rolled back with the delete"
    );
    assert_abc_trimmed_to_one_segment(&t, &cold).await;
}
on_every_backend!(crash_after_indexing_rolls_back_and_retries);

/// A segment object replaced by other bytes (one byte of its body changed) fails its checksum
/// and reads as truncation, never as data.
async fn damaged_segment_is_truncation(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b"]));
    assert_eq!(t.store.trim().await.unwrap(), 1);

    let stored = cold.get(&key(0, 0)).await.unwrap().expect("the segment");
    let payload = br#"\"a\""#;
    let at = stored
        .windows(payload.len())
        .position(|window| window == payload)
        .expect("the payload of record 0");
    let mut damaged = stored.clone();
    damaged[at + 2] = b'z';
    assert_eq!(damaged.len(), stored.len(), "same size, other bytes");
    cold.delete(&key(0, 0)).await.unwrap();
    assert_eq!(
        cold.put(&key(0, 0), &damaged).await.unwrap(),
        PutOutcome::Created
    );

    assert_truncated(t.store.read(Some(0), None).await, 0, 1);
    let page = t.store.read(Some(1), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(1, "b")]));
}
on_every_backend!(damaged_segment_is_truncation);

/// A cold store that cannot be reached for reads is an `unavailable` cold error, not
/// truncation; once it recovers, the same read returns the records.
async fn unreachable_cold_store_is_unavailable_not_truncation(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b"]));
    assert_eq!(t.store.trim().await.unwrap(), 1);
    cold.fail_at(ColdStep::Read);

    let err = t.store.read(Some(0), None).await.unwrap_err();
    assert!(matches!(err, StoreError::Cold(_)), "{err:?}");
    assert_eq!(err.code(), "unavailable");
    let hot = t.store.read(Some(1), None).await.unwrap();
    assert_eq!(entries(&hot), expected(&[(1, "b")]), "hot reads still work");

    cold.recover();
    let page = t.store.read(Some(0), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(0, "a"), (1, "b")]));
}
on_every_backend!(unreachable_cold_store_is_unavailable_not_truncation);

/// Paging through one segment fetches it once: after the first page the rest of the segment
/// is served from the segment cache, even while the cold store cannot be read.
async fn paging_through_a_segment_fetches_it_once(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b", "c", "d", "e"]));
    assert_eq!(t.store.trim().await.unwrap(), 4);
    let first = t.store.read(Some(0), Some(2)).await.unwrap();
    assert_eq!(entries(&first), expected(&[(0, "a"), (1, "b")]));

    cold.fail_at(ColdStep::Read);
    let second = t
        .store
        .read(Some(first.next_offset), Some(2))
        .await
        .unwrap();
    assert_eq!(entries(&second), expected(&[(2, "c"), (3, "d")]));
    let err = TestStore::reopen(t)
        .store
        .read(Some(0), None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Cold(_)),
        "a reopened store has no cache: {err:?}"
    );
}
on_every_backend!(paging_through_a_segment_fetches_it_once);

/// With the cold store entirely down, appends and hot reads keep working while trim fails
/// and removes nothing; after recovery the trim completes.
async fn cold_store_down_keeps_the_hot_window_working(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a"]));
    cold.go_down();

    assert_eq!(append_ok(&t.store, &plain(&["b", "c"])), vec![1, 2]);
    let page = t.store.read(Some(0), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(0, "a"), (1, "b"), (2, "c")]));
    let err = t.store.trim().await.unwrap_err();
    assert!(matches!(err, StoreError::Cold(_)), "{err:?}");
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 3));
    assert!(listed(&cold).await.is_empty());
    assert_eq!(append_ok(&t.store, &plain(&["d"])), vec![3]);

    cold.recover();
    assert_eq!(t.store.trim().await.unwrap(), 3);
    assert_eq!(
        read_all(&t.store, 100).await,
        expected(&[(0, "a"), (1, "b"), (2, "c"), (3, "d")])
    );
}
on_every_backend!(cold_store_down_keeps_the_hot_window_working);

/// An object with other contents already under a segment's key is never overwritten: trim
/// fails with a conflict and deletes no hot record.
async fn foreign_object_under_segment_key_is_a_conflict(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b"]));
    assert_eq!(
        cold.put(&key(0, 0), b"someone else's object")
            .await
            .unwrap(),
        PutOutcome::Created
    );

    let err = t.store.trim().await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Cold(ColdStoreError::Conflict { key: conflict })
            if *conflict == key(0, 0).to_string()),
        "{err:?}"
    );
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 2));
    assert_eq!(
        cold.get(&key(0, 0)).await.unwrap().as_deref(),
        Some(&b"someone else's object"[..]),
        "the foreign object is untouched"
    );
    let page = t.store.read(Some(0), None).await.unwrap();
    assert_eq!(entries(&page), expected(&[(0, "a"), (1, "b")]));
}
on_every_backend!(foreign_object_under_segment_key_is_a_conflict);

// ---------------------------------------------------------------------------------------------
// Leftovers: what a crash left unindexed is removed, what the index names never is
// ---------------------------------------------------------------------------------------------

/// The locators of the indexed segments, read from the volume's `segments` table.
fn indexed_locators(t: &TestStore) -> BTreeSet<String> {
    let conn = rusqlite::Connection::open(t.store.path()).expect("open the volume");
    let mut statement = conn
        .prepare("SELECT locator FROM segments")
        .expect("a segments table");
    statement
        .query_map([], |row| row.get(0))
        .expect("query the segments")
        .collect::<Result<_, _>>()
        .expect("locators")
}

/// Asserts that the cold store holds exactly the segments that the index names.
async fn assert_cold_holds_only_indexed(t: &TestStore, cold: &Arc<FailingColdStore>) {
    let stored: BTreeSet<String> = listed(cold).await.iter().map(|k| k.to_string()).collect();
    assert_eq!(
        stored,
        indexed_locators(t),
        "stored objects vs indexed segments"
    );
}

/// A store whose pass 0..=1 (5 records, 3 kept) was stored in the cold tier and then failed
/// before it was indexed, as a crash there would; set to keep 1 record once reopened, so its
/// next pass takes 0..=3, a range that overlaps the leftover and has another key.
async fn crashed_after_put(cold: &Arc<FailingColdStore>) -> TestStore {
    let mut t = open(cold, 100, max_records(3));
    append_ok(&t.store, &plain(&["a", "b", "c", "d", "e"]));
    t.store.fail_next_trim_after_put();
    let err = t.store.trim().await.unwrap_err();
    assert!(matches!(err, StoreError::Sqlite(_)), "{err:?}");
    assert_eq!(listed_spans(cold).await, [(0, 1)], "stored, not indexed");
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 0, 5));
    t.options.retention = max_records(1);
    t
}

/// The five records every leftover scenario appends.
fn five() -> Vec<(u64, String)> {
    expected(&[(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e")])
}

/// A segment stored but never indexed (a crash between the two) is removed by the first trim
/// after the restart, although that trim flushes an overlapping range under another key: the
/// cold store then holds exactly the indexed segments, and every record reads back once, in
/// order, with no gap.
async fn unindexed_upload_is_removed_after_a_crash(cold: Arc<FailingColdStore>) {
    let t = crashed_after_put(&cold).await.reopen();
    assert_eq!(t.store.trim().await.unwrap(), 4);
    assert_eq!(listed_spans(&cold).await, [(0, 3)]);
    assert_cold_holds_only_indexed(&t, &cold).await;
    assert_eq!(t.store.bounds().unwrap(), bounds(0, 4, 5));
    assert_eq!(read_all(&t.store, 100).await, five());
}
on_every_backend!(unindexed_upload_is_removed_after_a_crash);

/// A leftover whose removal fails (the cold store refuses deletes) neither fails the trim nor
/// is forgotten: the trim flushes as usual, and the next trim after the store recovers removes
/// the leftover.
async fn failed_leftover_removal_is_retried(cold: Arc<FailingColdStore>) {
    let t = crashed_after_put(&cold).await.reopen();
    cold.fail_at(ColdStep::Delete);
    assert_eq!(t.store.trim().await.unwrap(), 4);
    assert_eq!(
        listed_spans(&cold).await,
        [(0, 1), (0, 3)],
        "not removed yet"
    );

    cold.recover();
    assert_eq!(t.store.trim().await.unwrap(), 0);
    assert_eq!(listed_spans(&cold).await, [(0, 3)]);
    assert_cold_holds_only_indexed(&t, &cold).await;
    assert_eq!(read_all(&t.store, 100).await, five());
}
on_every_backend!(failed_leftover_removal_is_retried);

/// Removing leftovers never deletes a segment that the index names, even when an upload
/// record names it too (written here by hand, as a bug might): after a restart and a trim the
/// indexed segment is still stored and read, while a stray object that only an upload record
/// names is removed, and so are both records.
async fn indexed_segment_is_never_removed(cold: Arc<FailingColdStore>) {
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    assert_eq!(t.store.trim().await.unwrap(), 2);
    assert_eq!(
        cold.put(&key(5, 9), b"a stray upload").await.unwrap(),
        PutOutcome::Created
    );
    let conn = rusqlite::Connection::open(t.store.path()).expect("open the volume");
    for stored in [key(0, 1), key(5, 9)] {
        conn.execute(
            "INSERT INTO cold_uploads (partition, locator) VALUES ((SELECT id FROM partitions), ?1)",
            [stored.as_str()],
        )
        .expect("record an upload");
    }
    drop(conn);

    let t = t.reopen();
    assert_eq!(t.store.trim().await.unwrap(), 0);
    assert_eq!(listed(&cold).await, vec![key(0, 1)]);
    assert_cold_holds_only_indexed(&t, &cold).await;
    assert_eq!(
        read_all(&t.store, 100).await,
        expected(&[(0, "a"), (1, "b"), (2, "c")])
    );
    let conn = rusqlite::Connection::open(t.store.path()).expect("open the volume");
    let records: u64 = conn
        .query_row("SELECT count(*) FROM cold_uploads", [], |row| row.get(0))
        .expect("count upload records");
    assert_eq!(records, 0, "both upload records are settled");
}
on_every_backend!(indexed_segment_is_never_removed);

/// Every file under `folder`, as a path relative to it with `/` separators.
fn files_in(folder: &Path) -> BTreeSet<String> {
    crate::common::files_under(folder)
        .into_iter()
        .filter(|path| path.is_file())
        .map(|path| {
            let relative = path.strip_prefix(folder).expect("under the folder");
            relative.to_string_lossy().replace('\\', "/")
        })
        .collect()
}

/// What SIGKILLs during trims leave in a cold folder, all removed after a restart: the
/// unindexed segment, the temporary file a killed put left next to it, and a temporary file an
/// earlier process left elsewhere. The folder then holds exactly the indexed segments and no
/// temporary file, and every record reads back once.
#[actix::test]
async fn fs_leftovers_of_killed_trims_are_removed() {
    let folder = tempfile::tempdir().expect("temp dir");
    let root = folder.path().join("cold");
    let cold = Arc::new(FailingColdStore::new(Arc::new(FsColdStore::new(&root))));
    let mut t = crashed_after_put(&cold).await;
    let partial = root.join(PREFIX).join("events/0").join(format!(
        ".tmp-{}-4242-0",
        key(0, 1).as_str().rsplit('/').next().unwrap()
    ));
    std::fs::write(&partial, b"a segment cut short").unwrap();
    let elsewhere = root.join(PREFIX).join("events/7");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let stray = elsewhere.join(".tmp-00000000000000000010-00000000000000000019-4242-3");
    std::fs::write(&stray, b"another").unwrap();

    // The restarted process: a new store over the same folder.
    let restarted = Arc::new(FailingColdStore::new(Arc::new(FsColdStore::new(&root))));
    t.options.cold = Some(tier(&restarted));
    let t = t.reopen();
    assert_eq!(t.store.trim().await.unwrap(), 4);

    assert_eq!(files_in(&root), indexed_locators(&t));
    assert_eq!(listed_spans(&restarted).await, [(0, 3)]);
    assert_eq!(read_all(&t.store, 100).await, five());
}

/// A trim dropped in the middle of its flush (its caller went away) leaves its segment stored
/// and unindexed, the file work going on without it; the store's next trim, which flushes a
/// longer range, removes that segment: the folder then holds exactly the indexed segments.
#[actix::test]
async fn fs_trim_dropped_mid_flush_leaves_nothing_behind() {
    use futures_util::FutureExt;

    let folder = tempfile::tempdir().expect("temp dir");
    let root = folder.path().join("cold");
    let cold = Arc::new(FailingColdStore::new(Arc::new(FsColdStore::new(&root))));
    let t = open(&cold, 100, max_records(1));
    append_ok(&t.store, &plain(&["a", "b", "c"]));
    assert!(
        t.store.trim().now_or_never().is_none(),
        "the flush waits for its file work, and is dropped there"
    );
    // The file work runs on in the blocking pool: wait until it has stored the segment.
    let stored = BTreeSet::from([key(0, 1).to_string()]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while files_in(&root) != stored {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            files_in(&root)
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }

    append_ok(&t.store, &plain(&["d", "e"]));
    assert_eq!(t.store.trim().await.unwrap(), 4);
    assert_eq!(files_in(&root), indexed_locators(&t));
    assert_eq!(listed_spans(&cold).await, [(0, 3)]);
    assert_eq!(read_all(&t.store, 100).await, five());
}

// ---------------------------------------------------------------------------------------------
// The backends on their own
// ---------------------------------------------------------------------------------------------

/// The folder store creates only (a second put leaves the first content), reads a missing key
/// as `None`, lists keys sorted by offset under a prefix, and leaves no temporary file behind.
#[actix::test]
async fn fs_put_is_create_only_sorted_and_leaves_no_temporary_files() {
    let folder = tempfile::tempdir().expect("temp dir");
    let store = FsColdStore::new(folder.path());
    let late = SegmentKey::new(PREFIX, "events", 0, 100, 100);
    let early = SegmentKey::new(PREFIX, "events", 0, 9, 99);
    let other = SegmentKey::new(PREFIX, "events", 1, 0, 0);
    let elsewhere = SegmentKey::new("archive", "events", 0, 0, 0);

    for key in [&late, &other, &early, &elsewhere] {
        assert_eq!(
            store.put(key, key.as_str().as_bytes()).await.unwrap(),
            PutOutcome::Created
        );
    }
    assert_eq!(
        store.put(&late, b"second").await.unwrap(),
        PutOutcome::AlreadyExists
    );
    assert_eq!(
        store.get(&late).await.unwrap().as_deref(),
        Some(late.as_str().as_bytes()),
        "the first content stays"
    );
    let missing = SegmentKey::new(PREFIX, "events", 0, 101, 101);
    assert_eq!(store.get(&missing).await.unwrap(), None);
    assert_eq!(
        store.list(&format!("{PREFIX}/")).await.unwrap(),
        vec![early.clone(), late.clone(), other.clone()]
    );
    assert_eq!(
        store.list("").await.unwrap(),
        vec![
            elsewhere.clone(),
            early.clone(),
            late.clone(),
            other.clone()
        ]
    );

    let mut temporaries = Vec::new();
    collect_temporaries(folder.path(), &mut temporaries);
    assert!(temporaries.is_empty(), "left behind: {temporaries:?}");

    store.delete(&late).await.unwrap();
    store.delete(&late).await.unwrap();
    assert_eq!(store.get(&late).await.unwrap(), None);
}

/// Every file under `folder` whose name marks it as a temporary file of a put.
fn collect_temporaries(folder: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(folder).expect("read dir") {
        let entry = entry.expect("dir entry");
        let path = entry.path();
        if path.is_dir() {
            collect_temporaries(&path, found);
        } else if entry.file_name().to_string_lossy().starts_with(".tmp") {
            found.push(path);
        }
    }
}

/// The S3 store creates only: a second put of the same key leaves the first object, and a
/// missing key reads as `None`.
#[actix::test]
async fn s3_put_is_create_only() {
    let store: Arc<dyn ColdStore> = Arc::new(S3ColdStore::new(&fresh_s3_bucket().await).unwrap());
    let key = SegmentKey::new("segments", "events", 0, 0, 1);
    assert_eq!(
        store.put(&key, b"first").await.unwrap(),
        PutOutcome::Created
    );
    assert_eq!(
        store.put(&key, b"second").await.unwrap(),
        PutOutcome::AlreadyExists
    );
    assert_eq!(
        store.get(&key).await.unwrap().as_deref(),
        Some(&b"first"[..])
    );
    let missing = SegmentKey::new("segments", "events", 0, 2, 3);
    assert_eq!(store.get(&missing).await.unwrap(), None);
    assert_eq!(store.list("segments/").await.unwrap(), vec![key.clone()]);
    store.delete(&key).await.unwrap();
    assert_eq!(store.get(&key).await.unwrap(), None);
}
