#!/usr/bin/env python3
"""
test_zones.py — zone commands (notes §4.4) through the router as mongos
forwards them, and their state read back through find on config.shards (tags) and
config.tags: addShardToZone / removeShardFromZone ($addToSet / $pull, ShardNotFound,
ZoneStillInUse for the last shard of a zone a range uses), updateZoneKeyRange (prefix
bounds extended with MinKey, ShardKeyNotFound, ZoneNotFound, RangeOverlapConflict, an
identical re-add accepted, zone null removes, ranges of a collection not sharded yet,
hashed fields need NumberLong), mongos' internal names on the config server, and
removeShard refusing the last shard of a used zone.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

NS = "app.z"


def adm(doc):
    d = dict(doc)
    d["$db"] = "admin"
    return d


def shard_tags(c):
    docs = c.ok({"find": "shards", "$db": "config", "filter": {}})["cursor"]["firstBatch"]
    return {d["_id"]: d["tags"] for d in docs}


def tags(c):
    return c.ok({"find": "tags", "$db": "config", "filter": {}})["cursor"]["firstBatch"]


@test
def test_zone_commands(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    c.ok(adm({"enableSharding": "app", "primaryShard": "shard0"}))
    c.ok(adm({"shardCollection": NS, "key": {"a": 1, "b": 1}}))

    # shards in zones
    c.ok(adm({"addShardToZone": "shard0", "zone": "EU"}))
    c.ok(adm({"addShardToZone": "shard0", "zone": "EU"}))         # $addToSet: no duplicate
    c.ok(adm({"addShardToZone": "shard1", "zone": "US"}))
    c.ok(adm({"addShardToZone": "shard1", "zone": "EU"}))
    assert shard_tags(c) == {"shard0": ["EU"], "shard1": ["US", "EU"]}, shard_tags(c)
    c.err(adm({"addShardToZone": "shard9", "zone": "EU"}), 70)     # ShardNotFound
    c.err(adm({"addShardToZone": "shard0"}), 9)                     # zone missing
    c.err(adm({"addShardToZone": "shard0", "zone": ""}), 2)
    c.err(adm({"removeShardFromZone": "shard9", "zone": "EU"}), 70)

    # ranges: a prefix of the key is extended with MinKey
    c.ok(adm({"updateZoneKeyRange": NS, "min": {"a": 0}, "max": {"a": 10}, "zone": "EU"}))
    tg = tags(c)
    assert len(tg) == 1, tg
    assert tg[0]["ns"] == NS and tg[0]["tag"] == "EU", tg
    assert tg[0]["min"] == {"a": 0, "b": MINKEY} and tg[0]["max"] == {"a": 10, "b": MINKEY}, tg
    assert "$oid" in tg[0]["_id"], tg
    # identical re-add: ok, nothing added; same range under another zone: overlap
    c.ok(adm({"updateZoneKeyRange": NS, "min": {"a": 0}, "max": {"a": 10}, "zone": "EU"}))
    assert len(tags(c)) == 1
    c.err(adm({"updateZoneKeyRange": NS, "min": {"a": 0}, "max": {"a": 10}, "zone": "US"}), 178)
    c.err(adm({"updateZoneKeyRange": NS, "min": {"a": 5}, "max": {"a": 20}, "zone": "US"}), 178)
    c.err(adm({"updateZoneKeyRange": NS, "min": {"a": -5}, "max": {"a": 1}, "zone": "US"}), 178)
    c.err(adm({"updateZoneKeyRange": NS, "min": {"a": 2, "b": 0}, "max": {"a": 3}, "zone": "US"}), 178)
    # adjacent is fine
    c.ok(adm({"updateZoneKeyRange": NS, "min": {"a": 10}, "max": {"a": 20}, "zone": "US"}))
    c.ok(adm({"updateZoneKeyRange": NS, "min": {"a": MINKEY}, "max": {"a": 0}, "zone": "US"}))
    assert [(d["min"]["a"], d["tag"]) for d in tags(c)] == [(MINKEY, "US"), (0, "EU"), (10, "US")], tags(c)
    # errors
    c.err(adm({"updateZoneKeyRange": NS, "min": {"a": 30}, "max": {"a": 40}, "zone": "ASIA"}), 177)
    c.err(adm({"updateZoneKeyRange": NS, "min": {"b": 30}, "max": {"b": 40}, "zone": "EU"}), 61)
    c.err(adm({"updateZoneKeyRange": NS, "min": {"a": 40}, "max": {"a": 30}, "zone": "EU"}), 2)
    c.err(adm({"updateZoneKeyRange": NS, "min": {"a": 30}, "zone": "EU"}), 9)
    c.err(adm({"updateZoneKeyRange": NS, "min": {"a": 30}, "max": {"a": 40}}), 9)
    c.err(adm({"updateZoneKeyRange": "nodot", "min": {"a": 30}, "max": {"a": 40}, "zone": "EU"}), 73)

    # last shard of a zone a range uses cannot leave it; another shard of the zone can
    c.err(adm({"removeShardFromZone": "shard1", "zone": "US"}), 163)   # ZoneStillInUse
    c.ok(adm({"removeShardFromZone": "shard0", "zone": "EU"}))          # shard1 still EU
    r = c.err(adm({"removeShardFromZone": "shard1", "zone": "EU"}), 163)
    assert "range" in r["errmsg"], r
    c.ok(adm({"removeShardFromZone": "shard0", "zone": "NOPE"}))      # not there: no-op
    # removeShard: refused while shard1 is the only shard of used zones
    c.err(adm({"removeShard": "shard1"}), 163)

    # zone null removes exactly that range (prefix extended the same way); absent: ok
    c.ok(adm({"updateZoneKeyRange": NS, "min": {"a": 0}, "max": {"a": 10}, "zone": None}))
    c.ok(adm({"updateZoneKeyRange": NS, "min": {"a": 0}, "max": {"a": 10}, "zone": None}))
    c.ok(adm({"updateZoneKeyRange": NS, "min": {"a": 10}, "max": {"a": 20}, "zone": None}))
    c.ok(adm({"updateZoneKeyRange": NS, "min": {"a": MINKEY}, "max": {"a": 0}, "zone": None}))
    assert tags(c) == []
    c.ok(adm({"removeShardFromZone": "shard1", "zone": "EU"}))
    c.ok(adm({"removeShardFromZone": "shard1", "zone": "US"}))
    assert shard_tags(c) == {"shard0": [], "shard1": []}, shard_tags(c)


@test
def test_zone_unsharded_hashed_and_internal_names(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    cfg = cl.config.client()
    # mongos' internal names are served by the config server
    cfg.ok(adm({"_configsvrAddShardToZone": "shard0", "zone": "Z"}))
    cfg.ok(adm({"_configsvrUpdateZoneKeyRange": "other.u", "min": {"x": 1}, "max": {"x": 5}, "zone": "Z"}))
    # a collection not sharded (not even existing): the range is kept as given
    tg = tags(c)
    assert len(tg) == 1 and tg[0]["min"] == {"x": 1} and tg[0]["max"] == {"x": 5}, tg
    c.err(adm({"updateZoneKeyRange": "other.u", "min": {"x": 3}, "max": {"x": 9}, "zone": "Z"}), 178)
    c.err(adm({"updateZoneKeyRange": "other.v", "min": {"x": 3}, "max": {"y": 9}, "zone": "Z"}), 2)
    cfg.ok(adm({"_configsvrUpdateZoneKeyRange": "other.u", "min": {"x": 1}, "max": {"x": 5}, "zone": None}))
    cfg.ok(adm({"_configsvrRemoveShardFromZone": "shard0", "zone": "Z"}))
    assert tags(c) == [] and shard_tags(c)["shard0"] == []
    # hashed field: bounds must be NumberLong / MinKey / MaxKey
    c.ok(adm({"shardCollection": "app.h", "key": {"h": "hashed"}}))
    c.ok(adm({"addShardToZone": "shard1", "zone": "H"}))
    c.err(adm({"updateZoneKeyRange": "app.h", "min": {"h": 1}, "max": {"h": 5}, "zone": "H"}), 72)
    c.ok(adm({"updateZoneKeyRange": "app.h", "min": {"h": long(1)}, "max": {"h": MAXKEY}, "zone": "H"}))
    # dropping the collection removes its zone ranges (cat_coll_delete)
    c.ok({"drop": "h", "$db": "app"})
    assert tags(c) == []


if __name__ == "__main__":
    main()
