/*
 * test_shardd_shardver.c — unit tests of shard versioning and the ownership filter
 * (shardd/shardver.c). The config server is a small in-process command server on
 * ipc:// (common/cmd.h) that answers getRoutingTable from a chunk table the test
 * edits: a real peer over real NNG, serving test data — a fixture, not a stub.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/cmd.h"
#include "common/keys.h"
#include "common/log.h"
#include "shardd/shardver.h"
#include "tests/unit/t.h"

/* ---- the config-server fixture ----------------------------------------------------- */

#define FX_MIN INT64_MIN  /* stands for MinKey in a bound */
#define FX_MAX INT64_MAX  /* stands for MaxKey */

typedef struct fx_chunk {
    int64_t min, max;
    const char *shard;
    uint32_t major, minor;
} fx_chunk_t;

static struct {
    pthread_mutex_t mu;
    bool sharded;
    bool hashed;
    bson_oid_t epoch;
    uint32_t ts;
    int n;
    fx_chunk_t chunks[64];
    int calls;
    int incremental_calls;
    /* config.databases {_id: "db"} */
    bool db_exists;
    const char *db_primary;
    uint8_t db_uuid;          /* every byte of the uuid */
    uint32_t db_ts;
    int32_t db_last_mod;
    int db_calls;
} fx = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void fx_bound(bson_t *dst, const char *key, int64_t v) {
    bson_t d;
    bson_append_document_begin(dst, key, -1, &d);
    if (v == FX_MIN) BSON_APPEND_MINKEY(&d, "x");
    else if (v == FX_MAX) BSON_APPEND_MAXKEY(&d, "x");
    else BSON_APPEND_INT64(&d, "x", v);
    bson_append_document_end(dst, &d);
}

static int fx_get_routing_table(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_iter_t it, since;
    bool incremental = false;
    uint32_t since_m = 0, since_n = 0;
    pthread_mutex_lock(&fx.mu);
    fx.calls++;
    if (!fx.sharded) {
        pthread_mutex_unlock(&fx.mu);
        return err_set(err, MS_ERR_NAMESPACE_NOT_SHARDED, "%s is not sharded",
                       bson_iter_utf8(&ctx->arg, NULL));
    }
    if (cmd_field(ctx, "sinceVersion", &it) && bson_iter_recurse(&it, &since)) {
        bson_iter_t e = since, v = since;
        if (bson_iter_find(&e, "e") && bson_oid_equal(bson_iter_oid(&e), &fx.epoch) &&
            bson_iter_find(&v, "v")) {
            bson_iter_timestamp(&v, &since_m, &since_n);
            incremental = true;
            fx.incremental_calls++;
        }
    }
    BSON_APPEND_UTF8(reply, "ns", bson_iter_utf8(&ctx->arg, NULL));
    bson_t key, cv, arr;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "key", &key);
    if (fx.hashed) BSON_APPEND_UTF8(&key, "x", "hashed");
    else BSON_APPEND_INT32(&key, "x", 1);
    bson_append_document_end(reply, &key);
    BSON_APPEND_BOOL(reply, "unique", false);
    {
        static const uint8_t uuid[16] = {0xab, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        bson_append_binary(reply, "uuid", -1, BSON_SUBTYPE_UUID, uuid, 16);
    }
    BSON_APPEND_OID(reply, "epoch", &fx.epoch);
    BSON_APPEND_TIMESTAMP(reply, "timestamp", fx.ts, 1);
    BSON_APPEND_BOOL(reply, "full", !incremental);
    uint32_t cm = 0, cn = 0;
    for (int i = 0; i < fx.n; i++)
        if (fx.chunks[i].major > cm || (fx.chunks[i].major == cm && fx.chunks[i].minor > cn)) {
            cm = fx.chunks[i].major;
            cn = fx.chunks[i].minor;
        }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "collectionVersion", &cv);
    BSON_APPEND_OID(&cv, "e", &fx.epoch);
    BSON_APPEND_TIMESTAMP(&cv, "t", fx.ts, 1);
    BSON_APPEND_TIMESTAMP(&cv, "v", cm, cn);
    bson_append_document_end(reply, &cv);
    BSON_APPEND_ARRAY_BEGIN(reply, "chunks", &arr);
    int k = 0;
    for (int i = 0; i < fx.n; i++) {
        const fx_chunk_t *c = &fx.chunks[i];
        if (incremental && (c->major < since_m || (c->major == since_m && c->minor < since_n)))
            continue;
        char idx[16];
        bson_t d;
        snprintf(idx, sizeof idx, "%d", k++);
        bson_append_document_begin(&arr, idx, -1, &d);
        fx_bound(&d, "min", c->min);
        fx_bound(&d, "max", c->max);
        BSON_APPEND_UTF8(&d, "shard", c->shard);
        BSON_APPEND_TIMESTAMP(&d, "lastmod", c->major, c->minor);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(reply, &arr);
    pthread_mutex_unlock(&fx.mu);
    return 0;
}

/* find on config.databases, as the config server answers it (one document or none). */
static int fx_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_t cur, arr, d, v;
    uint8_t uuid[16];
    (void)err;
    pthread_mutex_lock(&fx.mu);
    fx.db_calls++;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", "config.databases");
    BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &arr);
    if (fx.db_exists && strcmp(bson_iter_utf8(&ctx->arg, NULL), "databases") == 0) {
        memset(uuid, fx.db_uuid, sizeof uuid);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &d);
        BSON_APPEND_UTF8(&d, "_id", "db");
        BSON_APPEND_UTF8(&d, "primary", fx.db_primary);
        BSON_APPEND_DOCUMENT_BEGIN(&d, "version", &v);
        bson_append_binary(&v, "uuid", -1, BSON_SUBTYPE_UUID, uuid, 16);
        BSON_APPEND_TIMESTAMP(&v, "timestamp", fx.db_ts, 1);
        BSON_APPEND_INT32(&v, "lastMod", fx.db_last_mod);
        bson_append_document_end(&d, &v);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(&cur, &arr);
    bson_append_document_end(reply, &cur);
    pthread_mutex_unlock(&fx.mu);
    return 0;
}

static const cmd_spec_t fx_table[] = {
    {.name = "find",
     .handler = fx_find,
     .arg_types = CT_STR,
     .fields = {{"filter", CT_DOC, false}, {NULL, 0, false}},
     .help = "test fixture: config.databases"},
    {.name = "getRoutingTable",
     .handler = fx_get_routing_table,
     .arg_types = CT_STR,
     .fields = {{"sinceVersion", CT_DOC, false}, {NULL, 0, false}},
     .help = "test fixture"},
};

static cmd_server_t *fx_srv;
static int fx_seq;
static char fx_url[64];

static void fx_set(const fx_chunk_t *chunks, int n) {
    pthread_mutex_lock(&fx.mu);
    memcpy(fx.chunks, chunks, (size_t)n * sizeof *chunks);
    fx.n = n;
    pthread_mutex_unlock(&fx.mu);
}

static void fx_start(void) {
    cmd_server_opts_t o = {0};
    ms_error_t err = {0};
    snprintf(fx_url, sizeof fx_url, "ipc:///tmp/ms-t-%d-shv-config-%d.sock", (int)getpid(), ++fx_seq);
    o.process = "configsvr-fixture";
    o.url = fx_url;
    o.workers = 4;
    o.table = fx_table;
    o.table_len = (int)(sizeof fx_table / sizeof fx_table[0]);
    int rc = cmd_server_start(&o, &fx_srv, &err);
    CHECK_MSG(rc == 0, "fixture start: %s", err.msg);
    pthread_mutex_lock(&fx.mu);
    fx.sharded = true;
    fx.hashed = false;
    bson_oid_init(&fx.epoch, NULL);
    fx.ts = 100;
    fx.calls = fx.incremental_calls = 0;
    fx.db_exists = false;
    fx.db_calls = 0;
    pthread_mutex_unlock(&fx.mu);
}

static void fx_stop(void) {
    cmd_server_stop(fx_srv);
    fx_srv = NULL;
}

/* ---- helpers -------------------------------------------------------------------------- */

static void make_req(bson_t *req, bool unsharded, const bson_oid_t *epoch, uint32_t ts,
                     uint32_t major, uint32_t minor) {
    bson_t v;
    bson_oid_t zero;
    memset(&zero, 0, sizeof zero);
    bson_init(req);
    BSON_APPEND_UTF8(req, "find", "c");
    BSON_APPEND_UTF8(req, "$db", "db");
    BSON_APPEND_DOCUMENT_BEGIN(req, "shardVersion", &v);
    BSON_APPEND_OID(&v, "e", unsharded ? &zero : epoch);
    BSON_APPEND_TIMESTAMP(&v, "t", unsharded ? 0 : ts, unsharded ? 0 : 1);
    BSON_APPEND_TIMESTAMP(&v, "v", unsharded ? 0 : major, unsharded ? 0 : minor);
    bson_append_document_end(req, &v);
}

/* Checks a request with version (major, minor) of the fixture's current generation. */
static int check_v(shv_t *s, uint32_t major, uint32_t minor, shv_filter_t **f, bson_t *info) {
    bson_t req;
    ms_error_t err = {0};
    make_req(&req, false, &fx.epoch, fx.ts, major, minor);
    int rc = shv_check(s, "db.c", &req, f, info, &err);
    bson_destroy(&req);
    return rc;
}

static bool owns(const shv_filter_t *f, int64_t x) {
    buf_t b = {0};
    bson_t doc = BSON_INITIALIZER;
    ms_error_t err = {0};
    BSON_APPEND_INT64(&doc, "x", x);
    int rc = keys_extract(shv_filter_pattern(f), &doc, NULL, &b, &err);
    bool r = rc == 0 && shv_filter_owns(f, b.data, b.len);
    bson_destroy(&doc);
    buf_free(&b);
    return r;
}

static shv_t *open_shv(const char *me) {
    shv_t *s = NULL;
    ms_error_t err = {0};
    CHECK(shv_open(&s, &err) == 0);
    shv_set_identity(s, me, fx_url);
    return s;
}

static const fx_chunk_t three[] = {
    {FX_MIN, 0, "s0", 1, 0},
    {0, 100, "s1", 1, 1},
    {100, FX_MAX, "s0", 1, 2},
};

/* ---- tests ------------------------------------------------------------------------------ */

static void test_unversioned_request_has_no_filter(void) {
    shv_t *s = NULL;
    shv_filter_t *f = (shv_filter_t *)1;
    ms_error_t err = {0};
    bson_t req = BSON_INITIALIZER, info = BSON_INITIALIZER;
    CHECK(shv_open(&s, &err) == 0);
    BSON_APPEND_UTF8(&req, "find", "c");
    CHECK_INT(shv_check(s, "db.c", &req, &f, &info, &err), 0);
    CHECK(f == NULL);
    {
        char name[128] = "x", url[MS_URL_BYTES_MAX] = "x";
        shv_identity(s, name, sizeof name, url, sizeof url);
        CHECK_STR(name, "");
        CHECK_STR(url, "");
        shv_set_identity(s, "shardA", "tcp://127.0.0.1:1");
        shv_identity(s, name, sizeof name, NULL, 0);
        CHECK_STR(name, "shardA");
        shv_set_identity(s, "", "");
    }
    /* Versioned before the shard knows its identity: refused, not crashed. */
    bson_destroy(&req);
    make_req(&req, false, &fx.epoch, 1, 1, 0);
    CHECK_INT(shv_check(s, "db.c", &req, &f, &info, &err), MS_ERR_ILLEGAL_OPERATION);
    bson_destroy(&req);
    bson_destroy(&info);
    shv_close(s);
    shv_close(NULL);
}

static void test_match_filter_and_minor_drift(void) {
    fx_start();
    fx_set(three, 3);
    shv_t *s = open_shv("s0");
    shv_filter_t *f = NULL;
    bson_t info = BSON_INITIALIZER;
    CHECK_INT(check_v(s, 1, 2, &f, &info), 0);
    CHECK(f != NULL);
    if (f) {
        CHECK(owns(f, -5));
        CHECK(owns(f, INT64_MIN + 1));
        CHECK(!owns(f, 0));
        CHECK(!owns(f, 99));
        CHECK(owns(f, 100));
        CHECK(owns(f, 1000000));
    }
    shv_filter_release(f);
    f = NULL;
    /* Same major, other minor: write-compatible, no refresh. */
    CHECK_INT(check_v(s, 1, 0, &f, &info), 0);
    CHECK(f != NULL);
    shv_filter_release(f);
    CHECK_INT(fx.calls, 1);
    bson_destroy(&info);
    shv_close(s);
    fx_stop();
}

static void test_migration_refreshes_incrementally_and_stale_router_gets_stale_config(void) {
    fx_start();
    fx_set(three, 3);
    shv_t *s = open_shv("s0");
    shv_filter_t *f = NULL, *old = NULL;
    bson_t info = BSON_INITIALIZER;
    CHECK_INT(check_v(s, 1, 2, &old, &info), 0);
    /* [0, 100) migrates s1 → s0: moved chunk (2,0), the donor's control chunk... here the
     * donor has nothing left, so only the moved chunk changes. */
    const fx_chunk_t moved[] = {
        {FX_MIN, 0, "s0", 1, 0},
        {0, 100, "s0", 2, 0},
        {100, FX_MAX, "s0", 1, 2},
    };
    fx_set(moved, 3);
    /* A router that knows the new version: the shard refreshes before deciding. */
    CHECK_INT(check_v(s, 2, 0, &f, &info), 0);
    CHECK(f != NULL);
    if (f) CHECK(owns(f, 50));
    CHECK_INT(fx.calls, 2);
    CHECK_INT(fx.incremental_calls, 1);
    /* The snapshot taken before stays as it was (a cursor keeps its view). */
    if (old) CHECK(!owns(old, 50));
    shv_filter_release(f);
    shv_filter_release(old);
    f = NULL;
    /* A stale router sends (1, 2): StaleConfig with MongoDB's fields. */
    CHECK_INT(check_v(s, 1, 2, &f, &info), MS_ERR_STALE_CONFIG);
    CHECK(f == NULL);
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, &info, "ns") && strcmp(bson_iter_utf8(&it, NULL), "db.c") == 0);
    CHECK(bson_iter_init_find(&it, &info, "shardId") &&
          strcmp(bson_iter_utf8(&it, NULL), "s0") == 0);
    uint32_t m = 0, n = 0;
    CHECK(bson_iter_init(&it, &info) && bson_iter_find_descendant(&it, "vWanted.v", &it));
    bson_iter_timestamp(&it, &m, &n);
    CHECK_INT(m, 2);
    CHECK_INT(n, 0);
    CHECK(bson_iter_init(&it, &info) && bson_iter_find_descendant(&it, "vReceived.v", &it));
    bson_iter_timestamp(&it, &m, &n);
    CHECK_INT(m, 1);
    CHECK_INT(n, 2);
    /* Older request: no extra refresh. */
    CHECK_INT(fx.calls, 2);
    bson_destroy(&info);
    shv_close(s);
    fx_stop();
}

static void test_split_merge_incremental_tiles(void) {
    fx_start();
    fx_set(three, 3);
    shv_t *s = open_shv("s1");
    shv_filter_t *f = NULL;
    bson_t info = BSON_INITIALIZER;
    CHECK_INT(check_v(s, 1, 1, &f, &info), 0);
    shv_filter_release(f);
    f = NULL;
    /* Split [0,100) at 50 (minors), then move [50,100) to s0 at (2,0), control (2,1). */
    const fx_chunk_t next[] = {
        {FX_MIN, 0, "s0", 1, 0},
        {0, 50, "s1", 2, 1},
        {50, 100, "s0", 2, 0},
        {100, FX_MAX, "s0", 1, 2},
    };
    fx_set(next, 4);
    CHECK_INT(check_v(s, 2, 1, &f, &info), 0);
    if (f) {
        CHECK(owns(f, 0));
        CHECK(owns(f, 49));
        CHECK(!owns(f, 50));
        CHECK(!owns(f, -1));
    }
    shv_filter_release(f);
    f = NULL;
    /* s1 loses every chunk: wanted (0,0). */
    const fx_chunk_t gone[] = {
        {FX_MIN, 0, "s0", 1, 0},
        {0, 50, "s0", 3, 0},
        {50, 100, "s0", 2, 0},
        {100, FX_MAX, "s0", 1, 2},
    };
    fx_set(gone, 4);
    CHECK_INT(check_v(s, 3, 0, &f, &info), MS_ERR_STALE_CONFIG);
    bson_iter_t it;
    uint32_t m = 9, n = 9;
    CHECK(bson_iter_init(&it, &info) && bson_iter_find_descendant(&it, "vWanted.v", &it));
    bson_iter_timestamp(&it, &m, &n);
    CHECK_INT(m, 0);
    CHECK_INT(n, 0);
    bson_destroy(&info);
    shv_close(s);
    fx_stop();
}

static void test_new_generation(void) {
    fx_start();
    fx_set(three, 3);
    shv_t *s = open_shv("s0");
    shv_filter_t *f = NULL;
    bson_t info = BSON_INITIALIZER;
    bson_oid_t old_epoch = fx.epoch;
    uint32_t old_ts = fx.ts;
    CHECK_INT(check_v(s, 1, 2, &f, &info), 0);
    shv_filter_release(f);
    f = NULL;
    /* drop + shardCollection again: new epoch, later timestamp, one chunk on s0. */
    const fx_chunk_t one[] = {{FX_MIN, FX_MAX, "s0", 1, 0}};
    pthread_mutex_lock(&fx.mu);
    bson_oid_init(&fx.epoch, NULL);
    fx.ts = 200;
    pthread_mutex_unlock(&fx.mu);
    fx_set(one, 1);
    CHECK_INT(check_v(s, 1, 0, &f, &info), 0);
    if (f) CHECK(owns(f, 50));
    shv_filter_release(f);
    f = NULL;
    /* The old generation is stale now, whatever its major. */
    bson_t req;
    ms_error_t err = {0};
    make_req(&req, false, &old_epoch, old_ts, 1, 0);
    CHECK_INT(shv_check(s, "db.c", &req, &f, &info, &err), MS_ERR_STALE_CONFIG);
    CHECK(strstr(err.msg, "db.c") != NULL);
    bson_destroy(&req);
    bson_destroy(&info);
    shv_close(s);
    fx_stop();
}

static void test_unsharded(void) {
    fx_start();
    pthread_mutex_lock(&fx.mu);
    fx.sharded = false;
    pthread_mutex_unlock(&fx.mu);
    shv_t *s = open_shv("s0");
    shv_filter_t *f = NULL;
    bson_t req, info = BSON_INITIALIZER;
    ms_error_t err = {0};
    make_req(&req, true, NULL, 0, 0, 0);
    CHECK_INT(shv_check(s, "db.c", &req, &f, &info, &err), 0);
    CHECK(f == NULL);
    CHECK_INT(shv_check(s, "db.c", &req, &f, &info, &err), 0);
    CHECK_INT(fx.calls, 1);  /* the unsharded answer is cached */
    /* A router that thinks it is sharded: refresh, then StaleConfig wanting UNSHARDED. */
    CHECK_INT(check_v(s, 1, 0, &f, &info), MS_ERR_STALE_CONFIG);
    CHECK_INT(fx.calls, 2);
    /* Becomes sharded; after invalidation UNSHARDED requests are stale. */
    fx_set(three, 3);
    pthread_mutex_lock(&fx.mu);
    fx.sharded = true;
    pthread_mutex_unlock(&fx.mu);
    shv_invalidate(s, "db.c");
    bson_reinit(&info);
    CHECK_INT(shv_check(s, "db.c", &req, &f, &info, &err), MS_ERR_STALE_CONFIG);
    CHECK_INT(fx.calls, 3);
    bson_t st = BSON_INITIALIZER;
    shv_append_status(s, &st);
    bson_iter_t it, sub;
    CHECK(bson_iter_init_find(&it, &st, "db.c") && bson_iter_recurse(&it, &sub) &&
          bson_iter_find(&sub, "chunksOwned") && bson_iter_int32(&sub) == 2);
    bson_destroy(&st);
    bson_destroy(&req);
    bson_destroy(&info);
    shv_close(s);
    fx_stop();
}

/* An unsharded collection's request: UNSHARDED shardVersion + databaseVersion. */
static int check_db(shv_t *s, uint8_t uuid_byte, uint32_t ts, int32_t last_mod, bson_t *info) {
    bson_t req, v;
    uint8_t uuid[16];
    ms_error_t err = {0};
    shv_filter_t *f = NULL;
    memset(uuid, uuid_byte, sizeof uuid);
    make_req(&req, true, NULL, 0, 0, 0);
    BSON_APPEND_DOCUMENT_BEGIN(&req, "databaseVersion", &v);
    bson_append_binary(&v, "uuid", -1, BSON_SUBTYPE_UUID, uuid, 16);
    BSON_APPEND_TIMESTAMP(&v, "timestamp", ts, 1);
    BSON_APPEND_INT32(&v, "lastMod", last_mod);
    bson_append_document_end(&req, &v);
    bson_reinit(info);
    int rc = shv_check(s, "db.c", &req, &f, info, &err);
    CHECK(f == NULL);
    bson_destroy(&req);
    return rc;
}

static void fx_db(bool exists, const char *primary, uint8_t uuid_byte, uint32_t ts, int32_t lm) {
    pthread_mutex_lock(&fx.mu);
    fx.db_exists = exists;
    fx.db_primary = primary;
    fx.db_uuid = uuid_byte;
    fx.db_ts = ts;
    fx.db_last_mod = lm;
    pthread_mutex_unlock(&fx.mu);
}

static void test_database_versions(void) {
    fx_start();
    pthread_mutex_lock(&fx.mu);
    fx.sharded = false;
    pthread_mutex_unlock(&fx.mu);
    fx_db(true, "s0", 0xA1, 50, 1);
    shv_t *s = open_shv("s0");
    bson_t info = BSON_INITIALIZER;
    bson_iter_t it;
    /* unknown → refresh → equal and primary → ok; then cached */
    CHECK_INT(check_db(s, 0xA1, 50, 1, &info), 0);
    CHECK_INT(check_db(s, 0xA1, 50, 1, &info), 0);
    CHECK_INT(fx.db_calls, 1);
    /* an older incarnation (lower timestamp, other uuid): stale, no refresh needed */
    CHECK_INT(check_db(s, 0x99, 40, 1, &info), MS_ERR_STALE_DB_VERSION);
    CHECK_INT(fx.db_calls, 1);
    CHECK(bson_iter_init_find(&it, &info, "db") && !strcmp(bson_iter_utf8(&it, NULL), "db"));
    CHECK(bson_iter_init_find(&it, &info, "vReceived"));
    CHECK(bson_iter_init_find(&it, &info, "vWanted"));
    /* a collection's drop (or rename, shardCollection) keeps the database entry: no
     * refresh, so no dependence on the config server for the other collections' writes */
    shv_invalidate(s, "db.c");
    CHECK_INT(check_db(s, 0xA1, 50, 1, &info), 0);
    CHECK_INT(fx.db_calls, 1);
    /* dropped and re-created elsewhere; the shard's dropDatabase forgets the entry */
    fx_db(true, "s1", 0xB2, 60, 1);
    shv_invalidate(s, "db");
    CHECK_INT(check_db(s, 0xA1, 50, 1, &info), MS_ERR_STALE_DB_VERSION);
    CHECK_INT(fx.db_calls, 2);
    /* the new version, but s0 is not its primary */
    CHECK_INT(check_db(s, 0xB2, 60, 1, &info), MS_ERR_STALE_DB_VERSION);
    CHECK(bson_iter_init_find(&it, &info, "shardId") && !strcmp(bson_iter_utf8(&it, NULL), "s0"));
    /* without an invalidation: a newer version in a request makes the shard refresh */
    fx_db(true, "s0", 0xC3, 70, 1);
    CHECK_INT(check_db(s, 0xC3, 70, 1, &info), 0);
    CHECK_INT(fx.db_calls, 3);
    /* same incarnation, higher lastMod (movePrimary): refresh too */
    fx_db(true, "s0", 0xC3, 70, 2);
    CHECK_INT(check_db(s, 0xC3, 70, 2, &info), 0);
    CHECK_INT(fx.db_calls, 4);
    CHECK_INT(check_db(s, 0xC3, 70, 1, &info), MS_ERR_STALE_DB_VERSION);
    /* the database is gone: stale, without vWanted */
    fx_db(false, NULL, 0, 0, 0);
    shv_invalidate(s, "db");
    CHECK_INT(check_db(s, 0xC3, 70, 2, &info), MS_ERR_STALE_DB_VERSION);
    CHECK(!bson_iter_init_find(&it, &info, "vWanted"));
    bson_destroy(&info);
    shv_close(s);
    fx_stop();
}

static void test_config_server_down(void) {
    shv_t *s = NULL;
    ms_error_t err = {0};
    CHECK(shv_open(&s, &err) == 0);
    shv_set_identity(s, "s0", "inproc://nobody-listens-here");
    shv_filter_t *f = NULL;
    bson_t req, info = BSON_INITIALIZER;
    bson_oid_t e;
    bson_oid_init(&e, NULL);
    make_req(&req, false, &e, 1, 1, 0);
    int rc = shv_check(s, "db.c", &req, &f, &info, &err);
    CHECK(rc != 0);
    CHECK(rc != MS_ERR_STALE_CONFIG);
    CHECK(f == NULL);
    bson_destroy(&req);
    bson_destroy(&info);
    shv_close(s);
}

static void test_hashed_bounds(void) {
    fx_start();
    pthread_mutex_lock(&fx.mu);
    fx.hashed = true;
    pthread_mutex_unlock(&fx.mu);
    const fx_chunk_t h[] = {
        {FX_MIN, 0, "s0", 1, 0},
        {0, FX_MAX, "s1", 1, 1},
    };
    fx_set(h, 2);
    shv_t *s = open_shv("s0");
    shv_filter_t *f = NULL;
    bson_t info = BSON_INITIALIZER;
    CHECK_INT(check_v(s, 1, 0, &f, &info), 0);
    if (f) {
        /* {x: 42} hashes to -944302157085130861 (negative: s0's chunk). */
        bson_t doc = BSON_INITIALIZER;
        buf_t b = {0};
        ms_error_t err = {0};
        BSON_APPEND_INT32(&doc, "x", 42);
        CHECK(keys_extract(shv_filter_pattern(f), &doc, NULL, &b, &err) == 0);
        CHECK(shv_filter_owns(f, b.data, b.len));
        buf_free(&b);
        bson_destroy(&doc);
    }
    shv_filter_release(f);
    bson_destroy(&info);
    shv_close(s);
    fx_stop();
}

/* Many workers at once while the metadata moves and gets invalidated: every answer is
 * either a match or StaleConfig, and refreshes are single-flight per namespace. */
typedef struct worker_arg {
    shv_t *s;
    int ok, stale, other;
} worker_arg_t;

static void *worker(void *p) {
    worker_arg_t *w = p;
    for (int i = 0; i < 300; i++) {
        shv_filter_t *f = NULL;
        bson_t info = BSON_INITIALIZER;
        /* (1,0) and (1,1) match; (0,0) is older than the shard: StaleConfig, no refresh. */
        int rc = check_v(w->s, i % 3 == 2 ? 0 : 1, (uint32_t)(i % 2), &f, &info);
        if (rc == 0) {
            w->ok++;
            (void)owns(f, i);
        } else if (rc == MS_ERR_STALE_CONFIG) {
            w->stale++;
        } else {
            w->other++;
        }
        shv_filter_release(f);
        bson_destroy(&info);
        if (i % 50 == 0) shv_invalidate(w->s, "db.c");
    }
    return NULL;
}

static void test_concurrent_checks(void) {
    fx_start();
    const fx_chunk_t two[] = {
        {FX_MIN, 0, "s0", 1, 0},
        {0, FX_MAX, "s1", 1, 1},
    };
    fx_set(two, 2);
    shv_t *s = open_shv("s0");
    pthread_t th[8];
    worker_arg_t args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (worker_arg_t){.s = s};
        pthread_create(&th[i], NULL, worker, &args[i]);
    }
    int ok = 0, stale = 0, other = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        ok += args[i].ok;
        stale += args[i].stale;
        other += args[i].other;
    }
    CHECK_INT(other, 0);
    CHECK(ok > 0);
    CHECK(stale > 0);
    /* Single-flight: at most one refresh per invalidation (8 threads × 6) plus the first
     * of each thread, however many requests waited. */
    CHECK_MSG(fx.calls <= 8 * 6 + 8, "refreshes=%d", fx.calls);
    shv_close(s);
    fx_stop();
}

/* ---- live snapshots (the range deleter waits for them) and owned chunks -------------- */

static buf_t enc_x(int64_t x) {
    buf_t b = {0};
    bson_t doc = BSON_INITIALIZER, spec = BSON_INITIALIZER;
    keys_pattern_t p;
    ms_error_t err = {0};
    BSON_APPEND_INT32(&spec, "x", 1);
    CHECK_INT(keys_pattern_parse(&spec, &p, &err), 0);
    BSON_APPEND_INT64(&doc, "x", x);
    CHECK_INT(keys_extract(&p, &doc, NULL, &b, &err), 0);
    keys_pattern_free(&p);
    bson_destroy(&doc);
    bson_destroy(&spec);
    return b;
}

/* shv_wait_snapshots over [lo, hi) with a deadline ms from now (0 = check once). */
static int wait_range(shv_t *s, int64_t lo, int64_t hi, long long ms) {
    buf_t a = enc_x(lo), b = enc_x(hi);
    ms_error_t err = {0};
    int rc = shv_wait_snapshots(s, "db.c", &a, &b, ms ? time_mono_ms() + ms : 0, &err);
    buf_free(&a);
    buf_free(&b);
    return rc;
}

typedef struct later {
    shv_filter_t *f;
    long ms;
} later_t;

static void *release_later(void *p) {
    later_t *l = p;
    t_sleep_ms(l->ms);
    shv_filter_release(l->f);
    return NULL;
}

static void test_live_snapshots_block_the_range_they_own(void) {
    fx_start();
    fx_set(three, 3);
    shv_t *s = open_shv("s0");
    shv_filter_t *f1 = NULL, *f2 = NULL;
    bson_t info = BSON_INITIALIZER;
    CHECK_INT(wait_range(s, -10, -5, 0), 0);   /* nothing live yet */
    CHECK_INT(check_v(s, 1, 2, &f1, &info), 0);
    CHECK_INT(shv_live_snapshots(s, "db.c"), 1);
    /* f1 owns [MinKey, 0) and [100, MaxKey): those ranges wait, [0, 100) does not. */
    CHECK_INT(wait_range(s, -10, -5, 0), MS_ERR_EXCEEDED_TIME_LIMIT);
    CHECK_INT(wait_range(s, 90, 110, 0), MS_ERR_EXCEEDED_TIME_LIMIT);
    CHECK_INT(wait_range(s, 0, 100, 0), 0);
    CHECK_INT(wait_range(s, -10, -5, 30), MS_ERR_EXCEEDED_TIME_LIMIT);   /* bounded */
    /* A cursor's extra reference keeps it live after the request's release. */
    shv_filter_ref(f1);
    CHECK_INT(shv_live_snapshots(s, "db.c"), 2);
    shv_filter_release(f1);
    CHECK_INT(wait_range(s, -10, -5, 0), MS_ERR_EXCEEDED_TIME_LIMIT);
    /* The wait ends when the last holder releases. */
    later_t l = {f1, 100};
    pthread_t th;
    CHECK_INT(pthread_create(&th, NULL, release_later, &l), 0);
    CHECK_INT(wait_range(s, -10, -5, 20000), 0);
    pthread_join(th, NULL);
    CHECK_INT(shv_live_snapshots(s, "db.c"), 0);

    /* [100, MaxKey) migrates to s1: a snapshot taken before still owns it and blocks;
     * one taken after does not. */
    CHECK_INT(check_v(s, 1, 2, &f1, &info), 0);
    const fx_chunk_t moved[] = {
        {FX_MIN, 0, "s0", 2, 1},
        {0, 100, "s1", 1, 1},
        {100, FX_MAX, "s1", 2, 0},
    };
    fx_set(moved, 3);
    CHECK_INT(check_v(s, 2, 1, &f2, &info), 0);
    CHECK_INT(shv_live_snapshots(s, "db.c"), 2);
    CHECK_INT(wait_range(s, 150, 160, 0), MS_ERR_EXCEEDED_TIME_LIMIT);
    shv_filter_release(f1);
    CHECK_INT(wait_range(s, 150, 160, 0), 0);
    CHECK_INT(wait_range(s, -10, -5, 0), MS_ERR_EXCEEDED_TIME_LIMIT);   /* f2 owns it */

    /* The owned chunk containing a key, with versions, pattern and UUID. */
    buf_t k = enc_x(-5);
    bson_t mn, mx, cv, sv;
    keys_pattern_t pat;
    uint8_t uuid[16] = {0};
    ms_error_t err = {0};
    bson_iter_t it;
    uint32_t m = 0, n = 0;
    CHECK_INT(shv_owned_chunk(s, "db.c", &k, &mn, &mx, &cv, &sv, &pat, uuid, &err), 0);
    if (err.code == 0) {
        CHECK(bson_iter_init_find(&it, &mn, "x") && BSON_ITER_HOLDS_MINKEY(&it));
        CHECK(bson_iter_init_find(&it, &mx, "x") && bson_iter_as_int64(&it) == 0);
        CHECK(bson_iter_init_find(&it, &cv, "v"));
        bson_iter_timestamp(&it, &m, &n);
        CHECK(m == 2 && n == 1);
        CHECK(bson_iter_init_find(&it, &sv, "e") && bson_oid_equal(bson_iter_oid(&it), &fx.epoch));
        CHECK_INT(pat.nfields, 1);
        CHECK_INT(uuid[0], 0xab);
        bson_destroy(&mn);
        bson_destroy(&mx);
        bson_destroy(&cv);
        bson_destroy(&sv);
        keys_pattern_free(&pat);
    }
    buf_free(&k);
    k = enc_x(150);
    CHECK_INT(shv_owned_chunk(s, "db.c", &k, NULL, NULL, NULL, NULL, NULL, NULL, &err),
              MS_ERR_STALE_CONFIG);
    buf_free(&k);
    fx.sharded = false;
    k = enc_x(1);
    CHECK_INT(shv_owned_chunk(s, "db.u", &k, NULL, NULL, NULL, NULL, NULL, NULL, &err),
              MS_ERR_NAMESPACE_NOT_SHARDED);
    buf_free(&k);
    /* A holder may outlive the shv (shutdown order): it keeps its memory. */
    shv_close(s);
    shv_filter_release(f2);
    bson_destroy(&info);
    fx_stop();
}

T_MAIN(T_CASE(test_live_snapshots_block_the_range_they_own),
       T_CASE(test_unversioned_request_has_no_filter), T_CASE(test_match_filter_and_minor_drift),
       T_CASE(test_migration_refreshes_incrementally_and_stale_router_gets_stale_config),
       T_CASE(test_split_merge_incremental_tiles), T_CASE(test_new_generation),
       T_CASE(test_unsharded), T_CASE(test_database_versions), T_CASE(test_config_server_down), T_CASE(test_hashed_bounds),
       T_CASE(test_concurrent_checks))
