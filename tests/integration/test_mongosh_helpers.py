#!/usr/bin/env python3
"""
test_mongosh_helpers.py — the mongosh 2.x helpers a MongoDB user reaches for, each run in
mongosh against a real cluster through a router, their results checked (not only "no
error"):

  * sh.moveRange(ns, toShard, min) with max absent (mongosh sends max: null): the range
    really moves, and its end is the chunk-size point, not the chunk's end;
  * db.c.getShardVersion() / getShardVersion {fullMetadata} / of a database, getShardMap,
    db.hostInfo(), serverStatus().sharding, sh / db / db.c .checkMetadataConsistency()
    (the cursor drained with getMore) finding collections placed on the wrong shard;
  * db.currentOp() while an insert is held at a shard's failpoint: the shard's operation
    as mongos shows it (shard, opid "shard:N", client_s), localOps: the router's own; a
    shard reached directly lists it with a numeric opid;
  * sh.disableAutoMerger(ns) keeps a collection split while the auto-merger merges
    another, sh.enableAutoMerger(ns) lets it merge; sh.stopAutoMerger() stops every pass
    (the config server logs the skipped passes), sh.startAutoMerger() resumes.

Four mongosh runs of several helpers each (a mongosh start costs 1-2 s).
"""
import json
import os

from lib import *  # noqa: F401,F403
from mongosh_lib import check, have_mongosh, mongosh

# The auto-merger's passes 200 ms apart, merging chunks of any age.
MERGER = ["--auto-merger-interval-ms", "200", "--auto-merger-horizon-ms", "0",
          "--auto-merger-throttle-ms", "0"]


def wire_cluster(t, config_extra=()):
    cfg = t.configsvr(extra=list(config_extra))
    ss = [t.shardd("shard%d" % i) for i in range(2)]
    wp = free_ports(1)[0]
    r = t.router(cfg.url, extra=["--wire-port", str(wp)])
    c = r.client()
    for i, s in enumerate(ss):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    return cfg, ss, r, c, "mongodb://127.0.0.1:%d" % wp


def check_info(t, cfg, ss, r, c, url):
    # Three collections on shard1 that the catalog places on shard0 (p's primary).
    c.ok({"enableSharding": "p", "primaryShard": "shard0", "$db": "admin"})
    d = ss[1].client()
    for name in ("stray0", "stray1", "stray2"):
        d.ok({"insert": name, "$db": "p", "documents": [{"_id": 1}]})
    out, res = mongosh(t, url + "/admin", ["helpers_info.js"])
    check(res, "shardingDefault", {"configsvrConnectionString": cfg.url,
                                   "maxChunkSizeInBytes": 128 * 1024 * 1024}, out)
    check(res, "moveRangeMinOnly", 1, out)
    chunks = res["chunksMr"]
    assert [ch["shard"] for ch in chunks] == ["shard1", "shard0"], chunks
    split = chunks[0]["max"]["k"]
    assert chunks[0]["min"] == {"k": MINKEY} and chunks[1]["max"] == {"k": MAXKEY}, chunks
    # 40 documents of ~230 bytes, a 4 KB chunk size: the moved range ends well inside.
    assert isinstance(split, int) and 5 <= split <= 30, chunks
    on1 = d.ok({"count": "mr", "$db": "p"})["n"]
    assert on1 == split, (on1, split)
    check(res, "chunkSizeBack", 1, out)
    check(res, "shardVersion", [True, True, True, 1], out)
    check(res, "shardVersionFull", 2, out)
    check(res, "shardVersionDb", "shard0", out)
    check(res, "shardVersionUnsharded", ("error", "Collection p.none is not sharded. code=118"), out)
    check(res, "shardVersionNotAdmin", ("error", "getShardVersion may only be run against the admin "
                                                 "database. code=13"), out)
    hosts = {"config": cfg.url, "shard0": ss[0].url, "shard1": ss[1].url}
    res["shardMap"] = bare(res["shardMap"])
    check(res, "shardMap", {"map": hosts,
                            "hosts": {u[len("tcp://"):]: n for n, u in hosts.items()},
                            "connStrings": {u: n for n, u in hosts.items()}, "ok": 1}, out)
    mem_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    check(res, "hostInfo", [os.cpu_count(), 64, mem_mb, True, "Linux", True, True,
                            os.sysconf("SC_PAGE_SIZE"), False, 1], out)
    check(res, "consistencyAll", [["MisplacedCollection", "p.stray%d" % i] for i in range(3)], out)
    check(res, "consistencyDb", ["p.stray%d" % i for i in range(3)], out)
    check(res, "consistencyColl", [], out)


def check_current_op(t, ss, c, url):
    shard0 = ss[0].client()
    fp(shard0, "hangBeforeWriteCommit")
    held = r_client = None
    try:
        r_client = c
        send(r_client, {"insert": "held", "$db": "p", "documents": [{"_id": 1, "k": -5}]})
        fp_wait(shard0, "hangBeforeWriteCommit", 1)
        out, res = mongosh(t, url + "/admin", ["helpers_currentop.js"])
        # A shard reached directly lists it too, with its own numeric opid and client.
        direct = shard0.ok({"aggregate": 1, "$db": "admin", "cursor": {},
                            "pipeline": [{"$currentOp": {}}, {"$match": {"command.insert": "held"}}]})
        ops = direct["cursor"]["firstBatch"]
        assert len(ops) == 1 and isinstance(ops[0]["opid"], int) and "client" in ops[0] \
            and "shard" not in ops[0] and ops[0]["ns"] == "p.held", ops
        # Its cursor continues with getMore on "$cmd.aggregate", as MongoDB's does.
        first = shard0.ok({"aggregate": 1, "$db": "admin", "cursor": {"batchSize": 0},
                           "pipeline": [{"$currentOp": {}}, {"$match": {"command.insert": "held"}}]})
        more = shard0.ok({"getMore": first["cursor"]["id"], "collection": "$cmd.aggregate", "$db": "admin"})
        assert [o["ns"] for o in more["cursor"]["nextBatch"]] == ["p.held"], more
    finally:
        fp(shard0, "hangBeforeWriteCommit", "off")
        if r_client:
            held = reply(r_client)
    assert held.get("ok") == 1 and held.get("n") == 1, held
    check(res, "heldOnShards", [["shard0", "insert", "p.held", True, "string", True, "string",
                                 "Long", True, "op", 1]], out)
    check(res, "heldLocal", [[None, "insert", "p.held", "number", "string", True]], out)
    check(res, "currentOpAll", True, out)
    check(res, "batched", 3, out)   # the held insert, the aggregate on each shard
    check(res, "selfListed", ["shard0", "shard1"], out)
    check(res, "notAdmin", ("error", "$currentOp must be run against the 'admin' database with "
                                     "{aggregate: 1} code=73"), out)
    check(res, "badOption", ("error", "Unrecognized option 'nosuch' in $currentOp stage. code=9"), out)
    check(res, "badType", ("error", "The 'localOps' parameter of the $currentOp stage must be a "
                                    "boolean value, but found: int code=9"), out)
    # Released: the insert is gone from the listing.
    after = c.ok({"aggregate": 1, "$db": "admin", "cursor": {},
                  "pipeline": [{"$currentOp": {}}, {"$match": {"command.insert": "held"}}]})
    assert after["cursor"]["firstBatch"] == [], after


def check_auto_merger(t, cfg, url):
    out, res = mongosh(t, url + "/admin", ["helpers_automerge_a.js"])
    upd = {"acknowledged": True, "insertedId": None, "matchedCount": 1, "modifiedCount": 1,
           "upsertedCount": 0}
    check(res, "disableOff", upd, out)
    check(res, "flagOff", False, out)
    check(res, "mergedOn", 1, out)
    check(res, "keptOff", 4, out)
    check(res, "enableOff", upd, out)
    check(res, "flagOn", None, out)   # $unset: absent, the auto-merger's default
    check(res, "mergedOff", 1, out)
    check(res, "badField", [{"index": 0, "code": 20, "codeName": "IllegalOperation",
                             "errmsg": "config.collections: only noBalance and enableAutoMerge may "
                                       "be written, not key; the catalog owns the other fields"}], out)
    check(res, "stopAll", True, out)
    check(res, "isEnabledStopped", False, out)
    check(res, "splitAgain", 3, out)
    # Passes keep coming and are skipped for settings automerge {enabled: false}.
    start = cfg.log_text().count("auto-merger skipped reason=automerge disabled")
    wait_until(lambda: cfg.log_text().count("auto-merger skipped reason=automerge disabled") >= start + 3,
               what="three auto-merger passes skipped")
    out, res = mongosh(t, url + "/admin", ["helpers_automerge_b.js"])
    check(res, "keptWhileStopped", 3, out)
    check(res, "startAll", True, out)
    check(res, "isEnabledStarted", True, out)
    check(res, "mergedAfterStart", 1, out)


@test
def test_mongosh_move_range_and_metadata_helpers(t):
    """sh.moveRange with only min, getShardVersion, getShardMap, hostInfo,
    serverStatus.sharding and the checkMetadataConsistency cursors, in mongosh through a
    router, their results checked against the catalog and the host."""
    if not have_mongosh():
        return
    cfg, ss, r, c, url = wire_cluster(t)
    check_info(t, cfg, ss, r, c, url)


@test
def test_mongosh_current_op_sees_a_held_insert(t):
    """db.currentOp() and $currentOp {localOps} in mongosh while an insert waits at a
    shard's failpoint; the shard itself lists it too; gone once released."""
    if not have_mongosh():
        return
    cfg, ss, r, c, url = wire_cluster(t)
    check_current_op(t, ss, c, url)


@test
def test_mongosh_auto_merger_switches(t):
    """sh.disableAutoMerger / enableAutoMerger per collection and sh.stopAutoMerger /
    startAutoMerger / isAutoMergerEnabled, with the auto-merger's passes 200 ms apart."""
    if not have_mongosh():
        return
    cfg, ss, r, c, url = wire_cluster(t, MERGER)
    c.ok({"enableSharding": "p", "primaryShard": "shard0", "$db": "admin"})
    check_auto_merger(t, cfg, url)


if __name__ == "__main__":
    main()
