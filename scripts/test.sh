#!/usr/bin/env bash
# Every test suite, from a fresh clone: set-up, then
#   1. unit tests of the pure crates (tokens, contract, digest, consent, policy, untrusted text; CLI)
#   2. #[pg_test] tests inside a pgrx-managed PostgreSQL 15
#   3. pg_regress scenarios (pg_test/), run as toolgate_agent, on a throwaway cluster
#   4. isolation specs (pg_test/isolation/): races between sessions, step by step
#   5. client integration tests (tests/) over real connections
#   6. the short load with invariants: 32 connections, 2000 calls
#   7. the benchmark's smoke run, so the benchmark cannot rot
#   8. seed 000's five named mutants (scripts/mutants.sh --ci): each removed control must fail a test
# Exits non-zero on the first suite that fails.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
scripts/setup.sh
# The PostgreSQL setup.sh installed the extension into.
pg_use "$PG_SYSTEM_BIN"
toolgate_cli
make_work

step "1/8 unit tests (toolgate-core, toolgate-cli)"
cargo test --quiet -p toolgate-core -p toolgate-cli

step "2/8 #[pg_test] (cargo pgrx test pg$PG_MAJOR)"
mkdir -p "$work/pgrx-data"
chown postgres: "$work/pgrx-data"
# The filter keeps the client integration tests (step 4, which need a running server) out.
cargo pgrx test "pg$PG_MAJOR" --runas postgres --pgdata "$work/pgrx-data" "tests::pg_"
# That installed a build with the test schema in it; put the real one back.
scripts/install-extension.sh

step "3/8 pg_regress scenarios as toolgate_agent (pg_test/)"
throwaway_cluster pg "${TOOLGATE_TEST_PORT:-54401}"
export TOOLGATE_ROOT="$root" TOOLGATE_KEYS="$work/keys" TOOLGATE_MINT="$root/pg_test/mint"
mkdir -p "$work/regress"
if ! "$PG_REGRESS" --bindir="$PGBIN" --host="$work/pg/socket" --port="$port" --user=postgres \
    --dbname=toolgate_regress --inputdir="$root/pg_test" --outputdir="$work/regress" --schedule="$root/pg_test/schedule"; then
    cat "$work/regress/regression.diffs" >&2 || true
    exit 1
fi

step "4/8 isolation specs (pg_test/isolation/)"
TOOLGATE_PG_HOST="$work/pg/socket" TOOLGATE_PG_PORT="$port" scripts/isolation.sh

step "5/8 client integration tests (tests/)"
TOOLGATE_TEST_HOST="$work/pg/socket" TOOLGATE_TEST_PORT="$port" TOOLGATE_TEST_KEYS="$work/keys-it" \
TOOLGATE_TEST_LOG="$work/pg/server.log" cargo test --quiet -p pg_toolgate --test '*'

step "6/8 load with invariants, short (scripts/load.sh)"
TOOLGATE_PG_HOST="$work/pg/socket" TOOLGATE_PG_PORT="$port" scripts/load.sh

step "7/8 benchmark smoke run (scripts/bench.sh --smoke)"
scripts/bench.sh --smoke

step "8/8 named mutants of seed 000: schema, tenant, confirmation, retry, secret in logs (scripts/mutants.sh --ci)"
# Its own target directory and a private PostgreSQL copy: the system's install is not touched.
scripts/mutants.sh --ci

step "all suites passed"
