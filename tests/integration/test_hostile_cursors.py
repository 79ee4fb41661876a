#!/usr/bin/env python3
"""
test_hostile_cursors.py — cursors cannot exhaust a daemon's memory, and one client's
cursors cannot lock other clients out, on the router, a shard and the
config server. Each case ends by checking the daemon answers ping for another client
within a second and (where memory is the point) its RSS stays under a stated bound.

  test_router_cursor_memory    50 finds (batchSize 1, one getMore each) of 1 MB documents
                               over 3 shards, left open: the router asks each shard for one
                               client batch, so it holds ~2 MB per cursor, not 16 MB per
                               shard (before the fix: ~880 MB). A full drain is exact.
  test_router_cursor_caps      one connection opening more than 1,000 cursors is refused
                               with ExceededMemoryLimit naming the per-connection cap; another
                               client still opens and drains a multi-batch cursor.
  test_shard_cursor_caps       one connection to a shard opens 5,000 cursors (its cap); the
                               next is refused naming the per-connection cap and another
                               client's multi-batch finds still work (before the fix one
                               connection could take all 10,000).
  test_config_cursor_caps      the same on the config server, directly and through a router.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from hostile import RawReq, Int64, assert_responsive, assert_rss_below, rss_mb  # noqa: E402

DB = "hc"
MB = 1024 * 1024


def live(cid):
    return cid not in (0, "0", None)


def raw_ok(c, doc):
    r = c.call(doc)
    if r.get("ok") != 1:
        raise AssertionError("command %s failed: %s" % (str(doc)[:200], str(r)[:400]))
    return r


def sharded_cluster(t):
    """Config server, 3 shards, one router; DB.h sharded on {k: hashed} (chunks on every
    shard)."""
    cl = t.cluster(shards=3, routers=1)
    R = cl.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": DB + ".h", "key": {"k": "hashed"}, "$db": "admin"})
    return cl, R


def drain(c, coll, db, first, batch):
    """Drains a cursor over RawReq from its find reply; returns the documents."""
    docs = list(first["cursor"]["firstBatch"])
    cid = first["cursor"]["id"]
    for _ in range(100000):
        if not live(cid):
            return docs
        r = raw_ok(c, {"getMore": Int64(cid), "collection": coll, "$db": db, "batchSize": batch})
        docs.extend(r["cursor"]["nextBatch"])
        cid = r["cursor"]["id"]
    raise AssertionError("cursor never ended")


@test
def test_router_cursor_memory(t):
    cl, R = sharded_cluster(t)
    router = cl.routers[0]
    c = RawReq(router.url, timeout=60)
    pad = "x" * (MB - 100)
    ndocs = 60
    for start in range(0, ndocs, 6):
        raw_ok(c, {"insert": "h", "$db": DB, "ordered": False,
                   "documents": [{"_id": i, "k": i, "pad": pad} for i in range(start, start + 6)]})
    for s in cl.shards:   # every shard holds some of them (counted on the shard itself)
        n = s.client().ok({"count": "h", "$db": DB})["n"]
        assert 5 <= n <= 40, "shard %s holds %d of %d documents" % (s.name, n, ndocs)
    before = rss_mb(router.pid)
    ids = []
    for _ in range(50):
        r = raw_ok(c, {"find": "h", "$db": DB, "filter": {}, "batchSize": 1})
        assert len(r["cursor"]["firstBatch"]) == 1 and live(r["cursor"]["id"]), str(r)[:200]
        g = raw_ok(c, {"getMore": Int64(r["cursor"]["id"]), "collection": "h", "$db": DB,
                       "batchSize": 1})
        assert len(g["cursor"]["nextBatch"]) == 1, str(g)[:200]
        ids.append(r["cursor"]["id"])
    # 50 cursors x (3 shards x one 1 MB batch, the consumed ones released) ~ 100-150 MB;
    # before the fix each getMore pulled a 16 MB batch from a shard (~880 MB in all).
    # AddressSanitizer keeps up to 256 MiB of freed memory in quarantine: allow for it.
    bound = 250 + (256 if os.path.basename(os.path.dirname(BIN)) == "san" else 0)
    got = assert_rss_below(router, bound, "with 50 open cursors of 1 MB documents")
    st = raw_ok(c, {"serverStatus": 1, "$db": "admin"})
    cur = st["metrics"]["cursor"]
    assert cur["open"]["total"] == 50, cur
    assert cur["bytesBuffered"] <= 50 * 3 * (MB + 4096), cur
    print("  router RSS %.0f MiB before, %.0f MiB with 50 open cursors; %d bytes buffered" % (
        before, got, cur["bytesBuffered"]))
    # Full drains are exact: unsorted (as a set) and sorted (in order), small batches.
    docs = drain(c, "h", DB, raw_ok(c, {"find": "h", "$db": DB, "filter": {}, "batchSize": 2}), 3)
    assert sorted(d["_id"] for d in docs) == list(range(ndocs)), [d["_id"] for d in docs]
    assert all(d["pad"] == pad for d in docs)
    docs = drain(c, "h", DB, raw_ok(c, {"find": "h", "$db": DB, "filter": {}, "sort": {"_id": -1},
                                        "skip": 3, "limit": 50, "batchSize": 4}), 7)
    assert [d["_id"] for d in docs] == list(range(ndocs - 4, ndocs - 54, -1)), [d["_id"] for d in docs]
    # Killing the cursors releases what they hold.
    k = raw_ok(c, {"killCursors": "h", "$db": DB, "cursors": [Int64(i) for i in ids]})
    assert len(k["cursorsKilled"]) == 50, k
    cur = raw_ok(c, {"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]
    assert cur["open"]["total"] == 0 and cur["bytesBuffered"] == 0, cur
    c.close()
    assert_responsive(router)


def open_cursors(c, n, cmd):
    """Opens n cursors on one RawReq connection; returns their ids (each must succeed)."""
    ids = []
    for i in range(n):
        r = c.call(cmd)
        if r.get("ok") != 1 or not live(r["cursor"]["id"]):
            raise AssertionError("cursor %d of %d: %s" % (i + 1, n, str(r)[:300]))
        ids.append(r["cursor"]["id"])
    return ids


def open_until_refused(c, cmd, bound):
    """Opens cursors on one connection until one is refused; returns (opened, refusal)."""
    for i in range(bound):
        r = c.call(cmd)
        if r.get("ok") != 1:
            return i, r
        assert live(r["cursor"]["id"]), str(r)[:300]
    raise AssertionError("%d cursors opened on one connection, none refused" % bound)


def assert_refused(r, words):
    if r.get("ok") != 0 or r.get("code") != 146 or words not in r.get("errmsg", ""):
        raise AssertionError("expected ExceededMemoryLimit (146) naming '%s', got %s" % (
            words, str(r)[:400]))


@test
def test_shard_cursor_caps(t):
    s = t.shardd("s0")
    S = s.client()
    S.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "v": "x" * 100} for i in range(5)]})
    hog = RawReq(s.url, timeout=30)
    find1 = {"find": "c", "$db": DB, "filter": {}, "batchSize": 1}
    # One connection opens cursors until refused (before the fix: all 10,000 of the shard).
    n, refusal = open_until_refused(hog, find1, 10001)
    # Another client still runs multi-batch finds (each needs a cursor of its own) ...
    for _ in range(3):
        docs = S.find_all("c", DB, {}, batchSize=2)
        assert [d["_id"] for d in docs] == list(range(5)), docs
    # ... because the hog was stopped at its own cap, and told which one.
    assert n == 5000, n
    assert_refused(refusal, "for this connection (limit 5000)")
    other = RawReq(s.url, timeout=30)
    r = raw_ok(other, find1)
    assert live(r["cursor"]["id"])
    cur = raw_ok(other, {"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]
    assert cur["open"]["total"] == 5001 and cur["refused"]["perConnection"] == 1, cur
    assert_responsive(s)
    assert_rss_below(s, 300, "with 5,001 open cursors")
    hog.close()
    other.close()


@test
def test_router_cursor_caps(t):
    cl, R = sharded_cluster(t)
    router = cl.routers[0]
    R.ok({"insert": "h", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(30)]})
    R.ok({"insert": "u", "$db": DB, "documents": [{"_id": i} for i in range(5)]})
    find_h = {"find": "h", "$db": DB, "filter": {}, "batchSize": 1}
    find_u = {"find": "u", "$db": DB, "filter": {}, "batchSize": 1}
    hog = RawReq(router.url, timeout=30)
    n, refusal = open_until_refused(hog, find_h, 4001)
    # Another client still opens and drains multi-batch cursors over every shard.
    docs = R.find_all("h", DB, {}, batchSize=2, sort={"_id": 1})
    assert [d["_id"] for d in docs] == list(range(30)), docs
    assert n == 1000, n
    assert_refused(refusal, "for this connection (limit 1000)")
    # The router-wide cap: three more clients (other loopback addresses: one client address
    # holds at most 2,000) take 1,000 each (a single-shard collection: quicker), then a
    # fifth client is refused, naming that cap.
    others = [RawReq(router.url, timeout=30, source="127.0.0.%d" % (2 + i)) for i in range(3)]
    ids = [open_cursors(o, 1000, find_u) for o in others]
    late = RawReq(router.url, timeout=30, source="127.0.0.5")
    assert_refused(late.call(find_u), "on this router for all connections (limit 4000)")
    # A single-batch find needs no cursor and still works; killing cursors frees room.
    r = raw_ok(late, {"find": "u", "$db": DB, "filter": {}})
    assert len(r["cursor"]["firstBatch"]) == 5 and not live(r["cursor"]["id"]), r
    st = raw_ok(late, {"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]
    assert st["open"]["total"] == 4000, st
    assert st["refused"]["perConnection"] == 1 and st["refused"]["total"] == 1, st
    k = raw_ok(others[0], {"killCursors": "u", "$db": DB, "cursors": [Int64(i) for i in ids[0][:10]]})
    assert len(k["cursorsKilled"]) == 10, k
    docs = drain(late, "u", DB, raw_ok(late, find_u), 1)
    assert [d["_id"] for d in docs] == list(range(5)), docs
    # The shards saw at most one cursor per router cursor on the router's connection.
    for sh in cl.shards:
        n = sh.client().ok({"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]["open"]["total"]
        assert n <= 4000, (sh.name, n)
    assert_responsive(router)
    for c in [hog, late] + others:
        c.close()


@test
def test_config_cursor_caps(t):
    cl = t.cluster(shards=3, routers=1)
    cfg, router = cl.config, cl.routers[0]
    R = cl.client()
    C = cfg.client()
    find1 = {"find": "shards", "$db": "config", "filter": {}, "batchSize": 1}
    want = ["shard0", "shard1", "shard2"]
    # Directly: one connection holds at most half of the config server's 1,000 cursors.
    hog = RawReq(cfg.url, timeout=30)
    n, refusal = open_until_refused(hog, find1, 1001)
    docs = C.find_all("shards", "config", {}, batchSize=1)
    assert sorted(d["_id"] for d in docs) == want, docs
    assert n == 500, n
    assert_refused(refusal, "for this connection on the config server (limit 500)")
    # Through a router, whose one connection to the config server carries every client's
    # config reads: the router caps each client (100) and itself (400) first.
    rhog = RawReq(router.url, timeout=30)
    n, refusal = open_until_refused(rhog, find1, 1001)
    docs = R.find_all("shards", "config", {}, batchSize=1)
    assert sorted(d["_id"] for d in docs) == want, docs
    assert n == 100, n
    assert_refused(refusal, "config cursors for this connection (limit 100)")
    others = [RawReq(router.url, timeout=30, source="127.0.0.%d" % (2 + i)) for i in range(3)]
    ids = [open_cursors(o, 100, find1) for o in others]
    late = RawReq(router.url, timeout=30, source="127.0.0.5")
    assert_refused(late.call(find1), "config cursors on this router for all connections (limit 400)")
    k = raw_ok(others[0], {"killCursors": "shards", "$db": "config",
                           "cursors": [Int64(i) for i in ids[0][:5]]})
    assert len(k["cursorsKilled"]) == 5, k
    docs = drain(late, "shards", "config", raw_ok(late, find1), 1)
    assert sorted(d["_id"] for d in docs) == want, docs
    st = raw_ok(late, {"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]["config"]
    assert st["open"] == 395 and st["refusedPerConnection"] == 1 and st["refusedTotal"] == 1, st
    st = C.ok({"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]
    assert st["open"]["total"] == 895 and st["refused"]["perConnection"] == 1, st
    assert_responsive(cfg)
    assert_responsive(router)
    for c in [hog, rhog, late] + others:
        c.close()


if __name__ == "__main__":
    main()
