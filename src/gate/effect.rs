//! Step 8: the ERP change, made by the tool's effect function. It runs in the caller's
//! transaction with the ledger settlement and the audit row, so either all three commit or none
//! does.

use serde_json::{json, Value};
use toolgate_core::outcome::Rule;

use super::authorization::writes_enabled;
use super::domain::Intent;
use super::{binding, Deny, Step};

/// Apply `intent`. The DBA's statements cannot carry the kill switch: it is read now, under the
/// newest committed state, after the target function locked every row the effect writes and
/// right before the effect, so a switch turned off while the call waited for those rows is seen.
pub fn apply(intent: &Intent) -> Step<(Value, String)> {
    if !writes_enabled(&intent.binding.tool) {
        return Err(Deny::because(Rule::WriteDisabled, json!({"reason": "turned_off_meanwhile"})));
    }
    binding::effect(&intent.binding, intent.args, &intent.target, intent.valued.as_ref())
}
