#!/usr/bin/env python3
"""
test_config_chunks_cursor.py — config.chunks read in batches (configsvr/cfg_query.c over
cat_config_page's keyset pages) through a router, over NNG and over the wire protocol:
find + getMore with small batches return every chunk once in key order; skip, limit,
projection and a sort of another order; count and sh.status()'s chunks-per-shard
aggregate answered from the indexes; killCursors; an idle cursor times out
(--cursor-timeout-ms); mongosh's sh.status() and shardctl status list 20 chunks then
"too many chunks to print" (--chunks N and --verbose for more).
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from mongosh_lib import check, have_mongosh, mongosh  # noqa: E402

N = 300
IDLE_MS = 1500


def cid(reply):
    return num(reply["cursor"]["id"])


def drain(c, r, coll, batch):
    """Every document of a cursor: getMore with batch until id 0; returns (docs, batch sizes)."""
    docs, sizes = list(r["cursor"]["firstBatch"]), []
    for _ in range(10000):   # bounded: every getMore returns a batch or ends the cursor
        if cid(r) == 0:
            return docs, sizes
        cmd = {"getMore": r["cursor"]["id"], "collection": coll, "$db": "config"}
        if batch:
            cmd["batchSize"] = batch
        r = c.ok(cmd)
        docs.extend(r["cursor"]["nextBatch"])
        sizes.append(len(r["cursor"]["nextBatch"]))
    raise AssertionError("cursor never ended")


def setup(t):
    cfg = t.configsvr(extra=["--cursor-timeout-ms", str(IDLE_MS)])
    ss = [t.shardd("shard%d" % i) for i in range(2)]
    wp = free_ports(1)[0]
    r = t.router(cfg.url, extra=["--wire-port", str(wp)])
    R = r.client()
    for i, s in enumerate(ss):
        R.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    R.ok({"enableSharding": "app", "primaryShard": "shard0", "$db": "admin"})
    R.ok({"shardCollection": "app.c", "key": {"h": "hashed"}, "numInitialChunks": N, "$db": "admin"})
    uuid = R.ok({"find": "collections", "$db": "config", "filter": {"_id": "app.c"}})["cursor"]["firstBatch"][0]["uuid"]
    return cfg, r, R, uuid, "mongodb://127.0.0.1:%d" % wp


@test
def test_chunks_in_batches(t):
    cfg, r, R, uuid, url = setup(t)
    C = cfg.client()
    for c in (R, C):   # through the router, and on the config server itself
        first = c.ok({"find": "chunks", "$db": "config", "filter": {"uuid": uuid}, "sort": {"min": 1},
                      "batchSize": 7})
        assert len(first["cursor"]["firstBatch"]) == 7 and cid(first) != 0, first
        docs, sizes = drain(c, first, "chunks", 13)
        assert len(docs) == N and len({d["_id"]["$oid"] for d in docs}) == N, len(docs)
        assert all(s <= 13 for s in sizes) and sum(sizes) == N - 7, sizes
        assert docs[0]["min"] == {"h": {"$minKey": 1}} and docs[-1]["max"] == {"h": {"$maxKey": 1}}
        assert all(docs[i]["max"] == docs[i + 1]["min"] for i in range(N - 1)), "not in key order"
    # no filter, no sort, an empty first batch, then getMores of 16 MB
    total = R.ok({"count": "chunks", "$db": "config"})["n"]
    r0 = R.ok({"find": "chunks", "$db": "config", "batchSize": 0})
    assert r0["cursor"]["firstBatch"] == [] and cid(r0) != 0, r0
    assert len(drain(R, r0, "chunks", 0)[0]) == total >= N
    # skip, limit, projection, and a sort the catalog's order does not give (held in memory)
    lim = R.ok({"find": "chunks", "$db": "config", "filter": {"uuid": uuid}, "limit": 25, "batchSize": 10})
    assert len(drain(R, lim, "chunks", 10)[0]) == 25
    sk = R.ok({"find": "chunks", "$db": "config", "filter": {"uuid": uuid}, "skip": N - 10,
               "projection": {"_id": 0, "min": 1}})
    assert len(sk["cursor"]["firstBatch"]) == 10 and cid(sk) == 0, sk
    assert set(sk["cursor"]["firstBatch"][0].keys()) == {"min"}, sk
    by_version = R.ok({"find": "chunks", "$db": "config", "filter": {"uuid": uuid}, "sort": {"lastmod": -1},
                       "batchSize": 50})
    vs = [(d["lastmod"]["$timestamp"]["t"], d["lastmod"]["$timestamp"]["i"])
          for d in drain(R, by_version, "chunks", 50)[0]]
    assert len(vs) == N and vs == sorted(vs, reverse=True), vs[:5]
    # count and the chunks-per-shard aggregate agree with the read
    on = {s: R.ok({"count": "chunks", "$db": "config", "query": {"uuid": uuid, "shard": s}})["n"]
          for s in ("shard0", "shard1")}
    assert R.ok({"count": "chunks", "$db": "config", "query": {"uuid": uuid}})["n"] == N
    assert sum(on.values()) == N and min(on.values()) > 0, on
    assert R.ok({"count": "chunks", "$db": "config", "query": {"uuid": uuid, "jumbo": True}})["n"] == 0
    assert R.ok({"count": "chunks", "$db": "config", "query": {"uuid": uuid}, "skip": 290, "limit": 4})["n"] == 4
    g = R.ok({"aggregate": "chunks", "$db": "config", "cursor": {},
              "pipeline": [{"$match": {"uuid": uuid}}, {"$group": {"_id": "$shard", "cnt": {"$sum": 1}}},
                           {"$project": {"_id": 0, "shard": "$_id", "nChunks": "$cnt"}},
                           {"$sort": {"shard": 1}}]})["cursor"]["firstBatch"]
    assert g == [{"shard": s, "nChunks": on[s]} for s in ("shard0", "shard1")], g
    # the same without the index shortcut ($sum of a field): the streamed aggregate agrees
    g2 = R.ok({"aggregate": "chunks", "$db": "config", "cursor": {},
               "pipeline": [{"$match": {"uuid": uuid}}, {"$group": {"_id": "$shard", "n": {"$sum": 1},
                                                                   "j": {"$sum": "$jumbo"}}},
                            {"$sort": {"_id": 1}}]})["cursor"]["firstBatch"]
    assert [(x["_id"], x["n"]) for x in g2] == sorted(on.items()), g2


@test
def test_kill_and_idle_timeout(t):
    cfg, r, R, uuid, url = setup(t)
    C = cfg.client()
    f = {"find": "chunks", "$db": "config", "filter": {"uuid": uuid}, "batchSize": 5}
    # killCursors through the router: the config server's cursor goes
    k = R.ok(f)
    kr = R.ok({"killCursors": "chunks", "$db": "config", "cursors": [k["cursor"]["id"]]})
    assert [num(x) for x in kr["cursorsKilled"]] == [cid(k)], kr
    R.err({"getMore": k["cursor"]["id"], "collection": "chunks", "$db": "config"}, 43)
    assert C.ok({"serverStatus": 1})["sharding"]["openCursors"] == 0
    # an idle cursor times out after --cursor-timeout-ms; a used one lives on
    idle, used = R.ok(f), C.ok(f)
    for _ in range(3):
        time.sleep(IDLE_MS / 2000.0)
        C.ok({"getMore": used["cursor"]["id"], "collection": "chunks", "$db": "config", "batchSize": 1})
    R.err({"getMore": idle["cursor"]["id"], "collection": "chunks", "$db": "config"}, 43)
    C.ok({"getMore": used["cursor"]["id"], "collection": "chunks", "$db": "config", "batchSize": 1})
    C.ok({"killCursors": "chunks", "$db": "config", "cursors": [used["cursor"]["id"]]})
    assert C.ok({"serverStatus": 1})["sharding"]["openCursors"] == 0


@test
def test_status_lists_twenty(t):
    cfg, r, R, uuid, url = setup(t)
    status = [SHARDCTL, "--host", r.url, "status"]
    for extra, listed in (([], 20), (["--chunks", "5"], 5), (["--verbose"], N)):
        out = subprocess.run(status + extra, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        sect = out.stdout.split("app.c", 1)[1]
        assert ("chunks: %d total" % N) in sect, sect[:400]
        counts = [int(x) for x in re.findall(r"^\s+shard\d\s+(\d+)$", sect, re.M)]
        assert sum(counts) == N and len(counts) == 2, sect[:400]
        assert sect.count(" -->> ") == listed, (extra, sect.count(" -->> "))
        assert ("too many chunks to print" in sect) == (listed < N), sect[-300:]
    assert cfg.client().ok({"serverStatus": 1})["sharding"]["openCursors"] == 0   # killed, not left
    if not have_mongosh():
        return
    text, res = mongosh(t, url + "/admin", ["status_many.js"])
    st = text.split("---- sh.status ----", 1)[1].split("---- end ----", 1)[0]
    assert "too many chunks to print, use verbose if you want to force print" in st, st[-2000:]
    n_chunks = [int(x) for x in re.findall(r"nChunks: (\d+)", st)]
    assert sum(n_chunks) >= N, st[-2000:]
    check(res, "chunkCount", N, text)


if __name__ == "__main__":
    main()
