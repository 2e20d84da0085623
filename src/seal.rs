//! What `toolgate.seal()` and `toolgate.verify_audit()` (sql/seal.sql) need from C: a seal key's
//! random seed, its signatures, the wait for the audit's writers, and the lock that keeps one
//! tenant's checkpoints in one chain. Internal: PUBLIC may execute none of them (finalize.sql);
//! the seal's SECURITY DEFINER functions call them.

use pgrx::pg_sys;
use pgrx::prelude::*;
use toolgate_core::digest::key_lock_id;

use crate::xactlock;

/// 32 bytes from PostgreSQL's strong random source: a new seal key's seed.
#[pg_extern(volatile, parallel_unsafe)]
fn seal_new_seed() -> Vec<u8> {
    random_bytes()
}

/// 32 bytes from PostgreSQL's strong random source: a seal key's seed, a person's key.
pub fn random_bytes() -> Vec<u8> {
    let mut seed = vec![0u8; 32];
    // SAFETY: the buffer holds 32 bytes; pg_strong_random writes at most that many.
    let filled = unsafe { pg_sys::pg_strong_random(seed.as_mut_ptr().cast(), seed.len()) };
    if !filled {
        error!("could not generate a random key");
    }
    seed
}

/// A seal key's public half.
#[pg_extern(immutable, strict, parallel_safe)]
fn seal_public_key(seed: &[u8]) -> Vec<u8> {
    toolgate_core::seal::public_key(seed).unwrap_or_else(|| error!("a seal key's seed is 32 bytes")).to_vec()
}

/// The Ed25519 signature of a checkpoint's message.
#[pg_extern(immutable, strict, parallel_safe)]
fn seal_signature(seed: &[u8], message: &[u8]) -> Vec<u8> {
    toolgate_core::seal::sign(seed, message).unwrap_or_else(|| error!("a seal key's seed is 32 bytes")).to_vec()
}

/// Whether a checkpoint's signature is its message's, by this public key.
#[pg_extern(immutable, strict, parallel_safe)]
fn seal_signature_valid(public_key: &[u8], message: &[u8], signature: &[u8]) -> bool {
    toolgate_core::seal::verify(public_key, message, signature)
}

/// Hold, until the transaction ends, the seal of one tenant's audit: two seals never chain from
/// the same checkpoint. Calls never take it.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn seal_lock(tenant: &str) {
    xactlock::hold(xactlock::AUDIT_SEAL, key_lock_id(&[tenant]));
}

/// Wait until every transaction that holds a lock on `rel` a writer takes (RowExclusiveLock or
/// stronger) when this is called has ended, as CREATE INDEX CONCURRENTLY waits. Nobody waits for
/// this: a writer that starts meanwhile is not waited for and takes its lock as usual.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn wait_for_writers(rel: pg_sys::Oid) {
    // SAFETY: MyDatabaseId is set in a connected backend; WaitForLockers copies the tag, and
    // raises (never returns) on a cancel, a timeout or a deadlock.
    unsafe {
        let tag = pg_sys::LOCKTAG {
            locktag_field1: pg_sys::MyDatabaseId.to_u32(),
            locktag_field2: rel.to_u32(),
            locktag_field3: 0,
            locktag_field4: 0,
            locktag_type: pg_sys::LockTagType::LOCKTAG_RELATION as u8,
            locktag_lockmethodid: pg_sys::DEFAULT_LOCKMETHOD as u8,
        };
        pg_sys::WaitForLockers(tag, pg_sys::ShareLock as pg_sys::LOCKMODE, false);
    }
}

/// `toolgate.min_retention` in seconds (calling it loads the library, so the setting is read
/// checked, whatever set it).
#[pg_extern(stable, parallel_safe)]
fn min_retention() -> i32 {
    crate::MIN_RETENTION.get()
}
