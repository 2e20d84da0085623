//! Step 8: the ERP change, made by the tool's effect function. It runs in the caller's
//! transaction with the ledger settlement and the audit row, so either all three commit or none
//! does.

use serde_json::{json, Value};
use toolgate_core::outcome::{Reply, Rule};
use toolgate_core::proposal;

use super::authorization::writes_enabled;
use super::binding::{self, check, ctx, Binding, Outbox};
use super::domain::{Found, Intent, Valued};
use super::scope::{invoke, refusal, scoped};
use super::step::{Deny, Step};
use crate::{context, spi};

/// Apply `intent`. The DBA's statements cannot carry the kill switch: it is read now, under the
/// newest committed state, after the target function locked every row the effect writes and
/// right before the effect, so a switch turned off while the call waited for those rows is seen.
#[cfg_attr(feature = "steps", inline(never))]
pub fn apply(intent: &Intent) -> Step<Reply> {
    if !writes_enabled(&intent.binding.tool) {
        return Err(Deny::because(Rule::WriteDisabled, json!({"reason": "turned_off_meanwhile"})));
    }
    if let Some(outbox) = &intent.binding.outbox {
        return enqueue(intent, outbox);
    }
    let (result, summary) = effect(&intent.binding, intent.args, &intent.target, intent.valued.as_ref())?;
    Ok(Reply::succeeded(result, summary))
}

/// An outbox tool's step 8: the request its function builds, written to `toolgate.outbox` with
/// what the steps before found, in the call's transaction (the ledger settles the key with the
/// PENDING reply after this, and the audit row follows): nothing leaves the database before the
/// call commits, and a retry with the same key replays the ledger's reply instead of coming here.
fn enqueue(intent: &Intent, outbox: &Outbox) -> Step<Reply> {
    let b = &intent.binding;
    let request = request(b, outbox, intent.args, &intent.target, intent.valued.as_ref())?;
    let (tenant, proposal_id, actor, role, conversation) = context::with(|c| {
        (c.tenant.clone(), c.proposal.clone(), c.actor.clone(), c.role.clone(), c.conversation.clone())
    });
    let key = intent.args.get("idempotency_key").and_then(|k| k.as_str()).unwrap_or_default();
    spi::run(
        "INSERT INTO toolgate.outbox (tenant_id, tool, idempotency_key, args, target, value, proposal_id, request, \
         endpoint, actor, role, conversation_id) \
         VALUES ($1, $2, $3, $4::jsonb, $5, $6::jsonb, $7::uuid, $8::jsonb, $9, $10, $11, $12)",
        &[
            tenant.into(),
            b.tool.as_str().into(),
            key.into(),
            crate::jsonb::arg(intent.args),
            intent.target().into(),
            intent.valued.as_ref().map(|v| v.said.to_string()).into(),
            proposal_id.into(),
            crate::jsonb::arg(&request),
            outbox.endpoint.as_str().into(),
            actor.into(),
            role.into(),
            conversation.into(),
        ],
    );
    // Delivered at commit, to the dispatchers that listen (one per transaction: no payload).
    if crate::OUTBOX_NOTIFY.get() {
        spi::run("SELECT pg_catalog.pg_notify('toolgate_outbox', '')", &[]);
    }
    let target = proposal::quoted(intent.target());
    let summary = format!(
        "{} on {target}: accepted and queued for the ERP (endpoint {}), not yet done. Call again with the same \
         idempotency_key to learn its state; a new key would ask for it a second time.",
        b.tool, outbox.endpoint
    );
    let result = json!({"state": "PENDING", "tool": b.tool, "target": intent.target(), "endpoint": outbox.endpoint});
    Ok(Reply::pending(result, summary))
}

/// An outbox intent's follow-up, at the dispatcher's settlement (`toolgate.settle_outbox`, once
/// the ERP has done its part): the tool's finish function, run in the context of the call that
/// made the intent (its verified tenant, actor, role, conversation and proposal, which the outbox
/// kept), so the DBA's row-level security on `toolgate.current_tenant()` holds as it did for the
/// call. `intent` is the outbox row as jsonb, `erp` what the ERP answered. NULL when the tool has
/// no finish function; `{"done": true, "result": …}`, or `{"done": false, "error": …}` (why, with
/// the SQLSTATE of an error it raised; nothing it wrote is kept).
pub fn finish(intent: &Value, erp: &Value) -> Option<Value> {
    let text = |name: &str| intent.get(name).and_then(Value::as_str).map(str::to_string);
    let (tool, tenant) = (text("tool")?, text("tenant_id")?);
    let binding = binding::of(&tool)?;
    let _held = context::Held::start();
    context::resume(context::Context {
        tenant: Some(tenant),
        actor: text("actor"),
        role: text("role"),
        roles: text("role").into_iter().collect(),
        conversation: text("conversation_id"),
        proposal: text("proposal_id"),
    });
    let args = intent.get("args").cloned().unwrap_or(Value::Null);
    let target = text("target").unwrap_or_default();
    let value = intent.get("value").filter(|v| !v.is_null());
    Some(match call_finish(&binding, &args, &target, value, erp)? {
        Ok(result) => json!({"done": true, "result": result}),
        Err(error) => json!({"done": false, "error": error}),
    })
}

/// Step 8's effect. NULL means the state moved under the call (`state_not_allowed`); anything
/// but an object, or an exception, is `effect_failed` and leaves nothing of the effect.
fn effect(b: &Binding, args: &Value, target: &Found, valued: Option<&Valued>) -> Step<(Value, String)> {
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
fn request(b: &Binding, outbox: &Outbox, args: &Value, target: &Found, valued: Option<&Valued>) -> Step<Value> {
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
        if toolgate_core::request::climbs(path) {
            return Err(bad("path must not hold . or .. segments, raw or percent-encoded (toolgate.path_segment)"));
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
fn call_finish(
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
