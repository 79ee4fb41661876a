/*
 * test_common_cursor.c — unit tests of the cursor registry every daemon uses
 * (common/cursor.c) on stand-in cursors: a struct that embeds its curs_t (not first, so
 * curs_entry is exercised), says how many bytes it holds and counts its destroys. Caps
 * per connection, in all and on bytes, with their messages and refusal counters; pin and
 * unpin (CursorNotFound, CursorInUse, Unauthorized); kill while pinned; idle reaping;
 * relayed ids; listing by namespace; and threads racing on one registry, where every
 * cursor must be destroyed exactly once.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/cursor.h"
#include "common/log.h"
#include "tests/unit/t.h"

typedef struct fake {
    int tag;
    curs_t c;
    size_t held;
    atomic_int *destroyed;
} fake_t;

static size_t fake_held(const curs_t *c) {
    return curs_entry(c, fake_t, c)->held;
}

static void fake_destroy(void *arg, curs_t *c) {
    fake_t *f = curs_entry(c, fake_t, c);
    CHECK_INT(f->tag, 0x5eed);
    CHECK_INT((intptr_t)arg, 7);
    atomic_fetch_add(f->destroyed, 1);
    f->tag = 0;
    free(f);
}

static curs_reg_t *reg_open(int conn_max, int total_max, long long bytes_max, int idle_ms) {
    curs_opts_t o = {.noun = "cursors", .place = "on this shard", .owner = "shard",
                     .conn_max = conn_max, .total_max = total_max, .bytes_max = bytes_max,
                     .idle_ms = idle_ms, .held_fn = fake_held, .destroy_fn = fake_destroy,
                     .arg = (void *)(intptr_t)7};
    curs_reg_t *r = NULL;
    CHECK_INT(curs_reg_new(&o, &r), 0);
    return r;
}

/* Adds a stand-in cursor; returns its id, or 0 with *e filled (the cursor freed). */
static int64_t add(curs_reg_t *r, const char *ns, uint32_t conn, size_t held,
                   atomic_int *destroyed, ms_error_t *e) {
    fake_t *f = calloc(1, sizeof *f);
    int64_t id = 0;
    ASSERT(f);
    f->tag = 0x5eed;
    f->held = held;
    f->destroyed = destroyed;
    if (curs_add(r, &f->c, ns, conn, 0, false, &id, e) != 0) {
        free(f);
        return 0;
    }
    return id;
}

/* The number at a dotted path of doc; -1 when absent. */
static int64_t at(const bson_t *doc, const char *path) {
    bson_iter_t it;
    if (!bson_iter_init(&it, doc) || !bson_iter_find_descendant(&it, path, &it)) return -1;
    return bson_iter_as_int64(&it);
}

static void test_caps_per_connection_and_total(void) {
    curs_reg_t *r = reg_open(3, 5, 0, 60000);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    curs_stats_t s;
    for (int i = 0; i < 3; i++) CHECK(add(r, "db.c", 1, 0, &destroyed, &e) > 0);
    CHECK_INT(add(r, "db.c", 1, 0, &destroyed, &e), 0);
    CHECK_INT(e.code, MS_ERR_EXCEEDED_MEMORY_LIMIT);
    CHECK_STR(e.msg, "too many open cursors for this connection (limit 3); exhaust or kill "
                     "cursors");
    CHECK_INT(curs_admit(r, 1, &e), MS_ERR_EXCEEDED_MEMORY_LIMIT);
    CHECK_INT(curs_admit(r, 2, &e), 0);
    for (int i = 0; i < 2; i++) CHECK(add(r, "db.c", 2, 0, &destroyed, &e) > 0);
    memset(&e, 0, sizeof e);
    CHECK_INT(add(r, "db.c", 3, 0, &destroyed, &e), 0);   /* a fresh connection: the total */
    CHECK_STR(e.msg, "too many open cursors on this shard for all connections (limit 5); "
                     "exhaust or kill cursors");
    CHECK_INT(curs_admit(r, 3, &e), MS_ERR_EXCEEDED_MEMORY_LIMIT);
    curs_stats(r, &s);
    CHECK_INT(s.open, 5);
    CHECK_INT(s.refused_conn, 2);
    CHECK_INT(s.refused_total, 2);
    CHECK_INT(s.refused_bytes, 0);
    /* uncapped (admitted before, the cursor exists elsewhere): goes in over the caps. */
    fake_t *f = calloc(1, sizeof *f);
    int64_t id = 0;
    f->tag = 0x5eed;
    f->destroyed = &destroyed;
    CHECK_INT(curs_add(r, &f->c, "db.c", 1, 0, true, &id, &e), 0);
    CHECK(id > 0);
    CHECK_INT(curs_count(r), 6);
    curs_reg_free(r);
    CHECK_INT(destroyed, 6);
}

/* The message names the place on the per-connection cap too when asked (config server). */
static void test_cap_messages_name_the_place(void) {
    curs_opts_t o = {.noun = "config cursors", .place = "on the config server",
                     .conn_names_place = true, .owner = "config server", .conn_max = 1,
                     .total_max = 1, .held_fn = fake_held, .destroy_fn = fake_destroy,
                     .arg = (void *)(intptr_t)7};
    curs_reg_t *r = NULL;
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    CHECK_INT(curs_reg_new(&o, &r), 0);
    CHECK(add(r, "config.shards", 1, 0, &destroyed, &e) > 0);
    CHECK_INT(add(r, "config.shards", 1, 0, &destroyed, &e), 0);
    CHECK_STR(e.msg, "too many open config cursors for this connection on the config server "
                     "(limit 1); exhaust or kill cursors");
    CHECK_INT(add(r, "config.shards", 2, 0, &destroyed, &e), 0);
    CHECK_STR(e.msg, "too many open config cursors on the config server for all connections "
                     "(limit 1); exhaust or kill cursors");
    curs_reg_free(r);
    CHECK_INT(destroyed, 1);
}

static void test_bytes_cap_counts_held_and_outside_bytes(void) {
    curs_reg_t *r = reg_open(10, 10, 1000, 60000);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    curs_stats_t s;
    int64_t a = add(r, "db.c", 1, 600, &destroyed, &e);
    CHECK(a > 0);
    CHECK_INT(curs_bytes(r), 600);
    CHECK_INT(add(r, "db.c", 1, 401, &destroyed, &e), 0);   /* 1001 > 1000 */
    CHECK_STR(e.msg, "shard cursors buffer 600 bytes, at the shard's limit of 1000 bytes for "
                     "all cursors; exhaust or kill cursors");
    CHECK(add(r, "db.c", 1, 400, &destroyed, &e) > 0);       /* exactly at the cap */
    curs_bytes_add(r, 5);                                     /* a daemon's own buffering */
    CHECK_INT(curs_bytes(r), 1005);
    CHECK_INT(curs_refuse_bytes(r, &e), MS_ERR_EXCEEDED_MEMORY_LIMIT);
    curs_bytes_add(r, -5);
    curs_stats(r, &s);
    CHECK_INT(s.refused_bytes, 2);
    CHECK_INT(s.bytes, 1000);
    /* unpin re-reads what the cursor holds; kill releases it. */
    curs_t *c = NULL;
    CHECK_INT(curs_pin(r, a, "db.c", &c, &e), 0);
    curs_entry(c, fake_t, c)->held = 100;
    curs_unpin(r, c, false);
    CHECK_INT(curs_bytes(r), 500);
    CHECK(curs_kill(r, a));
    CHECK_INT(curs_bytes(r), 400);
    /* metrics: open, bytes, refusals and caps in common/cmd.h's shape. */
    bson_t m = BSON_INITIALIZER, cur;
    curs_metrics_begin(r, "bytesHeld", &m, &cur);
    bson_append_document_end(&m, &cur);
    CHECK_INT(at(&m, "cursor.open.total"), 1);
    CHECK_INT(at(&m, "cursor.bytesHeld"), 400);
    CHECK_INT(at(&m, "cursor.refused.bytes"), 2);
    CHECK_INT(at(&m, "cursor.limits.bytes"), 1000);
    bson_destroy(&m);
    curs_reg_free(r);
    CHECK_INT(destroyed, 2);
}

/* Without a bytes cap there is nothing to refuse on bytes, and metrics say none. */
static void test_metrics_without_bytes_cap(void) {
    curs_reg_t *r = reg_open(10, 10, 0, 60000);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    bson_t m = BSON_INITIALIZER, cur;
    CHECK(add(r, "db.c", 1, 1 << 30, &destroyed, &e) > 0);
    curs_metrics_begin(r, "bytesHeld", &m, &cur);
    bson_append_document_end(&m, &cur);
    CHECK_INT(at(&m, "cursor.limits.bytes"), -1);
    CHECK_INT(at(&m, "cursor.refused.bytes"), -1);
    CHECK_INT(at(&m, "cursor.limits.total"), 10);
    CHECK_INT(at(&m, "cursor.bytesHeld"), 1 << 30);
    bson_destroy(&m);
    curs_reg_free(r);
    CHECK_INT(destroyed, 1);
}

static void test_pin_unpin(void) {
    curs_reg_t *r = reg_open(10, 10, 0, 60000);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    curs_t *c = NULL, *c2 = NULL;
    int64_t id = add(r, "db.c", 1, 0, &destroyed, &e);
    CHECK(id > 0);
    CHECK_INT(curs_pin(r, id + 1, NULL, &c, &e), MS_ERR_CURSOR_NOT_FOUND);
    CHECK_INT(e.code, 43);
    CHECK_INT(curs_pin(r, id, "db.other", &c, &e), MS_ERR_UNAUTHORIZED);
    CHECK_STR(e.msg, "Requested getMore on namespace 'db.other', but cursor belongs to a "
                     "different namespace db.c");
    CHECK_INT(curs_pin(r, id, "db.c", &c, &e), 0);   /* Unauthorized left it unpinned */
    CHECK(c != NULL && c->id == id);
    CHECK_INT(curs_pin(r, id, "db.c", &c2, &e), MS_ERR_CURSOR_IN_USE);
    CHECK_INT(e.code, 143);
    CHECK_INT(curs_pin(r, id, "db.other", &c2, &e), MS_ERR_CURSOR_IN_USE);   /* in use first */
    curs_unpin(r, c, false);
    CHECK_INT(destroyed, 0);
    CHECK_INT(curs_pin(r, id, NULL, &c, &e), 0);
    curs_unpin(r, c, true);   /* exhausted */
    CHECK_INT(destroyed, 1);
    CHECK_INT(curs_count(r), 0);
    CHECK_INT(curs_pin(r, id, NULL, &c, &e), MS_ERR_CURSOR_NOT_FOUND);
    curs_unpin(r, NULL, true);   /* NULL-safe */
    curs_reg_free(r);
}

/* killCursors while a getMore holds the cursor: reported killed, no longer found, freed
 * once when the getMore unpins (even when it says "not done"). */
static void test_kill_while_pinned(void) {
    curs_reg_t *r = reg_open(10, 10, 0, 60000);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    curs_t *c = NULL, *c2 = NULL;
    int64_t id = add(r, "db.c", 1, 50, &destroyed, &e);
    CHECK_INT(curs_pin(r, id, "db.c", &c, &e), 0);
    CHECK(curs_kill(r, id));
    CHECK(!curs_kill(r, id));   /* already being killed */
    CHECK_INT(destroyed, 0);
    CHECK_INT(curs_count(r), 1);
    CHECK_INT(curs_pin(r, id, "db.c", &c2, &e), MS_ERR_CURSOR_NOT_FOUND);
    CHECK_INT(curs_list_ns(r, "db.c", NULL, NULL), 1);   /* its getMore still reads */
    curs_unpin(r, c, false);
    CHECK_INT(destroyed, 1);
    CHECK_INT(curs_count(r), 0);
    CHECK_INT(curs_bytes(r), 0);
    CHECK(!curs_kill(r, id));
    CHECK(!curs_kill(r, 12345));
    curs_reg_free(r);
    CHECK_INT(destroyed, 1);
}

/* killCursors' lists: idle and pinned cursors killed, unknown ids not found; a fractional
 * id is skipped when exact (the config server), truncated otherwise. */
static void test_kill_ids_reply(void) {
    curs_reg_t *r = reg_open(10, 10, 0, 60000);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    curs_t *c = NULL;
    int64_t idle = add(r, "db.c", 1, 0, &destroyed, &e);
    int64_t pinned = add(r, "db.c", 1, 0, &destroyed, &e);
    CHECK_INT(curs_pin(r, pinned, NULL, &c, &e), 0);
    for (int exact = 1; exact >= 0; exact--) {
        bson_t req = BSON_INITIALIZER, arr, reply = BSON_INITIALIZER;
        bson_iter_t it, ids;
        BSON_APPEND_ARRAY_BEGIN(&req, "cursors", &arr);
        BSON_APPEND_INT64(&arr, "0", exact ? idle : 42);
        BSON_APPEND_DOUBLE(&arr, "1", 7.5);
        BSON_APPEND_INT64(&arr, "2", exact ? pinned : idle);
        bson_append_array_end(&req, &arr);
        CHECK(bson_iter_init_find(&it, &req, "cursors") && bson_iter_recurse(&it, &ids));
        curs_kill_ids(r, &ids, exact, &reply);
        if (exact) {
            CHECK_INT(at(&reply, "cursorsKilled.0"), idle);
            CHECK_INT(at(&reply, "cursorsKilled.1"), pinned);
            CHECK_INT(at(&reply, "cursorsNotFound.0"), -1);   /* 7.5 is no id */
        } else {
            CHECK_INT(at(&reply, "cursorsKilled.0"), -1);
            CHECK_INT(at(&reply, "cursorsNotFound.0"), 42);
            CHECK_INT(at(&reply, "cursorsNotFound.1"), 7);
            CHECK_INT(at(&reply, "cursorsNotFound.2"), idle);   /* already gone */
        }
        CHECK(bson_iter_init_find(&it, &reply, "cursorsAlive") && BSON_ITER_HOLDS_ARRAY(&it));
        CHECK(bson_iter_init_find(&it, &reply, "cursorsUnknown") && BSON_ITER_HOLDS_ARRAY(&it));
        CHECK_INT(at(&reply, "cursorsAlive.0"), -1);
        bson_destroy(&req);
        bson_destroy(&reply);
    }
    CHECK_INT(destroyed, 1);    /* the pinned one waits for its getMore */
    curs_unpin(r, c, false);
    CHECK_INT(destroyed, 2);
    curs_reg_free(r);
}

static void test_idle_reap(void) {
    curs_reg_t *r = reg_open(10, 10, 0, 40);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    curs_t *c = NULL;
    int64_t idle = add(r, "db.c", 1, 0, &destroyed, &e);
    int64_t pinned = add(r, "db.c", 1, 0, &destroyed, &e);
    int64_t touched = add(r, "db.c", 1, 0, &destroyed, &e);
    CHECK_INT(curs_reap(r), 0);   /* none idle yet */
    CHECK_INT(curs_pin(r, pinned, NULL, &c, &e), 0);
    t_sleep_ms(60);
    CHECK(curs_touch(r, touched));
    CHECK(!curs_touch(r, 999));
    CHECK_INT(curs_reap(r), 1);   /* only the idle one: pinned never, touched just used */
    CHECK_INT(destroyed, 1);
    CHECK_INT(curs_pin(r, idle, NULL, &c, &e) == 0 ? 0 : e.code, MS_ERR_CURSOR_NOT_FOUND);
    curs_unpin(r, c, false);   /* c: still the pinned one (a failed pin writes nothing) */
    CHECK_INT(curs_count(r), 2);
    t_sleep_ms(60);
    CHECK_INT(curs_reap(r), 2);
    CHECK_INT(destroyed, 3);
    curs_reg_free(r);
}

/* A relayed cursor keeps the id its owner gave it; a second one under that id is refused. */
static void test_relayed_id(void) {
    curs_reg_t *r = reg_open(10, 10, 0, 60000);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    fake_t *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    int64_t id = 0;
    a->tag = b->tag = 0x5eed;
    a->destroyed = b->destroyed = &destroyed;
    CHECK_INT(curs_add(r, &a->c, "config.shards", 1, 4242, true, &id, &e), 0);
    CHECK_INT(id, 4242);
    CHECK_INT(curs_add(r, &b->c, "config.shards", 1, 4242, true, &id, &e), MS_ERR_INTERNAL);
    free(b);
    char longns[MS_NS_BYTES_MAX + 2];
    memset(longns, 'x', sizeof longns - 1);
    longns[sizeof longns - 1] = '\0';
    CHECK_INT(add(r, longns, 1, 0, &destroyed, &e), 0);
    CHECK_INT(e.code, MS_ERR_INVALID_NAMESPACE);
    CHECK(curs_kill(r, 4242));
    CHECK_INT(destroyed, 1);
    curs_reg_free(r);
}

typedef struct ids {
    int64_t v[8];
    int n;
} ids_t;

static void collect(void *arg, int64_t id) {
    ids_t *ids = arg;
    if (ids->n < 8) ids->v[ids->n] = id;
    ids->n++;
}

static bool has(const ids_t *ids, int64_t id) {
    for (int i = 0; i < ids->n && i < 8; i++)
        if (ids->v[i] == id) return true;
    return false;
}

/* The range deleter's question: which cursors read this namespace (whole names only). */
static void test_list_ns(void) {
    curs_reg_t *r = reg_open(10, 10, 0, 60000);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    int64_t a[3], b[2];
    ids_t ids = {0};
    for (int i = 0; i < 3; i++) a[i] = add(r, "db.a", 1, 0, &destroyed, &e);
    for (int i = 0; i < 2; i++) b[i] = add(r, "db.b", 2, 0, &destroyed, &e);
    CHECK_INT(curs_list_ns(r, "db.a", collect, &ids), 3);
    CHECK_INT(ids.n, 3);
    for (int i = 0; i < 3; i++) CHECK(has(&ids, a[i]));
    for (int i = 0; i < 2; i++) CHECK(!has(&ids, b[i]));
    CHECK_INT(curs_list_ns(r, "db.b", NULL, NULL), 2);
    CHECK_INT(curs_list_ns(r, "db.aa", NULL, NULL), 0);
    CHECK_INT(curs_list_ns(r, "db", NULL, NULL), 0);
    CHECK(curs_kill(r, a[0]));
    CHECK_INT(curs_list_ns(r, "db.a", NULL, NULL), 2);
    curs_reg_free(r);
    CHECK_INT(destroyed, 5);
}

/* Threads race on one registry: each adds cursors, pins and unpins, kills its own and
 * others' (pinned or not), and reaps. Every cursor added is destroyed exactly once (the
 * tag check catches a double destroy under ASan or not), and the totals end at zero. */
#define RACE_THREADS 4
#define RACE_ROUNDS 4000

typedef struct race {
    curs_reg_t *r;
    atomic_int *destroyed;
    atomic_int added;
    _Atomic int64_t ids[64];   /* recently added, for others to kill or pin */
    uint64_t seed;
} race_t;

typedef struct race_arg {
    race_t *race;
    int n;
} race_arg_t;

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *race_main(void *p) {
    race_arg_t *ra = p;
    race_t *rc = ra->race;
    uint64_t s = rc->seed + (uint64_t)ra->n * 0x9e3779b97f4a7c15ull + 1;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        ms_error_t e = {0};
        curs_t *c = NULL;
        int64_t id = atomic_load(&rc->ids[xorshift(&s) % 64]);
        switch (xorshift(&s) % 5) {
        case 0:
        case 1: {
            int64_t nid = add(rc->r, "db.c", (uint32_t)ra->n, 10, rc->destroyed, &e);
            if (nid) {
                atomic_fetch_add(&rc->added, 1);
                atomic_store(&rc->ids[xorshift(&s) % 64], nid);
            }
            break;
        }
        case 2:
            if (id && curs_pin(rc->r, id, "db.c", &c, &e) == 0) {
                if (xorshift(&s) % 2) sched_yield();
                curs_unpin(rc->r, c, xorshift(&s) % 3 == 0);
            }
            break;
        case 3:
            if (id) curs_kill(rc->r, id);
            break;
        default:
            curs_reap(rc->r);   /* idle_ms 1: reaps what sits unpinned */
            break;
        }
    }
    return NULL;
}

static void test_threads_race(void) {
    atomic_int destroyed = 0;
    race_t rc = {.r = reg_open(200, 300, 0, 1), .destroyed = &destroyed,
                 .seed = t_seed("test_threads_race")};
    pthread_t th[RACE_THREADS];
    race_arg_t args[RACE_THREADS];
    log_init("test_common_cursor", LOG_WARN);   /* thousands of "cursor timed out" lines */
    for (int i = 0; i < RACE_THREADS; i++) {
        args[i] = (race_arg_t){&rc, i};
        CHECK_INT(pthread_create(&th[i], NULL, race_main, &args[i]), 0);
    }
    for (int i = 0; i < RACE_THREADS; i++) pthread_join(th[i], NULL);
    int open = curs_count(rc.r);
    CHECK(open <= 300);
    CHECK_INT(curs_bytes(rc.r), 10LL * open);
    CHECK_INT(destroyed + open, atomic_load(&rc.added));
    CHECK(atomic_load(&rc.added) > RACE_ROUNDS / 4);
    curs_reg_free(rc.r);
    CHECK_INT(destroyed, atomic_load(&rc.added));
}

/* MongoDB's validateLSID: a getMore from another session, from none on a cursor opened in
 * one, or from one on a cursor opened outside any, is refused (mongod's codes here; the
 * router's registry answers mongos's), and the cursor stays usable by its own session. */
static void test_getmore_session_rule(void) {
    curs_reg_t *r = reg_open(10, 10, 0, 60000);
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    op_lsid_t a = {.has = true}, b = {.has = true};
    curs_t *c = NULL;
    memset(a.id, 0xaa, sizeof a.id);
    memset(b.id, 0xbb, sizeof b.id);
    op_set_lsid(&a);
    int64_t in_a = add(r, "db.c", 1, 0, &destroyed, &e);
    op_set_lsid(NULL);
    int64_t outside = add(r, "db.c", 1, 0, &destroyed, &e);
    CHECK(in_a > 0 && outside > 0);
    op_set_lsid(&b);
    CHECK_INT(curs_pin(r, in_a, "db.c", &c, &e), MS_ERR_LOC_50738);
    CHECK(strstr(e.msg, "which was created in session { id: UUID(\"aaaaaaaa-aaaa-") != NULL);
    CHECK_INT(curs_pin(r, outside, "db.c", &c, &e), MS_ERR_LOC_50736);
    op_set_lsid(NULL);
    CHECK_INT(curs_pin(r, in_a, "db.c", &c, &e), MS_ERR_LOC_50737);
    CHECK(strstr(e.msg, "without an lsid") != NULL);
    CHECK_INT(curs_pin(r, outside, "db.c", &c, &e), 0);
    curs_unpin(r, c, true);
    op_set_lsid(&a);
    CHECK_INT(curs_pin(r, in_a, "db.c", &c, &e), 0);
    curs_unpin(r, c, true);
    op_set_lsid(NULL);
    CHECK_INT(destroyed, 2);
    curs_reg_free(r);
    /* The router's registry: mongos's codes for the same rule. */
    curs_opts_t o = {.conn_max = 5, .total_max = 5, .router_codes = true,
                     .destroy_fn = fake_destroy, .arg = (void *)(intptr_t)7};
    CHECK_INT(curs_reg_new(&o, &r), 0);
    op_set_lsid(&a);
    in_a = add(r, "db.c", 1, 0, &destroyed, &e);
    op_set_lsid(&b);
    CHECK_INT(curs_pin(r, in_a, "db.c", &c, &e), MS_ERR_LOC_50801);
    op_set_lsid(NULL);
    CHECK_INT(curs_pin(r, in_a, "db.c", &c, &e), MS_ERR_LOC_50800);
    op_set_lsid(NULL);
    curs_reg_free(r);
}

/* The per-client cap counts every connection of one client address; another address
 * still opens cursors. The address comes from the request's peer (op_peer). */
static void test_cap_per_client_address(void) {
    curs_opts_t o = {.noun = "cursors", .place = "on this router", .conn_max = 2,
                     .client_max = 3, .total_max = 10, .destroy_fn = fake_destroy,
                     .arg = (void *)(intptr_t)7};
    curs_reg_t *r = NULL;
    atomic_int destroyed = 0;
    ms_error_t e = {0};
    curs_stats_t s;
    CHECK_INT(curs_reg_new(&o, &r), 0);
    op_set_peer("10.0.0.1:40001");
    CHECK(add(r, "db.c", 1, 0, &destroyed, &e) > 0);
    CHECK(add(r, "db.c", 1, 0, &destroyed, &e) > 0);
    op_set_peer("10.0.0.1:40002");   /* the same client on another connection */
    CHECK(add(r, "db.c", 2, 0, &destroyed, &e) > 0);
    CHECK_INT(add(r, "db.c", 3, 0, &destroyed, &e), 0);
    CHECK_INT(e.code, MS_ERR_EXCEEDED_MEMORY_LIMIT);
    CHECK(strstr(e.msg, "from client 10.0.0.1 on this router (limit 3 per client address") != NULL);
    CHECK_INT(curs_admit(r, 4, &e), MS_ERR_EXCEEDED_MEMORY_LIMIT);
    op_set_peer("10.0.0.2:40003");   /* another client */
    CHECK(add(r, "db.c", 4, 0, &destroyed, &e) > 0);
    op_set_peer(NULL);               /* unknown address: no per-client cap */
    CHECK(add(r, "db.c", 5, 0, &destroyed, &e) > 0);
    curs_stats(r, &s);
    CHECK_INT(s.refused_client, 2);
    CHECK_INT(s.refused_conn, 0);
    curs_reg_free(r);
    CHECK_INT(destroyed, 5);
}

T_MAIN(T_CASE(test_getmore_session_rule), T_CASE(test_cap_per_client_address),
       T_CASE(test_caps_per_connection_and_total), T_CASE(test_cap_messages_name_the_place),
       T_CASE(test_bytes_cap_counts_held_and_outside_bytes), T_CASE(test_metrics_without_bytes_cap),
       T_CASE(test_pin_unpin), T_CASE(test_kill_while_pinned), T_CASE(test_kill_ids_reply),
       T_CASE(test_idle_reap),
       T_CASE(test_relayed_id), T_CASE(test_list_ns), T_CASE(test_threads_race))
