//! What can go wrong with a volume, and what it does then: a write with an unknown outcome
//! poisons it until it recovers; damage (a malformed file, or fewer commits than its
//! high-water mark says were acknowledged) is marked for good (see `damage.rs`); tests inject
//! failures at fixed points.

use std::sync::atomic::Ordering;

use super::Shared;
use crate::store::damage::{self, DamageKind, DamageMark, high_water_path, write_high_water};
use crate::store::{StoreError, SyncMode};

/// Points where a test can make a volume fail, once each, as a failing disk would.
#[derive(Debug, Clone, Copy)]
pub(in crate::store) enum Fault {
    /// Just before a write transaction commits.
    BeforeCommit = 0,
    /// In a trim pass, after the segment is indexed and before the hot records are deleted.
    AfterSegmentIndexed = 1,
    /// In a trim pass, after the segment is stored in the cold tier and before it is indexed.
    AfterSegmentStored = 2,
}

/// What was found wrong with a volume, and the reason its callers are given.
#[derive(Debug)]
pub(super) struct Damage {
    pub(super) kind: DamageKind,
    pub(super) reason: String,
    /// The volume is being rebuilt from the replica's bucket (see `replication.rs`): its
    /// callers are told to retry, not that it is damaged for good.
    pub(super) healing: Option<usize>,
}

impl Damage {
    /// What a caller refused because of it is answered.
    pub(super) fn error(&self) -> StoreError {
        match self.healing {
            Some(volume) => StoreError::Healing { volume },
            None => StoreError::Corrupted {
                reason: self.reason.clone(),
            },
        }
    }
}

/// The error of `damage`, if there is one.
fn refuse(damage: Option<&Damage>) -> Result<(), StoreError> {
    damage.map_or(Ok(()), |damage| Err(damage.error()))
}

impl Shared {
    pub(in crate::store) fn poison(&self, err: &StoreError) {
        log::error!(
            "{}: write failed, refusing writes until reopened: {err:?}",
            self.path.display()
        );
        self.poisoned.store(true, Ordering::SeqCst);
    }

    /// Refuses writes to a damaged volume.
    pub(in crate::store) fn check_intact(&self) -> Result<(), StoreError> {
        refuse(self.damaged.get())
    }

    /// See [`Volume::known_loss`].
    pub(in crate::store) fn known_loss(&self) -> Option<&str> {
        self.lost().map(|damage| damage.reason.as_str())
    }

    fn lost(&self) -> Option<&Damage> {
        self.damaged
            .get()
            .filter(|damage| damage.kind == DamageKind::Lost)
    }

    /// Refuses every read of a volume with a known loss: what it holds may be older than what
    /// it acknowledged, and serving it as the log would hide the loss.
    pub(in crate::store) fn check_complete(&self) -> Result<(), StoreError> {
        refuse(self.lost())
    }

    /// Marks the volume damaged, logging it once and recording it beside the volume (see
    /// [`damage`]), and answers the error its callers get. A replicated volume whose stream
    /// rebuilds it is told to retry meanwhile. The damage is known here before its mark is
    /// written, so no write is taken once the mark is there; the rebuild, which reads the
    /// mark, is asked for last.
    pub(super) fn mark_damaged(&self, kind: DamageKind, cause: &str) -> StoreError {
        let mut first = false;
        let damage = self.damaged.get_or_init(|| {
            first = true;
            let healing = self
                .replica
                .as_ref()
                .filter(|replica| replica.stream.heals())
                .map(|replica| replica.volume);
            Damage {
                kind,
                reason: format!("the volume {} is damaged: {cause}", self.path.display()),
                healing,
            }
        });
        if first {
            if let Err(err) = damage::write_mark(&self.path, &DamageMark::now(kind, cause)) {
                log::error!(
                    "{}: cannot record the damage mark: {err}",
                    damage::mark_path(&self.path).display()
                );
            }
            if damage.healing.is_some() {
                log::error!(
                    "{}; its partitions refuse writes until it is rebuilt from the bucket",
                    damage.reason
                );
            } else {
                log::error!(
                    "{}; its partitions refuse writes from now on, also after a restart, until \
                     an operator accepts the damage",
                    damage.reason
                );
            }
            if let (Some(volume), Some(replica)) = (damage.healing, &self.replica)
                && !replica.stream.damaged(volume)
            {
                log::error!("volume {volume}: its rebuild could not be asked for (stopping)");
            }
        }
        damage.error()
    }

    /// Takes up the damage an earlier process recorded.
    pub(super) fn remember_damage(&self, mark: &DamageMark) {
        let reason = format!(
            "the volume {} is damaged: {} (marked {} in {})",
            self.path.display(),
            mark.cause,
            mark.marked_at,
            damage::mark_path(&self.path).display()
        );
        log::error!(
            "{reason}; its partitions refuse writes until an operator accepts the damage \
             (`durability accept-damage`)"
        );
        let _ = self.damaged.set(Damage {
            kind: mark.kind,
            reason,
            healing: None,
        });
    }

    /// `err`, or `corrupted` when SQLite found the files malformed (the volume is then marked
    /// damaged).
    /// What a failed write answers: the error classified (see [`Shared::classify`]), the
    /// volume poisoned first when the failure leaves the writing connection to reopen.
    pub(in crate::store) fn write_failed(&self, err: StoreError) -> StoreError {
        let err = self.classify(err);
        if err.poisons() {
            self.poison(&err);
        }
        err
    }

    pub(in crate::store) fn classify(&self, err: StoreError) -> StoreError {
        match &err {
            StoreError::Sqlite(rusqlite::Error::SqliteFailure(failure, _))
                if matches!(
                    failure.code,
                    rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
                ) =>
            {
                let cause = std::error::Error::source(&err)
                    .map_or_else(|| err.to_string(), ToString::to_string);
                self.mark_damaged(DamageKind::Malformed, &cause)
            }
            StoreError::Corrupted { reason } if self.damaged.get().is_none() => {
                self.mark_damaged(DamageKind::Malformed, reason)
            }
            // Met again by another caller while the volume is rebuilt: retry.
            StoreError::Corrupted { .. } => match self.damaged.get() {
                Some(damage) if damage.healing.is_some() => damage.error(),
                _ => err,
            },
            _ => err,
        }
    }

    /// Arms a fault (tests of recovery).
    #[cfg(any(test, feature = "test-util"))]
    pub(in crate::store) fn arm(&self, fault: Fault) {
        self.faults[fault as usize].store(true, Ordering::SeqCst);
    }

    /// Fails with an I/O error, as a failing disk would, if the chosen fault is armed.
    pub(in crate::store) fn injected_fault(&self, fault: Fault) -> Result<(), StoreError> {
        if self.faults[fault as usize].swap(false, Ordering::SeqCst) {
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
                Some("injected fault".into()),
            )));
        }
        Ok(())
    }

    /// Records `last`, the newest durable seq, beside the database when it moved (see
    /// [`read_high_water`]). Only where every commit is synced: with `sync = normal` the last
    /// commits may be lost on power loss by design, and that must not read as damage.
    pub(super) fn record_high_water(&self, recorded: &mut i64, last: i64) {
        if self.sync != SyncMode::Full || last <= *recorded || self.damaged.get().is_some() {
            return;
        }
        if self.write_high_water(last) {
            *recorded = last;
        }
    }

    /// Writes the high-water mark `seq`; a failure is logged (the check it feeds is then
    /// weaker, nothing else).
    pub(super) fn write_high_water(&self, seq: i64) -> bool {
        let written = write_high_water(&self.path, seq);
        if let Err(err) = &written {
            log::warn!(
                "{}: cannot record the high-water mark: {err}",
                high_water_path(&self.path).display()
            );
        }
        written.is_ok()
    }
}
