#!/usr/bin/env bash
# Sanitizer and fuzzing stage of CI: asan + tsan workflow presets, then bounded libFuzzer runs over the seed corpora.
#
#   bash scripts/sanitize.sh                 # everything (called by .ci/run)
#   bash scripts/sanitize.sh asan|tsan|fuzz  # one stage
#
# Environment: ROTARY_FUZZ_SECONDS (default 60) per fuzz target.
# Exit status is non-zero if any stage fails (a sanitizer report, a failing test, a fuzz crash). Crash
# inputs are written to build-fuzz/artifacts/; add them to fuzz/corpus/<target>/ as regression cases
# (tests/hostile/fuzz_replay_test.cc replays that folder in every normal test run).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
FUZZ_SECONDS="${ROTARY_FUZZ_SECONDS:-60}"
WHAT="${1:-all}"

declare -a SUMMARY=()
failed=0

stage() {  # stage NAME COMMAND...
  local name="$1"; shift
  local t0=$SECONDS
  printf '\n==> [sanitize] %s: %s\n' "$name" "$*" >&2
  if "$@"; then
    SUMMARY+=("$name ok $((SECONDS - t0))s")
  else
    SUMMARY+=("$name FAILED $((SECONDS - t0))s")
    failed=1
  fi
}

run_fuzzer() {  # run_fuzzer TARGET
  local t="$1" bin="build-fuzz/fuzz/fuzz_$1"
  local work="build-fuzz/corpus-work/$t"
  mkdir -p "$work" build-fuzz/artifacts
  [[ -x "$bin" ]] || { echo "missing $bin" >&2; return 1; }
  # New inputs go to the scratch folder (first dir); the repo's corpus is only read.
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1" \
    "$bin" -max_total_time="$FUZZ_SECONDS" -timeout=20 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
    -artifact_prefix="build-fuzz/artifacts/$t-" "$work" "fuzz/corpus/$t" 2>&1 | tail -n 25
}

if [[ "$WHAT" == all || "$WHAT" == asan ]]; then
  stage asan cmake --workflow --preset asan
fi
if [[ "$WHAT" == all || "$WHAT" == tsan ]]; then
  stage tsan cmake --workflow --preset tsan
fi
if [[ "$WHAT" == all || "$WHAT" == fuzz ]]; then
  if command -v clang++ >/dev/null 2>&1; then
    stage fuzz-build cmake --workflow --preset fuzz
    # Two fuzzers at a time (each is one process; CI machines have two cores): every target still gets
    # its FUZZ_SECONDS, in half the wall time. Each pair's output is printed once both have finished.
    targets=(config npy apply spec)
    for ((i = 0; i < ${#targets[@]}; i += 2)); do
      pair=("${targets[@]:i:2}")
      for t in "${pair[@]}"; do
        ( t0=$SECONDS; run_fuzzer "$t" >"build-fuzz/fuzz-$t.log" 2>&1; rc=$?; echo "$rc $((SECONDS - t0))" >"build-fuzz/fuzz-$t.rc" ) &
      done
      wait
      for t in "${pair[@]}"; do
        printf '\n==> [sanitize] fuzz-%s (%ss)\n' "$t" "$FUZZ_SECONDS" >&2
        cat "build-fuzz/fuzz-$t.log"
        read -r rc secs <"build-fuzz/fuzz-$t.rc"
        if [[ "$rc" == 0 ]]; then
          SUMMARY+=("fuzz-$t(${FUZZ_SECONDS}s) ok ${secs}s")
        else
          SUMMARY+=("fuzz-$t(${FUZZ_SECONDS}s) FAILED ${secs}s")
          failed=1
        fi
      done
    done
  else
    SUMMARY+=("fuzz SKIPPED (clang++ not found)")
    failed=1
  fi
fi

printf '\nsanitize summary: %s\n' "$(IFS=';'; echo "${SUMMARY[*]}")"
exit "$failed"
