#!/usr/bin/env python3
"""
pick.py — print a few fields of the JSON replies that bin/shardctl writes, one reply per
line on stdin, so that a try-it box of the docs shows what matters and not the rest.

    bin/shardctl '{"currentOp": 1}' | python3 docs/examples/pick.py inprog.0.phase inprog.0.state

Each PATH is dotted; a number picks an array element. Each reply prints one line of
`PATH=VALUE` pairs (VALUE as compact JSON; `-` when the path is absent). A line that is
not JSON (shardctl's text output) is printed as it is.
"""
import json
import sys


def pick(doc, path):
    for part in path.split("."):
        if isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        elif isinstance(doc, dict) and part in doc:
            doc = doc[part]
        else:
            return "-"
    return json.dumps(doc, separators=(",", ":"))


def main():
    paths = sys.argv[1:]
    for line in sys.stdin:
        try:
            doc = json.loads(line)
        except ValueError:
            sys.stdout.write(line)
            continue
        print(" ".join("%s=%s" % (p, pick(doc, p)) for p in paths))


if __name__ == "__main__":
    main()
