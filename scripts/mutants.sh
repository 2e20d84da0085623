#!/usr/bin/env bash
# Mutation proof (seed 000: a control counts only if a test fails when it is removed). Each mutant
# removes one control from a throwaway copy of the tree; the copy is built with its own target
# directory and installed into a PRIVATE relocated PostgreSQL (scripts/private-pg.sh), never the
# system's; then the suites run against a fresh cluster of that PostgreSQL and every test that
# failed is recorded. A mutant no test catches is a finding.
#
#   scripts/mutants.sh --ci              seed 000's five named mutants (mutants/named/*.toml, seed = true)
#   scripts/mutants.sh [--all]           every named mutant in mutants/named/ (those marked citus = true
#                                        only a cluster shows: scripts/citus.sh judges them, by hand)
#   scripts/mutants.sh NAME...           these named mutants
#   scripts/mutants.sh --gate [FROM [TO]]
#                                        cargo-mutants' mutants of the extension's gate code (src/gate/,
#                                        src/config.rs, src/entry.rs; its --list --json),
#                                        numbers FROM..TO-1 (default all), applied one at a time
#
# Suites (MUTANTS_SUITES, default "unit demo regress isolation it load"): unit = toolgate-core's
# tests (only for a mutant that touches crates/), demo = `toolgate demo`, regress = pg_regress over
# pg_test/, isolation = the isolation specs (scripts/isolation.sh), it = the client integration
# tests of tests/, load = the short load with invariants (scripts/load.sh). Named mutants run every
# suite, so the table names every test that caught them; --gate stops at the first suite that
# catches (MUTANTS_FIRST_FAIL=1).
#
# Environment: MUTANTS_TARGET_DIR (target/mutants; the tree copy lives inside it), MUTANTS_PG
# (target/pg-mutants, the private PostgreSQL), MUTANTS_WORK (a new /tmp/pg_toolgate-mutants.XXXXXX,
# removed at exit unless given), MUTANTS_PORT (first port tried, 54501), MUTANTS_IT (the `it`
# suite's test files to run, e.g. "outbox_dispatch outbox_faults"; default every one). The harness is
# scripts/lib.sh; the editing of the tree is mutants/apply.py.
#
# Exit: 0 every mutant caught; 1 a mutant survived; 2 the harness could not judge (the baseline
# fails, a named mutant does not build); 3 an edit no longer applies (re-anchor the mutant).
# The whole script is one block, read before it runs: editing it meanwhile cannot derail a run.
{
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
# Stdout is the results table: the log goes to stderr.
log_fd=2
# A Rust backtrace in the server would only slow it; the clients' own are not needed either.
unset RUST_BACKTRACE

mode=named
names=()
case "${1:-}" in
--ci) mode=named; for f in mutants/named/*.toml; do
        [ "$(python3 mutants/apply.py field "$f" seed)" = true ] && names+=("$(basename "$f" .toml)"); done ;;
--all | "") mode=named; for f in mutants/named/*.toml; do
        # A mutant only a cluster shows (citus = true) is judged by scripts/citus.sh, by hand.
        if [ "$(python3 mutants/apply.py field "$f" citus)" = true ]; then
            echo "mutants: $(basename "$f" .toml) is judged on a Citus cluster (scripts/citus.sh), not here" >&2
            continue
        fi
        names+=("$(basename "$f" .toml)"); done ;;
--gate) mode=gate; gate_from=${2:-0}; gate_to=${3:-} ;;
-h | --help) sed -n '2,/^[^#]/p' "$0" | sed '$d'; exit 0 ;;
*) names=("$@") ;;
esac
for n in "${names[@]}"; do
    [ -f "mutants/named/$n.toml" ] || { log "no mutant named $n (mutants/named/$n.toml)"; exit 2; }
done

target=$(realpath -m "${MUTANTS_TARGET_DIR:-target/mutants}")
# From here on PGBIN, PG_CONFIG and PG_REGRESS are the private copy's, for every cluster and suite.
private_pg "${MUTANTS_PG:-target/pg-mutants}"
suites=${MUTANTS_SUITES:-unit demo regress isolation it load}
first_fail=${MUTANTS_FIRST_FAIL:-$([ "$mode" = gate ] && echo 1 || echo 0)}
# Time-outs per suite, in seconds (the unmutated suites take about 2, 10 and 10 here); a mutant
# that hangs a suite counts as a time-out, as cargo-mutants counts them.
if [ "$mode" = gate ]; then t_demo=60 t_regress=180 t_it=90 t_load=180; else t_demo=300 t_regress=600 t_it=300 t_load=600; fi
pristine=$target/pristine tree=$target/tree
if [ -n "${MUTANTS_WORK:-}" ]; then use_work "$MUTANTS_WORK"; else make_work; fi
bin=$work/bin
base_bin=$bin
mkdir -p "$target" "$bin"
port=$(free_port "${MUTANTS_PORT:-54501}")
# At exit the tree is the unmutated copy again, then lib.sh's clean-up stops the cluster.
clusters+=("$work/pg")
trap 'rc=$?; if [ -d "$pristine" ]; then python3 mutants/apply.py sync "$pristine" "$tree" || true; fi; work_cleanup "$rc"' EXIT
export CARGO_TARGET_DIR=$target
# The integration tests run from the tree copy; PyJWT's and Selenium's environments stay the
# working tree's (setup.sh).
export TOOLGATE_TEST_PYTHON=${TOOLGATE_TEST_PYTHON:-$root/target/pyjwt/bin/python}
export TOOLGATE_BROWSER_PYTHON=${TOOLGATE_BROWSER_PYTHON:-$root/target/browser/bin/python}

# The tree under test: the working tree's tracked and untracked-but-not-ignored files.
rm -rf "$pristine"
mkdir -p "$pristine" "$tree"
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$pristine"
python3 mutants/apply.py sync "$pristine" "$tree"

install_ext() { (cd "$tree" && cargo pgrx install --pg-config "$PG_CONFIG") >"$1" 2>&1; }

# build_clients DIR LOG: the toolgate command and the client integration tests of the tree, into
# DIR. They talk to the server only, so they are built once, unmutated, and kept; but they compile
# in the maintenance example (crates/cli/src/fixture.rs) and toolgate-core, so a mutant that edits
# examples/ or crates/ gets clients of its own.
build_clients() {
    local dir=$1 log=$2
    mkdir -p "$dir"
    rm -f "$dir"/it-* "$dir/toolgate"
    (cd "$tree" && cargo build --quiet -p toolgate-cli) >"$log" 2>&1 || return 1
    cp "$target/debug/toolgate" "$dir/toolgate"
    (cd "$tree" && cargo test -p pg_toolgate --test '*' --no-run --message-format=json 2>>"$log") |
        python3 mutants/apply.py test-binaries "$dir" && ls "$dir"/it-* >/dev/null 2>&1
}

log "building the unmutated tree in $target (the first time takes several minutes)"
t0=$(date +%s)
install_ext "$work/build-baseline.log" || { cat "$work/build-baseline.log" >&2; exit 2; }
build_clients "$bin" "$work/build-clients.log" || { cat "$work/build-clients.log" >&2; exit 2; }
if [[ " $suites " == *" unit "* ]]; then
    (cd "$tree" && cargo test --quiet -p toolgate-core --no-run) >"$work/build-unit.log" 2>&1 || { cat "$work/build-unit.log" >&2; exit 2; }
fi
log "built in $(( $(date +%s) - t0 ))s"

fresh_cluster() {
    cluster_stop "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work/pg" "$work/keys-demo" "$work/keys-regress" "$work/keys-it" "$work/regress"
    cluster_start "$work/pg" "$port"
}

# Each suite prints the names of the tests that failed, one a line, and returns 0 if it passed,
# 1 if a test failed, 124 on a time-out.
suite_unit() {
    local out=$work/unit.out rc=0
    (cd "$tree" && timeout 900 cargo test --quiet -p toolgate-core) >"$out" 2>&1 || rc=$?
    [ "$rc" = 0 ] && return 0
    [ "$rc" = 124 ] && { echo "unit: time-out"; return 124; }
    local names
    names=$(sed -n 's/^---- \(.*\) stdout ----$/unit:\1/p' "$out")
    if [ -n "$names" ]; then echo "$names"; else echo "unit: does not build or run (exit $rc)"; fi
    return 1
}

suite_demo() {
    local out=$work/demo.out rc=0
    timeout "$t_demo" "$bin/toolgate" demo --host "$work/pg/socket" --port "$port" --dbname toolgate_demo \
        --keys "$work/keys-demo" --server-log "$work/pg/server.log" >"$out" 2>&1 || rc=$?
    [ "$rc" = 0 ] && return 0
    [ "$rc" = 124 ] && { echo "demo: time-out"; return 124; }
    local names
    names=$(sed -n 's/^ *\[BROKEN\] \(.*\)$/demo:\1/p' "$out")
    if [ -n "$names" ]; then echo "$names"; else echo "demo: error: $(grep -m1 '^toolgate:' "$out" | cut -c1-160)"; fi
    return 1
}

suite_regress() {
    local rc=0
    mkdir -p "$work/regress"
    TOOLGATE_ROOT=$tree TOOLGATE_BIN=$bin/toolgate TOOLGATE_KEYS=$work/keys-regress TOOLGATE_MINT=$tree/pg_test/mint \
        timeout "$t_regress" "$PG_REGRESS" --bindir="$PGBIN" --host="$work/pg/socket" --port="$port" --user=postgres \
        --dbname=toolgate_regress --inputdir="$tree/pg_test" --outputdir="$work/regress" \
        --schedule="$tree/pg_test/schedule" >"$work/regress.out" 2>&1 || rc=$?
    [ "$rc" = 0 ] && return 0
    [ "$rc" = 124 ] && { echo "regress: time-out"; return 124; }
    local names
    # PostgreSQL 15's pg_regress prints "test NAME ... FAILED"; 16 and newer print TAP, "not ok N - NAME".
    names=$({ grep -E '\.\.\. *FAILED|\.\.\. *failed' "$work/regress.out" | sed -E 's/^ *(test )?([^ ]+) .*$/regress:\2/'
        sed -nE 's/^not ok [0-9]+ +- +([^ ]+).*$/regress:\1/p' "$work/regress.out"; })
    if [ -n "$names" ]; then echo "$names"; else echo "regress: error (exit $rc)"; fi
    return 1
}

# Run scripts/NAME.sh (of the tree, with the private PostgreSQL: PGBIN is exported) against the
# cluster: $2 its time-out, $3 a sed -E script that prints the names of the tests that failed
# from the script's output.
suite_script() {
    local name=$1 limit=$2 failed=$3 rc=0 out=$work/$1.out
    [ -x "$tree/scripts/$name.sh" ] || return 0
    TOOLGATE_BIN=$bin/toolgate TOOLGATE_TMP=$work TOOLGATE_PG_HOST=$work/pg/socket TOOLGATE_PG_PORT=$port \
        timeout "$limit" "$tree/scripts/$name.sh" >"$out" 2>&1 || rc=$?
    [ "$rc" = 0 ] && return 0
    [ "$rc" = 124 ] && { echo "$name: time-out"; return 124; }
    local names
    names=$(sed -n -E "$failed" "$out" | cut -c1-160)
    if [ -n "$names" ]; then echo "$names"; else echo "$name: error (exit $rc): $(tail -1 "$out" | cut -c1-160)"; fi
    return 1
}

suite_it() {
    local failed=0 timed_out=0 b name rc out
    for b in "$bin"/it-*; do
        name=${b##*/it-}
        [ -z "${MUTANTS_IT:-}" ] || [[ " $MUTANTS_IT " == *" $name "* ]] || continue
        out=$work/it-$name.out
        rc=0
        TOOLGATE_TEST_HOST=$work/pg/socket TOOLGATE_TEST_PORT=$port TOOLGATE_TEST_KEYS=$work/keys-it \
            TOOLGATE_TEST_LOG=$work/pg/server.log timeout "$t_it" "$b" -q >"$out" 2>&1 || rc=$?
        [ "$rc" = 0 ] && continue
        failed=1
        if [ "$rc" = 124 ]; then timed_out=1; echo "it:$name time-out"; continue; fi
        local names
        names=$(sed -n "s/^---- \(.*\) stdout ----\$/it:$name::\1/p" "$out")
        if [ -n "$names" ]; then echo "$names"; else echo "it:$name (exit $rc)"; fi
    done
    [ "$timed_out" = 1 ] && return 124
    return "$failed"
}

# run_suite NAME: one suite of MUTANTS_SUITES.
run_suite() {
    case $1 in
    unit) suite_unit ;;
    demo) suite_demo ;;
    regress) suite_regress ;;
    isolation) suite_script isolation "$t_regress" 's/^ *(test )?([^ ]+) .*\.\.\. *(FAILED|failed).*$/isolation:\2/p; s/^not ok [0-9]+ +- +([^ ]+).*$/isolation:\1/p' ;;
    it) suite_it ;;
    load) suite_script load "$t_load" 's/^ *\[BROKEN\] (.*)$/load:\1/p' ;;
    *) echo "$1: no such suite (MUTANTS_SUITES)"; return 1 ;;
    esac
}

# Run the suites against the installed build; print what failed; return 0 (all passed), 1 (a test
# failed) or 124 (only time-outs). $1: whether the unit suite is relevant.
run_suites() {
    local unit=$1 s rc caught=0 timeouts=0
    fresh_cluster
    for s in $suites; do
        [ "$s" = unit ] && [ "$unit" != 1 ] && continue
        rc=0
        run_suite "$s" || rc=$?
        [ "$rc" = 1 ] && caught=1
        [ "$rc" = 124 ] && timeouts=1
        if [ "$first_fail" = 1 ] && [ "$rc" != 0 ]; then break; fi
    done
    cluster_stop "$work/pg" >/dev/null 2>&1 || true
    [ "$caught" = 1 ] && return 1
    [ "$timeouts" = 1 ] && return 124
    return 0
}

log "baseline (the unmutated tree must pass every suite)"
t0=$(date +%s)
rc=0
baseline=$(run_suites 1) || rc=$?
if [ "$rc" != 0 ]; then
    log "the unmutated tree fails, nothing can be judged:"
    printf '%s\n' "$baseline" >&2
    # What the failing suites printed (their work directory goes at exit): a failure seen only
    # here can then be read.
    for out in "$work"/*.out; do
        grep -qE 'panicked|FAILED|failed|Traceback' "$out" 2>/dev/null || continue
        log "the end of ${out##*/}:"
        tail -n 80 "$out" >&2
    done
    exit 2
fi
log "baseline passed in $(( $(date +%s) - t0 ))s"

results=$work/results.tsv
: >"$results"
survived=0

# Judge the mutant already applied to the tree: $1 its name, $2 the files it changed.
judge() {
    local name=$1 files=$2 t0 unit=0 rc=0 failed verdict build_log
    t0=$(date +%s)
    build_log=$work/build-$(printf '%s' "${name%%:*}" | tr -c 'A-Za-z0-9_.-' '_').log
    grep -q '^crates/' <<<"$files" && unit=1
    bin=$base_bin
    if grep -qE '^(crates|examples)/' <<<"$files"; then
        bin=$work/bin-mutant
        build_clients "$bin" "$build_log.clients" || bin=
    fi
    if [ -z "$bin" ] || ! install_ext "$build_log"; then
        verdict=unviable failed="does not build"
    else
        failed=$(run_suites "$unit") || rc=$?
        case $rc in
        0) verdict=MISSED; survived=1 ;;
        1) verdict=caught ;;
        *) verdict=timeout ;;
        esac
    fi
    local n
    n=$(grep -c . <<<"$failed" || true)
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$verdict" "$(( $(date +%s) - t0 ))" "$n" "$(tr '\n' ';' <<<"$failed" | sed 's/;$//')" >>"$results"
    printf '%-26s %-8s %4ss  %s\n' "$name" "$verdict" "$(( $(date +%s) - t0 ))" "$(head -c 300 <<<"${failed//$'\n'/; }")" >&2
    bin=$base_bin
    python3 mutants/apply.py sync "$pristine" "$tree"
}

t_all=$(date +%s)
if [ "$mode" = named ]; then
    for name in "${names[@]}"; do
        rc=0
        files=$(python3 mutants/apply.py named "$tree" "mutants/named/$name.toml") || rc=$?
        if [ "$rc" != 0 ]; then python3 mutants/apply.py sync "$pristine" "$tree"; exit 3; fi
        judge "$name" "$files"
        if grep -q "^$name	unviable" "$results"; then
            log "$name does not build: see $work/build-$name.log"; tail -20 "$work/build-$name.log" >&2
            python3 mutants/apply.py sync "$pristine" "$tree"; exit 2
        fi
    done
else
    command -v cargo-mutants >/dev/null || { log "--gate needs cargo-mutants (cargo install cargo-mutants --locked)"; exit 2; }
    (cd "$tree" && cargo mutants --list --json -f 'src/gate/*.rs' -f src/config.rs -f src/entry.rs) >"$work/gate-mutants.json"
    total=$(python3 mutants/apply.py count "$work/gate-mutants.json")
    gate_to=${gate_to:-$total}
    log "cargo-mutants lists $total mutants in the gate code; judging $gate_from..$((gate_to - 1))"
    for ((i = gate_from; i < gate_to && i < total; i++)); do
        desc=$(python3 mutants/apply.py describe "$work/gate-mutants.json" "$i")
        files=$(python3 mutants/apply.py listed "$tree" "$work/gate-mutants.json" "$i")
        judge "$i: $desc" "$files"
    done
fi

echo
echo "| mutant | verdict | seconds | tests that failed |"
echo "|---|---|---|---|"
while IFS=$'\t' read -r name verdict secs n failed; do
    echo "| $name | $verdict | $secs | ${failed//;/; } |"
done <"$results"
echo
awk -F'\t' -v secs=$(( $(date +%s) - t_all )) '{c[$2]++} END {printf "mutants: %d judged: %d caught, %d missed, %d timeout, %d unviable (%ds)\n", NR, c["caught"], c["MISSED"], c["timeout"], c["unviable"], secs}' "$results"
[ -n "$work_kept" ] && echo "mutants: results in $results"
exit "$survived"
}
