//! The volume schema, as an ordered list of migrations.
//!
//! A volume is one SQLite database holding many partitions. `PRAGMA user_version` records how
//! many migrations a volume has; opening applies the missing ones, each in its own
//! transaction, and refuses a volume from a newer version.
//!
//! Records are laid out in commit order (`records.seq`), so a group commit that appends to many
//! partitions writes one run of pages. The lookups by partition and offset (`record_index`) and
//! by deduplication key (`key_index`) are not written by the commit: the volume's indexer fills
//! them in the background from `records`, and the records committed since (`seq` above
//! `indexed.through_seq`) are found through an in-memory index (see `volume/index.rs`).

use rusqlite::{Connection, TransactionBehavior};

use super::StoreError;

/// Migrations in order; index `i` moves a volume from version `i` to `i + 1`. Never edit a
/// released entry: append a new one.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: partitions, records and their background indexes, cursors, segments, leases.
    "
    -- Every partition stored in this volume, and where its log ends when no hot record says so
    -- (whatever deletes records first writes the end here; appends never write this row).
    CREATE TABLE partitions (
        id          INTEGER PRIMARY KEY,
        topic       TEXT    NOT NULL,
        partition   INTEGER NOT NULL,
        next_offset INTEGER NOT NULL DEFAULT 0,
        end_bytes   INTEGER NOT NULL DEFAULT 0,
        UNIQUE (topic, partition)
    );

    -- Records of every partition, in commit order. Only the rowid is indexed at commit.
    CREATE TABLE records (
        seq         INTEGER PRIMARY KEY,
        partition   INTEGER NOT NULL,  -- partitions.id
        offset      INTEGER NOT NULL,
        dedup_key   TEXT,              -- NULL when the producer gave no key
        payload     TEXT    NOT NULL,  -- the record's JSON text
        bytes       INTEGER NOT NULL,  -- UTF-8 length of payload
        end_bytes   INTEGER NOT NULL,  -- bytes of every record ever appended, through this one
        appended_at INTEGER NOT NULL   -- ms since the Unix epoch, shared by a batch
    );

    -- Filled by the indexer, not by commits.
    CREATE TABLE record_index (
        partition INTEGER NOT NULL,
        offset    INTEGER NOT NULL,
        seq       INTEGER NOT NULL,
        PRIMARY KEY (partition, offset)
    ) WITHOUT ROWID;
    CREATE TABLE key_index (
        partition INTEGER NOT NULL,
        dedup_key TEXT    NOT NULL,
        offset    INTEGER NOT NULL,
        PRIMARY KEY (partition, dedup_key)
    ) WITHOUT ROWID;
    -- Every record with seq <= through_seq is in the indexes.
    CREATE TABLE indexed (
        id          INTEGER PRIMARY KEY CHECK (id = 1),
        through_seq INTEGER NOT NULL
    );
    INSERT INTO indexed (id, through_seq) VALUES (1, 0);

    CREATE TABLE cursors (
        partition    INTEGER NOT NULL,
        consumer     TEXT    NOT NULL,
        offset       INTEGER NOT NULL,
        committed_at INTEGER NOT NULL,
        PRIMARY KEY (partition, consumer)
    ) WITHOUT ROWID;

    -- Segments flushed to the cold tier, by first offset.
    CREATE TABLE segments (
        partition    INTEGER NOT NULL,
        first_offset INTEGER NOT NULL,
        last_offset  INTEGER NOT NULL,  -- inclusive
        locator      TEXT    NOT NULL,  -- the object's key in the cold store
        checksum     TEXT    NOT NULL,  -- the segment's own checksum, checked on every read
        bytes        INTEGER NOT NULL,  -- payload bytes (informational)
        flushed_at   INTEGER NOT NULL,
        PRIMARY KEY (partition, first_offset)
    ) WITHOUT ROWID;

    -- Leases. A group's rows partition the offsets from its cursor up to its allocation: every
    -- offset handed out and not yet committed belongs to exactly one row.
    CREATE TABLE leases (
        partition    INTEGER NOT NULL,
        consumer     TEXT    NOT NULL,
        first_offset INTEGER NOT NULL,
        last_offset  INTEGER NOT NULL,  -- inclusive; a range keeps its span for ever
        batch_id     TEXT    NOT NULL UNIQUE,  -- rewritten on every delivery: the fencing token
        state        TEXT    NOT NULL CHECK (state IN ('active', 'pending', 'acked', 'skipped')),
        attempt      INTEGER NOT NULL,  -- deliveries so far
        expires_at   INTEGER NOT NULL,  -- active: end of the hold; pending: redeliver from then
        created_at   INTEGER NOT NULL,
        PRIMARY KEY (partition, consumer, first_offset)
    ) WITHOUT ROWID;

    -- One past the last offset a group was ever handed in a fresh lease.
    CREATE TABLE allocations (
        partition        INTEGER NOT NULL,
        consumer         TEXT    NOT NULL,
        allocated_offset INTEGER NOT NULL,
        PRIMARY KEY (partition, consumer)
    ) WITHOUT ROWID;
    ",
    // 2: a checksum per record (CRC-32 of its offset, key and payload; NULL in older rows,
    // which are not checked).
    "ALTER TABLE records ADD COLUMN checksum INTEGER;",
    // 3: cold uploads that may be stored without an index entry.
    "
    -- A trim pass records its segment's key here, committed, before it writes the object to
    -- the cold store; the transaction that indexes the segment deletes the row. So every object
    -- a partition may have stored and not indexed (a crash or a failure in between) is named
    -- here, and is deleted, with its row, unless `segments` names it.
    CREATE TABLE cold_uploads (
        partition INTEGER NOT NULL,  -- partitions.id
        locator   TEXT    NOT NULL,  -- the object's key in the cold store
        PRIMARY KEY (partition, locator)
    ) WITHOUT ROWID;
    ",
    // 4: the group's column is named as every API names it.
    "
    ALTER TABLE cursors RENAME COLUMN consumer TO group_name;
    ALTER TABLE leases RENAME COLUMN consumer TO group_name;
    ALTER TABLE allocations RENAME COLUMN consumer TO group_name;
    ",
    // 5: when each partition's retention is due, for sweeps that read only what is due.
    "
    -- ms since the Unix epoch; NULL when nothing can come due without another append. Written
    -- by commits that make it due sooner and by trims (see `due.rs`).
    ALTER TABLE partitions ADD COLUMN due_at INTEGER;
    CREATE INDEX partitions_by_due_at ON partitions (due_at) WHERE due_at IS NOT NULL;
    -- The retention limits the due times were computed under. Under other limits (or none
    -- recorded: an earlier volume), every partition with hot records is made due once.
    CREATE TABLE due_limits (
        id     INTEGER PRIMARY KEY CHECK (id = 1),
        limits TEXT    NOT NULL
    );
    ",
    // 6: where this copy of a replicated volume stands on its replica's stream.
    "
    -- The last window of the replica's stream that this file holds: every change of the
    -- windows before it and of it, none after. Never replicated (see `redo.rs`).
    CREATE TABLE replica (
        id   INTEGER PRIMARY KEY CHECK (id = 1),
        node TEXT    NOT NULL,
        inc  INTEGER NOT NULL,
        seq  INTEGER NOT NULL
    );
    ",
    // 7: what a record holds beyond a JSON payload and a deduplication key. Older rows have
    // none and are read as before.
    "
    -- NULL for a plain JSON record; else its tombstone flag, message key and headers (see
    -- `record.rs`). `payload` holds a JSON payload as text and a binary one as a blob (an
    -- empty blob for a tombstone); `bytes` counts either.
    ALTER TABLE records ADD COLUMN meta BLOB;
    ",
    // 8: the metadata a cursor's commit carried (a Kafka offset commit's). Older rows have
    // none.
    "
    -- NULL: no metadata. Written by the commit or seek that set the cursor; a commit that
    -- moves the cursor without metadata clears it (see `cursors.rs`).
    ALTER TABLE cursors ADD COLUMN metadata TEXT;
    ",
];

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume of an earlier version keeps its rows through the migrations it is missing:
    /// a cursor written under version 3 reads back by its group after the rename.
    #[test]
    fn an_earlier_volume_keeps_its_cursors_through_the_rename() {
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..3] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 3).unwrap();
        conn.execute(
            "INSERT INTO cursors (partition, consumer, offset, committed_at) VALUES (1, 'g', 7, 0)",
            [],
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, CURRENT_VERSION);
        let offset: i64 = conn
            .query_row(
                "SELECT offset FROM cursors WHERE partition = 1 AND group_name = 'g'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(offset, 7);
    }

    /// A volume of version 7 keeps its cursors through migration 8: the offset is unchanged
    /// and the metadata reads as none, so the store answers the cursor as it did.
    #[test]
    fn a_version_7_volume_keeps_its_cursors_without_metadata() {
        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..7] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 7).unwrap();
        conn.execute(
            "INSERT INTO cursors (partition, group_name, offset, committed_at)
             VALUES (1, 'g', 7, 1800000000000)",
            [],
        )
        .unwrap();

        migrate(&mut conn).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, CURRENT_VERSION);
        let (offset, committed_at, metadata): (i64, i64, Option<String>) = conn
            .query_row(
                "SELECT offset, committed_at, metadata FROM cursors
                 WHERE partition = 1 AND group_name = 'g'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            (offset, committed_at, metadata),
            (7, 1_800_000_000_000, None)
        );
    }

    /// A volume of version 6 keeps its records through migration 7: the row is unchanged, its
    /// payload still text, its `meta` NULL, so it reads as a plain JSON record with no parts,
    /// and the checksum written under version 6 (CRC-32C of the payload, then the key, with
    /// the offset folded in) still matches it; the volume is at the current version.
    #[test]
    fn a_version_6_volume_keeps_its_records_without_parts() {
        use rusqlite::types::Value;

        use crate::store::batch::record_checksum;
        use crate::store::record::{Payload, stored_parts};

        let mut conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..6] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 6).unwrap();
        let (offset, key, payload) = (3_u64, "k", "{\"n\":3}");
        let version_6_checksum = {
            let crc = crc32c::crc32c(payload.as_bytes());
            let crc =
                crc32c::crc32c_append(crc, key.as_bytes()) ^ (key.len() as u32).rotate_left(16);
            crc ^ (offset as u32) ^ ((offset >> 32) as u32).rotate_left(8)
        };
        conn.execute(
            "INSERT INTO records (seq, partition, offset, dedup_key, payload, bytes, end_bytes,
                                  appended_at, checksum)
             VALUES (1, 1, ?1, ?2, ?3, 7, 7, 1800000000000, ?4)",
            rusqlite::params![offset, key, payload, version_6_checksum],
        )
        .unwrap();

        migrate(&mut conn).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .unwrap();
        assert_eq!(version, CURRENT_VERSION);
        type Row = (i64, i64, u64, String, String, String, i64, i64, i64, i64);
        let row: Row = conn
            .query_row(
                "SELECT seq, partition, offset, dedup_key, payload, typeof(payload), bytes,
                        end_bytes, appended_at, checksum FROM records",
                [],
                |row| {
                    Ok((
                        row.get(0)?,
                        row.get(1)?,
                        row.get(2)?,
                        row.get(3)?,
                        row.get(4)?,
                        row.get(5)?,
                        row.get(6)?,
                        row.get(7)?,
                        row.get(8)?,
                        row.get(9)?,
                    ))
                },
            )
            .unwrap();
        assert_eq!(
            row,
            (
                1,
                1,
                offset,
                key.to_owned(),
                payload.to_owned(),
                "text".to_owned(),
                7,
                7,
                1_800_000_000_000,
                i64::from(version_6_checksum),
            )
        );
        let (stored, meta): (Value, Option<Vec<u8>>) = conn
            .query_row(
                "SELECT payload, meta FROM records WHERE seq = 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!(meta, None);
        let (read, parts) = stored_parts(stored, meta).unwrap();
        assert_eq!(read, Payload::json(payload));
        assert!(!parts.tombstone);
        assert_eq!(parts.message_key, None);
        assert!(parts.headers.is_empty());
        assert_eq!(
            record_checksum(offset, Some(key), payload.as_bytes(), None),
            version_6_checksum
        );
    }
}
