//! Step 1: who is calling, from a verified Ed25519 token only (DESIGN §3).

use serde_json::json;
use toolgate_core::outcome::Rule;
use toolgate_core::token::{self, Identity, KeyPurpose, RegisteredKey, TokenError};

use super::{clock, Deny, Step};
use crate::spi;

/// The key a `kid` names, active or not.
pub fn registered_key(kid: &str) -> Option<RegisteredKey> {
    spi::one(
        "SELECT tenant_id, purpose, public_key, active FROM toolgate.keys WHERE kid = $1",
        &[kid.into()],
        |r| {
            let purpose: String = spi::col(r, 2)?;
            let bytes: Vec<u8> = spi::col(r, 3)?;
            Ok(RegisteredKey {
                tenant: spi::col(r, 1)?,
                purpose: KeyPurpose::parse(&purpose).unwrap_or(KeyPurpose::Identity),
                public_key: bytes.try_into().unwrap_or([0; 32]),
                active: spi::col(r, 4)?,
            })
        },
    )
}

/// Why a token failed, as the audit may keep it.
pub fn refused(rule: Rule, e: TokenError) -> Deny {
    Deny::because(rule, json!({"reason": e.code()}))
}

/// Verify an identity token.
pub fn verify(token: Option<&str>) -> Step<Identity> {
    let deny = |e| refused(Rule::IdentityInvalid, e);
    let kid = token::key_id(token).map_err(deny)?;
    let key = registered_key(&kid);
    token::verify_identity(token.unwrap_or_default(), key.as_ref(), clock::now()).map_err(deny)
}
