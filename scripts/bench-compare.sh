#!/usr/bin/env bash
# What the gate costs against another version of itself, measured side by side on this machine:
# this tree and the tree of commit BASE (default 0.1.0, the release the update script starts
# from), each built (release) into a private PostgreSQL copy of its own, each loaded the way
# scripts/bench.sh loads its database, with its own examples/, bench/ scripts and `toolgate`
# command. Then, by default:
#
#   pgbench rounds taking turns between the two clusters: every workload at every concurrency,
#   this tree's round right after BASE's, so a machine whose speed drifts slows both alike (the
#   two are never measured at the same moment: they would share its two cores). Prints each
#   workload's median TPS and the benchmark's ratios (gated ÷ floor, replay ÷ gated…) for both
#   trees, with this tree's ratio ÷ BASE's. Runs of minutes on a shared machine still move.
#
#   --instructions: no clock at all. The servers run under valgrind's callgrind (installed from
#   Debian's valgrind package if missing), and each workload is one pgbench connection of W
#   transactions, then another of W + N: the second backend's instructions less the first's,
#   over N, are one transaction's, whatever else the machine is doing. Prints them per workload,
#   for both trees, with this tree's ÷ BASE's.
#
#   --steps: the same count for this tree alone, built with the feature `steps` (each step of the
#   gate a function of its own, not inlined, so the profile names it), and where a transaction's
#   instructions go: the SQL around the call, each step, the ledger's write, the audit row
#   (callgrind_annotate's inclusive counts, per transaction). Workloads gated_close,
#   gated_propose and gated_confirm (gated_pair's two transactions, one a workload each) unless
#   COMPARE_WORKLOADS says otherwise. The steps' build costs a little more than the
#   release's (nothing is inlined across them): its totals are not the release's.
#
#   scripts/bench-compare.sh [--instructions | --steps] [--base COMMIT]
#
# Environment: BENCH_SECONDS (4), BENCH_ROUNDS (3), BENCH_CLIENTS ("1 4 16"), COMPARE_WORKLOADS
# (every workload of scripts/bench.sh's ratios), COMPARE_CALLS (N, 300), COMPARE_WARM (W, 100),
# COMPARE_ORDERS and COMPARE_CONFIRMATIONS (work orders per tenant and prepared confirmations,
# 1000000 and 60000: a close uses one order, a confirmed close one confirmation),
# COMPARE_DIR (the trees, builds and PostgreSQL copies, kept across runs: target/compare),
# TOOLGATE_KEEP=1 (keep the work directory: clusters, logs, callgrind files).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"

base=$(release_commit 0.1.0)
instructions=false steps=false
while [ $# -gt 0 ]; do
    case $1 in
    --instructions) instructions=true ;;
    --steps) instructions=true steps=true ;;
    --base) base=${2:?--base COMMIT}; shift ;;
    *) log "usage: bench-compare.sh [--instructions | --steps] [--base COMMIT]" >&2; exit 2 ;;
    esac
    shift
done
base=$(git rev-parse --verify "$base^{commit}")
seconds=${BENCH_SECONDS:-4} rounds=${BENCH_ROUNDS:-3}
read -r -a clients <<<"${BENCH_CLIENTS:-1 4 16}"
default_workloads="floor_close floor_bound_close gated_close floor_pair floor_bound_pair gated_pair replay denial purchase"
! $steps || default_workloads="gated_close gated_propose gated_confirm"
read -r -a workloads <<<"${COMPARE_WORKLOADS:-$default_workloads}"
calls=${COMPARE_CALLS:-300} warm=${COMPARE_WARM:-100}
dir=$(realpath -m "${COMPARE_DIR:-target/compare}")
if $instructions && ! command -v valgrind >/dev/null; then
    log "installing valgrind"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi

# The two trees: BASE's source (git archive, kept), built in a target directory of its own; this
# tree's in scripts/bench.sh's. Each is installed into its own copy of PostgreSQL.
short=${base:0:7}
base_src=$dir/src-$short
if [ "$(cat "$base_src/.commit" 2>/dev/null)" != "$base" ]; then
    rm -rf "$base_src"
    mkdir -p "$base_src"
    git archive "$base" | tar -x -C "$base_src"
    echo "$base" >"$base_src/.commit"
fi
declare -A src=([base]=$base_src [this]=$root) target=([base]=$dir/target-$short [this]=$root/target/bench)
trees=(base this) features=() copy=pg
if $steps; then
    trees=(this) features=(--features steps) copy=pg-steps
    target[this]=$root/target/steps
fi
declare -A pgbin cli
make_work
for v in "${trees[@]}"; do
    private_pg "$dir/$copy-$v"
    rm -f "$("$PG_CONFIG" --sharedir)"/extension/pg_toolgate[.-]* "$("$PG_CONFIG" --pkglibdir)"/pg_toolgate[.-]*so
    log "building $v ($([ "$v" = base ] && echo "$short" || echo "this tree")), release ${features[*]}"
    if ! (cd "${src[$v]}" && CARGO_TARGET_DIR=${target[$v]} cargo pgrx install --release "${features[@]}" --pg-config "$PG_CONFIG" &&
        CARGO_TARGET_DIR=${target[$v]} cargo build -p toolgate-cli) >"$work/build-$v.log" 2>&1; then
        cat "$work/build-$v.log" >&2
        exit 1
    fi
    pgbin[$v]=$PGBIN
    cli[$v]=${target[$v]}/debug/toolgate
done

declare -A ports tokens tokens1 technicians limiteds
# load V: its cluster started (as scripts/bench.sh starts its own) and its database filled, with
# V's own example, bench/setup.sql and `toolgate` command.
load() {
    local v=$1
    pg_use "${pgbin[$v]}"
    CLUSTER_CONF="fsync = on
shared_buffers = 512MB
max_wal_size = 4GB
checkpoint_timeout = 30min
autovacuum = off" throwaway_cluster "$v" "${TOOLGATE_BENCH_PORT:-54521}"
    ports[$v]=$port
    TOOLGATE_BIN=${cli[$v]} bench_load "$work/$v/socket" "$port" toolgate_bench "${COMPARE_ORDERS:-1000000}" \
        "${src[$v]}" "$work/keys-$v"
    tokens[$v]=$token tokens1[$v]=$token1 technicians[$v]=$technician limiteds[$v]=$limited
    "${cli[$v]}" bench-confirmations --host "$work/$v/socket" --port "$port" --dbname toolgate_bench \
        --keys "$work/keys-$v" --count "${COMPARE_CONFIRMATIONS:-60000}" >/dev/null
    sql "$work/$v/socket" "$port" toolgate_bench -c "VACUUM ANALYZE" -c "CHECKPOINT"
}
for v in "${trees[@]}"; do
    log "loading $v"
    load "$v"
done

# has V WORKLOAD: V's database can run WORKLOAD (its own script, or this tree's floors, which
# bench_load gave it if it has the example ERP).
has() {
    [ -f "${src[$1]}/bench/$2.sql" ] || { [ -f "${src[$1]}/examples/maintenance/maintenance.sql" ] && [ -f "$root/bench/$2.sql" ]; }
}

# bench V WORKLOAD ARGS…: pgbench against V's database with the workload's script and tokens.
bench() {
    local v=$1 w=$2
    shift 2
    local script=${src[$v]}/bench/$w.sql
    [ -f "$script" ] || script=$root/bench/$w.sql  # a floor BASE did not have: this tree's
    "${pgbin[$v]}/pgbench" -n -M prepared -h "$work/$v/socket" -p "${ports[$v]}" -U postgres "$@" \
        -f "$script" -D token="${tokens[$v]}" -D token1="${tokens1[$v]}" \
        -D technician="${technicians[$v]}" -D limited="${limiteds[$v]}" toolgate_bench
}

# audits: what each run did, from the audit rows: a workload that stopped doing what it measures
# shows here (the same outcomes scripts/bench.sh requires of it).
audits() {
    for v in "${trees[@]}"; do
        log "audit of $v: kind outcome rule replayed count"
        "${pgbin[$v]}/psql" -X -At -F ' ' -h "$work/$v/socket" -p "${ports[$v]}" -U postgres -d toolgate_bench -c \
            "SELECT kind, outcome, coalesce(rule, '-'), replayed, count(*) FROM toolgate.audit GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4"
    done
}

results=$work/results.tsv
: >"$results"
if $instructions; then
    # Each cluster again, its server under callgrind: every process it forks writes its own file.
    declare -A postmaster idle
    for v in "${trees[@]}"; do
        cluster_stop "$work/$v"
        as_postgres env -u RUST_BACKTRACE valgrind --tool=callgrind --callgrind-out-file="$work/$v/cg.%p" \
            "${pgbin[$v]}/postgres" -D "$work/$v/data" >"$work/$v/valgrind.log" 2>&1 &
        until "${pgbin[$v]}/pg_isready" -q -h "$work/$v/socket" -p "${ports[$v]}"; do sleep 1; done
        # The server's own processes, once it is up: a client's backend is one more while it lives.
        sleep 2
        postmaster[$v]=$(head -n 1 "$work/$v/data/postmaster.pid")
        idle[$v]=$(pgrep -c -P "${postmaster[$v]}")
    done
    # settled V: wait until every client backend of V's server has exited. A backend writes its
    # callgrind file as it exits, so then every file is whole and no file of an earlier run can
    # still appear.
    settled() {
        until [ "$(pgrep -c -P "${postmaster[$1]}")" -le "${idle[$1]}" ]; do sleep 0.2; done
    }
    # backend_instructions V WORKLOAD TRANSACTIONS: the instructions of the backend of one pgbench
    # connection that ran TRANSACTIONS transactions. pgbench connects twice (a first connection
    # looks the server over and closes): of the two backends' files, the one that ran the
    # transactions is the larger.
    backend_instructions() {
        local v=$1 before new
        settled "$v"
        before=$(find "$work/$v" -maxdepth 1 -name 'cg.*' | sort)
        bench "$v" "$2" -c 1 -t "$3" >"$work/$v/pgbench-$2-$3.log" 2>&1
        settled "$v"
        new=$(comm -13 <(echo "$before") <(find "$work/$v" -maxdepth 1 -name 'cg.*' | sort))
        # (Read once every file has its totals line, the last one callgrind writes.) Prints the
        # count and the file.
        for f in $new; do
            until grep -q '^totals:' "$f"; do sleep 1; done
            echo "$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$f") $f"
        done | sort -n | tail -n 1
    }
    for w in "${workloads[@]}"; do
        for v in "${trees[@]}"; do
            has "$v" "$w" || continue
            read -r a file_a < <(backend_instructions "$v" "$w" "$warm")
            read -r b file_b < <(backend_instructions "$v" "$w" $((warm + calls)))
            printf '%s\t%s\t%s\n' "$v" "$w" $(((b - a) / calls)) | tee -a "$results"
            if $steps; then
                for f in "$file_a" "$file_b"; do
                    callgrind_annotate --inclusive=yes --threshold=100 "$f" >"$f.inclusive"
                done
                python3 bench/report.py steps "$w" "$file_a.inclusive" "$file_b.inclusive" "$calls" "$a" "$b" >>"$work/steps.md"
            fi
        done
    done
    audits
    for v in "${trees[@]}"; do
        as_postgres "${pgbin[$v]}/pg_ctl" -D "$work/$v/data" -m fast -w -t 600 stop >/dev/null
    done
else
    log "$rounds round(s) of ${seconds}s, the trees taking turns"
    for c in "${clients[@]}"; do
        for round in $(seq "$rounds"); do
            for w in "${workloads[@]}"; do
                for v in "${trees[@]}"; do
                    has "$v" "$w" || continue
                    tps=$(bench "$v" "$w" -c "$c" -j $((c < 2 ? c : 2)) -T "$seconds" 2>&1 |
                        sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p')
                    printf '%s\t%s\t%s\t%s\t%s\n' "$v" "$w" "$c" "$round" "$tps" | tee -a "$results"
                done
            done
        done
    done
    audits
fi

if $steps; then
    cat "$work/steps.md"
    # The section of the report of this PostgreSQL version's scripts/bench.sh run.
    doc=docs/benchmarks$([ "$PG_MAJOR" = 15 ] || echo "-pg$PG_MAJOR").md
    python3 bench/report.py steps-section "$doc" "$work/steps.md" \
        "$(date -u +%F) at commit $(git rev-parse --short HEAD)$([ -z "$(git status --porcelain)" ] || echo +), PostgreSQL $PG_MAJOR,"
    log "the tables are in $doc"
    exit 0
fi
python3 bench/report.py compare "$results" "$short" "$(git rev-parse --short HEAD)$([ -z "$(git status --porcelain)" ] || echo +)"
