#!/usr/bin/env python3
"""
test_index_consistency.py — the same indexes on every shard that owns chunks, whatever
the router's cache believed (docs/versioning-and-routing.md "DDL: createIndexes and
dropIndexes"), and checkMetadataConsistency (docs/protocol.md), which reports nothing on
a healthy cluster and each inconsistency type it knows when one is made on purpose.

Two routers A and B: B caches a collection as unsharded, A shards it and moves a chunk
to another shard; B then creates a unique index {x: 1, u: 1}. B sends it with the
UNSHARDED version and the database version to the primary shard, which knows better
(StaleConfig); B refreshes and sends it to every shard that owns chunks, so a duplicate
in the other shard's range is refused (DuplicateKey 11000). The same for dropIndexes.
On the old code B sent both to the primary only.
"""
import os
import sqlite3
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"


def shard_indexes(cl, i, coll, db=DB):
    """Index names of coll straight from shard i ([] when it has no such collection)."""
    r = cl.shards[i].client().cmd({"listIndexes": coll, "$db": db})
    if r.get("ok") != 1:
        return []
    return sorted(ix["name"] for ix in r["cursor"]["firstBatch"])


def sharded_two_shards(A, coll, db=DB):
    """db.coll sharded on {x: 1}, split at x: 0, [0, MaxKey) moved to shard1."""
    ns = "%s.%s" % (db, coll)
    A.ok({"createIndexes": coll, "$db": db, "indexes": [{"key": {"x": 1}, "name": "x_1"}]})
    A.ok({"shardCollection": ns, "key": {"x": 1}, "$db": "admin"})
    A.ok({"split": ns, "middle": {"x": 0}, "$db": "admin"})
    A.ok({"moveChunk": ns, "find": {"x": 0}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})


def setup(t, shards=2):
    cl = t.cluster(shards=shards, routers=2)
    A, B = cl.client(0), cl.client(1)
    A.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    return cl, A, B


def check(c, db="admin", coll=None, **opts):
    cmd = {"checkMetadataConsistency": coll if coll else 1, "$db": db}
    cmd.update(opts)
    r = c.ok(cmd)
    assert r["cursor"]["id"] == 0, r
    return r["cursor"]["firstBatch"]


def dup_refused(c, coll, doc, db=DB):
    """Inserts doc; requires the write error DuplicateKey 11000."""
    r = c.cmd({"insert": coll, "$db": db, "documents": [doc]})
    errs = r.get("writeErrors") or []
    assert errs and errs[0]["code"] == 11000, r


def types(found):
    return sorted(f["type"] for f in found)


@test
def test_stale_router_create_indexes_reaches_every_owner(t):
    cl, A, B = setup(t)
    # B learns "app.c is unsharded" (and caches it)
    B.ok({"insert": "c", "$db": DB, "documents": [{"_id": 0, "x": -5, "u": 1}]})
    assert len(B.find_all("c", DB, {})) == 1
    # A shards it and moves [0, MaxKey) to shard1; B is not told
    sharded_two_shards(A, "c")
    # B (stale: "unsharded") creates a unique index
    r = B.ok({"createIndexes": "c", "$db": DB, "indexes": [{"key": {"x": 1, "u": 1}, "name": "x_u", "unique": True}]})
    # a duplicate in shard1's range is refused
    B.ok({"insert": "c", "$db": DB, "documents": [{"_id": 1, "x": 5, "u": 1}]})
    dup_refused(A, "c", {"_id": 2, "x": 5, "u": 1})
    assert "x_u" in shard_indexes(cl, 0, "c") and "x_u" in shard_indexes(cl, 1, "c")
    assert set(r["raw"].keys()) == {"shard0", "shard1"}, r
    # and in shard0's range
    dup_refused(B, "c", {"_id": 3, "x": -5, "u": 1})
    assert "stale config retry" in cl.routers[1].log_text()
    assert check(A, checkIndexes=True) == []


@test
def test_stale_router_drop_indexes_reaches_every_owner(t):
    cl, A, B = setup(t)
    B.ok({"insert": "d", "$db": DB, "documents": [{"_id": 0, "x": -5, "u": 1}]})
    assert len(B.find_all("d", DB, {})) == 1
    sharded_two_shards(A, "d")
    A.ok({"createIndexes": "d", "$db": DB, "indexes": [{"key": {"x": 1, "u": 1}, "name": "x_u", "unique": True}]})
    assert "x_u" in shard_indexes(cl, 1, "d")
    # B still believes "unsharded": its drop must reach shard1 as well
    B.ok({"dropIndexes": "d", "$db": DB, "index": "x_u"})
    assert "x_u" not in shard_indexes(cl, 0, "d"), shard_indexes(cl, 0, "d")
    assert "x_u" not in shard_indexes(cl, 1, "d"), shard_indexes(cl, 1, "d")
    B.ok({"insert": "d", "$db": DB, "documents": [{"_id": 1, "x": 5, "u": 1}, {"_id": 2, "x": 5, "u": 1}]})
    assert check(A, checkIndexes=True) == []


@test
def test_stale_sharded_cache_index_ddl(t):
    # B's cache says sharded, with an old placement: the donor answers StaleConfig and B
    # re-targets to the new owner too
    cl, A, B = setup(t, shards=3)
    A.ok({"shardCollection": DB + ".f", "key": {"x": 1}, "$db": "admin"})
    A.ok({"split": DB + ".f", "middle": {"x": 0}, "$db": "admin"})
    assert B.find_all("f", DB, {}) == []          # B caches: every chunk on shard0
    A.ok({"moveChunk": DB + ".f", "find": {"x": 0}, "to": "shard2", "_waitForDelete": True, "$db": "admin"})
    r = B.ok({"createIndexes": "f", "$db": DB, "indexes": [{"key": {"x": 1, "u": 1}, "name": "x_u", "unique": True}]})
    B.ok({"insert": "f", "$db": DB, "documents": [{"_id": 1, "x": 5, "u": 1}]})
    dup_refused(B, "f", {"_id": 2, "x": 5, "u": 1})
    assert shard_indexes(cl, 1, "f") == []        # shard1 never owned any: untouched
    assert set(r["raw"].keys()) == {"shard0", "shard2"}, r
    assert check(A, checkIndexes=True) == []
    # dropped and re-created unsharded through A: B's cache still says sharded; the
    # shards answer StaleConfig and B sends to the primary only, creating nothing on the
    # other shards (no misplaced collections)
    A.ok({"drop": "f", "$db": DB})
    A.ok({"insert": "f", "$db": DB, "documents": [{"_id": 1, "x": 5, "u": 1}]})
    B.ok({"createIndexes": "f", "$db": DB, "indexes": [{"key": {"u": 1}, "name": "u_1"}]})
    assert "u_1" in shard_indexes(cl, 0, "f")
    assert shard_indexes(cl, 1, "f") == [] and shard_indexes(cl, 2, "f") == []
    assert check(A, checkIndexes=True) == []
    B.ok({"dropIndexes": "f", "$db": DB, "index": "u_1"})
    assert "u_1" not in shard_indexes(cl, 0, "f")


@test
def test_index_ddl_on_shard_without_chunks(t):
    # shard2 owns nothing and is not the primary: createIndexes does not create the
    # collection there; dropIndexes reaches a shard that gave its last chunk away.
    cl, A, B = setup(t, shards=3)
    sharded_two_shards(A, "e")
    A.ok({"createIndexes": "e", "$db": DB, "indexes": [{"key": {"v": 1}, "name": "v_1"}]})
    assert shard_indexes(cl, 2, "e") == []
    # shard1 gives its chunk back: it keeps its (empty) local collection
    A.ok({"moveChunk": DB + ".e", "find": {"x": 0}, "to": "shard0", "_waitForDelete": True, "$db": "admin"})
    assert "v_1" in shard_indexes(cl, 1, "e")
    A.ok({"dropIndexes": "e", "$db": DB, "index": "v_1"})
    assert "v_1" not in shard_indexes(cl, 1, "e"), shard_indexes(cl, 1, "e")
    assert "v_1" not in shard_indexes(cl, 0, "e")
    # the primary owns every chunk now; a unique index the key cannot keep is refused
    e = A.err({"createIndexes": "e", "$db": DB, "indexes": [{"key": {"y": 1}, "name": "y_1", "unique": True}]})
    assert e["code"] == 67, e
    assert check(A, checkIndexes=True) == []
    # an index made while only shard0 owns chunks reaches a later owner with its first
    # chunk (the recipient builds the donor's indexes), whether it held the collection
    # already (shard1) or never had it (shard2)
    A.ok({"createIndexes": "e", "$db": DB, "indexes": [{"key": {"w": 1}, "name": "w_1"}]})
    assert "w_1" not in shard_indexes(cl, 1, "e") and shard_indexes(cl, 2, "e") == []
    A.ok({"moveChunk": DB + ".e", "find": {"x": 0}, "to": "shard2", "_waitForDelete": True, "$db": "admin"})
    assert "w_1" in shard_indexes(cl, 2, "e")
    A.ok({"moveChunk": DB + ".e", "find": {"x": -1}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    assert "w_1" in shard_indexes(cl, 1, "e")
    assert check(A, checkIndexes=True) == []


def of_type(found, ty):
    return [f for f in found if f["type"] == ty]


@test
def test_check_metadata_consistency_shard_side(t):
    cl, A, _ = setup(t, shards=3)
    sh = [s.client() for s in cl.shards]
    sharded_two_shards(A, "s")
    A.ok({"insert": "s", "$db": DB, "documents": [{"_id": i, "x": i} for i in range(-5, 5)]})
    A.ok({"insert": "u", "$db": DB, "documents": [{"_id": 1}]})     # unsharded, on shard0
    A.ok({"enableSharding": "other", "primaryShard": "shard1", "$db": "admin"})
    A.ok({"insert": "o", "$db": "other", "documents": [{"_id": 1}]})
    # healthy: nothing at any level, with or without the index comparison
    for ci in (False, True):
        assert check(A, checkIndexes=ci) == []
        assert check(A, DB, checkIndexes=ci) == []
        assert check(A, DB, "s", checkIndexes=ci) == []
        assert check(A, DB, "u", checkIndexes=ci) == []
        assert check(A, "other", checkIndexes=ci) == []

    # InconsistentIndex: an index built straight on shard1 only
    sh[1].ok({"createIndexes": "s", "$db": DB, "indexes": [{"key": {"v": 1}, "name": "v_1"}]})
    assert check(A, DB, "s") == []          # indexes are compared only with checkIndexes
    found = check(A, DB, "s", checkIndexes=True)
    assert types(found) == ["InconsistentIndex"], found
    info = found[0]["details"]["info"]
    assert found[0]["details"]["namespace"] == "app.s", found
    assert info["indexName"] == "v_1" and info["missingFromShards"] == ["shard0"], info
    assert info["inconsistentProperties"] == [], info
    # the same name with another key on shard0: inconsistent properties
    sh[0].ok({"createIndexes": "s", "$db": DB, "indexes": [{"key": {"v": -1}, "name": "v_1"}]})
    found = check(A, DB, "s", checkIndexes=True)
    assert types(found) == ["InconsistentIndex"], found
    info = found[0]["details"]["info"]
    assert info["missingFromShards"] == [], info
    assert sorted(p["v"]["v"] for p in info["inconsistentProperties"] if p["k"] == "key") == [-1, 1], info
    sh[0].ok({"dropIndexes": "s", "$db": DB, "index": "v_1"})
    sh[1].ok({"dropIndexes": "s", "$db": DB, "index": "v_1"})
    assert check(A, DB, "s", checkIndexes=True) == []

    # MissingShardKeyIndex: shard1 (owns chunks) loses its shard-key index
    sh[1].ok({"dropIndexes": "s", "$db": DB, "index": "x_1"})
    found = check(A, DB, "s")
    assert types(found) == ["MissingShardKeyIndex"], found
    assert found[0]["details"] == {"namespace": "app.s", "shard": "shard1", "shardKey": {"x": 1}}, found
    sh[1].ok({"createIndexes": "s", "$db": DB, "indexes": [{"key": {"x": 1}, "name": "x_1"}]})
    assert check(A, DB, "s", checkIndexes=True) == []

    # CollectionUUIDMismatch: shard2 owns nothing of app.s but holds one of its own
    sh[2].ok({"create": "s", "$db": DB})
    found = check(A, DB, "s")
    assert types(found) == ["CollectionUUIDMismatch"], found
    d = found[0]["details"]
    assert d["shard"] == "shard2" and d["namespace"] == "app.s", d
    local = sh[2].ok({"listCollections": 1, "$db": DB, "filter": {"name": "s"}})["cursor"]["firstBatch"][0]
    assert d["localUUID"] == local["info"]["uuid"], (d, local)
    cat = A.ok({"find": "collections", "$db": "config", "filter": {"_id": "app.s"}})["cursor"]["firstBatch"][0]
    assert d["uuid"] == cat["uuid"] and d["uuid"] != d["localUUID"], (d, cat)
    sh[2].ok({"drop": "s", "$db": DB})

    # MisplacedCollection: an unsharded collection with data on a shard that is not primary
    sh[2].ok({"insert": "stray", "$db": DB, "documents": [{"_id": 1}, {"_id": 2}]})
    found = check(A, DB)
    assert types(found) == ["MisplacedCollection"], found
    d = found[0]["details"]
    assert d["namespace"] == "app.stray" and d["shard"] == "shard2" and d["numDocs"] == 2, d
    assert check(A, DB, "s") == []             # other collections are not looked at
    assert check(A, "other") == []             # nor other databases
    assert types(check(A)) == ["MisplacedCollection"]
    sh[2].ok({"drop": "stray", "$db": DB})

    # MissingLocalCollection: a shard that owns chunks lost its collection
    sharded_two_shards(A, "m")
    sh[1].ok({"drop": "m", "$db": DB})
    found = check(A, DB, "m")
    assert types(found) == ["MissingLocalCollection"], found
    assert found[0]["details"]["shard"] == "shard1", found

    # internal halves are refused through the router
    A.err({"_configsvrCheckMetadataConsistency": 1, "$db": "admin"}, code=13)
    A.err({"_shardsvrCheckMetadataConsistencyParticipant": DB, "primaryShard": "shard0",
           "collections": [], "$db": "admin"}, code=13)
    # bad levels
    A.err({"checkMetadataConsistency": "s", "$db": "admin"}, code=73)
    A.err({"checkMetadataConsistency": 1, "$db": DB, "bogus": 1})


def bson_int_doc(field, value):
    """{field: int32 value} as BSON bytes."""
    body = b"\x10" + field.encode() + b"\x00" + struct.pack("<i", value)
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


@test
def test_check_metadata_consistency_catalog(t):
    cl, A, _ = setup(t)
    colls = ["g", "o", "mn", "mx", "mr", "ck", "z"]
    for c in colls:
        ns = DB + "." + c
        A.ok({"shardCollection": ns, "key": {"x": 1}, "$db": "admin"})
        A.ok({"split": ns, "middle": {"x": 0}, "$db": "admin"})
        A.ok({"split": ns, "middle": {"x": 10}, "$db": "admin"})
    A.ok({"addShardToZone": "shard0", "zone": "A", "$db": "admin"})
    A.ok({"updateZoneKeyRange": DB + ".z", "min": {"x": 0}, "max": {"x": 10}, "zone": "A", "$db": "admin"})
    A.ok({"updateZoneKeyRange": DB + ".z", "min": {"x": 20}, "max": {"x": 30}, "zone": "A", "$db": "admin"})
    A.ok({"enableSharding": "gone", "primaryShard": "shard1", "$db": "admin"})
    A.ok({"shardCollection": "gone.h", "key": {"x": 1}, "$db": "admin"})
    assert check(A, checkIndexes=True) == []

    # break the catalog while the config server is stopped (and skip lib's tiling check)
    t.catalog_corrupted = True
    cl.config.stop()
    db = sqlite3.connect(os.path.join(cl.config.dbpath, "config.db"))

    def chunks(c):
        return db.execute("SELECT id, min, max, min_enc, max_enc FROM chunks WHERE ns = ? ORDER BY min_enc",
                          (DB + "." + c,)).fetchall()
    g = chunks("g")
    db.execute("DELETE FROM chunks WHERE id = ?", (g[1][0],))                    # gap [0, 10)
    o = chunks("o")
    db.execute("UPDATE chunks SET max = ?, max_enc = ? WHERE id = ?", (o[1][2], o[1][4], o[0][0]))
    db.execute("DELETE FROM chunks WHERE id = ?", (chunks("mn")[0][0],))        # no MinKey
    db.execute("DELETE FROM chunks WHERE id = ?", (chunks("mx")[2][0],))        # no MaxKey
    db.execute("DELETE FROM chunks WHERE ns = ?", (DB + ".mr",))                # no routing table
    db.execute("UPDATE chunks SET min = ? WHERE id = ?", (bson_int_doc("y", 0), chunks("ck")[1][0]))
    z = db.execute("SELECT id, max, max_enc FROM tags WHERE ns = ? ORDER BY min_enc", (DB + ".z",)).fetchall()
    db.execute("UPDATE tags SET max = ?, max_enc = ? WHERE id = ?", (z[1][1], z[1][2], z[0][0]))
    db.execute("UPDATE tags SET min = ? WHERE id = ?", (bson_int_doc("y", 20), z[1][0]))
    db.execute("DELETE FROM databases WHERE name = 'gone'")
    db.commit()
    db.close()
    cl.config.start()

    def one(c, ty):
        found = check(A, DB, c)
        assert types(found) == [ty], (c, found)
        d = found[0]["details"]
        assert d["namespace"] == DB + "." + c, d
        return d
    d = one("g", "RoutingTableRangeGap")
    assert d["chunkA"]["max"] == {"x": 0} and d["chunkB"]["min"] == {"x": 10}, d
    d = one("o", "RoutingTableRangeOverlap")
    assert d["chunkA"]["max"] == {"x": 10} and d["chunkB"]["min"] == {"x": 0}, d
    d = one("mn", "RoutingTableMissingMinKey")
    assert d["minKeyObj"] == {"x": 0}, d
    d = one("mx", "RoutingTableMissingMaxKey")
    assert d["maxKeyObj"] == {"x": 10}, d
    d = one("mr", "MissingRoutingTable")
    assert "collectionUUID" in d, d
    d = one("ck", "CorruptedChunkShardKey")
    assert d["chunk"]["min"] == {"y": 0} and d["shardKeyPattern"] == {"x": 1}, d
    found = check(A, DB, "z")
    assert types(found) == ["CorruptedZoneShardKey", "ZonesRangeOverlap"], found
    ov = of_type(found, "ZonesRangeOverlap")[0]["details"]
    assert ov["zoneA"]["max"] == {"x": 30} and ov["zoneB"]["max"] == {"x": 30}, ov
    # the database level lists all of them; the cluster level adds the hidden collection
    assert len(check(A, DB)) == 8
    found = check(A)
    assert len(found) == 9, found
    hidden = of_type(found, "HiddenShardedCollection")
    assert len(hidden) == 1 and hidden[0]["details"]["namespace"] == "gone.h", hidden
    assert hidden[0]["details"]["collection"]["key"] == {"x": 1}, hidden



def held_retry(cl, A, cmd, between):
    """Runs cmd through router A with its retry held (hangIndexDdlBeforeRetry): once A's
    first attempt is in (a shard applied, another answered StaleConfig), between() runs,
    then the retry goes."""
    ac = cl.routers[0].client()
    n = fp(ac, "hangIndexDdlBeforeRetry")
    res = {}

    def run():
        c = Client(cl.routers[0].url, timeout_ms=60000)
        try:
            res["r"] = c.cmd(cmd)
        finally:
            c.close()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    fp_wait(ac, "hangIndexDdlBeforeRetry", n + 1)
    between()
    fp(ac, "hangIndexDdlBeforeRetry", "off")
    th.join(60)
    assert not th.is_alive(), "index command never finished"
    ac.close()
    assert res["r"].get("ok") == 1, res
    return res["r"]


@test
def test_index_ddl_retry_resends_to_shards_that_applied(t):
    # A migration's index sync (_recvChunkSetIndexes) can make a shard that already applied
    # an index command equal to a donor that had not yet; the router's retry after the
    # donor's StaleConfig must then send the command there again. Here: A's cache is stale
    # for shard1 only (B moved one of shard1's chunks to shard2); shard0 applies in the first
    # attempt; while A's retry is held, shard0's index is undone behind its back (what the
    # sync would do); the retry must restore it. Old routers skipped shard0.
    cl, A, B = setup(t, shards=3)
    ns = DB + ".r"
    A.ok({"shardCollection": ns, "key": {"x": 1}, "$db": "admin"})
    for m in (0, 100):
        A.ok({"split": ns, "middle": {"x": m}, "$db": "admin"})
    A.ok({"moveChunk": ns, "find": {"x": 0}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    A.ok({"moveChunk": ns, "find": {"x": 100}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    A.ok({"insert": "r", "$db": DB, "documents": [{"_id": i, "x": i} for i in (-5, 5, 105)]})
    assert len(A.find_all("r", DB, {})) == 3          # A caches: shard0 | shard1 | shard1
    B.ok({"moveChunk": ns, "find": {"x": 100}, "to": "shard2", "_waitForDelete": True, "$db": "admin"})
    s0 = cl.shards[0].client()

    def undo_create():
        assert "y_1" in shard_indexes(cl, 0, "r"), shard_indexes(cl, 0, "r")
        s0.ok({"dropIndexes": "r", "$db": DB, "index": "y_1"})
    held_retry(cl, A, {"createIndexes": "r", "$db": DB, "indexes": [{"key": {"y": 1}, "name": "y_1"}]},
               undo_create)
    for i in range(3):
        assert "y_1" in shard_indexes(cl, i, "r"), (i, shard_indexes(cl, i, "r"))
    # the same for dropIndexes: stale again for shard1 (B moves [0, 100) to shard2)
    B.ok({"moveChunk": ns, "find": {"x": 0}, "to": "shard2", "_waitForDelete": True, "$db": "admin"})

    def undo_drop():
        assert "y_1" not in shard_indexes(cl, 0, "r"), shard_indexes(cl, 0, "r")
        s0.ok({"createIndexes": "r", "$db": DB, "indexes": [{"key": {"y": 1}, "name": "y_1"}]})
    held_retry(cl, A, {"dropIndexes": "r", "$db": DB, "index": "y_1"}, undo_drop)
    for i in range(3):
        assert "y_1" not in shard_indexes(cl, i, "r"), (i, shard_indexes(cl, i, "r"))
    s0.close()
    assert check(A, checkIndexes=True) == []


if __name__ == "__main__":
    main()
