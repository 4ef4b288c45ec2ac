//! The bucket is checked before it is trusted: the real `durability` binary, as a child
//! process, over the test S3 server (moto), sometimes through a proxy that strips the
//! `If-None-Match` and `If-Match` headers of every request (as a careless gateway does).
//!
//! - a replicated server refuses to start on a bucket that ignores conditional writes, saying
//!   which it ignores, and starts on the same bucket reached directly;
//! - `--check-config --check-bucket` runs the same probe and says the same;
//! - a bucket that does not exist is named, with the request and S3's code and message,
//!   never with S3's XML, by the server and by the cold store alike.

use std::io::BufRead;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use durability::cold::{ColdStore, S3ColdStore, S3Settings, SegmentKey};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::common::bucket::{bucket_of, keys_under};
use crate::common::process::{Server, replication_env, request};
use crate::common::{block_on, fd_count_lock, fresh_s3_bucket, s3_endpoint};

/// What a refused start or check says of a bucket behind the stripping proxy, after its name.
const IGNORES_BOTH: &str = "does not honour If-None-Match (a create-only PUT over an existing \
                            object succeeded) nor If-Match (a PUT naming a stale ETag \
                            succeeded): a replicated log needs conditional writes to fence a \
                            previous owner";

/// A server replicating to a bucket behind a proxy that strips `If-None-Match` and `If-Match`
/// refuses to start, naming the bucket and both conditions, and writes nothing of its own
/// there; the same bucket reached directly is accepted and served.
#[test]
fn a_bucket_that_ignores_conditional_writes_is_refused_at_start() {
    let _alone = fd_count_lock();
    let s3 = block_on(fresh_s3_bucket());
    let proxy = StrippingProxy::start(&s3.endpoint);
    let dir = tempfile::tempdir().expect("temp dir");

    let refused = run(dir.path(), &[], &replication_env(&s3, &proxy.url(), "a"));
    assert_eq!(refused.code, Some(1), "the server stops: {refused:?}");
    assert!(
        refused
            .stderr
            .contains(&format!("bucket {} {IGNORES_BOTH}", s3.bucket)),
        "{refused:?}"
    );
    assert_eq!(
        refused.stderr.matches("does not honour").count(),
        1,
        "{refused:?}"
    );
    assert!(
        proxy.stripped() >= 3,
        "the proxy stripped the probe's conditions"
    );
    assert_eq!(
        block_on(keys_under(&bucket_of(&s3), "")),
        Vec::<String>::new(),
        "nothing is claimed, and the probe object is deleted"
    );

    let server = Server::start(
        &dir.path().join("direct"),
        replication_env(&s3, &s3.endpoint, "a")
            .into_iter()
            .chain([("RUST_LOG", "warn")]),
    );
    let healthy = request(server.addr, "GET", "/healthz", None).expect("the server answers");
    assert_eq!(healthy.0, 200, "{healthy:?}");
    assert!(
        block_on(keys_under(&bucket_of(&s3), "")).contains(&"replica/volumes".to_owned()),
        "the server claimed the bucket"
    );
}

/// `--check-config --check-bucket` runs the start's probe: through the stripping proxy it
/// exits 2 with the same sentence (`--check-config` alone does not reach the bucket, and says
/// the configuration is valid), and against the S3 server itself it exits 0 saying that the
/// bucket honours both conditions.
#[test]
fn check_bucket_runs_the_probe_and_says_the_outcome() {
    let _alone = fd_count_lock();
    let s3 = block_on(fresh_s3_bucket());
    let proxy = StrippingProxy::start(&s3.endpoint);
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy_url = proxy.url();
    let through_proxy = replication_env(&s3, &proxy_url, "a");
    let check = ["--check-config", "--check-bucket"];

    let refused = run(dir.path(), &check, &through_proxy);
    assert_eq!(refused.code, Some(2), "{refused:?}");
    assert!(
        refused
            .stderr
            .contains(&format!("error: bucket {} {IGNORES_BOTH}", s3.bucket)),
        "{refused:?}"
    );
    assert!(!refused.stdout.contains("is valid"), "{refused:?}");
    assert!(proxy.stripped() >= 3);

    let stripped = proxy.stripped();
    let unchecked = run(dir.path(), &["--check-config"], &through_proxy);
    assert_eq!(unchecked.code, Some(0), "{unchecked:?}");
    assert!(
        unchecked.stdout.contains("configuration is valid"),
        "{unchecked:?}"
    );
    assert_eq!(
        proxy.stripped(),
        stripped,
        "--check-config alone sends nothing"
    );

    let passed = run(dir.path(), &check, &replication_env(&s3, &s3.endpoint, "a"));
    assert_eq!(passed.code, Some(0), "{passed:?}");
    assert!(
        passed.stdout.contains(&format!(
            "configuration is valid\nbucket {} honours conditional writes (If-None-Match and \
             If-Match)",
            s3.bucket
        )),
        "{passed:?}"
    );
    assert_eq!(
        block_on(keys_under(&bucket_of(&s3), "")),
        Vec::<String>::new(),
        "the check leaves nothing in the bucket"
    );
    assert!(
        !dir.path().join("data").exists(),
        "checking creates no data folder"
    );
}

/// A bucket that does not exist: a replicated server's start, `--check-config --check-bucket`
/// and the cold store each say so once, in a sentence naming the request, its key and the
/// bucket, with S3's code and message, and no XML.
#[test]
fn a_bucket_that_does_not_exist_is_named_without_xml() {
    let absent = S3Settings {
        endpoint: s3_endpoint(),
        bucket: format!("absent-{}", std::process::id()),
        region: "eu-central-1".into(),
        access_key: "test".into(),
        secret_key: "test".into(),
        path_style: true,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let env = replication_env(&absent, &absent.endpoint, "a");
    let said = format!(
        "in bucket {} failed: status 404, NoSuchBucket: The specified bucket does not exist",
        absent.bucket
    );

    for args in [&[][..], &["--check-config", "--check-bucket"]] {
        let failed = run(dir.path(), args, &env);
        assert!(
            !matches!(failed.code, Some(0) | None),
            "{args:?}: {failed:?}"
        );
        assert!(
            failed.stderr.contains("S3 PUT of replica/probe/a-") && failed.stderr.contains(&said),
            "{args:?}: {failed:?}"
        );
        assert!(!failed.stderr.contains('<'), "{args:?}: {failed:?}");
        assert_eq!(
            failed.stderr.matches("NoSuchBucket").count(),
            1,
            "said once: {args:?}: {failed:?}"
        );
    }

    let store = S3ColdStore::new(&absent).expect("a client");
    let listed = block_on(store.list("cold/")).expect_err("no bucket to list");
    assert_eq!(listed.to_string(), format!("S3 LIST of cold/ {said}"));
    let key = SegmentKey::new("cold", "t", 0, 0, 9);
    let put = block_on(store.put(&key, b"segment")).expect_err("no bucket to write");
    assert_eq!(put.to_string(), format!("S3 PUT of {key} {said}"));
}

// ---------------------------------------------------------------------------------------------
// Running the binary
// ---------------------------------------------------------------------------------------------

/// How a run of the binary ended: its exit code (`None`: it was still running after
/// [`RUN_LIMIT`] and was stopped) and what it wrote.
#[derive(Debug)]
struct Exited {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// The longest a run that should exit by itself is given.
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// Runs the binary with `args` and `env` (logging warnings), over a data folder in `dir`
/// that it may not create, until it exits.
fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Exited {
    let mut child = Command::new(env!("CARGO_BIN_EXE_durability"))
        .args(args)
        .env("DURABILITY__SERVER__BIND", "127.0.0.1:0")
        .env("DURABILITY__STORAGE__DATA_DIR", dir.join("data"))
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the binary");
    let drain = |pipe: Box<dyn std::io::Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            for line in std::io::BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                text.push_str(&line);
                text.push('\n');
            }
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + RUN_LIMIT;
    let code = loop {
        if let Some(status) = child.try_wait().expect("the child's status") {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(20));
    };
    Exited {
        code,
        stdout: stdout.join().expect("stdout"),
        stderr: stderr.join().expect("stderr"),
    }
}

// ---------------------------------------------------------------------------------------------
// A proxy that strips the conditions of every request
// ---------------------------------------------------------------------------------------------

/// An HTTP/1.1 proxy on 127.0.0.1 in front of the S3 server that forwards every request
/// without its `If-None-Match` and `If-Match` headers, on keep-alive connections: each request
/// is read as its head, then `Content-Length` bytes of body; answers are copied back as they
/// come. It runs on a thread of its own, stopped (every connection closed) when dropped.
struct StrippingProxy {
    addr: SocketAddr,
    /// Headers removed so far.
    stripped: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl StrippingProxy {
    /// A proxy to `endpoint` (`http://host:port`).
    fn start(endpoint: &str) -> Self {
        let upstream = endpoint
            .strip_prefix("http://")
            .expect("an http:// endpoint")
            .trim_end_matches('/')
            .to_owned();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let stripped = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let counted = stripped.clone();
        let thread = thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("the proxy's runtime");
            // Dropping the runtime afterwards drops every connection's tasks and sockets.
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("the proxy's listener");
                tokio::select! {
                    () = accept(listener, upstream, counted) => {}
                    _ = stopped => {}
                }
            });
        });
        Self {
            addr,
            stripped,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `If-None-Match` and `If-Match` headers removed so far.
    fn stripped(&self) -> u64 {
        self.stripped.load(Ordering::SeqCst)
    }
}

impl Drop for StrippingProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves each connection to `listener` on a task of its own, through a connection to
/// `upstream`.
async fn accept(listener: tokio::net::TcpListener, upstream: String, stripped: Arc<AtomicU64>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        let (upstream, stripped) = (upstream.clone(), stripped.clone());
        tokio::spawn(async move {
            let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                return;
            };
            let (from_client, to_client) = client.into_split();
            let (from_server, to_server) = server.into_split();
            tokio::spawn(copy_answers(from_server, to_client));
            let _ = forward_requests(from_client, to_server, &stripped).await;
        });
    }
}

/// Server to client, as bytes come; the client's side is closed when the server's is.
async fn copy_answers(mut from: OwnedReadHalf, mut to: OwnedWriteHalf) {
    let _ = tokio::io::copy(&mut from, &mut to).await;
    let _ = to.shutdown().await;
}

/// Client to server, request by request: the head line by line without `If-None-Match` and
/// `If-Match` (counted in `stripped`), then the body's `Content-Length` bytes as they are. A
/// chunked body (which the S3 client does not send) is piped as is, with the rest of the
/// connection.
async fn forward_requests(
    from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    stripped: &AtomicU64,
) -> std::io::Result<()> {
    let mut from = BufReader::new(from);
    loop {
        let mut head = Vec::new();
        let (mut length, mut chunked) = (0u64, false);
        loop {
            let mut line = Vec::new();
            if from.read_until(b'\n', &mut line).await? == 0 {
                return Ok(());
            }
            let end = line == b"\r\n" || line == b"\n";
            let text = String::from_utf8_lossy(&line).to_ascii_lowercase();
            if let Some((name, value)) = text.split_once(':') {
                match name.trim() {
                    "if-none-match" | "if-match" => {
                        stripped.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "transfer-encoding" => chunked = true,
                    _ => {}
                }
            }
            head.extend_from_slice(&line);
            if end {
                break;
            }
        }
        to.write_all(&head).await?;
        if chunked {
            tokio::io::copy(&mut from, &mut to).await?;
            return Ok(());
        }
        let copied = tokio::io::copy(&mut (&mut from).take(length), &mut to).await?;
        if copied < length {
            return Ok(());
        }
    }
}
