//! PostgreSQL's `jsonb` on-disk format, written and read without JSON text: what `jsonb_in`
//! builds from a value's text (src/backend/utils/adt/jsonb_util.c, `convertToJsonb`), byte for
//! byte, and the values read back out of it. The format has not changed since PostgreSQL 9.4.
//!
//! A container is a 32-bit header (its count and kind) and one 32-bit entry per child (an object's
//! keys first, in jsonb's order — shorter first, then bytewise — then its values), followed by the
//! children's data. An entry holds the child's type and its length, except every 32nd, which holds
//! the end offset of its data instead. Numerics and containers start at a 4-byte boundary of the
//! datum; the padding before them counts as part of their length.
//!
//! Numbers are PostgreSQL `numeric`s: the caller turns a number's text into the numeric's bytes
//! and back (`numeric_in`, `numeric_out`), as `jsonb_in` and `jsonb_out` do.

use serde_json::{Map, Number, Value};

const JENTRY_OFFLENMASK: u32 = 0x0FFF_FFFF;
const JENTRY_TYPEMASK: u32 = 0x7000_0000;
const JENTRY_HAS_OFF: u32 = 0x8000_0000;
const JENTRY_ISSTRING: u32 = 0x0000_0000;
const JENTRY_ISNUMERIC: u32 = 0x1000_0000;
const JENTRY_ISBOOL_FALSE: u32 = 0x2000_0000;
const JENTRY_ISBOOL_TRUE: u32 = 0x3000_0000;
const JENTRY_ISNULL: u32 = 0x4000_0000;
const JENTRY_ISCONTAINER: u32 = 0x5000_0000;
const JB_OFFSET_STRIDE: usize = 32;
const JB_CMASK: u32 = 0x0FFF_FFFF;
const JB_FSCALAR: u32 = 0x1000_0000;
const JB_FOBJECT: u32 = 0x2000_0000;
const JB_FARRAY: u32 = 0x4000_0000;
/// The size of the varlena header in front of the data: alignment counts from the datum's start.
const VARHDRSZ: usize = 4;
/// Deeper than this, `encode` declines (the caller goes through `jsonb_in`, which has its own
/// stack check): the encoder recurses.
pub const MAX_ENCODE_DEPTH: usize = 512;

/// The data of a jsonb datum (everything after its 4-byte varlena header), or `None` for a value
/// `jsonb_in` would refuse or that this encoder leaves to it: a NUL in a string, a string or a
/// container too long for a jsonb, a nesting deeper than `MAX_ENCODE_DEPTH`, or a number
/// `numeric` refuses. `numeric` gives a number's `numeric` datum (its 4-byte header included).
pub fn encode(v: &Value, numeric: &mut dyn FnMut(&Number) -> Option<Vec<u8>>) -> Option<Vec<u8>> {
    let mut out = Encoder { buf: Vec::with_capacity(256), numeric };
    match v {
        Value::Object(_) | Value::Array(_) => {
            out.value(Member::Value(v), 0)?;
        }
        scalar => {
            // A scalar at the top is a one-element "raw scalar" array, as jsonb_in makes it.
            let entries = out.container_head(1 | JB_FARRAY | JB_FSCALAR, 1);
            let base = out.buf.len();
            let entry = out.value(Member::Value(scalar), 1)?;
            out.set_entry(entries, entry, out.buf.len() - base, 0)?;
        }
    }
    Some(out.buf)
}

/// A member of an object `encode_object` writes, borrowed from where it is kept (nothing is built
/// to be written).
#[derive(Clone, Copy)]
pub enum Member<'a> {
    /// A string, or null.
    Str(Option<&'a str>),
    /// An array of strings.
    Strs(&'a [String]),
    Value(&'a Value),
}

/// `encode` of the object of `members` (each key once).
pub fn encode_object(
    members: &[(&str, Member<'_>)],
    numeric: &mut dyn FnMut(&Number) -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    let mut out = Encoder { buf: Vec::with_capacity(256), numeric };
    out.object(members.to_vec(), 0)?;
    Some(out.buf)
}

struct Encoder<'a> {
    /// The datum's data; its position `i` is the datum's byte `i + VARHDRSZ`.
    buf: Vec<u8>,
    numeric: &'a mut dyn FnMut(&Number) -> Option<Vec<u8>>,
}

impl Encoder<'_> {
    /// Pad to a 4-byte boundary of the datum.
    fn pad(&mut self) {
        let padding = (4 - (self.buf.len() + VARHDRSZ) % 4) % 4;
        self.buf.resize(self.buf.len() + padding, 0);
    }

    /// A container's header and room for its `children` entries; where the entries begin.
    fn container_head(&mut self, header: u32, children: usize) -> usize {
        self.buf.extend_from_slice(&header.to_ne_bytes());
        let at = self.buf.len();
        self.buf.resize(at + 4 * children, 0);
        at
    }

    /// Write child number `i`'s entry: `entry` with its length, or with the end offset of the
    /// data so far (`total`) on every JB_OFFSET_STRIDE'th child.
    fn set_entry(&mut self, entries: usize, entry: u32, total: usize, i: usize) -> Option<()> {
        if total > JENTRY_OFFLENMASK as usize {
            return None;
        }
        let entry = if i.is_multiple_of(JB_OFFSET_STRIDE) {
            (entry & JENTRY_TYPEMASK) | total as u32 | JENTRY_HAS_OFF
        } else {
            entry
        };
        self.buf[entries + 4 * i..entries + 4 * i + 4].copy_from_slice(&entry.to_ne_bytes());
        Some(())
    }

    /// Append a member's data; its entry (type and length).
    fn value(&mut self, v: Member<'_>, depth: usize) -> Option<u32> {
        let start = self.buf.len();
        let kind = match v {
            Member::Value(Value::Null) | Member::Str(None) => return Some(JENTRY_ISNULL),
            Member::Value(Value::Bool(true)) => return Some(JENTRY_ISBOOL_TRUE),
            Member::Value(Value::Bool(false)) => return Some(JENTRY_ISBOOL_FALSE),
            Member::Value(Value::String(s)) => {
                self.string(s)?;
                JENTRY_ISSTRING
            }
            Member::Str(Some(s)) => {
                self.string(s)?;
                JENTRY_ISSTRING
            }
            Member::Value(Value::Number(n)) => {
                let bytes = (self.numeric)(n)?;
                self.pad();
                self.buf.extend_from_slice(&bytes);
                JENTRY_ISNUMERIC
            }
            Member::Value(Value::Array(items)) => {
                self.array(items.len(), items.iter().map(Member::Value), depth)?;
                JENTRY_ISCONTAINER
            }
            Member::Strs(items) => {
                self.array(items.len(), items.iter().map(|s| Member::Str(Some(s))), depth)?;
                JENTRY_ISCONTAINER
            }
            Member::Value(Value::Object(map)) => {
                self.object(map.iter().map(|(k, x)| (k.as_str(), Member::Value(x))).collect(), depth)?;
                JENTRY_ISCONTAINER
            }
        };
        let len = self.buf.len() - start;
        (len <= JENTRY_OFFLENMASK as usize).then_some(kind | len as u32)
    }

    fn array<'v>(&mut self, n: usize, items: impl Iterator<Item = Member<'v>>, depth: usize) -> Option<()> {
        if depth >= MAX_ENCODE_DEPTH || n > JB_CMASK as usize {
            return None;
        }
        self.pad();
        let entries = self.container_head(n as u32 | JB_FARRAY, n);
        let base = self.buf.len();
        for (i, x) in items.enumerate() {
            let entry = self.value(x, depth + 1)?;
            self.set_entry(entries, entry, self.buf.len() - base, i)?;
        }
        Some(())
    }

    /// An object: its keys in jsonb's order (shorter first, then bytewise), then its values.
    fn object(&mut self, mut pairs: Vec<(&str, Member<'_>)>, depth: usize) -> Option<()> {
        let n = pairs.len();
        if depth >= MAX_ENCODE_DEPTH || n > JB_CMASK as usize {
            return None;
        }
        pairs.sort_by(|a, b| a.0.len().cmp(&b.0.len()).then_with(|| a.0.as_bytes().cmp(b.0.as_bytes())));
        self.pad();
        let entries = self.container_head(n as u32 | JB_FOBJECT, 2 * n);
        let base = self.buf.len();
        for (i, (k, _)) in pairs.iter().enumerate() {
            self.string(k)?;
            self.set_entry(entries, JENTRY_ISSTRING | k.len() as u32, self.buf.len() - base, i)?;
        }
        for (i, (_, x)) in pairs.into_iter().enumerate() {
            let entry = self.value(x, depth + 1)?;
            self.set_entry(entries, entry, self.buf.len() - base, n + i)?;
        }
        Some(())
    }

    fn string(&mut self, s: &str) -> Option<()> {
        if s.len() > JENTRY_OFFLENMASK as usize || s.as_bytes().contains(&0) {
            return None;
        }
        self.buf.extend_from_slice(s.as_bytes());
        Some(())
    }
}

/// The `numeric` PostgreSQL makes of an integer (`numeric_in` of its text), less its 4-byte
/// varlena header: the short form's 16-bit header (sign, display scale 0, weight) and its
/// base-10000 digits, leading and trailing zero digits dropped, as `make_result` stores them.
pub fn integer_numeric(n: i64) -> Vec<u8> {
    const NUMERIC_SHORT: u16 = 0x8000;
    const NUMERIC_SHORT_SIGN_MASK: u16 = 0x2000;
    const NUMERIC_SHORT_WEIGHT_MASK: u16 = 0x003F;
    let mut digits = Vec::new();
    let mut rest = n.unsigned_abs();
    while rest > 0 {
        digits.push((rest % 10_000) as i16);
        rest /= 10_000;
    }
    digits.reverse();
    // The weight counts from the first digit, whatever zeros end the number.
    let weight = digits.len().saturating_sub(1) as u16;
    while digits.last() == Some(&0) {
        digits.pop();
    }
    let sign = if n < 0 { NUMERIC_SHORT_SIGN_MASK } else { 0 };
    let header = NUMERIC_SHORT | sign | (weight & NUMERIC_SHORT_WEIGHT_MASK);
    let mut out = header.to_ne_bytes().to_vec();
    for d in digits {
        out.extend_from_slice(&d.to_ne_bytes());
    }
    out
}

/// Data that is not the jsonb format (a child beyond its container's end, say).
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// A container being read: its kind, its children's entries, where its data begins, and how far
/// the reading got.
struct Open<'a> {
    entries: &'a [u8],
    base: usize,
    count: usize,
    object: bool,
    raw_scalar: bool,
    next: usize,
    offset: usize,
    keys: Vec<String>,
    values: Vec<Value>,
}

/// The value of a jsonb datum's data (everything after its 4-byte varlena header). `numeric`
/// reads a number from the bytes of its `numeric` datum.
pub fn decode(data: &[u8], numeric: &mut dyn FnMut(&[u8]) -> Value) -> Result<Value, Malformed> {
    let mut open = vec![open_at(data, 0)?];
    loop {
        let top = open.last_mut().expect("a container is open");
        let children = if top.object { 2 * top.count } else { top.count };
        if top.next == children {
            let done = open.pop().expect("a container is open");
            let v = if done.raw_scalar {
                done.values.into_iter().next().ok_or(Malformed)?
            } else if done.object {
                let mut map = Map::new();
                for (k, v) in done.keys.into_iter().zip(done.values) {
                    map.insert(k, v);
                }
                Value::Object(map)
            } else {
                Value::Array(done.values)
            };
            match open.last_mut() {
                Some(parent) => parent.values.push(v),
                None => return Ok(v),
            }
            continue;
        }
        let i = top.next;
        let entry = u32::from_ne_bytes(top.entries.get(4 * i..4 * i + 4).ok_or(Malformed)?.try_into().unwrap());
        let field = (entry & JENTRY_OFFLENMASK) as usize;
        let start = top.offset;
        let end = if entry & JENTRY_HAS_OFF != 0 { field } else { start + field };
        top.next += 1;
        top.offset = end;
        let at = top.base + start;
        let bytes = data.get(at..top.base + end).ok_or(Malformed)?;
        let key = top.object && i < top.count;
        let v = match entry & JENTRY_TYPEMASK {
            JENTRY_ISSTRING => {
                let s = match std::str::from_utf8(bytes) {
                    Ok(s) => s.to_owned(),
                    Err(_) => String::from_utf8_lossy(bytes).into_owned(),
                };
                if key {
                    top.keys.push(s);
                    continue;
                }
                Value::String(s)
            }
            _ if key => return Err(Malformed),
            JENTRY_ISNULL => Value::Null,
            JENTRY_ISBOOL_TRUE => Value::Bool(true),
            JENTRY_ISBOOL_FALSE => Value::Bool(false),
            JENTRY_ISNUMERIC => {
                let aligned = align(at);
                numeric(data.get(aligned..top.base + end).ok_or(Malformed)?)
            }
            JENTRY_ISCONTAINER => {
                let nested = open_at(data, align(at))?;
                open.push(nested);
                continue;
            }
            _ => return Err(Malformed),
        };
        top.values.push(v);
    }
}

/// The next 4-byte boundary of the datum at or after data position `at`.
fn align(at: usize) -> usize {
    at + (4 - (at + VARHDRSZ) % 4) % 4
}

fn open_at(data: &[u8], at: usize) -> Result<Open<'_>, Malformed> {
    let header = u32::from_ne_bytes(data.get(at..at + 4).ok_or(Malformed)?.try_into().unwrap());
    let count = (header & JB_CMASK) as usize;
    let object = header & JB_FOBJECT != 0;
    let children = if object { 2 * count } else { count };
    let entries = data.get(at + 4..at + 4 + 4 * children).ok_or(Malformed)?;
    let raw_scalar = header & JB_FSCALAR != 0;
    if object == (header & JB_FARRAY != 0) || (raw_scalar && (object || count != 1)) {
        return Err(Malformed);
    }
    Ok(Open {
        entries,
        base: at + 4 + 4 * children,
        count,
        object,
        raw_scalar,
        next: 0,
        offset: 0,
        keys: Vec::with_capacity(if object { count } else { 0 }),
        values: Vec::with_capacity(count),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A stand-in for `numeric`: the number's text behind a 4-byte length, which is what the
    /// format needs of it (a varlena whose size it keeps).
    fn numeric(n: &Number) -> Option<Vec<u8>> {
        let text = n.to_string();
        let mut bytes = ((text.len() + 4) as u32).to_ne_bytes().to_vec();
        bytes.extend_from_slice(text.as_bytes());
        Some(bytes)
    }

    fn number(bytes: &[u8]) -> Value {
        Value::Number(std::str::from_utf8(&bytes[4..]).unwrap().parse().unwrap())
    }

    fn round_trip(v: &Value) -> Value {
        let data = encode(v, &mut numeric).expect("encodable");
        decode(&data, &mut number).expect("well formed")
    }

    #[test]
    fn an_object_is_its_header_its_entries_keys_first_then_its_data() {
        let data = encode(&json!({"bb": true, "a": "xy"}), &mut numeric).unwrap();
        let words: Vec<u32> = data[..20].chunks(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect();
        // Two pairs; keys "a" then "bb" (shorter first), the first with its end offset; then the
        // values in the keys' order.
        assert_eq!(words, vec![2 | JB_FOBJECT, JENTRY_HAS_OFF | 1, 2, 2, JENTRY_ISBOOL_TRUE]);
        assert_eq!(&data[20..], b"abbxy");
    }

    #[test]
    fn an_integer_is_numeric_short_form() {
        let words =
            |n| integer_numeric(n).chunks(2).map(|c| u16::from_ne_bytes(c.try_into().unwrap())).collect::<Vec<u16>>();
        assert_eq!(words(0), vec![0x8000]);
        assert_eq!(words(15300), vec![0x8001, 1, 5300]);
        assert_eq!(words(-7), vec![0xA000, 7]);
        // 20|0000|0000: weight 2, trailing zero digits dropped.
        assert_eq!(words(2_000_000_000), vec![0x8002, 20]);
        assert_eq!(words(i64::MIN), vec![0xA004, 922, 3372, 368, 5477, 5808]);
    }

    #[test]
    fn keys_are_shorter_first_then_bytewise() {
        let data = encode(&json!({"ab": 1, "b": 2, "aa": 3, "": 4}), &mut numeric).unwrap();
        // The keys' data follows the header and the eight entries.
        assert_eq!(&data[36..41], b"baaab");
    }

    #[test]
    fn numbers_and_containers_start_on_a_four_byte_boundary_of_the_datum() {
        let data = encode(&json!(["x", 1]), &mut numeric).unwrap();
        // header, two entries, "x", three bytes of padding, then the numeric.
        assert_eq!(data.len(), 12 + 1 + 3 + 5);
        let entry = u32::from_ne_bytes(data[8..12].try_into().unwrap());
        assert_eq!(entry, JENTRY_ISNUMERIC | 8);
        assert_eq!(data[13..16], [0, 0, 0]);
    }

    #[test]
    fn a_scalar_at_the_top_is_a_raw_scalar_array() {
        let data = encode(&json!("s"), &mut numeric).unwrap();
        assert_eq!(u32::from_ne_bytes(data[..4].try_into().unwrap()), 1 | JB_FARRAY | JB_FSCALAR);
        assert_eq!(round_trip(&json!("s")), json!("s"));
        assert_eq!(round_trip(&json!(null)), json!(null));
    }

    #[test]
    fn every_32nd_entry_holds_an_offset() {
        let items: Vec<Value> = (0..70).map(|i| json!(format!("v{i}"))).collect();
        let v = Value::Array(items);
        let data = encode(&v, &mut numeric).unwrap();
        let entry = |i: usize| u32::from_ne_bytes(data[4 + 4 * i..8 + 4 * i].try_into().unwrap());
        for i in 0..70 {
            assert_eq!(entry(i) & JENTRY_HAS_OFF != 0, i % 32 == 0, "entry {i}");
        }
        assert_eq!(round_trip(&v), v);
    }

    #[test]
    fn an_object_of_borrowed_members_is_the_object_of_their_values() {
        let roles = vec!["a".to_string(), "bb".to_string()];
        let nested = json!({"x": [1, null]});
        let members = [
            ("tenant", Member::Str(Some("t1"))),
            ("proposal_id", Member::Str(None)),
            ("roles", Member::Strs(&roles)),
            ("target", Member::Value(&nested)),
        ];
        let v = json!({"tenant": "t1", "proposal_id": null, "roles": ["a", "bb"], "target": {"x": [1, null]}});
        assert_eq!(encode_object(&members, &mut numeric), encode(&v, &mut numeric));
    }

    #[test]
    fn what_jsonb_in_refuses_is_left_to_it() {
        assert_eq!(encode(&json!({"k": "a\u{0}b"}), &mut numeric), None);
        assert_eq!(encode(&json!({"a\u{0}": 1}), &mut numeric), None);
        let mut deep = json!(1);
        for _ in 0..MAX_ENCODE_DEPTH {
            deep = json!([deep]);
        }
        assert!(encode(&deep, &mut numeric).is_some(), "{MAX_ENCODE_DEPTH} levels are encoded");
        assert_eq!(encode(&json!([deep]), &mut numeric), None);
        assert_eq!(encode(&json!(1), &mut |_| None), None);
    }

    #[test]
    fn data_that_is_not_jsonb_is_malformed_not_a_panic() {
        let data = encode(&json!({"a": [1, "b"], "c": {}}), &mut numeric).unwrap();
        for cut in 0..data.len() {
            let _ = decode(&data[..cut], &mut |b| if b.len() >= 4 { number(b) } else { Value::Null });
        }
        assert_eq!(decode(&[0, 0, 0], &mut number), Err(Malformed));
        assert_eq!(decode(&(3 | JB_FOBJECT | JB_FARRAY).to_ne_bytes(), &mut number), Err(Malformed));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[a-zA-Z0-9 ãé\u{1F600}\"\\\\]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 80, 40, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..40).prop_map(Value::Array),
                prop::collection::btree_map("[a-z]{0,6}", inner, 0..40)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn decode_reads_back_what_encode_wrote(v in json_value()) {
            prop_assert_eq!(round_trip(&v), v);
        }
    }
}
