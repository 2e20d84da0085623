//! Subtransactions, the pattern PL/pgSQL uses for its exception blocks: `rolled_back` always
//! rolls back (how `explain_call` runs the real gate and keeps nothing of it); `attempt` keeps
//! what succeeded (how a DBA's bound function runs: its failure becomes an outcome).

use pgrx::pg_sys::panic::CaughtError;
use pgrx::{pg_sys, PgTryBuilder};
use std::panic::AssertUnwindSafe;

/// An internal subtransaction, begun: where to come back to when it ends (addresses, not
/// pointers, so the error handlers that end it stay unwind-safe).
#[derive(Clone, Copy)]
struct Begun {
    memory: usize,
    owner: usize,
}

impl Begun {
    fn begin() -> Begun {
        let begun = unsafe {
            Begun { memory: pg_sys::CurrentMemoryContext as usize, owner: pg_sys::CurrentResourceOwner as usize }
        };
        unsafe {
            pg_sys::BeginInternalSubTransaction(std::ptr::null());
            pg_sys::MemoryContextSwitchTo(begun.memory as pg_sys::MemoryContext);
        }
        begun
    }

    /// Roll it back: nothing written in it is kept, its locks are released.
    fn rollback(self) {
        unsafe { pg_sys::RollbackAndReleaseCurrentSubTransaction() };
        self.restore();
    }

    /// Keep it: what it wrote, and its locks, become the enclosing transaction's.
    fn release(self) {
        unsafe { pg_sys::ReleaseCurrentSubTransaction() };
        self.restore();
    }

    fn restore(self) {
        unsafe {
            pg_sys::MemoryContextSwitchTo(self.memory as pg_sys::MemoryContext);
            pg_sys::CurrentResourceOwner = self.owner as pg_sys::ResourceOwner;
        }
    }
}

/// Run `f` inside a subtransaction, then roll the subtransaction back. Rust values `f` returns
/// live on the Rust heap and survive; every row it wrote, lock it took, and quota it consumed
/// does not. An ERROR inside `f` rolls the subtransaction back too, then goes on up: a caller's
/// own exception block (PL/pgSQL's) then rolls back its subtransaction, not this one.
pub fn rolled_back<T>(f: impl FnOnce() -> T) -> T {
    let begun = Begun::begin();
    let f = AssertUnwindSafe(f);
    let out = PgTryBuilder::new(move || {
        let f = f;
        (f.0)()
    })
    .catch_others(|caught| {
        begun.rollback();
        caught.rethrow()
    })
    .execute();
    begun.rollback();
    out
}

/// Why `attempt` kept nothing.
pub enum Failure<E> {
    /// `f` returned this refusal.
    Refused(E),
    /// `f` raised an error with this SQLSTATE.
    Raised(String),
}

/// Run `f` in a subtransaction kept only when `f` returns `Ok`. A refusal, or an error `f`
/// raises, rolls it back: nothing `f` wrote stays. A serialization failure, deadlock, lock
/// timeout, cancel or lack of resources goes on up after the rollback, so the client retries with
/// the same key; any other error becomes `Failure::Raised` with its SQLSTATE (not its message,
/// which may quote data).
pub fn attempt<T, E>(f: impl FnOnce() -> Result<T, E>) -> Result<T, Failure<E>> {
    let begun = Begun::begin();
    let f = AssertUnwindSafe(f);
    let out = PgTryBuilder::new(move || {
        let f = f;
        (f.0)().map_err(Failure::Refused)
    })
    .catch_others(|caught| {
        begun.rollback();
        let code = match &caught {
            CaughtError::PostgresError(e) | CaughtError::ErrorReport(e) => sqlstate(e.sql_error_code() as i32),
            CaughtError::RustPanic { .. } => caught.rethrow(),
        };
        if retry_with_same_key(&code) {
            caught.rethrow()
        }
        Err(Failure::Raised(code))
    })
    .execute();
    match &out {
        Ok(_) => begun.release(),
        Err(Failure::Refused(_)) => begun.rollback(),
        Err(Failure::Raised(_)) => {}
    }
    out
}

/// The five characters of a packed SQLSTATE (PostgreSQL's MAKE_SQLSTATE: six bits a character).
fn sqlstate(packed: i32) -> String {
    (0..5).map(|i| char::from(((packed >> (6 * i)) & 0x3F) as u8 + b'0')).collect()
}

/// Errors that say "try again", not "this effect is wrong": transaction rollbacks (class 40), a
/// lock not available, a cancel or timeout, and insufficient resources (class 53).
fn retry_with_same_key(code: &str) -> bool {
    code.starts_with("40") || code.starts_with("53") || code == "55P03" || code == "57014"
}
