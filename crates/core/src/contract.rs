//! Step 2 of the gate: the argument contract.
//!
//! Bounds come first (size, nesting, numbers), so absurd input never reaches the validator;
//! then the tool's JSON Schema (draft 2020-12), compiled once and reused. Every violation names
//! its JSON Pointer and keyword; messages are masked so they never echo what the caller sent.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Arguments larger than this are refused before parsing: their text's bytes, or for `jsonb`
/// arguments the datum's (as stored, uncompressed), judged before it is read.
pub const MAX_ARGS_BYTES: usize = 16 * 1024;
/// Objects and arrays nested deeper than this are refused before validation.
pub const MAX_DEPTH: usize = 16;
/// Largest integer a JSON number can carry exactly through an IEEE double.
const MAX_EXACT_INTEGER: f64 = 9_007_199_254_740_992.0;
/// Bounds for the caller's conversation id.
pub const MAX_CONVERSATION_ID_CHARS: usize = 128;

/// One contract violation, named by where it is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    #[serde(rename = "instancePath")]
    pub instance_path: String,
    pub keyword: String,
    pub message: String,
}

impl Violation {
    pub fn new(path: impl Into<String>, keyword: &str, message: impl Into<String>) -> Violation {
        Violation { instance_path: path.into(), keyword: keyword.to_string(), message: message.into() }
    }
}

/// Arguments refused by their size alone, before they were rendered or parsed.
pub fn oversize() -> Vec<Violation> {
    vec![Violation::new("", "maxBytes", format!("arguments exceed {MAX_ARGS_BYTES} bytes"))]
}

/// Parse the arguments text (Postgres' rendering of the `jsonb` the caller passed), refusing
/// what is too big, too deep or not a finite, exactly representable number.
pub fn parse_args(text: Option<&str>) -> Result<Value, Vec<Violation>> {
    let text = text.ok_or_else(|| vec![Violation::new("", "type", "arguments are required")])?;
    if text.len() > MAX_ARGS_BYTES {
        return Err(oversize());
    }
    let value: Value = serde_json::from_str(text).map_err(|e| {
        let what = if e.to_string().contains("out of range") {
            "a number is out of range"
        } else if e.to_string().contains("recursion limit") {
            "arguments are nested too deeply"
        } else {
            "arguments are not valid JSON"
        };
        vec![Violation::new("", "json", what)]
    })?;
    let mut errors = Vec::new();
    check_bounds(&value, &String::new, 0, &mut errors);
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

/// Arguments the caller sent as `jsonb`, read as PostgreSQL stores them (no text in between): the
/// same bounds as `parse_args` but the size (the datum's, judged before it was read).
pub fn bounded(value: Option<serde_json::Value>) -> Result<Value, Vec<Violation>> {
    let value = value.ok_or_else(|| vec![Violation::new("", "type", "arguments are required")])?;
    let mut errors = Vec::new();
    check_bounds(&value, &String::new, 0, &mut errors);
    if errors.is_empty() {
        Ok(value)
    } else {
        Err(errors)
    }
}

/// The decimal `literal` is exactly the double `f`'s shortest decimal form.
fn same_number(literal: &str, f: f64) -> bool {
    let decimal = |s: &str| {
        if s.contains(['e', 'E']) {
            rust_decimal::Decimal::from_scientific(s).ok()
        } else {
            rust_decimal::Decimal::from_str_exact(s).ok()
        }
    };
    match (decimal(literal), decimal(&f.to_string())) {
        (Some(sent), Some(held)) => sent == held,
        _ => false,
    }
}

fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// `path` makes the value's JSON Pointer, only for a violation: a valid value (nearly every one)
/// costs no string per member.
fn check_bounds(value: &Value, path: &dyn Fn() -> String, depth: usize, errors: &mut Vec<Violation>) {
    match value {
        Value::Number(n) => {
            // Numbers keep the text they were sent as, and the schema judges that text. RFC 8785
            // then reads every number as a double: a number the double does not hold exactly
            // (a larger integer, 0.99999999999999999999) would share its digest with a neighbour,
            // and one key could replay another call's arguments. Such numbers are refused.
            let exact = n.as_f64().is_some_and(|f| f.abs() <= MAX_EXACT_INTEGER && same_number(&n.to_string(), f));
            if !exact {
                errors.push(Violation::new(
                    path(),
                    "number",
                    "number is not finite, out of range or more precise than a double",
                ));
            }
        }
        Value::Array(_) | Value::Object(_) if depth >= MAX_DEPTH => {
            errors.push(Violation::new(path(), "maxDepth", format!("nesting deeper than {MAX_DEPTH}")));
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_bounds(item, &|| format!("{}/{i}", path()), depth + 1, errors);
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                check_bounds(item, &|| format!("{}/{}", path(), escape_pointer(k)), depth + 1, errors);
            }
        }
        _ => {}
    }
}

/// A tool's name as `toolgate.define_tool` allows it: 1 to 63 lower-case ASCII letters, digits
/// and `_`, starting with a letter.
pub fn is_tool_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_lowercase()
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_')
}

/// The caller's conversation id: 1..=128 characters, none of them control characters
/// (it reaches the audit row and the log line).
pub fn check_conversation_id(id: Option<&str>) -> Result<&str, Violation> {
    match id {
        Some(s)
            if !s.is_empty() && s.chars().count() <= MAX_CONVERSATION_ID_CHARS && !s.chars().any(char::is_control) =>
        {
            Ok(s)
        }
        _ => Err(Violation::new(
            "",
            "conversationId",
            format!("conversation_id must be 1..{MAX_CONVERSATION_ID_CHARS} printable characters"),
        )),
    }
}

/// What the audit keeps of a violation's JSON Pointer. Its segments are property names the model
/// wrote (a schema that allows extra properties validates names it never declared) and array
/// indexes; the audit must keep neither the model's prose nor a secret pasted as a name. A segment
/// is kept when it is a plain name of at most 40 letters, digits, `_` or `-` that does not look
/// like a token (`eyJ…`, a JWS's base64url header); any other becomes `~`, and past 8 segments the
/// rest becomes one `…`. The reply to the caller keeps the whole path.
pub fn audit_path(path: &str) -> String {
    const MAX_SEGMENTS: usize = 8;
    const MAX_NAME: usize = 40;
    let plain = |s: &str| {
        !s.is_empty()
            && s.len() <= MAX_NAME
            && !s.starts_with("eyJ")
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    let mut kept = String::new();
    for (i, segment) in path.split('/').skip(1).enumerate() {
        if i == MAX_SEGMENTS {
            kept.push_str("/…");
            break;
        }
        kept.push('/');
        kept.push_str(if plain(segment) { segment } else { "~" });
    }
    kept
}

/// A tool's compiled schema.
pub struct Contract {
    validator: jsonschema::Validator,
}

impl Contract {
    /// Compile a schema as draft 2020-12. No `$ref` is ever fetched: the crate is built without
    /// its HTTP and file resolvers, so an external reference fails compilation.
    pub fn compile(schema: &Value) -> Result<Contract, String> {
        jsonschema::draft202012::options()
            .should_validate_formats(true)
            .build(schema)
            .map(|validator| Contract { validator })
            .map_err(|e| format!("schema does not compile: {}", e.masked()))
    }

    /// Every violation of the schema, in a stable order.
    pub fn check(&self, args: &Value) -> Vec<Violation> {
        let mut errors: Vec<Violation> = self
            .validator
            .iter_errors(args)
            .map(|e| Violation::new(e.instance_path().as_str(), e.kind().keyword(), e.masked().to_string()))
            .collect();
        errors.sort_by(|a, b| (&a.instance_path, &a.keyword).cmp(&(&b.instance_path, &b.keyword)));
        errors
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn audit_paths_keep_plain_names_and_indexes_only() {
        assert_eq!(audit_path(""), "");
        assert_eq!(audit_path("/order_id"), "/order_id");
        assert_eq!(audit_path("/items/3/part-id"), "/items/3/part-id");
        // A name the model wrote with prose, newlines or a pasted token is not kept.
        assert_eq!(audit_path("/ignore previous instructions"), "/~");
        assert_eq!(audit_path("/a\nAVISO"), "/~");
        let token = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ1c2VyLTE3In0.c2lnbmF0dXJl";
        assert_eq!(audit_path(&format!("/{token}")), "/~");
        assert_eq!(audit_path("/eyJhbGciOiJFZERTQSJ9"), "/~");
        assert_eq!(audit_path(&format!("/{}", "k".repeat(41))), "/~");
        assert_eq!(audit_path(&format!("/{}", "k".repeat(40))), format!("/{}", "k".repeat(40)));
        // Deep paths are cut.
        assert_eq!(audit_path("/a/b/c/d/e/f/g/h/i/j"), "/a/b/c/d/e/f/g/h/…");
    }

    #[test]
    fn tool_names_are_short_lower_case_identifiers() {
        assert!(is_tool_name("emitir_reembolso") && is_tool_name("r2"));
        for bad in ["", "Probe", "2fa", "a-b", "a b", "ação", &"a".repeat(64)] {
            assert!(!is_tool_name(bad), "{bad:?}");
        }
    }

    use super::*;
    use serde_json::json;

    fn close_schema() -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "required": ["order_id", "reason", "idempotency_key"],
            "properties": {
                "order_id": {"type": "string", "pattern": "^[0-9]{1,10}$"},
                "reason": {"type": "string", "minLength": 8, "maxLength": 120},
                "idempotency_key": {"type": "string", "minLength": 8, "maxLength": 80}
            }
        })
    }

    fn good() -> Value {
        json!({"order_id": "742", "reason": "Inspeção validada", "idempotency_key": "close-742-a"})
    }

    #[test]
    fn valid_args_pass() {
        let c = Contract::compile(&close_schema()).unwrap();
        assert!(c.check(&good()).is_empty());
    }

    #[test]
    fn extra_property_is_named() {
        let c = Contract::compile(&close_schema()).unwrap();
        let mut args = good();
        args["dangerous_extra"] = json!(true);
        let errors = c.check(&args);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].keyword, "additionalProperties");
        assert_eq!(errors[0].instance_path, "");
        assert!(errors[0].message.contains("dangerous_extra"), "{}", errors[0].message);
    }

    #[test]
    fn values_are_never_echoed_in_messages() {
        let c = Contract::compile(&close_schema()).unwrap();
        let mut args = good();
        args["order_id"] = json!("SECRET-742");
        let errors = c.check(&args);
        assert_eq!(errors[0].keyword, "pattern");
        assert!(!errors[0].message.contains("SECRET"), "{}", errors[0].message);
    }

    #[test]
    fn wrong_shape_gets_json_pointer_paths() {
        let c = Contract::compile(&close_schema()).unwrap();
        let errors = c.check(&json!({"order_id": "74a", "reason": 5, "idempotency_key": "short"}));
        let paths: Vec<(&str, &str)> = errors.iter().map(|e| (e.instance_path.as_str(), e.keyword.as_str())).collect();
        assert_eq!(paths, vec![("/idempotency_key", "minLength"), ("/order_id", "pattern"), ("/reason", "type")]);
    }

    #[test]
    fn tenant_in_args_is_an_unknown_property() {
        let c = Contract::compile(&close_schema()).unwrap();
        let mut args = good();
        args["tenant"] = json!("shopping-b");
        assert_eq!(c.check(&args)[0].keyword, "additionalProperties");
    }

    #[test]
    fn remote_refs_are_never_fetched() {
        let schema = json!({"$ref": "https://example.com/schema.json"});
        assert!(Contract::compile(&schema).is_err());
    }

    #[test]
    fn null_and_garbage_are_refused() {
        assert_eq!(parse_args(None).unwrap_err()[0].keyword, "type");
        assert_eq!(parse_args(Some("{nope")).unwrap_err()[0].keyword, "json");
    }

    #[test]
    fn oversized_args_are_refused_before_parsing() {
        let big = format!("{{\"reason\": \"{}\"}}", "x".repeat(MAX_ARGS_BYTES));
        assert_eq!(parse_args(Some(&big)).unwrap_err()[0].keyword, "maxBytes");
    }

    #[test]
    fn the_size_limit_is_sixteen_kib_inclusive() {
        // `{"reason": "x…x"}` padded to exactly 16 KiB passes the bounds; one byte more does not.
        let padded = |n: usize| format!("{{\"reason\": \"{}\"}}", "x".repeat(n - 14));
        assert_eq!(padded(16 * 1024).len(), 16 * 1024);
        assert!(parse_args(Some(&padded(16 * 1024))).is_ok());
        assert_eq!(parse_args(Some(&padded(16 * 1024 + 1))).unwrap_err()[0].keyword, "maxBytes");
    }

    #[test]
    fn deep_objects_are_refused_at_their_pointer() {
        // Sixteen levels of objects pass; the seventeenth is refused where it starts, its keys
        // escaped as JSON Pointer tokens.
        let nest = |levels: usize| format!("{}1{}", "{\"a/b~\": ".repeat(levels), "}".repeat(levels));
        assert!(parse_args(Some(&nest(16))).is_ok());
        let errors = parse_args(Some(&nest(17))).unwrap_err();
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].keyword, "maxDepth");
        assert_eq!(errors[0].instance_path, "/a~1b~0".repeat(16));
    }

    #[test]
    fn absurd_nesting_is_refused() {
        let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
        assert_eq!(parse_args(Some(&deep)).unwrap_err()[0].keyword, "maxDepth");
        let very_deep = format!("{}1{}", "[".repeat(500), "]".repeat(500));
        assert_eq!(parse_args(Some(&very_deep)).unwrap_err()[0].keyword, "json");
    }

    #[test]
    fn numbers_must_be_finite_and_exact() {
        // Postgres renders 1e400 in full; no double holds it.
        let huge = format!("{{\"quantity\": 1{}}}", "0".repeat(400));
        let e = parse_args(Some(&huge)).unwrap_err();
        assert_eq!((e[0].instance_path.as_str(), e[0].keyword.as_str()), ("/quantity", "number"));
        let e = parse_args(Some("{\"quantity\": 1e30}")).unwrap_err();
        assert_eq!((e[0].instance_path.as_str(), e[0].keyword.as_str()), ("/quantity", "number"));
        assert!(parse_args(Some("{\"quantity\": NaN}")).is_err());
        assert!(parse_args(Some("{\"quantity\": 3}")).is_ok());
        assert!(parse_args(Some("{\"quantity\": 2.5}")).is_ok());
    }

    /// The security review's F12: 0.99999999999999999999 was read as the double 1.0 before the
    /// schema saw it, and passed `"type": "integer", "minimum": 1`. A number is judged as sent: one
    /// a double would round is refused before validation; one a double holds passes through.
    #[test]
    fn numbers_a_double_would_round_are_refused_as_sent() {
        let quantity = Contract::compile(&json!({"type": "object", "properties": {
            "quantity": {"type": "integer", "minimum": 1, "maximum": 100}}}))
        .unwrap();
        for text in [
            "{\"quantity\": 0.99999999999999999999}",
            "{\"quantity\": 1.00000000000000000001}",
            "{\"quantity\": 99.999999999999999999999}",
            "{\"quantity\": 0.1000000000000000000000000000001}",
        ] {
            let e = parse_args(Some(text)).unwrap_err();
            assert_eq!((e[0].instance_path.as_str(), e[0].keyword.as_str()), ("/quantity", "number"), "{text}");
        }
        for text in ["{\"quantity\": 0.1}", "{\"quantity\": 12.50}", "{\"quantity\": 1e-7}", "{\"quantity\": -0}"] {
            assert!(parse_args(Some(text)).is_ok(), "{text} was refused");
        }
        // What passes the bounds is validated as the number it is.
        let checked = |text: &str| quantity.check(&parse_args(Some(text)).unwrap());
        assert!(checked("{\"quantity\": 3.0}").is_empty());
        assert_eq!(
            checked("{\"quantity\": 0.5}").iter().map(|v| v.keyword.as_str()).collect::<Vec<_>>(),
            ["minimum", "type"]
        );
    }

    /// Found while writing the digest property tests: 9007199254740993 is an i64, but RFC 8785
    /// reads every number as a double, so it digested like 9007199254740992 and the idempotency
    /// ledger would have replayed one call for the other instead of `idempotency_key_reused`.
    #[test]
    fn integers_a_double_cannot_hold_exactly_are_refused() {
        for text in ["{\"q\": 9007199254740993}", "{\"q\": -9007199254740993}", "{\"q\": 18446744073709551615}"] {
            assert!(parse_args(Some(text)).is_err(), "{text} passed the bounds");
        }
        for text in ["{\"q\": 9007199254740992}", "{\"q\": -9007199254740992}", "{\"q\": 0}"] {
            assert!(parse_args(Some(text)).is_ok(), "{text} was refused");
        }
    }

    #[test]
    fn conversation_ids_are_bounded_and_printable() {
        assert!(check_conversation_id(Some("conv-1")).is_ok());
        assert!(check_conversation_id(None).is_err());
        assert!(check_conversation_id(Some("")).is_err());
        assert!(check_conversation_id(Some("a\nb")).is_err());
        assert!(check_conversation_id(Some(&"c".repeat(129))).is_err());
    }
}
