"""
history.py — the chaos soak's checker (tests/chaos/soak.py drives it): a Jepsen-style model
of what clients were told, fed by the workload threads as each operation starts and ends,
and the checks that compare the cluster with it — during the run (every read) and once the
system has gone quiet (the final state).

The per-document model (collection app.docs). Each document belongs to one workload thread,
which runs one operation on it at a time, so a document's history is a line. Its state is
the set of values it may hold now: None (absent) or the unique value last written. An
acknowledged write makes the state one value; a write whose outcome the client cannot know
(a network error, a timeout, a killed router, any error reply — "maybe") adds its value to
the set and retires the document: a write the client gave up on may still be applied later
(a router stopped with SIGSTOP resumes it), so nothing is written to it again, and the final
state must be one of the set. A read of a document with no operation in flight must return
exactly its one value.

Retryable writes (lsid + txnNumber; soak.py sends part of the single-document writes and
some batches that way and resends an ambiguous one as is until it gets a definite answer):
one that got a definite answer — on its first try or any resend — was applied exactly once,
so it is not "maybe": each document's state becomes exactly the value one execution gives
(the updates and findAndModify $inc, so a second execution shows in the final value), and
the answer must be the one a single execution gives (rw_outcome: an insert resent answers
n: 1, not DuplicateKey; findAndModify answers the document before the one execution). A
resend answered IncompleteTransactionHistory (217) or TransactionTooOld (225) is a
legitimate outcome that says nothing about whether it ran: "maybe", counted and listed.

Counters (app.ctr, a fixed set of documents): every acknowledged updateMany {$inc: {c: 1}}
over a range of them must have matched every document of the range once (n, nModified) and
show up exactly once in each: acked <= c <= acked + maybe. Batches (app.del): an
acknowledged insert of a batch then an acknowledged deleteMany of it must report n equal to
the batch and leave none of it.

Scans (find over every shard, count, distinct, aggregate): no _id twice in one result;
every document that was present and had no operation started on it from the scan's start to
its end is in the result with its value; no document known absent (with no operation in
flight) is. app.ctr's membership never changes, so every count / scan / distinct /
aggregate of it must say exactly N_CTR.

Anomalies are collected (never raised from a workload thread) with a time and the names
they concern; the soak prints them with the seed and log lines around them.
"""
import threading
import time

ABSENT = None


class Anomaly:
    def __init__(self, t, what, keys=()):
        self.t = t
        self.what = what
        self.keys = list(keys)     # strings to look for in process logs (ids, ns, process names)

    def __str__(self):
        return "t=%.1f %s" % (self.t, self.what)


# Reply codes of a retryable write: the two legitimate "cannot tell" answers, and those no
# resend of a write that ran once may give (DuplicateKey: an insert ran twice; the rest: the
# command itself is wrong) — any other error leaves the outcome open, so the write is resent.
INCOMPLETE_HISTORY = 217
TXN_TOO_OLD = 225
NEVER_ON_RESEND = {2: "BadValue", 9: "FailedToParse", 14: "TypeMismatch", 72: "InvalidOptions",
                   11000: "DuplicateKey"}


def rw_outcome(kind, r, want):
    """What one reply to a retryable write says: ("ok", None) — the definite answer, equal to
    what a single execution answers (want: {"n": N} for insert/update/delete, {"value": v}
    for findAndModify, v the document's value before or ABSENT); ("217" | "225", None);
    ("retry", code) — ambiguous (a network error, a timeout, a killed process, any other
    error): resend it; ("wrong", text) — an answer no single execution gives."""
    codes = [e.get("code") for e in r.get("writeErrors") or []]
    if r.get("ok") != 1:
        codes = [r.get("code")]
    for bad in NEVER_ON_RESEND:
        if bad in codes:
            return "wrong", "%s %s" % (NEVER_ON_RESEND[bad], _short(r))
    for legit in (INCOMPLETE_HISTORY, TXN_TOO_OLD):
        if legit in codes:
            return str(legit), None
    if codes:
        return "retry", codes[0] if codes[0] is not None else "no reply"
    if kind == "fam":
        pre = r.get("value")
        got = pre.get("v") if pre else ABSENT
        if got != want["value"]:
            return "wrong", "value before %s, one execution answers %s" % (_fmt(got), _fmt(want["value"]))
        return "ok", None
    n = _num(r.get("n"))
    if n != want["n"] or (kind == "update" and _num(r.get("nModified")) != want["n"]):
        return "wrong", "n=%s nModified=%s, one execution answers n=%d" % (r.get("n"), r.get("nModified"), want["n"])
    return "ok", None


def _num(v):
    if isinstance(v, dict):
        v = next(iter(v.values()), None)
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return None


def _short(r):
    return str({k: r[k] for k in ("code", "codeName", "writeErrors", "errmsg") if k in r})[:200]


class Doc:
    """One document of app.docs. Guarded by History.lock."""
    __slots__ = ("id", "k", "states", "busy", "retired", "seq", "rw_tries")

    def __init__(self, _id, k):
        self.id = _id
        self.k = k
        self.states = {ABSENT}     # values it may hold; one element when known
        self.busy = False          # an operation is in flight
        self.retired = False       # an ambiguous outcome: no further writes
        self.seq = 0               # operations started on it so far
        self.rw_tries = 0          # its last write was retryable, answered on this try (0: not)

    def known(self):
        """Its one value when known for sure and nothing in flight, else a marker."""
        if self.busy or len(self.states) != 1:
            return "?"
        return next(iter(self.states))


class History:
    def __init__(self, t0, n_ctr):
        self.t0 = t0
        self.lock = threading.Lock()
        self.docs = {}             # _id -> Doc
        self.anomalies = []
        self.n_ctr = n_ctr
        self.ctr_acked = [0] * n_ctr
        self.ctr_maybe = [0] * n_ctr
        self.batches = {}          # batch id -> "inserted" | "maybe" | "deleted" | "deleteMaybe"
        self.batch_ids = {}        # batch id -> list of _ids
        self.stats = {"acked": 0, "maybe": 0, "reads": 0, "scans": 0, "ctr_acked": 0,
                      "ctr_maybe": 0, "batches_deleted": 0,
                      "rw_once": 0, "rw_retried": 0, "rw_resends": 0, "rw_217": 0, "rw_225": 0,
                      "rw_unresolved": 0, "rw_wrong": 0}
        self.rw_legit = []         # "t=... op on ids: 217" lines, printed by the report
        self.rw_codes = {}         # code -> ambiguous answers that led to a resend

    def now(self):
        return time.monotonic() - self.t0

    def anomaly(self, what, keys=()):
        with self.lock:
            self.anomalies.append(Anomaly(self.now(), what, keys))

    # ---- single documents -----------------------------------------------------------

    def new_doc(self, _id, k):
        with self.lock:
            d = Doc(_id, k)
            self.docs[_id] = d
            return d

    def begin(self, d):
        """An operation on d starts; returns its value before (known: d is not busy)."""
        with self.lock:
            assert not d.busy and not d.retired, d.id
            d.busy = True
            d.seq += 1
            return next(iter(d.states))

    def end(self, d, outcome, value, op):
        """outcome: "ok" (the state is now value), "maybe" (value or the old one)."""
        with self.lock:
            d.busy = False
            if outcome == "ok":
                d.states = {value}
                self.stats["acked"] += 1
            else:
                d.states = d.states | {value}
                d.retired = True
                self.stats["maybe"] += 1
            d.rw_tries = 0

    def end_retryable(self, writes, outcome, op, tries):
        """A retryable write ends. writes: [(doc, value one execution leaves)]; outcome: "ok"
        (a definite answer on try number tries: applied exactly once, each state is now
        exactly its value), "217" / "225" (the legitimate answers: maybe), "wrong" (an
        answer no single execution gives, already reported: maybe) or "maybe" (no definite
        answer before the run ended)."""
        with self.lock:
            for d, value in writes:
                d.busy = False
                if outcome == "ok":
                    d.states = {value}
                    d.rw_tries = tries
                else:
                    d.states = d.states | {value}
                    d.retired = True
                    d.rw_tries = 0
            st = self.stats
            if outcome == "ok":
                st["rw_once"] += 1
                st["rw_retried"] += tries > 1
                st["rw_resends"] += tries - 1
            else:
                st["rw_" + ("unresolved" if outcome == "maybe" else outcome)] += 1
                if outcome in ("217", "225"):
                    self.rw_legit.append("t=%.1f %s on %s answered %s after %d tries" % (
                        self.now(), op, ",".join(str(d.id) for d, _ in writes), outcome, tries))
            st["acked" if outcome == "ok" else "maybe"] += len(writes)   # per document, as end()

    def resent(self, code):
        with self.lock:
            self.rw_codes[code] = self.rw_codes.get(code, 0) + 1

    def wrong(self, d, op, expected, got):
        self.anomaly("%s on %s: expected %s, got %s" % (op, d.id, _fmt(expected), _fmt(got)),
                     [str(d.id)])

    # ---- scans ----------------------------------------------------------------------

    def scan_start(self):
        """Snapshot of every document whose value is known: {_id: (seq, value)}."""
        with self.lock:
            self.stats["scans"] += 1
            return {i: (d.seq, d.known()) for i, d in self.docs.items() if d.known() != "?"}

    def scan_check(self, snap, docs, where):
        """docs: the result of a complete scan of app.docs begun after scan_start."""
        seen = {}
        for x in docs:
            i = x.get("_id")
            if i in seen:
                self.anomaly("%s: _id %s returned twice" % (where, i), [str(i)])
            seen[i] = x
        with self.lock:
            stable = {i: v for i, (seq, v) in snap.items()
                      if self.docs[i].seq == seq and not self.docs[i].busy}
        for i, v in stable.items():
            got = seen.get(i)
            if v is ABSENT and got is not None:
                self.anomaly("%s: returned %s, deleted (acknowledged) before the scan" % (where, i), [str(i)])
            elif v is not ABSENT and got is None:
                self.anomaly("%s: missing %s (v=%s, acknowledged before the scan, untouched during it)"
                             % (where, i, v), [str(i)])
            elif v is not ABSENT and got.get("v") != v:
                self.anomaly("%s: %s has v=%s, last acknowledged v=%s" % (where, i, got.get("v"), v), [str(i)])

    # ---- counters -------------------------------------------------------------------

    def ctr_end(self, lo, hi, outcome):
        with self.lock:
            for i in range(lo, hi):
                if outcome == "ok":
                    self.ctr_acked[i] += 1
                else:
                    self.ctr_maybe[i] += 1
            self.stats["ctr_acked" if outcome == "ok" else "ctr_maybe"] += 1

    # ---- final state ----------------------------------------------------------------

    def check_final_docs(self, docs, where):
        """docs: every document of app.docs read once the system is quiet."""
        seen = {}
        for x in docs:
            i = x.get("_id")
            if i in seen:
                self.anomaly("final %s: _id %s twice" % (where, i), [str(i)])
            seen[i] = x
        with self.lock:
            model = dict(self.docs)
        checked = 0
        for i, d in model.items():
            got = seen.pop(i, None)
            v = ABSENT if got is None else got.get("v")
            if v not in d.states:
                once = ("" if not d.rw_tries else
                        " (its last write was retryable, answered on try %d: applied exactly once)" % d.rw_tries)
                self.anomaly("final %s: %s is %s; the clients were told %s%s" % (
                    where, i, "absent" if got is None else "v=%s" % v, _fmt_states(d.states), once), [str(i)])
            checked += 1
        for i in seen:
            self.anomaly("final %s: %s present, never written by a client" % (where, i), [str(i)])
        return checked

    def check_final_ctr(self, docs, where):
        by_id = {x.get("_id"): x for x in docs}
        if len(docs) != self.n_ctr or len(by_id) != self.n_ctr:
            self.anomaly("final %s: app.ctr has %d documents (%d distinct), expected %d" % (
                where, len(docs), len(by_id), self.n_ctr), ["app.ctr"])
        for i in range(self.n_ctr):
            x = by_id.get(i)
            if x is None:
                continue
            c = int(x.get("c", 0))
            lo, hi = self.ctr_acked[i], self.ctr_acked[i] + self.ctr_maybe[i]
            if not lo <= c <= hi:
                self.anomaly("final %s: counter %d is %d, acknowledged updateManys %d, ambiguous %d" % (
                    where, i, c, lo, self.ctr_maybe[i]), ["app.ctr"])

    def check_final_batches(self, docs, where):
        by_batch = {}
        for x in docs:
            by_batch.setdefault(x.get("b"), []).append(x.get("_id"))
        for b, state in self.batches.items():
            have = sorted(by_batch.get(b, []), key=str)
            want = sorted(self.batch_ids[b], key=str)
            if state == "deleted" and have:
                self.anomaly("final %s: batch %s deleted (deleteMany acknowledged) but %d documents remain"
                             % (where, b, len(have)), ["b%d-" % b])
            if state == "inserted" and have != want:
                self.anomaly("final %s: batch %s inserted (acknowledged) but has %d of %d documents"
                             % (where, b, len(have), len(want)), ["b%d-" % b])


def _fmt(v):
    return "absent" if v is ABSENT else "v=%s" % v


def _fmt_states(states):
    return " or ".join(sorted(_fmt(v) for v in states))


def tiles(chunks):
    """Whether chunks (config.chunks documents of one collection, bounds as extended JSON)
    tile [MinKey, MaxKey): a chain from the MinKey bound through each max to MaxKey that uses
    every chunk once. Returns None or a description of the first fault found."""
    import json
    key = lambda b: json.dumps(b, sort_keys=True)   # noqa: E731
    by_min = {}
    for c in chunks:
        if key(c["min"]) in by_min:
            return "two chunks start at %s" % key(c["min"])
        by_min[key(c["min"])] = c
    lo = [c for c in chunks if all(isinstance(v, dict) and "$minKey" in v for v in c["min"].values())]
    if len(lo) != 1:
        return "%d chunks start at MinKey" % len(lo)
    cur, used = lo[0], 0
    for _ in range(len(chunks) + 1):
        used += 1
        if all(isinstance(v, dict) and "$maxKey" in v for v in cur["max"].values()):
            break
        nxt = by_min.get(key(cur["max"]))
        if nxt is None:
            return "gap after %s" % key(cur["max"])
        cur = nxt
    if used != len(chunks):
        return "%d chunks on the chain from MinKey to MaxKey, %d in config.chunks" % (used, len(chunks))
    return None
