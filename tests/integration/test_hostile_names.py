#!/usr/bin/env python3
"""
test_hostile_names.py — hostile names, numbers and nesting against real daemons, with raw BSON
(hostile.RawReq) so a test can send what shardctl's JSON cannot: NaN and infinite
numbers, strings with an embedded NUL, documents nested past libbson's JSON limit.

  item 7  names and numbers: the router, a shard and the config server answer the same
          MongoDB code for the same bad input (common/validate.h), and nothing is written:
          batchSize -1 (51024), limit NaN / 1e30, skip -Infinity (FailedToParse 9),
          $db "app\\0x" and "admin\\0x" (73, nothing lands in app or admin), $db "",
          collections "system.x" and ".a", a 260-byte namespace (73), a getMore whose
          collection or $db is not its cursor's (Unauthorized 13), enableSharding of a
          name with control characters (73);
  item 6  the depth edge: a document 100 levels deep (MongoDB's count) is inserted, found
          (first batch and getMore), updated and findAndModify'd on a shard and through
          the router; 101 levels is refused with Overflow (15) at insert and at update;
  item 8  a newline in a database name never starts a line of its own in a daemon's log.

Each case ends with the daemon answering ping for another client within a second and
its RSS under RSS_MB_MAX.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from hostile import RawReq, Int64, assert_responsive, assert_rss_below  # noqa: E402

# None of these cases allocates much: a daemon above this holds something it should not.
RSS_MB_MAX = 200

NAN = float("nan")
INF = float("inf")


def call(proc, doc):
    c = RawReq(proc.url, timeout=10.0)
    try:
        return c.call(doc)
    finally:
        c.close()


def expect(proc, doc, code, what=""):
    r = call(proc, doc)
    if r.get("ok") == 1 or r.get("code") != code:
        raise AssertionError("%s%s: %s answered %s, expected code %d" % (
            proc.name, what and " (" + what + ")", repr(doc)[:300], repr(r)[:300], code))
    return r


def ok(proc, doc):
    r = call(proc, doc)
    if r.get("ok") != 1:
        raise AssertionError("%s: %s failed: %s" % (proc.name, repr(doc)[:300], repr(r)[:300]))
    return r


def healthy(*procs):
    for p in procs:
        assert_responsive(p)
        assert_rss_below(p, RSS_MB_MAX)


def docs_in(proc, db, coll):
    r = call(proc, {"find": coll, "$db": db, "batchSize": 1000})
    if r.get("ok") != 1:
        return []   # NamespaceNotFound and the like: nothing there
    return r["cursor"]["firstBatch"]


def nest(levels):
    """A document `levels` deep as MongoDB counts (itself = 1, each non-empty
    sub-document + 1): {a: {a: ... {x: 1}}}."""
    d = {"x": 1}
    for _ in range(levels - 1):
        d = {"a": d}
    return d


def depth(v):
    if isinstance(v, dict):
        return 1 + max([depth(x) for x in v.values() if isinstance(x, (dict, list)) and x] or [0])
    if isinstance(v, list):
        return 1 + max([depth(x) for x in v if isinstance(x, (dict, list)) and x] or [0])
    return 0


# ---- item 7: numbers ---------------------------------------------------------------------

@test
def test_numbers_same_everywhere(t):
    cl = t.cluster(shards=2)
    R, S, C = cl.routers[0], cl.shards[0], cl.config
    ok(R, {"insert": "c", "$db": "app", "documents": [{"_id": i} for i in range(5)]})
    ok(S, {"insert": "c", "$db": "app", "documents": [{"_id": i} for i in range(5)]})
    cases = [
        ({"batchSize": -1}, 51024),
        ({"batchSize": Int64(-1)}, 51024),
        ({"limit": -1}, 51024),
        ({"skip": -5}, 51024),
        ({"limit": NAN}, 9),
        ({"limit": 1e30}, 9),
        ({"skip": -INF}, 9),
        ({"batchSize": INF}, 9),
        ({"limit": 2.5}, 9),
    ]
    for fields, code in cases:
        for proc, db, coll in ((R, "app", "c"), (S, "app", "c"), (C, "config", "shards"),
                               (R, "config", "shards")):
            doc = {"find": coll, "$db": db}
            doc.update(fields)
            expect(proc, doc, code, "find %r" % fields)
    # count: skip >= 0, limit any integer (a negative one counts as its absolute value)
    for proc, db, coll in ((R, "app", "c"), (S, "app", "c"), (C, "config", "shards")):
        expect(proc, {"count": coll, "$db": db, "skip": -1}, 51024, "count skip")
        expect(proc, {"count": coll, "$db": db, "limit": NAN}, 9, "count limit")
    assert ok(R, {"count": "c", "$db": "app", "limit": -2})["n"] == 2
    # getMore's batchSize: BadValue below 0, FailedToParse when not an integer
    for proc in (R, S):
        cid = ok(proc, {"find": "c", "$db": "app", "batchSize": 1})["cursor"]["id"]
        expect(proc, {"getMore": Int64(cid), "collection": "c", "$db": "app", "batchSize": -1}, 2)
        expect(proc, {"getMore": Int64(cid), "collection": "c", "$db": "app", "batchSize": NAN}, 9)
        r = ok(proc, {"getMore": Int64(cid), "collection": "c", "$db": "app", "batchSize": 2})
        assert len(r["cursor"]["nextBatch"]) == 2, r
    healthy(R, S, C)


# ---- item 7: names -----------------------------------------------------------------------

@test
def test_names_same_everywhere(t):
    cl = t.cluster(shards=2)
    R, S, C = cl.routers[0], cl.shards[0], cl.config
    ok(R, {"insert": "seed", "$db": "app", "documents": [{"_id": 1}]})
    for proc in (R, S):
        # $db with an embedded NUL is not "app" / "admin": refused, nothing written there
        for db in ("app\x00x", "admin\x00x"):
            expect(proc, {"insert": "c", "$db": db, "documents": [{"_id": 7, "nul": True}]}, 73,
                   "insert $db %r" % db)
            expect(proc, {"find": "c", "$db": db}, 73)
        for real in ("app", "admin"):
            assert not [d for d in docs_in(proc, real, "c") if d.get("nul")], (proc.name, real)
        expect(proc, {"find": "c", "$db": ""}, 73, "$db empty")
        expect(proc, {"insert": "c", "$db": "", "documents": [{"_id": 1}]}, 73)
        expect(proc, {"find": "c", "$db": "a b"}, 73)
        # collection names
        for coll, what in (("system.x", "system"), (".a", "leading dot"), ("a$b", "dollar"),
                           ("", "empty"), ("c\x00d", "NUL")):
            expect(proc, {"insert": coll, "$db": "app", "documents": [{"_id": 9}]}, 73, what)
        expect(proc, {"create": "system.y", "$db": "app"}, 73)
        expect(proc, {"createIndexes": "system.y", "$db": "app",
                      "indexes": [{"key": {"a": 1}, "name": "a_1"}]}, 73)
        expect(proc, {"update": "system.x", "$db": "app",
                      "updates": [{"q": {}, "u": {"$set": {"a": 1}}, "upsert": True}]}, 73)
        expect(proc, {"findAndModify": "system.x", "$db": "app", "query": {},
                      "update": {"$set": {"a": 1}}, "upsert": True}, 73)
        # a 260-byte namespace: InvalidNamespace, not InternalError
        expect(proc, {"insert": "x" * 256, "$db": "app", "documents": [{"_id": 1}]}, 73, "long ns")
        expect(proc, {"find": "x" * 256, "$db": "app"}, 73, "long ns find")
        expect(proc, {"count": "x" * 256, "$db": "app"}, 73, "long ns count")
        names = [c["name"] for c in ok(proc, {"listCollections": 1, "$db": "app"})["cursor"]["firstBatch"]]
        assert not [n for n in names if n.startswith("system.") or n.startswith(".") or "$" in n
                    or len(n) > 200 or "\x00" in n], (proc.name, names)
    # getMore answers only on its cursor's namespace
    ok(R, {"insert": "g", "$db": "app", "documents": [{"_id": i} for i in range(5)]})
    ok(R, {"insert": "g", "$db": "other", "documents": [{"_id": 1}]})
    for proc in (R, S):
        ok(S, {"insert": "g2", "$db": "app", "documents": [{"_id": i} for i in range(5)]})
        coll = "g" if proc is R else "g2"
        cid = ok(proc, {"find": coll, "$db": "app", "batchSize": 1})["cursor"]["id"]
        assert cid, "cursor expected"
        r = expect(proc, {"getMore": Int64(cid), "collection": "other", "$db": "app"}, 13)
        assert "different namespace" in r["errmsg"], r
        expect(proc, {"getMore": Int64(cid), "collection": coll, "$db": "other"}, 13)
        expect(proc, {"getMore": Int64(cid), "collection": "", "$db": "app"}, 73)
        r = ok(proc, {"getMore": Int64(cid), "collection": coll, "$db": "app", "batchSize": 10})
        assert len(r["cursor"]["nextBatch"]) == 4, r   # the cursor survived the refusals
    # enableSharding / shardCollection: names with control characters and the like
    for proc in (R, C):
        for db in ("a\nb", "a\x01b", "a\tb", "a.b", "", "a b", "x" * 64, "a\x00b"):
            expect(proc, {"enableSharding": db, "$db": "admin"}, 73, "enableSharding %r" % db)
        expect(proc, {"shardCollection": "app", "key": {"_id": 1}, "$db": "admin"}, 73)
        expect(proc, {"shardCollection": "app.system.z", "key": {"_id": 1}, "$db": "admin"}, 73)
        expect(proc, {"shardCollection": "a\nb.c", "key": {"_id": 1}, "$db": "admin"}, 73)
    dbs = [d["_id"] for d in ok(R, {"find": "databases", "$db": "config"})["cursor"]["firstBatch"]]
    assert not [d for d in dbs if any(ord(ch) < 0x20 for ch in d) or "." in d or " " in d], dbs
    healthy(R, S, C)


# ---- item 6: the depth edge ---------------------------------------------------------------

@test
def test_depth_edge(t):
    cl = t.cluster(shards=2)
    R, S = cl.routers[0], cl.shards[0]
    edge = nest(100)
    assert depth(edge) == 100
    for proc, coll in ((S, "deep_s"), (R, "deep_r")):
        docs = [dict({"_id": i}, **edge) for i in range(3)]
        r = ok(proc, {"insert": coll, "$db": "app", "documents": docs})
        assert r["n"] == 3 and not r.get("writeErrors"), r
        # read back: first batch and getMore
        r = ok(proc, {"find": coll, "$db": "app", "batchSize": 1, "sort": {"_id": 1}})
        first = r["cursor"]["firstBatch"]
        assert len(first) == 1 and depth(first[0]) == 100, (proc.name, depth(first[0]) if first else None)
        r = ok(proc, {"getMore": Int64(r["cursor"]["id"]), "collection": coll, "$db": "app"})
        assert len(r["cursor"]["nextBatch"]) == 2 and all(depth(d) == 100 for d in r["cursor"]["nextBatch"])
        # update and findAndModify keep the deepest document readable
        r = ok(proc, {"update": coll, "$db": "app",
                      "updates": [{"q": {"_id": 0}, "u": {"$set": {"y": 1}}}]})
        assert r["nModified"] == 1, r
        r = ok(proc, {"findAndModify": coll, "$db": "app", "query": {"_id": 1},
                      "update": {"$set": {"y": 2}}, "new": True})
        assert r["value"]["y"] == 2 and depth(r["value"]) == 100, r.get("value", {}).get("y")
        r = ok(proc, {"find": coll, "$db": "app", "filter": {"_id": 0}})
        assert r["cursor"]["firstBatch"][0]["y"] == 1
        # one level deeper: Overflow at insert, and at an update that would deepen it
        r = call(proc, {"insert": coll, "$db": "app", "documents": [dict({"_id": 99}, **nest(101))]})
        errs = r.get("writeErrors") or ([r] if r.get("ok") != 1 else [])
        assert errs and errs[0]["code"] == 15, (proc.name, r)
        assert "100 levels" in errs[0]["errmsg"], errs[0]
        r = call(proc, {"update": coll, "$db": "app",
                        "updates": [{"q": {"_id": 2}, "u": {"$set": {"z": nest(100)}}}]})
        errs = r.get("writeErrors") or ([r] if r.get("ok") != 1 else [])
        assert errs and errs[0]["code"] == 15, (proc.name, r)
        r = ok(proc, {"count": coll, "$db": "app"})
        assert r["n"] == 3, r   # the 101-deep one was not written
        r = ok(proc, {"find": coll, "$db": "app", "filter": {"_id": 2}})
        assert "z" not in r["cursor"]["firstBatch"][0]
    # a message deeper than a document plus its envelope is refused whole (Overflow)
    expect(R, {"insert": "deep_r", "$db": "app", "documents": [nest(130)]}, 15)
    healthy(R, S)


# ---- item 8: logs cannot be forged --------------------------------------------------------

FAKE = "I ready url=tcp://forged.invalid:1"  # no real ready line holds it, whatever the port
LINE_START = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z \S+ [DIWE] ")


def assert_not_forged(proc):
    text = proc.log_text()
    assert "ready url=tcp://forged.invalid:1" in text, "%s never logged the hostile name" % proc.name
    for line in text.splitlines():
        if not line:
            continue
        assert LINE_START.match(line), "%s: a line that is not a log line: %r" % (proc.name, line[:200])
        assert "ready url=tcp://forged.invalid:1" not in line or "\\n" in line, (proc.name, line[:200])
        assert not line.startswith("I ready"), (proc.name, line[:200])


@test
def test_logs_not_forged(t):
    cl = t.cluster(shards=1)
    R, S, C = cl.routers[0], cl.shards[0], cl.config
    name = "a\n" + FAKE
    stamp = "a\n2026-01-01T00:00:00.000Z router0 " + FAKE
    for proc in (R, C):
        call(proc, {"enableSharding": name, "$db": "admin"})
        call(proc, {"enableSharding": stamp, "$db": "admin"})
    for proc in (R, S):
        call(proc, {"find": "c", "$db": name})
        call(proc, {"insert": "c\n" + FAKE, "$db": "app", "documents": [{"_id": 1}]})
        call(proc, {"find": "c", "$db": "app", "filter": {"$nope\n" + FAKE: 1}})
        # a quote cannot end the errmsg field early and add a key of its own
        call(proc, {"find": "c", "$db": 'a" ready="1'})
    for proc in (R, S, C):
        assert_not_forged(proc)
    for line in R.log_text().splitlines():
        if 'ready=\\"1' in line:
            assert 'errmsg="' in line, line   # the value stayed quoted, the quote escaped
    healthy(R, S, C)


if __name__ == "__main__":
    main()
