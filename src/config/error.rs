//! [`ConfigError`]: why a configuration was refused, naming the file or key at fault.

use std::path::PathBuf;

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        message: String,
    },
    /// The file is not valid TOML. The message never quotes the file's text, which may hold a
    /// secret: the line and column say where the parser stopped.
    #[error("{source_name} is not valid TOML{}: {message}", position(*.line, *.column))]
    Syntax {
        /// The file or variable that failed to parse.
        source_name: String,
        /// The line (from 1) where the parser stopped, when it says.
        line: Option<usize>,
        /// The column (from 1, in characters) where the parser stopped, when it says.
        column: Option<usize>,
        /// The parser's message (what it found and expected, without the text).
        message: String,
    },
    /// A key that does not exist.
    #[error("{key}: unknown key (from {source_name})")]
    UnknownKey {
        /// The key's TOML path.
        key: String,
        /// Where it came from.
        source_name: String,
    },
    /// A key with a value it cannot take.
    #[error("{key}: {message}")]
    InvalidValue {
        /// The key's TOML path.
        key: String,
        /// What is wrong with the value.
        message: String,
    },
}

/// `" at line L, column C"` for a syntax error's position, or nothing when it is unknown.
fn position(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        (Some(line), None) => format!(" at line {line}"),
        _ => String::new(),
    }
}

impl ConfigError {
    pub(super) fn invalid(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidValue {
            key: key.into(),
            message: message.into(),
        }
    }
}
