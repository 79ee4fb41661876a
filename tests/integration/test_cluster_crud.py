#!/usr/bin/env python3
"""
test_cluster_crud.py — sharded CRUD through the router (bin/router) over 3 shards,
checked by a seeded differential test: every operation goes both through the router of
a real cluster (config server + 3 shardd + router) and to one standalone shardd, and the
replies must be identical (order-insensitive only where no sort is given).

Collections (DESIGN §9, notes §8):
  r   {k: 1}               ranged; split by hand at k = 100/200/300 (all chunks stay on
                           the primary shard: there is no migration here)
  h   {k: "hashed"}        pre-split over the 3 shards
  ha  {a: "hashed", b: 1}  compound with a hashed prefix: pre-split over the 3 shards
  ah  {a: 1, b: "hashed"}  compound with a ranged prefix (one chunk, split by hand)
Operations: inserts (ordered / unordered), updates (operator, replacement, multi, upsert
with the shard key, exact-_id broadcast), deletes (by key, by _id, multi), find with
filters / sort / skip / limit / projection and small batchSize (getMore over
multi-shard router cursors), count (query / skip / limit), distinct, findAndModify by
shard key. A second test checks MongoDB's targeting errors for sharded writes.
The seed is printed; T_SEED=<n> reruns a failure.
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "crud"
COLLS = {
    "r": {"key": {"k": 1}, "fields": ["k"], "splits": [{"k": 100}, {"k": 200}, {"k": 300}]},
    "h": {"key": {"k": "hashed"}, "fields": ["k"], "splits": []},
    "ha": {"key": {"a": "hashed", "b": 1}, "fields": ["a", "b"], "splits": []},
    "ah": {"key": {"a": 1, "b": "hashed"}, "fields": ["a", "b"],
           "splits": [{"a": 2, "b": {"$numberLong": "0"}}, {"a": 4, "b": {"$numberLong": "0"}}]},  # a hashed value is a NumberLong
}
WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay"]


def canon(x):
    return dumps(x)


def strip_cursor_ids(reply):
    """Cursor ids differ between the two sides: compare everything else."""
    r = dict(reply)
    if "cursor" in r:
        c = dict(r["cursor"])
        c["id"] = 0 if c.get("id") in (0, "0", {"$numberLong": "0"}) else "live"
        r["cursor"] = c
    return r


class Diff:
    """Runs one command on both sides and compares the replies."""

    def __init__(self, router, single, rng):
        self.R = router
        self.S = single
        self.rng = rng
        self.nops = 0

    def same(self, cmd, unordered=False, what=""):
        a = self.R.cmd(cmd)
        b = self.S.cmd(cmd)
        self.nops += 1
        if unordered:
            for rep in (a, b):
                batch = rep.get("cursor", {}).get("firstBatch")
                if batch is not None:
                    batch.sort(key=canon)
        a, b = strip_cursor_ids(bare(a)), strip_cursor_ids(bare(b))  # own cluster times
        if a != b:
            raise AssertionError("%s differs for %s\n  router: %s\n  single: %s" % (
                what or "reply", dumps(cmd)[:400], dumps(a)[:1500], dumps(b)[:1500]))
        return a

    def same_docs(self, coll, filt, unordered, **opts):
        """find + getMore to the end on both sides; compares every batch's documents."""
        a = self.R.find_all(coll, DB, filt, **opts)
        b = self.S.find_all(coll, DB, filt, **opts)
        self.nops += 1
        if unordered:
            a, b = sorted(a, key=canon), sorted(b, key=canon)
        if a != b:
            raise AssertionError("find differs: filter=%s opts=%s\n  router(%d): %s\n  single(%d): %s" % (
                dumps(filt), dumps(opts), len(a), dumps(a)[:1500], len(b), dumps(b)[:1500]))
        return a


def make_cluster(t):
    cl = t.cluster(shards=3, routers=1)
    single = t.shardd("single")
    R = cl.client()
    S = single.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    for name, spec in COLLS.items():
        R.ok({"shardCollection": "%s.%s" % (DB, name), "key": spec["key"], "$db": "admin"})
        for m in spec["splits"]:
            R.ok({"split": "%s.%s" % (DB, name), "middle": m, "$db": "admin"})
    return cl, R, S


def key_eq(coll, doc):
    return {f: doc[f] for f in COLLS[coll]["fields"]}


def random_filter(rng, coll):
    kind = rng.randrange(9)
    if kind == 0:
        return {}
    if kind == 1:
        return {"v": {"$gte": rng.randrange(100)}}
    if kind == 2:
        return {"k": {"$in": [rng.randrange(400) for _ in range(rng.randrange(1, 6))]}}
    if kind == 3:
        lo = rng.randrange(400)
        return {"k": {"$gte": lo, "$lt": lo + rng.randrange(1, 120)}}
    if kind == 4:
        return {"a": rng.randrange(6)}
    if kind == 5:
        return {"a": rng.randrange(6), "b": {"$lte": rng.randrange(30)}}
    if kind == 6:
        return {"s": rng.choice(WORDS)}
    if kind == 7:
        return {"$or": [{"k": rng.randrange(400)}, {"v": {"$lt": rng.randrange(20)}}]}
    return {"a": {"$in": [rng.randrange(6), rng.randrange(6)]}, "v": {"$lt": 70}}


SORTS = [{"v": 1, "_id": 1}, {"s": -1, "_id": -1}, {"k": 1, "_id": 1}, {"_id": -1},
         {"a": 1, "b": -1, "_id": 1}]
PROJS = [None, {"v": 1}, {"s": 0, "tags": 0}, {"v": 1, "_id": 0}, {"k": 1, "a": 1},
         {"tags": 0}]


class Model:
    """What the test knows about the data (ids in use), to aim ops at real documents."""

    def __init__(self):
        self.next_id = 1
        self.docs = {c: {} for c in COLLS}

    def new_doc(self, rng):
        d = {"_id": self.next_id, "k": rng.randrange(400), "a": rng.randrange(6),
             "b": rng.randrange(30), "v": rng.randrange(100), "s": rng.choice(WORDS)}
        if rng.random() < 0.3:
            d["tags"] = rng.sample(WORDS, rng.randrange(0, 4))
        self.next_id += 1
        return d

    def pick(self, rng, coll):
        ids = self.docs[coll]
        if not ids:
            return None
        return ids[rng.choice(list(ids))]


def refresh_model(D, model, coll):
    docs = D.S.find_all(coll, DB, {})
    model.docs[coll] = {d["_id"]: d for d in docs}


def one_write(D, model, coll, rng):
    kind = rng.randrange(11)
    doc = model.pick(rng, coll)
    if kind <= 2 or doc is None:
        docs = [model.new_doc(rng) for _ in range(rng.randrange(1, 40))]
        D.same({"insert": coll, "$db": DB, "documents": docs, "ordered": rng.random() < 0.5})
    elif kind == 3:  # operator update by shard key + _id
        q = dict(key_eq(coll, doc), _id=doc["_id"])
        D.same({"update": coll, "$db": DB, "updates": [
            {"q": q, "u": {"$inc": {"v": rng.randrange(1, 5)}, "$set": {"s": rng.choice(WORDS)}}}]})
    elif kind == 4:  # multi update by a non-key filter (every targeted shard)
        D.same({"update": coll, "$db": DB, "updates": [
            {"q": random_filter(rng, coll), "u": {"$inc": {"v": 1}, "$set": {"m": rng.randrange(9)}},
             "multi": True}]})
    elif kind == 5:  # upsert with the full shard key (and _id so both sides agree on it)
        nd = model.new_doc(rng)
        q = dict(key_eq(coll, nd), _id=nd["_id"])
        ups = [{"q": q, "u": {"$set": {"v": nd["v"], "s": nd["s"]}}, "upsert": True}]
        if rng.random() < 0.5:  # the same op on an existing doc: a plain update
            ups.append({"q": dict(key_eq(coll, doc), _id=doc["_id"]),
                        "u": {"$set": {"up": 1}}, "upsert": True})
        D.same({"update": coll, "$db": DB, "updates": ups, "ordered": rng.random() < 0.5})
    elif kind == 6:  # replacement keeping the shard key
        rep = {f: doc[f] for f in ("k", "a", "b") if f in doc}
        rep.update(v=rng.randrange(100), s=rng.choice(WORDS), replaced=True)
        D.same({"update": coll, "$db": DB, "updates": [
            {"q": dict(key_eq(coll, doc), _id=doc["_id"]), "u": rep}]})
    elif kind == 7:  # multi:false by exact _id only: broadcast to every shard
        D.same({"update": coll, "$db": DB, "updates": [
            {"q": {"_id": doc["_id"]}, "u": {"$inc": {"v": 10}}}]})
    elif kind == 8:  # deletes: by key + _id (limit 1), by _id (limit 1), by filter (all)
        dels = [{"q": dict(key_eq(coll, doc), _id=doc["_id"]), "limit": 1}]
        other = model.pick(rng, coll)
        dels.append({"q": {"_id": other["_id"]}, "limit": 1})
        if rng.random() < 0.4:
            lo = rng.randrange(100)
            dels.append({"q": {"v": {"$gte": lo, "$lt": lo + 4}}, "limit": 0})
        D.same({"delete": coll, "$db": DB, "deletes": dels, "ordered": rng.random() < 0.5})
    elif kind == 9:  # findAndModify by shard key (sort makes the choice deterministic)
        cmd = {"findAndModify": coll, "$db": DB, "query": key_eq(coll, doc),
               "sort": {"_id": 1}, "update": {"$inc": {"v": 3}, "$set": {"fam": True}},
               "new": rng.random() < 0.5}
        if rng.random() < 0.3:
            cmd.pop("update")
            cmd.pop("new")
            cmd["remove"] = True
        D.same(cmd)
    else:  # findAndModify upsert by shard key
        nd = model.new_doc(rng)
        D.same({"findAndModify": coll, "$db": DB, "query": dict(key_eq(coll, nd), _id=nd["_id"]),
                "update": {"$set": {"v": nd["v"]}}, "upsert": True, "new": True})


def one_read(D, coll, rng):
    kind = rng.randrange(4)
    filt = random_filter(rng, coll)
    if kind == 0:  # find with sort (ordered comparison), maybe skip/limit/projection
        opts = {"sort": rng.choice(SORTS), "batchSize": rng.randrange(1, 8)}
        p = rng.choice(PROJS)
        if p:
            opts["projection"] = p
        if rng.random() < 0.5:
            opts["skip"] = rng.randrange(0, 30)
        if rng.random() < 0.5:
            opts["limit"] = rng.randrange(1, 40)
        D.same_docs(coll, filt, False, **opts)
    elif kind == 1:  # find without sort: order-insensitive, small batches (getMore)
        opts = {"batchSize": rng.randrange(1, 6)}
        p = rng.choice(PROJS)
        if p:
            opts["projection"] = p
        D.same_docs(coll, filt, True, **opts)
    elif kind == 2:
        cmd = {"count": coll, "$db": DB, "query": filt}
        if rng.random() < 0.5:
            cmd["skip"] = rng.randrange(0, 40)
        if rng.random() < 0.5:
            cmd["limit"] = rng.randrange(1, 60)
        D.same(cmd)
    else:
        D.same({"distinct": coll, "$db": DB, "key": rng.choice(["v", "s", "k", "a", "tags"]),
                "query": filt})


@test
def test_differential_crud(t):
    s = seed()
    rng = random.Random(s)
    cl, R, S = make_cluster(t)
    D = Diff(R, S, rng)
    model = Model()
    for coll in COLLS:
        # a base load so every chunk has documents
        for _ in range(4):
            D.same({"insert": coll, "$db": DB, "documents": [model.new_doc(rng) for _ in range(60)],
                    "ordered": False})
        refresh_model(D, model, coll)
        for step in range(90):
            one_write(D, model, coll, rng)
            if step % 3 == 0:
                refresh_model(D, model, coll)
            one_read(D, coll, rng)
            one_read(D, coll, rng)
        # whole contents agree
        D.same_docs(coll, {}, False, sort={"_id": 1}, batchSize=50)
    # the data really is spread: per-shard counts straight on the shards (unversioned)
    spread = {}
    for coll in COLLS:
        per = [sh.client().ok({"count": coll, "$db": DB})["n"] for sh in cl.shards]
        spread[coll] = per
        total = R.ok({"count": coll, "$db": DB})["n"]
        assert sum(per) == total, (coll, per, total)
    for coll in ("h", "ha"):
        assert sum(1 for n in spread[coll] if n > 0) == 3, spread
    assert spread["r"][1] == 0 and spread["r"][2] == 0, spread   # no migration: primary only
    st = R.ok({"serverStatus": 1, "$db": "admin"})["router"]
    assert st["scatterGatherOps"] > 0 and st["targetedOps"] > 0, st
    print("  %d differential operations; docs per shard %s; router %s" % (D.nops, spread, st))


@test
def test_getmore_multi_shard_cursor(t):
    """A multi-shard sorted cursor with batchSize 3: every getMore batch is full, the
    merge is in order, skip/limit are applied once, killCursors ends it early."""
    cl, R, S = make_cluster(t)
    docs = [{"_id": i, "k": i * 7 % 400, "a": i % 6, "b": i % 30, "v": i % 10} for i in range(200)]
    R.ok({"insert": "h", "$db": DB, "documents": docs, "ordered": False})
    r = R.ok({"find": "h", "$db": DB, "filter": {}, "sort": {"v": 1, "_id": 1}, "batchSize": 3,
              "skip": 5, "limit": 50})
    got = r["cursor"]["firstBatch"]
    assert len(got) == 3, r
    cid = r["cursor"]["id"]
    batches = 0
    while cid not in (0, "0"):
        g = R.ok({"getMore": cid, "collection": "h", "$db": DB, "batchSize": 3})
        nb = g["cursor"]["nextBatch"]
        assert len(nb) == 3 or g["cursor"]["id"] == 0, g
        got.extend(nb)
        cid = g["cursor"]["id"]
        batches += 1
        assert batches < 100
    want = sorted(docs, key=lambda d: (d["v"], d["_id"]))[5:55]
    assert got == want, (got[:5], want[:5])
    # an abandoned cursor can be killed; its id is then unknown
    r = R.ok({"find": "h", "$db": DB, "filter": {}, "batchSize": 2})
    cid = r["cursor"]["id"]
    assert cid not in (0, "0")
    k = R.ok({"killCursors": "h", "$db": DB, "cursors": [cid]})
    assert k["cursorsKilled"] == [cid], k
    R.err({"getMore": cid, "collection": "h", "$db": DB}, 43)


@test
def test_sharded_write_errors(t):
    """MongoDB's targeting rules for writes to a sharded collection (notes §8.3)."""
    cl, R, S = make_cluster(t)
    R.ok({"insert": "h", "$db": DB, "documents": [{"_id": i, "k": i, "a": i % 6, "b": i, "v": 0}
                                                  for i in range(30)]})
    # upsert without the shard key: ShardKeyNotFound
    r = R.ok({"update": "h", "$db": DB, "updates": [{"q": {"v": 0}, "u": {"$set": {"x": 1}}, "upsert": True}]})
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == 61, r
    assert "upsert" in r["writeErrors"][0]["errmsg"], r
    # upsert on a compound key with only part of the key: also refused
    r = R.ok({"update": "ha", "$db": DB, "updates": [{"q": {"a": 1}, "u": {"$set": {"x": 1}}, "upsert": True}]})
    assert r["writeErrors"][0]["code"] == 61, r
    # multi:false update without shard key or _id: InvalidOptions (MongoDB before 7.1)
    r = R.ok({"update": "h", "$db": DB, "updates": [{"q": {"v": 0}, "u": {"$set": {"x": 1}}}]})
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == 72, r
    # ... but by exact _id it is broadcast and updates exactly one document
    r = R.ok({"update": "h", "$db": DB, "updates": [{"q": {"_id": 7}, "u": {"$set": {"x": 1}}}]})
    assert r["n"] == 1 and r["nModified"] == 1 and "writeErrors" not in r, r
    # a single delete without shard key or _id: ShardKeyNotFound
    r = R.ok({"delete": "h", "$db": DB, "deletes": [{"q": {"v": 0}, "limit": 1}]})
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == 61, r
    # shard-key modification: ImmutableField, by operator and by replacement
    r = R.ok({"update": "h", "$db": DB, "updates": [{"q": {"k": 3}, "u": {"$set": {"k": 4}}}]})
    assert r["writeErrors"][0]["code"] == 66, r
    r = R.ok({"update": "h", "$db": DB, "updates": [{"q": {"k": 3}, "u": {"$inc": {"k": 1}}, "multi": True}]})
    assert r["writeErrors"][0]["code"] == 66, r
    r = R.ok({"update": "h", "$db": DB, "updates": [{"q": {"k": 3}, "u": {"k": 5, "v": 1}}]})
    assert r["writeErrors"][0]["code"] == 66, r
    r = R.ok({"update": "ha", "$db": DB, "updates": [{"q": {"a": 3, "b": 3}, "u": {"$unset": {"b": 1}}}]})
    assert r["writeErrors"][0]["code"] == 66, r
    for u in ({"$rename": {"v": "k"}}, {"$rename": {"k": "kk"}}):
        r = R.ok({"update": "h", "$db": DB, "updates": [{"q": {"k": 3}, "u": u}]})
        assert r["writeErrors"][0]["code"] == 66, (u, r)
    # $set of the key to the value the query pins is a no-op and allowed
    r = R.ok({"update": "h", "$db": DB, "updates": [{"q": {"k": 3}, "u": {"$set": {"k": 3, "y": 1}}}]})
    assert r["n"] == 1 and "writeErrors" not in r, r
    # nothing changed by the refused updates
    assert R.ok({"count": "h", "$db": DB, "query": {"k": 3}})["n"] == 1
    assert R.ok({"count": "h", "$db": DB, "query": {"k": {"$in": [4, 5]}}})["n"] == 2
    # an array in the shard key: ShardKeyNotFound; ordered stops there, unordered goes on
    r = R.ok({"insert": "h", "$db": DB, "documents": [{"_id": 100, "k": 100}, {"_id": 101, "k": [1, 2]},
                                                      {"_id": 102, "k": 102}]})
    assert r["n"] == 1 and r["writeErrors"][0]["index"] == 1 and r["writeErrors"][0]["code"] == 61, r
    assert "array" in r["writeErrors"][0]["errmsg"], r
    r = R.ok({"insert": "ha", "$db": DB, "ordered": False, "documents": [
        {"_id": 200, "a": 1, "b": 1}, {"_id": 201, "a": [1], "b": 1}, {"_id": 202, "a": 2, "b": [3]},
        {"_id": 203, "a": 2, "b": 2}]})
    assert r["n"] == 2 and [e["index"] for e in r["writeErrors"]] == [1, 2], r
    assert all(e["code"] == 61 for e in r["writeErrors"]), r
    assert R.ok({"count": "h", "$db": DB, "query": {"_id": {"$gte": 100}}})["n"] == 1
    # findAndModify without the shard key
    R.err({"findAndModify": "h", "$db": DB, "query": {"v": 0}, "update": {"$set": {"z": 1}}}, 61)
    R.err({"findAndModify": "h", "$db": DB, "query": {"k": 9}, "update": {"$set": {"k": 10}}}, 66)
    # a missing shard-key field is null: targeted like {k: null}, found by {k: null}
    R.ok({"insert": "h", "$db": DB, "documents": [{"_id": 300}]})
    assert R.ok({"find": "h", "$db": DB, "filter": {"k": None}})["cursor"]["firstBatch"] == [{"_id": 300}]


@test
def test_unique_index_needs_shard_key_prefix(t):
    """MongoDB 7.0: on a sharded collection a unique index must start with the shard key
    (or with _id), else CannotCreateIndex (67) — otherwise two documents with the same
    "unique" value could live on two shards. shardCollection over an existing unique index
    that the key cannot keep unique: InvalidOptions (72)."""
    cl = t.cluster(shards=2)
    c = cl.client()
    c.ok({"enableSharding": "uq", "$db": "admin"})
    c.ok({"shardCollection": "uq.u", "key": {"x": 1}, "$db": "admin"})
    e = c.err({"createIndexes": "u", "$db": "uq", "indexes": [{"key": {"y": 1}, "name": "y_1", "unique": True}]}, 67)
    assert "shard key pattern" in e["errmsg"], e
    c.err({"createIndexes": "u", "$db": "uq", "indexes": [{"key": {"y": 1, "x": 1}, "name": "yx", "unique": True}]}, 67)
    for spec in ({"key": {"x": 1, "y": 1}, "name": "xy", "unique": True},
                 {"key": {"x": -1}, "name": "xdesc", "unique": True},
                 {"key": {"_id": 1, "y": 1}, "name": "idy", "unique": True},
                 {"key": {"y": 1}, "name": "y_plain"}):
        c.ok({"createIndexes": "u", "$db": "uq", "indexes": [spec]})
    names = {ix["name"] for ix in c.ok({"listIndexes": "u", "$db": "uq"})["cursor"]["firstBatch"]}
    assert "y_1" not in names and {"xy", "xdesc", "idy", "y_plain"} <= names, names
    # hashed shard key {h: "hashed"}: a unique index on {h: 1} keeps it, {z: 1} does not
    c.ok({"shardCollection": "uq.h", "key": {"h": "hashed"}, "$db": "admin"})
    c.ok({"createIndexes": "h", "$db": "uq", "indexes": [{"key": {"h": 1}, "name": "h_1", "unique": True}]})
    c.err({"createIndexes": "h", "$db": "uq", "indexes": [{"key": {"z": 1}, "name": "z_1", "unique": True}]}, 67)
    # an unsharded collection may have any unique index; sharding it on another key then fails
    c.ok({"createIndexes": "v", "$db": "uq", "indexes": [{"key": {"z": 1}, "name": "z_1", "unique": True}]})
    e = c.err({"shardCollection": "uq.v", "key": {"x": 1}, "$db": "admin"}, 72)
    assert "Uniqueness can't be maintained" in e["errmsg"], e
    c.ok({"shardCollection": "uq.v", "key": {"z": 1}, "$db": "admin"})


if __name__ == "__main__":
    main()
