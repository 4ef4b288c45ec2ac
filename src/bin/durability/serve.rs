//! Serving: the HTTP server over a [`Log`] until a shutdown signal, reloading credentials and
//! the certificate on SIGHUP.

use std::io::Write;
use std::sync::Arc;

use actix_web::middleware::{Condition, Logger};
use actix_web::{App, HttpServer};
use durability::cluster::StopReason;
use durability::{Config, Log, http};

/// Makes the S3 client trust `cold.s3_ca_file`, the only way there is: rust-s3 takes no root
/// certificate, but the HTTP client it builds for each bucket trusts the file `SSL_CERT_FILE`
/// names besides the public roots (reqwest's native roots). Every HTTP client the process
/// builds after this call trusts it too.
pub(crate) fn trust_s3_ca(config: &Config) {
    if let Some(ca_file) = config.cold.s3_ca() {
        // SAFETY: writing the environment races only with another thread reading it outside
        // std's lock (C code calling getenv). None can: the runtime and the server's threads
        // start later, and the threads already running, jemalloc's background purger and
        // (with [server.tls]) the certificate watcher that validation started, never read it.
        unsafe { std::env::set_var("SSL_CERT_FILE", ca_file) };
    }
}

/// Raises the soft limit of open files to the hard limit, as production servers do: every
/// connection holds one, and the default soft limit (often 1,024) is far below what the
/// operating system allows. Logs both limits; a failure is logged, not fatal.
pub(crate) fn raise_fd_limit() {
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
pub(crate) enum Served {
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
pub(crate) async fn serve(config: Config) -> std::io::Result<Served> {
    let log = Log::open(config.clone())
        .map_err(|err| std::io::Error::other(durability::error::with_causes(&err)))?;
    warn_if_cold_store_unreachable(&config).await;
    let served = log.clone();
    // One set of metrics for every worker, so a scrape sees the whole server.
    let metrics = http::metrics::Metrics::for_log(&log);
    // Without an access log the middleware is left out: it renders each request's line parts
    // before knowing that nothing will be written.
    let access_log = log::log_enabled!(target: ACCESS_LOG_TARGET, log::Level::Info);
    let served_metrics = metrics.clone();
    let server = HttpServer::new(move || {
        App::new()
            .wrap(Condition::new(
                access_log,
                Logger::new(ACCESS_LOG_FORMAT).log_target(ACCESS_LOG_TARGET),
            ))
            .configure(http::service_with_metrics(
                served.clone(),
                served_metrics.clone(),
            ))
    });
    let tls = &config.server.tls;
    let (server, certificate, kafka_tls) = if tls.enabled() {
        let (tls_config, certificate) =
            durability::tls::server_config(&tls.cert_file, &tls.key_file, tls.client_ca())
                .map_err(std::io::Error::other)?;
        // The Kafka listener speaks TLS with the same certificate (reloaded with it).
        let kafka_tls = Arc::new(tls_config.clone());
        let bound = server.bind_rustls_0_23(&config.server.bind, tls_config);
        (bound, Some(certificate), Some(kafka_tls))
    } else {
        (server.bind(&config.server.bind), None, None)
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
    if config.kafka.enabled() {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let kafka =
            durability::kafka::listen(log.clone(), metrics.clone(), kafka_tls, threads).await?;
        let _ = writeln!(
            std::io::stdout(),
            "kafka listening on {} (advertised as {})",
            kafka.address(),
            kafka.advertised()
        );
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
pub(crate) const DEFAULT_LOG_FILTER: &str = "info,durability::access=off,rustls=error";

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
