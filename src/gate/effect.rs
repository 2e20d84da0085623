//! Step 8: the ERP change, made by the tool's effect function. It runs in the caller's
//! transaction with the ledger settlement and the audit row, so either all three commit or none
//! does.

use serde_json::json;
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
    let (tenant, proposal_id) = context::with(|c| (c.tenant.clone(), c.proposal.clone()));
    let key = intent.args.get("idempotency_key").and_then(|k| k.as_str()).unwrap_or_default();
    spi::run(
        "INSERT INTO toolgate.outbox (tenant_id, tool, idempotency_key, args, target, value, proposal_id, request, \
         endpoint) VALUES ($1, $2, $3, $4::jsonb, $5, $6::jsonb, $7::uuid, $8::jsonb, $9)",
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
