#!/usr/bin/env python3
"""
test_model.py — the Promela model of the migration protocol
(docs/model/migration.pml, walked through in docs/model/README.md) checked by spin, one
test per check of scripts/check-model.sh. The correct model must show no error (safety
for each client, liveness "eventually quiet" under weak fairness) and each of the four
teeth — a defect fixed earlier put back with a -DBUG_... switch — must make pan write
a counterexample trail. make test runs the --quick configuration (at most 1 crash for the
correct model); `make check-model` runs the full one (at most 2 crashes).
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import main, test  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUICK = os.environ.get("MODEL_FULL") != "1"


def check(name):
    if shutil.which("spin") is None:
        raise AssertionError("spin is not installed (scripts/deps.sh installs it)")
    argv = ["bash", os.path.join(ROOT, "scripts", "check-model.sh")]
    if QUICK:
        argv.append("--quick")
    argv.append(name)
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    line = next((ln for ln in out.splitlines() if re.match(r"^(ok|FAIL) +%s:" % name, ln)), None)
    print("  " + (line or out.strip()), flush=True)
    assert r.returncode == 0 and line and line.startswith("ok"), out.strip()


@test
def test_safety_single_writer(ctx):
    check("safety_single_writer")


@test
def test_safety_multi_writer(ctx):
    check("safety_multi_writer")


@test
def test_safety_reader(ctx):
    check("safety_reader")


@test
def test_liveness_quiet(ctx):
    check("liveness_quiet")


@test
def test_tooth_stale_refresh(ctx):
    check("tooth_stale_refresh")


@test
def test_tooth_abort_ack_early(ctx):
    check("tooth_abort_ack_early")


@test
def test_tooth_abort_before_start(ctx):
    check("tooth_abort_before_start")


@test
def test_tooth_multi_across_commit(ctx):
    check("tooth_multi_across_commit")


if __name__ == "__main__":
    main()
