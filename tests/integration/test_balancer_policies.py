#!/usr/bin/env python3
"""The balancer's rules end to end with real processes and a fast balancer (200 ms idle,
100 ms throttle; configsvr/balancer.c, bal_policy.c): the dataSize policy carves
chunk-sized pieces (moveRange with only min) until largest − smallest < 3 × chunk size
while a writer inserts, nothing lost or doubled; removeShard of a primary shard is
drained by the balancer alone (reason draining), then movePrimary and completed, a
second router with the old routing still reads everything; a zone pulls the chunks of
its range to the zone's shard (reason zoneViolation); with 4 shards no shard is in two
migrations of one round and ⌊n/2⌋ = 2 run in parallel."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import MINKEY, main, test, wait_until  # noqa: E402

CFG_FLAGS = ["--balancer-idle-ms", "200", "--balancer-throttle-ms", "100"]
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]


def adm(doc):
    d = dict(doc)
    d["$db"] = "admin"
    return d


def fast_cluster(t, nshards, routers=1):
    """A config server with a fast balancer, stopped until the test is set up."""
    cfg = t.configsvr(extra=CFG_FLAGS)
    ss = [t.shardd("shard%d" % i, extra=SHARD_FLAGS) for i in range(nshards)]
    rs = [t.router(cfg.url, "router%d" % i) for i in range(routers)]
    c = rs[0].client()
    c.ok(adm({"balancerStop": 1}))
    for i, s in enumerate(ss):
        c.ok(adm({"addShard": s.url, "name": "shard%d" % i}))
    return cfg, ss, rs, c


def settings(c, _id, update):
    c.ok({"update": "settings", "$db": "config",
          "updates": [{"q": {"_id": _id}, "u": update, "upsert": True}]})


def chunks(c, ns):
    return c.ok({"getRoutingTable": ns, "$db": "admin"})["chunks"]


def per_shard(c, ns, names):
    n = {s: 0 for s in names}
    for ch in chunks(c, ns):
        n[ch["shard"]] = n.get(ch["shard"], 0) + 1
    return n


def rounds(c, query=None):
    q = {"what": "balancer.round"}
    q.update(query or {})
    return c.ok({"find": "actionlog", "$db": "config", "filter": q,
                 "batchSize": 10000})["cursor"]["firstBatch"]


def moves_of(r):
    """A round's migrations; a round logged with balancing off (stopped) has none."""
    return r["details"].get("migrations", [])


def migrations(c):
    return [m for r in rounds(c) for m in moves_of(r)]


def idle_round_after(c, n_before):
    """True when a round newer than the first n_before rounds moved nothing."""
    rs = rounds(c)
    return any(r["details"].get("candidateChunks") == 0 for r in rs[n_before:])


def key_lo(v):
    return float("-inf") if v == MINKEY else v


def key_hi(v):
    return float("inf") if v == {"$maxKey": 1} else v


def owns(ch, field, k):
    return key_lo(ch["min"][field]) <= k < key_hi(ch["max"][field])


def data_size(shard, ns):
    db = ns.split(".")[0]
    return shard.client().ok({"dataSize": ns, "$db": db})["size"]


# ---- 1. the dataSize policy ------------------------------------------------------------------

CHUNK = 64 * 1024


class Inserter(threading.Thread):
    """Inserts new documents through the router; remembers the acknowledged ones."""

    def __init__(self, router, stop):
        super().__init__(daemon=True)
        self.c = router.client()
        self.stop = stop
        self.acked = {}   # _id -> k
        self.errors = []

    def run(self):
        n = 0
        while not self.stop.is_set():
            k = (n * 7919) % 3000
            _id = "w%d" % n
            r = self.c.cmd({"insert": "c", "$db": "ds", "documents": [{"_id": _id, "k": k, "v": 1}]})
            if r.get("ok") == 1 and not r.get("writeErrors"):
                self.acked[_id] = k
            else:
                self.errors.append(r)
            n += 1
            time.sleep(0.01)


@test
def test_data_size_policy_carves_min_only_until_within_three_chunks(t):
    cfg, ss, rs, c = fast_cluster(t, 3)
    names = ["shard0", "shard1", "shard2"]
    settings(c, "chunksize", {"$set": {"valueBytes": CHUNK}})
    # no auto-split: the one chunk is carved by the donor (moveRange with only min)
    settings(c, "autosplit", {"$set": {"enabled": False}})
    settings(c, "balancer", {"$set": {"policy": "dataSize", "_waitForDelete": True}})
    c.ok(adm({"enableSharding": "ds", "primaryShard": "shard0"}))
    c.ok(adm({"shardCollection": "ds.c", "key": {"k": 1}}))
    pad = "p" * 300
    for b in range(6):
        c.ok({"insert": "c", "$db": "ds",
              "documents": [{"_id": i, "k": i, "v": i % 10, "pad": pad} for i in range(b * 500, b * 500 + 500)]})
    loaded_sum = sum(i % 10 for i in range(3000))
    sizes = [data_size(s, "ds.c") for s in ss]
    assert sizes[0] > 3 * 3 * CHUNK and sizes[1] == sizes[2] == 0, sizes

    def balanced():
        sz = [data_size(s, "ds.c") for s in ss]
        return max(sz) - min(sz) < 3 * CHUNK

    # the writer inserts through the whole balancing
    stop = threading.Event()
    w = Inserter(rs[0], stop)
    w.start()
    c.ok(adm({"balancerStart": 1}))
    t0 = time.monotonic()
    wait_until(lambda: len([m for m in migrations(c) if m["ok"]]) >= 3 and balanced(), 45,
               "dataSize within 3 x chunk size", interval=0.3)
    stop.set()
    w.join(10)
    assert not w.errors, w.errors[:3]
    assert len(w.acked) > 0
    wait_until(balanced, 30, "dataSize within 3 x chunk size after the writer", interval=0.3)
    n0 = len(rounds(c))
    wait_until(lambda: idle_round_after(c, n0), 20, "a round with nothing to move", interval=0.2)
    sizes = [data_size(s, "ds.c") for s in ss]
    print("  balanced in %.1fs, sizes %s, chunks %s, %d inserts while balancing"
          % (time.monotonic() - t0, sizes, per_shard(c, "ds.c", names), len(w.acked)), flush=True)
    assert max(sizes) - min(sizes) < 3 * CHUNK, sizes
    assert min(sizes) > 0, sizes

    ms = migrations(c)
    assert len(ms) >= 3, ms
    for m in ms:
        assert m["ok"], m
        assert m["reason"] == "dataSizeImbalance", m
        assert "max" not in m, m                 # moveRange with only min
    # carved: more chunks than the one we started with, each shard owns some
    n = per_shard(c, "ds.c", names)
    assert all(v > 0 for v in n.values()), n
    rds = [r for r in rounds(c) if moves_of(r)]
    assert all(r["details"]["policy"] == "dataSize" for r in rds), rds

    # nothing lost: count and sum through the router
    expect = {i: i % 10 for i in range(3000)}
    for _id in w.acked:
        expect[_id] = 1
    assert c.ok({"count": "c", "$db": "ds"})["n"] == len(expect)
    docs = c.find_all("c", "ds", {}, batchSize=5000)
    assert len(docs) == len(expect), (len(docs), len(expect))
    assert sum(d["v"] for d in docs) == loaded_sum + len(w.acked)
    # each shard's owned documents (by the routing table): every one exactly once
    rt = chunks(c, "ds.c")
    seen = {}
    for i, s in enumerate(ss):
        mine = [ch for ch in rt if ch["shard"] == names[i]]
        for d in s.client().find_all("c", "ds", {}, batchSize=5000):
            if any(owns(ch, "k", d["k"]) for ch in mine):
                assert d["_id"] not in seen, "document %r owned twice" % d["_id"]
                seen[d["_id"]] = d["v"]
    assert seen == expect, (len(seen), len(expect))


# ---- 2. draining by the balancer, a primary shard ---------------------------------------------

@test
def test_balancer_drains_a_primary_shard_and_remove_shard_completes(t):
    cfg, ss, rs, c = fast_cluster(t, 3, routers=2)
    c2 = rs[1].client()
    c.ok(adm({"enableSharding": "dr", "primaryShard": "shard2"}))
    c.ok({"insert": "u", "$db": "dr", "documents": [{"_id": i, "x": i} for i in range(500)]})
    c.ok(adm({"shardCollection": "dr.s", "key": {"k": 1}}))
    for m in range(100, 600, 100):
        c.ok(adm({"split": "dr.s", "middle": {"k": m}}))
    c.ok({"insert": "s", "$db": "dr", "documents": [{"_id": i, "k": i, "v": 2} for i in range(600)]})
    assert per_shard(c, "dr.s", ["shard2"]) == {"shard2": 6}
    # the second router caches the database (primary shard2) and the routing table
    assert len(c2.find_all("u", "dr")) == 500 and len(c2.find_all("s", "dr")) == 600

    r = c.ok(adm({"removeShard": "shard2"}))
    assert r["state"] == "started" and r["dbsToMove"] == ["dr"], r
    settings(c, "balancer", {"$set": {"_waitForDelete": True}})
    c.ok(adm({"balancerStart": 1}))
    seen = []
    r = None

    def drained():
        nonlocal r
        r = c.ok(adm({"removeShard": "shard2"}))
        assert r["state"] == "ongoing", r
        seen.append(r["remaining"]["chunks"])
        return r["remaining"]["chunks"] == 0
    wait_until(drained, 45, "shard2 drained by the balancer", interval=0.1)
    print("  remaining chunks seen %s" % sorted(set(seen), reverse=True), flush=True)
    assert seen == sorted(seen, reverse=True), seen            # only ever dropping
    assert len(set(seen)) >= 2 and max(seen) > 0, seen
    assert r["remaining"]["dbs"] == 1 and r["dbsToMove"] == ["dr"], r
    # the balancer did it: no moveChunk by hand, rounds with reason draining
    # (a round is logged once its migrations ended: after the last chunk's commit)
    wait_until(lambda: len([m for m in migrations(c) if m["reason"] == "draining"]) >= 6, 20,
               "the draining rounds logged", interval=0.1)
    dm = [m for m in migrations(c) if m["reason"] == "draining"]
    assert len(dm) == 6 and all(m["from"] == "shard2" and m["ok"] for m in dm), dm
    assert per_shard(c, "dr.s", ["shard0", "shard1", "shard2"])["shard2"] == 0

    c.ok(adm({"movePrimary": "dr", "to": "shard0"}))
    r = c.ok(adm({"removeShard": "shard2"}))
    assert r["state"] == "completed", r
    assert [s["_id"] for s in c.ok(adm({"listShards": 1}))["shards"]] == ["shard0", "shard1"]
    sh = c.ok({"find": "shards", "$db": "config", "filter": {}})["cursor"]["firstBatch"]
    assert sorted(s["_id"] for s in sh) == ["shard0", "shard1"], sh
    # every document through both routers (the second one had the old state)
    for cl in (c, c2):
        assert sorted(d["_id"] for d in cl.find_all("u", "dr")) == list(range(500))
        got = cl.find_all("s", "dr")
        assert sorted(d["_id"] for d in got) == list(range(600)) and sum(d["v"] for d in got) == 1200


# ---- 3. zones pull their ranges --------------------------------------------------------------

@test
def test_zone_pulls_its_range_to_the_zone_shard(t):
    cfg, ss, rs, c = fast_cluster(t, 3)
    names = ["shard0", "shard1", "shard2"]
    settings(c, "balancer", {"$set": {"_waitForDelete": True}})
    c.ok(adm({"enableSharding": "z", "primaryShard": "shard0"}))
    c.ok(adm({"shardCollection": "z.c", "key": {"k": 1}}))
    # Split at the zone's bounds (100, 300) by hand: zone-boundary splits by the balancer
    # are being built separately; 200 makes two chunks inside the range.
    for m in (100, 200, 300, 400):
        c.ok(adm({"split": "z.c", "middle": {"k": m}}))
    c.ok({"insert": "c", "$db": "z", "documents": [{"_id": i, "k": i} for i in range(500)]})
    c.ok(adm({"addShardToZone": "shard2", "zone": "Z"}))
    c.ok(adm({"updateZoneKeyRange": "z.c", "min": {"k": 100}, "max": {"k": 300}, "zone": "Z"}))
    c.ok(adm({"balancerStart": 1}))

    def in_zone(ch):
        return key_lo(ch["min"]["k"]) >= 100 and key_hi(ch["max"]["k"]) <= 300

    def pulled():
        return all(ch["shard"] == "shard2" for ch in chunks(c, "z.c") if in_zone(ch))
    wait_until(pulled, 40, "zone chunks on shard2", interval=0.2)
    n0 = len(rounds(c))
    wait_until(lambda: idle_round_after(c, n0), 30, "a round with nothing to move", interval=0.2)
    rt = chunks(c, "z.c")
    print("  chunks %s" % [(ch["min"]["k"], ch["shard"]) for ch in rt], flush=True)
    assert [ch["shard"] for ch in rt if in_zone(ch)] == ["shard2", "shard2"], rt
    zm = [m for m in migrations(c) if m["reason"] == "zoneViolation"]
    assert sorted(m["min"]["k"] for m in zm) == [100, 200], zm
    assert all(m["to"] == "shard2" and m["from"] == "shard0" and m["ok"] for m in zm), zm
    # the range's documents are on shard2 only
    q = {"k": {"$gte": 100, "$lt": 300}}
    on = [s.client().ok({"count": "c", "$db": "z", "query": q})["n"] for s in ss]
    assert on == [0, 0, 200], on
    assert c.ok({"count": "c", "$db": "z"})["n"] == 500
    assert per_shard(c, "z.c", names)["shard2"] >= 2


# ---- 4. one migration per shard per round, ⌊n/2⌋ in parallel ----------------------------------

@test
def test_one_migration_per_shard_per_round_and_half_in_parallel(t):
    cfg, ss, rs, c = fast_cluster(t, 4)
    names = ["shard0", "shard1", "shard2", "shard3"]
    # two collections, 8 chunks each, on different shards: two donors at once
    for db, primary in (("pa", "shard0"), ("pb", "shard1")):
        c.ok(adm({"enableSharding": db, "primaryShard": primary}))
        c.ok(adm({"shardCollection": db + ".c", "key": {"k": 1}}))
        for m in range(10, 80, 10):
            c.ok(adm({"split": db + ".c", "middle": {"k": m}}))
        c.ok({"insert": "c", "$db": db, "documents": [{"_id": i, "k": i} for i in range(80)]})
    c.ok(adm({"balancerStart": 1}))

    def balanced():
        return all(max(n.values()) - min(n.values()) < 2
                   for n in (per_shard(c, ns, names) for ns in ("pa.c", "pb.c")))
    wait_until(balanced, 45, "both collections balanced on 4 shards", interval=0.2)
    moving = [r for r in rounds(c) if moves_of(r)]
    sizes = [len(moves_of(r)) for r in moving]
    print("  migrations per round %s" % sizes, flush=True)
    for r in moving:
        ms = moves_of(r)
        used = [m["from"] for m in ms] + [m["to"] for m in ms]
        assert len(used) == len(set(used)), ("a shard in two migrations of one round", ms)
        assert len(ms) <= 2 and all(m["ok"] for m in ms), ms
    assert 2 in sizes, sizes
    for db in ("pa", "pb"):
        assert sorted(d["_id"] for d in c.find_all("c", db)) == list(range(80))


if __name__ == "__main__":
    main()
