#!/usr/bin/env python3
"""
test_migration_meetings.py — what can meet a migration: each
test holds a migration at a failpoint (or kills a process there) so that the meeting
happens every time, then checks what minishard promises:
  - the donor's write capture is freed only after a _transferMods that uses it is done;
  - a recovery decides from a routing table fetched after its fence, never from a
    refresh that began before it;
  - the recipient acknowledges _recvChunkAbort only once its task is persisted ready;
  - a critical section is left only by whoever entered it, and a recovery that cannot
    run (an unreadable coordinator document) keeps its collection blocked;
  - shutdown waits for the migration threads;
  - the recipient reports commitStart;
  - a _recvChunkStart that arrives after the donor gave up is refused, and leaves no
    pending task behind;
  - moveChunk.from of a migration whose commit outcome was unknown is written once known;
  - an index created or dropped while a migration is in flight ends up on the recipient.
"""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "app"
NS = "app.c"
N = 400            # documents k = 0..N-1; the moving chunk is [N/2, MaxKey)
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0", "--range-deleter-batch-delay-ms", "0"]


def setup(t, shard_extra=()):
    cl = t.cluster(2, 1, SHARD_FLAGS + list(shard_extra))
    cfg, ss, r = cl.config, cl.shards, cl.routers[0]
    c = r.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "v": 0} for i in range(N)]})
    c.ok({"split": NS, "middle": {"k": N // 2}, "$db": "admin"})
    return cfg, ss, r, c


def move_async(url, to="shard1", timeout_ms=120000):
    """moveChunk of the upper chunk on a thread; returns (thread, result dict)."""
    res = {}

    def run():
        mc = Client(url, timeout_ms=timeout_ms)
        try:
            res["r"] = mc.cmd({"moveChunk": NS, "find": {"k": N - 1}, "to": to, "$db": "admin"})
        finally:
            mc.close()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, res


def owner_of_upper(c):
    chunks = c.ok({"getRoutingTable": NS, "$db": "admin"})["chunks"]
    upper = [ch for ch in chunks if ch["min"] != {"k": MINKEY}]
    assert len(upper) == 1, chunks
    return upper[0]["shard"]


def local_docs(s, q=None):
    """The documents a shard holds, orphans included (no shardVersion: no filter)."""
    sc = s.client()
    try:
        return sc.ok({"count": "c", "$db": DB, "query": q or {}})["n"]
    finally:
        sc.close()


def sdocs(s, coll):
    sc = s.client(timeout_ms=5000)
    try:
        return sc.ok({"find": coll, "$db": "config", "filter": {}})["cursor"]["firstBatch"]
    finally:
        sc.close()


def settled(ss):
    def ok():
        for s in ss:
            if sdocs(s, "migrationCoordinators") or sdocs(s, "rangeDeletions"):
                return False
            sc = s.client(timeout_ms=5000)
            st = sc.ok({"serverStatus": 1, "$db": "admin"})["migrations"]
            sc.close()
            if st["inprog"] or st["recoveriesPending"]:
                return False
        return True
    wait_until(ok, 40, "migrations settled (no coordinator, no range-deletion task)")


def all_there(c):
    docs = c.find_all("c", DB, {}, batchSize=1000)
    ids = sorted(d["_id"] for d in docs)
    assert ids == list(range(N)), "the cluster returns %d documents, not %d" % (len(ids), N)


def changelog(c, what):
    return c.ok({"find": "changelog", "$db": "config", "filter": {"what": what}})["cursor"]["firstBatch"]


# ---- (a) the capture is freed only after its users are done --------------------------

@test
def test_capture_outlives_transfer_mods_in_use(t):
    """A _transferMods holds the donor's capture (held at a failpoint) while the donor
    gives up ('could not converge'): the donor must wait for it before freeing the
    capture; the worker finishes, the donor lives, a second move succeeds."""
    cfg, ss, r, c = setup(t, ["--migration-catchup-timeout-ms", "1500"])
    donor, recipient = ss
    dc = donor.client()
    n0 = fp(dc, "hangInTransferModsWithCapture", "alwaysOn")
    # writes to the moving range, so the recipient's catch-up has ids to take
    for i in range(20):
        c.ok({"update": "c", "$db": DB, "updates": [{"q": {"_id": N // 2 + i}, "u": {"$set": {"v": 1}}}]})
    th, res = move_async(r.url)
    fp_wait(dc, "hangInTransferModsWithCapture", n0 + 1)
    # the catch-up cannot converge while its _transferMods hangs: the donor aborts
    wait_until(lambda: changelog(c, "moveChunk.error"), 20, "the donor gave up")
    time.sleep(0.5)   # the donor is stopping its capture now (old code: freed it)
    fp(dc, "hangInTransferModsWithCapture", "off")
    th.join(60)
    assert not th.is_alive(), "moveChunk did not return"
    assert res["r"].get("ok") == 0, res["r"]
    assert "converge" in res["r"].get("errmsg", ""), res["r"]
    assert donor.alive(), "the donor died"
    dc.ok({"ping": 1, "$db": "admin"})
    dc.close()
    settled(ss)
    c.ok({"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})
    assert owner_of_upper(c) == "shard1"
    all_there(c)


@test
def test_could_not_converge_under_heavy_updates(t):
    """The issue's load: 200 documents of 300 KB in the moving chunk, 8 writers rewriting
    them, catch-up bounded at 1.5 s. Whatever the outcome of each try (an ordinary
    'could not converge' abort, or a commit), the donor lives and no document is lost.
    (Under the sanitizers the old code died here: null member access in xfer.c.)"""
    cl = t.cluster(2, 1, SHARD_FLAGS + ["--migration-catchup-timeout-ms", "1500"])
    ss, r = cl.shards, cl.routers[0]
    donor = ss[0]
    c = r.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    pad = "x" * (300 * 1024)
    for b in range(0, 200, 20):
        c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "pad": pad} for i in range(b, b + 20)]})
    stop = threading.Event()
    errors = []

    def writer(w):
        wc = Client(r.url, timeout_ms=30000)
        i = 0
        while not stop.is_set():
            i += 1
            _id = (w * 37 + i * 11) % 200
            try:
                wc.cmd({"update": "c", "$db": DB, "updates": [
                    {"q": {"_id": _id}, "u": {"$set": {"pad": pad[:-(i % 64) - 1], "v": i}}}]})
            except Exception as e:   # noqa: BLE001
                errors.append(repr(e))
                break
        wc.close()
    ws = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(8)]
    for w in ws:
        w.start()
    outcomes = []
    try:
        for _ in range(2):
            mc = Client(r.url, timeout_ms=120000)
            res = mc.cmd({"moveChunk": NS, "find": {"k": 0}, "to": "shard1", "$db": "admin"})
            mc.close()
            outcomes.append("ok" if res.get("ok") == 1 else res.get("errmsg", "")[:80])
            assert donor.alive(), "the donor died: %s" % donor.log_text()[-1500:]
            if res.get("ok") == 1:
                break
            settled(ss)
    finally:
        stop.set()
        for w in ws:
            w.join(30)
    print("  outcomes: %s" % outcomes, flush=True)
    assert donor.alive()
    settled(ss)
    ids = sorted(d["_id"] for d in c.find_all("c", DB, {}, batchSize=50, projection={"_id": 1}))
    assert ids == list(range(200)), len(ids)


# ---- (b) the recovery's decision comes from a table fetched after its fence ----------

@test
def test_recovery_decides_after_its_fence(t):
    """The donor dies with its commit on its way to the config server (held there 6 s by
    failCommand's block). After the restart a refresh of the collection starts and
    fetches the table before the commit lands, and is held before installing it
    (hangRefreshBeforeInstall); the commit lands; the recovery's fence returns. Its
    decision must say committed (the recipient owns the range): reading that held,
    older refresh said aborted and the recipient deleted the only owned copy."""
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    dc = donor.client()
    n5 = fp(dc, "moveChunkHangAtStep5", "alwaysOn")
    th, res = move_async(r.url)
    fp_wait(dc, "moveChunkHangAtStep5", n5 + 1)
    cc = cfg.client()
    nf = fp(cc, "failCommand", "alwaysOn",
            failCommands=["_configsvrCommitChunkMigration", "_configsvrEnsureChunkVersionIsGreaterThan"],
            blockConnection=True, blockTimeMS=6000, failInternalCommands=True)
    fp(dc, "moveChunkHangAtStep5", "off")
    dc.close()
    fp_wait(cc, "failCommand", nf + 1)          # the commit is held at the config server
    donor.kill()
    th.join(60)
    donor.start()                               # recovery: fence sent, held 6 s
    restarted = time.monotonic()
    dc = donor.client()
    nr = fp(dc, "hangRefreshBeforeInstall", "alwaysOn")
    flusher = Client(donor.url, timeout_ms=60000)
    send(flusher, {"_flushRoutingTableCacheUpdates": NS, "$db": "admin"})
    fp_wait(dc, "hangRefreshBeforeInstall", nr + 1)   # fetched before the commit landed
    wait_until(lambda: "migration committed ns=%s" % NS in cfg.log_text(), 20,
               "the held commit landed")
    # the recovery's fence (held 6 s from the restart) has returned
    left = restarted + 6.0 + 1.5 - time.monotonic()
    if left > 0:
        time.sleep(left)
    fp(dc, "hangRefreshBeforeInstall", "off")
    fp(cc, "failCommand", "off")
    reply(flusher)
    flusher.close()
    settled(ss)
    assert owner_of_upper(c) == "shard1"
    assert local_docs(recipient, {"k": {"$gte": N // 2}}) == N // 2, \
        "the recipient deleted the range it owns"
    all_there(c)


# ---- (c) _recvChunkAbort is acknowledged only once the task is ready ------------------

@test
def test_abort_acknowledged_after_task_ready(t):
    """The donor aborts (moveChunkHangAtStep3, action error) while the recipient's thread
    is held at migrateThreadHangAtStep7; the recipient is killed right after the abort
    was acknowledged. Its task must be ready (not pending): after the restart its copy is
    deleted, and a new move of the same range into it succeeds."""
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    rc_ = recipient.client()
    fp(rc_, "migrateThreadHangAtStep7", "alwaysOn")
    rc_.close()
    dc = donor.client()
    fp(dc, "moveChunkHangAtStep3", "alwaysOn", action="error")
    res = c.cmd({"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})
    assert res.get("ok") == 0, res
    fp(dc, "moveChunkHangAtStep3", "off")
    dc.close()
    assert not sdocs(donor, "migrationCoordinators"), "the donor has not finished its abort"
    recipient.kill()
    recipient.start()
    settled(ss)
    assert local_docs(recipient) == 0, "the aborted copy stayed on the recipient"
    t0 = time.monotonic()
    c.ok({"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})
    assert time.monotonic() - t0 < 8, "the move waited for a pending task"
    assert owner_of_upper(c) == "shard1"
    all_there(c)


# ---- (d) only the holder leaves a critical section ------------------------------------

@test
def test_critical_section_left_only_by_its_holder(t):
    """A migration holds the collection's critical section (held at step 5); another
    party's leave (_testCriticalSection leave) must not end it: a versioned write through
    the router keeps waiting until the migration leaves it."""
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    dc = donor.client()
    n5 = fp(dc, "moveChunkHangAtStep5", "alwaysOn")
    th, res = move_async(r.url)
    fp_wait(dc, "moveChunkHangAtStep5", n5 + 1)
    dc.ok({"_testCriticalSection": NS, "action": "leave", "$db": "admin"})
    wres = {}

    def write():
        wc = Client(r.url, timeout_ms=60000)
        wres["t0"] = time.monotonic()
        wres["r"] = wc.cmd({"update": "c", "$db": DB, "updates": [{"q": {"_id": N - 1}, "u": {"$set": {"v": 7}}}]})
        wres["t1"] = time.monotonic()
        wc.close()
    wt = threading.Thread(target=write, daemon=True)
    wt.start()
    time.sleep(1.5)
    assert wt.is_alive(), "a write went through a critical section someone else left: %s" % wres
    fp(dc, "moveChunkHangAtStep5", "off")
    dc.close()
    th.join(60)
    wt.join(60)
    assert res["r"].get("ok") == 1, res["r"]
    assert wres["r"].get("ok") == 1 and wres["r"].get("n") == 1, wres["r"]
    assert owner_of_upper(c) == "shard1"
    assert c.ok({"find": "c", "$db": DB, "filter": {"_id": N - 1}})["cursor"]["firstBatch"][0]["v"] == 7


@test
def test_unreadable_coordinator_keeps_collection_blocked(t):
    """A coordinator document that does not parse (only its namespace readable) is found
    at start-up: its outcome cannot be known, so the collection stays blocked (its
    critical section held, a write times out) and new migrations stay refused, until
    someone repairs it — never skipped as if nothing happened."""
    import sqlite3
    import struct
    cfg, ss, r, c = setup(t)
    donor = ss[0]
    donor.kill()

    def bson_str_doc(k, v):
        e = b"\x02" + k.encode() + b"\x00" + struct.pack("<i", len(v) + 1) + v.encode() + b"\x00"
        return struct.pack("<i", 4 + len(e) + 1) + e + b"\x00"
    db = sqlite3.connect(os.path.join(donor.dbpath, "shard.sqlite"))
    db.execute("INSERT INTO shard_docs(coll, id, doc) VALUES (?, ?, ?)",
               ("migrationCoordinators", "0123456789abcdef0123456789abcdef", bson_str_doc("nss", NS)))
    db.commit()
    db.close()
    donor.start()
    res = c.cmd({"update": "c", "$db": DB, "maxTimeMS": 1500,
                 "updates": [{"q": {"_id": 1}, "u": {"$set": {"v": 9}}}]})
    assert res.get("ok") != 1 or res.get("writeErrors") or res.get("n") != 1, \
        "a write went through while a migration's outcome is unknown: %s" % res
    res = c.cmd({"moveChunk": NS, "find": {"k": 0}, "to": "shard1", "$db": "admin"})
    assert res.get("ok") == 0, res
    dc = donor.client()
    st = dc.ok({"serverStatus": 1, "$db": "admin"})["migrations"]
    assert st.get("recoveriesStuck") == 1 and st["recoveriesPending"] >= 1, st
    dc.close()


# ---- (e) shutdown waits for the migration threads -------------------------------------

@test
def test_shutdown_waits_for_migration_threads(t):
    """SIGTERM while the donor thread waits on the recipient (its _recvChunkStart held
    there longer than shutdown's old 3 s bound): the donor must wait for its migration
    thread to end ('migration ended' in its log) before freeing what it uses, then exit 0."""
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    rc_ = recipient.client()
    n = fp(rc_, "hangBeforeRecvChunkStart", "alwaysOn")
    th, res = move_async(r.url, timeout_ms=60000)
    fp_wait(rc_, "hangBeforeRecvChunkStart", n + 1)
    donor.proc.send_signal(signal.SIGTERM)
    time.sleep(4.5)
    fp(rc_, "hangBeforeRecvChunkStart", "off")
    rc_.close()
    code = donor.proc.wait(30)
    donor.log.close()
    text = donor.log_text()
    assert code == 0, "the donor exited with %s" % code
    assert "migration ended ns=%s" % NS in text, "the donor exited before its migration thread ended"
    th.join(60)


# ---- (f) commitStart is set and reported ----------------------------------------------

@test
def test_recipient_reports_commit_start(t):
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    rc_ = recipient.client()
    n4 = fp(rc_, "migrateThreadHangAtStep4", "alwaysOn")
    th, res = move_async(r.url)
    fp_wait(rc_, "migrateThreadHangAtStep4", n4 + 1)
    inprog = rc_.ok({"serverStatus": 1, "$db": "admin"})["migrations"]["inprog"]
    assert inprog and inprog[0]["state"] == "commitStart", inprog
    fp(rc_, "migrateThreadHangAtStep4", "off")
    rc_.close()
    th.join(60)
    assert res["r"].get("ok") == 1, res["r"]
    all_there(c)


@test
def test_recovery_finds_recipient_by_shard_name(t):
    """The donor dies after persisting its coordinator document (moveChunkHangAtStep2,
    crash); the document's recipientHost is then made stale (a host nobody serves, same
    length so the BSON stays valid). The restarted donor's recovery must find the
    recipient by its shard name in config.shards, tell it, and settle."""
    import sqlite3
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    dc = donor.client()
    fp(dc, "moveChunkHangAtStep2", "alwaysOn", action="crash")
    dc.close()
    res = c.cmd({"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})
    assert res.get("ok") == 0, res
    wait_until(lambda: not donor.alive(), 20, "the donor crashed at step 2")
    donor.kill()
    db = sqlite3.connect(os.path.join(donor.dbpath, "shard.sqlite"))
    rows = db.execute("SELECT id, doc FROM shard_docs WHERE coll = 'migrationCoordinators'").fetchall()
    assert len(rows) == 1, rows
    stale = recipient.url.replace("127.0.0.1", "127.0.0.2").encode()
    doc = bytes(rows[0][1])
    assert doc.count(recipient.url.encode()) == 1, doc
    db.execute("UPDATE shard_docs SET doc = ? WHERE coll = 'migrationCoordinators' AND id = ?",
               (doc.replace(recipient.url.encode(), stale), rows[0][0]))
    db.commit()
    db.close()
    donor.start()
    settled(ss)
    assert owner_of_upper(c) == "shard0"
    assert local_docs(recipient) == 0, "the recipient's partial copy stayed"
    c.ok({"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})
    all_there(c)


# ---- (g) a start that arrives after the donor gave up ---------------------------------

@test
def test_late_start_after_donor_gave_up(t):
    """_recvChunkStart held at the recipient past the donor's 20 s deadline: the donor
    aborts and tells the recipient, which has not seen the start yet. When the start
    finally arrives it must be refused: no receive in 'fail' refusing every migration,
    no pending task; the next move into the recipient succeeds at once."""
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    rc_ = recipient.client()
    n = fp(rc_, "hangBeforeRecvChunkStart", "alwaysOn")
    th, res = move_async(r.url, timeout_ms=90000)
    fp_wait(rc_, "hangBeforeRecvChunkStart", n + 1)
    th.join(60)
    assert not th.is_alive() and res["r"].get("ok") == 0, res
    assert not sdocs(donor, "migrationCoordinators"), "the donor has not finished its abort"
    fp(rc_, "hangBeforeRecvChunkStart", "off")    # the held start arrives now
    wait_until(lambda: "late migration start refused" in recipient.log_text()
               or "migration receive failed" in recipient.log_text(), 10, "the late start handled")
    time.sleep(0.5)
    st = rc_.ok({"serverStatus": 1, "$db": "admin"})["migrations"]
    assert not st["inprog"], "a receive nobody will decide: %s" % st["inprog"]
    assert not sdocs(recipient, "rangeDeletions"), "a pending task stayed on the recipient"
    rc_.close()
    t0 = time.monotonic()
    c.ok({"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})
    assert time.monotonic() - t0 < 8
    assert owner_of_upper(c) == "shard1"
    all_there(c)


# ---- item 6: moveChunk.from once the outcome is known ---------------------------------

@test
def test_move_from_logged_once_outcome_known(t):
    """The commit lands but the donor sees an error (failMigrationCommit), and the
    config server refuses the fence for a while, so the outcome stays unknown past the
    donor's own tries and a recovery finishes it. moveChunk.from is written once, by the
    recovery, with the real outcome — never with 'unknown'."""
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    dc = donor.client()
    fp(dc, "failMigrationCommit", "alwaysOn", action="error")
    cc = cfg.client()
    fp(cc, "failCommand", "alwaysOn", failCommands=["_configsvrEnsureChunkVersionIsGreaterThan"],
       errorCode=6, failInternalCommands=True)
    res = c.cmd({"moveChunk": NS, "find": {"k": N - 1}, "to": "shard1", "$db": "admin"})
    assert res.get("ok") == 0, res
    fp(dc, "failMigrationCommit", "off")
    time.sleep(0.5)
    froms = changelog(c, "moveChunk.from")
    assert not froms, "moveChunk.from written before the outcome was known: %s" % froms
    fp(cc, "failCommand", "off")
    cc.close()
    dc.close()
    settled(ss)
    wait_until(lambda: changelog(c, "moveChunk.from"), 20, "moveChunk.from written")
    time.sleep(0.3)
    froms = changelog(c, "moveChunk.from")
    assert len(froms) == 1, froms
    assert froms[0]["details"]["note"] == "success", froms[0]
    assert owner_of_upper(c) == "shard1"
    all_there(c)


# ---- item 2: index DDL while a migration is in flight ---------------------------------

def index_list(s):
    sc = s.client()
    try:
        r = sc.ok({"listIndexes": "c", "$db": DB})
        return sorted((ix["name"], bool(ix.get("unique"))) for ix in r["cursor"]["firstBatch"])
    finally:
        sc.close()


@test
def test_index_ddl_on_donor_reaches_recipient(t):
    """With the migration held after its catch-up (moveChunkHangAtStep3), a unique index
    is created and another index dropped on the donor alone (the commands never reach
    the recipient). After the commit the recipient's index list is the donor's."""
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    c.ok({"createIndexes": "c", "$db": DB, "indexes": [{"key": {"v": 1}, "name": "v_1"}]})
    dc = donor.client()
    n3 = fp(dc, "moveChunkHangAtStep3", "alwaysOn")
    th, res = move_async(r.url)
    fp_wait(dc, "moveChunkHangAtStep3", n3 + 1)
    dc.ok({"createIndexes": "c", "$db": DB,
           "indexes": [{"key": {"k": 1, "_id": 1}, "name": "k_id_unique", "unique": True}]})
    dc.ok({"dropIndexes": "c", "$db": DB, "index": "v_1"})
    fp(dc, "moveChunkHangAtStep3", "off")
    dc.close()
    th.join(60)
    assert res["r"].get("ok") == 1, res["r"]
    want = index_list(donor)
    assert ("k_id_unique", True) in want and ("v_1", False) not in want, want
    assert index_list(recipient) == want, (index_list(recipient), want)
    all_there(c)


@test
def test_index_ddl_through_router_during_migration(t):
    """The same through the router while the migration is held: the commands wait for
    the migration on the recipient, succeed once it has committed, and both shards end
    with the same index list."""
    cfg, ss, r, c = setup(t)
    donor, recipient = ss
    c.ok({"createIndexes": "c", "$db": DB, "indexes": [{"key": {"v": 1}, "name": "v_1"}]})
    dc = donor.client()
    n3 = fp(dc, "moveChunkHangAtStep3", "alwaysOn")
    th, res = move_async(r.url)
    fp_wait(dc, "moveChunkHangAtStep3", n3 + 1)
    ddl = {}

    def run_ddl():
        dd = Client(r.url, timeout_ms=60000)
        ddl["create"] = dd.cmd({"createIndexes": "c", "$db": DB, "indexes": [
            {"key": {"k": 1, "_id": 1}, "name": "k_id_unique", "unique": True}]})
        ddl["drop"] = dd.cmd({"dropIndexes": "c", "$db": DB, "index": "v_1"})
        dd.close()
    dt = threading.Thread(target=run_ddl, daemon=True)
    dt.start()
    time.sleep(1.0)
    fp(dc, "moveChunkHangAtStep3", "off")
    dc.close()
    th.join(60)
    dt.join(60)
    assert res["r"].get("ok") == 1, res["r"]
    assert ddl["create"].get("ok") == 1, ddl
    assert ddl["drop"].get("ok") == 1, ddl
    want = index_list(donor)
    assert ("k_id_unique", True) in want and ("v_1", False) not in want, want
    assert index_list(recipient) == want, (index_list(recipient), want)
    all_there(c)


if __name__ == "__main__":
    main()
