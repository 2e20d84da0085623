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
        Intent::Purchase { order_id, part_id, quantity, unit_price, total, cost_center, .. } => {
            // The order must still be open; FOR SHARE keeps a concurrent close out until commit.
            let open = spi::run(
                "SELECT 1 FROM toolgate.work_orders WHERE tenant_id = $1 AND order_id = $2 \
                 AND status = 'open' FOR SHARE",
                &[who.tenant.clone().into(), order_id.clone().into()],
            );
            if open == 0 {
                return Err(Deny::because(Rule::StateNotAllowed, json!({"reason": "state_changed"})));
            }
            // Reserve the total: one statement, so parallel purchases can never overspend.
            let left = spi::one(
                "UPDATE toolgate.cost_centers SET spent = spent + $3::numeric \
                 WHERE tenant_id = $1 AND cost_center = $2 AND spent + $3::numeric <= budget \
                 RETURNING (budget - spent)::text",
                &[who.tenant.clone().into(), cost_center.clone().into(), total.to_string().into()],
                |r| spi::col::<String>(r, 1),
            )
            .ok_or_else(|| Deny::because(Rule::BudgetExceeded, json!({"reason": "budget_taken_meanwhile"})))?;
            let purchase_id = spi::one(
                "INSERT INTO toolgate.purchases (tenant_id, order_id, part_id, quantity, unit_price, total, \
                 cost_center, requested_by, idempotency_key, proposal_id) \
                 VALUES ($1, $2, $3, $4, $5::numeric, $6::numeric, $7, $8, $9, $10::uuid) RETURNING purchase_id",
                &[
                    who.tenant.clone().into(),
                    order_id.clone().into(),
                    part_id.clone().into(),
                    i32::try_from(*quantity).expect("the schema bounds quantity").into(),
                    unit_price.to_string().into(),
                    total.to_string().into(),
                    cost_center.clone().into(),
                    who.sub.clone().into(),
                    key.into(),
                    proposal_id.into(),
                ],
                |r| spi::col::<i64>(r, 1),
            )
            .expect("INSERT … RETURNING returns the row");
            Ok((
                json!({
                    "purchase_id": purchase_id, "order_id": order_id, "part_id": part_id, "quantity": quantity,
                    "unit_price": unit_price.round_dp(2).to_string(), "total": total.round_dp(2).to_string(),
                    "cost_center": cost_center, "budget_left": left,
                }),
                format!("Purchase {purchase_id} recorded: {quantity} × {part_id} for work order {order_id}."),
            ))
        }
    }
}
