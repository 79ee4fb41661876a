#!/usr/bin/env python3
"""
test_mongosh.py — MongoDB's own shell, mongosh 2.x, against minishard over the wire
protocol. scripts/deps.sh installs mongosh with npm into build/mongosh
(`make test` runs it when missing); the tests skip, saying so, only when that install failed.
mongosh runs as mongosh_lib.py runs it: tests/mongosh/lib.js then one script, each check
printing "name => <relaxed EJSON>" (or
"name !! <error> code=N"), and the printed lines are compared here with what MongoDB 7.0
prints for the same calls; sh.status()'s printed text is checked for shards, balancer state,
databases, the collection with chunks per shard and the chunk list, and its
shardedDataDistribution section ($shardedDataDistribution, answered by the router).
"""
import json
import os
import re

from lib import *  # noqa: F401,F403
from mongosh_lib import check, have_mongosh, mongosh


def check_crud(res, out, ns, sdd, raw=None):
    check(res, "insertMany", {"acknowledged": True, "insertedIds": {str(i): i for i in range(30)}}, out)
    # db.stats(1024): dbStats; through a router every shard's reply is under raw.<shard>.
    check(res, "dbStats", ["test", 1, 0, 31, True, True, 1024, True, True, raw], out)
    check(res, "insertOne", {"acknowledged": True, "insertedId": 100}, out)
    check(res, "stats", [31, 1, True, ns], out)  # $collStats: {storageStats}
    check(res, "find", [{"_id": 28}, {"_id": 27}, {"_id": 26}], out)
    check(res, "findRange", [{"_id": i, "k": i, "g": i % 3} for i in range(8, 12)], out)
    check(res, "explainCount", "object", out)
    check(res, "findOne", {"_id": 5, "k": 5, "g": 2}, out)
    check(res, "findOneNone", None, out)
    check(res, "countDocuments", 11, out)
    check(res, "countAll", 31, out)
    check(res, "estimatedDocumentCount", 31, out)
    check(res, "distinct", [0, 1, 2], out)
    upd = {"acknowledged": True, "insertedId": None, "upsertedCount": 0}
    check(res, "updateOne", dict(upd, matchedCount=1, modifiedCount=1), out)
    check(res, "updateMany", dict(upd, matchedCount=10, modifiedCount=10), out)
    check(res, "upsert", dict(upd, insertedId=200, matchedCount=0, modifiedCount=0, upsertedCount=1), out)
    check(res, "replaceOne", dict(upd, matchedCount=1, modifiedCount=1), out)
    check(res, "afterReplace", {"_id": 3, "k": 3, "r": True}, out)
    check(res, "deleteOne", {"acknowledged": True, "deletedCount": 1}, out)
    check(res, "deleteMany", {"acknowledged": True, "deletedCount": 9}, out)
    check(res, "findOneAndUpdate", {"_id": 7, "k": 7, "g": 1, "z": 1}, out)
    check(res, "createIndex", "g_1", out)
    check(res, "countAfter", 22, out)
    check(res, "sumByG", [{"_id": None, "n": 2}, {"_id": 1, "n": 10}, {"_id": 2, "n": 10}], out)
    check(res, "dupKey", ("error", "E11000 duplicate key error collection: %s index: _id_ dup key: "
                                   "{ _id: 1 } code=11000" % ns), out)
    check(res, "sddHere", sdd, out)
    check(res, "drop", True, out)
    check(res, "countDropped", 0, out)
    check(res, "renameCollection", [1, 1, 0], out)   # renameCollection on admin


def wire_router_cluster(t, shards=3):
    cl, wp = t.wire_cluster(shards)
    return cl.shards, cl.routers[0], "mongodb://127.0.0.1:%d" % wp


@test
def test_mongosh_router_sharding_and_crud(t):
    """Through a router of 3 shards: the sh.* helpers, balancerStatus, a sharded collection
    split and moved (moveChunk, moveRange) read back merge-sorted, sh.status() as MongoDB
    prints it, then the db.c.* CRUD set on an unsharded collection — one mongosh run."""
    if not have_mongosh():
        return
    ss, r, url = wire_router_cluster(t)
    extra = t.shardd("shard3")   # started, not registered: sh.addShard registers it
    out, res = mongosh(t, url + "/test", ["sharding.js", "crud.js"],
                       prelude="const SHARD0_URL = %s, NEW_SHARD_URL = %s" % (json.dumps(ss[0].url),
                                                                               json.dumps(extra.url)))
    for name, want in [("getBalancerState", True), ("stopBalancer", 1), ("getBalancerStateStopped", False),
                       ("isBalancerRunning", "off"), ("startBalancer", 1), ("balancerStatus", "full"),
                       ("enableSharding", 1), ("shardCollection", "mshdb.people"), ("shardedInsert", 29),
                       ("splitAt10", 1), ("splitAt20", 1), ("moveChunk", 1), ("moveRange", 1),
                       ("mergedSortSkipLimit", [{"_id": 27}, {"_id": 26}, {"_id": 25}]),
                       ("shardedCount", 25),
                       ("chunksPerShard", [{"_id": "shard%d" % i, "n": 1} for i in range(3)]),
                       ("disableBalancing", 1), ("noBalance", True), ("enableBalancing", 1),
                       ("addShardAgain", "shard0"), ("notSharded", 1), ("addShardNew", "shard3"),
                       ("shardCount", 4)]:
        check(res, name, want, out)
    st = out.split("---- sh.status ----")[1].split("---- end ----")[0]
    for i, s in enumerate(ss + [extra]):
        assert "_id: 'shard%d'" % i in st and "host: '%s'" % s.url in st, st
    assert re.search(r"active mongoses\n\[ \{ '7\.0\.0': 1 \} \]", st), st
    assert "'Currently enabled': 'no'" in st, st  # sh.stopBalancer() at the start of sharding.js
    assert "'Currently running': 'no'" in st, st
    assert "'Migration Results for the last 24 hours': { '2': 'Success' }" in st, st
    assert "_id: 'mshdb',\n      primary: 'shard0'" in st, st
    assert "'mshdb.people': {\n        shardKey: { k: 1 }," in st, st
    assert ("chunkMetadata: [\n          { shard: 'shard0', nChunks: 1 },\n          { shard: 'shard1', "
            "nChunks: 1 },\n          { shard: 'shard2', nChunks: 1 }\n        ]") in st, st
    assert "{ min: { k: MinKey() }, max: { k: 10 }, 'on shard': 'shard0', 'last modified': Timestamp(" in st, st
    assert "{ min: { k: 10 }, max: { k: 20 }, 'on shard': 'shard1', 'last modified': Timestamp(" in st, st
    assert "{ min: { k: 20 }, max: { k: MaxKey() }, 'on shard': 'shard2', 'last modified': Timestamp(" in st, st
    check(res, "explainFind", ["SHARD_MERGE", ["shard1", "shard2"]], out)
    check(res, "explainPoint", ["SINGLE_SHARD", 1, "shard0"], out)
    check(res, "statsShards", [True, ["shard0", "shard1", "shard2"]], out)
    check(res, "shardDistribution", [3, ["Shard shard%d at %s" % (i, ss[i].url) for i in range(3)] + ["Totals"]], out)
    check(res, "collStatsShards", [{"shard": "shard%d" % i} for i in range(3)], out)
    check(res, "latencyStats", ("error", "shard shard0: $collStats: minishard keeps no latencyStats code=2"), out)
    check(res, "sddOwned", [{"s": "shard%d" % i, "n": 10, "sane": True} for i in range(3)], out)
    check(res, "sddSpec", ("error", "The $shardedDataDistribution stage specification must be an empty "
                                    "object code=6789100"), out)
    check(res, "sddNotAdmin", ("error", "The $shardedDataDistribution stage must be run on the admin "
                                        "database code=6789102"), out)
    assert re.search(r"shardedDataDistribution\n\[\n  \{\n    ns: 'mshdb.people',\n    shards: \[\n      \{\n"
                     r"        shardName: 'shard0',\n        numOrphanedDocs: \d+,\n        numOwnedDocuments: 10,",
                     st), st
    check_crud(res, out, "test.crud", 2, ["shard%d" % i for i in range(4)])  # sddHere: mshdb.people and nodb.x


@test
def test_mongosh_standalone_shard_crud(t):
    """A shard reached directly (a standalone mongod to mongosh): the same db.c.* set with the
    same printed results."""
    if not have_mongosh():
        return
    wp = free_ports(1)[0]
    t.shardd("shard0", extra=["--wire-port", str(wp)])
    out, res = mongosh(t, "mongodb://127.0.0.1:%d/test" % wp, ["crud.js"])
    check_crud(res, out, "test.crud", ("error", "The $shardedDataDistribution stage can only be run on "
                                                "mongoS code=6789101"))


if __name__ == "__main__":
    main()
