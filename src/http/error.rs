//! The one place that knows HTTP status codes: every error becomes
//! `{"error": {"code", "message", ...details}}` with the status its code promises.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde_json::{Map, Value, json};

use crate::error::Error;
use crate::log::{AppendRejection, StoreError};

/// Seconds a client is told to wait (`Retry-After`) before retrying an `overloaded` request.
const OVERLOADED_RETRY_AFTER_SECS: u32 = 1;

/// An error answered over HTTP.
#[derive(Debug)]
pub struct ApiError {
    code: &'static str,
    message: String,
    details: Map<String, Value>,
}

impl ApiError {
    /// An error with a code of the contract and a human message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Map::new(),
        }
    }

    /// `400 invalid_request`.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new("invalid_request", message)
    }

    /// `400 invalid_name`.
    pub fn invalid_name(message: impl Into<String>) -> Self {
        Self::new("invalid_name", message)
    }

    fn with(mut self, key: &str, value: Value) -> Self {
        self.details.insert(key.to_owned(), value);
        self
    }

    /// The stable error code.
    pub fn code(&self) -> &'static str {
        self.code
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self.code {
            "invalid_request" | "invalid_name" | "batch_too_large" | "record_too_large"
            | "invalid_offset" => StatusCode::BAD_REQUEST,
            "unauthorized" => StatusCode::UNAUTHORIZED,
            "unknown_partition" | "not_found" => StatusCode::NOT_FOUND,
            "method_not_allowed" => StatusCode::METHOD_NOT_ALLOWED,
            "lease_not_held" | "leases_disabled" => StatusCode::CONFLICT,
            "log_truncated" => StatusCode::GONE,
            "payload_too_large" => StatusCode::PAYLOAD_TOO_LARGE,
            "corrupted" => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut error = Map::new();
        error.insert("code".into(), json!(self.code));
        error.insert("message".into(), json!(self.message));
        error.extend(self.details.clone());
        let mut response = HttpResponse::build(self.status_code());
        match self.code {
            "overloaded" => {
                response.insert_header((
                    actix_web::http::header::RETRY_AFTER,
                    OVERLOADED_RETRY_AFTER_SECS,
                ));
            }
            // RFC 9110: a 401 names the scheme that would be accepted.
            "unauthorized" => {
                response.insert_header((actix_web::http::header::WWW_AUTHENTICATE, "Bearer"));
            }
            _ => {}
        }
        response.json(json!({ "error": error }))
    }
}

impl From<Error> for ApiError {
    fn from(err: Error) -> Self {
        let base = Self::new(err.code(), crate::error::with_causes(&err));
        match &err {
            Error::Store(StoreError::Truncated {
                requested_offset,
                oldest_offset,
            }) => base
                .with("requestedOffset", json!(requested_offset))
                .with("oldestOffset", json!(oldest_offset)),
            Error::Store(StoreError::LeaseNotHeld { batch_id }) => {
                base.with("batchId", json!(batch_id))
            }
            Error::Store(StoreError::InvalidOffset { next_offset, .. }) => {
                base.with("nextOffset", json!(next_offset))
            }
            Error::UnknownPartition { partitions, .. } => {
                base.with("partitions", json!(partitions))
            }
            _ => base,
        }
    }
}

impl From<AppendRejection> for ApiError {
    fn from(rejection: AppendRejection) -> Self {
        Self::new(rejection.code(), rejection.to_string())
    }
}

#[cfg(test)]
mod tests {
    use actix_web::ResponseError;
    use actix_web::http::header::RETRY_AFTER;

    use super::ApiError;
    use crate::error::Error;
    use crate::log::StoreError;

    /// `overloaded` is a 503 that tells the client when to retry; `unavailable` is not.
    #[test]
    fn overloaded_is_503_with_retry_after() {
        let overloaded = ApiError::from(Error::Overloaded {
            partition: "t:0".into(),
            open: 32,
        });
        let response = overloaded.error_response();
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers().get(RETRY_AFTER).unwrap(), "1");
        assert_eq!(overloaded.code(), "overloaded");

        let unavailable = ApiError::from(Error::PartitionStopped).error_response();
        assert_eq!(unavailable.status(), 503);
        assert!(unavailable.headers().get(RETRY_AFTER).is_none());
    }

    /// Damaged files are a 500 that no retry cures, not a 503.
    #[test]
    fn corrupted_is_500_without_retry_after() {
        let corrupted = ApiError::from(Error::Store(StoreError::Corrupted {
            reason: "the volume v.sqlite is damaged: database disk image is malformed".into(),
        }));
        let response = corrupted.error_response();
        assert_eq!(response.status(), 500);
        assert!(response.headers().get(RETRY_AFTER).is_none());
        assert_eq!(corrupted.code(), "corrupted");
    }
}
