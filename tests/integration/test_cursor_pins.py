#!/usr/bin/env python3
"""
test_cursor_pins.py — a cursor a getMore is running on (pinned) obeys the same rules on the
router and on the config server as on a shard, now that the three keep their cursors in one
registry (common/cursor.c): a second getMore gets CursorInUse (143);
killCursors reports it killed, the getMore holding it still answers, and the cursor (with
the shard cursor behind a router cursor) is gone when that getMore ends. A getMore is held
pinned with the failpoint waitAfterPinningCursorBeforeGetMoreBatch (MongoDB's name): on the
shard for a router cursor (the router's getMore waits on the shard's), on the config server
for a config cursor.

  test_router_cursor_pinned   before: a second getMore answered CursorNotFound (43), and
                              killCursors answered cursorsNotFound and left the cursor open
  test_config_cursor_pinned   before: killCursors answered cursorsAlive and left the cursor
                              open (a later getMore still read from it)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403

DB = "pins"
POINT = "waitAfterPinningCursorBeforeGetMoreBatch"


def shard_open_cursors(s):
    return s.client().ok({"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]["open"]["total"]


@test
def test_router_cursor_pinned(t):
    cl = t.cluster(shards=1, routers=1)
    R = cl.client()
    shard = cl.shards[0]
    S = shard.client()
    R.ok({"insert": "c", "$db": DB, "documents": [{"_id": i} for i in range(10)]})
    cid = R.ok({"find": "c", "$db": DB, "filter": {}, "sort": {"_id": 1},
                "batchSize": 2})["cursor"]["id"]
    assert num(cid) != 0
    assert shard_open_cursors(shard) == 1
    n0 = fp(S, POINT)
    g = cl.client()
    send(g, {"getMore": cid, "collection": "c", "$db": DB, "batchSize": 3})
    fp_wait(S, POINT, n0 + 1)   # the router's getMore waits on the shard's: pinned on both
    R.err({"getMore": cid, "collection": "c", "$db": DB}, code=143)
    k = R.ok({"killCursors": "c", "$db": DB, "cursors": [cid]})
    assert [num(x) for x in k["cursorsKilled"]] == [num(cid)], k
    assert k["cursorsNotFound"] == [], k
    R.err({"getMore": cid, "collection": "c", "$db": DB}, code=43)   # killed: not found
    fp(S, POINT, "off")
    r = reply(g)
    assert r["ok"] == 1 and [d["_id"] for d in r["cursor"]["nextBatch"]] == [2, 3, 4], r
    # The getMore ended: the router freed its cursor and killed the shard's.
    wait_until(lambda: shard_open_cursors(shard) == 0, 10, "the shard cursor killed")
    R.err({"getMore": cid, "collection": "c", "$db": DB}, code=43)
    st = R.ok({"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]
    assert st["open"]["total"] == 0 and st["bytesBuffered"] == 0, st
    # An idle cursor is killed at once, its shard cursor with it.
    cid = R.ok({"find": "c", "$db": DB, "filter": {}, "batchSize": 2})["cursor"]["id"]
    k = R.ok({"killCursors": "c", "$db": DB, "cursors": [cid]})
    assert [num(x) for x in k["cursorsKilled"]] == [num(cid)], k
    wait_until(lambda: shard_open_cursors(shard) == 0, 10, "the shard cursor killed")


@test
def test_config_cursor_pinned(t):
    cl = t.cluster(shards=3, routers=0)
    C = cl.config.client()
    find1 = {"find": "shards", "$db": "config", "filter": {}, "sort": {"_id": 1}, "batchSize": 1}
    cid = C.ok(find1)["cursor"]["id"]
    assert num(cid) != 0
    n0 = fp(C, POINT)
    g = cl.config.client()
    send(g, {"getMore": cid, "collection": "shards", "$db": "config", "batchSize": 1})
    fp_wait(C, POINT, n0 + 1)
    C.err({"getMore": cid, "collection": "shards", "$db": "config"}, code=143)
    k = C.ok({"killCursors": "shards", "$db": "config", "cursors": [cid]})
    assert [num(x) for x in k["cursorsKilled"]] == [num(cid)], k
    assert k["cursorsAlive"] == [] and k["cursorsNotFound"] == [], k
    fp(C, POINT, "off")
    r = reply(g)
    assert r["ok"] == 1 and [d["_id"] for d in r["cursor"]["nextBatch"]] == ["shard1"], r
    C.err({"getMore": cid, "collection": "shards", "$db": "config"}, code=43)
    st = C.ok({"serverStatus": 1, "$db": "admin"})["metrics"]["cursor"]
    assert st["open"]["total"] == 0 and st["bytesHeld"] == 0, st
    # An error at the point fails that getMore, and its cursor goes.
    cid = C.ok(find1)["cursor"]["id"]
    fp(C, POINT, {"times": 1}, action="error")
    C.err({"getMore": cid, "collection": "shards", "$db": "config"}, code=192)
    C.err({"getMore": cid, "collection": "shards", "$db": "config"}, code=43)


if __name__ == "__main__":
    main()
