//! Key files of the identity providers and channels the demo plays. A file holds the base64url
//! seed of one Ed25519 key, mode 0600; only its public half ever reaches the database.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::json;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use toolgate_core::token::Signer;

use crate::Result;

fn path(dir: &Path, kid: &str) -> Result<PathBuf> {
    if kid.is_empty() || !kid.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(format!("kid {kid:?}: use letters, digits, '-', '_' or '.'").into());
    }
    Ok(dir.join(format!("{kid}.key")))
}

/// Generate a new key `kid` in `dir`; refuses to overwrite one.
pub fn generate(dir: &Path, kid: &str) -> Result<Signer> {
    fs::create_dir_all(dir)?;
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| format!("no randomness: {e}"))?;
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path(dir, kid)?)?;
    file.write_all(URL_SAFE_NO_PAD.encode(seed).as_bytes())?;
    Ok(Signer::from_seed(kid, seed))
}

/// Load key `kid` from `dir`.
pub fn load(dir: &Path, kid: &str) -> Result<Signer> {
    let text = fs::read_to_string(path(dir, kid)?)?;
    let seed: [u8; 32] =
        URL_SAFE_NO_PAD.decode(text.trim())?.try_into().map_err(|_| format!("{kid}: a key file holds 32 bytes"))?;
    Ok(Signer::from_seed(kid, seed))
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// An identity token, as the tenant's identity provider would issue it.
pub fn identity(signer: &Signer, sub: &str, tenant: &str, role: &str, ttl: i64) -> String {
    let now = now();
    signer.sign(&json!({"sub": sub, "tenant": tenant, "role": role, "iat": now, "exp": now + ttl}))
}

/// A confirmation token, as the tenant's channel would sign what the person typed.
pub fn confirmation(signer: &Signer, proposal: &str, decision: &str, text: &str, at: i64, via: &str) -> String {
    signer.sign(&json!({
        "proposal": proposal, "decision": decision, "text": text, "at": at, "via": via, "exp": now() + 300
    }))
}
