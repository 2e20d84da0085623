//! The subtransaction a tool's bound functions run in (`scope`), and how one is called
//! (`invoke`): the function running now, and the refusal of its answer (`Deny::undo`), decide what
//! the scope keeps. What a function may answer instead of its value (`refusal`) is the same for
//! every function; the rest of an answer's shape is its step's.

use pgrx::pg_sys;
use serde_json::{json, Value};
use std::cell::Cell;
use toolgate_core::outcome::Rule;

use super::binding::misconfigured;
use super::fmgr;
use super::step::{Deny, Step, StepName};
use crate::audit::Audit;
use crate::subxact::{self, Failure};

thread_local! {
    /// The bound function running now: an error raised inside a scope while it runs is its own.
    static RUNNING: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Run `f`, a part of the gate that calls the tool's bound functions, in one subtransaction.
/// One, not one a function: the rows the target function locks are then changed by the effect
/// under the same transaction id (a row locked by one subtransaction and updated by another has
/// PostgreSQL record both as a multixact, a cost on every such call). A bound function that
/// raises, or whose answer is refused, rolls the whole scope back: nothing it wrote stays, and
/// neither does what the gate wrote in the scope after the target. An error it raises becomes
/// `tool_misconfigured` (`effect_failed` from the effect), its SQLSTATE audited; the gate's own
/// errors, and the ones a client retries, go on up. A refusal of the gate's own (a policy, a
/// quota, a proposal no longer live) keeps what was written, as any step's refusal does. A refused
/// answer says so itself (`Deny::undo`), so a refusal given later than it was found (the target a
/// confirmation locks before the proposal, judged at step 4) rolls back as if given at once,
/// and a refusal of the gate's own in between keeps what it wrote.
#[cfg_attr(feature = "steps", inline(never))]
pub fn scope<T>(audit: &mut Audit, f: impl FnOnce(&mut Audit) -> Step<T>) -> Step<T> {
    let result = scoped(true, || f(&mut *audit));
    result.map_err(|(deny, step)| match step {
        // Recorded as the step that called the function would have recorded its refusal.
        Some(step) => audit.step(step, Err::<(), Deny>(deny)).unwrap_err(),
        None => deny,
    })
}

/// `scope`, rolled back even when `f` succeeds (`keep` false): how a reader runs. An error a
/// bound function raised comes back with the step it belongs to.
pub(super) fn scoped<T>(keep: bool, f: impl FnOnce() -> Step<T>) -> Result<T, (Deny, Option<StepName>)> {
    let outer = RUNNING.replace(None);
    let settings = fmgr::Settings::fix();
    let out =
        subxact::attempt(f, |result| !keep || result.as_ref().is_err_and(|deny| deny.undo), || RUNNING.get().is_some());
    settings.restore();
    let running = RUNNING.replace(outer);
    out.map_err(|failure| match failure {
        Failure::Refused(deny) => (deny, None),
        Failure::Raised(sqlstate) => {
            let function = running.unwrap_or("binding");
            let (rule, step) = match function {
                "effect" | "request" | "finish" => (Rule::EffectFailed, StepName::Effect),
                "value" => (Rule::ToolMisconfigured, StepName::Domain),
                _ => (Rule::ToolMisconfigured, StepName::Authorization),
            };
            let detail = json!({"function": function, "reason": "raised", "sqlstate": sqlstate});
            (Deny::because(rule, detail), Some(step))
        }
    })
}

/// Call `function` (the tool's `name` function) with `ctx` and `args`, inside a scope; `shape`
/// judges what it returned, and a refused answer rolls the scope back.
pub(super) fn invoke<T>(
    function: pg_sys::Oid,
    name: &'static str,
    ctx: pg_sys::Datum,
    args: &Value,
    shape: impl FnOnce(Option<Value>) -> Step<T>,
) -> Step<T> {
    RUNNING.set(Some(name));
    let answer = fmgr::call(function, ctx, args);
    RUNNING.set(None);
    shape(answer).map_err(|deny| Deny { undo: true, ..deny })
}

/// A refusal a bound function named instead of answering NULL: `{"refused": RULE}` (that member
/// alone), RULE one of `Rule::NAMEABLE` (`target_not_found`, `state_not_allowed`,
/// `value_over_limit`, `budget_exceeded`). It is the call's outcome, as if the gate had found it,
/// and nothing the function wrote stays (the scope rolls back). Another word, or more members
/// beside it, is a misconfiguration (`effect_failed` from the effect): a function cannot speak for
/// the gate's other steps. Any other answer comes back to be judged as before.
pub(super) fn refusal(function: &str, out: Option<Value>) -> Step<Option<Value>> {
    let Some(Value::Object(answer)) = &out else { return Ok(out) };
    let Some(named) = answer.get("refused") else { return Ok(out) };
    let rule = named.as_str().and_then(Rule::named_by_function).filter(|_| answer.len() == 1);
    match rule {
        Some(rule) => Err(Deny::because(rule, json!({"reason": "refused_by_function", "function": function}))),
        None => {
            let reason = "may refuse only with {\"refused\": target_not_found | state_not_allowed | value_over_limit | budget_exceeded}";
            Err(match function {
                "effect" => Deny::because(Rule::EffectFailed, json!({"function": function, "reason": reason})),
                _ => misconfigured(function, reason),
            })
        }
    }
}
