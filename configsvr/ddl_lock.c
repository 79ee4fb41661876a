/*
 * ddl_lock.c — the config server's DDL locks (bin/configsvr): our miniature of MongoDB's
 * DDLLockManager. A metadata command that reads the catalog, asks a shard, then commits
 * (shardCollection, split, merge, drops, addShard) must find at commit what it read, so
 * it holds a lock across the shard call. One global lock would let a slow or dead shard
 * stall every metadata operation of the cluster; these locks are per resource instead:
 *
 *   - a database, shared by operations on its collections and exclusive for operations
 *     on the whole database (enableSharding, _configsvrCreateDatabase, dropDatabase);
 *   - a collection ("db.coll"), exclusive, always taken after its database in shared mode;
 *   - the shard list ("$shards"), exclusive for addShard and removeShard.
 *
 * Locks are always taken in that order (database, then collection), so two holders can
 * never wait on each other. A waiter for exclusive access stops new shared holders from
 * entering, so dropDatabase is not starved by a stream of splits. Every wait is bounded by
 * the operation's maxTimeMS or CFG_DDL_LOCK_WAIT_MS_MAX and then answers LockBusy (46),
 * naming the resource, as MongoDB does.
 */
#include "configsvr/configsvr.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/opctx.h"

typedef struct ddl_res {
    char name[CFG_DDL_NAME_BYTES_MAX];
    int users;          /* holders + waiters: the slot is free at 0 */
    int shared;         /* shared holders */
    bool exclusive;     /* one exclusive holder */
    int excl_waiting;   /* exclusive waiters (block new shared holders) */
} ddl_res_t;

struct cfg_ddl {
    pthread_mutex_t mu;
    pthread_cond_t cv;  /* signalled on every release */
    ddl_res_t res[CFG_DDL_RESOURCES_MAX];
};

int cfg_ddl_open(cfg_ddl_t **out) {
    cfg_ddl_t *d = calloc(1, sizeof *d);
    pthread_condattr_t attr;
    if (!d) return MS_ERR_EXCEEDED_MEMORY_LIMIT;
    pthread_mutex_init(&d->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&d->cv, &attr);
    pthread_condattr_destroy(&attr);
    *out = d;
    return 0;
}

void cfg_ddl_close(cfg_ddl_t *d) {
    if (!d) return;
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* Caller holds d->mu. The slot of name, taking a free one when absent (NULL when full). */
static ddl_res_t *ddl_slot(cfg_ddl_t *d, const char *name) {
    ddl_res_t *free_slot = NULL;
    for (int i = 0; i < CFG_DDL_RESOURCES_MAX; i++) {
        ddl_res_t *r = &d->res[i];
        if (r->users > 0 && strcmp(r->name, name) == 0) return r;
        if (r->users == 0 && !free_slot) free_slot = r;
    }
    if (free_slot) {
        memset(free_slot, 0, sizeof *free_slot);
        snprintf(free_slot->name, sizeof free_slot->name, "%s", name);
    }
    return free_slot;
}

static bool ddl_grantable(const ddl_res_t *r, bool exclusive) {
    if (exclusive) return !r->exclusive && r->shared == 0;
    return !r->exclusive && r->excl_waiting == 0;
}

/* Takes one resource; bounded by the operation's deadline or CFG_DDL_LOCK_WAIT_MS_MAX. */
static int ddl_acquire(cfg_ddl_t *d, const char *name, bool exclusive, const char *reason,
                       ms_error_t *err) {
    long long wait_ms = op_time_left_ms(CFG_DDL_LOCK_WAIT_MS_MAX);
    long long t0 = time_mono_ms();
    struct timespec until;
    ddl_res_t *r;
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)(wait_ms / 1000);
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&d->mu);
    r = ddl_slot(d, name);
    if (!r) {
        pthread_mutex_unlock(&d->mu);
        return err_set(err, MS_ERR_LOCK_BUSY, "Failed to acquire DDL lock for '%s': %d resources "
                       "are already locked", name, CFG_DDL_RESOURCES_MAX);
    }
    r->users++;
    if (exclusive) r->excl_waiting++;
    while (!ddl_grantable(r, exclusive)) {
        int w = pthread_cond_timedwait(&d->cv, &d->mu, &until);
        if (w == ETIMEDOUT && !ddl_grantable(r, exclusive)) {
            rc = err_set(err, MS_ERR_LOCK_BUSY,
                         "Failed to acquire DDL lock for '%s' after %lld ms: it is held by "
                         "another metadata operation (%s waited)", name, time_mono_ms() - t0,
                         reason);
            break;
        }
    }
    if (exclusive) r->excl_waiting--;
    if (rc == 0) {
        if (exclusive) r->exclusive = true;
        else r->shared++;
    } else {
        r->users--;
        pthread_cond_broadcast(&d->cv);  /* shared waiters blocked by our waiting may go */
    }
    pthread_mutex_unlock(&d->mu);
    if (rc == 0 && time_mono_ms() - t0 >= 100)
        log_info("ddl lock waited resource=%s op=%s ms=%lld", name, reason, time_mono_ms() - t0);
    return rc;
}

static void ddl_release(cfg_ddl_t *d, const char *name, bool exclusive) {
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < CFG_DDL_RESOURCES_MAX; i++) {
        ddl_res_t *r = &d->res[i];
        if (r->users == 0 || strcmp(r->name, name) != 0) continue;
        if (exclusive) {
            ASSERT(r->exclusive);
            r->exclusive = false;
        } else {
            ASSERT(r->shared > 0);
            r->shared--;
        }
        r->users--;
        break;
    }
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

static int guard_take(cfg_t *cfg, cfg_ddl_guard_t *g, const char *name, bool exclusive,
                      const char *reason, ms_error_t *err) {
    int rc;
    if (strlen(name) >= CFG_DDL_NAME_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace too long for a DDL lock");
    ASSERT(g->n < 2);
    rc = ddl_acquire(cfg->ddl, name, exclusive, reason, err);
    if (rc) return rc;
    g->cfg = cfg;
    snprintf(g->names[g->n], sizeof g->names[g->n], "%s", name);
    g->exclusive[g->n] = exclusive;
    g->n++;
    return 0;
}

int cfg_ddl_lock_db(cfg_t *cfg, const char *db, const char *reason, cfg_ddl_guard_t *g,
                    ms_error_t *err) {
    memset(g, 0, sizeof *g);
    return guard_take(cfg, g, db, true, reason, err);
}

int cfg_ddl_lock_coll(cfg_t *cfg, const char *ns, const char *reason, cfg_ddl_guard_t *g,
                      ms_error_t *err) {
    char db[CFG_DDL_NAME_BYTES_MAX];
    const char *dot = strchr(ns, '.');
    size_t n = dot ? (size_t)(dot - ns) : strlen(ns);
    int rc;
    memset(g, 0, sizeof *g);
    if (n >= sizeof db) return err_set(err, MS_ERR_INVALID_NAMESPACE, "invalid namespace '%s'", ns);
    memcpy(db, ns, n);
    db[n] = '\0';
    if ((rc = guard_take(cfg, g, db, false, reason, err)) != 0) return rc;
    if ((rc = guard_take(cfg, g, ns, true, reason, err)) != 0) cfg_ddl_unlock(g);
    return rc;
}

int cfg_ddl_lock_shards(cfg_t *cfg, const char *reason, cfg_ddl_guard_t *g, ms_error_t *err) {
    memset(g, 0, sizeof *g);
    return guard_take(cfg, g, "$shards", true, reason, err);
}

void cfg_ddl_unlock(cfg_ddl_guard_t *g) {
    if (!g || !g->cfg) return;
    for (int i = g->n - 1; i >= 0; i--) ddl_release(g->cfg->ddl, g->names[i], g->exclusive[i]);
    g->n = 0;
    g->cfg = NULL;
}
