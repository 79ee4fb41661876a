"""
test_shardctl_load.py — `shardctl load` and README's walkthrough 2, which uses it.

The keys: `load --key F` sets F uniformly in [0, 1e8). Of n = 20,000 documents the share
above the middle (50,000,000) is binomial with p = 0.5, sd = sqrt(p(1-p)/n) = 0.00354; the
bound 0.5 +- 0.025 is 7 sd, so a uniform draw fails it with probability about 3e-12 (and
the load's seed is fixed: the same run every time). The old draw, a modulo of a 28-bit
number, put 43 % of the keys above the middle.

The walkthrough: README's walkthrough 2 block run line by line, as written, on a fresh
cluster (its ports moved by --base-port and $MS_HOST); every command must exit 0, the
targeted finds must find their document and their explain must name the one shard that
answered.
"""
import os
import re
import subprocess

from lib import *

SCRIPT = os.path.join(ROOT, "scripts", "cluster.sh")
N = 20000
MIDDLE = 50000000


def run(cmd, env=None, timeout=120):
    p = subprocess.run(cmd, shell=isinstance(cmd, str), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout, env=env, cwd=ROOT)
    assert p.returncode == 0, (cmd, p.returncode, p.stdout[-1500:], p.stderr[-1500:])
    return p.stdout


@test
def test_load_keys_are_uniform(t):
    s = t.shardd()
    run([SHARDCTL, "--host", s.url, "load", "--ns", "app.u", "--count", str(N), "--key", "k", "--size", "0",
         "--quiet"])
    c = s.client()
    above = c.ok({"count": "u", "$db": "app", "query": {"k": {"$gte": MIDDLE}}})["n"]
    total = c.ok({"count": "u", "$db": "app"})["n"]
    outside = c.ok({"count": "u", "$db": "app", "query": {"$or": [{"k": {"$lt": 0}}, {"k": {"$gte": 2 * MIDDLE}}]}})
    share = above / total
    print("  %d of %d keys above %d: %.4f" % (above, total, MIDDLE, share))
    assert total == N, total
    assert outside["n"] == 0, outside
    assert abs(share - 0.5) < 0.025, share
    # a quarter of the range holds a quarter of the keys too (the bias of a modulo is not
    # only at the middle)
    low = c.ok({"count": "u", "$db": "app", "query": {"k": {"$lt": MIDDLE // 2}}})["n"] / total
    assert abs(low - 0.25) < 0.025, low


def walkthrough_2():
    """The shell lines of README's walkthrough 2 block."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = re.search(r"## Walkthrough 2[^\n]*\n+```sh\n(.*?)```", text, re.S)
    assert block, "README has no walkthrough 2 block"
    return [line for line in block.group(1).splitlines() if line.strip()]


@test
def test_readme_walkthrough_2_runs_as_written(t):
    base = free_ports(310)[0]   # every port cluster.sh derives: up to base+300 (web view)
    d = os.path.join(t.dir, "mc")
    env = dict(os.environ, MS_HOST="tcp://127.0.0.1:%d" % base)
    lines = walkthrough_2()
    assert lines[0].startswith("scripts/cluster.sh start --dir /tmp/mc "), lines[0]
    assert lines[-1].startswith("scripts/cluster.sh stop --dir /tmp/mc "), lines[-1]
    outs = {}
    try:
        for line in lines:
            line = line.replace("--dir /tmp/mc", "--dir " + d)
            if line.startswith("scripts/cluster.sh start"):
                line = line.replace(" start ", " start --base-port %d " % base, 1)
            if line.startswith("bin/"):
                line = os.path.join(BIN, line[len("bin/"):])
            outs[line] = run(line, env=env)
    finally:
        if os.path.exists(os.path.join(d, "cluster.pids")):
            run(["bash", SCRIPT, "stop", "--dir", d])
    finds = {k: v for k, v in outs.items() if '"find": "users"' in k and "explain" not in k}
    explains = [v for k, v in outs.items() if '"explain"' in k]
    assert len(finds) == 2 and len(explains) == 2, list(outs)
    for v in finds.values():
        assert '"_id" : 0, ' in v and '"uid" : 20481663' in v, v[:500]
    shards = []
    for v in explains:
        m = re.search(r'"winningPlan" : \{ "stage" : "SINGLE_SHARD", "shards" : \[ \{ "shardName" : "(shard\d)"', v)
        assert m and v.count('"shardName"') == 1, v[:800]
        shards.append(m.group(1))
    print("  targeted finds answered by %s" % ", ".join(shards))
    assert shards[1] == "shard1", shards   # uid 86752192: the chunk moveChunk just moved


if __name__ == "__main__":
    main()
