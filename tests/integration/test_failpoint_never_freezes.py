#!/usr/bin/env python3
"""
test_failpoint_never_freezes.py — a failpoint never freezes a daemon.

Table-driven: for every point of every daemon that a `hang` can hold (the config server's
and the shard's; the router has none: its points only decide, never wait), on a fresh
cluster: the point is turned on ({times: 1}, action hang), the operation that reaches it
runs in the background, and once it is held there 20 other requests are fired at the same
daemon — some that need the lock the held operation's step would take (catalog
transactions: splits of another collection; the shard's writer lock: inserts), some reads.
Then `ping` and `configureFailPoint off` must each answer within 1 s (a protocol liveness
bound, measured), the held operation must then complete (ok: 1), and every other request
must have answered.

Today's code fails it: hangBeforeCommitMigration (and split/merge/removeShard/settings)
held the catalog mutex, the other requests took every worker behind it, and neither the
ping nor the configureFailPoint that would release it was served.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "fz"
NS = DB + ".c"
BOUND_S = 1.0
MINKEY = {"$minKey": 1}
FIGURES = []


class Bg:
    """One command on its own client in a thread."""

    def __init__(self, url, doc, timeout_ms=90000):
        self.c = Client(url, timeout_ms=timeout_ms)
        self.doc = doc
        self.reply = None
        self.done = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()

    def _run(self):
        try:
            self.reply = self.c.cmd(self.doc)
        except Exception as e:  # the client died: report it as the reply
            self.reply = {"ok": 0, "errmsg": "client: %s" % e}
        finally:
            self.done.set()

    def wait(self, timeout=60):
        assert self.done.wait(timeout), "no reply to %s within %ss" % (dumps(self.doc)[:200], timeout)
        return self.reply


def move(to="shard1", **kw):
    d = {"moveChunk": NS, "find": {"k": 0}, "to": to, "$db": "admin"}
    d.update(kw)
    return d


# ---- setups: run on the fresh cluster before the point is turned on -------------------

def setup_spare(t, cl, R, st):
    st["spare"] = t.shardd("shard2")


def setup_spare_added(t, cl, R, st):
    st["spare"] = t.shardd("shard2")
    R.ok({"addShard": st["spare"].url, "name": "shard2", "$db": "admin"})


def setup_split25(t, cl, R, st):
    R.ok({"split": NS, "middle": {"k": 25}, "$db": "admin"})


def setup_unsharded(t, cl, R, st):
    R.ok({"insert": "u", "$db": DB, "documents": [{"_id": i} for i in range(10)]})


def setup_index(t, cl, R, st):
    R.ok({"createIndexes": "c", "$db": DB, "indexes": [{"key": {"x": 1}, "name": "x_1"}]})


def setup_retryable_write(t, cl, R, st):
    """A retryable write's record in the moving chunk, for session migration to carry."""
    cl.shards[0].client().ok({"update": "c", "$db": DB, "txnNumber": 1,
                              "lsid": {"id": {"$binary": {"base64": "AAAAAAAAQACAAAAAAAAAAA==",
                                                          "subType": "04"}}},
                              "updates": [{"q": {"k": 5}, "u": {"$set": {"x": 1}}}]})


def setup_cursor(t, cl, R, st):
    r = cl.shards[0].client().ok({"find": "c", "$db": DB, "batchSize": 1})
    st["cursor"] = r["cursor"]["id"]


# ---- triggers: (daemon that runs it, command) ---------------------------------------------

def via_router(doc):
    return lambda cl, st: (cl.routers[0].url, doc)


def add_shard(cl, st):
    return cl.routers[0].url, {"addShard": st["spare"].url, "name": "shard2", "$db": "admin"}


def get_more(cl, st):
    return cl.shards[0].url, {"getMore": st["cursor"], "collection": "c", "$db": DB, "batchSize": 1}


INSERT = via_router({"insert": "c", "$db": DB, "documents": [{"_id": 1000, "k": 10}]})
MOVE = via_router(move())
SHARD_NEW = via_router({"shardCollection": DB + ".n", "key": {"k": 1}, "$db": "admin"})
CREATE_INDEX = via_router({"createIndexes": "c", "$db": DB,
                           "indexes": [{"key": {"y": 1}, "name": "y_1"}]})
DROP = via_router({"drop": "c", "$db": DB})

# (daemon holding the point, point, setup, trigger)
POINTS = [
    ("config", "addShardBeforeCatalogInsert", setup_spare, add_shard),
    ("config", "shardCollectionBeforeCatalogCommit", None, SHARD_NEW),
    ("config", "shardCollectionAfterCatalogCommit", None, SHARD_NEW),
    ("config", "splitChunkBeforeCommit", None,
     via_router({"split": NS, "middle": {"k": 25}, "$db": "admin"})),
    ("config", "splitChunkAfterCommit", None,
     via_router({"split": NS, "middle": {"k": 25}, "$db": "admin"})),
    ("config", "mergeChunksBeforeCommit", setup_split25,
     via_router({"mergeChunks": NS, "bounds": [{"k": MINKEY}, {"k": 50}], "$db": "admin"})),
    ("config", "mergeChunksAfterCommit", setup_split25,
     via_router({"mergeChunks": NS, "bounds": [{"k": MINKEY}, {"k": 50}], "$db": "admin"})),
    ("config", "dropCollectionBeforeCatalogDelete", None, DROP),
    ("config", "dropDatabaseBeforeCatalogDelete", None,
     via_router({"dropDatabase": 1, "$db": DB})),
    ("config", "removeShardBeforeCommit", setup_spare_added,
     via_router({"removeShard": "shard2", "$db": "admin"})),
    ("config", "settingsUpdateBeforeCommit", None,
     via_router({"update": "settings", "$db": "config", "updates": [
         {"q": {"_id": "chunksize"}, "u": {"$set": {"value": 64}}, "upsert": True}]})),
    ("config", "hangBeforeCommitMigration", None, MOVE),
    ("config", "hangBeforeMovePrimarySwitch", setup_unsharded,
     via_router({"movePrimary": DB, "to": "shard1", "$db": "admin"})),
    ("shard0", "hangBeforeWriteObserver", None, INSERT),
    ("shard0", "hangBeforeWriteCommit", None, INSERT),
    ("shard0", "hangAfterWriteCommit", None, INSERT),
    ("shard0", "waitAfterPinningCursorBeforeGetMoreBatch", setup_cursor, get_more),
    ("shard0", "hangBeforeIndexBuildCommit", None, CREATE_INDEX),
    ("shard0", "hangAfterIndexBuildCommit", None, CREATE_INDEX),
    ("shard0", "hangIndexBuildAfterBatch", None, CREATE_INDEX),
    ("shard0", "hangBeforeDropIndexesCommit", setup_index,
     via_router({"dropIndexes": "c", "$db": DB, "index": "x_1"})),
    ("shard0", "hangBeforeShardCollectionCommit", None, SHARD_NEW),
    ("shard0", "hangAfterShardCollectionCommit", None, SHARD_NEW),
    ("shard0", "hangBeforeDropCommit", None, DROP),
    ("shard0", "suspendRangeDeletion", None, via_router(move(_waitForDelete=True))),
] + [("shard0", "moveChunkHangAtStep%d" % i, None, MOVE) for i in range(1, 7)] + [
    ("shard0", "hangBeforeLeavingCriticalSection", None, MOVE),
    ("shard0", "migrationCommitNetworkError", None, MOVE),
    ("shard0", "failMigrationCommit", None, MOVE),
] + [("shard1", "migrateThreadHangAtStep%d" % i, None, MOVE) for i in range(1, 8)] + [
    ("shard0", "hangInGetNextSessionMods", None, MOVE),
    ("shard1", "sessionMigrationHangAfterBatch", setup_retryable_write, MOVE),
    ("shard1", "sessionMigrationHangBeforeDone", None, MOVE),
]
# Not here: hangBeforeMigrationRecovery is reached only by a donor's recovery of a
# migration whose outcome it could not learn (or at start-up after a crash), where no
# configureFailPoint can come first; it holds the collection's critical section by design
# (docs/protocol.md "Shard daemon: failpoints").


def others(cl, who):
    """20 requests for the daemon holding the point: some need the lock its step takes."""
    out = []
    if who == "config":
        cfg = cl.config.url
        r = cl.routers[0].url
        for i in range(8):   # catalog transactions (another collection)
            out.append((r, {"split": "fzs.s", "middle": {"k": 100 + i}, "$db": "admin"}))
        for i in range(6):   # catalog reads
            out.append((cfg, {"getRoutingTable": NS, "$db": "admin"}))
        for i in range(6):
            out.append((cfg, {"listShards": 1, "$db": "admin"}))
    else:
        s = cl.shards[int(who[-1])].url
        for i in range(14):  # the shard's writer lock (another database): more than
            # its ordinary workers wait here when a hang holds that lock
            out.append((s, {"insert": "w", "$db": "fzo", "documents": [{"_id": i}]}))
        for i in range(4):   # the held operation's collection, through the router
            out.append((cl.routers[0].url, {"insert": "c", "$db": DB,
                                            "documents": [{"_id": 2000 + i, "k": 60 + i}]}))
        out.append((s, {"find": "c", "$db": DB, "filter": {"k": {"$lt": 5}}}))
        out.append((s, {"count": "c", "$db": DB}))
    return out


def timed(c, doc):
    t0 = time.monotonic()
    r = c.cmd(doc)
    return r, time.monotonic() - t0


def run_point(t, who, point, setup, trigger):
    cl = t.cluster(shards=2, shard_extra=["--orphan-cleanup-delay-ms", "0"])
    R = cl.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    R.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(100)]})
    R.ok({"split": NS, "middle": {"k": 50}, "$db": "admin"})
    R.ok({"enableSharding": "fzs", "primaryShard": "shard1", "$db": "admin"})
    R.ok({"shardCollection": "fzs.s", "key": {"k": 1}, "$db": "admin"})
    st = {}
    if setup:
        setup(t, cl, R, st)
    daemon = cl.config if who == "config" else cl.shards[int(who[-1])]
    D = daemon.client()
    # Clients made before the hang, so their start-up is not measured.
    pinger = Client(daemon.url, timeout_ms=5000)
    releaser = Client(daemon.url, timeout_ms=5000)
    n = D.ok({"configureFailPoint": point, "mode": {"times": 1}, "data": {"action": "hang"},
              "$db": "admin"})["count"]
    url, doc = trigger(cl, st)
    held = Bg(url, doc)
    D.ok({"waitForFailPoint": point, "timesEntered": n + 1, "maxTimeMS": 30000, "$db": "admin"})
    crowd = [Bg(u, d) for u, d in others(cl, who)]
    time.sleep(0.3)   # let the crowd reach the daemon and take its workers
    r, ping_s = timed(pinger, {"ping": 1, "$db": "admin"})
    assert r.get("ok") == 1, ("ping", r)
    r2, off_s = timed(releaser, {"configureFailPoint": point, "mode": "off", "$db": "admin"})
    assert r2.get("ok") == 1, ("configureFailPoint off", r2)
    FIGURES.append((who, point, ping_s, off_s))
    print("  %s %s: ping %.3f s, configureFailPoint off %.3f s" % (who, point, ping_s, off_s))
    assert ping_s <= BOUND_S, "ping took %.3f s while %s held" % (ping_s, point)
    assert off_s <= BOUND_S, "configureFailPoint off took %.3f s while %s held" % (off_s, point)
    r = held.wait(60)
    assert r.get("ok") == 1, ("the held operation", dumps(doc), r)
    for b in crowd:
        b.wait(60)


def make(who, point, setup, trigger):
    def fn(t):
        run_point(t, who, point, setup, trigger)
    fn.__name__ = "test_%s_%s" % (who, point)
    return fn


for _who, _point, _setup, _trigger in POINTS:
    test(make(_who, _point, _setup, _trigger))


if __name__ == "__main__":
    try:
        main()
    finally:
        if FIGURES:
            print("  slowest ping %.3f s, slowest configureFailPoint off %.3f s over %d points"
                  % (max(f[2] for f in FIGURES), max(f[3] for f in FIGURES), len(FIGURES)))
