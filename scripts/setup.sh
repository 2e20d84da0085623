#!/usr/bin/env bash
# Installs what pg_toolgate needs on Debian 12 and skips what is already there, so a second run
# takes seconds: PostgreSQL 15 with its server headers, clang, sudo, shellcheck (scripts/lint.sh),
# cargo-pgrx 0.18.1 (the newest that builds with Rust 1.95), and pgrx's configuration for the
# system's PostgreSQL 15. Then builds the `toolgate` command and installs the extension into that
# PostgreSQL.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
# The system's PostgreSQL, whatever PGBIN says: this is what the package installs.
pg_use "$PG_SYSTEM_BIN"

# rust-toolchain.toml names the toolchain 1.95.0. Where rustup has Rust 1.95 only as "stable",
# give it that name too (a link, nothing downloaded), before any cargo command reads the file.
if ! rustup toolchain list | grep -q '^1\.95\.0'; then
    if rustup run stable rustc --version | grep -q '^rustc 1\.95\.'; then
        rustup toolchain link 1.95.0 "$(rustup run stable rustc --print sysroot)"
    fi
fi

SUDO=()
[ "$(id -u)" -eq 0 ] || SUDO=(sudo)

missing=()
for pkg in "postgresql-$PG_MAJOR" "postgresql-server-dev-$PG_MAJOR" libclang-dev clang sudo shellcheck; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    "${SUDO[@]}" apt-get update -qq
    # Debian's package starts its own cluster on port 5432; pg_toolgate never uses it.
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! cargo pgrx --version 2>/dev/null | grep -q ' 0\.18\.1'; then
    log "installing cargo-pgrx 0.18.1 (a few minutes)"
    cargo install cargo-pgrx --version 0.18.1 --locked --quiet
fi

if ! grep -q "^pg$PG_MAJOR = \"$PG_CONFIG\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
    cargo pgrx init "--pg$PG_MAJOR" "$PG_CONFIG" >/dev/null
fi

scripts/install-extension.sh
toolgate_cli
