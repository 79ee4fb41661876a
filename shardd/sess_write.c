/*
 * sess_write.c — what the shard's write commands (cmd_crud.c) need to make a write
 * retryable, run by bin/shardd: the command's lsid, txnNumber and stmtIds (MongoDB's
 * write_ops parsing: statement i of a batch has stmtIds[i], or i without stmtIds;
 * findAndModify's stmtId defaults to 0), and the key a statement's record carries so that
 * session migration moves it with its chunk (sessions.h).
 */
#include "shardd/sessions.h"

#include <stdlib.h>
#include <string.h>

#include "common/bounds.h"
#include "common/bsonx.h"

static int parse_ids(bson_iter_t *it, int nops, sess_write_t *w, ms_error_t *err) {
    int rc;
    w->ids = calloc((size_t)(nops > 0 ? nops : 1), sizeof *w->ids);
    if (!w->ids) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "out of memory");
    if ((rc = cmd_parse_stmt_ids(it, nops, w->ids, err)) == 0) w->nids = nops;
    return rc;
}

int sess_write_parse(const bson_t *req, int nops, sess_write_t *w, ms_error_t *err) {
    bson_iter_t it, lt;
    memset(w, 0, sizeof *w);
    if (!bson_iter_init_find(&lt, req, "lsid") || !bson_iter_init_find(&it, req, "txnNumber"))
        return 0;   /* not a retryable write: runs as before, no record */
    if (!bsonx_as_int64(&it, &w->txn))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "txnNumber must be a number");
    if (w->txn < 0) return err_set(err, MS_ERR_BAD_VALUE, "txnNumber may not be negative");
    if (!BSON_ITER_HOLDS_DOCUMENT(&lt) || !bsonx_view_container(&lt, &w->lsid))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "lsid must be an object");
    if (!bson_iter_init_find(&it, &w->lsid, "id") || !BSON_ITER_HOLDS_BINARY(&it))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "BSON field 'lsid.id' is missing but a "
                       "required field");
    if (bson_iter_init_find(&it, req, "stmtIds")) {
        int rc = parse_ids(&it, nops, w, err);
        if (rc) {
            sess_write_free(w);
            return rc;
        }
    }
    if (bson_iter_init_find(&it, req, "stmtId")) {
        int64_t v;
        if (!bsonx_as_int64(&it, &v) || v < INT32_MIN || v > INT32_MAX)
            return err_set(err, MS_ERR_TYPE_MISMATCH, "stmtId must be a 32-bit integer");
        w->stmt = (int32_t)v;
    }
    w->on = true;
    return 0;
}

void sess_write_free(sess_write_t *w) {
    free(w->ids);
    w->ids = NULL;
    w->nids = 0;
}

int32_t sess_write_stmt_id(const sess_write_t *w, int i) {
    return w->ids && i < w->nids ? w->ids[i] : (int32_t)i;
}

int sess_key_of(const store_coll_t *c, const bson_t *doc, const bson_t *q, buf_t *out,
                bool *has, ms_error_t *err) {
    bounds_t b;
    int rc;
    *has = false;
    out->len = 0;
    if (!c || !c->sharded) return 0;
    if (doc) {
        if ((rc = keys_extract(&c->sk, doc, NULL, out, err)) != 0) return rc;
        *has = true;
        return 0;
    }
    memset(&b, 0, sizeof b);
    if (!q || bounds_from_filter(q, &c->sk, 1, &b, err) != 0) return 0;   /* no key: NULL */
    if (bounds_is_point(&b)) {
        buf_put(out, b.r[0].lo.data, b.r[0].lo.len);
        *has = true;
    }
    bounds_free(&b);
    return 0;
}
