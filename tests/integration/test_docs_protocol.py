"""
test_docs_protocol.py — docs/protocol.md must stay true: every command a daemon serves
(its listCommands reply, test-only commands included) is documented under a `###`
heading, or in a bullet item that starts with backticked names ("- `a`, `b` — ..."), in that daemon's sections (`## Shard daemon: ...`, `## Config server: ...`,
`## Router: ...`) or in the `## All processes: ...` sections.
"""
import os
import re

from lib import *

DOC = os.path.join(ROOT, "docs", "protocol.md")
SECTION_PREFIX = {"shardd": "Shard daemon", "configsvr": "Config server", "router": "Router"}


def documented_names(process):
    """Command names in ### headings of the process's sections and the shared ones."""
    names = set()
    section = None
    with open(DOC) as f:
        for line in f:
            if line.startswith("## "):
                section = line[3:].strip()
            elif section and (section.startswith(SECTION_PREFIX[process]) or section.startswith("All processes")):
                if line.startswith("### "):
                    heading = re.sub(r"\(.*?\)", "", line[4:])
                    names.update(n.strip() for n in re.split(r"[,/]", heading) if n.strip())
                if re.match(r"\s*[-*] `", line):  # "- `a`, `b` — what they do"
                    names.update(re.findall(r"`(\w+)`", line.split(" — ")[0]))
    return names


def check(process, client):
    served = client.ok({"listCommands": 1})["commands"].keys()
    documented = documented_names(process)
    missing = sorted(n for n in served if n not in documented)
    assert not missing, "%s serves commands docs/protocol.md does not document: %s" % (process, missing)


@test
def test_every_command_documented(t):
    cfg = t.configsvr()
    check("configsvr", cfg.client())
    s = t.shardd()
    check("shardd", s.client())
    r = t.router(cfg.url)
    check("router", r.client())


if __name__ == "__main__":
    main()
