//! Helpers shared by the integration tests.

use std::path::PathBuf;
use std::sync::Arc;

use durability::clock::ManualClock;
use durability::store::{LogStore, Page, StoreError, StoreOptions};

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

/// Runs `future` to completion on a fresh single-threaded tokio runtime (actix's runtime),
/// for tests that are otherwise synchronous.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(future)
}

/// `LogStore::read` from synchronous tests.
pub trait ReadNow {
    /// Reads a page, blocking until it is complete.
    fn read_now(&self, from: Option<u64>, limit: Option<usize>) -> Result<Page, StoreError>;
}

impl ReadNow for LogStore {
    fn read_now(&self, from: Option<u64>, limit: Option<usize>) -> Result<Page, StoreError> {
        block_on(self.read(from, limit))
    }
}

/// The S3-compatible server the cold-tier tests use, started by `scripts/test`.
pub fn s3_endpoint() -> String {
    std::env::var("DURABILITY_TEST_S3_ENDPOINT").expect(
        "DURABILITY_TEST_S3_ENDPOINT is not set: run the tests with scripts/test, which starts \
         an S3-compatible server on 127.0.0.1",
    )
}

/// A new, empty bucket on the test S3 server, and the settings that reach it.
pub async fn fresh_s3_bucket() -> durability::cold::S3Settings {
    use std::sync::atomic::{AtomicU32, Ordering};
    static BUCKETS: AtomicU32 = AtomicU32::new(0);
    let settings = durability::cold::S3Settings {
        endpoint: s3_endpoint(),
        bucket: format!(
            "test-{}-{}",
            std::process::id(),
            BUCKETS.fetch_add(1, Ordering::Relaxed)
        ),
        // Not us-east-1: creating a bucket there sends a location constraint that S3 refuses.
        region: "eu-central-1".into(),
        access_key: "test".into(),
        secret_key: "test".into(),
        path_style: true,
    };
    s3::Bucket::create_with_path_style(
        &settings.bucket,
        settings.region().unwrap(),
        settings.credentials().unwrap(),
        s3::BucketConfiguration::default(),
    )
    .await
    .expect("create a bucket on the test S3 server");
    settings
}

// ---------------------------------------------------------------------------------------------
// Records and pages, for the retention and cold-tier tests
// ---------------------------------------------------------------------------------------------

/// The JSON text of the string `text` (the payload of a record whose body is `text`).
pub fn body(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// A batch of keyless records with these bodies.
pub fn plain(bodies: &[&str]) -> Vec<durability::store::NewRecord> {
    bodies
        .iter()
        .map(|text| durability::store::NewRecord::new(body(text)))
        .collect()
}

/// Appends `batch` and returns its offsets; panics on a rejection or an error.
pub fn append_ok(store: &LogStore, batch: &[durability::store::NewRecord]) -> Vec<u64> {
    match store.append(batch).expect("append") {
        durability::store::AppendOutcome::Appended { offsets } => offsets,
        durability::store::AppendOutcome::Rejected(rejection) => {
            panic!("expected an accepted append, got {rejection:?}")
        }
    }
}

/// `(offset, body)` of every record of a page, bodies decoded from their JSON text.
pub fn entries(page: &Page) -> Vec<(u64, String)> {
    page.records
        .iter()
        .map(|record| {
            let text = serde_json::from_str(&record.payload).expect("payload is a JSON string");
            (record.offset, text)
        })
        .collect()
}

/// `(offset, body)` pairs from literals, to compare with [`entries`].
pub fn expected(pairs: &[(u64, &str)]) -> Vec<(u64, String)> {
    pairs
        .iter()
        .map(|(offset, text)| (*offset, (*text).to_owned()))
        .collect()
}

/// Bounds `{oldest, hot, next}`, as the spec writes them.
pub fn bounds(oldest_offset: u64, hot_offset: u64, next_offset: u64) -> durability::store::Bounds {
    durability::store::Bounds {
        oldest_offset,
        hot_offset,
        next_offset,
    }
}

/// A `Log` over a temporary folder (no cold tier unless the test sets one); the folder is
/// removed on drop. Must be created inside an actix System (`#[actix::test]`).
pub struct TestLog {
    /// The open log.
    pub log: durability::Log,
    /// Its configuration.
    pub config: durability::Config,
    /// The temporary folder holding `data/` (and `cold/`), removed on drop.
    _dir: tempfile::TempDir,
}

impl TestLog {
    /// A log with the test configuration that `tune` adjusts.
    pub fn with(tune: impl FnOnce(&mut durability::Config)) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = durability::Config::for_tests(dir.path());
        tune(&mut config);
        let log = durability::Log::open(config.clone()).expect("open the log");
        Self {
            log,
            config,
            _dir: dir,
        }
    }

    /// The database file of a partition.
    pub fn partition_file(&self, topic: &str, partition: u32) -> PathBuf {
        self.config
            .storage
            .data_dir
            .join(topic)
            .join(format!("{partition}.sqlite"))
    }
}
