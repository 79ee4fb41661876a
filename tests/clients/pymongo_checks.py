#!/usr/bin/python3
"""
pymongo_checks.py — what a pymongo user does, against one minishard process reached over
MongoDB's wire protocol. Run with Debian's python3-pymongo (3.11):

    /usr/bin/python3 tests/clients/pymongo_checks.py mongodb://127.0.0.1:PORT/ [router|shard]

Each check prints `OK <name>` or `FAIL <name>: <why>`; the last line is `PYMONGO DONE
passed=N failed=M`, exit 0 only when nothing failed. tests/integration/test_pymongo.py
runs it against a router of a 3-shard cluster (a sharded and an unsharded collection) and
against a standalone shard. Every check builds its own collection, so one failure does not
hide the next.
"""
import sys
import traceback

import pymongo
from pymongo import (ASCENDING, DeleteMany, DeleteOne, InsertOne, MongoClient, ReplaceOne,
                     ReturnDocument, UpdateMany, UpdateOne)
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

URL = sys.argv[1]
MODE = sys.argv[2] if len(sys.argv) > 2 else "router"
client = MongoClient(URL, serverSelectionTimeoutMS=5000, connectTimeoutMS=5000, socketTimeoutMS=60000)
db = client.drv
results = {"passed": 0, "failed": 0}
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def eq(got, want, what=""):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what, got, want))


def collections():
    """(name, coll) for each collection kind the mode has: on a router a sharded one
    (hashed on k, so its documents spread over every shard) and an unsharded one."""
    out = []
    if MODE == "router":
        out.append(("sharded", db.sh))
    out.append(("plain", db.plain))
    return out


@check
def setup():
    client.drop_database("drv")
    if MODE == "router":
        client.admin.command("enableSharding", "drv")
        r = client.admin.command("shardCollection", "drv.sh", key={"k": "hashed"})
        eq(r.get("collectionsharded"), "drv.sh", "shardCollection reply")
        db.create_collection("plain")
    else:
        db.create_collection("plain")


@check
def crud():
    for kind, c in collections():
        c.delete_many({})
        r = c.insert_one({"_id": 0, "k": 0, "v": "zero"})
        eq(r.inserted_id, 0, kind + " insert_one id")
        r = c.insert_many([{"_id": i, "k": i, "v": "n%d" % (i % 5), "x": i * 2} for i in range(1, 100)])
        eq(len(r.inserted_ids), 99, kind + " insert_many")
        eq(c.find_one({"_id": 0})["v"], "zero", kind + " find_one")
        got = [d["_id"] for d in c.find({"v": "n1"}).sort("_id", -1).skip(2).limit(5)]
        eq(got, [86, 81, 76, 71, 66], kind + " find sort/skip/limit")
        got = [d["_id"] for d in c.find({}, {"_id": 1}).sort([("x", ASCENDING)]).limit(3)]
        eq(got, [0, 1, 2], kind + " find projection sort")
        r = c.update_one({"_id": 5}, {"$set": {"u": 1}})
        eq((r.matched_count, r.modified_count), (1, 1), kind + " update_one")
        r = c.update_many({"v": "n2"}, {"$inc": {"x": 1000}})
        eq((r.matched_count, r.modified_count), (20, 20), kind + " update_many")
        eq(c.find_one({"_id": 2})["x"], 1004, kind + " update_many effect")
        r = c.update_one({"_id": 500, "k": 500}, {"$set": {"v": "up"}}, upsert=True)
        eq(r.upserted_id, 500, kind + " update_one upsert id")
        r = c.replace_one({"_id": 7, "k": 7}, {"k": 7, "v": "replaced"})
        eq((r.matched_count, r.modified_count), (1, 1), kind + " replace_one")
        eq(c.find_one({"_id": 7}), {"_id": 7, "k": 7, "v": "replaced"}, kind + " replace_one effect")
        r = c.delete_one({"_id": 8, "k": 8})
        eq(r.deleted_count, 1, kind + " delete_one")
        r = c.delete_many({"v": "n3"})
        eq(r.deleted_count, 19, kind + " delete_many")          # _id 8 went with delete_one
        eq(c.count_documents({}), 100 + 1 - 1 - 19, kind + " count after deletes")


@check
def bulk_write_ordered():
    for kind, c in collections():
        c.delete_many({})
        c.insert_one({"_id": 3, "k": 3})
        ops = [InsertOne({"_id": 1, "k": 1}), InsertOne({"_id": 2, "k": 2}),
               InsertOne({"_id": 3, "k": 3}),                    # duplicate: stops an ordered bulk
               InsertOne({"_id": 4, "k": 4})]
        try:
            c.bulk_write(ops, ordered=True)
            raise AssertionError(kind + " ordered bulk_write did not raise")
        except BulkWriteError as e:
            d = e.details
            eq(d["nInserted"], 2, kind + " ordered nInserted")
            eq(len(d["writeErrors"]), 1, kind + " ordered writeErrors")
            we = d["writeErrors"][0]
            eq((we["index"], we["code"]), (2, 11000), kind + " ordered error index/code")
            if "E11000 duplicate key error" not in we["errmsg"]:
                raise AssertionError("%s errmsg %r" % (kind, we["errmsg"]))
        eq(sorted(d["_id"] for d in c.find()), [1, 2, 3], kind + " ordered effect")


@check
def bulk_write_unordered():
    for kind, c in collections():
        c.delete_many({})
        c.insert_many([{"_id": i, "k": i, "n": 0} for i in (1, 2)])
        ops = [InsertOne({"_id": 1, "k": 1}),                     # dup
               InsertOne({"_id": 10, "k": 10}),
               UpdateOne({"_id": 2, "k": 2}, {"$inc": {"n": 1}}),
               UpdateMany({}, {"$set": {"m": 1}}),
               InsertOne({"_id": 2, "k": 2}),                     # dup
               ReplaceOne({"_id": 10, "k": 10}, {"k": 10, "r": True}),
               DeleteOne({"_id": 1, "k": 1}),
               UpdateOne({"_id": 2, "k": 2}, {"$bogus": {"n": 1}}),  # FailedToParse
               DeleteMany({"_id": {"$in": [99]}}),
               InsertOne({"_id": 11, "k": 11})]
        try:
            c.bulk_write(ops, ordered=False)
            raise AssertionError(kind + " unordered bulk_write did not raise")
        except BulkWriteError as e:
            d = e.details
            errs = [(w["index"], w["code"]) for w in d["writeErrors"]]
            eq(errs, [(0, 11000), (4, 11000), (7, 9)], kind + " unordered errors")
            eq(d["nInserted"], 2, kind + " nInserted")
            # pymongo runs an unordered bulk grouped by kind (inserts first), as the
            # bulk API allows: the UpdateMany also sees _id 10 and 11.
            eq(d["nMatched"], 1 + 4 + 1, kind + " nMatched")
            eq(d["nRemoved"], 1, kind + " nRemoved")
        eq(sorted(d["_id"] for d in c.find()), [2, 10, 11], kind + " unordered effect")
        eq(c.find_one({"_id": 10}), {"_id": 10, "k": 10, "r": True}, kind + " replace in bulk")


@check
def cursor_batches():
    for kind, c in collections():
        c.delete_many({})
        n = 10000
        c.insert_many([{"_id": i, "k": i, "pad": "x" * 20} for i in range(n)])
        cur = c.find({}, batch_size=7).sort("_id", 1)
        seen = [d["_id"] for d in cur]
        eq(seen, list(range(n)), kind + " sorted batches of 7")
        cur = c.find({"_id": {"$gte": 100}}, batch_size=7)
        eq(len(set(d["_id"] for d in cur)), n - 100, kind + " unsorted batches of 7")
        cur = c.find({}, batch_size=50)
        next(cur)
        cur.close()                                              # killCursors
        eq(c.count_documents({}), n, kind + " count_documents")
        eq(c.count_documents({"_id": {"$lt": 1000}}, skip=10, limit=500), 500, kind + " count skip/limit")
        eq(c.estimated_document_count(), n, kind + " estimated_document_count")


@check
def distinct_and_aggregate():
    for kind, c in collections():
        c.delete_many({})
        c.insert_many([{"_id": i, "k": i, "g": "g%d" % (i % 3), "v": i} for i in range(30)])
        eq(sorted(c.distinct("g")), ["g0", "g1", "g2"], kind + " distinct")
        eq(sorted(c.distinct("g", {"v": {"$lt": 2}})), ["g0", "g1"], kind + " distinct filter")
        got = list(c.aggregate([{"$match": {"v": {"$gte": 3}}},
                                {"$group": {"_id": "$g", "s": {"$sum": "$v"}, "n": {"$sum": 1}}},
                                {"$sort": {"_id": 1}}]))
        want = [{"_id": "g%d" % r, "s": sum(v for v in range(3, 30) if v % 3 == r),
                 "n": len([v for v in range(3, 30) if v % 3 == r])} for r in range(3)]
        eq(got, want, kind + " aggregate group")
        got = list(c.aggregate([{"$sort": {"v": -1}}, {"$limit": 25}, {"$project": {"_id": 0, "v": 1}}],
                               batchSize=4))
        eq([d["v"] for d in got], list(range(29, 4, -1)), kind + " aggregate sort/limit batches")


@check
def unique_index():
    for kind, c in collections():
        c.delete_many({})
        name = c.create_index([("k", ASCENDING), ("email", ASCENDING)], unique=True) if kind == "sharded" \
            else c.create_index("email", unique=True)
        if not any(ix.get("unique") for ix in c.list_indexes()):
            raise AssertionError(kind + " list_indexes has no unique index " + name)
        c.insert_one({"_id": 1, "k": 1, "email": "a@x"})
        try:
            c.insert_one({"_id": 2, "k": 1, "email": "a@x"})
            raise AssertionError(kind + " duplicate insert did not raise")
        except DuplicateKeyError as e:
            eq(e.code, 11000, kind + " DuplicateKeyError code")
        try:
            c.insert_one({"_id": 1, "k": 1, "email": "b@x"})
            raise AssertionError(kind + " duplicate _id did not raise")
        except DuplicateKeyError as e:
            eq(e.code, 11000, kind + " duplicate _id code")
        c.drop_index(name)


@check
def find_one_and_update():
    for kind, c in collections():
        c.delete_many({})
        c.insert_one({"_id": 1, "k": 1, "n": 1})
        before = c.find_one_and_update({"_id": 1, "k": 1}, {"$inc": {"n": 1}})
        eq(before, {"_id": 1, "k": 1, "n": 1}, kind + " before")
        after = c.find_one_and_update({"_id": 1, "k": 1}, {"$inc": {"n": 1}},
                                      return_document=ReturnDocument.AFTER)
        eq(after, {"_id": 1, "k": 1, "n": 3}, kind + " after")
        up = c.find_one_and_update({"_id": 2, "k": 2}, {"$set": {"n": 9}}, upsert=True,
                                   return_document=ReturnDocument.AFTER)
        eq(up, {"_id": 2, "k": 2, "n": 9}, kind + " upsert after")
        none = c.find_one_and_update({"_id": 3, "k": 3}, {"$set": {"n": 9}})
        eq(none, None, kind + " no match")
        gone = c.find_one_and_delete({"_id": 2, "k": 2})
        eq(gone["n"], 9, kind + " find_one_and_delete")
        rep = c.find_one_and_replace({"_id": 1, "k": 1}, {"k": 1, "r": 1},
                                     return_document=ReturnDocument.AFTER)
        eq(rep, {"_id": 1, "k": 1, "r": 1}, kind + " find_one_and_replace")


@check
def admin_commands():
    eq(client.admin.command("ping")["ok"], 1.0, "ping")
    info = client.server_info()
    if not info.get("version", "").startswith("7.0"):
        raise AssertionError("buildInfo version %r" % info.get("version"))
    if MODE == "router":
        r = client.admin.command("balancerStatus")
        if r.get("mode") not in ("full", "off"):
            raise AssertionError("balancerStatus %r" % r)
        try:
            client.admin.command("shardCollection", "drv.sh", key={"other": 1})
            raise AssertionError("re-sharding with another key did not raise")
        except OperationFailure as e:
            if e.code is None:
                raise
        names = client.list_database_names()
        if "drv" not in names:
            raise AssertionError("list_database_names %r" % names)
    eq(sorted(n for n in db.list_collection_names() if n in ("sh", "plain")),
       sorted(k for k, _ in [("sh", 0), ("plain", 0)] if MODE == "router" or k == "plain"),
       "list_collection_names")


@check
def errors_as_mongodb():
    c = db.plain
    try:
        c.find_one({"$bogus": 1})
        raise AssertionError("unknown operator did not raise")
    except OperationFailure as e:
        eq(e.code, 2, "unknown top-level operator code")
    try:
        db.command("noSuchCommand")
        raise AssertionError("unknown command did not raise")
    except OperationFailure as e:
        eq(e.code, 59, "CommandNotFound")


def main():
    print("pymongo %s against %s (%s)" % (pymongo.version, URL, MODE), flush=True)
    for fn in CHECKS:
        try:
            fn()
            results["passed"] += 1
            print("OK %s" % fn.__name__, flush=True)
        except Exception as e:  # noqa: BLE001 — report and go on
            results["failed"] += 1
            print("FAIL %s: %s: %s" % (fn.__name__, type(e).__name__, e), flush=True)
            tb = traceback.format_exc().splitlines()
            print("  " + "\n  ".join(tb[-6:]), flush=True)
            if fn is setup:
                break
    print("PYMONGO DONE passed=%d failed=%d" % (results["passed"], results["failed"]), flush=True)
    sys.exit(1 if results["failed"] else 0)


if __name__ == "__main__":
    main()
