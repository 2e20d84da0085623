#!/usr/bin/env bash
# The demo: set-up, then seed 000's lab through the SQL API on a throwaway cluster of its own.
# Exits 0 when every invariant holds, non-zero naming the one that broke.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

work=$(mktemp -d /tmp/pg_toolgate-demo.XXXXXX)
chmod 711 "$work"  # the postgres user reaches its cluster directory inside
cleanup() { scripts/cluster.sh stop "$work/pg" || true; rm -rf "$work"; }
trap cleanup EXIT
port=$(scripts/cluster.sh port "${TOOLGATE_DEMO_PORT:-54391}")
scripts/cluster.sh start "$work/pg" "$port"
echo "demo: throwaway cluster on 127.0.0.1:$port (socket $work/pg/socket)"
echo
target/debug/toolgate demo --host "$work/pg/socket" --port "$port" \
    --keys "$work/keys" --server-log "$work/pg/server.log"
