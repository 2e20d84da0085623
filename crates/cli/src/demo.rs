//! Seed 000's lab, replayed through the SQL API as an application would: invalid arguments, the
//! cross-tenant order, a declined confirmation, a confirmed close whose reply is lost after
//! commit and retried with the same key, the injected note read as data, the rollback to
//! read-only, seed 001 on an ERP of the DBA's own, parts ordered from a supplier behind HTTP
//! through the outbox and the dispatcher, and the hunt for secrets. Every invariant is checked
//! against the database (and, for the supplier, against the fake supplier's own count).

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tokio_postgres::Client;

use crate::db::{self, verdict, Server};
use crate::fixture::{Lab, APP, AUDITOR, DBA, ONCALL};
use crate::{keys, Result};

pub struct Options {
    pub server: Server,
    pub dbname: String,
    pub keys_dir: PathBuf,
    /// The server's log file, searched for secrets.
    pub server_log: Option<PathBuf>,
}

/// The invariants and what broke.
#[derive(Default)]
pub struct Checks {
    pub broken: Vec<String>,
    pub held: usize,
}

impl Checks {
    pub fn that(&mut self, name: &str, ok: bool) {
        println!("    [{}] {name}", if ok { "ok" } else { "BROKEN" });
        if ok {
            self.held += 1;
        } else {
            self.broken.push(name.to_string());
        }
    }
}

fn show(label: &str, reply: &Value) {
    let (outcome, rule) = verdict(reply);
    let replayed = if reply["replayed"] == true { " (replayed)" } else { "" };
    println!("    {label}: {outcome}{}{replayed}", if rule.is_empty() { String::new() } else { format!(" {rule}") });
}

fn close_args(order_id: &str, key: &str) -> Value {
    json!({"order_id": order_id, "reason": "Inspeção validada pelo supervisor", "idempotency_key": key})
}

async fn effects(root: &Client) -> Result<i64> {
    db::count(root, "SELECT count(*) FROM toolgate.effects", &[]).await
}

/// Every table of the extension as JSON text, to search for what must never be stored: all but
/// `erp_credentials`, where the dispatchers keep the ERP's current tokens and no role reads.
async fn all_rows(root: &Client) -> Result<String> {
    let tables: Vec<String> = root
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'toolgate' AND tablename <> 'erp_credentials' \
             ORDER BY 1",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = String::new();
    for t in tables {
        let sql = format!("SELECT coalesce(string_agg(row_to_json(x)::text, E'\\n'), '') FROM toolgate.\"{t}\" x");
        let rows: String = root.query_one(&sql, &[]).await?.get(0);
        out.push_str(&rows);
        out.push('\n');
    }
    Ok(out)
}

/// Seed 001's refund system, an ERP of the DBA's own (`examples/refunds/`).
const REFUNDS: &str = include_str!("../../../examples/refunds/refunds.sql");

/// The maintenance ERP's parts supplier, behind HTTP: an outbox tool (`examples/maintenance/`).
const SUPPLIER: &str = include_str!("../../../examples/maintenance/supplier.sql");
const SUPPLIER_TOOL: &str = "order_part_from_supplier";

/// Seed 000's conversation for the close stories (1 to 4).
const CONV: &str = "conv-lab-742";

/// The lab across its stories: its connections, the supervisor of shopping-a's identity, every
/// token minted (searched for in story 10), the BLOCKED replies shopping-a got (the panel must
/// count as many) and the invariants.
struct Demo {
    lab: Lab,
    root: Client,
    app: Client,
    id_a: String,
    tokens: Vec<String>,
    blocked_a: i64,
    check: Checks,
}

pub async fn run(opts: &Options) -> Result<Checks> {
    println!("pg_toolgate demo: seed 000's lab through the SQL API, then seed 001 on an ERP of the DBA's own");
    let lab = Lab::create(&opts.server, &opts.dbname, &opts.keys_dir).await?;
    let root = lab.connect("postgres").await?;
    let app = lab.connect(APP).await?;
    let id_a = lab.supervisor_a();
    let tokens = vec![id_a.clone()];
    let mut demo = Demo { lab, root, app, id_a, tokens, blocked_a: 0, check: Checks::default() };
    println!("  fixture: tenants shopping-a and shopping-b, orders 742 (open, inspected) and 743 (injected note),");
    println!("           keys generated for each tenant's identity provider and channel, public halves registered");
    demo.invalid_arguments().await?;
    demo.cross_tenant().await?;
    demo.declined().await?;
    demo.lost_reply().await?;
    demo.injected_note().await?;
    demo.purchases().await?;
    demo.read_only().await?;
    demo.refunds().await?;
    println!("\n9. Parts from a supplier behind HTTP: an outbox tool, the dispatcher, a fake supplier ERP");
    let status_queries = supplier(&demo.lab, &demo.root, &demo.app, &demo.id_a, &mut demo.check).await?;
    demo.secrets(opts.server_log.as_deref()).await?;
    demo.panel(status_queries).await?;
    Ok(demo.check)
}

impl Demo {
    /// A BLOCKED reply to shopping-a, which the panel counts.
    fn count_blocked(&mut self, r: &Value) {
        if r["outcome"] == "BLOCKED" {
            self.blocked_a += 1;
        }
    }

    /// Story 1: arguments with an extra property are rejected before the ERP.
    async fn invalid_arguments(&mut self) -> Result<()> {
        println!("\n1. Invalid arguments (an extra property)");
        let mut args = close_args("742", "close-os-742-run-01");
        args["dangerous_extra"] = json!(true);
        let r = db::request_close(&self.app, &self.id_a, CONV, &args).await?;
        show("request_close", &r);
        println!("    errors: {}", r["errors"]);
        self.check.that(
            "invalid arguments are rejected before the ERP",
            verdict(&r) == ("REJECTED".into(), "schema_invalid".into()) && effects(&self.root).await? == 0,
        );
        Ok(())
    }

    /// Story 2: another tenant's order is refused exactly like a missing one.
    async fn cross_tenant(&mut self) -> Result<()> {
        println!("\n2. Order 743 belongs to shopping-b");
        let r = db::request_close(&self.app, &self.id_a, CONV, &close_args("743", "cross-tenant-743")).await?;
        self.count_blocked(&r);
        show("request_close 743", &r);
        let missing = db::request_close(&self.app, &self.id_a, CONV, &close_args("999", "missing-order-999")).await?;
        self.count_blocked(&missing);
        self.check.that(
            "another tenant's order is blocked exactly like a missing one",
            verdict(&r) == ("BLOCKED".into(), "target_not_found".into()) && r == missing,
        );
        self.check.that("the cross-tenant call reached no ERP row", effects(&self.root).await? == 0);
        Ok(())
    }

    /// Story 3: a declined proposal changes nothing.
    async fn declined(&mut self) -> Result<()> {
        println!("\n3. The person declines");
        let r = db::request_close(&self.app, &self.id_a, CONV, &close_args("742", "declined-close-742")).await?;
        show("request_close", &r);
        println!("    proposal text: {}", r["proposal"]["text"].as_str().unwrap_or_default());
        let pid = r["proposal"]["id"].as_str().unwrap_or_default().to_string();
        let no = keys::confirmation(&self.lab.a.channel, &pid, "decline", "não", keys::now(), "typed");
        self.tokens.push(no.clone());
        let r = db::confirm(&self.app, &self.id_a, &no).await?;
        show("confirm (não)", &r);
        self.check.that(
            "a declined proposal changes nothing",
            verdict(&r) == ("CANCELLED".into(), "human_declined".into()) && effects(&self.root).await? == 0,
        );
        Ok(())
    }

    /// Story 4: a confirmed close whose reply is lost after commit, retried with the same key: one
    /// effect.
    async fn lost_reply(&mut self) -> Result<()> {
        println!("\n4. Confirmed close; the reply is lost after commit; retry with the same key");
        let args = close_args("742", "timeout-close-742");
        let r = db::request_close(&self.app, &self.id_a, CONV, &args).await?;
        show("request_close", &r);
        let pid = r["proposal"]["id"].as_str().unwrap_or_default().to_string();
        let yes = keys::confirmation(&self.lab.a.channel, &pid, "approve", "sim", keys::now(), "typed");
        self.tokens.push(yes.clone());
        let (identity, answer) = (self.id_a.clone(), yes.clone());
        self.lab
            .lose_reply("timeout-close-742", |lossy| async move {
                let _never_read = db::confirm(&lossy, &identity, &answer).await;
            })
            .await?;
        println!("    confirm (sim): committed, connection dropped before the reply was read");
        self.app = self.lab.connect(APP).await?;
        let retry = db::request_close(&self.app, &self.id_a, CONV, &args).await?;
        show("retry, same key", &retry);
        self.check.that(
            "the retry replays the stored result",
            verdict(&retry) == ("SUCCEEDED".into(), String::new()) && retry["replayed"] == true,
        );
        self.check.that("exactly one effect after the lost reply and the retry", effects(&self.root).await? == 1);
        Ok(())
    }

    /// Story 5: the injected note of order 743, read as data.
    async fn injected_note(&mut self) -> Result<()> {
        println!("\n5. The injected note of order 743, read as data");
        let calls_before =
            db::count(&self.root, "SELECT count(*) FROM toolgate.audit WHERE kind = 'call'", &[]).await?;
        let id_b = self.lab.supervisor_b();
        self.tokens.push(id_b.clone());
        let r = db::read_order(&self.app, &id_b, "743").await?;
        show("read_order 743 (shopping-b)", &r);
        println!("    note: {}", r["result"]["note"]);
        self.check.that(
            "the note comes back marked untrusted and flagged suspicious",
            r["result"]["note"]["untrusted"] == true
                && r["result"]["note"]["suspicious"].as_array().is_some_and(|a| !a.is_empty()),
        );
        let cross = db::read_order(&self.app, &self.id_a, "743").await?;
        self.count_blocked(&cross);
        let absent = db::read_order(&self.app, &self.id_a, "999").await?;
        self.count_blocked(&absent);
        show("read_order 743 (shopping-a)", &cross);
        self.check.that("shopping-a cannot tell 743 from a missing order", cross == absent);
        let calls_after = db::count(&self.root, "SELECT count(*) FROM toolgate.audit WHERE kind = 'call'", &[]).await?;
        self.check.that(
            "reading the note made no call and no effect",
            calls_after == calls_before && effects(&self.root).await? == 1,
        );
        Ok(())
    }

    /// Story 6: purchases for order 741: the value from the catalogue, the limits, the tiers, the
    /// quota.
    async fn purchases(&mut self) -> Result<()> {
        println!("\n6. Purchases for order 741: value from the catalogue, limits, tiers, quota of 3 per conversation");
        let conv_p = "conv-compras-741";
        let buy = |part: &str, quantity: i64, key: &str| json!({"order_id": "741", "part_id": part, "quantity": quantity, "cost_center": "CC-MANUT", "idempotency_key": key});
        let r = db::request_purchase_part(&self.app, &self.id_a, conv_p, &buy("F-200", 4, "buy-f200-741-a")).await?;
        show("4 × F-200", &r);
        println!("    proposal text: {}", r["proposal"]["text"].as_str().unwrap_or_default());
        let pid = r["proposal"]["id"].as_str().unwrap_or_default().to_string();
        let yes = keys::confirmation(&self.lab.a.channel, &pid, "approve", "sim", keys::now(), "typed");
        self.tokens.push(yes.clone());
        let r = db::confirm(&self.app, &self.id_a, &yes).await?;
        show("confirm (sim)", &r);
        self.check.that(
            "a purchase within every limit applies after a \"sim\", priced by the catalogue",
            verdict(&r) == ("SUCCEEDED".into(), String::new()) && r["result"]["total"] == "50.00",
        );

        let r =
            db::request_purchase_part(&self.app, &self.id_a, conv_p, &buy("B42-MOTOR", 2, "buy-motor-741-a")).await?;
        self.count_blocked(&r);
        show("2 × B42-MOTOR (R$ 960,00; the limit is R$ 900,00)", &r);
        self.check.that(
            "a purchase over the value limit is blocked",
            verdict(&r) == ("BLOCKED".into(), "value_over_limit".into()),
        );

        let r =
            db::request_purchase_part(&self.app, &self.id_a, conv_p, &buy("B42-MOTOR", 1, "buy-motor-741-b")).await?;
        show("1 × B42-MOTOR (R$ 480,00: tier 3)", &r);
        let text = r["proposal"]["text"].as_str().unwrap_or_default().to_string();
        println!("    proposal text: {text}");
        let pid = r["proposal"]["id"].as_str().unwrap_or_default().to_string();
        let plain = keys::confirmation(&self.lab.a.channel, &pid, "approve", "sim", keys::now(), "typed");
        self.tokens.push(plain.clone());
        let refused = db::confirm(&self.app, &self.id_a, &plain).await?;
        self.count_blocked(&refused);
        show("confirm (sim)", &refused);
        // The person reads the challenge word in the text and types it.
        let word = text.rsplit(' ').next().unwrap_or_default().to_string();
        let typed = keys::confirmation(&self.lab.a.channel, &pid, "approve", &word, keys::now(), "typed");
        self.tokens.push(typed.clone());
        let accepted = db::confirm(&self.app, &self.id_a, &typed).await?;
        show("confirm (the typed word)", &accepted);
        self.check.that(
            "tier 3 refuses a plain \"sim\" and accepts the typed challenge word",
            verdict(&refused) == ("BLOCKED".into(), "confirmation_invalid".into())
                && verdict(&accepted) == ("SUCCEEDED".into(), String::new()),
        );

        let third =
            db::request_purchase_part(&self.app, &self.id_a, conv_p, &buy("F-200", 2, "buy-f200-741-b")).await?;
        show("2 × F-200 (third call admitted)", &third);
        let fourth =
            db::request_purchase_part(&self.app, &self.id_a, conv_p, &buy("F-200", 1, "buy-f200-741-c")).await?;
        self.count_blocked(&fourth);
        show("1 × F-200 (fourth)", &fourth);
        self.check.that(
            "the quota admits three calls; the value-limit denial consumed none",
            third["outcome"] == "NEEDS_CONFIRMATION"
                && verdict(&fourth) == ("BLOCKED".into(), "rate_over_limit".into()),
        );
        let spent = db::json(
            &self.root,
            "SELECT to_jsonb(spent::text) FROM maintenance.cost_centers WHERE cost_center = 'CC-MANUT'",
            &[],
        )
        .await?;
        println!("    CC-MANUT spent: {spent}");
        self.check.that("the budget was charged exactly the two purchases", spent == "530.00");
        Ok(())
    }

    /// Story 7: the rollback to read-only: on-call turns writes off and cannot turn them on again.
    async fn read_only(&mut self) -> Result<()> {
        println!("\n7. Rollback to read-only: on-call turns writes off");
        let oncall = self.lab.connect(ONCALL).await?;
        oncall.execute("SELECT toolgate.set_writes_enabled(false)", &[]).await?;
        let r = db::request_close(&self.app, &self.id_a, "conv-lab-rollback", &close_args("742", "rollback-close-742"))
            .await?;
        self.count_blocked(&r);
        show("request_close", &r);
        let read = db::read_order(&self.app, &self.id_a, "742").await?;
        show("read_order 742", &read);
        self.check.that("writes are blocked", verdict(&r) == ("BLOCKED".into(), "write_disabled".into()));
        self.check.that("read_order still answers", read["outcome"] == "SUCCEEDED");
        self.check.that("no new effect while read-only", effects(&self.root).await? == 3);
        let reopen = oncall.execute("SELECT toolgate.set_writes_enabled(true)", &[]).await;
        self.check.that(
            "on-call cannot turn writes back on",
            reopen.is_err_and(|e| e.code() == Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)),
        );
        Ok(())
    }

    /// Story 8: seed 001 on an ERP of the DBA's own (`examples/refunds`, bound with `define_tool`).
    async fn refunds(&mut self) -> Result<()> {
        println!("\n8. Seed 001 on an ERP of the DBA's own: examples/refunds, bound with define_tool");
        let dba = self.lab.connect(DBA).await?;
        dba.execute("SELECT toolgate.set_writes_enabled(true)", &[]).await?;
        self.root.batch_execute(REFUNDS).await?;
        let mut refund_ids = Vec::new();
        for tenant in ["acme", "bravo"] {
            let idp = keys::generate(&self.lab.keys_dir, &format!("idp-{tenant}"))?;
            dba.execute("SELECT toolgate.add_key($1, $2, 'identity', $3)", &[&tenant, &idp.kid(), &idp.public_key()])
                .await?;
            refund_ids.push(keys::identity(&idp, "ana", tenant, "atendente", 3600));
        }
        self.tokens.extend(refund_ids.iter().cloned());
        let (acme, bravo) = (&refund_ids[0], &refund_ids[1]);
        let call = |who: &str, conv: &str, tool: &str, args: Value| {
            let (who, conv, tool) = (who.to_string(), conv.to_string(), tool.to_string());
            let app = &self.app;
            async move { db::json(app, "SELECT toolgate.call($1, $2, $3, $4)", &[&who, &conv, &tool, &args]).await }
        };
        let refund = |amount: &str, key: &str| json!({"valor_brl": amount, "pedido_id": "p1", "idempotency_key": key});
        let r =
            call(acme, "c1", "cancelar_assinatura", json!({"assinatura_id": "s1", "idempotency_key": "demo-cancel-1"}))
                .await?;
        show("acme cancelar_assinatura", &r);
        let not_allowed = verdict(&r) == ("BLOCKED".into(), "tool_not_allowed".into());
        let r = call(acme, "c1", "emitir_reembolso", refund("480.00", "demo-refund-480")).await?;
        show("acme emitir_reembolso R$ 480,00", &r);
        let over = verdict(&r) == ("BLOCKED".into(), "value_over_limit".into());
        let counted = db::count(
            &self.root,
            "SELECT count(*) FROM toolgate.quota_usage WHERE tenant_id = 'acme' AND conversation_id = 'c1'",
            &[],
        )
        .await?;
        let mut admitted = Vec::new();
        for i in 1..=3 {
            let r = call(acme, "c1", "emitir_reembolso", refund("10.00", &format!("demo-refund-10-{i}"))).await?;
            show(&format!("acme emitir_reembolso R$ 10,00 #{i}"), &r);
            admitted.push(verdict(&r));
        }
        let r = call(bravo, "c1", "emitir_reembolso", refund("10.00", "demo-refund-bravo")).await?;
        show("bravo emitir_reembolso", &r);
        let bravo_refused = verdict(&r) == ("BLOCKED".into(), "tool_not_allowed".into());
        let read = db::json(
            &self.app,
            "SELECT toolgate.read($1, 'consultar_pedido', '{\"pedido_id\": \"p2\"}')",
            &[&acme.as_str()],
        )
        .await?;
        show("acme consultar_pedido p2", &read);
        println!("    observacao: {}", read["result"]["observacao"]);
        let refunds = db::count(&self.root, "SELECT count(*) FROM refunds.reembolsos", &[]).await?;
        println!("    refunds the ERP recorded: {refunds}");
        self.check.that(
            "seed 001: allowlist, then value, then quota; the cheap denials consume no quota",
            not_allowed
                && over
                && counted == 0
                && admitted
                    == [
                        ("SUCCEEDED".into(), String::new()),
                        ("SUCCEEDED".into(), String::new()),
                        ("BLOCKED".into(), "rate_over_limit".into()),
                    ]
                && refunds == 2,
        );
        self.check.that("seed 001: a tenant with no row for the tool is refused", bravo_refused);
        self.check.that(
            "seed 001: the customer's note comes back as marked data",
            read["result"]["observacao"]["untrusted"] == true
                && read["result"]["observacao"]["suspicious"].as_array().is_some_and(|s| !s.is_empty()),
        );
        Ok(())
    }

    /// Story 10: tokens and private keys appear in no log line and no table.
    async fn secrets(&mut self, server_log: Option<&Path>) -> Result<()> {
        println!("\n10. Secrets: tokens and private keys appear in no log line and no table");
        let mut secrets = self.tokens.clone();
        for entry in std::fs::read_dir(&self.lab.keys_dir)? {
            // A PEM key file: its base64 lines, not its BEGIN and END lines.
            let text = std::fs::read_to_string(entry?.path())?;
            secrets.extend(
                text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("-----")).map(String::from),
            );
        }
        let mut haystack = all_rows(&self.root).await?;
        match server_log {
            Some(path) => haystack.push_str(&std::fs::read_to_string(path)?),
            None => println!("    (no server log given: tables only)"),
        }
        let audit =
            db::json(&self.root, "SELECT coalesce(jsonb_agg(a), '[]') FROM toolgate.audit a", &[]).await?.to_string();
        let leaked = secrets.iter().filter(|s| haystack.contains(s.as_str())).count();
        println!("    searched {} secrets in {} bytes of rows and log", secrets.len(), haystack.len());
        self.check.that("no token or private key in any table or log line", leaked == 0);
        let readable = db::count(
            &self.root,
            "SELECT count(*) FROM pg_roles r WHERE r.rolname LIKE 'toolgate%' \
             AND has_table_privilege(r.oid, 'toolgate.erp_credentials', 'SELECT')",
            &[],
        )
        .await?;
        self.check
            .that("the supplier's tokens, kept for the dispatchers, are readable by no toolgate role", readable == 0);
        self.check.that(
            "the audit holds no raw argument",
            !audit.contains("Inspeção validada") && !audit.contains("dangerous_extra"),
        );
        Ok(())
    }

    /// The panel as the auditor reads it, the effects the ERP recorded and the audit's summary; the
    /// panel must count what the stories did (`status_queries`: the supplier's, story 9).
    async fn panel(&mut self, status_queries: i64) -> Result<()> {
        let auditor = self.lab.connect(AUDITOR).await?;
        println!("\nPanel (read as toolgate_auditor):");
        println!(
            "    {:<12} {:>12} {:>15} {:>15} {:>21} {:>19} {:>15} {:>7}",
            "tenant",
            "schema_valid",
            "schema_rejected",
            "blocked_actions",
            "duplicates_suppressed",
            "confirmation_denied",
            "partial_results",
            "effects"
        );
        let mut panel_a = None;
        for row in auditor.query("SELECT * FROM toolgate.panel ORDER BY tenant_id NULLS LAST", &[]).await? {
            let tenant: Option<String> = row.get("tenant_id");
            let n = |c: &str| row.get::<_, i64>(c);
            println!(
                "    {:<12} {:>12} {:>15} {:>15} {:>21} {:>19} {:>15} {:>7}",
                tenant.clone().unwrap_or_else(|| "(none)".into()),
                n("schema_valid"),
                n("schema_rejected"),
                n("blocked_actions"),
                n("duplicates_suppressed"),
                n("confirmation_denied"),
                n("partial_results"),
                n("effects")
            );
            if tenant.as_deref() == Some("shopping-a") {
                panel_a = Some([
                    n("schema_rejected"),
                    n("confirmation_denied"),
                    n("duplicates_suppressed"),
                    n("effects"),
                    n("blocked_actions"),
                    n("partial_results"),
                ]);
            }
        }
        println!("\nEffects the ERP recorded:");
        for row in auditor
            .query(
                "SELECT tenant_id, tool, target, actor, coalesce('confirmed proposal ' || proposal_id, 'applied at once'), \
                 coalesce('R$ ' || value::text, '') FROM toolgate.effects ORDER BY at",
                &[],
            )
            .await?
        {
            let c = |i: usize| row.get::<_, String>(i);
            println!("    {} {} {} by {} ({}) {}", c(0), c(1), c(2), c(3), c(4), c(5));
        }
        println!("\nAudit summary (kind, outcome, rule, replayed: rows):");
        for row in auditor
            .query(
                "SELECT kind, outcome, coalesce(rule, '-'), replayed, count(*) FROM toolgate.audit_log \
                 GROUP BY 1, 2, 3, 4 ORDER BY min(audit_id)",
                &[],
            )
            .await?
        {
            println!(
                "    {:<8} {:<19} {:<17} {:<5} {}",
                row.get::<_, String>(0),
                row.get::<_, String>(1),
                row.get::<_, String>(2),
                row.get::<_, bool>(3),
                row.get::<_, i64>(4)
            );
        }
        println!();
        // The supplier's four orders are effects too; its status queries are replays of their keys.
        let duplicates = 1 + status_queries;
        self.check.that(
            &format!(
                "panel of shopping-a: schema_rejected 1, confirmation_denied 1, duplicates_suppressed {duplicates}, \
                 effects 7, blocked_actions {}, partial_results 1",
                self.blocked_a
            ),
            panel_a == Some([1, 1, duplicates, 7, self.blocked_a, 1]),
        );
        Ok(())
    }
}

/// Step 9: `examples/maintenance/supplier.sql` against a fake supplier ERP on 127.0.0.1, with
/// `toolgate dispatch` run in process. Four orders for work order 741: one applied, one whose
/// reply is lost (reconciled by its key to a single effect), one PARTIAL (the budget spent before
/// the follow-up could charge it, completed once it is raised), one held by the kill switch.
/// Returns the status queries made (replays of their keys, which the panel counts).
async fn supplier(lab: &Lab, root: &Client, app: &Client, id_a: &str, check: &mut Checks) -> Result<i64> {
    use crate::dispatch;
    use std::time::Duration;
    use toolgate_fake_erp::{Config, Fault, Matcher, Settings};

    let settings =
        Settings { per_second: 0, per_minute: 0, async_delay: Duration::from_millis(50), ..Settings::default() };
    let erp = toolgate_fake_erp::start("127.0.0.1:0".parse()?, Config { settings, refresh_token: None }).await?;
    root.batch_execute(SUPPLIER).await?;
    let token_file = lab.keys_dir.join("supplier-refresh-token");
    std::fs::write(&token_file, erp.refresh_token())?;
    // The example names a placeholder; the deployment moves it to the supplier's ERP (the DBA's
    // own act: toolgate.repoint_erp_endpoint, the owner's until granted).
    root.execute("SELECT toolgate.repoint_erp_endpoint('supplier', $1)", &[&erp.base_url()]).await?;
    root.batch_execute(&format!(
        "SET ROLE toolgate_admin;
         SELECT toolgate.set_policy('shopping-a', '{SUPPLIER_TOOL}', allowed => true, roles => ARRAY['supervisor'],
                                    tier => 0, max_value => 900, max_calls_per_conversation => 10);
         RESET ROLE;
         DO $$ BEGIN CREATE ROLE toolgate_demo_dispatcher LOGIN IN ROLE toolgate_dispatcher;
         EXCEPTION WHEN duplicate_object THEN NULL; END $$;"
    ))
    .await?;
    println!("    supplier ERP on {}; endpoint `supplier`, tool {SUPPLIER_TOOL} (PENDING at the call)", erp.base_url());
    let options = dispatch::Options {
        database: format!(
            "host={} port={} user=toolgate_demo_dispatcher dbname={}",
            lab.server.host, lab.server.port, lab.dbname
        ),
        refresh_token_files: [("supplier".to_string(), token_file)].into(),
        // The supplier's ERP runs on this machine (loopback): the demo's dispatcher is told so.
        allowed_origins: vec![dispatch::origin(&erp.base_url()).ok_or("the supplier ERP's URL")?],
        allow_private_addresses: true,
        timeout: Duration::from_secs(5),
        retry_delay: Duration::from_secs(1),
        ..dispatch::Options::default()
    };
    let order = |part: &str, quantity: i64, key: &str| {
        let args = json!({"order_id": "741", "part_id": part, "quantity": quantity, "cost_center": "CC-MANUT",
                          "idempotency_key": key});
        async move {
            db::json(app, "SELECT toolgate.call($1, 'conv-supplier', $2, $3)", &[&id_a, &SUPPLIER_TOOL, &args]).await
        }
    };
    let dispatched = |label: &'static str| {
        let options = options.clone();
        async move {
            let report = dispatch::run(&options).await?;
            let mut outcomes: Vec<String> = report.settled.iter().map(|(o, n)| format!("{o} {n}")).collect();
            outcomes.sort();
            println!("    toolgate dispatch ({label}): claimed {}, settled {}", report.claimed, outcomes.join(", "));
            Result::<_>::Ok(report)
        }
    };
    let at_erp = |key: &str| {
        let by_key = &erp.effects()["by_key"][format!("shopping-a:{SUPPLIER_TOOL}:{key}")];
        by_key["effects"].as_i64().unwrap_or(0)
    };
    let mut status_queries = 0;

    let r = order("F-200", 4, "supplier-741-applied").await?;
    show("order 4 × F-200", &r);
    let queued = verdict(&r) == ("PENDING".into(), String::new()) && erp.effects()["writes_received"] == 0;
    let report = dispatched("the supplier answers").await?;
    let r = order("F-200", 4, "supplier-741-applied").await?;
    status_queries += 1;
    show("the same key again (the status query)", &r);
    check.that(
        "applied: PENDING at the call, nothing sent before it committed, done once by the supplier, the status query says SUCCEEDED",
        queued
            && report.count("SUCCEEDED") == 1
            && at_erp("supplier-741-applied") == 1
            && verdict(&r) == ("SUCCEEDED".into(), String::new())
            && r["replayed"] == true,
    );

    erp.queue_fault(Fault::Drop, 1, Matcher::parse("POST /purchases").map_err(|e| e.to_string())?);
    let r = order("F-200", 2, "supplier-741-lost-reply").await?;
    show("order 2 × F-200", &r);
    let report = dispatched("the supplier applies it and the connection drops").await?;
    let sent = erp.effects()["writes_received"].as_i64().unwrap_or(0);
    check.that(
        "lost reply: reconciled by asking the supplier for the key, one effect, never sent twice",
        report.count("SUCCEEDED") == 1 && at_erp("supplier-741-lost-reply") == 1 && sent == 2,
    );

    let r = order("F-200", 6, "supplier-741-partial").await?;
    show("order 6 × F-200", &r);
    root.batch_execute(
        "UPDATE maintenance.cost_centers SET budget = spent WHERE tenant_id = 'shopping-a' AND cost_center = 'CC-MANUT'",
    )
    .await?;
    println!("    finance freezes CC-MANUT (budget = what is spent) before the dispatcher runs");
    let report = dispatched("the supplier takes it; the budget cannot be charged").await?;
    let r = order("F-200", 6, "supplier-741-partial").await?;
    status_queries += 1;
    show("the same key again (the status query)", &r);
    println!("    {}", r["content"][0]["text"].as_str().unwrap_or_default());
    check.that(
        "PARTIAL: the supplier has the order, the follow-up here is not done, and it is not an error",
        report.count("PARTIAL") == 1
            && at_erp("supplier-741-partial") == 1
            && verdict(&r) == ("PARTIAL".into(), String::new())
            && r["isError"] == false,
    );

    root.batch_execute(
        "UPDATE maintenance.cost_centers SET budget = 2000.00 WHERE tenant_id = 'shopping-a' AND cost_center = 'CC-MANUT'",
    )
    .await?;
    println!("    finance restores CC-MANUT's budget");

    let r = order("F-200", 1, "supplier-741-held").await?;
    show("order 1 × F-200", &r);
    root.batch_execute(&format!("SELECT toolgate.set_writes_enabled(false, '{SUPPLIER_TOOL}')")).await?;
    println!("    writes to {SUPPLIER_TOOL} turned off (toolgate.set_writes_enabled)");
    // Past the retry delay: the PARTIAL one is due again, and held too.
    tokio::time::sleep(options.retry_delay + Duration::from_millis(200)).await;
    let report = dispatched("writes off").await?;
    check.that(
        "held by the kill switch: nothing claimed, nothing sent, no follow-up run while writes are off",
        report.claimed == 0 && at_erp("supplier-741-held") == 0 && erp.effects()["writes_received"] == 3,
    );

    root.batch_execute(&format!("SELECT toolgate.set_writes_enabled(true, '{SUPPLIER_TOOL}')")).await?;
    println!("    writes back on");
    let report = dispatched("later").await?;
    let r = order("F-200", 6, "supplier-741-partial").await?;
    status_queries += 1;
    show("the PARTIAL one's key again", &r);
    let effects = erp.effects();
    let spent: String = root
        .query_one(
            "SELECT spent::text FROM maintenance.cost_centers WHERE tenant_id = 'shopping-a' AND cost_center = 'CC-MANUT'",
            &[],
        )
        .await?
        .get(0);
    let settled = db::count(root, "SELECT count(*) FROM toolgate.outbox WHERE state = 'SUCCEEDED'", &[]).await?;
    println!(
        "    supplier: {} writes received, {} effects; outbox: {settled} SUCCEEDED; CC-MANUT spent {spent}",
        effects["writes_received"], effects["effects"]
    );
    check.that(
        "later: the PARTIAL one finished without asking the supplier again, the held one sent once",
        report.count("SUCCEEDED") == 2
            && verdict(&r) == ("SUCCEEDED".into(), String::new())
            && at_erp("supplier-741-partial") == 1
            && at_erp("supplier-741-held") == 1,
    );
    check.that(
        "the supplier's effects equal the intents settled SUCCEEDED (4), each charged once here",
        effects["effects"] == 4 && effects["writes_received"] == 4 && settled == 4 && spent == "692.50",
    );
    Ok(status_queries)
}
