#!/usr/bin/env python3
"""The balancer's questions and per-collection switch with real processes
(configsvr/cmd_bal.c, bal_snapshot.c, cli/ctl_explain.c): balancerCollectionStatus says
compliant / chunksImbalance / zoneViolation / draining and NamespaceNotSharded as MongoDB
7.0 does; balancerExplain's verdict follows what stops the balancer (balanced, move with
the next move, stopped, outside the activeWindow, noBalance); noBalance written as mongosh's
sh.disableBalancing sends it (an update of config.collections through the router) keeps a
running balancer off the collection and $unset lets it balance; only noBalance may be
written there; `shardctl explain-balance` prints the verdict, the table and the moves."""
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import BIN, Client, fp, fp_wait, main, test, wait_until  # noqa: E402

DB = "app"
NS = "app.c"


def settings(c, u):
    c.ok({"update": "settings", "$db": "config",
          "updates": [{"q": {"_id": "balancer"}, "u": u, "upsert": True}]})


def status(c, ns=NS):
    return c.ok({"balancerCollectionStatus": ns, "$db": "admin"})


def explain(c, ns=NS):
    return c.ok({"balancerExplain": ns, "$db": "admin"})


def no_balance(c, ns, u, **extra):
    stmt = {"q": {"_id": ns}, "u": u, "upsert": False}
    stmt.update(extra)
    return c.cmd({"update": "collections", "$db": "config", "updates": [stmt]})


def counts(c, ns, shards):
    n = {s: 0 for s in shards}
    for ch in c.ok({"getRoutingTable": ns, "$db": "admin"})["chunks"]:
        n[ch["shard"]] += 1
    return n


def shard_split(c, ns, points):
    c.ok({"shardCollection": ns, "key": {"k": 1}, "$db": "admin"})
    for k in points:
        c.ok({"split": ns, "middle": {"k": k}, "$db": "admin"})


def shardctl(router, *args):
    return subprocess.run([os.path.join(BIN, "shardctl"), "--host", router.url] + list(args),
                          capture_output=True, text=True, timeout=30)


@test
def test_status_and_explain_follow_the_distribution_and_the_settings(t):
    cl = t.cluster(shards=3)   # the balancer's rounds are an hour apart: nothing moves
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    # Not sharded: absent, unsharded in a sharded db; not a namespace.
    c.err({"balancerCollectionStatus": "app.nosuch", "$db": "admin"}, 118)
    c.err({"balancerExplain": "other.nosuch", "$db": "admin"}, 118)
    c.err({"balancerCollectionStatus": "app", "$db": "admin"}, 73)

    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    r = status(c)
    assert r["balancerCompliant"] is True and "firstComplianceViolation" not in r, r
    assert isinstance(r["chunkSize"], float) and r["chunkSize"] > 0, r
    e = explain(c)
    assert e["verdict"] == "balanced", e
    assert e["policy"]["next"] == [] and e["balancer"]["enabled"] is True, e

    # Nine chunks on shard0: imbalanced, and the explain names the next move.
    for k in range(10, 90, 10):
        c.ok({"split": NS, "middle": {"k": k}, "$db": "admin"})
    r = status(c)
    assert r["balancerCompliant"] is False and r["firstComplianceViolation"] == "chunksImbalance", r
    e = explain(c)
    assert e["verdict"] == "move", e
    rows = {s["shard"]: s for s in e["policy"]["shards"]}
    assert rows["shard0"]["chunks"] == 9 and rows["shard1"]["chunks"] == 0, e
    nxt = e["policy"]["next"]
    assert nxt and nxt[0]["from"] == "shard0" and nxt[0]["reason"] == "chunksImbalance", e
    assert e["policy"]["chunkCountDifference"] == 9 and e["policy"]["threshold"] == 2, e

    # shardctl prints it readably (and raw with --json).
    p = shardctl(cl.routers[0], "explain-balance", NS)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "app.c: move" in out and "chunk count difference 9 (moves from 2)" in out, out
    assert "next moves:" in out and "shard0 -> shard" in out and "(chunksImbalance)" in out, out
    assert any(line.split()[:3] == ["shard0", "9", "0"] for line in out.splitlines()), out
    p = shardctl(cl.routers[0], "explain-balance", "--json", NS)
    assert p.returncode == 0 and '"verdict" : "move"' in p.stdout, p.stdout
    p = shardctl(cl.routers[0], "status")
    assert "balancerCompliant: false (chunksImbalance)" in p.stdout, p.stdout
    p = shardctl(cl.routers[0], "explain-balance", "app.nosuch")
    assert p.returncode == 1 and "118" in p.stderr, (p.returncode, p.stderr)

    # Stopped: the verdict says so; the policy still shows what it would move.
    settings(c, {"$set": {"stopped": True, "mode": "off"}})
    e = explain(c)
    assert e["verdict"] == "stopped" and e["balancer"]["enabled"] is False, e
    assert e["policy"]["next"], e
    assert status(c)["firstComplianceViolation"] == "chunksImbalance"

    # Outside the activeWindow (a window that starts two hours from now, local time).
    now = time.localtime()
    start = "%02d:%02d" % ((now.tm_hour + 2) % 24, now.tm_min)
    stop = "%02d:%02d" % ((now.tm_hour + 3) % 24, now.tm_min)
    settings(c, {"$set": {"stopped": False, "mode": "full", "activeWindow": {"start": start, "stop": stop}}})
    e = explain(c)
    assert e["verdict"] == "outsideActiveWindow", e
    assert e["balancer"]["activeWindow"] == {"start": start, "stop": stop}, e
    assert e["balancer"]["inWindow"] is False, e
    p = shardctl(cl.routers[0], "explain-balance", NS)
    assert "outside" in p.stdout and start in p.stdout, p.stdout
    settings(c, {"$set": {"stopped": True, "mode": "off"}, "$unset": {"activeWindow": 1}})

    # Balanced by hand (3/3/3), then a zone range on shard1 over chunks of shard0.
    for k, to in ((0, "shard1"), (10, "shard1"), (20, "shard1"), (30, "shard2"), (40, "shard2"),
                  (50, "shard2")):
        c.ok({"moveChunk": NS, "find": {"k": k}, "to": to, "$db": "admin"})
    r = status(c)
    assert r["balancerCompliant"] is True, r
    c.ok({"addShardToZone": "shard1", "zone": "Z", "$db": "admin"})
    c.ok({"updateZoneKeyRange": NS, "min": {"k": 60}, "max": {"k": 70}, "zone": "Z", "$db": "admin"})
    r = status(c)
    assert r["balancerCompliant"] is False and r["firstComplianceViolation"] == "zoneViolation", r
    # A zone bound inside a chunk is a violation too (a split is due there).
    c.ok({"updateZoneKeyRange": NS, "min": {"k": 60}, "max": {"k": 70}, "zone": None, "$db": "admin"})
    assert status(c)["balancerCompliant"] is True
    c.ok({"updateZoneKeyRange": NS, "min": {"k": 1}, "max": {"k": 5}, "zone": "Z", "$db": "admin"})
    assert status(c)["firstComplianceViolation"] == "zoneViolation"
    c.ok({"updateZoneKeyRange": NS, "min": {"k": 1}, "max": {"k": 5}, "zone": None, "$db": "admin"})
    assert status(c)["balancerCompliant"] is True

    # A draining shard holding chunks.
    c.ok({"removeShard": "shard2", "$db": "admin"})
    r = status(c)
    assert r["balancerCompliant"] is False and r["firstComplianceViolation"] == "draining", r
    e = explain(c)
    assert {s["shard"]: s["draining"] for s in e["policy"]["shards"]}["shard2"] is True, e


@test
def test_no_balance_update_stops_and_resumes_a_running_balancer(t):
    cl = t.cluster(2, shard_extra=["--orphan-cleanup-delay-ms", "0"],
                   config_extra=["--balancer-idle-ms", "150", "--balancer-throttle-ms", "50"])
    cfg, ss, rt, c = cl.config, cl.shards, cl.routers[0], cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})

    # sh.disableBalancing(NS) before the chunks exist.
    r = no_balance(c, NS, {"$set": {"noBalance": True}})
    assert r["ok"] == 1 and r["n"] == 1 and r["nModified"] == 1, r
    r = no_balance(c, NS, {"$set": {"noBalance": True}})
    assert r["ok"] == 1 and r["n"] == 1 and r["nModified"] == 0, r
    doc = c.find_all("collections", "config", {"_id": NS})[0]
    assert doc.get("noBalance") is True, doc
    for k in range(10, 60, 10):
        c.ok({"split": NS, "middle": {"k": k}, "$db": "admin"})
    rounds0 = c.ok({"balancerStatus": 1, "$db": "admin"})["numBalancerRounds"]
    wait_until(lambda: c.ok({"balancerStatus": 1, "$db": "admin"})["numBalancerRounds"] >= rounds0 + 4,
               what="balancer rounds while noBalance")
    assert counts(c, NS, ["shard0", "shard1"]) == {"shard0": 6, "shard1": 0}
    e = explain(c)
    assert e["verdict"] == "noBalance" and e["collection"]["noBalance"] is True, e
    assert status(c)["firstComplianceViolation"] == "chunksImbalance"

    # Only noBalance (and enableAutoMerge) may be written, by _id, without upsert.
    for u, code in (({"$set": {"key": {"x": 1}}}, 20), ({"$inc": {"noBalance": 1}}, 20),
                    ({"noBalance": False}, 20), ({"$set": {"noBalance": 1}}, 2),
                    ({"$set": {"noBalance": False}, "$unset": {"noBalance": 1}}, 40)):
        r = no_balance(c, NS, u)
        assert r["ok"] == 1 and r["writeErrors"][0]["code"] == code, (u, r)
    r = c.cmd({"update": "collections", "$db": "config",
               "updates": [{"q": {"_id": NS}, "u": {"$set": {"noBalance": False}}, "upsert": True}]})
    assert r["writeErrors"][0]["code"] == 20, r
    r = c.cmd({"update": "collections", "$db": "config",
               "updates": [{"q": {"key": {"k": 1}}, "u": {"$set": {"noBalance": False}}}]})
    assert r["writeErrors"][0]["code"] == 20, r
    r = no_balance(c, "app.nosuch", {"$set": {"noBalance": False}})
    assert r["ok"] == 1 and r["n"] == 0 and r["nModified"] == 0, r
    r = c.cmd({"update": "chunks", "$db": "config", "updates": [{"q": {}, "u": {"$set": {"x": 1}}}]})
    assert r["ok"] == 0 and r["code"] == 20, r
    assert counts(c, NS, ["shard0", "shard1"]) == {"shard0": 6, "shard1": 0}

    # sh.enableBalancing(NS): $unset; the balancer evens the collection out.
    r = no_balance(c, NS, {"$unset": {"noBalance": 1}})
    assert r["ok"] == 1 and r["n"] == 1 and r["nModified"] == 1, r
    wait_until(lambda: counts(c, NS, ["shard0", "shard1"]) == {"shard0": 3, "shard1": 3},
               what="balanced after noBalance unset")
    wait_until(lambda: status(c)["balancerCompliant"] is True, what="compliant")
    assert explain(c)["verdict"] == "balanced"


@test
def test_explain_marks_the_shards_of_a_running_migration_busy(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    shard_split(c, NS, range(10, 60, 10))
    c.ok({"insert": "c", "$db": DB, "documents": [{"k": k} for k in range(0, 60, 5)]})
    e = explain(c)
    assert e["verdict"] == "move" and e["migrationsInProgress"] == [], e
    donor = cl.shards[0].client()
    n0 = fp(donor, "moveChunkHangAtStep3")
    res = {}

    def move():
        res["r"] = Client(cl.routers[0].url, timeout_ms=60000).cmd(
            {"moveChunk": NS, "find": {"k": 0}, "to": "shard1", "$db": "admin"})
    th = threading.Thread(target=move, daemon=True)
    th.start()
    try:
        fp_wait(donor, "moveChunkHangAtStep3", n0 + 1)
        e = explain(c)
        assert [(m["fromShard"], m["toShard"]) for m in e["migrationsInProgress"]] == [("shard0", "shard1")], e
        assert all(s["busy"] for s in e["policy"]["shards"]), e
        assert e["policy"]["next"] == [] and e["verdict"] == "shardBusy", e
        p = shardctl(cl.routers[0], "explain-balance", NS)
        assert "migrating now: app.c shard0 -> shard1" in p.stdout, p.stdout
    finally:
        fp(donor, "moveChunkHangAtStep3", "off")
        th.join(60)
    assert res["r"].get("ok") == 1, res
    e = explain(c)
    assert e["migrationsInProgress"] == [] and e["verdict"] == "move", e


if __name__ == "__main__":
    main()
