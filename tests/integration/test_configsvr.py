#!/usr/bin/env python3
"""
test_configsvr.py — integration tests of the config server (bin/configsvr) with real
shard daemons (bin/shardd) on 127.0.0.1: addShard/listShards, enableSharding,
shardCollection (ranged, hashed with MongoDB's split points, compound, non-empty),
split (middle / find / bounds) and mergeChunks with versions checked, getRoutingTable
full and incremental, drops, removeShard, cursors on config collections (batchSize,
getMore, killCursors, through a router too), and bad input that must not stop the server.
Commands go straight to the config server (as a router would forward them).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403


def setup(t, nshards=2):
    cfg = t.configsvr()
    shards = [t.shardd("s%d" % i) for i in range(nshards)]
    c = cfg.client()
    for i, s in enumerate(shards):
        r = c.ok({"addShard": s.url, "$db": "admin"})
        assert r["shardAdded"] == "shard%d" % i, r
    return cfg, shards, c


def table(c, ns, since=None):
    cmd = {"getRoutingTable": ns, "$db": "admin"}
    if since is not None:
        cmd["sinceVersion"] = since
    return c.ok(cmd)


def versions(rt):
    return [(ch["lastmod"]["$timestamp"]["t"], ch["lastmod"]["$timestamp"]["i"]) for ch in rt["chunks"]]


@test
def test_add_and_list_shards(t):
    cfg, shards, c = setup(t)
    r = c.ok({"listShards": 1, "$db": "admin"})
    ids = [s["_id"] for s in r["shards"]]
    assert ids == ["shard0", "shard1"], r
    assert all(s["state"] == 1 and "host" in s for s in r["shards"]), r
    # the shard knows its identity and where the config server is
    st = shards[1].client().ok({"serverStatus": 1})
    assert st["sharding"]["shardName"] == "shard1", st["sharding"]
    assert st["sharding"]["configsvr"] == cfg.url, st["sharding"]
    # same host again: idempotent; same host under another name, or a taken name: refused
    assert c.ok({"addShard": shards[0].url})["shardAdded"] == "shard0"
    c.err({"addShard": shards[0].url, "name": "other"}, 20)
    s2 = t.shardd("s2")
    c.err({"addShard": s2.url, "name": "shard1"}, 20)
    assert c.ok({"addShard": s2.url, "name": "gamma"})["shardAdded"] == "gamma"
    # a config server is not a shard; a dead host fails within the hello deadline
    c.err({"addShard": cfg.url}, 20)
    dead = free_ports(1)[0]
    r = c.err({"addShard": "127.0.0.1:%d" % dead}, 96)
    assert "hello" in r["errmsg"], r
    c.err({"addShard": "rs0/h1:1,h2:2"}, 9)
    assert len(c.ok({"listShards": 1})["shards"]) == 3


@test
def test_shard_collection_kinds(t):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard1", "$db": "admin"})
    # ranged: one chunk MinKey→MaxKey on the primary at (1,0)
    r = c.ok({"shardCollection": "app.r", "key": {"x": 1}, "$db": "admin"})
    assert r["collectionsharded"] == "app.r"
    rt = table(c, "app.r")
    assert rt["full"] is True and len(rt["chunks"]) == 1, rt
    ch = rt["chunks"][0]
    assert ch["min"] == {"x": MINKEY} and ch["max"] == {"x": MAXKEY} and ch["shard"] == "shard1", ch
    assert versions(rt) == [(1, 0)]
    # the shard created the collection with the shard-key index
    idx = shards[1].client().ok({"listIndexes": "r", "$db": "app"})
    assert any(i["key"] == {"x": 1} for i in idx["cursor"]["firstBatch"]), idx
    # hashed: 2 per shard = 4 chunks at MongoDB's split points, round-robin from the primary
    c.ok({"shardCollection": "app.h", "key": {"h": "hashed"}})
    rt = table(c, "app.h")
    pts = [ch["min"]["h"] for ch in rt["chunks"][1:]]
    assert pts == [-4611686018427387902, 0, 4611686018427387902], pts
    assert versions(rt) == [(1, 0), (1, 1), (1, 2), (1, 3)]
    assert [ch["shard"] for ch in rt["chunks"]] == ["shard1", "shard0", "shard1", "shard0"], rt
    for s in shards:
        idx = s.client().ok({"listIndexes": "h", "$db": "app"})
        assert any(i["key"] == {"h": "hashed"} for i in idx["cursor"]["firstBatch"]), idx
    # numInitialChunks
    c.ok({"shardCollection": "app.h6", "key": {"h": "hashed", "z": 1}, "numInitialChunks": 6})
    rt = table(c, "app.h6")
    assert len(rt["chunks"]) == 6 and versions(rt)[-1] == (1, 5), rt
    assert rt["chunks"][1]["min"]["z"] == MINKEY
    # compound ranged
    c.ok({"shardCollection": "app.c", "key": {"a": 1, "b.c": 1}})
    rt = table(c, "app.c")
    assert rt["chunks"][0]["min"] == {"a": MINKEY, "b.c": MINKEY}, rt
    # idempotent with the same key; another key refused (AlreadyInitialized)
    c.ok({"shardCollection": "app.r", "key": {"x": 1}})
    c.err({"shardCollection": "app.r", "key": {"y": 1}}, 23)
    # MongoDB's refusals
    c.err({"shardCollection": "app.bad", "key": {"x": -1}}, 2)
    c.err({"shardCollection": "app.bad", "key": {"x": "hashed"}, "unique": True}, 72)
    c.err({"shardCollection": "app.bad", "key": {"x": 1}, "numInitialChunks": 4}, 72)
    c.err({"shardCollection": "nodot", "key": {"x": 1}}, 73)
    c.err({"shardCollection": "config.x", "key": {"x": 1}}, 20)
    # an unknown namespace has no routing table
    c.err({"getRoutingTable": "app.none"}, 118)
    st = c.ok({"serverStatus": 1})["sharding"]
    assert st["shards"] == 2 and st["collections"] == 4 and st["chunks"] == 1 + 4 + 6 + 1, st


@test
def test_split_merge_versions(t):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard0"})
    c.ok({"shardCollection": "app.u", "key": {"x": 1}})
    # data on the owner so find/bounds can ask it for a median
    s0 = shards[0].client()
    s0.ok({"insert": "u", "$db": "app", "documents": [{"_id": i, "x": i} for i in range(100)]})
    c.ok({"split": "app.u", "middle": {"x": 50}})
    rt = table(c, "app.u")
    assert [ch["min"] for ch in rt["chunks"]] == [{"x": MINKEY}, {"x": 50}], rt
    assert versions(rt) == [(1, 1), (1, 2)]
    v_after_first = rt["collectionVersion"]
    # find: the chunk holding {x: 10} = [MinKey, 50) split at its median
    c.ok({"split": "app.u", "find": {"x": 10}})
    rt = table(c, "app.u")
    assert len(rt["chunks"]) == 3 and versions(rt) == [(1, 3), (1, 4), (1, 2)], rt
    mid = rt["chunks"][1]["min"]["x"]
    assert 0 < mid < 50, mid
    # bounds: [50, MaxKey) at its median
    c.ok({"split": "app.u", "bounds": [{"x": 50}, {"x": MAXKEY}]})
    rt = table(c, "app.u")
    assert len(rt["chunks"]) == 4 and versions(rt)[2:] == [(1, 5), (1, 6)], rt
    # incremental: since the latest version → only the chunk at it; since (1,2) → every
    # chunk with lastmod >= (1,2), sorted by min
    inc = table(c, "app.u", rt["collectionVersion"])
    assert inc["full"] is False and versions(inc) == [(1, 6)], inc
    inc = table(c, "app.u", v_after_first)
    # (1,2) itself was split by the bounds split: its pieces are (1,5) and (1,6)
    assert inc["full"] is False and versions(inc) == [(1, 3), (1, 4), (1, 5), (1, 6)], inc
    # precondition errors
    c.err({"split": "app.u", "middle": {"x": 50}}, 72)           # equals a chunk's min
    c.err({"split": "app.u", "middle": {"y": 5}}, 2)             # not the shard key
    c.err({"split": "app.u", "bounds": [{"x": 1}, {"x": 2}]}, 2)  # not a chunk
    c.err({"split": "app.u", "find": {"x": {"$gt": 5}}}, 61)
    c.err({"split": "app.u", "middle": {"x": 5}, "find": {"x": 5}}, 2)
    c.err({"split": "app.none", "middle": {"x": 5}}, 118)
    # merge the middle two, then everything
    b = [ch["min"] for ch in rt["chunks"]] + [{"x": MAXKEY}]
    c.ok({"mergeChunks": "app.u", "bounds": [b[1], b[3]]})
    rt = table(c, "app.u")
    assert len(rt["chunks"]) == 3 and versions(rt)[1] == (1, 7), rt
    c.ok({"mergeChunks": "app.u", "bounds": [b[1], b[3]]})        # already one chunk: ok
    assert versions(table(c, "app.u")) == versions(rt)
    c.err({"mergeChunks": "app.u", "bounds": [{"x": 1}, b[3]]}, 20)
    c.err({"mergeChunks": "app.u", "bounds": [b[0]]}, 2)
    c.ok({"mergeChunks": "app.u", "bounds": [{"x": MINKEY}, {"x": MAXKEY}]})
    rt = table(c, "app.u")
    assert len(rt["chunks"]) == 1 and versions(rt) == [(1, 8)], rt
    # the owner refreshed its filtering metadata (flush after each change)
    st = s0.ok({"serverStatus": 1})["sharding"]
    assert "app.u" in json.dumps(st), st


@test
def test_split_waits_only_for_its_own_collection(t):
    """DDL locks are per collection: a split whose owner hangs in splitVector holds the
    lock of its own collection only; a split of another collection goes through (and a
    second split of the same collection waits behind the first)."""
    import threading
    cfg, shards, c = setup(t, nshards=1)
    c.ok({"enableSharding": "app", "primaryShard": "shard0"})
    s0 = shards[0].client()
    for coll in ("a", "b"):
        c.ok({"shardCollection": "app." + coll, "key": {"x": 1}})
        s0.ok({"insert": coll, "$db": "app", "documents": [{"_id": i, "x": i} for i in range(100)]})
    fp = s0.ok({"configureFailPoint": "failCommand", "mode": {"times": 1},
                "data": {"failCommands": ["splitVector"], "blockConnection": True, "blockTimeMS": 4000,
                         "failInternalCommands": True}})
    done = {}

    def split_a():
        done["a"] = cfg.client().cmd({"split": "app.a", "find": {"x": 10}})
    ta = threading.Thread(target=split_a)
    ta.start()
    # the first splitVector (app.a's) is now held on the shard, its DDL lock taken
    s0.ok({"waitForFailPoint": "failCommand", "timesEntered": fp["count"] + 1, "maxTimeMS": 20000})
    r = cfg.client().ok({"split": "app.b", "find": {"x": 10}})
    assert ta.is_alive(), "split of app.b waited for the hung split of app.a"
    assert len(table(c, "app.b")["chunks"]) == 2
    # the same collection waits (bounded by maxTimeMS): LockBusy, naming the collection
    e = cfg.client().err({"split": "app.a", "find": {"x": 90}, "maxTimeMS": 300}, 46)
    assert "app.a" in e["errmsg"], e
    ta.join(30)
    assert done["a"]["ok"] == 1, done
    assert len(table(c, "app.a")["chunks"]) == 2


@test
def test_merge_refuses_across_shards(t):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard0"})
    c.ok({"shardCollection": "app.h", "key": {"h": "hashed"}})
    rt = table(c, "app.h")
    r = c.err({"mergeChunks": "app.h", "bounds": [rt["chunks"][0]["min"], rt["chunks"][1]["max"]]}, 20)
    assert "one shard" in r["errmsg"], r


@test
def test_non_empty_collection(t):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard0"})
    s0 = shards[0].client()
    s0.ok({"insert": "big", "$db": "app", "documents": [{"_id": i, "k": i} for i in range(50)]})
    # no index starting with the key: the shard refuses and we pass its error on
    r = c.err({"shardCollection": "app.big", "key": {"k": 1}})
    assert "index" in r["errmsg"], r
    s0.ok({"createIndexes": "big", "$db": "app", "indexes": [{"key": {"k": 1}, "name": "k_1"}]})
    r = c.ok({"shardCollection": "app.big", "key": {"k": 1}})
    rt = table(c, "app.big")
    assert all(ch["shard"] == "shard0" for ch in rt["chunks"]), rt
    # the collection kept the UUID it had on the shard
    lc = s0.ok({"listCollections": 1, "$db": "app", "filter": {"name": "big"}})
    assert lc["cursor"]["firstBatch"][0]["info"]["uuid"] == rt["uuid"], (lc, rt["uuid"])
    # array values in the key: the shard refuses (multikey index cannot back a shard key)
    s0.ok({"insert": "arr", "$db": "app", "documents": [{"_id": 1, "k": [1, 2]}]})
    s0.ok({"createIndexes": "arr", "$db": "app", "indexes": [{"key": {"k": 1}, "name": "k_1"}]})
    c.err({"shardCollection": "app.arr", "key": {"k": 1}})
    c.err({"getRoutingTable": "app.arr"}, 118)


@test
def test_drops_and_remove_shard(t):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard1"})
    c.ok({"shardCollection": "app.d", "key": {"h": "hashed"}})
    old = table(c, "app.d")
    r = c.ok({"_configsvrDropCollection": "app.d", "$db": "admin"})
    assert r["sharded"] is True
    c.err({"getRoutingTable": "app.d"}, 118)
    for s in shards:
        lc = s.client().ok({"listCollections": 1, "$db": "app"})
        assert all(x["name"] != "d" for x in lc["cursor"]["firstBatch"]), lc
    # recreate: a new generation (epoch, greater timestamp)
    c.ok({"shardCollection": "app.d", "key": {"h": "hashed"}})
    new = table(c, "app.d")
    assert new["epoch"] != old["epoch"]
    assert (new["timestamp"]["$timestamp"]["t"], new["timestamp"]["$timestamp"]["i"]) > \
        (old["timestamp"]["$timestamp"]["t"], old["timestamp"]["$timestamp"]["i"])
    inc = table(c, "app.d", old["collectionVersion"])
    assert inc["full"] is True
    # _configsvrCreateDatabase picks the shard with the fewest databases
    r = c.ok({"_configsvrCreateDatabase": "other", "$db": "admin"})
    assert r["primary"] == "shard0" and r["version"]["lastMod"] == 1, r
    # removeShard: started → ongoing (chunks and dbs remain) → drop → completed
    r = c.ok({"removeShard": "shard1"})
    assert r["state"] == "started" and r["dbsToMove"] == ["app"], r
    r = c.ok({"removeShard": "shard1"})
    assert r["state"] == "ongoing" and r["remaining"]["dbs"] == 1 and r["remaining"]["chunks"] == 2, r
    assert c.ok({"listShards": 1})["shards"][1].get("draining") is True
    r = c.ok({"_configsvrDropDatabase": "app", "$db": "admin"})
    assert r["dropped"] == "app"
    r = c.ok({"removeShard": "shard1"})
    assert r["state"] == "completed", r
    assert [s["_id"] for s in c.ok({"listShards": 1})["shards"]] == ["shard0"]
    c.err({"removeShard": "shard0"}, 20)      # never the last shard
    c.err({"removeShard": "nope"}, 70)


@test
def test_config_find_and_settings(t):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard0"})
    c.ok({"shardCollection": "app.h", "key": {"h": "hashed"}})
    c.ok({"shardCollection": "app.r", "key": {"x": 1}})
    coll = c.find_all("collections", "config", {"_id": "app.h"})
    assert len(coll) == 1 and coll[0]["key"] == {"h": "hashed"} and coll[0]["unique"] is False, coll
    assert "lastmodEpoch" in coll[0] and "timestamp" in coll[0] and "uuid" in coll[0], coll
    chunks = c.find_all("chunks", "config", {"uuid": coll[0]["uuid"]}, sort={"lastmod": -1},
                        projection={"_id": 0, "lastmod": 1, "shard": 1})
    assert [ch["lastmod"]["$timestamp"]["i"] for ch in chunks] == [3, 2, 1, 0], chunks
    assert set(chunks[0].keys()) == {"lastmod", "shard"}, chunks[0]
    full = c.find_all("chunks", "config", {"shard": "shard1"}, limit=1)
    assert len(full) == 1 and {"_id", "uuid", "min", "max", "shard", "lastmod", "onCurrentShardSince",
                               "history"} <= set(full[0].keys()), full
    assert c.ok({"count": "chunks", "$db": "config"})["n"] == 5
    assert c.ok({"count": "chunks", "$db": "config", "query": {"shard": "shard0"}})["n"] == 3
    dbs = c.find_all("databases", "config")
    assert dbs[0]["_id"] == "app" and dbs[0]["primary"] == "shard0" and "version" in dbs[0], dbs
    assert len(c.find_all("shards", "config")) == 2
    assert c.find_all("version", "config")[0]["clusterId"]
    log = c.find_all("changelog", "config", {"what": "shardCollection.end", "ns": "app.h"})
    assert len(log) == 1 and log[0]["shard"] == "config", log
    assert c.find_all("nosuch", "config") == []
    c.err({"find": "chunks", "$db": "config", "filter": {"x": {"$bogus": 1}}}, 2)
    c.err({"find": "chunks", "$db": "app"}, 20)
    # settings: upsert, operators, validation (a refused write changes nothing)
    r = c.ok({"update": "settings", "$db": "config",
              "updates": [{"q": {"_id": "balancer"}, "u": {"$set": {"stopped": True, "mode": "off"}},
                           "upsert": True}]})
    assert r["n"] == 1 and r["upserted"][0]["_id"] == "balancer", r
    assert c.ok({"balancerStatus": 1})["mode"] == "off"
    r = c.ok({"update": "settings", "$db": "config",
              "updates": [{"q": {"_id": "balancer"},
                           "u": {"$set": {"activeWindow": {"start": "10:00", "stop": "10:00"}}}}]})
    assert r["writeErrors"][0]["code"] == 2 and r["nModified"] == 0, r
    r = c.ok({"update": "settings", "$db": "config",
              "updates": [{"q": {"_id": "balancer"}, "u": {"$set": {"stopped": False, "mode": "full"}}},
                          {"q": {"_id": "chunksize"}, "u": {"$set": {"value": 0}}, "upsert": True},
                          {"q": {"_id": "chunksize"}, "u": {"$set": {"value": 64}}, "upsert": True}]})
    assert r["nModified"] == 1 and len(r["writeErrors"]) == 1 and r["writeErrors"][0]["index"] == 1, r
    assert "upserted" not in r  # ordered: the third statement did not run
    assert c.ok({"balancerStatus": 1})["mode"] == "full"
    r = c.ok({"update": "settings", "$db": "config", "ordered": False,
              "updates": [{"q": {"_id": "chunksize"}, "u": {"$set": {"value": 2048}}, "upsert": True},
                          {"q": {"_id": "chunksize"}, "u": {"_id": "chunksize", "value": 1}, "upsert": True}]})
    assert len(r["writeErrors"]) == 1 and r["n"] == 1, r
    s = c.find_all("settings", "config", {"_id": "chunksize"})
    assert s == [{"_id": "chunksize", "value": 1}], s
    c.err({"update": "chunks", "$db": "config", "updates": [{"q": {}, "u": {"$set": {"jumbo": True}}}]}, 20)
    # with 1 MB chunks, sharding a ~2 MB collection splits it on the primary (splitVector)
    s0 = shards[0].client()
    pad = "x" * 1000
    for b in range(4):
        s0.ok({"insert": "big", "$db": "app",
               "documents": [{"_id": b * 500 + i, "k": b * 500 + i, "pad": pad} for i in range(500)]})
    s0.ok({"createIndexes": "big", "$db": "app", "indexes": [{"key": {"k": 1}, "name": "k_1"}]})
    c.ok({"shardCollection": "app.big", "key": {"k": 1}})
    rt = table(c, "app.big")
    assert len(rt["chunks"]) >= 3 and all(ch["shard"] == "shard0" for ch in rt["chunks"]), rt
    assert versions(rt) == [(1, i) for i in range(len(rt["chunks"]))], rt


@test
def test_bad_input_keeps_serving(t):
    cfg, shards, c = setup(t, 1)
    c.ok({"enableSharding": "app"})
    c.ok({"shardCollection": "app.x", "key": {"x": 1}})
    bad = [
        {"noSuchCommand": 1},
        {"addShard": 5},
        {"addShard": ""},
        {"shardCollection": "app.y"},
        {"shardCollection": "app.y", "key": "x"},
        {"shardCollection": "app.y", "key": {}},
        {"shardCollection": "app.y", "key": {"$x": 1}},
        {"shardCollection": "app.y", "key": {"a": "hashed", "b": "hashed"}},
        {"split": "app.x"},
        {"split": "app.x", "bounds": "nope"},
        {"split": "app.x", "bounds": [{"x": 1}, {"x": 2}, {"x": 3}]},
        {"split": 7, "middle": {"x": 1}},
        {"mergeChunks": "app.x", "bounds": [1, 2]},
        {"mergeChunks": "app.x"},
        {"getRoutingTable": "app.x", "sinceVersion": {"e": 1}},
        {"getRoutingTable": "app.x", "sinceVersion": 5},
        {"enableSharding": "a.b"},
        {"enableSharding": "app", "primaryShard": "nope"},
        {"removeShard": ""},
        {"_configsvrRouterPing": 1},
    ]
    for cmd in bad:
        r = c.cmd(cmd)
        assert r.get("ok") == 0 and isinstance(r.get("code"), int) and r.get("errmsg"), (cmd, r)
    assert len(table(c, "app.x")["chunks"]) == 1
    c.ok({"_configsvrRouterPing": 1, "host": "127.0.0.1:1", "up": 5, "waiting": True, "mongoVersion": "0.1"})
    assert cfg.alive()
    r = c.ok({"balancerStatus": 1})
    assert r["mode"] == "full" and isinstance(r["inBalancerRound"], bool) and r["numBalancerRounds"] >= 0, r


def cid_of(r):
    c = r["cursor"]["id"]
    return int(c["$numberLong"]) if isinstance(c, dict) else int(c)


def drain(c, first, coll, batch=None):
    """Docs of a find reply plus every getMore batch; the batch sizes seen."""
    docs, sizes = list(first["cursor"]["firstBatch"]), [len(first["cursor"]["firstBatch"])]
    cid = cid_of(first)
    for _ in range(100000):
        if cid == 0:
            break
        cmd = {"getMore": long(cid), "collection": coll, "$db": "config"}
        if batch:
            cmd["batchSize"] = batch
        r = c.ok(cmd)
        docs.extend(r["cursor"]["nextBatch"])
        sizes.append(len(r["cursor"]["nextBatch"]))
        cid = cid_of(r)
    return docs, sizes


@test
def test_config_cursors(t):
    """find on config collections returns real cursors: batchSize honoured (default first
    batch 101), getMore through the router and straight on the config server, killCursors,
    wrong-collection getMore refused; shardctl status counts every chunk of a large table."""
    cl = t.cluster(shards=2, routers=1)
    R, C = cl.client(), cl.config.client()
    R.ok({"enableSharding": "app", "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": "app.h", "key": {"h": "hashed"}, "numInitialChunks": 40, "$db": "admin"})
    R.ok({"shardCollection": "app.r", "key": {"x": 1}, "$db": "admin"})
    for m in range(10, 200, 10):
        R.ok({"split": "app.r", "middle": {"x": m}, "$db": "admin"})
    uuid = R.ok({"find": "collections", "$db": "config", "filter": {"_id": "app.r"}})["cursor"]["firstBatch"][0]["uuid"]
    want = C.ok({"count": "chunks", "$db": "config", "query": {"uuid": uuid}})["n"]
    assert want == 20, want
    for c in (R, C):   # through the router and straight on the config server
        r = c.ok({"find": "chunks", "$db": "config", "filter": {"uuid": uuid}, "batchSize": 2,
                  "sort": {"min": 1}})
        assert len(r["cursor"]["firstBatch"]) == 2 and cid_of(r) != 0, r
        assert r["cursor"]["ns"] == "config.chunks", r
        docs, sizes = drain(c, r, "chunks", batch=2)
        assert len(docs) == 20 and sizes == [2] * 10, sizes
        mins = [d["min"]["x"] for d in docs]
        assert mins[0] == {"$minKey": 1} and mins[1:] == list(range(10, 200, 10)), mins
        # the cursor is gone once exhausted
        e = c.err({"getMore": long(cid_of(r)), "collection": "chunks", "$db": "config"}, 43)
        assert e["codeName"] == "CursorNotFound", e
    # default first batch: 101 documents; getMore without batchSize takes the rest
    r = R.ok({"find": "chunks", "$db": "config", "filter": {}})
    total = C.ok({"count": "chunks", "$db": "config"})["n"]
    assert total == 60 and len(r["cursor"]["firstBatch"]) == 60 and cid_of(r) == 0, (total, r["cursor"]["id"])
    R.ok({"shardCollection": "app.big", "key": {"k": "hashed"}, "numInitialChunks": 300, "$db": "admin"})
    r = R.ok({"find": "chunks", "$db": "config", "filter": {}})
    assert len(r["cursor"]["firstBatch"]) == 101 and cid_of(r) != 0
    docs, sizes = drain(R, r, "chunks")
    assert len(docs) == 360 and sizes == [101, 259], sizes
    assert len({str(d["_id"]) for d in docs}) == 360
    # singleBatch closes the cursor; limit and skip apply to the whole result
    r = C.ok({"find": "chunks", "$db": "config", "batchSize": 5, "singleBatch": True})
    assert len(r["cursor"]["firstBatch"]) == 5 and cid_of(r) == 0, r
    r = C.ok({"find": "chunks", "$db": "config", "batchSize": 5, "skip": 350, "limit": 8})
    docs, sizes = drain(C, r, "chunks")
    assert len(docs) == 8 and sizes[0] == 5, sizes
    # killCursors through the router and straight; getMore on another collection refused
    opened = [cid_of(c.ok({"find": "chunks", "$db": "config", "batchSize": 1})) for c in (R, C)]
    assert all(opened)
    assert C.ok({"serverStatus": 1})["sharding"]["openCursors"] == 2
    e = R.err({"getMore": long(opened[0]), "collection": "shards", "$db": "config"}, 13)
    r = R.ok({"killCursors": "chunks", "$db": "config", "cursors": [long(opened[0]), long(12345)]})
    assert [cid_of({"cursor": {"id": x}}) for x in r["cursorsKilled"]] == [opened[0]], r
    assert len(r["cursorsNotFound"]) == 1, r
    r = C.ok({"killCursors": "chunks", "$db": "config", "cursors": [long(opened[1])]})
    assert len(r["cursorsKilled"]) == 1, r
    assert C.ok({"serverStatus": 1})["sharding"]["openCursors"] == 0
    C.err({"getMore": long(opened[1]), "collection": "chunks", "$db": "config"}, 43)

    # shardctl status drains the cursor: every chunk of a large table is counted
    n_big = int(os.environ.get("MS_STATUS_CHUNKS", "12000"))
    R.ok({"shardCollection": "app.huge", "key": {"k": "hashed"}, "numInitialChunks": n_big,
          "$db": "admin"})
    out = subprocess.run([SHARDCTL, "--host", cl.routers[0].url, "status"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    sect = out.stdout.split("app.huge", 1)[1]
    assert ("chunks: %d total" % n_big) in sect, sect[:400]
    print("  shardctl status: app.huge %d chunks counted through config cursors" % n_big)


if __name__ == "__main__":
    main()
