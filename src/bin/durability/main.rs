//! The `durability` binary: the server (loads the configuration, then serves the REST API until
//! Ctrl-C or SIGTERM: `serve.rs`), the commands that maintain its files and credentials
//! (`admin.rs`), and the client commands, which talk to a server through
//! [`durability::client`] (`produce.rs`, `consume.rs`, `inspect.rs`, `groups.rs`,
//! `lease.rs`; their shared flags and exit codes in `remote.rs`).

mod admin;
mod consume;
mod groups;
mod inspect;
mod lease;
mod produce;
mod remote;
mod serve;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use durability::Config;
use durability::cluster::EXIT_LEASE_LOST;

use admin::{accept_damage, new_token};
use serve::{DEFAULT_LOG_FILTER, Served, raise_fd_limit, serve, trust_s3_ca};

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
    /// Serves (what `durability` alone does).
    Serve,
    /// Sends JSON lines (standard input, or files) to a topic, in batches; prints where each
    /// went (partition:offset). Exit codes: 0 done, 1 the server refused, 2 a bad line or
    /// argument, 3 no server reached.
    Produce(produce::Produce),
    /// Prints a topic's records and follows new ones (`-e`: until the end). Exit codes as
    /// `produce`.
    #[command(visible_alias = "tail")]
    Consume(consume::Consume),
    /// Lists the topics, or describes one: its partitions' offsets and its groups' cursors.
    Topics(inspect::Topics),
    /// Shows a cluster's members and the volumes each owns.
    Cluster(inspect::ClusterView),
    /// Shows a topic's consumer groups, each one's cursor and lag per partition; `--reset-to`
    /// moves one group's cursors (after asking, or with `--yes`). Exit codes as `produce`.
    Groups(groups::Groups),
    /// Claims a range of a group's records, or acks, nacks or extends one (one JSON line per
    /// answer, for scripts). Exit codes as `produce`.
    Lease(lease::Lease),
    /// Prints the shell's completion script, e.g. `durability completions bash >
    /// /etc/bash_completion.d/durability`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Prints the manual page (roff), e.g. `durability man | man -l -`.
    Man,
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
    // The client commands need no configuration of a server.
    let command = match args.command {
        Some(Command::Produce(produce)) => return remote::run(produce.run()),
        Some(Command::Consume(consume)) => return remote::run(consume.run()),
        Some(Command::Topics(topics)) => return remote::run(topics.run()),
        Some(Command::Cluster(cluster)) => return remote::run(cluster.run()),
        Some(Command::Groups(groups)) => return remote::run(groups.run()),
        Some(Command::Lease(lease)) => return remote::run(lease.run()),
        Some(Command::Completions { shell }) => {
            let mut command = Args::command();
            clap_complete::generate(shell, &mut command, "durability", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Some(Command::Man) => {
            let page = clap_mangen::Man::new(Args::command()).render(&mut std::io::stdout());
            return if page.is_ok() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        other => other,
    };
    if let Some(Command::Token {
        action: TokenAction::New { name, grants },
    }) = &command
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
    if let Some(Command::AcceptDamage { volume, by }) = command {
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

#[cfg(test)]
mod tests {
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
