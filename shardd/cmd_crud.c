/*
 * cmd_crud.c — the shard daemon's CRUD commands (bin/shardd): insert, find, getMore,
 * killCursors, update, delete, count, distinct, findAndModify and explain of a find, with
 * MongoDB's fields, reply shapes and error codes (docs/protocol.md "Shard daemon").
 *
 * Every handler on a namespace calls shv_check first (DESIGN §6 "Versioning"; MongoDB's
 * shard version check in the service entry point); reads then drop documents outside the
 * owned chunks. Versioned writes check a migration's critical section again inside their
 * transaction, under the writer lock (critsec.c). insert, update and delete share one batch walker (MongoDB's
 * performInserts / performUpdates / performDeletes): the whole batch is one SQLite
 * transaction, a statement that fails is rolled back alone (store_write_doc) and reported
 * in writeErrors with the client's index, and an acknowledged write is committed. The
 * failpoints hangBeforeWriteCommit / hangAfterWriteCommit stand on either side of that
 * COMMIT (docs/protocol.md "Shard daemon: failpoints"). maxTimeMS expiring mid-batch
 * stops it, commits what it wrote and fails the command with MaxTimeMSExpired, as
 * MongoDB fails a batch on an interruption (docs/protocol.md "All processes: maxTimeMS").
 */
#include "shardd/shardd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/validate.h"
#include "shardd/sessions.h"

/* ---- helpers ------------------------------------------------------------------------ */

int shardd_ns(const cmd_ctx_t *ctx, char *ns, size_t nssz, ms_error_t *err) {
    const char *coll;
    uint32_t len = 0;
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg))
        return err_set(err, MS_ERR_INVALID_NAMESPACE,
                       "collection name has invalid type %s",
                       bsonx_type_name(bson_iter_type(&ctx->arg)));
    coll = bson_iter_utf8(&ctx->arg, &len);
    if (len == 0 || strlen(coll) != len)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s.%s'",
                       ctx->db, coll);
    if (!ctx->db[0] || strchr(ctx->db, '.') || strchr(ctx->db, '$') || strchr(ctx->db, ' ') ||
        strchr(coll, '$'))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s.%s'",
                       ctx->db, coll);
    if ((size_t)snprintf(ns, nssz, "%s.%s", ctx->db, coll) >= nssz || strlen(ns) > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace too long: %s.%s", ctx->db, coll);
    return 0;
}

static int version_check(cmd_ctx_t *ctx, const char *ns, shv_filter_t **own, ms_error_t *err) {
    shardd_t *app = ctx->app;
    int rc;
    *own = NULL;
    if (!app->shv) return 0;
    /* While a migration commits (critical section, reads blocked) versioned requests
     * wait here, outside every lock, bounded (critsec.c). */
    if ((rc = shv_crit_check_read(app->shv, ns, ctx->req, &ctx->err_info, err)) != 0) return rc;
    return shv_check(app->shv, ns, ctx->req, own, &ctx->err_info, err);
}

/* The critical-section re-check of a write, inside its transaction (under the writer
 * lock: see critsec.c for why the check before the lock is not enough). */
static int crit_check_write(cmd_ctx_t *ctx, const char *ns, bson_t *err_info, bool *refused,
                            ms_error_t *err) {
    shardd_t *app = ctx->app;
    int rc = app->shv ? shv_crit_check_write(app->shv, ns, ctx->req, err_info, err) : 0;
    if (rc) *refused = true;
    return rc;
}

/* A write the critical section refused has rolled back; it waits, no lock held, for the
 * section to be left (bounded), then its StaleConfig goes to the router, which refreshes
 * and retries (on the recipient when the migration committed). */
static void crit_wait_after_refusal(cmd_ctx_t *ctx, const char *ns, int code) {
    shardd_t *app = ctx->app;
    /* StaleDbVersion: movePrimary's database section (or the database moved: not held,
     * no wait); the router then refreshes the database entry and retries. */
    if (code == MS_ERR_STALE_DB_VERSION)
        shv_dbcrit_wait(app->shv, ns, shv_crit_wait_bound_ms());
    else
        shv_crit_wait(app->shv, ns, false, shv_crit_wait_bound_ms());
}

/* A catalog change of a command on ns (create, drop, createIndexes, dropIndexes, implicit
 * creation) under the same critical-section checks as a write, inside its transaction. */
typedef struct guard_arg {
    cmd_ctx_t *ctx;
    const char *ns;
    store_txn_fn fn;
    void *arg;
    bool refused;
} guard_arg_t;

static int guard_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    guard_arg_t *g = arg;
    if (crit_check_write(g->ctx, g->ns, &g->ctx->err_info, &g->refused, err) != 0)
        return err->code;
    return g->fn(t, g->arg, err);
}

int shardd_ddl_guarded(cmd_ctx_t *ctx, const char *ns, store_txn_fn fn, void *arg,
                       ms_error_t *err) {
    shardd_t *app = ctx->app;
    guard_arg_t g = {ctx, ns, fn, arg, false};
    int rc = store_ddl(app->st, guard_fn, &g, err);
    if (rc && g.refused) crit_wait_after_refusal(ctx, ns, rc);
    return rc;
}

int shardd_ns_versioned(cmd_ctx_t *ctx, char *ns, size_t nssz, shv_filter_t **own,
                        ms_error_t *err) {
    shv_filter_t *f = NULL;
    int rc;
    if (own) *own = NULL;
    if ((rc = shardd_ns(ctx, ns, nssz, err)) != 0) return rc;
    if ((rc = version_check(ctx, ns, &f, err)) != 0 || !own) {
        shv_filter_release(f);
        return rc;
    }
    *own = f;
    return 0;
}

/* *out = doc with _id as its first field, as MongoDB stores documents: a read-only view
 * of doc itself when _id is already first (no copy: the common case of a bulk insert),
 * a rebuilt copy with _id moved first, or with a new ObjectId when absent. Either way
 * the caller destroys *out, and doc must outlive it. */
static void with_id_first(const bson_t *doc, bson_t *out) {
    bson_iter_t it;
    bool first_is_id = false, has_id = false;
    if (bson_iter_init(&it, doc) && bson_iter_next(&it)) first_is_id = strcmp(bson_iter_key(&it), "_id") == 0;
    if (first_is_id && bson_init_static(out, bson_get_data(doc), doc->len)) return;
    bson_init(out);
    if (bson_iter_init_find(&it, doc, "_id")) {
        bsonx_append_iter(out, "_id", &it);
        has_id = true;
    }
    if (!has_id) {
        bson_oid_t oid;
        bson_oid_init(&oid, NULL);
        BSON_APPEND_OID(out, "_id", &oid);
    }
    if (bson_iter_init(&it, doc))
        while (bson_iter_next(&it))
            if (strcmp(bson_iter_key(&it), "_id") != 0) bsonx_append_iter(out, bson_iter_key(&it), &it);
}

/* Creates ns when absent (implicit creation by insert / upsert). */
typedef struct create_arg {
    const char *ns;
} create_arg_t;

static int create_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    create_arg_t *a = arg;
    return store_coll_create(t, a->ns, NULL, NULL, NULL, err);
}

static int ensure_coll(cmd_ctx_t *ctx, const char *ns, bool *refused, ms_error_t *err) {
    shardd_t *app = ctx->app;
    create_arg_t a = {ns};
    guard_arg_t g = {ctx, ns, create_fn, &a, false};
    int rc = store_ddl(app->st, guard_fn, &g, err);
    if (g.refused) *refused = true;
    return rc;
}

/* Runs fn in a write transaction; when fn stopped because the collection is missing
 * (*need_create, set before it wrote anything), creates the collection in its own
 * transaction (MongoDB's implicit creation by insert and upsert) and runs fn again. fn
 * resets its own results at entry. Bounded: a concurrent drop may win every round. */
static int write_creating(cmd_ctx_t *ctx, const char *ns, store_txn_fn fn, void *arg,
                          const bool *need_create, bool *refused, ms_error_t *err) {
    shardd_t *app = ctx->app;
    int rc = 0;
    for (int tries = 0; tries < 3; tries++) {
        if ((rc = store_write(app->st, fn, arg, err)) != 0 || !*need_create) break;
        if ((rc = ensure_coll(ctx, ns, refused, err)) != 0) break;
    }
    return rc;
}

/* ---- write batches: insert, update, delete ------------------------------------------ */

typedef struct wbatch wbatch_t;

/* One statement of a batch: 0, or the statement's own error in *e (info: extra fields of
 * its writeErrors entry). A statement that needs the missing collection sets
 * b->need_create instead, having written nothing. */
typedef int (*wbatch_op_fn)(store_txn_t *t, store_coll_t *c, wbatch_t *b, int index,
                            const bson_t *op, bson_t *info, ms_error_t *e);

/* What differs between insert, update and delete. */
typedef struct wbatch_kind {
    const char *verb;        /* the command's name: "update" */
    const char *field;       /* its array of statements: "updates" */
    wbatch_op_fn op;
    bool counts_modified;    /* reply has nModified and upserted (update) */
} wbatch_kind_t;

/* One write command's batch and its results. */
struct wbatch {
    const wbatch_kind_t *kind;
    cmd_ctx_t *ctx;
    bool crit_refused;       /* the critical section refused it (StaleConfig) */
    char ns[MS_NS_BYTES_MAX + 8];
    bson_iter_t ops;         /* the statements (borrowed from the request) */
    bool ordered;
    shv_filter_t *own;       /* ownership filter of a versioned request, or NULL */
    bool need_create;
    ms_error_t expired;      /* MaxTimeMSExpired stopped the batch (code 0 = it did not) */
    int64_t n, nmod;
    int nerr, nups;
    bson_t errs;             /* writeErrors entries */
    bson_t upserted;         /* update: {index, _id} of each upsert */
    bson_t last_upserted;    /* {upserted: _id} of the latest upsert (a statement's record) */
    fp_early_t fpe;          /* hangBeforeWriteCommit, evaluated before the transaction */
    sess_write_t sw;         /* lsid, txnNumber, stmtIds of a retryable write */
    bool sess_fresh;         /* its txnNumber started in this transaction: nothing ran */
    buf_t touched;           /* the encoded shard key of the document a statement wrote */
    bool touched_set;
};

/* Fatal errors abort the whole command; others belong to one statement. A retryable
 * write's session errors are the command's too, as MongoDB's checkStatementExecuted
 * throws them out of the batch loop. */
static bool is_fatal(int code) {
    return code == MS_ERR_INTERNAL || code == MS_ERR_LOCK_TIMEOUT ||
           code == MS_ERR_INCOMPLETE_TRANSACTION_HISTORY || code == MS_ERR_TRANSACTION_TOO_OLD;
}

/* ---- retryable writes: a statement runs once per (lsid, txnNumber, stmtId) ------------- */

/* Notes the shard key of the document a statement of a retryable write wrote (its record
 * migrates with that key's chunk). Best effort: a key that cannot be extracted leaves the
 * record keyed by the statement's query. */
static void wb_touch(wbatch_t *b, const store_coll_t *c, const bson_t *doc) {
    ms_error_t e;
    if (b->sw.on && sess_key_of(c, doc, NULL, &b->touched, &b->touched_set, &e) != 0)
        b->touched_set = false;
}

/* update {multi: true} and delete {limit: 0} are not retryable (MongoDB refuses them in a
 * retryable write with InvalidOptions). */
static int wb_refuse_multi(const wbatch_t *b, const bson_t *op, ms_error_t *e) {
    bson_iter_t it;
    int64_t limit = 1;
    if (b->kind->counts_modified && bson_iter_init_find(&it, op, "multi") && bsonx_truthy(&it))
        return err_set(e, MS_ERR_INVALID_OPTIONS,
                       "Cannot use (or request) retryable writes with multi=true");
    if (!b->kind->counts_modified && strcmp(b->kind->verb, "delete") == 0 &&
        bson_iter_init_find(&it, op, "limit") && bsonx_as_int64(&it, &limit) && limit == 0)
        return err_set(e, MS_ERR_INVALID_OPTIONS,
                       "Cannot use (or request) retryable writes with limit=0");
    return 0;
}

/* One upsert of statement index into the reply's `upserted` list; its _id (when id is
 * non-NULL) is also kept apart, for the statement's record (wb_record). */
static void wb_add_upserted(wbatch_t *b, int index, const bson_iter_t *id) {
    bson_t up;
    char key[16];
    snprintf(key, sizeof key, "%d", b->nups++);
    BSON_APPEND_DOCUMENT_BEGIN(&b->upserted, key, &up);
    BSON_APPEND_INT32(&up, "index", index);
    if (id) bsonx_append_iter(&up, "_id", id);
    bson_append_document_end(&b->upserted, &up);
    bson_reinit(&b->last_upserted);
    if (id) bsonx_append_iter(&b->last_upserted, "upserted", id);
}

/* A recorded statement answers as it did: its n, nModified and upserted _id counted in. */
static void wb_replay(wbatch_t *b, int index, const bson_t *res) {
    bson_iter_t it;
    int64_t v;
    if (bson_iter_init_find(&it, res, "n") && bsonx_as_int64(&it, &v)) b->n += v;
    if (bson_iter_init_find(&it, res, "nModified") && bsonx_as_int64(&it, &v)) b->nmod += v;
    if (bson_iter_init_find(&it, res, "upserted")) wb_add_upserted(b, index, &it);
}

/* Records what statement index answered (its share of n, nModified, upserted) with its
 * key: the written document's, else the shard-key equality its query names, else none. A
 * failure here is the command's (InternalError): the write must not commit unrecorded. */
static int wb_record(store_txn_t *t, const store_coll_t *c, wbatch_t *b, int32_t sid,
                     const bson_t *op, int64_t n0, int64_t nmod0, int nups0, ms_error_t *e) {
    bson_t res = BSON_INITIALIZER, q;
    bson_iter_t it;
    int rc = 0;
    BSON_APPEND_INT32(&res, "n", (int32_t)(b->n - n0));
    if (b->kind->counts_modified) BSON_APPEND_INT32(&res, "nModified", (int32_t)(b->nmod - nmod0));
    if (b->nups > nups0) bson_concat(&res, &b->last_upserted);
    if (!b->touched_set && bson_iter_init_find(&it, op, "q") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bsonx_view_container(&it, &q))
        rc = sess_key_of(c, NULL, &q, &b->touched, &b->touched_set, e);
    if (rc == 0)
        rc = sess_stmt_record(t, &b->sw.lsid, b->sw.txn, sid, b->ns,
                              b->touched_set ? b->touched.data : NULL,
                              b->touched_set ? b->touched.len : 0, &res, e);
    bson_destroy(&res);
    if (rc) {
        err_prefix(e, "recording retryable write statement %d", sid);
        e->code = MS_ERR_INTERNAL;
        return MS_ERR_INTERNAL;
    }
    return 0;
}

/* One statement of a batch. A retryable write's statement (MongoDB's
 * checkStatementExecuted before it, onWriteOpCompletedOnPrimary after) is answered from
 * its record when it ran already, else run and recorded in this same transaction. */
static int wb_statement(store_txn_t *t, store_coll_t *c, wbatch_t *b, int index,
                        const bson_t *op, bson_t *info, ms_error_t *e) {
    int32_t sid = sess_write_stmt_id(&b->sw, index);
    bson_t res;
    bool found = false;
    int rc;
    if (!b->sw.on || sid == SESS_STMT_UNINITIALIZED) return b->kind->op(t, c, b, index, op, info, e);
    if ((rc = wb_refuse_multi(b, op, e)) != 0) return rc;
    if (!b->sess_fresh &&
        (rc = sess_stmt_lookup(t, &b->sw.lsid, b->sw.txn, sid, &res, &found, e)) != 0)
        return rc;
    if (found) {
        wb_replay(b, index, &res);
        bson_destroy(&res);
        return 0;
    }
    int64_t n0 = b->n, nmod0 = b->nmod;
    int nups0 = b->nups;
    b->touched_set = false;
    rc = b->kind->op(t, c, b, index, op, info, e);
    if (rc != 0 || b->need_create) return rc;
    return wb_record(t, c, b, sid, op, n0, nmod0, nups0, e);
}

static void write_error(bson_t *arr, int *nerr, int index, const ms_error_t *e, const bson_t *info) {
    bson_t we;
    char key[16];
    snprintf(key, sizeof key, "%d", *nerr);
    BSON_APPEND_DOCUMENT_BEGIN(arr, key, &we);
    BSON_APPEND_INT32(&we, "index", index);
    BSON_APPEND_INT32(&we, "code", e->code);
    BSON_APPEND_UTF8(&we, "codeName", err_code_name(e->code));
    BSON_APPEND_UTF8(&we, "errmsg", e->msg);
    if (info && !bson_empty(info)) bson_concat(&we, info);
    bson_append_document_end(arr, &we);
    (*nerr)++;
}

/* The batch's transaction (MongoDB's performWrites loop): every statement in order; an
 * entry that is not a document, or a statement that fails, becomes a writeErrors entry
 * and stops an ordered batch; a fatal error fails the command (ROLLBACK). Ends at the
 * hangBeforeWriteCommit point: the batch written, not yet committed. */
static int wbatch_txn(store_txn_t *t, void *arg, ms_error_t *err) {
    wbatch_t *b = arg;
    store_coll_t *c = store_coll_get(t, b->ns);
    bson_iter_t ops = b->ops;
    b->n = b->nmod = 0;
    b->nerr = b->nups = 0;
    b->need_create = false;
    memset(&b->expired, 0, sizeof b->expired);
    bson_reinit(&b->errs);
    bson_reinit(&b->upserted);
    bson_reinit(&b->last_upserted);
    if (crit_check_write(b->ctx, b->ns, &b->ctx->err_info, &b->crit_refused, err) != 0)
        return err->code;
    if (b->sw.on && sess_txn_start(t, &b->sw.lsid, b->sw.txn, &b->sess_fresh, err) != 0)
        return err->code;
    for (int i = 0; bson_iter_next(&ops); i++) {
        bson_t op, info = BSON_INITIALIZER;
        ms_error_t e = {0};
        int rc = 0;
        /* An expiry here is handled below like a statement's own. */
        if (i % MS_INTERRUPT_CHECK_DOCS == MS_INTERRUPT_CHECK_DOCS - 1) rc = op_check(&e);
        if (rc == 0 && (!BSON_ITER_HOLDS_DOCUMENT(&ops) || !bsonx_view_container(&ops, &op)))
            rc = err_set(&e, MS_ERR_TYPE_MISMATCH, "BSON field '%s.%s.%d' is the wrong type '%s', "
                         "expected type 'object'", b->kind->verb, b->kind->field, i,
                         bsonx_type_name(bson_iter_type(&ops)));
        else if (rc == 0)
            rc = wb_statement(t, c, b, i, &op, &info, &e);
        if (rc == MS_ERR_MAX_TIME_MS_EXPIRED && !b->need_create) {
            /* MongoDB: an interruption fails the whole command, and what the batch wrote
             * before it (earlier statements, earlier documents of a multi statement)
             * stays written. So: stop here, commit, answer MaxTimeMSExpired. */
            b->expired = e;
            bson_destroy(&info);
            break;
        }
        if (!b->need_create && rc != 0 && !is_fatal(rc))
            write_error(&b->errs, &b->nerr, i, &e, &info);
        bson_destroy(&info);
        if (b->need_create) return 0;  /* nothing written: created, then run again */
        if (rc != 0 && is_fatal(rc)) {
            *err = e;
            return rc;
        }
        if (rc != 0 && b->ordered) break;
    }
    return fp_late(&b->fpe, err);   /* error, crash (a hang ran before the writer lock) */
}

static void wbatch_init(wbatch_t *b, const wbatch_kind_t *kind) {
    memset(b, 0, sizeof *b);
    b->kind = kind;
    bson_init(&b->errs);
    bson_init(&b->upserted);
    bson_init(&b->last_upserted);
}

static void wbatch_free(wbatch_t *b) {
    sess_write_free(&b->sw);
    buf_free(&b->touched);
    bson_destroy(&b->errs);
    bson_destroy(&b->upserted);
    bson_destroy(&b->last_upserted);
    shv_filter_release(b->own);
}

/* A write command, as MongoDB runs one: the namespace and the shard version check, the
 * batch ({<verb>: coll, <field>: [...], ordered}), one transaction over it (creating the
 * collection first when a statement needs it), then the reply {n, nModified?, upserted?,
 * writeErrors?}. Between the COMMIT and the reply stands hangAfterWriteCommit. */
static int wbatch_command(cmd_ctx_t *ctx, const wbatch_kind_t *kind, bson_t *reply,
                          ms_error_t *err) {
    wbatch_t b;
    bson_iter_t it;
    int rc, nops = 0;
    wbatch_init(&b, kind);
    b.ctx = ctx;
    if ((rc = shardd_ns_versioned(ctx, b.ns, sizeof b.ns, &b.own, err)) != 0) goto out;
    if (!cmd_field(ctx, kind->field, &it) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &b.ops)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field '%s.%s' is missing", kind->verb,
                     kind->field);
        goto out;
    }
    /* Bounded by the message: each entry takes bytes of it. */
    for (bson_iter_t cnt = b.ops; bson_iter_next(&cnt);) nops++;
    if (nops > MS_WRITE_BATCH_OPS_MAX) {
        rc = err_set(err, MS_ERR_INVALID_LENGTH, "Write batch sizes must be between 1 and %d. "
                     "Got %d operations.", MS_WRITE_BATCH_OPS_MAX, nops);
        goto out;
    }
    b.ordered = cmd_flag(ctx, "ordered", true);
    if ((rc = sess_write_parse(ctx->req, nops, &b.sw, err)) != 0) goto out;
    fp_eval_early(FP_BEFORE_WRITE_COMMIT, &b.fpe);
    if ((rc = write_creating(ctx, b.ns, wbatch_txn, &b, &b.need_create, &b.crit_refused,
                             err)) != 0) {
        if (b.crit_refused) crit_wait_after_refusal(ctx, b.ns, rc);
        goto out;
    }
    if ((rc = fp_eval(FP_AFTER_WRITE_COMMIT, err)) != 0) goto out;
    if (b.expired.code) {
        *err = b.expired;
        rc = b.expired.code;
        log_info("write stopped by maxTimeMS cmd=%s ns=%s n=%lld", kind->verb, b.ns,
                 (long long)b.n);
        goto out;
    }
    /* int32 as MongoDB sends them: libmongoc reads a write reply's n only as int32 (an
     * int64 n gave insertedCount 0). A batch holds at most 100,000 statements. */
    BSON_APPEND_INT32(reply, "n", (int32_t)b.n);
    if (kind->counts_modified) {
        BSON_APPEND_INT32(reply, "nModified", (int32_t)b.nmod);
        if (b.nups) BSON_APPEND_ARRAY(reply, "upserted", &b.upserted);
    }
    if (b.nerr) BSON_APPEND_ARRAY(reply, "writeErrors", &b.errs);
out:
    wbatch_free(&b);
    return rc;
}

/* ---- insert ------------------------------------------------------------------------- */

/* One document: stored with _id first (a new ObjectId when it has none). */
static int insert_op(store_txn_t *t, store_coll_t *c, wbatch_t *b, int index, const bson_t *op,
                     bson_t *info, ms_error_t *e) {
    bson_t doc;
    int rc;
    (void)index;
    if (!c) {
        b->need_create = true;
        return 0;
    }
    with_id_first(op, &doc);
    rc = store_write_doc(t, c, 0, NULL, &doc, NULL, info, e);
    if (rc == 0) wb_touch(b, c, &doc);
    bson_destroy(&doc);
    if (rc == 0) b->n++;
    return rc;
}

static const wbatch_kind_t WB_INSERT = {"insert", "documents", insert_op, false};

int cmd_insert(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return wbatch_command(ctx, &WB_INSERT, reply, err);
}

/* ---- find / getMore / killCursors --------------------------------------------------- */

/* A find option that must be a document: a view of it, or TypeMismatch naming it. */
static int find_doc_option(const bson_iter_t *it, const char *name, bson_t *out, ms_error_t *err) {
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bsonx_view_container(it, out))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field '%s' must be an object", name);
    return 0;
}

/* A find option that must be a number (non_negative: BadValue below 0). */
static int find_num_option(const bson_iter_t *it, const char *name, bool non_negative,
                           int64_t *out, ms_error_t *err) {
    if (!bsonx_is_number(it))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field '%s' must be a number", name);
    /* The rules dispatch applies to a find's own fields (common/validate.h), here for the
     * find inside an explain as well. */
    return non_negative ? val_int64_min(it, name, 0, out, err) : val_int64(it, name, out, err);
}

/* The command's `let` ({name: <constant expression>}, $$name in $expr and pipeline
 * updates) as a view into cmd, or *out NULL when absent. A non-document is TypeMismatch;
 * its names and expressions are checked here once (evaluated: FailedToParse for a bad
 * name, the expression's own error) so that a bad `let` fails the whole command. */
static int command_let(const bson_t *cmd, const char *verb, bson_t *view, const bson_t **out,
                       ms_error_t *err) {
    bson_iter_t it;
    expr_vars_t *vars = NULL;
    int rc;
    *out = NULL;
    if (!bson_iter_init_find(&it, cmd, "let")) return 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bsonx_view_container(&it, view))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field '%s.let' is the wrong type '%s', "
                       "expected type 'object'", verb, bsonx_type_name(bson_iter_type(&it)));
    if ((rc = expr_vars_from_let(view, &vars, err)) != 0) return rc;
    expr_vars_free(vars);
    *out = view;
    return 0;
}

/* Parses a find command document (find itself, or the inner one of explain). */
static int parse_find(const bson_t *cmd, const char *db, char *ns, size_t nssz, find_args_t *fa,
                      ms_error_t *err) {
    bson_iter_t it;
    bson_t d, letv;
    const bson_t *let = NULL;
    int rc;
    memset(fa, 0, sizeof *fa);
    fa->batch_size = -1;
    if ((rc = command_let(cmd, "find", &letv, &let, err)) != 0) return rc;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it) || !BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "find needs a collection name");
    {   /* explain's inner find was not seen by dispatch's name check */
        uint32_t clen = 0;
        const char *coll = bson_iter_utf8(&it, &clen);
        if ((rc = val_coll_name(db, coll, clen, false, err)) != 0) return rc;
    }
    if ((size_t)snprintf(ns, nssz, "%s.%s", db, bson_iter_utf8(&it, NULL)) >= nssz)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace too long");
    fa->ns = ns;
    /* A field given twice (BSON allows it) replaces the first: what the first built is
     * freed, or every such request leaked it (found by tests/fuzz/fuzz_wire.c). */
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "filter") == 0) {
            if ((rc = find_doc_option(&it, k, &d, err)) != 0) return rc;
            if (fa->filter) bson_destroy(fa->filter);
            query_free(fa->q);
            fa->q = NULL;
            fa->filter = bson_copy(&d);
            if ((rc = query_compile_let(&d, let, &fa->q, err)) != 0) return rc;
        } else if (strcmp(k, "projection") == 0) {
            if ((rc = find_doc_option(&it, k, &d, err)) != 0) return rc;
            projection_free(fa->proj);
            fa->proj = NULL;
            if (!bson_empty(&d) && (rc = projection_compile(&d, &fa->proj, err)) != 0) return rc;
        } else if (strcmp(k, "sort") == 0) {
            if ((rc = find_doc_option(&it, k, &d, err)) != 0) return rc;
            sortspec_free(fa->sort);
            fa->sort = NULL;
            if (!bson_empty(&d) && (rc = sortspec_compile(&d, &fa->sort, err)) != 0) return rc;
        } else if (strcmp(k, "hint") == 0) {
            if (fa->hint) bson_destroy(fa->hint);
            fa->hint = NULL;
            if (BSON_ITER_HOLDS_UTF8(&it)) {
                fa->hint = bson_new();
                BSON_APPEND_UTF8(fa->hint, "$hint", bson_iter_utf8(&it, NULL));
            } else if (BSON_ITER_HOLDS_DOCUMENT(&it) && bsonx_view_container(&it, &d)) {
                if (!bson_empty(&d)) fa->hint = bson_copy(&d);
            } else {
                return err_set(err, MS_ERR_FAILED_TO_PARSE, "hint must be a string or an object");
            }
        } else if (strcmp(k, "skip") == 0) {
            if ((rc = find_num_option(&it, k, true, &fa->skip, err)) != 0) return rc;
        } else if (strcmp(k, "limit") == 0) {
            if ((rc = find_num_option(&it, k, true, &fa->limit, err)) != 0) return rc;
        } else if (strcmp(k, "batchSize") == 0) {
            if ((rc = find_num_option(&it, k, true, &fa->batch_size, err)) != 0) return rc;
        } else if (strcmp(k, "singleBatch") == 0) {
            fa->single_batch = bsonx_truthy(&it);
        }
    }
    return 0;
}

int cmd_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8], ns2[MS_NS_BYTES_MAX + 8];
    find_args_t fa;
    int rc;
    memset(&fa, 0, sizeof fa);
    if ((rc = shardd_ns(ctx, ns, sizeof ns, err)) != 0) return rc;
    if ((rc = parse_find(ctx->req, ctx->db, ns2, sizeof ns2, &fa, err)) != 0) goto fail;
    if (store_sdoc_coll_of(ns)) {   /* the shard's own migration documents (store_docs.c) */
        rc = store_sdoc_find(app->st, ns, fa.q, fa.limit, reply, err);
        goto fail;
    }
    if ((rc = version_check(ctx, ns, &fa.own, err)) != 0) goto fail;
    fa.ns = ns;
    return plan_find(app->st, app->cursors, &fa, reply, err);  /* takes fa over */
fail:
    find_args_free(&fa);
    return rc;
}

int cmd_get_more(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    bson_iter_t it;
    int64_t id = 0, bs = 0;
    char ns[MS_NS_BYTES_MAX + 8];
    if (!bsonx_as_int64(&ctx->arg, &id))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "getMore needs a cursor id (long)");
    if (!cmd_field(ctx, "collection", &it) || !BSON_ITER_HOLDS_UTF8(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'getMore.collection' is missing");
    snprintf(ns, sizeof ns, "%s.%s", ctx->db, bson_iter_utf8(&it, NULL));
    if (cmd_field(ctx, "batchSize", &it) && (!bsonx_as_int64(&it, &bs) || bs < 0))
        return err_set(err, MS_ERR_BAD_VALUE, "batchSize must be a non-negative number");
    /* MongoDB takes getMore's maxTimeMS only as the await time of a tailable awaitData
     * cursor, which we do not have; an ordinary cursor runs on what its find's maxTimeMS
     * left (plan_get_more). maxTimeMS: 0 means none and is accepted. */
    if (op_deadline_ms() > 0)
        return err_set(err, MS_ERR_BAD_VALUE,
                       "cannot set maxTimeMS on getMore command for a non-awaitData cursor");
    return plan_get_more(app->st, app->cursors, id, ns, bs, reply, err);
}

int cmd_kill_cursors(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    bson_iter_t it, ci;
    if (!BSON_ITER_HOLDS_UTF8(&ctx->arg))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "killCursors needs a collection name");
    if (!cmd_field(ctx, "cursors", &it) || !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &ci))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'killCursors.cursors' is missing");
    int rc = cmd_check_cursor_ids(ctx, err);
    if (rc) return rc;
    curs_kill_ids(app->cursors, &ci, false, reply);
    return 0;
}

/* ---- update ------------------------------------------------------------------------- */

/* The document an upsert inserts: the query's equality fields, then the update. */
static int upsert_doc(const bson_t *q, const update_t *u, bson_t *out, ms_error_t *err) {
    bson_t seed, applied;
    bool changed;
    int rc;
    if ((rc = update_upsert_seed(q, &seed, err)) != 0) return rc;
    rc = update_apply(u, &seed, true, &applied, &changed, err);
    bson_destroy(&seed);
    if (rc != 0) return rc;
    {
        bson_t ordered;   /* may be a view of applied: copy before applied goes */
        with_id_first(&applied, &ordered);
        bson_copy_to(&ordered, out);
        bson_destroy(&ordered);
    }
    bson_destroy(&applied);
    return 0;
}

/* New documents must stay in this shard's chunks (MongoDB: WouldChangeOwningShard). */
static int check_owned(const store_coll_t *c, shv_filter_t *own, const bson_t *doc,
                       ms_error_t *err) {
    buf_t sk = {0};
    bool ok;
    if (!own) return 0;
    if (keys_extract(c->sharded ? &c->sk : shv_filter_pattern(own), doc, NULL, &sk, err) != 0) {
        buf_free(&sk);
        return err->code;
    }
    ok = shv_filter_owns(own, sk.data, sk.len);
    buf_free(&sk);
    if (!ok)
        return err_set(err, MS_ERR_WOULD_CHANGE_OWNING_SHARD,
                       "the document's new shard key belongs to another "
                       "shard; update it through the router");
    return 0;
}

/* The rowids a write statement acts on: documents matching q that this shard owns (at
 * most one when limit is 1) and, when the router narrowed the statement, whose key lies in
 * its $_shardKeyRanges; found by the planner like a find. *rids is the caller's. */
static int statement_rowids(store_txn_t *t, store_coll_t *c, const wbatch_t *b, const bson_t *q,
                            query_t *qc, int64_t limit, const krset_t *ranges, int64_t **rids,
                            size_t *nr, ms_error_t *e) {
    plan_query_t eq;
    memset(&eq, 0, sizeof eq);
    eq.filter = q;
    eq.q = qc;
    eq.limit = limit;
    eq.own = b->own;
    eq.ranges = ranges;
    return plan_match_rowids(t, c, &eq, rids, nr, e);
}

/* A statement's $_shardKeyRanges (the router's narrowing of a multi-write it retries on a
 * shard: docs/versioning-and-routing.md "Multi-document writes across a migration") into
 * *ranges, and *narrowed = whether it had one. It restricts the ownership filter, so it
 * needs a versioned request on a sharded collection: without one it is refused (BadValue)
 * rather than ignored, as an ignored narrowing would write outside the ranges. */
static int statement_ranges(const wbatch_t *b, const bson_t *op, krset_t *ranges,
                            bool *narrowed, ms_error_t *e) {
    bson_iter_t it;
    char field[64];
    *narrowed = false;
    memset(ranges, 0, sizeof *ranges);
    if (!bson_iter_init_find(&it, op, "$_shardKeyRanges")) return 0;
    snprintf(field, sizeof field, "%s.%s.$_shardKeyRanges", b->kind->verb, b->kind->field);
    if (!b->own)
        return err_set(e, MS_ERR_BAD_VALUE, "%s needs a shardVersion of a sharded collection",
                       field);
    *narrowed = true;
    return krset_parse(&it, field, ranges, e);
}

/* An upsert's new document must lie in the statement's ranges too (the router sends the
 * range of the upsert's shard key; anything else is a request we did not build). */
static int check_in_ranges(const store_coll_t *c, shv_filter_t *own, const krset_t *ranges,
                           const bson_t *doc, ms_error_t *err) {
    buf_t sk = {0};
    int rc = 0;
    if (!own || !ranges) return 0;
    if (keys_extract(c->sharded ? &c->sk : shv_filter_pattern(own), doc, NULL, &sk, err) != 0)
        rc = err->code;
    else if (!krset_contains(ranges, sk.data, sk.len))
        rc = err_set(err, MS_ERR_BAD_VALUE, "the upsert's document lies outside the statement's "
                     "$_shardKeyRanges");
    buf_free(&sk);
    return rc;
}

/* One update statement {q, u, upsert?, multi?}: the matching documents (one unless
 * multi) changed through the single write path, or the upsert's document inserted. */
static int update_op(store_txn_t *t, store_coll_t *c, wbatch_t *b, int index,
                     const bson_t *op, bson_t *info, ms_error_t *e) {
    bson_t q = BSON_INITIALIZER, u, afs, letv;
    bson_iter_t it;
    query_t *qc = NULL;
    update_t *uc = NULL;
    update_opts_t uo = {0};
    bool multi = false, upsert = false, is_pipeline;
    int64_t *rids = NULL;
    size_t nr = 0;
    krset_t ranges = {0};
    bool narrowed = false;
    int rc;
    if (bson_iter_init_find(&it, op, "q") && !(BSON_ITER_HOLDS_DOCUMENT(&it) && bsonx_view_container(&it, &q)))
        return err_set(e, MS_ERR_TYPE_MISMATCH, "BSON field 'update.updates.q' must be an object");
    if (!bson_iter_init_find(&it, op, "u") || !bsonx_view_container(&it, &u))
        return err_set(e, MS_ERR_FAILED_TO_PARSE, "BSON field 'update.updates.u' is missing or "
                       "not an object");
    is_pipeline = BSON_ITER_HOLDS_ARRAY(&it);
    if (bson_iter_init_find(&it, op, "multi")) multi = bsonx_truthy(&it);
    if (bson_iter_init_find(&it, op, "upsert")) upsert = bsonx_truthy(&it);
    if (bson_iter_init_find(&it, op, "arrayFilters")) {
        if (!BSON_ITER_HOLDS_ARRAY(&it) || !bsonx_view_container(&it, &afs))
            return err_set(e, MS_ERR_TYPE_MISMATCH, "BSON field 'update.updates.arrayFilters' is "
                           "the wrong type '%s', expected type 'array'",
                           bsonx_type_name(bson_iter_type(&it)));
        uo.array_filters = &afs;
    }
    (void)command_let(b->ctx->req, "update", &letv, &uo.let, e);   /* checked by cmd_update */
    uo.query = &q;
    if ((rc = query_compile_let(&q, uo.let, &qc, e)) != 0) goto out;
    if ((rc = update_compile_opts(&u, is_pipeline, &uo, &uc, e)) != 0) goto out;
    if (multi && update_is_replacement(uc)) {
        rc = err_set(e, MS_ERR_FAILED_TO_PARSE,
                     "multi update is not supported for replacement-style update");
        goto out;
    }
    if ((rc = statement_ranges(b, op, &ranges, &narrowed, e)) != 0) goto out;
    if (c && (rc = statement_rowids(t, c, b, &q, qc, multi ? 0 : 1, narrowed ? &ranges : NULL,
                                    &rids, &nr, e)) != 0)
        goto out;
    for (size_t i = 0; i < nr; i++) {
        bson_t doc, nd;
        bool changed = false;
        if (i % MS_INTERRUPT_CHECK_DOCS == MS_INTERRUPT_CHECK_DOCS - 1 && (rc = op_check(e)) != 0)
            goto out;
        if ((rc = store_get_by_rowid(t, c, rids[i], &doc, e)) != 0) goto out;
        rc = update_apply(uc, &doc, false, &nd, &changed, e);
        if (rc == 0 && changed) {
            rc = check_owned(c, b->own, &nd, e);
            if (rc == 0) rc = store_write_doc(t, c, rids[i], &doc, &nd, NULL, info, e);
        }
        if (rc == 0) wb_touch(b, c, &nd);
        bson_destroy(&doc);
        if (rc == 0) bson_destroy(&nd);
        if (rc != 0) goto out;
        b->n++;
        if (changed) b->nmod++;
    }
    if (nr == 0 && upsert) {
        bson_t nd;
        int64_t rid;
        if (!c) {
            b->need_create = true;
            goto out;
        }
        if ((rc = upsert_doc(&q, uc, &nd, e)) != 0) goto out;
        rc = check_owned(c, b->own, &nd, e);
        if (rc == 0) rc = check_in_ranges(c, b->own, narrowed ? &ranges : NULL, &nd, e);
        if (rc == 0) rc = store_write_doc(t, c, 0, NULL, &nd, &rid, info, e);
        if (rc == 0) wb_touch(b, c, &nd);
        if (rc == 0) {
            bson_iter_t idit;
            wb_add_upserted(b, index, bson_iter_init_find(&idit, &nd, "_id") ? &idit : NULL);
            b->n++;
        }
        bson_destroy(&nd);
    }
out:
    free(rids);
    krset_free(&ranges);
    query_free(qc);
    update_free(uc);
    return rc;
}

static const wbatch_kind_t WB_UPDATE = {"update", "updates", update_op, true};

int cmd_update(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_t letv;
    const bson_t *let;
    int rc = command_let(ctx->req, "update", &letv, &let, err);
    if (rc) return rc;
    return wbatch_command(ctx, &WB_UPDATE, reply, err);
}

/* ---- delete ------------------------------------------------------------------------- */

/* One delete statement {q, limit: 0 | 1}: the matching documents (at most one with
 * limit 1) removed through the single write path. */
static int delete_op(store_txn_t *t, store_coll_t *c, wbatch_t *b, int index,
                     const bson_t *op, bson_t *info, ms_error_t *e) {
    bson_t q = BSON_INITIALIZER;
    bson_iter_t it;
    query_t *qc = NULL;
    int64_t limit = 0, *rids = NULL;
    size_t nr = 0;
    krset_t ranges = {0};
    bool narrowed = false;
    int rc;
    (void)index;
    (void)info;
    if (!bson_iter_init_find(&it, op, "q") || !BSON_ITER_HOLDS_DOCUMENT(&it) || !bsonx_view_container(&it, &q))
        return err_set(e, MS_ERR_FAILED_TO_PARSE, "BSON field 'delete.deletes.q' is missing");
    if (!bson_iter_init_find(&it, op, "limit") || !bsonx_as_int64(&it, &limit))
        return err_set(e, MS_ERR_FAILED_TO_PARSE, "BSON field 'delete.deletes.limit' is missing");
    if (limit != 0 && limit != 1)
        return err_set(e, MS_ERR_FAILED_TO_PARSE, "The limit field in delete objects must be 0 or "
                       "1. Got %lld", (long long)limit);
    {
        bson_t letv;
        const bson_t *let = NULL;
        (void)command_let(b->ctx->req, "delete", &letv, &let, e);   /* checked by cmd_delete */
        if ((rc = query_compile_let(&q, let, &qc, e)) != 0) return rc;
    }
    if ((rc = statement_ranges(b, op, &ranges, &narrowed, e)) != 0) goto out;
    if (!c) goto out;
    if ((rc = statement_rowids(t, c, b, &q, qc, limit, narrowed ? &ranges : NULL, &rids, &nr,
                               e)) != 0)
        goto out;
    for (size_t i = 0; i < nr; i++) {
        bson_t doc;
        if (i % MS_INTERRUPT_CHECK_DOCS == MS_INTERRUPT_CHECK_DOCS - 1 && (rc = op_check(e)) != 0)
            goto out;
        if ((rc = store_get_by_rowid(t, c, rids[i], &doc, e)) != 0) goto out;
        rc = store_write_doc(t, c, rids[i], &doc, NULL, NULL, NULL, e);
        if (rc == 0) wb_touch(b, c, &doc);
        bson_destroy(&doc);
        if (rc != 0) goto out;
        b->n++;
    }
out:
    free(rids);
    krset_free(&ranges);
    query_free(qc);
    return rc;
}

static const wbatch_kind_t WB_DELETE = {"delete", "deletes", delete_op, false};

int cmd_delete(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_t letv;
    const bson_t *let;
    int rc = command_let(ctx->req, "delete", &letv, &let, err);
    if (rc) return rc;
    return wbatch_command(ctx, &WB_DELETE, reply, err);
}

/* ---- count / distinct --------------------------------------------------------------- */

typedef struct read_arg {
    const char *ns;
    plan_query_t eq;
    const char *key;            /* distinct */
    bson_t *values;             /* distinct: collected values {"0": v, ...} */
    int64_t n;
    size_t bytes;
} read_arg_t;

static int count_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    read_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    plan_t p;
    scan_pos_t pos = {0};
    int rc;
    plan_count_t acc = {0, a->eq.skip, a->eq.limit};
    if (!c) return 0;
    if ((rc = plan_choose(t, c, &a->eq, &p, err)) != 0) return rc;
    p.blocking_sort = false;
    rc = plan_scan(t, c, &p, &a->eq, &pos, plan_count_cb, &acc, err);
    a->n = acc.n;
    plan_free(&p);
    scan_pos_free(&pos);
    return rc;
}

int cmd_count(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    read_arg_t a;
    bson_iter_t it;
    bson_t q = BSON_INITIALIZER, hint;
    query_t *qc = NULL;
    int rc;
    memset(&a, 0, sizeof a);
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, &a.eq.own, err)) != 0) goto out;
    if (cmd_field(ctx, "query", &it) && !BSON_ITER_HOLDS_NULL(&it) && !bsonx_view_container(&it, &q)) {
        rc = err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'count.query' must be an object");
        goto out;
    }
    if ((rc = query_compile(&q, &qc, err)) != 0) goto out;
    if (cmd_field(ctx, "skip", &it) && (!bsonx_as_int64(&it, &a.eq.skip) || a.eq.skip < 0)) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "skip value is negative in count query");
        goto out;
    }
    if (cmd_field(ctx, "limit", &it) && !bsonx_as_int64(&it, &a.eq.limit)) {
        rc = err_set(err, MS_ERR_TYPE_MISMATCH, "limit must be a number");
        goto out;
    }
    if (a.eq.limit < 0) a.eq.limit = -a.eq.limit;
    if (cmd_field(ctx, "hint", &it)) {
        if (BSON_ITER_HOLDS_UTF8(&it)) a.eq.hint_name = bson_iter_utf8(&it, NULL);
        else if (bsonx_view_container(&it, &hint) && !bson_empty(&hint)) a.eq.hint = &hint;
    }
    a.ns = ns;
    a.eq.filter = &q;
    a.eq.q = qc;
    if ((rc = store_read(app->st, count_fn, &a, err)) != 0) goto out;
    /* int32 when it fits, as MongoDB's appendNumber: drivers read both. */
    if (a.n <= INT32_MAX) BSON_APPEND_INT32(reply, "n", (int32_t)a.n);
    else BSON_APPEND_INT64(reply, "n", a.n);
out:
    query_free(qc);
    shv_filter_release(a.eq.own);
    return rc;
}

static void distinct_value(void *arg, const bson_iter_t *v) {
    read_arg_t *a = arg;
    char key[24];
    snprintf(key, sizeof key, "%lld", (long long)a->n++);
    bsonx_append_iter(a->values, key, v);
}

static int distinct_cb(void *arg, int64_t rid, const bson_t *doc, ms_error_t *err) {
    read_arg_t *a = arg;
    (void)rid;
    store_path_values(doc, a->key, distinct_value, a);
    if (a->values->len > 4 * (uint32_t)MS_DOC_BYTES_MAX)
        return err_set(err, MS_ERR_BSON_OBJECT_TOO_LARGE, "distinct too big, 16mb cap");
    return 0;
}

static int distinct_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    read_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    plan_t p;
    scan_pos_t pos = {0};
    int rc;
    if (!c) return 0;
    if ((rc = plan_choose(t, c, &a->eq, &p, err)) != 0) return rc;
    rc = plan_scan(t, c, &p, &a->eq, &pos, distinct_cb, a, err);
    plan_free(&p);
    scan_pos_free(&pos);
    return rc;
}

/* A value of the collected array by position (bson_iter_t arrays would be misaligned). */
typedef struct vpos {
    const bson_t *doc;
    uint32_t off, keylen;
} vpos_t;

static bool vpos_iter(const vpos_t *p, bson_iter_t *it) {
    return bson_iter_init_from_data_at_offset(it, bson_get_data(p->doc), p->doc->len, p->off,
                                              p->keylen);
}

static int vpos_cmp(const void *x, const void *y) {
    bson_iter_t a, b;
    if (!vpos_iter(x, &a) || !vpos_iter(y, &b)) return 0;
    return bsonx_compare_values(&a, &b);
}

int cmd_distinct(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    read_arg_t a;
    bson_iter_t it;
    bson_t q = BSON_INITIALIZER, values = BSON_INITIALIZER, out;
    query_t *qc = NULL;
    vpos_t *v = NULL;
    int rc;
    memset(&a, 0, sizeof a);
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, &a.eq.own, err)) != 0) goto done;
    if (!cmd_field(ctx, "key", &it) || !BSON_ITER_HOLDS_UTF8(&it) || !*bson_iter_utf8(&it, NULL)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'distinct.key' is missing");
        goto done;
    }
    a.key = bson_iter_utf8(&it, NULL);
    if (cmd_field(ctx, "query", &it) && !BSON_ITER_HOLDS_NULL(&it) && !bsonx_view_container(&it, &q)) {
        rc = err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'distinct.query' must be an object");
        goto done;
    }
    if ((rc = query_compile(&q, &qc, err)) != 0) goto done;
    a.ns = ns;
    a.eq.filter = &q;
    a.eq.q = qc;
    a.values = &values;
    if ((rc = store_read(app->st, distinct_fn, &a, err)) != 0) goto done;
    /* Sort in BSON order, then keep one of each (1 and 1.0 are the same value). */
    v = calloc((size_t)a.n + 1, sizeof *v);
    if (!v) {
        rc = err_set(err, MS_ERR_INTERNAL, "out of memory");
        goto done;
    }
    {
        int64_t n = 0, u = 0;
        if (bson_iter_init(&it, &values))
            while (bson_iter_next(&it) && n < a.n) {
                v[n].doc = &values;
                v[n].off = bson_iter_offset(&it);
                v[n].keylen = bson_iter_key_len(&it);
                n++;
            }
        if (n > 1) qsort(v, (size_t)n, sizeof *v, vpos_cmp);
        BSON_APPEND_ARRAY_BEGIN(reply, "values", &out);
        for (int64_t i = 0; i < n; i++) {
            char key[24];
            bson_iter_t vi;
            if (i > 0 && vpos_cmp(&v[i - 1], &v[i]) == 0) continue;
            if (!vpos_iter(&v[i], &vi)) continue;
            snprintf(key, sizeof key, "%lld", (long long)u++);
            bsonx_append_iter(&out, key, &vi);
        }
        bson_append_array_end(reply, &out);
        if (reply->len > MS_DOC_BYTES_MAX) {
            rc = err_set(err, MS_ERR_BSON_OBJECT_TOO_LARGE, "distinct too big, 16mb cap");
            goto done;
        }
    }
done:
    free(v);
    bson_destroy(&values);
    query_free(qc);
    shv_filter_release(a.eq.own);
    return rc;
}

/* ---- findAndModify ------------------------------------------------------------------ */

typedef struct fam_arg {
    const char *ns;
    bson_t query;
    query_t *q;
    sortspec_t *sort;
    update_t *u;
    projection_t *proj;
    bool remove, want_new, upsert;
    shv_filter_t *own;
    bool need_create;
    bson_t *reply;
    bson_t err_info;
    cmd_ctx_t *ctx;
    bool crit_refused;
    fp_early_t fpe;          /* hangBeforeWriteCommit, evaluated before the transaction */
    sess_write_t sw;         /* lsid, txnNumber, stmtId of a retryable findAndModify */
    buf_t touched;           /* the encoded shard key of the document it wrote */
    bool touched_set;
} fam_arg_t;

static void fam_touch(fam_arg_t *a, const store_coll_t *c, const bson_t *doc) {
    ms_error_t e;
    if (a->sw.on && sess_key_of(c, doc, NULL, &a->touched, &a->touched_set, &e) != 0)
        a->touched_set = false;
}

static void fam_value(fam_arg_t *a, const bson_t *doc, ms_error_t *err) {
    if (!doc) {
        BSON_APPEND_NULL(a->reply, "value");
        return;
    }
    if (a->proj) {
        bson_t out;
        if (projection_apply(a->proj, doc, &out, err) == 0) {
            BSON_APPEND_DOCUMENT(a->reply, "value", &out);
            bson_destroy(&out);
            return;
        }
    }
    BSON_APPEND_DOCUMENT(a->reply, "value", doc);
}

static int fam_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    fam_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->ns);
    int64_t *rids = NULL;
    size_t nr = 0;
    bson_t leo;
    int rc = 0;
    bson_reinit(a->reply);  /* a run after an implicit creation starts over */
    a->need_create = false;
    if (crit_check_write(a->ctx, a->ns, &a->err_info, &a->crit_refused, err) != 0)
        return err->code;
    if (c) {
        plan_query_t eq;
        memset(&eq, 0, sizeof eq);
        eq.filter = &a->query;
        eq.q = a->q;
        eq.sort = a->sort;
        eq.limit = 1;
        eq.own = a->own;
        if ((rc = plan_match_rowids(t, c, &eq, &rids, &nr, err)) != 0) goto out;
    }
    if (nr > 0) {
        bson_t doc;
        if ((rc = store_get_by_rowid(t, c, rids[0], &doc, err)) != 0) goto out;
        if (a->remove) {
            rc = store_write_doc(t, c, rids[0], &doc, NULL, NULL, NULL, err);
            if (rc == 0) fam_touch(a, c, &doc);
            if (rc == 0) {
                BSON_APPEND_DOCUMENT_BEGIN(a->reply, "lastErrorObject", &leo);
                BSON_APPEND_INT32(&leo, "n", 1);
                bson_append_document_end(a->reply, &leo);
                fam_value(a, &doc, err);
            }
        } else {
            bson_t nd;
            bool changed = false;
            rc = update_apply(a->u, &doc, false, &nd, &changed, err);
            if (rc == 0) {
                if (changed) {
                    rc = check_owned(c, a->own, &nd, err);
                    if (rc == 0) rc = store_write_doc(t, c, rids[0], &doc, &nd, NULL, &a->err_info, err);
                }
                if (rc == 0) fam_touch(a, c, &nd);
                if (rc == 0) {
                    BSON_APPEND_DOCUMENT_BEGIN(a->reply, "lastErrorObject", &leo);
                    BSON_APPEND_INT32(&leo, "n", 1);
                    BSON_APPEND_BOOL(&leo, "updatedExisting", true);
                    bson_append_document_end(a->reply, &leo);
                    fam_value(a, a->want_new ? &nd : &doc, err);
                }
                bson_destroy(&nd);
            }
        }
        bson_destroy(&doc);
    } else if (a->upsert && !a->remove) {
        bson_t nd;
        bson_iter_t idit;
        if (!c) {
            a->need_create = true;
            goto out;
        }
        if ((rc = upsert_doc(&a->query, a->u, &nd, err)) != 0) goto out;
        rc = check_owned(c, a->own, &nd, err);
        if (rc == 0) rc = store_write_doc(t, c, 0, NULL, &nd, NULL, &a->err_info, err);
        if (rc == 0) fam_touch(a, c, &nd);
        if (rc == 0) {
            BSON_APPEND_DOCUMENT_BEGIN(a->reply, "lastErrorObject", &leo);
            BSON_APPEND_INT32(&leo, "n", 1);
            BSON_APPEND_BOOL(&leo, "updatedExisting", false);
            if (bson_iter_init_find(&idit, &nd, "_id")) bsonx_append_iter(&leo, "upserted", &idit);
            bson_append_document_end(a->reply, &leo);
            fam_value(a, a->want_new ? &nd : NULL, err);
        }
        bson_destroy(&nd);
    } else {
        BSON_APPEND_DOCUMENT_BEGIN(a->reply, "lastErrorObject", &leo);
        BSON_APPEND_INT32(&leo, "n", 0);
        if (!a->remove) BSON_APPEND_BOOL(&leo, "updatedExisting", false);
        bson_append_document_end(a->reply, &leo);
        fam_value(a, NULL, err);
    }
    if (rc == 0 && !a->need_create) rc = fp_late(&a->fpe, err);
out:
    free(rids);
    return rc;
}

/* A retryable findAndModify (lsid + txnNumber; stmtId, default 0): after the critical
 * section's check, answered from its record when it ran already, else run (fam_fn) and
 * its reply recorded in the same transaction. */
static int fam_retryable_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    fam_arg_t *a = arg;
    bson_t res;
    bool found = false;
    int rc;
    if (!a->sw.on) return fam_fn(t, arg, err);
    if (crit_check_write(a->ctx, a->ns, &a->err_info, &a->crit_refused, err) != 0)
        return err->code;
    if ((rc = sess_txn_begin(t, &a->sw.lsid, a->sw.txn, err)) != 0) return rc;
    if ((rc = sess_stmt_lookup(t, &a->sw.lsid, a->sw.txn, a->sw.stmt, &res, &found, err)) != 0)
        return rc;
    if (found) {
        bson_reinit(a->reply);
        bson_concat(a->reply, &res);
        bson_destroy(&res);
        a->need_create = false;
        return 0;
    }
    a->touched_set = false;
    if ((rc = fam_fn(t, arg, err)) != 0 || a->need_create) return rc;
    if (!a->touched_set &&
        (rc = sess_key_of(store_coll_get(t, a->ns), NULL, &a->query, &a->touched,
                          &a->touched_set, err)) != 0)
        return rc;
    rc = sess_stmt_record(t, &a->sw.lsid, a->sw.txn, a->sw.stmt, a->ns,
                          a->touched_set ? a->touched.data : NULL,
                          a->touched_set ? a->touched.len : 0, a->reply, err);
    if (rc) {
        err_prefix(err, "recording retryable findAndModify");
        err->code = MS_ERR_INTERNAL;
    }
    return rc ? MS_ERR_INTERNAL : 0;
}

int cmd_find_and_modify(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    char ns[MS_NS_BYTES_MAX + 8];
    fam_arg_t a;
    bson_iter_t it;
    bson_t d, letv, partial = BSON_INITIALIZER;
    const bson_t *let = NULL;
    bool has_update;
    int rc;
    memset(&a, 0, sizeof a);
    bson_init(&a.query);
    bson_init(&a.err_info);
    if ((rc = shardd_ns_versioned(ctx, ns, sizeof ns, &a.own, err)) != 0) goto out;
    a.ns = ns;
    a.ctx = ctx;
    a.remove = cmd_flag(ctx, "remove", false);
    a.want_new = cmd_flag(ctx, "new", false);
    a.upsert = cmd_flag(ctx, "upsert", false);
    has_update = cmd_field(ctx, "update", &it);
    if (has_update && a.remove) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "Cannot specify both an update and remove=true");
        goto out;
    }
    if (!has_update && !a.remove) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "Either an update or remove=true must be specified");
        goto out;
    }
    if (a.remove && a.upsert) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "Cannot specify both upsert=true and remove=true");
        goto out;
    }
    if (a.remove && a.want_new) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "Cannot specify both new=true and remove=true; "
                     "'remove' always returns the deleted document");
        goto out;
    }
    if ((rc = command_let(ctx->req, "findAndModify", &letv, &let, err)) != 0) goto out;
    {
        bson_iter_t qi;
        if (cmd_field(ctx, "query", &qi) && !BSON_ITER_HOLDS_NULL(&qi)) {
            if (!bsonx_view_container(&qi, &d)) {
                rc = err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'query' must be an object");
                goto out;
            }
            bson_destroy(&a.query);
            bson_copy_to(&d, &a.query);
        }
    }
    if ((rc = query_compile_let(&a.query, let, &a.q, err)) != 0) goto out;
    if (has_update) {
        update_opts_t uo = {0};
        bson_iter_t ai;
        bson_t afs;
        bool is_pipeline = BSON_ITER_HOLDS_ARRAY(&it);
        if (!bsonx_view_container(&it, &d)) {
            rc = err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'update' must be an object");
            goto out;
        }
        if (cmd_field(ctx, "arrayFilters", &ai)) {
            if (!BSON_ITER_HOLDS_ARRAY(&ai) || !bsonx_view_container(&ai, &afs)) {
                rc = err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'findAndModify.arrayFilters' "
                             "is the wrong type '%s', expected type 'array'",
                             bsonx_type_name(bson_iter_type(&ai)));
                goto out;
            }
            uo.array_filters = &afs;
        }
        uo.let = let;
        uo.query = &a.query;
        if ((rc = update_compile_opts(&d, is_pipeline, &uo, &a.u, err)) != 0) goto out;
    }
    if (cmd_field(ctx, "sort", &it) && bsonx_view_container(&it, &d) && !bson_empty(&d) &&
        (rc = sortspec_compile(&d, &a.sort, err)) != 0)
        goto out;
    if (cmd_field(ctx, "fields", &it) && bsonx_view_container(&it, &d) && !bson_empty(&d) &&
        (rc = projection_compile(&d, &a.proj, err)) != 0)
        goto out;
    a.reply = &partial;
    if ((rc = sess_write_parse(ctx->req, 1, &a.sw, err)) != 0) goto out;
    fp_eval_early(FP_BEFORE_WRITE_COMMIT, &a.fpe);
    if ((rc = write_creating(ctx, ns, fam_retryable_fn, &a, &a.need_create, &a.crit_refused, err)) == 0 &&
        (rc = fp_eval(FP_AFTER_WRITE_COMMIT, err)) == 0 && !a.need_create)
        bson_concat(reply, &partial);
    if (rc != 0 && !bson_empty(&a.err_info)) bson_concat(&ctx->err_info, &a.err_info);
    if (rc != 0 && a.crit_refused) crit_wait_after_refusal(ctx, ns, rc);
out:
    bson_destroy(&partial);
    bson_destroy(&a.query);
    bson_destroy(&a.err_info);
    query_free(a.q);
    sortspec_free(a.sort);
    update_free(a.u);
    projection_free(a.proj);
    shv_filter_release(a.own);
    sess_write_free(&a.sw);
    buf_free(&a.touched);
    return rc;
}

/* ---- explain ------------------------------------------------------------------------ */

/* The find a read command runs, for explain: count {query, skip, limit, hint} and
 * distinct {query} plan exactly as a find with that filter (MongoDB's count and distinct
 * go through the same query planner), appended to out. Other commands →
 * CommandNotSupported naming what explain supports. */
static int explain_as_find(const bson_t *inner, bson_t *out, ms_error_t *err) {
    static const char *const count_fields[] = {"skip", "limit", "hint", NULL};
    bson_iter_t it;
    const char *verb;
    bool is_count;
    if (!bson_iter_init(&it, inner) || !bson_iter_next(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "explain needs a command document");
    verb = bson_iter_key(&it);
    if (strcmp(verb, "find") == 0) {
        bson_concat(out, inner);
        return 0;
    }
    is_count = strcmp(verb, "count") == 0;
    if (!is_count && strcmp(verb, "distinct") != 0)
        return err_set(err, MS_ERR_COMMAND_NOT_SUPPORTED,
                       "explain of '%s' is not supported: explain supports find, count and "
                       "distinct", verb);
    bsonx_append_iter(out, "find", &it);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strcmp(k, "query") == 0) {
            bsonx_append_iter(out, "filter", &it);
        } else if (is_count) {
            for (int i = 0; count_fields[i]; i++)
                if (strcmp(k, count_fields[i]) == 0) {
                    int64_t v;
                    /* count's negative limit means its absolute value, not one batch */
                    if (strcmp(k, "limit") == 0 && bsonx_as_int64(&it, &v))
                        BSON_APPEND_INT64(out, "limit", v < 0 ? -v : v);
                    else
                        bsonx_append_iter(out, k, &it);
                }
        }
    }
    return 0;
}

/* The explained command is parsed by its own command's rules, as MongoDB's explain
 * does: a strict row's unknown field is 40415 naming the inner command
 * ("BSON field 'find.bogus' is an unknown field."). Dispatch checked only explain's own
 * fields. An unknown inner command is left to explain_as_find. */
static int explain_inner_strict(const bson_t *inner, ms_error_t *err) {
    bson_iter_t it;
    if (!bson_iter_init(&it, inner) || !bson_iter_next(&it)) return 0;
    for (int i = 0; i < shardd_cmd_table_len; i++) {
        const cmd_spec_t *spec = &shardd_cmd_table[i];
        if (strcmp(spec->name, bson_iter_key(&it)) != 0) continue;
        return (spec->flags & CMD_STRICT_FIELDS) ? cmd_check_strict_doc(spec, inner, err) : 0;
    }
    return 0;
}

/* explain (MongoDB's explain command, verbosities queryPlanner / executionStats /
 * allPlansExecution) of find, count or distinct. */
int cmd_explain(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char ns[MS_NS_BYTES_MAX + 8];
    bson_t inner, as_find = BSON_INITIALIZER;
    bson_iter_t it;
    find_args_t fa;
    const char *verbosity = "queryPlanner";
    int rc;
    memset(&fa, 0, sizeof fa);
    if (!BSON_ITER_HOLDS_DOCUMENT(&ctx->arg) || !bsonx_view_container(&ctx->arg, &inner)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "explain needs a command document");
        goto out;
    }
    if ((rc = explain_inner_strict(&inner, err)) != 0) goto out;
    if ((rc = explain_as_find(&inner, &as_find, err)) != 0) goto out;
    if (cmd_field(ctx, "verbosity", &it) && BSON_ITER_HOLDS_UTF8(&it)) {
        verbosity = bson_iter_utf8(&it, NULL);
        if (strcmp(verbosity, "queryPlanner") != 0 && strcmp(verbosity, "executionStats") != 0 &&
            strcmp(verbosity, "allPlansExecution") != 0) {
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "verbosity string must be one of "
                         "{'queryPlanner', 'executionStats', 'allPlansExecution'}");
            goto out;
        }
    }
    if ((rc = parse_find(&as_find, ctx->db, ns, sizeof ns, &fa, err)) != 0) goto out;
    if ((rc = version_check(ctx, ns, &fa.own, err)) != 0) goto out;
    rc = plan_explain_find(app->st, &fa, strcmp(verbosity, "queryPlanner") != 0, reply, err);
out:
    find_args_free(&fa);
    bson_destroy(&as_find);
    return rc;
}
