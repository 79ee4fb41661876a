/*
 * cat_chunks.c — config.chunks in the config server's catalog (bin/configsvr): the
 * tiling invariant (a collection's chunks cover [MinKey, MaxKey) with no gap or overlap:
 * checked whole when shardCollection writes every chunk, and around the changed range —
 * O(log n) — by every split, merge and migration commit, before and after its writes),
 * chunk lookups, split and merge with MongoDB's version rules (notes §2.2), and the
 * initial split points of a hashed key. Chunk bounds are stored twice: as BSON (what users and routers see)
 * and encoded with common/keys.h (memcmp order = MongoDB's BSON order), so ordering,
 * containment and tiling are plain BLOB comparisons. Part of the catalog module
 * (catalog.c says how the files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/failpoint.h"
#include "common/log.h"

/* ---- pure helpers ------------------------------------------------------------------ */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

void cat_hashed_split_points(int n, int64_t *out) {
    /* MongoDB's calculateHashedSplitPoints: points symmetric around 0, interval =
     * (INT64_MAX / n) * 2; even n includes 0 itself, odd n starts half an interval out. */
    ASSERT(n >= 1);
    if (n == 1) return;  /* one chunk, no point (and (INT64_MAX / 1) * 2 would overflow) */
    const int64_t interval = (INT64_MAX / n) * 2;
    int k = 0;
    int64_t cur = 0;
    if (n % 2 == 0) {
        out[k++] = 0;
        cur = interval;
    } else {
        cur = interval / 2;
    }
    for (int i = 0; i < (n - 1) / 2; i++) {
        out[k++] = cur;
        out[k++] = -cur;
        cur += interval;
    }
    ASSERT(k == n - 1);
    qsort(out, (size_t)k, sizeof *out, cmp_i64);
    for (int i = 1; i < k; i++) ASSERT(out[i - 1] < out[i]);
}

void cat_hashed_initial_bounds(const keys_pattern_t *p, int n, bson_t *bounds) {
    int64_t *pts = malloc(sizeof(int64_t) * (size_t)(n > 1 ? n - 1 : 1));
    ASSERT(pts && p->hashed_field == 0 && n >= 1);
    cat_hashed_split_points(n, pts);
    for (int i = 0; i <= n; i++) bson_init(&bounds[i]);
    keys_global_min(p, &bounds[0]);
    keys_global_max(p, &bounds[n]);
    for (int i = 1; i < n; i++) {
        BSON_APPEND_INT64(&bounds[i], p->fields[0], pts[i - 1]);
        for (int f = 1; f < p->nfields; f++) bson_append_minkey(&bounds[i], p->fields[f], -1);
    }
    free(pts);
}

/* The encoded global min and max of pattern p ({f: MinKey, ...} and {f: MaxKey, ...}). */
static int global_bounds_enc(const keys_pattern_t *p, buf_t *gmin, buf_t *gmax, ms_error_t *err) {
    bson_t lo = BSON_INITIALIZER, hi = BSON_INITIALIZER;
    keys_global_min(p, &lo);
    keys_global_max(p, &hi);
    int rc = keys_encode_bound(p, &lo, gmin, err);
    if (rc == 0) rc = keys_encode_bound(p, &hi, gmax, err);
    bson_destroy(&lo);
    bson_destroy(&hi);
    return rc;
}

/* The tiling invariant of ns, whole: ordered by min, the first chunk starts at the global
 * min, each starts where the previous ended, min < max, and the last ends at the global
 * max. O(chunks): run where every chunk is written anyway (shardCollection) and by tests
 * (cat_verify_tiling); a change of some chunks checks only its range (below). */
int cat_tiling_check_locked(cat_t *c, const char *ns, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t gmin = {0}, gmax = {0}, prev = {0};
    sqlite3_stmt *st = NULL;
    int64_t n = 0;
    int rc, s;
    rc = cat_coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) return rc;
    rc = global_bounds_enc(&p, &gmin, &gmax, err);
    if (rc) goto out;
    buf_put(&prev, gmin.data, gmin.len);
    rc = cat_sql_prep(c, "SELECT min_enc, max_enc FROM chunks WHERE ns = ? ORDER BY min_enc", &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, ns);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const void *mn = sqlite3_column_blob(st, 0), *mx = sqlite3_column_blob(st, 1);
        size_t mnl = (size_t)sqlite3_column_bytes(st, 0), mxl = (size_t)sqlite3_column_bytes(st, 1);
        n++;
        int gap = cat_blob_cmp(mn, mnl, prev.data, prev.len);
        if (gap != 0) {
            rc = err_set(err, MS_ERR_INTERNAL, "chunks of %s %s before chunk #%lld", ns,
                         gap > 0 ? "leave a gap" : "overlap", (long long)n);
            goto out;
        }
        if (cat_blob_cmp(mn, mnl, mx, mxl) >= 0) {
            rc = err_set(err, MS_ERR_INTERNAL, "chunk #%lld of %s has min >= max", (long long)n, ns);
            goto out;
        }
        buf_reset(&prev);
        buf_put(&prev, mx, mxl);
    }
    if (s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "tiling scan", c->db);
        goto out;
    }
    if (n == 0) rc = err_set(err, MS_ERR_INTERNAL, "collection %s has no chunks", ns);
    else if (cat_buf_cmp(&prev, &gmax) != 0)
        rc = err_set(err, MS_ERR_INTERNAL, "chunks of %s do not reach MaxKey", ns);
out:
    sqlite3_finalize(st);
    buf_free(&gmin);
    buf_free(&gmax);
    buf_free(&prev);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
    return rc;
}

/* Our invariant after shardCollection wrote every chunk, before COMMIT. */
void cat_tiling_assert_locked(cat_t *c, const char *ns) {
    ms_error_t e = {0};
    int rc = cat_tiling_check_locked(c, ns, &e);
    if (rc) log_error("tiling invariant broken ns=%s err=%s", log_str(ns), log_str(e.msg));
    ASSERT(rc == 0);
}

int cat_verify_tiling(cat_t *c, const char *ns, ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_tiling_check_locked(c, ns, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- the tiling around one changed range ----------------------------------------------
 * A split, a merge and a migration's commit each rewrite one range [lo, hi) of the key
 * space and leave every other chunk alone. So the tiling holds after the change when it
 * holds in [lo, hi) and at its two edges: the chunks starting in [lo, hi) follow one
 * another from lo to hi, the chunk before lo ends exactly at lo (none when lo is MinKey)
 * and the chunk after starts exactly at hi (none when hi is MaxKey). Three range reads of
 * the index chunks_ns_min: O(log n + pieces), whatever the collection's size. A fault
 * elsewhere is left to checkMetadataConsistency (cat_consistency.c) and to the whole
 * check of the tests (cat_verify_tiling). The faults carry MongoDB's inconsistency type
 * names (checkMetadataConsistency's) so a log line reads like its report. */

static int tiling_fault(ms_error_t *err, const char *type, const char *ns, const char *what) {
    return err_set(err, MS_ERR_INTERNAL, "%s in %s: %s", type, ns, what);
}

/* The one chunk of ns that sql (ns = ?1, key = ?2, LIMIT 1) finds, bounds into *mn, *mx;
 * *found false when there is none. */
static int edge_chunk_locked(cat_t *c, const char *sql, const char *ns, const buf_t *key,
                             buf_t *mn, buf_t *mx, bool *found, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, sql, &st, err), s;
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    cat_bind_buf(st, 2, key);
    s = sqlite3_step(st);
    *found = s == SQLITE_ROW;
    if (*found) {
        buf_put(mn, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
        buf_put(mx, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1));
    } else if (s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "tiling edge", c->db);
    }
    sqlite3_finalize(st);
    return rc;
}

/* One edge of the changed range: below (at = lo) the chunk before ends exactly at lo, and
 * there is none when lo is MinKey; above (at = hi) the chunk after starts exactly at hi,
 * and there is none when hi is MaxKey. end is that global bound (encoded). */
static int tiling_edge(cat_t *c, const char *ns, bool below, const buf_t *at, const buf_t *end,
                       ms_error_t *err) {
    buf_t mn = {0}, mx = {0};
    bool found = false;
    const char *end_type = below ? "RoutingTableMissingMinKey" : "RoutingTableMissingMaxKey";
    int rc = edge_chunk_locked(c, below ? CAT_SQL_TILING_BELOW : CAT_SQL_TILING_ABOVE, ns, at,
                               &mn, &mx, &found, err);
    if (rc == 0) {
        bool at_end = cat_buf_cmp(at, end) == 0;
        /* where the neighbour meets the range: its max below, its min above */
        int d = found ? cat_buf_cmp(below ? &mx : &mn, at) : 0;
        if (at_end && found)
            rc = tiling_fault(err, end_type, ns, below ? "a chunk starts before MinKey"
                                                       : "a chunk starts at MaxKey");
        else if (!at_end && !found)
            rc = tiling_fault(err, end_type, ns, below ? "no chunk starts at MinKey"
                                                       : "no chunk reaches MaxKey");
        else if (found && cat_buf_cmp(&mn, &mx) >= 0)
            rc = tiling_fault(err, "RoutingTableRangeOverlap", ns, "a chunk with min >= max");
        else if (d != 0)
            rc = tiling_fault(err, (below ? d < 0 : d > 0) ? "RoutingTableRangeGap"
                                                          : "RoutingTableRangeOverlap",
                              ns, below ? "between the changed range and the chunk before it"
                                        : "between the changed range and the chunk after it");
    }
    buf_free(&mn);
    buf_free(&mx);
    return rc;
}

/* Inside [lo, hi): chunks follow one another from lo to hi, each min < max, and (above
 * given) each lastmod newer than *above: the version rule of a change (notes §2.2) —
 * every chunk it writes gets a version above the collection version it started from. */
static int tiling_inside(cat_t *c, const char *ns, const buf_t *lo, const buf_t *hi,
                         const cat_lastmod_t *above, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    buf_t prev = {0};
    int64_t n = 0;
    int rc = cat_sql_prep(c, CAT_SQL_TILING_INSIDE, &st, err), s = SQLITE_DONE;
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    cat_bind_buf(st, 2, lo);
    cat_bind_buf(st, 3, hi);
    buf_put(&prev, lo->data, lo->len);
    while (rc == 0 && (s = sqlite3_step(st)) == SQLITE_ROW) {
        const void *mn = sqlite3_column_blob(st, 0), *mx = sqlite3_column_blob(st, 1);
        size_t mnl = (size_t)sqlite3_column_bytes(st, 0), mxl = (size_t)sqlite3_column_bytes(st, 1);
        uint32_t M = (uint32_t)sqlite3_column_int64(st, 2), m = (uint32_t)sqlite3_column_int64(st, 3);
        int gap = cat_blob_cmp(mn, mnl, prev.data, prev.len);
        if (gap != 0)
            rc = tiling_fault(err, gap > 0 ? "RoutingTableRangeGap" : "RoutingTableRangeOverlap",
                              ns, "between two chunks of the changed range");
        else if (cat_blob_cmp(mn, mnl, mx, mxl) >= 0)
            rc = tiling_fault(err, "RoutingTableRangeOverlap", ns, "a chunk with min >= max");
        else if (above && !(M > above->major || (M == above->major && m > above->minor)))
            rc = err_set(err, MS_ERR_INTERNAL, "a changed chunk of %s has version %u|%u, not "
                         "above the collection version %u|%u", ns, M, m, above->major,
                         above->minor);
        buf_reset(&prev);
        buf_put(&prev, mx, mxl);
        n++;
    }
    if (rc == 0 && s != SQLITE_DONE) rc = err_from_sqlite(err, s, "tiling range", c->db);
    else if (rc == 0 && n == 0)
        rc = tiling_fault(err, "RoutingTableRangeGap", ns, "no chunk starts in the changed range");
    else if (rc == 0 && cat_buf_cmp(&prev, hi) != 0)
        rc = tiling_fault(err, cat_buf_cmp(&prev, hi) < 0 ? "RoutingTableRangeGap"
                                                          : "RoutingTableRangeOverlap",
                          ns, "between the changed range's last chunk and the chunk after it");
    sqlite3_finalize(st);
    buf_free(&prev);
    return rc;
}

int cat_tiling_check_range_locked(cat_t *c, const char *ns, const keys_pattern_t *p,
                                  const buf_t *lo, const buf_t *hi, const cat_lastmod_t *above,
                                  ms_error_t *err) {
    buf_t gmin = {0}, gmax = {0};
    int rc = global_bounds_enc(p, &gmin, &gmax, err);
    if (rc == 0) rc = tiling_edge(c, ns, true, lo, &gmin, err);
    if (rc == 0) rc = tiling_inside(c, ns, lo, hi, above, err);
    if (rc == 0) rc = tiling_edge(c, ns, false, hi, &gmax, err);
    buf_free(&gmin);
    buf_free(&gmax);
    return rc;
}

int cat_tiling_refuse_locked(cat_t *c, const char *ns, const keys_pattern_t *p, const buf_t *lo,
                             const buf_t *hi, ms_error_t *err) {
    int rc = cat_tiling_check_range_locked(c, ns, p, lo, hi, NULL, err);
    if (rc) {
        log_error("chunk change refused: stored chunks are inconsistent ns=%s err=%s",
                  log_str(ns), log_str(err->msg));
        err_prefix(err, "refusing to change the chunks of %s, run checkMetadataConsistency", ns);
    }
    return rc;
}

void cat_tiling_assert_range_locked(cat_t *c, const char *ns, const keys_pattern_t *p,
                                    const buf_t *lo, const buf_t *hi, const cat_lastmod_t *above) {
    ms_error_t e = {0};
    int rc = cat_tiling_check_range_locked(c, ns, p, lo, hi, above, &e);
    if (rc) log_error("tiling invariant broken by a change ns=%s err=%s", log_str(ns), log_str(e.msg));
    ASSERT(rc == 0);
}

/* History array [{validAfter, shard}] (newest first, as MongoDB keeps it). */
void cat_history_one(bson_t *arr_out, cat_ts_t valid_after, const char *shard) {
    bson_t e;
    bson_init(arr_out);
    BSON_APPEND_DOCUMENT_BEGIN(arr_out, "0", &e);
    cat_append_ts(&e, "validAfter", valid_after);
    BSON_APPEND_UTF8(&e, "shard", shard);
    bson_append_document_end(arr_out, &e);
}

int cat_chunk_insert_locked(cat_t *c, const char *ns, const uint8_t uuid[16],
                               const bson_oid_t *id, const bson_t *min, const bson_t *max,
                               const buf_t *min_enc, const buf_t *max_enc, const char *shard,
                               uint32_t major, uint32_t minor, cat_ts_t since,
                               const bson_t *history, ms_error_t *err) {
    int rc = 0;
    if (!c->chunk_insert)
        rc = cat_sql_prep(c, "INSERT INTO chunks (id, ns, uuid, min, max, min_enc, max_enc, shard,"
                          " major, minor, jumbo, est_size, since_t, since_i, history)"
                          " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?, ?, ?)",
                          &c->chunk_insert, err);
    if (rc) return rc;
    sqlite3_stmt *st = c->chunk_insert;
    sqlite3_bind_blob(st, 1, id->bytes, 12, SQLITE_TRANSIENT);
    cat_bind_text(st, 2, ns);
    sqlite3_bind_blob(st, 3, uuid, 16, SQLITE_TRANSIENT);
    cat_bind_bson(st, 4, min);
    cat_bind_bson(st, 5, max);
    cat_bind_buf(st, 6, min_enc);
    cat_bind_buf(st, 7, max_enc);
    cat_bind_text(st, 8, shard);
    sqlite3_bind_int64(st, 9, major);
    sqlite3_bind_int64(st, 10, minor);
    sqlite3_bind_int64(st, 11, since.t);
    sqlite3_bind_int64(st, 12, since.i);
    cat_bind_bson(st, 13, history);
    rc = cat_sql_done(c, st, "insert chunk", err);
    sqlite3_reset(st);  /* every parameter is bound again on the next use */
    return rc;
}

/* ---- chunks ------------------------------------------------------------------------ */

/* {min, max, lastmod} of a row, for changelog details. */
static void chunk_brief(sqlite3_stmt *st, bson_t *dst, const char *key) {
    bson_t d, b;
    BSON_APPEND_DOCUMENT_BEGIN(dst, key, &d);
    cat_col_view(st, CC_MIN, &b);
    BSON_APPEND_DOCUMENT(&d, "min", &b);
    cat_col_view(st, CC_MAX, &b);
    BSON_APPEND_DOCUMENT(&d, "max", &b);
    bson_append_timestamp(&d, "lastmod", -1, (uint32_t)sqlite3_column_int64(st, CC_MAJOR),
                          (uint32_t)sqlite3_column_int64(st, CC_MINOR));
    bson_append_document_end(dst, &d);
}

static void brief_of(bson_t *dst, const char *key, const bson_t *min, const bson_t *max,
                     uint32_t major, uint32_t minor) {
    bson_t d;
    BSON_APPEND_DOCUMENT_BEGIN(dst, key, &d);
    BSON_APPEND_DOCUMENT(&d, "min", min);
    BSON_APPEND_DOCUMENT(&d, "max", max);
    bson_append_timestamp(&d, "lastmod", -1, major, minor);
    bson_append_document_end(dst, &d);
}

/* Loads the chunk of ns whose encoded bounds are exactly [min_enc, max_enc): returns the
 * prepared statement positioned on the row (caller finalizes) or BadValue. */
static int chunk_exact_locked(cat_t *c, const char *ns, const buf_t *min_enc,
                              const buf_t *max_enc, const bson_t *min, const bson_t *max,
                              sqlite3_stmt **out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, CAT_SQL_CHUNK_AT, &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    cat_bind_buf(st, 2, min_enc);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW &&
        cat_blob_cmp(sqlite3_column_blob(st, CC_MAX_ENC), (size_t)sqlite3_column_bytes(st, CC_MAX_ENC),
                 max_enc->data, max_enc->len) == 0) {
        *out = st;
        return 0;
    }
    sqlite3_finalize(st);
    if (s != SQLITE_ROW && s != SQLITE_DONE) return err_from_sqlite(err, s, "find chunk", c->db);
    char *a = bson_as_relaxed_extended_json(min, NULL), *b = bson_as_relaxed_extended_json(max, NULL);
    rc = err_set(err, MS_ERR_BAD_VALUE,
                 "could not meet precondition: no chunk [%s, %s) in %s; the boundaries may be "
                 "stale", a ? a : "?", b ? b : "?", ns);
    bson_free(a);
    bson_free(b);
    return rc;
}

int cat_chunk_exact(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                    char *shard_out, size_t cap, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0};
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) goto unlock;
    rc = keys_encode_bound(&p, min, &mn, err);
    if (rc == 0) rc = keys_encode_bound(&p, max, &mx, err);
    if (rc == 0) rc = chunk_exact_locked(c, ns, &mn, &mx, min, max, &st, err);
    if (rc == 0) cat_copy_str(shard_out, cap, cat_col_text(st, CC_SHARD));
    sqlite3_finalize(st);
    buf_free(&mn);
    buf_free(&mx);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
unlock:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_chunk_containing(cat_t *c, const char *ns, const bson_t *key, bson_t *min_out,
                         bson_t *max_out, char *shard_out, size_t cap, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t k = {0};
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) goto unlock;
    rc = keys_encode_bound(&p, key, &k, err);
    if (rc == 0)
        rc = cat_sql_prep(c, CAT_SQL_CHUNK_CONTAINING, &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, ns);
        cat_bind_buf(st, 2, &k);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW &&
            cat_blob_cmp(k.data, k.len, sqlite3_column_blob(st, CC_MAX_ENC),
                     (size_t)sqlite3_column_bytes(st, CC_MAX_ENC)) < 0) {
            bson_t b;
            cat_col_view(st, CC_MIN, &b);
            bson_copy_to(&b, min_out);
            cat_col_view(st, CC_MAX, &b);
            bson_copy_to(&b, max_out);
            cat_copy_str(shard_out, cap, cat_col_text(st, CC_SHARD));
        } else if (s == SQLITE_ROW || s == SQLITE_DONE) {
            /* Only MaxKey itself lies outside every chunk. */
            rc = err_set(err, MS_ERR_BAD_VALUE, "no chunk of %s contains that key", ns);
        } else {
            rc = err_from_sqlite(err, s, "find chunk", c->db);
        }
    }
    sqlite3_finalize(st);
    buf_free(&k);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
unlock:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* Appends shard and shardVersion {e, t, v} (the given placement) to info. */
static void info_append(bson_t *info, const char *shard, const cat_coll_t *coll, uint32_t major,
                        uint32_t minor) {
    cat_version_t v;
    if (!info) return;
    bson_oid_copy(&coll->epoch, &v.epoch);
    v.ts = coll->ts;
    v.major = major;
    v.minor = minor;
    BSON_APPEND_UTF8(info, "shard", shard);
    cat_version_append(info, "shardVersion", &v);
}

static int split_locked(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                        const bson_t *const *points, int n, bson_t *info, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0};
    buf_t *pts = NULL;
    sqlite3_stmt *st = NULL, *up = NULL;
    bson_t before = BSON_INITIALIZER, hist_copy, details;
    char shard[CAT_SHARD_NAME_BYTES_MAX];
    uint8_t uuid[16];
    cat_ts_t since;
    uint32_t cM = 0, cm = 0;
    bson_oid_t first_id;
    int rc;
    bson_init(&hist_copy);
    rc = cat_coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) {
        bson_destroy(&hist_copy);
        bson_destroy(&before);
        return rc;
    }
    rc = keys_encode_bound(&p, min, &mn, err);
    if (rc == 0) rc = keys_encode_bound(&p, max, &mx, err);
    if (rc) goto out;
    if (n < 1 || n > CAT_SPLIT_POINTS_MAX) {
        rc = err_set(err, MS_ERR_INVALID_OPTIONS, "a split needs 1..%d split keys, got %d",
                     CAT_SPLIT_POINTS_MAX, n);
        goto out;
    }
    rc = chunk_exact_locked(c, ns, &mn, &mx, min, max, &st, err);
    if (rc) goto out;
    /* Split keys: strictly increasing, strictly inside (min, max) (MongoDB's checks). */
    pts = calloc((size_t)n, sizeof *pts);
    ASSERT(pts);
    for (int i = 0; i < n; i++) {
        rc = keys_split_point_check(&p, points[i], err);
        if (rc == 0) rc = keys_encode_bound(&p, points[i], &pts[i], err);
        if (rc) {
            err_prefix(err, "split key %d", i);
            goto out;
        }
        if (cat_buf_cmp(&pts[i], &mn) == 0) {
            /* Also what a retried split finds once the first attempt committed. */
            rc = err_set(err, MS_ERR_INVALID_OPTIONS,
                         "cannot split on initial or final chunk's key: the split key is the "
                         "chunk's min, already a chunk boundary (split done before?)");
            goto out;
        }
        if (cat_buf_cmp(&pts[i], &mn) < 0 || cat_buf_cmp(&pts[i], &mx) >= 0) {
            rc = err_set(err, MS_ERR_INVALID_OPTIONS, "split key %d is not within the chunk's bounds", i);
            goto out;
        }
        if (i > 0 && cat_buf_cmp(&pts[i - 1], &pts[i]) >= 0) {
            rc = err_set(err, MS_ERR_INVALID_OPTIONS,
                         "split keys must be specified in strictly increasing order");
            goto out;
        }
    }
    cat_copy_str(shard, sizeof shard, cat_col_text(st, CC_SHARD));
    cat_col_oid(st, CC_ID, &first_id);
    memcpy(uuid, sqlite3_column_blob(st, CC_UUID), 16);
    since.t = (uint32_t)sqlite3_column_int64(st, CC_SINCE_T);
    since.i = (uint32_t)sqlite3_column_int64(st, CC_SINCE_I);
    {
        bson_t h;
        cat_col_view(st, CC_HISTORY, &h);
        bson_destroy(&hist_copy);
        bson_copy_to(&h, &hist_copy);
    }
    chunk_brief(st, &before, "before");
    sqlite3_finalize(st);
    st = NULL;
    rc = cat_tiling_refuse_locked(c, ns, &p, &mn, &mx, err);
    if (rc) goto out;

    rc = cat_coll_version_locked(c, ns, NULL, &cM, &cm, err);
    if (rc) goto out;
    if ((uint64_t)cm + (uint64_t)n + 1 > UINT32_MAX) {
        rc = err_set(err, MS_ERR_OVERFLOW, "minor version of %s would overflow", ns);
        goto out;
    }
    /* Pieces in key order get (collM, collm+1), (collM, collm+2), ...; the first keeps
     * the chunk's _id (notes §2.2). */
    rc = cat_sql_prep(c, "UPDATE chunks SET max = ?, max_enc = ?, major = ?, minor = ?, jumbo = 0,"
                    " est_size = NULL WHERE id = ?", &up, err);
    if (rc) goto out;
    cat_bind_bson(up, 1, points[0]);
    cat_bind_buf(up, 2, &pts[0]);
    sqlite3_bind_int64(up, 3, cM);
    sqlite3_bind_int64(up, 4, (int64_t)cm + 1);
    sqlite3_bind_blob(up, 5, first_id.bytes, 12, SQLITE_TRANSIENT);
    rc = cat_sql_done(c, up, "split: shrink chunk", err);
    if (rc) goto out;
    for (int i = 0; i < n && rc == 0; i++) {
        bson_oid_t id;
        bson_oid_init(&id, NULL);
        const bson_t *hi = i + 1 < n ? points[i + 1] : max;
        const buf_t *hie = i + 1 < n ? &pts[i + 1] : &mx;
        rc = cat_chunk_insert_locked(c, ns, uuid, &id, points[i], hi, &pts[i], hie, shard, cM,
                                 cm + 2 + (uint32_t)i, since, &hist_copy, err);
    }
    if (rc) goto out;
    ASSERT(cm + 1 + (uint32_t)n > cm);  /* version only grows */
    cat_tiling_assert_range_locked(c, ns, &p, &mn, &mx, &(cat_lastmod_t){cM, cm});

    /* Changelog: `split` {before, left, right, owningShard} for two pieces, else one
     * `multi-split` {before, number, of, chunk, owningShard} per piece. */
    for (int i = 0; i <= n && rc == 0; i++) {
        const bson_t *lo = i == 0 ? min : points[i - 1];
        const bson_t *hi = i < n ? points[i] : max;
        if (n == 1 && i == 1) break;
        bson_init(&details);
        bson_concat(&details, &before);
        if (n == 1) {
            brief_of(&details, "left", min, points[0], cM, cm + 1);
            brief_of(&details, "right", points[0], max, cM, cm + 2);
        } else {
            BSON_APPEND_INT32(&details, "number", i + 1);
            BSON_APPEND_INT32(&details, "of", n + 1);
            brief_of(&details, "chunk", lo, hi, cM, cm + 1 + (uint32_t)i);
        }
        BSON_APPEND_UTF8(&details, "owningShard", shard);
        rc = cat_log_change_locked(c, "changelog", n == 1 ? "split" : "multi-split", ns, &details, err);
        bson_destroy(&details);
    }
    if (rc == 0) info_append(info, shard, &coll, cM, cm + 1 + (uint32_t)n);
out:
    sqlite3_finalize(st);
    sqlite3_finalize(up);
    if (pts)
        for (int i = 0; i < n; i++) buf_free(&pts[i]);
    free(pts);
    buf_free(&mn);
    buf_free(&mx);
    bson_destroy(&before);
    bson_destroy(&hist_copy);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
    return rc;
}

int cat_chunk_split(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                    const bson_t *const *points, int n, bson_t *info, ms_error_t *err) {
    int rc;
    bson_t tmp = BSON_INITIALIZER;
    fp_early_t fpe;
    fp_eval_early(CFG_FP_SPLIT_BEFORE_COMMIT, &fpe);   /* hang: unlocked */
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = split_locked(c, ns, min, max, points, n, &tmp, err);
        /* Every row written, nothing committed: a crash or an error must undo it all. */
        if (rc == 0) rc = fp_late(&fpe, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) {
        log_info("chunk split ns=%s pieces=%d", log_str(ns), n + 1);
        if (info) bson_concat(info, &tmp);
    }
    bson_destroy(&tmp);
    return rc;
}

static int merge_locked(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                        bson_t *info, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0}, last_max = {0};
    sqlite3_stmt *st = NULL, *up = NULL;
    char shard[CAT_SHARD_NAME_BYTES_MAX] = "";
    bson_oid_t first_id;
    cat_ts_t latest = {0, 0};
    uint32_t cM = 0, cm = 0, sM = 0, sm = 0;
    bson_t hist, details = BSON_INITIALIZER;
    int64_t count = 0;
    int rc, s;
    bson_init(&hist);
    rc = cat_coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) {
        bson_destroy(&hist);
        bson_destroy(&details);
        return rc;
    }
    rc = keys_encode_bound(&p, min, &mn, err);
    if (rc == 0) rc = keys_encode_bound(&p, max, &mx, err);
    if (rc) goto out;
    if (cat_buf_cmp(&mn, &mx) >= 0) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "mergeChunks: min must be less than max");
        goto out;
    }
    rc = cat_sql_prep(c, CAT_SQL_MERGE_PIECES, &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, ns);
    cat_bind_buf(st, 2, &mn);
    cat_bind_buf(st, 3, &mx);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        const void *cmin = sqlite3_column_blob(st, CC_MIN_ENC);
        size_t cminl = (size_t)sqlite3_column_bytes(st, CC_MIN_ENC);
        if (count == 0) {
            if (cat_blob_cmp(cmin, cminl, mn.data, mn.len) != 0) break;  /* reported below */
            cat_copy_str(shard, sizeof shard, cat_col_text(st, CC_SHARD));
            cat_col_oid(st, CC_ID, &first_id);
        } else if (strcmp(shard, cat_col_text(st, CC_SHARD)) != 0) {
            rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                         "could not merge chunks of %s: the range is not all on one shard "
                         "(%s and %s)", ns, shard, cat_col_text(st, CC_SHARD));
            goto out;
        }
        /* Latest validAfter among the pieces becomes the merged chunk's single history
         * entry (notes §2.2). */
        bson_t h;
        bson_iter_t it, e;
        cat_col_view(st, CC_HISTORY, &h);
        if (bson_iter_init_find(&it, &h, "0") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &e) && bson_iter_find(&e, "validAfter") &&
            BSON_ITER_HOLDS_TIMESTAMP(&e)) {
            cat_ts_t va;
            bson_iter_timestamp(&e, &va.t, &va.i);
            if (va.t > latest.t || (va.t == latest.t && va.i > latest.i)) latest = va;
        }
        buf_reset(&last_max);
        buf_put(&last_max, sqlite3_column_blob(st, CC_MAX_ENC), (size_t)sqlite3_column_bytes(st, CC_MAX_ENC));
        count++;
    }
    if (s != SQLITE_ROW && s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "merge scan", c->db);
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    if (count == 0) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                     "could not merge chunks, collection %s does not contain a chunk starting "
                     "at the given min", ns);
        goto out;
    }
    if (cat_buf_cmp(&last_max, &mx) != 0) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                     "could not merge chunks, collection %s does not contain a chunk ending at "
                     "the given max", ns);
        goto out;
    }
    rc = cat_coll_version_locked(c, ns, NULL, &cM, &cm, err);
    if (rc) goto out;
    if (count == 1) {  /* already one chunk: MongoDB answers ok without a change */
        rc = cat_coll_version_locked(c, ns, shard, &sM, &sm, err);
        if (rc == 0) info_append(info, shard, &coll, sM, sm);
        goto out;
    }
    if (cm == UINT32_MAX) {
        rc = err_set(err, MS_ERR_OVERFLOW, "minor version of %s would overflow", ns);
        goto out;
    }
    rc = cat_coll_version_locked(c, ns, shard, &sM, &sm, err);  /* prevPlacementVersion */
    if (rc == 0) rc = cat_tiling_refuse_locked(c, ns, &p, &mn, &mx, err);
    if (rc) goto out;
    cat_history_one(&hist, latest, shard);
    rc = cat_sql_prep(c, CAT_SQL_MERGE_DELETE, &up, err);
    if (rc) goto out;
    cat_bind_text(up, 1, ns);
    cat_bind_buf(up, 2, &mn);
    cat_bind_buf(up, 3, &mx);
    rc = cat_sql_done(c, up, "merge: delete pieces", err);
    if (rc) goto out;
    sqlite3_finalize(up);
    up = NULL;
    rc = cat_sql_prep(c, "UPDATE chunks SET max = ?, max_enc = ?, major = ?, minor = ?, jumbo = 0,"
                    " est_size = NULL, history = ?, since_t = ?, since_i = ? WHERE id = ?", &up, err);
    if (rc) goto out;
    cat_bind_bson(up, 1, max);
    cat_bind_buf(up, 2, &mx);
    sqlite3_bind_int64(up, 3, cM);
    sqlite3_bind_int64(up, 4, (int64_t)cm + 1);
    cat_bind_bson(up, 5, &hist);
    sqlite3_bind_int64(up, 6, latest.t);
    sqlite3_bind_int64(up, 7, latest.i);
    sqlite3_bind_blob(up, 8, first_id.bytes, 12, SQLITE_TRANSIENT);
    rc = cat_sql_done(c, up, "merge: extend first chunk", err);
    if (rc) goto out;
    cat_tiling_assert_range_locked(c, ns, &p, &mn, &mx, &(cat_lastmod_t){cM, cm});

    /* Changelog `merge` {prevPlacementVersion, mergedVersion, owningShard, min, max, numChunks}. */
    bson_append_timestamp(&details, "prevPlacementVersion", -1, sM, sm);
    bson_append_timestamp(&details, "mergedVersion", -1, cM, cm + 1);
    BSON_APPEND_UTF8(&details, "owningShard", shard);
    BSON_APPEND_DOCUMENT(&details, "min", min);
    BSON_APPEND_DOCUMENT(&details, "max", max);
    BSON_APPEND_INT64(&details, "numChunks", count);
    rc = cat_log_change_locked(c, "changelog", "merge", ns, &details, err);
    if (rc == 0) info_append(info, shard, &coll, cM, cm + 1);
out:
    sqlite3_finalize(st);
    sqlite3_finalize(up);
    buf_free(&mn);
    buf_free(&mx);
    buf_free(&last_max);
    bson_destroy(&hist);
    bson_destroy(&details);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
    return rc;
}

int cat_chunk_merge(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                    bson_t *info, ms_error_t *err) {
    int rc;
    bson_t tmp = BSON_INITIALIZER;
    fp_early_t fpe;
    fp_eval_early(CFG_FP_MERGE_BEFORE_COMMIT, &fpe);   /* hang: unlocked */
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = merge_locked(c, ns, min, max, &tmp, err);
        if (rc == 0) rc = fp_late(&fpe, err);  /* as split's */
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) {
        log_info("chunks merged ns=%s", log_str(ns));
        if (info) bson_concat(info, &tmp);
    }
    bson_destroy(&tmp);
    return rc;
}
