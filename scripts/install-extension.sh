#!/usr/bin/env bash
# Build pg_toolgate and install it into the PostgreSQL TOOLGATE_PG names (its extension and lib
# dirs): the system's PostgreSQL 15 (default), or PostgreSQL 18 in target/pg18.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
# That version's install, whatever PGBIN says (a private copy is installed into by its caller).
pg_use "$PG_INSTALL_BIN"
args=(--pg-config "$PG_CONFIG")
# Only the system's install needs root; target/pg18 is the project's own.
[ "$(id -u)" -eq 0 ] || [ "$PG_MAJOR" != 15 ] || args+=(--sudo)
log "building pg_toolgate into $("$PG_CONFIG" --sharedir)/extension"
cargo pgrx install "${args[@]}" >/dev/null
