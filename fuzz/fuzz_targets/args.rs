#![no_main]
//! Gate step 2: `parse_args` and `Contract::check` with the schemas of the maintenance example's
//! write tools (examples/maintenance/maintenance.sql), as the extension runs them on the text of
//! the caller's `jsonb`. Nothing may panic; every violation names a JSON Pointer; what passes is
//! within the bounds (size, depth, numbers a double holds exactly, so that no two accepted values
//! share a digest); and each schema's verdict agrees with a hand-written reading of the same rules.

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::sync::OnceLock;
use toolgate_core::contract::{self, Contract, Violation, MAX_ARGS_BYTES, MAX_DEPTH};
use toolgate_core::digest;

/// The write tools' schemas as the example defines them: the `$schema$`-quoted blocks of
/// examples/maintenance/maintenance.sql that hold a retry key (the read tool's has none).
fn contracts() -> &'static [(&'static str, Contract)] {
    static C: OnceLock<Vec<(&'static str, Contract)>> = OnceLock::new();
    C.get_or_init(|| {
        let sql = include_str!("../../examples/maintenance/maintenance.sql");
        let blocks: Vec<&str> =
            sql.split("$schema$").skip(1).step_by(2).filter(|text| text.contains("idempotency_key")).collect();
        assert_eq!(blocks.len(), 2, "the maintenance example defines two write tools");
        blocks
            .iter()
            .map(|text| {
                let schema: Value = serde_json::from_str(text).expect("the example's schema is JSON");
                let tool = if text.contains("part_id") { "request_purchase_part" } else { "request_close" };
                (tool, Contract::compile(&schema).expect("the example's schema compiles"))
            })
            .collect()
    })
}

fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

const EXACT: u64 = 1 << 53;

/// Every number is one a double holds exactly (RFC 8785 reads numbers as doubles).
fn numbers_exact(v: &Value) -> bool {
    match v {
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.unsigned_abs() <= EXACT,
            (None, Some(u)) => u <= EXACT,
            _ => n.as_f64().is_some_and(|f| f.is_finite() && f.abs() <= EXACT as f64),
        },
        Value::Array(a) => a.iter().all(numbers_exact),
        Value::Object(m) => m.values().all(numbers_exact),
        _ => true,
    }
}

/// The first integer in `v`, moved by one: another value the bounds also accept.
fn nudge_an_integer(v: &mut Value) -> bool {
    match v {
        Value::Number(n) => match n.as_i64() {
            Some(i) if i.unsigned_abs() < EXACT => {
                *v = Value::from(i + 1);
                true
            }
            _ => false,
        },
        Value::Array(a) => a.iter_mut().any(nudge_an_integer),
        Value::Object(m) => m.values_mut().any(nudge_an_integer),
        _ => false,
    }
}

fn pointer_ok(e: &Violation) -> bool {
    e.instance_path.is_empty() || e.instance_path.starts_with('/')
}

/// A string a person can read as it is: no control, format or line-separator character.
fn visible(v: &Value) -> bool {
    static HIDDEN: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    let hidden = HIDDEN.get_or_init(|| regex::Regex::new(r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]").expect("a valid regex"));
    v.as_str().is_some_and(|s| !hidden.is_match(s))
}

fn chars_between(v: &Value, min: usize, max: usize) -> bool {
    v.as_str().is_some_and(|s| (min..=max).contains(&s.chars().count()))
}

fn matches(v: &Value, allowed: impl Fn(char) -> bool, min: usize, max: usize) -> bool {
    v.as_str().is_some_and(|s| (min..=max).contains(&s.chars().count()) && s.chars().all(&allowed))
}

/// JSON Schema's "integer": a number with no fractional part (3.0 included).
fn integer_between(v: &Value, min: i64, max: i64) -> bool {
    match v.as_i64() {
        Some(i) => (min..=max).contains(&i),
        None => v.as_f64().is_some_and(|f| f.fract() == 0.0 && f >= min as f64 && f <= max as f64),
    }
}

/// The shipped schemas' rules, read by hand (docs/sql.md).
fn oracle(tool: &str, v: &Value) -> bool {
    let Some(m) = v.as_object() else { return false };
    let order = |v: &Value| matches(v, |c| c.is_ascii_digit(), 1, 10);
    let name = |v: &Value| matches(v, |c| c.is_ascii_alphanumeric() || "._-".contains(c), 1, 40);
    let key = |v: &Value| chars_between(v, 8, 80);
    let has = |names: &[&str]| m.len() == names.len() && names.iter().all(|n| m.contains_key(*n));
    match tool {
        "request_close" => {
            has(&["order_id", "reason", "idempotency_key"])
                && order(&m["order_id"])
                && chars_between(&m["reason"], 8, 120)
                && visible(&m["reason"])
                && key(&m["idempotency_key"])
        }
        _ => {
            has(&["order_id", "part_id", "quantity", "cost_center", "idempotency_key"])
                && order(&m["order_id"])
                && name(&m["part_id"])
                && integer_between(&m["quantity"], 1, 100)
                && name(&m["cost_center"])
                && key(&m["idempotency_key"])
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // Postgres hands the gate valid UTF-8 text; anything else never reaches it.
    let Ok(text) = std::str::from_utf8(data) else { return };
    let value = match contract::parse_args(Some(text)) {
        Err(errors) => {
            assert!(!errors.is_empty(), "refused without a reason");
            assert!(errors.iter().all(pointer_ok), "{errors:?}");
            return;
        }
        Ok(v) => v,
    };
    assert!(text.len() <= MAX_ARGS_BYTES);
    assert!(depth(&value) <= MAX_DEPTH, "nesting {} passed the bounds", depth(&value));
    for (tool, contract) in contracts() {
        let errors = contract.check(&value);
        assert!(errors.iter().all(pointer_ok), "{errors:?}");
        let keys: Vec<_> = errors.iter().map(|e| (&e.instance_path, &e.keyword)).collect();
        assert!(keys.windows(2).all(|w| w[0] <= w[1]), "violations not in a stable order: {keys:?}");
        assert_eq!(
            errors.is_empty(),
            oracle(tool, &value),
            "{tool}: the schema and the rules disagree on {value} (violations: {errors:?})"
        );
    }
    assert!(numbers_exact(&value), "a number no double holds exactly passed the bounds: {value}");
    let d = digest::args_digest(&value);
    let mut other = value.clone();
    if nudge_an_integer(&mut other) {
        assert_ne!(digest::args_digest(&other), d, "{value} and {other} share a digest");
    }
});
