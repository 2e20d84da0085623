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
#   5. docs: every relative link of every Markdown file (tracked, or new and not ignored) names a
#      file that exists, and a `#anchor` a heading of that file (GitHub's slugs: lowercase, markup
#      and punctuation dropped, spaces to -); and every function the extension creates is named
#      as `toolgate.NAME(` in the SQL reference, docs/sql.md. The functions: `CREATE FUNCTION
#      toolgate.NAME` in sql/*.sql but the update scripts (sql/pg_toolgate--*--*.sql), and the
#      #[pg_extern] functions of src/. Exempt: the internal helpers lint_docs lists, and only
#      while no GRANT EXECUTE in sql/*.sql names them (a function granted to any role is public)
#   6. mutants: every named mutant (mutants/named/*.toml) still applies to the tree, each `old`
#      text found as many times as it says: a control moved under its mutant is re-anchored at
#      once, not found out when the mutants are next judged
#   7. subjects: every commit this branch adds over main (origin/main where there is one; nothing
#      on main itself) has a subject of 72 characters or fewer, as .githooks/commit-msg asks at
#      each commit; the history before is left as it is
#   8. meta: META.json (PGXN's distribution metadata) passes PGXN's own validator, pgxn_meta
#      (scripts/setup.sh installs it), and names the workspace's version for the distribution and
#      for the extension it provides
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

# The documentation's links, and the SQL reference's completeness (the header's step 5).
lint_docs() {
    git ls-files --cached --others --exclude-standard -- '*.md' | python3 -c '
import os, re, sys, unicodedata
from urllib.parse import unquote

# Helpers the extension creates for itself: triggers, checks its own SQL calls, the parts of the
# reports. No client role executes them (the lint fails if a GRANT EXECUTE names one).
INTERNAL = {
    "administers", "advisory_lock_functions", "audit_is_append_only", "binding_code", "binding_fault",
    "binding_relations", "binding_warning", "caller", "check_bound_functions", "check_consent_template",
    "check_jwks", "check_locale", "check_tool_name", "check_tool_schema", "check_write_contract",
    "check_write_options", "config_changed", "definer_fault", "gate_explain", "hardening_refuse_unfit",
    "hardening_setting_ms", "iso_utc", "large_object_functions", "outbox_finish", "outbox_for_a_person", "outbox_person_checks",
    "outbox_claim", "outbox_settle", "parse_public_key",
    "record_tool", "require_administrator", "search_path_names", "signal_config_change",
    "check_endpoint_url", "endpoint_at", "endpoint_origin", "mark_untrusted", "node_audit_id", "node_group",
    "tenant_is_here", "seal_new_seed", "seal_public_key", "seal_signature", "seal_signature_valid", "seal_lock",
    "wait_for_writers", "audit_leaf", "audit_canonical", "checkpoint_message", "seal_refuse_unfit", "seal_tenant",
    "seal_key", "distributed", "purge_message", "min_retention", "pseudonym", "audited_target",
    "audit_month", "audit_months", "audit_triggers",
}
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
bad = []


def slug(heading):
    h = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    h = h.replace("`", "").replace("*", "").strip().lower()
    h = "".join(c for c in h if c in " -_" or unicodedata.category(c)[0] in "LN")
    return h.replace(" ", "-")


anchors_of = {}


def anchors(path):
    if path not in anchors_of:
        seen, out = {}, set()
        text = FENCE.sub("", open(path, encoding="utf-8").read())
        for m in re.finditer(r"^ {0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", text, re.M):
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
        anchors_of[path] = out
    return anchors_of[path]


files = [f for f in sys.stdin.read().split("\n") if f and os.path.isfile(f)]
for md in files:
    text = FENCE.sub("", open(md, encoding="utf-8").read())
    text = re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    targets += re.findall(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$", text, re.M)
    for t in targets:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", t):
            continue
        path, _, anchor = t.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(md), unquote(path))) if path else md
        if not os.path.exists(dest):
            bad.append(f"{md}: link to {t}: no file {dest}")
        elif anchor and dest.endswith(".md") and os.path.isfile(dest) and unquote(anchor) not in anchors(dest):
            bad.append(f"{md}: link to {t}: no heading #{anchor} in {dest}")

created, granted = set(), set()
for f in sorted(os.listdir("sql")):
    if not f.endswith(".sql") or re.match(r"pg_toolgate--.*--.*\.sql$", f):
        continue
    sql = re.sub(r"--[^\n]*", "", open(os.path.join("sql", f), encoding="utf-8").read())
    created |= set(re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+toolgate\.(\w+)", sql, re.I))
    for g in re.findall(r"GRANT\s+EXECUTE\s+ON\s+FUNCTION(.*?)\bTO\b", sql, re.I | re.S):
        granted |= set(re.findall(r"toolgate\.(\w+)\s*\(", g))
for dirpath, _, names in os.walk("src"):
    for n in names:
        if n.endswith(".rs"):
            src = open(os.path.join(dirpath, n), encoding="utf-8").read()
            created |= set(re.findall(r"#\[pg_extern[^\]]*\]\s*(?:pub\s+)?(?:unsafe\s+)?fn\s+(\w+)", src))
reference = open("docs/sql.md", encoding="utf-8").read()
for name in sorted(INTERNAL & granted):
    bad.append(f"scripts/lint.sh lists toolgate.{name} as internal, but sql/ grants EXECUTE on it")
public = sorted(created - (INTERNAL - granted))
for name in public:
    if not re.search(rf"toolgate\.{name}\(", reference):
        bad.append(f"docs/sql.md does not name toolgate.{name}(: the SQL reference names every public function")
for b in bad:
    print(b, file=sys.stderr)
if bad:
    sys.exit(1)
print(f"{len(files)} Markdown files: every relative link resolves; docs/sql.md names all {len(public)} public functions")
'
}

lint_mutants() {
    python3 mutants/apply.py check .
}

lint_subjects() {
    local base head commit subject bad=0 n=0
    head=$(git rev-parse HEAD)
    base=$(git rev-parse -q --verify origin/main || git rev-parse -q --verify main) || {
        log "no main branch to compare with: nothing to check"
        return 0
    }
    for commit in $(git rev-list "$base..$head"); do
        n=$((n + 1))
        subject=$(git log -1 --format=%s "$commit")
        if [ "${#subject}" -gt 72 ]; then
            log "commit ${commit:0:7}: its subject is ${#subject} characters (72 at most): $subject" >&2
            bad=1
        fi
    done
    [ "$bad" = 0 ] && log "$n commit(s) over main: every subject 72 characters or fewer"
    return "$bad"
}

lint_meta() {
    command -v pgxn_meta >/dev/null || { log "no pgxn_meta: scripts/setup.sh installs it" >&2; return 1; }
    pgxn_meta META.json || return 1
    local cargo meta
    cargo=$(tree_version)
    meta=$(python3 -c 'import json; m = json.load(open("META.json"))
print(m["version"], m["provides"]["pg_toolgate"]["version"])')
    if [ "$meta" != "$cargo $cargo" ]; then
        log "META.json names version(s) $meta; the workspace (Cargo.toml) is $cargo" >&2
        return 1
    fi
    log "META.json: $cargo, as Cargo.toml says"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(fmt shellcheck clippy releases docs mutants subjects meta)
for s in "${steps[@]}"; do
    case $s in
    fmt | shellcheck | clippy | releases | docs | mutants | subjects | meta) ;;
    *) log "no step $s (fmt, shellcheck, clippy, releases, docs, mutants, subjects, meta)" >&2; exit 2 ;;
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
