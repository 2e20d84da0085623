#!/usr/bin/env bash
# The audit's seal measured (issue 49, docs/audit.md#what-the-seal-costs), on a throwaway cluster
# of the installed build: a tenant's audit of ROWS synthetic rows (default 200,000, each shaped
# like a tier-0 close's row: its steps, quota note and argument HMAC), sealed by
# toolgate.seal() in checkpoints of 10,000, then checked by toolgate.verify_audit(); three rounds,
# each in a tenant of its own, and the median round's rows per second of each, with what the
# checkpoints take beside the audit. The seal is SQL (SHA-256 and jsonb in the server) and one
# signature per checkpoint, so the build's profile hardly matters. Fails unless every row is
# sealed and every checkpoint verifies.
#
#   scripts/bench-seal.sh [ROWS]
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"

rows=${1:-200000}
case $rows in
'' | *[!0-9]*) log "usage: bench-seal.sh [ROWS]" >&2; exit 2 ;;
esac
pg_use "$PG_INSTALL_BIN"
make_work
CLUSTER_CONF="fsync = on
shared_buffers = 256MB" throwaway_cluster pg "${TOOLGATE_BENCH_PORT:-54501}"
sock=$work/pg/socket
sql "$sock" "$port" postgres -c "CREATE DATABASE toolgate_seal"
sql "$sock" "$port" toolgate_seal -c "CREATE EXTENSION pg_toolgate"

results=$work/seal.tsv
: >"$results"
for round in 1 2 3; do
    tenant=seal-$round
    sql "$sock" "$port" toolgate_seal -v tenant="$tenant" -v n="$rows" >/dev/null <<'SQL'
SELECT toolgate.add_tenant(:'tenant', 'Sealed');
INSERT INTO toolgate.audit (at, kind, tenant_id, conversation_id, actor, role, tool, target, outcome, rule, detail,
                            args_hmac, schema_version, policy_version, duration_us)
SELECT pg_catalog.now() - interval '1 hour' + g * interval '1 ms', 'call', :'tenant', 'conv-' || (g % 1000),
       'user-' || (g % 50), 'supervisor', 'request_close', (g % 5000)::text,
       CASE WHEN g % 10 = 0 THEN 'BLOCKED' ELSE 'SUCCEEDED' END, CASE WHEN g % 10 = 0 THEN 'rate_over_limit' END,
       jsonb_build_object('steps', jsonb_build_array('identity', 'contract', 'idempotency', 'authorization', 'domain',
                                                     'quota', 'effect'),
                          'quota', jsonb_build_object('used', g % 10, 'limit', 10)),
       md5(g::text) || md5((g + 1)::text), 1, 3, 900 + g % 300
  FROM generate_series(1, :n) g;
SQL
    sql "$sock" "$port" toolgate_seal -c "CHECKPOINT" >/dev/null
    line=$(sql "$sock" "$port" toolgate_seal -F $'\t' -v tenant="$tenant" <<'SQL'
CREATE TEMP TABLE t (what text, at timestamptz);
INSERT INTO t VALUES ('start', pg_catalog.clock_timestamp());
CREATE TEMP TABLE sealed AS SELECT * FROM toolgate.seal(:'tenant');
INSERT INTO t VALUES ('sealed', pg_catalog.clock_timestamp());
CREATE TEMP TABLE verified AS SELECT * FROM toolgate.verify_audit(:'tenant');
INSERT INTO t VALUES ('verified', pg_catalog.clock_timestamp());
SELECT (SELECT sum(sealed_rows) FROM sealed), (SELECT count(*) FROM sealed),
       (SELECT count(*) FROM verified WHERE status <> 'verified'),
       EXTRACT(epoch FROM (SELECT at FROM t WHERE what = 'sealed') - (SELECT at FROM t WHERE what = 'start')),
       EXTRACT(epoch FROM (SELECT at FROM t WHERE what = 'verified') - (SELECT at FROM t WHERE what = 'sealed'));
SQL
)
    IFS=$'\t' read -r sealed checkpoints bad seal_s verify_s <<<"$line"
    if [ "$sealed" != "$rows" ] || [ "$bad" != 0 ]; then
        log "bench-seal: round $round sealed $sealed of $rows rows, $bad findings other than verified" >&2
        exit 1
    fi
    printf '%s\t%s\t%s\t%s\n' "$round" "$checkpoints" "$seal_s" "$verify_s" >>"$results"
    awk -v r="$rows" -F'\t' 'END { printf "  round %s: %s checkpoints; seal %.2f s (%d rows/s), verify %.2f s (%d rows/s)\n", $1, $2, $3, r / $3, $4, r / $4 }' "$results"
done
# The audit is partitioned: its size is its partitions'.
sizes=$(sql "$sock" "$port" toolgate_seal -F ' ' -c "SELECT pg_catalog.pg_size_pretty((SELECT pg_catalog.sum(pg_catalog.pg_total_relation_size(p.relid))::bigint
                                                                                  FROM pg_catalog.pg_partition_tree('toolgate.audit') p)),
                                                         pg_catalog.pg_size_pretty(pg_catalog.pg_total_relation_size('toolgate.audit_checkpoints'))")
sort -t $'\t' -k3,3g "$results" | sed -n 2p | awk -v r="$rows" -v sizes="$sizes" -F'\t' '{
    split(sizes, s, " ");
    printf "bench-seal: %d rows a round, median round: seal %d rows/s, verify %d rows/s; audit %s %s, checkpoints %s %s\n", r, r / $3, r / $4, s[1], s[2], s[3], s[4] }'
