#!/usr/bin/env python3
"""
test_step_timing.py — each step of a migration is measured where it happens and named the
same everywhere (docs/protocol.md, "moveChunk.from" and the donor's currentOp entry).

A failpoint moveChunkHangAtStepN fires at the END of step N: a hold there counts in step
N's time in moveChunk.from ("step N of 6"), and the donor's phase is still step N's while
it holds. A hold at step 3 (clone) is before the critical section, so not in the write
pause (writePauseMS); a hold at step 4 is inside it. The recipient's timed steps
(moveChunk.to, migrateThreadHangAtStepN) are measured the same way. While a hang holds a
migration's thread, its currentOp entry says where: heldAt. `shardctl status` prints the
donor's phase in words with the recipient's state beside it, and where it is held.
"""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
NS = "app.c"
N = 2000
HOLD_S = 2.0
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]


def cluster(t):
    cl = t.cluster(2, shard_extra=SHARD_FLAGS)
    ss, r, c = cl.shards, cl.routers[0], cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "pad": "x" * 50} for i in range(N)]})
    c.ok({"split": NS, "middle": {"k": N // 2}, "$db": "admin"})
    return ss, r, c


def start_move(router, key):
    """moveChunk of the chunk holding k = key to shard1, from a thread with its own client."""
    out = {}

    def run():
        mc = router.client()
        try:
            out["reply"] = mc.cmd({"moveChunk": NS, "find": {"k": key}, "to": "shard1",
                                   "_waitForDelete": True, "$db": "admin"})
        finally:
            mc.close()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def finish(th, res):
    th.join(60)
    assert not th.is_alive() and res["reply"]["ok"] == 1, res


def inprog(c):
    return {op["role"]: op for op in c.ok({"currentOp": 1, "$db": "admin"})["inprog"]}


def status_line(router):
    p = subprocess.run([SHARDCTL, "--host", router.url, "status"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    lines = [l for l in p.stdout.splitlines() if "shard0 -> shard1" in l]
    assert p.returncode == 0 and len(lines) == 1, p.stdout
    return lines[0]


def hold(c, name, times):
    """Waits until the point holds the migration, returns the monotonic time it did."""
    fp_wait(c, name, times)
    return time.monotonic()


def release(c, name, since):
    """Keeps the point holding until HOLD_S after since, turns it off; the hold in ms
    (no more than the thread was really held: it was held before since)."""
    left = HOLD_S - (time.monotonic() - since)
    if left > 0:
        time.sleep(left)
    held_ms = (time.monotonic() - since) * 1000
    fp(c, name, "off")
    return held_ms


def change(c, what, n):
    """The n-th (1-based) changelog entry `what` of NS, waited for."""
    def entries():
        return c.find_all("changelog", "config", {"what": what, "ns": NS})
    wait_until(lambda: len(entries()) >= n, 20, "%d %s entries" % (n, what))
    return sorted(entries(), key=lambda e: e["time"])[n - 1]["details"]


def pause_within_steps(d):
    """The write pause lies inside steps 4-6 (it starts in step 4, ends in step 6)."""
    steps = d["step 4 of 6"] + d["step 5 of 6"] + d["step 6 of 6"]
    assert d["writePauseMS"] <= steps, d


@test
def test_hold_at_step3_counts_in_step3_not_in_the_pause(t):
    ss, r, c = cluster(t)
    donor = ss[0].client()
    n0 = fp(donor, "moveChunkHangAtStep3")
    th, res = start_move(r, N - 1)
    try:
        since = hold(donor, "moveChunkHangAtStep3", n0 + 1)
        ops = inprog(c)
        d, rv = ops["donor"], ops["recipient"]
        # still step 3's phase, held at its point; the recipient is not held
        assert d["phase"] == "clone" and d["heldAt"] == "moveChunkHangAtStep3", d
        assert d["recipientState"] == "steady" and rv["phase"] == "steady", (d, rv)
        assert "heldAt" not in rv, rv
        line = status_line(r)
        assert "phase: clone (recipient: steady)  held at moveChunkHangAtStep3" in line, line
        held_ms = release(donor, "moveChunkHangAtStep3", since)
    finally:
        fp(donor, "moveChunkHangAtStep3", "off")
    finish(th, res)
    d = change(c, "moveChunk.from", 1)
    assert d["note"] == "success", d
    assert d["step 3 of 6"] >= held_ms, (held_ms, d)
    assert d["step 4 of 6"] < 1000, d
    assert d["writePauseMS"] < held_ms, (held_ms, d)
    pause_within_steps(d)


@test
def test_hold_at_step4_counts_in_step4_and_in_the_pause(t):
    ss, r, c = cluster(t)
    donor = ss[0].client()
    n0 = fp(donor, "moveChunkHangAtStep4")
    th, res = start_move(r, N - 1)
    try:
        since = hold(donor, "moveChunkHangAtStep4", n0 + 1)
        d = inprog(c)["donor"]
        assert d["phase"] == "criticalSection" and d["heldAt"] == "moveChunkHangAtStep4", d
        line = status_line(r)
        assert "phase: critical section (recipient: steady)  held at moveChunkHangAtStep4" in line, line
        held_ms = release(donor, "moveChunkHangAtStep4", since)
    finally:
        fp(donor, "moveChunkHangAtStep4", "off")
    finish(th, res)
    d = change(c, "moveChunk.from", 1)
    assert d["note"] == "success", d
    assert d["step 4 of 6"] >= held_ms and d["writePauseMS"] >= held_ms, (held_ms, d)
    assert d["step 3 of 6"] < held_ms and d["step 5 of 6"] < 1000, (held_ms, d)
    pause_within_steps(d)


@test
def test_recipient_cloning_donor_phase_is_clone_and_its_hold_counts_in_its_step(t):
    """The recipient held at the end of its clone (migrateThreadHangAtStep2, its state
    still `clone`): the donor's phase is clone (never catchup), the recipient's entry says
    where it is held, and moveChunk.to counts the hold in its step 2."""
    ss, r, c = cluster(t)
    recv = ss[1].client()
    n0 = fp(recv, "migrateThreadHangAtStep2")
    th, res = start_move(r, N - 1)
    try:
        since = hold(recv, "migrateThreadHangAtStep2", n0 + 1)

        def donor_saw_clone():
            d = inprog(c)["donor"]
            return d["recipientState"] == "clone" and d
        d = wait_until(donor_saw_clone, 20, "the donor sees the recipient cloning")
        ops = inprog(c)
        d, rv = ops["donor"], ops["recipient"]
        assert d["phase"] == "clone" and "heldAt" not in d, d
        assert rv["phase"] == "clone" and rv["heldAt"] == "migrateThreadHangAtStep2", rv
        line = status_line(r)
        assert "phase: clone (recipient: clone)  held at migrateThreadHangAtStep2" in line, line
        held_ms = release(recv, "migrateThreadHangAtStep2", since)
    finally:
        fp(recv, "migrateThreadHangAtStep2", "off")
    finish(th, res)
    to = change(c, "moveChunk.to", 1)
    assert to["note"] == "success", to
    assert to["step 2 of 5"] >= held_ms and to["step 3 of 5"] < 1000, (held_ms, to)
    d = change(c, "moveChunk.from", 1)
    assert d["step 3 of 6"] >= held_ms and d["writePauseMS"] < held_ms, (held_ms, d)
    # once released, nothing is held any more
    assert all("heldAt" not in op for op in inprog(c).values())


if __name__ == "__main__":
    main()
