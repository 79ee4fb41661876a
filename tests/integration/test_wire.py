#!/usr/bin/env python3
"""
test_wire.py — MongoDB's wire protocol on the router and the shard (--wire-port): messages built by hand on raw sockets (tests/integration/wireproto.py)
check OP_MSG (body, kind-1 document sequences, checksumPresent, moreToCome), legacy
OP_QUERY on <db>.$cmd answered with OP_REPLY, OP_COMPRESSED refused with an error, and
that every command gets the same reply as over NNG (one dispatch, two transports),
internal commands included. Hostile clients — garbage, a huge announced length, a
truncated message, a client that stalls or idles, hundreds of connections at once — each
cost their own connection only: the daemon keeps answering others within a second and
its memory stays bounded (hostile.py). Last, pymongo (Debian's python3-pymongo, run with
/usr/bin/python3) connects to a router's wire port and does CRUD, when installed.
"""
import os
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403
from hostile import RawReq, assert_responsive, assert_rss_below, rss_mb  # noqa: E402
from wireproto import (CHECKSUM, EXHAUST_ALLOWED, MORE_TO_COME, OP_MSG, OP_QUERY, OP_REPLY,  # noqa: E402
                       WireConn, crc32c, header, op_compressed, op_msg, op_query)

SAN_SLACK_MB = 600 if "/san/" in BIN else 0


def wire_shardd(t, name="shard0", extra=()):
    wp = free_ports(1)[0]
    s = t.shardd(name, extra=["--wire-port", str(wp)] + list(extra))
    s.wire = ("127.0.0.1", wp)
    return s


def wire_cluster(t, shards=2):
    """config + shards (with wire ports) + one router with a wire port."""
    cfg = t.configsvr()
    ss = [wire_shardd(t, "shard%d" % i) for i in range(shards)]
    wp = free_ports(1)[0]
    r = t.router(cfg.url, extra=["--wire-port", str(wp)])
    r.wire = ("127.0.0.1", wp)
    c = r.client()
    for i, s in enumerate(ss):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    return cfg, ss, r


def wire_ping(proc):
    w = WireConn(proc.wire, timeout=5)
    try:
        assert w.command({"ping": 1})["ok"] == 1
    finally:
        w.close()


def still_serving(proc, what):
    assert_responsive(proc, what=what)  # over NNG
    wire_ping(proc)                     # and over the wire


@test
def test_op_msg_and_op_query_basics(t):
    """OP_MSG ping / OP_QUERY isMaster: reply opcode, responseTo = our requestID, a requestID
    of the server's own; the ready line names the mongodb:// URL; OP_QUERY on a collection
    and OP_COMPRESSED get errors and the connection stays usable."""
    s = wire_shardd(t)
    assert "wire=mongodb://127.0.0.1:%d" % s.wire[1] in s.log_text()
    w = WireConn(s.wire)
    w.send(op_msg({"ping": 1, "$db": "admin"}, request_id=4242, flags=EXHAUST_ALLOWED))
    r = w.recv()
    assert r["opcode"] == OP_MSG and r["response_to"] == 4242 and r["flags"] == 0, r
    assert bare(r["doc"]) == {"ok": 1.0}, r
    assert set(r["doc"]) == {"ok", "$clusterTime", "operationTime"}, r
    first_id = r["request_id"]
    w.send(op_msg({"ping": 1, "$db": "admin"}, request_id=4243))
    assert w.recv()["request_id"] != first_id

    # drivers' first handshake: OP_QUERY isMaster on admin.$cmd, answered with OP_REPLY
    w.send(op_query("admin.$cmd", {"isMaster": 1, "client": {"driver": {"name": "raw"}}}, request_id=9))
    r = w.recv()
    assert r["opcode"] == OP_REPLY and r["response_to"] == 9, r
    assert r["flags"] == 0 and r["cursor_id"] == 0 and r["number_returned"] == 1, r
    assert r["doc"]["ok"] == 1 and r["doc"].get("ismaster") is True, r
    # wrapped the old way, with $readPreference
    w.send(op_query("admin.$cmd", {"$query": {"ping": 1}, "$readPreference": {"mode": "primaryPreferred"}},
                    request_id=10))
    assert w.recv()["doc"]["ok"] == 1
    # a command error over OP_QUERY: ok 0 in the document, flags 0 (as MongoDB)
    w.send(op_query("admin.$cmd", {"noSuchCommand": 1}, request_id=11))
    r = w.recv()
    assert r["flags"] == 0 and r["doc"]["code"] == 59, r
    # OP_QUERY on a collection: QueryFailure
    w.send(op_query("app.c", {}, request_id=12))
    r = w.recv()
    assert r["flags"] & 2 and r["doc"]["code"] == 352 and r["doc"]["ok"] == 0, r
    # OP_COMPRESSED: an error in the original opcode's reply form, connection kept
    w.send(op_compressed(OP_MSG, op_msg({"ping": 1, "$db": "admin"})[16:], request_id=13))
    r = w.recv()
    assert r["opcode"] == OP_MSG and r["response_to"] == 13 and r["doc"]["ok"] == 0, r
    w.send(op_compressed(OP_QUERY, b"x" * 20, request_id=14))
    assert w.recv()["opcode"] == OP_REPLY
    assert w.command({"ping": 1})["ok"] == 1
    # OP_MSG without $db is refused as MongoDB does (40571)
    w.send(op_msg({"ping": 1}, request_id=15))
    assert w.recv()["doc"]["code"] == 40571
    # serverStatus counts the wire listener's connections and requests
    st = w.command({"serverStatus": 1})
    ws = st["connections"]["wire"]
    assert ws["current"] >= 1 and ws["numRequests"] >= 10, ws
    w.close()


@test
def test_same_reply_as_nng(t):
    """One dispatch, two transports: the same commands get the same replies (errors and
    codes included) over NNG and over the wire, on a shard and through the router;
    internal commands stay refused from clients on the router exactly as over NNG."""
    cfg, ss, r = wire_cluster(t, shards=2)
    c = r.client()
    w = WireConn(r.wire)
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": i, "x": i % 3} for i in range(20)]})
    cmds = [
        {"find": "c", "filter": {"x": 1}, "sort": {"_id": 1}, "$db": "app"},
        {"count": "c", "query": {"x": {"$gte": 1}}, "$db": "app"},
        {"insert": "c", "documents": [{"_id": 1}], "$db": "app"},            # duplicate key
        {"find": "c", "filter": {"$bogus": 1}, "$db": "app"},                # bad query operator
        {"noSuchCommand": 1, "$db": "admin"},
        {"_recvChunkStart": "app.c", "$db": "admin"},                        # internal
        {"find": "c", "unknownField": 1, "$db": "app"},
        {"distinct": "c", "key": "x", "$db": "app"},
    ]
    for cmd in cmds:
        via_nng = c.cmd(dict(cmd))
        via_wire = w.command(dict(cmd), db=cmd["$db"])
        for volatile in ("operationTime", "$clusterTime", "localTime"):
            via_nng.pop(volatile, None)
            via_wire.pop(volatile, None)
        if "cursor" in via_nng:
            via_nng["cursor"].pop("id", None)
            via_wire["cursor"].pop("id", None)
        assert via_nng == via_wire, "%s:\n nng  %r\n wire %r" % (list(cmd)[0], via_nng, via_wire)
    w.close()
    # straight to a shard too
    w = WireConn(ss[0].wire)
    assert w.command({"ping": 1})["ok"] == 1
    w.close()


@test
def test_kind1_insert_many_and_checksum(t):
    """A kind-1 document sequence of 20,000 documents through the router inserts them all
    (in one message, as drivers batch); checksumPresent is verified and answered with a
    checksum; a wrong checksum closes that connection only."""
    cfg, ss, r = wire_cluster(t, shards=2)
    c = r.client()
    c.ok({"enableSharding": "app", "$db": "admin"})
    c.ok({"shardCollection": "app.m", "key": {"_id": 1}, "$db": "admin"})
    c.ok({"split": "app.m", "middle": {"_id": 10000}, "$db": "admin"})
    c.ok({"moveChunk": "app.m", "find": {"_id": 10000}, "to": "shard1", "$db": "admin"})
    w = WireConn(r.wire, timeout=60)
    docs = [{"_id": i, "pad": "p" * 20} for i in range(20000)]
    w.send(op_msg({"insert": "m", "ordered": False, "$db": "app"}, request_id=5, sequences=[("documents", docs)],
                  flags=CHECKSUM))
    rep = w.recv()
    assert rep["doc"].get("n") == 20000, rep["doc"]
    # the reply carries a checksum because the request did, and it is right
    assert rep["flags"] & CHECKSUM, rep
    assert rep["checksum"] == crc32c(rep["raw"][:-4]), rep
    assert c.ok({"count": "m", "$db": "app"})["n"] == 20000
    # on both shards
    for s in ss:
        assert s.client().ok({"count": "m", "$db": "app"})["n"] == 10000

    bad = WireConn(r.wire)
    bad.send(op_msg({"ping": 1, "$db": "admin"}, request_id=6, flags=CHECKSUM, checksum=0x12345678))
    assert bad.closed_by_peer(), "a wrong checksum must close the connection"
    assert "reason=bad_message" in r.log_text()
    assert w.command({"ping": 1})["ok"] == 1  # the other connection is untouched
    still_serving(r, "after a bad checksum")
    w.close()


@test
def test_more_to_come(t):
    """moreToCome: no reply at all; the write happened, and a read sent next on the same
    connection sees it (one connection's messages run in order)."""
    s = wire_shardd(t)
    w = WireConn(s.wire)
    for i in range(50):
        w.send(op_msg({"insert": "c", "documents": [{"_id": i}], "$db": "app"}, request_id=100 + i,
                      flags=MORE_TO_COME))
    w.send(op_msg({"count": "c", "$db": "app"}, request_id=999))
    r = w.recv()  # the first reply is the count's: nothing answered the 50 inserts
    assert r["response_to"] == 999 and r["doc"]["n"] == 50, r
    w.sock.settimeout(0.5)
    try:
        extra = w.sock.recv(1)
        raise AssertionError("unexpected bytes after the count: %r" % extra)
    except socket.timeout:
        pass
    w.close()


@test
def test_hostile_clients_cost_their_connection(t):
    """Garbage, an unknown opcode, huge and negative lengths, a truncated message and a
    vanished client each close (or lose) their own connection; the daemon keeps serving
    others over NNG and the wire, logs why, and allocates nothing for announced lengths."""
    cfg, ss, r = wire_cluster(t, shards=1)
    base_rss = rss_mb(r.pid)
    keep = WireConn(r.wire)
    assert keep.command({"ping": 1})["ok"] == 1
    cases = [
        ("garbage", os.urandom(3) + b"\xff" * 61),
        ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\x00" * 40),
        ("unknown opcode", header(20, 1, 2005) + b"\x00" * 4),           # OP_GET_MORE: gone
        ("op_reply from client", header(36, 1, OP_REPLY) + b"\x00" * 20),
        ("huge length", header(2**31 - 1, 1, OP_MSG) + b"\x00" * 64),
        ("over 48 MB", header(48000001, 1, OP_MSG) + b"\x00" * 64),
        ("negative length", header(-5, 1, OP_MSG)),
        ("length below header", header(8, 1, OP_MSG)),
        ("illegal flag", op_msg({"ping": 1, "$db": "admin"}, flags=1 << 5)),
    ]
    for what, data in cases:
        w = WireConn(r.wire)
        w.send(data)
        assert w.closed_by_peer(), "%s: connection not closed" % what
        w.close()
        still_serving(r, "after " + what)
    # malformed but framed: an error reply, the connection stays
    w = WireConn(r.wire)
    msg = bytearray(op_msg({"ping": 1, "$db": "admin"}, request_id=3))
    msg[21:25] = struct.pack("<i", 9999)  # body length past the message
    w.send(bytes(msg))
    rep = w.recv()
    assert rep["response_to"] == 3 and rep["doc"]["ok"] == 0, rep
    # a document that is not valid BSON inside: dispatch's own InvalidBSON
    w.send(op_msg(b"\x0c\x00\x00\x00\x02a\x00\xff\xff\xff\x7f\x00", request_id=4))
    assert w.recv()["doc"]["ok"] == 0
    assert w.command({"ping": 1})["ok"] == 1
    w.close()
    # an embedded document without its terminator (found by fuzz_wire): libbson walks it
    # but aborts when copying it; refused as InvalidBSON over both transports (over NNG it
    # used to kill shardd through query.c's ASSERT)
    bad_filter = b"\x03filter\x00" + bytes([12, 0, 0, 0, 0x10, ord("x"), 0, 1, 0, 0, 0, 0x06])
    body = b"\x02find\x00\x02\x00\x00\x00c\x00" + bad_filter + b"\x02$db\x00\x04\x00\x00\x00app\x00"
    bad_cmd = struct.pack("<i", len(body) + 5) + body + b"\x00"
    for proc in (r, ss[0]):
        w = WireConn(proc.wire)
        w.send(op_msg(bad_cmd, request_id=21))
        assert w.recv()["doc"]["code"] == 22
        w.close()
        n = RawReq(proc.url)
        n.send_raw(bad_cmd)
        assert n.recv()[1]["code"] == 22
        n.close()
        still_serving(proc, "after an unterminated embedded document")
    # truncated, then vanished: announced 1 MB, sent 100 bytes, gone
    for _ in range(20):
        v = WireConn(r.wire)
        v.send(header(1 << 20, 1, OP_MSG) + b"\x00" * 100)
        v.close()
    still_serving(r, "after vanished clients")
    assert keep.command({"ping": 1})["ok"] == 1
    log = r.log_text()
    for reason in ("reason=bad_message", "reason=msg_too_large"):
        assert reason in log, reason
    assert_rss_below(r, base_rss + 100 + SAN_SLACK_MB, "after hostile wire clients")
    keep.close()


@test
def test_idle_and_stalled_connections(t):
    """A connection that sends nothing for --wire-idle-ms is closed (reason=idle); one
    that stops mid-message is closed by the RPC server's stall bound (10 s,
    MS_RPC_RECV_STALL_MS); a connection in use is not closed."""
    s = wire_shardd(t, extra=["--wire-idle-ms", "700"])
    idle = WireConn(s.wire)
    stalled = WireConn(s.wire)
    stalled.send(op_msg({"ping": 1, "$db": "admin"})[:20])
    busy = WireConn(s.wire)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:
        assert busy.command({"ping": 1})["ok"] == 1
        time.sleep(0.2)
    # a command running longer than the idle bound is not idleness: its client is waiting
    busy.command({"configureFailPoint": "failCommand", "mode": {"times": 1},
                  "data": {"failCommands": ["count"], "blockConnection": True, "blockTimeMS": 1500}})
    slow = WireConn(s.wire)
    assert slow.command({"count": "c"}, db="app")["ok"] == 1, "a 1.5 s command outlived by its connection"
    slow.close()
    assert idle.closed_by_peer(timeout=5), "idle connection not closed"
    assert "reason=idle" in s.log_text()
    assert stalled.closed_by_peer(timeout=15), "stalled connection not closed"
    assert "reason=recv_timeout" in s.log_text()
    still_serving(s, "after idle and stalled clients")
    busy.close()


@test
def test_many_concurrent_connections(t):
    """300 connections at once, each handshaking and inserting through the router: all
    served; then all closed, the daemon is fine."""
    cfg, ss, r = wire_cluster(t, shards=2)
    errors = []
    conns = []
    lock = threading.Lock()

    def client(i):
        try:
            w = WireConn(r.wire, timeout=30)
            with lock:
                conns.append(w)
            w.send(op_query("admin.$cmd", {"isMaster": 1}, request_id=1))
            assert w.recv()["doc"]["ok"] == 1
            rep = w.command({"insert": "cc", "documents": [{"_id": i}]}, db="app")
            assert rep.get("n") == 1, rep
        except Exception as e:  # noqa: BLE001 — collected and reported below
            with lock:
                errors.append("%d: %r" % (i, e))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(300)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not errors, errors[:5]
    assert r.client().ok({"count": "cc", "$db": "app"})["n"] == 300
    for w in conns:
        w.close()
    still_serving(r, "after 300 connections")


PYMONGO_SCRIPT = r"""
import sys
from pymongo import MongoClient
c = MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000, connectTimeoutMS=5000)
db = c.app
db.pm.insert_one({"_id": 1, "name": "a"})
db.pm.insert_many([{"_id": i, "name": "b"} for i in range(2, 12)])
assert db.pm.find_one({"_id": 1})["name"] == "a"
assert db.pm.find({"name": "b"}).sort("_id", -1).limit(3).next()["_id"] == 11
assert db.pm.estimated_document_count() == 11
try:
    assert db.pm.count_documents({"name": "b"}) == 10
except Exception as e:  # count_documents sends aggregate
    if getattr(e, "code", None) != 59:
        raise
    print("PENDING count_documents: aggregate is not served yet (%s)" % e)
print("PYMONGO OK")
"""


@test
def test_pymongo_smoke(t):
    """pymongo (python3-pymongo) through a router's wire port: insert_one, insert_many,
    find_one, count_documents. Needs the handshake fields (hello's)."""
    have = subprocess.run(["/usr/bin/python3", "-c", "import pymongo"], stderr=subprocess.DEVNULL).returncode == 0
    if not have:
        print("  SKIP test_pymongo_smoke: python3-pymongo is not installed (scripts/deps.sh installs it)")
        return
    cfg, ss, r = wire_cluster(t, shards=2)
    url = "mongodb://127.0.0.1:%d/?directConnection=true" % r.wire[1]
    p = subprocess.run(["/usr/bin/python3", "-c", PYMONGO_SCRIPT, url], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    assert "PYMONGO OK" in p.stdout, "pymongo failed:\n%s" % p.stdout[-3000:]
    for line in p.stdout.splitlines():
        if line.startswith("PENDING"):
            print("  " + line)


if __name__ == "__main__":
    main()
