//! What an append is made of, and what it answers: records, outcomes, rejections, and the
//! checks and checksums of records. Plain data and rules, shared by the store, the committer
//! and the callers that validate a request before sending it.

use super::record::{Header, Payload, parts_refusal};
use crate::error_code::ErrorCode;

/// Longest deduplication key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// A record to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    /// Deduplication key: appending a key that a hot record already has returns that record's
    /// offset and writes nothing. `None` stores no key.
    pub key: Option<String>,
    /// The record's body (JSON text is stored and returned as is).
    pub payload: Payload,
    /// The message key (Kafka's record key): it may repeat and deduplicates nothing.
    pub message_key: Option<Vec<u8>>,
    /// Headers, in order.
    pub headers: Vec<Header>,
}

impl NewRecord {
    /// A record of `payload` (JSON text, or a [`Payload`]) without a deduplication key.
    pub fn new(payload: impl Into<Payload>) -> Self {
        Self {
            key: None,
            payload: payload.into(),
            message_key: None,
            headers: Vec::new(),
        }
    }

    /// A record with a deduplication key.
    pub fn keyed(key: impl Into<String>, payload: impl Into<Payload>) -> Self {
        Self {
            key: Some(key.into()),
            ..Self::new(payload)
        }
    }

    /// The same record with a message key.
    pub fn with_message_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.message_key = Some(key.into());
        self
    }

    /// The same record with `headers`.
    pub fn with_headers(mut self, headers: Vec<Header>) -> Self {
        self.headers = headers;
        self
    }
}

/// What an append did: either every record has an offset, or the batch was refused whole.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum AppendOutcome {
    /// The batch is durable; `offsets[i]` is the offset of input record `i` (an older offset
    /// where the record's key was already present).
    Appended {
        /// One offset per input record, in input order.
        offsets: Vec<u64>,
    },
    /// A definite rejection: nothing was written and retrying the same batch is refused again.
    Rejected(AppendRejection),
}

impl AppendOutcome {
    /// Whether the batch was appended (not refused).
    pub fn is_appended(&self) -> bool {
        matches!(self, Self::Appended { .. })
    }
}

/// Why a batch was refused. These are answers, not failures: nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AppendRejection {
    /// The batch holds no record.
    #[error("a batch must hold at least one record")]
    EmptyBatch,
    /// More records than `max_batch_size`.
    #[error("a batch may hold at most {max} records, this one holds {records}")]
    BatchTooLarge {
        /// Records in the batch.
        records: usize,
        /// The limit.
        max: usize,
    },
    /// A deduplication key that is empty or longer than [`MAX_KEY_BYTES`].
    #[error(
        "record {index}: a deduplication key must be 1 to {max} bytes, this one is {bytes}",
        max = MAX_KEY_BYTES
    )]
    InvalidKey {
        /// Position of the record in the batch.
        index: usize,
        /// Length of the key in bytes.
        bytes: usize,
    },
    /// A message key or headers over their limits.
    #[error("record {index}: {reason}")]
    InvalidParts {
        /// Position of the record in the batch.
        index: usize,
        /// Which limit, and by how much.
        reason: String,
    },
    /// A payload larger than `max_record_bytes`.
    #[error("record {index}: payload of {bytes} bytes exceeds the limit of {max}")]
    RecordTooLarge {
        /// Position of the record in the batch.
        index: usize,
        /// Size of its payload.
        bytes: usize,
        /// The limit.
        max: usize,
    },
}

impl AppendRejection {
    /// The stable error code of this rejection (the REST API's `error.code`).
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::EmptyBatch | Self::InvalidKey { .. } | Self::InvalidParts { .. } => {
                ErrorCode::InvalidRequest
            }
            Self::BatchTooLarge { .. } => ErrorCode::BatchTooLarge,
            Self::RecordTooLarge { .. } => ErrorCode::RecordTooLarge,
        }
    }
}

/// A record's checksum as stored beside it: CRC-32C (the CPU's own instruction where it has
/// one) of its offset, key, payload and other parts (`records.meta`), so an altered payload,
/// key or part, or a row moved to another offset, is found when it is read. A record without
/// parts sums as records did before parts existed.
pub(super) fn record_checksum(
    offset: u64,
    key: Option<&str>,
    payload: &[u8],
    meta: Option<&[u8]>,
) -> u32 {
    let mut crc = crc32c::crc32c(payload);
    if let Some(meta) = meta {
        crc = crc32c::crc32c_append(crc, meta) ^ (meta.len() as u32).rotate_left(24);
    }
    if let Some(key) = key {
        crc = crc32c::crc32c_append(crc, key.as_bytes()) ^ (key.len() as u32).rotate_left(16);
    }
    // The offset is folded in, not hashed: a row moved to another offset still fails.
    crc ^ (offset as u32) ^ ((offset >> 32) as u32).rotate_left(8)
}

/// The definite rejections of an append ([`AppendRejection`]), checked before anything is written: the one
/// definition, used by the store and by callers that validate a request before sending it.
pub fn check_batch(
    batch: &[NewRecord],
    max_batch_size: usize,
    max_record_bytes: usize,
) -> Option<AppendRejection> {
    let max = max_batch_size;
    if batch.is_empty() {
        return Some(AppendRejection::EmptyBatch);
    }
    if batch.len() > max {
        return Some(AppendRejection::BatchTooLarge {
            records: batch.len(),
            max,
        });
    }
    batch.iter().enumerate().find_map(|(index, record)| {
        let key_bytes = record.key.as_ref().map_or(1, String::len);
        if !(1..=MAX_KEY_BYTES).contains(&key_bytes) {
            return Some(AppendRejection::InvalidKey {
                index,
                bytes: key_bytes,
            });
        }
        if let Some(reason) = parts_refusal(record.message_key.as_deref(), &record.headers) {
            return Some(AppendRejection::InvalidParts { index, reason });
        }
        let max = max_record_bytes;
        (record.payload.len() > max).then_some(AppendRejection::RecordTooLarge {
            index,
            bytes: record.payload.len(),
            max,
        })
    })
}
