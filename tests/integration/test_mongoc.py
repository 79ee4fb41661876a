#!/usr/bin/env python3
"""
test_mongoc.py — libmongoc (Debian's libmongoc-dev 1.23) against minishard over MongoDB's
wire protocol: build/<mode>/c/mongoc_client (tests/clients/
mongoc_client.c) connects to a router's mongodb:// URL, inserts 5,000 documents with one
insert_many into a collection hashed over 3 shards, finds {g: 3} sorted in batches of 50
(the cursor spans the 3 shards and needs several getMores), counts with count_documents;
then the same against a standalone shard. Its printed figures are checked here.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F401,F403

BUILD = os.environ.get("BUILD", "build/rel")
CLIENT = os.path.join(ROOT, BUILD, "c", "mongoc_client")
N = 5000


def run_client(port, db, coll):
    assert os.path.exists(CLIENT), \
        "%s is missing: libmongoc-dev not installed? (scripts/deps.sh, then make)" % CLIENT
    url = "mongodb://127.0.0.1:%d/?directConnection=true" % port
    p = subprocess.run([CLIENT, "test", url, db, coll, str(N)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    out = dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l and " " not in l)
    assert p.returncode == 0 and "MONGOC OK" in p.stdout, "mongoc_client failed:\n" + p.stdout[-3000:]
    assert out.get("inserted") == str(N), out
    assert out.get("found") == str(N // 10) and out.get("ordered") == "1", out
    # 500 documents in batches of 50: the first batch comes with find, 9 more by getMore
    assert int(out.get("getmores", 0)) >= 9, out
    assert out.get("count") == str(N // 10), out
    return out


@test
def test_mongoc_router(t):
    """insert_many, a sorted cursor over 3 shards in batches of 50, count_documents."""
    cl, wp = t.wire_cluster(3)
    ss, c = cl.shards, cl.client()
    c.ok({"enableSharding": "mc", "$db": "admin"})
    c.ok({"shardCollection": "mc.docs", "key": {"_id": "hashed"}, "$db": "admin"})
    run_client(wp, "mc", "docs")
    per_shard = [s.client().ok({"count": "docs", "$db": "mc"})["n"] for s in ss]
    assert sum(per_shard) == N and all(n > 0 for n in per_shard), per_shard


@test
def test_mongoc_shard(t):
    """The same against a standalone shard."""
    wp = free_ports(1)[0]
    t.shardd("shard0", extra=["--wire-port", str(wp)])
    run_client(wp, "mc", "docs")


if __name__ == "__main__":
    main()
