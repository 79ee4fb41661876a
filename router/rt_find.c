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
#include "common/log.h"
#include "common/opctx.h"
#include "common/sortspec.h"
#include "router/router.h"

#define RT_STRIP_MAX 8

/* ---- versioned scatter with stale retries ---------------------------------------------- */

typedef void (*build_fn)(void *arg, const rt_table_t *t, int shard, int ntargets, bson_t *cmd);

static void kill_reply_cursor(router_t *r, const char *shard, const char *db, const char *coll,
                              const bson_t *reply) {
    bson_iter_t it;
    if (!bson_iter_init(&it, reply) || !bson_iter_find_descendant(&it, "cursor.id", &it)) return;
    int64_t id = bson_iter_as_int64(&it);
    if (!id) return;
    bson_t cmd, rep, arr;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "killCursors", coll);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &arr);
    BSON_APPEND_INT64(&arr, "0", id);
    bson_append_array_end(&cmd, &arr);
    /* Cleanup runs even after the operation's maxTimeMS has expired (the default
     * deadline applies), or the shard's cursor would wait out its idle timeout. */
    long long dl = op_deadline_ms();
    op_set_deadline_ms(0);
    if (rt_shard_call(r, shard, &cmd, &rep, NULL) == 0) bson_destroy(&rep);
    op_set_deadline_ms(dl);
    bson_destroy(&cmd);
}

/* Targets filter (NULL = every owning shard), sends the commands fn builds, retries on
 * StaleConfig. On 0 every reqs[i] holds an ok reply; caller clears them. NamespaceNotFound
 * = unsharded collection in a database that does not exist (an empty answer). */
static int scatter(router_t *r, const char *db, const char *coll, const bson_t *filter,
                   build_fn fn, void *arg, rt_req_t *reqs, int *nreqs, ms_error_t *err) {
    char ns[MS_NS_BYTES_MAX + 1];
    snprintf(ns, sizeof ns, "%s.%s", db, coll);
    *nreqs = 0;
    for (int attempt = 0; attempt <= MS_STALE_RETRIES_MAX; attempt++) {
        rt_table_t *t = NULL;
        int rc = rt_table_get(r, ns, &t, err), n = 0;
        if (rc) return rc;
        if (!t->sharded) {
            char primary[RT_NAME_BYTES_MAX];
            rt_db_version_t dbv;
            rc = rt_db_get(r, db, false, primary, sizeof primary, &dbv, err);
            if (rc) {
                rt_table_release(t);
                return rc;
            }
            memset(&reqs[0], 0, sizeof reqs[0]);
            snprintf(reqs[0].shard, sizeof reqs[0].shard, "%s", primary);
            bson_init(&reqs[0].cmd);
            fn(arg, t, -1, 1, &reqs[0].cmd);
            rt_append_version(&reqs[0].cmd, t, -1);
            rt_append_db_version(&reqs[0].cmd, &dbv);
            n = 1;
        } else {
            uint64_t mask = 0;
            bool point = false;
            bson_t empty = BSON_INITIALIZER;
            rc = rt_target_filter(t, filter ? filter : &empty, &mask, &point, err);
            bson_destroy(&empty);
            if (rc) {
                rt_table_release(t);
                return rc;
            }
            int nt = __builtin_popcountll(mask);
            for (int i = 0; i < t->rt.nshards; i++) {
                if (!(mask & (1ull << i))) continue;
                memset(&reqs[n], 0, sizeof reqs[n]);
                snprintf(reqs[n].shard, sizeof reqs[n].shard, "%s", t->rt.shards[i]);
                bson_init(&reqs[n].cmd);
                fn(arg, t, i, nt, &reqs[n].cmd);
                rt_append_version(&reqs[n].cmd, t, i);
                n++;
            }
            atomic_fetch_add(nt == 1 ? &r->targeted_ops : &r->scatter_ops, 1);
        }
        rt_send_all(r, reqs, n);
        int stale = -1, stale_db = -1, fail = -1;
        for (int i = 0; i < n; i++) {
            if (reqs[i].rc) {
                if (fail < 0) fail = i;
                continue;
            }
            ms_error_t e2;
            int code = rt_reply_status(&reqs[i].reply, &e2);
            if (code == MS_ERR_STALE_CONFIG) {
                if (stale < 0) stale = i;
            } else if (code == MS_ERR_STALE_DB_VERSION) {
                if (stale_db < 0) stale_db = i;
            } else if (code && fail < 0) {
                fail = i;
            }
        }
        if (stale < 0 && stale_db < 0 && fail < 0) {
            *nreqs = n;
            rt_table_release(t);
            return 0;
        }
        /* Close whatever the shards that answered opened, then retry or fail. */
        for (int i = 0; i < n; i++)
            if (reqs[i].rc == 0 && rt_reply_status(&reqs[i].reply, NULL) == 0)
                kill_reply_cursor(r, reqs[i].shard, db, coll, &reqs[i].reply);
        if (fail >= 0) {
            if (reqs[fail].rc) *err = reqs[fail].err;
            else rc = rt_reply_status(&reqs[fail].reply, err);
            rc = reqs[fail].rc ? reqs[fail].rc : err->code;
            if (!reqs[fail].rc) err_prefix(err, "shard %s", reqs[fail].shard);  /* rt_shard_call named it */
            for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
            rt_table_release(t);
            return rc;
        }
        /* StaleDbVersion: the primary moved (or the database was re-created): forget
         * the database entry; StaleConfig: refresh the collection's table. */
        if (stale_db >= 0) rt_note_stale_db(r, db, reqs[stale_db].shard, &reqs[stale_db].reply);
        if (stale >= 0) rt_note_stale(r, ns, reqs[stale].shard, &reqs[stale].reply);
        for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
        rc = stale >= 0 ? rt_table_refresh(r, ns, t, err) : 0;
        rt_table_release(t);
        if (rc) return rc;
    }
    return err_set(err, MS_ERR_STALE_CONFIG,
                   "%s: shards kept answering StaleConfig or StaleDbVersion after %d refreshes",
                   ns, MS_STALE_RETRIES_MAX);
}

/* ---- router cursors -------------------------------------------------------------------- */

typedef struct rt_stream {
    char shard[RT_NAME_BYTES_MAX];
    int64_t id;            /* shard cursor; 0 = exhausted after the buffered batch */
    bson_t reply;          /* the latest batch */
    bool have_reply;
    bson_iter_t it;        /* over the batch array */
    bool head;             /* it is positioned on an unconsumed document */
    bool done;
} rt_stream_t;

typedef struct rt_cursor {
    int64_t id;
    char db[RT_NAME_BYTES_MAX];
    char coll[MS_NS_BYTES_MAX + 1];
    sortspec_t *sort;
    int n;
    rt_stream_t s[MS_SHARDS_MAX];
    int64_t skip_left;
    int64_t limit_left;    /* -1 = none */
    int nstrip;
    char strip[RT_STRIP_MAX][256];
    long long last_ms;
    bool busy;
    struct rt_cursor *next;
} rt_cursor_t;

struct rt_cursors {
    pthread_mutex_t mu;
    rt_cursor_t *list;
    int count;
};

int rt_cursors_open(rt_cursors_t **out) {
    rt_cursors_t *c = calloc(1, sizeof *c);
    if (!c) return MS_ERR_EXCEEDED_MEMORY_LIMIT;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
}

static void cursor_free(router_t *r, rt_cursor_t *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        rt_stream_t *s = &c->s[i];
        if (s->id && r) {
            bson_t cmd, rep, arr;
            bson_init(&cmd);
            BSON_APPEND_UTF8(&cmd, "killCursors", c->coll);
            BSON_APPEND_UTF8(&cmd, "$db", c->db);
            BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &arr);
            BSON_APPEND_INT64(&arr, "0", s->id);
            bson_append_array_end(&cmd, &arr);
            long long dl = op_deadline_ms();   /* cleanup outlives maxTimeMS, as above */
            op_set_deadline_ms(0);
            if (rt_shard_call(r, s->shard, &cmd, &rep, NULL) == 0) bson_destroy(&rep);
            op_set_deadline_ms(dl);
            bson_destroy(&cmd);
        }
        if (s->have_reply) bson_destroy(&s->reply);
    }
    sortspec_free(c->sort);
    free(c);
}

void rt_cursors_close(router_t *r, rt_cursors_t *cs) {
    if (!cs) return;
    for (rt_cursor_t *c = cs->list, *n; c; c = n) {
        n = c->next;
        cursor_free(r, c);
    }
    pthread_mutex_destroy(&cs->mu);
    free(cs);
}

int rt_cursors_count(router_t *r) {
    pthread_mutex_lock(&r->cursors->mu);
    int n = r->cursors->count;
    pthread_mutex_unlock(&r->cursors->mu);
    return n;
}

void rt_cursors_reap(router_t *r) {
    rt_cursors_t *cs = r->cursors;
    rt_cursor_t *dead = NULL;
    long long now = time_mono_ms();
    pthread_mutex_lock(&cs->mu);
    for (rt_cursor_t **pp = &cs->list; *pp;) {
        rt_cursor_t *c = *pp;
        if (!c->busy && now - c->last_ms > MS_CURSOR_IDLE_MS_MAX) {
            *pp = c->next;
            c->next = dead;
            dead = c;
            cs->count--;
        } else {
            pp = &c->next;
        }
    }
    pthread_mutex_unlock(&cs->mu);
    for (rt_cursor_t *c = dead, *n; c; c = n) {
        n = c->next;
        log_info("cursor timed out id=%lld ns=%s.%s", (long long)c->id, c->db, c->coll);
        cursor_free(r, c);
    }
}

static void stream_take_reply(rt_stream_t *s, bson_t *reply, const char *batch_key) {
    bson_iter_t it;
    if (s->have_reply) bson_destroy(&s->reply);
    bson_steal(&s->reply, reply);   /* reply's storage moves here */
    s->have_reply = true;
    s->id = 0;
    s->head = false;
    memset(&s->it, 0, sizeof s->it);
    if (bson_iter_init(&it, &s->reply) && bson_iter_find_descendant(&it, "cursor.id", &it))
        s->id = bson_iter_as_int64(&it);
    if (!(bson_iter_init(&it, &s->reply) && bson_iter_find_descendant(&it, batch_key, &it) &&
          BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &s->it))) {
        /* no batch: nothing buffered */
        bson_iter_init(&s->it, &s->reply);
        while (bson_iter_next(&s->it)) {
        }
    }
}

/* Positions stream s on its next document, fetching with getMore when its batch is used
 * up. Bounded: a shard that keeps sending empty batches with a live cursor is an error. */
static int stream_fill(router_t *r, rt_cursor_t *c, rt_stream_t *s, ms_error_t *err) {
    for (int round = 0; !s->head && !s->done; round++) {
        if (bson_iter_next(&s->it)) {
            if (BSON_ITER_HOLDS_DOCUMENT(&s->it)) s->head = true;
            continue;
        }
        if (!s->id) {
            s->done = true;
            break;
        }
        if (round > 1000)
            return err_set(err, MS_ERR_INTERNAL, "shard %s keeps returning empty batches",
                           s->shard);
        bson_t cmd, rep;
        bson_init(&cmd);
        BSON_APPEND_INT64(&cmd, "getMore", s->id);
        BSON_APPEND_UTF8(&cmd, "collection", c->coll);
        BSON_APPEND_UTF8(&cmd, "$db", c->db);
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
        stream_take_reply(s, &rep, "cursor.nextBatch");
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

/* Appends up to max_docs documents of the merge to arr. *exhausted when nothing is left. */
static int cursor_fill_batch(router_t *r, rt_cursor_t *c, int64_t max_docs, bson_t *arr,
                             bool *exhausted, ms_error_t *err) {
    int64_t n = 0;
    size_t bytes = 0;
    *exhausted = false;
    while (n < max_docs && bytes < (size_t)MS_BATCH_BYTES_MAX) {
        if (c->limit_left == 0) {
            *exhausted = true;
            break;
        }
        int best = -1;
        /* Two static bson_t, never copied by assignment: a static bson_t points into
         * itself, so a struct copy would follow the original's later contents. */
        bson_t best_doc, cand;
        for (int i = 0; i < c->n; i++) {
            int rc = stream_fill(r, c, &c->s[i], err);
            if (rc) return rc;
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
        s->head = false;
        if (!bson_init_static(&doc, data, len)) continue;
        if (c->skip_left > 0) {
            c->skip_left--;
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
        n++;
        if (c->limit_left > 0) c->limit_left--;
    }
    if (!*exhausted && c->limit_left != 0) {
        /* Exhausted when no stream has anything left. */
        bool any = false;
        for (int i = 0; i < c->n && !any; i++) {
            int rc = stream_fill(r, c, &c->s[i], err);
            if (rc) return rc;
            any = c->s[i].head;
        }
        *exhausted = !any;
    } else if (c->limit_left == 0) {
        *exhausted = true;
    }
    return 0;
}

/* Cursor ids: splitmix64 over a per-process sequence seeded from the clock and pid, so
 * two routers (or two runs) do not hand out the same ids, as rand() unseeded would. */
static uint64_t cursor_id_next(void) {
    static atomic_uint_fast64_t seq;
    static atomic_bool seeded;
    if (!atomic_exchange(&seeded, true))
        atomic_fetch_add(&seq, (uint64_t)time_now_ms() * 1000003u ^ (uint64_t)getpid() << 40);
    uint64_t z = atomic_fetch_add(&seq, 0x9e3779b97f4a7c15ull) + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void cursor_register(router_t *r, rt_cursor_t *c) {
    rt_cursors_t *cs = r->cursors;
    pthread_mutex_lock(&cs->mu);
    for (int tries = 0; tries < 64; tries++) {   /* bounded: a clash is ~2^-62 per try */
        c->id = (int64_t)(cursor_id_next() & 0x3fffffffffffffffull);
        bool clash = c->id == 0;
        for (rt_cursor_t *o = cs->list; o && !clash; o = o->next) clash = o->id == c->id;
        if (!clash) break;
    }
    c->last_ms = time_mono_ms();
    c->next = cs->list;
    cs->list = c;
    cs->count++;
    pthread_mutex_unlock(&cs->mu);
}

static rt_cursor_t *cursor_take(router_t *r, int64_t id) {
    rt_cursors_t *cs = r->cursors;
    rt_cursor_t *found = NULL;
    pthread_mutex_lock(&cs->mu);
    for (rt_cursor_t *c = cs->list; c; c = c->next)
        if (c->id == id && !c->busy) {
            c->busy = true;
            found = c;
            break;
        }
    pthread_mutex_unlock(&cs->mu);
    return found;
}

static void cursor_unlink(router_t *r, rt_cursor_t *c) {
    rt_cursors_t *cs = r->cursors;
    pthread_mutex_lock(&cs->mu);
    for (rt_cursor_t **pp = &cs->list; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            cs->count--;
            break;
        }
    pthread_mutex_unlock(&cs->mu);
}

static void cursor_put(router_t *r, rt_cursor_t *c) {
    pthread_mutex_lock(&r->cursors->mu);
    c->busy = false;
    c->last_ms = time_mono_ms();
    pthread_mutex_unlock(&r->cursors->mu);
}

/* ---- find -------------------------------------------------------------------------------- */

typedef struct find_args {
    const bson_t *req;
    const bson_t *projection;   /* the shards' projection (may be NULL) */
    int64_t skip, limit;        /* limit 0 = none */
    int64_t batch;
} find_args_t;

static void build_find(void *arg, const rt_table_t *t, int shard, int ntargets, bson_t *cmd) {
    find_args_t *a = arg;
    static const char *const skip[] = {"skip", "limit", "projection", "batchSize", NULL};
    (void)t, (void)shard;
    rt_copy_cmd(cmd, a->req, skip);
    if (a->projection) BSON_APPEND_DOCUMENT(cmd, "projection", a->projection);
    if (ntargets == 1) {
        if (a->skip) BSON_APPEND_INT64(cmd, "skip", a->skip);
        if (a->limit) BSON_APPEND_INT64(cmd, "limit", a->limit);
    } else if (a->limit) {
        BSON_APPEND_INT64(cmd, "limit", a->limit + a->skip);
    }
    if (a->batch > 0) BSON_APPEND_INT64(cmd, "batchSize", a->batch);
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
    bool inclusion = false, excl;
    /* Decide the projection kind from its non-_id fields. */
    if (bson_iter_init(&pi, proj))
        while (bson_iter_next(&pi))
            if (strcmp(bson_iter_key(&pi), "_id") != 0 && !BSON_ITER_HOLDS_DOCUMENT(&pi))
                inclusion = bsonx_truthy(&pi);
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
    rt_cursor_t *c = calloc(1, sizeof *c);
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
    rc = scatter(r, ctx->db, coll, has_filter ? &filter : NULL, build_find, &a, reqs, &n, err);
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
        stream_take_reply(&c->s[i], &reqs[i].reply, "cursor.firstBatch");
        reqs[i].rc = -1;   /* the reply moved into the stream */
    }
    bool exhausted = false, single = false;
    bson_iter_t sb;
    if (bson_iter_init_find(&sb, ctx->req, "singleBatch")) single = bsonx_truthy(&sb);
    bson_t cur, arr;
    char ns[MS_NS_BYTES_MAX + 1];
    snprintf(ns, sizeof ns, "%s.%s", ctx->db, coll);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &arr);
    rc = cursor_fill_batch(r, c, batch >= 0 ? batch : MS_FIRST_BATCH_DOCS_DEFAULT, &arr,
                           &exhausted, err);
    bson_append_array_end(&cur, &arr);
    if (rc == 0 && !exhausted && !single) {
        cursor_register(r, c);
        BSON_APPEND_INT64(&cur, "id", c->id);
        cursor_put(r, c);
        c = NULL;
    } else {
        BSON_APPEND_INT64(&cur, "id", 0);
    }
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(reply, &cur);
out:
    for (int i = 0; i < n; i++) rt_req_clear(&reqs[i]);
    if (has_shard_proj) bson_destroy(&shard_proj);
    cursor_free(r, c);
    return rc;
}

int rt_cmd_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    /* The config database lives on the config server (as in MongoDB). */
    if (!strcmp(ctx->db, "config")) return rt_cmd_to_config(ctx, reply, err);
    return find_run(ctx, reply, err);
}

int rt_cmd_get_more(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    /* Cursors on config collections live on the config server: route by $db. */
    if (!strcmp(ctx->db, "config")) return rt_cmd_to_config(ctx, reply, err);
    int64_t id = 0, batch = RT_GETMORE_DOCS_DEFAULT;
    if (!bsonx_as_int64(&ctx->arg, &id))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "getMore: cursor id must be a number");
    get_i64(ctx->req, "batchSize", &batch);
    if (batch <= 0) batch = RT_GETMORE_DOCS_DEFAULT;
    rt_cursor_t *c = cursor_take(r, id);
    if (!c) return err_set(err, MS_ERR_CURSOR_NOT_FOUND, "cursor id %lld not found", (long long)id);
    bson_t cur, arr;
    bool exhausted = false;
    char ns[RT_NAME_BYTES_MAX + MS_NS_BYTES_MAX + 2];
    snprintf(ns, sizeof ns, "%s.%s", c->db, c->coll);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY_BEGIN(&cur, "nextBatch", &arr);
    int rc = cursor_fill_batch(r, c, batch, &arr, &exhausted, err);
    bson_append_array_end(&cur, &arr);
    BSON_APPEND_INT64(&cur, "id", rc == 0 && !exhausted ? c->id : 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    bson_append_document_end(reply, &cur);
    if (rc || exhausted) {
        cursor_unlink(r, c);
        cursor_free(r, c);
    } else {
        cursor_put(r, c);
    }
    return rc;
}

int rt_cmd_kill_cursors(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    if (!strcmp(ctx->db, "config")) return rt_cmd_to_config(ctx, reply, err);
    bson_iter_t it, arr;
    bson_t killed, notfound, empty;
    (void)err;
    if (!bson_iter_init_find(&it, ctx->req, "cursors") || !bson_iter_recurse(&it, &arr))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "killCursors needs a cursors array");
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsKilled", &killed);
    int nk = 0, nn = 0;
    bson_t nf_ids;
    bson_init(&nf_ids);
    for (int i = 0; i < MS_CURSORS_MAX && bson_iter_next(&arr); i++) {
        int64_t id;
        char idx[16];
        if (!bsonx_as_int64(&arr, &id)) continue;
        rt_cursor_t *c = cursor_take(r, id);
        if (c) {
            cursor_unlink(r, c);
            cursor_free(r, c);
            snprintf(idx, sizeof idx, "%d", nk++);
            BSON_APPEND_INT64(&killed, idx, id);
        } else {
            snprintf(idx, sizeof idx, "%d", nn++);
            BSON_APPEND_INT64(&nf_ids, idx, id);
        }
    }
    bson_append_array_end(reply, &killed);
    bson_append_array(reply, "cursorsNotFound", -1, &nf_ids);
    bson_destroy(&nf_ids);
    (void)notfound;
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsAlive", &empty);
    bson_append_array_end(reply, &empty);
    BSON_APPEND_ARRAY_BEGIN(reply, "cursorsUnknown", &empty);
    bson_append_array_end(reply, &empty);
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
    int rc = scatter(r, ctx->db, coll, has_q ? &q : NULL, build_count, &a, reqs, &n, err);
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

typedef struct dval {
    bson_t holder;   /* {"": value} */
} dval_t;

static int dval_cmp(const void *a, const void *b) {
    bson_iter_t x, y;
    bson_iter_init(&x, &((const dval_t *)a)->holder);
    bson_iter_init(&y, &((const dval_t *)b)->holder);
    bson_iter_next(&x);
    bson_iter_next(&y);
    return bsonx_compare_values(&x, &y);
}

int rt_cmd_distinct(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    router_t *r = ctx->app;
    if (!strcmp(ctx->db, "config")) return rt_cmd_to_config(ctx, reply, err);
    const char *coll = bson_iter_utf8(&ctx->arg, NULL);
    bson_t q;
    bool has_q = get_doc(ctx->req, "query", &q);
    rt_req_t reqs[MS_SHARDS_MAX];
    int n = 0;
    dval_t *vals = NULL;
    size_t nv = 0, cap = 0;
    int rc = scatter(r, ctx->db, coll, has_q ? &q : NULL, build_distinct, (void *)ctx->req, reqs,
                     &n, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) n = 0, rc = 0;
    if (rc) return rc;
    for (int i = 0; i < n; i++) {
        bson_iter_t it, arr;
        if (bson_iter_init_find(&it, &reqs[i].reply, "values") && bson_iter_recurse(&it, &arr)) {
            while (bson_iter_next(&arr)) {
                if (nv == cap) {
                    cap = cap ? 2 * cap : 64;
                    vals = xrealloc(vals, cap * sizeof *vals);
                }
                bson_init(&vals[nv].holder);
                bson_append_iter(&vals[nv].holder, "", 0, &arr);
                nv++;
            }
        }
        rt_req_clear(&reqs[i]);
    }
    if (nv > 1) qsort(vals, nv, sizeof *vals, dval_cmp);
    bson_t out;
    BSON_APPEND_ARRAY_BEGIN(reply, "values", &out);
    size_t k = 0;
    for (size_t i = 0; i < nv; i++) {
        if (i > 0 && dval_cmp(&vals[i - 1], &vals[i]) == 0) continue;
        bson_iter_t it;
        char idx[24];
        bson_iter_init(&it, &vals[i].holder);
        bson_iter_next(&it);
        snprintf(idx, sizeof idx, "%zu", k++);
        bson_append_iter(&out, idx, -1, &it);
    }
    bson_append_array_end(reply, &out);
    for (size_t i = 0; i < nv; i++) bson_destroy(&vals[i].holder);
    free(vals);
    return 0;
}
