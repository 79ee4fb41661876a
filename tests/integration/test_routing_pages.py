#!/usr/bin/env python3
"""
test_routing_pages.py — the routing table travels in pages (docs/versioning-and-routing.md
"Batched routing tables"). The config server runs with --routing-table-page-chunks 16, so
a few hundred chunks take many pages: getRoutingTable answers at most 16 chunks (the next
16 in lastmod order, sorted by min) with `more` and resumes `after` a lastmod; a router and the shards load such a
table; splits and moves made while a router is held between two pages
(hangBetweenRoutingTablePages), during a full and an incremental refresh, end in exactly
the catalog's table (its bounds against config.chunks, its version against the
collection's); a drop and re-create between two pages makes the router start over and
end with the new generation; a shard held between the pages of its refresh likewise
ends right (every document found, none twice).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

PAGE = 16
CFG_FLAGS = ["--routing-table-page-chunks", str(PAGE)]
DB, COLL = "app", "h"
NS = DB + "." + COLL
FP = "hangBetweenRoutingTablePages"
NDOCS = 300


def key(doc):
    return json.dumps(doc, sort_keys=True)


def lastmod(ch):
    return (ch["lastmod"]["$timestamp"]["t"], ch["lastmod"]["$timestamp"]["i"])


def read_pages(c, ns=NS):
    """ns's table straight from the config server, page by page: (chunks in lastmod order,
    pages, last reply)."""
    out, after, n, floor = [], None, 0, None
    for _ in range(10000):   # bounded: every page but the last holds chunks
        cmd = {"getRoutingTable": ns, "$db": "admin"}
        if after is not None:
            cmd["after"] = after
        r = c.ok(cmd)
        n += 1
        page = r["chunks"]
        assert len(page) <= PAGE, len(page)
        # sorted by min within the page; every lastmod past the page before's
        assert all(floor is None or lastmod(ch) > floor for ch in page), (floor, page)
        out += page
        if not r["more"]:
            return sorted(out, key=lastmod), n, r
        assert page, r
        top = max(page, key=lastmod)
        floor, after = lastmod(top), top["lastmod"]
    raise AssertionError("no last page")


def catalog(c):
    """config.chunks of NS as {(min, max): shard} and the collection version."""
    coll = [d for d in c.find_all("collections", "config", {"_id": NS})]
    assert coll, "no config.collections entry"
    docs = c.find_all("chunks", "config", {"uuid": coll[0]["uuid"]})
    _, _, last = read_pages(c)
    return {(key(d["min"]), key(d["max"])): d["shard"] for d in docs}, last["collectionVersion"]["v"]


def router_table(c):
    r = c.ok({"getShardVersion": NS, "fullMetadata": True, "$db": "admin"})
    return {(key(p[0]), key(p[1])) for p in r["chunks"]}, r["version"]


def check_router(router, cfg):
    """The router's cached table is the catalog's: same bounds, same version."""
    want, version = catalog(cfg.client())
    got, got_version = router_table(router.client())
    assert got == set(want), "router: %d chunks, catalog %d; differ by %d" % (
        len(got), len(want), len(got ^ set(want)))
    assert got_version == version, (got_version, version)
    return want


def setup(t, nchunks=200):
    cl = t.cluster(2, 2, config_extra=CFG_FLAGS)
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": "hashed"}, "numInitialChunks": nchunks, "$db": "admin"})
    c.ok({"insert": COLL, "$db": DB, "documents": [{"_id": i, "k": i} for i in range(NDOCS)]})
    return cl


def count_all(c):
    docs = c.find_all(COLL, DB, {})
    ids = sorted(d["_id"] if isinstance(d["_id"], int) else int(num(d["_id"])) for d in docs)
    assert ids == list(range(NDOCS)), "%d documents, %d distinct" % (len(ids), len(set(ids)))


def chunk_rows(c):
    uuid = c.find_all("collections", "config", {"_id": NS})[0]["uuid"]
    return c.find_all("chunks", "config", {"uuid": uuid})


def change_catalog(c, nsplits=6, nmoves=2, owner=None):
    """Splits nsplits chunks with finite bounds (of owner only, when given; a hashed key: at
    the middle of their hash range) and moves nmoves chunks to the other shard, through
    client c."""
    rows = [d for d in chunk_rows(c) if isinstance(d["min"]["k"], int) and
            isinstance(d["max"]["k"], int) and owner in (None, d["shard"])]
    assert len(rows) >= nsplits + nmoves, len(rows)
    for d in rows[:nsplits]:
        c.ok({"split": NS, "middle": {"k": long((d["min"]["k"] + d["max"]["k"]) // 2)}, "$db": "admin"})
    for d in rows[nsplits:nsplits + nmoves]:
        to = "shard1" if d["shard"] == "shard0" else "shard0"
        c.ok({"moveChunk": NS, "bounds": [d["min"], d["max"]], "to": to, "$db": "admin"})


@test
def test_pages_and_paged_loads(t):
    """getRoutingTable in pages of 16; the router and the shards load 200 chunks."""
    cl = setup(t)
    cfg = cl.config.client()
    chunks, npages, last = read_pages(cfg)
    assert len(chunks) == 200 and npages == 13, (len(chunks), npages)
    assert last["full"] is True and last["more"] is False
    first = cfg.ok({"getRoutingTable": NS, "$db": "admin"})
    assert first["more"] is True and len(first["chunks"]) == PAGE
    # an incremental request pages too: everything from the 100th lastmod on
    since = dict(first["collectionVersion"])
    since["v"] = chunks[100]["lastmod"]
    inc = cfg.ok({"getRoutingTable": NS, "sinceVersion": since, "$db": "admin"})
    assert inc["full"] is False and inc["more"] is True, inc
    assert sorted(map(lastmod, inc["chunks"])) == [lastmod(ch) for ch in chunks[100:100 + PAGE]]
    cfg.err({"getRoutingTable": NS, "after": "x", "$db": "admin"}, 14)   # TypeMismatch
    r0 = cl.routers[0]
    count_all(r0.client())
    check_router(r0, cl.config)
    print("  200 chunks in %d pages; router and shards route 300 documents" % npages)


@test
def test_changes_between_pages(t):
    """Splits and moves while the router is held between pages: full, then incremental."""
    cl = setup(t)
    r0, r1 = cl.client(0), cl.client(1)
    count_all(r0)
    for what in ("full", "incremental"):
        if what == "full":
            r0.ok({"flushRouterConfig": 1, "$db": "admin"})
        else:
            # more than a page of changes for the incremental refresh to read
            change_catalog(r1, nsplits=12, nmoves=1)
        n = fp(r0, FP, {"times": 1})
        # a count reaches both shards: each answers StaleConfig after the move
        th, out = cmd_in_thread(cl.routers[0], {"count": COLL, "$db": DB})
        fp_wait(r0, FP, n + 1)
        change_catalog(r1)
        fp(r0, FP, "off")
        th.join(60)
        assert not th.is_alive() and out["reply"]["ok"] == 1, out
        assert num(out["reply"]["n"]) == NDOCS, out["reply"]
        want = check_router(cl.routers[0], cl.config)
        print("  %s refresh held between pages, 6 splits + 2 moves: router == catalog (%d chunks)"
              % (what, len(want)))
    count_all(r0)


@test
def test_generation_change_restarts(t):
    """A drop and re-create between two pages: the router starts over, new generation."""
    cl = setup(t)
    r0, r1 = cl.client(0), cl.client(1)
    count_all(r0)
    r0.ok({"flushRouterConfig": 1, "$db": "admin"})
    n = fp(r0, FP, {"times": 1})
    th, out = cmd_in_thread(cl.routers[0], {"count": COLL, "$db": DB})
    fp_wait(r0, FP, n + 1)
    r1.ok({"drop": COLL, "$db": DB})
    r1.ok({"shardCollection": NS, "key": {"k": "hashed"}, "numInitialChunks": 100, "$db": "admin"})
    fp(r0, FP, "off")
    th.join(60)
    assert not th.is_alive() and out["reply"]["ok"] == 1, out
    assert num(out["reply"]["n"]) == 0, out["reply"]
    want = check_router(cl.routers[0], cl.config)
    assert len(want) == 100, len(want)
    assert "changed generation" in cl.routers[0].log_text()
    print("  drop + re-create between pages: the router restarted and holds the new 100 chunks")


@test
def test_shard_refresh_between_pages(t):
    """A shard held between the pages of its refresh while chunks split and move."""
    cl = setup(t)
    r0, r1 = cl.client(0), cl.client(1)
    s0 = cl.shards[0].client()
    # shard1's chunks split: shard0 is not told, so its next refresh reads them in pages
    change_catalog(r1, nsplits=12, nmoves=0, owner="shard1")
    n = fp(s0, FP, {"times": 1})
    th, out = cmd_in_thread(cl.shards[0], {"_flushRoutingTableCacheUpdates": NS, "$db": "admin"})
    fp_wait(s0, FP, n + 1)
    # (changes of shard1's chunks only: a move would need shard0's refresh, held here)
    change_catalog(r1, nsplits=8, nmoves=0, owner="shard1")
    fp(s0, FP, "off")
    th.join(60)
    assert not th.is_alive() and out["reply"]["ok"] == 1, out
    count_all(r0)
    count_all(r1)
    assert "filtering metadata refreshed ns=app.h" in cl.shards[0].log_text()
    print("  shard0 refreshed across 8 splits between its pages; 300 documents found once")


if __name__ == "__main__":
    main()
