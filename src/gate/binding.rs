//! Tools a DBA defined with `toolgate.define_tool` (sql/registry.sql): the gate's steps 4–8 for
//! any ERP, through the DBA's own functions. `target` finds and locks what the call is about,
//! `value` says the money at stake and what is available for it, `effect` makes the change. Each
//! is `(ctx jsonb, args jsonb) RETURNS jsonb`, SECURITY DEFINER, owned by a role that is not a
//! superuser, with a pinned search_path, and executable by neither PUBLIC nor the agent: checked
//! when the tool is defined and again at every use (`toolgate.binding_fault`), so a function
//! changed later fails closed. The gate runs them inside one subtransaction (`scope`), from the
//! target's locks to the effect: what they raise, or return out of shape, becomes an outcome,
//! never a half-made effect.

use pgrx::pg_sys;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::cell::{Cell, RefCell};
use std::str::FromStr;
use toolgate_core::locale::{Currency, Language, Locale};
use toolgate_core::outcome::Rule;
use toolgate_core::proposal;
use toolgate_core::token::Identity;

use super::{fmgr, Deny, Step, StepName};
use crate::audit::Audit;
use crate::config::{cached, Cache};
use crate::subxact::{self, Failure};
use crate::{context, spi};

/// A defined tool's functions and its consent template.
#[derive(Clone, Debug)]
pub struct Binding {
    pub tool: String,
    target: pg_sys::Oid,
    value: Option<pg_sys::Oid>,
    effect: pg_sys::Oid,
    /// An outbox tool's request function and endpoint (`define_outbox_tool`); `None` for a tool
    /// whose effect function makes the change in the database.
    pub outbox: Option<Outbox>,
    consent: Option<String>,
    /// The consent template in other languages (`set_consent_translation`), by language tag.
    translations: Option<serde_json::Map<String, Value>>,
    /// The states the target may be in when the policy row names none.
    pub target_states: Option<Vec<String>>,
    /// The amounts the tool accepts from its value function (`define_tool`'s `amounts`).
    pub amounts: Amounts,
    /// A digest of what a person's consent is given to: the definition's version (its functions'
    /// names, consent template, target states, amounts) and each bound function as it is now
    /// (owner, settings, body). A proposal keeps it; a confirmation finding another is refused.
    pub definition: String,
}

/// Where an outbox tool's effect goes: the DBA's function that builds the HTTP request, and the
/// named ERP endpoint the dispatcher sends it to.
#[derive(Clone, Debug)]
pub struct Outbox {
    request: pg_sys::Oid,
    pub endpoint: String,
    /// The DBA's follow-up in this database once the ERP has done its part, if any.
    finish: Option<pg_sys::Oid>,
}

/// The amounts a tool's value function may answer with; any other is `value_over_limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amounts {
    /// More than zero (the default).
    Positive,
    /// Zero or more.
    NonNegative,
    /// Any, credits (amounts below zero) included.
    Any,
}

impl Amounts {
    fn of(word: Option<String>) -> Amounts {
        match word.as_deref() {
            Some("non_negative") => Amounts::NonNegative,
            Some("any") => Amounts::Any,
            _ => Amounts::Positive,
        }
    }

    /// Whether `amount` is one this tool accepts.
    pub fn admit(self, amount: Decimal) -> bool {
        match self {
            Amounts::Positive => amount > Decimal::ZERO,
            Amounts::NonNegative => amount >= Decimal::ZERO,
            Amounts::Any => true,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Amounts::Positive => "positive",
            Amounts::NonNegative => "non_negative",
            Amounts::Any => "any",
        }
    }
}

thread_local! {
    static BINDINGS: RefCell<Cache<String, Option<Binding>>> = RefCell::new(Cache::new());
}

/// The binding of `tool`, its functions found by the names it keeps (a function dropped since is
/// the invalid OID, which `check` refuses before anything is called); `None` for no write tool.
pub fn of(tool: &str) -> Option<Binding> {
    cached(&BINDINGS, tool.to_string(), || {
        spi::latest(
            "SELECT coalesce(pg_catalog.to_regprocedure(b.target)::oid, 0), pg_catalog.to_regprocedure(b.value)::oid, \
             coalesce(pg_catalog.to_regprocedure(b.effect)::oid, 0), b.consent, b.target_states, b.amounts, \
             pg_catalog.md5(pg_catalog.concat_ws(E'\\x1f', b.version, b.target, b.value, b.effect, \
               (SELECT pg_catalog.string_agg(pg_catalog.concat_ws(E'\\x1e', f.name, p.oid, p.proowner, p.prosecdef, \
                 p.proconfig::text, p.prosrc, p.probin), E'\\x1d' ORDER BY f.name) \
                FROM (VALUES ('target', b.target), ('value', b.value), ('effect', b.effect), ('request', b.request), \
                             ('finish', b.finish)) f(name, fn) \
                JOIN pg_catalog.pg_proc p ON p.oid = pg_catalog.to_regprocedure(f.fn)), b.request, b.finish, b.endpoint)), \
             CASE WHEN b.request IS NOT NULL THEN coalesce(pg_catalog.to_regprocedure(b.request)::oid, 0) END, \
             b.endpoint, CASE WHEN b.finish IS NOT NULL THEN coalesce(pg_catalog.to_regprocedure(b.finish)::oid, 0) END, \
             b.consent_translations::text \
             FROM toolgate.tool_bindings b WHERE b.tool = $1 AND b.kind = 'write'",
            &[tool.into()],
            |r| {
                Ok(Binding {
                    tool: tool.to_string(),
                    target: spi::col(r, 1)?,
                    value: r.get(2)?,
                    effect: spi::col(r, 3)?,
                    outbox: match (r.get::<pg_sys::Oid>(8)?, r.get::<String>(9)?) {
                        (Some(request), Some(endpoint)) => Some(Outbox { request, endpoint, finish: r.get(10)? }),
                        _ => None,
                    },
                    consent: r.get(4)?,
                    translations: r
                        .get::<String>(11)?
                        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                        .and_then(|v| v.as_object().cloned()),
                    target_states: r.get(5)?,
                    amounts: Amounts::of(r.get(6)?),
                    definition: spi::col(r, 7)?,
                })
            },
        )
    })
}

/// What the target function found: its id and state in the DBA's own words, and the whole object
/// (which `value` and `effect` receive in their context).
#[derive(Clone, Debug)]
pub struct Target {
    pub id: String,
    pub state: Option<String>,
    pub found: Value,
}

/// What the value function said: the amount at stake, the account it draws on, what is left
/// there, and the most this target allows.
#[derive(Clone, Debug)]
pub struct Valued {
    pub amount: Decimal,
    pub account: Option<String>,
    pub available: Option<Decimal>,
    pub limit: Option<Decimal>,
    pub said: Value,
}

fn misconfigured(function: &str, reason: impl Into<String>) -> Deny {
    Deny::because(Rule::ToolMisconfigured, json!({"function": function, "reason": reason.into()}))
}

/// The functions as they are now: a function changed since `define_tool` checked it (no longer
/// SECURITY DEFINER, granted to the agent, owned by a superuser, dropped) refuses the call.
pub fn check(b: &Binding) -> Step<()> {
    check_tool(&b.tool)
}

thread_local! {
    static FAULTS: RefCell<Cache<String, Option<String>>> = RefCell::new(Cache::new());
}

/// Judged again whenever a function, a role or a membership changed (`config`), or the binding.
fn check_tool(tool: &str) -> Step<()> {
    match cached(&FAULTS, tool.to_string(), || fault_of(tool)) {
        Some(reason) => Err(misconfigured("binding", reason)),
        None => Ok(()),
    }
}

fn fault_of(tool: &str) -> Option<String> {
    spi::latest(
        "SELECT coalesce(toolgate.binding_fault(target, 'target'), toolgate.binding_fault(effect, 'effect'), \
         toolgate.binding_fault(value, 'value'), toolgate.binding_fault(reader, 'reader'), \
         toolgate.binding_fault(request, 'request'), toolgate.binding_fault(finish, 'finish')) \
         FROM toolgate.tool_bindings WHERE tool = $1",
        &[tool.into()],
        |r| r.get::<String>(1),
    )
    .flatten()
}

/// The context every bound function receives, as its jsonb: the verified call, never the
/// arguments' word (but for the key the call is retried with), and what the steps before found.
fn ctx(b: &Binding, args: &Value, extra: &[(&str, Option<&Value>)]) -> pg_sys::Datum {
    use toolgate_core::jsonb::Member::{Str, Strs, Value as Of};
    context::with(|c| {
        let mut members = vec![
            ("tenant", Str(c.tenant.as_deref())),
            ("actor", Str(c.actor.as_deref())),
            ("role", Str(c.role.as_deref())),
            ("roles", Strs(&c.roles)),
            ("conversation", Str(c.conversation.as_deref())),
            ("tool", Str(Some(&b.tool))),
            ("idempotency_key", args.get("idempotency_key").map_or(Str(None), Of)),
            ("proposal_id", Str(c.proposal.as_deref())),
        ];
        members.extend(extra.iter().map(|(k, v)| (*k, v.map_or(Str(None), Of))));
        crate::jsonb::object(&members)
    })
}

thread_local! {
    /// The bound function running now: an error raised inside a scope while it runs is its own.
    static RUNNING: Cell<Option<&'static str>> = const { Cell::new(None) };
    /// A bound function's answer was refused in this scope: what it wrote must not stay.
    static REFUSED: Cell<bool> = const { Cell::new(false) };
}

/// Run `f`, a part of the gate that calls the tool's bound functions, in one subtransaction.
/// One, not one a function: the rows the target function locks are then changed by the effect
/// under the same transaction id (a row locked by one subtransaction and updated by another has
/// PostgreSQL record both as a multixact, a cost on every such call). A bound function that
/// raises, or whose answer is refused, rolls the whole scope back: nothing it wrote stays, and
/// neither does what the gate wrote in the scope after the target. An error it raises becomes
/// `tool_misconfigured` (`effect_failed` from the effect), its SQLSTATE audited; the gate's own
/// errors, and the ones a client retries, go on up. A refusal of the gate's own (a policy, a
/// quota, a proposal no longer live) keeps what was written, as any step's refusal does.
pub fn scope<T>(audit: &mut Audit, f: impl FnOnce(&mut Audit) -> Step<T>) -> Step<T> {
    let result = scoped(true, || f(&mut *audit));
    result.map_err(|(deny, step)| match step {
        // Recorded as the step that called the function would have recorded its refusal.
        Some(step) => audit.step(step, Err::<(), Deny>(deny)).unwrap_err(),
        None => deny,
    })
}

/// `scope`, rolled back even when `f` succeeds (`keep` false): how a reader runs. An error a
/// bound function raised comes back with the step it belongs to.
fn scoped<T>(keep: bool, f: impl FnOnce() -> Step<T>) -> Result<T, (Deny, Option<StepName>)> {
    let outer = (RUNNING.replace(None), REFUSED.replace(false));
    let settings = fmgr::Settings::fix();
    let out = subxact::attempt(f, |result| !keep || (result.is_err() && REFUSED.get()), || RUNNING.get().is_some());
    settings.restore();
    let running = RUNNING.replace(outer.0);
    REFUSED.set(outer.1);
    out.map_err(|failure| match failure {
        Failure::Refused(deny) => (deny, None),
        Failure::Raised(sqlstate) => {
            let function = running.unwrap_or("binding");
            let (rule, step) = match function {
                "effect" | "request" | "finish" => (Rule::EffectFailed, StepName::Effect),
                "value" => (Rule::ToolMisconfigured, StepName::Domain),
                _ => (Rule::ToolMisconfigured, StepName::Authorization),
            };
            let detail = json!({"function": function, "reason": "raised", "sqlstate": sqlstate});
            (Deny::because(rule, detail), Some(step))
        }
    })
}

/// Forget that an answer was refused in this scope (and say whether one was): the target
/// `confirm` locks before the proposal is decided for, whose verdict is given later
/// (`domain::judged`).
pub fn forget_refusal() -> bool {
    REFUSED.replace(false)
}

/// The refused answer forgotten earlier is given now: the scope rolls back as if it came now.
pub fn remember_refusal() {
    REFUSED.set(true);
}

/// Call `function` (the tool's `name` function) with `ctx` and `args`, inside a scope; `shape`
/// judges what it returned, and a refused answer rolls the scope back.
fn invoke<T>(
    function: pg_sys::Oid,
    name: &'static str,
    ctx: pg_sys::Datum,
    args: &Value,
    shape: impl FnOnce(Option<Value>) -> Step<T>,
) -> Step<T> {
    RUNNING.set(Some(name));
    let answer = fmgr::call(function, ctx, args);
    RUNNING.set(None);
    let judged = shape(answer);
    if judged.is_err() {
        REFUSED.set(true);
    }
    judged
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `d` as a JSON number with its exact digits.
fn json_number(d: Decimal) -> Value {
    serde_json::from_str(&d.to_string()).expect("a decimal's text is a JSON number")
}

fn decimal(v: Option<&Value>) -> Option<Decimal> {
    let text = text_of(v?)?;
    Decimal::from_str(&text).or_else(|_| Decimal::from_scientific(&text)).ok()
}

/// Step 4's target, found and locked by the DBA's function in the caller's tenant. NULL is
/// `target_not_found`; so is a target of another tenant, whatever the function did.
pub fn target(b: &Binding, who: &Identity, args: &Value) -> Step<Target> {
    check(b)?;
    invoke(b.target, "target", ctx(b, args, &[]), args, |out| {
        let out = refusal("target", out)?;
        let Some(found) = out.filter(|v| !v.is_null()) else {
            return Err(Deny::new(Rule::TargetNotFound));
        };
        let id = found.get("id").and_then(text_of);
        let tenant = found.get("tenant").and_then(Value::as_str);
        match (id, tenant) {
            (Some(id), Some(tenant)) if tenant == who.tenant => {
                Ok(Target { id, state: found.get("state").and_then(text_of), found: found.clone() })
            }
            (Some(_), Some(_)) => Err(Deny::because(Rule::TargetNotFound, json!({"reason": "other_tenant"}))),
            _ => Err(misconfigured("target", "must return an object with \"id\" and \"tenant\"")),
        }
    })
}

/// Step 5's value, when the tool has a value function, in the tenant's `currency`.
pub fn value(b: &Binding, args: &Value, target: &Target, currency: &Currency) -> Step<Option<Valued>> {
    let Some(function) = b.value else { return Ok(None) };
    let said = invoke(function, "value", ctx(b, args, &[("target", Some(&target.found))]), args, |out| {
        let said = refusal("value", out)?;
        let said = said.filter(|v| v.is_object()).ok_or_else(|| misconfigured("value", "must return an object"))?;
        let exact =
            decimal(said.get("amount")).ok_or_else(|| misconfigured("value", "\"amount\" must be a decimal"))?;
        // One rounding, the gate's, to the tenant's currency's minor unit (half away from zero,
        // as numeric rounds): the person reads this amount, the audit keeps it, and the effect
        // receives it (ctx->'value'->'amount'), never the finer one the function said.
        let amount = currency.round(exact);
        let mut said = said;
        if amount != exact {
            said["amount"] = json_number(amount);
        }
        let optional = |name: &str| match said.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => decimal(Some(v))
                .map(Some)
                .ok_or_else(|| misconfigured("value", format!("\"{name}\" must be a decimal"))),
        };
        let available = optional("available")?;
        let limit = optional("limit")?;
        Ok(Valued { amount, account: said.get("account").and_then(text_of), available, limit, said })
    });
    said.map(Some)
}

/// A refusal a bound function named instead of answering NULL: `{"refused": RULE}` (that member
/// alone), RULE one of `Rule::NAMEABLE` (`target_not_found`, `state_not_allowed`,
/// `value_over_limit`, `budget_exceeded`). It is the call's outcome, as if the gate had found it,
/// and nothing the function wrote stays (the scope rolls back). Another word, or more members
/// beside it, is a misconfiguration (`effect_failed` from the effect): a function cannot speak for
/// the gate's other steps. Any other answer comes back to be judged as before.
fn refusal(function: &str, out: Option<Value>) -> Step<Option<Value>> {
    let Some(Value::Object(answer)) = &out else { return Ok(out) };
    let Some(named) = answer.get("refused") else { return Ok(out) };
    let rule = named.as_str().and_then(Rule::named_by_function).filter(|_| answer.len() == 1);
    match rule {
        Some(rule) => Err(Deny::because(rule, json!({"reason": "refused_by_function", "function": function}))),
        None => {
            let reason = "may refuse only with {\"refused\": target_not_found | state_not_allowed | value_over_limit | budget_exceeded}";
            Err(match function {
                "effect" => Deny::because(Rule::EffectFailed, json!({"function": function, "reason": reason})),
                _ => misconfigured(function, reason),
            })
        }
    }
}

/// Step 8's effect. NULL means the state moved under the call (`state_not_allowed`); anything
/// but an object, or an exception, is `effect_failed` and leaves nothing of the effect.
pub fn effect(b: &Binding, args: &Value, target: &Target, valued: Option<&Valued>) -> Step<(Value, String)> {
    let ctx = ctx(b, args, &[("target", Some(&target.found)), ("value", valued.map(|v| &v.said))]);
    let result = invoke(b.effect, "effect", ctx, args, |out| match refusal("effect", out)? {
        None | Some(Value::Null) => Err(Deny::because(Rule::StateNotAllowed, json!({"reason": "state_changed"}))),
        Some(result) if result.is_object() => Ok(result),
        Some(_) => Err(Deny::because(Rule::EffectFailed, json!({"reason": "must return an object"}))),
    })?;
    let summary = result
        .get("summary")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{} applied to {}.", b.tool, proposal::quoted(&target.id)));
    Ok((result, summary))
}

/// The HTTP methods a request function may ask for.
const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// Step 8 of an outbox tool: the HTTP request its request function builds from the call, as the
/// effect function would be called (the target, the value, the proposal at a confirmation).
/// It must be `{"method": …, "path": "/…", "body": …}` (`body` optional, nothing else: the
/// dispatcher adds the base URL, the credentials and the idempotency key); an exception, NULL or
/// another shape is `effect_failed`, and nothing of the call is written.
pub fn request(b: &Binding, outbox: &Outbox, args: &Value, target: &Target, valued: Option<&Valued>) -> Step<Value> {
    let ctx = ctx(b, args, &[("target", Some(&target.found)), ("value", valued.map(|v| &v.said))]);
    invoke(outbox.request, "request", ctx, args, |out| {
        let bad = |reason: &str| Deny::because(Rule::EffectFailed, json!({"function": "request", "reason": reason}));
        let Some(Value::Object(request)) = out else {
            return Err(bad("must return an object {method, path, body}"));
        };
        if request.keys().any(|k| !matches!(k.as_str(), "method" | "path" | "body")) {
            return Err(bad("must return only method, path and body"));
        }
        let method = request.get("method").and_then(Value::as_str);
        if !method.is_some_and(|m| METHODS.contains(&m)) {
            return Err(bad("method must be one of GET, POST, PUT, PATCH, DELETE"));
        }
        let path = request.get("path").and_then(Value::as_str).unwrap_or_default();
        let relative = path.starts_with('/') && !path.starts_with("//") && path.len() <= 2048;
        if !relative || path.chars().any(|c| c.is_whitespace() || c.is_control() || c == '#') {
            return Err(bad("path must be a path on the endpoint, starting with one /"));
        }
        let mut request = Value::Object(request);
        if request.get("body").is_none() {
            request["body"] = Value::Null;
        }
        Ok(request)
    })
}

/// An outbox tool's follow-up once the ERP has done its part (the dispatcher's settlement, not a
/// call): its `finish` function, called as the effect would be (the intent's arguments; in the
/// context the call's tenant, actor, role, conversation and proposal, `target` as `{"id": …}`,
/// the value, and `erp`, what the ERP answered), in a subtransaction of its own. `None` when the
/// tool has no finish function. An object is done (`Ok`, its answer); NULL, another shape, an
/// exception or a binding changed unsafely since is not (`Err`, why, with the SQLSTATE): nothing
/// it wrote stays, and the intent is PARTIAL until a later settlement finishes it.
pub fn finish(
    b: &Binding,
    args: &Value,
    target: &str,
    value: Option<&Value>,
    erp: &Value,
) -> Option<Result<Value, Value>> {
    let function = b.outbox.as_ref()?.finish?;
    if let Err(deny) = check(b) {
        return Some(Err(deny.detail));
    }
    let target = json!({ "id": target });
    let ctx = ctx(b, args, &[("target", Some(&target)), ("value", value), ("erp", Some(erp))]);
    let done = scoped(true, || {
        invoke(function, "finish", ctx, args, |out| match out {
            Some(result) if result.is_object() => Ok(result),
            None | Some(Value::Null) => Err(Deny::because(Rule::EffectFailed, json!({"reason": "not_done"}))),
            Some(_) => Err(Deny::because(Rule::EffectFailed, json!({"reason": "must return an object"}))),
        })
    });
    Some(done.map_err(|(deny, _)| deny.detail))
}

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
    target: &Target,
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

/// A read tool's reader and the JSON Pointers of the third-party text in what it returns.
#[derive(Clone, Debug)]
pub struct Reader {
    pub tool: String,
    reader: pg_sys::Oid,
    untrusted: Vec<String>,
}

thread_local! {
    static READERS: RefCell<Cache<String, Option<Reader>>> = RefCell::new(Cache::new());
}

/// The reader of the read tool `tool`, if it is one.
pub fn reader(tool: &str) -> Option<Reader> {
    cached(&READERS, tool.to_string(), || {
        spi::latest(
            "SELECT coalesce(pg_catalog.to_regprocedure(reader)::oid, 0), untrusted FROM toolgate.tool_bindings \
             WHERE tool = $1 AND kind = 'read'",
            &[tool.into()],
            |r| {
                Ok(Reader {
                    tool: tool.to_string(),
                    reader: spi::col(r, 1)?,
                    untrusted: r.get::<Vec<String>>(2)?.unwrap_or_default(),
                })
            },
        )
    })
}

/// Run the reader: what it returns, with the strings at its untrusted pointers marked, and how
/// many were. NULL is `target_not_found`, and so is an answer that names another tenant than the
/// caller's in a `tenant` field. Nothing the reader writes is kept: its scope is rolled
/// back whatever happens, after its answer is read.
pub fn read(r: &Reader, args: &Value) -> Step<(Value, usize)> {
    check_tool(&r.tool)?;
    let ctx = context::with(|c| {
        use toolgate_core::jsonb::Member::{Str, Strs};
        crate::jsonb::object(&[
            ("tenant", Str(c.tenant.as_deref())),
            ("actor", Str(c.actor.as_deref())),
            ("role", Str(c.role.as_deref())),
            ("roles", Strs(&c.roles)),
            ("tool", Str(Some(&r.tool))),
        ])
    });
    let mut value = scoped(false, || {
        invoke(r.reader, "reader", ctx, args, |out| match out {
            None | Some(Value::Null) => Err(Deny::new(Rule::TargetNotFound)),
            Some(v) if v.is_object() || v.is_array() => Ok(v),
            Some(_) => Err(misconfigured("reader", "must return an object or an array")),
        })
    })
    .map_err(|(deny, _)| deny)?;
    // Where the answer names its tenant (the object's, or each element's, "tenant"), it must be
    // the caller's: a reader that forgot its tenant filter answers as if nothing was found.
    // A `tenant` that is not text is the gate's tenant id in no form: the reader is misconfigured.
    let tenant = context::with(|c| c.tenant.clone());
    fn named(v: &Value) -> Option<Option<&str>> {
        v.get("tenant").map(Value::as_str)
    }
    let mut named_tenants = std::iter::once(&value).chain(value.as_array().into_iter().flatten()).filter_map(named);
    if let Some(found) = named_tenants.find(|t| *t != tenant.as_deref()) {
        return Err(match found {
            Some(_) => Deny::because(Rule::TargetNotFound, json!({"reason": "other_tenant"})),
            None => misconfigured("reader", "\"tenant\" must be the gate's tenant id, as text"),
        });
    }
    let marked = r.untrusted.iter().map(|p| toolgate_core::untrusted::mark_at(&mut value, p)).sum();
    Ok((value, marked))
}
