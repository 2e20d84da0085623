//! Canonical digests of arguments (RFC 8785 JSON Canonicalization Scheme).
//!
//! The idempotency ledger compares `args_digest`; the audit keeps `args_hmac`, a keyed digest
//! that lets identical inputs be correlated without storing them.

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// RFC 8785 canonical form: sorted keys, normalized numbers, no insignificant whitespace.
pub fn canonical(value: &Value) -> Vec<u8> {
    serde_jcs::to_vec(value).expect("a serde_json::Value always canonicalizes")
}

/// SHA-256 of the canonical form, lowercase hex.
pub fn args_digest(value: &Value) -> String {
    hex(&Sha256::digest(canonical(value)))
}

/// HMAC-SHA256 of the canonical form under `key`, lowercase hex.
pub fn args_hmac(key: &[u8], value: &Value) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(&canonical(value));
    hex(&mac.finalize().into_bytes())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

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
}
