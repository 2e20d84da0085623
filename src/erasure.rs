//! The audit's pseudonyms (docs/audit.md#erasure-of-a-person): the audit names each person by a
//! keyed hash under a random key of their own, kept in `toolgate.person_keys`;
//! `toolgate.erase_actor` (sql/erasure.sql) deletes the key, and the audit, still whole and still
//! verifiable, no longer says who.

use pgrx::prelude::*;

use crate::spi;

/// The pseudonym of `person` in `tenant`'s audit: the one their key gives, or, for a person the
/// tenant's audit has not named yet (or named before they were erased), a new key's. A name that
/// is itself an erased pseudonym of the tenant (an intent queued before its actor was erased
/// carries it) stays as it is: it already names nobody.
pub fn pseudonym_of(tenant: &str, person: &str) -> String {
    const KNOWN: &str = "SELECT pseudonym FROM toolgate.person_keys WHERE tenant_id = $1 AND person = $2";
    if let Some(p) = spi::one(KNOWN, &[tenant.into(), person.into()], |r| spi::col::<String>(r, 1)) {
        return p;
    }
    let erased = spi::one(
        "SELECT 1 FROM toolgate.erasures WHERE tenant_id = $1 AND pseudonym = $2",
        &[tenant.into(), person.into()],
        |r| spi::col::<i32>(r, 1),
    );
    if erased.is_some() {
        return person.to_string();
    }
    let key = crate::seal::random_bytes();
    let made = toolgate_core::seal::pseudonym(&key, tenant, person);
    // Two first calls of one person at once: one key is kept, and both name them by it.
    let kept = spi::one(
        "INSERT INTO toolgate.person_keys (tenant_id, person, key, pseudonym) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (tenant_id, person) DO NOTHING RETURNING pseudonym",
        &[tenant.into(), person.into(), key.into(), made.as_str().into()],
        |r| spi::col::<String>(r, 1),
    );
    kept.or_else(|| spi::one(KNOWN, &[tenant.into(), person.into()], |r| spi::col::<String>(r, 1)))
        .unwrap_or_else(|| error!("pg_toolgate: the key of a person of tenant {tenant} was removed meanwhile"))
}

/// `toolgate.pseudonym(tenant, person)`: `pseudonym_of` for the outbox's audit rows, written in
/// SQL. Internal: PUBLIC may not execute it (finalize.sql); the outbox's SECURITY DEFINER
/// functions do.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn pseudonym(tenant: &str, person: &str) -> String {
    pseudonym_of(tenant, person)
}

/// `toolgate.audited_target(tenant, tool, args, target)`: the target as the audit names it for
/// the outbox's deliveries (written in SQL): its pseudonym when it is one of `args`' values the
/// tool's schema marks personal (as `audit::Audit::record` names a call's), else itself.
/// Internal: PUBLIC may not execute it (finalize.sql); the outbox's SECURITY DEFINER functions do.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn audited_target(tenant: &str, tool: &str, args: pgrx::JsonB, target: &str) -> String {
    crate::config::begin_call();
    let Some(paths) = crate::gate::contract::tool(tool).map(|t| t.personal).filter(|p| !p.is_empty()) else {
        return target.to_string();
    };
    let (_, personal) = toolgate_core::personal::masked(&args.0, &paths, |_| String::new());
    if personal.iter().any(|v| v == target) {
        pseudonym_of(tenant, target)
    } else {
        target.to_string()
    }
}
