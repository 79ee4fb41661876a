#!/usr/bin/env python3
"""
long_million_chunks.py — make check-long: a collection of 1,000,000 chunks, read and shown
in bounded memory. The config server's catalog is written before it starts by
`build/rel/t/test_configsvr_pages --build` (the rows shardCollection would write for a
hashed key pre-split into a million chunks over two shards, through the catalog's own
cat_coll_create); then, through a router: config.chunks read whole in batches (find +
getMore, in key order, each chunk once), count and the chunks-per-shard aggregate,
shardctl status (20 chunks listed), mongosh's sh.status() ("too many chunks to print")
and a full read over the wire protocol, and the web view's /api/state. Prints each
step's time and the config server's resident memory before and after.
"""
import os
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from mongosh_lib import check, have_mongosh, mongosh  # noqa: E402

N = int(os.environ.get("MILLION_CHUNKS", "1000000"))
TOOL = os.path.join(ROOT, "build", "rel", "t", "test_configsvr_pages")


def rss_mb(proc):
    with open("/proc/%d/status" % proc.pid) as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) // 1024


def timed(what, fn):
    t0 = time.time()
    v = fn()
    print("  %-44s %8.2f s" % (what, time.time() - t0), flush=True)
    return v


def read_all(R, uuid):
    """find + getMore (16 MB batches) over every chunk, checking key order; returns the count."""
    r = R.ok({"find": "chunks", "$db": "config", "filter": {"uuid": uuid}, "sort": {"min": 1}})
    n, last, batches = 0, None, 0
    docs = r["cursor"]["firstBatch"]
    for _ in range(100000):
        for d in docs:
            assert last is None or d["min"] == last, "chunk %d out of order" % n
            last = d["max"]
            n += 1
        if num(r["cursor"]["id"]) == 0:
            break
        r = R.ok({"getMore": r["cursor"]["id"], "collection": "chunks", "$db": "config"})
        docs = r["cursor"]["nextBatch"]
        batches += 1
    assert last == {"h": {"$maxKey": 1}}, last
    print("  (%d getMore batches)" % batches)
    return n


@test
def test_million_chunks(t):
    ss = [t.shardd("shard%d" % i) for i in range(2)]
    cfgdir = os.path.join(t.dir, "config")
    os.makedirs(cfgdir, exist_ok=True)
    timed("catalog of %d chunks written" % N, lambda: subprocess.run(
        [TOOL, "--build", cfgdir, str(N), "app.big"] + [s.url for s in ss], check=True, timeout=600))
    http_port, wp = free_ports(2)
    cfg = t.configsvr(extra=["--http-port", str(http_port)])
    r = t.router(cfg.url, extra=["--wire-port", str(wp)])
    R = r.client(timeout_ms=120000)
    uuid = R.ok({"find": "collections", "$db": "config", "filter": {"_id": "app.big"}})["cursor"]["firstBatch"][0]["uuid"]
    before = rss_mb(cfg)
    assert timed("count {uuid} (index)", lambda: R.ok({"count": "chunks", "$db": "config",
                                                        "query": {"uuid": uuid}})["n"]) == N
    groups = timed("chunks per shard aggregate (index)", lambda: R.ok(
        {"aggregate": "chunks", "$db": "config", "cursor": {},
         "pipeline": [{"$match": {"uuid": uuid}}, {"$group": {"_id": "$shard", "n": {"$sum": 1}}}]}))
    assert sum(g["n"] for g in groups["cursor"]["firstBatch"]) == N, groups
    assert timed("config.chunks read whole in batches", lambda: read_all(R, uuid)) == N
    if have_mongosh():
        text, res = timed("mongosh sh.status() + full read", lambda: mongosh(
            t, "mongodb://127.0.0.1:%d/admin" % wp, ["status_million.js"]))
        st = text.split("---- sh.status ----", 1)[1].split("---- end ----", 1)[0]
        assert "too many chunks to print, use verbose if you want to force print" in st, st[-2000:]
        assert sum(int(x) for x in re.findall(r"nChunks: (\d+)", st)) == N, st[-2000:]
        check(res, "itcount", N, text)
        check(res, "countDocuments", N, text)
        print("  mongosh: sh.status() %s ms, full read over the wire %s ms" % (res["statusMS"], res["readMS"]))
    after = rss_mb(cfg)
    print("  config server resident memory: %d MB before the reads, %d MB after them" % (before, after))
    assert after - before < 256, (before, after)
    # shardctl status and the web view also ask the balancer (balancerCollectionStatus,
    # balancerExplain), whose cost at this size is the balancer's: timed, not bounded here.
    out = timed("shardctl status", lambda: subprocess.run(
        [SHARDCTL, "--host", r.url, "status"], capture_output=True, text=True, timeout=600))
    assert out.returncode == 0, out.stderr
    sect = out.stdout.split("app.big", 1)[1]
    assert ("chunks: %d total" % N) in sect and sect.count(" -->> ") == 20, sect[:600]
    assert "too many chunks to print" in sect, sect[-300:]

    def state():
        with urllib.request.urlopen("http://127.0.0.1:%d/api/state" % http_port, timeout=120) as f:
            return json.loads(f.read())
    s = timed("web view /api/state", state)
    assert num(s["collections"]["chunksTotal"]) == N and num(s["collections"]["chunksReturned"]) <= 2000, \
        {k: s["collections"].get(k) for k in ("chunksTotal", "chunksReturned")}
    print("  web view build: %s ms" % s.get("buildMS"))
    print("  config server resident memory after status and the web view: %d MB" % rss_mb(cfg))


if __name__ == "__main__":
    main()
