//! The committer: it takes every share queued for the next group commit, commits them in one
//! transaction (one fsync), answers each caller, and indexes when idle. It runs in steps on
//! the node's committer pool (`pool.rs`), one volume on one thread at a time.
//!
//! On a replicated volume a group's answer waits for its window to land in the stream, and so
//! does what it brings to memory (the partitions' ends, the recent records: what readers see).
//! The group commits locally at once, joins the groups in flight, and the next group is staged
//! and committed while the window is stored: it starts from where the groups in flight leave
//! each partition (its end, its due state, its keys), not from what memory holds. The groups
//! in flight are published in commit order as their landings arrive
//! ([`Shared::settle_in_flight`]); one not landed in time answers every caller in flight
//! `unavailable`, and the volume reloads what memory holds once it is known to have landed
//! (`replication.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::health::Fault;
use super::landing::{PendingLanding, Submitted};
use super::pool::After;
use super::{INDEX_EVERY_ROWS, Shared, Writer};
use crate::store::batch::{AppendOutcome, NewRecord, record_checksum};
use crate::store::commit_queue::{AppendRequest, Next};
use crate::store::due::store_due_at;
use crate::store::record::Meta;
use crate::store::replication::StreamError;
use crate::store::tail::{Due, PartitionTail, Tail};
use crate::store::{StoreError, lock};

/// The committer indexes when no append has arrived for this long.
const INDEX_WHEN_IDLE: Duration = Duration::from_millis(20);

/// Under steady appends a commit records the high-water mark at most this often (one small
/// synced write): commits newer than it are the ones a lost WAL could lose unnoticed.
const HIGH_WATER_EVERY: Duration = Duration::from_millis(100);

/// The committer frees the writer's page cache after this long without an append, so an idle
/// node's memory goes back to where it started.
const RELEASE_CACHE_WHEN_IDLE: Duration = Duration::from_secs(5);

/// What the committer carries from one step to the next.
pub(super) struct CommitterState {
    /// Batches the last group answered: the next one waits for as many, for a while.
    expected: usize,
    /// How long the last group took to commit: the next one waits up to half of it.
    last_commit: Duration,
    last_group: Instant,
    cache_released: bool,
    /// The high-water mark last recorded.
    high_water: i64,
    /// When a commit last recorded it (`None`: none since the volume opened).
    high_water_at: Option<Instant>,
}

impl CommitterState {
    pub(super) fn new(high_water: i64) -> Self {
        Self {
            expected: 0,
            last_commit: Duration::ZERO,
            last_group: Instant::now(),
            cache_released: false,
            high_water,
            high_water_at: None,
        }
    }
}

/// What a group commit wrote for one partition, applied to memory only once it committed.
struct Staged {
    partition: Arc<PartitionTail>,
    tail: Tail,
    due: Due,
    /// The due time the partition had before this group (its row holds it).
    due_before: Option<i64>,
    /// The partition's backlog after the commit (see [`pending_deliveries`]).
    pending: u64,
    rows: Vec<(u64, i64)>,
    keys: HashMap<String, (u64, i64)>,
}

impl Staged {
    /// Starts where the newest group in flight that wrote to the partition leaves it, else
    /// where memory has it.
    fn new(partition: &Arc<PartitionTail>, in_flight: &VecDeque<InFlight>) -> Self {
        let (tail, due) = in_flight
            .iter()
            .rev()
            .find_map(|group| group.staged.partitions.get(&partition.key))
            .map_or_else(
                || (partition.get(), *lock(&partition.due)),
                |staged| (staged.tail, staged.due),
            );
        Self {
            partition: partition.clone(),
            tail,
            due,
            due_before: due.at,
            pending: 0,
            rows: Vec::new(),
            keys: HashMap::new(),
        }
    }
}

/// What a group commit wrote, before it reaches memory: each caller's outcomes, in the
/// group's order, and what each partition staged.
struct StagedGroup {
    outcomes: Vec<Vec<AppendOutcome>>,
    partitions: HashMap<i64, Staged>,
}

/// A group committed locally whose window has not landed yet: its answers, and what it brings
/// to memory, wait for the landing.
pub(in crate::store) struct InFlight {
    /// `None` when the group changed nothing to land (every record was a repeated key).
    landing: Option<Submitted>,
    staged: StagedGroup,
    group: Vec<AppendRequest>,
    /// The newest seq it wrote.
    last_seq: i64,
    /// For a write of a door (see [`Shared::write`]): told how it ended.
    waiter: Option<Waiter>,
}

/// Told how a write that joined the groups in flight ended, once its window settled.
pub(in crate::store) type Waiter = std::sync::mpsc::SyncSender<Result<(), StoreError>>;

impl InFlight {
    /// A write with nothing for memory, committed after the write of `last_seq` (an index
    /// pass, a cursor commit): the groups after it are published once it landed too, and
    /// `waiter`, if any, is told how it ended.
    pub(in crate::store) fn beside_groups(
        landing: Submitted,
        last_seq: i64,
        waiter: Option<Waiter>,
    ) -> Self {
        Self {
            landing: Some(landing),
            staged: StagedGroup {
                outcomes: Vec::new(),
                partitions: HashMap::new(),
            },
            group: Vec::new(),
            last_seq,
            waiter,
        }
    }

    /// Answers its callers and its waiter with a failure (`reason`).
    fn fail(self, reason: &StreamError) {
        for request in self.group {
            (request.reply)(Err(reason.clone().into()));
        }
        if let Some(waiter) = self.waiter {
            let _ = waiter.send(Err(reason.clone().into()));
        }
    }

    /// Whether the group wrote to partition `key`.
    pub(super) fn writes_to(&self, key: i64) -> bool {
        self.staged.partitions.contains_key(&key)
    }

    /// Whether its outcome is known, and how it ended; `None` when not yet.
    fn landed(&mut self) -> Option<Result<(), StreamError>> {
        match &mut self.landing {
            None => Some(Ok(())),
            Some(landing) => landing.outcome(None).map(|landed| landed.clone().map(drop)),
        }
    }
}

impl Writer {
    pub(in crate::store) fn in_flight_is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }
}

/// Answers every caller of `group` with a failure: the first gets `err`, the others learn that
/// the volume refuses writes.
fn answer_all(group: Vec<AppendRequest>, err: StoreError) {
    let mut err = Some(err);
    for request in group {
        (request.reply)(Err(err.take().unwrap_or(StoreError::Poisoned)));
    }
}

/// Records not yet processed by a partition's slowest group: `next_offset` minus the lowest
/// cursor, or 0 when no group has a cursor.
pub(in crate::store) fn pending_deliveries(
    conn: &Connection,
    key: i64,
    next_offset: u64,
) -> Result<u64, StoreError> {
    let slowest: Option<u64> = conn
        .prepare_cached("SELECT MIN(offset) FROM cursors WHERE partition = ?1")?
        .query_row([key], |row| row.get(0))?;
    Ok(slowest.map_or(0, |slowest| next_offset.saturating_sub(slowest)))
}

impl Shared {
    /// One step of the committer, run on its pool (`pool.rs`): commits the shares queued in
    /// one transaction and answers each (indexing when enough records wait), or settles a
    /// landing's outcome, or does the idle work, or, once the queue closed, drains and stops.
    pub(super) fn committer_step(self: &Arc<Self>) -> After {
        let mut state = lock(&self.committer);
        let idle_at = match self.queue.next_group(state.expected, state.last_commit / 2) {
            Next::Group(group) => {
                let mut group = Some(group);
                let Some(mut writer) = self.writer_or_yield(&mut group) else {
                    return After::Rest;
                };
                let group = group.expect("the shares stay while the writer is taken");
                (state.last_group, state.cache_released) = (Instant::now(), false);
                state.expected = group.iter().map(|share| share.batches.len()).sum();
                self.commit_group(&mut writer, group);
                state.last_commit = state.last_group.elapsed();
                if (writer.published_seq - writer.indexed_through) as usize >= INDEX_EVERY_ROWS {
                    let _ = self.index_locked(&mut writer);
                }
                self.follow_high_water(&mut state, writer.last_seq);
                Some(state.last_group + INDEX_WHEN_IDLE)
            }
            Next::Landed => {
                let Some(mut writer) = self.writer_or_yield(&mut None) else {
                    return After::Rest;
                };
                let _ = self.settle_landing(&mut writer);
                Some(Instant::now() + INDEX_WHEN_IDLE)
            }
            Next::Idle => {
                let Some(writer) = self.writer_or_yield(&mut None) else {
                    return After::Rest;
                };
                self.idle_step(&mut state, writer)
            }
            Next::Closed => {
                drop(state);
                let _ = self.drain_in_flight(&mut lock(&self.writer));
                let _ = self.index();
                let _ = self.drain_in_flight(&mut lock(&self.writer));
                self.queue.stop();
                return After::Stopped;
            }
        };
        drop(state);
        if self.queue.step_done() {
            After::Again
        } else {
            idle_at.map_or(After::Rest, After::IdleAt)
        }
    }

    /// The volume's writer for a step of the committer, which never waits for it: while
    /// another write holds it (a cursor commit waiting for its window to land, say), the step
    /// ends at once, its shares (`group`) back in the queue, so that its thread runs other
    /// volumes' committers meanwhile; that write wakes the committer when it lets the writer go
    /// (see [`Shared::door`]).
    fn writer_or_yield(
        &self,
        group: &mut Option<Vec<AppendRequest>>,
    ) -> Option<std::sync::MutexGuard<'_, Writer>> {
        if let Some(writer) = self.try_writer() {
            return Some(writer);
        }
        self.queue.yield_step(group.take());
        self.committer_yielded.store(true, Ordering::SeqCst);
        // The writer may have been let go before the flag was set, with nobody to wake the
        // committer: it wakes itself.
        if self.try_writer().is_some() && self.committer_yielded.swap(false, Ordering::SeqCst) {
            self.queue.wake();
        }
        None
    }

    /// The writer if nobody holds it now (carrying on after a panic elsewhere, as
    /// [`lock`] does).
    fn try_writer(&self) -> Option<std::sync::MutexGuard<'_, Writer>> {
        match self.writer.try_lock() {
            Ok(writer) => Some(writer),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The committer's work once no append arrived for [`INDEX_WHEN_IDLE`]: settles a landing
    /// not known in time, indexes, records the high-water mark, and frees the page cache after
    /// [`RELEASE_CACHE_WHEN_IDLE`]. Answers when it is due again: soon while a window is in
    /// flight or records wait for the index, else when the cache is to be freed, else never
    /// (until the next append).
    fn idle_step(
        &self,
        state: &mut CommitterState,
        mut writer: std::sync::MutexGuard<'_, Writer>,
    ) -> Option<Instant> {
        let idle_from = state.last_group + INDEX_WHEN_IDLE;
        if Instant::now() < idle_from {
            return Some(idle_from);
        }
        let _ = self.index_locked(&mut writer);
        self.record_high_water(&mut state.high_water, writer.last_seq);
        let release_at = state.last_group + RELEASE_CACHE_WHEN_IDLE;
        if !state.cache_released && Instant::now() >= release_at {
            self.release_cache(&writer);
            state.cache_released = true;
        }
        if self.unsettled(&writer) {
            Some(Instant::now() + INDEX_WHEN_IDLE)
        } else {
            (!state.cache_released).then_some(release_at)
        }
    }

    /// Records the high-water mark after a commit (`last_seq` the newest seq committed): the
    /// first since the volume opened, then at most every [`HIGH_WATER_EVERY`] under steady
    /// appends (and when idle), so that a WAL lost after a kill under load reads as lost
    /// commits, never as a shorter log.
    fn follow_high_water(&self, state: &mut CommitterState, last_seq: i64) {
        if state
            .high_water_at
            .is_some_and(|at| at.elapsed() < HIGH_WATER_EVERY)
        {
            return;
        }
        self.record_high_water(&mut state.high_water, last_seq);
        state.high_water_at = Some(Instant::now());
    }

    /// Whether the idle work has more to do: a window in flight or a landing pending to settle,
    /// or records the index lacks (on a volume that still takes writes).
    fn unsettled(&self, writer: &Writer) -> bool {
        let takes_writes = self.damaged.get().is_none() && self.fenced.get().is_none();
        !writer.in_flight.is_empty()
            || (takes_writes && writer.published_seq > writer.indexed_through)
            || lock(&self.pending).is_some()
    }

    /// Moves every committed page into the database file and empties the WAL, then records the
    /// high-water mark (the checkpoint synced the database file, whatever `sync` is).
    pub(super) fn checkpoint(&self) -> Result<(), StoreError> {
        let writer = self.door();
        if self.damaged.get().is_some() {
            return Ok(());
        }
        let busy: i64 = writer
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))
            .map_err(|err| self.classify(err.into()))?;
        if busy == 0 {
            self.write_high_water(writer.last_seq);
        }
        Ok(())
    }

    /// Frees the writer's page cache (SQLite's copy of pages the OS caches anyway).
    fn release_cache(&self, writer: &Writer) {
        if let Err(err) = writer.conn.execute_batch("PRAGMA shrink_memory") {
            log::warn!(
                "{}: cannot release the page cache: {err}",
                self.path.display()
            );
        }
    }

    /// Commits `group` in one transaction and answers each of its callers: the records are
    /// staged in the transaction ([`Shared::stage_group`]), the transaction commits, and only
    /// then does the committed state reach memory and the callers ([`Shared::publish`]). The
    /// point between staging and committing is where the group's writes are whole and not yet
    /// durable: what must land elsewhere before a commit (a replica) goes there.
    fn commit_group(&self, writer: &mut Writer, group: Vec<AppendRequest>) {
        if let Some(damage) = self.damaged.get() {
            for request in group {
                (request.reply)(Err(damage.error()));
            }
            return;
        }
        if self.poisoned.load(Ordering::SeqCst) {
            return answer_all(group, StoreError::Poisoned);
        }
        if let Err(err) = self.settle_landing(writer) {
            return answer_all(group, err);
        }
        // Shares of stores opened before the volume last reloaded what memory holds (a
        // recovery) see an older log end: they are refused, and their partitions reopen.
        let (group, stale): (Vec<_>, Vec<_>) = group
            .into_iter()
            .partition(|request| !self.refuses_writes(request.epoch));
        for request in stale {
            (request.reply)(Err(StoreError::Poisoned));
        }
        if group.is_empty() {
            return;
        }
        let mut last_seq = writer.last_seq;
        let Writer {
            conn, in_flight, ..
        } = &mut *writer;
        // Set once the changes are handed to the stream: they may land even if the commit fails.
        let mut landing = None;
        let committed = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let staged = self.stage_group(&tx, in_flight, &group, &mut last_seq)?;
            self.injected_fault(Fault::BeforeCommit)?;
            landing = self.submit(&tx)?;
            tx.commit()?;
            Ok::<_, StoreError>(staged)
        })();
        match committed {
            Ok(staged) if landing.is_none() && writer.in_flight.is_empty() => {
                writer.last_seq = last_seq;
                writer.published_seq = last_seq;
                self.publish(staged, group);
            }
            Ok(staged) => {
                writer.last_seq = last_seq;
                let mut group = group;
                for request in &mut group {
                    if let Some(committed) = request.committed.take() {
                        committed();
                    }
                }
                writer.in_flight.push_back(InFlight {
                    landing,
                    staged,
                    group,
                    last_seq,
                    waiter: None,
                });
                let _ = self.settle_in_flight(writer);
            }
            Err(err) => {
                // Submitted but not committed here: the file takes the changes once landed.
                if let Some(landing) = landing {
                    *lock(&self.pending) = Some(PendingLanding::to_apply(landing));
                }
                answer_all(group, self.write_failed(err));
            }
        }
    }

    /// Runs `work` in one transaction not synced on its own (the next durable commit syncs it,
    /// the WAL being written in order) that commits at once and, on a replicated volume, joins
    /// the groups in flight (see [`Shared::commit_in_flight`]) with nobody waiting for it: for
    /// what can be rebuilt or may be forgotten (an index pass, a partition added).
    pub(super) fn commit_unsynced_in_flight<T>(
        &self,
        writer: &mut Writer,
        work: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        writer.conn.pragma_update(None, "synchronous", "OFF")?;
        let committed = self.commit_in_flight(writer, work);
        writer
            .conn
            .pragma_update(None, "synchronous", self.sync.pragma())?;
        committed.map(|(value, _settling)| value)
    }

    /// Publishes the groups in flight whose window landed, oldest first, and answers their
    /// callers. A landing that failed (the stream was fenced) fails every group in flight; one
    /// not known by its deadline answers them all `unavailable`, and the volume waits for its
    /// outcome to reload memory from the file (see `replication.rs`).
    pub(in crate::store) fn settle_in_flight(&self, writer: &mut Writer) -> Result<(), StoreError> {
        while let Some(front) = writer.in_flight.front_mut() {
            match front.landed() {
                Some(Ok(())) => {
                    let group = writer.in_flight.pop_front().expect("a group is in flight");
                    writer.published_seq = group.last_seq;
                    self.publish(group.staged, group.group);
                    if let Some(waiter) = group.waiter {
                        let _ = waiter.send(Ok(()));
                    }
                }
                Some(Err(reason)) => {
                    self.fail_in_flight(writer, &reason);
                    return Err(self.fence(reason));
                }
                None if front
                    .landing
                    .as_ref()
                    .is_some_and(|landing| Instant::now() >= landing.deadline()) =>
                {
                    let newest = writer
                        .in_flight
                        .back_mut()
                        .and_then(|group| group.landing.take());
                    self.fail_in_flight(writer, &StreamError::NotInTime);
                    let mut pending = lock(&self.pending);
                    // A landing pending already is newer: its outcome tells this one's too.
                    if pending.is_none()
                        && let Some(newest) = newest
                    {
                        *pending = Some(PendingLanding::committed(newest));
                    }
                    return Err(StreamError::NotInTime.into());
                }
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// Waits until every group in flight landed and is published (or the first one not
    /// landed by its deadline failed them all): for the writes that see what they bring.
    pub(in crate::store) fn drain_in_flight(&self, writer: &mut Writer) -> Result<(), StoreError> {
        loop {
            self.settle_in_flight(writer)?;
            let Some(front) = writer.in_flight.front_mut() else {
                return Ok(());
            };
            if let Some(landing) = &mut front.landing {
                let deadline = landing.deadline();
                landing.outcome(Some(deadline));
            }
        }
    }

    /// Answers every caller in flight with a failure (`reason`); what their groups bring to
    /// memory is dropped (the volume reloads it from the file once their landing is known).
    pub(in crate::store) fn fail_in_flight(&self, writer: &mut Writer, reason: &StreamError) {
        for group in writer.in_flight.drain(..) {
            group.fail(reason);
        }
    }

    /// Writes every batch of `group` in `tx`, handing out seqs after `last_seq`: the records,
    /// the due times they move (see `due.rs`), and each partition's backlog read in the same
    /// transaction. Nothing reaches memory.
    fn stage_group(
        &self,
        tx: &Transaction<'_>,
        in_flight: &VecDeque<InFlight>,
        group: &[AppendRequest],
        last_seq: &mut i64,
    ) -> Result<StagedGroup, StoreError> {
        let mut partitions: HashMap<i64, Staged> = HashMap::new();
        let mut outcomes = Vec::with_capacity(group.len());
        let mut insert = tx.prepare_cached(
            "INSERT INTO records (seq, partition, offset, dedup_key, payload, bytes, end_bytes, appended_at, checksum, meta)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )?;
        for request in group {
            let staged = partitions
                .entry(request.partition.key)
                .or_insert_with(|| Staged::new(&request.partition, in_flight));
            // Taken under the writer lock, so later offsets never get earlier timestamps.
            let appended_at = request.clock.now_ms();
            let mut answers = Vec::with_capacity(request.batches.len());
            for (batch, rejection) in &request.batches {
                answers.push(match rejection {
                    Some(rejection) => AppendOutcome::Rejected(rejection.clone()),
                    None => {
                        let before = staged.tail;
                        let offsets = self.insert_batch(
                            tx,
                            in_flight,
                            &mut insert,
                            staged,
                            last_seq,
                            batch,
                            appended_at,
                        )?;
                        staged.due = staged.due.after_append(
                            &staged.partition.retention,
                            before,
                            staged.tail,
                            appended_at,
                        );
                        AppendOutcome::Appended { offsets }
                    }
                });
            }
            outcomes.push(answers);
        }
        // One read of the cursors per partition, under no lock of its own (cursors move only
        // under the writer lock, which the committer holds).
        for staged in partitions.values_mut() {
            staged.pending = pending_deliveries(tx, staged.partition.key, staged.tail.next_offset)?;
            // Written only when these records make retention due sooner (see `due.rs`).
            if staged.due.at != staged.due_before {
                store_due_at(tx, staged.partition.key, staged.due.at)?;
            }
        }
        Ok(StagedGroup {
            outcomes,
            partitions,
        })
    }

    /// Brings a committed group to memory and answers its callers: the recent records first,
    /// then each partition's end (a reader that sees the new end finds every record below it).
    fn publish(&self, mut staged: StagedGroup, group: Vec<AppendRequest>) {
        {
            let mut recent = lock(&self.recent);
            for (key, staged) in &mut staged.partitions {
                if staged.rows.is_empty() {
                    continue;
                }
                staged.partition.commits.fetch_add(1, Ordering::Relaxed);
                let entry = recent.entry(*key).or_default();
                entry.rows.extend(staged.rows.drain(..));
                entry.keys.extend(staged.keys.drain());
            }
        }
        for staged in staged.partitions.values() {
            *lock(&staged.partition.tail) = staged.tail;
            *lock(&staged.partition.due) = staged.due;
        }
        for (request, outcomes) in group.into_iter().zip(staged.outcomes) {
            let pending = staged.partitions[&request.partition.key].pending;
            (request.reply)(Ok((outcomes, pending)));
        }
    }

    /// Writes one validated batch, returning each input record's offset.
    #[allow(clippy::too_many_arguments)]
    fn insert_batch(
        &self,
        tx: &Transaction<'_>,
        in_flight: &VecDeque<InFlight>,
        insert: &mut rusqlite::CachedStatement<'_>,
        staged: &mut Staged,
        last_seq: &mut i64,
        batch: &[NewRecord],
        appended_at: i64,
    ) -> Result<Vec<u64>, StoreError> {
        let key = staged.partition.key;
        let mut offsets = Vec::with_capacity(batch.len());
        for record in batch {
            let dedup_key = record.key.as_deref();
            if let Some(dedup_key) = dedup_key
                && let Some(offset) = self.offset_of_key(tx, in_flight, staged, dedup_key)?
            {
                offsets.push(offset);
                continue;
            }
            let offset = staged.tail.next_offset;
            let bytes = record.payload.len() as u64;
            staged.tail.next_offset += 1;
            staged.tail.end_bytes += bytes;
            *last_seq += 1;
            let seq = *last_seq;
            let meta = Meta::encode(
                &record.payload,
                record.message_key.as_deref(),
                &record.headers,
            );
            let payload = record.payload.as_bytes();
            insert.execute(params![
                seq,
                key,
                offset,
                dedup_key,
                record.payload.column(),
                bytes,
                staged.tail.end_bytes,
                appended_at,
                record_checksum(offset, dedup_key, payload, meta.as_deref()),
                meta
            ])?;
            staged.rows.push((offset, seq));
            if let Some(dedup_key) = dedup_key {
                staged.keys.insert(dedup_key.to_owned(), (offset, seq));
            }
            offsets.push(offset);
        }
        Ok(offsets)
    }

    /// The offset of the hot record carrying `dedup_key`: staged in this commit or a group in
    /// flight, recent, or indexed.
    fn offset_of_key(
        &self,
        tx: &Transaction<'_>,
        in_flight: &VecDeque<InFlight>,
        staged: &Staged,
        dedup_key: &str,
    ) -> Result<Option<u64>, StoreError> {
        let key = staged.partition.key;
        let in_flight = in_flight
            .iter()
            .rev()
            .filter_map(|group| group.staged.partitions.get(&key));
        for staged in std::iter::once(staged).chain(in_flight) {
            if let Some(&(offset, _)) = staged.keys.get(dedup_key) {
                return Ok(Some(offset));
            }
        }
        if let Some(&(offset, _)) = lock(&self.recent)
            .get(&key)
            .and_then(|recent| recent.keys.get(dedup_key))
        {
            return Ok(Some(offset));
        }
        Ok(tx
            .prepare_cached("SELECT offset FROM key_index WHERE partition = ?1 AND dedup_key = ?2")?
            .query_row(params![key, dedup_key], |row| row.get(0))
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::clock::SystemClock;
    use crate::store::batch::AppendRejection;
    use crate::store::commit_queue::AppendResult;
    use crate::store::tail::Retention;
    use crate::store::{SyncMode, Volume};

    /// A partition of `volume` opened (added if new), as its store would hold it.
    fn partition(volume: &Volume, topic: &str) -> (Arc<PartitionTail>, u64) {
        let (key, tail, due, epoch) = volume
            .shared()
            .open_partition(topic, 0, true)
            .unwrap()
            .unwrap();
        let partition = PartitionTail::new(key, tail, Retention::default(), due);
        (Arc::new(partition), epoch)
    }

    /// A share of `batches` for `partition`, and where its answer arrives.
    fn share(
        (partition, epoch): &(Arc<PartitionTail>, u64),
        batches: Vec<(Vec<NewRecord>, Option<AppendRejection>)>,
    ) -> (AppendRequest, mpsc::Receiver<AppendResult>) {
        let (answer, answered) = mpsc::channel();
        let request = AppendRequest {
            partition: partition.clone(),
            epoch: *epoch,
            clock: Arc::new(SystemClock),
            batches,
            reply: Box::new(move |result| {
                let _ = answer.send(result);
            }),
            committed: None,
        };
        (request, answered)
    }

    fn records(texts: &[&str]) -> Vec<NewRecord> {
        texts.iter().map(|text| NewRecord::new(*text)).collect()
    }

    fn offsets(result: AppendResult) -> Vec<Vec<u64>> {
        let (outcomes, _) = result.unwrap();
        outcomes
            .into_iter()
            .map(|outcome| match outcome {
                AppendOutcome::Appended { offsets } => offsets,
                AppendOutcome::Rejected(_) => Vec::new(),
            })
            .collect()
    }

    fn stored_seqs(volume: &Volume) -> Vec<i64> {
        let writer = lock(&volume.shared().writer);
        let mut statement = writer
            .conn
            .prepare("SELECT seq FROM records ORDER BY seq")
            .unwrap();
        let seqs = statement.query_map([], |row| row.get(0)).unwrap();
        seqs.collect::<Result<_, _>>().unwrap()
    }

    fn commit(volume: &Volume, group: Vec<AppendRequest>) {
        let shared = volume.shared();
        shared.commit_group(&mut lock(&shared.writer), group);
    }

    /// The shares of two partitions commit as one group: each batch gets its own contiguous
    /// offsets in its partition, in the group's order, a refused batch writes nothing, a key
    /// repeated in a later share of the same partition answers its first offset, the rows take
    /// contiguous seqs, and each partition's end moves only once the group committed.
    #[test]
    fn a_group_commits_the_shares_of_many_partitions_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let volume = Volume::open(dir.path().join("v.sqlite"), SyncMode::Normal).unwrap();
        let orders = partition(&volume, "orders");
        let users = partition(&volume, "users");
        let keyed = vec![NewRecord::keyed("k", "1")];
        let (first, first_answer) = share(
            &orders,
            vec![
                (records(&["1", "2"]), None),
                (records(&["x"]), Some(AppendRejection::EmptyBatch)),
                (keyed.clone(), None),
            ],
        );
        let (second, second_answer) = share(&users, vec![(records(&["1"]), None)]);
        let (third, third_answer) = share(&orders, vec![(keyed, None), (records(&["3"]), None)]);

        commit(&volume, vec![first, second, third]);

        assert_eq!(
            offsets(first_answer.recv().unwrap()),
            [vec![0, 1], vec![], vec![2]]
        );
        assert_eq!(offsets(second_answer.recv().unwrap()), [vec![0]]);
        assert_eq!(offsets(third_answer.recv().unwrap()), [vec![2], vec![3]]);
        assert_eq!(stored_seqs(&volume), [1, 2, 3, 4, 5]);
        assert_eq!(orders.0.get().next_offset, 4);
        assert_eq!(users.0.get().next_offset, 1);
    }

    /// A commit that fails with an unknown outcome poisons the volume: every write is refused
    /// until a partition is opened again, which recovers the volume under a new epoch. Stores
    /// of the old epoch keep refusing; the failed group left nothing, so its offsets are handed
    /// out again.
    #[test]
    fn a_failed_commit_is_recovered_under_a_new_epoch() {
        let dir = tempfile::tempdir().unwrap();
        let volume = Volume::open(dir.path().join("v.sqlite"), SyncMode::Normal).unwrap();
        let shared = volume.shared();
        let orders = partition(&volume, "orders");
        let old_epoch = orders.1;
        shared.arm(Fault::BeforeCommit);
        let (failing, failed) = share(&orders, vec![(records(&["1"]), None)]);
        let (behind, refused) = share(&orders, vec![(records(&["2"]), None)]);
        commit(&volume, vec![failing, behind]);
        assert!(failed.recv().unwrap().unwrap_err().is_uncertain());
        assert!(matches!(refused.recv().unwrap(), Err(StoreError::Poisoned)));
        assert!(shared.refuses_writes(old_epoch));
        let (later, refused) = share(&orders, vec![(records(&["3"]), None)]);
        commit(&volume, vec![later]);
        assert!(matches!(refused.recv().unwrap(), Err(StoreError::Poisoned)));

        let reopened = partition(&volume, "orders");
        assert_eq!(reopened.1, old_epoch + 1);
        assert!(shared.refuses_writes(old_epoch));
        assert!(!shared.refuses_writes(reopened.1));
        assert!(stored_seqs(&volume).is_empty());
        // A share the old store queued is refused even once the volume recovered: it saw the
        // log's end as it was before.
        let (stale, refused) = share(&orders, vec![(records(&["2"]), None)]);
        let (retry, answer) = share(&reopened, vec![(records(&["1"]), None)]);
        commit(&volume, vec![stale, retry]);
        assert!(matches!(refused.recv().unwrap(), Err(StoreError::Poisoned)));
        assert_eq!(offsets(answer.recv().unwrap()), [vec![0]]);
    }
}

/// Group commits on a replicated volume, with a stream whose landings each test answers.
#[cfg(test)]
mod replicated {
    use crate::store::CommitterPool;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::{Mutex, mpsc};

    use super::*;
    use crate::clock::SystemClock;
    use crate::store::commit_queue::AppendResult;
    use crate::store::replication::{Landed, OnLanded, Position, Stream, VolumeReplica};
    use crate::store::tail::Retention;
    use crate::store::volume::Sees;
    use crate::store::{SyncMode, Volume};

    /// Lands every submission at once, or holds them until the test lands them.
    struct HeldStream {
        hold: AtomicBool,
        submitted: Mutex<Vec<(u64, OnLanded)>>,
        next_seq: AtomicU64,
        put_retry: Duration,
    }

    impl Stream for HeldStream {
        fn submit(
            &self,
            _: usize,
            _: Arc<[u8]>,
            on_landed: OnLanded,
        ) -> Result<Position, StreamError> {
            let seq = self.next_seq.fetch_add(1, Ordering::SeqCst) + 1;
            lock(&self.submitted).push((seq, on_landed));
            if !self.hold.load(Ordering::SeqCst) {
                self.answer_all(None);
            }
            Ok(Position {
                node: "test".into(),
                inc: 1,
                seq,
            })
        }

        fn put_retry(&self) -> Duration {
            self.put_retry
        }

        fn heals(&self) -> bool {
            false
        }

        fn damaged(&self, _: usize) -> bool {
            false
        }
    }

    impl HeldStream {
        /// Answers every submission so far: landed, or `refused` with that reason.
        fn answer_all(&self, refused: Option<&StreamError>) {
            let submitted = std::mem::take(&mut *lock(&self.submitted));
            for (seq, on_landed) in submitted {
                let landed: Landed = match refused {
                    None => Ok(Position {
                        node: "test".into(),
                        inc: 1,
                        seq,
                    }),
                    Some(reason) => Err(reason.clone()),
                };
                on_landed(landed);
            }
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        volume: Arc<Volume>,
        stream: Arc<HeldStream>,
    }

    fn replicated_volume(put_retry: Duration) -> Fixture {
        replicated_volume_on(put_retry, &CommitterPool::new(1))
    }

    fn replicated_volume_on(put_retry: Duration, pool: &CommitterPool) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let stream = Arc::new(HeldStream {
            hold: AtomicBool::new(false),
            submitted: Mutex::default(),
            next_seq: AtomicU64::new(0),
            put_retry,
        });
        let replica = VolumeReplica {
            stream: stream.clone(),
            volume: 0,
        };
        let volume = Volume::open_in(
            dir.path().join("v.sqlite"),
            SyncMode::Normal,
            Some(replica),
            pool,
        )
        .unwrap();
        Fixture {
            _dir: dir,
            volume,
            stream,
        }
    }

    fn partition(volume: &Volume, topic: &str) -> (Arc<PartitionTail>, u64) {
        let (key, tail, due, epoch) = volume
            .shared()
            .open_partition(topic, 0, true)
            .unwrap()
            .unwrap();
        let partition = PartitionTail::new(key, tail, Retention::default(), due);
        (Arc::new(partition), epoch)
    }

    /// A share of one batch for `partition`: where its answer arrives, and whether it was told
    /// it committed locally.
    fn share(
        (partition, epoch): &(Arc<PartitionTail>, u64),
        batch: Vec<NewRecord>,
    ) -> (AppendRequest, mpsc::Receiver<AppendResult>, Arc<AtomicBool>) {
        let (answer, answered) = mpsc::channel();
        let committed = Arc::new(AtomicBool::new(false));
        let told = committed.clone();
        let request = AppendRequest {
            partition: partition.clone(),
            epoch: *epoch,
            clock: Arc::new(SystemClock),
            batches: vec![(batch, None)],
            reply: Box::new(move |result| {
                let _ = answer.send(result);
            }),
            committed: Some(Box::new(move || told.store(true, Ordering::SeqCst))),
        };
        (request, answered, committed)
    }

    fn commit(volume: &Volume, group: Vec<AppendRequest>) {
        let shared = volume.shared();
        shared.commit_group(&mut lock(&shared.writer), group);
    }

    fn offsets(result: AppendResult) -> Vec<u64> {
        match result.unwrap().0.remove(0) {
            AppendOutcome::Appended { offsets } => offsets,
            AppendOutcome::Rejected(rejection) => panic!("rejected: {rejection:?}"),
        }
    }

    fn stored_records(volume: &Volume) -> i64 {
        lock(&volume.shared().writer)
            .conn
            .query_row("SELECT COUNT(*) FROM records", [], |row| row.get(0))
            .unwrap()
    }

    const LONG: Duration = Duration::from_secs(60);

    /// A group committed locally waits for its landing to be answered and seen, while the next
    /// group commits on top of it: it continues its offsets and finds its keys. Both are
    /// answered, and the partition's end moves, only once they landed.
    #[test]
    fn the_next_group_commits_while_the_one_before_waits_for_its_landing() {
        let fixture = replicated_volume(LONG);
        let orders = partition(&fixture.volume, "orders");
        fixture.stream.hold.store(true, Ordering::SeqCst);
        let (first, first_answer, first_committed) = share(
            &orders,
            vec![NewRecord::keyed("k", "1"), NewRecord::new("2")],
        );
        commit(&fixture.volume, vec![first]);
        assert!(first_committed.load(Ordering::SeqCst));
        assert!(first_answer.try_recv().is_err(), "answered before landing");

        let (second, second_answer, second_committed) = share(
            &orders,
            vec![NewRecord::keyed("k", "again"), NewRecord::new("3")],
        );
        commit(&fixture.volume, vec![second]);
        assert!(second_committed.load(Ordering::SeqCst));
        assert_eq!(stored_records(&fixture.volume), 3);
        assert_eq!(
            orders.0.get().next_offset,
            0,
            "readers see unlanded records"
        );
        assert!(second_answer.try_recv().is_err(), "answered before landing");

        fixture.stream.answer_all(None);
        assert_eq!(offsets(first_answer.recv().unwrap()), [0, 1]);
        assert_eq!(offsets(second_answer.recv().unwrap()), [0, 2]);
        assert_eq!(orders.0.get().next_offset, 3);
    }

    /// An index pass does not wait for its window: the next group commits while it is stored,
    /// and is answered once both landed.
    #[test]
    fn an_index_pass_joins_the_groups_in_flight() {
        let fixture = replicated_volume(Duration::from_secs(2));
        let shared = fixture.volume.shared();
        let orders = partition(&fixture.volume, "orders");
        let (first, first_answer, _) = share(&orders, vec![NewRecord::keyed("k", "1")]);
        commit(&fixture.volume, vec![first]);
        assert_eq!(offsets(first_answer.recv().unwrap()), [0]);

        fixture.stream.hold.store(true, Ordering::SeqCst);
        shared
            .index()
            .expect("an index pass answers before its window lands");
        let indexed: i64 = lock(&shared.writer)
            .conn
            .query_row("SELECT COUNT(*) FROM record_index", [], |row| row.get(0))
            .unwrap();
        assert_eq!(indexed, 1, "committed locally");
        let (second, second_answer, second_committed) = share(
            &orders,
            vec![NewRecord::keyed("k", "again"), NewRecord::new("2")],
        );
        commit(&fixture.volume, vec![second]);
        assert!(second_committed.load(Ordering::SeqCst));
        assert!(second_answer.try_recv().is_err(), "answered before landing");

        fixture.stream.answer_all(None);
        shared.settle_landing(&mut lock(&shared.writer)).unwrap();
        assert_eq!(offsets(second_answer.recv().unwrap()), [0, 1]);
        assert_eq!(orders.0.get().next_offset, 2);
    }

    /// A landing not known by its deadline answers its callers unavailable, and the volume
    /// refuses writes until the outcome is known; once it landed, the volume reloads its memory
    /// from the file (a new epoch), which holds the records.
    #[test]
    fn a_group_not_landed_in_time_is_answered_unavailable_and_reloaded_once_landed() {
        let fixture = replicated_volume(Duration::ZERO);
        let shared = fixture.volume.shared();
        let orders = partition(&fixture.volume, "orders");
        fixture.stream.hold.store(true, Ordering::SeqCst);
        let (late, late_answer, _) = share(&orders, vec![NewRecord::new("1")]);
        commit(&fixture.volume, vec![late]);
        assert!(matches!(
            late_answer.recv().unwrap(),
            Err(StoreError::Replica(StreamError::NotInTime))
        ));
        let (refused, refused_answer, _) = share(&orders, vec![NewRecord::new("2")]);
        commit(&fixture.volume, vec![refused]);
        assert!(matches!(
            refused_answer.recv().unwrap(),
            Err(StoreError::Replica(StreamError::Unsettled))
        ));
        assert_eq!(stored_records(&fixture.volume), 1);

        fixture.stream.hold.store(false, Ordering::SeqCst);
        fixture.stream.answer_all(None);
        shared.settle_landing(&mut lock(&shared.writer)).unwrap();
        assert!(shared.refuses_writes(orders.1));
        let reopened = partition(&fixture.volume, "orders");
        assert_eq!(reopened.0.get().next_offset, 1);
    }

    /// A landing refused (another owner fenced the stream) fails the groups in flight, and the
    /// volume refuses writes for good.
    #[test]
    fn a_fenced_stream_fails_the_groups_in_flight_and_every_later_write() {
        let fixture = replicated_volume(LONG);
        let orders = partition(&fixture.volume, "orders");
        fixture.stream.hold.store(true, Ordering::SeqCst);
        let (first, first_answer, _) = share(&orders, vec![NewRecord::new("1")]);
        commit(&fixture.volume, vec![first]);
        let (second, second_answer, _) = share(&orders, vec![NewRecord::new("2")]);
        commit(&fixture.volume, vec![second]);

        let sealed = StreamError::Sealed {
            key: "replica/wal/b/1/fence".into(),
        };
        fixture.stream.answer_all(Some(&sealed));
        for answer in [first_answer, second_answer] {
            match answer.recv().unwrap() {
                Err(StoreError::Replica(reason)) => assert_eq!(reason, sealed),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(orders.0.get().next_offset, 0);
        let (later, later_answer, _) = share(&orders, vec![NewRecord::new("3")]);
        commit(&fixture.volume, vec![later]);
        assert!(matches!(
            later_answer.recv().unwrap(),
            Err(StoreError::Replica(StreamError::Sealed { .. }))
        ));
    }

    /// A write that waits for its window (a cursor commit while the bucket holds its answers)
    /// holds neither the volume's writer nor a committer thread: meanwhile the writer is free,
    /// a second write commits and an append is committed by a committer step that ends at once
    /// (no pool thread stays busy); none is answered before its window landed, and all are
    /// once the windows land.
    #[test]
    fn a_write_waiting_for_its_window_holds_neither_the_writer_nor_a_committer_thread() {
        let pool = CommitterPool::new(1);
        let fixture = replicated_volume_on(LONG, &pool);
        let orders = partition(&fixture.volume, "orders");
        let shared = fixture.volume.shared_arc();
        let submitted = || lock(&fixture.stream.submitted).len();
        fixture.stream.hold.store(true, Ordering::SeqCst);
        let door = |sees| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                shared.write(shared.epoch(), sees, |tx| {
                    tx.execute("UPDATE indexed SET through_seq = through_seq", [])?;
                    Ok(())
                })
            })
        };
        let until = |what: &str, done: &dyn Fn() -> bool| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !done() {
                assert!(Instant::now() < deadline, "{what}");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let first = door(Sees::Published);
        until("the first write's window is submitted", &|| {
            submitted() == 1
        });
        assert!(shared.writer.try_lock().is_ok(), "the writer is free");
        let second = door(Sees::Published);
        until("the second write commits beside it", &|| submitted() == 2);
        let (append, answered, _) = share(&orders, vec![NewRecord::new("1")]);
        assert!(shared.queue.push(append).is_ok());
        until("the append commits beside them", &|| submitted() == 3);
        until("no committer thread stays busy", &|| pool.busy() == 0);
        std::thread::sleep(Duration::from_millis(100));
        assert!(!first.is_finished() && !second.is_finished());
        assert!(
            answered.try_recv().is_err(),
            "not answered before it landed"
        );

        fixture.stream.hold.store(false, Ordering::SeqCst);
        fixture.stream.answer_all(None);
        for write in [first, second] {
            write.join().unwrap().expect("the write landed");
        }
        let answer = answered
            .recv_timeout(Duration::from_secs(10))
            .expect("the append is answered once its window landed");
        assert!(answer.is_ok(), "{answer:?}");
    }

    /// A write whose window does not land by its deadline is answered `unavailable` even with
    /// no committer step to settle it, and the volume takes no write until the landing is
    /// known; once it landed, writes are taken again and the write is in the file.
    #[test]
    fn a_write_not_landed_in_time_is_answered_unavailable_and_settled_once_it_lands() {
        let fixture = replicated_volume(Duration::from_millis(200));
        let shared = fixture.volume.shared_arc();
        fixture.stream.hold.store(true, Ordering::SeqCst);
        let write = |value: i64| {
            shared.write(shared.epoch(), Sees::Published, |tx| {
                tx.execute("UPDATE indexed SET through_seq = ?1", [value])?;
                Ok(())
            })
        };
        let started = Instant::now();
        assert!(matches!(
            write(7),
            Err(StoreError::Replica(StreamError::NotInTime))
        ));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(matches!(
            write(8),
            Err(StoreError::Replica(StreamError::Unsettled))
        ));

        fixture.stream.hold.store(false, Ordering::SeqCst);
        fixture.stream.answer_all(None);
        // Settling the landing reloaded what memory holds (a new epoch): a write under the old
        // one is refused, as a store opened before would be, and taken once reopened.
        write(9)
            .or_else(|err| {
                assert!(matches!(err, StoreError::Poisoned), "{err:?}");
                write(9)
            })
            .expect("writes are taken again once the landing is known");
        let through: i64 = shared
            .snapshot(|conn| {
                Ok(conn.query_row("SELECT through_seq FROM indexed", [], |row| row.get(0))?)
            })
            .unwrap();
        assert_eq!(through, 9);
    }
}
