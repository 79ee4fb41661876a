#!/usr/bin/env bash
# cluster.sh — start, stop and inspect a local minishard cluster on 127.0.0.1.
#
#   scripts/cluster.sh start --dir DIR [--shards N] [--routers M] [--base-port P] [--test]
#                            [--config-flags "FLAGS"]
#   scripts/cluster.sh stop --dir DIR
#   scripts/cluster.sh status --dir DIR
#   scripts/cluster.sh add-shard --dir DIR
#
# start launches one config server, N shards (default 3) and M routers (default 1),
# waits until each prints its `ready url=...` line, registers the shards (shard0,
# shard1, ...) through the first router, and prints one line per process:
#   NAME URL PID WIRE
# WIRE is the mongodb:// URL where a router or shard serves MongoDB's wire protocol
# (mongosh, drivers), "-" for the config server. Ports: routerI = P+I, config = P+10,
# shardI = P+20+I; wire: routerI = P+100+I, shardI = P+200+I (P defaults to 27017, so
# router0 is on shardctl's default URL and mongodb://127.0.0.1:27117); the config server's
# live web view (--http-port) on P+300, http://127.0.0.1:27317/ by default, whose URL is
# printed on stderr as `web http://127.0.0.1:PORT/` (stdout keeps one line per process,
# which scripts parse). All listen on 127.0.0.1 only. --test adds --enable-test-commands to every
# process. --config-flags passes more flags to the config server (e.g. "--balancer-idle-ms
# 500 --balancer-throttle-ms 100"). add-shard starts the next shardI into the same DIR and
# registers it. Logs and data live under DIR; DIR/cluster.pids lists exactly the processes
# this script started, and stop ends exactly those PIDs (never by name).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MS_BIN:-$ROOT/bin}   # make SAN=... test points it at the sanitizer build
READY_TIMEOUT_S=20

die() { echo "cluster.sh: $*" >&2; exit 1; }

usage() {
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

cmd=${1:-}; [ -n "$cmd" ] || usage 2; shift
dir=""; shards=3; routers=1; base=27017; test_flag=""; config_flags=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) dir=$2; shift 2 ;;
        --shards) shards=$2; shift 2 ;;
        --routers) routers=$2; shift 2 ;;
        --base-port) base=$2; shift 2 ;;
        --test) test_flag="--enable-test-commands"; shift ;;
        --config-flags) config_flags=$2; shift 2 ;;
        -h|--help) usage 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
[ -n "$dir" ] || die "--dir DIR is required"
in_range() { [[ "$1" =~ ^[0-9]+$ ]] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
in_range "$shards" 1 64 || die "--shards must be 1..64"
in_range "$routers" 0 10 || die "--routers must be 0..10"
in_range "$base" 1024 65000 || die "--base-port must be 1024..65000"
pids="$dir/cluster.pids"

# is_ours PID PATH: the PID is alive and still runs the binary at PATH, as recorded in
# cluster.pids when it was started (guards against PID reuse). The path is the one it was
# started with, whatever MS_BIN is now; a bare name (older pids files) means $BIN/NAME.
is_ours() {
    local path=$2 argv0
    [[ "$path" == /* ]] || path="$BIN/$path"
    [ -r "/proc/$1/cmdline" ] || return 1
    argv0=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | head -n 1) || return 1
    [ "$argv0" = "$path" ]
}

wait_ready() {  # NAME LOG PID
    local i
    for ((i = 0; i < READY_TIMEOUT_S * 10; i++)); do
        grep -q " ready url=" "$2" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || { tail -n 20 "$2" >&2; die "$1 exited before it was ready (log: $2)"; }
        sleep 0.1
    done
    tail -n 20 "$2" >&2
    die "$1 not ready after ${READY_TIMEOUT_S}s (log: $2)"
}

launch() {  # NAME BINARY PORT WIRE_PORT(0: none) ARGS...
    local name=$1 binary=$2 port=$3 wport=$4; shift 4
    local url="tcp://127.0.0.1:$port" log="$dir/$name.log" pid wire=- wflags=()
    if [ "$wport" -gt 0 ]; then
        wflags=(--wire-port "$wport")
        wire="mongodb://127.0.0.1:$wport"
    fi
    : >"$log"
    # setsid: the daemons outlive this script and a Ctrl-C in the terminal that ran it.
    setsid "$BIN/$binary" --port "$port" "${wflags[@]}" "$@" $test_flag >>"$log" 2>&1 </dev/null &
    pid=$!
    echo "$name $url $pid $BIN/$binary" >>"$pids"
    wait_ready "$name" "$log" "$pid"
    echo "$name $url $pid $wire"
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

case "$cmd" in
start)
    for b in configsvr shardd router shardctl; do [ -x "$BIN/$b" ] || die "$BIN/$b missing: run make first"; done
    if [ -f "$pids" ]; then
        while read -r _ _ pid binary; do
            is_ours "$pid" "$binary" && die "a cluster is already running in $dir (stop it first)"
        done <"$pids"
        rm -f "$pids"
    fi
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
