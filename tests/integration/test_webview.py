#!/usr/bin/env python3
"""
test_webview.py — the config server's live web view: bin/configsvr --http-port
serves the page (compiled in) and read-only JSON endpoints built from the catalog, the
shards (listDatabases, currentOp, collStats) and the balancer. A live cluster with a
migration held in flight (moveChunkHangAtStep3 on the donor) is checked through the
endpoints and, when Debian's chromium is installed, in a real headless browser (DOM: shard
columns, chunk counts, the moving block; a screenshot saved under build/.../test-out).
Bad input (404, 400, 405, idle and huge requests) is sent over raw sockets, and the config
server stays responsive over NNG throughout; a silent shard shows as unreachable instead
of freezing the page.
"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from hostile import assert_responsive  # noqa: E402

DB = "app"
NS = "app.c"
N = 3000
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, os.environ.get("BUILD", "build/rel"), "test-out", "webview")


def get(port, path, method="GET", body=None, headers=None, timeout=15):
    """(status, headers dict (lower-case names), body bytes) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def get_json(port, path):
    st, hd, body = get(port, path)
    assert st == 200, (path, st, body[:300])
    assert hd.get("content-type", "").startswith("application/json"), hd
    return json.loads(body)


def cluster(t, shards=3):
    hport = free_ports(1)[0]
    cl = t.cluster(shards, shard_extra=SHARD_FLAGS, config_extra=["--http-port", str(hport)])
    cfg, ss, r, c = cl.config, cl.shards, cl.routers[0], cl.client()
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"k": 1}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "k": i, "pad": "x" * 100} for i in range(N)]})
    for m in (1000, 2000):
        c.ok({"split": NS, "middle": {"k": m}, "$db": "admin"})
    return cfg, ss, r, c, hport


def start_move(router, lo, to):
    out = {}

    def run():
        mc = router.client()
        try:
            out["reply"] = mc.cmd({"moveChunk": NS, "find": {"k": lo}, "to": to, "_waitForDelete": True,
                                   "$db": "admin"})
        finally:
            mc.close()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def chromium():
    for name in ("chromium", "chromium-browser"):
        p = shutil.which(name)
        if p:
            return p
    print("  SKIP browser part: chromium is not installed (scripts/deps.sh installs Debian's "
          "chromium); the endpoint checks still ran", flush=True)
    return None


def browser(exe, url, *args, timeout=90):
    prof = os.path.join(OUT, "profile")
    os.makedirs(prof, exist_ok=True)
    argv = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--user-data-dir=" + prof] + list(args) + [url]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    return p.stdout


@test
def test_endpoints_and_page_show_shards_chunks_and_a_held_migration(t):
    cfg, ss, r, c, hport = cluster(t)
    st = get_json(hport, "/api/state")
    shards = {s["name"]: s for s in st["cluster"]["shards"]}
    assert sorted(shards) == ["shard0", "shard1", "shard2"], st["cluster"]
    s0 = shards["shard0"]
    assert s0["reachable"] and s0["chunks"] == 3 and s0["docCount"] == N and s0["dataSize"] > N * 100, s0
    assert s0["url"] == ss[0].url and s0["draining"] is False and s0["zones"] == [], s0
    colls = st["collections"]["collections"]
    assert [x["ns"] for x in colls] == [NS] and colls[0]["chunkCount"] == 3, colls
    ch = colls[0]["chunks"]
    assert [k["min"] for k in ch] == [{"k": {"$minKey": 1}}, {"k": 1000}, {"k": 2000}], ch
    assert all(k["shard"] == "shard0" and not k["jumbo"] and k["sizeEstimate"] > 0 and "|" in k["version"]
               for k in ch), ch
    assert all(k["sizeFrom"] in ("dataSize", "share") for k in ch), ch
    assert st["collections"]["truncated"] is False, st["collections"]
    assert st["migrations"]["inprog"] == [] and st["migrations"]["shardErrors"] == []
    assert [e["ns"] for e in st["balancer"]["explain"]] == [NS], st["balancer"]
    assert st["balancer"]["mode"] in ("full", "off"), st["balancer"]
    assert any(e["what"] == "shardCollection.end" for e in st["changelog"]["entries"]), st["changelog"]
    # the separate endpoints carry the same sections
    assert get_json(hport, "/api/cluster")["shards"][0]["name"] == "shard0"
    assert get_json(hport, "/api/collections?ns=" + NS)["collections"][0]["ns"] == NS
    assert get_json(hport, "/api/collections?ns=no.such")["collections"] == []
    assert len(get_json(hport, "/api/changelog?n=2")["entries"]) == 2

    # a migration held at the end of step 3 (clone), before the critical section
    donor = ss[0].client()
    n0 = fp(donor, "moveChunkHangAtStep3")
    th, res = start_move(r, 2000, "shard1")
    try:
        fp_wait(donor, "moveChunkHangAtStep3", n0 + 1)
        # (the state may be up to MS_HTTP_STATE_TTL_MS old: wait for a build after the hang)
        wait_until(lambda: get_json(hport, "/api/migrations")["inprog"], 10, "the migration in the state")
        m = get_json(hport, "/api/migrations")
        donors = [x for x in m["inprog"] if x["role"] == "donor"]
        assert len(donors) == 1, m
        d = donors[0]
        assert d["from"] == "shard0" and d["to"] == "shard1" and d["ns"] == NS and d["step"] == "clone", d
        assert d["stepNumber"] == 3 and d["docsCloned"] == 1000 and d["recipient"]["shard"] == "shard1", d
        exe = chromium()
        if exe:
            os.makedirs(OUT, exist_ok=True)
            url = "http://127.0.0.1:%d/" % hport
            dom = browser(exe, url, "--virtual-time-budget=4000", "--dump-dom")
            for want in ('id="shard-shard0"', 'id="shard-shard1"', 'id="shard-shard2"',
                         'data-shard="shard0" data-chunks="3"', 'data-state="live"'):
                assert want in dom, (want, dom[:3000])
            assert 'class="mover"' in dom and 'data-from="shard0"' in dom and 'data-to="shard1"' in dom, dom[:4000]
            assert 'data-phase="clone"' in dom, dom[:4000]
            assert dom.count('class="chunk moving"') == 1, dom[:4000]
            assert 'data-size="' in dom and 'marker-end="url(#head)"' in dom, dom[:4000]
            png = os.path.join(OUT, "webview.png")
            if os.path.exists(png):
                os.unlink(png)
            browser(exe, url, "--virtual-time-budget=4000", "--window-size=1400,900",
                    "--hide-scrollbars", "--screenshot=" + png)
            with open(png, "rb") as f:
                assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
            print("  screenshot: %s" % png, flush=True)
        assert th.is_alive()
    finally:
        fp(donor, "moveChunkHangAtStep3", "off")
    th.join(60)
    assert res["reply"]["ok"] == 1, res

    def moved():
        st2 = get_json(hport, "/api/state")
        return (st2["migrations"]["inprog"] == [] and
                {s["name"]: s["chunks"] for s in st2["cluster"]["shards"]} == {"shard0": 2, "shard1": 1, "shard2": 0})
    wait_until(moved, 20, "the move shows in the state")
    ent = get_json(hport, "/api/changelog")["entries"]
    frm = [e for e in ent if e["what"] == "moveChunk.from"][0]
    assert "step 1 of 6" in frm["details"] and "writePauseMS" in frm["details"], frm

    # a balancing run: the round and its moves appear in /api/balancer
    c.ok({"balancerStart": 1, "$db": "admin"})

    def balanced():
        b = get_json(hport, "/api/balancer")
        return any(rd["details"].get("chunksMoved", 0) >= 1 for rd in b["rounds"])
    wait_until(balanced, 40, "a balancer round that moved a chunk")
    b = get_json(hport, "/api/balancer?n=1")
    assert len(b["rounds"]) == 1 and b["rounds"][0]["what"] == "balancer.round", b
    mv = [rd for rd in get_json(hport, "/api/balancer")["rounds"] if rd["details"].get("chunksMoved")][0]
    assert mv["details"]["migrations"][0]["to"] == "shard2", mv


@test
def test_bad_input_is_refused_and_nothing_changes_state(t):
    cfg, ss, r, c, hport = cluster(t, shards=2)
    before = c.ok({"find": "chunks", "$db": "config", "filter": {}})["cursor"]["firstBatch"]
    idle = socket.create_connection(("127.0.0.1", hport))  # connects and sends nothing
    for path in ("/nope", "/api/nope", "/api", "/api/state/x"):
        st, hd, body = get(hport, path)
        assert st == 404, (path, st, body)
        assert json.loads(body)["ok"] == 0 and hd["content-type"].startswith("application/json"), body
    for path in ("/api/changelog?n=abc", "/api/changelog?n=-1", "/api/changelog?n=", "/api/state?x=1",
                 "/api/%zzstate", "/api/changelog?n=%4", "/api/state?" + "&".join(["_=1"] * 9),
                 "/api/state?_=" + "a" * 1100, "/api/collections?ns=" + "a" * 200,
                 "/api/cluster?n=3"):
        st, hd, body = get(hport, path)
        assert st == 400, (path, st, body[:200])
        assert json.loads(body)["ok"] == 0, body
    for m in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        st, hd, body = get(hport, "/api/state", method=m, body=b'{"balancerStop": 1}')
        assert st == 405 and "GET" in hd.get("allow", ""), (m, st, hd)
    st, hd, body = get(hport, "/api/state", method="HEAD")
    assert st == 200 and body == b"", (st, body)
    for path, ctype in (("/", "text/html"), ("/index.html", "text/html"), ("/app.js", "text/javascript"),
                        ("/style.css", "text/css")):
        st, hd, body = get(hport, path)
        assert st == 200 and hd["content-type"].startswith(ctype) and len(body) > 500, (path, st)
        assert b"http://" not in body.replace(b"http://127.0.0.1", b"") or path == "/", path
    # a huge request line: refused or the connection closed, never a hang
    s = socket.create_connection(("127.0.0.1", hport), timeout=10)
    try:
        s.sendall(b"GET /" + b"a" * 200000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    except OSError:
        pass
    try:
        head = s.recv(100)
        assert head == b"" or head.startswith(b"HTTP/1.1 4"), head
    except OSError:
        pass
    s.close()
    assert_responsive(cfg, within_ms=1000, what="after bad HTTP input")
    assert get_json(hport, "/api/state")["cluster"]["shards"][0]["name"] == "shard0"
    after = c.ok({"find": "chunks", "$db": "config", "filter": {}})["cursor"]["firstBatch"]
    assert before == after
    assert c.ok({"balancerStatus": 1, "$db": "admin"})["mode"] == "full"
    idle.close()


@test
def test_silent_shard_shows_unreachable_and_restart_recovers(t):
    cfg, ss, r, c, hport = cluster(t, shards=2)
    os.kill(ss[1].pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        st = get_json(hport, "/api/state")
        took = time.monotonic() - t0
        sh = {s["name"]: s for s in st["cluster"]["shards"]}
        assert sh["shard1"]["reachable"] is False and sh["shard0"]["reachable"] is True, sh
        assert [e["shard"] for e in st["migrations"]["shardErrors"]] == ["shard1"], st["migrations"]
        assert "explainSkipped" in st["balancer"], st["balancer"]
        print("  state with a silent shard: %.2f s" % took, flush=True)
        assert_responsive(cfg, within_ms=1000, what="while a shard is silent")
    finally:
        os.kill(ss[1].pid, signal.SIGCONT)
    wait_until(lambda: all(s["reachable"] for s in get_json(hport, "/api/cluster")["shards"]), 20,
               "shard1 reachable again")
    # the config server restarts: the port answers again (the page polls and reconnects)
    cfg.stop()
    try:
        get(hport, "/api/state", timeout=2)
        assert False, "answered while stopped"
    except OSError:
        pass
    cfg.start()
    wait_until(lambda: get(hport, "/api/state")[0] == 200, 20, "the web view back after a restart")


@test
def test_chunk_list_is_capped_with_a_marker(t):
    hport = free_ports(1)[0]
    cfg = t.configsvr(extra=["--http-port", str(hport)])
    ss = [t.shardd("shard%d" % i) for i in range(2)]
    c = t.router(cfg.url).client()
    for i, s in enumerate(ss):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    c.ok({"enableSharding": "big", "$db": "admin"})
    c.ok({"shardCollection": "big.h", "key": {"k": "hashed"}, "numInitialChunks": 2100, "$db": "admin"})
    c.ok({"shardCollection": "big.r", "key": {"k": 1}, "$db": "admin"})
    col = get_json(hport, "/api/collections")
    assert col["truncated"] is True and col["chunksReturned"] == 2000 == col["chunksMax"], \
        {k: v for k, v in col.items() if k != "collections"}
    assert col["chunksTotal"] == 2101, col["chunksTotal"]
    h, rr = col["collections"]
    assert h["ns"] == "big.h" and h["chunkCount"] == 2100 and h["truncated"] and len(h["chunks"]) == 2000, h["ns"]
    assert rr["ns"] == "big.r" and rr["chunkCount"] == 1 and rr["truncated"] and rr["chunks"] == [], rr
    sh = {s["name"]: s["chunks"] for s in get_json(hport, "/api/cluster")["shards"]}
    assert sum(sh.values()) == 2101, sh  # the shards' counts are of every chunk, listed or not


class Front:
    """A little HTTP front on its own port between chromium and the config server that
    passes every request through. Hooks for what a test changes: poll(n) is called (under a
    lock) at the page's n-th /api/state request (1-based) and returns False to drop that
    connection without an answer; rewrite(path, body) may change what is passed back."""

    def __init__(self, backend_port):
        import http.server
        front = self
        self.polls = 0
        self.lock = threading.Lock()

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path.startswith("/api/state"):
                    with front.lock:
                        front.polls += 1
                        answer = front.poll(front.polls)
                    if not answer:
                        self.close_connection = True
                        self.connection.shutdown(socket.SHUT_RDWR)
                        return
                st, hd, body = get(backend_port, self.path)
                body = front.rewrite(self.path, body)
                self.send_response(st)
                self.send_header("Content-Type", hd.get("content-type", "text/plain"))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def poll(self, n):
        return True

    def rewrite(self, path, body):
        return body

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


class FlakyFront(Front):
    """/api/state polls number `down_from` .. `down_to` (1-based; None = for ever) find the
    connection dropped without an answer, as when the config server is gone. The page's own
    reconnect logic is what is under test; the headless browser's virtual time runs the
    polls too fast to stop the real server between two of them."""

    def __init__(self, backend_port, down_from, down_to):
        self.down = (down_from, down_to)
        super().__init__(backend_port)

    def poll(self, n):
        down_from, down_to = self.down
        return not (n >= down_from and (down_to is None or n <= down_to))


@test
def test_page_says_reconnecting_and_recovers(t):
    exe = chromium()
    if not exe:
        return
    cfg, ss, r, c, hport = cluster(t, shards=2)
    os.makedirs(OUT, exist_ok=True)
    # gone after two good polls, for good: the last picture stays, marked reconnecting
    f = FlakyFront(hport, 3, None)
    try:
        dom = browser(exe, "http://127.0.0.1:%d/" % f.port, "--virtual-time-budget=6000", "--dump-dom")
    finally:
        f.close()
    assert 'data-state="reconnecting"' in dom and "reconnecting…" in dom, dom[:2000]
    assert 'id="shard-shard0"' in dom and 'data-chunks="3"' in dom, dom[:3000]
    assert f.polls >= 4, f.polls
    # gone for polls 2..4, then back: live again with the current state
    f = FlakyFront(hport, 2, 4)
    try:
        dom = browser(exe, "http://127.0.0.1:%d/" % f.port, "--virtual-time-budget=8000", "--dump-dom")
    finally:
        f.close()
    assert f.polls >= 6, f.polls
    assert 'data-state="live"' in dom and 'id="shard-shard1"' in dom, dom[:2000]


@test
def test_idle_and_surplus_connections_are_closed(t):
    """NNG's HTTP server has no idle timeout and no connection cap: the sweeper closes the
    port's connections beyond MS_HTTP_CONNS_MAX (64), the longest silent first, and every
    connection sent nothing for --http-idle-ms; a page polling meanwhile is served."""
    hport = free_ports(1)[0]
    cfg = t.configsvr(extra=["--http-port", str(hport), "--http-idle-ms", "2500"])
    idle = [socket.create_connection(("127.0.0.1", hport)) for _ in range(80)]
    half = socket.create_connection(("127.0.0.1", hport))
    half.sendall(b"GET /api/state HTTP/1.1\r\nHost: x\r\n")   # never finishes its request

    def closed(sk):
        sk.setblocking(False)
        try:
            return sk.recv(1) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def n_closed():
        return sum(closed(sk) for sk in idle)
    wait_until(lambda: n_closed() >= 80 - 64, 10, "connections beyond the cap closed")
    st, hd, body = get(hport, "/api/cluster")   # a client that asks is served
    assert st == 200, st
    early = n_closed()
    print("  over the cap: %d of 80 idle connections closed before the idle limit" % early)
    assert early < 80, early
    wait_until(lambda: n_closed() == 80 and closed(half), 15, "idle connections closed")
    assert_responsive(cfg, 1000, "after the sweeps")
    with open(cfg.log_path) as f:
        log = f.read()
    assert "http connections closed" in log and "overCap=" in log, log[-2000:]
    for sk in idle + [half]:
        sk.close()


if __name__ == "__main__":
    main()
