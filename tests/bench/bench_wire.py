#!/usr/bin/env python3
"""
bench_wire.py — what MongoDB's wire protocol costs next to NNG, and what the router costs
next to a shard reached straight over the wire. Run by `make bench`
(tests/bench/run.py) or alone; starts a 3-shard cluster on 127.0.0.1 (config server,
3 shardd with wire ports, 1 router with a wire port) with the integration-test toolkit
and stops exactly what it started.

Two C clients send the same commands (tests/clients/): build/<mode>/c/mongoc_client
(libmongoc 1.23 over the wire: OP_MSG, its own handshake and server monitoring) and
build/<mode>/c/nng_client (common/rpc.c over NNG, what shardctl and the daemons use).
Each timed figure is measured inside the C program after a 200-call warm-up; rounds
interleave the variants and rotate who goes first; medians of the rounds' p50s.

  1. point find {_id: ID} (limit 1, singleBatch) of a document in a collection hashed on
     _id over 3 shards: router over the wire (libmongoc), router over NNG (nng_client),
     the owning shard straight over the wire (libmongoc, unversioned).
  2. bare round trips, `ping`: router wire, router NNG, shard wire — the "one bare round
     trip" the router's extra cost is compared with (goal: router − shard ≤ one ping).
  3. one unordered insert of 100,000 ~110-byte documents (BENCH_WIRE_DOCS overrides) into
     a new unsharded collection: through the router over the wire (libmongoc insert_many:
     one OP_MSG with a kind-1 document sequence), through the router over NNG (one insert
     command), straight to the database's primary shard over the wire.

Ratios: wire / NNG through the router (goal ≤ 1.10), router / shard over the wire. The
latencies compare two clients as well as two protocols (libmongoc's client does more per
call than ours), so each latency run also reads the CPU time the serving processes spent
(router and shards, /proc/PID/stat) and divides by the calls: server CPU per call, wire /
NNG, is what the protocol itself costs the cluster. Prints a table, then one line
BENCH_JSON {"wire": {...}}. Asserts nothing on time.
"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from lib import Ctx, free_ports  # noqa: E402

BUILD = os.environ.get("BUILD", "build/rel")
MONGOC = os.path.join(ROOT, BUILD, "c", "mongoc_client")
NNGC = os.path.join(ROOT, BUILD, "c", "nng_client")
DB = "wbench"
PROBE_DOCS = 10000
ROUNDS = int(os.environ.get("BENCH_WIRE_ROUNDS", "5"))
ITERS = int(os.environ.get("BENCH_WIRE_ITERS", "2000"))
DOCS = int(os.environ.get("BENCH_WIRE_DOCS", "100000"))
INSERT_ROUNDS = int(os.environ.get("BENCH_WIRE_INSERT_ROUNDS", "5"))


def run(argv):
    p = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(argv), p.stdout[-2000:]))
    line = [l for l in p.stdout.splitlines() if "=" in l][-1]
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split())}


WARMUP = 200   # tests/clients/bench_docs.h BENCH_WARMUP: calls before timing


def cpu_us(pids):
    """CPU time (user + system) the processes have used, in µs."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total * 1e6 / tck


def wire_url(port):
    return "mongodb://127.0.0.1:%d/?directConnection=true" % port


def main():
    if not os.path.exists(MONGOC) or not os.path.exists(NNGC):
        print("bench_wire: %s or %s missing (libmongoc-dev: scripts/deps.sh; make bench builds them)"
              % (MONGOC, NNGC))
        sys.exit(1)
    ctx = Ctx("bench_wire")
    ok = False
    try:
        cfg = ctx.configsvr()
        ports = free_ports(4)
        shards = []
        for i in range(3):
            s = ctx.shardd("shard%d" % i, extra=["--wire-port", str(ports[i])])
            s.wire_port = ports[i]
            shards.append(s)
        r = ctx.router(cfg.url, extra=["--wire-port", str(ports[3])])
        R = r.client()
        for i, s in enumerate(shards):
            R.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
        R.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
        R.ok({"shardCollection": DB + ".pt", "key": {"_id": "hashed"}, "$db": "admin"})
        for b in range(0, PROBE_DOCS, 1000):
            R.ok({"insert": "pt", "$db": DB, "ordered": False,
                  "documents": [{"_id": i, "v": i % 97} for i in range(b, b + 1000)]})
        probe = 4242
        owner = [i for i, s in enumerate(shards)
                 if s.client().ok({"find": "pt", "$db": DB, "filter": {"_id": probe}})["cursor"]["firstBatch"]]
        assert len(owner) == 1, owner
        S = shards[owner[0]]
        rw, rn, sw = wire_url(ports[3]), r.url, wire_url(S.wire_port)

        variants = {
            "find_router_wire": [MONGOC, "bench-find", rw, DB, "pt", str(probe), str(ITERS)],
            "find_router_nng": [NNGC, "bench-find", rn, DB, "pt", str(probe), str(ITERS)],
            "find_shard_wire": [MONGOC, "bench-find", sw, DB, "pt", str(probe), str(ITERS)],
            "ping_router_wire": [MONGOC, "bench-ping", rw, str(ITERS)],
            "ping_router_nng": [NNGC, "bench-ping", rn, str(ITERS)],
            "ping_shard_wire": [MONGOC, "bench-ping", sw, str(ITERS)],
        }
        p50 = {k: [] for k in variants}
        p99 = {k: [] for k in variants}
        srv = {k: [] for k in variants}
        servers = [r.pid] + [s.pid for s in shards]
        names = list(variants)
        for rnd in range(ROUNDS):
            order = names[rnd % len(names):] + names[:rnd % len(names)]
            for k in order:
                c0 = cpu_us(servers)
                got = run(variants[k])
                srv[k].append((cpu_us(servers) - c0) / (ITERS + WARMUP))
                p50[k].append(got["p50_us"])
                p99[k].append(got["p99_us"])
        lat = {k: statistics.median(v) for k, v in p50.items()}
        lat99 = {k: statistics.median(v) for k, v in p99.items()}
        cpu = {k: statistics.median(v) for k, v in srv.items()}

        # 3. bulk insert: each variant into its own new unsharded collection on shard0
        ins = {"insert_router_wire": [], "insert_router_nng": [], "insert_shard_wire": []}
        ins_cpu = {k: [] for k in ins}
        primary = shards[0]
        pw = wire_url(primary.wire_port)
        for rnd in range(INSERT_ROUNDS):
            order = list(ins)
            order = order[rnd % 3:] + order[:rnd % 3]
            for k in order:
                coll = "%s_%d" % (k, rnd)
                if k == "insert_router_wire":
                    argv = [MONGOC, "bench-insert", rw, DB, coll, str(DOCS)]
                elif k == "insert_router_nng":
                    argv = [NNGC, "bench-insert", rn, DB, coll, str(DOCS)]
                else:
                    argv = [MONGOC, "bench-insert", pw, DB, coll, str(DOCS)]
                c0 = cpu_us(servers)
                ins[k].append(run(argv)["secs"])
                ins_cpu[k].append((cpu_us(servers) - c0) / 1e6)
                n = primary.client().ok({"count": coll, "$db": DB})["n"]
                if n != DOCS:
                    raise RuntimeError("%s: %d documents on the primary shard, want %d" % (coll, n, DOCS))
        secs = {k: statistics.median(v) for k, v in ins.items()}
        secs_cpu = {k: statistics.median(v) for k, v in ins_cpu.items()}

        res = {
            "find_router_wire_us_p50": lat["find_router_wire"],
            "find_router_nng_us_p50": lat["find_router_nng"],
            "find_shard_wire_us_p50": lat["find_shard_wire"],
            "ping_router_wire_us_p50": lat["ping_router_wire"],
            "ping_router_nng_us_p50": lat["ping_router_nng"],
            "ping_shard_wire_us_p50": lat["ping_shard_wire"],
            "find_router_wire_us_p99": lat99["find_router_wire"],
            "find_router_nng_us_p99": lat99["find_router_nng"],
            "find_shard_wire_us_p99": lat99["find_shard_wire"],
            "find_router_wire_server_cpu_us": cpu["find_router_wire"],
            "find_router_nng_server_cpu_us": cpu["find_router_nng"],
            "find_shard_wire_server_cpu_us": cpu["find_shard_wire"],
            "find_server_cpu_wire_over_nng": cpu["find_router_wire"] / cpu["find_router_nng"],
            "find_wire_over_nng": lat["find_router_wire"] / lat["find_router_nng"],
            "ping_wire_over_nng": lat["ping_router_wire"] / lat["ping_router_nng"],
            "find_router_extra_us": lat["find_router_wire"] - lat["find_shard_wire"],
            "find_router_extra_in_pings": (lat["find_router_wire"] - lat["find_shard_wire"]) / lat["ping_shard_wire"],
            "insert_docs": DOCS,
            "insert_router_wire_s": secs["insert_router_wire"],
            "insert_router_nng_s": secs["insert_router_nng"],
            "insert_shard_wire_s": secs["insert_shard_wire"],
            "insert_router_wire_docs_per_s": DOCS / secs["insert_router_wire"],
            "insert_wire_over_nng": secs["insert_router_wire"] / secs["insert_router_nng"],
            "insert_router_wire_server_cpu_s": secs_cpu["insert_router_wire"],
            "insert_router_nng_server_cpu_s": secs_cpu["insert_router_nng"],
            "insert_server_cpu_wire_over_nng": secs_cpu["insert_router_wire"] / secs_cpu["insert_router_nng"],
            "insert_router_over_shard": secs["insert_router_wire"] / secs["insert_shard_wire"],
        }
        print("bench_wire: %d rounds x %d calls per latency figure (p50 µs, median of rounds; p99 in JSON), "
              "%d x %d-document inserts" % (ROUNDS, ITERS, INSERT_ROUNDS, DOCS))
        print("  %-34s %10s %10s %10s" % ("", "router/wire", "router/NNG", "shard/wire"))
        print("  %-34s %10.1f %10.1f %10.1f" % ("point find {_id} (µs)", lat["find_router_wire"],
                                                lat["find_router_nng"], lat["find_shard_wire"]))
        print("  %-34s %10.1f %10.1f %10.1f" % ("ping, bare round trip (µs)", lat["ping_router_wire"],
                                                lat["ping_router_nng"], lat["ping_shard_wire"]))
        print("  %-34s %10.1f %10.1f %10.1f" % ("server CPU per find (µs)", cpu["find_router_wire"],
                                                cpu["find_router_nng"], cpu["find_shard_wire"]))
        print("  %-34s %10.3f %10.3f %10.3f" % ("insert %d docs (s)" % DOCS, secs["insert_router_wire"],
                                                secs["insert_router_nng"], secs["insert_shard_wire"]))
        print("  %-34s %10.3f %10.3f %10.3f" % ("server CPU per insert (s)", secs_cpu["insert_router_wire"],
                                                secs_cpu["insert_router_nng"], secs_cpu["insert_shard_wire"]))
        print("  wire / NNG through the router: find %.3f, ping %.3f, insert %.3f  (goal <= 1.10)"
              % (res["find_wire_over_nng"], res["ping_wire_over_nng"], res["insert_wire_over_nng"]))
        print("  wire / NNG, server CPU through the router: find %.3f, insert %.3f  (the protocol's own cost)"
              % (res["find_server_cpu_wire_over_nng"], res["insert_server_cpu_wire_over_nng"]))
        print("  router - shard, find over the wire: %+.1f µs = %.2f bare pings  (goal <= 1)"
              % (res["find_router_extra_us"], res["find_router_extra_in_pings"]))
        print("  router / shard, insert over the wire: %.3f" % res["insert_router_over_shard"])
        print("BENCH_JSON " + json.dumps({"wire": res}))
        ok = True
    finally:
        ctx.close(keep=not ok)


if __name__ == "__main__":
    main()
