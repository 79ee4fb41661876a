#!/usr/bin/env python3
"""
bench_targeting.py — what a router and a shard cost as the chunk count grows: requests
through the router, memory per chunk, the donor's write pause. Each size gets a fresh
cluster (config server, S shardd, 1 router on 127.0.0.1, started and stopped by PID with
the integration-test toolkit) and one collection {k: "hashed"} pre-split by
`shardCollection` with numInitialChunks = the size (chunks round-robin over the shards;
MongoDB caps numInitialChunks at 8,192 per shard, hence S = ceil(largest size / 8,192), at
least 3, the same S at every size so the scatter rows compare). Ratios are against the
2,000-chunk case of the same run.

Sizes: BENCH_TARGETING_SIZES (default "2000,100000"). A routing table larger than one
message (about 530,000 chunks) cannot be loaded today, so 1,000,000 is not in the default.

Rows, per size:
  1. point find {k: v} through the router (one chunk by binary search): median µs;
  2. scatter count {} through the router (every owning shard, from the per-shard chunk
     counts): median µs;
  3. multi-document update {q: {v: ...}, multi: true} through the router (not on the
     shard key: every owning shard): median µs;
  4. memory above idle, bytes per chunk: VmRSS (/proc/PID/status) of the config server,
     the router and shard0 just before shardCollection (idle: cluster up, database created)
     and after the table is loaded everywhere (shardCollection refreshes the shards; the
     router loads it on the first request; the config server's SQLite page cache counts);
  5. the donor's write pause (changelog moveChunk.from writePauseMS) and the donor's steps
     4-6 over MOVES moves of one small chunk back and forth: median ms.
Prints a table, then one line BENCH_JSON {"targeting": {...}}. Asserts nothing on time.
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from lib import Ctx, num  # noqa: E402

DB = "bench"
COLL = "t"
NS = DB + "." + COLL
SIZES = [int(x) for x in os.environ.get("BENCH_TARGETING_SIZES", "2000,100000").split(",")]
ITERS = int(os.environ.get("BENCH_TARGETING_ITERS", "300"))
MOVES = int(os.environ.get("BENCH_TARGETING_MOVES", "6"))
DOCS = 2000
PER_SHARD_MAX = 8192   # MongoDB's numInitialChunks cap per shard


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS for pid %d" % pid)


def median_us(client, cmd, iters, check=None):
    ts = []
    for i in range(iters):
        c = cmd(i)
        t0 = time.perf_counter()
        r = client.ok(c)
        ts.append((time.perf_counter() - t0) * 1e6)
        if check:
            check(r)
    return statistics.median(ts)


def changelog_last(c, what):
    r = c.ok({"find": "changelog", "$db": "config", "filter": {"what": what, "ns": NS},
              "sort": {"time": -1}, "limit": 1})
    docs = r["cursor"]["firstBatch"]
    return docs[0]["details"] if docs else {}


def moves(R, n):
    """n moves of the chunk holding k = 0 between two shards; the donor's pause and steps."""
    pauses, tails = [], []
    owner = None
    for sid in ("shard0", "shard1"):
        try:
            R.ok({"moveChunk": NS, "find": {"k": 0}, "to": sid, "$db": "admin"})
            owner = sid
            break
        except AssertionError:
            continue   # already there: the other one
    assert owner, "could not place the probe chunk"
    for _ in range(n):
        to = "shard1" if owner == "shard0" else "shard0"
        R.ok({"moveChunk": NS, "find": {"k": 0}, "to": to, "$db": "admin",
              "_waitForDelete": True})
        d = changelog_last(R, "moveChunk.from")
        pauses.append(num(d.get("writePauseMS", float("nan"))))
        tails.append([num(d.get("step %d of 6" % i, 0)) for i in (4, 5, 6)])
        owner = to
    return statistics.median(pauses), [statistics.median(s) for s in zip(*tails)]


def one_size(size, nshards):
    ctx = Ctx("bench_targeting_%d" % size)
    try:
        cl = ctx.cluster(shards=nshards, routers=1)
        R = cl.client()
        R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
        procs = {"config": cl.config, "router": cl.routers[0], "shard": cl.shards[0]}
        time.sleep(0.5)
        idle = {k: rss_kb(p.pid) for k, p in procs.items()}
        t0 = time.perf_counter()
        # straight to the config server: its refresh of many shards may outlast the
        # router's deadline for one config call
        cl.config.client(timeout_ms=600000).ok(
            {"shardCollection": NS, "key": {"k": "hashed"}, "numInitialChunks": size, "$db": "admin"})
        create_s = time.perf_counter() - t0
        for b in range(0, DOCS, 1000):
            R.ok({"insert": COLL, "$db": DB, "ordered": False,
                  "documents": [{"_id": i, "k": i, "v": i % 97} for i in range(b, b + 1000)]})
        loaded = {k: rss_kb(p.pid) for k, p in procs.items()}
        out = {"shards": nshards, "create_s": round(create_s, 3)}
        out["bytes_per_chunk"] = {k: round((loaded[k] - idle[k]) * 1024.0 / size, 1) for k in procs}
        out["rss_idle_kb"] = idle
        out["rss_loaded_kb"] = loaded

        def one(r):
            if len(r["cursor"]["firstBatch"]) != 1:
                raise RuntimeError("point find: expected one document, got %s" % r)

        def all_docs(r):
            if num(r["n"]) != DOCS:
                raise RuntimeError("scatter count: expected %d, got %s" % (DOCS, r))

        out["point_find_us"] = median_us(
            R, lambda i: {"find": COLL, "$db": DB, "filter": {"k": (i * 7919) % DOCS}}, ITERS, one)
        out["scatter_count_us"] = median_us(
            R, lambda i: {"count": COLL, "$db": DB, "query": {}}, ITERS, all_docs)
        out["multi_update_us"] = median_us(
            R, lambda i: {"update": COLL, "$db": DB, "updates": [
                {"q": {"v": i % 97}, "u": {"$inc": {"n": 1}}, "multi": True}]}, ITERS)
        pause, tail = moves(R, MOVES)
        out["write_pause_ms"] = pause
        out["donor_steps_4_6_ms"] = tail
        return out
    finally:
        ctx.close()


def slope(r):
    """flat when within 1.5x over a 50x growth; log while under 3x; else linear-ish."""
    return "flat" if r <= 1.5 else ("log" if r <= 3 else "grows")


def main():
    results = {}
    nshards = max(3, -(-max(SIZES) // PER_SHARD_MAX))   # the same at every size
    for size in SIZES:
        print("size %d ..." % size, flush=True)
        results[str(size)] = one_size(size, nshards)
    base = results[str(SIZES[0])]
    print("\n%-22s %s" % ("row", "".join("%16s" % ("%d chunks" % s) for s in SIZES)) + "   ratio (last/first)")
    rows = [("point find µs", "point_find_us"), ("scatter count µs", "scatter_count_us"),
            ("multi update µs", "multi_update_us"), ("write pause ms", "write_pause_ms")]
    ratios = {}
    for label, key in rows:
        vals = [results[str(s)][key] for s in SIZES]
        ratio = vals[-1] / base[key] if base[key] else float("nan")
        ratios[key] = round(ratio, 2)
        print("%-22s %s   %.2f %s" % (label, "".join("%16.1f" % v for v in vals), ratio, slope(ratio)))
    for who in ("config", "router", "shard"):
        vals = [results[str(s)]["bytes_per_chunk"][who] for s in SIZES]
        print("%-22s %s" % ("B/chunk " + who, "".join("%16.1f" % v for v in vals)))
    for s in SIZES:
        r = results[str(s)]
        print("  %d chunks: %d shards, shardCollection %.2f s, donor steps 4-6 %s ms" % (
            s, r["shards"], r["create_s"], r["donor_steps_4_6_ms"]))
    print("BENCH_JSON " + json.dumps({"targeting": {"sizes": results, "ratios": ratios}}))


if __name__ == "__main__":
    main()
