//! Steps 4 (the target, scoped to the caller's tenant) and 5 (the domain rules) for any tool: the
//! target and the value come from the DBA's bound functions (`find` calls the tool's target
//! function, `value` its value function, each answer judged here), reading the ERP's own tables,
//! never from the arguments; the rules are the policy row's.

use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::str::FromStr;
use toolgate_core::locale::{Currency, Locale};
use toolgate_core::outcome::Rule;
use toolgate_core::policy;
use toolgate_core::token::Identity;

use super::authorization::Policy;
use super::binding::{self, ctx, misconfigured, Binding};
use super::consent;
use super::contract::Checked;
use super::scope::{invoke, refusal};
use super::step::{Deny, Step};
use crate::spi;

/// What a call is about, as the ERP has it now: found (and locked) by the tool's target function.
pub struct Target {
    pub binding: Binding,
    pub found: Found,
}

/// What the target function found: its id and state in the DBA's own words, and the whole object
/// (which `value` and `effect` receive in their context).
#[derive(Clone, Debug)]
pub struct Found {
    pub id: String,
    pub state: Option<String>,
    pub found: Value,
}

/// What the value function said: the amount at stake, the account it draws on, what is left
/// there, and the most this target allows.
#[derive(Clone, Debug)]
pub struct Valued {
    pub amount: Decimal,
    pub account: Option<String>,
    pub available: Option<Decimal>,
    pub limit: Option<Decimal>,
    /// An outbox tool's: what the account's open intents (queued, not yet settled for good, of
    /// any outbox tool) still draw on it. The ERP has not done them, so `available` does not
    /// show them yet: the budget check counts them as spent.
    pub reserved: Option<Decimal>,
    pub said: Value,
}

/// The change a call asks for: its binding, target, value and clean arguments.
pub struct Intent<'a> {
    pub binding: Binding,
    pub target: Found,
    pub valued: Option<Valued>,
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
        consent::text(&self.binding, tenant, &self.locale, self.args, &self.target, self.valued.as_ref(), tier)
    }
}

/// Lock what a proposal of the caller's tenant is about, before `confirm` locks the proposal
/// itself: the rows in the order a call takes them (its target in step 4, the conversation's
/// live proposal in step 7). Taken the other way round, a confirmation holding the proposal and a
/// new proposal for the same target in its conversation wait for each other until one of them
/// dies in a deadlock. The tool's target function takes the ERP's locks, in the context the
/// confirmation runs in (its conversation and proposal, set by `confirmation::load`); what it
/// found is the target `confirm` judges at step 4 (the rows it locked cannot change before the
/// call ends, so it is not asked twice). Decides nothing: an unbound tool locks nothing (`None`),
/// and the steps after it decide.
pub fn lock_proposal_target(who: &Identity, tool: &str, args: &Value) -> Option<Locked> {
    let binding = binding::of(tool)?;
    let found = find(&binding, who, args);
    // Its verdict is step 4's, given there: a refusal of the function's answer keeps its `undo`
    // until then, so the steps in between (a proposal no longer live, refused with what it wrote
    // kept) are not rolled back by it (see `scope::scope`).
    Some(Locked { verdict: found.map(|found| Target { binding, found }) })
}

/// What `lock_proposal_target` found, kept for step 4: the verdict, with the refusal of the
/// function's answer (`Deny::undo`, which rolls the scope back when it is given).
pub struct Locked {
    verdict: Step<Target>,
}

/// Step 4's target of a confirmation: the verdict `lock_proposal_target` had, now given (a
/// refused answer rolls the scope back, as if it came now), or else a lookup now.
pub fn judged(locked: Option<Locked>, who: &Identity, tool: &str, args: &Checked) -> Step<Target> {
    match locked {
        Some(Locked { verdict }) => verdict,
        None => target(who, tool, args),
    }
}

/// The target of a call, in the caller's tenant, or `target_not_found` (another tenant's row and
/// no row look the same). A write tool with no binding is a configuration no call can use.
pub fn target(who: &Identity, tool: &str, args: &Checked) -> Step<Target> {
    let binding =
        binding::of(tool).ok_or_else(|| Deny::because(Rule::ToolMisconfigured, json!({"reason": "unbound"})))?;
    let found = find(&binding, who, &args.value)?;
    Ok(Target { binding, found })
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `d` as a JSON number with its exact digits.
fn json_number(d: Decimal) -> Value {
    serde_json::from_str(&d.to_string()).expect("a decimal's text is a JSON number")
}

fn decimal(v: Option<&Value>) -> Option<Decimal> {
    let text = text_of(v?)?;
    Decimal::from_str(&text).or_else(|_| Decimal::from_scientific(&text)).ok()
}

/// Step 4's target, found and locked by the DBA's function in the caller's tenant. NULL is
/// `target_not_found`; so is a target of another tenant, whatever the function did.
fn find(b: &Binding, who: &Identity, args: &Value) -> Step<Found> {
    binding::check(b)?;
    invoke(b.target, "target", ctx(b, args, &[]), args, |out| {
        let out = refusal("target", out)?;
        let Some(found) = out.filter(|v| !v.is_null()) else {
            return Err(Deny::new(Rule::TargetNotFound));
        };
        let id = found.get("id").and_then(text_of);
        let tenant = found.get("tenant").and_then(Value::as_str);
        match (id, tenant) {
            (Some(id), Some(tenant)) if tenant == who.tenant => {
                let state = found.get("state").and_then(text_of);
                Ok(Found { id, state, found })
            }
            (Some(_), Some(_)) => Err(Deny::because(Rule::TargetNotFound, json!({"reason": "other_tenant"}))),
            _ => Err(misconfigured("target", "must return an object with \"id\" and \"tenant\"")),
        }
    })
}

/// Step 5's value, when the tool has a value function, in the tenant's `currency`.
fn value(b: &Binding, args: &Value, target: &Found, currency: &Currency) -> Step<Option<Valued>> {
    let Some(function) = b.value else { return Ok(None) };
    let said = invoke(function, "value", ctx(b, args, &[("target", Some(&target.found))]), args, |out| {
        let said = refusal("value", out)?;
        let said = said.filter(|v| v.is_object()).ok_or_else(|| misconfigured("value", "must return an object"))?;
        let exact =
            decimal(said.get("amount")).ok_or_else(|| misconfigured("value", "\"amount\" must be a decimal"))?;
        // One rounding, the gate's, to the tenant's currency's minor unit (half away from zero,
        // as numeric rounds): the person reads this amount, the audit keeps it, and the effect
        // receives it (ctx->'value'->'amount'), never the finer one the function said.
        let amount = currency.round(exact);
        let mut said = said;
        if amount != exact {
            said["amount"] = json_number(amount);
        }
        let optional = |name: &str| match said.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => decimal(Some(v))
                .map(Some)
                .ok_or_else(|| misconfigured("value", format!("\"{name}\" must be a decimal"))),
        };
        let available = optional("available")?;
        let limit = optional("limit")?;
        let account = said.get("account").and_then(text_of);
        Ok(Valued { amount, account, available, limit, reserved: None, said })
    });
    let mut valued = said?;
    if let (Some(_), Some(account), Some(_), Some(tenant)) =
        (&b.outbox, &valued.account, valued.available, target.found.get("tenant").and_then(Value::as_str))
    {
        valued.reserved = Some(reserved(tenant, account));
    }
    Ok(Some(valued))
}

/// What the tenant's open outbox intents (PENDING, UNCERTAIN, PARTIAL, DEAD) draw on `account`:
/// accepted by the gate and not yet known done by the ERP and finished here, or refused. The
/// value function's lock on the account (the example's target function locks the cost centre)
/// makes a call wait for another on the same account, and this statement then sees its intent.
fn reserved(tenant: &str, account: &str) -> Decimal {
    spi::one(
        "SELECT coalesce(sum((o.value->>'amount')::numeric), 0)::text FROM toolgate.outbox o \
         WHERE o.tenant_id = $1 AND o.value->>'account' = $2 AND o.state IN ('PENDING', 'UNCERTAIN', 'PARTIAL', 'DEAD')",
        &[tenant.into(), account.into()],
        |r| spi::col::<String>(r, 1),
    )
    .and_then(|sum| Decimal::from_str(&sum).ok())
    .unwrap_or_default()
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
    let valued = value(&binding, &args.value, &found, &locale.currency)?;
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
        if let Some(left) = v.available.map(|left| left - v.reserved.unwrap_or_default()) {
            if v.amount > left {
                let mut said = json!({"account": v.account, "amount": money(v.amount), "available": money(left)});
                if let Some(reserved) = v.reserved {
                    said["reserved"] = money(reserved);
                }
                return Err(Deny::because(Rule::BudgetExceeded, said));
            }
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
            said["available_after"] = money(left - v.reserved.unwrap_or_default() - v.amount);
        }
        if let Some(reserved) = v.reserved {
            said["reserved"] = money(reserved);
        }
        if let Some(limit) = v.limit {
            said["limit"] = money(limit);
        }
        said
    })
}
