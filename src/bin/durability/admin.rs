//! The commands that maintain the server's credentials and files: `token new` and
//! `accept-damage`.

use std::io::Write;
use std::process::ExitCode;

use durability::Config;

/// The `token new` command: 0 with the token and its configuration lines printed, 2 when the
/// name or a grant is not valid (nothing printed then).
pub(crate) fn new_token(name: &str, grants: &[String]) -> ExitCode {
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
pub(crate) fn accept_damage(config: &Config, volume: usize, by: &str) -> ExitCode {
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
