//! Step 6, over time: the tenant's limits (`toolgate.limits`, sql/limits.sql), each a count of
//! calls or a sum of their value per rolling window or calendar period, per actor or shared, for
//! one tool or all, one role or all. Every limit that applies to a call is consumed in the call's
//! own transaction before its effect, in name order; when one has no room, what the others took is
//! given back and the call is `BLOCKED limit_exceeded`, with when it frees up.
//!
//! Exact under concurrency. A calendar limit has one bucket per period: one `INSERT … ON CONFLICT
//! DO UPDATE … WHERE used + amount <= max`, as the quota. A rolling limit sums the buckets of its
//! window (each a sixtieth of it), so its counter is first held with a lock no client can take
//! (`xactlock`, as the ledger's keys are), until the transaction ends: two calls never sum one
//! window at once. The sum is read under the newest committed state (`spi::latest`), which holds
//! every consumption made before the lock was granted, whatever the caller's isolation level. A
//! bucket counts until its end leaves the window: a limit frees up at most one bucket late, never
//! early.
//!
//! When: a tier-0 call consumes at step 6. A proposal only checks (a limit already full refuses
//! it); its confirmation consumes in the effect's transaction, so a decline or an expiry takes
//! nothing. An effect that refuses gives back what its call took (`refund`); an outbox call's
//! intent keeps it until the ERP answers (`keep_with_intent`).

use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::cell::RefCell;
use std::rc::Rc;
use std::str::FromStr;
use toolgate_core::outcome::{Outcome, Reply, Rule};
use toolgate_core::token::Identity;

use super::step::{Deny, Step};
use crate::config::{cached, Cache};
use crate::{spi, xactlock};
use toolgate_core::digest::key_lock_id;

/// One limit row.
#[derive(Debug)]
struct Limit {
    name: String,
    tool: Option<String>,
    role: Option<String>,
    per_actor: bool,
    value: bool,
    rolling: Option<i32>,
    calendar: Option<String>,
    max: Decimal,
}

impl Limit {
    /// The bucket width of a rolling window: a sixtieth of it, at least a second.
    fn width(&self) -> i32 {
        self.rolling.map_or(0, |s| (s / 60).max(1))
    }

    fn window(&self) -> String {
        match (&self.calendar, self.rolling) {
            (Some(period), _) => period.clone(),
            (None, Some(seconds)) => format!("{seconds} s"),
            (None, None) => String::new(),
        }
    }
}

/// A tenant's limits and its time zone: configuration, cached until a row changes (shared, not
/// copied, by each call that reads it).
#[derive(Default)]
struct Tenant {
    zone: String,
    limits: Vec<Limit>,
}

thread_local! {
    static TENANTS: RefCell<Cache<String, Rc<Tenant>>> = RefCell::new(Cache::new());
}

fn tenant(tenant: &str) -> Rc<Tenant> {
    cached(&TENANTS, tenant.to_string(), || {
        let read = spi::latest(
            "SELECT t.time_zone, coalesce((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object( \
                 'name', l.name, 'tool', l.tool, 'role', l.role, 'per_actor', l.per_actor, \
                 'value', l.measure = 'value', 'rolling', l.rolling_seconds, 'calendar', l.calendar, \
                 'max', l.max::text) ORDER BY l.name) \
               FROM toolgate.limits l WHERE l.tenant_id = t.tenant_id), '[]')::text \
             FROM toolgate.tenants t WHERE t.tenant_id = $1",
            &[tenant.into()],
            |r| Ok((spi::col::<String>(r, 1)?, spi::col::<String>(r, 2)?)),
        );
        let Some((zone, rows)) = read else { return Rc::default() };
        let rows: Vec<Value> = serde_json::from_str(&rows).unwrap_or_default();
        let limits = rows
            .iter()
            .filter_map(|l| {
                Some(Limit {
                    name: l["name"].as_str()?.to_string(),
                    tool: l["tool"].as_str().map(str::to_string),
                    role: l["role"].as_str().map(str::to_string),
                    per_actor: l["per_actor"].as_bool()?,
                    value: l["value"].as_bool()?,
                    rolling: l["rolling"].as_i64().map(|s| s as i32),
                    calendar: l["calendar"].as_str().map(str::to_string),
                    max: Decimal::from_str(l["max"].as_str()?).ok()?,
                })
            })
            .collect();
        Rc::new(Tenant { zone, limits })
    })
}

/// What one limit took from one counter: given back by `refund`.
struct Charge {
    name: String,
    subject: String,
    /// The bucket's start, in seconds since the epoch.
    bucket: i64,
    amount: Decimal,
    /// The window's use after this call.
    after: Decimal,
}

/// What a call took from its tenant's limits.
#[derive(Default)]
pub struct Charged {
    tenant: String,
    charges: Vec<Charge>,
}

impl Charged {
    /// What the audit keeps: each limit charged, and its use in the window after this call.
    pub fn noted(&self) -> Option<Value> {
        (!self.charges.is_empty()).then(|| {
            Value::Array(self.charges.iter().map(|c| json!({"limit": c.name, "used": number(&c.after)})).collect())
        })
    }
}

/// The limits of `t` that apply to `who` calling `tool`, in name order, each with its counter's
/// subject and the amount the call counts for (a value limit skips a call that has no value).
fn applicable<'t>(
    t: &'t Tenant,
    who: &'t Identity,
    tool: &'t str,
    value: Option<Decimal>,
) -> impl Iterator<Item = (&'t Limit, String, Decimal)> + 't {
    let holds = |role: &str| if who.roles.is_empty() { who.role == role } else { who.roles.iter().any(|r| r == role) };
    t.limits
        .iter()
        .filter(move |l| l.tool.as_deref().is_none_or(|only| only == tool))
        .filter(move |l| l.role.as_deref().is_none_or(holds))
        .filter_map(move |l| {
            let amount = if l.value { value? } else { Decimal::ONE };
            let subject = if l.per_actor { who.sub.clone() } else { String::new() };
            Some((l, subject, amount))
        })
}

/// Consume every limit that applies to this call, in name order. On a limit with no room, what
/// the ones before it took is given back and the call is refused.
#[cfg_attr(feature = "steps", inline(never))]
pub fn consume(who: &Identity, tool: &str, value: Option<Decimal>) -> Step<Charged> {
    let t = tenant(&who.tenant);
    let mut charged = Charged { tenant: who.tenant.clone(), charges: Vec::new() };
    for (limit, subject, amount) in applicable(&t, who, tool, value) {
        match take(&who.tenant, &t.zone, limit, &subject, amount) {
            Ok((bucket, after)) => {
                charged.charges.push(Charge { name: limit.name.clone(), subject, bucket, amount, after });
            }
            Err(()) => {
                refund(&charged);
                return Err(exceeded(&who.tenant, &t.zone, limit, &subject, amount));
            }
        }
    }
    Ok(charged)
}

/// A proposal's check: every limit that applies has room for this call now. Nothing is taken:
/// its confirmation consumes.
#[cfg_attr(feature = "steps", inline(never))]
pub fn check(who: &Identity, tool: &str, value: Option<Decimal>) -> Step<()> {
    let t = tenant(&who.tenant);
    for (limit, subject, amount) in applicable(&t, who, tool, value) {
        let used = used_now(&who.tenant, &t.zone, limit, &subject);
        if used + amount > limit.max {
            return Err(exceeded(&who.tenant, &t.zone, limit, &subject, amount));
        }
    }
    Ok(())
}

/// After the effect (tier 0, or a confirmation's): an effect that refused gives back what the
/// call took; an outbox call's charges are kept on its intent (`keep_with_intent`).
pub fn after_effect(charged: &Charged, applied: &Step<Reply>, tool: &str, key: &str) {
    match applied {
        Err(_) => refund(charged),
        Ok(reply) if reply.outcome == Outcome::Pending => keep_with_intent(charged, tool, key),
        Ok(_) => {}
    }
}

/// An outbox call's charges, kept on its intent (`toolgate.outbox.limits`): the ERP may still do
/// it, so they stay taken, and `toolgate.outbox_settle` gives them back if the ERP refuses it
/// (REJECTED, or a person's word that it was not done). Nothing to keep: no statement.
fn keep_with_intent(charged: &Charged, tool: &str, key: &str) {
    if charged.charges.is_empty() {
        return;
    }
    let kept: Vec<Value> = charged
        .charges
        .iter()
        .map(|c| json!({"name": c.name, "subject": c.subject, "bucket": c.bucket, "amount": c.amount.to_string()}))
        .collect();
    spi::run(
        "UPDATE toolgate.outbox SET limits = $4::jsonb WHERE tenant_id = $1 AND tool = $2 AND idempotency_key = $3",
        &[charged.tenant.as_str().into(), tool.into(), key.into(), Value::Array(kept).to_string().into()],
    );
}

/// Give back what a call took: its effect refused, or a later limit had no room.
fn refund(charged: &Charged) {
    for c in &charged.charges {
        spi::run(
            "UPDATE toolgate.limit_usage SET used = used - $5::numeric WHERE tenant_id = $1 AND name = $2 \
             AND subject = $3 AND bucket = pg_catalog.to_timestamp($4::float8) AND used >= $5::numeric",
            &[
                charged.tenant.as_str().into(),
                c.name.as_str().into(),
                c.subject.as_str().into(),
                c.bucket.into(),
                c.amount.to_string().into(),
            ],
        );
    }
}

/// Take `amount` from one counter if its window has room: the bucket charged and the window's
/// use after; `Err` when there is no room (nothing taken). The bucket comes back as seconds since
/// the epoch through an interval (`bucket - 'epoch'`), every function of it IMMUTABLE: Citus takes
/// no other in an INSERT's RETURNING, and a SQL function there would be run, not inlined.
fn take(tenant: &str, zone: &str, l: &Limit, subject: &str, amount: Decimal) -> Result<(i64, Decimal), ()> {
    let amount_text = amount.to_string();
    let max_text = l.max.to_string();
    let taken = match (&l.calendar, l.rolling) {
        (Some(_), _) if amount > l.max => None,
        (Some(period), _) => spi::one(
            "INSERT INTO toolgate.limit_usage AS u (tenant_id, name, subject, bucket, used) \
             VALUES ($1, $2, $3, pg_catalog.date_trunc($4, pg_catalog.statement_timestamp(), $5), $6::numeric) \
             ON CONFLICT (tenant_id, name, subject, bucket) DO UPDATE SET used = u.used + excluded.used \
              WHERE u.used + excluded.used <= $7::numeric \
             RETURNING pg_catalog.date_part('epoch', u.bucket - 'epoch'::timestamptz)::bigint, u.used::text",
            &[
                tenant.into(),
                l.name.as_str().into(),
                subject.into(),
                period.as_str().into(),
                zone.into(),
                amount_text.as_str().into(),
                max_text.as_str().into(),
            ],
            |r| Ok((spi::col::<i64>(r, 1)?, spi::col::<String>(r, 2)?)),
        ),
        (None, Some(rolling)) => {
            // One consumption of this window at a time; then its sum as the newest committed
            // state has it, and the charge if it fits.
            xactlock::hold(xactlock::LIMIT_COUNTER, key_lock_id(&[tenant, &l.name, subject]));
            let used = window_used(tenant, &l.name, subject, rolling, l.width());
            if used + amount > l.max {
                return Err(());
            }
            spi::one(
                "INSERT INTO toolgate.limit_usage AS u (tenant_id, name, subject, bucket, used) \
                 VALUES ($1, $2, $3, pg_catalog.to_timestamp(pg_catalog.floor( \
                             pg_catalog.date_part('epoch', pg_catalog.statement_timestamp()) / $4) * $4), $5::numeric) \
                 ON CONFLICT (tenant_id, name, subject, bucket) DO UPDATE SET used = u.used + excluded.used \
                 RETURNING pg_catalog.date_part('epoch', u.bucket - 'epoch'::timestamptz)::bigint",
                &[tenant.into(), l.name.as_str().into(), subject.into(), l.width().into(), amount_text.as_str().into()],
                |r| spi::col::<i64>(r, 1),
            )
            .map(|bucket| (bucket, (used + amount).to_string()))
        }
        (None, None) => None,
    };
    let (bucket, after) = taken.ok_or(())?;
    Ok((bucket, Decimal::from_str(&after).unwrap_or_default()))
}

/// What one counter used in its window now, under the newest committed state (no lock: a
/// proposal's check, a refusal's detail).
fn used_now(tenant: &str, zone: &str, l: &Limit, subject: &str) -> Decimal {
    let used = match (&l.calendar, l.rolling) {
        (Some(period), _) => spi::latest(
            "SELECT coalesce(sum(u.used), 0)::text FROM toolgate.limit_usage u \
              WHERE u.tenant_id = $1 AND u.name = $2 AND u.subject = $3 \
                AND u.bucket = pg_catalog.date_trunc($4, pg_catalog.statement_timestamp(), $5)",
            &[tenant.into(), l.name.as_str().into(), subject.into(), period.as_str().into(), zone.into()],
            |r| spi::col::<String>(r, 1),
        ),
        (None, Some(rolling)) => return window_used(tenant, &l.name, subject, rolling, l.width()),
        (None, None) => None,
    };
    used.and_then(|u| Decimal::from_str(&u).ok()).unwrap_or_default()
}

/// What a rolling counter's buckets in the window hold now, under the newest committed state:
/// every bucket whose end has not left the window (its start after now − window − width).
fn window_used(tenant: &str, name: &str, subject: &str, rolling: i32, width: i32) -> Decimal {
    spi::latest(
        "SELECT coalesce(sum(u.used), 0)::text FROM toolgate.limit_usage u \
          WHERE u.tenant_id = $1 AND u.name = $2 AND u.subject = $3 \
            AND u.bucket > pg_catalog.statement_timestamp() - pg_catalog.make_interval(secs => $4 + $5)",
        &[tenant.into(), name.into(), subject.into(), rolling.into(), width.into()],
        |r| spi::col::<String>(r, 1),
    )
    .and_then(|u| Decimal::from_str(&u).ok())
    .unwrap_or_default()
}

/// Seconds until `amount` fits under `l` again: the next period's start for a calendar limit;
/// for a rolling one, when enough of the oldest buckets have left the window. None when the
/// amount alone is over the limit.
fn retry_after(tenant: &str, zone: &str, l: &Limit, subject: &str, used: Decimal, amount: Decimal) -> Option<i64> {
    if amount > l.max {
        return None;
    }
    match (&l.calendar, l.rolling) {
        (Some(period), _) => spi::one(
            "SELECT pg_catalog.ceil(pg_catalog.date_part('epoch', \
                 (pg_catalog.timezone($2, pg_catalog.date_trunc($1, pg_catalog.statement_timestamp(), $2)) \
                  + ('1 ' || $1)::interval) AT TIME ZONE $2 - pg_catalog.statement_timestamp()))::bigint",
            &[period.as_str().into(), zone.into()],
            |r| spi::col::<i64>(r, 1),
        ),
        (None, Some(rolling)) => {
            // Each bucket in the window, oldest first: when it stops counting, what it holds.
            let (leaves, held) = spi::latest(
                "SELECT coalesce(pg_catalog.array_agg(pg_catalog.ceil(pg_catalog.date_part('epoch', \
                            u.bucket + pg_catalog.make_interval(secs => $4 + $5) - pg_catalog.statement_timestamp() \
                        ))::bigint ORDER BY u.bucket), '{}'), \
                        coalesce(pg_catalog.array_agg(u.used::text ORDER BY u.bucket), '{}') \
                   FROM toolgate.limit_usage u \
                  WHERE u.tenant_id = $1 AND u.name = $2 AND u.subject = $3 \
                    AND u.bucket > pg_catalog.statement_timestamp() - pg_catalog.make_interval(secs => $4 + $5)",
                &[tenant.into(), l.name.as_str().into(), subject.into(), rolling.into(), l.width().into()],
                |r| Ok((spi::col::<Vec<i64>>(r, 1)?, spi::col::<Vec<String>>(r, 2)?)),
            )?;
            let need = used + amount - l.max;
            let mut freed = Decimal::ZERO;
            leaves.into_iter().zip(held).find_map(|(leaves, held)| {
                freed += Decimal::from_str(&held).unwrap_or_default();
                (freed >= need).then_some(leaves.max(1))
            })
        }
        (None, None) => None,
    }
}

/// The refusal of a call `l` has no room for: the limit, its window, its use and when it frees.
fn exceeded(tenant: &str, zone: &str, l: &Limit, subject: &str, amount: Decimal) -> Deny {
    let used = used_now(tenant, zone, l, subject);
    let retry = retry_after(tenant, zone, l, subject, used, amount);
    Deny::because(
        Rule::LimitExceeded,
        json!({
            "limit": l.name,
            "window": l.window(),
            "max": number(&l.max),
            "used": number(&used),
            "retry_after": retry,
        }),
    )
}

/// A decimal as a JSON number (calls are whole; values have the currency's places).
fn number(d: &Decimal) -> Value {
    serde_json::from_str(&d.normalize().to_string()).unwrap_or(Value::Null)
}
