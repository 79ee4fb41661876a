#!/usr/bin/env python3
"""
test_shardd_rdel.py — the range deleter (shardd/rdel.c, docs/range-deleter.md) on a real
two-shard cluster. Tests plant tasks with the test-only _testInsertRangeDeletion /
_testSetRangeDeletionReady on shard0, which holds the documents as orphans (the only chunk
lives on shard1: the deleter refuses a task for a range its shard owns,
test_rdel_meetings.py): a ready task deletes exactly the documents of [min, max) in batches (the
serverStatus counters); a pending task is not run until set ready; a "delayed" task waits
--orphan-cleanup-delay-ms; a task waits while a cursor opened through the router (a
versioned find, so its ownership snapshot owns the range) is open (a migration's task); kill -9 in the middle
(suspendRangeDeletion with action crash after one batch) leaves the task persisted with
processing: true and numOrphanDocs decremented, and the restarted shard finishes it;
cleanupOrphaned waits for the namespace's tasks and times out on a pending one.
"""
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "rd"
NS = DB + ".c"
BATCH = 10


def num(v):
    if isinstance(v, dict):
        for k in ("$numberLong", "$numberInt", "$numberDouble"):
            if k in v:
                return int(float(v[k]))
    return int(v)


def setup(t, delay_ms=0, ndocs=300, owned=False):
    """A two-shard cluster with rd.c sharded on k. owned: shard0 owns every chunk and holds
    the documents. Else (a planted task must be for a range the shard does not own, or the
    deleter refuses it) the only chunk lives on shard1 and shard0 holds the documents as
    orphans, inserted directly (unversioned)."""
    cfg = t.configsvr()
    flags = ["--range-deleter-batch-size", str(BATCH), "--range-deleter-batch-delay-ms", "5",
             "--orphan-cleanup-delay-ms", str(delay_ms)]
    s0 = t.shardd("shard0", extra=flags)
    s1 = t.shardd("shard1", extra=flags)
    r = t.router(cfg.url)
    R = r.client()
    R.ok({"addShard": s0.url, "name": "shard0", "$db": "admin"})
    R.ok({"addShard": s1.url, "name": "shard1", "$db": "admin"})
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    docs = [{"_id": i, "k": i} for i in range(ndocs)]
    if owned:
        R.ok({"insert": "c", "$db": DB, "documents": docs})
        return s0, R
    R.ok({"moveChunk": NS, "find": {"k": 0}, "to": "shard1", "_waitForDelete": True,
          "$db": "admin"})
    s0.client().ok({"insert": "c", "$db": DB, "documents": docs})
    return s0, R


def ks(S):
    """k of every document on the shard (unversioned: orphans included)."""
    return sorted(d["k"] for d in S.find_all("c", DB, {}))


def status(S):
    return S.ok({"serverStatus": 1})["rangeDeleter"]


def tasks(S):
    return S.ok({"find": "rangeDeletions", "$db": "config"})["cursor"]["firstBatch"]


def plant(S, lo, hi, **kw):
    cmd = {"_testInsertRangeDeletion": NS, "$db": "admin", "min": {"k": lo}, "max": {"k": hi}}
    cmd.update(kw)
    return S.ok(cmd)["id"]


def cleanup(S, ms=20000):
    S.ok({"cleanupOrphaned": NS, "$db": "admin", "maxTimeMS": ms})


@test
def test_ready_task_deletes_exactly_its_range_in_batches(t):
    s0, R = setup(t)
    S = s0.client()
    before = status(S)
    tid = plant(S, 100, 150)
    assert len(tid) == 32
    cleanup(S)
    assert ks(S) == [k for k in range(300) if not 100 <= k < 150]
    st = status(S)
    assert num(st["docsDeleted"]) - num(before["docsDeleted"]) == 50, st
    # 50 documents in batches of 10: five full batches and the one that finds none left
    assert num(st["batches"]) - num(before["batches"]) == 6, st
    assert num(st["tasksCompleted"]) - num(before["tasksCompleted"]) == 1, st
    assert num(st["tasks"]) == 0, st
    assert tasks(S) == []
    # the router (versioned) never saw the orphans
    assert R.ok({"count": "c", "$db": DB})["n"] == 0
    # a range with nothing in it ends in one batch
    plant(S, 1000, 2000)
    cleanup(S)
    assert len(ks(S)) == 250


@test
def test_pending_task_waits_until_ready(t):
    s0, R = setup(t)
    S = s0.client()
    tid = plant(S, 0, 30, pending=True)
    got = tasks(S)
    assert len(got) == 1 and got[0].get("pending") is True and got[0]["nss"] == NS, got
    assert num(got[0]["numOrphanDocs"]) == 30 and got[0]["keyPattern"] == {"k": 1}, got
    assert got[0]["range"] == {"min": {"k": 0}, "max": {"k": 30}}, got
    # filter through the query engine
    assert S.ok({"find": "rangeDeletions", "$db": "config",
                 "filter": {"nss": "other.c"}})["cursor"]["firstBatch"] == []
    e = S.err({"cleanupOrphaned": NS, "$db": "admin", "maxTimeMS": 300})
    assert e.get("code") in (262, 50), e
    time.sleep(0.5)
    assert len(ks(S)) == 300
    S.ok({"_testSetRangeDeletionReady": NS, "$db": "admin", "id": tid})
    cleanup(S)
    assert ks(S) == list(range(30, 300))
    S.err({"_testSetRangeDeletionReady": NS, "$db": "admin", "id": tid}, 4)   # NoSuchKey


@test
def test_delayed_task_waits_for_the_cleanup_delay(t):
    s0, R = setup(t, delay_ms=1500)
    S = s0.client()
    plant(S, 0, 20, whenToClean="delayed")
    # at once: nothing deleted yet (the delay is a lower bound)
    assert len(ks(S)) == 300
    st = status(S)
    assert num(st["docsDeleted"]) == 0, st
    cleanup(S)
    assert ks(S) == list(range(20, 300))


@test
def test_waits_for_an_open_cursor_that_owns_the_range(t):
    s0, R = setup(t, owned=True)
    S = s0.client()
    r = R.ok({"find": "c", "$db": DB, "filter": {"k": {"$lt": 100}}, "batchSize": 2})
    cid = r["cursor"]["id"]
    assert num(cid) != 0
    # the migration's own task of [MinKey, 50) on shard0 (the donor) meets the cursor
    R.ok({"split": NS, "middle": {"k": 50}, "$db": "admin"})
    R.ok({"moveChunk": NS, "find": {"k": 0}, "to": "shard1", "$db": "admin"})
    wait_until(lambda: status(S)["state"] == "waitingForReaders", 10, "deleter waits for readers")
    time.sleep(0.3)
    assert len(ks(S)) == 300
    S.err({"cleanupOrphaned": NS, "$db": "admin", "maxTimeMS": 200})
    assert "range deletion waits for readers" in s0.log_text()
    assert status(S)["tasksWaitingForReaders"] == 1
    R.ok({"killCursors": "c", "$db": DB, "cursors": [cid]})
    cleanup(S)
    assert ks(S) == list(range(50, 300))


@test
def test_kill9_mid_deletion_resumes_after_restart(t):
    s0, R = setup(t)
    S = s0.client()
    # the first batch runs, the second evaluation kills the process (kill -9's state)
    fp(S, "suspendRangeDeletion", {"skip": 1}, action="crash")
    plant(S, 0, 200)
    wait_until(lambda: not s0.alive(), 20, "shard0 crashed at suspendRangeDeletion")
    s0.kill()
    db = sqlite3.connect(os.path.join(s0.dbpath, "shard.sqlite"))
    try:
        rows = db.execute("SELECT doc FROM shard_docs WHERE coll = 'rangeDeletions'").fetchall()
    finally:
        db.close()
    assert len(rows) == 1
    raw = bytes(rows[0][0])
    assert b"processing" in raw, raw
    s0.start()
    S = s0.client()
    cleanup(S)
    assert ks(S) == list(range(200, 300))
    assert tasks(S) == []
    assert "range deletion starts" in s0.log_text()


@test
def test_hang_then_error_then_release(t):
    s0, R = setup(t)
    S = s0.client()
    n = fp(S, "suspendRangeDeletion", "alwaysOn", action="error")
    plant(S, 0, 40)
    fp_wait(S, "suspendRangeDeletion", n + 1)
    assert len(ks(S)) == 300
    n = fp(S, "suspendRangeDeletion", "alwaysOn")   # hang
    fp_wait(S, "suspendRangeDeletion", n + 1)
    assert status(S)["state"] == "deleting"
    fp(S, "suspendRangeDeletion", "off")
    cleanup(S)
    assert ks(S) == list(range(40, 300))
    assert num(status(S)["batchErrors"]) >= 1


@test
def test_flags_and_test_commands_gated(t):
    s = t.shardd("plain", test_commands=False)
    S = s.client()
    S.err({"_testInsertRangeDeletion": NS, "$db": "admin", "min": {"k": 0}, "max": {"k": 1}})
    st = status(S)
    assert num(st["batchSize"]) == 128 and num(st["batchDelayMs"]) == 20, st
    assert num(st["orphanCleanupDelayMs"]) == 2000, st
    S.ok({"cleanupOrphaned": NS, "$db": "admin"})   # nothing to wait for
    import subprocess
    rc = subprocess.call([os.path.join(BIN, "shardd"), "--dbpath", t.dir,
                          "--range-deleter-batch-size", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert rc == 2


if __name__ == "__main__":
    main()
