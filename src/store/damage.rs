//! The damage mark: a volume found damaged stays refused across restarts until an operator
//! accepts the damage.
//!
//! When a volume is first found damaged, a small file beside it (`volume-N.sqlite-damaged`)
//! records the kind of damage, when it was found and why, written to a temporary file, synced
//! and renamed into place. Every open reads it back, so the volume refuses writes again
//! although nothing reads the damaged page or record after the restart. Only
//! [`accept_damage`] (the server's `accept-damage` command) removes it, after appending who
//! accepted what to `volume-N.sqlite-accepted`.

use std::io::Write;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

const HEADER: &str = "durability damage mark v1";

/// What was found wrong with a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DamageKind {
    /// SQLite found a page malformed, or a record failed its checksum: writes are refused,
    /// and reads serve what still verifies.
    Malformed,
    /// The volume holds fewer commits than it acknowledged (its write-ahead log or database
    /// file was lost, emptied or cut short): nothing it still holds can be vouched for, so
    /// every operation of its partitions is refused, except reads that intact cold segments
    /// serve.
    Lost,
}

impl DamageKind {
    /// Its name in the mark and in metrics: `malformed` or `lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::Lost => "lost",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "malformed" => Some(Self::Malformed),
            "lost" => Some(Self::Lost),
            _ => None,
        }
    }
}

/// A damage mark as stored beside a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamageMark {
    /// What was found.
    pub kind: DamageKind,
    /// When, as RFC 3339 in UTC.
    pub marked_at: String,
    /// Why, in one line.
    pub cause: String,
}

impl DamageMark {
    /// A mark made now.
    pub(super) fn now(kind: DamageKind, cause: &str) -> Self {
        Self {
            kind,
            marked_at: now_rfc3339(),
            cause: one_line(cause),
        }
    }

    fn encode(&self) -> String {
        format!(
            "{HEADER}\nkind: {}\nmarked: {}\ncause: {}\n",
            self.kind.as_str(),
            self.marked_at,
            self.cause
        )
    }

    fn decode(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        if lines.next()? != HEADER {
            return None;
        }
        let mut field = |name: &str| {
            lines
                .next()?
                .strip_prefix(name)?
                .strip_prefix(": ")
                .map(str::to_owned)
        };
        Some(Self {
            kind: DamageKind::parse(&field("kind")?)?,
            marked_at: field("marked")?,
            cause: field("cause")?,
        })
    }
}

/// The file beside a volume that holds its damage mark.
pub fn mark_path(volume: &Path) -> PathBuf {
    beside(volume, "-damaged")
}

/// The file beside a volume where accepted damage is recorded, one line per acceptance.
pub fn accepted_path(volume: &Path) -> PathBuf {
    beside(volume, "-accepted")
}

fn beside(volume: &Path, suffix: &str) -> PathBuf {
    let mut name = volume.as_os_str().to_owned();
    name.push(suffix);
    name.into()
}

/// The volume's damage mark, if it has one. A mark that cannot be read or understood is taken
/// as damage of its own (the volume keeps refusing writes): it was written because something
/// was wrong.
pub(super) fn read_mark(volume: &Path) -> Option<DamageMark> {
    let path = mark_path(volume);
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(DamageMark::decode(&text).unwrap_or_else(|| {
            DamageMark::now(
                DamageKind::Malformed,
                &format!("its damage mark {} cannot be understood", path.display()),
            )
        })),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => Some(DamageMark::now(
            DamageKind::Malformed,
            &format!("its damage mark {} cannot be read: {err}", path.display()),
        )),
    }
}

/// Stores `mark` beside `volume`, durably: written whole to a temporary file, synced, renamed
/// over any earlier mark, and the folder synced.
pub(super) fn write_mark(volume: &Path, mark: &DamageMark) -> std::io::Result<()> {
    let path = mark_path(volume);
    let temporary = beside(volume, "-damaged.tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(mark.encode().as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temporary, &path)?;
    sync_folder(&path)
}

fn sync_folder(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => std::fs::File::open(folder)?.sync_all(),
        _ => std::fs::File::open(".")?.sync_all(),
    }
}

/// Marks the volume at `volume` damaged (malformed) for `cause`, found by a reader outside the
/// volume (a replica's snapshot), unless it has a mark already; a failure is logged.
pub(crate) fn mark_damaged_file(volume: &Path, cause: &str) {
    if mark_path(volume).exists() {
        return;
    }
    log::error!("{}: damaged: {cause}", volume.display());
    if let Err(err) = write_mark(volume, &DamageMark::now(DamageKind::Malformed, cause)) {
        log::error!(
            "{}: cannot record the damage mark: {err}",
            mark_path(volume).display()
        );
    }
}

/// Why [`accept_damage`] cleared nothing.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct AcceptError(String);

/// What [`accept_damage`] cleared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedDamage {
    /// The mark that was removed.
    pub mark: DamageMark,
    /// The line appended to the volume's `-accepted` file.
    pub record: String,
}

/// Clears the damage mark of the volume at `volume`, on the word of `by` (who accepts it and
/// why, in their own words), so that it takes writes again at its next open. Run it with the
/// server stopped. The acceptance is first appended, synced, to `volume-N.sqlite-accepted`.
///
/// Accepting a [`DamageKind::Lost`] mark also sets the volume's high-water mark to what the
/// volume now holds: the lost commits are given up, and the offsets they had are handed out
/// again to new records.
///
/// # Errors
/// [`AcceptError`] naming the reason when the volume has no mark, `by` is empty, or the files
/// cannot be read or written; the mark then stays.
pub fn accept_damage(volume: &Path, by: &str) -> Result<AcceptedDamage, AcceptError> {
    let refused = AcceptError;
    let by = one_line(by.trim());
    if by.is_empty() {
        return Err(refused(
            "say who accepts the damage (a name, and why)".into(),
        ));
    }
    if !mark_path(volume).exists() {
        return Err(refused(format!(
            "{} has no damage mark ({} does not exist): nothing to accept",
            volume.display(),
            mark_path(volume).display()
        )));
    }
    let mark = read_mark(volume).expect("the mark exists");
    if mark.kind == DamageKind::Lost {
        let held = durable_seq(volume).map_err(|err| {
            refused(format!(
                "{} cannot be read to take its new high-water mark: {err}",
                volume.display()
            ))
        })?;
        write_high_water(volume, held).map_err(|err| {
            refused(format!(
                "cannot write the high-water mark of {}: {err}",
                volume.display()
            ))
        })?;
    }
    let record = format!(
        "{} accepted by {by}: {} damage marked {}: {}",
        now_rfc3339(),
        mark.kind.as_str(),
        mark.marked_at,
        mark.cause
    );
    let io = |what: &str, err: std::io::Error| refused(format!("cannot {what}: {err}"));
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(accepted_path(volume))
        .map_err(|err| io("open the acceptance record", err))?;
    writeln!(log, "{record}").map_err(|err| io("write the acceptance record", err))?;
    log.sync_all()
        .map_err(|err| io("sync the acceptance record", err))?;
    std::fs::remove_file(mark_path(volume)).map_err(|err| io("remove the damage mark", err))?;
    sync_folder(&mark_path(volume)).map_err(|err| io("sync the data folder", err))?;
    Ok(AcceptedDamage { mark, record })
}

/// The newest commit the volume's files hold now, as the volume counts it at open.
fn durable_seq(volume: &Path) -> rusqlite::Result<i64> {
    let conn = Connection::open_with_flags(volume, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    conn.query_row(
        "SELECT MAX((SELECT COALESCE(MAX(seq), 0) FROM records),
                    (SELECT through_seq FROM indexed WHERE id = 1))",
        [],
        |row| row.get(0),
    )
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The file beside a volume that holds its high-water mark: the newest seq known durable.
pub(super) fn high_water_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-hwm");
    name.into()
}

/// The volume's high-water mark, 0 when it has none (or an unreadable one). A volume that
/// opens holding fewer commits than this lost some: its WAL or database file was deleted,
/// truncated or replaced, and handing out its offsets again would reuse acknowledged ones.
pub(super) fn read_high_water(path: &Path) -> i64 {
    let file = high_water_path(path);
    match std::fs::read_to_string(&file) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            log::warn!("{}: not a high-water mark, ignored", file.display());
            0
        }),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
        Err(err) => {
            log::warn!("{}: cannot read the high-water mark: {err}", file.display());
            0
        }
    }
}

/// Writes the high-water mark in place, fixed width (one small write: never half old, half
/// new), and syncs it.
pub(super) fn write_high_water(path: &Path, seq: i64) -> std::io::Result<()> {
    use std::io::{Seek, Write};
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(high_water_path(path))?;
    file.seek(std::io::SeekFrom::Start(0))?;
    file.write_all(format!("{seq:020}\n").as_bytes())?;
    file.sync_data()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_as_written() {
        let mark = DamageMark::now(DamageKind::Lost, "holds 3\nbut 5 were acknowledged");
        assert_eq!(mark.cause, "holds 3 but 5 were acknowledged");
        assert_eq!(DamageMark::decode(&mark.encode()), Some(mark));
        assert_eq!(DamageMark::decode("something else\n"), None);
    }

    #[test]
    fn an_unreadable_mark_still_counts_as_damage() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume-0.sqlite");
        assert_eq!(read_mark(&volume), None);
        std::fs::write(mark_path(&volume), "garbage").unwrap();
        let mark = read_mark(&volume).unwrap();
        assert_eq!(mark.kind, DamageKind::Malformed);
        assert!(mark.cause.contains("cannot be understood"), "{mark:?}");
    }

    #[test]
    fn accepting_needs_a_mark_and_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("volume-0.sqlite");
        let err = accept_damage(&volume, "ops").unwrap_err();
        assert!(err.to_string().contains("no damage mark"), "{err}");
        write_mark(&volume, &DamageMark::now(DamageKind::Malformed, "bad page")).unwrap();
        assert!(accept_damage(&volume, "  ").is_err());
        assert!(
            mark_path(&volume).exists(),
            "a refused acceptance keeps the mark"
        );
        let accepted = accept_damage(&volume, "ops: restored from backup").unwrap();
        assert!(!mark_path(&volume).exists());
        let record = std::fs::read_to_string(accepted_path(&volume)).unwrap();
        assert_eq!(record, format!("{}\n", accepted.record));
        assert!(record.contains("accepted by ops: restored from backup: malformed"));
        assert!(record.contains("bad page"));
    }
}
