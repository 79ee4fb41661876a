#!/usr/bin/env python3
"""
test_cluster_time.py — the cluster time (common/lclock.c, docs/cluster-time.md): every
reply of every process carries $clusterTime and operationTime; writes' operationTimes
grow; $clusterTime gossiped to a router reaches the shards it talks to and one past
maxAcceptableLogicalClockDriftSecs is refused (ClusterTimeFailsRateLimiter); a read with
readConcern.afterClusterTime waits for a write still in flight (bounded by maxTimeMS), is
refused ahead of the node's clock (InvalidOptions), then sees the write; the clock survives
kill -9; a migration's commit ticks the config server's clock and reaches the donor; and
pymongo's causally consistent sessions work through two routers.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CAUSAL = os.path.join(ROOT, "tests", "clients", "pymongo_causal.py")
DB = "app"
DRIFT_MAX = 365 * 24 * 3600   # MongoDB's maxAcceptableLogicalClockDriftSecs default


def tsv(v):
    """(t, i) of an extended-JSON Timestamp."""
    assert isinstance(v, dict) and "$timestamp" in v, "not a Timestamp: %r" % (v,)
    return (v["$timestamp"]["t"], v["$timestamp"]["i"])


def times(r):
    """($clusterTime.clusterTime, operationTime) of a reply, both required."""
    assert "$clusterTime" in r and "operationTime" in r, "reply without cluster time: %s" % dumps(r)[:400]
    sig = r["$clusterTime"]["signature"]
    assert "hash" in sig and "keyId" in sig, sig
    ct, op = tsv(r["$clusterTime"]["clusterTime"]), tsv(r["operationTime"])
    assert op <= ct, "operationTime %s past $clusterTime %s" % (op, ct)
    return ct, op


def gossip(t, i=0):
    return {"clusterTime": ts(t, i), "signature": {"hash": {"$binary": {"base64": "A" * 28,
                                                                        "subType": "00"}},
                                                   "keyId": long(0)}}


def cluster_time_of(c):
    return times(c.ok({"ping": 1, "$db": "admin"}))[0]


@test
def test_every_reply_carries_cluster_time(t):
    cl = t.cluster(shards=1, routers=1)
    for p in (cl.routers[0], cl.shards[0], cl.config):
        c = p.client()
        times(c.ok({"ping": 1, "$db": "admin"}))
        times(c.ok({"hello": 1, "$db": "admin"}))
        times(c.err({"noSuchCommand": 1, "$db": "admin"}, 59))
        times(c.err({"find": 5, "$db": "admin"}))


@test
def test_write_operation_times_grow(t):
    cl = t.cluster(shards=2, routers=1)
    c = cl.client()
    c.ok({"shardCollection": DB + ".c", "key": {"k": 1}, "$db": "admin"})
    c.ok({"split": DB + ".c", "middle": {"k": 0}, "$db": "admin"})
    c.ok({"moveChunk": DB + ".c", "find": {"k": 5}, "to": "shard1", "_waitForDelete": True,
          "$db": "admin"})
    last = (0, 0)
    for i in range(20):
        k = i if i % 2 else -i - 1  # alternate the two shards
        r = c.ok({"insert": "c", "$db": DB, "documents": [{"k": k}]})
        _, op = times(r)
        assert op > last, "operationTime went %s -> %s" % (last, op)
        last = op
    # A write to both shards: the later of the two shards' times.
    r = c.ok({"update": "c", "$db": DB, "updates": [{"q": {}, "u": {"$set": {"x": 1}}, "multi": True}]})
    _, op = times(r)
    assert op > last
    s_times = [cluster_time_of(s.client()) for s in cl.shards]
    assert op <= max(s_times), (op, s_times)
    # A read answers the shard's read time: not before the writes it saw.
    _, rop = times(c.ok({"find": "c", "$db": DB, "filter": {}}))
    assert rop >= last, (rop, last)


@test
def test_gossip_reaches_shards_and_drift_is_refused(t):
    cl = t.cluster(shards=1, routers=1)
    c, sc = cl.client(), cl.shards[0].client()
    c.ok({"insert": "c", "$db": DB, "documents": [{"a": 1}]})
    ahead = int(time.time()) + 3600   # far ahead, within the allowed drift
    assert cluster_time_of(sc) < (ahead, 7)
    r = c.ok({"find": "c", "$db": DB, "filter": {}, "$clusterTime": gossip(ahead, 7)})
    assert times(r)[0] >= (ahead, 7)
    # The router's request carried its time to the shard; the shard keeps it.
    assert cluster_time_of(sc) >= (ahead, 7)
    # The next write on the shard ticks from there (hybrid: its clock is ahead of the wall).
    _, op = times(c.ok({"insert": "c", "$db": DB, "documents": [{"a": 2}]}))
    assert op > (ahead, 7), op
    # One year and more past the wall clock: MongoDB's rate limiter refuses it, everywhere.
    too_far = int(time.time()) + DRIFT_MAX + 600
    for cc in (c, sc, cl.config.client()):
        r = cc.err({"ping": 1, "$db": "admin", "$clusterTime": gossip(too_far)}, 205)
        assert r["codeName"] == "ClusterTimeFailsRateLimiter", r
        assert "too far from this node's wall clock time" in r["errmsg"], r
    assert cluster_time_of(sc) < (too_far, 0)
    r = sc.ok({"getParameter": 1, "maxAcceptableLogicalClockDriftSecs": 1, "$db": "admin"})
    assert num(r["maxAcceptableLogicalClockDriftSecs"]) == DRIFT_MAX, r
    sc.err({"ping": 1, "$db": "admin", "$clusterTime": {"signature": {}}}, 4)
    sc.err({"ping": 1, "$db": "admin", "$clusterTime": 5}, 14)


@test
def test_after_cluster_time_waits_for_a_write_in_flight(t):
    cl = t.cluster(shards=1, routers=1)
    c, sc = cl.client(), cl.shards[0].client()
    c.ok({"insert": "c", "$db": DB, "documents": [{"a": 0}]})
    now = cluster_time_of(sc)
    # Ahead of the shard's clock, with no gossip to get it there: InvalidOptions.
    r = sc.err({"find": "c", "$db": DB, "readConcern": {"afterClusterTime": ts(now[0] + 600, 0)}}, 72)
    assert "must not be greater than the current clusterTime" in r["errmsg"], r
    # MongoDB's ReadConcernArgs rules.
    sc.err({"find": "c", "$db": DB, "readConcern": {"level": "available",
                                                    "afterClusterTime": ts(now[0], 1)}}, 72)
    sc.err({"find": "c", "$db": DB, "readConcern": {"afterClusterTime": ts(0, 0)}}, 72)
    sc.err({"find": "c", "$db": DB, "readConcern": {"afterClusterTime": 12}}, 14)
    # A write holds its time (taken at BEGIN) with its transaction open.
    n = fp(sc, "hangBeforeWriteCommit", holdLocks=True)
    w = cl.routers[0].client()
    send(w, {"insert": "c", "$db": DB, "documents": [{"a": 1}]})
    fp_wait(sc, "hangBeforeWriteCommit", n + 1)
    pending = cluster_time_of(sc)   # >= the write's time
    far = int(time.time()) + 1800
    try:
        # A read after it waits, and its maxTimeMS ends the wait: directly on the shard,
        # through the router (which passes readConcern on), and with a time far ahead
        # (gossiped in the same request, within the drift).
        for cc, extra in ((sc, {}), (c, {}), (c, {"$clusterTime": gossip(far)})):
            at = ts(far, 0) if extra else ts(*pending)
            cmd = {"find": "c", "$db": DB, "filter": {}, "maxTimeMS": 300,
                   "readConcern": {"level": "local", "afterClusterTime": at}}
            cmd.update(extra)
            t0 = time.monotonic()
            r = cc.err(cmd, 50)
            assert time.monotonic() - t0 >= 0.25, "did not wait"
            times(r)
        # Reads that do not ask for the write's time are not held up.
        c.ok({"find": "c", "$db": DB, "filter": {}, "maxTimeMS": 2000,
              "readConcern": {"afterClusterTime": ts(now[0], now[1])}})
    finally:
        fp(sc, "hangBeforeWriteCommit", "off")
    wr = reply(w)
    assert wr.get("ok") == 1, wr
    _, wop = times(wr)
    assert wop <= pending, (wop, pending)
    # Now the same read goes through, and sees the write.
    r = c.ok({"find": "c", "$db": DB, "filter": {"a": 1}, "maxTimeMS": 5000,
              "readConcern": {"afterClusterTime": ts(*pending)}})
    assert len(r["cursor"]["firstBatch"]) == 1, r
    assert times(r)[1] >= pending
    for cmd in ({"count": "c", "$db": DB}, {"distinct": "c", "key": "a", "$db": DB},
                {"aggregate": "c", "pipeline": [], "cursor": {}, "$db": DB}):
        cmd["readConcern"] = {"afterClusterTime": ts(far, 0)}
        cmd["$clusterTime"] = gossip(far)
        assert times(c.ok(cmd))[1] >= (far, 0), cmd


@test
def test_clock_survives_kill9(t):
    cl = t.cluster(shards=1, routers=1)
    c = cl.client()
    ahead = int(time.time()) + 7200
    c.ok({"ping": 1, "$db": "admin", "$clusterTime": gossip(ahead, 3)})
    last = (0, 0)
    for i in range(5):
        _, last = times(c.ok({"insert": "c", "$db": DB, "documents": [{"i": i}],
                              "$clusterTime": gossip(ahead, 3)}))
    assert last > (ahead, 3), last
    sh = cl.shards[0]
    sh.restart()   # kill -9, then start again on the same dbpath
    sc = sh.client()
    # Directly, with nothing gossiped but shardctl's wall clock: the clock did not go back.
    assert cluster_time_of(sc) > last
    _, op = times(sc.ok({"insert": "c", "$db": DB, "documents": [{"i": 99}]}))
    assert op > last, (op, last)


@test
def test_migration_commit_ticks_config_and_reaches_donor(t):
    cl = t.cluster(shards=2, routers=1)
    c, cfgc = cl.client(), cl.config.client()
    c.ok({"shardCollection": DB + ".m", "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "m", "$db": DB, "documents": [{"k": i} for i in range(100)]})
    # Only the config server's clock is pushed ahead: what reaches the shards later came
    # from it.
    ahead = int(time.time()) + 5000
    before = times(cfgc.ok({"ping": 1, "$db": "admin", "$clusterTime": gossip(ahead, 0)}))[0]
    c.ok({"split": DB + ".m", "middle": {"k": 50}, "$db": "admin"})
    split_at = cluster_time_of(cfgc)
    assert split_at > before, (split_at, before)
    c.ok({"moveChunk": DB + ".m", "find": {"k": 70}, "to": "shard1", "_waitForDelete": True,
          "$db": "admin"})
    after = cluster_time_of(cfgc)
    assert after > split_at, (after, split_at)
    donor = cluster_time_of(cl.shards[0].client())
    # past the split's time, which the donor already had from the split itself: a time
    # the config server ticked during the migration (its commit) reached the donor
    assert donor > split_at, (donor, split_at)


@test
def test_pymongo_causal_consistency_through_two_routers(t):
    cfg = t.configsvr()
    ss = [t.shardd("shard%d" % i) for i in range(2)]
    wps = free_ports(2)
    rs = [t.router(cfg.url, "router%d" % i, extra=["--wire-port", str(wps[i])]) for i in range(2)]
    c = rs[0].client()
    for i, s in enumerate(ss):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    c.ok({"shardCollection": DB + ".cc", "key": {"k": 1}, "$db": "admin"})
    p = subprocess.run(["/usr/bin/python3", CAUSAL, "mongodb://127.0.0.1:%d/" % wps[0],
                        "mongodb://127.0.0.1:%d/" % wps[1]], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    for line in p.stdout.splitlines():
        print("  " + line)
    assert p.returncode == 0 and "CAUSAL DONE" in p.stdout and " failed=0" in p.stdout, p.stdout[-3000:]


if __name__ == "__main__":
    main()
