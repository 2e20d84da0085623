#!/usr/bin/env bash
# Build pg_toolgate and install it into the PostgreSQL TOOLGATE_PG names (its extension and lib
# dirs): the system's PostgreSQL 15 (default), or PostgreSQL 16, 17 or 18 in target/pgNN.
#
#   scripts/install-extension.sh                   this tree's version
#   scripts/install-extension.sh --release 0.1.0   a released version, built from its commit in
#                                                  RELEASES, beside what is installed (the newest
#                                                  stays the default): to rehearse an update
#                                                  (docs/upgrades.md)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
# That version's install, whatever PGBIN says (a private copy is installed into by its caller).
pg_use "$PG_INSTALL_BIN"
args=(--pg-config "$PG_CONFIG")
# Only the system's install needs root; target/pgNN is the project's own.
sudo=()
[ "$(id -u)" -eq 0 ] || [ "$PG_MAJOR" != 15 ] || sudo=(--sudo)
if [ "${1:-}" = --release ]; then
    version=${2:?usage: scripts/install-extension.sh --release VERSION}
    build_log=$(mktemp)
    if ! release_install "$version" "$build_log" "${sudo[@]}"; then
        [ ! -s "$build_log" ] || tail -20 "$build_log" >&2
        rm -f "$build_log"
        exit 2
    fi
    rm -f "$build_log"
    log "pg_toolgate $version installed into $("$PG_CONFIG" --sharedir)/extension; the default stays as it was"
    exit 0
fi
log "building pg_toolgate into $("$PG_CONFIG" --sharedir)/extension"
cargo pgrx install "${args[@]}" "${sudo[@]}" >/dev/null
