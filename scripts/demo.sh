#!/usr/bin/env bash
# shellcheck disable=SC2016  # $db inside single quotes is JSON, not a shell variable
# demo.sh — what `make demo` runs: the balancer at work on a local cluster. 3 shards, a
# collection sharded on a ranged _id and loaded on its primary shard; the balancer (fast
# rounds, a small test-only chunk size) splits it and spreads the chunks over the 3
# shards; then a 4th shard is added and filled. Both phases are shown live by
# `shardctl watch --bars` (chunks per shard as bars, migrations in flight with their phase
# and progress, the balancer's last rounds) until the cluster is balanced; then the
# changelog's summary of the migrations and how to explore and stop the cluster, which
# keeps running afterwards: commands that work pasted in order from the repository's
# root (tests/integration/test_demo.py runs each), then `Next: make tour` (not indented:
# a pointer to the guided tour of one migration, which starts a cluster of its own). For the demo only, each migration
# waits for its range deletion (_waitForDelete), so each one stays on screen.
#   DEMO_DIR (default ./demo-cluster), DEMO_DOCS (default 200000), DEMO_PORT (28017: its
#   own ports, so that a cluster on cluster.sh's default ports, 27017.., can run beside it),
#   DEMO_CHUNK_BYTES (chunk size, default 2 MiB: ~20 chunks of ~9,000 documents).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${DEMO_DIR:-$ROOT/demo-cluster}
DOCS=${DEMO_DOCS:-200000}
PORT=${DEMO_PORT:-28017}
CHUNK_BYTES=${DEMO_CHUNK_BYTES:-2097152}
NS=demo.users
ROUTER="tcp://127.0.0.1:$PORT"
# A round every second when idle (default 10 s); between two batches of migrations
# MongoDB's own default pause of 1 s, slow enough to watch each move happen.
CONFIG_FLAGS="--balancer-idle-ms 1000 --balancer-throttle-ms 1000"
ctl() { "$ROOT/bin/shardctl" --host "$ROUTER" "$@"; }
# The hints at the end are typed from the repository's root: shardctl there names the
# router unless it is on shardctl's default URL (27017, when DEMO_PORT says so).
SHARDCTL=bin/shardctl
[ "$PORT" = 27017 ] || SHARDCTL="bin/shardctl --host $ROUTER"
if [ -t 1 ]; then
    say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
    WATCH_MS=500
else
    say() { printf '\n== %s\n' "$*"; }
    WATCH_MS=1000
fi
# Each watch ends once balanced; 240 frames is a bound in case it never is.
watch_balanced() {
    ctl watch --bars --ns "$NS" --until-balanced --interval-ms "$WATCH_MS" --count 240 --rounds 4 ||
        echo "demo: not balanced after 240 frames (see the rounds above and $DIR/config.log); going on"
}

if [ -f "$DIR/cluster.pids" ]; then
    say "stopping the previous demo cluster in $DIR"
    "$ROOT/scripts/cluster.sh" stop --dir "$DIR" ||
        { echo "demo: the previous cluster in $DIR could not be stopped (see above); not starting another" >&2; exit 1; }
fi
rm -rf "$DIR"
t0=$SECONDS

say "starting a cluster: 1 config server (a balancer round every second), 3 shards, 1 router (logs in $DIR)"
"$ROOT/scripts/cluster.sh" start --dir "$DIR" --shards 3 --routers 1 --base-port "$PORT" --test \
    --config-flags "$CONFIG_FLAGS"
say "watch it live in a browser: http://127.0.0.1:$((PORT + 300))/ (the config server's web view)"

say "demo pace (for the demo only): each migration also waits for the donor's range deletion (config.settings balancer _waitForDelete: true), so it stays on screen a second or more"
say "sharding $NS on a ranged _id (one chunk, on shard0), chunk size $CHUNK_BYTES bytes (test-only valueBytes)"
ctl '{"balancerStop": 1, "$db": "admin"}' >/dev/null     # still while the data is loaded
ctl "{\"update\": \"settings\", \"\$db\": \"config\", \"updates\": [{\"q\": {\"_id\": \"chunksize\"}, \"u\": {\"\$set\": {\"valueBytes\": $CHUNK_BYTES}}, \"upsert\": true}]}" >/dev/null
# The demo's pace, for the demo only: each migration waits for its range deletion on the
# donor (MongoDB's balancer setting _waitForDelete), ~1-2 s for a chunk of ~11,700
# documents at the range deleter's default pace, so every move stays on screen.
ctl '{"update": "settings", "$db": "config", "updates": [{"q": {"_id": "balancer"}, "u": {"$set": {"_waitForDelete": true}}, "upsert": true}]}' >/dev/null
ctl '{"enableSharding": "demo", "primaryShard": "shard0", "$db": "admin"}' >/dev/null
ctl "{\"shardCollection\": \"$NS\", \"key\": {\"_id\": 1}, \"\$db\": \"admin\"}" >/dev/null

say "loading $DOCS documents (~200 bytes) through the router: all land in shard0's one chunk"
quiet=""; [ -t 2 ] || quiet=--quiet   # the progress line is for a terminal
ctl load --ns "$NS" --count "$DOCS" --batch 1000 --size 200 ${quiet:+"$quiet"}

say "balancer on: it splits the chunk (autoSplitVector) and spreads the chunks over 3 shards"
ctl '{"balancerStart": 1, "$db": "admin"}' >/dev/null
watch_balanced

say "adding a 4th shard: the balancer fills it, one migration per shard at a time"
"$ROOT/scripts/cluster.sh" add-shard --dir "$DIR"
watch_balanced

say "what the migrations cost (config.changelog)"
ctl changelog --ns "$NS" --summary
printf '  documents through the router: %s\n' "$(ctl '{"count": "users", "$db": "demo"}')"
printf '  demo time: %d s\n' $((SECONDS - t0))

# A chunk of $NS and a shard it is not on, from the live chunk map, for the moveChunk
# hint: the last chunk in key order (its min is a plain _id; the first one's is MinKey).
json_field() { { grep -o "\"$1\" : $2" || true; } | head -n 1 | sed "s/^\"$1\" : //"; }
coll_uuid=$(ctl "{\"find\": \"collections\", \"\$db\": \"config\", \"filter\": {\"_id\": \"$NS\"}}" |
    json_field uuid '{ "$binary" : { "base64" : "[^"]*", "subType" : "04" } }')
last_chunk=$(ctl "{\"find\": \"chunks\", \"\$db\": \"config\", \"filter\": {\"uuid\": $coll_uuid}, \"sort\": {\"min\": -1}, \"limit\": 1}")
move_id=$(json_field min '{ "_id" : [0-9]* }' <<<"$last_chunk" | tr -dc '0-9')
from_shard=$(json_field shard '"[^"]*"' <<<"$last_chunk" | tr -d '"')
to_shard=$(ctl "{\"find\": \"shards\", \"\$db\": \"config\", \"filter\": {\"_id\": {\"\$ne\": \"$from_shard\"}}, \"limit\": 1}" |
    json_field _id '"[^"]*"' | tr -d '"')

hint() { printf '  %-46s # %s\n' "$1" "$2"; }
printf '\nThe cluster is still running. Explore it (the commands work pasted in this order):\n'
hint "http://127.0.0.1:$((PORT + 300))/" "the live web view: open it in a browser"
hint "$SHARDCTL status" "shards, balancer, migrations, chunks per shard"
if [ -x "$ROOT/build/mongosh/node_modules/.bin/mongosh" ]; then
    hint "build/mongosh/node_modules/.bin/mongosh mongodb://127.0.0.1:$((PORT + 100))" "MongoDB's shell: sh.status(), db.users.find()"
fi
hint "$SHARDCTL watch --bars" "the view above, live, until Ctrl-C (plain: watch)"
hint "$SHARDCTL explain-balance $NS" "why the balancer would or would not move now"
hint "$SHARDCTL changelog --ns $NS" "every split and migration step (--summary: costs)"
hint "tail -f $DIR/config.log" "the balancer's log lines, until Ctrl-C"
hint "$SHARDCTL '{\"balancerStop\": 1, \"\$db\": \"admin\"}'" "and balancerStart, balancerStatus"
hint "scripts/cluster.sh add-shard --dir $DIR" "a 5th shard; balancerStart fills it"
printf '  %s\n' "$SHARDCTL '{\"find\": \"actionlog\", \"\$db\": \"config\", \"filter\": {\"what\": \"balancer.round\"}, \"sort\": {\"time\": -1}, \"limit\": 5}'"
if [ -n "$move_id" ] && [ -n "$to_shard" ]; then
    printf '  %s\n' "$SHARDCTL '{\"moveChunk\": \"$NS\", \"find\": {\"_id\": $move_id}, \"to\": \"$to_shard\", \"\$db\": \"admin\"}'"
fi
cat <<EOT
Stop it:
  scripts/cluster.sh stop --dir $DIR
Next: make tour   # one migration step by step (its own cluster; watch it at its web view)
EOT
