//! [`ClientError`]: why a call of the [`Client`](super::Client) failed, once its retries (see
//! [`RetryPolicy`](super::RetryPolicy)) are spent.

use crate::error::ErrorCode;
use crate::wire;

/// Why a call failed. Never shows the client's token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server refused, with the REST API's error: its code, message and details (the
    /// offsets of a `log_truncated`, the batch of a `lease_not_held`, ...). A 4xx and a
    /// `503 overloaded` changed nothing; a `503 unavailable` may have.
    #[error("{status} {}: {}", .detail.code, .detail.message)]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The error the server answered (its `retry_after` says whether it sent
        /// `Retry-After`).
        detail: wire::ErrorDetail,
    },
    /// No connection could be made, or no whole answer came (timed out, connection cut): a
    /// write may or may not have been applied.
    #[error("no answer from {url}: {reason}")]
    Unreachable {
        /// The request's URL, without its query.
        url: String,
        /// What failed.
        reason: String,
    },
    /// The server answered, and the answer is not what the API promises (a body that does not
    /// parse, an error from something other than the server, such as a proxy).
    #[error("an answer with status {status} could not be read: {reason}")]
    Unreadable {
        /// The HTTP status.
        status: u16,
        /// Why it could not be read.
        reason: String,
    },
    /// The client's settings are unusable (no URL, a malformed URL, a certificate file that
    /// does not hold a certificate, ...).
    #[error("invalid client settings: {0}")]
    Invalid(String),
}

impl ClientError {
    /// The REST API's stable error code, when the server refused.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Self::Refused { detail, .. } => Some(detail.code),
            Self::Unreachable { .. } | Self::Unreadable { .. } | Self::Invalid(_) => None,
        }
    }

    /// The refusal of an answer with `status` and `body`, which sent `Retry-After` or not.
    pub(super) fn refusal(status: u16, body: &[u8], retry_after: bool) -> Self {
        match serde_json::from_slice::<wire::ErrorBody>(body) {
            Ok(wire::ErrorBody { mut error }) => {
                error.retry_after = retry_after;
                Self::Refused {
                    status,
                    detail: error,
                }
            }
            Err(err) => Self::Unreadable {
                status,
                reason: format!(
                    "not the API's error body ({err}): {}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ),
            },
        }
    }
}
