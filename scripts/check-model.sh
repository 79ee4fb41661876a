#!/usr/bin/env bash
# Model-checks docs/model/migration.pml with spin (docs/model/README.md explains the model).
# Each check generates pan.c with spin -a under build/model/<check>/, compiles it and runs
# it; the correct model must show no error, and each "tooth" (a defect put back with a
# -DBUG_... switch) must make pan report errors: 1 and write a trail.
#   scripts/check-model.sh [--quick] [CHECK ...]
#     (default) up to 2 crashes: the configuration make check-model runs
#     --quick   up to 1 crash for the correct model (make test); the teeth are the same
# Prints one line per check, then "N passed, N failed"; exits non-zero when one failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
MODEL=docs/model/migration.pml
OUT=build/model
CRASH=2
# -O2 takes ~20 s to compile a pan.c on a loaded 2-core machine and pays off only on the
# long searches; the quick ones compile in 2 s at -O0 and still run in seconds.
OPT=-O2
if [ "${1:-}" = "--quick" ]; then CRASH=1; OPT=-O0; shift; fi
command -v spin >/dev/null || { echo "spin not installed: run scripts/deps.sh" >&2; exit 2; }

# name | spin defines | mode (safety or liveness) | expect (clean or trail)
# The correct model is checked once per client (each with the donor, recipient, config
# server, range deleters, refreshers, router and crashes), and for liveness without
# clients: the three clients together are too many states for a complete search on this
# machine (README, "Why one client at a time").
CHECKS=(
  "safety_single_writer|-DMAXCRASH=$CRASH -DNO_W2 -DNO_RD|safety|clean"
  "safety_multi_writer|-DMAXCRASH=$CRASH -DNO_W1 -DNO_RD|safety|clean"
  "safety_reader|-DMAXCRASH=$CRASH -DNO_W1 -DNO_W2|safety|clean"
  "liveness_quiet|-DMAXCRASH=$CRASH -DNO_W1 -DNO_W2 -DNO_RD|liveness|clean"
  "tooth_stale_refresh|-DMAXCRASH=1 -DBUG_STALE_REFRESH -DNO_W2 -DNO_RD|safety|trail"
  "tooth_abort_ack_early|-DMAXCRASH=1 -DBUG_ABORT_ACK_EARLY -DNO_W1 -DNO_W2 -DNO_RD|liveness|trail"
  "tooth_abort_before_start|-DMAXCRASH=1 -DBUG_ABORT_BEFORE_START -DNO_W1 -DNO_W2 -DNO_RD|liveness|trail"
  "tooth_multi_across_commit|-DMAXCRASH=1 -DBUG_MULTI_ACROSS_COMMIT -DNO_W1 -DNO_RD|safety|trail"
)

passed=0; failed=0
run_one() {
    local name=$1 defs=$2 mode=$3 expect=$4 dir=$OUT/$1 cc pan_args log t0 t1
    rm -rf "$dir"; mkdir -p "$dir"
    cp "$MODEL" "$dir/migration.pml"
    if [ "$mode" = safety ]; then
        cc="-DSAFETY -DNOCLAIM"; pan_args="-m300000"
    else
        cc="-DNFAIR=3"; pan_args="-m300000 -a -f"
    fi
    log=$dir/pan.out
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    if ! (cd "$dir" && spin -a $defs migration.pml >spin.out 2>&1 &&
          gcc $OPT -w -DMEMLIM=4096 -DCOLLAPSE $cc -o pan pan.c >gcc.out 2>&1 &&
          ./pan $pan_args >pan.out 2>&1); then
        echo "FAIL $name: spin/gcc/pan did not run (see $dir)"; failed=$((failed + 1)); return
    fi
    t1=$(date +%s.%N)
    local errors states trans secs trail=""
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$log" | tail -1)
    states=$(awk '/states, stored/ {print $1; exit}' "$log")
    trans=$(awk '/transitions \(= / {print $1; exit}' "$log")
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
    [ -f "$dir/migration.pml.trail" ] && trail=" trail=$dir/migration.pml.trail"
    local what="states=$states transitions=$trans seconds=$secs errors=${errors:-?}$trail"
    if grep -q "reached -DMEMLIM bound\|Search not completed\|max search depth too small" "$log" && [ "$expect" = clean ]; then
        echo "FAIL $name: search incomplete ($what)"; failed=$((failed + 1)); return
    fi
    if [ "$expect" = clean ] && [ "${errors:-1}" = 0 ]; then
        echo "ok   $name: no error ($what)"; passed=$((passed + 1))
    elif [ "$expect" = trail ] && [ "${errors:-0}" -ge 1 ] && [ -n "$trail" ]; then
        local why
        why=$(grep -m1 "^pan:1:" "$log" | sed 's/^pan:1: //')
        echo "ok   $name: counterexample found: $why ($what)"; passed=$((passed + 1))
    else
        echo "FAIL $name: expected $expect ($what)"; failed=$((failed + 1))
    fi
}

for c in "${CHECKS[@]}"; do
    IFS='|' read -r name defs mode expect <<<"$c"
    if [ $# -gt 0 ]; then
        want=0; for a in "$@"; do [ "$a" = "$name" ] && want=1; done
        [ $want = 1 ] || continue
    fi
    run_one "$name" "$defs" "$mode" "$expect"
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
