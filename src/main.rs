//! The `durability` server: loads the configuration, then serves the REST API until Ctrl-C or
//! SIGTERM.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use actix_web::middleware::{Condition, Logger};
use actix_web::{App, HttpServer};
use clap::Parser;
use durability::cluster::{EXIT_LEASE_LOST, StopReason};
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

/// The command line.
#[derive(Parser)]
#[command(
    version,
    about = "durability: a partitioned, retained, append-only log served over HTTP",
    after_help = "Environment variables DURABILITY__<SECTION>__<KEY> override the file and the \
                  defaults (e.g. DURABILITY__SERVER__BIND=127.0.0.1:0). RUST_LOG sets the log \
                  level (default: info)."
)]
struct Args {
    /// Settings overriding the built-in defaults (config/default.toml).
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Checks the configuration (file, environment and defaults together, and that the data
    /// and cold folders can be created and written), prints the result and exits: 0 when it
    /// is valid, 2 when not.
    #[arg(long)]
    check_config: bool,
    /// With --check-config: also checks that the `[cold]` S3 bucket can be reached and honours
    /// the conditional writes replication relies on (If-None-Match and If-Match, with a probe
    /// object under replication.prefix, as a replicated server does at start); 2 when not.
    #[arg(long, requires = "check_config")]
    check_bucket: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

/// What to do instead of serving.
#[derive(clap::Subcommand)]
enum Command {
    /// Clears a volume's damage mark, so that it takes writes again at the next start, once its
    /// files are repaired or restored, or their loss is accepted. Records the time, who
    /// accepted and what in volume-N.sqlite-accepted. Run it with the server stopped.
    AcceptDamage {
        /// The volume's number: the N of volume-N.sqlite in the data folder.
        #[arg(long, value_name = "N")]
        volume: usize,
        /// Who accepts the damage, and why (recorded as given).
        #[arg(long, value_name = "WHO")]
        by: String,
    },
    /// Makes credentials for `[[auth.tokens]]`.
    Token {
        #[command(subcommand)]
        action: TokenAction,
    },
}

/// What `durability token` does.
#[derive(clap::Subcommand)]
enum TokenAction {
    /// Prints a fresh random token once (on standard error), to give to its holder, and the
    /// lines to add to the configuration (on standard output), which hold only its SHA-256.
    /// Needs no configuration.
    New {
        /// Who holds it, as logs and metrics name it.
        #[arg(long, value_name = "NAME")]
        name: String,
        /// What it may do, "PATTERN:PERMISSION,..." (at least one; repeat for more): a topic
        /// name or a prefix ending in *, and produce, consume, admin or metrics. For example
        /// 'orders.*:produce,consume'.
        #[arg(long = "grant", value_name = "GRANT", required = true)]
        grants: Vec<String>,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(Command::Token {
        action: TokenAction::New { name, grants },
    }) = &args.command
    {
        return new_token(name, grants);
    }
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(DEFAULT_LOG_FILTER))
        .init();
    let config = match Config::load(args.config.as_deref())
        .and_then(|config| config.check_folders().map(|()| config))
    {
        Ok(config) => config,
        Err(err) => {
            // Output nobody reads (a closed stderr, a pipe whose reader is gone) is lost, but
            // changes nothing else: `eprintln!` and `println!` would panic, exiting 101.
            let _ = writeln!(std::io::stderr(), "error: invalid configuration: {err}");
            return ExitCode::from(2);
        }
    };
    trust_s3_ca(&config);
    if args.check_config {
        if args.check_bucket
            && let Err(why) = config.check_bucket()
        {
            let _ = writeln!(std::io::stderr(), "error: {why}");
            return ExitCode::from(2);
        }
        let _ = writeln!(std::io::stdout(), "configuration is valid");
        if args.check_bucket {
            let _ = writeln!(
                std::io::stdout(),
                "bucket {} honours conditional writes (If-None-Match and If-Match)",
                config.cold.s3_bucket
            );
        }
        return ExitCode::SUCCESS;
    }
    if let Some(Command::AcceptDamage { volume, by }) = args.command {
        return accept_damage(&config, volume, &by);
    }
    log::info!("configuration: {:?}", config.redacted());
    raise_fd_limit();
    match actix_web::rt::System::new().block_on(serve(config)) {
        Ok(Served::Stopped) => {
            log::info!("stopped");
            ExitCode::SUCCESS
        }
        Ok(Served::LeaseLost(reason)) => {
            log::error!(
                "the node stopped serving ({reason}); exiting with {EXIT_LEASE_LOST} so that a \
                 new incarnation can join again"
            );
            ExitCode::from(EXIT_LEASE_LOST as u8)
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "error: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Makes the S3 client trust `cold.s3_ca_file`, the only way there is: rust-s3 takes no root
/// certificate, but the HTTP client it builds for each bucket trusts the file `SSL_CERT_FILE`
/// names besides the public roots (reqwest's native roots). Every HTTP client the process
/// builds after this call trusts it too.
fn trust_s3_ca(config: &Config) {
    if let Some(ca_file) = config.cold.s3_ca() {
        // SAFETY: writing the environment races only with another thread reading it outside
        // std's lock (C code calling getenv). None can: the runtime and the server's threads
        // start later, and the threads already running, jemalloc's background purger and
        // (with [server.tls]) the certificate watcher that validation started, never read it.
        unsafe { std::env::set_var("SSL_CERT_FILE", ca_file) };
    }
}

/// The `token new` command: 0 with the token and its configuration lines printed, 2 when the
/// name or a grant is not valid (nothing printed then).
fn new_token(name: &str, grants: &[String]) -> ExitCode {
    if name.trim().is_empty() {
        let _ = writeln!(std::io::stderr(), "error: --name must not be empty");
        return ExitCode::from(2);
    }
    for grant in grants {
        if let Err(why) = grant.parse::<durability::auth::Grant>() {
            let _ = writeln!(std::io::stderr(), "error: --grant {why}");
            return ExitCode::from(2);
        }
    }
    // Two version-4 UUIDs: 244 random bits from the system's generator.
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let hash = hex::encode(durability::auth::token_hash(&token));
    let quoted = |text: &str| toml::Value::String(text.to_owned()).to_string();
    let grants: Vec<String> = grants.iter().map(|grant| quoted(grant)).collect();
    // The token on standard error, the configuration lines alone on standard output, so that
    // `durability token new ... >> durability.toml` never writes the token into the file.
    let _ = writeln!(
        std::io::stderr(),
        "token for {name}, shown this once (give it to its holder, keep it secret):\n{token}"
    );
    let _ = writeln!(
        std::io::stdout(),
        "[[auth.tokens]]\nname = {}\nsha256 = \"{hash}\"\ngrants = [{}]",
        quoted(name),
        grants.join(", "),
    );
    ExitCode::SUCCESS
}

/// The `accept-damage` command: 0 when the mark was cleared, 1 when nothing was.
fn accept_damage(config: &Config, volume: usize, by: &str) -> ExitCode {
    let path = config
        .storage
        .data_dir
        .join(durability::store::Volume::file_name(volume));
    match durability::store::accept_damage(&path, by) {
        Ok(accepted) => {
            log::warn!(
                "{}: damage mark cleared: {}",
                path.display(),
                accepted.record
            );
            let _ = writeln!(std::io::stdout(), "{}", accepted.record);
            ExitCode::SUCCESS
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "error: {err}");
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

/// How serving ended.
enum Served {
    /// A shutdown signal stopped the server.
    Stopped,
    /// The node stopped serving for good (it may own nothing any more): the process exits at
    /// once with [`EXIT_LEASE_LOST`].
    LeaseLost(StopReason),
}

/// Serves until a shutdown signal: SIGTERM and Ctrl-C alike stop accepting connections, answer
/// waiting long-polls at once, let the requests in flight finish (at most [`SHUTDOWN_GRACE`]),
/// then commit what the partitions have queued and close the volumes. A cluster's node that
/// stopped serving ends it at once.
async fn serve(config: Config) -> std::io::Result<Served> {
    let log = Log::open(config.clone())
        .map_err(|err| std::io::Error::other(durability::error::with_causes(&err)))?;
    warn_if_cold_store_unreachable(&config).await;
    let served = log.clone();
    // One set of metrics for every worker, so a scrape sees the whole server.
    let metrics = http::metrics::Metrics::for_log(&log);
    // Without an access log the middleware is left out: it renders each request's line parts
    // before knowing that nothing will be written.
    let access_log = log::log_enabled!(target: ACCESS_LOG_TARGET, log::Level::Info);
    let server = HttpServer::new(move || {
        App::new()
            .wrap(Condition::new(
                access_log,
                Logger::new(ACCESS_LOG_FORMAT).log_target(ACCESS_LOG_TARGET),
            ))
            .configure(http::service_with_metrics(served.clone(), metrics.clone()))
    });
    let tls = &config.server.tls;
    let (server, certificate) = if tls.enabled() {
        let (tls_config, certificate) =
            durability::tls::server_config(&tls.cert_file, &tls.key_file, tls.client_ca())
                .map_err(std::io::Error::other)?;
        let bound = server.bind_rustls_0_23(&config.server.bind, tls_config);
        (bound, Some(certificate))
    } else {
        (server.bind(&config.server.bind), None)
    };
    let server = server.map_err(|err| {
        std::io::Error::new(
            err.kind(),
            format!("cannot listen on {}: {err}", config.server.bind),
        )
    })?;
    let scheme = if certificate.is_some() {
        "https"
    } else {
        "http"
    };
    for address in server.addrs() {
        // Printed whatever RUST_LOG says, so scripts can find the port that was picked.
        let _ = writeln!(std::io::stdout(), "listening on {scheme}://{address}");
    }
    let server = server
        .shutdown_timeout(SHUTDOWN_GRACE.as_secs())
        .disable_signals()
        .run();
    let handle = server.handle();
    actix_web::rt::spawn(reload_on_hangup(log.clone(), certificate));
    let stopper = log.clone();
    actix_web::rt::spawn(async move {
        shutdown_signal().await;
        log::info!("stopping: answering long-polls, finishing the requests in flight");
        stopper.release_waits();
        handle.stop(true).await;
    });
    let result = tokio::select! {
        result = server => result,
        reason = log.stopped() => return Ok(Served::LeaseLost(reason)),
    };
    if let Err(err) = log.shutdown().await {
        log::error!("closing the partitions: {err}");
    }
    result.map(|()| Served::Stopped)
}

/// The log filter without `RUST_LOG`: `info`, but the access log off (a line per request cost
/// a quarter of the throughput of small reads; `RUST_LOG=info` turns it on), and rustls'
/// warnings too: it warns of every TLS client that names the server by its IP address (curl
/// and wrk do), a line per connection.
const DEFAULT_LOG_FILTER: &str = "info,durability::access=off,rustls=error";

/// One access-log line per request: client, request line, status, body bytes, milliseconds.
const ACCESS_LOG_FORMAT: &str = r#"%a "%r" %s %b %Dms"#;
/// The access log's target, so `RUST_LOG` can set its level alone.
const ACCESS_LOG_TARGET: &str = "durability::access";

/// The longest a shutdown waits for requests in flight (long-polls answer at once) before it
/// drops their connections.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads the credentials (`auth.tokens_file` above all) and the TLS certificate anew on every
/// SIGHUP; a reload that fails keeps what is in force and says why.
async fn reload_on_hangup(log: Log, certificate: Option<Arc<durability::tls::Certificate>>) {
    #[cfg(unix)]
    {
        use actix_web::rt::signal::unix::{SignalKind, signal};
        let Ok(mut hangups) = signal(SignalKind::hangup()) else {
            return log::warn!("SIGHUP cannot be handled: files reload only when they change");
        };
        while hangups.recv().await.is_some() {
            if let Some(certificate) = &certificate {
                match certificate.reload() {
                    Ok(()) => log::info!("SIGHUP: certificate reloaded"),
                    Err(why) => {
                        log::warn!(
                            "SIGHUP: certificate not reloaded, the one in force stays: {why}"
                        )
                    }
                }
            }
            match log.reload_credentials() {
                Ok(count) => log::info!("SIGHUP: credentials reloaded, {count} in force"),
                Err(why) => {
                    log::warn!("SIGHUP: credentials not reloaded, those in force stay: {why}")
                }
            }
        }
    }
    #[cfg(not(unix))]
    drop((log, certificate));
}

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
    let store = match config.cold_store() {
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
    use clap::CommandFactory;

    use super::*;

    /// The command line is well formed (clap's own consistency checks).
    #[test]
    fn command_line_is_consistent() {
        Args::command().debug_assert();
    }

    /// Every spelling of `--config` names the file; `--check-config` is a flag, and
    /// `--check-bucket` one that only goes with it; anything else is refused.
    #[test]
    fn parses_config_flags() {
        let parse = |list: &[&str]| Args::try_parse_from(["durability"].iter().chain(list));
        let config = |list: &[&str]| parse(list).unwrap().config;
        assert_eq!(config(&[]), None);
        for spelling in [
            &["--config", "a.toml"][..],
            &["--config=a.toml"],
            &["-c", "a.toml"],
        ] {
            assert_eq!(config(spelling), Some(PathBuf::from("a.toml")));
        }
        assert!(parse(&["--check-config"]).unwrap().check_config);
        assert!(!parse(&[]).unwrap().check_config);
        let both = parse(&["--check-config", "--check-bucket"]).unwrap();
        assert!(both.check_config && both.check_bucket);
        assert!(!parse(&["--check-config"]).unwrap().check_bucket);
        assert!(
            parse(&["--check-bucket"]).is_err(),
            "--check-bucket goes with --check-config"
        );
        assert!(parse(&["--config"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
    }
}
