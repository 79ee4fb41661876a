#!/usr/bin/env python3
"""
test_chaos.py — make test's chaos soak: tests/chaos/soak.py for
T_CHAOS_S seconds (default 120) with a seed that changes every run and is printed (T_SEED
reruns one; so does `make chaos SECONDS=120 SEED=S`). It passes when the history checker
(tests/chaos/history.py) finds no anomaly: every acknowledged write applied exactly once
(retryable writes answered after resends too, with the answer one execution gives),
multi-write counters exact, no read with a duplicate or a missing committed document, the
routers agreeing, checkMetadataConsistency (with indexes) clean, and once quiet no
migration, critical section, coordinator or range-deletion task left, no orphan, chunks
tiling the key space. Network partitions only when run as root with tests/chaos/netns.py.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "chaos"))
from lib import *  # noqa: E402,F403
import soak        # noqa: E402


@test
def test_chaos_soak(t):
    s = seed("chaos")
    secs = int(os.environ.get("T_CHAOS_S", "120"))
    assert soak.run(s, secs, net_mode=os.environ.get("T_CHAOS_NET", "auto")), \
        "chaos soak found anomalies (seed %d; rerun: make chaos SECONDS=%d SEED=%d)" % (s, secs, s)


if __name__ == "__main__":
    main()
