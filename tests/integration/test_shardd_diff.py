#!/usr/bin/env python3
"""
test_shardd_diff.py — differential test of bin/shardd's planner: a seeded random mix of
inserts, updates, deletes, finds (sort / skip / limit / projection), counts and distincts
runs against two shardd processes, one with secondary indexes (index scans, index-order
sorts, multikey dedupe) and one without (collection scans and blocking sorts); every reply
must be the same. Finds without a total sort order are compared as multisets. Prints the
seed (rerun with T_SEED=n).
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

OPS = int(os.environ.get("DIFF_OPS", "2000"))
DB = "d"


def canon(v):
    return json.dumps(v, sort_keys=False)


def rand_value(r):
    k = r.randrange(10)
    if k < 5:
        return r.randrange(-5, 15)
    if k == 5:
        return r.randrange(0, 6) + 0.5
    if k == 6:
        return r.choice(["a", "b", "c", "abc"])
    if k == 7:
        return [r.randrange(0, 8) for _ in range(r.randrange(0, 4))]
    if k == 8:
        return None
    return {"x": r.randrange(0, 4)}


def rand_doc(r, i):
    d = {"_id": i}
    for f in ("a", "b", "c"):
        if r.random() < 0.85:
            d[f] = rand_value(r) if f != "b" else r.randrange(0, 20)
    if r.random() < 0.5:
        d["n"] = {"x": r.randrange(0, 5), "y": r.choice(["p", "q"])}
    return d


def rand_filter(r):
    f = r.choice(["a", "b", "c", "n.x", "_id"])
    k = r.randrange(9)
    v = r.randrange(-2, 12)
    if k == 0:
        return {f: v}
    if k == 1:
        return {f: {"$gt": v}}
    if k == 2:
        return {f: {"$gte": v, "$lt": v + r.randrange(1, 6)}}
    if k == 3:
        return {f: {"$in": [r.randrange(0, 10) for _ in range(r.randrange(1, 4))]}}
    if k == 4:
        return {"$or": [{f: v}, {"b": {"$lte": r.randrange(0, 10)}}]}
    if k == 5:
        return {f: None}
    if k == 6:
        return {"a": v, "b": {"$gte": r.randrange(0, 10)}}
    if k == 7:
        return {f: {"$exists": r.random() < 0.5}}
    return {}


def rand_find(r):
    cmd = {"find": "c", "$db": DB, "filter": rand_filter(r)}
    total = False
    k = r.randrange(4)
    if k == 0:
        cmd["sort"] = {"b": r.choice([1, -1]), "_id": r.choice([1, -1])}
        total = True
    elif k == 1:
        cmd["sort"] = {"_id": r.choice([1, -1])}
        total = True
    elif k == 2:
        cmd["sort"] = {"a": 1, "_id": 1}
        total = True
    if total and r.random() < 0.6:
        cmd["skip"] = r.randrange(0, 10)
        cmd["limit"] = r.randrange(0, 15)
    if r.random() < 0.3:
        cmd["projection"] = r.choice([{"a": 1}, {"b": 0}, {"n.x": 1, "_id": 0}])
    cmd["batchSize"] = r.randrange(1, 40)
    return cmd, total


def rand_update(r):
    f = rand_filter(r)
    k = r.randrange(4)
    if k == 0:
        u = {"$set": {"b": r.randrange(0, 20)}}
    elif k == 1:
        u = {"$inc": {"b": 1}, "$set": {"a": rand_value(r)}}
    elif k == 2:
        u = {"$unset": {"c": ""}}
    else:
        u = {"b": r.randrange(0, 20), "a": rand_value(r)}
    op = {"q": f, "u": u, "multi": k != 3 and r.random() < 0.6, "upsert": r.random() < 0.1}
    return {"update": "c", "$db": DB, "updates": [op]}


def norm(d):
    if isinstance(d.get("_id"), dict) and "$oid" in d["_id"]:
        d = dict(d)
        d["_id"] = "<oid>"
    return d


def strip_ids(reply):
    """Upserted _ids are ObjectIds generated independently on each side; each side has
    its own cluster time."""
    reply = bare(reply)
    if "upserted" in reply:
        reply = dict(reply)
        reply["upserted"] = [{"index": u["index"]} for u in reply["upserted"]]
    return reply


@test
def test_diff_indexed_vs_plain(t):
    s = seed("diff")
    r = random.Random(s)
    a = t.shardd("indexed")
    b = t.shardd("plain")
    ca, cb = a.client(), b.client()
    ca.ok({"createIndexes": "c", "$db": DB, "indexes": [
        {"key": {"a": 1}}, {"key": {"b": -1, "_id": 1}}, {"key": {"a": 1, "_id": 1}},
        {"key": {"n.x": 1}}, {"key": {"c": 1, "b": 1}}]})
    cb.ok({"create": "c", "$db": DB})
    next_id = 0
    compared = 0
    for step in range(OPS):
        k = r.randrange(10)
        if k < 3:
            docs = []
            for _ in range(r.randrange(1, 6)):
                docs.append(rand_doc(r, next_id if r.random() < 0.9 else r.randrange(0, next_id + 1)))
                next_id += 1
            cmd = {"insert": "c", "$db": DB, "documents": docs, "ordered": r.random() < 0.5}
        elif k < 5:
            cmd = rand_update(r)
        elif k == 5:
            cmd = {"delete": "c", "$db": DB, "deletes": [{"q": rand_filter(r), "limit": r.choice([0, 1])}]}
        elif k == 6:
            cmd = {"count": "c", "$db": DB, "query": rand_filter(r)}
        elif k == 7:
            cmd = {"distinct": "c", "$db": DB, "key": r.choice(["a", "b", "n.x"]), "query": rand_filter(r)}
        else:
            cmd, total = rand_find(r)
            da = ca.find_all("c", DB, cmd["filter"], **{x: y for x, y in cmd.items() if x not in ("find", "$db", "filter")})
            db_ = cb.find_all("c", DB, cmd["filter"], **{x: y for x, y in cmd.items() if x not in ("find", "$db", "filter")})
            # upserts generate ObjectId _ids independently on each side
            da = [norm(d) for d in da]
            db_ = [norm(d) for d in db_]
            if not total:
                da = sorted(canon(d) for d in da)
                db_ = sorted(canon(d) for d in db_)
            if da != db_:
                only_a = [x for x in da if x not in db_][:10]
                only_b = [x for x in db_ if x not in da][:10]
                raise AssertionError("step %d seed %d: %s\n %d vs %d docs; only indexed: %s\n only plain: %s" % (
                    step, s, dumps(cmd), len(da), len(db_), str(only_a)[:600], str(only_b)[:600]))
            compared += 1
            continue
        # Single-document updates and deletes without a sort may pick different documents
        # on the two sides (scan order differs): make them deterministic by _id order.
        if cmd.get("update") and not cmd["updates"][0]["multi"]:
            cmd["updates"][0]["q"] = {"_id": r.randrange(0, next_id + 1)}
        if cmd.get("delete") and cmd["deletes"][0]["limit"] == 1:
            cmd["deletes"][0]["q"] = {"_id": r.randrange(0, next_id + 1)}
        ra, rb = strip_ids(ca.cmd(cmd)), strip_ids(cb.cmd(cmd))
        assert ra == rb, "step %d seed %d: %s\n indexed: %s\n plain:   %s" % (
            step, s, dumps(cmd), dumps(ra)[:800], dumps(rb)[:800])
        compared += 1
    # the end states agree
    da = ca.find_all("c", DB, {}, sort={"_id": 1})
    db_ = cb.find_all("c", DB, {}, sort={"_id": 1})
    ua = [d for d in da if not isinstance(d["_id"], dict)]
    ub = [d for d in db_ if not isinstance(d["_id"], dict)]
    assert ua == ub, "final contents differ (seed %d)" % s
    print("  compared %d replies, %d documents at the end" % (compared, len(da)), flush=True)


if __name__ == "__main__":
    main()
