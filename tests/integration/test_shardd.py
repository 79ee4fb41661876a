#!/usr/bin/env python3
"""
test_shardd.py — integration tests of bin/shardd standalone (like a small mongod): every
CRUD and admin command with its reply shape and errors, cursors and their timeout, split
points, the cluster hooks that need no config server, kill -9 after acknowledged writes
then restart (data there), and bad input that keeps the server serving.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403


def num(v):
    if isinstance(v, dict) and "$numberLong" in v:
        return int(v["$numberLong"])
    return v


def ids(docs):
    return [d["_id"] for d in docs]


def start(t, extra=()):
    s = t.shardd("s0", extra=list(extra))
    return s, s.client()


@test
def test_insert_shapes(t):
    s, c = start(t)
    r = c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 1}, {"_id": 2}, {"_id": 1}, {"_id": 3}]})
    assert r["n"] == 2, r
    we = r["writeErrors"]
    assert len(we) == 1 and we[0]["index"] == 2 and we[0]["code"] == 11000, r
    assert we[0]["errmsg"] == "E11000 duplicate key error collection: app.c index: _id_ dup key: { _id: 1 }", we
    r = c.ok({"insert": "c", "$db": "app", "ordered": False,
              "documents": [{"_id": 1}, {"_id": 4}, {"_id": 2}, {"_id": 5}]})
    assert r["n"] == 2 and [e["index"] for e in r["writeErrors"]] == [0, 2], r
    # generated _id is an ObjectId and comes first
    c.ok({"insert": "g", "$db": "app", "documents": [{"a": 1, "b": 2}]})
    d = c.find_all("g", "app")[0]
    assert list(d.keys())[0] == "_id" and "$oid" in d["_id"], d
    # refused documents ('$' names are stored, as MongoDB 5.0+ does, but not inside _id)
    r = c.ok({"insert": "c", "$db": "app", "documents": [{"_id": {"$x": 1}}]})
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == 52, r
    deep = {}
    cur = deep
    for _ in range(120):
        cur["a"] = {}
        cur = cur["a"]
    r = c.cmd({"insert": "c", "$db": "app", "documents": [deep]})
    assert r.get("ok") == 0 or r["writeErrors"], r
    assert c.ok({"count": "c", "$db": "app"})["n"] == 4


@test
def test_find_cursor_paths(t):
    s, c = start(t)
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": i, "a": i % 7, "b": -i} for i in range(250)]})
    r = c.ok({"find": "c", "$db": "app"})
    assert len(r["cursor"]["firstBatch"]) == 101 and num(r["cursor"]["id"]) != 0
    assert r["cursor"]["ns"] == "app.c"
    docs = c.find_all("c", "app", sort={"a": 1, "b": -1}, skip=5, limit=100, batchSize=30)
    exp = sorted(range(250), key=lambda i: (i % 7, i))[5:105]
    assert ids(docs) == exp, ids(docs)[:10]
    # find's limit is >= 0 (MongoDB's find IDL: 51024); singleBatch + limit replaces -3
    c.err({"find": "c", "$db": "app", "limit": -3}, 51024)
    r = c.ok({"find": "c", "$db": "app", "limit": 3, "singleBatch": True})
    assert len(r["cursor"]["firstBatch"]) == 3 and num(r["cursor"]["id"]) == 0
    r = c.ok({"find": "c", "$db": "app", "batchSize": 2, "singleBatch": True})
    assert len(r["cursor"]["firstBatch"]) == 2 and num(r["cursor"]["id"]) == 0
    r = c.ok({"find": "c", "$db": "app", "filter": {"_id": 3}, "projection": {"a": 1, "_id": 0}})
    assert r["cursor"]["firstBatch"] == [{"a": 3}], r
    r = c.ok({"find": "c", "$db": "app", "batchSize": 0})
    cid = r["cursor"]["id"]
    assert r["cursor"]["firstBatch"] == [] and num(cid) != 0
    r = c.ok({"getMore": cid, "collection": "c", "$db": "app", "batchSize": 10})
    assert len(r["cursor"]["nextBatch"]) == 10
    c.err({"getMore": cid, "collection": "other", "$db": "app"}, 13)
    r = c.ok({"killCursors": "c", "$db": "app", "cursors": [cid, long(12345)]})
    assert [num(x) for x in r["cursorsKilled"]] == [num(cid)] and [num(x) for x in r["cursorsNotFound"]] == [12345], r
    c.err({"getMore": cid, "collection": "c", "$db": "app"}, 43)
    c.err({"find": "c", "$db": "app", "filter": {"a": {"$foo": 1}}}, 2)
    c.err({"find": "c", "$db": "app", "skip": -1}, 51024)  # MongoDB find IDL: skip >= 0
    c.err({"find": "c", "$db": "app", "sort": {"a": 2}}, 2)
    # missing collection: empty result
    r = c.ok({"find": "nope", "$db": "app"})
    assert r["cursor"]["firstBatch"] == [] and num(r["cursor"]["id"]) == 0


@test
def test_cursor_timeout(t):
    s, c = start(t, ["--cursor-timeout-ms", "500"])
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": i} for i in range(10)]})
    r = c.ok({"find": "c", "$db": "app", "batchSize": 2})
    cid = r["cursor"]["id"]
    time.sleep(2.5)
    c.err({"getMore": cid, "collection": "c", "$db": "app"}, 43)


@test
def test_update_delete(t):
    s, c = start(t)
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": i, "a": i % 3} for i in range(9)]})
    r = c.ok({"update": "c", "$db": "app", "updates": [
        {"q": {"a": 0}, "u": {"$set": {"x": 1}}, "multi": True},
        {"q": {"a": 1}, "u": {"$set": {"x": 1}}},
        {"q": {"_id": 100}, "u": {"$set": {"y": 5}}, "upsert": True},
        {"q": {"_id": 0}, "u": {"$set": {"x": 1}}},
        {"q": {"_id": 1}, "u": {"$set": {"_id": 7}}},
        {"q": {"_id": 2}, "u": {"b": 1}}]})
    # ops 0-3 match 3 + 1 + 1 (upserted) + 1; op 3 changes nothing; op 4 fails and stops the batch
    assert r["n"] == 6, r
    assert r["nModified"] == 4, r
    assert r["upserted"] == [{"index": 2, "_id": 100}], r
    assert r["writeErrors"][0]["index"] == 4 and r["writeErrors"][0]["code"] == 66, r
    # ordered: the batch stopped at the error
    assert c.find_all("c", "app", {"_id": 2})[0] == {"_id": 2, "a": 2}
    assert c.find_all("c", "app", {"_id": 100})[0] == {"_id": 100, "y": 5}
    r = c.ok({"update": "c", "$db": "app", "ordered": False, "updates": [
        {"q": {"_id": 1}, "u": {"$set": {"_id": 7}}}, {"q": {"_id": 2}, "u": {"b": 1}}]})
    assert r["n"] == 1 and r["nModified"] == 1 and len(r["writeErrors"]) == 1, r
    assert c.find_all("c", "app", {"_id": 2})[0] == {"_id": 2, "b": 1}
    r = c.ok({"update": "c", "$db": "app", "updates": [{"q": {}, "u": {"z": 1}, "multi": True}]})
    assert r["writeErrors"][0]["code"] == 9, r
    # upsert into a missing collection creates it
    r = c.ok({"update": "new", "$db": "app", "updates": [{"q": {"k": 5}, "u": {"$inc": {"n": 1}}, "upsert": True}]})
    assert r["n"] == 1 and len(r["upserted"]) == 1
    d = c.find_all("new", "app")[0]
    assert d["k"] == 5 and d["n"] == 1, d
    r = c.ok({"delete": "c", "$db": "app", "deletes": [{"q": {"a": 1}, "limit": 1}, {"q": {"a": 0}, "limit": 0}]})
    assert r["n"] == 4, r
    c.ok({"delete": "c", "$db": "app", "deletes": [{"q": {}, "limit": 2}]}) if False else None
    r = c.ok({"delete": "c", "$db": "app", "deletes": [{"q": {}, "limit": 2}]})
    assert r["writeErrors"][0]["code"] == 9, r


@test
def test_count_distinct_fam(t):
    s, c = start(t)
    c.ok({"insert": "c", "$db": "app", "documents": [
        {"_id": 1, "a": [1, 2], "t": "x"}, {"_id": 2, "a": 2, "t": "y"}, {"_id": 3, "a": [[1], 3.0], "t": "x"},
        {"_id": 4, "t": "z"}]})
    assert c.ok({"count": "c", "$db": "app", "query": {"t": "x"}})["n"] == 2
    assert c.ok({"count": "c", "$db": "app", "skip": 1, "limit": 2})["n"] == 2
    assert c.ok({"count": "missing", "$db": "app"})["n"] == 0
    r = c.ok({"distinct": "c", "$db": "app", "key": "a"})
    assert r["values"] == [1, 2, 3.0, [1]], r
    r = c.ok({"distinct": "c", "$db": "app", "key": "t", "query": {"a": 2}})
    assert r["values"] == ["x", "y"], r
    r = c.ok({"findAndModify": "c", "$db": "app", "query": {"t": "x"}, "sort": {"_id": -1},
              "update": {"$set": {"m": 1}}, "new": True, "fields": {"m": 1}})
    assert r["value"] == {"_id": 3, "m": 1} and r["lastErrorObject"] == {"n": 1, "updatedExisting": True}, r
    r = c.ok({"findAndModify": "c", "$db": "app", "query": {"_id": 50}, "update": {"$set": {"m": 2}}, "upsert": True})
    assert r["value"] is None and r["lastErrorObject"]["upserted"] == 50 and not r["lastErrorObject"]["updatedExisting"], r
    r = c.ok({"findAndModify": "c", "$db": "app", "query": {"t": "z"}, "remove": True})
    assert r["value"]["_id"] == 4 and r["lastErrorObject"]["n"] == 1, r
    r = c.ok({"findAndModify": "c", "$db": "app", "query": {"t": "none"}, "remove": True})
    assert r["value"] is None and r["lastErrorObject"]["n"] == 0, r
    c.err({"findAndModify": "c", "$db": "app", "query": {}}, 9)
    c.err({"findAndModify": "c", "$db": "app", "remove": True, "update": {"$set": {"a": 1}}}, 9)


@test
def test_indexes(t):
    s, c = start(t)
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": i, "a": i % 5, "b": i} for i in range(50)]})
    r = c.ok({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"a": 1, "b": -1}}, {"key": {"b": 1}, "unique": True}]})
    assert r["numIndexesBefore"] == 1 and r["numIndexesAfter"] == 3 and "note" not in r, r
    r = c.ok({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"a": 1, "b": -1}}]})
    assert r["note"] == "all indexes already exist", r
    c.err({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"a": 1}, "name": "a_1_b_-1"}]}, 86)
    c.err({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"b": 1}, "name": "bee", "unique": True}]}, 85)
    c.err({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"a": 1}, "unique": True}]}, 11000)
    r = c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 100, "b": 3}]})
    assert r["writeErrors"][0]["code"] == 11000 and "index: b_1 dup key: { b: 3 }" in r["writeErrors"][0]["errmsg"], r
    r = c.ok({"listIndexes": "c", "$db": "app"})
    names = [i["name"] for i in r["cursor"]["firstBatch"]]
    assert names == ["_id_", "a_1_b_-1", "b_1"], names
    r = c.ok({"explain": {"find": "c", "filter": {"a": 2, "b": {"$gt": 10}}}, "$db": "app"})
    wp = r["queryPlanner"]["winningPlan"]
    assert wp["inputStage"]["stage"] == "IXSCAN", wp
    r = c.ok({"explain": {"find": "c", "filter": {"_id": 7}}, "$db": "app", "verbosity": "executionStats"})
    assert r["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "_id_"
    assert r["executionStats"]["nReturned"] == 1 and r["executionStats"]["totalDocsExamined"] == 1, r
    r = c.ok({"explain": {"find": "c", "filter": {"zz": 1}}, "$db": "app"})
    assert r["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN", r
    r = c.ok({"explain": {"find": "c", "sort": {"a": 1, "b": -1}}, "$db": "app"})
    assert r["queryPlanner"]["winningPlan"]["stage"] == "FETCH", r  # no SORT stage
    # explain of count and distinct plans as the equivalent find; writes are refused
    r = c.ok({"explain": {"count": "c", "query": {"a": 2, "b": {"$gt": 10}}}, "$db": "app",
              "verbosity": "executionStats"})
    assert r["queryPlanner"]["winningPlan"]["inputStage"]["stage"] == "IXSCAN", r
    n = c.ok({"count": "c", "$db": "app", "query": {"a": 2, "b": {"$gt": 10}}})["n"]
    assert r["executionStats"]["nReturned"] == n, (r, n)
    r = c.ok({"explain": {"distinct": "c", "key": "b", "query": {"_id": 7}}, "$db": "app"})
    assert r["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "_id_", r
    for w in ({"update": "c", "updates": [{"q": {}, "u": {"$set": {"z": 1}}}]},
              {"delete": "c", "deletes": [{"q": {}, "limit": 0}]}):
        e = c.err({"explain": w, "$db": "app"}, 115)
        assert "explain supports find, count and distinct" in e["errmsg"], e
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 200, "x": [1, 2], "y": [3]}]})
    c.ok({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"x": 1}}]})
    r = c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 201, "x": 1}]})
    c.err({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"x": 1, "y": 1}}]}, 171)
    c.err({"dropIndexes": "c", "$db": "app", "index": "_id_"}, 72)
    c.err({"dropIndexes": "c", "$db": "app", "index": "nope"}, 27)
    assert c.ok({"dropIndexes": "c", "$db": "app", "index": {"b": 1}})["nIndexesWas"] == 4
    assert c.ok({"dropIndexes": "c", "$db": "app", "index": "*"})["nIndexesWas"] == 3
    assert len(c.ok({"listIndexes": "c", "$db": "app"})["cursor"]["firstBatch"]) == 1
    c.err({"listIndexes": "nope", "$db": "app"}, 26)


@test
def test_catalog_commands(t):
    s, c = start(t)
    c.ok({"insert": "a", "$db": "db1", "documents": [{"_id": 1, "pad": "x" * 100}]})
    c.ok({"insert": "b", "$db": "db1", "documents": [{"_id": 1}]})
    c.ok({"create": "e", "$db": "db2"})
    c.err({"create": "e", "$db": "db2"}, 48)
    r = c.ok({"listCollections": 1, "$db": "db1"})
    b = r["cursor"]["firstBatch"]
    assert sorted(x["name"] for x in b) == ["a", "b"] and all("uuid" in x["info"] for x in b), r
    r = c.ok({"listCollections": 1, "$db": "db1", "filter": {"name": "b"}})
    assert [x["name"] for x in r["cursor"]["firstBatch"]] == ["b"]
    r = c.ok({"listDatabases": 1, "$db": "admin"})
    dbs = {d["name"]: d for d in r["databases"]}
    assert set(dbs) == {"db1", "db2"} and dbs["db2"]["empty"] and not dbs["db1"]["empty"], r
    r = c.ok({"listDatabases": 1, "$db": "admin", "nameOnly": True})
    assert sorted(d["name"] for d in r["databases"]) == ["db1", "db2"], r
    assert all(set(d) == {"name"} for d in r["databases"]) and "totalSize" not in r, r
    r = c.ok({"listDatabases": 1, "$db": "admin", "filter": {"name": "db1"}})
    assert [d["name"] for d in r["databases"]] == ["db1"] and r["totalSize"] == dbs["db1"]["sizeOnDisk"], r
    r = c.ok({"listDatabases": 1, "$db": "admin", "filter": {"empty": True}})
    assert [d["name"] for d in r["databases"]] == ["db2"], r
    r = c.ok({"collStats": "a", "$db": "db1"})
    assert r["count"] == 1 and r["nindexes"] == 1 and r["size"] > 100 and r["avgObjSize"] == r["size"], r
    for f in ("storageSize", "totalIndexSize"):
        assert f in r
    r = c.ok({"dataSize": "db1.a"})
    assert r["numObjects"] == 1 and r["size"] > 100
    r = c.ok({"drop": "a", "$db": "db1"})
    assert r["nIndexesWas"] == 1
    c.ok({"drop": "a", "$db": "db1"})
    r = c.ok({"dropDatabase": 1, "$db": "db1"})
    assert r["dropped"] == "db1"
    r = c.ok({"listCollections": 1, "$db": "db1"})
    assert r["cursor"]["firstBatch"] == []
    c.err({"insert": "", "$db": "db1", "documents": [{}]}, 73)


DB_STATS_FIELDS = ["db", "collections", "views", "objects", "avgObjSize", "dataSize",
                   "storageSize", "indexes", "indexSize", "totalSize", "scaleFactor",
                   "fsUsedSize", "fsTotalSize", "ok", "$clusterTime", "operationTime"]


@test
def test_db_stats(t):
    """dbStats (mongosh's db.stats()) as a mongod answers it: MongoDB 7.0's fields in its
    order, sums of the collections' collStats, scale applied to the byte sizes only."""
    s, c = start(t)
    r = c.ok({"dbStats": 1, "$db": "nothing"})
    assert list(r) == DB_STATS_FIELDS, list(r)
    assert r["db"] == "nothing" and r["collections"] == 0 and num(r["objects"]) == 0, r
    assert num(r["dataSize"]) == 0 and r["avgObjSize"] == 0 and r["scaleFactor"] == 1, r
    c.ok({"insert": "a", "$db": "db1", "documents": [{"_id": i, "pad": "x" * 500} for i in range(3)]})
    c.ok({"insert": "b", "$db": "db1", "documents": [{"_id": 1}, {"_id": 2}]})
    c.ok({"createIndexes": "a", "$db": "db1", "indexes": [{"key": {"pad": 1}, "name": "pad_1"}]})
    c.ok({"insert": "other", "$db": "db2", "documents": [{"_id": 1, "pad": "y" * 3000}]})
    r = c.ok({"dbStats": 1, "$db": "db1"})
    st = [c.ok({"collStats": x, "$db": "db1"}) for x in ("a", "b")]
    assert r["db"] == "db1" and r["collections"] == 2 and r["views"] == 0, r
    assert num(r["objects"]) == 5 and num(r["indexes"]) == 3, r
    data = sum(num(x["size"]) for x in st)
    storage = sum(num(x["storageSize"]) for x in st)
    index = sum(num(x["totalIndexSize"]) for x in st)
    assert num(r["dataSize"]) == data and num(r["storageSize"]) == storage, (r, st)
    assert num(r["indexSize"]) == index and num(r["totalSize"]) == storage + index, (r, st)
    assert abs(r["avgObjSize"] - data / 5) < 1e-9, r
    assert 0 < num(r["fsUsedSize"]) <= num(r["fsTotalSize"]), r
    r2 = c.ok({"dbStats": 1, "$db": "db1", "scale": 1023.9, "freeStorage": 0})
    assert r2["scaleFactor"] == 1023 and num(r2["dataSize"]) == data // 1023, r2
    assert num(r2["totalSize"]) == (storage + index) // 1023 and r2["avgObjSize"] == r["avgObjSize"], r2
    c.err({"dbStats": 1, "$db": "db1", "scale": 0}, 51024)
    c.err({"dbStats": 1, "$db": "db1", "scale": "k"}, 14)
    c.err({"dbStats": 1, "$db": "db1", "bogus": 1}, 40415)


@test
def test_split_points(t):
    s, c = start(t)
    pad = "x" * 1000
    for k in range(0, 4000, 1000):
        c.ok({"insert": "c", "$db": "app", "documents": [{"_id": i, "k": i // 2, "pad": pad} for i in range(k, k + 1000)]})
    c.ok({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"k": 1}}]})
    r = c.ok({"dataSize": "app.c", "keyPattern": {"k": 1}, "min": {"k": 0}, "max": {"k": 500}})
    assert r["numObjects"] == 1000 and r["size"] > 1000000, r
    r = c.ok({"splitVector": "app.c", "keyPattern": {"k": 1}, "maxChunkSizeBytes": 1 << 20})
    keys = [d["k"] for d in r["splitKeys"]]
    # 4 MB of ~1045 B docs, half a 1 MB chunk ≈ 501 docs per split
    assert 6 <= len(keys) <= 9 and keys == sorted(keys) and len(set(keys)) == len(keys), keys
    r = c.ok({"splitVector": "app.c", "keyPattern": {"k": 1}, "maxChunkSizeBytes": 1 << 20, "maxSplitPoints": 2})
    assert len(r["splitKeys"]) == 2
    r = c.ok({"splitVector": "app.c", "keyPattern": {"k": 1}, "force": True})
    assert len(r["splitKeys"]) == 1 and 900 <= r["splitKeys"][0]["k"] <= 1100, r
    r = c.ok({"autoSplitVector": "c", "$db": "app", "keyPattern": {"k": 1}, "maxChunkSizeBytes": 1 << 20})
    ks = [d["k"] for d in r["splitKeys"]]
    assert 2 <= len(ks) <= 4 and r["continuation"] is False, r
    r = c.ok({"autoSplitVector": "c", "$db": "app", "keyPattern": {"k": 1}, "maxChunkSizeBytes": 1 << 20, "limit": 1})
    assert len(r["splitKeys"]) == 1, r
    # the balancer's batch form (minishard's): one request, each range's autoSplitVector
    # points, ranges without points left out; its ranges are parsed and capped
    ranges = [{"min": {"k": 0}, "max": {"k": 1000}}, {"min": {"k": 1000}, "max": {"k": 1010}},
              {"min": {"k": 1010}, "max": {"k": 2000}}]
    batch = {"_shardsvrAutoSplitVectorBatch": "c", "$db": "app", "keyPattern": {"k": 1},
             "maxChunkSizeBytes": 1 << 20}
    r = c.ok(dict(batch, ranges=ranges))
    want = []
    for rg in ranges:
        one = c.ok({"autoSplitVector": "c", "$db": "app", "keyPattern": {"k": 1}, "min": rg["min"],
                    "max": rg["max"], "maxChunkSizeBytes": 1 << 20})
        if one["splitKeys"]:
            want.append({"min": rg["min"], "max": rg["max"], "splitKeys": one["splitKeys"]})
    assert len(want) == 2 and r["results"] == want and r["checked"] == 3 and r["truncated"] is False, r
    # nothing grew since that answer: its token says so, and nothing is checked; a write
    # that grows the collection changes the token
    tok = r["grownToken"]
    r2 = c.ok(dict(batch, ranges=ranges, ifGrownSince=tok))
    assert r2["unchanged"] is True and r2["results"] == [] and r2["grownToken"] == tok, r2
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 99999, "k": 5, "pad": pad}]})
    r3 = c.ok(dict(batch, ranges=ranges, ifGrownSince=tok))
    assert "unchanged" not in r3 and r3["grownToken"] != tok and len(r3["results"]) == 2, r3
    c.err(dict(batch, ranges=[{"min": {"k": 0}}]), 9)
    c.err(dict(batch, ranges=[ranges[0]] * 1025), 2)
    c.err({"splitVector": "app.c", "keyPattern": {"k": 1}, "maxChunkSizeBytes": 100}, 72)
    c.err({"splitVector": "app.c", "keyPattern": {"zz": 1}, "maxChunkSizeBytes": 1 << 20}, 27)
    # low cardinality: one key value everywhere → no split points
    c.ok({"insert": "low", "$db": "app", "documents": [{"_id": i, "k": 1, "pad": pad} for i in range(3000)]})
    c.ok({"createIndexes": "low", "$db": "app", "indexes": [{"key": {"k": 1}}]})
    r = c.ok({"splitVector": "app.low", "keyPattern": {"k": 1}, "maxChunkSizeBytes": 1 << 20})
    assert r["splitKeys"] == [], r


@test
def test_cluster_hooks_local(t):
    s, c = start(t)
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 1, "k": 1}, {"_id": 2, "k": 2}]})
    c.err({"_shardsvrShardCollection": "app.c", "key": {"k": 1}, "$db": "admin"}, 72)
    c.ok({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"k": 1, "z": 1}}]})
    # an array in the key makes the index multikey, which cannot support a shard key
    c.ok({"insert": "arr", "$db": "app", "documents": [{"_id": 1, "k": [1]}]})
    c.ok({"createIndexes": "arr", "$db": "app", "indexes": [{"key": {"k": 1}}]})
    c.err({"_shardsvrShardCollection": "app.arr", "key": {"k": 1}, "$db": "admin"}, 72)
    c.err({"_shardsvrShardCollection": "app.c", "key": {"k": 7}, "$db": "admin"}, 2)
    r = c.ok({"_shardsvrShardCollection": "app.c", "key": {"k": 1}, "$db": "admin"})
    assert r["collectionsharded"] == "app.c"
    r = c.ok({"_shardsvrShardCollection": "app.e", "key": {"h": "hashed"}, "$db": "admin"})
    names = [i["name"] for i in c.ok({"listIndexes": "e", "$db": "app"})["cursor"]["firstBatch"]]
    assert names == ["_id_", "h_hashed"], names
    assert c.ok({"collStats": "c", "$db": "app"})["sharded"] is True
    r = c.ok({"dataSize": "app.c", "keyPattern": {"k": 1}, "min": {"k": 2}, "max": {"k": MAXKEY}})
    assert r["numObjects"] == 1, r
    r = c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 3, "k": [3]}]})
    assert r["writeErrors"][0]["code"] == 2, r
    c.ok({"_addShard": 1, "$db": "admin", "shardIdentity": {"shardName": "shA", "clusterId": oid("0" * 24),
                                                            "configsvrConnectionString": "tcp://127.0.0.1:1"}})
    c.err({"_addShard": 1, "$db": "admin", "shardIdentity": {"shardName": "shB", "clusterId": oid("0" * 24),
                                                             "configsvrConnectionString": "tcp://127.0.0.1:1"}}, 20)
    s.restart()
    c2 = s.client()
    r = c2.ok({"serverStatus": 1, "$db": "admin"})
    assert r["sharding"]["shardName"] == "shA", r.get("sharding")


@test
def test_kill9_durability(t):
    s, c = start(t)
    for k in range(20):
        c.ok({"insert": "c", "$db": "app", "documents": [{"_id": k * 100 + i, "v": i} for i in range(100)]})
    c.ok({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"v": 1}}]})
    c.ok({"update": "c", "$db": "app", "updates": [{"q": {"v": 5}, "u": {"$set": {"w": 1}}, "multi": True}]})
    c.ok({"delete": "c", "$db": "app", "deletes": [{"q": {"v": 6}, "limit": 0}]})
    s.kill()
    s.start()
    c2 = s.client()
    assert c2.ok({"count": "c", "$db": "app"})["n"] == 2000 - 20
    assert c2.ok({"count": "c", "$db": "app", "query": {"w": 1}})["n"] == 20
    r = c2.ok({"explain": {"find": "c", "filter": {"v": 7}}, "$db": "app", "verbosity": "executionStats"})
    assert r["executionStats"]["nReturned"] == 20 and r["queryPlanner"]["winningPlan"]["inputStage"]["indexName"] == "v_1"


@test
def test_bad_input_keeps_serving(t):
    s, c = start(t)
    bad = [
        {"insert": "c", "$db": "app"},
        {"insert": "c", "$db": "app", "documents": "x"},
        {"insert": 5, "$db": "app", "documents": []},
        {"find": "c", "$db": "app", "filter": 3},
        {"find": "c", "$db": "app", "projection": {"a": 1, "b": 0}},
        {"update": "c", "$db": "app", "updates": [{"q": 1}]},
        {"update": "c", "$db": "app", "updates": [{"q": {}, "u": {"$bogus": {"a": 1}}}]},
        {"delete": "c", "$db": "app", "deletes": [{"q": {}, "limit": 7}]},
        {"getMore": "x", "collection": "c", "$db": "app"},
        {"createIndexes": "c", "$db": "app", "indexes": [{"key": {"a": "nope"}}]},
        {"createIndexes": "c", "$db": "app", "indexes": [5]},
        {"distinct": "c", "$db": "app"},
        {"explain": {"insert": "c"}, "$db": "app"},
        {"splitVector": "nodot", "keyPattern": {"a": 1}, "maxChunkSizeBytes": 1 << 20},
        {"_shardsvrShardCollection": "app.c", "key": {"a": 7}, "$db": "admin"},
        {"noSuchCommand": 1},
    ]
    for b in bad:
        r = c.cmd(b)
        ok_flag = r.get("ok") == 1 and not r.get("writeErrors")
        assert not ok_flag, (b, r)
    assert s.alive()
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 1}]})
    assert c.ok({"count": "c", "$db": "app"})["n"] == 1


if __name__ == "__main__":
    main()
