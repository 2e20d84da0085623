//! The server's configuration, from its environment. Nothing here decides anything: it says where
//! the gate is, who calls it, and how the person's answers are signed.

use std::fs;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};
use toolgate_core::token::Signer;

/// The longest the server waits for the person's answer unless `TOOLGATE_CONFIRM_WAIT` says.
pub const DEFAULT_CONFIRM_WAIT: Duration = Duration::from_secs(300);

/// What `toolgate mcp` reads from its environment.
pub struct Config {
    /// `TOOLGATE_DATABASE_URL`: the application login's conninfo or URL.
    pub database: tokio_postgres::Config,
    /// `TOOLGATE_IDENTITY_TOKEN_FILE` or `TOOLGATE_IDENTITY_TOKEN`.
    pub identity: Identity,
    /// `TOOLGATE_CHANNEL_KEY_FILE` and `TOOLGATE_CHANNEL_KID`: without it the server never confirms.
    pub channel: Option<Signer>,
    /// `TOOLGATE_CONVERSATION`, or one fresh id per process. Never a tool argument.
    pub conversation: String,
    /// `TOOLGATE_CONFIRM_WAIT` (seconds).
    pub confirm_wait: Duration,
    /// `TOOLGATE_CHANNEL_MESSAGE_FILE`: where the gateway appends the channel-signed answers of
    /// the person, one compact JWS a line, the newest last.
    pub message_file: Option<PathBuf>,
}

impl Config {
    /// The configuration of the process's environment.
    pub fn from_env() -> Result<Config, String> {
        Config::from_lookup(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// The configuration `var` gives (an unset or empty variable: `None`).
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let url = var("TOOLGATE_DATABASE_URL").ok_or("TOOLGATE_DATABASE_URL is not set")?;
        let mut database = tokio_postgres::Config::from_str(&url)
            .map_err(|e| format!("TOOLGATE_DATABASE_URL is not a libpq conninfo or URL: {e}"))?;
        if database.get_application_name().is_none() {
            database.application_name("toolgate-mcp");
        }
        let identity = match (var("TOOLGATE_IDENTITY_TOKEN_FILE"), var("TOOLGATE_IDENTITY_TOKEN")) {
            (Some(file), _) => Identity::File { path: PathBuf::from(file), cached: Mutex::new(None) },
            (None, Some(token)) => Identity::Token(token.trim().to_string()),
            (None, None) => return Err("set TOOLGATE_IDENTITY_TOKEN_FILE or TOOLGATE_IDENTITY_TOKEN".into()),
        };
        let channel = match (var("TOOLGATE_CHANNEL_KEY_FILE"), var("TOOLGATE_CHANNEL_KID")) {
            (Some(file), Some(kid)) => {
                let text = fs::read_to_string(&file).map_err(|e| format!("TOOLGATE_CHANNEL_KEY_FILE {file}: {e}"))?;
                Some(Signer::from_key_text(&kid, &text)?)
            }
            (None, None) => None,
            _ => return Err("TOOLGATE_CHANNEL_KEY_FILE and TOOLGATE_CHANNEL_KID go together".into()),
        };
        let conversation = match var("TOOLGATE_CONVERSATION") {
            Some(c) => c,
            None => fresh_conversation()?,
        };
        let confirm_wait = match var("TOOLGATE_CONFIRM_WAIT") {
            Some(s) => Duration::from_secs(
                s.trim().parse().map_err(|_| format!("TOOLGATE_CONFIRM_WAIT {s:?}: a whole number of seconds"))?,
            ),
            None => DEFAULT_CONFIRM_WAIT,
        };
        let message_file = var("TOOLGATE_CHANNEL_MESSAGE_FILE").map(PathBuf::from);
        Ok(Config { database, identity, channel, conversation, confirm_wait, message_file })
    }
}

/// One fresh conversation id: `mcp-` and 32 random hex digits.
fn fresh_conversation() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness: {e}"))?;
    Ok(format!("mcp-{}", bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// Where the caller's identity token comes from.
pub enum Identity {
    Token(String),
    /// A file a sidecar refreshes: read again whenever its modification time or length changes.
    File {
        path: PathBuf,
        cached: Mutex<Option<(SystemTime, u64, String)>>,
    },
}

impl Identity {
    /// The token to send now. The error names the file, never the token.
    pub fn token(&self) -> Result<String, String> {
        match self {
            Identity::Token(t) => Ok(t.clone()),
            Identity::File { path, cached } => {
                let unreadable =
                    |e: std::io::Error| format!("the identity token file {} is unreadable: {e}", path.display());
                let meta = fs::metadata(path).map_err(unreadable)?;
                let stamp = (meta.modified().map_err(unreadable)?, meta.len());
                let mut cached = cached.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((modified, len, token)) = cached.as_ref() {
                    if (*modified, *len) == stamp {
                        return Ok(token.clone());
                    }
                }
                let token = fs::read_to_string(path).map_err(unreadable)?.trim().to_string();
                *cached = Some((stamp.0, stamp.1, token.clone()));
                Ok(token)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<Config, String> {
        let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| vars.get(k).cloned())
    }

    #[test]
    fn conninfo_and_url_both_parse() {
        let c = config(&[
            ("TOOLGATE_DATABASE_URL", "host=/tmp/x/socket port=5433 user=toolgate_app dbname=lab"),
            ("TOOLGATE_IDENTITY_TOKEN", "t"),
        ])
        .unwrap();
        assert_eq!(c.database.get_ports(), &[5433]);
        assert_eq!(c.database.get_user(), Some("toolgate_app"));
        assert_eq!(c.database.get_application_name(), Some("toolgate-mcp"));
        assert!(c.conversation.starts_with("mcp-") && c.conversation.len() == 36);
        assert_eq!(c.confirm_wait, DEFAULT_CONFIRM_WAIT);
        assert!(c.channel.is_none() && c.message_file.is_none());
        let c = config(&[
            ("TOOLGATE_DATABASE_URL", "postgresql://toolgate_app@localhost:5434/lab"),
            ("TOOLGATE_IDENTITY_TOKEN", "t"),
            ("TOOLGATE_CONVERSATION", "conv-1"),
            ("TOOLGATE_CONFIRM_WAIT", "7"),
        ])
        .unwrap();
        assert_eq!(c.database.get_dbname(), Some("lab"));
        assert_eq!(c.conversation, "conv-1");
        assert_eq!(c.confirm_wait, Duration::from_secs(7));
    }

    #[test]
    fn what_is_missing_is_named() {
        assert!(config(&[]).err().unwrap().contains("TOOLGATE_DATABASE_URL"));
        let e = config(&[("TOOLGATE_DATABASE_URL", "host=/tmp")]).err().unwrap();
        assert!(e.contains("TOOLGATE_IDENTITY_TOKEN"), "{e}");
        let e = config(&[
            ("TOOLGATE_DATABASE_URL", "host=/tmp"),
            ("TOOLGATE_IDENTITY_TOKEN", "t"),
            ("TOOLGATE_CHANNEL_KID", "chan-a"),
        ])
        .err()
        .unwrap();
        assert!(e.contains("go together"), "{e}");
    }

    #[test]
    fn a_token_file_is_read_again_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("toolgate-mcp-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("identity");
        fs::write(&file, "first\n").unwrap();
        let identity = Identity::File { path: file.clone(), cached: Mutex::new(None) };
        assert_eq!(identity.token().unwrap(), "first");
        fs::write(&file, "second-token\n").unwrap();
        assert_eq!(identity.token().unwrap(), "second-token");
        fs::remove_file(&file).unwrap();
        assert!(identity.token().unwrap_err().contains("unreadable"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
