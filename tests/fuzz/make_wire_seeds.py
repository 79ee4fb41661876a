#!/usr/bin/env python3
"""
make_wire_seeds.py — writes the seed corpus of tests/fuzz/fuzz_wire.c into
tests/fuzz/corpus/wire/: messages built by hand from the wire protocol spec
(tests/integration/wireproto.py), and, with --capture HOST:PORT, the messages pymongo
really sends, captured by a small proxy in front of a running shardd's or router's wire
port (one file per client message: pymongo-<n>.bin).

    python3 tests/fuzz/make_wire_seeds.py
    python3 tests/fuzz/make_wire_seeds.py --capture 127.0.0.1:27217   # needs pymongo
"""
import os
import socket
import struct
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from hostile import encode  # noqa: E402
from wireproto import CHECKSUM, EXHAUST_ALLOWED, MORE_TO_COME, OP_MSG, op_compressed, op_msg, op_query  # noqa: E402

OUT = os.path.join(HERE, "corpus", "wire")

CLIENT = {"driver": {"name": "PyMongo", "version": "3.11.0"},
          "os": {"type": "Linux", "name": "Linux", "architecture": "x86_64", "version": "6.1"},
          "platform": "CPython 3.11"}


def keyed(body, fields, request_id):
    """OP_MSG of body with the documents under `fields` sent as arrays (keys kept as they
    are, e.g. "k", "j": legal, MongoDB ignores array keys). Before cmd_dispatch renumbered
    such arrays, the find, update and findAndModify below made libbson print "invalid array
    detected" in this harness."""
    b = encode(body)
    for f in fields:
        b = b.replace(b"\x03" + f.encode() + b"\x00", b"\x04" + f.encode() + b"\x00")
    return op_msg(b, request_id=request_id)


def hand_built():
    docs = [{"_id": i, "name": "user%d" % i, "tags": ["a", "b"], "n": i * 1.5} for i in range(5)]
    return {
        "op_query_ismaster": op_query("admin.$cmd", {"isMaster": 1, "helloOk": True, "client": CLIENT,
                                                    "compression": []}, request_id=1),
        "op_query_wrapped": op_query("admin.$cmd", {"$query": {"ismaster": 1},
                                                    "$readPreference": {"mode": "primaryPreferred"}}, request_id=2),
        "op_query_collection": op_query("app.users", {"x": 1}, request_id=3),
        "op_msg_hello": op_msg({"hello": 1, "helloOk": True, "$db": "admin"}, request_id=4),
        "op_msg_ping_checksum": op_msg({"ping": 1, "$db": "admin"}, request_id=5, flags=CHECKSUM),
        "op_msg_find": op_msg({"find": "users", "filter": {"n": {"$gte": 2}}, "sort": {"_id": -1},
                               "projection": {"name": 1}, "limit": 3, "batchSize": 2, "$db": "app",
                               "lsid": {"id": b"0123456789abcdef"}}, request_id=6),
        "op_msg_insert_kind1": op_msg({"insert": "users", "ordered": True, "$db": "app"}, request_id=7,
                                      sequences=[("documents", docs)]),
        "op_msg_update_kind1": op_msg({"update": "users", "$db": "app"}, request_id=8,
                                      sequences=[("updates", [{"q": {"_id": 1}, "u": {"$set": {"x": 1}},
                                                               "upsert": True}])]),
        "op_msg_delete_more_to_come": op_msg({"delete": "users", "$db": "app",
                                              "writeConcern": {"w": 0}}, request_id=9, flags=MORE_TO_COME,
                                             sequences=[("deletes", [{"q": {"n": {"$lt": 1}}, "limit": 0}])]),
        "op_msg_getmore_exhaust": op_msg({"getMore": 12345, "collection": "users", "$db": "app"},
                                         request_id=10, flags=EXHAUST_ALLOWED),
        "op_msg_create_index": op_msg({"createIndexes": "users", "indexes": [{"key": {"name": 1},
                                       "name": "name_1", "unique": True}], "$db": "app"}, request_id=11),
        "op_msg_find_and_modify": op_msg({"findAndModify": "users", "query": {"_id": 2},
                                          "update": {"$inc": {"n": 1}}, "new": True, "$db": "app"}, request_id=12),
        "op_msg_count_distinct": op_msg({"distinct": "users", "key": "name", "query": {}, "$db": "app"},
                                        request_id=13),
        "op_msg_keyed_array_find": keyed({"find": "users", "$db": "app",
                                           "filter": {"_id": {"$in": {"k": 1, "j": 2}}}}, ["$in"], 15),
        "op_msg_keyed_array_update": keyed({"update": "users", "$db": "app", "updates": [
            {"q": {"_id": 1}, "u": {"$set": {"kk": {"k": 1, "j": {"z": 2}}}}, "upsert": True}]},
            ["kk"], 16),
        "op_msg_keyed_array_fam": keyed({"findAndModify": "users", "$db": "app", "query": {"_id": 1},
                                         "update": {"$set": {"kk": {"k": 1}}}, "upsert": True},
                                        ["kk"], 17),
        "op_compressed": op_compressed(OP_MSG, op_msg({"ping": 1, "$db": "admin"})[16:], request_id=14),
    }


def capture(target):
    """A proxy on an ephemeral port that records each whole client message, while pymongo
    talks to the real server at target."""
    host, port = target.rsplit(":", 1)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(16)
    got = []
    lock = threading.Lock()

    def pump(src, dst, record):
        buf = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if record:
                    buf += data
                    while len(buf) >= 4 and len(buf) >= struct.unpack_from("<i", buf)[0]:
                        n = struct.unpack_from("<i", buf)[0]
                        with lock:
                            got.append(buf[:n])
                        buf = buf[n:]
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def accept():
        while True:
            try:
                c, _ = lsock.accept()
            except OSError:
                return
            u = socket.create_connection((host, int(port)))
            threading.Thread(target=pump, args=(c, u, True), daemon=True).start()
            threading.Thread(target=pump, args=(u, c, False), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    script = r"""
import sys
from pymongo import MongoClient
c = MongoClient(sys.argv[1], serverSelectionTimeoutMS=5000)
db = c.fuzzapp
db.users.insert_one({"_id": 1, "name": "a"})
db.users.insert_many([{"_id": i, "name": "b", "n": i} for i in range(2, 20)])
db.users.find_one({"_id": 1})
list(db.users.find({"n": {"$gt": 3}}).sort("n", -1).skip(1).limit(5).batch_size(2))
db.users.update_one({"_id": 1}, {"$set": {"x": 1}}, upsert=True)
db.users.delete_many({"n": {"$gt": 15}})
db.users.create_index("name")
db.users.find_one_and_update({"_id": 2}, {"$inc": {"n": 1}})
db.users.estimated_document_count()
db.users.distinct("name")
c.admin.command("ping")
"""
    url = "mongodb://127.0.0.1:%d/?directConnection=true" % lsock.getsockname()[1]
    p = subprocess.run(["/usr/bin/python3", "-c", script, url], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    lsock.close()
    if p.returncode != 0:
        print(p.stdout[-2000:], file=sys.stderr)
    return got


def main():
    os.makedirs(OUT, exist_ok=True)
    if len(sys.argv) == 3 and sys.argv[1] == "--capture":
        msgs = capture(sys.argv[2])
        for i, m in enumerate(msgs):
            with open(os.path.join(OUT, "pymongo-%02d.bin" % i), "wb") as f:
                f.write(m)
        print("captured %d pymongo messages" % len(msgs))
        return
    for name, data in hand_built().items():
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(hand_built()), OUT))


if __name__ == "__main__":
    main()
