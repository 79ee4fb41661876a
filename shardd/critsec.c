/*
 * critsec.c — the migration critical section of a collection on the shard daemon
 * (bin/shardd): MongoDB's ShardingMigrationCriticalSection (notes §1.3, "enter the
 * critical section"). While a donor commits a migration, writes to the collection must
 * stop so that nothing lands on the donor after the recipient's last catch-up: entering
 * sets a flag, then takes and releases the store's writer lock once. Every versioned
 * write re-checks the flag inside its write transaction (under that lock), so a write that
 * passed the version check before the flag was set either committed before the enter
 * returned or sees the flag and rolls back. A refused write waits, outside every lock, for
 * the section to be left (bounded), then answers StaleConfig so the router refreshes and
 * retries — on the recipient once the commit went through. During the config commit
 * itself (blockReads) versioned reads wait too.
 *
 * The same file keeps movePrimary's critical section of a whole database (MongoDB's
 * MovePrimaryCoordinator "enterCriticalSection"): writes that carry databaseVersion to the
 * database's unsharded collections are refused the same way and answer StaleDbVersion;
 * it is persisted so a restart keeps it (see the section's own comment below).
 *
 * The state is kept here rather than in shv_t: a short list of (shard, namespace or
 * database) entries under one mutex, with one condition variable every leave broadcasts on.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "common/opctx.h"
#include "shardd/shardd.h"

typedef struct crit {
    const shv_t *s;
    bool db;                  /* movePrimary's section of a database (ns = its name) */
    char ns[MS_NS_BYTES_MAX + 1];
    bool reads;               /* blockReads: versioned reads wait as well */
    char owner[48];           /* who entered it (a migration id; "" for the test
                               * command): only the same owner leaves it */
    long long since_ms;       /* when it was entered (for the leave log line) */
    struct crit *next;
} crit_t;

static pthread_mutex_t crit_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t crit_cv;
static pthread_once_t crit_once = PTHREAD_ONCE_INIT;
static crit_t *crits;

static void crit_init(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&crit_cv, &a);
    pthread_condattr_destroy(&a);
}

static long long mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Under crit_mu. */
static crit_t *crit_find_kind(const shv_t *s, const char *ns, bool db) {
    for (crit_t *c = crits; c; c = c->next)
        if (c->s == s && c->db == db && strcmp(c->ns, ns) == 0) return c;
    return NULL;
}

static crit_t *crit_find(const shv_t *s, const char *ns) {
    return crit_find_kind(s, ns, false);
}

/* serverStatus.sharding.criticalSections: every section this shard holds now (a
 * migration's of a collection, movePrimary's of a database), so a test or an operator can
 * see one left held (the chaos soak's final check: none once the cluster is quiet). */
void shv_crit_append_status(shv_t *s, bson_t *reply) {
    bson_t arr, d;
    char key[16];
    uint32_t i = 0;
    long long now = mono_ms();
    pthread_mutex_lock(&crit_mu);
    BSON_APPEND_ARRAY_BEGIN(reply, "criticalSections", &arr);
    for (crit_t *c = crits; c; c = c->next) {
        if (c->s != s) continue;
        snprintf(key, sizeof key, "%u", i++);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &d);
        BSON_APPEND_UTF8(&d, c->db ? "db" : "ns", c->ns);
        BSON_APPEND_BOOL(&d, "blockReads", c->reads);
        BSON_APPEND_UTF8(&d, "owner", c->owner);
        BSON_APPEND_INT64(&d, "heldMs", now - c->since_ms);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(reply, &arr);
    pthread_mutex_unlock(&crit_mu);
}

static int fence_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    (void)t, (void)arg, (void)err;
    return 0;
}

int shv_crit_enter_as(shv_t *s, store_t *st, const char *ns, const char *owner, ms_error_t *err) {
    crit_t *c;
    bool added = false;
    int rc;
    if (strlen(ns) > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace too long");
    if (strlen(owner) >= sizeof c->owner)
        return err_set(err, MS_ERR_BAD_VALUE, "critical section owner name too long");
    pthread_once(&crit_once, crit_init);
    pthread_mutex_lock(&crit_mu);
    if ((c = crit_find(s, ns)) != NULL && strcmp(c->owner, owner) != 0) {
        char other[sizeof c->owner];
        memcpy(other, c->owner, sizeof other);
        pthread_mutex_unlock(&crit_mu);
        return err_set(err, MS_ERR_CONFLICTING_OPERATION,
                       "the critical section of %s is held by %s", ns,
                       other[0] ? other : "a test command");
    }
    if (!c) {
        c = calloc(1, sizeof *c);
        ASSERT(c != NULL);
        c->s = s;
        strcpy(c->ns, ns);
        strcpy(c->owner, owner);
        c->since_ms = mono_ms();
        c->next = crits;
        crits = c;
        added = true;
    }
    pthread_mutex_unlock(&crit_mu);
    /* The fence: a write that passed its version check before the flag was set and is
     * still running holds (or waits for) the writer lock; once we have had the lock, every
     * such write has committed or will see the flag under the lock and roll back. */
    if ((rc = store_write(st, fence_fn, NULL, err)) != 0) {
        err_prefix(err, "entering the critical section of %s", ns);
        if (added) shv_crit_leave_as(s, ns, owner);
        return rc;
    }
    log_info("critical section entered ns=%s owner=%s", ns, owner[0] ? owner : "test");
    return 0;
}

int shv_crit_enter(shv_t *s, store_t *st, const char *ns, ms_error_t *err) {
    return shv_crit_enter_as(s, st, ns, "", err);
}

void shv_crit_block_reads(shv_t *s, const char *ns) {
    pthread_mutex_lock(&crit_mu);
    crit_t *c = crit_find(s, ns);
    if (c) c->reads = true;
    pthread_mutex_unlock(&crit_mu);
    if (c) log_info("critical section blocks reads ns=%s", ns);
}

/* Removes the section of a collection (db false) or of a database (db true) when owner
 * (NULL: anyone) holds it; its age in ms, -1 when it was not held, -2 when another owner
 * holds it (left in place). Wakes every waiter either way. */
static long long crit_remove_as(shv_t *s, const char *name, bool db, const char *owner) {
    long long held_ms = -1;
    pthread_once(&crit_once, crit_init);
    pthread_mutex_lock(&crit_mu);
    for (crit_t **pp = &crits; *pp; pp = &(*pp)->next)
        if ((*pp)->s == s && (*pp)->db == db && strcmp((*pp)->ns, name) == 0) {
            crit_t *c = *pp;
            if (owner && strcmp(c->owner, owner) != 0) {
                held_ms = -2;
                break;
            }
            *pp = c->next;
            held_ms = mono_ms() - c->since_ms;
            free(c);
            break;
        }
    pthread_cond_broadcast(&crit_cv);
    pthread_mutex_unlock(&crit_mu);
    return held_ms;
}

static long long crit_remove(shv_t *s, const char *name, bool db) {
    return crit_remove_as(s, name, db, NULL);
}

void shv_crit_leave_as(shv_t *s, const char *ns, const char *owner) {
    long long held_ms = crit_remove_as(s, ns, false, owner);
    if (held_ms >= 0)
        log_info("critical section left ns=%s owner=%s ms=%lld", ns, owner[0] ? owner : "test",
                 held_ms);
    else if (held_ms == -2)
        log_warn("critical section not left: held by another owner ns=%s owner=%s", ns,
                 owner[0] ? owner : "test");
}

void shv_crit_leave(shv_t *s, const char *ns) {
    shv_crit_leave_as(s, ns, "");
}

bool shv_crit_held(shv_t *s, const char *ns) {
    pthread_mutex_lock(&crit_mu);
    bool held = crit_find(s, ns) != NULL;
    pthread_mutex_unlock(&crit_mu);
    return held;
}

static bool crit_wait_kind(shv_t *s, const char *ns, bool db, bool reads, long long wait_ms) {
    long long deadline = mono_ms() + (wait_ms > 0 ? wait_ms : 0);
    bool gone;
    pthread_once(&crit_once, crit_init);
    pthread_mutex_lock(&crit_mu);
    for (;;) {
        crit_t *c = crit_find_kind(s, ns, db);
        long long now = mono_ms();
        struct timespec ts;
        gone = !c || (reads && !c->reads);
        if (gone || now >= deadline) break;
        ts.tv_sec = deadline / 1000;
        ts.tv_nsec = (deadline % 1000) * 1000000;
        pthread_cond_timedwait(&crit_cv, &crit_mu, &ts);
    }
    pthread_mutex_unlock(&crit_mu);
    return gone;
}

bool shv_crit_wait(shv_t *s, const char *ns, bool reads, long long wait_ms) {
    return crit_wait_kind(s, ns, false, reads, wait_ms);
}

long long shv_crit_wait_bound_ms(void) {
    return op_time_left_ms(MS_CRITSEC_WAIT_MS);
}

/* StaleConfig as the version check answers it, with MongoDB's critical-section signal:
 * while the section is held the wanted version is not known (vWanted absent). */
static int crit_stale(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                      const char *what, ms_error_t *err) {
    char me[128];
    bson_iter_t it;
    shv_identity(s, me, sizeof me, NULL, 0);
    if (err_info) {
        BSON_APPEND_UTF8(err_info, "ns", ns);
        if (bson_iter_init_find(&it, req, "shardVersion"))
            bsonx_append_iter(err_info, "vReceived", &it);
        BSON_APPEND_UTF8(err_info, "shardId", me);
        BSON_APPEND_BOOL(err_info, "criticalSection", true);
    }
    return err_set(err, MS_ERR_STALE_CONFIG,
                   "migration commit in progress for %s: %s waits for the critical section "
                   "(StaleConfig, criticalSection)", ns, what);
}

/* ---- movePrimary's database critical section ----------------------------------------
 * MongoDB's MovePrimaryCoordinator enters a critical section of the whole database on
 * the old primary while it clones: writes to the database's unsharded collections (the
 * requests that carry databaseVersion) wait, then answer StaleDbVersion so the router
 * refreshes the database entry and retries — on the new primary once it moved. Reads go
 * on. Entries share the list above (db = true, ns = the database name). The set of held
 * database sections is persisted in the meta table (META_DBCRIT) by the same write that
 * serves as the fence, so a shard that restarts while one is held still holds it
 * (shv_dbcrit_load): the config server's movePrimary either completes, and its exit
 * releases it, or fails and its exit releases it; a config server that dies in between
 * leaves it held until the next movePrimary of that database (docs/protocol.md). */

#define META_DBCRIT "movePrimaryCriticalSections"

/* Serialises the persisted set: each write stores the whole set as it is at that time. */
static pthread_mutex_t dbcrit_persist_mu = PTHREAD_MUTEX_INITIALIZER;

static void dbname_of(const char *ns, char *db, size_t cap) {
    const char *dot = strchr(ns, '.');
    size_t n = dot ? (size_t)(dot - ns) : strlen(ns);
    snprintf(db, cap, "%.*s", (int)n, ns);
}

static bool dbcrit_held(const shv_t *s, const char *db) {
    pthread_once(&crit_once, crit_init);
    pthread_mutex_lock(&crit_mu);
    bool held = crit_find_kind(s, db, true) != NULL;
    pthread_mutex_unlock(&crit_mu);
    return held;
}

/* Under dbcrit_persist_mu: stores {dbs: [names]} of s's held database sections. Being a
 * store_write, it is also the fence: it takes and releases the writer lock. */
static int dbcrit_persist(shv_t *s, store_t *st, ms_error_t *err) {
    bson_t doc = BSON_INITIALIZER, arr;
    int n = 0;
    BSON_APPEND_ARRAY_BEGIN(&doc, "dbs", &arr);
    pthread_mutex_lock(&crit_mu);
    for (crit_t *c = crits; c; c = c->next)
        if (c->s == s && c->db) {
            char k[16];
            snprintf(k, sizeof k, "%d", n++);
            BSON_APPEND_UTF8(&arr, k, c->ns);
        }
    pthread_mutex_unlock(&crit_mu);
    bson_append_array_end(&doc, &arr);
    int rc = store_meta_put(st, META_DBCRIT, &doc, err);
    bson_destroy(&doc);
    return rc;
}

/* Adds the entry; true when it was not there. */
static bool dbcrit_add(shv_t *s, const char *db) {
    bool added = false;
    pthread_once(&crit_once, crit_init);
    pthread_mutex_lock(&crit_mu);
    if (!crit_find_kind(s, db, true)) {
        crit_t *c = calloc(1, sizeof *c);
        ASSERT(c != NULL);
        c->s = s;
        c->db = true;
        snprintf(c->ns, sizeof c->ns, "%s", db);
        c->since_ms = mono_ms();
        c->next = crits;
        crits = c;
        added = true;
    }
    pthread_mutex_unlock(&crit_mu);
    return added;
}


static int dbname_check(const char *db, ms_error_t *err) {
    if (!*db || strchr(db, '.') || strlen(db) > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "invalid database name '%s'", db);
    return 0;
}

int shv_dbcrit_enter(shv_t *s, store_t *st, const char *db, ms_error_t *err) {
    int rc;
    if ((rc = dbname_check(db, err)) != 0) return rc;
    pthread_mutex_lock(&dbcrit_persist_mu);
    bool added = dbcrit_add(s, db);
    /* The flag is set: the persisting write is the fence (a write past its checks holds or
     * waits for the writer lock; once we had it, such writes committed or will see the
     * flag under the lock). */
    rc = dbcrit_persist(s, st, err);
    if (rc && added) crit_remove(s, db, true);
    pthread_mutex_unlock(&dbcrit_persist_mu);
    if (rc) {
        err_prefix(err, "entering the critical section of database %s", db);
        return rc;
    }
    log_info("database critical section entered db=%s new=%d", log_str(db), added);
    return 0;
}

int shv_dbcrit_exit(shv_t *s, store_t *st, const char *db, ms_error_t *err) {
    int rc;
    if ((rc = dbname_check(db, err)) != 0) return rc;
    if (!dbcrit_held(s, db)) return 0;
    /* Learn the database's entry as it is now before any write may pass: a write that
     * passed its version check against the old entry meets shv_db_recheck under the lock. */
    if ((rc = shv_db_refresh_now(s, db, err)) != 0) {
        err_prefix(err, "leaving the critical section of database %s", db);
        return rc;
    }
    pthread_mutex_lock(&dbcrit_persist_mu);
    long long held_ms = crit_remove(s, db, true);
    rc = dbcrit_persist(s, st, err);
    if (rc && held_ms >= 0) dbcrit_add(s, db);   /* still persisted: stay held */
    pthread_mutex_unlock(&dbcrit_persist_mu);
    if (rc) {
        err_prefix(err, "leaving the critical section of database %s", db);
        return rc;
    }
    if (held_ms >= 0) log_info("database critical section left db=%s ms=%lld", log_str(db), held_ms);
    return 0;
}

int shv_dbcrit_load(shv_t *s, store_t *st, ms_error_t *err) {
    bson_t doc;
    bson_iter_t it, a;
    int rc = store_meta_get(st, META_DBCRIT, &doc, err);
    if (rc == MS_ERR_NO_SUCH_KEY) return 0;
    if (rc) return rc;
    if (bson_iter_init_find(&it, &doc, "dbs") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &a))
        while (bson_iter_next(&a))
            if (BSON_ITER_HOLDS_UTF8(&a) && dbname_check(bson_iter_utf8(&a, NULL), NULL) == 0) {
                dbcrit_add(s, bson_iter_utf8(&a, NULL));
                log_info("database critical section held since before the restart db=%s",
                         log_str(bson_iter_utf8(&a, NULL)));
            }
    bson_destroy(&doc);
    return 0;
}

bool shv_dbcrit_wait(shv_t *s, const char *ns, long long wait_ms) {
    char db[MS_NS_BYTES_MAX + 1];
    dbname_of(ns, db, sizeof db);
    return crit_wait_kind(s, db, true, false, wait_ms);
}

/* StaleDbVersion while the database's section is held (MongoDB: the database critical
 * section signal, no wanted version known). */
static int dbcrit_check(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                        ms_error_t *err) {
    char db[MS_NS_BYTES_MAX + 1], me[128];
    bson_iter_t it;
    dbname_of(ns, db, sizeof db);
    if (!dbcrit_held(s, db)) return 0;
    shv_identity(s, me, sizeof me, NULL, 0);
    if (err_info) {
        BSON_APPEND_UTF8(err_info, "db", db);
        if (bson_iter_init_find(&it, req, "databaseVersion"))
            bsonx_append_iter(err_info, "vReceived", &it);
        BSON_APPEND_UTF8(err_info, "shardId", me);
        BSON_APPEND_BOOL(err_info, "criticalSection", true);
    }
    log_info("write refused by the database critical section ns=%s", log_str(ns));
    return err_set(err, MS_ERR_STALE_DB_VERSION,
                   "movePrimary in progress for database %s: the write to %s waits for the "
                   "critical section (StaleDbVersion, criticalSection)", db, ns);
}

int cmd_move_primary_crit(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    bool enter = strcmp(ctx->spec->name, "_shardsvrMovePrimaryEnterCriticalSection") == 0;
    (void)reply;
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "%s takes a database name", ctx->spec->name);
    if (!app->shv) return err_set(err, MS_ERR_ILLEGAL_OPERATION, "no sharding state");
    const char *db = bson_iter_utf8(&ctx->arg, NULL);
    return enter ? shv_dbcrit_enter(app->shv, app->st, db, err)
                 : shv_dbcrit_exit(app->shv, app->st, db, err);
}

int shv_crit_check_write(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                         ms_error_t *err) {
    bson_iter_t it;
    int rc;
    if (!s) return 0;
    /* A write to an unsharded collection, routed to the database's primary. */
    if (bson_iter_init_find(&it, req, "databaseVersion")) {
        if ((rc = dbcrit_check(s, ns, req, err_info, err)) != 0) return rc;
        if ((rc = shv_db_recheck(s, ns, req, err_info, err)) != 0) return rc;
    }
    if (!bson_iter_init_find(&it, req, "shardVersion")) return 0;  /* unversioned */
    if (!shv_crit_held(s, ns)) return shv_recheck(s, ns, req, err_info, err);
    log_info("write refused by the critical section ns=%s", ns);
    return crit_stale(s, ns, req, err_info, "the write", err);
}

int shv_crit_check_read(shv_t *s, const char *ns, const bson_t *req, bson_t *err_info,
                        ms_error_t *err) {
    bson_iter_t it;
    bool blocked;
    if (!s || !bson_iter_init_find(&it, req, "shardVersion")) return 0;
    pthread_mutex_lock(&crit_mu);
    crit_t *c = crit_find(s, ns);
    blocked = c && c->reads;
    pthread_mutex_unlock(&crit_mu);
    if (!blocked) return 0;
    if (shv_crit_wait(s, ns, true, shv_crit_wait_bound_ms())) return 0;
    log_info("read timed out waiting for the critical section ns=%s", ns);
    return crit_stale(s, ns, req, err_info, "the read", err);
}

/* ---- _testCriticalSection (test-only) ---------------------------------------------- */

int cmd_test_critical_section(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    const char *ns, *action;
    bson_iter_t it;
    (void)reply;
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "_testCriticalSection takes \"db.coll\"");
    ns = bson_iter_utf8(&ctx->arg, NULL);
    if (!cmd_field(ctx, "action", &it) || !BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'action' is missing");
    action = bson_iter_utf8(&it, NULL);
    if (!app->shv) return err_set(err, MS_ERR_ILLEGAL_OPERATION, "no sharding state");
    if (strcmp(action, "enter") == 0) return shv_crit_enter(app->shv, app->st, ns, err);
    if (strcmp(action, "blockReads") == 0) {
        if (!shv_crit_held(app->shv, ns))
            return err_set(err, MS_ERR_ILLEGAL_OPERATION, "critical section of %s not held", ns);
        shv_crit_block_reads(app->shv, ns);
        return 0;
    }
    if (strcmp(action, "leave") == 0) {
        shv_crit_leave(app->shv, ns);
        return 0;
    }
    return err_set(err, MS_ERR_BAD_VALUE,
                   "action must be \"enter\", \"blockReads\" or \"leave\", not \"%s\"", action);
}
