#!/usr/bin/env python3
"""
test_move_primary_critsec.py — movePrimary's database critical section (the bar
"no acknowledged write lost"): the old primary holds it from before the clone
until after the switch, so writes through a router to the database's unsharded
collections wait there and are retried on the new primary (StaleDbVersion) instead of
landing on a copy that is about to be dropped; reads go on meanwhile. The config server's
failpoint hangBeforeMovePrimarySwitch holds movePrimary between the clone and the switch
so writes surely arrive during the section. Also: the section survives a restart of the
shard (persisted), DDL waits too, movePrimary to the current primary leaves a section a
cut-short movePrimary left behind, and after a config server crash between the clone and
the switch the section stays held until movePrimary is run again.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403


def adm(doc):
    d = dict(doc)
    d["$db"] = "admin"
    return d


def db_entry(c, db):
    docs = c.ok({"find": "databases", "$db": "config", "filter": {"_id": db}})["cursor"]["firstBatch"]
    return docs[0] if docs else None


def ids_of(docs):
    return [d["_id"] for d in docs]


@test
def test_move_primary_writes_during_copy_not_lost(t):
    cl = t.cluster(shards=2, routers=2)
    c = cl.client(0)
    cfg = cl.config.client()
    c.ok(adm({"enableSharding": "mw", "primaryShard": "shard1"}))
    base = 3000
    docs = [{"_id": i, "pad": "p" * 40} for i in range(base)]
    for i in range(0, base, 1000):
        c.ok({"insert": "u", "$db": "mw", "documents": docs[i:i + 1000]})
    c.ok({"createIndexes": "u", "$db": "mw", "indexes": [{"key": {"w": 1}, "name": "w_1"}]})
    v0 = db_entry(c, "mw")["version"]["lastMod"]

    # The writer: one insert at a time through the second router, each _id new; an
    # acknowledged one (ok, n: 1) must end up on the new primary, exactly once.
    acked, failed = [], []
    stop = threading.Event()

    def writer():
        w = cl.client(1)
        i = 0
        while not stop.is_set():
            _id = 100000 + i
            i += 1
            r = w.cmd({"insert": "u", "$db": "mw", "documents": [{"_id": _id, "w": i}]})
            if r.get("ok") == 1 and r.get("n") == 1 and not r.get("writeErrors"):
                acked.append(_id)
            else:
                failed.append((_id, r))
        w.close()

    fp(cfg, "hangBeforeMovePrimarySwitch", mode={"times": 1})
    th = threading.Thread(target=writer)
    th.start()
    result = {}
    try:
        while len(acked) < 20 and th.is_alive():   # writes flow before movePrimary starts
            time.sleep(0.01)

        def mover():
            m = cl.client(0)
            result["r"] = m.cmd(adm({"movePrimary": "mw", "to": "shard0"}))
            m.close()

        mt = threading.Thread(target=mover)
        mt.start()
        fp_wait(cfg, "hangBeforeMovePrimarySwitch", 1)
        # Cloned, not switched: the old primary holds the section. Reads go on...
        n_at_hang = len(acked)
        r = c.ok({"count": "u", "$db": "mw"})
        assert r["n"] >= base, r
        # ...writes wait (the writer stalls on its current insert): checked below, after
        # what matters most, that nothing acknowledged is lost
        time.sleep(1.5)
        stalled = len(acked) - n_at_hang
        s1_log = cl.shards[1].log_text()
        fp(cfg, "hangBeforeMovePrimarySwitch", mode="off")
        mt.join(60)
        assert not mt.is_alive()
        assert result["r"].get("ok") == 1, result
        # the writer carries on against the new primary for a moment
        n_after = len(acked)
        deadline = time.time() + 20
        while len(acked) < n_after + 20 and time.time() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        th.join(60)
    assert not th.is_alive()
    assert len(acked) >= n_after + 20, "writes did not resume after movePrimary"
    assert not failed, failed[:3]

    e = db_entry(c, "mw")
    assert e["primary"] == "shard0" and e["version"]["lastMod"] == v0 + 1, e
    s0 = cl.shards[0].client()
    on0 = ids_of(s0.find_all("u", "mw"))
    assert len(on0) == len(set(on0)), "duplicates on the new primary"
    missing = set(acked) - set(on0)
    assert not missing, ("acknowledged writes lost", sorted(missing)[:10], len(missing))
    assert set(range(base)) <= set(on0)
    assert len(on0) == base + len(acked), (len(on0), base, len(acked))
    names = sorted(i["name"] for i in s0.ok({"listIndexes": "u", "$db": "mw"})["cursor"]["firstBatch"])
    assert names == ["_id_", "w_1"], names
    colls = cl.shards[1].client().ok({"listCollections": 1, "$db": "mw"})["cursor"]["firstBatch"]
    assert colls == [], colls                # the old copy is gone
    assert len(c.find_all("u", "mw")) == base + len(acked)
    assert stalled <= 1, ("writes went on during the critical section", stalled)
    assert "write refused by the database critical section" in s1_log, "no write met the section"
    print("  acked=%d (during the hang: %d)" % (len(acked), stalled), flush=True)


@test
def test_db_critical_section_persists_and_blocks_ddl(t):
    cl = t.cluster(shards=2, routers=1)
    c = cl.client(0)
    c.ok(adm({"enableSharding": "mr", "primaryShard": "shard1"}))
    c.ok({"insert": "a", "$db": "mr", "documents": [{"_id": 1}]})
    s1 = cl.shards[1].client()
    c.err(adm({"_shardsvrMovePrimaryEnterCriticalSection": "mr"}))  # internal: not from clients
    s1.err(adm({"_shardsvrMovePrimaryEnterCriticalSection": "a.b"}), 73)
    s1.ok(adm({"_shardsvrMovePrimaryEnterCriticalSection": "mr"}))
    s1.ok(adm({"_shardsvrMovePrimaryEnterCriticalSection": "mr"}))     # again: no-op
    # as if movePrimary's old primary restarted while holding it: still held
    cl.shards[1].restart()
    s1 = cl.shards[1].client()
    refused = (249, 50)                      # StaleDbVersion, or MaxTimeMSExpired first
    for cmd in ({"insert": "a", "documents": [{"_id": 2}]},
                {"update": "a", "updates": [{"q": {"_id": 1}, "u": {"$set": {"x": 1}}}]},
                {"delete": "a", "deletes": [{"q": {"_id": 1}, "limit": 1}]},
                {"findAndModify": "a", "query": {"_id": 1}, "update": {"$set": {"y": 1}}},
                {"insert": "fresh", "documents": [{"_id": 1}]},          # implicit create
                {"create": "b"},
                {"createIndexes": "a", "indexes": [{"key": {"x": 1}, "name": "x_1"}]},
                {"drop": "a"}):
        cmd = dict(cmd, **{"$db": "mr", "maxTimeMS": 300})
        r = c.cmd(cmd)
        assert r.get("ok") == 0 and r.get("code") in refused, (cmd, r)
    # reads go on
    assert ids_of(c.find_all("a", "mr")) == [1]
    colls = sorted(x["name"] for x in s1.ok({"listCollections": 1, "$db": "mr"})["cursor"]["firstBatch"])
    assert colls == ["a"], colls
    assert s1.find_all("a", "mr") == [{"_id": 1}]
    # another database is not affected
    c.ok({"insert": "a", "$db": "other", "documents": [{"_id": 1}]})
    # movePrimary to the current primary leaves a section a cut-short movePrimary left
    c.ok(adm({"movePrimary": "mr", "to": "shard1"}))
    c.ok({"insert": "a", "$db": "mr", "documents": [{"_id": 2}]})
    assert sorted(ids_of(c.find_all("a", "mr"))) == [1, 2]
    # and after a restart it stays left
    cl.shards[1].restart()
    c.ok({"insert": "a", "$db": "mr", "documents": [{"_id": 3}]})
    # a held section on the target (it was an old primary once) is left by movePrimary
    s0 = cl.shards[0].client()
    s0.ok(adm({"_shardsvrMovePrimaryEnterCriticalSection": "mr"}))
    c.ok(adm({"movePrimary": "mr", "to": "shard0"}))
    c.ok({"insert": "a", "$db": "mr", "documents": [{"_id": 4}]})
    assert sorted(ids_of(s0.find_all("a", "mr"))) == [1, 2, 3, 4]
    s0.ok(adm({"_shardsvrMovePrimaryExitCriticalSection": "mr"}))   # not held: ok


@test
def test_move_primary_config_crash_then_retry(t):
    # The config server dies between the clone and the switch: the old primary keeps the
    # section (writes refused, nothing lands on a copy that may be dropped); running
    # movePrimary again completes the move and leaves it.
    cl = t.cluster(shards=2, routers=1)
    c = cl.client(0)
    cfg = cl.config.client()
    c.ok(adm({"enableSharding": "mc", "primaryShard": "shard1"}))
    c.ok({"insert": "u", "$db": "mc", "documents": [{"_id": i} for i in range(500)]})
    fp(cfg, "hangBeforeMovePrimarySwitch", mode={"times": 1}, action="crash")
    cfg.close()
    r = c.cmd(adm({"movePrimary": "mc", "to": "shard0"}))
    assert r.get("ok") == 0, r
    assert cl.config.proc.wait(30) == -9
    cl.config.restart()
    assert db_entry(c, "mc")["primary"] == "shard1"
    r = c.cmd({"insert": "u", "$db": "mc", "documents": [{"_id": 1000}], "maxTimeMS": 300})
    assert r.get("ok") == 0 and r.get("code") in (249, 50), r
    assert len(c.find_all("u", "mc")) == 500                 # reads go on
    c.ok(adm({"movePrimary": "mc", "to": "shard0"}))
    c.ok({"insert": "u", "$db": "mc", "documents": [{"_id": 1000}]})
    assert sorted(ids_of(cl.shards[0].client().find_all("u", "mc"))) == list(range(500)) + [1000]
    colls = cl.shards[1].client().ok({"listCollections": 1, "$db": "mc"})["cursor"]["firstBatch"]
    assert colls == [], colls


if __name__ == "__main__":
    main()
