//! etcd's v3 API through its JSON gateway (HTTP/1.1 + JSON, base64 keys and values): membership
//! and ownership need a handful of calls, and the gateway keeps protoc out of the build.
//!
//! The gateway encodes int64 fields as JSON strings and omits every field that holds its zero
//! value (`false`, `0`, empty), so each answer field below defaults when absent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::Stream;
use reqwest::header::CONTENT_TYPE;
use reqwest::{Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::keys::{KeyFuture, KeyStore, WatchStream};

/// A client of an etcd cluster; clones share the connection pool and the current endpoint.
#[derive(Clone)]
pub(crate) struct Etcd {
    client: reqwest::Client,
    endpoints: Arc<[String]>,
    /// Index in `endpoints` of the endpoint that answered last.
    current: Arc<AtomicUsize>,
    request_timeout: Duration,
}

/// Why a request to etcd failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint answered, or none could serve (no leader): the cluster is out of reach.
    #[error("etcd unreachable: {0}")]
    Unreachable(String),
    /// etcd answered with an error, or with something this client does not understand.
    #[error("etcd: {0}")]
    Failed(String),
}

pub(crate) type LeaseId = i64;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct KeyValue {
    #[serde(deserialize_with = "base64_string")]
    pub key: String,
    #[serde(default, deserialize_with = "base64_bytes")]
    pub value: Vec<u8>,
    /// 0 when the key is not under a lease.
    #[serde(default, deserialize_with = "int64")]
    pub lease: LeaseId,
    #[serde(default, deserialize_with = "int64")]
    pub mod_revision: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WatchEvent {
    Put(KeyValue),
    /// The deleted key.
    Delete(String),
}

/// Sent with every request: etcd then refuses requests at once (503) on a member that has lost
/// its leader, instead of letting them wait, and ends the watches it serves. Without it, a
/// watch on a member cut off from the rest of the cluster stays open and silent forever.
const REQUIRE_LEADER: (&str, &str) = ("Grpc-Metadata-hasleader", "true");

impl Etcd {
    /// `endpoints`: base URLs like `http://127.0.0.1:2379`; each request goes to the endpoint that
    /// answered last, and on a connection failure or timeout tries the next ones once each (as
    /// it does when an endpoint answers that it has no leader).
    pub(crate) fn new(endpoints: Vec<String>, request_timeout: Duration) -> Self {
        let client = reqwest::Client::builder()
            // Watches stay open for as long as nothing happens, so only TCP keepalive notices
            // that their peer is gone without a word (host down, network cut).
            .tcp_keepalive(request_timeout)
            .tcp_keepalive_interval(request_timeout)
            .tcp_keepalive_retries(3)
            .build()
            .expect("the HTTP client's TLS backend failed to initialise");
        let endpoints = endpoints
            .into_iter()
            .map(|endpoint| endpoint.trim_end_matches('/').to_owned())
            .collect();
        Self {
            client,
            endpoints,
            current: Arc::new(AtomicUsize::new(0)),
            request_timeout,
        }
    }

    pub(crate) async fn grant(&self, ttl: Duration) -> Result<LeaseId, EtcdError> {
        #[derive(Deserialize)]
        struct Granted {
            #[serde(rename = "ID", deserialize_with = "int64")]
            id: LeaseId,
        }
        let seconds = (ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0)).max(1);
        let granted: Granted = self
            .call("/v3/lease/grant", &json!({ "TTL": seconds }))
            .await?;
        Ok(granted.id)
    }

    /// Keeps the lease alive once: Ok(false) when etcd no longer knows it (expired or revoked).
    pub(crate) async fn keep_alive(&self, lease: LeaseId) -> Result<bool, EtcdError> {
        #[derive(Deserialize)]
        struct KeptAlive {
            result: Remaining,
        }
        #[derive(Deserialize)]
        struct Remaining {
            /// Absent (0) when the lease is unknown.
            #[serde(rename = "TTL", default, deserialize_with = "int64")]
            ttl: i64,
        }
        let kept: KeptAlive = self
            .call("/v3/lease/keepalive", &json!({ "ID": lease.to_string() }))
            .await?;
        Ok(kept.result.ttl > 0)
    }

    /// Ok also when etcd no longer knows the lease: its keys are gone either way.
    pub(crate) async fn revoke(&self, lease: LeaseId) -> Result<(), EtcdError> {
        let (status, answer) = self
            .post("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))
            .await?;
        if status.is_success() || status == StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(failure(status, &answer))
        }
    }

    /// Puts key = value (under `lease` when not 0) only if the key does not exist; true when it
    /// was created.
    pub(crate) async fn create(
        &self,
        key: &str,
        value: &[u8],
        lease: LeaseId,
    ) -> Result<bool, EtcdError> {
        let absent = json!({
            "key": STANDARD.encode(key),
            "target": "CREATE",
            "create_revision": "0",
        });
        let put = json!({ "request_put": put_request(key, value, lease) });
        self.txn(absent, put).await
    }

    /// Puts key = value (under `lease` when not 0) unconditionally.
    pub(crate) async fn put(
        &self,
        key: &str,
        value: &[u8],
        lease: LeaseId,
    ) -> Result<(), EtcdError> {
        let _: Value = self
            .call("/v3/kv/put", &put_request(key, value, lease))
            .await?;
        Ok(())
    }

    /// Deletes key only if it holds exactly `value`; true when deleted.
    pub(crate) async fn delete_if(&self, key: &str, value: &[u8]) -> Result<bool, EtcdError> {
        let key = STANDARD.encode(key);
        let holds = json!({
            "key": key,
            "target": "VALUE",
            "result": "EQUAL",
            "value": STANDARD.encode(value),
        });
        let delete = json!({ "request_delete_range": { "key": key } });
        self.txn(holds, delete).await
    }

    /// Every key starting with `prefix`, sorted by key, and the store's revision at the read.
    pub(crate) async fn prefix(&self, prefix: &str) -> Result<(Vec<KeyValue>, i64), EtcdError> {
        #[derive(Deserialize)]
        struct Range {
            header: Header,
            #[serde(default)]
            kvs: Vec<KeyValue>,
        }
        #[derive(Deserialize)]
        struct Header {
            #[serde(deserialize_with = "int64")]
            revision: i64,
        }
        let request = json!({
            "key": STANDARD.encode(prefix),
            "range_end": STANDARD.encode(range_end(prefix)),
            "sort_order": "ASCEND",
        });
        let range: Range = self.call("/v3/kv/range", &request).await?;
        Ok((range.kvs, range.header.revision))
    }

    /// Watches every key starting with `prefix` from `start_revision` on: a stream of batches of
    /// events; it ends (None) or yields Err when the connection drops — the caller reads `prefix`
    /// again and watches anew.
    ///
    /// `start_revision` is included: to follow a `prefix` read, pass its revision + 1. The
    /// stream also yields Err and ends when etcd cancels the watch, as it does when
    /// `start_revision` has been compacted away or the member lost its leader.
    pub(crate) fn watch(
        &self,
        prefix: &str,
        start_revision: i64,
    ) -> impl Stream<Item = Result<Vec<WatchEvent>, EtcdError>> + Send + 'static {
        enum State {
            Opening(Etcd, Value),
            Reading(Response, Vec<u8>),
            Done,
        }
        let request = json!({ "create_request": {
            "key": STANDARD.encode(prefix),
            "range_end": STANDARD.encode(range_end(prefix)),
            "start_revision": start_revision.to_string(),
        }});
        futures_util::stream::unfold(State::Opening(self.clone(), request), |state| async move {
            let (mut response, mut buffer) = match state {
                State::Opening(etcd, request) => match etcd.open_watch(&request).await {
                    Ok(response) => (response, Vec::new()),
                    Err(error) => return Some((Err(error), State::Done)),
                },
                State::Reading(response, buffer) => (response, buffer),
                State::Done => return None,
            };
            // The gateway streams one JSON object per line.
            loop {
                let line: Vec<u8> = match buffer.iter().position(|&byte| byte == b'\n') {
                    Some(end) => buffer.drain(..=end).collect(),
                    None => match response.chunk().await {
                        Ok(Some(chunk)) => {
                            buffer.extend_from_slice(&chunk);
                            continue;
                        }
                        // The last line, the error that ends a watch, has no newline.
                        Ok(None) if !buffer.trim_ascii().is_empty() => std::mem::take(&mut buffer),
                        Ok(None) => return None,
                        Err(error) => {
                            return Some((
                                Err(EtcdError::Unreachable(error.to_string())),
                                State::Done,
                            ));
                        }
                    },
                };
                match watch_events(&line) {
                    Ok(events) if events.is_empty() => {}
                    Ok(events) => return Some((Ok(events), State::Reading(response, buffer))),
                    Err(error) => return Some((Err(error), State::Done)),
                }
            }
        })
    }

    /// A transaction of one comparison and one operation done when it holds; true when it held.
    async fn txn(&self, compare: Value, success: Value) -> Result<bool, EtcdError> {
        #[derive(Deserialize)]
        struct Txn {
            #[serde(default)]
            succeeded: bool,
        }
        let txn: Txn = self
            .call(
                "/v3/kv/txn",
                &json!({ "compare": [compare], "success": [success] }),
            )
            .await?;
        Ok(txn.succeeded)
    }

    /// Posts `request` and decodes a successful answer.
    async fn call<T: DeserializeOwned>(&self, path: &str, request: &Value) -> Result<T, EtcdError> {
        let (status, answer) = self.post(path, request).await?;
        if !status.is_success() {
            return Err(failure(status, &answer));
        }
        serde_json::from_slice(&answer)
            .map_err(|error| EtcdError::Failed(format!("unexpected answer to {path}: {error}")))
    }

    /// Posts `request` and reads the whole answer, all within the request timeout.
    async fn post(&self, path: &str, request: &Value) -> Result<(StatusCode, Vec<u8>), EtcdError> {
        self.send(path, request, async |response: Response| {
            let status = response.status();
            Ok((status, response.bytes().await?.to_vec()))
        })
        .await
    }

    /// Opens a watch: only the answer's head must come within the request timeout.
    async fn open_watch(&self, request: &Value) -> Result<Response, EtcdError> {
        let response = self
            .send("/v3/watch", request, async |response: Response| {
                Ok(response)
            })
            .await?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let answer = response
            .bytes()
            .await
            .map_err(|error| EtcdError::Unreachable(error.to_string()))?;
        Err(failure(status, &answer))
    }

    /// Sends `request` to the endpoint that answered last, then to each other endpoint once while
    /// the connection fails, `receive` times out, or the endpoint has no leader (503: etcd
    /// refused the request without doing it, so trying elsewhere is safe).
    async fn send<T>(
        &self,
        path: &str,
        request: &Value,
        receive: impl AsyncFn(Response) -> reqwest::Result<T>,
    ) -> Result<T, EtcdError> {
        let body = request.to_string();
        let count = self.endpoints.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for index in (first..first + count).map(|index| index % count) {
            let endpoint = &self.endpoints[index];
            let attempt = async {
                let response = self
                    .client
                    .post(format!("{endpoint}{path}"))
                    .header(CONTENT_TYPE, "application/json")
                    .header(REQUIRE_LEADER.0, REQUIRE_LEADER.1)
                    .body(body.clone())
                    .send()
                    .await
                    .map_err(|error| error.to_string())?;
                let status = response.status();
                if status == StatusCode::SERVICE_UNAVAILABLE {
                    let answer = response.bytes().await.map_err(|error| error.to_string())?;
                    return Err(etcd_message(status, &answer));
                }
                receive(response).await.map_err(|error| error.to_string())
            };
            let failure = match tokio::time::timeout(self.request_timeout, attempt).await {
                Ok(Ok(answer)) => {
                    self.current.store(index, Ordering::Relaxed);
                    return Ok(answer);
                }
                Ok(Err(failure)) => failure,
                Err(_) => format!("no answer within {:?}", self.request_timeout),
            };
            log::warn!("etcd request {path} failed at {endpoint}: {failure}");
            failures.push(format!("{endpoint}: {failure}"));
        }
        Err(EtcdError::Unreachable(if failures.is_empty() {
            "no endpoints".to_owned()
        } else {
            failures.join("; ")
        }))
    }
}

/// The store a cluster runs on: each call is the inherent one above.
impl KeyStore for Etcd {
    fn grant(&self, ttl: Duration) -> KeyFuture<'_, LeaseId> {
        Box::pin(Etcd::grant(self, ttl))
    }

    fn keep_alive(&self, lease: LeaseId) -> KeyFuture<'_, bool> {
        Box::pin(Etcd::keep_alive(self, lease))
    }

    fn revoke(&self, lease: LeaseId) -> KeyFuture<'_, ()> {
        Box::pin(Etcd::revoke(self, lease))
    }

    fn create<'a>(&'a self, key: &'a str, value: &'a [u8], lease: LeaseId) -> KeyFuture<'a, bool> {
        Box::pin(Etcd::create(self, key, value, lease))
    }

    fn put<'a>(&'a self, key: &'a str, value: &'a [u8], lease: LeaseId) -> KeyFuture<'a, ()> {
        Box::pin(Etcd::put(self, key, value, lease))
    }

    fn delete_if<'a>(&'a self, key: &'a str, value: &'a [u8]) -> KeyFuture<'a, bool> {
        Box::pin(Etcd::delete_if(self, key, value))
    }

    fn prefix<'a>(&'a self, prefix: &'a str) -> KeyFuture<'a, (Vec<KeyValue>, i64)> {
        Box::pin(Etcd::prefix(self, prefix))
    }

    fn watch(&self, prefix: &str, start_revision: i64) -> WatchStream {
        Box::pin(Etcd::watch(self, prefix, start_revision))
    }

    /// A new connection pool to the same endpoints, with the same request timeout.
    fn client_of_its_own(&self) -> Arc<dyn KeyStore> {
        Arc::new(Etcd::new(self.endpoints.to_vec(), self.request_timeout))
    }
}

fn put_request(key: &str, value: &[u8], lease: LeaseId) -> Value {
    json!({
        "key": STANDARD.encode(key),
        "value": STANDARD.encode(value),
        "lease": lease.to_string(),
    })
}

/// The end (excluded) of the range of keys starting with `prefix`: the prefix with its last byte
/// incremented, or "\0" (up to the last key) for the empty prefix. UTF-8 has no 0xFF byte, so
/// the increment cannot overflow.
fn range_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    match end.last_mut() {
        Some(last) => *last += 1,
        None => end.push(0),
    }
    end
}

fn failure(status: StatusCode, answer: &[u8]) -> EtcdError {
    EtcdError::Failed(etcd_message(status, answer))
}

/// etcd's message in an error answer (`{"error": "…", "message": "…", "code": …}`), or the
/// answer itself when it is not one.
fn etcd_message(status: StatusCode, answer: &[u8]) -> String {
    match serde_json::from_slice::<Value>(answer)
        .ok()
        .and_then(|mut answer| answer.get_mut("error").map(Value::take))
    {
        Some(error) => message(error),
        None => format!("{status}: {}", String::from_utf8_lossy(answer).trim()),
    }
}

/// The text of an `error` field: a string in an answer, `{"message": "…", …}` within a stream.
fn message(error: Value) -> String {
    match error {
        Value::String(message) => message,
        Value::Object(mut fields) => match fields.remove("message") {
            Some(Value::String(message)) => message,
            _ => Value::Object(fields).to_string(),
        },
        other => other.to_string(),
    }
}

/// The events of one line of a watch's answer; empty for the confirmation that the watch started.
fn watch_events(line: &[u8]) -> Result<Vec<WatchEvent>, EtcdError> {
    #[derive(Deserialize)]
    struct Line {
        result: Option<Answer>,
        error: Option<Value>,
    }
    #[derive(Deserialize)]
    struct Answer {
        #[serde(default)]
        events: Vec<Event>,
        #[serde(default)]
        canceled: bool,
        #[serde(default)]
        cancel_reason: String,
        #[serde(default, deserialize_with = "int64")]
        compact_revision: i64,
    }
    #[derive(Deserialize)]
    struct Event {
        /// Absent for a put.
        #[serde(rename = "type", default)]
        kind: String,
        kv: KeyValue,
    }
    if line.trim_ascii().is_empty() {
        return Ok(Vec::new());
    }
    let line: Line = serde_json::from_slice(line)
        .map_err(|error| EtcdError::Failed(format!("unexpected line in a watch: {error}")))?;
    match (line.result, line.error) {
        (_, Some(error)) => Err(EtcdError::Failed(message(error))),
        (Some(answer), None) if answer.canceled => {
            Err(EtcdError::Failed(if answer.compact_revision > 0 {
                format!(
                    "watch canceled: revisions before {} are compacted",
                    answer.compact_revision
                )
            } else {
                format!("watch canceled: {}", answer.cancel_reason)
            }))
        }
        (Some(answer), None) => Ok(answer
            .events
            .into_iter()
            .map(|event| match event.kind.as_str() {
                "DELETE" => WatchEvent::Delete(event.kv.key),
                _ => WatchEvent::Put(event.kv),
            })
            .collect()),
        (None, None) => Ok(Vec::new()),
    }
}

fn int64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    String::deserialize(deserializer)?
        .parse()
        .map_err(serde::de::Error::custom)
}

fn base64_bytes<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
    STANDARD
        .decode(String::deserialize(deserializer)?)
        .map_err(serde::de::Error::custom)
}

/// Keys this crate reads are ones it wrote from `&str`; another writer's non-UTF-8 key is read
/// lossily rather than failing the whole read.
fn base64_string<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    base64_bytes(deserializer).map(|key| String::from_utf8_lossy(&key).into_owned())
}

#[cfg(test)]
mod tests {
    use std::net::{SocketAddr, TcpListener};
    use std::pin::pin;
    use std::time::{Instant, SystemTime, UNIX_EPOCH};

    use futures_util::StreamExt as _;

    use super::*;
    use crate::cluster::keys::memory::MemoryKeyStore;

    /// The etcd launcher of the integration tests, so that the crate has one; they use the
    /// rest of it (restarts, signals, a second address). Included rather than a `#[path]`
    /// module: in an inline module of `src/cluster/etcd.rs`, `#[path]` starts from
    /// `src/cluster/etcd/tests/`, a folder that does not exist.
    #[allow(dead_code)]
    mod launcher {
        include!("../../tests/it/common/etcd.rs");
    }

    /// The etcd the tests talk to: the endpoints in `DURABILITY_TEST_ETCD_ENDPOINTS`
    /// (comma-separated), or else members started here, killed when dropped.
    struct TestEtcd {
        endpoints: Vec<String>,
        started: Option<launcher::Etcd>,
    }

    impl TestEtcd {
        async fn start() -> Self {
            match std::env::var("DURABILITY_TEST_ETCD_ENDPOINTS") {
                Ok(endpoints) => Self {
                    endpoints: endpoints
                        .split(',')
                        .map(|endpoint| endpoint.trim().to_owned())
                        .collect(),
                    started: None,
                },
                Err(_) => Self::spawn(1).await,
            }
        }

        /// Starts a cluster of `size` members and waits until each serves (see [`serves`]),
        /// on a thread of the blocking pool.
        async fn spawn(size: usize) -> Self {
            let etcd = tokio::task::spawn_blocking(move || launcher::Etcd::start(size, serves))
                .await
                .expect("the etcd launcher");
            Self {
                endpoints: etcd.endpoint.split(',').map(str::to_owned).collect(),
                started: Some(etcd),
            }
        }

        /// Kills every member started here from `first` on.
        fn kill_from(&mut self, first: usize) {
            let etcd = self.started.as_mut().expect("members started here");
            for member in first..etcd.clients.len() {
                etcd.kill(member);
            }
        }

        fn client(&self) -> Etcd {
            Etcd::new(self.endpoints.clone(), Duration::from_secs(5))
        }
    }

    /// Whether the member at `addr` serves: a read through this module's client succeeds,
    /// which it does only where the member has a leader (the client requires one). Runs the
    /// read on a runtime of its own, since the launcher asks from a blocking thread.
    fn serves(addr: SocketAddr) -> bool {
        let client = Etcd::new(vec![format!("http://{addr}")], Duration::from_secs(1));
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(client.prefix("/durability-test/ready/"))
            .is_ok()
    }

    /// A prefix no other test, nor an earlier run against the same etcd, writes under.
    fn unique_prefix(test: &str) -> String {
        format!(
            "/durability-test/{test}/{}/",
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        )
    }

    async fn next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
        tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("no watch event within 20 s")
    }

    #[tokio::test]
    async fn create_only_creates_and_prefix_reads_the_keys_with_their_lease_etcd() {
        let etcd = TestEtcd::start().await;
        create_only_creates_and_prefix_reads_the_keys_with_their_lease(&etcd.client()).await;
    }

    #[tokio::test]
    async fn create_only_creates_and_prefix_reads_the_keys_with_their_lease_memory() {
        create_only_creates_and_prefix_reads_the_keys_with_their_lease(&MemoryKeyStore::new())
            .await;
    }

    /// Against etcd and its in-memory double: `create` writes only absent keys, a put under an
    /// unknown lease fails, and revoking a lease (twice too) deletes its keys.
    async fn create_only_creates_and_prefix_reads_the_keys_with_their_lease(client: &dyn KeyStore) {
        let prefix = unique_prefix("create");
        let (a, b) = (format!("{prefix}a"), format!("{prefix}b"));
        let lease = client.grant(Duration::from_secs(30)).await.unwrap();

        assert!(client.create(&b, b"first", lease).await.unwrap());
        assert!(!client.create(&b, b"second", 0).await.unwrap());
        client.put(&a, b"", 0).await.unwrap();
        // Just before and just past the range of the prefix.
        let base = prefix.trim_end_matches('/');
        client
            .put(&format!("{base}."), b"outside", 0)
            .await
            .unwrap();
        client
            .put(&format!("{base}0"), b"outside", 0)
            .await
            .unwrap();

        let (kvs, revision) = client.prefix(&prefix).await.unwrap();
        let read: Vec<(&str, &[u8], LeaseId)> = kvs
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.as_slice(), kv.lease))
            .collect();
        assert_eq!(
            read,
            [
                (a.as_str(), &b""[..], 0),
                (b.as_str(), &b"first"[..], lease)
            ]
        );
        assert!(kvs[1].mod_revision < kvs[0].mod_revision && kvs[0].mod_revision < revision);

        let Err(EtcdError::Failed(message)) =
            client.create(&format!("{prefix}c"), b"", 0x7eed).await
        else {
            panic!("created a key under an unknown lease");
        };
        assert!(message.contains("lease not found"), "{message}");
        client.revoke(lease).await.unwrap();
        client.revoke(lease).await.unwrap();
        assert_eq!(client.prefix(&prefix).await.unwrap().0.len(), 1);
    }

    #[tokio::test]
    async fn delete_if_deletes_only_the_expected_value_etcd() {
        let etcd = TestEtcd::start().await;
        delete_if_deletes_only_the_expected_value(&etcd.client()).await;
    }

    #[tokio::test]
    async fn delete_if_deletes_only_the_expected_value_memory() {
        delete_if_deletes_only_the_expected_value(&MemoryKeyStore::new()).await;
    }

    /// Against etcd and its in-memory double: `delete_if` deletes a key only while it holds the
    /// expected value.
    async fn delete_if_deletes_only_the_expected_value(client: &dyn KeyStore) {
        let prefix = unique_prefix("delete-if");
        let key = format!("{prefix}owner");
        client.put(&key, b"mine", 0).await.unwrap();

        assert!(!client.delete_if(&key, b"theirs").await.unwrap());
        let (kvs, _) = client.prefix(&prefix).await.unwrap();
        assert_eq!(
            kvs.iter().map(|kv| kv.value.as_slice()).collect::<Vec<_>>(),
            [b"mine"]
        );

        assert!(client.delete_if(&key, b"mine").await.unwrap());
        assert!(client.prefix(&prefix).await.unwrap().0.is_empty());
        assert!(!client.delete_if(&key, b"mine").await.unwrap());
    }

    #[tokio::test]
    async fn an_expired_lease_takes_its_keys_and_a_kept_one_keeps_them() {
        let etcd = TestEtcd::start().await;
        let client = etcd.client();
        let prefix = unique_prefix("lease");
        let (expiring_key, kept_key) = (format!("{prefix}expiring"), format!("{prefix}kept"));
        let expiring = client.grant(Duration::from_millis(1)).await.unwrap();
        let kept = client.grant(Duration::from_secs(1)).await.unwrap();
        assert!(client.create(&expiring_key, b"", expiring).await.unwrap());
        assert!(client.create(&kept_key, b"", kept).await.unwrap());

        let granted = Instant::now();
        while granted.elapsed() < Duration::from_secs(4) {
            assert!(client.keep_alive(kept).await.unwrap());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }

        let (kvs, _) = client.prefix(&prefix).await.unwrap();
        assert_eq!(
            kvs.iter()
                .map(|kv| (kv.key.as_str(), kv.lease))
                .collect::<Vec<_>>(),
            [(kept_key.as_str(), kept)]
        );
        assert!(!client.keep_alive(expiring).await.unwrap());

        client.revoke(kept).await.unwrap();
        assert!(!client.keep_alive(kept).await.unwrap());
        assert!(client.prefix(&prefix).await.unwrap().0.is_empty());
    }

    #[tokio::test]
    async fn watch_from_a_read_sees_the_later_puts_and_deletes_under_the_prefix_etcd() {
        let etcd = TestEtcd::start().await;
        watch_from_a_read_sees_the_later_puts_and_deletes_under_the_prefix(&etcd.client()).await;
    }

    #[tokio::test]
    async fn watch_from_a_read_sees_the_later_puts_and_deletes_under_the_prefix_memory() {
        watch_from_a_read_sees_the_later_puts_and_deletes_under_the_prefix(&MemoryKeyStore::new())
            .await;
    }

    /// Against etcd and its in-memory double: a watch from a read's revision + 1 sees the puts
    /// under its prefix after the read, and a revoked lease's keys as deletes.
    async fn watch_from_a_read_sees_the_later_puts_and_deletes_under_the_prefix(
        client: &dyn KeyStore,
    ) {
        let prefix = unique_prefix("watch");
        let (old, new) = (format!("{prefix}old"), format!("{prefix}new"));
        let lease = client.grant(Duration::from_secs(60)).await.unwrap();
        client.put(&old, b"before", lease).await.unwrap();
        let (_, revision) = client.prefix(&prefix).await.unwrap();

        let mut watch = pin!(client.watch(&prefix, revision + 1));
        client
            .put(&format!("{}0", prefix.trim_end_matches('/')), b"outside", 0)
            .await
            .unwrap();
        client.put(&new, b"after", 0).await.unwrap();
        let events = next(&mut watch).await.unwrap().unwrap();
        let [WatchEvent::Put(put)] = events.as_slice() else {
            panic!("{events:?}")
        };
        assert_eq!(
            (put.key.as_str(), put.value.as_slice(), put.lease),
            (new.as_str(), &b"after"[..], 0)
        );
        assert!(put.mod_revision > revision + 1);

        // A revoked (or expired) lease deletes its keys.
        client.revoke(lease).await.unwrap();
        assert_eq!(
            next(&mut watch).await.unwrap().unwrap(),
            [WatchEvent::Delete(old)]
        );
    }

    #[tokio::test]
    async fn a_watch_from_a_compacted_revision_fails_and_ends() {
        let etcd = TestEtcd::start().await;
        let client = etcd.client();
        let prefix = unique_prefix("compacted");
        client.put(&format!("{prefix}a"), b"", 0).await.unwrap();
        client.put(&format!("{prefix}a"), b"", 0).await.unwrap();
        let (_, revision) = client.prefix(&prefix).await.unwrap();
        let compaction = json!({ "revision": revision.to_string() });
        let _: Value = client.call("/v3/kv/compaction", &compaction).await.unwrap();

        let mut watch = pin!(client.watch(&prefix, revision - 1));
        let Some(Err(EtcdError::Failed(message))) = next(&mut watch).await else {
            panic!("watched compacted revisions")
        };
        assert!(message.contains("compacted"), "{message}");
        assert!(next(&mut watch).await.is_none());
    }

    #[tokio::test]
    async fn requests_fail_over_to_the_next_endpoint() {
        let etcd = TestEtcd::start().await;
        // Accepts connections (the kernel does) but never answers.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut endpoints = vec![
            "http://127.0.0.1:1".to_owned(),
            format!("http://{}", silent.local_addr().unwrap()),
        ];
        endpoints.extend(etcd.endpoints.iter().cloned());
        let timeout = Duration::from_secs(1);
        let client = Etcd::new(endpoints, timeout);
        let key = format!("{}key", unique_prefix("failover"));

        let started = Instant::now();
        client.put(&key, b"value", 0).await.unwrap();
        assert!(started.elapsed() >= timeout);
        // The next request goes straight to the endpoint that answered.
        let started = Instant::now();
        let (kvs, _) = client.prefix(&key).await.unwrap();
        assert!(started.elapsed() < timeout);
        assert_eq!(kvs[0].value, b"value");

        let unreachable = Etcd::new(vec!["http://127.0.0.1:1".to_owned()], timeout);
        assert!(matches!(
            unreachable.prefix(&key).await,
            Err(EtcdError::Unreachable(_))
        ));
    }

    /// Stops its own etcd, so it always starts one.
    #[tokio::test]
    async fn a_watch_ends_when_its_connection_drops() {
        let mut etcd = TestEtcd::spawn(1).await;
        let client = etcd.client();
        let prefix = unique_prefix("dropped");
        let (_, revision) = client.prefix(&prefix).await.unwrap();
        let mut watch = pin!(client.watch(&prefix, revision + 1));
        client.put(&format!("{prefix}a"), b"", 0).await.unwrap();
        assert!(matches!(next(&mut watch).await, Some(Ok(_))));

        etcd.kill_from(0);
        assert!(!matches!(next(&mut watch).await, Some(Ok(_))));
        assert!(next(&mut watch).await.is_none());
    }

    /// Stops members of its own cluster, so it always starts one.
    #[tokio::test]
    async fn a_member_without_leader_ends_its_watches_and_refuses_requests() {
        let mut etcd = TestEtcd::spawn(3).await;
        let client = Etcd::new(etcd.endpoints[..1].to_vec(), Duration::from_secs(5));
        let prefix = unique_prefix("no-leader");
        let (_, revision) = client.prefix(&prefix).await.unwrap();
        let mut watch = pin!(client.watch(&prefix, revision + 1));
        client.put(&format!("{prefix}a"), b"", 0).await.unwrap();
        assert!(matches!(next(&mut watch).await, Some(Ok(_))));

        etcd.kill_from(1);
        let end = next(&mut watch).await;
        let Some(Err(EtcdError::Failed(message))) = end else {
            panic!("the watch outlived the leader: {end:?}")
        };
        assert!(message.contains("no leader"), "{message}");
        assert!(next(&mut watch).await.is_none());
        let started = Instant::now();
        let Err(EtcdError::Unreachable(message)) = client.prefix(&prefix).await else {
            panic!("read without a leader")
        };
        assert!(
            message.contains("no leader") && started.elapsed() < Duration::from_secs(1),
            "{message}"
        );
    }
}
