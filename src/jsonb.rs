//! `jsonb` datums made from serde_json values, and read back into them, without JSON text in
//! between: the value is pushed into PostgreSQL's own jsonb builder (`pushJsonbValue`, as
//! `jsonb_in` does once it has parsed the text) and read with its iterator. Printing the text
//! and parsing it again cost more than a bound function's own statement.

use pgrx::pg_sys::{self, jbvType, JsonbIteratorToken as Token, JsonbParseState, JsonbValue};
use pgrx::{IntoDatum, JsonB};
use serde_json::{Map, Number, Value};
use std::ffi::CString;
use std::ptr::null_mut;

/// The longest string a jsonb can hold (JENTRY_OFFLENMASK), as `jsonb_in` checks it.
const MAX_STRING: usize = 0x0FFF_FFFF;

/// `v` as a jsonb datum, allocated in the current memory context. A string a jsonb cannot hold
/// as is (a NUL, which `jsonb_in` refuses; one too long) goes through `jsonb_in`, which raises
/// the error it always raised.
pub fn datum(v: &Value) -> pg_sys::Datum {
    // SAFETY: the builder's state lives in the current memory context; every string pushed
    // borrows `v`, which outlives JsonbValueToJsonb, where the jsonb is copied out of them.
    let built = unsafe {
        let mut state: *mut JsonbParseState = null_mut();
        let top = match v {
            Value::Object(_) | Value::Array(_) => container(&mut state, v),
            scalar => {
                // A scalar at the top is a one-element "raw scalar" array, as jsonb_in makes it.
                let mut array = JsonbValue { type_: jbvType::jbvArray, ..Default::default() };
                array.val.array.rawScalar = true;
                array.val.array.nElems = 1;
                pg_sys::pushJsonbValue(&mut state, Token::WJB_BEGIN_ARRAY, &mut array);
                member(&mut state, Token::WJB_ELEM, scalar)
                    .map(|()| pg_sys::pushJsonbValue(&mut state, Token::WJB_END_ARRAY, null_mut()))
            }
        };
        top.map(|top| pg_sys::Datum::from(pg_sys::JsonbValueToJsonb(top)))
    };
    built.unwrap_or_else(|| JsonB(v.clone()).into_datum().expect("a jsonb is never NULL"))
}

/// Push an object or an array; `None` if a string in it cannot be pushed as is.
unsafe fn container(state: &mut *mut JsonbParseState, v: &Value) -> Option<*mut JsonbValue> {
    unsafe {
        match v {
            Value::Object(map) => {
                pg_sys::pushJsonbValue(state, Token::WJB_BEGIN_OBJECT, null_mut());
                for (k, x) in map {
                    let mut key = string(k)?;
                    pg_sys::pushJsonbValue(state, Token::WJB_KEY, &mut key);
                    member(state, Token::WJB_VALUE, x)?;
                }
                Some(pg_sys::pushJsonbValue(state, Token::WJB_END_OBJECT, null_mut()))
            }
            Value::Array(items) => {
                pg_sys::pushJsonbValue(state, Token::WJB_BEGIN_ARRAY, null_mut());
                for x in items {
                    member(state, Token::WJB_ELEM, x)?;
                }
                Some(pg_sys::pushJsonbValue(state, Token::WJB_END_ARRAY, null_mut()))
            }
            _ => unreachable!("only containers"),
        }
    }
}

/// Push a member of a container (an object's value, an array's element).
unsafe fn member(state: &mut *mut JsonbParseState, token: Token::Type, x: &Value) -> Option<()> {
    unsafe {
        let mut scalar = match x {
            Value::Object(_) | Value::Array(_) => return container(state, x).map(|_| ()),
            Value::Null => JsonbValue { type_: jbvType::jbvNull, ..Default::default() },
            Value::Bool(b) => {
                let mut s = JsonbValue { type_: jbvType::jbvBool, ..Default::default() };
                s.val.boolean = *b;
                s
            }
            Value::Number(n) => {
                // JSON's number grammar is numeric's input grammar: jsonb_in reads numbers so.
                let text = CString::new(n.to_string()).expect("a number holds no NUL");
                let numeric = pgrx::direct_function_call_as_datum(
                    pg_sys::numeric_in,
                    &[text.as_c_str().into_datum(), pg_sys::InvalidOid.into_datum(), (-1i32).into_datum()],
                )
                .expect("numeric_in returns a numeric");
                let mut s = JsonbValue { type_: jbvType::jbvNumeric, ..Default::default() };
                s.val.numeric = numeric.cast_mut_ptr();
                s
            }
            Value::String(text) => string(text)?,
        };
        pg_sys::pushJsonbValue(state, token, &mut scalar);
        Some(())
    }
}

/// A jsonb string that borrows `text`; `None` for one jsonb_in would refuse.
fn string(text: &str) -> Option<JsonbValue> {
    if text.len() > MAX_STRING || text.as_bytes().contains(&0) {
        return None;
    }
    let mut s = JsonbValue { type_: jbvType::jbvString, ..Default::default() };
    s.val.string.len = text.len() as i32;
    s.val.string.val = text.as_ptr().cast_mut().cast();
    Some(s)
}

/// A container being read back.
enum Open {
    Object(Map<String, Value>, Option<String>),
    Array(Vec<Value>, bool),
}

/// The value of a jsonb datum (detoasted here if it must be).
///
/// # Safety
/// `datum` is a jsonb datum, not NULL.
pub unsafe fn value(datum: pg_sys::Datum) -> Value {
    unsafe {
        let jsonb = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()).cast::<pg_sys::Jsonb>();
        let mut it = pg_sys::JsonbIteratorInit(&mut (*jsonb).root);
        let mut v = JsonbValue::default();
        let mut open: Vec<Open> = Vec::new();
        let mut done = Value::Null;
        loop {
            let read = match pg_sys::JsonbIteratorNext(&mut it, &mut v, false) {
                Token::WJB_DONE => break,
                Token::WJB_BEGIN_OBJECT => {
                    open.push(Open::Object(Map::new(), None));
                    continue;
                }
                Token::WJB_BEGIN_ARRAY => {
                    open.push(Open::Array(Vec::new(), v.val.array.rawScalar));
                    continue;
                }
                Token::WJB_KEY => {
                    if let Some(Open::Object(_, key)) = open.last_mut() {
                        *key = Some(text_of(&v));
                    }
                    continue;
                }
                Token::WJB_VALUE | Token::WJB_ELEM => scalar_of(&v),
                _ => match open.pop() {
                    Some(Open::Object(map, _)) => Value::Object(map),
                    Some(Open::Array(mut items, true)) => items.pop().unwrap_or(Value::Null),
                    Some(Open::Array(items, false)) => Value::Array(items),
                    None => Value::Null,
                },
            };
            match open.last_mut() {
                Some(Open::Object(map, key)) => {
                    map.insert(key.take().unwrap_or_default(), read);
                }
                Some(Open::Array(items, _)) => items.push(read),
                None => done = read,
            }
        }
        done
    }
}

unsafe fn text_of(v: &JsonbValue) -> String {
    unsafe {
        let s = v.val.string;
        let bytes = std::slice::from_raw_parts(s.val.cast::<u8>(), s.len as usize);
        String::from_utf8_lossy(bytes).into_owned()
    }
}

unsafe fn scalar_of(v: &JsonbValue) -> Value {
    unsafe {
        match v.type_ {
            jbvType::jbvString => Value::String(text_of(v)),
            jbvType::jbvBool => Value::Bool(v.val.boolean),
            jbvType::jbvNumeric => {
                let cstr = pgrx::direct_function_call::<&std::ffi::CStr>(
                    pg_sys::numeric_out,
                    &[Some(pg_sys::Datum::from(v.val.numeric))],
                )
                .expect("numeric_out returns a C string");
                let text = cstr.to_string_lossy().into_owned();
                pg_sys::pfree(cstr.as_ptr().cast_mut().cast());
                text.parse::<Number>().map(Value::Number).unwrap_or(Value::String(text))
            }
            _ => Value::Null,
        }
    }
}

/// The call in progress: the memory context its entry point was called in, and the datums made
/// in it by `shared`.
struct Call {
    memory: pg_sys::MemoryContext,
    made: Vec<(Value, pg_sys::Datum)>,
}

thread_local! {
    static CALL: std::cell::RefCell<Option<Call>> = const { std::cell::RefCell::new(None) };
}

/// An entry point's run begins (`context::Held`): datums `shared` makes from now on live in the
/// memory context it was called in, where its own result is made too.
pub fn begin_call() {
    CALL.set(Some(Call { memory: unsafe { pg_sys::CurrentMemoryContext }, made: Vec::new() }));
}

/// The run ended: its datums are no longer handed out.
pub fn end_call() {
    CALL.set(None);
}

/// `datum(v)`, made once a call: the arguments that the target, value and effect functions all
/// receive and the proposal keeps, the reply the ledger keeps and the entry point returns. Outside
/// a call, a new datum.
pub fn shared(v: &Value) -> pg_sys::Datum {
    CALL.with_borrow_mut(|call| match call {
        None => datum(v),
        Some(Call { memory, made }) => {
            if let Some((_, d)) = made.iter().find(|(x, _)| x == v) {
                return *d;
            }
            // SAFETY: the entry point's memory context outlives its run, which `end_call` ends.
            let d = unsafe {
                let old = pg_sys::MemoryContextSwitchTo(*memory);
                let d = datum(v);
                pg_sys::MemoryContextSwitchTo(old);
                d
            };
            made.push((v.clone(), d));
            d
        }
    })
}

/// A jsonb an entry point returns: made by `shared` before the run ends.
pub struct Jsonb(pg_sys::Datum);

impl Jsonb {
    pub fn of(v: &Value) -> Jsonb {
        Jsonb(shared(v))
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
    // SAFETY: a jsonb datum, with jsonb's type.
    unsafe { pgrx::datum::DatumWithOid::new(Jsonb(datum(v)), pg_sys::JSONBOID) }
}

/// `arg`, of a value the call hands on more than once (its arguments, its reply): `shared`.
pub fn shared_arg(v: &Value) -> pgrx::datum::DatumWithOid<'static> {
    // SAFETY: a jsonb datum, with jsonb's type.
    unsafe { pgrx::datum::DatumWithOid::new(Jsonb(shared(v)), pg_sys::JSONBOID) }
}
