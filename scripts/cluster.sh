#!/usr/bin/env bash
# cluster.sh — start, stop and inspect a local minishard cluster on 127.0.0.1.
#
#   scripts/cluster.sh start --dir DIR [--shards N] [--routers M] [--base-port P] [--test]
#                            [--config-flags "FLAGS"] [--reuse]
#   scripts/cluster.sh stop --dir DIR
#   scripts/cluster.sh status --dir DIR
#   scripts/cluster.sh add-shard --dir DIR
#   scripts/cluster.sh restart --dir DIR NAME [--kill]
#
# start launches one config server, N shards (default 3) and M routers (default 1),
# waits until each prints its `ready url=...` line, registers the shards (shard0,
# shard1, ...) through the first router, and prints one line per process:
#   NAME URL PID WIRE
# WIRE is the mongodb:// URL where a router or shard serves MongoDB's wire protocol
# (mongosh, drivers), "-" for the config server. Ports: routerI = P+I, config = P+10,
# shardI = P+20+I; wire: routerI = P+100+I, shardI = P+200+I (P defaults to 27017, so
# router0 is on shardctl's default URL and mongodb://127.0.0.1:27117; $MS_BASE_PORT changes
# that default, with $MS_HOST, shardctl's default URL, set to router0's); the config server's
# live web view (--http-port) on P+300, http://127.0.0.1:27317/ by default, whose URL is
# printed on stderr as `web http://127.0.0.1:PORT/` (stdout keeps one line per process,
# which scripts parse). All listen on 127.0.0.1 only. --test adds --enable-test-commands to every
# process (--enable-test-commands is the same). --config-flags passes more flags to the
# config server (e.g. "--balancer-idle-ms 500 --balancer-throttle-ms 100"). start refuses a
# DIR that holds an earlier cluster's catalog and data unless --reuse (keep them: the same
# shards and ports come back); to start afresh, stop it and remove DIR, or pick a new --dir.
# add-shard starts the next shardI into the same DIR and registers it. restart stops one
# process (NAME as printed: config, shardI, routerI) with SIGTERM, or with --kill as a crash
# would (kill -9), starts it again with the same command line, waits until it is ready and
# prints its line. Logs and data live under DIR (NAME.log is appended to across restarts);
# DIR/cluster.pids holds a `NAME URL PID BINARY` line for exactly the processes this script
# started, DIR/NAME.argv the command line each was started with (NUL-separated, as
# /proc/PID/cmdline shows it), and stop and restart signal only those PIDs (never by name).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MS_BIN:-$ROOT/bin}   # make SAN=... test points it at the sanitizer build
READY_TIMEOUT_S=20

die() { echo "cluster.sh: $*" >&2; exit 1; }

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'   # the header comment
    exit "${1:-0}"
}

cmd=${1:-}; [ -n "$cmd" ] || usage 2; shift
case "$cmd" in -h|--help|help) usage 0 ;; esac
dir=""; shards=3; shards_given=0; routers=1; base=${MS_BASE_PORT:-27017}; base_given=0; test_flag=""; config_flags=""
reuse=0; kill_flag=0; target=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir=$2; shift 2 ;;
        --shards) shards=$2; shards_given=1; shift 2 ;;
        --routers) routers=$2; shift 2 ;;
        --base-port) base=$2; base_given=1; shift 2 ;;
        --test|--enable-test-commands) test_flag="--enable-test-commands"; shift ;;
        --config-flags) config_flags=$2; shift 2 ;;
        --reuse) reuse=1; shift ;;
        --kill) kill_flag=1; shift ;;
        -h|--help) usage 0 ;;
        [a-z]*) if [ "$cmd" != restart ] || [ -n "$target" ]; then die "unexpected argument '$1'"; fi
                target=$1; shift ;;
        *) die "unknown argument '$1'" ;;
    esac
done
[ -n "$dir" ] || die "--dir DIR is required"
in_range() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
in_range "$shards" 1 64 || die "--shards must be 1..64"
in_range "$routers" 0 10 || die "--routers must be 0..10"
in_range "$base" 1024 65000 || die "--base-port must be 1024..65000"
pids="$dir/cluster.pids"

# is_ours PID PATH [NAME]: the PID is alive and still runs the binary at PATH, as recorded
# in cluster.pids when it was started (guards against PID reuse). The path is the one it was
# started with, whatever MS_BIN is now; a bare name (older pids files) means $BIN/NAME.
# With NAME, its whole command line must also be the one kept in DIR/NAME.argv.
is_ours() {
    local path=$2 argv0
    [[ "$path" == /* ]] || path="$BIN/$path"
    [ -r "/proc/$1/cmdline" ] || return 1
    argv0=$(tr '\0' '\n' 2>/dev/null <"/proc/$1/cmdline" | head -n 1) || return 1
    [ "$argv0" = "$path" ] || return 1
    # (not cmp: /proc files claim size 0, and cmp takes differing sizes as a difference)
    [ -z "${3:-}" ] || [ "$(tr '\0' '\n' <"/proc/$1/cmdline")" = "$(tr '\0' '\n' <"$dir/$3.argv")" ]
}

wait_ready() {  # NAME LOG PID [FROM_BYTE: the log before it is an earlier run's]
    local i from=${4:-0}
    for ((i = 0; i < READY_TIMEOUT_S * 10; i++)); do
        tail -c +$((from + 1)) "$2" 2>/dev/null | grep -q " ready url=" && return 0
        kill -0 "$3" 2>/dev/null || { tail -n 20 "$2" >&2; die "$1 exited before it was ready (log: $2)"; }
        sleep 0.1
    done
    tail -n 20 "$2" >&2
    die "$1 not ready after ${READY_TIMEOUT_S}s (log: $2)"
}

# run NAME ARGV...: start one daemon with its log appended to DIR/NAME.log, record its PID
# in cluster.pids (before waiting, so that stop finds it even if it never gets ready), wait
# until it is ready and print its `NAME URL PID WIRE` line. URL and WIRE come from the
# --port and --wire-port in ARGV.
run() {
    local name=$1; shift
    local log="$dir/$name.log" port="" wire=- from pid i j
    for ((i = 1; i < $#; i++)); do
        case "${!i}" in
            --port) j=$((i + 1)); port=${!j} ;;
            --wire-port) j=$((i + 1)); wire="mongodb://127.0.0.1:${!j}" ;;
        esac
    done
    from=$(stat -c %s "$log" 2>/dev/null || echo 0)
    # setsid: the daemons outlive this script and a Ctrl-C in the terminal that ran it.
    setsid "$@" >>"$log" 2>&1 </dev/null &
    pid=$!
    if grep -q "^$name " "$pids" 2>/dev/null; then
        awk -v n="$name" -v p="$pid" '$1 == n { $3 = p } { print }' "$pids" >"$pids.tmp"
        mv "$pids.tmp" "$pids"
    else
        echo "$name tcp://127.0.0.1:$port $pid $1" >>"$pids"
    fi
    wait_ready "$name" "$log" "$pid" "$from"
    echo "$name tcp://127.0.0.1:$port $pid $wire"
}

launch() {  # NAME BINARY PORT WIRE_PORT(0: none) ARGS...: a new process of this cluster
    local name=$1 binary=$2 port=$3 wport=$4; shift 4
    local argv=("$BIN/$binary" --port "$port")
    [ "$wport" -eq 0 ] || argv+=(--wire-port "$wport")
    # shellcheck disable=SC2206  # test_flag is one flag or none
    argv+=("$@" $test_flag)
    : >"$dir/$name.log"
    printf '%s\0' "${argv[@]}" >"$dir/$name.argv"
    run "$name" "${argv[@]}"
}

wait_gone() {  # PID BINARY NAME TENTHS_OF_SECONDS: succeeds once that process has exited
    local i
    for ((i = 0; i < $4; i++)); do is_ours "$1" "$2" "$3" || return 0; sleep 0.1; done
    return 1
}

# restart NAME: stop the process (SIGTERM and wait, or kill -9 with --kill) if it is still
# the one this script started, then run it again from DIR/NAME.argv.
restart() {
    local name=$1 url pid binary argv=()
    read -r _ url pid binary < <(awk -v n="$name" '$1 == n' "$pids") ||
        die "no process named '$name' in $dir (names: $(awk '{print $1}' "$pids" | tr '\n' ' '))"
    [ -s "$dir/$name.argv" ] ||
        die "$dir/$name.argv missing (the cluster was started by an older cluster.sh): stop and start it again"
    mapfile -d '' argv <"$dir/$name.argv"
    if is_ours "$pid" "$binary" "$name"; then
        if [ "$kill_flag" = 1 ]; then kill -KILL "$pid"; else kill -TERM "$pid"; fi
        if ! wait_gone "$pid" "$binary" "$name" 100; then
            kill -KILL "$pid"
            echo "cluster.sh: $name pid $pid did not stop in 10 s: killed" >&2
            wait_gone "$pid" "$binary" "$name" 50 || die "$name pid $pid still runs after kill -9"
        fi
    else
        echo "cluster.sh: $name pid $pid was not running; starting it" >&2
    fi
    run "$name" "${argv[@]}"
}

ctl() {  # URL JSON
    "$BIN/shardctl" --host "$1" "$2" >/dev/null || die "command failed on $1: $2"
}

admin_url() {  # the first router, or the config server when there is none
    awk '$1 ~ /^router/ {print $2; exit}' "$pids" | grep . || awk '$1 == "config" {print $2}' "$pids"
}

start_shard() {  # INDEX
    local i=$1 name="shard$1"
    mkdir -p "$dir/$name"
    launch "$name" shardd $((base + 20 + i)) $((base + 200 + i)) --dbpath "$dir/$name" --name "$name"
    ctl "$(admin_url)" "{\"addShard\": \"tcp://127.0.0.1:$((base + 20 + i))\", \"name\": \"$name\", \"\$db\": \"admin\"}"
}

# Never a second set of processes on one cluster's data: refuse while any runs.
refuse_running() {
    local name pid binary running=""
    [ -f "$pids" ] || return 0
    while read -r name _ pid binary; do
        if is_ours "$pid" "$binary"; then running+=" $name (pid $pid)"; fi
    done <"$pids"
    [ -z "$running" ] ||
        die "a cluster is already running in $dir:$running; stop it first: scripts/cluster.sh stop --dir $dir"
    rm -f "$pids"
}

# An earlier cluster's catalog and shard data in DIR are reused only when asked (--reuse),
# with the ports and shards they were registered with; otherwise say what is there and how on.
check_old_data() {
    local old="" d n=0 was
    [ -f "$dir/config/config.db" ] && old=" the catalog (config)"
    for d in "$dir"/shard*/; do
        if [ -n "$(ls -A "$d" 2>/dev/null)" ]; then old+=" $(basename "$d")"; n=$((n + 1)); fi
    done
    [ -n "$old" ] || return 0
    [ "$reuse" = 1 ] || die "$dir holds an earlier cluster:$old.
  keep its data:  scripts/cluster.sh start --dir $dir --reuse ...
  start afresh:   remove $dir (after scripts/cluster.sh stop --dir $dir if it runs) or use a new --dir"
    was=$(sed -n 's/^base=\([0-9]*\).*/\1/p' "$dir/cluster.conf" 2>/dev/null)
    if [ -n "$was" ] && [ "$was" != "$base" ]; then
        [ "$base_given" = 0 ] || die "--reuse: $dir was started with --base-port $was (its catalog names those ports)"
        base=$was
    fi
    # every shard the catalog knows comes back; --shards N beyond them adds new ones
    if [ "$shards_given" = 0 ] || [ "$shards" -lt "$n" ]; then shards=$n; fi
}

case "$cmd" in
start)
    for b in configsvr shardd router shardctl; do [ -x "$BIN/$b" ] || die "$BIN/$b missing: run make first"; done
    refuse_running
    check_old_data
    mkdir -p "$dir/config"
    echo "base=$base test=$test_flag" >"$dir/cluster.conf"
    # shellcheck disable=SC2086  # config_flags is a list of flags: split on purpose
    launch config configsvr $((base + 10)) 0 --dbpath "$dir/config" --http-port $((base + 300)) $config_flags
    echo "web http://127.0.0.1:$((base + 300))/" >&2
    for ((r = 0; r < routers; r++)); do
        launch "router$r" router $((base + r)) $((base + 100 + r)) --configdb "tcp://127.0.0.1:$((base + 10))"
    done
    for ((s = 0; s < shards; s++)); do start_shard "$s"; done
    ;;
stop)
    [ -f "$pids" ] || die "no cluster in $dir ($pids missing)"
    while read -r name _ pid binary; do
        if is_ours "$pid" "$binary"; then kill -TERM "$pid" 2>/dev/null || true; echo "stopping $name pid $pid"; fi
    done <"$pids"
    for ((i = 0; i < 100; i++)); do
        alive=0
        while read -r _ _ pid binary; do is_ours "$pid" "$binary" && alive=1; done <"$pids"
        [ $alive = 0 ] && break
        sleep 0.1
    done
    while read -r name _ pid binary; do
        if is_ours "$pid" "$binary"; then kill -KILL "$pid" 2>/dev/null || true; echo "killed $name pid $pid (did not stop in 10 s)"; fi
    done <"$pids"
    # Forget the cluster only when nothing it started still runs; otherwise keep the file
    # (so a later stop can finish the job) and say which process is left and why.
    sleep 0.2
    left=0
    while read -r name _ pid binary; do
        if is_ours "$pid" "$binary"; then
            echo "cluster.sh: $name pid $pid ($binary) is still running; keeping $pids" >&2
            left=1
        elif [ -n "$(tr -d '\0' 2>/dev/null <"/proc/$pid/cmdline")" ]; then
            # (an exited process not yet reaped has an empty command line: it is gone)
            echo "$name: pid $pid now runs another program (not $binary); left alone"
        fi
    done <"$pids"
    [ $left = 0 ] || exit 1
    rm -f "$pids"
    ;;
status)
    [ -f "$pids" ] || die "no cluster in $dir ($pids missing)"
    while read -r name url pid binary; do
        if is_ours "$pid" "$binary"; then
            if "$BIN/shardctl" --host "$url" --timeout 2000 '{"ping": 1}' >/dev/null 2>&1; then state=up; else state="not answering"; fi
        else
            state=dead
        fi
        echo "$name $url $pid $state"
    done <"$pids"
    ;;
restart)
    [ -f "$pids" ] || die "no cluster in $dir ($pids missing)"
    [ -n "$target" ] || die "restart needs the NAME of a process (config, shardI, routerI)"
    restart "$target"
    ;;
add-shard)
    [ -f "$pids" ] || die "no cluster in $dir ($pids missing)"
    # shellcheck disable=SC1091
    base=$(sed -n 's/^base=\([0-9]*\).*/\1/p' "$dir/cluster.conf")
    grep -q -- "--enable-test-commands" "$dir/cluster.conf" && test_flag="--enable-test-commands"
    n=$(awk '$1 ~ /^shard[0-9]+$/' "$pids" | wc -l)
    start_shard "$n"
    ;;
*)
    usage 2 ;;
esac
