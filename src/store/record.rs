//! What a record holds beside its offset and deduplication key: a JSON or binary payload (or
//! none, a tombstone), an optional message key and ordered headers. One model serves REST and
//! Kafka clients alike, so nothing either sends is lost to the other.
//!
//! A volume stores the payload in `records.payload`: JSON as text, anything else as a blob.
//! What a plain JSON record does not have goes into `records.meta` (see [`Meta`]), `NULL` for a
//! plain JSON record, so such a record is stored, checked and replicated as before.

use rusqlite::types::{ToSqlOutput, Value, ValueRef};

use super::StoreError;

/// Longest message key, in bytes.
pub const MAX_MESSAGE_KEY_BYTES: usize = 1024;
/// Most headers on one record.
pub const MAX_HEADERS: usize = 64;
/// Most bytes of header names and values on one record.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// A record's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// JSON text, stored and returned byte for byte.
    Json(String),
    /// Bytes that are not JSON text (Avro, Protobuf, plain text, an empty value).
    Binary(Vec<u8>),
    /// No value at all: what Kafka calls a tombstone (distinct from the JSON text `null`).
    Null,
}

impl Payload {
    /// A JSON payload of `text` (not checked here: the front ends check what they receive).
    pub fn json(text: impl Into<String>) -> Self {
        Self::Json(text.into())
    }

    /// A Kafka value as a payload: valid JSON text is a JSON payload, other bytes a binary
    /// one, no value a tombstone.
    pub fn from_value(value: Option<Vec<u8>>) -> Self {
        match value {
            None => Self::Null,
            Some(bytes) if is_json_text(&bytes) => {
                Self::Json(String::from_utf8(bytes).expect("JSON text is UTF-8"))
            }
            Some(bytes) => Self::Binary(bytes),
        }
    }

    /// The payload's bytes (none for a tombstone).
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Json(text) => text.as_bytes(),
            Self::Binary(bytes) => bytes,
            Self::Null => &[],
        }
    }

    /// The JSON text, for a JSON payload.
    pub fn as_json(&self) -> Option<&str> {
        match self {
            Self::Json(text) => Some(text),
            _ => None,
        }
    }

    /// Bytes counted against `max_record_bytes` and byte retention.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether the payload has no bytes (a tombstone, or an empty binary value).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The payload as a value of the `records.payload` column.
    pub(super) fn column(&self) -> ToSqlOutput<'_> {
        ToSqlOutput::Borrowed(match self {
            Self::Json(text) => ValueRef::Text(text.as_bytes()),
            Self::Binary(bytes) => ValueRef::Blob(bytes),
            Self::Null => ValueRef::Blob(&[]),
        })
    }
}

/// A payload equals a JSON text when it is that JSON payload.
impl PartialEq<str> for Payload {
    fn eq(&self, text: &str) -> bool {
        self.as_json() == Some(text)
    }
}

impl PartialEq<&str> for Payload {
    fn eq(&self, text: &&str) -> bool {
        self.as_json() == Some(*text)
    }
}

impl PartialEq<String> for Payload {
    fn eq(&self, text: &String) -> bool {
        self.as_json() == Some(text.as_str())
    }
}

impl From<&str> for Payload {
    fn from(text: &str) -> Self {
        Self::Json(text.to_owned())
    }
}

impl From<String> for Payload {
    fn from(text: String) -> Self {
        Self::Json(text)
    }
}

/// Whether `bytes` is one JSON value (surrounding whitespace allowed), as Kafka values are
/// told apart.
fn is_json_text(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

/// One header: a name and a value (bytes, or none). Names may repeat; order is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The header's name.
    pub name: String,
    /// Its value; Kafka allows a header without one.
    pub value: Option<Vec<u8>>,
}

impl Header {
    /// A header of `name` and `value`.
    pub fn new(name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        Self {
            name: name.into(),
            value: Some(value.into()),
        }
    }
}

/// Why a record's message key or headers are refused, if they are.
pub(super) fn parts_refusal(message_key: Option<&[u8]>, headers: &[Header]) -> Option<String> {
    if let Some(key) = message_key
        && key.len() > MAX_MESSAGE_KEY_BYTES
    {
        return Some(format!(
            "a message key may hold at most {MAX_MESSAGE_KEY_BYTES} bytes, this one holds {}",
            key.len()
        ));
    }
    if headers.len() > MAX_HEADERS {
        return Some(format!(
            "a record may carry at most {MAX_HEADERS} headers, this one carries {}",
            headers.len()
        ));
    }
    let bytes: usize = headers
        .iter()
        .map(|header| header.name.len() + header.value.as_ref().map_or(0, Vec::len))
        .sum();
    (bytes > MAX_HEADER_BYTES).then(|| {
        format!("a record's headers may hold at most {MAX_HEADER_BYTES} bytes, these hold {bytes}")
    })
}

/// The `records.meta` column: what a plain JSON record does not have.
///
/// ```text
/// version (1) · flags (bit 0: tombstone, bit 1: message key)
/// [varint length · message key] · varint header count
/// per header: varint name length · name · varint (value length + 1, 0: no value) · value
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Meta {
    pub tombstone: bool,
    pub message_key: Option<Vec<u8>>,
    pub headers: Vec<Header>,
}

const META_VERSION: u8 = 1;
const TOMBSTONE: u8 = 1;
const MESSAGE_KEY: u8 = 2;

impl Meta {
    /// The column's value for a record, `None` for a plain JSON one.
    pub fn encode(
        payload: &Payload,
        message_key: Option<&[u8]>,
        headers: &[Header],
    ) -> Option<Vec<u8>> {
        let tombstone = matches!(payload, Payload::Null);
        if !tombstone && message_key.is_none() && headers.is_empty() {
            return None;
        }
        let mut out = vec![
            META_VERSION,
            (u8::from(tombstone) * TOMBSTONE) | (u8::from(message_key.is_some()) * MESSAGE_KEY),
        ];
        if let Some(key) = message_key {
            put_varint(&mut out, key.len() as u64);
            out.extend_from_slice(key);
        }
        put_varint(&mut out, headers.len() as u64);
        for header in headers {
            put_varint(&mut out, header.name.len() as u64);
            out.extend_from_slice(header.name.as_bytes());
            match &header.value {
                Some(value) => {
                    put_varint(&mut out, value.len() as u64 + 1);
                    out.extend_from_slice(value);
                }
                None => put_varint(&mut out, 0),
            }
        }
        Some(out)
    }

    /// Reads the column's value back.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut input = Input(bytes);
        let version = input.byte()?;
        if version != META_VERSION {
            return Err(format!("record parts of unknown version {version}"));
        }
        let flags = input.byte()?;
        let message_key = if flags & MESSAGE_KEY != 0 {
            let length = input.varint()?;
            Some(input.take(length)?.to_vec())
        } else {
            None
        };
        let count = input.varint()?;
        let mut headers = Vec::with_capacity(count.min(MAX_HEADERS as u64) as usize);
        for _ in 0..count {
            let length = input.varint()?;
            let name = String::from_utf8(input.take(length)?.to_vec())
                .map_err(|_| "a header name that is not UTF-8")?;
            let value = match input.varint()? {
                0 => None,
                length => Some(input.take(length - 1)?.to_vec()),
            };
            headers.push(Header { name, value });
        }
        if !input.0.is_empty() {
            return Err("bytes after the record's parts".into());
        }
        Ok(Self {
            tombstone: flags & TOMBSTONE != 0,
            message_key,
            headers,
        })
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn take(&mut self, length: u64) -> Result<&'a [u8], String> {
        if length > self.0.len() as u64 {
            return Err("record parts cut short".into());
        }
        let (taken, rest) = self.0.split_at(length as usize);
        self.0 = rest;
        Ok(taken)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a length of more than 64 bits".into())
    }
}

/// A record's payload and parts from its `payload` and `meta` columns.
pub(super) fn stored_parts(
    payload: Value,
    meta: Option<Vec<u8>>,
) -> Result<(Payload, Meta), StoreError> {
    let corrupted = |reason: String| StoreError::Corrupted { reason };
    let meta = match meta {
        Some(bytes) => Meta::decode(&bytes).map_err(corrupted)?,
        None => Meta::default(),
    };
    let payload = match payload {
        _ if meta.tombstone => Payload::Null,
        Value::Text(text) => Payload::Json(text),
        Value::Blob(bytes) => Payload::Binary(bytes),
        other => {
            return Err(corrupted(format!(
                "a payload stored as {:?}",
                other.data_type()
            )));
        }
    };
    Ok((payload, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kafka_value_is_json_only_when_it_is_one_json_text() {
        assert_eq!(
            Payload::from_value(Some(b" {\"a\":1} ".to_vec())),
            Payload::json(" {\"a\":1} ")
        );
        assert_eq!(
            Payload::from_value(Some(b"null".to_vec())),
            Payload::json("null")
        );
        assert_eq!(Payload::from_value(None), Payload::Null);
        for bytes in [&b""[..], b"a", b"{\"a\":1} x", b"\xff\xfe", b"1 2"] {
            assert_eq!(
                Payload::from_value(Some(bytes.to_vec())),
                Payload::Binary(bytes.to_vec()),
                "{bytes:?}"
            );
        }
    }

    #[test]
    fn parts_round_trip_and_a_plain_json_record_has_none() {
        assert_eq!(Meta::encode(&Payload::json("1"), None, &[]), None);
        let headers = vec![
            Header::new("a", "1"),
            Header::new("a", vec![0xff]),
            Header {
                name: "empty".into(),
                value: None,
            },
            Header::new("", ""),
        ];
        for (payload, key) in [
            (Payload::Null, None),
            (Payload::Binary(vec![1, 2]), Some(&b"k\x00"[..])),
            (Payload::json("{}"), Some(&[0x80; 300][..])),
        ] {
            let bytes = Meta::encode(&payload, key, &headers).unwrap();
            let meta = Meta::decode(&bytes).unwrap();
            assert_eq!(meta.tombstone, payload == Payload::Null);
            assert_eq!(meta.message_key.as_deref(), key);
            assert_eq!(meta.headers, headers);
        }
    }

    #[test]
    fn cut_or_padded_parts_are_refused() {
        let bytes = Meta::encode(&Payload::Null, Some(b"key"), &[Header::new("h", "v")]).unwrap();
        for end in 0..bytes.len() {
            assert!(Meta::decode(&bytes[..end]).is_err(), "cut at {end}");
        }
        let mut padded = bytes.clone();
        padded.push(0);
        assert!(Meta::decode(&padded).is_err());
    }

    #[test]
    fn limits_on_message_keys_and_headers() {
        assert!(parts_refusal(Some(&[0; MAX_MESSAGE_KEY_BYTES]), &[]).is_none());
        assert!(parts_refusal(Some(&[0; MAX_MESSAGE_KEY_BYTES + 1]), &[]).is_some());
        let many = vec![Header::new("h", ""); MAX_HEADERS + 1];
        assert!(parts_refusal(None, &many[..MAX_HEADERS]).is_none());
        assert!(parts_refusal(None, &many).is_some());
        let big = [Header::new("h", vec![0; MAX_HEADER_BYTES])];
        assert!(parts_refusal(None, &big).is_some());
    }
}
