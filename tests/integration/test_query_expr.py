#!/usr/bin/env python3
"""
test_query_expr.py — the query language drivers' conformance tests use,
on a standalone shard and through a 2-shard router (an unsharded collection and one
sharded on {k: 1} with its chunks on both shards):

  $expr        field-to-field comparisons in find / count / delete / update /
               findAndModify / aggregate's $match, inside $or, and its errors
  let          $$vars on find, update, delete, findAndModify; bad names (9), undefined (17276)
  pipelines    u as [$set / $unset / $replaceWith ...]: multi, upsert (the query's
               equality fields then the pipeline), findAndModify new / old, _id kept,
               a stage not allowed (72), the shard key moved to another shard (283)
  arrayFilters $[], $[id], nested $[].$[v], "$" from the query, on update and
               findAndModify, with MongoDB's validation errors (9 / 2)
  $-fields     $-prefixed names stored and read back (nested ones queried by path), the
               top level too (MongoDB 5.0+); a top-level one in a replacement refused (52),
               one inside a document _id refused (52)

Before this change $expr, pipelines and arrayFilters were refused (BadValue) and `let` was
accepted and ignored, nested $-prefixed names were refused: every test here fails there.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

DB = "qx"


def docs():
    # a > b exactly for i >= 5; k spreads over both chunks of the sharded collection
    return [{"_id": i, "k": i * 10, "a": i, "b": 9 - i, "tag": "t%d" % (i % 2)} for i in range(10)]


def ids(rs):
    return sorted(d["_id"] for d in rs)


def write_error(r, code):
    """A write command's reply that must carry one writeErrors entry with code."""
    assert r.get("ok") == 1, r
    we = r.get("writeErrors") or []
    assert len(we) == 1 and we[0]["code"] == code, "expected write error %s, got %s" % (code, dumps(r)[:600])
    return we[0]


def fresh(c, coll):
    c.cmd({"delete": coll, "$db": DB, "deletes": [{"q": {}, "limit": 0}]})
    c.ok({"insert": coll, "$db": DB, "documents": docs()})


def one(c, coll, _id):
    rs = c.find_all(coll, DB, {"_id": _id})
    assert len(rs) == 1, rs
    return rs[0]


def check_expr(c, coll, router):
    fresh(c, coll)
    f = {"$expr": {"$gt": ["$a", "$b"]}}
    assert ids(c.find_all(coll, DB, f)) == [5, 6, 7, 8, 9]
    assert ids(c.find_all(coll, DB, {"$or": [{"$expr": {"$lt": ["$a", 1]}}, {"_id": 9}]})) == [0, 9]
    assert ids(c.find_all(coll, DB, {"tag": "t0", "$expr": {"$gt": ["$a", "$b"]}})) == [6, 8]
    assert num(c.ok({"count": coll, "$db": DB, "query": f})["n"]) == 5
    r = c.ok({"aggregate": coll, "$db": DB, "cursor": {}, "let": {"one": 1},
              "pipeline": [{"$match": {"$expr": {"$eq": ["$a", {"$add": ["$b", "$$one"]}]}}}]})
    assert ids(r["cursor"]["firstBatch"]) == [5]
    # writes select with it too
    r = c.ok({"update": coll, "$db": DB, "updates": [{"q": f, "u": {"$set": {"big": True}}, "multi": True}]})
    assert num(r["n"]) == 5 and num(r["nModified"]) == 5, r
    assert ids(c.find_all(coll, DB, {"big": True})) == [5, 6, 7, 8, 9]
    r = c.ok({"delete": coll, "$db": DB, "deletes": [{"q": {"$expr": {"$lt": ["$a", 2]}}, "limit": 0}]})
    assert num(r["n"]) == 2, r
    r = c.ok({"findAndModify": coll, "$db": DB, "query": {"k": 90, "$expr": {"$eq": ["$a", 9]}},
              "update": {"$set": {"hit": 1}}, "new": True})
    assert r["value"]["_id"] == 9 and r["value"]["hit"] == 1, r
    # errors: an unknown operator (168), $expr inside $elemMatch (2), evaluation (16554)
    c.err({"find": coll, "$db": DB, "filter": {"$expr": {"$bogus": 1}}}, 168)
    c.err({"find": coll, "$db": DB, "filter": {"x": {"$elemMatch": {"$expr": True}}}}, 2)
    c.err({"find": coll, "$db": DB, "filter": {"$expr": {"$add": ["$tag", 1]}}}, 16554)


def check_let(c, coll):
    fresh(c, coll)
    let = {"lim": {"$add": [3, 4]}}
    f = {"$expr": {"$gte": ["$a", "$$lim"]}}
    assert ids(c.find_all(coll, DB, f, let=let)) == [7, 8, 9]
    r = c.ok({"update": coll, "$db": DB, "let": {"lim": 8, "val": "L"},
              "updates": [{"q": f, "u": [{"$set": {"v": "$$val"}}], "multi": True}]})
    assert num(r["nModified"]) == 2, r
    assert ids(c.find_all(coll, DB, {"v": "L"})) == [8, 9]
    r = c.ok({"findAndModify": coll, "$db": DB, "let": {"want": 3}, "new": True,
              "query": {"k": 30, "$expr": {"$eq": ["$a", "$$want"]}}, "update": {"$set": {"f": 1}}})
    assert r["value"]["_id"] == 3 and r["value"]["f"] == 1, r
    r = c.ok({"delete": coll, "$db": DB, "let": {"lim": 9}, "deletes": [{"q": f, "limit": 0}]})
    assert num(r["n"]) == 1, r
    # MongoDB's rules: names start with a lower-case letter (9); $$x must be defined (17276)
    c.err({"find": coll, "$db": DB, "filter": f, "let": {"Lim": 1}}, 9)
    c.err({"find": coll, "$db": DB, "filter": f}, 17276)
    c.err({"update": coll, "$db": DB, "let": {"_x": 1}, "updates": [{"q": {}, "u": {"$set": {"z": 1}}}]}, 9)
    c.err({"delete": coll, "$db": DB, "let": 5, "deletes": [{"q": {}, "limit": 0}]}, 14)


def check_pipeline(c, coll, sharded):
    fresh(c, coll)
    r = c.ok({"update": coll, "$db": DB, "updates": [
        {"q": {"a": {"$lt": 3}}, "u": [{"$set": {"s": {"$add": ["$a", "$b"]}}}, {"$unset": "b"}], "multi": True}]})
    assert num(r["nModified"]) == 3, r
    d = one(c, coll, 1)
    assert d == {"_id": 1, "k": 10, "a": 1, "tag": "t1", "s": 9}, d
    # $replaceWith keeps _id; a computed document
    c.ok({"update": coll, "$db": DB, "updates": [
        {"q": {"_id": 4, "k": 40}, "u": [{"$replaceWith": {"k": "$k", "sum": {"$add": ["$a", "$b"]}}}]}]})
    assert one(c, coll, 4) == {"_id": 4, "k": 40, "sum": 9}, one(c, coll, 4)
    # upsert: the query's equality fields, then the pipeline
    r = c.ok({"update": coll, "$db": DB, "updates": [
        {"q": {"_id": 100, "k": 55}, "u": [{"$set": {"x": {"$concat": ["n", "ew"]}, "k2": {"$multiply": ["$k", 2]}}}],
         "upsert": True}]})
    assert r["upserted"][0]["_id"] == 100, r
    assert one(c, coll, 100) == {"_id": 100, "k": 55, "x": "new", "k2": 110}, one(c, coll, 100)
    # findAndModify: the old and the new document
    r = c.ok({"findAndModify": coll, "$db": DB, "query": {"_id": 6, "k": 60},
              "update": [{"$set": {"a": {"$multiply": ["$a", 10]}}}]})
    assert r["value"]["a"] == 6, r
    r = c.ok({"findAndModify": coll, "$db": DB, "query": {"_id": 6, "k": 60}, "new": True,
              "update": [{"$set": {"a": {"$add": ["$a", 1]}}}]})
    assert r["value"]["a"] == 61, r
    r = c.ok({"findAndModify": coll, "$db": DB, "query": {"_id": 101, "k": 56}, "new": True, "upsert": True,
              "update": [{"$set": {"made": True}}]})
    assert r["value"] == {"_id": 101, "k": 56, "made": True}, r
    # refused: a stage not allowed in an update (72), _id changed (66), a non-document root
    write_error(c.ok({"update": coll, "$db": DB, "updates": [{"q": {"_id": 7, "k": 70}, "u": [{"$match": {}}]}]}), 72)
    write_error(c.ok({"update": coll, "$db": DB, "updates": [
        {"q": {"_id": 7, "k": 70}, "u": [{"$set": {"_id": 70}}]}]}), 66)
    write_error(c.ok({"update": coll, "$db": DB, "updates": [
        {"q": {"_id": 7, "k": 70}, "u": [{"$replaceWith": "$a"}]}]}), 40228)
    if sharded:
        # the shard key may change within its shard, not to a value another shard owns
        c.ok({"update": coll, "$db": DB, "updates": [{"q": {"_id": 2, "k": 20}, "u": [{"$set": {"k": 21}}]}]})
        assert one(c, coll, 2)["k"] == 21
        write_error(c.ok({"update": coll, "$db": DB, "updates": [
            {"q": {"_id": 3, "k": 30}, "u": [{"$set": {"k": 95}}]}]}), 283)
        assert one(c, coll, 3)["k"] == 30


def check_array_filters(c, coll):
    c.cmd({"delete": coll, "$db": DB, "deletes": [{"q": {}, "limit": 0}]})
    c.ok({"insert": coll, "$db": DB, "documents": [
        {"_id": 1, "k": 15, "g": [{"s": 80, "n": 1}, {"s": 95, "n": 1}, {"s": 99, "n": 1}],
         "m": [[1, 7], [8]], "xs": [4, 6, 8]}]})
    q = {"_id": 1, "k": 15}

    def upd(u, af=None, q2=None):
        st = {"q": q2 or q, "u": u}
        if af is not None:
            st["arrayFilters"] = af
        return c.ok({"update": coll, "$db": DB, "updates": [st]})

    r = upd({"$set": {"g.$[hi].n": 0}}, [{"hi.s": {"$gte": 90}}])
    assert num(r["nModified"]) == 1, r
    assert [e["n"] for e in one(c, coll, 1)["g"]] == [1, 0, 0]
    upd({"$inc": {"g.$[].n": 5}})
    assert [e["n"] for e in one(c, coll, 1)["g"]] == [6, 5, 5]
    upd({"$mul": {"m.$[].$[v]": 2}}, [{"v": {"$gt": 5}}])                 # nested
    assert one(c, coll, 1)["m"] == [[1, 14], [16]]
    upd({"$max": {"xs.$[x]": 5}, "$unset": {"g.$[lo].s": 1}}, [{"x": {"$lt": 5}}, {"lo.s": 80}])
    d = one(c, coll, 1)
    assert d["xs"] == [5, 6, 8] and d["g"][0] == {"n": 6}, d
    upd({"$push": {"g.$[e].log": "p"}}, [{"e.s": 99}])
    assert one(c, coll, 1)["g"][2]["log"] == ["p"]
    # "$": the element the query matched
    upd({"$set": {"g.$.mark": "x"}}, None, {"_id": 1, "k": 15, "g.s": 95})
    assert one(c, coll, 1)["g"][1]["mark"] == "x"
    upd({"$inc": {"xs.$": 100}}, None, {"_id": 1, "k": 15, "xs": {"$gt": 5}})
    assert one(c, coll, 1)["xs"] == [5, 106, 8]
    # findAndModify with arrayFilters returns the new document
    r = c.ok({"findAndModify": coll, "$db": DB, "query": q, "new": True,
              "update": {"$set": {"xs.$[big]": 0}}, "arrayFilters": [{"big": {"$gte": 8}}]})
    assert r["value"]["xs"] == [5, 0, 0], r
    # MongoDB's validation: an unused identifier (9), an identifier without a filter (2),
    # a bad identifier name (2), the array must exist (2), "$" without a match (2)
    write_error(upd({"$set": {"xs.$[a]": 1}}, [{"a": 1}, {"b": 1}]), 9)
    write_error(upd({"$set": {"xs.$[a]": 1}}, []), 2)
    write_error(upd({"$set": {"xs.$[A]": 1}}, [{"A": 1}]), 2)
    write_error(upd({"$set": {"nope.$[]": 1}}), 2)
    write_error(upd({"$set": {"xs.$": 1}}), 2)
    c.err({"findAndModify": coll, "$db": DB, "query": q, "update": {"$set": {"xs.$[a]": 1}},
           "arrayFilters": [{"a": 1}, {"a": 2}]}, 9)


def check_dollar_fields(c, coll):
    c.cmd({"delete": coll, "$db": DB, "deletes": [{"q": {}, "limit": 0}]})
    doc = {"_id": 1, "k": 25, "meta": {"$price": 5, "inner": [{"$x": 1}], "$ref": "r"}}
    r = c.ok({"insert": coll, "$db": DB, "documents": [doc]})
    assert num(r["n"]) == 1 and not r.get("writeErrors"), r
    assert one(c, coll, 1) == doc
    assert ids(c.find_all(coll, DB, {"meta.$price": 5})) == [1]
    # a replacement may carry them nested, not at the top level (52, MongoDB 5.0+'s text)
    c.ok({"update": coll, "$db": DB, "updates": [{"q": {"_id": 1, "k": 25}, "u": {"k": 25, "o": {"$in": 1}}}]})
    assert one(c, coll, 1) == {"_id": 1, "k": 25, "o": {"$in": 1}}
    write_error(c.ok({"update": coll, "$db": DB, "updates": [{"q": {"_id": 1, "k": 25}, "u": {"k": 25, "$in": 1}}]}), 52)
    # a pipeline can write them (nested) with $literal
    c.ok({"update": coll, "$db": DB, "updates": [
        {"q": {"_id": 1, "k": 25}, "u": [{"$set": {"p": {"$literal": {"$q": 2}}}}]}]})
    assert one(c, coll, 1)["p"] == {"$q": 2}
    # the top level of an insert is fine (MongoDB 5.0+); inside a document _id is not (52)
    r = c.ok({"insert": coll, "$db": DB, "documents": [{"_id": 2, "k": 26, "$top": 1}]})
    assert num(r["n"]) == 1 and not r.get("writeErrors"), r
    assert one(c, coll, 2) == {"_id": 2, "k": 26, "$top": 1}
    write_error(c.ok({"insert": coll, "$db": DB, "documents": [{"_id": {"$x": 1}, "k": 27}]}), 52)


def all_checks(c, coll, sharded, router=True):
    check_expr(c, coll, router)
    check_let(c, coll)
    check_pipeline(c, coll, sharded)
    check_array_filters(c, coll)
    check_dollar_fields(c, coll)


@test
def test_on_shard(t):
    s = t.shardd("s0")
    all_checks(s.client(), "c", False, router=False)


@test
def test_through_router(t):
    cl = t.cluster(shards=2, routers=1)
    R = cl.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": DB + ".sh", "key": {"k": 1}, "$db": "admin"})
    R.ok({"split": DB + ".sh", "middle": {"k": 50}, "$db": "admin"})
    R.ok({"moveChunk": DB + ".sh", "find": {"k": 50}, "to": "shard1", "$db": "admin"})
    all_checks(R, "un", False)
    fresh(R, "sh")   # the sharded collection's documents really are on both shards
    assert [len(s.client().find_all("sh", DB, {})) for s in cl.shards] == [5, 5]
    all_checks(R, "sh", True)


if __name__ == "__main__":
    main()
