#!/usr/bin/env bash
# shellcheck disable=SC2016  # $db inside single quotes is JSON, not a shell variable
# tour.sh — what `make tour` runs: a guided tour of one chunk migration. Starts a small
# cluster with test commands (failpoints) in TOUR_DIR on its own ports, shards a
# collection on a ranged _id in 4 chunks on shard0 and loads it, prints the web view's
# URL, then runs `shardctl tour`: the migration of one chunk, held at the end of each of
# its six steps (the donor's moveChunkHangAtStepN failpoints), with what is persisted and
# what a client sees at each. The cluster keeps running afterwards (how to stop it is
# printed). start refuses a TOUR_DIR that already holds a cluster.
#   TOUR_DIR (default ./tour-cluster), TOUR_PORT (base port, default 27700),
#   TOUR_DOCS (default 20000), TOUR_AUTO=1 (no Enter: --auto), TOUR_PAUSE_MS (with it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${TOUR_DIR:-$ROOT/tour-cluster}
PORT=${TOUR_PORT:-27700}
DOCS=${TOUR_DOCS:-20000}
NS=tour.users
ROUTER="tcp://127.0.0.1:$PORT"
ctl() { "$ROOT/bin/shardctl" --host "$ROUTER" "$@"; }
say() { printf '\n== %s\n' "$*"; }

if [ -f "$DIR/cluster.pids" ]; then
    echo "tour: $DIR already holds a cluster. Stop it first (scripts/cluster.sh stop --dir $DIR; rm -rf $DIR)," >&2
    echo "      or pick another: TOUR_DIR=... TOUR_PORT=... make tour" >&2
    exit 1
fi

say "starting a cluster with test commands (--test): 1 config server, 3 shards, 1 router (logs in $DIR)"
"$ROOT/scripts/cluster.sh" start --dir "$DIR" --shards 3 --routers 1 --base-port "$PORT" --test
WEB="http://127.0.0.1:$((PORT + 300))/"
say "the web view, live (the migration in flight while the tour holds it): $WEB"

say "sharding $NS on a ranged _id, split in 4 chunks on shard0, $DOCS documents"
ctl '{"balancerStop": 1, "$db": "admin"}' >/dev/null   # the tour moves the chunk itself
ctl '{"enableSharding": "tour", "primaryShard": "shard0", "$db": "admin"}' >/dev/null
ctl "{\"shardCollection\": \"$NS\", \"key\": {\"_id\": 1}, \"\$db\": \"admin\"}" >/dev/null
for q in 1 2 3; do
    ctl "{\"split\": \"$NS\", \"middle\": {\"_id\": $((DOCS * q / 4))}, \"\$db\": \"admin\"}" >/dev/null
done
quiet=""; [ -t 2 ] || quiet=--quiet
ctl load --ns "$NS" --count "$DOCS" --batch 1000 --size 200 ${quiet:+"$quiet"}

SHARDCTL="bin/shardctl --host $ROUTER"
auto=()
if [ "${TOUR_AUTO:-0}" = 1 ]; then auto=(--auto --pause-ms "${TOUR_PAUSE_MS:-1500}"); fi
say "the tour: $SHARDCTL tour --ns $NS ${auto[*]}"
status=0
ctl tour --ns "$NS" "${auto[@]}" || status=$?

hint() { printf '  %-66s # %s\n' "$1" "$2"; }
printf '\nThe cluster is still running (%s). Go on:\n' "$DIR"
hint "$WEB" "the web view"
hint "$SHARDCTL tour" "another migration, step by step"
hint "$SHARDCTL tour balancer" "one balancer round, step by step"
hint "$SHARDCTL status" "shards, chunks, migrations"
hint "$SHARDCTL changelog --ns $NS" "every step of every migration"
printf 'Stop it:\n  scripts/cluster.sh stop --dir %s && rm -rf %s\n' "$DIR" "$DIR"
exit "$status"
