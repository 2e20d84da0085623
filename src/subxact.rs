//! A subtransaction that is always rolled back: how `explain_call` runs the real gate and keeps
//! nothing of it (the pattern PL/pgSQL uses for its exception blocks).

use pgrx::{pg_sys, PgTryBuilder};
use std::panic::AssertUnwindSafe;

/// Run `f` inside a subtransaction, then roll the subtransaction back. Rust values `f` returns
/// live on the Rust heap and survive; every row it wrote, lock it took, and quota it consumed
/// does not. An ERROR inside `f` rolls the subtransaction back too, then goes on up: a caller's
/// own exception block (PL/pgSQL's) then rolls back its subtransaction, not this one.
pub fn rolled_back<T>(f: impl FnOnce() -> T) -> T {
    // Addresses, not pointers, so the handlers below stay unwind-safe.
    let (memory, owner) = unsafe { (pg_sys::CurrentMemoryContext as usize, pg_sys::CurrentResourceOwner as usize) };
    let end = move || unsafe {
        pg_sys::RollbackAndReleaseCurrentSubTransaction();
        pg_sys::MemoryContextSwitchTo(memory as pg_sys::MemoryContext);
        pg_sys::CurrentResourceOwner = owner as pg_sys::ResourceOwner;
    };
    unsafe {
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(memory as pg_sys::MemoryContext);
    }
    let f = AssertUnwindSafe(f);
    let out = PgTryBuilder::new(move || {
        let f = f;
        (f.0)()
    })
    .catch_others(|caught| {
        end();
        caught.rethrow()
    })
    .execute();
    end();
    out
}
