#!/usr/bin/env python3
"""
test_shardd_critsec.py — a migration's critical section on a shard (shardd/critsec.c),
driven by the test-only command _testCriticalSection through a router on a 2-shard
cluster: a versioned write to the collection waits while the section is held and is
applied exactly once after it is left (the shard answers StaleConfig, the router
retries); a write held longer than the shard's bound gets StaleConfig back and the
router retries it (or answers an error when its maxTimeMS runs out); versioned reads go
on while the section is held and wait only while reads are blocked; and the fence: a
write already inside its transaction (held by hangBeforeWriteCommit) is committed
before entering the section returns.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
NS = "app.c"


def setup(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(10)]})
    return cl, c


def crit(c, action, ns=NS):
    return c.ok({"_testCriticalSection": ns, "action": action, "$db": "admin"})


class Bg:
    """Runs one command on its own client in a thread; .done tells when it answered."""

    def __init__(self, url, doc):
        self.c = Client(url)
        self.doc = doc
        self.reply = None
        self.done = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.start = time.monotonic()
        self.th.start()

    def _run(self):
        try:
            self.reply = self.c.cmd(self.doc)
        finally:
            self.elapsed = time.monotonic() - self.start
            self.done.set()

    def wait(self, timeout=60):
        assert self.done.wait(timeout), "no reply to %s within %ss" % (dumps(self.doc), timeout)
        return self.reply


def count(c, flt=None):
    return c.ok({"count": "c", "$db": DB, "query": flt or {}})["n"]


@test
def test_write_waits_for_section_then_applies_once(t):
    cl, c = setup(t)
    s0 = cl.shards[0].client()
    crit(s0, "enter")
    w = Bg(cl.routers[0].url, {"insert": "c", "$db": DB, "documents": [{"_id": 100, "k": 5}]})
    time.sleep(0.3)
    assert not w.done.is_set(), "the write went through a held critical section: %s" % w.reply
    # Versioned reads are not blocked before the commit phase.
    assert count(c) == 10
    crit(s0, "leave")
    r = w.wait()
    assert r.get("ok") == 1 and r.get("n") == 1, r
    assert count(c, {"_id": 100}) == 1
    assert "write refused by the critical section ns=app.c" in cl.shards[0].log_text()
    # An unversioned write straight to the shard is not subject to the section.
    crit(s0, "enter")
    s0.ok({"insert": "c", "$db": DB, "documents": [{"_id": 101, "k": 6}]})
    crit(s0, "leave")
    assert count(c) == 12


@test
def test_reads_wait_only_while_blocked(t):
    cl, c = setup(t)
    s0 = cl.shards[0].client()
    crit(s0, "enter")
    crit(s0, "blockReads")
    rd = Bg(cl.routers[0].url, {"find": "c", "$db": DB, "filter": {"k": {"$lt": 5}}})
    time.sleep(0.3)
    assert not rd.done.is_set(), "a versioned read went through blocked reads: %s" % rd.reply
    crit(s0, "leave")
    r = rd.wait()
    assert r.get("ok") == 1, r
    assert sorted(d["_id"] for d in r["cursor"]["firstBatch"]) == [0, 1, 2, 3, 4]
    # A read blocked longer than its maxTimeMS is answered (not held forever).
    crit(s0, "enter")
    crit(s0, "blockReads")
    r = c.cmd({"find": "c", "$db": DB, "filter": {}, "maxTimeMS": 800})
    assert r.get("ok") == 0 and r.get("code") in (50, 13388, 262), r
    crit(s0, "leave")


@test
def test_bounded_wait_then_stale_config(t):
    cl, c = setup(t)
    s0 = cl.shards[0].client()
    st = s0.ok({"serverStatus": 1, "$db": "admin"})["sharding"][NS]["shardVersion"]
    crit(s0, "enter")
    # Straight to the shard with the right version: refused, waits its maxTimeMS, then
    # StaleConfig with MongoDB's critical-section signal.
    t0 = time.monotonic()
    r = s0.err({"insert": "c", "$db": DB, "documents": [{"_id": 200, "k": 1}],
                "shardVersion": st, "maxTimeMS": 800}, 13388)
    waited = time.monotonic() - t0
    assert r.get("criticalSection") is True and r.get("ns") == NS and r.get("shardId") == "shard0", r
    assert "vReceived" in r, r
    assert waited >= 0.7, waited
    # Through the router with a deadline shorter than the section: an error, nothing written.
    r = c.cmd({"insert": "c", "$db": DB, "documents": [{"_id": 201, "k": 1}], "maxTimeMS": 1500})
    assert r.get("ok") == 0 or r.get("writeErrors"), r
    # Through the router without one: the shard gives up after MS_CRITSEC_WAIT_MS (5 s)
    # with StaleConfig, the router refreshes and retries, and the write lands once the
    # section is left.
    before = c.ok({"serverStatus": 1, "$db": "admin"})["router"]["staleConfigRetries"]
    w = Bg(cl.routers[0].url, {"insert": "c", "$db": DB, "documents": [{"_id": 202, "k": 2}]})
    time.sleep(6.0)
    assert not w.done.is_set(), w.reply
    crit(s0, "leave")
    r = w.wait()
    assert r.get("ok") == 1 and r.get("n") == 1, r
    after = c.ok({"serverStatus": 1, "$db": "admin"})["router"]["staleConfigRetries"]
    assert after > before, (before, after)
    assert count(c, {"_id": {"$in": [200, 201, 202]}}) == 1
    assert count(c, {"_id": 202}) == 1


@test
def test_enter_fences_a_write_inside_its_transaction(t):
    cl, c = setup(t)
    s0 = cl.shards[0].client()
    n = fp(s0, "hangBeforeWriteCommit", holdLocks=True)   # inside its transaction
    w = Bg(cl.routers[0].url, {"insert": "c", "$db": DB, "documents": [{"_id": 300, "k": 3}]})
    fp_wait(s0, "hangBeforeWriteCommit", n + 1)
    # The write passed every check and holds its transaction open: entering must wait.
    e = Bg(cl.shards[0].url, {"_testCriticalSection": NS, "action": "enter", "$db": "admin"})
    time.sleep(0.3)
    assert not e.done.is_set(), "enter returned while a checked write was still open: %s" % e.reply
    fp(s0, "hangBeforeWriteCommit", "off")
    r = e.wait()
    assert r.get("ok") == 1, r
    # When enter returned, the write had committed (an unversioned read of the shard).
    assert s0.ok({"count": "c", "$db": DB, "query": {"_id": 300}})["n"] == 1
    r = w.wait()
    assert r.get("ok") == 1 and r.get("n") == 1, r
    # A write after enter is held back until leave.
    w2 = Bg(cl.routers[0].url, {"update": "c", "$db": DB,
                                "updates": [{"q": {"_id": 300}, "u": {"$set": {"x": 1}}}]})
    fam = Bg(cl.routers[0].url, {"findAndModify": "c", "$db": DB, "query": {"_id": 1},
                                 "update": {"$inc": {"y": 1}}})
    dl = Bg(cl.routers[0].url, {"delete": "c", "$db": DB, "deletes": [{"q": {"_id": 2}, "limit": 1}]})
    time.sleep(0.3)
    assert not (w2.done.is_set() or fam.done.is_set() or dl.done.is_set()), (w2.reply, fam.reply, dl.reply)
    assert s0.ok({"count": "c", "$db": DB, "query": {"x": 1}})["n"] == 0
    crit(s0, "leave")
    assert w2.wait().get("nModified") == 1
    assert fam.wait().get("ok") == 1
    assert dl.wait().get("n") == 1
    assert count(c, {"x": 1}) == 1 and count(c, {"y": 1}) == 1 and count(c, {"_id": 2}) == 0


@test
def test_command_is_test_only(t):
    c = t.shardd("lone", test_commands=False).client()
    r = c.cmd({"_testCriticalSection": NS, "action": "enter", "$db": "admin"})
    assert r.get("ok") == 0 and r.get("code") == 59, r


if __name__ == "__main__":
    main()
