//! Helpers shared by the integration tests.

use std::path::PathBuf;
use std::sync::Arc;

use durability::clock::ManualClock;
use durability::store::{LogStore, StoreOptions};

/// The time every test clock starts at (as in the original library's tests).
pub const START_MS: i64 = 1_800_000_000_000;

/// A `LogStore` in a temporary folder with a manual clock; the folder is removed on drop.
pub struct TestStore {
    /// The open store.
    pub store: LogStore,
    /// Moves the store's time.
    pub clock: ManualClock,
    /// The options it was opened with (used to reopen).
    pub options: StoreOptions,
    dir: tempfile::TempDir,
}

impl TestStore {
    /// A fresh store with `max_batch_size` 100.
    pub fn new() -> Self {
        Self::with(|options| options)
    }

    /// A fresh store whose options `tune` adjusts.
    pub fn with(tune: impl FnOnce(StoreOptions) -> StoreOptions) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let clock = ManualClock::new(START_MS);
        let options = tune(StoreOptions::default().clock(Arc::new(clock.clone())));
        let store = LogStore::open(Self::db_path(&dir), options.clone()).expect("open store");
        Self {
            store,
            clock,
            options,
            dir,
        }
    }

    /// Closes the store and opens the same file again, as a restarted process would.
    pub fn reopen(self) -> Self {
        let Self {
            store,
            clock,
            options,
            dir,
        } = self;
        drop(store);
        let store = LogStore::open(Self::db_path(&dir), options.clone()).expect("reopen store");
        Self {
            store,
            clock,
            options,
            dir,
        }
    }

    fn db_path(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("events-0.sqlite")
    }
}
