#!/usr/bin/env python3
"""
test_webview_scale.py — the web view holding a real cluster of 16 shards and 30 sharded
collections, in headless chromium at 1280×800 and 1920×1080: no panel over another, shard
cards in natural order (shard2 before shard10) with their URLs never broken inside the port,
chunk blocks as wide as their own measured sizes, 30 collection colours told apart (CIE Lab
distance), the jumbo chunk hatched (computed style), a draining shard, a zone (on its shard
and as the collection's range), a migration held at moveChunkHangAtStep3 drawn as an arrow
donor → recipient at the step NAMES.md calls clone, and a migration that took a fraction of
a second still drawn (faded) after it ended.

The page is loaded through a small front on its own port that passes every request to the
config server and adds to index.html one script of the test's: after a few polls it writes
the page's measurements (bounding boxes, computed styles, the order of the cards) as JSON
into the DOM, which chromium's --dump-dom prints. The front also makes the short migration
happen once the page has loaded (at its first /api/state poll), so that the page sees it
only as finished. Screenshots of both sizes are kept under build/rel/test-out/webview/.
"""
import html
import json
import math
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lib import *  # noqa: E402,F403
from test_webview import OUT, Front, browser, chromium, get_json  # noqa: E402

NSHARDS = 16
SIZES = ((1280, 800), (1920, 1080))
SHARD_FLAGS = ["--orphan-cleanup-delay-ms", "0"]
# 30 collections over 6 databases whose primaries are 6 different shards; demo.users and
# app.users are two of them (a hash once gave them one colour).
DBS = ["app", "demo", "shop", "logs", "geo", "iot"]
COLLS = ["%s.%s" % (db, c) for db in DBS for c in ("users", "orders", "events", "items", "tags")]
JUMBO_NS = "app.users"
ZONE_NS = "shop.orders"
DEFRAG_NS = "demo.tags"
MANY_NS = "app.events"        # 60 documents in [300, 360) on shard0: split into 60 chunks
CHUNKS_DRAWN_MAX = 60         # web/app.js: a card draws this many, then "+N more"
DRAIN = "shard15"
HELD_NS, HELD_FROM, HELD_TO = "geo.items", "shard8", "shard9"
QUICK_NS, QUICK_FROM, QUICK_TO = "logs.events", "shard6", "shard7"
MIN_DELTA_E = 15.0
PAD = "x" * 200

# The test's script, added to index.html by the front: 2.5 s (virtual) after load, the page
# has polled three times; what a person would judge by eye is measured and written out.
MEASURE_JS = r"""
<script>
setTimeout(() => {
  const box = (e) => { const r = e.getBoundingClientRect();
    return {l: r.left, t: r.top, r: r.right, b: r.bottom}; };
  const panels = [...document.querySelectorAll("header, main > section, aside > section, footer")]
    .map(e => Object.assign({id: e.id || e.tagName.toLowerCase()}, box(e)));
  const board = document.querySelector("main > section");
  const shards = [...document.querySelectorAll("[data-shard][id^='shard-']")].map(e => {
    const u = e.querySelector(".url"), text = u ? u.textContent : "";
    // the lines the URL's ":port" spans (a Range over its characters, old page or new)
    let portLines = -1;
    const m = /:\d+$/.exec(text);
    if (u && m) {
      const w = document.createTreeWalker(u, NodeFilter.SHOW_TEXT);
      let off = 0, n, rng = document.createRange(), start = m.index, end = text.length, set = 0;
      while ((n = w.nextNode())) {
        const len = n.data.length;
        if (!set && start < off + len) { rng.setStart(n, start - off); set = 1; }
        if (set && end <= off + len) { rng.setEnd(n, end - off); break; }
        off += len;
      }
      portLines = new Set([...rng.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top))).size;
    }
    return Object.assign({name: e.dataset.shard, url: text, portLines, chunks: Number(e.dataset.chunks),
      cls: e.className, text: e.textContent}, box(e));
  });
  const chunks = [...document.querySelectorAll(".chunk")].map(e => {
    const cs = getComputedStyle(e);
    return {ns: e.dataset.ns, shard: e.dataset.shard, size: Number(e.dataset.size || -1),
            w: e.getBoundingClientRect().width, colour: cs.backgroundColor,
            image: cs.backgroundImage, jumbo: e.classList.contains("jumbo")};
  });
  const swatches = {};
  for (const e of document.querySelectorAll("[data-ns] > .sw, [data-ns] > i"))
    swatches[e.parentElement.dataset.ns] = getComputedStyle(e).backgroundColor;
  const arrows = [...document.querySelectorAll("svg .mover, .mover")].map(e => ({
    from: e.dataset.from, to: e.dataset.to, phase: e.dataset.phase || "",
    recent: e.classList.contains("recent"), tag: e.tagName.toLowerCase(),
    marker: !!e.querySelector("[marker-end]"), opacity: Number(getComputedStyle(e).opacity)}));
  const migs = [...document.querySelectorAll("#migrations .mig")].map(e => ({
    ns: e.dataset.ns, phase: e.dataset.phase, text: e.textContent,
    held: e.dataset.heldAt || "", heldStep: (e.querySelector(".held") || {}).textContent || "",
    heldChip: (e.querySelector(".steps .held") || {}).textContent || "",
    recent: e.classList.contains("recent")}));
  const colls = [...document.querySelectorAll("#collections [data-ns]")].map(e => ({ns: e.dataset.ns,
    text: e.textContent}));
  const changelog = [...document.querySelectorAll("#changelog li[data-what='moveChunk.from']")]
    .map(e => e.textContent);
  const out = document.createElement("pre");
  out.id = "test-measure";
  out.hidden = true;
  out.textContent = JSON.stringify({panels, shards, chunks, swatches, arrows, migs, colls, changelog,
    boardRect: board ? box(board) : null, vw: innerWidth, vh: innerHeight});
  document.body.append(out);
}, 2500);
</script>
"""


class MeasuringFront(Front):
    """Adds MEASURE_JS to the page, and runs on_first_poll() before the page's first
    /api/state is answered."""

    def __init__(self, backend_port, on_first_poll=None):
        self.first = on_first_poll
        super().__init__(backend_port)

    def poll(self, n):
        if n == 1 and self.first:
            self.first()
        return True

    def rewrite(self, path, body):
        if path in ("/", "/index.html"):
            return body.replace(b"</body>", MEASURE_JS.encode() + b"</body>")
        return body


def adm(doc):
    d = dict(doc)
    d["$db"] = "admin"
    return d


def natural(name):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def lab(css):
    """CIE Lab (D65) of a CSS rgb()/rgba() colour."""
    r, g, b = [float(x) for x in re.findall(r"[\d.]+", css)[:3]]

    def lin(c):
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = lin(r), lin(g), lin(b)
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t):
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def overlap(a, b, slack=0.5):
    return a["l"] < b["r"] - slack and b["l"] < a["r"] - slack and a["t"] < b["b"] - slack and b["t"] < a["b"] - slack


def build(t):
    """16 shards, 30 collections (3 chunks each of different sizes), a jumbo chunk, a zone,
    a draining shard; the balancer stopped. (config client, router, shards, http port)."""
    hport = free_ports(1)[0]
    cl = t.cluster(NSHARDS, shard_extra=SHARD_FLAGS,
                   config_extra=["--http-port", str(hport), "--balancer-throttle-ms", "100"])
    r, c = cl.routers[0], cl.client()
    c.ok({"update": "settings", "$db": "config",
          "updates": [{"q": {"_id": "autosplit"}, "u": {"$set": {"enabled": False}}, "upsert": True}]})
    # the jumbo chunk: one shard-key value over the chunk size, found by one balancer round
    # (run while this is the only collection, so that it moves nothing else of the test's)
    c.ok({"update": "settings", "$db": "config",
          "updates": [{"q": {"_id": "chunksize"}, "u": {"$set": {"valueBytes": 16 * 1024}}, "upsert": True}]})
    for i, db in enumerate(DBS):
        c.ok(adm({"enableSharding": db, "primaryShard": "shard%d" % (i * 2)}))
    c.ok(adm({"shardCollection": JUMBO_NS, "key": {"k": 1}}))
    db, coll = JUMBO_NS.split(".")
    c.ok({"insert": coll, "$db": db, "documents": [{"k": 5, "pad": PAD * 5} for _ in range(100)]})
    for m in (1000, 2000):   # three chunks on shard0: the round moves the first (too big)
        c.ok(adm({"split": JUMBO_NS, "middle": {"k": m}}))
    n = len(c.ok({"find": "actionlog", "$db": "config", "filter": {"what": "balancer.round"}})["cursor"]["firstBatch"])
    c.ok(adm({"balancerStart": 1}))
    wait_until(lambda: len(c.ok({"find": "actionlog", "$db": "config", "filter": {"what": "balancer.round"}})
                           ["cursor"]["firstBatch"]) > n, 30, "a balancer round")
    c.ok(adm({"balancerStop": 1}))
    c.ok({"update": "settings", "$db": "config",   # back to the default 128 MB
          "updates": [{"q": {"_id": "chunksize"}, "u": {"$set": {"valueBytes": 128 << 20}}}]})
    wait_until(lambda: c.ok({"find": "chunks", "$db": "config", "filter": {"jumbo": True}})["cursor"]["firstBatch"],
               10, "the jumbo chunk")
    # the others: chunks [MinKey, 100) [100, 300) [300, MaxKey) holding 90, 200 and
    # 20..80 documents, the middle one moved to the next shard (a split would clear jumbo)
    for i, ns in enumerate(COLLS):
        db, coll = ns.split(".")
        if ns == JUMBO_NS:
            continue
        c.ok(adm({"shardCollection": ns, "key": {"k": 1}}))
        tail = 20 * (1 + i % 4)
        c.ok({"insert": coll, "$db": db,
              "documents": [{"k": k, "pad": PAD} for k in list(range(10, 300)) + list(range(300, 300 + tail))]})
        for m in (100, 300):
            c.ok(adm({"split": ns, "middle": {"k": m}}))
        home = DBS.index(db) * 2
        c.ok(adm({"moveChunk": ns, "find": {"k": 100}, "to": "shard%d" % (home + 1)}))
    # a shard with more chunks than a card draws: [300, MaxKey) of MANY_NS cut at every key
    for m in range(301, 360):
        c.ok(adm({"split": MANY_NS, "middle": {"k": m}}))
    # a zone on shard3 holding [0, 100) of ZONE_NS (its first chunk moved there)
    c.ok(adm({"moveChunk": ZONE_NS, "find": {"k": 0}, "to": "shard3"}))
    c.ok(adm({"addShardToZone": "shard3", "zone": "hot"}))
    c.ok(adm({"updateZoneKeyRange": ZONE_NS, "min": {"k": 0}, "max": {"k": 100}, "zone": "hot"}))
    # a collection being defragmented (the stopped balancer leaves it in its first phase)
    c.ok(adm({"configureCollectionBalancing": DEFRAG_NS, "defragmentCollection": True}))
    # a draining shard: one chunk there, then removeShard (the stopped balancer drains nothing)
    c.ok(adm({"moveChunk": "iot.tags", "find": {"k": 400}, "to": DRAIN}))
    assert c.ok(adm({"removeShard": DRAIN}))["state"] == "started"
    return c, r, cl.shards, hport


def measure(exe, port, size):
    """The page's measurements at this window size, and its screenshot (the same run)."""
    png = os.path.join(OUT, "scale-%dx%d.png" % size)
    if os.path.exists(png):
        os.unlink(png)
    dom = browser(exe, "http://127.0.0.1:%d/" % port, "--virtual-time-budget=4000",
                  "--window-size=%d,%d" % size, "--hide-scrollbars", "--screenshot=" + png, "--dump-dom")
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", png
    print("  screenshot: %s" % png, flush=True)
    m = re.search(r'<pre id="test-measure"[^>]*>(.*?)</pre>', dom, re.S)
    assert m, ("no measurements in the DOM", dom[:2000])
    return json.loads(html.unescape(m.group(1)))


def judge(m, size, fails, held_at):
    """Everything a person would see wrong at this size, appended to fails."""
    w = "%dx%d: " % size
    ps = m["panels"]
    for i in range(len(ps)):
        for j in range(i + 1, len(ps)):
            if overlap(ps[i], ps[j]):
                fails.append(w + "panels overlap: %s %s" % (ps[i], ps[j]))
    br = m["boardRect"]
    sh = m["shards"]
    for s in sh:
        if s["l"] < br["l"] - 0.5 or s["r"] > br["r"] + 0.5:
            fails.append(w + "shard %s runs out of its panel (%.0f..%.0f, panel %.0f..%.0f)" %
                         (s["name"], s["l"], s["r"], br["l"], br["r"]))
            break
    for i in range(len(sh)):
        for j in range(i + 1, len(sh)):
            if overlap(sh[i], sh[j]):
                fails.append(w + "shard cards overlap: %s %s" % (sh[i]["name"], sh[j]["name"]))
    names = [s["name"] for s in sh]
    if len(names) != NSHARDS or names != sorted(names, key=natural):
        fails.append(w + "shards not in natural order: %s" % names)
    for s in sh:
        if s["portLines"] != 1:
            fails.append(w + "URL of %s broken inside its port (%s: %d lines)" % (s["name"], s["url"], s["portLines"]))
            break
    drain = [s for s in sh if s["name"] == DRAIN]
    if not drain or "draining" not in drain[0]["cls"] or "draining" not in drain[0]["text"]:
        fails.append(w + "draining shard not marked")
    z = [s for s in sh if s["name"] == "shard3"]
    if not z or "zone hot" not in z[0]["text"]:
        fails.append(w + "shard3's zone not shown")
    zc = [c for c in m["colls"] if c["ns"] == ZONE_NS]
    if not zc or "zone hot { k: 0 } → { k: 100 }" not in zc[0]["text"]:
        fails.append(w + "the collection's zone range not shown: %s" % zc)
    s0 = [s for s in sh if s["name"] == "shard0"]
    drawn = len([k for k in m["chunks"] if k["shard"] == "shard0"])
    if not s0 or drawn != CHUNKS_DRAWN_MAX or "+%d more" % (s0[0]["chunks"] - CHUNKS_DRAWN_MAX) not in s0[0]["text"]:
        fails.append(w + "shard0: %d chunks drawn, no \"+N more\" for the rest" % drawn)
    dc = [c for c in m["colls"] if c["ns"] == DEFRAG_NS]
    if not dc or not re.search(r"defragmenting: \w+", dc[0]["text"]):
        fails.append(w + "the collection's defragmentation phase not shown: %s" % dc)
    # chunk widths follow sizes: within the blocks not at the minimum width, a chunk at
    # least 1.5 times the size of another is wider
    ch = [k for k in m["chunks"] if k["size"] > 0]
    if len({round(k["w"]) for k in ch}) < 3:
        fails.append(w + "chunk widths do not vary: %s" % sorted({round(k["w"]) for k in ch}))
    per = {}
    for k in ch:
        per.setdefault(k["shard"], []).append(k)
    inverted = [(a, b) for ks in per.values() for a in ks for b in ks
                if a["size"] >= 1.5 * b["size"] and b["w"] > 6 and a["w"] <= b["w"]]
    if inverted:
        fails.append(w + "a bigger chunk drawn no wider: %s" % (inverted[0],))
    # 30 colours told apart, and each chunk in its collection's colour
    sw = m["swatches"]
    cols = [sw.get(ns) for ns in COLLS]
    if None in cols:
        fails.append(w + "collections without a colour swatch: %s" % [ns for ns in COLLS if ns not in sw])
    else:
        labs = [lab(c) for c in cols]
        d = min((math.dist(labs[i], labs[j]), COLLS[i], COLLS[j])
                for i in range(len(labs)) for j in range(i + 1, len(labs)))
        if d[0] < MIN_DELTA_E:
            fails.append(w + "colours too close: %s and %s (ΔE %.1f < %.0f)" % (d[1], d[2], d[0], MIN_DELTA_E))
        wrong = [k for k in m["chunks"] if sw.get(k["ns"]) and k["colour"] != sw[k["ns"]]]
        if wrong:
            fails.append(w + "chunk not in its collection's colour: %s" % wrong[0])
    jumbo = [k for k in m["chunks"] if k["jumbo"]]
    if not jumbo or "repeating-linear-gradient" not in jumbo[0]["image"]:
        fails.append(w + "jumbo chunk not hatched: %s" % jumbo[:1])
    # the held migration: an arrow with its head, at step clone, held at step 3
    held = [a for a in m["arrows"] if a["from"] == HELD_FROM and a["to"] == HELD_TO and not a["recent"]]
    if not held or not held[0]["marker"] or held[0]["phase"] != "clone":
        fails.append(w + "no arrow %s → %s with a head at phase clone: %s" % (HELD_FROM, HELD_TO, m["arrows"]))
    mg = [x for x in m["migs"] if x["ns"] == HELD_NS and not x["recent"]]
    if not mg or mg[0]["phase"] != "clone":
        fails.append(w + "held migration not listed at phase clone: %s" % mg)
    elif held_at:
        want = "held at moveChunkHangAtStep3 — end of step 3 (clone)"
        if mg[0]["held"] != "moveChunkHangAtStep3" or mg[0]["heldStep"] != want or "clone" not in mg[0]["heldChip"]:
            fails.append(w + "held step not shown: %s" % mg[0])
    for text in m["changelog"]:
        if "critical section" in text or "write pause" not in text:
            fails.append(w + "moveChunk.from shows the critical section beside the write pause: %s" % text[:300])
            break


@test
def test_sixteen_shards_thirty_collections_at_two_sizes(t):
    exe = chromium()
    if not exe:
        return
    os.makedirs(OUT, exist_ok=True)
    t0 = time.monotonic()
    c, r, ss, hport = build(t)
    print("  cluster built in %.1f s" % (time.monotonic() - t0), flush=True)
    st = get_json(hport, "/api/state")
    assert len(st["cluster"]["shards"]) == NSHARDS and st["collections"]["collectionsTotal"] == 30, st["cluster"]
    fails = []   # everything wrong is listed before the test fails (an old build shows all)
    # every chunk measured on its shard within a few builds (16 dataSize calls a build)
    try:
        wait_until(lambda: all(k.get("sizeFrom") == "dataSize"
                               for co in get_json(hport, "/api/collections")["collections"] for k in co["chunks"]),
                   30, "every chunk measured")
    except AssertionError as e:
        fails.append("state: %s" % e)
    zc = [co for co in get_json(hport, "/api/collections")["collections"] if co["ns"] == ZONE_NS][0]
    if zc.get("zones") != [{"tag": "hot", "min": {"k": 0}, "max": {"k": 100}}]:
        fails.append("state: %s's zone ranges: %s" % (ZONE_NS, zc.get("zones")))
    donor = ss[int(HELD_FROM[5:])].client()
    held_uuid = c.ok({"find": "collections", "$db": "config", "filter": {"_id": HELD_NS}})["cursor"]["firstBatch"][0]["uuid"]
    quick = {}

    def quick_move():
        """At the page's first poll: a move that ends long before the next one."""
        if quick:
            return
        quick["reply"] = r.client().cmd(adm({"moveChunk": QUICK_NS, "find": {"k": 400}, "to": QUICK_TO}))
        try:
            wait_until(lambda: any(x["ns"] == QUICK_NS for x in get_json(hport, "/api/migrations").get("recent", [])),
                       5, "the finished move in migrations.recent")
        except AssertionError as e:
            fails.append("state: %s" % e)
    # one held migration per size (a chunk of HELD_NS each: the router waits 30 s at most)
    for i, (size, k) in enumerate(zip(SIZES, (0, 400))):
        n0 = fp(donor, "moveChunkHangAtStep3")
        th, res = cmd_in_thread(r, adm({"moveChunk": HELD_NS, "find": {"k": k}, "to": HELD_TO,
                                         "_waitForDelete": True}))
        try:
            fp_wait(donor, "moveChunkHangAtStep3", n0 + 1)
            wait_until(lambda: [x for x in get_json(hport, "/api/migrations")["inprog"] if x["role"] == "donor"],
                       10, "the held migration in the state")
            d = [x for x in get_json(hport, "/api/migrations")["inprog"] if x["role"] == "donor"][0]
            if d["step"] != "clone" or d.get("stepNumber") != 3:
                fails.append("state: held at the end of step 3, the donor's step is %s (%s)" %
                             (d["step"], d.get("stepNumber")))
            held_at = d.get("heldAt")
            if held_at is None and i == 0:
                print("  note: this shardd's currentOp has no heldAt (branch h/steps adds it); "
                      "the held-step checks are skipped", flush=True)
            front = MeasuringFront(hport, quick_move if i == 0 else None)
            try:
                m = measure(exe, front.port, size)
            finally:
                front.close()
            judge(m, size, fails, held_at)
            if i == 0:
                assert quick.get("reply", {}).get("ok") == 1, quick
                rec = [a for a in m["arrows"] if a["recent"] and a["from"] == QUICK_FROM and a["to"] == QUICK_TO]
                if not rec or not rec[0]["marker"] or not 0 < rec[0]["opacity"] < 1:
                    fails.append("the finished move is not drawn faded: %s" % m["arrows"])
                if not [x for x in m["migs"] if x["recent"] and x["ns"] == QUICK_NS and "write pause" in x["text"]]:
                    fails.append("the finished move is not listed: %s" % m["migs"])
        finally:
            fp(donor, "moveChunkHangAtStep3", "off")
        th.join(60)
        # the router waits 30 s at most (NetworkTimeout): a slow browser run may outlast it;
        # the migration goes on on the donor and ends once released
        assert res["reply"]["ok"] == 1 or res["reply"].get("code") == 89, res
        wait_until(lambda: [ch for ch in c.ok({"find": "chunks", "$db": "config", "filter": {}})["cursor"]["firstBatch"]
                            if ch.get("min") == ({"k": MINKEY} if k == 0 else {"k": 300}) and ch["shard"] == HELD_TO
                            and ch["uuid"] == held_uuid], 30, "the held migration done once released")
    for f in fails:
        print("  FAIL " + f, flush=True)
    assert not fails, "%d things wrong on the page" % len(fails)


if __name__ == "__main__":
    import lib
    lib._tests[:] = [f for f in lib._tests if f.__module__ == __name__]   # not test_webview's
    main()
