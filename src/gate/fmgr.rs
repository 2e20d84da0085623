//! The function manager's side of calling a tool's bound functions: all the `unsafe` of it in one
//! place. `call` calls a function as the executor does (`fmgr_info`, then its address under
//! `pg_guard_ffi_boundary`), its lookups kept across calls (`lookup`); `Settings` pins the
//! settings the functions run under. What to call, with what, and what an answer means is the
//! steps' (`binding::ctx`, `scope::invoke`); this module knows nothing of the gate.

use pgrx::pg_sys;
use serde_json::Value;
use std::cell::{Cell, RefCell};

/// The settings the bound functions run under, whatever the caller set for its session: a
/// caller's `extra_float_digits = -15` would round a float amount the value function writes,
/// `plpgsql.check_asserts = off` would switch an effect's ASSERT guard off, and the others change
/// what text a date, an interval or a string literal becomes. A function's own `SET` clauses still
/// apply over these (a DBA who wants another TimeZone sets it on the function).
const FIXED_SETTINGS: [(&std::ffi::CStr, &std::ffi::CStr); 6] = [
    (c"extra_float_digits", c"1"),
    (c"DateStyle", c"ISO, MDY"),
    (c"IntervalStyle", c"postgres"),
    (c"TimeZone", c"UTC"),
    (c"standard_conforming_strings", c"on"),
    (c"plpgsql.check_asserts", c"on"),
];

/// Whether a setting showing `current` already has `value`: the same text, or for `TimeZone`
/// the zone `UTC` under its other name (`Etc/UTC`, which a server started in UTC shows).
fn already(name: &std::ffi::CStr, value: &std::ffi::CStr, current: &std::ffi::CStr) -> bool {
    current == value || (name == c"TimeZone" && value == c"UTC" && current == c"Etc/UTC")
}

/// `FIXED_SETTINGS` in force from `fix` to `restore`, the way a function's `SET` clauses are: in
/// a GUC nesting level of their own, popped afterwards. An error that ends the transaction or a
/// caller's subtransaction pops the level with it. A setting already at its value is left alone,
/// and when every one is (a session that changed none of them), no level is made at all: what
/// a bound function sets with `SET LOCAL` is undone when it returns anyway, by the level its own
/// `SET search_path` clause makes (every bound function has one: `binding::check`).
pub struct Settings(Option<std::ffi::c_int>);

impl Settings {
    pub fn fix() -> Settings {
        let mut level = None;
        for (name, value) in FIXED_SETTINGS {
            // SAFETY: GetConfigOption returns the setting's current text (NULL for one not
            // defined yet, such as plpgsql's before it is loaded), valid until it changes.
            let current = unsafe { pg_sys::GetConfigOption(name.as_ptr(), true, false) };
            if !current.is_null() && already(name, value, unsafe { std::ffi::CStr::from_ptr(current) }) {
                continue;
            }
            // SAFETY: a nesting level, then a setting saved in it, as fmgr_security_definer does.
            unsafe {
                level.get_or_insert_with(|| pg_sys::NewGUCNestLevel());
                pg_sys::set_config_option(
                    name.as_ptr(),
                    value.as_ptr(),
                    pg_sys::GucContext::PGC_USERSET,
                    pg_sys::GucSource::PGC_S_SESSION,
                    pg_sys::GucAction::GUC_ACTION_SAVE,
                    true,
                    0,
                    false,
                );
            }
        }
        Settings(level)
    }

    pub fn restore(self) {
        if let Some(level) = self.0 {
            // SAFETY: the level `fix` made, popped once.
            unsafe { pg_sys::AtEOXact_GUC(true, level) };
        }
    }
}

/// The function manager's lookups of the bound functions (`fmgr_info`), kept across calls in a
/// memory context of their own, as the executor keeps a function's for the life of a statement:
/// what SECURITY DEFINER and PL/pgSQL cache in them (the owner, the `SET` clauses, the compiled
/// body) is then found again instead of being looked up at every call. They are dropped whenever
/// the caches of configuration rows are (`config`): any change to a function, a role or a
/// membership, so a function changed since is looked up afresh.
struct Lookups {
    generation: u64,
    memory: pg_sys::MemoryContext,
    found: Vec<(pg_sys::Oid, *mut pg_sys::FmgrInfo)>,
}

thread_local! {
    static LOOKUPS: RefCell<Lookups> =
        const { RefCell::new(Lookups { generation: u64::MAX, memory: std::ptr::null_mut(), found: Vec::new() }) };
    /// Bound functions running now (one calls the gate, which calls another): the lookups they
    /// run under are not dropped until they return.
    static CALLING: Cell<u32> = const { Cell::new(0) };
}

/// `function`'s lookup: the kept one, or a new one (kept, unless a bound function is running and
/// the kept ones are out of date, when it is made in the current memory context).
fn lookup(function: pg_sys::Oid) -> *mut pg_sys::FmgrInfo {
    let generation = crate::config::generation();
    LOOKUPS.with_borrow_mut(|l| unsafe {
        if l.generation != generation || l.memory.is_null() {
            if CALLING.get() > 0 {
                let flinfo = pg_sys::palloc0(std::mem::size_of::<pg_sys::FmgrInfo>()).cast::<pg_sys::FmgrInfo>();
                pg_sys::fmgr_info(function, flinfo);
                return flinfo;
            }
            if !l.memory.is_null() {
                pg_sys::MemoryContextDelete(l.memory);
            }
            l.found.clear();
            l.memory = pg_sys::AllocSetContextCreateInternal(
                pg_sys::TopMemoryContext,
                c"toolgate bound functions".as_ptr(),
                0,
                1024,
                8192,
            );
            l.generation = generation;
        }
        if let Some(&(_, flinfo)) = l.found.iter().find(|(oid, _)| *oid == function) {
            return flinfo;
        }
        let flinfo = pg_sys::MemoryContextAllocZero(l.memory, std::mem::size_of::<pg_sys::FmgrInfo>()).cast();
        pg_sys::fmgr_info_cxt(function, flinfo, l.memory);
        l.found.push((function, flinfo));
        flinfo
    })
}

/// A bound function runs while this lives (however its call ends).
struct Calling;

impl Calling {
    fn start() -> Calling {
        CALLING.set(CALLING.get() + 1);
        Calling
    }
}

impl Drop for Calling {
    fn drop(&mut self) {
        CALLING.set(CALLING.get() - 1);
    }
}

/// `function(ctx, args)` through the function manager, as the executor calls a function: its
/// SECURITY DEFINER and its pinned search_path apply, and there is no statement to plan. NULL
/// comes back as `None`; an error it raises goes on up (to the scope's subtransaction).
pub fn call(function: pg_sys::Oid, ctx: pg_sys::Datum, args: &Value) -> Option<Value> {
    let datum = |value| pg_sys::NullableDatum { value, isnull: false };
    unsafe {
        let flinfo = lookup(function);
        let size =
            std::mem::size_of::<pg_sys::FunctionCallInfoBaseData>() + 2 * std::mem::size_of::<pg_sys::NullableDatum>();
        let fcinfo = pg_sys::palloc0(size).cast::<pg_sys::FunctionCallInfoBaseData>();
        (*fcinfo).flinfo = flinfo;
        (*fcinfo).nargs = 2;
        (*fcinfo).fncollation = pg_sys::InvalidOid;
        let slots = (*fcinfo).args.as_mut_slice(2);
        slots[0] = datum(ctx);
        slots[1] = datum(crate::jsonb::datum(args));
        let address = (*flinfo).fn_addr.expect("fmgr_info sets the function's address");
        let calling = Calling::start();
        let result = pg_sys::ffi::pg_guard_ffi_boundary(|| address(fcinfo));
        drop(calling);
        if (*fcinfo).isnull {
            return None;
        }
        Some(crate::jsonb::value(result))
    }
}
