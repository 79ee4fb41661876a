#!/usr/bin/env python3
"""
test_hostile_peers.py — a dead or hung shard costs only the operations that need it.
Three shards and a router; app.c is sharded on {j: "hashed"} so its
chunks sit on every shard, and we read each shard directly to learn which j lives where.

  (a) kill -9 one shard: many concurrent counts (they need every shard) each fail with
      HostUnreachable (6) naming the shard within a few seconds — not after the 30 s
      deadline they waited for before — while the router answers ping within a second
      and finds targeted at the live shards succeed; serverStatus counts the calls that
      failed fast. Then the shard restarts on its port and counts succeed again
      within a few seconds (the router redials by itself).
  (b) SIGSTOP one shard (alive, connected, never answering): many concurrent counts
      wait on it; at most a bounded share of the router's 16 workers can be held by it
      (the others are refused with ExceededTimeLimit 262), so ping answers within a
      second and finds on the live shards succeed; the waiting counts end with an error
      of the router (its deadline toward shards is shorter than shardctl's), and
      shardctl's own timeout is a one-line JSON error naming the URL and the timeout.
  (c) shardctl against a port nobody listens on answers HostUnreachable within about
      a second instead of waiting its whole --timeout.

Every case ends with the router answering ping for another client within a second and
its RSS under RSS_MB_MAX.
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from hostile import RawReq, assert_responsive, assert_rss_below  # noqa: E402

DB = "app"
NS = "app.c"
NDOCS = 90
VICTIM = 2                 # shard2: not the database's primary (shard0)
THREADS = 20               # more than the router's 16 workers
RSS_MB_MAX = 200           # a router serving this test holds ~10 MiB; 200 leaves room
HOST_UNREACHABLE, NETWORK_TIMEOUT, MAX_TIME_EXPIRED, EXCEEDED_TIME_LIMIT = 6, 89, 50, 262


def stop_process(pid):
    """SIGSTOP our own child and wait (bounded) until every one of its threads is stopped:
    on a loaded machine a thread can finish a request it already had before the stop
    reaches it."""
    os.kill(pid, signal.SIGSTOP)

    def all_stopped():
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state not in ("T", "t"):
                return False
        return True
    wait_until(all_stopped, 10, "pid %d to stop" % pid, interval=0.01)


def assert_live_shards_serve(c, where):
    """Ten point finds whose documents live on shards other than the victim succeed."""
    nxt = live_filter(where)
    for _ in range(10):
        j = nxt()
        r = c.ok({"find": "c", "$db": DB, "filter": {"j": j}})
        assert r["cursor"]["firstBatch"] == [{"_id": j, "j": j}], r


def setup(t, router_extra=()):
    cfg = t.configsvr()
    shards = [t.shardd("shard%d" % i) for i in range(3)]
    router = t.router(cfg.url, extra=list(router_extra))
    c = router.client()
    for i, s in enumerate(shards):
        c.ok({"addShard": s.url, "name": "shard%d" % i, "$db": "admin"})
    c.ok({"enableSharding": DB, "primaryShard": "shard0", "$db": "admin"})
    c.ok({"shardCollection": NS, "key": {"j": "hashed"}, "$db": "admin"})
    c.ok({"insert": "c", "$db": DB, "documents": [{"_id": i, "j": i} for i in range(NDOCS)],
          "ordered": False})
    assert c.ok({"count": "c", "$db": DB})["n"] == NDOCS
    where = {}
    for i, s in enumerate(shards):
        conn = RawReq(s.url)
        r = conn.call({"find": "c", "$db": DB, "filter": {}, "batchSize": 1000})
        conn.close()
        assert r.get("ok") == 1, r
        for d in r["cursor"]["firstBatch"]:
            where[d["j"]] = i
    assert sorted(where) == list(range(NDOCS)), sorted(where)[:5]
    assert set(where.values()) == {0, 1, 2}, "hashed chunks should cover every shard"
    return cfg, shards, router, c, where


def hammer(url, make_cmd, seconds, sock_timeout_s, results, stop=None):
    """THREADS connections, each sending make_cmd() one at a time for `seconds` (or
    until stop is set); results gets (code or 0, ms, errmsg) per op, code
    'client-timeout' when the router did not answer within sock_timeout_s."""
    lock = threading.Lock()

    def run():
        try:
            conn = RawReq(url, timeout=sock_timeout_s)
        except OSError as e:
            with lock:
                results.append(("connect-failed", 0, str(e)))
            return
        end = time.monotonic() + seconds
        while time.monotonic() < end and not (stop and stop.is_set()):
            t0 = time.monotonic()
            try:
                r = conn.call(make_cmd())
            except (socket.timeout, OSError) as e:
                with lock:
                    results.append(("client-timeout", (time.monotonic() - t0) * 1000, str(e)))
                break
            code = 0 if r.get("ok") == 1 else r.get("code")
            with lock:
                results.append((code, (time.monotonic() - t0) * 1000, r.get("errmsg", "")))
            time.sleep(0.02)   # a client retrying, not a spin: the machine is shared
        conn.close()

    ths = [threading.Thread(target=run, daemon=True) for _ in range(THREADS)]
    for th in ths:
        th.start()
    return ths


def ping_while(router, ths, what):
    """Pings the router every 200 ms (fresh connection each time) until ths end;
    every ping must answer within 1 s. Returns the slowest, in ms."""
    worst = 0.0
    n = 0
    while any(th.is_alive() for th in ths) and n < 1000:
        worst = max(worst, assert_responsive(router, 1000, what))
        n += 1
        time.sleep(0.2)
    for th in ths:
        th.join(60)
    return worst


def peer_status(c, url):
    peers = c.ok({"serverStatus": 1, "$db": "admin"}).get("peers", {})
    for p in peers.values() if isinstance(peers, dict) else peers:
        if p.get("url") == url:
            return p
    raise AssertionError("serverStatus.peers has no entry for %s: %s" % (url, peers))


def live_filter(where):
    """A find filter targeted at one live shard, alternating between shard0 and shard1."""
    live = [j for j, s in sorted(where.items()) if s != VICTIM]
    state = {"i": 0}

    def make():
        j = live[state["i"] % len(live)]
        state["i"] += 1
        return j
    return make


@test
def test_dead_shard_fails_fast_then_redials(t):
    cfg, shards, router, c, where = setup(t)
    victim = shards[VICTIM]
    shards[VICTIM].kill()

    results = []
    ths = hammer(router.url, lambda: {"count": "c", "$db": DB}, 4.0, 15.0, results)
    worst = ping_while(router, ths, "while counts fail on a dead shard")
    codes = {}
    for code, ms, msg in results:
        codes[code] = codes.get(code, 0) + 1
    slowest = max(ms for _, ms, _ in results)
    print("  dead shard: %d counts, codes %s, slowest %.0f ms, slowest ping %.0f ms" % (
        len(results), codes, slowest, worst))
    assert results and set(codes) == {HOST_UNREACHABLE}, codes
    assert len(results) >= THREADS, len(results)
    # The deadline toward a shard is 20 s; failing fast means far below it.
    assert slowest < 5000, "a count on a dead shard took %.0f ms" % slowest
    assert all("shard%d" % VICTIM in msg for _, _, msg in results), results[0]

    # Operations that need only live shards are served as usual.
    assert_live_shards_serve(c, where)
    st = peer_status(c, victim.url)
    assert st["connected"] is False and st["callsFailedFast"] >= 1, st

    # Restarted on the same port and files: the router redials by itself.
    victim.start()
    t0 = time.monotonic()
    wait_until(lambda: c.cmd({"count": "c", "$db": DB}).get("n") == NDOCS, 10.0,
               "count through the router after the shard restarted")
    print("  redial: count ok %.1f s after the shard was ready" % (time.monotonic() - t0))
    assert peer_status(c, victim.url)["connected"] is True
    assert_responsive(router, 1000, "after the shard came back")
    assert_rss_below(router, RSS_MB_MAX)


@test
def test_hung_shard_holds_a_bounded_share(t):
    # The router's deadline toward shards is shortened (default 20 s) so the test is
    # quick; shardctl gets twice that, as by default (30 s) it has more than the router.
    shard_timeout_ms = 3000
    cfg, shards, router, c, where = setup(t, ["--peer-timeout-ms", str(shard_timeout_ms)])
    victim = shards[VICTIM]
    stop_process(victim.pid)   # our own child: alive, connected, silent
    try:
        results = []
        stop = threading.Event()
        ths = hammer(router.url, lambda: {"count": "c", "$db": DB}, 5.0, 15.0, results, stop)
        time.sleep(0.5)   # let the hung calls take their share
        # Finds on live shards are answered while the counts wait on the hung one.
        assert_live_shards_serve(c, where)
        st = peer_status(c, victim.url)
        print("  hung shard peer status: %s" % st)
        assert st["callsInFlight"] <= st["callsInFlightMax"] < 16, st
        worst = ping_while(router, ths, "while counts wait on a hung shard")

        # A shardctl without maxTimeMS, whose own timeout is longer than the router's
        # deadline toward the shard, prints the router's error.
        p = subprocess.run([SHARDCTL, "--host", router.url, "--timeout", str(2 * shard_timeout_ms),
                            '{"count": "c", "$db": "app"}'], capture_output=True, text=True,
                           timeout=30)
        out = json.loads(p.stdout)
        assert p.returncode == 1 and out["ok"] == 0, (p.returncode, p.stdout, p.stderr)
        assert out["code"] == NETWORK_TIMEOUT and "shard%d" % VICTIM in out["errmsg"], out
        # shardctl's own timeout: one JSON line naming the URL and the timeout.
        p = subprocess.run([SHARDCTL, "--host", victim.url, "--timeout", "700", '{"ping": 1}'],
                           capture_output=True, text=True, timeout=30)
        out = json.loads(p.stdout)
        assert p.returncode == 1 and out["code"] == NETWORK_TIMEOUT, (p.stdout, p.stderr)
        assert victim.url in out["errmsg"] and "700 ms" in out["errmsg"], out
        st = peer_status(c, victim.url)
    finally:
        os.kill(victim.pid, signal.SIGCONT)

    codes = {}
    for code, ms, msg in results:
        codes[code] = codes.get(code, 0) + 1
    print("  hung shard: %d counts, codes %s, slowest ping %.0f ms" % (len(results), codes, worst))
    assert "client-timeout" not in codes, codes
    assert set(codes) <= {NETWORK_TIMEOUT, EXCEEDED_TIME_LIMIT}, codes
    assert codes.get(EXCEEDED_TIME_LIMIT, 0) >= 1 and st["callsOverShareCap"] >= 1, (codes, st)
    assert all("shard%d" % VICTIM in msg for _, _, msg in results), results[:3]
    # Resumed, it answers again.
    wait_until(lambda: c.cmd({"count": "c", "$db": DB}).get("n") == NDOCS, 10.0,
               "count after SIGCONT")
    assert_responsive(router, 1000, "after the hung shard resumed")
    assert_rss_below(router, RSS_MB_MAX)


@test
def test_maxtimems_bounds_the_wait_on_a_hung_shard(t):
    cfg, shards, router, c, where = setup(t)
    victim = shards[VICTIM]
    stop_process(victim.pid)
    try:
        t0 = time.monotonic()
        r = c.err({"count": "c", "$db": DB, "maxTimeMS": 800})
        ms = (time.monotonic() - t0) * 1000
        print("  maxTimeMS 800 on a hung shard: code %s after %.0f ms" % (r.get("code"), ms))
        assert r["code"] == MAX_TIME_EXPIRED, r
        assert ms < 10000, ms    # the router's own default deadline is 20 s
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    assert c.ok({"count": "c", "$db": DB, "maxTimeMS": 5000})["n"] == NDOCS
    assert_responsive(router, 1000)


@test
def test_shardctl_nobody_listening(t):
    port = free_ports(1)[0]
    url = "tcp://127.0.0.1:%d" % port
    t0 = time.monotonic()
    p = subprocess.run([SHARDCTL, "--host", url, '{"ping": 1}'], capture_output=True,
                       text=True, timeout=60)
    ms = (time.monotonic() - t0) * 1000
    print("  shardctl to nobody: %.0f ms: %s" % (ms, p.stdout.strip()))
    out = json.loads(p.stdout)
    assert p.returncode == 1 and out["ok"] == 0, (p.returncode, p.stdout, p.stderr)
    assert out["code"] == HOST_UNREACHABLE and out["codeName"] == "HostUnreachable", out
    assert url in out["errmsg"], out
    assert ms < 10000, ms    # its --timeout is 30 s


if __name__ == "__main__":
    main()
