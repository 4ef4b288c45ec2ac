//! The groups' recent lag: every `metrics.lag_sample_ms`, the lag of each group on each open
//! partition this node holds is sampled, and the last [`LAG_SAMPLES`] are kept (the last hour
//! at the default 20 s), so a chart of lag over time needs no metrics system beside the log
//! ([`Log::group_summary`](super::Log::group_summary)).
//!
//! Bounded like the metric series: the groups of the first `metrics.max_topics` topics a
//! sample meets have a history, later topics' groups none, and a sample reads only the
//! partitions of those topics. A tracked group of a partition costs its samples
//! (4 bytes each, 720 in all) and its name: [`LagHistory::heap_bytes`] counts them.
//!
//! A partition that closed keeps its groups' last lag in each new sample (nothing changes it
//! while it is closed); one this node no longer holds, or a group whose cursor and leases are
//! gone, is forgotten.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, Weak};
use std::time::Duration;

use crate::names::PartitionId;
use crate::store::GroupPosition;

/// Samples kept per group and partition.
pub const LAG_SAMPLES: usize = 180;

/// A group's lag on a partition over time, as [`Log::group_summary`](super::Log::group_summary)
/// answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LagSamples {
    /// When the last sample was taken, in ms since the Unix epoch.
    pub until_ms: i64,
    /// The samples, oldest first, one per sample interval (a lag beyond `u32::MAX` is kept
    /// as `u32::MAX`).
    pub lags: Vec<u64>,
}

/// What the lag history holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LagHistoryUsage {
    /// Groups of partitions with a history.
    pub groups: usize,
    /// The heap their histories take: samples, names and tables.
    pub bytes: usize,
}

/// The lag history of the groups of the tracked topics (see the module docs).
#[derive(Debug)]
pub(crate) struct LagHistory {
    max_topics: usize,
    tracked: Mutex<Tracked>,
}

#[derive(Debug, Default)]
struct Tracked {
    /// The topics whose groups have a history: the first `max_topics` sampled.
    topics: HashSet<Box<str>>,
    partitions: HashMap<PartitionId, Vec<GroupLags>>,
    /// When the last sample was taken (ms since the Unix epoch).
    last_sample_ms: i64,
}

#[derive(Debug)]
struct GroupLags {
    group: Box<str>,
    lags: Ring,
}

/// The last [`LAG_SAMPLES`] values, in one allocation of exactly that many.
#[derive(Debug)]
struct Ring {
    values: Vec<u32>,
    /// Where the next value goes once the ring is full (its oldest value).
    next: usize,
}

impl Ring {
    fn new() -> Self {
        Self {
            values: Vec::with_capacity(LAG_SAMPLES),
            next: 0,
        }
    }

    fn push(&mut self, value: u32) {
        if self.values.len() < LAG_SAMPLES {
            self.values.push(value);
        } else {
            self.values[self.next] = value;
            self.next = (self.next + 1) % LAG_SAMPLES;
        }
    }

    fn last(&self) -> Option<u32> {
        let newest = self
            .next
            .checked_sub(1)
            .unwrap_or(self.values.len().checked_sub(1)?);
        self.values.get(newest).copied()
    }

    fn oldest_first(&self) -> Vec<u64> {
        let (newer, older) = self.values.split_at(self.next);
        older
            .iter()
            .chain(newer)
            .map(|&lag| u64::from(lag))
            .collect()
    }
}

impl LagHistory {
    pub(crate) fn new(max_topics: usize) -> Self {
        Self {
            max_topics,
            tracked: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Tracked> {
        self.tracked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether `topic`'s groups have a history, giving it one if there is room: the filter of
    /// what a sample reads, so that a sample reads the partitions of `max_topics` topics at
    /// most, however many are open.
    pub(crate) fn admit(&self, topic: &str) -> bool {
        let mut tracked = self.lock();
        if tracked.topics.contains(topic) {
            return true;
        }
        if tracked.topics.len() >= self.max_topics {
            return false;
        }
        tracked.topics.insert(topic.into());
        true
    }

    /// Takes one sample at `now_ms`: `sampled` is every open partition of the admitted topics
    /// read now with its groups; a tracked partition not among them keeps its last lags when
    /// `held` says this node still holds it, and is forgotten otherwise.
    pub(crate) fn record(
        &self,
        now_ms: i64,
        sampled: Vec<(PartitionId, Vec<GroupPosition>)>,
        held: impl Fn(&PartitionId) -> bool,
    ) {
        let mut tracked = self.lock();
        let mut fresh = HashMap::with_capacity(tracked.partitions.len());
        for (id, groups) in sampled {
            let mut before = tracked.partitions.remove(&id).unwrap_or_default();
            if groups.is_empty() || !tracked.topics.contains(id.topic()) {
                continue;
            }
            let now: Vec<GroupLags> = groups
                .into_iter()
                .map(|position| {
                    let kept = before
                        .iter()
                        .position(|old| *old.group == *position.group)
                        .map(|index| before.swap_remove(index));
                    let mut lags = kept.map_or_else(Ring::new, |kept| kept.lags);
                    lags.push(u32::try_from(position.lag).unwrap_or(u32::MAX));
                    GroupLags {
                        group: position.group.into_boxed_str(),
                        lags,
                    }
                })
                .collect();
            fresh.insert(id, now);
        }
        for (id, mut groups) in std::mem::take(&mut tracked.partitions) {
            if held(&id) {
                for group in &mut groups {
                    let last = group.lags.last().unwrap_or(0);
                    group.lags.push(last);
                }
                fresh.insert(id, groups);
            }
        }
        tracked.partitions = fresh;
        tracked.last_sample_ms = now_ms;
    }

    /// `group`'s lag history on partition `id`, if it has one.
    pub(crate) fn of(&self, id: &PartitionId, group: &str) -> Option<LagSamples> {
        let tracked = self.lock();
        let lags = &tracked
            .partitions
            .get(id)?
            .iter()
            .find(|tracked| &*tracked.group == group)?
            .lags;
        Some(LagSamples {
            until_ms: tracked.last_sample_ms,
            lags: lags.oldest_first(),
        })
    }

    /// What it holds now.
    pub(crate) fn usage(&self) -> LagHistoryUsage {
        LagHistoryUsage {
            groups: self.tracked(),
            bytes: self.heap_bytes(),
        }
    }

    /// The heap the histories take: their samples, names and tables.
    fn heap_bytes(&self) -> usize {
        let tracked = self.lock();
        let slot = std::mem::size_of::<(PartitionId, Vec<GroupLags>)>();
        let partitions = tracked.partitions.capacity() * slot;
        let groups: usize = tracked
            .partitions
            .iter()
            .map(|(id, groups)| {
                id.topic().len()
                    + groups.capacity() * std::mem::size_of::<GroupLags>()
                    + groups
                        .iter()
                        .map(|group| {
                            group.group.len()
                                + group.lags.values.capacity() * std::mem::size_of::<u32>()
                        })
                        .sum::<usize>()
            })
            .sum();
        let topics: usize = tracked
            .topics
            .iter()
            .map(|topic| topic.len() + std::mem::size_of::<Box<str>>())
            .sum();
        partitions + groups + topics
    }

    /// How many groups of partitions have a history.
    fn tracked(&self) -> usize {
        self.lock().partitions.values().map(Vec::len).sum()
    }
}

/// Samples the lag every `interval` for as long as the log is open (its last handle dropped,
/// or shut down, ends it).
pub(super) async fn sample(log: Weak<super::Inner>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(inner) = log.upgrade() else { return };
        if inner.waits_released.is_set() {
            return;
        }
        super::Log { inner }.sample_lag().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position(group: &str, lag: u64) -> GroupPosition {
        GroupPosition {
            group: group.into(),
            cursor: None,
            lag,
            leases: None,
        }
    }

    fn id(topic: &str, index: u32) -> PartitionId {
        PartitionId::new(topic, index).unwrap()
    }

    #[test]
    fn keeps_the_last_samples_oldest_first() {
        let history = LagHistory::new(10);
        assert!(history.admit("t"));
        for lag in 0..(LAG_SAMPLES as u64 + 5) {
            history.record(
                lag as i64,
                vec![(id("t", 0), vec![position("g", lag)])],
                |_| true,
            );
        }
        let samples = history.of(&id("t", 0), "g").unwrap();
        let expected: Vec<u64> = (5..LAG_SAMPLES as u64 + 5).collect();
        assert_eq!(samples.lags, expected);
        assert_eq!(samples.until_ms, LAG_SAMPLES as i64 + 4);
    }

    #[test]
    fn a_closed_partition_repeats_its_last_lag_and_one_moved_away_is_forgotten() {
        let history = LagHistory::new(10);
        assert!(history.admit("t"));
        history.record(1, vec![(id("t", 0), vec![position("g", 7)])], |_| true);
        history.record(2, Vec::new(), |_| true);
        assert_eq!(history.of(&id("t", 0), "g").unwrap().lags, vec![7, 7]);
        history.record(3, Vec::new(), |_| false);
        assert_eq!(history.of(&id("t", 0), "g"), None);
    }

    #[test]
    fn a_group_gone_from_its_partition_is_forgotten_and_others_keep_theirs() {
        let history = LagHistory::new(10);
        assert!(history.admit("t"));
        let both = vec![position("a", 1), position("b", 2)];
        history.record(1, vec![(id("t", 0), both)], |_| true);
        history.record(2, vec![(id("t", 0), vec![position("b", 3)])], |_| true);
        assert_eq!(history.of(&id("t", 0), "a"), None);
        assert_eq!(history.of(&id("t", 0), "b").unwrap().lags, vec![2, 3]);
    }

    #[test]
    fn topics_past_the_bound_get_no_history() {
        let history = LagHistory::new(2);
        let admitted: Vec<bool> = ["a", "b", "c", "a"]
            .map(|topic| history.admit(topic))
            .into();
        assert_eq!(admitted, [true, true, false, true]);
        let sampled = ["a", "b", "c"]
            .iter()
            .map(|topic| (id(topic, 0), vec![position("g", 1)]))
            .collect();
        history.record(1, sampled, |_| true);
        assert!(history.of(&id("a", 0), "g").is_some());
        assert!(history.of(&id("b", 0), "g").is_some());
        assert_eq!(history.of(&id("c", 0), "g"), None);
    }

    /// The stated cost: at most 1 KiB per tracked group of a partition, the tables included,
    /// with every ring full.
    #[test]
    fn a_tracked_group_of_a_partition_costs_at_most_a_kibibyte() {
        let history = LagHistory::new(1000);
        let sampled = || {
            (0..100)
                .map(|topic| {
                    assert!(history.admit(&format!("topic-{topic}")));
                    let groups = (0..10)
                        .map(|group| position(&format!("group-{group}"), 5))
                        .collect();
                    (id(&format!("topic-{topic}"), 0), groups)
                })
                .collect()
        };
        for now in 0..LAG_SAMPLES as i64 + 1 {
            history.record(now, sampled(), |_| true);
        }
        assert_eq!(history.tracked(), 1000);
        let per_group = history.heap_bytes() / history.tracked();
        assert!(per_group <= 1024, "{per_group} bytes per tracked group");
    }
}
