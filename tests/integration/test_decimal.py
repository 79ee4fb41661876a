#!/usr/bin/env python3
"""
test_decimal.py — Decimal128 in minishard, with real processes.

decimal128 values are stored, matched, sorted and distinct'ed by value, but refused in
every KEY (docs/query-language.md "Decimal128", docs/key-encoding.md): a write that would
put one in _id, an indexed field (array elements of a multikey index and hashed indexes
too) or the shard key fails with BadValue 2 and one message naming the field; so do
createIndexes over a field that already holds one (nothing built, batched build too) and
shardCollection over one. A filter or sort that compares an indexed or shard-key field
with a decimal is answered by value (the index bounds leave the field unbounded, the
router targets every shard) and never misses a document.

Which cases failed before the change (checked against the code before it):
- the message (old: "decimal128 is not supported in keys", no field; through the router
  "shard key field 'x': ...") — every refusal test below checks the new message;
- a hashed index or a hashed shard key over a decimal was ACCEPTED (the hash went through
  double): test_shard_writes_refused, test_shard_create_index_refused,
  test_router_hashed_shard_key;
- router single writes / upsert / findAndModify whose shard-key filter held a decimal
  answered "must contain the shard key" / "could not extract exact shard key"
  (test_router_hashed_shard_key).
Already right before: queries with decimal values on indexed fields and shard keys
(test_shard_queries_on_indexes, the find/count rows of the router tests), and
storage / matching / sort / distinct of decimals outside keys (test_unkeyed_decimals).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

DB = "app"
BUILD_DOCS = 6000   # > one index build batch (SHARDD_INDEX_BUILD_BATCH_ROWS = 5000)


def D(s):
    return {"$numberDecimal": s}


def refusal(field):
    return ("decimal128 value in field '%s' cannot be used in an index key or shard key "
            "(minishard does not support decimal128 in keys)" % field)


def write_error(r, field):
    """The reply of a one-op write holds one writeError: BadValue with the message."""
    assert r.get("ok") == 1, r
    we = r.get("writeErrors")
    assert we and len(we) == 1, r
    assert we[0]["code"] == 2, r
    assert we[0]["errmsg"] == refusal(field), we[0]["errmsg"]
    return r


def cmd_error(c, cmd, field, contains=False):
    r = c.err(cmd, 2)
    if contains:
        assert refusal(field) in r["errmsg"], r["errmsg"]
    else:
        assert r["errmsg"] == refusal(field), r["errmsg"]
    return r


def ids(docs):
    return sorted(d["_id"] for d in docs)


def index_names(c, coll):
    r = c.ok({"listIndexes": coll, "$db": DB})
    return sorted(ix["name"] for ix in r["cursor"]["firstBatch"])


def count(c, coll, q=None):
    return c.ok({"count": coll, "$db": DB, "query": q or {}})["n"]


@test
def test_shard_writes_refused(t):
    s = t.shardd("s0")
    c = s.client()
    c.ok({"createIndexes": "w", "$db": DB, "indexes": [
        {"key": {"y": 1}, "name": "y_1"},
        {"key": {"n.a": 1, "z": -1}, "name": "na_z"},
        {"key": {"h": "hashed"}, "name": "h_hashed"}]})
    c.ok({"insert": "w", "$db": DB, "documents": [{"_id": 1, "y": 1}, {"_id": 2, "y": 2}]})
    ins = lambda doc: c.cmd({"insert": "w", "$db": DB, "documents": [doc]})
    write_error(ins({"_id": D("7")}), "_id")
    write_error(ins({"_id": {"k": [1, D("7")]}}), "_id")
    write_error(ins({"_id": 7, "y": D("1.5")}), "y")
    write_error(ins({"_id": 7, "y": [1, D("1.5")]}), "y")               # multikey element
    write_error(ins({"_id": 7, "y": {"deep": [D("1.5")]}}), "y")
    write_error(ins({"_id": 7, "n": [{"a": 1}, {"a": D("2")}]}), "n.a")   # through an array
    write_error(ins({"_id": 7, "n": {"a": 1}, "z": D("2")}), "z")
    write_error(ins({"_id": 7, "h": D("5")}), "h")                       # hashed index
    assert count(c, "w") == 2

    upd = lambda q, u, **kw: c.cmd({"update": "w", "$db": DB,
                                    "updates": [dict({"q": q, "u": u}, **kw)]})
    write_error(upd({"_id": 1}, {"$set": {"y": D("3")}}), "y")
    write_error(upd({"_id": 1}, {"$set": {"y": [5, D("3")]}}), "y")
    write_error(upd({"_id": 1}, {"y": D("3")}), "y")                     # replacement
    write_error(upd({"_id": 1}, {"$set": {"h": D("3")}}), "h")
    write_error(upd({"_id": 9}, {"$set": {"y": D("3")}}, upsert=True), "y")
    write_error(upd({"_id": D("9")}, {"$set": {"q": 1}}, upsert=True), "_id")
    write_error(upd({"y": 5}, {"$set": {"y": D("5")}}, upsert=True), "y")
    cmd_error(c, {"findAndModify": "w", "$db": DB, "query": {"_id": 1},
                  "update": {"$set": {"y": D("3")}}}, "y")
    cmd_error(c, {"findAndModify": "w", "$db": DB, "query": {"_id": 10},
                  "update": {"$set": {"n.a": D("3")}}, "upsert": True}, "n.a")
    assert count(c, "w") == 2
    assert c.find_all("w", DB, {}) == [{"_id": 1, "y": 1}, {"_id": 2, "y": 2}]
    assert c.find_all("w", DB, {"_id": 1}) == [{"_id": 1, "y": 1}]
    # Fields outside every key take decimals.
    c.ok({"update": "w", "$db": DB, "updates": [{"q": {"_id": 1}, "u": {"$set": {"free": D("3.25")}}}]})
    assert c.find_all("w", DB, {"_id": 1}) == [{"_id": 1, "y": 1, "free": D("3.25")}]


@test
def test_shard_create_index_refused(t):
    s = t.shardd("s0")
    c = s.client()
    docs = [{"_id": 1, "z": 1}, {"_id": 2, "z": D("1.5")}, {"_id": 3, "arr": [1, D("2")]},
            {"_id": 4, "sub": {"a": D("3")}}, {"_id": 5, "h": D("4")}]
    c.ok({"insert": "e", "$db": DB, "documents": docs})
    ci = lambda key: {"createIndexes": "e", "$db": DB, "indexes": [{"key": key, "name": "ix"}]}
    cmd_error(c, ci({"z": 1}), "z")
    cmd_error(c, ci({"arr": 1}), "arr")
    cmd_error(c, ci({"sub.a": -1, "w": 1}), "sub.a")
    cmd_error(c, ci({"sub": 1}), "sub")
    cmd_error(c, ci({"h": "hashed"}), "h")
    assert index_names(c, "e") == ["_id_"]
    # Nothing half-built: a later write of the field still works, then the index builds.
    c.ok({"delete": "e", "$db": DB, "deletes": [{"q": {"_id": {"$in": [2, 3, 4, 5]}}, "limit": 0}]})
    c.ok(ci({"z": 1}))
    assert index_names(c, "e") == ["_id_", "ix"]

    # The batched build: the decimal sits past the first batch.
    for i in range(0, BUILD_DOCS, 1000):
        c.ok({"insert": "big", "$db": DB,
              "documents": [{"_id": j, "v": j} for j in range(i, i + 1000)]})
    c.ok({"insert": "big", "$db": DB, "documents": [{"_id": BUILD_DOCS, "v": D("0.5")}]})
    cmd_error(c, {"createIndexes": "big", "$db": DB,
                  "indexes": [{"key": {"v": 1}, "name": "v_1"}]}, "v")
    assert index_names(c, "big") == ["_id_"]
    assert count(c, "big") == BUILD_DOCS + 1


def check_queries(c, coll, docs, field):
    """Every filter compares field with a decimal; the answer is what comparing by value
    gives, hint or not."""
    def want(pred):
        return sorted(d["_id"] for d in docs if field in d and pred(num(d[field])))

    cases = [
        ({field: {"$gt": D("1")}}, lambda v: v > 1),
        ({field: {"$gte": D("2")}}, lambda v: v >= 2),
        ({field: {"$lt": D("2.5")}}, lambda v: v < 2.5),
        ({field: {"$lte": D("-1E+0")}}, lambda v: v <= -1),
        ({field: D("2")}, lambda v: v == 2),
        ({field: {"$eq": D("2.50")}}, lambda v: v == 2.5),
        ({field: {"$in": [D("3"), 0.5, D("100")]}}, lambda v: v in (3, 0.5, 100)),
        ({field: {"$ne": D("2")}}, lambda v: v != 2),
        ({field: {"$gt": D("0"), "$lt": D("3")}}, lambda v: 0 < v < 3),
        ({"$or": [{field: D("3")}, {field: {"$lt": D("0")}}]}, lambda v: v == 3 or v < 0),
        ({field: {"$gt": D("Infinity")}}, lambda v: False),
        ({field: {"$lt": D("Infinity")}}, lambda v: True),
    ]
    for filt, pred in cases:
        exp = want(pred)
        got = ids(c.find_all(coll, DB, filt))
        assert got == exp, "filter %s: got %s, want %s" % (dumps(filt), got, exp)
        assert count(c, coll, filt) == len(exp), filt
        got = [d["_id"] for d in c.find_all(coll, DB, filt, sort={field: 1, "_id": 1})]
        exp_sorted = sorted(exp, key=lambda i: (num(next(d for d in docs if d["_id"] == i)[field]), i))
        assert got == exp_sorted, "sorted %s: got %s, want %s" % (dumps(filt), got, exp_sorted)


def num(v):
    if isinstance(v, dict):
        return float(list(v.values())[0])
    return v


@test
def test_shard_queries_on_indexes(t):
    s = t.shardd("s0")
    c = s.client()
    docs = [{"_id": i, "y": v, "w": i % 3} for i, v in enumerate(
        [-5, -1, 0, 0.5, 1, 2, 2.0, long(2), 2.5, 3, long(3), 100, 1e300])]
    c.ok({"createIndexes": "q", "$db": DB, "indexes": [
        {"key": {"y": 1}, "name": "y_1"}, {"key": {"w": 1, "y": -1}, "name": "w_y"}]})
    c.ok({"insert": "q", "$db": DB, "documents": docs})
    check_queries(c, "q", docs, "y")
    got = ids(c.find_all("q", DB, {"y": {"$gte": D("2")}}, hint="y_1"))
    assert got == [5, 6, 7, 8, 9, 10, 11, 12], got
    got = ids(c.find_all("q", DB, {"w": 1, "y": {"$gt": D("0")}}, hint="w_y"))
    assert got == [4, 7, 10], got
    # Writes filtered by a decimal on an indexed field reach every matching document.
    r = c.ok({"update": "q", "$db": DB, "updates": [
        {"q": {"y": {"$gte": D("2"), "$lt": D("3")}}, "u": {"$set": {"hit": 1}}, "multi": True}]})
    assert r["n"] == 4, r
    r = c.ok({"delete": "q", "$db": DB, "deletes": [{"q": {"y": D("3")}, "limit": 0}]})
    assert r["n"] == 2, r
    r = c.ok({"distinct": "q", "$db": DB, "key": "w", "query": {"y": {"$lt": D("0")}}})
    assert sorted(r["values"]) == [0, 1], r


@test
def test_unkeyed_decimals(t):
    """Outside keys decimals are values like any other: stored as they are, matched,
    sorted and distinct'ed by value with the other numbers."""
    s = t.shardd("s0")
    c = s.client()
    docs = [{"_id": 1, "v": D("1.5")}, {"_id": 2, "v": 1}, {"_id": 3, "v": 2.0},
            {"_id": 4, "v": D("2")}, {"_id": 5, "v": D("-0.25")}, {"_id": 6, "v": long(7)},
            {"_id": 7, "v": [D("0.75"), 9]}, {"_id": 8, "v": "text"}]
    c.ok({"insert": "u", "$db": DB, "documents": docs})
    assert c.find_all("u", DB, {"_id": 1}) == [docs[0]]   # stored as given
    assert ids(c.find_all("u", DB, {"v": 2})) == [3, 4]
    assert ids(c.find_all("u", DB, {"v": {"$gt": 1, "$lt": D("2")}})) == [1, 7]
    got = [d["_id"] for d in c.find_all("u", DB, {"_id": {"$ne": 8}}, sort={"v": 1, "_id": 1})]
    assert got == [5, 7, 2, 1, 3, 4, 6], got   # array sorts by its smallest element
    got = [d["_id"] for d in c.find_all("u", DB, {"_id": {"$ne": 8}}, sort={"v": -1, "_id": 1})]
    assert got == [7, 6, 3, 4, 1, 2, 5], got   # ... descending by its largest
    r = c.ok({"distinct": "u", "$db": DB, "key": "v"})
    vals = r["values"]
    assert len(vals) == 8 and D("1.5") in vals and D("0.75") in vals and "text" in vals, vals
    assert sum(1 for v in vals if num(v) == 2) == 1, vals   # 2.0 and NumberDecimal 2: one value
    # Updates: $set / $min / $max with decimals work, $inc / $mul with a decimal are refused.
    c.ok({"update": "u", "$db": DB, "updates": [{"q": {"_id": 2}, "u": {"$set": {"d": D("10.01")}}}]})
    c.ok({"update": "u", "$db": DB, "updates": [{"q": {"_id": 2}, "u": {"$max": {"v": D("4.5")}}}]})
    assert c.find_all("u", DB, {"_id": 2}) == [{"_id": 2, "v": D("4.5"), "d": D("10.01")}]
    c.ok({"update": "u", "$db": DB, "updates": [{"q": {"_id": 2}, "u": {
        "$min": {"d": D("3")}, "$push": {"p": D("1.1")}, "$addToSet": {"s": D("2.2")}}}]})
    c.ok({"update": "u", "$db": DB, "updates": [{"q": {"_id": 20}, "u": {
        "$setOnInsert": {"o": D("5.5")}}, "upsert": True}]})
    assert c.find_all("u", DB, {"_id": {"$in": [2, 20]}}) == [
        {"_id": 2, "v": D("4.5"), "d": D("3"), "p": [D("1.1")], "s": [D("2.2")]},
        {"_id": 20, "o": D("5.5")}]
    c.ok({"delete": "u", "$db": DB, "deletes": [{"q": {"_id": 20}, "limit": 1}]})
    r = c.ok({"update": "u", "$db": DB, "updates": [{"q": {"_id": 3}, "u": {"$inc": {"v": D("1")}}}]})
    assert r["writeErrors"][0]["code"] == 2, r
    r = c.ok({"update": "u", "$db": DB, "updates": [{"q": {"_id": 1}, "u": {"$inc": {"v": 1}}}]})
    assert r["writeErrors"][0]["code"] == 14, r
    assert count(c, "u", {"v": {"$gte": D("2")}}) == 5   # 2, 3, 4, 6 and 7 (9 in its array)


def router_setup(t):
    cl = t.cluster(shards=3, routers=1)
    R = cl.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    return cl, R


@test
def test_router_ranged_shard_key(t):
    cl, R = router_setup(t)
    R.ok({"shardCollection": DB + ".r", "key": {"x": 1}, "$db": "admin"})
    for m in (0, 2, 3):
        R.ok({"split": DB + ".r", "middle": {"x": m}, "$db": "admin"})
    docs = [{"_id": i, "x": v} for i, v in enumerate([-5, -1, 0, 0.5, 1, 2, 2.0, long(2), 2.5, 3, 100])]
    R.ok({"insert": "r", "$db": DB, "documents": docs})
    ins = lambda doc: R.cmd({"insert": "r", "$db": DB, "documents": [doc]})
    write_error(ins({"_id": 50, "x": D("1")}), "x")
    write_error(ins({"_id": 50, "x": {"in": D("1")}}), "x")
    write_error(R.cmd({"update": "r", "$db": DB, "updates": [
        {"q": {"x": D("7")}, "u": {"$set": {"a": 1}}, "upsert": True}]}), "x")
    write_error(R.cmd({"update": "r", "$db": DB, "updates": [
        {"q": {"x": 7}, "u": {"x": D("7")}, "upsert": True}]}), "x")
    cmd_error(R, {"split": DB + ".r", "middle": {"x": D("1")}, "$db": "admin"}, "x", contains=True)
    assert count(R, "r") == len(docs)
    check_queries(R, "r", docs, "x")
    # A single update by a decimal shard-key value: the chunks it may be in are all on
    # shard0 here, so it is targeted and applied by value.
    r = R.ok({"update": "r", "$db": DB, "updates": [{"q": {"x": D("2.5")}, "u": {"$set": {"t": 1}}}]})
    assert r["n"] == 1 and R.find_all("r", DB, {"t": 1}) == [{"_id": 8, "x": 2.5, "t": 1}], r


@test
def test_router_hashed_shard_key(t):
    cl, R = router_setup(t)
    R.ok({"shardCollection": DB + ".h", "key": {"h": "hashed"}, "$db": "admin"})
    docs = [{"_id": i, "h": v} for i, v in enumerate(
        [-5, -1, 0, 0.5, 1, 2, 2.0, long(2), 2.5, 3, long(3), 100] + list(range(200, 260)))]
    R.ok({"insert": "h", "$db": DB, "documents": docs})
    per = [s.client().ok({"count": "h", "$db": DB})["n"] for s in cl.shards]
    assert all(n > 0 for n in per), per
    write_error(R.cmd({"insert": "h", "$db": DB, "documents": [{"_id": 999, "h": D("5")}]}), "h")
    # Directly on a shard too (the shard checks the key it stores).
    s0 = cl.shards[0].client()
    r = s0.cmd({"insert": "h", "$db": DB, "documents": [{"_id": 999, "h": D("5")}]})
    assert r.get("writeErrors") and r["writeErrors"][0]["code"] == 2, r
    assert refusal("h") in r["writeErrors"][0]["errmsg"], r
    check_queries(R, "h", docs, "h")
    # Writes that need one shard cannot be targeted by a decimal: a clear refusal.
    write_error(R.cmd({"update": "h", "$db": DB, "updates": [
        {"q": {"h": D("2.5")}, "u": {"$set": {"t": 1}}}]}), "h")
    write_error(R.cmd({"update": "h", "$db": DB, "updates": [
        {"q": {"h": D("7")}, "u": {"$set": {"t": 1}}, "upsert": True}]}), "h")
    write_error(R.cmd({"delete": "h", "$db": DB, "deletes": [{"q": {"h": D("2.5")}, "limit": 1}]}), "h")
    cmd_error(R, {"findAndModify": "h", "$db": DB, "query": {"h": D("2.5")},
                  "update": {"$set": {"t": 1}}}, "h")
    # Multi writes go to every shard and reach every match.
    r = R.ok({"update": "h", "$db": DB, "updates": [
        {"q": {"h": {"$gte": D("2"), "$lt": D("3")}}, "u": {"$set": {"t": 1}}, "multi": True}]})
    assert r["n"] == 4, r
    r = R.ok({"delete": "h", "$db": DB, "deletes": [{"q": {"h": D("3")}, "limit": 0}]})
    assert r["n"] == 2, r
    assert count(R, "h") == len(docs) - 2


@test
def test_router_shard_collection_and_index_refused(t):
    cl, R = router_setup(t)
    R.ok({"insert": "s", "$db": DB, "documents": [{"_id": 1, "x": 1}, {"_id": 2, "x": D("2")},
                                                   {"_id": 3, "y": [D("1")]}]})
    # shardCollection of a non-empty collection needs an index on the key, and no index
    # over a field holding a decimal can be built (before: the hashed one was).
    for key in ({"x": 1}, {"x": "hashed"}, {"x": 1, "z": 1}):
        r = R.err({"createIndexes": "s", "$db": DB, "indexes": [{"key": key, "name": "k"}]}, 2)
        assert refusal("x") in r["errmsg"], r
        r = R.err({"shardCollection": DB + ".s", "key": key, "$db": "admin"}, 72)
        assert "create an index" in r["errmsg"], r
    r = R.err({"createIndexes": "s", "$db": DB, "indexes": [{"key": {"y": 1}, "name": "y_1"}]}, 2)
    assert refusal("y") in r["errmsg"], r
    assert index_names(R, "s") == ["_id_"]
    # Still unsharded, still whole, and sharding works once the decimal is gone.
    assert count(R, "s") == 3
    R.ok({"delete": "s", "$db": DB, "deletes": [{"q": {"_id": 2}, "limit": 1}]})
    R.ok({"createIndexes": "s", "$db": DB, "indexes": [{"key": {"x": 1}, "name": "x_1"}]})
    R.ok({"shardCollection": DB + ".s", "key": {"x": 1}, "$db": "admin"})
    write_error(R.cmd({"insert": "s", "$db": DB, "documents": [{"_id": 4, "x": D("4")}]}), "x")


if __name__ == "__main__":
    main()
