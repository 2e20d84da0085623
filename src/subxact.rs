//! Subtransactions, the pattern PL/pgSQL uses for its exception blocks: `rolled_back` always
//! rolls back (how `explain_call` runs the real gate and keeps nothing of it); `attempt` keeps
//! what its caller judges kept (how the DBA's bound functions run: their failure becomes an
//! outcome, and nothing they wrote stays).

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

/// Run `f` in a subtransaction. What `f` returns decides whether what it wrote is kept: `undo`
/// judges it, and a result it judges is rolled back (nothing `f` wrote stays, its locks are
/// released). An error `f` raises rolls the subtransaction back, then goes on up unless `claimed`
/// says it is one the caller answers (a DBA's bound function's, not the gate's own); even then a
/// serialization failure, deadlock, lock timeout, cancel or lack of resources goes on up, so the
/// client retries with the same key. A claimed error becomes `Failure::Raised` with its SQLSTATE
/// (not its message, which may quote data).
pub fn attempt<T, E>(
    f: impl FnOnce() -> Result<T, E>,
    undo: impl FnOnce(&Result<T, E>) -> bool,
    claimed: fn() -> bool,
) -> Result<T, Failure<E>> {
    let begun = Begun::begin();
    let f = AssertUnwindSafe(f);
    let out = PgTryBuilder::new(move || {
        let f = f;
        Ok((f.0)())
    })
    .catch_others(move |caught| {
        begun.rollback();
        let code = match &caught {
            CaughtError::PostgresError(e) | CaughtError::ErrorReport(e) => sqlstate(e.sql_error_code() as i32),
            CaughtError::RustPanic { .. } => caught.rethrow(),
        };
        if !claimed() || retry_with_same_key(&code) {
            caught.rethrow()
        }
        Err(Failure::Raised(code))
    })
    .execute();
    match out {
        Ok(result) => {
            if undo(&result) {
                begun.rollback();
            } else {
                begun.release();
            }
            result.map_err(Failure::Refused)
        }
        Err(raised) => Err(raised),
    }
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
