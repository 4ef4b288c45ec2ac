//! [`Consumer`]: a consumer group's member that long-polls every partition of a topic and
//! commits what its caller marks done.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::{Client, ClientError};
use crate::wire;

/// A record delivered to a [`Consumer`], with its partition.
#[derive(Debug)]
pub struct Delivery {
    /// The partition it was read from.
    pub partition: u32,
    /// The record (its `offset`, deduplication `key`, `payload` and `appendedAt`).
    pub record: wire::RecordJson,
}

impl Delivery {
    /// The payload read as `T` (a binary payload or a tombstone reads as the JSON `null`).
    ///
    /// # Errors
    /// Why the payload is not a `T`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.record.json().unwrap_or("null"))
    }
}

/// A member of consumer group `group` of `topic`: [`Consumer::next_batch`] long-polls every
/// partition from the group's committed cursors, and [`Consumer::commit`] moves the cursors
/// over what the caller marks done.
///
/// The cursors move only on commit, so records of a batch that are not committed are
/// delivered again by the next batch (to this consumer, or to another of the group): commit
/// before asking for more. Delivery is at least once.
#[derive(Debug)]
pub struct Consumer {
    client: Client,
    topic: String,
    group: String,
    wait: Duration,
    limit: Option<usize>,
    /// The offsets of the last batch, by partition, in order: what a commit may move over.
    delivered: BTreeMap<u32, Vec<u64>>,
}

impl Consumer {
    pub(super) fn new(client: Client, topic: String, group: String) -> Self {
        Self {
            client,
            topic,
            group,
            wait: Duration::from_secs(5),
            limit: None,
            delivered: BTreeMap::new(),
        }
    }

    /// How long a batch waits for records when there are none (the server cuts it to
    /// `server.max_wait_ms`).
    /// Default: 5 s.
    #[must_use]
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The most records a batch takes from each partition.
    /// Default: the server's `maxBatchSize`.
    #[must_use]
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The group's next records, from every partition in partition order and in offset order
    /// within one, waiting up to the consumer's wait for any to come; empty when none came.
    ///
    /// # Errors
    /// As [`Client::poll`].
    pub async fn next_batch(&mut self) -> Result<Vec<Delivery>, ClientError> {
        let polled = self
            .client
            .poll(&self.topic, &self.group, self.limit, self.wait)
            .await?;
        self.delivered.clear();
        let mut batch = Vec::new();
        for page in polled.partitions {
            let partition = page.partition;
            let offsets = self.delivered.entry(partition).or_default();
            for record in page.page.records {
                offsets.push(record.offset);
                batch.push(Delivery { partition, record });
            }
        }
        Ok(batch)
    }

    /// Commits the records of `done` that the group can move over: on each partition, those of
    /// the last batch from its first record up to the first one not marked done (a record
    /// left out holds back the ones after it, which come again in the next batch).
    /// Commits nothing, and asks the server nothing, when no record can be moved over.
    ///
    /// # Errors
    /// As [`Client::commit`].
    pub async fn commit<'a>(
        &mut self,
        done: impl IntoIterator<Item = &'a Delivery>,
    ) -> Result<wire::CommittedCursors, ClientError> {
        let done: BTreeSet<(u32, u64)> = done
            .into_iter()
            .map(|delivery| (delivery.partition, delivery.record.offset))
            .collect();
        let offsets = committable(&self.delivered, &done);
        if offsets.is_empty() {
            return Ok(wire::CommittedCursors {
                cursors: BTreeMap::new(),
            });
        }
        self.client.commit(&self.topic, &self.group, offsets).await
    }
}

/// What to commit on each partition of `delivered` (its offsets in order) given the records
/// `done`: one past the last of the run of done records from the partition's first.
fn committable(
    delivered: &BTreeMap<u32, Vec<u64>>,
    done: &BTreeSet<(u32, u64)>,
) -> BTreeMap<u32, u64> {
    delivered
        .iter()
        .filter_map(|(&partition, offsets)| {
            let last_done = offsets
                .iter()
                .take_while(|&&offset| done.contains(&(partition, offset)))
                .last()?;
            Some((partition, last_done + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition's commit stops at its first record not marked done; a partition whose
    /// first record is not done, or that delivered nothing, commits nothing.
    #[test]
    fn commits_stop_at_the_first_record_not_done() {
        let delivered = BTreeMap::from([(0, vec![4, 5, 6, 7]), (1, vec![0, 1]), (2, vec![])]);
        let done = BTreeSet::from([(0, 4), (0, 5), (0, 7), (1, 1), (3, 9)]);
        assert_eq!(committable(&delivered, &done), BTreeMap::from([(0, 6)]));
        let all = BTreeSet::from([(0, 4), (0, 5), (0, 6), (0, 7), (1, 0), (1, 1)]);
        assert_eq!(
            committable(&delivered, &all),
            BTreeMap::from([(0, 8), (1, 2)])
        );
    }
}
