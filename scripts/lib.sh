# shellcheck shell=bash
# The one harness every script sources: `source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"`.
# Sourcing it only sets `set -euo pipefail`, $root (the repository), PATH (cargo's bin directory)
# and the PostgreSQL paths, and defines the functions below; it changes no directory, makes no
# file and sets no trap, so commands such as cluster.sh and private-pg.sh keep their callers'
# working directory. A script calls what it needs:
#
#   log / step            a line or a heading, named after the script ($script); to stdout, or to
#                         stderr in a script that sets log_fd=2 (its stdout is a report)
#   pg_use BINDIR         use the PostgreSQL whose programs are in BINDIR (sets PGBIN and the rest)
#   private_pg DIR        a private relocated copy of the system's PostgreSQL under DIR, then used
#   as_postgres CMD…      run CMD as the `postgres` user
#   free_port, cluster_start, cluster_stop, cluster_psql
#                         a throwaway cluster of the project's own (scripts/cluster.sh's commands)
#   make_work, use_work DIR
#                         a work directory, removed at exit with the clusters started in it
#   throwaway_cluster, use_server, sql, toolgate_cli
#                         what the test scripts share (see each function)
#
# Environment: PGBIN (another PostgreSQL's programs, e.g. a private copy), TOOLGATE_TMP (where
# work directories go, default /tmp), TOOLGATE_KEEP=1 (keep the work directory), TOOLGATE_BIN
# (the `toolgate` command to use instead of building it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
script=$(basename "$0" .sh)
log_fd=1

# log MESSAGE…: one line, named after the script.
log() { printf '%s: %s\n' "$script" "$*" >&"$log_fd"; }
# step MESSAGE…: the heading of one stage of a long script.
step() { printf '\n== %s: %s\n' "$script" "$*" >&"$log_fd"; }

# PostgreSQL, Debian's layout: every path below derives from these two lines, so another major
# version changes PG_MAJOR alone.
PG_MAJOR=15
PG_PREFIX=/usr

# pg_dir PREFIX KIND: the PG_MAJOR directory of KIND (lib, share, include) under PREFIX.
pg_dir() { printf '%s/%s/postgresql/%s\n' "$1" "$2" "$PG_MAJOR"; }
PG_SYSTEM_BIN=$(pg_dir "$PG_PREFIX" lib)/bin

# pg_use BINDIR: PGBIN (exported, so cluster.sh and the scripts this one runs use it too), and
# what derives from it: PG_CONFIG, PG_PKGLIBDIR, PG_REGRESS, PG_ISOLATION_REGRESS.
# The scripts that source this file read what it sets (their own check sees that):
# shellcheck disable=SC2034
pg_use() {
    export PGBIN=$1
    PG_CONFIG=$PGBIN/pg_config
    # Debian keeps pg_config --pkglibdir beside bin/; a private copy keeps that layout.
    PG_PKGLIBDIR=$(dirname "$PGBIN")/lib
    PG_REGRESS=$PG_PKGLIBDIR/pgxs/src/test/regress/pg_regress
    PG_ISOLATION_REGRESS=$PG_PKGLIBDIR/pgxs/src/test/isolation/pg_isolation_regress
}
pg_use "${PGBIN:-$PG_SYSTEM_BIN}"

# private_pg DIR: a private, relocated copy of the system's PostgreSQL under DIR (made once), so
# a build of pg_toolgate can be installed into it without touching the system's extension
# directory (PostgreSQL finds its share and lib directories relative to its programs); then
# pg_use it. Headers are only read (by pgrx's bindgen): they are linked, not copied.
private_pg() {
    local dir kind
    dir=$(realpath -m "$1")
    if [ ! -x "$(pg_dir "$dir" lib)/bin/postgres" ]; then
        for kind in lib share include; do mkdir -p "$(dirname "$(pg_dir "$dir" "$kind")")"; done
        for kind in lib share; do
            cp -a "$(pg_dir "$PG_PREFIX" "$kind")" "$(dirname "$(pg_dir "$dir" "$kind")")/"
        done
        ln -sfn "$(pg_dir "$PG_PREFIX" include)" "$(pg_dir "$dir" include)"
        chmod -R a+rX "$dir"
    fi
    pg_use "$(pg_dir "$dir" lib)/bin"
}

as_postgres() {
    if [ "$(id -un)" = postgres ]; then "$@"; else runuser -u postgres -- "$@"; fi
}

# free_port FIRST: the first free loopback port from FIRST on.
free_port() {
    local p=$1
    while (: </dev/tcp/127.0.0.1/"$p") 2>/dev/null; do p=$((p + 1)); done
    echo "$p"
}

# cluster_start DIR PORT: initdb (if needed) and start a cluster in DIR: its own data directory,
# PORT on loopback, its own socket directory DIR/socket, run as `postgres`; prints nothing on
# success. CLUSTER_CONF holds extra postgresql.conf lines for a new cluster (later lines win:
# `fsync = on` undoes the default).
cluster_start() {
    local dir=$1 port=$2
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
}

# cluster_stop DIR: stop it (fast), if it runs.
cluster_stop() {
    if [ -f "$1/data/postmaster.pid" ]; then
        as_postgres "$PGBIN/pg_ctl" -D "$1/data" -m fast -w stop >/dev/null
    fi
}

# cluster_psql DIR PORT ARGS…: psql as the superuser `postgres`.
cluster_psql() {
    local dir=$1 port=$2
    shift 2
    "$PGBIN/psql" -X -h "$dir/socket" -p "$port" -U postgres "$@"
}

# make_work: $work, a new work directory in TOOLGATE_TMP (default /tmp), removed at exit unless
# TOOLGATE_KEEP is set. use_work DIR: DIR as $work, kept. Either way the postgres user can reach
# its cluster directories inside, and at exit (work_cleanup) every cluster in $clusters is
# stopped. A script with more to undo at exit sets `trap 'its_own; work_cleanup' EXIT` after.
clusters=()
make_work() {
    work=$(mktemp -d "${TOOLGATE_TMP:-/tmp}/pg_toolgate-$script.XXXXXX") work_kept=${TOOLGATE_KEEP:+1}
    work_ready
}
use_work() {
    work=$1 work_kept=1
    mkdir -p "$work"
    work_ready
}
work_ready() {
    chmod 711 "$work"
    trap work_cleanup EXIT
}
work_cleanup() {
    local dir
    for dir in "${clusters[@]}"; do cluster_stop "$dir" >/dev/null 2>&1 || true; done
    if [ -z "$work_kept" ]; then
        rm -rf "$work"
    elif [ -n "${TOOLGATE_KEEP:-}" ]; then
        log "kept $work"
    fi
}

# throwaway_cluster NAME FIRST_PORT: a cluster in $work/NAME on the first free loopback port from
# FIRST_PORT, stopped at exit; sets $port.
throwaway_cluster() {
    port=$(free_port "$2")
    clusters+=("$work/$1")
    cluster_start "$work/$1" "$port"
}

# use_server FIRST_PORT: the running cluster TOOLGATE_PG_HOST (socket directory) and
# TOOLGATE_PG_PORT name, or a throwaway one; sets $host and $port.
# The scripts that call it read $host (their own check sees that):
# shellcheck disable=SC2034
use_server() {
    if [ -n "${TOOLGATE_PG_HOST:-}" ]; then
        host=$TOOLGATE_PG_HOST port=${TOOLGATE_PG_PORT:?TOOLGATE_PG_PORT goes with TOOLGATE_PG_HOST}
    else
        throwaway_cluster pg "$1"
        host=$work/pg/socket
    fi
}

# sql HOST PORT DB ARGS…: psql as the superuser, quiet, unaligned, stopping at the first error.
sql() {
    local h=$1 p=$2 d=$3
    shift 3
    PGOPTIONS='-c client_min_messages=warning' "$PGBIN/psql" -X -q -At -h "$h" -p "$p" -U postgres -d "$d" -v ON_ERROR_STOP=1 "$@"
}

# toolgate_cli: TOOLGATE_BIN (exported), the `toolgate` command: the one it names, or built now.
toolgate_cli() {
    if [ -z "${TOOLGATE_BIN:-}" ]; then
        (cd "$root" && cargo build --quiet -p toolgate-cli)
        TOOLGATE_BIN=${CARGO_TARGET_DIR:-$root/target}/debug/toolgate
    fi
    export TOOLGATE_BIN
}
