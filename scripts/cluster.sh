#!/usr/bin/env bash
# A throwaway PostgreSQL 15 cluster of the project's own: its own data directory, its own port on
# loopback, its own socket directory, run as the `postgres` user. Never touches another cluster.
#
#   scripts/cluster.sh start DIR PORT   # initdb (if needed) and start; prints nothing on success
#   scripts/cluster.sh stop DIR         # stop it (fast)
#   scripts/cluster.sh psql DIR PORT …  # psql as the superuser `postgres`
#   scripts/cluster.sh port FIRST       # the first free loopback port from FIRST on
#
# PGBIN picks other PostgreSQL 15 binaries (scripts/private-pg.sh); CLUSTER_CONF holds extra
# postgresql.conf lines for a new cluster (later lines win: `fsync = on` undoes the default).
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

as_postgres() {
    if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi
}

cmd=${1:?usage: cluster.sh start|stop|psql|port …}

if [ "$cmd" = port ]; then
    p=${2:?first port}
    while (: </dev/tcp/127.0.0.1/"$p") 2>/dev/null; do p=$((p + 1)); done
    echo "$p"
    exit 0
fi

dir=${2:?data directory}

case "$cmd" in
start)
    port=${3:?port}
    mkdir -p "$dir"
    chown postgres: "$dir"
    chmod 700 "$dir"
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_postgres "$PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust --no-instructions \
            --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log"
        mkdir -p "$dir/socket"
        chown postgres: "$dir/socket"
        cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/socket'
logging_collector = off
log_min_messages = log
log_line_prefix = '%m [%p] %u@%d '
max_connections = 200
fsync = off
synchronous_commit = on
${CLUSTER_CONF:-}
CONF
    fi
    # A Rust backtrace in an error DETAIL would reach clients: the server runs without one.
    as_postgres env -u RUST_BACKTRACE "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null
    ;;
stop)
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_postgres "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    fi
    ;;
psql)
    port=${3:?port}
    shift 3
    psql -X -h "$dir/socket" -p "$port" -U postgres "$@"
    ;;
*)
    echo "unknown command $cmd" >&2
    exit 2
    ;;
esac
