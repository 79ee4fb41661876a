#!/usr/bin/env python3
"""
test_aggregate_sharded.py — aggregate through the router: a differential test. The
same documents go into a 3-shard cluster (a ranged collection split into 8 chunks spread
over every shard, a hashed one pre-split over the 3 shards, an unsharded one on the
primary) and into one standalone shardd; every pipeline of PIPELINES runs through the
router on each collection and on the standalone shard, and the results must be equal
(in order when the pipeline fixes the order, as multisets otherwise; $push / $addToSet
arrays as multisets where their order is undefined). Also: cursors through getMore,
targeting (a $match on the shard key reaches only the owning shards, seen in explain),
explain's split shape, orphans (planted on a shard, and left by a moveChunk that runs
while pipelines run) never counted, errors with MongoDB's codes, and aggregates on the
config database (through the router and on the config server) equal to what find reads.
Before this change the router answered aggregate with CommandNotFound (59) and the config
server too, so each test here fails on the old code.
"""
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

DB = "agg"
N = 400
WORDS = ["ant", "bee", "cat", "dog", "eel"]


def norm(v):
    """Numbers as Python numbers (int64 / double wrappers of relaxed JSON), recursively."""
    if isinstance(v, dict):
        if "$numberLong" in v:
            return int(v["$numberLong"])
        if "$numberDouble" in v:
            return float(v["$numberDouble"])
        if "$numberInt" in v:
            return int(v["$numberInt"])
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, float) and v == int(v) and abs(v) < 2**53:
        return v   # kept: 2.0 and 2 compare equal in Python anyway
    return v


def canon(v):
    return dumps(v)


def sort_arrays(v):
    """Every array sorted (by canonical form), recursively: for $push / $addToSet."""
    if isinstance(v, dict):
        return {k: sort_arrays(x) for k, x in v.items()}
    if isinstance(v, list):
        return sorted((sort_arrays(x) for x in v), key=canon)
    return v


def make_docs(seed):
    rnd = random.Random(seed)
    docs = []
    for i in range(N):
        d = {"_id": i, "k": i, "g": WORDS[i % 5], "x": rnd.randint(-50, 50), "y": i % 7,
             "sub": {"a": i % 3, "b": rnd.choice(WORDS)}}
        if i % 3 == 0:
            d["tags"] = [rnd.choice(WORDS) for _ in range(rnd.randint(0, 3))]
        if i % 17 == 0:
            del d["g"]                   # a missing group key
        if i % 23 == 0:
            d["x"] = None
        docs.append(d)
    return docs


# (name, pipeline, mode): mode "ordered" = the pipeline fixes the order; "set" = a
# multiset of documents; "sets" = a multiset with every array compared as a multiset.
PIPELINES = [
    ("match_all", [{"$match": {}}], "set"),
    ("match_key_eq", [{"$match": {"k": 123}}], "ordered"),
    ("match_key_range", [{"$match": {"k": {"$gte": 90, "$lt": 160}}}, {"$sort": {"k": 1}}], "ordered"),
    ("match_key_in", [{"$match": {"k": {"$in": [3, 150, 250, 399]}}}, {"$project": {"k": 1, "g": 1}}], "set"),
    ("match_other", [{"$match": {"x": {"$gt": 10}}}, {"$project": {"_id": 1, "x": 1}}], "set"),
    ("project_expr", [{"$project": {"k": 1, "s": {"$add": ["$k", "$y"]},
                                    "c": {"$cond": [{"$gte": ["$x", 0]}, "pos", "neg"]},
                                    "n": {"$ifNull": ["$g", "none"]}}}], "set"),
    ("addfields_unset", [{"$addFields": {"z": {"$multiply": ["$y", 2]}, "w": {"$concat": ["$sub.b", "-", {"$toString": "$y"}]}}},
                         {"$unset": ["sub", "tags"]}], "set"),
    ("sort_limit", [{"$sort": {"x": -1, "_id": 1}}, {"$limit": 7}], "ordered"),
    ("sort_skip_limit", [{"$sort": {"y": 1, "k": -1}}, {"$skip": 13}, {"$limit": 20}], "ordered"),
    ("skip_only", [{"$sort": {"k": 1}}, {"$skip": 390}], "ordered"),
    ("limit_then_count", [{"$match": {"y": 3}}, {"$sort": {"k": 1}}, {"$limit": 10},
                          {"$group": {"_id": None, "n": {"$sum": 1}, "t": {"$sum": "$k"}}}], "ordered"),
    ("group_sum_count", [{"$group": {"_id": "$g", "n": {"$sum": 1}, "t": {"$sum": "$x"},
                                     "c": {"$count": {}}}}, {"$sort": {"_id": 1}}], "ordered"),
    ("group_avg_min_max", [{"$group": {"_id": "$y", "avg": {"$avg": "$x"}, "mn": {"$min": "$x"},
                                       "mx": {"$max": "$x"}}}, {"$sort": {"_id": 1}}], "ordered"),
    ("group_doc_id", [{"$group": {"_id": {"g": "$g", "a": "$sub.a"}, "n": {"$sum": 1}}}], "set"),
    ("group_expr_id", [{"$group": {"_id": {"$mod": ["$k", 4]}, "t": {"$sum": {"$multiply": ["$y", 3]}}}},
                       {"$sort": {"t": -1, "_id": 1}}], "ordered"),
    ("group_push_set", [{"$match": {"k": {"$lt": 60}}},
                        {"$group": {"_id": "$y", "ks": {"$push": "$k"}, "gs": {"$addToSet": "$g"}}}], "sets"),
    ("group_first_last", [{"$sort": {"k": 1}}, {"$group": {"_id": "$g", "f": {"$first": "$k"},
                                                          "l": {"$last": "$k"}}}], "set"),
    ("group_null", [{"$group": {"_id": None, "n": {"$sum": 1}, "avg": {"$avg": "$y"}}}], "ordered"),
    ("count", [{"$match": {"x": {"$gte": 0}}}, {"$count": "n"}], "ordered"),
    ("count_empty", [{"$match": {"x": 1000}}, {"$count": "n"}], "ordered"),
    ("unwind", [{"$unwind": "$tags"}, {"$project": {"k": 1, "tags": 1}}], "set"),
    ("unwind_group", [{"$unwind": {"path": "$tags", "preserveNullAndEmptyArrays": True}},
                      {"$group": {"_id": "$tags", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}], "ordered"),
    ("sort_by_count", [{"$sortByCount": "$sub.b"}, {"$sort": {"count": -1, "_id": 1}}], "ordered"),
    ("group_then_sort_limit", [{"$group": {"_id": "$sub.b", "t": {"$sum": "$k"}}},
                               {"$sort": {"t": -1}}, {"$limit": 2}, {"$project": {"t": 1}}], "ordered"),
    ("set_size", [{"$match": {"tags": {"$exists": True}}},
                  {"$set": {"nt": {"$size": "$tags"}}}, {"$group": {"_id": "$nt", "n": {"$sum": 1}}},
                  {"$sort": {"_id": 1}}], "ordered"),
    ("two_groups", [{"$group": {"_id": {"g": "$g", "y": "$y"}, "n": {"$sum": 1}}},
                    {"$group": {"_id": "$_id.g", "groups": {"$sum": 1}, "docs": {"$sum": "$n"}}},
                    {"$sort": {"_id": 1}}], "ordered"),
]


def agg_all(c, coll, pipeline, batch=None, **opts):
    cmd = {"aggregate": coll, "pipeline": pipeline, "cursor": {} if batch is None else {"batchSize": batch},
           "$db": DB}
    cmd.update(opts)
    r = c.ok(cmd)
    out = list(r["cursor"]["firstBatch"])
    cid = r["cursor"]["id"]
    for _ in range(100000):
        if cid in (0, "0") or cid == {"$numberLong": "0"}:
            break
        r = c.ok({"getMore": cid, "collection": coll, "$db": DB, **({"batchSize": batch} if batch else {})})
        out.extend(r["cursor"]["nextBatch"])
        cid = r["cursor"]["id"]
    return norm(out)


def compare(name, coll, got, want, mode):
    if mode == "sets":
        got, want = [sort_arrays(d) for d in got], [sort_arrays(d) for d in want]
    if mode in ("set", "sets"):
        got, want = sorted(got, key=canon), sorted(want, key=canon)
    if got != want:
        raise AssertionError("pipeline %s on %s differs:\n  router(%d): %s\n  single(%d): %s" % (
            name, coll, len(got), dumps(got)[:1500], len(want), dumps(want)[:1500]))


def setup(t):
    cl = t.cluster(shards=3, routers=1)
    single = t.shardd("single")
    R = cl.client()
    S = single.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": DB + ".r", "key": {"k": 1}, "$db": "admin"})
    for i, m in enumerate(range(50, 400, 50)):   # 8 chunks, round-robin over the shards
        R.ok({"split": DB + ".r", "middle": {"k": m}, "$db": "admin"})
    for i, lo in enumerate(range(50, 400, 50)):
        to = "shard%d" % ((i + 1) % 3)
        if to != "shard0":
            R.ok({"moveChunk": DB + ".r", "find": {"k": lo}, "to": to, "_waitForDelete": True, "$db": "admin"})
    R.ok({"shardCollection": DB + ".h", "key": {"k": "hashed"}, "$db": "admin"})
    docs = make_docs(seed())
    for coll in ("r", "h", "u"):
        R.ok({"insert": coll, "$db": DB, "documents": docs})
        S.ok({"insert": coll, "$db": DB, "documents": docs})
    return cl, R, S, docs


def coll_uuid(R, ns):
    return R.find_all("collections", "config", {"_id": ns})[0]["uuid"]


def chunks_of(R, ns, **where):
    """config.chunks of ns (keyed by the collection's uuid, as MongoDB 5.0+)."""
    return R.find_all("chunks", "config", dict({"uuid": coll_uuid(R, ns)}, **where))


def chunks_per_shard(R, ns):
    out = {}
    for ch in chunks_of(R, ns):
        out[ch["shard"]] = out.get(ch["shard"], 0) + 1
    return out


@test
def test_differential(t):
    """Every pipeline, on the ranged, hashed and unsharded collections, equals the
    standalone shard's answer; the ranged and hashed ones have chunks on every shard."""
    cl, R, S, docs = setup(t)
    cps = chunks_per_shard(R, DB + ".r")
    assert len(cps) == 3 and min(cps.values()) >= 2, cps
    assert len(chunks_per_shard(R, DB + ".h")) == 3
    for coll in ("r", "h", "u"):
        for name, pipe, mode in PIPELINES:
            compare(name, coll, agg_all(R, coll, pipe), agg_all(S, coll, pipe), mode)
    # small batches: the router's cursor continues the merged result through getMore
    for coll in ("r", "h"):
        pipe = [{"$sort": {"x": 1, "_id": -1}}, {"$project": {"x": 1}}]
        got = agg_all(R, coll, pipe, batch=7)
        assert len(got) == N, len(got)
        compare("sorted_batches", coll, got, agg_all(S, coll, pipe), "ordered")
    # a database that does not exist: an empty result
    r = R.ok({"aggregate": "nope", "pipeline": [{"$count": "n"}], "cursor": {}, "$db": "nodb"})
    assert r["cursor"]["firstBatch"] == [], r


@test
def test_targeting_and_explain(t):
    """A $match on the shard key targets like a find: equality → one shard, which runs the
    whole pipeline (splitPipeline null); a range → the owning shards only; no key → all
    three, with the split in MongoDB's shape."""
    cl, R, S, docs = setup(t)
    pipe = [{"$match": {"x": {"$gte": 0}}},
            {"$group": {"_id": "$g", "t": {"$sum": "$x"}, "avg": {"$avg": "$x"}}}, {"$sort": {"t": -1}}]
    e = R.ok({"aggregate": "r", "pipeline": pipe, "explain": True, "$db": DB})
    assert e["mergeType"] == "router", e
    sp = e["splitPipeline"]
    assert sorted(e["shards"]) == ["shard0", "shard1", "shard2"], e
    assert sp["shardsPart"][0] == {"$match": {"x": {"$gte": 0}}}, sp
    assert sp["shardsPart"][1]["$group"]["avg"] == {"$_partialAvg": "$x"}, sp
    assert sp["mergerPart"][0]["$group"]["_id"] == "$_id", sp
    assert sp["mergerPart"][0]["$group"]["avg"] == {"$_mergeAvg": "$avg"}, sp
    assert sp["mergerPart"][1] == {"$sort": {"t": -1}}, sp
    assert sp["mergeSorted"] is False, sp
    for name, sh in e["shards"].items():
        assert sh["stages"][0]["$cursor"]["queryPlanner"]["namespace"] == DB + ".r", sh
        assert sh["stages"][1]["$group"]["avg"] == {"$_partialAvg": "$x"}, sh   # ran the shards part
        assert "splitPipeline" not in sh, sh
    # $sort + $limit: the shards sort and limit, the router merge-sorts
    e = R.ok({"aggregate": "r", "pipeline": [{"$sort": {"x": 1}}, {"$skip": 5}, {"$limit": 3}],
              "explain": True, "$db": DB})
    sp = norm(e["splitPipeline"])
    assert sp["shardsPart"] == [{"$sort": {"x": 1}}, {"$limit": 8}], sp
    assert sp["mergerPart"][0] == {"$sort": {"x": 1}} and sp["mergeSorted"] is True, sp
    # equality on the key: one shard, the whole pipeline
    e = R.ok({"aggregate": "r", "pipeline": [{"$match": {"k": 260}}] + pipe[1:], "explain": True, "$db": DB})
    assert e["splitPipeline"] is None and len(e["shards"]) == 1, e
    (name, sh), = e["shards"].items()
    assert sh["stages"][1]["$group"]["avg"] == {"$avg": "$x"}, sh   # the whole pipeline
    owner = [c["shard"] for c in chunks_of(R, DB + ".r", **{"min.k": 250})]
    assert [name] == owner, (name, owner)
    # a range inside two chunks: their two shards only
    e = R.ok({"aggregate": "r", "pipeline": [{"$match": {"k": {"$gte": 60, "$lt": 140}}}, {"$count": "n"}],
              "explain": True, "$db": DB})
    want = sorted({c["shard"] for c in chunks_of(R, DB + ".r", **{"min.k": {"$in": [50, 100]}})})
    assert sorted(e["shards"]) == want and len(want) == 2, (e["shards"].keys(), want)
    assert agg_all(R, "r", [{"$match": {"k": {"$gte": 60, "$lt": 140}}}, {"$count": "n"}]) == [{"n": 80}]
    # hashed key equality: one shard
    e = R.ok({"aggregate": "h", "pipeline": [{"$match": {"k": 17}}], "explain": True, "$db": DB})
    assert len(e["shards"]) == 1, e
    # unsharded: the primary runs it all
    e = R.ok({"aggregate": "u", "pipeline": pipe, "explain": True, "$db": DB})
    assert list(e["shards"]) == ["shard0"] and e["splitPipeline"] is None, e
    print("  explain: " + dumps(R.ok({"aggregate": "r", "pipeline": pipe, "explain": True, "$db": DB}))[:300])


@test
def test_orphans_not_counted(t):
    """Documents a shard holds outside its chunks (planted orphans, then a chunk's copy
    left behind by a moveChunk that runs while pipelines run) never reach the result."""
    cl, R, S, docs = setup(t)
    count_pipe = [{"$group": {"_id": None, "n": {"$sum": 1}, "t": {"$sum": "$k"}}}]
    want = agg_all(S, "r", count_pipe)
    # plant orphans on shard0 in a range shard1 owns
    owner = [c["shard"] for c in chunks_of(R, DB + ".r", **{"min.k": 50})][0]
    other = [s for s in cl.shards if s.name != owner][0]
    other.client().ok({"insert": "r", "$db": DB,
                       "documents": [{"_id": 10000 + i, "k": 60 + i, "x": 1} for i in range(10)]})
    assert agg_all(R, "r", count_pipe) == want
    compare("group_sum_count", "r", agg_all(R, "r", PIPELINES[11][1]), agg_all(S, "r", PIPELINES[11][1]), "ordered")
    # a migration under way: every aggregate during and after it counts each document once
    results, stop = [], threading.Event()

    def mover():
        M = cl.client()
        try:
            for lo, to in ((150, "shard0"), (300, "shard1"), (150, "shard2")):
                M.ok({"moveChunk": DB + ".r", "find": {"k": lo}, "to": to, "$db": "admin"})
        finally:
            stop.set()
    th = threading.Thread(target=mover)
    th.start()
    try:
        for _ in range(200):
            results.append(agg_all(R, "r", count_pipe))
            if stop.is_set():
                break
    finally:
        th.join(120)
    results.append(agg_all(R, "r", count_pipe))
    bad = [r for r in results if r != want]
    assert not bad, (want, bad[:3])
    print("  %d aggregates during and after 3 migrations, all equal" % len(results))
    for name, pipe, mode in PIPELINES:
        compare(name, "r", agg_all(R, "r", pipe), agg_all(S, "r", pipe), mode)


@test
def test_stale_router(t):
    """A router whose cached routing is stale (another router moved chunks) retries on the
    shards' StaleConfig: its aggregates still count every document once, and its
    serverStatus shows the retries."""
    cl = t.cluster(shards=3, routers=2)
    R, R2 = cl.client(0), cl.client(1)
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": DB + ".s", "key": {"k": 1}, "$db": "admin"})
    for m in (100, 200):
        R.ok({"split": DB + ".s", "middle": {"k": m}, "$db": "admin"})
    docs = make_docs(seed())
    R.ok({"insert": "s", "$db": DB, "documents": docs})
    pipe = [{"$group": {"_id": "$y", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]
    want = agg_all(R, "s", pipe)
    assert sum(d["n"] for d in want) == N, want
    before = R.ok({"serverStatus": 1, "$db": "admin"})["router"]["staleConfigRetries"]
    R2.ok({"moveChunk": DB + ".s", "find": {"k": 150}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    R2.ok({"moveChunk": DB + ".s", "find": {"k": 250}, "to": "shard2", "_waitForDelete": True, "$db": "admin"})
    assert agg_all(R, "s", pipe) == want
    after = R.ok({"serverStatus": 1, "$db": "admin"})["router"]["staleConfigRetries"]
    assert norm(after) > norm(before), (before, after)
    # every shard now holds a part: the split ran over three shards
    e = R.ok({"aggregate": "s", "pipeline": pipe, "explain": True, "$db": DB})
    assert sorted(e["shards"]) == ["shard0", "shard1", "shard2"], e


@test
def test_errors(t):
    """Errors keep MongoDB's codes through the router: parse errors before anything is
    sent, a shard's runtime error relayed; a missing cursor; config-side errors."""
    cl, R, S, docs = setup(t)
    R.err({"aggregate": "r", "pipeline": [{"$lookup": {}}], "cursor": {}, "$db": DB}, 40324)
    R.err({"aggregate": "r", "pipeline": [{"$project": {"a": {"$foo": 1}}}], "cursor": {}, "$db": DB}, 168)
    R.err({"aggregate": "r", "pipeline": [{"$group": {"n": {"$sum": 1}}}], "cursor": {}, "$db": DB}, 15955)
    R.err({"aggregate": "r", "pipeline": [], "$db": DB}, 9)
    R.err({"aggregate": 1, "pipeline": [{"$match": {}}], "cursor": {}, "$db": DB}, 73)
    R.err({"aggregate": "r", "pipeline": [{"$project": {"a": {"$divide": [1, 0]}}}], "cursor": {},
           "$db": DB}, 2)
    R.err({"aggregate": "r", "pipeline": [{"$sort": {"k": 1}}], "cursor": {}, "bogus": 1, "$db": DB})
    R.err({"aggregate": "chunks", "pipeline": [{"$nope": 1}], "cursor": {}, "$db": "config"}, 40324)


@test
def test_config_aggregate(t):
    """Aggregates on the config database (mongosh's sh.status() and countDocuments send
    them) through the router and on the config server equal what find reads there."""
    cl, R, S, docs = setup(t)
    chunks = R.find_all("chunks", "config")
    want = {}
    for ch in chunks:
        want[ch["shard"]] = want.get(ch["shard"], 0) + 1
    C = cl.config.client()
    for c in (R, C):
        r = c.ok({"aggregate": "chunks", "pipeline": [{"$group": {"_id": "$shard", "n": {"$sum": 1}}}],
                  "cursor": {}, "$db": "config"})
        got = {d["_id"]: norm(d["n"]) for d in r["cursor"]["firstBatch"]}
        assert got == want, (got, want)
        # countDocuments' shape
        r = c.ok({"aggregate": "chunks", "pipeline": [{"$match": {"uuid": coll_uuid(R, DB + ".r")}}, {"$skip": 0},
                  {"$group": {"_id": 1, "n": {"$sum": 1}}}], "cursor": {}, "$db": "config"})
        assert norm(r["cursor"]["firstBatch"]) == [{"_id": 1, "n": 8}], r
        for coll in ("databases", "collections", "shards", "changelog", "tags", "settings", "mongos", "version"):
            found = c.find_all(coll, "config")
            r = c.ok({"aggregate": coll, "pipeline": [{"$count": "n"}], "cursor": {}, "$db": "config"})
            assert norm(r["cursor"]["firstBatch"]) == ([{"n": len(found)}] if found else []), (coll, r, len(found))
        # sh.status()'s per-collection chunk counts: $match + $group + $sort through a cursor
        r = c.ok({"aggregate": "chunks", "pipeline": [{"$sort": {"uuid": 1, "min": 1}},
                  {"$project": {"_id": 0, "uuid": 1, "shard": 1}}], "cursor": {"batchSize": 3}, "$db": "config"})
        got = list(r["cursor"]["firstBatch"])
        assert len(got) == 3 and r["cursor"]["id"] not in (0, "0"), r
        cid = r["cursor"]["id"]
        while cid not in (0, "0") and cid != {"$numberLong": "0"}:
            r = c.ok({"getMore": cid, "collection": "chunks", "$db": "config"})
            got += r["cursor"]["nextBatch"]
            cid = r["cursor"]["id"]
        assert len(got) == len(chunks), (len(got), len(chunks))
    # the shapes mongosh's sh.status() sends: chunks per shard of one collection, recent
    # migrations from the changelog
    u = coll_uuid(R, DB + ".r")
    r = R.ok({"aggregate": "chunks", "$db": "config", "cursor": {}, "pipeline": [
        {"$match": {"uuid": u}}, {"$group": {"_id": "$shard", "cnt": {"$sum": 1}}},
        {"$project": {"_id": 0, "shard": "$_id", "nChunks": "$cnt"}}, {"$sort": {"shard": 1}}]})
    want = chunks_per_shard(R, DB + ".r")
    assert norm(r["cursor"]["firstBatch"]) == [{"shard": k, "nChunks": want[k]} for k in sorted(want)], r
    moves = R.find_all("changelog", "config", {"what": "moveChunk.from"})
    r = R.ok({"aggregate": "changelog", "$db": "config", "cursor": {}, "pipeline": [
        {"$match": {"what": "moveChunk.from", "details.errmsg": {"$exists": False}}},
        {"$group": {"_id": {"msg": "$details.errmsg"}, "count": {"$sum": 1}}},
        {"$project": {"_id": {"$ifNull": ["$_id.msg", "Success"]}, "count": "$count"}}]})
    assert norm(r["cursor"]["firstBatch"]) == ([{"_id": "Success", "count": len(moves)}] if moves else []), (r, len(moves))
    assert moves, "setup moved chunks: the changelog has moveChunk.from entries"
    e = R.ok({"aggregate": "chunks", "pipeline": [{"$match": {"shard": "shard0"}}, {"$count": "n"}],
              "explain": True, "$db": "config"})
    assert e["stages"][0]["$cursor"]["queryPlanner"]["namespace"] == "config.chunks", e


if __name__ == "__main__":
    main()
