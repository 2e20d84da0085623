#!/usr/bin/env bash
# Build pg_toolgate and install it into the system's PostgreSQL 15 (its extension and lib dirs).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
args=(--pg-config "$PG_CONFIG")
[ "$(id -u)" -eq 0 ] || args+=(--sudo)
echo "install: building pg_toolgate into $("$PG_CONFIG" --sharedir)/extension"
cargo pgrx install "${args[@]}" >/dev/null
