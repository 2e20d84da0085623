//! `jsonb` datums made from serde_json values, and read back into them, without JSON text in
//! between: the format is written and read in Rust (`toolgate_core::jsonb`), byte for byte what
//! `jsonb_in` makes, with PostgreSQL's own `numeric_in` and `numeric_out` for numbers. Printing
//! the text and parsing it again, or building through PostgreSQL's jsonb builder one call a
//! member, cost more than a bound function's own statement.

use pgrx::pg_sys;
use pgrx::{IntoDatum, JsonB};
use serde_json::{Number, Value};
use std::ffi::CString;
use toolgate_core::jsonb;

/// `v` as a jsonb datum, allocated in the current memory context. A value the encoder leaves to
/// `jsonb_in` (a NUL in a string, which it refuses; one too long; a nesting too deep) goes
/// through it, which raises the error it always raised.
pub fn datum(v: &Value) -> pg_sys::Datum {
    match jsonb::encode(v, &mut numeric_bytes) {
        Some(data) => varlena(&data),
        None => JsonB(v.clone()).into_datum().expect("a jsonb is never NULL"),
    }
}

/// The jsonb object of `members`, borrowed where they are kept (`datum` of the same object,
/// without building it first).
pub fn object(members: &[(&str, jsonb::Member<'_>)]) -> pg_sys::Datum {
    match jsonb::encode_object(members, &mut numeric_bytes) {
        Some(data) => varlena(&data),
        None => {
            let owned = |m: &jsonb::Member<'_>| match *m {
                jsonb::Member::Str(s) => s.map_or(Value::Null, |s| Value::String(s.to_string())),
                jsonb::Member::Strs(items) => Value::Array(items.iter().cloned().map(Value::String).collect()),
                jsonb::Member::Value(v) => v.clone(),
            };
            datum(&Value::Object(members.iter().map(|(k, m)| (k.to_string(), owned(m))).collect()))
        }
    }
}

/// A varlena of `data`, with its 4-byte header, in the current memory context.
fn varlena(data: &[u8]) -> pg_sys::Datum {
    // SAFETY: a new allocation of the data's size plus the 4-byte varlena header.
    unsafe {
        let size = data.len() + pg_sys::VARHDRSZ;
        let datum = pg_sys::palloc(size).cast::<u8>();
        pgrx::varlena::set_varsize_4b(datum.cast(), size as i32);
        std::ptr::copy_nonoverlapping(data.as_ptr(), datum.add(pg_sys::VARHDRSZ), data.len());
        pg_sys::Datum::from(datum)
    }
}

/// A number as the `numeric` jsonb_in makes of its text (JSON's number grammar is numeric's input
/// grammar), with its 4-byte header: `numeric_in`'s, or for an integer the same bytes made here.
fn numeric_bytes(n: &Number) -> Option<Vec<u8>> {
    if let Some(i) = n.as_i64() {
        let body = jsonb::integer_numeric(i);
        let mut bytes = vec![0u8; pg_sys::VARHDRSZ + body.len()];
        bytes[pg_sys::VARHDRSZ..].copy_from_slice(&body);
        // SAFETY: the buffer holds the header and the body.
        unsafe { pgrx::varlena::set_varsize_4b(bytes.as_mut_ptr().cast(), bytes.len() as i32) };
        return Some(bytes);
    }
    let text = CString::new(n.to_string()).ok()?;
    // SAFETY: numeric_in's arguments, as jsonb_in passes them; it returns a plain varlena with a
    // 4-byte header, made in this context.
    unsafe {
        let numeric = pgrx::direct_function_call_as_datum(
            pg_sys::numeric_in,
            &[text.as_c_str().into_datum(), pg_sys::InvalidOid.into_datum(), (-1i32).into_datum()],
        )?;
        let ptr = numeric.cast_mut_ptr::<u8>();
        let bytes = std::slice::from_raw_parts(ptr, pgrx::varlena::varsize_any(ptr.cast())).to_vec();
        pg_sys::pfree(ptr.cast());
        Some(bytes)
    }
}

/// The value of a jsonb datum (detoasted here if it must be).
///
/// # Safety
/// `datum` is a jsonb datum, not NULL.
pub unsafe fn value(datum: pg_sys::Datum) -> Value {
    unsafe {
        let flat = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()).cast::<u8>();
        let size = pgrx::varlena::varsize(flat.cast());
        let data = std::slice::from_raw_parts(flat.add(pg_sys::VARHDRSZ), size - pg_sys::VARHDRSZ);
        jsonb::decode(data, &mut number_of).expect("PostgreSQL made this jsonb")
    }
}

/// The number a jsonb's `numeric` holds, as `jsonb_out` prints it.
fn number_of(numeric: &[u8]) -> Value {
    // SAFETY: `numeric` is a numeric datum inside a jsonb, aligned as jsonb aligns it; numeric_out
    // returns a palloc'd C string, freed once copied.
    let text = unsafe {
        let cstr = pgrx::direct_function_call::<&std::ffi::CStr>(
            pg_sys::numeric_out,
            &[Some(pg_sys::Datum::from(numeric.as_ptr()))],
        )
        .expect("numeric_out returns a C string");
        let text = cstr.to_string_lossy().into_owned();
        pg_sys::pfree(cstr.as_ptr().cast_mut().cast());
        text
    };
    text.parse::<Number>().map(Value::Number).unwrap_or(Value::String(text))
}

/// A jsonb column read by a statement (`spi::col`), decoded as it is stored: no JSON text printed
/// and parsed again.
pub struct Read(pub Value);

impl pgrx::FromDatum for Read {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Read> {
        // SAFETY: a jsonb column's datum (the statement's column has jsonb's type), not NULL.
        (!is_null).then(|| Read(unsafe { value(datum) }))
    }
}

impl IntoDatum for Read {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(datum(&self.0))
    }
    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

/// A jsonb an entry point returns (or a statement takes: `arg`).
#[derive(Clone, Copy)]
pub struct Jsonb(pg_sys::Datum);

impl Jsonb {
    pub fn of(v: &Value) -> Jsonb {
        Jsonb(datum(v))
    }

    /// This jsonb as an argument of a statement (`spi`).
    pub fn arg(self) -> pgrx::datum::DatumWithOid<'static> {
        // SAFETY: a jsonb datum, with jsonb's type.
        unsafe { pgrx::datum::DatumWithOid::new(self, pg_sys::JSONBOID) }
    }
}

impl IntoDatum for Jsonb {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }
    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

unsafe impl pgrx::callconv::BoxRet for Jsonb {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut pgrx::callconv::FcInfo<'fcx>) -> pgrx::datum::Datum<'fcx> {
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}

pgrx::pgrx_sql_entity_graph::impl_sql_translatable!(Jsonb, "jsonb");

/// `v` as a jsonb argument of a statement (`spi`).
pub fn arg(v: &Value) -> pgrx::datum::DatumWithOid<'static> {
    Jsonb::of(v).arg()
}

/// The object of `map` as a jsonb argument, the map borrowed (`arg` of the object, without a copy
/// of it to make the object).
pub fn map_arg(map: &serde_json::Map<String, Value>) -> pgrx::datum::DatumWithOid<'static> {
    let members: Vec<(&str, jsonb::Member<'_>)> =
        map.iter().map(|(k, v)| (k.as_str(), jsonb::Member::Value(v))).collect();
    Jsonb(object(&members)).arg()
}
