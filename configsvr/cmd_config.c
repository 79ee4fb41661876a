/*
 * cmd_config.c — the config database as MongoDB users know it (bin/configsvr): find and
 * count on config.<collection> (documents built from the catalog in MongoDB's shapes,
 * then filtered, sorted, skipped, limited and projected with the query engine), and
 * update on config.settings (balancer, chunksize, automerge, ...), validated. Every
 * other config collection is read-only here.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
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
} hits_t;

static int hit_fn(void *arg, const bson_t *doc) {
    hits_t *h = arg;
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

/* find: results come back in one batch (cursor id 0) — config collections are small, and
 * the reply is bounded by the message limit; batchSize is accepted for compatibility. */
int cfg_cmd_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *coll = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    bson_t filter, sort_spec, proj_spec, cursor, batch;
    bool has_filter = cfg_field_doc(ctx, "filter", &filter);
    sortspec_t *sort = NULL;
    projection_t *proj = NULL;
    hits_t h;
    int64_t skip = 0, limit = 0;
    int rc = check_config_db(ctx, err);
    char ns[MS_NS_BYTES_MAX + 8];
    memset(&h, 0, sizeof h);
    if (rc) return rc;
    int_field(ctx, "skip", &skip, err, &rc);
    int_field(ctx, "limit", &limit, err, &rc);
    if (rc) return rc;
    /* Separate views: a compiled spec may keep pointing at the document it was given. */
    if (cfg_field_doc(ctx, "sort", &sort_spec) && (rc = sortspec_compile(&sort_spec, &sort, err)) != 0)
        goto out;
    if (cfg_field_doc(ctx, "projection", &proj_spec) &&
        (rc = projection_compile(&proj_spec, &proj, err)) != 0)
        goto out;
    rc = scan(cfg, coll, has_filter ? &filter : NULL, &h, err);
    if (rc) goto out;
    if (sort && h.n > 1) qsort_r(h.docs, (size_t)h.n, sizeof *h.docs, cmp_docs, sort);
    snprintf(ns, sizeof ns, "config.%s", coll);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor);
    BSON_APPEND_INT64(&cursor, "id", 0);
    BSON_APPEND_UTF8(&cursor, "ns", ns);
    BSON_APPEND_ARRAY_BEGIN(&cursor, "firstBatch", &batch);
    int64_t out_n = 0;
    for (int64_t i = skip; i < h.n && (limit == 0 || out_n < limit); i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%lld", (long long)out_n++);
        if (proj) {
            bson_t p;
            rc = projection_apply(proj, h.docs[i], &p, err);
            if (rc) break;
            BSON_APPEND_DOCUMENT(&batch, idx, &p);
            bson_destroy(&p);
        } else {
            BSON_APPEND_DOCUMENT(&batch, idx, h.docs[i]);
        }
    }
    bson_append_array_end(&cursor, &batch);
    bson_append_document_end(reply, &cursor);
out:
    hits_free(&h);
    sortspec_free(sort);
    projection_free(proj);
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
        BSON_APPEND_INT64(reply, "n", n);
    }
    hits_free(&h);
    return rc;
}

/* update on config.settings: {updates: [{q, u, upsert, multi}], ordered}; MongoDB's
 * write reply {n, nModified, upserted, writeErrors}. Other collections are read-only. */
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
    if (strcmp(coll, "settings") != 0) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                     "config.%s is read-only; only config.settings can be updated", coll);
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
            if (orc == 0)
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
            log_warn("config.settings update refused index=%d code=%d errmsg=\"%s\"", idx, orc, e.msg);
        }
        idx++;
        if (orc && ordered) break;
    }
    BSON_APPEND_INT64(reply, "n", n_total);
    BSON_APPEND_INT64(reply, "nModified", nmod_total);
    if (nup) BSON_APPEND_ARRAY(reply, "upserted", &upserted_arr);
    if (nerr) BSON_APPEND_ARRAY(reply, "writeErrors", &errors);
out:
    bson_destroy(&upserted_arr);
    bson_destroy(&errors);
    return rc;
}
