//! `toolgate confirm`: a person's answer, signed with the tenant's channel key (as `toolgate
//! confirmation` signs it), submitted to the gate with `toolgate.confirm`. Both tokens go to the
//! server as bind parameters, never in a statement's text, and are never printed or put in an error.

use serde_json::Value;
use std::fs;
use std::path::Path;

use crate::{db, Result};

/// Where the person's identity token is read when no file is named.
pub const IDENTITY_ENV: &str = "TOOLGATE_IDENTITY_TOKEN";
/// Where the database's conninfo or URL is read when no option names it.
pub const DATABASE_ENV: &str = "TOOLGATE_DATABASE_URL";

/// The person's identity token: the contents of `file`, or else `env` (the value of
/// [`IDENTITY_ENV`]; empty counts as unset), trimmed. Errors name the file, never the token.
pub fn identity_token(file: Option<&Path>, env: Option<String>) -> Result<String> {
    let token = match file {
        Some(path) => fs::read_to_string(path)
            .map_err(|e| format!("the identity token file {} is unreadable: {e}", path.display()))?,
        None => env.ok_or_else(|| format!("no identity token: give --identity-file or set {IDENTITY_ENV}"))?,
    };
    let token = token.trim();
    if token.is_empty() {
        return Err(match file {
            Some(path) => format!("the identity token file {} is empty", path.display()).into(),
            None => format!("no identity token: give --identity-file or set {IDENTITY_ENV}").into(),
        });
    }
    Ok(token.to_string())
}

/// The database's conninfo or URL: `option`, or else `env` (the value of [`DATABASE_ENV`]).
pub fn database(option: Option<String>, env: Option<String>) -> Result<String> {
    option
        .or(env)
        .filter(|d| !d.trim().is_empty())
        .ok_or_else(|| format!("no database: give --database or set {DATABASE_ENV}").into())
}

/// Connect to `conninfo` and run `toolgate.confirm(identity, confirmation)`: the gate's outcome.
pub async fn submit(conninfo: &str, identity: &str, confirmation: &str) -> Result<Value> {
    let client = db::connect_to(conninfo).await?;
    db::confirm(&client, identity, confirmation).await
}

/// The command's exit status for the gate's outcome: 0 if it is SUCCEEDED (a replay of a settled
/// confirmation included), 1 for any other (REJECTED, BLOCKED, CANCELLED, NEEDS_CONFIRMATION).
pub fn exit_status(reply: &Value) -> u8 {
    if reply["outcome"] == "SUCCEEDED" {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_succeeded_exits_zero() {
        assert_eq!(exit_status(&json!({"outcome": "SUCCEEDED", "result": {}})), 0);
        assert_eq!(exit_status(&json!({"outcome": "SUCCEEDED", "replayed": true})), 0);
        for outcome in ["REJECTED", "BLOCKED", "CANCELLED", "NEEDS_CONFIRMATION", "succeeded", ""] {
            assert_eq!(exit_status(&json!({"outcome": outcome})), 1, "{outcome}");
        }
        assert_eq!(exit_status(&json!({})), 1);
        assert_eq!(exit_status(&json!("SUCCEEDED")), 1);
    }

    #[test]
    fn identity_from_the_file_first_then_the_environment() {
        let dir = std::env::temp_dir().join(format!("toolgate-confirm-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("identity.jwt");
        fs::write(&file, "file.token.sig\n").unwrap();
        assert_eq!(identity_token(Some(&file), Some("env.token.sig".into())).unwrap(), "file.token.sig");
        assert_eq!(identity_token(None, Some(" env.token.sig\n".into())).unwrap(), "env.token.sig");

        // Errors say where the token was looked for and never what it is.
        let e = identity_token(None, None).unwrap_err().to_string();
        assert!(e.contains("--identity-file") && e.contains(IDENTITY_ENV), "{e}");
        assert!(identity_token(None, Some("  ".into())).is_err());
        fs::write(&file, "\n").unwrap();
        let e = identity_token(Some(&file), Some("env.token.sig".into())).unwrap_err().to_string();
        assert!(e.contains("empty") && !e.contains("env.token.sig"), "{e}");
        let missing = dir.join("missing.jwt");
        let e = identity_token(Some(&missing), None).unwrap_err().to_string();
        assert!(e.contains("missing.jwt"), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn database_from_the_option_first_then_the_environment() {
        assert_eq!(database(Some("host=/a".into()), Some("host=/b".into())).unwrap(), "host=/a");
        assert_eq!(database(None, Some("postgresql://u@h/d".into())).unwrap(), "postgresql://u@h/d");
        let e = database(None, None).unwrap_err().to_string();
        assert!(e.contains("--database") && e.contains(DATABASE_ENV), "{e}");
        assert!(database(None, Some(String::new())).is_err());
    }
}
