#!/usr/bin/env bash
# A throwaway PostgreSQL cluster (TOOLGATE_PG: 15 to 18) of the project's own: its own data directory, its own port on
# loopback, its own socket directory, run as the `postgres` user. Never touches another cluster.
#
#   scripts/cluster.sh start DIR PORT   # initdb (if needed) and start; prints nothing on success
#   scripts/cluster.sh stop DIR         # stop it (fast)
#   scripts/cluster.sh psql DIR PORT …  # psql as the superuser `postgres`
#   scripts/cluster.sh port FIRST       # the first free loopback port from FIRST on
#
# PGBIN picks other binaries of that version (scripts/private-pg.sh); CLUSTER_CONF holds extra
# postgresql.conf lines for a new cluster (later lines win: `fsync = on` undoes the default).
# The commands are the harness's functions (scripts/lib.sh), which the other scripts call directly.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmd=${1:?usage: cluster.sh start|stop|psql|port …}
case "$cmd" in
port) free_port "${2:?first port}" ;;
start) cluster_start "${2:?data directory}" "${3:?port}" ;;
stop) cluster_stop "${2:?data directory}" ;;
psql)
    dir=${2:?data directory} port=${3:?port}
    shift 3
    cluster_psql "$dir" "$port" "$@"
    ;;
*)
    log "unknown command $cmd" >&2
    exit 2
    ;;
esac
