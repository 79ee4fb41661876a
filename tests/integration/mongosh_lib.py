"""
mongosh_lib.py — running MongoDB's shell, mongosh 2.x, from an integration test
(test_mongosh.py, test_mongosh_helpers.py). scripts/deps.sh installs mongosh with npm into
build/mongosh; tests skip, saying so, only when that install failed. mongosh runs with HOME
in a temp dir, --norc, telemetry off (DO_NOT_TRACK), and runs tests/mongosh/lib.js then the
given scripts: each check prints "name => <relaxed EJSON>" (or "name !! <error> code=N").
"""
import json
import os
import re
import subprocess

from lib import ROOT

MONGOSH = os.path.join(ROOT, "build", "mongosh", "node_modules", ".bin", "mongosh")
SCRIPTS = os.path.join(ROOT, "tests", "mongosh")


def have_mongosh():
    if os.access(MONGOSH, os.X_OK):
        return True
    print("  SKIP: mongosh is not installed at %s (scripts/deps.sh --mongosh installs it with npm; "
          "it warned when npm could not)" % MONGOSH, flush=True)
    return False


def mongosh(t, url, scripts, prelude=""):
    """Runs mongosh on url with lib.js + scripts; returns (stdout, {name: value or ('error', msg)})."""
    home = os.path.join(t.dir, "mongosh-home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, HOME=home, DO_NOT_TRACK="1", MONGOSH_SKIP_NODE_VERSION_CHECK="1")
    argv = [MONGOSH, "--quiet", "--norc", url]
    if prelude:
        argv += ["--eval", prelude]
    argv += [os.path.join(SCRIPTS, "lib.js")] + [os.path.join(SCRIPTS, s) for s in scripts]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, "mongosh exited %d:\n%s" % (p.returncode, p.stdout[-4000:])
    res = {}
    for line in p.stdout.splitlines():
        m = re.match(r"^(\w+) => (.*)$", line)
        if m:
            res[m.group(1)] = json.loads(m.group(2)) if m.group(2) != "undefined" else None
            continue
        m = re.match(r"^(\w+) !! (.*)$", line)
        if m:
            res[m.group(1)] = ("error", m.group(2))
    return p.stdout, res


def check(res, name, want, out):
    assert name in res, "%s: not printed\n%s" % (name, out[-3000:])
    assert res[name] == want, "%s: got %r, want %r" % (name, res[name], want)
