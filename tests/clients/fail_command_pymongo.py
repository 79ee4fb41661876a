#!/usr/bin/python3
"""
fail_command_pymongo.py — failCommand as drivers' test suites use it, seen by pymongo
(Debian's python3-pymongo 3.11) through a minishard router's wire port:

    /usr/bin/python3 tests/clients/fail_command_pymongo.py mongodb://127.0.0.1:PORT/

closeConnection and a labelled errorCode make the driver retry an insert once (and give up
when the point fires twice, or when errorLabels is []), writeConcernError is reported on
an applied insert (and retried when labelled), appName fails and blocks only the client
of that name, and a failed hello reaches the driver's monitor. Each check prints `OK
<name>` or `FAIL <name>: <why>`; the last line is `FAILCMD DONE passed=N failed=M`.
"""
import sys
import threading
import time
import traceback

from pymongo import MongoClient, monitoring
from pymongo.errors import (AutoReconnect, ConnectionFailure, DuplicateKeyError,
                            OperationFailure, WriteConcernError)

URL = sys.argv[1]
results = {"passed": 0, "failed": 0}
CHECKS = []


class Inserts(monitoring.CommandListener):
    """Counts the insert commands a client sends (a retry is a second one)."""

    def __init__(self):
        self.n = 0

    def started(self, event):
        if event.command_name == "insert":
            self.n += 1

    def succeeded(self, event):
        pass

    def failed(self, event):
        pass


class Heartbeats(monitoring.ServerHeartbeatListener):
    def __init__(self):
        self.failures = []

    def started(self, event):
        pass

    def succeeded(self, event):
        pass

    def failed(self, event):
        self.failures.append(event.reply)


def client(app, *listeners, **kw):
    return MongoClient(URL, appname=app, event_listeners=list(listeners), retryWrites=True,
                       serverSelectionTimeoutMS=10000, connectTimeoutMS=5000,
                       socketTimeoutMS=30000, **kw)


admin = client("failcmd-admin")


def fail(mode, **data):
    """configureFailPoint failCommand; returns the point's count before this call."""
    cmd = {"configureFailPoint": "failCommand", "mode": mode}
    if data:
        cmd["data"] = data
    return admin.admin.command(cmd)["count"]


def off():
    return fail("off")


def check(fn):
    CHECKS.append(fn)
    return fn


def eq(got, want, what=""):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def fresh(name):
    coll = admin.failcmd[name]
    coll.drop()
    return coll


@check
def close_connection_retried_once():
    fresh("close1")
    ins = Inserts()
    c = client("failcmd-close", ins)
    fail({"times": 1}, failCommands=["insert"], closeConnection=True)
    c.failcmd.close1.insert_one({"_id": 1, "x": 1})
    eq(ins.n, 2, "inserts sent (the first lost with its connection, then the retry)")
    eq(admin.failcmd.close1.count_documents({"_id": 1}), 1, "documents")


@check
def close_connection_twice_gives_up():
    fresh("close2")
    ins = Inserts()
    c = client("failcmd-close2", ins)
    fail({"times": 2}, failCommands=["insert"], closeConnection=True)
    try:
        c.failcmd.close2.insert_one({"_id": 1})
        raise AssertionError("insert succeeded through two closed connections")
    except ConnectionFailure:
        pass
    eq(ins.n, 2, "inserts sent (one retry, no more)")
    eq(admin.failcmd.close2.count_documents({}), 0, "documents (the command never ran)")


@check
def shutdown_in_progress_labelled_and_retried():
    fresh("sip")
    ins = Inserts()
    c = client("failcmd-sip", ins)
    fail({"times": 1}, failCommands=["insert"], errorCode=91)
    c.failcmd.sip.insert_one({"_id": 1})
    eq(ins.n, 2, "inserts sent")
    eq(admin.failcmd.sip.count_documents({}), 1, "documents")


@check
def empty_error_labels_not_retried():
    fresh("nolabel")
    ins = Inserts()
    c = client("failcmd-nolabel", ins)
    fail({"times": 1}, failCommands=["insert"], errorCode=91, errorLabels=[])
    try:
        c.failcmd.nolabel.insert_one({"_id": 1})
        raise AssertionError("insert succeeded")
    except (OperationFailure, AutoReconnect) as e:
        code = getattr(e, "code", None) or (e.details or {}).get("code")
        eq(code, 91, "error code")
    eq(ins.n, 1, "inserts sent (no retry without the label)")


@check
def write_concern_error_reported():
    fresh("wce")
    ins = Inserts()
    c = client("failcmd-wce", ins)
    fail({"times": 1}, failCommands=["insert"],
         writeConcernError={"code": 100, "codeName": "UnsatisfiableWriteConcern",
                            "errmsg": "Not enough data-bearing nodes"})
    try:
        c.failcmd.wce.insert_one({"_id": 1})
        raise AssertionError("no writeConcernError reported")
    except WriteConcernError as e:
        eq(e.code, 100, "writeConcernError code")
    eq(ins.n, 1, "inserts sent")
    eq(admin.failcmd.wce.count_documents({"_id": 1}), 1, "documents (the insert ran)")


@check
def labelled_write_concern_error_retried():
    fresh("wce2")
    ins = Inserts()
    c = client("failcmd-wce2", ins)
    # pymongo 3.11 reads labels of a writeConcernError only inside its document (later
    # pymongos also read the reply's top-level errorLabels, which the server adds), so the
    # label goes where the drivers' retryable-writes spec tests put it; the Node check
    # covers the server-added one.
    fail({"times": 1}, failCommands=["insert"],
         writeConcernError={"code": 91, "codeName": "ShutdownInProgress", "errmsg": "stop",
                            "errorLabels": ["RetryableWriteError"]})
    try:
        c.failcmd.wce2.insert_one({"_id": 1})
    except DuplicateKeyError:
        pass   # the retry ran the insert again: without a retry record it meets the first
    eq(ins.n, 2, "inserts sent (the labelled writeConcernError was retried)")
    eq(admin.failcmd.wce2.count_documents({"_id": 1}), 1, "documents")


@check
def app_name_filter():
    fresh("app").insert_one({"_id": 1})
    a = client("failcmd-appA")
    b = client("failcmd-appB")
    n0 = fail("alwaysOn", failCommands=["find"], errorCode=2, appName="failcmd-appA")
    try:
        try:
            a.failcmd.app.find_one({})
            raise AssertionError("appA's find was not failed")
        except OperationFailure as e:
            eq(e.code, 2, "appA's error")
        eq(b.failcmd.app.find_one({}), {"_id": 1}, "appB's find")
        eq(admin.failcmd.app.find_one({}), {"_id": 1}, "admin's find")
    finally:
        n1 = off()
    eq(n1 - n0, 1, "times the point fired (appA's find only)")


@check
def block_connection_only_matching():
    fresh("block").insert_one({"_id": 1})
    a = client("failcmd-blockA")
    b = client("failcmd-blockB")
    a.failcmd.block.find_one({})   # connections and handshakes before the clock starts
    b.failcmd.block.find_one({})
    n0 = fail("alwaysOn", failCommands=["find"], blockConnection=True, blockTimeMS=700,
              appName="failcmd-blockA")
    try:
        t0 = time.monotonic()
        eq(a.failcmd.block.find_one({}), {"_id": 1}, "appA's find (delayed, then run)")
        took = time.monotonic() - t0
        if took < 0.65:
            raise AssertionError("appA's find took %.3f s, blockTimeMS was 700" % took)
        for _ in range(3):
            eq(b.failcmd.block.find_one({}), {"_id": 1}, "appB's find")
    finally:
        n1 = off()
    eq(n1 - n0, 1, "times the point fired (appB's finds never entered it)")


@check
def failed_hello_reaches_the_monitor():
    hb = Heartbeats()
    c = client("failcmd-monitor", hb, heartbeatFrequencyMS=500)
    c.admin.command("ping")
    fail("alwaysOn", failCommands=["hello", "isMaster"], errorCode=91, appName="failcmd-monitor")
    try:
        deadline = time.monotonic() + 15
        while not hb.failures and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        off()
    if not hb.failures:
        raise AssertionError("no failed heartbeat in 15 s")
    if "91" not in str(hb.failures[0]) and "ShutdownInProgress" not in str(hb.failures[0]):
        raise AssertionError("heartbeat failed with %r" % (hb.failures[0],))


def main():
    for fn in CHECKS:
        try:
            fn()
            results["passed"] += 1
            print("OK %s" % fn.__name__, flush=True)
        except Exception as e:  # noqa: BLE001 — a check's failure is reported, not fatal
            results["failed"] += 1
            print("FAIL %s: %s" % (fn.__name__, e), flush=True)
            traceback.print_exc()
            try:
                off()
            except Exception:  # noqa: BLE001
                pass
    print("FAILCMD DONE passed=%d failed=%d" % (results["passed"], results["failed"]), flush=True)
    return 0 if results["failed"] == 0 else 1


if __name__ == "__main__":
    threading.current_thread().name = "failcmd"
    sys.exit(main())
