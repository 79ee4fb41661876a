#!/usr/bin/env python3
"""
soak.py — the seeded chaos soak (`make chaos SECONDS=N SEED=S`;
docs/testing-with-faults.md explains how to read it). It starts a config server with a busy
balancer (short rounds, tiny chunks), SHARDS shards plus a spare one, and two routers —
r0 carries the workload and every administrative command, r1 carries workload only, so its
routing cache goes stale on purpose — then for SECONDS runs at once:

- workload threads (single inserts, updates, deletes, findAndModify, upserts, batch inserts,
  reads of one document; updateMany $inc counters; insert-then-deleteMany batches) whose
  every outcome is written into the history model (history.py); half of the inserts,
  batches, updates, deletes and findAndModify are retryable writes (lsid + txnNumber),
  resent as is after every ambiguous outcome until a definite answer (or, once healed, in
  the final phase), which the model then holds to exactly once;
- a scan thread (find over every shard, count, distinct, aggregate) whose results the model
  checks as they come;
- an admin/DDL thread on r0: moveChunk, moveRange, split, mergeChunks, addShard and
  removeShard of the spare, movePrimary, zones, defragmentation, createIndexes and
  dropIndexes (unique ones too), drop and re-create, renameCollection of an unsharded
  collection, shardCollection;
- the fault thread: a schedule drawn up front from the seed — kill -9 (and restart with the
  same flags, data and port) of any process, SIGSTOP then SIGCONT of any process, crash /
  error / hang failpoints at migration, session-migration and commit steps (and a hang at
  hangAfterWriteCommit ended by kill -9 of the shard), and, in network mode (root, with
  tests/chaos/netns.py), cuts between two processes both ways or one way, healed later.

Then it heals everything, restarts every process, stops the balancer, waits (bounded) for
the cluster to go quiet and checks the final state (history.py and final_checks below).
Everything is seeded by one number: each thread's operations come from random.Random of
(seed, thread name) and draw the same values whatever the outcomes, and the fault schedule is
drawn before the run starts, so the same seed replays the same operations and faults
(timing differs). Every fault is printed as it is injected ("t=12.3 fault#7 kill -9 shard1").
A failure prints the seed, each anomaly and the log lines around it. Every loop, wait and
client call is bounded; every process is stopped by its PID at the end, also on failure.

    python3 tests/chaos/soak.py --seconds 120 --seed 42 [--shards 3] [--net auto|on|off]
"""
import argparse
import base64
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
sys.path.insert(0, HERE)
import lib                                   # noqa: E402
from lib import Client, Proc, free_ports      # noqa: E402
import history                                # noqa: E402
from history import ABSENT, History, rw_outcome   # noqa: E402

try:
    import netns                              # tests/chaos/netns.py (network namespaces), when present
except ImportError:
    netns = None

DB = "app"
K_SPACE = 10000          # shard-key values of app.docs and app.del
N_CTR = 120              # documents of app.ctr (the updateMany counters)
N_MP = 40                # documents of the unsharded collection moved by movePrimary / renamed
CLIENT_TIMEOUT_MS = 12000
ROUTER_PEER_TIMEOUT_MS = 6000   # below the clients' timeout, as the router's help asks
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0", "--range-deleter-batch-delay-ms", "0"]
CONFIG_FLAGS = ["--balancer-idle-ms", "300", "--balancer-throttle-ms", "100",
                "--defrag-throttle-ms", "200"]
RW_SHARE = 0.5          # share of the workers' inserts, updates, deletes, findAndModify sent retryable
N_SESSIONS = 3           # logical sessions per worker (lsid), each with its own txnNumber
RW_CLIENT_TIMEOUT_MS = 4000     # the retryable writes' client timeout (below the router's resends)
FINAL_RESENDS = 20       # resends of a retryable write still unanswered at the run's end, once healed
QUIET_WAIT_S = 120       # bound on the wait for quiet at the end
ORPHAN_WAIT_S = 60       # bound on orphans reaching zero once quiet
HARD_EXTRA_S = 400       # the soak's hard deadline: SECONDS plus this (start, heal, final checks);
                         # below tests/run.sh's 600 s suite bound for make test's 120 s soak

# Failpoints at migration and commit steps (docs/protocol.md's failpoint tables): process
# kind, name, actions that make sense there.
SHARD_POINTS = [
    ("moveChunkHangAtStep1", ("hang", "error", "crash")),
    ("moveChunkHangAtStep2", ("hang", "error", "crash")),
    ("moveChunkHangAtStep3", ("hang", "error", "crash")),
    ("moveChunkHangAtStep4", ("hang", "error", "crash")),
    ("moveChunkHangAtStep5", ("hang", "error", "crash")),
    ("moveChunkHangAtStep6", ("hang", "crash")),
    ("hangBeforeLeavingCriticalSection", ("hang", "crash")),
    ("migrationCommitNetworkError", ("error",)),
    ("failMigrationCommit", ("error",)),
    ("hangInTransferModsWithCapture", ("hang",)),
    ("migrateThreadHangAtStep1", ("hang", "error", "crash")),
    ("migrateThreadHangAtStep2", ("hang", "error", "crash")),
    ("migrateThreadHangAtStep3", ("hang", "error", "crash")),
    ("migrateThreadHangAtStep4", ("hang", "error", "crash")),
    ("migrateThreadHangAtStep5", ("hang", "error", "crash")),
    ("migrateThreadHangAtStep6", ("hang", "crash")),
    ("migrateThreadHangAtStep7", ("hang", "crash")),
    ("hangBeforeRecvChunkStart", ("hang",)),
    ("hangBeforeWriteCommit", ("hang", "error", "crash")),
    # committed, reply not sent: the case retryable writes exist for (hangkill: hang there,
    # then kill -9 the shard and restart it; listed twice to come up more often)
    ("hangAfterWriteCommit", ("crash", "error", "hangkill")),
    ("hangAfterWriteCommit", ("crash", "hangkill")),
    ("hangInGetNextSessionMods", ("hang", "error", "crash")),
    ("sessionMigrationHangAfterBatch", ("hang", "error", "crash")),
    ("sessionMigrationHangBeforeDone", ("hang", "error", "crash")),
    ("hangBeforeIndexBuildCommit", ("hang", "error", "crash")),
]
CONFIG_POINTS = [
    ("hangBeforeCommitMigration", ("hang", "error", "crash")),
    ("splitChunkBeforeCommit", ("hang", "error", "crash")),
    ("mergeChunksBeforeCommit", ("hang", "error", "crash")),
]


def say(msg):
    print(msg, flush=True)


class SafeClient:
    """A workload client whose cmd never raises: a broken shardctl pipe (its process gone,
    unparsable output) becomes an error reply — an outcome the model counts as "maybe" — and
    the next command opens a fresh pipe."""

    def __init__(self, url, timeout_ms):
        self.url, self.timeout_ms, self.c = url, timeout_ms, None

    def cmd(self, doc):
        try:
            if self.c is None:
                self.c = Client(self.url, self.timeout_ms)
            return self.c.cmd(doc)
        except (AssertionError, ValueError, OSError) as e:
            self.close()
            return {"ok": 0, "errmsg": "client pipe failed: %s" % e}

    def find_all(self, coll, db, filter=None, **opts):
        try:
            if self.c is None:
                self.c = Client(self.url, self.timeout_ms)
            return self.c.find_all(coll, db, filter, **opts)
        except (ValueError, OSError) as e:
            self.close()
            raise AssertionError("client pipe failed: %s" % e)

    def close(self):
        if self.c is not None:
            try:
                self.c.close()
            except Exception:   # noqa: BLE001
                pass
            self.c = None


# ---- the fault schedule ------------------------------------------------------------------

def draw_schedule(seed, seconds, names, net):
    """The whole fault schedule, drawn before the run from the seed alone: a list of
    (t, kind, args). names: the processes ({"config": [...], "shard": [...], "router": [...]})."""
    rng = random.Random("%s/faults" % seed)
    procs = names["config"] + names["shard"] + names["router"]
    kinds = [("kill", 25), ("stop", 20), ("failpoint", 40)] + ([("cut", 25)] if net else [])
    total = sum(w for _, w in kinds)
    out = []
    t = 3.0 + rng.uniform(0, 2)
    while t < seconds - 4:
        x = rng.uniform(0, total)
        for kind, w in kinds:
            x -= w
            if x <= 0:
                break
        if kind == "kill":
            args = {"proc": rng.choice(procs), "down_s": round(rng.uniform(0.2, 3.0), 1)}
        elif kind == "stop":
            args = {"proc": rng.choice(procs), "pause_s": round(rng.uniform(0.5, 8.0), 1)}
        elif kind == "failpoint":
            if rng.random() < 0.8:
                proc = rng.choice(names["shard"])
                point, actions = rng.choice(SHARD_POINTS)
            else:
                proc = rng.choice(names["config"])
                point, actions = rng.choice(CONFIG_POINTS)
            # a hang beyond the donor's 20 s deadline now and then
            args = {"proc": proc, "point": point, "action": rng.choice(actions),
                    "hold_s": round(rng.choice([rng.uniform(3, 12), rng.uniform(3, 12), rng.uniform(20, 25)]), 1)}
        else:
            a, b = rng.sample(procs, 2)
            args = {"a": a, "b": b, "both": rng.random() < 0.6,
                    "heal_s": round(rng.choice([rng.uniform(1, 10), rng.uniform(1, 10), rng.uniform(21, 28)]), 1)}
        out.append((round(t, 1), kind, args))
        t += rng.uniform(1.5, 6.0)
    return out


def describe(kind, a):
    if kind == "kill":
        return "kill -9 %s (restart after %.1fs)" % (a["proc"], a["down_s"])
    if kind == "stop":
        return "SIGSTOP %s (SIGCONT after %.1fs)" % (a["proc"], a["pause_s"])
    if kind == "failpoint" and a["action"] == "hangkill":
        return "failpoint %s %s action=hang, kill -9 once entered (off after %.1fs if not)" % (
            a["proc"], a["point"], a["hold_s"])
    if kind == "failpoint":
        return "failpoint %s %s action=%s (off after %.1fs)" % (a["proc"], a["point"], a["action"], a["hold_s"])
    return "cut %s %s %s (heal after %.1fs)" % (a["a"], "<->" if a["both"] else "->", a["b"], a["heal_s"])


# ---- the soak ----------------------------------------------------------------------------

class Soak:
    def __init__(self, seed, seconds, shards=3, net_mode="auto"):
        self.seed = seed
        self.seconds = seconds
        self.n_shards = shards
        self.dir = tempfile.mkdtemp(prefix="ms-chaos-%d-" % seed)
        self.procs = {}            # name -> Proc
        self.plock = threading.Lock()
        self.net = None
        self.stop_ev = threading.Event()
        self.events = []           # (t, text) of every fault and restart, for the report
        self.faults_injected = 0
        self.restarts = 0
        self.admin_counts = {}
        self.spare_state = "out"   # spare shard: out | in | draining
        self.index_last = {}       # index name -> (its last createIndexes / dropIndexes, acknowledged?)
        self.index_reruns = 0
        self.drop_pending = False  # the last drop (or shardCollection) of app.scratch failed
        self.shardcoll_failed = [] # shardCollection commands of new collections that failed
        self.pending_rw = []       # retryable writes unanswered when the workload stopped
        self.t0 = None
        self.hist = None
        if net_mode != "off" and netns is not None and netns.Net.available():
            self.net_on = True
        else:
            self.net_on = False
            if net_mode == "on":
                raise SystemExit("--net on: network namespaces unavailable (%s)" % (
                    "tests/chaos/netns.py missing" if netns is None else "needs root, ip, iptables"))

    # ---- processes ----

    def _argv(self, name, binary, extra, port):
        bind = self.net.addr(name) if self.net else "127.0.0.1"
        argv = [os.path.join(lib.BIN, binary), "--bind", bind, "--port", str(port),
                "--enable-test-commands"] + (["--name", name] if binary == "shardd" else []) + extra
        if self.net:
            argv = self.net.wrap(name, argv)
        return argv, "tcp://%s:%d" % (bind, port)

    def _start(self, name, binary, extra, port):
        argv, url = self._argv(name, binary, extra, port)
        p = Proc(name, argv, self.dir, url)
        self.procs[name] = p
        return p

    def start_cluster(self):
        names = ["config"] + ["shard%d" % i for i in range(self.n_shards + 1)] + ["r0", "r1"]
        if self.net_on:
            self.net = netns.Net(names)
        ports = free_ports(len(names))
        port = dict(zip(names, ports))
        cfg = self._start("config", "configsvr", ["--dbpath", self._dbpath("config")] + CONFIG_FLAGS, port["config"])
        for i in range(self.n_shards + 1):
            n = "shard%d" % i
            self._start(n, "shardd", ["--dbpath", self._dbpath(n)] + SHARD_FLAGS, port[n])
        for r in ("r0", "r1"):
            self._start(r, "router", ["--configdb", cfg.url, "--peer-timeout-ms", str(ROUTER_PEER_TIMEOUT_MS)], port[r])
        self.shards = ["shard%d" % i for i in range(self.n_shards)]
        self.spare = "shard%d" % self.n_shards

    def _dbpath(self, name):
        d = os.path.join(self.dir, name)
        os.makedirs(d, exist_ok=True)
        return d

    def client(self, name, timeout_ms=CLIENT_TIMEOUT_MS):
        return Client(self.procs[name].url, timeout_ms)

    def wclient(self, name):
        return SafeClient(self.procs[name].url, CLIENT_TIMEOUT_MS)

    def rerun(self):
        return "make chaos SECONDS=%d SEED=%d NET=%s" % (self.seconds, self.seed, "on" if self.net_on else "off")

    def t(self):
        return time.monotonic() - self.t0

    def event(self, text):
        line = "t=%.1f %s" % (self.t(), text)
        self.events.append(line)
        say(line)

    # ---- setup ----

    def setup(self):
        c = self.client("r0", 30000)
        for s in self.shards:
            c.ok({"addShard": self.procs[s].url, "name": s, "$db": "admin"})
        c.ok({"update": "settings", "$db": "config", "updates": [
            {"q": {"_id": "chunksize"}, "u": {"$set": {"valueBytes": 16 * 1024}}, "upsert": True}]})
        c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
        c.ok({"shardCollection": DB + ".docs", "key": {"k": 1}, "$db": "admin"})
        c.ok({"shardCollection": DB + ".del", "key": {"k": 1}, "$db": "admin"})
        c.ok({"shardCollection": DB + ".ctr", "key": {"g": 1}, "$db": "admin"})
        c.ok({"insert": "ctr", "$db": DB, "documents": [{"_id": i, "g": i, "c": 0} for i in range(N_CTR)]})
        for m in range(N_CTR // 6, N_CTR, N_CTR // 6):
            c.ok({"split": DB + ".ctr", "middle": {"g": m}, "$db": "admin"})
        for m in range(K_SPACE // 8, K_SPACE, K_SPACE // 8):
            c.ok({"split": DB + ".docs", "middle": {"k": m}, "$db": "admin"})
        c.ok({"enableSharding": "mp", "primaryShard": "shard0", "$db": "admin"})
        c.ok({"insert": "u", "$db": "mp", "documents": [{"_id": i, "x": i} for i in range(N_MP)]})
        c.ok({"balancerStart": 1, "$db": "admin"})
        c.close()
        self.mp_names = {"u"}      # where mp's documents may be (renames with unknown outcome widen it)
        self.mp_acked = "u"

    # ---- workload ----

    def worker(self, wid, router):
        """Single-document operations on this worker's own documents of app.docs; about half
        of its inserts, batches, updates, deletes and findAndModify are retryable writes."""
        rng = random.Random("%s/worker%d" % (self.seed, wid))
        h = self.hist
        c = self.wclient(router)
        # retryable writes: a shorter client timeout (as a driver's socket timeout) gives up
        # while the router may still be at it, so resends also race the first execution;
        # a driver resends via any router
        rws = [SafeClient(self.procs[r].url, RW_CLIENT_TIMEOUT_MS) for r in (router, "r1" if router == "r0" else "r0")]
        sessions = [[lsid_of(uuid.UUID(int=rng.getrandbits(128), version=4)), 0] for _ in range(N_SESSIONS)]
        mine = []
        i = 0
        while not self.stop_ev.is_set():
            i += 1
            kind = rng.choice(["insert", "insert", "update", "update", "delete", "fam", "upsert",
                               "batch", "read", "read"])
            pick, k = rng.random(), rng.randrange(K_SPACE)
            rw, sess, delta, stmt0 = rng.random() < RW_SHARE, rng.choice(sessions), rng.randrange(1, 1000), \
                rng.choice([None, rng.randrange(1, 1000)])
            val = wid * 10000000 + i
            live = [d for d in mine if not d.retired]
            if rw and kind in ("insert", "batch", "update", "delete", "fam") and (live or kind in ("insert", "batch")):
                sess[1] += 1
                op = self._retryable(h, mine, live, wid, i, kind, pick, k, val, delta, stmt0,
                                     {"lsid": sess[0], "txnNumber": lib.long(sess[1])})
                if not self._drive(op, rws):
                    with self.plock:
                        self.pending_rw.append(op)     # resent once healed (final_checks)
            elif kind in ("insert", "upsert", "batch") or not live:
                if kind == "batch":
                    self._batch(c, h, mine, wid, i, k, val)
                else:
                    self._create(c, h, mine, kind, "w%d-%d" % (wid, i), k, val)
            else:
                self._touch(c, h, live[int(pick * len(live))], kind, val)
            time.sleep(0.02)
        for x in [c] + rws:
            x.close()

    # ---- retryable writes ----

    def _retryable(self, h, mine, live, wid, i, kind, pick, k, val, delta, stmt0, session):
        """Builds one retryable write (RetryableWrite) and begins its documents in the model:
        an insert, a batch of 4 over the key space (stmtIds of its own when stmt0 is drawn,
        so the router splits them across shards), or an $inc update, a delete or an $inc
        findAndModify of one live document — the $inc makes a second execution visible."""
        if kind in ("insert", "batch"):
            n = 1 if kind == "insert" else 4
            ds = [h.new_doc("w%d-%d" % (wid, i) + ("" if n == 1 else "-%d" % j), (k + j * 997) % K_SPACE)
                  for j in range(n)]
            mine.extend(ds)
            for d in ds:
                h.begin(d)
            cmd = {"insert": "docs", "$db": DB, "ordered": kind == "insert",
                   "documents": [{"_id": d.id, "k": d.k, "v": val} for d in ds]}
            if stmt0 is not None and n > 1:
                cmd["stmtIds"] = [stmt0 + 3 * j for j in range(n)]
            return RetryableWrite(kind, dict(cmd, **session), [(d, val) for d in ds], {"n": n})
        d = live[int(pick * len(live))]
        before = h.begin(d)
        q = {"k": d.k, "_id": d.id}
        after = ABSENT if before is ABSENT or kind == "delete" else before + delta
        if kind == "update":
            cmd = {"update": "docs", "$db": DB, "updates": [{"q": q, "u": {"$inc": {"v": delta}}}]}
        elif kind == "delete":
            cmd = {"delete": "docs", "$db": DB, "deletes": [{"q": q, "limit": 1}]}
        else:
            cmd = {"findAndModify": "docs", "$db": DB, "query": q, "update": {"$inc": {"v": delta}}}
        want = {"value": before} if kind == "fam" else {"n": 0 if before is ABSENT else 1}
        return RetryableWrite(kind, dict(cmd, **session), [(d, after)], want)

    def _drive(self, op, clients, final=False):
        """Sends op, and resends it as is (same lsid, txnNumber, stmtIds) after every
        ambiguous answer, alternating routers, until a definite one — or, during the run, the
        end of the workload (False: still pending), or in the final phase FINAL_RESENDS tries."""
        h = self.hist
        last_try = op.tries + FINAL_RESENDS
        while True:
            r = clients[op.tries % len(clients)].cmd(op.cmd)
            op.tries += 1
            outcome, detail = rw_outcome(op.kind, r, op.want)
            if outcome != "retry":
                break
            h.resent(detail)
            if (final and op.tries >= last_try) or (not final and self.stop_ev.is_set()):
                if final:
                    h.end_retryable(op.writes, "maybe", op.kind, op.tries)
                return final
            (time.sleep if final else self.stop_ev.wait)(min(1.0, 0.05 * 2 ** min(op.tries, 5)))
        if outcome == "wrong":
            ids = [str(d.id) for d, _ in op.writes]
            h.anomaly("retryable %s on %s (%s) answered on try %d: %s" % (
                op.kind, ",".join(ids), json.dumps(op.cmd.get("lsid"))[:80], op.tries, detail), ids)
        h.end_retryable(op.writes, outcome, op.kind, op.tries)
        return True

    def resolve_pending(self):
        """The run's final phase: each retryable write still without a definite answer is
        resent, as is, to the healed cluster."""
        pend, self.pending_rw = self.pending_rw, []
        cs = [self.wclient("r0"), self.wclient("r1")]
        for op in pend:
            self._drive(op, cs, final=True)
        for c in cs:
            c.close()
        say("t=%.1f final phase: %d retryable writes were unanswered at the end of the workload; resent, %d "
            "still without a definite answer" % (self.t(), len(pend), self.hist.stats["rw_unresolved"]))

    def _create(self, c, h, mine, kind, _id, k, val):
        d = h.new_doc(_id, k)
        mine.append(d)
        h.begin(d)
        if kind == "insert":
            r = c.cmd({"insert": "docs", "$db": DB, "documents": [{"_id": _id, "k": k, "v": val}]})
            ok = r.get("ok") == 1 and not r.get("writeErrors") and r.get("n") == 1
        else:
            r = c.cmd({"update": "docs", "$db": DB, "updates": [
                {"q": {"k": k, "_id": _id}, "u": {"$set": {"v": val}}, "upsert": True}]})
            ok = r.get("ok") == 1 and not r.get("writeErrors") and r.get("n") == 1
            if ok and len(r.get("upserted") or []) != 1:
                h.wrong(d, "upsert", "an upserted document", r)
        h.end(d, "ok" if ok else "maybe", val, kind)

    def _batch(self, c, h, mine, wid, i, k, val):
        ds = [h.new_doc("w%d-%d-%d" % (wid, i, j), (k + j * 997) % K_SPACE) for j in range(4)]
        mine.extend(ds)
        for d in ds:
            h.begin(d)
        r = c.cmd({"insert": "docs", "$db": DB, "ordered": False,
                   "documents": [{"_id": d.id, "k": d.k, "v": val} for d in ds]})
        ok = r.get("ok") == 1 and not r.get("writeErrors") and r.get("n") == 4
        for d in ds:
            h.end(d, "ok" if ok else "maybe", val, "batch")

    def _touch(self, c, h, d, kind, val):
        before = h.begin(d)
        q = {"k": d.k, "_id": d.id}
        if kind == "read":
            r = c.cmd({"find": "docs", "$db": DB, "filter": q})
            if r.get("ok") == 1:
                got = r["cursor"]["firstBatch"]
                v = got[0].get("v") if got else ABSENT
                if len(got) > 1 or v != before:
                    h.wrong(d, "find", before, [x.get("v") for x in got] if got else ABSENT)
            h.end(d, "ok", before, kind)       # a read changes nothing, whatever its outcome
            return
        if kind == "update":
            r = c.cmd({"update": "docs", "$db": DB, "updates": [{"q": q, "u": {"$set": {"v": val}}}]})
            ok = r.get("ok") == 1 and not r.get("writeErrors")
            after = val if ok and r.get("n") == 1 else ABSENT
        elif kind == "delete":
            r = c.cmd({"delete": "docs", "$db": DB, "deletes": [{"q": q, "limit": 1}]})
            ok = r.get("ok") == 1 and not r.get("writeErrors")
            after = ABSENT
            val = ABSENT
        else:   # findAndModify returning the document before
            r = c.cmd({"findAndModify": "docs", "$db": DB, "query": q, "update": {"$set": {"v": val}}})
            ok = r.get("ok") == 1
            if ok:
                pre = r.get("value")
                pre_v = pre.get("v") if pre else ABSENT
                if pre_v != before:
                    h.wrong(d, "findAndModify (value before)", before, pre_v)
            after = val if ok and r.get("value") else ABSENT
        if ok:
            n = r.get("n") if kind != "fam" else (1 if r.get("value") else 0)
            want_n = 0 if before is ABSENT else 1
            if n != want_n:
                h.wrong(d, "%s n" % kind, "n=%d" % want_n, "n=%s" % n)
            h.end(d, "ok", after if before is not ABSENT else ABSENT, kind)
        else:
            h.end(d, "maybe", val, kind)

    def counter_worker(self, router, tag):
        """updateMany {$inc: {c: 1}} over ranges of app.ctr; counts must come out exact."""
        rng = random.Random("%s/ctr-%s" % (self.seed, tag))
        h = self.hist
        c = self.wclient(router)
        while not self.stop_ev.is_set():
            lo = rng.randrange(N_CTR)
            hi = min(N_CTR, lo + rng.randrange(1, N_CTR // 2))
            r = c.cmd({"update": "ctr", "$db": DB, "updates": [
                {"q": {"g": {"$gte": lo, "$lt": hi}}, "u": {"$inc": {"c": 1}}, "multi": True}]})
            ok = r.get("ok") == 1 and not r.get("writeErrors")
            if ok and (r.get("n") != hi - lo or r.get("nModified") != hi - lo):
                h.anomaly("updateMany over g in [%d, %d) acknowledged n=%s nModified=%s, expected %d"
                          % (lo, hi, r.get("n"), r.get("nModified"), hi - lo), ["app.ctr"])
            h.ctr_end(lo, hi, "ok" if ok else "maybe")
            time.sleep(0.02)
        c.close()

    def batch_worker(self, router):
        """Insert a batch of 8, then deleteMany it: n must be exactly 8, none left."""
        rng = random.Random("%s/del" % self.seed)
        h = self.hist
        c = self.wclient(router)
        b = 0
        while not self.stop_ev.is_set():
            time.sleep(0.02)
            b += 1
            ks = [rng.randrange(K_SPACE) for _ in range(8)]
            ids = ["b%d-%d" % (b, j) for j in range(8)]
            h.batch_ids[b] = ids
            h.batches[b] = "maybe"
            pause = rng.uniform(0, 0.3)
            r = c.cmd({"insert": "del", "$db": DB, "documents": [
                {"_id": ids[j], "k": ks[j], "b": b} for j in range(8)]})
            if not (r.get("ok") == 1 and not r.get("writeErrors") and r.get("n") == 8):
                continue      # outcome unknown: the batch may be partly there; left alone
            h.batches[b] = "inserted"
            time.sleep(pause)
            r = c.cmd({"delete": "del", "$db": DB, "deletes": [{"q": {"b": b}, "limit": 0}]})
            if r.get("ok") == 1 and not r.get("writeErrors"):
                if r.get("n") != 8:
                    h.anomaly("deleteMany of batch %d acknowledged n=%s, expected 8" % (b, r.get("n")),
                              ["b%d-" % b])
                h.batches[b] = "deleted"
                h.stats["batches_deleted"] += 1
            else:
                h.batches[b] = "maybe"
        c.close()

    def scanner(self):
        rng = random.Random("%s/scan" % self.seed)
        h = self.hist
        cs = {r: self.wclient(r) for r in ("r0", "r1")}
        while not self.stop_ev.is_set():
            router = rng.choice(["r0", "r1"])
            what = rng.choice(["scan", "scan", "count", "distinct", "aggregate", "ctrscan"])
            bs = rng.choice([7, 50, 1000])
            c = cs[router]
            try:
                if what == "scan":
                    snap = h.scan_start()
                    docs = c.find_all("docs", DB, {}, batchSize=bs)
                    h.scan_check(snap, docs, "find app.docs via %s" % router)
                elif what == "ctrscan":
                    docs = c.find_all("ctr", DB, {}, batchSize=bs)
                    ids = [x["_id"] for x in docs]
                    if len(ids) != N_CTR or len(set(ids)) != N_CTR:
                        h.anomaly("find app.ctr via %s: %d documents, %d distinct, expected %d"
                                  % (router, len(ids), len(set(ids)), N_CTR), ["app.ctr"])
                elif what == "count":
                    r = c.cmd({"count": "ctr", "$db": DB, "query": {}})
                    if r.get("ok") == 1 and lib.num(r["n"]) != N_CTR:
                        h.anomaly("count app.ctr via %s: %s, expected %d" % (router, r["n"], N_CTR), ["app.ctr"])
                elif what == "distinct":
                    r = c.cmd({"distinct": "ctr", "$db": DB, "key": "g"})
                    if r.get("ok") == 1 and sorted(r["values"]) != list(range(N_CTR)):
                        h.anomaly("distinct g of app.ctr via %s: %d values, expected %d" % (
                            router, len(r["values"]), N_CTR), ["app.ctr"])
                else:
                    r = c.cmd({"aggregate": "ctr", "$db": DB, "cursor": {},
                               "pipeline": [{"$group": {"_id": None, "n": {"$sum": 1}}}]})
                    if r.get("ok") == 1:
                        got = r["cursor"]["firstBatch"]
                        if len(got) != 1 or lib.num(got[0]["n"]) != N_CTR:
                            h.anomaly("aggregate $group count of app.ctr via %s: %s, expected %d" % (
                                router, got, N_CTR), ["app.ctr"])
            except AssertionError:       # an error reply mid-scan or a broken pipe: no result to check
                pass
            time.sleep(0.05)
        for c in cs.values():
            c.close()

    # ---- administration and DDL (r0 only) ----

    def admin(self):
        rng = random.Random("%s/admin" % self.seed)
        c = self.wclient("r0")
        scratch_n = 0
        ops = ["moveChunk", "moveChunk", "moveRange", "split", "split", "merge", "spare",
               "movePrimary", "zone", "defrag", "createIndexes", "dropIndexes", "scratch",
               "rename", "shardCollection"]
        while not self.stop_ev.is_set():
            op = rng.choice(ops)
            k1, k2 = rng.randrange(K_SPACE), rng.randrange(K_SPACE)
            to = rng.choice(self.shards)
            pick = rng.random()
            r = self._admin_op(c, op, k1, k2, to, pick, scratch_n)
            if op == "shardCollection":
                scratch_n += 1
            st = self.admin_counts.setdefault(op, [0, 0, {}])
            st[0 if r.get("ok") == 1 else 1] += 1
            if r.get("ok") != 1:
                why = r.get("codeName") or str(r.get("errmsg"))[:60]
                st[2][why] = st[2].get(why, 0) + 1
            time.sleep(rng.uniform(0.1, 0.6))
        c.close()

    def _admin_op(self, c, op, k1, k2, to, pick, scratch_n):
        ns = DB + ".docs"
        adm = lambda d: dict(d, **{"$db": "admin"})   # noqa: E731
        if op == "moveChunk":
            return c.cmd(adm({"moveChunk": ns, "find": {"k": k1}, "to": to}))
        if op == "moveRange":
            return c.cmd(adm({"moveRange": ns, "min": {"k": k1}, "toShard": to}))
        if op == "split":
            return c.cmd(adm({"split": ns, "middle": {"k": k1}}))
        if op == "merge":
            r = c.cmd({"find": "collections", "$db": "config", "filter": {"_id": ns}})
            if r.get("ok") != 1 or not r["cursor"]["firstBatch"]:
                return r
            # config.chunks carry the collection's uuid, not its name (MongoDB 5.0+)
            r = c.cmd({"find": "chunks", "$db": "config", "filter": {"uuid": r["cursor"]["firstBatch"][0]["uuid"]},
                       "batchSize": 100000})
            if r.get("ok") != 1:
                return r
            ch = r["cursor"]["firstBatch"]
            by_min = {json.dumps(x["min"], sort_keys=True): x for x in ch}
            pairs = [(x, by_min[json.dumps(x["max"], sort_keys=True)]) for x in ch
                     if json.dumps(x["max"], sort_keys=True) in by_min
                     and by_min[json.dumps(x["max"], sort_keys=True)]["shard"] == x["shard"]]
            if not pairs:
                return {"ok": 0, "codeName": "no two adjacent chunks on one shard"}
            a, b = pairs[int(pick * len(pairs))]
            return c.cmd(adm({"mergeChunks": ns, "bounds": [a["min"], b["max"]]}))
        if op == "spare":
            if self.spare_state in ("out", "removed"):
                r = c.cmd(adm({"addShard": self.procs[self.spare].url, "name": self.spare}))
                if r.get("ok") == 1:
                    self.spare_state = "in"
                    self.event("admin addShard %s" % self.spare)
                return r
            r = c.cmd(adm({"removeShard": self.spare}))
            if r.get("ok") == 1:
                if r.get("state") == "completed":
                    self.spare_state = "removed"     # added again by a later "spare" step
                    self.event("admin removeShard %s completed" % self.spare)
                else:
                    self.spare_state = "draining"
            return r
        if op == "movePrimary":
            return c.cmd(adm({"movePrimary": "mp", "to": to}))
        if op == "zone":
            if pick < 0.5:
                c.cmd(adm({"addShardToZone": to, "zone": "z"}))
                lo = min(k1, k2)
                return c.cmd(adm({"updateZoneKeyRange": ns, "min": {"k": lo}, "max": {"k": lo + 500},
                                  "zone": "z"}))
            r = c.cmd({"find": "tags", "$db": "config", "filter": {"ns": ns}})
            for z in (r.get("cursor") or {}).get("firstBatch", []):
                c.cmd(adm({"updateZoneKeyRange": ns, "min": z["min"], "max": z["max"], "zone": None}))
            return r
        if op == "defrag":
            return c.cmd(adm({"configureCollectionBalancing": ns, "defragmentCollection": pick < 0.7}))
        if op in ("createIndexes", "dropIndexes"):
            spec = rng_index(pick)
            cmd = ({"createIndexes": "docs", "$db": DB, "indexes": [spec]} if op == "createIndexes"
                   else {"dropIndexes": "docs", "$db": DB, "index": spec["name"]})
            r = c.cmd(cmd)
            # an index command that failed promises nothing about the shards it reached
            # (MongoDB: inconsistent indexes; run it again) — final_checks reruns it
            done = r.get("ok") == 1 or (op == "dropIndexes" and r.get("code") == 27)
            self.index_last[spec["name"]] = (cmd, done)
            return r
        if op == "scratch":    # drop and re-create a sharded collection with documents
            r = c.cmd({"drop": "scratch", "$db": DB})
            # a drop that failed part-way (a shard out of reach) leaves the collection in the
            # catalog, dropped on some shards; minishard finishes it on a retry (docs/
            # testing-with-faults.md) — final_checks retries it if no later drop succeeded
            self.drop_pending = not (r.get("ok") == 1 or r.get("code") == 26)
            r = c.cmd(adm({"shardCollection": DB + ".scratch", "key": {"k": 1}}))
            if r.get("ok") != 1:     # part-way: shards may hold it, the catalog not (drop cleans both)
                self.drop_pending = True
            return c.cmd({"insert": "scratch", "$db": DB, "documents": [{"_id": j, "k": j * 100} for j in range(20)]})
        if op == "rename":
            frm = self.mp_acked
            dst = "v" if frm == "u" else "u"
            r = c.cmd(adm({"renameCollection": "mp." + frm, "to": "mp." + dst}))
            if r.get("ok") == 1:
                self.mp_acked = dst
                self.mp_names = {dst}
            elif r.get("code") not in (26,):   # NamespaceNotFound is definite; other errors are not
                self.mp_names = self.mp_names | {dst}
            return r
        # shardCollection of a new collection; one that failed part-way (the shards got it,
        # the catalog commit did not happen) is run again before the final check, as its
        # retry finishes it (docs/protocol.md, shardCollectionBeforeCatalogCommit)
        cmd = adm({"shardCollection": "%s.new%d" % (DB, scratch_n), "key": {"k": "hashed" if pick < 0.5 else 1}})
        r = c.cmd(cmd)
        if r.get("ok") != 1:
            self.shardcoll_failed.append(cmd)
        return r

    # ---- faults ----

    def fault_thread(self, schedule):
        """Injects the schedule: each fault at its time in a thread of its own, so a long hang
        does not hold back the faults after it; faults on one process run one after another
        (each takes its processes' locks, in name order). This thread alone restarts processes
        that died on their own (watch)."""
        running = []
        for n, (t, kind, a) in enumerate(schedule, 1):
            while self.t() < t and not self.stop_ev.is_set():
                self.watch()
                time.sleep(0.1)
            if self.stop_ev.is_set():
                break
            th = threading.Thread(target=self._fault, args=(n, kind, a), name="fault%d" % n, daemon=True)
            th.start()
            running.append(th)
        while not self.stop_ev.is_set():
            self.watch()
            time.sleep(0.1)
        for th in running:
            th.join(60)

    def _fault(self, n, kind, a):
        try:
            self.event("fault#%d %s" % (n, describe(kind, a)))
            with self.plock:
                self.faults_injected += 1
            self.inject(kind, a)
        except Exception as e:   # noqa: BLE001 — a fault that could not be applied is logged, not fatal
            self.event("fault#%d could not be applied: %s" % (n, e))

    def _hold(self, lk):
        """Takes lk, waiting as long as it takes unless the run ends first (then False)."""
        while not lk.acquire(timeout=0.2):
            if self.stop_ev.is_set():
                return False
        return True

    def inject(self, kind, a):
        """Applies one fault. Who may start or signal a process: whoever holds its
        proc_locks entry — a kill or a pause for its whole length (so faults of those kinds
        on one process run one after another), a failpoint only while it sets it and turns
        it off, watch() while it restarts one that died. Cuts of one pair wait for each other
        (pair_locks)."""
        if kind in ("kill", "stop"):
            p = self.procs[a["proc"]]
            lk = self.proc_locks[p.name]
            if not self._hold(lk):
                return
            try:
                if kind == "kill":
                    p.kill()
                    self._sleep(a["down_s"])
                    self._restart(p)
                    return
                if p.alive():
                    os.kill(p.pid, signal.SIGSTOP)
                try:
                    self._sleep(a["pause_s"])
                finally:
                    if p.alive():
                        os.kill(p.pid, signal.SIGCONT)
            finally:
                lk.release()
        elif kind == "failpoint":
            p = self.procs[a["proc"]]
            lk = self.proc_locks[p.name]
            if not self._hold(lk):
                return
            try:
                c = Client(p.url, 5000)
                r = c.cmd({"configureFailPoint": a["point"], "$db": "admin", "mode": {"times": 1},
                           "data": {"action": "hang" if a["action"] == "hangkill" else a["action"]}})
                c.close()
            finally:
                lk.release()
            if r.get("ok") != 1:
                self.event("  failpoint not set: %s" % json.dumps(r)[:200])
                return
            if a["action"] == "hangkill":
                # configureFailPoint answers the point's timesEntered so far (it never
                # resets): a thread hangs there now once it has grown past that count
                self._kill_when_entered(p, lk, a, lib.num(r.get("count", 0)))
                return
            self._sleep(a["hold_s"])
            self._fp_off(p, lk, a["point"])
        else:
            lk = self.pair_locks.setdefault(tuple(sorted((a["a"], a["b"]))), threading.Lock())
            if not self._hold(lk):
                return
            try:
                self.net.cut(a["a"], a["b"], both=a["both"])
                try:
                    self._sleep(a["heal_s"])
                finally:
                    self.net.heal(a["a"], a["b"])
                    self.event("  healed %s %s" % (a["a"], a["b"]))
            finally:
                lk.release()

    def _kill_when_entered(self, p, lk, a, before):
        """hangkill: once a thread hangs at the failpoint (timesEntered past `before`, its
        count when it was set; polled up to hold_s),
        kill -9 the process there — for hangAfterWriteCommit, a write committed whose reply
        is never sent — and restart it; not entered by then: turned off."""
        entered = False
        end = time.monotonic() + a["hold_s"]
        while not entered and time.monotonic() < end and not self.stop_ev.is_set():
            try:
                c = Client(p.url, 3000)
                st = c.cmd({"serverStatus": 1})
                c.close()
                entered = lib.num(((st.get("failpoints") or {}).get(a["point"]) or {}).get("timesEntered", 0)) > before
            except (AssertionError, ValueError, OSError):
                pass
            self._sleep(0.2)
        self._fp_off(p, lk, a["point"], kill=entered)

    def _fp_off(self, p, lk, point, kill=False):
        """The failpoint off (a process restarted meanwhile has it off already; at the end of
        the run every process is restarted anyway) — or, kill: the process kill -9'd where
        it hangs, and restarted."""
        if not self._hold(lk):
            return
        try:
            if kill and p.alive():
                self.event("  %s hangs at %s: kill -9" % (p.name, point))
                p.kill()
                self._sleep(0.5)
                self._restart(p)
            elif p.alive():
                c = Client(p.url, 5000)
                c.cmd({"configureFailPoint": point, "$db": "admin", "mode": "off"})
                c.close()
        finally:
            lk.release()

    def _sleep(self, s):
        """Sleeps s seconds, cut short at the end of the run."""
        self.stop_ev.wait(s)

    def _restart(self, p):
        for attempt in range(2):
            try:
                p.start()
                self.restarts += 1
                self.event("  restarted %s" % p.name)
                break
            except AssertionError as e:
                self.event("  restart of %s failed: %s" % (p.name, str(e)[:300]))
                time.sleep(1)
        else:
            self.hist.anomaly("%s does not restart" % p.name, [p.name])

    def watch(self):
        """Restarts any process that died while no fault held it: a crash failpoint (its log
        says `failpoint crash`) is expected; any other death (an assertion, a segfault) is an
        anomaly. A process a kill or a pause holds is skipped (proc_locks)."""
        for p in list(self.procs.values()):
            lk = self.proc_locks[p.name]
            if not lk.acquire(blocking=False):
                continue
            try:
                if p.alive() or p.proc is None:
                    continue
                rc = p.proc.returncode
                crash_fp = any("failpoint crash" in ln for ln in p.log_text().splitlines()[-5:])
                if not crash_fp:
                    self.hist.anomaly("%s died on its own (exit %s)" % (p.name, rc), [p.name])
                self.event("  %s died (exit %s%s), restarting" % (p.name, rc, ", failpoint crash" if crash_fp else ""))
                p.log.close()
                self._restart(p)
            finally:
                lk.release()

    # ---- the run ----

    def run(self):
        mode = "network namespaces" if self.net_on else "127.0.0.1 (no network faults%s)" % (
            "" if netns is not None else ": tests/chaos/netns.py absent")
        say("chaos soak: seed %d, %ds, %d shards + 1 spare, 2 routers (r1 stale on purpose), mode: %s"
            % (self.seed, self.seconds, self.n_shards, mode))
        say("  rerun: %s   (logs: %s)" % (self.rerun(), self.dir))
        self.start_cluster()
        self.proc_locks = {n: threading.Lock() for n in self.procs}   # see inject()
        self.pair_locks = {}
        names = {"config": ["config"], "shard": self.shards + [self.spare], "router": ["r0", "r1"]}
        schedule = draw_schedule(self.seed, self.seconds, names, self.net_on)
        say("  fault schedule: %d faults drawn from the seed" % len(schedule))
        self.setup()
        self.t0 = time.monotonic()
        self.hist = History(self.t0, N_CTR)
        threads = [threading.Thread(target=self.worker, args=(w, "r0" if w % 2 == 0 else "r1"), daemon=True)
                   for w in range(4)]
        threads += [threading.Thread(target=self.counter_worker, args=(r, r), daemon=True) for r in ("r0", "r1")]
        threads += [threading.Thread(target=self.batch_worker, args=("r1",), daemon=True),
                    threading.Thread(target=self.scanner, daemon=True),
                    threading.Thread(target=self.admin, daemon=True)]
        ft = threading.Thread(target=self.fault_thread, args=(schedule,), daemon=True)
        for th in threads + [ft]:
            th.start()
        deadline = self.t0 + self.seconds
        while time.monotonic() < deadline:
            time.sleep(0.2)
        self.stop_ev.set()
        say("t=%.1f workload stopping" % self.t())
        for th in threads + [ft]:
            th.join(max(1.0, 90 - (time.monotonic() - deadline)))
            if th.is_alive():
                self.hist.anomaly("thread %s did not stop within 90 s of the end" % th.name)
        self.heal_all()
        self.final_checks()
        return self.hist

    def heal_all(self):
        """Every fault undone, then every process restarted (kill -9 and start: recovery runs)."""
        say("t=%.1f healing: SIGCONT, failpoints off, links healed, every process restarted" % self.t())
        if self.net:
            self.net.heal_all()
        for p in self.procs.values():
            if p.alive():
                os.kill(p.pid, signal.SIGCONT)
        for p in self.procs.values():
            p.kill()
            self._restart(p)

    # ---- the final state ----

    def final_checks(self):
        h = self.hist
        c = self.client("r0", 30000)
        r = c.cmd({"balancerStop": 1, "$db": "admin"})
        if r.get("ok") != 1:
            lib.wait_until(lambda: c.cmd({"balancerStop": 1, "$db": "admin"}).get("ok") == 1, 30, "balancerStop")
        shard_names = list(self.shards) + ([self.spare] if self.spare_state in ("in", "draining") else [])
        sc = {s: self.client(s, 15000) for s in self.shards + [self.spare]}
        quiet_since = time.monotonic()

        def quiet():
            bad = []
            for s, cl in sc.items():
                st = cl.cmd({"serverStatus": 1})
                if st.get("ok") != 1:
                    bad.append("%s serverStatus: %s" % (s, st.get("errmsg")))
                    continue
                mig = st.get("migrations", {})
                if mig.get("inprog"):
                    bad.append("%s migration in flight: %s" % (s, json.dumps(mig["inprog"])[:200]))
                if mig.get("recoveriesPending") or mig.get("recoveriesStuck"):
                    bad.append("%s recoveries pending %s stuck %s" % (s, mig.get("recoveriesPending"),
                                                                     mig.get("recoveriesStuck")))
                rd = st.get("rangeDeleter", {})
                if rd.get("tasks"):
                    bad.append("%s range-deletion tasks left: %s (refused %s)" % (s, rd.get("tasks"), rd.get("refused")))
                for coll in ("migrationCoordinators", "rangeDeletions"):
                    rr = cl.cmd({"find": coll, "$db": "config", "filter": {}})
                    if rr.get("ok") == 1 and rr["cursor"]["firstBatch"]:
                        bad.append("%s config.%s: %s" % (s, coll, json.dumps(rr["cursor"]["firstBatch"])[:200]))
                held = (st.get("sharding") or {}).get("criticalSections")
                if held is None:
                    bad.append("%s serverStatus has no sharding.criticalSections" % s)
                elif held:
                    bad.append("%s critical section held: %s" % (s, json.dumps(held)[:200]))
            rr = c.cmd({"find": "migrations", "$db": "config", "filter": {}})
            if rr.get("ok") != 1:
                bad.append("config.migrations unreadable: %s" % rr.get("errmsg"))
            elif rr["cursor"]["firstBatch"]:
                bad.append("config.migrations: %s" % json.dumps(rr["cursor"]["firstBatch"])[:200])
            quiet.last = bad
            return not bad
        quiet.last = []
        st = sc[self.shards[0]].cmd({"serverStatus": 1})
        say("  quiet means, on every shard: migrations.inprog %s, recoveriesPending %s, rangeDeleter.tasks %s, "
            "sharding.criticalSections %s, config.migrationCoordinators and config.rangeDeletions empty; "
            "config.migrations empty" % (
                (st.get("migrations") or {}).get("inprog"), (st.get("migrations") or {}).get("recoveriesPending"),
                (st.get("rangeDeleter") or {}).get("tasks"), (st.get("sharding") or {}).get("criticalSections")))
        try:
            lib.wait_until(quiet, QUIET_WAIT_S, "the cluster to go quiet", interval=0.5)
            say("t=%.1f quiet after %.1fs" % (self.t(), time.monotonic() - quiet_since))
        except AssertionError:
            h.anomaly("not quiet %ds after the balancer stopped: %s" % (QUIET_WAIT_S, "; ".join(quiet.last)[:1500]),
                      [x.split()[0] for x in quiet.last])
        self.resolve_pending()

        # orphans: what the shards hold beyond what the routers return
        def orphans():
            out = {}
            for coll in ("docs", "del", "ctr"):
                n_router = c.ok({"count": coll, "$db": DB, "query": {}})["n"]
                n_raw = sum(lib.num(sc[s].ok({"count": coll, "$db": DB, "query": {}})["n"]) for s in sc)
                if n_raw != lib.num(n_router):
                    out[coll] = n_raw - lib.num(n_router)
            orphans.last = out
            return not out
        orphans.last = {}
        try:
            lib.wait_until(orphans, ORPHAN_WAIT_S, "orphans to reach zero", interval=1.0)
        except AssertionError as e:
            h.anomaly("orphans not zero within %ds: %s (%s)" % (ORPHAN_WAIT_S, orphans.last, e), ["rangeDeleter"])

        # contents, through every router: the model, and the routers agreeing
        results = {}
        for rname in ("r0", "r1"):
            rc = self.client(rname, 30000)
            try:
                docs = rc.find_all("docs", DB, {}, batchSize=1000)
                ctr = rc.find_all("ctr", DB, {}, batchSize=1000)
                dl = rc.find_all("del", DB, {}, batchSize=1000)
            except AssertionError as e:
                h.anomaly("final read via %s failed: %s" % (rname, str(e)[:400]), [rname])
                continue
            finally:
                rc.close()
            self.checked = h.check_final_docs(docs, "via " + rname)
            h.check_final_ctr(ctr, "via " + rname)
            h.check_final_batches(dl, "via " + rname)
            results[rname] = sorted(json.dumps(x, sort_keys=True) for x in docs + ctr + dl)
        if len(results) == 2 and results["r0"] != results["r1"]:
            h.anomaly("routers disagree: r0 returns %d documents, r1 %d" % (len(results["r0"]), len(results["r1"])))

        # the unsharded collection moved by movePrimary and renamed
        got = {}
        for name in ("u", "v"):
            got[name] = c.find_all(name, "mp", {}, batchSize=1000)
        full = [n for n in ("u", "v") if sorted(x["_id"] for x in got[n]) == list(range(N_MP))]
        if len(full) != 1 or full[0] not in self.mp_names or any(got[n] for n in ("u", "v") if n != full[0]):
            h.anomaly("mp.u/mp.v after movePrimary and renames: u has %d, v has %d documents; "
                      "expected all %d in %s" % (len(got["u"]), len(got["v"]), N_MP, " or ".join(sorted(self.mp_names))),
                      ["cleanup failed", "movePrimary", "mp."])

        # Index commands whose last attempt failed are run again until they succeed, as
        # MongoDB tells a user to do with the inconsistent indexes a failed createIndexes /
        # dropIndexes can leave; an index whose last command was acknowledged is not touched.
        for name, (cmd, done) in sorted(self.index_last.items()):
            if done:
                continue
            self.index_reruns += 1
            for _ in range(5):
                r = c.cmd(cmd)
                if r.get("ok") == 1 or (r.get("code") == 27 and "dropIndexes" in cmd):
                    break
                time.sleep(1)
            else:
                h.anomaly("%s of %s failed 5 times once quiet: %s" % (next(iter(cmd)), name, json.dumps(r)[:300]),
                          [name])
        if self.drop_pending:
            for _ in range(5):
                r = c.cmd({"drop": "scratch", "$db": DB})
                if r.get("ok") == 1 or r.get("code") == 26:
                    break
                time.sleep(1)
            else:
                h.anomaly("drop of app.scratch failed 5 times once quiet: %s" % json.dumps(r)[:300], ["app.scratch"])
        for cmd in self.shardcoll_failed:
            for _ in range(5):
                r = c.cmd(cmd)
                if r.get("ok") == 1:
                    break
                time.sleep(1)
            else:
                h.anomaly("%s failed 5 times once quiet: %s" % (json.dumps(cmd), json.dumps(r)[:300]),
                          [cmd["shardCollection"]])
        say("t=%.1f failed DDL run again: %d index commands, %d shardCollection, %s (acknowledged ones left alone)"
            % (self.t(), self.index_reruns, len(self.shardcoll_failed),
               "a drop" if self.drop_pending else "no drop"))

        # metadata: consistency with indexes, chunks tiling the key space
        r = c.cmd({"checkMetadataConsistency": 1, "$db": "admin", "checkIndexes": True})
        if r.get("ok") != 1:
            h.anomaly("checkMetadataConsistency failed: %s" % json.dumps(r)[:400])
        elif r["cursor"]["firstBatch"]:
            h.anomaly("checkMetadataConsistency: %s" % json.dumps(r["cursor"]["firstBatch"])[:1500],
                      [x.get("type", "") for x in r["cursor"]["firstBatch"]])
        colls = c.find_all("collections", "config", {}, batchSize=1000)
        for coll in colls:
            ns = coll["_id"]
            if coll.get("dropped"):
                continue
            ch = c.find_all("chunks", "config", {"uuid": coll["uuid"]}, batchSize=100000)
            bad = history.tiles(ch)
            if bad:
                h.anomaly("config.chunks of %s do not tile [MinKey, MaxKey): %s" % (ns, bad), [ns])
        for cl in sc.values():
            cl.close()
        c.close()
        self.shard_names_final = shard_names

    # ---- the report ----

    def report(self):
        h = self.hist
        s = h.stats
        say("soak report: seed %d, %d faults injected, %d restarts, %d single-document writes acknowledged "
            "+ %d ambiguous, %d documents checked at the end, %d updateManys acknowledged + %d ambiguous, "
            "%d batches deleted, %d scans" % (
                self.seed, self.faults_injected, self.restarts, s["acked"], s["maybe"],
                getattr(self, "checked", 0), s["ctr_acked"], s["ctr_maybe"], s["batches_deleted"], s["scans"]))
        say("  retryable writes: %d checked exactly once (%d needed resends, %d resends in all), "
            "%d answered IncompleteTransactionHistory (217), %d TransactionTooOld (225), %d without a "
            "definite answer, %d wrong answers; resent after: %s" % (
                s["rw_once"], s["rw_retried"], s["rw_resends"], s["rw_217"], s["rw_225"],
                s["rw_unresolved"], s["rw_wrong"],
                ", ".join("%s x%d" % (k, v) for k, v in sorted(h.rw_codes.items(), key=lambda x: -x[1])[:12])))
        for line in h.rw_legit[:30]:
            say("    " + line)
        say("  admin: " + ", ".join("%s %d ok/%d err" % (k, v[0], v[1]) for k, v in sorted(self.admin_counts.items())))
        say("  admin errors: " + "; ".join("%s: %s" % (k, ", ".join("%s x%d" % e for e in sorted(v[2].items())))
                                           for k, v in sorted(self.admin_counts.items()) if v[2]))
        if not h.anomalies:
            say("soak passed: no anomaly (seed %d)" % self.seed)
            return True
        say("SOAK FAILED: seed %d, %d anomalies (rerun: %s)" % (self.seed, len(h.anomalies), self.rerun()))
        for a in h.anomalies[:20]:
            say("ANOMALY %s" % a)
            self.log_context(a)
        say("fault trail:\n  " + "\n  ".join(self.events[-40:]))
        return False

    def log_context(self, a, around=20, max_procs=3):
        """±around lines of the process logs around the last line naming each of the
        anomaly's keys (a process named by a key: its last lines), at most max_procs logs."""
        shown = 0
        for p in self.procs.values():
            try:
                lines = p.log_text().splitlines()
            except OSError:
                continue
            hits = set()
            for key in a.keys:
                if key == p.name:
                    hits.add(len(lines) - 1)
                elif key:
                    for i in range(len(lines) - 1, -1, -1):
                        if key in lines[i]:
                            hits.add(i)
                            break
            if not hits:
                continue
            last = -1
            for hit in sorted(hits):
                lo, hi = max(0, hit - around, last + 1), min(len(lines), hit + around + 1)
                if lo >= hi:
                    continue
                say("  --- %s.log lines %d-%d ---" % (p.name, lo + 1, hi))
                for ln in lines[lo:hi]:
                    say("  " + ln[:300])
                last = hi - 1
            shown += 1
            if shown >= max_procs:
                break
        if not shown:
            say("  (no log line names %s; logs in %s)" % (a.keys, self.dir))

    def close(self, keep):
        for p in self.procs.values():
            try:
                if p.alive():
                    os.kill(p.pid, signal.SIGCONT)
                p.kill()
            except Exception:   # noqa: BLE001
                pass
        for cl in list(Client.open_clients):
            cl.close()
        if self.net:
            self.net.close()
        if not keep:
            os.system("rm -rf '%s'" % self.dir)


class RetryableWrite:
    """One retryable write of the workload: the command (with lsid and txnNumber, and stmtIds
    for some batches) sent on every try unchanged, the (document, value one execution leaves)
    pairs, and what one execution answers (rw_outcome's want)."""

    def __init__(self, kind, cmd, writes, want):
        self.kind, self.cmd, self.writes, self.want = kind, cmd, writes, want
        self.tries = 0


def lsid_of(u):
    return {"id": {"$binary": {"base64": base64.b64encode(u.bytes).decode(), "subType": "04"}}}


def rng_index(pick):
    specs = [{"key": {"v": 1}, "name": "v_1"},
             {"key": {"k": 1, "_id": 1}, "name": "k_id_unique", "unique": True},
             {"key": {"k": 1, "v": -1}, "name": "k_v"}]
    return specs[int(pick * len(specs))]


def run(seed, seconds, shards=3, net_mode="auto", keep=False):
    """Runs one soak; returns True when no anomaly was found."""
    s = Soak(seed, seconds, shards, net_mode)
    ok = False

    def hard_stop():
        # the whole soak is bounded: workload, healing and every final wait fit well inside
        say("SOAK FAILED: seed %d: hard deadline of %ds passed (hung?)" % (seed, seconds + HARD_EXTRA_S))
        say("fault trail:\n  " + "\n  ".join(s.events[-40:]))
        s.close(keep=True)
        say("  logs kept in %s" % s.dir)
        os._exit(3)
    timer = threading.Timer(seconds + HARD_EXTRA_S, hard_stop)
    timer.daemon = True
    timer.start()
    try:
        s.run()
        ok = s.report()
    except Exception as e:   # noqa: BLE001 — the harness itself failed: say so with the seed
        import traceback
        traceback.print_exc(file=sys.stdout)
        say("SOAK FAILED: seed %d: the soak itself failed: %s" % (seed, e))
        ok = False
    finally:
        timer.cancel()
        s.close(keep=keep or (not ok))
        if not ok:
            say("  logs kept in %s" % s.dir)
    return ok


def main():
    ap = argparse.ArgumentParser(description="minishard's seeded chaos soak")
    ap.add_argument("--seconds", type=int, default=int(os.environ.get("SECONDS_", "60")))
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--net", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--keep", action="store_true", help="keep the data and logs directory")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1, 2**31)
    ok = run(seed, a.seconds, a.shards, a.net, a.keep)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
