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

/* The shards owning at least one chunk: every shard a query can reach. */
static uint64_t owners_mask(const rtable_t *rt) {
    uint64_t m = 0;
    for (int s = 0; s < rt->nshards; s++)
        if (rt->shard_nchunks[s] > 0) m |= 1ull << s;
    return m;
}

/* What a walk over the chosen chunks collects: the owners' bits, and each chunk handed
 * to visit when one is given (then the walk cannot stop early). */
typedef struct walk {
    const rtable_t *rt;
    uint64_t mask, owners;
    int next;                      /* first chunk index not visited yet */
    rt_chunk_visit_fn visit;
    void *arg;
} walk_t;

static bool walk_done(const walk_t *w) {
    return !w->visit && w->mask == w->owners;
}

/* Chunks [from, to) of the table. */
static void walk_chunks(walk_t *w, int from, int to) {
    for (int i = from < w->next ? w->next : from; i < to && !walk_done(w); i++) {
        const rtable_chunk_t *c = rtable_chunk(w->rt, i);
        w->mask |= 1ull << c->shard;
        if (w->visit) w->visit(w->arg, i, c);
        w->next = i + 1;
    }
}

/* The chunks overlapping [lo, hi] (superset: inclusivity only narrows): from the first
 * ending past lo to the last starting at or before hi (before it when hi is exclusive).
 * Ranges come sorted and disjoint, so a chunk two of them share is walked once. */
static void walk_range(walk_t *w, const bounds_range_t *rg) {
    const rtable_t *rt = w->rt;
    int i = rtable_first_ending_after(rt, rg->lo.data, rg->lo.len);
    if (i < w->next) i = w->next;
    for (; i < rt->nchunks && !walk_done(w); i++) {
        const rtable_chunk_t *c = rtable_chunk(rt, i);
        int cmp = rtable_bytes_cmp(c->min.data, c->min.len, rg->hi.data, rg->hi.len);
        if (cmp > 0 || (cmp == 0 && !rg->hi_incl)) break;
        walk_chunks(w, i, i + 1);
    }
}

/* Targets filter over t: the owners' bits in *mask, each chosen chunk to visit (NULL:
 * only the mask, which then stops as soon as every owning shard is in it — a query
 * costs O(shards + chunks in its ranges), never a walk of the whole table). */
static int target_filter(const rt_table_t *t, const bson_t *filter, uint64_t *mask, bool *point,
                         rt_chunk_visit_fn visit, void *arg, ms_error_t *err) {
    bounds_t b;
    memset(&b, 0, sizeof b);
    *mask = 0;
    *point = false;
    int rc = bounds_from_filter(filter, &t->rt.pattern, RT_TARGET_RANGES_MAX, &b, err);
    if (rc) return rc;
    walk_t w = {.rt = &t->rt, .owners = owners_mask(&t->rt), .visit = visit, .arg = arg};
    if (b.all) {
        w.mask = w.owners;                 /* every owning shard, from the counts */
        if (visit) walk_chunks(&w, 0, t->rt.nchunks);
    } else {
        *point = bounds_is_point(&b);
        for (int i = 0; i < b.n && !walk_done(&w); i++) walk_range(&w, &b.r[i]);
        /* Nothing can match: one owning shard still answers (notes §8.1 step 4). */
        if (!w.mask && t->rt.nchunks) walk_chunks(&w, 0, 1);
    }
    *mask = w.mask;
    bounds_free(&b);
    return 0;
}

int rt_target_filter(const rt_table_t *t, const bson_t *filter, uint64_t *mask, bool *point,
                     ms_error_t *err) {
    return target_filter(t, filter, mask, point, NULL, NULL, err);
}

int rt_target_chunks(const rt_table_t *t, const bson_t *filter, rt_chunk_visit_fn visit,
                     void *arg, ms_error_t *err) {
    uint64_t mask;
    bool point;
    return target_filter(t, filter, &mask, &point, visit, arg, err);
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
