//! Consuming: reads (long-polled or not), group polls, and committed cursors.

use std::collections::BTreeMap;
use std::time::Duration;

use super::long_poll::until_records;
use super::spread::Here;
use super::{Committed, Log, Way};
use crate::error::Error;
use crate::names::validate_group;
use crate::partition;
use crate::store::{Page, check_metadata, check_offset, page_limit};

impl Log {
    /// Reads up to `limit` records of a partition from `from` (default: its oldest readable
    /// offset), from the hot window or read back from cold segments.
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::UnknownPartition`], and the store's read errors
    /// (`invalid_offset`, `log_truncated`, `invalid_request` for a zero limit, `unavailable`).
    pub async fn read(
        &self,
        topic: &str,
        partition: u32,
        from: Option<u64>,
        limit: Option<usize>,
    ) -> Result<Page, Error> {
        let id = self.partition(topic, partition)?;
        let read = partition::Read { from, limit };
        let page = match self.way(&id, false).await? {
            // A hot read runs its query here, on the caller's thread, unless only the actor can.
            Way::Shortcut(shortcut) => match shortcut.read(from, limit) {
                Some(page) => return page.await,
                None => self.call_existing(&id, read).await?,
            },
            Way::Actor => self.call_existing(&id, read).await?,
            Way::Unwritten => None,
        };
        match page {
            Some(page) => Ok(page),
            // Never written: the store's rules, applied to an empty log.
            None => {
                page_limit(limit, self.inner.config.topic_log(topic).max_batch_size)?;
                check_offset(from.unwrap_or(0), 0)?;
                Ok(Page::default())
            }
        }
    }

    /// Like [`read`](Self::read), but when no record is available at `from` it waits up to
    /// `wait` for the first one to be committed (no polling: commits wake the waiters), then
    /// answers (an empty page if none came). Dropping the future releases the wait.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub async fn read_wait(
        &self,
        topic: &str,
        partition: u32,
        from: Option<u64>,
        limit: Option<usize>,
        wait: Duration,
    ) -> Result<Page, Error> {
        let id = self.partition(topic, partition)?;
        let signal = self.inner.signals.partition(&id);
        until_records(
            &[&signal],
            &self.inner.waits_released,
            wait,
            async || self.read(topic, partition, from, limit).await,
            |page| !page.records.is_empty(),
        )
        .await
    }

    /// The long-poll of [`read_wait`](Self::read_wait) and [`poll`](Self::poll) for any read:
    /// answers `read`'s first answer that `found` accepts, or its answer once `wait` has
    /// passed, reading again whenever a record is appended to one of `topics` (no polling).
    /// What a front end with reads of its own, such as a Kafka fetch, waits with.
    ///
    /// # Errors
    /// `read`'s.
    pub async fn read_until<T>(
        &self,
        topics: &[&str],
        wait: Duration,
        read: impl AsyncFnMut() -> Result<T, Error>,
        found: impl Fn(&T) -> bool,
    ) -> Result<T, Error> {
        let signals: Vec<_> = topics
            .iter()
            .map(|topic| self.inner.signals.topic(topic))
            .collect();
        let signals: Vec<&tokio::sync::Notify> = signals.iter().map(AsRef::as_ref).collect();
        until_records(&signals, &self.inner.waits_released, wait, read, found).await
    }

    /// Reads every partition of `topic` from `group`'s cursor (or the oldest readable offset
    /// when it has none), up to `limit` records each, without committing. With a `wait`, it
    /// answers as soon as any partition has records, or when the wait ends.
    ///
    /// # Errors
    /// Name errors, a zero limit, `log_truncated` when a partition lost records below the
    /// group's cursor, `unavailable`.
    pub async fn poll(
        &self,
        topic: &str,
        group: &str,
        limit: Option<usize>,
        wait: Duration,
    ) -> Result<Vec<Page>, Error> {
        let count = self.partitions(topic)?;
        let Some(spread) = self.spread() else {
            let partitions: Vec<u32> = (0..count).collect();
            return self
                .poll_partitions(topic, group, &partitions, limit, wait)
                .await;
        };
        validate_group(group)?;
        let here = |held: Vec<u32>, wait| {
            Box::pin(async move { self.poll_partitions(topic, group, &held, limit, wait).await })
                as std::pin::Pin<Box<dyn std::future::Future<Output = _>>>
        };
        spread.poll(topic, group, count, (limit, wait), here).await
    }

    /// [`poll`](Self::poll) of the partitions this node holds only, each with its number:
    /// what a cluster's node answers another.
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub(crate) async fn poll_held(
        &self,
        topic: &str,
        group: &str,
        limit: Option<usize>,
        wait: Duration,
    ) -> Result<Vec<(u32, Page)>, Error> {
        let held = self.held_partitions(topic)?;
        let pages = self
            .poll_partitions(topic, group, &held, limit, wait)
            .await?;
        Ok(held.into_iter().zip(pages).collect())
    }

    /// [`poll`](Self::poll) of `partitions` only (each below the topic's count): one page per
    /// partition, in the order given. A cluster's node polls the partitions it holds.
    ///
    /// # Errors
    /// As [`poll`](Self::poll).
    pub async fn poll_partitions(
        &self,
        topic: &str,
        group: &str,
        partitions: &[u32],
        limit: Option<usize>,
        wait: Duration,
    ) -> Result<Vec<Page>, Error> {
        // Every rule (names, limit) is checked by the reads of the first partition onwards.
        self.partitions(topic)?;
        let signal = self.inner.signals.topic(topic);
        let read_all = async || {
            let mut pages = Vec::with_capacity(partitions.len());
            for &partition in partitions {
                let cursor = self.cursor(topic, partition, group).await?;
                pages.push(self.read(topic, partition, cursor, limit).await?);
            }
            Ok(pages)
        };
        until_records(
            &[&signal],
            &self.inner.waits_released,
            wait,
            read_all,
            |pages: &Vec<Page>| pages.iter().any(|page| !page.records.is_empty()),
        )
        .await
    }

    /// Commits `group`'s position in a partition (forward only); answers the cursor in effect.
    ///
    /// # Errors
    /// Name, partition and offset errors; `unavailable`.
    pub async fn commit(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        offset: u64,
    ) -> Result<u64, Error> {
        self.commit_with(topic, partition, group, offset, None)
            .await
    }

    /// [`commit`](Self::commit), keeping `metadata` with the cursor when the commit moves it:
    /// the REST API's commit that carries metadata.
    ///
    /// # Errors
    /// As [`commit`](Self::commit), and `invalid_request` for metadata over
    /// [`MAX_CURSOR_METADATA_BYTES`](super::MAX_CURSOR_METADATA_BYTES) bytes.
    pub(crate) async fn commit_with(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        offset: u64,
        metadata: Option<&str>,
    ) -> Result<u64, Error> {
        let id = self.group_partition(topic, partition, group)?;
        check_metadata(metadata)?;
        let commit = partition::CommitWith {
            group: group.to_owned(),
            offset,
            metadata: metadata.map(str::to_owned),
        };
        // A partition never written can only take a commit of 0 (its next offset); only that
        // commit creates it.
        match self.call_existing(&id, commit.clone()).await? {
            Some(cursor) => Ok(cursor),
            None => {
                check_offset(offset, 0)?;
                self.call_creating(&id, commit).await
            }
        }
    }

    /// Sets `group`'s cursor in a partition to `offset`, forward or back (a seek), keeping
    /// `metadata`; answers the cursor. In a cluster, the node holding the partition sets it.
    ///
    /// # Errors
    /// Name and partition errors, `invalid_offset` beyond the next offset, `invalid_request`
    /// for metadata over [`MAX_CURSOR_METADATA_BYTES`](super::MAX_CURSOR_METADATA_BYTES)
    /// bytes, `unavailable`.
    pub async fn seek(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
        offset: u64,
        metadata: Option<&str>,
    ) -> Result<u64, Error> {
        let id = self.group_partition(topic, partition, group)?;
        check_metadata(metadata)?;
        let here = || -> Here<'_, u64> {
            let seek = partition::Seek {
                group: group.to_owned(),
                offset,
                metadata: metadata.map(str::to_owned),
            };
            let id = &id;
            Box::pin(async move {
                // As `commit`: only a seek to 0 creates a partition never written.
                match self.call_existing(id, seek.clone()).await? {
                    Some(cursor) => Ok(cursor),
                    None => {
                        check_offset(offset, 0)?;
                        self.call_creating(id, seek).await
                    }
                }
            })
        };
        match self.spread() {
            Some(spread) => spread.seek(&id, group, offset, metadata, here).await,
            None => here().await,
        }
    }

    /// `group`'s committed position in a partition with its metadata, if any. In a cluster,
    /// the node holding the partition answers.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn committed(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<Option<Committed>, Error> {
        let id = self.group_partition(topic, partition, group)?;
        let here = || -> Here<'_, Option<Committed>> {
            let get = partition::GetCommitted {
                group: group.to_owned(),
            };
            let id = &id;
            Box::pin(async move { Ok(self.call_existing(id, get).await?.flatten()) })
        };
        match self.spread() {
            Some(spread) => spread.committed(&id, group, here).await,
            None => here().await,
        }
    }

    /// `group`'s committed position in a partition, if any.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn cursor(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<Option<u64>, Error> {
        let id = self.group_partition(topic, partition, group)?;
        Ok(self
            .call_existing(
                &id,
                partition::GetCursor {
                    group: group.to_owned(),
                },
            )
            .await?
            .flatten())
    }

    /// Every group's committed position in a partition.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn cursors(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<BTreeMap<String, u64>, Error> {
        let id = self.partition(topic, partition)?;
        Ok(self
            .call_existing(&id, partition::ListCursors)
            .await?
            .unwrap_or_default())
    }

    /// Deletes `group`'s cursor and leases in a partition; answers whether there was a cursor.
    /// In a cluster, the node holding the partition deletes them.
    ///
    /// # Errors
    /// Name and partition errors; `unavailable`.
    pub async fn delete_cursor(
        &self,
        topic: &str,
        partition: u32,
        group: &str,
    ) -> Result<bool, Error> {
        let id = self.group_partition(topic, partition, group)?;
        let here = || -> Here<'_, bool> {
            let delete = partition::DeleteCursor {
                group: group.to_owned(),
            };
            let id = &id;
            Box::pin(async move { Ok(self.call_existing(id, delete).await?.unwrap_or(false)) })
        };
        match self.spread() {
            Some(spread) => spread.delete_cursor(&id, group, here).await,
            None => here().await,
        }
    }

    /// Commits `group`'s positions in several partitions of `topic` (forward only), after
    /// checking every one: a request with any refused position commits nothing. Answers each
    /// partition's cursor in effect.
    ///
    /// # Errors
    /// Name and partition errors, `invalid_offset` (beyond a partition's next offset),
    /// `unavailable` (some partitions may then have committed: commits are idempotent, retry).
    pub async fn commit_many(
        &self,
        topic: &str,
        group: &str,
        offsets: &BTreeMap<u32, u64>,
    ) -> Result<BTreeMap<u32, u64>, Error> {
        let Some(spread) = self.spread() else {
            return self.commit_held(topic, group, offsets).await;
        };
        // Names and partitions are checked before anything is asked of another node.
        self.partitions(topic)?;
        validate_group(group)?;
        for &partition in offsets.keys() {
            self.partition(topic, partition)?;
        }
        let here = |held: BTreeMap<u32, u64>| {
            Box::pin(async move { self.commit_held(topic, group, &held).await })
                as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>
        };
        spread.commit(topic, group, offsets, here).await
    }

    /// [`commit_many`](Self::commit_many) of partitions this node holds: what a cluster's node
    /// answers another (a partition held elsewhere is refused `not_owner`).
    ///
    /// # Errors
    /// As [`commit_many`](Self::commit_many).
    pub(crate) async fn commit_held(
        &self,
        topic: &str,
        group: &str,
        offsets: &BTreeMap<u32, u64>,
    ) -> Result<BTreeMap<u32, u64>, Error> {
        // Names are checked even when no partition is named.
        self.partitions(topic)?;
        validate_group(group)?;
        for (&partition, &offset) in offsets {
            // `bounds` refuses a partition past the count.
            check_offset(offset, self.bounds(topic, partition).await?.next_offset)?;
        }
        let mut cursors = BTreeMap::new();
        for (&partition, &offset) in offsets {
            let cursor = self.commit(topic, partition, group, offset).await?;
            cursors.insert(partition, cursor);
        }
        Ok(cursors)
    }
}
