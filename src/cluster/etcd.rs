//! etcd's v3 API through its JSON gateway (HTTP/1.1 + JSON, base64 keys and values): membership
//! and ownership need a handful of calls, and the gateway keeps protoc out of the build.
//!
//! The gateway encodes int64 fields as JSON strings and omits every field that holds its zero
//! value (`false`, `0`, empty), so each answer field below defaults when absent.
//!
//! A secured etcd ([`EtcdAccess`]) is reached over TLS, trusting only its CA and showing a client
//! certificate, and, with authentication on, as a user: the client logs in on its first request
//! and sends the token etcd gives with every request after. etcd forgets tokens (simple tokens
//! after `--auth-token-ttl`, 5 minutes, unused, and all of them when it restarts); a request it
//! refuses for that is sent again, once, under a new token. The password and the token are
//! never logged nor put in an error. With authentication on, etcd 3.4's gateway refuses every
//! request that comes with a client certificate naming a CommonName ("CommonName of client
//! sending a request against gateway will be ignored"): a client certificate used with a user
//! must have none.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::Stream;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use super::keys::{KeyFuture, KeyStore, WatchStream};
use crate::config::ClusterSettings;
use crate::sync::{read_lock, write_lock};

/// A client of an etcd cluster; clones share the connection pool, the current endpoint and the
/// token.
#[derive(Clone)]
pub(crate) struct Etcd {
    client: reqwest::Client,
    endpoints: Arc<[String]>,
    /// Index in `endpoints` of the endpoint that answered last.
    current: Arc<AtomicUsize>,
    request_timeout: Duration,
    /// Kept to build a client of its own ([`KeyStore::client_of_its_own`]).
    access: Arc<EtcdAccess>,
    /// The token etcd gave `access.user`; None before the first request and without a user.
    token: Arc<RwLock<Option<Arc<str>>>>,
    /// How many times this client and its clones logged in.
    #[cfg(test)]
    authentications: Arc<AtomicUsize>,
}

/// What it takes to reach a secured etcd. The default reaches one that is not: plain HTTP or
/// the public roots, no client certificate, no user. Not `Debug`: it holds the password.
#[derive(Clone, Default)]
pub(crate) struct EtcdAccess {
    /// The only CA trusted to have signed etcd's certificate; None: the public roots.
    pub ca_file: Option<PathBuf>,
    /// The client certificate shown to etcd: its chain's file and its key's file.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The user and password to log in as, when etcd has authentication on.
    pub user: Option<(String, String)>,
}

impl EtcdAccess {
    /// The access `[cluster]` configures.
    pub(crate) fn of(settings: &ClusterSettings) -> Self {
        Self {
            ca_file: settings.etcd_ca().map(PathBuf::from),
            identity: settings
                .etcd_identity()
                .map(|(cert, key)| (cert.to_owned(), key.to_owned())),
            user: (!settings.etcd_user.is_empty())
                .then(|| (settings.etcd_user.clone(), settings.etcd_password.clone())),
        }
    }
}

/// Why a request to etcd failed.
#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// No endpoint answered, or none could serve (no leader): the cluster is out of reach.
    #[error("etcd unreachable: {0}")]
    Unreachable(String),
    /// etcd answered with an error, or with something this client does not understand; or it
    /// refused the user and password.
    #[error("etcd: {0}")]
    Failed(String),
    /// The client cannot be built: its CA or certificate files cannot be read or used.
    #[error("etcd's TLS settings: {0}")]
    Tls(String),
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

/// An endpoint's answer to a request, as far as the caller read it.
enum Answer<T> {
    Read(T),
    /// etcd refused the token the request carried, which it forgot (expired, or etcd restarted):
    /// a 401 (gRPC's Unauthenticated), or a watch canceled as it opens for that reason. Holds
    /// etcd's message.
    TokenRefused(String),
}

impl Etcd {
    /// `endpoints`: base URLs like `http://127.0.0.1:2379`; each request goes to the endpoint that
    /// answered last, and on a connection failure or timeout tries the next ones once each (as
    /// it does when an endpoint answers that it has no leader). Does not block: the first
    /// request logs in when `access` has a user.
    ///
    /// # Errors
    /// [`EtcdError::Tls`] when `access`'s CA or certificate files cannot be read or used.
    pub(crate) fn new(
        endpoints: Vec<String>,
        request_timeout: Duration,
        access: EtcdAccess,
    ) -> Result<Self, EtcdError> {
        let endpoints = endpoints
            .into_iter()
            .map(|endpoint| endpoint.trim_end_matches('/').to_owned())
            .collect();
        Ok(Self {
            client: http_client(&access, request_timeout)?,
            endpoints,
            current: Arc::new(AtomicUsize::new(0)),
            request_timeout,
            access: Arc::new(access),
            token: Arc::default(),
            #[cfg(test)]
            authentications: Arc::default(),
        })
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
                    Ok(opened) => opened,
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
                                Err(EtcdError::Unreachable(described(error))),
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
        self.send(path, request, read_whole).await
    }

    /// Opens a watch: the answer's head and its first line (the watch created, or canceled)
    /// must come within the request timeout. Answers the response and what was read of it.
    async fn open_watch(&self, request: &Value) -> Result<(Response, Vec<u8>), EtcdError> {
        let (response, head) = self
            .send("/v3/watch", request, async |mut response: Response| {
                let mut head = Vec::new();
                while !head.contains(&b'\n') {
                    match response.chunk().await? {
                        Some(chunk) => head.extend_from_slice(&chunk),
                        None => break,
                    }
                }
                // The reason a watch is canceled for is the gRPC status, as text.
                if response.status().is_success()
                    && let Err(EtcdError::Failed(message)) = watch_events(&head)
                    && message.contains("code = Unauthenticated")
                {
                    return Ok(Answer::TokenRefused(message));
                }
                Ok(Answer::Read((response, head)))
            })
            .await?;
        let status = response.status();
        if !status.is_success() {
            return Err(failure(status, &head));
        }
        Ok((response, head))
    }

    /// Sends `request` under the user's token (logging in first when there is none yet), and
    /// once again under a new token if etcd refused that one.
    async fn send<T>(
        &self,
        path: &str,
        request: &Value,
        receive: impl AsyncFn(Response) -> reqwest::Result<Answer<T>>,
    ) -> Result<T, EtcdError> {
        let Some(user) = &self.access.user else {
            return match self.send_as(None, path, request, &receive).await? {
                Answer::Read(answer) => Ok(answer),
                Answer::TokenRefused(message) => Err(EtcdError::Failed(message)),
            };
        };
        let known = read_lock(&self.token).clone();
        let token = match known {
            Some(token) => token,
            None => self.authenticate(user).await?,
        };
        match self.send_as(Some(&token), path, request, &receive).await? {
            Answer::Read(answer) => return Ok(answer),
            Answer::TokenRefused(message) => log::info!("etcd: {message}; logging in again"),
        }
        // A clone may have logged in again already.
        let newer = read_lock(&self.token)
            .clone()
            .filter(|newer| *newer != token);
        let token = match newer {
            Some(newer) => newer,
            None => self.authenticate(user).await?,
        };
        match self.send_as(Some(&token), path, request, &receive).await? {
            Answer::Read(answer) => Ok(answer),
            Answer::TokenRefused(message) => Err(EtcdError::Failed(message)),
        }
    }

    /// Logs in as `user` (name, password); the token etcd gives is sent with the requests that
    /// follow, by every clone.
    ///
    /// # Errors
    /// [`EtcdError::Failed`], naming the user, when etcd refuses to log it in;
    /// [`EtcdError::Unreachable`] when no endpoint answers.
    async fn authenticate(
        &self,
        (name, password): &(String, String),
    ) -> Result<Arc<str>, EtcdError> {
        #[derive(Deserialize)]
        struct Authenticated {
            token: String,
        }
        #[cfg(test)]
        self.authentications.fetch_add(1, Ordering::Relaxed);
        let refused = |why: String| {
            EtcdError::Failed(format!("authentication as user {name:?} failed: {why}"))
        };
        let request = json!({ "name": name, "password": password });
        let (status, answer) = match self
            .send_as(None, "/v3/auth/authenticate", &request, &read_whole)
            .await?
        {
            Answer::Read(answer) => answer,
            Answer::TokenRefused(message) => return Err(refused(message)),
        };
        if !status.is_success() {
            return Err(refused(etcd_message(status, &answer)));
        }
        let token: Arc<str> = serde_json::from_slice::<Authenticated>(&answer)
            .map_err(|_| refused("etcd's answer holds no token".to_owned()))?
            .token
            .into();
        *write_lock(&self.token) = Some(token.clone());
        Ok(token)
    }

    /// Sends `request`, carrying `token` if given, to the endpoint that answered last, then to
    /// each other endpoint once while the connection fails, `receive` times out, or the
    /// endpoint has no leader (503: etcd refused the request without doing it, so trying
    /// elsewhere is safe). A refused token is etcd's answer for the whole cluster: it is not
    /// tried elsewhere.
    async fn send_as<T>(
        &self,
        token: Option<&str>,
        path: &str,
        request: &Value,
        receive: &impl AsyncFn(Response) -> reqwest::Result<Answer<T>>,
    ) -> Result<Answer<T>, EtcdError> {
        let body = request.to_string();
        let authorization = token
            .map(|token| {
                let mut value = HeaderValue::from_str(token).map_err(|_| {
                    EtcdError::Failed("etcd gave a token that is no header value".to_owned())
                })?;
                // Kept out of `Debug` output, and out of HTTP/2 header compression.
                value.set_sensitive(true);
                Ok(value)
            })
            .transpose()?;
        let count = self.endpoints.len();
        let first = self.current.load(Ordering::Relaxed);
        let mut failures = Vec::new();
        for index in (first..first + count).map(|index| index % count) {
            let endpoint = &self.endpoints[index];
            let attempt = async {
                let mut post = self
                    .client
                    .post(format!("{endpoint}{path}"))
                    .header(CONTENT_TYPE, "application/json")
                    .header(REQUIRE_LEADER.0, REQUIRE_LEADER.1);
                if let Some(authorization) = &authorization {
                    post = post.header(AUTHORIZATION, authorization.clone());
                }
                let response = post.body(body.clone()).send().await.map_err(described)?;
                let status = response.status();
                if status == StatusCode::SERVICE_UNAVAILABLE || status == StatusCode::UNAUTHORIZED {
                    let answer = response.bytes().await.map_err(described)?;
                    let message = etcd_message(status, &answer);
                    return match status {
                        StatusCode::UNAUTHORIZED => Ok(Answer::TokenRefused(message)),
                        _ => Err(message),
                    };
                }
                receive(response).await.map_err(described)
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

    /// A new connection pool to the same endpoints, with the same request timeout and access,
    /// sharing the token. Should the TLS files no longer be usable (they were when this client
    /// was built), it shares this client's pool rather than fail, and says so.
    fn client_of_its_own(&self) -> Arc<dyn KeyStore> {
        match http_client(&self.access, self.request_timeout) {
            Ok(client) => Arc::new(Etcd {
                client,
                current: Arc::new(AtomicUsize::new(0)),
                ..self.clone()
            }),
            Err(error) => {
                log::warn!("{error}; sharing this client's connections instead");
                Arc::new(self.clone())
            }
        }
    }
}

/// An HTTP client that reaches etcd as `access` says, its watches watched by TCP keepalive.
fn http_client(
    access: &EtcdAccess,
    request_timeout: Duration,
) -> Result<reqwest::Client, EtcdError> {
    let builder = reqwest::Client::builder()
        // Watches stay open for as long as nothing happens, so only TCP keepalive notices
        // that their peer is gone without a word (host down, network cut).
        .tcp_keepalive(request_timeout)
        .tcp_keepalive_interval(request_timeout)
        .tcp_keepalive_retries(3);
    let identity = access
        .identity
        .as_ref()
        .map(|(cert, key)| (cert.as_path(), key.as_path()));
    crate::tls::trusting(builder, access.ca_file.as_deref(), identity)
        .map_err(EtcdError::Tls)?
        .build()
        .map_err(|error| EtcdError::Tls(described(error)))
}

/// Reads a whole answer.
async fn read_whole(response: Response) -> reqwest::Result<Answer<(StatusCode, Vec<u8>)>> {
    let status = response.status();
    Ok(Answer::Read((status, response.bytes().await?.to_vec())))
}

/// `error` with its causes: reqwest's own message names only the URL, and a TLS failure
/// (an unknown CA, a refused client certificate) is told by a cause.
fn described(error: reqwest::Error) -> String {
    let mut described = error.to_string();
    let mut cause = std::error::Error::source(&error);
    while let Some(error) = cause {
        described = format!("{described}: {error}");
        cause = error.source();
    }
    described
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
    use std::net::TcpListener;
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

    /// The certificates of the integration tests' TLS tests, included as the launcher is.
    #[allow(dead_code)]
    mod pki {
        include!("../../tests/it/common/pki.rs");
    }

    /// The password of user `root` where a test turns authentication on.
    const PASSWORD: &str = "pa55-w0rd-of-root";

    /// The etcd the tests talk to: the endpoints in `DURABILITY_TEST_ETCD_ENDPOINTS`
    /// (comma-separated), or else members started here, killed when dropped.
    struct TestEtcd {
        endpoints: Vec<String>,
        started: Option<launcher::Etcd>,
        /// How [`TestEtcd::client`] reaches it.
        access: EtcdAccess,
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
                    access: EtcdAccess::default(),
                },
                Err(_) => Self::spawn(1).await,
            }
        }

        /// Starts a cluster of `size` members and waits until each serves (see [`serves`]),
        /// on a thread of the blocking pool.
        async fn spawn(size: usize) -> Self {
            Self::spawn_with(size, launcher::Options::default(), EtcdAccess::default()).await
        }

        /// [`TestEtcd::spawn`], the members started as `options` say and reached with `access`
        /// (its user, for once authentication is on, aside: it is off at first).
        async fn spawn_with(size: usize, options: launcher::Options, access: EtcdAccess) -> Self {
            let scheme = launcher::scheme(options.tls.as_ref());
            let anyone = EtcdAccess {
                user: None,
                ..access.clone()
            };
            let ready = move |addr| serves(format!("{scheme}://{addr}"), anyone.clone());
            let etcd = tokio::task::spawn_blocking(move || {
                launcher::Etcd::start_with(size, options, ready)
            })
            .await
            .expect("the etcd launcher");
            Self {
                endpoints: etcd.endpoint.split(',').map(str::to_owned).collect(),
                started: Some(etcd),
                access,
            }
        }

        /// One member serving its clients over TLS and requiring their certificates (see
        /// [`tls_options`]), reached as a client of the CA with its certificate.
        async fn spawn_tls(pki: &pki::Pki) -> Self {
            let options = tls_options(pki, true);
            Self::spawn_with(1, options, trusting_ca(pki, "ca.pem", true)).await
        }

        /// One member started as `options` say, with authentication on once it serves;
        /// reached with `access` as user `root`.
        async fn spawn_with_auth(options: launcher::Options, access: EtcdAccess) -> Self {
            let access = EtcdAccess {
                user: Some(("root".to_owned(), PASSWORD.to_owned())),
                ..access
            };
            let etcd = Self::spawn_with(1, options, access).await;
            let members = etcd.started.as_ref().expect("members started here");
            members.enable_auth(PASSWORD);
            etcd
        }

        /// Kills every member started here from `first` on.
        fn kill_from(&mut self, first: usize) {
            let etcd = self.started.as_mut().expect("members started here");
            for member in first..etcd.clients.len() {
                etcd.kill(member);
            }
        }

        fn client(&self) -> Etcd {
            self.client_with(self.access.clone())
        }

        fn client_with(&self, access: EtcdAccess) -> Etcd {
            Etcd::new(self.endpoints.clone(), Duration::from_secs(5), access).expect("a client")
        }
    }

    /// TLS on the client URLs with the certificates of `pki`: the server's, and the CA's, which
    /// a client must show a certificate of when `client_cert_auth`.
    fn tls_options(pki: &pki::Pki, client_cert_auth: bool) -> launcher::Options {
        let tls = launcher::ServerTls {
            cert_file: pki.path("server.pem"),
            key_file: pki.path("server.key"),
            ca_file: pki.path("ca.pem"),
            client_cert_auth,
        };
        launcher::Options {
            tls: Some(tls),
            ..launcher::Options::default()
        }
    }

    /// Access trusting the CA of `pki` at `ca`, showing the client certificate of that CA's
    /// `pki` when `with_certificate`.
    fn trusting_ca(pki: &pki::Pki, ca: &str, with_certificate: bool) -> EtcdAccess {
        EtcdAccess {
            ca_file: Some(pki.path(ca)),
            identity: with_certificate.then(|| (pki.path("client.pem"), pki.path("client.key"))),
            user: None,
        }
    }

    /// Whether the member at `endpoint` serves: a read through this module's client, reaching
    /// it with `access`, succeeds, which it does only where the member has a leader (the
    /// client requires one). Runs the read on a runtime of its own, since the launcher asks
    /// from a blocking thread.
    fn serves(endpoint: String, access: EtcdAccess) -> bool {
        let client = Etcd::new(vec![endpoint], Duration::from_secs(1), access).expect("a client");
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
        let client = Etcd::new(endpoints, timeout, EtcdAccess::default()).unwrap();
        let key = format!("{}key", unique_prefix("failover"));

        let started = Instant::now();
        client.put(&key, b"value", 0).await.unwrap();
        assert!(started.elapsed() >= timeout);
        // The next request goes straight to the endpoint that answered.
        let started = Instant::now();
        let (kvs, _) = client.prefix(&key).await.unwrap();
        assert!(started.elapsed() < timeout);
        assert_eq!(kvs[0].value, b"value");

        let unreachable = Etcd::new(
            vec!["http://127.0.0.1:1".to_owned()],
            timeout,
            EtcdAccess::default(),
        )
        .unwrap();
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
        let access = EtcdAccess::default();
        let client =
            Etcd::new(etcd.endpoints[..1].to_vec(), Duration::from_secs(5), access).unwrap();
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

    /// Starts its own etcd, with TLS on and client certificates required: a client that
    /// trusts its CA and shows a certificate the CA signed writes, reads and watches keys.
    #[tokio::test]
    async fn a_client_of_the_ca_writes_reads_and_watches_over_tls() {
        let pki = pki::Pki::new();
        let etcd = TestEtcd::spawn_tls(&pki).await;
        assert!(etcd.endpoints.iter().all(|url| url.starts_with("https://")));
        let client = etcd.client();
        create_only_creates_and_prefix_reads_the_keys_with_their_lease(&client).await;
        watch_from_a_read_sees_the_later_puts_and_deletes_under_the_prefix(&client).await;
    }

    /// Starts its own etcd, with TLS on and client certificates required: a client that
    /// trusts another CA, or shows no certificate, gets an error and writes nothing; a client
    /// whose CA file cannot be read is not built.
    #[tokio::test]
    async fn a_client_that_distrusts_etcd_or_shows_no_certificate_is_refused() {
        let pki = pki::Pki::new();
        let etcd = TestEtcd::spawn_tls(&pki).await;
        let key = format!("{}key", unique_prefix("refused"));

        let distrustful = etcd.client_with(trusting_ca(&pki, "other-ca.pem", true));
        let Err(EtcdError::Unreachable(message)) = distrustful.put(&key, b"", 0).await else {
            panic!("wrote to an etcd whose CA it does not trust")
        };
        assert!(message.contains("UnknownIssuer"), "{message}");

        let anonymous = etcd.client_with(trusting_ca(&pki, "ca.pem", false));
        let Err(EtcdError::Unreachable(message)) = anonymous.put(&key, b"", 0).await else {
            panic!("wrote without a client certificate")
        };
        assert!(message.contains("BadCertificate"), "{message}");
        assert!(etcd.client().prefix(&key).await.unwrap().0.is_empty());

        let missing = trusting_ca(&pki, "missing-ca.pem", true);
        let built = Etcd::new(etcd.endpoints.clone(), Duration::from_secs(5), missing);
        let Err(EtcdError::Tls(message)) = built else {
            panic!("built a client trusting a CA file that does not exist")
        };
        assert!(message.contains("missing-ca.pem"), "{message}");
    }

    /// Starts its own etcd, over TLS with authentication on: user `root` with its password
    /// writes, reads and watches; with a wrong password, or without a user, requests and
    /// watches fail, the error naming the user and never the password.
    #[tokio::test]
    async fn with_authentication_on_only_the_user_with_its_password_is_served() {
        let pki = pki::Pki::new();
        let access = trusting_ca(&pki, "ca.pem", false);
        let etcd = TestEtcd::spawn_with_auth(tls_options(&pki, false), access.clone()).await;
        let root = etcd.client();
        create_only_creates_and_prefix_reads_the_keys_with_their_lease(&root).await;
        watch_from_a_read_sees_the_later_puts_and_deletes_under_the_prefix(&root).await;

        let prefix = unique_prefix("auth");
        let key = format!("{prefix}key");
        let wrong = "not-the-pa55-w0rd";
        let impostor = etcd.client_with(EtcdAccess {
            user: Some(("root".to_owned(), wrong.to_owned())),
            ..access.clone()
        });
        let anonymous = etcd.client_with(access);
        for (client, expected) in [
            (&impostor, "authentication as user \"root\" failed"),
            (&anonymous, "user name is empty"),
        ] {
            let written = client.put(&key, b"", 0).await;
            let read = client.prefix(&prefix).await.map(drop);
            let watched = next(&mut pin!(client.watch(&prefix, 1))).await;
            for result in [written, read, watched.expect("the watch's error").map(drop)] {
                let Err(EtcdError::Failed(message)) = result else {
                    panic!("served without the password: {result:?}")
                };
                assert!(message.contains(expected), "{message}");
                assert!(
                    !message.contains(wrong) && !message.contains(PASSWORD),
                    "{message}"
                );
            }
        }
        assert!(root.prefix(&prefix).await.unwrap().0.is_empty());
    }

    /// Starts its own etcd, with authentication on and tokens forgotten after 1 s unused: a
    /// request, and a watch, sent after etcd forgot the token log in again and are served.
    #[tokio::test]
    async fn a_forgotten_token_is_replaced_and_the_request_served() {
        let options = launcher::Options {
            args: vec!["--auth-token-ttl".to_owned(), "1".to_owned()],
            ..launcher::Options::default()
        };
        let etcd = TestEtcd::spawn_with_auth(options, EtcdAccess::default()).await;
        let client = etcd.client();
        let logins = || client.authentications.load(Ordering::Relaxed);
        let key = format!("{}key", unique_prefix("token"));
        client.put(&key, b"value", 0).await.unwrap();
        assert_eq!(logins(), 1);
        // etcd looks for unused tokens every second.
        let forgotten = Duration::from_secs(3);

        tokio::time::sleep(forgotten).await;
        let (kvs, _) = client.prefix(&key).await.unwrap();
        assert_eq!(kvs[0].value, b"value");
        assert_eq!(logins(), 2);

        tokio::time::sleep(forgotten).await;
        let mut watch = pin!(client.watch(&key, kvs[0].mod_revision));
        let events = next(&mut watch).await.unwrap().unwrap();
        assert!(
            matches!(&events[..], [WatchEvent::Put(put)] if put.key == key),
            "{events:?}"
        );
        assert_eq!(logins(), 3);
    }
}
