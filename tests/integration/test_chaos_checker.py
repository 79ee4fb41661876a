#!/usr/bin/env python3
"""
test_chaos_checker.py — the chaos soak's history checker (tests/chaos/history.py) catches
what it is there to catch: each check is fed a history with one planted anomaly (a lost
acknowledged write, a write applied twice, a retryable write applied twice or
answered as no single execution answers, a duplicate or missing document in a scan, a
deleted document read back, a counter off by one, a batch half deleted, chunks with a gap
or an overlap) and must report it, and the same history without the anomaly must pass —
including the ambiguous ("maybe") outcomes it has to accept either way. No processes.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "chaos"))
from lib import *  # noqa: E402,F403
from history import ABSENT, History, rw_outcome, tiles  # noqa: E402


def hist():
    return History(time.monotonic(), 4)


def write(h, _id, value, outcome="ok"):
    d = h.docs.get(_id) or h.new_doc(_id, 1)
    h.begin(d)
    h.end(d, outcome, value, "w")
    return d


@test
def test_final_docs(t):
    h = hist()
    write(h, "a", 1)
    write(h, "a", 2)
    write(h, "b", 5)
    write(h, "b", ABSENT)            # deleted, acknowledged
    write(h, "c", 7)
    write(h, "c", 8, "maybe")        # either 7 or 8
    write(h, "d", 3, "maybe")        # inserted or not
    good = [{"_id": "a", "v": 2}, {"_id": "c", "v": 8}]
    h.check_final_docs(good, "ok")
    h.check_final_docs([{"_id": "a", "v": 2}, {"_id": "c", "v": 7}, {"_id": "d", "v": 3}], "ok")
    assert h.anomalies == [], [str(a) for a in h.anomalies]
    bad = {
        "lost": [{"_id": "c", "v": 8}],                                          # a missing
        "old value": [{"_id": "a", "v": 1}, {"_id": "c", "v": 8}],
        "deleted back": good + [{"_id": "b", "v": 5}],
        "twice": good + [{"_id": "a", "v": 2}],
        "never written": good + [{"_id": "zz", "v": 1}],
        "unknown value": [{"_id": "a", "v": 2}, {"_id": "c", "v": 9}],
    }
    for what, docs in bad.items():
        n = len(h.anomalies)
        h.check_final_docs(docs, what)
        assert len(h.anomalies) > n, "final check missed: %s" % what


@test
def test_scans(t):
    h = hist()
    write(h, "a", 1)
    write(h, "b", 2)
    write(h, "gone", ABSENT)
    snap = h.scan_start()
    h.scan_check(snap, [{"_id": "a", "v": 1}, {"_id": "b", "v": 2}], "ok")
    assert h.anomalies == []
    for what, docs in {"missing": [{"_id": "a", "v": 1}],
                       "duplicate": [{"_id": "a", "v": 1}, {"_id": "a", "v": 1}, {"_id": "b", "v": 2}],
                       "deleted": [{"_id": "a", "v": 1}, {"_id": "b", "v": 2}, {"_id": "gone"}],
                       "stale value": [{"_id": "a", "v": 0}, {"_id": "b", "v": 2}]}.items():
        n = len(h.anomalies)
        h.scan_check(h.scan_start(), docs, what)
        assert len(h.anomalies) > n, "scan check missed: %s" % what
    # a document written during the scan may be there or not, with either value
    h.anomalies.clear()
    snap = h.scan_start()
    d = h.docs["b"]
    h.begin(d)
    h.end(d, "ok", 3, "w")
    h.scan_check(snap, [{"_id": "a", "v": 1}], "b changed during the scan")
    assert h.anomalies == [], [str(a) for a in h.anomalies]


@test
def test_counters_and_batches(t):
    h = hist()
    h.ctr_end(0, 4, "ok")
    h.ctr_end(0, 2, "ok")
    h.ctr_end(1, 3, "maybe")
    h.check_final_ctr([{"_id": 0, "c": 2}, {"_id": 1, "c": 3}, {"_id": 2, "c": 1}, {"_id": 3, "c": 1}], "ok")
    h.check_final_ctr([{"_id": 0, "c": 2}, {"_id": 1, "c": 2}, {"_id": 2, "c": 2}, {"_id": 3, "c": 1}], "ok")
    assert h.anomalies == [], [str(a) for a in h.anomalies]
    for what, docs in {"applied twice": [{"_id": 0, "c": 3}, {"_id": 1, "c": 2}, {"_id": 2, "c": 1}, {"_id": 3, "c": 1}],
                       "missed": [{"_id": 0, "c": 2}, {"_id": 1, "c": 2}, {"_id": 2, "c": 1}, {"_id": 3, "c": 0}],
                       "doc lost": [{"_id": 0, "c": 2}, {"_id": 1, "c": 2}, {"_id": 2, "c": 1}]}.items():
        n = len(h.anomalies)
        h.check_final_ctr(docs, what)
        assert len(h.anomalies) > n, "counter check missed: %s" % what
    h = hist()
    h.batch_ids = {1: ["b1-0", "b1-1"], 2: ["b2-0", "b2-1"], 3: ["b3-0"]}
    h.batches = {1: "deleted", 2: "inserted", 3: "maybe"}
    h.check_final_batches([{"_id": "b2-0", "b": 2}, {"_id": "b2-1", "b": 2}, {"_id": "b3-0", "b": 3}], "ok")
    assert h.anomalies == []
    h.check_final_batches([{"_id": "b1-1", "b": 1}, {"_id": "b2-0", "b": 2}, {"_id": "b2-1", "b": 2}], "left")
    assert len(h.anomalies) == 1
    h.check_final_batches([{"_id": "b2-0", "b": 2}], "half")
    assert len(h.anomalies) == 2


@test
def test_retryable_exactly_once(t):
    """A retryable write answered (after resends) is exactly once: its $inc applied twice,
    an insert or a delete undone, is reported; applied once passes. 217 / 225 stay maybe."""
    h = hist()
    a = write(h, "a", 10)
    b = write(h, "b", 3)
    c = write(h, "c", 1)
    for d, value, outcome in ((a, 15, "ok"), (b, ABSENT, "ok"), (c, 9, "217")):
        h.begin(d)
        h.end_retryable([(d, value)], outcome, "update", 4)
    n = h.new_doc("n", 1)
    h.begin(n)
    h.end_retryable([(n, 7)], "ok", "insert", 2)
    good = [{"_id": "a", "v": 15}, {"_id": "n", "v": 7}, {"_id": "c", "v": 9}]
    h.check_final_docs(good, "once, 217 applied")
    h.check_final_docs(good[:2] + [{"_id": "c", "v": 1}], "217 not applied")
    assert h.anomalies == [], [str(x) for x in h.anomalies]
    assert (h.stats["rw_once"], h.stats["rw_retried"], h.stats["rw_resends"], h.stats["rw_217"]) == (3, 3, 7, 1)
    assert len(h.rw_legit) == 1 and "217" in h.rw_legit[0]
    for what, docs in {"applied twice": [{"_id": "a", "v": 20}] + good[1:],
                       "not applied": [{"_id": "a", "v": 10}] + good[1:],
                       "insert lost": good[:1] + good[2:],
                       "delete undone": good + [{"_id": "b", "v": 3}]}.items():
        k = len(h.anomalies)
        h.check_final_docs(docs, what)
        assert len(h.anomalies) > k, "exactly-once check missed: %s" % what
    assert "retryable" in str(h.anomalies[0]), str(h.anomalies[0])


@test
def test_retry_answers(t):
    """rw_outcome: a resend's answer must be one execution's; errors are resent, 217/225 kept."""
    one = {"n": 1}
    assert rw_outcome("insert", {"ok": 1, "n": 1}, one) == ("ok", None)
    assert rw_outcome("update", {"ok": 1, "n": 1, "nModified": {"$numberInt": "1"}}, one) == ("ok", None)
    assert rw_outcome("delete", {"ok": 1, "n": 0}, {"n": 0}) == ("ok", None)
    assert rw_outcome("fam", {"ok": 1, "value": {"_id": "a", "v": 10}}, {"value": 10}) == ("ok", None)
    assert rw_outcome("fam", {"ok": 1, "value": None}, {"value": ABSENT}) == ("ok", None)
    wrong = {"insert DuplicateKey": ("insert", {"ok": 1, "n": 0, "writeErrors": [{"index": 0, "code": 11000}]}, one),
             "delete ran again": ("delete", {"ok": 1, "n": 0}, one),
             "update ran again on nothing": ("update", {"ok": 1, "n": 1, "nModified": 0}, one),
             "findAndModify value after two": ("fam", {"ok": 1, "value": {"v": 15}}, {"value": 10}),
             "batch short": ("batch", {"ok": 1, "n": 3}, {"n": 4})}
    for what, (kind, r, want) in wrong.items():
        assert rw_outcome(kind, r, want)[0] == "wrong", what
    assert rw_outcome("insert", {"ok": 0, "code": 217}, one) == ("217", None)
    assert rw_outcome("batch", {"ok": 1, "n": 2, "writeErrors": [{"index": 1, "code": 225}]}, {"n": 4}) == ("225", None)
    for r in ({"ok": 0, "errmsg": "client pipe failed"}, {"ok": 0, "code": 89}, {"ok": 0, "code": 91},
              {"ok": 1, "n": 0, "writeErrors": [{"index": 0, "code": 6}]}):
        assert rw_outcome("insert", r, one)[0] == "retry", r


@test
def test_tiles(t):
    mn, mx = {"k": MINKEY}, {"k": MAXKEY}
    ch = lambda a, b: {"min": a, "max": b}   # noqa: E731
    assert tiles([ch(mn, mx)]) is None
    assert tiles([ch(mn, {"k": 5}), ch({"k": 5}, {"k": 9}), ch({"k": 9}, mx)]) is None
    assert tiles([ch(mn, {"k": 5}), ch({"k": 6}, mx)]) is not None                       # gap
    assert tiles([ch(mn, {"k": 5}), ch({"k": 5}, mx), ch({"k": 3}, {"k": 7})]) is not None  # overlap
    assert tiles([ch(mn, {"k": 5}), ch({"k": 5}, mx), ch({"k": 5}, {"k": 7})]) is not None  # same min
    assert tiles([ch({"k": 1}, mx)]) is not None                                           # no MinKey
    assert tiles([]) is not None


@test
def test_schedule_is_a_function_of_the_seed(t):
    import soak
    names = {"config": ["config"], "shard": ["shard0", "shard1", "shard2", "shard3"], "router": ["r0", "r1"]}
    a = soak.draw_schedule(7, 120, names, net=True)
    assert a == soak.draw_schedule(7, 120, names, net=True)
    assert a != soak.draw_schedule(8, 120, names, net=True)
    assert len(a) >= 15 and all(0 < x[0] < 120 for x in a)
    kinds = {x[1] for x in a}
    assert kinds == {"kill", "stop", "failpoint", "cut"}, kinds
    assert "cut" not in {x[1] for x in soak.draw_schedule(7, 120, names, net=False)}
    # some hangs and cuts outlast the donor's 20 s deadline
    long_ones = [x for x in a if x[2].get("hold_s", 0) > 20 or x[2].get("heal_s", 0) > 20]
    assert long_ones, a


if __name__ == "__main__":
    main()
