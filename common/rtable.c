/*
 * rtable.c — routing tables built from getRoutingTable replies (contract in rtable.h),
 * used by the router's cache (bin/router) and the shard's filtering metadata
 * (bin/shardd): parse, merge an incremental refresh, check the tiling, derive the
 * collection and per-shard versions, find a key's chunk, compare versions (notes §2.1).
 *
 * Storage: chunks in refcounted, immutable blocks, blocks in refcounted, immutable
 * pages (rtable.h). A full reply is packed into full blocks and pages in one pass. An
 * incremental reply is cut into runs of adjacent fresh chunks; each run replaces the
 * base chunks between two of base's boundaries; the blocks those runs touch are rebuilt
 * (with a neighbour when they would shrink below half a block), then the pages holding
 * them (likewise); every other page is shared with base. Derived versions are updated by
 * the chunks removed and added; a shard that loses every chunk at its version is
 * recomputed from the page and block summaries, the only step not local to the change.
 */
#include "common/rtable.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/mem.h"

int rtable_bytes_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
    size_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static int buf_cmp(const buf_t *a, const buf_t *b) {
    return rtable_bytes_cmp(a->data, a->len, b->data, b->len);
}

/* ---- blocks and pages -------------------------------------------------------------------- */

_Static_assert(MS_SHARDS_MAX <= 64, "a summary's owners mask has one bit per shard index");

/* What a block or page holds per shard index: which own chunks there, and the max
 * lastmod of each one's chunks there (recompute_shard reads these instead of chunks). */
typedef struct summary {
    uint64_t owners;
    uint64_t shard_max[MS_SHARDS_MAX];
} summary_t;

/* One allocation: the header, n chunks, then their bounds' bytes (the chunks' buffers
 * point there with cap 0). Written only before a table publishes it (or while it is the
 * only holder: rtable_rotate_shards); then read-only and shared by refcount. */
struct rtable_block {
    atomic_int refs;
    int n;
    summary_t sum;
    rtable_chunk_t c[];
};

/* Up to RTABLE_PAGE_BLOCKS blocks in key order, shared the same way. */
struct rtable_page {
    atomic_int refs;
    int nblocks;
    summary_t sum;
    int block_start[RTABLE_PAGE_BLOCKS + 1];   /* chunk offset of each block in the page */
    rtable_block_t *blocks[RTABLE_PAGE_BLOCKS];
};

/* The most chunks a new block holds and blocks a new page holds: the maxima, unless a
 * test asked for less (rtable_set_geometry). */
static int block_chunks = RTABLE_BLOCK_CHUNKS, page_blocks = RTABLE_PAGE_BLOCKS;

void rtable_set_geometry(int chunks_per_block, int blocks_per_page) {
    block_chunks = chunks_per_block >= 2 && chunks_per_block <= RTABLE_BLOCK_CHUNKS
                       ? chunks_per_block : RTABLE_BLOCK_CHUNKS;
    page_blocks = blocks_per_page >= 2 && blocks_per_page <= RTABLE_PAGE_BLOCKS
                      ? blocks_per_page : RTABLE_PAGE_BLOCKS;
}

static uint64_t lastmod(const rtable_chunk_t *c) {
    return (uint64_t)c->major << 32 | c->minor;
}

static void summary_add(summary_t *s, int shard, uint64_t v) {
    if (!(s->owners & (1ull << shard)) || v > s->shard_max[shard]) s->shard_max[shard] = v;
    s->owners |= 1ull << shard;
}

static void block_summarize(rtable_block_t *b) {
    memset(&b->sum, 0, sizeof b->sum);
    for (int i = 0; i < b->n; i++) summary_add(&b->sum, b->c[i].shard, lastmod(&b->c[i]));
}

static void page_summarize(rtable_page_t *p) {
    memset(&p->sum, 0, sizeof p->sum);
    for (int b = 0; b < p->nblocks; b++)
        for (uint64_t o = p->blocks[b]->sum.owners; o; o &= o - 1) {
            int s = __builtin_ctzll(o);
            summary_add(&p->sum, s, p->blocks[b]->sum.shard_max[s]);
        }
}

static void bound_into(buf_t *dst, const buf_t *src, uint8_t **arena) {
    memcpy(*arena, src->data, src->len);
    *dst = (buf_t){.data = *arena, .len = src->len, .cap = 0};
    *arena += src->len;
}

/* A new block holding copies of the n chunks src points to (in that order). */
static rtable_block_t *block_new(const rtable_chunk_t *const *src, int n) {
    size_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += src[i]->min.len + src[i]->max.len;
    rtable_block_t *b = xrealloc(NULL, sizeof *b + (size_t)n * sizeof b->c[0] + bytes);
    uint8_t *arena = (uint8_t *)&b->c[n];
    atomic_init(&b->refs, 1);
    b->n = n;
    for (int i = 0; i < n; i++) {
        b->c[i] = *src[i];
        bound_into(&b->c[i].min, &src[i]->min, &arena);
        bound_into(&b->c[i].max, &src[i]->max, &arena);
    }
    block_summarize(b);
    return b;
}

static rtable_block_t *block_share(rtable_block_t *b) {
    atomic_fetch_add(&b->refs, 1);
    return b;
}

static void block_release(rtable_block_t *b) {
    if (atomic_fetch_sub(&b->refs, 1) == 1) free(b);
}

/* A new page taking over one reference to each of the n blocks. */
static rtable_page_t *page_new(rtable_block_t *const *blocks, int n) {
    rtable_page_t *p = xrealloc(NULL, sizeof *p);
    atomic_init(&p->refs, 1);
    p->nblocks = n;
    p->block_start[0] = 0;
    for (int b = 0; b < n; b++) {
        p->blocks[b] = blocks[b];
        p->block_start[b + 1] = p->block_start[b] + blocks[b]->n;
    }
    page_summarize(p);
    return p;
}

static rtable_page_t *page_share(rtable_page_t *p) {
    atomic_fetch_add(&p->refs, 1);
    return p;
}

static void page_release(rtable_page_t *p) {
    if (atomic_fetch_sub(&p->refs, 1) != 1) return;
    for (int b = 0; b < p->nblocks; b++) block_release(p->blocks[b]);
    free(p);
}

/* A list of blocks or pages under construction, each entry holding one reference. */
typedef struct plist {
    void **v;
    int n, cap;
} plist_t;

static void plist_push(plist_t *l, void *p) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = p;
}

/* n items into ceil(n / max) groups of even size: group k's size. */
static int even_share(int n, int max, int k) {
    int groups = (n + max - 1) / max;
    return n / groups + (k < n % groups);
}

/* Packs n chunks into blocks of at most block_chunks, of even size, onto l. */
static void blocks_pack(plist_t *l, const rtable_chunk_t *const *src, int n) {
    for (int off = 0, k = 0; off < n; k++) {
        int size = even_share(n, block_chunks, k);
        plist_push(l, block_new(src + off, size));
        off += size;
    }
}

/* Packs n blocks (their references taken over) into pages the same way, onto l. */
static void pages_pack(plist_t *l, rtable_block_t *const *blocks, int n) {
    for (int off = 0, k = 0; off < n; k++) {
        int size = even_share(n, page_blocks, k);
        plist_push(l, page_new(blocks + off, size));
        off += size;
    }
}

/* Moves l's pages into t and indexes them. */
static void table_take_pages(rtable_t *t, plist_t *l) {
    t->pages = (rtable_page_t **)l->v;
    t->npages = l->n;
    t->page_start = xrealloc(NULL, (size_t)(l->n + 1) * sizeof *t->page_start);
    t->page_bstart = xrealloc(NULL, (size_t)(l->n + 1) * sizeof *t->page_bstart);
    t->page_start[0] = t->page_bstart[0] = 0;
    for (int p = 0; p < l->n; p++) {
        t->page_start[p + 1] = t->page_start[p] + t->pages[p]->block_start[t->pages[p]->nblocks];
        t->page_bstart[p + 1] = t->page_bstart[p] + t->pages[p]->nblocks;
    }
    t->nchunks = t->page_start[l->n];
    t->nblocks = t->page_bstart[l->n];
    memset(l, 0, sizeof *l);
}

void rtable_clear(rtable_t *t) {
    if (!t) return;
    for (int p = 0; p < t->npages; p++) page_release(t->pages[p]);
    free(t->pages);
    free(t->page_start);
    free(t->page_bstart);
    keys_pattern_free(&t->pattern);
    memset(t, 0, sizeof *t);
}

/* ---- positions --------------------------------------------------------------------------- */

/* In ascending a[0, n): the last index whose value <= x (0 when none is). */
static int last_le(const int *a, int n, int x) {
    int lo = 0, hi = n - 1, found = 0;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (a[mid] <= x) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

/* Global block g (0 <= g < nblocks): its page and its index there. */
static rtable_block_t *block_at(const rtable_t *t, int g) {
    int p = last_le(t->page_bstart, t->npages, g);
    return t->pages[p]->blocks[g - t->page_bstart[p]];
}

/* Index of the first chunk of global block g (g == nblocks: nchunks). */
static int block_first(const rtable_t *t, int g) {
    if (g >= t->nblocks) return t->nchunks;
    int p = last_le(t->page_bstart, t->npages, g);
    return t->page_start[p] + t->pages[p]->block_start[g - t->page_bstart[p]];
}

/* The global block holding chunk i. */
static int block_of(const rtable_t *t, int i) {
    int p = last_le(t->page_start, t->npages, i);
    const rtable_page_t *pg = t->pages[p];
    return t->page_bstart[p] + last_le(pg->block_start, pg->nblocks, i - t->page_start[p]);
}

const rtable_chunk_t *rtable_chunk(const rtable_t *t, int i) {
    int p = last_le(t->page_start, t->npages, i);
    const rtable_page_t *pg = t->pages[p];
    int off = i - t->page_start[p], b = last_le(pg->block_start, pg->nblocks, off);
    return &pg->blocks[b]->c[off - pg->block_start[b]];
}

/* The first key of item k of an array of pages, blocks or chunks. */
typedef const buf_t *(*min_of_fn)(const void *items, int k);

static const buf_t *page_min(const void *items, int k) {
    return &((rtable_page_t *const *)items)[k]->blocks[0]->c[0].min;
}

static const buf_t *block_min(const void *items, int k) {
    return &((rtable_block_t *const *)items)[k]->c[0].min;
}

static const buf_t *chunk_min(const void *items, int k) {
    return &((const rtable_chunk_t *)items)[k].min;
}

/* Of n items in key order: the last whose first key <= key (0 when none is). */
static int last_min_le(const void *items, int n, min_of_fn min_of, const uint8_t *key,
                       size_t len) {
    int lo = 0, hi = n - 1, found = 0;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const buf_t *m = min_of(items, mid);
        if (rtable_bytes_cmp(m->data, m->len, key, len) <= 0) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found;
}

/* Page, then block, then chunk: three binary searches. */
int rtable_find(const rtable_t *t, const uint8_t *key, size_t len) {
    if (t->npages == 0) return 0;
    int p = last_min_le(t->pages, t->npages, page_min, key, len);
    const rtable_page_t *pg = t->pages[p];
    int b = last_min_le(pg->blocks, pg->nblocks, block_min, key, len);
    int c = last_min_le(pg->blocks[b]->c, pg->blocks[b]->n, chunk_min, key, len);
    return t->page_start[p] + pg->block_start[b] + c;
}

const rtable_chunk_t *rtable_find_chunk(const rtable_t *t, const uint8_t *key, size_t len) {
    return t->nchunks ? rtable_chunk(t, rtable_find(t, key, len)) : NULL;
}

int rtable_first_ending_after(const rtable_t *t, const uint8_t *key, size_t len) {
    if (t->nchunks == 0) return 0;
    int i = rtable_find(t, key, len);
    const buf_t *max = &rtable_chunk(t, i)->max;
    return rtable_bytes_cmp(max->data, max->len, key, len) > 0 ? i : i + 1;
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

/* Bytes for the loader's bounds: slabs of SLAB_BYTES (a bound larger than that gets its
 * own), so a million chunks cost a few hundred allocations, not two million. */
#define SLAB_BYTES (1u << 20)
struct rtable_slab {
    rtable_slab_t *next;
    size_t used, cap;
    uint8_t data[];
};

static uint8_t *slab_take(rtable_load_t *l, size_t n) {
    rtable_slab_t *s = l->slabs;
    if (!s || s->cap - s->used < n) {
        size_t cap = n > SLAB_BYTES ? n : SLAB_BYTES;
        s = xrealloc(NULL, sizeof *s + cap);
        *s = (rtable_slab_t){.next = l->slabs, .used = 0, .cap = cap};
        l->slabs = s;
    }
    s->used += n;
    return s->data + s->used - n;
}

static void slabs_free(rtable_load_t *l) {
    while (l->slabs) {
        rtable_slab_t *next = l->slabs->next;
        free(l->slabs);
        l->slabs = next;
    }
    buf_free(&l->scratch);
}

/* The bound doc b encoded into the loader's slabs: *dst points there (cap 0: not owned). */
static int encode_bound(rtable_load_t *l, const bson_t *b, buf_t *dst, ms_error_t *err) {
    buf_reset(&l->scratch);
    int rc = keys_encode_bound(&l->out->pattern, b, &l->scratch, err);
    if (rc) return rc;
    uint8_t *p = slab_take(l, l->scratch.len);
    memcpy(p, l->scratch.data, l->scratch.len);
    *dst = (buf_t){.data = p, .len = l->scratch.len, .cap = 0};
    return 0;
}

static int parse_chunk(const bson_iter_t *it, rtable_load_t *l, rtable_chunk_t *c, ms_error_t *err) {
    rtable_t *t = l->out;
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
            int rc = encode_bound(l, &b, is_min ? &c->min : &c->max, err);
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

/* ---- derived versions -------------------------------------------------------------------- */

static uint64_t shard_max(const rtable_t *t, int s) {
    return (uint64_t)t->shard_major[s] << 32 | t->shard_minor[s];
}

static void set_shard_max(rtable_t *t, int s, uint64_t v, int at_max) {
    t->shard_major[s] = (uint32_t)(v >> 32);
    t->shard_minor[s] = (uint32_t)v;
    t->shard_at_max[s] = at_max;
}

static void derive_add(rtable_t *t, const rtable_chunk_t *c) {
    int s = c->shard;
    t->shard_nchunks[s]++;
    if (lastmod(c) > shard_max(t, s) || t->shard_nchunks[s] == 1) set_shard_max(t, s, lastmod(c), 1);
    else if (lastmod(c) == shard_max(t, s)) t->shard_at_max[s]++;
}

/* A chunk leaves: its shard's version stands while another chunk has it (shard_at_max). */
static void derive_remove(rtable_t *t, const rtable_chunk_t *c) {
    int s = c->shard;
    t->shard_nchunks[s]--;
    if (lastmod(c) == shard_max(t, s)) t->shard_at_max[s]--;
}

static bool reaches(const summary_t *sum, int s, uint64_t v) {
    return (sum->owners & (1ull << s)) && sum->shard_max[s] == v;
}

/* Shard s's version from the summaries: the max over the pages it owns chunks in, then
 * how many chunks have it (only in the pages and blocks whose summary reaches it). */
static void recompute_shard(rtable_t *t, int s) {
    uint64_t best = 0;
    int at = 0;
    for (int p = 0; p < t->npages; p++)
        if ((t->pages[p]->sum.owners & (1ull << s)) && t->pages[p]->sum.shard_max[s] > best)
            best = t->pages[p]->sum.shard_max[s];
    for (int p = 0; p < t->npages; p++) {
        const rtable_page_t *pg = t->pages[p];
        for (int b = 0; reaches(&pg->sum, s, best) && b < pg->nblocks; b++) {
            const rtable_block_t *k = pg->blocks[b];
            for (int i = 0; reaches(&k->sum, s, best) && i < k->n; i++)
                at += k->c[i].shard == s && lastmod(&k->c[i]) == best;
        }
    }
    set_shard_max(t, s, best, at);
}

/* Completes the shard versions (after derive_add/derive_remove) and the collection
 * version, which the reply's collectionVersion floors (coll_* hold that floor). */
static void derive_finish(rtable_t *t) {
    uint64_t coll = (uint64_t)t->coll_major << 32 | t->coll_minor;
    for (int s = 0; s < t->nshards; s++) {
        if (t->shard_nchunks[s] == 0) set_shard_max(t, s, 0, 0);
        else if (t->shard_at_max[s] == 0) recompute_shard(t, s);
        if (shard_max(t, s) > coll) coll = shard_max(t, s);
    }
    t->coll_major = (uint32_t)(coll >> 32);
    t->coll_minor = (uint32_t)coll;
}

/* ---- full load --------------------------------------------------------------------------- */

/* Whether the sorted chunks tile [MinKey, MaxKey) of t's pattern. */
static bool chunks_tile(const rtable_t *t, const rtable_chunk_t *c, int n) {
    bson_t bmin, bmax;
    buf_t gmin = {0}, gmax = {0};
    bool ok = n > 0;
    bson_init(&bmin);
    bson_init(&bmax);
    keys_global_min(&t->pattern, &bmin);
    keys_global_max(&t->pattern, &bmax);
    if (keys_encode_bound(&t->pattern, &bmin, &gmin, NULL) ||
        keys_encode_bound(&t->pattern, &bmax, &gmax, NULL))
        ok = false;
    if (ok) ok = buf_cmp(&c[0].min, &gmin) == 0 && buf_cmp(&c[n - 1].max, &gmax) == 0;
    for (int i = 0; ok && i + 1 < n; i++) ok = buf_cmp(&c[i].max, &c[i + 1].min) == 0;
    bson_destroy(&bmin);
    bson_destroy(&bmax);
    buf_free(&gmin);
    buf_free(&gmax);
    return ok;
}

/* Packs the sorted, tiling chunks into full blocks and pages in one pass. */
static void build_full(rtable_t *t, const rtable_chunk_t *c, int n) {
    const rtable_chunk_t **src = xrealloc(NULL, (size_t)n * sizeof *src);
    plist_t blocks = {0}, pages = {0};
    for (int i = 0; i < n; i++) {
        src[i] = &c[i];
        derive_add(t, &c[i]);
    }
    blocks_pack(&blocks, src, n);
    free(src);
    pages_pack(&pages, (rtable_block_t *const *)blocks.v, blocks.n);
    free(blocks.v);
    table_take_pages(t, &pages);
    derive_finish(t);
}

/* ---- incremental merge ------------------------------------------------------------------- */

/* A run of adjacent fresh chunks fresh[f0, f0 + nf) replacing base's chunks [i0, i1). */
typedef struct edit {
    int f0, nf;
    int i0, i1;
} edit_t;

/* Base's global blocks [b0, b1] rebuilt as the blocks in nb (which hold one reference
 * each): the block-level result of the edits that touch them. */
typedef struct regroup {
    int b0, b1;
    plist_t nb;
} regroup_t;

/* Where the run [min, max) sits in base: [*i0, *i1) when min is the start of base's chunk
 * *i0 and max the end of chunk *i1 - 1. False when either is inside a chunk or outside
 * the key space: the merged table would have a gap or an overlap there. */
static bool run_in_base(const rtable_t *base, const buf_t *min, const buf_t *max, int *i0,
                        int *i1) {
    *i0 = rtable_find(base, min->data, min->len);
    if (buf_cmp(&rtable_chunk(base, *i0)->min, min) != 0) return false;
    int k = rtable_find(base, max->data, max->len);
    const rtable_chunk_t *c = rtable_chunk(base, k);
    if (buf_cmp(&c->min, max) == 0) *i1 = k;   /* the next base chunk starts there */
    else if (k == base->nchunks - 1 && buf_cmp(&c->max, max) == 0) *i1 = k + 1;   /* MaxKey */
    else return false;
    return *i1 > *i0;
}

/* Cuts the sorted fresh chunks into runs and places each in base (*edits, caller frees).
 * False when the fresh chunks overlap each other or a run does not fit base. */
static bool plan_edits(const rtable_t *base, const rtable_chunk_t *fresh, int nfresh,
                       edit_t **edits, int *nedits) {
    *edits = xrealloc(NULL, (size_t)(nfresh > 0 ? nfresh : 1) * sizeof **edits);
    *nedits = 0;
    for (int f = 0; f < nfresh;) {
        edit_t *e = &(*edits)[(*nedits)++];
        int last = f;
        while (last + 1 < nfresh && buf_cmp(&fresh[last].max, &fresh[last + 1].min) == 0) last++;
        if (last + 1 < nfresh && buf_cmp(&fresh[last].max, &fresh[last + 1].min) > 0)
            return false;   /* two fresh chunks overlap */
        e->f0 = f;
        e->nf = last + 1 - f;
        if (!run_in_base(base, &fresh[f].min, &fresh[last].max, &e->i0, &e->i1)) return false;
        f = last + 1;
    }
    return true;
}

/* Appends pointers to base's chunks [from, to) to dst. */
static int push_base(const rtable_chunk_t **dst, const rtable_t *base, int from, int to) {
    for (int i = from; i < to; i++) dst[i - from] = rtable_chunk(base, i);
    return to > from ? to - from : 0;
}

/* The chunks blocks [b0, b1] of base hold once edits e[0, ne) are applied. */
static int chunks_after(const rtable_t *base, int b0, int b1, const edit_t *e, int ne) {
    int n = block_first(base, b1 + 1) - block_first(base, b0);
    for (int k = 0; k < ne; k++) n += e[k].nf - (e[k].i1 - e[k].i0);
    return n;
}

/* The new blocks for base's blocks [g->b0, g->b1] with edits e[0, ne) applied. */
static void rebuild_blocks(regroup_t *g, const rtable_t *base, const rtable_chunk_t *fresh,
                           const edit_t *e, int ne) {
    int n = chunks_after(base, g->b0, g->b1, e, ne), j = 0, pos = block_first(base, g->b0);
    const rtable_chunk_t **src = xrealloc(NULL, (size_t)n * sizeof *src);
    for (int k = 0; k < ne; k++) {
        j += push_base(src + j, base, pos, e[k].i0);
        for (int f = 0; f < e[k].nf; f++) src[j++] = &fresh[e[k].f0 + f];
        pos = e[k].i1;
    }
    j += push_base(src + j, base, pos, block_first(base, g->b1 + 1));
    blocks_pack(&g->nb, src, j);
    free(src);
}

/* The edits that touch the same blocks are applied together, taking in a neighbour
 * block when the result would hold fewer than half a block of chunks (so blocks stay at
 * least half full). One regroup per such set into *out (caller frees); their count. */
static int regroup_blocks(const rtable_t *base, const rtable_chunk_t *fresh, const edit_t *ed,
                          int ned, regroup_t **out) {
    int n = 0, next = 0;   /* base's first block no regroup took yet */
    *out = xrealloc(NULL, (size_t)(ned > 0 ? ned : 1) * sizeof **out);
    for (int e = 0; e < ned;) {
        int b0 = block_of(base, ed[e].i0), b1 = block_of(base, ed[e].i1 - 1), e1 = e + 1;
        for (;;) {
            for (; e1 < ned && block_of(base, ed[e1].i0) <= b1; e1++)
                if (block_of(base, ed[e1].i1 - 1) > b1) b1 = block_of(base, ed[e1].i1 - 1);
            if (chunks_after(base, b0, b1, ed + e, e1 - e) >= block_chunks / 2) break;
            if (b1 + 1 < base->nblocks) b1++;
            else if (b0 > next) b0--;
            else break;
        }
        regroup_t *g = &(*out)[n++];
        *g = (regroup_t){.b0 = b0, .b1 = b1};
        rebuild_blocks(g, base, fresh, ed + e, e1 - e);
        next = b1 + 1;
        e = e1;
    }
    return n;
}

/* The blocks pages [p0, p1] of base hold once regroups g[0, ng) are applied. */
static int blocks_after(const rtable_t *base, int p0, int p1, const regroup_t *g, int ng) {
    int n = base->page_bstart[p1 + 1] - base->page_bstart[p0];
    for (int k = 0; k < ng; k++) n += g[k].nb.n - (g[k].b1 + 1 - g[k].b0);
    return n;
}

/* New pages for base's pages [p0, p1] with regroups g[0, ng) applied, onto pages: base's
 * blocks there are shared, the regroups' new blocks moved in. */
static void rebuild_pages(plist_t *pages, const rtable_t *base, int p0, int p1, regroup_t *g,
                          int ng) {
    plist_t blocks = {0};
    int pos = base->page_bstart[p0];
    for (int k = 0; k < ng; k++) {
        for (; pos < g[k].b0; pos++) plist_push(&blocks, block_share(block_at(base, pos)));
        for (int b = 0; b < g[k].nb.n; b++) plist_push(&blocks, g[k].nb.v[b]);
        pos = g[k].b1 + 1;
    }
    for (; pos < base->page_bstart[p1 + 1]; pos++)
        plist_push(&blocks, block_share(block_at(base, pos)));
    pages_pack(pages, (rtable_block_t *const *)blocks.v, blocks.n);
    free(blocks.v);
}

/* t = base with the regroups applied, one level up: the regroups in the same pages are
 * applied together (taking in a neighbour page below half a page of blocks), every
 * other page is shared with base. */
static void apply_regroups(rtable_t *t, const rtable_t *base, regroup_t *g, int ng) {
    plist_t pages = {0};
    int next = 0;   /* base's first page not yet in pages */
    for (int k = 0; k < ng;) {
        int p0 = last_le(base->page_bstart, base->npages, g[k].b0);
        int p1 = last_le(base->page_bstart, base->npages, g[k].b1), k1 = k + 1;
        for (;;) {
            for (; k1 < ng && last_le(base->page_bstart, base->npages, g[k1].b0) <= p1; k1++)
                p1 = last_le(base->page_bstart, base->npages, g[k1].b1);
            if (blocks_after(base, p0, p1, g + k, k1 - k) >= page_blocks / 2) break;
            if (p1 + 1 < base->npages) p1++;
            else if (p0 > next) p0--;
            else break;
        }
        for (; next < p0; next++) plist_push(&pages, page_share(base->pages[next]));
        rebuild_pages(&pages, base, p0, p1, g + k, k1 - k);
        next = p1 + 1;
        k = k1;
    }
    for (; next < base->npages; next++) plist_push(&pages, page_share(base->pages[next]));
    table_take_pages(t, &pages);
}

/* Merges the sorted fresh chunks into base (t starts with base's shard numbering).
 * False when they do not fit base's boundaries. */
static bool merge_into(rtable_t *t, const rtable_t *base, const rtable_chunk_t *fresh,
                       int nfresh) {
    edit_t *ed;
    regroup_t *g;
    int ned;
    if (!plan_edits(base, fresh, nfresh, &ed, &ned)) {
        free(ed);
        return false;
    }
    memcpy(t->shard_nchunks, base->shard_nchunks, sizeof t->shard_nchunks);
    memcpy(t->shard_at_max, base->shard_at_max, sizeof t->shard_at_max);
    memcpy(t->shard_major, base->shard_major, sizeof t->shard_major);
    memcpy(t->shard_minor, base->shard_minor, sizeof t->shard_minor);
    for (int e = 0; e < ned; e++)
        for (int i = ed[e].i0; i < ed[e].i1; i++) derive_remove(t, rtable_chunk(base, i));
    for (int f = 0; f < nfresh; f++) derive_add(t, &fresh[f]);
    int ng = regroup_blocks(base, fresh, ed, ned, &g);
    apply_regroups(t, base, g, ng);
    for (int k = 0; k < ng; k++) free(g[k].nb.v);   /* their references went to pages */
    free(g);
    free(ed);
    derive_finish(t);
    return true;
}

/* ---- renumbering (a test hook) ------------------------------------------------------------ */

/* A private copy of page *pp (sharing its blocks) or block *bp, replacing the shared one. */
static void page_unshare(rtable_page_t **pp) {
    rtable_page_t *old = *pp;
    for (int b = 0; b < old->nblocks; b++) block_share(old->blocks[b]);
    *pp = page_new(old->blocks, old->nblocks);
    page_release(old);
}

static void block_unshare(rtable_block_t **bp) {
    rtable_block_t *old = *bp;
    const rtable_chunk_t **src = xrealloc(NULL, (size_t)old->n * sizeof *src);
    for (int i = 0; i < old->n; i++) src[i] = &old->c[i];
    *bp = block_new(src, old->n);
    free(src);
    block_release(old);
}

/* Moves element 0 of an array of n to the end. */
static void rotate_left(void *arr, size_t size, int n) {
    uint8_t first[RTABLE_NAME_BYTES_MAX];
    memcpy(first, arr, size);
    memmove(arr, (uint8_t *)arr + size, (size_t)(n - 1) * size);
    memcpy((uint8_t *)arr + (size_t)(n - 1) * size, first, size);
}

void rtable_rotate_shards(rtable_t *t) {
    int n = t->nshards;
    if (n < 2) return;
    for (int p = 0; p < t->npages; p++) {
        if (atomic_load(&t->pages[p]->refs) > 1) page_unshare(&t->pages[p]);
        rtable_page_t *pg = t->pages[p];
        for (int b = 0; b < pg->nblocks; b++) {
            if (atomic_load(&pg->blocks[b]->refs) > 1) block_unshare(&pg->blocks[b]);
            rtable_block_t *k = pg->blocks[b];
            for (int i = 0; i < k->n; i++) k->c[i].shard = (k->c[i].shard + n - 1) % n;
            block_summarize(k);
        }
        page_summarize(pg);
    }
    rotate_left(t->shards, sizeof t->shards[0], n);
    rotate_left(t->shard_major, sizeof t->shard_major[0], n);
    rotate_left(t->shard_minor, sizeof t->shard_minor[0], n);
    rotate_left(t->shard_nchunks, sizeof t->shard_nchunks[0], n);
    rotate_left(t->shard_at_max, sizeof t->shard_at_max[0], n);
}

/* ---- loading from pages ------------------------------------------------------------------- */

static int lastmod_cmp_desc(const rtable_chunk_t *a, const rtable_chunk_t *b) {
    return lastmod(a) < lastmod(b) ? 1 : lastmod(a) > lastmod(b) ? -1 : 0;
}

/* By min, then newest first. */
static int chunk_cmp_min_newest(const void *a, const void *b) {
    int c = chunk_cmp_min(a, b);
    return c ? c : lastmod_cmp_desc(a, b);
}

static int chunk_ptr_cmp_newest(const void *a, const void *b) {
    return lastmod_cmp_desc(*(const rtable_chunk_t *const *)a, *(const rtable_chunk_t *const *)b);
}

/* In the cluster c[0, n) (sorted by min, each overlapping what came before it), marks
 * dead every chunk that a newer one overlaps. Newest first, each chunk joins the kept
 * ones (disjoint, sorted by min in acc) unless it overlaps one: among the kept whose min
 * is below its max, the last has the largest max, so it is the only one to test. */
static void resolve_cluster(rtable_chunk_t *c, int n, bool *dead) {
    const rtable_chunk_t **by_age = xrealloc(NULL, (size_t)n * sizeof *by_age);
    const rtable_chunk_t **acc = xrealloc(NULL, (size_t)n * sizeof *acc);
    int nacc = 0;
    for (int i = 0; i < n; i++) by_age[i] = &c[i];
    qsort(by_age, (size_t)n, sizeof *by_age, chunk_ptr_cmp_newest);
    for (int k = 0; k < n; k++) {
        const rtable_chunk_t *x = by_age[k];
        int lo = 0, hi = nacc;   /* first kept with min >= x->max */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (buf_cmp(&acc[mid]->min, &x->max) < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo > 0 && buf_cmp(&acc[lo - 1]->max, &x->min) > 0) {
            dead[x - c] = true;
            continue;
        }
        memmove(acc + lo + 1, acc + lo, (size_t)(nacc - lo) * sizeof *acc);
        acc[lo] = x;
        nacc++;
    }
    free(by_age);
    free(acc);
}

/* Sorts the chunks of all pages by min and drops each one a newer chunk overlaps: it was
 * split, merged or moved between two pages, and what replaced it is newer. Chunks that
 * overlap nothing (all of them when nothing changed while paging) cost one comparison;
 * only clusters of overlapping chunks are resolved. */
static void drop_superseded(rtable_chunk_t *c, int *n) {
    int total = *n, kept = 0, sorted = 1;
    if (total < 2) return;
    /* Often sorted already: a table of one page, or a pre-split one (lastmods in key
     * order, so the pages come in key order too). */
    for (int i = 1; i < total && sorted; i++) sorted = chunk_cmp_min_newest(&c[i - 1], &c[i]) <= 0;
    if (!sorted) qsort(c, (size_t)total, sizeof *c, chunk_cmp_min_newest);
    bool *dead = calloc((size_t)total, sizeof *dead);
    ASSERT(dead);
    for (int i = 0; i < total;) {
        const buf_t *reach = &c[i].max;
        int j = i + 1;
        for (; j < total && buf_cmp(&c[j].min, reach) < 0; j++)
            if (buf_cmp(&c[j].max, reach) > 0) reach = &c[j].max;
        if (j - i > 1) resolve_cluster(c + i, j - i, dead + i);
        i = j;
    }
    for (int i = 0; i < total; i++)
        if (!dead[i]) c[kept++] = c[i];   /* (their bounds stay in the loader's slabs) */
    free(dead);
    *n = kept;
}

/* The fields of one page; the chunks array's iterator in *arr. */
typedef struct page_head {
    bool have_key, have_epoch, have_ts, have_chunks, have_cv, full, more, unique;
    bson_oid_t epoch;
    uint32_t ts_t, ts_i;
    bson_t key;
    rtable_version_t cv;
} page_head_t;

static void page_head_parse(const bson_t *reply, page_head_t *h, bson_iter_t *arr) {
    bson_iter_t it;
    memset(h, 0, sizeof *h);
    h->full = true;   /* a reply without `full` is a whole table */
    if (!bson_iter_init(&it, reply)) return;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (!strcmp(k, "key") && BSON_ITER_HOLDS_DOCUMENT(&it) && !h->have_key) {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&it, &len, &data);
            h->have_key = bson_init_static(&h->key, data, len);
        } else if (!strcmp(k, "epoch") && BSON_ITER_HOLDS_OID(&it)) {
            bson_oid_copy(bson_iter_oid(&it), &h->epoch);
            h->have_epoch = true;
        } else if (!strcmp(k, "timestamp") && BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            bson_iter_timestamp(&it, &h->ts_t, &h->ts_i);
            h->have_ts = true;
        } else if (!strcmp(k, "unique")) {
            h->unique = bsonx_truthy(&it);
        } else if (!strcmp(k, "full") && BSON_ITER_HOLDS_BOOL(&it)) {
            h->full = bson_iter_bool(&it);
        } else if (!strcmp(k, "more")) {
            h->more = bsonx_truthy(&it);
        } else if (!strcmp(k, "chunks") && BSON_ITER_HOLDS_ARRAY(&it)) {
            h->have_chunks = bson_iter_recurse(&it, arr);
        } else if (!strcmp(k, "collectionVersion")) {
            h->have_cv = rtable_version_parse(&it, &h->cv, NULL) == 0;
        }
    }
}

void rtable_load_begin(rtable_load_t *l, const rtable_t *base, rtable_t *out) {
    memset(l, 0, sizeof *l);
    memset(out, 0, sizeof *out);   /* built in place: a keys_pattern_t must never move */
    l->base = base;
    l->out = out;
}

void rtable_load_abort(rtable_load_t *l) {
    free(l->fresh);
    slabs_free(l);
    rtable_clear(l->out);
    memset(l->out, 0, sizeof *l->out);
    l->fresh = NULL;
    l->nfresh = l->cap = 0;
}

/* The first page fixes the table's generation, key and kind (full or incremental). */
static int load_first_page(rtable_load_t *l, const page_head_t *h, bool *restart,
                           ms_error_t *err) {
    rtable_t *t = l->out, *base = (rtable_t *)l->base;
    int rc = keys_pattern_parse(&h->key, &t->pattern, err);
    if (rc) return rc;
    bson_oid_copy(&h->epoch, &t->epoch);
    t->ts_t = h->ts_t;
    t->ts_i = h->ts_i;
    t->unique = h->unique;
    l->full = h->full;
    if (h->full || l->partial) return 0;
    if (!base || base->nchunks == 0 || !bson_oid_equal(&base->epoch, &t->epoch) ||
        base->ts_t != t->ts_t || base->ts_i != t->ts_i) {
        *restart = true;   /* an incremental answer we cannot apply */
        return 0;
    }
    t->nshards = base->nshards;   /* keep base's numbering: old chunks copy over as they are */
    memcpy(t->shards, base->shards, sizeof t->shards);
    return 0;
}

/* Appends the page's chunks; lastmods must all follow the last page's. */
static int load_chunks(rtable_load_t *l, bson_iter_t *arr, ms_error_t *err) {
    uint64_t floor = (uint64_t)l->last_major << 32 | l->last_minor, top = floor;
    while (bson_iter_next(arr)) {
        if (l->nfresh >= 2 * MS_CHUNKS_PER_COLLECTION_MAX)
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: more than %d chunks",
                           MS_CHUNKS_PER_COLLECTION_MAX);
        if (l->nfresh == l->cap) {
            l->cap = l->cap ? 2 * l->cap : 16;
            l->fresh = xrealloc(l->fresh, (size_t)l->cap * sizeof *l->fresh);
        }
        rtable_chunk_t *c = &l->fresh[l->nfresh++];
        int rc = parse_chunk(arr, l, c, err);
        if (rc) return rc;
        if (l->npages > 0 && lastmod(c) <= floor)
            return err_set(err, MS_ERR_FAILED_TO_PARSE,
                           "getRoutingTable: a page repeats lastmods of the page before");
        if (lastmod(c) > top) top = lastmod(c);
    }
    l->last_major = (uint32_t)(top >> 32);
    l->last_minor = (uint32_t)top;
    return 0;
}

int rtable_load_page(rtable_load_t *l, const bson_t *reply, bool *restart, ms_error_t *err) {
    page_head_t h;
    bson_iter_t arr;
    rtable_t *t = l->out;
    int rc = 0;
    *restart = false;
    page_head_parse(reply, &h, &arr);
    if (!h.have_key || !h.have_epoch || !h.have_ts || !h.have_chunks)
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "getRoutingTable: reply lacks key, epoch, timestamp or chunks");
    if (l->npages == 0) {
        if ((rc = load_first_page(l, &h, restart, err)) != 0 || *restart) return rc;
    } else if (!bson_oid_equal(&h.epoch, &t->epoch) || h.ts_t != t->ts_t || h.ts_i != t->ts_i ||
               h.full != l->full) {
        *restart = true;   /* dropped, resharded or recreated between two pages */
        return 0;
    }
    if ((rc = load_chunks(l, &arr, err)) != 0) return rc;
    l->npages++;
    l->more = h.more;
    l->have_cv = h.have_cv;
    l->cv = h.cv;
    return 0;
}

int rtable_load_end(rtable_load_t *l, bool *need_full, ms_error_t *err) {
    rtable_t *t = l->out;
    int rc = 0;
    *need_full = false;
    drop_superseded(l->fresh, &l->nfresh);
    if (l->nfresh > MS_CHUNKS_PER_COLLECTION_MAX) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: more than %d chunks",
                     MS_CHUNKS_PER_COLLECTION_MAX);
        goto out;
    }
    /* The reply's collection version is a floor (the maximum over all chunks, also those
     * an incremental reply leaves out); derive_finish raises it to the chunks' max. */
    if (l->have_cv && bson_oid_equal(&l->cv.epoch, &t->epoch) && l->cv.ts_t == t->ts_t &&
        l->cv.ts_i == t->ts_i) {
        t->coll_major = l->cv.major;
        t->coll_minor = l->cv.minor;
    }
    if (!l->full) {
        if (!merge_into(t, l->base, l->fresh, l->nfresh)) *need_full = true;   /* a gap or overlap */
    } else if (chunks_tile(t, l->fresh, l->nfresh)) {
        build_full(t, l->fresh, l->nfresh);
    } else {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: chunks do not tile the key space");
    }
out:
    size_t nloaded = (size_t)l->nfresh;
    free(l->fresh);
    slabs_free(l);
    l->fresh = NULL;
    l->nfresh = l->cap = 0;
    if (rc || *need_full) {
        rtable_clear(t);
        memset(t, 0, sizeof *t);
    }
    /* Whatever parsing left freed between the blocks kept (the slabs go back to the system
     * themselves) is returned too, so a large load does not stay resident. */
    mem_trim_after(nloaded);
    return rc;
}

int rtable_from_reply(const bson_t *reply, const rtable_t *base, rtable_t *out,
                      bool *need_full, ms_error_t *err) {
    rtable_load_t l;
    bool restart = false;
    rtable_load_begin(&l, base, out);
    int rc = rtable_load_page(&l, reply, &restart, err);
    if (rc == 0 && !restart) return rtable_load_end(&l, need_full, err);
    *need_full = rc == 0;
    rtable_load_abort(&l);
    return rc;
}

/* ---- fetching page by page ---------------------------------------------------------------- */

bool rtable_reply_uuid(const bson_t *reply, uint8_t out[16]) {
    bson_iter_t it;
    bson_subtype_t st;
    uint32_t len = 0;
    const uint8_t *data = NULL;
    if (!bson_iter_init_find(&it, reply, "uuid") || !BSON_ITER_HOLDS_BINARY(&it)) return false;
    bson_iter_binary(&it, &st, &len, &data);
    if (len != 16) return false;
    memcpy(out, data, 16);
    return true;
}

static void page_cmd(bson_t *cmd, const char *ns, const rtable_version_t *since,
                     const rtable_load_t *l) {
    bson_init(cmd);
    BSON_APPEND_UTF8(cmd, "getRoutingTable", ns);
    BSON_APPEND_UTF8(cmd, "$db", "admin");
    if (since) rtable_version_append(cmd, "sinceVersion", since);
    if (l->npages > 0) BSON_APPEND_TIMESTAMP(cmd, "after", l->last_major, l->last_minor);
}

/* Reads pages into l until one says no more (*restart: a page that cannot join). */
static int read_pages(const char *ns, const rtable_version_t *since, rtable_call_fn call,
                      void *arg, rtable_load_t *l, bool *restart, ms_error_t *err) {
    int rc = 0;
    do {
        bson_t cmd, reply;
        if (l->npages > 0 && (rc = fp_eval(RTABLE_FP_HANG_BETWEEN_PAGES, err)) != 0) break;
        page_cmd(&cmd, ns, since, l);
        rc = call(arg, &cmd, &reply, err);
        bson_destroy(&cmd);
        if (rc) break;
        int before = l->nfresh;
        rc = rtable_load_page(l, &reply, restart, err);
        bson_destroy(&reply);
        if (rc || *restart) break;
        if (l->more && l->nfresh == before) {   /* the loop must advance */
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable: an empty page with more");
            break;
        }
    } while (l->more);
    return rc;
}

/* One load: its pages, then the table. *restart: start over in full. */
static int fetch_once(const char *ns, const rtable_t *base, rtable_call_fn call, void *arg,
                      rtable_t *out, bool *restart, ms_error_t *err) {
    rtable_load_t l;
    rtable_version_t since;
    if (base) rtable_coll_version(base, &since);
    rtable_load_begin(&l, base, out);
    int rc = read_pages(ns, base ? &since : NULL, call, arg, &l, restart, err);
    if (rc || *restart) {
        rtable_load_abort(&l);
        return rc;
    }
    return rtable_load_end(&l, restart, err);   /* need_full: start over in full too */
}

int rtable_fetch(const char *ns, const rtable_t *base, rtable_call_fn call, void *arg,
                 rtable_t *out, ms_error_t *err) {
    for (int tries = 0; tries < MS_ROUTING_FETCH_TRIES; tries++) {
        bool restart = false;
        int rc = fetch_once(ns, tries == 0 ? base : NULL, call, arg, out, &restart, err);
        if (rc || !restart) return rc;
        log_info("routing table of %s changed generation or did not apply while read, "
                 "reading it in full try=%d", log_str(ns), tries + 1);
    }
    return err_set(err, MS_ERR_CONFLICTING_OPERATION,
                   "routing table of %s changed generation while it was read, %d times", ns,
                   MS_ROUTING_FETCH_TRIES);
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

/* ---- one owner, from the chunks changed since a version ----------------------------------- */

/* Of the chunks l read, the newest whose range holds the encoded key; NULL when none. */
static const rtable_chunk_t *newest_holding(const rtable_load_t *l, const buf_t *key) {
    const rtable_chunk_t *best = NULL;
    for (int i = 0; i < l->nfresh; i++) {
        const rtable_chunk_t *c = &l->fresh[i];
        if (buf_cmp(&c->min, key) <= 0 && buf_cmp(key, &c->max) < 0 &&
            (!best || lastmod(c) > lastmod(best)))
            best = c;
    }
    return best;
}

/* The collection version as the pages say: their generation, and the larger of the last
 * page's collectionVersion and the highest lastmod read. */
static void owner_version(const rtable_load_t *l, rtable_version_t *cv) {
    uint64_t v = (uint64_t)l->last_major << 32 | l->last_minor;
    bool same = l->have_cv && bson_oid_equal(&l->cv.epoch, &l->out->epoch) &&
                l->cv.ts_t == l->out->ts_t && l->cv.ts_i == l->out->ts_i;
    if (same && ((uint64_t)l->cv.major << 32 | l->cv.minor) > v)
        v = (uint64_t)l->cv.major << 32 | l->cv.minor;
    bson_oid_copy(&l->out->epoch, &cv->epoch);
    cv->ts_t = l->out->ts_t;
    cv->ts_i = l->out->ts_i;
    cv->major = (uint32_t)(v >> 32);
    cv->minor = (uint32_t)v;
}

int rtable_fetch_owner(const char *ns, const rtable_version_t *since, const bson_t *key,
                       rtable_call_fn call, void *arg, char *owner, size_t cap,
                       rtable_version_t *cv, ms_error_t *err) {
    for (int tries = 0; tries < MS_ROUTING_FETCH_TRIES; tries++) {
        rtable_t t;
        rtable_load_t l;
        buf_t k = {0};
        bool restart = false;
        rtable_load_begin(&l, NULL, &t);
        l.partial = true;
        int rc = read_pages(ns, since, call, arg, &l, &restart, err);
        if (rc == 0 && !restart && (rc = keys_encode_bound(&t.pattern, key, &k, err)) == 0) {
            const rtable_chunk_t *c = newest_holding(&l, &k);
            if (!c)
                rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "getRoutingTable of %s: no chunk "
                             "changed since the version given holds the key", ns);
            else
                snprintf(owner, cap, "%s", t.shards[c->shard]);
            owner_version(&l, cv);
        }
        buf_free(&k);
        rtable_load_abort(&l);
        if (rc || !restart) return rc;
    }
    return err_set(err, MS_ERR_CONFLICTING_OPERATION,
                   "routing table of %s changed generation while it was read, %d times", ns,
                   MS_ROUTING_FETCH_TRIES);
}
