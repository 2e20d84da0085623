//! Tools a DBA defined with `toolgate.define_tool` (sql/registry.sql): the catalogue of their
//! bindings and the context their functions receive. `target` finds and locks what the call is
//! about, `value` says the money at stake and what is available for it, `effect` makes the
//! change. Each is `(ctx jsonb, args jsonb) RETURNS jsonb`, SECURITY DEFINER, owned by a role
//! that is not a superuser, with a pinned search_path, and executable by neither PUBLIC nor the
//! agent: checked when the tool is defined and again at every use (`toolgate.binding_fault`,
//! `check`), so a function changed later fails closed.
//!
//! Calling them is the steps' (each calls its own function, and judges its answer): `domain`
//! (target, value), `effect` (effect, request, finish), `reader` (a read tool's reader); all of
//! them inside `scope` (one subtransaction, from the target's locks to the effect) and through
//! `fmgr` (the function manager).

use pgrx::pg_sys;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::cell::RefCell;
use toolgate_core::outcome::Rule;

use super::step::{Deny, Step};
use crate::config::{cached, Cache};
use crate::{context, spi};

/// A defined tool's functions and its consent template.
#[derive(Clone, Debug)]
pub struct Binding {
    pub tool: String,
    pub(super) target: pg_sys::Oid,
    pub(super) value: Option<pg_sys::Oid>,
    pub(super) effect: pg_sys::Oid,
    /// An outbox tool's request function and endpoint (`define_outbox_tool`); `None` for a tool
    /// whose effect function makes the change in the database.
    pub outbox: Option<Outbox>,
    pub(super) consent: Option<String>,
    /// The consent template in other languages (`set_consent_translation`), by language tag.
    pub(super) translations: Option<serde_json::Map<String, Value>>,
    /// The states the target may be in when the policy row names none.
    pub target_states: Option<Vec<String>>,
    /// The amounts the tool accepts from its value function (`define_tool`'s `amounts`).
    pub amounts: Amounts,
    /// A digest of what a person's consent is given to: the definition's version (its functions'
    /// names, consent template, target states, amounts), each bound function as it is now
    /// (owner, settings, body) and an outbox tool's endpoint's base URL (a "yes" given for one
    /// host never applies to another). A proposal keeps it; a confirmation finding another is refused.
    pub definition: String,
}

/// Where an outbox tool's effect goes: the DBA's function that builds the HTTP request, and the
/// named ERP endpoint the dispatcher sends it to.
#[derive(Clone, Debug)]
pub struct Outbox {
    pub(super) request: pg_sys::Oid,
    pub endpoint: String,
    /// The DBA's follow-up in this database once the ERP has done its part, if any.
    pub(super) finish: Option<pg_sys::Oid>,
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
                JOIN pg_catalog.pg_proc p ON p.oid = pg_catalog.to_regprocedure(f.fn)), b.request, b.finish, b.endpoint, \
               (SELECT e.base_url FROM toolgate.erp_endpoints e WHERE e.name OPERATOR(pg_catalog.=) b.endpoint))), \
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

/// A binding no call can use, or a function's answer out of shape: `tool_misconfigured`, naming
/// the function and why.
pub(super) fn misconfigured(function: &str, reason: impl Into<String>) -> Deny {
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
pub(super) fn check_tool(tool: &str) -> Step<()> {
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
pub(super) fn ctx(b: &Binding, args: &Value, extra: &[(&str, Option<&Value>)]) -> pg_sys::Datum {
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

/// A read tool's reader and the JSON Pointers of the third-party text in what it returns.
#[derive(Clone, Debug)]
pub struct Reader {
    pub tool: String,
    pub(super) reader: pg_sys::Oid,
    pub(super) untrusted: Vec<String>,
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

/// The context a reader receives, as its jsonb: the verified caller and the tool; a read has no
/// conversation, key or proposal.
pub(super) fn reader_ctx(r: &Reader) -> pg_sys::Datum {
    use toolgate_core::jsonb::Member::{Str, Strs};
    context::with(|c| {
        crate::jsonb::object(&[
            ("tenant", Str(c.tenant.as_deref())),
            ("actor", Str(c.actor.as_deref())),
            ("role", Str(c.role.as_deref())),
            ("roles", Strs(&c.roles)),
            ("tool", Str(Some(&r.tool))),
        ])
    })
}
