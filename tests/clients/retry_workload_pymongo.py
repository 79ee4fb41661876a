#!/usr/bin/python3
"""
retry_workload_pymongo.py URL SEED OPS PREFIX — single-document retryable writes through
pymongo (retryWrites on), for test_retryable_writes.py: $inc by update_one on app.c,
insert_one on app.c, find_one_and_update ($inc f, new document) on app.c and delete_one on
app.d (two documents per group: a second run of a deleteOne would delete both). Every
call must be acknowledged (the test's proxy never drops a retry's reply). Prints one JSON
line with what was acknowledged: {"inc": {id: n}, "fam": {id: n}, "inserted": [...],
"deleted_groups": [...], "errors": [...]}.
"""
import json
import random
import sys

import pymongo
from pymongo import common, network

# Every fourth first attempt's reply is lost. After each loss pymongo marks the server
# unknown and cancels its monitor's streaming hello, which notices the cancel only at its
# next 500 ms poll of the socket (network._POLL_TIMEOUT), then re-checks no sooner than
# minHeartbeatFrequencyMS (500 ms): the retry waits for both, and 500 losses would cost
# minutes of waiting. Test knobs, as pymongo's own test suite lowers them; what is sent
# does not change.
common.MIN_HEARTBEAT_INTERVAL = 0.02
network._POLL_TIMEOUT = 0.02


def main():
    url, seed, ops, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rnd = random.Random(seed)
    cl = pymongo.MongoClient(url, retryWrites=True, serverSelectionTimeoutMS=20000,
                             socketTimeoutMS=20000)
    c, d = cl.app.c, cl.app.d
    inc, fam, inserted, deleted, errors = {}, {}, [], [], []
    groups = ["%s-%d" % (prefix, g) for g in range(ops)]
    for i in range(ops):
        k = rnd.randrange(0, 40)
        kind = rnd.choice(("inc", "inc", "insert", "fam", "delete"))
        try:
            if kind == "inc":
                r = c.update_one({"_id": k}, {"$inc": {"n": 1}})
                assert r.matched_count == 1 and r.modified_count == 1, r.raw_result
                inc[k] = inc.get(k, 0) + 1
            elif kind == "insert":
                _id = "%s-i%d" % (prefix, i)
                c.insert_one({"_id": _id, "p": prefix})
                inserted.append(_id)
            elif kind == "fam":
                doc = c.find_one_and_update({"_id": k}, {"$inc": {"f": 1}},
                                            return_document=pymongo.ReturnDocument.AFTER)
                fam[k] = fam.get(k, 0) + 1
                # the post-image a retry answers is the one the single run produced
                assert doc is not None and "f" in doc, doc
            else:
                g = groups[i]
                r = d.delete_one({"g": g})
                assert r.deleted_count == 1, r.raw_result
                deleted.append(g)
        except Exception as e:  # noqa: BLE001 — reported, the test fails on any
            errors.append("%s %d: %r" % (kind, i, e))
    print(json.dumps({"inc": inc, "fam": fam, "inserted": inserted, "deleted_groups": deleted,
                      "errors": errors[:20], "nerrors": len(errors)}))


if __name__ == "__main__":
    main()
