//! Idempotent producers: ids handed out by InitProducerId, and where each producer's sequence
//! stands in each partition.
//!
//! A batch of an idempotent producer is written with a deduplication key per record,
//! `kafka:{producer}:{epoch}:{sequence}`, so a batch sent again after a lost answer gets its
//! first offsets back and is not written twice: the log's own rule, which holds across
//! restarts and failovers (while the records are hot). The sequence each partition expects
//! next is kept here, in memory, to refuse gaps and stale epochs as Kafka brokers do; a
//! partition this node has not seen the producer write (after a restart, say) takes the
//! producer's next batch as it comes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Producer states not used for this long are forgotten (their records keep their keys).
const IDLE: Duration = Duration::from_secs(60 * 60);
/// Forgetting runs once this many states were added since it last ran.
const SWEEP_EVERY: usize = 10_000;

/// Where idempotent producers stand.
#[derive(Default)]
pub(crate) struct Producers {
    states: Mutex<States>,
}

#[derive(Default)]
struct States {
    by_partition: HashMap<(i64, String, u32), State>,
    added: usize,
}

/// A producer's place in one partition.
#[derive(Debug, Clone, Copy)]
struct State {
    epoch: i16,
    /// The sequence of the record it sends next.
    next: i32,
    used: Instant,
}

/// What to do with a producer's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Check {
    /// Write it (a batch sent again is found by its records' keys and not written twice).
    Write,
    /// A sequence past the next expected: records were lost between.
    OutOfOrder,
    /// An epoch older than the producer's current one: a fenced producer.
    StaleEpoch,
}

impl Producers {
    /// A fresh producer id: random, so that ids never repeat across restarts and nodes.
    pub fn new_id() -> i64 {
        (uuid::Uuid::new_v4().as_u64_pair().0 >> 2) as i64
    }

    /// Whether `batch` may be written.
    pub fn check(&self, batch: &Batch<'_>) -> Check {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let Some(state) = states.by_partition.get(&batch.state_key()) else {
            return Check::Write;
        };
        if batch.epoch < state.epoch {
            return Check::StaleEpoch;
        }
        if batch.epoch > state.epoch {
            // A new epoch starts its sequences again at 0.
            return if batch.sequence == 0 {
                Check::Write
            } else {
                Check::OutOfOrder
            };
        }
        // Anything before the next sequence is a batch sent again.
        match after(batch.sequence, state.next) {
            0 => Check::Write,
            gap if gap < HALF => Check::OutOfOrder,
            _ => Check::Write,
        }
    }

    /// Records that `batch`, of `count` records, was written.
    pub fn written(&self, batch: &Batch<'_>, count: usize) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let next = batch.sequence_of(count);
        let now = Instant::now();
        let state = states
            .by_partition
            .entry(batch.state_key())
            .or_insert(State {
                epoch: batch.epoch,
                next,
                used: now,
            });
        // A batch sent again does not move the sequence back.
        if batch.epoch > state.epoch || (1..HALF).contains(&after(next, state.next)) {
            state.epoch = batch.epoch;
            state.next = next;
        }
        state.used = now;
        states.added += 1;
        if states.added >= SWEEP_EVERY {
            states.added = 0;
            states
                .by_partition
                .retain(|_, state| now.duration_since(state.used) < IDLE);
        }
    }
}

/// A batch of an idempotent producer: who sent it, to where, and its first sequence.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Batch<'a> {
    pub producer: i64,
    pub epoch: i16,
    pub topic: &'a str,
    pub partition: u32,
    pub sequence: i32,
}

impl Batch<'_> {
    fn state_key(&self) -> (i64, String, u32) {
        (self.producer, self.topic.to_owned(), self.partition)
    }

    /// The sequence of its record `at` (wrapping).
    fn sequence_of(&self, at: usize) -> i32 {
        ((i64::from(self.sequence) + at as i64) % SEQUENCES) as i32
    }

    /// The deduplication key of its record `at`: `kafka:{producer}:{epoch}:{sequence}`.
    pub fn dedup_key(&self, at: usize) -> String {
        format!(
            "kafka:{}:{}:{}",
            self.producer,
            self.epoch,
            self.sequence_of(at)
        )
    }
}

/// Sequences run from 0 to `i32::MAX`, then start again at 0.
const SEQUENCES: i64 = 1 << 31;
const HALF: i64 = SEQUENCES / 2;

/// How far sequence `a` is after `b`, going forward (wrapping).
fn after(a: i32, b: i32) -> i64 {
    (i64::from(a) - i64::from(b)).rem_euclid(SEQUENCES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(producer: i64, epoch: i16, partition: u32, sequence: i32) -> Batch<'static> {
        Batch {
            producer,
            epoch,
            topic: "t",
            partition,
            sequence,
        }
    }

    #[test]
    fn sequences_in_order_again_and_out_of_order() {
        let producers = Producers::default();
        let check = |producer, epoch, partition, sequence| {
            producers.check(&batch(producer, epoch, partition, sequence))
        };
        assert_eq!(check(7, 0, 0, 5), Check::Write, "unseen");
        producers.written(&batch(7, 0, 0, 0), 3);
        assert_eq!(check(7, 0, 0, 3), Check::Write, "next");
        assert_eq!(check(7, 0, 0, 0), Check::Write, "sent again");
        assert_eq!(check(7, 0, 0, 4), Check::OutOfOrder, "a gap");
        assert_eq!(check(7, 0, 1, 4), Check::Write, "another partition");
        producers.written(&batch(7, 0, 0, 0), 3);
        assert_eq!(check(7, 0, 0, 3), Check::Write, "not moved back");
        assert_eq!(check(7, 1, 0, 0), Check::Write, "a new epoch");
        assert_eq!(check(7, 1, 0, 3), Check::OutOfOrder);
        producers.written(&batch(7, 1, 0, 0), 1);
        assert_eq!(check(7, 0, 0, 3), Check::StaleEpoch);
    }

    #[test]
    fn sequences_wrap() {
        let producers = Producers::default();
        producers.written(&batch(1, 0, 0, i32::MAX - 1), 2);
        assert_eq!(
            producers.check(&batch(1, 0, 0, 0)),
            Check::Write,
            "next, wrapped"
        );
        assert_eq!(producers.check(&batch(1, 0, 0, 1)), Check::OutOfOrder);
        assert_eq!(
            producers.check(&batch(1, 0, 0, i32::MAX - 1)),
            Check::Write,
            "sent again"
        );
        assert_eq!(batch(1, 0, 0, i32::MAX).dedup_key(1), "kafka:1:0:0");
    }
}
