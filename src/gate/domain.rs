//! Steps 4 (the target, scoped to the caller's tenant) and 5 (the domain rules). State comes
//! from the ERP tables, never from the arguments.

use serde_json::json;
use toolgate_core::outcome::Rule;
use toolgate_core::proposal;
use toolgate_core::token::Identity;

use super::authorization::Policy;
use super::contract::Checked;
use super::{Deny, Step};
use crate::spi;

/// What a call is about, as the ERP has it now.
pub enum Target {
    Order { order_id: String, status: String, inspected: bool },
}

/// The change a call asks for, with what the person must read about it.
pub enum Intent {
    Close { order_id: String, reason: String },
}

impl Intent {
    pub fn target(&self) -> &str {
        match self {
            Intent::Close { order_id, .. } => order_id,
        }
    }

    /// The text a person must read: target, action, consequence, tenant.
    pub fn text(&self, tenant: &str) -> String {
        match self {
            Intent::Close { order_id, reason } => proposal::close_text(order_id, tenant, reason),
        }
    }
}

/// A work order of the caller's tenant. Another tenant's order is exactly as missing as one that
/// does not exist. `lock` takes the row for the effect that follows.
fn order(tenant: &str, order_id: &str, lock: bool) -> Option<Target> {
    let map = |r: spi::Row| {
        Ok(Target::Order { order_id: spi::col(r, 1)?, status: spi::col(r, 2)?, inspected: spi::col(r, 3)? })
    };
    let args = [tenant.into(), order_id.into()];
    if lock {
        spi::one(
            "SELECT order_id, status, inspected FROM toolgate.work_orders \
             WHERE tenant_id = $1 AND order_id = $2 FOR UPDATE",
            &args,
            map,
        )
    } else {
        spi::one(
            "SELECT order_id, status, inspected FROM toolgate.work_orders WHERE tenant_id = $1 AND order_id = $2",
            &args,
            map,
        )
    }
}

/// The target of a call, in the caller's tenant, or `target_not_found`.
pub fn target(who: &Identity, tool: &str, args: &Checked, lock: bool) -> Step<Target> {
    match tool {
        "request_close" => order(&who.tenant, args.str("order_id"), lock),
        _ => None,
    }
    .ok_or_else(|| Deny::new(Rule::TargetNotFound))
}

/// The domain rules of `tool` against the target's current state.
pub fn check(args: &Checked, _policy: &Policy, target: &Target) -> Step<Intent> {
    match target {
        Target::Order { order_id, status, inspected } => {
            if status != "open" || !inspected {
                return Err(Deny::because(
                    Rule::StateNotAllowed,
                    json!({"status": status, "inspected": inspected, "needs": "open and inspected"}),
                ));
            }
            Ok(Intent::Close { order_id: order_id.clone(), reason: args.str("reason").to_string() })
        }
    }
}
