//! The retention sweep: every sweep interval, each volume is asked which partitions' retention
//! is due ([`Volume::due`](crate::store::Volume::due), a range of an index, so the cost follows
//! the partitions due, not those stored), and their retention runs, a few at a time: closed as
//! idle, closed for room, or untouched since a restart. The sweep schedules nothing per
//! partition; a restart schedules nothing at all.
//!
//! An open partition runs its own retention when it falls due, on its tick's alarm (see
//! [`crate::partition`]), so by the next sweep it is seldom due any more. When it still is (its
//! due time passed since its last tick, or its run failed) the sweep asks it too; if its
//! retention is running at that moment the request is skipped, so one partition's retention
//! never runs twice at once.
//!
//! A partition not open is opened for its retention (closing the least recently used one if
//! `max_open` are open) and closes again when idle. Neither the opening nor the run counts as
//! a use, so such a partition is the first to close for room, before the partitions in use. A
//! run that fails leaves the partition due, so the next sweep tries it again.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use actix::WeakAddr;
use futures_util::StreamExt;

use crate::clock::Clock;
use crate::names::PartitionId;
use crate::partition::Workers;
use crate::registry::{PartitionCounters, PartitionRegistry, RunDueRetention};
use crate::store::{DuePartition, DuePosition, Volumes};

/// Due partitions read from a volume at a time.
const PAGE: usize = 256;

/// One sweep over every volume. See the module docs.
pub(crate) struct Sweep {
    pub registry: WeakAddr<PartitionRegistry>,
    pub volumes: Arc<Volumes>,
    pub clock: Arc<dyn Clock>,
    pub workers: Workers,
    pub counters: Arc<PartitionCounters>,
    /// Retention runs at once, at most.
    pub concurrency: usize,
}

impl Sweep {
    /// Runs the retention of every partition due now, volume by volume, page by page: each
    /// page is read once, so a partition that stays due (its run failed) waits for the next
    /// sweep rather than being tried again at once.
    pub async fn run(self) {
        let now = self.clock.now_ms();
        for volume in 0..self.volumes.count() {
            let mut after = DuePosition::START;
            loop {
                let volumes = self.volumes.clone();
                let page = self
                    .workers
                    .run(move || volumes.due(volume, now, after, PAGE))
                    .await;
                let page = match page {
                    Some(Ok(page)) => page,
                    Some(Err(err)) => {
                        log::warn!("volume {volume}: cannot list the partitions due: {err}");
                        break;
                    }
                    None => return,
                };
                let Some(last) = page.last() else { break };
                after = last.position;
                let full = page.len() == PAGE;
                futures_util::stream::iter(page)
                    .for_each_concurrent(self.concurrency, |due| self.run_retention(due))
                    .await;
                if !full {
                    break;
                }
            }
        }
    }

    /// Runs a due partition's retention through the registry, which opens it if needed; counts
    /// it if it ran (not when the partition's retention was running already).
    async fn run_retention(&self, due: DuePartition) {
        let Some(registry) = self.registry.upgrade() else {
            return;
        };
        let Ok(id) = PartitionId::new(&due.topic, due.partition) else {
            return;
        };
        if let Ok(true) = registry.send(RunDueRetention { id }).await {
            self.counters.retention_runs.fetch_add(1, Ordering::Relaxed);
        }
    }
}
