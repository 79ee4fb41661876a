#!/usr/bin/env python3
"""
test_pymongo.py — pymongo (Debian's python3-pymongo 3.11, run with /usr/bin/python3)
against minishard over MongoDB's wire protocol: tests/clients/
pymongo_checks.py runs CRUD, bulk_write ordered and unordered with per-op errors, cursors
in batches of 7 over 10,000 documents, count_documents, estimated_document_count,
distinct, aggregate, a unique index (DuplicateKeyError 11000), find_one_and_update,
shardCollection and balancerStatus — against a router of a 3-shard cluster (a sharded
and an unsharded collection) and against a standalone shard. This file may run under any
python; the checks always run under /usr/bin/python3 in a subprocess.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKS = os.path.join(ROOT, "tests", "clients", "pymongo_checks.py")


def have_pymongo():
    return subprocess.run(["/usr/bin/python3", "-c", "import pymongo"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def run_checks(port, mode):
    url = "mongodb://127.0.0.1:%d/?directConnection=true" % port
    p = subprocess.run(["/usr/bin/python3", CHECKS, url, mode], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    for line in p.stdout.splitlines():
        if line.startswith(("FAIL", "PYMONGO DONE")):
            print("  " + line)
    assert p.returncode == 0 and "PYMONGO DONE" in p.stdout and " failed=0" in p.stdout, \
        "pymongo checks failed (%s):\n%s" % (mode, p.stdout[-4000:])


@test
def test_pymongo_router(t):
    """pymongo_checks.py against a router of a 3-shard cluster."""
    assert have_pymongo(), "python3-pymongo is not installed (scripts/deps.sh installs it)"
    cl, wp = t.wire_cluster(3)
    run_checks(wp, "router")


@test
def test_pymongo_shard(t):
    """pymongo_checks.py against a standalone shard (a mongod to the driver)."""
    assert have_pymongo(), "python3-pymongo is not installed (scripts/deps.sh installs it)"
    wp = free_ports(1)[0]
    t.shardd("shard0", extra=["--wire-port", str(wp)])
    run_checks(wp, "shard")


if __name__ == "__main__":
    main()
