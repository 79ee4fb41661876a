#!/usr/bin/env python3
"""
long_netns.py — make check-long's share of test_netns.py: the two cuts placed with a
failpoint on either side of the recipient's _recvChunkStart (the start arriving after the
heal, behind the donor's abort; the start running during the cut). Each waits out the
donor's 20 s deadline, so make test runs only the failpoint-free cut.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_netns  # noqa: E402  (registers its tests)
from lib import main  # noqa: E402

if __name__ == "__main__":
    if len(sys.argv) == 1:
        sys.argv += list(test_netns.LONG_ONLY)
    main()
