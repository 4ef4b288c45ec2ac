//! What the replica stores in the bucket, and under which keys.
//!
//! - `{prefix}/volumes`: how many volumes the bucket's data is spread over, fixed at first use.
//! - `{prefix}/cluster`: the name of the cluster whose nodes write under the prefix, fixed by
//!   its first node (absent while a single node writes there).
//! - `{prefix}/wal/{node}/{inc}/{seq}`: a node incarnation's write-ahead stream. Each object is
//!   a [`Window`] (what the node's volumes committed together) or a [`FENCE`] (the stream is
//!   sealed there: another node took its volumes). Seq 0 claims the incarnation.
//! - `{prefix}/batch/{node}/{inc}/{first}-{last}`: the windows `first..=last` of a stream once
//!   they all landed, again, in one [`Batch`]: a node taking volumes over reads a long history
//!   with one GET per batch instead of one per window. Written after the fact and never
//!   required: where no batch is found, the windows are read one by one.
//! - `{prefix}/vol/{volume}/manifest`: a volume's [`Manifest`].
//! - `{prefix}/vol/{volume}/snapshot/{node}-{inc}-{seq}`: a copy of a volume's database file.
//! - `{prefix}/probe/{node}-{id}`: an object written and deleted at each start, before anything
//!   else, to check that the bucket honours conditional writes (see `probe.rs`).
//!
//! Numbers in keys are zero-padded, so keys sort as their numbers do.

use serde::{Deserialize, Serialize};

use crate::store::Position;

/// What begins a window, with its format's version.
const WINDOW: &[u8] = b"DURABILITY-WINDOW-1\n";
/// What begins a fence.
const FENCE: &[u8] = b"DURABILITY-FENCE-1\n";
/// What begins a batch, with its format's version.
const BATCH: &[u8] = b"DURABILITY-BATCH-1\n";

/// The object keys of one bucket prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    pub(crate) fn volumes(&self) -> String {
        format!("{}/volumes", self.prefix)
    }

    pub(crate) fn cluster(&self) -> String {
        format!("{}/cluster", self.prefix)
    }

    /// The folder of every stream.
    pub(crate) fn streams(&self) -> String {
        format!("{}/wal/", self.prefix)
    }

    /// The node, incarnation and seq of the window key `key`, if it is one.
    pub(crate) fn parse_window<'k>(&self, key: &'k str) -> Option<(&'k str, u64, u64)> {
        let rest = key.strip_prefix(&self.streams())?;
        let mut parts = rest.split('/');
        let node = parts.next()?;
        let inc = parts.next()?.parse().ok()?;
        let seq = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some((node, inc, seq))
    }

    /// The folder of volume `volume`'s snapshots.
    pub(crate) fn snapshots(&self, volume: usize) -> String {
        format!("{}/vol/{volume:04}/snapshot/", self.prefix)
    }

    /// The folder of `node`'s incarnations.
    pub(crate) fn incarnations(&self, node: &str) -> String {
        format!("{}/wal/{node}/", self.prefix)
    }

    /// The folder of one incarnation's stream.
    pub(crate) fn stream(&self, node: &str, inc: u64) -> String {
        format!("{}/wal/{node}/{inc:010}/", self.prefix)
    }

    pub(crate) fn window(&self, node: &str, inc: u64, seq: u64) -> String {
        format!("{}{seq:016}", self.stream(node, inc))
    }

    /// The folder of every stream's batches.
    pub(crate) fn batches(&self) -> String {
        format!("{}/batch/", self.prefix)
    }

    /// The folder of one incarnation's batches.
    pub(crate) fn stream_batches(&self, node: &str, inc: u64) -> String {
        format!("{}{node}/{inc:010}/", self.batches())
    }

    /// The batch of windows `first..=last` of stream `node`/`inc`.
    pub(crate) fn batch(&self, node: &str, inc: u64, first: u64, last: u64) -> String {
        format!("{}{first:016}-{last:016}", self.stream_batches(node, inc))
    }

    /// The node, incarnation, first and last seq of the batch key `key`, if it is one.
    pub(crate) fn parse_batch<'k>(&self, key: &'k str) -> Option<(&'k str, u64, u64, u64)> {
        let rest = key.strip_prefix(&self.batches())?;
        let mut parts = rest.split('/');
        let node = parts.next()?;
        let inc = parts.next()?.parse().ok()?;
        let (first, last) = parts.next()?.split_once('-')?;
        let (first, last) = (first.parse().ok()?, last.parse().ok()?);
        (parts.next().is_none() && first <= last).then_some((node, inc, first, last))
    }

    /// A start's probe object: `id` tells apart the starts of one node.
    pub(crate) fn probe(&self, node: &str, id: &str) -> String {
        format!("{}/probe/{node}-{id}", self.prefix)
    }

    pub(crate) fn manifest(&self, volume: usize) -> String {
        format!("{}/vol/{volume:04}/manifest", self.prefix)
    }

    pub(crate) fn snapshot(&self, volume: usize, at: &Position) -> String {
        format!(
            "{}{}-{:010}-{:016}",
            self.snapshots(volume),
            at.node,
            at.inc,
            at.seq
        )
    }
}

/// One volume's part of a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Section {
    pub volume: usize,
    /// The volume's manifest epoch when its owner wrote the window.
    pub epoch: u64,
    /// Where its changes lie in the window's body.
    pub offset: usize,
    pub len: usize,
    /// CRC-32C of those bytes.
    pub crc: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    node: String,
    inc: u64,
    seq: u64,
    sections: Vec<Section>,
}

/// What one window of a stream holds: each volume's changes, in commit order.
#[derive(Debug)]
pub(crate) struct Window {
    sections: Vec<Section>,
    body: Vec<u8>,
}

/// A stream object, read back.
#[derive(Debug)]
pub(crate) enum StreamObject {
    Window(Window),
    /// The stream is sealed here.
    Fence,
}

impl Window {
    /// Encodes a window of `changes` (volume, epoch, redo), written by `at`.
    pub(crate) fn encode(at: &Position, changes: &[(usize, u64, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        let sections = changes
            .iter()
            .map(|&(volume, epoch, redo)| {
                let section = Section {
                    volume,
                    epoch,
                    offset: body.len(),
                    len: redo.len(),
                    crc: crc32c::crc32c(redo),
                };
                body.extend_from_slice(redo);
                section
            })
            .collect();
        let header = Header {
            node: at.node.clone(),
            inc: at.inc,
            seq: at.seq,
            sections,
        };
        let mut bytes = WINDOW.to_vec();
        serde_json::to_writer(&mut bytes, &header).expect("a header serializes");
        bytes.push(b'\n');
        bytes.extend_from_slice(&body);
        bytes
    }

    /// The changes of volume `volume` in this window, in order.
    pub(crate) fn changes_of(&self, volume: usize) -> impl Iterator<Item = &[u8]> {
        self.sections
            .iter()
            .filter(move |section| section.volume == volume)
            .map(|section| &self.body[section.offset..section.offset + section.len])
    }
}

/// Consecutive windows of one stream stored again as one object (see the module docs): each
/// window's seq, length and CRC-32C, then its bytes as stored.
pub(crate) struct Batch;

impl Batch {
    /// Encodes `windows`, each its seq and its bytes as stored.
    pub(crate) fn encode(windows: &[(u64, std::sync::Arc<[u8]>)]) -> Vec<u8> {
        let mut bytes = BATCH.to_vec();
        for (seq, window) in windows {
            bytes.extend_from_slice(&seq.to_be_bytes());
            bytes.extend_from_slice(&(window.len() as u64).to_be_bytes());
            bytes.extend_from_slice(&crc32c::crc32c(window).to_be_bytes());
            bytes.extend_from_slice(window);
        }
        bytes
    }

    /// The windows of a batch, each its seq and its bytes; an error says what is wrong.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<(u64, &[u8])>, String> {
        let mut rest = bytes
            .strip_prefix(BATCH)
            .ok_or("not a batch of this version")?;
        let mut windows = Vec::new();
        while !rest.is_empty() {
            let (seq, after) = take_u64(rest)?;
            let (len, after) = take_u64(after)?;
            let (crc, after) = after.split_first_chunk::<4>().ok_or("a batch cut short")?;
            let len = usize::try_from(len).map_err(|_| "a window too long")?;
            if after.len() < len {
                return Err("a batch cut short".into());
            }
            let (window, after) = after.split_at(len);
            if crc32c::crc32c(window) != u32::from_be_bytes(*crc) {
                return Err(format!("window {seq} of a batch fails its checksum"));
            }
            windows.push((seq, window));
            rest = after;
        }
        Ok(windows)
    }
}

fn take_u64(bytes: &[u8]) -> Result<(u64, &[u8]), String> {
    let (number, rest) = bytes.split_first_chunk::<8>().ok_or("a batch cut short")?;
    Ok((u64::from_be_bytes(*number), rest))
}

/// A fence written by `by`.
pub(crate) fn fence(by: &Position) -> Vec<u8> {
    let mut bytes = FENCE.to_vec();
    serde_json::to_writer(&mut bytes, by).expect("a position serializes");
    bytes
}

/// Whether `bytes` are a fence.
pub(crate) fn is_fence(bytes: &[u8]) -> bool {
    bytes.starts_with(FENCE)
}

/// Reads a stream object; an error says what is wrong with it.
pub(crate) fn decode(bytes: &[u8]) -> Result<StreamObject, String> {
    if is_fence(bytes) {
        return Ok(StreamObject::Fence);
    }
    let rest = bytes
        .strip_prefix(WINDOW)
        .ok_or("neither a window nor a fence")?;
    let end = rest
        .iter()
        .position(|&b| b == b'\n')
        .ok_or("a window without a header")?;
    let header: Header =
        serde_json::from_slice(&rest[..end]).map_err(|err| format!("a window header: {err}"))?;
    let body = rest[end + 1..].to_vec();
    for section in &header.sections {
        let bytes = section
            .offset
            .checked_add(section.len)
            .and_then(|end| body.get(section.offset..end))
            .ok_or("a section beyond the window's end")?;
        if crc32c::crc32c(bytes) != section.crc {
            return Err(format!(
                "volume {}'s section fails its checksum",
                section.volume
            ));
        }
    }
    Ok(StreamObject::Window(Window {
        sections: header.sections,
        body,
    }))
}

/// A run of one incarnation's stream that belongs to a volume's history: windows `first` up
/// to `end` (exclusive), or every window from `first` while the stream is open (`end` none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Segment {
    pub node: String,
    pub inc: u64,
    pub first: u64,
    pub end: Option<u64>,
}

impl Segment {
    /// Whether this is incarnation `inc` of `node`'s stream, still open.
    pub(crate) fn open_of(&self, node: &str, inc: u64) -> bool {
        self.node == node && self.inc == inc && self.end.is_none()
    }

    /// Whether window `at` belongs to this segment.
    pub(crate) fn holds(&self, at: &Position) -> bool {
        at.node == self.node
            && at.inc == self.inc
            && at.seq >= self.first
            && self.end.is_none_or(|end| at.seq < end)
    }
}

/// A copy of a volume's database file, holding every window through `position`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    pub key: String,
    pub position: Position,
}

/// Who owns a volume: a node incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Owner {
    pub node: String,
    pub inc: u64,
}

/// A volume's history: a snapshot to start from (none: an empty volume), then the chain of
/// stream segments since it, the last one its owner's open stream. Replaced only with
/// `If-Match`; `version` grows on every write, so no two writes store the same bytes (an ETag
/// is the MD5 of the bytes: two writers storing identical bytes could both match).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub version: u64,
    /// Grows with every change of owner.
    pub epoch: u64,
    pub owner: Owner,
    pub snapshot: Option<Snapshot>,
    pub chain: Vec<Segment>,
}

/// Where a copy of a volume continues its history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resume {
    /// From the start of segment `index` of the chain, the copy holding the snapshot.
    Start,
    /// After window `position`, in segment `segment` of the chain.
    After { segment: usize, position: Position },
}

impl Manifest {
    /// Where a copy at `position` (the last window it holds) continues, if it lies on this
    /// history: at the snapshot's position, or on a segment of the chain.
    pub(crate) fn resume(&self, position: Option<&Position>) -> Option<Resume> {
        if position == self.snapshot.as_ref().map(|snapshot| &snapshot.position) {
            return Some(Resume::Start);
        }
        let position = position?;
        self.chain
            .iter()
            .position(|segment| segment.holds(position))
            .map(|segment| Resume::After {
                segment,
                position: position.clone(),
            })
    }

    /// The chain of segments after window `position`, which must lie on it: what a snapshot
    /// holding every window through `position` still needs.
    pub(crate) fn chain_after(&self, position: &Position) -> Option<Vec<Segment>> {
        let at = self
            .chain
            .iter()
            .position(|segment| segment.holds(position))?;
        let mut chain = self.chain[at..].to_vec();
        chain[0].first = position.seq + 1;
        chain.retain(|segment| segment.end != Some(segment.first));
        Some(chain)
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a manifest serializes")
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        serde_json::from_slice(bytes).map_err(|err| format!("a manifest: {err}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seq: u64) -> Position {
        Position {
            node: "a".into(),
            inc: 2,
            seq,
        }
    }

    /// A window reads back as each volume's changes in order; a flipped byte fails its
    /// checksum; a fence reads back as a fence.
    #[test]
    fn windows_and_fences_read_back() {
        let bytes = Window::encode(&at(7), &[(0, 1, b"first"), (3, 1, b"x"), (0, 1, b"second")]);
        let StreamObject::Window(window) = decode(&bytes).unwrap() else {
            panic!("a window")
        };
        assert_eq!(
            window.changes_of(0).collect::<Vec<_>>(),
            vec![&b"first"[..], &b"second"[..]]
        );
        assert_eq!(window.changes_of(3).collect::<Vec<_>>(), vec![&b"x"[..]]);
        assert_eq!(window.changes_of(1).count(), 0);
        let mut damaged = bytes.clone();
        *damaged.last_mut().unwrap() ^= 1;
        assert!(decode(&damaged).is_err());
        assert!(matches!(decode(&fence(&at(9))), Ok(StreamObject::Fence)));
        assert!(decode(b"junk").is_err());
    }

    /// A batch reads back as its windows with their seqs, byte for byte; a flipped byte or a
    /// cut fails; its key names the stream and the range, and nothing else parses as one.
    #[test]
    fn batches_read_back_and_their_keys_parse() {
        let windows: Vec<(u64, std::sync::Arc<[u8]>)> = vec![
            (5, Window::encode(&at(5), &[(0, 1, b"five")]).into()),
            (6, Window::encode(&at(6), &[(2, 1, b"six")]).into()),
        ];
        let bytes = Batch::encode(&windows);
        let read = Batch::decode(&bytes).unwrap();
        assert_eq!(read.len(), 2);
        for ((seq, window), (read_seq, read_window)) in windows.iter().zip(&read) {
            assert_eq!((seq, &window[..]), (read_seq, *read_window));
        }
        let mut damaged = bytes.clone();
        *damaged.last_mut().unwrap() ^= 1;
        assert!(Batch::decode(&damaged).is_err());
        assert!(Batch::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(Batch::decode(b"junk").is_err());

        let keys = Keys::new("p/");
        let key = keys.batch("a", 2, 1, 64);
        assert_eq!(keys.parse_batch(&key), Some(("a", 2, 1, 64)));
        assert_eq!(keys.parse_batch(&keys.window("a", 2, 1)), None);
        assert_eq!(keys.parse_window(&key), None);
    }

    /// A copy resumes where its position lies on the history, and nowhere when it does not.
    #[test]
    fn a_copy_resumes_on_its_history_only() {
        let manifest = Manifest {
            version: 3,
            epoch: 2,
            owner: Owner {
                node: "b".into(),
                inc: 1,
            },
            snapshot: None,
            chain: vec![
                Segment {
                    node: "a".into(),
                    inc: 2,
                    first: 1,
                    end: Some(10),
                },
                Segment {
                    node: "b".into(),
                    inc: 1,
                    first: 1,
                    end: None,
                },
            ],
        };
        assert_eq!(manifest.resume(None), Some(Resume::Start));
        assert_eq!(
            manifest.resume(Some(&at(9))),
            Some(Resume::After {
                segment: 0,
                position: at(9)
            })
        );
        assert_eq!(manifest.resume(Some(&at(10))), None, "past the seal");
        let other = Position {
            node: "b".into(),
            inc: 1,
            seq: 500,
        };
        assert!(matches!(
            manifest.resume(Some(&other)),
            Some(Resume::After { segment: 1, .. })
        ));
        let stale = Position {
            node: "a".into(),
            inc: 1,
            seq: 3,
        };
        assert_eq!(manifest.resume(Some(&stale)), None);
        assert_eq!(manifest.chain_after(&stale), None);
        let after = manifest.chain_after(&at(9)).unwrap();
        assert_eq!(after.len(), 1, "segment a/2 is used up: {after:?}");
        assert_eq!((after[0].first, after[0].end), (1, None));
        let after = manifest.chain_after(&at(4)).unwrap();
        assert_eq!((after[0].first, after[0].end), (5, Some(10)));
        assert_eq!(after.len(), 2);
    }
}
