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


if __name__ == "__main__":
    main()
