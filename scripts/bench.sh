#!/usr/bin/env bash
# What the gate costs, side by side with the bare writes, in one run on one throwaway cluster.
#
#   scripts/bench.sh            # the full run: release build, every workload at concurrency
#                               # 1, 4 and 16, the scale series; writes docs/benchmarks.md and
#                               # docs/benchmarks.svg and prints the table (about 10 minutes)
#   scripts/bench.sh --smoke    # seconds: the installed build, concurrency 1, nothing written
#   scripts/bench.sh --pg 18    # the same on PostgreSQL 18 (default 15, TOOLGATE_PG); a full run
#                               # writes docs/benchmarks-pg18.md and .svg: 15's stay as they are
#
# Run scripts/setup.sh once first (as the README says). BENCH_SECONDS, BENCH_ROUNDS,
# BENCH_CLIENTS, BENCH_SIZES, BENCH_DISPATCH_INTENTS and BENCH_DISPATCH_CONCURRENCY shorten a run
# while working on it; the published figures use the defaults.
#
# At each concurrency the workloads take turns, round after round, and the report gives each
# workload's median round: a machine whose speed drifts during the run slows every workload of a
# round alike instead of whichever happened to run then.
#
# Workloads are pgbench custom scripts in bench/ (-M prepared, fresh keys per transaction from
# sequences, tokens made before the run). Each run's audit rows are checked afterwards: a workload
# that stopped doing what it claims fails the benchmark instead of reporting a flattering figure.
#
# The outbox (issue 24) is measured in two halves. Its enqueue path is a workload like the others
# (outbox_enqueue: a gated tier-0 call of an outbox tool, which answers PENDING and writes the
# intent). Its delivery is a stage of its own after the workloads: `toolgate bench-dispatch`
# enqueues BENCH_DISPATCH_INTENTS intents (default 2000; 200 with --smoke) in a database of their
# own, starts the fake ERP (crates/fake-erp) on 127.0.0.1 without rate limits or faults, and times
# the dispatcher (dispatch::run, draining once) at each of BENCH_DISPATCH_CONCURRENCY's intents in
# flight (default "4 16 64"; 4 with --smoke) until every intent is settled; it fails unless the
# ERP made one effect per intent and every outbox row is SUCCEEDED. A full run measures the
# release build of `toolgate`, as the dispatcher ships.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"

smoke=false
while [ $# -gt 0 ]; do
    case $1 in
    --smoke) smoke=true ;;
    --pg) pg_version "${2:?--pg MAJOR}"; shift ;;
    *) log "usage: bench.sh [--smoke] [--pg MAJOR]" >&2; exit 2 ;;
    esac
    shift
done
# The default version's figures are docs/benchmarks.md; another's get the version in their name.
doc=docs/benchmarks
[ "$PG_MAJOR" = "$PG_DEBIAN" ] || doc=docs/benchmarks-pg$PG_MAJOR

if $smoke; then
    duration=${BENCH_SECONDS:-2}
    rounds=1
    clients=(1)
    sizes=()
    orders=20000
    prepared=2000
    pg_use "$PG_INSTALL_BIN"   # the build scripts/setup.sh installed
else
    duration=${BENCH_SECONDS:-5}
    rounds=${BENCH_ROUNDS:-3}
    read -r -a clients <<<"${BENCH_CLIENTS:-1 4 16}"
    read -r -a sizes <<<"${BENCH_SIZES:-1000 100000 1000000}"
    orders=1000000
    prepared=${BENCH_CONFIRMATIONS:-80000}
    bench_release_builds "the dispatcher measured"
fi
toolgate_cli

make_work
# PostgreSQL's own durability defaults (fsync and synchronous_commit on), room for the clients.
# pg_stat_statements is loaded but tracks nothing until the profile run asks for it.
CLUSTER_CONF="fsync = on
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = none
pg_stat_statements.max = 1000
shared_buffers = 512MB
max_wal_size = 4GB
checkpoint_timeout = 30min" throwaway_cluster pg "${TOOLGATE_BENCH_PORT:-54501}"
sock=$work/pg/socket
psql_() { "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$sock" -p "$port" -U postgres "$@"; }

# A database with the extension, the benchmark's tenants, keys and floor functions.
load_db() { bench_load "$sock" "$port" "$1" "$2" "$root" "$work/keys"; }

log "loading toolgate_bench ($orders orders per tenant)"
load_db toolgate_bench "$orders"
log "$prepared proposals made and their confirmations signed before the run"
"$TOOLGATE_BIN" bench-confirmations --host "$sock" --port "$port" --dbname toolgate_bench \
    --keys "$work/keys" --count "$prepared"

results=$work/results.tsv
: >"$results"
# run WORKLOAD CLIENTS DB LABEL ROUND SECONDS: one pgbench run; appends "label workload clients
# tps p50 p99" (one line per round: the report takes the median).
run() {
    local workload=$1 c=$2 db=$3 label=$4 round=$5 seconds=$6
    local logdir=$work/log/$label-$c-$round
    mkdir -p "$logdir"
    local since outbox_before=
    since=$(psql_ -d "$db" -Atc "SELECT coalesce(max(audit_id), 0) FROM toolgate.audit")
    [ "$workload" != outbox_enqueue ] || outbox_before=$(psql_ -d "$db" -Atc "SELECT count(*) FROM toolgate.outbox")
    local out
    out=$("$PGBIN/pgbench" -n -M prepared -h "$sock" -p "$port" -U postgres \
        -c "$c" -j $((c < 2 ? c : 2)) -T "$seconds" -f "bench/$workload.sql" \
        -D token="$token" -D token1="$token1" -D technician="$technician" -D limited="$limited" \
        --log --log-prefix="$logdir/tx" "$db" 2>&1) || { echo "$out" >&2; exit 1; }
    local tps
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' <<<"$out")
    python3 bench/report.py latency "$logdir" "$label" "$workload" "$c" "$tps" >>"$results"
    local txns
    txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*$/\1/p' <<<"$out")
    check "$workload" "$db" "$since" "$round" "$txns" "$outbox_before"
    tail -n 1 "$results" | awk -v r="$round" '{ printf "  %-14s c=%-3s round %s %10.1f tps  p50 %7.3f ms  p99 %7.3f ms\n", $1, $3, r, $4, $5, $6 }'
}

# check WORKLOAD DB SINCE ROUND TXNS OUTBOX_BEFORE: the run's audit rows say the gate did what the
# workload claims (TXNS: the transactions pgbench made; OUTBOX_BEFORE: the outbox's rows before it).
check() {
    local workload=$1 db=$2 since=$3 round=$4 txns=$5 outbox_before=$6 expected
    case "$workload" in
        gated_close | limited_close) expected="call SUCCEEDED - f" ;;
        gated_pair) expected="call NEEDS_CONFIRMATION - f|confirm SUCCEEDED - f" ;;
        # Each client's first call settles its key; every later one, in any round, replays it.
        replay) expected="call SUCCEEDED - f|call SUCCEEDED - t"; [ "$round" -eq 1 ] || expected="call SUCCEEDED - t" ;;
        denial) expected="call BLOCKED role_not_allowed f" ;;
        purchase) expected="call SUCCEEDED - f" ;;
        outbox_enqueue) expected="call PENDING - f" ;;
        *) return 0 ;;  # the floors write their rows with no gate
    esac
    local got
    got=$(psql_ -d "$db" -At -F ' ' -c "SELECT DISTINCT kind, outcome, coalesce(rule, '-'), replayed \
        FROM toolgate.audit WHERE audit_id > $since ORDER BY 1, 2, 4" | paste -sd '|')
    if [ "$got" != "$expected" ]; then
        log "$workload did not do what it measures: audit says [$got], expected [$expected]" >&2
        exit 1
    fi
    # Each transaction left one audit row and one intent, PENDING (nothing delivers them here).
    if [ "$workload" = outbox_enqueue ]; then
        got=$(psql_ -d "$db" -At -F ' ' -c "SELECT (SELECT count(*) FROM toolgate.audit WHERE audit_id > $since),
            count(*) - $outbox_before, count(*) FILTER (WHERE state <> 'PENDING') FROM toolgate.outbox")
        if [ "$got" != "$txns $txns 0" ]; then
            log "$workload did not do what it measures: after $txns transactions [audit rows, new intents, intents not PENDING] are [$got], expected [$txns $txns 0]" >&2
            exit 1
        fi
    fi
    if [ "$workload" = gated_pair ]; then
        local used
        used=$(psql_ -d "$db" -Atc "SELECT last_value FROM bench.confirmations_used")
        if [ "$used" -gt "$prepared" ]; then
            log "gated_pair used $used prepared confirmations of $prepared: raise BENCH_CONFIRMATIONS" >&2
            exit 1
        fi
    fi
}

# Identity tokens of a registered issuer (docs/architecture.md §3): PyJWT (scripts/setup.sh puts
# it in target/pyjwt) signs RS256, ES256 and EdDSA tokens for tenant bench before the run.
pyjwt=${TOOLGATE_TEST_PYTHON:-$root/target/pyjwt/bin/python}
id_calls=$($smoke && echo 200 || echo 2000)   # per round: each first-use call spends a token
id_iss=https://idp.bench.test/realms/bench
psql_ -d toolgate_bench -c "SET ROLE toolgate_admin" \
    -c "SELECT toolgate.add_issuer('bench-idp', '$id_iss', ARRAY['toolgate-bench'],
        ('$("$pyjwt" tests/oidc/pyjwt_mint.py "$work/oidc" jwks)'::jsonb)->'keycloak', 'tenant')" \
    -c "SELECT toolgate.set_tenant_issuer('bench', 'bench-idp', 'bench')" >/dev/null
python3 - "$id_iss" "$((id_calls * rounds + 1))" >"$work/id-specs.json" <<'PY'
import json, sys, time
iss, n = sys.argv[1], int(sys.argv[2])
now = int(time.time())
claims = {"iss": iss, "aud": "toolgate-bench", "sub": "bench-user", "tenant": "bench", "roles": ["supervisor"],
          "iat": now, "exp": now + 6 * 3600}
specs = []
for key, alg in [("kc-ed", "EdDSA"), ("kc-rs", "RS256"), ("kc-es", "ES256")]:
    specs += [{"key": key, "alg": alg, "claims": dict(claims, jti=f"{alg}-{i}")} for i in range(n)]
print(json.dumps(specs))
PY
"$pyjwt" tests/oidc/pyjwt_mint.py "$work/oidc" tokens <"$work/id-specs.json" >"$work/id-tokens.json"
python3 - "$work/id-tokens.json" "$((id_calls * rounds + 1))" >"$work/id-tokens.tsv" <<'PY'
import json, sys
tokens, n = json.load(open(sys.argv[1])), int(sys.argv[2])
for i, alg in enumerate(["eddsa", "rs256", "es256"]):
    for j in range(n):
        print(f"{alg}\t{j + 1}\t{tokens[i * n + j]}")
PY
psql_ -d toolgate_bench -c "\copy bench.identity_tokens FROM '$work/id-tokens.tsv'"

# run_identity ALG MODE ROUND: identity_first (a new token a call) or identity_cached (one token
# again and again, the backend remembers it), one client, id_calls calls.
run_identity() {
    local alg=$1 mode=$2 round=$3 label=identity_${2}_$1
    local logdir=$work/log/$label-1-$round idtoken out tps
    mkdir -p "$logdir"
    # The cached run's token: the last of the alg's, which no first-use run reaches.
    idtoken=$(psql_ -d toolgate_bench -Atc "SELECT token FROM bench.identity_tokens WHERE alg = '$alg' ORDER BY n DESC LIMIT 1")
    out=$("$PGBIN/pgbench" -n -M prepared -h "$sock" -p "$port" -U postgres -c 1 -j 1 -t "$id_calls" \
        -f "bench/identity_$mode.sql" -D alg="$alg" -D idtoken="$idtoken" \
        --log --log-prefix="$logdir/tx" toolgate_bench 2>&1) || { echo "$out" >&2; exit 1; }
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' <<<"$out")
    python3 bench/report.py latency "$logdir" "$label" "$label" 1 "$tps" >>"$results"
    tail -n 1 "$results" | awk -v r="$round" '{ printf "  %-24s c=%-3s round %s %10.1f tps  p50 %7.3f ms  p99 %7.3f ms\n", $1, $3, r, $4, $5, $6 }'
}
log "identity tokens of a registered issuer ($rounds round(s) of $id_calls calls each, 1 client)"
since=$(psql_ -d toolgate_bench -Atc "SELECT coalesce(max(audit_id), 0) FROM toolgate.audit")
for round in $(seq "$rounds"); do
    for alg in eddsa rs256 es256; do
        for mode in first cached; do run_identity "$alg" "$mode" "$round"; done
    done
done
got=$(psql_ -d toolgate_bench -At -F ' ' -c "SELECT DISTINCT kind, outcome, coalesce(rule, '-') FROM toolgate.audit WHERE audit_id > $since" | paste -sd '|')
if [ "$got" != "read SUCCEEDED -" ]; then
    log "the identity runs did not do what they measure: audit says [$got], expected [read SUCCEEDED -]" >&2
    exit 1
fi

log "workloads ($rounds round(s) of ${duration}s each)"
for c in "${clients[@]}"; do
    for round in $(seq "$rounds"); do
        for w in floor_close floor_bound_close gated_close limited_close floor_pair floor_bound_pair gated_pair replay denial purchase outbox_enqueue durable_write; do
            run "$w" "$c" toolgate_bench "$w" "$round" "$duration"
        done
    done
done

# The dispatcher against the fake ERP, in a database of its own: toolgate_bench's outbox holds the
# enqueue workload's intents, bound for an endpoint nobody listens on. The loader runs in a
# subshell: the workloads' tokens stay those of toolgate_bench's load.
dispatch_intents=${BENCH_DISPATCH_INTENTS:-$($smoke && echo 200 || echo 2000)}
read -r -a dispatch_concurrency <<<"${BENCH_DISPATCH_CONCURRENCY:-$($smoke && echo 4 || echo 4 16 64)}"
dispatch_results=$work/dispatch.tsv
: >"$dispatch_results"
log "dispatcher against the fake ERP ($rounds round(s) of $dispatch_intents intents at each concurrency)"
(load_db toolgate_dispatch 1000)
for round in $(seq "$rounds"); do
    for c in "${dispatch_concurrency[@]}"; do
        # A batch keeps every slot busy: four intents a slot, and at least the command's default, 32.
        "$TOOLGATE_BIN" bench-dispatch --host "$sock" --port "$port" --dbname toolgate_dispatch --keys "$work/keys" \
            --intents "$dispatch_intents" --concurrency "$c" --batch $((c * 4 > 32 ? c * 4 : 32)) >>"$dispatch_results"
        tail -n 1 "$dispatch_results" | awk -v r="$round" '{ printf "  %-14s c=%-3s round %s %10.1f intents/s  (%d intents in %.2f s, batch %d)\n", "dispatch", $1, r, $5, $3, $4, $2 }'
    done
done

for size in "${sizes[@]}"; do
    log "ledger and audit pre-filled to $size rows"
    # Every size starts alike: the new rows vacuumed and analyzed, then written out by a checkpoint.
    load_db toolgate_scale 200000
    psql_ -d toolgate_scale -c "
        INSERT INTO toolgate.ledger (tenant_id, tool, idempotency_key, args_digest, actor, state, reply, settled_at)
        SELECT 'bench', 'request_close', 'prefill-' || g, md5(g::text), 'bench-user', 'settled', '{\"outcome\": \"SUCCEEDED\"}', now()
          FROM generate_series(1, $size) g;
        INSERT INTO toolgate.audit (kind, tenant_id, conversation_id, actor, role, tool, target, outcome,
                                    detail, args_hmac, schema_version, policy_version, duration_us)
        SELECT 'call', 'bench', 'prefill-' || (g % 1000), 'bench-user', 'supervisor', 'request_close',
               g::text, 'SUCCEEDED', '{}', md5(g::text), 1, 1, 300
          FROM generate_series(1, $size) g;" -c "VACUUM ANALYZE" -c "CHECKPOINT" >/dev/null
    run gated_close 4 toolgate_scale "scale-$size" 1 $((duration * rounds))
done

if $smoke; then
    log "smoke run passed (${duration}s per workload, concurrency 1)"
    exit 0
fi

# Where the time goes: every statement the gate runs (pg_stat_statements, nested statements
# included) during one more gated run at one client, and the pure steps' CPU per call.
log "profile (gated_close, 1 client, statements tracked)"
psql_ -d toolgate_bench -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null
PGOPTIONS="-c pg_stat_statements.track=all" "$PGBIN/pgbench" -n -M prepared -h "$sock" -p "$port" -U postgres \
    -c 1 -j 1 -T "$duration" -f bench/gated_close.sql -D token="$token" toolgate_bench >"$work/profile.out"
psql_ -d toolgate_bench -At -F $'\t' -c "SELECT calls, round((mean_exec_time * 1000)::numeric, 1), \
    regexp_replace(query, '\s+', ' ', 'g') FROM pg_stat_statements WHERE calls > 1 ORDER BY total_exec_time DESC" \
    >"$work/profile.tsv"
# The same for a replay, its entry point's statement only.
psql_ -d toolgate_bench -c "SELECT pg_stat_statements_reset()" >/dev/null
PGOPTIONS="-c pg_stat_statements.track=top" "$PGBIN/pgbench" -n -M prepared -h "$sock" -p "$port" -U postgres \
    -c 1 -j 1 -T "$duration" -f bench/replay.sql -D token="$token" toolgate_bench >"$work/profile-replay.out"
psql_ -d toolgate_bench -At -F $'\t' -c "SELECT calls, round((mean_exec_time * 1000)::numeric, 1) \
    FROM pg_stat_statements WHERE query LIKE '%toolgate.request_close%'" >"$work/profile-replay.tsv"
CARGO_TARGET_DIR=target/bench cargo run --quiet --release -p toolgate-core --example costs >"$work/costs.txt"

cores=$(nproc)
BENCH_PG="$("$PG_CONFIG" --version)" BENCH_COMMIT="$(git rev-parse --short HEAD)" \
    python3 bench/report.py report "$results" "$cores" "$doc.md" "$doc.svg" \
    "$work/profile.tsv" "$work/profile-replay.tsv" "$work/costs.txt" "$dispatch_results"
cat "$doc.md"
# docs/benchmarks.md gets every other version's ratios beside its own (whichever run this was).
mapfile -t others < <(find docs -maxdepth 1 -name 'benchmarks-pg*.md' | sort)
[ ${#others[@]} -eq 0 ] || python3 bench/report.py versions docs/benchmarks.md "${others[@]}"
