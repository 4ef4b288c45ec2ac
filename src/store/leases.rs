//! Leases: several workers share one consumer group, each holding a distinct range of offsets
//! until it acks (settles), nacks (asks for redelivery) or lets the hold expire.
//!
//! Every rule lives here, and every decision is one transaction:
//! - A group's lease rows partition the offsets from its cursor up to its allocation; a range
//!   keeps its span for ever, and each delivery gives it a fresh batch id, which fences the
//!   previous holder (its ack no longer matches any row).
//! - `lease` first redelivers the lowest due range (nacked and past its delay, or expired),
//!   else allocates a fresh range after the allocation, unless the group already holds
//!   `max_parallelism` ranges. The hold is durable before the records are returned.
//! - Acked and skipped ranges are committed over as soon as they are contiguous with the cursor.
//! - Records the group never settled that retention removed (no cold copy) are reported once as
//!   truncation, recorded as skipped, and committed over: the group moves on to what remains.
//! - A range delivered more than `max_attempts` times, when a dead-letter destination exists,
//!   is handed out as [`LeaseOutcome::Exhausted`]: the caller copies it to the dead-letter
//!   destination, then [`LogStore::skip`]s it.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::{LogStore, Record, Sees, StoreError, Tail};
use crate::names::validate_group;

/// How a partition's groups lease. Built from the `[leases]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseOptions {
    /// Whether lease operations are allowed. Default: true.
    pub enabled: bool,
    /// How long a delivery is held before it may be redelivered. Default: 30 s.
    pub lease_ms: u64,
    /// Most ranges one group may hold at once (active or awaiting redelivery). Default: 1.
    pub max_parallelism: u32,
    /// Deliveries after which a range is exhausted; `None` is unbounded. Default: `None`.
    pub max_attempts: Option<u32>,
    /// Whether exhausted ranges have somewhere to go. Without it a range is redelivered for
    /// ever, because blocking beats silently dropping. Default: false.
    pub dead_letter: bool,
}

impl LeaseOptions {
    /// The one rule for lease operations: they need leases enabled on the topic.
    ///
    /// # Errors
    /// [`StoreError::LeasesDisabled`].
    pub fn check_enabled(&self) -> Result<(), StoreError> {
        if self.enabled {
            Ok(())
        } else {
            Err(StoreError::LeasesDisabled)
        }
    }
}

impl Default for LeaseOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            lease_ms: 30_000,
            max_parallelism: 1,
            max_attempts: None,
            dead_letter: false,
        }
    }
}

/// Where a lease row stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Held by a worker until it settles it or the hold expires.
    Active,
    /// Nacked: waiting to be redelivered (after its delay).
    Pending,
    /// Processed; committed over once contiguous with the cursor.
    Acked,
    /// Given up (dead-lettered, or its records were lost); committed over like an acked range.
    Skipped,
}

impl LeaseState {
    /// Every state, in declaration order: the order of lease counts by state.
    pub const ALL: [Self; 4] = [Self::Active, Self::Pending, Self::Acked, Self::Skipped];

    /// The state's name, as stored and as the REST API shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Pending => "pending",
            Self::Acked => "acked",
            Self::Skipped => "skipped",
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "active" => Self::Active,
            "pending" => Self::Pending,
            "acked" => Self::Acked,
            _ => Self::Skipped,
        }
    }
}

/// How many lease rows a group has in a partition, per state, and where the first begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct LeaseCounts {
    /// Rows per state, in the order of [`LeaseState::ALL`].
    pub by_state: [u64; 4],
    /// The lowest offset the rows cover.
    pub first_offset: u64,
}

/// A delivered range and its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Identifies this delivery; settle with it.
    pub batch_id: String,
    /// The group holding it.
    pub group: String,
    /// First offset of the range.
    pub first_offset: u64,
    /// Last offset of the range (inclusive).
    pub last_offset: u64,
    /// Deliveries of this range so far, this one included.
    pub attempt: u32,
    /// When the hold ends (ms since the Unix epoch).
    pub expires_at: i64,
    /// The range's records, in offset order.
    pub records: Vec<Record>,
}

/// What `lease` handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum LeaseOutcome {
    /// A range to process.
    Leased(Lease),
    /// A range past `max_attempts`, held for its trip to the dead-letter destination: copy its
    /// records there, then [`LogStore::skip`] it. The caller asks again for work.
    Exhausted(Lease),
    /// Nothing now: the group holds `max_parallelism` ranges, or every record is leased.
    Idle,
}

/// One row of a group's leases, for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// The current delivery's batch id.
    pub batch_id: String,
    /// First offset of the range.
    pub first_offset: u64,
    /// Last offset (inclusive).
    pub last_offset: u64,
    /// Where it stands.
    pub state: LeaseState,
    /// Deliveries so far.
    pub attempt: u32,
    /// Active: end of the hold; pending: when it may be redelivered.
    pub expires_at: i64,
}

/// What the claiming transaction decided.
enum Claim {
    Range {
        batch_id: String,
        first: u64,
        last: u64,
        attempt: u32,
        expires_at: i64,
        exhausted: bool,
    },
    Truncated {
        requested_offset: u64,
        oldest_offset: u64,
    },
    Idle,
}

impl LogStore {
    /// Leases the next range for `group`: a due redelivery first, else up to `limit` (default
    /// and cap: `max_batch_size`) fresh records. The hold is durable before it is returned.
    ///
    /// Blocks the calling thread for SQLite work; awaits the cold store when the range was
    /// flushed.
    ///
    /// # Errors
    /// [`StoreError::LeasesDisabled`]; [`StoreError::InvalidLimit`]; [`StoreError::InvalidName`];
    /// [`StoreError::Truncated`] once when records the group never settled were removed by
    /// retention (they are then skipped, and the next call continues with what remains);
    /// [`StoreError::Cold`] when a flushed range cannot be read now (it is released for
    /// redelivery); a storage failure.
    pub async fn lease(
        &self,
        group: &str,
        limit: Option<usize>,
    ) -> Result<LeaseOutcome, StoreError> {
        self.check_leases()?;
        let limit = self.page_limit(limit)?;
        validate_group(group)?;
        let options = self.options.leases;
        let claim = self.write(Sees::Published, |tx, tail| {
            let now = self.now_ms();
            // Under the writer lock nothing moves the end or the recent records.
            let view = self.recent_view(tail.next_offset, 0);
            let oldest = self.bounds_in(tx, &view)?.oldest_offset;
            claim(tx, self.key, tail, oldest, group, limit, &options, now)
        })?;
        let (batch_id, first, last, attempt, expires_at, exhausted) = match claim {
            Claim::Idle => return Ok(LeaseOutcome::Idle),
            Claim::Truncated {
                requested_offset,
                oldest_offset,
            } => {
                return Err(StoreError::Truncated {
                    requested_offset,
                    oldest_offset,
                });
            }
            Claim::Range {
                batch_id,
                first,
                last,
                attempt,
                expires_at,
                exhausted,
            } => (batch_id, first, last, attempt, expires_at, exhausted),
        };
        let records = match self.range_records(first, last).await {
            Ok(records) => records,
            Err(StoreError::Truncated { .. }) => {
                // The index promised these records but the cold store lost them.
                self.settle(group, &batch_id, Settlement::Lost)?;
                return Err(StoreError::Truncated {
                    requested_offset: first,
                    oldest_offset: last + 1,
                });
            }
            Err(err) => {
                // Not delivered: make it due again without counting the attempt.
                self.settle(group, &batch_id, Settlement::Undelivered)?;
                return Err(err);
            }
        };
        let lease = Lease {
            batch_id,
            group: group.to_owned(),
            first_offset: first,
            last_offset: last,
            attempt,
            expires_at,
            records,
        };
        Ok(if exhausted {
            LeaseOutcome::Exhausted(lease)
        } else {
            LeaseOutcome::Leased(lease)
        })
    }

    /// Settles a held range as processed and commits over every contiguous settled range.
    /// Returns the group's cursor afterwards (`None` if it has none yet).
    ///
    /// # Errors
    /// [`StoreError::LeaseNotHeld`] when `batch_id` is unknown, fenced by a redelivery,
    /// already settled, or another group's; [`StoreError::LeasesDisabled`]; a storage failure.
    pub fn ack(&self, group: &str, batch_id: &str) -> Result<Option<u64>, StoreError> {
        self.settle(group, batch_id, Settlement::Ack)
    }

    /// Settles an exhausted range as given up (after it was copied to the dead-letter
    /// destination) and commits over it like an acked range. Returns the cursor afterwards.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub fn skip(&self, group: &str, batch_id: &str) -> Result<Option<u64>, StoreError> {
        self.settle(group, batch_id, Settlement::Skip)
    }

    /// Returns a held range for redelivery (under a new batch id) no sooner than `delay_ms`
    /// from now.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub fn nack(&self, group: &str, batch_id: &str, delay_ms: u64) -> Result<(), StoreError> {
        self.settle(group, batch_id, Settlement::Nack { delay_ms })
            .map(drop)
    }

    /// Renews a hold for another `lease_ms`; returns the new expiry. A hold that expired but
    /// was not redelivered yet can still be extended.
    ///
    /// # Errors
    /// As [`ack`](Self::ack).
    pub fn extend(&self, group: &str, batch_id: &str) -> Result<i64, StoreError> {
        self.check_leases()?;
        validate_group(group)?;
        let lease_ms = self.options.leases.lease_ms;
        self.write(Sees::Published, |tx, _| {
            held_range(tx, self.key, group, batch_id)?;
            let expires_at = self.now_ms().saturating_add(lease_ms as i64);
            tx.prepare_cached(
                "UPDATE leases SET expires_at = ?2 WHERE partition = ?1 AND batch_id = ?3",
            )?
            .execute(params![self.key, expires_at, batch_id])?;
            Ok(expires_at)
        })
    }

    /// `group`'s lease rows (held, awaiting redelivery, or settled but not yet committed over),
    /// by first offset.
    ///
    /// # Errors
    /// [`StoreError::LeasesDisabled`], [`StoreError::InvalidName`], a storage failure.
    pub fn leases(&self, group: &str) -> Result<Vec<LeaseRow>, StoreError> {
        self.check_leases()?;
        validate_group(group)?;
        self.snapshot(|tx| {
            let mut statement = tx.prepare_cached(
                "SELECT batch_id, first_offset, last_offset, state, attempt, expires_at FROM leases
                 WHERE partition = ?1 AND group_name = ?2 ORDER BY first_offset",
            )?;
            let rows = statement.query_map(params![self.key, group], |row| {
                Ok(LeaseRow {
                    batch_id: row.get(0)?,
                    first_offset: row.get(1)?,
                    last_offset: row.get(2)?,
                    state: LeaseState::parse(&row.get::<_, String>(3)?),
                    attempt: row.get(4)?,
                    expires_at: row.get(5)?,
                })
            })?;
            Ok(rows.collect::<Result<_, _>>()?)
        })
    }

    /// Every group's lease rows in this partition, counted by state (empty when leases are
    /// off): a group that leases shows here before it ever commits.
    ///
    /// # Errors
    /// A storage failure.
    pub(super) fn lease_counts(&self) -> Result<BTreeMap<String, LeaseCounts>, StoreError> {
        self.snapshot(|tx| {
            let mut statement = tx.prepare_cached(
                "SELECT group_name, state, COUNT(*), MIN(first_offset) FROM leases
                 WHERE partition = ?1 GROUP BY group_name, state",
            )?;
            let mut rows = statement.query(params![self.key])?;
            let mut groups = BTreeMap::<String, LeaseCounts>::new();
            while let Some(row) = rows.next()? {
                let state = LeaseState::parse(&row.get::<_, String>(1)?);
                let (count, first): (u64, u64) = (row.get(2)?, row.get(3)?);
                let group = groups.entry(row.get(0)?).or_insert(LeaseCounts {
                    first_offset: first,
                    ..LeaseCounts::default()
                });
                // `ALL` lists the states in declaration order.
                group.by_state[state as usize] = count;
                group.first_offset = group.first_offset.min(first);
            }
            Ok(groups)
        })
    }

    fn check_leases(&self) -> Result<(), StoreError> {
        self.options.leases.check_enabled()
    }

    /// The one place a held range changes state.
    fn settle(
        &self,
        group: &str,
        batch_id: &str,
        settlement: Settlement,
    ) -> Result<Option<u64>, StoreError> {
        self.check_leases()?;
        validate_group(group)?;
        self.write(Sees::Published, |tx, _| {
            let range = held_range(tx, self.key, group, batch_id)?;
            let now = self.now_ms();
            let (state, expires_at, attempt) = match settlement {
                Settlement::Ack => ("acked", now, range.attempt),
                Settlement::Skip | Settlement::Lost => ("skipped", now, range.attempt),
                Settlement::Nack { delay_ms } => (
                    "pending",
                    now.saturating_add(delay_ms as i64),
                    range.attempt,
                ),
                Settlement::Undelivered => ("pending", now, range.attempt.saturating_sub(1)),
            };
            tx.prepare_cached(
                "UPDATE leases SET state = ?2, expires_at = ?3, attempt = ?4
                 WHERE partition = ?1 AND batch_id = ?5",
            )?
            .execute(params![self.key, state, expires_at, attempt, batch_id])?;
            advance(tx, self.key, group, now)
        })
    }

    /// Exactly the records `first..=last`, hot or cold.
    async fn range_records(&self, first: u64, last: u64) -> Result<Vec<Record>, StoreError> {
        let count = (last - first + 1) as usize;
        let page = self.read(Some(first), Some(count)).await?;
        if page.records.len() == count && page.records.iter().map(|r| r.offset).eq(first..=last) {
            Ok(page.records)
        } else {
            Err(StoreError::Truncated {
                requested_offset: first,
                oldest_offset: last + 1,
            })
        }
    }
}

/// How a held range is settled.
#[derive(Clone, Copy)]
enum Settlement {
    Ack,
    Skip,
    Nack {
        delay_ms: u64,
    },
    /// Its records could not be read back: skipped, and reported as truncation.
    Lost,
    /// Its records could not be fetched now: due again, the attempt not counted.
    Undelivered,
}

struct HeldRange {
    attempt: u32,
}

/// The active range `batch_id` of `group`, or [`StoreError::LeaseNotHeld`].
fn held_range(
    tx: &Connection,
    partition: i64,
    group: &str,
    batch_id: &str,
) -> Result<HeldRange, StoreError> {
    let row: Option<(String, String, u32)> = tx
        .prepare_cached(
            "SELECT group_name, state, attempt FROM leases WHERE partition = ?1 AND batch_id = ?2",
        )?
        .query_row(params![partition, batch_id], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    match row {
        Some((consumer, state, attempt)) if consumer == group && state == "active" => {
            Ok(HeldRange { attempt })
        }
        _ => Err(StoreError::LeaseNotHeld {
            batch_id: batch_id.to_owned(),
        }),
    }
}

/// Decides what `lease` hands out, and records it.
#[allow(clippy::too_many_arguments)] // one call site; the arguments are the claim's inputs
fn claim(
    tx: &Connection,
    partition: i64,
    tail: &Tail,
    oldest: u64,
    group: &str,
    limit: usize,
    options: &LeaseOptions,
    now: i64,
) -> Result<Claim, StoreError> {
    let expires_at = now.saturating_add(options.lease_ms as i64);

    // 0. Records the group never settled that retention removed: reported once, all at once.
    if let Some(requested_offset) = drop_lost(tx, partition, group, oldest, now)? {
        return Ok(Claim::Truncated {
            requested_offset,
            oldest_offset: oldest,
        });
    }

    // 1. Redeliver the lowest due range.
    let due: Option<(u64, u64, u32)> = tx
        .prepare_cached(
            "SELECT first_offset, last_offset, attempt FROM leases
             WHERE partition = ?1 AND group_name = ?2 AND state IN ('active', 'pending')
               AND expires_at <= ?3
             ORDER BY first_offset LIMIT 1",
        )?
        .query_row(params![partition, group, now], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .optional()?;
    if let Some((first, last, attempt)) = due {
        let (batch_id, attempt) = (new_batch_id(), attempt + 1);
        tx.prepare_cached(
            "UPDATE leases SET batch_id = ?2, state = 'active', attempt = ?3, expires_at = ?4
             WHERE partition = ?1 AND group_name = ?5 AND first_offset = ?6",
        )?
        .execute(params![
            partition, batch_id, attempt, expires_at, group, first
        ])?;
        let exhausted =
            options.dead_letter && options.max_attempts.is_some_and(|max| attempt > max);
        return Ok(Claim::Range {
            batch_id,
            first,
            last,
            attempt,
            expires_at,
            exhausted,
        });
    }

    // 2. Respect the group's parallelism.
    let held: u32 = tx
        .prepare_cached(
            "SELECT COUNT(*) FROM leases
             WHERE partition = ?1 AND group_name = ?2 AND state IN ('active', 'pending')",
        )?
        .query_row(params![partition, group], |row| row.get(0))?;
    if held >= options.max_parallelism {
        return Ok(Claim::Idle);
    }

    // 3. A fresh range after everything handed out or committed so far; a group that never
    //    leased or committed starts at the oldest readable offset.
    let start = unleased_start(tx, partition, group)?
        .unwrap_or(oldest)
        .max(oldest);
    if start >= tail.next_offset {
        return Ok(Claim::Idle);
    }
    let last = (start + limit as u64 - 1).min(tail.next_offset - 1);
    let batch_id = new_batch_id();
    insert_range(
        tx, partition, group, start, last, &batch_id, "active", 1, expires_at, now,
    )?;
    set_allocation(tx, partition, group, last + 1)?;
    Ok(Claim::Range {
        batch_id,
        first: start,
        last,
        attempt: 1,
        expires_at,
        exhausted: false,
    })
}

fn new_batch_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Where `group`'s unleased offsets begin: past its allocation and its cursor, or `None` for a
/// group that never leased or committed.
fn unleased_start(tx: &Connection, partition: i64, group: &str) -> Result<Option<u64>, StoreError> {
    let allocation: Option<u64> = tx
        .prepare_cached(
            "SELECT allocated_offset FROM allocations WHERE partition = ?1 AND group_name = ?2",
        )?
        .query_row(params![partition, group], |row| row.get(0))
        .optional()?;
    let cursor = cursor_of(tx, partition, group)?;
    Ok(match (allocation, cursor) {
        (Some(allocation), cursor) => Some(allocation.max(cursor.unwrap_or(0))),
        (None, cursor) => cursor,
    })
}

/// Marks skipped every offset below `oldest` that `group` still owed and that nobody holds:
/// the lost part of every range awaiting redelivery (its readable rest stays due), and the
/// never-leased offsets between its allocation and `oldest`. Then commits over them. Returns
/// the first lost offset, or `None` when nothing was lost. A range still held by a worker is
/// left alone: the worker has its records and settles it.
fn drop_lost(
    tx: &Connection,
    partition: i64,
    group: &str,
    oldest: u64,
    now: i64,
) -> Result<Option<u64>, StoreError> {
    let mut first_lost: Option<u64> = None;
    let waiting: Vec<(u64, u64, u32)> = tx
        .prepare_cached(
            "SELECT first_offset, last_offset, attempt FROM leases
             WHERE partition = ?1 AND group_name = ?2 AND first_offset < ?3
               AND (state = 'pending' OR (state = 'active' AND expires_at <= ?4))",
        )?
        .query_map(params![partition, group, oldest, now], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?
        .collect::<Result<_, _>>()?;
    for (first, last, attempt) in waiting {
        let lost_last = last.min(oldest - 1);
        tx.prepare_cached(
            "UPDATE leases SET state = 'skipped', last_offset = ?2, batch_id = ?3, expires_at = ?4
             WHERE partition = ?1 AND group_name = ?5 AND first_offset = ?6",
        )?
        .execute(params![
            partition,
            lost_last,
            new_batch_id(),
            now,
            group,
            first
        ])?;
        if lost_last < last {
            insert_range(
                tx,
                partition,
                group,
                oldest,
                last,
                &new_batch_id(),
                "pending",
                attempt,
                now,
                now,
            )?;
        }
        first_lost = Some(first_lost.map_or(first, |lost| lost.min(first)));
    }
    if let Some(start) = unleased_start(tx, partition, group)?.filter(|start| *start < oldest) {
        insert_range(
            tx,
            partition,
            group,
            start,
            oldest - 1,
            &new_batch_id(),
            "skipped",
            0,
            now,
            now,
        )?;
        set_allocation(tx, partition, group, oldest)?;
        first_lost = Some(first_lost.map_or(start, |lost| lost.min(start)));
    }
    if first_lost.is_some() {
        advance(tx, partition, group, now)?;
    }
    Ok(first_lost)
}

#[allow(clippy::too_many_arguments)]
fn insert_range(
    tx: &Connection,
    partition: i64,
    group: &str,
    first: u64,
    last: u64,
    batch_id: &str,
    state: &str,
    attempt: u32,
    expires_at: i64,
    now: i64,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO leases (partition, group_name, first_offset, last_offset, batch_id, state, attempt, expires_at, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        partition, group, first, last, batch_id, state, attempt, expires_at, now
    ])?;
    Ok(())
}

fn set_allocation(
    tx: &Connection,
    partition: i64,
    group: &str,
    allocated: u64,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO allocations (partition, group_name, allocated_offset) VALUES (?1, ?2, ?3)
         ON CONFLICT (partition, group_name) DO UPDATE SET allocated_offset = MAX(allocated_offset, excluded.allocated_offset)",
    )?
    .execute(params![partition, group, allocated])?;
    Ok(())
}

fn cursor_of(tx: &Connection, partition: i64, group: &str) -> Result<Option<u64>, StoreError> {
    Ok(tx
        .prepare_cached("SELECT offset FROM cursors WHERE partition = ?1 AND group_name = ?2")?
        .query_row(params![partition, group], |row| row.get(0))
        .optional()?)
}

/// Commits `group`'s cursor over every settled range contiguous with it (starting from the
/// lowest range when the group has no cursor yet), and forgets the ranges it passed.
/// Returns the cursor afterwards.
pub(super) fn advance(
    tx: &Connection,
    partition: i64,
    group: &str,
    now: i64,
) -> Result<Option<u64>, StoreError> {
    let cursor = cursor_of(tx, partition, group)?;
    let mut statement =
        tx.prepare_cached("SELECT first_offset, last_offset, state FROM leases WHERE partition = ?1 AND group_name = ?2 ORDER BY first_offset")?;
    let ranges: Vec<(u64, u64, String)> = statement
        .query_map(params![partition, group], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?
        .collect::<Result<_, _>>()?;
    let Some(start) = cursor.or_else(|| ranges.first().map(|range| range.0)) else {
        return Ok(None);
    };
    let mut position = start;
    for (first, last, state) in &ranges {
        if *last < position {
            continue; // committed over already, by a plain commit
        }
        if *first > position || !(state == "acked" || state == "skipped") {
            break;
        }
        position = last + 1;
    }
    tx.prepare_cached(
        "DELETE FROM leases WHERE partition = ?1 AND group_name = ?2 AND last_offset < ?3",
    )?
    .execute(params![partition, group, position])?;
    if position == start {
        return Ok(cursor);
    }
    tx.prepare_cached(
        "INSERT INTO cursors (partition, group_name, offset, committed_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (partition, group_name) DO UPDATE SET offset = excluded.offset, committed_at = excluded.committed_at",
    )?
    .execute(params![partition, group, position, now])?;
    Ok(Some(position))
}
