//! A partition's state shared by its store and its volume's committer: where its log ends,
//! its retention limits, and when its retention is due. Plain data, used under the volume's
//! writer lock, so that a commit reads nothing from the database before inserting.

use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use super::lock;

/// Limits of the hot window; `None` means no limit. All limits combine: a record leaves when it
/// breaks any of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Records appended longer ago than this leave.
    pub max_age_ms: Option<u64>,
    /// At most this many hot records stay.
    pub max_records: Option<u64>,
    /// At most this many payload bytes stay (the oldest records leave until the excess is
    /// covered, possibly one record more).
    pub max_bytes: Option<u64>,
}

impl Retention {
    pub(super) fn is_unlimited(&self) -> bool {
        self.max_age_ms.is_none() && self.max_records.is_none() && self.max_bytes.is_none()
    }
}

/// The log's end: the offset the next record gets and the running total of appended bytes.
/// Kept in memory, shared by the partition's store and the committer (which alone moves it),
/// so an append reads nothing before inserting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Tail {
    pub next_offset: u64,
    pub end_bytes: u64,
}

/// One partition's log end, shared between its store and the committer.
#[derive(Debug)]
pub(super) struct PartitionTail {
    /// The partition's key in the volume (`partitions.id`).
    pub key: i64,
    pub tail: Mutex<Tail>,
    /// The partition's retention limits, by which a commit tells when it becomes due.
    pub retention: Retention,
    /// When its retention is due, and where its hot window starts; moved under the writer
    /// lock, by commits and trims.
    pub due: Mutex<Due>,
    /// Group commits that wrote records of this partition (whichever caller sent them).
    pub commits: AtomicU64,
}

impl PartitionTail {
    pub fn new(key: i64, tail: Tail, retention: Retention, due: Due) -> Self {
        Self {
            key,
            tail: Mutex::new(tail),
            retention,
            due: Mutex::new(due),
            commits: AtomicU64::new(0),
        }
    }

    pub fn get(&self) -> Tail {
        *lock(&self.tail)
    }
}

/// A partition's due time as stored, and where its hot window starts: what a commit needs to
/// tell whether its records make retention due sooner. Moved under the volume's writer lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Due {
    /// The partition's `due_at` as stored.
    pub at: Option<i64>,
    /// The oldest hot record: its offset and the bytes appended before it. The log's end when
    /// the hot window is empty.
    pub start: Tail,
    /// When the oldest hot record was appended; `None` when the hot window is empty.
    pub oldest_at: Option<i64>,
}

impl Due {
    /// The due state of a hot window starting at `oldest` (offset, bytes before it, append
    /// time), or empty when `None`, ending at `end`; `at` as stored.
    pub fn of(at: Option<i64>, oldest: Option<(u64, u64, i64)>, end: Tail) -> Self {
        match oldest {
            Some((next_offset, end_bytes, appended_at)) => Self {
                at,
                start: Tail {
                    next_offset,
                    end_bytes,
                },
                oldest_at: Some(appended_at),
            },
            None => Self {
                at,
                start: end,
                oldest_at: None,
            },
        }
    }

    /// When retention of this hot window, ending at `end`, is due under `limits`: at once
    /// (`now`) when it breaks the count or byte limit, else when its oldest record breaks the
    /// age limit; `None` when it is empty or nothing in it can come due.
    pub fn computed(&self, limits: &Retention, end: Tail, now: i64) -> Option<i64> {
        let oldest_at = self.oldest_at?;
        let records = end.next_offset.saturating_sub(self.start.next_offset);
        let bytes = end.end_bytes.saturating_sub(self.start.end_bytes);
        let over = limits.max_records.is_some_and(|max| records > max)
            || limits.max_bytes.is_some_and(|max| bytes > max);
        if over {
            return Some(now);
        }
        limits
            .max_age_ms
            .map(|age| oldest_at.saturating_add(i64::try_from(age).unwrap_or(i64::MAX)))
    }

    /// The state after a commit appended records, first at `appended_at`, moving the log's end
    /// from `before` to `after`: due no later than it was.
    pub fn after_append(
        &self,
        limits: &Retention,
        before: Tail,
        after: Tail,
        appended_at: i64,
    ) -> Self {
        if after.next_offset <= before.next_offset {
            return *self; // every record was a duplicate: nothing appended
        }
        let mut due = *self;
        if due.oldest_at.is_none() {
            // The window was empty: it starts with this commit's first record.
            due.start = before;
            due.oldest_at = Some(appended_at);
        }
        due.at = match (due.at, due.computed(limits, after, appended_at)) {
            (Some(stored), Some(computed)) => Some(stored.min(computed)),
            (stored, computed) => stored.or(computed),
        };
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(next_offset: u64, end_bytes: u64) -> Tail {
        Tail {
            next_offset,
            end_bytes,
        }
    }

    const AGE: Retention = Retention {
        max_age_ms: Some(1_000),
        max_records: Some(3),
        max_bytes: Some(100),
    };

    /// The first record of an empty window makes it due at its age limit; later records do
    /// not move it, until one breaks the count limit, which makes it due at once.
    #[test]
    fn appends_make_a_partition_due_no_later() {
        let empty = Due::of(None, None, end(5, 50));
        let first = empty.after_append(&AGE, end(5, 50), end(6, 60), 10_000);
        assert_eq!(first.at, Some(11_000));
        assert_eq!(first.start, end(5, 50));
        let second = first.after_append(&AGE, end(6, 60), end(8, 80), 10_500);
        assert_eq!(second.at, Some(11_000), "the oldest record decides the age");
        let over = second.after_append(&AGE, end(8, 80), end(9, 90), 10_700);
        assert_eq!(
            over.at,
            Some(10_700),
            "four records break the count limit of three"
        );
    }

    /// Bytes past the limit make a window due at once; without limits nothing is ever due.
    #[test]
    fn bytes_over_the_limit_are_due_at_once_and_no_limit_is_never_due() {
        let empty = Due::of(None, None, end(0, 0));
        let big = empty.after_append(&AGE, end(0, 0), end(1, 101), 7);
        assert_eq!(big.at, Some(7));
        let unlimited = Retention::default();
        let kept = empty.after_append(&unlimited, end(0, 0), end(1, 101), 7);
        assert_eq!(kept.at, None);
    }

    /// What a trim leaves is due at its oldest record's age limit, or never when it is empty.
    #[test]
    fn a_settled_window_is_due_at_its_oldest_records_age() {
        let left = Due::of(None, Some((7, 70, 2_000)), end(9, 90));
        assert_eq!(left.computed(&AGE, end(9, 90), 2_500), Some(3_000));
        let empty = Due::of(Some(1), None, end(9, 90));
        assert_eq!(empty.computed(&AGE, end(9, 90), 2_500), None);
    }
}
