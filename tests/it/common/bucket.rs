//! The bucket as the tests see it, beside the nodes that replicate to it: an audit of what
//! they stored there, and a TCP proxy in front of it that can take it away or lose its answers.
//! The replication tests, the cluster's and the chaos test all use these.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use durability::cold::S3Settings;
use s3::Bucket;
use serde_json::{Value, json};

use super::Rng;
use super::process::{find, header};

/// The replica's objects are under this prefix (the default).
pub(crate) const PREFIX: &str = "replica";

/// Every key under `prefix`, sorted.
pub(crate) async fn keys_under(bucket: &Bucket, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = bucket
        .list(prefix.to_owned(), None)
        .await
        .expect("list the bucket")
        .into_iter()
        .flat_map(|page| page.contents)
        .map(|object| object.key)
        .collect();
    keys.sort();
    keys
}

/// The object `key`, as text.
pub(crate) async fn get_text(bucket: &Bucket, key: &str) -> String {
    let response = bucket.get_object(key).await.expect("GET");
    String::from_utf8(response.to_vec()).expect("UTF-8")
}

// ---------------------------------------------------------------------------------------------
// The bucket audit
// ---------------------------------------------------------------------------------------------

/// What [`audit_bucket`] found.
pub(crate) struct Audit {
    /// How many objects the replica holds.
    pub(crate) objects: usize,
    /// The text of the volumes object (the volume count).
    pub(crate) volumes_object: String,
    /// Each node incarnation's stream.
    pub(crate) streams: BTreeMap<(String, u64), StreamAudit>,
    /// Each volume's manifest.
    pub(crate) manifests: BTreeMap<usize, Value>,
}

impl Audit {
    /// How many volumes have a manifest.
    pub(crate) fn volumes_with_manifest(&self) -> usize {
        self.manifests.len()
    }
}

/// What [`audit_bucket`] found of one stream.
pub(crate) struct StreamAudit {
    /// How many windows it holds before its fence.
    pub(crate) windows: usize,
    /// The seq of the stream's fence, if sealed.
    pub(crate) fenced_at: Option<u64>,
}

/// The nodes' `replication.max_puts_in_flight` (the default): a stream sealed at a window it
/// was storing may hold the windows stored at once with it after its fence.
const PUTS_IN_FLIGHT: u64 = 2;

/// Fences a take creates at once after one lost a race (twice the most windows in flight).
const FENCE_AHEAD: u64 = 32;

/// Lists every replica object and checks the invariants that hold whatever happened: each
/// stream's seqs run from 0 without a gap up to its fence, after which only windows stored at
/// once with the one it took the place of may follow, each window's header
/// names its own place, and each manifest's epoch is at least every epoch its volume's windows
/// were written with.
pub(crate) async fn audit_bucket(s3: &S3Settings) -> Audit {
    let bucket = bucket_of(s3);
    let keys = keys_under(&bucket, &format!("{PREFIX}/")).await;
    let mut volumes_object = None;
    let mut seqs: BTreeMap<(String, u64), BTreeSet<u64>> = BTreeMap::new();
    let mut manifests = BTreeMap::new();
    for key in &keys {
        let parts: Vec<&str> = key.split('/').collect();
        match parts.as_slice() {
            [PREFIX, "volumes"] => volumes_object = Some(get_text(&bucket, key).await),
            [PREFIX, "wal", node, inc, seq] => {
                let inc = inc.parse().unwrap_or_else(|_| panic!("{key}: incarnation"));
                let seq = seq.parse().unwrap_or_else(|_| panic!("{key}: seq"));
                seqs.entry(((*node).to_owned(), inc))
                    .or_default()
                    .insert(seq);
            }
            [PREFIX, "vol", volume, "manifest"] => {
                let volume: usize = volume.parse().unwrap_or_else(|_| panic!("{key}: volume"));
                let manifest: Value = serde_json::from_str(&get_text(&bucket, key).await)
                    .unwrap_or_else(|err| panic!("{key}: {err}"));
                manifests.insert(volume, manifest);
            }
            _ => {}
        }
    }
    let mut streams = BTreeMap::new();
    // The largest epoch each volume's windows were written with.
    let mut epochs: BTreeMap<u64, u64> = BTreeMap::new();
    for ((node, inc), seqs) in &seqs {
        let mut fenced_at = None;
        let mut windows = 0;
        for (expected, &seq) in seqs.iter().enumerate() {
            let key = format!("{PREFIX}/wal/{node}/{inc:010}/{seq:016}");
            let response = bucket
                .get_object(&key)
                .await
                .unwrap_or_else(|err| panic!("GET {key}: {err}"));
            let bytes = response.to_vec();
            if let Some(fence) = fenced_at {
                // A window stored at once with the one the fence took the place of, on no
                // history (its writes were never acknowledged), or a fence of those a taker
                // creates at once after losing a race to a live writer.
                let stored_at_once = seq < fence + PUTS_IN_FLIGHT;
                let fenced_at_once =
                    seq < fence + FENCE_AHEAD && bytes.starts_with(b"DURABILITY-FENCE-1\n");
                assert!(
                    stored_at_once || fenced_at_once,
                    "{key}: an object after the stream's fence at {fence}"
                );
                continue;
            }
            assert_eq!(
                seq, expected as u64,
                "stream {node}/{inc}: seqs run from 0 without a gap up to its fence"
            );
            if bytes.starts_with(b"DURABILITY-FENCE-1\n") {
                fenced_at = Some(seq);
                continue;
            }
            let rest = bytes
                .strip_prefix(b"DURABILITY-WINDOW-1\n")
                .unwrap_or_else(|| panic!("{key}: neither a window nor a fence"));
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .unwrap_or_else(|| panic!("{key}: a window without a header line"));
            let header: Value = serde_json::from_slice(&rest[..end])
                .unwrap_or_else(|err| panic!("{key}: the header: {err}"));
            assert_eq!(
                (&header["node"], &header["inc"], &header["seq"]),
                (&json!(node), &json!(inc), &json!(seq)),
                "{key}: the header names the window's place"
            );
            for section in header["sections"].as_array().expect("sections") {
                let volume = section["volume"].as_u64().expect("a section's volume");
                let epoch = section["epoch"].as_u64().expect("a section's epoch");
                let largest = epochs.entry(volume).or_default();
                *largest = (*largest).max(epoch);
            }
            windows += 1;
        }
        streams.insert((node.clone(), *inc), StreamAudit { windows, fenced_at });
    }
    for (volume, epoch) in &epochs {
        let manifest = manifests
            .get(&(*volume as usize))
            .unwrap_or_else(|| panic!("volume {volume} has windows and no manifest"));
        let at = manifest["epoch"].as_u64().expect("a manifest's epoch");
        assert!(
            at >= *epoch,
            "volume {volume}: the manifest's epoch {at} is below a window's epoch {epoch}"
        );
    }
    Audit {
        objects: keys.len(),
        volumes_object: volumes_object.expect("the volumes object"),
        streams,
        manifests,
    }
}

/// A client of `s3`'s bucket.
pub(crate) fn bucket_of(s3: &S3Settings) -> Box<Bucket> {
    Bucket::new(
        &s3.bucket,
        s3.region().expect("region"),
        s3.credentials().expect("credentials"),
    )
    .expect("a bucket client")
    .with_path_style()
}

// ---------------------------------------------------------------------------------------------
// A TCP proxy to the bucket that can go down or lose answers
// ---------------------------------------------------------------------------------------------

/// A TCP proxy on 127.0.0.1 in front of the S3 server: a byte pipe per connection, which can be
/// taken down (every connection is cut, new ones are closed at once), can hold a window PUT
/// (`PUT …/wal/…`) holding given bytes back until told, and can lose the answers to a share of the window PUTs:
/// the request reaches the bucket, and the connection is cut as soon as the bucket starts
/// answering it, so the PUT landed but its sender saw only an error.
pub(crate) struct Proxy {
    addr: SocketAddr,
    /// Its knobs and counters, which the tests set and read.
    pub(crate) state: Arc<ProxyState>,
}

/// What a [`Proxy`]'s threads share.
#[derive(Default)]
pub(crate) struct ProxyState {
    upstream: String,
    down: AtomicBool,
    stopped: AtomicBool,
    /// Percent of window PUTs whose answer is lost.
    pub(crate) drop_percent: AtomicU64,
    /// Window PUTs seen, and answers lost.
    pub(crate) wal_puts: AtomicU64,
    /// Window GETs seen.
    pub(crate) wal_gets: AtomicU64,
    pub(crate) dropped: AtomicU64,
    /// Connections cut by the proxy going down.
    pub(crate) cut: AtomicU64,
    /// While set, every window PUT whose body holds these bytes (its retries too) is held:
    /// forwarded once this is cleared, dropped if the proxy goes down first. `holding` counts
    /// the PUTs held now, `held_target` is the path of the first.
    pub(crate) hold_containing: Mutex<Option<Vec<u8>>>,
    pub(crate) holding: AtomicU64,
    pub(crate) held_target: Mutex<Option<String>>,
    pub(crate) rng: Mutex<Option<Rng>>,
    /// Both sockets of every open connection, by number, to cut them when going down.
    live: Mutex<HashMap<u64, (TcpStream, TcpStream)>>,
    next_id: AtomicU64,
}

impl Proxy {
    /// A proxy to `endpoint` (`http://host:port`).
    pub(crate) fn start(endpoint: &str) -> Self {
        Self::start_on("127.0.0.1", endpoint)
    }

    /// A proxy to `endpoint` listening on address `host`.
    pub(crate) fn start_on(host: &str, endpoint: &str) -> Self {
        let upstream = endpoint
            .strip_prefix("http://")
            .expect("an http:// endpoint")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind((host, 0)).expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let state = Arc::new(ProxyState {
            upstream,
            rng: Mutex::new(Some(Rng::new(1))),
            ..ProxyState::default()
        });
        let accepting = state.clone();
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                if accepting.down.load(Ordering::Relaxed) {
                    let _ = client.shutdown(Shutdown::Both);
                    accepting.cut.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&accepting.upstream) else {
                    continue;
                };
                connect(&accepting, client, server);
            }
        });
        Self { addr, state }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Forwards the PUTs held, and holds no more.
    pub(crate) fn release(&self) {
        *self.state.hold_containing.lock().unwrap() = None;
    }

    /// Takes the proxy down (cutting every connection) or brings it back.
    pub(crate) fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
        if down {
            for (client, server) in self.state.live.lock().unwrap().values() {
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
                self.state.cut.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.set_down(true);
        // Wakes the accepting thread so that it sees `stopped`.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Pipes one connection both ways on two threads.
fn connect(state: &Arc<ProxyState>, client: TcpStream, server: TcpStream) {
    let id = state.next_id.fetch_add(1, Ordering::Relaxed);
    let (Ok(client_copy), Ok(server_copy)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    state
        .live
        .lock()
        .unwrap()
        .insert(id, (client_copy, server_copy));
    // Set when the answer to the request just forwarded is to be lost.
    let lose_answer = Arc::new(AtomicBool::new(false));
    let (Ok(client_in), Ok(server_out)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let requests = (state.clone(), lose_answer.clone());
    thread::spawn(move || {
        let (state, lose_answer) = requests;
        forward_requests(&state, client_in, server_out, &lose_answer);
        end(&state, id);
    });
    let answers = state.clone();
    thread::spawn(move || {
        forward_answers(&answers, server, client, &lose_answer);
        end(&answers, id);
    });
}

/// Cuts both sockets of connection `id`.
fn end(state: &ProxyState, id: u64) {
    if let Some((client, server)) = state.live.lock().unwrap().remove(&id) {
        let _ = client.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
    }
}

/// Client to bucket: request by request (the head up to its blank line, then `Content-Length`
/// bytes), deciding for each window PUT whether its answer is lost before forwarding it.
fn forward_requests(
    state: &ProxyState,
    mut from: TcpStream,
    mut to: TcpStream,
    lose_answer: &AtomicBool,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let head_end = loop {
            if let Some(at) = find(&buffer, b"\r\n\r\n") {
                break at + 4;
            }
            match from.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
        if header(&head, "transfer-encoding").is_some() {
            // Not expected from the S3 client; piped as is, without losing answers.
            let _ = to.write_all(&buffer);
            let _ = std::io::copy(&mut from, &mut to);
            return;
        }
        let length: usize = header(&head, "content-length")
            .and_then(|value| value.parse().ok())
            .unwrap_or(0);
        let total = head_end + length;
        while buffer.len() < total {
            match from.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
        let mut words = head.split_whitespace();
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        if method == "get" && target.contains("/wal/") {
            state.wal_gets.fetch_add(1, Ordering::Relaxed);
        }
        if method == "put" && target.contains("/wal/") {
            if holds(state, &buffer[head_end..total]) {
                state
                    .held_target
                    .lock()
                    .unwrap()
                    .get_or_insert(target.to_owned());
                let dropped = hold(state);
                state.holding.fetch_sub(1, Ordering::SeqCst);
                if dropped {
                    return;
                }
            }
            state.wal_puts.fetch_add(1, Ordering::Relaxed);
            let percent = state.drop_percent.load(Ordering::Relaxed);
            let mut rng = state.rng.lock().unwrap();
            let rng = rng.as_mut().expect("the proxy's generator");
            if percent > 0 && rng.below(100) < percent {
                lose_answer.store(true, Ordering::SeqCst);
            }
        }
        if to.write_all(&buffer[..total]).is_err() {
            return;
        }
        buffer.drain(..total);
    }
}

/// Whether a window PUT with `body` is to be held (it holds `hold_containing`); counted in
/// `holding` if so.
fn holds(state: &ProxyState, body: &[u8]) -> bool {
    let wanted = state.hold_containing.lock().unwrap();
    let found = wanted
        .as_deref()
        .is_some_and(|wanted| find(body, wanted).is_some());
    if found {
        state.holding.fetch_add(1, Ordering::SeqCst);
    }
    found
}

/// Waits until the held PUTs are released (false) or the proxy goes down (true: dropped).
fn hold(state: &ProxyState) -> bool {
    while state.hold_containing.lock().unwrap().is_some() {
        if state.down.load(Ordering::SeqCst) {
            return true;
        }
        thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Bucket to client, as bytes come; cuts the connection instead when the answer is to be lost
/// (the S3 client sends no request before it read the whole previous answer, so the first
/// bytes after a request was forwarded are its answer's) or the proxy is down.
fn forward_answers(
    state: &ProxyState,
    mut from: TcpStream,
    mut to: TcpStream,
    lose_answer: &AtomicBool,
) {
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if lose_answer.swap(false, Ordering::SeqCst) {
            state.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if state.down.load(Ordering::SeqCst) || to.write_all(&chunk[..n]).is_err() {
            return;
        }
    }
}
