#!/usr/bin/env python3
"""
test_aggregate.py — aggregate on one daemon: `aggregate` on a standalone bin/shardd.
Every stage against the same computation done here in Python over the same documents (a
differential check), the cursor reply continued by getMore in batches, explain (the
$cursor stage carries the planner's plan: an index serves the leading $match), `let`,
and the errors with MongoDB's codes: unknown stage 40324, unknown operator 168, bad stage
shapes, a missing `cursor` (9), {aggregate: 1} (73), a non-simple collation, the $sort /
$group memory limit 292 (a shard started with a tiny --agg-blocking-bytes-max; allowDiskUse
lifts it) and maxTimeMS (50). Before this change every aggregate answered 59
(CommandNotFound), so each test here fails on the old code.
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

DB = "app"
N = 300


def num(v):
    if isinstance(v, dict) and "$numberLong" in v:
        return int(v["$numberLong"])
    if isinstance(v, dict) and "$numberDouble" in v:
        return float(v["$numberDouble"])
    return v


def norm(v):
    """Numbers as Python numbers, recursively (int64 and doubles from relaxed JSON)."""
    if isinstance(v, dict):
        if "$numberLong" in v or "$numberDouble" in v:
            return num(v)
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [norm(x) for x in v]
    return v


def make_docs(seed):
    rnd = random.Random(seed)
    docs = []
    for i in range(N):
        d = {"_id": i, "g": "g%d" % (i % 5), "x": rnd.randint(-50, 50), "y": i % 7}
        if i % 3 == 0:
            d["tags"] = ["t%d" % rnd.randint(0, 3) for _ in range(rnd.randint(0, 3))]
        if i % 11 == 0:
            d["x"] = "s%d" % i          # a string among the numbers
        if i % 13 == 0:
            del d["g"]                  # a missing group key
        docs.append(d)
    return docs


def setup(t, extra=()):
    s = t.shardd("s0", extra=list(extra))
    c = s.client()
    seed = int(os.environ.get("T_SEED", random.randrange(1 << 30)))
    print("seed=%d" % seed)
    docs = make_docs(seed)
    for lo in range(0, N, 100):
        c.ok({"insert": "c", "$db": DB, "documents": docs[lo:lo + 100]})
    return s, c, docs


def agg_all(c, pipeline, batch=None, **opts):
    """Runs aggregate and drains its cursor; returns the documents."""
    cmd = {"aggregate": "c", "pipeline": pipeline, "cursor": {} if batch is None else {"batchSize": batch},
           "$db": DB}
    cmd.update(opts)
    r = c.ok(cmd)
    out = list(r["cursor"]["firstBatch"])
    cid = num(r["cursor"]["id"])
    assert r["cursor"]["ns"] == DB + ".c", r
    for _ in range(10000):
        if cid == 0:
            break
        r = c.ok({"getMore": cid, "collection": "c", "$db": DB})
        out.extend(r["cursor"]["nextBatch"])
        cid = num(r["cursor"]["id"])
    return norm(out)


def isnum(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@test
def test_stages_differential(t):
    s, c, docs = setup(t)
    # $match + $project with expressions
    got = agg_all(c, [{"$match": {"y": {"$gte": 3}}},
                      {"$project": {"_id": 1, "z": {"$multiply": ["$y", 10]},
                                    "big": {"$cond": [{"$gt": ["$y", 4]}, "yes", "no"]}}}])
    want = [{"_id": d["_id"], "z": d["y"] * 10, "big": "yes" if d["y"] > 4 else "no"}
            for d in docs if d["y"] >= 3]
    assert got == want, (got[:3], want[:3])
    # $addFields / $set / $unset
    got = agg_all(c, [{"$match": {"_id": {"$lt": 20}}}, {"$set": {"k": {"$concat": ["id-", {"$toString": "$_id"}]}}},
                      {"$unset": ["x", "tags"]}, {"$addFields": {"y2": {"$add": ["$y", 1]}}}])
    want = []
    for d in docs[:20]:
        e = {k: v for k, v in d.items() if k not in ("x", "tags")}
        e["k"] = "id-%d" % d["_id"]
        e["y2"] = d["y"] + 1
        want.append(e)
    assert got == want, (got[:2], want[:2])
    # $group with every accumulator, sorted by _id
    got = agg_all(c, [{"$group": {"_id": "$g", "n": {"$sum": 1}, "s": {"$sum": "$x"}, "a": {"$avg": "$x"},
                                  "mn": {"$min": "$y"}, "mx": {"$max": "$y"}, "c": {"$count": {}},
                                  "ys": {"$addToSet": "$y"}}},
                      {"$sort": {"_id": 1}}])
    groups = {}
    for d in docs:
        groups.setdefault(d.get("g"), []).append(d)
    want = []
    for k in sorted(groups, key=lambda v: (v is not None, v or "")):
        ds = groups[k]
        xs = [d["x"] for d in ds if isnum(d["x"])]
        want.append({"_id": k, "n": len(ds), "s": sum(xs), "a": (sum(xs) / len(xs)) if xs else None,
                     "mn": min(d["y"] for d in ds), "mx": max(d["y"] for d in ds), "c": len(ds),
                     "ys": sorted(set(d["y"] for d in ds))})
    for g in got:
        g["ys"] = sorted(g["ys"])
    for g, w in zip(got, want):
        assert abs(g["a"] - w["a"]) < 1e-9, (g, w)
        g["a"] = w["a"]
    assert got == want, (got, want)
    # $sort (compound) + $skip + $limit
    got = agg_all(c, [{"$match": {"x": {"$type": "number"}}}, {"$sort": {"x": -1, "_id": 1}},
                      {"$skip": 5}, {"$limit": 17}, {"$project": {"x": 1}}])
    nums = sorted((d for d in docs if isnum(d["x"])), key=lambda d: (-d["x"], d["_id"]))
    want = [{"_id": d["_id"], "x": d["x"]} for d in nums[5:22]]
    assert got == want, (got, want)
    # $unwind (+ includeArrayIndex, preserveNullAndEmptyArrays) and $sortByCount
    got = agg_all(c, [{"$unwind": {"path": "$tags", "includeArrayIndex": "i"}}, {"$project": {"tags": 1, "i": 1}}])
    want = [{"_id": d["_id"], "tags": tg, "i": i} for d in docs for i, tg in enumerate(d.get("tags") or [])]
    assert got == want, (got[:3], want[:3])
    got = agg_all(c, [{"$unwind": {"path": "$tags", "preserveNullAndEmptyArrays": True}}, {"$count": "n"}])
    want_n = sum(max(1, len(d["tags"])) if "tags" in d else 1 for d in docs)
    assert got == [{"n": want_n}], (got, want_n)
    got = agg_all(c, [{"$unwind": "$tags"}, {"$sortByCount": "$tags"}])
    counts = {}
    for d in docs:
        for tg in d.get("tags") or []:
            counts[tg] = counts.get(tg, 0) + 1
    assert sorted(got, key=lambda g: (-g["count"], g["_id"])) == \
        sorted(({"_id": k, "count": v} for k, v in counts.items()), key=lambda g: (-g["count"], g["_id"])), got
    assert [g["count"] for g in got] == sorted((g["count"] for g in got), reverse=True), got
    # $count after $match; an empty result gives no document
    assert agg_all(c, [{"$match": {"y": 0}}, {"$count": "zeros"}]) == \
        [{"zeros": sum(1 for d in docs if d["y"] == 0)}]
    assert agg_all(c, [{"$match": {"y": 99}}, {"$count": "none"}]) == []
    # let variables
    got = agg_all(c, [{"$match": {"_id": 7}}, {"$project": {"_id": 0, "v": {"$add": ["$y", "$$k"]}}}],
                  let={"k": 100})
    assert got == [{"v": docs[7]["y"] + 100}], got


@test
def test_cursor_batches(t):
    s, c, docs = setup(t)
    r = c.ok({"aggregate": "c", "pipeline": [{"$sort": {"_id": -1}}], "cursor": {"batchSize": 10}, "$db": DB})
    first = r["cursor"]["firstBatch"]
    cid = num(r["cursor"]["id"])
    assert len(first) == 10 and cid != 0, r["cursor"]["id"]
    assert [d["_id"] for d in first] == list(range(N - 1, N - 11, -1))
    r = c.ok({"getMore": cid, "collection": "c", "batchSize": 100, "$db": DB})
    assert len(r["cursor"]["nextBatch"]) == 100 and num(r["cursor"]["id"]) == cid, len(r["cursor"]["nextBatch"])
    rest = agg_all(c, [{"$sort": {"_id": -1}}], batch=0)
    assert [d["_id"] for d in rest] == list(range(N - 1, -1, -1))
    # the default first batch is 101 documents; batchSize 0 opens a cursor with none
    r = c.ok({"aggregate": "c", "pipeline": [], "cursor": {}, "$db": DB})
    assert len(r["cursor"]["firstBatch"]) == 101, len(r["cursor"]["firstBatch"])
    r = c.ok({"aggregate": "c", "pipeline": [], "cursor": {"batchSize": 0}, "$db": DB})
    assert r["cursor"]["firstBatch"] == [] and num(r["cursor"]["id"]) != 0, r
    c.ok({"killCursors": "c", "cursors": [r["cursor"]["id"]], "$db": DB})
    # a result that fits one batch closes the cursor at once
    r = c.ok({"aggregate": "c", "pipeline": [{"$limit": 3}], "cursor": {}, "$db": DB})
    assert len(r["cursor"]["firstBatch"]) == 3 and num(r["cursor"]["id"]) == 0, r
    # the fields drivers send are accepted; hint names an index as in find
    got = agg_all(c, [{"$match": {"_id": {"$lt": 5}}}], readConcern={"level": "local"}, comment="drv",
                  hint={"_id": 1}, bypassDocumentValidation=False)
    assert [d["_id"] for d in got] == [0, 1, 2, 3, 4], got
    c.err({"aggregate": "c", "pipeline": [], "cursor": {}, "hint": "nope_1", "$db": DB})
    # a missing collection is an empty one
    r = c.ok({"aggregate": "nope", "pipeline": [{"$match": {}}], "cursor": {}, "$db": DB})
    assert r["cursor"]["firstBatch"] == [] and num(r["cursor"]["id"]) == 0, r


@test
def test_explain(t):
    s, c, docs = setup(t)
    c.ok({"createIndexes": "c", "indexes": [{"key": {"y": 1}, "name": "y_1"}], "$db": DB})
    r = c.ok({"aggregate": "c", "pipeline": [{"$match": {"y": 3}}, {"$group": {"_id": "$g", "a": {"$avg": "$x"}}},
                                             {"$sort": {"a": 1}}], "explain": True, "$db": DB})
    st = r["stages"]
    plan = st[0]["$cursor"]["queryPlanner"]
    assert plan["parsedQuery"] == {"y": 3}, plan
    assert "IXSCAN" in dumps(plan["winningPlan"]) and "y_1" in dumps(plan["winningPlan"]), plan
    assert list(st[1].keys()) == ["$group"] and list(st[2].keys()) == ["$sort"], st
    sp = r["splitPipeline"]
    assert [list(x.keys())[0] for x in sp["shardsPart"]] == ["$match", "$group"], sp
    assert sp["shardsPart"][1]["$group"]["a"] == {"$_partialAvg": "$x"}, sp
    assert sp["mergerPart"][0]["$group"] == {"_id": "$_id", "a": {"$_mergeAvg": "$a"}}, sp
    # without a leading $match: a collection scan; $count shows as its rewrite
    r = c.ok({"aggregate": "c", "pipeline": [{"$count": "n"}], "explain": True, "$db": DB})
    assert "COLLSCAN" in dumps(r["stages"][0]), r
    assert [list(x.keys())[0] for x in r["stages"][1:]] == ["$group", "$project"], r


@test
def test_errors(t):
    s, c, docs = setup(t, extra=["--agg-blocking-bytes-max", "2000"])
    base = {"aggregate": "c", "cursor": {}, "$db": DB}

    def err(pipeline, code, **more):
        cmd = dict(base, pipeline=pipeline)
        cmd.update(more)
        return c.err(cmd, code)

    r = err([{"$bogus": 1}], 40324)
    assert "Unrecognized pipeline stage name: '$bogus'" in r["errmsg"], r
    assert r["codeName"] == "Location40324", r
    r = err([{"$project": {"a": {"$foo": 1}}}], 168)
    assert r["codeName"] == "InvalidPipelineOperator" and "$foo" in r["errmsg"], r
    err([{"$match": {}, "$limit": 1}], 40323)
    err([{"$project": {"a": 1, "b": 0}}], 31254)
    err([{"$group": {"n": {"$sum": 1}}}], 15955)
    err([{"$group": {"_id": 1, "n": {"$median": 1}}}], 15952)
    err([{"$limit": 0}], 15958)
    err([{"$unwind": "x"}], 28818)
    err([{"$match": {"_id": 1}}, {"$project": {"v": {"$divide": [1, 0]}}}], 2)
    err([{"$match": {"_id": 1}}, {"$project": {"v": {"$add": ["$g", 1]}}}], 16554)
    err([{"$match": {"_id": 0}}, {"$project": {"v": {"$size": "$x"}}}], 17124)
    err([{"$match": {"_id": 1}}, {"$project": {"v": {"$concat": ["a", "$y"]}}}], 16702)
    c.err({"aggregate": "c", "pipeline": [], "$db": DB}, 9)                        # no cursor
    c.err({"aggregate": 1, "pipeline": [{"$match": {}}], "cursor": {}, "$db": DB}, 73)
    c.err({"aggregate": "c", "pipeline": {}, "cursor": {}, "$db": DB}, 14)         # not an array
    c.err({"aggregate": "c", "pipeline": [], "cursor": {}, "bogus": 1, "$db": DB}, 40415)
    err([], 2, collation={"locale": "fr"})
    agg_all(c, [{"$limit": 1}], collation={"locale": "simple"})
    # the blocking-stage memory limit (2000 bytes on this shard): 292 without allowDiskUse
    r = err([{"$sort": {"x": 1}}], 292)
    assert r["codeName"] == "QueryExceededMemoryLimitNoDiskUseAllowed", r
    err([{"$group": {"_id": "$_id", "d": {"$push": "$$ROOT"}}}], 292)
    assert len(agg_all(c, [{"$sort": {"x": 1}}], allowDiskUse=True)) == N
    # a $sort followed by $limit keeps only the top k: no memory error
    assert len(agg_all(c, [{"$sort": {"y": 1}}, {"$limit": 3}])) == 3
    # the shard still serves
    assert c.ok({"count": "c", "$db": DB})["n"] == N


@test
def test_max_time(t):
    s, c, docs = setup(t)
    # the maxTimeAlwaysTimeOut failpoint: any operation with a maxTimeMS expires at its
    # first interrupt check (deterministic); without maxTimeMS the pipeline runs
    c.ok({"configureFailPoint": "maxTimeAlwaysTimeOut", "mode": "alwaysOn", "$db": "admin"})
    try:
        c.err({"aggregate": "c", "pipeline": [{"$group": {"_id": "$g"}}], "cursor": {}, "maxTimeMS": 60000,
               "$db": DB}, 50)
        assert len(agg_all(c, [{"$group": {"_id": "$y"}}])) == 7
    finally:
        c.ok({"configureFailPoint": "maxTimeAlwaysTimeOut", "mode": "off", "$db": "admin"})
    assert len(agg_all(c, [{"$group": {"_id": "$y"}}], maxTimeMS=60000)) == 7


@test
def test_ownership_filter(t):
    """The pipeline reads through find's path: with the shard's shardVersion, documents
    planted in a range the shard does not own (orphans) are not aggregated; without one
    (as on a plain mongod) they are; a stale shardVersion answers StaleConfig."""
    cl = t.cluster(shards=2, routers=1)
    R = cl.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": DB + ".o", "key": {"k": 1}, "$db": "admin"})
    R.ok({"split": DB + ".o", "middle": {"k": 100}, "$db": "admin"})
    R.ok({"insert": "o", "$db": DB, "documents": [{"_id": i, "k": i, "v": 1} for i in range(200)]})
    R.ok({"moveChunk": DB + ".o", "find": {"k": 150}, "to": "shard1", "_waitForDelete": True,
          "$db": "admin"})
    s0 = cl.shards[0].client()
    s0.ok({"insert": "o", "$db": DB, "documents": [{"_id": 1000 + i, "k": 150 + i, "v": 100} for i in range(5)]})
    sv = s0.ok({"serverStatus": 1})["sharding"][DB + ".o"]["shardVersion"]
    pipe = [{"$group": {"_id": None, "n": {"$sum": 1}, "v": {"$sum": "$v"}}}]
    r = s0.ok({"aggregate": "o", "pipeline": pipe, "cursor": {}, "shardVersion": sv, "$db": DB})
    assert norm(r["cursor"]["firstBatch"]) == [{"_id": None, "n": 100, "v": 100}], r
    r = s0.ok({"aggregate": "o", "pipeline": [{"$match": {"k": {"$gte": 140}}}] + pipe, "cursor": {},
               "shardVersion": sv, "$db": DB})
    assert r["cursor"]["firstBatch"] == [], r
    r = s0.ok({"aggregate": "o", "pipeline": pipe, "cursor": {}, "$db": DB})
    assert norm(r["cursor"]["firstBatch"]) == [{"_id": None, "n": 105, "v": 600}], r
    sv1 = cl.shards[1].client().ok({"serverStatus": 1})["sharding"][DB + ".o"]["shardVersion"]
    r = s0.cmd({"aggregate": "o", "pipeline": pipe, "cursor": {}, "shardVersion": sv1, "$db": DB})
    assert r.get("code") == 13388, r


if __name__ == "__main__":
    main()
