//! Appends: the way into the volume's group commit. Deduplication and offsets are the
//! committer's (`volume/committer.rs`); what a batch is made of is `batch.rs`.

use super::batch::{AppendOutcome, AppendRejection, NewRecord, check_batch};
use super::commit_queue::{AppendReply, AppendRequest, Committed};
use super::{LogStore, StoreError};

impl LogStore {
    /// Appends one batch atomically: every record gets an offset in one transaction, or none
    /// does. New records get contiguous offsets in order of first appearance; a key repeated
    /// inside the batch gets one record (the first occurrence's payload); a key a hot record
    /// already has returns that record's offset.
    ///
    /// Blocks until the transaction is durable (per [`SyncMode`](super::SyncMode)).
    ///
    /// # Errors
    /// A storage failure ([`StoreError::Sqlite`]: the outcome is unknown and the store now
    /// refuses writes) or [`StoreError::Poisoned`]. A refused batch is not an error but
    /// [`AppendOutcome::Rejected`].
    pub fn append(&self, batch: &[NewRecord]) -> Result<AppendOutcome, StoreError> {
        let mut outcomes = self.append_batches(&[batch])?;
        Ok(outcomes.remove(0))
    }

    /// Group commit: appends many callers' batches in one transaction (one fsync). Each batch
    /// keeps its own atomicity, contiguous offsets and rejection, exactly as if appended alone
    /// in this order; a later batch sees the keys of an earlier one.
    ///
    /// Blocks until the volume's committer has committed them (together with whatever other
    /// partitions of the volume queued meanwhile).
    ///
    /// # Errors
    /// As [`append`](Self::append); a storage failure fails every batch of the group.
    pub fn append_batches<B: AsRef<[NewRecord]>>(
        &self,
        batches: &[B],
    ) -> Result<Vec<AppendOutcome>, StoreError> {
        let (answer, answered) = std::sync::mpsc::channel();
        let owned = batches
            .iter()
            .map(|batch| batch.as_ref().to_vec())
            .collect();
        self.submit_append(
            owned,
            Box::new(move |result| {
                let _ = answer.send(result);
            }),
            None,
        );
        let (outcomes, _pending) = answered.recv().unwrap_or(Err(StoreError::Poisoned))?;
        Ok(outcomes)
    }

    /// Queues `batches` for the volume's next group commit without waiting; `reply` gets one
    /// outcome per batch and the partition's backlog after the commit
    /// ([`pending_deliveries`](Self::pending_deliveries)), on the committer's thread, or at once
    /// on this one when every batch is refused or the store refuses writes. On a replicated
    /// volume the reply waits for the commit's landing; `committed`, when given, is called as
    /// soon as it committed locally (never when the reply comes first), so the caller may send
    /// its next batches meanwhile.
    pub(crate) fn submit_append(
        &self,
        batches: Vec<Vec<NewRecord>>,
        reply: AppendReply,
        committed: Option<Committed>,
    ) {
        let checked: Vec<_> = batches
            .into_iter()
            .map(|batch| {
                let check = self.check_batch(&batch);
                (batch, check)
            })
            .collect();
        if checked.iter().all(|(_, check)| check.is_some()) {
            // Nothing to write: answer without touching the database.
            let outcomes = checked
                .into_iter()
                .filter_map(|(_, check)| check.map(AppendOutcome::Rejected))
                .collect();
            return reply(Ok((outcomes, self.pending_deliveries().unwrap_or(0))));
        }
        if self.is_poisoned() {
            return reply(Err(StoreError::Poisoned));
        }
        self.volume.submit(AppendRequest {
            partition: self.tail.clone(),
            epoch: self.epoch,
            clock: self.options.clock.clone(),
            batches: checked,
            reply,
            committed,
        });
    }

    fn check_batch(&self, batch: &[NewRecord]) -> Option<AppendRejection> {
        check_batch(
            batch,
            self.options.max_batch_size,
            self.options.max_record_bytes,
        )
    }
}
