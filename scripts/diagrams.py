#!/usr/bin/env python3
"""
diagrams.py — draws the protocol diagrams of the teaching pages as SVG files:

    docs/img/migration.svg   a chunk migration: router, config server, donor, recipient;
                             the donor's six steps and the recipient's states, what each
                             side persists, where writes and reads wait
                             (docs/how-a-migration-works.md)
    docs/img/recovery.svg    the range-deletion tasks of both shards over a migration, and
                             the coordinator's recovery after a kill -9
                             (docs/how-a-migration-works.md)
    docs/img/balancer.svg    a balancer round and the secondary thread beside it
                             (docs/balancer.md)

    python3 scripts/diagrams.py            # writes the three files
    python3 scripts/diagrams.py --check    # exit 1 when a file differs from what it would write

Python 3 standard library only. The output is deterministic (no dates, no random ids, fixed
number formatting), so running it again gives identical files; --check is how a test or a
reviewer makes sure the pictures were regenerated after an edit here. The SVGs hold their
text as text (readable and searchable on GitHub), use only the generic font families
sans-serif and monospace, and refer to nothing outside themselves.

The step names are the ones of docs/how-a-migration-works.md ("The names of the steps"):
edit them here and in the page together.
"""
import os
import sys
from xml.sax.saxutils import escape

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "docs", "img")

# Colours: one per role, pale fills so the black text stays readable.
INK = "#222222"
GREY = "#777777"
C_ROUTER = "#e8eef7"
C_CONFIG = "#efe7f6"
C_DONOR = "#e6f2e6"
C_RECIP = "#fdf0e0"
C_PERSIST = "#fff6b3"
C_PAUSE = "#d9d9d9"
C_READS = "#bdbdbd"


class Svg:
    """An SVG document built element by element; render() returns its text."""

    def __init__(self, width, height, title):
        self.w, self.h, self.title = width, height, title
        self.items = []

    def add(self, s):
        self.items.append(s)

    def rect(self, x, y, w, h, fill, stroke=INK, rx=4, dash=False):
        d = ' stroke-dasharray="4 3"' if dash else ""
        self.add('<rect x="%d" y="%d" width="%d" height="%d" rx="%d" fill="%s" stroke="%s"%s/>'
                 % (x, y, w, h, rx, fill, stroke, d))

    def line(self, x1, y1, x2, y2, color=INK, dash=False, arrow=False, width=1):
        d = ' stroke-dasharray="5 4"' if dash else ""
        a = ' marker-end="url(#arrow)"' if arrow else ""
        self.add('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%d"%s%s/>'
                 % (x1, y1, x2, y2, color, width, d, a))

    def text(self, x, y, s, size=12, anchor="start", bold=False, mono=False, color=INK,
             italic=False):
        fam = "monospace" if mono else "sans-serif"
        extra = (' font-weight="bold"' if bold else "") + (' font-style="italic"' if italic else "")
        self.add('<text x="%d" y="%d" font-family="%s" font-size="%d" text-anchor="%s" fill="%s"%s>%s</text>'
                 % (x, y, fam, size, anchor, color, extra, escape(s)))

    def box(self, x, y, w, h, fill, lines, size=12, bold_first=False, mono=False, dash=False):
        """A rounded box with centred lines of text."""
        self.rect(x, y, w, h, fill, dash=dash)
        n = len(lines)
        top = y + h / 2 - (n - 1) * (size + 3) / 2 + size / 3
        for i, s in enumerate(lines):
            self.text(x + w // 2, int(top + i * (size + 3)), s, size=size, anchor="middle",
                      bold=bold_first and i == 0, mono=mono)

    def arrow(self, x1, x2, y, label, dash=False, mono=True, above=True, size=11):
        """A horizontal message from x1 to x2 with its label above the line."""
        self.line(x1, y, x2, y, dash=dash, arrow=True)
        mid = (x1 + x2) // 2
        self.text(mid, y - 6 if above else y + 13, label, size=size, anchor="middle", mono=mono)

    def render(self):
        head = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">\n'
                '<title>%s</title>\n'
                '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
                'markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
                'fill="%s"/></marker></defs>\n'
                '<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>\n'
                % (self.w, self.h, self.w, self.h, escape(self.title), INK, self.w, self.h))
        return head + "\n".join(self.items) + "\n</svg>\n"


# ---- the migration ---------------------------------------------------------------------

def migration():
    W = 1180
    X = {"router": 110, "config": 340, "donor": 640, "recip": 960}
    s = Svg(W, 1000, "A chunk migration in minishard: messages, steps, states, persistence, waits")
    s.text(W // 2, 26, "A chunk migration: moveChunk of one range from the donor (shard0) to the recipient (shard1)",
           size=15, anchor="middle", bold=True)
    heads = [("router", "router", C_ROUTER), ("config", "config server", C_CONFIG),
             ("donor", "donor shard", C_DONOR), ("recip", "recipient shard", C_RECIP)]
    top, bottom = 44, 960
    for key, label, fill in heads:
        s.box(X[key] - 80, top, 160, 30, fill, [label], size=13, bold_first=True)
        s.line(X[key], top + 30, X[key], bottom, color=GREY, dash=True)

    # Bands for the write pause (steps 4-6) and the read wait (step 6), drawn first (behind).
    y_pause, y_reads, y_left = 560, 700, 800
    s.rect(X["donor"] - 240, y_pause, 390, y_left - y_pause, C_PAUSE, stroke=GREY, rx=0)
    s.rect(X["donor"] - 240, y_reads, 390, y_left - y_reads, C_READS, stroke=GREY, rx=0)
    s.text(X["donor"] - 234, y_pause + 16, "write pause:", size=11, bold=True)
    s.text(X["donor"] - 234, y_pause + 30, "versioned writes", size=11)
    s.text(X["donor"] - 234, y_pause + 44, "wait", size=11)
    s.text(X["donor"] - 234, y_reads + 16, "reads wait too", size=11, bold=True)

    def step(y, n, phase, h=26):
        s.box(X["donor"] - 75, y, 150, h, C_DONOR, ["step %d" % n, phase], size=11, bold_first=True,
              mono=False)

    def state(y, name, h=22):
        s.box(X["recip"] - 90, y, 180, h, C_RECIP, ["recipient: " + name], size=11, mono=True)

    def persist(x, y, lines, w=210):
        s.box(x, y, w, 15 * len(lines) + 8, C_PERSIST, lines, size=10)

    y = 100
    s.text(X["router"] - 6, y + 4, "moveChunk", size=11, anchor="end", italic=True)
    s.arrow(X["router"], X["config"], y, "_configsvrMoveRange")
    persist(X["config"] - 105, y + 6, ["persist: config.migrations entry"])
    y += 48
    s.arrow(X["config"], X["donor"] - 77, y, "_shardsvrMoveRange (waits for the end)")
    y += 10
    step(y, 1, "checks", h=34)
    s.text(X["donor"] + 82, y + 14, "owns the chunk? same epoch?", size=10)
    s.text(X["donor"] + 82, y + 27, "overlapping deletions done?", size=10)
    y += 50
    step(y, 2, "startClone", h=34)
    s.text(X["donor"] - 82, y + 20, "write capture on", size=10, anchor="end")
    persist(X["donor"] + 82, y - 2, ["persist, one transaction:", "coordinator document (no decision)",
                                    "range-deletion task, pending"], w=200)
    y += 62
    s.arrow(X["donor"], X["recip"] - 92, y, "_recvChunkStart")
    state(y + 6, "ready")
    persist(X["recip"] - 105, y + 32, ["persist: its own range-deletion task,", "pending, whenToClean now",
                                      "create collection + indexes"])
    y += 88
    step(y, 3, "clone", h=200)
    state(y + 4, "clone")
    s.arrow(X["recip"] - 92, X["donor"] + 77, y + 42, "_migrateClone (16 MB batches)", size=10)
    state(y + 56, "catchup")
    s.arrow(X["recip"] - 92, X["donor"] + 77, y + 94, "_transferMods (captured writes)", size=10)
    s.arrow(X["recip"] - 92, X["donor"] + 77, y + 122, "_getNextSessionMods (sessions)", size=10)
    state(y + 134, "steady")
    s.arrow(X["donor"] + 77, X["recip"] - 92, y + 178, "_recvChunkStatus (poll)", size=10)
    s.text(X["donor"] - 82, y + 80, "writes served", size=10, anchor="end")
    s.text(X["donor"] - 82, y + 94, "and captured", size=10, anchor="end")
    s.text(X["donor"] - 82, y + 150, "ends when what is left", size=10, anchor="end")
    s.text(X["donor"] - 82, y + 164, "fits the write-pause budget", size=10, anchor="end")
    y = y_pause + 22
    step(y, 4, "criticalSection", h=34)
    s.text(X["donor"] + 82, y + 22, "writes in flight finish first", size=10)
    y += 50
    step(y, 5, "commitOnRecipient", h=80)
    s.arrow(X["donor"] + 77, X["recip"] - 92, y + 16, "_recvChunkCommit")
    state(y + 24, "commitStart")
    s.text(X["recip"] + 96, y + 40, "final drain", size=10)
    s.arrow(X["recip"] - 92, X["donor"] + 77, y + 66, "count + checksum", dash=True)
    y = y_reads + 20
    step(y, 6, "commitOnConfig", h=80)
    state(y - 6, "done")
    s.arrow(X["donor"] - 77, X["config"], y + 30, "_configsvrCommitChunkMigration")
    persist(X["config"] - 105, y + 36, ["persist, one transaction: config.chunks", "moved chunk (M+1, 0) on recipient,",
                                        "control chunk (M+1, minor) on donor"])
    persist(X["donor"] + 82, y + 30, ["persist: decision committed", "refresh filtering metadata"], w=180)
    y = y_left
    s.text(X["donor"] - 234, y + 16, "critical section left: the write pause ends", size=11, bold=True)
    y += 26
    s.box(X["donor"] - 75, y, 150, 34, "#ffffff", ["completing", "(coordinator)"], size=11, bold_first=True)
    s.arrow(X["donor"] + 77, X["recip"] - 92, y + 14, "_recvChunkReleaseCritSec")
    persist(X["recip"] - 70, y + 22, ["persist: its task deleted", "(the range is its own)"], w=180)
    persist(X["donor"] + 82, y + 28, ["persist: donor's task", "ready, coordinator", "document deleted"], w=140)
    y += 90
    s.arrow(X["donor"] - 77, X["config"], y, "reply to _shardsvrMoveRange", dash=True)
    s.arrow(X["config"], X["router"], y + 24, "reply", dash=True)
    s.box(X["donor"] - 75, y + 10, 150, 34, "#ffffff", ["range deleter", "after the delay"], size=11,
          bold_first=True, dash=True)
    # legend
    ly = 975
    s.rect(20, ly - 11, 14, 12, C_PERSIST, rx=0)
    s.text(40, ly, "persisted before the next message (survives kill -9)", size=11)
    s.rect(400, ly - 11, 14, 12, C_PAUSE, rx=0)
    s.text(420, ly, "writes wait (steps 4-6)", size=11)
    s.rect(600, ly - 11, 14, 12, C_READS, rx=0)
    s.text(620, ly, "reads wait too (step 6)", size=11)
    s.text(800, ly, "dashed arrow: a reply", size=11)
    return s.render()


# ---- range deletion and recovery ----------------------------------------------------------

def recovery():
    W = 1100
    s = Svg(W, 650, "Range-deletion tasks over a migration, and the coordinator's recovery after a crash")
    s.text(W // 2, 26, "The range-deletion tasks over a migration", size=15, anchor="middle", bold=True)
    cols = ["step 1", "step 2", "steps 3-5", "step 6: commit", "completing", "range deleter"]
    x0, cw = 170, 150
    for i, c in enumerate(cols):
        s.box(x0 + i * cw, 44, cw - 6, 26, "#f4f4f4", [c], size=11, bold_first=True)
    rows = [("donor's task", C_DONOR, ["-", "pending, delayed", "pending, delayed", "pending, delayed",
                                      "ready", "deletes in batches,\nthen the task"]),
            ("recipient's task", C_RECIP, ["-", "pending, now", "pending, now", "pending, now",
                                          "deleted (committed)", "-"]),
            ("coordinator doc", C_PERSIST, ["-", "no decision", "no decision", "decision: committed",
                                           "deleted", "-"])]
    y = 80
    for label, fill, cells in rows:
        s.text(20, y + 24, label, size=12, bold=True)
        for i, c in enumerate(cells):
            parts = c.split("\n")
            s.box(x0 + i * cw, y + 4, cw - 6, 34, fill if c != "-" else "#ffffff", parts, size=10)
        y += 46
    s.text(20, y + 14, "On an abort the recipient's task becomes ready (its partial copy is deleted) and the "
           "donor's task and coordinator document are deleted.", size=11, italic=True)

    s.text(W // 2, y + 56, "The coordinator's recovery (a shard restarts with a coordinator document left)",
           size=15, anchor="middle", bold=True)
    y += 76
    bw, bh = 330, 44
    cx = 300

    def node(x, yy, lines, fill="#ffffff"):
        s.box(x - bw // 2, yy, bw, bh, fill, lines, size=11)

    node(cx, y, ["shard starts: coordinator document found", "critical section held, migrations refused"], C_DONOR)
    s.line(cx, y + bh, cx, y + 70, arrow=True)
    node(cx, y + 70, ["decision persisted?"], "#f4f4f4")
    s.line(cx + bw // 2, y + 80, cx + bw // 2 + 120, y + 80, arrow=True)
    s.text(cx + bw // 2 + 60, y + 75, "yes", size=11, anchor="middle")
    s.line(cx, y + 70 + bh, cx, y + 140, arrow=True)
    s.text(cx + 6, y + 130, "no", size=11)
    node(cx, y + 140, ["fence: _configsvrEnsureChunkVersionIsGreaterThan", "(a commit in flight can no longer land)"],
         C_CONFIG)
    s.line(cx, y + 140 + bh, cx, y + 210, arrow=True)
    node(cx, y + 210, ["fetch the routing table itself", "who owns the range's min?"], C_CONFIG)
    s.line(cx, y + 210 + bh, cx, y + 280, arrow=True)
    node(cx, y + 280, ["donor -> aborted;  another shard -> committed", "persist the decision"], C_PERSIST)
    s.line(cx + bw // 2, y + 302, cx + bw // 2 + 60, y + 302)
    s.text(cx - bw // 2 - 10, y + 236, "fails? ask again", size=10, anchor="end", italic=True)
    s.text(cx - bw // 2 - 10, y + 250, "(never a guess)", size=10, anchor="end", italic=True)

    rx = cx + bw // 2 + 120
    s.box(rx, y + 60, 360, 70, C_DONOR, ["complete the decision:", "committed: _recvChunkReleaseCritSec, donor's task ready",
                                          "aborted: _recvChunkAbort, donor's task deleted"], size=11, bold_first=True)
    s.line(rx - 60, y + 302, rx - 60, y + 112)
    s.line(rx - 60, y + 112, rx, y + 112, arrow=True)
    s.box(rx, y + 160, 360, 44, "#ffffff", ["coordinator document deleted,", "critical section left"], size=11)
    s.line(rx + 180, y + 130, rx + 180, y + 160, arrow=True)
    s.box(rx, y + 230, 360, 44, "#ffffff", ["the range deleter removes the orphans", "(the ready task)"], size=11,
          dash=True)
    s.line(rx + 180, y + 204, rx + 180, y + 230, arrow=True)
    return s.render()


# ---- the balancer -------------------------------------------------------------------------

def balancer():
    W = 1100
    s = Svg(W, 730, "A balancer round in minishard, and the balancer's secondary thread")
    s.text(W // 2, 26, "A balancer round (configsvr/balancer.c) and the secondary thread (configsvr/bal_merge.c)",
           size=15, anchor="middle", bold=True)
    cx, bw, bh = 330, 420, 46
    steps = [
        (["read config.settings: stopped? mode? activeWindow?", "chunk size, policy, autosplit"], "#f4f4f4"),
        (["zone-boundary splits", "a chunk a zone bound lies inside is cut there"], C_CONFIG),
        (["auto-split", "a chunk over the chunk size is cut at autoSplitVector points"], C_CONFIG),
        (["snapshot: shards (draining, zones, maxSize),", "chunks per shard (or data per shard)"], "#f4f4f4"),
        (["choose, per collection, in priority order:", "1 draining  2 zone violations  3 imbalance per zone",
          "threshold 2 / 4 / 8 chunks; a shard in at most one move"], C_ROUTER),
        (["wait until --balancer-throttle-ms since the last batch"], "#f4f4f4"),
        (["run the batch: at most n/2 migrations at once", "(each one a moveRange: docs/how-a-migration-works.md)"],
         C_DONOR),
        (["a move failed with ChunkTooBig? splitOrMarkJumbo:", "split at one point, or flag the chunk jumbo"],
         C_RECIP),
        (["log balancer.round in config.actionlog"], C_PERSIST),
    ]
    y = 50
    ys = []
    for i, (lines, fill) in enumerate(steps):
        h = bh + (14 if len(lines) > 2 else 0)
        s.box(cx - bw // 2, y, bw, h, fill, lines, size=11)
        ys.append((y, h))
        if i + 1 < len(steps):
            s.line(cx, y + h, cx, y + h + 22, arrow=True)
        y += h + 22
    # balancing off -> sleep
    y0, h0 = ys[0]
    s.line(cx - bw // 2, y0 + h0 // 2, 40, y0 + h0 // 2)
    s.text(44, y0 + h0 // 2 + 14, "off: sleep", size=11)
    # loop back
    yl, hl = ys[-1]
    s.line(cx, yl + hl, cx, yl + hl + 30)
    s.line(cx, yl + hl + 30, 40, yl + hl + 30)
    s.line(40, yl + hl + 30, 40, 40)
    s.line(40, 40, cx - 30, 40)
    s.line(cx - 30, 40, cx - 30, 50, arrow=True)
    s.text(48, yl + hl + 46, "moved chunks? next round at once; else sleep --balancer-idle-ms", size=11)
    # nothing to move shortcut
    y4, h4 = ys[4]
    s.text(cx + bw // 2 + 8, y4 + 20, "nothing to move:", size=11)
    s.text(cx + bw // 2 + 8, y4 + 34, "log the round, sleep", size=11)

    # secondary thread
    sx, sw = 790, 280
    s.box(sx, 50, sw, 34, "#f4f4f4", ["secondary thread"], size=13, bold_first=True)
    s.text(sx + sw // 2, 108, "defragmentation (configureCollectionBalancing)", size=11, anchor="middle", bold=True)
    phases = [["phase 1 mergeAndMeasureChunks", "merge same-shard runs, measure sizes"],
              ["phase 2 moveAndMergeChunks", "small chunk -> neighbour's shard, merge", "(its moves run in the round)"],
              ["phase 3 mergeChunks", "merge the runs again"]]
    y = 118
    for i, p in enumerate(phases):
        h = 46 + (14 if len(p) > 2 else 0)
        s.box(sx, y, sw, h, C_CONFIG, p, size=11, bold_first=True)
        if i + 1 < len(phases):
            s.line(sx + sw // 2, y + h, sx + sw // 2, y + h + 18, arrow=True)
        y += h + 18
    s.line(sx, 242, cx + bw // 2, ys[6][0] + 30, dash=True, arrow=True)
    s.text(sx + sw // 2, y + 14, "auto-merger (every --auto-merger-interval-ms)", size=11, anchor="middle", bold=True)
    s.box(sx, y + 24, sw, 60, C_CONFIG, ["mergeAllChunksOnShard per shard:", "contiguous, same shard, same zone,",
                                         "not jumbo, older than the horizon"], size=11)
    s.box(sx, y + 104, sw, 34, C_PERSIST, ["log autoMerger.round, balancer.defragmentation"], size=11)
    return s.render()


FILES = {"migration.svg": migration, "recovery.svg": recovery, "balancer.svg": balancer}


def main():
    check = "--check" in sys.argv[1:]
    os.makedirs(OUT_DIR, exist_ok=True)
    stale = []
    for name, fn in sorted(FILES.items()):
        path = os.path.join(OUT_DIR, name)
        text = fn()
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    if f.read() != text:
                        stale.append(name)
            except OSError:
                stale.append(name)
        else:
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
    if stale:
        print("diagrams.py: out of date (run python3 scripts/diagrams.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
