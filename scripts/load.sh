#!/usr/bin/env bash
# Load with invariants (crates/cli/src/load.rs): 32 connections drive a bounded, seeded mix of calls
# through the gate — new keys, repeated keys, keys reused with other arguments, denials, reads,
# proposals, confirmations, declines — then the invariants are checked from the tables. Prints
# the counts and exits non-zero on any violation.
#
#   scripts/load.sh             # the short run (CI): 32 connections, 2000 calls, under a minute
#   scripts/load.sh --long      # the long run: 32 connections, 30000 calls, several minutes
#   TOOLGATE_PG_HOST=SOCKETDIR TOOLGATE_PG_PORT=PORT scripts/load.sh
#                               # on a running cluster with pg_toolgate installed (scripts/test.sh's)
#
# LOAD_CONNECTIONS, LOAD_CALLS and LOAD_SEED change the run's shape.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
make_work
toolgate_cli
calls=2000
[ "${1:-}" = --long ] && calls=30000
use_server "${TOOLGATE_LOAD_PORT:-54431}"

db=toolgate_load
status=0
"$TOOLGATE_BIN" load --host "$host" --port "$port" --dbname "$db" --keys "$work/keys" \
    --connections "${LOAD_CONNECTIONS:-32}" --calls "${LOAD_CALLS:-$calls}" --seed "${LOAD_SEED:-1}" || status=$?
sql "$host" "$port" postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)"
exit "$status"
