#!/usr/bin/env bash
# The demo: set-up, then seed 000's lab through the SQL API on a throwaway cluster of its own.
# Exits 0 when every invariant holds, non-zero naming the one that broke.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
scripts/setup.sh
# The PostgreSQL setup.sh installed the extension into.
pg_use "$PG_INSTALL_BIN"
toolgate_cli

make_work
throwaway_cluster pg "${TOOLGATE_DEMO_PORT:-54391}"
log "throwaway cluster on 127.0.0.1:$port (socket $work/pg/socket)"
echo
"$TOOLGATE_BIN" demo --host "$work/pg/socket" --port "$port" \
    --keys "$work/keys" --server-log "$work/pg/server.log"
