# Sourced by scripts/isolation.sh, load.sh, crash.sh and failover.sh: the repository as working
# directory, a work directory deleted on exit (kept with TOOLGATE_KEEP=1), the `toolgate` command
# (TOOLGATE_BIN, or built now), and throwaway clusters stopped on exit. Needs what
# scripts/setup.sh installs. TOOLGATE_TMP moves the work directory (default /tmp).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"
root=$(pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
harness=$(basename "$0" .sh)

work=$(mktemp -d "${TOOLGATE_TMP:-/tmp}/pg_toolgate-$harness.XXXXXX")
chmod 711 "$work"  # the postgres user reaches its cluster directories inside
clusters=()
harness_cleanup() {
    local dir
    for dir in "${clusters[@]}"; do scripts/cluster.sh stop "$dir" >/dev/null 2>&1 || true; done
    if [ -n "${TOOLGATE_KEEP:-}" ]; then echo "$harness: kept $work"; else rm -rf "$work"; fi
}
trap harness_cleanup EXIT

if [ -z "${TOOLGATE_BIN:-}" ]; then
    cargo build --quiet -p toolgate-cli
    TOOLGATE_BIN="${CARGO_TARGET_DIR:-$root/target}/debug/toolgate"
fi

as_postgres() { runuser -u postgres -- "$@"; }

# start_cluster NAME FIRST_PORT: a throwaway cluster in $work/NAME on the first free loopback port
# from FIRST_PORT; sets $port.
start_cluster() {
    port=$(scripts/cluster.sh port "$2")
    clusters+=("$work/$1")
    scripts/cluster.sh start "$work/$1" "$port"
}

# use_server FIRST_PORT: the running cluster TOOLGATE_PG_HOST (socket directory) and
# TOOLGATE_PG_PORT name, or a throwaway one; sets $host and $port.
use_server() {
    if [ -n "${TOOLGATE_PG_HOST:-}" ]; then
        host=$TOOLGATE_PG_HOST port=${TOOLGATE_PG_PORT:?TOOLGATE_PG_PORT goes with TOOLGATE_PG_HOST}
    else
        start_cluster pg "$1"
        host=$work/pg/socket
    fi
}

# sql HOST PORT DB SQL…: psql as the superuser, quiet, stopping at the first error.
sql() {
    local h=$1 p=$2 d=$3
    shift 3
    PGOPTIONS='-c client_min_messages=warning' psql -X -q -At -h "$h" -p "$p" -U postgres -d "$d" -v ON_ERROR_STOP=1 "$@"
}
