#!/usr/bin/env bash
# The packages as a DBA installs them (scripts/package.sh builds them into target/packages, or
# PACKAGE_OUT): on this machine's PostgreSQL 15, whose package Debian ships,
#   1. lintian finds no error in any package (installed from Debian if missing);
#   2. `apt-get install ./postgresql-15-pg-toolgate_….deb ./toolgate_….deb` installs both, and
#      every file they list is there, the units' system users made, no service or timer enabled or
#      started;
#   3. on a throwaway cluster, CREATE EXTENSION pg_toolgate loads the packaged library, and
#      `/usr/bin/toolgate demo` (the packaged command) replays seed 000's lab through it: every
#      invariant must hold;
#   4. an update as a DBA who installed 0.1.0 from its package makes it: 0.1.0's package
#      (scripts/package.sh --release 0.1.0 15) installed, a database filled through its entry
#      points (tests/upgrade/fill.sql, tokens minted by the packaged command), this version's
#      package installed over it (0.1.0's library leaves with its package), `ALTER EXTENSION
#      pg_toolgate UPDATE`, then the calls of tests/upgrade/after.sql;
#   5. `dpkg --purge` removes both and leaves no file of theirs behind (the extension's
#      directories, /usr/bin/toolgate, the units, /etc/toolgate).
# The other majors' packages (18: no postgresql-18 package on Debian 12 here) are checked by their
# contents: the library and scripts under that major's directories, nothing else.
#
# The system's PostgreSQL 15 has the development install of pg_toolgate (scripts/setup.sh) at the
# same paths: the packages replace it (and any other version's files there) while the test runs,
# and scripts/install-extension.sh puts this tree's back at the end, whatever happened. Step 14
# of scripts/test.sh.
#
#   scripts/package.sh 15 && scripts/package.sh --release 0.1.0 15 && scripts/package-test.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
[ "$(id -u)" -eq 0 ] || { log "dpkg needs root" >&2; exit 2; }
out=$(realpath -m "${PACKAGE_OUT:-target/packages}")
ext=$(find "$out" -maxdepth 1 -name 'postgresql-15-pg-toolgate_*.deb' 2>/dev/null | sort | tail -n 1)
cli=$(find "$out" -maxdepth 1 -name 'toolgate_*.deb' 2>/dev/null | sort | tail -n 1)
if [ -z "$ext" ] || [ -z "$cli" ]; then
    log "no packages in $out: scripts/package.sh 15 first" >&2
    exit 2
fi
# The oldest release's package, which step 4 updates from (scripts/package.sh --release).
OLD_VERSION=0.1.0
old_ext=$(find "${PACKAGE_OLD_OUT:-$out-$OLD_VERSION}" -maxdepth 1 -name "postgresql-15-pg-toolgate_${OLD_VERSION}[+-]*.deb" 2>/dev/null | tail -n 1)
if [ -z "$old_ext" ]; then
    log "no $OLD_VERSION package in $out-$OLD_VERSION: scripts/package.sh --release $OLD_VERSION 15 first" >&2
    exit 2
fi
failures=0
ok() { log "ok: $*"; }
fail() {
    log "FAIL: $*"
    failures=$((failures + 1))
}
pg_version 15
extdir=$("$PG_CONFIG" --sharedir)/extension
libdir=$("$PG_CONFIG" --pkglibdir)
restore() {
    dpkg --purge postgresql-15-pg-toolgate toolgate >/dev/null 2>&1 || true
    log "putting the development install back (scripts/install-extension.sh)"
    scripts/install-extension.sh >/dev/null 2>&1 || log "scripts/install-extension.sh failed: run it again" >&2
}
make_work
trap 'rc=$?; restore; work_cleanup "$rc"' EXIT

step "1. lintian"
command -v lintian >/dev/null || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lintian >/dev/null
}
for deb in "$out"/*.deb "$old_ext"; do
    errors=$(lintian --no-tag-display-limit "$deb" 2>&1 | grep -c '^E: ' || true)
    if [ "$errors" = 0 ]; then ok "$(basename "$deb"): no lintian error"; else
        fail "$(basename "$deb"): $errors lintian error(s):"
        lintian "$deb" 2>&1 | grep '^E: ' | sed 's/^/    /'
    fi
done
for deb in "$out"/postgresql-*-pg-toolgate_*.deb "$old_ext"; do
    major=$(basename "$deb" | sed 's/^postgresql-\([0-9]*\)-.*/\1/')
    strays=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' |
        grep -Ev "^\./usr/(lib/postgresql/$major/lib/pg_toolgate[^/]*\.so|share/postgresql/$major/extension/pg_toolgate[^/]*|share/doc/postgresql-$major-pg-toolgate/[^/]*)$" || true)
    if [ -z "$strays" ]; then ok "$(basename "$deb"): only PostgreSQL $major's library, scripts and docs"; else
        fail "$(basename "$deb") holds files outside PostgreSQL $major's directories: $strays"
    fi
done

step "2. apt-get install of both"
# The development install's files go first, so what is found after is the packages'.
rm -f "$extdir"/pg_toolgate[.-]* "$libdir"/pg_toolgate[.-]*so
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$ext" "$cli" >"$(mktemp)" 2>&1 ||
    { log "apt-get install failed" >&2; exit 1; }
missing=$(dpkg -L postgresql-15-pg-toolgate toolgate | while read -r f; do [ -e "$f" ] || echo "$f"; done)
if [ -z "$missing" ]; then ok "every file the packages list is installed"; else fail "listed but missing: $missing"; fi
check_users=""
for u in toolgate-mcp toolgate-dispatch toolgate-audit toolgate-console; do
    getent passwd "$u" >/dev/null || check_users="$check_users $u"
done
if [ -z "$check_users" ]; then ok "system users toolgate-mcp, toolgate-dispatch, toolgate-audit and toolgate-console made"; else
    fail "no user:$check_users"
fi
running=$(systemctl is-enabled toolgate-mcp toolgate-dispatch toolgate-audit.timer toolgate-console 2>/dev/null |
    grep -c '^enabled' || true)
if [ "$running" = 0 ]; then ok "no service or timer enabled by installing"; else fail "$running unit(s) enabled by installing"; fi
check_version=$(/usr/bin/toolgate --version)
version=$(dpkg-query -W -f='${Version}' toolgate)
# The package's version is the command's, and a dirty tree's "+dirty" (scripts/package.sh).
if [ "$check_version" = "toolgate ${version%%[+-]*}" ]; then ok "/usr/bin/toolgate --version: $check_version"; else
    fail "/usr/bin/toolgate --version says $check_version; the package is $version"
fi

step "3. the demo on the packaged extension and command"
throwaway_cluster pg "${TOOLGATE_PACKAGE_PORT:-54481}"
host=$work/pg/socket
library=$(sql "$host" "$port" postgres -c "CREATE EXTENSION pg_toolgate" -c "SELECT v->>'library' FROM toolgate.version() v")
ok "CREATE EXTENSION pg_toolgate: library $library"
if /usr/bin/toolgate demo --host "$work/pg/socket" --port "$port" --keys "$work/keys" \
    --server-log "$work/pg/server.log" >"$work/demo.log" 2>&1; then
    ok "$(grep -E 'invariants held' "$work/demo.log" | tail -n 1)"
else
    fail "the demo on the packages:"
    tail -n 20 "$work/demo.log" | sed 's/^/    /'
fi
cluster_stop "$work/pg"

step "4. an update from $OLD_VERSION's package: the new one installed over it, ALTER EXTENSION pg_toolgate UPDATE"
# What a DBA who installed 0.1.0 from its package does: a database filled through 0.1.0's entry
# points (tests/upgrade/fill.sql, tokens minted by the packaged command), then `apt-get install`
# of this version's package, which replaces 0.1.0's, and the update on a new connection.
new_ext=$(dpkg-query -W -f='${Version}' postgresql-15-pg-toolgate)
dpkg --purge postgresql-15-pg-toolgate >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$old_ext" >"$work/apt-old.log" 2>&1 ||
    { cat "$work/apt-old.log" >&2; log "apt-get install of $(basename "$old_ext") failed" >&2; exit 1; }
throwaway_cluster pgu "${TOOLGATE_PACKAGE_PORT:-54481}"
host=$work/pgu/socket
export TOOLGATE_BIN=/usr/bin/toolgate TOOLGATE_MINT=$root/pg_test/mint TOOLGATE_KEYS=$work/keys-update
mkdir -p "$TOOLGATE_KEYS"
sql "$host" "$port" postgres -c "CREATE DATABASE up"
sql "$host" "$port" up -c "CREATE EXTENSION pg_toolgate" >/dev/null
sql "$host" "$port" up -v v010="$(release_source "$OLD_VERSION")" -f tests/upgrade/fill.sql >"$work/fill.log" 2>&1 ||
    { cat "$work/fill.log" >&2; log "the fill under $OLD_VERSION's package failed" >&2; exit 1; }
ok "a database filled under $OLD_VERSION's package: extension $(sql "$host" "$port" up -c "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_toolgate'")"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$ext" >"$work/apt-new.log" 2>&1 ||
    { cat "$work/apt-new.log" >&2; log "apt-get install of $(basename "$ext") over $OLD_VERSION's failed" >&2; exit 1; }
got=$(dpkg-query -W -f='${Version}' postgresql-15-pg-toolgate)
if [ "$got" = "$new_ext" ] && [ ! -e "$libdir/pg_toolgate.so" ]; then
    ok "package postgresql-15-pg-toolgate $(basename "$old_ext" | cut -d_ -f2) -> $got, $OLD_VERSION's library gone with it"
else
    fail "after apt-get install over $OLD_VERSION: package $got (want $new_ext), $(ls "$libdir"/pg_toolgate*.so)"
fi
sql "$host" "$port" up -c "ALTER EXTENSION pg_toolgate UPDATE" >/dev/null
check_version=$(sql "$host" "$port" up -c "SELECT v->>'extension' || ', ' || (v->>'library') || ', ' || (v->>'library_current') FROM toolgate.version() v")
want=${new_ext%%[+-]*}
if [ "$check_version" = "$want, pg_toolgate-$want, true" ]; then ok "ALTER EXTENSION pg_toolgate UPDATE: $check_version"; else
    fail "after ALTER EXTENSION pg_toolgate UPDATE: $check_version, not $want, pg_toolgate-$want, true"
fi
if sql "$host" "$port" up -f tests/upgrade/after.sql >"$work/after.log" 2>&1; then
    ok "calls after the update: $(grep -c '^ok: ' "$work/after.log") checks of tests/upgrade/after.sql held"
else
    fail "a call after the update:"
    sed 's/^/    /' "$work/after.log"
fi
cluster_stop "$work/pgu"

step "5. dpkg --purge leaves nothing"
files=$(dpkg -L postgresql-15-pg-toolgate toolgate | sort -u)
dpkg --purge postgresql-15-pg-toolgate toolgate >/dev/null
left=$(while read -r f; do [ -f "$f" ] && echo "$f"; done <<<"$files"; ls -d /etc/toolgate 2>/dev/null || true)
if [ -z "$left" ]; then ok "purged: no file of either package left"; else fail "left after purge: $left"; fi

step "summary"
if [ "$failures" -gt 0 ]; then
    log "$failures check(s) FAILED"
    exit 1
fi
log "the packages install, run the demo, update from $OLD_VERSION's and purge cleanly"
