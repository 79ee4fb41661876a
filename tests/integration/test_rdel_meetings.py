#!/usr/bin/env python3
"""
test_rdel_meetings.py — what the range deleter (shardd/rdel.c, docs/range-deleter.md) may
meet:

- a task whose range 3,000 open cursors still own is set aside, not waited for: a task of
  another collection, and one of another range of the same collection, run to their end
  meanwhile (moves with _waitForDelete complete); the held task runs once the cursors go;
- the overlap check of a migration compares the collection UUID: a pending task left by a
  dropped incarnation of a namespace (pending tasks never run) does not block a moveChunk
  into the re-created namespace;
- before each batch the deleter checks that the shard does not own the range: a task for an
  owned range (planted with the test-only _testInsertRangeDeletion) is refused with an error
  line, stays persisted, is listed in serverStatus.rangeDeleter.refused, and deletes nothing.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from hostile import RawReq  # noqa: E402

DB = "meet"
FLAGS = ["--orphan-cleanup-delay-ms", "0", "--range-deleter-batch-delay-ms", "1"]


def status(S):
    return S.ok({"serverStatus": 1, "$db": "admin"})["rangeDeleter"]


def tasks(S, flt=None):
    return S.ok({"find": "rangeDeletions", "$db": "config",
                 "filter": flt or {}})["cursor"]["firstBatch"]


def ks(S, coll):
    """k of every document on the shard (unversioned: orphans included)."""
    return sorted(d["k"] for d in S.find_all(coll, DB, {}))


def setup(t):
    cl = t.cluster(shards=2, shard_extra=FLAGS)
    R = cl.client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    return cl, R


def shard_coll(R, coll, n, split_at=()):
    R.ok({"shardCollection": "%s.%s" % (DB, coll), "key": {"k": 1}, "$db": "admin"})
    if n:
        R.ok({"insert": coll, "$db": DB, "documents": [{"_id": i, "k": i} for i in range(n)]})
    for k in split_at:
        R.ok({"split": "%s.%s" % (DB, coll), "middle": {"k": k}, "$db": "admin"})


def move(R, coll, k, to, wait=False):
    return R.ok({"moveChunk": "%s.%s" % (DB, coll), "find": {"k": k}, "to": to,
                 "_waitForDelete": wait, "$db": "admin"})


@test
def test_cursors_holding_one_task_do_not_delay_others(t):
    cl, R = setup(t)
    S0 = cl.shards[0].client()
    shard_coll(R, "a", 400, split_at=(100, 200))
    shard_coll(R, "b", 100)
    # [200, MaxKey) of a lives on shard1 while the cursors open: their snapshots own only
    # [MinKey, 200) of a on shard0.
    move(R, "a", 300, "shard1", wait=True)
    # 3,000 cursors through the router, each open on shard0 with a snapshot that owns
    # [MinKey, 100). The router caps a connection at 1,000 and a client address at 2,000
    # (docs/hostile-clients.md): three connections from 127.0.0.2, .3 and .4.
    clients = [RawReq(cl.routers[0].url, timeout=30, source="127.0.0.%d" % (2 + i))
               for i in range(3)]
    cids = []
    for c in clients:
        for _ in range(1000):
            r = c.call({"find": "a", "$db": DB, "filter": {"k": {"$lt": 100}}, "batchSize": 1})
            assert r.get("ok") == 1 and num(r["cursor"]["id"]) != 0, r
            cids.append(r["cursor"]["id"])
    assert len(cids) == 3000
    # The donor's task of [MinKey, 100) must wait for every one of them.
    move(R, "a", 50, "shard1")
    wait_until(lambda: status(S0)["state"] == "waitingForReaders", 20,
               "the task of [MinKey, 100) waits for the 3,000 cursors")
    held = tasks(S0, {"nss": DB + ".a"})
    assert len(held) == 1, held
    # Another collection: a move with _waitForDelete returns only once shard0's task of
    # b is gone.
    t0 = time.monotonic()
    move(R, "b", 0, "shard1", wait=True)
    assert ks(S0, "b") == [], ks(S0, "b")
    # Another range of the same collection, which no cursor's snapshot owns: [200, 300)
    # comes to shard0 and goes back, its task deleted behind the held one.
    R.ok({"split": DB + ".a", "middle": {"k": 300}, "$db": "admin"})
    move(R, "a", 250, "shard0", wait=True)
    move(R, "a", 250, "shard1", wait=True)
    print("  other tasks done in %.1f s while 3,000 cursors held one" % (time.monotonic() - t0))
    assert [k for k in ks(S0, "a") if k >= 200] == []
    # The held task is still there, its documents too.
    assert [x["_id"] for x in tasks(S0, {"nss": DB + ".a"})] == [held[0]["_id"]]
    assert [k for k in ks(S0, "a") if k < 100] == list(range(100))
    st = status(S0)
    assert st["tasksWaitingForReaders"] == 1, st
    assert "range deletion waits for readers" in cl.shards[0].log_text()
    for i, c in enumerate(clients):
        r = c.call({"killCursors": "a", "$db": DB, "cursors": cids[1000 * i:1000 * (i + 1)]})
        assert r.get("ok") == 1 and len(r["cursorsKilled"]) == 1000, r
        c.close()
    S0.ok({"cleanupOrphaned": DB + ".a", "$db": "admin", "maxTimeMS": 30000})
    assert ks(S0, "a") == list(range(100, 200))
    assert R.ok({"count": "a", "$db": DB})["n"] == 400


@test
def test_dropped_incarnations_pending_task_does_not_block_a_move(t):
    cl, R = setup(t)
    S1 = cl.shards[1].client()
    shard_coll(R, "c", 100, split_at=(50,))
    move(R, "c", 60, "shard1", wait=True)
    # A pending task of this incarnation on shard1 (a migration that never resolved):
    # pending tasks are never run.
    S1.ok({"_testInsertRangeDeletion": DB + ".c", "$db": "admin", "min": {"k": {"$minKey": 1}},
           "max": {"k": {"$maxKey": 1}}, "pending": True})
    old = tasks(S1)
    assert len(old) == 1 and old[0]["pending"] is True, old
    R.ok({"drop": "c", "$db": DB})
    shard_coll(R, "c", 100)
    new_uuid = R.ok({"find": "collections", "$db": "config",
                     "filter": {"_id": DB + ".c"}})["cursor"]["firstBatch"][0]["uuid"]
    assert new_uuid != old[0]["collectionUuid"]
    # Into shard1, whose old task overlaps the whole key space of the old incarnation.
    r = R.cmd({"moveChunk": DB + ".c", "find": {"k": 10}, "to": "shard1", "$db": "admin"})
    assert r.get("ok") == 1, r
    assert R.ok({"count": "c", "$db": DB})["n"] == 100
    # The old task is still there (pending, another incarnation): it met nothing.
    assert [x["_id"] for x in tasks(S1, {"pending": True})] == [old[0]["_id"]]
    # And out of shard1 again (the donor's overlap check compares the UUID too).
    r = R.cmd({"moveChunk": DB + ".c", "find": {"k": 10}, "to": "shard0", "$db": "admin",
               "_waitForDelete": True})
    assert r.get("ok") == 1, r
    assert R.ok({"count": "c", "$db": DB})["n"] == 100


@test
def test_task_for_an_owned_range_is_refused_and_the_documents_stay(t):
    cl, R = setup(t)
    S0 = cl.shards[0].client()
    shard_coll(R, "o", 300, split_at=(100,))
    move(R, "o", 150, "shard1", wait=True)
    # shard0 owns [MinKey, 100): a task over [20, 80) is a wrong decision.
    tid = S0.ok({"_testInsertRangeDeletion": DB + ".o", "$db": "admin", "min": {"k": 20},
                 "max": {"k": 80}})["id"]
    wait_until(lambda: num(status(S0)["tasksRefused"]) == 1, 20, "the task is refused")
    st = status(S0)
    assert [x["id"] for x in st["refused"]] == [tid], st
    assert st["refused"][0]["ns"] == DB + ".o" and "owns" in st["refused"][0]["why"], st
    log = cl.shards[0].log_text()
    line = [x for x in log.splitlines() if "range deletion refused" in x]
    assert line and " E range deletion refused" in line[0] and tid in line[0], line
    time.sleep(0.5)
    assert ks(S0, "o") == list(range(100)), "documents of an owned range were deleted"
    assert len(tasks(S0)) == 1
    assert R.ok({"count": "o", "$db": DB})["n"] == 300
    # One refusal does not stop the deleter: a task of a range shard0 does not own runs.
    S0.ok({"insert": "o", "$db": DB, "documents": [{"_id": 5000 + i, "k": 500 + i} for i in range(5)]})
    S0.ok({"_testInsertRangeDeletion": DB + ".o", "$db": "admin", "min": {"k": 500},
           "max": {"k": 600}})
    wait_until(lambda: [k for k in ks(S0, "o") if k >= 500] == [], 20,
               "the orphans of [500, 600) on shard0 are deleted")
    assert ks(S0, "o") == list(range(100))
    assert len(tasks(S0)) == 1


if __name__ == "__main__":
    main()
