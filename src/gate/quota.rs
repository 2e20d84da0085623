//! Step 6: calls per (tenant, person, conversation, tool), consumed in one atomic statement. Only
//! calls that passed steps 1–5 get here, and replays never do, so neither consumes anything. The
//! conversation id is the caller's to choose: the verified subject keys the count too, so another
//! person of the tenant naming the same conversation uses a count of their own.

use serde_json::json;
use toolgate_core::outcome::Rule;

use super::step::{Deny, Step};
use crate::spi;

/// Consume one call of `limit` (no limit: nothing to count). The calls used so far, after this one.
#[cfg_attr(feature = "steps", inline(never))]
pub fn consume(tenant: &str, actor: &str, conversation: &str, tool: &str, limit: Option<i32>) -> Step<Option<i32>> {
    let Some(limit) = limit else { return Ok(None) };
    let used = if limit < 1 {
        None
    } else {
        spi::one(
            "INSERT INTO toolgate.quota_usage AS q (tenant_id, actor, conversation_id, tool, used) \
             VALUES ($1, $5, $2, $3, 1) ON CONFLICT (tenant_id, actor, conversation_id, tool) \
             DO UPDATE SET used = q.used + 1, updated_at = excluded.updated_at WHERE q.used < $4 \
             RETURNING used",
            &[tenant.into(), conversation.into(), tool.into(), limit.into(), actor.into()],
            |r| spi::col::<i32>(r, 1),
        )
    };
    used.map(Some).ok_or_else(|| Deny::because(Rule::RateOverLimit, json!({"limit": limit})))
}

/// Give back the call consumed by a call the effect then refused (its state moved under it):
/// denials consume nothing. The row is already locked by this transaction.
pub fn refund(tenant: &str, actor: &str, conversation: &str, tool: &str) {
    spi::run(
        "UPDATE toolgate.quota_usage SET used = used - 1 WHERE tenant_id = $1 AND actor = $4 \
         AND conversation_id = $2 AND tool = $3 AND used > 0",
        &[tenant.into(), conversation.into(), tool.into(), actor.into()],
    );
}
