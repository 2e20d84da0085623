#!/usr/bin/env bash
# The upgrade test: version 0.1.0 (its commit in RELEASES) built and installed into a private
# PostgreSQL copy, databases filled through its entry points with real tokens
# (tests/upgrade/fill.sql). Database `before` then takes every later release in turn (each built
# from its commit in RELEASES, installed beside the others, `ALTER EXTENSION pg_toolgate UPDATE TO`
# it, a read checked), as a DBA who updated at every release did; then the current tree is
# installed and `before` updated to it from the last release, while database `chain` goes from
# 0.1.0 to it in one `ALTER EXTENSION pg_toolgate UPDATE` (PostgreSQL runs each version's script on
# the way). Then it checks, printing each check, in both databases:
#   1. the extension's version is the current tree's;
#   2. every configuration and history table kept its rows (count and content; the tables of
#      tool definitions may gain rows, the DBA's own stay unchanged);
#   3. the built-in ERP's rows live in ordinary tables maintenance.* (owned by the NOLOGIN role
#      maintenance_owner, not members of the extension), the same rows;
#   4. request_close and request_purchase_part are bound write tools, read_order a read tool,
#      every C function's symbol is in the new library, and no table of the extension has a column
#      of a type pg_upgrade refuses;
#   5. calls go on working (tests/upgrade/after.sql): a read, a retry of a settled call, a proposal
#      made before the update confirmed, closes at tier 1 and 0, a purchase, a DBA's own tool;
#   6. a database filled the same way and left at 0.1.0 goes on answering after the new
#      libraries are installed (each version's library is a file of its own), on 0.1.0's library;
#   7. the catalogue (tests/upgrade/catalogue.sql) is identical to a fresh CREATE EXTENSION's in
#      another database of the same cluster (the diff is printed otherwise: "-" lines are what a
#      fresh install has and the update does not make, "+" lines what the update leaves that a
#      fresh install has not), and every row a fresh install ships is in the updated database;
#      that database then loads examples/maintenance/maintenance.sql (as 0.2.0, whose script moved
#      the ERP, released it: RELEASES), and the schema maintenance the update made must be
#      identical to the one the example builds.
#
#   scripts/upgrade-test.sh            on PostgreSQL TOOLGATE_PG (default 15)
#   scripts/upgrade-test.sh 15 18      on each version in turn
#
# Nothing is installed into the system's PostgreSQL: each version gets a private copy in the work
# directory (scripts/private-pg.sh), 0.1.0's build first, each later release's, then the current
# tree's (which `cargo pgrx install` builds in the usual target directory, with
# sql/pg_toolgate--*--*.sql). Each release's source (git archive of its commit) and its own
# target directory are kept in TOOLGATE_UPGRADE_DIR (default target/upgrade) across runs: the
# first build of each is a full compile.
#
# Environment: TOOLGATE_UPGRADE_DIR, TOOLGATE_UPGRADE_PORT (first port tried, 54461),
# TOOLGATE_KEEP=1 (keep the work directory: logs, row dumps, catalogues), TOOLGATE_BIN.
# Exit: 0 every check held; 1 a check failed (every failure is printed); 2 the harness could not
# judge (a build, the fill or the update itself failed).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"

# The version updated from, and the commit it was released from (RELEASES).
OLD_VERSION=0.1.0
OLD_COMMIT=$(release_commit "$OLD_VERSION")
[ -n "$OLD_COMMIT" ] || { log "$OLD_VERSION is not in RELEASES" >&2; exit 2; }

# The version of this tree, updated to; the releases between (each installed in turn for database
# before); the version whose update script moved the built-in ERP into the schema maintenance.
new_version=$(tree_version)
between=()
while read -r r _; do
    [ "$r" = "$OLD_VERSION" ] || [ "$r" = "$new_version" ] || between+=("$r")
done < <(releases | sed -n "/^$OLD_VERSION /,\$p")
ERP_MOVED_IN=0.2.0
# before: 0.1.0, then each release in turn, then this tree; chain: 0.1.0 to this tree at once.
databases=(before chain)

read -r -a versions <<<"${*:-$PG_MAJOR}"
updir=$(realpath -m "${TOOLGATE_UPGRADE_DIR:-target/upgrade}")
old_src=$updir/src-$OLD_VERSION
make_work
toolgate_cli
export TOOLGATE_MINT=$root/pg_test/mint
failures=0
summary=()

ok() { log "ok: $*"; }
fail() {
    log "FAIL: $*"
    failures=$((failures + 1))
}
harness_error() {
    log "$*" >&2
    exit 2
}


# q DB ARGS…: psql as the superuser into DB of the cluster under test.
q() {
    local db=$1
    shift
    sql "$host" "$port" "$db" "$@"
}

# rows DB RELATION COLUMNS [CONDITION]: RELATION's rows (those meeting CONDITION), each as the
# jsonb of its COLUMNS (a text[] literal) only, sorted.
rows() {
    q "$1" -v cols="$3" <<SQL | LC_ALL=C sort
SELECT (SELECT pg_catalog.jsonb_object_agg(e.key, e.value) FROM pg_catalog.jsonb_each(pg_catalog.to_jsonb(t)) e
         WHERE e.key = ANY (:'cols'::text[]))::text
  FROM $2 t ${4:+WHERE $4}
SQL
}

# The tables whose rows the update must carry: NAME (in schema toolgate under 0.1.0), MODE, WHERE
# the rows are after the update, and which rows count. MODE exact: the same rows, none added;
# kept: none lost or changed, the update may add some (a shipped tool becomes a defined one, the
# new read tool read_order gets its schema and, for each tenant with policy rows, a policy row).
# The audit names people by pseudonym from 0.3.0 on: its rows are compared as read back through
# each person's key (upgrade_check.audit, made by checks_after).
tables=(
    "tenants exact toolgate.tenants"
    "keys exact toolgate.keys"
    "issuers exact toolgate.issuers"
    "tenant_issuers exact toolgate.tenant_issuers"
    "policies kept toolgate.policies"
    "policy_history kept toolgate.policy_history"
    "tool_schemas kept toolgate.tool_schemas"
    "write_switches exact toolgate.write_switches"
    "ledger exact toolgate.ledger"
    "proposals exact toolgate.proposals"
    "conversations exact toolgate.conversations"
    "quota_usage exact toolgate.quota_usage"
    "audit exact upgrade_check.audit"
    "tools kept toolgate.tools defined_by IS NOT NULL"
    "tool_bindings kept toolgate.tool_bindings"
    "tool_history kept toolgate.tool_history"
    "work_orders exact maintenance.work_orders"
    "parts exact maintenance.parts"
    "cost_centers exact maintenance.cost_centers"
    "purchases exact maintenance.purchases"
    "close_requests exact maintenance.close_requests"
)
erp_tables=(work_orders parts cost_centers purchases close_requests)

# snapshot DIR DB: every table's columns and rows as database DB has them under 0.1.0, and its
# row count printed.
snapshot() {
    local dir=$1 db=$2 spec name mode after cond counts=()
    mkdir -p "$dir"
    for spec in "${tables[@]}"; do
        read -r name mode after cond <<<"$spec"
        q "$db" -c "SELECT pg_catalog.array_agg(attname ORDER BY attnum)::text FROM pg_catalog.pg_attribute
                      WHERE attrelid = 'toolgate.$name'::pg_catalog.regclass AND attnum > 0 AND NOT attisdropped" \
            >"$dir/$name.cols"
        rows "$db" "toolgate.$name" "$(cat "$dir/$name.cols")" "$cond" >"$dir/$name.before"
        counts+=("$name $(wc -l <"$dir/$name.before")")
    done
    log "rows of database $db under $OLD_VERSION: $(printf '%s, ' "${counts[@]}" | sed 's/, $//')"
    in_force "$db" >"$dir/in_force.before"
}

# in_force DB: each tool's schema version in force.
in_force() {
    q "$1" -c "SELECT tool || ' ' || max(version) FROM toolgate.tool_schemas GROUP BY tool ORDER BY tool"
}

# compare DIR DB: each table's rows in database DB after the update against its snapshot, and
# each tool's schema in force (a tool the update binds keeps the version it had, a DBA's included).
compare() {
    local dir=$1 db=$2 spec name mode after cond before_n after_n lost added
    in_force "$db" >"$dir/in_force.after"
    if [ -z "$(LC_ALL=C comm -23 "$dir/in_force.before" "$dir/in_force.after")" ]; then
        ok "every tool keeps its schema version in force ($(paste -sd, "$dir/in_force.before"))"
    else
        fail "schema versions in force changed: $(paste -sd, "$dir/in_force.before") before, $(paste -sd, "$dir/in_force.after") after"
    fi
    for spec in "${tables[@]}"; do
        read -r name mode after cond <<<"$spec"
        if [ -z "$(q "$db" -c "SELECT pg_catalog.to_regclass('$after')")" ]; then
            fail "$after: no such table after the update (toolgate.$name had $(wc -l <"$dir/$name.before") rows)"
            continue
        fi
        rows "$db" "$after" "$(cat "$dir/$name.cols")" "$cond" >"$dir/$name.after"
        before_n=$(wc -l <"$dir/$name.before") after_n=$(wc -l <"$dir/$name.after")
        lost=$(LC_ALL=C comm -23 "$dir/$name.before" "$dir/$name.after" | wc -l)
        added=$(LC_ALL=C comm -13 "$dir/$name.before" "$dir/$name.after" | wc -l)
        local what="$after${cond:+ ($cond)}: $before_n rows before, $after_n after"
        if [ "$lost" -eq 0 ] && { [ "$added" -eq 0 ] || [ "$mode" = kept ]; }; then
            if [ "$added" -eq 0 ]; then ok "$what, every one unchanged"; else ok "$what, every one unchanged, $added added by the update"; fi
        else
            fail "$what: $lost lost or changed, $added added"
            LC_ALL=C comm -23 "$dir/$name.before" "$dir/$name.after" | head -n 3 | cut -c1-400 | sed 's/^/    before only: /'
            LC_ALL=C comm -13 "$dir/$name.before" "$dir/$name.after" | head -n 3 | cut -c1-400 | sed 's/^/    after only:  /'
        fi
    done
}

# check WHAT WANT GOT: ok when GOT is WANT.
check() {
    if [ "$3" = "$2" ]; then ok "$1: $3"; else fail "$1: $3, not $2"; fi
}

# fill DB: database DB made at OLD_VERSION and filled through its entry points, its keys in
# $work/keys-$v-DB.
fill() {
    local db=$1
    q postgres -c "CREATE DATABASE $db"
    q "$db" -c "CREATE EXTENSION pg_toolgate VERSION '$OLD_VERSION'"
    mkdir -p "$work/keys-$v-$db"
    TOOLGATE_KEYS=$work/keys-$v-$db q "$db" -v v010="$old_src" -f tests/upgrade/fill.sql >"$work/fill-$v-$db.log" ||
        harness_error "the fill of database $db failed under $OLD_VERSION (its log: $work/fill-$v-$db.log)"
}

# update DB VERSION: ALTER EXTENSION pg_toolgate UPDATE TO VERSION in database DB, on a new
# connection (the backends that ran the fill had the old library loaded).
update() {
    q "$1" -c "ALTER EXTENSION pg_toolgate UPDATE TO '$2'" ||
        harness_error "database $1: ALTER EXTENSION pg_toolgate UPDATE TO '$2' failed"
}

# answers DB: the version database DB runs, the library its C functions call, and the outcome of
# a read through its entry point, in a transaction rolled back (it leaves no audit row behind).
answers() {
    TOOLGATE_KEYS=$work/keys-$v-$1 q "$1" 2>&1 <<'SQL'
\set sup `"$TOOLGATE_MINT" id up-a user-1 supervisor`
BEGIN;
SELECT e.extversion || ', '
       || (SELECT pg_catalog.string_agg(DISTINCT pg_catalog.regexp_replace(p.probin, '^.*/', ''), ', ')
             FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'toolgate'::pg_catalog.regnamespace AND p.probin IS NOT NULL)
       || ', ' || (toolgate.read_order(:'sup', '901')->>'outcome')
  FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_toolgate';
ROLLBACK;
SQL
}

# checks_after DB: the checks of an updated database DB (its rows against its snapshot, the ERP
# moved, the bindings, the library, calls after the update).
checks_after() {
    local db=$1 erp tool want faults calls=0
    check "extension version" "$new_version" "$(q "$db" -c "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_toolgate'")"
    check "toolgate.version()" "$new_version, pg_toolgate-$new_version, true" \
        "$(q "$db" -c "SELECT v->>'extension' || ', ' || (v->>'library') || ', ' || (v->>'library_current') FROM toolgate.version() v")"
    # The audit as 0.1.0 wrote it, read back through each person's key: every row the same.
    q "$db" <<'SQL'
CREATE SCHEMA upgrade_check;
CREATE VIEW upgrade_check.audit AS
SELECT (pg_catalog.jsonb_populate_record(a, pg_catalog.jsonb_strip_nulls(pg_catalog.jsonb_build_object(
            'actor', k.person,
            'detail', CASE WHEN d.person IS NOT NULL
                           THEN pg_catalog.jsonb_set(a.detail, '{asked_by}', pg_catalog.to_jsonb(d.person)) END)))).*
  FROM toolgate.audit a
  LEFT JOIN toolgate.person_keys k ON k.tenant_id = a.tenant_id AND k.pseudonym = a.actor
  LEFT JOIN toolgate.person_keys d ON d.tenant_id = a.tenant_id AND d.pseudonym = a.detail->>'asked_by';
SQL
    compare "$work/rows-$v-$db" "$db"
    # The audit is partitioned by month now, the rows of before in its default partition; the
    # first audit_partitions() moves each to its month's partition, every row the same.
    local audit_rows audit_digest
    audit_rows=$(q "$db" -c "SELECT count(*) FROM toolgate.audit")
    audit_digest=$(q "$db" -c "SELECT md5(string_agg(a::text, ',' ORDER BY a.tenant_id, a.audit_id)) FROM upgrade_check.audit a")
    check "toolgate.audit partitioned, its rows of before in its default partition" "p, $audit_rows" \
        "$(q "$db" -c "SELECT c.relkind::text || ', ' || (SELECT count(*) FROM toolgate.audit_default)
                         FROM pg_catalog.pg_class c WHERE c.oid = 'toolgate.audit'::pg_catalog.regclass")"
    check "rows toolgate.audit_partitions() moved to their months" "$audit_rows" \
        "$(q "$db" -c "SELECT coalesce(sum(moved_rows), 0) FROM toolgate.audit_partitions()")"
    check "the audit after the move: rows in the default partition, rows in all, the rows' digest" \
        "0, $audit_rows, $audit_digest" \
        "$(q "$db" -c "SELECT (SELECT count(*) FROM toolgate.audit_default) || ', ' || (SELECT count(*) FROM toolgate.audit) || ', '
                              || (SELECT md5(string_agg(a::text, ',' ORDER BY a.tenant_id, a.audit_id)) FROM upgrade_check.audit a)")"
    q "$db" -c "DROP SCHEMA upgrade_check CASCADE"
    check "audit rows naming a person in clear after the update" "0" \
        "$(q "$db" -c "SELECT count(*) FROM toolgate.audit a
                        WHERE (a.actor IS NOT NULL AND a.kind <> 'dispatch' AND a.actor !~ '^p:')
                           OR (a.detail->>'asked_by' IS NOT NULL AND a.detail->>'asked_by' !~ '^p:')")"

    check "role maintenance_owner (can log in?)" "false" \
        "$(q "$db" -c "SELECT coalesce((SELECT rolcanlogin::text FROM pg_catalog.pg_roles WHERE rolname = 'maintenance_owner'), 'no such role')")"
    # (An update script's CREATE SCHEMA makes the schema a member, unless the script drops it.)
    check "schema maintenance (owner, extension member)" "maintenance_owner, not a member" \
        "$(q "$db" -c "SELECT coalesce((SELECT n.nspowner::pg_catalog.regrole::text
                               || CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                                                     WHERE d.classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
                                                       AND d.objid = n.oid AND d.deptype = 'e')
                                       THEN ', a member' ELSE ', not a member' END
                             FROM pg_catalog.pg_namespace n WHERE n.nspname = 'maintenance'), 'no such schema')")"
    for erp in "${erp_tables[@]}"; do
        # A missing table has failed its rows' check already.
        [ -n "$(q "$db" -c "SELECT pg_catalog.to_regclass('maintenance.$erp')")" ] || continue
        check "maintenance.$erp (owner, extension member, toolgate.$erp gone)" "maintenance_owner, not a member, gone" \
            "$(q "$db" -c "SELECT coalesce((SELECT c.relowner::pg_catalog.regrole::text
                                   || CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                                                         WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                                                           AND d.objid = c.oid AND d.deptype = 'e')
                                           THEN ', a member' ELSE ', not a member' END
                                   || CASE WHEN pg_catalog.to_regclass('toolgate.$erp') IS NULL THEN ', gone' ELSE ', still there' END
                                 FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass('maintenance.$erp')),
                                'no such table')")"
    done
    for tool in request_close:write request_purchase_part:write read_order:read; do
        want=${tool#*:} tool=${tool%%:*}
        check "toolgate.tool_bindings: $tool" "$want" \
            "$(q "$db" -c "SELECT coalesce((SELECT kind FROM toolgate.tool_bindings WHERE tool = '$tool'), 'not bound')")"
    done
    faults=$(q "$db" <<'SQL'
CREATE FUNCTION pg_temp.symbol_fault(f regprocedure) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_catalog.fmgr_c_validator(f);
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLERRM;
END
$$;
SELECT p.oid::pg_catalog.regprocedure::text || ': ' || pg_temp.symbol_fault(p.oid)
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid
  JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
 WHERE e.extname = 'pg_toolgate' AND d.deptype = 'e' AND p.prolang = (SELECT oid FROM pg_catalog.pg_language WHERE lanname = 'c')
   AND pg_temp.symbol_fault(p.oid) IS NOT NULL;
SQL
    )
    if [ -z "$faults" ]; then ok "every C function of the extension finds its symbol in the new library"; else
        fail "C functions whose symbol the new library lacks:"
        printf '%s\n' "$faults" | sed 's/^/    /'
    fi

    # pg_upgrade, the next upgrade a DBA makes (a major PostgreSQL version), refuses a database
    # with a column of these OID-holding types in any table.
    check "columns of a type pg_upgrade refuses (regproc, regprocedure, regoper, …) in the extension's tables" "none" \
        "$(q "$db" -c "SELECT coalesce(pg_catalog.string_agg(a.attrelid::pg_catalog.regclass::text || '.' || a.attname, ', '), 'none')
                          FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
                         WHERE c.relnamespace = 'toolgate'::pg_catalog.regnamespace AND c.relkind = 'r' AND NOT a.attisdropped
                           AND a.atttypid IN ('pg_catalog.regproc'::pg_catalog.regtype, 'pg_catalog.regprocedure'::pg_catalog.regtype,
                                              'pg_catalog.regoper'::pg_catalog.regtype, 'pg_catalog.regoperator'::pg_catalog.regtype,
                                              'pg_catalog.regconfig'::pg_catalog.regtype, 'pg_catalog.regdictionary'::pg_catalog.regtype,
                                              'pg_catalog.regnamespace'::pg_catalog.regtype, 'pg_catalog.regcollation'::pg_catalog.regtype)")"

    log "calls after the update (tests/upgrade/after.sql)"
    TOOLGATE_KEYS=$work/keys-$v-$db q "$db" -f tests/upgrade/after.sql >"$work/after-$v-$db.log" 2>&1 || calls=$?
    grep -E '^(ok|entry points): ' "$work/after-$v-$db.log" | while read -r line; do log "$line"; done
    if [ "$calls" -ne 0 ]; then
        fail "a call after the update:"
        grep -vE '^(ok|entry points): ' "$work/after-$v-$db.log" | sed 's/^/    /'
    fi

    # The audit written before the update, and by the calls after it: sealed, then verified.
    q "$db" -c "SELECT count(*) FROM toolgate.seal()" >/dev/null || fail "toolgate.seal() after the update failed"
    check "every tenant's audit, sealed after the update, verified" "verified" \
        "$(q "$db" -c "SELECT coalesce(pg_catalog.string_agg(DISTINCT v.status, ', '), 'nothing')
                          FROM toolgate.tenants t, toolgate.verify_audit(t.tenant_id) v WHERE v.status <> 'empty'")"
    # pg_dump keeps the seal keys and the checkpoints: restored into a new database (its own
    # CREATE EXTENSION makes no key), the audit still verifies. (The restore's other errors, if
    # any, are not this check's: its log is kept.)
    q postgres -c "DROP DATABASE IF EXISTS ${db}_restored" -c "CREATE DATABASE ${db}_restored"
    "$PGBIN/pg_dump" -h "$host" -p "$port" -U postgres "$db" >"$work/dump-$v-$db.sql"
    PGOPTIONS='-c client_min_messages=warning' "$PGBIN/psql" -X -q -h "$host" -p "$port" -U postgres \
        -d "${db}_restored" -f "$work/dump-$v-$db.sql" >"$work/restore-$v-$db.log" 2>&1 || true
    check "every tenant's audit, restored from pg_dump, verified" "verified" \
        "$(q "${db}_restored" -c "SELECT coalesce(pg_catalog.string_agg(DISTINCT v.status, ', '), 'nothing')
                                    FROM toolgate.tenants t, toolgate.verify_audit(t.tenant_id) v WHERE v.status <> 'empty'")"
}

# upgrade_test MAJOR: the whole test on PostgreSQL MAJOR.
upgrade_test() {
    local v=$1 started=$SECONDS t dir r path=$OLD_VERSION db faults
    pg_version "$v"
    pg_fetch "$PG_MAJOR"
    dir=$work/pg$v
    # A release builds only for the versions its Cargo.toml names (0.1.0 and 0.2.0: 15 and 18).
    git -C "$root" show "$OLD_COMMIT:Cargo.toml" | grep -q "^pg$v = " ||
        harness_error "$OLD_VERSION was not made for PostgreSQL $v (its Cargo.toml has no feature pg$v): there is no database of it to update"

    step "[PostgreSQL $v] $OLD_VERSION (commit ${OLD_COMMIT:0:7}) into a private copy"
    private_pg "$work/install-$v"
    # The copy holds whatever the install it was made from has; start from no pg_toolgate at all.
    rm -f "$("$PG_CONFIG" --sharedir)"/extension/pg_toolgate[.-]* "$("$PG_CONFIG" --pkglibdir)"/pg_toolgate[.-]*so
    t=$SECONDS
    # 0.1.0's source, extracted once from the repository's history (a clone too shallow to hold
    # the commit cannot run this test), built in its own target directory, cached after.
    release_install "$OLD_VERSION" "$work/build-$OLD_VERSION-pg$v.log" || case $? in
        2) harness_error "$OLD_VERSION cannot be built from this clone" ;;
        *) cat "$work/build-$OLD_VERSION-pg$v.log" >&2; harness_error "$OLD_VERSION does not build" ;;
    esac
    log "$OLD_VERSION built and installed in $((SECONDS - t)) s"

    throwaway_cluster "pg$v" "${TOOLGATE_UPGRADE_PORT:-54461}"
    host=$dir/socket
    q postgres -c "CREATE DATABASE fresh"
    log "filling databases ${databases[*]} and stays through $OLD_VERSION's entry points (tests/upgrade/fill.sql)"
    for db in "${databases[@]}" stays; do fill "$db"; done
    for db in "${databases[@]}"; do snapshot "$work/rows-$v-$db" "$db"; done

    # Database before takes each release in turn, as a DBA who updated at every release did.
    for r in "${between[@]}"; do
        step "[PostgreSQL $v] $r (commit $(release_commit "$r" | cut -c1-7)) beside it, then database before updated to it"
        t=$SECONDS
        release_install "$r" "$work/build-$r-pg$v.log" || case $? in
            2) harness_error "$r cannot be built from this clone" ;;
            *) cat "$work/build-$r-pg$v.log" >&2; harness_error "$r does not build" ;;
        esac
        log "$r built and installed in $((SECONDS - t)) s"
        update before "$r"
        check "database before at $r: version, library, a read through its entry point" \
            "$r, pg_toolgate-$r, SUCCEEDED" "$(answers before)"
        path+=" -> $r"
    done

    step "[PostgreSQL $v] the current tree over it, then ALTER EXTENSION pg_toolgate UPDATE"
    t=$SECONDS
    cargo pgrx install --pg-config "$PG_CONFIG" >"$work/build-current-pg$v.log" 2>&1 ||
        { cat "$work/build-current-pg$v.log" >&2; harness_error "the current tree does not build"; }
    log "current tree built and installed in $((SECONDS - t)) s"
    log "installed: $(cd "$("$PG_CONFIG" --sharedir)/extension" && echo pg_toolgate--*.sql)"
    [ "$(q before -c "SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = 'pg_toolgate'")" = "$new_version" ] ||
        harness_error "the installed control file's default version is not this tree's ($new_version)"
    update before "$new_version"
    log "database before: $path -> $new_version"
    update chain "$new_version"
    log "database chain: $OLD_VERSION -> $new_version in one ALTER EXTENSION (PostgreSQL runs each script on the way)"

    step "[PostgreSQL $v] a database left at $OLD_VERSION, on a new connection"
    check "database stays: version, library, a read through its entry point" \
        "$OLD_VERSION, pg_toolgate, SUCCEEDED" "$(answers stays)"

    for db in "${databases[@]}"; do
        step "[PostgreSQL $v] checks after the update of database $db"
        checks_after "$db"
    done

    step "[PostgreSQL $v] catalogue: updated databases against a fresh CREATE EXTENSION"
    # The fresh database as a DBA would build it on the new version: the extension, then the
    # maintenance example the update turns the old built-in ERP into.
    # The rows a fresh install ships are read before the example adds its own.
    q fresh -c "CREATE EXTENSION pg_toolgate"
    # The audit's months, as the updated databases have them (this month and the next two).
    q fresh -c "SELECT count(*) FROM toolgate.audit_partitions()" >/dev/null
    { q fresh -f tests/upgrade/catalogue.sql | grep '^row ' || true; } | LC_ALL=C sort >"$work/rows-$v-fresh.txt"
    # The example as the version whose update script built the schema maintenance shipped it: a
    # released version's update script is frozen, so it is compared with the example of that
    # release, never with a later edit of it.
    local example=examples/maintenance/maintenance.sql released
    released=$(release_commit "$ERP_MOVED_IN")
    if [ -n "$released" ]; then
        example=$work/maintenance-$ERP_MOVED_IN.sql
        git -C "$root" show "$released:examples/maintenance/maintenance.sql" >"$example"
    fi
    q fresh -f "$example" >/dev/null
    for db in "${databases[@]}" fresh; do
        q "$db" -f tests/upgrade/catalogue.sql | LC_ALL=C sort >"$work/catalogue-$v-$db.txt"
        grep -v '^row ' "$work/catalogue-$v-$db.txt" >"$work/facts-$v-$db.txt" || true
        q "$db" -v schema=maintenance -f tests/upgrade/catalogue.sql | LC_ALL=C sort >"$work/maintenance-$v-$db.txt"
    done
    for db in "${databases[@]}"; do
        grep '^row ' "$work/catalogue-$v-$db.txt" >"$work/rows-$v-$db.txt" || true
        if diff -u --label "fresh CREATE EXTENSION pg_toolgate ($new_version)" \
            --label "database $db, updated from $OLD_VERSION" "$work/facts-$v-fresh.txt" "$work/facts-$v-$db.txt" >"$work/catalogue-$v-$db.diff"; then
            ok "database $db: catalogue identical to a fresh $new_version install ($(wc -l <"$work/facts-$v-fresh.txt") facts)"
        else
            fail "database $db: catalogue differs from a fresh $new_version install ($(grep -c '^[-+][^-+]' "$work/catalogue-$v-$db.diff") lines):"
            cat "$work/catalogue-$v-$db.diff"
        fi
        if diff -u --label "examples/maintenance on a fresh $new_version" --label "maintenance of database $db" \
            "$work/maintenance-$v-fresh.txt" "$work/maintenance-$v-$db.txt" >"$work/maintenance-$v-$db.diff"; then
            ok "database $db: schema maintenance identical to the one examples/maintenance builds ($(wc -l <"$work/maintenance-$v-fresh.txt") facts)"
        else
            fail "database $db: schema maintenance differs from the one examples/maintenance builds:"
            cat "$work/maintenance-$v-$db.diff"
        fi
        faults=$(LC_ALL=C comm -23 "$work/rows-$v-fresh.txt" "$work/rows-$v-$db.txt")
        if [ -z "$faults" ]; then
            ok "database $db: every row a fresh install ships ($(wc -l <"$work/rows-$v-fresh.txt")) is in it"
        else
            fail "database $db: rows a fresh install ships that it lacks:"
            printf '%s\n' "$faults" | cut -c1-400 | sed 's/^/    /'
        fi
    done

    cluster_stop "$dir"
    summary+=("PostgreSQL $v: $path -> $new_version, and $OLD_VERSION -> $new_version at once, in $((SECONDS - started)) s")
}

for v in "${versions[@]}"; do upgrade_test "$v"; done

step "summary"
for s in "${summary[@]}"; do log "$s"; done
if [ "$failures" -gt 0 ]; then
    log "$failures check(s) FAILED"
    exit 1
fi
log "upgrade: rows kept, ERP moved, calls working, catalogue identical to a fresh install"
