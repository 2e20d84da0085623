#!/usr/bin/env bash
# A bounded fuzzing campaign over toolgate-core (fuzz/, a crate outside the main workspace):
#   token   key_id, verify_identity and verify_confirmation against fixed registered keys
#   args    parse_args and Contract::check with the maintenance example's write-tool schemas
#   digest  args_digest, args_hmac and the canonical form
#
#   scripts/fuzz.sh SECONDS [TARGET...]     # each target for SECONDS (default 60), one after another
#
# libFuzzer through cargo-fuzz, on the stable toolchain: `--sanitizer none` (the targets are safe
# Rust, so a crash is a panic or an abort) with debug assertions on (integer overflow panics).
# The corpus grows in FUZZ_WORK (target/fuzz-work) from the seeds in fuzz/seeds/; a crash is kept
# there under artifacts/TARGET/ and printed with the command that replays it. Prints, per target,
# the inputs tried, the time and the crashes; exits 1 if any target crashed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(token args digest)

if ! cargo fuzz --version 2>/dev/null | grep -q '0\.13\.'; then
    log "installing cargo-fuzz 0.13.2 (a few minutes)"
    cargo install cargo-fuzz --version 0.13.2 --locked --quiet
fi
work=$(realpath -m "${FUZZ_WORK:-target/fuzz-work}")
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$root/target/fuzz}
flags=(--sanitizer none --debug-assertions --fuzz-dir "$root/fuzz")

mkdir -p "$work"
log "building ${targets[*]}"
for t in "${targets[@]}"; do
    if ! cargo fuzz build "${flags[@]}" "$t" >"$work/build.log" 2>&1; then
        cat "$work/build.log" >&2
        exit 2
    fi
done

crashed=0
summary=()
for t in "${targets[@]}"; do
    corpus=$work/corpus/$t artifacts=$work/artifacts/$t
    mkdir -p "$corpus" "$artifacts"
    seeds=()
    [ -d "fuzz/seeds/$t" ] && seeds=("$root/fuzz/seeds/$t")
    dict=()
    [ "$t" != token ] && dict=(-dict="$root/fuzz/args.dict")
    run_log=$work/$t.log
    rc=0
    cargo fuzz run "${flags[@]}" "$t" "$corpus" "${seeds[@]}" -- \
        -max_total_time="$seconds" -artifact_prefix="$artifacts/" -print_final_stats=1 "${dict[@]}" \
        >"$run_log" 2>&1 || rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$run_log" | tail -1)
    secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$run_log" | tail -1)
    crashes=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
    if [ "$rc" != 0 ] && [ "$crashes" = 0 ]; then
        log "$t failed without leaving an artifact (exit $rc):" >&2
        tail -30 "$run_log" >&2
        crashed=1
    fi
    corpus_size=$(find "$corpus" -type f | wc -l)
    line=$(printf '%-7s inputs tried %10s  seconds %5s  corpus %6s  crashes %s' "$t" "${runs:-?}" "${secs:-$seconds}" "$corpus_size" "$crashes")
    log "$line"
    summary+=("$line")
    if [ "$crashes" != 0 ]; then
        crashed=1
        grep -m5 -E 'panicked at|ERROR: libFuzzer' "$run_log" >&2 || true
        for a in "$artifacts"/*; do
            log "  replay: cargo fuzz run ${flags[*]} $t $a" >&2
        done
    fi
done
echo
for line in "${summary[@]}"; do log "$line"; done
exit "$crashed"
