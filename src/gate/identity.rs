//! Step 1: who is calling, from a verified Ed25519 token only (docs/architecture.md §3).
//!
//! A backend remembers the tokens whose signature it verified, keyed by the exact token text, so
//! an agent's repeated calls skip the Ed25519 check. Nothing else is skipped: every call still
//! checks the key row as it stands (a revoked or replaced key fails at once) and judges the
//! token's times on the wall clock.

use serde_json::json;
use std::cell::RefCell;
use std::collections::HashMap;
use toolgate_core::outcome::Rule;
use toolgate_core::token::{self, Clock, Identity, KeyPurpose, RegisteredKey, TokenError};

use super::{clock, Deny, Step};
use crate::config::{cached, Cache};
use crate::spi;

/// Verified tokens a backend keeps; past this, the expired ones go, then all.
const VERIFIED_LIMIT: usize = 4096;

struct Verified {
    identity: Identity,
    kid: String,
    public_key: [u8; 32],
}

thread_local! {
    static VERIFIED: RefCell<HashMap<String, Verified>> = RefCell::new(HashMap::new());
    static KEYS: RefCell<Cache<String, Option<RegisteredKey>>> = RefCell::new(Cache::new());
}

/// The key a `kid` names, active or not (a configuration row: see `config`).
pub fn registered_key(kid: &str) -> Option<RegisteredKey> {
    cached(&KEYS, kid.to_string(), || load_key(kid))
}

fn load_key(kid: &str) -> Option<RegisteredKey> {
    spi::latest("SELECT tenant_id, purpose, public_key, active FROM toolgate.keys WHERE kid = $1", &[kid.into()], |r| {
        let purpose: String = spi::col(r, 2)?;
        let bytes: Vec<u8> = spi::col(r, 3)?;
        Ok(RegisteredKey {
            tenant: spi::col(r, 1)?,
            purpose: KeyPurpose::parse(&purpose).unwrap_or(KeyPurpose::Identity),
            public_key: bytes.try_into().unwrap_or([0; 32]),
            active: spi::col(r, 4)?,
        })
    })
}

/// Why a token failed, as the audit may keep it.
pub fn refused(rule: Rule, e: TokenError) -> Deny {
    Deny::because(rule, json!({"reason": e.code()}))
}

/// A token this backend verified, if its key is still the one that verified it.
fn remembered(token: &str, clock: Clock) -> Option<Result<Identity, TokenError>> {
    let (kid, public_key, tenant) =
        VERIFIED.with_borrow(|v| v.get(token).map(|h| (h.kid.clone(), h.public_key, h.identity.tenant.clone())))?;
    let still = registered_key(&kid).is_some_and(|k| {
        k.active && k.purpose == KeyPurpose::Identity && k.public_key == public_key && k.tenant == tenant
    });
    if !still {
        VERIFIED.with_borrow_mut(|v| v.remove(token));
        return None;
    }
    VERIFIED.with_borrow(|v| {
        let identity = &v.get(token)?.identity;
        Some(token::judge_times(identity.exp, identity.iat, identity.nbf, clock).map(|()| identity.clone()))
    })
}

fn remember(token: &str, kid: String, key: &RegisteredKey, identity: &Identity, now: i64) {
    VERIFIED.with_borrow_mut(|v| {
        if v.len() >= VERIFIED_LIMIT {
            v.retain(|_, h| h.identity.exp > now);
            if v.len() >= VERIFIED_LIMIT {
                v.clear();
            }
        }
        v.insert(token.to_string(), Verified { identity: identity.clone(), kid, public_key: key.public_key });
    });
}

/// Verify an identity token.
pub fn verify(token: Option<&str>) -> Step<Identity> {
    let deny = |e| refused(Rule::IdentityInvalid, e);
    let clock = clock::tokens();
    if let Some(verdict) = token.and_then(|t| remembered(t, clock)) {
        return verdict.map_err(deny);
    }
    let kid = token::key_id(token).map_err(deny)?;
    let key = registered_key(&kid);
    let token = token.unwrap_or_default();
    let identity = token::verify_identity(token, key.as_ref(), clock).map_err(deny)?;
    if let Some(key) = &key {
        remember(token, kid, key, &identity, clock.now);
    }
    Ok(identity)
}
