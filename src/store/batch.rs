//! What an append is made of, and what it answers: records, outcomes, rejections, and the
//! checks and checksums of records. Plain data and rules, shared by the store, the committer
//! and the callers that validate a request before sending it.

use crate::error_code::ErrorCode;

/// Longest deduplication key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;

/// A record to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    /// Deduplication key: appending a key that a hot record already has returns that record's
    /// offset and writes nothing. `None` stores no key.
    pub key: Option<String>,
    /// The record's body, as JSON text (stored and returned as is).
    pub payload: String,
}

impl NewRecord {
    /// A record without a deduplication key.
    pub fn new(payload: impl Into<String>) -> Self {
        Self {
            key: None,
            payload: payload.into(),
        }
    }

    /// A record with a deduplication key.
    pub fn keyed(key: impl Into<String>, payload: impl Into<String>) -> Self {
        Self {
            key: Some(key.into()),
            payload: payload.into(),
        }
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
            Self::EmptyBatch | Self::InvalidKey { .. } => ErrorCode::InvalidRequest,
            Self::BatchTooLarge { .. } => ErrorCode::BatchTooLarge,
            Self::RecordTooLarge { .. } => ErrorCode::RecordTooLarge,
        }
    }
}

/// A record's checksum as stored beside it: CRC-32C (the CPU's own instruction where it has
/// one) of its offset, key and payload, so an altered payload or key, or a row moved to
/// another offset, is found when it is read.
pub(super) fn record_checksum(offset: u64, key: Option<&str>, payload: &str) -> u32 {
    let mut crc = crc32c::crc32c(payload.as_bytes());
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
        let max = max_record_bytes;
        (record.payload.len() > max).then_some(AppendRejection::RecordTooLarge {
            index,
            bytes: record.payload.len(),
            max,
        })
    })
}
