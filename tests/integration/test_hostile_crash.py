#!/usr/bin/env python3
"""
test_hostile_crash.py — requests that used to kill a daemon, with
real processes on 127.0.0.1.

  config server, open-cursor cap: `find` on config.shards with batchSize 1, left open,
      through a router (its own caps on relayed config cursors answer first) and
      directly, over several connections, until the config server's 1,000 are all held.
      Every find over a cap must answer ExceededMemoryLimit (146) — the 1,001st used to
      abort the config server (libbson precondition: the error path reset a reply whose
      cursor sub-document was open).
  router, distinct over 3 shards: values that do not fit a bson_t's inline buffer (300
      documents with ~300-byte strings; 12 with 200-byte strings), sub-documents,
      arrays (distinct unwinds one level) and mixed types (int, long, double and
      decimal that compare equal, strings, null, booleans, objects, nested arrays).
      The merge used to move bson_t structs with realloc/qsort: a double free, or an
      unsorted answer with duplicates. The router's answer must equal a standalone
      shardd's on the same documents (same order; numbers compared by value, since
      which of 1, 1L and 1.0 stands for the group is not fixed).
Each case ends with the daemons answering ping within a second for another client and
their resident memory under a stated bound.
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from hostile import RawReq, assert_responsive, assert_rss_below  # noqa: E402

EXCEEDED_MEMORY_LIMIT = 146
# RSS bounds (MiB): generous for a sanitizer build, far below a runaway.
CFG_RSS_MB = 400
ROUTER_RSS_MB = 400


def open_cursors(url, n):
    """Sends n finds on config.shards with batchSize 1 over one connection, leaving each
    cursor open. Returns (opened, [error replies])."""
    c = RawReq(url, timeout=30.0)
    opened, errors = 0, []
    try:
        for _ in range(n):
            r = c.call({"find": "shards", "$db": "config", "filter": {}, "batchSize": 1})
            if r.get("ok") == 1:
                assert r["cursor"]["id"] != 0, "config.shards has more than one document"
                opened += 1
            else:
                errors.append(r)
    finally:
        c.close()
    return opened, errors


@test
def test_config_cursor_cap_no_abort(t):
    """Through a router: its caps on relayed config cursors (100 per client connection,
    400 per router) answer 146 long before the config server's; nothing dies."""
    cl = t.cluster(shards=3)
    router, cfg = cl.routers[0], cl.config
    total = 0
    for i in range(5):
        opened, errors = open_cursors(router.url, 150)
        assert errors, "no find was refused after %d open cursors on one connection" % opened
        for e in errors:
            assert e.get("code") == EXCEEDED_MEMORY_LIMIT, "over the cap: %r" % e
        total += opened
    assert total <= 400, "router relayed %d config cursors (cap 400)" % total
    assert cfg.alive(), "config server died over the cursor cap"
    assert_responsive(cfg, what="after finds through the router")
    assert_responsive(router, what="after finds through it")
    print("  router: %d cursors opened over 5 connections, the rest refused with 146" % total)


@test
def test_config_cursor_cap_direct(t):
    """Directly: 500 cursors per connection, 1,000 in all; the 1,001st find (which used to
    abort the config server on a half-built reply) answers 146 on every connection."""
    cfg = t.configsvr()
    shards = [t.shardd("s%d" % i) for i in range(2)]
    c = cfg.client()
    for s in shards:
        c.ok({"addShard": s.url})
    total = 0
    for i in range(3):
        opened, errors = open_cursors(cfg.url, 600 if i < 2 else 50)
        assert errors, "no find was refused after %d open cursors" % opened
        for e in errors:
            assert e.get("code") == EXCEEDED_MEMORY_LIMIT, "over the cap: %r" % e
        total += opened
    assert total == 1000, "config server holds %d cursors (cap 1000)" % total
    assert cfg.alive(), "config server died over the cursor cap"
    assert_responsive(cfg, what="after %d open cursors" % total)
    assert_rss_below(cfg, CFG_RSS_MB)


# ---- distinct ---------------------------------------------------------------------------

def num(x):
    """Numbers of every BSON type as a float (they compare by value)."""
    if isinstance(x, bool) or x is None:
        return x
    if isinstance(x, (int, float)):
        return ("num", float(x))
    if isinstance(x, dict):
        if len(x) == 1:
            (k, v), = x.items()
            if k in ("$numberLong", "$numberInt", "$numberDouble", "$numberDecimal"):
                return ("num", float(v))
        return {k: num(v) for k, v in x.items()}
    if isinstance(x, list):
        return [num(v) for v in x]
    return x


def long_str(rng, n):
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))


def distinct_sides(t):
    """A 3-shard cluster with crash.d sharded on {k: hashed} (chunks on every shard) and
    a standalone shardd; returns (router client, standalone client, cluster)."""
    cl = t.cluster(shards=3)
    single = t.shardd("single")
    R, S = cl.client(), single.client()
    R.ok({"enableSharding": "crash", "$db": "admin"})
    R.ok({"shardCollection": "crash.d", "key": {"k": "hashed"}, "$db": "admin"})
    return R, S, cl, single


def insert_both(R, S, docs):
    for i in range(0, len(docs), 50):
        part = docs[i:i + 50]
        R.ok({"insert": "d", "$db": "crash", "documents": part})
        S.ok({"insert": "d", "$db": "crash", "documents": part})


def spread(cl, coll="d", db="crash"):
    """How many documents each shard holds (direct count on each shardd)."""
    out = []
    for s in cl.shards:
        r = s.client().ok({"count": coll, "$db": db})
        out.append(r["n"])
    return out


def check_distinct(R, S, key, query=None, what=""):
    cmd = {"distinct": "d", "key": key, "$db": "crash"}
    if query is not None:
        cmd["query"] = query
    want = S.ok(cmd)["values"]
    got = R.ok(cmd)["values"]
    if num(got) != num(want):
        raise AssertionError("distinct %s%s: router %d values, standalone %d values\n"
                             "  router:     %s\n  standalone: %s" % (
                                 key, what and " (" + what + ")", len(got), len(want),
                                 dumps(got)[:600], dumps(want)[:600]))
    return got


@test
def test_distinct_long_strings(t):
    rng = random.Random(seed())
    R, S, cl, single = distinct_sides(t)
    docs = []
    # 300 documents, ~300-byte strings: each value twice (so shards send duplicates).
    vals = [long_str(rng, 290 + rng.randrange(20)) for _ in range(150)]
    for i in range(300):
        docs.append({"_id": i, "k": i, "s": vals[i % 150]})
    # 12 documents with 200-byte strings under another key (6 values, each twice).
    small = [long_str(rng, 200) for _ in range(6)]
    for i in range(12):
        docs.append({"_id": 1000 + i, "k": 1000 + i, "m": small[i % 6]})
    insert_both(R, S, docs)
    per = spread(cl)
    assert all(n > 0 for n in per), "documents did not reach every shard: %r" % per
    got = check_distinct(R, S, "m")
    assert len(got) == 6, len(got)
    got = check_distinct(R, S, "s")
    assert len(got) == 150, len(got)
    check_distinct(R, S, "s", {"k": {"$lt": 100}}, "with a query")
    for p in cl.routers + [cl.config] + cl.shards:
        assert_responsive(p, what="after distinct over long strings")
    assert_rss_below(cl.routers[0], ROUTER_RSS_MB)
    print("  documents per shard: %r" % per)


@test
def test_distinct_mixed_types(t):
    rng = random.Random(seed())
    R, S, cl, single = distinct_sides(t)
    values = [
        1, {"$numberLong": "1"}, 1.0, {"$numberDecimal": "1"}, 2, 2.5, -7, {"$numberLong": "5000000000"},
        0, -0.0, "a", "b", "", "a" * 150, None, True, False,
        {"x": 1}, {"x": 1.0}, {"x": {"y": [1, 2]}}, {"x": "s" * 200}, {},
        [1, 2, 3], [[1, 2], [3]], ["a", {"z": 1}], [], [[]], [None, 2.5],
        {"$oid": "5f0000000000000000000001"}, {"$date": {"$numberLong": "1600000000000"}},
        {"$minKey": 1}, {"$maxKey": 1},
    ]
    docs = []
    for i in range(240):
        v = values[i % len(values)]
        docs.append({"_id": i, "k": i, "v": v, "o": {"w": v, "n": i % 5},
                     "a": [v, i % 3], "big": {"t": long_str(rng, 120), "n": i % 4}})
    insert_both(R, S, docs)
    per = spread(cl)
    assert all(n > 0 for n in per), "documents did not reach every shard: %r" % per
    for key in ("v", "o", "o.w", "o.n", "a", "big", "big.n"):
        check_distinct(R, S, key)
    check_distinct(R, S, "v", {"k": {"$gte": 50}}, "with a query")
    for p in cl.routers + [cl.config] + cl.shards:
        assert_responsive(p, what="after distinct over mixed types")
    assert_rss_below(cl.routers[0], ROUTER_RSS_MB)


if __name__ == "__main__":
    main()
