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


def inprog(c):
    return {op["role"]: op for op in c.ok({"currentOp": 1, "$db": "admin"})["inprog"]}


def status_line(router):
    p = subprocess.run([SHARDCTL, "--host", router.url, "status"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    lines = [l for l in p.stdout.splitlines() if "shard0 -> shard1" in l]
    assert p.returncode == 0 and len(lines) == 1, p.stdout
    return lines[0]


def held_move(t, point, on_shard, look):
    """Moves the upper chunk to shard1 with `point` on (on shards[on_shard]); once it
    holds, look(c, r) checks what currentOp and shardctl show; the hold lasts HOLD_S,
    then the move finishes. Returns (c, the hold in ms, moveChunk.from's details) — the
    hold measured from waitForFailPoint's answer, so no longer than the real one."""
    ss, r, c = cluster(t)
    sc = ss[on_shard].client()
    n0 = fp(sc, point)
    th, res = cmd_in_thread(r, {"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1",
                                "_waitForDelete": True, "$db": "admin"})
    try:
        fp_wait(sc, point, n0 + 1)
        since = time.monotonic()
        look(c, r)
        time.sleep(max(0.0, HOLD_S - (time.monotonic() - since)))
        held_ms = (time.monotonic() - since) * 1000
    finally:
        fp(sc, point, "off")
    th.join(60)
    assert not th.is_alive() and res["reply"]["ok"] == 1, res
    frm = change(c, "moveChunk.from")
    assert frm["note"] == "success", frm
    # the write pause lies inside steps 4-6 (it starts in step 4, ends in step 6)
    assert frm["writePauseMS"] <= frm["step 4 of 6"] + frm["step 5 of 6"] + frm["step 6 of 6"], frm
    return c, held_ms, frm


def change(c, what):
    """The one changelog entry `what` of NS (waited for: the recipient logs after the
    move's reply)."""
    def entries():
        return c.find_all("changelog", "config", {"what": what, "ns": NS})
    wait_until(lambda: len(entries()) == 1, 20, "the %s entry" % what)
    return entries()[0]["details"]


@test
def test_hold_at_step3_counts_in_step3_not_in_the_pause(t):
    def look(c, r):
        ops = inprog(c)
        d, rv = ops["donor"], ops["recipient"]
        # still step 3's phase, held at its point; the recipient is not held
        assert d["phase"] == "clone" and d["heldAt"] == "moveChunkHangAtStep3", d
        assert d["recipientState"] == "steady" and rv["phase"] == "steady", (d, rv)
        assert "heldAt" not in rv, rv
        line = status_line(r)
        assert "phase: clone (recipient: steady)  held at moveChunkHangAtStep3" in line, line
    c, held_ms, d = held_move(t, "moveChunkHangAtStep3", 0, look)
    assert d["step 3 of 6"] >= held_ms, (held_ms, d)
    assert d["step 4 of 6"] < 1000, d
    assert d["writePauseMS"] < held_ms, (held_ms, d)


@test
def test_hold_at_step4_counts_in_step4_and_in_the_pause(t):
    def look(c, r):
        d = inprog(c)["donor"]
        assert d["phase"] == "criticalSection" and d["heldAt"] == "moveChunkHangAtStep4", d
        line = status_line(r)
        assert "phase: critical section (recipient: steady)  held at moveChunkHangAtStep4" in line, line
    c, held_ms, d = held_move(t, "moveChunkHangAtStep4", 0, look)
    assert d["step 4 of 6"] >= held_ms and d["writePauseMS"] >= held_ms, (held_ms, d)
    assert d["step 3 of 6"] < held_ms and d["step 5 of 6"] < 1000, (held_ms, d)


@test
def test_recipient_cloning_donor_phase_is_clone_and_its_hold_counts_in_its_step(t):
    """The recipient held at the end of its clone (migrateThreadHangAtStep2, its state
    still `clone`): the donor's phase is clone (never catchup), the recipient's entry says
    where it is held, and moveChunk.to counts the hold in its step 2."""
    def look(c, r):
        wait_until(lambda: inprog(c)["donor"]["recipientState"] == "clone", 20,
                   "the donor sees the recipient cloning")
        ops = inprog(c)
        d, rv = ops["donor"], ops["recipient"]
        assert d["phase"] == "clone" and "heldAt" not in d, d
        assert rv["phase"] == "clone" and rv["heldAt"] == "migrateThreadHangAtStep2", rv
        line = status_line(r)
        assert "phase: clone (recipient: clone)  held at migrateThreadHangAtStep2" in line, line
    c, held_ms, d = held_move(t, "migrateThreadHangAtStep2", 1, look)
    assert d["step 3 of 6"] >= held_ms and d["writePauseMS"] < held_ms, (held_ms, d)
    to = change(c, "moveChunk.to")
    assert to["note"] == "success", to
    assert to["step 2 of 5"] >= held_ms and to["step 3 of 5"] < 1000, (held_ms, to)
    # once released, nothing is held any more
    assert all("heldAt" not in op for op in inprog(c).values())


if __name__ == "__main__":
    main()
