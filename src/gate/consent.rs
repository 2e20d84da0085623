//! The text a person reads before consenting (step 7): the tool's consent template, or the
//! gate's own in the tenant's language, filled with what steps 4 and 5 found; and the check of
//! a template when the tool is defined.

use rust_decimal::Decimal;
use serde_json::Value;
use toolgate_core::locale::{Language, Locale};
use toolgate_core::proposal;

use super::binding::Binding;
use super::domain::{Found, Valued};

/// A field of a bound function's answer as a consent text shows it (before quoting).
fn shown(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// The text the person reads: the DBA's template, or the gate's own in the tenant's language,
/// with every value quoted and every amount as the tenant writes it. At tier 2 and above the
/// gate adds what the account has before and after the effect.
pub fn text(
    b: &Binding,
    tenant: &str,
    locale: &Locale,
    args: &Value,
    target: &Found,
    valued: Option<&Valued>,
    tier: i32,
) -> String {
    let money = |d: Decimal| locale.money(d);
    let lookup = |name: &str| -> Option<String> {
        match name {
            "tenant" => Some(tenant.to_string()),
            "tool" => Some(b.tool.clone()),
            "value.amount" => valued.map(|v| money(v.amount)),
            "value.available" => valued.map(|v| v.available.map(money).unwrap_or_default()),
            _ => {
                if let Some(k) = name.strip_prefix("args.") {
                    Some(shown(args.get(k)))
                } else if let Some(k) = name.strip_prefix("target.") {
                    Some(shown(target.found.get(k)))
                } else {
                    name.strip_prefix("value.").and_then(|k| valued.map(|v| shown(v.said.get(k))))
                }
            }
        }
    };
    let declared = super::contract::tool(&b.tool).map(|t| t.properties).unwrap_or_default();
    let own = || default_template(locale.language, &declared, args, valued.is_some());
    // The tenant's language's translation, else the tool's template, else the gate's own.
    let translated = b.translations.as_ref().and_then(|t| t.get(locale.language.tag())).and_then(Value::as_str);
    let template = translated.map(str::to_string).or_else(|| b.consent.clone()).unwrap_or_else(own);
    // define_tool checked the template's names; a hand-edited row falls back to the gate's own.
    let mut text =
        proposal::fill(&template, lookup).unwrap_or_else(|_| proposal::fill(&own(), lookup).expect("known names"));
    if let Some((v, left)) = valued.and_then(|v| v.available.map(|left| (v, left))).filter(|_| tier >= 2) {
        let account = v.account.as_deref().map(proposal::quoted).unwrap_or_default();
        text.push_str(&locale.language.balance(&account, &money(left), &money(left - v.amount)));
    }
    text
}

/// The gate's own text: the tool, its target, the tenant, the value, and each argument the call
/// has of those the tool's schema declares (`declared`, the DBA's names, sorted by name),
/// but the key. Never a name the model wrote: with `additionalProperties` allowed, an argument's
/// name is the model's text, and it could write a fake notice around the consent sentence.
fn default_template(language: Language, declared: &[String], args: &Value, valued: bool) -> String {
    let mut t = String::from(language.run_template());
    if valued {
        t.push_str(language.amount_template());
    }
    let listed: Vec<String> = declared
        .iter()
        .filter(|k| *k != "idempotency_key" && !k.contains(['{', '}']) && args.get(k.as_str()).is_some())
        .map(|k| format!("{} {{args.{k}}}", proposal::quoted(k)))
        .collect();
    if !listed.is_empty() {
        t.push_str(&format!("{} {}.", language.arguments(), listed.join(", ")));
    }
    t
}

/// Check a consent template at definition: every placeholder is one the gate can fill for this
/// tool (`args.` names must be properties of its schema; `value.` needs a value function;
/// `target.` and `value.` name fields of what those functions return, shown empty if absent).
pub fn check_template(template: &str, schema: &Value, has_value: bool) -> Result<(), String> {
    let properties = schema.get("properties").and_then(Value::as_object);
    let field = |k: &str| !k.is_empty();
    proposal::fill(template, |name| {
        let known = match name {
            "tenant" | "tool" => true,
            _ => {
                if let Some(k) = name.strip_prefix("args.") {
                    properties.is_some_and(|p| p.contains_key(k))
                } else if let Some(k) = name.strip_prefix("target.") {
                    field(k)
                } else {
                    name.strip_prefix("value.").is_some_and(|k| has_value && field(k))
                }
            }
        };
        known.then(String::new)
    })
    .map(|_| ())
}
