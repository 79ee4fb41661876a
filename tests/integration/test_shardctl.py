"""
test_shardctl.py — bin/shardctl's contract (DESIGN §10): one command as extended JSON →
the reply as relaxed extended JSON on one line, exit 0 when ok: 1 and 1 otherwise;
`-` reads one command per line and answers each on one line (bad JSON included, so a
pipe never falls out of step); an unreachable host fails within --timeout; usage
errors exit 2.
"""
import json
import subprocess
import time

from lib import *


def run(args, stdin=None, timeout=30):
    p = subprocess.run([SHARDCTL] + args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


@test
def test_one_command_and_exit_codes(t):
    s = t.shardd()
    rc, out, _ = run(["--host", s.url, '{"insert": "c", "$db": "d", "documents": [{"_id": 1, "n": {"$numberLong": "5"}}]}'])
    assert rc == 0 and out.count("\n") == 1, (rc, out)
    assert bare(json.loads(out)) == {"n": 1, "ok": 1.0}, out
    rc, out, _ = run(["--host", s.url, '{"find": "c", "$db": "d", "filter": {}}'])
    assert rc == 0 and json.loads(out)["cursor"]["firstBatch"] == [{"_id": 1, "n": 5}], out
    # an error reply: exit 1, still one JSON line with MongoDB's fields
    rc, out, _ = run(["--host", s.url, '{"noSuchCommand": 1}'])
    reply = json.loads(out)
    assert rc == 1 and reply["ok"] == 0 and reply["code"] == 59 and reply["codeName"] == "CommandNotFound", out
    # JSON that does not parse: exit 1 with an error reply
    rc, out, _ = run(["--host", s.url, '{"ping": '])
    assert rc == 1 and json.loads(out)["ok"] == 0, out


@test
def test_stdin_mode_stays_in_step(t):
    s = t.shardd()
    lines = ['{"ping": 1}', '', '{"bad json', '{"insert": "c", "$db": "d", "documents": [{"_id": 2}]}',
             '{"count": "c", "$db": "d"}']
    rc, out, _ = run(["--host", s.url, "-"], stdin="\n".join(lines) + "\n")
    replies = [json.loads(l) for l in out.splitlines()]
    assert len(replies) == 4, out                     # the empty line is skipped
    assert [r["ok"] for r in replies] == [1, 0, 1, 1], out
    assert replies[3]["n"] == 1, out
    assert rc == 1, rc                                 # one reply was not ok


@test
def test_unreachable_host_and_usage(t):
    port = free_ports(1)[0]
    start = time.monotonic()
    rc, out, _ = run(["--host", "tcp://127.0.0.1:%d" % port, "--timeout", "500", '{"ping": 1}'])
    took = time.monotonic() - start
    reply = json.loads(out)
    assert rc == 1 and reply["codeName"] in ("NetworkTimeout", "HostUnreachable"), out
    assert took < 10, took                             # bounded by --timeout, not hanging
    rc, out, err = run(["--help"])
    assert rc == 0 and "usage: shardctl" in out + err
    rc, _, err = run(["--host", "tcp://127.0.0.1:1", "frobnicate"])
    assert rc == 2 and "unknown verb" in err, err
    rc, _, err = run(["--timeout", "0", '{"ping": 1}'])
    assert rc == 2, err


if __name__ == "__main__":
    main()
