/*
 * cat_routing.c — the routing table of the config server's catalog (bin/configsvr):
 * getRoutingTable's reply (full, or incremental: the chunks changed since a version, as
 * MongoDB's catalog cache refresh asks) and the version document {e, t, v} (MongoDB's
 * ChunkVersion). The reply's contract is in shardd/shardver.h and common/rtable.h. Part
 * of the catalog module (catalog.c says how the files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

void cat_version_append(bson_t *dst, const char *key, const cat_version_t *v) {
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(dst, key, &d);
    BSON_APPEND_OID(&d, "e", &v->epoch);
    cat_append_ts(&d, "t", v->ts);
    bson_append_timestamp(&d, "v", -1, v->major, v->minor);
    bson_append_document_end(dst, &d);
}

int cat_version_parse(const bson_t *doc, cat_version_t *out, ms_error_t *err) {
    bson_iter_t it;
    bool he = false, ht = false, hv = false;
    memset(out, 0, sizeof *out);
    if (!bson_iter_init(&it, doc)) return err_set(err, MS_ERR_BAD_VALUE, "malformed version");
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "e") == 0 && BSON_ITER_HOLDS_OID(&it)) {
            bson_oid_copy(bson_iter_oid(&it), &out->epoch);
            he = true;
        } else if (strcmp(k, "t") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &out->ts.t, &out->ts.i);
            ht = true;
        } else if (strcmp(k, "v") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &out->major, &out->minor);
            hv = true;
        }
    }
    if (!he || !ht || !hv)
        return err_set(err, MS_ERR_BAD_VALUE,
                       "a version must be {e: ObjectId, t: Timestamp, v: Timestamp(major, minor)}");
    return 0;
}

/* Chunks in one page when the test flag does not lower it: the byte cap ends it first. */
static int page_chunks = MS_CHUNKS_PER_COLLECTION_MAX;

void cat_set_routing_page_chunks(int n) {
    page_chunks = n >= 1 && n <= MS_CHUNKS_PER_COLLECTION_MAX ? n : MS_CHUNKS_PER_COLLECTION_MAX;
}

/* The first lastmod of the page: (0,0) for a full table, else sinceVersion's; past the
 * previous page's last lastmod when the client says where that was. */
static void page_start(bool full, const cat_version_t *since, const cat_version_t *after,
                       uint32_t *major, uint32_t *minor) {
    *major = full ? 0 : since->major;
    *minor = full ? 0 : since->minor;
    if (!after) return;
    uint32_t am = after->major, an = after->minor + 1;
    if (an == 0) am++;   /* minor wrapped: the next lastmod is (major + 1, 0) */
    if (am > *major || (am == *major && an > *minor)) {
        *major = am;
        *minor = an;
    }
}

/* One chunk of a page, kept until the page is sorted by min. */
typedef struct page_row {
    uint8_t *min_enc;
    int min_len;
    bson_t doc;
} page_row_t;

static void row_take(page_row_t *r, sqlite3_stmt *st) {
    bson_t b;
    r->min_len = sqlite3_column_bytes(st, CC_MIN_ENC);
    r->min_enc = malloc((size_t)r->min_len + 1);
    if (!r->min_enc) abort();
    memcpy(r->min_enc, sqlite3_column_blob(st, CC_MIN_ENC), (size_t)r->min_len);
    bson_init(&r->doc);
    cat_col_view(st, CC_MIN, &b);
    BSON_APPEND_DOCUMENT(&r->doc, "min", &b);
    cat_col_view(st, CC_MAX, &b);
    BSON_APPEND_DOCUMENT(&r->doc, "max", &b);
    BSON_APPEND_UTF8(&r->doc, "shard", cat_col_text(st, CC_SHARD));
    bson_append_timestamp(&r->doc, "lastmod", -1, (uint32_t)sqlite3_column_int64(st, CC_MAJOR),
                          (uint32_t)sqlite3_column_int64(st, CC_MINOR));
    if (sqlite3_column_int(st, CC_JUMBO)) BSON_APPEND_BOOL(&r->doc, "jumbo", true);
}

static int row_cmp_min(const void *a, const void *b) {
    const page_row_t *x = a, *y = b;
    int n = x->min_len < y->min_len ? x->min_len : y->min_len;
    int c = memcmp(x->min_enc, y->min_enc, (size_t)n);
    return c ? c : (x->min_len > y->min_len) - (x->min_len < y->min_len);
}

/* The page's rows into chunks, sorted by min (a table of one page reads as it always
 * did; which chunks a page holds is decided by lastmod, their order within it is not). */
static void append_rows(bson_t *reply, page_row_t *rows, int n) {
    bson_t arr;
    if (n > 1) qsort(rows, (size_t)n, sizeof *rows, row_cmp_min);
    bson_append_array_begin(reply, "chunks", -1, &arr);
    for (int i = 0; i < n; i++) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        BSON_APPEND_DOCUMENT(&arr, idx, &rows[i].doc);
        bson_destroy(&rows[i].doc);
        free(rows[i].min_enc);
    }
    bson_append_array_end(reply, &arr);
}

static int routing_locked(cat_t *c, const char *ns, const cat_version_t *since,
                          const cat_version_t *after, bson_t *reply, ms_error_t *err) {
    cat_coll_t coll;
    sqlite3_stmt *st = NULL;
    cat_version_t cv;
    page_row_t *rows = NULL;
    bool full, more = false;
    uint32_t major, minor;
    size_t bytes = 0;
    int rc, s = SQLITE_DONE, n = 0, cap = 0;
    rc = cat_coll_get_locked(c, ns, &coll, err);
    if (rc) return rc;
    bson_oid_copy(&coll.epoch, &cv.epoch);
    cv.ts = coll.ts;
    rc = cat_coll_version_locked(c, ns, NULL, &cv.major, &cv.minor, err);
    if (rc) goto out;
    full = !since || !bson_oid_equal(&since->epoch, &coll.epoch) || since->ts.t != coll.ts.t ||
           since->ts.i != coll.ts.i;
    BSON_APPEND_UTF8(reply, "ns", ns);
    BSON_APPEND_DOCUMENT(reply, "key", &coll.key);
    BSON_APPEND_BOOL(reply, "unique", coll.unique);
    cat_append_uuid(reply, "uuid", coll.uuid);
    BSON_APPEND_OID(reply, "epoch", &coll.epoch);
    cat_append_ts(reply, "timestamp", coll.ts);
    BSON_APPEND_BOOL(reply, "full", full);
    cat_version_append(reply, "collectionVersion", &cv);
    /* Incremental: the chunks with lastmod >= sinceVersion.v (MongoDB's refresh query),
     * which include every chunk created or changed since. */
    page_start(full, since, after, &major, &minor);
    rc = cat_sql_prep(c, CAT_SQL_ROUTING_PAGE, &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, ns);
    sqlite3_bind_int64(st, 2, major);
    sqlite3_bind_int64(st, 3, minor);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)page_chunks + 1);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (n >= page_chunks || bytes > MS_ROUTING_PAGE_BYTES) {
            more = true;   /* a row past the page's end: the client asks again after it */
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            rows = realloc(rows, (size_t)cap * sizeof *rows);
            if (!rows) abort();
        }
        row_take(&rows[n], st);
        bytes += rows[n++].doc.len + 16;   /* + the array key and element header */
    }
    append_rows(reply, rows, n);
    free(rows);
    BSON_APPEND_BOOL(reply, "more", more);
    if (s != SQLITE_DONE && s != SQLITE_ROW) rc = err_from_sqlite(err, s, "routing table", c->db);
out:
    sqlite3_finalize(st);
    cat_coll_free(&coll);
    return rc;
}

int cat_routing_page(cat_t *c, const char *ns, const cat_version_t *since,
                     const cat_version_t *after, bson_t *reply, ms_error_t *err) {
    int rc;
    bson_t tmp = BSON_INITIALIZER;
    pthread_mutex_lock(&c->mu);
    rc = routing_locked(c, ns, since, after, &tmp, err);
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) bson_concat(reply, &tmp);
    bson_destroy(&tmp);
    return rc;
}

int cat_routing_table(cat_t *c, const char *ns, const cat_version_t *since, bson_t *reply,
                      ms_error_t *err) {
    return cat_routing_page(c, ns, since, NULL, reply, err);
}
