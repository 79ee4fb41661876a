#!/usr/bin/env python3
"""
test_move_entry.py — the entry points of a chunk migration (notes §1.1):
moveChunk and moveRange through the router become _configsvrMoveRange on the config
server, which checks the request (MongoDB's errors for an unknown namespace, an unknown
or draining shard, bounds that are not a chunk, a range across chunks, missing fields,
unknown fields), records it in config.migrations and sends _shardsvrMoveRange to the
donor; valid requests of every shape move the range, with config.migrations empty
afterwards. Also, straight to the config server: _configsvrCommitChunkMigration's reply shape
a crash at hangBeforeCommitMigration leaving the chunks as they were, the recovery fence,
_configsvrLogChange's entry.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

NS = "app.c"
ADMIN = {"$db": "admin"}


def adm(doc):
    d = dict(doc)
    d.update(ADMIN)
    return d


def setup(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    c.ok(adm({"enableSharding": "app", "primaryShard": "shard0"}))
    c.ok(adm({"shardCollection": NS, "key": {"k": 1}}))
    c.ok(adm({"split": NS, "middle": {"k": 50}}))   # [MinKey,50) 1|1, [50,MaxKey) 1|2 on shard0
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": i, "k": i} for i in range(0, 100, 10)]})
    return cl, c


def migrations(c):
    return c.ok({"find": "migrations", "$db": "config", "filter": {}})["cursor"]["firstBatch"]


def chunks(c):
    # config.chunks comes back in (collection, min) order
    return c.ok({"find": "chunks", "$db": "config", "filter": {}})["cursor"]["firstBatch"]


@test
def test_move_entry_points(t):
    cl, c = setup(t)
    # bad input: MongoDB's errors, nothing recorded, nothing sent
    c.err(adm({"moveChunk": "app.none", "find": {"k": 1}, "to": "shard1"}), 118)   # NamespaceNotSharded
    c.err(adm({"moveRange": "app.none", "min": {"k": 1}, "toShard": "shard1"}), 118)
    c.err(adm({"moveChunk": NS, "find": {"k": 1}, "to": "shard9"}), 70)             # ShardNotFound
    c.err(adm({"moveRange": NS, "min": {"k": 0}, "toShard": "shard9"}), 70)
    r = c.err(adm({"moveChunk": NS, "bounds": [{"k": 0}, {"k": 50}], "to": "shard1"}), 72)  # InvalidOptions
    assert "no chunk found" in r["errmsg"], r
    c.err(adm({"moveChunk": NS, "bounds": [{"k": 0}], "to": "shard1"}), 2)
    c.err(adm({"moveRange": NS, "min": {"k": 40}, "max": {"k": 60}, "toShard": "shard1"}), 117)
    c.err(adm({"moveRange": NS, "min": {"j": 40}, "toShard": "shard1"}), 2)          # not the key
    c.err(adm({"moveChunk": NS, "find": {"k": 1}}), 9)                                # missing to
    c.err(adm({"moveRange": NS, "min": {"k": 1}}), 9)                                 # missing toShard
    c.err(adm({"moveChunk": NS, "to": "shard1"}), 2)                                  # neither find nor bounds
    c.err(adm({"moveChunk": NS, "find": {"k": 1}, "bounds": [{"k": 0}, {"k": 50}], "to": "shard1"}), 2)
    c.err(adm({"moveRange": NS, "toShard": "shard1"}), 2)                            # no min, no max
    c.err(adm({"moveChunk": NS, "find": {"x": 1}, "to": "shard1"}), 61)               # ShardKeyNotFound
    c.err(adm({"moveRange": NS, "min": {"k": 1}, "toShard": "shard1", "bogus": 1}), 40415)
    c.err(adm({"_configsvrMoveRange": NS, "min": {"k": 1}, "toShard": "shard1"}), 13)  # internal
    # moving to the owner: ok, nothing to do (as MongoDB)
    c.ok(adm({"moveChunk": NS, "find": {"k": 10}, "to": "shard0"}))
    assert migrations(c) == []

    # valid requests reach the donor and move (each back to shard0 afterwards); config.migrations
    # is empty once each returns
    for req in (
        {"moveChunk": NS, "find": {"k": 10}, "to": "shard1", "_waitForDelete": True,
         "_secondaryThrottle": False, "writeConcern": {"w": 1}, "forceJumbo": False},
        {"moveChunk": NS, "bounds": [{"k": 50}, {"k": {"$maxKey": 1}}], "to": "shard1"},
        {"moveRange": NS, "min": {"k": 60}, "max": {"k": 70}, "toShard": "shard1",
         "waitForDelete": True, "secondaryThrottle": True, "forceJumbo": True},
        {"moveRange": NS, "min": {"k": 60}, "toShard": "shard1"},
        {"moveRange": NS, "max": {"k": 50}, "toShard": "shard1"},
    ):
        c.ok(adm(req))
        assert migrations(c) == [], migrations(c)
        for ch in chunks(c):
            if ch["shard"] == "shard1":
                c.ok(adm({"moveChunk": NS, "bounds": [ch["min"], ch["max"]], "to": "shard0"}))
    # everything is back on shard0
    assert set(d["shard"] for d in chunks(c)) == {"shard0"}
    cfg_log = cl.config.log_text()
    assert "moveRange start ns=app.c from=shard0 to=shard1" in cfg_log, cfg_log[-2000:]

    # a draining recipient is refused before anything is sent
    r = c.ok(adm({"removeShard": "shard1"}))
    assert r["state"] == "started", r
    c.err(adm({"moveChunk": NS, "find": {"k": 10}, "to": "shard1"}), 117)


@test
def test_commit_and_log_change_on_the_wire(t):
    cl, c = setup(t)
    cfg = cl.config.client()
    coll = cfg.ok({"find": "collections", "$db": "config", "filter": {"_id": NS}})["cursor"]["firstBatch"][0]
    before = chunks(c)
    right = before[1]
    assert right["min"] == {"k": 50} and right["shard"] == "shard0", before
    v = {"e": coll["lastmodEpoch"],
         "t": coll["timestamp"], "v": right["lastmod"]}
    commit = {"_configsvrCommitChunkMigration": NS, "$db": "admin", "fromShard": "shard0",
              "toShard": "shard1",
              "migratedChunk": {"min": right["min"], "max": right["max"], "lastmod": right["lastmod"]},
              "fromShardCollectionVersion": v, "validAfter": ts(2000000000, 1)}
    # a crash inside the commit's transaction leaves the chunk where it was
    fp(cfg, "hangBeforeCommitMigration", mode={"times": 1}, action="crash")
    cfg.close()
    p = subprocess.Popen([SHARDCTL, "--host", cl.config.url, "--timeout", "30000", dumps(commit)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rc = cl.config.proc.wait(30)
    finally:
        p.kill()
        p.wait(10)
    assert rc == -9, rc
    cl.config.restart()
    cfg = cl.config.client()
    assert chunks(cfg) == before, (chunks(cfg), before)

    r = cfg.ok(commit)
    sv = r["shardVersion"]
    assert sv["v"] == {"$timestamp": {"t": 2, "i": 1}}, r     # control chunk [MinKey,50) 2|1
    assert sv["e"] == v["e"] and sv["t"] == v["t"], r
    # idempotent
    assert cfg.ok(commit)["shardVersion"] == sv
    after = chunks(c)
    assert [d["shard"] for d in after] == ["shard0", "shard1"], after
    assert after[1]["lastmod"] == {"$timestamp": {"t": 2, "i": 0}}, after
    assert after[1]["history"][0] == {"validAfter": {"$timestamp": {"t": 2000000000, "i": 1}},
                                      "shard": "shard1"}, after
    # a stale generation
    bad = dict(commit)
    bad["fromShardCollectionVersion"] = dict(v, e=oid("0123456789abcdef01234567"))
    cfg.err(bad, 150)

    # the recovery fence on the chunk still on the donor at 2|1: bumped to 3|0
    left = after[0]
    cfg.ok({"_configsvrEnsureChunkVersionIsGreaterThan": 1, "$db": "admin", "nss": NS,
            "collectionUUID": coll["uuid"], "minKey": left["min"], "maxKey": left["max"],
            "version": dict(v, v=left["lastmod"])})
    assert chunks(c)[0]["lastmod"] == {"$timestamp": {"t": 3, "i": 0}}

    cfg.ok({"_configsvrLogChange": 1, "$db": "admin", "what": "moveChunk.from", "ns": NS,
            "shard": "shard0", "details": {"step 1 of 6": 1, "min": {"k": 50}}})
    log = cfg.ok({"find": "changelog", "$db": "config", "filter": {"what": "moveChunk.from"}})
    e = log["cursor"]["firstBatch"][0]
    assert e["server"] == "shard0" and e["shard"] == "shard0" and e["ns"] == NS, e
    assert e["details"]["min"] == {"k": 50}, e


if __name__ == "__main__":
    main()
