#!/usr/bin/env python3
"""
test_hostile_maxtime.py — the time half of the hostile-client limits: maxTimeMS bounds find, count,
distinct, update, delete and findAndModify on a shard, through a router over 3 shards, and
on the config server, answering MaxTimeMSExpired (50) (docs/protocol.md "maxTimeMS").

Two kinds of case, as MongoDB's own jstests do:
  - real expiry: maxTimeMS: 1 on a full scan of 200,000 documents (an unindexed filter).
    No machine scans that in a millisecond, so this is not a timing assertion; the same
    commands without maxTimeMS succeed, which shows the limit is what stopped them;
  - the maxTimeAlwaysTimeOut failpoint (any operation with a maxTimeMS fails at its first
    interrupt check), on each daemon kind in turn, for deterministic coverage of every
    command and of getMore running on its find's leftover time.
Invalid maxTimeMS values answer BadValue on all three daemons (MongoDB's parseMaxTimeMS),
and getMore refuses its own maxTimeMS on an ordinary cursor (MongoDB: it is the await
time of tailable awaitData cursors only).

Every case ends with the daemon answering ping for another client within a second; RSS
of each daemon stays under RSS_MB_MAX (200,000 small documents are ~10 MB of BSON).
Setup (200,000 inserts in batches of 10,000) takes about a second.
On the code before this change maxTimeMS was ignored: every "expect 50" below got ok: 1.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *          # noqa: E402,F401
from hostile import assert_responsive, assert_rss_below   # noqa: E402

DB = "mt"
NDOCS = 200000
BATCH = 10000
# Measured (release build): shard 58 MiB after the 200,000-document cases, others < 30.
# ASan's shadow memory and quarantine multiply that (441 MiB measured): 8x under SAN.
RSS_MB_MAX = 150 * (8 if os.sep + "san" + os.sep in BIN + os.sep else 1)
EXPIRED = 50
BAD_VALUE = 2
# Values MongoDB's parseMaxTimeMS refuses: negative, non-integral, not a number, > INT32_MAX.
INVALID = [-1, 1.5, "x", 2**31, -0.5, {"a": 1}]


def fill(c, coll, n=NDOCS):
    """n small documents {_id: i, v: i % 1000} in batches of BATCH."""
    for lo in range(0, n, BATCH):
        docs = [{"_id": i, "v": i % 1000} for i in range(lo, min(n, lo + BATCH))]
        r = c.ok({"insert": coll, "$db": DB, "documents": docs, "ordered": False})
        assert r["n"] == len(docs), r


def fp(c, name, on):
    c.ok({"configureFailPoint": name, "mode": "alwaysOn" if on else "off", "$db": "admin"})


def n_of(v):
    return int(v["$numberLong"]) if isinstance(v, dict) else v


# Every command the item names, over a filter no index serves and nothing matches: a
# full scan (the write commands too, since their statements must find their documents).
# Through a router findAndModify must name the shard key, so it is a point lookup there
# (fam_query) and takes part in the failpoint cases only.
def scan_commands(coll, fam_query=None, **extra):
    none = {"v": -1}
    cmds = [
        {"find": coll, "filter": none},
        {"count": coll, "query": none},
        {"distinct": coll, "key": "v", "query": {"v": {"$gte": 0}}},
        {"update": coll, "updates": [{"q": {"v": {"$gte": 0}}, "u": {"$inc": {"w": 1}},
                                      "multi": True}]},
        {"delete": coll, "deletes": [{"q": {"v": {"$gte": 500}}, "limit": 0}]},
    ]
    if fam_query is not False:
        cmds.append({"findAndModify": coll, "query": fam_query or none,
                     "update": {"$set": {"w": 1}}})
    for cmd in cmds:
        cmd["$db"] = DB
        cmd.update(extra)
    return cmds


def check_real_expiry(c, coll, fam_query=None):
    """maxTimeMS: 1 stops each full scan with 50; the multi-update and multi-delete stop
    part-way (MongoDB keeps what an interrupted multi-write had already written)."""
    for cmd in scan_commands(coll, fam_query, maxTimeMS=1):
        c.err(cmd, EXPIRED)
    # The interrupted writes did not run to the end.
    updated = n_of(c.ok({"count": coll, "query": {"w": 1}, "$db": DB})["n"])
    assert updated < NDOCS, "multi-update ran to the end despite maxTimeMS: %d" % updated
    left = n_of(c.ok({"count": coll, "query": {"v": {"$gte": 500}}, "$db": DB})["n"])
    assert left > 0, "multi-delete ran to the end despite maxTimeMS"
    # Without the limit the same scans run to completion (so the limit is what stopped
    # them); maxTimeMS: 0 means no limit.
    r = c.ok({"count": coll, "query": {"v": {"$gte": 0}}, "$db": DB, "maxTimeMS": 0})
    assert n_of(r["n"]) == NDOCS - (NDOCS // 2 - left), r
    c.ok({"find": coll, "filter": {"v": -1}, "$db": DB})


def check_failpoint(c, fp_client, coll, fam_query=None):
    """With maxTimeAlwaysTimeOut on (on the daemon fp_client talks to), every command
    carrying a maxTimeMS answers 50 and the same commands without one still work."""
    fp(fp_client, "maxTimeAlwaysTimeOut", True)
    try:
        for cmd in scan_commands(coll, fam_query, maxTimeMS=60000):
            c.err(cmd, EXPIRED)
        c.err({"ping": 1, "$db": "admin", "maxTimeMS": 60000}, EXPIRED)
        for cmd in scan_commands(coll, fam_query):
            c.ok(cmd)
    finally:
        fp(fp_client, "maxTimeAlwaysTimeOut", False)
    c.ok({"find": coll, "filter": {"_id": 1}, "$db": DB, "maxTimeMS": 60000})


def check_get_more(c, fp_client, coll, refuse_msg):
    """getMore: its own maxTimeMS is refused (ordinary cursors); it runs on what the
    find's maxTimeMS left, so with maxTimeAlwaysTimeOut on it expires and the cursor is
    gone; a cursor opened without maxTimeMS is untouched by the failpoint."""
    r = c.ok({"find": coll, "filter": {}, "batchSize": 2, "$db": DB, "maxTimeMS": 600000})
    timed = r["cursor"]["id"]
    r = c.ok({"find": coll, "filter": {}, "batchSize": 2, "$db": DB})
    untimed = r["cursor"]["id"]
    r = c.err({"getMore": timed, "collection": coll, "$db": DB, "maxTimeMS": 1000}, BAD_VALUE)
    assert refuse_msg in r.get("errmsg", ""), r
    c.ok({"getMore": timed, "collection": coll, "batchSize": 2, "$db": DB})  # still open
    fp(fp_client, "maxTimeAlwaysTimeOut", True)
    try:
        c.err({"getMore": timed, "collection": coll, "batchSize": 2, "$db": DB}, EXPIRED)
        c.ok({"getMore": untimed, "collection": coll, "batchSize": 2, "$db": DB})
    finally:
        fp(fp_client, "maxTimeAlwaysTimeOut", False)
    c.err({"getMore": timed, "collection": coll, "batchSize": 2, "$db": DB}, 43)
    c.ok({"killCursors": coll, "cursors": [untimed], "$db": DB})


def check_invalid(c, cmd):
    for v in INVALID:
        bad = dict(cmd)
        bad["maxTimeMS"] = v
        r = c.err(bad, BAD_VALUE)
        assert "maxTimeMS" in r.get("errmsg", ""), r
    for v in [0, 1000, 2**31 - 1, 5.0]:
        ok = dict(cmd)
        ok["maxTimeMS"] = v
        c.ok(ok)


@test
def test_shard_max_time(t):
    s = t.shardd("s0")
    c = s.client()
    fill(c, "big")
    check_invalid(c, {"find": "big", "filter": {"_id": 1}, "$db": DB})
    check_invalid(c, {"ping": 1, "$db": "admin"})
    check_real_expiry(c, "big")
    assert_responsive(s, what="after maxTimeMS expiries")
    fill(c, "small", 20)
    check_failpoint(c, c, "small")
    check_get_more(c, c, "small", "non-awaitData")
    # maxTimeNeverTimeOut: the deadline never fires.
    fp(c, "maxTimeNeverTimeOut", True)
    try:
        r = c.ok({"count": "big", "query": {"v": {"$gte": 0}}, "$db": DB, "maxTimeMS": 1})
        assert n_of(r["n"]) > 0, r
    finally:
        fp(c, "maxTimeNeverTimeOut", False)
    assert_responsive(s, what="after the failpoint cases")
    assert_rss_below(s, RSS_MB_MAX, "shard after 200,000 documents and maxTimeMS scans")


@test
def test_router_max_time(t):
    cl = t.cluster(shards=3)
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": DB + ".big", "key": {"_id": "hashed"}, "$db": "admin"})
    c.ok({"shardCollection": DB + ".small", "key": {"_id": "hashed"}, "$db": "admin"})
    fill(c, "big")
    fill(c, "small", 20)
    shard_clients = [s.client() for s in cl.shards]
    cfg = cl.config.client()

    check_invalid(c, {"find": "big", "filter": {"_id": 1}, "$db": DB})
    check_invalid(c, {"find": "shards", "filter": {}, "$db": "config"})
    check_invalid(cfg, {"find": "shards", "filter": {}, "$db": "config"})
    check_invalid(cfg, {"ping": 1, "$db": "admin"})

    check_real_expiry(c, "big", fam_query=False)
    assert_responsive(cl.routers[0], what="router after maxTimeMS expiries")

    # The failpoint on the router: its own check stops every command.
    fam = {"_id": 7, "v": -1}
    check_failpoint(c, c, "small", fam)
    # The failpoint on the shards only: their MaxTimeMSExpired reaches the client as 50.
    for sc in shard_clients:
        fp(sc, "maxTimeAlwaysTimeOut", True)
    try:
        for cmd in scan_commands("small", fam, maxTimeMS=60000):
            r = c.err(cmd, EXPIRED)
            assert r.get("codeName") == "MaxTimeMSExpired", r
    finally:
        for sc in shard_clients:
            fp(sc, "maxTimeAlwaysTimeOut", False)
    check_get_more(c, c, "small", "tailable, awaitData")

    # The router forwards the time LEFT, not the client's value: the router spends
    # ~400 ms of 600 before forwarding (failCommand blocks it), each shard then spends
    # 300 ms before its first check. With the time left (< 200 ms) the shards expire;
    # had the router forwarded 600 they would have answered. The shards say so in
    # their logs.
    block = lambda ms: {"configureFailPoint": "failCommand", "mode": "alwaysOn", "$db": "admin",
                        "data": {"failCommands": ["count"], "blockConnection": True,
                                 "blockTimeMS": ms, "failInternalCommands": True}}
    marks = [len(s.log_text()) for s in cl.shards]
    c.ok(block(400))
    for sc in shard_clients:
        sc.ok(block(300))
    try:
        c.err({"count": "small", "query": {}, "$db": DB, "maxTimeMS": 600}, EXPIRED)
    finally:
        c.ok({"configureFailPoint": "failCommand", "mode": "off", "$db": "admin"})
        for sc in shard_clients:
            sc.ok({"configureFailPoint": "failCommand", "mode": "off", "$db": "admin"})
    wait_until(lambda: all("cmd=count code=50" in s.log_text()[m:]
                           for s, m in zip(cl.shards, marks)),
               timeout=10, what="every shard to expire the forwarded count")

    # The config server: find / count on config collections, through the router and
    # directly, with the failpoint on the config server.
    fp(cfg, "maxTimeAlwaysTimeOut", True)
    try:
        for cl_ in (c, cfg):
            cl_.err({"find": "chunks", "filter": {}, "$db": "config", "maxTimeMS": 60000}, EXPIRED)
            cl_.err({"count": "chunks", "query": {}, "$db": "config", "maxTimeMS": 60000}, EXPIRED)
            cl_.ok({"find": "chunks", "filter": {}, "$db": "config"})
    finally:
        fp(cfg, "maxTimeAlwaysTimeOut", False)
    r = cfg.ok({"find": "chunks", "filter": {}, "batchSize": 1, "$db": "config",
                "maxTimeMS": 60000})
    cfg.err({"getMore": r["cursor"]["id"], "collection": "chunks", "$db": "config",
             "maxTimeMS": 1000}, BAD_VALUE)

    for p in [cl.config] + cl.shards + cl.routers:
        assert_responsive(p, what="after the maxTimeMS cases")
        assert_rss_below(p, RSS_MB_MAX, "%s after the maxTimeMS cases" % p.name)


if __name__ == "__main__":
    main()
