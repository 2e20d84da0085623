//! The Rust functions behind the SQL surface. The agent's entry points `confirm`, `call` and
//! `read` are declared in `sql/api.sql` and `sql/registry.sql` as `LANGUAGE c` functions on these
//! symbols, SECURITY DEFINER with a pinned `search_path` (the contract's `request_close`,
//! `request_purchase_part` and `read_order` are SQL functions over `call` and `read`); the others
//! are internal and granted to no client role.

use pgrx::callconv::{Arg, ArgAbi};
use pgrx::nullable::Nullable;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::JsonB;
use pgrx::{PgLogLevel, PgTryBuilder};
use serde_json::{json, Value};
use toolgate_core::contract::{self, Contract};
use toolgate_core::token;

use crate::error::{AdminError, GateError};
use crate::gate::contract::Args;
use crate::gate::{self, Call, Listing};
use crate::jsonb::Jsonb;
use crate::{audit, subxact};

/// A `jsonb` argument, read as PostgreSQL stores it: no text is rendered and parsed again. A
/// number Rust cannot hold exactly (1e400) is still a `schema_invalid` outcome (the contract
/// judges each number's text), and a datum larger than `MAX_ARGS_BYTES` is never read at all: its
/// size alone refuses it.
pub struct JsonbArgs(Args<'static>);

impl FromDatum for JsonbArgs {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<JsonbArgs> {
        if is_null {
            return None;
        }
        unsafe {
            // The size as stored, read from the header without detoasting.
            if pg_sys::toast_raw_datum_size(datum) > contract::MAX_ARGS_BYTES {
                return Some(JsonbArgs(Args::Oversize));
            }
            Some(JsonbArgs(Args::Jsonb(Some(crate::jsonb::value(datum)))))
        }
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for JsonbArgs {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe { arg.unbox_arg_using_from_datum().unwrap_or_else(|| panic!("argument {index} must not be null")) }
    }
    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        unsafe { arg.unbox_arg_using_from_datum().into() }
    }
}

pgrx::pgrx_sql_entity_graph::impl_sql_translatable!(JsonbArgs, arg_only = "jsonb");

/// The arguments of an entry point (NULL: none).
fn received(args: Option<JsonbArgs>) -> Args<'static> {
    args.map_or(Args::Jsonb(None), |JsonbArgs(args)| args)
}

/// Every agent entry point's body. A read-only transaction (or a standby) is refused before
/// anything is read, with one fixed error and a LOG line: no token is judged, so the error says
/// nothing about it. Any error the body raises reaches the client as its SQLSTATE and message
/// only: never a detail (it may quote data) or a Rust backtrace; a panic becomes one fixed
/// internal error, its message kept for the server log.
fn guarded<T>(entry: &str, body: impl FnOnce() -> T + std::panic::UnwindSafe) -> T {
    // The call's verified context (`toolgate.current_tenant()`) lives exactly as long as this.
    let _held = crate::context::Held::start();
    if unsafe { pg_sys::XactReadOnly } {
        audit::log_refusal(entry, "read_only_transaction");
        GateError::ReadOnly.raise();
    }
    PgTryBuilder::new(body).catch_others(|caught| sanitized(entry, caught)).execute()
}

fn sanitized(entry: &str, caught: pg_sys::panic::CaughtError) -> ! {
    use pg_sys::panic::CaughtError;
    match caught {
        CaughtError::PostgresError(e) | CaughtError::ErrorReport(e) => {
            ErrorReport::new(e.sql_error_code(), e.message().to_string(), "pg_toolgate").report(PgLogLevel::ERROR);
            unreachable!("ERROR does not return")
        }
        CaughtError::RustPanic { ereport, .. } => {
            audit::log_refusal(entry, &format!("internal error: {}", ereport.message()));
            GateError::Internal.raise()
        }
    }
}

/// The audit keeps the tool's name: one that no tool could have is kept as a fixed text.
fn tool_name(tool: Option<&str>) -> &str {
    tool.filter(|t| contract::is_tool_name(t)).unwrap_or("(not a tool name)")
}

/// The tenant a `tenant_*` entry point was routed by; NULL is no tenant's (never a tenant id).
fn routed_by(tenant: Option<&str>) -> Option<&str> {
    Some(tenant.unwrap_or_default())
}

#[cfg_attr(feature = "steps", inline(never))]
fn write_call(
    tool: Option<&str>,
    identity: Option<&str>,
    conversation_id: Option<&str>,
    args: Option<JsonbArgs>,
    routed: Option<&str>,
) -> Jsonb {
    let tool = tool_name(tool);
    guarded(tool, || {
        let (replied, _) = gate::request(Call { tool, identity, conversation_id, args: received(args), routed });
        replied.jsonb()
    })
}

fn read_call(tool: Option<&str>, identity: Option<&str>, args: Option<JsonbArgs>, routed: Option<&str>) -> Jsonb {
    let tool = tool_name(tool);
    guarded(tool, || Jsonb::of(&gate::read(identity, tool, received(args), routed).to_json()))
}

/// Any write tool a DBA defined (`toolgate.define_tool`).
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn call(identity: Option<&str>, conversation_id: Option<&str>, tool: Option<&str>, args: Option<JsonbArgs>) -> Jsonb {
    write_call(tool, identity, conversation_id, args, None)
}

/// `call` routed by the tenant (a Citus cluster runs it on the node holding the tenant's rows).
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn tenant_call(
    tenant: Option<&str>,
    identity: Option<&str>,
    conversation_id: Option<&str>,
    tool: Option<&str>,
    args: Option<JsonbArgs>,
) -> Jsonb {
    write_call(tool, identity, conversation_id, args, routed_by(tenant))
}

/// Any read tool a DBA defined (`toolgate.define_read_tool`).
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn read(identity: Option<&str>, tool: Option<&str>, args: Option<JsonbArgs>) -> Jsonb {
    read_call(tool, identity, args, None)
}

/// `read` routed by the tenant.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn tenant_read(tenant: Option<&str>, identity: Option<&str>, tool: Option<&str>, args: Option<JsonbArgs>) -> Jsonb {
    read_call(tool, identity, args, routed_by(tenant))
}

/// The tools the caller's tenant and role may call (`toolgate.tools`), for an agent host to list.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn tools(identity: Option<&str>) -> Jsonb {
    guarded("tools", || Jsonb::of(&gate::tools(identity).to_json()))
}

#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn confirm(identity: Option<&str>, confirmation: Option<&str>) -> Jsonb {
    guarded("confirm", || gate::confirm(identity, confirmation, None).jsonb())
}

/// `confirm` routed by the tenant.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn tenant_confirm(tenant: Option<&str>, identity: Option<&str>, confirmation: Option<&str>) -> Jsonb {
    guarded("confirm", || gate::confirm(identity, confirmation, routed_by(tenant)).jsonb())
}

/// An approver's decision on a proposal (docs/approvals.md).
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn approve(identity: Option<&str>, proposal_id: Option<&str>, decision: Option<&str>, word: Option<&str>) -> Jsonb {
    guarded("approve", || gate::approve(identity, proposal_id, decision, word, None).jsonb())
}

/// `approve` routed by the tenant.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn tenant_approve(
    tenant: Option<&str>,
    identity: Option<&str>,
    proposal_id: Option<&str>,
    decision: Option<&str>,
    word: Option<&str>,
) -> Jsonb {
    guarded("approve", || gate::approve(identity, proposal_id, decision, word, routed_by(tenant)).jsonb())
}

/// The proposals an approver may decide now.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn pending(identity: Option<&str>) -> Jsonb {
    guarded("pending", || Jsonb::of(&gate::listing(identity, None, Listing::Pending).to_json()))
}

/// `pending` routed by the tenant.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn tenant_pending(tenant: Option<&str>, identity: Option<&str>) -> Jsonb {
    guarded("pending", || Jsonb::of(&gate::listing(identity, routed_by(tenant), Listing::Pending).to_json()))
}

/// What was decided on the tools an approver approves.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn approval_history(identity: Option<&str>) -> Jsonb {
    guarded("approval_history", || Jsonb::of(&gate::listing(identity, None, Listing::History).to_json()))
}

/// `approval_history` routed by the tenant.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn tenant_approval_history(tenant: Option<&str>, identity: Option<&str>) -> Jsonb {
    guarded("approval_history", || Jsonb::of(&gate::listing(identity, routed_by(tenant), Listing::History).to_json()))
}

/// The tenant's audit, for a person of an auditor role (docs/console.md).
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn audit_trail(identity: Option<&str>, filters: Option<JsonB>) -> Jsonb {
    guarded("audit_trail", || Jsonb::of(&gate::audit_trail(identity, None, filters.map(|f| f.0)).to_json()))
}

/// `audit_trail` routed by the tenant.
#[pg_extern(volatile, parallel_unsafe, sql = false)]
fn tenant_audit_trail(tenant: Option<&str>, identity: Option<&str>, filters: Option<JsonB>) -> Jsonb {
    guarded("audit_trail", || {
        Jsonb::of(&gate::audit_trail(identity, routed_by(tenant), filters.map(|f| f.0)).to_json())
    })
}

/// A dry run of a write call: the real gate in a subtransaction that is rolled back, so the
/// verdict is exactly what the call would get now, and nothing (audit, quota, ledger, proposal,
/// ERP) is kept.
#[pg_extern(volatile, parallel_unsafe)]
fn gate_explain(tool: &str, identity: Option<&str>, conversation_id: Option<&str>, args: Option<&str>) -> JsonB {
    guarded("explain_call", || explain(tool, identity, conversation_id, args))
}

fn explain(tool: &str, identity: Option<&str>, conversation_id: Option<&str>, args: Option<&str>) -> JsonB {
    let call = Call { tool, identity, conversation_id, args: Args::Text(args), routed: None };
    let (replied, audit) = subxact::rolled_back(move || audit::dry_run(move || gate::request(call)));
    let reply = replied.reply;
    let steps: Vec<Value> = audit
        .steps
        .iter()
        .map(|v| {
            let mut step = json!({"step": v.step.as_str(), "verdict": if v.rule.is_some() { "deny" } else { "pass" }});
            if let Some(rule) = v.rule {
                step["rule"] = json!(rule);
            }
            if !v.detail.is_null() {
                step["detail"] = v.detail.clone();
            }
            step
        })
        .collect();
    let decided_by = audit.steps.iter().find(|v| v.rule.is_some()).map(|v| v.step.as_str());
    JsonB(json!({
        "dry_run": true,
        "outcome": reply.outcome,
        "rule": reply.rule,
        "decided_by": decided_by,
        "steps": steps,
        "reply": reply.to_json(),
    }))
}

/// An outbox intent's finish function, at its settlement (`toolgate.settle_outbox`, the only
/// caller: no role but the extension's owner may execute it). NULL when the tool has none.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn outbox_finish(intent: JsonB, erp: JsonB) -> Option<JsonB> {
    crate::gate::effect::finish(&intent.0, &erp.0).map(JsonB)
}

/// The 32 raw bytes of an Ed25519 public key given as JWK `x` or PEM.
/// `value` marked all through as untrusted third-party text, as a read tool's untrusted pointers
/// mark what they name: an ERP's answer in an outbox intent's reply (`settle_outbox`).
#[pg_extern(immutable, strict, parallel_safe)]
fn mark_untrusted(value: JsonB) -> JsonB {
    let mut value = value.0;
    toolgate_core::untrusted::mark_at(&mut value, "");
    JsonB(value)
}

/// `value` as one segment of an outbox request's path, percent-encoded whole (a DBA's request
/// function: `'/orders/' || toolgate.path_segment(args->>'ref')`); a value that would climb out of
/// the endpoint's base path (`.`, `..`, `../x`, encoded or not) or is empty is refused.
#[pg_extern(immutable, strict, parallel_safe)]
fn path_segment(value: &str) -> String {
    toolgate_core::request::path_segment(value).unwrap_or_else(|e| AdminError::PathSegment(e).raise())
}

#[pg_extern(immutable, strict, parallel_safe)]
fn parse_public_key(key: &str) -> Vec<u8> {
    token::parse_public_key(key).unwrap_or_else(|e| AdminError::PublicKey(e).raise()).to_vec()
}

/// Refuse a tool schema that does not compile as draft 2020-12 or reaches outside the database.
#[pg_extern(immutable, strict, parallel_safe)]
fn check_tool_schema(schema: JsonB) -> bool {
    Contract::compile(&schema.0).map(|_| true).unwrap_or_else(|e| AdminError::Schema(e).raise())
}

/// The role that called, as SET ROLE left it: inside a SECURITY DEFINER function `current_user`
/// is the owner, so privilege checks and "changed by" use this instead.
#[pg_extern(stable, parallel_safe)]
fn caller() -> String {
    unsafe {
        let name = pg_sys::GetUserNameFromId(pg_sys::GetOuterUserId(), false);
        std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()
    }
}

/// Tell every backend that configuration table `relid` changed (called by its statement
/// trigger): their cached copies of keys, tools, policy rows and switches are dropped.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn signal_config_change(relid: pg_sys::Oid) {
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(relid) }
}

/// Refuse a name no tool may have (`contract::is_tool_name`: the one rule, for `define_tool`,
/// `define_read_tool` and the entry points alike).
#[pg_extern(immutable, parallel_safe)]
fn check_tool_name(tool: Option<&str>) -> bool {
    tool.is_some_and(contract::is_tool_name) || AdminError::ToolName.raise()
}

/// Check a tenant's locale for `toolgate.set_tenant_locale`: a language the gate writes, an ISO
/// 4217 code, a minor unit (given, or ISO 4217's for a code it lists), a money format read from
/// 1234.56. Returns the minor unit to keep.
#[pg_extern(immutable, parallel_safe)]
fn check_locale(language: &str, currency: &str, money_format: &str, minor_unit: Option<i32>) -> i32 {
    use toolgate_core::locale::{Currency, Language, MoneyFormat};
    let tags = || Language::ALL.iter().map(|(t, _)| *t).collect::<Vec<_>>().join(", ");
    let checked = Language::parse(language)
        .ok_or_else(|| format!("language {language:?} is not one the gate writes ({})", tags()))
        .and_then(|_| MoneyFormat::parse(money_format))
        .and_then(|_| Currency::new(currency, minor_unit));
    match checked {
        Ok(currency) => currency.minor_unit as i32,
        Err(e) => AdminError::Locale(e).raise(),
    }
}

/// Refuse a consent template `define_tool` cannot fill for this tool: an unknown placeholder, an
/// `args.` name its schema does not have, a `value.` name without a value function.
#[pg_extern(immutable, parallel_safe)]
fn check_consent_template(template: &str, schema: JsonB, has_value: bool) -> bool {
    crate::gate::consent::check_template(template, &schema.0, has_value)
        .map(|_| true)
        .unwrap_or_else(|e| AdminError::Template(e).raise())
}
