#!/usr/bin/env python3
"""
test_unknown_fields.py — the CRUD commands refuse a field they do not
know, as MongoDB 7.0's IDL parser does (40415 Location40415, "BSON field '<cmd>.<field>' is
an unknown field."), on a shard and through the router alike; so does a write statement
with an unknown field (`sort` in an update statement is 7.1+). The generic arguments every
MongoDB command takes (maxTimeMS, writeConcern, readConcern, comment, lsid,
$readPreference ...) and the fields MongoDB knows but minishard ignores stay accepted, and
a refused batch runs none of its statements. The catalog and cursor commands MongoDB 7.0
parses strictly (create, drop, dropDatabase, createIndexes, dropIndexes, listIndexes,
listCollections, listDatabases, killCursors, explain and its inner command, the shard's
internal _addShard / _flushRoutingTableCacheUpdates, the config server's config-database
find / getMore / killCursors / count / update) refuse unknown fields the same way.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "uf"
GENERIC = {"maxTimeMS": 5000, "writeConcern": {"w": 1}, "readConcern": {"level": "local"},
           "comment": "c", "lsid": {"id": 1}, "$readPreference": {"mode": "primary"}}


def setup(t):
    cl = t.cluster(shards=2)
    R = cl.client()
    S = t.shardd("single").client()
    R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": DB + ".s", "key": {"_id": 1}, "$db": "admin"})
    R.ok({"split": DB + ".s", "middle": {"_id": 5}, "$db": "admin"})
    for X in (R, S):
        for c in ("s", "u"):
            X.ok({"insert": c, "$db": DB, "documents": [{"_id": i, "a": i} for i in range(10)]})
    return cl, R, S


def crud_cmds(c):
    """One valid command of each strict CRUD command on collection c."""
    return [
        {"find": c, "filter": {}},
        {"count": c, "query": {}},
        {"distinct": c, "key": "a"},
        {"insert": c, "documents": [{"x": 1}]},
        {"update": c, "updates": [{"q": {"_id": 1}, "u": {"$set": {"b": 1}}}]},
        {"delete": c, "deletes": [{"q": {"_id": 100}, "limit": 1}]},
        {"findAndModify": c, "query": {"_id": 2}, "update": {"$set": {"b": 2}}},
        {"findandmodify": c, "query": {"_id": 3}, "update": {"$set": {"b": 3}}},
    ]


@test
def test_unknown_top_level_field_refused(t):
    """{find: "c", filter: {}, bogus: 1} and the like: 40415 naming the field, on a shard
    and through the router, sharded or not; nothing is written."""
    cl, R, S = setup(t)
    for X in (R, S):
        for c in ("s", "u"):
            for cmd in crud_cmds(c):
                cmd = dict(cmd, bogus=1, **{"$db": DB})
                e = X.err(cmd, 40415)
                assert e["codeName"] == "Location40415", e
                assert e["errmsg"] == "BSON field '%s.bogus' is an unknown field." % list(cmd)[0], e
            assert X.find_all(c, DB, {"x": 1}) == [], c
            assert X.find_all(c, DB, {"b": {"$exists": True}}) == [], c
        # getMore too (refused before the cursor is touched)
        r = X.ok({"find": "s", "$db": DB, "filter": {}, "batchSize": 2})
        cid = r["cursor"]["id"]
        e = X.err({"getMore": cid, "collection": "s", "$db": DB, "bogus": 1}, 40415)
        assert e["errmsg"] == "BSON field 'getMore.bogus' is an unknown field.", e
        r = X.ok({"getMore": cid, "collection": "s", "$db": DB, "term": 1})
        assert len(r["cursor"]["nextBatch"]) == 8, r


@test
def test_unknown_statement_field_refused(t):
    """An update statement with `sort` (7.1+) or any unknown name, a delete statement with
    `multi`: 40415 as a command error, and no statement of the batch runs — not even the
    ones before it."""
    cl, R, S = setup(t)
    for X in (R, S):
        for c in ("s", "u"):
            ok_stmt = {"q": {"_id": 1}, "u": {"$set": {"b": 1}}}
            e = X.err({"update": c, "$db": DB, "updates": [
                ok_stmt, {"q": {"_id": 7}, "u": {"$set": {"b": 1}}, "sort": {"_id": 1}}]}, 40415)
            assert e["codeName"] == "Location40415", e
            assert e["errmsg"] == "BSON field 'update.updates.sort' is an unknown field.", e
            assert "writeErrors" not in e, e
            e = X.err({"delete": c, "$db": DB, "deletes": [
                {"q": {"_id": 1}, "limit": 1}, {"q": {"_id": 2}, "limit": 1, "multi": True}]},
                40415)
            assert e["errmsg"] == "BSON field 'delete.deletes.multi' is an unknown field.", e
            assert X.find_all(c, DB, {"b": {"$exists": True}}) == [], c
            assert len(X.find_all(c, DB)) == 10, c
            # the fields MongoDB 7.0 knows in a statement are accepted
            r = X.ok({"update": c, "$db": DB, "updates": [
                {"q": {"_id": 1}, "u": {"$set": {"b": 1}}, "upsert": False, "multi": False,
                 "collation": {"locale": "simple"}, "c": {"x": 1}}]})
            assert r["n"] == 1, r
            r = X.ok({"delete": c, "$db": DB, "deletes": [
                {"q": {"_id": 1}, "limit": 1, "collation": {"locale": "simple"}}]})
            assert r["n"] == 1, r


@test
def test_generic_and_known_fields_accepted(t):
    """The generic arguments are accepted by every CRUD command, on a shard and through
    the router; so are fields MongoDB knows that minishard ignores."""
    cl, R, S = setup(t)
    for X in (R, S):
        for c in ("s", "u"):
            for cmd in crud_cmds(c):
                X.ok(dict(cmd, **GENERIC, **{"$db": DB}))
        X.ok({"find": "s", "$db": DB, "filter": {}, "collation": {"locale": "simple"},
              "allowDiskUse": True, "noCursorTimeout": False, "allowPartialResults": False,
              "let": {"v": 1}, "returnKey": False, "showRecordId": False})
        X.ok({"count": "s", "$db": DB, "query": {}, "collation": {"locale": "simple"}})
        X.ok({"distinct": "s", "$db": DB, "key": "a", "collation": {"locale": "simple"}})
        X.ok({"insert": "s", "$db": DB, "documents": [{"_id": 100}],
              "bypassDocumentValidation": False})
        X.ok({"update": "s", "$db": DB, "updates": [{"q": {"_id": 100}, "u": {"$set": {"z": 1}}}],
              "let": {"v": 1}, "bypassDocumentValidation": False})
        X.ok({"delete": "s", "$db": DB, "deletes": [{"q": {"_id": 100}, "limit": 1}],
              "let": {"v": 1}})
        X.ok({"findAndModify": "s", "$db": DB, "query": {"_id": 4}, "update": {"$set": {"z": 1}},
              "collation": {"locale": "simple"}, "bypassDocumentValidation": False})


def catalog_cmds(c):
    """One valid command of each strict catalog / cursor command on collection c (of DB),
    in an order that leaves c as it was: what each refused copy would have changed is
    checked by the caller."""
    return [
        {"create": c + "_new"},
        {"createIndexes": c, "indexes": [{"key": {"k": 1}, "name": "k_1"}]},
        {"listIndexes": c},
        {"dropIndexes": c, "index": "k_1"},
        {"listCollections": 1},
        {"killCursors": c, "cursors": [long(424242)]},
        {"drop": c + "_new"},
        {"dropDatabase": 1, "$db": DB + "_gone"},
    ]


@test
def test_catalog_commands_unknown_field_refused(t):
    """create, drop, dropDatabase, createIndexes, dropIndexes, listIndexes,
    listCollections and killCursors are IDL-strict in MongoDB 7.0: an unknown field is
    40415 naming it, on a shard and through the router, and the command does nothing (no
    index built or dropped, no collection created or dropped)."""
    cl, R, S = setup(t)
    for X in (R, S):
        X.ok({"createIndexes": "u", "$db": DB, "indexes": [{"key": {"a": 1}, "name": "a_1"}]})
        for cmd in catalog_cmds("u"):
            cmd = dict(cmd)
            cmd.setdefault("$db", DB)
            name = list(cmd)[0]
            e = X.err(dict(cmd, bogus=1), 40415)
            assert e["codeName"] == "Location40415", e
            assert e["errmsg"] == "BSON field '%s.bogus' is an unknown field." % name, e
        names = {ix["name"] for ix in X.ok({"listIndexes": "u", "$db": DB})["cursor"]["firstBatch"]}
        assert names == {"_id_", "a_1"}, names
        e = X.err({"dropIndexes": "u", "$db": DB, "index": "a_1", "bogus": 1}, 40415)
        assert "a_1" in {ix["name"] for ix in
                         X.ok({"listIndexes": "u", "$db": DB})["cursor"]["firstBatch"]}
        X.err({"drop": "u", "$db": DB, "bogus": 1}, 40415)
        X.err({"dropDatabase": 1, "$db": DB, "bogus": 1}, 40415)
        colls = {c["name"] for c in X.ok({"listCollections": 1, "$db": DB})["cursor"]["firstBatch"]}
        assert {"s", "u"} <= colls and "u_new" not in colls, colls
        assert len(X.find_all("u", DB)) == 10


@test
def test_catalog_commands_generic_and_known_fields_accepted(t):
    """The generic arguments, and the 7.0 fields minishard ignores, stay accepted by the
    newly strict commands, on a shard and through the router."""
    cl, R, S = setup(t)
    for X in (R, S):
        for cmd in catalog_cmds("u"):
            X.ok(dict(cmd, **dict({"$db": DB}, **GENERIC)) if "$db" not in cmd
                 else dict(cmd, **GENERIC))
        X.ok({"create": "k", "$db": DB, "collation": {"locale": "simple"}})
        X.ok({"createIndexes": "k", "$db": DB, "indexes": [{"key": {"k": 1}, "name": "k_1"}],
              "commitQuorum": "votingMembers", "ignoreUnknownIndexOptions": False})
        X.ok({"listIndexes": "k", "$db": DB, "cursor": {}, "includeBuildUUIDs": False})
        X.ok({"listCollections": 1, "$db": DB, "cursor": {}, "nameOnly": True,
              "authorizedCollections": False})
        X.ok({"dropIndexes": "k", "$db": DB, "index": "k_1"})
        X.ok({"drop": "k", "$db": DB})


@test
def test_shard_only_commands_strict(t):
    """On the shard: listDatabases, explain (its own fields, and the explained command by
    that command's rules), and the internal _addShard / _flushRoutingTableCacheUpdates."""
    cl, R, S = setup(t)
    e = S.err({"listDatabases": 1, "$db": "admin", "bogus": 1}, 40415)
    assert e["errmsg"] == "BSON field 'listDatabases.bogus' is an unknown field.", e
    S.ok({"listDatabases": 1, "$db": "admin", "nameOnly": True, "authorizedDatabases": False})
    e = S.err({"explain": {"find": "u", "filter": {}}, "$db": DB, "bogus": 1}, 40415)
    assert e["errmsg"] == "BSON field 'explain.bogus' is an unknown field.", e
    for inner in ({"find": "u", "filter": {}}, {"count": "u", "query": {}},
                  {"distinct": "u", "key": "a"}):
        e = S.err({"explain": dict(inner, bogus=1), "$db": DB}, 40415)
        assert e["errmsg"] == "BSON field '%s.bogus' is an unknown field." % list(inner)[0], e
        S.ok({"explain": dict(inner, collation={"locale": "simple"}), "$db": DB,
              "verbosity": "executionStats", "comment": "c"})
    S0 = cl.shards[0].client()
    e = S0.err({"_flushRoutingTableCacheUpdates": DB + ".s", "$db": "admin", "bogus": 1}, 40415)
    assert e["errmsg"] == "BSON field '_flushRoutingTableCacheUpdates.bogus' is an unknown field.", e
    S0.ok({"_flushRoutingTableCacheUpdates": DB + ".s", "$db": "admin", "syncFromConfig": True})
    fresh_proc = t.shardd("fresh")
    fresh = fresh_proc.client()
    e = fresh.err({"_addShard": 1, "$db": "admin", "bogus": 1, "shardIdentity": {
        "shardName": "x", "clusterId": oid("0123456789abcdef01234567"), "configsvrConnectionString": "tcp://127.0.0.1:1"}},
        40415)
    assert e["errmsg"] == "BSON field '_addShard.bogus' is an unknown field.", e
    # the shard did not take the identity: a cluster can still add it
    R.ok({"addShard": fresh_proc.url, "name": "fresh", "$db": "admin"})


@test
def test_config_database_commands_strict(t):
    """The config server's find, getMore, killCursors, count and update (of the config
    database) refuse unknown fields, directly and through the router."""
    cl, R, S = setup(t)
    C = cl.config.client()
    for X in (R, C):
        for cmd in ({"find": "shards", "filter": {}}, {"count": "shards", "query": {}},
                    {"killCursors": "shards", "cursors": [long(424242)]},
                    {"update": "settings", "updates": [
                        {"q": {"_id": "balancer"}, "u": {"$set": {"mode": "off"}}, "upsert": True}]}):
            cmd = dict(cmd, **{"$db": "config"})
            e = X.err(dict(cmd, bogus=1), 40415)
            assert e["errmsg"] == "BSON field '%s.bogus' is an unknown field." % list(cmd)[0], e
            X.ok(dict(cmd, **GENERIC))
        e = X.err({"update": "settings", "$db": "config", "updates": [
            {"q": {"_id": "balancer"}, "u": {"$set": {"mode": "full"}}, "sort": {"_id": 1}}]}, 40415)
        assert e["errmsg"] == "BSON field 'update.updates.sort' is an unknown field.", e
        r = X.ok({"find": "shards", "$db": "config", "filter": {}, "batchSize": 1,
                  "hint": {"_id": 1}})
        cid = r["cursor"]["id"]
        e = X.err({"getMore": cid, "collection": "shards", "$db": "config", "bogus": 1}, 40415)
        assert e["errmsg"] == "BSON field 'getMore.bogus' is an unknown field.", e
        X.ok({"getMore": cid, "collection": "shards", "$db": "config"})
    doc = C.find_all("settings", "config", {"_id": "balancer"})
    assert doc and doc[0]["mode"] == "off", doc


if __name__ == "__main__":
    main()
