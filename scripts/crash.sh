#!/usr/bin/env bash
# Crashes under load. While 32 connections drive the load mix (crates/cli/src/load.rs, --crash),
# backends are killed — pg_terminate_backend on calls waiting on a row lock that is held on
# purpose and on calls in flight, kill -9 on calls in flight (the postmaster then restarts every
# backend and recovers) — and the whole server is stopped with `pg_ctl stop -m immediate` and
# started again. Afterwards the load asks the server which lost calls committed, retries every
# call whose reply was lost with its key, and checks the invariants. Exits non-zero on any
# violation. Always on a throwaway cluster of its own (it stops the server), with fsync on.
#
#   scripts/crash.sh                    # 90 s of load and crashes, about two minutes in all
#   CRASH_SECONDS=300 scripts/crash.sh  # longer
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
make_work
toolgate_cli
seconds=${CRASH_SECONDS:-90}
throwaway_cluster pg "${TOOLGATE_CRASH_PORT:-54441}"
dir=$work/pg host=$work/pg/socket db=toolgate_crash
# A crash must find on disk what was acknowledged: fsync as in production.
sql "$host" "$port" postgres -c "ALTER SYSTEM SET fsync = on" -c "SELECT pg_reload_conf()" >/dev/null

"$TOOLGATE_BIN" load --host "$host" --port "$port" --dbname "$db" --keys "$work/keys" --crash \
    --connections 32 --calls 1000000 --duration "$seconds" --seed "${LOAD_SEED:-1}" &
load=$!

q() { sql "$host" "$port" "$db" -c "$1" 2>/dev/null || true; }
up() { as_postgres "$PGBIN/pg_isready" -q -h "$host" -p "$port"; }
wait_up() { for _ in $(seq 1 240); do up && return 0; sleep 0.25; done; log "the server did not come back" >&2; return 1; }
app="datname = '$db' AND usename = 'toolgate_app' AND state = 'active' AND pid <> pg_backend_pid()"

# Chaos starts once the load is running.
until [ "$(q "SELECT count(*) > 0 FROM toolgate.audit")" = t ]; do
    kill -0 "$load" 2>/dev/null || { wait "$load"; exit $?; }
    sleep 0.5
done
chaos_until=$(($(date +%s) + seconds - 15))
term_waiting=0 kill_waiting=0 term_flight=0 kill_flight=0 stops=0 round=0
# hold: lock every shopping-b cost centre for 1.5 s, so purchases queue on the rows.
hold() { q "BEGIN; SELECT 1 FROM maintenance.cost_centers WHERE tenant_id = 'shopping-b' FOR UPDATE;
            SELECT pg_sleep(1.5); COMMIT" >/dev/null & holder=$!; sleep 1; }
victim() { q "SELECT pid FROM pg_stat_activity WHERE $app $1 ORDER BY random() LIMIT 1"; }
while [ "$(date +%s)" -lt "$chaos_until" ]; do
    round=$((round + 1))
    case $((round % 6)) in
    0)
        hold
        n=$(q "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity
               WHERE $app AND wait_event_type = 'Lock' ORDER BY random() LIMIT 2) v")
        term_waiting=$((term_waiting + ${n:-0}))
        wait "$holder" || true
        ;;
    1 | 4)
        n=$(q "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity
               WHERE $app ORDER BY random() LIMIT 2) v")
        term_flight=$((term_flight + ${n:-0}))
        ;;
    2)
        # kill -9: the postmaster ends every backend, recovers, and takes connections again.
        pid=$(victim "")
        if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then kill_flight=$((kill_flight + 1)); fi
        sleep 1
        wait_up
        ;;
    3)
        hold
        pid=$(victim "AND wait_event_type = 'Lock'")
        if [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; then kill_waiting=$((kill_waiting + 1)); fi
        wait "$holder" || true
        sleep 1
        wait_up
        ;;
    5)
        as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null
        stops=$((stops + 1))
        sleep 2
        cluster_start "$dir" "$port"
        ;;
    esac
    sleep 1
done
wait_up
status=0
wait "$load" || status=$?
recovered=$(grep -c "automatic recovery in progress" "$dir/server.log" || true)
log "$((term_waiting + kill_waiting + term_flight + kill_flight)) backends killed" \
     "(waiting on a lock: $term_waiting pg_terminate_backend, $kill_waiting kill -9;" \
     "in flight: $term_flight pg_terminate_backend, $kill_flight kill -9), $stops immediate stops," \
     "$recovered crash recoveries in the server log; load exit $status"
exit "$status"
