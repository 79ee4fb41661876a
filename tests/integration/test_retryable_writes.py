#!/usr/bin/env python3
"""
test_retryable_writes.py — retryable writes: every acknowledged write applied exactly once
(docs/wire-protocol.md "Retryable writes").

- drivers through a reply-dropping proxy: pymongo (/usr/bin/python3) and the Node driver
  run single-document $inc, insert, findAndModify and deleteOne through a TCP proxy that
  drops one first-attempt write reply in four (closing the client connection instead of
  forwarding it) — at least 1,000 dropped replies in all — and every document is checked
  exactly against what the drivers saw acknowledged;
- kill -9 of a shard after its write committed and before it replied
  (hangAfterWriteCommit), restarted: the router's resend is answered from the record;
- TransactionTooOld, IncompleteTransactionHistory (a session over its statement cap),
  multi:true and limit:0 refused, stmtIds of a batch split across two shards with a
  StaleConfig retry in between, the sessions commands, config.transactions, and expiry
  removing the records.
"""
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENTS = os.path.join(ROOT, "tests", "clients")
WRITE_CMDS = {"insert", "update", "delete", "findAndModify", "findandmodify"}


def lsid_of(u):
    return {"id": {"$binary": {"base64": __import__("base64").b64encode(u.bytes).decode(),
                               "subType": "04"}}}


# ---- a reply-dropping proxy -----------------------------------------------------------------

def _bson_top(doc):
    """The top-level fields of a BSON document this proxy needs: the command name (first
    key), lsid.id bytes and txnNumber. A minimal walker: it skips every element type."""
    fixed = {1: 8, 7: 12, 8: 1, 9: 8, 10: 0, 16: 4, 17: 8, 18: 8, 19: 16, 0x7F: 0, 0xFF: 0, 6: 0}
    out = {"first": None, "lsid": None, "txn": None}
    i = 4
    while i < len(doc) - 1:
        t = doc[i]
        j = doc.index(b"\x00", i + 1)
        name = doc[i + 1:j].decode("utf-8", "replace")
        i = j + 1
        if out["first"] is None:
            out["first"] = name
        if t in fixed:
            size = fixed[t]
        elif t in (2, 13, 14):
            size = 4 + struct.unpack_from("<i", doc, i)[0]
        elif t in (3, 4):
            size = struct.unpack_from("<i", doc, i)[0]
        elif t == 5:
            size = 5 + struct.unpack_from("<i", doc, i)[0]
        elif t == 11:
            k = doc.index(b"\x00", i)
            size = doc.index(b"\x00", k + 1) + 1 - i
        elif t == 15:
            size = struct.unpack_from("<i", doc, i)[0]
        else:
            return out
        if name == "txnNumber" and t == 18:
            out["txn"] = struct.unpack_from("<q", doc, i)[0]
        elif name == "lsid" and t == 3:
            out["lsid"] = bytes(doc[i:i + size])
        i += size
    return out


def _read_msg(sock):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    n = struct.unpack("<i", head)[0]
    if n < 16 or n > 48 * 1024 * 1024:
        return None
    body = bytearray(head)
    while len(body) < n:
        chunk = sock.recv(min(65536, n - len(body)))
        if not chunk:
            return None
        body += chunk
    return bytes(body)


def _request_key(msg):
    """(is_retryable_write, key) of an OP_MSG request: key = (lsid, txnNumber)."""
    opcode = struct.unpack_from("<i", msg, 12)[0]
    if opcode != 2013:
        return False, None
    i = 20
    while i < len(msg):
        kind = msg[i]
        if kind == 0:
            n = struct.unpack_from("<i", msg, i + 1)[0]
            top = _bson_top(msg[i + 1:i + 1 + n])
            ok = top["first"] in WRITE_CMDS and top["lsid"] is not None and top["txn"] is not None
            return ok, (top["lsid"], top["txn"]) if ok else None
        i += 1 + struct.unpack_from("<i", msg, i + 1)[0]
    return False, None


class DropProxy:
    """Between the drivers and the router: forwards every request; of the replies to the
    first attempt of each retryable write (lsid, txnNumber), every fourth is dropped by
    closing the client connection instead of forwarding it (a lost reply: the write ran).
    A retry's reply is always forwarded, so every write ends acknowledged."""

    def __init__(self, upstream_port):
        self.up = upstream_port
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(64)
        self.port = self.ls.getsockname()[1]
        self.mu = threading.Lock()
        self.seen = set()
        self.first_attempts = 0
        self.dropped = 0
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(("127.0.0.1", self.up), timeout=10)
                s.settimeout(None)
            except OSError:
                c.close()
                continue
            for sk in (c, s):
                sk.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            fifo = []
            cv = threading.Condition()
            threading.Thread(target=self._pump, args=(c, s, fifo, cv, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(s, c, fifo, cv, False), daemon=True).start()

    def _decide(self, msg):
        retryable, key = _request_key(msg)
        if not retryable:
            return False
        with self.mu:
            if key in self.seen:
                return False          # a retry: always answered
            self.seen.add(key)
            self.first_attempts += 1
            return self.first_attempts % 4 == 0

    def _pump(self, src, dst, fifo, cv, requests):
        """Copies messages src -> dst until either side closes. A request queues its drop
        decision; a reply takes its own and, when dropped, closes both sides instead."""
        try:
            while True:
                msg = _read_msg(src)
                if msg is None:
                    break
                drop = False
                with cv:
                    if requests:
                        fifo.append(self._decide(msg))
                    elif fifo:
                        drop = fifo.pop(0)
                if drop:
                    with self.mu:
                        self.dropped += 1
                    break
                dst.sendall(msg)
        except OSError:
            pass
        for sk in (src, dst):
            try:
                sk.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sk.close()

    def close(self):
        self.stopping = True
        self.ls.close()


# ---- helpers ----------------------------------------------------------------------------------

def sharded_cluster(t, shard_extra=()):
    """A 2-shard cluster whose router serves the wire protocol: app.c sharded on _id with
    [0, 20) on shard0 and [20, ...) on shard1, documents _id 0..39 with n: 0, f: 0; app.d
    unsharded. Returns (cluster, router client, wire port)."""
    cfg = t.configsvr()
    ss = [t.shardd("shard%d" % i, extra=list(shard_extra)) for i in range(2)]
    wp = free_ports(1)[0]
    r = t.router(cfg.url, extra=["--wire-port", str(wp)])
    c = r.client()
    for i, s in enumerate(ss):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    c.ok({"enableSharding": "app", "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": "app.c", "key": {"_id": 1}, "$db": "admin"})
    c.ok({"split": "app.c", "middle": {"_id": 20}, "$db": "admin"})
    c.ok({"moveChunk": "app.c", "find": {"_id": 20}, "to": "shard1", "$db": "admin"})
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": k, "n": 0, "f": 0} for k in range(40)]})
    return Cluster(cfg, ss, [r]), c, wp


def write_code(c, cmd):
    """The error a write answers through a router: a shard's command error reaches the
    client as every statement's writeError (as mongos reports a failed shard batch)."""
    r = c.cmd(cmd)
    if r.get("ok") != 1:
        return r.get("code")
    errs = r.get("writeErrors") or []
    assert r["n"] == 0 and errs, r
    return errs[0]["code"]


def run_workload(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=240)
    assert p.returncode == 0, "workload %s failed: %s %s" % (argv[:2], p.stdout[-2000:], p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---- tests --------------------------------------------------------------------------------------

@test
def test_drivers_exactly_once_through_dropped_replies(t):
    """pymongo and the Node driver through the reply-dropping proxy: >= 1,000 dropped
    replies, every acknowledged write applied exactly once, checked per document."""
    mods = node_driver_dir()
    assert mods, "no Node driver in build/nodedriver (scripts/deps.sh --nodedriver installs it)"
    node = os.path.join(mods, "mongodb")
    cl, c, wp = sharded_cluster(t)
    px = DropProxy(wp)
    ops = 2200
    s = seed()
    for prefix in ("py", "js"):   # deleteOne groups: two documents each
        for lo in range(0, ops, 1000):
            c.ok({"insert": "d", "$db": "app",
                  "documents": [{"g": "%s-%d" % (prefix, i)} for i in range(lo, min(ops, lo + 1000))
                                for _ in range(2)]})
    url = "mongodb://127.0.0.1:%d/?directConnection=true" % px.port
    results = {}

    def pymongo_workload():
        try:
            results["py"] = run_workload(["/usr/bin/python3", os.path.join(
                CLIENTS, "retry_workload_pymongo.py"), url, str(s), str(ops), "py"])
        except Exception as e:  # noqa: BLE001 — reported below, as the test's failure
            results["py_err"] = "%s: %s" % (type(e).__name__, e)

    py = threading.Thread(target=pymongo_workload)
    py.start()
    results["js"] = run_workload(["node", os.path.join(CLIENTS, "retry_workload_node.js"), node,
                                  url, str(s), str(ops), "js"])
    py.join(300)
    px.close()
    assert "py" in results, "the pymongo workload did not finish: %s" % results.get(
        "py_err", "still running after 300 s")
    print("  dropped replies: %d of %d first attempts" % (px.dropped, px.first_attempts))
    assert px.dropped >= 1000, "only %d replies dropped" % px.dropped
    for who, r in results.items():
        assert r["nerrors"] == 0, "%s: %d unacknowledged writes: %s" % (who, r["nerrors"], r["errors"][:3])
    # exactly per document
    docs = {d["_id"]: d for d in c.find_all("c", "app", {"_id": {"$lt": 40}})}
    for k in range(40):
        want_n = sum(r["inc"].get(str(k), 0) for r in results.values())
        want_f = sum(r["fam"].get(str(k), 0) for r in results.values())
        assert docs[k]["n"] == want_n, "doc %d: n=%s, %d $inc acknowledged" % (k, docs[k]["n"], want_n)
        assert docs[k]["f"] == want_f, "doc %d: f=%s, %d findAndModify acknowledged" % (
            k, docs[k]["f"], want_f)
    for who, r in results.items():
        got = sorted(d["_id"] for d in c.find_all("c", "app", {"p": who}))
        assert got == sorted(r["inserted"]), "%s: %d inserted, %d acknowledged" % (
            who, len(got), len(r["inserted"]))
        left = {}
        for d in c.find_all("d", "app", {"g": {"$regex": "^%s-" % who}}):
            left[d["g"]] = left.get(d["g"], 0) + 1
        for g in r["deleted_groups"]:
            assert left.get(g, 0) == 1, "%s: group %s has %d of 2 left after one deleteOne" % (
                who, g, left.get(g, 0))
        assert sum(left.values()) == 2 * ops - len(r["deleted_groups"])


def _send_update(port, result):
    """One retryable $inc through pymongo (in a subprocess: /usr/bin/python3)."""
    code = ("import pymongo,sys; c=pymongo.MongoClient('mongodb://127.0.0.1:%d/?directConnection=true',"
            "retryWrites=True, serverSelectionTimeoutMS=30000); r=c.app.c.update_one({'_id': 30},"
            "{'$inc': {'n': 1}}); print(r.matched_count, r.modified_count)" % port)
    p = subprocess.run(["/usr/bin/python3", "-c", code], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    result["out"] = p.stdout.strip()
    result["rc"] = p.returncode


@test
def test_kill9_after_commit_before_reply(t):
    """The shard commits the write and its record, then hangs before replying
    (hangAfterWriteCommit); kill -9 there and restart: a resend (the router's own, or the
    driver's retry when the router gave up) reaches the restarted shard and is answered
    from the record — applied once."""
    cl, c, wp = sharded_cluster(t)
    s1 = cl.shards[1]
    sc = s1.client()
    n0 = fp(sc, "hangAfterWriteCommit")
    res = {}
    th = threading.Thread(target=_send_update, args=(wp, res))
    th.start()
    fp_wait(sc, "hangAfterWriteCommit", n0 + 1)
    sc.close()
    s1.kill()
    s1.start()
    th.join(120)
    assert res.get("rc") == 0, "the driver's update failed: %s" % res.get("out")
    assert res["out"].splitlines()[-1] == "1 1", res["out"]
    doc = c.find_all("c", "app", {"_id": 30})[0]
    assert doc["n"] == 1, "the $inc was applied %s times" % doc["n"]


@test
def test_stmt_ids_checked_alike_on_router_and_shard(t):
    """stmtIds must hold one 32-bit id per statement: fewer or more is InvalidLength (16),
    a non-array or a non-integer element TypeMismatch (14) — the router and a shard answer
    alike (one parser), and nothing is written."""
    cl, c, wp = sharded_cluster(t)
    base = {"insert": "c", "$db": "app", "lsid": lsid_of(uuid.uuid4()), "txnNumber": long(1),
            "documents": [{"_id": 900}, {"_id": 901}]}
    for bad, code in (([0], 16), ([0, 1, 2], 16), ("x", 14), ([0, "a"], 14)):
        for who, cl_ in (("router", c), ("shard0", cl.shards[0].client())):
            r = cl_.cmd(dict(base, stmtIds=bad))
            assert r.get("code") == code, (who, bad, r)
    assert c.find_all("c", "app", {"_id": {"$gte": 900}}) == []


@test
def test_upserts_answer_their_record(t):
    """A retryable batch of upserts over both shards: resent, every statement answers its
    recorded upserted _id at its own index, and no document is inserted twice."""
    cl, c, wp = sharded_cluster(t)
    cmd = {"update": "c", "$db": "app", "lsid": lsid_of(uuid.uuid4()), "txnNumber": long(1),
           "ordered": False, "updates": [
               {"q": {"_id": -1}, "u": {"$set": {"up": 1}}, "upsert": True},
               {"q": {"_id": 300}, "u": {"$set": {"up": 1}}, "upsert": True},
               {"q": {"_id": 5}, "u": {"$inc": {"n": 1}}, "upsert": True},
               {"q": {"_id": -2}, "u": {"$set": {"up": 1}}, "upsert": True}]}
    first = c.ok(cmd)
    assert first["n"] == 4 and first["nModified"] == 1, first
    ups = sorted((u["index"], u["_id"]) for u in first["upserted"])
    assert ups == [(0, -1), (1, 300), (3, -2)], first
    again = c.ok(cmd)
    assert (again["n"], again["nModified"]) == (4, 1), again
    assert sorted((u["index"], u["_id"]) for u in again["upserted"]) == ups, again
    assert c.find_all("c", "app", {"_id": 5})[0]["n"] == 1
    assert len(c.find_all("c", "app", {"up": 1})) == 3


@test
def test_too_old_incomplete_multi_and_config_transactions(t):
    """TransactionTooOld for an older txnNumber; a session over its statement cap answers
    IncompleteTransactionHistory for a statement it no longer knows (and the recorded answer
    for one it does); multi:true and limit:0 refused per statement; config.transactions."""
    cl, c, wp = sharded_cluster(t, shard_extra=["--session-stmts-max", "3"])
    ls = lsid_of(uuid.uuid4())
    ins = {"insert": "c", "$db": "app", "documents": [{"_id": 500, "x": 1}], "lsid": ls,
           "txnNumber": long(7)}
    assert c.ok(ins)["n"] == 1
    assert c.ok(ins)["n"] == 1                       # the retry: recorded answer, no DuplicateKey
    assert write_code(c, dict(ins, txnNumber=long(6))) == 225    # TransactionTooOld
    cl.shards[1].client().err(dict(ins, txnNumber=long(6)), code=225)   # the shard: top level
    # stmtIds 0..3 of txn 8, one per command: the cap (3) drops statement 0's record
    for sid in range(4):
        r = c.ok({"update": "c", "$db": "app", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}],
                  "lsid": ls, "txnNumber": long(8), "stmtIds": [sid]})
        assert r["n"] == 1 and r["nModified"] == 1, r
    again = {"update": "c", "$db": "app", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}],
             "lsid": ls, "txnNumber": long(8)}
    assert write_code(c, dict(again, stmtIds=[0])) == 217   # IncompleteTransactionHistory
    cl.shards[0].client().err(dict(again, stmtIds=[0]), code=217)
    assert c.ok(dict(again, stmtIds=[3]))["nModified"] == 1   # still recorded
    assert write_code(c, dict(again, stmtIds=[9])) == 217   # might have run: not run
    assert c.find_all("c", "app", {"_id": 1})[0]["n"] == 4
    # multi writes stay non-retryable (InvalidOptions per statement)
    r = c.ok({"update": "c", "$db": "app", "updates": [{"q": {"_id": 2}, "u": {"$inc": {"n": 1}}},
              {"q": {"_id": {"$lt": 3}}, "u": {"$inc": {"n": 1}}, "multi": True}],
              "ordered": False, "lsid": ls, "txnNumber": long(9)})
    assert r["n"] == 1 and [e["code"] for e in r["writeErrors"]] == [72], r
    assert "multi=true" in r["writeErrors"][0]["errmsg"]
    r = c.ok({"delete": "d", "$db": "app", "deletes": [{"q": {}, "limit": 0}], "lsid": ls,
              "txnNumber": long(10)})
    assert [e["code"] for e in r["writeErrors"]] == [72], r
    # config.transactions on the shards: this session, shaped like MongoDB's
    docs = cl.shards[0].client().ok({"find": "transactions", "$db": "config"})["cursor"]["firstBatch"]
    mine = [d for d in docs if d["_id"] == ls]
    assert len(mine) == 1 and mine[0]["txnNum"] == 10 and "lastWriteDate" in mine[0], docs
    # lastWriteOpTime.ts is the cluster time of the session's last write: the operationTime
    # its reply carried
    s0, ls2 = cl.shards[0].client(), lsid_of(uuid.uuid4())
    r = s0.ok({"insert": "c", "$db": "app", "documents": [{"_id": 501}], "lsid": ls2,
               "txnNumber": long(1)})
    docs = s0.ok({"find": "transactions", "$db": "config"})["cursor"]["firstBatch"]
    mine = [d for d in docs if d["_id"] == ls2]
    assert len(mine) == 1 and mine[0]["lastWriteOpTime"]["ts"] == r["operationTime"], (mine, r)


@test
def test_stmt_ids_split_across_shards_with_stale_retry(t):
    """A retryable batch over both shards: each shard's piece carries the stmtIds of its own
    statements (the client's), also on the router's StaleConfig retry (shard1 answers
    StaleConfig once). Probed on the shards directly: a statement sent with one of those
    stmtIds is answered from the record and not run."""
    cl, c, wp = sharded_cluster(t)
    s1 = cl.shards[1].client()
    s1.ok({"configureFailPoint": "failCommand", "$db": "admin", "mode": {"times": 1},
           "data": {"failCommands": ["insert"], "errorCode": 13388}})
    ls = lsid_of(uuid.uuid4())
    ids = [100, 101, 102, 103, 104, 105]
    docs = [{"_id": k} for k in (-50, 1050, -51, 1051, -52, 1052)]   # alternating shards
    cmd = {"insert": "c", "$db": "app", "documents": docs, "ordered": False, "lsid": ls,
           "txnNumber": long(3), "stmtIds": ids}
    assert c.ok(cmd)["n"] == 6
    assert c.ok(cmd)["n"] == 6      # the whole retry answered from both shards' records
    # shard1 recorded stmtIds 101, 103, 105; shard0 100, 102, 104: a probe with another
    # document under a recorded stmtId is answered, not inserted
    for shard, sid in ((s1, 103), (cl.shards[0].client(), 104)):
        r = shard.ok({"insert": "c", "$db": "app", "documents": [{"_id": 999 + sid}], "lsid": ls,
                      "txnNumber": long(3), "stmtIds": [sid]})
        assert r["n"] == 1, r
        assert shard.find_all("c", "app", {"_id": 999 + sid}) == [], "stmtId %d was not recorded" % sid
    r = s1.ok({"insert": "c", "$db": "app", "documents": [{"_id": 2000}], "lsid": ls,
               "txnNumber": long(3), "stmtIds": [100]})      # shard0's statement: runs here
    assert s1.find_all("c", "app", {"_id": 2000}) != [], r
    assert len(c.find_all("c", "app", {"_id": {"$in": [-50, -51, -52, 1050, 1051, 1052]}})) == 6


@test
def test_sessions_commands_and_expiry(t):
    """startSession / refreshSessions / endSessions / killSessions / killAllSessions on a
    router and a shard with MongoDB's replies and errors; a shard's retryable-write records
    expire (--session-timeout-ms) and a retry after that runs again."""
    cfg = t.configsvr()
    sh = t.shardd("shard0", extra=["--session-timeout-ms", "1500"])
    r = t.router(cfg.url).client()
    r.ok({"addShard": sh.url, "name": "shard0", "$db": "admin"})
    for cl in (r, sh.client()):
        st = cl.ok({"startSession": 1, "$db": "admin"})
        assert st["id"]["id"]["$binary"]["subType"] == "04" and "timeoutMinutes" in st, st
        for name in ("refreshSessions", "endSessions", "killSessions"):
            cl.ok({name: [st["id"]], "$db": "admin"})
        cl.ok({"killAllSessions": [], "$db": "admin"})
        cl.err({"refreshSessions": [{"id": 5}], "$db": "admin"}, code=9)
        cl.err({"endSessions": [{"id": {"$binary": {"base64": "AAAA", "subType": "04"}}}],
                "$db": "admin"}, code=2)
        cl.err({"killSessions": 1, "$db": "admin"}, code=14)
    sc = sh.client()
    ls = lsid_of(uuid.uuid4())
    ins = {"insert": "e", "$db": "app", "documents": [{"_id": 1}], "lsid": ls, "txnNumber": long(1)}
    assert sc.ok(ins)["n"] == 1

    def mine():
        return [d for d in sc.ok({"find": "transactions", "$db": "config"})["cursor"]["firstBatch"]
                if d["_id"] == ls]
    assert len(mine()) == 1
    wait_until(lambda: not mine(), 15, "the session's records to expire")
    r2 = sc.ok(ins)                                # record gone: the insert runs again
    assert r2["n"] == 0 and r2["writeErrors"][0]["code"] == 11000, r2


if __name__ == "__main__":
    main()
