#!/usr/bin/env python3
"""
test_fail_command.py — failCommand as drivers' test suites use it, through real drivers
against a router of a real cluster: pymongo (Debian's python3-pymongo 3.11, under
/usr/bin/python3: tests/clients/fail_command_pymongo.py) and the Node driver (npm
`mongodb`: tests/clients/fail_command_node.js). Both check closeConnection (retried once,
given up after two), errorCode 91 with the server's RetryableWriteError label (retried;
not with errorLabels: []), writeConcernError on an applied insert, appName filtering of
errors and (pymongo) of blockConnection, and a failed hello seen by the driver's monitor.
The last check runs over NNG: an internal client is failed only with failInternalCommands.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY_CHECKS = os.path.join(ROOT, "tests", "clients", "fail_command_pymongo.py")
NODE_CHECKS = os.path.join(ROOT, "tests", "clients", "fail_command_node.js")


def run_checks(argv, env=None):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=180, env=env)
    for line in p.stdout.splitlines():
        if line.startswith(("FAIL", "FAILCMD DONE")):
            print("  " + line)
    assert p.returncode == 0 and "FAILCMD DONE" in p.stdout and " failed=0" in p.stdout, \
        "driver checks failed:\n%s" % p.stdout[-6000:]


@test
def test_pymongo(t):
    """pymongo's retryable writes, writeConcernError, appName and monitor meet failCommand."""
    cl, wp = t.wire_cluster(1)
    run_checks(["/usr/bin/python3", PY_CHECKS, "mongodb://127.0.0.1:%d/?directConnection=true" % wp])
    # closeConnection fired three times (once, then twice): each a connection the router
    # closed on purpose, counted apart from the other reasons
    closed = cl.client().ok({"serverStatus": 1, "$db": "admin"})["connections"]["wire"]["closedByServer"]
    assert closed["fail_command"] == 3, closed
    assert "reason=fail_command" in cl.routers[0].log_text()


@test
def test_node_driver(t):
    """The Node driver's retryable writes, writeConcernError, appName and monitor meet
    failCommand."""
    mods = node_driver_dir()
    assert mods, "no Node driver in build/nodedriver (scripts/deps.sh --nodedriver installs it)"
    cl, wp = t.wire_cluster(1)
    env = dict(os.environ, NODE_PATH=mods)
    run_checks(["node", NODE_CHECKS, "mongodb://127.0.0.1:%d/?directConnection=true" % wp], env)


@test
def test_internal_clients(t):
    """Over NNG (minishard's own transport) a client is internal: failed only with
    failInternalCommands: true — the router's forwarded insert, too."""
    cl, wp = t.wire_cluster(1)
    c = cl.client()
    s0 = cl.shards[0].client()
    c.ok({"insert": "c", "documents": [{"_id": 0}], "$db": "fc"})
    fp(c, "failCommand", "alwaysOn", failCommands=["find"], errorCode=2)
    c.ok({"find": "c", "$db": "fc"})
    fp(c, "failCommand", "alwaysOn", failCommands=["find"], errorCode=2, failInternalCommands=True)
    c.err({"find": "c", "$db": "fc"}, 2)
    fp(c, "failCommand", "off")
    # the shard's point: the router's forwarded insert is an internal command there
    fp(s0, "failCommand", "alwaysOn", failCommands=["insert"], errorCode=2)
    c.ok({"insert": "c", "documents": [{"_id": 1}], "$db": "fc"})
    fp(s0, "failCommand", "alwaysOn", failCommands=["insert"], errorCode=2,
       failInternalCommands=True)
    r = c.cmd({"insert": "c", "documents": [{"_id": 2}], "$db": "fc"})
    assert r.get("ok") == 0 or r.get("writeErrors"), r
    fp(s0, "failCommand", "off")


if __name__ == "__main__":
    main()
