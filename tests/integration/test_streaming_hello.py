#!/usr/bin/env python3
"""
test_streaming_hello.py — the awaitable hello and its exhaust stream (MongoDB's server
monitoring protocol; docs/wire-protocol.md "Streaming hello"), on real daemons.

Raw sockets (tests/integration/wireproto.py) check the protocol itself: a hello carrying
the server's topologyVersion and maxAwaitTimeMS waits that long, one of another process
is answered at once; with exhaustAllowed the replies carry moreToCome and keep coming,
each one's responseTo the previous one's requestID, until the client sends something or
closes; more waiting monitors than workers leave commands served at once (the wait is
parked in the connection layer, not on a worker); SIGTERM answers waiting monitors with
ShutdownInProgress at once; bad values get MongoDB's codes.

Then real clients: MongoDB's Node.js driver 6.x (build/nodedriver, scripts/deps.sh) with
heartbeatFrequencyMS 500 runs 60 s of mixed operations on a sharded collection through a
router, and must see no connectionPoolCleared and no serverHeartbeatFailed (and awaited
heartbeats: the stream was used); 20 fresh mongosh sessions with retryWrites=false each
succeed at their first write (the driver in mongosh used to clear its pool when its
monitor's first streamed reply came without moreToCome, failing the write in flight).
"""
import json
import os
import select
import signal
import socket
import subprocess
import time

from hostile import Int64, ObjectId, raw_elements
from lib import *  # noqa: F401,F403
from wireproto import CHECKSUM, EXHAUST_ALLOWED, MORE_TO_COME, OP_MSG, WireConn, crc32c, op_msg, op_query

MONGOSH = os.path.join(ROOT, "build", "mongosh", "node_modules", ".bin", "mongosh")
NODE_SOAK = os.path.join(ROOT, "tests", "clients", "node_monitor_soak.js")
NODE_SECONDS = 60          # the soak the monitoring spec's streaming protocol is held to
MONGOSH_SESSIONS = 20
MONGOSH_GROUP = 4          # sessions started together


def shard_with_wire(t, workers=None):
    wp = free_ports(1)[0]
    extra = ["--wire-port", str(wp)] + (["--workers", str(workers)] if workers else [])
    return t.shardd("shard0", extra=extra), ("127.0.0.1", wp)


def topology_version(doc):
    """The reply's topologyVersion as a request carries it (processId an ObjectId, counter
    a long)."""
    tv = doc["topologyVersion"]
    return {"processId": ObjectId.fromhex(tv["processId"]), "counter": Int64(tv["counter"])}


def awaitable(tv, ms, cmd="hello"):
    return {cmd: 1, "topologyVersion": tv, "maxAwaitTimeMS": ms, "$db": "admin"}


def has_data(conn, timeout):
    return bool(select.select([conn.sock], [], [], timeout)[0])


@test
def hello_waits_for_max_await_time(t):
    """Every hello reply carries topologyVersion {processId: ObjectId, counter: long}; one
    with the server's own waits maxAwaitTimeMS (hello, isMaster over OP_MSG and the legacy
    OP_QUERY ismaster); one of another process, or maxAwaitTimeMS 0, is answered at once."""
    s, addr = shard_with_wire(t)
    c = WireConn(addr, timeout=15)
    first = c.command({"hello": 1})
    types = {k: ty for ty, k, _, _ in raw_elements(raw_topology_version(c), 0)}
    assert types == {"processId": 0x07, "counter": 0x12}, types
    tv = topology_version(first)
    for cmd in ("hello", "isMaster"):
        t0 = time.monotonic()
        r = c.command(awaitable(tv, 800, cmd))
        waited = time.monotonic() - t0
        assert r["ok"] == 1.0 and r["topologyVersion"] == first["topologyVersion"], r
        assert waited >= 0.75, "%s answered after %.3f s, before maxAwaitTimeMS 800" % (cmd, waited)
    # The legacy handshake form: OP_QUERY on admin.$cmd, answered with OP_REPLY.
    c.next_id += 1
    t0 = time.monotonic()
    c.send(op_query("admin.$cmd", {"ismaster": 1, "topologyVersion": tv, "maxAwaitTimeMS": 600},
                    request_id=c.next_id))
    r = c.recv()
    assert r["response_to"] == c.next_id and r["doc"]["ismaster"] is True, r
    assert time.monotonic() - t0 >= 0.55
    # Another process's topologyVersion (a restarted server): at once, with ours.
    other = dict(tv, processId=ObjectId(b"\x01" * 12))
    t0 = time.monotonic()
    r = c.command(awaitable(other, 5000))
    assert time.monotonic() - t0 < 4.0, "a topologyVersion of another process waited"
    assert r["topologyVersion"] == first["topologyVersion"], r
    r = c.command(awaitable(tv, 0))
    assert r["ok"] == 1.0
    # A hello that waited is one command in serverStatus (its parked run is not counted).
    before = hello_runs(s)[0]
    c.command(awaitable(tv, 200))
    assert hello_runs(s)[0] == before + 1
    # A second connection sees the same processId: one per process start.
    c2 = WireConn(addr)
    assert c2.command({"isMaster": 1})["topologyVersion"] == first["topologyVersion"]


def raw_topology_version(c):
    """The raw bytes of the topologyVersion document of a hello reply."""
    c.next_id += 1
    c.send(op_msg({"hello": 1, "$db": "admin"}, request_id=c.next_id))
    raw = c.recv()["raw"]
    body = raw[16 + 5:]
    for ty, k, v, e in raw_elements(body, 0):
        if k == "topologyVersion":
            return body[v:e]
    raise AssertionError("no topologyVersion in the hello reply")


def read_stream(c, n, prev_id, min_gap):
    """Reads n streamed replies: each has moreToCome, responseTo = the previous reply's
    requestID (prev_id for the first: the request's), and reply i came no sooner than i
    gaps of min_gap after the first — measured from the first, not between two reads, which
    a descheduled test process could see back to back. Returns the last reply."""
    first = None
    r = None
    for i in range(n):
        r = c.recv()
        now = time.monotonic()
        assert r["opcode"] == OP_MSG and r["flags"] & MORE_TO_COME, (i, r)
        assert r["response_to"] == prev_id, "reply %d: responseTo %d, want %d" % (i, r["response_to"], prev_id)
        assert r["doc"]["ok"] == 1.0 and "topologyVersion" in r["doc"], r
        if first is None:
            first = now
        assert now - first >= i * min_gap, "reply %d came %.3f s after the first" % (i, now - first)
        prev_id = r["request_id"]
    return r


@test
def exhaust_streams_until_the_client_speaks(t):
    """exhaustAllowed: replies with moreToCome every maxAwaitTimeMS, responseTo chained;
    a command from the client ends the stream and is answered; with checksumPresent every
    streamed reply carries a correct CRC-32C."""
    _, addr = shard_with_wire(t)
    c = WireConn(addr, timeout=10)
    tv = topology_version(c.command({"hello": 1}))
    c.send(op_msg(awaitable(tv, 300), request_id=700, flags=EXHAUST_ALLOWED))
    read_stream(c, 4, 700, 0.25)
    c.send(op_msg({"ping": 1, "$db": "admin"}, request_id=701))
    while True:  # at most the streamed reply already on its way, then the ping's
        r = c.recv()
        if r["response_to"] == 701:
            break
        assert r["flags"] & MORE_TO_COME, r
    assert bare(r["doc"]) == {"ok": 1.0} and not r["flags"] & MORE_TO_COME, r
    assert not has_data(c, 1.0), "the stream went on after the client sent a command"
    assert bare(c.command({"ping": 1})) == {"ok": 1.0}
    # checksumPresent on the request: every streamed reply has a correct checksum.
    c.send(op_msg(awaitable(tv, 200), request_id=800, flags=EXHAUST_ALLOWED | CHECKSUM))
    r = read_stream(c, 3, 800, 0.15)
    assert r["flags"] & CHECKSUM and r["checksum"] == crc32c(r["raw"][:-4]), r
    # Without exhaustAllowed the same request gets one reply, no moreToCome.
    c2 = WireConn(addr)
    c2.send(op_msg(awaitable(tv, 100), request_id=900))
    r = c2.recv()
    assert r["response_to"] == 900 and not r["flags"] & MORE_TO_COME
    assert not has_data(c2, 0.5)


def wire_current(s):
    return s.client().ok({"serverStatus": 1, "$db": "admin"})["connections"]["wire"]["current"]


@test
def closing_the_client_ends_the_stream(t):
    """A client that closes its streaming connection frees it on the server (the parked
    request is dropped with it)."""
    s, addr = shard_with_wire(t)
    base = wire_current(s)
    conns = []
    for i in range(5):
        c = WireConn(addr)
        tv = topology_version(c.command({"hello": 1}))
        c.send(op_msg(awaitable(tv, 2000 if i % 2 else 100), request_id=10, flags=EXHAUST_ALLOWED))
        conns.append(c)
    wait_until(lambda: wire_current(s) == base + 5, 10, "5 streaming connections open")
    time.sleep(0.3)
    for c in conns:
        c.close()
    wait_until(lambda: wire_current(s) == base, 10, "the server to free the closed streams")
    assert bare(WireConn(addr).command({"ping": 1})) == {"ok": 1.0}


def hello_runs(s):
    st = s.client().ok({"serverStatus": 1, "$db": "admin"})
    return st["metrics"]["commands"]["hello"]["total"], st["connections"]["wire"]["closedByServer"]


@test
def a_stream_nobody_reads_holds_one_reply(t):
    """An exhaust stream with maxAwaitTimeMS 0 whose client never reads: the next reply is
    built only once the last one is sent, so the server stops once the socket buffers are
    full (its hello runs stay bounded: no queue of replies grows) and the send stall
    (10 s) closes the connection."""
    s, addr = shard_with_wire(t)
    c = WireConn(addr, timeout=30)
    tv = topology_version(c.command({"hello": 1}))
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    runs0, closed0 = hello_runs(s)
    c.send(op_msg(awaitable(tv, 0), request_id=90, flags=EXHAUST_ALLOWED))
    wait_until(lambda: hello_runs(s)[1]["send_timeout"] == closed0["send_timeout"] + 1, 40,
               "the send stall to close the stream nobody reads")
    runs = hello_runs(s)[0] - runs0
    print("  hello runs for the unread stream: %d" % runs, flush=True)
    # The kernel's buffers hold some thousands of ~400-byte replies; the reply queue's own
    # cap (64 MiB) would have let ~150,000 be built.
    assert runs < 40000, "%d hello runs for a stream nobody reads" % runs
    assert bare(WireConn(addr).command({"ping": 1})) == {"ok": 1.0}


@test
def waiting_monitors_hold_no_worker(t):
    """--workers 2 and 12 waiting monitors (plain and exhaust, maxAwaitTimeMS 20 s): a ping,
    an insert and a find on other connections are answered while every monitor still waits."""
    s, addr = shard_with_wire(t, workers=2)
    monitors = []
    for i in range(12):
        m = WireConn(addr, timeout=30)
        tv = topology_version(m.command({"hello": 1}))
        m.send(op_msg(awaitable(tv, 20000), request_id=50, flags=EXHAUST_ALLOWED if i % 2 else 0))
        monitors.append(m)
    time.sleep(0.5)
    c = WireConn(addr, timeout=10)
    t0 = time.monotonic()
    assert bare(c.command({"ping": 1})) == {"ok": 1.0}
    assert c.command({"insert": "w", "documents": [{"_id": 1}]}, db="app")["n"] == 1
    assert c.command({"find": "w", "filter": {}}, db="app")["cursor"]["firstBatch"] == [{"_id": 1}]
    served = time.monotonic() - t0
    assert served < 10, "commands took %.1f s behind waiting monitors" % served
    for m in monitors:
        assert not has_data(m, 0), "a monitor was answered before its maxAwaitTimeMS"
    # A monitor's own connection: a command behind its waiting hello runs after it (in order).
    m = monitors[0]
    m.send(op_msg({"ping": 1, "$db": "admin"}, request_id=51))
    assert not has_data(m, 0.5)


@test
def sigterm_answers_waiting_monitors(t):
    """SIGTERM: quiesce mode, as mongos's. Waiting hellos (plain and exhaust) on the router
    and on a shard are answered at once with ShutdownInProgress and the bumped
    topologyVersion, before the process closes their connections."""
    cfg = t.configsvr()
    s, saddr = shard_with_wire(t)
    rp = free_ports(1)[0]
    r = t.router(cfg.url, extra=["--wire-port", str(rp)])
    r.client().ok({"addShard": s.url, "name": "shard0", "$db": "admin"})
    # mongos's own code for a counter ahead of its own (a shard answers 31382).
    c = WireConn(("127.0.0.1", rp))
    tv = topology_version(c.command({"hello": 1}))
    d = c.command(awaitable(dict(tv, counter=Int64(3)), 0))
    assert d["code"] == 51761 and d["errmsg"] == (
        "Received a topology version with counter: 3 which is greater than the mongos topology "
        "version counter: 0"), d
    for proc, addr, who in ((r, ("127.0.0.1", rp), "Mongos"), (s, saddr, "The server")):
        waiting = []
        for flags in (0, EXHAUST_ALLOWED):
            m = WireConn(addr, timeout=20)
            tv = topology_version(m.command({"hello": 1}))
            m.send(op_msg(awaitable(tv, 30000), request_id=60, flags=flags))
            waiting.append((m, tv))
        time.sleep(0.3)
        t0 = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        for m, tv in waiting:
            rep = m.recv()
            took = time.monotonic() - t0
            d = rep["doc"]
            assert d["ok"] == 0.0 and d["code"] == 91 and d["codeName"] == "ShutdownInProgress", d
            assert d["errmsg"] == "%s is in quiesce mode and will shut down" % who, d
            assert d["topologyVersion"]["counter"] == tv["counter"] + 1, d
            assert rep["response_to"] == 60 and not rep["flags"] & MORE_TO_COME, rep
            assert took < 10, "answered %.1f s after SIGTERM" % took
            assert m.closed_by_peer(15)
        proc.proc.wait(20)


@test
def bad_values_get_mongodb_errors(t):
    """MongoDB's answers (mongos's codes on the router, mongod's on a shard) to malformed
    topologyVersion / maxAwaitTimeMS."""
    _, addr = shard_with_wire(t)
    c = WireConn(addr)
    tv = topology_version(c.command({"hello": 1}))
    pid = tv["processId"]
    cases = [
        ({"topologyVersion": "tv", "maxAwaitTimeMS": 0}, 10065,
         "invalid parameter: expected an object (topologyVersion)"),
        ({"topologyVersion": {"processId": "pid1", "counter": Int64(0)}, "maxAwaitTimeMS": 0}, 14,
         "BSON field 'TopologyVersion.processId' is the wrong type 'string', expected type 'objectId'"),
        ({"topologyVersion": {"processId": pid, "counter": 0}, "maxAwaitTimeMS": 0}, 14,
         "BSON field 'TopologyVersion.counter' is the wrong type 'int', expected type 'long'"),
        ({"topologyVersion": {"processId": pid}, "maxAwaitTimeMS": 0}, 40414,
         "BSON field 'TopologyVersion.counter' is missing but a required field"),
        ({"topologyVersion": {"counter": Int64(0)}, "maxAwaitTimeMS": 0}, 40414,
         "BSON field 'TopologyVersion.processId' is missing but a required field"),
        ({"topologyVersion": dict(tv, randomField=1), "maxAwaitTimeMS": 0}, 40415,
         "BSON field 'TopologyVersion.randomField' is an unknown field."),
        ({"topologyVersion": dict(tv, counter=Int64(-1)), "maxAwaitTimeMS": 0}, 51758,
         "topologyVersion must have a non-negative counter"),
        ({"topologyVersion": tv}, 51760, "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'"),
        ({"maxAwaitTimeMS": 0}, 51760, "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'"),
        ({"topologyVersion": tv, "maxAwaitTimeMS": -1}, 51024,
         "BSON field 'maxAwaitTimeMS' value must be >= 0, actual value '-1'"),
        ({"topologyVersion": tv, "maxAwaitTimeMS": "x"}, 14, None),
        ({"topologyVersion": dict(tv, counter=Int64(1)), "maxAwaitTimeMS": 0}, 31382,
         "Received a topology version with counter: 1 which is greater than the server "
         "topology version counter: 0"),
    ]
    for cmd in ("hello", "isMaster"):
        for extra, code, msg in cases:
            r = c.command(dict({cmd: 1}, **extra))
            assert r["ok"] == 0.0 and r["code"] == code, (cmd, extra, r)
            if msg:
                assert r["errmsg"] == msg, (r["errmsg"], msg)
    # A topologyVersion of another process with a higher counter is fine: answered at once.
    r = c.command({"hello": 1, "topologyVersion": {"processId": ObjectId(b"\x02" * 12),
                                                   "counter": Int64(5)}, "maxAwaitTimeMS": 0})
    assert r["ok"] == 1.0
    # exhaustAllowed on a hello that is not awaitable: 51763, and no stream.
    c.send(op_msg({"hello": 1, "$db": "admin"}, request_id=70, flags=EXHAUST_ALLOWED))
    r = c.recv()
    assert r["doc"]["code"] == 51763 and not r["flags"] & MORE_TO_COME, r
    assert not has_data(c, 0.3)


def wire_router(t, shards=2):
    cl, wp = t.wire_cluster(shards)
    return cl, "mongodb://127.0.0.1:%d" % wp


@test
def node_driver_streams_without_clearing_pools(t):
    """The Node.js driver 6.x, heartbeatFrequencyMS 500, 60 s of insert/find/update/delete/
    aggregate on a hashed-sharded collection through a router: no connectionPoolCleared,
    no serverHeartbeatFailed, and heartbeats succeeded awaited (the stream was used)."""
    nm = node_driver_dir()
    if not nm:
        print("  SKIP: the Node.js driver is not installed in build/nodedriver (scripts/deps.sh "
              "--nodedriver installs it with npm; it warned when npm could not)", flush=True)
        return
    _, url = wire_router(t)
    seconds = int(os.environ.get("T_NODE_SECONDS") or NODE_SECONDS)
    env = dict(os.environ, NODE_PATH=nm, HOME=t.dir, DO_NOT_TRACK="1")
    p = subprocess.run(["node", NODE_SOAK, url, str(seconds)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, timeout=seconds + 120)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    assert p.returncode == 0 and lines, "node exited %d:\n%s" % (p.returncode, p.stdout[-3000:])
    res = json.loads(lines[-1][len("RESULT "):])
    print("  node driver: %s" % json.dumps(res), flush=True)
    assert res["poolCleared"] == 0 and res["hbFailed"] == 0, res
    assert res.get("failed", 0) == 0, res
    # Streaming: heartbeats at least every 500 ms, nearly all of them awaited replies.
    assert res["hbAwaited"] >= seconds, res
    assert res["rounds"] > 0 and res["count"] == res["inserted"] - res["rounds"], res


@test
def mongosh_first_writes_succeed(t):
    """20 fresh mongosh sessions with retryWrites=false, a few at a time: each one's first
    command is a write, and each succeeds."""
    if not os.access(MONGOSH, os.X_OK):
        print("  SKIP: mongosh is not installed at %s (scripts/deps.sh --mongosh)" % MONGOSH, flush=True)
        return
    cl, url = wire_router(t, shards=1)
    home = os.path.join(t.dir, "mongosh-home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, HOME=home, DO_NOT_TRACK="1", MONGOSH_SKIP_NODE_VERSION_CHECK="1")
    failures = []
    for g in range(0, MONGOSH_SESSIONS, MONGOSH_GROUP):
        procs = []
        for i in range(g, g + MONGOSH_GROUP):
            js = ("const r = db.getSiblingDB('shw').s.insertOne({_id: %d}); "
                  "print('FIRSTWRITE ' + r.insertedId)" % i)
            procs.append((i, subprocess.Popen(
                [MONGOSH, "--quiet", "--norc", url + "/?retryWrites=false", "--eval", js],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)))
        for i, p in procs:
            out, _ = p.communicate(timeout=120)
            if p.returncode != 0 or ("FIRSTWRITE %d" % i) not in out:
                failures.append("session %d exited %d: %s" % (i, p.returncode, out[-600:]))
    assert not failures, "%d of %d sessions failed their first write:\n%s" % (
        len(failures), MONGOSH_SESSIONS, "\n".join(failures[:4]))
    n = cl.client().ok({"count": "s", "$db": "shw"})["n"]
    assert n == MONGOSH_SESSIONS, n


if __name__ == "__main__":
    main()
