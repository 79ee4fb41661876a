#!/usr/bin/env python3
"""
test_move_primary_leftovers.py — a copy movePrimary failed to drop on the old primary never
comes back (found by the chaos soak, seed 4: `make chaos SECONDS=120 SEED=4` reported
"mp.u/mp.v after movePrimary and renames: u has 40, v has 40 documents"). movePrimary's
step (3) drops the old copies on the old primary; when that shard is down then, the drop
fails and is only logged, leaving the copy — harmless while the shard is not the primary,
but a later movePrimary back to it used to copy the current collections beside it, so a
collection renamed (or dropped) in the meantime reappeared under its old name. Now the new
primary's own unsharded collections of the database are dropped before the copy
(configsvr/cmd_moveprimary.c drop_leftovers). The failed cleanup is made deterministic with
failCommand on the old primary's drop.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403


def adm(doc):
    return dict(doc, **{"$db": "admin"})


@test
def test_move_primary_back_drops_leftover_copies(t):
    cl = t.cluster(shards=2, routers=1)
    c = cl.client(0)
    s0 = cl.shards[0].client()
    c.ok(adm({"enableSharding": "mp", "primaryShard": "shard0"}))
    c.ok({"insert": "u", "$db": "mp", "documents": [{"_id": i} for i in range(10)]})
    # the old primary refuses the cleanup drop once, as a shard that is down would
    s0.ok({"configureFailPoint": "failCommand", "$db": "admin", "mode": {"times": 1},
           "data": {"failCommands": ["drop"], "errorCode": 6, "failInternalCommands": True}})
    c.ok(adm({"movePrimary": "mp", "to": "shard1"}))
    assert len(s0.find_all("u", "mp")) == 10, "the failed cleanup left the copy on shard0"
    c.ok(adm({"renameCollection": "mp.u", "to": "mp.v"}))
    c.ok(adm({"movePrimary": "mp", "to": "shard0"}))
    assert len(c.find_all("v", "mp")) == 10
    got = c.find_all("u", "mp")
    assert got == [], "mp.u, renamed to mp.v, came back with %d documents" % len(got)
    names = sorted(x["name"] for x in c.ok({"listCollections": 1, "$db": "mp"})["cursor"]["firstBatch"])
    assert names == ["v"], names


@test
def test_move_primary_leaves_sharded_collections_alone(t):
    cl = t.cluster(shards=2, routers=1)
    c = cl.client(0)
    c.ok(adm({"enableSharding": "mp", "primaryShard": "shard0"}))
    c.ok(adm({"shardCollection": "mp.s", "key": {"k": 1}}))
    c.ok({"insert": "s", "$db": "mp", "documents": [{"_id": i, "k": i} for i in range(20)]})
    c.ok(adm({"split": "mp.s", "middle": {"k": 10}}))
    c.ok(adm({"moveChunk": "mp.s", "find": {"k": 15}, "to": "shard1"}))
    c.ok({"insert": "u", "$db": "mp", "documents": [{"_id": 1}]})
    c.ok(adm({"movePrimary": "mp", "to": "shard1"}))
    c.ok(adm({"movePrimary": "mp", "to": "shard0"}))
    assert len(c.find_all("s", "mp")) == 20
    assert len(cl.shards[1].client().find_all("s", "mp")) == 10
    assert len(c.find_all("u", "mp")) == 1


if __name__ == "__main__":
    main()
