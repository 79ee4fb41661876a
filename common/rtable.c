/*
 * rtable.c — routing tables built from getRoutingTable replies (contract in rtable.h),
 * used by the router's cache (bin/router) and the shard's filtering metadata
 * (bin/shardd): parse, merge an incremental refresh, check the tiling, derive the
 * collection and per-shard versions, find a key's chunk, compare versions (notes §2.1).
 */
#include "common/rtable.h"

#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"

int rtable_bytes_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static int buf_cmp(const buf_t *a, const buf_t *b) {
    return rtable_bytes_cmp(a->data, a->len, b->data, b->len);
}

static void chunk_free(rtable_chunk_t *c) {
    buf_free(&c->min);
    buf_free(&c->max);
}

void rtable_clear(rtable_t *t) {
    if (!t) return;
    for (int i = 0; i < t->nchunks; i++) chunk_free(&t->chunks[i]);
    free(t->chunks);
    keys_pattern_free(&t->pattern);
    memset(t, 0, sizeof *t);
}

int rtable_find(const rtable_t *t, const uint8_t *key, size_t len) {
    int lo = 0, hi = t->nchunks - 1, found = 0;
    while (lo <= hi) {   /* the last chunk with min <= key */
        int mid = lo + (hi - lo) / 2;
        if (rtable_bytes_cmp(t->chunks[mid].min.data, t->chunks[mid].min.len, key, len) <= 0) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

int rtable_shard_index(const rtable_t *t, const char *name) {
    for (int i = 0; i < t->nshards; i++)
        if (strcmp(t->shards[i], name) == 0) return i;
    return -1;
}

/* ---- versions ---------------------------------------------------------------------------- */

static bool vless(uint32_t am, uint32_t an, uint32_t bm, uint32_t bn) {
    return am < bm || (am == bm && an < bn);
}

void rtable_version_unsharded(rtable_version_t *out) {
    memset(out, 0, sizeof *out);
}

bool rtable_version_is_unsharded(const rtable_version_t *v) {
    bson_oid_t zero;
    memset(&zero, 0, sizeof zero);
    return bson_oid_equal(&v->epoch, &zero) && v->ts_t == 0 && v->ts_i == 0 && v->major == 0 &&
           v->minor == 0;
}

bool rtable_same_generation(const rtable_version_t *a, const rtable_version_t *b) {
    return bson_oid_equal(&a->epoch, &b->epoch) && a->ts_t == b->ts_t && a->ts_i == b->ts_i;
}

bool rtable_write_compatible(const rtable_version_t *a, const rtable_version_t *b) {
    if (rtable_version_is_unsharded(a) || rtable_version_is_unsharded(b)) return false;
    return rtable_same_generation(a, b) && a->major == b->major;
}

int rtable_version_cmp(const rtable_version_t *a, const rtable_version_t *b, bool *comparable) {
    *comparable = false;
    if (rtable_version_is_unsharded(a) || rtable_version_is_unsharded(b)) return 0;
    if (!rtable_same_generation(a, b)) {
        /* Generations are ordered by timestamp only; epochs carry no order. */
        if (a->ts_t == b->ts_t && a->ts_i == b->ts_i) return 0;
        *comparable = true;
        return vless(a->ts_t, a->ts_i, b->ts_t, b->ts_i) ? -1 : 1;
    }
    *comparable = true;
    if (a->major != b->major) return a->major < b->major ? -1 : 1;
    if (a->minor != b->minor) return a->minor < b->minor ? -1 : 1;
    return 0;
}

void rtable_coll_version(const rtable_t *t, rtable_version_t *out) {
    bson_oid_copy(&t->epoch, &out->epoch);
    out->ts_t = t->ts_t;
    out->ts_i = t->ts_i;
    out->major = t->coll_major;
    out->minor = t->coll_minor;
}

void rtable_shard_version(const rtable_t *t, int shard, rtable_version_t *out) {
    bson_oid_copy(&t->epoch, &out->epoch);
    out->ts_t = t->ts_t;
    out->ts_i = t->ts_i;
    bool known = shard >= 0 && shard < t->nshards;
    out->major = known ? t->shard_major[shard] : 0;
    out->minor = known ? t->shard_minor[shard] : 0;
}

int rtable_version_parse(const bson_iter_t *it, rtable_version_t *out, ms_error_t *err) {
    bson_iter_t c;
    bool he = false, ht = false, hv = false;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &c))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "a version must be a document {e, t, v}");
    memset(out, 0, sizeof *out);
    while (bson_iter_next(&c)) {
        const char *k = bson_iter_key(&c);
        if (strcmp(k, "e") == 0 && BSON_ITER_HOLDS_OID(&c)) {
            bson_oid_copy(bson_iter_oid(&c), &out->epoch);
            he = true;
        } else if (strcmp(k, "t") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&c)) {
            bson_iter_timestamp(&c, &out->ts_t, &out->ts_i);
            ht = true;
        } else if (strcmp(k, "v") == 0 && BSON_ITER_HOLDS_TIMESTAMP(&c)) {
            bson_iter_timestamp(&c, &out->major, &out->minor);
            hv = true;
        }
    }
    if (!he || !ht || !hv)
        return err_set(err, MS_ERR_TYPE_MISMATCH,
                       "a version needs e (ObjectId), t (Timestamp) and v (Timestamp)");
    return 0;
}

void rtable_version_append(bson_t *dst, const char *key, const rtable_version_t *v) {
    bson_t d;
    bson_append_document_begin(dst, key, -1, &d);
    BSON_APPEND_OID(&d, "e", &v->epoch);
    BSON_APPEND_TIMESTAMP(&d, "t", v->ts_t, v->ts_i);
    BSON_APPEND_TIMESTAMP(&d, "v", v->major, v->minor);
    bson_append_document_end(dst, &d);
}

/* ---- building ---------------------------------------------------------------------------- */

static int shard_slot(rtable_t *t, const char *name, ms_error_t *err) {
    int i = rtable_shard_index(t, name);
    if (i >= 0) return i;
    if (strlen(name) >= RTABLE_NAME_BYTES_MAX)
        return -err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: shard name too long");
    if (t->nshards >= MS_SHARDS_MAX)
        return -err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: more than %d shards own chunks",
                        MS_SHARDS_MAX);
    snprintf(t->shards[t->nshards], RTABLE_NAME_BYTES_MAX, "%s", name);
    return t->nshards++;
}

static int parse_chunk(const bson_iter_t *it, rtable_t *t, rtable_chunk_t *c, ms_error_t *err) {
    bson_iter_t d;
    int have = 0;
    memset(c, 0, sizeof *c);
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &d))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: chunk is not a document");
    while (bson_iter_next(&d)) {
        const char *k = bson_iter_key(&d);
        if ((!strcmp(k, "min") || !strcmp(k, "max")) && BSON_ITER_HOLDS_DOCUMENT(&d)) {
            uint32_t len;
            const uint8_t *data;
            bson_t b;
            bool is_min = k[1] == 'i';
            bson_iter_document(&d, &len, &data);
            if (!bson_init_static(&b, data, len))
                return err_set(err, MS_ERR_INVALID_BSON, "getRoutingTable: bad chunk bound");
            buf_t *dst = is_min ? &c->min : &c->max;
            buf_free(dst);
            int rc = keys_encode_bound(&t->pattern, &b, dst, err);
            if (rc) return rc;
            have |= is_min ? 1 : 2;
        } else if (!strcmp(k, "shard") && BSON_ITER_HOLDS_UTF8(&d)) {
            int s = shard_slot(t, bson_iter_utf8(&d, NULL), err);
            if (s < 0) return -s;
            c->shard = s;
            have |= 4;
        } else if (!strcmp(k, "lastmod") && BSON_ITER_HOLDS_TIMESTAMP(&d)) {
            bson_iter_timestamp(&d, &c->major, &c->minor);
            have |= 8;
        }
    }
    if (have != 15)
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "getRoutingTable: chunk needs min, max, shard and lastmod");
    if (buf_cmp(&c->min, &c->max) >= 0)
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: chunk with min >= max");
    return 0;
}

static int chunk_cmp_min(const void *a, const void *b) {
    return buf_cmp(&((const rtable_chunk_t *)a)->min, &((const rtable_chunk_t *)b)->min);
}

/* Tiling check and derived versions. False when the chunks do not tile [MinKey, MaxKey). */
static bool table_finish(rtable_t *t) {
    bson_t bmin, bmax;
    buf_t gmin = {0}, gmax = {0};
    bool ok = t->nchunks > 0;
    bson_init(&bmin);
    bson_init(&bmax);
    keys_global_min(&t->pattern, &bmin);
    keys_global_max(&t->pattern, &bmax);
    if (keys_encode_bound(&t->pattern, &bmin, &gmin, NULL) ||
        keys_encode_bound(&t->pattern, &bmax, &gmax, NULL))
        ok = false;
    if (ok) {
        if (buf_cmp(&t->chunks[0].min, &gmin) != 0) ok = false;
        if (buf_cmp(&t->chunks[t->nchunks - 1].max, &gmax) != 0) ok = false;
        for (int i = 0; ok && i + 1 < t->nchunks; i++)
            if (buf_cmp(&t->chunks[i].max, &t->chunks[i + 1].min) != 0) ok = false;
    }
    memset(t->shard_major, 0, sizeof t->shard_major);
    memset(t->shard_minor, 0, sizeof t->shard_minor);
    for (int i = 0; i < t->nchunks; i++) {
        const rtable_chunk_t *c = &t->chunks[i];
        if (vless(t->coll_major, t->coll_minor, c->major, c->minor)) {
            t->coll_major = c->major;
            t->coll_minor = c->minor;
        }
        if (vless(t->shard_major[c->shard], t->shard_minor[c->shard], c->major, c->minor)) {
            t->shard_major[c->shard] = c->major;
            t->shard_minor[c->shard] = c->minor;
        }
    }
    bson_destroy(&bmin);
    bson_destroy(&bmax);
    buf_free(&gmin);
    buf_free(&gmax);
    return ok;
}

/* Merges sorted, disjoint fresh chunks into base's: an old chunk survives when no fresh
 * chunk overlaps it. Takes ownership of fresh's buffers (moved into t). */
static void merge_into(rtable_t *t, const rtable_t *base, rtable_chunk_t *fresh, int nfresh) {
    t->chunks = xrealloc(NULL, (size_t)(base->nchunks + nfresh + 1) * sizeof *t->chunks);
    int j = 0;
    for (int i = 0; i < base->nchunks; i++) {
        const rtable_chunk_t *oc = &base->chunks[i];
        int lo = 0, hi = nfresh - 1, cand = -1;
        while (lo <= hi) {   /* the last fresh chunk with min < oc.max decides */
            int mid = lo + (hi - lo) / 2;
            if (buf_cmp(&fresh[mid].min, &oc->max) < 0) {
                cand = mid;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        if (cand >= 0 && buf_cmp(&fresh[cand].max, &oc->min) > 0) continue;   /* replaced */
        rtable_chunk_t *nc = &t->chunks[j++];
        memset(nc, 0, sizeof *nc);
        buf_put(&nc->min, oc->min.data, oc->min.len);
        buf_put(&nc->max, oc->max.data, oc->max.len);
        nc->shard = oc->shard;   /* t starts with base's shard numbering */
        nc->major = oc->major;
        nc->minor = oc->minor;
    }
    for (int i = 0; i < nfresh; i++) t->chunks[j++] = fresh[i];
    t->nchunks = j;
    if (t->nchunks > 1) qsort(t->chunks, (size_t)t->nchunks, sizeof *t->chunks, chunk_cmp_min);
}

int rtable_from_reply(const bson_t *reply, const rtable_t *base, rtable_t *out,
                      bool *need_full, ms_error_t *err) {
    bson_iter_t it, arr;
    rtable_t *t = out;
    rtable_chunk_t *fresh = NULL;
    rtable_version_t cv;
    int nfresh = 0, cap = 0, rc = 0;
    bool full = true, have_key = false, have_epoch = false, have_ts = false;
    bool have_chunks = false, have_cv = false;
    *need_full = false;

    /* Built in place: a keys_pattern_t holds a bson_t, which must never be moved. */
    memset(t, 0, sizeof *t);
    if (!bson_iter_init(&it, reply)) {
        rc = err_set(err, MS_ERR_INVALID_BSON, "getRoutingTable: bad reply");
        goto out;
    }
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (!strcmp(k, "key") && BSON_ITER_HOLDS_DOCUMENT(&it) && !have_key) {
            uint32_t len;
            const uint8_t *data;
            bson_t key;
            bson_iter_document(&it, &len, &data);
            if (!bson_init_static(&key, data, len)) continue;
            if ((rc = keys_pattern_parse(&key, &t->pattern, err)) != 0) goto out;
            have_key = true;
        } else if (!strcmp(k, "epoch") && BSON_ITER_HOLDS_OID(&it)) {
            bson_oid_copy(bson_iter_oid(&it), &t->epoch);
            have_epoch = true;
        } else if (!strcmp(k, "timestamp") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &t->ts_t, &t->ts_i);
            have_ts = true;
        } else if (!strcmp(k, "unique")) {
            t->unique = bsonx_truthy(&it);
        } else if (!strcmp(k, "full") && BSON_ITER_HOLDS_BOOL(&it)) {
            full = bson_iter_bool(&it);
        } else if (!strcmp(k, "chunks") && BSON_ITER_HOLDS_ARRAY(&it)) {
            have_chunks = bson_iter_recurse(&it, &arr);
        } else if (!strcmp(k, "collectionVersion")) {
            have_cv = rtable_version_parse(&it, &cv, NULL) == 0;
        }
    }
    if (!have_key || !have_epoch || !have_ts || !have_chunks) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE,
                     "getRoutingTable: reply lacks key, epoch, timestamp or chunks");
        goto out;
    }
    bool incremental = !full && base && base->nchunks > 0 &&
                       bson_oid_equal(&base->epoch, &t->epoch) && base->ts_t == t->ts_t &&
                       base->ts_i == t->ts_i;
    if (!full && !incremental) {
        *need_full = true;   /* an incremental answer we cannot apply */
        goto out;
    }
    if (incremental) {   /* keep base's shard numbering: old chunks copy over as they are */
        t->nshards = base->nshards;
        memcpy(t->shards, base->shards, sizeof t->shards);
    }
    while (bson_iter_next(&arr)) {
        if (nfresh >= MS_CHUNKS_PER_COLLECTION_MAX) {
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: more than %d chunks",
                         MS_CHUNKS_PER_COLLECTION_MAX);
            goto out;
        }
        if (nfresh == cap) {
            cap = cap ? 2 * cap : 16;
            fresh = xrealloc(fresh, (size_t)cap * sizeof *fresh);
        }
        rc = parse_chunk(&arr, t, &fresh[nfresh], err);
        nfresh++;   /* counted even on failure: its buffers are freed at out */
        if (rc) goto out;
    }
    if (nfresh > 1) qsort(fresh, (size_t)nfresh, sizeof *fresh, chunk_cmp_min);
    if (incremental) {
        merge_into(t, base, fresh, nfresh);   /* moves fresh's buffers */
        free(fresh);
    } else {
        t->chunks = fresh;
        t->nchunks = nfresh;
    }
    fresh = NULL;
    nfresh = 0;
    /* The reply's collection version is a floor (the maximum over all chunks, also those
     * an incremental reply leaves out). */
    if (have_cv && bson_oid_equal(&cv.epoch, &t->epoch) && cv.ts_t == t->ts_t &&
        cv.ts_i == t->ts_i) {
        t->coll_major = cv.major;
        t->coll_minor = cv.minor;
    }
    if (!table_finish(t)) {
        if (incremental) *need_full = true;
        else rc = err_set(err, MS_ERR_FAILED_TO_PARSE,
                          "getRoutingTable: chunks do not tile the key space");
        goto out;
    }
out:
    for (int i = 0; i < nfresh; i++) chunk_free(&fresh[i]);
    free(fresh);
    if (rc || *need_full) rtable_clear(t);
    return rc;
}

/* ---- database versions ------------------------------------------------------------------- */

int rtable_dbv_parse(const bson_iter_t *it, rtable_dbv_t *out, ms_error_t *err) {
    bson_iter_t c;
    int have = 0;
    memset(out, 0, sizeof *out);
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &c))
        return err_set(err, MS_ERR_TYPE_MISMATCH,
                       "databaseVersion must be a document {uuid, timestamp, lastMod}");
    while (bson_iter_next(&c)) {
        const char *k = bson_iter_key(&c);
        if (!strcmp(k, "uuid") && BSON_ITER_HOLDS_BINARY(&c)) {
            bson_subtype_t st;
            uint32_t len;
            const uint8_t *data;
            bson_iter_binary(&c, &st, &len, &data);
            if (len != 16) break;
            memcpy(out->uuid, data, 16);
            have |= 1;
        } else if (!strcmp(k, "timestamp") && BSON_ITER_HOLDS_TIMESTAMP(&c)) {
            bson_iter_timestamp(&c, &out->ts_t, &out->ts_i);
            have |= 2;
        } else if (!strcmp(k, "lastMod") && (BSON_ITER_HOLDS_INT32(&c) || BSON_ITER_HOLDS_INT64(&c))) {
            int64_t v = bson_iter_as_int64(&c);
            if (v < 0 || v > INT32_MAX) break;
            out->last_mod = (int32_t)v;
            have |= 4;
        }
    }
    if (have != 7)
        return err_set(err, MS_ERR_TYPE_MISMATCH,
                       "databaseVersion needs uuid (UUID), timestamp (Timestamp) and lastMod (int)");
    return 0;
}

void rtable_dbv_append(bson_t *dst, const char *key, const rtable_dbv_t *v) {
    bson_t d;
    bson_append_document_begin(dst, key, -1, &d);
    bson_append_binary(&d, "uuid", -1, BSON_SUBTYPE_UUID, v->uuid, 16);
    BSON_APPEND_TIMESTAMP(&d, "timestamp", v->ts_t, v->ts_i);
    BSON_APPEND_INT32(&d, "lastMod", v->last_mod);
    bson_append_document_end(dst, &d);
}

bool rtable_dbv_equal(const rtable_dbv_t *a, const rtable_dbv_t *b) {
    return memcmp(a->uuid, b->uuid, 16) == 0 && a->ts_t == b->ts_t && a->ts_i == b->ts_i &&
           a->last_mod == b->last_mod;
}

bool rtable_dbv_newer(const rtable_dbv_t *recv, const rtable_dbv_t *ours) {
    if (memcmp(recv->uuid, ours->uuid, 16) != 0 || recv->ts_t != ours->ts_t ||
        recv->ts_i != ours->ts_i)
        return vless(ours->ts_t, ours->ts_i, recv->ts_t, recv->ts_i);
    return recv->last_mod > ours->last_mod;
}

void rtable_db_find_cmd(bson_t *cmd, const char *db) {
    bson_t f;
    bson_init(cmd);
    BSON_APPEND_UTF8(cmd, "find", "databases");
    BSON_APPEND_UTF8(cmd, "$db", "config");
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "filter", &f);
    BSON_APPEND_UTF8(&f, "_id", db);
    bson_append_document_end(cmd, &f);
}

int rtable_db_entry_parse(const bson_t *doc, char *primary, size_t cap, rtable_dbv_t *v,
                          ms_error_t *err) {
    bson_iter_t it;
    bool have_primary = false;
    if (bson_iter_init_find(&it, doc, "primary") && BSON_ITER_HOLDS_UTF8(&it)) {
        snprintf(primary, cap, "%s", bson_iter_utf8(&it, NULL));
        have_primary = true;
    }
    if (!have_primary || !bson_iter_init_find(&it, doc, "version") ||
        rtable_dbv_parse(&it, v, NULL) != 0)
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "database entry lacks primary or version {uuid, timestamp, lastMod}");
    return 0;
}
