"""
lib.py — the integration-test toolkit: start real minishard processes on 127.0.0.1,
wait (bounded) for their `ready url=...` line, talk to them through one long-lived
`bin/shardctl --host URL -` pipe per client (one command per line in, one reply per
line out), and stop exactly the PIDs we started — on success, failure or Ctrl-C.

A test file:
    from lib import *
    @test
    def test_something(t):          # t is a fresh TempDir-backed context
        s = t.shardd("s0")
        c = s.client()
        c.ok({"insert": "c", "$db": "app", "documents": [{"_id": 1}]})
    if __name__ == "__main__":
        main()
main() runs every @test (or those named on the command line), prints
"ok NAME" / "not ok NAME: reason" lines and ends with "N passed, N failed".
"""
import atexit
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from catalog_check import tiling_faults

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("MS_BIN") or os.path.join(ROOT, "bin")   # make SAN=... points it at the sanitizer build
SHARDCTL = os.path.join(BIN, "shardctl")

_started = []          # every Proc we started, so we can stop them whatever happens
_tests = []


# ---- extended JSON helpers -----------------------------------------------------------

def oid(hexstr):
    return {"$oid": hexstr}

MINKEY = {"$minKey": 1}
MAXKEY = {"$maxKey": 1}

def long(n):
    return {"$numberLong": str(n)}

def num(v):
    """A number from relaxed extended JSON: 5, 5.0 or {"$numberLong": "5"} -> 5.0."""
    if isinstance(v, dict):
        for k in ("$numberLong", "$numberInt", "$numberDouble"):
            if k in v:
                return float(v[k])
    return float(v)


def ts(t, i):
    return {"$timestamp": {"t": t, "i": i}}

def bare(reply):
    """A reply without the $clusterTime and operationTime every reply carries
    (docs/cluster-time.md): what to compare between two processes, whose clocks differ."""
    return {k: v for k, v in reply.items() if k not in ("$clusterTime", "operationTime")}

def dumps(doc):
    return json.dumps(doc, separators=(",", ":"))


# ---- bounded waiting -------------------------------------------------------------------

def wait_until(pred, timeout=20.0, what="condition", interval=0.05):
    """Polls pred() until it returns a truthy value (returned) or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # the thing we wait for may not answer yet
            last_exc = e
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s%s" % (
        timeout, what, (" (last error: %s)" % last_exc) if last_exc else ""))


# ---- ports -----------------------------------------------------------------------------

def _ephemeral_low():
    """Lowest port the kernel hands to outgoing connections (32768 by default)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(n):
    """n consecutive free TCP ports on 127.0.0.1, from a random base (per-run range) below
    the kernel's ephemeral range: a port found free there could otherwise be taken by any
    outgoing connection (daemons dial one per concurrent call) before a daemon binds it.
    MS_TEST_PORT_BASE fixes the base."""
    fixed = os.environ.get("MS_TEST_PORT_BASE")
    top = max(_ephemeral_low(), 12000 + n)
    for attempt in range(200):
        base = int(fixed) + attempt * n if fixed else random.randrange(10000, top - n)
        ok = True
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    s.close()
                    break
                socks.append(s)
        finally:
            for s in socks:
                s.close()
        if ok:
            return list(range(base, base + n))
    raise RuntimeError("no free port range found")


# ---- clients installed by scripts/deps.sh -------------------------------------------------

def node_driver_dir():
    """The node_modules directory holding MongoDB's Node.js driver 6.x (scripts/deps.sh
    --nodedriver installs it into build/nodedriver; `make test` runs that when missing), for
    NODE_PATH; None when it is not installed (the caller says it skipped and why)."""
    d = os.path.join(ROOT, "build", "nodedriver", "node_modules")
    return d if os.path.isfile(os.path.join(d, "mongodb", "package.json")) else None


# ---- processes -------------------------------------------------------------------------

class Proc:
    """One daemon we started. Its stderr goes to <dir>/<name>.log."""

    def __init__(self, name, argv, logdir, url):
        self.name = name
        self.argv = argv
        self.url = url
        self.log_path = os.path.join(logdir, name + ".log")
        self.proc = None
        self.start()

    def start(self):
        self.log = open(self.log_path, "ab")
        self.log_offset = self.log.tell()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log, cwd=ROOT)
        _started.append(self)
        self.wait_ready()

    @property
    def pid(self):
        return self.proc.pid

    def log_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_ready(self, timeout=20.0):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError("%s exited with %s before ready; log tail:\n%s" % (
                    self.name, self.proc.returncode, self.log_text()[-2000:]))
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return b" ready url=" in f.read()
        try:
            wait_until(ready, timeout, "%s ready" % self.name)
        except AssertionError:
            self.kill()
            raise

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """kill -9: no cleanup, as a crash leaves it."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()

    def restart(self):
        self.kill()
        self.start()

    def client(self, timeout_ms=30000):
        return Client(self.url, timeout_ms)


def _stop_all():
    for p in reversed(_started):
        try:
            p.kill()
        except Exception:
            pass
    for c in list(Client.open_clients):
        c.close()

atexit.register(_stop_all)
for _sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(_sig, lambda s, f: (_stop_all(), sys.exit(128 + s)))


# ---- clients ---------------------------------------------------------------------------

class CommandError(AssertionError):
    def __init__(self, cmd, reply):
        self.reply = reply
        self.code = reply.get("code")
        AssertionError.__init__(self, "command %s failed: %s" % (
            dumps(cmd)[:300], dumps(reply)[:600]))


class Client:
    """A long-lived `shardctl --host URL -` pipe: one command per line in, one reply out."""
    open_clients = set()

    def __init__(self, url, timeout_ms=30000):
        self.url = url
        self.p = subprocess.Popen([SHARDCTL, "--host", url, "--timeout", str(timeout_ms), "-"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, bufsize=1)
        Client.open_clients.add(self)

    def cmd(self, doc):
        """Sends one command (dict or JSON text); returns the reply as a dict."""
        line = doc if isinstance(doc, str) else dumps(doc)
        if "\n" in line:
            raise ValueError("a command must be one line")
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()
        if not out:
            raise AssertionError("shardctl for %s closed its output" % self.url)
        return json.loads(out)

    def ok(self, doc):
        """Sends one command and requires ok: 1; returns the reply."""
        r = self.cmd(doc)
        if r.get("ok") != 1:
            raise CommandError(doc, r)
        return r

    def err(self, doc, code=None):
        """Sends one command and requires ok: 0 (with that code, when given)."""
        r = self.cmd(doc)
        if r.get("ok") == 1:
            raise AssertionError("expected an error from %s, got %s" % (dumps(doc)[:300], dumps(r)[:300]))
        if code is not None and r.get("code") != code:
            raise AssertionError("expected code %s from %s, got %s" % (code, dumps(doc)[:300], dumps(r)[:600]))
        return r

    def find_all(self, coll, db, filter=None, **opts):
        """Runs find and drains the cursor with getMore; returns the documents."""
        cmd = {"find": coll, "$db": db, "filter": filter or {}}
        cmd.update(opts)
        r = self.ok(cmd)
        docs = list(r["cursor"]["firstBatch"])
        cid = r["cursor"]["id"]
        for _ in range(100000):  # bounded: each getMore returns at least one doc or ends
            if cid in (0, "0") or cid == {"$numberLong": "0"}:
                break
            r = self.ok({"getMore": cid, "collection": coll, "$db": db})
            docs.extend(r["cursor"]["nextBatch"])
            cid = r["cursor"]["id"]
        return docs

    def close(self):
        if self.p and self.p.poll() is None:
            try:
                self.p.stdin.close()
                self.p.wait(5)
            except Exception:
                self.p.kill()
        Client.open_clients.discard(self)


# ---- failpoints and pipelined commands ----------------------------------------------------

def fp(c, name, mode="alwaysOn", **data):
    """configureFailPoint through client c; returns the point's count so far (a test
    waits for count + 1 with fp_wait)."""
    cmd = {"configureFailPoint": name, "$db": "admin", "mode": mode}
    if data:
        cmd["data"] = data
    return c.ok(cmd)["count"]


def fp_wait(c, name, times):
    c.ok({"waitForFailPoint": name, "$db": "admin", "timesEntered": times, "maxTimeMS": 20000})


def cmd_in_thread(proc, doc):
    """Sends doc through a client of its own on a thread, for a command a test holds (a
    migration at a failpoint); returns (thread, out): out["reply"] once it answered."""
    import threading
    out = {}

    def run():
        cl = proc.client()
        try:
            out["reply"] = cl.cmd(doc)
        finally:
            cl.close()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def send(client, doc):
    """Writes one command to a client's pipe without reading the reply (see reply)."""
    client.p.stdin.write(dumps(doc) + "\n")
    client.p.stdin.flush()


def reply(client):
    """Reads the reply to a command sent with send."""
    out = client.p.stdout.readline()
    assert out, "shardctl for %s closed its output" % client.url
    return json.loads(out)


# ---- a test's context ------------------------------------------------------------------

class Ctx:
    """Per-test scratch directory and process starters. Everything started is stopped
    when the test ends."""

    def __init__(self, name):
        self.name = name
        self.dir = tempfile.mkdtemp(prefix="ms-it-%s-" % name)
        self.procs = []
        self.catalog_corrupted = False  # set by a test that breaks config.chunks on purpose

    def check_catalogs(self):
        """The whole chunk tiling of every config server's catalog (catalog_check.py), once
        a test has passed: the daemons check only the ranges they change."""
        if self.catalog_corrupted:
            return
        for p in self.procs:
            if os.path.basename(p.argv[0]) == "configsvr":
                faults = tiling_faults(os.path.join(p.dbpath, "config.db"))
                assert not faults, "%s: chunks do not tile: %s" % (p.name, "; ".join(faults[:5]))

    def _daemon(self, binary, name, extra, port=None, test_commands=True):
        port = port or free_ports(1)[0]
        url = "tcp://127.0.0.1:%d" % port
        dbpath = os.path.join(self.dir, name)
        os.makedirs(dbpath, exist_ok=True)
        argv = [os.path.join(BIN, binary), "--port", str(port)] + extra
        if test_commands:
            argv.append("--enable-test-commands")
        p = Proc(name, argv, self.dir, url)
        p.dbpath = dbpath
        self.procs.append(p)
        return p

    def shardd(self, name="shard0", port=None, extra=(), test_commands=True):
        return self._daemon("shardd", name, ["--dbpath", os.path.join(self.dir, name), "--name", name] + list(extra),
                            port, test_commands)

    def configsvr(self, name="config", port=None, extra=(), test_commands=True):
        # The balancer (10 s rounds by default) would move chunks under tests that build
        # imbalances on purpose: unless a test sets --balancer-idle-ms, its rounds are an
        # hour apart (balancerStart still runs one at once).
        extra = list(extra)
        if "--balancer-idle-ms" not in extra:
            extra += ["--balancer-idle-ms", "3600000"]
        return self._daemon("configsvr", name, ["--dbpath", os.path.join(self.dir, name)] + extra,
                            port, test_commands)

    def router(self, configdb, name="router0", port=None, extra=(), test_commands=True):
        return self._daemon("router", name, ["--configdb", configdb] + list(extra), port, test_commands)

    def cluster(self, shards=3, routers=1, shard_extra=(), config_extra=()):
        """A config server (started with config_extra flags), `shards` shards (each started
        with shard_extra flags) registered as shard0.., and `routers` routers."""
        cfg = self.configsvr(extra=config_extra)
        ss = [self.shardd("shard%d" % i, extra=shard_extra) for i in range(shards)]
        rs = [self.router(cfg.url, "router%d" % i) for i in range(routers)]
        c = rs[0].client() if rs else cfg.client()
        for i, s in enumerate(ss):
            c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
        return Cluster(cfg, ss, rs)

    def wire_cluster(self, shards=3):
        """cluster(shards) whose router also serves MongoDB's wire protocol on a port of its
        own: (Cluster, that port)."""
        cfg = self.configsvr()
        ss = [self.shardd("shard%d" % i) for i in range(shards)]
        wp = free_ports(1)[0]
        r = self.router(cfg.url, extra=["--wire-port", str(wp)])
        c = r.client()
        for i, s in enumerate(ss):
            c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
        return Cluster(cfg, ss, [r]), wp

    def close(self, keep=False):
        for p in reversed(self.procs):
            p.stop(5)
        if not keep and not os.environ.get("T_KEEP"):
            subprocess.call(["rm", "-rf", self.dir])


class Cluster:
    def __init__(self, config, shards, routers):
        self.config = config
        self.shards = shards
        self.routers = routers

    def client(self, i=0):
        return self.routers[i].client()


# ---- the runner ------------------------------------------------------------------------

def test(fn):
    _tests.append(fn)
    return fn


def seed(name="seed"):
    """A seed for randomised tests: T_SEED from the environment or random; printed."""
    s = int(os.environ.get("T_SEED") or random.randrange(1, 2**31))
    print("  %s: seed %d (rerun with T_SEED=%d)" % (name, s, s), flush=True)
    return s


def main():
    names = sys.argv[1:]
    passed = failed = 0
    for fn in _tests:
        if names and fn.__name__ not in names:
            continue
        ctx = Ctx(fn.__name__)
        ok = False
        start = time.monotonic()
        try:
            fn(ctx)
            ctx.check_catalogs()
            ok = True
        except Exception as e:
            print("not ok %s: %s" % (fn.__name__, e), flush=True)
            traceback.print_exc(file=sys.stdout)
            for p in ctx.procs:
                print("  --- %s log tail ---\n%s" % (p.name, "\n".join(p.log_text().splitlines()[-15:])))
        finally:
            for c in list(Client.open_clients):
                c.close()
            ctx.close(keep=not ok)
        if ok:
            passed += 1
            print("ok %s (%.1fs)" % (fn.__name__, time.monotonic() - start), flush=True)
        else:
            failed += 1
    print("%d passed, %d failed" % (passed, failed), flush=True)
    sys.exit(1 if failed else 0)
