//! Steps 4 (the target, scoped to the caller's tenant) and 5 (the domain rules) for any tool: the
//! target and the value come from the DBA's bound functions (`binding`), reading the ERP's own
//! tables, never from the arguments; the rules are the policy row's.

use rust_decimal::Decimal;
use serde_json::{json, Value};
use toolgate_core::locale::Locale;
use toolgate_core::outcome::Rule;
use toolgate_core::policy;
use toolgate_core::token::Identity;

use super::authorization::Policy;
use super::binding::{self, Binding};
use super::contract::Checked;
use super::{Deny, Step};
use crate::{context, spi};

/// What a call is about, as the ERP has it now: found (and locked) by the tool's target function.
pub struct Target {
    pub binding: Binding,
    pub found: binding::Target,
}

/// The change a call asks for: its binding, target, value and clean arguments.
pub struct Intent<'a> {
    pub binding: Binding,
    pub target: binding::Target,
    pub valued: Option<binding::Valued>,
    pub args: &'a Value,
    /// How the caller's tenant reads the proposal's text and amounts.
    pub locale: Locale,
}

impl Intent<'_> {
    pub fn target(&self) -> &str {
        &self.target.id
    }

    /// The money at stake, if the tool has a value function.
    pub fn value(&self) -> Option<Decimal> {
        self.valued.as_ref().map(|v| v.amount)
    }

    /// The tier the policy asks for this intent: the row's tier, raised by its value thresholds.
    pub fn tier(&self, p: &Policy) -> i32 {
        match self.value() {
            Some(v) => policy::tier(p.tier, v, p.tier2_above, p.tier3_above),
            None => p.tier,
        }
    }

    /// The text a person must read: target, action, consequence, tenant (and at tier ≥ 2 what
    /// the account has before and after).
    pub fn text(&self, tenant: &str, tier: i32) -> String {
        binding::text(&self.binding, tenant, &self.locale, self.args, &self.target, self.valued.as_ref(), tier)
    }
}

/// Lock what a proposal of the caller's tenant is about, before `confirm` locks the proposal
/// itself: the rows in the order a call takes them (its target in step 4, the conversation's
/// live proposal in step 7). Taken the other way round, a confirmation holding the proposal and a
/// new proposal for the same target in its conversation wait for each other until one of them
/// dies in a deadlock. The tool's target function takes the ERP's locks, in the context the
/// confirmation runs in (its conversation and proposal); what it found is the target `confirm`
/// judges at step 4 (the rows it locked cannot change before the call ends, so it is not asked
/// twice). Decides nothing: an unknown proposal or an unbound tool locks nothing (`None`), and
/// the steps after it decide.
pub fn lock_proposal_target(who: &Identity, proposal_id: &str) -> Option<Locked> {
    let (tool, args, conversation) = spi::one(
        "SELECT tool, args::text, conversation_id FROM toolgate.proposals WHERE proposal_id = $1::uuid AND tenant_id = $2",
        &[proposal_id.into(), who.tenant.clone().into()],
        |r| Ok((spi::col::<String>(r, 1)?, spi::col::<String>(r, 2)?, spi::col::<String>(r, 3)?)),
    )?;
    let binding = binding::of(&tool)?;
    context::converse(&conversation);
    context::proposal(proposal_id);
    let args: Value = serde_json::from_str(&args).expect("jsonb text is JSON");
    let found = binding::target(&binding, who, &args);
    // Its verdict is step 4's: a refusal here must not undo the steps in between (see `judged`).
    let refused = binding::forget_refusal();
    Some(Locked { verdict: found.map(|found| Target { binding, found }), refused })
}

/// What `lock_proposal_target` found, kept for step 4: the verdict, and whether it refused the
/// function's answer (which rolls the scope back when it is given).
pub struct Locked {
    verdict: Step<Target>,
    refused: bool,
}

/// Step 4's target of a confirmation: the verdict `lock_proposal_target` had, now given (its
/// refusal of the function's answer remembered, as if the answer came now), or else a lookup now.
pub fn judged(locked: Option<Locked>, who: &Identity, tool: &str, args: &Checked) -> Step<Target> {
    match locked {
        Some(Locked { verdict, refused }) => {
            if refused {
                binding::remember_refusal();
            }
            verdict
        }
        None => target(who, tool, args),
    }
}

/// The target of a call, in the caller's tenant, or `target_not_found` (another tenant's row and
/// no row look the same). A write tool with no binding is a configuration no call can use.
pub fn target(who: &Identity, tool: &str, args: &Checked) -> Step<Target> {
    let binding =
        binding::of(tool).ok_or_else(|| Deny::because(Rule::ToolMisconfigured, json!({"reason": "unbound"})))?;
    let found = binding::target(&binding, who, &args.value)?;
    Ok(Target { binding, found })
}

/// An amount as the audit and `explain_call` show it: rounded to the tenant's currency.
fn money(locale: &Locale) -> impl Fn(Decimal) -> Value + '_ {
    |d| json!(locale.currency.round(d).to_string())
}

/// The rules, the same for any ERP: the target's state is one the policy row (or else the tool's
/// definition) allows; the value, if the tool has one, is within what the target allows, the
/// row's `max_value` and what the account has available. Amounts are in the tenant's currency
/// (`locale`), rounded once to its minor unit.
pub fn check<'a>(args: &'a Checked, policy: &Policy, target: Target, locale: Locale) -> Step<Intent<'a>> {
    let Target { binding, found } = target;
    let money = money(&locale);
    if let Some(allowed) = policy.target_states.as_ref().or(binding.target_states.as_ref()) {
        if !found.state.as_ref().is_some_and(|s| allowed.contains(s)) {
            return Err(Deny::because(Rule::StateNotAllowed, json!({"state": found.state, "needs": allowed})));
        }
    }
    let valued = binding::value(&binding, &args.value, &found, &locale.currency)?;
    if let Some(v) = &valued {
        // Below zero (a credit) or zero only where the tool's definition says so: a schema that
        // forgets `minimum` must not let the model refill the budget it then spends.
        if !binding.amounts.admit(v.amount) {
            return Err(Deny::because(
                Rule::ValueOverLimit,
                json!({"amount": money(v.amount), "reason": "amount_not_allowed", "amounts": binding.amounts.word()}),
            ));
        }
        if let Some(limit) = v.limit.filter(|limit| v.amount > *limit) {
            return Err(Deny::because(Rule::ValueOverLimit, json!({"amount": money(v.amount), "limit": money(limit)})));
        }
        if policy.max_value.is_some_and(|max| v.amount > max) || (args.sensitive && policy.max_value.is_none()) {
            return Err(Deny::because(
                Rule::ValueOverLimit,
                json!({"amount": money(v.amount), "max_value": policy.max_value.map(&money)}),
            ));
        }
        if v.available.is_some_and(|left| v.amount > left) {
            return Err(Deny::because(
                Rule::BudgetExceeded,
                json!({"account": v.account, "amount": money(v.amount), "available": v.available.map(&money)}),
            ));
        }
    }
    drop(money);
    Ok(Intent { binding, target: found, valued, args: &args.value, locale })
}

/// What `explain_call` and the audit may say of a passing domain step.
pub fn arithmetic(intent: &Intent, policy: &Policy) -> Option<Value> {
    let money = money(&intent.locale);
    intent.valued.as_ref().map(|v| {
        let mut said = json!({
            "amount": money(v.amount),
            "max_value": policy.max_value.map(&money),
            "account": v.account,
            "available": v.available.map(&money),
        });
        if let Some(left) = v.available {
            said["available_after"] = money(left - v.amount);
        }
        if let Some(limit) = v.limit {
            said["limit"] = money(limit);
        }
        said
    })
}
