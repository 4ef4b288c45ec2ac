//! What a `LogStore` keeps: records, cursors and the offset sequence survive a reopen; a failed
//! commit leaves nothing behind and the store refuses writes until it is reopened; and the
//! database file is a WAL-mode SQLite volume of a known schema version, shared by independent
//! partitions and indexed in the background (README: "Guarantees", "Many partitions").

use std::collections::BTreeMap;

use durability::store::{
    AppendOutcome, INDEX_EVERY_ROWS, LogStore, NewRecord, StoreError, StoreOptions, SyncMode,
    Volume,
};

use super::{bodies, keyed, read_all};
use crate::common::{ReadNow, TestStore, append_ok, body, bounds, plain};

/// The offsets of an accepted append; panics on a rejection.
fn offsets_of(outcome: AppendOutcome) -> Vec<u64> {
    match outcome {
        AppendOutcome::Appended { offsets } => offsets,
        AppendOutcome::Rejected(rejection) => {
            panic!("expected an accepted append, got {rejection:?}")
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Durability across reopen
// ---------------------------------------------------------------------------------------------

/// Records and cursors survive closing and reopening the database.
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
// Failed commits
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

/// Under concurrency too: once a commit has failed, no write may commit, including writes
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

/// The store's volume file is in WAL mode and holds the whole log.
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
