//! The check of one volume by the scrub (`store/scrub.rs` says when it runs and how it is
//! paced), on a read-only connection of its own, in three steps:
//!
//! 1. SQLite's `integrity_check` reads every page of the file. `quick_check` is not enough: a
//!    page of `record_index` overwritten with its neighbour (well formed, holding other rows)
//!    passes it, and fails `integrity_check` (rows out of primary-key order); both find it in
//!    `records`. It is one statement, so one read transaction over the whole file.
//! 2. Every record, in commit order (`seq`), a chunk of [`CHUNK_ROWS`] per read transaction:
//!    its checksum (rows written before checksums have none and are skipped, as reads do), and
//!    its place in its partition: in commit order a partition's offsets go up by exactly one.
//! 3. The lookup index (`record_index`), in `(partition, offset)` order, a chunk per read
//!    transaction: a partition's offsets go up by exactly one, and each row names a record of
//!    that partition and offset.
//!
//! Chunks keep read transactions short: a long one keeps the WAL from being checkpointed. The
//! price is that trims run between chunks; a trim deletes the oldest records of a partition,
//! so a gap between a record read in an earlier chunk and one read now is damage only if the
//! earlier one is still there. Records committed after the pass began wait for the next pass,
//! so a pass ends under any load.
//!
//! Damage found is `corrupted` handed to [`Shared::classify`](super::Shared::classify), which
//! marks the volume damaged as a read meeting it would.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Weak};
use std::time::Instant;

use rusqlite::config::DbConfig;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::{BUSY_TIMEOUT, ReadTransaction, Volume, keep_plans};
use crate::store::StoreError;
use crate::store::batch::record_checksum;
use std::sync::Condvar;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use rusqlite::InterruptHandle;

use crate::store::lock;

/// How long the scrub rests after each step, in multiples of the step's time: at most one part
/// in `1 + REST_PER_WORK` of one core's time is the scrub's.
const REST_PER_WORK: u32 = 4;
/// What the scrub did since the log opened, read by the metrics. Lock-free: counting never
/// blocks.
#[derive(Debug, Default)]
pub struct ScrubCounters {
    last_pass: AtomicU64,
    pages: AtomicU64,
    records: AtomicU64,
    damage: AtomicU64,
}

impl ScrubCounters {
    /// When the last pass over every volume ended, in seconds since the Unix epoch; 0 before
    /// the first.
    pub fn last_pass(&self) -> u64 {
        self.last_pass.load(Ordering::Relaxed)
    }

    /// Pages that SQLite's check read.
    pub fn pages_checked(&self) -> u64 {
        self.pages.load(Ordering::Relaxed)
    }

    /// Records whose checksum and place in their partition were checked.
    pub fn records_checked(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Volumes the scrub found damaged (each once: a damaged volume is not scrubbed again).
    pub fn damage_found(&self) -> u64 {
        self.damage.load(Ordering::Relaxed)
    }

    pub(in crate::store) fn count_pages(&self, pages: u64) {
        self.pages.fetch_add(pages, Ordering::Relaxed);
    }

    pub(in crate::store) fn count_records(&self, records: u64) {
        self.records.fetch_add(records, Ordering::Relaxed);
    }

    pub(in crate::store) fn count_damage(&self) {
        self.damage.fetch_add(1, Ordering::Relaxed);
    }

    pub(in crate::store) fn pass_ended(&self) {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        self.last_pass.store(now, Ordering::Relaxed);
    }
}

/// Tells a scrub to stop: wakes it from its rest, and interrupts SQLite's check if it runs.
#[derive(Default)]
pub(in crate::store) struct Stop {
    stopped: Mutex<bool>,
    woken: Condvar,
    /// The connection running a long statement, if one is.
    running: Mutex<Option<InterruptHandle>>,
}

impl Stop {
    pub(in crate::store) fn stop(&self) {
        *lock(&self.stopped) = true;
        self.woken.notify_all();
        if let Some(running) = lock(&self.running).as_ref() {
            running.interrupt();
        }
    }

    pub(in crate::store) fn is_stopped(&self) -> bool {
        *lock(&self.stopped)
    }

    /// Waits until `deadline`; false when told to stop first.
    pub(in crate::store) fn wait_until(&self, deadline: Instant) -> bool {
        let mut stopped = lock(&self.stopped);
        loop {
            let now = Instant::now();
            if *stopped {
                return false;
            }
            if now >= deadline {
                return true;
            }
            stopped = self
                .woken
                .wait_timeout(stopped, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// How a pass over one volume is paced: unpaced (a check run now, by hand or in a benchmark),
/// or resting after each step and stopping when told to.
pub(in crate::store) struct Pace<'a> {
    stop: Option<&'a Stop>,
}

impl<'a> Pace<'a> {
    /// Rests after each step, and stops when `stop` says so: the background scrub.
    pub(in crate::store) fn paced(stop: &'a Stop) -> Self {
        Self { stop: Some(stop) }
    }

    /// No rest, no stop.
    pub(in crate::store) fn unpaced() -> Self {
        Self { stop: None }
    }

    /// Rests after a step that took `took`; false when the scrub must stop.
    pub(in crate::store) fn rest(&self, took: Duration) -> bool {
        let Some(stop) = self.stop else {
            return true;
        };
        let until = Instant::now().checked_add(took * REST_PER_WORK);
        until.is_none_or(|until| stop.wait_until(until))
    }

    /// Whether this is the background scrub (not a check run by hand).
    pub(in crate::store) fn in_background(&self) -> bool {
        self.stop.is_some()
    }

    /// Whether the scrub must stop.
    pub(in crate::store) fn stopped(&self) -> bool {
        self.stop.is_some_and(Stop::is_stopped)
    }

    /// Runs `work`, a long statement on `conn`, interrupted if the scrub is told to stop
    /// meanwhile (it then fails, and [`Pace::stopped`] says why).
    pub(in crate::store) fn interruptible<T>(
        &self,
        conn: &Connection,
        work: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let Some(stop) = self.stop else {
            return work();
        };
        *lock(&stop.running) = Some(conn.get_interrupt_handle());
        // Asked after the handle is in place: a stop from now on interrupts the statement.
        let result = if stop.is_stopped() {
            Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_INTERRUPT),
                None,
            )))
        } else {
            work()
        };
        *lock(&stop.running) = None;
        result
    }
}

/// How a pass over one volume ended, when it did not fail.
pub(in crate::store) enum Scrubbed {
    /// Every check ran and found nothing wrong (between two steps: the pass goes on).
    Clean,
    /// The pass stopped early: the scrub was told to stop, or the volume closed or was found
    /// damaged by someone else meanwhile.
    Cut,
}

/// Rows read per read transaction.
const CHUNK_ROWS: u64 = 1_000;
/// Most messages of SQLite's check kept in the damage's cause.
const CHECK_MESSAGES: u32 = 3;

impl Volume {
    /// Checks the whole volume now, at full speed: SQLite's integrity check, every record's
    /// checksum and place in its partition, and the lookup index against the records (see
    /// `volume/scrub.rs`), counting into `counters`. Damage found marks the volume damaged, as
    /// a read meeting it would. Blocks the calling thread, about as long as reading the file
    /// twice; the background scrub runs the same check paced.
    ///
    /// # Errors
    /// [`StoreError::Corrupted`] when damage is found (or the volume was already damaged), a
    /// storage failure otherwise.
    pub fn scrub(self: &Arc<Self>, counters: &ScrubCounters) -> Result<(), StoreError> {
        match Self::scrub_paced(&Arc::downgrade(self), &Pace::unpaced(), counters)? {
            Scrubbed::Clean => Ok(()),
            Scrubbed::Cut => self.shared.check_intact(),
        }
    }

    /// [`Volume::scrub`] of `volume`, paced by `pace`. Answers [`Scrubbed::Cut`] when the
    /// pass stopped early (told to, the volume closed or was dropped, or someone else found
    /// it damaged meanwhile), and `corrupted` only for damage this pass found.
    ///
    /// The volume is held only for moments between steps, never through one: a volume handed
    /// to another node or rebuilt is closed and dropped, and its connections must not outlive
    /// it while a new file takes its place (closing the last connection of a file, SQLite
    /// deletes its WAL by name). The pass's own connection is read-only and never checkpoints.
    pub(in crate::store) fn scrub_paced(
        volume: &Weak<Self>,
        pace: &Pace<'_>,
        counters: &ScrubCounters,
    ) -> Result<Scrubbed, StoreError> {
        let checked = (|| {
            let Some(pass) = Pass::begin(volume, pace, counters)? else {
                return Ok(Scrubbed::Cut);
            };
            if let Scrubbed::Cut = pass.sqlite_check()? {
                return Ok(Scrubbed::Cut);
            }
            if let Scrubbed::Cut = pass.records()? {
                return Ok(Scrubbed::Cut);
            }
            pass.index()
        })();
        let err = match (checked, volume.upgrade()) {
            (Ok(scrubbed), _) => return Ok(scrubbed),
            (Err(_), None) => return Ok(Scrubbed::Cut),
            (Err(_), Some(volume)) if volume.shared.damaged.get().is_some() => {
                return Ok(Scrubbed::Cut);
            }
            (Err(err), Some(volume)) => volume.shared.classify(err),
        };
        match err {
            StoreError::Corrupted { .. } => Err(err),
            // An interrupted statement, or what stopping met.
            _ if pace.stopped() => Ok(Scrubbed::Cut),
            _ => Err(err),
        }
    }
}

/// One pass over one volume.
struct Pass<'a> {
    volume: &'a Weak<Volume>,
    conn: Connection,
    pace: &'a Pace<'a>,
    counters: &'a ScrubCounters,
    /// The newest record when the pass began: records committed since wait for the next pass.
    end_seq: i64,
}

/// Where a partition's records stood at the last record the pass read.
#[derive(Clone, Copy)]
struct Last {
    offset: u64,
    seq: i64,
}

impl<'a> Pass<'a> {
    /// The pass over `volume`, `None` when it is gone.
    fn begin(
        volume: &'a Weak<Volume>,
        pace: &'a Pace<'a>,
        counters: &'a ScrubCounters,
    ) -> Result<Option<Self>, StoreError> {
        let Some(path) = volume.upgrade().map(|volume| volume.shared.path.clone()) else {
            return Ok(None);
        };
        // Not mapped into memory, unlike the readers': a pass reads the whole file, which would
        // then count in the process's resident memory.
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        keep_plans(&conn)?;
        // Closing it never checkpoints, so never deletes the WAL, whatever file has its name.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
        let end_seq = conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM records", [], |row| {
            row.get(0)
        })?;
        Ok(Some(Self {
            volume,
            conn,
            pace,
            counters,
            end_seq,
        }))
    }

    /// Rests after a step begun at `started`, and answers whether the pass goes on: not when
    /// told to stop, when the volume is gone or someone else found it damaged, or, in the
    /// background, when it closed (it may be handed to another node or rebuilt).
    fn go_on(&self, started: Instant) -> Scrubbed {
        if !self.pace.rest(started.elapsed()) {
            return Scrubbed::Cut;
        }
        let Some(volume) = self.volume.upgrade() else {
            return Scrubbed::Cut;
        };
        let shared = &volume.shared;
        let closed = self.pace.in_background() && shared.queue.is_closed();
        if closed || shared.damaged.get().is_some() {
            Scrubbed::Cut
        } else {
            Scrubbed::Clean
        }
    }

    /// Step 1: SQLite's integrity check of every page.
    fn sqlite_check(&self) -> Result<Scrubbed, StoreError> {
        let started = Instant::now();
        let pages: u64 = self
            .conn
            .query_row("PRAGMA page_count", [], |row| row.get(0))?;
        let messages: Vec<String> = self.pace.interruptible(&self.conn, || {
            let mut statement = self
                .conn
                .prepare(&format!("PRAGMA integrity_check({CHECK_MESSAGES})"))?;
            let rows = statement.query_map([], |row| row.get::<_, String>(0))?;
            Ok(rows.collect::<Result<_, _>>()?)
        })?;
        self.counters.count_pages(pages);
        if messages == ["ok"] {
            return Ok(self.go_on(started));
        }
        // Each message may start with a line naming the schema, which says nothing here.
        let messages: Vec<&str> = messages
            .iter()
            .flat_map(|message| message.lines())
            .filter(|line| !line.starts_with("*** in database"))
            .collect();
        Err(found(format!(
            "that SQLite's integrity check fails: {}",
            messages.join("; ")
        )))
    }

    /// Step 2: every record committed before the pass began, in commit order.
    fn records(&self) -> Result<Scrubbed, StoreError> {
        let mut partitions: HashMap<i64, Last> = HashMap::new();
        let mut after = 0;
        loop {
            let started = Instant::now();
            let (read, last) = self.in_snapshot(|conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT seq, partition, offset, dedup_key, payload, checksum, meta FROM records
                     WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT ?3",
                )?;
                let mut rows = statement.query(params![after, self.end_seq, CHUNK_ROWS])?;
                let (mut read, mut previous) = (0, after);
                while let Some(row) = rows.next()? {
                    let seq: i64 = row.get(0)?;
                    let partition: i64 = row.get(1)?;
                    let offset: u64 = row.get(2)?;
                    read += 1;
                    let record = || format!("record {offset} of {}", name(conn, partition));
                    if seq <= previous {
                        return Err(found(format!(
                            "{} at seq {seq} after seq {previous}: the records are out of \
                             order, a damaged page repeats some",
                            record()
                        )));
                    }
                    previous = seq;
                    let (Some(key), Some(payload), Some(meta)) = (
                        text(row.get_ref(3)?),
                        bytes(row.get_ref(4)?),
                        blob(row.get_ref(6)?),
                    ) else {
                        return Err(found(format!(
                            "{} holding a value of the wrong type",
                            record()
                        )));
                    };
                    let checksum: Option<i64> = row.get(5)?;
                    if checksum.is_some_and(|stored| {
                        stored != i64::from(record_checksum(offset, key, payload, meta))
                    }) {
                        return Err(found(format!(
                            "{} failing its checksum: it was altered in the database",
                            record()
                        )));
                    }
                    let here = Last { offset, seq };
                    match partitions.entry(partition) {
                        Entry::Vacant(entry) => {
                            entry.insert(here);
                        }
                        Entry::Occupied(mut entry) => {
                            check_follows(conn, partition, *entry.get(), here)?;
                            entry.insert(here);
                        }
                    }
                }
                Ok((read, previous))
            })?;
            self.counters.count_records(read);
            after = last;
            if read < CHUNK_ROWS {
                return Ok(self.go_on(started));
            }
            if let Scrubbed::Cut = self.go_on(started) {
                return Ok(Scrubbed::Cut);
            }
        }
    }

    /// Step 3: the lookup index, partition by partition, against the records.
    fn index(&self) -> Result<Scrubbed, StoreError> {
        // Partition keys start at 1 and offsets at 0: every row sorts after this.
        let mut last: (i64, i64) = (0, -1);
        loop {
            let started = Instant::now();
            let (read, end) = self.in_snapshot(|conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT i.partition, i.offset, i.seq, r.partition, r.offset
                     FROM record_index AS i LEFT JOIN records AS r ON r.seq = i.seq
                     WHERE (i.partition, i.offset) > (?1, ?2) AND i.seq <= ?3
                     ORDER BY i.partition, i.offset LIMIT ?4",
                )?;
                let mut rows =
                    statement.query(params![last.0, last.1, self.end_seq, CHUNK_ROWS])?;
                let (mut read, mut previous) = (0, last);
                while let Some(row) = rows.next()? {
                    let (partition, offset, seq): (i64, i64, i64) =
                        (row.get(0)?, row.get(1)?, row.get(2)?);
                    let held: (Option<i64>, Option<i64>) = (row.get(3)?, row.get(4)?);
                    read += 1;
                    let record = || format!("record {offset} of {}", name(conn, partition));
                    match held {
                        (Some(p), Some(o)) if (p, o) == (partition, offset) => {}
                        (Some(p), Some(o)) => {
                            return Err(found(format!(
                                "that the index places {} at seq {seq}, which holds record {o} \
                                 of {}",
                                record(),
                                name(conn, p)
                            )));
                        }
                        _ => {
                            return Err(found(format!(
                                "{} missing from the records though the index places it at seq \
                                 {seq}: a damaged page hides it",
                                record()
                            )));
                        }
                    }
                    // A later offset is fine if a trim removed the earlier one since an earlier
                    // chunk read it.
                    if previous.0 == partition
                        && offset != previous.1 + 1
                        && (offset <= previous.1 || indexed(conn, partition, previous.1)?)
                    {
                        return Err(found(format!(
                            "that the index of {} goes from record {} to record {offset}",
                            name(conn, partition),
                            previous.1
                        )));
                    }
                    previous = (partition, offset);
                }
                Ok((read, previous))
            })?;
            last = end;
            if read < CHUNK_ROWS {
                return Ok(self.go_on(started));
            }
            if let Scrubbed::Cut = self.go_on(started) {
                return Ok(Scrubbed::Cut);
            }
        }
    }

    /// Runs `work` inside one read transaction of the pass's connection.
    fn in_snapshot<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let read = ReadTransaction::begin(&self.conn)?;
        work(read.0)
    }
}

/// Checks that `here`, a record of partition `partition`, follows `last`, the partition's
/// record read before it in commit order: the next offset, or a later one when a trim removed
/// `last` since (trims remove a partition's oldest records, so with `last` still there the
/// records between are missing).
fn check_follows(
    conn: &Connection,
    partition: i64,
    last: Last,
    here: Last,
) -> Result<(), StoreError> {
    if here.offset == last.offset + 1 {
        return Ok(());
    }
    let missing = here.offset > last.offset + 1;
    if missing {
        let last_still_there = conn
            .prepare_cached("SELECT 1 FROM records WHERE seq = ?1")?
            .query_row([last.seq], |_| Ok(()))
            .optional()?
            .is_some();
        if !last_still_there {
            return Ok(());
        }
    }
    let partition = name(conn, partition);
    let (first, end) = (last.offset + 1, here.offset);
    Err(found(if !missing {
        format!(
            "record {} of {partition} at seq {} after record {} at seq {}: the records are out \
             of order, a damaged page repeats some",
            here.offset, here.seq, last.offset, last.seq
        )
    } else if end - first == 1 {
        format!(
            "record {first} of {partition} missing: the records go from {} to {end}, a damaged \
             page hides it",
            last.offset
        )
    } else {
        format!(
            "records {first} to {} of {partition} missing: the records go from {} to {end}, a \
             damaged page hides them",
            end - 1,
            last.offset
        )
    }))
}

/// Whether the index lists `offset` of partition `partition`.
fn indexed(conn: &Connection, partition: i64, offset: i64) -> Result<bool, StoreError> {
    let found = conn
        .prepare_cached("SELECT 1 FROM record_index WHERE partition = ?1 AND offset = ?2")?
        .query_row(params![partition, offset], |_| Ok(()))
        .optional()?;
    Ok(found.is_some())
}

/// The damage a check found, described by `what` (a sentence's end after "the scrub found").
fn found(what: String) -> StoreError {
    StoreError::Corrupted {
        reason: format!("the scrub found {what}"),
    }
}

/// A text column's value: `Some(None)` for NULL, `None` for a value that is not text.
fn text(value: ValueRef<'_>) -> Option<Option<&str>> {
    match value {
        ValueRef::Null => Some(None),
        ValueRef::Text(text) => std::str::from_utf8(text).ok().map(Some),
        _ => None,
    }
}

/// A payload's bytes: JSON text or a binary blob; `None` for any other type.
fn bytes(value: ValueRef<'_>) -> Option<&[u8]> {
    match value {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => Some(bytes),
        _ => None,
    }
}

/// A nullable blob column; `None` for any other type.
fn blob(value: ValueRef<'_>) -> Option<Option<&[u8]>> {
    match value {
        ValueRef::Null => Some(None),
        ValueRef::Blob(bytes) => Some(Some(bytes)),
        _ => None,
    }
}

/// Partition `key` as messages name it: `partition topic:index`, or by its key when its row
/// cannot be read.
fn name(conn: &Connection, key: i64) -> String {
    let named: Option<(String, u32)> = conn
        .prepare_cached("SELECT topic, partition FROM partitions WHERE id = ?1")
        .and_then(|mut statement| {
            statement
                .query_row([key], |row| Ok((row.get(0)?, row.get(1)?)))
                .optional()
        })
        .ok()
        .flatten();
    match named {
        Some((topic, index)) => format!("partition {topic}:{index}"),
        None => format!("partition #{key}"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::store::{DamageKind, LogStore, NewRecord, StoreOptions, SyncMode};

    /// Partitions of the volume `filled` writes, and records in each.
    const PARTITIONS: u32 = 3;
    const RECORDS: u64 = 1_500;

    /// A closed volume at `path` holding `RECORDS` keyed records in each of `PARTITIONS`
    /// partitions of `events`, appended in turns (so they interleave in commit order), all
    /// indexed.
    fn filled(path: &Path) {
        let volume = Volume::open(path, SyncMode::Normal).expect("open a volume");
        let options = StoreOptions::default().sync(SyncMode::Normal);
        let stores: Vec<LogStore> = (0..PARTITIONS)
            .map(|partition| {
                LogStore::open_in(&volume, "events", partition, options.clone(), true)
                    .expect("open a partition")
                    .expect("created")
            })
            .collect();
        for round in 0..RECORDS / 100 {
            for store in &stores {
                let batch: Vec<NewRecord> = (0..100)
                    .map(|n| NewRecord::keyed(format!("k{round}-{n}"), format!("{{\"n\":{n}}}")))
                    .collect();
                assert!(store.append(&batch).expect("append").is_appended());
            }
        }
        volume.shared.index().expect("index");
        volume.close().expect("close");
    }

    /// What a scrub answered, the volume and counters after it, and the folder holding it.
    type Outcome = (
        Result<(), StoreError>,
        Arc<Volume>,
        ScrubCounters,
        tempfile::TempDir,
    );

    /// The volume `filled` writes, with `alteration` run on it behind its back, scrubbed.
    fn scrubbed(alteration: &str) -> Outcome {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("volume-0.sqlite");
        filled(&path);
        if !alteration.is_empty() {
            let conn = Connection::open(&path).expect("open behind the volume's back");
            assert_eq!(conn.execute(alteration, []).expect(alteration), 1);
        }
        let volume = Volume::open(&path, SyncMode::Normal).expect("reopen");
        let counters = ScrubCounters::default();
        let result = volume.scrub(&counters);
        (result, volume, counters, dir)
    }

    /// Asserts that the scrub answered `corrupted` with a cause holding `cause`, and marked the
    /// volume damaged beside its file.
    fn assert_found(alteration: &str, cause: &str) {
        let (result, volume, counters, _dir) = scrubbed(alteration);
        let err = result.expect_err(alteration);
        assert!(matches!(err, StoreError::Corrupted { .. }), "{err}");
        assert!(err.to_string().contains(cause), "{alteration}: {err}");
        assert_eq!(volume.damage(), Some(DamageKind::Malformed));
        assert!(crate::store::damage::mark_path(volume.path()).exists());
        assert!(counters.pages_checked() > 0);
    }

    fn partition(index: u32) -> String {
        format!("(SELECT id FROM partitions WHERE partition = {index})")
    }

    /// A sound volume passes, having checked every page and record.
    #[test]
    fn a_sound_volume_passes() {
        let (result, volume, counters, _dir) = scrubbed("");
        result.expect("sound");
        assert_eq!(volume.damage(), None);
        assert_eq!(counters.records_checked(), u64::from(PARTITIONS) * RECORDS);
        let pages = std::fs::metadata(volume.path()).unwrap().len() / 4096;
        assert_eq!(counters.pages_checked(), pages);
    }

    /// A payload altered behind the log fails its record's checksum.
    #[test]
    fn an_altered_payload_fails_its_checksum() {
        let alteration = format!(
            "UPDATE records SET payload = '{{\"n\":0}}' WHERE partition = {} AND offset = 1001",
            partition(1)
        );
        assert_found(
            &alteration,
            "record 1001 of partition events:1 failing its checksum",
        );
    }

    /// A record missing from the records (its index row still there) is found in the records
    /// already: its partition's offsets jump over it.
    #[test]
    fn a_missing_record_is_a_hole_in_its_partition() {
        let alteration = format!(
            "DELETE FROM records WHERE partition = {} AND offset = 1200",
            partition(2)
        );
        assert_found(
            &alteration,
            "record 1200 of partition events:2 missing: the records go from 1199 to 1201",
        );
    }

    /// A row missing from the lookup index is a hole in it (a read would take the rows after
    /// it for the log's oldest, or meet the hole).
    #[test]
    fn a_hole_in_the_index_is_found() {
        let alteration = format!(
            "DELETE FROM record_index WHERE partition = {} AND offset = 700",
            partition(0)
        );
        assert_found(
            &alteration,
            "the index of partition events:0 goes from record 699 to record 701",
        );
    }

    /// An index row naming another record than its own is found.
    #[test]
    fn an_index_row_naming_another_record_is_found() {
        let alteration = format!(
            "UPDATE record_index SET seq = seq + 1 WHERE partition = {} AND offset = 10",
            partition(1)
        );
        assert_found(
            &alteration,
            "the index places record 10 of partition events:1 at seq",
        );
    }

    /// An unpaced check of a volume already damaged answers its damage.
    #[test]
    fn a_damaged_volume_answers_its_damage() {
        let (result, volume, _, _dir) = scrubbed(&format!(
            "DELETE FROM records WHERE partition = {} AND offset = 5",
            partition(0)
        ));
        assert!(result.is_err());
        let again = volume.scrub(&ScrubCounters::default()).unwrap_err();
        assert!(
            again.to_string().contains("record 5 of partition events:0"),
            "{again}"
        );
    }
}
