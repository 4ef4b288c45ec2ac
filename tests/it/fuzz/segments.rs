//! Segment decoding: corrupted cold segments must read back as truncation, never as different
//! data.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use durability::cold::{ColdStore, MemoryColdStore, SegmentKey};
use durability::store::{ColdTier, NewRecord, Record, Retention, StoreError, SyncMode};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use sha2::{Digest, Sha256};

use crate::common::{ReadNow, TestStore, block_on};

use super::{fuzz_cases, fuzz_seed, runner};

/// Records per segment (the store's `max_batch_size`, so also its page size).
const SEGMENT_BATCH: usize = 4;
/// Records appended per case: with `max_records` 2, the 2 hot records left by the previous
/// case and the first 6 of these go cold as two fresh segments of 4.
const CASE_RECORDS: u64 = 8;

/// A cold segment: its key, its original bytes and the offsets it holds.
type ColdSegment = (SegmentKey, Vec<u8>, std::ops::RangeInclusive<u64>);

/// A partition flushing to a [`MemoryColdStore`], and every record it was given.
///
/// Each case works on two fresh segments made for it (never read before, so never in the
/// store's cache of decoded segments): no reopening, no state shared between cases.
struct Segmented {
    store: TestStore,
    cold: Arc<MemoryColdStore>,
    /// Every record appended, by offset, as first read back from the hot window.
    originals: BTreeMap<u64, Record>,
    appended: u64,
}

impl Segmented {
    fn new() -> Self {
        let cold = Arc::new(MemoryColdStore::new());
        let tier = ColdTier {
            store: cold.clone() as Arc<dyn ColdStore>,
            prefix: "segments".into(),
            topic: "events".into(),
            partition: 0,
        };
        let store = TestStore::with(|options| {
            options
                .max_batch_size(SEGMENT_BATCH)
                .sync(SyncMode::Normal)
                .retention(Retention {
                    max_records: Some(2),
                    ..Retention::default()
                })
                .cold(tier)
        });
        let mut segmented = Self {
            store,
            cold,
            originals: BTreeMap::new(),
            appended: 0,
        };
        segmented.append(2);
        segmented
    }

    /// Appends `count` records (every other one with a deduplication key) and notes them as
    /// read back from the hot window.
    fn append(&mut self, count: u64) {
        let batch: Vec<NewRecord> = (self.appended..self.appended + count)
            .map(|n| {
                let payload = serde_json::json!({"n": n, "text": format!("record \"{n}\" é")});
                if n % 2 == 0 {
                    NewRecord::keyed(format!("key-{n}"), payload.to_string())
                } else {
                    NewRecord::new(payload.to_string())
                }
            })
            .collect();
        self.appended += count;
        for chunk in batch.chunks(SEGMENT_BATCH) {
            crate::common::append_ok(&self.store.store, chunk);
        }
        let bounds = self.store.store.bounds().unwrap();
        let mut from = bounds.hot_offset;
        while from < bounds.next_offset {
            let page = self.store.store.read_now(Some(from), None).unwrap();
            from = page.next_offset;
            for record in page.records {
                self.originals.insert(record.offset, record);
            }
        }
    }

    /// Appends and trims: the two fresh segments that trim made, in offset order.
    fn fresh_segments(&mut self) -> [ColdSegment; 2] {
        self.append(CASE_RECORDS);
        let hot = self.store.store.bounds().unwrap().hot_offset;
        let objects = self.cold.len();
        assert_eq!(block_on(self.store.store.trim()).unwrap(), CASE_RECORDS);
        assert_eq!(self.cold.len(), objects + 2, "trim made two segments");
        let batch = SEGMENT_BATCH as u64;
        [hot, hot + batch].map(|first| {
            let last = first + batch - 1;
            let key = SegmentKey::new("segments", "events", 0, first, last);
            let bytes = block_on(self.cold.get(&key))
                .unwrap()
                .unwrap_or_else(|| panic!("no segment {key}"));
            (key, bytes, first..=last)
        })
    }

    /// Replaces the object under `key` with `bytes` (or removes it), through the trait.
    fn install(&self, key: &SegmentKey, bytes: Option<&[u8]>) {
        block_on(self.cold.delete(key)).unwrap();
        if let Some(bytes) = bytes {
            block_on(self.cold.put(key, bytes)).unwrap();
        }
    }

    /// Pages through the partition from `from` to its end: every record returned must be the
    /// original one at its offset, and the offsets that cannot be read (truncation) are
    /// returned. Any other error, or an empty page before the end, is a failure.
    fn read_through(&self, mut from: u64) -> Result<BTreeSet<u64>, String> {
        let store = &self.store.store;
        let end = store
            .bounds()
            .map_err(|err| format!("bounds: {err:?}"))?
            .next_offset;
        let mut lost = BTreeSet::new();
        while from < end {
            match store.read_now(Some(from), None) {
                Ok(page) => {
                    if page.records.is_empty() {
                        return Err(format!("an empty page at {from} before the end {end}"));
                    }
                    for (expected_offset, record) in (from..).zip(&page.records) {
                        let original = self.originals.get(&expected_offset);
                        if Some(record) != original {
                            return Err(format!(
                                "read from {from}: got {record:?}, the original at \
                                 {expected_offset} is {original:?}"
                            ));
                        }
                    }
                    if page.next_offset != from + page.records.len() as u64 {
                        return Err(format!("page from {from} has next {}", page.next_offset));
                    }
                    from = page.next_offset;
                }
                Err(StoreError::Truncated {
                    requested_offset,
                    oldest_offset,
                }) => {
                    if requested_offset != from || oldest_offset <= from {
                        return Err(format!(
                            "read from {from}: Truncated {{ {requested_offset}, {oldest_offset} }}"
                        ));
                    }
                    lost.extend(from..oldest_offset);
                    from = oldest_offset;
                }
                Err(err) => return Err(format!("read from {from}: {err:?}")),
            }
        }
        Ok(lost)
    }
}

/// A corruption of a segment object.
#[derive(Debug, Clone)]
enum Corruption {
    /// XORs bytes at these positions with these non-zero masks.
    Flip(Vec<(Index, u8)>),
    /// Keeps only the first bytes.
    Truncate(Index),
    /// Adds garbage at the end.
    Append(Vec<u8>),
    /// Replaces the whole object with random bytes.
    Replace(Vec<u8>),
    /// Puts the checksum of the (current) body in the header, as a writer that re-hashed a
    /// changed body would.
    RehashHeader,
    /// Puts the other segment's checksum in the header.
    OtherChecksum,
    /// Replaces the object with the other segment's bytes.
    OtherSegment,
    /// Changes a byte inside the JSON body, then re-hashes the header.
    EditBodyAndRehash(usize, u8),
    /// Removes the object.
    Missing,
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        4 => prop::collection::vec((any::<Index>(), 1u8..=255), 1..4).prop_map(Corruption::Flip),
        3 => any::<Index>().prop_map(Corruption::Truncate),
        2 => prop::collection::vec(any::<u8>(), 1..64).prop_map(Corruption::Append),
        1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(Corruption::Replace),
        1 => Just(Corruption::RehashHeader),
        1 => Just(Corruption::OtherChecksum),
        1 => Just(Corruption::OtherSegment),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Corruption::EditBodyAndRehash(i, b)),
        1 => Just(Corruption::Missing),
    ]
}

/// `header line` and `body` of segment bytes (the header without its newline).
fn split_segment(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    Some((&bytes[..newline], &bytes[newline + 1..]))
}

fn with_header_checksum(bytes: &[u8], checksum: &str) -> Vec<u8> {
    match split_segment(bytes) {
        Some((_, body)) => {
            let mut out = format!("durability-segment v1 {checksum}\n").into_bytes();
            out.extend_from_slice(body);
            out
        }
        None => bytes.to_vec(),
    }
}

fn sha256_of(body: &[u8]) -> String {
    format!("sha256={}", hex::encode(Sha256::digest(body)))
}

/// Applies `corruption` to `bytes` (`None`: the object is removed); `other` is the other
/// segment's original bytes.
fn corrupt(mut bytes: Vec<u8>, corruption: &Corruption, other: &[u8]) -> Option<Vec<u8>> {
    let len = bytes.len();
    match corruption {
        Corruption::Flip(flips) => {
            if len > 0 {
                for (at, mask) in flips {
                    bytes[at.index(len)] ^= mask;
                }
            }
        }
        Corruption::Truncate(at) => bytes.truncate(at.index(len.max(1))),
        Corruption::Append(garbage) => bytes.extend_from_slice(garbage),
        Corruption::Replace(random) => bytes = random.clone(),
        Corruption::RehashHeader => {
            if let Some((_, body)) = split_segment(&bytes) {
                let checksum = sha256_of(body);
                bytes = with_header_checksum(&bytes, &checksum);
            }
        }
        Corruption::OtherChecksum => {
            if let Some((header, _)) = split_segment(other) {
                let header = String::from_utf8_lossy(header).into_owned();
                let checksum = header.rsplit(' ').next().unwrap_or_default().to_owned();
                bytes = with_header_checksum(&bytes, &checksum);
            }
        }
        Corruption::OtherSegment => bytes = other.to_vec(),
        Corruption::EditBodyAndRehash(at, byte) => {
            if let Some((_, body)) = split_segment(&bytes) {
                let mut body = body.to_vec();
                if !body.is_empty() {
                    let i = at % body.len();
                    body[i] = *byte;
                }
                let checksum = sha256_of(&body);
                let mut out = format!("durability-segment v1 {checksum}\n").into_bytes();
                out.extend_from_slice(&body);
                bytes = out;
            }
        }
        Corruption::Missing => return None,
    }
    Some(bytes)
}

/// One corruption case: which of the two fresh segments, the corruptions applied in turn,
/// and where reading starts (relative to the first fresh segment).
#[derive(Debug, Clone)]
struct CorruptionCase {
    segment: usize,
    corruptions: Vec<Corruption>,
    from: u64,
}

fn corruption_case() -> impl Strategy<Value = CorruptionCase> {
    (
        0usize..2,
        prop::collection::vec(corruption(), 1..4),
        prop_oneof![3 => Just(0u64), 1 => 0..CASE_RECORDS + 2],
    )
        .prop_map(|(segment, corruptions, from)| CorruptionCase {
            segment,
            corruptions,
            from,
        })
}

/// Makes two fresh segments, corrupts one, and checks the reads from `from` on: the damaged
/// segment's offsets (and only those) read as truncation, every other offset (the other
/// segment, the hot window) reads back as the original record. Returns whether the
/// corruption changed the segment at all.
fn check_corruption(segmented: &mut Segmented, case: &CorruptionCase) -> Result<bool, String> {
    let fresh = segmented.fresh_segments();
    let (key, original, range) = fresh[case.segment].clone();
    let other = &fresh[1 - case.segment].1;
    let corrupted = case
        .corruptions
        .iter()
        .try_fold(original.clone(), |bytes, c| corrupt(bytes, c, other));
    let damaged = corrupted.as_deref() != Some(&original[..]);
    segmented.install(&key, corrupted.as_deref());
    let from = fresh[0].2.start() + case.from;
    let lost = segmented.read_through(from)?;
    let expected: BTreeSet<u64> = if damaged {
        range.filter(|offset| *offset >= from).collect()
    } else {
        BTreeSet::new()
    };
    if lost != expected {
        return Err(format!(
            "lost offsets {lost:?}, expected {expected:?} (segment damaged: {damaged})"
        ));
    }
    Ok(damaged)
}

/// Random corruptions of a real cold segment (flipped bytes, truncation, appended garbage,
/// random bytes, a swapped or re-hashed header checksum, a re-hashed edited body, the other
/// segment's bytes, a missing object): reading never panics and never returns a record that
/// differs from the original; the damaged segment reads as `StoreError::Truncated` and every
/// other offset (the other segment, the hot window) still reads back exactly.
#[test]
fn fuzz_corrupted_segments_read_as_truncation() {
    let started = Instant::now();
    let mut segmented = Segmented::new();
    // Untouched segments read back whole, from the first record on.
    segmented.fresh_segments();
    assert_eq!(segmented.read_through(0), Ok(BTreeSet::new()));

    let segmented = RefCell::new(segmented);
    let executions = Cell::new(0u64);
    let damaged = Cell::new(0u64);
    let mut runner = runner(fuzz_cases(3000));
    let result = runner.run(&corruption_case(), |case| {
        executions.set(executions.get() + 1);
        let changed =
            check_corruption(&mut segmented.borrow_mut(), &case).map_err(TestCaseError::fail)?;
        if changed {
            damaged.set(damaged.get() + 1);
        }
        Ok(())
    });
    if let Err(err) = result {
        panic!("{err}");
    }
    eprintln!(
        "fuzz: {} segment corruptions ({} changed the bytes; seed {}) in {:.1} s",
        executions.get(),
        damaged.get(),
        fuzz_seed(),
        started.elapsed().as_secs_f64()
    );
}

/// The corruptions most likely to be mistaken for data, each checked explicitly: a body
/// changed (trailing whitespace, an edited byte) under a header re-hashed to match it, the
/// other segment's checksum or bytes, trailing garbage, an empty object, and an object
/// removed.
#[test]
fn corrupted_segment_edge_cases_read_as_truncation() {
    let mut segmented = Segmented::new();
    let cases = [
        (
            0,
            vec![Corruption::Append(b" ".to_vec()), Corruption::RehashHeader],
        ),
        (
            1,
            vec![Corruption::Append(b"\n".to_vec()), Corruption::RehashHeader],
        ),
        (1, vec![Corruption::EditBodyAndRehash(40, b' ')]),
        (1, vec![Corruption::OtherChecksum]),
        (0, vec![Corruption::OtherSegment]),
        (1, vec![Corruption::OtherSegment]),
        (1, vec![Corruption::Append(b"\n".to_vec())]),
        (0, vec![Corruption::Replace(Vec::new())]),
        (0, vec![Corruption::Missing]),
    ];
    for (segment, corruptions) in cases {
        for from in [0, 2, 4, 6, 9] {
            let case = CorruptionCase {
                segment,
                corruptions: corruptions.clone(),
                from,
            };
            match check_corruption(&mut segmented, &case) {
                Ok(true) => {}
                Ok(false) => panic!("{case:?} left the segment as it was"),
                Err(why) => panic!("{case:?}: {why}"),
            }
        }
    }
}
