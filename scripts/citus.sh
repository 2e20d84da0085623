#!/usr/bin/env bash
# The scale-out suite (docs/scale-out.md): pg_toolgate on a Citus cluster of a coordinator and two
# workers, on loopback, PostgreSQL 15. Builds Citus from its source tarball (TOOLGATE_CITUS_SRC,
# default ../shared/citus beside the repository: citus-13.2.2.tar.gz and pg15.20-compat.patch)
# into target/citus and installs it into PostgreSQL 15, unless that Citus is installed already;
# starts the three nodes, creates the database on each with Citus, registers the workers, creates
# pg_toolgate on the coordinator (Citus creates it on the workers), then runs the scenarios of
# pg_test/citus/ with pg_regress: both examples distributed by tenant (citus_setup), the lab
# through the tenant-routed entry points and where each call ran (citus_lab), seed 001's refunds
# (citus_refunds), key revocation, issuer key rotation and the kill switch reaching the workers'
# backends (citus_config), a careless bound function kept in its tenant by row-level security on
# a worker (citus_rls).
#
#   scripts/citus.sh            the suite (the extension must be installed: scripts/install-extension.sh)
#   scripts/citus.sh --build    only build and install Citus
#
# Without the source and without Citus installed, the suite says so and stops (exit 3), so the
# test command can name it as not run instead of failing for want of a file outside the project.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
pg_version 15

citus_version=13.2.2
citus_sha256=dd2453caec20a830e5e63f1def5c5a98cb6f57ae510407cdcd800916fcdab430
src=${TOOLGATE_CITUS_SRC:-$root/../shared/citus}

# citus_installed: this Citus's library and control file are in PostgreSQL 15's install.
citus_installed() {
    [ -f "$PG_PKGLIBDIR/citus.so" ] &&
        grep -q "^default_version = '13.2-1'" "$("$PG_CONFIG" --sharedir)/extension/citus.control" 2>/dev/null
}

citus_build() {
    local tarball=$src/citus-$citus_version.tar.gz build=$root/target/citus started=$SECONDS
    if [ ! -f "$tarball" ]; then
        return 3
    fi
    echo "$citus_sha256  $tarball" | sha256sum -c --quiet - || { log "$tarball: not the expected file"; exit 2; }
    log "building Citus $citus_version into target/citus (about a minute)"
    rm -rf "$build"
    mkdir -p "$build"
    tar -xzf "$tarball" -C "$build"
    (
        cd "$build/citus-$citus_version"
        patch -p1 -s <"$src/pg15.20-compat.patch"
        ./configure --without-libcurl PG_CONFIG="$PG_CONFIG" >"$build/configure.log"
        make -j"$(nproc)" >"$build/make.log" 2>&1
        make install >"$build/install.log" 2>&1
    ) || { log "building Citus failed: target/citus/*.log"; exit 1; }
    log "Citus $citus_version built and installed in $((SECONDS - started)) s"
}

if ! citus_installed || [ "${1:-}" = --build ]; then
    rc=0
    citus_build || rc=$?
    if [ "$rc" = 3 ]; then
        log "no Citus source at $src (citus-$citus_version.tar.gz) and Citus $citus_version not installed:" \
            "the scale-out suite was not run (set TOOLGATE_CITUS_SRC)"
        exit 3
    fi
fi
[ "${1:-}" = --build ] && exit 0

make_work
toolgate_cli
# Two-phase commits are kept in pg_dist_transaction until recovery: off here, so that
# citus_lab can count them.
export CLUSTER_CONF="shared_preload_libraries = 'citus'
max_prepared_transactions = 100
citus.recover_2pc_interval = -1"
db=toolgate_citus
nodes=(coordinator worker1 worker2)
declare -A node_port
p=${TOOLGATE_CITUS_PORT:-54601}
for n in "${nodes[@]}"; do
    throwaway_cluster "$n" "$p"
    node_port[$n]=$port
    p=$((port + 1))
    sql "$work/$n/socket" "$port" postgres -c "CREATE DATABASE $db"
    sql "$work/$n/socket" "$port" "$db" -c "CREATE EXTENSION citus"
done
coordinator=$work/coordinator/socket cport=${node_port[coordinator]}
sql "$coordinator" "$cport" "$db" \
    -c "SELECT citus_set_coordinator_host('127.0.0.1', $cport)" \
    -c "SELECT citus_add_node('127.0.0.1', ${node_port[worker1]})" \
    -c "SELECT citus_add_node('127.0.0.1', ${node_port[worker2]})" >/dev/null
log "coordinator on 127.0.0.1:$cport, workers on ${node_port[worker1]} and ${node_port[worker2]}"

step "Citus scenarios (pg_test/citus/)"
export TOOLGATE_ROOT="$root" TOOLGATE_KEYS="$work/keys" TOOLGATE_MINT="$root/pg_test/mint"
mkdir -p "$work/regress" "$TOOLGATE_KEYS"
if ! "$PG_REGRESS" --bindir="$PGBIN" --host="$coordinator" --port="$cport" --user=postgres --use-existing \
    --dbname="$db" --inputdir="$root/pg_test/citus" --outputdir="$work/regress" \
    --schedule="$root/pg_test/citus/schedule"; then
    cat "$work/regress/regression.diffs" >&2 || true
    exit 1
fi
