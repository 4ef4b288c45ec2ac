//! The `durability` server: loads the configuration, then serves the REST API until Ctrl-C or
//! SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use actix_web::{App, HttpServer};
use durability::{Config, Log, http};

/// jemalloc: its size-class slabs keep a burst of partitions from fragmenting the heap the way
/// the system allocator does, and it hands freed memory back to the OS, so an idle server
/// returns near its starting size. It replaces `malloc` for the whole process (SQLite too).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read at its start: one background thread returns pages freed for a
/// second to the OS (without it, an idle process would keep them until its next allocation).
#[cfg(target_os = "linux")]
#[unsafe(export_name = "malloc_conf")]
static MALLOC_CONF: AllocatorSettings = AllocatorSettings(
    c"background_thread:true,max_background_threads:1,dirty_decay_ms:1000,muzzy_decay_ms:0"
        .as_ptr(),
);

/// A C string pointer jemalloc reads as `const char *malloc_conf`.
#[cfg(target_os = "linux")]
#[repr(transparent)]
struct AllocatorSettings(*const std::ffi::c_char);

// SAFETY: the pointer is to a static string, never written.
#[cfg(target_os = "linux")]
unsafe impl Sync for AllocatorSettings {}

const USAGE: &str = "\
durability: a partitioned, retained, append-only log served over HTTP

Usage: durability [--config FILE]

Options:
  --config FILE  settings overriding the built-in defaults (config/default.toml)
  -h, --help     print this help
  -V, --version  print the version

Environment variables DURABILITY__<SECTION>__<KEY> override both (e.g.
DURABILITY__SERVER__BIND=127.0.0.1:0). RUST_LOG sets the log level (default: info).";

/// What the command line asked for.
enum Command {
    Serve { config: Option<PathBuf> },
    Help,
    Version,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Command, String> {
    let mut config = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--config" => {
                config = Some(args.next().ok_or("--config needs a file")?.into());
            }
            other => match other.strip_prefix("--config=") {
                Some(file) => config = Some(file.into()),
                None => return Err(format!("unexpected argument {other:?}")),
            },
        }
    }
    Ok(Command::Serve { config })
}

fn main() -> ExitCode {
    let config_file = match parse_args(std::env::args().skip(1)) {
        Ok(Command::Serve { config }) => config,
        Ok(Command::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("durability {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let config = match Config::load(config_file.as_deref()) {
        Ok(config) => config,
        Err(err) => {
            eprintln!("error: invalid configuration: {err}");
            return ExitCode::from(2);
        }
    };
    log::info!("configuration: {:?}", config.redacted());
    raise_fd_limit();
    match actix_web::rt::System::new().block_on(serve(config)) {
        Ok(()) => {
            log::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Raises the soft limit of open files to the hard limit, as production servers do: every
/// connection holds one, and the default soft limit (often 1,024) is far below what the
/// operating system allows. Logs both limits; a failure is logged, not fatal.
fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return log::warn!(
                "cannot read the open-file limit: {}",
                std::io::Error::last_os_error()
            );
        }
        let soft = limit.rlim_cur;
        if soft < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return log::warn!(
                    "open-file limit: soft {soft}, hard {}; cannot raise the soft limit: {}",
                    limit.rlim_max,
                    std::io::Error::last_os_error()
                );
            }
        }
        log::info!(
            "open-file limit: soft {soft} raised to the hard limit {}",
            limit.rlim_max
        );
    }
}

/// Serves until a shutdown signal: SIGTERM and Ctrl-C alike stop accepting connections, answer
/// waiting long-polls at once, let the requests in flight finish (at most [`SHUTDOWN_GRACE`]),
/// then commit what the partitions have queued and close the volumes.
async fn serve(config: Config) -> std::io::Result<()> {
    let log = Log::open(config.clone()).map_err(|err| std::io::Error::other(err.to_string()))?;
    warn_if_cold_store_unreachable(&config).await;
    let served = log.clone();
    // One set of metrics for every worker, so a scrape sees the whole server.
    let metrics = durability::metrics::Metrics::new(log.cold_flushes(), log.partition_counters());
    let server = HttpServer::new(move || {
        App::new().configure(http::service_with_metrics(served.clone(), metrics.clone()))
    })
    .bind(&config.server.bind)
    .map_err(|err| {
        std::io::Error::new(
            err.kind(),
            format!("cannot listen on {}: {err}", config.server.bind),
        )
    })?;
    for address in server.addrs() {
        // Printed whatever RUST_LOG says, so scripts can find the port that was picked.
        println!("listening on http://{address}");
    }
    let server = server
        .shutdown_timeout(SHUTDOWN_GRACE.as_secs())
        .disable_signals()
        .run();
    let handle = server.handle();
    let stopper = log.clone();
    actix_web::rt::spawn(async move {
        shutdown_signal().await;
        log::info!("stopping: answering long-polls, finishing the requests in flight");
        stopper.release_waits();
        handle.stop(true).await;
    });
    let result = server.await;
    if let Err(err) = log.shutdown().await {
        log::error!("closing the partitions: {err}");
    }
    result
}

/// The longest a shutdown waits for requests in flight (long-polls answer at once) before it
/// drops their connections.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The first SIGINT (Ctrl-C) or SIGTERM: both stop the server gracefully.
async fn shutdown_signal() {
    use actix_web::rt::signal;
    #[cfg(unix)]
    {
        match signal::unix::signal(signal::unix::SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    _ = signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(err) => {
                log::warn!("cannot listen for SIGTERM, only Ctrl-C stops the server: {err}");
                let _ = signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = signal::ctrl_c().await;
}

/// The server starts without its cold store (hot data keeps flowing); it says so.
async fn warn_if_cold_store_unreachable(config: &Config) {
    let store = match config.cold.open() {
        Ok(Some(store)) => store,
        Ok(None) => return,
        Err(err) => return log::warn!("cold store unusable, retention cannot flush: {err}"),
    };
    let prefix = config.cold.prefix.clone();
    match actix_web::rt::time::timeout(std::time::Duration::from_secs(5), store.list(&prefix)).await
    {
        Ok(Ok(_)) => log::info!("cold store ({:?}) reachable", config.cold.kind),
        Ok(Err(err)) => log::warn!("cold store unreachable, retention will retry: {err}"),
        Err(_) => log::warn!("cold store did not answer within 5 s, retention will retry"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> impl Iterator<Item = String> {
        list.iter()
            .map(|arg| arg.to_string())
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// Both spellings of `--config` name the file; anything else is refused.
    #[test]
    fn parses_config_flag() {
        assert!(matches!(
            parse_args(args(&[])),
            Ok(Command::Serve { config: None })
        ));
        assert!(
            matches!(parse_args(args(&["--config", "a.toml"])), Ok(Command::Serve { config: Some(p) }) if p.as_os_str() == "a.toml")
        );
        assert!(
            matches!(parse_args(args(&["--config=b.toml"])), Ok(Command::Serve { config: Some(p) }) if p.as_os_str() == "b.toml")
        );
        assert!(parse_args(args(&["--config"])).is_err());
        assert!(parse_args(args(&["--bogus"])).is_err());
        assert!(matches!(parse_args(args(&["--help"])), Ok(Command::Help)));
    }
}
