/*
 * split.c — split points and range sizes on the shard daemon (bin/shardd): dataSize,
 * splitVector (MongoDB's db/s/split_vector.cpp rules, notes §6.1) and autoSplitVector
 * (db/s/auto_split_vector.cpp, notes §6.2). Keys are read in order from the collection's
 * `sk` column when the key pattern is the shard key, from the `id` column for {_id: 1},
 * or from a secondary index whose pattern starts with the key pattern.
 */
#include "shardd/shardd.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "common/opctx.h"

enum ks_kind { KS_SK, KS_ID, KS_IX };

typedef struct keysrc {
    enum ks_kind kind;
    int64_t ix_id;
    bool reencode;          /* the index has more fields than the pattern */
    keys_pattern_t kp;
} keysrc_t;

static int keysrc_find(store_coll_t *c, const bson_t *kpdoc, keysrc_t *ks, ms_error_t *err) {
    int rc;
    memset(ks, 0, sizeof *ks);
    if ((rc = keys_pattern_parse(kpdoc, &ks->kp, err)) != 0) return rc;
    if (c->sharded && keys_pattern_equal(&c->sk, &ks->kp)) {
        ks->kind = KS_SK;
        return 0;
    }
    for (int i = 0; i < c->nindexes; i++) {
        store_index_t *ix = c->ix[i];
        bool dirs_match = true;
        if (!keys_pattern_is_prefix_of(&ks->kp, &ix->pat) || ix->multikey) continue;
        for (int f = 0; f < ks->kp.nfields; f++)
            if (ks->kp.dir[f] != ix->pat.dir[f]) dirs_match = false;
        if (!dirs_match) continue;
        ks->kind = ix->is_id ? KS_ID : KS_IX;
        ks->ix_id = ix->id;
        ks->reencode = ix->pat.nfields > ks->kp.nfields;
        return 0;
    }
    keys_pattern_free(&ks->kp);
    return err_set(err, MS_ERR_INDEX_NOT_FOUND,
                   "couldn't find index over splitting key %s", c->ns);
}

/* FROM/WHERE part selecting (key, doc length) over [?1, ?2). */
static void keysrc_sql(const store_coll_t *c, const keysrc_t *ks, const char *what, char *sql,
                       size_t sz) {
    switch (ks->kind) {
    case KS_SK:
        snprintf(sql, sz, "SELECT %s FROM c%lld AS c WHERE c.sk >= ?1 AND c.sk < ?2 ORDER BY c.sk",
                 what, (long long)c->id);
        break;
    case KS_ID:
        snprintf(sql, sz, "SELECT %s FROM c%lld AS c WHERE c.id >= ?1 AND c.id < ?2 ORDER BY c.id",
                 what, (long long)c->id);
        break;
    case KS_IX:
        snprintf(sql, sz,
                 "SELECT %s FROM i%lld AS i JOIN c%lld AS c ON c.rid = i.rid"
                 " WHERE i.k >= ?1 AND i.k < ?2 ORDER BY i.k",
                 what, (long long)ks->ix_id, (long long)c->id);
        break;
    }
}

static const char *keycol(const keysrc_t *ks) {
    return ks->kind == KS_SK ? "c.sk" : ks->kind == KS_ID ? "c.id" : "i.k";
}

/* Encodes min/max (empty = global) under the pattern. */
static int encode_bounds(const keysrc_t *ks, const bson_t *min, const bson_t *max, buf_t *lo,
                         buf_t *hi, ms_error_t *err) {
    bson_t g;
    int rc;
    if (min && !bson_empty(min)) {
        if ((rc = keys_encode_bound(&ks->kp, min, lo, err)) != 0) return rc;
    } else {
        bson_init(&g);
        keys_global_min(&ks->kp, &g);
        rc = keys_encode_bound(&ks->kp, &g, lo, err);
        bson_destroy(&g);
        if (rc) return rc;
    }
    if (max && !bson_empty(max)) return keys_encode_bound(&ks->kp, max, hi, err);
    bson_init(&g);
    keys_global_max(&ks->kp, &g);
    rc = keys_encode_bound(&ks->kp, &g, hi, err);
    bson_destroy(&g);
    return rc;
}

/* Number of documents with key in [lo, hi) and, when bytes is non-NULL, their bytes.
 * Counting alone reads only the key index (no document, no join), which is what lets
 * autoSplitVector answer "nothing to split" for a small chunk cheaply. */
static int range_size(store_txn_t *t, store_coll_t *c, const keysrc_t *ks, const buf_t *lo,
                      const buf_t *hi, int64_t *n, int64_t *bytes, ms_error_t *err) {
    char sql[400];
    sqlite3_stmt *s;
    int rc;
    if (!bytes && ks->kind == KS_IX)
        snprintf(sql, sizeof sql, "SELECT count(*) FROM i%lld WHERE k >= ?1 AND k < ?2",
                 (long long)ks->ix_id);
    else
        keysrc_sql(c, ks, bytes ? "count(*), total(length(c.doc))" : "count(*)", sql, sizeof sql);
    /* ORDER BY on an aggregate is pointless: cut it. */
    char *order = strstr(sql, " ORDER BY");
    if (order) *order = '\0';
    if (!(s = store_stmt(t, sql, err))) return err->code;
    sqlite3_bind_blob(s, 1, lo->data, (int)lo->len, SQLITE_STATIC);
    sqlite3_bind_blob(s, 2, hi->data, (int)hi->len, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(s);
        return err_from_sqlite(err, rc, "range size", store_txn_db(t));
    }
    *n = sqlite3_column_int64(s, 0);
    if (bytes) *bytes = (int64_t)sqlite3_column_double(s, 1);
    sqlite3_reset(s);
    return 0;
}

/* The pattern-prefix part of a stored key (whole key unless the index is longer). */
static void key_prefix(const keysrc_t *ks, const uint8_t *data, size_t len, buf_t *out) {
    buf_reset(out);
    if (!ks->reencode) {
        buf_put(out, data, len);
        return;
    }
    {
        bson_t doc;
        store_key_decode(&ks->kp, data, len, &doc);
        if (keys_encode_bound(&ks->kp, &doc, out, NULL) != 0) {
            buf_reset(out);
            buf_put(out, data, len);
        }
        bson_destroy(&doc);
    }
}

static bool buf_eq(const buf_t *a, const buf_t *b) {
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

/* Every key in [lo, hi), in order (pattern prefixes). Bounded by the documents in range. */
typedef struct keylist {
    buf_t *k;
    size_t n, cap;
} keylist_t;

static void keylist_free(keylist_t *l) {
    for (size_t i = 0; i < l->n; i++) buf_free(&l->k[i]);
    free(l->k);
    memset(l, 0, sizeof *l);
}

static int range_keys(store_txn_t *t, store_coll_t *c, const keysrc_t *ks, const buf_t *lo,
                      const buf_t *hi, keylist_t *out, ms_error_t *err) {
    char sql[400];
    sqlite3_stmt *s;
    int rc;
    keysrc_sql(c, ks, keycol(ks), sql, sizeof sql);
    if (!(s = store_stmt(t, sql, err))) return err->code;
    sqlite3_bind_blob(s, 1, lo->data, (int)lo->len, SQLITE_STATIC);
    sqlite3_bind_blob(s, 2, hi->data, (int)hi->len, SQLITE_STATIC);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (out->n == out->cap) {
            out->cap = out->cap ? out->cap * 2 : 1024;
            out->k = xrealloc(out->k, out->cap * sizeof *out->k);
        }
        memset(&out->k[out->n], 0, sizeof out->k[0]);
        key_prefix(ks, sqlite3_column_blob(s, 0), (size_t)sqlite3_column_bytes(s, 0), &out->k[out->n]);
        out->n++;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE) return err_from_sqlite(err, rc, "split scan", store_txn_db(t));
    return 0;
}

/* ---- dataSize ----------------------------------------------------------------------- */

typedef struct ds_arg {
    const char *ns;
    const bson_t *kp, *min, *max;
    int64_t n, bytes;
} ds_arg_t;

static int data_size_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    ds_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    keysrc_t ks;
    buf_t lo = {0}, hi = {0};
    int rc;
    if (!c) return 0;
    if (!a->kp) return store_coll_stats(t, c, &a->n, &a->bytes, NULL, NULL, err);
    if ((rc = keysrc_find(c, a->kp, &ks, err)) != 0) return rc;
    if ((rc = encode_bounds(&ks, a->min, a->max, &lo, &hi, err)) == 0)
        rc = range_size(t, c, &ks, &lo, &hi, &a->n, &a->bytes, err);
    buf_free(&lo);
    buf_free(&hi);
    keys_pattern_free(&ks.kp);
    return rc;
}

static bool doc_field(const cmd_ctx_t *ctx, const char *name, bson_t *out) {
    bson_iter_t it;
    const uint8_t *data;
    uint32_t len;
    if (!cmd_field(ctx, name, &it) || !BSON_ITER_HOLDS_DOCUMENT(&it)) return false;
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

/* dataSize and splitVector name the full namespace; autoSplitVector names the collection. */
static int full_ns(const cmd_ctx_t *ctx, bool coll_only, char *ns, size_t sz, ms_error_t *err) {
    const char *v;
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg)) return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace must be a string");
    v = bson_iter_utf8(&ctx->arg, NULL);
    if (coll_only) return shardd_ns(ctx, ns, sz, err);
    if (!strchr(v, '.') || v[0] == '.' || strlen(v) > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s'", v);
    snprintf(ns, sz, "%s", v);
    return 0;
}

int cmd_data_size(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    bson_t kp, min, max;
    ds_arg_t a;
    long long t0 = time_mono_ms();
    int rc;
    memset(&a, 0, sizeof a);
    if ((rc = full_ns(ctx, false, ns, sizeof ns, err)) != 0) return rc;
    a.ns = ns;
    if (doc_field(ctx, "keyPattern", &kp) && !bson_empty(&kp)) {
        a.kp = &kp;
        if (doc_field(ctx, "min", &min)) a.min = &min;
        if (doc_field(ctx, "max", &max)) a.max = &max;
    }
    if ((rc = store_read(app->st, data_size_fn, &a, err)) != 0) return rc;
    BSON_APPEND_INT64(reply, "size", a.bytes);
    BSON_APPEND_INT64(reply, "numObjects", a.n);
    BSON_APPEND_INT64(reply, "millis", time_mono_ms() - t0);
    return 0;
}

/* ---- split points ------------------------------------------------------------------- */

typedef struct split_run {
    const split_args_t *a;
    bson_t *out;
    bool *continuation;
    int npoints;
    size_t bytes;
} split_run_t;

static bool emit_point(split_run_t *r, const keysrc_t *ks, const buf_t *k) {
    bson_t doc;
    char key[16];
    store_key_decode(&ks->kp, k->data, k->len, &doc);
    if (r->bytes + doc.len + 16 > (size_t)MS_BATCH_BYTES_MAX || r->npoints >= SHARDD_SPLIT_POINTS_MAX) {
        bson_destroy(&doc);
        *r->continuation = true;
        return false;
    }
    snprintf(key, sizeof key, "%d", r->npoints++);
    BSON_APPEND_DOCUMENT(r->out, key, &doc);
    r->bytes += doc.len + 16;
    bson_destroy(&doc);
    return true;
}

/* splitVector (notes §6.1): split at every keyCount-th key, keyCount = half a chunk's worth
 * of documents; the first key is a sentinel that never becomes a split point; a key equal
 * to the previous split point is "too frequent" and skipped. */
static void split_vector_points(const split_args_t *a, const keylist_t *keys, int64_t key_count,
                                int *idx, int *n) {
    const buf_t *last = keys->n ? &keys->k[0] : NULL;
    int64_t cur = 0;
    *n = 0;
    for (size_t i = 0; i < keys->n; i++) {
        cur++;
        if (cur > key_count) {
            if (last && buf_eq(&keys->k[i], last)) continue;  /* too frequent: keep scanning */
            idx[(*n)++] = (int)i;
            last = &keys->k[i];
            cur = 0;
            if (a->max_split_points > 0 && *n >= a->max_split_points) break;
            if (*n >= SHARDD_SPLIT_POINTS_MAX) break;
        }
    }
}

/* autoSplitVector (notes §6.2): split every maxDocsPerChunk keys skipping repeats; with a
 * limit compute limit+1 points and keep limit; otherwise fix a small tail chunk. */
static void auto_split_points(const split_args_t *a, const keylist_t *keys, int64_t per_chunk,
                              int *idx, int *n) {
    int64_t cur = 0, want = a->limit > 0 ? a->limit + 1 : SHARDD_SPLIT_POINTS_MAX;
    const buf_t *last = keys->n ? &keys->k[0] : NULL;
    *n = 0;
    if (per_chunk < 1) per_chunk = 1;
    for (size_t i = 0; i < keys->n && *n < want && *n < SHARDD_SPLIT_POINTS_MAX; i++) {
        cur++;
        if (cur > per_chunk) {
            if (last && buf_eq(&keys->k[i], last)) continue;
            idx[(*n)++] = (int)i;
            last = &keys->k[i];
            cur = 1;
        }
    }
    if (a->limit > 0) {
        if (*n > a->limit) *n = (int)a->limit;
        return;
    }
    if (*n > 0) {
        int64_t tail = (int64_t)keys->n - idx[*n - 1];
        if (tail < per_chunk * 8 / 10) {
            /* Tail fix: spread the last min(3, n) chunks and the tail evenly, unless that
             * makes chunks smaller than about 2/3 of a chunk; then drop the last point. */
            int k = *n < 3 ? *n : 3;
            int start = *n - k - 1 >= 0 ? idx[*n - k - 1] : 0;
            int64_t region = (int64_t)keys->n - start, each = region / (k + 1);
            if (each < per_chunk * 67 / 100) {
                (*n)--;
            } else {
                int m = *n - k;
                const buf_t *prev = m > 0 ? &keys->k[idx[m - 1]] : &keys->k[0];
                int64_t c2 = 0;
                for (size_t i = (size_t)start; i < keys->n && m < *n; i++) {
                    if (++c2 > each) {
                        if (buf_eq(&keys->k[i], prev)) continue;
                        idx[m++] = (int)i;
                        prev = &keys->k[i];
                        c2 = 1;
                    }
                }
                *n = m;
            }
        }
    }
}

typedef struct sv_arg {
    split_run_t *r;
} sv_arg_t;

static int split_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    split_run_t *r = ((sv_arg_t *)arg)->r;
    const split_args_t *a = r->a;
    store_coll_t *c = store_coll_get(t, a->ns);
    keysrc_t ks;
    buf_t lo = {0}, hi = {0};
    keylist_t keys = {0};
    int64_t coll_n, coll_bytes, avg, per;
    int *idx = NULL, n = 0, rc;
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "ns not found %s", a->ns);
    if ((rc = keysrc_find(c, &a->key_pattern, &ks, err)) != 0) return rc;
    if ((rc = encode_bounds(&ks, &a->min, &a->max, &lo, &hi, err)) != 0) goto out;
    /* Size figures use the whole local collection, as MongoDB does. */
    if ((rc = store_coll_stats(t, c, &coll_n, &coll_bytes, NULL, NULL, err)) != 0) goto out;
    if (coll_n == 0) goto out;
    avg = coll_bytes / coll_n;
    if (avg < 1) avg = 1;
    if (!a->force && !a->auto_mode && coll_bytes < a->max_chunk_bytes) goto out;
    if (a->auto_mode) {
        /* A range that fits in one chunk needs no point: decided from the index count
         * before any key is read (the balancer asks this of every chunk each round).
         * Exact with a limit too: a point needs more than max / avg keys (per below). */
        int64_t range_n;
        if ((rc = range_size(t, c, &ks, &lo, &hi, &range_n, NULL, err)) != 0) goto out;
        if (range_n * avg <= a->max_chunk_bytes) goto out;
    }
    if ((rc = range_keys(t, c, &ks, &lo, &hi, &keys, err)) != 0) goto out;
    if (keys.n < 2) goto out;
    if (buf_eq(&keys.k[0], &keys.k[keys.n - 1])) {
        log_warn("splitVector low cardinality: first and last keys are equal, no split points "
                 "ns=%s", log_str(a->ns));
        goto out;
    }
    idx = calloc(SHARDD_SPLIT_POINTS_MAX + 1, sizeof *idx);
    ASSERT(idx != NULL);
    if (a->force) {
        /* force: split at the median key. */
        int m = (int)(keys.n / 2);
        while (m < (int)keys.n && buf_eq(&keys.k[m], &keys.k[0])) m++;
        if (m < (int)keys.n) idx[n++] = m;
    } else if (a->auto_mode) {
        per = a->max_chunk_bytes / avg;
        auto_split_points(a, &keys, per, idx, &n);
    } else {
        int64_t key_count = a->max_chunk_bytes / (2 * avg);
        int64_t cap = a->max_chunk_objects > 0 ? a->max_chunk_objects : MS_CHUNK_OBJECTS_MAX;
        if (key_count > cap) key_count = cap;
        if (key_count < 1) key_count = 1;
        split_vector_points(a, &keys, key_count, idx, &n);
    }
    for (int i = 0; i < n; i++)
        if (!emit_point(r, &ks, &keys.k[idx[i]])) break;
out:
    free(idx);
    keylist_free(&keys);
    buf_free(&lo);
    buf_free(&hi);
    keys_pattern_free(&ks.kp);
    return rc;
}

int split_args_check(const split_args_t *a, ms_error_t *err) {
    /* splitVector's and autoSplitVector's size check; force needs no size (median). */
    if (!a->force && (a->max_chunk_bytes < 1024 * 1024 || a->max_chunk_bytes > 1024LL * 1024 * 1024))
        return err_set(err, MS_ERR_INVALID_OPTIONS, "maxChunkSize must lie within [1MB, 1024MB], "
                       "got %lld bytes", (long long)a->max_chunk_bytes);
    return 0;
}

int split_compute(store_t *st, const split_args_t *a, bson_t *arr, bool *continuation,
                  ms_error_t *err) {
    split_run_t r = {a, arr, continuation, 0, 0};
    sv_arg_t sa = {&r};
    *continuation = false;
    return store_read(st, split_fn, &sa, err);
}

static int split_cmd(cmd_ctx_t *ctx, bson_t *reply, bool auto_mode, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    split_args_t a;
    bson_iter_t it;
    bson_t arr = BSON_INITIALIZER;
    bool cont = false;
    int rc;
    memset(&a, 0, sizeof a);
    if ((rc = full_ns(ctx, auto_mode, ns, sizeof ns, err)) != 0) goto out;
    a.ns = ns;
    a.auto_mode = auto_mode;
    if (!doc_field(ctx, "keyPattern", &a.key_pattern) || bson_empty(&a.key_pattern)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'keyPattern' is missing");
        goto out;
    }
    if (!doc_field(ctx, "min", &a.min)) bson_init(&a.min);
    if (!doc_field(ctx, "max", &a.max)) bson_init(&a.max);
    a.force = !auto_mode && cmd_flag(ctx, "force", false);
    if (cmd_field(ctx, "maxChunkSizeBytes", &it)) {
        if (!bsonx_as_int64(&it, &a.max_chunk_bytes)) {
            rc = err_set(err, MS_ERR_TYPE_MISMATCH, "maxChunkSizeBytes must be a number");
            goto out;
        }
    } else if (cmd_field(ctx, "maxChunkSize", &it)) {
        int64_t mb;
        if (!bsonx_as_int64(&it, &mb)) {
            rc = err_set(err, MS_ERR_TYPE_MISMATCH, "maxChunkSize must be a number");
            goto out;
        }
        a.max_chunk_bytes = mb * 1024 * 1024;
    } else if (!a.force) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "need to specify the desired max chunk size "
                     "(maxChunkSize or maxChunkSizeBytes)");
        goto out;
    }
    /* With --enable-test-commands a size below 1 MB is taken (>= 1 KB): the config
     * server's test-only chunksize valueBytes, so tests get many chunks from little data. */
    if (!(ctx->srv && cmd_server_test_commands(ctx->srv) && !a.force &&
          a.max_chunk_bytes >= MS_CHUNKSIZE_VALUE_BYTES_MIN && a.max_chunk_bytes < 1024 * 1024) &&
        (rc = split_args_check(&a, err)) != 0)
        goto out;
    if (cmd_field(ctx, "maxSplitPoints", &it)) bsonx_as_int64(&it, &a.max_split_points);
    if (cmd_field(ctx, "maxChunkObjects", &it)) bsonx_as_int64(&it, &a.max_chunk_objects);
    if (cmd_field(ctx, "limit", &it)) bsonx_as_int64(&it, &a.limit);
    if ((rc = split_compute(app->st, &a, &arr, &cont, err)) != 0) goto out;
    BSON_APPEND_ARRAY(reply, "splitKeys", &arr);
    if (auto_mode) BSON_APPEND_BOOL(reply, "continuation", cont);
out:
    bson_destroy(&arr);
    return rc;
}

int cmd_split_vector(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return split_cmd(ctx, reply, false, err);
}

int cmd_auto_split_vector(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return split_cmd(ctx, reply, true, err);
}

/* ---- the balancer's batch ------------------------------------------------------------- */

/* One ranges[] element: {min, max} as views into the request. */
static int batch_range(bson_iter_t *el, bson_t *min, bson_t *max, ms_error_t *err) {
    bson_iter_t f;
    uint32_t len;
    const uint8_t *data;
    bson_t doc;
    bson_init(min);
    bson_init(max);
    if (!BSON_ITER_HOLDS_DOCUMENT(el))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "ranges elements must be {min, max} documents");
    bson_iter_document(el, &len, &data);
    if (!bson_init_static(&doc, data, len)) return err_set(err, MS_ERR_BAD_VALUE, "bad range document");
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "max" : "min";
        if (!bson_iter_init_find(&f, &doc, name) || !BSON_ITER_HOLDS_DOCUMENT(&f))
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "ranges element field '%s' must be a document", name);
        bson_iter_document(&f, &len, &data);
        if (!bson_init_static(k ? max : min, data, len)) return err_set(err, MS_ERR_BAD_VALUE, "bad %s", name);
    }
    return 0;
}

/* Appends {min, max, splitKeys} for one range with points to results; false when the
 * reply would pass MS_BATCH_BYTES_MAX (the caller stops there: truncated). */
static bool batch_result(bson_t *results, int *n, const bson_t *min, const bson_t *max, const bson_t *keys) {
    if (results->len + min->len + max->len + keys->len + 64 > (uint32_t)MS_BATCH_BYTES_MAX) return false;
    char k[16];
    const char *key;
    bson_t d;
    bson_uint32_to_string((uint32_t)(*n)++, &key, k, sizeof k);
    BSON_APPEND_DOCUMENT_BEGIN(results, key, &d);
    BSON_APPEND_DOCUMENT(&d, "min", min);
    BSON_APPEND_DOCUMENT(&d, "max", max);
    BSON_APPEND_ARRAY(&d, "splitKeys", keys);
    bson_append_document_end(results, &d);
    return true;
}

/* This process's growth token of ns: "<incarnation>:<grown bytes>" — equal tokens mean
 * no document of ns grew in between (the incarnation tells a restart apart). */
typedef struct grown_arg {
    const char *ns;
    char *out;
    size_t cap;
} grown_arg_t;

static int grown_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    static uint64_t incarnation;
    grown_arg_t *g = arg;
    (void)err;
    uint64_t inc = __atomic_load_n(&incarnation, __ATOMIC_RELAXED);
    if (inc == 0) {
        inc = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
        __atomic_store_n(&incarnation, inc, __ATOMIC_RELAXED);
    }
    store_coll_t *c = store_coll_get(t, g->ns);
    snprintf(g->out, g->cap, "%llx:%lld", (unsigned long long)inc, c ? (long long)store_coll_grown(c) : -1LL);
    return 0;
}

/* _shardsvrAutoSplitVectorBatch (minishard's; MongoDB has no batch form): autoSplitVector
 * for each of up to SHARDD_AUTOSPLIT_BATCH_RANGES_MAX ranges of one collection, so that a
 * balancer round asks each shard once. Replies {results: [{min, max, splitKeys}] (only
 * ranges with points), checked: ranges answered, truncated: the reply reached the batch
 * limit before the last range (the rest are asked again later), grownToken}. With
 * ifGrownSince equal to the current grownToken nothing grew since that reply: {unchanged:
 * true}, nothing checked. */
int cmd_auto_split_vector_batch(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    split_args_t a;
    bson_iter_t it, el;
    bson_t results = BSON_INITIALIZER;
    int rc, n = 0, checked = 0, nranges = 0;
    bool truncated = false;
    memset(&a, 0, sizeof a);
    if ((rc = shardd_ns(ctx, ns, sizeof ns, err)) != 0) goto out;
    a.ns = ns;
    a.auto_mode = true;
    if (!doc_field(ctx, "keyPattern", &a.key_pattern) || bson_empty(&a.key_pattern)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'keyPattern' is missing");
        goto out;
    }
    if (!cmd_field(ctx, "maxChunkSizeBytes", &it) || !bsonx_as_int64(&it, &a.max_chunk_bytes)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'maxChunkSizeBytes' must be a number");
        goto out;
    }
    if (!(ctx->srv && cmd_server_test_commands(ctx->srv) && a.max_chunk_bytes >= MS_CHUNKSIZE_VALUE_BYTES_MIN &&
          a.max_chunk_bytes < 1024 * 1024) &&
        (rc = split_args_check(&a, err)) != 0)
        goto out;
    if (cmd_field(ctx, "limit", &it)) bsonx_as_int64(&it, &a.limit);
    /* Taken before the checks: a write during them makes the next token differ. */
    char token[64];
    grown_arg_t ga = {ns, token, sizeof token};
    if ((rc = store_read(app->st, grown_fn, &ga, err)) != 0) goto out;
    BSON_APPEND_UTF8(reply, "grownToken", token);
    if (cmd_field(ctx, "ifGrownSince", &it) && BSON_ITER_HOLDS_UTF8(&it) &&
        strcmp(bson_iter_utf8(&it, NULL), token) == 0) {
        BSON_APPEND_BOOL(reply, "unchanged", true);  /* nothing grew: nothing to check */
        goto done;
    }
    if (!cmd_field(ctx, "ranges", &it) || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &el)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'ranges' must be an array");
        goto out;
    }
    for (bson_iter_t cnt = el; bson_iter_next(&cnt);) nranges++;
    if (nranges > SHARDD_AUTOSPLIT_BATCH_RANGES_MAX) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "ranges has %d elements, at most %d", nranges,
                     SHARDD_AUTOSPLIT_BATCH_RANGES_MAX);
        goto out;
    }
    while (!truncated && bson_iter_next(&el)) {
        bson_t keys = BSON_INITIALIZER;
        bool cont = false;
        ms_error_t late = {0};
        if (checked > 0 && op_check(&late) != 0) {   /* out of time: what was checked */
            truncated = true;
            bson_destroy(&keys);
            break;
        }
        if ((rc = batch_range(&el, &a.min, &a.max, err)) == 0)
            rc = split_compute(app->st, &a, &keys, &cont, err);
        if (rc == 0 && !bson_empty(&keys)) truncated = !batch_result(&results, &n, &a.min, &a.max, &keys);
        bson_destroy(&keys);
        if (rc) goto out;
        if (!truncated) checked++;
    }
done:
    BSON_APPEND_ARRAY(reply, "results", &results);
    BSON_APPEND_INT32(reply, "checked", checked);
    BSON_APPEND_BOOL(reply, "truncated", truncated);
out:
    bson_destroy(&results);
    return rc;
}
