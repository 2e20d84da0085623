//! The one way the gate talks SQL: statements prepared once per backend and kept, run through
//! SPI, rows mapped into owned Rust values before SPI lets go of them.
//!
//! Two ways to read: `query`/`one`/`run` under the caller's transaction snapshot (the ERP, the
//! ledger, everything the call may change), and `latest` under the newest committed state, for
//! configuration rows. In REPEATABLE READ or SERIALIZABLE the transaction snapshot may predate a
//! change to a key, a policy or a switch; configuration must never be judged, or cached, as it
//! was then.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::PgOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiHeapTupleData, SpiResult};
use std::cell::RefCell;
use std::collections::hash_map::{Entry, HashMap};
use std::ffi::{c_char, CString};
use std::ptr::null_mut;
use std::rc::Rc;

thread_local! {
    /// Plans by the address and length of their (static) text: no hashing of the text per call.
    /// Each is shared out of the map while it runs, so a statement that runs the gate's SQL again
    /// (the audit id's default, `toolgate.node_audit_id`) finds the map free.
    static PLANS: RefCell<HashMap<(usize, usize), Rc<OwnedPreparedStatement>>> = RefCell::new(HashMap::new());
}

/// A row being read.
pub type Row<'a, 'conn> = &'a SpiHeapTupleData<'conn>;

/// Run `sql` with `args` and map every row with `f`. Every statement is schema-qualified and
/// runs as the extension owner (the entry points are SECURITY DEFINER).
pub fn query<T>(sql: &'static str, args: &[DatumWithOid], mut f: impl FnMut(Row) -> SpiResult<T>) -> Vec<T> {
    let result = Spi::connect_mut(|client| {
        let plan = PLANS.with_borrow_mut(|plans| -> SpiResult<_> {
            Ok(match plans.entry((sql.as_ptr() as usize, sql.len())) {
                Entry::Occupied(plan) => Rc::clone(plan.get()),
                Entry::Vacant(slot) => {
                    let oids: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
                    Rc::clone(slot.insert(Rc::new(client.prepare_mut(sql, &oids)?.keep())))
                }
            })
        })?;
        let table = client.update(&*plan, None, args)?;
        table.map(|row| f(&row)).collect::<SpiResult<Vec<T>>>()
    });
    result.unwrap_or_else(|e| panic!("toolgate statement failed: {e}"))
}

/// The first row of `sql`, if any.
pub fn one<T>(sql: &'static str, args: &[DatumWithOid], f: impl FnMut(Row) -> SpiResult<T>) -> Option<T> {
    query(sql, args, f).into_iter().next()
}

/// Run `sql` for its effect; the number of rows it returned.
pub fn run(sql: &'static str, args: &[DatumWithOid]) -> usize {
    query(sql, args, |_| Ok(())).len()
}

thread_local! {
    /// Plans of the `latest` reads, kept for the backend's life (SPI_keepplan).
    static LATEST_PLANS: RefCell<HashMap<(usize, usize), usize>> = RefCell::new(HashMap::new());
}

/// The first row of the read-only `sql`, under a snapshot taken now (PostgreSQL's
/// `GetLatestSnapshot`, as catalog reads use) instead of the transaction's: it sees every change
/// committed before this statement, whatever the caller's isolation level, and whatever snapshot
/// the caller imported.
pub fn latest<T>(sql: &'static str, args: &[DatumWithOid], f: impl FnOnce(Row) -> SpiResult<T>) -> Option<T> {
    let result = Spi::connect(|_client| -> SpiResult<Option<T>> {
        let key = (sql.as_ptr() as usize, sql.len());
        let plan = LATEST_PLANS.with_borrow_mut(|plans| match plans.entry(key) {
            Entry::Occupied(plan) => *plan.get(),
            Entry::Vacant(slot) => {
                let text = CString::new(sql).expect("statements hold no NUL");
                let mut oids: Vec<pgrx::pg_sys::Oid> = args.iter().map(|a| a.oid()).collect();
                // SAFETY: a valid statement text and argument types; SPI is connected.
                let plan = unsafe {
                    let plan = pgrx::pg_sys::SPI_prepare(text.as_ptr(), oids.len() as i32, oids.as_mut_ptr());
                    assert!(!plan.is_null(), "toolgate statement did not prepare: {sql}");
                    pgrx::pg_sys::SPI_keepplan(plan);
                    plan
                };
                *slot.insert(plan as usize)
            }
        });
        let (mut datums, nulls): (Vec<pgrx::pg_sys::Datum>, Vec<c_char>) = args
            .iter()
            .map(|a| match a.datum() {
                Some(d) => (d.sans_lifetime(), b' ' as c_char),
                None => (pgrx::pg_sys::Datum::from(0usize), b'n' as c_char),
            })
            .unzip();
        // SAFETY: the plan was kept above with these argument types; the snapshot is PostgreSQL's
        // own, pushed and popped by SPI; the row is mapped into owned values before SPI finishes.
        unsafe {
            let status = pgrx::pg_sys::SPI_execute_snapshot(
                plan as pgrx::pg_sys::SPIPlanPtr,
                datums.as_mut_ptr(),
                nulls.as_ptr(),
                pgrx::pg_sys::GetLatestSnapshot(),
                std::ptr::null_mut(),
                true,
                false,
                1,
            );
            assert_eq!(status, pgrx::pg_sys::SPI_OK_SELECT as i32, "toolgate read failed: {sql}");
            if pgrx::pg_sys::SPI_processed == 0 {
                return Ok(None);
            }
            let table = pgrx::pg_sys::SPI_tuptable;
            let row = SpiHeapTupleData::new((*table).tupdesc, *(*table).vals)?.expect("one row");
            f(&row).map(Some)
        }
    });
    result.unwrap_or_else(|e| panic!("toolgate statement failed: {e}"))
}

/// Column `i` (1-based), which the statement guarantees is not NULL.
pub fn col<T: IntoDatum + FromDatum>(row: Row, i: usize) -> SpiResult<T> {
    row.get::<T>(i)?.ok_or(pgrx::spi::SpiError::SpiError(pgrx::spi::SpiErrorCodes::NoAttribute))
}

/// Column `i`, a `timestamptz` the statement guarantees is finite, as a reply writes a time: RFC
/// 3339 in UTC to the millisecond (`2026-12-03T19:04:57.123Z`), byte for byte what
/// `toolgate.iso_utc` writes. Broken down by PostgreSQL's own `timestamp2tm` and formatted here:
/// `iso_utc` is a SQL function the planner cannot inline (IMMUTABLE, over a STABLE `to_char`), so
/// on PostgreSQL 15 a statement that calls it parses and plans its body at every execution.
pub fn iso_utc(row: Row, i: usize) -> SpiResult<String> {
    let ts: pgrx::datum::TimestampWithTimeZone = col(row, i)?;
    assert!(ts.is_finite(), "toolgate: an infinite time where a finite one is kept");
    let mut tm = pgrx::pg_sys::pg_tm::default();
    let mut fsec: pgrx::pg_sys::fsec_t = 0;
    // With no time zone asked for (`tzp` NULL), the time is broken down in UTC.
    let broken =
        unsafe { pgrx::pg_sys::timestamp2tm(ts.into_inner(), null_mut(), &mut tm, &mut fsec, null_mut(), null_mut()) };
    assert_eq!(broken, 0, "toolgate: a time out of range where a finite one is kept");
    // to_char's YYYY: a year before 1 is written as its number before Christ.
    let year = if tm.tm_year <= 0 { 1 - tm.tm_year } else { tm.tm_year };
    Ok(format!(
        "{year:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        tm.tm_mon,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        fsec / 1000
    ))
}

/// The OID of the `toolgate` schema: it changes when the extension is dropped and created again,
/// so per-backend caches of its rows key on it and never outlive the rows they copy.
pub fn schema_oid() -> pgrx::pg_sys::Oid {
    unsafe { pgrx::pg_sys::get_namespace_oid(c"toolgate".as_ptr(), true) }
}
