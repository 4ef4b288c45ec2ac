//! The committer thread: it takes every share queued for the next group commit, commits them
//! in one transaction (one fsync), answers each caller, and indexes when idle.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use super::health::Fault;
use super::{INDEX_EVERY_ROWS, Shared, Writer};
use crate::store::batch::{AppendOutcome, NewRecord, record_checksum};
use crate::store::commit_queue::{AppendRequest, Next};
use crate::store::due::store_due_at;
use crate::store::tail::{Due, PartitionTail, Tail};
use crate::store::{StoreError, lock};

/// The committer indexes when no append has arrived for this long.
const INDEX_WHEN_IDLE: Duration = Duration::from_millis(20);

/// The committer frees the writer's page cache after this long without an append, so an idle
/// node's memory goes back to where it started.
const RELEASE_CACHE_WHEN_IDLE: Duration = Duration::from_secs(5);

/// What a group commit wrote for one partition, applied to memory only once it committed.
struct Staged {
    partition: Arc<PartitionTail>,
    tail: Tail,
    due: Due,
    /// The partition's backlog after the commit (see [`pending_deliveries`]).
    pending: u64,
    rows: Vec<(u64, i64)>,
    keys: HashMap<String, (u64, i64)>,
}

impl Staged {
    fn new(partition: &Arc<PartitionTail>) -> Self {
        Self {
            partition: partition.clone(),
            tail: partition.get(),
            due: *lock(&partition.due),
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
    /// The committer thread: takes every queued share, commits them in one transaction, answers
    /// each, and indexes when idle or when enough records wait.
    pub(super) fn run_committer(self: Arc<Self>) {
        let (mut expected, mut last_commit) = (0, Duration::ZERO);
        let (mut last_group, mut cache_released) = (Instant::now(), false);
        let mut high_water = lock(&self.writer).last_seq;
        loop {
            let group = match self
                .queue
                .next_group(INDEX_WHEN_IDLE, expected, last_commit / 2)
            {
                Next::Group(group) => group,
                Next::Idle => {
                    // A landing not known in time is settled as soon as its outcome is.
                    let _ = self.settle_landing(&mut lock(&self.writer));
                    let _ = self.index();
                    self.record_high_water(&mut high_water);
                    if !cache_released && last_group.elapsed() >= RELEASE_CACHE_WHEN_IDLE {
                        self.release_cache();
                        cache_released = true;
                    }
                    continue;
                }
                Next::Closed => break,
            };
            (last_group, cache_released) = (Instant::now(), false);
            expected = group.iter().map(|share| share.batches.len()).sum();
            let mut writer = lock(&self.writer);
            let started = Instant::now();
            self.commit_group(&mut writer, group);
            last_commit = started.elapsed();
            if (writer.last_seq - writer.indexed_through) as usize >= INDEX_EVERY_ROWS {
                let _ = self.index_locked(&mut writer);
            }
        }
        let _ = self.index();
    }

    /// Moves every committed page into the database file and empties the WAL, then records the
    /// high-water mark (the checkpoint synced the database file, whatever `sync` is).
    pub(super) fn checkpoint(&self) -> Result<(), StoreError> {
        let writer = lock(&self.writer);
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
    fn release_cache(&self) {
        let writer = lock(&self.writer);
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
                (request.reply)(Err(StoreError::Corrupted {
                    reason: damage.reason.clone(),
                }));
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
        let committed = (|| {
            let tx = writer
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            let staged = self.stage_group(&tx, &group, &mut last_seq)?;
            self.injected_fault(Fault::BeforeCommit)?;
            self.land(&tx)?;
            tx.commit()?;
            Ok::<_, StoreError>(staged)
        })();
        match committed {
            Ok(staged) => {
                writer.last_seq = last_seq;
                self.publish(staged, group);
            }
            Err(err) => {
                answer_all(group, self.write_failed(err));
            }
        }
    }

    /// Writes every batch of `group` in `tx`, handing out seqs after `last_seq`: the records,
    /// the due times they move (see `due.rs`), and each partition's backlog read in the same
    /// transaction. Nothing reaches memory.
    fn stage_group(
        &self,
        tx: &Transaction<'_>,
        group: &[AppendRequest],
        last_seq: &mut i64,
    ) -> Result<StagedGroup, StoreError> {
        let mut partitions: HashMap<i64, Staged> = HashMap::new();
        let mut outcomes = Vec::with_capacity(group.len());
        let mut insert = tx.prepare_cached(
            "INSERT INTO records (seq, partition, offset, dedup_key, payload, bytes, end_bytes, appended_at, checksum)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )?;
        for request in group {
            let staged = partitions
                .entry(request.partition.key)
                .or_insert_with(|| Staged::new(&request.partition));
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
            if staged.due.at != lock(&staged.partition.due).at {
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
    fn insert_batch(
        &self,
        tx: &Transaction<'_>,
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
                && let Some(offset) = self.offset_of_key(tx, staged, dedup_key)?
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
            insert.execute(params![
                seq,
                key,
                offset,
                dedup_key,
                record.payload,
                bytes,
                staged.tail.end_bytes,
                appended_at,
                record_checksum(offset, dedup_key, &record.payload)
            ])?;
            staged.rows.push((offset, seq));
            if let Some(dedup_key) = dedup_key {
                staged.keys.insert(dedup_key.to_owned(), (offset, seq));
            }
            offsets.push(offset);
        }
        Ok(offsets)
    }

    /// The offset of the hot record carrying `dedup_key`: staged in this commit, recent, or
    /// indexed.
    fn offset_of_key(
        &self,
        tx: &Transaction<'_>,
        staged: &Staged,
        dedup_key: &str,
    ) -> Result<Option<u64>, StoreError> {
        if let Some(&(offset, _)) = staged.keys.get(dedup_key) {
            return Ok(Some(offset));
        }
        let key = staged.partition.key;
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
        let partition = PartitionTail {
            key,
            tail: std::sync::Mutex::new(tail),
            retention: Retention::default(),
            due: std::sync::Mutex::new(due),
        };
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
