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

    /// Whether batch `sequence` (of `count` records) of `producer` at `epoch` may be written
    /// to `topic`'s `partition`.
    pub fn check(
        &self,
        producer: i64,
        epoch: i16,
        topic: &str,
        partition: u32,
        sequence: i32,
    ) -> Check {
        let states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let Some(state) = states
            .by_partition
            .get(&(producer, topic.to_owned(), partition))
        else {
            return Check::Write;
        };
        if epoch < state.epoch {
            return Check::StaleEpoch;
        }
        if epoch > state.epoch {
            // A new epoch starts its sequences again at 0.
            return if sequence == 0 {
                Check::Write
            } else {
                Check::OutOfOrder
            };
        }
        // Anything before the next sequence is a batch sent again.
        match after(sequence, state.next) {
            0 => Check::Write,
            gap if gap < HALF => Check::OutOfOrder,
            _ => Check::Write,
        }
    }

    /// Records that batch `sequence` of `count` records was written.
    pub fn written(
        &self,
        producer: i64,
        epoch: i16,
        topic: &str,
        partition: u32,
        sequence: i32,
        count: usize,
    ) {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let next = ((i64::from(sequence) + count as i64) % SEQUENCES) as i32;
        let now = Instant::now();
        let key = (producer, topic.to_owned(), partition);
        let state = states.by_partition.entry(key).or_insert(State {
            epoch,
            next,
            used: now,
        });
        // A batch sent again does not move the sequence back.
        if epoch > state.epoch || (1..HALF).contains(&after(next, state.next)) {
            state.epoch = epoch;
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

/// Sequences run from 0 to `i32::MAX`, then start again at 0.
const SEQUENCES: i64 = 1 << 31;
const HALF: i64 = SEQUENCES / 2;

/// How far sequence `a` is after `b`, going forward (wrapping).
fn after(a: i32, b: i32) -> i64 {
    (i64::from(a) - i64::from(b)).rem_euclid(SEQUENCES)
}

/// The deduplication key of record `sequence` of `producer` at `epoch`.
pub(crate) fn dedup_key(producer: i64, epoch: i16, sequence: i32) -> String {
    format!("kafka:{producer}:{epoch}:{sequence}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_in_order_again_and_out_of_order() {
        let producers = Producers::default();
        assert_eq!(producers.check(7, 0, "t", 0, 5), Check::Write, "unseen");
        producers.written(7, 0, "t", 0, 0, 3);
        assert_eq!(producers.check(7, 0, "t", 0, 3), Check::Write, "next");
        assert_eq!(producers.check(7, 0, "t", 0, 0), Check::Write, "sent again");
        assert_eq!(producers.check(7, 0, "t", 0, 4), Check::OutOfOrder, "a gap");
        assert_eq!(
            producers.check(7, 0, "t", 1, 4),
            Check::Write,
            "another partition"
        );
        producers.written(7, 0, "t", 0, 0, 3);
        assert_eq!(
            producers.check(7, 0, "t", 0, 3),
            Check::Write,
            "not moved back"
        );
        assert_eq!(
            producers.check(7, 1, "t", 0, 0),
            Check::Write,
            "a new epoch"
        );
        assert_eq!(producers.check(7, 1, "t", 0, 3), Check::OutOfOrder);
        producers.written(7, 1, "t", 0, 0, 1);
        assert_eq!(producers.check(7, 0, "t", 0, 3), Check::StaleEpoch);
    }

    #[test]
    fn sequences_wrap() {
        let producers = Producers::default();
        producers.written(1, 0, "t", 0, i32::MAX - 1, 2);
        assert_eq!(
            producers.check(1, 0, "t", 0, 0),
            Check::Write,
            "next, wrapped"
        );
        assert_eq!(producers.check(1, 0, "t", 0, 1), Check::OutOfOrder);
        assert_eq!(
            producers.check(1, 0, "t", 0, i32::MAX - 1),
            Check::Write,
            "sent again"
        );
    }
}
