#!/usr/bin/env python3
"""The balancer with real processes (configsvr/balancer.c, bal_policy.c): a ranged
collection loaded on its primary shard while writers run is auto-split and balanced
within the rule with nothing lost; the activeWindow and balancerStop keep it still;
balancerStart resumes (a 4th shard gets its share); every round is in config.actionlog;
the balancer lock is in config.locks and a second config server on the same dbpath is
refused."""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import BIN, free_ports, main, test, wait_until  # noqa: E402

DB = "app"
NS = "app.c"
CFG_FLAGS = ["--balancer-idle-ms", "200", "--balancer-throttle-ms", "100"]
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]


def counts(c, shards):
    chs = c.ok({"getRoutingTable": NS, "$db": "admin"})["chunks"]
    n = {s: 0 for s in shards}
    for ch in chs:
        n[ch["shard"]] = n.get(ch["shard"], 0) + 1
    return n


def commits(c):
    r = c.ok({"count": "changelog", "$db": "config", "query": {"what": "moveChunk.commit"}})
    return r["n"]


def rounds(c, query=None):
    q = {"what": "balancer.round"}
    q.update(query or {})
    return c.ok({"find": "actionlog", "$db": "config", "filter": q, "batchSize": 10000})["cursor"]["firstBatch"]


def set_balancer(c, update):
    c.ok({"update": "settings", "$db": "config",
          "updates": [{"q": {"_id": "balancer"}, "u": update, "upsert": True}]})


class Writer(threading.Thread):
    """Inserts new documents and updates its own, remembering what was acknowledged."""

    def __init__(self, router, wid, stop):
        super().__init__(daemon=True)
        self.c = router.client()
        self.wid = wid
        self.stop = stop
        self.acked = {}    # _id -> last acknowledged v
        self.errors = []

    def run(self):
        n = 0
        while not self.stop.is_set():
            _id = "w%d-%d" % (self.wid, n)
            k = (n * 7919 + self.wid * 104729) % 20000
            r = self.c.cmd({"insert": "c", "$db": DB, "documents": [{"_id": _id, "k": k, "v": 0}]})
            if r.get("ok") == 1 and not r.get("writeErrors"):
                self.acked[_id] = 0
            else:
                self.errors.append(r)
            if n % 3 == 2:
                old = "w%d-%d" % (self.wid, n - 2)
                if old in self.acked:
                    kk = ((n - 2) * 7919 + self.wid * 104729) % 20000
                    r = self.c.cmd({"update": "c", "$db": DB,
                                    "updates": [{"q": {"k": kk, "_id": old}, "u": {"$set": {"v": n}}}]})
                    if r.get("ok") == 1 and r.get("nModified") == 1:
                        self.acked[old] = n
                    else:
                        self.errors.append(r)
            n += 1
            time.sleep(0.005)


def spread(n):
    return max(n.values()) - min(n.values())


@test
def test_balancer_splits_and_balances_with_writers_window_stop_start(t):
    cfg = t.configsvr(extra=CFG_FLAGS)
    ss = [t.shardd("shard%d" % i, extra=SHARD_FLAGS) for i in range(4)]
    r = t.router(cfg.url)
    c = r.client()
    for i in range(3):
        c.ok({"addShard": ss[i].url, "name": "shard%d" % i, "$db": "admin"})
    names = ["shard0", "shard1", "shard2"]
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    # the balancer lock, taken at start-up
    locks = c.ok({"find": "locks", "$db": "config", "filter": {"_id": "balancer"}})["cursor"]["firstBatch"]
    assert locks and locks[0]["state"] == 2 and locks[0]["process"] == cfg.url, locks
    c.ok({"update": "settings", "$db": "config",
          "updates": [{"q": {"_id": "chunksize"}, "u": {"$set": {"valueBytes": 128 * 1024}}, "upsert": True}]})
    # an activeWindow that excludes now: nothing is split or moved
    now = time.localtime()
    a = (now.tm_hour + 2) % 24
    set_balancer(c, {"$set": {"activeWindow": {"start": "%02d:00" % a, "stop": "%02d:30" % a}}})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    for b in range(20):
        c.ok({"insert": "c", "$db": DB,
              "documents": [{"_id": b * 1000 + i, "k": b * 1000 + i, "v": 0} for i in range(1000)]})
    wait_until(lambda: rounds(c, {"details.why": "outside activeWindow"}), 10, "an off round logged")
    time.sleep(1.0)
    assert sum(counts(c, names).values()) == 1, counts(c, names)
    assert commits(c) == 0

    # the window goes: auto-split, then balance, while two writers run
    stop = threading.Event()
    ws = [Writer(r, i, stop) for i in range(2)]
    for w in ws:
        w.start()
    set_balancer(c, {"$unset": {"activeWindow": 1}})

    def balanced():
        n = counts(c, names)
        return sum(n.values()) >= 10 and spread(n) < 2
    t0 = time.monotonic()
    wait_until(balanced, 45, "auto-split and balanced", interval=0.3)
    print("  balanced in %.1fs" % (time.monotonic() - t0), flush=True)
    time.sleep(0.5)
    stop.set()
    for w in ws:
        w.join(10)
    st = c.ok({"balancerStatus": 1})
    assert st["mode"] == "full" and st["numBalancerRounds"] > 0, st
    n = counts(c, names)
    print("  chunks per shard %s, moves %d" % (n, commits(c)), flush=True)
    assert commits(c) >= 2
    # every acknowledged write exactly once, with its last acknowledged value
    docs = c.find_all("c", DB, {}, batchSize=2000)
    seen = {}
    for d in docs:
        assert d["_id"] not in seen, "duplicate %r" % d["_id"]
        seen[d["_id"]] = d
    for i in range(20000):
        assert i in seen, "loaded document %d lost" % i
    for w in ws:
        assert not w.errors, w.errors[:3]
        for _id, v in w.acked.items():
            assert _id in seen, "acknowledged insert %s lost" % _id
            assert seen[_id]["v"] == v, (_id, seen[_id], v)
    assert len(seen) == 20000 + sum(len(w.acked) for w in ws)
    rs = rounds(c, {"details.chunksMoved": {"$gt": 0}})
    assert rs, "no balancer.round with moves"
    reasons = {m["reason"] for x in rs for m in x["details"]["migrations"]}
    assert "chunksImbalance" in reasons, reasons
    assert rounds(c, {"details.chunksSplit": {"$gt": 0}}), "no balancer.round with splits"

    # stopped: a new empty shard gets nothing
    c.ok({"balancerStop": 1, "$db": "admin"})
    assert c.ok({"balancerStatus": 1})["mode"] == "off"
    before = commits(c)
    c.ok({"addShard": ss[3].url, "name": "shard3", "$db": "admin"})
    names.append("shard3")
    time.sleep(1.5)
    assert commits(c) == before
    assert counts(c, names)["shard3"] == 0
    # started again: the 4th shard is filled to within the rule
    c.ok({"balancerStart": 1, "$db": "admin"})
    t0 = time.monotonic()
    wait_until(lambda: spread(counts(c, names)) < 2, 45, "4 shards balanced", interval=0.3)
    print("  4 shards balanced in %.1fs, moves %d" % (time.monotonic() - t0, commits(c) - before), flush=True)
    assert commits(c) > before


@test
def test_second_configsvr_on_the_same_dbpath_is_refused(t):
    cfg = t.configsvr(extra=CFG_FLAGS)
    c = cfg.client()
    c.ok({"ping": 1})
    port = free_ports(1)[0]
    argv = [os.path.join(BIN, "configsvr"), "--port", str(port), "--dbpath", cfg.dbpath] + CFG_FLAGS
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20)
    assert r.returncode != 0, "a second configsvr started on the same dbpath"
    assert "code=98" in r.stderr and "unable to lock" in r.stderr, r.stderr[-800:]
    c.ok({"ping": 1})   # the first one is untouched
    # balancerStop / balancerStart on the config server itself
    c.ok({"balancerStop": 1})
    assert c.ok({"balancerStatus": 1})["mode"] == "off"
    c.ok({"balancerStart": 1})
    assert c.ok({"balancerStatus": 1})["mode"] == "full"
    # settings validation: policy, valueBytes bounds
    for q, u in (({"_id": "balancer"}, {"$set": {"policy": "random"}}),
                 ({"_id": "chunksize"}, {"$set": {"valueBytes": 5}})):
        r = c.ok({"update": "settings", "$db": "config", "updates": [{"q": q, "u": u, "upsert": True}]})
        assert r["writeErrors"][0]["codeName"] == "BadValue", r
    c.ok({"update": "settings", "$db": "config",
          "updates": [{"q": {"_id": "balancer"}, "u": {"$set": {"policy": "dataSize"}}, "upsert": True}]})


if __name__ == "__main__":
    main()
