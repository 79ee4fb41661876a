/*
 * mig.c — what the donor and the recipient of bin/shardd share: the registry that lets a
 * shard take part in one migration at a time (MongoDB's ActiveMigrationsRegistry), the
 * range scans and digests both sides compute, the calls to peers and to the config
 * server's changelog, and the migration failpoints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <sqlite3.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/rpc.h"
#include "common/rtable.h"
#include "shardd/mig.h"

const char *const mig_donor_step_fps[6] = {
    "moveChunkHangAtStep1", "moveChunkHangAtStep2", "moveChunkHangAtStep3",
    "moveChunkHangAtStep4", "moveChunkHangAtStep5", "moveChunkHangAtStep6",
};
const char *const mig_recv_step_fps[7] = {
    "migrateThreadHangAtStep1", "migrateThreadHangAtStep2", "migrateThreadHangAtStep3",
    "migrateThreadHangAtStep4", "migrateThreadHangAtStep5", "migrateThreadHangAtStep6",
    "migrateThreadHangAtStep7",
};

void mig_register_failpoints(void) {
    for (int i = 0; i < 6; i++) fp_register(mig_donor_step_fps[i]);
    for (int i = 0; i < 7; i++) fp_register(mig_recv_step_fps[i]);
    fp_register(FP_HANG_BEFORE_LEAVING_CRIT_SEC);
    fp_register(RTABLE_FP_HANG_BETWEEN_PAGES);   /* the filtering metadata's refresh */
    fp_register(FP_FAIL_MIGRATION_COMMIT);
    fp_register(FP_MIGRATION_COMMIT_NETWORK_ERROR);
    fp_register(FP_HANG_DONOR_RECOVERY);
    fp_register(FP_SKIP_ONE_MIGRATED_DOC);
    fp_register(FP_HANG_IN_TRANSFER_MODS);
    fp_register(FP_HANG_BEFORE_RECV_CHUNK_START);
    fp_register(FP_HANG_IN_GET_NEXT_SESSION_MODS);
    fp_register(FP_SESSION_MIGRATION_HANG_AFTER_BATCH);
    fp_register(FP_SESSION_MIGRATION_HANG_BEFORE_DONE);
    fp_register(SHV_FP_HANG_REFRESH_BEFORE_INSTALL);
}

int mig_open(shardd_t *app, mig_t **out, ms_error_t *err) {
    mig_t *m = calloc(1, sizeof *m);
    if (!m) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    m->app = app;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    m->write_pause_budget_ms = MS_MIG_WRITE_PAUSE_BUDGET_MS_DEFAULT;
    m->catchup_timeout_ms = MS_MIG_CATCHUP_MS_DEFAULT;
    *out = m;
    return 0;
}

void mig_recover(mig_t *m) { mig_donor_recover_all(m); }

void mig_close(mig_t *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->stopping = true;
    pthread_cond_broadcast(&m->cv);
    /* The donor, recipient and recovery threads use the store, the range deleter and the
     * sharding state that main frees after this: wait until every one has ended. Each
     * notices `stopping` at its next step, every call it makes has a deadline, and the
     * hang failpoints were released when serving stopped, so this ends. */
    long long start = time_mono_ms(), next_log = start + MS_MIG_STOP_WAIT_MS;
    while (m->donor || m->recv || m->recoveries > 0) {
        time_cond_wait_ms(&m->cv, &m->mu, 50);
        if (time_mono_ms() >= next_log) {
            log_warn("shutdown waiting for migration threads donor=%d recipient=%d "
                     "recoveries=%d ms=%lld", m->donor != NULL, m->recv != NULL, m->recoveries,
                     time_mono_ms() - start);
            next_log += MS_MIG_STOP_WAIT_MS;
        }
    }
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

void mig_append_status(mig_t *m, bson_t *out) {
    bson_t doc, arr;
    BSON_APPEND_DOCUMENT_BEGIN(out, "migrations", &doc);
    pthread_mutex_lock(&m->mu);
    BSON_APPEND_INT64(&doc, "donated", m->donated);
    BSON_APPEND_INT64(&doc, "received", m->received);
    BSON_APPEND_INT64(&doc, "aborted", m->aborted);
    BSON_APPEND_INT32(&doc, "recoveriesPending", m->recoveries + m->stuck);
    BSON_APPEND_INT32(&doc, "recoveriesStuck", m->stuck);
    BSON_APPEND_INT32(&doc, "writePauseBudgetMS", m->write_pause_budget_ms);
    BSON_APPEND_INT32(&doc, "catchUpTimeoutMS", m->catchup_timeout_ms);
    BSON_APPEND_BOOL(&doc, "archiveMovedChunks", m->archive);
    pthread_mutex_unlock(&m->mu);
    BSON_APPEND_ARRAY_BEGIN(&doc, "inprog", &arr);
    mig_append_inprog(m, &arr);
    bson_append_array_end(&doc, &arr);
    bson_append_document_end(out, &doc);
}

void mig_append_inprog(mig_t *m, bson_t *arr) {
    int i = 0;
    char k[16];
    bson_t d;
    pthread_mutex_lock(&m->mu);
    if (m->donor) {
        snprintf(k, sizeof k, "%d", i++);
        BSON_APPEND_DOCUMENT_BEGIN(arr, k, &d);
        mig_donor_status(m->donor, &d);
        bson_append_document_end(arr, &d);
    }
    if (m->recv) {
        snprintf(k, sizeof k, "%d", i++);
        BSON_APPEND_DOCUMENT_BEGIN(arr, k, &d);
        mig_recv_status(m->recv, &d);
        bson_append_document_end(arr, &d);
    }
    pthread_mutex_unlock(&m->mu);
}

void mig_remember_abort(mig_t *m, const uint8_t uuid[16]) {
    pthread_mutex_lock(&m->mu);
    if (!mig_abort_remembered_locked(m, uuid)) {
        memcpy(m->aborted_ids[m->aborted_next], uuid, 16);
        m->aborted_next = (m->aborted_next + 1) % MS_MIG_ABORTS_REMEMBERED;
        if (m->naborted_ids < MS_MIG_ABORTS_REMEMBERED) m->naborted_ids++;
    }
    pthread_mutex_unlock(&m->mu);
}

bool mig_abort_remembered_locked(const mig_t *m, const uint8_t uuid[16]) {
    for (int i = 0; i < m->naborted_ids; i++)
        if (memcmp(m->aborted_ids[i], uuid, 16) == 0) return true;
    return false;
}

/* ---- index DDL vs migrations (mig.h) -------------------------------------------------- */

bool mig_index_ddl_running_locked(const mig_t *m, const char *ns) {
    for (int i = 0; i < MS_MIG_INDEX_DDL_MAX; i++)
        if (m->ddl[i].n > 0 && strcmp(m->ddl[i].ns, ns) == 0) return true;
    return false;
}

static bool ddl_blocked_locked(const mig_t *m, const char *ns) {
    return (m->ddl_fence && strcmp(m->ddl_fence_ns, ns) == 0) ||
           (m->recv && strcmp(mig_recv_ns(m->recv), ns) == 0);
}

int mig_index_ddl_begin(mig_t *m, const char *ns, bool *waited, ms_error_t *err) {
    long long until = time_mono_ms() + op_time_left_ms(MS_MIG_INDEX_DDL_WAIT_MS);
    int slot = -1;
    *waited = false;
    if (strlen(ns) > MS_NS_BYTES_MAX) return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace too long");
    pthread_mutex_lock(&m->mu);
    for (;;) {
        bool blocked = ddl_blocked_locked(m, ns);
        slot = -1;
        if (!blocked)
            for (int i = 0; i < MS_MIG_INDEX_DDL_MAX; i++) {
                if (m->ddl[i].n > 0 && strcmp(m->ddl[i].ns, ns) == 0) {
                    slot = i;
                    break;
                }
                if (m->ddl[i].n == 0 && slot < 0) slot = i;
            }
        if (slot >= 0 || time_mono_ms() >= until) break;
        if (blocked && !*waited)
            log_info("index command waits for a migration ns=%s", log_str(ns));
        *waited = *waited || blocked;
        time_cond_wait_ms(&m->cv, &m->mu, 100);
    }
    if (slot >= 0) {
        if (m->ddl[slot].n++ == 0) snprintf(m->ddl[slot].ns, sizeof m->ddl[slot].ns, "%s", ns);
    }
    pthread_mutex_unlock(&m->mu);
    if (slot < 0)
        return err_set(err, MS_ERR_CONFLICTING_OPERATION,
                       "a migration of %s on this shard holds index changes back; try again "
                       "once it has finished", ns);
    return 0;
}

void mig_index_ddl_end(mig_t *m, const char *ns) {
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < MS_MIG_INDEX_DDL_MAX; i++)
        if (m->ddl[i].n > 0 && strcmp(m->ddl[i].ns, ns) == 0) {
            m->ddl[i].n--;
            break;
        }
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

int mig_index_ddl_fence(mig_t *m, const char *ns, long long until_ms, ms_error_t *err) {
    int rc = 0;
    pthread_mutex_lock(&m->mu);
    m->ddl_fence = true;
    snprintf(m->ddl_fence_ns, sizeof m->ddl_fence_ns, "%s", ns);
    while (mig_index_ddl_running_locked(m, ns) && time_mono_ms() < until_ms)
        time_cond_wait_ms(&m->cv, &m->mu, 50);
    if (mig_index_ddl_running_locked(m, ns)) {
        m->ddl_fence = false;
        pthread_cond_broadcast(&m->cv);
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "an index build or drop of %s is still running on the donor", ns);
    }
    pthread_mutex_unlock(&m->mu);
    return rc;
}

void mig_index_ddl_unfence(mig_t *m) {
    pthread_mutex_lock(&m->mu);
    m->ddl_fence = false;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

typedef struct specs_arg {
    const char *ns;
    bson_t *arr;
} specs_arg_t;

static int specs_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    specs_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    char k[16];
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "ns does not exist: %s", a->ns);
    for (int i = 0; i < c->nindexes; i++) {
        bson_t clean;
        bson_iter_t f;
        /* The user's form of the spec: key, name, unique. */
        snprintf(k, sizeof k, "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(a->arr, k, &clean);
        if (bson_iter_init(&f, &c->ix[i]->spec))
            while (bson_iter_next(&f))
                if (strcmp(bson_iter_key(&f), "key") == 0 || strcmp(bson_iter_key(&f), "name") == 0 ||
                    strcmp(bson_iter_key(&f), "unique") == 0)
                    bsonx_append_iter(&clean, bson_iter_key(&f), &f);
        bson_append_document_end(a->arr, &clean);
    }
    return 0;
}

int mig_index_specs(store_t *st, const char *ns, bson_t *arr, ms_error_t *err) {
    specs_arg_t a = {ns, arr};
    return store_read(st, specs_fn, &a, err);
}

/* ---- small helpers -------------------------------------------------------------------- */

void mig_uuid_hex(const uint8_t uuid[16], char out[33]) {
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hx[uuid[i] >> 4];
        out[2 * i + 1] = hx[uuid[i] & 15];
    }
    out[32] = 0;
}

void mig_uuid_new(uint8_t u[16]) {
    if (getrandom(u, 16, 0) != 16)
        for (int i = 0; i < 16; i++) u[i] = (uint8_t)rand();
    u[6] = (uint8_t)((u[6] & 0x0f) | 0x40);  /* RFC 4122 version 4 */
    u[8] = (uint8_t)((u[8] & 0x3f) | 0x80);
}

int mig_call(const char *url, const bson_t *cmd, int timeout_ms, bson_t *reply, ms_error_t *err) {
    rpc_client_t *c;
    int rc;
    if ((rc = rpc_peer(url, &c, err)) != 0) return rc;
    rc = rpc_command(c, cmd, timeout_ms, reply, err);
    if (rc != 0 && rc != MS_ERR_HOST_UNREACHABLE && rc != MS_ERR_NETWORK_TIMEOUT &&
        rc != MS_ERR_EXCEEDED_TIME_LIMIT && rc != MS_ERR_INVALID_BSON)
        bson_destroy(reply);   /* an {ok: 0} reply: the error says it all */
    return rc;
}

void mig_log_change(mig_t *m, const char *what, const char *ns, const bson_t *details) {
    char name[128], url[MS_URL_BYTES_MAX];
    bson_t cmd, reply;
    ms_error_t e = {0};
    shv_identity(m->app->shv, name, sizeof name, url, sizeof url);
    if (!url[0]) return;
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "_configsvrLogChange", 1);
    BSON_APPEND_UTF8(&cmd, "what", what);
    BSON_APPEND_UTF8(&cmd, "ns", ns);
    BSON_APPEND_UTF8(&cmd, "shard", name);
    BSON_APPEND_DOCUMENT(&cmd, "details", details);
    if (mig_call(url, &cmd, MS_RPC_CONFIG_TIMEOUT_MS_DEFAULT, &reply, &e) == 0)
        bson_destroy(&reply);
    else
        log_warn("changelog entry not written what=%s ns=%s errmsg=%s", what, log_str(ns),
                 log_str(e.msg));
    bson_destroy(&cmd);
}

/* ---- range reads (inside a store transaction) ----------------------------------------- */

static sqlite3_stmt *range_stmt(store_txn_t *t, store_coll_t *c, const char *what,
                                const buf_t *min, const buf_t *max, ms_error_t *err) {
    return store_sk_range_stmt(t, c, what, "ORDER BY sk", min, max, err);
}

int mig_range_docs(store_txn_t *t, store_coll_t *c, const buf_t *min, const buf_t *max,
                   int (*fn)(void *arg, const uint8_t *doc, size_t len, ms_error_t *err), void *arg,
                   ms_error_t *err) {
    sqlite3_stmt *s = range_stmt(t, c, "doc", min, max, err);
    int rc, frc = 0;
    if (!s) return err->code;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        if ((frc = fn(arg, sqlite3_column_blob(s, 0), (size_t)sqlite3_column_bytes(s, 0), err)) != 0)
            break;
    sqlite3_reset(s);
    if (frc) return frc;
    if (rc != SQLITE_DONE) return err_set(err, MS_ERR_INTERNAL, "range scan: %s", sqlite3_errstr(rc));
    return 0;
}

typedef struct digest_arg {
    const char *ns;
    const buf_t *min, *max;
    int64_t count, bytes;
    uint64_t sum;
} digest_arg_t;

static int digest_fn(store_txn_t *t, void *arg, ms_error_t *err);

int mig_range_digest_txn(store_txn_t *t, const char *ns, const buf_t *min, const buf_t *max,
                         int64_t *count, uint64_t *sum, int64_t *bytes, ms_error_t *err) {
    digest_arg_t a = {ns, min, max, 0, 0, 0};
    int rc = digest_fn(t, &a, err);
    if (rc == 0) {
        *count = a.count;
        *sum = a.sum;
        if (bytes) *bytes = a.bytes;
    }
    return rc;
}

static int digest_doc(void *arg, const uint8_t *p, size_t n, ms_error_t *err) {
    digest_arg_t *a = arg;
    (void)err;
    a->count++;
    a->bytes += (int64_t)n;
    a->sum += xfer_doc_hash(p, n);
    return 0;
}

static int digest_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    digest_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    return c ? mig_range_docs(t, c, a->min, a->max, digest_doc, a, err) : 0;
}

int mig_range_digest(store_t *st, const char *ns, const buf_t *min, const buf_t *max,
                     int64_t *count, uint64_t *sum, int64_t *bytes, ms_error_t *err) {
    digest_arg_t a = {ns, min, max, 0, 0, 0};
    int rc = store_read(st, digest_fn, &a, err);
    if (rc == 0) {
        *count = a.count;
        *sum = a.sum;
        if (bytes) *bytes = a.bytes;
    }
    return rc;
}

int mig_find_by_id(store_txn_t *t, store_coll_t *c, const bson_t *doc, int64_t *rid,
                   bson_t *found, bool *exists, ms_error_t *err) {
    char sql[96];
    sqlite3_stmt *s;
    bson_iter_t it;
    buf_t key = {0};
    int rc;
    *exists = false;
    if (!bson_iter_init_find(&it, doc, "_id"))
        return err_set(err, MS_ERR_INVALID_ID_FIELD, "a migrated document has no _id");
    if ((rc = keys_encode_field(&key, &it, "_id", err)) != 0) return rc;
    snprintf(sql, sizeof sql, "SELECT rid, doc FROM c%lld WHERE id = ?1", (long long)c->id);
    if (!(s = store_stmt(t, sql, err))) {
        buf_free(&key);
        return err->code;
    }
    sqlite3_bind_blob(s, 1, key.data, (int)key.len, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        bson_t view;
        *exists = true;
        *rid = sqlite3_column_int64(s, 0);
        if (!bson_init_static(&view, sqlite3_column_blob(s, 1), (size_t)sqlite3_column_bytes(s, 1)))
            rc = err_set(err, MS_ERR_INVALID_BSON, "corrupt document rid=%lld", (long long)*rid);
        else {
            bson_copy_to(&view, found);
            rc = 0;
        }
    } else if (rc == SQLITE_DONE) {
        rc = 0;
    } else {
        rc = err_set(err, MS_ERR_INTERNAL, "lookup by _id: %s", sqlite3_errstr(rc));
    }
    sqlite3_reset(s);
    buf_free(&key);
    return rc;
}

bool mig_key_in_range(const buf_t *k, const buf_t *min, const buf_t *max) {
    return mig_key_cmp(k, min) >= 0 && mig_key_cmp(k, max) < 0;
}

int mig_key_cmp(const buf_t *a, const buf_t *b) {
    return rtable_bytes_cmp(a->data, a->len, b->data, b->len);
}

int mig_task_add_orphans(store_txn_t *t, const char *id, int64_t n, bool set, ms_error_t *err) {
    bson_t doc, out;
    bson_iter_t it;
    int64_t cur = 0;
    int rc = store_sdoc_get(t, SDOC_RANGE_DELETIONS, id, &doc, err);
    if (rc == MS_ERR_NO_SUCH_KEY) {
        memset(err, 0, sizeof *err);
        return 0;
    }
    if (rc != 0) return rc;
    bson_init(&out);
    if (bson_iter_init(&it, &doc))
        while (bson_iter_next(&it)) {
            if (strcmp(bson_iter_key(&it), "numOrphanDocs") == 0) {
                bsonx_as_int64(&it, &cur);
                continue;
            }
            bsonx_append_iter(&out, bson_iter_key(&it), &it);
        }
    BSON_APPEND_INT64(&out, "numOrphanDocs", set ? n : cur + n);
    rc = store_sdoc_put(t, SDOC_RANGE_DELETIONS, id, &out, err);
    bson_destroy(&out);
    bson_destroy(&doc);
    return rc;
}

int mig_range_rowids_digest(store_txn_t *t, store_coll_t *c, const buf_t *min, const buf_t *max,
                            size_t cap, int64_t **rids, size_t *n, int64_t *count, uint64_t *sum,
                            ms_error_t *err) {
    sqlite3_stmt *s = range_stmt(t, c, "rid, doc", min, max, err);
    size_t vcap = 0;
    int rc;
    *rids = NULL;
    *n = 0;
    *count = 0;
    *sum = 0;
    if (!s) return err->code;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (*n >= cap) {
            (*n)++;   /* one more than the cap: "too many" */
            break;
        }
        if (*n == vcap) {
            vcap = vcap ? vcap * 2 : 1024;
            *rids = xrealloc(*rids, vcap * sizeof **rids);
        }
        (*rids)[(*n)++] = sqlite3_column_int64(s, 0);
        (*count)++;
        *sum += xfer_doc_hash(sqlite3_column_blob(s, 1), (size_t)sqlite3_column_bytes(s, 1));
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        free(*rids);
        *rids = NULL;
        *n = 0;
        return err_set(err, MS_ERR_INTERNAL, "range scan failed: %s", sqlite3_errstr(rc));
    }
    return 0;
}
