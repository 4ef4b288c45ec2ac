//! What every command that talks to a server shares: where the server is and who asks
//! (`--url`, `--token`, `--ca-file`), how answers are shown (`--output`), and the exit codes.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use durability::client::{Client, ClientError};

/// The exit codes of the client commands.
pub(crate) mod exit {
    /// The server refused (a 4xx, or a 5xx once retries were spent).
    pub(crate) const REFUSED: u8 = 1;
    /// The command line or its input is wrong (clap exits 2 for usage errors too).
    pub(crate) const USAGE: u8 = 2;
    /// No server could be reached.
    pub(crate) const UNREACHABLE: u8 = 3;
}

/// Where the server is and who asks.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Remote {
    /// The server's URL, or a cluster's nodes' URLs, comma-separated.
    #[arg(
        long,
        env = "DURABILITY_URL",
        default_value = "http://127.0.0.1:8080",
        value_delimiter = ','
    )]
    url: Vec<String>,
    /// The bearer token (never shown).
    #[arg(long, env = "DURABILITY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The CA (PEM) that signed the server's certificate, for an https URL with a private CA.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// How answers are shown.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub(crate) output: Output,
}

/// How answers are shown.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// Columns for people.
    Table,
    /// JSON, one document per answer, for programs.
    Json,
}

impl Remote {
    /// The client these flags describe.
    pub(crate) fn client(&self) -> Result<Client, ClientError> {
        let mut builder = Client::builder(self.url.iter().map(|url| url.trim().to_owned()));
        if let Some(token) = &self.token {
            builder = builder.token(token);
        }
        if let Some(ca_file) = &self.ca_file {
            builder = builder.ca_file(ca_file);
        }
        builder.build()
    }
}

/// Runs `command` on a runtime of its own: what it printed is its own business; an error is
/// reported on standard error and chooses the exit code.
pub(crate) fn run(command: impl Future<Output = Result<(), Failure>>) -> ExitCode {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the command");
    match runtime.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) if failure.code == 0 => ExitCode::SUCCESS,
        Err(failure) => {
            let _ = writeln!(std::io::stderr(), "error: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// Why a command failed: its message and exit code (0: it stopped early, as it should, because
/// nobody reads its output any more).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) code: u8,
}

impl Failure {
    /// A fault of the command line or its input.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: exit::USAGE,
        }
    }
}

impl From<ClientError> for Failure {
    fn from(error: ClientError) -> Self {
        let code = match error {
            ClientError::Unreachable { .. } => exit::UNREACHABLE,
            ClientError::Invalid(_) => exit::USAGE,
            _ => exit::REFUSED,
        };
        Self {
            message: error.to_string(),
            code,
        }
    }
}

impl From<std::io::Error> for Failure {
    /// Output nobody reads any more (a closed pipe: `| head`) ends the command quietly; other
    /// I/O faults are the input's.
    fn from(error: std::io::Error) -> Self {
        let code = if error.kind() == std::io::ErrorKind::BrokenPipe {
            0
        } else {
            exit::USAGE
        };
        Self {
            message: error.to_string(),
            code,
        }
    }
}
