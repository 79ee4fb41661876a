"""
run.py — `make bench`: runs every benchmark (build/<mode>/b/bench_* binaries and
tests/bench/bench_*.py drivers), prints each one's own table as it goes, collects the
one `BENCH_JSON {...}` line each prints, and writes them all to bench-results.json
with the machine and time. Figures are ratios against a baseline measured in the same
run; nothing here asserts on time.
"""
import glob
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("BUILD", "build/rel")


def run(argv, name):
    print("\n### %s" % name, flush=True)
    start = time.monotonic()
    p = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=1800)
    figures = None
    for line in p.stdout.splitlines():
        if line.startswith("BENCH_JSON "):
            try:
                figures = json.loads(line[len("BENCH_JSON "):])
            except ValueError as e:
                print("  (bad BENCH_JSON line: %s)" % e)
        else:
            print(line)
    print("  (%s: exit %d, %.1f s)" % (name, p.returncode, time.monotonic() - start), flush=True)
    return p.returncode, figures


def main():
    only = sys.argv[1:]
    results = {}
    failures = []
    benches = sorted(glob.glob(os.path.join(ROOT, BUILD, "b", "bench_*")))
    drivers = sorted(glob.glob(os.path.join(ROOT, "tests", "bench", "bench_*.py")))
    for path in benches + drivers:
        name = os.path.basename(path)
        if only and not any(o in name for o in only):
            continue
        argv = [sys.executable, path] if path.endswith(".py") else [path]
        rc, figures = run(argv, name)
        if rc != 0 or figures is None:
            failures.append(name)
        if figures:
            results.update(figures)
    out = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "results": results,
        "failed": failures,
    }
    with open(os.path.join(ROOT, "bench-results.json"), "w") as f:
        json.dump(out, f, indent=2)
    print("\nwrote bench-results.json (%d groups%s)" % (
        len(results), ", failed: " + " ".join(failures) if failures else ""))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
