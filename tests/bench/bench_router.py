#!/usr/bin/env python3
"""
bench_router.py — what the router (bin/router) costs, measured against its own
baselines in the same run (DESIGN §12 target: the router adds at most one bare NNG
round trip to a targeted operation; bulk inserts through it keep up with one shard).
Run by `make bench` (tests/bench/run.py) or alone; starts a 3-shard cluster on
127.0.0.1 (config server, 3 shardd, 1 router) with the integration-test toolkit and
stops exactly what it started.

  1. point find by shard key through the router vs the same find sent straight to the
     owning shard (unversioned), interleaved in one loop, alternating which goes first;
     medians → ratio and extra µs. The "bare" figure the extra is compared with is one
     NNG REQ/REP round trip: the bare-nng p50 of build/rel/b/bench_common_rpc when that
     binary is present (C client, no pipe), and always also a `ping` to the shard through
     the same shardctl pipe as the finds (so it carries the same client overhead).
     Every figure here is taken through a `shardctl --host URL -` pipe driven from
     python: the pipe and python add the same fixed cost to both sides of each
     comparison, so differences (extra µs) are meaningful, absolute values are not
     what a C client would see.
  2. targeted (find {k: v}, one shard) vs scatter/gather (find {_id: v}: _id is not the
     shard key, so all 3 shards are asked) through the router, interleaved.
  3. bulk insert of N documents (default 1,000,000; BENCH_ROUTER_DOCS overrides) with
     `bin/shardctl load` (unordered batches of 1,000, ~200-byte docs) through the router
     into a collection hashed over 3 shards vs the same load straight to one shard into
     a collection with the same {k: "hashed"} index (the shard-key index), so both sides
     maintain the same indexes.
  4. one insert command of N ops (default 100,000; BENCH_ROUTER_BATCH_OPS overrides)
     through the router into a collection hashed on _id over 3 shards, ordered vs
     unordered (each into its own empty collection). Consecutive ops interleave the
     shards, so an ordered batch goes as one shard request per run of same-shard ops
     (about 2/3 N requests, one after another: later ops must not run before an earlier
     one succeeded), the unordered one as 3 parallel requests; the ratio shows what that
     costs. Each op is targeted once either way (before, the ordered loop
     re-targeted every pending op each round, quadratic: 8,000 ops took ~8 s). The same
     batch again into a collection ranged on _id and split in three chunks, where ops come
     in long same-chunk runs and an ordered batch is a few large requests.
Prints a table, then one line BENCH_JSON {"router": {...}}. Asserts nothing on time.
"""
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from lib import Ctx, SHARDCTL  # noqa: E402

DB = "bench"
PROBE_DOCS = 10000
ITERS = int(os.environ.get("BENCH_ROUTER_ITERS", "3000"))
BULK_DOCS = int(os.environ.get("BENCH_ROUTER_DOCS", "1000000"))
BATCH_OPS = int(os.environ.get("BENCH_ROUTER_BATCH_OPS", "100000"))


def timed(client, cmd):
    t0 = time.perf_counter()
    r = client.cmd(cmd)
    dt = (time.perf_counter() - t0) * 1e6
    if r.get("ok") != 1:
        raise RuntimeError("bench command failed: %s -> %s" % (cmd, r))
    return dt, r


def interleave(a_client, a_cmd, b_client, b_cmd, iters, rng, check=None):
    """Times a and b alternately (who goes first alternates); returns the two lists."""
    ta, tb = [], []
    for i in range(iters):
        ca, cb = a_cmd(i), b_cmd(i)
        order = ((a_client, ca, ta, "a"), (b_client, cb, tb, "b"))
        if i % 2:
            order = order[::-1]
        for client, cmd, out, side in order:
            dt, r = timed(client, cmd)
            if check:
                check(side, i, r)
            out.append(dt)
    return ta, tb


def bare_rpc_us():
    path = os.path.join(ROOT, os.environ.get("BUILD", "build/rel"), "b", "bench_common_rpc")
    if not os.path.exists(path):
        return None
    out = subprocess.run([path], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, timeout=300).stdout
    for line in out.splitlines():
        if line.startswith("BENCH_JSON "):
            return json.loads(line[len("BENCH_JSON "):])["rpc"]["bare_us_p50"]
    return None


def load(url, ns, count, key):
    argv = [SHARDCTL, "--host", url, "--timeout", "120000", "load", "--ns", ns, "--count", str(count),
            "--batch", "1000", "--quiet"]
    if key:
        argv += ["--key", key]
    t0 = time.perf_counter()
    p = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=1200)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError("shardctl load failed: %s %s" % (p.stdout, p.stderr))
    return count / dt, dt


def main():
    rng = random.Random(42)
    ctx = Ctx("bench_router")
    ok = False
    try:
        cl = ctx.cluster(shards=3, routers=1)
        R = cl.client()
        S = [s.client() for s in cl.shards]
        R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
        R.ok({"shardCollection": DB + ".pt", "key": {"k": "hashed"}, "$db": "admin"})
        for b in range(0, PROBE_DOCS, 1000):
            R.ok({"insert": "pt", "$db": DB, "ordered": False,
                  "documents": [{"_id": i, "k": i, "v": i % 97} for i in range(b, b + 1000)]})
        keys = rng.sample(range(PROBE_DOCS), 300)
        owner = {}
        for si, c in enumerate(S):
            got = c.ok({"find": "pt", "$db": DB, "filter": {"k": {"$in": keys}}, "batchSize": 1000})
            for d in got["cursor"]["firstBatch"]:
                owner[d["k"]] = si
        assert len(owner) == len(keys), "probe keys not found on the shards"
        # warm-up: routing table cached, connections open
        for k in keys[:50]:
            R.ok({"find": "pt", "$db": DB, "filter": {"k": k}})
            S[owner[k]].ok({"find": "pt", "$db": DB, "filter": {"k": k}})

        def one_doc(side, i, r):
            if len(r["cursor"]["firstBatch"]) != 1:
                raise RuntimeError("expected one document, got %s" % r)

        # 1. point find: router vs owning shard, and ping baselines through the same pipe
        seq = [keys[rng.randrange(len(keys))] for _ in range(ITERS)]
        t_rt = []
        t_sh = []
        for i, k in enumerate(seq):
            cmd = {"find": "pt", "$db": DB, "filter": {"k": k}}
            pair = [(R, t_rt), (S[owner[k]], t_sh)]
            if i % 2:
                pair.reverse()
            for c, out in pair:
                dt, r = timed(c, cmd)
                one_doc(None, i, r)
                out.append(dt)
        ping_sh, ping_rt = interleave(S[0], lambda i: {"ping": 1}, R, lambda i: {"ping": 1},
                                      ITERS, rng)
        # 2. targeted vs scatter/gather through the router
        t_tg, t_sc = interleave(
            R, lambda i: {"find": "pt", "$db": DB, "filter": {"k": seq[i]}},
            R, lambda i: {"find": "pt", "$db": DB, "filter": {"_id": seq[i]}},
            ITERS, rng, one_doc)
        bare = bare_rpc_us()
        # 3. bulk insert: through the router into 3 shards vs straight to one shard
        R.ok({"shardCollection": DB + ".bulk", "key": {"k": "hashed"}, "$db": "admin"})
        # like for like: the direct collection gets the shard-key index the sharded one has
        S[1].ok({"createIndexes": "direct", "$db": DB,
                 "indexes": [{"key": {"k": "hashed"}, "name": "k_hashed"}]})
        rt_rate, rt_s = load(cl.routers[0].url, DB + ".bulk", BULK_DOCS, "k")
        sh_rate, sh_s = load(cl.shards[1].url, DB + ".direct", BULK_DOCS, "k")
        n_rt = R.ok({"count": "bulk", "$db": DB})["n"]
        n_sh = S[1].ok({"count": "direct", "$db": DB})["n"]
        if n_rt != BULK_DOCS or n_sh != BULK_DOCS:
            raise RuntimeError("bulk counts %d / %d, expected %d" % (n_rt, n_sh, BULK_DOCS))
        per_shard = [c.ok({"count": "bulk", "$db": DB})["n"] for c in S]
        # 4. one big insert batch, ordered vs unordered (a long client timeout: no timing
        # assertion, only what it takes)
        RB = cl.routers[0].client(timeout_ms=1800000)
        batch_s = {}
        docs = [{"_id": i, "v": i} for i in range(BATCH_OPS)]
        for name in ("unordered", "ordered"):
            coll = "batch_" + name
            R.ok({"shardCollection": DB + "." + coll, "key": {"_id": "hashed"}, "$db": "admin"})
            R.ok({"insert": coll, "$db": DB, "documents": [{"_id": -1}]})   # table cached
            t0 = time.perf_counter()
            r = RB.ok({"insert": coll, "$db": DB, "documents": docs, "ordered": name == "ordered"})
            batch_s[name] = time.perf_counter() - t0
            if r["n"] != BATCH_OPS or "writeErrors" in r:
                raise RuntimeError("%s batch: %s" % (name, {k: r[k] for k in r if k != "writeErrors"}))
        # the same batch into a collection ranged on _id with chunks split into three: the
        # ops come in long runs of the same chunk, so an ordered batch goes as a few large
        # requests (the goal of ordered <= 1.5x unordered holds when the key has such runs)
        for name in ("unordered", "ordered"):
            coll = "rbatch_" + name
            R.ok({"shardCollection": DB + "." + coll, "key": {"_id": 1}, "$db": "admin"})
            for mid in (BATCH_OPS // 3, 2 * BATCH_OPS // 3):
                R.ok({"split": DB + "." + coll, "middle": {"_id": mid}, "$db": "admin"})
            R.ok({"insert": coll, "$db": DB, "documents": [{"_id": -1}]})   # table cached
            t0 = time.perf_counter()
            r = RB.ok({"insert": coll, "$db": DB, "documents": docs, "ordered": name == "ordered"})
            batch_s["r" + name] = time.perf_counter() - t0
            if r["n"] != BATCH_OPS or "writeErrors" in r:
                raise RuntimeError("ranged %s batch: %s" % (name, {k: r[k] for k in r if k != "writeErrors"}))
        RB.close()

        med = statistics.median
        f = {
            "iters": ITERS,
            "point_router_us_p50": round(med(t_rt), 1),
            "point_shard_us_p50": round(med(t_sh), 1),
            "point_ratio": round(med(t_rt) / med(t_sh), 3),
            "point_extra_us": round(med(t_rt) - med(t_sh), 1),
            "ping_shard_pipe_us_p50": round(med(ping_sh), 1),
            "ping_router_pipe_us_p50": round(med(ping_rt), 1),
            "bare_nng_us_p50": bare,
            "targeted_us_p50": round(med(t_tg), 1),
            "scatter3_us_p50": round(med(t_sc), 1),
            "scatter_ratio": round(med(t_sc) / med(t_tg), 3),
            "bulk_docs": BULK_DOCS,
            "bulk_router_docs_s": round(rt_rate),
            "bulk_shard_docs_s": round(sh_rate),
            "bulk_ratio": round(rt_rate / sh_rate, 3),
            "bulk_per_shard": per_shard,
            "batch_ops": BATCH_OPS,
            "batch_unordered_s": round(batch_s["unordered"], 3),
            "batch_ordered_s": round(batch_s["ordered"], 3),
            "batch_ordered_ratio": round(batch_s["ordered"] / batch_s["unordered"], 2),
            "ranged_batch_unordered_s": round(batch_s["runordered"], 3),
            "ranged_batch_ordered_s": round(batch_s["rordered"], 3),
            "ranged_batch_ordered_ratio": round(batch_s["rordered"] / batch_s["runordered"], 2),
        }
        base = bare if bare else f["ping_shard_pipe_us_p50"]
        f["extra_over_bare_rtt"] = round(f["point_extra_us"] / base, 3)
        print("router bench, 3 shards on 127.0.0.1, %d interleaved iterations (python + shardctl pipe)"
              % ITERS)
        print("%-44s %12s" % ("figure", "value"))
        rows = [
            ("point find via router, p50 us", f["point_router_us_p50"]),
            ("point find straight to owner shard, p50 us", f["point_shard_us_p50"]),
            ("  router/shard ratio", f["point_ratio"]),
            ("  extra us added by the router", f["point_extra_us"]),
            ("bare NNG round trip (bench_common_rpc), us", bare if bare is not None else "n/a"),
            ("ping to shard through the pipe, p50 us", f["ping_shard_pipe_us_p50"]),
            ("ping to router through the pipe, p50 us", f["ping_router_pipe_us_p50"]),
            ("  extra / bare round trip", f["extra_over_bare_rtt"]),
            ("targeted find via router, p50 us", f["targeted_us_p50"]),
            ("scatter/gather find (3 shards), p50 us", f["scatter3_us_p50"]),
            ("  scatter/targeted ratio", f["scatter_ratio"]),
            ("bulk insert via router into 3 shards, docs/s", f["bulk_router_docs_s"]),
            ("bulk insert straight to one shard, docs/s", f["bulk_shard_docs_s"]),
            ("  router/shard ratio", f["bulk_ratio"]),
            ("  docs per shard (router load)", per_shard),
            ("insert batch of %d ops, unordered, s" % BATCH_OPS, f["batch_unordered_s"]),
            ("insert batch of %d ops, ordered, s" % BATCH_OPS, f["batch_ordered_s"]),
            ("  ordered/unordered ratio", f["batch_ordered_ratio"]),
            ("same, ranged _id in 3 chunks, unordered, s", f["ranged_batch_unordered_s"]),
            ("same, ranged _id in 3 chunks, ordered, s", f["ranged_batch_ordered_s"]),
            ("  ordered/unordered ratio (ranged)", f["ranged_batch_ordered_ratio"]),
        ]
        for name, v in rows:
            print("%-44s %12s" % (name, v))
        print("BENCH_JSON " + json.dumps({"router": f}, separators=(",", ":")))
        ok = True
    finally:
        ctx.close(keep=not ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
