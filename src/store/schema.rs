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

    CREATE TABLE segments (
        first_offset INTEGER PRIMARY KEY,
        last_offset  INTEGER NOT NULL,
        locator      TEXT    NOT NULL,
        bytes        INTEGER NOT NULL,
        flushed_at   INTEGER NOT NULL
    );
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
