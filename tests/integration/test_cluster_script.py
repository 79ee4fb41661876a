"""
test_cluster_script.py — scripts/cluster.sh as users and tests rely on it (DESIGN §10):
start prints exactly one `NAME URL PID WIRE` line per process with the names config,
shard0.., router0.., every process answers, routers and shards also over MongoDB's wire
protocol at the printed mongodb:// URL (base+100+i, base+200+i), listShards shows the same URLs, status
reports them up, add-shard adds the next shard, --config-flags reaches the config server,
and stop ends exactly those PIDs; restart NAME [--kill] brings one process back with the
same command line, start refuses an earlier cluster's directory unless --reuse, and a
test-only command on a daemon without --enable-test-commands says how to enable it.
"""
import os
import subprocess

from lib import *
from wireproto import WireConn, hostport

SCRIPT = os.path.join(ROOT, "scripts", "cluster.sh")


def cluster_sh(*args, timeout=120):
    p = subprocess.run(["bash", SCRIPT] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("cluster.sh %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr[-2000:]))
    return p.stdout


def pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@test
def test_start_status_add_stop(t):
    base = free_ports(310)[0]  # every port cluster.sh derives: up to base+300 (web view)
    d = os.path.join(t.dir, "c")
    lines = []
    try:
        out = cluster_sh("start", "--dir", d, "--shards", "2", "--routers", "2", "--base-port", str(base), "--test",
                         "--config-flags", "--balancer-idle-ms 123456 --balancer-throttle-ms 77")
        lines = [l.split() for l in out.strip().splitlines()]
        names = [l[0] for l in lines]
        assert sorted(names) == ["config", "router0", "router1", "shard0", "shard1"], names
        for name, url, pid, wire in lines:
            assert url.startswith("tcp://127.0.0.1:"), url
            assert pid_alive(int(pid)), name
            Client(url).ok({"ping": 1})
            if name == "config":
                assert wire == "-", wire
                continue
            i = int(name[-1])
            assert wire == "mongodb://127.0.0.1:%d" % (base + (100 if name.startswith("router") else 200) + i), wire
            w = WireConn(hostport(wire))
            assert w.command({"ping": 1})["ok"] == 1, name
            w.close()
        urls = {l[0]: l[1] for l in lines}
        # --config-flags: split into flags for the config server only
        cfg_pid = [int(l[2]) for l in lines if l[0] == "config"][0]
        with open("/proc/%d/cmdline" % cfg_pid, "rb") as f:
            argv = f.read().split(b"\0")
        assert b"--balancer-idle-ms" in argv and b"123456" in argv and b"77" in argv, argv
        with open(os.path.join(d, "config.log")) as f:
            assert "balancer started idle_ms=123456 throttle_ms=77" in f.read()
        assert urls["router0"] == "tcp://127.0.0.1:%d" % base
        shards = Client(urls["router0"]).ok({"listShards": 1, "$db": "admin"})["shards"]
        assert {s["_id"]: s["host"] for s in shards} == {"shard0": urls["shard0"], "shard1": urls["shard1"]}, shards

        status = cluster_sh("status", "--dir", d)
        assert status.count(" up") == 5, status

        out = cluster_sh("add-shard", "--dir", d)
        name, url, pid, wire = out.strip().split()
        lines.append([name, url, pid, wire])
        assert name == "shard2", out
        assert wire == "mongodb://127.0.0.1:%d" % (base + 202), wire
        shards = Client(urls["router1"]).ok({"listShards": 1, "$db": "admin"})["shards"]
        assert [s["_id"] for s in sorted(shards, key=lambda s: s["_id"])] == ["shard0", "shard1", "shard2"]
    finally:
        if os.path.exists(os.path.join(d, "cluster.pids")):
            cluster_sh("stop", "--dir", d)
    for l in lines:
        wait_until(lambda: not pid_alive(int(l[2])), 10, "%s to exit" % l[0])


@test
def test_refuses_second_start_and_bad_args(t):
    base = free_ports(310)[0]  # every port cluster.sh derives: up to base+300 (web view)
    d = os.path.join(t.dir, "c")
    try:
        cluster_sh("start", "--dir", d, "--shards", "1", "--routers", "1", "--base-port", str(base))
        p = subprocess.run(["bash", SCRIPT, "start", "--dir", d, "--base-port", str(base)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        assert p.returncode != 0 and "already running" in p.stderr, p.stderr
    finally:
        cluster_sh("stop", "--dir", d)
    p = subprocess.run(["bash", SCRIPT, "start", "--dir", d, "--shards", "0"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert p.returncode != 0 and "--shards" in p.stderr, p.stderr


@test
def test_stop_finds_binaries_started_from_another_bin(t):
    """A cluster started with another MS_BIN is still stopped by a plain `stop` (the pids
    file records each binary's path); if a process cannot be stopped, the file is kept."""
    base = free_ports(310)[0]  # every port cluster.sh derives: up to base+300 (web view)
    d = os.path.join(t.dir, "c")
    alt = os.path.join(t.dir, "altbin")
    os.makedirs(alt)
    for b in ("configsvr", "shardd", "router", "shardctl"):
        os.symlink(os.path.join(BIN, b), os.path.join(alt, b))
    env = dict(os.environ, MS_BIN=alt)
    p = subprocess.run(["bash", SCRIPT, "start", "--dir", d, "--shards", "1", "--routers", "1",
                        "--base-port", str(base)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    pids = [int(l.split()[2]) for l in p.stdout.strip().splitlines()]
    try:
        env_other = dict(os.environ)
        env_other.pop("MS_BIN", None)
        env_other["MS_BIN"] = os.path.join(t.dir, "nowhere")
        p = subprocess.run(["bash", SCRIPT, "stop", "--dir", d], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=60, env=env_other)
        assert p.returncode == 0, p.stderr
        for pid in pids:
            wait_until(lambda: not pid_alive(pid), 10, "pid %d to exit" % pid)
        assert not os.path.exists(os.path.join(d, "cluster.pids"))
    finally:
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def cluster_sh_fails(*args):
    """Runs cluster.sh expecting exit status 1; returns its stderr."""
    p = subprocess.run(["bash", SCRIPT] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=120)
    assert p.returncode == 1, (args, p.returncode, p.stdout, p.stderr)
    return p.stderr


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().split(b"\0")


@test
def test_restart_keeps_flags(t):
    """restart shard1, gracefully and with --kill: a new PID with the same command line
    (ports, --enable-test-commands), recorded in cluster.pids, and the router writes to it again."""
    base = free_ports(310)[0]  # every port cluster.sh derives: up to base+300 (web view)
    d = os.path.join(t.dir, "c")
    pids = []
    try:
        out = cluster_sh("start", "--dir", d, "--shards", "2", "--routers", "1", "--base-port", str(base), "--test")
        lines = {l.split()[0]: l.split() for l in out.strip().splitlines()}
        pids = [int(l[2]) for l in lines.values()]
        router = Client(lines["router0"][1])
        # db "r" lives on shard1: its unsharded collection's writes go there
        router.ok({"enableSharding": "r", "primaryShard": "shard1", "$db": "admin"})
        router.ok({"insert": "c", "$db": "r", "documents": [{"_id": 0}]})
        argv = cmdline(int(lines["shard1"][2]))
        assert b"--enable-test-commands" in argv, argv
        for i, how in enumerate([[], ["--kill"]], start=1):
            old = int(lines["shard1"][2])
            out = cluster_sh("restart", "--dir", d, "shard1", *how)
            name, url, pid, wire = out.split()
            pid = int(pid)
            pids.append(pid)
            assert [name, url, wire] == [lines["shard1"][0], lines["shard1"][1], lines["shard1"][3]], out
            assert pid != old, (how, pid)
            wait_until(lambda: not pid_alive(old), 10, "the old shard1 to be reaped")
            assert cmdline(pid) == argv, (how, cmdline(pid), argv)
            with open(os.path.join(d, "cluster.pids")) as f:
                assert "shard1 %s %d " % (url, pid) in f.read(), how
            Client(url).ok({"configureFailPoint": "failCommand", "mode": "off"})  # still a test daemon
            router.ok({"insert": "c", "$db": "r", "documents": [{"_id": i}]})
            assert len(Client(url).find_all("c", "r")) == i + 1, how  # on shard1, old writes kept
            lines["shard1"] = [name, url, str(pid), wire]
        err = cluster_sh_fails("restart", "--dir", d, "shard9")
        assert "no process named 'shard9'" in err and "shard1" in err, err
        assert cluster_sh("status", "--dir", d).count(" up") == 4
    finally:
        if os.path.exists(os.path.join(d, "cluster.pids")):
            cluster_sh("stop", "--dir", d)
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


@test
def test_old_dir_refused_unless_reuse(t):
    """start on a stopped cluster's directory is refused with both ways on; --reuse keeps its
    data (and its ports); a test-only command without --enable-test-commands says how to enable it."""
    base = free_ports(310)[0]  # every port cluster.sh derives: up to base+300 (web view)
    d = os.path.join(t.dir, "c")
    try:
        out = cluster_sh("start", "--dir", d, "--shards", "1", "--routers", "1", "--base-port", str(base))
        urls = {l.split()[0]: l.split()[1] for l in out.strip().splitlines()}
        Client(urls["router0"]).ok({"insert": "c", "$db": "o", "documents": [{"_id": 1}]})
        r = Client(urls["shard0"]).err({"configureFailPoint": "failCommand", "mode": "off"}, code=59)
        assert r["errmsg"].startswith("no such command: 'configureFailPoint' (") and \
            "--enable-test-commands" in r["errmsg"] and "cluster.sh start --test" in r["errmsg"], r
        cluster_sh("stop", "--dir", d)
        err = cluster_sh_fails("start", "--dir", d, "--base-port", str(base))
        assert "earlier cluster" in err and "shard0" in err and "--reuse" in err and "new --dir" in err, err
        assert not os.path.exists(os.path.join(d, "cluster.pids")), "refused, yet something started"
        out = cluster_sh("start", "--dir", d, "--reuse")  # its --base-port and one shard come back
        assert sorted(l.split()[0] for l in out.strip().splitlines()) == ["config", "router0", "shard0"], out
        assert Client(urls["router0"]).find_all("c", "o") == [{"_id": 1}]
        err = cluster_sh_fails("start", "--dir", d, "--reuse")
        assert "already running" in err and "shard0 (pid " in err, err
    finally:
        if os.path.exists(os.path.join(d, "cluster.pids")):
            cluster_sh("stop", "--dir", d)


if __name__ == "__main__":
    main()
