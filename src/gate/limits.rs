//! Step 6, over time: the tenant's limits (`toolgate.limits`, sql/limits.sql), each a count of
//! calls or a sum of their value per rolling window or calendar period, per actor or shared, for
//! one tool or all, one role or all. Every limit that applies to a call is consumed in the call's
//! own transaction before its effect, in name order; when one has no room, what the others took is
//! given back and the call is `BLOCKED limit_exceeded`, with when it frees up.
//!
//! Exact under concurrency. Every counter a call charges is first held with a lock no client can
//! take (`xactlock`, as the ledger's keys are), in name order, until the transaction ends: two
//! calls never charge one counter at once. A calendar limit has one bucket per period (its start,
//! kept per backend until the period ends, `period_start`); its row is the period's whole use, so
//! its charge carries its own check (`… WHERE used + amount <= max`). A rolling limit sums the
//! buckets of its window (each a sixtieth of it) under the newest committed state
//! (`spi::latest`), which holds every consumption made before the lock was granted, whatever the
//! caller's isolation level. One statement then charges every counter whose row exists
//! (`update_statement`); a period or bucket with no row yet gets one. A bucket counts until its end
//! leaves the window: a limit frees up at most one bucket late, never early.
//!
//! When: a tier-0 call consumes at step 6. A proposal only checks (a limit already full refuses
//! it); its confirmation consumes in the effect's transaction, so a decline or an expiry takes
//! nothing. An effect that refuses gives back what its call took (`refund`); an outbox call's
//! intent keeps it until the ERP answers (`keep_with_intent`).

use pgrx::datum::{DatumWithOid, TimestampWithTimeZone};
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

/// Consume every limit that applies to this call. Each counter is held first, in name order,
/// until the transaction ends (`xactlock`): one consumption of a counter at a time. A rolling
/// window is summed under the newest committed state (no room: refused, nothing taken). Then one
/// statement charges the counters whose period or bucket has a row already, a calendar one only
/// if its period has room; a counter with no row yet gets one. If one had no room, what the others
/// took is given back and the call is refused by the first, in name order, that had none.
#[cfg_attr(feature = "steps", inline(never))]
pub fn consume(who: &Identity, tool: &str, value: Option<Decimal>) -> Step<Charged> {
    let t = tenant(&who.tenant);
    let mut charged = Charged { tenant: who.tenant.clone(), charges: Vec::new() };
    // SAFETY: a plain read of the backend's statement start, the `statement_timestamp()` the
    // gate's SQL sees.
    let now = unsafe { pgrx::pg_sys::GetCurrentStatementStartTimestamp() };
    let mut counters: Vec<Counter> = Vec::new();
    for (limit, subject, amount) in applicable(&t, who, tool, value) {
        xactlock::hold(xactlock::LIMIT_COUNTER, key_lock_id(&[&who.tenant, &limit.name, &subject]));
        let (bucket, before) = match (&limit.calendar, limit.rolling) {
            (Some(period), _) => (period_start(&t.zone, period, now), None),
            (None, Some(rolling)) => {
                let width = i64::from(limit.width()) * MICROS;
                (
                    now.div_euclid(width) * width,
                    Some(window_used(&who.tenant, &limit.name, &subject, rolling, limit.width())),
                )
            }
            (None, None) => continue,
        };
        if before.unwrap_or_default() + amount > limit.max {
            return Err(exceeded(&who.tenant, &t.zone, limit, &subject, amount));
        }
        counters.push(Counter { limit, subject, amount, bucket, before });
    }
    if counters.is_empty() {
        return Ok(charged);
    }
    let cap = |c: &Counter| c.before.is_none().then(|| c.limit.max.to_string());
    let mut args: Vec<DatumWithOid> = vec![who.tenant.as_str().into()];
    for c in &counters {
        args.push(c.limit.name.as_str().into());
        args.push(c.subject.as_str().into());
        args.push(stamp(c.bucket).into());
        args.push(c.amount.to_string().into());
        args.push(cap(c).into());
    }
    let updated = spi::query(update_statement(counters.len()), &args, |r| {
        Ok((spi::col::<String>(r, 1)?, spi::col::<String>(r, 2)?))
    });
    for c in counters {
        let used = match updated.iter().find(|(name, _)| *name == c.limit.name) {
            Some((_, used)) => Some(used.clone()),
            // No row for this period or bucket yet (or a period with no room): made, or charged
            // if it has room.
            None => spi::one(
                "INSERT INTO toolgate.limit_usage AS u (tenant_id, name, subject, bucket, used) \
                 VALUES ($1, $2, $3, $4, $5::numeric) \
                 ON CONFLICT (tenant_id, name, subject, bucket) DO UPDATE SET used = u.used + excluded.used \
                  WHERE (u.used + excluded.used <= $6::numeric) IS NOT FALSE \
                 RETURNING u.used::text",
                &[
                    who.tenant.as_str().into(),
                    c.limit.name.as_str().into(),
                    c.subject.as_str().into(),
                    stamp(c.bucket).into(),
                    c.amount.to_string().into(),
                    cap(&c).into(),
                ],
                |r| spi::col::<String>(r, 1),
            ),
        };
        let Some(used) = used else {
            refund(&charged);
            return Err(exceeded(&who.tenant, &t.zone, c.limit, &c.subject, c.amount));
        };
        let after = c.before.map_or_else(|| Decimal::from_str(&used).unwrap_or_default(), |before| before + c.amount);
        let bucket = c.bucket.div_euclid(MICROS) + UNIX_TO_POSTGRES_EPOCH;
        charged.charges.push(Charge {
            name: c.limit.name.clone(),
            subject: c.subject,
            bucket,
            amount: c.amount,
            after,
        });
    }
    Ok(charged)
}

/// One counter a call charges: its limit, subject and amount, its bucket (a `timestamptz`'s
/// microseconds), and for a rolling limit its window's use before the call (held, so exact).
struct Counter<'t> {
    limit: &'t Limit,
    subject: String,
    amount: Decimal,
    bucket: i64,
    before: Option<Decimal>,
}

const MICROS: i64 = 1_000_000;
/// Seconds from 1970-01-01 to 2000-01-01 (PostgreSQL's epoch), both UTC.
const UNIX_TO_POSTGRES_EPOCH: i64 = 946_684_800;

fn stamp(micros: i64) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(micros).expect("a bucket within timestamptz's range")
}

/// The start of the calendar `period` (day, week, month) in time zone `zone` that holds `now`
/// (microseconds, as a `timestamptz`): kept with its end per backend, so a period's start is asked
/// of PostgreSQL once per period, not per call.
fn period_start(zone: &str, period: &str, now: i64) -> i64 {
    thread_local! {
        static PERIODS: RefCell<Vec<(String, String, i64, i64)>> = const { RefCell::new(Vec::new()) };
    }
    PERIODS.with_borrow_mut(|periods| {
        if let Some((.., start, _)) =
            periods.iter().find(|(z, p, start, end)| z == zone && p == period && *start <= now && now < *end)
        {
            return *start;
        }
        let (start, end) = spi::one(
            "SELECT (extract(epoch FROM s) * 1000000)::int8, \
                    (extract(epoch FROM pg_catalog.timezone($2, pg_catalog.timezone($2, s) + ('1 ' || $1)::interval)) \
                     * 1000000)::int8 \
               FROM (SELECT pg_catalog.date_trunc($1, pg_catalog.statement_timestamp(), $2) AS s) p",
            &[period.into(), zone.into()],
            |r| Ok((spi::col::<i64>(r, 1)?, spi::col::<i64>(r, 2)?)),
        )
        .expect("one row");
        let (start, end) = (start - UNIX_TO_POSTGRES_EPOCH * MICROS, end - UNIX_TO_POSTGRES_EPOCH * MICROS);
        periods.retain(|(z, p, ..)| !(z == zone && p == period));
        periods.push((zone.to_string(), period.to_string(), start, end));
        start
    })
}

/// The statement that charges the `n` counters of one tenant (`$1`) whose rows exist: each counter
/// five arguments (limit, subject, bucket, amount, and its period's max for a calendar limit, NULL
/// for a rolling one, whose window was summed under its lock). Each row is found by its whole key
/// (an `OR` of them: one index probe each, never a scan of the tenant's rows, which a join with
/// the counters could plan). Returns each counter charged, with its row's use after. The texts are
/// made once per count and kept: each plan is prepared once.
fn update_statement(n: usize) -> &'static str {
    thread_local! {
        static TEXTS: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
    }
    TEXTS.with_borrow_mut(|texts| {
        while texts.len() < n {
            // Counter i's arguments: $p limit, $p+1 subject, $p+2 bucket, $p+3 amount, $p+4 cap.
            let counters: Vec<usize> = (0..=texts.len()).map(|i| 2 + 5 * i).collect();
            let keys: Vec<String> = counters
                .iter()
                .map(|p| format!("(u.name = ${p} AND u.subject = ${} AND u.bucket = ${})", p + 1, p + 2))
                .collect();
            // A searched CASE: Citus sends a simple one (`CASE u.name WHEN …`) to the worker
            // with each arm rewritten as a comparison (`WHEN u.name = …`), which fails there.
            let of = |k: usize| -> String {
                let arms: String =
                    counters.iter().map(|p| format!(" WHEN u.name = ${p} THEN ${}::numeric", p + k)).collect();
                format!("CASE{arms} END")
            };
            let text = format!(
                "UPDATE toolgate.limit_usage AS u SET used = u.used + {amount} \
                  WHERE u.tenant_id = $1 AND ({keys}) AND (u.used + {amount} <= {cap}) IS NOT FALSE \
                 RETURNING u.name, u.used::text",
                amount = of(3),
                cap = of(4),
                keys = keys.join(" OR "),
            );
            texts.push(Box::leak(text.into_boxed_str()));
        }
        texts[n - 1]
    })
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
