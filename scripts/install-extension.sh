#!/usr/bin/env bash
# Build pg_toolgate and install it into the system's PostgreSQL 15 (its extension and lib dirs).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
# The system's PostgreSQL, whatever PGBIN says (a private copy is installed into by its caller).
pg_use "$PG_SYSTEM_BIN"
args=(--pg-config "$PG_CONFIG")
[ "$(id -u)" -eq 0 ] || args+=(--sudo)
log "building pg_toolgate into $("$PG_CONFIG" --sharedir)/extension"
cargo pgrx install "${args[@]}" >/dev/null
