//! [`ErrorCode`]: the stable code of every error, with its HTTP status and what it promises.
//!
//! Every error type's `code()` returns one, the REST error body carries its wire string, and
//! the HTTP status comes from [`ErrorCode::status`]: a new code does not compile without its
//! status. [`with_causes`] writes an error with its causes, as messages show them. A leaf
//! module, so the storage layer and the umbrella error both use it.

use std::fmt;

use serde::Serialize;

/// The stable, snake_case code of an error: the REST API's `error.code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorCode {
    /// `400`: a malformed request (body, query, empty batch, bad key, bad limit).
    InvalidRequest,
    /// `400`: a topic, group or partition name breaks the naming rules.
    InvalidName,
    /// `400`: more records in one batch than `log.max_batch_size`.
    BatchTooLarge,
    /// `400`: a record larger than `log.max_record_bytes`.
    RecordTooLarge,
    /// `400`: an offset the log cannot have (negative, or beyond its next offset).
    InvalidOffset,
    /// `401`: a bearer token is required and was missing or wrong.
    Unauthorized,
    /// `403`: the token is known, and lacks the permission the operation needs.
    Forbidden,
    /// `404`: a partition index at or beyond the topic's partition count.
    UnknownPartition,
    /// `404`: no such route.
    NotFound,
    /// `405`: the route does not serve that method.
    MethodNotAllowed,
    /// `409`: the lease's batch is not held by that group.
    LeaseNotHeld,
    /// `409`: leases are switched off for the topic.
    LeasesDisabled,
    /// `410`: the records asked for are gone; continue from the oldest readable offset.
    LogTruncated,
    /// `413`: the request body is larger than the server accepts.
    PayloadTooLarge,
    /// `421`: a request forwarded by another node of the cluster reached a node that does not
    /// own the partition's volume (any more); the forwarder reads the owners again.
    NotOwner,
    /// `500`: the configuration is invalid.
    InvalidConfig,
    /// `500`: the partition's volume is damaged and refuses writes (see the README's
    /// Guarantees); retrying does not help.
    Corrupted,
    /// `503`: every open partition is busy; nothing changed, retry after `Retry-After`.
    Overloaded,
    /// `503`: the storage failed; a write may or may not have happened, retry with the same
    /// deduplication keys.
    Unavailable,
}

impl ErrorCode {
    /// Every code, in the order of their statuses.
    pub const ALL: [Self; 19] = [
        Self::InvalidRequest,
        Self::InvalidName,
        Self::BatchTooLarge,
        Self::RecordTooLarge,
        Self::InvalidOffset,
        Self::Unauthorized,
        Self::Forbidden,
        Self::UnknownPartition,
        Self::NotFound,
        Self::MethodNotAllowed,
        Self::LeaseNotHeld,
        Self::LeasesDisabled,
        Self::LogTruncated,
        Self::PayloadTooLarge,
        Self::NotOwner,
        Self::InvalidConfig,
        Self::Corrupted,
        Self::Overloaded,
        Self::Unavailable,
    ];

    /// The wire string: `invalid_request`, `log_truncated`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::InvalidName => "invalid_name",
            Self::BatchTooLarge => "batch_too_large",
            Self::RecordTooLarge => "record_too_large",
            Self::InvalidOffset => "invalid_offset",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::UnknownPartition => "unknown_partition",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::LeaseNotHeld => "lease_not_held",
            Self::LeasesDisabled => "leases_disabled",
            Self::LogTruncated => "log_truncated",
            Self::PayloadTooLarge => "payload_too_large",
            Self::NotOwner => "not_owner",
            Self::InvalidConfig => "invalid_config",
            Self::Corrupted => "corrupted",
            Self::Overloaded => "overloaded",
            Self::Unavailable => "unavailable",
        }
    }

    /// The code of wire string `text`, if it is one.
    pub fn from_wire(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|code| code.as_str() == text)
    }

    /// The HTTP status that answers it.
    pub fn status(self) -> u16 {
        match self {
            Self::InvalidRequest
            | Self::InvalidName
            | Self::BatchTooLarge
            | Self::RecordTooLarge
            | Self::InvalidOffset => 400,
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::UnknownPartition | Self::NotFound => 404,
            Self::MethodNotAllowed => 405,
            Self::LeaseNotHeld | Self::LeasesDisabled => 409,
            Self::LogTruncated => 410,
            Self::PayloadTooLarge => 413,
            Self::NotOwner => 421,
            Self::InvalidConfig | Self::Corrupted => 500,
            Self::Overloaded | Self::Unavailable => 503,
        }
    }

    /// Whether an operation that failed with this code certainly changed nothing (so retrying
    /// it gets the same answer, or succeeds later without duplicating). Only `unavailable` is
    /// uncertain: the storage failed, and a write may or may not have happened. (A lease
    /// answered `log_truncated` records the loss it reports, which the README states.)
    pub fn changed_nothing(self) -> bool {
        self != Self::Unavailable
    }
}

impl<'de> serde::Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::from_wire(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code {text:?}")))
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with a wire string: `err.code() == "corrupted"`.
impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<ErrorCode> for &str {
    fn eq(&self, other: &ErrorCode) -> bool {
        *self == other.as_str()
    }
}

/// `err` followed by each of its causes: `storage failure: database disk image is malformed`.
/// A cause whose text already ends what is said is not repeated: an error that says its source
/// in its own message (`#[error("the bucket: {0}")] Bucket(#[from] ObjectError)`) still names
/// it as its source.
pub fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("the bucket: {0}")]
    struct SaysItsSource(#[from] std::io::Error);

    /// Each cause is said once, after its error, unless that error's message said it already.
    #[test]
    fn causes_are_said_once() {
        let cause = || std::io::Error::other("status 404");
        assert_eq!(
            with_causes(&SaysItsSource(cause())),
            "the bucket: status 404"
        );
        let outer = std::io::Error::other(SaysItsSource(cause()));
        assert_eq!(with_causes(&outer), "the bucket: status 404");
        let storage = crate::store::StoreError::Thread(cause());
        assert_eq!(with_causes(&storage), "cannot start a thread: status 404");
    }

    /// The wire string is what serde writes, and every code is listed once.
    #[test]
    fn wire_strings_are_the_serialized_names() {
        let mut seen = std::collections::BTreeSet::new();
        for code in ErrorCode::ALL {
            assert_eq!(
                serde_json::to_value(code).unwrap(),
                serde_json::json!(code.as_str())
            );
            assert!(seen.insert(code.as_str()), "{code} twice");
        }
    }

    /// Statuses follow the contract: every 4xx changed nothing, and only `unavailable` may
    /// have.
    #[test]
    fn statuses_and_certainty() {
        for code in ErrorCode::ALL {
            if code.status() < 500 {
                assert!(code.changed_nothing(), "{code}");
            }
        }
        assert_eq!(ErrorCode::Overloaded.status(), 503);
        assert!(ErrorCode::Overloaded.changed_nothing());
        assert!(!ErrorCode::Unavailable.changed_nothing());
        assert_eq!(ErrorCode::InvalidConfig.status(), 500);
    }
}
