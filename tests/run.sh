#!/usr/bin/env bash
# The one test runner: runs every unit test binary, then every integration test, and
# ends with one line "total: N passed, N failed" (tests, summed over all suites).
#   tests/run.sh [--unit | --integration] [name-filter]
# LONG=1 also runs the long soak/chaos suites (tests/integration/long_*.py).
set -u
cd "$(dirname "$0")/.." || exit 2
BUILD=${BUILD:-build/rel}
mode=all
case "${1:-}" in
    --unit) mode=unit; shift ;;
    --integration) mode=integration; shift ;;
esac
filter=${1:-}
passed=0; failed=0; broken=()
logdir=$(mktemp -d "${TMPDIR:-/tmp}/ms-test-logs.XXXXXX")

# Reads "N passed, N failed" from the last such line of a suite's output.
tally() {
    local name=$1 log=$2 rc=$3 line p f
    line=$(grep -E '^[a-z]*:? ?[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "  $name: no result line (exit $rc) — counted as 1 failed; log: $log"
        failed=$((failed + 1)); broken+=("$name"); return
    fi
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+')
    f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$f" -gt 0 ] || [ "$rc" -ne 0 ]; then
        broken+=("$name")
        [ "$f" -eq 0 ] && { failed=$((failed + 1)); echo "  $name: exit $rc despite 0 failed — counted as 1 failed"; }
    fi
}

run_suite() {
    local name=$1; shift
    local log="$logdir/$name.log" rc start
    [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && return
    start=$(date +%s)
    # A hung suite must not hang the whole run (CI has a hard limit): SUITE_TIMEOUT_S each.
    # SIGTERM first, so a Python suite's handler stops the daemons it started; KILL 10 s later.
    timeout -k 10 "${SUITE_TIMEOUT_S:-600}" "$@" >"$log" 2>&1; rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "  $name: stopped after ${SUITE_TIMEOUT_S:-600}s (hung?)" | tee -a "$log"
    fi
    grep -E '^(  FAIL|not ok|FAIL)' "$log" | head -n 30
    tally "$name" "$log" "$rc"
    printf '%-40s %s  (%ss)\n' "$name" "$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)" "$(( $(date +%s) - start ))"
}

if [ "$mode" != integration ]; then
    # One binary per tests/unit/test_*.c (a stale binary of a removed source is not run).
    for src in tests/unit/test_*.c; do
        t="$BUILD/t/$(basename "$src" .c)"
        if [ ! -x "$t" ]; then
            echo "  $(basename "$t"): not built — counted as 1 failed"
            failed=$((failed + 1)); broken+=("$(basename "$t")"); continue
        fi
        run_suite "$(basename "$t")" "$t"
    done
fi
if [ "$mode" != unit ]; then
    for t in tests/integration/test_*.py; do
        [ -f "$t" ] || continue
        run_suite "$(basename "$t" .py)" python3 "$t"
    done
    if [ "${LONG:-0}" = 1 ]; then
        for t in tests/integration/long_*.py; do
            [ -f "$t" ] || continue
            # long suites run for up to 30 minutes (long_chaos.py): a bound of their own
            SUITE_TIMEOUT_S=${LONG_SUITE_TIMEOUT_S:-2700} run_suite "$(basename "$t" .py)" python3 "$t"
        done
    fi
fi

if [ ${#broken[@]} -gt 0 ]; then
    echo "failing suites: ${broken[*]} (logs in $logdir)"
else
    rm -rf "$logdir"
fi
echo "total: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
