#!/usr/bin/env python3
"""
migration_walkthrough.py — runs one held migration and prints every document and log line
of it, the details behind docs/how-a-migration-works.md (whose try-it boxes show the same
steps from the shell): a cluster of a config server, two shards and a
router on 127.0.0.1 (tests/integration/lib.py starts and stops them), app.c sharded on
{k: 1}, 10,000 documents, a split at k = 5000, then moveChunk of [5000, MaxKey) from
shard0 to shard1. The donor is held at moveChunkHangAtStep3 (the end of step 3, clone:
the recipient has caught up; before the critical section) while the script reads both
shards' currentOp and their
config.rangeDeletions / config.migrationCoordinators; then the move is let go and the
changelog and the log lines are printed.

    make && python3 docs/examples/migration_walkthrough.py [--keep]

--keep leaves the data directories and logs (the path is printed).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "integration"))
from lib import Ctx, Cluster, fp, fp_wait, send, reply, wait_until  # noqa: E402

SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]


def show(title, doc):
    print("\n### %s\n" % title)
    print(json.dumps(doc, indent=2))


def main():
    keep = "--keep" in sys.argv
    t = Ctx("walkthrough")
    try:
        cfg = t.configsvr()
        s0 = t.shardd("shard0", extra=SHARD_FLAGS)
        s1 = t.shardd("shard1", extra=SHARD_FLAGS)
        r = t.router(cfg.url)
        c = r.client()
        for i, s in enumerate((s0, s1)):
            c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
        c.ok({"enableSharding": "app", "primaryShard": "shard0", "$db": "admin"})
        c.ok({"shardCollection": "app.c", "key": {"k": 1}, "$db": "admin"})
        for lo in range(0, 10000, 1000):
            c.ok({"insert": "c", "$db": "app",
                  "documents": [{"_id": i, "k": i, "pad": "x" * 100} for i in range(lo, lo + 1000)]})
        c.ok({"split": "app.c", "middle": {"k": 5000}, "$db": "admin"})
        show("chunks before", c.ok({"getRoutingTable": "app.c", "$db": "admin"})["chunks"])

        donor, recipient = s0.client(), s1.client()
        n = fp(donor, "moveChunkHangAtStep3")
        mover = r.client(timeout_ms=120000)
        send(mover, {"moveChunk": "app.c", "find": {"k": 7000}, "to": "shard1", "$db": "admin"})
        fp_wait(donor, "moveChunkHangAtStep3", n + 1)

        show("currentOp on the donor (held at moveChunkHangAtStep3)",
             donor.ok({"currentOp": 1, "$db": "admin"}))
        show("currentOp on the recipient", recipient.ok({"currentOp": 1, "$db": "admin"}))
        for name, cl in (("donor", donor), ("recipient", recipient)):
            for coll in ("migrationCoordinators", "rangeDeletions"):
                show("config.%s on the %s" % (coll, name),
                     cl.ok({"find": coll, "$db": "config", "filter": {}})["cursor"]["firstBatch"])

        donor.ok({"configureFailPoint": "moveChunkHangAtStep3", "mode": "off", "$db": "admin"})
        show("moveChunk reply", reply(mover))
        show("chunks after", c.ok({"getRoutingTable": "app.c", "$db": "admin"})["chunks"])

        # The donor's range deletion (whenToClean "delayed", delay 0 here) empties the range.
        wait_until(lambda: not donor.ok({"find": "rangeDeletions", "$db": "config",
                                         "filter": {}})["cursor"]["firstBatch"],
                   timeout=60, what="the donor's range deletion")
        show("documents per shard after the range deletion",
             {"shard0": donor.ok({"count": "c", "$db": "app"})["n"],
              "shard1": recipient.ok({"count": "c", "$db": "app"})["n"]})
        log = c.ok({"find": "changelog", "$db": "config", "filter": {},
                    "batchSize": 1000})["cursor"]["firstBatch"]
        show("config.changelog (moveChunk.*)", [e for e in log if e["what"].startswith("moveChunk")])
        show("serverStatus.migrations on the donor",
             donor.ok({"serverStatus": 1, "$db": "admin"})["migrations"])

        pat = re.compile(r"migrat|range|critical|moveChunk|chunk", re.I)
        for p in (cfg, s0, s1, r):
            print("\n### log lines of %s\n" % p.name)
            for line in p.log_text().splitlines():
                if pat.search(line):
                    print(line)
    finally:
        t.close(keep=keep)
        if keep:
            print("\nkept: %s" % t.dir)


if __name__ == "__main__":
    main()
