#!/usr/bin/env python3
"""
bench_scale.py — what each metadata operation costs as the chunk count of one collection
grows: the scale table of docs/performance.md, each row at 2,000, 100,000 and the largest
size reachable (1,000,000 when shardCollection accepts numInitialChunks 1,000,000 on
four shards), with its ratio to the 2,000-chunk case and its slope. Run by `make bench`
(tests/bench/run.py) or alone; per size it starts a config server, SHARDS shardd and two
routers on 127.0.0.1 with the integration-test toolkit, and stops exactly the processes
it started, by PID. All sizes' clusters run at once and every repetition visits each
size in turn, so that the machine's load drift hits every size alike.

Building the table: one call per size, shardCollection of an empty collection with a
hashed key {k: "hashed"} and numInitialChunks = size (chunks round-robin over the
shards). When the config server refuses that many chunks for the shards it has (its
per-shard cap: "numInitialChunks cannot be more than either: P * number of shards; or
T"), the bench adds shards until P × shards ≥ size, up to SCALE_SHARDS_MAX (default 16)
shards; a size still out of reach is dropped and the output says why. The largest size
is SCALE_MAX when set, else 1,000,000, lowered to what the caps allow.

Rows (each the median of its repetitions, 5 per repetition for split and merge, 30 for
the point find; times in ms):
  split            `split` with `middle` at a random hashed value, sent to the config
                   server (its commit alone; a router would only forward it);
  merge            `mergeChunks` of the two halves that split made (back to one chunk);
  commit step      a migration's config commit: the donor's "step 6 of 6" of the
                   changelog's moveChunk.from (moveChunk through router1, the chunk of a
                   random key, empty, to another shard);
  write pause      the donor's writePauseMS of the same migrations;
  incr refresh     router0 after a move that router1 ran: the first point find of the
                   moved key (StaleConfig from the old owner, an incremental refresh,
                   the retry) minus a warm point find; also the router's own figure
                   (its log line "routing table refreshed ... ms=");
  full refresh     flushRouterConfig on router0, then a point find, minus a warm one
                   (and the router's logged ms);
  balancer round   an idle round (the collection is balanced): executionTimeMillis of
                   the config.actionlog balancer.round that balancerStart runs;
  explain          balancerExplain of the collection (client-side, config server);
  point find       find {k: x} through router0 (one shard);
  scatter count    count {} through router0 (every shard);
  B/chunk config, router, shard   resident memory (VmRSS) above the process's idle
                   size, measured after the rows, divided by the chunk count (shard0's
                   routing table holds the whole collection, as MongoDB's does).
Slope, from the ratio r = figure(largest) ÷ figure(2,000) and the growth g = largest ÷
2,000: flat when r ≤ 1.5; log when r ≤ 1.5 × ln(largest) ÷ ln(2,000) (what a cost
proportional to log n gives, with the same 1.5 allowance for noise); linear otherwise.
The exponent e = ln r ÷ ln g is printed too (0 flat, 1 linear, above 1 worse). Memory
per chunk is a ratio too: flat there means memory proportional to the chunk count.
Env: SCALE_MAX=N (largest size; sizes above it are skipped), SCALE_REPS (default 7),
SCALE_SHARDS (default 4), SCALE_SHARDS_MAX (default 16).
Prints a table, then one line BENCH_JSON {"scale": {...}}. Asserts nothing on time.
"""
import json
import math
import os
import random
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from lib import Ctx, CommandError, long, num, wait_until  # noqa: E402
from hostile import RawReq  # noqa: E402

DB, COLL = "scale", "h"
NS = DB + "." + COLL
BASE = 2000
GOAL_SIZES = [BASE, 100000, 1000000]
SCALE_MAX = int(os.environ.get("SCALE_MAX", "1000000"))
REPS = int(os.environ.get("SCALE_REPS", "7"))
SHARDS = int(os.environ.get("SCALE_SHARDS", "4"))
SHARDS_MAX = int(os.environ.get("SCALE_SHARDS_MAX", "16"))
WARM_REPS = 30
SPLITS_PER_REP = 5
BIG_MS = 600000          # client timeout for building a large table
CFG_FLAGS = ["--balancer-throttle-ms", "0"]
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]
CAP_RE = re.compile(r"cannot be more than either: (\d+) \* number of shards; or (\d+)")
REFRESH_RE = re.compile(r"routing table refreshed ns=%s .*? chunks=(\d+) ms=(\d+)" % re.escape(NS))


def ms_since(t0):
    return (time.monotonic() - t0) * 1000.0


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def median(xs):
    """Median of the figures measured (NaN: a repetition that gave none, e.g. no log line)."""
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def changelog_last(c, what):
    docs = c.find_all("changelog", "config", {"what": what, "ns": NS})
    return docs[-1]["details"] if docs else {}


def rounds(c):
    return c.find_all("actionlog", "config", {"what": "balancer.round"})


def last_refresh_ms(proc, offset):
    """The router's own duration of its last refresh of NS logged after byte offset."""
    with open(proc.log_path, "rb") as f:
        f.seek(offset)
        hits = REFRESH_RE.findall(f.read().decode("utf-8", "replace"))
    return float(hits[-1][1]) if hits else float("nan")


def log_size(proc):
    return os.path.getsize(proc.log_path)


class Size:
    """One cluster holding NS pre-split into n chunks, and the samples of its rows."""

    def __init__(self, n):
        self.n = n
        self.ctx = Ctx("scale-%d" % n)
        self.rng = random.Random(n)
        self.out = {"chunks": n}
        self.samples = {}
        self.cap = None   # (per shard, in all) once the config server refused n
        self.raw = None

    def start(self):
        cl = self.ctx.cluster(shards=SHARDS, routers=2, shard_extra=SHARD_FLAGS, config_extra=CFG_FLAGS)
        self.cl = cl
        self.cfg = cl.config.client(timeout_ms=BIG_MS)
        self.r0 = cl.routers[0].client(timeout_ms=BIG_MS)
        self.r1 = cl.routers[1].client(timeout_ms=BIG_MS)
        self.raw = RawReq(cl.routers[0].url, timeout=BIG_MS / 1000)
        self.r0.ok({"listDatabases": 1, "$db": "admin"})
        self.idle = {"config": rss_kb(cl.config.pid), "router": rss_kb(cl.routers[0].pid),
                     "shard": rss_kb(cl.shards[0].pid)}

    def add_shard(self):
        i = len(self.cl.shards)
        s = self.ctx.shardd("shard%d" % i, extra=SHARD_FLAGS)
        self.cl.shards.append(s)
        self.cfg.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})

    def create(self):
        """shardCollection with numInitialChunks = n; more shards while the per-shard cap
        refuses. Returns None, or why the size is out of reach."""
        cmd = {"shardCollection": NS, "key": {"k": "hashed"}, "numInitialChunks": self.n, "$db": "admin"}
        while True:
            t0 = time.monotonic()
            # To the config server itself: a router gives up on it after its peer
            # timeout (20 s), and refreshing every shard at 100,000 chunks takes longer.
            r = self.cfg.cmd(cmd)
            if r.get("ok") == 1:
                self.out["create_s"] = round(ms_since(t0) / 1000, 2)
                self.out["shards"] = len(self.cl.shards)
                self.find_ms(0)   # router0 loads the table, outside the rows
                return None
            m = CAP_RE.search(r.get("errmsg", ""))
            if not m:
                raise CommandError(cmd, r)
            per, total = int(m.group(1)), int(m.group(2))
            self.cap = (per, total)
            need = -(-self.n // per)
            if self.n > total or need > SHARDS_MAX:
                return "numInitialChunks %d refused: at most %d per shard (%d shards needed, " \
                       "SCALE_SHARDS_MAX %d) or %d in all" % (self.n, per, need, SHARDS_MAX, total)
            while len(self.cl.shards) < need:
                self.add_shard()

    def add(self, key, v):
        self.samples.setdefault(key, []).append(v)

    def find_ms(self, key):
        t0 = time.monotonic()
        r = self.raw.call({"find": COLL, "$db": DB, "filter": {"k": key}})
        if r.get("ok") != 1:
            raise AssertionError("find k=%s: %s" % (key, r))
        return ms_since(t0)

    def warm_find(self):
        return median([self.find_ms(self.rng.randrange(1 << 30)) for _ in range(WARM_REPS)])

    def rep_point_and_scatter(self):
        self.add("point_find_ms", self.warm_find())
        t0 = time.monotonic()
        r = self.raw.call({"count": COLL, "$db": DB, "query": {}})
        if r.get("ok") != 1:
            raise AssertionError("count: %s" % r)
        self.add("scatter_count_ms", ms_since(t0))

    def rep_split_merge(self):
        """SPLITS_PER_REP splits, each merged back: these cost a few ms of fsync, where one
        sample a repetition would leave the median to the disk's stalls."""
        for _ in range(SPLITS_PER_REP):
            mid = {"k": long(self.rng.randrange(-(1 << 62), 1 << 62))}
            t0 = time.monotonic()
            self.cfg.ok({"split": NS, "middle": mid, "$db": "admin"})
            self.add("split_ms", ms_since(t0))
            before = changelog_last(self.cfg, "split")["before"]
            t0 = time.monotonic()
            self.cfg.ok({"mergeChunks": NS, "bounds": [before["min"], before["max"]], "$db": "admin"})
            self.add("merge_ms", ms_since(t0))

    def move_one(self, key):
        """moveChunk of key's chunk through router1 to the first shard that does not own
        it (a move to its owner succeeds without moving: no new moveChunk.from entry)."""
        seen = len(self.cfg.find_all("changelog", "config", {"what": "moveChunk.from", "ns": NS}))
        for s in self.cl.shards:
            self.r1.ok({"moveChunk": NS, "find": {"k": key}, "to": s.name, "$db": "admin"})
            docs = self.cfg.find_all("changelog", "config", {"what": "moveChunk.from", "ns": NS})
            if len(docs) > seen:
                return docs[-1]["details"]
        raise AssertionError("no shard took the chunk of k=%s" % key)

    def rep_move(self):
        router0 = self.cl.routers[0]
        key = self.rng.randrange(1 << 30)
        # Warm before the move: after it, any request to the donor (whose shard version
        # changed) is stale, so the first routed op after it must be ours.
        warm = self.warm_find()
        d = self.move_one(key)
        self.add("commit_step_ms", num(d.get("step 6 of 6", float("nan"))))
        self.add("write_pause_ms", num(d.get("writePauseMS", float("nan"))))
        off = log_size(router0)
        self.add("incr_refresh_ms", self.find_ms(key) - warm)
        self.add("incr_refresh_log_ms", last_refresh_ms(router0, off))

    def rep_full_refresh(self):
        router0 = self.cl.routers[0]
        warm = self.warm_find()
        self.r0.ok({"flushRouterConfig": 1, "$db": "admin"})
        off = log_size(router0)
        self.add("full_refresh_ms", self.find_ms(self.rng.randrange(1 << 30)) - warm)
        self.add("full_refresh_log_ms", last_refresh_ms(router0, off))

    def rep_balancer(self):
        before = len(rounds(self.cfg))
        self.cfg.ok({"balancerStart": 1, "$db": "admin"})
        wait_until(lambda: len(rounds(self.cfg)) > before, 300, "a balancer round")
        d = rounds(self.cfg)[-1]["details"]
        self.add("balancer_round_ms", num(d.get("executionTimeMillis", float("nan"))))
        self.out["balancer_round_why"] = d.get("why", "")
        self.cfg.ok({"balancerStop": 1, "$db": "admin"})
        t0 = time.monotonic()
        self.cfg.ok({"balancerExplain": NS, "$db": "admin"})
        self.add("explain_ms", ms_since(t0))

    def rep(self):
        """One repetition of every row."""
        self.rep_point_and_scatter()
        self.rep_split_merge()
        self.rep_move()
        self.rep_full_refresh()
        self.rep_balancer()

    def finish(self):
        """Medians of the samples, then the memory rows (after every row ran)."""
        for k, xs in self.samples.items():
            self.out[k] = median(xs)
        cl = self.cl
        now = {"config": rss_kb(cl.config.pid), "router": rss_kb(cl.routers[0].pid),
               "shard": rss_kb(cl.shards[0].pid)}
        for k in now:
            self.out["B_per_chunk_" + k] = (now[k] - self.idle[k]) * 1024.0 / self.n
            self.out["rss_mb_" + k] = round(now[k] / 1024.0, 1)

    def close(self):
        if self.raw:
            self.raw.sock.close()
            self.raw = None
        self.ctx.close()


ROWS = [("split", "split_ms"), ("merge", "merge_ms"), ("commit step", "commit_step_ms"),
        ("write pause", "write_pause_ms"), ("incr refresh", "incr_refresh_ms"),
        ("  (router's log)", "incr_refresh_log_ms"), ("full refresh", "full_refresh_ms"),
        ("  (router's log)", "full_refresh_log_ms"), ("balancer round", "balancer_round_ms"),
        ("explain", "explain_ms"), ("point find", "point_find_ms"),
        ("scatter count", "scatter_count_ms"), ("B/chunk config", "B_per_chunk_config"),
        ("B/chunk router", "B_per_chunk_router"), ("B/chunk shard", "B_per_chunk_shard")]


# Figures the daemons report in whole milliseconds: 0 means "under 1 ms", so they are
# compared from 1 ms up (a 0 → 1 ms change is no slope).
WHOLE_MS = {"commit_step_ms", "write_pause_ms", "incr_refresh_log_ms", "full_refresh_log_ms",
            "balancer_round_ms"}


def slope(base, top, n_top):
    """(class, ratio, exponent) of a figure from BASE chunks to n_top chunks."""
    if not (base > 0 and top == top and top >= 0) or n_top <= BASE:
        return "n/a", float("nan"), float("nan")
    r = max(top, 1e-9) / base
    e = math.log(max(r, 1e-9)) / math.log(n_top / BASE)
    if r <= 1.5:
        return "flat", r, e
    if r <= 1.5 * math.log(n_top) / math.log(BASE):
        return "log", r, e
    return "linear", r, e


def table(results):
    sizes = [res["chunks"] for res in results]
    top = results[-1]
    head = "%-18s" % "row" + "".join("%12s" % ("%d" % n) for n in sizes)
    head += "%10s%8s%8s" % ("ratio", "exp", "slope")
    print(head)
    slopes = {}
    for label, key in ROWS:
        vals = [res.get(key, float("nan")) for res in results]
        floor = 1.0 if key in WHOLE_MS else 0.0
        cls, r, e = slope(max(vals[0], floor), max(vals[-1], floor), top["chunks"])
        slopes[key] = {"ratio": round(r, 2) if r == r else None, "exponent": round(e, 2) if e == e else None,
                       "slope": cls}
        print("%-18s" % label + "".join("%12.2f" % v for v in vals) + "%10.2f%8.2f%8s" % (r, e, cls))
    return slopes


def marginal_bytes(results):
    """Bytes each extra chunk costs from the smallest to the largest size: the RSS
    difference over the chunk difference, without the fixed cost of a first table."""
    lo, hi = results[0], results[-1]
    if hi["chunks"] <= lo["chunks"]:
        return {}
    out = {k: round((hi["rss_mb_" + k] - lo["rss_mb_" + k]) * 1048576 / (hi["chunks"] - lo["chunks"]))
           for k in ("config", "router", "shard")}
    print("B/chunk from %d to %d chunks: config %d, router %d, shard %d" % (
        lo["chunks"], hi["chunks"], out["config"], out["router"], out["shard"]))
    return out


def no_nan(v):
    """v with every NaN (a figure not measured) as null: bench-results.json stays JSON."""
    if isinstance(v, dict):
        return {k: no_nan(x) for k, x in v.items()}
    if isinstance(v, list):
        return [no_nan(x) for x in v]
    if isinstance(v, float) and v != v:
        return None
    return v


def sizes_wanted():
    s = sorted({n for n in GOAL_SIZES if n <= SCALE_MAX} | {min(SCALE_MAX, GOAL_SIZES[-1])})
    return [n for n in s if n >= BASE]


def build(n, live, skipped):
    """Starts size n's cluster and builds its table; returns the Size (its cap tells
    what the config server allows), added to live when built."""
    print("size %d ..." % n, flush=True)
    sz = Size(n)
    try:
        sz.start()
        why = sz.create()
    except BaseException:
        sz.close()
        raise
    if why:
        print("  %d chunks: out of reach today: %s" % (n, why), flush=True)
        skipped[n] = why
        sz.close()
        return sz
    live.append(sz)
    print("  %d chunks on %d shards: built in %.2f s" % (n, sz.out["shards"], sz.out["create_s"]), flush=True)
    return sz


def build_all(skipped):
    """Every size's cluster, all running at once. When the largest size is refused, the
    largest the caps allow instead, stated as such."""
    live = []
    wanted = sizes_wanted()
    for n in wanted:
        sz = build(n, live, skipped)
        if n == wanted[-1] and n in skipped and sz.cap:
            reach = min(sz.cap[1], sz.cap[0] * SHARDS_MAX)
            if reach > max([BASE] + [x.n for x in live]):
                build(reach, live, skipped)
    return live


def main():
    t0 = time.monotonic()
    skipped = {}
    live = []
    try:
        live = build_all(skipped)
        # Repetitions interleaved over the sizes: the machine's load drifts over minutes
        # more than some rows change with size, and this way it hits every size alike.
        for i in range(REPS):
            t1 = time.monotonic()
            for sz in live:
                sz.rep()
            print("  repetition %d of %d: %.1f s" % (i + 1, REPS, time.monotonic() - t1), flush=True)
        for sz in live:
            sz.finish()
    finally:
        for sz in live:
            sz.close()
    results = [sz.out for sz in live]
    if not results or results[0]["chunks"] != BASE:
        print("the %d-chunk baseline did not run" % BASE)
        sys.exit(1)
    print("\nscale: one collection, hashed key pre-split; ms (median of %d), bytes per chunk; "
          "ratio and slope: largest size over %d chunks" % (REPS, BASE))
    slopes = table(results)
    marginal = marginal_bytes(results)
    total = time.monotonic() - t0
    print("total %.0f s" % total)
    for n, why in skipped.items():
        print("not measured: %d chunks: %s" % (n, why))
    out = {"sizes": results, "slopes": slopes, "marginal_B_per_chunk": marginal,
           "skipped": {str(k): v for k, v in skipped.items()}, "reps": REPS, "total_s": round(total, 1)}
    print("BENCH_JSON " + json.dumps({"scale": no_nan(out)}))


if __name__ == "__main__":
    main()
