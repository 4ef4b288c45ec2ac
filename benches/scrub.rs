//! What the background scrub costs, on one volume of about 1 GB, measured in one run.
//!
//! Run: `cargo bench --bench scrub` (`-- --gb 0.25` for a smaller volume). It fills one volume
//! with 1 KiB records over 8 partitions, then prints:
//!
//! - one full scrub pass, unpaced ([`Volume::scrub`]), from a cold page cache (the file's pages
//!   dropped first) and a warm one, in MB of volume per second; and SQLite's `integrity_check`
//!   and `quick_check` alone on the same file, the part of a pass that reads every page;
//! - the append throughput of the log (`sync = full`, 8 single-record producers of 100 B on 8
//!   partitions) while the paced scrub makes one whole pass over the volume, then for as long
//!   with no scrub, three rounds, with their medians' ratio; and the share of one core the
//!   scrub's thread took during its pass, and how long the pass took.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use durability::config::ColdKind;
use durability::store::{LogStore, NewRecord, ScrubCounters, StoreOptions, SyncMode, Volume};
use durability::{Config, Log};

const TOPIC: &str = "bench";
const PARTITIONS: u32 = 8;
const PAYLOAD_BYTES: usize = 1024;
/// Records appended while measuring: small, so the volume grows little meanwhile.
const APPEND_BYTES: usize = 100;
const ROUNDS: usize = 3;

fn main() {
    let mut gb = 1.0_f64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--gb" => gb = args.next().and_then(|s| s.parse().ok()).expect("--gb N"),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    let root = tempfile::Builder::new()
        .prefix("durability-bench-scrub")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let data_dir = root.path().join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let path = data_dir.join(Volume::file_name(0));

    let started = Instant::now();
    let records = fill(&path, (gb * f64::from(1 << 30)) as u64);
    let bytes = std::fs::metadata(&path).unwrap().len();
    let mb = bytes as f64 / 1e6;
    println!(
        "Volume: {mb:.0} MB, {records} records of {PAYLOAD_BYTES} B over {PARTITIONS} partitions \
         (filled in {:.0} s)\n",
        started.elapsed().as_secs_f64()
    );

    println!("| one pass, unpaced | page cache | seconds | MB/s |");
    println!("|---|---|---|---|");
    for cache in ["cold", "warm"] {
        if cache == "cold" {
            drop_cached_pages(&path);
        }
        let volume = Volume::open(&path, SyncMode::Full).unwrap();
        let counters = ScrubCounters::default();
        let started = Instant::now();
        volume.scrub(&counters).expect("a sound volume");
        let took = started.elapsed().as_secs_f64();
        assert_eq!(counters.records_checked(), records);
        println!("| whole scrub | {cache} | {took:.2} | {:.0} |", mb / took);
        volume.close().unwrap();
    }
    for pragma in ["integrity_check", "quick_check"] {
        let took = sqlite_check(&path, pragma);
        println!("| {pragma} alone | warm | {took:.2} | {:.0} |", mb / took);
    }

    println!(
        "\nAppends of {APPEND_BYTES} B records with and without the paced scrub (each round: \
         one whole paced pass, then as long without, each from the volume as filled; median of \
         {ROUNDS})\n"
    );
    // Every measurement starts from the volume as filled: the appends of one do not grow the
    // next one's.
    let pristine = root.path().join("pristine.sqlite");
    std::fs::copy(&path, &pristine).unwrap();
    let (mut without, mut with, mut shares, mut pass) = (Vec::new(), Vec::new(), vec![], vec![]);
    for _ in 0..ROUNDS {
        restore(&data_dir, &pristine);
        let scrubbed = appends(&data_dir, None);
        restore(&data_dir, &pristine);
        without.push(appends(&data_dir, Some(scrubbed.seconds)).rate);
        with.push(scrubbed.rate);
        eprintln!(
            "  round: {:.0} appends/s with the scrub, {:.0} without",
            scrubbed.rate,
            without.last().unwrap()
        );
        shares.push(scrubbed.scrub_share);
        pass.push(scrubbed.seconds);
    }
    let (without, with) = (median(without), median(with));
    println!("| scrub | appends/s | ratio | scrub thread's CPU | paced pass |");
    println!("|---|---|---|---|---|");
    println!("| off | {without:.0} | 1.00 | | |");
    println!(
        "| paced, one whole pass | {with:.0} | {:.2} | {:.0} % of one core | {:.0} s |",
        with / without,
        median(shares) * 100.0,
        median(pass)
    );
}

/// Makes `data_dir` hold `pristine` as its only volume, and nothing else (no WAL, no
/// high-water mark of later commits).
fn restore(data_dir: &Path, pristine: &Path) {
    for file in std::fs::read_dir(data_dir).unwrap().flatten() {
        std::fs::remove_file(file.path()).unwrap();
    }
    let path = data_dir.join(Volume::file_name(0));
    std::fs::copy(pristine, &path).unwrap();
    // Written out before the measurement, so that its writeback does not slow the fsyncs.
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
}

/// Fills the volume at `path` with records of `PAYLOAD_BYTES` until it holds about `bytes`,
/// round-robin over the partitions, 1,000 records per commit; answers how many. Closes it, so
/// the file holds everything.
fn fill(path: &Path, bytes: u64) -> u64 {
    let volume = Volume::open(path, SyncMode::Normal).unwrap();
    let options = StoreOptions::default().sync(SyncMode::Normal);
    let stores: Vec<LogStore> = (0..PARTITIONS)
        .map(|partition| {
            LogStore::open_in(&volume, TOPIC, partition, options.clone(), true)
                .unwrap()
                .unwrap()
        })
        .collect();
    let payload = format!("\"{}\"", "x".repeat(PAYLOAD_BYTES - 2));
    let batch = vec![NewRecord::new(payload); 100];
    let batches = vec![batch.as_slice(); 10];
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let held = || [path, Path::new(&wal)].map(|file| file.metadata().map_or(0, |m| m.len()));
    let mut records = 0;
    while held().iter().sum::<u64>() < bytes {
        for store in &stores {
            let outcomes = store.append_batches(&batches).unwrap();
            assert!(outcomes.iter().all(|outcome| outcome.is_appended()));
            records += 1_000;
        }
    }
    volume.close().unwrap();
    records
}

/// Asks the kernel to forget the cached pages of `path` (written and synced), so that the next
/// read comes from the disk.
fn drop_cached_pages(path: &Path) {
    use std::os::unix::io::AsRawFd;
    let file = std::fs::File::open(path).unwrap();
    file.sync_all().unwrap();
    // SAFETY: posix_fadvise only reads the open descriptor's numbers.
    let advised = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(advised, 0, "posix_fadvise");
}

/// Seconds `PRAGMA {pragma}` takes on the volume at `path`.
fn sqlite_check(path: &Path, pragma: &str) -> f64 {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let started = Instant::now();
    let result: String = conn
        .query_row(&format!("PRAGMA {pragma}"), [], |row| row.get(0))
        .unwrap();
    assert_eq!(result, "ok");
    started.elapsed().as_secs_f64()
}

/// What [`appends`] measured.
struct Appends {
    rate: f64,
    seconds: f64,
    /// The share of one core the scrub's thread took.
    scrub_share: f64,
}

/// The log in `data_dir` (`sync = full`) under 8 single-record producers (one per partition):
/// for `budget`, with the scrub off, or, when `budget` is `None`, with the scrub on from the
/// start until its first pass over the volume ends.
fn appends(data_dir: &Path, budget: Option<f64>) -> Appends {
    let mut config = Config::default();
    config.storage.data_dir = data_dir.to_owned();
    config.storage.sync = SyncMode::Full;
    // 1 ms: the first pass starts at once.
    config.storage.scrub_interval_ms = if budget.is_some() { 0 } else { 1 };
    config.cold.kind = ColdKind::None;
    config.log.partitions_per_topic = PARTITIONS;
    config.retention.max_age_ms = 0;
    config.retention.max_bytes = 0;
    let payload = format!("\"{}\"", "x".repeat(APPEND_BYTES - 2));
    actix::System::new().block_on(async move {
        let log = Log::open(config).unwrap();
        let counters = log.scrub_counters();
        let cpu = scrub_cpu();
        let appended = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let going = move || match budget {
            Some(budget) => started.elapsed().as_secs_f64() < budget,
            None => counters.last_pass() == 0,
        };
        let producers: Vec<_> = (0..PARTITIONS)
            .map(|partition| {
                let (log, appended, going) = (log.clone(), appended.clone(), going.clone());
                let record = NewRecord::new(payload.clone());
                actix::spawn(async move {
                    while going() {
                        let answer = log.append(TOPIC, partition, vec![record.clone()]).await;
                        assert!(answer.unwrap().outcome.is_appended());
                        appended.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for producer in producers {
            producer.await.unwrap();
        }
        let seconds = started.elapsed().as_secs_f64();
        let scrub_share = (scrub_cpu() - cpu).as_secs_f64() / seconds;
        log.shutdown().await.unwrap();
        Appends {
            rate: appended.load(Ordering::Relaxed) as f64 / seconds,
            seconds,
            scrub_share,
        }
    })
}

/// CPU time the scrub's thread took so far (zero when it does not run).
fn scrub_cpu() -> Duration {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    let scrub: Option<PathBuf> = tasks.flatten().map(|task| task.path()).find(|task| {
        // The kernel keeps the first 15 bytes of a thread's name.
        std::fs::read_to_string(task.join("comm"))
            .is_ok_and(|name| "durability-scrub".starts_with(name.trim()))
    });
    let Some(stat) = scrub.and_then(|task| std::fs::read_to_string(task.join("stat")).ok()) else {
        return Duration::ZERO;
    };
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
