#!/usr/bin/env bash
# Every test suite, from a fresh clone: set-up, then
#   1. lint (scripts/lint.sh): cargo fmt --check, shellcheck on every script, clippy -D warnings
#   2. unit tests of the pure crates (tokens, contract, digest, consent, policy, untrusted text; CLI)
#   3. #[pg_test] tests inside a pgrx-managed PostgreSQL 15
#   4. pg_regress scenarios (pg_test/), run as toolgate_agent, on a throwaway cluster
#   5. isolation specs (pg_test/isolation/): races between sessions, step by step
#   6. client integration tests (tests/) over real connections
#   7. the short load with invariants: 32 connections, 2000 calls
#   8. the benchmark's smoke run, so the benchmark cannot rot
#   9. seed 000's five named mutants (scripts/mutants.sh --ci): each removed control must fail a test
# Exits non-zero on the first suite that fails.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
scripts/setup.sh
# The PostgreSQL setup.sh installed the extension into.
pg_use "$PG_SYSTEM_BIN"
toolgate_cli
make_work

step "1/9 lint (scripts/lint.sh)"
scripts/lint.sh

step "2/9 unit tests (toolgate-core, toolgate-cli)"
cargo test --quiet -p toolgate-core -p toolgate-cli

step "3/9 #[pg_test] (cargo pgrx test pg$PG_MAJOR)"
mkdir -p "$work/pgrx-data"
chown postgres: "$work/pgrx-data"
# The filter keeps the client integration tests (step 6, which need a running server) out.
cargo pgrx test "pg$PG_MAJOR" --runas postgres --pgdata "$work/pgrx-data" "tests::pg_"
# That installed a build with the test schema in it; put the real one back.
scripts/install-extension.sh

step "4/9 pg_regress scenarios as toolgate_agent (pg_test/)"
throwaway_cluster pg "${TOOLGATE_TEST_PORT:-54401}"
export TOOLGATE_ROOT="$root" TOOLGATE_KEYS="$work/keys" TOOLGATE_MINT="$root/pg_test/mint"
mkdir -p "$work/regress"
if ! "$PG_REGRESS" --bindir="$PGBIN" --host="$work/pg/socket" --port="$port" --user=postgres \
    --dbname=toolgate_regress --inputdir="$root/pg_test" --outputdir="$work/regress" --schedule="$root/pg_test/schedule"; then
    cat "$work/regress/regression.diffs" >&2 || true
    exit 1
fi

step "5/9 isolation specs (pg_test/isolation/)"
TOOLGATE_PG_HOST="$work/pg/socket" TOOLGATE_PG_PORT="$port" scripts/isolation.sh

step "6/9 client integration tests (tests/)"
TOOLGATE_TEST_HOST="$work/pg/socket" TOOLGATE_TEST_PORT="$port" TOOLGATE_TEST_KEYS="$work/keys-it" \
TOOLGATE_TEST_LOG="$work/pg/server.log" cargo test --quiet -p pg_toolgate --test '*'

step "7/9 load with invariants, short (scripts/load.sh)"
TOOLGATE_PG_HOST="$work/pg/socket" TOOLGATE_PG_PORT="$port" scripts/load.sh

step "8/9 benchmark smoke run (scripts/bench.sh --smoke)"
scripts/bench.sh --smoke

step "9/9 named mutants of seed 000: schema, tenant, confirmation, retry, secret in logs (scripts/mutants.sh --ci)"
# Its own target directory and a private PostgreSQL copy: the system's install is not touched.
scripts/mutants.sh --ci

step "all suites passed"
