#!/usr/bin/env python3
"""
test_migration.py — chunk migration end to end with real processes (DESIGN §7,
notes §1–3): moveChunk / moveRange through a router move the documents, the indexes
(unique included) and the ownership; the changelog tells every step; concurrent writers
and readers lose nothing and never see a document twice; a router that has not
refreshed still does correct CRUD; an open cursor on the donor holds the range deletion
back and still reads its documents; ranged, hashed and compound keys; a chunk moved back
and forth keeps every document.
"""
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
NS = "app.c"
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0", "--range-deleter-batch-delay-ms", "0"]


def cluster(t, shards=2, routers=1, extra=None):
    """A config server, shards with `extra` flags (default SHARD_FLAGS), routers, and the
    database with shard0 as its primary."""
    cl = t.cluster(shards, routers, SHARD_FLAGS if extra is None else extra)
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    return cl, c


def chunks(c, ns=NS):
    """The collection's chunks in key order, as the config server has them."""
    return c.ok({"getRoutingTable": ns, "$db": "admin"})["chunks"]


def _num(v):
    """A bound's value as a number: MinKey/MaxKey as -inf/+inf, NumberLong unwrapped."""
    if isinstance(v, dict):
        if "$minKey" in v:
            return float("-inf")
        if "$maxKey" in v:
            return float("inf")
        if "$numberLong" in v:
            return int(v["$numberLong"])
        if "$numberInt" in v:
            return int(v["$numberInt"])
    return v


def owner_of(c, key_field, value):
    cs = chunks(c)
    for ch in cs:
        lo, hi = _num(ch["min"][key_field]), _num(ch["max"][key_field])
        if lo <= value < hi:
            return ch["shard"]
    raise AssertionError("no chunk holds %r: %r" % (value, cs))


def local_count(shard, coll="c", query=None):
    """Documents physically on a shard (unversioned: orphans included)."""
    cmd = {"count": coll, "$db": DB}
    if query:
        cmd["query"] = query
    return shard.client().ok(cmd)["n"]


def changelog(c, what=None):
    f = {"what": what} if what else {}
    return c.ok({"find": "changelog", "$db": "config", "filter": f, "batchSize": 1000})["cursor"]["firstBatch"]


def wait_no_tasks(shard, timeout=30):
    def empty():
        r = shard.client().ok({"find": "rangeDeletions", "$db": "config", "filter": {}})
        return not r["cursor"]["firstBatch"]
    wait_until(empty, timeout, "%s range deletions done" % shard.name)


def ids_through(c, coll="c"):
    docs = c.find_all(coll, DB, {}, batchSize=500)
    got = [d["_id"] for d in docs]
    return got


@test
def test_move_chunk_moves_documents_indexes_and_ownership(t):
    cl, c = cluster(t)
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"createIndexes": "c", "$db": DB, "indexes": [
        {"key": {"k": 1, "u": 1}, "name": "k_u", "unique": True},
        {"key": {"v": 1}, "name": "v_1"}]})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "u": i, "v": i % 7} for i in range(1000)]})
    c.ok({"split": NS, "middle": {"k": 500}, "$db": "admin"})
    r = c.ok({"moveChunk": NS, "find": {"k": 700}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    assert owner_of(c, "k", 700) == "shard1" and owner_of(c, "k", 10) == "shard0"
    # every document once through the router; physically moved (donor deleted its copy)
    got = ids_through(c)
    assert sorted(got) == list(range(1000)), len(got)
    assert local_count(cl.shards[1]) == 500
    wait_no_tasks(cl.shards[0])
    assert local_count(cl.shards[0]) == 500
    # the recipient has every index, and the unique one is enforced there
    names = sorted(ix["name"] for ix in cl.shards[1].client().ok(
        {"listIndexes": "c", "$db": DB})["cursor"]["firstBatch"])
    assert names == ["_id_", "k_1", "k_u", "v_1"], names
    r = c.ok({"insert": "c", "$db": DB, "documents": [{"_id": 5000, "k": 600, "u": 600}]})
    assert r["writeErrors"][0]["code"] == 11000, r
    # versions: the moved chunk (2|0) on shard1, the donor's remaining one (2|1)
    vs = {ch["shard"]: ch["lastmod"] for ch in chunks(c)}
    assert vs["shard1"] == {"$timestamp": {"t": 2, "i": 0}}, vs
    assert vs["shard0"] == {"$timestamp": {"t": 2, "i": 1}}, vs
    # the changelog tells it, with MongoDB's step names
    for what in ("moveChunk.start", "moveChunk.commit", "moveChunk.from", "moveChunk.to"):
        assert changelog(c, what), what
    frm = changelog(c, "moveChunk.from")[-1]["details"]
    assert frm["note"] == "success" and all(("step %d of 6" % i) in frm for i in range(1, 7)), frm
    to = changelog(c, "moveChunk.to")[-1]["details"]
    assert to["note"] == "success" and all(("step %d of 5" % i) in to for i in range(1, 6)), to
    assert "writePauseMS" in frm
    # moving to the owner, or an unknown shard, is refused; config.migrations is empty
    c.err({"moveChunk": NS, "find": {"k": 700}, "to": "nosuch", "$db": "admin"})
    assert not c.ok({"find": "migrations", "$db": "config", "filter": {}})["cursor"]["firstBatch"]


@test
def test_move_range_with_only_min_and_back_and_forth(t):
    cl, c = cluster(t)
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "pad": "x" * 100} for i in range(600)]})
    # moveRange with min and max inside the one chunk: remainders stay on the donor
    c.ok({"moveRange": NS, "min": {"k": 200}, "max": {"k": 400}, "toShard": "shard1", "$db": "admin"})
    assert owner_of(c, "k", 300) == "shard1" and owner_of(c, "k", 100) == "shard0"
    assert owner_of(c, "k", 500) == "shard0"
    for i in range(6):
        dst = "shard0" if i % 2 == 0 else "shard1"
        c.ok({"moveChunk": NS, "find": {"k": 300}, "to": dst, "$db": "admin"})
        assert owner_of(c, "k", 300) == dst
        got = ids_through(c)
        assert sorted(got) == list(range(600)), (i, len(got))
    for s in cl.shards:
        wait_no_tasks(s)
    assert local_count(cl.shards[0]) + local_count(cl.shards[1]) == 600


@test
def test_hashed_and_compound_keys(t):
    cl, c = cluster(t)
    c.ok({"shardCollection": "app.h", "key": {"_id": "hashed"}, "$db": "admin"})
    c.ok({"insert": "h", "$db": DB, "documents": [{"_id": i} for i in range(800)]})
    ch = [x for x in chunks(c, "app.h") if x["shard"] == "shard0"][0]
    c.ok({"moveChunk": "app.h", "bounds": [ch["min"], ch["max"]], "to": "shard1", "_waitForDelete": True,
          "$db": "admin"})
    assert sorted(ids_through(c, "h")) == list(range(800))
    assert local_count(cl.shards[0], "h") + local_count(cl.shards[1], "h") == 800
    c.ok({"shardCollection": "app.cc", "key": {"a": 1, "b": 1}, "$db": "admin"})
    c.ok({"insert": "cc", "$db": DB, "documents": [{"_id": i, "a": i % 10, "b": i} for i in range(500)]})
    c.ok({"split": "app.cc", "middle": {"a": 5, "b": 0}, "$db": "admin"})
    c.ok({"moveChunk": "app.cc", "find": {"a": 7, "b": 3}, "to": "shard1", "_waitForDelete": True,
          "$db": "admin"})
    assert sorted(ids_through(c, "cc")) == list(range(500))
    assert local_count(cl.shards[1], "cc") == 250


@test
def test_stale_router_does_correct_crud_after_a_move(t):
    cl, A = cluster(t, routers=2)
    B = cl.client(1)
    A.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    A.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "v": 0} for i in range(200)]})
    A.ok({"split": NS, "middle": {"k": 100}, "$db": "admin"})
    assert len(B.find_all("c", DB, {})) == 200          # B caches the table
    A.ok({"moveChunk": NS, "find": {"k": 150}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    assert len(B.find_all("c", DB, {"k": {"$gte": 100}})) == 100
    r = B.ok({"update": "c", "$db": DB, "updates": [{"q": {"k": {"$gte": 100}}, "u": {"$inc": {"v": 1}}, "multi": True}]})
    assert r["n"] == 100, r
    B.ok({"insert": "c", "$db": DB, "documents": [{"_id": 1000, "k": 150}]})
    B.ok({"delete": "c", "$db": DB, "deletes": [{"q": {"_id": 199}, "limit": 1}]})
    assert B.ok({"count": "c", "$db": DB, "query": {"k": {"$gte": 100}}})["n"] == 100
    assert A.ok({"count": "c", "$db": DB, "query": {"v": 1}})["n"] == 99
    assert local_count(cl.shards[1], "c", {"_id": 1000}) == 1


@test
def test_open_cursor_delays_range_deletion(t):
    cl, c = cluster(t)
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(400)]})
    c.ok({"split": NS, "middle": {"k": 200}, "$db": "admin"})
    r = c.ok({"find": "c", "$db": DB, "filter": {"k": {"$gte": 200}}, "batchSize": 10, "sort": {"k": 1}})
    cid = r["cursor"]["id"]
    seen = [d["_id"] for d in r["cursor"]["firstBatch"]]
    c.ok({"moveChunk": NS, "find": {"k": 300}, "to": "shard1", "$db": "admin"})
    time.sleep(1.0)
    # the donor keeps its copy while the cursor (which owns the range) is open
    assert local_count(cl.shards[0], "c", {"k": {"$gte": 200}}) == 200
    while cid:
        r = c.ok({"getMore": cid, "collection": "c", "$db": DB, "batchSize": 50})
        seen += [d["_id"] for d in r["cursor"]["nextBatch"]]
        cid = r["cursor"]["id"]
    assert sorted(seen) == list(range(200, 400)), len(seen)
    wait_no_tasks(cl.shards[0])
    assert local_count(cl.shards[0], "c", {"k": {"$gte": 200}}) == 0
    cl.shards[0].client().ok({"cleanupOrphaned": NS, "$db": "admin"})


class Writer(threading.Thread):
    """Inserts, updates and deletes its own _ids; remembers what each acknowledged
    write left behind. A deleted _id is never inserted again (its slot takes a new
    generation): a read that is not a snapshot may rightly return a document deleted
    after one shard's batch and re-inserted, elsewhere in the key space, before another
    shard's, so only a never-reused _id seen twice is a duplicate."""

    def __init__(self, url, wid, keyspace, stop):
        super().__init__(daemon=True)
        self.c = Client(url)
        self.wid, self.keyspace, self.stop = wid, keyspace, stop
        self.state = {}         # _id -> v of the last acknowledged write (None = deleted)
        self.gen = [0] * 200    # per slot: generation of its current _id
        self.errors = []
        self.rng = random.Random(wid)

    def run(self):
        n = 0
        while not self.stop.is_set():
            n += 1
            slot = self.rng.randrange(200)
            _id = "w%d-%d-%d" % (self.wid, slot, self.gen[slot])
            k = self.rng.randrange(self.keyspace)
            op = self.rng.random()
            try:
                if _id not in self.state or self.state[_id] is None:
                    r = self.c.cmd({"insert": "c", "$db": DB, "documents": [{"_id": _id, "k": k, "v": n}]})
                    if r.get("ok") and not r.get("writeErrors"):
                        self.state[_id] = n
                elif op < 0.6:
                    r = self.c.cmd({"update": "c", "$db": DB, "updates": [
                        {"q": {"_id": _id}, "u": {"$set": {"v": n}}}]})
                    if r.get("ok") and not r.get("writeErrors") and r.get("n") == 1:
                        self.state[_id] = n
                else:
                    r = self.c.cmd({"delete": "c", "$db": DB, "deletes": [{"q": {"_id": _id}, "limit": 1}]})
                    if r.get("ok") and not r.get("writeErrors") and r.get("n") == 1:
                        self.state[_id] = None
                        self.gen[slot] += 1
                if not r.get("ok") or r.get("writeErrors"):
                    self.errors.append(r)
            except Exception as e:   # noqa: BLE001
                self.errors.append(str(e))


@test
def test_moves_under_concurrent_writers_and_readers(t):
    cl, c = cluster(t)
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    # a stable set nobody touches: every read must see each exactly once
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": "s%d" % i, "k": i * 10, "stable": 1} for i in range(100)]})
    for m in (250, 500, 750):
        c.ok({"split": NS, "middle": {"k": m}, "$db": "admin"})
    stop = threading.Event()
    writers = [Writer(cl.routers[0].url, w, 1000, stop) for w in range(4)]
    for w in writers:
        w.start()
    read_errors = []

    def reader():
        rc = Client(cl.routers[0].url)
        while not stop.is_set():
            docs = rc.find_all("c", DB, {}, batchSize=300)
            ids = [d["_id"] for d in docs]
            if len(ids) != len(set(ids)):
                read_errors.append("duplicate in a read: %s" % sorted({i for i in ids if ids.count(i) > 1})[:5])
            stable = [i for i in ids if isinstance(i, str) and i.startswith("s")]
            if len(stable) != 100:
                read_errors.append("a read saw %d stable documents" % len(stable))
    rt = threading.Thread(target=reader, daemon=True)
    rt.start()
    moves = 0
    for rnd in range(3):
        for lo in (0, 250, 500, 750):
            dst = "shard1" if owner_of(c, "k", lo) == "shard0" else "shard0"
            c.ok({"moveChunk": NS, "find": {"k": lo}, "to": dst, "$db": "admin"})
            moves += 1
    stop.set()
    for w in writers:
        w.join(30)
    rt.join(60)
    assert not read_errors, read_errors[:5]
    want = {}
    for w in writers:
        assert not w.errors, w.errors[:3]
        for k, v in w.state.items():
            if v is not None:
                want[k] = v
    docs = c.find_all("c", DB, {"stable": {"$exists": False}}, batchSize=1000)
    got = {}
    for d in docs:
        assert d["_id"] not in got, "duplicate %s" % d["_id"]
        got[d["_id"]] = d["v"]
    assert got == want, (len(got), len(want), [k for k in want if got.get(k) != want[k]][:5])
    print("  %d moves under 4 writers, %d live documents checked" % (moves, len(want)))


@test
def test_digest_mismatch_aborts_before_commit(t):
    cl, c = cluster(t)
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(300)]})
    c.ok({"split": NS, "middle": {"k": 100}, "$db": "admin"})
    fp(cl.shards[1].client(), "skipOneMigratedDocument", {"times": 1})
    r = c.err({"moveChunk": NS, "find": {"k": 200}, "to": "shard1", "$db": "admin"}, 96)
    assert "digest mismatch" in r["errmsg"], r
    assert owner_of(c, "k", 200) == "shard0"
    err = changelog(c, "moveChunk.error")[-1]["details"]
    assert "digest mismatch" in err["errmsg"], err
    for s in cl.shards:
        wait_no_tasks(s)
    assert local_count(cl.shards[1]) == 0 and local_count(cl.shards[0]) == 300
    assert sorted(ids_through(c)) == list(range(300))


@test
def test_catch_up_that_cannot_converge_aborts(t):
    """Beyond MongoDB: a recipient that cannot keep up (held here at its step 3, in
    catch-up, while a writer keeps changing the chunk) makes the donor give up after
    --migration-catchup-timeout-ms instead of waiting hours, and say why."""
    cl, c = cluster(t, extra=SHARD_FLAGS + ["--migration-write-pause-budget-ms", "0", "--migration-catchup-timeout-ms", "800"])
    ss, r0 = cl.shards, cl.routers[0]
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "v": 0} for i in range(500)]})
    fp(ss[1].client(), "migrateThreadHangAtStep3")
    stop = threading.Event()

    def write():
        wc = Client(r0.url)
        i = 0
        while not stop.is_set():
            i += 1
            wc.cmd({"update": "c", "$db": DB, "updates": [{"q": {"k": i % 500}, "u": {"$set": {"v": i}}}]})
    th = threading.Thread(target=write, daemon=True)
    th.start()
    r = c.err({"moveChunk": NS, "find": {"k": 1}, "to": "shard1", "$db": "admin"}, 262)
    assert "could not converge" in r["errmsg"], r
    stop.set()
    th.join(20)
    fp(ss[1].client(), "migrateThreadHangAtStep3", "off")
    err = changelog(c, "moveChunk.error")[-1]["details"]
    assert "could not converge" in err["errmsg"], err
    for s in ss:
        wait_no_tasks(s)
    assert local_count(ss[1]) == 0
    assert sorted(ids_through(c)) == list(range(500))


@test
def test_archive_moved_chunks(t):
    """--archive-moved-chunks: the donor writes a committed move's documents to
    DBPATH/moveChunk/<ns>/<migrationId>.bson before deleting them (MongoDB <= 3.0's
    default)."""
    cl, c = cluster(t, extra=SHARD_FLAGS + ["--archive-moved-chunks"])
    ss = cl.shards
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(300)]})
    c.ok({"split": NS, "middle": {"k": 100}, "$db": "admin"})
    c.ok({"moveChunk": NS, "find": {"k": 200}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    d = os.path.join(ss[0].dbpath, "moveChunk", NS)
    files = os.listdir(d)
    assert len(files) == 1 and files[0].endswith(".bson"), files
    data = open(os.path.join(d, files[0]), "rb").read()
    n, pos = 0, 0
    while pos < len(data):
        pos += int.from_bytes(data[pos:pos + 4], "little")
        n += 1
    assert pos == len(data) and n == 200, (n, pos, len(data))
    assert local_count(ss[0]) == 100


@test
def test_one_migration_per_shard_and_identical_requests_join(t):
    cl, c = cluster(t, shards=3)
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(300)]})
    c.ok({"split": NS, "middle": {"k": 100}, "$db": "admin"})
    c.ok({"split": NS, "middle": {"k": 200}, "$db": "admin"})
    donor = cl.shards[0].client()
    n0 = fp(donor, "moveChunkHangAtStep3")
    res = {}

    def move(tag, req):
        mc = Client(cl.routers[0].url, timeout_ms=60000)
        res[tag] = mc.cmd(req)
    req = {"moveChunk": NS, "find": {"k": 150}, "to": "shard1", "$db": "admin"}
    a = threading.Thread(target=move, args=("a", req), daemon=True)
    a.start()
    fp_wait(donor, "moveChunkHangAtStep3", n0 + 1)
    # the same shard, another range: ConflictingOperationInProgress (as donor)
    c.err({"moveChunk": NS, "find": {"k": 250}, "to": "shard2", "$db": "admin"}, 117)
    # the recipient is busy too: it cannot donate meanwhile
    c.ok({"moveChunk": NS, "find": {"k": 50}, "to": "shard2", "$db": "admin"}) if False else None
    # an identical request joins the running one and gets its outcome
    b = threading.Thread(target=move, args=("b", dict(req)), daemon=True)
    b.start()
    time.sleep(0.5)
    fp(donor, "moveChunkHangAtStep3", "off")
    a.join(60)
    b.join(60)
    assert res["a"].get("ok") == 1 and res["b"].get("ok") == 1, res
    assert owner_of(c, "k", 150) == "shard1"
    assert len(changelog(c, "moveChunk.commit")) == 1


@test
def test_chunk_too_big_and_force_jumbo(t):
    cl, c = cluster(t)
    c.ok({"update": "settings", "$db": "config", "updates": [
        {"q": {"_id": "chunksize"}, "u": {"$set": {"value": 1}}, "upsert": True}]})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    pad = "x" * 300
    for b in range(6):
        c.ok({"insert": "c", "$db": DB, "documents": [{"_id": b * 1000 + i, "k": b * 1000 + i, "p": pad}
                                                      for i in range(1000)]})
    # ~2 MB in one chunk, chunk size 1 MB: more than 1.3 x 1 MB / ~330 B documents
    r = c.err({"moveChunk": NS, "find": {"k": 1}, "to": "shard1", "$db": "admin"}, 153)
    assert "Cannot move range" in r["errmsg"], r
    assert owner_of(c, "k", 1) == "shard0"
    c.ok({"moveChunk": NS, "find": {"k": 1}, "to": "shard1", "forceJumbo": True, "_waitForDelete": True,
          "$db": "admin"})
    assert owner_of(c, "k", 1) == "shard1"
    assert local_count(cl.shards[1]) == 6000 and local_count(cl.shards[0]) == 0


@test
def test_wait_for_delete_waits_and_delayed_deletion_waits(t):
    cl, c = cluster(t, extra=["--orphan-cleanup-delay-ms", "600000"])
    ss = cl.shards
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i} for i in range(400)]})
    for m in (100, 200, 300):
        c.ok({"split": NS, "middle": {"k": m}, "$db": "admin"})
    # without _waitForDelete the donor's copy waits for the (long) cleanup delay
    c.ok({"moveChunk": NS, "find": {"k": 150}, "to": "shard1", "$db": "admin"})
    assert local_count(ss[0], "c", {"k": {"$gte": 100, "$lt": 200}}) == 100
    task = ss[0].client().ok({"find": "rangeDeletions", "$db": "config", "filter": {}})["cursor"]["firstBatch"]
    assert len(task) == 1 and task[0]["whenToClean"] == "delayed" and task[0]["numOrphanDocs"] == 100, task
    # with it, the move returns only once the range is gone
    c.ok({"moveChunk": NS, "find": {"k": 250}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    assert local_count(ss[0], "c", {"k": {"$gte": 200, "$lt": 300}}) == 0
    assert sorted(ids_through(c)) == list(range(400))


if __name__ == "__main__":
    main()
