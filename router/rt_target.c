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

int rt_target_doc(const rt_table_t *t, const bson_t *doc, int *shard, ms_error_t *err) {
    buf_t k = {0};
    int rc = keys_extract(&t->rt.pattern, doc, NULL, &k, err);
    if (rc == 0) *shard = rtable_find_chunk(&t->rt, k.data, k.len)->shard;
    else if (rc == MS_ERR_BAD_VALUE && err && strstr(err->msg, "array"))
        /* an array on a key path: MongoDB's insert targeter code and wording */
        rc = err_set(err, MS_ERR_SHARD_KEY_NOT_FOUND,
                     "Shard key cannot contain array values or array descendants.");
    buf_free(&k);
    return rc;
}

/* Marks the shards of chunks overlapping [lo, hi] (superset: inclusivity only narrows),
 * and the chunks themselves in marks (indexes of t's chunks) when marks is not NULL. */
static void mark_range(const rt_table_t *t, const bounds_range_t *rg, uint64_t *mask,
                       bool *marks) {
    int first = rtable_first_ending_after(&t->rt, rg->lo.data, rg->lo.len);
    for (int i = first; i < t->rt.nchunks; i++) {
        const rtable_chunk_t *c = rtable_chunk(&t->rt, i);
        int cmp = rtable_bytes_cmp(c->min.data, c->min.len, rg->hi.data, rg->hi.len);
        if (cmp > 0 || (cmp == 0 && !rg->hi_incl)) break;
        *mask |= 1ull << c->shard;
        if (marks) marks[i] = true;
    }
}

/* rt_target_filter, and the chunks it chose in marks when not NULL. */
static int target_filter(const rt_table_t *t, const bson_t *filter, uint64_t *mask, bool *point,
                         bool *marks, ms_error_t *err) {
    bounds_t b;
    memset(&b, 0, sizeof b);
    *mask = 0;
    *point = false;
    int rc = bounds_from_filter(filter, &t->rt.pattern, RT_TARGET_RANGES_MAX, &b, err);
    if (rc) return rc;
    if (b.all) {
        for (int s = 0; s < t->rt.nshards; s++)
            if (t->rt.shard_nchunks[s] > 0) *mask |= 1ull << s;
        if (marks) memset(marks, true, (size_t)t->rt.nchunks * sizeof *marks);
    } else {
        *point = bounds_is_point(&b);
        for (int i = 0; i < b.n; i++) mark_range(t, &b.r[i], mask, marks);
        /* Nothing can match: one owning shard still answers (notes §8.1 step 4). */
        if (!*mask && t->rt.nchunks) {
            *mask = 1ull << rtable_chunk(&t->rt, 0)->shard;
            if (marks) marks[0] = true;
        }
    }
    bounds_free(&b);
    return 0;
}

int rt_target_filter(const rt_table_t *t, const bson_t *filter, uint64_t *mask, bool *point,
                     ms_error_t *err) {
    return target_filter(t, filter, mask, point, NULL, err);
}

int rt_target_chunks(const rt_table_t *t, const bson_t *filter, bool *marks, ms_error_t *err) {
    uint64_t mask;
    bool point;
    memset(marks, 0, (size_t)t->rt.nchunks * sizeof *marks);
    return target_filter(t, filter, &mask, &point, marks, err);
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
