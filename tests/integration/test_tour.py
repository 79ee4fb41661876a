"""
test_tour.py — `shardctl tour` and `make tour` (scripts/tour.sh) as a learner sees them.

- The migration tour (--auto --pause-ms 0) names every step (NAMES.md's words and phases,
  MongoDB's names) and shows at each stop what is persisted: the coordinator document
  from step 2 to the end of step 6 (decision committed at 6) and gone after; a pending
  range-deletion task on both shards from step 2, the recipient's gone and the donor's
  ready at the end; the chunk on the donor at its old version until step 6, then on the
  recipient with a higher major version; the shards' filtering metadata; the probe write
  waiting in the critical section (steps 4 and 5: MaxTimeMSExpired) and succeeding
  elsewhere; the changelog entries of the steps. The move committed, the data is intact,
  no failpoint is left on.
- A tour interrupted with SIGINT in the middle turns every failpoint off, and the
  migration then finishes by itself.
- `tour balancer` runs exactly one round, with its threshold, choice and balancer.round.
- On a cluster without --enable-test-commands, the tour says how to start one.
- scripts/tour.sh with TOUR_AUTO=1 runs to the end and refuses a directory holding a cluster.
"""
import os
import re
import signal
import subprocess
import time

from lib import *

NS_DB, NS_COLL = "tour", "users"
NS = NS_DB + "." + NS_COLL
DOCS = 4000
STEP_FPS = ["moveChunkHangAtStep%d" % s for s in range(1, 7)]
STEP_TITLES = ["checks (checks)", "start clone (startClone)", "clone (clone)",
               "critical section (criticalSection)", "commit on recipient (commitOnRecipient)",
               "commit on config server (commitOnConfig)"]


def sharded_collection(c):
    """tour.users sharded on _id in 4 chunks on shard0, DOCS documents: the tour moves the
    first chunk ([MinKey, 1000)) from shard0, which owns the most, to another shard."""
    c.ok({"balancerStop": 1, "$db": "admin"})
    c.ok({"enableSharding": NS_DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"_id": 1}, "$db": "admin"})
    for m in (1000, 2000, 3000):
        c.ok({"split": NS, "middle": {"_id": m}, "$db": "admin"})
    for b in range(0, DOCS, 1000):
        c.ok({"insert": NS_COLL, "$db": NS_DB, "documents": [{"_id": i, "v": i} for i in range(b, b + 1000)]})


def shardctl(url, *args, timeout=120, **kw):
    return subprocess.run([SHARDCTL, "--host", url] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, **kw)


def sections(out):
    """The tour's output cut at its '== ... ==' headers: {title: text}."""
    parts = re.split(r"^== (.*?) ==$", out, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def held_part(text):
    """What a step's section shows once held (after its '-- held at' line)."""
    i = text.find("-- held at")
    assert i >= 0, "never held: %s" % text[-800:]
    return text[i:]


def listing(text, what):
    """The lines listed under '  <what>:' (a who + config collection), [] for 'none'."""
    m = re.search(r"^  %s:(.*)$" % re.escape(what), text, re.M)
    assert m, "no %r in: %s" % (what, text[:1500])
    if m.group(1).strip() == "none":
        return []
    rest = text[m.end() + 1:].splitlines()
    docs = []
    for line in rest:
        if not line.startswith("    "):
            break
        docs.append(json.loads(line.strip()))
    return docs


def chunk_line(text):
    m = re.search(r"config\.chunks: the chunk is on (\S+), version \(lastmod\) (\d+)\|(\d+)", text)
    assert m, text[:1500]
    return m.group(1), int(m.group(2))


def owned(text, who):
    m = re.search(r"^  %s\s+filtering metadata: shardVersion \d+\|\d+, chunks owned (\d+)" % who, text, re.M)
    return int(m.group(1)) if m else None


def failpoints_left_on(shards):
    on = []
    for s in shards:
        st = s.client().ok({"serverStatus": 1, "$db": "admin"})
        for name in STEP_FPS:
            if st["failpoints"][name]["mode"] != "off":
                on.append((s.name, name, st["failpoints"][name]["mode"]))
    return on


@test
def test_tour_every_step(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    sharded_collection(c)
    p = shardctl(cl.routers[0].url, "tour", "--ns", NS, "--auto", "--pause-ms", "0")
    out = p.stdout
    with open(os.path.join(t.dir, "tour.out"), "w") as f:
        f.write(out)
    assert p.returncode == 0, out[-3000:]
    sec = sections(out)
    steps = [sec.get("step %d of 6: %s" % (i + 1, title)) for i, title in enumerate(STEP_TITLES)]
    assert all(s is not None for s in steps), sorted(sec)
    for name, s in (("MigrationSourceManager", 0), ("_recvChunkStart", 1), ("_migrateClone", 2),
                    ("critical section", 3), ("_recvChunkCommit", 4), ("_configsvrCommitChunkMigration", 5)):
        assert name in steps[s], (name, steps[s][:600])
    for s in steps:
        assert "why: " in s and "watch: " in s, s[:600]
    held = [held_part(s) for s in steps]
    before, end = sec["before the move"], sec["then: completing"]
    end_state = end[end.index("moveChunk answered ok"):]

    # The coordinator document: from step 2 to the end of step 6, decided at 6.
    assert listing(before, "donor config.migrationCoordinators") == []
    assert listing(held[0], "donor config.migrationCoordinators") == []
    for i in range(1, 6):
        docs = listing(held[i], "donor config.migrationCoordinators")
        assert len(docs) == 1 and docs[0]["donorShardId"] == "shard0" and docs[0]["recipientShardId"] == "shard1", \
            (i + 1, docs)
        assert ("decision" in docs[0]) == (i == 5), (i + 1, docs)
    assert held[5].count('"decision" : "committed"') == 1, held[5][:1500]
    assert listing(end_state, "donor config.migrationCoordinators") == []

    # Range-deletion tasks: pending on both shards from step 2; then the recipient's is
    # gone and the donor's is ready (not pending) for the range deleter, or already done.
    for who in ("donor", "recipient"):
        assert listing(held[0], "%s config.rangeDeletions" % who) == []
        for i in range(1, 6):
            docs = listing(held[i], "%s config.rangeDeletions" % who)
            if who == "recipient" and i == 1 and not docs:
                continue   # its migrate thread writes it as its first act: maybe not yet
            assert len(docs) == 1 and docs[0].get("pending") is True, (who, i + 1, docs)
    assert listing(end_state, "recipient config.rangeDeletions") == []
    donor_tasks = listing(end_state, "donor config.rangeDeletions")
    assert all("pending" not in d for d in donor_tasks), donor_tasks

    # The chunk on the config server: the donor's until the commit, then the recipient's
    # with a higher major version; the shards' filtering metadata follow.
    shard, major0 = chunk_line(before)
    assert shard == "shard0"
    for i in range(5):
        assert chunk_line(held[i]) == ("shard0", major0), (i + 1, chunk_line(held[i]))
    shard6, major6 = chunk_line(held[5])
    assert shard6 == "shard1" and major6 > major0, (shard6, major6, major0)
    assert owned(before, "donor") == 4 and owned(held[4], "donor") == 4
    assert owned(held[5], "donor") == 3, held[5][:2000]
    assert owned(end_state, "recipient") == 1, end_state[:2000]

    # The probes: the write waits in the critical section (steps 4 and 5) and is not
    # applied; everywhere else reads and writes succeed.
    ok_writes = 0
    for i, text in enumerate([before] + held + [end_state]):
        assert re.search(r"^  read : ok in \d+ ms, found it$", text, re.M), text[:2500]
        waited = re.search(r"^  write: .*MaxTimeMSExpired.*it waited, and was not applied$", text, re.M)
        wrote = re.search(r"^  write: ok in \d+ ms, nModified 1$", text, re.M)
        in_crit = i in (4, 5)   # held[3], held[4]: the ends of steps 4 and 5
        assert (waited is not None) == in_crit and (wrote is not None) != in_crit, (i, text[-1200:])
        ok_writes += wrote is not None

    # The changelog, step by step.
    assert "moveChunk.start (shard0)" in held[1], held[1][-800:]
    for i in (0, 2, 3, 4, 5):
        assert "moveChunk.start" not in held[i], i + 1
    for what in ("moveChunk.commit (shard0)", "moveChunk.from (shard0)", "moveChunk.to (shard1)"):
        assert what in end_state, (what, end_state[-1500:])
    assert "The tour is over: %s moved from shard0 to shard1." % NS in out

    # The move committed, the data is intact, nothing left held.
    chunk = c.find_all("chunks", "config", {"min": {"_id": MINKEY}})
    assert len(chunk) == 1 and chunk[0]["shard"] == "shard1", chunk
    assert num(c.ok({"count": NS_COLL, "$db": NS_DB})["n"]) == DOCS
    probe = c.find_all(NS_COLL, NS_DB, {"_id": 0})
    assert probe[0].get("tourWrites") == ok_writes == 6, (probe, ok_writes)   # before, steps 1-3, 6, after
    assert "tourWrites %d; writes that answered ok during the tour: %d" % (ok_writes, ok_writes) in out
    assert failpoints_left_on(cl.shards) == []


@test
def test_tour_interrupted_releases_everything(t):
    cl = t.cluster(shards=2)
    c = cl.client()
    sharded_collection(c)
    p = subprocess.Popen([SHARDCTL, "--host", cl.routers[0].url, "tour", "--ns", NS], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    out = []
    try:
        # Enter for the start and steps 1-3 (the prompt has no newline, so they are sent
        # ahead); the tour then stops at step 4's prompt, held inside the critical section.
        p.stdin.write("\n" * 4)
        p.stdin.flush()
        deadline = time.time() + 60
        while time.time() < deadline:
            line = p.stdout.readline()
            assert line, "".join(out)[-2000:]
            out.append(line)
            if line.startswith("-- held at the end of step 4"):
                break
        else:
            raise AssertionError("not held at step 4 in time: %s" % "".join(out)[-2000:])
        time.sleep(0.5)   # the tour shows the state and waits for Enter
        assert failpoints_left_on(cl.shards[:1]), "nothing on while the tour holds the donor"
        p.send_signal(signal.SIGINT)
        rest = p.communicate(timeout=30)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = "".join(out) + rest
    assert p.returncode == 1, (p.returncode, text[-1500:])
    assert "shardctl tour stopped: interrupted (Ctrl-C)" in text, text[-1500:]
    assert "Every moveChunkHangAtStep failpoint of shard0 is off, so the migration goes on by itself" in text
    assert failpoints_left_on(cl.shards) == []
    # Released, the migration finishes by itself: the chunk moves, nothing is lost.
    wait_until(lambda: c.find_all("chunks", "config", {"min": {"_id": MINKEY}})[0]["shard"] == "shard1",
               timeout=30, what="the interrupted tour's migration to commit")
    wait_until(lambda: not c.ok({"currentOp": 1, "$db": "admin"})["inprog"], timeout=30, what="the migration's end")
    assert num(c.ok({"count": NS_COLL, "$db": NS_DB})["n"]) == DOCS


@test
def test_tour_balancer_one_round(t):
    cl = t.cluster(shards=3)
    c = cl.client()
    sharded_collection(c)   # 4 chunks on shard0, none elsewhere: over the threshold of 2
    t0 = c.ok({"balancerStatus": 1, "$db": "admin"})["numBalancerRounds"]
    p = shardctl(cl.routers[0].url, "tour", "balancer", "--auto", "--pause-ms", "0")
    out = p.stdout
    assert p.returncode == 0, out[-3000:]
    for want in ("chunk count difference 4 (moves from 2)", "next moves:", "shard0 -> shard1  (chunksImbalance)",
                 "-- the round chose its migrations; each donor is held at the end of step 1 (checks) --",
                 "balancer.round: candidateChunks 1, chunksMoved 1,", "The tour is over: one balancer round"):
        assert want in out, (want, out[-3000:])
    # Exactly one round ran with balancing on, and it moved one chunk: nothing after it.
    assert num(c.ok({"balancerStatus": 1, "$db": "admin"})["numBalancerRounds"]) == num(t0) + 1
    time.sleep(1.0)
    chunks = c.find_all("chunks", "config", {})
    per = {s: sum(1 for ch in chunks if ch["shard"] == s) for s in ("shard0", "shard1", "shard2")}
    assert per == {"shard0": 3, "shard1": 1, "shard2": 0}, per
    rounds = [r for r in c.find_all("actionlog", "config", {"what": "balancer.round"})
              if "why" not in r["details"]]
    assert len(rounds) == 1 and num(rounds[0]["details"]["chunksMoved"]) == 1, rounds
    assert c.ok({"balancerStatus": 1, "$db": "admin"})["mode"] == "off"   # as the tour found it
    st = cl.shards[0].client().ok({"serverStatus": 1, "$db": "admin"})
    assert st["failpoints"]["moveChunkHangAtStep1"]["mode"] == "off"
    assert failpoints_left_on(cl.shards) == []


@test
def test_tour_without_test_commands_says_how(t):
    cfg = t.configsvr(test_commands=False)
    ss = [t.shardd("shard%d" % i, test_commands=False) for i in range(2)]
    r = t.router(cfg.url, test_commands=False)
    c = r.client()
    for i, s in enumerate(ss):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    sharded_collection(c)
    p = shardctl(r.url, "tour", "--auto", "--pause-ms", "0", timeout=30)
    assert p.returncode == 1, p.stdout
    for want in ("--enable-test-commands", "CommandNotFound" if "CommandNotFound" in p.stdout else "code 59",
                 "scripts/cluster.sh start --dir DIR --test", "make tour"):
        assert want in p.stdout, (want, p.stdout)
    # Nothing moved, nothing changed.
    assert c.find_all("chunks", "config", {"min": {"_id": MINKEY}})[0]["shard"] == "shard0"


@test
def test_make_tour_script(t):
    base = free_ports(310)[0]
    d = os.path.join(t.dir, "tour-cluster")
    env = dict(os.environ, TOUR_PORT=str(base), TOUR_DIR=d, TOUR_AUTO="1", TOUR_PAUSE_MS="0", TOUR_DOCS="4000")
    script = os.path.join(ROOT, "scripts", "tour.sh")
    try:
        p = subprocess.run(["bash", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stdout[-3000:]
        for want in ("http://127.0.0.1:%d/" % (base + 300), "== step 6 of 6: commit on config server",
                     "The tour is over: tour.users moved from shard0 to", "The cluster is still running",
                     "scripts/cluster.sh stop --dir %s" % d):
            assert want in p.stdout, (want, p.stdout[-2000:])
        # The cluster keeps running; a second start on the same directory is refused politely.
        again = subprocess.run(["bash", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert again.returncode == 1 and "already holds a cluster" in again.stdout, again.stdout
        assert Client("tcp://127.0.0.1:%d" % base).ok({"ping": 1, "$db": "admin"})
    finally:
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "cluster.sh"), "stop", "--dir", d],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


if __name__ == "__main__":
    main()
