/*
 * test_common_rtable_pages.c — a routing table read in pages (common/rtable.h
 * rtable_fetch) against a simulated config server whose catalog splits, merges and moves
 * chunks between the pages: the table built must be exactly the catalog as of the last
 * page, full or incremental; a generation change between pages starts the load over, and
 * one that never settles ends in ConflictingOperationInProgress. The simulated server
 * answers as configsvr/cat_routing.c does: the next chunks in lastmod order with lastmod >=
 * sinceVersion (all for a full table) and > after, sorted by min, `more` while some remain.
 */
#include <stdlib.h>
#include <string.h>

#include "common/rtable.h"
#include "tests/unit/t.h"
#include "tests/unit/t_rtable.h"

#define SIM_CHUNKS_MAX 4096
#define SPAN 1000000   /* width of the first and last chunk's finite side */

static const char *const shard_names[] = {"s0", "s1", "s2"};

typedef struct sim {
    ch_t c[SIM_CHUNKS_MAX];   /* the catalog: sorted by min, tiling */
    int n;
    uint32_t major, minor;    /* collection version: the highest lastmod handed out */
    bson_oid_t epoch;
    uint32_t ts;
    int page_cap;             /* chunks per page */
    int ops_per_page;         /* changes made before each page but the first of a load */
    int recreate_every;       /* > 0: a new generation before every such page ... */
    int recreations_left;     /* ... this many times */
    int calls;
} sim_t;

static void bump(sim_t *s, bool major) {
    if (major) {
        s->major++;
        s->minor = 0;
    } else {
        s->minor++;
    }
}

static void stamp(sim_t *s, ch_t *c, bool major) {
    bump(s, major);
    c->major = s->major;
    c->minor = s->minor;
}

static void sim_create(sim_t *s, int n, uint32_t ts) {
    s->n = n;
    s->ts = ts;
    bson_oid_init(&s->epoch, NULL);
    s->major = 1;
    s->minor = 0;
    for (int i = 0; i < n; i++) {
        s->c[i] = (ch_t){.min = i == 0 ? MINK : (int64_t)(i - 1) * SPAN,
                         .max = i == n - 1 ? MAXK : (int64_t)i * SPAN,
                         .shard = shard_names[i % 3], .major = 1, .minor = (uint32_t)i};
        s->minor = (uint32_t)i;
    }
}

static void sim_split(sim_t *s, int i) {
    ch_t *c = &s->c[i];
    int64_t lo = c->min == MINK ? c->max - SPAN : c->min;
    int64_t hi = c->max == MAXK ? c->min + SPAN : c->max;
    if (c->min == MINK && c->max == MAXK) lo = -SPAN, hi = SPAN;
    if (hi - lo < 2 || s->n >= SIM_CHUNKS_MAX) return;
    memmove(&s->c[i + 2], &s->c[i + 1], (size_t)(s->n - i - 1) * sizeof s->c[0]);
    s->n++;
    s->c[i + 1] = s->c[i];
    s->c[i].max = s->c[i + 1].min = lo + (hi - lo) / 2;
    stamp(s, &s->c[i], false);
    stamp(s, &s->c[i + 1], false);
}

static void sim_merge(sim_t *s, int i) {
    if (i + 1 >= s->n || strcmp(s->c[i].shard, s->c[i + 1].shard) != 0) return;
    s->c[i].max = s->c[i + 1].max;
    memmove(&s->c[i + 1], &s->c[i + 2], (size_t)(s->n - i - 2) * sizeof s->c[0]);
    s->n--;
    stamp(s, &s->c[i], false);
}

/* A migration commit: the moved chunk gets the next major, the donor's control chunk (if
 * it keeps one) the minor after it. */
static void sim_move(sim_t *s, int i, unsigned *seed) {
    const char *donor = s->c[i].shard, *to = shard_names[rand_r(seed) % 3];
    if (to == donor) return;
    s->c[i].shard = to;
    stamp(s, &s->c[i], true);
    for (int k = 0; k < s->n; k++)
        if (s->c[k].shard == donor) {
            stamp(s, &s->c[k], false);
            break;
        }
}

static void sim_churn(sim_t *s, unsigned *seed) {
    for (int k = 0; k < s->ops_per_page; k++) {
        int i = rand_r(seed) % s->n, op = rand_r(seed) % 3;
        if (op == 0) sim_split(s, i);
        else if (op == 1) sim_merge(s, i);
        else sim_move(s, i, seed);
    }
}

static uint64_t lm(uint32_t major, uint32_t minor) { return (uint64_t)major << 32 | minor; }

static int by_lastmod(const void *a, const void *b) {
    uint64_t x = lm(((const ch_t *)a)->major, ((const ch_t *)a)->minor);
    uint64_t y = lm(((const ch_t *)b)->major, ((const ch_t *)b)->minor);
    return x < y ? -1 : x > y;
}

static int by_min(const void *a, const void *b) {
    int64_t x = ((const ch_t *)a)->min, y = ((const ch_t *)b)->min;
    return x < y ? -1 : x > y;
}

typedef struct server {
    sim_t *sim;
    unsigned seed;
} server_t;

/* The simulated getRoutingTable: one page of the catalog as it is now. */
static int serve(void *arg, const bson_t *cmd, bson_t *reply, ms_error_t *err) {
    server_t *sv = arg;
    sim_t *s = sv->sim;
    bson_iter_t it;
    uint64_t from = 0;
    bool full = true, after = bson_iter_init_find(&it, cmd, "after");
    (void)err;
    if (after) {
        uint32_t am, an;
        bson_iter_timestamp(&it, &am, &an);
        from = lm(am, an) + 1;
        if (s->recreate_every && ++s->calls % s->recreate_every == 0 && s->recreations_left > 0) {
            s->recreations_left--;
            sim_create(s, s->n, s->ts + 1);
        }
        sim_churn(s, &sv->seed);
    }
    if (bson_iter_init_find(&it, cmd, "sinceVersion")) {
        rtable_version_t v;
        CHECK(rtable_version_parse(&it, &v, NULL) == 0);
        if (bson_oid_equal(&v.epoch, &s->epoch) && v.ts_t == s->ts) {
            full = false;
            if (lm(v.major, v.minor) > from) from = lm(v.major, v.minor);
        }
    }
    ch_t *page = malloc((size_t)s->n * sizeof *page);
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (lm(s->c[i].major, s->c[i].minor) >= from) page[n++] = s->c[i];
    qsort(page, (size_t)n, sizeof *page, by_lastmod);
    bool more = n > s->page_cap;
    if (more) n = s->page_cap;
    qsort(page, (size_t)n, sizeof *page, by_min);   /* the page's own order, as the server's */
    reply_of(reply, &s->epoch, s->ts, full, page, n);
    BSON_APPEND_BOOL(reply, "more", more);
    free(page);
    return 0;
}

/* t holds exactly the simulated catalog. */
static void check_equal(const rtable_t *t, const sim_t *s) {
    rtable_t want;
    bool need_full = false;
    CHECK(build(&want, NULL, &s->epoch, s->ts, true, s->c, s->n, &need_full) == 0);
    CHECK_INT(t->nchunks, want.nchunks);
    for (int i = 0; i < t->nchunks && i < want.nchunks; i++) {
        const rtable_chunk_t *a = rtable_chunk(t, i), *b = rtable_chunk(&want, i);
        CHECK_MSG(a->min.len == b->min.len && !memcmp(a->min.data, b->min.data, a->min.len) &&
                      a->max.len == b->max.len && !memcmp(a->max.data, b->max.data, a->max.len),
                  "chunk %d bounds differ", i);
        CHECK_STR(t->shards[a->shard], want.shards[b->shard]);
        CHECK_MSG(a->major == b->major && a->minor == b->minor, "chunk %d lastmod %u|%u, want %u|%u",
                  i, a->major, a->minor, b->major, b->minor);
    }
    CHECK(bson_oid_equal(&t->epoch, &s->epoch));
    rtable_clear(&want);
}

static sim_t *sim_new(int n, int cap, int ops) {
    sim_t *s = calloc(1, sizeof *s);
    CHECK(s != NULL);
    sim_create(s, n, 1);
    s->page_cap = cap;
    s->ops_per_page = ops;
    return s;
}

static void test_pages_without_changes(void) {
    sim_t *s = sim_new(300, 7, 0);
    server_t sv = {.sim = s, .seed = 1};
    rtable_t t;
    ms_error_t err = {0};
    CHECK_INT(rtable_fetch("db.c", NULL, serve, &sv, &t, &err), 0);
    check_equal(&t, s);
    rtable_clear(&t);
    free(s);
}

/* Random splits, merges and moves between the pages of full and incremental loads. Each
 * change makes at most two lastmods, and a page reads more than that: a catalog that
 * changed faster than a client pages would never let it finish (a real page holds tens of
 * thousands of chunks). */
static void test_pages_under_changes(void) {
    for (unsigned seed = 1; seed <= 60; seed++) {
        sim_t *s = sim_new(40 + (int)(seed % 50), 7 + (int)(seed % 9), 1 + (int)(seed % 3));
        server_t sv = {.sim = s, .seed = seed};
        rtable_t full, inc;
        ms_error_t err = {0};
        CHECK_INT(rtable_fetch("db.c", NULL, serve, &sv, &full, &err), 0);
        check_equal(&full, s);
        sim_churn(s, &sv.seed);
        CHECK_INT(rtable_fetch("db.c", &full, serve, &sv, &inc, &err), 0);
        check_equal(&inc, s);
        rtable_clear(&full);
        rtable_clear(&inc);
        free(s);
    }
}

/* A new generation between two pages: the load starts over (in full) and ends with the
 * new generation's table; one that changes before every page never settles. */
static void test_generation_change_restarts(void) {
    sim_t *s = sim_new(50, 10, 0);
    server_t sv = {.sim = s, .seed = 7};
    rtable_t t;
    ms_error_t err = {0};
    s->recreate_every = 2;   /* the second page of every load sees a new generation */
    s->recreations_left = 1000;
    CHECK_INT(rtable_fetch("db.c", NULL, serve, &sv, &t, &err), MS_ERR_CONFLICTING_OPERATION);
    s->recreations_left = 1;   /* once: the second load completes */
    s->calls = 0;
    err = (ms_error_t){0};
    CHECK_INT(rtable_fetch("db.c", NULL, serve, &sv, &t, &err), 0);
    check_equal(&t, s);
    CHECK_INT((int)s->ts, 6);   /* 4 generations made in the first fetch, 1 in this one */
    rtable_clear(&t);
    free(s);
}

/* The chunk of s holding x. */
static const ch_t *holding(const sim_t *s, int64_t x) {
    for (int i = 0; i < s->n; i++)
        if (s->c[i].min <= x && x < s->c[i].max) return &s->c[i];
    return NULL;
}

/* rtable_fetch_owner: the owner of a key from the chunks changed since the version its
 * chunk had, read while the catalog changes between pages, is the catalog's owner. */
static void test_owner_from_changes_since(void) {
    for (unsigned seed = 1; seed <= 40; seed++) {
        sim_t *s = sim_new(60, 8, 2);
        server_t sv = {.sim = s, .seed = seed};
        int64_t x = (int64_t)(rand_r(&sv.seed) % 60) * SPAN - SPAN / 2;
        const ch_t *then = holding(s, x);
        rtable_version_t since = {.ts_t = s->ts, .ts_i = 1, .major = then->major,
                                  .minor = then->minor}, cv;
        bson_t key = BSON_INITIALIZER;
        char owner[RTABLE_NAME_BYTES_MAX] = "";
        ms_error_t err = {0};
        bson_oid_copy(&s->epoch, &since.epoch);
        BSON_APPEND_INT64(&key, "x", x);
        for (int k = 0; k < 20; k++) sim_churn(s, &sv.seed);   /* before the read, too */
        CHECK_INT(rtable_fetch_owner("db.c", &since, &key, serve, &sv, owner, sizeof owner, &cv,
                                     &err), 0);
        CHECK_STR(owner, holding(s, x)->shard);
        CHECK_MSG(cv.major == s->major && cv.minor == s->minor, "cv %u|%u, catalog %u|%u", cv.major, cv.minor, s->major, s->minor);
        bson_destroy(&key);
        free(s);
    }
}

T_MAIN(T_CASE(test_pages_without_changes), T_CASE(test_pages_under_changes),
       T_CASE(test_generation_change_restarts), T_CASE(test_owner_from_changes_since))
