//! Canonical digests of arguments (RFC 8785 JSON Canonicalization Scheme).
//!
//! The idempotency ledger compares `args_digest`; the audit keeps `args_hmac`, a keyed digest
//! that lets identical inputs be correlated without storing them.

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::Write;

/// RFC 8785 canonical form: sorted keys, normalized numbers, no insignificant whitespace.
///
/// Written here, in one buffer, for values whose numbers are integers a double holds exactly
/// (every argument a tool's schema asks for, nearly): keys in UTF-16 order, strings escaped as
/// RFC 8785 §3.2.2.2 says, integers as their digits. A value holding any other number is
/// serde_jcs's whole (its ECMAScript number form). The two agree byte for byte (a property test).
pub fn canonical(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    if write_canonical(value, &mut out) {
        out
    } else {
        serde_jcs::to_vec(value).expect("a serde_json::Value always canonicalizes")
    }
}

/// Largest magnitude of an integer written as its digits: a double holds every integer up to it.
const SAFE_INTEGER: u64 = 1 << 53;

/// `value`'s canonical form into `out`; `false` (with `out` part-written) for a number that is not
/// an integer of at most `SAFE_INTEGER`'s magnitude.
fn write_canonical(value: &Value, out: &mut Vec<u8>) -> bool {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => match n.as_i64() {
            // -0 is an i64 0 here, and RFC 8785 writes it 0.
            Some(i) if i.unsigned_abs() <= SAFE_INTEGER => {
                write!(out, "{i}").expect("a Vec takes every byte");
            }
            _ => return false,
        },
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                if !write_canonical(item, out) {
                    return false;
                }
            }
            out.push(b']');
        }
        Value::Object(map) => {
            out.push(b'{');
            let utf16 = |a: &str, b: &str| a.encode_utf16().cmp(b.encode_utf16());
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            // A map's own order is its keys' bytes (code points), which is UTF-16's unless a key
            // holds a character past U+FFFF: sorted again only then.
            if members.windows(2).any(|w| utf16(w[0].0, w[1].0).is_gt()) {
                members.sort_by(|a, b| utf16(a.0, b.0));
            }
            for (i, (key, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(key, out);
                out.push(b':');
                if !write_canonical(item, out) {
                    return false;
                }
            }
            out.push(b'}');
        }
    }
    true
}

/// A JSON string as RFC 8785 writes it: `"` and `\` escaped, the controls below U+0020 as
/// `\b \t \n \f \r` or `\u00xx` (lower-case hex), every other character as itself.
fn write_string(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escaped: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => &[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0x0f)]],
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escaped);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// SHA-256 of the canonical form, lowercase hex.
pub fn args_digest(value: &Value) -> String {
    sha256_hex(&canonical(value))
}

/// HMAC-SHA256 of the canonical form under `key`, lowercase hex.
pub fn args_hmac(key: &[u8], value: &Value) -> String {
    ArgsKey::new(key).hmac(value)
}

/// `(args_digest, args_hmac)` of one value, canonicalized once.
pub fn args_digest_and_hmac(key: &[u8], value: &Value) -> (String, String) {
    ArgsKey::new(key).digest_and_hmac(value)
}

/// The audit's HMAC key with its schedule done (the key's two padded blocks hashed once): kept,
/// it makes each `args_hmac` cost only the arguments' own blocks.
#[derive(Clone)]
pub struct ArgsKey(Hmac<Sha256>);

impl ArgsKey {
    pub fn new(key: &[u8]) -> ArgsKey {
        ArgsKey(<Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length"))
    }

    /// `args_hmac` of `value`.
    pub fn hmac(&self, value: &Value) -> String {
        self.hmac_hex(&canonical(value))
    }

    /// `(args_digest, args_hmac)` of `value`, canonicalized once.
    pub fn digest_and_hmac(&self, value: &Value) -> (String, String) {
        let canonical = canonical(value);
        (sha256_hex(&canonical), self.hmac_hex(&canonical))
    }

    fn hmac_hex(&self, canonical: &[u8]) -> String {
        let mut mac = self.0.clone();
        mac.update(canonical);
        hex(&mac.finalize().into_bytes())
    }
}

/// The 64-bit name of an idempotency key's lock: the first eight bytes of the SHA-256 of its
/// parts, each length-prefixed (so no two lists of parts name the same bytes). The same in every
/// server process and every build: two calls with one key wait on one lock.
pub fn key_lock_id(parts: &[&str]) -> u64 {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("SHA-256 has 32 bytes"))
}

fn sha256_hex(canonical: &[u8]) -> String {
    hex(&Sha256::digest(canonical))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn key_lock_ids_are_fixed_and_tell_parts_apart() {
        let id = key_lock_id(&["shopping-a", "request_close", "k-1"]);
        // The same in every build: a fixed value (here computed apart, with Python's hashlib),
        // not a hasher seeded per process.
        assert_eq!(id, 0xf059_cb79_9167_ad9c);
        assert_ne!(id, key_lock_id(&["shopping-b", "request_close", "k-1"]));
        assert_ne!(id, key_lock_id(&["shopping-a", "request_purchase_part", "k-1"]));
        assert_ne!(id, key_lock_id(&["shopping-a", "request_close", "k-2"]));
        // Length-prefixed: moving a boundary between parts names another lock.
        assert_ne!(key_lock_id(&["ab", "c"]), key_lock_id(&["a", "bc"]));
    }

    #[test]
    fn a_kept_key_gives_the_hmac_a_fresh_one_gives() {
        let v = json!({"order_id": "742", "reason": "Inspeção validada"});
        let kept = ArgsKey::new(b"a key of the audit");
        // Used twice: the kept state is cloned for each, never consumed.
        for _ in 0..2 {
            assert_eq!(kept.hmac(&v), hmac_of_canonical(b"a key of the audit", &canonical(&v)));
        }
        assert_ne!(kept.hmac(&v), ArgsKey::new(b"another key").hmac(&v));
    }

    /// HMAC-SHA256 as RFC 2104 defines it, written out here with sha2 alone.
    fn hmac_of_canonical(key: &[u8], message: &[u8]) -> String {
        let mut block = [0u8; 64];
        block[..key.len()].copy_from_slice(key);
        let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
        let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
        hex(&Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize())
    }

    #[test]
    fn digest_and_hmac_together_are_the_two_apart() {
        let v = json!({"order_id": "742", "reason": "Inspeção validada", "n": [1, 2.5, {"z": null}]});
        assert_eq!(args_digest_and_hmac(b"k", &v), (args_digest(&v), args_hmac(b"k", &v)));
        // Known answers: SHA-256 and HMAC-SHA256 (key "k") of the canonical text {"a":1}.
        let a = json!({"a": 1});
        assert_eq!(args_digest(&a), "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862");
        assert_eq!(args_hmac(b"k", &a), "c3a92ff9e274cdcce27a58c15a78ec6dcbbdbd0038a87e7a11baef2028fd8bff");
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": "x"}"#).unwrap();
        let b: Value = serde_json::from_str("{\"a\":\"x\",\n \"b\":1}").unwrap();
        assert_eq!(args_digest(&a), args_digest(&b));
        assert_eq!(canonical(&a), br#"{"a":"x","b":1}"#.to_vec());
    }

    #[test]
    fn numbers_are_normalized() {
        assert_eq!(canonical(&json!(1.0)), b"1".to_vec());
        assert_eq!(canonical(&json!(1e21)), b"1e+21".to_vec());
    }

    #[test]
    fn different_values_differ() {
        assert_ne!(args_digest(&json!({"q": 1})), args_digest(&json!({"q": 2})));
        assert_ne!(args_digest(&json!({"q": "1"})), args_digest(&json!({"q": 1})));
    }

    #[test]
    fn hmac_depends_on_the_key() {
        let v = json!({"order_id": "742"});
        assert_ne!(args_hmac(b"key-one", &v), args_hmac(b"key-two", &v));
        assert_eq!(args_hmac(b"key-one", &v).len(), 64);
        assert_ne!(args_hmac(b"key-one", &v), args_digest(&v));
    }

    proptest! {
        #[test]
        fn digest_is_stable_under_key_order(entries in proptest::collection::btree_map("[a-z]{1,6}", any::<i32>(), 0..8)) {
            let forward: serde_json::Map<String, Value> =
                entries.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            let mut text = String::from("{");
            for (i, (k, v)) in entries.iter().rev().enumerate() {
                if i > 0 { text.push_str(" ,\n "); }
                text.push_str(&format!("{:?} : {}", k, v));
            }
            text.push('}');
            let backward: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(args_digest(&Value::Object(forward)), args_digest(&backward));
        }

        #[test]
        fn digest_separates_different_values(a in any::<i64>(), b in any::<i64>(), s in "[ -~]{0,12}") {
            prop_assume!(a != b);
            prop_assert_ne!(args_digest(&json!({"k": s, "v": a})), args_digest(&json!({"k": s, "v": b})));
        }
    }

    /// Any JSON value, nested up to four levels, whose numbers are integers a double holds
    /// exactly: for those, two `Value`s are equal exactly when RFC 8785 says they are.
    fn nested() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            (-(1i64 << 53)..=(1i64 << 53)).prop_map(Value::from),
            "\\PC{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map("\\PC{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Any JSON value: integers of every size, fractions and exponents as they were written, and
    /// strings and keys of controls, quotes, backslashes, characters on both sides of U+FFFF (whose
    /// UTF-16 order is not their code points' order) and plain letters.
    fn any_json() -> impl Strategy<Value = Value> {
        let text = "[\\x00-\\x1f\"\\\\a-c\\x7f\u{e9}\\x{e000}-\\x{e002}\\x{ffff}\\x{1f600}-\\x{1f602}]{0,6}";
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,6})?([eE][+-]?[0-9]{1,2})?"
                .prop_map(|t| serde_json::from_str::<Value>(&t).unwrap()),
            text.prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(text, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        #[test]
        fn the_canonical_form_is_serde_jcs_byte_for_byte(v in any_json()) {
            prop_assert_eq!(canonical(&v), serde_jcs::to_vec(&v).unwrap(), "{}", v);
        }
    }

    #[test]
    fn the_canonical_form_of_the_edges() {
        for text in [
            r#"{"\u00e9":1,"z":2,"\ud83d\ude00":3,"\ue000":4,"":5}"#,
            r#"["\u0000\u001f\b\t\n\f\r\"\\/\u007f"]"#,
            r#"[-0, 0, 9007199254740992, -9007199254740992, 9007199254740993, 1.0, 1e2, 0.1]"#,
        ] {
            let v: Value = serde_json::from_str(text).unwrap();
            assert_eq!(canonical(&v), serde_jcs::to_vec(&v).unwrap(), "{text}");
        }
    }

    /// `v` as text with every object's keys in reverse order and `ws` wherever JSON allows it.
    fn render_reversed(v: &Value, ws: &str, out: &mut String) {
        match v {
            Value::Object(m) => {
                out.push('{');
                for (i, (k, item)) in m.iter().rev().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(ws);
                    out.push_str(&Value::from(k.as_str()).to_string());
                    out.push_str(ws);
                    out.push(':');
                    out.push_str(ws);
                    render_reversed(item, ws, out);
                    out.push_str(ws);
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                out.push_str(ws);
                for (i, item) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                        out.push_str(ws);
                    }
                    render_reversed(item, ws, out);
                }
                out.push_str(ws);
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }

    proptest! {
        #[test]
        fn nested_digest_is_stable_under_key_order_and_whitespace(v in nested(), ws in "[ \t\r\n]{0,3}") {
            let mut text = String::new();
            render_reversed(&v, &ws, &mut text);
            let reread: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(args_digest(&reread), args_digest(&v), "{}", text);
            let pretty: Value = serde_json::from_str(&serde_json::to_string_pretty(&v).unwrap()).unwrap();
            prop_assert_eq!(args_digest(&pretty), args_digest(&v));
            prop_assert_eq!(args_hmac(b"k", &reread), args_hmac(b"k", &v));
        }

        #[test]
        fn nested_values_that_differ_digest_differently(a in nested(), b in nested()) {
            prop_assume!(a != b);
            prop_assert_ne!(args_digest(&a), args_digest(&b));
            prop_assert_ne!(args_hmac(b"k", &a), args_hmac(b"k", &b));
        }

        #[test]
        fn one_change_deep_inside_changes_the_digest(v in nested(), path in proptest::collection::vec(any::<prop::sample::Index>(), 0..4)) {
            // Walk into `v` along `path`, as a JSON Pointer, and change the value found there.
            let (mut pointer, mut at) = (String::new(), &v);
            for i in &path {
                let step = match at {
                    Value::Array(a) if !a.is_empty() => i.index(a.len()).to_string(),
                    Value::Object(m) if !m.is_empty() => m.keys().nth(i.index(m.len())).unwrap().clone(),
                    _ => break,
                };
                at = at.get(step.as_str()).or_else(|| step.parse::<usize>().ok().and_then(|n| at.get(n))).unwrap();
                pointer.push('/');
                pointer.push_str(&step.replace('~', "~0").replace('/', "~1"));
            }
            let mut changed = v.clone();
            let target = changed.pointer_mut(&pointer).unwrap();
            *target = json!({"was": target.take()});
            prop_assert_ne!(args_digest(&changed), args_digest(&v), "{}", pointer);
        }

        #[test]
        fn the_canonical_form_is_a_fixed_point_that_reads_back_equal(v in nested()) {
            let c = canonical(&v);
            let back: Value = serde_json::from_slice(&c).unwrap();
            prop_assert_eq!(&back, &v);
            prop_assert_eq!(canonical(&back), c);
        }
    }
}
