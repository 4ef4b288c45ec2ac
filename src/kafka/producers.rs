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

    /// Whether `batch`, of `count` records, may be written; when it may, the partition
    /// expects the sequence after it from now on. Taken as a batch is handed to the log, before
    /// it is committed, so that the next batch, sent before this one's answer, is taken too;
    /// a batch that then fails is sent again, and is taken again (before the next sequence).
    pub fn accept(&self, batch: &Batch<'_>, count: usize) -> Check {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let next = batch.sequence_of(count);
        let key = batch.state_key();
        let check = match states.by_partition.get(&key) {
            None => Check::Write,
            Some(state) if batch.epoch < state.epoch => Check::StaleEpoch,
            // A new epoch starts its sequences again at 0.
            Some(state) if batch.epoch > state.epoch => {
                if batch.sequence == 0 {
                    Check::Write
                } else {
                    Check::OutOfOrder
                }
            }
            // Anything before the next sequence is a batch sent again.
            Some(state) => match after(batch.sequence, state.next) {
                gap if (1..HALF).contains(&gap) => Check::OutOfOrder,
                _ => Check::Write,
            },
        };
        if check != Check::Write {
            return check;
        }
        let state = states.by_partition.entry(key).or_insert(State {
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
        Check::Write
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
        let accept = |producer, epoch, partition, sequence, count| {
            producers.accept(&batch(producer, epoch, partition, sequence), count)
        };
        assert_eq!(accept(7, 0, 0, 5, 3), Check::Write, "unseen");
        assert_eq!(accept(7, 0, 0, 8, 3), Check::Write, "next");
        assert_eq!(
            accept(7, 0, 0, 11, 3),
            Check::Write,
            "next, before 8's answer"
        );
        assert_eq!(accept(7, 0, 0, 5, 3), Check::Write, "sent again");
        assert_eq!(accept(7, 0, 0, 15, 1), Check::OutOfOrder, "a gap");
        assert_eq!(accept(7, 0, 1, 15, 1), Check::Write, "another partition");
        assert_eq!(accept(7, 0, 0, 14, 1), Check::Write, "not moved back by 5");
        assert_eq!(
            accept(7, 1, 0, 3, 1),
            Check::OutOfOrder,
            "a new epoch from 3"
        );
        assert_eq!(accept(7, 1, 0, 0, 1), Check::Write, "a new epoch");
        assert_eq!(accept(7, 0, 0, 15, 1), Check::StaleEpoch);
    }

    #[test]
    fn sequences_wrap() {
        let producers = Producers::default();
        assert_eq!(
            producers.accept(&batch(1, 0, 0, i32::MAX - 1), 2),
            Check::Write
        );
        assert_eq!(producers.accept(&batch(1, 0, 0, 1), 1), Check::OutOfOrder);
        assert_eq!(
            producers.accept(&batch(1, 0, 0, 0), 1),
            Check::Write,
            "wrapped"
        );
        assert_eq!(
            producers.accept(&batch(1, 0, 0, i32::MAX - 1), 2),
            Check::Write,
            "sent again"
        );
        assert_eq!(batch(1, 0, 0, i32::MAX).dedup_key(1), "kafka:1:0:0");
    }
}
