#!/usr/bin/env bash
# The isolation specs (pg_test/isolation/): races between real sessions, interleaved step by step
# by PostgreSQL's isolationtester, each permutation compared with its expected output. Exits
# non-zero when a permutation's output differs (the diff is printed).
#
#   scripts/isolation.sh        # on a throwaway cluster of its own
#   TOOLGATE_PG_HOST=SOCKETDIR TOOLGATE_PG_PORT=PORT scripts/isolation.sh
#                               # on a running cluster with pg_toolgate installed (scripts/test.sh's)
#
# Keys and tokens are made fresh for the run (pg_test/isolation/harness.sql).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
make_work
toolgate_cli
use_server "${TOOLGATE_ISOLATION_PORT:-54421}"

db=toolgate_isolation
started=$(date +%s)
sql "$host" "$port" postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
# pg_test/mint makes keys and tokens with the toolgate command; private keys stay in $work.
TOOLGATE_ROOT="$root" TOOLGATE_KEYS="$work/keys" TOOLGATE_MINT="$root/pg_test/mint" \
    sql "$host" "$port" "$db" -f pg_test/isolation/harness.sql >"$work/harness.log"

if ! "$PG_ISOLATION_REGRESS" --bindir="$PGBIN" --host="$host" --port="$port" --user=postgres --use-existing \
    --dbname="$db" --inputdir="$root/pg_test/isolation" --outputdir="$work/out" \
    --schedule="$root/pg_test/isolation/schedule"; then
    cat "$work/out/regression.diffs" >&2 || true
    exit 1
fi
sql "$host" "$port" postgres -c "DROP DATABASE $db WITH (FORCE)"
log "all specs passed in $(($(date +%s) - started)) s"
