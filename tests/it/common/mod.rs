//! Helpers shared by the integration tests.

use std::path::PathBuf;
use std::sync::Arc;

use durability::clock::ManualClock;
use durability::store::{LogStore, Page, StoreError, StoreOptions};

pub mod bucket;
pub mod cluster;
/// etcd members on 127.0.0.1, for the cluster tests and the etcd client's unit tests.
pub mod etcd;
pub mod pki;
pub mod process;
mod rng;
pub mod routes;

pub use rng::Rng;
// `tests/soak.rs` includes these helpers too, and sends no request to a route.
#[allow(unused_imports)]
pub use routes::{Route, route, routes};

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

/// Held by a test that counts this process's open file descriptors, and by tests that open
/// many sockets of their own (proxies): the count is process-wide, and tests run in threads of
/// one process.
pub fn fd_count_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// The S3-compatible server the cold-tier tests use: the one `scripts/test` started
/// (`DURABILITY_TEST_S3_ENDPOINT`), or else one this test process starts for itself with
/// `scripts/s3-server` (installing it on first use), which dies with the process.
pub fn s3_endpoint() -> String {
    static ENDPOINT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ENDPOINT
        .get_or_init(|| {
            std::env::var("DURABILITY_TEST_S3_ENDPOINT").unwrap_or_else(|_| start_s3_server())
        })
        .clone()
}

/// Starts `scripts/s3-server` on a free port and waits until it listens.
fn start_s3_server() -> String {
    use std::os::unix::process::CommandExt;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/s3-server");
    let mut command = std::process::Command::new(&script);
    command
        .arg(port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: prctl only asks the kernel to kill the child when this process dies.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    // PR_SET_PDEATHSIG follows the thread that spawned the child, so that thread lives as long
    // as this process.
    let (spawned, child) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = spawned.send(command.spawn());
        loop {
            std::thread::park();
        }
    });
    let mut child = child
        .recv()
        .expect("the spawning thread answers")
        .unwrap_or_else(|err| panic!("cannot start {}: {err}", script.display()));
    // Long enough for a first run to install moto.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{} stopped ({status}) before listening", script.display());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the S3 server did not listen within 300 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Dies with this process (above); the handle is not needed.
    std::mem::forget(child);
    format!("http://127.0.0.1:{port}")
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
            let text = serde_json::from_str(record.payload.as_json().expect("a JSON payload"))
                .expect("payload is a JSON string");
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

    /// Whether a partition is stored on disk (in the catalog of one of the volumes).
    pub fn stores(&self, topic: &str, partition: u32) -> bool {
        stored_partitions(&self.config.storage.data_dir).contains(&(topic.to_owned(), partition))
    }
}

/// Every partition stored in the volumes of `data_dir`, read from their files.
pub fn stored_partitions(data_dir: &std::path::Path) -> std::collections::BTreeSet<(String, u32)> {
    let mut found = std::collections::BTreeSet::new();
    for path in files_under(data_dir) {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if !(name.starts_with("volume-") && name.ends_with(".sqlite")) {
            continue;
        }
        let conn = rusqlite::Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )
        .expect("open a volume");
        // A file whose schema was never written (a take of the volume cut short, or under way)
        // stores no partition.
        let Ok(mut statement) = conn.prepare("SELECT topic, partition FROM partitions") else {
            continue;
        };
        let rows = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("read the catalog");
        found.extend(rows.map(|row| row.expect("a catalog row")));
    }
    found
}

// ---------------------------------------------------------------------------------------------
// The REST server over a real socket, for the HTTP tests
// ---------------------------------------------------------------------------------------------

/// The REST server (`durability::http::service`) listening on an ephemeral port of 127.0.0.1,
/// serving a [`TestLog`], with a small HTTP/1.1 client (one `Connection: close` request per
/// connection, run on the blocking pool so the test's event loop keeps serving the partitions).
/// Must be created inside an actix System (`#[actix::test]`); call [`TestServer::stop`] at the
/// end of the test.
pub struct TestServer {
    /// The log it serves (and its configuration and folder).
    pub log: TestLog,
    /// Where it listens.
    pub addr: std::net::SocketAddr,
    /// The bearer token the helpers send, if any.
    pub token: Option<String>,
    handle: actix_web::dev::ServerHandle,
}

impl TestServer {
    /// A server over a log with the test configuration that `tune` adjusts.
    pub fn start(tune: impl FnOnce(&mut durability::Config)) -> Self {
        let log = TestLog::with(tune);
        let served = log.log.clone();
        let server = actix_web::HttpServer::new(move || {
            actix_web::App::new().configure(durability::http::service(served.clone()))
        })
        .workers(1)
        .disable_signals()
        .shutdown_timeout(1)
        .bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0");
        let addr = server.addrs()[0];
        process::speak_plain_to(addr);
        let server = server.run();
        let handle = server.handle();
        actix_web::rt::spawn(server);
        Self {
            log,
            addr,
            token: None,
            handle,
        }
    }

    /// Stops the server (its worker threads end with it).
    pub async fn stop(self) {
        self.handle.stop(false).await;
    }

    /// `GET path` with the server's token: status and JSON body (`Null` when empty).
    pub async fn get(&self, path: &str) -> (u16, serde_json::Value) {
        self.send("GET", path, None, self.token.as_deref()).await
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.send("POST", path, Some(&body.to_string()), self.token.as_deref())
            .await
    }

    /// `PUT path` with a JSON body.
    pub async fn put(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.send("PUT", path, Some(&body.to_string()), self.token.as_deref())
            .await
    }

    /// `DELETE path`.
    pub async fn delete(&self, path: &str) -> (u16, serde_json::Value) {
        self.send("DELETE", path, None, self.token.as_deref()).await
    }

    /// Any request: `body` is sent as is (with its `Content-Length`), `token` as
    /// `Authorization: Bearer <token>`.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        token: Option<&str>,
    ) -> (u16, serde_json::Value) {
        let addr = self.addr;
        let mut request =
            format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        if let Some(token) = token {
            request.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        let body = body.unwrap_or("");
        if !body.is_empty() || method != "GET" {
            request.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        request.push_str("\r\n");
        request.push_str(body);
        actix_web::rt::task::spawn_blocking(move || http_exchange(addr, &request))
            .await
            .expect("the client task")
    }
}

/// Sends `request`, a whole HTTP/1.1 request, on a fresh connection (see
/// [`process::exchange`]): the status, and the body as JSON (a string when it is not JSON,
/// `Null` when empty). Panics when the exchange fails.
pub fn http_exchange(addr: std::net::SocketAddr, request: &str) -> (u16, serde_json::Value) {
    let (status, _, body) = process::exchange(addr, request)
        .unwrap_or_else(|err| panic!("an exchange with the test server: {err}"));
    let value = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&body).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&body).into_owned())
        })
    };
    (status, value)
}

/// Every file and folder under `dir`, recursively (to check that a refused request created
/// nothing on disk).
pub fn files_under(dir: &std::path::Path) -> std::collections::BTreeSet<PathBuf> {
    let mut found = std::collections::BTreeSet::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path.clone());
            }
            found.insert(path);
        }
    }
    found
}

/// Sends `request` to an in-process service (`actix_web::test::init_service`): status and JSON
/// body (`Null` when empty, a JSON string when not JSON).
pub async fn respond<S, R, B>(app: &S, request: R) -> (u16, serde_json::Value)
where
    S: actix_web::dev::Service<
            R,
            Response = actix_web::dev::ServiceResponse<B>,
            Error = actix_web::Error,
        >,
    B: actix_web::body::MessageBody,
{
    let response = actix_web::test::call_service(app, request).await;
    let status = response.status().as_u16();
    let bytes = actix_web::test::read_body(response).await;
    let value = if bytes.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| {
            serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned())
        })
    };
    (status, value)
}

/// Polls `check` every 10 ms until it holds or `within` passes (for timers that must fire by
/// themselves); returns whether it held.
pub async fn eventually(within: std::time::Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        actix::clock::sleep(std::time::Duration::from_millis(10)).await;
    }
    check().await
}
