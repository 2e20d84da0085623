//! A subtransaction that is always rolled back: how `explain_call` runs the real gate and keeps
//! nothing of it (the pattern PL/pgSQL uses for its exception blocks).

use pgrx::pg_sys;

/// Run `f` inside a subtransaction, then roll the subtransaction back. Rust values `f` returns
/// live on the Rust heap and survive; every row it wrote, lock it took, and quota it consumed
/// does not. An ERROR inside `f` aborts the enclosing transaction as usual.
pub fn rolled_back<T>(f: impl FnOnce() -> T) -> T {
    unsafe {
        let memory = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(memory);
        let out = f();
        pg_sys::RollbackAndReleaseCurrentSubTransaction();
        pg_sys::MemoryContextSwitchTo(memory);
        pg_sys::CurrentResourceOwner = owner;
        out
    }
}
