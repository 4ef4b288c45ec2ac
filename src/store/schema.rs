//! The database schema, as an ordered list of migrations.
//!
//! `PRAGMA user_version` records how many migrations a database has; opening applies the
//! missing ones, each in its own transaction, and refuses a database from a newer version.

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// Migrations in order; index `i` moves a database from version `i` to `i + 1`. Never edit a
/// released entry: append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: records, the offset sequence, cursors and the cold segment index.
    "
    CREATE TABLE records (
        offset      INTEGER PRIMARY KEY,
        dedup_key   TEXT,              -- NULL when the producer gave no key
        payload     TEXT    NOT NULL,  -- the record's JSON text
        bytes       INTEGER NOT NULL,  -- UTF-8 length of payload
        end_bytes   INTEGER NOT NULL,  -- bytes of every record ever appended, through this one
        appended_at INTEGER NOT NULL   -- ms since the Unix epoch, shared by a batch
    );
    -- Only keyed records pay for the index, which keeps keyless appends at full speed.
    CREATE UNIQUE INDEX records_dedup_key ON records (dedup_key) WHERE dedup_key IS NOT NULL;

    -- Where the log ends, for when no hot record says so. The newest record carries the end
    -- (offset + 1, end_bytes), so appends never write this row, which keeps one page out of
    -- every commit; whatever deletes records first writes the end here.
    CREATE TABLE sequence (
        id          INTEGER PRIMARY KEY CHECK (id = 1),
        next_offset INTEGER NOT NULL,
        end_bytes   INTEGER NOT NULL
    );
    INSERT INTO sequence (id, next_offset, end_bytes) VALUES (1, 0, 0);

    CREATE TABLE cursors (
        consumer     TEXT PRIMARY KEY,
        offset       INTEGER NOT NULL,
        committed_at INTEGER NOT NULL
    ) WITHOUT ROWID;

    -- Segments flushed to the cold tier, by first offset.
    CREATE TABLE segments (
        first_offset INTEGER PRIMARY KEY,
        last_offset  INTEGER NOT NULL,  -- inclusive
        locator      TEXT    NOT NULL,  -- the object's key in the cold store
        checksum     TEXT    NOT NULL,  -- the segment's own checksum, checked on every read
        bytes        INTEGER NOT NULL,  -- payload bytes (informational)
        flushed_at   INTEGER NOT NULL
    );
    ",
    // 2: leases. A group's rows partition the offsets from its cursor up to its allocation:
    // every offset handed out and not yet committed belongs to exactly one row.
    "
    CREATE TABLE leases (
        consumer     TEXT    NOT NULL,
        first_offset INTEGER NOT NULL,
        last_offset  INTEGER NOT NULL,  -- inclusive; a range keeps its span for ever
        batch_id     TEXT    NOT NULL UNIQUE,  -- rewritten on every delivery: the fencing token
        state        TEXT    NOT NULL CHECK (state IN ('active', 'pending', 'acked', 'skipped')),
        attempt      INTEGER NOT NULL,  -- deliveries so far
        expires_at   INTEGER NOT NULL,  -- active: end of the hold; pending: redeliver from then
        created_at   INTEGER NOT NULL,
        PRIMARY KEY (consumer, first_offset)
    ) WITHOUT ROWID;

    -- One past the last offset a group was ever handed in a fresh lease.
    CREATE TABLE allocations (
        consumer         TEXT PRIMARY KEY,
        allocated_offset INTEGER NOT NULL
    ) WITHOUT ROWID;
    ",
];

/// The log's end: `(next_offset, end_bytes)`, from the newest record or else the sequence row.
/// The one definition used by appends and by bounds.
pub(super) const LOG_END: &str = "
    SELECT MAX(s.next_offset, COALESCE(r.offset + 1, 0)), MAX(s.end_bytes, COALESCE(r.end_bytes, 0))
    FROM sequence AS s
    LEFT JOIN (SELECT offset, end_bytes FROM records ORDER BY offset DESC LIMIT 1) AS r
    WHERE s.id = 1";

/// The schema version this program writes.
pub(super) const CURRENT_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings `conn`'s database up to [`CURRENT_VERSION`].
pub(super) fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let found: i64 = conn.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    if found > CURRENT_VERSION {
        return Err(StoreError::SchemaTooNew {
            found,
            supported: CURRENT_VERSION,
        });
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", index as i64 + 1)?;
        tx.commit()?;
    }
    Ok(())
}
