"""
test_docs_run.py — the shell blocks of README.md and docs/*.md, run as written against
real clusters, so that the docs cannot drift from what the programs do.

The convention (every page that shows commands to run follows it):

    <!-- run: GROUP -->                 the next line opens a ```sh block: it is run
    ```sh
    scripts/cluster.sh start --dir /tmp/mc
    bin/shardctl '{"count": "users", "$db": "app"}'
    ```
    <!-- expect: "n" : \\d+ -->         zero or more: a Python regex that must be found
                                        (re.search) in that block's stdout + stderr

- A GROUP is a name, global across files. Its blocks run in document order (files in
  this order: README.md, then docs/*.md by name) in ONE bash session, so a block sees
  the variables, background jobs and cluster of the blocks before it. Each group is
  self-contained: it starts the cluster it needs and stops it (a cluster of the group's
  still running when its last line ends fails the group).
- Each line is one command (a line ending in a backslash continues on the next, and a
  here-document, `<<'EOF'`, runs to its terminator line as part of its command); a line
  that exits non-zero fails the group, named by file and line number. A line whose
  comment says `# fails:` (why) must exit non-zero instead. Lines that are only comments
  are not run. Background jobs (`&`, `kill %1`, `wait %1`) work as in a terminal; one
  left running when the group ends fails it (and is killed).
- `<!-- run: GROUP mongosh -->`: the ```js block that follows the ```sh block (no line
  between) is piped into the block's line that starts mongosh (build/mongosh/...), as if
  typed; the expect lines go after the ```js block and search the sh block's output. A
  group that runs build/mongosh is skipped, saying so, when mongosh is not installed
  (scripts/deps.sh --mongosh; `make test` installs it).
- An HTML comment cannot hold `--`: an expect that needs it writes `-{2}` (`-{2}>>` for
  the `-->>` of a chunk range).
- Blocks that are not to be run (output, sketches, long soaks, `make` itself) are simply
  left unmarked.

How the blocks are kept off the ports and directories of anything else: each group gets
a free port range for every port base the docs use (27017: cluster.sh's default; 28017:
`make demo`'s), away from those defaults, and every literal port in a line
(`127.0.0.1:P`, `--port P`, `--base-port P`, ...) inside [base, base+310) is moved into
it; `/tmp/NAME` becomes a directory of the group's own temp dir. The session's
environment points the defaults there too: MS_BASE_PORT (cluster.sh start's default
base) and MS_HOST (shardctl's default URL, the moved router0); HOME is a temp dir
(mongosh writes there). `bin/X` runs $MS_BIN/X (the sanitizer build under `make
SAN=...`). The output is mapped back (ports and /tmp paths as the page shows them) before
the expects are searched and before it is printed, each line with its seconds. On failure
or timeout the runner stops every cluster directory the group named (`cluster.sh stop
--dir`) and kills the processes of the group's own session (it started the session:
those are its descendants, nothing else).

Run alone: `bash tests/run.sh --integration docs_run` (or `python3
tests/integration/test_docs_run.py [test_group_NAME ...]`). Also here: every relative
link of README.md and docs/*.md resolves and every repository path they name exists; and
the runner's own check on a page written for it: a failing line, a missing expect, a
`# fails:` line that succeeds, a job left running, a hung line, each fails its group,
and a failed group's cluster is stopped.
"""
import glob
import os
import re
import signal
import subprocess

from lib import *

DOC_FILES = ["README.md"] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
MONGOSH = "build/mongosh/node_modules/.bin/mongosh"
BASES = (27017, 28017)      # cluster.sh's default base; make demo's (scripts/demo.sh)
SPAN = 310                  # a cluster's ports: base .. base+300 (the web view), and a few more
GROUP_TIMEOUT_S = 100       # every line of a group together; a hung line fails the group

RUN_RE = re.compile(r"^<!-- run: ([A-Za-z0-9_.-]+)( mongosh)? -->\s*$")
EXPECT_RE = re.compile(r"^<!-- expect: (.*) -->\s*$")
PORT_RE = re.compile(r"(127\.0\.0\.1:|localhost:|--(?:base-|wire-|http-)?port[ =]|_PORT=)(\d{4,5})\b")
TMP_RE = re.compile(r"(?<![\w./-])/tmp/(?=[\w.-])")
BIN_RE = re.compile(r"(^|[\s;&|(])bin/(?=[a-z])")


class DocError(AssertionError):
    pass


class Block:
    def __init__(self, path, lineno, group, lines, js=None):
        self.path = path            # relative to ROOT
        self.lineno = lineno        # of the block's first line
        self.group = group
        self.lines = lines          # [(lineno, text)] logical lines, continuations joined
        self.js = js                # mongosh input, for the mongosh variant
        self.expects = []

    def where(self, lineno=None):
        return "%s:%d" % (self.path, lineno or self.lineno)


# ---- parsing ---------------------------------------------------------------------------

def _fence(lines, i, lang, path):
    """The body of the fenced block opening at lines[i] (```lang): (body, index after it)."""
    if lines[i].strip() != "```" + lang:
        raise DocError("%s:%d: expected a ```%s block here" % (path, i + 1, lang))
    for j in range(i + 1, len(lines)):
        if lines[j].strip() == "```":
            return lines[i + 1:j], j + 1
    raise DocError("%s:%d: ```%s block never closed" % (path, i + 1, lang))


HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")


def _logical_lines(body, first_lineno):
    """[(lineno, command)]: comment-only and blank lines dropped, continuations (a trailing
    backslash, or a here-document up to its terminator) joined."""
    out, cur, start, until = [], "", None, None
    for k, raw in enumerate(body):
        if until is not None:           # inside a here-document: every line belongs to it
            cur += "\n" + raw
            if raw.strip() == until:
                out.append((start, cur))
                cur, start, until = "", None, None
            continue
        if start is None:
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            start = first_lineno + k
        cur += raw
        if raw.endswith("\\"):
            cur += "\n"
            continue
        h = HEREDOC_RE.search(raw)
        if h:
            until = h.group(2)
            continue
        out.append((start, cur))
        cur, start = "", None
    if start is not None:
        out.append((start, cur))
    return out


def _skip_fence(lines, i):
    """The index after lines[i]; when lines[i] opens an unmarked fenced block, after its
    closing fence (a marker shown inside an example is not a marker)."""
    m = re.match(r"^(`{3,})", lines[i])
    if not m:
        return i + 1
    for j in range(i + 1, len(lines)):
        if re.fullmatch(r"`{%d,}\s*" % len(m.group(1)), lines[j]):
            return j + 1
    return len(lines)


def parse(path, text):
    """The marked blocks of one markdown file, in order."""
    lines = text.split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        if EXPECT_RE.match(lines[i]):
            raise DocError("%s:%d: an expect line not right after a marked block" % (path, i + 1))
        m = RUN_RE.match(lines[i])
        if not m and lines[i].startswith("<!-- run:"):
            raise DocError("%s:%d: malformed run marker %r" % (path, i + 1, lines[i]))
        if not m:
            i = _skip_fence(lines, i)
            continue
        body, i2 = _fence(lines, i + 1, "sh", path)
        b = Block(path, i + 3, m.group(1), _logical_lines(body, i + 3))
        if m.group(2):
            if not any(l.lstrip().startswith(MONGOSH) for _, l in b.lines):
                raise DocError("%s: a mongosh block without a line that starts %s" % (b.where(), MONGOSH))
            js, i2 = _fence(lines, i2, "js", path)
            b.js = "\n".join(js) + "\n"
        while i2 < len(lines):
            e = EXPECT_RE.match(lines[i2])
            if not e:
                break
            try:
                b.expects.append((i2 + 1, re.compile(e.group(1))))
            except re.error as err:
                raise DocError("%s:%d: bad expect regex: %s" % (path, i2 + 1, err))
            i2 += 1
        if not b.lines:
            raise DocError("%s: a marked block with nothing to run" % b.where())
        blocks.append(b)
        i = i2
    return blocks


def doc_groups(files=DOC_FILES):
    """{group: [Block]} over the files, in file then document order."""
    groups = {}
    for f in files:
        path = f if os.path.isabs(f) else os.path.join(ROOT, f)
        with open(path, encoding="utf-8") as fh:
            rel = os.path.relpath(path, ROOT) if path.startswith(ROOT + os.sep) else os.path.basename(path)
            for b in parse(rel, fh.read()):
                groups.setdefault(b.group, []).append(b)
    return groups


# ---- mapping ports and directories ---------------------------------------------------------

class Mapping:
    """Doc ports and /tmp dirs -> this group's, and back (for output)."""

    def __init__(self, tmp):
        self.tmp = tmp
        base = self._free_range()
        self.bases = {b: base + k * SPAN for k, b in enumerate(BASES)}

    @staticmethod
    def _free_range():
        """A free range for every doc base that overlaps none of the doc ranges: a cluster
        someone runs on the default ports (or make demo's) never meets the suite's."""
        n = SPAN * len(BASES)
        for _ in range(100):
            base = free_ports(n)[0]
            if all(base + n <= b or b + SPAN <= base for b in BASES):
                return base
        raise RuntimeError("no free port range away from the default ones")

    def _port(self, p, back):
        for doc, mine in self.bases.items():
            lo, hi = (mine, doc) if back else (doc, mine)
            if lo <= p < lo + SPAN:
                return hi + (p - lo)
        return p

    def line(self, text):
        text = PORT_RE.sub(lambda m: m.group(1) + str(self._port(int(m.group(2)), False)), text)
        text = TMP_RE.sub(self.tmp + "/", text)
        return BIN_RE.sub(lambda m: m.group(1) + BIN + "/", text)

    def back(self, out):
        out = out.replace(self.tmp + "/", "/tmp/").replace(BIN + "/", "bin/")
        return PORT_RE.sub(lambda m: m.group(1) + str(self._port(int(m.group(2)), True)), out)

    def env(self):
        base = self.bases[27017]
        return dict(os.environ, MS_BASE_PORT=str(base), MS_HOST="tcp://127.0.0.1:%d" % base,
                    MS_BIN=BIN, HOME=os.path.join(self.tmp, "home"), DO_NOT_TRACK="1")


# ---- running a group --------------------------------------------------------------------

def _script(blocks, mapping, mark):
    """One bash script: every line, each followed by its exit-status check."""
    out = ["set -o pipefail", "cd %s" % _q(ROOT),
           "__ms() { printf '\\n%s %%s %%s\\n' \"$*\" \"$EPOCHREALTIME\"; }" % mark]
    for bi, b in enumerate(blocks):
        for li, (lineno, text) in enumerate(b.lines):
            run = mapping.line(text)
            if b.js is not None and text.lstrip().startswith(MONGOSH):
                js = os.path.join(mapping.tmp, "block%d.js" % bi)
                with open(js, "w") as f:
                    f.write(b.js)
                run = "{ %s\n} <%s" % (run, _q(js))
            fails = re.search(r"#\s*fails:", text) is not None
            out.append("__ms line %d %d" % (bi, li))
            out.append(run)
            if fails:
                out.append("if [ $? -eq 0 ]; then __ms ok-but-fails %d %d; exit 1; fi" % (bi, li))
            else:
                out.append("__rc=$?; if [ $__rc -ne 0 ]; then __ms failed %d %d $__rc; exit 1; fi" % (bi, li))
    out.append("__ms done")
    return "\n".join(out) + "\n"


def _q(s):
    return "'" + s.replace("'", "'\\''") + "'"


def _session_pids(sid):
    """Live processes of session sid (the bash we started with start_new_session)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:
            pids.append(int(d))
    return pids


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def _running_clusters(dirs):
    """The cluster dirs among dirs with a process still alive (from cluster.pids)."""
    alive = []
    for d in dirs:
        try:
            with open(os.path.join(d, "cluster.pids")) as f:
                rows = [l.split() for l in f if l.strip()]
        except OSError:
            continue
        if any(len(r) >= 3 and os.path.exists("/proc/%s" % r[2]) for r in rows):
            alive.append(d)
    return alive


def _split_output(out, mark, nblocks):
    """Output per block, and the (block, line) the run was in when it ended, and its end."""
    per = [""] * nblocks
    cur, end = None, None
    for chunk in out.split("\n"):
        if chunk.startswith(mark + " "):
            f = chunk.split()[1:]
            if f[0] == "line":
                cur = (int(f[1]), int(f[2]))
            else:
                end = f
            continue
        if cur is not None:
            per[cur[0]] += chunk + "\n"
    return per, cur, end


def run_group(name, blocks, tmp, timeout=GROUP_TIMEOUT_S, echo=True):
    """Runs one group; raises AssertionError naming the line that failed."""
    mapping = Mapping(tmp)
    os.makedirs(os.path.join(tmp, "home"), exist_ok=True)
    mark = "@@ms-docs-%d@@" % os.getpid()
    script = os.path.join(tmp, "group.sh")
    with open(script, "w") as f:
        f.write(_script(blocks, mapping, mark))
    dirs = sorted({mapping.line(d) for b in blocks for _, l in b.lines
                   for d in re.findall(r"--dir\s+(\S+)", l)})
    # Output to a file, not a pipe: a job the group left in the background would hold a
    # pipe open, and the group ends when its bash does.
    log_path = os.path.join(tmp, "group.out")
    with open(log_path, "wb") as log:
        p = subprocess.Popen(["bash", script], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             cwd=ROOT, env=mapping.env(), start_new_session=True)
    timed_out = False
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    with open(log_path, "rb") as log:
        raw = log.read()
    out = mapping.back(raw.decode("utf-8", "replace"))
    per, cur, end = _split_output(out, mark, len(blocks))
    problems = []
    try:    # a job killed by the group's last lines may take a moment to go
        wait_until(lambda: not _session_pids(p.pid), 2, "the group's jobs to end")
    except AssertionError:
        pass
    left = [(pid, _cmdline(pid)) for pid in _session_pids(p.pid)]
    clusters = _running_clusters(dirs)
    try:
        if timed_out:
            problems.append("timed out after %d s" % timeout)
        if end is None or end[0] != "done":
            if cur is None:
                problems.append("the session ended before its first line (exit %s)" % p.returncode)
            else:
                b = blocks[cur[0]]
                lineno, text = b.lines[cur[1]]
                why = {"failed": "exited %s" % (end[3] if end and len(end) > 3 else "?"),
                       "ok-but-fails": "exited 0, but its comment says it fails"}.get(end[0] if end else "",
                                                                                     "did not finish")
                problems.append("%s: `%s` %s" % (b.where(lineno), text.strip(), why))
        else:
            for bi, b in enumerate(blocks):
                for lineno, rx in b.expects:
                    if not rx.search(per[bi]):
                        problems.append("%s: expect %r not found in the output of the block at %s" % (
                            "%s:%d" % (b.path, lineno), rx.pattern, b.where()))
            if left:
                problems.append("left running when the group ended: %s" % "; ".join(
                    "%d %s" % (pid, cmd[:120]) for pid, cmd in left))
            if clusters:
                problems.append("clusters still running when the group ended (it must stop them): %s" %
                                ", ".join(mapping.back(d + "/") for d in clusters))
        if echo or problems:
            print(_shown(out, mark, blocks), flush=True)
    finally:
        _cleanup(p.pid, dirs)
    if problems:
        raise AssertionError("group %s: %s" % (name, "\n  ".join(problems)))


def _shown(out, mark, blocks):
    """The group's output for the log: each line's place and seconds, then its output."""
    lines, last = [], None
    for l in out.rstrip("\n").split("\n"):
        if l.startswith(mark + " "):
            f = l.split()
            if last is not None:
                lines[last[0]] += "  (%.1f s)" % (float(f[-1]) - last[1])
            if f[1] == "line":
                b = blocks[int(f[2])]
                lines.append("  --- %s" % b.where(b.lines[int(f[3])][0]))
                last = (len(lines) - 1, float(f[4]))
            continue
        if l:
            lines.append("    | " + l)
    if len(lines) > 400:
        lines = lines[:150] + ["    ... (%d lines) ..." % (len(lines) - 300)] + lines[-150:]
    return "\n".join(lines)


def _cleanup(sid, dirs):
    """Stops the group's clusters (cluster.sh stop: exactly the PIDs it started) and the
    processes left in the group's own session."""
    for d in _running_clusters(dirs):
        subprocess.call(["bash", os.path.join(ROOT, "scripts", "cluster.sh"), "stop", "--dir", d],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _session_pids(sid):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        try:
            wait_until(lambda: not _session_pids(sid), 3, "the group's processes to exit")
            return
        except AssertionError:
            continue


# ---- the tests ------------------------------------------------------------------------

def _group_test(name, blocks):
    def fn(t):
        if any(l.lstrip().startswith(MONGOSH) or " " + MONGOSH in l for b in blocks for _, l in b.lines) and \
                not os.access(os.path.join(ROOT, MONGOSH), os.X_OK):
            print("  SKIP: %s is not installed (scripts/deps.sh --mongosh installs it)" % MONGOSH)
            return
        print("  group %s: %s" % (name, ", ".join(b.where() for b in blocks)), flush=True)
        run_group(name, blocks, t.dir)
    fn.__name__ = "test_group_" + name
    return fn


try:
    GROUPS = doc_groups()
    for _name, _blocks in GROUPS.items():
        test(_group_test(_name, _blocks))
except DocError as _e:
    _parse_error = str(_e)

    @test
    def test_docs_parse(t):
        raise AssertionError(_parse_error)


def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    s = re.sub(r"[`*_]", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(path):
    with open(path, encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#+\s+(.*)$", text, re.M)}


@test
def test_relative_links_resolve(t):
    """Every [text](target) and ![alt](target) of README.md and docs/*.md that is not a URL
    names a file of the repository (and, with #anchor into a .md, one of its headings)."""
    bad, n = [], 0
    for f in DOC_FILES:
        path = os.path.join(ROOT, f)
        with open(path, encoding="utf-8") as fh:
            text = re.sub(r"```.*?```", "", fh.read(), flags=re.S)
        for target in re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            n += 1
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not dest.startswith(ROOT + os.sep) or not os.path.exists(dest):
                bad.append("%s: %s (no such file in the repository)" % (os.path.relpath(path, ROOT), target))
            elif anchor and dest.endswith(".md") and anchor not in _anchors(dest):
                bad.append("%s: %s (no such heading)" % (os.path.relpath(path, ROOT), target))
    print("  %d relative links checked" % n)
    assert not bad, "dead links:\n  " + "\n  ".join(bad)


SOURCE_PATH_RE = re.compile(r"(?<![\w/.-])((?:docs|tests|scripts|web|common|configsvr|shardd|router|cli)/"
                            r"[\w./*-]*\w)")


@test
def test_named_paths_exist(t):
    """A path of the repository named in the text of README.md or docs/*.md (`shardd/plan.c`,
    tests/integration/test_*_crash.py) names files that exist: the pages point at code
    that is there."""
    bad, n = [], 0
    for f in DOC_FILES:
        path = os.path.join(ROOT, f)
        with open(path, encoding="utf-8") as fh:
            for name in SOURCE_PATH_RE.findall(fh.read()):
                n += 1
                if not (glob.glob(os.path.join(ROOT, name)) or glob.glob(os.path.join(ROOT, name) + "*")):
                    bad.append("%s: %s" % (os.path.relpath(path, ROOT), name))
    print("  %d paths checked" % n)
    assert not bad, "paths named that do not exist:\n  " + "\n  ".join(bad)


@test
def test_diagrams_are_regenerated(t):
    """docs/img/*.svg are what scripts/diagrams.py draws now: a change to the drawing (or a
    hand edit of an SVG) without regenerating fails here."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "diagrams.py"), "--check"],
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


# The runner checked on a page written here: each way a doc can be wrong must fail it.
SELF_DOC = """\
text
<!-- run: good -->
```sh
x=5        # a variable the next block sees
sleep 30 &
echo "first $x"
```
<!-- expect: first 5 -->
prose
<!-- run: good -->
```sh
echo "second $x" >&2
kill %1
false   # fails: as the comment says
```
<!-- expect: second 5 -->
<!-- run: broken -->
```sh
echo one
ls /nonexistent-dir-of-the-docs-runner
echo never
```
<!-- run: missing -->
```sh
echo something else
```
<!-- expect: what the page promises -->
<!-- run: wrongfail -->
```sh
true   # fails: but it does not
```
<!-- run: leftover -->
```sh
sleep 30 &
```
<!-- run: hung -->
```sh
echo before
sleep 60
```
<!-- run: stopped -->
```sh
scripts/cluster.sh start --dir /tmp/selftest --shards 1 --routers 0
bin/shardctl --host tcp://127.0.0.1:27037 '{"ping": 1, "$db": "admin"}' >/dev/null
bin/shardctl --host tcp://127.0.0.1:27037 '{"noSuchCommand": 1, "$db": "admin"}'
```
"""


@test
def test_runner_fails_a_broken_page(t):
    path = os.path.join(t.dir, "page.md")
    with open(path, "w") as f:
        f.write(SELF_DOC)
    groups = doc_groups([path])
    assert list(groups) == ["good", "broken", "missing", "wrongfail", "leftover", "hung", "stopped"], list(groups)
    run_group("good", groups["good"], os.path.join(t.dir, "good"), echo=False)
    want = {"broken": r"page\.md:20: `ls /nonexistent-dir-of-the-docs-runner` exited 2",
            "missing": r"page\.md:27: expect 'what the page promises' not found",
            "wrongfail": r"page\.md:30: `true   # fails: but it does not` exited 0, but its comment",
            "leftover": r"left running when the group ended: \d+ sleep 30",
            "hung": r"timed out after 2 s\n  page\.md:39: `sleep 60` did not finish",
            "stopped": r"page\.md:45: `bin/shardctl --host tcp://127\.0\.0\.1:27037 '\{\"noSuchCommand\"[^`]*` exited 1"}
    for name, rx in want.items():
        d = os.path.join(t.dir, name)
        try:
            run_group(name, groups[name], d, timeout=2 if name == "hung" else GROUP_TIMEOUT_S, echo=False)
        except AssertionError as e:
            assert re.search(rx, str(e)), "group %s failed, but not as expected: %s" % (name, e)
            print("  %s: fails as it must: %s" % (name, str(e).splitlines()[0][:160]))
        else:
            raise AssertionError("group %s passed: the runner does not bite" % name)
    # the failed group's cluster was stopped: cluster.sh stop removes cluster.pids only when
    # none of the processes it started still runs
    d = os.path.join(t.dir, "stopped", "selftest")
    assert os.path.isdir(os.path.join(d, "shard0")), "the self-test's cluster never started"
    assert not os.path.exists(os.path.join(d, "cluster.pids")), "the failed group's cluster still runs"
    for bad in ("<!-- run: x -->\n```js\n1\n```\n", "<!-- run: x -->\n```sh\necho\n",
                "<!-- expect: a -->\n", "<!-- run: x mongosh -->\n```sh\necho\n```\n```js\n1\n```\n"):
        try:
            parse("bad.md", bad)
        except DocError:
            continue
        raise AssertionError("a malformed page parsed: %r" % bad)


if __name__ == "__main__":
    main()
