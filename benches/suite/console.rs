//! What the browser console (`/console/`) gives its user, each figure next to a baseline
//! measured in the same run, in Debian's headless Chromium driven by Selenium
//! (`tests/console/bench_console.py`, in `.venv-browser`, which `scripts/install-browser` makes),
//! against the release server started as the suite starts it ([`external::server_with`]:
//! `sync = full`, the default `log.max_batch_size`) with a bearer token:
//!
//! - First paint with [`TOPICS`] topics: the time from the navigation's start until the first
//!   row of the topics table is in the DOM (a MutationObserver installed before any script of
//!   the page, through CDP `Page.addScriptToEvaluateOnNewDocument`, which also puts the token
//!   in `sessionStorage` as the page's token form would), and the `first-contentful-paint` of
//!   the Performance API, against the same loads from a server holding one topic. Each load is
//!   a new browser with a new profile (nothing cached) that first opens the server's `/healthz`,
//!   so that the browser's start is not in the figure; the two servers alternate (AB, BA, ...),
//!   [`LOADS`] loads each, and the median is kept. The topics are written beforehand, one
//!   record each, from 32 threads on keep-alive connections; that time is not in the figure.
//! - The live tail (`#/topics/{t}/partitions/0/tail`) while a producer process POSTs [`BATCH`]
//!   records every 10 ms, paced by a monotonic clock, for [`SECONDS`] s ([`RATE`] records/s),
//!   each POST waiting for its answer on one keep-alive connection: the records the page
//!   received (its `#tail-count`), whether the rows it shows are the newest with contiguous
//!   offsets, the delay from a batch's answer to the first frame holding its last record, and
//!   the page's JS heap; against a plain long-poll reader (a Python process making the page's
//!   requests, `limit=1000&waitMs=25000`, one at a time on one connection) reading the same
//!   records at the same time. The page has [`GRACE_S`] s after the last answer to show the
//!   last record. Chromium's counters of the page's main thread (CDP `Performance.getMetrics`)
//!   tell where its time went. [`TAIL_RUNS`] runs, each on a topic of its own.
//!
//! The browser, the producer, the reader and the server share the machine's cores. Timings are
//! reported, never asserted; what is checked is that the page showed rows at all and that the
//! records were written.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::external::{self, Running};

/// Topics of the server whose console is loaded (the baseline's holds one).
pub const TOPICS: u64 = 10_000;
/// Rows of a page of the topics view (console.js: `TOPICS_PAGE`).
pub const TOPICS_PAGE: u64 = 100;
/// Loads of the console from each server (3 with `--quick`).
pub const LOADS: usize = 7;
/// The first-paint goal, in ms.
pub const FIRST_ROW_GOAL_MS: f64 = 300.0;
/// Records per second the live tail is fed.
pub const RATE: u64 = 5_000;
/// Seconds the live tail is fed.
pub const SECONDS: u64 = 10;
/// Records per POST.
pub const BATCH: u64 = 50;
/// Seconds after the last answer that the page has to show the last record.
pub const GRACE_S: f64 = 30.0;
/// The newest rows the tail keeps in the DOM (console.js: `TAIL_MAX_ROWS`).
pub const TAIL_MAX_ROWS: u64 = 20_000;
/// Runs of the live tail (1 with `--quick`).
pub const TAIL_RUNS: usize = 3;
/// The longest delay from the last answer to its row at which the tail still kept up, in ms:
/// a page that falls behind shows the last record many seconds late, or never.
pub const KEPT_UP_MS: f64 = 1_000.0;
/// The servers' `server.auth_token`.
const TOKEN: &str = "console-bench-token";

/// Debian's chromium, which Selenium drives through `/usr/bin/chromedriver`.
const CHROMIUM: &str = "/usr/bin/chromium";

/// The Python of `scripts/install-browser`, with Selenium.
pub fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-browser/bin/python")
}

/// Whether [`python`] has Selenium and Debian's chromium and its driver are installed: without
/// them the section is skipped.
pub fn installed() -> bool {
    let selenium = Command::new(python())
        .args(["-c", "import selenium"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    selenium && Path::new(CHROMIUM).exists() && Path::new("/usr/bin/chromedriver").exists()
}

/// One load of the topics view, times in ms from the navigation's start.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Load {
    /// The first row of the topics table in the DOM.
    pub first_row_ms: f64,
    /// The frame after it (a `requestAnimationFrame`, then a task).
    pub first_row_frame_ms: f64,
    /// `first-contentful-paint`.
    pub fcp_ms: Option<f64>,
    pub dom_content_loaded_ms: Option<f64>,
    /// When the page asked for the first page of topics, and how long the answer took.
    pub topics_start_ms: Option<f64>,
    pub topics_request_ms: Option<f64>,
    /// Rows the table showed.
    pub rows: u64,
}

/// What one reader of the tail saw: the page or the long-poll reader.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Reader {
    pub received: u64,
    /// Offsets out of sequence: in the page's rows (newest first), or in what the reader read.
    pub gaps: u64,
    /// From the last batch's answer to the first frame (page) holding its last record, in ms;
    /// `None` if it never came.
    pub last_delay_ms: Option<f64>,
    /// Of every batch's delay (those that came).
    pub p50_delay_ms: Option<f64>,
    pub p99_delay_ms: Option<f64>,
    pub max_delay_ms: Option<f64>,
    pub batches_seen: u64,
    /// The reader: pages that brought records (the page: 0).
    pub pages: u64,
}

/// The page's own figures of a tail run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Page {
    #[serde(flatten)]
    pub reader: Reader,
    /// Rows in the DOM at the end, and the newest and oldest offsets among them.
    pub rows: u64,
    pub newest: Option<u64>,
    pub oldest: Option<u64>,
    /// Rows drawn in all (the rows in sight, drawn again each frame), and frames that showed
    /// new records.
    pub drawn: u64,
    pub frames: u64,
    pub heap_bytes: Option<f64>,
    pub heap_start_bytes: Option<f64>,
    /// The page's error box, empty when hidden.
    pub error: String,
    /// Seconds of the main thread by kind (`tasks`, `script`, `layout`, `style`) over
    /// `observed_seconds`, from the first POST until the figures were read.
    pub main_thread: std::collections::BTreeMap<String, f64>,
    pub observed_seconds: f64,
}

/// One run of the live tail.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Tail {
    pub produced: u64,
    pub produce_rate: f64,
    /// The most a POST was sent after its time, in ms.
    pub latest_send_ms: f64,
    pub first_offset: u64,
    pub last_offset: u64,
    pub page: Page,
    pub reader: Reader,
}

impl Tail {
    /// Whether the page kept up: it received every record, shows the newest rows with no gap,
    /// and showed the last within [`KEPT_UP_MS`] of its answer.
    pub fn kept_up(&self) -> bool {
        let page = &self.page;
        page.reader.received == self.produced
            && page.reader.gaps == 0
            && page.newest == Some(self.last_offset)
            && page.rows == self.produced.min(TAIL_MAX_ROWS)
            && page
                .reader
                .last_delay_ms
                .is_some_and(|delay| delay <= KEPT_UP_MS)
    }
}

/// The section.
#[derive(Debug, Clone, Default)]
pub struct Console {
    /// Chromium's version, as it says.
    pub browser: String,
    /// Seconds the [`TOPICS`] topics took to write (not in any figure).
    pub create_seconds: f64,
    /// Loads from the server of [`TOPICS`] topics, and from the one of one topic.
    pub many: Vec<Load>,
    pub one: Vec<Load>,
    pub tails: Vec<Tail>,
}

impl Console {
    /// The median of `figure` over `loads`.
    pub fn median_load(loads: &[Load], figure: impl Fn(&Load) -> Option<f64>) -> Option<f64> {
        let values: Vec<f64> = loads.iter().filter_map(figure).collect();
        (!values.is_empty()).then(|| crate::report::median(values))
    }

    /// The median over the tail runs of `figure` of a reader (`None`, the record never shown,
    /// counts as the longest).
    pub fn median_delay(&self, figure: impl Fn(&Tail) -> Option<f64>) -> Option<f64> {
        let values = self
            .tails
            .iter()
            .map(|tail| figure(tail).unwrap_or(f64::INFINITY));
        Some(crate::report::median(values.collect())).filter(|delay| delay.is_finite())
    }

    /// The tail run of median records received by the page.
    pub fn median_tail(&self) -> Option<&Tail> {
        let mut runs: Vec<&Tail> = self.tails.iter().collect();
        runs.sort_by_key(|tail| tail.page.reader.received);
        runs.get(runs.len() / 2).copied()
    }
}

/// The whole section, its servers in `dir`: [`LOADS`] loads of each server's console and
/// [`TAIL_RUNS`] tails fed [`RATE`] records/s of `payload` (fewer of both with `quick`).
pub fn run(binary: &Path, dir: &Path, payload: &str, quick: bool) -> Console {
    eprintln!("console");
    let (loads, tail_runs) = if quick { (3, 1) } else { (LOADS, TAIL_RUNS) };
    let mut section = Console {
        browser: chromium_version(),
        ..Console::default()
    };
    {
        let (_one, one) = server(binary, &dir.join("one"));
        let (_many, many) = server(binary, &dir.join("many"));
        program(&["create", &one, TOKEN, "1", payload]);
        let created = program(&["create", &many, TOKEN, &TOPICS.to_string(), payload]);
        section.create_seconds = created["seconds"].as_f64().unwrap_or_default();
        eprintln!(
            "  {TOPICS} topics written in {:.1} s",
            section.create_seconds
        );
        let loaded = program(&["paint", TOKEN, &loads.to_string(), &one, &many]);
        let loads = |name: &str| -> Vec<Load> {
            serde_json::from_value(loaded[name].clone())
                .unwrap_or_else(|err| panic!("the {name} loads: {err}: {loaded}"))
        };
        (section.one, section.many) = (loads("one"), loads("many"));
        for (name, loads, rows) in [
            ("1 topic", &section.one, 1),
            ("10^4 topics", &section.many, TOPICS_PAGE),
        ] {
            assert!(
                loads.iter().all(|load| load.rows == rows),
                "every load of {name} showed {rows} rows: {loads:?}"
            );
            let first_row = Console::median_load(loads, |load| Some(load.first_row_ms));
            let fcp = Console::median_load(loads, |load| load.fcp_ms);
            eprintln!(
                "  first topic row, {name}: {:.0} ms (median of {}), first-contentful-paint \
                 {:.0} ms",
                first_row.unwrap_or(f64::NAN),
                loads.len(),
                fcp.unwrap_or(f64::NAN)
            );
        }
    }

    let (_server, base) = server(binary, &dir.join("tail"));
    for run in 0..tail_runs {
        let summary = program(&[
            "tail",
            &base,
            TOKEN,
            &format!("tail-{run}"),
            &RATE.to_string(),
            &SECONDS.to_string(),
            &BATCH.to_string(),
            &GRACE_S.to_string(),
            payload,
        ]);
        let tail: Tail = serde_json::from_value(summary.clone())
            .unwrap_or_else(|err| panic!("the tail's figures: {err}: {summary}"));
        assert_eq!(tail.produced, RATE * SECONDS, "every record written");
        assert!(tail.page.drawn > 0, "the page showed rows: {summary}");
        let delay = |delay: Option<f64>| {
            delay.map_or_else(
                || format!("not within {GRACE_S} s"),
                |ms| format!("{ms:.0} ms"),
            )
        };
        eprintln!(
            "  tail at {:.0} records/s: the page received {} of {} ({} rows, {} gaps, the last \
             {} after its answer, heap {:.1} MiB); the reader {} ({} gaps, the last {})",
            tail.produce_rate,
            tail.page.reader.received,
            tail.produced,
            tail.page.rows,
            tail.page.reader.gaps,
            delay(tail.page.reader.last_delay_ms),
            tail.page.heap_bytes.unwrap_or_default() / 1048576.0,
            tail.reader.received,
            tail.reader.gaps,
            delay(tail.reader.last_delay_ms),
        );
        section.tails.push(tail);
    }
    section
}

/// The binary as the suite runs it, with [`TOKEN`], data in `dir`: the process, and its base
/// URL.
fn server(binary: &Path, dir: &Path) -> (Running, String) {
    std::fs::create_dir_all(dir).unwrap();
    let env = [("DURABILITY__SERVER__AUTH_TOKEN", OsStr::new(TOKEN))];
    let (running, address) = external::server_with(binary, dir, &env);
    (running, format!("http://{address}"))
}

/// `tests/console/bench_console.py` with `args`, to its end: its JSON line of figures.
fn program(args: &[&str]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/bench_console.py");
    let output = Command::new(python())
        .arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the Python of .venv-browser");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bench_console.py {} failed: {stderr}{stdout}",
        args[0]
    );
    // What the program noted without failing (the page not showing the last record in time).
    if !stderr.trim().is_empty() {
        eprintln!("  {}", stderr.trim());
    }
    stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("no figures from bench_console.py {}: {stdout}", args[0]))
}

/// `chromium --version`'s answer.
fn chromium_version() -> String {
    let output = Command::new(CHROMIUM).arg("--version").output();
    output
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .unwrap_or_default()
}
