//! Redo: what one write transaction changed in a volume, row by row, captured by SQLite itself
//! and replayed by [`apply`] on another copy of the volume.
//!
//! [`install`] gives the writing connection a temporary trigger per table and operation that
//! copies each changed row into the temporary table `redo` (temporary objects belong to that
//! connection alone: readers and the database file never see them). Before the transaction
//! commits, [`take`] reads and empties that table and encodes it: an inserted or updated row is
//! written whole (replayed as an upsert by primary key), a deleted row by its primary key (and
//! an update that moves a primary key as both). Replaying the changes of every transaction in
//! commit order on a copy that started equal gives an equal copy, whatever code made them; so
//! every write of the store is captured without any of it knowing. A change that does not
//! apply cleanly (a row to delete that is not there, a constraint broken) fails the replay:
//! the copy is not what the writer had, and it must not be served as if it were.
//!
//! Every table of the volume is captured except [`LOCAL_TABLES`]. A captured table needs a
//! primary key (checked at install).

use std::collections::HashMap;

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, Transaction};

use super::StoreError;

/// Tables that describe this copy rather than the log, never captured.
pub(super) const LOCAL_TABLES: &[&str] = &["replica"];

/// Most columns a captured table may have (the width of the `redo` table).
const MAX_COLUMNS: usize = 16;

/// What begins every encoded redo, with its format's version.
const MAGIC: &[u8; 4] = b"RDO1";

/// A change's kind, as stored in `redo.op`.
const UPSERT: i64 = 0;
const DELETE: i64 = 1;

/// A captured table: its columns in order, and which of them form the primary key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Table {
    name: String,
    columns: Vec<String>,
    key: Vec<usize>,
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The volume's captured tables, read from its schema.
fn tables(conn: &Connection) -> Result<Vec<Table>, StoreError> {
    let names: Vec<String> = conn
        .prepare(
            "SELECT name FROM main.sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'
             ORDER BY name",
        )?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let mut tables = Vec::new();
    for name in names {
        if LOCAL_TABLES.contains(&name.as_str()) {
            continue;
        }
        let mut columns = Vec::new();
        let mut key: Vec<(i64, usize)> = Vec::new();
        let mut statement = conn.prepare("SELECT name, pk FROM pragma_table_info(?1)")?;
        let mut rows = statement.query([&name])?;
        while let Some(row) = rows.next()? {
            let pk: i64 = row.get(1)?;
            if pk > 0 {
                key.push((pk, columns.len()));
            }
            columns.push(row.get::<_, String>(0)?);
        }
        key.sort_unstable();
        if key.is_empty() || columns.len() > MAX_COLUMNS {
            return Err(StoreError::Corrupted {
                reason: format!(
                    "table {name} cannot be replicated: it needs a primary key and at most \
                     {MAX_COLUMNS} columns"
                ),
            });
        }
        tables.push(Table {
            name,
            columns,
            key: key.into_iter().map(|(_, column)| column).collect(),
        });
    }
    Ok(tables)
}

/// Makes `conn` capture every change to the volume's tables into `temp.redo` (see the module
/// docs). Idempotent; called again after a connection is reopened.
pub(super) fn install(conn: &Connection) -> Result<(), StoreError> {
    let slots: Vec<String> = (0..MAX_COLUMNS).map(|i| format!("c{i}")).collect();
    let mut sql = format!(
        "PRAGMA recursive_triggers = ON;
         CREATE TEMP TABLE IF NOT EXISTS redo (n INTEGER PRIMARY KEY, tbl TEXT NOT NULL, \
         op INTEGER NOT NULL, {});",
        slots.join(", ")
    );
    for table in tables(conn)? {
        let name = quoted(&table.name);
        let literal = format!("'{}'", table.name.replace('\'', "''"));
        let row = |of: &str, columns: &mut dyn Iterator<Item = &String>| -> (String, String) {
            let values: Vec<String> = columns.map(|c| format!("{of}.{}", quoted(c))).collect();
            (slots[..values.len()].join(", "), values.join(", "))
        };
        let (whole_slots, new_row) = row("NEW", &mut table.columns.iter());
        let key_columns: Vec<&String> = table.key.iter().map(|&i| &table.columns[i]).collect();
        let (key_slots, old_key) = row("OLD", &mut key_columns.iter().copied());
        let key_moved = key_columns
            .iter()
            .map(|c| format!("OLD.{0} IS NOT NEW.{0}", quoted(c)))
            .collect::<Vec<_>>()
            .join(" OR ");
        let trigger = |op: &str| quoted(&format!("redo_{}_{op}", table.name));
        sql.push_str(&format!(
            "CREATE TEMP TRIGGER IF NOT EXISTS {insert} AFTER INSERT ON main.{name} BEGIN
               INSERT INTO temp.redo (tbl, op, {whole_slots}) VALUES ({literal}, {UPSERT}, {new_row});
             END;
             CREATE TEMP TRIGGER IF NOT EXISTS {update} AFTER UPDATE ON main.{name} BEGIN
               INSERT INTO temp.redo (tbl, op, {key_slots})
                 SELECT {literal}, {DELETE}, {old_key} WHERE {key_moved};
               INSERT INTO temp.redo (tbl, op, {whole_slots}) VALUES ({literal}, {UPSERT}, {new_row});
             END;
             CREATE TEMP TRIGGER IF NOT EXISTS {delete} AFTER DELETE ON main.{name} BEGIN
               INSERT INTO temp.redo (tbl, op, {key_slots}) VALUES ({literal}, {DELETE}, {old_key});
             END;",
            insert = trigger("insert"),
            update = trigger("update"),
            delete = trigger("delete"),
        ));
    }
    conn.execute_batch(&sql)?;
    Ok(())
}

/// Reads and empties what `tx` has captured so far, encoded; empty when it changed nothing.
/// Each row is encoded as it is read, from SQLite's own buffers.
pub(super) fn take(tx: &Transaction<'_>) -> Result<Vec<u8>, StoreError> {
    // Read at the first change: most transactions of a busy volume have some.
    let mut tables: Option<HashMap<String, Table>> = None;
    let mut used: Vec<String> = Vec::new();
    let mut index: HashMap<String, u16> = HashMap::new();
    let mut changes = 0u32;
    let mut body = Vec::new();
    {
        let mut statement = tx.prepare_cached(&format!(
            "SELECT tbl, op, {} FROM temp.redo ORDER BY n",
            (0..MAX_COLUMNS)
                .map(|i| format!("c{i}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))?;
        let mut rows = statement.query([])?;
        while let Some(row) = rows.next()? {
            let tables = match &mut tables {
                Some(tables) => tables,
                None => tables.insert(
                    self::tables(tx)?
                        .into_iter()
                        .map(|table| (table.name.clone(), table))
                        .collect(),
                ),
            };
            let name = row.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
            let op: i64 = row.get(1)?;
            let table = tables.get(name).ok_or_else(|| StoreError::Corrupted {
                reason: format!("a change to table {name}, which is not captured"),
            })?;
            let id = match index.get(name) {
                Some(&id) => id,
                None => {
                    used.push(table.name.clone());
                    let id = (used.len() - 1) as u16;
                    index.insert(table.name.clone(), id);
                    id
                }
            };
            body.extend_from_slice(&id.to_le_bytes());
            body.push(op as u8);
            let width = if op == UPSERT {
                table.columns.len()
            } else {
                table.key.len()
            };
            for column in 0..width {
                put_value(&mut body, row.get_ref(column + 2)?);
            }
            changes += 1;
        }
    }
    let Some(tables) = tables else {
        return Ok(Vec::new());
    };
    tx.prepare_cached("DELETE FROM temp.redo")?.execute([])?;
    let mut encoded = MAGIC.to_vec();
    encoded.extend_from_slice(&(used.len() as u16).to_le_bytes());
    for name in &used {
        let table = &tables[name];
        put_str(&mut encoded, &table.name);
        encoded.extend_from_slice(&(table.columns.len() as u16).to_le_bytes());
        for column in &table.columns {
            put_str(&mut encoded, column);
        }
        encoded.extend_from_slice(&(table.key.len() as u16).to_le_bytes());
        for &column in &table.key {
            encoded.extend_from_slice(&(column as u16).to_le_bytes());
        }
    }
    encoded.reserve(4 + body.len());
    put_u32(&mut encoded, changes);
    encoded.extend_from_slice(&body);
    Ok(encoded)
}

/// Replays `redo` (from [`take`]) in `tx`. Fails with [`StoreError::Corrupted`] when it is
/// malformed or does not apply cleanly to what `tx` holds.
pub(super) fn apply(tx: &Transaction<'_>, redo: &[u8]) -> Result<(), StoreError> {
    let mut input = Reader(redo);
    let unclean = |what: String| StoreError::Corrupted {
        reason: format!("a replicated change does not apply: {what}"),
    };
    if input.take(4).ok() != Some(&MAGIC[..]) {
        return Err(unclean("not a redo record".into()));
    }
    let count = input.u16()?;
    let mut used = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let name = input.str()?;
        let columns = (0..input.u16()?)
            .map(|_| input.str())
            .collect::<Result<Vec<_>, _>>()?;
        let key = (0..input.u16()?)
            .map(|_| input.u16().map(usize::from))
            .collect::<Result<Vec<_>, _>>()?;
        if key.iter().any(|&column| column >= columns.len()) {
            return Err(unclean(format!("table {name}: a key column out of range")));
        }
        let (upsert, delete) = replay_statements(&name, &columns, &key);
        used.push((name, columns.len(), key.len(), upsert, delete));
    }
    for _ in 0..input.u32()? {
        let (name, width, key_width, upsert, delete) = used
            .get(usize::from(input.u16()?))
            .ok_or_else(|| unclean("an unknown table".into()))?;
        let op = i64::from(input.u8()?);
        let (sql, width) = match op {
            UPSERT => (upsert, *width),
            DELETE => (delete, *key_width),
            _ => return Err(unclean(format!("operation {op}"))),
        };
        let values = (0..width)
            .map(|_| input.value())
            .collect::<Result<Vec<_>, _>>()?;
        let changed = tx
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(values))
            .map_err(|err| unclean(format!("table {name}: {err}")))?;
        if op == DELETE && changed != 1 {
            return Err(unclean(format!(
                "table {name}: the row to delete is not there"
            )));
        }
    }
    if !input.0.is_empty() {
        return Err(unclean("bytes after the last change".into()));
    }
    Ok(())
}

/// The upsert and the delete that replay a change to table `name`.
fn replay_statements(name: &str, columns: &[String], key: &[usize]) -> (String, String) {
    let table = quoted(name);
    let listed = columns.iter().map(|c| quoted(c)).collect::<Vec<_>>();
    let slots = (1..=columns.len())
        .map(|i| format!("?{i}"))
        .collect::<Vec<_>>();
    let key_names: Vec<String> = key.iter().map(|&i| listed[i].clone()).collect();
    let others: Vec<String> = (0..columns.len())
        .filter(|i| !key.contains(i))
        .map(|i| format!("{0} = excluded.{0}", listed[i]))
        .collect();
    let on_conflict = if others.is_empty() {
        "DO NOTHING".to_owned()
    } else {
        format!("DO UPDATE SET {}", others.join(", "))
    };
    let upsert = format!(
        "INSERT INTO main.{table} ({}) VALUES ({}) ON CONFLICT ({}) {on_conflict}",
        listed.join(", "),
        slots.join(", "),
        key_names.join(", "),
    );
    let matches: Vec<String> = key_names
        .iter()
        .enumerate()
        .map(|(i, column)| format!("{column} = ?{}", i + 1))
        .collect();
    let delete = format!("DELETE FROM main.{table} WHERE {}", matches.join(" AND "));
    (upsert, delete)
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    put_u32(out, text.len() as u32);
    out.extend_from_slice(text.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: ValueRef<'_>) {
    match value {
        ValueRef::Null => out.push(0),
        ValueRef::Integer(i) => {
            out.push(1);
            out.extend_from_slice(&i.to_le_bytes());
        }
        ValueRef::Real(r) => {
            out.push(2);
            out.extend_from_slice(&r.to_le_bytes());
        }
        ValueRef::Text(bytes) => {
            out.push(3);
            put_u32(out, bytes.len() as u32);
            out.extend_from_slice(bytes);
        }
        ValueRef::Blob(bytes) => {
            out.push(4);
            put_u32(out, bytes.len() as u32);
            out.extend_from_slice(bytes);
        }
    }
}

/// Reads an encoded redo front to back; running out is [`StoreError::Corrupted`].
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        if self.0.len() < n {
            return Err(StoreError::Corrupted {
                reason: "a replicated change is cut short".into(),
            });
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], StoreError> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    fn u8(&mut self) -> Result<u8, StoreError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, StoreError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, StoreError> {
        self.array().map(u32::from_le_bytes)
    }

    fn bytes(&mut self) -> Result<&'a [u8], StoreError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    fn str(&mut self) -> Result<String, StoreError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| StoreError::Corrupted {
            reason: "a replicated name is not UTF-8".into(),
        })
    }

    fn value(&mut self) -> Result<Value, StoreError> {
        Ok(match self.u8()? {
            0 => Value::Null,
            1 => Value::Integer(i64::from_le_bytes(self.array()?)),
            2 => Value::Real(f64::from_le_bytes(self.array()?)),
            3 => Value::Text(String::from_utf8(self.bytes()?.to_vec()).map_err(|_| {
                StoreError::Corrupted {
                    reason: "a replicated text is not UTF-8".into(),
                }
            })?),
            4 => Value::Blob(self.bytes()?.to_vec()),
            tag => {
                return Err(StoreError::Corrupted {
                    reason: format!("a replicated value of unknown type {tag}"),
                });
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::TransactionBehavior;

    use super::*;
    use crate::store::schema;

    fn volume() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        schema::migrate(&mut conn).unwrap();
        conn
    }

    /// Every row of every captured table, as text, in key order.
    fn dump(conn: &Connection) -> Vec<String> {
        let mut rows = Vec::new();
        for table in tables(conn).unwrap() {
            let order: Vec<String> = table.key.iter().map(|i| (i + 1).to_string()).collect();
            let sql = format!(
                "SELECT * FROM {} ORDER BY {}",
                quoted(&table.name),
                order.join(", ")
            );
            let mut statement = conn.prepare(&sql).unwrap();
            let width = statement.column_count();
            let mut found = statement.query([]).unwrap();
            while let Some(row) = found.next().unwrap() {
                let values: Vec<Value> = (0..width).map(|i| row.get(i).unwrap()).collect();
                rows.push(format!("{}: {values:?}", table.name));
            }
        }
        rows
    }

    fn captured(conn: &mut Connection, sql: &str) -> Vec<u8> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        tx.execute_batch(sql).unwrap();
        let redo = take(&tx).unwrap();
        tx.commit().unwrap();
        redo
    }

    fn replayed(conn: &mut Connection, redo: &[u8]) -> Result<(), StoreError> {
        let tx = conn.transaction().unwrap();
        apply(&tx, redo)?;
        tx.commit().unwrap();
        Ok(())
    }

    /// Inserts, updates (one moving a primary key), upserts, `INSERT OR REPLACE` and deletes,
    /// over several transactions: replaying each one's redo on a copy that started equal gives
    /// an equal copy.
    #[test]
    fn replaying_every_transaction_gives_an_equal_copy() {
        let (mut origin, mut copy) = (volume(), volume());
        install(&origin).unwrap();
        let transactions = [
            "INSERT INTO partitions (topic, partition) VALUES ('a', 0), ('b', 1);
             INSERT INTO records (seq, partition, offset, dedup_key, payload, bytes, end_bytes, appended_at, checksum)
               VALUES (1, 1, 0, 'k', '{\"x\":1.5}', 9, 9, 10, 7), (2, 2, 0, NULL, 'null', 4, 4, 10, NULL);",
            "INSERT INTO cursors (partition, group_name, offset, committed_at) VALUES (1, 'g', 1, 5)
               ON CONFLICT (partition, group_name) DO UPDATE SET offset = excluded.offset;
             INSERT INTO cursors (partition, group_name, offset, committed_at) VALUES (1, 'g', 2, 6)
               ON CONFLICT (partition, group_name) DO UPDATE SET offset = excluded.offset;
             INSERT OR REPLACE INTO record_index (partition, offset, seq) VALUES (1, 0, 1);
             INSERT OR REPLACE INTO record_index (partition, offset, seq) VALUES (1, 0, 1);
             UPDATE partitions SET due_at = 99 WHERE id = 2;",
            "UPDATE records SET seq = 3 WHERE seq = 2;
             DELETE FROM record_index;
             DELETE FROM partitions WHERE topic = 'a';
             UPDATE indexed SET through_seq = 3;",
        ];
        for sql in transactions {
            let redo = captured(&mut origin, sql);
            assert!(!redo.is_empty(), "{sql} changed rows");
            replayed(&mut copy, &redo).unwrap();
            assert_eq!(dump(&copy), dump(&origin), "after {sql}");
        }
        assert!(dump(&origin).iter().any(|row| row.starts_with("records")));
    }

    /// A transaction that changed nothing has nothing to replay, and taking empties the
    /// capture: the next transaction's redo holds its own changes only.
    #[test]
    fn take_empties_the_capture() {
        let mut origin = volume();
        install(&origin).unwrap();
        assert!(captured(&mut origin, "SELECT 1;").is_empty());
        let first = captured(
            &mut origin,
            "INSERT INTO partitions (topic, partition) VALUES ('a', 0);",
        );
        let second = captured(
            &mut origin,
            "INSERT INTO partitions (topic, partition) VALUES ('b', 0);",
        );
        let mut copy = volume();
        replayed(&mut copy, &second).unwrap();
        let partitions: Vec<String> = dump(&copy)
            .into_iter()
            .filter(|row| row.starts_with("partitions"))
            .collect();
        assert_eq!(
            partitions,
            vec!["partitions: [Integer(2), Text(\"b\"), Integer(0), Integer(0), Integer(0), Null]"]
        );
        assert!(!first.is_empty());
    }

    /// A change that does not apply to the copy (it lacks the row to delete), or bytes that
    /// are not a redo, fail the replay and change nothing.
    #[test]
    fn a_change_that_does_not_apply_fails_the_replay() {
        let mut origin = volume();
        install(&origin).unwrap();
        captured(
            &mut origin,
            "INSERT INTO partitions (topic, partition) VALUES ('a', 0);",
        );
        let delete = captured(&mut origin, "DELETE FROM partitions;");
        let mut copy = volume();
        let before = dump(&copy);
        assert!(matches!(
            replayed(&mut copy, &delete),
            Err(StoreError::Corrupted { .. })
        ));
        assert!(matches!(
            replayed(&mut copy, &delete[..delete.len() - 1]),
            Err(StoreError::Corrupted { .. })
        ));
        assert!(matches!(
            replayed(&mut copy, b"nonsense"),
            Err(StoreError::Corrupted { .. })
        ));
        assert_eq!(dump(&copy), before);
    }

    /// The local table is never captured.
    #[test]
    fn the_local_tables_are_not_captured() {
        let mut origin = volume();
        install(&origin).unwrap();
        let position = "INSERT INTO replica (id, node, inc, seq) VALUES (1, 'n', 1, 5);";
        assert!(captured(&mut origin, position).is_empty());
    }
}
