//! Step 8: the ERP change, made by the tool's effect function. It runs in the caller's
//! transaction with the ledger settlement and the audit row, so either all three commit or none
//! does.

use serde_json::{json, Value};
use toolgate_core::outcome::{Reply, Rule};
use toolgate_core::proposal;

use super::authorization::writes_enabled;
use super::binding::Outbox;
use super::domain::Intent;
use super::{binding, Deny, Step};
use crate::{context, spi};

/// Apply `intent`. The DBA's statements cannot carry the kill switch: it is read now, under the
/// newest committed state, after the target function locked every row the effect writes and
/// right before the effect, so a switch turned off while the call waited for those rows is seen.
pub fn apply(intent: &Intent) -> Step<Reply> {
    if !writes_enabled(&intent.binding.tool) {
        return Err(Deny::because(Rule::WriteDisabled, json!({"reason": "turned_off_meanwhile"})));
    }
    if let Some(outbox) = &intent.binding.outbox {
        return enqueue(intent, outbox);
    }
    let (result, summary) = binding::effect(&intent.binding, intent.args, &intent.target, intent.valued.as_ref())?;
    Ok(Reply::succeeded(result, summary))
}

/// An outbox tool's step 8: the request its function builds, written to `toolgate.outbox` with
/// what the steps before found, in the call's transaction (the ledger settles the key with the
/// PENDING reply after this, and the audit row follows): nothing leaves the database before the
/// call commits, and a retry with the same key replays the ledger's reply instead of coming here.
fn enqueue(intent: &Intent, outbox: &Outbox) -> Step<Reply> {
    let b = &intent.binding;
    let request = binding::request(b, outbox, intent.args, &intent.target, intent.valued.as_ref())?;
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
            b.tool.clone().into(),
            key.into(),
            crate::jsonb::arg(intent.args),
            intent.target().into(),
            intent.valued.as_ref().map(|v| v.said.to_string()).into(),
            proposal_id.into(),
            crate::jsonb::arg(&request),
            outbox.endpoint.clone().into(),
            actor.into(),
            role.into(),
            conversation.into(),
        ],
    );
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
    Some(match binding::finish(&binding, &args, &target, value, erp)? {
        Ok(result) => json!({"done": true, "result": result}),
        Err(error) => json!({"done": false, "error": error}),
    })
}
