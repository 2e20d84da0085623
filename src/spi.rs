//! The one way the gate talks SQL: statements prepared once per backend and kept, run through
//! SPI, rows mapped into owned Rust values before SPI lets go of them.

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::PgOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiHeapTupleData, SpiResult};
use std::cell::RefCell;
use std::collections::hash_map::{Entry, HashMap};

thread_local! {
    /// Plans by the address and length of their (static) text: no hashing of the text per call.
    static PLANS: RefCell<HashMap<(usize, usize), OwnedPreparedStatement>> = RefCell::new(HashMap::new());
}

/// A row being read.
pub type Row<'a, 'conn> = &'a SpiHeapTupleData<'conn>;

/// Run `sql` with `args` and map every row with `f`. Every statement is schema-qualified and
/// runs as the extension owner (the entry points are SECURITY DEFINER).
pub fn query<T>(
    sql: &'static str,
    args: &[DatumWithOid],
    mut f: impl FnMut(Row) -> SpiResult<T>,
) -> Vec<T> {
    let result = Spi::connect_mut(|client| {
        let table = PLANS.with_borrow_mut(|plans| -> SpiResult<_> {
            let plan = match plans.entry((sql.as_ptr() as usize, sql.len())) {
                Entry::Occupied(plan) => plan.into_mut(),
                Entry::Vacant(slot) => {
                    let oids: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
                    slot.insert(client.prepare_mut(sql, &oids)?.keep())
                }
            };
            client.update(&*plan, None, args)
        })?;
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

/// Column `i` (1-based), which the statement guarantees is not NULL.
pub fn col<T: IntoDatum + FromDatum>(row: Row, i: usize) -> SpiResult<T> {
    row.get::<T>(i)?.ok_or(pgrx::spi::SpiError::SpiError(pgrx::spi::SpiErrorCodes::NoAttribute))
}

/// The OID of the `toolgate` schema: it changes when the extension is dropped and created again,
/// so per-backend caches of its rows key on it and never outlive the rows they copy.
pub fn schema_oid() -> pgrx::pg_sys::Oid {
    unsafe { pgrx::pg_sys::get_namespace_oid(c"toolgate".as_ptr(), true) }
}
