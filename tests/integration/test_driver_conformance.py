#!/usr/bin/env python3
"""
test_driver_conformance.py — what drivers' own test suites meet first, through a router
(and on a shard directly where the rule is the shard's too): listCollections of a
database that does not exist, listIndexes and drop of what does not exist; a non-simple
collation refused by every command that takes one (nothing read or written as if it had
been honoured); create's unimplemented options refused (a capped collection that would
keep too many documents); '$'-prefixed names stored as MongoDB 5.0+ stores them; the
Stable API fields; getMore from another session; the per-client-address cursor cap; and
the same through pymongo (/usr/bin/python3, Debian's python3-pymongo 3.11).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403
from hostile import RawReq, Int64  # noqa: E402

DB = "conf"


def lsid(byte):
    import base64
    return {"id": {"$binary": {"base64": base64.b64encode(bytes([byte]) * 16).decode(),
                               "subType": "04"}}}


def cursor_id(r):
    v = r["cursor"]["id"]
    return int(v["$numberLong"]) if isinstance(v, dict) else int(v)


def seeded(t):
    """A 2-shard cluster with DB.c (unsharded: a, A, b) and DB.h (sharded, 20 docs)."""
    cl = t.cluster(shards=2)
    R = cl.client()
    R.ok({"insert": "c", "$db": DB, "documents": [{"_id": 1, "s": "a"}, {"_id": 2, "s": "A"},
                                                   {"_id": 3, "s": "b"}]})
    R.ok({"shardCollection": DB + ".h", "key": {"_id": "hashed"}, "$db": "admin"})
    R.ok({"insert": "h", "$db": DB, "documents": [{"_id": i} for i in range(20)]})
    return cl, R


@test
def test_missing_namespaces(t):
    cl = t.cluster(shards=1)
    R, S = cl.client(), cl.shards[0].client()
    for c in (R, S):
        r = c.ok({"listCollections": 1, "$db": "nosuchdb", "nameOnly": True})
        assert r["cursor"]["firstBatch"] == [] and cursor_id(r) == 0, r
        assert r["cursor"]["ns"] == "nosuchdb.$cmd.listCollections", r
        c.err({"listIndexes": "nope", "$db": "nosuchdb"}, 26)
        c.ok({"drop": "nope", "$db": "nosuchdb"})
    R.ok({"insert": "c", "$db": DB, "documents": [{"_id": 1}]})
    R.err({"listIndexes": "nope", "$db": DB}, 26)
    R.ok({"drop": "nope", "$db": DB})
    # The config database is listed by the config server (through a router as mongos does).
    r = R.ok({"listCollections": 1, "$db": "config", "nameOnly": True})
    names = [c["name"] for c in r["cursor"]["firstBatch"]]
    assert {"shards", "databases", "collections", "chunks"} <= set(names), names
    r = R.ok({"listCollections": 1, "$db": "config", "filter": {"name": "chunks"}})
    assert [(c["name"], c["type"], c["idIndex"]["name"]) for c in r["cursor"]["firstBatch"]] == \
        [("chunks", "collection", "_id_")], r
    # The read of a missing database created nothing.
    dbs = [d["name"] for d in R.ok({"listDatabases": 1, "$db": "admin"})["databases"]]
    assert "nosuchdb" not in dbs, dbs


COLLATION = {"locale": "en", "strength": 2}   # would make "a" equal "A"


@test
def test_collation_refused_everywhere(t):
    cl, R = seeded(t)
    S = cl.shards[0].client()
    cmds = [
        {"find": "c", "filter": {"s": "a"}, "collation": COLLATION},
        {"count": "c", "query": {"s": "a"}, "collation": COLLATION},
        {"distinct": "c", "key": "s", "collation": COLLATION},
        {"aggregate": "c", "pipeline": [{"$match": {"s": "a"}}], "cursor": {}, "collation": COLLATION},
        {"delete": "c", "deletes": [{"q": {"s": "zzz"}, "limit": 0},
                                    {"q": {"s": "a"}, "limit": 0, "collation": COLLATION}]},
        {"update": "c", "updates": [{"q": {"s": "a"}, "u": {"$set": {"x": 1}}, "multi": True,
                                     "collation": COLLATION}]},
        {"findAndModify": "c", "query": {"s": "a"}, "remove": True, "collation": COLLATION},
        {"createIndexes": "c", "indexes": [{"key": {"s": 1}, "name": "s_1", "collation": COLLATION}]},
        {"create": "other", "collation": COLLATION},
        {"explain": {"find": "c", "filter": {"s": "a"}, "collation": COLLATION}},
        {"find": "h", "filter": {}, "collation": {"locale": "simple", "strength": 1}},
        {"delete": "h", "deletes": [{"q": {}, "limit": 0, "collation": COLLATION}]},
    ]
    for cmd in cmds:
        r = R.err(dict(cmd, **{"$db": DB}), 2)
        assert "collation" in r["errmsg"] and "simple" in r["errmsg"], r
    S.err({"find": "c", "$db": DB, "filter": {}, "collation": COLLATION}, 2)
    R.err({"shardCollection": DB + ".c2", "key": {"_id": 1}, "collation": COLLATION,
           "$db": "admin"}, 2)
    # Nothing was changed or created meanwhile; the simple collation still works.
    docs = R.find_all("c", DB, {}, collation={"locale": "simple"}, sort={"_id": 1})
    assert docs == [{"_id": 1, "s": "a"}, {"_id": 2, "s": "A"}, {"_id": 3, "s": "b"}], docs
    assert R.ok({"count": "h", "$db": DB})["n"] == 20
    idx = [i["name"] for i in R.ok({"listIndexes": "c", "$db": DB})["cursor"]["firstBatch"]]
    assert idx == ["_id_"], idx
    names = [c["name"] for c in R.ok({"listCollections": 1, "$db": DB})["cursor"]["firstBatch"]]
    assert "other" not in names, names


@test
def test_create_options(t):
    cl = t.cluster(shards=1)
    R, S = cl.client(), cl.shards[0].client()
    refused = [
        {"create": "cap", "capped": True, "size": 4096, "max": 3},
        {"create": "v", "viewOn": "c", "pipeline": []},
        {"create": "ts", "timeseries": {"timeField": "t"}},
        {"create": "cl", "clusteredIndex": {"key": {"_id": 1}, "unique": True}},
        {"create": "ttl", "expireAfterSeconds": 5},
        {"create": "val", "validator": {"a": {"$type": "int"}}},
        {"create": "img", "changeStreamPreAndPostImages": {"enabled": True}},
        {"create": "enc", "encryptedFields": {"fields": []}},
    ]
    for c in (R, S):
        for cmd in refused:
            r = c.err(dict(cmd, **{"$db": DB}), 72)
            assert "not supported" in r["errmsg"], r
    # Refused through the router before anything was created, the database included.
    dbs = [d["name"] for d in R.ok({"listDatabases": 1, "$db": "admin"})["databases"]]
    assert DB not in dbs, dbs
    R.ok({"create": "plain", "$db": DB, "capped": False, "validator": {},
          "changeStreamPreAndPostImages": {"enabled": False}, "storageEngine": {},
          "indexOptionDefaults": {}})
    R.ok({"insert": "plain", "$db": DB, "documents": [{"_id": i} for i in range(5)]})
    assert R.ok({"count": "plain", "$db": DB})["n"] == 5


@test
def test_dollar_prefixed_names(t):
    cl = t.cluster(shards=1)
    R, S = cl.client(), cl.shards[0].client()
    for c, coll in ((R, "d"), (S, "ds")):
        r = c.ok({"insert": coll, "$db": DB, "documents": [
            {"_id": 1, "$price": 50, "q": 30},
            {"_id": 2, "$id": "h1961", "location": {"$db": "novels", "$ref": "x", "$inc": True}}]})
        assert r["n"] == 2 and "writeErrors" not in r, r
        docs = c.find_all(coll, DB, {}, sort={"_id": 1})
        assert docs[0]["$price"] == 50 and docs[1]["location"]["$inc"] is True, docs
        # A replacement of an existing document may not bring a top-level '$' name ...
        r = c.ok({"update": coll, "$db": DB, "updates": [{"q": {"_id": 1}, "u": {"q": 1, "$x": 2}}]})
        assert r["writeErrors"][0]["code"] == 52, r
        # ... but the parts of a DBRef, in order, are fine, and an upsert that inserts is
        # an insert.
        r = c.ok({"update": coll, "$db": DB, "updates": [
            {"q": {"_id": 1}, "u": {"q": 2, "$ref": "c", "$id": 7, "$db": "d"}}]})
        assert r["nModified"] == 1 and "writeErrors" not in r, r
        r = c.ok({"update": coll, "$db": DB, "updates": [
            {"q": {"_id": 9}, "u": {"q": 1, "$hotel": 320}, "upsert": True}]})
        assert r["n"] == 1 and "writeErrors" not in r, r
        d = c.find_all(coll, DB, {"_id": 9})
        assert d == [{"_id": 9, "q": 1, "$hotel": 320}], d
        r = c.ok({"insert": coll, "$db": DB, "documents": [{"_id": {"$a": 1}}]})
        assert r["writeErrors"][0]["code"] == 52, r
        c.err({"findAndModify": coll, "$db": DB, "query": {"_id": 2}, "update": {"a": 1, "$x": 1}}, 52)
        r = c.ok({"findAndModify": coll, "$db": DB, "query": {"_id": 10}, "upsert": True,
                  "update": {"a": 1, "$x": 1}, "new": True})
        assert r["value"] == {"_id": 10, "a": 1, "$x": 1}, r


@test
def test_api_version_fields(t):
    cl, R = seeded(t)
    S = cl.shards[0].client()
    for c in (R, S):
        c.err({"ping": 1, "$db": "admin", "apiVersion": "2"}, 322)
        c.err({"ping": 1, "$db": "admin", "apiVersion": 1}, 14)
        c.err({"ping": 1, "$db": "admin", "apiStrict": True}, 4886600)
        c.err({"ping": 1, "$db": "admin", "apiDeprecationErrors": False}, 4886600)
        r = c.err({"distinct": "c", "key": "s", "$db": DB, "apiVersion": "1", "apiStrict": True}, 323)
        assert r["errmsg"] == "Provided apiStrict:true, but the command distinct is not in API Version 1", r
        c.ok({"distinct": "c", "key": "s", "$db": DB, "apiVersion": "1"})
    # In API version 1, strict: through the router to both shards and back.
    docs = R.find_all("h", DB, {}, apiVersion="1", apiStrict=True, apiDeprecationErrors=True,
                      batchSize=3)
    assert sorted(d["_id"] for d in docs) == list(range(20)), docs
    R.ok({"insert": "h", "$db": DB, "documents": [{"_id": 100}], "apiVersion": "1",
          "apiStrict": True})
    R.err({"explain": {"find": "h"}, "$db": DB, "apiVersion": "1", "apiStrict": True}, 323)


@test
def test_getmore_other_session(t):
    cl, R = seeded(t)
    S = cl.shards[0].client()
    A, B = lsid(0xAA), lsid(0xBB)
    # Through the router (mongos's codes), on the sharded collection (shard cursors too).
    cases = [(R, "h", (50801, 50800, 50799)), (S, "c", (50738, 50737, 50736))]
    for c, coll, (other, none, unsessioned) in cases:
        r = c.ok({"find": coll, "$db": DB, "filter": {}, "batchSize": 1, "lsid": A})
        cid = cursor_id(r)
        r = c.err({"getMore": long(cid), "collection": coll, "$db": DB, "lsid": B}, other)
        assert "which was created in session" in r["errmsg"], r
        c.err({"getMore": long(cid), "collection": coll, "$db": DB}, none)
        # Its own session still reads it, to the end.
        r = c.ok({"getMore": long(cid), "collection": coll, "$db": DB, "lsid": A, "batchSize": 100})
        assert len(r["cursor"]["nextBatch"]) >= 1 and cursor_id(r) == 0, r
        r = c.ok({"find": coll, "$db": DB, "filter": {}, "batchSize": 1})
        c.err({"getMore": long(cursor_id(r)), "collection": coll, "$db": DB, "lsid": A}, unsessioned)


@test
def test_router_cursor_cap_per_client_address(t):
    cl = t.cluster(shards=1)
    router = cl.routers[0]
    R = cl.client()
    R.ok({"insert": "u", "$db": DB, "documents": [{"_id": i} for i in range(3)]})
    find = {"find": "u", "$db": DB, "filter": {}, "batchSize": 1}
    # One client (127.0.0.2) opens 1,000 cursors on each of two connections: its share.
    hog = [RawReq(router.url, timeout=30, source="127.0.0.2") for _ in range(3)]
    ids = []
    for c in hog[:2]:
        for i in range(1000):
            r = c.call(find)
            assert r.get("ok") == 1, (i, str(r)[:300])
            ids.append(r["cursor"]["id"])
    # Its third connection is refused, naming the per-client cap ...
    r = hog[2].call(find)
    assert r.get("code") == 146 and "from client 127.0.0.2" in r.get("errmsg", "") and \
        "limit 2000 per client address" in r["errmsg"], r
    # ... while other clients still open and drain cursors.
    docs = R.find_all("u", DB, {}, batchSize=1, sort={"_id": 1})
    assert [d["_id"] for d in docs] == [0, 1, 2], docs
    other = RawReq(router.url, timeout=30, source="127.0.0.3")
    assert other.call(find).get("ok") == 1
    st = R.ok({"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]
    assert st["refused"]["perClient"] == 1 and st["limits"]["perClient"] == 2000, st
    # Killing some of its cursors gives the client room again, on any connection.
    r = hog[2].call({"killCursors": "u", "$db": DB, "cursors": [Int64(i) for i in ids[:10]]})
    assert len(r["cursorsKilled"]) == 10, r
    r = hog[2].call(find)
    assert r.get("ok") == 1, r
    # The config cursors a router relays: 100 per connection, 200 per client address.
    cfind = {"find": "shards", "$db": "config", "filter": {}, "batchSize": 0}
    cfg_hog = [RawReq(router.url, timeout=30, source="127.0.0.4") for _ in range(3)]
    for c in cfg_hog[:2]:
        for i in range(100):
            r = c.call(cfind)
            assert r.get("ok") == 1 and r["cursor"]["id"] not in (0, None), (i, str(r)[:300])
    r = cfg_hog[2].call(cfind)
    assert r.get("code") == 146 and "config cursors from client 127.0.0.4" in r.get("errmsg", "") \
        and "limit 200 per client address" in r["errmsg"], r
    assert R.find_all("shards", "config", {}, batchSize=1)[0]["_id"] == "shard0"
    for c in hog + [other] + cfg_hog:
        c.close()


PYMONGO_SCRIPT = r'''
import sys, pymongo
from pymongo.errors import OperationFailure
c = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000)
fails = 0
def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL", what)
check(c["nosuchdb"].list_collection_names() == [], "list_collection_names of a missing db")
db = c["conf"]
db.p.insert_many([{"_id": 1, "s": "a"}, {"_id": 2, "s": "A"}])
for name, fn in [("find", lambda: list(db.p.find({"s": "a"}, collation={"locale": "en", "strength": 2}))),
                 ("count_documents", lambda: db.p.count_documents({"s": "a"}, collation={"locale": "en", "strength": 2})),
                 ("delete_many", lambda: db.p.delete_many({"s": "a"}, collation={"locale": "en", "strength": 2})),
                 ("update_many", lambda: db.p.update_many({"s": "a"}, {"$set": {"x": 1}}, collation={"locale": "en", "strength": 2}))]:
    try:
        fn()
        check(False, name + " with a collation was not refused")
    except OperationFailure as e:
        check(e.code == 2, name + " code %s" % e.code)
check(db.p.count_documents({}) == 2, "nothing deleted")
# pymongo 3.11 checks keys itself on insert_one (4.x does not): the command as 4.x sends it.
db.command({"insert": "q", "documents": [{"_id": 1, "$price": 5}]})
check(db.q.find_one({"_id": 1}) == {"_id": 1, "$price": 5}, "top-level $ name stored")
try:
    db.command({"ping": 1, "apiVersion": "2"})
    check(False, "apiVersion 2 accepted")
except OperationFailure as e:
    check(e.code == 322, "apiVersion code %s" % e.code)
try:
    db.create_collection("capped", capped=True, size=4096, max=3)
    check(False, "capped accepted")
except OperationFailure as e:
    check(e.code == 72, "capped code %s" % e.code)
with c.start_session() as s1, c.start_session() as s2:
    cur = db.p.find({}, batch_size=1, session=s1)
    next(cur)
    try:
        db.command({"getMore": cur.cursor_id, "collection": "p"}, session=s2)
        check(False, "getMore from another session accepted")
    except OperationFailure as e:
        check(e.code == 50801, "getMore other session code %s" % e.code)
    check(len(list(cur)) == 1, "own session drains")
print("PYMONGO DONE failed=%d" % fails)
sys.exit(1 if fails else 0)
'''


@test
def test_pymongo(t):
    ok = subprocess.run(["/usr/bin/python3", "-c", "import pymongo"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL).returncode == 0
    assert ok, "python3-pymongo is not installed (scripts/deps.sh installs it)"
    cl, wp = t.wire_cluster(2)
    url = "mongodb://127.0.0.1:%d/?directConnection=true" % wp
    p = subprocess.run(["/usr/bin/python3", "-c", PYMONGO_SCRIPT, url], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    assert p.returncode == 0 and "PYMONGO DONE failed=0" in p.stdout, p.stdout[-3000:]


if __name__ == "__main__":
    main()
