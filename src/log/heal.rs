//! A replicated single node heals its damaged volumes by itself: the bucket holds each volume's
//! whole history, so a volume found damaged (a malformed page, a hole in a partition, altered
//! records) is closed, its copy set aside, and made anew from its snapshot and stream, as a
//! takeover would, with no operator step. Its partitions answer `503 unavailable` with
//! `Retry-After` meanwhile, and every acknowledged record after; the other volumes serve on.
//! (A cluster's node leaves a damaged volume refused; the node that takes it next, this one
//! too, rebuilds it from the bucket, as every take of a copy marked damaged does.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::registry::{PartitionRegistry, ReleaseVolume};
use crate::replica::Replicator;
use crate::store::{Gone, Volumes};

/// Pause before a rebuild that failed (the bucket out of reach) is tried again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// How often a closed volume is looked at until its last connection closed, and how often a
/// long wait is said.
const CLOSED_POLL: Duration = Duration::from_millis(20);
const SAY_EVERY: Duration = Duration::from_secs(10);

/// Waits until every connection of the closed volume `volume` has closed: SQLite deletes a
/// database's WAL by name when its last connection closes, and after the rebuild that name is
/// the new copy's. What holds it (a read finishing) lets it go soon.
async fn closed(volume: usize, gone: &Gone) {
    let waited = Instant::now();
    let mut said = Duration::ZERO;
    while !gone.is_gone() {
        if waited.elapsed() >= said + SAY_EVERY {
            said = waited.elapsed();
            log::warn!("volume {volume}: waiting {said:?} for its last reader before its rebuild");
        }
        tokio::time::sleep(CLOSED_POLL).await;
    }
}

/// Rebuilds each volume `damaged` names, one at a time, until the log stops.
pub(super) async fn heal_volumes(
    mut damaged: UnboundedReceiver<usize>,
    registry: Addr<PartitionRegistry>,
    volumes: Arc<Volumes>,
    replicator: Arc<Replicator>,
    volume_count: usize,
) {
    while let Some(volume) = damaged.recv().await {
        if !volumes.holds(volume) || !volumes.marked_damaged(volume) {
            continue; // asked again (rebuilt since, or being rebuilt), or not open here
        }
        let started = Instant::now();
        let gone = volumes.gone(volume);
        log::warn!(
            "volume {volume} is damaged: rebuilding it from the bucket; its partitions answer \
             unavailable meanwhile"
        );
        let release = ReleaseVolume {
            volume,
            volume_count,
            healing: true,
        };
        if registry.send(release).await.is_err() {
            return; // the log stopped
        }
        if let Some(gone) = gone {
            closed(volume, &gone).await;
        }
        while let Err(err) = replicator.rebuild(volume).await {
            if replicator.stopped() {
                log::error!("volume {volume} cannot be rebuilt: {err}; it stays unavailable");
                break;
            }
            log::error!("rebuilding volume {volume} failed: {err}; retrying");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        let attaching = volumes.clone();
        let attached = actix_web::rt::task::spawn_blocking(move || attaching.attach(volume)).await;
        match attached {
            Ok(Ok(())) => log::warn!(
                "volume {volume} rebuilt from the bucket in {:?}: serving again",
                started.elapsed()
            ),
            Ok(Err(err)) => {
                log::error!("volume {volume} cannot be opened after its rebuild: {err}")
            }
            Err(err) => log::error!("opening volume {volume} after its rebuild failed: {err}"),
        }
    }
}
