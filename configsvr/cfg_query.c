/*
 * cfg_query.c — the query engine over the config collections (bin/configsvr): the config
 * database as MongoDB users know it. find, count and aggregate on config.<collection>
 * (documents built from the catalog in MongoDB's shapes, then filtered, sorted, skipped,
 * limited and projected with the query engine), cursors over those results (getMore,
 * killCursors, idle timeout), and update on config.settings (balancer, chunksize,
 * automerge, ...), validated. Every other config collection is read-only here.
 *
 * A find materialises its whole result when it runs — the snapshot a cursor serves is
 * the catalog as it was at find time (MongoDB's config reads are snapshot reads too) —
 * and hands it out in batches (first batch 101 documents unless batchSize says
 * otherwise, every batch at most 16 MB, getMore without batchSize fills 16 MB).
 */
#include <stdlib.h>
#include <string.h>

#include "common/agg.h"
#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/project.h"
#include "common/query.h"
#include "common/sortspec.h"
#include "configsvr/configsvr.h"

/* Matching documents of one scan (owned copies). Pointers, not bson_t values: an
 * allocated bson_t points into itself, so bson_t structs must never be moved (realloc,
 * qsort). */
typedef struct hits {
    const query_t *q;
    bson_t **docs;
    int n, cap;
    size_t bytes;
    int64_t seen;          /* documents looked at: paces the maxTimeMS check */
    ms_error_t expired;    /* MaxTimeMSExpired, when op_check stopped the scan */
} hits_t;

static int hit_fn(void *arg, const bson_t *doc) {
    hits_t *h = arg;
    if (++h->seen % MS_INTERRUPT_CHECK_DOCS == 0 && op_check(&h->expired) != 0)
        return h->expired.code;
    if (!query_match(h->q, doc)) return 0;
    h->bytes += doc->len;
    if (h->bytes > (size_t)MS_MSG_BYTES_MAX)
        return MS_ERR_BSON_OBJECT_TOO_LARGE;  /* bounds memory; reported by the caller */
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->docs = bson_realloc(h->docs, sizeof *h->docs * (size_t)h->cap);
    }
    h->docs[h->n++] = bson_copy(doc);
    return 0;
}

static void hits_free(hits_t *h) {
    for (int i = 0; i < h->n; i++) bson_destroy(h->docs[i]);
    bson_free(h->docs);
}

static int cmp_docs(const void *a, const void *b, void *arg) {
    return sortspec_compare_docs(arg, *(bson_t *const *)a, *(bson_t *const *)b);
}

static int check_config_db(const cmd_ctx_t *ctx, ms_error_t *err) {
    if (strcmp(ctx->db, "config") != 0)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "the config server serves only the config database, not %s", ctx->db);
    return 0;
}

/* The matching documents of config.<coll> (an unknown name is an empty collection, as in
 * MongoDB). */
static int scan(cfg_t *cfg, const char *coll, const bson_t *filter, hits_t *h, ms_error_t *err) {
    query_t *q = NULL;
    bson_t empty = BSON_INITIALIZER;
    int rc = query_compile(filter ? filter : &empty, &q, err);
    memset(h, 0, sizeof *h);
    if (rc) return rc;
    h->q = q;
    if (cat_config_known(coll)) {
        rc = cat_config_scan(cfg->cat, coll, hit_fn, h, err);
        if (rc == MS_ERR_MAX_TIME_MS_EXPIRED && h->expired.code) *err = h->expired;
        if (rc == MS_ERR_BSON_OBJECT_TOO_LARGE)
            err_set(err, rc, "the result of find on config.%s exceeds %d bytes; add a filter", coll,
                    MS_MSG_BYTES_MAX);
    }
    query_free(q);
    h->q = NULL;
    return rc;
}

static bool int_field(const cmd_ctx_t *ctx, const char *name, int64_t *out, ms_error_t *err, int *rc) {
    bson_iter_t it;
    if (!cmd_field(ctx, name, &it)) return false;
    if (!bsonx_as_int64_exact(&it, out) || *out < 0) {
        *rc = err_set(err, MS_ERR_BAD_VALUE, "%s must be a non-negative integer", name);
        return false;
    }
    return true;
}

/* ---- cursors ------------------------------------------------------------------------ */

/* A cursor over a materialised result; the registry (common/cursor.c) holds its curs_t. */
typedef struct cfg_cursor {
    curs_t reg;                   /* id, ns, connection, pin state: the registry's */
    bson_t **docs;                /* the materialised result (owned) */
    int n, pos;
    size_t bytes;                 /* of docs: counted against MS_CFG_CURSOR_BYTES_MAX */
} cfg_cursor_t;

static void cursor_free(cfg_cursor_t *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) bson_destroy(c->docs[i]);
    bson_free(c->docs);
    free(c);
}

static void cursor_destroy(void *arg, curs_t *reg) {
    (void)arg;
    cursor_free(curs_entry(reg, cfg_cursor_t, reg));
}

/* What a cursor holds: its whole snapshot until it ends (read under the registry's lock). */
static size_t cursor_held(const curs_t *reg) {
    return curs_entry(reg, cfg_cursor_t, reg)->bytes;
}

int cfg_query_cursors_new(curs_reg_t **out, ms_error_t *err) {
    curs_opts_t o = {.noun = "cursors", .place = "on the config server", .conn_names_place = true,
                     .owner = "config server", .conn_max = MS_CFG_CURSORS_PER_CONN_MAX,
                     .total_max = MS_CFG_CURSORS_MAX, .bytes_max = MS_CFG_CURSOR_BYTES_MAX,
                     .held_fn = cursor_held, .destroy_fn = cursor_destroy};
    if (curs_reg_new(&o, out) != 0)
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "cursor table: out of memory");
    return 0;
}

/* Appends documents from k->pos: at most max_docs (< 0: no count limit) and at most
 * MS_BATCH_BYTES_MAX of them, but at least one when any is left (a document is at most
 * 16 MB, so progress is guaranteed). */
static void fill_batch(cfg_cursor_t *k, int64_t max_docs, bson_t *arr) {
    size_t bytes = 0;
    int64_t out = 0;
    while (k->pos < k->n && (max_docs < 0 || out < max_docs)) {
        const bson_t *d = k->docs[k->pos];
        if (out > 0 && bytes + d->len > (size_t)MS_BATCH_BYTES_MAX) break;
        char idx[24];
        snprintf(idx, sizeof idx, "%lld", (long long)out++);
        BSON_APPEND_DOCUMENT(arr, idx, d);
        bytes += d->len;
        k->pos++;
    }
}

/* The first reply of a find or an aggregate: its first batch, and the rest behind a
 * registered cursor (*kp then owned by the registry and set to NULL) unless single or
 * nothing is left. The batch is built and the cursor registered before reply is
 * touched: a refusal (the open-cursor cap) leaves reply as it was. */
static int reply_first_batch(cfg_t *cfg, cfg_cursor_t **kp, int64_t batch_size, bool single,
                             const char *ns, bson_t *reply, ms_error_t *err) {
    bson_t batch = BSON_INITIALIZER, cursor;
    int64_t id = 0;
    int rc = 0;
    fill_batch(*kp, batch_size, &batch);
    if ((*kp)->pos < (*kp)->n && !single) {
        if ((rc = curs_add(cfg->cursors, &(*kp)->reg, ns, op_conn(), 0, false, &id, err)) != 0)
            goto out;
        *kp = NULL;
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor);
    bson_append_array(&cursor, "firstBatch", -1, &batch);
    BSON_APPEND_INT64(&cursor, "id", id);
    BSON_APPEND_UTF8(&cursor, "ns", ns);
    bson_append_document_end(reply, &cursor);
out:
    bson_destroy(&batch);
    return rc;
}

/* listCollections of the config database: the collections find serves, as mongod's
 * entries ({name, type, options, info, idIndex}; {name, type} with nameOnly), filtered
 * like them. Other databases have none here. */
int cfg_cmd_list_collections(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bool name_only = cmd_flag(ctx, "nameOnly", false), config = strcmp(ctx->db, "config") == 0;
    bson_t filter, arr, cur;
    query_t *q = NULL;
    char ns[MS_NS_BYTES_MAX + 32];
    int rc = 0, n = 0;
    if (cfg_field_doc(ctx, "filter", &filter) && (rc = query_compile(&filter, &q, err)) != 0)
        return rc;
    bson_init(&arr);
    for (int i = 0; config && cat_config_coll(i); i++) {
        bson_t e = BSON_INITIALIZER, sub;
        char key[16];
        BSON_APPEND_UTF8(&e, "name", cat_config_coll(i));
        BSON_APPEND_UTF8(&e, "type", "collection");
        if (!name_only) {
            BSON_APPEND_DOCUMENT_BEGIN(&e, "options", &sub);
            bson_append_document_end(&e, &sub);
            BSON_APPEND_DOCUMENT_BEGIN(&e, "info", &sub);
            BSON_APPEND_BOOL(&sub, "readOnly", false);
            bson_append_document_end(&e, &sub);
            BCON_APPEND(&e, "idIndex", "{", "v", BCON_INT32(2), "key", "{", "_id", BCON_INT32(1),
                        "}", "name", BCON_UTF8("_id_"), "}");
        }
        if (!q || query_match(q, &e)) {
            snprintf(key, sizeof key, "%d", n++);
            BSON_APPEND_DOCUMENT(&arr, key, &e);
        }
        bson_destroy(&e);
    }
    snprintf(ns, sizeof ns, "%s.$cmd.listCollections", ctx->db);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    BSON_APPEND_ARRAY(&cur, "firstBatch", &arr);
    bson_append_document_end(reply, &cur);
    bson_destroy(&arr);
    query_free(q);
    return 0;
}

/* find: the result is materialised now, the first batch returned, the rest kept behind
 * a cursor id for getMore (MongoDB's ClusterCursorManager on the config server). */
int cfg_cmd_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *coll = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    bson_t filter, sort_spec, proj_spec;
    bool has_filter = cfg_field_doc(ctx, "filter", &filter);
    sortspec_t *sort = NULL;
    projection_t *proj = NULL;
    cfg_cursor_t *k = NULL;
    hits_t h;
    int64_t skip = 0, limit = 0, batch_size = MS_FIRST_BATCH_DOCS_DEFAULT;
    bool single = cmd_flag(ctx, "singleBatch", false);
    int rc = check_config_db(ctx, err);
    char ns[MS_NS_BYTES_MAX + 8];
    memset(&h, 0, sizeof h);
    if (rc) return rc;
    snprintf(ns, sizeof ns, "config.%s", coll);
    int_field(ctx, "skip", &skip, err, &rc);
    int_field(ctx, "limit", &limit, err, &rc);
    int_field(ctx, "batchSize", &batch_size, err, &rc);
    if (rc) return rc;
    curs_reap(cfg->cursors);   /* no timer thread here: every cursor command reaps */
    if ((rc = curs_admit(cfg->cursors, op_conn(), err)) != 0) return rc;
    /* Separate views: a compiled spec may keep pointing at the document it was given. */
    if (cfg_field_doc(ctx, "sort", &sort_spec) && (rc = sortspec_compile(&sort_spec, &sort, err)) != 0)
        goto out;
    if (cfg_field_doc(ctx, "projection", &proj_spec) &&
        (rc = projection_compile(&proj_spec, &proj, err)) != 0)
        goto out;
    rc = scan(cfg, coll, has_filter ? &filter : NULL, &h, err);
    if (rc) goto out;
    if (sort && h.n > 1) qsort_r(h.docs, (size_t)h.n, sizeof *h.docs, cmp_docs, sort);
    if ((rc = op_check(err)) != 0) goto out;
    /* The snapshot: skip and limit applied, projected, owned by the cursor. */
    k = calloc(1, sizeof *k);
    ASSERT(k);
    int64_t first = skip < h.n ? skip : h.n, last = h.n;
    if (limit > 0 && last - first > limit) last = first + limit;
    k->docs = bson_malloc0(sizeof *k->docs * (size_t)(last - first + 1));
    for (int64_t i = first; i < last; i++) {
        bson_t *d = h.docs[i];
        if (proj) {
            bson_t p;
            if ((rc = projection_apply(proj, h.docs[i], &p, err)) != 0) goto out;
            d = bson_copy(&p);
            bson_destroy(&p);
        } else {
            h.docs[i] = NULL;   /* moved into the cursor */
        }
        k->bytes += d->len;
        k->docs[k->n++] = d;
    }
    rc = reply_first_batch(cfg, &k, batch_size, single, ns, reply, err);
out:
    cursor_free(k);
    hits_free(&h);
    sortspec_free(sort);
    projection_free(proj);
    return rc;
}

/* getMore {getMore: id, collection, batchSize?}: the next batch (16 MB when batchSize is
 * absent); id 0 in the reply once the snapshot is exhausted. */
int cfg_cmd_get_more(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    curs_reg_t *cs = cfg->cursors;
    bson_iter_t it;
    int64_t id = 0, batch_size = -1;
    int rc = check_config_db(ctx, err);
    char ns[MS_NS_BYTES_MAX + 8];
    curs_t *reg = NULL;
    cfg_cursor_t *k;
    if (rc) return rc;
    if (!bsonx_as_int64_exact(&ctx->arg, &id))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "getMore: cursor id must be an integer");
    if (int_field(ctx, "batchSize", &batch_size, err, &rc) && batch_size == 0) batch_size = -1;
    if (rc) return rc;
    snprintf(ns, sizeof ns, "config.%s",
             cmd_field(ctx, "collection", &it) && BSON_ITER_HOLDS_UTF8(&it)
                 ? bson_iter_utf8(&it, NULL) : "");
    curs_reap(cs);
    /* CursorNotFound, CursorInUse, or Unauthorized for another namespace. */
    if ((rc = curs_pin(cs, id, ns, &reg, err)) != 0) return rc;
    if (op_deadline_ms() > 0) {   /* as mongod: maxTimeMS is for awaitData cursors */
        curs_unpin(cs, reg, false);
        return err_set(err, MS_ERR_BAD_VALUE,
                       "cannot set maxTimeMS on getMore command for a non-awaitData cursor");
    }
    /* A test holds the cursor pinned here (neither killCursors nor the reaper frees it);
     * an error action fails this getMore and the cursor goes, as on a shard. */
    if ((rc = fp_eval(CFG_FP_GETMORE_AFTER_PIN, err)) != 0) {
        curs_unpin(cs, reg, true);
        return rc;
    }
    k = curs_entry(reg, cfg_cursor_t, reg);

    bson_t cursor, batch;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor);
    BSON_APPEND_ARRAY_BEGIN(&cursor, "nextBatch", &batch);
    fill_batch(k, batch_size, &batch);
    bson_append_array_end(&cursor, &batch);
    bool done = k->pos >= k->n;
    BSON_APPEND_INT64(&cursor, "id", done ? 0 : id);
    BSON_APPEND_UTF8(&cursor, "ns", ns);
    bson_append_document_end(reply, &cursor);
    curs_unpin(cs, reg, done);
    return 0;
}

/* killCursors {killCursors: coll, cursors: [ids]}: MongoDB's reply lists. A cursor in
 * use by a getMore is killed too: marked, and freed when that getMore ends. */
int cfg_cmd_kill_cursors(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    bson_t ids;
    bson_iter_t it;
    int rc = check_config_db(ctx, err);
    if (rc == 0) rc = cmd_check_cursor_ids(ctx, err);
    if (rc) return rc;
    if (!cfg_field_doc(ctx, "cursors", &ids) || !bson_iter_init(&it, &ids))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "killCursors needs a cursors array");
    curs_kill_ids(cfg->cursors, &it, true, reply);
    return 0;
}

/* aggregate {aggregate: coll, pipeline, cursor: {batchSize}, explain, let, allowDiskUse}
 * over config.<coll>: the leading $match is the scan's filter (as find's), the rest of
 * the pipeline (common/agg.c) runs over the matching catalog documents; the results are
 * held by a cursor exactly like a find's (mongosh's sh.status() and countDocuments send
 * these). */
int cfg_cmd_aggregate(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *coll = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    bson_t pipeline, d;
    bson_iter_t it;
    agg_opts_t o = {0};
    expr_vars_t *vars = NULL;
    agg_pipeline_t *p = NULL;
    agg_run_t *run = NULL;
    const bson_t *filter;
    cfg_cursor_t *k = NULL;
    hits_t h;
    int64_t batch_size = MS_FIRST_BATCH_DOCS_DEFAULT;
    bool explain = false, have_cursor = false;
    char ns[MS_NS_BYTES_MAX + 8];
    int rc = check_config_db(ctx, err);
    memset(&h, 0, sizeof h);
    if (rc) return rc;
    snprintf(ns, sizeof ns, "config.%s", coll);
    if (!cfg_field_doc(ctx, "pipeline", &pipeline))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'aggregate.pipeline' must be an "
                       "array");
    if (cmd_field(ctx, "explain", &it)) explain = bsonx_truthy(&it);
    if (cfg_field_doc(ctx, "cursor", &d)) {
        have_cursor = true;
        if (bson_iter_init_find(&it, &d, "batchSize") &&
            (!bsonx_as_int64(&it, &batch_size) || batch_size < 0))
            return err_set(err, MS_ERR_IDL_VALUE_TOO_LOW, "BSON field 'batchSize' value must be "
                           ">= 0");
    }
    if (!have_cursor && !explain)
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "The 'cursor' option is required, except "
                       "for aggregate with the explain argument");
    if (cmd_field(ctx, "allowDiskUse", &it)) o.allow_disk_use = bsonx_truthy(&it);
    if (cfg_field_doc(ctx, "let", &d) && (rc = expr_vars_from_let(&d, &vars, err)) != 0) return rc;
    o.vars = vars;
    if ((rc = agg_parse(&pipeline, &o, &p, err)) != 0) goto out;
    filter = agg_leading_match(p);
    if (explain) {
        bson_t stages, first, cur, qp, wp, empty = BSON_INITIALIZER;
        int idx = 1;
        BSON_APPEND_UTF8(reply, "explainVersion", "1");
        BSON_APPEND_ARRAY_BEGIN(reply, "stages", &stages);
        BSON_APPEND_DOCUMENT_BEGIN(&stages, "0", &first);
        BSON_APPEND_DOCUMENT_BEGIN(&first, "$cursor", &cur);
        BSON_APPEND_DOCUMENT_BEGIN(&cur, "queryPlanner", &qp);
        BSON_APPEND_UTF8(&qp, "namespace", ns);
        BSON_APPEND_DOCUMENT(&qp, "parsedQuery", filter ? filter : &empty);
        BSON_APPEND_DOCUMENT_BEGIN(&qp, "winningPlan", &wp);
        BSON_APPEND_UTF8(&wp, "stage", "COLLSCAN");   /* the catalog is scanned whole */
        bson_append_document_end(&qp, &wp);
        bson_append_document_end(&cur, &qp);
        bson_append_document_end(&first, &cur);
        bson_append_document_end(&stages, &first);
        agg_append_stages(p, filter ? 1 : 0, &stages, &idx);
        bson_append_array_end(reply, &stages);
        goto out;
    }
    curs_reap(cfg->cursors);
    if ((rc = curs_admit(cfg->cursors, op_conn(), err)) != 0) goto out;
    if ((rc = scan(cfg, coll, filter, &h, err)) != 0) goto out;
    if ((rc = agg_run_new(p, filter ? 1 : 0, &run, err)) != 0) goto out;
    for (int i = 0; i < h.n && !agg_run_done(run); i++)
        if ((rc = agg_run_push(run, h.docs[i], err)) != 0) goto out;
    if ((rc = agg_run_finish(run, err)) != 0) goto out;
    k = calloc(1, sizeof *k);
    ASSERT(k);
    {
        size_t n = agg_run_count(run);
        k->docs = bson_malloc0(sizeof *k->docs * (n + 1));
        for (size_t i = 0; i < n; i++) {
            k->docs[k->n++] = bson_copy(agg_run_result(run, i));
            k->bytes += k->docs[i]->len;
        }
    }
    rc = reply_first_batch(cfg, &k, batch_size, false, ns, reply, err);
out:
    cursor_free(k);
    hits_free(&h);
    agg_run_free(run);
    agg_free(p);
    expr_vars_free(vars);
    return rc;
}

int cfg_cmd_count(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *coll = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    bson_t filter;
    bool has_filter = cfg_field_doc(ctx, "query", &filter);
    hits_t h;
    int64_t skip = 0, limit = 0, n;
    int rc = check_config_db(ctx, err);
    if (rc) return rc;
    int_field(ctx, "skip", &skip, err, &rc);
    int_field(ctx, "limit", &limit, err, &rc);
    if (rc) return rc;
    rc = scan(cfg, coll, has_filter ? &filter : NULL, &h, err);
    if (rc == 0) {
        n = h.n > skip ? h.n - skip : 0;
        if (limit > 0 && n > limit) n = limit;
        if (n <= INT32_MAX) BSON_APPEND_INT32(reply, "n", (int32_t)n);   /* as MongoDB's appendNumber */
        else BSON_APPEND_INT64(reply, "n", n);
    }
    hits_free(&h);
    return rc;
}

/* update on config.settings: {updates: [{q, u, upsert, multi}], ordered}; MongoDB's
 * write reply {n, nModified, upserted, writeErrors}. config.collections takes noBalance
 * and enableAutoMerge only (cmd_bal.c); the other collections are read-only. */
int cfg_cmd_update(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *coll = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    bson_t updates, upserted_arr = BSON_INITIALIZER, errors = BSON_INITIALIZER;
    bson_iter_t it;
    bool ordered = cmd_flag(ctx, "ordered", true);
    int64_t n_total = 0, nmod_total = 0;
    int idx = 0, nup = 0, nerr = 0;
    int rc = check_config_db(ctx, err);
    if (rc) goto out;
    bool colls = strcmp(coll, "collections") == 0;  /* two flags only (cmd_bal.c) */
    if (strcmp(coll, "settings") != 0 && !colls) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "config.%s is read-only; only config.settings "
                     "and config.collections noBalance / enableAutoMerge can be updated", coll);
        goto out;
    }
    if (!cfg_field_doc(ctx, "updates", &updates) || !bson_iter_init(&it, &updates)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "update needs an updates array");
        goto out;
    }
    while (bson_iter_next(&it)) {
        bson_t op, q = BSON_INITIALIZER, u = BSON_INITIALIZER, upid;
        bson_iter_t f;
        bool upsert = false, multi = false, upserted = false, have_u = false;
        int64_t n = 0, nmod = 0;
        ms_error_t e = {0};
        int orc = 0;
        if (idx >= MS_WRITE_BATCH_OPS_MAX) {
            rc = err_set(err, MS_ERR_INVALID_LENGTH, "more than %d updates", MS_WRITE_BATCH_OPS_MAX);
            goto out;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            orc = err_set(&e, MS_ERR_FAILED_TO_PARSE, "an update statement must be a document");
        } else {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&it, &len, &data);
            bson_init_static(&op, data, len);
            bson_iter_init(&f, &op);
            while (bson_iter_next(&f)) {
                const char *k = bson_iter_key(&f);
                uint32_t l2;
                const uint8_t *d2;
                if (strcmp(k, "q") == 0 && BSON_ITER_HOLDS_DOCUMENT(&f)) {
                    bson_iter_document(&f, &l2, &d2);
                    bson_init_static(&q, d2, l2);
                } else if (strcmp(k, "u") == 0 && BSON_ITER_HOLDS_DOCUMENT(&f)) {
                    bson_iter_document(&f, &l2, &d2);
                    bson_init_static(&u, d2, l2);
                    have_u = true;
                } else if (strcmp(k, "u") == 0 && BSON_ITER_HOLDS_ARRAY(&f)) {
                    orc = err_set(&e, MS_ERR_BAD_VALUE, "pipeline-style updates are not supported");
                } else if (strcmp(k, "upsert") == 0) {
                    upsert = bsonx_truthy(&f);
                } else if (strcmp(k, "multi") == 0) {
                    multi = bsonx_truthy(&f);
                }
            }
            if (orc == 0 && !have_u) orc = err_set(&e, MS_ERR_FAILED_TO_PARSE, "an update statement needs u");
            if (orc == 0 && colls)
                orc = cfg_coll_update_flags(cfg, &q, &u, upsert, &n, &nmod, &e);
            else if (orc == 0)
                orc = cat_settings_update(cfg->cat, &q, &u, upsert, multi, &n, &nmod, &upserted, &upid, &e);
        }
        if (orc == 0) {
            n_total += n + (upserted ? 1 : 0);
            nmod_total += nmod;
            if (upserted) {
                bson_t d;
                char key[16];
                bson_iter_t id;
                snprintf(key, sizeof key, "%d", nup++);
                BSON_APPEND_DOCUMENT_BEGIN(&upserted_arr, key, &d);
                BSON_APPEND_INT32(&d, "index", idx);
                if (bson_iter_init_find(&id, &upid, "_id")) bson_append_iter(&d, "_id", -1, &id);
                bson_append_document_end(&upserted_arr, &d);
                bson_destroy(&upid);
            }
        } else {
            bson_t d;
            char key[16];
            snprintf(key, sizeof key, "%d", nerr++);
            BSON_APPEND_DOCUMENT_BEGIN(&errors, key, &d);
            BSON_APPEND_INT32(&d, "index", idx);
            BSON_APPEND_INT32(&d, "code", orc);
            BSON_APPEND_UTF8(&d, "codeName", err_code_name(orc));
            BSON_APPEND_UTF8(&d, "errmsg", e.msg);
            bson_append_document_end(&errors, &d);
            log_warn("config update refused coll=%s index=%d code=%d errmsg=%s", log_str(coll), idx,
                     orc, log_str(e.msg));
        }
        idx++;
        if (orc && ordered) break;
    }
    BSON_APPEND_INT32(reply, "n", (int32_t)n_total);            /* int32, as MongoDB's write replies */
    BSON_APPEND_INT32(reply, "nModified", (int32_t)nmod_total);
    if (nup) BSON_APPEND_ARRAY(reply, "upserted", &upserted_arr);
    if (nerr) BSON_APPEND_ARRAY(reply, "writeErrors", &errors);
out:
    bson_destroy(&upserted_arr);
    bson_destroy(&errors);
    return rc;
}
