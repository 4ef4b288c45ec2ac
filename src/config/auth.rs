//! `[auth]`: the credentials the server knows besides `server.auth_token`, each a token's
//! SHA-256 with the grants of topics it holds (see `auth.rs`).

use serde::Deserialize;

use super::ConfigError;
use crate::auth::{Credentials, Grant, Principal, TokenHash, token_hash};

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSettings {
    /// `[[auth.tokens]]`: the scoped credentials. Default: none.
    pub tokens: Vec<TokenSettings>,
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
        let mut credentials = Credentials::none();
        let mut names = std::collections::BTreeSet::new();
        for (n, token) in self.tokens.iter().enumerate() {
            let key = |field: &str| format!("auth.tokens[{n}].{field}");
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
}

/// The hash `hex` spells, if it is 64 hex digits.
fn parse_hash(hex: &str) -> Option<TokenHash> {
    let mut hash = TokenHash::default();
    hex::decode_to_slice(hex, &mut hash).ok()?;
    Some(hash)
}
