#!/usr/bin/env bash
# The scale-out suite (docs/scale-out.md): pg_toolgate on a Citus cluster of a coordinator and two
# workers, on loopback, PostgreSQL 15. Builds Citus from its source tarball (TOOLGATE_CITUS_SRC,
# default ../shared/citus beside the repository: citus-13.2.2.tar.gz and pg15.20-compat.patch),
# with the fix of pg_test/citus/citus-logical-catch-up.patch (a logical shard move lost writes:
# docs/scale-out.md), into target/citus and installs it into PostgreSQL 15, unless that Citus with
# these patches is installed already (the build leaves their checksums beside citus.control);
# starts the three nodes, creates the database on each with Citus, registers the workers, creates
# pg_toolgate on the coordinator (Citus creates it on the workers), then runs the scenarios of
# pg_test/citus/ with pg_regress: both examples distributed by tenant (citus_setup), the lab
# through the tenant-routed entry points and where each call ran (citus_lab), seed 001's refunds
# (citus_refunds), key revocation, issuer key rotation and the kill switch reaching the workers'
# backends (citus_config), a careless bound function kept in its tenant by row-level security on
# a worker (citus_rls). Then the outbox on the cluster: the maintenance example's supplier, 200
# intents over eight tenants drained by two `toolgate dispatch` processes into the fake ERP, judged
# from its ledger and the tables (each key applied once, every claim and settlement audited on its
# tenant's node). Then a load with invariants: 16 clients over eight tenants spread on both
# workers for 20 s, the second worker stopped (-m immediate) for 6 s in the middle and started
# again, then 10 s more over the same keys; judged from the tables: no key or order with two
# effects, effects equal to the keys that succeeded, no reservation left, no budget overspent and
# each equal to its purchases, every conversation's quota within its limit and equal to its
# purchases, one audit row a call, the running worker's tenants served during the outage and the
# stopped one's not. Then `toolgate mcp --http` in front of the coordinator: four tenants on
# both workers, each listed, a tier-0 close, a confirmed close and a read, every audit row drawn on
# the tenant's worker.
#
# Last, the benchmark's distributed row: tier-0 closes (a fresh order and key each) through
# tenant_call over eight tenants, on the cluster and on a single node side by side; the suite runs
# it short (2 s at 1 and 4 clients), --bench runs it for SECONDS at 1, 4 and 16 clients and prints
# the tables docs/scale-out.md holds: calls a second, and each node's CPU a call. Then day two (the
# suite only): a third worker added while the load's 16 clients call, one tenant's shards moved onto
# it by logical replication (force_logical), the rest rebalanced onto it (block_writes), judged as
# the load is, each tenant's calls against its audit rows.
#
#   scripts/citus.sh                  the suite (the extension must be installed: scripts/install-extension.sh)
#   scripts/citus.sh --bench [SECS]   the set-up scenarios, then the benchmark (default 20 s a run)
#   scripts/citus.sh --build          only build and install Citus
#
# Without the source and without Citus installed, the suite says so and stops (exit 3), so the
# test command can name it as not run instead of failing for want of a file outside the project.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
pg_version 15

citus_version=13.2.2
citus_sha256=dd2453caec20a830e5e63f1def5c5a98cb6f57ae510407cdcd800916fcdab430
src=${TOOLGATE_CITUS_SRC:-$root/../shared/citus}
# The patches the build applies, in this order: PostgreSQL 15.20's headers (beside the tarball),
# then the project's fix of a logical move's catch-up.
citus_patches=("$src/pg15.20-compat.patch" "$root/pg_test/citus/citus-logical-catch-up.patch")
# Beside citus.control the build leaves each patch's checksum (sha256sum's lines), so that a
# Citus installed without the project's patch, or with an older one, is built again.
citus_extdir=$("$PG_CONFIG" --sharedir)/extension
citus_marker=$citus_extdir/citus.toolgate-patches

# patch_sum FILE: FILE's line in the marker.
patch_sum() { printf '%s  %s\n' "$(sha256sum <"$1" | cut -d' ' -f1)" "$(basename "$1")"; }
# citus_installed: this Citus's library and control file are in PostgreSQL 15's install, built
# with the project's patch as it is now.
citus_installed() {
    [ -f "$PG_PKGLIBDIR/citus.so" ] &&
        grep -q "^default_version = '13.2-1'" "$citus_extdir/citus.control" 2>/dev/null &&
        grep -qxF "$(patch_sum "${citus_patches[1]}")" "$citus_marker" 2>/dev/null
}

citus_build() {
    local tarball=$src/citus-$citus_version.tar.gz build=$root/target/citus started=$SECONDS p
    if [ ! -f "$tarball" ]; then
        return 3
    fi
    echo "$citus_sha256  $tarball" | sha256sum -c --quiet - || { log "$tarball: not the expected file"; exit 2; }
    log "building Citus $citus_version into target/citus (about a minute)"
    rm -rf "$build"
    mkdir -p "$build"
    tar -xzf "$tarball" -C "$build"
    # The marker goes first and comes back last: a build that stops half-installed is built again.
    rm -f "$citus_marker"
    # Each step chained: `set -e` does not stop a subshell whose status `||` tests.
    (
        cd "$build/citus-$citus_version" &&
            for p in "${citus_patches[@]}"; do patch -p1 -s <"$p" || exit 1; done &&
            ./configure --without-libcurl PG_CONFIG="$PG_CONFIG" >"$build/configure.log" &&
            make -j"$(nproc)" >"$build/make.log" 2>&1 &&
            make install >"$build/install.log" 2>&1
    ) || { log "building Citus failed: target/citus/*.log"; exit 1; }
    for p in "${citus_patches[@]}"; do patch_sum "$p"; done >"$citus_marker"
    log "Citus $citus_version built and installed in $((SECONDS - started)) s," \
        "patched: $(basename -a "${citus_patches[@]}" | paste -sd' ')"
}

if ! citus_installed || [ "${1:-}" = --build ]; then
    rc=0
    citus_build || rc=$?
    if [ "$rc" = 3 ]; then
        log "no Citus source at $src (citus-$citus_version.tar.gz) and Citus $citus_version not installed:" \
            "the scale-out suite was not run (set TOOLGATE_CITUS_SRC)"
        exit 3
    fi
fi
[ "${1:-}" = --build ] && exit 0
mode=suite bench_seconds=2 bench_clients=(1 4)
if [ "${1:-}" = --bench ]; then
    mode=bench bench_seconds=${2:-20} bench_clients=(1 4 16)
fi

make_work
toolgate_cli
# Two-phase commits are kept in pg_dist_transaction until recovery: off here, so that
# citus_lab can count them.
# wal_level = logical: what a shard move by logical replication needs (day two's first move).
export CLUSTER_CONF="shared_preload_libraries = 'citus'
max_prepared_transactions = 100
citus.recover_2pc_interval = -1
wal_level = logical"
db=toolgate_citus
nodes=(coordinator worker1 worker2)
declare -A node_port
p=${TOOLGATE_CITUS_PORT:-54601}
for n in "${nodes[@]}"; do
    throwaway_cluster "$n" "$p"
    node_port[$n]=$port
    p=$((port + 1))
    sql "$work/$n/socket" "$port" postgres -c "CREATE DATABASE $db"
    sql "$work/$n/socket" "$port" "$db" -c "CREATE EXTENSION citus"
done
coordinator=$work/coordinator/socket cport=${node_port[coordinator]}
# The coordinator is registered by citus_begin, after distribute() is refused without it.
sql "$coordinator" "$cport" "$db" \
    -c "SELECT citus_add_node('127.0.0.1', ${node_port[worker1]})" \
    -c "SELECT citus_add_node('127.0.0.1', ${node_port[worker2]})" >/dev/null
log "coordinator on 127.0.0.1:$cport, workers on ${node_port[worker1]} and ${node_port[worker2]}"
# A third node for day two (the suite only): Citus created in the database, not yet a worker.
if [ "$mode" = suite ]; then
    throwaway_cluster worker3 "$p"
    node_port[worker3]=$port
    sql "$work/worker3/socket" "$port" postgres -c "CREATE DATABASE $db"
    sql "$work/worker3/socket" "$port" "$db" -c "CREATE EXTENSION citus"
fi

step "Citus scenarios (pg_test/citus/)"
export TOOLGATE_ROOT="$root" TOOLGATE_KEYS="$work/keys" TOOLGATE_MINT="$root/pg_test/mint"
mkdir -p "$work/regress" "$TOOLGATE_KEYS"
scenarios=(--schedule="$root/pg_test/citus/schedule")
[ "$mode" = suite ] || scenarios=(citus_begin 00_setup citus_setup)
if ! "$PG_REGRESS" --bindir="$PGBIN" --host="$coordinator" --port="$cport" --user=postgres --use-existing \
    --dbname="$db" --inputdir="$root/pg_test/citus" --outputdir="$work/regress" "${scenarios[@]}"; then
    cat "$work/regress/regression.diffs" >&2 || true
    exit 1
fi

# identity_token TENANT NODE...: an identity key for TENANT, registered on each NODE ("socket
# port"); prints a supervisor's token signed with it.
identity_token() {
    local t=$1 pk node h p
    shift
    pk=$("$TOOLGATE_MINT" key "idp-$t")
    for node in "$@"; do
        read -r h p <<<"$node"
        sql "$h" "$p" "$db" -c "SELECT toolgate.add_key('$t', 'idp-$t', 'identity', '$pk')" >/dev/null
    done
    "$TOOLGATE_MINT" id "$t" "user-$t" supervisor
}
# branch I: the pgbench meta-command that opens the branch of the I-th tenant (of :t).
branch() {
    if [ "$1" = 0 ]; then printf '\\if :t = 0\n'; else printf '\\elif :t = %s\n' "$1"; fi
}

# The load with invariants (the suite only).
load_with_a_worker_stopped() {
step "load over eight tenants on both workers, one worker stopped mid-load"
# Eight tenants that close orders and buy parts at once (tier 0); each pgbench client keeps to one
# tenant (two clients a tenant). Three calls in four close an order, the key (one of 400) naming it;
# one in four buys parts, the key (one of 300) naming its order, quantity and conversation (one of
# 20, three purchases each), on a cost centre of 300.00 that runs out. Keys repeat (replays,
# same-key races), each key's arguments always the same; quotas and the budget are raced for.
tenants=(load-a load-b load-c load-d load-e load-f load-g load-h)
tenant_list="'$(printf "%s','" "${tenants[@]}" | sed "s/','$//")'"
load_sql=$work/load.sql
{
    sql "$coordinator" "$cport" "$db" <<SQL
SET ROLE toolgate_admin;
$(for t in "${tenants[@]}"; do
    echo "SELECT toolgate.add_tenant('$t', 'Load $t');"
    echo "SELECT toolgate.set_policy('$t', 'request_close', true, ARRAY['supervisor'], 0, max_calls_per_conversation => 1000000);"
    echo "SELECT toolgate.set_policy('$t', 'request_purchase_part', true, ARRAY['supervisor'], 0, max_value => 100, max_calls_per_conversation => 3);"
done)
RESET ROLE;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected)
SELECT t, g::text, 'open', true FROM unnest(ARRAY[$tenant_list]) t, generate_series(1, 400) g
UNION ALL SELECT t, (5000 + g)::text, 'open', false FROM unnest(ARRAY[$tenant_list]) t, generate_series(1, 300) g;
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity)
SELECT t, 'P-1', 'Filtro', 10.00, 5 FROM unnest(ARRAY[$tenant_list]) t;
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget)
SELECT t, 'CC-L', 'Carga', 300.00 FROM unnest(ARRAY[$tenant_list]) t;
SQL
} >/dev/null
{
    printf '%s\n' '\set k random(1, 400)' '\set b random(1, 300)' '\set o 5000 + :b' '\set q 1 + :b % 3' \
        '\set c :b % 20' '\set buy random(1, 4) = 4' "\\set t :client_id % ${#tenants[@]}"
    i=0
    for t in "${tenants[@]}"; do
        token=$(identity_token "$t" "$coordinator $cport")
        branch "$i"
        printf '%s\n' '\if :buy'
        echo "SELECT toolgate.tenant_call('$t', '$token', 'buy-:c', 'request_purchase_part', '{\"order_id\": \":o\", \"part_id\": \"P-1\", \"quantity\": :q, \"cost_center\": \"CC-L\", \"idempotency_key\": \"buy-key-:b\"}');"
        printf '%s\n' '\else'
        echo "SELECT toolgate.tenant_call('$t', '$token', 'load-:client_id', 'request_close', '{\"order_id\": \":k\", \"reason\": \"Carga distribuída\", \"idempotency_key\": \"load-key-:k\"}');"
        printf '%s\n' '\endif'
        i=$((i + 1))
    done
    printf '%s\n' '\endif'
} >"$load_sql"
# Which worker holds each tenant: the one stopped is the second worker.
stopped=${node_port[worker2]}
on_stopped=$(sql "$coordinator" "$cport" "$db" -c "
    SELECT string_agg(t, ' ' ORDER BY t) FROM unnest(ARRAY[$tenant_list]) t
     WHERE (SELECT nodeport FROM pg_dist_shard_placement
             WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', t)) = $stopped")
log "tenants on the worker to be stopped: $on_stopped"
if [ -z "$on_stopped" ] || [ "$(wc -w <<<"$on_stopped")" -ge ${#tenants[@]} ]; then
    log "the tenants are not on both workers"
    exit 1
fi

pgbench_run() { # SECONDS LOG: pgbench on the coordinator; prints the transactions it made
    "$PGBIN/pgbench" -n -h "$coordinator" -p "$cport" -U toolgate_citus_app -c 16 -j 2 -T "$1" -f "$load_sql" "$db" \
        >"$2" 2>&1 || true
    sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$2"
}
started_load=$SECONDS
pgbench_run 20 "$work/load-1.log" >"$work/load-1.count" &
bench_pid=$!
sleep 6
# The window is taken inside the outage: after the stop returned, before the start begins.
as_postgres "$PGBIN/pg_ctl" -D "$work/worker2/data" -m immediate -w stop >/dev/null
stop_at=$(date -u '+%Y-%m-%d %H:%M:%S.%N+00')
sleep 6
start_at=$(date -u '+%Y-%m-%d %H:%M:%S.%N+00')
as_postgres env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$work/worker2/data" -l "$work/worker2/server.log" -w -t 60 start >/dev/null
wait "$bench_pid"
first=$(cat "$work/load-1.count")
aborted=$(grep -c 'aborted in command' "$work/load-1.log" || true)
log "first pass: $first calls in 20 s, the second worker stopped for 6 s; $aborted client(s) aborted by it"
# The same key space again with the worker back: lost replies retried, keys replayed.
second=$(pgbench_run 10 "$work/load-2.log")
log "second pass: $second calls in 10 s, every client"

judge_load "$stop_at" "$start_at" "$on_stopped" "$((first + second))" "$aborted" \
    "(calls made: $((first + second)); in $((SECONDS - started_load)) s)"
}

# judge_load FROM TO STOPPED CALLS ABORTED NOTE: every invariant of the load so far, from the tables
# (the tenants' calls from FROM to TO, while the worker of the tenants STOPPED was down: none of
# theirs, some of the others'; FROM = TO: no outage); CALLS calls made in all, ABORTED of them cut
# off by an outage (each may have committed). Says the verdict with NOTE; exits 1 if one broke.
judge_load() {
local verdict
verdict=$(sql "$coordinator" "$cport" "$db" <<SQL
WITH t AS (SELECT unnest(ARRAY[$tenant_list]) AS tenant),
     stopped AS (SELECT unnest(string_to_array('$3', ' ')) AS tenant),
     settled AS MATERIALIZED (SELECT l.tenant_id, l.tool, l.idempotency_key, l.reply->>'outcome' AS outcome, l.state
                                FROM toolgate.ledger l WHERE l.tenant_id IN (SELECT tenant FROM t)),
     effects AS MATERIALIZED (
         SELECT c.tenant_id, 'request_close' AS tool, c.idempotency_key, c.order_id FROM maintenance.close_requests c
          WHERE c.tenant_id IN (SELECT tenant FROM t)
         UNION ALL
         SELECT p.tenant_id, 'request_purchase_part', p.idempotency_key, p.order_id FROM maintenance.purchases p
          WHERE p.tenant_id IN (SELECT tenant FROM t)),
     spent AS MATERIALIZED (
         SELECT c.tenant_id, c.spent, c.budget,
                (SELECT coalesce(sum(p.total), 0) FROM maintenance.purchases p
                  WHERE p.tenant_id = c.tenant_id AND p.cost_center = c.cost_center) AS bought
           FROM maintenance.cost_centers c WHERE c.tenant_id IN (SELECT tenant FROM t) AND c.cost_center = 'CC-L'),
     used AS MATERIALIZED (SELECT q.tenant_id, q.actor, q.conversation_id, q.used FROM toolgate.quota_usage q
                            WHERE q.tenant_id IN (SELECT tenant FROM t) AND q.tool = 'request_purchase_part'),
     audited AS MATERIALIZED (SELECT a.tenant_id, a.actor, a.at, a.tool, a.conversation_id, a.outcome, a.replayed
                                FROM toolgate.audit_log a WHERE a.tenant_id IN (SELECT tenant FROM t) AND a.kind = 'call'),
     bought_calls AS (SELECT tenant_id, actor, conversation_id, count(*) AS n FROM audited
                       WHERE tool = 'request_purchase_part' AND outcome = 'SUCCEEDED' AND NOT replayed GROUP BY 1, 2, 3)
SELECT concat_ws(' ',
    'keys_with_two_effects=' || (SELECT count(*) FROM (SELECT 1 FROM effects GROUP BY tenant_id, tool, idempotency_key HAVING count(*) > 1) d),
    'orders_closed_twice=' || (SELECT count(*) FROM (SELECT 1 FROM effects WHERE tool = 'request_close'
                                                     GROUP BY tenant_id, order_id HAVING count(*) > 1) d),
    'effects=' || (SELECT count(*) FROM effects),
    'purchases=' || (SELECT count(*) FROM effects WHERE tool = 'request_purchase_part'),
    'succeeded_keys=' || (SELECT count(*) FROM settled WHERE state = 'settled' AND outcome = 'SUCCEEDED'),
    'effect_without_key=' || (SELECT count(*) FROM effects e WHERE NOT EXISTS
        (SELECT 1 FROM settled s WHERE s.tenant_id = e.tenant_id AND s.tool = e.tool AND s.idempotency_key = e.idempotency_key
            AND s.state = 'settled' AND s.outcome = 'SUCCEEDED')),
    'reserved_left=' || (SELECT count(*) FROM settled WHERE state = 'reserved'),
    'overspent=' || (SELECT count(*) FROM spent WHERE spent > budget),
    'spent_not_bought=' || (SELECT count(*) FROM spent WHERE spent <> bought),
    'spent_total=' || (SELECT sum(spent) FROM spent),
    'quota_over=' || (SELECT count(*) FROM used WHERE used > 3),
    'quota_not_calls=' || (SELECT count(*) FROM used u FULL JOIN bought_calls b USING (tenant_id, actor, conversation_id)
                            WHERE coalesce(u.used, 0) <> coalesce(b.n, 0)),
    'audit_rows=' || (SELECT count(*) FROM audited),
    'audit_ids_twice=' || (SELECT count(*) FROM (SELECT 1 FROM toolgate.audit GROUP BY audit_id HAVING count(*) > 1) d),
    'during_stop_running=' || (SELECT count(*) FROM audited WHERE at BETWEEN '$1' AND '$2'
                                  AND tenant_id NOT IN (SELECT tenant FROM stopped)),
    'during_stop_stopped=' || (SELECT count(*) FROM audited WHERE at BETWEEN '$1' AND '$2'
                                  AND tenant_id IN (SELECT tenant FROM stopped)))
SQL
)
log "invariants: $verdict $6"
declare -A v
for kv in $verdict; do v[${kv%%=*}]=${kv#*=}; done
bad=()
[ "${v[keys_with_two_effects]}" = 0 ] || bad+=("a key made two effects")
[ "${v[orders_closed_twice]}" = 0 ] || bad+=("an order was closed twice")
[ "${v[effects]}" = "${v[succeeded_keys]}" ] || bad+=("effects differ from the keys that succeeded")
[ "${v[effect_without_key]}" = 0 ] || bad+=("an effect has no settled key")
[ "${v[reserved_left]}" = 0 ] || bad+=("a reservation outlived its transaction")
[ "${v[purchases]}" -gt 0 ] || bad+=("no purchase was made")
[ "${v[overspent]}" = 0 ] || bad+=("a budget was overspent")
[ "${v[spent_not_bought]}" = 0 ] || bad+=("a cost centre's spending differs from its purchases")
[ "${v[quota_over]}" = 0 ] || bad+=("a conversation went over its quota")
[ "${v[quota_not_calls]}" = 0 ] || bad+=("a conversation's quota differs from its purchases that succeeded")
# One audit row a call: a call whose reply the stop cut off may have committed (at most one for each
# client it aborted), so between the calls pgbench counted and that many more.
[ "${v[audit_rows]}" -ge "$4" ] && [ "${v[audit_rows]}" -le $(($4 + $5)) ] ||
    bad+=("audit rows are not one a call")
[ "${v[audit_ids_twice]}" = 0 ] || bad+=("an audit id was drawn twice")
if [ "$1" != "$2" ]; then
    [ "${v[during_stop_running]}" -gt 0 ] || bad+=("no call of the running worker's tenants while the other was stopped")
    [ "${v[during_stop_stopped]}" = 0 ] || bad+=("a call of the stopped worker's tenants while it was stopped")
fi
if [ ${#bad[@]} -gt 0 ]; then
    for b in "${bad[@]}"; do log "BROKEN: $b"; done
    exit 1
fi
log "every invariant held"
}
if [ "$mode" = suite ]; then load_with_a_worker_stopped; fi

# Day two (the suite only): while the same 16 clients call, a third worker is added as
# docs/scale-out.md says (pg_test/citus/add_worker.sql) and shards move onto it both ways Citus
# moves them: first one tenant's from the first worker by logical replication (force_logical: what
# loses the calls' writes on a Citus without pg_test/citus/citus-logical-catch-up.patch,
# docs/scale-out.md), then the rest rebalanced with block_writes (the transfer the docs advise on a
# stock Citus). The clients call (pgbench runs of 4 s, one after the other) from 3 s before the
# worker is added until 4 to 8 s into the rebalance, so the logical move runs under load however
# long it takes, and the rebalance's first moves too; then 6 s more. Judged as the load above (the
# invariants of both loads together), each tenant's calls in this run equal to its audit rows,
# every node's audit ids in its own range, and no audit id drawn twice; says when each step ran,
# how many of the moved tenant's calls pgbench counted done during its move (none: the move proved
# nothing, and the suite stops), and the longest a call waited.
day_two_under_load() {
step "day two: a third worker added under load, one tenant's shards moved onto it by logical replication, the rest rebalanced"
local w3=${node_port[worker3]} w1=${node_port[worker1]} third fourth aborted3 onto tenant shard placed stall since until_
local per_tenant audited_per_tenant t0 a0 m0 m1 r1 ended moved_calls i
rm -f "$work"/day2-* "$work"/load-3-* "$work/moved"
# at TIME: TIME ($EPOCHREALTIME) in seconds into the load.
at() { awk -v a="$1" -v t="$t0" 'BEGIN { printf "%.1f", a - t }'; }
since=$(sql "$coordinator" "$cport" "$db" -c "SELECT clock_timestamp()")
t0=$EPOCHREALTIME
# The load: runs of 4 s, each logging its calls (day2-K.*), until the logical move is done, then
# one more.
(
    k=0
    load_run() {
        "$PGBIN/pgbench" -n -h "$coordinator" -p "$cport" -U toolgate_citus_app -c 16 -j 2 -T 4 -f "$load_sql" \
            -l --log-prefix="$work/day2-$k" "$db" >"$work/load-3-$k.log" 2>&1 || true
        k=$((k + 1))
    }
    until [ -e "$work/moved" ]; do load_run; done
    load_run
    echo "$EPOCHREALTIME" >"$work/load-3.ended"
) &
bench_pid=$!
sleep 3
a0=$EPOCHREALTIME
sql "$coordinator" "$cport" "$db" -v host=127.0.0.1 -v port="$w3" -f "$root/pg_test/citus/add_worker.sql" \
    >"$work/add-worker.out" || { log "adding the worker failed"; kill "$bench_pid"; exit 1; }
read -r tenant shard < <(sql "$coordinator" "$cport" "$db" -F ' ' -c "
    SELECT t, get_shard_id_for_distribution_column('toolgate.ledger', t) FROM unnest(ARRAY[$tenant_list]) t
     WHERE (SELECT nodeport FROM pg_dist_shard_placement
             WHERE shardid = get_shard_id_for_distribution_column('toolgate.ledger', t)) = $w1
     ORDER BY t LIMIT 1")
[ -n "$tenant" ] || { log "no tenant on the first worker"; kill "$bench_pid"; exit 1; }
m0=$EPOCHREALTIME
sql "$coordinator" "$cport" "$db" -c "SELECT citus_move_shard_placement($shard, '127.0.0.1', $w1, '127.0.0.1', $w3,
    shard_transfer_mode => 'force_logical')" >/dev/null || { log "the move failed"; touch "$work/moved"; exit 1; }
m1=$EPOCHREALTIME
touch "$work/moved"
placed=$(sql "$coordinator" "$cport" "$db" -c "SELECT nodeport FROM pg_dist_shard_placement WHERE shardid = $shard")
sql "$coordinator" "$cport" "$db" -c "SELECT rebalance_table_shards(shard_transfer_mode => 'block_writes')" >/dev/null ||
    { log "the rebalance failed"; exit 1; }
r1=$EPOCHREALTIME
wait "$bench_pid" || true
ended=$(cat "$work/load-3.ended")
until_=$(sql "$coordinator" "$cport" "$db" -c "SELECT clock_timestamp()")
onto=$(sql "$coordinator" "$cport" "$db" -c "
    SELECT count(*) FROM pg_dist_shard_placement p JOIN pg_dist_shard s USING (shardid)
     WHERE s.logicalrelid = 'toolgate.ledger'::regclass AND p.nodeport = $w3")
# Each call of this run audited: per tenant, the calls pgbench made (its client c calls for the
# tenant c mod 8) and the audit rows written meanwhile.
per_tenant=$(cat "$work"/day2-* | awk -v n=${#tenants[@]} '{ c[$1 % n]++ } END { for (i = 0; i < n; i++) printf "%d ", c[i] }')
audited_per_tenant=$(sql "$coordinator" "$cport" "$db" -c "
    SELECT string_agg(coalesce(n, 0)::text, ' ' ORDER BY i) FROM unnest(ARRAY[$tenant_list]) WITH ORDINALITY u(t, i)
      LEFT JOIN (SELECT tenant_id, count(*) AS n FROM toolgate.audit
                  WHERE kind = 'call' AND at BETWEEN '$since' AND '$until_' GROUP BY 1) a ON a.tenant_id = u.t")
log "calls per tenant: ${per_tenant% }; audit rows per tenant: $audited_per_tenant"
third=$(cat "$work"/load-3-*.log | awk '/^number of transactions actually processed: / { n += $6 } END { print n + 0 }')
aborted3=$(cat "$work"/load-3-*.log | grep -c 'aborted in command' || true)
stall=$(cat "$work"/day2-* | awk '$3 > m { m = $3 } END { printf "%.3f", m / 1e6 }')
# The moved tenant's calls (its clients') that pgbench counted done while its move ran: each line
# of its log ends a call, at time_epoch ($5) and time_us ($6).
i=0
while [ "$i" -lt ${#tenants[@]} ] && [ "${tenants[$i]}" != "$tenant" ]; do i=$((i + 1)); done
moved_calls=$(cat "$work"/day2-* | awk -v n=${#tenants[@]} -v i="$i" -v a="$m0" -v b="$m1" \
    '$1 % n == i && $5 + $6 / 1e6 >= a && $5 + $6 / 1e6 <= b { c++ } END { print c + 0 }')
log "worker on port $w3 added, $(at "$a0") to $(at "$m0") s into the load"
log "$tenant's shards moved onto it from port $w1 by logical replication (force_logical), $(at "$m0") to $(at "$m1") s: $moved_calls of its calls done meanwhile"
log "the rest rebalanced with block_writes, $(at "$m1") to $(at "$r1") s (the load ended at $(at "$ended") s): $onto of the ledger's 32 shards on the new worker"
log "under it: $third calls, $aborted3 client(s) aborted; the longest call took $stall s"
fourth=$(pgbench_run 6 "$work/load-4.log")
# Audit ids: every node, the new one included, draws from its own range (its group × 2^48) with
# nothing set for it; every id so far is in the range of a node there is; how many the new
# worker drew (its tenants' calls once they were on it).
local group3 groups drawn3 strays ranged
group3=$(sql "$coordinator" "$cport" "$db" -c "SELECT groupid FROM pg_dist_node WHERE nodeport = $w3")
groups=$(sql "$coordinator" "$cport" "$db" -c "SELECT string_agg(groupid::text, ',') FROM pg_dist_node")
ranged=$(sql "$coordinator" "$cport" "$db" -c "
    SELECT count(*) FILTER (WHERE result = 't') || '/' || count(*) FROM run_command_on_all_nodes(
        'SELECT toolgate.node_audit_id(1) = (groupid::bigint << 48) + 1 FROM pg_dist_local_group')")
read -r drawn3 strays < <(sql "$coordinator" "$cport" "$db" -F ' ' -c "
    SELECT count(*) FILTER (WHERE audit_id >> 48 = $group3), count(*) FILTER (WHERE audit_id >> 48 NOT IN ($groups))
      FROM toolgate.audit")
log "audit ids: nodes drawing from their own range $ranged; drawn on the new worker (group $group3): $drawn3; outside every node's range: $strays"
if [ "$ranged" != 4/4 ] || [ "$strays" != 0 ]; then log "BROKEN: an audit id outside its node's range"; exit 1; fi
if [ "$onto" -le 1 ]; then log "BROKEN: nothing was rebalanced onto the new worker"; exit 1; fi
[ "${per_tenant% }" = "$audited_per_tenant" ] || { log "BROKEN: a tenant's calls and its audit rows differ"; exit 1; }
[ "$placed" = "$w3" ] || { log "BROKEN: $tenant's shard is not on port $w3 after its move"; exit 1; }
[ "$moved_calls" -gt 0 ] || { log "BROKEN: none of $tenant's calls during its logical move: it ran outside the load"; exit 1; }
judge_load "$stop_at" "$start_at" "$on_stopped" "$((first + second + third + fourth))" "$((aborted + aborted3))" \
    "(both loads; this one: $((third + fourth)) calls)"
}

# The outbox on the cluster (the suite only): the supplier's outbox tool, intents of eight tenants
# on both workers, two dispatchers draining them at once. Citus locks rows only within one shard,
# so each dispatcher claims tenant by tenant (toolgate.tenant_claim_outbox, delegated to the node
# holding the tenant) and settles there (the tool's finish function with it). Judged from the
# fake ERP's own ledger and the tables: every intent written once and applied once, no key
# refused as in flight (what a second sender would meet), every intent SUCCEEDED with its
# purchase recorded once, both dispatchers at work, every dispatch audit row drawn on its
# tenant's node, and claim_outbox refusing the cluster with a clear error.
outbox_with_two_dispatchers() {
step "the outbox on the cluster: two dispatchers, claims and settlements on each tenant's node"
local otenants=(out-a out-b out-c out-d out-e out-f out-g out-h) per=25 erp_port token t i
local olist
olist="'$(printf "%s','" "${otenants[@]}" | sed "s/','$//")'"
cargo build --quiet -p toolgate-fake-erp
erp_port=$(free_port "$((cport + 20))")
token="rt-citus-$(od -An -tx8 -N8 /dev/urandom | tr -d ' ')"
"${CARGO_TARGET_DIR:-$root/target}/debug/toolgate-fake-erp" --listen "127.0.0.1:$erp_port" --refresh-token "$token" \
    --per-second 0 --per-minute 0 --async-delay-ms 50 >"$work/erp.out" 2>&1 &
erp_pid=$!
for _ in $(seq 50); do grep -q listen "$work/erp.out" && break; sleep 0.1; done
grep -q listen "$work/erp.out" || { log "the fake ERP did not start: $(cat "$work/erp.out")"; exit 1; }
printf '%s' "$token" >"$work/supplier.token"
chmod 600 "$work/supplier.token"
# The tool (its functions made on the coordinator alone, then on every node by distribute()),
# pointed at the fake ERP, without the example's rate limits.
{ echo "SET citus.enable_ddl_propagation = off;"; cat "$root/examples/maintenance/supplier.sql"; } |
    sql "$coordinator" "$cport" "$db" >/dev/null
sql "$coordinator" "$cport" "$db" >/dev/null <<SQL
SELECT count(*) FROM toolgate.distribute();
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA maintenance FROM PUBLIC;
SELECT toolgate.repoint_erp_endpoint('supplier', 'http://127.0.0.1:$erp_port');
SELECT toolgate.add_erp_endpoint('supplier', 'http://127.0.0.1:$erp_port', 'refresh_token');
CREATE ROLE toolgate_citus_dispatcher LOGIN IN ROLE toolgate_dispatcher;
SET ROLE toolgate_admin;
$(for t in "${otenants[@]}"; do
    echo "SELECT toolgate.add_tenant('$t', 'Outbox $t');"
    echo "SELECT toolgate.set_policy('$t', 'order_part_from_supplier', true, ARRAY['supervisor'], 0, max_value => 1000, max_calls_per_conversation => 1000);"
done)
RESET ROLE;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected)
SELECT t, g::text, 'open', true FROM unnest(ARRAY[$olist]) t, generate_series(1, $per) g;
INSERT INTO maintenance.parts (tenant_id, part_id, name, unit_price, max_quantity)
SELECT t, 'P-1', 'Filtro', 10.00, 5 FROM unnest(ARRAY[$olist]) t;
INSERT INTO maintenance.cost_centers (tenant_id, cost_center, name, budget)
SELECT t, 'CC-O', 'Fornecedor', 100000.00 FROM unnest(ARRAY[$olist]) t;
SQL
# The calls, each a statement of its own (so Citus delegates it), as the agents' login.
for t in "${otenants[@]}"; do
    token=$(identity_token "$t" "$coordinator $cport")
    for i in $(seq "$per"); do
        echo "SELECT toolgate.tenant_call('$t', '$token', 'buy-$t', 'order_part_from_supplier', '{\"order_id\": \"$i\", \"part_id\": \"P-1\", \"quantity\": 1, \"cost_center\": \"CC-O\", \"idempotency_key\": \"supplier-key-$i\"}');"
    done
done >"$work/outbox-calls.sql"
"$PGBIN/psql" -X -q -At -h "$coordinator" -p "$cport" -U toolgate_citus_app -d "$db" -v ON_ERROR_STOP=1 \
    -f "$work/outbox-calls.sql" >"$work/outbox-calls.out"
local queued
queued=$(grep -c '"outcome": "PENDING"' "$work/outbox-calls.out" || true)
log "$queued intents queued by $((${#otenants[@]} * per)) calls of ${#otenants[@]} tenants"
[ "$queued" = $((${#otenants[@]} * per)) ] || { log "not every call was queued: $(sort "$work/outbox-calls.out" | uniq -c | head -3)"; exit 1; }
# What a dispatcher meets on a cluster if it claims across tenants.
local refused
refused=$(sql "$coordinator" "$cport" "$db" -c "SELECT count(*) FROM toolgate.claim_outbox(1)" 2>&1 || true)
case $refused in
*"distributed by tenant"*) log "claim_outbox across tenants refused: $(sed -n 's/^ERROR: *//p' <<<"$refused")" ;;
*) log "claim_outbox across tenants was not refused: $refused"; exit 1 ;;
esac
# Two dispatchers at once, each draining until nothing is due.
local d pids=()
for d in 1 2; do
    "$TOOLGATE_BIN" dispatch --database "host=$coordinator port=$cport dbname=$db user=toolgate_citus_dispatcher" \
        --once --concurrency 4 --batch 8 --allow-origin "http://127.0.0.1:$erp_port" --allow-private-addresses \
        --refresh-token-file "supplier=$work/supplier.token" --retry-delay 1 \
        >"$work/dispatch-$d.out" 2>"$work/dispatch-$d.err" &
    pids+=($!)
done
for d in "${pids[@]}"; do wait "$d" || { log "a dispatcher failed: $(cat "$work"/dispatch-*.err)"; exit 1; }; done
local erp counts
erp=$(curl -s "http://127.0.0.1:$erp_port/_fake/effects")
kill "$erp_pid" 2>/dev/null || true
counts=$(python3 -c '
import json, sys
e = json.loads(sys.argv[1])
w = e["writes_by_key"].values()
print("erp_effects=%d keys_written=%d written_twice=%d in_flight_refused=%d orders_twice=%d" % (
    e["effects"], len(e["writes_by_key"]), sum(1 for n in w if n > 1), e["in_progress_refused"],
    sum(1 for n in e["by_order"].values() if n > 1)))
for d in sys.argv[2:]:
    print("dispatcher%s=%d" % (d[-5], json.load(open(d))["settled"].get("SUCCEEDED", 0)))
' "$erp" "$work/dispatch-1.out" "$work/dispatch-2.out" | tr '\n' ' ')
counts+=$(sql "$coordinator" "$cport" "$db" <<SQL
WITH o AS MATERIALIZED (SELECT state FROM toolgate.outbox WHERE tenant_id IN ($olist)),
     a AS MATERIALIZED (SELECT tenant_id, audit_id >> 48 AS on_group FROM toolgate.audit
                         WHERE tenant_id IN ($olist) AND kind = 'dispatch')
SELECT concat_ws(' ',
    'succeeded=' || (SELECT count(*) FROM o WHERE state = 'SUCCEEDED'),
    'not_succeeded=' || (SELECT count(*) FROM o WHERE state <> 'SUCCEEDED'),
    'purchases=' || (SELECT count(*) FROM maintenance.purchases WHERE tenant_id IN ($olist)),
    'purchases_twice=' || (SELECT count(*) FROM (SELECT 1 FROM maintenance.purchases WHERE tenant_id IN ($olist)
                                                  GROUP BY tenant_id, idempotency_key HAVING count(*) > 1) d),
    'dispatch_audit_rows=' || (SELECT count(*) FROM a),
    'audit_off_its_node=' || (SELECT count(*) FROM a WHERE on_group <> (SELECT p.groupid FROM pg_dist_placement p
                               WHERE p.shardid = get_shard_id_for_distribution_column('toolgate.audit', a.tenant_id))))
SQL
)
log "outbox: $counts"
declare -A v
local kv bad=() n=$((${#otenants[@]} * per))
for kv in $counts; do v[${kv%%=*}]=${kv#*=}; done
[ "${v[erp_effects]}" = "$n" ] && [ "${v[keys_written]}" = "$n" ] || bad+=("the ERP did not apply each intent")
[ "${v[written_twice]}" = 0 ] || bad+=("a key was sent twice")
[ "${v[in_flight_refused]}" = 0 ] || bad+=("a key was sent while in flight (two senders)")
[ "${v[orders_twice]}" = 0 ] || bad+=("an order was bought twice at the ERP")
[ "${v[succeeded]}" = "$n" ] && [ "${v[not_succeeded]}" = 0 ] || bad+=("not every intent SUCCEEDED")
[ "${v[purchases]}" = "$n" ] && [ "${v[purchases_twice]}" = 0 ] || bad+=("the follow-up did not run once per intent")
[ "${v[dispatcher1]}" -gt 0 ] && [ "${v[dispatcher2]}" -gt 0 ] || bad+=("a dispatcher settled nothing")
[ "$((v[dispatcher1] + v[dispatcher2]))" = "$n" ] || bad+=("the dispatchers' settlements differ from the intents")
[ "${v[dispatch_audit_rows]}" -ge $((2 * n)) ] || bad+=("attempts without their audit rows")
[ "${v[audit_off_its_node]}" = 0 ] || bad+=("a claim or settlement ran off its tenant's node")
if [ ${#bad[@]} -gt 0 ]; then
    for b in "${bad[@]}"; do log "BROKEN: $b"; done
    exit 1
fi
log "every intent applied once, by one of two dispatchers, claimed and settled on its tenant's node"
}
if [ "$mode" = suite ]; then outbox_with_two_dispatchers; fi

# The MCP server on the cluster (the suite only): `toolgate mcp --http` in front of the
# coordinator, four tenants spread on both workers. For each: tools/list, a tier-0 close, a
# confirmed close (the policy raised to tier 1; the person's answer comes signed with the tenant's
# channel key through confirm_proposal), a read. Every call, confirmation and read goes through the
# tenant-routed entry points, so it runs whole on the worker that holds the tenant: judged from
# where each audit row was drawn (the node's group in its id) against the tenant's placement.
mcp_on_the_cluster() {
step "toolgate mcp --http on the coordinator: each tenant's calls on its worker"
local mtenants=(mcp-a mcp-b mcp-c mcp-d) mlist t mcp_port resource mcp_pid pk token reply outcome id yes
mlist="'$(printf "%s','" "${mtenants[@]}" | sed "s/','$//")'"
mcp_port=$(free_port "$((cport + 30))")
resource="http://127.0.0.1:$mcp_port/mcp"
sql "$coordinator" "$cport" "$db" >/dev/null <<SQL
SET ROLE toolgate_admin;
$(for t in "${mtenants[@]}"; do
    echo "SELECT toolgate.add_tenant('$t', 'MCP $t');"
    echo "SELECT toolgate.set_policy('$t', 'request_close', true, ARRAY['supervisor'], 0, max_calls_per_conversation => 100);"
    echo "SELECT toolgate.set_policy('$t', 'read_order', true, ARRAY['supervisor'], 0);"
done)
RESET ROLE;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected)
SELECT t, g::text, 'open', true FROM unnest(ARRAY[$mlist]) t, generate_series(1, 2) g;
SQL
local where
where=$(sql "$coordinator" "$cport" "$db" -c "
    SELECT string_agg(DISTINCT nodeport::text, ' ') FROM unnest(ARRAY[$mlist]) t, pg_dist_shard_placement p
     WHERE p.shardid = get_shard_id_for_distribution_column('toolgate.audit', t)")
[ "$(wc -w <<<"$where")" = 2 ] || { log "the MCP tenants are not on both workers (on: $where)"; exit 1; }
declare -A tokens
for t in "${mtenants[@]}"; do
    pk=$("$TOOLGATE_MINT" key "idp-$t")
    sql "$coordinator" "$cport" "$db" -c "SELECT toolgate.add_key('$t', 'idp-$t', 'identity', '$pk')" >/dev/null
    pk=$("$TOOLGATE_MINT" key "chan-$t")
    sql "$coordinator" "$cport" "$db" -c "SELECT toolgate.add_key('$t', 'chan-$t', 'channel', '$pk')" >/dev/null
    tokens[$t]=$("$TOOLGATE_BIN" identity --dir "$TOOLGATE_KEYS" --kid "idp-$t" --tenant "$t" --sub "user-$t" \
        --role supervisor --ttl 3600 --aud "$resource")
done
TOOLGATE_DATABASE_URL="host=$coordinator port=$cport dbname=$db user=toolgate_citus_app" TOOLGATE_RESOURCE_URL=$resource \
    "$TOOLGATE_BIN" mcp --http "127.0.0.1:$mcp_port" >"$work/mcp.out" 2>"$work/mcp.err" &
mcp_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$mcp_port/healthz" >/dev/null && break; sleep 0.1; done
# mcp_post TENANT BODY [HEADER]: one JSON-RPC request as TENANT's supervisor; prints the answer.
mcp_post() {
    curl -s "$resource" -H "Authorization: Bearer ${tokens[$1]}" -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2025-11-25' \
        -H "Toolgate-Conversation: mcp-$1" ${3:+-H "$3"} -d "$2"
}
# field JSON EXPR: a Python expression over the answer `r`.
field() { python3 -c "import json, sys; r = json.loads(sys.argv[1]); print($2)" "$1"; }
call() { printf '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "%s", "arguments": %s}}' "$1" "$2"; }
local bad=()
for t in "${mtenants[@]}"; do
    reply=$(mcp_post "$t" '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')
    [ "$(field "$reply" "'request_close' in [x['name'] for x in r['result']['tools']]")" = True ] ||
        bad+=("$t: tools/list without request_close: $reply")
    reply=$(mcp_post "$t" "$(call request_close '{"order_id": "1", "reason": "Inspeção validada", "idempotency_key": "mcp-key-1"}')")
    outcome=$(field "$reply" "r['result']['structuredContent']['outcome']" 2>/dev/null || echo "$reply")
    [ "$outcome" = SUCCEEDED ] || bad+=("$t: the tier-0 close: $outcome")
done
sql "$coordinator" "$cport" "$db" >/dev/null <<SQL
SET ROLE toolgate_admin;
$(for t in "${mtenants[@]}"; do
    echo "SELECT toolgate.set_policy('$t', 'request_close', true, ARRAY['supervisor'], 1, max_calls_per_conversation => 100);"
done)
SQL
for t in "${mtenants[@]}"; do
    reply=$(mcp_post "$t" "$(call request_close '{"order_id": "2", "reason": "Inspeção validada", "idempotency_key": "mcp-key-2"}')")
    id=$(field "$reply" "r['result']['structuredContent']['proposal']['id']" 2>/dev/null) ||
        { bad+=("$t: no proposal: $reply"); continue; }
    yes=$("$TOOLGATE_MINT" yes "$t" "$id" sim)
    reply=$(mcp_post "$t" "$(call confirm_proposal "{\"proposal_id\": \"$id\"}")" "Toolgate-Channel-Message: $yes")
    outcome=$(field "$reply" "r['result']['structuredContent']['outcome']" 2>/dev/null || echo "$reply")
    [ "$outcome" = SUCCEEDED ] || bad+=("$t: the confirmed close: $outcome")
    reply=$(mcp_post "$t" "$(call read_order '{"order_id": "2"}')")
    outcome=$(field "$reply" "r['result']['structuredContent']['outcome']" 2>/dev/null || echo "$reply")
    [ "$outcome" = SUCCEEDED ] || bad+=("$t: the read: $outcome")
done
kill "$mcp_pid" 2>/dev/null || true
wait "$mcp_pid" 2>/dev/null || true
local placed
placed=$(sql "$coordinator" "$cport" "$db" <<SQL
WITH a AS MATERIALIZED (SELECT tenant_id, kind, audit_id >> 48 AS on_group FROM toolgate.audit WHERE tenant_id IN ($mlist)),
     n AS (SELECT t AS tenant_id, p.groupid, d.nodeport
             FROM unnest(ARRAY[$mlist]) t CROSS JOIN pg_dist_placement p JOIN pg_dist_node d ON d.groupid = p.groupid
            WHERE p.shardid = get_shard_id_for_distribution_column('toolgate.audit', t))
SELECT string_agg(format('%s:%s:%s:%s', n.tenant_id, n.nodeport,
                         (SELECT count(*) FROM a WHERE a.tenant_id = n.tenant_id),
                         (SELECT count(*) FROM a WHERE a.tenant_id = n.tenant_id AND a.on_group <> n.groupid)), ' '
                  ORDER BY n.tenant_id)
  FROM n
SQL
)
local closes
closes=$(sql "$coordinator" "$cport" "$db" -c "SELECT count(*) FROM maintenance.close_requests WHERE tenant_id IN ($mlist)")
local entry rows off
for entry in $placed; do
    IFS=: read -r t where rows off <<<"$entry"
    log "$t: $rows audit rows (the close, the proposal, the confirmation, the read), drawn on the worker at port $where; off it: $off"
    [ "$rows" -ge 4 ] || bad+=("$t: $rows audit rows, not the calls made")
    [ "$off" = 0 ] || bad+=("$t: $off audit rows drawn off the tenant's worker")
done
[ "$closes" = $((2 * ${#mtenants[@]})) ] || bad+=("$closes closes applied, not $((2 * ${#mtenants[@]}))")
if [ ${#bad[@]} -gt 0 ]; then
    for b in "${bad[@]}"; do log "BROKEN: $b"; done
    exit 1
fi
log "MCP on the cluster: every call, confirmation and read of ${#mtenants[@]} tenants ran on its tenant's worker"
}
if [ "$mode" = suite ]; then mcp_on_the_cluster; fi

step "the benchmark's distributed row: tier-0 closes through tenant_call, one node and the cluster"
# A single node beside the cluster, with the same set-up scenario and the same tenants.
CLUSTER_CONF='' throwaway_cluster single "$((cport + 10))"
single=$work/single/socket sport=$port
mkdir -p "$work/keys-single"
TOOLGATE_KEYS=$work/keys-single "$PG_REGRESS" --bindir="$PGBIN" --host="$single" --port="$sport" --user=postgres --dbname="$db" \
    --inputdir="$root/pg_test" --outputdir="$work/regress-single" 00_setup >"$work/regress-single.log" 2>&1 || {
    cat "$work/regress-single.log" >&2
    log "the single node's set-up failed"
    exit 1
}
sql "$single" "$sport" "$db" -c "CREATE ROLE toolgate_citus_app LOGIN IN ROLE toolgate_agent" 2>/dev/null || true
btenants=(bench-a bench-b bench-c bench-d bench-e bench-f bench-g bench-h)
btenant_list="'$(printf "%s','" "${btenants[@]}" | sed "s/','$//")'"
# Orders enough for every run on a node: each tenant's sequence serves all of the node's runs, and
# the busiest tenant (the first) has ceil(C/8) of a run's C clients, so at most that share of its
# calls; a node is taken to make at most 6,000 calls a second (more than this machine's two cores
# make). A run that still found no open order says so below, with what its calls returned.
orders=0
for c in "${bench_clients[@]}"; do orders=$((orders + bench_seconds * 6000 * ((c + 7) / 8) / c)); done
for node in "$coordinator $cport" "$single $sport"; do
    read -r h p <<<"$node"
    sql "$h" "$p" "$db" >/dev/null <<SQL
SET ROLE toolgate_admin;
$(for t in "${btenants[@]}"; do
    echo "SELECT toolgate.add_tenant('$t', 'Bench $t');"
    echo "SELECT toolgate.set_policy('$t', 'request_close', true, ARRAY['supervisor'], 0, max_calls_per_conversation => 2000000000);"
done)
RESET ROLE;
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected)
SELECT t, g::text, 'open', true FROM unnest(ARRAY[$btenant_list]) t, generate_series(1, $orders) g;
$(for i in "${!btenants[@]}"; do echo "CREATE SEQUENCE bench_orders_$i; GRANT USAGE ON SEQUENCE bench_orders_$i TO toolgate_citus_app;"; done)
VACUUM ANALYZE;
SQL
done
bench_sql=$work/bench.sql
{
    printf '%s\n' "\\set t :client_id % ${#btenants[@]}"
    i=0
    for t in "${btenants[@]}"; do
        token=$(identity_token "$t" "$coordinator $cport" "$single $sport")
        branch "$i"
        printf '%s\n' "SELECT nextval('bench_orders_$i') AS n \gset"
        echo "SELECT toolgate.tenant_call('$t', '$token', 'bench-:client_id', 'request_close', '{\"order_id\": \":n\", \"reason\": \"Benchmark close\", \"idempotency_key\": \"bench-key-:n\"}');"
        i=$((i + 1))
    done
    printf '%s\n' '\endif'
} >"$bench_sql"

# node_cpu NODE: the CPU time, in clock ticks, NODE's processes have used so far: its postmaster's
# own and its children's that have ended, and each running child's (the backends, Citus's
# connections between nodes among them). pgbench's own is not counted.
node_cpu() {
    local pm pid ticks=0 f
    pm=$(head -1 "$work/$1/data/postmaster.pid")
    for pid in "$pm" $(pgrep -P "$pm"); do
        f=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
        # After the name: state, ppid, ..., utime (12th), stime, cutime, cstime (15th).
        ticks=$((ticks + $(awk '{ print $12 + $13 + $14 + $15 }' <<<"$f")))
    done
    echo "$ticks"
}
# cpu_per_call TICKS CALLS: microseconds of CPU a call.
cpu_per_call() { awk -v t="$1" -v n="$2" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.0f", t * 1e6 / hz / n }'; }

# bench_run HOST PORT CLIENTS NODE...: one pgbench run; sets run_tps and run_lat, and run_cpu to
# each NODE's CPU a call (µs, space-separated), after checking that every call of the run was a
# close that succeeded, one audit row each (what it found, if not).
bench_run() {
    local h=$1 p=$2 c=$3 out=$work/bench-$2-$3.log since got txns n
    shift 3
    local -A before
    for n in "$@"; do before[$n]=$(node_cpu "$n"); done
    since=$(sql "$h" "$p" "$db" -c "SELECT clock_timestamp()")
    "$PGBIN/pgbench" -n -h "$h" -p "$p" -U toolgate_citus_app -c "$c" -j $((c < 2 ? c : 2)) -T "$bench_seconds" \
        -f "$bench_sql" "$db" >"$out" 2>&1 || { log "pgbench failed on port $p, $c client(s):"; tail -20 "$out"; exit 1; }
    run_tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$out")
    run_lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' "$out")
    got=$(sql "$h" "$p" "$db" -c "
        WITH a AS MATERIALIZED (SELECT outcome FROM toolgate.audit
                                 WHERE tenant_id IN ($btenant_list) AND at > '$since')
        SELECT count(*) FILTER (WHERE outcome = 'SUCCEEDED') || ' ' || count(*) FROM a")
    txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$out")
    run_cpu=
    for n in "$@"; do run_cpu+="$(cpu_per_call $(($(node_cpu "$n") - before[$n])) "$txns") "; done
    if [ "$got" != "$txns $txns" ]; then
        log "a benchmark run (port $p, $c client(s)) did not do what it measures: [$got] (succeeded, audited) for $txns calls; its audit rows:"
        sql "$h" "$p" "$db" -c "
            SELECT tenant_id || ' ' || outcome || ' ' || (detail - 'quota')::text || ': ' || count(*)
              FROM toolgate.audit WHERE tenant_id IN ($btenant_list) AND at > '$since'
             GROUP BY tenant_id, outcome, (detail - 'quota')::text ORDER BY count(*) DESC LIMIT 20"
        exit 1
    fi
}
results=() costs=()
for c in "${bench_clients[@]}"; do
    bench_run "$single" "$sport" "$c" single
    one_tps=$run_tps one_lat=$run_lat one_cpu=$run_cpu
    bench_run "$coordinator" "$cport" "$c" coordinator worker1 worker2
    cl_tps=$run_tps cl_lat=$run_lat
    read -r co w1 w2 <<<"$run_cpu"
    results+=("| $c | $(printf '%.0f' "$one_tps") | $one_lat | $(printf '%.0f' "$cl_tps") | $cl_lat | $(awk -v a="$cl_tps" -v b="$one_tps" 'BEGIN { printf "%.2f", a / b }') |")
    costs+=("| $c | ${one_cpu% } | $co | $((w1 + w2)) | $((co + w1 + w2)) |")
done
log "tier-0 closes through tenant_call, $bench_seconds s a run (one node: PostgreSQL 15; the cluster: a coordinator and two workers, on the same cores):"
echo "| clients | one node, calls/s | latency ms | Citus, calls/s | latency ms | Citus ÷ one node |"
echo "|---:|---:|---:|---:|---:|---:|"
printf '%s\n' "${results[@]}"
log "CPU a call, µs, of each node's PostgreSQL processes (the workers' together: a call runs on one):"
echo "| clients | one node | coordinator (routing) | worker (the call) | cluster, all nodes |"
echo "|---:|---:|---:|---:|---:|"
printf '%s\n' "${costs[@]}"
if [ "$mode" = suite ]; then day_two_under_load; fi
