//! `[auth]`: the credentials the server knows besides `server.auth_token`, each a token's
//! SHA-256 with the grants of topics it holds (see `auth.rs`).

use std::path::PathBuf;

use serde::Deserialize;

use super::ConfigError;
use crate::auth::{Credentials, Grant, Principal, TokenHash, token_hash};

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// `[[auth.tokens]]`: the scoped credentials. Default: none.
    pub tokens: Vec<TokenSettings>,
    /// A file of more `[[auth.tokens]]`, read again on SIGHUP and whenever it changes: a token
    /// is added or removed without a restart. Empty: none. Default: empty.
    pub tokens_file: PathBuf,
    /// Whether `GET /metrics` answers without a token. Default: false.
    pub metrics_public: bool,
}

/// One `[[auth.tokens]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSettings {
    /// Who holds it, in logs and metrics (never the token).
    pub name: String,
    /// The hex SHA-256 of the token (the configuration never holds the token itself).
    pub sha256: String,
    /// What it may do: `"PATTERN:PERMISSION,..."`, a pattern being a topic name or a prefix
    /// ending in `*`, a permission `produce`, `consume`, `admin` or `metrics`.
    pub grants: Vec<String>,
}

impl AuthSettings {
    pub(super) fn validate(&self, auth_token: &str) -> Result<(), ConfigError> {
        self.credentials(auth_token).map(drop)
    }

    /// Every credential: the `[[auth.tokens]]`, and `auth_token` (`server.auth_token`), if
    /// set, as one token with every permission.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming the token at fault: a hash that is not 64 hex
    /// digits, a grant that does not parse, a name or a hash given twice.
    pub fn credentials(&self, auth_token: &str) -> Result<Credentials, ConfigError> {
        let from_file = self.file_tokens()?;
        let mut credentials = Credentials::none();
        let mut names = std::collections::BTreeSet::new();
        let inline = self
            .tokens
            .iter()
            .enumerate()
            .map(|(n, token)| (format!("auth.tokens[{n}]"), token));
        let file = self.tokens_file.display();
        let listed = from_file.iter().enumerate().map(|(n, token)| {
            (
                format!("auth.tokens_file ({file}): auth.tokens[{n}]"),
                token,
            )
        });
        for (at, token) in inline.chain(listed) {
            let key = |field: &str| format!("{at}.{field}");
            if token.name.is_empty() || !names.insert(token.name.as_str()) {
                return Err(ConfigError::invalid(
                    key("name"),
                    format!("{:?} is empty or names two tokens", token.name),
                ));
            }
            let hash = parse_hash(&token.sha256).ok_or_else(|| {
                ConfigError::invalid(
                    key("sha256"),
                    "must be the 64 hex digits of the token's SHA-256",
                )
            })?;
            let grants = token
                .grants
                .iter()
                .map(|grant| grant.parse::<Grant>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|why| ConfigError::invalid(key("grants"), why))?;
            if !credentials.add(hash, Principal::new(&token.name, grants)) {
                return Err(ConfigError::invalid(
                    key("sha256"),
                    "is the hash of another token's too",
                ));
            }
        }
        if !auth_token.is_empty()
            && !credentials.add(
                token_hash(auth_token),
                Principal::with_every_permission("server.auth_token"),
            )
        {
            return Err(ConfigError::invalid(
                "server.auth_token",
                "is a token of [[auth.tokens]] too",
            ));
        }
        Ok(credentials)
    }

    /// The tokens of `tokens_file` (none when it is not set).
    fn file_tokens(&self) -> Result<Vec<TokenSettings>, ConfigError> {
        /// A tokens file: `[[auth.tokens]]` and nothing else.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct TokensFile {
            #[serde(default)]
            auth: Option<FileAuth>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct FileAuth {
            tokens: Vec<TokenSettings>,
        }
        if self.tokens_file.as_os_str().is_empty() {
            return Ok(Vec::new());
        }
        let file = self.tokens_file.display();
        let refused =
            |why: String| ConfigError::invalid("auth.tokens_file", format!("{file}: {why}"));
        let text =
            std::fs::read_to_string(&self.tokens_file).map_err(|err| refused(err.to_string()))?;
        // The parser's message may quote the file, which holds no secret (hashes only).
        let parsed: TokensFile = toml::from_str(&text).map_err(|err| refused(err.to_string()))?;
        Ok(parsed.auth.map(|auth| auth.tokens).unwrap_or_default())
    }
}

/// The hash `hex` spells, if it is 64 hex digits.
fn parse_hash(hex: &str) -> Option<TokenHash> {
    let mut hash = TokenHash::default();
    hex::decode_to_slice(hex, &mut hash).ok()?;
    Some(hash)
}
