#!/usr/bin/env bash
# The observability files (docs/observability.md) against the real tools, on a throwaway cluster
# of the installed build: a database with rows of every kind a metric counts (calls and refusals,
# a proposal waiting and one expired unanswered, outbox intents due and dead, a tenant sealed
# with a row changed since, another never sealed), read by Debian's postgres_exporter with
# observability/postgres_exporter/queries.yaml as a login of toolgate_auditor and pg_monitor,
# then scraped: every metric there, with the values those rows make. Then promtool checks the
# alert rules and runs their tests, and every metric the rules and the Grafana dashboard name must
# be one the exporter gave. promtool and postgres_exporter: Debian's prometheus and
# prometheus-postgres-exporter (scripts/setup.sh installs them).
#
#   scripts/observability-test.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"

for tool in promtool prometheus-postgres-exporter; do
    command -v "$tool" >/dev/null || { log "$tool is missing: scripts/setup.sh installs it" >&2; exit 2; }
done
pg_use "$PG_INSTALL_BIN"
make_work
exporter_pid=
trap 'rc=$?; [ -z "$exporter_pid" ] || kill "$exporter_pid" 2>/dev/null; work_cleanup "$rc"' EXIT
throwaway_cluster pg "${TOOLGATE_OBS_PORT:-54531}"
sock=$work/pg/socket

last_step="rows of every kind"
sql "$sock" "$port" postgres -c "CREATE DATABASE toolgate_obs"
sql "$sock" "$port" toolgate_obs >/dev/null <<'SQL'
CREATE EXTENSION pg_toolgate;
SELECT toolgate.add_tenant('acme', 'Acme'), toolgate.add_tenant('globex', 'Globex');
-- acme: 3 closes applied, 12 refused in the last five minutes; one call twenty minutes ago.
INSERT INTO toolgate.audit (kind, tenant_id, tool, outcome, rule, duration_us)
SELECT 'call', 'acme', 'request_close', 'SUCCEEDED', NULL, 900 FROM generate_series(1, 3)
UNION ALL
SELECT 'call', 'acme', 'request_close', 'REJECTED', 'schema_invalid', 300 FROM generate_series(1, 12);
INSERT INTO toolgate.audit (at, kind, tenant_id, tool, outcome, duration_us)
VALUES (now() - interval '20 minutes', 'call', 'acme', 'request_close', 'SUCCEEDED', 900);
-- acme: a proposal waiting, one that expired unanswered ten minutes ago.
INSERT INTO toolgate.proposals (tenant_id, conversation_id, actor, tool, target, args, args_digest, idempotency_key,
                                text, tier, schema_version, policy_version, status, expires_at)
VALUES ('acme', 'c1', 'ana', 'request_purchase_part', '901', '{}', 'd1', 'k1', 'x', 1, 1, 1, 'live', now() + interval '5 minutes'),
       ('acme', 'c2', 'ana', 'request_purchase_part', '902', '{}', 'd2', 'k2', 'x', 1, 1, 1, 'live', now() - interval '10 minutes');
-- acme's outbox: one intent due for twenty minutes, one given up.
INSERT INTO toolgate.outbox (tenant_id, tool, idempotency_key, args, target, actor, role, request, endpoint, state,
                             next_attempt_at)
VALUES ('acme', 'erp_purchase', 'o1', '{}', '901', 'ana', 'buyer', '{}', 'erp', 'PENDING', now() - interval '20 minutes'),
       ('acme', 'erp_purchase', 'o2', '{}', '902', 'ana', 'buyer', '{}', 'erp', 'DEAD', now());
-- globex: sealed, then one of its rows changed with the triggers off.
INSERT INTO toolgate.audit (kind, tenant_id, tool, outcome, duration_us) VALUES ('call', 'globex', 'request_close', 'SUCCEEDED', 1);
SELECT count(*) FROM toolgate.seal('globex');
SET session_replication_role = replica;
UPDATE toolgate.audit SET outcome = 'BLOCKED' WHERE tenant_id = 'globex';
RESET session_replication_role;
CREATE ROLE toolgate_obs_exporter LOGIN IN ROLE toolgate_auditor, pg_monitor;
SQL

last_step="postgres_exporter with observability/postgres_exporter/queries.yaml"
eport=$(free_port "${TOOLGATE_OBS_EXPORTER_PORT:-9187}")
DATA_SOURCE_NAME="host=$sock port=$port user=toolgate_obs_exporter dbname=toolgate_obs sslmode=disable" \
    prometheus-postgres-exporter --web.listen-address="127.0.0.1:$eport" \
    --extend.query-path="$root/observability/postgres_exporter/queries.yaml" \
    --disable-default-metrics --disable-settings-metrics >"$work/exporter.log" 2>&1 &
exporter_pid=$!
for _ in $(seq 50); do
    curl -fsS "http://127.0.0.1:$eport/metrics" >"$work/metrics.txt" 2>/dev/null && grep -q '^toolgate_' "$work/metrics.txt" && break
    sleep 0.2
done
grep '^toolgate_' "$work/metrics.txt" >"$work/toolgate.txt" || {
    log "postgres_exporter gave no toolgate_ metric; its log:" >&2
    cat "$work/exporter.log" >&2
    exit 1
}
log "postgres_exporter: $(wc -l <"$work/toolgate.txt") toolgate_ series"

last_step="the metrics' values, the rules and the dashboard"
python3 - "$work/toolgate.txt" observability/prometheus/toolgate-alerts.yml observability/grafana/toolgate.json <<'PY'
import json, re, sys

series = []
for line in open(sys.argv[1]):
    m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line.strip())
    labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
    series.append((m.group(1), labels, float(m.group(3))))

def value(name, **labels):
    found = [v for n, l, v in series if n == name and all(l.get(k) == x for k, x in labels.items())]
    assert len(found) == 1, f"{name} {labels}: {len(found)} series"
    return found[0]

bad = []
def expect(what, ok):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        bad.append(what)

expect("calls: acme's 12 refused closes of the last 5 minutes",
       value("toolgate_calls_last_5m", tenant_id="acme", tool="request_close", outcome="REJECTED") == 12)
expect("calls: acme's 3 applied (the one of 20 minutes ago not counted)",
       value("toolgate_calls_last_5m", tenant_id="acme", tool="request_close", outcome="SUCCEEDED") == 3)
expect("refusals: 12 by schema_invalid",
       value("toolgate_refusals_last_5m", tenant_id="acme", tool="request_close", rule="schema_invalid") == 12)
expect("proposals: 1 waiting", value("toolgate_proposals_waiting", tenant_id="acme") == 1)
expect("proposals: 1 expired unanswered", value("toolgate_proposals_expired_unanswered_1h", tenant_id="acme") == 1)
expect("outbox: 1 due", value("toolgate_outbox_due", tenant_id="acme") == 1)
expect("outbox: its lag about 20 minutes", 1190 <= value("toolgate_outbox_oldest_due_seconds", tenant_id="acme") <= 1300)
expect("outbox: 1 dead", value("toolgate_outbox_dead", tenant_id="acme") == 1)
expect("seal: acme never sealed, its oldest row 20 minutes old",
       1190 <= value("toolgate_seal_oldest_unsealed_seconds", tenant_id="acme") <= 1300)
expect("seal: globex sealed, nothing waiting", value("toolgate_seal_oldest_unsealed_seconds", tenant_id="globex") == 0)
expect("seal: globex's checkpoint is recent", 0 <= value("toolgate_seal_last_checkpoint_age_seconds", tenant_id="globex") < 120)
expect("audit findings: globex's changed row", value("toolgate_audit_findings_last_1d", tenant_id="globex") == 1)
expect("audit findings: none for acme", value("toolgate_audit_findings_last_1d", tenant_id="acme") == 0)

# The rules' expressions (an `expr:` line, or the block under `expr: |`), and the panels'.
exprs, block = [], None
for line in open(sys.argv[2]):
    indent = len(line) - len(line.lstrip())
    if block is not None and line.strip() and indent > block:
        exprs.append(line)
        continue
    block = None
    m = re.match(r"^(\s*)expr:\s*(.*)$", line)
    if m and m.group(2).strip() == "|":
        block = len(m.group(1))
    elif m:
        exprs.append(m.group(2))
exprs += [t["expr"] for p in json.load(open(sys.argv[3]))["panels"] for t in p["targets"]]
exported = {n for n, _, _ in series}
named = set(re.findall(r"\btoolgate_[a-z0-9_]+", " ".join(exprs)))
missing = sorted(n for n in named if n not in exported)
expect(f"every metric the alert rules and the dashboard name is exported ({len(named)})", not missing)
if missing:
    print("  not exported: " + ", ".join(missing))
sys.exit(1 if bad else 0)
PY
promtool check rules observability/prometheus/toolgate-alerts.yml >/dev/null
(cd observability/prometheus && promtool test rules toolgate-alerts.test.yml) >"$work/promtool.log" 2>&1 || {
    cat "$work/promtool.log" >&2
    exit 1
}
log "promtool: the alert rules are valid and their tests pass"
log "observability: every check passed"
