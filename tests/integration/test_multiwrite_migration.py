#!/usr/bin/env python3
"""
test_multiwrite_migration.py — multi-document writes (updateMany, deleteMany) are exactly
once across a migration commit (docs/versioning-and-routing.md
"Multi-document writes across a migration"). A shard applies a multi-write only to the
ranges it owns at the version the router sent; a shard that answers StaleConfig is retried
on exactly its old ranges at their new owners, each statement narrowed to those ranges by
$_shardKeyRanges (docs/protocol.md), and a shard that applied its part is never sent it
again. So every matching document is written once and n / nModified count each once.

The commit is held on the donor (moveChunkHangAtStep4: the critical section is entered)
or on the config server (hangBeforeCommitMigration: reads wait too) while an updateMany
$inc or a deleteMany runs through the router; the recipient applies its own ranges at the
old version at once, the donor's ranges wait, then go to their new owner. Ranged, hashed
and compound shard keys. The order that used to write twice: the donor applies at the old
version, the migration commits, and the recipient (held by failCommand's blockConnection
until it has refreshed) answers StaleConfig. A collection re-created between a partial
write and its retry: the rest fails (ConflictingOperationInProgress). A soak: 2 routers loop updateMany {$inc: {c: 1}} while the
balancer moves chunks continuously; every document's counter must equal the number of
acknowledged updateManys (T_SOAK_S seconds, default 30; T_SEED replays its seed;
T_SOAK_KEY=hashed soaks a hashed key instead of the ranged one).
The shard side of $_shardKeyRanges is checked directly: only with a shardVersion, bounds
sorted and disjoint, and refused by the router from a client.
"""
import base64
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0", "--range-deleter-batch-delay-ms", "0"]


def cluster(t, routers=1, config_extra=()):
    cl = t.cluster(2, routers, SHARD_FLAGS, config_extra=config_extra)
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    return cl, c


def chunks(c, ns):
    """The collection's chunks in key order, as the config server has them."""
    return c.ok({"getRoutingTable": ns, "$db": "admin"})["chunks"]


def local_docs(shard, coll):
    """What one shard holds, straight from it (unversioned: orphans included)."""
    return shard.client().find_all(coll, DB, {})


# ---- the collections: (key, docs, how the moving chunk gets to shard1, its move back) ----

def ranged(c):
    """{k: 1}: [MinKey, 5000) on shard0, [5000, MaxKey) on shard1, 100 documents each."""
    c.ok({"shardCollection": DB + ".r", "key": {"k": 1}, "$db": "admin"})
    docs = [{"_id": i, "k": i, "c": 0} for i in range(100)] + \
           [{"_id": 5000 + i, "k": 5000 + i, "c": 0} for i in range(100)]
    c.ok({"insert": "r", "$db": DB, "documents": docs})
    c.ok({"split": DB + ".r", "middle": {"k": 5000}, "$db": "admin"})
    c.ok({"moveChunk": DB + ".r", "find": {"k": 6000}, "to": "shard1", "_waitForDelete": True, "$db": "admin"})
    return "r", docs, {"moveChunk": DB + ".r", "find": {"k": 6000}, "to": "shard0", "$db": "admin"}


def hashed(c):
    """{k: "hashed"}: the pre-split chunks; one of shard1's (holding documents) moves."""
    c.ok({"shardCollection": DB + ".h", "key": {"k": "hashed"}, "$db": "admin"})
    docs = [{"_id": i, "k": i, "c": 0} for i in range(300)]
    c.ok({"insert": "h", "$db": DB, "documents": docs})
    mine = [ch for ch in chunks(c, DB + ".h") if ch["shard"] == "shard1"]
    assert mine, chunks(c, DB + ".h")
    ch = mine[0]
    return "h", docs, {"moveChunk": DB + ".h", "bounds": [ch["min"], ch["max"]], "to": "shard0", "$db": "admin"}


def compound(c):
    """{a: 1, k: 1}: [{a: 1, k: 0}, MaxKey) on shard1 (the a: 1 half), the rest on shard0."""
    c.ok({"shardCollection": DB + ".cc", "key": {"a": 1, "k": 1}, "$db": "admin"})
    docs = [{"_id": i, "a": i % 2, "k": i, "c": 0} for i in range(200)]
    c.ok({"insert": "cc", "$db": DB, "documents": docs})
    c.ok({"split": DB + ".cc", "middle": {"a": 1, "k": 0}, "$db": "admin"})
    c.ok({"moveChunk": DB + ".cc", "find": {"a": 1, "k": 1}, "to": "shard1", "_waitForDelete": True,
          "$db": "admin"})
    return "cc", docs, {"moveChunk": DB + ".cc", "find": {"a": 1, "k": 1}, "to": "shard0", "$db": "admin"}


def run_held(t, make, hold, write, expect):
    """Holds a migration of shard1's chunk to shard0 at `hold` ("donor": the critical
    section entered; "config": the config commit), sends `write` through the router
    meanwhile, releases the hold, and checks the write's reply and every document."""
    cl, c = cluster(t)
    coll, docs, move = make(c)
    assert len(c.find_all(coll, DB, {})) == len(docs)      # the router caches the table
    # both shards hold documents the write must reach, the moving chunk's among them
    held = [len(local_docs(s, coll)) for s in cl.shards]
    assert all(held) and sum(held) == len(docs), held
    if hold == "donor":
        holder, point = cl.shards[1].client(), "moveChunkHangAtStep4"
    else:
        holder, point = cl.config.client(), "hangBeforeCommitMigration"
    n0 = fp(holder, point)
    res = {}

    def run(tag, req):
        res[tag] = Client(cl.routers[0].url, timeout_ms=120000).cmd(req)
    mover = threading.Thread(target=run, args=("move", move), daemon=True)
    mover.start()
    fp_wait(holder, point, n0 + 1)
    req = dict(write, **{"$db": DB})
    req[next(iter(write))] = coll
    writer = threading.Thread(target=run, args=("write", req), daemon=True)
    writer.start()
    time.sleep(1.0)        # the recipient has answered; the donor's part waits
    assert "write" not in res, res
    fp(holder, point, "off")
    mover.join(60)
    writer.join(60)
    assert res.get("move", {}).get("ok") == 1, res
    r = res.get("write")
    assert r and r.get("ok") == 1 and "writeErrors" not in r, r
    assert r["n"] == len(docs), (r, len(docs))
    if "nModified" in r:
        assert r["nModified"] == len(docs), r
    got = c.find_all(coll, DB, {})
    expect(docs, got)
    # the write met the migration: the router retried the donor's part after the commit
    log = cl.routers[0].log_text()
    assert "stale config retry ns=%s.%s shard=shard1" % (DB, coll) in log, log[-2000:]


def inc_write():
    return {"update": None, "updates": [{"q": {}, "u": {"$inc": {"c": 1}}, "multi": True}]}


def delete_write():
    return {"delete": None, "deletes": [{"q": {}, "limit": 0}]}


def expect_inc(docs, got):
    assert len(got) == len(docs), (len(got), len(docs))
    bad = [d for d in got if d["c"] != 1]
    assert not bad, "%d documents not incremented exactly once, e.g. %s" % (len(bad), bad[:3])


def expect_deleted(docs, got):
    assert got == [], "%d documents left, e.g. %s" % (len(got), got[:3])


def _held_case(make, hold, kind):
    write, expect = (inc_write(), expect_inc) if kind == "update_many" else (delete_write(), expect_deleted)

    def case(t):
        run_held(t, make, hold, write, expect)
    case.__name__ = "test_%s_%s_held_%s" % (kind, hold, make.__name__)
    return case


# every write x every hold x every key kind: test_update_many_donor_held_ranged, ...
for _make in (ranged, hashed, compound):
    for _hold in ("donor", "config"):
        for _kind in ("update_many", "delete_many"):
            test(_held_case(_make, _hold, _kind))


@test
def test_batch_and_multi_upsert_donor_held(t):
    """An ordered batch of two updateManys, a multi upsert whose key lies in the moving
    chunk, and an updateOne by shard key, all across the held commit."""
    def write():
        return {"update": None, "ordered": True, "updates": [
            {"q": {}, "u": {"$inc": {"c": 1}}, "multi": True},
            {"q": {"k": {"$gte": 50}}, "u": {"$inc": {"d": 1}}, "multi": True},
            {"q": {"k": 6050}, "u": {"$inc": {"c": 1}}, "multi": True, "upsert": True},
            {"q": {"k": 5001}, "u": {"$inc": {"e": 1}}}]}
    cl, c = cluster(t)
    coll, docs, move = ranged(c)
    assert len(c.find_all(coll, DB, {})) == len(docs)
    holder = cl.shards[1].client()
    n0 = fp(holder, "moveChunkHangAtStep4")
    res = {}

    def run(tag, req):
        res[tag] = Client(cl.routers[0].url, timeout_ms=120000).cmd(req)
    mover = threading.Thread(target=run, args=("move", move), daemon=True)
    mover.start()
    fp_wait(holder, "moveChunkHangAtStep4", n0 + 1)
    req = dict(write(), update=coll, **{"$db": DB})
    writer = threading.Thread(target=run, args=("write", req), daemon=True)
    writer.start()
    time.sleep(1.0)
    assert "write" not in res, res
    fp(holder, "moveChunkHangAtStep4", "off")
    mover.join(60)
    writer.join(60)
    assert res.get("move", {}).get("ok") == 1, res
    r = res["write"]
    # 200 + 150 matched, one upserted (counted in n, not in nModified), one updateOne
    assert r.get("ok") == 1 and "writeErrors" not in r, r
    assert r["n"] == 200 + 150 + 1 + 1 and r["nModified"] == 200 + 150 + 1, r
    assert [u["index"] for u in r["upserted"]] == [2], r
    got = {d["k"]: d for d in c.find_all(coll, DB, {})}
    assert len(got) == 201, len(got)
    assert got[6050]["c"] == 1 and "d" not in got[6050], got[6050]
    for d in docs:
        g = got[d["k"]]
        assert g["c"] == 1 and g.get("d", 0) == (1 if d["k"] >= 50 else 0), g
        assert g.get("e", 0) == (1 if d["k"] == 5001 else 0), g


@test
def test_stale_router_after_commit(t):
    """Router B caches the table; A moves the chunk; B's updateMany and deleteMany reach
    the recipient at the old version (its old ranges) and the donor answers StaleConfig:
    the donor's old ranges go to the recipient, narrowed."""
    cl, A = cluster(t, routers=2)
    B = cl.client(1)
    coll, docs, move = ranged(A)
    assert len(B.find_all(coll, DB, {})) == len(docs)
    A.ok(dict(move, _waitForDelete=True))
    r = B.ok({"update": coll, "$db": DB, "updates": [{"q": {}, "u": {"$inc": {"c": 1}}, "multi": True}]})
    assert r["n"] == 200 and r["nModified"] == 200, r
    assert all(d["c"] == 1 for d in A.find_all(coll, DB, {}))
    A.ok(dict(move, to="shard1", _waitForDelete=True))
    r = B.ok({"delete": coll, "$db": DB, "deletes": [{"q": {"k": {"$gte": 50}}, "limit": 0}]})
    assert r["n"] == 150, r
    assert sorted(d["k"] for d in A.find_all(coll, DB, {})) == list(range(50))


def donor_applied_recipient_stale(t, more=None):
    """The order that wrote twice: the donor applies its part at the old version (before
    any critical section), the migration then commits, and the recipient — which has
    refreshed meanwhile — answers StaleConfig. Retried with the new table, the recipient
    must get only its own old ranges, not the moved chunk the donor already wrote. more(A),
    when given, changes the chunks further before the retry."""
    cl, A = cluster(t, routers=2)
    B = cl.client(1)
    coll, docs, move = ranged(A)                 # shard1 owns [5000, MaxKey)
    assert len(B.find_all(coll, DB, {})) == len(docs)
    recipient = cl.shards[0].client()
    # the recipient holds B's update at dispatch (before its version check) for 6 s
    n0 = fp(recipient, "failCommand", mode={"times": 1}, failCommands=["update"],
            blockConnection=True, blockTimeMS=6000, failInternalCommands=True)
    res = {}

    def run():
        res["write"] = Client(cl.routers[1].url, timeout_ms=120000).cmd(
            {"update": coll, "$db": DB, "updates": [{"q": {}, "u": {"$inc": {"c": 1}}, "multi": True}]})
    writer = threading.Thread(target=run, daemon=True)
    writer.start()
    fp_wait(recipient, "failCommand", n0 + 1)
    # the donor's part is written (its documents, straight from it)
    wait_until(lambda: all(d["c"] == 1 for d in local_docs(cl.shards[1], coll)), 10, "donor applied")
    A.ok(move)                                   # [5000, MaxKey) to shard0, committed
    if more:
        more(A, coll)
    assert len(A.find_all(coll, DB, {"k": {"$gte": 5000}})) == 100   # shard0 refreshes
    writer.join(60)
    r = res.get("write")
    assert r and r.get("ok") == 1 and "writeErrors" not in r, r
    got = A.find_all(coll, DB, {})
    bad = [d for d in got if d["c"] != 1]
    assert not bad and len(got) == 200, "%d documents not written exactly once, e.g. %s" % (len(bad), bad[:3])
    assert r["n"] == 200 and r["nModified"] == 200, r
    assert "stale config retry ns=%s.%s shard=shard0" % (DB, coll) in cl.routers[1].log_text()


@test
def test_donor_applied_recipient_stale_no_double_write(t):
    donor_applied_recipient_stale(t)


@test
def test_donor_applied_recipient_stale_ranges_cut_at_a_split(t):
    """As above, and before the retry the recipient's old chunk [MinKey, 5000) is split at
    50 and [50, 5000) moved to shard1: the recipient's old range is cut in two, each part
    to its owner, each narrowed (shard1 wrote [5000, MaxKey) already, which is elsewhere now)."""
    def more(A, coll):
        A.ok({"split": DB + "." + coll, "middle": {"k": 50}, "$db": "admin"})
        A.ok({"moveChunk": DB + "." + coll, "find": {"k": 60}, "to": "shard1", "$db": "admin"})
    donor_applied_recipient_stale(t, more)


@test
def test_collection_recreated_after_a_partial_write(t):
    """Part of an updateMany applied, then the collection is dropped and sharded again
    (a new generation) before the rest goes out: the rest cannot be placed in the new key
    space, so the op fails with ConflictingOperationInProgress rather than write the new
    collection's documents."""
    cl, A = cluster(t, routers=2)
    B = cl.client(1)
    coll, docs, move = ranged(A)                 # shard1 owns [5000, MaxKey)
    assert len(B.find_all(coll, DB, {})) == len(docs)
    s0 = cl.shards[0].client()
    # shard0 holds B's update at dispatch for 3 s, then answers StaleConfig
    n0 = fp(s0, "failCommand", mode={"times": 1}, failCommands=["update"], errorCode=13388,
            blockConnection=True, blockTimeMS=3000, failInternalCommands=True)
    res = {}

    def run():
        res["write"] = Client(cl.routers[1].url, timeout_ms=120000).cmd(
            {"update": coll, "$db": DB, "updates": [{"q": {}, "u": {"$inc": {"c": 1}}, "multi": True}]})
    writer = threading.Thread(target=run, daemon=True)
    writer.start()
    fp_wait(s0, "failCommand", n0 + 1)
    wait_until(lambda: all(d["c"] == 1 for d in local_docs(cl.shards[1], coll)), 10, "shard1 applied")
    A.ok({"drop": coll, "$db": DB})
    A.ok({"shardCollection": DB + "." + coll, "key": {"k": 1}, "$db": "admin"})
    A.ok({"insert": coll, "$db": DB, "documents": [{"_id": i, "k": i, "c": 0} for i in range(10)]})
    writer.join(60)
    r = res.get("write")
    assert r and r.get("ok") == 1 and r["n"] == 100, r
    assert [e["code"] for e in r.get("writeErrors", [])] == [117], r
    assert all(d["c"] == 0 for d in A.find_all(coll, DB, {})), A.find_all(coll, DB, {})


# ---- $_shardKeyRanges on the shard, and refused from a client ------------------------------

def enc_str(v):
    """A one-field shard key's encoding of the string v (docs/key-encoding.md): type byte
    0x20, the bytes (a 00 byte escaped as 00 ff), then 00 00."""
    return b"\x20" + v.encode().replace(b"\x00", b"\x00\xff") + b"\x00\x00"


def bindata(b):
    return {"$binary": {"base64": base64.b64encode(b).decode(), "subType": "00"}}


@test
def test_shard_key_ranges_on_the_shard(t):
    cl, c = cluster(t)
    c.ok({"shardCollection": DB + ".s", "key": {"s": 1}, "$db": "admin"})
    letters = [chr(ord("a") + i) for i in range(26)]
    c.ok({"insert": "s", "$db": DB, "documents": [{"_id": x, "s": x, "c": 0} for x in letters]})
    s0 = cl.shards[0].client()
    sv = s0.ok({"serverStatus": 1})["sharding"][DB + ".s"]["shardVersion"]
    fk = [{"min": bindata(enc_str("f")), "max": bindata(enc_str("k"))}, {"min": bindata(enc_str("x"))}]
    r = s0.ok({"update": "s", "$db": DB, "shardVersion": sv, "updates": [
        {"q": {}, "u": {"$inc": {"c": 1}}, "multi": True, "$_shardKeyRanges": fk}]})
    assert r["n"] == 8 and r["nModified"] == 8, r
    bumped = sorted(d["_id"] for d in c.find_all("s", DB, {"c": 1}))
    assert bumped == list("fghijxyz"), bumped
    # a range unbounded below; the filter still applies inside the ranges
    r = s0.ok({"delete": "s", "$db": DB, "shardVersion": sv, "deletes": [
        {"q": {"s": {"$ne": "b"}}, "limit": 0, "$_shardKeyRanges": [{"max": bindata(enc_str("d"))}]}]})
    assert r["n"] == 2, r
    assert sorted(d["_id"] for d in c.find_all("s", DB, {"s": {"$lt": "e"}})) == ["b", "d"]
    # an upsert's new document must lie in the ranges
    r = s0.cmd({"update": "s", "$db": DB, "shardVersion": sv, "updates": [
        {"q": {"s": "zz"}, "u": {"$inc": {"c": 1}}, "multi": True, "upsert": True,
         "$_shardKeyRanges": [{"max": bindata(enc_str("m"))}]}]})
    assert r.get("ok") == 1 and r["writeErrors"][0]["code"] == 2, r
    # without a shardVersion the narrowing cannot be honoured: BadValue, nothing written
    r = s0.cmd({"update": "s", "$db": DB, "updates": [
        {"q": {}, "u": {"$inc": {"c": 1}}, "multi": True, "$_shardKeyRanges": fk}]})
    assert r.get("ok") == 1 and r["n"] == 0 and r["writeErrors"][0]["code"] == 2, r
    assert "shardVersion" in r["writeErrors"][0]["errmsg"], r
    # unsorted ranges
    r = s0.cmd({"delete": "s", "$db": DB, "shardVersion": sv, "deletes": [
        {"q": {}, "limit": 0, "$_shardKeyRanges": list(reversed(fk))}]})
    assert r.get("ok") == 1 and r["n"] == 0 and r["writeErrors"][0]["code"] == 2, r
    assert c.ok({"count": "s", "$db": DB})["n"] == 24
    # a client cannot send it through the router (an internal field): unknown field
    r = c.cmd({"update": "s", "$db": DB, "updates": [
        {"q": {}, "u": {"$inc": {"c": 1}}, "multi": True, "$_shardKeyRanges": fk}]})
    assert r.get("ok") == 0 and r.get("code") == 40415, r
    r = c.cmd({"delete": "s", "$db": DB, "deletes": [{"q": {}, "limit": 0, "$_shardKeyRanges": fk}]})
    assert r.get("ok") == 0 and r.get("code") == 40415, r
    assert c.ok({"count": "s", "$db": DB})["n"] == 24


# ---- the soak: 2 routers loop updateMany while chunks move continuously --------------------

SOAK_DOCS = 1500
SOAK_CHUNK = 100     # the collection starts as SOAK_DOCS / SOAK_CHUNK chunks


class Updater(threading.Thread):
    """Loops updateMany {$inc: {c: 1}} through one router, over every document or over a
    random range of k; remembers each acknowledged one's range (an error is 'unknown')."""

    def __init__(self, url, rng, stop):
        super().__init__(daemon=True)
        self.c = Client(url, timeout_ms=120000)
        self.rng, self.stop = rng, stop
        self.acked = []          # (lo, hi) of k, hi exclusive
        self.unknown = []        # replies that were not a clean acknowledgement
        self.short = []          # acknowledged with n or nModified off the match count

    def run(self):
        while not self.stop.is_set():
            if self.rng.random() < 0.5:
                lo, hi, q = 0, SOAK_DOCS, {}
            else:
                lo = self.rng.randrange(SOAK_DOCS)
                hi = self.rng.randrange(lo + 1, SOAK_DOCS + 1)
                q = {"k": {"$gte": lo, "$lt": hi}}
            try:
                r = self.c.cmd({"update": "s", "$db": DB, "updates": [
                    {"q": q, "u": {"$inc": {"c": 1}}, "multi": True}]})
            except Exception as e:   # noqa: BLE001
                r = {"exception": str(e)}
            if r.get("ok") == 1 and "writeErrors" not in r:
                self.acked.append((lo, hi))
                if r.get("n") != hi - lo or r.get("nModified") != hi - lo:
                    self.short.append((lo, hi, r))
            else:
                self.unknown.append(r)


class Mover(threading.Thread):
    """Moves chunks again and again, mostly to shard0 (beside the balancer, which has rounds
    every 200 ms and moves back what the mover piles up there)."""

    def __init__(self, url, rng, stop, nshards):
        super().__init__(daemon=True)
        self.c = Client(url, timeout_ms=120000)
        self.rng, self.stop, self.nshards = rng, stop, nshards
        self.moves = 0
        self.refused = 0

    def run(self):
        while not self.stop.is_set():
            cs = chunks(self.c, DB + ".s")
            # mostly towards shard0: the balancer keeps moving chunks away from it again
            if self.rng.random() < 0.6 and any(x["shard"] != "shard0" for x in cs):
                ch = self.rng.choice([x for x in cs if x["shard"] != "shard0"])
                to = "shard0"
            else:
                ch = self.rng.choice(cs)
                to = self.rng.choice(["shard%d" % i for i in range(self.nshards) if "shard%d" % i != ch["shard"]])
            r = self.c.cmd({"moveChunk": DB + ".s", "bounds": [ch["min"], ch["max"]], "to": to, "$db": "admin"})
            if r.get("ok") == 1:
                self.moves += 1
                time.sleep(self.rng.uniform(0, 0.3))   # room for the balancer's rounds
            else:   # the balancer moves from or to the same shard, or the chunk changed
                self.refused += 1
                time.sleep(0.05)


@test
def test_soak_update_many_under_balancing(t):
    secs = float(os.environ.get("T_SOAK_S") or 30)
    rng = random.Random(seed())
    cl = t.cluster(3, 2, SHARD_FLAGS, config_extra=["--balancer-idle-ms", "200", "--balancer-throttle-ms", "50"])
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    key = os.environ.get("T_SOAK_KEY") or "ranged"
    print("  soak key: %s (T_SOAK_KEY=ranged|hashed)" % key, flush=True)
    if key == "hashed":
        c.ok({"shardCollection": DB + ".s", "key": {"k": "hashed"}, "$db": "admin",
              "numInitialChunks": SOAK_DOCS // SOAK_CHUNK})
    else:
        c.ok({"shardCollection": DB + ".s", "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "s", "$db": DB, "documents": [{"_id": i, "k": i, "c": 0} for i in range(SOAK_DOCS)]})
    for m in range(SOAK_CHUNK, SOAK_DOCS, SOAK_CHUNK) if key != "hashed" else ():
        c.ok({"split": DB + ".s", "middle": {"k": m}, "$db": "admin"})
    c.ok({"balancerStart": 1, "$db": "admin"})
    stop = threading.Event()
    ups = [Updater(cl.routers[i].url, random.Random(rng.random()), stop) for i in range(2)]
    mover = Mover(cl.routers[0].url, random.Random(rng.random()), stop, 3)
    for th in ups + [mover]:
        th.start()
    time.sleep(secs)
    stop.set()
    for th in ups + [mover]:
        th.join(180)
        assert not th.is_alive(), "a soak thread did not stop"
    c.ok({"balancerStop": 1, "$db": "admin"})
    commits = len(c.ok({"find": "changelog", "$db": "config", "filter": {"what": "moveChunk.commit"},
                        "batchSize": 100000})["cursor"]["firstBatch"])
    acked = [a for u in ups for a in u.acked]
    unknown = [x for u in ups for x in u.unknown]
    short = [x for u in ups for x in u.short]
    stale = sum(r.client().ok({"serverStatus": 1, "$db": "admin"})["router"]["staleConfigRetries"]
                for r in cl.routers)
    print("  soak %.0f s: %d acknowledged updateManys (%d over every document), %d migrations "
          "committed (%d by the mover, %d refused; the rest by the balancer), %d stale retries, "
          "%d unknown" % (
              secs, len(acked), sum(1 for a in acked if a == (0, SOAK_DOCS)), commits, mover.moves,
              mover.refused, stale, len(unknown)), flush=True)
    want = [0] * SOAK_DOCS
    for lo, hi in acked:
        for k in range(lo, hi):
            want[k] += 1
    got = c.find_all("s", DB, {})
    bad = [(d["k"], d["c"], want[d["k"]]) for d in got if d["c"] != want[d["k"]]]
    print("  %d acknowledged with n off the match count; %d documents' counters off "
          "(%d below, %d above)" % (len(short), len(bad), sum(1 for b in bad if b[1] < b[2]),
                                    sum(1 for b in bad if b[1] > b[2])), flush=True)
    assert not unknown, "updateManys without a clean acknowledgement: %s" % unknown[:3]
    assert commits >= 5, "too few migrations met the writes: %d" % commits
    assert len(got) == SOAK_DOCS, len(got)
    assert not short, "acknowledged with n off the match count: %s" % short[:3]
    assert not bad, "%d documents' counters differ from the acknowledged updateManys (k, got, want): %s" % (
        len(bad), bad[:10])


if __name__ == "__main__":
    main()
