#!/usr/bin/env python3
"""
test_rename_collection.py — renameCollection of an unsharded collection, on a standalone
shard and through the router to the database's primary shard: {renameCollection: "db.a",
to: "db.b", dropTarget?} on the admin database. Documents, indexes and the collection's
uuid move to the new name (and stay there after kill -9 and restart); MongoDB's errors:
NamespaceNotFound 26 (no source), NamespaceExists 48 (target exists, no dropTarget),
IllegalOperation 20 (to itself; across databases; a sharded source or target),
Unauthorized 13 (not on admin), FailedToParse 9 (no `to`), InvalidNamespace 73.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403


def names(c, db):
    r = c.ok({"listCollections": 1, "$db": db})
    return {x["name"]: x for x in r["cursor"]["firstBatch"]}


def ren(frm, to, **kw):
    d = {"renameCollection": frm, "to": to, "$db": "admin"}
    d.update(kw)
    return d


def errors_common(c):
    """The refusals both a shard and the router answer the same way."""
    c.err(ren("app.nothing", "app.x"), 26)
    c.err(ren("app.a", "app.b"), 48)            # b exists
    c.err(ren("app.a", "app.a"), 20)
    c.err(ren("app.a", "other.a"), 20)
    c.err({"renameCollection": "app.a", "to": "app.z", "$db": "app"}, 13)
    c.err({"renameCollection": "app.a", "$db": "admin"}, 9)
    c.err(ren("app.a", "app.system.x"), 73)
    c.err(ren("app.a", "app.b", bogus=1), 40415)


@test
def test_rename_on_a_shard(t):
    s = t.shardd("s0")
    c = s.client()
    c.ok({"insert": "a", "$db": "app", "documents": [{"_id": i, "k": i % 3} for i in range(20)]})
    c.ok({"createIndexes": "a", "$db": "app", "indexes": [{"key": {"k": 1}, "name": "k_1"}]})
    c.ok({"insert": "b", "$db": "app", "documents": [{"_id": "old"}]})
    uuid = names(c, "app")["a"]["info"]["uuid"]
    errors_common(c)
    cur = c.ok({"find": "a", "$db": "app", "batchSize": 2})["cursor"]["id"]
    c.ok(ren("app.a", "app.c"))
    # A cursor of the old name ends, as one on a dropped collection does.
    c.err({"getMore": cur, "collection": "a", "$db": "app"}, 96)
    got = names(c, "app")
    assert sorted(got) == ["b", "c"] and got["c"]["info"]["uuid"] == uuid, got
    assert len(c.find_all("c", "app")) == 20 and c.find_all("a", "app") == []
    r = c.ok({"listIndexes": "c", "$db": "app"})
    assert sorted(i["name"] for i in r["cursor"]["firstBatch"]) == ["_id_", "k_1"], r
    # The index serves the renamed collection: a unique-key duplicate is still refused.
    r = c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 3}]})
    assert r["writeErrors"][0]["code"] == 11000 and "app.c" in r["writeErrors"][0]["errmsg"], r
    assert c.ok({"count": "c", "$db": "app", "query": {"k": 1}})["n"] == 7
    # dropTarget: the existing target goes, in the same transaction.
    c.ok(ren("app.c", "app.b", dropTarget=True))
    assert sorted(names(c, "app")) == ["b"]
    assert sorted(d["_id"] for d in c.find_all("b", "app")) == list(range(20))
    s.kill()
    s.start()
    c = s.client()
    assert sorted(names(c, "app")) == ["b"]
    assert len(c.find_all("b", "app")) == 20
    r = c.ok({"collStats": "b", "$db": "app"})
    assert r["count"] == 20 and r["nindexes"] == 2, r
    # The old name is free again.
    c.ok({"insert": "a", "$db": "app", "documents": [{"_id": 1}]})
    assert c.find_all("a", "app") == [{"_id": 1}]


@test
def test_rename_through_the_router(t):
    cl = t.cluster(shards=2)
    c = cl.client(0)
    c.ok({"enableSharding": "app", "primaryShard": "shard1", "$db": "admin"})
    c.ok({"insert": "a", "$db": "app", "documents": [{"_id": i} for i in range(10)]})
    c.ok({"insert": "b", "$db": "app", "documents": [{"_id": "t"}]})
    c.ok({"shardCollection": "app.s", "key": {"_id": 1}, "$db": "admin"})
    c.ok({"insert": "s", "$db": "app", "documents": [{"_id": 1}]})
    errors_common(c)
    c.err(ren("nodb.a", "nodb.b"), 26)
    c.err(ren("app.s", "app.s2"), 20)                   # sharded source
    c.err(ren("app.a", "app.s", dropTarget=True), 20)   # sharded target
    c.ok(ren("app.a", "app.r"))
    assert sorted(d["_id"] for d in c.find_all("r", "app")) == list(range(10))
    assert c.find_all("a", "app") == []
    primary = cl.shards[1].client()
    assert len(primary.find_all("r", "app")) == 10 and "a" not in names(primary, "app")
    assert "r" not in names(cl.shards[0].client(), "app")
    c.ok(ren("app.r", "app.b", dropTarget=True))
    assert len(c.find_all("b", "app")) == 10
    assert len(c.find_all("s", "app")) == 1   # the sharded collection untouched


if __name__ == "__main__":
    main()
