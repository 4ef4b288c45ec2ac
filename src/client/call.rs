//! One call of the REST API with its retries: the request every attempt sends (built once, so
//! a retry re-sends the same bytes and the same deduplication keys), the node it goes to, and
//! how its answer is read.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::retry::{Failure, Operation};
use super::{Client, ClientError};
use crate::error::ErrorCode;

/// A request of one operation, as each attempt sends it.
pub(super) struct Call {
    operation: Operation,
    method: Method,
    /// The path's segments after the base URL, percent-encoded as the URL is made.
    segments: Vec<String>,
    query: Vec<(&'static str, String)>,
    /// A JSON body, serialized once.
    body: Option<Vec<u8>>,
    /// How long the server may hold the request before answering (a long poll), beyond the
    /// client's timeout.
    wait: Duration,
}

impl Call {
    /// A `method` request of `operation` to the path of `segments`.
    pub(super) fn new<S: ToString>(
        operation: Operation,
        method: Method,
        segments: impl IntoIterator<Item = S>,
    ) -> Self {
        Self {
            operation,
            method,
            segments: segments.into_iter().map(|s| s.to_string()).collect(),
            query: Vec::new(),
            body: None,
            wait: Duration::ZERO,
        }
    }

    /// Adds query parameter `name`, when it has a value.
    pub(super) fn query(mut self, name: &'static str, value: Option<impl ToString>) -> Self {
        if let Some(value) = value {
            self.query.push((name, value.to_string()));
        }
        self
    }

    /// Sends `body` as JSON.
    pub(super) fn json(mut self, body: &impl Serialize) -> Self {
        self.body = Some(serde_json::to_vec(body).expect("a request body serializes"));
        self
    }

    /// Lets the server hold the request `wait` (`waitMs`) before answering.
    pub(super) fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self.query("waitMs", Some(wait.as_millis()))
    }

    /// The request's URL on the node at `base`.
    fn url(&self, base: &Url) -> Url {
        let mut url = base.clone();
        url.path_segments_mut()
            .expect("a base URL was checked to take a path")
            .pop_if_empty()
            .extend(&self.segments);
        url
    }
}

/// A successful answer.
pub(super) struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    /// The body as `T`.
    fn json<T: DeserializeOwned>(&self) -> Result<T, ClientError> {
        if self.status == 204 {
            return Err(ClientError::Unreadable {
                status: self.status,
                reason: "no content, where a body was expected".into(),
            });
        }
        serde_json::from_slice(&self.body).map_err(|err| ClientError::Unreadable {
            status: self.status,
            reason: err.to_string(),
        })
    }
}

impl Client {
    /// Sends `call` and reads its answer as `T`.
    pub(super) async fn json<T: DeserializeOwned>(&self, call: Call) -> Result<T, ClientError> {
        self.send(&call).await?.json()
    }

    /// [`Client::json`], with `None` for `204 No Content`.
    pub(super) async fn json_or_none<T: DeserializeOwned>(
        &self,
        call: Call,
    ) -> Result<Option<T>, ClientError> {
        let answer = self.send(&call).await?;
        match answer.status {
            204 => Ok(None),
            _ => answer.json().map(Some),
        }
    }

    /// Sends `call`, whose answer has no body to read.
    pub(super) async fn no_content(&self, call: Call) -> Result<(), ClientError> {
        self.send(&call).await.map(drop)
    }

    /// Sends `call` until it succeeds, fails in a way its operation does not retry, or the
    /// retry policy is spent. A connection that cannot be made moves on to the next node, at
    /// once while some node of the list is untried.
    async fn send(&self, call: &Call) -> Result<Answer, ClientError> {
        let shared = &self.shared;
        let policy = shared.retry;
        let started = Instant::now();
        let mut not_connected = 0;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let node = shared.current.load(Ordering::Relaxed);
            let (error, failure) = match self.attempt(call, node).await {
                Ok(answer) => return Ok(answer),
                Err(failed) => failed,
            };
            if failure == Failure::NotConnected {
                not_connected += 1;
                // Only the first caller to fail on this node moves the others on.
                let next = (node + 1) % shared.urls.len();
                let _ = shared.current.compare_exchange(
                    node,
                    next,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            } else {
                not_connected = 0;
            }
            if attempt >= policy.attempts || !failure.retried(call.operation.repeat()) {
                return Err(error);
            }
            let wait = if failure == Failure::NotConnected && not_connected < shared.urls.len() {
                Duration::ZERO
            } else {
                policy.wait(attempt, &failure)
            };
            if started.elapsed() + wait > policy.deadline {
                return Err(error);
            }
            log::debug!("{error}; attempt {} in {wait:?}", attempt + 1);
            tokio::time::sleep(wait).await;
        }
    }

    /// One attempt of `call` on node number `node`: its answer, or the error with how it failed.
    async fn attempt(&self, call: &Call, node: usize) -> Result<Answer, (ClientError, Failure)> {
        let shared = &self.shared;
        let url = call.url(&shared.urls[node]);
        let unreachable = |err: reqwest::Error| {
            let failure = if refused_by_tls(&err) {
                // A certificate not trusted, or ours refused: no retry changes that.
                Failure::Final
            } else if err.is_connect() {
                Failure::NotConnected
            } else {
                Failure::NoAnswer
            };
            let error = ClientError::Unreachable {
                url: url.to_string(),
                reason: crate::error::with_causes(&err.without_url()),
            };
            (error, failure)
        };
        let mut request = shared
            .http
            .request(call.method.clone(), url.clone())
            .query(&call.query)
            .timeout(shared.timeout + call.wait);
        if let Some(token) = &shared.token {
            request = request.header(AUTHORIZATION, token.clone());
        }
        if let Some(body) = &call.body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse().ok())
            .map(Duration::from_secs);
        let body = response.bytes().await.map(Vec::from).map_err(unreachable)?;
        if (200..300).contains(&status) {
            return Ok(Answer { status, body });
        }
        let error = ClientError::refusal(status, &body, retry_after.is_some());
        let failure = match status {
            503 => Failure::Unavailable {
                overloaded: error.code() == Some(ErrorCode::Overloaded),
                retry_after,
            },
            _ => Failure::Final,
        };
        Err((error, failure))
    }
}

/// Whether `error` is TLS refusing the connection (rustls' error among its causes): a server
/// certificate that is not trusted, or a client certificate the server refused.
fn refused_by_tls(error: &reqwest::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if error.is::<rustls::Error>() {
            return true;
        }
        // An `io::Error`'s `source` skips the error it wraps (itself often an `io::Error`).
        cause = match error.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => error.source(),
        };
    }
    false
}
