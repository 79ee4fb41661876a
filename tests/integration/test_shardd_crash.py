#!/usr/bin/env python3
"""
test_shardd_crash.py — the shard daemon's crash-safety proof, with real processes: for
each persistence step, a failpoint set to `crash` kills bin/shardd with SIGKILL exactly
there (what kill -9 leaves behind); the daemon restarts on the same dbpath and the
step's invariant is checked:

- write batches (insert, update, delete, findAndModify) are all-or-nothing, and every
  acknowledged batch is there: a seeded mix of acknowledged writes runs first, each
  reply checked against a model of what the client was told, and the model must equal
  the data after every restart (before COMMIT: the batch is absent; after: present);
- createIndexes: each index either fully exists (listIndexes, results through it) or not
  at all; dropIndexes likewise;
- _shardsvrShardCollection: either applied (pattern persisted, `sk` filled for every
  document) or not at all;
- drop and dropDatabase: either complete or not at all.

And with `hang`: a writer held before its COMMIT does not block readers (WAL), who do not
see its batch, and a getMore held at waitAfterPinningCursorBeforeGetMoreBatch keeps its
cursor pinned (CursorInUse to a second getMore, killCursors frees it when it ends).
Prints the seed (rerun with T_SEED=n).
"""
import json
import os
import random
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

DB = "app"


# ---- failpoints, crashes and restarts ----------------------------------------------------

def drop_client(client):
    """A client whose server died under its request: end the shardctl we started."""
    client.p.kill()
    client.p.wait(10)
    Client.open_clients.discard(client)


def crash_at(s, point, cmd, mode="alwaysOn"):
    """Sets `point` to crash, sends cmd, sees the daemon die by SIGKILL at that point,
    restarts it on the same dbpath and returns a fresh client."""
    c = s.client()
    fp(c, point, mode, action="crash")
    w = s.client()
    send(w, cmd)
    rc = s.proc.wait(30)
    assert rc == -9, "shardd exited with %s, not SIGKILL, at %s" % (rc, point)
    assert ("failpoint crash name=%s " % point) in s.log_text(), "no crash line for " + point
    drop_client(w)
    c.close()
    s.restart()
    return s.client()


def num(v):
    if isinstance(v, dict) and "$numberLong" in v:
        return int(v["$numberLong"])
    return v


def by_id(docs):
    return sorted(docs, key=lambda d: d["_id"])


def table_of(s, ns):
    """The SQLite table number of a collection (read-only; the daemon keeps running)."""
    db = sqlite3.connect("file:%s/shard.sqlite?mode=ro" % s.dbpath, uri=True, timeout=10)
    try:
        row = db.execute("SELECT id, key FROM collections WHERE ns = ?", (ns,)).fetchone()
        if row is None:
            return None, None, None
        total, nosk = db.execute("SELECT count(*), sum(sk IS NULL) FROM c%d" % row[0]).fetchone()
        return row[1], total, nosk or 0
    finally:
        db.close()


# ---- the model of what the client was told ---------------------------------------------

class Model:
    """The documents of app.m as acknowledged replies describe them."""

    def __init__(self, r):
        self.r = r
        self.docs = {}
        self.next_id = 0

    def new_doc(self):
        self.next_id += 1
        return {"_id": self.next_id, "g": self.r.randrange(5), "v": self.r.randrange(20)}

    def rand_insert(self):
        docs = []
        for _ in range(self.r.randrange(1, 8)):
            if self.docs and self.r.random() < 0.15:
                docs.append({"_id": self.r.choice(sorted(self.docs)), "g": 0, "v": 0})  # duplicate
            else:
                docs.append(self.new_doc())
        return {"insert": "m", "$db": DB, "ordered": self.r.random() < 0.5, "documents": docs}

    def rand_update(self):
        ups = []
        for _ in range(self.r.randrange(1, 6)):
            k = self.r.randrange(4)
            some = self.r.choice(sorted(self.docs)) if self.docs else 1
            if k == 0:
                ups.append({"q": {"_id": some}, "u": {"$set": {"v": self.r.randrange(20)}}})
            elif k == 1:
                ups.append({"q": {"g": self.r.randrange(5)}, "u": {"$inc": {"v": 1}}, "multi": True})
            elif k == 2:
                self.next_id += 1
                ups.append({"q": {"_id": self.next_id}, "u": {"$set": {"g": 4, "v": 7}}, "upsert": True})
            else:
                ups.append({"q": {"_id": some}, "u": {"$set": {"_id": -1}}})  # ImmutableField
        return {"update": "m", "$db": DB, "ordered": self.r.random() < 0.5, "updates": ups}

    def rand_delete(self):
        dels = []
        for _ in range(self.r.randrange(1, 4)):
            if self.docs and self.r.random() < 0.7:
                dels.append({"q": {"_id": self.r.choice(sorted(self.docs))}, "limit": 1})
            else:
                dels.append({"q": {"g": self.r.randrange(5)}, "limit": 0})
        return {"delete": "m", "$db": DB, "ordered": self.r.random() < 0.5, "deletes": dels}

    def rand_batch(self):
        return self.r.choice([self.rand_insert, self.rand_update, self.rand_delete])()

    def apply(self, cmd):
        """Applies cmd to a copy of the documents; returns (docs, expected reply parts)."""
        docs = {k: dict(v) for k, v in self.docs.items()}
        n = nmod = 0
        errs = []
        ordered = cmd.get("ordered", True)
        if "insert" in cmd:
            stmts = cmd["documents"]
        else:
            stmts = cmd.get("updates") or cmd.get("deletes")
        for i, st in enumerate(stmts):
            failed = False
            if "insert" in cmd:
                if st["_id"] in docs:
                    failed = True
                else:
                    docs[st["_id"]] = dict(st)
                    n += 1
            elif "update" in cmd:
                q = st["q"]
                match = [d for d in docs.values() if all(d.get(f) == x for f, x in q.items())]
                if not st.get("multi"):
                    match = match[:1]
                u = st["u"]
                if "$set" in u and "_id" in u["$set"]:
                    failed = bool(match)
                elif match:
                    for d in match:
                        before = dict(d)
                        for f, x in u.get("$set", {}).items():
                            d[f] = x
                        for f, x in u.get("$inc", {}).items():
                            d[f] = d.get(f, 0) + x
                        n += 1
                        nmod += d != before
                elif st.get("upsert"):
                    d = dict(q)
                    d.update(u["$set"])
                    docs[d["_id"]] = d
                    n += 1
            else:
                q = st["q"]
                match = [k for k, d in docs.items() if all(d.get(f) == x for f, x in q.items())]
                if st["limit"] == 1:
                    match = match[:1]
                for k in match:
                    del docs[k]
                    n += 1
            if failed:
                errs.append(i)
                if ordered:
                    break
        return docs, n, nmod, errs

    def acknowledged(self, c, cmd):
        """Runs cmd; its reply must say what the model predicts; then the model takes it."""
        docs, n, nmod, errs = self.apply(cmd)
        r = c.ok(cmd)
        got = [e["index"] for e in r.get("writeErrors", [])]
        assert num(r["n"]) == n and got == errs, "reply %s, model n=%d errors=%s" % (dumps(r)[:400], n, errs)
        if "update" in cmd:
            assert num(r["nModified"]) == nmod, (r, nmod)
        self.docs = docs

    def check(self, c, what):
        """The shard's documents equal the model, also when read through the v_1 index."""
        got = by_id(c.find_all("m", DB))
        want = by_id(self.docs.values())
        assert got == want, "%s: %d documents, model has %d; first difference near %s" % (
            what, len(got), len(want), next((g for g, w in zip(got, want) if g != w), None))
        for lo in (0, 7, 15):
            via = by_id(c.find_all("m", DB, filter={"v": {"$gte": lo}}, hint="v_1"))
            assert via == [d for d in want if d["v"] >= lo], "%s: index v_1 disagrees at v >= %d" % (what, lo)


# ---- tests -------------------------------------------------------------------------------

@test
def test_write_batches_all_or_nothing(t):
    """Acknowledged writes survive; a batch killed before COMMIT is absent, after COMMIT
    present, at each write-path point and for each write command."""
    r = random.Random(seed())
    s = t.shardd("s0")
    c = s.client()
    m = Model(r)
    c.ok({"createIndexes": "m", "$db": DB, "indexes": [{"key": {"v": 1}}, {"key": {"g": 1, "v": -1}}]})
    for _ in range(40):
        m.acknowledged(c, m.rand_batch())
    m.check(c, "before any crash")
    cases = []
    for point, committed in (("hangBeforeWriteObserver", False), ("hangBeforeWriteCommit", False),
                             ("hangAfterWriteCommit", True)):
        for kind in (m.rand_insert, m.rand_update, m.rand_delete):
            cases.append((point, committed, kind))
    # A batch killed half-way through its documents (three written, uncommitted).
    cases.append(("hangBeforeWriteObserver", False, None))
    for point, committed, kind in cases:
        if kind is None:
            cmd = {"insert": "m", "$db": DB, "documents": [m.new_doc() for _ in range(6)]}
            mode = {"skip": 3}
        else:
            cmd = kind()
            mode = "alwaysOn"
        docs, n, _, _ = m.apply(cmd)
        if n == 0:  # a batch that writes nothing reaches no per-document point
            cmd = {"insert": "m", "$db": DB, "documents": [m.new_doc()]}
            docs, n, _, _ = m.apply(cmd)
        c = crash_at(s, point, cmd, mode)
        if committed:
            m.docs = docs  # the batch committed: the client must find all of it
        m.check(c, "after a crash at %s during %s" % (point, list(cmd)[0]))
        for _ in range(5):  # the restarted daemon takes acknowledged writes again
            m.acknowledged(c, m.rand_batch())
        m.check(c, "after writes following the crash at %s" % point)


@test
def test_find_and_modify_crash(t):
    s = t.shardd("s0")
    c = s.client()
    c.ok({"insert": "f", "$db": DB, "documents": [{"_id": 1, "v": 1}]})
    fam = {"findAndModify": "f", "$db": DB, "query": {"_id": 1}, "update": {"$inc": {"v": 1}}}
    c = crash_at(s, "hangBeforeWriteCommit", fam)
    assert c.find_all("f", DB) == [{"_id": 1, "v": 1}]
    c = crash_at(s, "hangAfterWriteCommit", fam)
    assert c.find_all("f", DB) == [{"_id": 1, "v": 2}]
    up = {"findAndModify": "g", "$db": DB, "query": {"_id": 5}, "update": {"$set": {"w": 1}}, "upsert": True}
    c = crash_at(s, "hangBeforeWriteCommit", up)
    assert c.find_all("g", DB) == []
    c = crash_at(s, "hangAfterWriteCommit", up)
    assert c.find_all("g", DB) == [{"_id": 5, "w": 1}]


def index_names(c, coll):
    return [ix["name"] for ix in c.ok({"listIndexes": coll, "$db": DB})["cursor"]["firstBatch"]]


@test
def test_index_build_all_or_nothing(t):
    r = random.Random(seed())
    s = t.shardd("s0")
    c = s.client()
    docs = [{"_id": i, "k": r.randrange(50), "g": r.randrange(4), "h": [r.randrange(9), r.randrange(9)]}
            for i in range(600)]
    for i in range(0, len(docs), 200):
        c.ok({"insert": "x", "$db": DB, "documents": docs[i:i + 200]})
    build = {"createIndexes": "x", "$db": DB,
             "indexes": [{"key": {"k": 1}}, {"key": {"g": 1, "k": -1}}, {"key": {"h": 1}}]}
    c = crash_at(s, "hangBeforeIndexBuildCommit", build)
    assert index_names(c, "x") == ["_id_"], index_names(c, "x")
    c.err({"find": "x", "$db": DB, "filter": {"k": 3}, "hint": "k_1"}, code=2)
    c = crash_at(s, "hangAfterIndexBuildCommit", build)
    assert index_names(c, "x") == ["_id_", "k_1", "g_1_k_-1", "h_1"], index_names(c, "x")
    for k in (0, 17, 49):
        got = c.find_all("x", DB, filter={"k": {"$gte": k}}, hint="k_1", sort={"k": 1, "_id": 1})
        want = sorted((d for d in docs if d["k"] >= k), key=lambda d: (d["k"], d["_id"]))
        assert got == want, "k_1 after the crash: %d results, want %d" % (len(got), len(want))
    got = by_id(c.find_all("x", DB, filter={"g": 2}, hint="g_1_k_-1"))
    assert got == [d for d in docs if d["g"] == 2]
    got = by_id(c.find_all("x", DB, filter={"h": 4}, hint="h_1"))  # multikey, deduplicated
    assert got == [d for d in docs if 4 in d["h"]]
    # dropIndexes: all of it or none of it
    c = crash_at(s, "hangBeforeDropIndexesCommit", {"dropIndexes": "x", "$db": DB, "index": ["k_1", "h_1"]})
    assert index_names(c, "x") == ["_id_", "k_1", "g_1_k_-1", "h_1"]
    assert by_id(c.find_all("x", DB, filter={"h": 4}, hint="h_1")) == [d for d in docs if 4 in d["h"]]
    c.ok({"dropIndexes": "x", "$db": DB, "index": ["k_1", "h_1"]})
    assert index_names(c, "x") == ["_id_", "g_1_k_-1"]


@test
def test_shard_collection_all_or_nothing(t):
    s = t.shardd("s0")
    c = s.client()
    c.ok({"insert": "sc", "$db": DB, "documents": [{"_id": i, "a": i % 97, "b": str(i)} for i in range(500)]})
    c.ok({"createIndexes": "sc", "$db": DB, "indexes": [{"key": {"a": 1}}]})
    shard = {"_shardsvrShardCollection": "app.sc", "$db": "admin", "key": {"a": 1}}
    c = crash_at(s, "hangBeforeShardCollectionCommit", shard)
    st = c.ok({"collStats": "sc", "$db": DB})
    assert st["sharded"] is False and "shardKey" not in st, st
    key, total, nosk = table_of(s, "app.sc")
    assert key is None and total == 500 and nosk == 500, (key, total, nosk)
    c = crash_at(s, "hangAfterShardCollectionCommit", shard)
    st = c.ok({"collStats": "sc", "$db": DB})
    assert st["sharded"] is True and st["shardKey"] == {"a": 1} and num(st["count"]) == 500, st
    key, total, nosk = table_of(s, "app.sc")
    assert key is not None and total == 500 and nosk == 0, (key, total, nosk)
    # An empty collection: the shard-key index is part of the same transaction.
    c = crash_at(s, "hangBeforeShardCollectionCommit",
                 {"_shardsvrShardCollection": "app.empty", "$db": "admin", "key": {"h": "hashed"}})
    assert "empty" not in [x["name"] for x in c.ok({"listCollections": 1, "$db": DB})["cursor"]["firstBatch"]]
    c.ok({"_shardsvrShardCollection": "app.empty", "$db": "admin", "key": {"h": "hashed"}})
    assert index_names(c, "empty") == ["_id_", "h_hashed"]


@test
def test_drop_all_or_nothing(t):
    s = t.shardd("s0")
    c = s.client()
    for coll in ("d1", "d2"):
        c.ok({"insert": coll, "$db": DB, "documents": [{"_id": i, "v": i % 10} for i in range(300)]})
        c.ok({"createIndexes": coll, "$db": DB, "indexes": [{"key": {"v": 1}}]})

    def intact(c, coll):
        assert c.ok({"count": coll, "$db": DB})["n"] == 300
        assert index_names(c, coll) == ["_id_", "v_1"]
        assert len(c.find_all(coll, DB, filter={"v": 3}, hint="v_1")) == 30

    c = crash_at(s, "hangBeforeDropCommit", {"drop": "d1", "$db": DB})
    intact(c, "d1")
    c = crash_at(s, "hangBeforeDropCommit", {"dropDatabase": 1, "$db": DB})
    intact(c, "d1")
    intact(c, "d2")
    c.ok({"drop": "d1", "$db": DB})
    names = [x["name"] for x in c.ok({"listCollections": 1, "$db": DB})["cursor"]["firstBatch"]]
    assert names == ["d2"], names
    assert table_of(s, "app.d1") == (None, None, None)
    # the name is free again: nothing of the old collection is left behind
    c.ok({"insert": "d1", "$db": DB, "documents": [{"_id": 1}]})
    assert c.find_all("d1", DB) == [{"_id": 1}] and index_names(c, "d1") == ["_id_"]


@test
def test_readers_not_blocked_by_held_writer(t):
    s = t.shardd("s0")
    c = s.client()
    c.ok({"insert": "w", "$db": DB, "documents": [{"_id": i} for i in range(10)]})
    for point, mode in (("hangBeforeWriteCommit", "alwaysOn"), ("hangBeforeWriteObserver", {"skip": 2})):
        n0 = fp(c, point, mode)
        w = s.client()
        batch = [{"_id": 1000 + i} for i in range(5)]
        send(w, {"insert": "w", "$db": DB, "documents": batch})
        fp_wait(c, point, n0 + 1)
        rd = s.client(timeout_ms=5000)  # a blocked read would time out, not hang the test
        got = rd.find_all("w", DB)
        assert len(got) == 10, "a reader saw %d documents of an uncommitted batch (%s)" % (len(got) - 10, point)
        assert rd.ok({"count": "w", "$db": DB})["n"] == 10
        assert rd.ok({"find": "w", "$db": DB, "filter": {"_id": 1001}})["cursor"]["firstBatch"] == []
        fp(c, point, "off")
        r = reply(w)
        assert r["ok"] == 1 and num(r["n"]) == 5, r
        assert c.ok({"count": "w", "$db": DB})["n"] == 15
        c.ok({"delete": "w", "$db": DB, "deletes": [{"q": {"_id": {"$gte": 1000}}, "limit": 0}]})


@test
def test_get_more_held_keeps_cursor_pinned(t):
    s = t.shardd("s0")
    c = s.client()
    c.ok({"insert": "cur", "$db": DB, "documents": [{"_id": i} for i in range(10)]})
    r = c.ok({"find": "cur", "$db": DB, "batchSize": 2})
    cid = r["cursor"]["id"]
    point = "waitAfterPinningCursorBeforeGetMoreBatch"
    n0 = fp(c, point)
    g = s.client()
    send(g, {"getMore": cid, "collection": "cur", "$db": DB, "batchSize": 3})
    fp_wait(c, point, n0 + 1)
    c.err({"getMore": cid, "collection": "cur", "$db": DB}, code=143)  # CursorInUse while held
    st = c.ok({"serverStatus": 1})
    assert st["shardd"]["cursorsOpen"] == 1, st["shardd"]
    k = c.ok({"killCursors": "cur", "$db": DB, "cursors": [cid]})
    assert num(k["cursorsKilled"][0]) == num(cid), k
    fp(c, point, "off")
    r = reply(g)
    assert r["ok"] == 1 and [d["_id"] for d in r["cursor"]["nextBatch"]] == [2, 3, 4], r
    # killed while held: freed when that getMore ended
    wait_until(lambda: c.ok({"serverStatus": 1})["shardd"]["cursorsOpen"] == 0, 5, "cursor freed")
    c.err({"getMore": cid, "collection": "cur", "$db": DB}, code=43)
    # error at the point: that getMore fails and its cursor is gone
    cid = c.ok({"find": "cur", "$db": DB, "batchSize": 2})["cursor"]["id"]
    fp(c, point, {"times": 1}, action="error")
    c.err({"getMore": cid, "collection": "cur", "$db": DB}, code=192)
    c.err({"getMore": cid, "collection": "cur", "$db": DB}, code=43)


@test
def test_failpoints_registered(t):
    """Every point docs/protocol.md lists is served, and an error action fails the step
    without a crash: the batch rolls back."""
    s = t.shardd("s0")
    c = s.client()
    names = ["hangBeforeWriteObserver", "hangBeforeWriteCommit", "hangAfterWriteCommit",
             "waitAfterPinningCursorBeforeGetMoreBatch", "hangBeforeIndexBuildCommit",
             "hangAfterIndexBuildCommit", "hangIndexBuildAfterBatch", "hangBeforeDropIndexesCommit",
             "hangBeforeShardCollectionCommit", "hangAfterShardCollectionCommit", "hangBeforeDropCommit"]
    fps = c.ok({"serverStatus": 1})["failpoints"]
    missing = [n for n in names if n not in fps]
    assert not missing, missing
    with open(os.path.join(ROOT, "docs", "protocol.md")) as f:
        doc = f.read()
    undocumented = [n for n in names if "`%s`" % n not in doc]
    assert not undocumented, undocumented
    c.ok({"insert": "e", "$db": DB, "documents": [{"_id": 1}]})
    fp(c, "hangBeforeWriteCommit", {"times": 1}, action="error", code=96)
    c.err({"insert": "e", "$db": DB, "documents": [{"_id": 2}, {"_id": 3}]}, code=96)
    assert by_id(c.find_all("e", DB)) == [{"_id": 1}]
    # per document: the document fails alone (its savepoint), the others commit
    fp(c, "hangBeforeWriteObserver", {"times": 1}, action="error")
    r = c.ok({"insert": "e", "$db": DB, "ordered": False, "documents": [{"_id": 4}, {"_id": 5}]})
    assert num(r["n"]) == 1 and r["writeErrors"][0]["index"] == 0 and r["writeErrors"][0]["code"] == 192, r
    assert by_id(c.find_all("e", DB)) == [{"_id": 1}, {"_id": 5}]


if __name__ == "__main__":
    main()
