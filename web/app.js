// minishard's live web view (web/index.html): polls the config server's /api/state once a
// second and redraws. Shards are columns; each collection's chunks are blocks in key order,
// sized by their data and coloured by collection; a migration in flight is a block moving
// between its donor's and recipient's columns. When a poll fails the page says it is
// reconnecting and keeps polling, so it recovers by itself when the config server is back.
// Elements carry ids and data- attributes (data-shard, data-ns, data-chunks, data-phase...)
// for tests/integration/test_webview.py, which reads the DOM from headless chromium.
"use strict";

const POLL_MS = 1000;
const STEPS = ["clone", "catch-up", "critical section", "commit", "range deletion"];
const $ = (id) => document.getElementById(id);
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

// A stable colour per collection: its name hashed onto a palette of distinct hues.
const PALETTE = ["#4c6ef5", "#12b886", "#f59f00", "#e64980", "#7950f2", "#15aabf",
                 "#82c91e", "#fd7e14", "#be4bdb", "#228be6"];
function colour(ns) {
  let h = 0;
  for (const c of ns) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return PALETTE[h % PALETTE.length];
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

function drawLegend(colls) {
  $("legend").replaceChildren(
    ...colls.map(c => el("span", { "data-ns": c.ns },
      el("i", { class: "sw", style: "background:" + colour(c.ns) }), c.ns,
      el("span", { class: "muted" }, " " + num(c.chunkCount) + " chunks"))),
    el("span", {}, el("i", { class: "sw jumbo" }), "jumbo"),
    el("span", {}, el("i", { class: "sw moving" }), "being moved"));
}

function drawShards(st, moving) {
  const shards = st.cluster.shards, colls = st.collections.collections;
  // Heights share one scale across columns: the fullest shard's data fills ~420 px.
  let fullest = 1;
  const perShard = {};
  for (const s of shards) perShard[s.name] = 0;
  for (const c of colls) for (const k of c.chunks)
    if (k.shard in perShard) perShard[k.shard] += num(k.sizeEstimate);
  for (const v of Object.values(perShard)) fullest = Math.max(fullest, v);
  const cols = shards.map(s => {
    const badges = [];
    if (!s.reachable) badges.push(el("span", { class: "badge bad" }, "unreachable"));
    if (s.draining) badges.push(el("span", { class: "badge warn" }, "draining"));
    for (const z of s.zones || []) badges.push(el("span", { class: "badge" }, "zone " + z));
    if (s.maxSizeMB !== null && s.maxSizeMB !== undefined)
      badges.push(el("span", { class: "badge" }, "maxSize " + num(s.maxSizeMB) + " MB"));
    const groups = colls.map(c => {
      const mine = c.chunks.filter(k => k.shard === s.name);
      if (!mine.length) return null;
      return el("div", { class: "group", "data-ns": c.ns },
        el("div", { class: "group-label" }, c.ns + " · " + mine.length),
        ...mine.map(k => {
          const size = num(k.sizeEstimate);
          const h = Math.max(4, Math.round(size / fullest * 420));
          const mv = moving.has(c.ns + "|" + keyDoc(k.min));
          // A block tall enough for a line says where its range starts (hover: all of it).
          return el("div", {
            class: "chunk" + (k.jumbo ? " jumbo" : "") + (mv ? " moving" : ""),
            style: "background:" + colour(c.ns) + ";height:" + h + "px",
            "data-ns": c.ns, "data-shard": s.name,
            title: c.ns + "  " + keyDoc(k.min) + " → " + keyDoc(k.max) + "\nversion " +
                   k.version + " · ~" + bytes(size) + (k.jumbo ? " · jumbo" : "") },
            h >= 18 ? el("span", { class: "key" }, "≥ " + keyDoc(k.min)) : null);
        }));
    });
    return el("div", { class: "shard" + (s.reachable ? "" : " unreachable") + (s.draining ? " draining" : ""),
                       id: "shard-" + s.name, "data-shard": s.name, "data-chunks": num(s.chunks),
                       "data-reachable": s.reachable ? "1" : "0" },
      el("div", { class: "shard-head" },
        el("div", { class: "name" }, s.name),
        el("div", { class: "url" }, s.url),
        el("div", { class: "stats" }, el("b", { class: "nchunks" }, num(s.chunks)), " chunks · ",
           bytes(s.dataSize) + " · " + num(s.docCount).toLocaleString() + " docs"),
        el("div", {}, ...badges)),
      el("div", { class: "shard-body" }, ...groups.filter(Boolean)));
  });
  $("shards").replaceChildren(...cols);
  const t = st.collections;
  const note = $("truncated");
  note.hidden = !t.truncated;
  note.textContent = t.truncated ? "showing " + t.chunksReturned + " of " + num(t.chunksTotal) +
    " chunks (cap " + t.chunksMax + ")" : "";
}

// The moving blocks: one per migration, placed between its donor's and recipient's column
// centres by its progress (clone fraction, then the later steps).
function drawLane(migs) {
  const lane = $("lane");
  const board = lane.parentElement.getBoundingClientRect();
  const donors = migs.filter(m => m.role === "donor");
  lane.classList.toggle("busy", donors.length > 0);
  const keep = new Set();
  donors.forEach((m, i) => {
    const id = "mover-" + (m.migrationId || i);
    keep.add(id);
    const a = $("shard-" + m.from), b = $("shard-" + m.to);
    if (!a || !b) return;
    const ra = a.getBoundingClientRect(), rb = b.getBoundingClientRect();
    const xa = ra.left + ra.width / 2 - board.left, xb = rb.left + rb.width / 2 - board.left;
    const si = Math.max(0, STEPS.indexOf(m.step));
    const clone = num(m.docsToClone) > 0 ? num(m.docsCloned) / num(m.docsToClone) : 1;
    const frac = si === 0 ? 0.6 * clone : Math.min(1, 0.6 + 0.1 * si);
    let mv = $(id);
    if (!mv) {
      mv = el("div", { class: "mover", id });
      mv.style.left = xa + "px";
      lane.append(mv);
    }
    mv.dataset.from = m.from; mv.dataset.to = m.to; mv.dataset.phase = m.step;
    mv.replaceChildren(el("i", { class: "blk", style: "background:" + colour(m.ns) }),
      m.from + " → " + m.to + " · " + m.step);
    requestAnimationFrame(() => { mv.style.left = (xa + (xb - xa) * frac) + "px"; });
    let tr = $("track-" + id);
    if (!tr) { tr = el("div", { class: "track", id: "track-" + id }); lane.append(tr); }
    tr.style.left = Math.min(xa, xb) + "px"; tr.style.width = Math.abs(xb - xa) + "px";
  });
  for (const c of [...lane.children])
    if (!keep.has(c.id) && !keep.has(c.id.replace(/^track-/, ""))) c.remove();
}

function drawMigrations(mig) {
  const donors = (mig.inprog || []);
  const errs = (mig.shardErrors || []).map(e =>
    el("p", { class: "kv", "data-shard-error": e.shard }, "shard " + e.shard + " did not answer"));
  if (!donors.length) {
    $("migrations").replaceChildren(el("p", { class: "muted" }, "none"), ...errs);
    return;
  }
  $("migrations").replaceChildren(...donors.map(m => {
    const si = STEPS.indexOf(m.step);
    const total = num(m.docsToClone), done = num(m.docsCloned);
    const pct = total > 0 ? Math.round(done * 100 / total) : (si > 0 ? 100 : 0);
    return el("div", { class: "mig", "data-migration": m.migrationId, "data-from": m.from,
                       "data-to": m.to, "data-phase": m.step, "data-ns": m.ns },
      el("div", { class: "title" }, m.ns + "  " + (m.from || m.fromShardId) + " → " + m.to),
      el("div", { class: "kv" }, keyDoc(m.min) + " → " + keyDoc(m.max)),
      el("div", { class: "steps" }, ...STEPS.map((s, i) =>
        el("span", { class: i < si ? "done" : i === si ? "now" : "" }, s))),
      el("div", { class: "bar" }, el("i", { style: "width:" + pct + "%" })),
      el("div", { class: "kv" },
        done.toLocaleString() + " / " + total.toLocaleString() + " docs · " + bytes(m.bytesCloned) +
        " · " + num(m.modsPending) + " mods pending · " + Math.round(num(m.docsPerSec)) +
        " docs/s · elapsed " + ms(m.elapsedMS) + " · left ~" + ms(m.estimatedMSLeft) +
        (m.recipient ? " · recipient " + m.recipient.state : "")));
  }), ...errs);
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

// What each timed step of a migration is (docs/how-a-migration-works.md): the donor's six
// (moveChunk.from, MigrationSourceManager) and the recipient's five (moveChunk.to).
const STEP_NAMES = {
  "moveChunk.from": ["checks", "start clone", "clone + catch-up", "critical section",
                     "commit on recipient", "commit on config"],
  "moveChunk.to": ["indexes + ready", "clone", "catch-up", "steady",
                   "commit (final drain + session records)"],
};

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

// A migration's step times as one bar (each step's share of the total), each step named
// with its colour, and the write pause.
function drawChangelog(entries) {
  const shades = ["#4c6ef5", "#12b886", "#f59f00", "#e64980", "#7950f2", "#15aabf"];
  $("changelog").replaceChildren(...entries.map(e => {
    const d = e.details || {};
    const steps = Object.keys(d).filter(k => /^step \d+ of \d+$/.test(k));
    const total = steps.reduce((a, k) => a + num(d[k]), 0);
    return el("li", { "data-what": e.what },
      el("span", { class: "t" }, when(e.time)),
      el("span", { class: "what" }, e.what), " ", e.ns || "",
      d.from ? el("div", { class: "kv" }, d.from + " → " + d.to + (d.note ? " · " + d.note : "")) : null,
      steps.length ? el("div", { class: "stepbar", title: steps.map(k => k + ": " + num(d[k]) + " ms").join("\n") },
        ...steps.map((k, i) => el("i", { style: "background:" + shades[i % 6] + ";width:" +
                                   (total ? num(d[k]) * 100 / total : 0) + "%" }))) : null,
      steps.length ? el("div", { class: "kv steps-named" }, ...steps.map((k, i) => {
        const names = STEP_NAMES[e.what] || [];
        const n = parseInt(k.slice(5), 10);
        return el("span", { class: "step", title: k },
          el("i", { class: "sw", style: "background:" + shades[i % 6] }),
          (names[n - 1] || k) + " " + num(d[k]) + " ms");
      })) : null,
      sessionLine(d),
      "writePauseMS" in d ? el("div", { class: "kv" }, "write pause ",
                               el("span", { class: "pause" }, num(d.writePauseMS) + " ms")) : null);
  }));
}

function draw(st) {
  const migs = st.migrations.inprog || [];
  const moving = new Set(migs.filter(m => m.role === "donor").map(m => m.ns + "|" + keyDoc(m.min)));
  drawSummary(st);
  drawLegend(st.collections.collections);
  drawShards(st, moving);
  drawLane(migs);
  drawMigrations(st.migrations);
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
