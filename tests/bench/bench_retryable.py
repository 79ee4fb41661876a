#!/usr/bin/env python3
"""
bench_retryable.py — what retryable writes cost (docs/wire-protocol.md "Retryable
writes"): the same writes through the router with lsid + txnNumber (each statement's
record written in the write's own SQLite transaction on the shard) against without, in
one run, interleaved in blocks that alternate which side goes first. Run by `make bench`
(tests/bench/run.py) or alone; starts a 2-shard cluster on 127.0.0.1 (config server, 2
shardd, 1 router) and stops exactly what it started.

  1. single-document inserts (one per command), ops/s with vs without → ratio (the median
     of back-to-back block pairs, so other processes' load moves single pairs only);
  2. single-document updates ($inc by _id, one per command) → ratio;
  3. insert batches of 1,000 documents (1,000 records per command) → ratio.
Every figure goes through a `shardctl --host URL -` pipe from python: the pipe adds the
same fixed cost to both sides, so the ratios are what to read. Prints a table, then one
line BENCH_JSON {"retryable": {...}}. Asserts nothing on time.
"""
import base64
import json
import os
import statistics
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from lib import Ctx  # noqa: E402

DB = "bench"
OPS = int(os.environ.get("BENCH_RETRY_OPS", "4000"))
BLOCK = 100
BATCHES = int(os.environ.get("BENCH_RETRY_BATCHES", "60"))


def lsid():
    return {"id": {"$binary": {"base64": base64.b64encode(uuid.uuid4().bytes).decode(),
                               "subType": "04"}}}


class Side:
    """One side of a comparison: a session (or none) and a running txnNumber."""

    def __init__(self, retryable):
        self.lsid = lsid() if retryable else None
        self.txn = 0
        self.seconds = 0.0
        self.ops = 0

    def args(self):
        if not self.lsid:
            return {}
        self.txn += 1
        return {"lsid": self.lsid, "txnNumber": {"$numberLong": str(self.txn)}}


def run_block(client, side, make_cmd, first, count, per_cmd):
    """Runs count commands; returns their seconds (also added to the side's total)."""
    t0 = time.perf_counter()
    for i in range(first, first + count):
        cmd = make_cmd(i)
        cmd.update(side.args())
        r = client.cmd(cmd)
        if r.get("ok") != 1 or r.get("writeErrors"):
            raise RuntimeError("bench write failed: %s" % r)
    dt = time.perf_counter() - t0
    side.seconds += dt
    side.ops += count * per_cmd
    return dt


def compare(client, make_cmd_for, count, per_cmd):
    """Interleaved pairs of blocks (who goes first alternates); returns (with ops/s,
    without ops/s, ratio). The ratio is the median over the pairs of without-seconds /
    with-seconds: each pair runs back to back, so a load spike from other processes on
    the machine moves one pair, not the figure."""
    w, wo = Side(True), Side(False)
    done = 0
    blk = 0
    ratios = []
    while done < count:
        n = min(BLOCK if per_cmd == 1 else 5, count - done)
        order = [(w, "w"), (wo, "o")] if blk % 2 == 0 else [(wo, "o"), (w, "w")]
        secs = {}
        for side, tag in order:
            secs[tag] = run_block(client, side, make_cmd_for(tag), done, n, per_cmd)
        ratios.append(secs["o"] / secs["w"])
        done += n
        blk += 1
    return w.ops / w.seconds, wo.ops / wo.seconds, statistics.median(ratios)


def main():
    ctx = Ctx("bench_retryable")
    ok = False
    try:
        cl = ctx.cluster(shards=2, routers=1)
        R = cl.client()
        R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
        for coll in ("ins_w", "ins_o", "upd", "bat_w", "bat_o"):
            R.ok({"shardCollection": "%s.%s" % (DB, coll), "key": {"_id": "hashed"}, "$db": "admin"})
        R.ok({"insert": "upd", "$db": DB, "documents": [{"_id": k, "n": 0} for k in range(1000)]})
        for coll in ("ins_w", "ins_o"):   # tables cached, connections open
            R.ok({"insert": coll, "$db": DB, "documents": [{"_id": -1}]})

        ins = compare(R, lambda tag: lambda i: {"insert": "ins_" + tag, "$db": DB,
                                                "documents": [{"_id": i, "v": i}]}, OPS, 1)
        upd = compare(R, lambda tag: lambda i: {"update": "upd", "$db": DB, "updates": [
            {"q": {"_id": i % 1000}, "u": {"$inc": {"n": 1}}}]}, OPS, 1)
        bat = compare(R, lambda tag: lambda i: {"insert": "bat_" + tag, "$db": DB, "ordered": False,
                                                "documents": [{"_id": i * 1000 + j, "v": j}
                                                              for j in range(1000)]},
                      BATCHES, 1000)
        f = {
            "ops": OPS,
            "insert_with_ops_s": round(ins[0]),
            "insert_without_ops_s": round(ins[1]),
            "insert_ratio": round(ins[2], 3),
            "update_with_ops_s": round(upd[0]),
            "update_without_ops_s": round(upd[1]),
            "update_ratio": round(upd[2], 3),
            "batch_docs": BATCHES * 1000,
            "batch_insert_with_docs_s": round(bat[0]),
            "batch_insert_without_docs_s": round(bat[1]),
            "batch_insert_ratio": round(bat[2], 3),
        }
        print("retryable writes through the router, 2 shards on 127.0.0.1 (python + shardctl pipe)")
        print("%-48s %12s" % ("figure", "value"))
        for name, v in [
            ("single insert with lsid/txnNumber, ops/s", f["insert_with_ops_s"]),
            ("single insert without, ops/s", f["insert_without_ops_s"]),
            ("  with/without ratio (goal >= 0.9)", f["insert_ratio"]),
            ("single update ($inc) with lsid/txnNumber, ops/s", f["update_with_ops_s"]),
            ("single update without, ops/s", f["update_without_ops_s"]),
            ("  with/without ratio (goal >= 0.9)", f["update_ratio"]),
            ("insert batches of 1000 with, docs/s", f["batch_insert_with_docs_s"]),
            ("insert batches of 1000 without, docs/s", f["batch_insert_without_docs_s"]),
            ("  with/without ratio", f["batch_insert_ratio"]),
        ]:
            print("%-48s %12s" % (name, v))
        print("BENCH_JSON " + json.dumps({"retryable": f}, separators=(",", ":")))
        ok = True
    finally:
        ctx.close(keep=not ok)


if __name__ == "__main__":
    main()
