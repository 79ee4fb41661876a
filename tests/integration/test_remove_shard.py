#!/usr/bin/env python3
"""
test_remove_shard.py — removeShard and movePrimary through the router:
MongoDB's replies (started with dbsToMove and note; ongoing with remaining {chunks, dbs,
jumboChunks}; completed, the shard gone), its refusals (last shard, a second draining
shard, unknown shard); a shard holding chunks stays ongoing until its chunks leave (moved
by hand here: draining itself is the balancer's); a primary shard lists its database in
dbsToMove until movePrimary moves the database's unsharded collections (documents and
indexes) and switches the primary with a database-version bump, after which a second
router holding the old database entry still reads and writes it (StaleDbVersion, refresh).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403


def adm(doc):
    d = dict(doc)
    d["$db"] = "admin"
    return d


def shard_names(c):
    return [s["_id"] for s in c.ok(adm({"listShards": 1}))["shards"]]


def db_entry(c, db):
    docs = c.ok({"find": "databases", "$db": "config", "filter": {"_id": db}})["cursor"]["firstBatch"]
    return docs[0] if docs else None


def chunks_on(c, shard):
    docs = c.ok({"find": "chunks", "$db": "config", "filter": {"shard": shard}})["cursor"]["firstBatch"]
    return docs


@test
def test_remove_empty_shard(t):
    cl = t.cluster(shards=3)
    c = cl.client()
    c.err(adm({"removeShard": "shard9"}), 70)                        # ShardNotFound
    r = c.ok(adm({"removeShard": "shard2"}))
    assert r["msg"] == "draining started successfully" and r["state"] == "started", r
    assert r["shard"] == "shard2" and r["dbsToMove"] == [], r
    assert r["note"] == "you need to drop or movePrimary these databases", r
    assert [s.get("draining") for s in c.ok(adm({"listShards": 1}))["shards"]] == [None, None, True]
    c.err(adm({"removeShard": "shard1"}), 117)                       # one draining shard at a time
    # nothing on it: the next call removes it
    r = c.ok(adm({"removeShard": "shard2"}))
    assert r["msg"] == "removeshard completed successfully" and r["state"] == "completed", r
    assert r["shard"] == "shard2", r
    assert shard_names(c) == ["shard0", "shard1"]
    c.err(adm({"removeShard": "shard2"}), 70)
    log = c.ok({"find": "changelog", "$db": "config", "filter": {"what": "removeShard"}})
    assert len(log["cursor"]["firstBatch"]) == 1, log
    c.ok(adm({"removeShard": "shard1"}))
    c.ok(adm({"removeShard": "shard1"}))
    c.err(adm({"removeShard": "shard0"}), 20)                        # never the last shard


@test
def test_remove_shard_with_chunks_and_primary(t):
    cl = t.cluster(shards=2, routers=2)
    c = cl.client(0)
    c2 = cl.client(1)
    # database mp: primary shard1; an unsharded collection with an index, and a sharded
    # collection whose two chunks live on shard1
    c.ok(adm({"enableSharding": "mp", "primaryShard": "shard1"}))
    docs = [{"_id": i, "x": i % 97, "pad": "p" * 50} for i in range(2500)]
    for i in range(0, len(docs), 500):
        c.ok({"insert": "u", "$db": "mp", "documents": docs[i:i + 500]})
    c.ok({"createIndexes": "u", "$db": "mp", "indexes": [{"key": {"x": 1}, "name": "x_1"}]})
    c.ok(adm({"shardCollection": "mp.s", "key": {"k": 1}}))
    c.ok(adm({"split": "mp.s", "middle": {"k": 50}}))
    c.ok({"insert": "s", "$db": "mp", "documents": [{"_id": i, "k": i} for i in range(100)]})
    # the second router caches mp's entry (primary shard1) by reading it
    assert len(c2.find_all("u", "mp")) == 2500
    v0 = db_entry(c, "mp")["version"]["lastMod"]

    r = c.ok(adm({"removeShard": "shard1"}))
    assert r["state"] == "started" and r["dbsToMove"] == ["mp"], r
    before = len(chunks_on(c, "shard1"))
    r = c.ok(adm({"removeShard": "shard1"}))
    after = len(chunks_on(c, "shard1"))
    assert r["msg"] == "draining ongoing" and r["state"] == "ongoing", r
    rem = r["remaining"]
    assert after <= rem["chunks"] <= before and rem["chunks"] >= 1, (r, before, after)
    assert rem["dbs"] == 1 and rem["jumboChunks"] == 0, r
    assert r["dbsToMove"] == ["mp"] and r["note"], r
    c.err(adm({"moveChunk": "mp.s", "find": {"k": 1}, "to": "shard1"}), 117)  # to a draining shard

    # movePrimary errors as MongoDB's
    c.err(adm({"movePrimary": "nope", "to": "shard0"}), 26)
    c.err(adm({"movePrimary": "mp", "to": "shard9"}), 70)
    c.err(adm({"movePrimary": "mp"}), 9)
    c.err(adm({"movePrimary": "admin", "to": "shard0"}), 72)
    c.ok(adm({"movePrimary": "mp", "to": "shard1"}))                 # already there: no-op
    assert db_entry(c, "mp")["version"]["lastMod"] == v0

    r = c.ok(adm({"movePrimary": "mp", "to": "shard0"}))
    e = db_entry(c, "mp")
    assert e["primary"] == "shard0" and e["version"]["lastMod"] == v0 + 1, e
    # the documents and the index are on shard0; shard1 no longer holds mp.u
    s0 = cl.shards[0].client()
    s1 = cl.shards[1].client()
    assert len(s0.find_all("u", "mp")) == 2500
    names = [i["name"] for i in s0.ok({"listIndexes": "u", "$db": "mp"})["cursor"]["firstBatch"]]
    assert sorted(names) == ["_id_", "x_1"], names
    colls = [x["name"] for x in s1.ok({"listCollections": 1, "$db": "mp"})["cursor"]["firstBatch"]]
    assert "u" not in colls and "s" in colls, colls          # the sharded one is untouched
    # both routers read it (the second one had the old entry cached) and write to it
    got = c2.find_all("u", "mp", {"x": 5})
    assert len(got) == len([d for d in docs if d["x"] == 5]), len(got)
    c2.ok({"insert": "u", "$db": "mp", "documents": [{"_id": 9999, "x": 1}]})
    assert len(c.find_all("u", "mp")) == 2501
    assert len(c2.find_all("s", "mp")) == 100

    # shard1 still owns chunks: ongoing, dbs 0; move them by hand, then completed
    r = c.ok(adm({"removeShard": "shard1"}))
    assert r["state"] == "ongoing" and r["remaining"]["dbs"] == 0 and r["dbsToMove"] == [], r
    for ch in chunks_on(c, "shard1"):
        c.ok(adm({"moveChunk": "mp.s", "bounds": [ch["min"], ch["max"]], "to": "shard0",
                  "_waitForDelete": True}))
    r = c.ok(adm({"removeShard": "shard1"}))
    assert r["state"] == "completed", r
    assert shard_names(c) == ["shard0"]
    assert len(c.find_all("s", "mp")) == 100 and len(c2.find_all("u", "mp")) == 2501
    log = c.ok({"find": "changelog", "$db": "config", "filter": {"what": "movePrimary"}})
    assert log["cursor"]["firstBatch"][0]["details"]["to"] == "shard0", log


@test
def test_move_primary_without_collections(t):
    # No collection to copy, so nothing is dropped on the old primary: only the commit's
    # _flushDatabaseCacheUpdates makes it refuse a router's old database version.
    cl = t.cluster(shards=2, routers=2)
    c, c2 = cl.client(0), cl.client(1)
    c.ok(adm({"enableSharding": "mq", "primaryShard": "shard1"}))
    assert c2.find_all("a", "mq") == []          # caches mq -> shard1, and shard1 its version
    c.ok(adm({"movePrimary": "mq", "to": "shard0"}))
    c2.ok({"insert": "a", "$db": "mq", "documents": [{"_id": 1}]})
    assert len(cl.shards[0].client().find_all("a", "mq")) == 1
    colls = cl.shards[1].client().ok({"listCollections": 1, "$db": "mq"})["cursor"]["firstBatch"]
    assert colls == [], colls


if __name__ == "__main__":
    main()
