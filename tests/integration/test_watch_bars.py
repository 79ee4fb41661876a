#!/usr/bin/env python3
"""
test_watch_bars.py — shardctl's balancing views (cli/ctl_bars.c), as `make demo` uses
them: `watch --bars` prints the chunks per shard of a collection as bars (no escape codes
when stdout is not a terminal), a held migration with its phase and clone progress, the
balancer's rounds with their moves; `--until-balanced` exits 1 when --count ends while
the balancer is stopped and 0 once the balancer has spread the chunks; `changelog
--summary` counts the moves and documents of config.changelog; `changelog --what`
lists entries one a line.
"""
import os
import re
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import SHARDCTL, fp, fp_wait, main, test, wait_until  # noqa: E402

DB = "app"
NS = "app.c"
CHUNKS = 6
PER = 500   # documents per chunk


def shardctl(router, *args, timeout=120):
    p = subprocess.run([SHARDCTL, "--host", router.url] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    return p.returncode, p.stdout


def bars(out):
    """{shard: (bar length, count)} from the last frame of `watch --bars` output."""
    frame = out.split("shardctl watch --bars")[-1]
    got = {}
    for m in re.finditer(r"^  (shard\d+) +(#*) +(\d+)$", frame, re.M):
        got[m.group(1)] = (len(m.group(2)), int(m.group(3)))
    return got


@test
def test_watch_bars_until_balanced_and_changelog_summary(t):
    cfg = t.configsvr(extra=["--balancer-idle-ms", "200", "--balancer-throttle-ms", "100"])
    ss = [t.shardd("shard%d" % i, extra=["--orphan-cleanup-delay-ms", "0"]) for i in range(3)]
    r = t.router(cfg.url)
    c = r.client()
    c.ok({"balancerStop": 1, "$db": "admin"})
    for i, s in enumerate(ss):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"_id": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "pad": "x" * 100} for i in range(CHUNKS * PER)]})
    for k in range(1, CHUNKS):
        c.ok({"split": NS, "middle": {"_id": k * PER}, "$db": "admin"})

    # one frame, not a terminal: bars of '#', no escape codes, every shard listed
    rc, out = shardctl(r, "watch", "--bars", "--ns", NS, "--count", "1")
    assert rc == 0 and "\033" not in out, out
    assert "chunks per shard — %s, key { \"_id\" : 1 }, %d chunks" % (NS, CHUNKS) in out, out
    assert bars(out) == {"shard0": (40, CHUNKS), "shard1": (0, 0), "shard2": (0, 0)}, out
    assert "migrations in flight\n  (none)" in out and "balancer rounds (newest first)" in out, out

    # a held migration: its phase (both sides) and clone progress
    donor = ss[0].client()
    n0 = fp(donor, "moveChunkHangAtStep3")
    res = {}

    def move():
        mc = r.client()
        res["reply"] = mc.cmd({"moveChunk": NS, "find": {"_id": 0}, "to": "shard1", "$db": "admin"})
        mc.close()
    th = threading.Thread(target=move, daemon=True)
    th.start()
    try:
        fp_wait(donor, "moveChunkHangAtStep3", n0 + 1)
        rc, out = shardctl(r, "watch", "--bars", "--count", "1")
        assert rc == 0, out
        assert "  shard0 -> shard1  %s { \"_id\" : { \"$minKey\" : 1 } } -->> { \"_id\" : %d }" % (NS, PER) in out, out
        assert "phase: clone (recipient: steady)  held at moveChunkHangAtStep3  [####################] %d / %d docs" % (PER, PER) in out, out
        # stopped balancer, migration in flight: never "balanced", exit 1 when --count ends
        rc, out = shardctl(r, "watch", "--bars", "--ns", NS, "--until-balanced", "--interval-ms", "50",
                           "--count", "3")
        assert rc == 1 and "balanced:" not in out and out.count("shardctl watch --bars") == 3, out
    finally:
        fp(donor, "moveChunkHangAtStep3", "off")
    th.join(60)
    assert res["reply"]["ok"] == 1, res

    # the balancer spreads the chunks; the watch returns once it is done
    c.ok({"balancerStart": 1, "$db": "admin"})
    rc, out = shardctl(r, "watch", "--bars", "--ns", NS, "--until-balanced", "--interval-ms", "100",
                       "--count", "600")
    assert rc == 0 and out.rstrip().endswith("every shard has chunks"), out[-2000:]
    got = bars(out)
    assert sorted(got) == ["shard0", "shard1", "shard2"] and sum(n for _, n in got.values()) == CHUNKS, out
    assert all(n == 2 and length == 40 for length, n in got.values()), got
    assert "chunksImbalance" in out and "shard0 -> shard2" in out, out[-3000:]
    assert not c.ok({"currentOp": 1, "$db": "admin"})["inprog"]

    # changelog: the moves and documents the changelog holds
    log = c.ok({"find": "changelog", "$db": "config", "filter": {"what": "moveChunk.from", "ns": NS}})
    entries = log["cursor"]["firstBatch"]
    done = [e for e in entries if e["details"]["note"] == "success"]
    docs = sum(e["details"]["clonedDocs"] for e in done)
    assert len(done) >= 3 and docs == len(done) * PER, entries
    rc, out = shardctl(r, "changelog", "--ns", NS, "--summary")
    assert rc == 0, out
    assert "migrations (config.changelog moveChunk.from): %d done, 0 not done" % len(done) in out, out
    assert "documents moved: %d " % docs in out and "write pause (critical section): mean " in out, out
    assert ("donor's mean ms per step (moveChunk.from step 1..6): checks " in out and
            ", start clone " in out and ", clone " in out and ", critical section " in out and
            ", commit on recipient " in out and ", commit on config server " in out), out
    rc, out = shardctl(r, "changelog", "--ns", NS, "--what", "moveChunk.commit")
    lines = out.strip().splitlines()
    assert rc == 0 and len(lines) == len(done) and all(" moveChunk.commit   %s  {" % NS in l for l in lines), out


if __name__ == "__main__":
    main()
