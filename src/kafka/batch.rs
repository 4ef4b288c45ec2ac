//! Kafka record batches (format v2, "magic 2"): decoding what producers send, compressed or
//! not, into the log's records, and encoding the log's records for fetches.
//!
//! Written here rather than taken from `kafka-protocol`'s `records` module: a batch from the
//! wire is checked whole (its CRC, its lengths, a decompressed size bounded by the request
//! limit) before anything is kept, headers keep their order and repeated names, and a fetch
//! encodes straight from the log's records.
//!
//! ```text
//! batch:  baseOffset i64 · length i32 · leaderEpoch i32 · magic i8 (2) · crc u32 (CRC-32C of
//!         the rest) · attributes i16 · lastOffsetDelta i32 · baseTimestamp i64 ·
//!         maxTimestamp i64 · producerId i64 · producerEpoch i16 · baseSequence i32 ·
//!         count i32 · records (compressed as the attributes say)
//! record: length varint · attributes i8 · timestampDelta varlong · offsetDelta varint ·
//!         key (varint length, -1 for none) · value (the same) ·
//!         header count varint · per header: name (varint length) · value (varint length, -1)
//! ```

use std::io::Read;

use crate::log::{Header, NewRecord, Payload, Record};

/// Bytes of a batch's header after its `length` field, before its records.
const AFTER_LENGTH: usize = 49;
/// Where the part a batch's CRC covers starts.
const CRC_FROM: usize = 21;
/// The attribute bits of a batch.
const COMPRESSION: i16 = 0x07;
const LOG_APPEND_TIME: i16 = 0x08;
const TRANSACTIONAL: i16 = 0x10;
const CONTROL: i16 = 0x20;

/// A producer's batch, decoded.
#[derive(Debug)]
pub struct ProducedBatch {
    /// Its producer, for idempotent producers (else -1).
    pub producer_id: i64,
    /// The producer's epoch.
    pub producer_epoch: i16,
    /// The sequence number of its first record (else -1).
    pub base_sequence: i32,
    /// How it came compressed: `none`, `gzip`, `snappy`, `lz4` or `zstd`.
    pub codec: &'static str,
    /// Its records, in order.
    pub records: Vec<NewRecord>,
}

/// Why a batch is refused: the protocol's `CORRUPT_MESSAGE`, or one it does not support.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Not a well-formed v2 batch (its CRC, its lengths, its compression).
    #[error("corrupt batch: {0}")]
    Corrupt(String),
    /// A well-formed batch of a kind this log does not take (transactions, old formats).
    #[error("unsupported batch: {0}")]
    Unsupported(String),
}

fn corrupt(why: impl Into<String>) -> BatchError {
    BatchError::Corrupt(why.into())
}

/// Decodes every batch of a produce request's `records` field. `limit` bounds the bytes any
/// batch may decompress to.
///
/// # Errors
/// The first batch that is malformed or unsupported: then nothing of the field is kept.
pub fn decode_batches(mut bytes: &[u8], limit: usize) -> Result<Vec<ProducedBatch>, BatchError> {
    let mut batches = Vec::new();
    while !bytes.is_empty() {
        let mut header = Reader(bytes);
        let _base_offset = header.i64()?;
        let length = header.i32()?;
        let length = usize::try_from(length)
            .ok()
            .filter(|&length| length >= AFTER_LENGTH && length <= header.0.len())
            .ok_or_else(|| corrupt(format!("a batch length of {length}")))?;
        let (batch, rest) = bytes.split_at(12 + length);
        batches.push(decode_batch(batch, limit)?);
        bytes = rest;
    }
    Ok(batches)
}

/// Decodes one whole batch (`bytes` is exactly its length).
fn decode_batch(bytes: &[u8], limit: usize) -> Result<ProducedBatch, BatchError> {
    let mut header = Reader(&bytes[12..]);
    let _leader_epoch = header.i32()?;
    let magic = header.i8()?;
    if magic != 2 {
        return Err(BatchError::Unsupported(format!(
            "message format v{magic}: only record batches (v2) are taken"
        )));
    }
    let crc = header.i32()? as u32;
    if crc32c::crc32c(&bytes[CRC_FROM..]) != crc {
        return Err(corrupt("its CRC does not match"));
    }
    let attributes = header.i16()?;
    if attributes & (TRANSACTIONAL | CONTROL) != 0 {
        return Err(BatchError::Unsupported(
            "transactional and control batches".into(),
        ));
    }
    let _last_offset_delta = header.i32()?;
    let _base_timestamp = header.i64()?;
    let _max_timestamp = header.i64()?;
    let producer_id = header.i64()?;
    let producer_epoch = header.i16()?;
    let base_sequence = header.i32()?;
    let count = header.i32()?;
    let data = decompress(attributes & COMPRESSION, header.0, limit)?;
    // Every record takes at least 7 bytes.
    let count = usize::try_from(count)
        .ok()
        .filter(|&count| count <= data.len() / 7)
        .ok_or_else(|| corrupt(format!("a record count of {count}")))?;
    let mut input = Reader(&data);
    let mut records = Vec::with_capacity(count);
    for index in 0..count {
        records.push(decode_record(&mut input).map_err(|err| match err {
            BatchError::Corrupt(why) => corrupt(format!("record {index}: {why}")),
            other => other,
        })?);
    }
    if !input.0.is_empty() {
        return Err(corrupt(format!(
            "{} bytes after its {count} records",
            input.0.len()
        )));
    }
    Ok(ProducedBatch {
        producer_id,
        producer_epoch,
        base_sequence,
        codec: CODECS[(attributes & COMPRESSION) as usize],
        records,
    })
}

/// One record of a batch's (decompressed) records.
fn decode_record(input: &mut Reader<'_>) -> Result<NewRecord, BatchError> {
    let length = input.varint()?;
    let length = usize::try_from(length)
        .ok()
        .filter(|&length| length <= input.0.len())
        .ok_or_else(|| corrupt(format!("a record length of {length}")))?;
    let mut record = Reader(input.take(length)?);
    let _attributes = record.i8()?;
    let _timestamp_delta = record.varint()?;
    let _offset_delta = record.varint()?;
    let key = record.nullable_bytes()?;
    let value = record.nullable_bytes()?;
    let count = record.varint()?;
    let count = usize::try_from(count)
        .ok()
        .filter(|&count| count <= record.0.len())
        .ok_or_else(|| corrupt(format!("a header count of {count}")))?;
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let name = record
            .nullable_bytes()?
            .ok_or_else(|| corrupt("a header without a name"))?;
        let name = String::from_utf8(name.to_vec())
            .map_err(|_| corrupt("a header name that is not UTF-8"))?;
        let value = record.nullable_bytes()?.map(<[u8]>::to_vec);
        headers.push(Header { name, value });
    }
    if !record.0.is_empty() {
        return Err(corrupt("bytes after its headers"));
    }
    Ok(NewRecord {
        key: None,
        payload: Payload::from_value(value.map(<[u8]>::to_vec)),
        message_key: key.map(<[u8]>::to_vec),
        headers,
    })
}

/// The codecs' names, by their number in a batch's attributes.
const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];

/// A batch's records, decompressed as `codec` says, at most `limit` bytes of them.
fn decompress(codec: i16, data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    let bounded = |reader: &mut dyn Read| -> Result<Vec<u8>, BatchError> {
        let mut out = Vec::new();
        reader
            .take(limit as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|err| corrupt(format!("its records do not decompress: {err}")))?;
        if out.len() > limit {
            return Err(corrupt(format!(
                "its records decompress to more than {limit} bytes"
            )));
        }
        Ok(out)
    };
    match codec {
        0 => Ok(data.to_vec()),
        1 => bounded(&mut flate2::read::MultiGzDecoder::new(data)),
        2 => snappy(data, limit),
        3 => bounded(&mut lz4_flex::frame::FrameDecoder::new(data)),
        4 => bounded(
            &mut ruzstd::decoding::StreamingDecoder::new(data)
                .map_err(|err| corrupt(format!("its zstd frame: {err}")))?,
        ),
        other => Err(corrupt(format!("compression codec {other}"))),
    }
}

/// The framing Java clients wrap snappy blocks in (librdkafka sends bare snappy).
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";

/// Snappy: bare, or in the xerial framing (a 16-byte header, then length-prefixed blocks).
fn snappy(data: &[u8], limit: usize) -> Result<Vec<u8>, BatchError> {
    let block = |block: &[u8], out: &mut Vec<u8>| -> Result<(), BatchError> {
        let length = snap::raw::decompress_len(block)
            .map_err(|err| corrupt(format!("a snappy block: {err}")))?;
        if out.len() + length > limit {
            return Err(corrupt(format!(
                "its records decompress to more than {limit} bytes"
            )));
        }
        let start = out.len();
        out.resize(start + length, 0);
        snap::raw::Decoder::new()
            .decompress(block, &mut out[start..])
            .map_err(|err| corrupt(format!("a snappy block: {err}")))?;
        Ok(())
    };
    let mut out = Vec::new();
    if !data.starts_with(XERIAL_MAGIC) {
        block(data, &mut out)?;
        return Ok(out);
    }
    let mut input = Reader(data.get(16..).ok_or_else(|| corrupt("a snappy header"))?);
    while !input.0.is_empty() {
        let length = input.i32()?;
        let length = usize::try_from(length).map_err(|_| corrupt("a snappy block length"))?;
        block(input.take(length)?, &mut out)?;
    }
    Ok(out)
}

/// Reads the big-endian integers and zigzag varints of the format.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, length: usize) -> Result<&'a [u8], BatchError> {
        if length > self.0.len() {
            return Err(corrupt("it ends early"));
        }
        let (taken, rest) = self.0.split_at(length);
        self.0 = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], BatchError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    fn i8(&mut self) -> Result<i8, BatchError> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    fn i16(&mut self) -> Result<i16, BatchError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    fn i32(&mut self) -> Result<i32, BatchError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, BatchError> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    /// A zigzag varint of up to 64 bits.
    fn varint(&mut self) -> Result<i64, BatchError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.array::<1>()?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok((value >> 1) as i64 ^ -((value & 1) as i64));
            }
        }
        Err(corrupt("a varint of more than 64 bits"))
    }

    /// Bytes with a varint length, `None` for -1.
    fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, BatchError> {
        match self.varint()? {
            -1 => Ok(None),
            length => {
                let length = usize::try_from(length)
                    .map_err(|_| corrupt(format!("a length of {length}")))?;
                self.take(length).map(Some)
            }
        }
    }
}

/// Appends `records` (consecutive, in offset order) to `out` as uncompressed v2 batches: one
/// per run of records appended at the same time, each declaring that time as its
/// `LogAppendTime`.
pub fn encode_records(records: &[Record], out: &mut Vec<u8>) {
    for run in records.chunk_by(|a, b| a.appended_at == b.appended_at) {
        encode_batch(run, out);
    }
}

fn encode_batch(records: &[Record], out: &mut Vec<u8>) {
    let start = out.len();
    let first = &records[0];
    out.extend_from_slice(&(first.offset as i64).to_be_bytes());
    out.extend_from_slice(&[0; 4]); // length, below
    out.extend_from_slice(&0i32.to_be_bytes()); // leader epoch
    out.push(2); // magic
    out.extend_from_slice(&[0; 4]); // CRC, below
    out.extend_from_slice(&LOG_APPEND_TIME.to_be_bytes());
    out.extend_from_slice(&(records.len() as i32 - 1).to_be_bytes());
    out.extend_from_slice(&first.appended_at.to_be_bytes());
    out.extend_from_slice(&first.appended_at.to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    out.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    out.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    out.extend_from_slice(&(records.len() as i32).to_be_bytes());
    let mut body = Vec::new();
    for (delta, record) in records.iter().enumerate() {
        body.clear();
        body.push(0); // attributes
        put_varint(&mut body, 0); // timestamp delta
        put_varint(&mut body, delta as i64);
        put_nullable(&mut body, record.message_key.as_deref());
        let value = match &record.payload {
            Payload::Null => None,
            payload => Some(payload.as_bytes()),
        };
        put_nullable(&mut body, value);
        put_varint(&mut body, record.headers.len() as i64);
        for header in &record.headers {
            put_nullable(&mut body, Some(header.name.as_bytes()));
            put_nullable(&mut body, header.value.as_deref());
        }
        put_varint(out, body.len() as i64);
        out.extend_from_slice(&body);
    }
    let length = (out.len() - start - 12) as i32;
    out[start + 8..start + 12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&out[start + CRC_FROM..]);
    out[start + 17..start + 21].copy_from_slice(&crc.to_be_bytes());
}

/// The bytes [`encode_records`] would write for `record`, near enough to fill a fetch up to
/// its byte limits.
pub fn encoded_size(record: &Record) -> usize {
    let headers: usize = record
        .headers
        .iter()
        .map(|header| header.name.len() + header.value.as_ref().map_or(0, Vec::len) + 4)
        .sum();
    12 + record.payload.len() + record.message_key.as_ref().map_or(0, Vec::len) + headers
}

fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push(zigzag as u8 | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

fn put_nullable(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(bytes) => {
            put_varint(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: u64, appended_at: i64, payload: Payload) -> Record {
        Record {
            offset,
            key: None,
            payload,
            message_key: Some(format!("k{offset}").into_bytes()),
            headers: vec![Header::new("h", "1"), Header::new("h", vec![0xff])],
            appended_at,
        }
    }

    /// Records encoded for a fetch decode back as a producer's batch would: the same values,
    /// keys and headers, one batch per append time.
    #[test]
    fn encoded_records_decode_back() {
        let records = vec![
            record(5, 10, Payload::json("{\"a\":1}")),
            record(6, 10, Payload::Binary(vec![0, 1, 2])),
            record(7, 11, Payload::Null),
            record(8, 11, Payload::Binary(Vec::new())),
        ];
        let mut bytes = Vec::new();
        encode_records(&records, &mut bytes);
        let batches = decode_batches(&bytes, 1 << 20).unwrap();
        assert_eq!(batches.len(), 2);
        let decoded: Vec<NewRecord> = batches.into_iter().flat_map(|b| b.records).collect();
        for (record, decoded) in records.iter().zip(&decoded) {
            assert_eq!(decoded.payload, record.payload);
            assert_eq!(decoded.message_key, record.message_key);
            assert_eq!(decoded.headers, record.headers);
        }
    }

    /// Any byte changed in a batch fails its CRC or its structure: it is refused whole.
    #[test]
    fn an_altered_batch_is_refused() {
        let mut bytes = Vec::new();
        encode_records(&[record(0, 1, Payload::json("1"))], &mut bytes);
        for at in 0..bytes.len() {
            let mut altered = bytes.clone();
            altered[at] ^= 0x01;
            if at < 8 || (12..16).contains(&at) {
                continue; // the base offset and leader epoch: producers send anything there
            }
            assert!(decode_batches(&altered, 1 << 20).is_err(), "byte {at}");
        }
        for end in 1..bytes.len() {
            assert!(
                decode_batches(&bytes[..end], 1 << 20).is_err(),
                "cut at {end}"
            );
        }
    }

    /// A compressed batch that would grow past the limit is refused before it does.
    #[test]
    fn decompression_is_bounded() {
        let zeros = vec![0u8; 1 << 20];
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gzip, &zeros).unwrap();
        let gzip = gzip.finish().unwrap();
        assert!(gzip.len() < 10_000);
        assert!(decompress(1, &gzip, 1 << 16).is_err());
        assert_eq!(decompress(1, &gzip, 1 << 20).unwrap().len(), 1 << 20);
        let snappy = snap::raw::Encoder::new().compress_vec(&zeros).unwrap();
        assert!(decompress(2, &snappy, 1 << 16).is_err());
        assert_eq!(decompress(2, &snappy, 1 << 20).unwrap(), zeros);
    }
}
