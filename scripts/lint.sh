#!/usr/bin/env bash
# Lint, cheapest step first; prints each step's time and exits non-zero at the first that fails:
#   1. fmt: cargo fmt --check, of the workspace and of the fuzz crate (a workspace of its own)
#   2. shellcheck: every shell script, found anew each run outside .git and target/ directories:
#      the files named *.sh and the files whose first line runs bash or sh
#   3. clippy: cargo clippy --locked --all-targets -D warnings, of the workspace, of toolgate-mcp
#      with its `broken` feature (the evals' deliberately broken servers) and of the fuzz crate
#   4. releases: every released version's update scripts (sql/pg_toolgate--*--VERSION.sql, for
#      each VERSION in RELEASES) are byte for byte those of its release commit, and none was added
#      since: what shipped is never edited after the fact (a fix is the next version's script)
#
#   scripts/lint.sh                 # every step
#   scripts/lint.sh shellcheck …    # these steps only, in the order given
#
# The shellcheck program comes with scripts/setup.sh; its settings are in .shellcheckrc. The fuzz
# crate builds where scripts/fuzz.sh builds it (FUZZ_TARGET_DIR, default target/fuzz).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
fuzz_target=${FUZZ_TARGET_DIR:-$root/target/fuzz}

# shell_scripts: every shell script of the repository, one a line, relative to it.
shell_scripts() {
    local f
    find . \( -name .git -o -name target \) -prune -o -type f -print | sort | while IFS= read -r f; do
        if [[ $f == *.sh ]] || head -n 1 "$f" | grep -Eq '^#!.*[/ ](ba)?sh([[:space:]]|$)'; then
            echo "${f#./}"
        fi
    done
}

# Each step's function runs where `set -e` does not reach (it is called with ||): its commands
# are chained with && so the first failure is its status.
lint_fmt() {
    cargo fmt --all -- --check &&
        cargo fmt --manifest-path fuzz/Cargo.toml -- --check
}

lint_shellcheck() {
    local scripts
    command -v shellcheck >/dev/null || { log "shellcheck is missing: scripts/setup.sh installs it" >&2; return 1; }
    mapfile -t scripts < <(shell_scripts) &&
        log "shellcheck $(shellcheck --version | sed -n 's/^version: //p') on ${#scripts[@]} scripts: ${scripts[*]}" &&
        shellcheck "${scripts[@]}"
}

# --locked: lint reads the tree and never rewrites it; a stale Cargo.lock is a failure to fix.
lint_clippy() {
    cargo clippy --locked --workspace --all-targets -- -D warnings &&
        cargo clippy --locked -p toolgate-mcp --all-targets --features broken -- -D warnings &&
        CARGO_TARGET_DIR=$fuzz_target cargo clippy --locked --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings
}

# A released version's update scripts as its release commit has them, and no other.
lint_releases() {
    local version commit path bad=0
    while read -r version commit; do
        git cat-file -e "$commit^{commit}" 2>/dev/null || { log "release $version: commit $commit is not in this clone" >&2; return 1; }
        while IFS= read -r path; do
            if ! git cat-file -e "$commit:$path" 2>/dev/null; then
                log "$path: added after $version was released ($commit): a released version takes no new update script" >&2
                bad=1
            elif ! git diff --quiet "$commit" -- "$path"; then
                log "$path: changed since $version was released ($commit): write the fix into the next version's script" >&2
                bad=1
            fi
        done < <({ git ls-tree --name-only "$commit" sql/ && find sql -name 'pg_toolgate--*' -print; } |
            grep -E "^sql/pg_toolgate--([^-]+--)?${version//./\.}\.sql$" | sort -u)
    done < <(releases)
    [ "$bad" -eq 0 ] && log "$(releases | wc -l) released version(s): their update scripts unchanged"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(fmt shellcheck clippy releases)
for s in "${steps[@]}"; do
    case $s in
    fmt | shellcheck | clippy | releases) ;;
    *) log "no step $s (fmt, shellcheck, clippy, releases)" >&2; exit 2 ;;
    esac
done
for s in "${steps[@]}"; do
    step "$s"
    started=$SECONDS rc=0
    "lint_$s" || rc=$?
    if [ "$rc" != 0 ]; then
        log "$s failed (exit $rc) after $((SECONDS - started)) s" >&2
        exit "$rc"
    fi
    log "$s passed in $((SECONDS - started)) s"
done
