#!/usr/bin/env python3
"""
test_orphans.py — the ownership filter (DESIGN §6; notes §2.4): documents planted
straight on a shard (an unversioned insert to the shard's own URL) in a range that
shard does not own are orphans. Through the router they never appear — not in find
(any filter, sort, limit, small batches with getMore), count (with or without a query,
skip, limit) or distinct — for ranged and hashed collections. Sent straight to the shard
without shardVersion (as to a plain mongod) they are still visible; sent with the
shard's own shardVersion they are filtered by the shard itself. Broadcast multi-updates
and deletes through the router leave them alone.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "orph"


def owner_of_each(cl, coll):
    """_id -> index of the shard holding it (unversioned reads, before any planting)."""
    where = {}
    for i, s in enumerate(cl.shards):
        for d in s.client().find_all(coll, DB, {}):
            assert d["_id"] not in where, "document %s on two shards" % d["_id"]
            where[d["_id"]] = i
    return where


def check_hidden(R, coll, nreal, planted_ids, key):
    """Every read through the router sees the nreal real documents and no orphan."""
    docs = R.find_all(coll, DB, {})
    assert len(docs) == nreal, (len(docs), nreal)
    assert not any(d.get("orphan") for d in docs)
    assert R.find_all(coll, DB, {"orphan": True}, batchSize=2) == []
    assert R.find_all(coll, DB, {"_id": {"$in": planted_ids}}) == []
    got = R.find_all(coll, DB, {}, sort={key: 1, "_id": 1}, batchSize=3, limit=nreal + 50)
    assert len(got) == nreal and not any(d.get("orphan") for d in got)
    assert R.ok({"count": coll, "$db": DB})["n"] == nreal
    assert R.ok({"count": coll, "$db": DB, "query": {}})["n"] == nreal
    assert R.ok({"count": coll, "$db": DB, "query": {"orphan": True}})["n"] == 0
    assert R.ok({"count": coll, "$db": DB, "query": {}, "skip": 10, "limit": nreal})["n"] == nreal - 10
    assert R.ok({"distinct": coll, "$db": DB, "key": "orphan"})["values"] == []
    vals = R.ok({"distinct": coll, "$db": DB, "key": key})["values"]
    assert len(vals) == nreal, len(vals)


def versioned(shard_client, ns):
    return shard_client.ok({"serverStatus": 1})["sharding"][ns]["shardVersion"]


@test
def test_hashed_orphans_hidden(t):
    cl = t.cluster(shards=3, routers=1)
    R = cl.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": DB + ".h", "key": {"k": "hashed"}, "$db": "admin"})
    n = 300
    R.ok({"insert": "h", "$db": DB, "documents": [{"_id": i, "k": i, "v": i % 7} for i in range(n)]})
    where = owner_of_each(cl, "h")
    assert len(where) == n and len(set(where.values())) == 3
    # plant, on every shard, copies (new _id, same k) of documents another shard owns
    planted = {0: [], 1: [], 2: []}
    for i, s in enumerate(cl.shards):
        orphans = [{"_id": 10000 + k, "k": k, "v": 99, "orphan": True}
                   for k in range(n) if where[k] != i and (k + i) % 4 == 0]
        orphans = [dict(o, _id=o["_id"] + 1000 * i) for o in orphans]
        s.client().ok({"insert": "h", "$db": DB, "documents": orphans})
        planted[i] = [o["_id"] for o in orphans]
    all_planted = sum(planted.values(), [])
    assert len(all_planted) > 100
    check_hidden(R, "h", n, all_planted, "k")
    # targeted reads by shard key go to the owner; the orphan copy elsewhere is never seen
    for k in (0, 4, 8, 12):
        got = R.ok({"find": "h", "$db": DB, "filter": {"k": k}})["cursor"]["firstBatch"]
        assert got == [{"_id": k, "k": k, "v": k % 7}], got
    assert R.ok({"distinct": "h", "$db": DB, "key": "v"})["values"] == list(range(7))
    # straight to a shard without shardVersion: the orphans are there (as in MongoDB)
    for i, s in enumerate(cl.shards):
        c = s.client()
        assert c.ok({"count": "h", "$db": DB, "query": {"orphan": True}})["n"] == len(planted[i])
        # with the shard's own version, the shard filters them itself
        sv = versioned(c, DB + ".h")
        r = c.ok({"find": "h", "$db": DB, "filter": {"orphan": True}, "shardVersion": sv})
        assert r["cursor"]["firstBatch"] == [], r
        r = c.ok({"count": "h", "$db": DB, "query": {}, "shardVersion": sv})
        assert r["n"] == sum(1 for v in where.values() if v == i), r
        r = c.ok({"distinct": "h", "$db": DB, "key": "v", "query": {"v": 99}, "shardVersion": sv})
        assert r["values"] == [], r
    # broadcast writes through the router skip orphans as reads do (n counts owned docs)
    r = R.ok({"update": "h", "$db": DB, "updates": [{"q": {}, "u": {"$set": {"touched": 1}}, "multi": True}]})
    assert r["n"] == n and r["nModified"] == n, r
    r = R.ok({"delete": "h", "$db": DB, "deletes": [{"q": {"v": 99}, "limit": 0}]})
    assert r["n"] == 0, r
    for i, s in enumerate(cl.shards):
        c = s.client()
        assert c.ok({"count": "h", "$db": DB, "query": {"orphan": True, "touched": 1}})["n"] == 0
        assert c.ok({"count": "h", "$db": DB, "query": {"orphan": True}})["n"] == len(planted[i])
    print("  planted %d orphans over 3 shards; none seen through the router" % len(all_planted))


@test
def test_compound_hashed_orphans_hidden(t):
    cl = t.cluster(shards=3, routers=1)
    R = cl.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard1", "$db": "admin"})
    R.ok({"shardCollection": DB + ".ch", "key": {"a": "hashed", "b": 1}, "$db": "admin"})
    n = 240
    R.ok({"insert": "ch", "$db": DB, "documents": [{"_id": i, "a": i % 40, "b": i} for i in range(n)]})
    where = owner_of_each(cl, "ch")
    planted = []
    for i, s in enumerate(cl.shards):
        orphans = [{"_id": 5000 + 1000 * i + j, "a": j % 40, "b": j, "orphan": True}
                   for j in range(n) if where[j] != i and j % 3 == 0]
        s.client().ok({"insert": "ch", "$db": DB, "documents": orphans, "ordered": False})
        planted += [o["_id"] for o in orphans]
    check_hidden(R, "ch", n, planted, "b")
    # a range on the hashed prefix's field cannot target: scatter, still filtered
    got = R.find_all("ch", DB, {"a": {"$gte": 10, "$lt": 20}})
    assert sorted(d["_id"] for d in got) == [i for i in range(n) if 10 <= i % 40 < 20]


@test
def test_ranged_orphans_hidden(t):
    """Ranged: every chunk is on the primary (no migration here); documents planted on
    the other shards are orphans whatever their key, and documents planted on the
    primary in its own ranges are not orphans (they are owned data)."""
    cl = t.cluster(shards=3, routers=1)
    R = cl.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": DB + ".r", "key": {"k": 1}, "$db": "admin"})
    for m in (50, 100, 150):
        R.ok({"split": DB + ".r", "middle": {"k": m}, "$db": "admin"})
    n = 200
    R.ok({"insert": "r", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(n)]})
    planted = []
    for i in (1, 2):
        orphans = [{"_id": 7000 + 1000 * i + k, "k": k, "orphan": True} for k in range(0, 260, 3)]
        cl.shards[i].client().ok({"insert": "r", "$db": DB, "documents": orphans})
        planted += [o["_id"] for o in orphans]
    check_hidden(R, "r", n, planted, "k")
    assert R.find_all("r", DB, {"k": {"$gte": 40, "$lt": 60}}, sort={"k": 1}) == [
        {"_id": k, "k": k} for k in range(40, 60)]
    # the shards that own nothing answer a versioned read with StaleConfig wanting 0|0
    sv = versioned(cl.shards[0].client(), DB + ".r")
    r = cl.shards[1].client().cmd({"find": "r", "$db": DB, "filter": {}, "shardVersion": sv})
    assert r["code"] == 13388 and r["vWanted"]["v"] == ts(0, 0), r
    # unversioned, the planted documents are visible there
    assert cl.shards[2].client().ok({"count": "r", "$db": DB})["n"] == len(planted) // 2


if __name__ == "__main__":
    main()
