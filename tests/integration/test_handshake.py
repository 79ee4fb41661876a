"""
test_handshake.py — what drivers and mongosh send on connect and around every command
over NNG, against a shard, a router and a config server: hello /
isMaster fields and their BSON types per daemon, buildInfo consistent with
maxWireVersion, getParameter, getLog, endSessions, connectionStatus, whatsmyuri,
listDatabases, listCommands, the generic fields drivers add (lsid, $clusterTime,
readConcern, writeConcern, apiVersion, comment, txnNumber), transactions refused with
MongoDB's code, and cursor ids encoded as int64 in every cursor reply.

Types are read from the raw reply bytes (hostile.RawReq), since shardctl's relaxed JSON
prints int32 and int64 alike.
"""
import base64
import re

from hostile import RawReq, Int64, raw_elements
from lib import *


# ---- raw BSON: the type byte of an element ---------------------------------------------

def btype(data, path):
    """The BSON type byte of the element at dotted path in the document data (None if absent)."""
    off = 0
    parts = path.split(".")
    for i, p in enumerate(parts):
        for t, key, v, _ in raw_elements(data, off):
            if key == p:
                if i == len(parts) - 1:
                    return t
                off = v
                break
        else:
            return None
    return None


def raw_call(rr, doc):
    """One command over a raw REQ connection: (decoded reply, raw reply bytes)."""
    from hostile import decode, encode
    raw = rr.call_raw(encode(doc))
    return decode(raw), raw


T_INT32, T_INT64, T_DATE, T_OID, T_BOOL, T_STR, T_DOC, T_ARR = 0x10, 0x12, 0x09, 0x07, 0x08, 0x02, 0x03, 0x04


def daemons(t):
    """A config server, one shard added to it and a router: name -> (proc, kind)."""
    cfg = t.configsvr()
    s = t.shardd("shard0")
    r = t.router(cfg.url)
    r.client().ok({"addShard": s.url, "name": "shard0", "$db": "admin"})
    return {"configsvr": cfg, "shardd": s, "router": r}


# ---- hello -------------------------------------------------------------------------------

HELLO_TYPES = {"maxBsonObjectSize": T_INT32, "maxMessageSizeBytes": T_INT32,
               "maxWriteBatchSize": T_INT32, "localTime": T_DATE,
               "logicalSessionTimeoutMinutes": T_INT32, "minWireVersion": T_INT32,
               "maxWireVersion": T_INT32, "readOnly": T_BOOL,
               "topologyVersion": T_DOC, "topologyVersion.processId": T_OID,
               "topologyVersion.counter": T_INT64}


@test
def test_hello_per_daemon(t):
    ds = daemons(t)
    for kind, p in ds.items():
        rr = RawReq(p.url)
        h, raw = raw_call(rr, {"hello": 1, "helloOk": True, "$db": "admin",
                               "client": {"driver": {"name": "pymongo", "version": "4"},
                                          "os": {"type": "Linux"}},
                               "compression": ["zstd", "zlib", "snappy"],
                               "saslSupportedMechs": "admin.user",
                               "speculativeAuthenticate": {"saslStart": 1}})
        assert h["ok"] == 1.0, (kind, h)
        assert h["isWritablePrimary"] is True and "ismaster" not in h, (kind, h)
        assert h["helloOk"] is True, (kind, h)
        for path, ty in HELLO_TYPES.items():
            assert btype(raw, path) == ty, (kind, path, btype(raw, path), h)
        assert btype(raw, "connectionId") in (T_INT32, T_INT64), (kind, h)
        assert h["maxBsonObjectSize"] == 16777216 and h["maxMessageSizeBytes"] == 48000000, h
        assert h["maxWriteBatchSize"] == 100000 and h["logicalSessionTimeoutMinutes"] == 30, h
        assert h["minWireVersion"] == 0 and h["maxWireVersion"] == 21, h
        assert h["readOnly"] is False and h["topologyVersion"]["counter"] == 0, h
        # No compressor offered, no auth answer, never a replica set.
        for absent in ("compression", "saslSupportedMechs", "speculativeAuthenticate",
                       "setName", "hosts", "arbiterOnly"):
            assert absent not in h, (kind, absent, h)
        if kind == "router":
            assert h["msg"] == "isdbgrid", h
        else:
            assert "msg" not in h, (kind, h)
        if kind == "configsvr":
            assert h["configsvr"] == 2, h
        # The same process answers the same processId; another connection another id.
        rr2 = RawReq(p.url)
        h2, _ = raw_call(rr2, {"hello": 1})
        assert h2["topologyVersion"]["processId"] == h["topologyVersion"]["processId"], (h, h2)
        assert h2["connectionId"] != h["connectionId"], (kind, h, h2)
        assert "helloOk" not in h2, h2
        h3, _ = raw_call(rr, {"hello": 1})
        assert h3["connectionId"] == h["connectionId"], (kind, h, h3)
        rr.close()
        rr2.close()


@test
def test_legacy_names_and_load_balanced(t):
    ds = daemons(t)
    for kind, p in ds.items():
        c = p.client()
        for name in ("isMaster", "ismaster"):
            h = c.ok({name: 1, "helloOk": True})
            assert h["ismaster"] is True and "isWritablePrimary" not in h, (kind, h)
            assert h["helloOk"] is True and h["maxWireVersion"] == 21, h
        c.ok({"hello": 1, "loadBalanced": False})
        r = c.err({"hello": 1, "loadBalanced": True}, code=354)
        assert r["codeName"] == "LoadBalancerSupportMismatch", r


# ---- buildInfo, getParameter, getLog and the other connect-time commands ------------------

@test
def test_build_info(t):
    s = t.shardd()
    rr = RawReq(s.url)
    b, raw = raw_call(rr, {"buildInfo": 1})
    assert b["version"] == "7.0.0" and b["versionArray"] == [7, 0, 0, 0], b
    h, _ = raw_call(rr, {"hello": 1})
    # 7.0 is wire version 21: drivers and mongosh read either.
    assert (b["versionArray"][0], h["maxWireVersion"]) == (7, 21), (b, h)
    assert btype(raw, "versionArray") == T_ARR and btype(raw, "bits") == T_INT32, b
    assert b["modules"] == [] and b["sysInfo"] == "deprecated" and b["bits"] == 64, b
    assert b["debug"] is False and b["maxBsonObjectSize"] == 16777216, b
    assert b["javascriptEngine"] == "none" and b["storageEngines"] == ["sqlite"], b
    assert isinstance(b["gitVersion"], str) and b["gitVersion"], b
    assert re.match(r"^\d+\.\d+\.\d+$", b["minishardVersion"]), b
    b2, _ = raw_call(rr, {"buildinfo": 1})
    assert b2["version"] == "7.0.0", b2
    st, _ = raw_call(rr, {"serverStatus": 1})
    assert st["version"] == b["version"] and st["minishardVersion"] == b["minishardVersion"], st
    rr.close()


@test
def test_get_parameter_and_get_log(t):
    ds = daemons(t)
    for kind, p in ds.items():
        c = p.client()
        r = c.ok({"getParameter": 1, "featureCompatibilityVersion": 1, "$db": "admin"})
        assert r["featureCompatibilityVersion"] == {"version": "7.0"}, (kind, r)
        assert "maxBSONDepth" not in r, r
        r = c.ok({"getParameter": "*"})
        assert r["featureCompatibilityVersion"] == {"version": "7.0"}, r
        assert r["maxBSONDepth"] == 100 and r["enableTestCommands"] is True, r
        r = c.ok({"getParameter": {"showDetails": True}, "featureCompatibilityVersion": 1})
        assert r["featureCompatibilityVersion"]["value"] == {"version": "7.0"}, r
        r = c.err({"getParameter": 1, "noSuchParameter": 1}, code=72)
        assert r["errmsg"] == "no option found to get" and r["codeName"] == "InvalidOptions", r
        c.err({"getParameter": 1}, code=72)

        r = c.ok({"getLog": "startupWarnings", "$db": "admin"})
        assert r["totalLinesWritten"] == 0 and r["log"] == [], r
        assert "startupWarnings" in c.ok({"getLog": "*"})["names"]
        c.ok({"getLog": "global"})
        c.err({"getLog": "nope"}, code=96)
        c.err({"getLog": 1}, code=14)


@test
def test_sessions_status_uri(t):
    ds = daemons(t)
    for kind, p in ds.items():
        c = p.client()
        c.ok({"endSessions": [{"id": {"$binary": {"base64": "AAAAAAAAAAAAAAAAAAAAAA==",
                                                    "subType": "04"}}}], "$db": "admin"})
        c.err({"endSessions": 1}, code=14)
        r = c.ok({"connectionStatus": 1})
        assert r["authInfo"] == {"authenticatedUsers": [], "authenticatedUserRoles": []}, r
        r = c.ok({"connectionStatus": 1, "showPrivileges": True})
        assert r["authInfo"]["authenticatedUserPrivileges"] == [], r
        # whatsmyuri: the client's own address as the server sees it.
        rr = RawReq(p.url)
        r, _ = raw_call(rr, {"whatsmyuri": 1})
        host, port = rr.sock.getsockname()
        assert r["you"] == "%s:%d" % (host, port), (kind, r, host, port)
        rr.close()


@test
def test_list_commands_shape(t):
    ds = daemons(t)
    for kind, p in ds.items():
        cmds = p.client().ok({"listCommands": 1})["commands"]
        for name in ("hello", "isMaster", "buildInfo", "getParameter", "getLog", "ping",
                     "endSessions", "connectionStatus", "whatsmyuri", "listCommands"):
            assert name in cmds, (kind, name)
        for name, one in cmds.items():
            assert isinstance(one["help"], str), (name, one)
            assert one["requiresAuth"] is False and one["secondaryOk"] is True, (name, one)
            assert one["adminOnly"] is False, (name, one)
            # API version 1 (MongoDB 7.0's list) names some of them, not the others.
            if name in ("hello", "ping", "endSessions", "find", "insert", "getMore"):
                assert one["apiVersions"] == ["1"], (name, one)
            elif name in ("buildInfo", "getParameter", "isMaster", "whatsmyuri", "listCommands"):
                assert one["apiVersions"] == [], (name, one)
            assert one["deprecatedApiVersions"] == [], (name, one)
        assert list(cmds) == sorted(cmds), kind


@test
def test_list_databases(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    c.ok({"enableSharding": "da", "primaryShard": "shard0", "$db": "admin"})
    c.ok({"enableSharding": "db", "primaryShard": "shard1", "$db": "admin"})
    c.ok({"insert": "x", "documents": [{"_id": 1}], "$db": "da"})
    c.ok({"insert": "x", "documents": [{"_id": 1}], "$db": "db"})
    c.ok({"shardCollection": "dc.x", "key": {"_id": 1}, "$db": "admin"})
    c.ok({"split": "dc.x", "middle": {"_id": 0}, "$db": "admin"})
    c.ok({"moveChunk": "dc.x", "find": {"_id": 5}, "to": "shard1", "$db": "admin"})
    c.ok({"insert": "x", "documents": [{"_id": -5}, {"_id": 5}], "$db": "dc"})

    # The shard alone: its own databases.
    s0 = cl.shards[0].client().ok({"listDatabases": 1, "$db": "admin"})
    names0 = {d["name"] for d in s0["databases"]}
    assert {"da", "dc"} <= names0 and "db" not in names0, s0

    r = c.ok({"listDatabases": 1, "$db": "admin", "authorizedDatabases": False,
              "lsid": {"id": {"$binary": {"base64": "AAAAAAAAAAAAAAAAAAAAAA==", "subType": "04"}}}})
    by = {d["name"]: d for d in r["databases"]}
    assert {"da", "db", "dc"} <= set(by), r
    assert set(by["dc"]["shards"]) == {"shard0", "shard1"}, by["dc"]
    assert set(by["da"]["shards"]) == {"shard0"}, by["da"]
    assert by["dc"]["sizeOnDisk"] == sum(by["dc"]["shards"].values()) > 0, by["dc"]
    assert by["da"]["empty"] is False, by["da"]
    assert r["totalSize"] == sum(d["sizeOnDisk"] for d in r["databases"]), r
    r = c.ok({"listDatabases": 1, "nameOnly": True, "$db": "admin"})
    assert all(set(d) == {"name"} for d in r["databases"]), r
    assert "totalSize" not in r, r
    r = c.ok({"listDatabases": 1, "filter": {"name": "dc"}, "$db": "admin"})
    assert [d["name"] for d in r["databases"]] == ["dc"], r
    c.err({"listDatabases": 1, "noSuchField": 1, "$db": "admin"}, code=40415)


# ---- generic fields, transactions --------------------------------------------------------

LSID = {"id": {"$binary": {"base64": "q83vEjRWeJCrze8SNFZ4kA==", "subType": "04"}}}
GENERIC = {"lsid": LSID, "$clusterTime": {"clusterTime": {"$timestamp": {"t": 1, "i": 1}},
                                          "signature": {"hash": {"$binary": {"base64": "AAAAAAAAAAAAAAAAAAAAAAAAAAA=", "subType": "00"}},
                                                        "keyId": 0}},
           "$readPreference": {"mode": "primaryPreferred"}, "apiVersion": "1",
           "apiStrict": False, "apiDeprecationErrors": False, "comment": "from a driver"}


def with_generic(cmd, **more):
    d = dict(cmd)
    d.update(GENERIC)
    d.update(more)
    return d


def crud_with_generic_fields(c, db):
    # A session of its own per database: the writes are retryable (lsid + txnNumber), and a
    # session already at txnNumber 2 on a shard would answer TransactionTooOld to 1.
    ls = {"id": {"$binary": {"base64": base64.b64encode(db.encode().ljust(16, b"-")[:16]).decode(),
                             "subType": "04"}}}
    c.ok(with_generic({"insert": "g", "documents": [{"_id": i, "v": i} for i in range(5)], "$db": db},
                      writeConcern={"w": "majority", "j": True, "wtimeout": 1000},
                      txnNumber=long(1), lsid=ls))
    c.ok(with_generic({"update": "g", "updates": [{"q": {"_id": 1}, "u": {"$set": {"v": 10}}}], "$db": db},
                      writeConcern={"w": 1}, txnNumber=long(2), lsid=ls))
    c.ok(with_generic({"delete": "g", "deletes": [{"q": {"_id": 4}, "limit": 1}], "$db": db},
                      writeConcern={"w": 2}))
    r = c.ok(with_generic({"find": "g", "filter": {}, "sort": {"_id": 1}, "batchSize": 2, "$db": db},
                          readConcern={"level": "local"}))
    docs = r["cursor"]["firstBatch"]
    cid = r["cursor"]["id"]
    while cid not in (0, "0"):
        r = c.ok(with_generic({"getMore": long(cid) if isinstance(cid, int) else cid,
                               "collection": "g", "$db": db}))
        docs += r["cursor"]["nextBatch"]
        cid = r["cursor"]["id"]
    assert [d["_id"] for d in docs] == [0, 1, 2, 3], docs
    assert docs[1]["v"] == 10, docs
    for level in ("majority", "available"):
        r = c.ok(with_generic({"count": "g", "$db": db}, readConcern={"level": level}))
        assert r["n"] == 4, r


@test
def test_generic_fields_accepted(t):
    cl = t.cluster(shards=2)
    crud_with_generic_fields(cl.shards[0].client(), "gs")
    c = cl.client()
    crud_with_generic_fields(c, "gr")
    c.ok({"shardCollection": "gr2.g", "key": {"_id": 1}, "$db": "admin"})
    crud_with_generic_fields(c, "gr2")
    # The config server's find too.
    cl.config.client().ok(with_generic({"find": "shards", "$db": "config"},
                                       readConcern={"level": "majority"}))


@test
def test_read_concern_refused(t):
    ds = daemons(t)
    for kind, p in ds.items():
        c = p.client()
        find = {"find": "shards" if kind == "configsvr" else "x",
                "$db": "config" if kind == "configsvr" else "d"}
        for rc in ({"level": "snapshot"}, {"level": "linearizable"},
                   {"atClusterTime": {"$timestamp": {"t": 1, "i": 1}}},
                   {"afterOpTime": {"ts": {"$timestamp": {"t": 1, "i": 1}}, "t": long(1)}}):
            r = c.err(dict(find, readConcern=rc), code=123)
            assert r["codeName"] == "NotAReplicaSet", r
        # afterClusterTime is served (docs/cluster-time.md): a time already reached reads
        # at once; a null one is InvalidOptions, as MongoDB's ReadConcernArgs says.
        c.ok(dict(find, readConcern={"level": "local", "afterClusterTime": {"$timestamp": {"t": 1, "i": 1}}}))
        c.err(dict(find, readConcern={"afterClusterTime": {"$timestamp": {"t": 0, "i": 0}}}), code=72)
        c.err(dict(find, readConcern={"level": "nope"}), code=2)
        c.err(dict(find, readConcern="local"), code=14)
        c.err(dict(find, writeConcern=1), code=14)
        c.err(dict(find, lsid="x"), code=14)
        c.err(dict(find, readConcern={"level": "local", "noSuchField": 1}), code=40415)


@test
def test_transactions_refused(t):
    ds = daemons(t)
    for kind, p in ds.items():
        c = p.client()
        db = "config" if kind == "configsvr" else "tx"
        ins = {"insert": "t", "documents": [{"_id": 1}], "$db": db, "lsid": LSID, "txnNumber": long(1)}
        if kind == "configsvr":  # no insert there: a read in a transaction is refused alike
            ins = {"find": "shards", "$db": db, "lsid": LSID, "txnNumber": long(1)}
        for extra in ({"startTransaction": True, "autocommit": False}, {"autocommit": False}):
            r = c.err(dict(ins, **extra), code=20)
            assert r["codeName"] == "IllegalOperation", r
            if kind != "router":
                assert r["errmsg"] == "Transaction numbers are only allowed on a replica set member or mongos", r
            else:
                assert "not supported" in r["errmsg"], r
        for name in ("commitTransaction", "abortTransaction"):
            c.err({name: 1, "$db": "admin", "lsid": LSID, "txnNumber": long(1), "autocommit": False}, code=20)
            c.err({name: 1, "$db": "admin"}, code=20)
        if kind != "configsvr":
            assert c.ok({"count": "t", "$db": db})["n"] == 0, "a refused transaction wrote"


# ---- cursor ids ----------------------------------------------------------------------------

def check_cursor_ids(url, calls):
    """Each call: a command; every reply's cursor.id must be BSON int64 (0x12). Returns the
    open ids seen (to drain with getMore)."""
    rr = RawReq(url)
    try:
        for cmd in calls:
            r, raw = raw_call(rr, cmd)
            assert r.get("ok") == 1.0, (cmd, r)
            assert btype(raw, "cursor.id") == T_INT64, (cmd, btype(raw, "cursor.id"), r)
            cid = r["cursor"]["id"]
            if cid != 0 and "find" in cmd:
                coll = cmd["find"]
                while cid != 0:
                    r, raw = raw_call(rr, {"getMore": Int64(cid), "collection": coll,
                                           "batchSize": 1, "$db": cmd["$db"]})
                    assert r.get("ok") == 1.0, r
                    assert btype(raw, "cursor.id") == T_INT64, ("getMore", r)
                    cid = r["cursor"]["id"]
    finally:
        rr.close()


@test
def test_cursor_ids_are_int64(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    c.ok({"insert": "k", "documents": [{"_id": i} for i in range(6)], "$db": "cur"})
    c.ok({"createIndexes": "k", "indexes": [{"key": {"a": 1}, "name": "a_1"}], "$db": "cur"})
    c.ok({"shardCollection": "cur2.k", "key": {"_id": 1}, "$db": "admin"})
    c.ok({"insert": "k", "documents": [{"_id": i} for i in range(6)], "$db": "cur2"})
    calls = [{"find": "k", "filter": {}, "batchSize": 2, "$db": "cur"},   # open cursor
             {"find": "k", "filter": {}, "$db": "cur"},                   # exhausted: id 0
             {"find": "k", "filter": {"_id": 99}, "$db": "cur"},
             {"listCollections": 1, "$db": "cur"},
             {"listIndexes": "k", "$db": "cur"}]
    primary = [s for s in cl.shards
               if s.client().ok({"listDatabases": 1, "nameOnly": True, "filter": {"name": "cur"}})["databases"]][0]
    check_cursor_ids(primary.url, calls)
    check_cursor_ids(cl.routers[0].url, calls + [
        {"find": "k", "filter": {}, "batchSize": 2, "$db": "cur2"},
        {"find": "k", "filter": {}, "$db": "cur2"}])
    check_cursor_ids(cl.config.url, [{"find": "chunks", "filter": {}, "batchSize": 1, "$db": "config"},
                                     {"find": "shards", "filter": {}, "$db": "config"}])


if __name__ == "__main__":
    main()
