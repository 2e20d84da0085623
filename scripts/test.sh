#!/usr/bin/env bash
# Every test suite, from a fresh clone: set-up (PostgreSQL 15 to 18), then
#   1. lint (scripts/lint.sh): cargo fmt --check, shellcheck on every script, clippy -D warnings
#   2. unit tests of the pure crates (tokens, contract, digest, consent, policy, untrusted text; CLI;
#      the MCP server; libpq's settings; the fake ERP over HTTP on 127.0.0.1)
# then on each PostgreSQL version (TOOLGATE_PG_VERSIONS, default "15 16 17 18"): steps 3 to 11 on
# 15 and 18 (PG_FULL in scripts/lib.sh), steps 3 to 5 on 16 and 17:
#   3. #[pg_test] tests inside a pgrx-managed PostgreSQL
#   4. pg_regress scenarios (pg_test/), run as toolgate_agent, on a throwaway cluster
#   5. isolation specs (pg_test/isolation/): races between sessions, step by step
#   6. client integration tests (tests/) over real connections
#   7. the MCP evals (scripts/mcp-evals.sh): `toolgate mcp` over stdio and HTTP, driven by the Python MCP
#      SDK as the model and the person, every case three times
#   8. the walkthroughs, extracted from the Markdown and run as written, twice: the README's worked
#      example in psql, then docs/identity.md's Keycloak and Auth0 walkthrough with both providers
#      played locally (scripts/walkthroughs.sh; PostgreSQL 16 and newer, whose psql has \bind)
#   9. the short load with invariants: 32 connections, 2000 calls
#  10. the benchmark's smoke run, so the benchmark cannot rot
#  11. the upgrade test (scripts/upgrade-test.sh): 0.1.0 built and filled, updated through each
#      release to this tree's version and to it at once, its rows, calls and catalogue checked
#      against a fresh install
# and once, on PostgreSQL 15:
#  12. the scale-out suite (scripts/citus.sh): Citus built from its source (../shared/citus) unless
#      installed, a coordinator and two workers, both examples distributed by tenant, the
#      scenarios of pg_test/citus/
#  13. seed 000's five named mutants (scripts/mutants.sh --ci): each removed control must fail a test
#  14. the Debian packages (scripts/package.sh, of the debug builds) as installed (scripts/package-test.sh):
#      lintian, apt-get install, the demo, an update from 0.1.0's package, a clean purge
# Prints each version's time; exits non-zero on the first suite that fails.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
scripts/setup.sh
read -r -a versions <<<"${TOOLGATE_PG_VERSIONS:-$PG_VERSIONS}"
# A run from a fresh clone fills some 25 GiB of build directories (target/): say what is free, so
# that a run stopped by a full disk is recognised as such at once.
free_gb=$(df -Pk "$root" | awk 'NR == 2 { print int($4 / 1048576) }')
log "disk: $free_gb GiB free where the tree is"
[ "$free_gb" -ge 30 ] || log "warning: a run from a fresh clone needs some 25 GiB of build directories (target/); $free_gb GiB are free"
toolgate_cli
make_work

step "1/14 lint (scripts/lint.sh)"
scripts/lint.sh

step "2/14 unit tests (toolgate-core, toolgate-cli, toolgate-mcp, toolgate-pgconn, toolgate-erp-client, toolgate-fake-erp)"
cargo test --quiet -p toolgate-core -p toolgate-cli -p toolgate-mcp -p toolgate-pgconn -p toolgate-erp-client \
    -p toolgate-fake-erp

# suites MAJOR: steps 3 to 11 on PostgreSQL MAJOR (a version of PG_FULL; the others: steps 3 to
# 5), each on its own cluster (its port the first free one from
# TOOLGATE_TEST_PORT), the build installed into that version's install.
suites() {
    local v=$1 started=$SECONDS dir
    pg_version "$v"
    dir=$work/pg$v

    step "3/14 [PostgreSQL $v] #[pg_test] (cargo pgrx test pg$v)"
    mkdir -p "$work/pgrx-data-$v"
    chown postgres: "$work/pgrx-data-$v"
    # The filter keeps the client integration tests (step 6, which need a running server) out.
    cargo pgrx test "pg$v" --runas postgres --pgdata "$work/pgrx-data-$v" "tests::pg_"
    # That installed a build with the test schema in it; put the real one back.
    scripts/install-extension.sh

    step "4/14 [PostgreSQL $v] pg_regress scenarios as toolgate_agent (pg_test/)"
    throwaway_cluster "pg$v" "${TOOLGATE_TEST_PORT:-54401}"
    export TOOLGATE_ROOT="$root" TOOLGATE_KEYS="$work/keys-$v" TOOLGATE_MINT="$root/pg_test/mint"
    mkdir -p "$work/regress-$v"
    if ! "$PG_REGRESS" --bindir="$PGBIN" --host="$dir/socket" --port="$port" --user=postgres \
        --dbname=toolgate_regress --inputdir="$root/pg_test" --outputdir="$work/regress-$v" --schedule="$root/pg_test/schedule"; then
        cat "$work/regress-$v/regression.diffs" >&2 || true
        exit 1
    fi

    step "5/14 [PostgreSQL $v] isolation specs (pg_test/isolation/)"
    TOOLGATE_PG_HOST="$dir/socket" TOOLGATE_PG_PORT="$port" scripts/isolation.sh

    if [[ " $PG_FULL " != *" $v "* ]]; then
        cluster_stop "$dir"
        timings+=("PostgreSQL $v: steps 3-5 in $((SECONDS - started)) s")
        return
    fi

    step "6/14 [PostgreSQL $v] client integration tests (tests/), the observability files (scripts/observability-test.sh)"
    TOOLGATE_TEST_HOST="$dir/socket" TOOLGATE_TEST_PORT="$port" TOOLGATE_TEST_KEYS="$work/keys-it-$v" \
    TOOLGATE_TEST_LOG="$dir/server.log" cargo test --quiet -p pg_toolgate --test '*'
    scripts/observability-test.sh

    step "7/14 [PostgreSQL $v] MCP evals: toolgate mcp over stdio and HTTP, the Python MCP SDK as client (scripts/mcp-evals.sh)"
    scripts/mcp-evals.sh

    if [ "$v" -ge 16 ]; then
        step "8/14 [PostgreSQL $v] the walkthroughs (README, docs/identity.md), as written, twice (scripts/walkthroughs.sh)"
        scripts/walkthroughs.sh
    fi

    step "9/14 [PostgreSQL $v] load with invariants, short (scripts/load.sh)"
    TOOLGATE_PG_HOST="$dir/socket" TOOLGATE_PG_PORT="$port" scripts/load.sh
    # The next version's cluster may take the port; this one is done.
    cluster_stop "$dir"

    step "10/14 [PostgreSQL $v] benchmark smoke runs (scripts/bench.sh, bench-dispatch.sh, bench-agent.sh --smoke, bench-seal.sh 20000)"
    scripts/bench.sh --smoke
    scripts/bench-dispatch.sh --smoke
    scripts/bench-agent.sh --smoke
    scripts/bench-seal.sh 20000

    step "11/14 [PostgreSQL $v] upgrade from 0.1.0 (scripts/upgrade-test.sh)"
    # A private PostgreSQL copy; 0.1.0 in its own target directory (target/upgrade), this tree's
    # build the one the steps above made.
    scripts/upgrade-test.sh "$v"

    timings+=("PostgreSQL $v: steps 3-11 in $((SECONDS - started)) s")

    if [ "$v" = "$PG_DEBIAN" ]; then
        step "12/14 [PostgreSQL $v] the scale-out suite on Citus (scripts/citus.sh)"
        started=$SECONDS
        rc=0
        scripts/citus.sh || rc=$?
        case $rc in
        0) timings+=("Citus (PostgreSQL $v): step 12 in $((SECONDS - started)) s") ;;
        3) timings+=("Citus: NOT RUN, no Citus source and none installed (scripts/citus.sh)") ;;
        *) exit "$rc" ;;
        esac
    fi
}
timings=()
for v in "${versions[@]}"; do suites "$v"; done

step "13/14 named mutants of seed 000: schema, tenant, confirmation, retry, secret in logs (scripts/mutants.sh --ci)"
# Its own target directory and a private PostgreSQL copy: the system's install is not touched.
pg_version "$PG_DEBIAN"
scripts/mutants.sh --ci

step "14/14 the Debian packages as a DBA installs them (scripts/package.sh, scripts/package-test.sh)"
started=$SECONDS
# Packaged from the debug builds the steps above made (PACKAGE_PROFILE=dev: minutes, where the
# release builds take some twenty); the test replaces the system's development install while it
# runs and puts it back after.
PACKAGE_PROFILE=dev scripts/package.sh 15
PACKAGE_PROFILE=dev scripts/package.sh --release 0.1.0 15
scripts/package-test.sh
timings+=("packages: step 14 in $((SECONDS - started)) s")

step "all suites passed"
for t in "${timings[@]}"; do log "$t"; done
