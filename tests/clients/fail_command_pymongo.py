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


def insert_under(name, mode, data, inserts, docs, raises=None, code=None, tolerate=()):
    """One insert_one({_id: 1}) by a fresh retryWrites client while failCommand (mode,
    data) is on: `inserts` insert commands sent (2 = retried once), `docs` documents after,
    and the exception it raises (None: it succeeds; a tuple: any of them) with its code;
    `tolerate`: exceptions accepted in place of a success."""
    fresh(name)
    ins = Inserts()
    c = client("failcmd-" + name, ins)
    fail(mode, failCommands=["insert"], **data)
    try:
        c.failcmd[name].insert_one({"_id": 1})
        if raises:
            raise AssertionError("insert succeeded, expected %r" % (raises,))
    except AssertionError:
        raise
    except tolerate:
        pass
    except Exception as e:  # noqa: BLE001 — compared with what the case expects
        if not raises or not isinstance(e, raises):
            raise
        if code is not None:
            eq(getattr(e, "code", None) or (getattr(e, "details", None) or {}).get("code"),
               code, "error code")
    eq(ins.n, inserts, "insert commands sent")
    eq(admin.failcmd[name].count_documents({}), docs, "documents")


@check
def close_connection_retried_once():
    insert_under("close1", {"times": 1}, {"closeConnection": True}, inserts=2, docs=1)


@check
def close_connection_twice_gives_up():
    # both attempts lose their connection before the command runs
    insert_under("close2", {"times": 2}, {"closeConnection": True}, inserts=2, docs=0,
                 raises=ConnectionFailure)


@check
def shutdown_in_progress_labelled_and_retried():
    insert_under("sip", {"times": 1}, {"errorCode": 91}, inserts=2, docs=1)


@check
def empty_error_labels_not_retried():
    insert_under("nolabel", {"times": 1}, {"errorCode": 91, "errorLabels": []}, inserts=1,
                 docs=0, raises=(OperationFailure, AutoReconnect), code=91)


@check
def write_concern_error_reported():
    wce = {"code": 100, "codeName": "UnsatisfiableWriteConcern", "errmsg": "no nodes"}
    insert_under("wce", {"times": 1}, {"writeConcernError": wce}, inserts=1, docs=1,
                 raises=WriteConcernError, code=100)


@check
def labelled_write_concern_error_retried():
    # pymongo 3.11 reads labels of a writeConcernError only inside its document (later
    # pymongos also read the reply's top-level errorLabels, which the server adds), so the
    # label goes where the drivers' retryable-writes spec tests put it; the Node check
    # covers the server-added one. The retry runs the insert again: without a retry
    # record it may meet the first (DuplicateKeyError).
    wce = {"code": 91, "codeName": "ShutdownInProgress", "errmsg": "stop",
           "errorLabels": ["RetryableWriteError"]}
    insert_under("wce2", {"times": 1}, {"writeConcernError": wce}, inserts=2, docs=1,
                 tolerate=DuplicateKeyError)


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
