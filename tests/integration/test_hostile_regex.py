#!/usr/bin/env python3
"""
test_hostile_regex.py — hostile regular expressions against a shard daemon and through
a router: a pattern whose counted repetition would expand to a huge
program is refused with BadValue and leaves memory alone; a back-reference is refused
(our documented divergence from PCRE: it needs backtracking); a pattern that costs much
per character over many long strings either finishes or answers MaxTimeMSExpired soon
after its maxTimeMS. Each case ends with another client's ping answered within a second
and the daemon's resident memory under RSS_MB_MAX.
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403
from hostile import RawReq, assert_responsive, assert_rss_below  # noqa: E402

# A shard holding 5 MB of strings and a compiled regex stays far below this; glibc's
# regcomp of (a{1,700}){1,700} grew a shard by 2.7 GB.
RSS_MB_MAX = 150

DOCS = 1000          # documents of LONG_CHARS characters each: 5 MB of subject text
LONG_CHARS = 5000
# Generous: maxTimeMS is 1000 ms; this only has to tell "stopped near the deadline"
# from "ignored it" (tens of seconds) on a noisy shared machine.
EXPIRED_WITHIN_S = 10.0


def load(url, coll="c", docs=DOCS):
    c = RawReq(url, timeout=60)
    try:
        for start in range(0, docs, 100):
            batch = [{"_id": i, "s": "x" * LONG_CHARS, "k": "ab%d" % i} for i in range(start, min(docs, start + 100))]
            r = c.call({"insert": coll, "$db": "app", "documents": batch})
            assert r.get("ok") == 1 and r.get("n") == len(batch), r
    finally:
        c.close()


def find(url, flt, timeout=60, **extra):
    """Runs one find on a fresh raw connection; returns (reply, seconds)."""
    c = RawReq(url, timeout=timeout)
    try:
        cmd = {"find": "c", "$db": "app", "filter": flt, "projection": {"s": 0}}
        cmd.update(extra)
        t0 = time.monotonic()
        r = c.call(cmd)
        return r, time.monotonic() - t0
    finally:
        c.close()


def expect_bad_value(url, flt, what):
    r, _ = find(url, flt)
    assert r.get("ok") == 0 and r.get("code") == 2, "%s: expected BadValue, got %r" % (what, r)
    assert "Regular expression is invalid: " in r.get("errmsg", ""), r   # a router prefixes "shard X: "
    assert what in r["errmsg"], (what, r)
    return r


def check_all(url, served_by, procs):
    """The hostile cases against url (a shard or a router); served_by = the shard
    process that holds the data (its memory is what a regex would grow)."""
    # 1. counted repetition that would expand to ~a million instructions: refused,
    #    quickly and without memory growth
    expect_bad_value(url, {"k": {"$regex": "(a{1,700}){1,700}"}}, "too large to compile")
    for p in procs:
        mb = assert_rss_below(p, RSS_MB_MAX, "after (a{1,700}){1,700}")
        print("  %s RSS after (a{1,700}){1,700}: %.0f MiB (bound %d)" % (p.name, mb, RSS_MB_MAX))
        assert_responsive(p, what="after (a{1,700}){1,700}")
    # the same with $options, as a BSON regex value, inside $in and under $not
    expect_bad_value(url, {"k": {"$regex": "(?:a{1,700}){1,700}", "$options": "i"}}, "too large to compile")
    cl = Client(url)
    rv = {"$regularExpression": {"pattern": "(a{1,700}){1,700}", "options": ""}}
    for flt in ({"k": rv}, {"k": {"$in": ["x", rv]}}, {"k": {"$not": rv}}):
        r = cl.err({"find": "c", "$db": "app", "filter": flt}, code=2)
        assert "too large to compile" in r["errmsg"], r
    cl.close()
    for p in procs:
        assert_rss_below(p, RSS_MB_MAX, "after the regex values")

    # 2. back-references: refused (MongoDB's PCRE takes them; their cost is unbounded)
    expect_bad_value(url, {"s": {"$regex": "^(x+x+)+\\1y"}}, "back-reference \\1")
    expect_bad_value(url, {"s": {"$regex": "(?<q>x)\\k<q>"}}, "named back-reference")
    expect_bad_value(url, {"s": {"$regex": "x(?=y)"}}, "lookahead assertion")
    for p in procs:
        assert_responsive(p, what="after back-references")

    # 3. a pathological pattern for backtracking engines over 1,000 docs of 5,000 chars:
    #    linear here, so it finishes (or stops at maxTimeMS on a very slow machine)
    r, secs = find(url, {"s": {"$regex": "(x+x+)+y"}}, maxTimeMS=1000)
    assert r.get("ok") == 1 or r.get("code") == 50, r
    assert secs < EXPIRED_WITHIN_S, "(x+x+)+y took %.1f s with maxTimeMS 1000" % secs
    if r.get("ok") == 1:
        assert r["cursor"]["firstBatch"] == [], r
    print("  (x+x+)+y over %d x %d chars: %s in %.2f s" % (DOCS, LONG_CHARS, "ok" if r.get("ok") == 1 else "expired", secs))
    for p in procs:
        assert_responsive(p, what="after (x+x+)+y")

    # 4. a pattern costing ~2,000 steps per character (10^10 in all, tens of seconds):
    #    maxTimeMS is checked inside the match and the command answers MaxTimeMSExpired
    heavy = "(?:x?){1000}x{1000}y"
    r, secs = find(url, {"s": {"$regex": heavy}}, maxTimeMS=1000)
    assert r.get("ok") == 0 and r.get("code") == 50, r
    assert r.get("codeName") == "MaxTimeMSExpired", r
    assert secs < EXPIRED_WITHIN_S, "maxTimeMS 1000 answered after %.1f s" % secs
    print("  %s: MaxTimeMSExpired after %.2f s (maxTimeMS 1000)" % (heavy, secs))
    for p in procs:
        assert_responsive(p, what="after the expired regex")
        assert_rss_below(p, RSS_MB_MAX, "after the expired regex")
    # the same through delete: no document may go, and the error is the reply's
    c = RawReq(url, timeout=60)
    try:
        r = c.call({"delete": "c", "$db": "app", "maxTimeMS": 1000,
                    "deletes": [{"q": {"s": {"$not": {"$regex": heavy}}}, "limit": 0}]})
        assert r.get("ok") == 0 and r.get("code") == 50 or \
            (r.get("ok") == 1 and r.get("writeErrors") and r["writeErrors"][0]["code"] == 50), r
        n = c.call({"count": "c", "$db": "app"})
        assert n.get("n") == DOCS, ("documents deleted by an interrupted $not regex", n)
    finally:
        c.close()

    # the engine still answers ordinary patterns
    r, _ = find(url, {"k": {"$regex": "^AB99\\d$", "$options": "i"}})
    assert r.get("ok") == 1 and sorted(d["_id"] for d in r["cursor"]["firstBatch"]) == list(range(990, 1000)), r


@test
def test_hostile_regex_shardd(t):
    s = t.shardd("s0")
    load(s.url)
    check_all(s.url, s, [s])


@test
def test_hostile_regex_router(t):
    cl = t.cluster(shards=1)
    r = cl.routers[0]
    load(r.url)
    check_all(r.url, cl.shards[0], [r, cl.shards[0]])


if __name__ == "__main__":
    main()
