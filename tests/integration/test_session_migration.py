#!/usr/bin/env python3
"""
test_session_migration.py — the retryable-write history moves with its chunk (MongoDB's
session migration, `_getNextSessionMods`; docs/how-a-migration-works.md "Session
migration").

A retryable write (lsid + txnNumber) runs on the donor shard; its chunk moves; the same
command is sent again, now to the recipient. The recipient must answer what the donor
recorded and leave the document as it was — on the code before session migration it ran
the write a second time. The same for insert, delete and findAndModify; for a write made
while the migration was held in catch-up; after a kill -9 in the session step (the
migration aborts and leaves nothing wrong behind; a second move then carries the record);
and for a statement the donor could not place with a key, whose transaction the
recipient marks incomplete (IncompleteTransactionHistory, 217).

The writes go straight to the shard that owns the range (raw commands, no driver): the
donor before the move, the recipient after it.
"""
import base64
import os
import sys
import threading
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
NS = "app.c"
N = 100                 # documents k = 0..99; the moving chunk is [50, MaxKey)
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0", "--range-deleter-batch-delay-ms", "0"]
INCOMPLETE_HISTORY = 217


def lsid():
    raw = base64.b64encode(uuid.uuid4().bytes).decode()
    return {"id": {"$binary": {"base64": raw, "subType": "04"}}}


def setup(t, shards=2):
    cl = t.cluster(shards, 1, SHARD_FLAGS)
    r = cl.client()
    r.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    r.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    r.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "v": 0} for i in range(N)]})
    r.ok({"split": NS, "middle": {"k": N // 2}, "$db": "admin"})
    return cl, r


def move(r, to="shard1"):
    return r.ok({"moveChunk": NS, "find": {"k": N - 1}, "to": to, "$db": "admin"})


def doc(r, k):
    docs = r.find_all("c", DB, {"k": k})
    assert len(docs) <= 1, docs
    return docs[0] if docs else None


def upd(sid, txn, k, stmt_ids=None):
    c = {"update": "c", "$db": DB, "lsid": sid, "txnNumber": long(txn),
         "updates": [{"q": {"k": k}, "u": {"$inc": {"v": 1}}}]}
    if stmt_ids is not None:
        c["stmtIds"] = stmt_ids
    return c


def fam(sid, txn, k):
    return {"findAndModify": "c", "$db": DB, "lsid": sid, "txnNumber": long(txn),
            "query": {"k": k}, "update": {"$inc": {"v": 1}}, "new": True}


def n_of(reply):
    assert reply.get("ok") == 1 and not reply.get("writeErrors"), reply
    return int(num(reply["n"]))


# ---- the four write kinds, one move ------------------------------------------------------

@test
def test_retries_after_the_move_apply_once(t):
    """update, insert, delete and findAndModify, each retryable on the donor; the chunk
    moves; each sent again to the recipient answers its recorded result and changes
    nothing (the old code ran each again: v 2, DuplicateKey, n 0, value v 2)."""
    cl, r = setup(t)
    s0, s1 = cl.shards[0].client(), cl.shards[1].client()
    su, si, sd, sf, sr = lsid(), lsid(), lsid(), lsid(), lsid()
    ins = {"insert": "c", "$db": DB, "lsid": si, "txnNumber": long(3),
           "documents": [{"_id": "new", "k": 88, "v": 0}]}
    dele = {"delete": "c", "$db": DB, "lsid": sd, "txnNumber": long(4),
            "deletes": [{"q": {"k": 75}, "limit": 1}]}
    assert n_of(s0.ok(upd(su, 2, 70))) == 1
    assert n_of(s0.ok(ins)) == 1
    assert n_of(s0.ok(dele)) == 1
    first = s0.ok(fam(sf, 5, 72))
    assert first["value"]["v"] == 1, first
    # the donor itself answers a retry from its record before the move
    assert n_of(s0.ok(upd(su, 2, 70))) == 1 and doc(r, 70)["v"] == 1
    # and one through the router, as a driver sends it
    assert n_of(r.ok(upd(sr, 8, 80))) == 1

    move(r)
    # the router's retry goes to the new owner, which answers the record
    assert n_of(r.ok(upd(sr, 8, 80))) == 1 and doc(r, 80)["v"] == 1, doc(r, 80)

    ru = s1.ok(upd(su, 2, 70))
    assert n_of(ru) == 1 and int(num(ru["nModified"])) == 1, ru
    assert doc(r, 70)["v"] == 1, doc(r, 70)
    ri = s1.ok(ins)
    assert n_of(ri) == 1, ri
    assert len(r.find_all("c", DB, {"_id": "new"})) == 1
    rd = s1.ok(dele)
    assert n_of(rd) == 1, rd
    assert doc(r, 75) is None
    rf = s1.ok(fam(sf, 5, 72))
    assert rf["value"] == first["value"] and rf["lastErrorObject"] == first["lastErrorObject"], (rf, first)
    assert doc(r, 72)["v"] == 1, doc(r, 72)
    # a new txnNumber on the same session runs (the history is a session's, not a lock)
    assert n_of(s1.ok(upd(su, 6, 70))) == 1 and doc(r, 70)["v"] == 2
    to = r.find_all("changelog", "config", {"what": "moveChunk.to"})[-1]["details"]
    assert int(num(to["sessionRecords"])) == 5, to


@test
def test_many_batches_all_arrive(t):
    """40,000 records (40 sessions of 1,000 retryable inserts) take several
    _getNextSessionMods batches, fetched while the previous one is persisted: every session
    arrives, and every batch retried on the recipient answers n: 1,000 from its records."""
    cl, r = setup(t)
    s0, s1 = cl.shards[0].client(), cl.shards[1].client()
    r.ok({"shardCollection": DB + ".many", "key": {"k": 1}, "$db": "admin"})
    cmds = []
    for b in range(40):
        cmds.append({"insert": "many", "$db": DB, "lsid": lsid(), "txnNumber": long(1),
                     "documents": [{"_id": b * 1000 + i, "k": b * 1000 + i, "pad": "x" * 40}
                                   for i in range(1000)]})
        assert n_of(s0.ok(cmds[-1])) == 1000
    r.ok({"moveChunk": DB + ".many", "find": {"k": 0}, "to": "shard1", "$db": "admin"})
    assert len(s1.find_all("transactions", "config", {})) == 40
    for c in cmds:
        assert n_of(s1.ok(c)) == 1000
    to = r.find_all("changelog", "config", {"what": "moveChunk.to", "ns": DB + ".many"})[-1]["details"]
    assert int(num(to["sessionRecords"])) == 40000, to


@test
def test_a_batch_cut_by_its_byte_cap_loses_no_record(t):
    """The donor reads a pull's records in two seq-ordered streams, the range's and the
    unplaced ones (key NULL), each cut at the batch's byte cap (4 MiB). Range records of
    1.2 MB and 3 MB (findAndModify results hold the whole document) cut the range stream
    after the first; an unplaced record written after them must not carry the pull past the
    3 MB one (the old merge did: that record never moved, and its retry ran again)."""
    cl, r = setup(t)
    s0, s1 = cl.shards[0].client(), cl.shards[1].client()
    r.ok({"update": "c", "$db": DB, "updates": [
        {"q": {"k": 60}, "u": {"$set": {"pad": "a" * 1200000}}},
        {"q": {"k": 61}, "u": {"$set": {"pad": "b" * 3000000}}}]})
    fa, fb = lsid(), lsid()
    first = s0.ok(fam(fa, 1, 60))
    second = s0.ok(fam(fb, 1, 61))
    assert first["value"]["v"] == 1 and second["value"]["v"] == 1
    # a retryable delete that matches nothing, by a field that is not the shard key: its
    # record has no key (an unplaced statement), with a seq after both
    nothing = {"delete": "c", "$db": DB, "lsid": lsid(), "txnNumber": long(1),
               "deletes": [{"q": {"v": -1}, "limit": 1}]}
    assert n_of(s0.ok(nothing)) == 0
    move(r)
    for sid, k, was in ((fa, 60, first), (fb, 61, second)):
        again = s1.ok(fam(sid, 1, k))
        assert again["value"]["v"] == 1 and again["lastErrorObject"] == was["lastErrorObject"], \
            (k, again["lastErrorObject"], again["value"]["v"])
        assert doc(r, k)["v"] == 1, (k, doc(r, k)["v"])


@test
def test_stale_router_write_in_the_critical_section_applies_once(t):
    """A retryable update through a router whose routing table predates the move reaches
    the donor while the donor holds its critical section (moveChunkHangAtStep4); released,
    the commit makes it stale, and the router sends it on to the new owner, where it runs.
    Sent again through the same router, it is answered from the record: applied once."""
    cl = t.cluster(2, 2, SHARD_FLAGS)
    r, stale = cl.client(0), cl.client(1)
    r.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    r.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    r.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "v": 0} for i in range(N)]})
    r.ok({"split": NS, "middle": {"k": N // 2}, "$db": "admin"})
    assert doc(stale, 70)["v"] == 0            # router 1 caches the table: [50, MaxKey) on shard0
    donor = cl.shards[0].client()
    n0 = fp(donor, "moveChunkHangAtStep4")
    mover = threading.Thread(target=lambda: move(r), daemon=True)
    mover.start()
    fp_wait(donor, "moveChunkHangAtStep4", n0 + 1)
    sid, res = lsid(), {}
    writer = threading.Thread(target=lambda: res.update(w=Client(cl.routers[1].url, 60000).cmd(
        upd(sid, 1, 70))), daemon=True)
    writer.start()
    time.sleep(0.5)                            # the write waits on the donor's critical section
    assert "w" not in res, res
    fp(donor, "moveChunkHangAtStep4", "off")
    mover.join(60)
    writer.join(60)
    assert not mover.is_alive() and not writer.is_alive()
    assert n_of(res["w"]) == 1, res
    assert doc(r, 70)["v"] == 1, doc(r, 70)
    assert n_of(stale.ok(upd(sid, 1, 70))) == 1   # the retry: the record, on the new owner
    assert doc(r, 70)["v"] == 1, doc(r, 70)
    owner = r.find_all("chunks", "config", {"min.k": N // 2})
    assert [c["shard"] for c in owner] == ["shard1"], owner


# ---- a write made during catch-up ----------------------------------------------------------

@test
def test_write_during_catch_up_moves_too(t):
    """The recipient is held after its clone (migrateThreadHangAtStep2, before catch-up);
    a retryable update runs on the donor then; released, the move commits and the retry on
    the recipient answers the record (its seq is after everything the first pulls saw)."""
    cl, r = setup(t)
    s0, s1 = cl.shards[0].client(), cl.shards[1].client()
    before = lsid()
    assert n_of(s0.ok(upd(before, 1, 60))) == 1
    n = fp(s1, "migrateThreadHangAtStep2")
    res = {}
    th = threading.Thread(target=lambda: res.update(r=r.cmd(
        {"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})), daemon=True)
    th.start()
    fp_wait(s1, "migrateThreadHangAtStep2", n + 1)
    during = lsid()
    assert n_of(s0.ok(upd(during, 9, 65))) == 1
    fp(s1, "migrateThreadHangAtStep2", "off")
    th.join(60)
    assert res.get("r", {}).get("ok") == 1, res
    assert n_of(s1.ok(upd(during, 9, 65))) == 1 and doc(r, 65)["v"] == 1, doc(r, 65)
    assert n_of(s1.ok(upd(before, 1, 60))) == 1 and doc(r, 60)["v"] == 1, doc(r, 60)


# ---- the dead-end sentinel ------------------------------------------------------------------

@test
def test_unplaced_statement_answers_incomplete_history(t):
    """A retryable batch whose second statement matched nothing and names no shard key
    (its record has no key: no range holds it) moves with its first statement's chunk;
    on the recipient the first answers its record, the second IncompleteTransactionHistory
    (217) instead of running (the old code ran it: n 1 on the document made since). A
    transaction of only such statements is marked too. Moved on to a third shard, the
    sentinels travel with the range (the second recipient keeps a keyless marker)."""
    cl, r = setup(t, shards=3)
    s0, s1 = cl.shards[0].client(), cl.shards[1].client()
    sid, only = lsid(), lsid()
    batch = {"update": "c", "$db": DB, "lsid": sid, "txnNumber": long(7),
             "updates": [{"q": {"k": 55}, "u": {"$inc": {"v": 1}}},
                         {"q": {"tag": "later"}, "u": {"$inc": {"v": 100}}}]}
    assert n_of(s0.ok(batch)) == 1
    lone = {"update": "c", "$db": DB, "lsid": only, "txnNumber": long(1),
            "updates": [{"q": {"tag": "later"}, "u": {"$inc": {"v": 100}}}]}
    assert n_of(s0.ok(lone)) == 0
    move(r)
    # a document the unplaced statements would match now exists in the moved range
    r.ok({"update": "c", "$db": DB, "updates": [{"q": {"k": 56}, "u": {"$set": {"tag": "later"}}}]})
    first = dict(batch, updates=batch["updates"][:1], stmtIds=[0])
    second = dict(batch, updates=batch["updates"][1:], stmtIds=[1])
    assert n_of(s1.ok(first)) == 1 and doc(r, 55)["v"] == 1
    s1.err(second, INCOMPLETE_HISTORY)
    s1.err(lone, INCOMPLETE_HISTORY)
    assert doc(r, 56)["v"] == 0, doc(r, 56)
    from_ = r.find_all("changelog", "config", {"what": "moveChunk.from"})[-1]["details"]
    assert int(num(from_["sessionSentinelsSent"])) == 2, from_
    move(r, "shard2")
    s2 = cl.shards[2].client()
    assert n_of(s2.ok(first)) == 1 and doc(r, 55)["v"] == 1
    s2.err(second, INCOMPLETE_HISTORY)
    s2.err(lone, INCOMPLETE_HISTORY)
    assert doc(r, 56)["v"] == 0, doc(r, 56)


# ---- crashes in the session step --------------------------------------------------------------

def crash_case(t, who, point, action="crash", kill=None):
    """The migration meets `point` in `who` (donor or recipient) with `action`; for a hang,
    process `kill` is killed there. Whatever died is restarted; the migration must have
    aborted with the chunk on the donor, the retry answering there from its record; a second
    move then carries the record to the recipient."""
    cl, r = setup(t)
    procs = {"donor": cl.shards[0], "recipient": cl.shards[1]}
    s0 = procs["donor"].client()
    sid = lsid()
    assert n_of(s0.ok(upd(sid, 4, 90))) == 1
    target = procs[who].client()
    n = fp(target, point, "alwaysOn", action=action)
    res = {}
    mc = Client(cl.routers[0].url, timeout_ms=90000)
    th = threading.Thread(target=lambda: res.update(r=mc.cmd(
        {"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})), daemon=True)
    th.start()
    if action == "hang":
        fp_wait(target, point, n + 1)
        procs[kill].kill()
        if procs[kill] is not procs[who]:
            fp(target, point, "off")
    th.join(90)
    assert not th.is_alive() and "r" in res, "moveChunk gave no answer: %r" % res
    assert res["r"].get("ok") != 1, res              # aborted: never committed half-moved
    for p in procs.values():
        if not p.alive():
            p.start()
    settled(cl)
    chunk = r.find_all("chunks", "config", {"min": {"k": N // 2}})[0]
    assert chunk["shard"] == "shard0", chunk
    s0 = procs["donor"].client()
    assert n_of(s0.ok(upd(sid, 4, 90))) == 1 and doc(r, 90)["v"] == 1, doc(r, 90)
    move(r)
    s1 = procs["recipient"].client()
    assert n_of(s1.ok(upd(sid, 4, 90))) == 1 and doc(r, 90)["v"] == 1, doc(r, 90)
    assert len(r.find_all("c", DB, {})) == N


def settled(cl):
    def ok():
        for s in cl.shards:
            c = s.client(timeout_ms=5000)
            try:
                for coll in ("migrationCoordinators", "rangeDeletions"):
                    rr = c.cmd({"find": coll, "$db": "config", "filter": {}})
                    if not rr.get("ok") or rr["cursor"]["firstBatch"]:
                        return False
                st = c.cmd({"serverStatus": 1, "$db": "admin"})
                if not st.get("ok") or st["migrations"]["inprog"] or st["migrations"]["recoveriesPending"]:
                    return False
            finally:
                c.close()
        return True
    wait_until(ok, 60, "migration recovery settled")


@test
def test_crash_recipient_after_session_batch(t):
    crash_case(t, "recipient", "sessionMigrationHangAfterBatch")


@test
def test_crash_recipient_before_session_step_done(t):
    crash_case(t, "recipient", "sessionMigrationHangBeforeDone")


@test
def test_crash_donor_serving_session_mods(t):
    crash_case(t, "donor", "hangInGetNextSessionMods")


@test
def test_kill_donor_while_recipient_holds_a_session_batch(t):
    crash_case(t, "recipient", "sessionMigrationHangAfterBatch", action="hang", kill="donor")


if __name__ == "__main__":
    main()
