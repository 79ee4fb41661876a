#!/usr/bin/env python3
"""The balancer's chunk surgery and caps with real processes (configsvr/bal_jumbo.c,
cmd_jumbo.c, cmd_shards.c; notes §4.3, §4.6): a chunk a zone range cuts is split at the
range's bounds in the next round and the zone's piece moves; a chunk too big to migrate
(ChunkTooBig) with distinct keys is split at one autoSplitVector point and then moves; one
whose documents share a single shard-key value is flagged jumbo:true without a version
change, skipped by later rounds, cleared by clearJumboFlag (MongoDB's errors; the version
bumped), moved by hand with forceJumbo; a shard added with maxSize and data beyond it
receives nothing while an empty one fills.

Rounds are driven one at a time: the config server keeps its hour-long idle interval
and balancerStart wakes the balancer for one round (a round that moved chunks is
followed by more after the short throttle)."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import MINKEY, MAXKEY, main, test, wait_until  # noqa: E402

DB = "app"
NS = "app.c"
CFG_FLAGS = ["--balancer-throttle-ms", "100"]
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]
PAD = "x" * 1000


def adm(doc):
    d = dict(doc)
    d["$db"] = "admin"
    return d


def rounds(c, query=None):
    q = {"what": "balancer.round"}
    q.update(query or {})
    return c.ok({"find": "actionlog", "$db": "config", "filter": q, "batchSize": 10000})["cursor"]["firstBatch"]


def chunks(c):
    return c.ok(adm({"getRoutingTable": NS}))["chunks"]


def chunk_of(c, k):
    """The routing-table chunk whose min is {k: k}."""
    for ch in chunks(c):
        if ch["min"] == {"k": k}:
            return ch
    return None


def one_round(c):
    """Wakes the balancer and waits for the round it runs to be logged."""
    n = len(rounds(c))
    c.ok(adm({"balancerStart": 1}))
    wait_until(lambda: len(rounds(c)) > n, 20, "a balancer round")


def setup(t, nshards, chunk_bytes=None, add_opts=None):
    """Config server, nshards shards, a router; the balancer stopped while the test
    builds its collection; auto-split off so that only the rules under test split."""
    cfg = t.configsvr(extra=CFG_FLAGS)
    ss = [t.shardd("shard%d" % i, extra=SHARD_FLAGS) for i in range(nshards)]
    r = t.router(cfg.url)
    c = r.client()
    c.ok(adm({"balancerStop": 1}))
    for i in range(nshards):
        doc = {"addShard": ss[i].url, "name": "shard%d" % i}
        doc.update((add_opts or {}).get(i, {}))
        c.ok(adm(doc))
    c.ok({"update": "settings", "$db": "config",
          "updates": [{"q": {"_id": "autosplit"}, "u": {"$set": {"enabled": False}}, "upsert": True}]})
    if chunk_bytes:
        c.ok({"update": "settings", "$db": "config",
              "updates": [{"q": {"_id": "chunksize"}, "u": {"$set": {"valueBytes": chunk_bytes}},
                           "upsert": True}]})
    c.ok(adm({"enableSharding": DB, "primaryShard": "shard0"}))
    c.ok(adm({"shardCollection": NS, "key": {"k": 1}}))
    return c


def migrations(c):
    return [m for r in rounds(c) for m in r["details"].get("migrations", [])]


@test
def test_zone_boundary_split_then_zone_moves(t):
    c = setup(t, 2)
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(0, 300, 10)]})
    c.ok(adm({"addShardToZone": "shard1", "zone": "Z"}))
    c.ok(adm({"updateZoneKeyRange": NS, "min": {"k": 100}, "max": {"k": 200}, "zone": "Z"}))
    assert len(chunks(c)) == 1
    one_round(c)
    zs = [s for r in rounds(c) for s in r["details"].get("splits", []) if s.get("reason") == "zoneBoundary"]
    assert len(zs) == 1, zs
    assert zs[0]["points"] == [{"k": 100}, {"k": 200}], zs[0]
    assert zs[0]["min"] == {"k": MINKEY} and zs[0]["max"] == {"k": MAXKEY} and zs[0]["shard"] == "shard0"
    bounds = [(ch["min"], ch["max"]) for ch in chunks(c)]
    assert bounds == [({"k": MINKEY}, {"k": 100}), ({"k": 100}, {"k": 200}),
                      ({"k": 200}, {"k": MAXKEY})], bounds
    # the zone's piece goes to the zone's shard (same round or the next)
    wait_until(lambda: chunk_of(c, 100)["shard"] == "shard1", 20, "zone chunk on shard1")
    assert chunk_of(c, 200)["shard"] == "shard0"
    assert c.ok({"count": "c", "$db": DB})["n"] == 30
    # a later round finds nothing to cut
    one_round(c)
    assert len(chunks(c)) == 3


@test
def test_too_big_chunk_is_split_then_moves(t):
    c = setup(t, 2, chunk_bytes=16 * 1024)
    for m in (1000, 2000, 3000):
        c.ok(adm({"split": NS, "middle": {"k": m}}))
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "pad": PAD} for i in range(200)]})
    one_round(c)
    ms = migrations(c)
    assert ms and ms[0]["min"] == {"k": MINKEY} and ms[0]["code"] == 153, ms
    assert "splitAfterTooBig" in ms[0] and "markedJumbo" not in ms[0], ms[0]
    p = ms[0]["splitAfterTooBig"]["k"]
    assert 0 < p < 200, p
    first = [ch for ch in chunks(c) if ch["min"] == {"k": MINKEY}][0]
    assert first["max"] == {"k": p} and not first.get("jumbo"), first
    # the next round moves the first piece (then balancing goes on by itself)
    one_round(c)
    wait_until(lambda: [ch for ch in chunks(c) if ch["min"] == {"k": MINKEY}][0]["shard"] == "shard1",
               20, "the first piece moved")
    assert not any(ch.get("jumbo") for ch in chunks(c))
    assert c.ok({"count": "c", "$db": DB})["n"] == 200


@test
def test_one_key_chunk_marked_jumbo_skipped_cleared_forced(t):
    c = setup(t, 2, chunk_bytes=16 * 1024)
    for m in (1000, 2000):
        c.ok(adm({"split": NS, "middle": {"k": m}}))
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": 5, "pad": PAD} for i in range(200)]})
    before = [ch for ch in chunks(c) if ch["min"] == {"k": MINKEY}][0]
    one_round(c)
    ms = migrations(c)
    assert len(ms) == 1 and ms[0]["code"] == 153 and ms[0].get("markedJumbo") is True, ms
    assert "splitAfterTooBig" not in ms[0]
    after = [ch for ch in chunks(c) if ch["min"] == {"k": MINKEY}][0]
    assert after.get("jumbo") is True and after["shard"] == "shard0", after
    assert after["lastmod"] == before["lastmod"], (before, after)   # no version bump
    raw = c.ok({"find": "chunks", "$db": "config", "filter": {"jumbo": True}})["cursor"]["firstBatch"]
    assert len(raw) == 1 and raw[0]["min"] == {"k": MINKEY}, raw
    # the next round skips it and moves another chunk
    one_round(c)
    wait_until(lambda: len([m for m in migrations(c) if m["ok"]]) >= 1, 20, "a move")
    moved = [m for m in migrations(c) if m["ok"]]
    assert all(m["min"] != {"k": MINKEY} for m in moved), moved
    jumbo = [ch for ch in chunks(c) if ch["min"] == {"k": MINKEY}][0]
    assert jumbo["shard"] == "shard0" and jumbo.get("jumbo") is True, jumbo

    # clearJumboFlag: MongoDB's errors
    b = [{"k": MINKEY}, {"k": 1000}]
    c.err(adm({"clearJumboFlag": NS}), 72)                                     # InvalidOptions
    c.err(adm({"clearJumboFlag": NS, "find": {"k": 5}, "bounds": b}), 72)
    c.err(adm({"clearJumboFlag": NS, "bounds": [{"k": MINKEY}]}), 72)
    c.err(adm({"clearJumboFlag": NS, "find": {"x": 5}}), 51260)
    c.err(adm({"clearJumboFlag": NS, "bounds": [{"k": MINKEY}, {"k": 999}]}), 51261)
    c.err(adm({"clearJumboFlag": "app.none", "find": {"k": 5}}), 118)          # NamespaceNotSharded
    # a chunk that is not jumbo: ok, nothing changes
    other = chunk_of(c, 1000)
    c.ok(adm({"clearJumboFlag": NS, "bounds": [other["min"], other["max"]]}))
    assert chunk_of(c, 1000)["lastmod"] == other["lastmod"]
    # the jumbo one: cleared, the collection's next major version
    tops = max((ch["lastmod"]["$timestamp"]["t"] for ch in chunks(c)))
    c.ok(adm({"clearJumboFlag": NS, "find": {"k": 5}}))
    cleared = [ch for ch in chunks(c) if ch["min"] == {"k": MINKEY}][0]
    assert not cleared.get("jumbo"), cleared
    assert cleared["lastmod"]["$timestamp"] == {"t": tops + 1, "i": 0}, (tops, cleared)
    # the balancer tries it again (an imbalance made by hand) and flags it again
    c.ok(adm({"balancerStop": 1}))
    c.ok(adm({"moveChunk": NS, "find": {"k": 1000}, "to": "shard0"}))
    n = len(migrations(c))
    one_round(c)
    again = migrations(c)[n:]
    assert any(m.get("markedJumbo") for m in again), again
    c.ok(adm({"balancerStop": 1}))
    # moved by hand: refused without forceJumbo, moved with it, documents intact
    c.err(adm({"moveChunk": NS, "find": {"k": 5}, "to": "shard1"}))
    c.ok(adm({"moveChunk": NS, "find": {"k": 5}, "to": "shard1", "forceJumbo": True}))
    assert [ch for ch in chunks(c) if ch["min"] == {"k": MINKEY}][0]["shard"] == "shard1"
    assert c.ok({"count": "c", "$db": DB})["n"] == 200


@test
def test_shard_at_max_size_receives_nothing(t):
    # shard1: maxSize 1 MB and ~1.5 MB of another database's data; shard2: empty, no cap
    c = setup(t, 3, add_opts={1: {"maxSize": 1}})
    shards = {s["_id"]: s for s in c.ok(adm({"listShards": 1}))["shards"]}
    assert shards["shard1"]["maxSize"] == 1 and "maxSize" not in shards["shard2"], shards
    c.ok(adm({"enableSharding": "big", "primaryShard": "shard1"}))
    for b in range(3):
        c.ok({"insert": "u", "$db": "big", "documents": [{"_id": b * 500 + i, "pad": PAD} for i in range(500)]})
    for m in (1000, 2000, 3000):
        c.ok(adm({"split": NS, "middle": {"k": m}}))
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i * 10} for i in range(400)]})

    def per_shard():
        n = {"shard0": 0, "shard1": 0, "shard2": 0}
        for ch in chunks(c):
            n[ch["shard"]] += 1
        return n
    one_round(c)
    wait_until(lambda: per_shard()["shard2"] == 2, 20, "shard2 filled")
    time.sleep(0.5)
    assert per_shard() == {"shard0": 2, "shard1": 0, "shard2": 2}, per_shard()
    assert all(m["to"] == "shard2" for m in migrations(c)), migrations(c)
    # maxSize validation
    c.err(adm({"addShard": "127.0.0.1:1", "maxSize": -1}), 2)
    c.err(adm({"addShard": "127.0.0.1:1", "maxSize": 1.5}), 2)


if __name__ == "__main__":
    main()
