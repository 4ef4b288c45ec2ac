//! Reads: bounds, pages of records, and the offsets that make a read valid.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension};

use super::batch::record_checksum;
use super::lock;
use super::record::{Header, Payload, stored_parts};
use super::{LogStore, StoreError, segment};
use crate::cold::SegmentKey;

/// One stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Position in the partition's log.
    pub offset: u64,
    /// The deduplication key it was appended with, if any.
    pub key: Option<String>,
    /// The record's body.
    pub payload: Payload,
    /// Its message key (Kafka's record key), if any.
    pub message_key: Option<Vec<u8>>,
    /// Its headers, in order.
    pub headers: Vec<Header>,
    /// When its batch was appended, in ms since the Unix epoch.
    pub appended_at: i64,
}

/// A record's row as read, before its checksum is checked and its parts decoded.
pub(super) struct StoredRow {
    pub offset: u64,
    pub key: Option<String>,
    /// `records.payload`: JSON text, or a blob.
    pub payload: Value,
    /// `records.meta`.
    pub meta: Option<Vec<u8>>,
    pub appended_at: i64,
    pub checksum: Option<i64>,
}

/// A page of records and where to continue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Page {
    /// Records in offset order.
    pub records: Vec<Record>,
    /// The offset to read from next: one past the last record, or the requested offset when
    /// the page is empty.
    pub next_offset: u64,
    /// Records between `next_offset` and the end of the log.
    pub lag: u64,
}

/// Which offsets a partition can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bounds {
    /// The oldest readable offset, counting cold segments; equals `next_offset` when nothing
    /// is readable.
    pub oldest_offset: u64,
    /// The oldest offset still in the hot window (SQLite); `next_offset` when it is empty.
    pub hot_offset: u64,
    /// The offset the next appended record will get.
    pub next_offset: u64,
}

impl LogStore {
    /// The partition's bounds.
    ///
    /// # Errors
    /// A storage failure.
    pub fn bounds(&self) -> Result<Bounds, StoreError> {
        let view = self.recent_view(0, 0);
        self.snapshot(|tx| self.bounds_in(tx, &view))
    }

    /// Reads up to `limit` records from `from` (default: the oldest readable offset). `limit`
    /// defaults to, and is capped at, `max_batch_size`. A read below the hot window is served
    /// from cold segments and continues across consecutive segments and into the hot window
    /// until the page is full.
    ///
    /// Blocks the calling thread for SQLite work; awaits cold-store I/O only for cold reads.
    ///
    /// # Errors
    /// [`StoreError::InvalidLimit`] for a zero limit, [`StoreError::InvalidOffset`] when
    /// `from` is beyond `next_offset`, [`StoreError::Truncated`] when the records at `from`
    /// are gone (below the oldest readable offset, or their segment is missing or damaged),
    /// [`StoreError::Cold`] when the cold store cannot be reached, or a storage failure.
    pub async fn read(&self, from: Option<u64>, limit: Option<usize>) -> Result<Page, StoreError> {
        let limit = self.page_limit(limit)?;
        if let Some(loss) = self.volume.shared().known_loss() {
            return self.read_lost(loss.to_owned(), from, limit).await;
        }
        let view = self.recent_view(from.unwrap_or(0), limit);
        let start = self.snapshot(|tx| {
            let bounds = self.bounds_in(tx, &view)?;
            let from = from.unwrap_or(bounds.oldest_offset);
            check_offset(from, bounds.next_offset)?;
            if from < bounds.oldest_offset {
                return Err(StoreError::Truncated {
                    requested_offset: from,
                    oldest_offset: bounds.oldest_offset,
                });
            }
            if from < bounds.hot_offset {
                return Ok(Err(from));
            }
            Ok(Ok(self.finish_page(
                tx,
                &bounds,
                &view,
                from,
                Vec::new(),
                limit,
            )?))
        })?;
        match start {
            Ok(hot_page) => Ok(hot_page),
            Err(from) => self.read_cold(from, limit).await,
        }
    }

    /// A page starting below the hot window: whole consecutive segments, then hot records.
    async fn read_cold(&self, from: u64, limit: usize) -> Result<Page, StoreError> {
        let mut records: Vec<Record> = Vec::new();
        let mut position = from;
        while records.len() < limit {
            let Some(indexed) = self.snapshot(|tx| segment_containing(tx, self.key, position))?
            else {
                break; // the hot window, or a gap that the next read reports
            };
            let Some(segment) = self.fetch_segment(&indexed).await? else {
                break; // missing or damaged: truncation, reported below or by the next read
            };
            let wanted = limit - records.len();
            records.extend(
                segment
                    .iter()
                    .filter(|r| r.offset >= position)
                    .take(wanted)
                    .cloned(),
            );
            position = records.last().map_or(position, |last| last.offset + 1);
        }
        let view = self.recent_view(position, limit);
        self.snapshot(|tx| {
            let bounds = self.bounds_in(tx, &view)?;
            if records.is_empty() {
                // Nothing could be read at `from` although it is not below the oldest offset.
                let oldest_offset = next_readable_after(tx, self.key, from, &bounds)?;
                return Err(StoreError::Truncated {
                    requested_offset: from,
                    oldest_offset,
                });
            }
            self.finish_page(tx, &bounds, &view, position, records, limit)
        })
    }

    /// A read of a partition whose volume lost acknowledged commits ([`Volume::known_loss`]):
    /// only what intact cold segments hold can be vouched for, and they are found by listing
    /// the cold tier, as the segment index may be lost too. Anything else is `corrupted`, and
    /// `lag` counts only what the listed segments hold past the page.
    ///
    /// [`Volume::known_loss`]: super::Volume::known_loss
    async fn read_lost(
        &self,
        loss: String,
        from: Option<u64>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        let not_vouched = |position: u64| StoreError::Corrupted {
            reason: format!("{loss}; offset {position} is in no intact cold segment"),
        };
        let Some(cold) = &self.options.cold else {
            return Err(not_vouched(from.unwrap_or(0)));
        };
        let prefix = SegmentKey::partition_prefix(&cold.prefix, &cold.topic, cold.partition);
        let listed: Vec<(u64, u64, SegmentKey)> = cold
            .store
            .list(&prefix)
            .await?
            .into_iter()
            .filter_map(|key| key.offsets().map(|(first, last)| (first, last, key)))
            .collect();
        let start = from.unwrap_or_else(|| listed.first().map_or(0, |(first, ..)| *first));
        let mut records: Vec<Record> = Vec::new();
        let mut position = start;
        while records.len() < limit {
            // Sorted by first offset: the last segment that starts at or below `position`.
            let Some((first, last, key)) = listed
                .iter()
                .rev()
                .find(|(first, last, _)| *first <= position && position <= *last)
            else {
                break;
            };
            let Some(segment) = self.load_segment(key, (*first, *last), None).await? else {
                break;
            };
            let wanted = limit - records.len();
            records.extend(
                segment
                    .into_iter()
                    .filter(|r| r.offset >= position)
                    .take(wanted),
            );
            position = records.last().map_or(position, |last| last.offset + 1);
        }
        if records.is_empty() {
            return Err(not_vouched(start));
        }
        let held_end = listed.iter().map(|(_, last, _)| last + 1).max();
        Ok(Page {
            lag: held_end.unwrap_or(position).saturating_sub(position),
            records,
            next_offset: position,
        })
    }

    /// The records of an indexed segment, from the cache or the cold store. `None` when the
    /// object is missing or fails its checks (which is truncation, never data).
    async fn fetch_segment(
        &self,
        indexed: &IndexedSegment,
    ) -> Result<Option<Arc<[Record]>>, StoreError> {
        if let Some(records) = self.segment_cache.get(indexed) {
            return Ok(Some(records));
        }
        let key = SegmentKey::from_stored(indexed.locator.clone());
        let span = (indexed.first_offset, indexed.last_offset);
        let Some(records) = self
            .load_segment(&key, span, Some(&indexed.checksum))
            .await?
        else {
            return Ok(None);
        };
        let records: Arc<[Record]> = records.into();
        self.segment_cache.insert(indexed, records.clone());
        Ok(Some(records))
    }

    /// The records of the segment under `key`, holding offsets `first..=last`, checked against
    /// `checksum` (the index's), or else against the one its own header names (a segment found
    /// by listing the cold tier). `None`, logged, when the object is missing or fails its
    /// checks (which is truncation, never data), or when there is no cold tier.
    async fn load_segment(
        &self,
        key: &SegmentKey,
        (first_offset, last_offset): (u64, u64),
        checksum: Option<&str>,
    ) -> Result<Option<Vec<Record>>, StoreError> {
        let Some(cold) = &self.options.cold else {
            return Ok(None);
        };
        let Some(bytes) = cold.store.get(key).await? else {
            log::warn!("{}: cold segment {key} is missing", self.describe());
            return Ok(None);
        };
        let expected = segment::Expected {
            topic: &cold.topic,
            partition: cold.partition,
            first_offset,
            last_offset,
            checksum: checksum
                .or_else(|| segment::header_checksum(&bytes))
                .unwrap_or_default(),
        };
        match segment::decode(&bytes, &expected) {
            Ok(records) => Ok(Some(records)),
            Err(why) => {
                log::error!("{}: cold segment {key} is damaged: {why}", self.describe());
                Ok(None)
            }
        }
    }

    /// What a reader must know of the log's end before it opens its snapshot: the committed
    /// end, then the recent (not yet indexed) records from `from`, at most `limit`. Taken in
    /// this order, every record below `next_offset` is in the snapshot's indexes or here.
    pub(super) fn recent_view(&self, from: u64, limit: usize) -> RecentView {
        let next_offset = self.tail().next_offset;
        let shared = self.volume.shared();
        let mut rows = shared.recent_from(self.key, from, limit);
        rows.retain(|&(offset, _)| offset < next_offset);
        RecentView {
            next_offset,
            oldest_recent: shared
                .oldest_recent(self.key)
                .map(|(offset, _)| offset)
                .filter(|&offset| offset < next_offset),
            rows,
        }
    }

    /// The partition's bounds in `tx`'s snapshot, with the end and recent records of `view`.
    pub(super) fn bounds_in(
        &self,
        tx: &Connection,
        view: &RecentView,
    ) -> Result<Bounds, StoreError> {
        let next_offset = view.next_offset;
        let (indexed, cold): (Option<u64>, Option<u64>) = tx
            .prepare_cached(
                "SELECT (SELECT MIN(offset) FROM record_index WHERE partition = ?1),
                        (SELECT MIN(first_offset) FROM segments WHERE partition = ?1)",
            )?
            .query_row([self.key], |row| Ok((row.get(0)?, row.get(1)?)))?;
        let hot_offset = match (indexed, view.oldest_recent) {
            (Some(indexed), Some(recent)) => indexed.min(recent),
            (hot, None) | (None, hot) => hot.unwrap_or(next_offset),
        };
        Ok(Bounds {
            oldest_offset: cold.map_or(hot_offset, |cold| cold.min(hot_offset)),
            hot_offset,
            next_offset,
        })
    }

    /// Completes a page that has `records` so far and continues at `position`: adds hot
    /// records if `position` is in the hot window, then computes `next_offset` and `lag`.
    fn finish_page(
        &self,
        tx: &Connection,
        bounds: &Bounds,
        view: &RecentView,
        position: u64,
        mut records: Vec<Record>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        if records.len() < limit && position >= bounds.hot_offset {
            records.extend(self.hot_records(tx, view, position, limit - records.len())?);
        }
        let next_offset = records.last().map_or(position, |last| last.offset + 1);
        Ok(Page {
            lag: bounds.next_offset.saturating_sub(next_offset),
            records,
            next_offset,
        })
    }

    /// Up to `limit` hot records from `from` on: indexed ones, then recent ones, contiguous.
    pub(super) fn hot_records(
        &self,
        tx: &Connection,
        view: &RecentView,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Record>, StoreError> {
        let mut records: Vec<Record> = {
            let mut statement = tx.prepare_cached(
                "SELECT i.offset, r.dedup_key, r.payload, r.meta, r.appended_at, r.checksum
                 FROM record_index AS i JOIN records AS r ON r.seq = i.seq
                 WHERE i.partition = ?1 AND i.offset >= ?2 AND i.offset < ?3
                 ORDER BY i.offset LIMIT ?4",
            )?;
            let mut rows = statement.query(rusqlite::params![
                self.key,
                from,
                view.next_offset,
                limit as u64
            ])?;
            let mut records = Vec::new();
            while let Some(row) = rows.next()? {
                records.push(self.checked(StoredRow {
                    offset: row.get(0)?,
                    key: row.get(1)?,
                    payload: row.get(2)?,
                    meta: row.get(3)?,
                    appended_at: row.get(4)?,
                    checksum: row.get(5)?,
                })?);
            }
            records
        };
        let mut next = records.last().map_or(from, |last| last.offset + 1);
        let mut by_seq = tx.prepare_cached(
            "SELECT dedup_key, payload, meta, appended_at, checksum FROM records WHERE seq = ?1",
        )?;
        for &(offset, seq) in &view.rows {
            if records.len() >= limit || offset > next {
                break;
            }
            if offset < next {
                continue; // indexed since the view was taken: already read
            }
            let row = by_seq
                .query_row([seq], |row| {
                    Ok(StoredRow {
                        offset,
                        key: row.get(0)?,
                        payload: row.get(1)?,
                        meta: row.get(2)?,
                        appended_at: row.get(3)?,
                        checksum: row.get(4)?,
                    })
                })
                .optional()?;
            let Some(row) = row else {
                break;
            };
            records.push(self.checked(row)?);
            next += 1;
        }
        self.check_contiguous(
            &records,
            from,
            limit.min(wanted_below(from, view.next_offset)),
        )?;
        Ok(records)
    }

    /// Offsets are contiguous by construction: every one from `from` below the log's end is
    /// stored, indexed or recent. So a page of hot records that does not hold `wanted` records
    /// numbered from `from` on met a hole: a damaged page hid rows without SQLite noticing (a
    /// page overwritten with another valid page does that). Serving it would skip acknowledged
    /// records silently; it is `corrupted`, which marks the volume damaged. (A `wanted` of 0
    /// checks only that the records are consecutive.)
    pub(super) fn check_contiguous(
        &self,
        records: &[Record],
        from: u64,
        wanted: usize,
    ) -> Result<(), StoreError> {
        let missing = (from..)
            .zip(records)
            .find(|(expected, record)| record.offset != *expected)
            .map(|(expected, _)| expected)
            .or_else(|| (records.len() < wanted).then(|| from + records.len() as u64));
        match missing {
            None => Ok(()),
            Some(offset) => Err(StoreError::Corrupted {
                reason: format!(
                    "record {offset} of {} is missing from the database although the log \
                     holds it: a damaged page hides it",
                    self.describe()
                ),
            }),
        }
    }

    /// The record of `row` if its columns, as stored, match the checksum stored with them
    /// (rows written before checksums have none); else `corrupted`, which marks the volume
    /// damaged. The scrub checks the same bytes.
    pub(super) fn checked(&self, row: StoredRow) -> Result<Record, StoreError> {
        let payload: &[u8] = match &row.payload {
            Value::Text(text) => text.as_bytes(),
            Value::Blob(bytes) => bytes,
            _ => &[],
        };
        let expected =
            record_checksum(row.offset, row.key.as_deref(), payload, row.meta.as_deref());
        if row
            .checksum
            .is_some_and(|stored| stored != i64::from(expected))
        {
            return Err(StoreError::Corrupted {
                reason: format!(
                    "record {} of {} fails its checksum: it was altered in the database",
                    row.offset,
                    self.describe()
                ),
            });
        }
        let (payload, meta) = stored_parts(row.payload, row.meta)?;
        Ok(Record {
            offset: row.offset,
            key: row.key,
            payload,
            message_key: meta.message_key,
            headers: meta.headers,
            appended_at: row.appended_at,
        })
    }

    /// Names the partition in log lines.
    pub(super) fn describe(&self) -> String {
        match &self.options.cold {
            Some(cold) => format!("partition {}:{}", cold.topic, cold.partition),
            None => format!("{} partition #{}", self.path().display(), self.key),
        }
    }

    /// The effective page size for a requested `limit`.
    pub(super) fn page_limit(&self, limit: Option<usize>) -> Result<usize, StoreError> {
        page_limit(limit, self.options.max_batch_size)
    }
}

/// The one rule for where a read may start and how far a commit may go: at most the log's
/// next offset. (Applied by [`Log`](crate::Log) too, to a partition never written.)
///
/// # Errors
/// [`StoreError::InvalidOffset`].
pub fn check_offset(offset: u64, next_offset: u64) -> Result<(), StoreError> {
    if offset > next_offset {
        return Err(StoreError::InvalidOffset {
            offset,
            next_offset,
        });
    }
    Ok(())
}

/// An offset given as a signed number (a JSON body, a query string): offsets start at 0.
///
/// # Errors
/// [`StoreError::NegativeOffset`].
pub fn unsigned_offset(offset: i64) -> Result<u64, StoreError> {
    u64::try_from(offset).map_err(|_| StoreError::NegativeOffset { offset })
}

/// The one rule for page sizes (reads and leases): a zero limit is refused; none means, and
/// any is capped at, `max`.
///
/// # Errors
/// [`StoreError::InvalidLimit`].
pub fn page_limit(limit: Option<usize>, max: usize) -> Result<usize, StoreError> {
    match limit {
        Some(0) => Err(StoreError::InvalidLimit),
        Some(limit) => Ok(limit.min(max)),
        None => Ok(max),
    }
}

/// How many records from `from` the log holds below `next_offset`, as a page size.
fn wanted_below(from: u64, next_offset: u64) -> usize {
    usize::try_from(next_offset.saturating_sub(from)).unwrap_or(usize::MAX)
}

/// A row of the segment index.
pub(super) struct IndexedSegment {
    first_offset: u64,
    last_offset: u64,
    locator: String,
    checksum: String,
}

fn segment_containing(
    tx: &Connection,
    partition: i64,
    offset: u64,
) -> Result<Option<IndexedSegment>, StoreError> {
    let segment = tx
        .prepare_cached(
            "SELECT first_offset, last_offset, locator, checksum FROM segments
             WHERE partition = ?1 AND first_offset <= ?2 ORDER BY first_offset DESC LIMIT 1",
        )?
        .query_row(rusqlite::params![partition, offset], |row| {
            Ok(IndexedSegment {
                first_offset: row.get(0)?,
                last_offset: row.get(1)?,
                locator: row.get(2)?,
                checksum: row.get(3)?,
            })
        })
        .optional()?;
    Ok(segment.filter(|segment| segment.last_offset >= offset))
}

/// The first offset above `offset` that the log may be able to serve: the next segment's
/// first offset, or the hot window.
fn next_readable_after(
    tx: &Connection,
    partition: i64,
    offset: u64,
    bounds: &Bounds,
) -> Result<u64, StoreError> {
    let next_segment: Option<u64> = tx
        .prepare_cached(
            "SELECT MIN(first_offset) FROM segments WHERE partition = ?1 AND first_offset > ?2",
        )?
        .query_row(rusqlite::params![partition, offset], |row| row.get(0))?;
    Ok(next_segment.map_or(bounds.hot_offset, |first| first.min(bounds.hot_offset)))
}

/// How many decoded segments a partition keeps; a reader paging through a segment of up to
/// `max_batch_size` records fetches it once.
const CACHED_SEGMENTS: usize = 4;

/// A decoded segment, known by its first offset and checksum.
type CachedSegment = (u64, String, Arc<[Record]>);

/// The most recently read segments, newest last. A cached segment is served while the index
/// still lists it, even if its object has since vanished: its records were verified when read.
#[derive(Debug, Default)]
pub(super) struct SegmentCache(Mutex<VecDeque<CachedSegment>>);

impl SegmentCache {
    fn get(&self, indexed: &IndexedSegment) -> Option<Arc<[Record]>> {
        let mut cache = lock(&self.0);
        let index = cache.iter().position(|(first, checksum, _)| {
            *first == indexed.first_offset && *checksum == indexed.checksum
        })?;
        let entry = cache.remove(index)?;
        let records = entry.2.clone();
        cache.push_back(entry);
        Some(records)
    }

    fn insert(&self, indexed: &IndexedSegment, records: Arc<[Record]>) {
        let mut cache = lock(&self.0);
        if cache.len() == CACHED_SEGMENTS {
            cache.pop_front();
        }
        cache.push_back((indexed.first_offset, indexed.checksum.clone(), records));
    }
}

/// What a reader knows of the log's end and its recent records (see
/// [`LogStore::recent_view`]).
pub(super) struct RecentView {
    next_offset: u64,
    oldest_recent: Option<u64>,
    rows: Vec<(u64, i64)>,
}
