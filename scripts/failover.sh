#!/usr/bin/env bash
# Failover. A primary and a streaming standby made with pg_basebackup, replicating synchronously
# over loopback (a commit is acknowledged once the standby has it). 32 connections drive the load
# mix on the primary (crates/cli/src/load.rs) and write a journal of every call; mid-run the
# primary is stopped with `pg_ctl stop -m immediate`, so calls in flight lose their replies. The
# standby is promoted, and every write and confirmation of the journal is retried with its key on
# the new primary: what the old primary acknowledged must replay, nothing may take effect twice,
# and the invariants must hold against both halves. Exits non-zero on any violation. Always on
# throwaway clusters of its own, with fsync on.
#
#   scripts/failover.sh                     # about a minute and a half
#   FAILOVER_SECONDS=120 scripts/failover.sh
#   FAILOVER_ASYNC=1 scripts/failover.sh    # the control removed: asynchronous replication and the
#                                           # standby cut off mid-run; the run must fail (exit 1)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
make_work
toolgate_cli
seconds=${FAILOVER_SECONDS:-40}
db=toolgate_failover

throwaway_cluster primary "${TOOLGATE_FAILOVER_PORT:-54451}"
primary_port=$port primary=$work/primary
sql "$primary/socket" "$primary_port" postgres -c "ALTER SYSTEM SET fsync = on" -c "SELECT pg_reload_conf()" >/dev/null

# The standby: a base backup over loopback, configured to stream from the primary as standby1.
standby=$work/standby
standby_port=$(free_port $((primary_port + 1)))
mkdir -p "$standby/socket"
chown postgres: "$standby" "$standby/socket"
chmod 700 "$standby"
as_postgres "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres -D "$standby/data" -R -X stream -c fast
cat >>"$standby/data/postgresql.auto.conf" <<CONF
port = $standby_port
unix_socket_directories = '$standby/socket'
primary_conninfo = 'host=127.0.0.1 port=$primary_port user=postgres application_name=standby1'
CONF
clusters+=("$standby")
cluster_start "$standby" "$standby_port"

# Synchronous from now on (set after the backup, so the standby does not wait for a standby).
want=sync
if [ -n "${FAILOVER_ASYNC:-}" ]; then
    want=async
else
    sql "$primary/socket" "$primary_port" postgres \
        -c "ALTER SYSTEM SET synchronous_standby_names = 'standby1'" -c "SELECT pg_reload_conf()" >/dev/null
fi
for _ in $(seq 1 120); do
    state=$(sql "$primary/socket" "$primary_port" postgres -c \
        "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'")
    [ "$state" = "$want" ] && break
    sleep 0.5
done
[ "$state" = "$want" ] || { log "the standby never streamed ($want)" >&2; exit 1; }
log "primary 127.0.0.1:$primary_port, standby 127.0.0.1:$standby_port streaming ($state)"

# The first half: load on the primary, journal of every call, the primary lost mid-run.
"$TOOLGATE_BIN" load --host "$primary/socket" --port "$primary_port" --dbname "$db" --keys "$work/keys" --crash \
    --connections 32 --calls 1000000 --duration "$seconds" --seed "${LOAD_SEED:-1}" --journal "$work/journal" &
load=$!
until [ "$(sql "$primary/socket" "$primary_port" "$db" -c "SELECT count(*) > 0 FROM toolgate.audit" 2>/dev/null)" = t ]; do
    kill -0 "$load" 2>/dev/null || { wait "$load"; exit $?; }
    sleep 0.5
done
if [ -n "${FAILOVER_ASYNC:-}" ]; then
    sleep $((seconds / 3))
    # The standby loses its primary; asynchronous commits go on without it.
    sql "$standby/socket" "$standby_port" postgres -c "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=1'" \
        -c "SELECT pg_reload_conf()" >/dev/null
    log "standby cut off from the primary (FAILOVER_ASYNC)"
    sleep $((seconds / 3))
else
    sleep $((seconds * 2 / 3))
fi
committed=$(sql "$primary/socket" "$primary_port" "$db" -c "SELECT count(*) FROM toolgate.audit")
as_postgres "$PGBIN/pg_ctl" -D "$primary/data" -m immediate -w stop >/dev/null
log "primary stopped (immediate) under load, about $committed calls committed on it"
wait "$load"

# The second half: promote the standby, retry everything on it.
as_postgres "$PGBIN/pg_ctl" -D "$standby/data" -w promote >/dev/null
[ "$(sql "$standby/socket" "$standby_port" postgres -c "SELECT pg_is_in_recovery()")" = f ]
log "standby promoted"
"$TOOLGATE_BIN" load --host "$standby/socket" --port "$standby_port" --dbname "$db" --keys "$work/keys" \
    --connections 8 --retry-journal "$work/journal"
