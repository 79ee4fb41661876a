#!/usr/bin/env python3
"""
test_router_ddl_config_down.py — a router answers dropIndexes with an error, and stays up,
when the config server is out of reach while it gathers the targets (found by the chaos
soak, seed 1956671508: `r0 died on its own (exit -11)`, a segfault in bson_destroy).
dropIndexes targets every shard, so its target builder lists the shards through the config
server after it has prepared the requests of the chunk owners; when that listing failed, the
prepared requests were cleared as if they had been sent — their zeroed, never initialised
reply destroyed — and the router crashed. Now a prepared request counts as not sent
(router/rt_indexes.c add_req) until rt_send_all fills it.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403


@test
def test_drop_indexes_with_config_server_down(t):
    cl = t.cluster(shards=2, routers=1)
    c = cl.client(0)
    c.ok({"enableSharding": "app", "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": "app.c", "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": "app", "documents": [{"_id": i, "k": i} for i in range(10)]})
    c.ok({"createIndexes": "c", "$db": "app", "indexes": [{"key": {"v": 1}, "name": "v_1"}]})
    c.ok({"find": "c", "$db": "app", "filter": {}})      # the routing table is cached
    cl.config.kill()
    r = c.cmd({"dropIndexes": "c", "$db": "app", "index": "v_1"})
    assert r.get("ok") == 0, r
    p = c.cmd({"ping": 1, "$db": "admin"})
    assert p.get("ok") == 1 and cl.routers[0].alive(), "the router died: %s / %s" % (
        p, cl.routers[0].log_text()[-300:])
    cl.config.start()
    wait_until(lambda: c.cmd({"dropIndexes": "c", "$db": "app", "index": "v_1"}).get("ok") == 1, 20,
               "dropIndexes once the config server is back")
    r = cl.shards[0].client().ok({"listIndexes": "c", "$db": "app"})   # the only owner
    names = [x["name"] for x in r["cursor"]["firstBatch"]]
    assert "v_1" not in names, names


if __name__ == "__main__":
    main()
