//! Key files of the identity providers and channels the demo plays. A file holds one Ed25519
//! private key in PKCS#8 PEM (what `openssl genpkey -algorithm ed25519` writes), mode 0600; files
//! of the older format, the base64url of the 32-byte seed, are still read. Only the public half
//! ever reaches the database.

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
    let signer = Signer::from_seed(kid, seed);
    let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(path(dir, kid)?)?;
    file.write_all(signer.to_pkcs8_pem().as_bytes())?;
    Ok(signer)
}

/// Load key `kid` from `dir` (PKCS#8 PEM, or the older base64url seed).
pub fn load(dir: &Path, kid: &str) -> Result<Signer> {
    let text = fs::read_to_string(path(dir, kid)?)?;
    Ok(Signer::from_key_text(kid, &text)?)
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// An identity token, as the tenant's identity provider would issue it.
pub fn identity(signer: &Signer, sub: &str, tenant: &str, role: &str, ttl: i64) -> String {
    identity_for(signer, sub, tenant, role, ttl, &[])
}

/// An identity token issued for `aud` (none: no `aud` claim; one: a string; more: an array).
pub fn identity_for(signer: &Signer, sub: &str, tenant: &str, role: &str, ttl: i64, aud: &[String]) -> String {
    let now = now();
    let mut claims = json!({"sub": sub, "tenant": tenant, "role": role, "iat": now, "exp": now + ttl});
    match aud {
        [] => {}
        [one] => claims["aud"] = json!(one),
        many => claims["aud"] = json!(many),
    }
    signer.sign(&claims)
}

/// A token of arbitrary `claims` (a JSON object) with `iat` and `exp` set, as an OpenID
/// provider would issue it.
pub fn token(signer: &Signer, claims: serde_json::Value, ttl: i64) -> Result<String> {
    let serde_json::Value::Object(mut claims) = claims else {
        return Err("claims: a JSON object".into());
    };
    let now = now();
    claims.insert("iat".into(), json!(now));
    claims.insert("exp".into(), json!(now + ttl));
    Ok(signer.sign(&claims))
}

/// A confirmation token, as the tenant's channel would sign what the person typed.
pub fn confirmation(signer: &Signer, proposal: &str, decision: &str, text: &str, at: i64, via: &str) -> String {
    signer.sign(&json!({
        "proposal": proposal, "decision": decision, "text": text, "at": at, "via": via, "exp": now() + 300
    }))
}
