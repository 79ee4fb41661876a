/*
 * rt_target.c — targeting in the router (MongoDB's ChunkManager::getShardIdsForQuery and
 * the write targeter, notes §8.1 and §8.3), run by bin/router: the owning chunk of an
 * encoded key by binary search; a document's shard from its shard key (keys_extract:
 * missing fields are null, arrays refused, hashed fields hashed); a filter's shards from
 * the ranges bounds_from_filter derives under the shard-key pattern (equality → one
 * chunk, $in and ranges → the overlapping chunks, unplannable → every owning shard).
 */
#include <string.h>

#include "common/bounds.h"
#include "common/log.h"
#include "router/router.h"

int rt_bytes_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

int rt_chunk_for_key(const rt_table_t *t, const uint8_t *key, size_t len) {
    int lo = 0, hi = t->nchunks - 1, found = 0;
    while (lo <= hi) {   /* last chunk with min <= key */
        int mid = lo + (hi - lo) / 2;
        if (rt_bytes_cmp(t->chunks[mid].min.data, t->chunks[mid].min.len, key, len) <= 0) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

int rt_target_doc(const rt_table_t *t, const bson_t *doc, int *shard, ms_error_t *err) {
    buf_t k = {0};
    int rc = keys_extract(&t->pattern, doc, NULL, &k, err);
    if (rc == 0) *shard = t->chunks[rt_chunk_for_key(t, k.data, k.len)].shard;
    else if (rc == MS_ERR_BAD_VALUE && err && strstr(err->msg, "array"))
        /* an array on a key path: MongoDB's insert targeter code and wording */
        rc = err_set(err, MS_ERR_SHARD_KEY_NOT_FOUND,
                     "Shard key cannot contain array values or array descendants.");
    buf_free(&k);
    return rc;
}

/* Marks the shards of chunks overlapping [lo, hi] (superset: inclusivity only narrows). */
static void mark_range(const rt_table_t *t, const bounds_range_t *rg, uint64_t *mask) {
    /* first chunk whose max > lo */
    int lo = 0, hi = t->nchunks - 1, first = t->nchunks;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (rt_bytes_cmp(t->chunks[mid].max.data, t->chunks[mid].max.len, rg->lo.data,
                         rg->lo.len) > 0) {
            first = mid;
            hi = mid - 1;
        } else {
            lo = mid + 1;
        }
    }
    for (int i = first; i < t->nchunks; i++) {
        const rt_chunk_t *c = &t->chunks[i];
        int cmp = rt_bytes_cmp(c->min.data, c->min.len, rg->hi.data, rg->hi.len);
        if (cmp > 0 || (cmp == 0 && !rg->hi_incl)) break;
        *mask |= 1ull << c->shard;
    }
}

int rt_target_filter(const rt_table_t *t, const bson_t *filter, uint64_t *mask, bool *point,
                     ms_error_t *err) {
    bounds_t b;
    memset(&b, 0, sizeof b);
    *mask = 0;
    *point = false;
    int rc = bounds_from_filter(filter, &t->pattern, RT_TARGET_RANGES_MAX, &b, err);
    if (rc) return rc;
    if (b.all) {
        for (int i = 0; i < t->nchunks; i++) *mask |= 1ull << t->chunks[i].shard;
    } else {
        *point = bounds_is_point(&b);
        for (int i = 0; i < b.n; i++) mark_range(t, &b.r[i], mask);
        /* Nothing can match: one owning shard still answers (notes §8.1 step 4). */
        if (!*mask && t->nchunks) *mask = 1ull << t->chunks[0].shard;
    }
    bounds_free(&b);
    return 0;
}

bool rt_filter_has_exact_id(const bson_t *filter) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, filter, "_id")) return false;
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_iter_t c;
        if (!bson_iter_recurse(&it, &c)) return false;
        if (!bson_iter_next(&c)) return true;   /* {_id: {}} is an exact value */
        const char *k = bson_iter_key(&c);
        if (k[0] != '$') return true;           /* an embedded document value */
        if (strcmp(k, "$eq") != 0) return false;
        bool regex_or_array = BSON_ITER_HOLDS_REGEX(&c) || BSON_ITER_HOLDS_ARRAY(&c);
        return !bson_iter_next(&c) && !regex_or_array;
    }
    return !BSON_ITER_HOLDS_REGEX(&it) && !BSON_ITER_HOLDS_ARRAY(&it);
}
