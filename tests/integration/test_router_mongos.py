"""
test_router_mongos.py — every router keeps an entry in config.mongos, as a mongos does:
{_id: "<host:port>", ping: Date, up: seconds, waiting, mongoVersion}, written when it
starts and refreshed every 10 s; two routers have two entries. And dbStats as mongos
answers it: every shard's reply under raw.<shard>, the figures summed.
"""
import time

from lib import *


def mongos_docs(c):
    return {d["_id"]: d for d in c.find_all("mongos", "config")}


@test
def test_routers_register_and_refresh(t):
    cl = t.cluster(shards=1, routers=2)
    c = cl.client(0)
    docs = wait_until(lambda: len(mongos_docs(c)) == 2 and mongos_docs(c), 10, "both routers in config.mongos")
    for r in cl.routers:
        port = r.url.rsplit(":", 1)[1]
        entry = [d for k, d in docs.items() if k.endswith(":" + port)]
        assert len(entry) == 1, (port, docs)
        for field in ("ping", "up", "waiting", "mongoVersion"):
            assert field in entry[0], (field, entry[0])
    first = {k: d["ping"] for k, d in docs.items()}
    time.sleep(10.5)  # one refresh period (MongoDB: every 10 s)
    later = mongos_docs(c)
    for k, ping in first.items():
        assert later[k]["ping"] != ping, "config.mongos entry %s was not refreshed: %s" % (k, later[k])


@test
def test_db_stats_sums_the_shards(t):
    cl = t.cluster(shards=2)
    c = cl.client(0)
    c.ok({"enableSharding": "st", "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": "st.sh", "key": {"_id": 1}, "$db": "admin"})
    c.ok({"split": "st.sh", "middle": {"_id": 50}, "$db": "admin"})
    c.ok({"moveChunk": "st.sh", "find": {"_id": 50}, "to": "shard1", "$db": "admin"})
    c.ok({"insert": "sh", "$db": "st", "documents": [{"_id": i, "p": "x" * (i % 9) * 40} for i in range(100)]})
    c.ok({"insert": "plain", "$db": "st", "documents": [{"_id": i} for i in range(7)]})
    r = c.ok({"dbStats": 1, "$db": "st", "scale": 2})
    assert list(r) == ["raw", "db", "collections", "views", "objects", "avgObjSize", "dataSize",
                       "storageSize", "totalSize", "indexes", "indexSize", "scaleFactor",
                       "fsUsedSize", "fsTotalSize", "ok", "$clusterTime", "operationTime"], list(r)
    assert sorted(r["raw"]) == ["shard0", "shard1"], r
    direct = {("shard%d" % i): s.client().ok({"dbStats": 1, "$db": "st", "scale": 2})
              for i, s in enumerate(cl.shards)}
    for name, d in direct.items():
        raw = r["raw"][name]
        for f in ("db", "collections", "objects", "dataSize", "indexes", "scaleFactor"):
            assert raw[f] == d[f], (name, f, raw, d)
    assert r["raw"]["shard0"]["collections"] == 2 and r["raw"]["shard1"]["collections"] == 1, r
    assert r["objects"] == 107 and r["collections"] == 3 and r["indexes"] == 3, r
    for f in ("dataSize", "storageSize", "totalSize", "indexSize"):
        assert r[f] == sum(x[f] for x in r["raw"].values()), (f, r)
    assert r["scaleFactor"] == 2 and r["db"] == "st" and r["views"] == 0, r
    unscaled = sum(x["avgObjSize"] * x["objects"] for x in r["raw"].values())
    assert abs(r["avgObjSize"] - unscaled / 107) < 1e-6, r
    e = c.ok({"dbStats": 1, "$db": "none"})
    assert e["objects"] == 0 and e["avgObjSize"] == 0 and sorted(e["raw"]) == ["shard0", "shard1"], e
    c.err({"dbStats": 1, "$db": "st", "scale": -1}, 51024)


if __name__ == "__main__":
    main()
