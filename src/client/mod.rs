//! A typed client of the REST API (feature `client`): one async method per operation, the
//! JSON shapes of [`crate::wire`] as answers (the server writes the same types, so the two
//! cannot drift), typed errors ([`ClientError`]), and retries that never duplicate a write.
//!
//! - **Retries** ([`RetryPolicy`]): before a write's first attempt the client gives every
//!   record without a deduplication key one of its own (a time-ordered UUID), so a retried write
//!   returns the original offsets instead of appending twice. Writes, reads, polls and commits
//!   are then tried again on `503`, timeouts and broken connections; lease claims, acks, nacks,
//!   extends, trims, cursor changes and forgets only when the server surely did not apply them
//!   (no connection was made, or `503 overloaded`); a 4xx never.
//! - **Several nodes**: given a cluster's URLs, the client sends to the one that answered last
//!   and moves on to the next when no connection can be made (any node serves any request).
//! - **Helpers**: a [`Consumer`] long-polls a group and commits what its caller marks done; a
//!   [`LeaseWorker`] hands leased records to a closure, acks or nacks by its result, and
//!   extends the lease while the closure runs.
//!
//! The client runs on tokio (actix's runtime too). A `Client` is cheap to clone, and clones
//! share their connections.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use durability::client::{Client, ClientError, Record};
//! use serde_json::json;
//!
//! # async fn run() -> Result<(), ClientError> {
//! let client = Client::builder(["http://127.0.0.1:8080"]).token("secret").build()?;
//! let appended = client.append("orders", 0, [Record::new(json!({"total": 42}))]).await?;
//! let page = client.read("orders", 0, Some(appended.offsets[0]), None).await?;
//! assert_eq!(page.records[0].json(), Some(r#"{"total":42}"#));
//!
//! let mut billing = client.consumer("orders", "billing").wait(Duration::from_secs(5));
//! let batch = billing.next_batch().await?;
//! // ... process the batch, then commit what was done:
//! billing.commit(&batch).await?;
//! # Ok(())
//! # }
//! ```

mod call;
mod consume;
mod consumer;
mod error;
mod leases;
mod operations;
mod produce;
mod retry;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::HeaderValue;

pub use consumer::{Consumer, Delivery};
pub use error::ClientError;
pub use produce::{Event, Record};
pub use retry::RetryPolicy;
pub use worker::{LeaseWorker, Settled};

/// A client of one server, or of a cluster's nodes. Cheap to clone: clones share connections
/// and the node that answered last.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
}

/// What every clone of a [`Client`] shares.
struct Shared {
    http: reqwest::Client,
    /// The nodes' base URLs, each taking a path.
    urls: Vec<Url>,
    /// The node that answered last: where calls go first.
    current: AtomicUsize,
    /// `Bearer <token>`, marked sensitive.
    token: Option<HeaderValue>,
    /// Longest wait for an answer, beyond a long poll's own wait.
    timeout: Duration,
    retry: RetryPolicy,
}

impl std::fmt::Debug for Client {
    /// Shows the nodes, never the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<&str> = self.shared.urls.iter().map(Url::as_str).collect();
        f.debug_struct("Client")
            .field("urls", &urls)
            .field("token", &self.shared.token.as_ref().map(|_| "<redacted>"))
            .field("retry", &self.shared.retry)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A builder of a client of the server at `urls`' one URL (`http://127.0.0.1:8080`), or of
    /// the cluster whose nodes they are.
    pub fn builder(urls: impl IntoIterator<Item = impl Into<String>>) -> ClientBuilder {
        ClientBuilder {
            urls: urls.into_iter().map(Into::into).collect(),
            token: None,
            timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            ca_file: None,
            identity: None,
            retry: RetryPolicy::default(),
        }
    }

    /// A consumer of `topic` in consumer group `group` (see [`Consumer`]).
    pub fn consumer(&self, topic: impl Into<String>, group: impl Into<String>) -> Consumer {
        Consumer::new(self.clone(), topic.into(), group.into())
    }

    /// A worker of `topic`'s leases in consumer group `group` (see [`LeaseWorker`]).
    pub fn lease_worker(&self, topic: impl Into<String>, group: impl Into<String>) -> LeaseWorker {
        LeaseWorker::new(self.clone(), topic.into(), group.into())
    }
}

/// The settings of a [`Client`]; [`ClientBuilder::build`] checks them.
#[must_use]
pub struct ClientBuilder {
    urls: Vec<String>,
    token: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    ca_file: Option<PathBuf>,
    identity: Option<(PathBuf, PathBuf)>,
    retry: RetryPolicy,
}

impl std::fmt::Debug for ClientBuilder {
    /// Never shows the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("urls", &self.urls)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("ca_file", &self.ca_file)
            .field("identity", &self.identity)
            .field("retry", &self.retry)
            .finish()
    }
}

impl ClientBuilder {
    /// Sends `Authorization: Bearer <token>` with every request (a server with
    /// `server.auth_token` or scoped tokens requires it).
    /// Default: no token.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Longest wait for an answer, beyond the wait a long poll asks the server for.
    /// Default: 10 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Longest wait for a connection.
    /// Default: 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Trusts only the CA certificates in PEM file `path` (then every URL must be `https`).
    /// Default: the system's roots, or the file `SSL_CERT_FILE` names.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Shows the client certificate in PEM file `cert` (its chain) with the key in `key` to a
    /// server that asks for one (`server.tls.client_ca_file`).
    /// Default: none.
    pub fn identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// How failed calls are retried.
    /// Default: [`RetryPolicy::default`].
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The client.
    ///
    /// # Errors
    /// [`ClientError::Invalid`]: no URL, a URL that is not `http(s)://host...` (or not `https`
    /// with a CA file), a token that cannot be a header, certificate files that cannot be read
    /// or do not hold what they should.
    pub fn build(self) -> Result<Client, ClientError> {
        let invalid = |why: String| ClientError::Invalid(why);
        if self.urls.is_empty() {
            return Err(invalid("no URL to reach the server at".into()));
        }
        let urls = self
            .urls
            .iter()
            .map(|text| {
                let url = Url::parse(text).map_err(|err| invalid(format!("{text:?}: {err}")))?;
                let scheme_ok = match url.scheme() {
                    "https" => true,
                    "http" => self.ca_file.is_none(),
                    _ => false,
                };
                if !scheme_ok || url.cannot_be_a_base() || url.host().is_none() {
                    let schemes = if self.ca_file.is_some() {
                        "https://"
                    } else {
                        "http:// or https://"
                    };
                    return Err(invalid(format!("{text:?} is not a {schemes} URL")));
                }
                Ok(url)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let token = self
            .token
            .as_deref()
            .map(|token| {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| invalid("the token holds characters a header cannot".into()))?;
                value.set_sensitive(true);
                Ok(value)
            })
            .transpose()?;
        let builder = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .user_agent(concat!("durability-client/", env!("CARGO_PKG_VERSION")));
        let identity = self
            .identity
            .as_ref()
            .map(|(cert, key)| (cert.as_path(), key.as_path()));
        let http = crate::tls::trusting(builder, self.ca_file.as_deref(), identity)
            .map_err(invalid)?
            .build()
            .map_err(|err| invalid(crate::error::with_causes(&err)))?;
        Ok(Client {
            shared: Arc::new(Shared {
                http,
                urls,
                current: AtomicUsize::new(0),
                token,
                timeout: self.timeout,
                retry: self.retry,
            }),
        })
    }
}

/// `offset` as a JSON body's integer. No log reaches `i64::MAX`, so a larger offset is sent as
/// that, which the server refuses like any offset beyond the log's end.
fn integer(offset: u64) -> crate::wire::Integer {
    crate::wire::Integer(i64::try_from(offset).unwrap_or(i64::MAX))
}
