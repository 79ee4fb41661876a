#!/usr/bin/env python3
"""
test_configsvr_crash.py — crash safety of the config server's metadata operations, with
real processes (one bin/configsvr, two bin/shardd on 127.0.0.1).

For each failpoint of configsvr.h (docs/protocol.md, "Config server: failpoints"):
action "crash" makes the config server SIGKILL itself exactly at that step; we restart it
on the same --dbpath and check that
  - the catalog is consistent: every collection's chunks (read from config.chunks) tile
    MinKey→MaxKey with no gap or overlap, lastmods are unique, getRoutingTable shows
    the same chunks, and every chunk's shard is in config.shards;
  - the operation is either fully applied or not at all (which one the step decides:
    before the catalog commit → not at all, after it → fully), and versions only grew;
  - retrying the same operation then succeeds (or, for a split already committed, gives
    a clear error and changes nothing).
Action "error" at the before-commit steps gives a clean error reply and changes nothing.
Each case prints what it proved.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

FAILPOINT_ENABLED = 192


def setup(t, add=2):
    cfg = t.configsvr()
    shards = [t.shardd("s%d" % i) for i in range(2)]
    c = cfg.client()
    for i in range(add):
        assert c.ok({"addShard": shards[i].url})["shardAdded"] == "shard%d" % i
    return cfg, shards, c


def arm(c, point, action):
    c.ok({"configureFailPoint": point, "mode": {"times": 1}, "data": {"action": action}})


def crash_at(cfg, c, point, cmd):
    """Arms point with action crash, sends cmd, checks the config server died there by
    SIGKILL, and restarts it on the same dbpath. Returns a client of the new process."""
    arm(c, point, "crash")
    c.close()
    # A one-shot shardctl: its request is never answered, and we end it ourselves before
    # the restart so that NNG cannot resend it to the new process.
    p = subprocess.Popen([SHARDCTL, "--host", cfg.url, "--timeout", "30000", dumps(cmd)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        rc = cfg.proc.wait(30)
    finally:
        p.kill()
        p.wait(10)
    assert rc == -9, "config server exited with %s, not SIGKILL" % rc
    assert ("failpoint crash name=%s " % point) in cfg.log_text(), "did not crash at %s" % point
    cfg.restart()
    return cfg.client()


def key_rank(v):
    """Order of the shard-key values these tests use: MinKey < numbers < MaxKey."""
    if isinstance(v, dict) and "$minKey" in v:
        return (0, 0)
    if isinstance(v, dict) and "$maxKey" in v:
        return (2, 0)
    if isinstance(v, dict) and "$numberLong" in v:
        return (1, int(v["$numberLong"]))
    assert isinstance(v, (int, float)), v
    return (1, v)


def bound(doc):
    return tuple(key_rank(v) for v in doc.values())


def lastmod(ch):
    return (ch["lastmod"]["$timestamp"]["t"], ch["lastmod"]["$timestamp"]["i"])


def catalog(c):
    """Checks the whole catalog and returns {ns: [(min, max, shard, lastmod), ...]}."""
    shards = {s["_id"] for s in c.find_all("shards", "config")}
    colls = c.find_all("collections", "config")
    chunks = c.find_all("chunks", "config")
    by_uuid = {}
    for ch in chunks:
        by_uuid.setdefault(dumps(ch["uuid"]), []).append(ch)
    out = {}
    for coll in colls:
        ns = coll["_id"]
        mine = sorted(by_uuid.pop(dumps(coll["uuid"]), []), key=lambda ch: bound(ch["min"]))
        assert mine, "%s has no chunks" % ns
        assert all(k[0] == 0 for k in bound(mine[0]["min"])), "%s does not start at MinKey" % ns
        assert all(k[0] == 2 for k in bound(mine[-1]["max"])), "%s does not end at MaxKey" % ns
        for a, b in zip(mine, mine[1:]):
            assert a["max"] == b["min"], "%s: gap or overlap between %s and %s" % (ns, a, b)
        for ch in mine:
            assert bound(ch["min"]) < bound(ch["max"]), "%s: chunk with min >= max" % ns
            assert ch["shard"] in shards, "%s: chunk on unknown shard %s" % (ns, ch["shard"])
        mods = [lastmod(ch) for ch in mine]
        assert len(set(mods)) == len(mods), "%s: two chunks with one lastmod" % ns
        rows = [(dumps(ch["min"]), dumps(ch["max"]), ch["shard"], lastmod(ch)) for ch in mine]
        rt = c.ok({"getRoutingTable": ns})
        got = [(dumps(ch["min"]), dumps(ch["max"]), ch["shard"], lastmod(ch)) for ch in rt["chunks"]]
        assert got == rows, "%s: getRoutingTable %s != config.chunks %s" % (ns, got, rows)
        v = rt["collectionVersion"]["v"]["$timestamp"]
        assert (v["t"], v["i"]) == max(mods), "%s: collectionVersion is not the max lastmod" % ns
        out[ns] = rows
    assert not by_uuid, "chunks of no collection: %s" % list(by_uuid)
    return out


def version(state, ns):
    return max(r[3] for r in state[ns])


def error_changes_nothing(c, point, cmd):
    """Action "error" at point: a clean error reply naming it, the catalog unchanged (the
    transaction rolled back, the catalog still writable), then the same command succeeds."""
    before = catalog(c)
    arm(c, point, "error")
    r = c.err(cmd, FAILPOINT_ENABLED)
    assert point in r["errmsg"], r
    assert catalog(c) == before
    c.ok(cmd)
    return catalog(c)


def shard_colls(s, db):
    r = s.client().ok({"listCollections": 1, "$db": db})
    return sorted(x["name"] for x in r["cursor"]["firstBatch"])


def proved(what):
    print("  proved: " + what, flush=True)


# ---- addShard ------------------------------------------------------------------------

@test
def test_add_shard_crash_before_insert(t):
    cfg, shards, c = setup(t, add=1)
    c = crash_at(cfg, c, "addShardBeforeCatalogInsert", {"addShard": shards[1].url})
    assert [s["_id"] for s in c.ok({"listShards": 1})["shards"]] == ["shard0"]
    ident = shards[1].client().ok({"serverStatus": 1})["sharding"]
    assert ident["shardName"] == "shard1", ident   # the side effect happened first
    catalog(c)
    assert c.ok({"addShard": shards[1].url})["shardAdded"] == "shard1"
    assert [s["_id"] for s in c.ok({"listShards": 1})["shards"]] == ["shard0", "shard1"]
    proved("crash after the shard took its identity: not in config.shards; retried addShard "
           "re-adds it under the same name")


@test
def test_add_shard_error_before_insert(t):
    cfg, shards, c = setup(t, add=1)
    error_changes_nothing(c, "addShardBeforeCatalogInsert", {"addShard": shards[1].url})
    assert [s["_id"] for s in c.ok({"listShards": 1})["shards"]] == ["shard0", "shard1"]
    proved("error before the insert: clean error reply, no shard added; the retry adds it")


# ---- shardCollection -----------------------------------------------------------------

@test
def test_shard_collection_crash_before_commit(t):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard0"})
    cmd = {"shardCollection": "app.h", "key": {"x": "hashed"}}
    c = crash_at(cfg, c, "shardCollectionBeforeCatalogCommit", cmd)
    state = catalog(c)
    assert "app.h" not in state, state
    c.err({"getRoutingTable": "app.h"}, 118)
    assert all("h" in shard_colls(s, "app") for s in shards)  # the shards were told first
    r = c.ok(cmd)
    state = catalog(c)
    assert len(state["app.h"]) == 4 and version(state, "app.h") == (1, 3), state
    assert {row[2] for row in state["app.h"]} == {"shard0", "shard1"}
    info = [x for x in shards[1].client().ok({"listCollections": 1, "$db": "app"})["cursor"]["firstBatch"]
            if x["name"] == "h"][0]
    assert info["info"]["uuid"] == r["collectionUUID"], (info, r)
    proved("crash after _shardsvrShardCollection, before the commit: no metadata at all; the "
           "retry commits 4 chunks at (1,0)..(1,3) with the uuid the shards already hold")


@test
def test_shard_collection_error_before_commit(t):
    cfg, shards, c = setup(t)
    state = error_changes_nothing(c, "shardCollectionBeforeCatalogCommit",
                                  {"shardCollection": "app.e", "key": {"x": 1}})
    assert len(state["app.e"]) == 1
    proved("error before the commit: clean error reply, collection not sharded; retry shards it")


@test
def test_shard_collection_crash_after_commit(t):
    cfg, shards, c = setup(t)
    cmd = {"shardCollection": "app.r", "key": {"x": 1}}
    c = crash_at(cfg, c, "shardCollectionAfterCatalogCommit", cmd)
    state = catalog(c)
    assert len(state["app.r"]) == 1 and version(state, "app.r") == (1, 0), state
    uuid = [x for x in c.find_all("collections", "config") if x["_id"] == "app.r"][0]["uuid"]
    assert c.ok(cmd)["collectionUUID"] == uuid
    c.err({"shardCollection": "app.r", "key": {"y": 1}}, 23)
    assert catalog(c) == state
    proved("crash after the commit, before the reply: fully sharded; the retry answers ok with "
           "the same uuid and changes nothing; another key is AlreadyInitialized")


# ---- split ---------------------------------------------------------------------------

def sharded(t, ns="app.s"):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard0"})
    c.ok({"shardCollection": ns, "key": {"x": 1}})
    return cfg, shards, c


@test
def test_split_crash_before_commit(t):
    cfg, shards, c = sharded(t)
    before = catalog(c)
    cmd = {"split": "app.s", "middle": {"x": 10}}
    c = crash_at(cfg, c, "splitChunkBeforeCommit", cmd)
    assert catalog(c) == before
    c.ok(cmd)
    state = catalog(c)
    assert [r[3] for r in state["app.s"]] == [(1, 1), (1, 2)], state
    proved("crash with the split written but not committed: the catalog is as before; the "
           "retry splits into (1,1) and (1,2)")


@test
def test_split_error_before_commit(t):
    cfg, shards, c = sharded(t)
    state = error_changes_nothing(c, "splitChunkBeforeCommit", {"split": "app.s", "middle": {"x": 10}})
    assert len(state["app.s"]) == 2
    proved("error before COMMIT: clean error reply, nothing changed, the next split works")


@test
def test_split_crash_after_commit(t):
    cfg, shards, c = sharded(t)
    v0 = version(catalog(c), "app.s")
    cmd = {"split": "app.s", "middle": {"x": 10}}
    c = crash_at(cfg, c, "splitChunkAfterCommit", cmd)
    state = catalog(c)
    assert [r[3] for r in state["app.s"]] == [(1, 1), (1, 2)] and version(state, "app.s") > v0, state
    r = c.err(cmd, 72)
    assert "already a chunk boundary" in r["errmsg"], r
    assert catalog(c) == state
    proved("crash after COMMIT, before the owner's refresh: fully split; the retried split "
           "is a clear InvalidOptions (already a boundary) and changes nothing")


# ---- mergeChunks ---------------------------------------------------------------------

def split3(t):
    cfg, shards, c = sharded(t, "app.m")
    c.ok({"split": "app.m", "middle": {"x": 10}})
    c.ok({"split": "app.m", "middle": {"x": 20}})
    return cfg, shards, c


MERGE = {"mergeChunks": "app.m", "bounds": [{"x": MINKEY}, {"x": MAXKEY}]}


@test
def test_merge_crash_before_commit(t):
    cfg, shards, c = split3(t)
    before = catalog(c)
    assert len(before["app.m"]) == 3
    c = crash_at(cfg, c, "mergeChunksBeforeCommit", MERGE)
    assert catalog(c) == before
    c.ok(MERGE)
    state = catalog(c)
    assert len(state["app.m"]) == 1 and version(state, "app.m") > version(before, "app.m"), state
    proved("crash with the merge written but not committed: 3 chunks as before; the retry "
           "merges them at a greater version")


@test
def test_merge_error_before_commit(t):
    cfg, shards, c = split3(t)
    assert len(error_changes_nothing(c, "mergeChunksBeforeCommit", MERGE)["app.m"]) == 1
    proved("error before COMMIT: clean error reply, nothing changed; the retry merges")


@test
def test_merge_crash_after_commit(t):
    cfg, shards, c = split3(t)
    before = catalog(c)
    c = crash_at(cfg, c, "mergeChunksAfterCommit", MERGE)
    state = catalog(c)
    assert len(state["app.m"]) == 1 and version(state, "app.m") > version(before, "app.m"), state
    c.ok(MERGE)
    assert catalog(c) == state
    proved("crash after COMMIT: fully merged; the retried merge is ok and changes nothing")


# ---- drops ---------------------------------------------------------------------------

@test
def test_drop_collection_crash_before_delete(t):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard0"})
    c.ok({"shardCollection": "app.d", "key": {"x": "hashed"}})
    assert all("d" in shard_colls(s, "app") for s in shards)
    before = catalog(c)
    cmd = {"_configsvrDropCollection": "app.d", "$db": "admin"}
    c = crash_at(cfg, c, "dropCollectionBeforeCatalogDelete", cmd)
    assert all("d" not in shard_colls(s, "app") for s in shards)
    assert catalog(c) == before          # metadata intact and still tiling
    assert c.ok(cmd)["sharded"] is True
    assert "app.d" not in catalog(c)
    assert c.ok(cmd)["sharded"] is False
    proved("crash after the shards dropped, before the catalog delete: metadata whole; the "
           "retry deletes it, and a third drop is a no-op")


@test
def test_drop_collection_error_before_delete(t):
    cfg, shards, c = setup(t)
    c.ok({"shardCollection": "app.d", "key": {"x": 1}})
    state = error_changes_nothing(c, "dropCollectionBeforeCatalogDelete",
                                  {"_configsvrDropCollection": "app.d", "$db": "admin"})
    assert "app.d" not in state
    proved("error before the catalog delete: clean error reply, metadata unchanged; retry drops")


@test
def test_drop_database_crash_before_delete(t):
    cfg, shards, c = setup(t)
    c.ok({"enableSharding": "app", "primaryShard": "shard1"})
    c.ok({"shardCollection": "app.a", "key": {"x": 1}})
    c.ok({"shardCollection": "app.b", "key": {"x": "hashed"}})
    cmd = {"_configsvrDropDatabase": "app", "$db": "admin"}
    c = crash_at(cfg, c, "dropDatabaseBeforeCatalogDelete", cmd)
    state = catalog(c)
    assert "app.a" not in state and "app.b" not in state, state
    dbs = [d["_id"] for d in c.find_all("databases", "config")]
    assert dbs == ["app"], dbs
    assert all(shard_colls(s, "app") == [] for s in shards)
    assert c.ok(cmd)["dropped"] == "app"
    assert c.find_all("databases", "config") == []
    c.ok(cmd)
    proved("crash after the shards dropped the database: its collections' metadata is gone "
           "(each was its own transaction), the database entry remains; the retry removes it")


# ---- removeShard and settings ----------------------------------------------------------

@test
def test_remove_shard_crash_before_commit(t):
    cfg, shards, c = setup(t)
    cmd = {"removeShard": "shard1"}
    c = crash_at(cfg, c, "removeShardBeforeCommit", cmd)
    assert all("draining" not in s for s in c.ok({"listShards": 1})["shards"])
    assert c.ok(cmd)["state"] == "started"
    assert c.ok({"listShards": 1})["shards"][1].get("draining") is True
    proved("crash before removeShard's COMMIT: not draining; the retry starts draining")


SETTINGS = {"update": "settings", "$db": "config",
            "updates": [{"q": {"_id": "chunksize"}, "u": {"$set": {"value": 64}}, "upsert": True}]}


@test
def test_settings_crash_before_commit(t):
    cfg, shards, c = setup(t)
    c = crash_at(cfg, c, "settingsUpdateBeforeCommit", SETTINGS)
    assert c.find_all("settings", "config") == []
    arm(c, "settingsUpdateBeforeCommit", "error")
    r = c.ok(SETTINGS)   # an update reports a failed statement as a write error
    assert r["n"] == 0 and r["writeErrors"][0]["code"] == FAILPOINT_ENABLED, r
    assert c.find_all("settings", "config") == []
    c.ok(SETTINGS)
    assert c.find_all("settings", "config") == [{"_id": "chunksize", "value": 64}]
    proved("crash and error before the settings COMMIT: nothing stored; the retry upserts")


if __name__ == "__main__":
    main()
