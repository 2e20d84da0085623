//! Step 4: may this caller use this tool at all? The kill switch, the (tenant, tool) policy row
//! (missing configuration is a denial, never a permissive default), the row's completeness for a
//! sensitive tool, and the caller's role. The target's tenant is checked by `domain::target`.

use rust_decimal::Decimal;
use serde_json::json;
use std::cell::RefCell;
use std::str::FromStr;
use toolgate_core::outcome::Rule;
use toolgate_core::token::Identity;

use super::step::{Deny, Step};
use crate::audit::Audit;
use crate::config::{cached, Cache};
use crate::spi;

/// The policy row a call is judged under.
#[derive(Clone, Debug)]
pub struct Policy {
    pub version: i32,
    pub tier: i32,
    pub tier2_above: Option<Decimal>,
    pub tier3_above: Option<Decimal>,
    pub max_value: Option<Decimal>,
    pub max_calls: Option<i32>,
    pub confirm_ttl_seconds: f64,
    /// The states the tool's target may be in; `None`: those of the tool's definition (any if it
    /// names none either).
    pub target_states: Option<Vec<String>>,
    /// Maker-checker: who decides the tool's proposals besides the requester (`None`: the
    /// requester alone, through their channel).
    pub approvals: Option<Approvals>,
    /// Proposals of this tier and above are approved only through `approve` (the console).
    pub console_only_tier: Option<i32>,
}

impl Policy {
    /// Who decides a proposal of this tier: the approvers of the row, the requester in the
    /// console (a tier at or above `console_only_tier`), or (`None`) the requester through their
    /// channel.
    pub fn approvals_at(&self, tier: i32) -> Option<Approvals> {
        decided_by(self.approvals.clone(), self.console_only_tier, tier)
    }
}

/// The approval rules a proposal of `tier` is decided under: the row's approvers if it names
/// some, else the requester alone through `approve` where the tier is console-only.
fn decided_by(approvals: Option<Approvals>, console_only_tier: Option<i32>, tier: i32) -> Option<Approvals> {
    approvals.or_else(|| console_only_tier.filter(|&from| tier >= from).map(|_| Approvals::requester()))
}

/// A policy row's approval rules (docs/approvals.md).
#[derive(Clone, Debug)]
pub struct Approvals {
    /// The roles an approver must hold one of; none: the requester alone decides, through
    /// `approve` (a console-only tier of a row without approver roles; a row's list is never
    /// empty).
    pub roles: Vec<String>,
    /// The approver may not be the requester.
    pub distinct: bool,
    /// Distinct approvals needed for a value above `quorum_above` (for any value if `None`).
    pub quorum: i32,
    pub quorum_above: Option<Decimal>,
}

impl Approvals {
    /// The requester alone, in the console.
    fn requester() -> Approvals {
        Approvals { roles: Vec::new(), distinct: false, quorum: 1, quorum_above: None }
    }

    /// Whether only the requester decides (in the console), not approvers.
    pub fn requester_only(&self) -> bool {
        self.roles.is_empty()
    }

    /// How many distinct approvals a proposal of this value needs.
    pub fn needed(&self, value: Option<Decimal>) -> i32 {
        match (self.quorum_above, value) {
            (None, _) => self.quorum,
            (Some(above), Some(value)) if value > above => self.quorum,
            _ => 1,
        }
    }
}

/// The kill switch as SQL, the gate's one way of reading it: writes are on for `$tool` unless the
/// global switch ('*') or the tool's own switch says off. A macro (not a SQL function, which the
/// planner would not inline) so the two statements that read it, the policy row's and
/// `writes_enabled`, carry the same text.
macro_rules! writes_enabled_sql {
    ($tool:literal) => {
        concat!("NOT EXISTS (SELECT 1 FROM toolgate.write_switches WHERE NOT enabled AND scope IN ('*', ", $tool, "))")
    };
}

thread_local! {
    static SWITCHES: RefCell<Cache<String, bool>> = RefCell::new(Cache::new());
}

/// Writes are on for `tool`, as the newest committed state says now, not as the call found them
/// when it began: the invalidations sent since are taken first (every change to a switch sends
/// one when it commits), and a switch read again under the newest committed state if any came.
pub fn writes_enabled(tool: &str) -> bool {
    crate::config::take_invalidations();
    cached(&SWITCHES, tool.to_string(), || {
        spi::latest(concat!("SELECT ", writes_enabled_sql!("$1")), &[tool.into()], |r| spi::col::<bool>(r, 1))
            .unwrap_or(false)
    })
}

#[derive(Clone)]
struct Row {
    writes_enabled: bool,
    tenant_has_rows: bool,
    allowed: Option<bool>,
    roles: Vec<String>,
    tier: i32,
    tier2_above: Option<String>,
    tier3_above: Option<String>,
    max_value: Option<String>,
    max_calls: Option<i32>,
    ttl: f64,
    version: i32,
    target_states: Option<Vec<String>>,
    approver_roles: Option<Vec<String>>,
    distinct_approver: bool,
    quorum: i32,
    quorum_above: Option<String>,
    console_only_tier: Option<i32>,
}

thread_local! {
    static POLICIES: RefCell<Cache<(String, String), Row>> = RefCell::new(Cache::new());
}

/// The kill switch and the (tenant, tool) policy row (configuration rows: see `config`).
fn policy_row(tenant: &str, tool: &str) -> Row {
    cached(&POLICIES, (tenant.to_string(), tool.to_string()), || load_policy_row(tenant, tool))
}

/// The kill switch and the policy row, read in one statement.
fn load_policy_row(tenant: &str, tool: &str) -> Row {
    spi::latest(
        concat!(
            "SELECT ",
            writes_enabled_sql!("$2"),
            ", EXISTS (SELECT 1 FROM toolgate.policies WHERE tenant_id = $1), p.allowed, p.roles, \
         p.tier, p.tier2_above::text, p.tier3_above::text, p.max_value::text, \
         p.max_calls_per_conversation, pg_catalog.date_part('epoch', p.confirm_ttl), p.version, p.target_states, \
         p.approver_roles, p.distinct_approver, p.quorum, p.quorum_above::text, p.console_only_tier \
         FROM (SELECT 1) AS one LEFT JOIN toolgate.policies p ON p.tenant_id = $1 AND p.tool = $2"
        ),
        &[tenant.into(), tool.into()],
        |r| {
            Ok(Row {
                writes_enabled: spi::col(r, 1)?,
                tenant_has_rows: spi::col(r, 2)?,
                allowed: r.get(3)?,
                roles: r.get::<Vec<String>>(4)?.unwrap_or_default(),
                tier: r.get(5)?.unwrap_or(0),
                tier2_above: r.get(6)?,
                tier3_above: r.get(7)?,
                max_value: r.get(8)?,
                max_calls: r.get(9)?,
                ttl: r.get(10)?.unwrap_or(0.0),
                version: r.get(11)?.unwrap_or(0),
                target_states: r.get(12)?,
                approver_roles: r.get(13)?,
                distinct_approver: r.get(14)?.unwrap_or(true),
                quorum: r.get(15)?.unwrap_or(1),
                quorum_above: r.get(16)?,
                console_only_tier: r.get(17)?,
            })
        },
    )
    .expect("a LEFT JOIN from one row returns one row")
}

/// The tools `who` may call, as the newest committed configuration says: a policy row of the
/// caller's tenant that allows the tool and lists one of the caller's roles (`judge`'s test),
/// with the tool's description, newest schema and base tier, ordered by name; a JSON array.
pub fn listed_tools(who: &Identity) -> serde_json::Value {
    let roles = if who.roles.is_empty() { vec![who.role.clone()] } else { who.roles.clone() };
    let listed = spi::latest(
        concat!(
            "SELECT COALESCE(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(\
             'name', t.tool, 'kind', t.kind, 'description', t.description, 'inputSchema', s.schema, \
             'schema_version', s.version, 'sensitive', t.sensitive, 'tier', p.tier, \
             'writes_enabled', t.kind = 'read' OR ",
            writes_enabled_sql!("t.tool"),
            ") ORDER BY t.tool), '[]'::jsonb)::text \
             FROM toolgate.policies p JOIN toolgate.tools t ON t.tool = p.tool \
             JOIN LATERAL (SELECT v.schema, v.version FROM toolgate.tool_schemas v WHERE v.tool = t.tool \
                           ORDER BY v.version DESC LIMIT 1) s ON true \
             WHERE p.tenant_id = $1 AND p.allowed AND p.roles OPERATOR(pg_catalog.&&) $2"
        ),
        &[who.tenant.as_str().into(), roles.into()],
        |r| spi::col::<String>(r, 1),
    )
    .unwrap_or_else(|| "[]".to_string());
    serde_json::from_str(&listed).expect("jsonb text is JSON")
}

/// Judge the caller against the kill switch and the policy row.
pub fn authorize(who: &Identity, tool: &str, sensitive: bool, audit: &mut Audit) -> Step<Policy> {
    judge(who, tool, sensitive, true, audit)
}

/// A read tool: the policy row and the role, as for a write; the kill switch stops writes only.
pub fn authorize_read(who: &Identity, tool: &str, audit: &mut Audit) -> Step<Policy> {
    judge(who, tool, false, false, audit)
}

fn judge(who: &Identity, tool: &str, sensitive: bool, writes: bool, audit: &mut Audit) -> Step<Policy> {
    let row = policy_row(&who.tenant, tool);
    if writes && !row.writes_enabled {
        return Err(Deny::new(Rule::WriteDisabled));
    }
    if row.allowed.is_some() {
        audit.policy_version(row.version);
    }
    match row.allowed {
        None if !row.tenant_has_rows => {
            return Err(Deny::because(Rule::ToolNotAllowed, json!({"reason": "tenant_has_no_policy"})))
        }
        None => return Err(Deny::because(Rule::ToolNotAllowed, json!({"reason": "no_row_for_tool"}))),
        Some(false) => return Err(Deny::because(Rule::ToolNotAllowed, json!({"reason": "row_disallows"}))),
        Some(true) => {}
    }
    if sensitive {
        let missing: Vec<&str> =
            [("max_value", row.max_value.is_none()), ("max_calls_per_conversation", row.max_calls.is_none())]
                .into_iter()
                .filter_map(|(name, absent)| absent.then_some(name))
                .collect();
        if !missing.is_empty() {
            return Err(Deny::because(Rule::PolicyIncomplete, json!({"missing": missing})));
        }
    }
    if !who.has_any_role(&row.roles) {
        return Err(Deny::because(Rule::RoleNotAllowed, json!({"role": who.role})));
    }
    Ok(policy(row))
}

fn decimal(v: Option<String>) -> Option<Decimal> {
    v.map(|v| Decimal::from_str(&v).expect("numeric text is a decimal"))
}

fn policy(row: Row) -> Policy {
    let approvals = approvals(&row);
    Policy {
        version: row.version,
        tier: row.tier,
        tier2_above: decimal(row.tier2_above),
        tier3_above: decimal(row.tier3_above),
        max_value: decimal(row.max_value),
        max_calls: row.max_calls,
        confirm_ttl_seconds: row.ttl,
        target_states: row.target_states,
        approvals,
        console_only_tier: row.console_only_tier,
    }
}

fn approvals(row: &Row) -> Option<Approvals> {
    Some(Approvals {
        roles: row.approver_roles.clone()?,
        distinct: row.distinct_approver,
        quorum: row.quorum,
        quorum_above: decimal(row.quorum_above.clone()),
    })
}

/// The approval rules of the (tenant, tool) policy row as it stands for a proposal of `tier`,
/// whoever asks (an approver holds none of the row's caller roles); `None` without a row allowing
/// the tool, or where the requester confirms through their channel.
pub fn approval_rules(tenant: &str, tool: &str, tier: i32) -> Option<Approvals> {
    let row = policy_row(tenant, tool);
    if row.allowed != Some(true) {
        return None;
    }
    decided_by(approvals(&row), row.console_only_tier, tier)
}
