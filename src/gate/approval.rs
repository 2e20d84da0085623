//! Maker-checker (docs/approvals.md): an approver's decision on a proposal whose policy row names
//! approver roles. The approver is proven by their own verified identity token, never by the
//! requester's channel; each decision is recorded with the digest of the arguments decided on;
//! the approval that completes the quorum applies the effect in its own transaction.

use rust_decimal::Decimal;
use serde_json::{json, Value};
use toolgate_core::outcome::Rule;
use toolgate_core::token::Identity;

use super::authorization::{self, Approvals};
use super::confirmation::{roles_of, Stored};
use super::step::{Deny, Step};
use crate::spi;

/// What an approver asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Decline,
}

impl Decision {
    pub fn parse(word: Option<&str>) -> Step<Decision> {
        match word {
            Some("approve") => Ok(Decision::Approve),
            Some("decline") => Ok(Decision::Decline),
            _ => Err(Deny::because(
                Rule::ConfirmationInvalid,
                json!({"reason": "decision", "expected": "approve | decline"}),
            )),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Decline => "decline",
        }
    }
}

/// The issuer a person is known by: their token's registered issuer, '' for a token of a key of
/// `toolgate.keys`.
fn issuer(who: &Identity) -> &str {
    who.iss.as_deref().unwrap_or_default()
}

/// Whether the approver is the person who asked: the same subject and the same verified issuer (a
/// proposal made before issuers were kept compares the subject alone).
fn is_requester(who: &Identity, p: &Stored) -> bool {
    who.sub == p.actor && p.actor_iss.as_deref().is_none_or(|iss| iss == issuer(who))
}

/// May this approver decide this proposal: the tool's policy row names approver roles, the
/// approver holds one, is not the requester where the row needs someone else, and has not decided
/// it already; or the proposal's tier is console-only and the approver is the requester.
pub fn eligible(who: &Identity, p: &Stored) -> Step<Approvals> {
    let Some(rules) = authorization::approval_rules(&p.tenant, &p.tool, p.tier) else {
        return Err(Deny::because(Rule::ApproverNotAllowed, json!({"reason": "no_approver_roles"})));
    };
    if rules.requester_only() {
        if !is_requester(who, p) {
            return Err(Deny::because(Rule::ApproverNotAllowed, json!({"reason": "requester_only"})));
        }
    } else if !who.has_any_role(&rules.roles) {
        return Err(Deny::because(Rule::ApproverNotAllowed, json!({"reason": "role", "role": who.role})));
    }
    if rules.distinct && is_requester(who, p) {
        return Err(Deny::new(Rule::ApproverIsRequester));
    }
    // Under the newest committed state (the proposal is locked by now): a decision the same
    // approver made in a transaction that committed while this one waited counts, whatever the
    // isolation level.
    let decided = spi::latest(
        "SELECT 1 FROM toolgate.approvals WHERE tenant_id = $1 AND proposal_id = $2::uuid \
         AND approver_iss = $3 AND approver = $4",
        &[p.tenant.as_str().into(), p.id.as_str().into(), issuer(who).into(), who.sub.as_str().into()],
        |r| spi::col::<i32>(r, 1),
    );
    if decided.is_some() {
        return Err(Deny::because(Rule::ApproverNotAllowed, json!({"reason": "already_decided"})));
    }
    Ok(rules)
}

/// A tier-3 proposal is approved only with its challenge word typed exactly; a lower tier's
/// approval is the decision itself.
pub fn word_matches(p: &Stored, word: Option<&str>) -> Step<()> {
    match &p.challenge {
        Some(challenge) if word.map(str::trim) != Some(challenge.as_str()) => {
            Err(Deny::because(Rule::ConfirmationInvalid, json!({"reason": "consent_insufficient", "tier": p.tier})))
        }
        _ => Ok(()),
    }
}

/// Record the approver's decision on the proposal (locked by `confirmation::lock_live`), and
/// return how many distinct approvals it now has.
pub fn record(who: &Identity, p: &Stored, decision: Decision) -> i64 {
    spi::run(
        "INSERT INTO toolgate.approvals (tenant_id, proposal_id, approver_iss, approver, decision, args_digest, decided_at) \
         VALUES ($1, $2::uuid, $3, $4, $5, $6, $7)",
        &[
            p.tenant.as_str().into(),
            p.id.as_str().into(),
            issuer(who).into(),
            who.sub.as_str().into(),
            decision.as_str().into(),
            p.digest.as_str().into(),
            pgrx::datum::clock_timestamp().into(),
        ],
    );
    // This approval and every one committed before it, whatever the isolation level: two
    // approvers racing on a quorum of two are serialized by the proposal's lock, and the second
    // counts the first's.
    spi::latest(
        "SELECT count(*) FROM toolgate.approvals WHERE tenant_id = $1 AND proposal_id = $2::uuid \
         AND decision = 'approve'",
        &[p.tenant.as_str().into(), p.id.as_str().into()],
        |r| spi::col::<i64>(r, 1),
    )
    .unwrap_or(0)
}

/// How many approvals the proposal needs, by the value it was proposed with.
pub fn needed(rules: &Approvals, p: &Stored) -> i64 {
    let value = p.amount.as_deref().and_then(|a| a.parse::<Decimal>().ok());
    i64::from(rules.needed(value))
}

/// How many approvals the proposal `id` of `tenant` needs, by the value it was proposed with.
pub fn needed_by_id(rules: &Approvals, tenant: &str, id: &str) -> i32 {
    let amount = spi::one(
        "SELECT amount::text FROM toolgate.proposals WHERE tenant_id = $1 AND proposal_id = $2::uuid",
        &[tenant.into(), id.into()],
        |r| r.get::<String>(1),
    )
    .flatten();
    rules.needed(amount.and_then(|a| a.parse::<Decimal>().ok()))
}

/// The requester as the proposal recorded them: the identity the effect is applied for, its
/// authorization and limits judged again against the current state.
pub fn requester(p: &Stored) -> Identity {
    let roles = p.actor_roles.clone().unwrap_or_default();
    Identity {
        sub: p.actor.clone(),
        tenant: p.tenant.clone(),
        role: roles.join(","),
        exp: 0,
        iat: None,
        nbf: None,
        roles,
        aud: Vec::new(),
        iss: p.actor_iss.clone().filter(|iss| !iss.is_empty()),
    }
}

/// Tell whoever listens (`LISTEN toolgate_pending`: an approvals console, a notifier) that a
/// proposal of `tenant` waits for its approvers, when the call's transaction commits. The payload
/// names the tenant, the tool and the proposal; never its text.
pub fn announce(tenant: &str, tool: &str, proposal: &str) {
    let payload = json!({"tenant": tenant, "tool": tool, "proposal": proposal}).to_string();
    spi::run("SELECT pg_catalog.pg_notify('toolgate_pending', $1)", &[payload.as_str().into()]);
}

/// The live proposals of the approver's tenant that they may decide (`toolgate.pending`): an
/// approver role of the tool's policy row, not their own where the row needs someone else (their
/// own alone at a console-only tier of a row without approvers), not decided by them yet; newest
/// first, each with the text the person reads, its value, who asked, and the approvals it has
/// and needs.
pub fn pending(who: &Identity) -> Value {
    let listed = spi::one(
        "SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(\
           'proposal', p.proposal_id, 'tool', p.tool, 'target', p.target, 'text', p.text, 'tier', p.tier, \
           'amount', p.amount::text, 'currency', p.currency, 'requester', p.actor, \
           'created_at', toolgate.iso_utc(p.created_at), 'expires_at', toolgate.iso_utc(p.expires_at), \
           'approvals', a.approvals, 'approved_by', a.approved_by, \
           'needed', CASE WHEN r.approver_roles IS NULL THEN 1 \
                          WHEN r.quorum_above IS NULL OR p.amount > r.quorum_above THEN r.quorum ELSE 1 END) \
           ORDER BY p.created_at DESC, p.proposal_id), '[]'::jsonb)::text \
         FROM toolgate.proposals p \
         JOIN toolgate.policies r ON r.tenant_id = p.tenant_id AND r.tool = p.tool \
         CROSS JOIN LATERAL (SELECT count(*) AS approvals, \
                                    COALESCE(pg_catalog.jsonb_agg(x.approver ORDER BY x.decided_at), '[]'::jsonb) \
                                        AS approved_by \
                               FROM toolgate.approvals x \
                              WHERE x.tenant_id = $1 AND x.proposal_id = p.proposal_id \
                                AND x.decision = 'approve') a \
         WHERE p.tenant_id = $1 AND p.status = 'live' AND p.expires_at > pg_catalog.clock_timestamp() \
           AND r.allowed \
           AND (r.approver_roles OPERATOR(pg_catalog.&&) $2 \
                AND NOT (r.distinct_approver AND p.actor = $3 AND coalesce(p.actor_iss, $4) = $4) \
                OR r.approver_roles IS NULL AND p.tier >= r.console_only_tier \
                   AND p.actor = $3 AND coalesce(p.actor_iss, $4) = $4) \
           AND NOT EXISTS (SELECT 1 FROM toolgate.approvals x WHERE x.tenant_id = p.tenant_id \
                             AND x.proposal_id = p.proposal_id AND x.approver_iss = $4 AND x.approver = $3)",
        &[who.tenant.as_str().into(), roles_of(who).into(), who.sub.as_str().into(), issuer(who).into()],
        |r| spi::col::<String>(r, 1),
    )
    .unwrap_or_else(|| "[]".to_string());
    serde_json::from_str(&listed).expect("jsonb text is JSON")
}

/// What was decided in the approver's tenant on the tools they may approve, and on their own
/// proposals of a console-only tier (`toolgate.approval_history`): the proposals no longer
/// waiting (applied, declined, expired, superseded or invalidated) in the last 90 days, newest
/// first, at most 200, each with who asked and every approver's decision on it.
pub fn history(who: &Identity) -> Value {
    let listed = spi::one(
        "SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(\
           'proposal', p.proposal_id, 'tool', p.tool, 'target', p.target, 'text', p.text, 'tier', p.tier, \
           'amount', p.amount::text, 'currency', p.currency, 'requester', p.actor, 'status', p.status, \
           'created_at', toolgate.iso_utc(p.created_at), 'decided_at', toolgate.iso_utc(p.decided_at), \
           'decisions', d.decisions) ORDER BY p.created_at DESC, p.proposal_id), '[]'::jsonb)::text \
         FROM toolgate.proposals p \
         JOIN toolgate.policies r ON r.tenant_id = p.tenant_id AND r.tool = p.tool \
         CROSS JOIN LATERAL (SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(\
                                  'approver', x.approver, 'decision', x.decision, \
                                  'at', toolgate.iso_utc(x.decided_at)) ORDER BY x.decided_at), '[]'::jsonb) AS decisions \
                               FROM toolgate.approvals x \
                              WHERE x.tenant_id = $1 AND x.proposal_id = p.proposal_id) d \
         WHERE p.tenant_id = $1 AND p.status <> 'live' \
           AND p.created_at > pg_catalog.clock_timestamp() - interval '90 days' \
           AND (r.approver_roles OPERATOR(pg_catalog.&&) $2 \
                OR r.approver_roles IS NULL AND p.tier >= r.console_only_tier \
                   AND p.actor = $3 AND coalesce(p.actor_iss, $4) = $4)",
        &[who.tenant.as_str().into(), roles_of(who).into(), who.sub.as_str().into(), issuer(who).into()],
        |r| spi::col::<String>(r, 1),
    )
    .unwrap_or_else(|| "[]".to_string());
    let mut listed: Value = serde_json::from_str(&listed).expect("jsonb text is JSON");
    if let Some(items) = listed.as_array_mut() {
        items.truncate(HISTORY_LIMIT);
    }
    listed
}

/// The most proposals `history` lists.
const HISTORY_LIMIT: usize = 200;

/// The person, if they hold one of their tenant's auditor roles (`toolgate.set_tenant_auditors`);
/// else `role_not_allowed`.
pub fn auditor(who: Identity) -> Step<Identity> {
    let roles = spi::one(
        "SELECT auditor_roles FROM toolgate.tenants WHERE tenant_id = $1",
        &[who.tenant.as_str().into()],
        |r| r.get::<Vec<String>>(1),
    )
    .flatten()
    .unwrap_or_default();
    if who.has_any_role(&roles) {
        Ok(who)
    } else {
        Err(Deny::because(Rule::RoleNotAllowed, json!({"reason": "not_an_auditor"})))
    }
}

/// The rows `trail` lists at most.
const TRAIL_ROWS: i64 = 200;

/// The tenant's audit as an auditor reads it: the newest rows (at most 200) that `filters`
/// (`tool`, `outcome`, `actor`, `since`, `until`: ISO times; the last 7 days by default) keep,
/// calls per hour by outcome over the last 48 hours, the value the effects moved per day over the
/// last 30 days (in the tenant's time zone) beside its daily value limit if it has one, and the
/// rules that refused most over the last 7 days. Every statement names the tenant: on Citus each
/// runs on its node.
pub fn trail(who: &Identity, filters: &Value) -> Value {
    let text = |k: &str| filters[k].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let tenant = who.tenant.as_str();
    let rows = spi::query(
        "SELECT pg_catalog.jsonb_build_object('at', toolgate.iso_utc(a.at), 'kind', a.kind, 'tool', a.tool, \
                'outcome', a.outcome, 'rule', a.rule, 'actor', a.actor, 'target', a.target, \
                'proposal', a.proposal_id, 'replayed', a.replayed)::text \
           FROM toolgate.audit_log a \
          WHERE a.tenant_id = $1 AND ($2::text IS NULL OR a.tool = $2) AND ($3::text IS NULL OR a.outcome = $3) \
            AND ($4::text IS NULL OR a.actor = $4) \
            AND a.at >= coalesce($5::timestamptz, pg_catalog.now() - interval '7 days') \
            AND a.at < coalesce($6::timestamptz, 'infinity') \
          ORDER BY a.at DESC, a.audit_id DESC LIMIT $7",
        &[
            tenant.into(),
            text("tool").into(),
            text("outcome").into(),
            text("actor").into(),
            text("since").into(),
            text("until").into(),
            TRAIL_ROWS.into(),
        ],
        |r| spi::col::<String>(r, 1),
    );
    let rows: Vec<Value> = rows.iter().map(|r| serde_json::from_str(r).expect("jsonb text is JSON")).collect();
    let per_hour = spi::query(
        "SELECT pg_catalog.jsonb_build_object('hour', toolgate.iso_utc(pg_catalog.date_trunc('hour', a.at)), \
                'outcome', a.outcome, 'calls', count(*))::text \
           FROM toolgate.audit a \
          WHERE a.tenant_id = $1 AND a.at >= pg_catalog.date_trunc('hour', pg_catalog.now()) - interval '47 hours' \
          GROUP BY pg_catalog.date_trunc('hour', a.at), a.outcome \
          ORDER BY pg_catalog.date_trunc('hour', a.at), a.outcome",
        &[tenant.into()],
        |r| spi::col::<String>(r, 1),
    );
    let per_day = spi::query(
        "SELECT pg_catalog.jsonb_build_object('day', (e.at AT TIME ZONE t.time_zone)::date::text, \
                'value', sum(e.value)::text)::text \
           FROM toolgate.effects e JOIN toolgate.tenants t ON t.tenant_id = e.tenant_id \
          WHERE e.tenant_id = $1 AND e.value IS NOT NULL AND e.at >= pg_catalog.now() - interval '30 days' \
          GROUP BY (e.at AT TIME ZONE t.time_zone)::date ORDER BY (e.at AT TIME ZONE t.time_zone)::date",
        &[tenant.into()],
        |r| spi::col::<String>(r, 1),
    );
    let budget = spi::one(
        "SELECT min(l.max)::text FROM toolgate.limits l WHERE l.tenant_id = $1 AND l.measure = 'value' \
            AND l.calendar = 'day' AND l.role IS NULL AND l.tool IS NULL AND NOT l.per_actor",
        &[tenant.into()],
        |r| r.get::<String>(1),
    )
    .flatten();
    let refusals = spi::query(
        "SELECT pg_catalog.jsonb_build_object('rule', a.rule, 'count', count(*))::text \
           FROM toolgate.audit a \
          WHERE a.tenant_id = $1 AND a.rule IS NOT NULL AND a.outcome IN ('BLOCKED', 'REJECTED') \
            AND a.at >= pg_catalog.now() - interval '7 days' \
          GROUP BY a.rule ORDER BY count(*) DESC, a.rule LIMIT 10",
        &[tenant.into()],
        |r| spi::col::<String>(r, 1),
    );
    let parsed = |list: Vec<String>| -> Vec<Value> {
        list.iter().map(|r| serde_json::from_str(r).expect("jsonb text is JSON")).collect()
    };
    json!({
        "tenant": tenant,
        "rows": rows,
        "per_hour": parsed(per_hour),
        "per_day": parsed(per_day),
        "day_budget": budget,
        "top_refusals": parsed(refusals),
    })
}
