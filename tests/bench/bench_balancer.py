#!/usr/bin/env python3
"""
bench_balancer.py — how long the balancer takes to fill a 4th shard added to a loaded
3-shard cluster, against the single-migration time measured in the
same run. Run by `make bench` (tests/bench/run.py) or alone; starts a config server
(--balancer-idle-ms 200 --balancer-throttle-ms 100), 4 shardd and 1 router on 127.0.0.1
with the integration-test toolkit and stops exactly the processes it started, by PID.

Setup (not timed): a ranged collection bench.b {_id: 1} pre-split into CHUNKS equal
chunks of CHUNK_DOCS documents of ~200 bytes (BENCH_BALANCER_CHUNKS, default 24;
BENCH_BALANCER_CHUNK_DOCS, default 40,000), the empty chunks spread round-robin over
shard0..2 with moveChunk, then loaded through the router. Chunks are pre-split (rather
than auto-split) so every chunk holds the same documents and every migration costs the
same; config.settings chunksize `valueBytes` (a test-only setting) is set just above a
chunk's size so the auto-split leaves them as they are.

  single migration: two manual moveChunk of one loaded chunk (shard0 → shard1 and
     shard1 → shard0, so the counts stay even), client-side seconds, and the mean
     durationMillis of the balancer's own migrations in this run (config.actionlog).
  balance: balancerStart, one idle round ("nothing to move"), then addShard shard3 at t0.
     Balanced = the first balancer.round with chunksMoved 0 after the rounds that moved
     chunks. elapsed = time of the last moving round's entry (logged when its migrations
     ended) − t0; detected = time of the empty round − t0.
  ratio = elapsed ÷ ((moves ÷ ⌊n/2⌋) × single), n = 4 shards (goal ≤ 1.2), where single
     is the mean durationMillis of the balancer's migrations. Also ratio_serial = elapsed ÷
     (moves × single): with one empty recipient and "a shard in at most one migration per
     round", every round moves one chunk, so (moves ÷ ⌊n/2⌋) × single is not reachable
     here; ratio_serial shows the balancer's own overhead (idle wait before the first
     round, throttle waits, rounds' bookkeeping).
The whole measurement runs twice, each on a fresh cluster: with the auto-split on (the
default, what a user gets) and off ({_id: "autosplit", enabled: false}), because every
round asks each chunk's owner for autoSplitVector and those requests are most of a
round's own work here; the top-level figures are the first run's.
Prints a table, then one line BENCH_JSON {"balancer": {...}}. Asserts nothing on time.
"""
import datetime
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from lib import Ctx, SHARDCTL, num, wait_until  # noqa: E402

DB = "bench"
COLL = "b"
NS = DB + "." + COLL
CHUNKS = int(os.environ.get("BENCH_BALANCER_CHUNKS", "24"))
CHUNK_DOCS = int(os.environ.get("BENCH_BALANCER_CHUNK_DOCS", "40000"))
DOC_BYTES = 200
IDLE_MS, THROTTLE_MS = 200, 100
CFG_FLAGS = ["--balancer-idle-ms", str(IDLE_MS), "--balancer-throttle-ms", str(THROTTLE_MS)]
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]
BALANCE_TIMEOUT_S = 300


def when_s(v):
    """config.actionlog `time` (a BSON date, as the JSON client gives it) → epoch seconds."""
    if isinstance(v, dict):
        v = v.get("$date", v)
        if isinstance(v, dict):
            v = v.get("$numberLong", 0)
    if isinstance(v, str) and not v.lstrip("-").isdigit():
        return datetime.datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
    return int(v) / 1000.0


def rounds_since(c, t0):
    docs = c.ok({"find": "actionlog", "$db": "config", "filter": {"what": "balancer.round"},
                 "batchSize": 10000})["cursor"]["firstBatch"]
    return [d for d in docs if when_s(d["time"]) >= t0]


def counts(c):
    n = {}
    for ch in c.ok({"getRoutingTable": NS, "$db": "admin"})["chunks"]:
        n[ch["shard"]] = n.get(ch["shard"], 0) + 1
    return n


def chunk_min(k):
    return {"_id": {"$minKey": 1}} if k == 0 else {"_id": k * CHUNK_DOCS}


def run(autosplit):
    """One whole cluster: set up, measure, stop. Returns the figures."""
    total = CHUNKS * CHUNK_DOCS
    out = {"autosplit": autosplit}
    print("\n-- autosplit %s --" % ("on (the default)" if autosplit else "off"), flush=True)
    t = Ctx("bench-balancer")
    try:
        cfg = t.configsvr(extra=CFG_FLAGS)
        ss = [t.shardd("shard%d" % i, extra=SHARD_FLAGS) for i in range(4)]
        rt = t.router(cfg.url)
        c = rt.client(timeout_ms=600000)
        c.ok({"balancerStop": 1, "$db": "admin"})
        for i in range(3):
            c.ok({"addShard": ss[i].url, "name": "shard%d" % i, "$db": "admin"})
        chunk_bytes = CHUNK_DOCS * DOC_BYTES
        c.ok({"update": "settings", "$db": "config",
              "updates": [{"q": {"_id": "chunksize"}, "u": {"$set": {"valueBytes": int(chunk_bytes * 1.5)}},
                           "upsert": True}]})
        c.ok({"update": "settings", "$db": "config",
              "updates": [{"q": {"_id": "autosplit"}, "u": {"$set": {"enabled": autosplit}}, "upsert": True}]})
        c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
        c.ok({"shardCollection": NS, "key": {"_id": 1}, "$db": "admin"})
        t0 = time.monotonic()
        for k in range(1, CHUNKS):
            c.ok({"split": NS, "middle": {"_id": k * CHUNK_DOCS}, "$db": "admin"})
        for k in range(CHUNKS):
            if k % 3:
                c.ok({"moveChunk": NS, "find": {"_id": k * CHUNK_DOCS}, "to": "shard%d" % (k % 3),
                      "$db": "admin"})
        t1 = time.monotonic()
        p = subprocess.run([SHARDCTL, "--host", rt.url, "--timeout", "120000", "load", "--ns", NS,
                            "--count", str(total), "--batch", "1000", "--size", str(DOC_BYTES), "--quiet"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
        if p.returncode:
            raise RuntimeError("shardctl load failed: %s %s" % (p.stdout, p.stderr))
        print("setup: %d chunks spread in %.1f s, %d docs loaded in %.1f s; counts %s" % (
            CHUNKS, t1 - t0, total, time.monotonic() - t1, counts(c)), flush=True)

        # ---- the single migration, by hand -----------------------------------------------
        manual = []
        for k, to in ((3, "shard1"), (1, "shard0")):   # chunk 3 is on shard0, chunk 1 on shard1
            a = time.monotonic()
            c.ok({"moveChunk": NS, "find": {"_id": k * CHUNK_DOCS}, "to": to, "$db": "admin"})
            manual.append(time.monotonic() - a)
        out["manual_move_s"] = [round(x, 3) for x in manual]

        # ---- the balancer fills shard3 --------------------------------------------------
        tstart = time.time()
        c.ok({"balancerStart": 1, "$db": "admin"})
        wait_until(lambda: rounds_since(c, tstart), 20, "a first round after balancerStart", interval=0.05)
        before = counts(c)
        time.sleep(0.05)
        t_add = time.time()
        c.ok({"addShard": ss[3].url, "name": "shard3", "$db": "admin"})

        def done():
            rs = rounds_since(c, t_add)
            moved = [i for i, r in enumerate(rs) if r["details"].get("chunksMoved", 0) > 0]
            return moved and any(r["details"].get("chunksMoved", 0) == 0 and
                                 r["details"].get("candidateChunks", 0) == 0 for r in rs[moved[-1] + 1:])
        wait_until(done, BALANCE_TIMEOUT_S, "balanced with 4 shards", interval=0.1)
        t_seen = time.time()
        rs = rounds_since(c, t_add)
        after = counts(c)
    finally:
        t.close()

    moving = [r for r in rs if r["details"].get("chunksMoved", 0) > 0]
    last_moving = max(i for i, r in enumerate(rs) if r["details"].get("chunksMoved", 0) > 0)
    empty = next(r for r in rs[last_moving + 1:] if r["details"].get("chunksMoved", 0) == 0)
    migs = [m for r in moving for m in r["details"].get("migrations", []) if m.get("ok")]
    failed = [m for r in rs for m in r["details"].get("migrations", []) if not m.get("ok")]
    durs = [num(m["durationMillis"]) / 1000.0 for m in migs]
    moves = len(migs)
    single = sum(durs) / len(durs)
    elapsed = when_s(rs[last_moving]["time"]) - t_add
    detected = when_s(empty["time"]) - t_add
    par = 4 // 2
    exec_s = [num(r["details"].get("executionTimeMillis", 0)) / 1000.0 for r in moving]
    longest = [max(num(m["durationMillis"]) for m in r["details"]["migrations"]) / 1000.0 for r in moving]
    # a batch waits until the throttle has passed since the previous batch ended; the
    # round logs how long (throttleWaitMillis, part of executionTimeMillis)
    waits = [num(r["details"].get("throttleWaitMillis", 0)) / 1000.0 for r in moving]
    first_round_wait = when_s(moving[0]["time"]) - exec_s[0] - t_add
    out.update({
        "counts_before": before, "counts_after": after, "moves": moves, "failed_moves": len(failed),
        "rounds_with_moves": len(moving), "rounds_total": len(rs),
        "max_parallel_in_a_round": max(len(r["details"].get("migrations", [])) for r in moving),
        "single_migration_s": round(single, 3),
        "single_migration_manual_s": round(sum(manual) / len(manual), 3),
        "elapsed_s": round(elapsed, 3), "detected_balanced_s": round(detected, 3),
        "ideal_s": round(moves / par * single, 3),
        "ratio": round(elapsed / (moves / par * single), 3),
        "ratio_serial": round(elapsed / (moves * single), 3),
        "wait_before_first_round_s": round(first_round_wait, 3),
        "throttle_waits_s": round(sum(waits), 3),
        "round_bookkeeping_s": round(sum(e - m - w for e, m, w in zip(exec_s, longest, waits)), 3),
    })
    print("balancing after adding shard3 (n = 4, at most %d migrations in parallel)" % par)
    print("  chunks per shard before %s, after %s" % (
        json.dumps(before, sort_keys=True), json.dumps(after, sort_keys=True)))
    print("  %-44s %8s" % ("", "s"))
    print("  %-44s %8.2f" % ("single migration (mean durationMillis, %d)" % moves, single))
    print("  %-44s %8.2f" % ("single migration (manual moveChunk, mean of 2)", out["single_migration_manual_s"]))
    print("  %-44s %8.2f" % ("elapsed: addShard → last moving round ended", elapsed))
    print("  %-44s %8.2f" % ("detected: → first round with nothing to move", detected))
    print("  %-44s %8.2f" % ("ideal (moves ÷ ⌊n/2⌋) × single", out["ideal_s"]))
    print("  moves %d in %d rounds (most in one round: %d), failed %d" % (
        moves, len(moving), out["max_parallel_in_a_round"], len(failed)))
    print("  ratio elapsed ÷ ideal: %.2f (goal <= 1.2)" % out["ratio"])
    print("  ratio elapsed ÷ (moves × single): %.2f (one recipient: one move per round)" % out["ratio_serial"])
    print("  overhead: wait before the first round %.2f s (idle %d ms), throttle waits %.2f s (throttle %d ms "
          "after each batch), round bookkeeping %.2f s" % (first_round_wait, IDLE_MS, out["throttle_waits_s"],
                                                          THROTTLE_MS, out["round_bookkeeping_s"]))
    return out


def main():
    started = time.monotonic()
    out = {"chunks": CHUNKS, "chunk_docs": CHUNK_DOCS, "doc_bytes": DOC_BYTES, "shards_before": 3,
           "shards_after": 4, "balancer_idle_ms": IDLE_MS, "balancer_throttle_ms": THROTTLE_MS}
    print("%d chunks of %d docs (~%d B) on 3 shards, then a 4th shard; balancer idle %d ms, throttle %d ms"
          % (CHUNKS, CHUNK_DOCS, DOC_BYTES, IDLE_MS, THROTTLE_MS), flush=True)
    out["autosplit_on"] = run(True)
    out["autosplit_off"] = run(False)
    for k in ("ratio", "ratio_serial", "elapsed_s", "moves", "single_migration_s"):
        out[k] = out["autosplit_on"][k]
    out["bench_s"] = round(time.monotonic() - started, 1)
    print("\nratio (autosplit on, as shipped) %.2f, serial %.2f; autosplit off %.2f, serial %.2f" % (
        out["autosplit_on"]["ratio"], out["autosplit_on"]["ratio_serial"],
        out["autosplit_off"]["ratio"], out["autosplit_off"]["ratio_serial"]))
    print("bench_balancer total %.0f s" % out["bench_s"])
    print("BENCH_JSON " + json.dumps({"balancer": out}))


if __name__ == "__main__":
    main()
