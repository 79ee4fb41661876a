#!/usr/bin/env python3
"""
test_bad_arrays.py — arrays whose element keys are not "0", "1", ... (legal on the wire:
MongoDB ignores array keys). Every command, over NNG and over the wire protocol, on a shard
and through the router, is renumbered once where it arrives (common/cmd.c cmd_dispatch,
bsonx_renumber_arrays), so a daemon never hands libbson an array it warns about
("invalid array detected") and never stores or returns one.

Each case sends inserts, finds, updates (operators and $push $each), findAndModify, an
aggregate and a delete whose arrays — the command's own `documents` / `updates` /
`pipeline` lists, values inside documents, filters — have keys "x", "y", ...; then reads
the raw reply bytes and checks every array in them is numbered 0..n-1 with the values in
order, and that no daemon's log holds libbson's warning.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
import hostile  # noqa: E402
from hostile import RawReq, assert_responsive  # noqa: E402
from wireproto import OP_MSG, WireConn, hostport, op_msg  # noqa: E402


class Keyed(dict):
    """A BSON array sent with exactly these keys (in this order)."""


def enc(doc):
    body = b""
    for k, v in doc.items():
        key = k.encode() + b"\x00"
        if isinstance(v, Keyed):
            body += b"\x04" + key + enc(v)
        elif isinstance(v, dict):
            body += b"\x03" + key + enc(v)
        elif isinstance(v, (list, tuple)):
            body += b"\x04" + key + enc({str(i): x for i, x in enumerate(v)})
        else:
            body += hostile._element(k, v)
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


def bad(*values):
    """An array of the values under keys "ka", "kb", ..."""
    return Keyed(("k%c" % (ord("a") + i), v) for i, v in enumerate(values))


def check_arrays(data, off=0, array=False, where="reply"):
    """Walks raw BSON at off; raises when an array's keys are not 0..n-1."""
    for i, (t, key, v, _) in enumerate(hostile.raw_elements(data, off)):
        if array and key != str(i):
            raise AssertionError("%s: array element %d has key %r" % (where, i, key))
        if t in (0x03, 0x04):
            check_arrays(data, v, t == 0x04, where + "." + key)


class Nng:
    """Raw NNG calls that keep the reply bytes."""

    def __init__(self, proc):
        self.c = RawReq(proc.url, timeout=20.0)

    def call(self, doc):
        raw = self.c.call_raw(enc(doc))
        check_arrays(raw, where=next(iter(doc)))
        return hostile.decode(raw)

    def close(self):
        self.c.close()


class Wire:
    """OP_MSG calls, body built by enc(), reply bytes checked."""

    def __init__(self, proc, port):
        self.c = WireConn(("127.0.0.1", port))
        self.rid = 1

    def call(self, doc):
        self.rid += 1
        self.c.send(op_msg(enc(doc), request_id=self.rid))
        r = self.c.recv()
        assert r["opcode"] == OP_MSG, r
        check_arrays(r["raw"], 21, where=next(iter(doc)))
        return r["doc"]

    def close(self):
        self.c.close()


def ok(conn, doc):
    r = conn.call(doc)
    if r.get("ok") != 1 or r.get("writeErrors"):
        raise AssertionError("%s failed: %r" % (next(iter(doc)), r))
    return r


def exercise(conn, coll, db="app"):
    """Every command path a client array takes; the reads check what was stored."""
    ok(conn, {"insert": coll, "$db": db, "documents": Keyed([
        ("y", {"_id": 1, "a": bad(1, 2, 3), "n": {"m": bad(bad(5, 6), {"z": bad(7)})}}),
        ("x", {"_id": 2, "a": bad(), "s": "two"}),
    ])})
    r = ok(conn, {"find": coll, "$db": db, "filter": {"_id": {"$in": bad(1, 2)}},
                  "sort": {"_id": 1}})
    got = r["cursor"]["firstBatch"]
    assert [d["_id"] for d in got] == [1, 2], got
    assert got[0]["a"] == [1, 2, 3] and got[0]["n"] == {"m": [[5, 6], {"z": [7]}]}, got
    assert got[1]["a"] == [], got
    ok(conn, {"update": coll, "$db": db, "updates": Keyed([
        ("u", {"q": {"_id": 1}, "u": {"$push": {"a": {"$each": bad(4, 5)}},
                                     "$set": {"b": bad("p", "q")}}}),
        ("v", {"q": {"_id": 2}, "u": {"$addToSet": {"a": {"$each": bad(9, 9, 8)}}}}),
    ])})
    r = ok(conn, {"findAndModify": coll, "$db": db, "query": {"_id": 2},
                  "update": {"$set": {"c": bad(bad(1), bad())}}, "new": True})
    assert r["value"]["c"] == [[1], []] and r["value"]["a"] == [9, 8], r
    r = ok(conn, {"aggregate": coll, "$db": db, "cursor": {}, "pipeline": bad(
        {"$match": {"_id": {"$in": bad(1)}}},
        {"$project": {"a": 1, "b": 1}})})
    got = r["cursor"]["firstBatch"]
    assert got == [{"_id": 1, "a": [1, 2, 3, 4, 5], "b": ["p", "q"]}], got
    ok(conn, {"delete": coll, "$db": db, "deletes": Keyed([
        ("d", {"q": {"_id": {"$in": bad(2)}}, "limit": 0})])})
    r = ok(conn, {"find": coll, "$db": db, "filter": {}})
    assert [d["_id"] for d in r["cursor"]["firstBatch"]] == [1], r


def no_warning(*procs):
    for p in procs:
        text = p.log_text()
        if "invalid array" in text:
            lines = [l for l in text.splitlines() if "invalid array" in l]
            raise AssertionError("%s logged libbson's warning: %s" % (p.name, lines[:3]))
        assert_responsive(p)


@test
def test_shard_nng_and_wire(t):
    wp = free_ports(1)[0]
    s = t.shardd("shard0", extra=["--wire-port", str(wp)])
    c = Nng(s)
    try:
        exercise(c, "nng")
    finally:
        c.close()
    w = Wire(s, wp)
    try:
        exercise(w, "wire")
    finally:
        w.close()
    no_warning(s)


@test
def test_router_nng_and_wire(t):
    cl, wp = t.wire_cluster(2)
    r, c = cl.routers[0], cl.client()
    c.ok({"enableSharding": "app", "$db": "admin"})
    c.ok({"shardCollection": "app.sh", "key": {"_id": 1}, "$db": "admin"})
    c.ok({"split": "app.sh", "middle": {"_id": 2}, "$db": "admin"})
    c.ok({"moveChunk": "app.sh", "find": {"_id": 2}, "to": "shard1", "$db": "admin"})
    n = Nng(r)
    try:
        exercise(n, "plain")
        exercise(n, "sh")
    finally:
        n.close()
    w = Wire(r, wp)
    try:
        exercise(w, "wplain")
    finally:
        w.close()
    no_warning(r, cl.config, *cl.shards)


if __name__ == "__main__":
    main()
