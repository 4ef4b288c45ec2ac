//! The segment format: records flushed to the cold tier, self-describing and checksummed.
//!
//! ```text
//! durability-segment v1 sha256=<64 hex digits of the body>\n
//! {"topic":"events","partition":3,"firstOffset":0,"lastOffset":1,"records":[
//!   {"offset":0,"key":"k","payload":"<the record's JSON text>","appendedAt":1800000000000}, ...]}
//! ```
//!
//! A record's other parts are written only where it has them, so segments written before
//! they existed read as they did: `payloadBase64` instead of `payload` for a binary payload,
//! `"tombstone": true` (and no payload) for none, `messageKeyBase64`, and `headers`
//! (`[{"name": "...", "valueBase64": "..."}]`, the value absent when the header has none).
//!
//! The first line names the format, its version and the body's checksum; the body is JSON so
//! an operator can read a segment with any tool. A segment is accepted only if the checksum
//! matches, it belongs to the expected partition, and its records are exactly the offsets
//! `firstOffset..=lastOffset` in order.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Record;
use super::record::{Header, Payload};

const MAGIC: &str = "durability-segment";
const VERSION: &str = "v1";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    topic: String,
    partition: u32,
    first_offset: u64,
    last_offset: u64,
    records: Vec<Stored>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BodyRef<'a> {
    topic: &'a str,
    partition: u32,
    first_offset: u64,
    last_offset: u64,
    records: Vec<Stored>,
}

/// A record as a segment holds it.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    offset: u64,
    key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    payload_base64: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    tombstone: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message_key_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    headers: Vec<StoredHeader>,
    appended_at: i64,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredHeader {
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value_base64: Option<String>,
}

impl From<&Record> for Stored {
    fn from(record: &Record) -> Self {
        let (payload, payload_base64) = match &record.payload {
            Payload::Json(text) => (Some(text.clone()), None),
            Payload::Binary(bytes) => (None, Some(BASE64.encode(bytes))),
            Payload::Null => (None, None),
        };
        Self {
            offset: record.offset,
            key: record.key.clone(),
            payload,
            payload_base64,
            tombstone: record.payload == Payload::Null,
            message_key_base64: record.message_key.as_ref().map(|key| BASE64.encode(key)),
            headers: record
                .headers
                .iter()
                .map(|header| StoredHeader {
                    name: header.name.clone(),
                    value_base64: header.value.as_ref().map(|value| BASE64.encode(value)),
                })
                .collect(),
            appended_at: record.appended_at,
        }
    }
}

impl TryFrom<Stored> for Record {
    type Error = String;

    fn try_from(stored: Stored) -> Result<Self, String> {
        let decode = |text: &str| {
            BASE64
                .decode(text)
                .map_err(|err| format!("record {}: {err}", stored.offset))
        };
        let payload = match (&stored.payload, &stored.payload_base64, stored.tombstone) {
            (Some(text), None, false) => Payload::Json(text.clone()),
            (None, Some(bytes), false) => Payload::Binary(decode(bytes)?),
            (None, None, true) => Payload::Null,
            _ => return Err(format!("record {}: not one payload", stored.offset)),
        };
        let message_key = stored
            .message_key_base64
            .as_deref()
            .map(decode)
            .transpose()?;
        let headers = stored
            .headers
            .iter()
            .map(|header| {
                Ok(Header {
                    name: header.name.clone(),
                    value: header.value_base64.as_deref().map(decode).transpose()?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Self {
            offset: stored.offset,
            key: stored.key,
            payload,
            message_key,
            headers,
            appended_at: stored.appended_at,
        })
    }
}

/// An encoded segment and its checksum (`sha256=<hex>`), which the segment index keeps.
pub(super) struct Encoded {
    pub bytes: Vec<u8>,
    pub checksum: String,
}

/// Encodes contiguous `records` (at least one) of `topic`'s `partition`.
pub(super) fn encode(topic: &str, partition: u32, records: &[Record]) -> Encoded {
    let (first, last) = (records[0].offset, records[records.len() - 1].offset);
    let body = serde_json::to_vec(&BodyRef {
        topic,
        partition,
        first_offset: first,
        last_offset: last,
        records: records.iter().map(Stored::from).collect(),
    })
    .expect("records serialize");
    let checksum = format!("sha256={}", hex::encode(Sha256::digest(&body)));
    let mut bytes = format!("{MAGIC} {VERSION} {checksum}\n").into_bytes();
    bytes.extend_from_slice(&body);
    Encoded { bytes, checksum }
}

/// What a segment is expected to be, from the segment index.
pub(super) struct Expected<'a> {
    pub topic: &'a str,
    pub partition: u32,
    pub first_offset: u64,
    pub last_offset: u64,
    pub checksum: &'a str,
}

/// Decodes `bytes`, returning its records if it is exactly the expected segment, else why not.
pub(super) fn decode(bytes: &[u8], expected: &Expected<'_>) -> Result<Vec<Record>, String> {
    let newline = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("no header line")?;
    let header = std::str::from_utf8(&bytes[..newline]).map_err(|_| "header is not UTF-8")?;
    let body = &bytes[newline + 1..];
    match header.split(' ').collect::<Vec<_>>().as_slice() {
        [MAGIC, VERSION, checksum] => {
            if *checksum != expected.checksum {
                return Err(format!(
                    "checksum {checksum} is not the indexed {}",
                    expected.checksum
                ));
            }
        }
        _ => return Err(format!("unknown header {header:?}")),
    }
    let actual = format!("sha256={}", hex::encode(Sha256::digest(body)));
    if actual != expected.checksum {
        return Err(format!("body checksum {actual} does not match the header"));
    }
    let body: Body = serde_json::from_slice(body).map_err(|err| format!("body: {err}"))?;
    let offsets_match = body
        .records
        .iter()
        .map(|r| r.offset)
        .eq(expected.first_offset..=expected.last_offset);
    if body.topic != expected.topic
        || body.partition != expected.partition
        || body.first_offset != expected.first_offset
        || body.last_offset != expected.last_offset
        || !offsets_match
    {
        return Err("segment does not hold the indexed partition and offsets".into());
    }
    body.records.into_iter().map(Record::try_from).collect()
}

/// The checksum a segment's header names, for a segment found by listing the cold tier rather
/// than through the index (`decode` then checks the body against it).
pub(super) fn header_checksum(bytes: &[u8]) -> Option<&str> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let header = std::str::from_utf8(&bytes[..newline]).ok()?;
    match header.split(' ').collect::<Vec<_>>().as_slice() {
        [MAGIC, VERSION, checksum] => Some(checksum),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(first: u64, count: u64) -> Vec<Record> {
        (first..first + count)
            .map(|offset| Record {
                offset,
                key: (offset % 2 == 0).then(|| format!("k{offset}")),
                payload: Payload::json(format!("{{\"n\":{offset}}}")),
                message_key: None,
                headers: Vec::new(),
                appended_at: 1_800_000_000_000,
            })
            .collect()
    }

    fn expected<'a>(checksum: &'a str, first: u64, last: u64) -> Expected<'a> {
        Expected {
            topic: "events",
            partition: 3,
            first_offset: first,
            last_offset: last,
            checksum,
        }
    }

    /// A segment decodes back to exactly the records it was made of.
    #[test]
    fn round_trip() {
        let original = records(10, 3);
        let encoded = encode("events", 3, &original);
        assert_eq!(
            decode(&encoded.bytes, &expected(&encoded.checksum, 10, 12)).unwrap(),
            original
        );
    }

    /// Any flipped byte, a wrong partition or a wrong span is refused.
    #[test]
    fn damage_and_mismatch_are_refused() {
        let encoded = encode("events", 3, &records(0, 2));
        for index in [0, 30, encoded.bytes.len() / 2, encoded.bytes.len() - 1] {
            let mut damaged = encoded.bytes.clone();
            damaged[index] ^= 0x01;
            assert!(
                decode(&damaged, &expected(&encoded.checksum, 0, 1)).is_err(),
                "byte {index}"
            );
        }
        assert!(decode(&encoded.bytes, &expected(&encoded.checksum, 0, 2)).is_err());
        let other = Expected {
            topic: "other",
            ..expected(&encoded.checksum, 0, 1)
        };
        assert!(decode(&encoded.bytes, &other).is_err());
        assert!(decode(&encoded.bytes, &expected("sha256=00", 0, 1)).is_err());
    }

    /// The JSON body of an encoded segment (after its header line).
    fn body_json(bytes: &[u8]) -> serde_json::Value {
        let newline = bytes.iter().position(|&b| b == b'\n').unwrap();
        serde_json::from_slice(&bytes[newline + 1..]).unwrap()
    }

    /// Records with every part (JSON, binary, empty binary and no payload; UTF-8, binary and
    /// empty message keys; headers with a repeated name, a binary value, an empty value and
    /// none) decode back exactly, and are stored in the documented fields, each only where the
    /// record has it: a tombstone has no `payload`, unlike the JSON text `null`.
    #[test]
    fn records_with_every_part_round_trip() {
        let record =
            |offset, key: Option<&str>, payload, message_key: Option<&[u8]>, headers| Record {
                offset,
                key: key.map(str::to_owned),
                payload,
                message_key: message_key.map(<[u8]>::to_vec),
                headers,
                appended_at: 1_800_000_000_000,
            };
        let headers = vec![
            Header::new("trace", "abc"),
            Header::new("trace", vec![0xff, 0x00]),
            Header {
                name: "none".into(),
                value: None,
            },
            Header::new("", ""),
        ];
        let original = vec![
            record(
                5,
                Some("k5"),
                Payload::json("{\"n\":5}"),
                Some(b"user-1"),
                headers,
            ),
            record(
                6,
                None,
                Payload::Binary(vec![0xff, 0x00, 0xfe, 0x80]),
                Some(b"k\xff"),
                Vec::new(),
            ),
            record(7, None, Payload::Binary(Vec::new()), Some(b""), Vec::new()),
            record(8, Some("k8"), Payload::Null, Some(b"user-1"), Vec::new()),
            record(9, None, Payload::json("null"), None, Vec::new()),
        ];
        let encoded = encode("events", 3, &original);
        assert_eq!(
            decode(&encoded.bytes, &expected(&encoded.checksum, 5, 9)).unwrap(),
            original
        );
        let at = 1_800_000_000_000_i64;
        assert_eq!(
            body_json(&encoded.bytes)["records"],
            serde_json::json!([
                {"offset": 5, "key": "k5", "payload": "{\"n\":5}", "messageKeyBase64": "dXNlci0x",
                 "headers": [
                    {"name": "trace", "valueBase64": "YWJj"},
                    {"name": "trace", "valueBase64": "/wA="},
                    {"name": "none"},
                    {"name": "", "valueBase64": ""},
                 ],
                 "appendedAt": at},
                {"offset": 6, "key": null, "payloadBase64": "/wD+gA==",
                 "messageKeyBase64": "a/8=", "appendedAt": at},
                {"offset": 7, "key": null, "payloadBase64": "", "messageKeyBase64": "",
                 "appendedAt": at},
                {"offset": 8, "key": "k8", "tombstone": true, "messageKeyBase64": "dXNlci0x",
                 "appendedAt": at},
                {"offset": 9, "key": null, "payload": "null", "appendedAt": at},
            ])
        );
    }

    /// A segment written before records had parts (its body byte for byte as the module doc
    /// shows it, its header's checksum computed as `encode` does) decodes into JSON records
    /// without message key or headers; and plain records are still encoded into exactly those
    /// bytes, so earlier readers read new segments of plain records too.
    #[test]
    fn a_segment_of_the_earlier_format_reads_as_plain_json_records() {
        let body = concat!(
            r#"{"topic":"events","partition":3,"firstOffset":0,"lastOffset":1,"records":["#,
            r#"{"offset":0,"key":"k","payload":"{\"n\":0}","appendedAt":1800000000000},"#,
            r#"{"offset":1,"key":null,"payload":"\"text\"","appendedAt":1800000000001}]}"#,
        );
        let checksum = format!("sha256={}", hex::encode(Sha256::digest(body.as_bytes())));
        let bytes = format!("durability-segment v1 {checksum}\n{body}").into_bytes();
        let records = decode(&bytes, &expected(&checksum, 0, 1)).unwrap();
        assert_eq!(
            records,
            vec![
                Record {
                    offset: 0,
                    key: Some("k".into()),
                    payload: Payload::Json("{\"n\":0}".into()),
                    message_key: None,
                    headers: Vec::new(),
                    appended_at: 1_800_000_000_000,
                },
                Record {
                    offset: 1,
                    key: None,
                    payload: Payload::Json("\"text\"".into()),
                    message_key: None,
                    headers: Vec::new(),
                    appended_at: 1_800_000_000_001,
                },
            ]
        );
        let encoded = encode("events", 3, &records);
        assert_eq!(
            String::from_utf8(encoded.bytes).unwrap(),
            String::from_utf8(bytes).unwrap()
        );
        assert_eq!(encoded.checksum, checksum);
    }

    /// A stored record that names no payload, or two, is refused, as is base64 that does not
    /// decode: a segment never yields a record it does not describe.
    #[test]
    fn a_record_without_exactly_one_payload_is_refused() {
        for record in [
            r#"{"offset":0,"key":null,"appendedAt":0}"#,
            r#"{"offset":0,"key":null,"payload":"1","payloadBase64":"AQ==","appendedAt":0}"#,
            r#"{"offset":0,"key":null,"payload":"1","tombstone":true,"appendedAt":0}"#,
            r#"{"offset":0,"key":null,"payloadBase64":"%%","appendedAt":0}"#,
            r#"{"offset":0,"key":null,"payload":"1","messageKeyBase64":"%%","appendedAt":0}"#,
        ] {
            let body = format!(
                r#"{{"topic":"events","partition":3,"firstOffset":0,"lastOffset":0,"records":[{record}]}}"#
            );
            let checksum = format!("sha256={}", hex::encode(Sha256::digest(body.as_bytes())));
            let bytes = format!("durability-segment v1 {checksum}\n{body}").into_bytes();
            assert!(
                decode(&bytes, &expected(&checksum, 0, 0)).is_err(),
                "{record}"
            );
        }
    }
}
