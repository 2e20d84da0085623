#!/usr/bin/env bash
# The outbox dispatcher measured on its own (issue 43), on a throwaway cluster:
#   1. deliveries per second against the fake ERP answering each write at once (its synchronous
#      mode: DONE in about a millisecond, no protocol to poll), draining 2,000 queued intents at 1,
#      8 and 32 in flight, and the dispatcher's CPU per delivery (its thread's user + system time;
#      the fake ERP runs on a thread of its own);
#   2. woken or polling: for 10 s, 1 and then 8 gated clients call the outbox tool back to back
#      while the dispatcher delivers at 8 in flight, once woken by the calls (toolgate.outbox_notify
#      on, the default; --poll 2, the default) and once polling every 50 ms with the calls not
#      notifying: the rate they enqueue at (what the notification, and the claims it wakes, cost
#      beside a dispatcher that polls often) and the lag, the oldest due intent's wait (toolgate.outbox_gauges) sampled every 100 ms: the
#      longest, and the last before the enqueuing stopped. A dispatcher that keeps up shows a lag
#      that does not grow.
# Every run checks the ERP made one effect per intent from one write each, and every intent is
# SUCCEEDED with its audit row, or it fails. Rounds are interleaved (1, 8, 32, the four steady
# runs; again), and each figure is its median round.
#
#   scripts/bench-dispatch.sh           # release builds (private PostgreSQL copy, target/bench),
#                                       # 3 rounds; writes docs/benchmarks-dispatch.md
#   scripts/bench-dispatch.sh --smoke   # the installed build, one short round, nothing written
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"

smoke=false
case ${1:-} in
--smoke) smoke=true ;;
"") ;;
*) log "usage: bench-dispatch.sh [--smoke]" >&2; exit 2 ;;
esac

if $smoke; then
    rounds=1 intents=200 steady=2
    pg_use "$PG_INSTALL_BIN"
else
    rounds=${BENCH_ROUNDS:-3} intents=${BENCH_DISPATCH_INTENTS:-2000} steady=${BENCH_STEADY_SECONDS:-10}
    bench_release_builds "the dispatcher measured"
fi
toolgate_cli

make_work
CLUSTER_CONF="fsync = on
shared_buffers = 256MB" throwaway_cluster pg "${TOOLGATE_BENCH_PORT:-54501}"
sock=$work/pg/socket
bench_load "$sock" "$port" toolgate_dispatch 1000 "$root" "$work/keys"

results=$work/dispatch.tsv
: >"$results"
for round in $(seq "$rounds"); do
    for c in 1 8 32 woken-1 polling-1 woken-8 polling-8; do
        if [ "${c%-*}" != "$c" ]; then
            how=(--poll 2)
            [ "${c%-*}" = woken ] || how=(--no-notify --poll 0.05)
            "$TOOLGATE_BIN" bench-dispatch --host "$sock" --port "$port" --dbname toolgate_dispatch --keys "$work/keys" \
                --intents 0 --concurrency 8 --batch 32 --synchronous --steady "$steady" "${how[@]}" \
                --clients "${c#*-}" | sed "s/^/$c\t/" >>"$results"
        else
            "$TOOLGATE_BIN" bench-dispatch --host "$sock" --port "$port" --dbname toolgate_dispatch --keys "$work/keys" \
                --intents "$intents" --concurrency "$c" --batch 32 --synchronous | sed 's/^/drain\t/' >>"$results"
        fi
        tail -n 1 "$results" | awk -v r="$round" -F'\t' '{ printf "  %-6s c=%-3s round %s %9.1f intents/s  %5s us CPU each  lag max %s s, last %s s\n", $1, $2, r, $6, $7, $8, $9 }'
    done
done

table=$(python3 - "$results" "$intents" "$steady" <<'EOF'
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
intents, steady = sys.argv[2], sys.argv[3]
med = lambda xs: statistics.median(xs)
out = ["| intents in flight | intents/s | range | µs of dispatcher CPU per delivery |", "|---:|---:|---:|---:|"]
for c in ("1", "8", "32"):
    runs = [r for r in rows if r[0] == "drain" and r[1] == c]
    rates = [float(r[5]) for r in runs]
    out.append(f"| {c} | {med(rates):,.0f} | {min(rates):,.0f}–{max(rates):,.0f} | {med([float(r[6]) for r in runs]):.0f} |")
out += ["", "## Woken or polling", "",
        f"{steady} s of gated clients enqueueing back to back while the dispatcher delivers, 8 in flight. Woken: the calls "
        "notify (`toolgate.outbox_notify` on, the default) and the dispatcher polls every 2 s (its default `--poll`); "
        "polling: the calls do not notify and the dispatcher polls every 50 ms.", "",
        "| clients | dispatcher | enqueued per second | woken ÷ polling | lag, longest (s) | lag, at the end (s) | µs of dispatcher CPU per delivery |",
        "|---:|---|---:|---:|---:|---:|---:|"]
for n in ("1", "8"):
    rate = {}
    for how in ("woken", "polling"):
        runs = [r for r in rows if r[0] == f"{how}-{n}"]
        rate[how] = med([float(r[5]) for r in runs])
    for how in ("woken", "polling"):
        runs = [r for r in rows if r[0] == f"{how}-{n}"]
        ratio = f"{rate['woken'] / rate['polling']:.2f}" if how == "woken" else ""
        out.append(f"| {n} | {how} | {rate[how]:,.0f} | {ratio} | {med([float(r[7]) for r in runs]):.3f} | "
                   f"{med([float(r[8]) for r in runs]):.3f} | {med([float(r[6]) for r in runs]):.0f} |")
print("\n".join(out))
EOF
)
echo "$table"
if ! $smoke; then
    {
        echo "# The outbox dispatcher, measured on its own"
        echo
        echo "\`scripts/bench-dispatch.sh\` on this machine ($(nproc) cores, PostgreSQL $PG_MAJOR, release builds), $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD): $rounds interleaved rounds, each figure its median round. The fake ERP (\`crates/fake-erp\`, synchronous: each write done at once and answered \`DONE\`) runs on 127.0.0.1 on a thread of its own; $intents intents queued through the gate are drained each run; the dispatcher's CPU is its thread's user and system time (10 ms ticks) over the intents. Every run checks one effect per intent from one write each and every intent \`SUCCEEDED\` with its audit rows, or fails. The lag is the oldest due intent's wait (\`toolgate.outbox_gauges()\`, what \`/metrics\` shows as \`toolgate_dispatch_oldest_due_seconds\`), sampled every 100 ms while the clients enqueue back to back; a notifying call's commit takes PostgreSQL's lock on its notification queue to the end of the commit, which the woken ÷ polling column prices."
        echo
        echo "$table"
    } >docs/benchmarks-dispatch.md
    log "wrote docs/benchmarks-dispatch.md"
fi
