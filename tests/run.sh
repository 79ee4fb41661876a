#!/usr/bin/env bash
# The one test runner: runs every unit test binary, then every integration test, and
# ends with one line "total: N passed, N failed" (tests, summed over all suites).
#   tests/run.sh [--unit | --integration] [name-filter]
# LONG=1 also runs the long soak/chaos suites (tests/integration/long_*.py).
# JOBS=N runs up to N integration suites at once (default 1). Every suite starts its own
# daemons on free ports from a random base and its own temp dirs, so suites do not meet;
# most of a suite's time is waiting (for processes to start, migrations to commit), which
# is why two at once on two cores take far less than twice as long. Unit tests and the
# long suites always run one at a time.
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

# Runs one suite into its log; leaves its exit status and seconds in $log.rc.
# A hung suite must not hang the whole run (CI has a hard limit): SUITE_TIMEOUT_S each.
# SIGTERM first, so a Python suite's handler stops the daemons it started; KILL 10 s later.
suite_exec() {
    local name=$1 log=$2; shift 2
    local rc start
    start=$(date +%s)
    timeout -k 10 "${SUITE_TIMEOUT_S:-600}" "$@" >"$log" 2>&1; rc=$?
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "  $name: stopped after ${SUITE_TIMEOUT_S:-600}s (hung?)" >>"$log"
    fi
    echo "$rc $(( $(date +%s) - start ))" >"$log.rc"
}

# Prints a finished suite's failures and result line, and adds it to the totals.
suite_report() {
    local name=$1 log="$logdir/$1.log" rc secs
    read -r rc secs <"$log.rc"
    grep -E '^(  FAIL|not ok|FAIL)|: stopped after' "$log" | head -n 30
    tally "$name" "$log" "$rc"
    printf '%-40s %s  (%ss)\n' "$name" "$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)" "$secs"
}

run_suite() {
    local name=$1; shift
    [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && return
    suite_exec "$name" "$logdir/$name.log" "$@"
    suite_report "$name"
}

# Runs the named Python suites, up to JOBS at once, reporting each as it ends.
declare -A running=()   # pid -> suite name
run_pool() {
    local jobs=${JOBS:-1} t name pid
    [ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
    for t in "$@"; do
        name=$(basename "$t" .py)
        [ -n "$filter" ] && [[ "$name" != *"$filter"* ]] && continue
        while [ ${#running[@]} -ge "$jobs" ]; do pool_reap; done
        suite_exec "$name" "$logdir/$name.log" python3 "$t" &
        running[$!]=$name
    done
    while [ ${#running[@]} -gt 0 ]; do pool_reap; done
}

# Waits for one running suite to end and reports it.
pool_reap() {
    local pid
    wait -n -p pid "${!running[@]}" || true
    [ -n "$pid" ] && [ -n "${running[$pid]:-}" ] || return 0
    suite_report "${running[$pid]}"
    unset "running[$pid]"
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
    run_pool tests/integration/test_*.py
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
