#!/usr/bin/env python3
"""Defragmentation and the auto-merger with real processes (configsvr/defrag.c,
bal_defrag.c, bal_merge.c, cat_defrag.c): configureCollectionBalancing's validation and
what it stores; a collection split into many small chunks spread over 3 shards is
defragmented through its three phases (the phase kept in config.collections across a
config server restart) to far fewer chunks with no document lost, and the flag, the phase
and the estimates are gone at the end — phase 2's migrations run in the balancer's rounds
(balancer.round), every merge, measure and phase change on its secondary thread
(balancer.defragmentation entries; the merge changelog counts no other merge);
a phase-2 migration failing with a non-retriable error sends the collection back to phase 1
(the round reports it, the secondary thread restarts the phase) and it still finishes;
mergeAllChunksOnShard by hand (runs, maxNumberOfChunksToMerge, the horizon, errors); the
auto-merger thread merges contiguous chunks, and not while settings automerge or the
collection's enableAutoMerge say no."""
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import fp, main, test, wait_until  # noqa: E402

DB = "app"
NS = "app.c"
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]


def kmin(ch):
    k = ch["min"]["k"]
    return k if isinstance(k, int) else -1   # MinKey


def chunks(c):
    """config.chunks of the one sharded collection of a test, in key order."""
    r = c.ok({"find": "chunks", "$db": "config", "filter": {}, "batchSize": 10000})
    return sorted(r["cursor"]["firstBatch"], key=kmin)


def coll_doc(c, ns=NS):
    r = c.ok({"find": "collections", "$db": "config", "filter": {"_id": ns}})["cursor"]["firstBatch"]
    return r[0] if r else None


def settings(c, _id, u):
    c.ok({"update": "settings", "$db": "config", "updates": [{"q": {"_id": _id}, "u": u, "upsert": True}]})


def changelog(c, what, ns=NS):
    return c.ok({"count": "changelog", "$db": "config", "query": {"what": what, "ns": ns}})["n"]


def defrag_steps(c):
    """The defragmentation steps of the balancer's secondary thread, oldest first."""
    rs = c.ok({"find": "actionlog", "$db": "config", "filter": {"what": "balancer.defragmentation"},
               "batchSize": 10000})["cursor"]["firstBatch"]
    return [r["details"] for r in sorted(rs, key=lambda r: r["_id"])]


def rounds(c):
    return c.ok({"find": "actionlog", "$db": "config", "filter": {"what": "balancer.round"},
                 "batchSize": 10000})["cursor"]["firstBatch"]


def digest(c):
    docs = c.find_all("c", DB, {}, batchSize=5000)
    h = hashlib.sha256()
    for d in sorted(docs, key=lambda d: d["_id"]):
        h.update(("%s|%s|%s;" % (d["_id"], d["k"], d["pad"])).encode())
    return len(docs), h.hexdigest()


def load(c, n, pad=150):
    for b in range(0, n, 500):
        c.ok({"insert": "c", "$db": DB,
              "documents": [{"_id": i, "k": i, "pad": "%06d" % i * (pad // 6)} for i in range(b, min(n, b + 500))]})


def split_at(c, points):
    for p in points:
        c.ok({"split": NS, "middle": {"k": p}, "$db": "admin"})


@test
def test_configure_collection_balancing_validation(t):
    cl = t.cluster(shards=1)
    c = cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    r = c.err({"configureCollectionBalancing": "app.nope", "chunkSize": 1, "$db": "admin"})
    assert r["codeName"] == "NamespaceNotSharded", r
    for bad in (1025, -1):
        r = c.err({"configureCollectionBalancing": NS, "chunkSize": bad, "$db": "admin"})
        assert r["codeName"] == "InvalidOptions" and "out of range" in r["errmsg"], r
    c.ok({"configureCollectionBalancing": NS, "$db": "admin"})   # nothing asked: a no-op
    c.ok({"configureCollectionBalancing": NS, "chunkSize": 2, "enableAutoMerger": False, "$db": "admin"})
    d = coll_doc(c)
    assert d["maxChunkSizeBytes"] == 2 * 1024 * 1024 and d["enableAutoMerge"] is False, d
    assert "defragmentCollection" not in d, d
    c.ok({"configureCollectionBalancing": NS, "chunkSize": 0, "enableAutoMerger": True, "$db": "admin"})
    d = coll_doc(c)
    assert "maxChunkSizeBytes" not in d and d["enableAutoMerge"] is True, d
    assert changelog(c, "configureCollectionBalancing") == 2
    # the balancer is an hour away: the phase is stored at once, and an abort clears it
    c.ok({"configureCollectionBalancing": NS, "defragmentCollection": True, "$db": "admin"})
    d = coll_doc(c)
    assert d["defragmentCollection"] is True and d["defragmentationPhase"] == "mergeAndMeasureChunks", d
    c.ok({"configureCollectionBalancing": NS, "defragmentCollection": False, "$db": "admin"})
    d = coll_doc(c)
    assert "defragmentCollection" not in d and "defragmentationPhase" not in d, d


def defrag_cluster(t, nshards, ndocs):
    """A fast balancer (stopped for now, auto-split off) over nshards shards, a 256 KB chunk
    size (small = below 64 KB) and NS loaded with ndocs documents split every 100 keys
    (chunks of ~16 KB) on shard0. Returns (config server, shards, client)."""
    cfg = t.configsvr(extra=["--balancer-idle-ms", "200", "--balancer-throttle-ms", "50",
                             "--defrag-throttle-ms", "20"])
    ss = [t.shardd("shard%d" % i, extra=SHARD_FLAGS) for i in range(nshards)]
    r = t.router(cfg.url)
    c = r.client()
    for i, s in enumerate(ss):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    c.ok({"balancerStop": 1, "$db": "admin"})
    settings(c, "autosplit", {"$set": {"enabled": False}})
    settings(c, "chunksize", {"$set": {"valueBytes": 256 * 1024}})
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    load(c, ndocs)
    split_at(c, range(100, ndocs, 100))
    return cfg, ss, c


@test
def test_defragmentation_cuts_chunks_without_loss(t):
    cfg, _ss, c = defrag_cluster(t, 3, 1800)
    # the horizon (60 s by default): 18 contiguous chunks just created are not merged by hand
    r0 = c.ok({"mergeAllChunksOnShard": NS, "shard": "shard0", "$db": "admin"})
    assert r0["numMergedChunks"] == 0 and len(chunks(c)) == 18, r0
    for i in range(18):
        if i % 3:
            c.ok({"moveChunk": NS, "find": {"k": i * 100}, "to": "shard%d" % (i % 3), "$db": "admin"})
    before = chunks(c)
    assert len(before) == 18 and len({x["shard"] for x in before}) == 3
    n0, h0 = digest(c)
    assert n0 == 1800

    c.ok({"configureCollectionBalancing": NS, "defragmentCollection": True, "$db": "admin"})
    assert coll_doc(c)["defragmentationPhase"] == "mergeAndMeasureChunks"
    # a config server restart keeps the phase; the balancer goes on from it
    cfg.restart()
    wait_until(lambda: coll_doc(c)["defragmentationPhase"] == "mergeAndMeasureChunks", 15,
               "phase kept across a restart")
    c.ok({"balancerStart": 1, "$db": "admin"})
    # stopped and restarted in phase 2, it goes on with its phase (not from phase 1)
    wait_until(lambda: coll_doc(c).get("defragmentationPhase") == "moveAndMergeChunks", 30,
               "phase 2", interval=0.02)
    c.ok({"balancerStop": 1, "$db": "admin"})
    # the secondary thread may end the step it is in (phase 2 -> 3) after the stop
    stopped_in = coll_doc(c).get("defragmentationPhase")
    print("  stopped in %s with %d chunks" % (stopped_in, len(chunks(c))), flush=True)
    cfg.restart()
    wait_until(lambda: coll_doc(c)["defragmentationPhase"] in ("moveAndMergeChunks", "mergeChunks"),
               15, "phase kept across a restart")
    phase = coll_doc(c).get("defragmentationPhase")
    assert phase == stopped_in or (stopped_in, phase) == ("moveAndMergeChunks", "mergeChunks"), \
        (stopped_in, phase)
    assert phase in ("moveAndMergeChunks", "mergeChunks"), phase
    steps_before = defrag_steps(c)
    # merges so far: a kill -9 (restart) between a step's merges and its actionlog entry
    # leaves merges no step counts, so the exact count below is of what came after
    merges_before = changelog(c, "merge")
    c.ok({"balancerStart": 1, "$db": "admin"})
    wait_until(lambda: "defragmentCollection" not in coll_doc(c), 60, "defragmentation finished",
               interval=0.3)
    steps = defrag_steps(c)
    assert steps[:len(steps_before)] == steps_before
    # it went on from the stored phase, not from phase 1
    assert steps[len(steps_before)]["phase"] == phase, steps[len(steps_before):]
    after = chunks(c)
    print("  chunks %d -> %d" % (len(before), len(after)), flush=True)
    assert len(after) <= 9, [(x["min"], x["shard"]) for x in after]
    assert all("estimatedDataSizeBytes" not in x for x in after), after
    d = coll_doc(c)
    assert "defragmentationPhase" not in d, d
    # once finished the collection is balanced again: a round may already have moved one of
    # its few chunks (legitimately) — only then can two neighbours share a shard
    rs = rounds(c)
    balancing = [m for rr in rs for m in rr["details"].get("migrations", [])
                 if m["ns"] == NS and m["reason"] != "defragmentation"]
    if not balancing:   # adjacent chunks on one shard were all merged by phase 3
        for a, b in zip(after, after[1:]):
            assert a["shard"] != b["shard"], (a, b)
    assert (n0, h0) == digest(c), "documents lost or changed"
    # every phase went through the secondary thread's steps
    phases = [x["phase"] for x in steps]
    for p in ("mergeAndMeasureChunks", "moveAndMergeChunks", "mergeChunks"):
        assert p in phases, phases
    assert steps[-1]["next"] == "finished", steps[-1]
    assert sum(x["measured"] for x in steps) >= 18, steps[:3]
    # the split of MongoDB's balancer: the rounds (main thread) did phase 2's migrations and
    # nothing else for the collection; every merge of the defragmentation is one of the
    # secondary thread's (the merge changelog counts no other merge of the collection)
    for rr in rs:   # a round that defragmented the collection did not balance it
        if any(x["ns"] == NS for x in rr["details"].get("defragmentation", [])):
            assert all(m["reason"] == "defragmentation" for m in rr["details"].get("migrations", [])
                       if m["ns"] == NS), rr
    mig = [m for rr in rs for m in rr["details"].get("migrations", [])
           if m["ns"] == NS and m["reason"] == "defragmentation"]
    assert mig, rs
    assert sum(1 for m in mig if m["ok"]) >= 1, mig
    entries = [x for rr in rs for x in rr["details"].get("defragmentation", [])]
    assert entries and all(set(x) == {"ns", "phase", "migrations", "waiting"} for x in entries), entries[:3]
    # chosen = run, but for a batch dropped by the balancerStop above (during its throttle wait)
    assert sum(x["migrations"] for x in entries) >= len(mig), (entries, mig)
    merged = sum(x["merged"] for x in steps)
    merged_after = sum(x["merged"] for x in steps[len(steps_before):])
    print("  secondary steps %d (merges %d), round migrations %d" % (len(steps), merged, len(mig)),
          flush=True)
    total = changelog(c, "merge")
    assert merged >= 1 and merged <= total, (merged, total)
    assert total - merges_before == merged_after, (merges_before, total, merged_after)
    # a moved chunk was merged into its neighbour by the secondary thread in phase 2
    assert sum(x["merged"] for x in steps if x["phase"] == "moveAndMergeChunks") >= 1, steps


@test
def test_failed_phase2_migration_restarts_from_phase_1(t):
    _cfg, ss, c = defrag_cluster(t, 2, 800)
    for i in range(1, 8, 2):
        c.ok({"moveChunk": NS, "find": {"k": i * 100}, "to": "shard1", "$db": "admin"})
    n0, h0 = digest(c)
    # the donor of the first phase-2 migration fails it with UnknownError (8): not retriable
    for s in ss:
        fp(s.client(), "failCommand", {"times": 1}, failCommands=["_shardsvrMoveRange"], errorCode=8,
           failInternalCommands=True)
    c.ok({"configureCollectionBalancing": NS, "defragmentCollection": True, "$db": "admin"})
    c.ok({"balancerStart": 1, "$db": "admin"})
    wait_until(lambda: "defragmentCollection" not in coll_doc(c), 60, "defragmentation finished",
               interval=0.2)
    failed = [m for rr in rounds(c) for m in rr["details"].get("migrations", [])
              if m["reason"] == "defragmentation" and not m["ok"]]
    assert failed and failed[0]["code"] == 8, failed
    steps = defrag_steps(c)
    back = [x for x in steps if x.get("restartedAfterMigrationError")]
    assert back and back[0]["phase"] == "moveAndMergeChunks" and back[0]["next"] == "mergeAndMeasureChunks", steps
    # after the restart it went through phases 1, 2 and 3 again to the end
    later = [x["phase"] for x in steps[steps.index(back[0]) + 1:]]
    for p in ("mergeAndMeasureChunks", "moveAndMergeChunks", "mergeChunks"):
        assert p in later, later
    assert steps[-1]["next"] == "finished", steps[-1]
    assert len(chunks(c)) < 8
    assert (n0, h0) == digest(c), "documents lost or changed"


@test
def test_merge_all_chunks_on_shard_and_the_auto_merger(t):
    cfg = t.configsvr(extra=["--auto-merger-interval-ms", "200", "--auto-merger-throttle-ms", "0",
                             "--auto-merger-horizon-ms", "0"])
    ss = [t.shardd("shard%d" % i, extra=SHARD_FLAGS) for i in range(2)]
    r = t.router(cfg.url)
    c = r.client()
    for i, s in enumerate(ss):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    settings(c, "automerge", {"$set": {"enabled": False}})
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    load(c, 800)
    split_at(c, range(100, 800, 100))   # 8 chunks on shard0
    c.ok({"moveChunk": NS, "find": {"k": 350}, "to": "shard1", "$db": "admin"})
    n0, h0 = digest(c)
    # errors
    c.err({"mergeAllChunksOnShard": NS, "shard": "nope", "$db": "admin"}, 70)   # ShardNotFound
    r0 = c.err({"mergeAllChunksOnShard": "app.nope", "shard": "shard0", "$db": "admin"})
    assert r0["codeName"] == "NamespaceNotSharded", r0
    # by hand: at most 2 chunks, then the rest: runs [0,300) and [400,800) on shard0
    merges = changelog(c, "merge")
    r1 = c.ok({"mergeAllChunksOnShard": NS, "shard": "shard0", "maxNumberOfChunksToMerge": 2,
               "$db": "admin"})
    assert r1["numMerges"] == 1 and r1["numMergedChunks"] == 2, r1
    assert len(chunks(c)) == 7
    r2 = c.ok({"mergeAllChunksOnShard": NS, "shard": "shard0", "$db": "admin"})
    assert r2["numMerges"] == 2 and r2["numMergedChunks"] == 6, r2
    cs = chunks(c)
    assert [(kmin(x), x["shard"]) for x in cs] == [(-1, "shard0"), (300, "shard1"), (400, "shard0")], cs
    assert changelog(c, "merge") == merges + 3
    assert (n0, h0) == digest(c)

    # the auto-merger: not while settings automerge is off, nor for enableAutoMerge false
    split_at(c, [50, 150, 500, 600])    # shard0: [min,50) [50,150) [150,300) and [400..800) in 3
    n = len(chunks(c))
    assert n == 7, chunks(c)
    time.sleep(1.0)
    assert len(chunks(c)) == n, "merged while automerge is disabled"
    c.ok({"configureCollectionBalancing": NS, "enableAutoMerger": False, "$db": "admin"})
    settings(c, "automerge", {"$set": {"enabled": True}})
    time.sleep(1.0)
    assert len(chunks(c)) == n, "merged a collection with enableAutoMerge false"
    c.ok({"configureCollectionBalancing": NS, "enableAutoMerger": True, "$db": "admin"})
    # configureCollectionBalancing woke the balancer, which may move chunks meanwhile:
    # wait for no two neighbours on one shard (every run merged)
    def merged():
        cs = chunks(c)
        return len(cs) < n and all(a["shard"] != b["shard"] for a, b in zip(cs, cs[1:]))
    wait_until(merged, 20, "auto-merged", interval=0.2)
    # the pass logs its round when it ends, after its merges: wait for it
    def rounds():
        return c.ok({"find": "actionlog", "$db": "config", "filter": {"what": "autoMerger.round"}})["cursor"]["firstBatch"]
    wait_until(lambda: rounds(), 10, "autoMerger.round logged", interval=0.2)
    rs = rounds()
    assert rs and rs[0]["details"]["numMerges"] >= 1, rs
    assert (n0, h0) == digest(c)


if __name__ == "__main__":
    main()
