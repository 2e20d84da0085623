//! Configuration rows — tenants' locales, keys, issuers, tools and their schemas, policy rows, limits, the kill switch — are read on
//! every call and change rarely. A backend keeps what it read until PostgreSQL says a row
//! changed: a statement trigger on each configuration table sends a relcache invalidation for it
//! (sql/api.sql), each backend forgets its copies when the message arrives, and every gate call
//! first takes the messages already sent. A call therefore sees every change committed before it
//! began, as a fresh SQL read would — the mechanism PostgreSQL uses for its own catalog caches.
//! Changes to functions, roles and schemas are watched the same way (syscache invalidations), so what the
//! gate judged of a tool's bound functions is judged again after any of them changed.

use pgrx::pg_sys;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::Hash;
use std::thread::LocalKey;

use crate::spi;

/// Entries a cache keeps; past this (unknown kids from forged tokens, say) it starts over.
const LIMIT: usize = 10_000;
/// The configuration tables whose changes clear the caches.
const TABLES: [&std::ffi::CStr; 11] = [
    c"tenants",
    c"keys",
    c"issuers",
    c"tenant_issuers",
    c"tools",
    c"tool_schemas",
    c"tool_bindings",
    c"policies",
    c"write_switches",
    c"erp_endpoints",
    c"limits",
];

thread_local! {
    /// Bumped by every invalidation of a configuration table (or of everything).
    static GENERATION: Cell<u64> = const { Cell::new(0) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
    /// The schema the caches were filled from, and its configuration tables' OIDs.
    static WATCHED: RefCell<(pg_sys::Oid, Vec<pg_sys::Oid>)> = const { RefCell::new((pg_sys::InvalidOid, Vec::new())) };
}

/// Called by PostgreSQL for every relcache invalidation this backend takes. It may run in the
/// middle of anything (inside a cache load, even): it only bumps a counter.
unsafe extern "C-unwind" fn on_relcache_invalidation(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    let ours = relid == pg_sys::InvalidOid || WATCHED.with_borrow(|(_, oids)| oids.contains(&relid));
    if ours {
        GENERATION.set(GENERATION.get().wrapping_add(1));
    }
}

/// Called for every change to a function, a role, a role's membership or a schema (pg_proc,
/// pg_authid, pg_auth_members, pg_namespace: a schema's privileges included, and a schema created
/// with a name a bound function's search_path lists): what `toolgate.binding_fault` judges of a
/// bound function, kept with the configuration rows, is judged again.
unsafe extern "C-unwind" fn on_catalog_invalidation(_arg: pg_sys::Datum, _cacheid: std::ffi::c_int, _hash: u32) {
    GENERATION.set(GENERATION.get().wrapping_add(1));
}

/// At the start of every gate call: take the invalidations already sent, and start over if the
/// extension was created again since the caches were filled.
pub fn begin_call() {
    if !REGISTERED.get() {
        use pg_sys::SysCacheIdentifier::{AUTHMEMROLEMEM, AUTHOID, NAMESPACEOID, PROCOID};
        unsafe {
            pg_sys::CacheRegisterRelcacheCallback(Some(on_relcache_invalidation), pg_sys::Datum::from(0));
            for cache in [PROCOID, AUTHOID, AUTHMEMROLEMEM, NAMESPACEOID] {
                pg_sys::CacheRegisterSyscacheCallback(
                    cache as i32,
                    Some(on_catalog_invalidation),
                    pg_sys::Datum::from(0),
                );
            }
        }
        REGISTERED.set(true);
    }
    take_invalidations();
    let schema = spi::schema_oid();
    if WATCHED.with_borrow(|(oid, _)| *oid != schema) {
        let oids = TABLES.iter().map(|t| unsafe { pg_sys::get_relname_relid(t.as_ptr(), schema) }).collect();
        WATCHED.set((schema, oids));
        GENERATION.set(GENERATION.get().wrapping_add(1));
    }
}

/// Take the invalidations sent since the last were taken: a change committed meanwhile clears
/// the caches (cheap when none came: a look at a shared counter).
pub fn take_invalidations() {
    unsafe { pg_sys::AcceptInvalidationMessages() };
}

/// Bumped whenever the caches of configuration rows are dropped: for caches of another shape
/// (`binding`'s function lookups) that must be dropped with them.
pub fn generation() -> u64 {
    GENERATION.get()
}

/// A per-backend cache of one kind of configuration row.
pub struct Cache<K, V> {
    generation: u64,
    map: HashMap<K, V>,
}

impl<K, V> Cache<K, V> {
    pub fn new() -> Cache<K, V> {
        Cache { generation: u64::MAX, map: HashMap::new() }
    }
}

/// `key`'s value from `cache`, or `load`ed (and kept, unless a change arrived while loading).
pub fn cached<K: Hash + Eq, V: Clone>(
    cache: &'static LocalKey<RefCell<Cache<K, V>>>,
    key: K,
    load: impl FnOnce() -> V,
) -> V {
    let generation = GENERATION.get();
    let hit = cache.with_borrow_mut(|c| {
        if c.generation != generation || c.map.len() >= LIMIT {
            c.map.clear();
            c.generation = generation;
        }
        c.map.get(&key).cloned()
    });
    if let Some(value) = hit {
        return value;
    }
    let value = load();
    if GENERATION.get() == generation {
        cache.with_borrow_mut(|c| {
            if c.generation == generation {
                c.map.insert(key, value.clone());
            }
        });
    }
    value
}
