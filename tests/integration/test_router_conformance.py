#!/usr/bin/env python3
"""
test_router_conformance.py — where a driver's conformance tests (MongoDB's published CRUD
tests) saw the router answer differently from a shard or from MongoDB 7.0. Each case runs through the router of a 2-shard cluster and, where the shard's
own answer is the reference, on one standalone shardd with the same data; the replies
must match.

  sharded by _id   a replacement update without _id keeps the existing _id (MongoDB), so
                   the shard key does not change: it succeeds, as on a shard;
  DuplicateKey     writeErrors[i] and findAndModify's error reply keep the shard's
                   keyPattern and keyValue, sharded or not;
  refused features unknown modifiers, arrayFilters errors, pipeline stages not allowed
                   ... get the shard's own code, codeName and errmsg through the router;
                   pipeline updates and positional paths give the shard's own result.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "conf"
# name -> shard key (None: unsharded, on the primary)
COLLS = {"id": {"_id": 1}, "idh": {"_id": "hashed"}, "aid": {"a": 1, "_id": 1},
         "k": {"k": 1}, "u": None}


def setup(t):
    cl = t.cluster(shards=2)
    R = cl.client()
    S = t.shardd("single").client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    for c, key in COLLS.items():
        if key:
            R.ok({"shardCollection": "%s.%s" % (DB, c), "key": key, "$db": "admin"})
        if key == {"_id": 1}:
            R.ok({"split": "%s.%s" % (DB, c), "middle": {"_id": 50}, "$db": "admin"})
        docs = [{"_id": i, "a": i % 5, "k": i, "v": 0, "t": [1, 2]} for i in range(100)]
        for X in (R, S):
            X.ok({"insert": c, "$db": DB, "documents": docs})
    return cl, R, S


def same(R, S, cmd):
    a, b = bare(R.cmd(cmd)), bare(S.cmd(cmd))  # each process has its own cluster time
    assert a == b, "router and shard differ for %s\n  router: %s\n  shard:  %s" % (
        dumps(cmd), dumps(a), dumps(b))
    return a


@test
def test_replacement_without_id_keeps_shard_key(t):
    """Key {_id: 1}, {_id: "hashed"}, {a: 1, _id: 1}: a replacement that omits _id keeps
    the document's _id, so it is no shard-key change (the router said ImmutableField)."""
    cl, R, S = setup(t)
    for c in ("id", "idh"):
        for u in ({"v": 7, "k": 3}, {}):
            r = same(R, S, {"update": c, "$db": DB, "updates": [{"q": {"_id": 3}, "u": u}]})
            assert r["n"] == 1 and r["nModified"] == 1 and "writeErrors" not in r, (c, r)
            assert R.find_all(c, DB, {"_id": 3}) == [dict(u, _id=3)], c
        # the same through findAndModify, and with upsert (the _id comes from the query)
        r = same(R, S, {"findAndModify": c, "$db": DB, "query": {"_id": 60}, "update": {"w": 1},
                        "new": True})
        assert r["value"] == {"_id": 60, "w": 1}, r
        r = same(R, S, {"update": c, "$db": DB, "updates": [{"q": {"_id": 500}, "u": {"w": 2},
                                                             "upsert": True}]})
        assert r["n"] == 1 and r["upserted"] == [{"index": 0, "_id": 500}], r
    r = same(R, S, {"update": "aid", "$db": DB, "updates": [{"q": {"a": 4, "_id": 4}, "u": {"a": 4, "x": 1}}]})
    assert r["n"] == 1 and r["nModified"] == 1, r
    # changing the rest of the key is still refused; so is another _id
    for q, u in (({"a": 2, "_id": 7}, {"a": 3}), ({"a": 2, "_id": 7}, {"_id": 8, "a": 2})):
        r = R.ok({"update": "aid", "$db": DB, "updates": [{"q": q, "u": u}]})
        assert r["n"] == 0 and r["writeErrors"][0]["code"] == 66, r
    r = R.ok({"update": "id", "$db": DB, "updates": [{"q": {"_id": 9}, "u": {"_id": 10}}]})
    assert r["writeErrors"][0]["code"] == 66, r
    # a replacement that changes a findAndModify's shard key is refused too (it would
    # leave the document on a shard that does not own its new key)
    e = R.err({"findAndModify": "k", "$db": DB, "query": {"k": 5}, "update": {"k": 95}}, 66)
    assert R.find_all("k", DB, {"_id": 5}) == [{"_id": 5, "a": 0, "k": 5, "v": 0, "t": [1, 2]}], e


@test
def test_duplicate_key_keeps_key_pattern_and_value(t):
    """E11000 through the router carries keyPattern and keyValue as on the shard, in
    writeErrors and in findAndModify's error reply, sharded and unsharded."""
    cl, R, S = setup(t)
    for X in (R, S):
        X.ok({"createIndexes": "u", "$db": DB, "indexes": [{"key": {"k": 1}, "name": "k_1", "unique": True}]})
        X.ok({"createIndexes": "k", "$db": DB, "indexes": [{"key": {"k": 1, "v": 1}, "name": "kv", "unique": True}]})
    for c in COLLS:
        for ordered in (True, False):
            r = same(R, S, {"insert": c, "$db": DB, "ordered": ordered,
                            "documents": [{"_id": 200, "k": 200}, {"_id": 1, "k": 201}, {"_id": 202, "k": 202}]})
            we = r["writeErrors"][0]
            assert we["code"] == 11000 and we["keyPattern"] == {"_id": 1} and we["keyValue"] == {"_id": 1}, r
            R.ok({"delete": c, "$db": DB, "deletes": [{"q": {"_id": {"$gte": 200}}, "limit": 0}]})
            S.ok({"delete": c, "$db": DB, "deletes": [{"q": {"_id": {"$gte": 200}}, "limit": 0}]})
        # an upsert whose insert meets an existing _id (the query names the whole key)
        e = same(R, S, {"findAndModify": c, "$db": DB, "query": {"_id": 2, "a": 2, "k": 2, "zz": 1},
                        "update": {"$set": {"w": 1}}, "upsert": True})
        assert e["code"] == 11000 and e["keyPattern"] == {"_id": 1} and e["keyValue"] == {"_id": 2}, (c, e)
    # a secondary unique index: upsert by findAndModify and an update hit it
    e = same(R, S, {"findAndModify": "u", "$db": DB, "query": {"_id": 300}, "update": {"$set": {"k": 4}},
                    "upsert": True})
    assert e["code"] == 11000 and e["keyPattern"] == {"k": 1} and e["keyValue"] == {"k": 4}, e
    e = same(R, S, {"findAndModify": "id", "$db": DB, "query": {"_id": 4}, "update": {"$set": {"_id": 4, "x": 1}},
                    "new": True})
    assert e["ok"] == 1, e
    r = same(R, S, {"update": "u", "$db": DB, "updates": [{"q": {"_id": 5}, "u": {"$set": {"k": 6}}}]})
    assert r["writeErrors"][0]["keyPattern"] == {"k": 1} and r["writeErrors"][0]["keyValue"] == {"k": 6}, r
    # a unique index that starts with the shard key, on the sharded collection
    r = same(R, S, {"insert": "k", "$db": DB, "documents": [{"_id": 400, "k": 5, "v": 0}]})
    assert r["n"] == 0 and r["writeErrors"][0]["keyPattern"] == {"k": 1, "v": 1}, r
    assert r["writeErrors"][0]["keyValue"] == {"k": 5, "v": 0}, r
    e = same(R, S, {"findAndModify": "k", "$db": DB, "query": {"k": 7, "v": 0, "_id": 401},
                    "update": {"$set": {"w": 1}}, "upsert": True})
    assert e["code"] == 11000 and e["keyValue"] == {"k": 7, "v": 0}, e


@test
def test_refused_features_same_error_as_shard(t):
    """What the shard refuses, the router refuses with the shard's code, codeName and
    errmsg — its own shard-key checks do not come first (a pipeline update was
    ImmutableField through the router, findAndModify's pipeline a TypeMismatch). Pipeline
    updates and positional paths are supported now: they give the same reply
    and the same documents through the router as on the shard."""
    cl, R, S = setup(t)
    supported = [
        {"q": {"_id": 1}, "u": [{"$set": {"a": 1}}]},
        {"q": {"_id": 1}, "u": [{"$set": {"k": 1}}]},
        {"q": {"_id": 1}, "u": [{"$set": {"a": 1}}], "multi": True},
        {"q": {"_id": 1, "t": 1}, "u": {"$set": {"t.$": 5}}},
        {"q": {"_id": 1}, "u": {"$set": {"t.$[]": 6}}},
        {"q": {"_id": 1}, "u": {"$set": {"t.$[x]": 7}}, "arrayFilters": [{"x": 6}]},
    ]
    refused = [
        {"q": {"_id": 1, "k": 1}, "u": {"$set": {"k.$": 5}}},       # k is no array (2)
        {"q": {"_id": 1}, "u": {"$set": {"t.$[x]": 5}}, "arrayFilters": [{"y": 1}]},
        {"q": {"_id": 1, "k": 1}, "u": {"$set": {"k": 2}, "$foo": {"a": 1}}},
        {"q": {"_id": 1, "k": 1}, "u": {"$set": {"k": 2}, "b": 1}},
        {"q": {"_id": 1, "k": 1}, "u": {"$set": {"k": 2}, "$inc": {"k": 1}}},
        {"q": {"_id": 1, "k": 1}, "u": {"k": 2}, "multi": True},
        {"q": {"_id": 1, "k": 1}, "u": {"_id": 2, "$set": {"a": 1}}},
        {"q": {"_id": 1}, "u": [{"$match": {}}]},
        {"q": {"_id": 1}, "u": 5},
    ]
    for c in COLLS:
        for st in supported:
            r = same(R, S, {"update": c, "$db": DB, "updates": [st]})
            assert r["n"] == 1 and "writeErrors" not in r, (c, st, r)
        for st in refused:
            r = same(R, S, {"update": c, "$db": DB, "updates": [st]})
            assert r["n"] == 0 and r["writeErrors"][0]["code"] != 0, (c, st, r)
        q = {"_id": 1, "k": 1} if c == "k" else {"_id": 1}
        for upd in ([{"$set": {"a": 1}}], {"$set": {"t.$[]": 1}}):
            r = same(R, S, {"findAndModify": c, "$db": DB, "query": q, "update": upd, "new": True})
            assert r["ok"] == 1, r
        for upd in ({"$set": {"k": 2}, "$bad": {}}, [{"$group": {"_id": 1}}]):
            r = same(R, S, {"findAndModify": c, "$db": DB, "query": q, "update": upd})
            assert r["ok"] == 0, r
    # the same documents on both sides
    for c in COLLS:
        assert R.find_all(c, DB, {"_id": 1}) == S.find_all(c, DB, {"_id": 1}) == [
            {"_id": 1, "a": 1, "k": 1, "v": 0, "t": [1, 1]}], c


if __name__ == "__main__":
    main()
