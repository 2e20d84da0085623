//! Values a tool's schema marks personal (`"x-personal": true`, docs/audit.md#erasure-of-a-person):
//! where they are in a call's arguments, so that the audit holds their pseudonyms, never them.

use serde_json::Value;

/// One step of a path into the arguments: a property, or every item of an array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Property(String),
    Item,
}

/// Every place `schema` marks personal: the paths of the subschemas with `"x-personal": true`,
/// under `properties` and `items`, and through `allOf`, `anyOf` and `oneOf`. Empty for a schema
/// that marks none (the commonest: nothing to do for its calls).
pub fn paths(schema: &Value) -> Vec<Vec<Step>> {
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out, 0);
    out
}

/// How deep `paths` looks: a tool's schema is the DBA's, but a cycle-free walk needs a bound.
const DEPTH: usize = 32;

fn walk(schema: &Value, at: &mut Vec<Step>, out: &mut Vec<Vec<Step>>, depth: usize) {
    let Some(map) = schema.as_object() else { return };
    if depth > DEPTH {
        return;
    }
    if map.get("x-personal") == Some(&Value::Bool(true)) && !out.contains(at) {
        out.push(at.clone());
    }
    if let Some(props) = map.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            at.push(Step::Property(name.clone()));
            walk(sub, at, out, depth + 1);
            at.pop();
        }
    }
    if let Some(items) = map.get("items") {
        at.push(Step::Item);
        walk(items, at, out, depth + 1);
        at.pop();
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for sub in map.get(key).and_then(Value::as_array).into_iter().flatten() {
            walk(sub, at, out, depth + 1);
        }
    }
}

/// The text of a personal value: a string's, a number's digits; None for anything else (an
/// object or array marked personal has its own values marked, or none).
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `args` with each personal value (at one of `paths`) replaced by `mask(its text)`, as a string;
/// the texts replaced, each once, in the order met.
pub fn masked(args: &Value, paths: &[Vec<Step>], mut mask: impl FnMut(&str) -> String) -> (Value, Vec<String>) {
    let mut out = args.clone();
    let mut seen = Vec::new();
    for path in paths {
        replace(&mut out, path, &mut mask, &mut seen);
    }
    (out, seen)
}

fn replace(v: &mut Value, path: &[Step], mask: &mut impl FnMut(&str) -> String, seen: &mut Vec<String>) {
    match path.split_first() {
        None => {
            if let Some(t) = text(v) {
                *v = Value::String(mask(&t));
                if !seen.contains(&t) {
                    seen.push(t);
                }
            }
        }
        Some((Step::Property(name), rest)) => {
            if let Some(sub) = v.as_object_mut().and_then(|m| m.get_mut(name)) {
                replace(sub, rest, mask, seen);
            }
        }
        Some((Step::Item, rest)) => {
            for item in v.as_array_mut().into_iter().flatten() {
                replace(item, rest, mask, seen);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "order_id": {"type": "string"},
                "customer_cpf": {"type": "string", "x-personal": true},
                "contact": {"type": "object", "properties": {
                    "email": {"type": "string", "x-personal": true},
                    "city": {"type": "string"}}},
                "witnesses": {"type": "array", "items": {"type": "integer", "x-personal": true}},
                "note": {"type": "string", "x-personal": false}
            }
        })
    }

    #[test]
    fn marked_values_are_found_wherever_the_schema_puts_them() {
        let found = paths(&schema());
        assert_eq!(found.len(), 3);
        let args = json!({"order_id": "7", "customer_cpf": "123.456.789-00",
                          "contact": {"email": "a@example.com", "city": "Recife"},
                          "witnesses": [11, 12, 11], "note": "x"});
        let (out, seen) = masked(&args, &found, |t| format!("<{t}>"));
        assert_eq!(
            out,
            json!({"order_id": "7", "customer_cpf": "<123.456.789-00>",
                               "contact": {"email": "<a@example.com>", "city": "Recife"},
                               "witnesses": ["<11>", "<12>", "<11>"], "note": "x"})
        );
        let mut seen = seen;
        seen.sort();
        assert_eq!(seen, vec!["11", "12", "123.456.789-00", "a@example.com"]);
    }

    #[test]
    fn a_schema_that_marks_nothing_changes_nothing() {
        assert!(paths(&json!({"type": "object", "properties": {"a": {"type": "string"}}})).is_empty());
        let args = json!({"a": "b"});
        let (out, seen) = masked(&args, &[], |_| unreachable!());
        assert_eq!(out, args);
        assert!(seen.is_empty());
    }

    #[test]
    fn missing_and_odd_values_are_left_alone() {
        let found = paths(&schema());
        let args = json!({"customer_cpf": null, "contact": "not an object", "witnesses": {"0": 1}});
        let (out, seen) = masked(&args, &found, |t| format!("<{t}>"));
        assert_eq!(out, args);
        assert!(seen.is_empty());
    }

    #[test]
    fn combinators_are_followed() {
        let s = json!({"allOf": [{"properties": {"a": {"x-personal": true}}}, {"properties": {"a": {"x-personal": true}}}]});
        assert_eq!(paths(&s), vec![vec![Step::Property("a".into())]]);
    }
}
