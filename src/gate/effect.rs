//! Step 8: the ERP change. It runs in the caller's transaction with the ledger settlement and the
//! audit row, so either all three commit or none does.

use serde_json::{json, Value};
use toolgate_core::outcome::Rule;
use toolgate_core::token::Identity;

use super::domain::Intent;
use super::{Deny, Step};
use crate::spi;

/// Apply `intent` for `who`. The state is checked again in the same statement that changes it.
pub fn apply(who: &Identity, intent: &Intent, key: &str, proposal_id: Option<&str>) -> Step<(Value, String)> {
    match intent {
        Intent::Close { order_id, reason } => {
            let changed = spi::run(
                "UPDATE toolgate.work_orders SET status = 'close_requested', updated_at = pg_catalog.now() \
                 WHERE tenant_id = $1 AND order_id = $2 AND status = 'open' AND inspected RETURNING 1",
                &[who.tenant.clone().into(), order_id.clone().into()],
            );
            if changed == 0 {
                return Err(Deny::because(Rule::StateNotAllowed, json!({"reason": "state_changed"})));
            }
            let request_id = spi::one(
                "INSERT INTO toolgate.close_requests (tenant_id, order_id, reason, requested_by, \
                 idempotency_key, proposal_id) VALUES ($1, $2, $3, $4, $5, $6::uuid) RETURNING request_id",
                &[
                    who.tenant.clone().into(),
                    order_id.clone().into(),
                    reason.clone().into(),
                    who.sub.clone().into(),
                    key.into(),
                    proposal_id.into(),
                ],
                |r| spi::col::<i64>(r, 1),
            )
            .expect("INSERT … RETURNING returns the row");
            Ok((
                json!({"order_id": order_id, "status": "close_requested", "request_id": request_id}),
                format!("Close of work order {order_id} requested (ERP request {request_id})."),
            ))
        }
    }
}
