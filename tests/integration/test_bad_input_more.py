#!/usr/bin/env python3
"""
test_bad_input_more.py — bad input left over (docs/hostile-clients.md
"Malformed commands"), each refused with MongoDB's code instead of being read as
something else:

- configureCollectionBalancing's chunkSize NaN, Infinity, 1e308 or 0.5 is InvalidOptions
  72 like -1 (NaN and 0.5 used to truncate to 0, which silently reset the collection to the
  cluster default); the stored setting is untouched;
- a split point no document can fall into — an array (or a document holding one) on a
  ranged key, anything but a NumberLong on a hashed key — is BadValue 2, and the chunk
  table is untouched (a NumberLong on the hashed key still splits);
- a corrupt element before $db is InvalidBSON 22 on every daemon's NNG port and on the
  MongoDB wire port (which answered "OP_MSG requests require a $db argument");
- killCursors with an id that is not an int32/int64 is TypeMismatch 14 on the router, a
  shard and the config server (such ids were skipped and the command answered ok);
- a command document with a repeated top-level key is Location40413 "BSON field
  '<cmd>.<key>' is a duplicate field" on every daemon, over NNG and the wire port;
- _configsvrDropCollection of a config.* collection is IllegalOperation 20 (it used to
  send `drop` to every shard and answer ok).
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from hostile import RawReq, _element, decode, Int64  # noqa: E402
from wireproto import WireConn, op_msg  # noqa: E402


def adm(doc):
    d = dict(doc)
    d["$db"] = "admin"
    return d


def raw_doc(*pairs):
    """BSON bytes from (key, value) pairs, in order, repeats kept."""
    body = b"".join(_element(k, v) for k, v in pairs)
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


def corrupt_before_db(cmd=("ping", 1)):
    """{<cmd>, s: <a string whose length runs past the document>, $db: "admin"}."""
    bad = b"\x02s\x00" + struct.pack("<i", 200) + b"abc\x00"
    body = _element(*cmd) + bad + _element("$db", "admin")
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


def chunks(c, ns):
    """The collection's chunks in key order, as the config server has them (none: [])."""
    r = c.cmd({"getRoutingTable": ns, "$db": "admin"})
    return r["chunks"] if r.get("ok") == 1 else []


@test
def test_chunk_size_not_a_whole_number_refused(t):
    cl = t.cluster(shards=1)
    c = cl.client()
    c.ok(adm({"enableSharding": "app", "primaryShard": "shard0"}))
    c.ok(adm({"shardCollection": "app.c", "key": {"k": 1}}))
    c.ok(adm({"configureCollectionBalancing": "app.c", "chunkSize": 5}))
    bads = ({"$numberDouble": "NaN"}, {"$numberDouble": "Infinity"}, {"$numberDouble": "-Infinity"},
            1e308, 0.5, -1, {"$numberDecimal": "NaN"}, {"$numberDecimal": "2.5"})
    for bad in bads:
        r = c.err(adm({"configureCollectionBalancing": "app.c", "chunkSize": bad}), code=72)
        assert r["codeName"] == "InvalidOptions" and "out of range" in r["errmsg"], r
    doc = c.ok({"find": "collections", "$db": "config", "filter": {"_id": "app.c"}})["cursor"]["firstBatch"][0]
    assert doc["maxChunkSizeBytes"] == 5 * 1024 * 1024, doc
    # whole numbers in any numeric type still work; 0 resets to the default
    c.ok(adm({"configureCollectionBalancing": "app.c", "chunkSize": 7.0}))
    c.ok(adm({"configureCollectionBalancing": "app.c", "chunkSize": {"$numberLong": "8"}}))
    doc = c.ok({"find": "collections", "$db": "config", "filter": {"_id": "app.c"}})["cursor"]["firstBatch"][0]
    assert doc["maxChunkSizeBytes"] == 8 * 1024 * 1024, doc
    c.ok(adm({"configureCollectionBalancing": "app.c", "chunkSize": 0}))
    assert "configureCollectionBalancing refused" in cl.config.log_text()


@test
def test_split_points_no_document_fits_refused(t):
    cl = t.cluster(shards=1)
    c = cl.client()
    c.ok(adm({"enableSharding": "app", "primaryShard": "shard0"}))
    c.ok(adm({"shardCollection": "app.r", "key": {"k": 1}}))
    c.ok(adm({"shardCollection": "app.h", "key": {"k": "hashed"}}))
    c.ok(adm({"shardCollection": "app.cmp", "key": {"a": 1, "b": 1}}))
    before = {ns: chunks(c, ns) for ns in ("app.r", "app.h", "app.cmp")}
    for ns, middle in (("app.r", {"k": [1, 2]}), ("app.r", {"k": []}), ("app.r", {"k": {"x": [1]}}),
                       ("app.cmp", {"a": 1, "b": [2]}),
                       ("app.h", {"k": 5}), ("app.h", {"k": "x"}), ("app.h", {"k": 1.5}),
                       ("app.h", {"k": [{"$numberLong": "5"}]}), ("app.h", {"k": None})):
        r = c.err(adm({"split": ns, "middle": middle}), code=2)
        assert "is not valid for shard key pattern" in r["errmsg"], r
    for ns, old in before.items():
        assert chunks(c, ns) == old, ns
    # what a document can hold still splits
    c.ok(adm({"split": "app.r", "middle": {"k": {"x": 1}}}))
    c.ok(adm({"split": "app.h", "middle": {"k": {"$numberLong": "12345"}}}))
    c.ok(adm({"split": "app.cmp", "middle": {"a": 1, "b": "x"}}))
    assert len(chunks(c, "app.h")) == len(before["app.h"]) + 1


@test
def test_corrupt_element_before_db_is_invalid_bson(t):
    cfg = t.configsvr()
    wp_s = free_ports(1)[0]
    sh = t.shardd("shard0", extra=["--wire-port", str(wp_s)])
    wp_r = free_ports(1)[0]
    r = t.router(cfg.url, extra=["--wire-port", str(wp_r)])
    r.client().ok(adm({"addShard": sh.url, "name": "shard0"}))
    for p in (r, sh, cfg):
        q = RawReq(p.url)
        for cmd in (("ping", 1), ("find", "c"), ("insert", "c")):
            got = decode(q.call_raw(corrupt_before_db(cmd)))
            assert got.get("code") == 22 and got.get("codeName") == "InvalidBSON", (p.name, cmd, got)
        q.close()
    for port in (wp_r, wp_s):
        w = WireConn(("127.0.0.1", port))
        for cmd in (("ping", 1), ("find", "c")):
            w.send(op_msg(corrupt_before_db(cmd)))
            got = w.recv()["doc"]
            assert got.get("code") == 22 and got.get("codeName") == "InvalidBSON", (port, cmd, got)
        # the connection goes on serving
        assert w.command({"ping": 1})["ok"] == 1
        w.close()


@test
def test_kill_cursors_ids_not_integers(t):
    cl = t.cluster(shards=1)
    c = cl.client()
    c.ok({"insert": "k", "$db": "app", "documents": [{"_id": i} for i in range(10)]})
    cur = c.ok({"find": "k", "$db": "app", "filter": {}, "batchSize": 2})["cursor"]
    cid = cur["id"]
    s = cl.shards[0].client()
    cfg = cl.config.client()
    for bad in ("x", 1.5, 7.0, {"a": 1}, None, [1], True):
        for who, cl_, db in (("router", c, "app"), ("shard", s, "app"), ("config", cfg, "config"),
                             ("router-config", c, "config")):
            r = cl_.err({"killCursors": "k" if db == "app" else "chunks", "$db": db,
                         "cursors": [{"$numberLong": "12345"}, bad]}, code=14)
            assert "killCursors.cursors.1" in r["errmsg"] and "expected type 'long'" in r["errmsg"], (who, r)
    # nothing was killed by the refused requests: the cursor still serves
    r = c.ok({"getMore": cid, "collection": "k", "$db": "app", "batchSize": 2})
    assert len(r["cursor"]["nextBatch"]) == 2, r
    # int64 and int32 ids are fine
    r = c.ok({"killCursors": "k", "$db": "app", "cursors": [cid, 99]})
    assert r["cursorsKilled"] == [cid] and r["cursorsNotFound"] == [99], r
    assert "killCursors refused" in cl.shards[0].log_text()


@test
def test_repeated_key_refused_everywhere(t):
    cfg = t.configsvr()
    wp_s = free_ports(1)[0]
    sh = t.shardd("shard0", extra=["--wire-port", str(wp_s)])
    wp_r = free_ports(1)[0]
    r = t.router(cfg.url, extra=["--wire-port", str(wp_r)])
    c = r.client()
    c.ok(adm({"addShard": sh.url, "name": "shard0"}))
    c.ok({"insert": "d", "$db": "app", "documents": [{"_id": 1}]})
    cases = [
        ((("ping", 1), ("ping", 1), ("$db", "admin")), "ping.ping"),
        ((("find", "d"), ("filter", {}), ("filter", {"_id": 2}), ("$db", "app")), "find.filter"),
        ((("insert", "d"), ("documents", [{"_id": 5}]), ("documents", [{"_id": 6}]), ("$db", "app")),
         "insert.documents"),
        ((("find", "d"), ("$db", "app"), ("$db", "admin")), "find.$db"),
        ((("count", "d"), ("query", {}), ("maxTimeMS", 1000), ("maxTimeMS", 0), ("$db", "app")),
         "count.maxTimeMS"),
    ]
    for p in (r, sh, cfg):
        q = RawReq(p.url)
        for pairs, field in cases:
            if p is cfg and pairs[0][0] == "insert":
                continue   # not a config server command (CommandNotFound comes first)
            got = decode(q.call_raw(raw_doc(*pairs)))
            assert got.get("code") == 40413, (p.name, field, got)
            assert got["errmsg"] == "BSON field '%s' is a duplicate field" % field, (p.name, got)
        q.close()
    for port in (wp_r, wp_s):
        w = WireConn(("127.0.0.1", port))
        for pairs, field in cases:
            w.send(op_msg(raw_doc(*pairs)))
            got = w.recv()["doc"]
            assert got.get("code") == 40413 and field in got["errmsg"], (port, got)
        w.close()
    # nothing of the refused inserts was written; the same commands without repeats work
    assert c.ok({"count": "d", "$db": "app"})["n"] == 1
    assert "is a duplicate field" in sh.log_text()


@test
def test_configsvr_drop_config_collection_refused(t):
    cl = t.cluster(shards=1)
    c = cl.client()
    c.ok(adm({"enableSharding": "app", "primaryShard": "shard0"}))
    c.ok(adm({"shardCollection": "app.c", "key": {"k": 1}}))
    cfg = cl.config.client()
    for ns in ("config.chunks", "config.collections", "config.system.sessions", "config.nope"):
        r = cfg.err(adm({"_configsvrDropCollection": ns}), code=20)
        assert r["codeName"] == "IllegalOperation", r
    assert len(chunks(c, "app.c")) == 1
    assert c.ok({"find": "collections", "$db": "config", "filter": {"_id": "app.c"}})["cursor"]["firstBatch"]
    assert "dropCollection refused ns=config.chunks" in cl.config.log_text()
    # other namespaces still drop
    cfg.ok(adm({"_configsvrDropCollection": "app.c"}))
    assert chunks(c, "app.c") == []


if __name__ == "__main__":
    main()
