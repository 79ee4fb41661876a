"""
bench_shardd_multikey.py — count over a multikey index at 80 k and 320 k documents (each
document has a 2-element array under the index, so every document comes up twice in the
index scan and the scan's de-duplication sees every record id). The goal is linear: the
320 k count should take about 4x the 80 k one. Baseline in the same run: the same count
over a single-valued index (no de-duplication), so the ratio shows the dedupe's own cost.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
from lib import Ctx  # noqa: E402
from hostile import RawReq  # noqa: E402


def timed_count(c, coll):
    best = None
    for _ in range(3):  # median of 3
        t0 = time.monotonic()
        r = c.call({"count": coll, "$db": "b", "query": {"a": {"$gte": 0}}})
        dt = time.monotonic() - t0
        assert r.get("ok") == 1, r
        best = sorted((best or []) + [dt])
    return best[1], r["n"]


def main():
    t = Ctx("bench-multikey")
    try:
        s = t.shardd("s0")
        c = RawReq(s.url, timeout=300)
        out = {}
        print("%-10s %12s %12s %8s" % ("docs", "multikey s", "single s", "ratio"))
        for n in (80000, 320000):
            for coll, multi in (("m", True), ("p", False)):
                c.call({"drop": coll, "$db": "b"})
                c.call({"createIndexes": coll, "$db": "b", "indexes": [{"key": {"a": 1}, "name": "a_1"}]})
                for lo in range(0, n, 10000):
                    docs = [{"_id": i, "a": [i % 7, i % 7 + 100] if multi else i % 7} for i in range(lo, lo + 10000)]
                    r = c.call({"insert": coll, "$db": "b", "documents": docs})
                    assert r.get("n") == 10000, r
            tm, nm = timed_count(c, "m")
            tp, np_ = timed_count(c, "p")
            assert nm == n and np_ == n, (nm, np_)
            out["count_multikey_%dk_s" % (n // 1000)] = round(tm, 4)
            out["count_single_%dk_s" % (n // 1000)] = round(tp, 4)
            print("%-10d %12.3f %12.3f %8.2f" % (n, tm, tp, tm / tp))
        out["multikey_320k_over_80k"] = round(out["count_multikey_320k_s"] / out["count_multikey_80k_s"], 2)
        print("multikey count 320k / 80k: %.2f (linear = 4)" % out["multikey_320k_over_80k"])
        print("BENCH_JSON " + json.dumps({"shardd_multikey": out}))
    finally:
        t.close()


if __name__ == "__main__":
    main()
