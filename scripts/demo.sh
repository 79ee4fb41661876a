#!/usr/bin/env bash
# shellcheck disable=SC2016  # $db inside single quotes is JSON, not a shell variable
# demo.sh — what `make demo` runs: a local cluster of 3 shards, a sharded collection,
# 100,000 documents loaded with a progress display, and the data distribution shown,
# then how to explore the cluster and stop it. The cluster keeps running afterwards.
#   DEMO_DIR (default ./demo-cluster), DEMO_DOCS (default 100000), DEMO_PORT (27017).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${DEMO_DIR:-$ROOT/demo-cluster}
DOCS=${DEMO_DOCS:-100000}
PORT=${DEMO_PORT:-27017}
ROUTER="tcp://127.0.0.1:$PORT"
ctl() { "$ROOT/bin/shardctl" --host "$ROUTER" "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

if [ -f "$DIR/cluster.pids" ]; then
    say "stopping the previous demo cluster in $DIR"
    "$ROOT/scripts/cluster.sh" stop --dir "$DIR" ||
        { echo "demo: the previous cluster in $DIR could not be stopped (see above); not starting another" >&2; exit 1; }
fi
rm -rf "$DIR"

say "starting a cluster: 1 config server, 3 shards, 1 router (logs in $DIR)"
"$ROOT/scripts/cluster.sh" start --dir "$DIR" --shards 3 --routers 1 --base-port "$PORT" --test

say "sharding demo.users on a hashed _id (pre-split: 2 chunks per shard)"
ctl '{"enableSharding": "demo", "$db": "admin"}'
ctl '{"shardCollection": "demo.users", "key": {"_id": "hashed"}, "$db": "admin"}'

say "loading $DOCS documents through the router"
ctl load --ns demo.users --count "$DOCS" --batch 1000 --size 200

say "where the documents are (count on each shard, straight to the shard)"
while read -r name url _; do
    case "$name" in shard*)
        n=$("$ROOT/bin/shardctl" --host "$url" '{"count": "users", "$db": "demo"}' | sed -E 's/.*"n" ?: ?([0-9]+).*/\1/')
        printf '  %-8s %8s documents\n' "$name" "$n" ;;
    esac
done <"$DIR/cluster.pids"
printf '  through the router: %s\n' "$(ctl '{"count": "users", "$db": "demo"}')"

say "the cluster as sh.status() shows it"
ctl status

say "one targeted read (equality on the shard key goes to one shard)"
ctl '{"find": "users", "$db": "demo", "filter": {"_id": 4242}}'

say "one chunk migration: shard0's first chunk moves to shard1 (docs/how-a-migration-works.md)"
ctl '{"moveChunk": "demo.users", "bounds": [{"_id": {"$minKey": 1}}, {"_id": -6148914691236517204}], "to": "shard1", "_waitForDelete": true, "$db": "admin"}'
echo "  the donor's steps (ms), the documents it moved and how long writes waited:"
ctl '{"find": "changelog", "$db": "config", "filter": {"what": "moveChunk.from"}}' |
    grep -oE '"(step [0-9] of 6|clonedDocs|writePauseMS|note)" ?: ?("[a-z]+"|[0-9]+|\{ "\$numberLong" : "[0-9]+" \})' | tr '\n' ' ' | sed 's/^/  /'
echo

cat <<EOT

The cluster is still running. Explore it:
  bin/shardctl status                                   # shards, chunks per shard
  bin/shardctl watch                                    # the same, live
  bin/shardctl '{"find": "chunks", "\$db": "config", "filter": {}}'
  bin/shardctl '{"count": "users", "\$db": "demo", "query": {"x": {"\$lt": 1000}}}'
  bin/shardctl '{"split": "demo.users", "middle": {"_id": 1000}, "\$db": "admin"}'   # a hashed-key value
  bin/shardctl '{"moveChunk": "demo.users", "find": {"_id": 7}, "to": "shard2", "\$db": "admin"}'
  bin/shardctl '{"find": "changelog", "\$db": "config", "filter": {}}'  # every step of every move
  tail -f $DIR/*.log
Stop it:
  scripts/cluster.sh stop --dir $DIR
EOT
