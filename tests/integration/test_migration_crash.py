#!/usr/bin/env python3
"""
test_migration_crash.py — the kill -9 matrix of chunk migration (notes
§1.7–1.8): for every migration failpoint, the process it lives in (donor, recipient or
config server) dies there with SIGKILL (failpoint action "crash"), and — with the
migration held at a point — another process (donor, recipient or config server) is
killed, while a writer keeps inserting and updating through the router; the process is
restarted; then, once the
recovery has settled (no coordinator document, no range-deletion task, no
config.migrations entry, nothing in flight):
  - the chunk table says where the range lives, and that shard holds exactly the range's
    documents while the other holds none of them (the partial copy, or the donor's copy,
    was deleted);
  - every acknowledged write is there exactly once, with its last acknowledged value;
  - no read through the router ever returned a document twice.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
NS = "app.c"
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0", "--range-deleter-batch-delay-ms", "0"]
N = 2000           # documents, keys 0..N-1; the moving chunk is [N/2, MaxKey)

# (process, failpoint, data): the point fires in that process with action crash
DONOR = [("donor", "moveChunkHangAtStep%d" % i) for i in range(1, 7)] + [
    ("donor", "hangBeforeLeavingCriticalSection"),
]
RECIPIENT = [("recipient", "migrateThreadHangAtStep%d" % i) for i in range(1, 8)]
CONFIG = [("config", "hangBeforeCommitMigration")]
# the commit's outcome unknown to the donor without any crash
ERRORS = [("donor", "failMigrationCommit"), ("donor", "migrationCommitNetworkError")]


def setup(t):
    cl = t.cluster(2, 1, SHARD_FLAGS)
    cfg, ss, r = cl.config, cl.shards, cl.routers[0]
    c = r.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"createIndexes": "c", "$db": DB, "indexes": [{"key": {"v": 1}, "name": "v_1"}]})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "v": 0} for i in range(N)]})
    c.ok({"split": NS, "middle": {"k": N // 2}, "$db": "admin"})
    return cfg, ss, r, c


def settled(cfg, shards, routers_client):
    def ok():
        for s in shards:
            if not s.alive():
                # A crash point late in the recipient (steps 6 and 7 run after the donor's
                # commit) can fire after moveChunk answered: bring that shard back too.
                s.start()
                return False
            sc = s.client(timeout_ms=5000)
            try:
                for coll in ("migrationCoordinators", "rangeDeletions"):
                    r = sc.cmd({"find": coll, "$db": "config", "filter": {}})
                    if not r.get("ok") or r["cursor"]["firstBatch"]:
                        return False
                st = sc.cmd({"serverStatus": 1, "$db": "admin"})
                if not st.get("ok") or st["migrations"]["inprog"] or st["migrations"]["recoveriesPending"]:
                    return False
            finally:
                sc.close()
        r = routers_client.cmd({"find": "migrations", "$db": "config", "filter": {}})
        return bool(r.get("ok")) and not r["cursor"]["firstBatch"]
    wait_until(ok, 60, "migration recovery settled")


class Writer(threading.Thread):
    """Inserts new documents into both chunks and bumps existing ones in the moving
    chunk; remembers what each acknowledged write left (a failed write is 'unknown')."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.c = Client(url, timeout_ms=15000)
        self.stop = threading.Event()
        self.acked = {}       # _id -> v
        self.unknown = set()
        self.n = 0
        self.errs = []

    def run(self):
        i = 0
        while not self.stop.is_set():
            i += 1
            if i % 2:
                _id = "w%d" % i
                k = (i * 7919) % N
                try:
                    r = self.c.cmd({"insert": "c", "$db": DB, "documents": [{"_id": _id, "k": k, "v": i}]})
                    ok = r.get("ok") and not r.get("writeErrors") and r.get("n") == 1
                except Exception:   # noqa: BLE001
                    ok = False
                if ok:
                    self.acked[_id] = i
                else:
                    self.unknown.add(_id)
                    if len(self.errs) < 3:
                        self.errs.append(r if 'r' in dir() else None)
            else:
                _id = N // 2 + (i * 31) % (N // 2)
                try:
                    r = self.c.cmd({"update": "c", "$db": DB, "updates": [{"q": {"_id": _id}, "u": {"$set": {"v": i}}}]})
                    ok = r.get("ok") and not r.get("writeErrors") and r.get("n") == 1
                except Exception:   # noqa: BLE001
                    ok = False
                if ok:
                    self.acked[_id] = i
                else:
                    self.unknown.add(_id)
            self.n += 1
            time.sleep(0.002)


def run_case(t, proc_kind, point, action="crash", kill=None):
    """The point fires in proc_kind. action crash / error: as named. action hang: the
    migration is held there and process `kill` (donor, recipient or config) is killed
    with SIGKILL; the point is released if its own process survived."""
    cfg, ss, router, c = setup(t)
    donor, recipient = ss[0], ss[1]
    procs = {"donor": donor, "recipient": recipient, "config": cfg}
    target = procs[proc_kind]
    tc = target.client()
    count = fp(tc, point, "alwaysOn", action=action)
    tc.close()
    w = Writer(router.url)
    w.start()
    time.sleep(0.2)
    res = {}

    def move():
        mc = Client(router.url, timeout_ms=120000)
        res["r"] = mc.cmd({"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})
        mc.close()
    mt = threading.Thread(target=move, daemon=True)
    mt.start()
    if action == "hang":
        tc = target.client()
        fp_wait(tc, point, count + 1)
        tc.close()
        victim = procs[kill]
        victim.kill()
        time.sleep(0.3)
        if victim is not target:
            tc = target.client()
            fp(tc, point, "off")
            tc.close()
        victim.start()
    mt.join(150)
    assert not mt.is_alive(), "moveChunk did not return"
    r = res["r"]
    if action == "crash" and proc_kind == "recipient":
        # The recipient's late points (after the decision) can fire after moveChunk
        # answered: give the crash a moment to happen before the restart below.
        deadline = time.monotonic() + 10
        while target.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
    # the process that crashed comes back (same dbpath, same port)
    for p in procs.values():
        if not p.alive():
            p.start()
    if action == "error":
        tc = target.client()
        fp(tc, point, "off")
        tc.close()
    time.sleep(0.5)
    w.stop.set()
    w.join(30)
    settled(cfg, ss, c)
    # where does the range live now?
    chunks = c.ok({"getRoutingTable": NS, "$db": "admin"})["chunks"]
    upper = [ch for ch in chunks if ch["min"] != {"k": {"$minKey": 1}}]
    assert len(upper) == 1, chunks
    owner = upper[0]["shard"]
    committed = owner == "shard1"
    # reads: every document once, acknowledged writes present with their values
    docs = c.find_all("c", DB, {}, batchSize=1000)
    seen = {}
    for d in docs:
        assert d["_id"] not in seen, "document %r returned twice" % d["_id"]
        seen[d["_id"]] = d
    for i in range(N):
        assert i in seen, "original document %d lost" % i
    for _id, v in w.acked.items():
        assert _id in seen, "acknowledged insert %r lost" % _id
        if _id not in w.unknown:
            assert seen[_id]["v"] == v, (_id, seen[_id], v)
    # physically: the owner holds the range, the other shard holds none of it
    hi = {"k": {"$gte": N // 2}}
    on = [s.client().ok({"count": "c", "$db": DB, "query": hi})["n"] for s in ss]
    in_range = sum(1 for d in docs if d["k"] >= N // 2)
    own_i = 1 if committed else 0
    assert on[own_i] == in_range and on[1 - own_i] == 0, (proc_kind, point, committed, on, in_range)
    print("  %-9s %-34s %-15s -> %-9s moveChunk %s; %d writes (%d acked)" % (
        proc_kind, point, action + (" kill " + kill if kill else ""),
        "committed" if committed else "aborted",
        "ok" if r.get("ok") else "failed (%s)" % r.get("codeName"), w.n, len(w.acked)), flush=True)
    return committed


def make_case(proc_kind, point, action="crash", kill=None):
    def case(t):
        run_case(t, proc_kind, point, action, kill)
    case.__name__ = "test_%s_%s_%s%s" % (action, proc_kind, point, "_kill_" + kill if kill else "")
    return case


# make test: every point crashes its own process; the two commit errors.
for _k, _p in DONOR + RECIPIENT + CONFIG:
    test(make_case(_k, _p))
for _k, _p in ERRORS:
    test(make_case(_k, _p, "error"))
# make test: held at the donor's steps, the other processes die (the recipient, the
# config server); make check-long (LONG=1): every point x every process.
if os.environ.get("LONG") == "1":
    for _k, _p in DONOR + RECIPIENT + CONFIG:
        for _v in ("donor", "recipient", "config"):
            test(make_case(_k, _p, "hang", _v))
else:
    for _k, _p in DONOR:
        for _v in ("recipient", "config"):
            test(make_case(_k, _p, "hang", _v))


if __name__ == "__main__":
    main()
