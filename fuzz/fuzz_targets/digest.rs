#![no_main]
//! Gate step 3's canonical digest (RFC 8785) and the audit's keyed digest. For any JSON the
//! gate could see: `args_digest` and `args_hmac` never panic and give 64 hex digits; the canonical
//! form is JSON and a fixed point; another rendering of the same value (whitespace, key order)
//! digests the same; a value changed in one place digests differently.

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use toolgate_core::digest::{args_digest, args_hmac, canonical};

/// `v` rendered with every object's keys in reverse order and whitespace everywhere it may go.
fn reversed(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            out.push_str("{\n\t");
            for (i, (k, item)) in m.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(" ,\r\n ");
                }
                out.push_str(&Value::from(k.as_str()).to_string());
                out.push_str(" :\t");
                reversed(item, out);
            }
            out.push_str(" }");
        }
        Value::Array(a) => {
            out.push_str("[ ");
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str("\n, ");
                }
                reversed(item, out);
            }
            out.push_str("\t]");
        }
        other => out.push_str(&other.to_string()),
    }
}

fn hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(v) = serde_json::from_str::<Value>(text) else { return };
    let d = args_digest(&v);
    assert!(hex64(&d), "{d}");
    assert!(hex64(&args_hmac(b"fuzz-key", &v)));
    assert!(hex64(&args_hmac(b"", &v)));

    let c = canonical(&v);
    let back: Value = serde_json::from_slice(&c).expect("the canonical form is JSON");
    assert_eq!(canonical(&back), c, "the canonical form is not a fixed point");

    let mut other = String::new();
    reversed(&v, &mut other);
    let w: Value = serde_json::from_str(&other).expect("a re-rendering parses");
    assert_eq!(args_digest(&w), d, "key order or whitespace changed the digest: {other}");
    let pretty: Value = serde_json::from_str(&serde_json::to_string_pretty(&v).unwrap()).unwrap();
    assert_eq!(args_digest(&pretty), d);

    // One change, anywhere the value allows it, changes the digest.
    let changed = match &v {
        Value::Object(m) => {
            let mut m = m.clone();
            match m.iter_mut().next() {
                Some((_, item)) => *item = Value::Array(vec![item.take()]),
                None => {
                    m.insert(String::new(), Value::Null);
                }
            }
            Value::Object(m)
        }
        Value::Array(a) => {
            let mut a = a.clone();
            a.push(Value::Null);
            Value::Array(a)
        }
        Value::String(s) => Value::String(format!("{s} ")),
        Value::Bool(b) => Value::Bool(!b),
        Value::Null => Value::from(0),
        Value::Number(_) => Value::String(v.to_string()),
    };
    assert_ne!(args_digest(&changed), d, "{v} and {changed} digest the same");
});
