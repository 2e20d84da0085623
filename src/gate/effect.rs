//! Step 8: the ERP change. It runs in the caller's transaction with the ledger settlement and the
//! audit row, so either all three commit or none does.

use serde_json::{json, Value};
use toolgate_core::outcome::Rule;
use toolgate_core::token::Identity;

use super::authorization::{writes_enabled, writes_enabled_sql};
use super::domain::Intent;
use super::{clock, Deny, Step};
use crate::spi;

/// Why a guarded write changed nothing: writes were turned off while the call waited for its
/// rows, or (`otherwise`) the state the rules checked moved.
fn refused(tool: &str, otherwise: Deny) -> Deny {
    if writes_enabled(tool) {
        otherwise
    } else {
        Deny::because(Rule::WriteDisabled, json!({"reason": "turned_off_meanwhile"}))
    }
}

/// In REPEATABLE READ or SERIALIZABLE, the switch in the effect's own statement is read under the
/// transaction's snapshot, which may predate a switch turned off while the call waited for its
/// rows: there it is read again now, after the rows are locked.
fn still_enabled(tool: &str) -> Step<()> {
    if clock::snapshot_is_the_transactions() && !writes_enabled(tool) {
        return Err(Deny::because(Rule::WriteDisabled, json!({"reason": "turned_off_meanwhile"})));
    }
    Ok(())
}

/// Apply `intent` for `who`. Each write re-checks the state and the kill switch in the statement
/// that makes it; the rows it writes were locked before that statement began (the order by the
/// target step, the cost centre here), so a switch turned off during a wait is seen.
pub fn apply(who: &Identity, intent: &Intent, key: &str, proposal_id: Option<&str>) -> Step<(Value, String)> {
    match intent {
        Intent::Defined { binding, target, valued, args } => {
            // The DBA's statements cannot carry the switch: it is read now, after the target's
            // rows are locked and right before the effect.
            if !writes_enabled(&binding.tool) {
                return Err(Deny::because(Rule::WriteDisabled, json!({"reason": "turned_off_meanwhile"})));
            }
            super::binding::effect(binding, args, target, valued.as_ref())
        }
        Intent::Close { order_id, reason } => {
            still_enabled("request_close")?;
            let request_id = spi::one(
                concat!(
                    "WITH changed AS (UPDATE toolgate.work_orders SET status = 'close_requested', \
                     updated_at = pg_catalog.now() WHERE tenant_id = $1 AND order_id = $2 AND status = 'open' \
                     AND inspected AND ",
                    writes_enabled_sql!("'request_close'"),
                    " RETURNING tenant_id, order_id) \
                     INSERT INTO toolgate.close_requests (tenant_id, order_id, reason, requested_by, \
                     idempotency_key, proposal_id) SELECT tenant_id, order_id, $3, $4, $5, $6::uuid FROM changed \
                     RETURNING request_id::text"
                ),
                &[
                    who.tenant.clone().into(),
                    order_id.clone().into(),
                    reason.clone().into(),
                    who.sub.clone().into(),
                    key.into(),
                    proposal_id.into(),
                ],
                |r| spi::col::<String>(r, 1),
            )
            .ok_or_else(|| {
                refused("request_close", Deny::because(Rule::StateNotAllowed, json!({"reason": "state_changed"})))
            })?;
            Ok((
                json!({"order_id": order_id, "status": "close_requested", "request_id": request_id}),
                format!("Close of work order {order_id} requested (ERP request {request_id})."),
            ))
        }
        Intent::Purchase { order_id, part_id, quantity, unit_price, total, cost_center, .. } => {
            spi::run(
                "SELECT 1 FROM toolgate.cost_centers WHERE tenant_id = $1 AND cost_center = $2 FOR UPDATE",
                &[who.tenant.clone().into(), cost_center.clone().into()],
            );
            still_enabled("request_purchase_part")?;
            // Charge the total and record the purchase in one statement: parallel purchases can
            // never overspend, and `spent <= budget` holds in the table too.
            let (purchase_id, left) = spi::one(
                concat!(
                    "WITH charged AS (UPDATE toolgate.cost_centers SET spent = spent + $6::numeric \
                     WHERE tenant_id = $1 AND cost_center = $7 AND spent + $6::numeric <= budget AND ",
                    writes_enabled_sql!("'request_purchase_part'"),
                    " RETURNING cost_center, (budget - spent)::text AS left_after) \
                     INSERT INTO toolgate.purchases (tenant_id, order_id, part_id, quantity, unit_price, total, \
                     cost_center, requested_by, idempotency_key, proposal_id) \
                     SELECT $1, $2, $3, $4, $5::numeric, $6::numeric, c.cost_center, $8, $9, $10::uuid FROM charged c \
                     RETURNING purchase_id::text, (SELECT left_after FROM charged)"
                ),
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
                |r| Ok((spi::col::<String>(r, 1)?, spi::col::<String>(r, 2)?)),
            )
            .ok_or_else(|| {
                refused(
                    "request_purchase_part",
                    Deny::because(Rule::BudgetExceeded, json!({"reason": "budget_taken_meanwhile"})),
                )
            })?;
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
