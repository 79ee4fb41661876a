"""
test_router_mongos.py — every router keeps an entry in config.mongos, as a mongos does:
{_id: "<host:port>", ping: Date, up: seconds, waiting, mongoVersion}, written when it
starts and refreshed every 10 s; two routers have two entries.
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


if __name__ == "__main__":
    main()
