#!/usr/bin/env bash
# The demo: set-up, then seed 000's lab through the SQL API on a throwaway cluster of its own,
# then one confirmed write through `toolgate mcp` (the Python MCP SDK as the client, a scripted
# person answering) on another database of that cluster, as a transcript. Exits 0 when every
# invariant holds and the MCP write applied exactly once, non-zero naming what broke.
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

echo
log "the same lab through MCP: one confirmed close through \`toolgate mcp\`"
"$TOOLGATE_BIN" lab --host "$work/pg/socket" --port "$port" --dbname toolgate_mcp_demo --keys "$work/keys"
rc=0
"$root/target/mcp-venv/bin/python" tests/mcp/evals.py --demo --toolgate "$TOOLGATE_BIN" \
    --host "$work/pg/socket" --port "$port" --dbname toolgate_mcp_demo \
    --keys "$work/keys/toolgate_mcp_demo" --work "$work/mcp-demo" || rc=$?
if [ "$rc" != 0 ]; then
    log "the MCP leg failed (exit $rc); the server's last lines of stderr:" >&2
    tail -n 20 "$work/mcp-demo/mcp-server.log" >&2 || true
    exit "$rc"
fi
