//! The segment format: records flushed to the cold tier, self-describing and checksummed.
//!
//! ```text
//! durability-segment v1 sha256=<64 hex digits of the body>\n
//! {"topic":"events","partition":3,"firstOffset":0,"lastOffset":1,"records":[
//!   {"offset":0,"key":"k","payload":"<the record's JSON text>","appendedAt":1800000000000}, ...]}
//! ```
//!
//! The first line names the format, its version and the body's checksum; the body is JSON so
//! an operator can read a segment with any tool. A segment is accepted only if the checksum
//! matches, it belongs to the expected partition, and its records are exactly the offsets
//! `firstOffset..=lastOffset` in order.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::Record;

const MAGIC: &str = "durability-segment";
const VERSION: &str = "v1";

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    topic: String,
    partition: u32,
    first_offset: u64,
    last_offset: u64,
    records: Vec<Record>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BodyRef<'a> {
    topic: &'a str,
    partition: u32,
    first_offset: u64,
    last_offset: u64,
    records: &'a [Record],
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
        records,
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
    Ok(body.records)
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
                payload: format!("{{\"n\":{offset}}}"),
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
}
