"""
catalog_check.py — the test-time check of the config server's chunk tiling: after every
integration test that passed, lib.main reads each config server's catalog file
(<dbpath>/config.db, SQLite in WAL mode: a reader sees the last committed state while
the daemon runs) and checks, for every sharded collection, that its chunks ordered by
min tile the key space — the first starts at the global min, each starts where the
previous ended, min < max, the last ends at the global max. The config server itself
checks only the range each change touches (docs/catalog.md, "The tiling invariant");
this is the whole check, at no cost to the daemon.

Bounds are compared as their encoded bytes (min_enc / max_enc, docs/key-encoding.md),
whose byte order is MongoDB's key order: Python compares bytes as SQLite compares BLOBs.
The global min of a k-field key is k MinKey bytes (01), the global max k MaxKey bytes (7f).
"""
import os
import sqlite3
import struct


def _key_fields(key_bson):
    """Number of fields of a shard key pattern document (BSON bytes)."""
    n, i = 0, 4
    sizes = {0x01: 8, 0x10: 4, 0x12: 8}
    while i < len(key_bson) and key_bson[i] != 0:
        t = key_bson[i]
        i = key_bson.index(b"\x00", i + 1) + 1  # past the field name
        if t == 0x02:  # "hashed"
            i += 4 + struct.unpack_from("<i", key_bson, i)[0]
        else:
            i += sizes[t]
        n += 1
    return n


def tiling_faults(db_path):
    """A list of faults (text), empty when every collection's chunks tile."""
    if not os.path.exists(db_path):
        return []
    faults = []
    db = sqlite3.connect("file:%s?mode=ro" % db_path, uri=True, timeout=10)
    try:
        for ns, key in db.execute("SELECT ns, key FROM collections ORDER BY ns").fetchall():
            k = _key_fields(bytes(key))
            prev, n = b"\x01" * k, 0
            for mn, mx in db.execute("SELECT min_enc, max_enc FROM chunks WHERE ns = ? ORDER BY min_enc", (ns,)):
                mn, mx = bytes(mn), bytes(mx)
                if mn != prev:
                    faults.append("%s: %s before chunk #%d" % (ns, "gap" if mn > prev else "overlap", n))
                if mn >= mx:
                    faults.append("%s: chunk #%d has min >= max" % (ns, n))
                prev, n = mx, n + 1
            if n == 0:
                faults.append("%s: no chunks" % ns)
            elif prev != b"\x7f" * k:
                faults.append("%s: the last chunk does not end at MaxKey" % ns)
    finally:
        db.close()
    return faults
