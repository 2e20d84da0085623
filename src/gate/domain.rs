//! Steps 4 (the target, scoped to the caller's tenant) and 5 (the domain rules). State, prices,
//! limits and budgets come from the ERP tables, never from the arguments.

use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::str::FromStr;
use toolgate_core::outcome::Rule;
use toolgate_core::policy;
use toolgate_core::proposal::{self, Purchase};
use toolgate_core::token::Identity;

use super::authorization::Policy;
use super::binding::{self, Binding};
use super::contract::Checked;
use super::{Deny, Step};
use crate::spi;

/// A work order of the caller's tenant.
pub struct Order {
    pub order_id: String,
    pub status: String,
    pub inspected: bool,
}

/// A catalogue part of the caller's tenant.
pub struct Part {
    pub part_id: String,
    pub name: String,
    pub unit_price: Decimal,
    pub max_quantity: i64,
}

/// A cost centre of the caller's tenant and what its budget has left.
pub struct CostCenter {
    pub cost_center: String,
    pub left: Decimal,
}

/// What a call is about, as the ERP has it now.
pub enum Target {
    Close(Order),
    Purchase {
        order: Order,
        part: Part,
        cost_center: CostCenter,
    },
    /// Found by a defined tool's target function.
    Defined {
        binding: Binding,
        target: binding::Target,
    },
}

/// The change a call asks for, with what the person must read about it.
pub enum Intent {
    Close {
        order_id: String,
        reason: String,
    },
    Purchase {
        order_id: String,
        part_id: String,
        part_name: String,
        quantity: i64,
        unit_price: Decimal,
        total: Decimal,
        cost_center: String,
        budget_left: Decimal,
    },
    /// A defined tool's call: its binding, target, value and clean arguments.
    Defined {
        binding: Binding,
        target: binding::Target,
        valued: Option<binding::Valued>,
        args: Value,
    },
}

impl Intent {
    pub fn target(&self) -> &str {
        match self {
            Intent::Close { order_id, .. } | Intent::Purchase { order_id, .. } => order_id,
            Intent::Defined { target, .. } => &target.id,
        }
    }

    /// The money at stake, if any.
    pub fn value(&self) -> Option<Decimal> {
        match self {
            Intent::Close { .. } => None,
            Intent::Purchase { total, .. } => Some(*total),
            Intent::Defined { valued, .. } => valued.as_ref().map(|v| v.amount),
        }
    }

    /// The tier the policy asks for this intent: the row's tier, raised by its value thresholds.
    pub fn tier(&self, p: &Policy) -> i32 {
        match self.value() {
            Some(v) => policy::tier(p.tier, v, p.tier2_above, p.tier3_above),
            None => p.tier,
        }
    }

    /// The text a person must read: target, action, consequence, tenant.
    pub fn text(&self, tenant: &str, tier: i32) -> String {
        match self {
            Intent::Close { order_id, reason } => proposal::close_text(order_id, tenant, reason),
            Intent::Purchase {
                order_id,
                part_id,
                part_name,
                quantity,
                unit_price,
                total,
                cost_center,
                budget_left,
            } => proposal::purchase_text(
                &Purchase {
                    order_id,
                    part_id,
                    part_name,
                    quantity: *quantity,
                    unit_price: *unit_price,
                    total: *total,
                    cost_center,
                    budget_left: *budget_left,
                },
                tenant,
                tier,
            ),
            Intent::Defined { binding, target, valued, args } => {
                binding::text(binding, tenant, args, target, valued.as_ref())
            }
        }
    }
}

fn decimal(text: String) -> Decimal {
    Decimal::from_str(&text).expect("numeric text is a decimal")
}

/// Another tenant's order is exactly as missing as one that does not exist. The row is locked
/// until the call's transaction ends: its state cannot move between the rules and the effect,
/// and the effect's own statements, run after any wait for this lock, see the kill switch as it
/// is by then.
fn order(tenant: &str, order_id: &str) -> Option<Order> {
    spi::one(
        "SELECT order_id, status, inspected FROM toolgate.work_orders \
         WHERE tenant_id = $1 AND order_id = $2 FOR UPDATE",
        &[tenant.into(), order_id.into()],
        |r| Ok(Order { order_id: spi::col(r, 1)?, status: spi::col(r, 2)?, inspected: spi::col(r, 3)? }),
    )
}

/// Lock the order a proposal of the caller's tenant targets, before `confirm` locks the proposal
/// itself: the two rows in the order a call takes them (its target in step 4, the conversation's
/// live proposal in step 7). Taken the other way round, a confirmation holding the proposal and a
/// new proposal for the same order in its conversation wait for each other until one of them
/// dies in a deadlock. A defined tool's target function takes its ERP's locks the same way.
/// Decides nothing: an unknown proposal or target locks nothing, and the steps after it decide.
pub fn lock_proposal_target(who: &Identity, proposal_id: &str) {
    let tenant = &who.tenant;
    // A shipped tool's order, in one statement (the common case costs no more than it did).
    let locked = spi::run(
        "SELECT 1 FROM toolgate.work_orders w JOIN toolgate.proposals p \
         ON (w.tenant_id, w.order_id) = (p.tenant_id, p.target) \
         WHERE p.proposal_id = $1::uuid AND p.tenant_id = $2 \
         AND p.tool IN ('request_close', 'request_purchase_part') FOR UPDATE OF w",
        &[proposal_id.into(), tenant.clone().into()],
    );
    if locked > 0 {
        return;
    }
    let peeked = spi::one(
        "SELECT tool, args::text FROM toolgate.proposals WHERE proposal_id = $1::uuid AND tenant_id = $2",
        &[proposal_id.into(), tenant.clone().into()],
        |r| Ok((spi::col::<String>(r, 1)?, spi::col::<String>(r, 2)?)),
    );
    if let Some((tool, args)) = peeked {
        if let Some(binding) = binding::of(&tool) {
            // A defined tool's target function takes the ERP's locks; its verdict comes later.
            let args: Value = serde_json::from_str(&args).expect("jsonb text is JSON");
            let _ = binding::target(&binding, who, &args);
        }
    }
}

fn part(tenant: &str, part_id: &str) -> Option<Part> {
    spi::one(
        "SELECT part_id, name, unit_price::text, max_quantity FROM toolgate.parts \
         WHERE tenant_id = $1 AND part_id = $2",
        &[tenant.into(), part_id.into()],
        |r| {
            Ok(Part {
                part_id: spi::col(r, 1)?,
                name: spi::col(r, 2)?,
                unit_price: decimal(spi::col(r, 3)?),
                max_quantity: i64::from(spi::col::<i32>(r, 4)?),
            })
        },
    )
}

fn cost_center(tenant: &str, cost_center: &str) -> Option<CostCenter> {
    spi::one(
        "SELECT cost_center, (budget - spent)::text FROM toolgate.cost_centers \
         WHERE tenant_id = $1 AND cost_center = $2",
        &[tenant.into(), cost_center.into()],
        |r| Ok(CostCenter { cost_center: spi::col(r, 1)?, left: decimal(spi::col(r, 2)?) }),
    )
}

/// The target of a call, in the caller's tenant, or `target_not_found` (which part of it is
/// missing is not said: another tenant's row and no row look the same).
pub fn target(who: &Identity, tool: &str, args: &Checked) -> Step<Target> {
    if let Some(binding) = binding::of(tool) {
        let target = binding::target(&binding, who, &args.value)?;
        return Ok(Target::Defined { binding, target });
    }
    let t = &who.tenant;
    match tool {
        "request_close" => order(t, args.str("order_id")).map(Target::Close),
        "request_purchase_part" => (|| {
            Some(Target::Purchase {
                order: order(t, args.str("order_id"))?,
                part: part(t, args.str("part_id"))?,
                cost_center: cost_center(t, args.str("cost_center"))?,
            })
        })(),
        _ => None,
    }
    .ok_or_else(|| Deny::new(Rule::TargetNotFound))
}

/// An integer argument the schema already checked (3.0 is the integer 3 in JSON Schema).
fn integer(args: &Checked, name: &str) -> i64 {
    let v = &args.value[name];
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64)).expect("the schema requires an integer")
}

fn money(d: Decimal) -> Value {
    json!(d.round_dp(2).to_string())
}

/// The domain rules of the call against the target's current state.
pub fn check(args: &Checked, policy: &Policy, target: &Target) -> Step<Intent> {
    match target {
        Target::Defined { binding, target } => defined(binding, target, args, policy),
        Target::Close(o) => {
            if o.status != "open" || !o.inspected {
                return Err(Deny::because(
                    Rule::StateNotAllowed,
                    json!({"status": o.status, "inspected": o.inspected, "needs": "open and inspected"}),
                ));
            }
            Ok(Intent::Close { order_id: o.order_id.clone(), reason: args.str("reason").to_string() })
        }
        Target::Purchase { order, part, cost_center } => {
            if order.status != "open" {
                return Err(Deny::because(Rule::StateNotAllowed, json!({"status": order.status, "needs": "open"})));
            }
            let quantity = integer(args, "quantity");
            if quantity > part.max_quantity {
                return Err(Deny::because(
                    Rule::ValueOverLimit,
                    json!({"quantity": quantity, "part_max_quantity": part.max_quantity}),
                ));
            }
            let total = policy::total(quantity, part.unit_price)
                .ok_or_else(|| Deny::because(Rule::ValueOverLimit, json!({"reason": "total_overflows"})))?;
            let arithmetic = json!({
                "quantity": quantity, "unit_price": money(part.unit_price), "total": money(total),
                "max_value": policy.max_value.map(money),
            });
            if policy.max_value.is_none_or(|max| total > max) {
                return Err(Deny::because(Rule::ValueOverLimit, arithmetic));
            }
            if total > cost_center.left {
                return Err(Deny::because(
                    Rule::BudgetExceeded,
                    json!({"cost_center": cost_center.cost_center, "total": money(total), "budget_left": money(cost_center.left)}),
                ));
            }
            Ok(Intent::Purchase {
                order_id: order.order_id.clone(),
                part_id: part.part_id.clone(),
                part_name: part.name.clone(),
                quantity,
                unit_price: part.unit_price,
                total,
                cost_center: cost_center.cost_center.clone(),
                budget_left: cost_center.left,
            })
        }
    }
}

/// A defined tool's rules, the same for any ERP: the target's state is one the policy row allows;
/// the value, if the tool has one, is within the row's `max_value` and what is available.
fn defined(binding: &Binding, target: &binding::Target, args: &Checked, policy: &Policy) -> Step<Intent> {
    if let Some(allowed) = &policy.target_states {
        if !target.state.as_ref().is_some_and(|s| allowed.contains(s)) {
            return Err(Deny::because(Rule::StateNotAllowed, json!({"state": target.state, "needs": allowed})));
        }
    }
    let valued = binding::value(binding, &args.value, target)?;
    if let Some(v) = &valued {
        let said = json!({"amount": money(v.amount), "max_value": policy.max_value.map(money)});
        if policy.max_value.is_some_and(|max| v.amount > max) || (args.sensitive && policy.max_value.is_none()) {
            return Err(Deny::because(Rule::ValueOverLimit, said));
        }
        if v.available.is_some_and(|left| v.amount > left) {
            return Err(Deny::because(
                Rule::BudgetExceeded,
                json!({"account": v.account, "amount": money(v.amount), "available": v.available.map(money)}),
            ));
        }
    }
    Ok(Intent::Defined { binding: binding.clone(), target: target.clone(), valued, args: args.value.clone() })
}

/// What `explain_call` and the audit may say of a passing domain step.
pub fn arithmetic(intent: &Intent, policy: &Policy) -> Option<Value> {
    match intent {
        Intent::Close { .. } | Intent::Defined { valued: None, .. } => None,
        Intent::Defined { valued: Some(v), .. } => Some(json!({
            "amount": money(v.amount),
            "max_value": policy.max_value.map(money),
            "account": v.account,
            "available": v.available.map(money),
        })),
        Intent::Purchase { quantity, unit_price, total, cost_center, budget_left, .. } => Some(json!({
            "quantity": quantity,
            "unit_price": money(*unit_price),
            "total": money(*total),
            "max_value": policy.max_value.map(money),
            "cost_center": cost_center,
            "budget_left_before": money(*budget_left),
            "budget_left_after": money(*budget_left - *total),
        })),
    }
}
