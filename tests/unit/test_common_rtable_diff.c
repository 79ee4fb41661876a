/*
 * test_common_rtable_diff.c — a differential test of the routing table's incremental
 * refresh (common/rtable.c): a model catalog changes as the config server changes
 * config.chunks (splits, merges of random ranges, moves with and without a control chunk,
 * moveRange = split + move; every change bumps lastmods as MongoDB does, notes §2.1), and
 * after each round of changes a "router" applies the incremental reply (the chunks with
 * lastmod >= its collection version, in any order) to its table. The result must equal a
 * full load of the same catalog exactly: chunks, bounds, owners, lastmods, collection
 * version, each shard's version and chunk count. Some replies are damaged (a chunk
 * dropped, a bound moved, a chunk repeated): an oracle, the plain merge (the fresh chunks
 * no newer fresh one overlaps, as a paged reply's reader keeps them, plus the old chunks
 * none of those overlaps, tiling checked over the whole table), says whether the reply
 * must ask for a full refresh. Some replies come from another
 * generation. The previous table, whose blocks the new one shares, must stay unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "common/rtable.h"
#include "tests/unit/t.h"
#include "tests/unit/t_rtable.h"

#define NSHARDS 4
#define STEPS 1500
#define MODEL_CHUNKS_MAX 4000

static const char *const names[NSHARDS] = {"s0", "s1", "s2", "s3"};

/* config.chunks of one collection, sorted by min, and its generation and version. */
typedef struct model {
    ch_t c[MODEL_CHUNKS_MAX];
    int n;
    const bson_oid_t *epoch;
    uint32_t ts;
    uint32_t major, minor;   /* collection version: the max lastmod */
} model_t;

static bson_oid_t epoch_a, epoch_b;

static uint32_t rnd(uint32_t n) {
    return (uint32_t)rand() % n;
}

static bool version_ge(uint32_t am, uint32_t an, uint32_t bm, uint32_t bn) {
    return am > bm || (am == bm && an >= bn);
}

/* ---- the model catalog (what the config server does to config.chunks) ---------------------- */

static void model_init(model_t *m, int n) {
    m->n = n;
    m->epoch = &epoch_a;
    m->ts = 1;
    m->major = 1;
    m->minor = (uint32_t)n - 1;
    for (int i = 0; i < n; i++)
        m->c[i] = (ch_t){.min = i == 0 ? MINK : (int64_t)i * 1000000,
                         .max = i == n - 1 ? MAXK : (int64_t)(i + 1) * 1000000,
                         .shard = names[rnd(NSHARDS)], .major = 1, .minor = (uint32_t)i};
}

static void stamp_minor(model_t *m, ch_t *c) {
    c->major = m->major;
    c->minor = ++m->minor;
}

/* A key strictly inside chunk i, or false when it has none. */
static bool split_point(const ch_t *c, int64_t *at) {
    int64_t lo = c->min == MINK ? c->max - 5000 : c->min;
    int64_t hi = c->max == MAXK ? c->min + 5000 : c->max;
    if (c->min == MINK && c->max == MAXK) lo = -5000, hi = 5000;
    if (hi - lo < 2) return false;
    *at = lo + 1 + (int64_t)rnd((uint32_t)(hi - lo - 1));
    return true;
}

/* splitChunk of chunk i at up to points keys: every piece gets a new minor version. */
static bool op_split(model_t *m, int i, int points) {
    int64_t at;
    bool any = false;
    for (int p = 0; p < points; p++) {
        if (m->n >= MODEL_CHUNKS_MAX || !split_point(&m->c[i], &at)) break;
        memmove(&m->c[i + 1], &m->c[i], (size_t)(m->n - i) * sizeof m->c[0]);
        m->n++;
        m->c[i].max = at;
        m->c[i + 1].min = at;
        stamp_minor(m, &m->c[i + 1]);
        any = true;
    }
    if (any) stamp_minor(m, &m->c[i]);
    return any;
}

/* mergeChunks of [i, i + len): one chunk, owned as the first was (the catalog the
 * refresh sees is all that matters here), with a new minor version. */
static void op_merge(model_t *m, int i, int len) {
    if (len < 2 || i + len > m->n) return;
    m->c[i].max = m->c[i + len - 1].max;
    stamp_minor(m, &m->c[i]);
    memmove(&m->c[i + 1], &m->c[i + len], (size_t)(m->n - i - len) * sizeof m->c[0]);
    m->n -= len - 1;
}

/* moveChunk of chunk i to another shard: it gets (major+1, 0); with control, one chunk
 * the donor keeps gets (major+1, 1) as MongoDB does. Without it the donor's version must
 * be found among its remaining chunks (the table's recompute path). */
static void op_move(model_t *m, int i, bool control) {
    const char *from = m->c[i].shard;
    m->c[i].shard = names[((uint32_t)(from[1] - '0') + 1 + rnd(NSHARDS - 1)) % NSHARDS];
    m->c[i].major = ++m->major;
    m->c[i].minor = m->minor = 0;
    for (int k = 0; control && k < m->n; k++)
        if (m->c[k].shard == from) {
            m->c[k].major = m->major;
            m->c[k].minor = m->minor = 1;
            break;
        }
}

/* One random change of the catalog; while growing, splits make up to 16 pieces and
 * merges are rare, else merges take up to 150 chunks. */
static void model_change(model_t *m, bool grow) {
    int i = (int)rnd((uint32_t)m->n);
    switch (rnd(8)) {
    case 0: case 1: op_split(m, i, grow ? 1 + (int)rnd(15) : 1); break;
    case 2: op_merge(m, i, 2 + (int)rnd(grow ? 2 : rnd(4) == 0 ? 150 : 8)); break;
    case 3: case 4: op_move(m, i, rnd(2) == 0); break;
    default:   /* moveRange: split off a piece, move it */
        if (op_split(m, i, 1)) op_move(m, i + (int)rnd(2), rnd(2) == 0);
        break;
    }
}

/* ---- replies ------------------------------------------------------------------------------ */

/* The incremental answer to sinceVersion (major, minor): every chunk with lastmod >= it,
 * shuffled (the config server orders by lastmod; the table must not rely on order). */
static int fresh_since(const model_t *m, uint32_t major, uint32_t minor, ch_t *out) {
    int n = 0;
    for (int i = 0; i < m->n; i++)
        if (version_ge(m->c[i].major, m->c[i].minor, major, minor)) out[n++] = m->c[i];
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rnd((uint32_t)i + 1);
        ch_t tmp = out[i];
        out[i] = out[j];
        out[j] = tmp;
    }
    return n;
}

/* Damages a reply: drops a chunk, moves one of its interior bounds by one, or repeats a
 * chunk. Returns the new count. */
static int damage(ch_t *f, int n) {
    int k = (int)rnd((uint32_t)n);
    switch (rnd(3)) {
    case 0: f[k] = f[n - 1]; return n - 1;
    case 1:
        if (f[k].min != MINK && rnd(2)) f[k].min += rnd(2) ? 1 : -1;
        else if (f[k].max != MAXK) f[k].max += rnd(2) ? 1 : -1;
        if (f[k].min >= f[k].max) f[k].max = f[k].min + 1;
        return n;
    default: f[n] = f[k]; return n + 1;
    }
}

static int ch_cmp(const void *a, const void *b) {
    const ch_t *x = a, *y = b;
    return x->min < y->min ? -1 : x->min > y->min;
}

static bool newer(const ch_t *a, const ch_t *b) {
    return a->major > b->major || (a->major == b->major && a->minor > b->minor);
}

/* The fresh chunks a reply's reader keeps (rtable's pages may overlap: what a chunk
 * became between two pages is newer): each one no newer fresh chunk overlaps, and of
 * equally new overlapping ones the first (a repeated chunk counts once). */
static int fresh_kept(const ch_t *f, int nf, ch_t *out) {
    int n = 0;
    for (int i = 0; i < nf; i++) {
        bool dead = false;
        for (int k = 0; k < nf && !dead; k++)
            dead = k != i && f[k].min < f[i].max && f[i].min < f[k].max &&
                   (newer(&f[k], &f[i]) || (!newer(&f[i], &f[k]) && k < i));
        if (!dead) out[n++] = f[i];
    }
    return n;
}

/* The oracle: the plain merge. Old chunks no kept fresh chunk overlaps, plus the kept
 * fresh ones, sorted; false when that does not tile [MinKey, MaxKey). out holds the
 * result. */
static bool plain_merge(const ch_t *old, int nold, const ch_t *fresh, int nfresh, ch_t *out, int *nout) {
    static ch_t f[MODEL_CHUNKS_MAX + 2];
    int nf = fresh_kept(fresh, nfresh, f), n = 0;
    for (int i = 0; i < nold; i++) {
        bool hit = false;
        for (int k = 0; k < nf && !hit; k++) hit = f[k].min < old[i].max && old[i].min < f[k].max;
        if (!hit) out[n++] = old[i];
    }
    memcpy(&out[n], f, (size_t)nf * sizeof *f);
    n += nf;
    qsort(out, (size_t)n, sizeof *out, ch_cmp);
    *nout = n;
    bool ok = n > 0 && out[0].min == MINK && out[n - 1].max == MAXK;
    for (int i = 0; ok && i + 1 < n; i++) ok = out[i].max == out[i + 1].min;
    return ok;
}

/* ---- comparing tables ------------------------------------------------------------------- */

static void version_of(const rtable_t *t, const char *name, rtable_version_t *v, int *count) {
    int s = rtable_shard_index(t, name);
    rtable_shard_version(t, s, v);
    *count = s >= 0 ? t->shard_nchunks[s] : 0;
}

/* Whether got equals want (a full load) exactly, by shard name; the first difference goes
 * into why. Also checks got's count of chunks at each shard's version. */
static bool same_table(const rtable_t *got, const rtable_t *want, char *why, size_t cap) {
    if (got->nchunks != want->nchunks)
        return snprintf(why, cap, "%d chunks, expected %d", got->nchunks, want->nchunks), false;
    if (got->coll_major != want->coll_major || got->coll_minor != want->coll_minor)
        return snprintf(why, cap, "collection version %u|%u, expected %u|%u", got->coll_major,
                        got->coll_minor, want->coll_major, want->coll_minor), false;
    int at_max[MS_SHARDS_MAX] = {0};
    for (int i = 0; i < got->nchunks; i++) {
        const rtable_chunk_t *g = rtable_chunk(got, i), *w = rtable_chunk(want, i);
        if (rtable_bytes_cmp(g->min.data, g->min.len, w->min.data, w->min.len) ||
            rtable_bytes_cmp(g->max.data, g->max.len, w->max.data, w->max.len) ||
            strcmp(got->shards[g->shard], want->shards[w->shard]) || g->major != w->major ||
            g->minor != w->minor)
            return snprintf(why, cap, "chunk %d differs (owner %s, %u|%u; expected %s, %u|%u)", i,
                            got->shards[g->shard], g->major, g->minor, want->shards[w->shard],
                            w->major, w->minor), false;
        at_max[g->shard] += g->major == got->shard_major[g->shard] &&
                            g->minor == got->shard_minor[g->shard];
    }
    for (int s = 0; s < NSHARDS; s++) {
        rtable_version_t gv, wv;
        int gn, wn;
        version_of(got, names[s], &gv, &gn);
        version_of(want, names[s], &wv, &wn);
        if (gv.major != wv.major || gv.minor != wv.minor || gn != wn)
            return snprintf(why, cap, "%s: %u|%u with %d chunks, expected %u|%u with %d", names[s],
                            gv.major, gv.minor, gn, wv.major, wv.minor, wn), false;
    }
    for (int s = 0; s < got->nshards; s++)
        if (got->shard_nchunks[s] && got->shard_at_max[s] != at_max[s])
            return snprintf(why, cap, "%s: %d chunks counted at its version, %d there",
                            got->shards[s], got->shard_at_max[s], at_max[s]), false;
    return true;
}

/* ---- the test --------------------------------------------------------------------------- */

typedef struct stats {
    int merged, damaged_full, damaged_merged, generation, rotated;
} stats_t;

/* A full load of chunks c[0, n) in m's generation into t. */
static void full_load(rtable_t *t, const model_t *m, const ch_t *c, int n) {
    bool nf;
    CHECK_INT(build(t, NULL, m->epoch, m->ts, true, c, n, &nf), 0);
    CHECK(!nf);
}

/* Whether next, built from a reply that applied, is a full load of c[0, n); sometimes
 * renumbers next's shards first (its blocks are shared with the previous table). */
static bool check_merged(const model_t *m, const ch_t *c, int n, rtable_t *next, stats_t *st,
                         int step) {
    char why[256] = "";
    rtable_t *want = mem_calloc_aligned(1, sizeof *want);
    full_load(want, m, c, n);
    if (rnd(50) == 0) {
        rtable_rotate_shards(next);
        st->rotated++;
    }
    bool ok = same_table(next, want, why, sizeof why);
    CHECK_MSG(ok, "step %d (%d chunks): %s", step, n, why);
    rtable_clear(want);
    free(want);
    return ok;
}

/* One refresh of cur (the catalog was old[0, nold) when cur was loaded, m now) into next.
 * False at the first difference (reported). */
static bool refresh_once(const model_t *m, const ch_t *old, int nold, const rtable_t *cur,
                         const rtable_t *cur_full, rtable_t *next, stats_t *st, int step) {
    static ch_t fresh[MODEL_CHUNKS_MAX + 1], want_chunks[2 * MODEL_CHUNKS_MAX + 1];
    char why[256] = "";
    bool nf = false, damaged = rnd(12) == 0, ok;
    bool other_gen = !bson_oid_equal(&cur->epoch, m->epoch) || cur->ts_t != m->ts;
    int nfresh = fresh_since(m, cur->coll_major, cur->coll_minor, fresh), nwant = m->n;
    const ch_t *want_c = m->c;
    bool want_full = other_gen;
    if (damaged && !other_gen && nfresh > 0) {
        nfresh = damage(fresh, nfresh);
        want_full = !plain_merge(old, nold, fresh, nfresh, want_chunks, &nwant);
        want_c = want_chunks;
    }
    CHECK_INT(build(next, cur, m->epoch, m->ts, false, fresh, nfresh, &nf), 0);
    CHECK_MSG(nf == want_full, "step %d: need_full %d, expected %d (damaged %d, other gen %d)",
              step, nf, want_full, damaged, other_gen);
    if (nf != want_full) return false;
    if (nf) {   /* as the router does: ask again in full */
        st->generation += other_gen;
        st->damaged_full += !other_gen;
        full_load(next, m, m->c, m->n);
        ok = true;
    } else {
        st->merged++;
        st->damaged_merged += damaged;
        ok = check_merged(m, want_c, nwant, next, st, step);
    }
    if (ok) {   /* the previous table (next shares its blocks) never changes */
        ok = same_table(cur, cur_full, why, sizeof why);
        CHECK_MSG(ok, "step %d: the previous table changed: %s", step, why);
    }
    return ok;
}

/* The whole run: STEPS refreshes of a random catalog, each checked. */
static void run_refreshes(const char *name) {
    uint64_t seed = t_seed(name);
    srand((unsigned)seed);
    bson_oid_init(&epoch_a, NULL);
    bson_oid_init(&epoch_b, NULL);
    static model_t m;
    static ch_t old[MODEL_CHUNKS_MAX];
    rtable_t *tab[2], *full[2];
    stats_t st = {0};
    for (int k = 0; k < 2; k++) {
        tab[k] = mem_calloc_aligned(1, sizeof *tab[k]);
        full[k] = mem_calloc_aligned(1, sizeof *full[k]);
    }
    model_init(&m, 50 + (int)rnd(400));
    full_load(tab[0], &m, m.c, m.n);
    full_load(full[0], &m, m.c, m.n);
    int cur = 0, nold = m.n, step, nmax = m.n;
    memcpy(old, m.c, (size_t)m.n * sizeof *old);
    for (step = 0; step < STEPS; step++) {
        if (rnd(300) == 0) {   /* a new generation (resharding, drop and re-create) */
            m.epoch = m.epoch == &epoch_a ? &epoch_b : &epoch_a;
            m.ts++;
        }
        bool grow = step / 400 % 2 == 0;   /* the table grows and shrinks in turns */
        for (int k = 1 + (int)rnd(3); k > 0; k--) model_change(&m, grow);
        nmax = m.n > nmax ? m.n : nmax;
        int nx = 1 - cur;
        if (!refresh_once(&m, old, nold, tab[cur], full[cur], tab[nx], &st, step)) break;
        rtable_clear(full[nx]);
        rtable_clear(tab[cur]);
        rtable_clear(full[cur]);
        full_load(full[nx], &m, m.c, m.n);
        char why[256];
        /* A damaged reply that tiled left the table as it said (checked): the router
         * would learn the rest later; here it loads the catalog in full now. */
        if (!same_table(tab[nx], full[nx], why, sizeof why)) {
            rtable_clear(tab[nx]);
            full_load(tab[nx], &m, m.c, m.n);
        }
        cur = nx;
        nold = m.n;
        memcpy(old, m.c, (size_t)m.n * sizeof *old);
    }
    CHECK_MSG(step == STEPS, "seed=%llu: stopped at step %d", (unsigned long long)seed, step);
    printf("  %d refreshes: %d merged (%d of them damaged but tiling), %d damaged -> full, "
           "%d other generation -> full, %d rotated; up to %d chunks, %d at the end\n",
           step, st.merged, st.damaged_merged, st.damaged_full, st.generation, st.rotated, nmax,
           m.n);
    /* every kind of refresh happened */
    CHECK(st.merged > STEPS / 2 && st.damaged_full > 0 && st.generation > 0 && st.rotated > 0);
    for (int k = 0; k < 2; k++) {
        rtable_clear(tab[k]);
        rtable_clear(full[k]);
        free(tab[k]);
        free(full[k]);
    }
}

/* The real geometry: a table of up to ~2,000 chunks spans tens of blocks, one page. */
static void test_incremental_equals_full_load(void) {
    rtable_set_geometry(RTABLE_BLOCK_CHUNKS, RTABLE_PAGE_BLOCKS);
    run_refreshes("test_incremental_equals_full_load");
}

/* Blocks of 4 chunks, pages of 4 blocks: the same refreshes span hundreds of pages, so
 * regrouping, neighbour take-in and sharing at the page level are exercised too. */
static void test_incremental_small_geometry(void) {
    rtable_set_geometry(4, 4);
    run_refreshes("test_incremental_small_geometry");
    rtable_set_geometry(RTABLE_BLOCK_CHUNKS, RTABLE_PAGE_BLOCKS);
}

T_MAIN(T_CASE(test_incremental_equals_full_load),
       T_CASE(test_incremental_small_geometry))
