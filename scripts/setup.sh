#!/usr/bin/env bash
# Installs what pg_toolgate needs on Debian 12 and skips what is already there, so a second run
# takes seconds: PostgreSQL 15 with its server headers, clang, sudo, cargo-pgrx 0.18.1 (the
# newest that builds with Rust 1.95), and pgrx's configuration for the system's PostgreSQL 15.
# Then builds the `toolgate` command and installs the extension into that PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config
SUDO=()
[ "$(id -u)" -eq 0 ] || SUDO=(sudo)

missing=()
for pkg in postgresql-15 postgresql-server-dev-15 libclang-dev clang sudo; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    "${SUDO[@]}" apt-get update -qq
    # Debian's package starts its own cluster on port 5432; pg_toolgate never uses it.
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! cargo pgrx --version 2>/dev/null | grep -q ' 0\.18\.1'; then
    echo "setup: installing cargo-pgrx 0.18.1 (a few minutes)"
    cargo install cargo-pgrx --version 0.18.1 --locked --quiet
fi

if ! grep -q "^pg15 = \"$PG_CONFIG\"" "${PGRX_HOME:-$HOME/.pgrx}/config.toml" 2>/dev/null; then
    cargo pgrx init --pg15 "$PG_CONFIG" >/dev/null
fi

scripts/install-extension.sh
cargo build --quiet -p toolgate-cli
