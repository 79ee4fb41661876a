"""
test_shardctl_load.py — `shardctl load`'s keys. README's walkthrough 2, which uses it, runs
as written in test_docs_run.py (its expect lines check the finds and explains).

The keys: `load --key F` sets F uniformly in [0, 1e8). Of n = 20,000 documents the share
above the middle (50,000,000) is binomial with p = 0.5, sd = sqrt(p(1-p)/n) = 0.00354; the
bound 0.5 +- 0.025 is 7 sd, so a uniform draw fails it with probability about 3e-12 (and
the load's seed is fixed: the same run every time). The old draw, a modulo of a 28-bit
number, put 43 % of the keys above the middle.
"""
import subprocess

from lib import *

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


if __name__ == "__main__":
    main()
