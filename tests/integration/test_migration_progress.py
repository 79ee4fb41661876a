#!/usr/bin/env python3
"""
test_migration_progress.py — a migration in flight is visible: the
router's currentOp gathers every shard's entries (the donor's with phase, documents and
bytes cloned, mods pending, rate, elapsed, estimate; the recipient's with its state),
each tagged with its shard, a silent shard listed in shardErrors; `shardctl status` and
`shardctl watch` print one line per migration. The move is held on the donor with
moveChunkHangAtStep3 (at the end of step 3, clone: the recipient has caught up; before the
critical section) so it can be looked at: the donor's phase is still `clone`, heldAt names the
point.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
NS = "app.c"
N = 5000
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]


def cluster(t):
    cl = t.cluster(2, shard_extra=SHARD_FLAGS)
    cfg, ss, r, c = cl.config, cl.shards, cl.routers[0], cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    for lo in range(0, N, 1000):
        c.ok({"insert": "c", "$db": DB, "documents": [
            {"_id": i, "k": i, "pad": "x" * 100} for i in range(lo, lo + 1000)]})
    c.ok({"split": NS, "middle": {"k": N // 2}, "$db": "admin"})
    return cfg, ss, r, c


def shardctl(router, *args):
    p = subprocess.run([SHARDCTL, "--host", router.url] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    return p.returncode, p.stdout


def inprog(c):
    return c.ok({"currentOp": 1, "$db": "admin"})["inprog"]


def start_move(router):
    """moveChunk of the upper half to shard1 from a thread with its own client."""
    return cmd_in_thread(router, {"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1",
                                  "_waitForDelete": True, "$db": "admin"})


@test
def test_router_current_op_and_shardctl_status_show_a_held_migration(t):
    cfg, ss, r, c = cluster(t)
    donor = ss[0].client()
    rc, out = shardctl(r, "status")
    assert rc == 0 and "migrations in flight:\n    (none)" in out, out
    assert inprog(c) == []
    n0 = fp(donor, "moveChunkHangAtStep3")
    th, res = start_move(r)
    try:
        fp_wait(donor, "moveChunkHangAtStep3", n0 + 1)
        ops = inprog(c)
        by_role = {op["role"]: op for op in ops}
        assert sorted(by_role) == ["donor", "recipient"], ops
        d, rv = by_role["donor"], by_role["recipient"]
        # the donor's entry: tagged with its shard, the range and both ends, its progress
        assert d["shard"] == "shard0" and d["ns"] == NS and d["from"] == "shard0" and d["to"] == "shard1", d
        assert d["min"] == {"k": N // 2} and d["max"] == {"k": {"$maxKey": 1}}, d
        assert d["phase"] == "clone" and d["recipientState"] == "steady", d
        assert d["heldAt"] == "moveChunkHangAtStep3", d
        assert d["docsToClone"] == N // 2 and d["docsCloned"] == d["docsToClone"], d
        assert d["bytesCloned"] > (N // 2) * 100, d
        assert d["modsPending"] == 0 and d["estimatedMSLeft"] == 0, d
        assert d["elapsedMS"] >= 0 and d["docsPerSec"] > 0, d
        # the recipient's: the same migration seen from shard1
        assert rv["shard"] == "shard1" and rv["migrationId"] == d["migrationId"], rv
        assert rv["ns"] == NS and rv["fromShardId"] == "shard0" and rv["to"] == "shard1", rv
        assert rv["state"] == "steady" and rv["phase"] == "steady" and rv["active"] is True, rv
        assert "heldAt" not in rv, rv
        assert rv["docsCloned"] == N // 2 and rv["counts"]["cloned"] == N // 2, rv
        # a write now is captured on the donor (pending, then sent: the recipient keeps
        # pulling in steady state) and applied on the recipient
        c.ok({"update": "c", "$db": DB, "updates": [{"q": {"k": N - 1}, "u": {"$set": {"v": 1}}}]})
        d2 = [op for op in inprog(c) if op["role"] == "donor"][0]
        assert d2["modsPending"] + d2["modsSent"] >= d["modsSent"] + 1, (d, d2)
        assert d2["estimatedMSLeft"] >= 0, d2

        def applied():
            rv2 = [op for op in inprog(c) if op["role"] == "recipient"][0]
            return rv2["modsApplied"] >= rv["modsApplied"] + 1
        wait_until(applied, 20, "the recipient applied the update")
        # shardctl status and watch: one line for the migration, the donor's view
        rc, out = shardctl(r, "status")
        lines = [l for l in out.splitlines() if "shard0 -> shard1" in l]
        assert rc == 0 and len(lines) == 1, out
        line = lines[0]
        for want in (NS, '{ "k" : %d }' % (N // 2),
                     "phase: clone (recipient: steady)  held at moveChunkHangAtStep3",
                     "docs: %d / %d" % (N // 2, N // 2), " MB", "mods pending: ", "docs/s",
                     "elapsed: ", "left: ~"):
            assert want in line, (want, line)
        rc, out = shardctl(r, "watch", "--interval-ms", "50", "--count", "2")
        assert rc == 0 and out.count("shard0 -> shard1  phase: clone (recipient: steady)") == 2, out
        assert th.is_alive() and "reply" not in res
    finally:
        fp(donor, "moveChunkHangAtStep3", "off")
    th.join(60)
    assert not th.is_alive() and res["reply"]["ok"] == 1, res
    wait_until(lambda: inprog(c) == [], 20, "currentOp empty after the move")
    rc, out = shardctl(r, "status")
    assert rc == 0 and "migrations in flight:\n    (none)" in out, out
    assert c.ok({"count": "c", "$db": DB})["n"] == N


@test
def test_current_op_lists_a_silent_shard_in_shard_errors(t):
    cfg, ss, r, c = cluster(t)
    ss[1].kill()
    rep = c.ok({"currentOp": 1, "$db": "admin", "maxTimeMS": 3000})
    assert rep["inprog"] == [], rep
    errs = rep.get("shardErrors")
    assert errs and [e["shard"] for e in errs] == ["shard1"] and errs[0]["code"] != 0, rep
    rc, out = shardctl(r, "status")
    assert rc == 0 and "(shard shard1 did not answer:" in out, out


if __name__ == "__main__":
    main()
