#!/usr/bin/env python3
"""
long_million_chunks_routing.py — a collection of 1,000,000 chunks works (make check-long): a
hashed pre-split of numInitialChunks 1,000,000 on 2 shards is created (one transaction;
both shards load the table in pages, in parallel), then through a router a targeted
insert and find, a moveChunk of that document's chunk, and the find again from its new
owner; a second router loads the whole table in pages and agrees on the version. Prints
the time of each step. Past MongoDB's per-shard cap (8,192 × 2 shards): minishard allows
the million with any number of shards.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

N = int(os.environ.get("T_CHUNKS", "1000000"))
NS = "app.m"


def timed(what, fn):
    t0 = time.monotonic()
    r = fn()
    print("  %s: %.1f s" % (what, time.monotonic() - t0), flush=True)
    return r


@test
def test_million_chunks(t):
    cl = t.cluster(2, 2)
    c = cl.routers[0].client(timeout_ms=600000)
    c.ok({"enableSharding": "app", "primaryShard": "shard0", "$db": "admin"})
    c.err({"shardCollection": NS, "key": {"k": "hashed"}, "numInitialChunks": 1000001,
           "$db": "admin"}, 72)   # InvalidOptions, as MongoDB
    timed("shardCollection numInitialChunks=%d (2 shards refreshed)" % N, lambda: c.ok(
        {"shardCollection": NS, "key": {"k": "hashed"}, "numInitialChunks": N, "$db": "admin",
         "maxTimeMS": 600000}))   # the router waits 20 s for the config server unless told
    timed("targeted insert (router's first, paged, load)", lambda: c.ok(
        {"insert": "m", "$db": "app", "documents": [{"_id": 1, "k": 42}]}))
    got = timed("targeted find", lambda: c.ok({"find": "m", "$db": "app", "filter": {"k": 42}}))
    assert [d["_id"] for d in got["cursor"]["firstBatch"]] == [1], got
    before = c.ok({"getShardVersion": NS, "$db": "admin"})["version"]
    # to the shard that does not own it (a move to its owner changes nothing)
    plan = c.ok({"explain": {"find": "m", "filter": {"k": 42}}, "$db": "app"})
    owner = plan["queryPlanner"]["winningPlan"]["shards"][0]["shardName"]
    to = "shard0" if owner == "shard1" else "shard1"
    timed("moveChunk of its chunk to %s" % to, lambda: c.ok(
        {"moveChunk": NS, "find": {"k": 42}, "to": to, "_waitForDelete": True, "$db": "admin"}))
    got = timed("find after the move (incremental refresh)", lambda: c.ok({"find": "m", "$db": "app", "filter": {"k": 42}}))
    assert [d["_id"] for d in got["cursor"]["firstBatch"]] == [1], got
    c2 = cl.routers[1].client(timeout_ms=600000)
    timed("second router's full load", lambda: c2.ok({"find": "m", "$db": "app", "filter": {"k": 42}}))
    v1 = c.ok({"getShardVersion": NS, "$db": "admin"})["version"]
    v2 = c2.ok({"getShardVersion": NS, "$db": "admin"})["version"]
    assert v1 == v2 and v1 != before, (v1, v2, before)
    for line in cl.routers[1].log_text().splitlines():
        if "routing table refreshed ns=app.m" in line:
            print("  router1:", line.split(" I ", 1)[1])


if __name__ == "__main__":
    main()
