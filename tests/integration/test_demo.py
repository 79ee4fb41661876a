"""
test_demo.py — `make demo` (scripts/demo.sh) as a user sees it, on ports that are not the
defaults: it runs to the end, says its pace is for the demo only, shows every migration it
made in at least one frame of `shardctl watch --bars`, ends by pointing at the web view,
and every command it prints at the end works when pasted in order from the repository's
root (exit 0; the web view answers; `watch` and `tail -f`, which run until Ctrl-C, are
still running after a few seconds and have printed something); its last line points at
`make tour` (test_tour.py runs it). DEMO_SH=PATH runs
another copy of the script (its own repository's bin/), e.g. an older one.
"""
import os
import re
import signal
import subprocess
import time
import urllib.request

from lib import *

DEMO_SH = os.environ.get("DEMO_SH") or os.path.join(ROOT, "scripts", "demo.sh")
DEMO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(DEMO_SH)))
# ~5 chunks of the demo's 2 MiB: a few migrations onto 3 shards, then onto the 4th.
DEMO_DOCS = 60000
LONG_RUNNING_S = 3.0   # how long `watch` / `tail -f` must keep running


def hints(out):
    """The commands printed after "Explore it", the stop command included, in order."""
    tail = out[out.index("Explore it"):].splitlines()[1:]
    cmds = []
    for line in tail:
        if not line.startswith("  "):
            continue
        cmds.append(line.split(" # ", 1)[0].strip())
    return cmds


def run_long(cmd):
    """A command that runs until Ctrl-C: still running after LONG_RUNNING_S, output given."""
    p = subprocess.Popen(cmd, shell=True, cwd=DEMO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    time.sleep(LONG_RUNNING_S)
    still = p.poll() is None
    os.killpg(p.pid, signal.SIGTERM)
    out = p.communicate(timeout=10)[0].decode(errors="replace")
    assert still, "%r exited (%s) before Ctrl-C: %s" % (cmd, p.returncode, out[-1500:])
    assert out.strip(), "%r printed nothing in %.0f s" % (cmd, LONG_RUNNING_S)


def run_hint(cmd):
    if cmd.startswith("http://"):
        with urllib.request.urlopen(cmd, timeout=10) as r:
            assert r.status == 200, (cmd, r.status)
        return
    if " watch" in cmd or cmd.startswith("tail -f"):
        run_long(cmd)
        return
    stdin = "db.runCommand({ping: 1})\n" if "mongosh" in cmd else ""
    p = subprocess.run(cmd, shell=True, cwd=DEMO_ROOT, input=stdin, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=90)
    assert p.returncode == 0, "%r exited %d: %s" % (cmd, p.returncode, p.stdout[-1500:])


def moves_shown(out):
    """Migrations seen in flight in some watch frame: (donor, recipient, min)."""
    return set(re.findall(r"^  (shard\d+) -> (shard\d+)  \S+ (\{ \"_id\" : .*? \}) -->>", out, re.M))


@test
def test_demo_runs_and_every_hint_works(t):
    base = free_ports(310)[0]   # every port the cluster takes: base .. base+300 (web view)
    d = os.path.join(t.dir, "demo")
    env = dict(os.environ, DEMO_PORT=str(base), DEMO_DIR=d, DEMO_DOCS=str(DEMO_DOCS))
    try:
        p = subprocess.run(["bash", DEMO_SH], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=240)
        out = p.stdout
        with open(os.path.join(t.dir, "demo.out"), "w") as f:
            f.write(out)
        assert p.returncode == 0, "demo.sh exited %d: %s" % (p.returncode, out[-3000:])
        # Every problem is collected, so one run names all of them.
        problems = []
        if "for the demo only" not in out:
            problems.append("the demo's slower pace is not said on screen")
        web = "http://127.0.0.1:%d/" % (base + 300)
        if web not in out[out.index("Explore it"):]:
            problems.append("the final text does not point at %s" % web)
        done = int(re.search(r"migrations \(config\.changelog moveChunk\.from\): (\d+) done", out).group(1))
        shown = moves_shown(out)
        if done < 3 or len(shown) != done:
            problems.append("%d migrations done, %d seen in a frame: %s" % (done, len(shown), sorted(shown)))
        # The last line points at the guided tour (`make tour`, a cluster of its own,
        # tested by test_tour.py); it is not indented, so it is not one of the hints run here.
        if not re.search(r"^Next: make tour\b", out, re.M):
            problems.append("the final text does not point at make tour")
        cmds = hints(out)
        assert cmds[-1] == "scripts/cluster.sh stop --dir %s" % d, cmds[-1:]
        if not any("moveChunk" in c for c in cmds):
            problems.append("no moveChunk hint")
        for c in cmds:
            print("  hint: %s" % c, flush=True)
            try:
                run_hint(c)
            except (AssertionError, OSError, subprocess.TimeoutExpired) as e:
                print("    failed: %s" % e, flush=True)
                problems.append("hint %r: %s" % (c, e))
        assert not problems, "\n  ".join(["%d problem(s):" % len(problems)] + problems)
    finally:
        subprocess.run(["bash", os.path.join(DEMO_ROOT, "scripts", "cluster.sh"), "stop", "--dir", d],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


if __name__ == "__main__":
    main()
