#!/usr/bin/env python3
"""
long_chaos.py — make check-long's chaos soak: tests/chaos/soak.py for
T_CHAOS_S seconds (default 1800, 30 minutes) with a fresh printed seed (T_SEED reruns one),
under the same history checker as test_chaos.py's 2-minute soak.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "chaos"))
from lib import *  # noqa: E402,F403
import soak        # noqa: E402


@test
def test_chaos_soak_30_minutes(t):
    s = seed("chaos")
    secs = int(os.environ.get("T_CHAOS_S", "1800"))
    assert soak.run(s, secs, net_mode=os.environ.get("T_CHAOS_NET", "auto")), \
        "chaos soak found anomalies (seed %d; rerun: make chaos SECONDS=%d SEED=%d)" % (s, secs, s)


if __name__ == "__main__":
    main()
