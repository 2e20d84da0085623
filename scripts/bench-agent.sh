#!/usr/bin/env bash
# The agent's whole path measured (issue 44), on a throwaway cluster: tier-0 closes (a fresh order
# and key each) through `toolgate mcp --http` by N concurrent MCP sessions (`toolgate
# bench-agent --mode agent`: keep-alive Streamable HTTP, each session its own bearer token and
# conversation), beside the same calls made directly in SQL (`--mode sql`: toolgate.tenant_call,
# what the server runs, on N connections of the same login), at 1, 4, 16 and 64 sessions; and
# head-of-line (`--mode blocked`): 16 sessions of one tenant while a session of another tenant
# waits on a row lock held by a transaction that stays open for the run. The server shares the
# machine with PostgreSQL and the driver. Every run checks each call answered SUCCEEDED and made
# one effect, or fails. Rounds are interleaved (agent and SQL at each size, then blocked; again),
# and each figure is its median round. The server's own CPU per call (its process's user + system
# time over the agent runs) says where the time goes.
#
#   scripts/bench-agent.sh           # release builds (private PostgreSQL copy, target/bench),
#                                    # 3 rounds of 5 s; writes docs/benchmarks-agent.md
#   scripts/bench-agent.sh --smoke   # the installed build, one round of 1 s at 1 and 4, nothing written
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"

smoke=false
case ${1:-} in
--smoke) smoke=true ;;
"") ;;
*) log "usage: bench-agent.sh [--smoke]" >&2; exit 2 ;;
esac

if $smoke; then
    rounds=1 seconds=1 orders=20000 sizes=(1 4) blocked=4
    pg_use "$PG_INSTALL_BIN"
else
    rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-5} orders=400000 blocked=16
    read -r -a sizes <<<"${BENCH_CLIENTS:-1 4 16 64}"
    bench_release_builds "the MCP server measured"
fi
toolgate_cli

make_work
CLUSTER_CONF="fsync = on
shared_buffers = 256MB
max_connections = 300" throwaway_cluster pg "${TOOLGATE_BENCH_PORT:-54501}"
sock=$work/pg/socket
dbname=toolgate_agent_bench
bench_load "$sock" "$port" "$dbname" "$orders" "$root" "$work/keys"
# The server's login, which the direct calls use too; a second tier-0 tenant whose orders are held.
[ -f "$work/keys/idp-bench2.key" ] || "$TOOLGATE_BIN" keygen --dir "$work/keys" --kid idp-bench2 >/dev/null
sql "$sock" "$port" "$dbname" >/dev/null <<SQL
CREATE ROLE bench_agent LOGIN IN ROLE toolgate_agent;
CREATE SEQUENCE bench.blocked;
SET ROLE toolgate_admin;
SELECT toolgate.add_tenant('bench2', 'Benchmark, held');
SELECT toolgate.set_policy('bench2', 'request_close', true, ARRAY['supervisor'], 0, max_calls_per_conversation => 2000000000);
RESET ROLE;
SELECT toolgate.add_key('bench2', 'idp-bench2', 'identity', '$("$TOOLGATE_BIN" pubkey --dir "$work/keys" --kid idp-bench2)');
INSERT INTO maintenance.work_orders (tenant_id, order_id, status, inspected)
SELECT 'bench2', g::text, 'open', true FROM generate_series(1, 1000) g;
SQL

mcp_addr=127.0.0.1:$(free_port 18808)
TOOLGATE_DATABASE_URL="host=$sock port=$port dbname=$dbname user=bench_agent" \
    TOOLGATE_POOL_QUEUE=256 "$TOOLGATE_BIN" mcp --http "$mcp_addr" >"$work/mcp.out" 2>"$work/mcp.err" &
mcp_pid=$!
trap 'rc=$?; kill "$mcp_pid" 2>/dev/null; work_cleanup "$rc"' EXIT
for _ in $(seq 100); do curl -sf "http://$mcp_addr/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "http://$mcp_addr/readyz" >/dev/null || { log "the MCP server did not start: $(cat "$work/mcp.err")"; exit 1; }
log "toolgate mcp --http on $mcp_addr (pool: 4 connections per core), $(nproc) cores shared with PostgreSQL and the driver"

# cpu_ticks PID: the process's user + system time, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
results=$work/agent.tsv
: >"$results"
measure() { # MODE SESSIONS ROUND
    local before after line
    before=$(cpu_ticks "$mcp_pid")
    line=$("$TOOLGATE_BIN" bench-agent --host "$sock" --port "$port" --dbname "$dbname" --keys "$work/keys" \
        --mode "$1" --sessions "$2" --seconds "$seconds" --mcp "$mcp_addr")
    after=$(cpu_ticks "$mcp_pid")
    printf '%s\t%s\t%s\n' "$line" "$((after - before))" "$3" >>"$results"
    awk -F'\t' -v hz="$(getconf CLK_TCK)" '{ printf "  %-7s %3s sessions, round %s: %8.1f calls/s  p50 %6.2f ms  p99 %7.2f ms  server CPU %6.0f us a call\n",
        $1, $2, $9, $5, $6, $7, ($8 / hz * 1e6) / ($3 > 0 ? $3 : 1) }' <<<"$(tail -n 1 "$results")"
}
for round in $(seq "$rounds"); do
    for c in "${sizes[@]}"; do
        measure agent "$c" "$round"
        measure sql "$c" "$round"
    done
    measure blocked "$blocked" "$round"
done

# Where the server's time goes: a profile of its process over one more agent run at 16 sessions
# (the full run, when perf is there); the shared objects, then the functions, by their own samples.
profile=
if ! $smoke && command -v perf >/dev/null; then
    perf record -q -F 499 -g -o "$work/perf.data" -p "$mcp_pid" -- sleep "$seconds" >/dev/null 2>&1 &
    perf_pid=$!
    "$TOOLGATE_BIN" bench-agent --host "$sock" --port "$port" --dbname "$dbname" --keys "$work/keys" \
        --mode agent --sessions 16 --seconds "$seconds" --mcp "$mcp_addr" >/dev/null
    wait "$perf_pid" || true
    profile=$(perf report -q -i "$work/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep -v '^$' | grep -v '^#' |
        sed -n '1,8p' | sed 's/^ *//')
    profile+=$'\n\n'$(perf report -q -i "$work/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null |
        grep -v '^$' | grep -v '^#' | sed -n '1,15p' | sed 's/^ *//')
fi

table=$(python3 - "$results" "$(getconf CLK_TCK)" "$blocked" "$(nproc)" <<'EOF'
import statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
hz, blocked, cores = float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
med = statistics.median
def runs(mode, n): return [r for r in rows if r[0] == mode and r[1] == n]
out = ["| sessions | agent path (calls/s) | direct SQL (calls/s) | agent ÷ SQL | agent p50 / p99 (ms) | SQL p50 / p99 (ms) | server CPU per call (µs) |",
       "|---:|---:|---:|---:|---:|---:|---:|"]
sizes = sorted({r[1] for r in rows if r[0] == "agent"}, key=int)
for n in sizes:
    a, s = runs("agent", n), runs("sql", n)
    at, st = med([float(r[4]) for r in a]), med([float(r[4]) for r in s])
    cpu = med([float(r[7]) / hz * 1e6 / max(int(r[2]), 1) for r in a])
    out.append(f"| {n} | {at:,.0f} | {st:,.0f} | {at / st:.2f} | {med([float(r[5]) for r in a]):.2f} / {med([float(r[6]) for r in a]):.2f} | "
               f"{med([float(r[5]) for r in s]):.2f} / {med([float(r[6]) for r in s]):.2f} | {cpu:.0f} |")
b = runs("blocked", blocked)
free = runs("agent", blocked)
if b and free:
    bp99, fp99 = med([float(r[6]) for r in b]), med([float(r[6]) for r in free])
    out += ["", f"Head-of-line: {blocked} sessions of tenant bench while a session of tenant bench2 waits on a held row lock:", "",
            "| | calls/s | p50 (ms) | p99 (ms) |", "|---|---:|---:|---:|",
            f"| unblocked | {med([float(r[4]) for r in free]):,.0f} | {med([float(r[5]) for r in free]):.2f} | {fp99:.2f} |",
            f"| one call of another tenant waiting | {med([float(r[4]) for r in b]):,.0f} | {med([float(r[5]) for r in b]):.2f} | {bp99:.2f} |",
            "", f"p99 with the wait ÷ without: **{bp99 / fp99:.2f}** (target ≤ 2)."]
top = max(sizes, key=lambda n: med([float(r[4]) for r in runs("agent", n)]))
a16, s16 = med([float(r[4]) for r in runs("agent", top)]), med([float(r[4]) for r in runs("sql", top)])
out += ["", f"At {top} sessions the machine's {cores} cores are busy either way: {cores * 1e6 / a16:,.0f} µs of CPU per agent call "
        f"(the server, PostgreSQL and the driver), {cores * 1e6 / s16:,.0f} µs per direct call."]
print("\n".join(out))
EOF
)
echo
echo "$table"
if $smoke; then
    exit 0
fi
# The plot: calls per second by sessions, the agent path and direct SQL (median rounds).
python3 - "$results" docs/benchmarks-agent.svg <<'EOF'
import math, statistics, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
series = {}
for mode in ("agent", "sql"):
    sizes = sorted({int(r[1]) for r in rows if r[0] == mode})
    series[mode] = [(n, statistics.median(float(r[4]) for r in rows if r[0] == mode and int(r[1]) == n)) for n in sizes]
w, h, left, bottom, top, right = 640, 360, 70, 50, 30, 170
top_rate = max(v for s in series.values() for _, v in s) * 1.1
sizes = sorted({n for s in series.values() for n, _ in s})
span = max(math.log2(sizes[-1]) - math.log2(sizes[0]), 1)
x = lambda n: left + (math.log2(n) - math.log2(sizes[0])) / span * (w - left - right)
y = lambda v: h - bottom - v / top_rate * (h - bottom - top)
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
       f'<rect width="{w}" height="{h}" fill="white"/>',
       f'<text x="{left}" y="18" font-size="14">Tier-0 closes per second: the agent path and direct SQL</text>',
       f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
       f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>']
for n in sizes:
    out.append(f'<text x="{x(n):.0f}" y="{h - bottom + 18}" text-anchor="middle">{n}</text>')
out.append(f'<text x="{(left + w - right) / 2:.0f}" y="{h - 12}" text-anchor="middle">concurrent sessions</text>')
step = 1000 if top_rate > 4000 else 500
v = 0
while v <= top_rate:
    out.append(f'<text x="{left - 8}" y="{y(v) + 4:.0f}" text-anchor="end">{v:,.0f}</text>')
    out.append(f'<line x1="{left}" y1="{y(v):.0f}" x2="{w - right}" y2="{y(v):.0f}" stroke="#ddd"/>')
    v += step
for mode, label, color in (("agent", "toolgate mcp --http", "#c0392b"), ("sql", "direct SQL", "#2c3e50")):
    points = " ".join(f"{x(n):.0f},{y(v):.0f}" for n, v in series[mode])
    out.append(f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="2"/>')
    out += [f'<circle cx="{x(n):.0f}" cy="{y(v):.0f}" r="3" fill="{color}"/>' for n, v in series[mode]]
    ly = top + 20 + (0 if mode == "agent" else 20)
    out.append(f'<line x1="{w - right + 15}" y1="{ly}" x2="{w - right + 35}" y2="{ly}" stroke="{color}" stroke-width="2"/>')
    out.append(f'<text x="{w - right + 40}" y="{ly + 4}">{label}</text>')
out.append("</svg>")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
EOF
{
    cat <<DOC
# The agent's whole path: \`toolgate mcp --http\` against direct SQL

What one agent session costs end to end, and where the MCP server saturates. Written by
\`scripts/bench-agent.sh\` on $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), PostgreSQL $PG_MAJOR,
$(nproc) cores shared by PostgreSQL, the server and the driver; $rounds interleaved rounds of $seconds s, each
figure the median round. A call is a tier-0 \`request_close\` of a fresh order with a fresh key;
the agent path is \`tools/call\` over Streamable HTTP (keep-alive, each session its own bearer token
and conversation), the direct path \`SELECT toolgate.tenant_call(…)\` on a connection of the same
login, which is what the server runs. Every call is checked SUCCEEDED with one effect.

$table

![Calls per second by concurrent sessions, the agent path and direct SQL](benchmarks-agent.svg)

Targets (issue 44): the agent path at 16 sessions ≥ 0.8 × direct SQL; at 64 ≥ 0.9 × the
16-session figure; head-of-line p99 ≤ 2 × unblocked. Head-of-line is met: a call waiting on a lock
holds one connection of the pool, not the server. The ratio to direct SQL is not met at 16: with
the listing reused (\`TOOLGATE_LISTING_TTL\`), an agent call is one statement of the gate as the
direct one is, so what the agent path adds is CPU — the server's own (the last column: HTTP,
JSON-RPC, JSON, the tokio runtime) and the host's (here the driver's HTTP) — and on this machine
every µs of it is taken from PostgreSQL on the same two cores. A server on cores of its own, as
deployed, leaves the database its CPU; the figure here is the worst case.

Where the server's CPU goes, 16 sessions (perf, its process only; by shared object, then by
function, self time):

\`\`\`
$profile
\`\`\`
DOC
} >docs/benchmarks-agent.md
log "wrote docs/benchmarks-agent.md"
