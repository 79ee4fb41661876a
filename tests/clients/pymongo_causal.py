#!/usr/bin/python3
"""
pymongo_causal.py — pymongo's causally consistent sessions (the driver's causal-consistency
specification) against two routers of one minishard cluster. Run with Debian's
python3-pymongo (3.11):

    /usr/bin/python3 tests/clients/pymongo_causal.py mongodb://ROUTER0/ mongodb://ROUTER1/

The collection app.cc must exist (sharded on {k: 1}). Each check prints `OK <name>` or
`FAIL <name>: <why>`; the last line is `CAUSAL DONE passed=N failed=M`, exit 0 only when
nothing failed. tests/integration/test_cluster_time.py runs it.
"""
import sys
import traceback

from bson.timestamp import Timestamp
from pymongo import MongoClient, monitoring

URL0, URL1 = sys.argv[1], sys.argv[2]
results = {"passed": 0, "failed": 0}
CHECKS = []


class Listener(monitoring.CommandListener):
    """Every command pymongo sends and every reply it gets, with the server's address."""

    def __init__(self):
        self.cmds = []
        self.replies = []

    def started(self, event):
        self.cmds.append((event.command_name, event.command, event.connection_id))

    def succeeded(self, event):
        self.replies.append((event.command_name, event.reply))

    def failed(self, event):
        pass


def client(url, listener=None, **kw):
    return MongoClient(url, serverSelectionTimeoutMS=5000, connectTimeoutMS=5000,
                       socketTimeoutMS=30000, event_listeners=[listener] if listener else [],
                       **kw)


def check(fn):
    CHECKS.append(fn)
    return fn


def last_find(listener):
    finds = [c for c in listener.cmds if c[0] == "find"]
    assert finds, "no find was sent"
    return finds[-1][1]


@check
def replies_carry_cluster_time():
    lst = Listener()
    c = client(URL0, lst)
    c.admin.command("ping")
    c.app.cc.insert_one({"k": -1})
    for name, reply in lst.replies:
        assert "$clusterTime" in reply and "operationTime" in reply, (name, reply)
        assert isinstance(reply["operationTime"], Timestamp), reply
        assert reply["operationTime"] <= reply["$clusterTime"]["clusterTime"], reply
    assert any(n == "ping" for n, _ in lst.replies)


@check
def session_carried_from_one_router_to_the_other():
    """The causal-consistency spec's way across clients: advance the second session to the
    first one's operationTime and clusterTime; its first read carries afterClusterTime."""
    a, lst = client(URL0), Listener()
    b = client(URL1, lst)
    with a.start_session(causal_consistency=True) as s1:
        a.app.cc.insert_one({"k": 1, "v": "written through router0"}, session=s1)
        assert s1.operation_time is not None and s1.cluster_time is not None, "no times"
        with b.start_session(causal_consistency=True) as s2:
            s2.advance_cluster_time(s1.cluster_time)
            s2.advance_operation_time(s1.operation_time)
            doc = b.app.cc.find_one({"k": 1}, session=s2)
            assert doc and doc["v"] == "written through router0", doc
            cmd = last_find(lst)
            rc = cmd.get("readConcern", {})
            assert rc.get("afterClusterTime") == s1.operation_time, cmd
            assert cmd["$clusterTime"]["clusterTime"] >= s1.cluster_time["clusterTime"], cmd
            assert s2.operation_time >= s1.operation_time


@check
def one_session_over_both_routers():
    """One client that knows both routers (mongos selection picks either for each
    operation): every read in the session sees the session's write before it."""
    lst = Listener()
    c = client([URL0.split("//")[1].rstrip("/"), URL1.split("//")[1].rstrip("/")], lst,
               localThresholdMS=10000)
    coll = c.app.cc
    with c.start_session(causal_consistency=True) as s:
        for i in range(20):
            coll.update_one({"k": 100 + i}, {"$set": {"round": i}}, upsert=True, session=s)
            written = s.operation_time   # the update's operationTime, from its router
            doc = coll.find_one({"k": 100 + i}, session=s)
            assert doc and doc["round"] == i, (i, doc)
            assert last_find(lst)["readConcern"]["afterClusterTime"] == written, last_find(lst)
    servers = {cid for name, _, cid in lst.cmds if name in ("find", "update")}
    assert len(servers) == 2, "every operation went to one router: %r" % servers


@check
def hello_carries_cluster_time():
    lst = Listener()
    c = client(URL1, lst)
    r = c.admin.command("hello")
    assert "$clusterTime" in r and isinstance(r["$clusterTime"]["clusterTime"], Timestamp), r
    assert len(r["$clusterTime"]["signature"]["hash"]) == 20, r


for fn in CHECKS:
    try:
        fn()
        results["passed"] += 1
        print("OK %s" % fn.__name__)
    except Exception:
        results["failed"] += 1
        print("FAIL %s: %s" % (fn.__name__, traceback.format_exc().strip().splitlines()[-1]))
        traceback.print_exc(file=sys.stdout)
print("CAUSAL DONE passed=%d failed=%d" % (results["passed"], results["failed"]))
sys.exit(1 if results["failed"] else 0)
