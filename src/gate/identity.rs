//! Step 1: who is calling, from a verified token only (docs/architecture.md §3).
//!
//! Two kinds of identity token: one whose payload names an `iss` is verified against that
//! registered issuer's JWKS, audiences and claim mapping (`toolgate.issuers`,
//! `toolgate.tenant_issuers`); one without is verified against the Ed25519 key its `kid` names in
//! `toolgate.keys`. A backend remembers the tokens whose signature it verified, keyed by the exact
//! token text, so an agent's repeated calls skip the signature check. Nothing else is skipped:
//! every call still checks the key row or issuer registration as it stands (a revoked key, a
//! rotated JWKS, a changed mapping fail or re-verify at once) and judges the token's times on the
//! wall clock.

use pgrx::prelude::*;
use serde_json::json;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use toolgate_core::issuer::{self, Issuer};
use toolgate_core::outcome::Rule;
use toolgate_core::token::{self, Clock, Identity, KeyPurpose, RegisteredKey, TokenError};

use super::step::{clock, Deny, Step};
use crate::config::{cached, Cache};
use crate::error::AdminError;
use crate::spi;

/// Verified tokens a backend keeps; past this, the expired ones go, then all.
const VERIFIED_LIMIT: usize = 4096;

/// What verified a remembered token: a key row as it was, or an issuer registration as loaded.
#[derive(Clone)]
enum Source {
    Key { kid: String, public_key: [u8; 32] },
    Issuer { iss: String, config: Rc<IssuerConfig> },
}

struct Verified {
    identity: Identity,
    source: Source,
}

/// A registered issuer as a backend loaded it: its keys and checks, and its tenant claim's values
/// with the tenant each means.
pub struct IssuerConfig {
    issuer: Issuer,
    tenants: HashMap<String, String>,
}

thread_local! {
    static VERIFIED: RefCell<HashMap<String, Verified>> = RefCell::new(HashMap::new());
    static KEYS: RefCell<Cache<String, Option<RegisteredKey>>> = RefCell::new(Cache::new());
    static ISSUERS: RefCell<Cache<String, Option<Rc<IssuerConfig>>>> = RefCell::new(Cache::new());
}

/// The issuer registered for an `iss` (a configuration row: see `config`). Every load is a new
/// `Rc`, so a token remembered under an older load is verified again.
fn registered_issuer(iss: &str) -> Option<Rc<IssuerConfig>> {
    cached(&ISSUERS, iss.to_string(), || load_issuer(iss))
}

fn load_issuer(iss: &str) -> Option<Rc<IssuerConfig>> {
    spi::latest(
        "SELECT i.audiences, i.jwks::text, i.tenant_claim, i.actor_claim, i.roles_claim,
                (SELECT COALESCE(pg_catalog.jsonb_object_agg(t.claim_value, t.tenant_id), '{}'::jsonb)::text
                   FROM toolgate.tenant_issuers t WHERE t.issuer OPERATOR(pg_catalog.=) i.issuer)
           FROM toolgate.issuers i WHERE i.iss OPERATOR(pg_catalog.=) $1",
        &[iss.into()],
        |r| {
            let jwks: String = spi::col(r, 2)?;
            let tenants: String = spi::col(r, 6)?;
            Ok(Rc::new(IssuerConfig {
                issuer: Issuer {
                    iss: iss.to_string(),
                    audiences: spi::col(r, 1)?,
                    // A document that no longer parses (a row written around add_issuer) verifies nothing.
                    keys: issuer::parse_jwks(&jwks).unwrap_or_default(),
                    tenant_claim: spi::col(r, 3)?,
                    actor_claim: spi::col(r, 4)?,
                    roles_claim: spi::col(r, 5)?,
                },
                tenants: serde_json::from_str(&tenants).unwrap_or_default(),
            }))
        },
    )
}

/// Refuse a JWKS document `toolgate.add_issuer` or `toolgate.set_issuer_keys` would store; the
/// number of signing keys it holds.
#[pg_extern(immutable, strict, parallel_safe)]
fn check_jwks(jwks: pgrx::JsonB) -> i32 {
    let keys = issuer::parse_jwks(&jwks.0.to_string()).unwrap_or_else(|e| AdminError::Jwks(e).raise());
    i32::try_from(keys.len()).unwrap_or(i32::MAX)
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

/// A call routed by a tenant (`toolgate.tenant_call`, `tenant_confirm`, `tenant_read`) whose
/// verified token names another tenant, or none, is refused like a bad token: on a Citus cluster
/// it was routed to the node of the tenant it named, and must not run there for another.
pub fn routed(who: Identity, routed: Option<&str>) -> Step<Identity> {
    match routed {
        Some(tenant) if tenant != who.tenant => {
            Err(Deny::because(Rule::IdentityInvalid, json!({"reason": "tenant_mismatch"})))
        }
        _ => Ok(who),
    }
}

/// On a Citus cluster a call runs only on the node that holds its tenant's rows: one that runs
/// anywhere else (a tenant-less entry point on the coordinator, a routed one Citus did not
/// delegate) is `BLOCKED routing_required`, audited under its verified tenant, before it reads or
/// writes anything of the tenant's.
pub fn placed(who: &Identity, routed: bool) -> Step<()> {
    if tenant_is_here(&who.tenant) {
        return Ok(());
    }
    Err(Deny::because(Rule::RoutingRequired, json!({"reason": "tenant_elsewhere", "routed": routed})))
}

/// Whether a call for `tenant` runs where its rows are (`toolgate.tenant_is_here`): always
/// without Citus, which costs no statement.
fn tenant_is_here(tenant: &str) -> bool {
    !crate::citus_preloaded()
        || spi::one("SELECT toolgate.tenant_is_here($1)", &[tenant.into()], |r| spi::col::<bool>(r, 1)).unwrap_or(false)
}

/// Why a token failed, as the audit may keep it.
pub fn refused(rule: Rule, e: TokenError) -> Deny {
    Deny::because(rule, json!({"reason": e.code()}))
}

/// A token this backend verified, if its key (or issuer registration) is still the one that
/// verified it.
fn remembered(token: &str, clock: Clock) -> Option<Result<Identity, TokenError>> {
    let (source, tenant) =
        VERIFIED.with_borrow(|v| v.get(token).map(|h| (h.source.clone(), h.identity.tenant.clone())))?;
    let still = match source {
        Source::Key { kid, public_key } => registered_key(&kid).is_some_and(|k| {
            k.active && k.purpose == KeyPurpose::Identity && k.public_key == public_key && k.tenant == tenant
        }),
        Source::Issuer { iss, config } => registered_issuer(&iss).is_some_and(|now| Rc::ptr_eq(&now, &config)),
    };
    if !still {
        VERIFIED.with_borrow_mut(|v| v.remove(token));
        return None;
    }
    VERIFIED.with_borrow(|v| {
        let identity = &v.get(token)?.identity;
        Some(token::judge_times(identity.exp, identity.iat, identity.nbf, clock).map(|()| identity.clone()))
    })
}

fn remember(token: &str, source: Source, identity: &Identity, now: i64) {
    VERIFIED.with_borrow_mut(|v| {
        if v.len() >= VERIFIED_LIMIT {
            v.retain(|_, h| h.identity.exp > now);
            if v.len() >= VERIFIED_LIMIT {
                v.clear();
            }
        }
        v.insert(token.to_string(), Verified { identity: identity.clone(), source });
    });
}

/// The audience this session's tokens must name (`toolgate.audience`), if one is set.
fn expected_audience() -> Option<String> {
    crate::AUDIENCE.get().map(|a| a.to_string_lossy().into_owned()).filter(|a| !a.is_empty())
}

/// Verify an identity token: its signature and claims, then the audience this session expects
/// (`toolgate.audience`), judged on every call, remembered token or not.
pub fn verify(token: Option<&str>) -> Step<Identity> {
    let expected = expected_audience();
    verified(token).and_then(|who| who.for_audience(expected.as_deref()).map_err(|e| refused(Rule::IdentityInvalid, e)))
}

fn verified(token: Option<&str>) -> Step<Identity> {
    let deny = |e| refused(Rule::IdentityInvalid, e);
    let clock = clock::tokens();
    if let Some(verdict) = token.and_then(|t| remembered(t, clock)) {
        return verdict.map_err(deny);
    }
    match issuer::claimed_issuer(token) {
        Ok(Some(iss)) => return from_issuer(token.unwrap_or_default(), iss, clock).map_err(deny),
        // No iss, or not even a payload to read: a token for a key of toolgate.keys, judged below.
        Ok(None) | Err(TokenError::Malformed | TokenError::Missing) => {}
        Err(e) => return Err(deny(e)),
    }
    let kid = token::key_id(token).map_err(deny)?;
    let key = registered_key(&kid);
    let token = token.unwrap_or_default();
    let identity = token::verify_identity(token, key.as_ref(), clock).map_err(deny)?;
    if let Some(key) = &key {
        remember(token, Source::Key { kid, public_key: key.public_key }, &identity, clock.now);
    }
    Ok(identity)
}

/// A token of a registered issuer: its keys, iss, aud and times, then its tenant claim mapped to
/// the tenant whose trusted issuer this is.
fn from_issuer(token: &str, iss: String, clock: Clock) -> Result<Identity, TokenError> {
    let config = registered_issuer(&iss).ok_or(TokenError::UnknownIssuer)?;
    let issued = issuer::verify_issued(token, &config.issuer, clock)?;
    let tenant = config.tenants.get(&issued.tenant_value).ok_or(TokenError::UnmappedTenant)?;
    let identity = Identity { tenant: tenant.clone(), ..issued.identity };
    remember(token, Source::Issuer { iss, config }, &identity, clock.now);
    Ok(identity)
}
