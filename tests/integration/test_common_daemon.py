"""
test_common_daemon.py — what every daemon does, checked on a real bin/configsvr: exactly
one `ready url=` line, the common commands over tcp, error replies and their log lines,
test-only commands hidden without --enable-test-commands, failCommand from a client,
and a clean stop on SIGTERM even while a command is stalled.
"""
import signal
import time

from lib import *


@test
def test_ready_and_common_commands(t):
    c = t.configsvr()
    log = c.log_text()
    assert log.count(" ready url=") == 1, log
    assert (" ready url=%s " % c.url) in log, log
    cl = c.client()
    h = cl.ok({"hello": 1})
    assert h["isWritablePrimary"] is True and h["configsvr"] == 2, h
    assert h["maxMessageSizeBytes"] == 48000000 and h["maxWireVersion"] == 21, h
    assert cl.ok({"ping": 1})["ok"] == 1
    assert cl.ok({"buildInfo": 1})["version"] == "7.0.0"
    st = cl.ok({"serverStatus": 1})
    assert st["process"] == "configsvr" and st["pid"] == c.pid, st
    assert "failpoints" in st, st
    assert "ping" in cl.ok({"listCommands": 1})["commands"]
    r = cl.err({"noSuchCommand": 1}, code=59)
    assert r["errmsg"] == "no such command: 'noSuchCommand'", r
    assert r["codeName"] == "CommandNotFound", r
    wait_until(lambda: "cmd=noSuchCommand code=59" in c.log_text(), 5, "error log line")


@test
def test_test_commands_hidden(t):
    c = t.configsvr(test_commands=False)
    cl = c.client()
    cl.err({"configureFailPoint": "failCommand", "mode": "off"}, code=59)
    assert "configureFailPoint" not in cl.ok({"listCommands": 1})["commands"]
    assert "failpoints" not in cl.ok({"serverStatus": 1})


@test
def test_fail_command(t):
    c = t.configsvr()
    cl = c.client()
    cl.ok({"configureFailPoint": "failCommand", "mode": {"times": 1},
           "data": {"failCommands": ["buildInfo"], "errorCode": 96,
                    "failInternalCommands": True}})
    cl.ok({"ping": 1})
    cl.err({"buildInfo": 1}, code=96)
    cl.ok({"buildInfo": 1})


@test
def test_sigterm_while_stalled(t):
    c = t.configsvr()
    cl = c.client()
    cl.ok({"configureFailPoint": "failCommand", "mode": "alwaysOn",
           "data": {"failCommands": ["ping"], "blockConnection": True, "blockTimeMS": 1500,
                    "failInternalCommands": True}})
    slow = c.client(timeout_ms=10000)
    slow.p.stdin.write(dumps({"ping": 1}) + "\n")   # in flight, stalled 1.5 s
    slow.p.stdin.flush()
    time.sleep(0.3)
    t0 = time.time()
    c.proc.send_signal(signal.SIGTERM)
    rc = c.proc.wait(10)
    took = time.time() - t0
    assert rc == 0, rc
    assert took < 5, took                           # the stalled command finished first
    log = c.log_text()
    assert "shutting down signal=SIGTERM" in log and " stopped" in log, log[-1000:]


if __name__ == "__main__":
    main()
