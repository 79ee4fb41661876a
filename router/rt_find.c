/*
 * rt_find.c — reads through the router, run by bin/router: find (notes §8.2: one shard →
 * forwarded as is; several → each gets limit+skip and skip 0, the router k-way merges the
 * shard cursors by sort key and applies skip/limit itself; sort fields the user's
 * projection drops are added for the shards and stripped again), router cursors spanning
 * shard cursors (getMore pulls from shards as the merge needs; killCursors; idle reaping),
 * count (sum with skip/limit applied across shards) and distinct (union, de-duplicated and
 * ordered in BSON order). Every read is versioned; StaleConfig → refresh → retry.
 * find / getMore / killCursors with $db: "config" go to the config server, which owns
 * those cursors.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/bsonx.h"
#include "common/cursor.h"
#include "common/log.h"
#include "common/mem.h"
#include "common/opctx.h"
#include "common/sortspec.h"
#include "router/router.h"

#define RT_STRIP_MAX 8

/* ---- versioned scatter with stale retries ---------------------------------------------- */

typedef rt_build_fn build_fn;

static void kill_reply_cursor(router_t *r, const char *shard, const char *db, const char *coll,
                              const bson_t *reply) {
    bson_iter_t it;
    if (!bson_iter_init(&it, reply) || !bson_iter_find_descendant(&it, "cursor.id", &it)) return;
    /* Even after the operation's maxTimeMS has expired, or the shard's cursor would wait
     * out its idle timeout (rt_kill_shard_cursor sends it outside the deadline). */
    rt_kill_shard_cursor(r, shard, db, coll, bson_iter_as_int64(&it));
}

typedef struct scatter_arg {
    const char *db, *coll;
    const bson_t *filter;
    build_fn fn;
    void *arg;
} scatter_arg_t;

/* rt_dispatch's build: the primary (unsharded) or the shards the filter targets. */
static int scatter_build(void *p, router_t *r, const rt_table_t *t, rt_req_t *reqs, int *nreqs,
                         ms_error_t *err) {
    scatter_arg_t *a = p;
    int rc, n = 0;
    if (!t->sharded) {
        char primary[RT_NAME_BYTES_MAX];
        rt_db_version_t dbv;
        if ((rc = rt_db_get(r, a->db, false, primary, sizeof primary, &dbv, err)) != 0) return rc;
        memset(&reqs[0], 0, sizeof reqs[0]);
        snprintf(reqs[0].shard, sizeof reqs[0].shard, "%s", primary);
        bson_init(&reqs[0].cmd);
        a->fn(a->arg, t, -1, 1, &reqs[0].cmd);
        rt_append_version(&reqs[0].cmd, t, -1);
        rt_append_db_version(&reqs[0].cmd, &dbv);
        *nreqs = 1;
        return 0;
    }
    uint64_t mask = 0;
    bool point = false;
    bson_t empty = BSON_INITIALIZER;
    rc = rt_target_filter(t, a->filter ? a->filter : &empty, &mask, &point, err);
    bson_destroy(&empty);
    if (rc) return rc;
    int nt = __builtin_popcountll(mask);
    for (int i = 0; i < t->rt.nshards; i++) {
        if (!(mask & (1ull << i))) continue;
        memset(&reqs[n], 0, sizeof reqs[n]);
        snprintf(reqs[n].shard, sizeof reqs[n].shard, "%s", t->rt.shards[i]);
        bson_init(&reqs[n].cmd);
        a->fn(a->arg, t, i, nt, &reqs[n].cmd);
        rt_append_version(&reqs[n].cmd, t, i);
        n++;
    }
    atomic_fetch_add(nt == 1 ? &r->targeted_ops : &r->scatter_ops, 1);
    *nreqs = n;
    return 0;
}

/* rt_dispatch's discard: close the cursor an ok reply opened. */
static void scatter_discard(void *p, router_t *r, rt_req_t *q) {
    scatter_arg_t *a = p;
    kill_reply_cursor(r, q->shard, a->db, a->coll, &q->reply);
}

/* Targets filter (NULL = every owning shard), sends the commands fn builds, retries on
 * StaleConfig / StaleDbVersion (rt_dispatch). On 0 every reqs[i] holds an ok reply; caller
 * clears them. NamespaceNotFound = unsharded collection in a database that does not exist
 * (an empty answer). */
int rt_scatter(router_t *r, const char *db, const char *coll, const bson_t *filter,
               build_fn fn, void *arg, rt_req_t *reqs, int *nreqs, ms_error_t *err) {
    char ns[MS_NS_BYTES_MAX + 1];
    snprintf(ns, sizeof ns, "%s.%s", db, coll);
    scatter_arg_t a = {db, coll, filter, fn, arg};
    rt_dispatch_t d = {.db = db, .ns = ns, .build = scatter_build, .discard = scatter_discard,
                       .arg = &a};
    int n = 0, fail = -1;
    int rc = rt_dispatch(r, &d, reqs, &n, &fail, err);
    *nreqs = 0;
    if (rc) return rc;
    if (fail < 0) {
        *nreqs = n;
        return 0;
    }
    /* Close whatever the shards that answered opened, then fail. */
    for (int i = 0; i < n; i++)
        if (reqs[i].rc == 0 && rt_reply_status(&reqs[i].reply, NULL) == 0)
            kill_reply_cursor(r, reqs[i].shard, db, coll, &reqs[i].reply);
    if (reqs[fail].rc) {
        *err = reqs[fail].err;   /* rt_shard_call named the shard */
        rc = reqs[fail].rc;
    } else {
        rc = rt_reply_status(&reqs[fail].reply, err);
        err_prefix(err, "shard %s", reqs[fail].shard);
    }
    for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
    return rc;
}

/* ---- router cursors -------------------------------------------------------------------- */

/* What a router cursor holds is bounded: each shard is asked for about
 * one client batch (the find forwards batchSize, every getMore to a shard carries the
 * count the merge still needs), a shard batch is released as soon as its last document is
 * consumed, and three caps apply: open cursors per client connection, open cursors in the
 * router, and bytes of shard batches buffered by all cursors (common/limits.h). */

typedef struct rt_stream {
    char shard[RT_NAME_BYTES_MAX];
    int64_t id;            /* shard cursor; 0 = exhausted after the buffered batch */
    bson_t reply;          /* the latest batch (while have_reply) */
    bool have_reply;
    size_t held;           /* reply.len, counted in the find registry's bytes */
    bson_iter_t it;        /* over the batch array */
    bool head;             /* it is positioned on an unconsumed document */
    bool done;
} rt_stream_t;

typedef struct rt_cursor {
    curs_t reg;            /* id, ns, connection, pin state: the registry's (common/cursor.c) */
    char db[RT_NAME_BYTES_MAX];
    char coll[MS_NS_BYTES_MAX + 1];
    sortspec_t *sort;
    int n;
    rt_stream_t s[MS_SHARDS_MAX];
    int64_t skip_left;
    int64_t limit_left;    /* -1 = none */
    int64_t batch_hint;    /* documents the client last asked for: sizes look-ahead fetches */
    int nstrip;
    char strip[RT_STRIP_MAX][256];
    bool timed;            /* opened with maxTimeMS: time_left_ms bounds each getMore */
    long long time_left_ms;   /* what the find's maxTimeMS left (mongos's leftover) */
} rt_cursor_t;

/* A cursor on a config collection: it lives on the config server (which relays its
 * batches); the router only counts it against its client's connection, because every
 * client's config reads share the router's one connection to the config server. */
typedef struct rt_cfg_cursor {
    curs_t reg;            /* under the config server's id */
} rt_cfg_cursor_t;

/* The router's two registries (common/cursor.c), each with its own lock and caps. find's
 * bytes are the shard batches buffered by every router cursor, registered or still being
 * built (stream_take_reply / stream_release count them as they come and go). */
struct rt_cursors {
    curs_reg_t *find;      /* router cursors */
    curs_reg_t *cfg;       /* relayed config cursors */
};

static void cursor_free(router_t *r, rt_cursor_t *c);

static void cursor_destroy(void *arg, curs_t *reg) {
    cursor_free(arg, curs_entry(reg, rt_cursor_t, reg));
}

static void cfg_cursor_destroy(void *arg, curs_t *reg) {
    (void)arg;
    free(curs_entry(reg, rt_cfg_cursor_t, reg));
}

int rt_cursors_open(router_t *r, rt_cursors_t **out) {
    curs_opts_t fo = {.noun = "cursors", .place = "on this router", .owner = "router",
                      .conn_max = MS_ROUTER_CURSORS_PER_CONN_MAX,
                      .client_max = MS_ROUTER_CURSORS_PER_CLIENT_MAX, .router_codes = true,
                      .total_max = MS_ROUTER_CURSORS_MAX, .bytes_max = MS_ROUTER_CURSOR_BYTES_MAX,
                      .destroy_fn = cursor_destroy, .arg = r};
    /* The config server times its own cursors out after the same idle time. */
    curs_opts_t co = {.noun = "config cursors", .place = "on this router", .owner = "router",
                      .conn_max = MS_ROUTER_CFG_CURSORS_PER_CONN_MAX,
                      .client_max = MS_ROUTER_CFG_CURSORS_PER_CLIENT_MAX, .router_codes = true,
                      .total_max = MS_ROUTER_CFG_CURSORS_MAX, .destroy_fn = cfg_cursor_destroy};
    rt_cursors_t *c = calloc(1, sizeof *c);
    if (!c) return MS_ERR_EXCEEDED_MEMORY_LIMIT;
    if (curs_reg_new(&fo, &c->find) != 0 || curs_reg_new(&co, &c->cfg) != 0) {
        curs_reg_free(c->find);
        free(c);
        return MS_ERR_EXCEEDED_MEMORY_LIMIT;
    }
    *out = c;
    return 0;
}

/* Drops the stream's buffered batch and its accounting. */
static void stream_release(rt_cursors_t *cs, rt_stream_t *s) {
    if (!s->have_reply) return;
    bson_destroy(&s->reply);
    s->have_reply = false;
    curs_bytes_add(cs->find, -(long long)s->held);
    s->held = 0;
    s->head = false;
}

/* Kills the shard cursors behind c and frees it (never under a registry lock: it calls
 * the shards). r NULL: frees only. */
static void cursor_free(router_t *r, rt_cursor_t *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        rt_stream_t *s = &c->s[i];
        if (r) rt_kill_shard_cursor(r, s->shard, c->db, c->coll, s->id);
        if (r) stream_release(r->cursors, s);
        else if (s->have_reply) bson_destroy(&s->reply);
    }
    sortspec_free(c->sort);
    free(c);
}

void rt_cursors_close(router_t *r, rt_cursors_t *cs) {
    (void)r;   /* the registries' destroy callbacks already hold it */
    if (!cs) return;
    curs_reg_free(cs->find);
    curs_reg_free(cs->cfg);
    free(cs);
}

int rt_cursors_count(router_t *r) {
    return curs_count(r->cursors->find);
}

void rt_cursors_metrics(router_t *r, bson_t *metrics) {
    rt_cursors_t *cs = r->cursors;
    curs_stats_t st;
    bson_t cur, cfg;
    curs_metrics_begin(cs->find, "bytesBuffered", metrics, &cur);
    curs_stats(cs->cfg, &st);
    /* Config-database cursors this router relays (they live on the config server). */
    BSON_APPEND_DOCUMENT_BEGIN(&cur, "config", &cfg);
    BSON_APPEND_INT64(&cfg, "open", st.open);
    BSON_APPEND_INT64(&cfg, "refusedPerConnection", st.refused_conn);
    BSON_APPEND_INT64(&cfg, "refusedTotal", st.refused_total);
    bson_append_document_end(&cur, &cfg);
    bson_append_document_end(metrics, &cur);
}

void rt_cursors_reap(router_t *r) {
    curs_reap(r->cursors->find);
    curs_reap(r->cursors->cfg);
}

/* ---- config cursors (relayed to the config server, counted here) ------------------------ */

static int64_t reply_cursor_id(const bson_t *reply) {
    bson_iter_t it;
    if (bson_iter_init(&it, reply) && bson_iter_find_descendant(&it, "cursor.id", &it))
        return bson_iter_as_int64(&it);
    return 0;
}

/* Counts the config server's cursor id for conn (admitted before the find ran, so past
 * the caps now: the cursor exists on the config server either way). */
static void cfg_cursor_add(rt_cursors_t *cs, const char *ns, int64_t id, uint32_t conn) {
    rt_cfg_cursor_t *k = calloc(1, sizeof *k);
    ms_error_t e = {0};
    int64_t got;
    ASSERT(k);
    if (curs_add(cs->cfg, &k->reg, ns, conn, id, true, &got, &e) != 0) {
        log_warn("config cursor not counted id=%lld errmsg=\"%s\"", (long long)id, e.msg);
        free(k);
    }
}

/* Forgets id (gone = true) or marks it used now. */
static void cfg_cursor_touch(rt_cursors_t *cs, int64_t id, bool gone) {
    if (gone) curs_kill(cs->cfg, id);
    else curs_touch(cs->cfg, id);
}

/* Refuses a config find from a client connection at its cap, or when the router's config
 * cursors are at theirs (checked when the find starts: concurrent finds may pass together,
 * at most one per worker, which the config server's own per-connection margin absorbs). */
int rt_cfg_cursor_cmd(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    char ns[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    int rc = curs_admit(r->cursors->cfg, op_conn(), err);
    if (rc) return rc;
    if ((rc = rt_cmd_to_config(ctx, reply, err)) != 0) return rc;
    int64_t id = reply_cursor_id(reply);
    snprintf(ns, sizeof ns, "%s.%s", ctx->db,
             BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "");
    if (id) cfg_cursor_add(r->cursors, ns, id, op_conn());
    return 0;
}

static int cfg_get_more(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    int64_t id = 0;
    bsonx_as_int64(&ctx->arg, &id);
    int rc = rt_cmd_to_config(ctx, reply, err);
    if (rc == 0) cfg_cursor_touch(r->cursors, id, reply_cursor_id(reply) == 0);
    else if (rc == MS_ERR_CURSOR_NOT_FOUND) cfg_cursor_touch(r->cursors, id, true);
    return rc;
}

static int cfg_kill_cursors(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    int rc = rt_cmd_to_config(ctx, reply, err);
    if (rc) return rc;
    static const char *const lists[] = {"cursorsKilled", "cursorsNotFound"};
    for (int l = 0; l < 2; l++) {
        bson_iter_t it, arr;
        if (!bson_iter_init_find(&it, reply, lists[l]) || !BSON_ITER_HOLDS_ARRAY(&it) ||
            !bson_iter_recurse(&it, &arr))
            continue;
        for (int i = 0; i < MS_CURSORS_MAX && bson_iter_next(&arr); i++) {
            int64_t id;
            if (bsonx_as_int64(&arr, &id)) cfg_cursor_touch(r->cursors, id, true);
        }
    }
    return 0;
}

/* Moves the stream to its next document; at the end of the batch the batch is released
 * at once (a consumed batch pins no memory while the cursor idles). */
static void stream_next(rt_cursors_t *cs, rt_stream_t *s) {
    s->head = false;
    if (!s->have_reply) {
        if (!s->id) s->done = true;
        return;
    }
    while (bson_iter_next(&s->it))
        if (BSON_ITER_HOLDS_DOCUMENT(&s->it)) {
            s->head = true;
            return;
        }
    stream_release(cs, s);
    if (!s->id) s->done = true;
}

/* Takes over reply (a shard's find or getMore answer) and positions on its first
 * document. */
static void stream_take_reply(rt_cursors_t *cs, rt_stream_t *s, bson_t *reply,
                              const char *batch_key) {
    bson_iter_t it;
    stream_release(cs, s);
    bson_steal(&s->reply, reply);   /* reply's storage moves here */
    s->have_reply = true;
    s->held = s->reply.len;
    curs_bytes_add(cs->find, (long long)s->held);
    s->id = 0;
    if (bson_iter_init(&it, &s->reply) && bson_iter_find_descendant(&it, "cursor.id", &it))
        s->id = bson_iter_as_int64(&it);
    if (!(bson_iter_init(&it, &s->reply) && bson_iter_find_descendant(&it, batch_key, &it) &&
          BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &s->it))) {
        stream_release(cs, s);   /* no batch: nothing buffered */
        if (!s->id) s->done = true;
        return;
    }
    stream_next(cs, s);
}

/* Positions stream s on its next document, fetching with getMore when its batch is used
 * up; the getMore asks for `need` documents (at least 1). While the router's buffered
 * bytes are at their cap nothing is fetched: ExceededMemoryLimit. Bounded: a shard that
 * keeps sending empty batches with a live cursor is an error. */
static int stream_fill(router_t *r, rt_cursor_t *c, rt_stream_t *s, int64_t need,
                       ms_error_t *err) {
    rt_cursors_t *cs = r->cursors;
    for (int round = 0; !s->head && !s->done; round++) {
        if (!s->id) {
            s->done = true;
            break;
        }
        if (round > 1000)
            return err_set(err, MS_ERR_INTERNAL, "shard %s keeps returning empty batches",
                           s->shard);
        if (curs_bytes(cs->find) >= MS_ROUTER_CURSOR_BYTES_MAX)
            return curs_refuse_bytes(cs->find, err);
        bson_t cmd, rep;
        bson_init(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", s->id);
        BSON_APPEND_UTF8(&cmd, "collection", c->coll);
        BSON_APPEND_INT64(&cmd, "batchSize", need < 1 ? 1 : need > INT32_MAX ? INT32_MAX : need);
        BSON_APPEND_UTF8(&cmd, "$db", c->db);
        op_append_lsid(&cmd);   /* the shard cursor was opened in the client's session */
        int rc = rt_shard_call(r, s->shard, &cmd, &rep, err);
        bson_destroy(&cmd);
        if (rc) return rc;
        if ((rc = rt_reply_status(&rep, err)) != 0) {
            bson_destroy(&rep);
            s->id = 0;
            s->done = true;
            err_prefix(err, "getMore on shard %s", s->shard);
            return rc;
        }
        stream_take_reply(cs, s, &rep, "cursor.nextBatch");
    }
    return 0;
}

/* Removes a dotted path from doc into out (initialised here). */
static void strip_path(const bson_t *doc, const char *path, bson_t *out) {
    bson_iter_t it;
    const char *dot = strchr(path, '.');
    size_t hl = dot ? (size_t)(dot - path) : strlen(path);
    bson_init(out);
    if (!bson_iter_init(&it, doc)) return;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bool match = strlen(k) == hl && strncmp(k, path, hl) == 0;
        if (match && !dot) continue;
        if (match && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            uint32_t len;
            const uint8_t *data;
            bson_t sub, sub2;
            bson_iter_document(&it, &len, &data);
            if (bson_init_static(&sub, data, len)) {
                strip_path(&sub, dot + 1, &sub2);
                bson_append_document(out, k, -1, &sub2);
                bson_destroy(&sub2);
                continue;
            }
        }
        bson_append_iter(out, k, -1, &it);
    }
}

/* a + b, saturating at INT64_MAX (both non-negative). */
static int64_t add_sat(int64_t a, int64_t b) {
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* Documents one shard may have to supply for `left` more results: in a sorted merge any
 * one shard may hold all of them, plus what is still to be skipped, never past the limit
 * (MongoDB's mongos forwards batchSize with the same skip/limit arithmetic). */
static int64_t fetch_need(const rt_cursor_t *c, int64_t left) {
    int64_t need = add_sat(left, c->skip_left);
    if (c->limit_left >= 0 && need > add_sat(c->limit_left, c->skip_left))
        need = add_sat(c->limit_left, c->skip_left);
    return need;
}

/* Appends up to max_docs documents of the merge to arr. *exhausted when nothing is left.
 * When the router's buffered bytes reach their cap the batch ends short (the cursor stays
 * open) or, with nothing to return yet, fails with ExceededMemoryLimit. */
static int cursor_fill_batch(router_t *r, rt_cursor_t *c, int64_t max_docs, bson_t *arr,
                             bool *exhausted, ms_error_t *err) {
    rt_cursors_t *cs = r->cursors;
    int64_t n = 0;
    size_t bytes = 0;
    int rc = 0;
    *exhausted = false;
    if (max_docs > 0) c->batch_hint = max_docs;
    while (n < max_docs && bytes < (size_t)MS_BATCH_BYTES_MAX) {
        if (c->limit_left == 0) {
            *exhausted = true;
            break;
        }
        if (n % MS_INTERRUPT_CHECK_DOCS == MS_INTERRUPT_CHECK_DOCS - 1 && (rc = op_check(err)) != 0)
            return rc;
        int best = -1;
        /* Two static bson_t, never copied by assignment: a static bson_t points into
         * itself, so a struct copy would follow the original's later contents. */
        bson_t best_doc, cand;
        for (int i = 0; i < c->n; i++) {
            if ((rc = stream_fill(r, c, &c->s[i], fetch_need(c, max_docs - n), err)) != 0)
                goto stop;
            if (!c->s[i].head) continue;
            if (!c->sort) {
                best = i;
                break;
            }
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&c->s[i].it, &len, &data);
            if (!bson_init_static(&cand, data, len)) continue;
            if (best < 0 || sortspec_compare_docs(c->sort, &cand, &best_doc) < 0) {
                best = i;
                if (!bson_init_static(&best_doc, data, len)) best = -1;
            }
        }
        if (best < 0) {
            *exhausted = true;
            break;
        }
        rt_stream_t *s = &c->s[best];
        uint32_t len;
        const uint8_t *data;
        bson_t doc;
        bson_iter_document(&s->it, &len, &data);
        if (!bson_init_static(&doc, data, len)) {
            stream_next(cs, s);
            continue;
        }
        if (c->skip_left > 0) {
            c->skip_left--;
            stream_next(cs, s);
            continue;
        }
        char idx[24];
        snprintf(idx, sizeof idx, "%lld", (long long)n);
        if (c->nstrip) {
            bson_t cur, nxt;
            bson_copy_to(&doc, &cur);
            for (int i = 0; i < c->nstrip; i++) {
                strip_path(&cur, c->strip[i], &nxt);
                bson_destroy(&cur);
                bson_copy_to(&nxt, &cur);
                bson_destroy(&nxt);
            }
            bson_append_document(arr, idx, -1, &cur);
            bytes += cur.len;
            bson_destroy(&cur);
        } else {
            bson_append_document(arr, idx, -1, &doc);
            bytes += doc.len;
        }
        stream_next(cs, s);   /* doc points into s's batch: only now may it go */
        n++;
        if (c->limit_left > 0) c->limit_left--;
    }
    if (!*exhausted && c->limit_left != 0) {
        /* Exhausted when no stream has anything left: a stream already holding a
         * document answers without asking any shard for more. */
        bool any = false;
        for (int i = 0; i < c->n && !any; i++) any = c->s[i].head;
        for (int i = 0; i < c->n && !any; i++) {
            if ((rc = stream_fill(r, c, &c->s[i], fetch_need(c, c->batch_hint), err)) != 0)
                goto stop;
            any = c->s[i].head;
        }
        *exhausted = !any;
    } else if (c->limit_left == 0) {
        *exhausted = true;
    }
    return 0;
stop:
    if (rc == MS_ERR_EXCEEDED_MEMORY_LIMIT && n > 0) {
        *exhausted = false;   /* a short batch now, the rest once memory is free */
        return 0;
    }
    return rc;
}

/* ---- find -------------------------------------------------------------------------------- */

typedef struct find_args {
    const bson_t *req;
    const bson_t *projection;   /* the shards' projection (may be NULL) */
    int64_t skip, limit;        /* limit 0 = none */
    int64_t batch;              /* the client's batchSize; -1 = none */
} find_args_t;

static void build_find(void *arg, const rt_table_t *t, int shard, int ntargets, bson_t *cmd) {
    find_args_t *a = arg;
    static const char *const skip[] = {"skip", "limit", "projection", "batchSize", NULL};
    (void)t, (void)shard;
    rt_copy_cmd(cmd, a->req, skip);
    if (a->projection) BSON_APPEND_DOCUMENT(cmd, "projection", a->projection);
    if (ntargets == 1) {
        /* The shard applies skip and limit and answers the client's batch as it is. */
        if (a->skip) BSON_APPEND_INT64(cmd, "skip", a->skip);
        if (a->limit) BSON_APPEND_INT64(cmd, "limit", a->limit);
        if (a->batch >= 0) BSON_APPEND_INT64(cmd, "batchSize", a->batch);
        return;
    }
    if (a->limit) BSON_APPEND_INT64(cmd, "limit", a->limit + a->skip);
    /* The merge's first batch may take all of its documents (and the skipped ones) from
     * any one shard: ask each for that many, not the shard's default fill. */
    int64_t first = a->batch >= 0 ? a->batch : MS_FIRST_BATCH_DOCS_DEFAULT;
    int64_t need = first == 0 ? 0 : add_sat(first, a->skip);
    if (a->limit && need > a->limit + a->skip) need = a->limit + a->skip;
    BSON_APPEND_INT64(cmd, "batchSize", need > INT32_MAX ? INT32_MAX : need);
}

static bool get_i64(const bson_t *req, const char *key, int64_t *out) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, req, key) || !bsonx_is_number(&it)) return false;
    return bsonx_as_int64(&it, out);
}

static bool get_doc(const bson_t *req, const char *key, bson_t *out) {
    bson_iter_t it;
    uint32_t len;
    const uint8_t *data;
    if (!bson_iter_init_find(&it, req, key) || !BSON_ITER_HOLDS_DOCUMENT(&it)) return false;
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

/* Whether projection keeps path (inclusion) — exact field or a prefix of it. */
static bool proj_covers(const bson_t *proj, const char *path, bool *inclusion, bool *excluded) {
    bson_iter_t it;
    bool covered = false;
    *excluded = false;
    if (!bson_iter_init(&it, proj)) return false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        size_t kl = strlen(k);
        bool prefix = strncmp(path, k, kl) == 0 && (path[kl] == '\0' || path[kl] == '.');
        bool under = strncmp(k, path, strlen(path)) == 0 && k[strlen(path)] == '.';
        bool truthy = bsonx_truthy(&it);
        if (strcmp(k, "_id") != 0 && !BSON_ITER_HOLDS_DOCUMENT(&it))
            *inclusion = truthy;
        if (prefix && truthy) covered = true;
        if ((prefix || under) && !truthy) *excluded = true;
    }
    return covered;
}

/* The shards' projection when the user's one would drop sort fields: adds them (inclusion)
 * or drops their exclusions, and lists what the router strips afterwards. */
static void adjust_projection(const bson_t *proj, const bson_t *sort, bson_t *out, rt_cursor_t *c) {
    bson_iter_t it, pi;
    bson_init(out);
    bool inclusion = false, excl, other = false, id_only = false;
    /* Decide the projection kind from its non-_id fields; {_id: 1} alone is an inclusion
     * (pymongo's find({}, {"_id": 1}) sorted on another field lost that field's order). */
    if (bson_iter_init(&pi, proj))
        while (bson_iter_next(&pi)) {
            if (strcmp(bson_iter_key(&pi), "_id") == 0) {
                id_only = bsonx_truthy(&pi);
            } else if (!BSON_ITER_HOLDS_DOCUMENT(&pi)) {
                inclusion = bsonx_truthy(&pi);
                other = true;
            }
        }
    if (!other) inclusion = id_only;
    if (!bson_iter_init(&it, sort)) return;
    char drop[RT_STRIP_MAX][256];
    int ndrop = 0;
    while (bson_iter_next(&it)) {
        const char *f = bson_iter_key(&it);
        bool inc2 = inclusion;
        bool covered = proj_covers(proj, f, &inc2, &excl);
        /* _id stays in an inclusion projection unless excluded by name. */
        if (!strncmp(f, "_id", 3) && (f[3] == '\0' || f[3] == '.') && !excl) covered = true;
        if ((inclusion && !covered) || excl) {
            if (c->nstrip < RT_STRIP_MAX) snprintf(c->strip[c->nstrip++], 256, "%s", f);
            if (excl && ndrop < RT_STRIP_MAX) snprintf(drop[ndrop++], 256, "%s", f);
        }
    }
    if (bson_iter_init(&pi, proj))
        while (bson_iter_next(&pi)) {
            const char *k = bson_iter_key(&pi);
            bool skipit = false;
            for (int i = 0; i < ndrop; i++) {
                size_t l = strlen(drop[i]), kl = strlen(k);
                if ((strncmp(k, drop[i], l) == 0 && (k[l] == 0 || k[l] == '.')) ||
                    (strncmp(drop[i], k, kl) == 0 && drop[i][kl] == '.'))
                    skipit = true;
            }
            if (!skipit) bson_append_iter(out, k, -1, &pi);
        }
    if (inclusion)
        for (int i = 0; i < c->nstrip; i++) BSON_APPEND_INT32(out, c->strip[i], 1);
    /* An exclusion projection left empty would mean "everything": fine. */
}

/* The end of a find (or of the cursor over an aggregate's results): the first batch arr
 * as the reply, and the cursor kept behind its id when keep — it must then fit the caps;
 * when it does not, the command fails (and its shard cursors are killed with it) rather
 * than answer a batch it cannot continue. What the command's maxTimeMS leaves goes on to
 * the getMores (idle time not counted). A kept cursor is owned by the registry (*cp set
 * to NULL). */
static int reply_first(router_t *r, rt_cursor_t **cp, const bson_t *arr, bool keep,
                       const char *ns, bson_t *reply, ms_error_t *err) {
    rt_cursor_t *c = *cp;
    bson_t cur;
    int rc;
    c->timed = op_deadline_ms() > 0;
    c->time_left_ms = op_time_left_ms(0);
    int64_t id = 0;
    char cns[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    snprintf(cns, sizeof cns, "%s.%s", c->db, c->coll);
    /* The caps (per connection, the router's, buffered bytes with c's own) are checked
     * and c inserted under one lock, so concurrent finds cannot overshoot. */
    if (keep && (rc = curs_add(r->cursors->find, &c->reg, cns, op_conn(), 0, false, &id, err)) != 0)
        return rc;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY(&cur, "firstBatch", arr);
    BSON_APPEND_INT64(&cur, "id", id);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(reply, &cur);
    if (keep) *cp = NULL;   /* the registry's: another thread may getMore on it at once */
    return 0;
}

static int find_run(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    const char *coll = bson_iter_utf8(&ctx->arg, NULL);
    bson_t filter, sort, proj, shard_proj;
    bool has_filter = get_doc(ctx->req, "filter", &filter);
    bool has_sort = get_doc(ctx->req, "sort", &sort) && !bson_empty(&sort);
    bool has_proj = get_doc(ctx->req, "projection", &proj);
    bool has_shard_proj = false;
    int64_t skip = 0, limit = 0, batch = -1;
    rt_req_t reqs[MS_SHARDS_MAX];
    int n = 0, rc;
    rt_cursor_t *c = mem_calloc_aligned(1, sizeof *c);   /* holds bson_t (common/mem.h) */
    ASSERT(c);
    snprintf(c->db, sizeof c->db, "%s", ctx->db);
    snprintf(c->coll, sizeof c->coll, "%s", coll);
    get_i64(ctx->req, "skip", &skip);
    get_i64(ctx->req, "limit", &limit);
    get_i64(ctx->req, "batchSize", &batch);
    if (skip < 0) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "skip value must be non-negative");
        goto out;
    }
    if (limit < 0) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "limit value must be non-negative");
        goto out;
    }
    if (limit && skip > INT64_MAX - limit) {
        rc = err_set(err, MS_ERR_OVERFLOW, "sum of limit and skip cannot be represented as a 64-bit integer");
        goto out;
    }
    if (has_sort && (rc = sortspec_compile(&sort, &c->sort, err)) != 0) goto out;
    if (has_sort && has_proj) {
        adjust_projection(&proj, &sort, &shard_proj, c);
        has_shard_proj = true;
    }
    find_args_t a = {ctx->req, has_shard_proj ? &shard_proj : has_proj ? &proj : NULL, skip,
                     limit, batch};
    rc = rt_scatter(r, ctx->db, coll, has_filter ? &filter : NULL, build_find, &a, reqs, &n, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) {
        n = 0;
        rc = 0;
    }
    if (rc) goto out;
    c->n = n;
    c->skip_left = n > 1 ? skip : 0;
    c->limit_left = n > 1 && limit ? limit : -1;
    for (int i = 0; i < n; i++) {
        memcpy(c->s[i].shard, reqs[i].shard, sizeof c->s[i].shard);
        stream_take_reply(r->cursors, &c->s[i], &reqs[i].reply, "cursor.firstBatch");
        reqs[i].rc = -1;   /* the reply moved into the stream */
    }
    bool exhausted = false, single = false;
    bson_iter_t sb;
    if (bson_iter_init_find(&sb, ctx->req, "singleBatch")) single = bsonx_truthy(&sb);
    bson_t arr;
    char ns[MS_NS_BYTES_MAX + 1];
    snprintf(ns, sizeof ns, "%s.%s", ctx->db, coll);
    bson_init(&arr);
    rc = cursor_fill_batch(r, c, batch >= 0 ? batch : MS_FIRST_BATCH_DOCS_DEFAULT, &arr,
                           &exhausted, err);
    if (rc == 0 && (rc = reply_first(r, &c, &arr, !exhausted && !single, ns, reply, err)) != 0)
        log_info("find refused ns=%s.%s conn=%u errmsg=\"%s\"", ctx->db, coll, op_conn(),
                 err->msg);
    bson_destroy(&arr);
out:
    for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
    if (has_shard_proj) bson_destroy(&shard_proj);
    cursor_free(r, c);
    return rc;
}

int rt_cmd_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    /* The config database lives on the config server (as in MongoDB). */
    if (!strcmp(ctx->db, "config")) return rt_cfg_cursor_cmd(ctx, reply, err);
    return find_run(ctx, reply, err);
}

/* A router cursor over results the router computed itself (aggregate's merger): one
 * stream with no shard cursor behind it, whose only "batch" is *results (an array,
 * taken). The same getMore / killCursors / reaping / caps as a find's cursor; the held
 * bytes count against MS_ROUTER_CURSOR_BYTES_MAX until consumed. */
int rt_cursor_from_results(router_t *r, const char *db, const char *coll, bson_t *results,
                           int64_t batch, bson_t *reply, ms_error_t *err) {
    rt_cursor_t *c = mem_calloc_aligned(1, sizeof *c);   /* holds bson_t (common/mem.h) */
    bson_t holder, cur, arr;
    bool exhausted = false;
    char ns[MS_NS_BYTES_MAX + 1];
    int rc;
    ASSERT(c);
    c->limit_left = -1;
    snprintf(c->db, sizeof c->db, "%s", db);
    snprintf(c->coll, sizeof c->coll, "%s", coll);
    snprintf(ns, sizeof ns, "%s.%s", db, coll);
    bson_init(&holder);
    BSON_APPEND_DOCUMENT_BEGIN(&holder, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_ARRAY(&cur, "firstBatch", results);
    bson_append_document_end(&holder, &cur);
    bson_destroy(results);
    c->n = 1;
    stream_take_reply(r->cursors, &c->s[0], &holder, "cursor.firstBatch");
    bson_init(&arr);
    rc = cursor_fill_batch(r, c, batch >= 0 ? batch : MS_FIRST_BATCH_DOCS_DEFAULT, &arr,
                           &exhausted, err);
    if (rc == 0) rc = reply_first(r, &c, &arr, !exhausted, ns, reply, err);
    bson_destroy(&arr);
    cursor_free(r, c);
    return rc;
}

int rt_cmd_get_more(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    /* Cursors on config collections live on the config server: route by $db. */
    if (!strcmp(ctx->db, "config")) return cfg_get_more(ctx, reply, err);
    int64_t id = 0, batch = RT_GETMORE_DOCS_DEFAULT;
    if (!bsonx_as_int64(&ctx->arg, &id))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "getMore: cursor id must be a number");
    get_i64(ctx->req, "batchSize", &batch);
    if (batch <= 0) batch = RT_GETMORE_DOCS_DEFAULT;
    /* MongoDB's getMore: the cursor answers only on its own namespace ($db + collection;
     * dispatch validated both names, CMD_NS_FIELD). The pin: CursorNotFound, CursorInUse
     * (another getMore holds it), or Unauthorized for another namespace. */
    bson_iter_t cit;
    char want[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    curs_t *reg = NULL;
    snprintf(want, sizeof want, "%s.%s", ctx->db,
             cmd_field(ctx, "collection", &cit) && BSON_ITER_HOLDS_UTF8(&cit)
                 ? bson_iter_utf8(&cit, NULL) : "");
    int prc = curs_pin(r->cursors->find, id, want, &reg, err);
    if (prc) return prc;
    rt_cursor_t *c = curs_entry(reg, rt_cursor_t, reg);
    /* mongos: getMore's maxTimeMS is only the await time of a tailable awaitData cursor
     * (none here); an ordinary cursor runs on what its find's maxTimeMS left. */
    if (op_deadline_ms() > 0) {
        curs_unpin(r->cursors->find, reg, false);
        return err_set(err, MS_ERR_BAD_VALUE,
                       "maxTimeMS can only be used with getMore for tailable, awaitData cursors");
    }
    if (c->timed) op_set_deadline_ms(time_mono_ms() + c->time_left_ms);
    bson_t cur, arr;
    bool exhausted = false;
    char ns[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    snprintf(ns, sizeof ns, "%s.%s", c->db, c->coll);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY_BEGIN(&cur, "nextBatch", &arr);
    int rc = op_check(err);
    if (rc == 0) rc = cursor_fill_batch(r, c, batch, &arr, &exhausted, err);
    if (c->timed) c->time_left_ms = op_time_left_ms(0);
    bson_append_array_end(&cur, &arr);
    BSON_APPEND_INT64(&cur, "id", rc == 0 && !exhausted ? id : 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(reply, &cur);
    /* ExceededMemoryLimit consumed nothing: the client may retry once memory frees. A
     * killCursors meanwhile disposes of the cursor here either way. */
    curs_unpin(r->cursors->find, reg, rc != MS_ERR_EXCEEDED_MEMORY_LIMIT && (rc || exhausted));
    return rc;
}

int rt_cmd_kill_cursors(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    if (!strcmp(ctx->db, "config")) return cfg_kill_cursors(ctx, reply, err);
    bson_iter_t it, arr;
    if (!bson_iter_init_find(&it, ctx->req, "cursors") || !bson_iter_recurse(&it, &arr))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "killCursors needs a cursors array");
    /* A cursor a getMore holds is killed too: freed (and its shard cursors killed) when
     * that getMore ends, as mongos's ClusterCursorManager does. */
    int rc = cmd_check_cursor_ids(ctx, err);
    if (rc) return rc;
    curs_kill_ids(r->cursors->find, &arr, false, reply);
    return 0;
}

/* ---- count ----------------------------------------------------------------------------- */

typedef struct count_args {
    const bson_t *req;
    int64_t skip, limit;
} count_args_t;

static void build_count(void *arg, const rt_table_t *t, int shard, int ntargets, bson_t *cmd) {
    count_args_t *a = arg;
    static const char *const skip[] = {"skip", "limit", NULL};
    (void)t, (void)shard;
    rt_copy_cmd(cmd, a->req, skip);
    if (ntargets == 1) {
        if (a->skip) BSON_APPEND_INT64(cmd, "skip", a->skip);
        if (a->limit) BSON_APPEND_INT64(cmd, "limit", a->limit);
    } else if (a->limit) {
        BSON_APPEND_INT64(cmd, "limit", a->limit + a->skip);
    }
}

int rt_cmd_count(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    if (!strcmp(ctx->db, "config")) return rt_cmd_to_config(ctx, reply, err);
    const char *coll = bson_iter_utf8(&ctx->arg, NULL);
    bson_t q;
    bool has_q = get_doc(ctx->req, "query", &q);
    count_args_t a = {ctx->req, 0, 0};
    rt_req_t reqs[MS_SHARDS_MAX];
    int n = 0;
    get_i64(ctx->req, "skip", &a.skip);
    get_i64(ctx->req, "limit", &a.limit);
    if (a.limit < 0) a.limit = -a.limit;   /* MongoDB: a negative limit counts like its absolute value */
    if (a.skip < 0) return err_set(err, MS_ERR_BAD_VALUE, "skip value is negative in count query");
    int rc = rt_scatter(r, ctx->db, coll, has_q ? &q : NULL, build_count, &a, reqs, &n, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) {
        BSON_APPEND_INT64(reply, "n", 0);
        return 0;
    }
    if (rc) return rc;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        bson_iter_t it;
        int64_t v = 0;
        if (bson_iter_init_find(&it, &reqs[i].reply, "n")) bsonx_as_int64(&it, &v);
        total += v;
        rt_req_clear(&reqs[i]);
    }
    if (n > 1) {
        total = total > a.skip ? total - a.skip : 0;
        if (a.limit && total > a.limit) total = a.limit;
    }
    if (total <= INT32_MAX) BSON_APPEND_INT32(reply, "n", (int32_t)total);
    else BSON_APPEND_INT64(reply, "n", total);
    return 0;
}

/* ---- distinct ------------------------------------------------------------------------------ */

static void build_distinct(void *arg, const rt_table_t *t, int shard, int ntargets, bson_t *cmd) {
    (void)t, (void)shard, (void)ntargets;
    rt_copy_cmd(cmd, (const bson_t *)arg, NULL);
}

/* One value of a shard's reply, by position: the replies stay where rt_send_all put
 * them and only these small records are sorted (a bson_t must never be moved by qsort
 * or realloc — common/mem.h). */
typedef struct dval {
    const uint8_t *arr;  /* the shard's values array (borrowed from its reply in reqs) */
    uint32_t arr_len;
    uint32_t off;        /* bson_iter_offset of the value inside arr */
    uint32_t keylen;
    uint32_t seq;        /* arrival order: ties keep it, so the answer is deterministic */
} dval_t;

static bool dval_iter(const dval_t *v, bson_iter_t *it) {
    return bson_iter_init_from_data_at_offset(it, v->arr, v->arr_len, v->off, v->keylen);
}

static int dval_value_cmp(const dval_t *a, const dval_t *b) {
    bson_iter_t x, y;
    if (!dval_iter(a, &x) || !dval_iter(b, &y)) return 0;
    return bsonx_compare_values(&x, &y);
}

static int dval_cmp(const void *pa, const void *pb) {
    const dval_t *a = pa, *b = pb;
    int c = dval_value_cmp(a, b);
    if (c) return c;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* distinct: every targeted shard's values, merged in BSON order with one of each kept
 * (1, 1L and 1.0 are one value), as mongos's distinct merges its shards' answers. */
int rt_cmd_distinct(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    if (!strcmp(ctx->db, "config")) return rt_cmd_to_config(ctx, reply, err);
    const char *coll = bson_iter_utf8(&ctx->arg, NULL);
    bson_t q, out;
    bool has_q = get_doc(ctx->req, "query", &q);
    rt_req_t reqs[MS_SHARDS_MAX];
    int n = 0;
    dval_t *vals = NULL;
    size_t nv = 0, cap = 0, k = 0;
    int rc = rt_scatter(r, ctx->db, coll, has_q ? &q : NULL, build_distinct, (void *)ctx->req, reqs,
                     &n, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) n = 0, rc = 0;
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        bson_iter_t it, arr;
        const uint8_t *data;
        uint32_t len;
        if (!bson_iter_init_find(&it, &reqs[i].reply, "values") || !BSON_ITER_HOLDS_ARRAY(&it))
            continue;
        bson_iter_array(&it, &len, &data);
        if (!bson_iter_init_from_data(&arr, data, len)) continue;
        /* Each shard's reply is at most 16 MB, so its values fit uint32_t offsets; a value
         * takes at least 2 bytes there, which bounds nv. */
        while (bson_iter_next(&arr)) {
            if (nv == cap) {
                cap = cap ? 2 * cap : 64;
                vals = xrealloc(vals, cap * sizeof *vals);
            }
            vals[nv].arr = data;
            vals[nv].arr_len = len;
            vals[nv].off = bson_iter_offset(&arr);
            vals[nv].keylen = bson_iter_key_len(&arr);
            vals[nv].seq = (uint32_t)nv;
            nv++;
        }
    }
    if (nv > 1) qsort(vals, nv, sizeof *vals, dval_cmp);
    BSON_APPEND_ARRAY_BEGIN(reply, "values", &out);
    for (size_t i = 0; i < nv; i++) {
        bson_iter_t it;
        char idx[24];
        if (i > 0 && dval_value_cmp(&vals[i - 1], &vals[i]) == 0) continue;
        if (!dval_iter(&vals[i], &it)) continue;
        snprintf(idx, sizeof idx, "%zu", k++);
        bson_append_iter(&out, idx, -1, &it);
    }
    bson_append_array_end(reply, &out);
    free(vals);
    for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
    return 0;
}
