/*
 * rt_write.c — writes through the router (MongoDB's BatchWriteExec and write targeter,
 * notes §8.3), run by bin/router. A client batch is split per shard and the pieces are
 * sent in parallel, each with that shard's version; replies are merged with the client's
 * op indexes (n, nModified, upserted, writeErrors). Ordered batches go as consecutive runs
 * of ops with one target, in client order, and stop at the first error; unordered batches
 * go to every shard at once. The sends and the StaleConfig / StaleDbVersion retries are
 * rt_dispatch's (rt_retry.c), as for every targeted request of the router: each round (an
 * ordered run, or the whole unordered batch) is one rt_dispatch whose build (wb_build)
 * sends only the ops not yet done and whose absorb (wb_absorb) records every shard's
 * answer of every attempt, also of one that is retried — what a shard applied is never
 * sent to it again. Stale (whole reply or per op) never reaches the client while retries
 * remain: the collection is refreshed and only the ops not applied are re-targeted.
 * Which shards an op must still reach and which applied it are sets of shard NAMES (bits
 * over a per-command list that only grows), never routing-table indexes: a refresh may
 * number the shards differently, and a shard that applied an op must not get it again.
 * Each op is targeted once per routing table (and primary): its targets are kept with
 * the table they came from, and only a new table makes them be computed again; an
 * ordered batch targets lazily, as far as the run it sends next. A multi op (updateMany,
 * deleteMany) on a sharded collection is tracked by the key ranges it has still to write
 * rather than by shards, and once part of it was applied each shard gets it narrowed to
 * its ranges ($_shardKeyRanges), so it writes every document once across a migration
 * ("multi-writes" below).
 *   insert: the shard owning the document's shard key (missing → null; array → error);
 *   update: upsert needs the exact shard key; multi:false needs the shard key, the exact
 *           _id (broadcast) or a replacement whose key targets one shard; updates that
 *           would change shard-key fields are refused (ImmutableField; a replacement
 *           without _id keeps the document's _id, so that is no change of an _id key);
 *           what the shard refuses in a statement (pipeline, arrayFilters, operators its
 *           compiler rejects) gets the shard's own error, never one of ours first;
 *   delete: limit:1 needs the shard key or the exact _id; otherwise by query;
 *   findAndModify: the shard key must be in the query.
 * A shard's write error keeps its errmsg and its extra fields (DuplicateKey's keyPattern,
 * keyValue), in writeErrors and in findAndModify's error reply, as mongos passes them on.
 * maxTimeMS: each attempt starts only while time is left, and MaxTimeMSExpired from a shard
 * (or the router's own deadline passing) fails the whole command with code 50, as a
 * mongod fails a write batch on an interruption; what shards wrote before stays written.
 * Retryable writes (lsid + txnNumber): every shard's piece carries the stmtIds of its own
 * statements (the client's stmtIds, or the statement's index in the client's batch), the
 * same ones on every resend; a piece that fails with a network or retryable error is sent
 * again (bounded: rt_write_retry_wait), since the shard's record answers what it applied;
 * when the router gives up, the command fails with that error at top level, which the
 * driver retries as a whole (docs/wire-protocol.md "Retryable writes").
 */
#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/bsonx.h"
#include "common/expr.h"
#include "common/krange.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/update.h"
#include "router/router.h"

enum wkind { W_INSERT, W_UPDATE, W_DELETE };

/* Targets and done sets are uint64_t bitmasks over the command's shard names. */
_Static_assert(MS_SHARDS_MAX <= 64, "shard sets are 64-bit masks");
enum wstate { OP_PENDING, OP_DONE, OP_ERROR };

/* Kept small (no bson_t, no inline message): a batch holds up to 100,000 of these, and
 * fresh pages cost a fault each. */
typedef struct wop {
    const uint8_t *data;   /* the op document: a view into the request */
    uint32_t len;
    enum wstate state;
    uint32_t gen;          /* the targeting generation targets was computed in (0: never) */
    uint64_t targets;      /* shards still to send to (bits of wnames_t) */
    uint64_t done;         /* shards that applied it (bits of wnames_t) */
    int code;
    char *msg;             /* caller owns (freed with the batch); NULL until an error */
    bson_t *extra;         /* the shard's writeError fields beyond index/code/codeName/errmsg
                            * (DuplicateKey's keyPattern, keyValue): caller owns, freed with
                            * the batch; NULL when there are none */
    bool multi;            /* update multi: true / delete limit: 0 */
    struct mwrite *mw;     /* a multi op on a sharded collection: the key ranges it still has
                            * to write (see mwrite_t); caller owns, freed with the batch;
                            * NULL until it is first targeted with a sharded table */
} wop_t;

/* The shard names one command has met, in the order met; an index here never changes
 * (a routing table's own shard numbering may, from one refresh to the next). */
typedef struct wnames {
    int n;
    char name[MS_SHARDS_MAX][RT_NAME_BYTES_MAX];
} wnames_t;

/* What the ops are targeted with: the table (one reference held, so that a new table
 * is told apart by its address), the primary for an unsharded one, and the maps between
 * the table's shard indexes and the name bits. gen grows with each new table/primary. */
typedef struct wtarget {
    rt_table_t *t;                  /* caller owns one reference; NULL before the first */
    char primary[RT_NAME_BYTES_MAX];
    uint32_t gen;
    int primary_bit;                /* unsharded: the primary's name bit */
    int bit_of[MS_SHARDS_MAX];      /* table shard index → name bit */
    int idx_of[MS_SHARDS_MAX];      /* name bit → table shard index, -1 when not in it */
} wtarget_t;

/* The bit of name, appended when new; -1 when the command has met MS_SHARDS_MAX. */
static int name_bit(wnames_t *nm, const char *name) {
    for (int i = 0; i < nm->n; i++)
        if (strcmp(nm->name[i], name) == 0) return i;
    if (nm->n >= MS_SHARDS_MAX) return -1;
    snprintf(nm->name[nm->n], RT_NAME_BYTES_MAX, "%s", name);
    return nm->n++;
}

/* Makes t (borrowed; a reference is taken when it is new) the table of this attempt. A
 * table other than the one held (or another primary) starts a new generation: maps
 * rebuilt, every pending op targeted again when next looked at. */
static int wt_adopt(wtarget_t *w, wnames_t *nm, const rt_table_t *t, const char *primary,
                    ms_error_t *err) {
    if (t == w->t) {
        if (t->sharded || strcmp(primary, w->primary) == 0) return 0;
    } else {
        rt_table_release(w->t);
        w->t = rt_table_hold(t);
    }
    w->gen++;
    snprintf(w->primary, sizeof w->primary, "%s", primary);
    for (int i = 0; i < MS_SHARDS_MAX; i++) w->idx_of[i] = -1;
    if (!t->sharded) {
        w->primary_bit = name_bit(nm, primary);
        if (w->primary_bit < 0) goto full;
        return 0;
    }
    for (int i = 0; i < t->rt.nshards; i++) {
        int b = name_bit(nm, t->rt.shards[i]);
        if (b < 0) goto full;
        w->bit_of[i] = b;
        w->idx_of[b] = i;
    }
    return 0;
full:
    return err_set(err, MS_ERR_INTERNAL, "write command met more than %d shard names",
                   MS_SHARDS_MAX);
}

/* A bson_t view of the op document (static: valid while the request is). */
static void op_view(const wop_t *op, bson_t *out) {
    bool ok = bson_init_static(out, op->data, op->len);
    ASSERT(ok);   /* the request was validated as a whole by dispatch */
}

static void op_set_msg(wop_t *op, const char *msg) {
    free(op->msg);
    op->msg = strdup(msg ? msg : "");
    ASSERT(op->msg);
}

static const char *ops_field(enum wkind k) {
    return k == W_INSERT ? "documents" : k == W_UPDATE ? "updates" : "deletes";
}

/* Appends src's fields other than the status ones (ok, code, codeName, errmsg, index) to
 * dst: what a shard put beside an error (keyPattern, keyValue) goes to the client as is,
 * as mongos passes it on. Returns how many it appended. */
static int append_error_extra(const bson_t *src, bson_t *dst) {
    bson_iter_t it;
    int n = 0;
    if (!bson_iter_init(&it, src)) return 0;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (!strcmp(k, "ok") || !strcmp(k, "code") || !strcmp(k, "codeName") ||
            !strcmp(k, "errmsg") || !strcmp(k, "index"))
            continue;
        bson_append_iter(dst, k, -1, &it);
        n++;
    }
    return n;
}

static void op_clear_extra(wop_t *op) {
    if (op->extra) bson_destroy(op->extra);
    op->extra = NULL;
}

/* Keeps a shard writeError's extra fields for the client's reply. Borrows werr. */
static void op_set_extra(wop_t *op, const bson_t *werr) {
    op_clear_extra(op);
    bson_t *x = bson_new();
    if (append_error_extra(werr, x)) op->extra = x;
    else bson_destroy(x);
}

static void op_fail(wop_t *op, const ms_error_t *e) {
    op->state = OP_ERROR;
    op->code = e->code;
    op_set_msg(op, e->msg);
    op_clear_extra(op);
}

static bool get_sub(const bson_t *d, const char *key, bson_t *out) {
    bson_iter_t it;
    uint32_t len;
    const uint8_t *data;
    if (!bson_iter_init_find(&it, d, key)) return false;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it) && !BSON_ITER_HOLDS_ARRAY(&it)) return false;
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) bson_iter_document(&it, &len, &data);
    else bson_iter_array(&it, &len, &data);
    return bson_init_static(out, data, len);
}

static bool flag_of(const bson_t *d, const char *key) {
    bson_iter_t it;
    return bson_iter_init_find(&it, d, key) && bsonx_truthy(&it);
}

/* Does path touch a shard-key field (equal, prefix or extension)? Sets *field. */
static bool touches_key(const keys_pattern_t *p, const char *path, const char **field) {
    size_t pl = strlen(path);
    for (int i = 0; i < p->nfields; i++) {
        const char *f = p->fields[i];
        size_t fl = strlen(f);
        if ((pl == fl && !memcmp(path, f, fl)) ||
            (pl < fl && !memcmp(path, f, pl) && f[pl] == '.') ||
            (fl < pl && !memcmp(path, f, fl) && path[fl] == '.')) {
            *field = f;
            return true;
        }
    }
    return false;
}

/* The query's equality value for field (plain value or {$eq: v}). */
static bool query_eq(const bson_t *q, const char *field, bson_iter_t *out) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, q, field)) return false;
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_t c;
        if (bson_iter_recurse(&it, &c) && bson_iter_next(&c) && bson_iter_key(&c)[0] == '$') {
            if (strcmp(bson_iter_key(&c), "$eq") != 0) return false;
            *out = c;
            return true;
        }
    }
    *out = it;
    return true;
}

/* Refuses operator updates that change shard-key fields ($set to the value the query pins
 * is allowed, as MongoDB allows a no-op). */
static int check_key_update(const rt_table_t *t, const bson_t *q, const bson_t *u,
                            ms_error_t *err) {
    bson_iter_t op, f;
    if (!bson_iter_init(&op, u)) return 0;
    while (bson_iter_next(&op)) {
        const char *name = bson_iter_key(&op);
        if (name[0] != '$') return 0;   /* a replacement: checked by its key */
        if (!strcmp(name, "$setOnInsert") || !BSON_ITER_HOLDS_DOCUMENT(&op)) continue;
        if (!bson_iter_recurse(&op, &f)) continue;
        while (bson_iter_next(&f)) {
            const char *path = bson_iter_key(&f), *kf = NULL;
            /* A positional path on the key ("k.$", "k.$[]") needs an array where a shard
             * key can have none: the shard refuses it (BadValue 2), the router lets it. */
            if (strstr(path, ".$") && (strstr(path, ".$.") || strstr(path, ".$[") ||
                                       path[strlen(path) - 1] == '$'))
                continue;
            /* $rename writes its value's path: {$rename: {x: "k"}} modifies k too. */
            if (!strcmp(name, "$rename") && BSON_ITER_HOLDS_UTF8(&f) &&
                touches_key(&t->rt.pattern, bson_iter_utf8(&f, NULL), &kf))
                path = bson_iter_utf8(&f, NULL);
            else if (!touches_key(&t->rt.pattern, path, &kf))
                continue;
            bson_iter_t qv;
            if (!strcmp(name, "$set") && !strcmp(path, kf) && query_eq(q, kf, &qv) &&
                bsonx_compare_values(&qv, &f) == 0 &&
                bson_iter_type(&qv) == bson_iter_type(&f))
                continue;
            return err_set(err, MS_ERR_IMMUTABLE_FIELD,
                           "Performing an update on the path '%s' would modify the immutable "
                           "shard key field '%s'", path, kf);
        }
    }
    return 0;
}

/* Compiles an operator or replacement update u as the shard will, with the arrayFilters
 * found in holder (the statement, or findAndModify's command) and the query q ("$"), to
 * refuse what the shard would refuse before any shard-key check — a replacement's
 * '$'-prefixed names too, unless an upsert may insert it (then the shard judges). */
static int compile_statement_update(const bson_t *u, const bson_t *holder, const bson_t *q,
                                    ms_error_t *err) {
    update_opts_t o = {0};
    update_t *uc = NULL;
    bson_iter_t it;
    bson_t afs;
    if (bson_iter_init_find(&it, holder, "arrayFilters")) {
        if (!BSON_ITER_HOLDS_ARRAY(&it) || !bsonx_view_container(&it, &afs))
            return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'arrayFilters' is the wrong "
                           "type '%s', expected type 'array'", bsonx_type_name(bson_iter_type(&it)));
        o.array_filters = &afs;
    }
    o.query = q;
    int rc = update_compile_opts(u, false, &o, &uc, err);
    bool upsert = bson_iter_init_find(&it, holder, "upsert") && bsonx_truthy(&it);
    if (rc == 0 && !upsert) rc = update_check_replacement(uc, err);
    update_free(uc);
    return rc;
}

static bool is_replacement(const bson_t *u) {
    bson_iter_t it;
    if (!bson_iter_init(&it, u) || !bson_iter_next(&it)) return true;
    return bson_iter_key(&it)[0] != '$';
}

static bool pattern_has_id(const keys_pattern_t *p) {
    for (int i = 0; i < p->nfields; i++)
        if (!strcmp(p->fields[i], "_id")) return true;
    return false;
}

/* The shard key replacement u gives the document it replaces, into rk (caller frees).
 * A replacement without _id keeps the document's _id (MongoDB; the shard does so), so
 * when the key has _id the query's _id equality stands in for it (*known = false when
 * the query has none: the key is then not known from u alone). When the query pins the
 * whole key and the replacement's differs: ImmutableField. */
static int replacement_key(const rt_table_t *t, const bson_t *q, bool point, const bson_t *u,
                           buf_t *rk, bool *known, ms_error_t *err) {
    bson_t with_id;
    const bson_t *doc = u;
    bson_iter_t idv;
    bounds_t b;
    memset(&b, 0, sizeof b);
    *known = true;
    if (pattern_has_id(&t->rt.pattern) && !bson_has_field(u, "_id")) {
        *known = query_eq(q, "_id", &idv);
        if (*known) {
            bson_init(&with_id);
            BSON_APPEND_VALUE(&with_id, "_id", bson_iter_value(&idv));
            bson_concat(&with_id, u);
            doc = &with_id;
        }
    }
    int rc = keys_extract(&t->rt.pattern, doc, NULL, rk, err);
    if (!rc && point && bounds_from_filter(q, &t->rt.pattern, 2, &b, NULL) == 0 && b.n == 1 &&
        rtable_bytes_cmp(b.r[0].lo.data, b.r[0].lo.len, rk->data, rk->len) != 0)
        rc = err_set(err, MS_ERR_IMMUTABLE_FIELD,
                     "the replacement document would modify the immutable shard key");
    bounds_free(&b);
    if (doc == &with_id) bson_destroy(&with_id);
    return rc;
}

/* A write that needs one shard (upsert, single update / delete, findAndModify) whose filter
 * gives a shard-key field a decimal128: the key encoding refuses decimals, so the filter
 * cannot name a chunk (docs/query-language.md "Decimal128"). Say that, rather than
 * "must contain the shard key" when the filter does hold it. */
static int key_decimal_check(const rt_table_t *t, const bson_t *q, ms_error_t *err) {
    for (int i = 0; i < t->rt.pattern.nfields; i++) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, q, t->rt.pattern.fields[i]) && keys_holds_decimal(&it))
            return keys_decimal_refused(err, t->rt.pattern.fields[i]);
    }
    return 0;
}

/* The table shard indexes (bit i = t->rt.shards[i]) op goes to, for a sharded table. */
static int target_op(const rt_table_t *t, enum wkind k, const wop_t *op, uint64_t *out,
                     ms_error_t *err) {
    int shard, rc;
    bson_t doc;
    op_view(op, &doc);
    if (k == W_INSERT) {
        if ((rc = rt_target_doc(t, &doc, &shard, err)) != 0) return rc;
        *out = 1ull << shard;
        return 0;
    }
    bson_t q, u;
    uint64_t mask = 0;
    bool point = false;
    if (!get_sub(&doc, "q", &q))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "%s op needs a q document",
                       k == W_UPDATE ? "update" : "delete");
    if ((rc = rt_target_filter(t, &q, &mask, &point, err)) != 0) return rc;
    int nt = __builtin_popcountll(mask);
    if (k == W_DELETE) {
        bson_iter_t it;
        int64_t limit = 0;
        if (bson_iter_init_find(&it, &doc, "limit")) bsonx_as_int64(&it, &limit);
        if (limit == 1 && nt > 1 && !rt_filter_has_exact_id(&q) &&
            (rc = key_decimal_check(t, &q, err)) != 0)
            return rc;
        if (limit == 1 && nt > 1 && !rt_filter_has_exact_id(&q))
            return err_set(err, MS_ERR_SHARD_KEY_NOT_FOUND,
                           "A single delete on a sharded collection must contain an exact match "
                           "on _id (and have the collection default collation) or contain the "
                           "shard key (and have the simple collation).");
        *out = mask;
        return 0;
    }
    bson_iter_t ui;
    if (!bson_iter_init_find(&ui, &doc, "u") || !get_sub(&doc, "u", &u))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'update.updates.u' is missing or "
                       "not an object");
    bool upsert = flag_of(&doc, "upsert"), multi = flag_of(&doc, "multi");
    /* What the shard refuses in the statement gets the shard's own error: the update is
     * compiled by the shard's own compiler (with the statement's arrayFilters) before any
     * shard-key check of ours. A pipeline goes to the shard unexamined: what it writes is
     * only known per document, so the shard judges its shard-key changes as it does a
     * replacement's (WouldChangeOwningShard when the document would leave its chunk). */
    bool shard_judges = BSON_ITER_HOLDS_ARRAY(&ui);
    if (!shard_judges && (rc = compile_statement_update(&u, &doc, &q, err)) != 0) return rc;
    if (upsert && !point && (rc = key_decimal_check(t, &q, err)) != 0) return rc;
    if (upsert && !point)
        return err_set(err, MS_ERR_SHARD_KEY_NOT_FOUND,
                       "Failed to target upsert by query :: could not extract exact shard key");
    if (!shard_judges && (rc = check_key_update(t, &q, &u, err)) != 0) return rc;
    if (!shard_judges && !multi && is_replacement(&u)) {   /* multi: the shard refuses it */
        buf_t rk = {0};
        bool known;
        if ((rc = replacement_key(t, &q, point, &u, &rk, &known, err)) != 0) {
            buf_free(&rk);
            return rc;
        }
        if (known && nt > 1) {
            mask = 1ull << rtable_find_chunk(&t->rt, rk.data, rk.len)->shard;
            nt = 1;
        }
        buf_free(&rk);
    }
    /* MongoDB before updateOne-without-shard-key (7.1) answers InvalidOptions here, and
     * ShardKeyNotFound for the single delete above. */
    if (!multi && nt > 1 && !rt_filter_has_exact_id(&q) &&
        (rc = key_decimal_check(t, &q, err)) != 0)
        return rc;
    if (!multi && nt > 1 && !rt_filter_has_exact_id(&q))
        return err_set(err, MS_ERR_INVALID_OPTIONS,
                       "A single update on a sharded collection must contain an exact match on "
                       "_id (and have the collection default collation) or contain the shard "
                       "key (and have the simple collation).");
    *out = mask;
    return 0;
}

/* ---- multi-writes: exactly once across a migration commit -------------------------------
 * (docs/versioning-and-routing.md "Multi-document writes across a migration".) A multi
 * op on a sharded collection goes to the owners of the chunks its filter may touch, as
 * the client wrote it: a shard that accepts the shardVersion sent owns exactly the chunks
 * the table gives it (under its writer lock), so it writes exactly its part. Usually every
 * shard applies and nothing more is kept. When some shard applied and another answered
 * StaleConfig, the op's part still to write is made explicit (wb_materialize, with the
 * table that attempt used): pieces [lo, hi) of encoded shard keys (common/krange.h) of
 * the chunks the stale shards owned there. After the refresh the pieces are cut again at
 * the new chunk boundaries and go to their owners there, each statement narrowed to that
 * shard's pieces by $_shardKeyRanges, so the new owner of a moved range writes that range
 * and nothing it wrote already; a shard that applies has its pieces removed. */

typedef struct mpiece {
    krange_t r;            /* encoded keys; an empty bound is unbounded */
    int bit;               /* name bit of the shard owning it in the table the op was last
                            * targeted with (wop_t.gen) */
} mpiece_t;

/* Exists only for an op that was partly applied: sends of it are narrowed. */
typedef struct mwrite {
    mpiece_t *p;           /* sorted, disjoint; caller owns */
    int n, cap;
    int64_t *total;        /* the command's count of pieces (wbatch_t.npieces), kept by
                            * mw_add / mw_drop for the MS_MULTIWRITE_RANGES_MAX bound */
    rtable_version_t genv; /* the generation (epoch, timestamp) the keys are encoded in */
} mwrite_t;

static void mw_drop(mwrite_t *mw, int i) {
    buf_free(&mw->p[i].r.lo);
    buf_free(&mw->p[i].r.hi);
    (*mw->total)--;
}

static void mw_clear(mwrite_t *mw) {
    for (int i = 0; i < mw->n; i++) mw_drop(mw, i);
    mw->n = 0;
}

static void mw_free(mwrite_t *mw) {
    if (!mw) return;
    mw_clear(mw);
    free(mw->p);
    free(mw);
}

/* Appends [lo, hi) for bit, merged into the last piece when that one is the same shard's
 * and ends where this one starts. */
static void mw_add(mwrite_t *mw, const uint8_t *lo, size_t lolen, const uint8_t *hi,
                   size_t hilen, int bit) {
    if (mw->n > 0) {
        mpiece_t *l = &mw->p[mw->n - 1];
        if (l->bit == bit && l->r.hi.len > 0 && l->r.hi.len == lolen &&
            memcmp(l->r.hi.data, lo, lolen) == 0) {
            buf_reset(&l->r.hi);
            buf_put(&l->r.hi, hi, hilen);
            return;
        }
    }
    if (mw->n == mw->cap) {
        mw->cap = mw->cap ? mw->cap * 2 : 4;
        mw->p = xrealloc(mw->p, (size_t)mw->cap * sizeof *mw->p);
    }
    mpiece_t *q = &mw->p[mw->n++];
    memset(q, 0, sizeof *q);
    buf_put(&q->r.lo, lo, lolen);
    buf_put(&q->r.hi, hi, hilen);
    q->bit = bit;
    (*mw->total)++;
}

/* The start of chunk i of t as a piece bound (the first chunk: unbounded), and its end
 * (the next chunk's start; the last chunk: unbounded) — what rtable_find decides by. */
static const buf_t *chunk_lo(const rtable_t *rt, int i) {
    static const buf_t none = {0};
    return i == 0 ? &none : &rtable_chunk(rt, i)->min;
}

static const buf_t *chunk_hi(const rtable_t *rt, int i) {
    static const buf_t none = {0};
    return i + 1 >= rt->nchunks ? &none : &rtable_chunk(rt, i + 1)->min;
}

/* What mw_start's walk over the chosen chunks keeps: pieces of the shards in keep. */
typedef struct mw_walk {
    mwrite_t *mw;
    const wtarget_t *w;
    uint64_t keep;
} mw_walk_t;

static void mw_visit(void *arg, int i, const rtable_chunk_t *c) {
    mw_walk_t *k = arg;
    int bit = k->w->bit_of[c->shard];
    if (!(k->keep & (1ull << bit))) return;
    const rtable_t *rt = &k->w->t->rt;
    const buf_t *lo = chunk_lo(rt, i), *hi = chunk_hi(rt, i);
    mw_add(k->mw, lo->data, lo->len, hi->data, hi->len, bit);
}

/* The pieces of an op partly applied in the attempt that used w's table: the chunks the
 * filter q may touch there whose owner is in keep (name bits: the shards that did not
 * apply it). Walks only the chunks the filter chooses (each needs its owner). */
static int mw_start(mwrite_t *mw, const wtarget_t *w, const bson_t *q, uint64_t keep,
                    ms_error_t *err) {
    mw_clear(mw);
    rtable_coll_version(&w->t->rt, &mw->genv);
    mw_walk_t k = {.mw = mw, .w = w, .keep = keep};
    return rt_target_chunks(w->t, q, mw_visit, &k, err);
}

/* Cuts the pieces at w's table's chunk boundaries and assigns each to its owner there. */
static void mw_recut(mwrite_t *mw, const wtarget_t *w) {
    const rtable_t *rt = &w->t->rt;
    mwrite_t old = *mw;
    mw->p = NULL;
    mw->n = mw->cap = 0;
    for (int k = 0; k < old.n; k++) {
        const buf_t *plo = &old.p[k].r.lo, *phi = &old.p[k].r.hi;
        int start = plo->len ? rtable_find(rt, plo->data, plo->len) : 0;
        for (int i = start; i < rt->nchunks; i++) {
            const buf_t *lo = i == start ? plo : chunk_lo(rt, i);
            const buf_t *chi = chunk_hi(rt, i), *hi = chi;
            bool last = chi->len == 0;
            if (phi->len && (chi->len == 0 ||
                             rtable_bytes_cmp(chi->data, chi->len, phi->data, phi->len) >= 0)) {
                hi = phi;       /* the piece ends inside (or at the end of) chunk i */
                last = true;
            }
            mw_add(mw, lo->data, lo->len, hi->data, hi->len, w->bit_of[rtable_chunk(rt, i)->shard]);
            if (last) break;
        }
    }
    mw_clear(&old);
    free(old.p);
}

/* rtable_same_generation against rt's generation. */
static bool same_gen(const rtable_version_t *a, const rtable_t *rt) {
    rtable_version_t v;
    rtable_coll_version(rt, &v);
    return rtable_same_generation(a, &v);
}

static int too_many_ranges(ms_error_t *err) {
    return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "the rest of this command's multi-writes "
                   "spans more than %d key ranges after a migration met it; it was applied to "
                   "part of the collection only", MS_MULTIWRITE_RANGES_MAX);
}

/* Targets a partly applied multi op with w's (sharded) table: its pieces cut and assigned
 * there, *out = the name bits of their owners. The collection dropped and re-created (or
 * resharded) meanwhile: its key ranges mean nothing in the new generation, so the rest
 * fails with ConflictingOperationInProgress (what was written stays written). */
static int mw_target(const wtarget_t *w, wop_t *op, uint64_t *out, ms_error_t *err) {
    mwrite_t *mw = op->mw;
    if (!same_gen(&mw->genv, &w->t->rt))
        return err_set(err, MS_ERR_CONFLICTING_OPERATION,
                       "the collection was dropped, re-created or resharded while this "
                       "multi-write ran; it was applied to part of the collection only");
    mw_recut(mw, w);
    if (*mw->total > MS_MULTIWRITE_RANGES_MAX) return too_many_ranges(err);
    *out = 0;
    for (int i = 0; i < mw->n; i++) *out |= 1ull << mw->p[i].bit;
    return 0;
}

/* The pieces of bit were applied by their shard: gone from what is left. */
static void mw_applied(mwrite_t *mw, int bit) {
    int j = 0;
    for (int i = 0; i < mw->n; i++) {
        if (mw->p[i].bit == bit) mw_drop(mw, i);
        else mw->p[j++] = mw->p[i];
    }
    mw->n = j;
}

/* The op's statement for the shard of bit: as the client wrote it, or for a partly
 * applied op with $_shardKeyRanges = that shard's pieces. Appends it as key of arr. */
static void append_statement(bson_t *arr, const char *key, const wop_t *op, int bit) {
    bson_t od, nd, ra;
    char idx[16];
    int n = 0;
    op_view(op, &od);
    if (!op->mw) {
        BSON_APPEND_DOCUMENT(arr, key, &od);
        return;
    }
    bson_append_document_begin(arr, key, -1, &nd);
    bson_concat(&nd, &od);
    BSON_APPEND_ARRAY_BEGIN(&nd, "$_shardKeyRanges", &ra);
    for (int i = 0; i < op->mw->n; i++) {
        const mpiece_t *p = &op->mw->p[i];
        bson_t d;
        if (p->bit != bit) continue;
        snprintf(idx, sizeof idx, "%d", n++);
        BSON_APPEND_DOCUMENT_BEGIN(&ra, idx, &d);
        if (p->r.lo.len)
            bson_append_binary(&d, "min", -1, BSON_SUBTYPE_BINARY, p->r.lo.data, (uint32_t)p->r.lo.len);
        if (p->r.hi.len)
            bson_append_binary(&d, "max", -1, BSON_SUBTYPE_BINARY, p->r.hi.data, (uint32_t)p->r.hi.len);
        bson_append_document_end(&ra, &d);
    }
    bson_append_array_end(&nd, &ra);
    bson_append_document_end(arr, &nd);
}

/* Targets op with w's table: its name set minus the shards that applied it already; a
 * partly applied multi op: the owners of the key ranges it has left. */
static void op_target(const wtarget_t *w, enum wkind k, wop_t *op) {
    uint64_t m = 0, idx = 0;
    ms_error_t e = {0};
    if (!w->t->sharded) {
        if (op->mw) {   /* dropped (and maybe re-created unsharded) after a partial write */
            err_set(&e, MS_ERR_CONFLICTING_OPERATION,
                    "the collection was dropped or re-created while this multi-write ran; it "
                    "was applied to part of the collection only");
            op_fail(op, &e);
            return;
        }
        m = 1ull << w->primary_bit;
    } else {
        if (target_op(w->t, k, op, &idx, &e)) {
            op_fail(op, &e);
            return;
        }
        if (op->mw) {
            if (mw_target(w, op, &m, &e)) {
                op_fail(op, &e);
                return;
            }
            op->gen = w->gen;
            op->targets = m;
            if (!op->targets) op->state = OP_DONE;
            return;
        }
        for (; idx; idx &= idx - 1) m |= 1ull << w->bit_of[__builtin_ctzll(idx)];
    }
    op->gen = w->gen;
    op->targets = m & ~op->done;
    if (!op->targets) op->state = OP_DONE;
}

/* One round's ops for one shard (by name bit); ops is sized to the batch once. */
typedef struct shard_batch {
    int nops;
    int *ops;              /* client indexes */
} shard_batch_t;

static void batch_add(shard_batch_t *b, int cap, int i) {
    if (!b->ops) b->ops = malloc((size_t)cap * sizeof *b->ops);
    ASSERT(b->ops);
    b->ops[b->nops++] = i;
}

/* Upserted _ids arrive per shard piece, in any order across shards; the client's reply
 * lists them by op index, as mongos builds it from its write ops in order. */
typedef struct upsert_ent {
    int index;
    bson_value_t id;       /* caller owns (bson_value_copy) */
} upsert_ent_t;

static int upsert_cmp(const void *a, const void *b) {
    const upsert_ent_t *x = a, *y = b;
    return (x->index > y->index) - (x->index < y->index);
}

static void append_upserted(upsert_ent_t **v, int *nup, int *cap, int index, const bson_iter_t *id) {
    if (*nup == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *v = xrealloc(*v, (size_t)*cap * sizeof **v);
    }
    (*v)[*nup].index = index;
    bson_value_copy(bson_iter_value((bson_iter_t *)id), &(*v)[*nup].id);
    (*nup)++;
}

/* Appends upserted: [{index, _id}] sorted by index, and frees the entries. */
static void finish_upserted(bson_t *reply, upsert_ent_t *v, int nup) {
    bson_t arr, d;
    char idx[16];
    if (nup) {
        qsort(v, (size_t)nup, sizeof *v, upsert_cmp);
        BSON_APPEND_ARRAY_BEGIN(reply, "upserted", &arr);
        for (int i = 0; i < nup; i++) {
            snprintf(idx, sizeof idx, "%d", i);
            BSON_APPEND_DOCUMENT_BEGIN(&arr, idx, &d);
            BSON_APPEND_INT32(&d, "index", v[i].index);
            BSON_APPEND_VALUE(&d, "_id", &v[i].id);
            bson_append_document_end(&arr, &d);
        }
        bson_append_array_end(reply, &arr);
    }
}

static void free_upserted(upsert_ent_t *v, int nup) {
    for (int i = 0; i < nup; i++) bson_value_destroy(&v[i].id);
    free(v);
}

/* One write command's state across its rounds and their attempts (rt_dispatch's arg). */
typedef struct wbatch {
    cmd_ctx_t *ctx;
    enum wkind kind;
    bool ordered;
    const char *ns;
    wop_t *ops;
    int nops;
    int cursor;                 /* ordered: every op before it is done */
    wnames_t *names;            /* caller owns (8 KB: off the worker's stack) */
    wtarget_t w;
    rt_db_version_t dbv;        /* unsharded: the primary's database version */
    shard_batch_t batches[MS_SHARDS_MAX];   /* this attempt's ops, by name bit */
    int64_t n, nmod;
    upsert_ent_t *upserted;     /* caller owns */
    int nup, capup;
    ms_error_t expired;         /* MaxTimeMSExpired from a shard: ends the command */
    int64_t npieces;            /* key ranges kept by the partly applied multi ops (mwrite_t) */
    bool retryable;             /* lsid and txnNumber: statements carry stmtIds */
    int32_t *stmt_ids;          /* retryable: each op's stmtId (caller owns) */
    int resends;                /* retryable: resends after network/retryable errors so far */
    bool resend;                /* this round left ops pending for a resend */
} wbatch_t;

/* Is anything left to send? Ordered: advances the cursor past done ops; an error stops. */
static bool wb_more(wbatch_t *b) {
    if (b->ordered) {
        while (b->cursor < b->nops && b->ops[b->cursor].state == OP_DONE) b->cursor++;
        return b->cursor < b->nops && b->ops[b->cursor].state != OP_ERROR;
    }
    for (int i = 0; i < b->nops; i++)
        if (b->ops[i].state == OP_PENDING) return true;
    return false;
}

static void wb_fail_pending(wbatch_t *b, const ms_error_t *e) {
    for (int i = 0; i < b->nops; i++)
        if (b->ops[i].state == OP_PENDING) op_fail(&b->ops[i], e);
}

/* Makes op's part still to write explicit after some shard applied it in the attempt that
 * used b->w's table (see "multi-writes" above): the chunks its filter may touch there whose
 * owners have not applied it (its targets). Fails the op when the command would keep more
 * than MS_MULTIWRITE_RANGES_MAX ranges. */
static void op_materialize(wbatch_t *b, wop_t *op) {
    bson_t doc, q;
    ms_error_t e = {0};
    int rc;
    op->mw = calloc(1, sizeof *op->mw);
    ASSERT(op->mw);
    op->mw->total = &b->npieces;
    op_view(op, &doc);
    if (!get_sub(&doc, "q", &q))   /* target_op would have refused it */
        rc = err_set(&e, MS_ERR_FAILED_TO_PARSE, "multi-write op needs a q document");
    else
        rc = mw_start(op->mw, &b->w, &q, op->targets, &e);
    if (!rc && b->npieces > MS_MULTIWRITE_RANGES_MAX) rc = too_many_ranges(&e);
    if (rc) {
        mw_free(op->mw);
        op->mw = NULL;
        op_fail(op, &e);
    }
}

/* Before an attempt adopts its table: the pending multi ops that the last attempt applied
 * on some shards only get their pieces. Ordered: only the op at the cursor can be one (a
 * multi-shard op goes alone, and the cursor stops at it). */
static void wb_materialize(wbatch_t *b) {
    if (!b->w.t || !b->w.t->sharded) return;
    int from = b->ordered ? b->cursor : 0, to = b->ordered ? b->cursor + 1 : b->nops;
    for (int i = from; i < to && i < b->nops; i++) {
        wop_t *op = &b->ops[i];
        if (op->state == OP_PENDING && op->multi && !op->mw && op->done) op_materialize(b, op);
    }
}

/* A retryable write's piece: the stmtIds of its statements, in the piece's order. */
static void append_stmt_ids(bson_t *cmd, const wbatch_t *b, const shard_batch_t *sb) {
    bson_t ids;
    BSON_APPEND_ARRAY_BEGIN(cmd, "stmtIds", &ids);
    for (int j = 0; j < sb->nops; j++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", j);
        BSON_APPEND_INT32(&ids, idx, b->stmt_ids[sb->ops[j]]);
    }
    bson_append_array_end(cmd, &ids);
}

/* rt_dispatch's build: this attempt's ops — an ordered batch the run of pending ops from
 * the cursor that share one target, an unordered one every pending op — targeting those
 * not yet targeted with table t, one request per shard. Nothing left: *nreqs = 0. */
static int wb_build(void *p, router_t *r, const rt_table_t *t, rt_req_t *reqs, int *nreqs,
                    ms_error_t *err) {
    static const char *const skipf[] = {"documents", "updates", "deletes", "ordered", "stmtIds",
                                        NULL};
    wbatch_t *b = p;
    wop_t *ops = b->ops;
    char primary[RT_NAME_BYTES_MAX] = "";
    int rc, nb = 0;
    *nreqs = 0;
    if (!wb_more(b)) return 0;
    wb_materialize(b);
    if (!wb_more(b)) return 0;
    if (!t->sharded &&
        (rc = rt_db_get(r, b->ctx->db, true, primary, sizeof primary, &b->dbv, err)) != 0)
        return rc;
    ms_error_t e = {0};
    if (wt_adopt(&b->w, b->names, t, primary, &e)) {
        wb_fail_pending(b, &e);
        return 0;
    }
    for (int s = 0; s < b->names->n; s++) b->batches[s].nops = 0;
    if (b->ordered) {
        /* The run of pending ops from the first one that share one single target. */
        uint64_t tg = 0;
        for (int i = b->cursor; i < b->nops; i++) {
            wop_t *op = &ops[i];
            if (op->state == OP_PENDING && op->gen != b->w.gen) op_target(&b->w, b->kind, op);
            if (op->state == OP_DONE) continue;
            if (op->state == OP_ERROR) break;
            if (!tg) tg = op->targets;
            if (op->targets != tg) break;
            for (uint64_t m = tg; m; m &= m - 1)
                batch_add(&b->batches[__builtin_ctzll(m)], b->nops, i);
            if (__builtin_popcountll(tg) != 1) break;   /* a multi-shard op goes alone */
        }
    } else {
        for (int i = 0; i < b->nops; i++) {
            wop_t *op = &ops[i];
            if (op->state == OP_PENDING && op->gen != b->w.gen) op_target(&b->w, b->kind, op);
            if (op->state != OP_PENDING) continue;
            for (uint64_t m = op->targets; m; m &= m - 1)
                batch_add(&b->batches[__builtin_ctzll(m)], b->nops, i);
        }
    }
    for (int s = 0; s < b->names->n; s++) {
        shard_batch_t *sb = &b->batches[s];
        if (!sb->nops) continue;
        int tix = t->sharded ? b->w.idx_of[s] : -1;
        ASSERT(!t->sharded || tix >= 0);   /* targets come from this table */
        rt_req_t *q = &reqs[nb++];
        memset(q, 0, sizeof *q);
        snprintf(q->shard, sizeof q->shard, "%s", b->names->name[s]);
        bson_init(&q->cmd);
        rt_copy_cmd(&q->cmd, b->ctx->req, skipf);
        BSON_APPEND_BOOL(&q->cmd, "ordered", b->ordered);
        bson_t a;
        BSON_APPEND_ARRAY_BEGIN(&q->cmd, ops_field(b->kind), &a);
        for (int j = 0; j < sb->nops; j++) {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", j);
            append_statement(&a, idx, &ops[sb->ops[j]], s);
        }
        bson_append_array_end(&q->cmd, &a);
        if (b->retryable) append_stmt_ids(&q->cmd, b, sb);
        rt_append_version(&q->cmd, t, tix);
        if (!t->sharded) rt_append_db_version(&q->cmd, &b->dbv);
    }
    if (t->sharded) atomic_fetch_add(nb == 1 ? &r->targeted_ops : &r->scatter_ops, 1);
    *nreqs = nb;
    return 0;
}

/* rt_dispatch's absorb: records one shard's answer to its piece — n, nModified, upserted
 * ids and writeErrors by client index; the ops it applied are done on that shard (never
 * sent to it again); a failed piece fails its ops; a StaleConfig / StaleDbVersion
 * writeError leaves its op pending (reported, so the attempt is retried). */
static int wb_absorb(void *p, router_t *r, rt_req_t *q, int code) {
    wbatch_t *b = p;
    wop_t *ops = b->ops;
    int s = 0, ret = 0;
    (void)r;
    while (s < b->names->n && strcmp(b->names->name[s], q->shard) != 0) s++;
    ASSERT(s < b->names->n);   /* wb_build named every request from names */
    shard_batch_t *sb = &b->batches[s];
    uint64_t bit = 1ull << s;
    ms_error_t e = {0};
    if (q->rc) e = q->err;
    else if (code) rt_reply_status(&q->reply, &e);
    if (code == MS_ERR_MAX_TIME_MS_EXPIRED && !b->expired.code) {
        b->expired = e;   /* fails the command once this attempt's replies are read */
        err_prefix(&b->expired, "shard %s", q->shard);
        ret |= RT_ABSORB_END;
    }
    if (code) {   /* the whole piece failed: every op of it carries the error */
        if (!q->rc) err_prefix(&e, "shard %s", q->shard);  /* rt_shard_call named it */
        for (int j = 0; j < sb->nops; j++) {
            wop_t *op = &ops[sb->ops[j]];
            if (b->retryable && !op->multi && err_code_is_retriable(code) &&
                b->resends < MS_ROUTER_WRITE_RETRIES_MAX) {
                b->resend = true;   /* pending: sent again after a backoff */
                continue;
            }
            op_fail(op, &e);
        }
        return ret;
    }
    bson_iter_t f, arr;
    int64_t v = 0;
    if (bson_iter_init_find(&f, &q->reply, "n") && bsonx_as_int64(&f, &v)) b->n += v;
    v = 0;
    if (bson_iter_init_find(&f, &q->reply, "nModified") && bsonx_as_int64(&f, &v)) b->nmod += v;
    if (bson_iter_init_find(&f, &q->reply, "upserted") && bson_iter_recurse(&f, &arr)) {
        while (bson_iter_next(&arr)) {
            bson_iter_t d;
            int64_t li = -1;
            if (!bson_iter_recurse(&arr, &d)) continue;
            bson_iter_t d2 = d;
            if (bson_iter_find(&d, "index")) bsonx_as_int64(&d, &li);
            if (li < 0 || li >= sb->nops || !bson_iter_find(&d2, "_id")) continue;
            append_upserted(&b->upserted, &b->nup, &b->capup, sb->ops[li], &d2);
        }
    }
    int first_werr = sb->nops;   /* ordered: ops after the first error did not run */
    if (bson_iter_init_find(&f, &q->reply, "writeErrors") && bson_iter_recurse(&f, &arr)) {
        while (bson_iter_next(&arr)) {
            bson_iter_t d;
            int64_t li = -1, c = MS_ERR_UNKNOWN_ERROR;
            const char *msg = "";
            if (!bson_iter_recurse(&arr, &d)) continue;
            while (bson_iter_next(&d)) {
                const char *key = bson_iter_key(&d);
                if (!strcmp(key, "index")) bsonx_as_int64(&d, &li);
                else if (!strcmp(key, "code")) bsonx_as_int64(&d, &c);
                else if (!strcmp(key, "errmsg") && BSON_ITER_HOLDS_UTF8(&d))
                    msg = bson_iter_utf8(&d, NULL);
            }
            if (li < 0 || li >= sb->nops) continue;
            if (li < first_werr) first_werr = (int)li;
            wop_t *op = &ops[sb->ops[li]];
            if (c == MS_ERR_STALE_CONFIG || c == MS_ERR_STALE_DB_VERSION) {
                ret |= c == MS_ERR_STALE_CONFIG ? RT_ABSORB_STALE_CONFIG : RT_ABSORB_STALE_DB;
                op->code = MS_ERR_STALE_CONFIG;   /* pending again, marked for below */
                continue;
            }
            op->state = OP_ERROR;
            op->code = (int)c;
            op_set_msg(op, msg);
            bson_t wd;
            if (bsonx_view_container(&arr, &wd)) op_set_extra(op, &wd);
        }
    }
    for (int j = 0; j < sb->nops; j++) {
        wop_t *op = &ops[sb->ops[j]];
        if (op->state == OP_ERROR) continue;
        if (b->ordered && j > first_werr) continue;   /* not executed */
        if (op->code == MS_ERR_STALE_CONFIG) {         /* stale: pending again */
            op->code = 0;
            continue;
        }
        op->done |= bit;
        op->targets &= ~bit;
        if (op->mw) mw_applied(op->mw, s);   /* its pieces on that shard are written */
        if (!op->targets) op->state = OP_DONE;
    }
    return ret;
}

/* rt_dispatch's give_up: stale retries ran out or a refresh failed — the ops still pending
 * fail with it (writeErrors), as mongos's batch executor fails them. */
static void wb_give_up(void *p, const ms_error_t *e) {
    wb_fail_pending(p, e);
}

/* A bad `let` fails the whole command (as on the shard), not each statement the shards
 * would answer: its names and constant expressions are checked here. */
static int check_let(cmd_ctx_t *ctx, ms_error_t *err) {
    bson_iter_t it;
    bson_t d;
    expr_vars_t *vars = NULL;
    if (!bson_iter_init_find(&it, ctx->req, "let")) return 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bsonx_view_container(&it, &d))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field '%s.let' is the wrong type '%s', "
                       "expected type 'object'", ctx->name, bsonx_type_name(bson_iter_type(&it)));
    int rc = expr_vars_from_let(&d, &vars, err);
    expr_vars_free(vars);
    return rc;
}

/* update {multi: true} and delete {limit: 0}: the ops that write every matching document. */
static bool op_is_multi(enum wkind kind, const wop_t *op) {
    bson_t doc;
    bson_iter_t it;
    int64_t limit = 0;
    op_view(op, &doc);
    if (kind == W_UPDATE) return flag_of(&doc, "multi");
    if (kind != W_DELETE) return false;
    if (bson_iter_init_find(&it, &doc, "limit")) bsonx_as_int64(&it, &limit);
    return limit == 0;
}

/* A retryable write's stmtIds: the client's (one per op; InvalidLength otherwise, as a
 * shard checks) or each op's index. Not retryable (no lsid or txnNumber): none. */
static int parse_stmt_ids(cmd_ctx_t *ctx, wbatch_t *b, ms_error_t *err) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, ctx->req, "lsid") ||
        !bson_iter_init_find(&it, ctx->req, "txnNumber"))
        return 0;
    b->retryable = true;
    b->stmt_ids = calloc((size_t)b->nops, sizeof *b->stmt_ids);
    ASSERT(b->stmt_ids);
    for (int i = 0; i < b->nops; i++) b->stmt_ids[i] = i;
    if (!bson_iter_init_find(&it, ctx->req, "stmtIds")) return 0;
    return cmd_parse_stmt_ids(&it, b->nops, b->stmt_ids, err);
}

/* A retryable write whose statement failed with a network or retryable error the router
 * gave up resending fails as a whole with that error (the driver retries the command; the
 * statements that were applied answer from their records). */
static int retryable_top_level(const wbatch_t *b, ms_error_t *err) {
    if (!b->retryable) return 0;
    for (int i = 0; i < b->nops; i++) {
        const wop_t *op = &b->ops[i];
        if (op->state == OP_ERROR && !op->multi && err_code_is_retriable(op->code))
            return err_set(err, op->code, "%s", op->msg ? op->msg : "shard unreachable");
    }
    return 0;
}

static int run_writes(cmd_ctx_t *ctx, enum wkind kind, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    if (!strcmp(ctx->db, "config")) return rt_cmd_to_config(ctx, reply, err);
    const char *coll = bson_iter_utf8(&ctx->arg, NULL);
    char ns[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    bson_iter_t it, arr;
    int rc = 0, stale_rounds = 0;
    wbatch_t *b = calloc(1, sizeof *b);   /* with its batches: off the worker's stack */
    ASSERT(b);
    b->ctx = ctx;
    b->kind = kind;
    b->ordered = cmd_flag(ctx, "ordered", true);
    b->ns = ns;
    b->names = calloc(1, sizeof *b->names);
    ASSERT(b->names);
    snprintf(ns, sizeof ns, "%s.%s", ctx->db, coll);

    if (kind != W_INSERT && (rc = check_let(ctx, err)) != 0) goto out;
    if (!bson_iter_init_find(&it, ctx->req, ops_field(kind)) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "%s needs a %s array", ctx->name,
                     ops_field(kind));
        goto out;
    }
    {   /* size the op array to the batch (not to the 100,000 limit: that is 40 MB) */
        bson_iter_t cnt = arr;
        int total = 0;
        while (total <= MS_WRITE_BATCH_OPS_MAX && bson_iter_next(&cnt)) total++;
        b->ops = calloc((size_t)total + 1, sizeof *b->ops);
        ASSERT(b->ops);
    }
    while (bson_iter_next(&arr)) {
        uint32_t len;
        const uint8_t *data;
        if (b->nops >= MS_WRITE_BATCH_OPS_MAX) {
            rc = err_set(err, MS_ERR_INVALID_LENGTH, "Write batch sizes must be between 1 and %d",
                         MS_WRITE_BATCH_OPS_MAX);
            goto out;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) {
            rc = err_set(err, MS_ERR_TYPE_MISMATCH, "%s elements must be documents",
                         ops_field(kind));
            goto out;
        }
        bson_iter_document(&arr, &len, &data);
        b->ops[b->nops].data = data;
        b->ops[b->nops].len = len;
        b->ops[b->nops].multi = op_is_multi(kind, &b->ops[b->nops]);
        b->nops++;
    }
    if (b->nops == 0) {
        rc = err_set(err, MS_ERR_INVALID_LENGTH, "Write batch sizes must be between 1 and %d",
                     MS_WRITE_BATCH_OPS_MAX);
        goto out;
    }
    if ((rc = parse_stmt_ids(ctx, b, err)) != 0) goto out;

    /* Rounds: each is one rt_dispatch (its stale retries included) of the ops wb_build
     * chooses; an ordered batch needs one per run. Bounded by ops + stale retries; the
     * stale retries are counted for the whole command. */
    rt_dispatch_t d = {.db = ctx->db, .ns = ns, .build = wb_build, .absorb = wb_absorb,
                       .give_up = wb_give_up, .stale_rounds = &stale_rounds, .arg = b};
    for (int round = 0;
         round < b->nops + MS_STALE_RETRIES_MAX + MS_ROUTER_WRITE_RETRIES_MAX + 2 && wb_more(b);
         round++) {
        rt_req_t reqs[MS_SHARDS_MAX];
        int nq = 0, fail = -1;
        if ((rc = rt_dispatch(r, &d, reqs, &nq, &fail, err)) != 0) goto out;
        ASSERT(nq == 0);   /* absorbed */
        if (b->expired.code) {
            *err = b->expired;
            rc = b->expired.code;
            goto out;
        }
        if (b->resend) {   /* the shard's records make the resend safe */
            b->resend = false;
            if (!rt_write_retry_wait(b->resends++)) b->resends = MS_ROUTER_WRITE_RETRIES_MAX;
        }
    }
    /* Ops left pending by a last resend that could not run fail with their error. */
    if (b->resends >= MS_ROUTER_WRITE_RETRIES_MAX && wb_more(b)) {
        ms_error_t e;
        err_set(&e, MS_ERR_HOST_UNREACHABLE, "shards unreachable after %d resends",
                MS_ROUTER_WRITE_RETRIES_MAX);
        wb_fail_pending(b, &e);
    }
    if ((rc = retryable_top_level(b, err)) != 0) goto out;

    wop_t *ops = b->ops;
    BSON_APPEND_INT32(reply, "n", (int32_t)b->n);
    if (kind == W_UPDATE) {
        BSON_APPEND_INT32(reply, "nModified", (int32_t)b->nmod);
        finish_upserted(reply, b->upserted, b->nup);
    }
    bson_t werr;
    int nw = 0;
    for (int i = 0; i < b->nops; i++) {
        if (ops[i].state != OP_ERROR) continue;
        if (!nw) BSON_APPEND_ARRAY_BEGIN(reply, "writeErrors", &werr);
        bson_t wd;
        char idx[16];
        snprintf(idx, sizeof idx, "%d", nw++);
        BSON_APPEND_DOCUMENT_BEGIN(&werr, idx, &wd);
        BSON_APPEND_INT32(&wd, "index", i);
        BSON_APPEND_INT32(&wd, "code", ops[i].code);
        BSON_APPEND_UTF8(&wd, "codeName", err_code_name(ops[i].code));
        BSON_APPEND_UTF8(&wd, "errmsg", ops[i].msg ? ops[i].msg : "");
        if (ops[i].extra) bson_concat(&wd, ops[i].extra);
        bson_append_document_end(&werr, &wd);
        if (b->ordered) break;
    }
    if (nw) bson_append_array_end(reply, &werr);
out:
    for (int s = 0; s < MS_SHARDS_MAX; s++) free(b->batches[s].ops);
    rt_table_release(b->w.t);
    free(b->names);
    free_upserted(b->upserted, b->nup);
    for (int i = 0; b->ops && i < b->nops; i++) {
        free(b->ops[i].msg);
        op_clear_extra(&b->ops[i]);
        mw_free(b->ops[i].mw);
    }
    free(b->ops);
    free(b->stmt_ids);
    free(b);
    return rc;
}

int rt_cmd_insert(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return run_writes(ctx, W_INSERT, reply, err);
}

int rt_cmd_update(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return run_writes(ctx, W_UPDATE, reply, err);
}

int rt_cmd_delete(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return run_writes(ctx, W_DELETE, reply, err);
}

typedef struct fam_arg {
    cmd_ctx_t *ctx;
    const bson_t *q;
} fam_arg_t;

/* rt_dispatch's build for findAndModify: the primary (unsharded) or the one shard the
 * query's shard key names, after the shard-key checks of the update. */
static int fam_build(void *p, router_t *r, const rt_table_t *t, rt_req_t *reqs, int *n,
                     ms_error_t *err) {
    fam_arg_t *a = p;
    cmd_ctx_t *ctx = a->ctx;
    const bson_t *q = a->q;
    char target[RT_NAME_BYTES_MAX];
    rt_db_version_t dbv;
    bson_iter_t it;
    bson_t u;
    int rc, idx = -1;
    if (!t->sharded) {
        rc = rt_db_get(r, ctx->db, true, target, sizeof target, &dbv, err);
    } else {
        uint64_t mask = 0;
        bool point = false;
        rc = rt_target_filter(t, q, &mask, &point, err);
        if (!rc && __builtin_popcountll(mask) != 1) rc = key_decimal_check(t, q, err);
        if (!rc && __builtin_popcountll(mask) != 1)
            rc = err_set(err, MS_ERR_SHARD_KEY_NOT_FOUND,
                         "Query for sharded findAndModify must contain the shard key");
        /* A pipeline goes to the shard, which judges its shard-key changes per document;
         * an update the shard's compiler refuses gets its error before our shard-key
         * checks. */
        if (!rc && bson_iter_init_find(&it, ctx->req, "update") &&
            BSON_ITER_HOLDS_DOCUMENT(&it) && bsonx_view_container(&it, &u)) {
            rc = compile_statement_update(&u, ctx->req, q, err);
            if (!rc) rc = check_key_update(t, q, &u, err);
            if (!rc && is_replacement(&u)) {   /* the key may not change this way either */
                buf_t rk = {0};
                bool known;
                rc = replacement_key(t, q, point, &u, &rk, &known, err);
                buf_free(&rk);
            }
        }
        if (!rc) {
            idx = __builtin_ctzll(mask);
            snprintf(target, sizeof target, "%s", t->rt.shards[idx]);
        }
    }
    if (rc) return rc;
    memset(&reqs[0], 0, sizeof reqs[0]);
    snprintf(reqs[0].shard, sizeof reqs[0].shard, "%s", target);
    bson_init(&reqs[0].cmd);
    rt_copy_cmd(&reqs[0].cmd, ctx->req, NULL);
    rt_append_version(&reqs[0].cmd, t, idx);
    if (!t->sharded) rt_append_db_version(&reqs[0].cmd, &dbv);
    *n = 1;
    return 0;
}

/* findAndModify: one shard, by the shard key in the query; stale retries by rt_dispatch. */
int rt_cmd_find_and_modify(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    const char *coll = bson_iter_utf8(&ctx->arg, NULL);
    char ns[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    bson_t q;
    bson_iter_t it;
    snprintf(ns, sizeof ns, "%s.%s", ctx->db, coll);
    bson_init(&q);
    if (bson_iter_init_find(&it, ctx->req, "query") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_document(&it, &len, &data);
        bson_destroy(&q);
        bson_init_static(&q, data, len);
    }
    fam_arg_t a = {ctx, &q};
    rt_dispatch_t d = {.db = ctx->db, .ns = ns, .build = fam_build, .arg = &a};
    rt_req_t req;
    int n = 0, fail = -1, rc;
    /* A retryable findAndModify is sent again after a network or retryable error (the
     * shard's record answers it if it ran), bounded by rt_write_retry_wait. */
    bool retryable = bson_iter_init_find(&it, ctx->req, "lsid") &&
                     bson_iter_init_find(&it, ctx->req, "txnNumber");
    for (int attempt = 0;; attempt++) {
        if ((rc = rt_dispatch(r, &d, &req, &n, &fail, err)) != 0) return rc;
        int code = req.rc ? req.rc : rt_reply_status(&req.reply, NULL);
        if (!retryable || !err_code_is_retriable(code) || !rt_write_retry_wait(attempt)) break;
        rt_req_clear(&req);
    }
    if (req.rc) {
        *err = req.err;
        rc = req.rc;
        rt_req_clear(&req);
        return rc;
    }
    ms_error_t e;
    int code = rt_reply_status(&req.reply, &e);
    if (code) {
        *err = e;
        append_error_extra(&req.reply, &ctx->err_info);   /* keyPattern, keyValue, ... */
        rt_req_clear(&req);
        return code;
    }
    bson_iter_init(&it, &req.reply);
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), "ok") != 0) bson_append_iter(reply, NULL, 0, &it);
    rt_req_clear(&req);
    return 0;
}
