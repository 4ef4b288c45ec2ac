//! The `durability` server: loads the configuration, then serves the REST API until Ctrl-C or
//! SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use actix_web::{App, HttpServer, web};
use durability::{Config, http};

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

/// Serves until a shutdown signal: SIGTERM and Ctrl-C stop accepting connections and let
/// in-flight requests finish.
async fn serve(config: Config) -> std::io::Result<()> {
    std::fs::create_dir_all(&config.storage.data_dir).map_err(|err| {
        std::io::Error::new(
            err.kind(),
            format!(
                "cannot create storage.data_dir {}: {err}",
                config.storage.data_dir.display()
            ),
        )
    })?;
    let body_limit = config.server.max_body_bytes;
    let server = HttpServer::new(move || {
        App::new()
            .app_data(web::JsonConfig::default().limit(body_limit))
            .configure(http::configure)
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
    server.shutdown_timeout(30).run().await
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
