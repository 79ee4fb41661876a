"""
bench_shardd_indexbuild.py — does an index build stall the shard? Point finds (by _id) on
one collection, p50/p99, while idle and while createIndexes builds an index over 300 k
documents of another collection; the same for single-document inserts into the other
collection. Before index builds ran in batches, the build held the catalog lock
exclusively throughout and a point find waited for the whole build (~2 s at 320 k); the
goal is a during/idle p99 ratio of a few (the two cores are shared with the build), with
the build itself not much slower than alone.
"""
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
from lib import Ctx  # noqa: E402
from hostile import RawReq  # noqa: E402

DOCS = 300000
OTHER = 10000


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def probe_finds(c, stop, lat, min_n=0):
    """Point finds by _id on `o` until stop() (and at least min_n); latencies in ms."""
    rnd = random.Random(7)
    while not stop() or len(lat) < min_n:
        t0 = time.monotonic()
        r = c.call({"find": "o", "$db": "b", "filter": {"_id": rnd.randrange(OTHER)}})
        lat.append((time.monotonic() - t0) * 1000)
        assert r.get("ok") == 1 and len(r["cursor"]["firstBatch"]) == 1, r


def probe_inserts(c, tag, stop, lat, min_n=0):
    """One-document inserts into `o` until stop() (and at least min_n); latencies in ms."""
    while not stop() or len(lat) < min_n:
        t0 = time.monotonic()
        r = c.call({"insert": "o", "$db": "b", "documents": [{"_id": "%s-%d" % (tag, len(lat))}]})
        lat.append((time.monotonic() - t0) * 1000)
        assert r.get("n") == 1, r


def build(c, name, out):
    t0 = time.monotonic()
    r = c.call({"createIndexes": "big", "$db": "b", "indexes": [{"key": {"k": 1}, "name": name}]})
    out["s"] = time.monotonic() - t0
    out["r"] = r


def main():
    t = Ctx("bench-indexbuild")
    try:
        s = t.shardd("s0")
        c = RawReq(s.url, timeout=600)
        q = RawReq(s.url, timeout=600)
        for lo in range(0, DOCS, 10000):
            docs = [{"_id": i, "k": (i * 7919) % 100000, "pad": "x" * 40} for i in range(lo, lo + 10000)]
            assert c.call({"insert": "big", "$db": "b", "documents": docs}).get("n") == 10000
        for lo in range(0, OTHER, 10000):
            docs = [{"_id": i, "v": i} for i in range(lo, lo + 10000)]
            assert c.call({"insert": "o", "$db": "b", "documents": docs}).get("n") == 10000
        # the build alone
        alone = {}
        build(c, "k_alone", alone)
        assert alone["r"].get("ok") == 1, alone["r"]
        c.call({"dropIndexes": "big", "$db": "b", "index": "k_alone"})
        # idle
        idle_f, idle_i = [], []
        probe_finds(q, lambda: True, idle_f, min_n=2000)
        probe_inserts(q, "idle", lambda: True, idle_i, min_n=500)
        # during a build: finds here, inserts on a thread and connection of their own
        during = {}
        th = threading.Thread(target=build, args=(c, "k_1", during))
        qi = RawReq(s.url, timeout=600)
        dur_f, dur_i = [], []
        ti = threading.Thread(target=probe_inserts, args=(qi, "during", lambda: not th.is_alive(), dur_i))
        th.start()
        ti.start()
        probe_finds(q, lambda: not th.is_alive(), dur_f)
        th.join()
        ti.join()
        assert during["r"].get("ok") == 1, during["r"]
        out = {
            "build_300k_alone_s": round(alone["s"], 3),
            "build_300k_with_probes_s": round(during["s"], 3),
            "find_p50_idle_ms": round(pct(idle_f, 0.5), 3),
            "find_p99_idle_ms": round(pct(idle_f, 0.99), 3),
            "find_p50_during_build_ms": round(pct(dur_f, 0.5), 3),
            "find_p99_during_build_ms": round(pct(dur_f, 0.99), 3),
            "find_max_during_build_ms": round(max(dur_f), 3),
            "insert_p99_idle_ms": round(pct(idle_i, 0.99), 3),
            "insert_p99_during_build_ms": round(pct(dur_i, 0.99), 3),
            "insert_max_during_build_ms": round(max(dur_i), 3),
            "probes_during_build": len(dur_f),
        }
        out["find_p99_during_over_idle"] = round(out["find_p99_during_build_ms"] / out["find_p99_idle_ms"], 2)
        out["insert_p99_during_over_idle"] = round(out["insert_p99_during_build_ms"] / out["insert_p99_idle_ms"], 2)
        print("index build over %d docs: alone %.2f s, beside probes %.2f s" % (DOCS, alone["s"], during["s"]))
        print("%-28s %10s %10s %10s" % ("point find on another coll", "p50 ms", "p99 ms", "max ms"))
        print("%-28s %10.3f %10.3f %10.3f" % ("idle", pct(idle_f, 0.5), pct(idle_f, 0.99), max(idle_f)))
        print("%-28s %10.3f %10.3f %10.3f" % ("during build (%d)" % len(dur_f), pct(dur_f, 0.5),
                                             pct(dur_f, 0.99), max(dur_f)))
        print("insert into another coll p99: idle %.3f ms, during build %.3f ms (max %.3f)" % (
            pct(idle_i, 0.99), pct(dur_i, 0.99), max(dur_i)))
        print("find p99 during / idle: %.2f" % out["find_p99_during_over_idle"])
        print("BENCH_JSON " + json.dumps({"shardd_indexbuild": out}))
    finally:
        t.close()


if __name__ == "__main__":
    main()
