#!/usr/bin/env python3
"""
test_meetings_misc.py — three things that can meet the metadata of a cluster while it
changes (docs/how-a-migration-works.md "What can meet a migration"):

- a shard cut off from the config server (SIGSTOP, then kill -9) keeps serving the writes
  whose metadata it knows: the chunks of a sharded collection it owns, and the database's
  unsharded collections after a drop / shardCollection of another collection of the
  database (those used to make it forget the database's version, so every write to an
  unsharded collection of the database waited for a refresh that could not come and
  failed after 10 s). What it does not know — a restarted shard's collection metadata —
  still fails, with an error naming the config server, once the refresh deadline (or the
  request's shorter maxTimeMS) passes;
- a movePrimary that fails after its copy (failpoint hangBeforeMovePrimarySwitch, action
  error) removes the copy from the target: its listCollections and listDatabases no longer
  show the database, and the original primary still holds every document;
- a router whose own split / merge / moveChunk commands keep invalidating its routing
  table while count, find, distinct and aggregate run on it never answers InternalError
  (it used to: "routing table keeps being invalidated"); an operation that gives up answers
  a StaleConfig-family code, and every count is exact.
"""
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

STALE_FAMILY = (13388, 63, 150, 249)   # StaleConfig, StaleShardVersion, StaleEpoch, StaleDbVersion
UNSHARDED = {"e": {"$oid": "0" * 24}, "t": {"$timestamp": {"t": 0, "i": 0}},
             "v": {"$timestamp": {"t": 0, "i": 0}}}


def adm(doc):
    d = dict(doc)
    d["$db"] = "admin"
    return d


def timed(c, doc):
    t0 = time.monotonic()
    r = c.cmd(doc)
    return r, time.monotonic() - t0


@test
def test_shard_cut_off_from_config_keeps_known_writes(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    c.ok(adm({"enableSharding": "app", "primaryShard": "shard0"}))
    c.ok({"insert": "plain", "$db": "app", "documents": [{"_id": 1}]})
    c.ok({"insert": "other", "$db": "app", "documents": [{"_id": 1}]})
    c.ok(adm({"shardCollection": "app.u", "key": {"k": 1}}))
    c.ok(adm({"split": "app.u", "middle": {"k": 100}}))
    c.ok(adm({"moveChunk": "app.u", "find": {"k": 100}, "to": "shard1"}))
    c.ok({"insert": "u", "$db": "app", "documents": [{"_id": 1, "k": 1}, {"_id": 2, "k": 200}]})
    # DDL on other collections of the database, as happens all the time: before the fix
    # each made the primary forget the database's version
    c.ok({"drop": "other", "$db": "app"})
    c.ok(adm({"shardCollection": "app.v", "key": {"k": 1}}))

    dbv = c.ok({"find": "databases", "$db": "config", "filter": {"_id": "app"}})["cursor"]["firstBatch"][0]["version"]
    sv1 = cl.shards[1].client().ok({"serverStatus": 1, "$db": "admin"})["sharding"]["app.u"]["shardVersion"]

    os.kill(cl.config.pid, signal.SIGSTOP)   # cut off: connections hang, nothing answers
    try:
        # the sharded collection: both shards own a chunk and know its metadata
        r, dt = timed(c, {"insert": "u", "$db": "app",
                          "documents": [{"_id": 3, "k": 2}, {"_id": 4, "k": 300}]})
        assert r.get("ok") == 1 and r.get("n") == 2 and "writeErrors" not in r, r
        assert dt < 5, dt
        r = c.ok({"update": "u", "$db": "app", "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "multi": True}]})
        assert r["n"] == 4, r
        # the unsharded collection on the primary, with the database version the router has
        r, dt = timed(c, {"insert": "plain", "$db": "app", "documents": [{"_id": 2}]})
        assert r.get("ok") == 1 and r.get("n") == 1 and "writeErrors" not in r, (r, dt)
        assert dt < 5, dt
        r = c.ok({"delete": "plain", "$db": "app", "deletes": [{"q": {"_id": 1}, "limit": 1}]})
        assert r["n"] == 1, r
        # straight to the shards with what the router would send: UNSHARDED +
        # databaseVersion to the primary, the shard's version for a chunk it owns
        s0, s1 = cl.shards[0].client(), cl.shards[1].client()
        s0.ok({"insert": "plain", "$db": "app", "documents": [{"_id": 10}],
               "shardVersion": UNSHARDED, "databaseVersion": dbv})
        r = s1.ok({"insert": "u", "$db": "app", "documents": [{"_id": 10, "k": 150}],
                   "shardVersion": sv1})
        assert r["n"] == 1, r
        assert c.ok({"count": "plain", "$db": "app"})["n"] == 2
        assert c.ok({"count": "u", "$db": "app"})["n"] == 5
    finally:
        os.kill(cl.config.pid, signal.SIGCONT)
    c.ok({"insert": "plain", "$db": "app", "documents": [{"_id": 3}]})

    # metadata the shard does not know: shard1 restarts while the config server is gone
    cl.config.kill()
    cl.shards[1].restart()
    r, dt = timed(c, {"insert": "u", "$db": "app", "documents": [{"_id": 5, "k": 400}]})
    errs = r.get("writeErrors") or ([r] if r.get("ok") != 1 else [])
    assert len(errs) == 1, r
    assert errs[0]["code"] in (6, 89, 50), r           # HostUnreachable / NetworkTimeout / MaxTimeMSExpired
    assert "config" in errs[0]["errmsg"] or cl.config.url in errs[0]["errmsg"], r
    assert "refreshing filtering metadata of app.u" in errs[0]["errmsg"], r
    # with a maxTimeMS shorter than the refresh deadline: that deadline, MaxTimeMSExpired
    r, dt = timed(c, {"insert": "u", "$db": "app", "documents": [{"_id": 6, "k": 500}], "maxTimeMS": 300})
    errs = r.get("writeErrors") or ([r] if r.get("ok") != 1 else [])
    assert len(errs) == 1 and errs[0]["code"] in (50, 6), r
    assert dt < 5, dt
    # the shard that knows its chunk still takes writes to it
    r = c.cmd({"insert": "u", "$db": "app", "documents": [{"_id": 7, "k": 3}]})
    assert r.get("ok") == 1 and r.get("n") == 1, r
    assert "refreshing filtering metadata" in cl.shards[1].log_text()


@test
def test_move_primary_failure_removes_target_copy(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    cfg = cl.config.client()
    c.ok(adm({"enableSharding": "mp", "primaryShard": "shard1"}))
    docs_a = [{"_id": i, "v": "a%d" % i} for i in range(2500)]   # more than one clone batch
    c.ok({"insert": "a", "$db": "mp", "documents": docs_a})
    c.ok({"insert": "b", "$db": "mp", "documents": [{"_id": 1}, {"_id": 2}]})
    c.ok({"createIndexes": "b", "$db": "mp", "indexes": [{"key": {"x": 1}, "name": "x_1"}]})
    s0, s1 = cl.shards[0].client(), cl.shards[1].client()

    def colls(s):
        return sorted(e["name"] for e in s.ok({"listCollections": 1, "$db": "mp"})["cursor"]["firstBatch"])

    def dbs(s):
        return sorted(d["name"] for d in s.ok({"listDatabases": 1, "$db": "admin"})["databases"])

    assert colls(s0) == [] and "mp" not in dbs(s0)
    # fails after the copy of both collections, before the switch
    fp(cfg, "hangBeforeMovePrimarySwitch", action="error", code=96, errmsg="injected")
    r = c.err(adm({"movePrimary": "mp", "to": "shard0"}))
    fp(cfg, "hangBeforeMovePrimarySwitch", mode="off")
    assert "injected" in r["errmsg"], r
    assert colls(s0) == [], colls(s0)
    assert "mp" not in dbs(s0), dbs(s0)
    assert "movePrimary copy removed db=mp coll=a shard=shard0" in cl.config.log_text()
    # the original primary is intact and still the primary
    assert colls(s1) == ["a", "b"], colls(s1)
    assert sorted(s1.find_all("a", "mp"), key=lambda d: d["_id"]) == docs_a
    prim = c.ok({"find": "databases", "$db": "config", "filter": {"_id": "mp"}})["cursor"]["firstBatch"][0]
    assert prim["primary"] == "shard1", prim
    assert c.ok({"count": "a", "$db": "mp"})["n"] == 2500
    c.ok({"insert": "b", "$db": "mp", "documents": [{"_id": 3}]})

    # a copy cut short mid-way (the target refuses b's index build): every copy goes,
    # the collection whose copy failed included
    fp(s0, "failCommand", mode={"times": 1}, failCommands=["createIndexes"], errorCode=2,
       failInternalCommands=True)
    r = c.err(adm({"movePrimary": "mp", "to": "shard0"}), code=2)
    assert colls(s0) == [] and "mp" not in dbs(s0), (colls(s0), dbs(s0))
    assert colls(s1) == ["a", "b"], colls(s1)
    assert c.ok({"count": "b", "$db": "mp"})["n"] == 3
    c.ok(adm({"movePrimary": "mp", "to": "shard0"}))   # and then it works
    assert colls(s0) == ["a", "b"] and "mp" in dbs(s0)
    assert colls(s1) == []
    assert c.ok({"count": "a", "$db": "mp"})["n"] == 2500


@test
def test_router_churn_never_internal_error(t):
    cl = t.cluster(shards=3, routers=2)
    A = cl.client(0)
    A.ok(adm({"enableSharding": "app", "primaryShard": "shard0"}))
    A.ok(adm({"shardCollection": "app.c", "key": {"k": 1}}))
    N = 400
    A.ok({"insert": "c", "$db": "app", "documents": [{"_id": i, "k": i} for i in range(N)]})
    sd = seed()
    stop = time.monotonic() + 15
    errs, bad, counts = [], [], {}
    lock = threading.Lock()

    def churn(i):
        c = cl.client(0)   # through the router the readers below use: it invalidates its own table
        rnd = random.Random(sd + i)
        n = 0
        while time.monotonic() < stop:
            m = rnd.randrange(1, N - 1)
            c.cmd(adm({"split": "app.c", "middle": {"k": m}}))
            if rnd.random() < 0.2:
                c.cmd(adm({"moveChunk": "app.c", "find": {"k": m}, "to": "shard%d" % rnd.randrange(3)}))
            ch = c.ok({"find": "chunks", "$db": "config", "filter": {}, "sort": {"min": 1}})["cursor"]["firstBatch"]
            for j in range(len(ch) - 1):
                if ch[j]["shard"] == ch[j + 1]["shard"]:
                    c.cmd(adm({"mergeChunks": "app.c", "bounds": [ch[j]["min"], ch[j + 1]["max"]]}))
                    break
            n += 1
        counts["churn%d" % i] = n

    def reader(ri, i):
        c = cl.client(ri)
        n = 0
        ops = ({"count": "c", "$db": "app"},
               {"find": "c", "$db": "app", "filter": {}, "batchSize": 1000},
               {"distinct": "c", "$db": "app", "key": "k"},
               {"aggregate": "c", "$db": "app", "cursor": {},
                "pipeline": [{"$group": {"_id": None, "n": {"$sum": 1}}}]})
        while time.monotonic() < stop:
            for d in ops:
                r = c.cmd(d)
                n += 1
                name = list(d)[0]
                with lock:
                    if r.get("ok") != 1:
                        errs.append((ri, name, r.get("code"), r.get("errmsg")))
                    elif name == "count" and r["n"] != N:
                        bad.append((ri, name, r["n"]))
                    elif name == "find" and len(r["cursor"]["firstBatch"]) != N:
                        bad.append((ri, name, len(r["cursor"]["firstBatch"])))
                    elif name == "distinct" and len(r["values"]) != N:
                        bad.append((ri, name, len(r["values"])))
                    elif name == "aggregate" and r["cursor"]["firstBatch"][0]["n"] != N:
                        bad.append((ri, name, r["cursor"]["firstBatch"]))
        counts["r%d_%d" % (ri, i)] = n

    ths = [threading.Thread(target=churn, args=(i,)) for i in range(2)]
    ths += [threading.Thread(target=reader, args=(i % 2, i)) for i in range(4)]
    for th in ths:
        th.start()
    for th in ths:
        th.join(120)
    print("  ops:", counts, "errors:", len(errs), flush=True)
    assert counts.get("churn0", 0) > 10, counts
    assert not bad, bad[:5]
    internal = [e for e in errs if e[2] == 1 or e[2] not in STALE_FAMILY]
    assert not internal, internal[:5]
    st = A.ok({"serverStatus": 1, "$db": "admin"})["router"]
    print("  router0:", {k: st[k] for k in ("staleConfigRetries", "routingTableRefreshes",
                                             "routingTableRefreshesDiscarded")}, flush=True)


if __name__ == "__main__":
    main()
