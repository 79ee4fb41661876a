#!/usr/bin/env python3
"""
test_stale_router.py — a router with an out-of-date routing table still answers
correctly (DESIGN §6, §9; notes §2.3): two routers A and B over 3 shards; A changes the
metadata (split, merge, drop + recreate with a new epoch, shardCollection again with a
different key); B, which cached the old table, keeps serving correct reads and writes,
and we show that it retried: its serverStatus.router.staleConfigRetries grows and its
log has "stale config retry" lines. The shard side: a request sent straight to a shard
with a hand-made shardVersion of another major or another epoch gets StaleConfig 13388
with ns / vReceived / vWanted / shardId; a minor-only difference is accepted. Database
versions: a database dropped and re-created with another primary makes the old primary
answer StaleDbVersion 249, and router B retries on the new primary.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
NS = "app.c"


def stale_retries(c):
    return c.ok({"serverStatus": 1, "$db": "admin"})["router"]["staleConfigRetries"]


def ids(docs):
    return sorted(d["_id"] for d in docs)


def setup(t):
    cl = t.cluster(shards=3, routers=2)
    A, B = cl.client(0), cl.client(1)
    A.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    return cl, A, B


@test
def test_split_merge_then_drop_recreate(t):
    cl, A, B = setup(t)
    A.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    A.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "v": 0} for i in range(100)]})
    # B caches the one-chunk table (1|0)
    assert len(B.find_all("c", DB, {})) == 100
    base = stale_retries(B)

    # --- A splits and merges: minor versions only; B's requests stay write-compatible
    for m in (25, 50, 75):
        A.ok({"split": NS, "middle": {"k": m}, "$db": "admin"})
    A.ok({"mergeChunks": NS, "bounds": [{"k": 25}, {"k": 75}], "$db": "admin"})
    chunks = A.ok({"find": "chunks", "$db": "config", "filter": {}})["cursor"]["firstBatch"]
    assert len(chunks) == 3, chunks
    assert ids(B.find_all("c", DB, {"k": {"$gte": 20, "$lt": 80}})) == list(range(20, 80))
    assert B.ok({"count": "c", "$db": DB, "query": {"k": {"$gte": 50}}})["n"] == 50
    r = B.ok({"update": "c", "$db": DB, "updates": [{"q": {"k": {"$lt": 10}}, "u": {"$inc": {"v": 1}}, "multi": True}]})
    assert r["n"] == 10, r
    assert B.ok({"insert": "c", "$db": DB, "documents": [{"_id": 100, "k": 100}]})["n"] == 1
    assert A.ok({"count": "c", "$db": DB})["n"] == 101
    # no StaleConfig was needed: the shards accept a minor-only difference (same major)
    assert stale_retries(B) == base

    # --- A drops and re-creates the collection hashed on another field: new epoch
    A.ok({"drop": "c", "$db": DB})
    A.ok({"shardCollection": NS, "key": {"j": "hashed"}, "$db": "admin"})
    new_docs = [{"_id": 1000 + i, "j": i, "k": -i} for i in range(90)]
    A.ok({"insert": "c", "$db": DB, "documents": new_docs, "ordered": False})
    # B still holds the {k: 1} table of the old epoch: it sends to shard0 only, gets
    # StaleConfig (timestamp mismatch), refreshes, and re-targets to all three shards
    got = B.find_all("c", DB, {}, sort={"_id": 1}, batchSize=7)
    assert got == sorted(new_docs, key=lambda d: d["_id"]), got[:3]
    after_read = stale_retries(B)
    assert after_read > base, after_read
    assert B.ok({"count": "c", "$db": DB})["n"] == 90
    assert B.ok({"distinct": "c", "$db": DB, "key": "j", "query": {"j": {"$lt": 5}}})["values"] == [0, 1, 2, 3, 4]
    # targeted by the new key through B (its table is fresh now)
    assert B.ok({"find": "c", "$db": DB, "filter": {"j": 42}})["cursor"]["firstBatch"] == [
        {"_id": 1042, "j": 42, "k": -42}]

    # --- again, this time B's first contact after the change is a write batch
    A.ok({"drop": "c", "$db": DB})
    A.ok({"shardCollection": NS, "key": {"g": "hashed"}, "$db": "admin"})
    before = stale_retries(B)
    docs = [{"_id": i, "g": i} for i in range(120)]
    r = B.ok({"insert": "c", "$db": DB, "documents": docs, "ordered": False})
    assert r["n"] == 120 and "writeErrors" not in r, r
    assert stale_retries(B) > before
    # every document lives on the shard that owns its chunk: A's versioned reads see all
    # of them, and the per-shard unversioned counts add up to exactly 120 (no strays)
    assert ids(A.find_all("c", DB, {})) == list(range(120))
    per = [s.client().ok({"count": "c", "$db": DB})["n"] for s in cl.shards]
    assert sum(per) == 120 and all(n > 0 for n in per), per
    # updates and deletes from a stale B (A re-creates once more with a ranged key)
    A.ok({"drop": "c", "$db": DB})
    A.ok({"shardCollection": NS, "key": {"g": 1}, "$db": "admin"})
    A.ok({"insert": "c", "$db": DB, "documents": docs})
    before = stale_retries(B)
    r = B.ok({"update": "c", "$db": DB, "updates": [
        {"q": {"g": 5}, "u": {"$set": {"x": 1}}},
        {"q": {"g": {"$gte": 100}}, "u": {"$set": {"x": 2}}, "multi": True}]})
    assert r["n"] == 21 and r["nModified"] == 21, r
    r = B.ok({"delete": "c", "$db": DB, "deletes": [{"q": {"g": {"$lt": 10}}, "limit": 0}]})
    assert r["n"] == 10, r
    assert A.ok({"count": "c", "$db": DB, "query": {"x": 2}})["n"] == 20
    assert A.ok({"count": "c", "$db": DB})["n"] == 110
    assert stale_retries(B) > before
    # --- dropped and not re-created: a stale B answers from the (now unsharded) nothing
    A.ok({"drop": "c", "$db": DB})
    assert B.find_all("c", DB, {}) == []
    assert B.ok({"count": "c", "$db": DB})["n"] == 0
    # the retries are in B's log, one line each, naming the namespace and the versions
    log = cl.routers[1].log_text()
    lines = [ln for ln in log.splitlines() if "stale config retry" in ln]
    assert lines and all("ns=app.c" in ln for ln in lines), lines[:3]
    print("  router B: %d stale retries; e.g. %s" % (stale_retries(B), lines[0].split(" I ", 1)[-1]))


@test
def test_findandmodify_and_single_ops_from_stale_router(t):
    """Single-shard paths (findAndModify, ordered batches) also retry transparently."""
    cl, A, B = setup(t)
    A.ok({"shardCollection": NS, "key": {"k": "hashed"}, "$db": "admin"})
    A.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(30)]})
    assert B.ok({"count": "c", "$db": DB})["n"] == 30
    A.ok({"drop": "c", "$db": DB})
    A.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    A.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "v": 0} for i in range(30)]})
    before = stale_retries(B)
    r = B.ok({"findAndModify": "c", "$db": DB, "query": {"k": 7}, "update": {"$inc": {"v": 5}}, "new": True})
    assert r["value"] == {"_id": 7, "k": 7, "v": 5}, r
    assert stale_retries(B) > before
    # an ordered batch with several targets
    A.ok({"drop": "c", "$db": DB})
    A.ok({"shardCollection": NS, "key": {"k": "hashed"}, "$db": "admin"})
    r = B.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(40)]})
    assert r["n"] == 40 and "writeErrors" not in r, r
    assert ids(A.find_all("c", DB, {})) == list(range(40))


@test
def test_multi_shard_update_retried_once_per_shard_by_name(t):
    """An updateMany {$inc} that one shard answers with StaleConfig is re-sent to that
    shard only, even when the refresh renumbers the shards of the routing table: the
    router tracks which shards applied it by name, not by table index."""
    cl, A, B = setup(t)
    A.ok({"shardCollection": NS, "key": {"k": "hashed"}, "$db": "admin"})
    A.ok({"insert": "c", "$db": DB, "ordered": False,
          "documents": [{"_id": i, "k": i, "n": 0} for i in range(300)]})
    per_shard = [s.client().ok({"count": "c", "$db": DB})["n"] for s in cl.shards]
    assert all(per_shard), per_shard   # every shard holds some: the update goes to all 3
    assert B.ok({"count": "c", "$db": DB})["n"] == 300   # B caches the table
    # Every refresh B makes is a full one that numbers the shards differently.
    B.ok({"configureFailPoint": "forceFullRoutingRefresh", "mode": "alwaysOn",
          "data": {"rotateShards": True}})
    for rnd in range(3):   # each shard in turn answers StaleConfig once
        before = stale_retries(B)
        cl.shards[rnd].client().ok({"configureFailPoint": "failCommand", "mode": {"times": 1},
                                    "data": {"failCommands": ["update"], "errorCode": 13388, "failInternalCommands": True,
                                             "errmsg": "test: stale"}})
        r = B.ok({"update": "c", "$db": DB,
                  "updates": [{"q": {}, "u": {"$inc": {"n": 1}}, "multi": True}]})
        assert r["n"] == 300 and r["nModified"] == 300 and "writeErrors" not in r, (rnd, r)
        assert stale_retries(B) == before + 1, rnd
        counts = {}
        for d in A.find_all("c", DB, {}):
            counts.setdefault(d["n"], []).append(d["_id"])
        assert list(counts) == [rnd + 1], (rnd, {n: len(v) for n, v in counts.items()})
    # an ordered batch of two multi-shard updates and a delete: same
    cl.shards[1].client().ok({"configureFailPoint": "failCommand", "mode": {"times": 1},
                              "data": {"failCommands": ["update"], "errorCode": 13388,
                                       "failInternalCommands": True}})
    r = B.ok({"update": "c", "$db": DB, "updates": [
        {"q": {}, "u": {"$inc": {"n": 1}}, "multi": True},
        {"q": {"_id": {"$lt": 100}}, "u": {"$inc": {"n": 10}}, "multi": True}]})
    assert r["n"] == 400 and r["nModified"] == 400, r
    docs = A.find_all("c", DB, {})
    assert sorted(d["n"] for d in docs) == [4] * 200 + [14] * 100, r
    B.ok({"configureFailPoint": "forceFullRoutingRefresh", "mode": "off"})


@test
def test_stale_retries_run_out(t):
    """A shard that answers StaleConfig to every attempt: after MS_STALE_RETRIES_MAX (10)
    refreshes a write batch fails only the ops still pending, as writeErrors with
    StaleConfig, and keeps what the other shards applied (counted once: their answers
    in the retried attempts were recorded, not re-sent); a read fails as a whole with
    StaleConfig. One stale answer is counted per attempt (11 of them)."""
    cl, A, B = setup(t)
    A.ok({"shardCollection": NS, "key": {"k": "hashed"}, "$db": "admin"})
    docs = [{"_id": i, "k": i} for i in range(60)]
    A.ok({"insert": "c", "$db": DB, "ordered": False, "documents": docs})
    on0 = sorted(d["_id"] for d in cl.shards[0].client().find_all("c", DB, {}))
    assert 0 < len(on0) < 60, on0
    A.ok({"delete": "c", "$db": DB, "deletes": [{"q": {}, "limit": 0}]})
    cl.shards[0].client().ok({"configureFailPoint": "failCommand", "mode": "alwaysOn",
                              "data": {"failCommands": ["insert", "find"], "errorCode": 13388, "failInternalCommands": True,
                                       "errmsg": "test: always stale"}, "$db": "admin"})
    before = stale_retries(B)
    r = B.ok({"insert": "c", "$db": DB, "ordered": False, "documents": docs})
    assert r["n"] == 60 - len(on0), r
    werr = r.get("writeErrors", [])
    assert sorted(e["index"] for e in werr) == on0, werr
    assert all(e["code"] == 13388 and "after 10 refreshes" in e["errmsg"] for e in werr), werr[:2]
    assert stale_retries(B) == before + 11, stale_retries(B) - before
    assert A.ok({"count": "c", "$db": DB})["n"] == 60 - len(on0)   # none twice (_id unique)
    e = B.err({"find": "c", "$db": DB, "filter": {}})
    assert e["code"] == 13388 and "after 10 refreshes" in e["errmsg"], e
    cl.shards[0].client().ok({"configureFailPoint": "failCommand", "mode": "off",
                              "$db": "admin"})


@test
def test_drop_database_then_stale_router_writes(t):
    """dropDatabase through A; B still caches the sharded table and the database's
    primary. B's next write gets StaleConfig (the shard now finds the collection
    unsharded), B refreshes, forgets the primary of the vanished database, re-creates the
    database on the config server and writes there: A then sees exactly those documents."""
    cl, A, B = setup(t)
    A.ok({"enableSharding": "app2", "primaryShard": "shard1", "$db": "admin"})
    A.ok({"shardCollection": "app2.c", "key": {"k": "hashed"}, "$db": "admin"})
    A.ok({"insert": "c", "$db": "app2", "documents": [{"_id": i, "k": i} for i in range(50)]})
    assert B.ok({"count": "c", "$db": "app2"})["n"] == 50
    # an unsharded collection too: B now also caches the database's primary (shard1)
    A.ok({"insert": "u", "$db": "app2", "documents": [{"_id": 1}]})
    assert B.ok({"count": "u", "$db": "app2"})["n"] == 1
    r = A.ok({"dropDatabase": 1, "$db": "app2"})
    assert r["dropped"] == "app2", r
    assert A.ok({"count": "c", "$db": "app2"})["n"] == 0
    assert A.ok({"find": "databases", "$db": "config", "filter": {"_id": "app2"}})["cursor"]["firstBatch"] == []
    before = stale_retries(B)
    r = B.ok({"insert": "c", "$db": "app2", "documents": [{"_id": 100 + i, "k": i} for i in range(10)]})
    assert r["n"] == 10 and "writeErrors" not in r, r
    assert stale_retries(B) > before
    dbs = A.ok({"find": "databases", "$db": "config", "filter": {"_id": "app2"}})["cursor"]["firstBatch"]
    assert len(dbs) == 1, dbs
    assert ids(A.find_all("c", "app2", {})) == list(range(100, 110))
    assert ids(B.find_all("c", "app2", {})) == list(range(100, 110))
    assert A.ok({"count": "u", "$db": "app2"})["n"] == 0
    # dropping a database that does not exist is not an error (as in MongoDB)
    A.ok({"dropDatabase": 1, "$db": "nosuchdb"})


def shard_version_of(shard_client, ns):
    st = shard_client.ok({"serverStatus": 1})["sharding"]
    return st[ns]["shardVersion"]


@test
def test_shard_answers_stale_config(t):
    cl, A, B = setup(t)
    A.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    A.ok({"split": NS, "middle": {"k": 50}, "$db": "admin"})
    A.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(100)]})
    s0 = cl.shards[0].client()
    sv = shard_version_of(s0, NS)   # {e, t, v: Timestamp(1, 2)}: split pieces are 1|1, 1|2
    major, minor = sv["v"]["$timestamp"]["t"], sv["v"]["$timestamp"]["i"]
    assert major == 1 and minor == 2, sv

    def find_with(v):
        return s0.cmd({"find": "c", "$db": DB, "filter": {"k": {"$lt": 3}}, "shardVersion": v})

    # the exact version and a minor-only difference are accepted (write-compatible)
    assert len(find_with(sv)["cursor"]["firstBatch"]) == 3
    assert len(find_with(dict(sv, v=ts(major, 0)))["cursor"]["firstBatch"]) == 3
    # an older major: StaleConfig with the versions received and wanted
    r = find_with(dict(sv, v=ts(major - 1, 7)))
    assert r["ok"] == 0 and r["code"] == 13388 and r["codeName"] == "StaleConfig", r
    assert r["ns"] == NS and r["shardId"] == "shard0", r
    assert r["vReceived"]["v"] == ts(0, 7) and r["vWanted"]["v"] == ts(1, 2), r
    assert r["vWanted"]["e"] == sv["e"] and r["vWanted"]["t"] == sv["t"], r
    # a newer major: the shard refreshes first, still disagrees, answers StaleConfig
    r = find_with(dict(sv, v=ts(major + 1, 0)))
    assert r["code"] == 13388 and r["vWanted"]["v"] == ts(1, 2), r
    # another epoch (a dropped generation): StaleConfig
    r = find_with(dict(sv, e=oid("0123456789abcdef01234567")))
    assert r["code"] == 13388 and r["vWanted"]["e"] == sv["e"], r
    # writes are checked the same way, before anything is written
    r = s0.cmd({"insert": "c", "$db": DB, "documents": [{"_id": 500, "k": 1}],
                "shardVersion": dict(sv, v=ts(0, 1))})
    stale_in = r if r.get("code") == 13388 else (r.get("writeErrors") or [{}])[0]
    assert stale_in.get("code") == 13388, r
    assert A.ok({"count": "c", "$db": DB, "query": {"_id": 500}})["n"] == 0
    # UNSHARDED from a router that missed the sharding: StaleConfig too
    r = find_with({"e": oid("000000000000000000000000"), "t": ts(0, 0), "v": ts(0, 0)})
    assert r["code"] == 13388, r
    # a shard that owns no chunk of the collection: wanted (0, 0)
    s1 = cl.shards[1].client()
    r = s1.cmd({"find": "c", "$db": DB, "filter": {}, "shardVersion": sv})
    assert r["code"] == 13388 and r["vWanted"]["v"] == ts(0, 0), r
    # without shardVersion the shard answers as a standalone mongod would
    assert len(s0.ok({"find": "c", "$db": DB, "filter": {}})["cursor"]["firstBatch"]) == 100
    print("  StaleConfig from shard0: %s" % dumps(find_with(dict(sv, v=ts(0, 7)))))


def stale_db_retries(c):
    return c.ok({"serverStatus": 1, "$db": "admin"})["router"]["staleDbVersionRetries"]


def shard_count(cl, i, coll, db):
    return cl.shards[i].client().ok({"count": coll, "$db": db})["n"]


@test
def test_database_version_after_recreate_elsewhere(t):
    """Database versions (notes §2.3, StaleDbVersion 249): B caches database x with its
    primary shard0; A drops x and re-creates it with primary shard2. B's insert and find
    on an unsharded collection still carry the old databaseVersion to shard0, which
    refreshes from config.databases, answers StaleDbVersion, and B re-reads the entry and
    retries on shard2. Each shard is read directly to see where the documents live."""
    cl, A, B = setup(t)
    A.ok({"enableSharding": "x", "primaryShard": "shard0", "$db": "admin"})
    B.ok({"insert": "u", "$db": "x", "documents": [{"_id": i} for i in range(3)]})
    assert ids(B.find_all("u", "x", {})) == [0, 1, 2]
    assert shard_count(cl, 0, "u", "x") == 3
    v1 = A.ok({"find": "databases", "$db": "config", "filter": {"_id": "x"}})["cursor"]["firstBatch"][0]

    A.ok({"dropDatabase": 1, "$db": "x"})
    A.ok({"enableSharding": "x", "primaryShard": "shard2", "$db": "admin"})
    v2 = A.ok({"find": "databases", "$db": "config", "filter": {"_id": "x"}})["cursor"]["firstBatch"][0]
    assert v2["primary"] == "shard2" and v2["version"]["uuid"] != v1["version"]["uuid"], (v1, v2)
    assert v2["version"]["timestamp"] != v1["version"]["timestamp"], (v1, v2)

    before = stale_db_retries(B)
    r = B.ok({"insert": "u", "$db": "x", "documents": [{"_id": 10 + i} for i in range(5)]})
    assert r["n"] == 5 and "writeErrors" not in r, r
    assert stale_db_retries(B) == before + 1, (before, stale_db_retries(B))
    # the documents are on the new primary only
    assert shard_count(cl, 2, "u", "x") == 5
    assert shard_count(cl, 0, "u", "x") == 0
    assert shard_count(cl, 1, "u", "x") == 0
    assert ids(B.find_all("u", "x", {})) == list(range(10, 15))
    assert ids(A.find_all("u", "x", {})) == list(range(10, 15))

    # once more, and B's first contact is a read (and then findAndModify, count)
    A.ok({"dropDatabase": 1, "$db": "x"})
    A.ok({"enableSharding": "x", "primaryShard": "shard1", "$db": "admin"})
    A.ok({"insert": "u", "$db": "x", "documents": [{"_id": 20 + i, "v": 0} for i in range(4)]})
    assert shard_count(cl, 1, "u", "x") == 4 and shard_count(cl, 2, "u", "x") == 0
    before = stale_db_retries(B)
    assert ids(B.find_all("u", "x", {})) == list(range(20, 24))
    assert stale_db_retries(B) > before
    r = B.ok({"findAndModify": "u", "$db": "x", "query": {"_id": 21}, "update": {"$set": {"v": 9}},
              "new": True})
    assert r["value"] == {"_id": 21, "v": 9}, r
    assert B.ok({"count": "u", "$db": "x"})["n"] == 4
    st = B.ok({"serverStatus": 1, "$db": "admin"})["router"]
    assert st["databaseRefreshes"] >= 3, st
    log = cl.routers[1].log_text()
    lines = [ln for ln in log.splitlines() if "stale db version retry" in ln]
    assert len(lines) >= 2 and all("db=x" in ln for ln in lines), lines

    # the shard side, straight to a shard: an old databaseVersion → StaleDbVersion 249
    # with db / vReceived / vWanted; the current one is accepted by the primary only
    unsharded = {"e": oid("000000000000000000000000"), "t": ts(0, 0), "v": ts(0, 0)}
    cur = A.ok({"find": "databases", "$db": "config", "filter": {"_id": "x"}})["cursor"]["firstBatch"][0]
    s1, s0 = cl.shards[1].client(), cl.shards[0].client()
    r = s1.cmd({"find": "u", "$db": "x", "filter": {}, "shardVersion": unsharded,
                "databaseVersion": v1["version"]})
    assert r["ok"] == 0 and r["code"] == 249 and r["codeName"] == "StaleDbVersion", r
    assert r["db"] == "x" and r["vReceived"] == v1["version"] and r["vWanted"] == cur["version"], r
    r = s1.ok({"find": "u", "$db": "x", "filter": {}, "shardVersion": unsharded,
               "databaseVersion": cur["version"]})
    assert len(r["cursor"]["firstBatch"]) == 4, r
    r = s0.cmd({"find": "u", "$db": "x", "filter": {}, "shardVersion": unsharded,
                "databaseVersion": cur["version"]})
    assert r["code"] == 249 and "not the primary" in r["errmsg"], r
    print("  StaleDbVersion from shard1: %s" % dumps(s1.cmd(
        {"find": "u", "$db": "x", "filter": {}, "shardVersion": unsharded,
         "databaseVersion": v1["version"]})))


if __name__ == "__main__":
    main()
