#!/usr/bin/env python3
"""
test_shardd_indexbuild.py — an index build does not stall the shard,
with real processes. createIndexes registers its indexes as building, fills them in
batches of short write transactions and marks them ready (docs/storage.md "Index
builds"); the point `hangIndexBuildAfterBatch` holds a build between two batches, which
is where these tests look at the shard:

- reads and writes of another collection, and of the collection being indexed, are
  served while the build is held (each with a 5 s client deadline: before the change
  the find on the other collection waited behind the build's exclusive catalog lock);
  a document written during the build is found through the new index once it is ready,
  and every document is in it;
- the planner does not use a building index (a hint to it → BadValue), listIndexes does
  not show it;
- dropIndexes of the building index, and drop of its collection, abort the build
  (IndexBuildAborted 276) and leave nothing behind; a second createIndexes of the same
  index joins the build and answers as for an existing index; another key under the
  same name → IndexKeySpecsConflict 86 at once;
- unique: a duplicate written during the build fails the build (11000, nothing left);
  one written and removed again before the commit does not (MongoDB's commit re-check);
- kill -9 between two batches: after the restart the index is absent, no side table is
  left, and createIndexes again builds it completely.
"""
import json
import os
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

DB = "app"
POINT = "hangIndexBuildAfterBatch"
N = 12000          # > 2 build batches (SHARDD_INDEX_BUILD_BATCH_ROWS = 5000)
PROMPT_MS = 5000   # a hang detector, not a timing assertion


def num(v):
    return int(v["$numberLong"]) if isinstance(v, dict) else int(v)


def fill(c, coll, n, start=0):
    for i in range(start, start + n, 1000):
        docs = [{"_id": j, "k": j % 1000, "u": j} for j in range(i, min(i + 1000, start + n))]
        c.ok({"insert": coll, "$db": DB, "documents": docs})


def index_names(c, coll):
    r = c.ok({"listIndexes": coll, "$db": DB})
    return [ix["name"] for ix in r["cursor"]["firstBatch"]]


def hold_build(s, c, cmd):
    """Turns the point on, sends cmd on a client of its own, returns once the build is
    held after its first batch."""
    n = fp(c, POINT)
    w = s.client()
    send(w, cmd)
    fp_wait(c, POINT, n + 1)
    return w


def release(c, w):
    fp(c, POINT, "off")
    return reply(w)


def check_index_complete(c, coll, total):
    """Every document is found through k_1, and only through its own key."""
    got = c.find_all(coll, DB, filter={"k": {"$gte": 0}}, hint="k_1", projection={"_id": 1})
    assert len(got) == total, "k_1 holds %d documents, want %d" % (len(got), total)
    for k in (0, 7, 999):
        want = c.ok({"count": coll, "$db": DB, "query": {"k": k}, "hint": {"$natural": 1}})["n"]
        got = c.ok({"count": coll, "$db": DB, "query": {"k": k}, "hint": "k_1"})["n"]
        assert num(got) == num(want), (k, got, want)


@test
def test_reads_and_writes_beside_a_held_build(t):
    s = t.shardd("s0")
    c = s.client()
    fill(c, "a", N)
    fill(c, "b", 100)
    w = hold_build(s, c, {"createIndexes": "a", "$db": DB, "indexes": [{"key": {"k": 1}}]})
    q = s.client(timeout_ms=PROMPT_MS)
    # another collection: point read and write
    r = q.ok({"find": "b", "$db": DB, "filter": {"_id": 5}})
    assert r["cursor"]["firstBatch"] == [{"_id": 5, "k": 5, "u": 5}], r
    q.ok({"insert": "b", "$db": DB, "documents": [{"_id": "new-b"}]})
    # the collection being indexed: read by _id, insert, update, delete
    r = q.ok({"find": "a", "$db": DB, "filter": {"_id": 11999}})
    assert r["cursor"]["firstBatch"] == [{"_id": 11999, "k": 999, "u": 11999}], r
    q.ok({"insert": "a", "$db": DB, "documents": [{"_id": "new-a", "k": 4242}]})
    q.ok({"update": "a", "$db": DB, "updates": [{"q": {"_id": 3}, "u": {"$set": {"k": 3333}}},
                                               {"q": {"_id": 11000}, "u": {"$set": {"k": 4343}}}]})
    q.ok({"delete": "a", "$db": DB, "deletes": [{"q": {"_id": 4}, "limit": 1},
                                               {"q": {"_id": 11001}, "limit": 1}]})
    # the building index is not usable nor listed yet
    q.err({"find": "a", "$db": DB, "filter": {"k": 4242}, "hint": "k_1"}, code=2)
    assert index_names(q, "a") == ["_id_"]
    # DDL on other collections gets its turn between batches
    q.ok({"create": "c", "$db": DB})
    q.ok({"drop": "b", "$db": DB})
    r = release(c, w)
    assert r.get("ok") == 1, r
    assert num(r["numIndexesBefore"]) == 1 and num(r["numIndexesAfter"]) == 2, r
    assert index_names(c, "a") == ["_id_", "k_1"]
    # written during the build (before and after the scan's position): found through k_1
    for k, want in ((4242, "new-a"), (3333, 3), (4343, 11000)):
        got = c.find_all("a", DB, filter={"k": k}, hint="k_1", projection={"_id": 1})
        assert got == [{"_id": want}], (k, got)
    for gone in (4, 11001):
        got = c.find_all("a", DB, filter={"k": gone % 1000, "_id": gone}, hint="k_1")
        assert got == [], (gone, got)
    got = c.find_all("a", DB, filter={"k": 3}, hint="k_1", projection={"_id": 1})
    assert {"_id": 3} not in got, "the old key of an updated document is still indexed"
    check_index_complete(c, "a", N - 2 + 1)


@test
def test_drop_and_join_during_a_build(t):
    s = t.shardd("s0")
    c = s.client()
    fill(c, "a", N)
    build = {"createIndexes": "a", "$db": DB, "indexes": [{"key": {"k": 1}}]}
    # dropIndexes of the building index aborts the build
    w = hold_build(s, c, build)
    c.err({"createIndexes": "a", "$db": DB, "indexes": [{"key": {"u": 1}, "name": "k_1"}]}, code=86)
    c.ok({"dropIndexes": "a", "$db": DB, "index": "k_1"})
    r = release(c, w)
    assert r.get("ok") == 0 and r.get("code") == 276, r
    assert index_names(c, "a") == ["_id_"]
    # a second identical createIndexes joins the build
    w = hold_build(s, c, build)
    j = s.client()
    send(j, build)
    r = release(c, w)
    assert r.get("ok") == 1, r
    r = reply(j)
    assert r.get("ok") == 1 and r.get("note") == "all indexes already exist", r
    assert index_names(c, "a") == ["_id_", "k_1"]
    check_index_complete(c, "a", N)
    # "*" aborts a build too
    w = hold_build(s, c, {"createIndexes": "a", "$db": DB, "indexes": [{"key": {"u": 1}}]})
    c.ok({"dropIndexes": "a", "$db": DB, "index": "*"})
    r = release(c, w)
    assert r.get("code") == 276, r
    assert index_names(c, "a") == ["_id_"]
    # drop of the collection aborts the build; the name can be used anew
    w = hold_build(s, c, build)
    c.ok({"drop": "a", "$db": DB})
    r = release(c, w)
    assert r.get("code") == 276, r
    fill(c, "a", 10)
    c.ok(build)
    check_index_complete(c, "a", 10)


@test
def test_unique_build_with_writes_beside(t):
    s = t.shardd("s0")
    c = s.client()
    fill(c, "a", N)
    build = {"createIndexes": "a", "$db": DB, "indexes": [{"key": {"u": 1}, "unique": True}]}
    # a duplicate written during the build and still there at the commit: the build fails
    w = hold_build(s, c, build)
    c.ok({"insert": "a", "$db": DB, "documents": [{"_id": "dup", "u": 7}]})
    r = release(c, w)
    assert r.get("code") == 11000 and "dup key: { u: 7 }" in r.get("errmsg", ""), r
    assert index_names(c, "a") == ["_id_"]
    c.ok({"delete": "a", "$db": DB, "deletes": [{"q": {"_id": "dup"}, "limit": 1}]})
    # a duplicate written and removed again before the commit: the build succeeds
    w = hold_build(s, c, build)
    c.ok({"insert": "a", "$db": DB, "documents": [{"_id": "dup2", "u": 11500}]})
    c.ok({"delete": "a", "$db": DB, "deletes": [{"q": {"_id": 11500}, "limit": 1}]})
    r = release(c, w)
    assert r.get("ok") == 1, r
    got = c.find_all("a", DB, filter={"u": 11500}, hint="u_1", projection={"_id": 1})
    assert got == [{"_id": "dup2"}], got
    r = c.ok({"insert": "a", "$db": DB, "documents": [{"_id": "dup3", "u": 8}]})
    assert r["writeErrors"][0]["code"] == 11000, r


@test
def test_crash_between_batches(t):
    s = t.shardd("s0")
    c = s.client()
    fill(c, "a", N)
    fp(c, POINT, {"skip": 1}, action="crash")   # after the second batch
    w = s.client()
    send(w, {"createIndexes": "a", "$db": DB, "indexes": [{"key": {"k": 1}}]})
    rc = s.proc.wait(30)
    assert rc == -9, "shardd exited with %s, not SIGKILL" % rc
    w.p.kill()
    w.p.wait(10)
    Client.open_clients.discard(w)
    c.close()
    s.restart()
    c = s.client()
    assert index_names(c, "a") == ["_id_"]
    c.err({"find": "a", "$db": DB, "filter": {"k": 3}, "hint": "k_1"}, code=2)
    assert "index build interrupted by a crash removed ns=app.a name=k_1" in s.log_text()
    db = sqlite3.connect("file:%s/shard.sqlite?mode=ro" % s.dbpath, uri=True, timeout=10)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"
                                           " AND name LIKE 'i%'")]
        rows = db.execute("SELECT count(*) FROM indexes").fetchone()[0]
    finally:
        db.close()
    assert tables == ["indexes"] and rows == 0, (tables, rows)
    r = c.ok({"createIndexes": "a", "$db": DB, "indexes": [{"key": {"k": 1}}]})
    assert num(r["numIndexesAfter"]) == 2, r
    check_index_complete(c, "a", N)


if __name__ == "__main__":
    main()
