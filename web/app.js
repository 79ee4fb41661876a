// minishard's live web view (web/index.html): polls the config server's /api/state once a
// second and redraws. Shards are cards that wrap into rows (natural name order: shard2
// before shard10); each holds its chunks as blocks whose widths follow their own sizes,
// coloured by collection. A migration in flight is an arrow from its donor's card to its
// recipient's, a migration committed in the last few seconds the same arrow faded, so a
// 100 ms move is seen although the page polls once a second. When a poll fails the page
// says it is reconnecting and keeps polling, so it recovers by itself.
// Elements carry ids and data- attributes (data-shard, data-ns, data-size, data-phase...)
// for tests/integration/test_webview*.py, which read the DOM from headless chromium.
"use strict";

const POLL_MS = 1000;
const CHUNKS_DRAWN_MAX = 60;   // per shard; the rest are counted ("+N more")
const RECENT_SHOWN_MS = 3000;  // a committed migration stays drawn, fading, this long

// A migration's steps (docs/how-a-migration-works.md): the donor's phase, its words, and
// the number of the timed step of moveChunk.from it is (0: after the six).
const STEPS = [
  ["checks", "checks", 1], ["startClone", "start clone", 2], ["clone", "clone", 3],
  ["criticalSection", "critical section", 4], ["commitOnRecipient", "commit on recipient", 5],
  ["commitOnConfig", "commit on config server", 6], ["completing", "completing", 0],
  ["done", "done", 0]];
const STEP_WORDS = Object.fromEntries(STEPS.map(([p, w]) => [p, w]));
const STEP_BY_NUMBER = Object.fromEntries(STEPS.filter(s => s[2]).map(([p, w, n]) => [n, w]));

const $ = (id) => document.getElementById(id);
const naturally = new Intl.Collator("en", { numeric: true }).compare;
let lastOk = 0;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "style") e.style.cssText = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined)
    e.append(typeof k === "string" || typeof k === "number" ? String(k) : k);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS($("arrows").namespaceURI, tag);  // the SVG namespace
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function num(v) {
  if (v === null || v === undefined) return 0;
  if (typeof v === "object") return Number(v.$numberLong ?? v.$numberInt ?? v.$numberDouble ?? 0);
  return Number(v);
}

function bytes(n) {
  n = num(n);
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : n) + " " + u[i];
}

function ms(n) {
  n = num(n);
  if (n < 0) return "?";
  if (n < 1000) return n + " ms";
  if (n < 60000) return (n / 1000).toFixed(1) + " s";
  return Math.floor(n / 60000) + " min " + Math.round((n % 60000) / 1000) + " s";
}

function keyVal(v) {
  if (v && typeof v === "object") {
    if ("$minKey" in v) return "MinKey";
    if ("$maxKey" in v) return "MaxKey";
    if ("$numberLong" in v) return v.$numberLong;
    if ("$oid" in v) return v.$oid.slice(-6);
    if ("$date" in v) return typeof v.$date === "string" ? v.$date : JSON.stringify(v.$date);
    return JSON.stringify(v);
  }
  return typeof v === "string" ? JSON.stringify(v) : String(v);
}

function keyDoc(d) {
  if (!d) return "?";
  const parts = Object.entries(d).map(([k, v]) => k + ": " + keyVal(v));
  return "{ " + parts.join(", ") + " }";
}

function when(d) {
  if (!d) return "";
  const t = new Date(d.$date ?? d);
  return isNaN(t) ? "" : t.toLocaleTimeString();
}

// Collection colours by position in name order, from a palette built for telling 30 apart:
// ten hues spread round the wheel (taken in an order that puts far hues next to each
// other, so a few collections get very different colours) at three lightness steps. The
// closest two of the 30 are ~19 apart in CIE Lab (ΔE76); from the 31st the colours repeat.
const HUES = [4, 174, 48, 225, 140, 310, 28, 200, 90, 265];
const LEVELS = [[72, 45], [60, 72], [75, 28]];   // [saturation %, lightness %]
function colourAt(i) {
  const [s, l] = LEVELS[Math.floor(i / HUES.length) % LEVELS.length];
  return "hsl(" + HUES[i % HUES.length] + ", " + s + "%, " + l + "%)";
}
let colours = new Map();
function colour(ns) { return colours.get(ns) || "#888"; }

// A shard's URL with its port kept on one line: the line may break after the host, never
// inside ":port".
function urlParts(url) {
  const m = /^(.*?)(:\d+)$/.exec(url || "");
  return m ? [el("span", { class: "host" }, m[1]), el("wbr"), el("span", { class: "port" }, m[2])]
           : [el("span", { class: "host" }, url || "")];
}

function drawSummary(st) {
  const c = st.cluster, b = st.balancer || {};
  $("summary").replaceChildren(
    el("span", {}, el("b", { id: "sum-shards" }, c.shards.length), "shards"),
    el("span", {}, el("b", {}, num(c.collections)), "sharded collections"),
    el("span", {}, el("b", { id: "sum-chunks" }, num(c.chunks)), "chunks"),
    el("span", {}, el("b", {}, (st.migrations.inprog || []).filter(m => m.role === "donor").length),
       "moving"),
    el("span", {}, "balancer ", el("b", { id: "sum-balancer" }, b.mode || "?"),
       b.inBalancerRound ? "(in a round)" : ""));
}

function zoneText(z) { return "zone " + z.tag + " " + keyDoc(z.min) + " → " + keyDoc(z.max); }

// One line per collection: its colour, name, chunks and data, and what is special about
// it (zone ranges, defragmentation and its phase, noBalance).
function drawCollections(colls) {
  $("collections").replaceChildren(...colls.map(c => el("div", { class: "coll", "data-ns": c.ns },
    el("i", { class: "sw", style: "background-color:" + colour(c.ns) }),
    el("span", { class: "ns" }, c.ns),
    el("span", { class: "muted" }, " " + num(c.chunkCount) + " chunks · " + bytes(c.dataSize)),
    c.defragmentCollection ? el("span", { class: "badge warn", "data-defrag": c.defragmentationPhase || "" },
      "defragmenting: " + (c.defragmentationPhase || "starting")) : null,
    c.noBalance ? el("span", { class: "badge" }, "noBalance") : null,
    ...(c.zones || []).map(z => el("div", { class: "kv zone", "data-zone": z.tag }, zoneText(z))))));
}

function drawLegend() {
  $("legend").replaceChildren(
    el("span", {}, el("i", { class: "sw jumbo" }), "jumbo"),
    el("span", {}, el("i", { class: "sw moving" }), "being moved"),
    el("span", {}, el("i", { class: "sw arrow" }), "donor → recipient (faded: just finished)"),
    el("span", {}, el("i", { class: "sw draining" }), "draining shard"),
    el("span", { class: "muted" }, "block width = the chunk's data size; colours: Collections"));
}

function shardBadges(s) {
  const badges = [];
  if (!s.reachable) badges.push(el("span", { class: "badge bad" }, "unreachable"));
  if (s.draining) badges.push(el("span", { class: "badge warn", "data-draining": "" }, "draining"));
  for (const z of s.zones || []) badges.push(el("span", { class: "badge zone", "data-zone": z }, "zone " + z));
  if (s.maxSizeMB !== null && s.maxSizeMB !== undefined)
    badges.push(el("span", { class: "badge" }, "maxSize " + num(s.maxSizeMB) + " MB"));
  return badges;
}

function chunkBlock(c, k, shard, scale, moving) {
  const size = num(k.sizeEstimate);
  const mv = moving.has(c.ns + "|" + keyDoc(k.min));
  const how = k.sizeFrom === "dataSize" ? "measured " + ms(k.sizeAgeMS) + " ago" :
              k.sizeFrom === "catalog" ? "catalog estimate" : "share of the collection on this shard";
  return el("div", {
    class: "chunk" + (k.jumbo ? " jumbo" : "") + (mv ? " moving" : ""),
    style: "background-color:" + colour(c.ns) + ";width:" + (100 * size / scale).toFixed(2) + "%",
    "data-ns": c.ns, "data-shard": shard, "data-size": size,
    title: c.ns + "  " + keyDoc(k.min) + " → " + keyDoc(k.max) + "\nversion " + k.version +
           " · " + bytes(size) + " (" + how + ")" + (k.jumbo ? " · jumbo" : "") });
}

// Which of a shard's chunks a card draws when it has more than CHUNKS_DRAWN_MAX: the moving
// and jumbo ones, then the collections in turn (each one's chunks in key order), so that no
// collection drops out of the picture; drawn in collection and key order.
function pickDrawn(mine, moving) {
  if (mine.length <= CHUNKS_DRAWN_MAX) return mine;
  const keep = new Set(mine.filter(([c, k]) => k.jumbo || moving.has(c.ns + "|" + keyDoc(k.min)))
                           .slice(0, CHUNKS_DRAWN_MAX));
  const byColl = new Map();
  for (const ck of mine) {
    if (!byColl.has(ck[0].ns)) byColl.set(ck[0].ns, []);
    byColl.get(ck[0].ns).push(ck);
  }
  for (let i = 0; keep.size < CHUNKS_DRAWN_MAX; i++)
    for (const list of byColl.values())
      if (i < list.length && keep.size < CHUNKS_DRAWN_MAX) keep.add(list[i]);
  return mine.filter(ck => keep.has(ck));
}

function drawShards(st, moving) {
  const shards = [...st.cluster.shards].sort((a, b) => naturally(a.name, b.name));
  const colls = st.collections.collections;
  // One width scale for every card: the largest chunk drawn spans a card.
  let scale = 1;
  for (const c of colls) for (const k of c.chunks) scale = Math.max(scale, num(k.sizeEstimate));
  const cards = shards.map(s => {
    const mine = [];
    for (const c of colls) for (const k of c.chunks) if (k.shard === s.name) mine.push([c, k]);
    const drawn = pickDrawn(mine, moving).map(([c, k]) => chunkBlock(c, k, s.name, scale, moving));
    const more = num(s.chunks) - drawn.length;
    return el("div", { class: "shard" + (s.reachable ? "" : " unreachable") + (s.draining ? " draining" : ""),
                       id: "shard-" + s.name, "data-shard": s.name, "data-chunks": num(s.chunks),
                       "data-reachable": s.reachable ? "1" : "0" },
      el("div", { class: "shard-head" },
        el("div", { class: "name" }, s.name),
        el("div", { class: "url" }, ...urlParts(s.url)),
        el("div", { class: "stats" }, el("b", { class: "nchunks" }, num(s.chunks)), " chunks · ",
           bytes(s.dataSize) + " · " + num(s.docCount).toLocaleString() + " docs"),
        el("div", {}, ...shardBadges(s))),
      el("div", { class: "shard-body" }, ...drawn,
         more > 0 ? el("span", { class: "more" }, "+" + more + " more") : null));
  });
  $("shards").replaceChildren(...cards);
  const t = st.collections;
  const note = $("truncated");
  note.hidden = !t.truncated;
  note.textContent = t.truncated ? "showing " + t.chunksReturned + " of " + num(t.chunksTotal) +
    " chunks (cap " + t.chunksMax + ")" : "";
}

// The arrows: one per migration in flight and per migration committed in the last
// RECENT_SHOWN_MS (faded by its age), from the donor's card to the recipient's, drawn on an
// SVG laid over the cards (it scrolls with them).
function drawArrows(migs, recent) {
  const wrap = $("board-cards"), over = $("arrows");
  const box = wrap.getBoundingClientRect();
  over.setAttribute("width", wrap.scrollWidth);
  over.setAttribute("height", wrap.scrollHeight);
  const defs = svg("defs");
  const head = svg("marker", { id: "head", viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
                               markerHeight: 7, orient: "auto-start-reverse" });
  head.append(svg("path", { d: "M0,0 L10,5 L0,10 z", class: "head" }));
  defs.append(head);
  const kids = [defs];
  // An arrow joins the middles of the two cards' top edges, bowed up into the gap above.
  const centre = (name) => {
    const c = $("shard-" + name);
    if (!c) return null;
    const r = c.getBoundingClientRect();
    return [r.left - box.left + wrap.scrollLeft + r.width / 2, r.top - box.top + wrap.scrollTop];
  };
  const arrow = (from, to, label, attrs, opacity) => {
    const a = centre(from), b = centre(to);
    if (!a || !b) return;
    // A curve bowed off the straight line into the gap above the cards, so two cards in one
    // row are not joined through their neighbours' names.
    const mx = (a[0] + b[0]) / 2, my = (a[1] + b[1]) / 2, dx = b[0] - a[0], dy = b[1] - a[1];
    const len = Math.hypot(dx, dy) || 1, bow = Math.min(36, len / 4);
    const up = -dx / len > 0 ? -1 : 1;   // the bow's side: upwards (or aside for one column)
    const cx = mx + up * dy / len * bow, cy = my - up * dx / len * bow;
    const g = svg("g", Object.assign({ class: attrs.class, "data-from": from, "data-to": to }, attrs.data));
    g.style.opacity = opacity;
    g.append(svg("path", { d: "M" + a[0] + "," + a[1] + " Q" + cx + "," + cy + " " + b[0] + "," + b[1],
                           class: "line", "marker-end": "url(#head)" }));
    const t = svg("text", { x: (mx + cx) / 2, y: (my + cy) / 2 - 4, "text-anchor": "middle" });
    t.textContent = label;
    g.append(t);
    kids.push(g);
  };
  for (const m of migs.filter(m => m.role === "donor"))
    arrow(m.from, m.to, m.ns + " · " + (STEP_WORDS[m.step] || m.step) + (m.heldAt ? " · held" : ""),
          { class: "mover", data: { "data-phase": m.step, "data-ns": m.ns } }, 1);
  const inflight = new Set(migs.map(m => m.ns + "|" + keyDoc(m.min)));
  for (const [r, age] of recent) {
    if (inflight.has(r.ns + "|" + keyDoc(r.min))) continue;
    arrow(r.from, r.to, r.ns + " · moved", { class: "mover recent", data: { "data-ns": r.ns } },
          0.25 + 0.5 * (1 - age / RECENT_SHOWN_MS));
  }
  over.replaceChildren(...kids);
}

// "held at moveChunkHangAtStep3 — end of step 3 (clone)": the failpoint fires at the end
// of step N, so the migration waits there (and the hold counts in step N's time).
function heldStep(m) {
  const n = /^moveChunkHangAtStep(\d)$/.exec(m.heldAt || "");
  return n ? Number(n[1]) : 0;
}

function drawMigration(m) {
  const n = num(m.stepNumber), held = heldStep(m);
  const total = num(m.docsToClone), done = num(m.docsCloned);
  const pct = total > 0 ? Math.round(done * 100 / total) : (n > 3 || n === 0 ? 100 : 0);
  const at = STEPS.findIndex(s => s[0] === m.step);
  return el("div", { class: "mig" + (held ? " is-held" : ""), "data-migration": m.migrationId,
                     "data-from": m.from, "data-to": m.to, "data-phase": m.step,
                     "data-step": n, "data-held-at": m.heldAt || null, "data-ns": m.ns },
    el("div", { class: "title" }, m.ns + "  " + (m.from || m.fromShardId) + " → " + m.to),
    el("div", { class: "kv" }, keyDoc(m.min) + " → " + keyDoc(m.max)),
    m.heldAt ? el("div", { class: "held" }, "held at " + m.heldAt +
      (held ? " — end of step " + held + " (" + STEP_BY_NUMBER[held] + ")" : "")) : null,
    el("div", { class: "steps" }, ...STEPS.slice(0, 7).map(([p, w, k], i) =>
      el("span", { class: (i < at ? "done" : i === at ? "now" : "") + (held && k === held ? " held" : ""),
                   "data-phase": p, title: k ? "step " + k + " of 6" : "" },
        (k ? k + " " : "") + w))),
    el("div", { class: "bar" }, el("i", { style: "width:" + pct + "%" })),
    el("div", { class: "kv" },
      done.toLocaleString() + " / " + total.toLocaleString() + " docs · " + bytes(m.bytesCloned) +
      " · " + num(m.modsPending) + " mods pending · " + Math.round(num(m.docsPerSec)) +
      " docs/s · elapsed " + ms(m.elapsedMS) + " · left ~" + ms(m.estimatedMSLeft) +
      (m.recipient ? " · recipient: " + m.recipient.state : "") +
      (m.role === "recipient" ? " · recipient: " + m.state + " (the donor did not answer)" : "")),
    n >= 4 ? el("div", { class: "kv pause" }, "write pause: writes to the range wait (steps 4–6)") : null);
}

// The migrations finished lately, each shown for RECENT_SHOWN_MS from the poll that first
// listed it (the server lists them for 5 s, so one poll a second sees each; counting from
// that poll keeps a move on screen for the whole time even when a poll came late).
const finished = new Map();   // key -> [entry, first seen (Date.now())]
const finishedShown = new Set();   // shown their time already, while the server still lists them
function recentMoves(list) {
  const now = Date.now(), listed = new Set();
  for (const r of list) {
    const key = r.ns + "|" + keyDoc(r.min) + "|" + JSON.stringify(r.committedAt);
    listed.add(key);
    if (!finished.has(key) && !finishedShown.has(key)) finished.set(key, [r, now]);
  }
  for (const [key, [, seen]] of finished)
    if (now - seen > RECENT_SHOWN_MS) { finished.delete(key); if (listed.has(key)) finishedShown.add(key); }
  for (const key of finishedShown) if (!listed.has(key)) finishedShown.delete(key);
  return [...finished.values()].map(([r, seen]) => [r, now - seen]);
}

function drawMigrations(mig, recent) {
  const inprog = mig.inprog || [];
  const errs = (mig.shardErrors || []).map(e =>
    el("p", { class: "kv", "data-shard-error": e.shard }, "shard " + e.shard + " did not answer"));
  const done = recent.map(([r, age]) => el("div", { class: "mig recent", "data-ns": r.ns, "data-from": r.from,
                                            "data-to": r.to },
    el("span", { class: "title" }, r.ns + "  " + r.from + " → " + r.to), " finished " + ms(num(r.agoMS) + age) +
    " ago · write pause " + (num(r.writePauseMS) >= 0 ? ms(r.writePauseMS) : "?")));
  if (!inprog.length && !done.length) {
    $("migrations").replaceChildren(el("p", { class: "muted" }, "none"), ...errs);
    return;
  }
  $("migrations").replaceChildren(...inprog.map(drawMigration), ...done, ...errs);
}

function drawBalancer(b) {
  const parts = [];
  parts.push(el("div", { class: "kv" }, "mode ", el("b", {}, b.mode || "?"), " · rounds ",
                num(b.numBalancerRounds), b.inBalancerRound ? " · in a round now" : ""));
  for (const e of b.explain || []) {
    const pol = e.policy || {};
    parts.push(el("div", { class: "verdict", "data-ns": e.ns, "data-verdict": e.verdict },
      el("span", { class: "ns" }, e.ns + ": "),
      e.verdictMessage || e.errmsg || "",
      pol.message ? el("div", { class: "kv" }, pol.message) : null,
      ...(pol.next || []).slice(0, 4).map(m => el("div", { class: "kv next" },
        "next: " + keyDoc(m.min) + " " + m.from + " → " + m.to + " (" + m.reason + ")"))));
  }
  if (b.explainSkipped) parts.push(el("p", { class: "kv" }, "explain skipped: " + b.explainSkipped));
  const r = (b.rounds || [])[0];
  if (r) {
    const d = r.details || {};
    const moves = d.migrations || [];
    parts.push(el("div", { class: "round", id: "last-round" },
      el("b", {}, "Last round "), when(r.time) + ": ",
      moves.length ? "moved " + num(d.chunksMoved) + " of " + moves.length + " chosen" : (d.why || "nothing to move"),
      ...moves.map(m => el("div", { class: "kv" }, m.ns + " " + keyDoc(m.min) + " " + m.from + " → " +
                                 m.to + " (" + m.reason + ")" + (m.ok ? "" : " failed: " + (m.errmsg || ""))))));
  }
  $("balancer").replaceChildren(...parts);
}

// The recipient's five timed steps (moveChunk.to); its states keep MongoDB's names.
const TO_STEPS = ["indexes + ready", "clone", "catchup", "steady", "commitStart (final drain + session records)"];
const SHADES = ["#4c6ef5", "#12b886", "#f59f00", "#c0392b"];

// The retryable-write records that moved with the chunk (session migration): the donor's
// count sent, the recipient's persisted, and the dead-end sentinels.
function sessionLine(d) {
  const sent = d.sessionRecordsSent, got = d.sessionRecords;
  if (sent === undefined && got === undefined) return null;
  const sentinels = num(d.sessionSentinelsSent !== undefined ? d.sessionSentinelsSent : d.sessionSentinels);
  return el("div", { class: "kv" }, "session records " + num(sent !== undefined ? sent : got) +
            (sentinels ? " · sentinels " + sentinels : "") +
            (d.sessionMigrationWaitMS !== undefined ? " · final pull waited " + num(d.sessionMigrationWaitMS) + " ms" : ""));
}

// The parts of a changelog entry's time bar: the donor's (moveChunk.from) steps 1–3 by
// name, then steps 4–6 as one part, the write pause (writePauseMS: the critical section,
// entered at step 4 and left at the end of step 6); the recipient's five steps by name.
function stepParts(what, d) {
  const keys = Object.keys(d).filter(k => /^step \d+ of \d+$/.test(k));
  if (what === "moveChunk.from") {
    const parts = keys.filter(k => parseInt(k.slice(5), 10) <= 3)
      .map(k => [STEP_BY_NUMBER[parseInt(k.slice(5), 10)], num(d[k]), k]);
    if ("writePauseMS" in d) parts.push(["write pause", num(d.writePauseMS), "steps 4–6 (critical section)"]);
    return parts;
  }
  return keys.map(k => [TO_STEPS[parseInt(k.slice(5), 10) - 1] || k, num(d[k]), k]);
}

function drawChangelog(entries) {
  $("changelog").replaceChildren(...entries.map(e => {
    const d = e.details || {};
    const parts = stepParts(e.what, d);
    const total = parts.reduce((a, p) => a + p[1], 0);
    const shade = (i, p) => p[0] === "write pause" ? SHADES[3] : SHADES[i % 3];
    return el("li", { "data-what": e.what },
      el("span", { class: "t" }, when(e.time)),
      el("span", { class: "what" }, e.what), " ", e.ns || "",
      d.from ? el("div", { class: "kv" }, d.from + " → " + d.to + (d.note ? " · " + d.note : "")) : null,
      parts.length ? el("div", { class: "stepbar", title: parts.map(p => p[2] + ": " + p[1] + " ms").join("\n") },
        ...parts.map((p, i) => el("i", { style: "background:" + shade(i, p) + ";width:" +
                                   (total ? p[1] * 100 / total : 0) + "%" }))) : null,
      parts.length ? el("div", { class: "kv steps-named" }, ...parts.map((p, i) =>
        el("span", { class: "step" + (p[0] === "write pause" ? " pause" : ""), title: p[2] },
          el("i", { class: "sw", style: "background:" + shade(i, p) }), p[0] + " " + p[1] + " ms"))) : null,
      e.what !== "moveChunk.from" && "writePauseMS" in d ? el("div", { class: "kv" }, "write pause ",
        el("span", { class: "pause" }, num(d.writePauseMS) + " ms")) : null,
      sessionLine(d));
  }));
}

function draw(st) {
  const migs = st.migrations.inprog || [];
  const moving = new Set(migs.filter(m => m.role === "donor").map(m => m.ns + "|" + keyDoc(m.min)));
  const colls = st.collections.collections;
  colours = new Map([...colls.map(c => c.ns)].sort().map((ns, i) => [ns, colourAt(i)]));
  drawSummary(st);
  drawLegend();
  drawShards(st, moving);
  const recent = recentMoves(st.migrations.recent || []);
  drawArrows(migs, recent);
  drawMigrations(st.migrations, recent);
  drawCollections(colls);
  drawBalancer(st.balancer || {});
  drawChangelog((st.changelog || {}).entries || []);
}

async function poll() {
  try {
    const r = await fetch("/api/state", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const st = await r.json();
    draw(st);
    lastOk = Date.now();
    document.body.dataset.state = "live";
    $("status").textContent = "live";
    $("updated").textContent = "updated " + new Date().toLocaleTimeString() + " · build " +
      num(st.buildMS) + " ms";
  } catch (e) {
    document.body.dataset.state = "reconnecting";
    $("status").textContent = "reconnecting…";
    $("updated").textContent = lastOk ? "last update " + new Date(lastOk).toLocaleTimeString() : "";
  }
  setTimeout(poll, POLL_MS);
}

poll();
