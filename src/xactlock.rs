//! A lock held until the transaction ends, on a name no SQL statement can take or wait on: the
//! lock manager's user-lock tag, which no SQL function takes (the advisory-lock functions take
//! the advisory tag). A client cannot hold it to stall the gate, as it could an advisory lock, and
//! it shows in `pg_locks` as `userlock`, with its waits, deadlocks and `lock_timeout` as any
//! other heavyweight lock's. The `unsafe` of it is here, with the isolation level's.

use pgrx::pg_sys;

/// The names' spaces (the tag's fourth field).
pub const LEDGER_KEY: u16 = 1;
/// A rolling limit's counter (`gate::limits`): one consumption of its window at a time.
pub const LIMIT_COUNTER: u16 = 2;
/// One tenant's audit seal (`seal`): one checkpoint chain, one sealer at a time.
pub const AUDIT_SEAL: u16 = 3;

/// Wait for, then hold until the transaction ends (or the subtransaction that took it is rolled
/// back), the lock named `id` in `space`, in this database.
pub fn hold(space: u16, id: u64) {
    acquire(space, id, false);
}

/// `hold` if no other transaction holds the lock; false, without waiting, if one does.
pub fn try_hold(space: u16, id: u64) -> bool {
    acquire(space, id, true)
}

fn acquire(space: u16, id: u64, dont_wait: bool) -> bool {
    // SAFETY: MyDatabaseId is set once the backend is connected to a database, before any SQL
    // function runs; LockAcquire copies the tag and raises (never returns) on a deadlock,
    // a timeout or a cancel.
    unsafe {
        let tag = pg_sys::LOCKTAG {
            locktag_field1: pg_sys::MyDatabaseId.to_u32(),
            locktag_field2: (id >> 32) as u32,
            locktag_field3: id as u32,
            locktag_field4: space,
            locktag_type: pg_sys::LockTagType::LOCKTAG_USERLOCK as u8,
            locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
        };
        pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, dont_wait)
            != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
    }
}

/// Whether the transaction reads from one snapshot for its whole life (REPEATABLE READ or
/// SERIALIZABLE): there a row another transaction committed after that snapshot is not seen.
pub fn one_snapshot() -> bool {
    // SAFETY: a plain read of the backend's isolation level.
    unsafe { pg_sys::XactIsoLevel >= pg_sys::XACT_REPEATABLE_READ as i32 }
}
