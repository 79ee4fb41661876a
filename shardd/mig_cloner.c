/*
 * mig_cloner.c — the donor's chunk cloner source, run by bin/shardd: MongoDB's
 * MigrationChunkClonerSource (notes §1.3). It owns the clone list (the record ids of the
 * range at one snapshot, with the range's digest at that snapshot) and the write capture
 * (shardd/xfer.c's id lists), and it is the only code that touches the capture: it starts
 * and stops it for the donor's six-step driver (mig_donor.c), answers the driver's
 * questions about it, and serves the recipient's `_migrateClone` and `_transferMods`.
 * The capture's lock rule is written where it is declared (struct mig_donor, mig_priv.h):
 * the driver's thread creates and frees it; a command worker counts itself as a user
 * before using it outside the lock, and the driver frees it only once no user is left.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "shardd/mig.h"
#include "shardd/mig_priv.h"

/* Starts the write capture of [min, max) (before the clone list is read, so no write
 * falls between the two). */
int mig_cloner_start(mig_donor_t *d, ms_error_t *err) {
    xfer_t *x = NULL;
    int rc;
    if ((rc = xfer_start(d->m->app->st, d->ns, &d->min_enc, &d->max_enc, MS_MIG_CAPTURE_BYTES_MAX,
                         &x, err)) != 0)
        return rc;
    pthread_mutex_lock(&d->mu);
    d->x = x;
    d->capture_on = true;
    pthread_mutex_unlock(&d->mu);
    return 0;
}

/* The donor thread ends the write capture: cleared under mu, so no worker picks it up
 * any more, then freed once the workers using it have let go (see struct mig_donor). A
 * worker's use is short (one store read) unless a test holds it at a failpoint. */
void mig_cloner_stop(mig_donor_t *d) {
    xfer_t *x;
    pthread_mutex_lock(&d->mu);
    x = d->x;
    d->x = NULL;
    d->capture_on = false;
    while (d->x_users > 0) time_cond_wait_ms(&d->cv, &d->mu, 100);
    pthread_mutex_unlock(&d->mu);
    if (x) xfer_stop(d->m->app->st, x);
}

static int clone_list_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    clone_list_arg_t *a = arg;
    mig_donor_t *d = a->d;
    store_coll_t *c = store_coll_get(t, d->ns);
    int rc;
    if (!c) return 0;
    if ((rc = store_coll_stats(t, c, &a->coll_docs, &a->coll_bytes, NULL, NULL, err)) != 0) return rc;
    /* MongoDB's older too-big rule (notes §1.2): 250,000 documents, or 1.3 × the chunk
     * size over the average document size. */
    int64_t avg = a->coll_docs > 0 ? a->coll_bytes / a->coll_docs : 0;
    a->cap = MS_CHUNK_OBJECTS_MAX;
    if (avg > 0) {
        int64_t by_size = (int64_t)(1.3 * (double)d->max_chunk_bytes / (double)avg);
        if (by_size < a->cap) a->cap = by_size;
    }
    if (d->force_jumbo) a->cap = INT64_MAX / 2;
    /* One scan: the record ids in key order and the range's digest at this snapshot (the
     * capture adds every later write to it). */
    return mig_range_rowids_digest(t, c, &d->min_enc, &d->max_enc, (size_t)a->cap, &d->rids,
                                   &d->nrids, &d->digest_count, &d->digest_sum, err);
}

/* The clone list and the digest read one snapshot, taken where the capture's running
 * digest restarts: snapshot + captured changes = the range at any later moment. */
int mig_cloner_build_list(mig_donor_t *d, int64_t *cap, int64_t *coll_docs, int64_t *coll_bytes,
                          ms_error_t *err) {
    clone_list_arg_t ca = {.d = d};
    int rc = store_read_fenced(d->m->app->st, xfer_digest_reset, d->x, clone_list_fn, &ca, err);
    *cap = ca.cap;
    *coll_docs = ca.coll_docs;
    *coll_bytes = ca.coll_bytes;
    return rc;
}

/* The donor thread's reads of its own capture (it alone frees it: no lock needed). */
int mig_cloner_failed(mig_donor_t *d, ms_error_t *err) { return xfer_failed(d->x, err); }

void mig_cloner_pending(mig_donor_t *d, int64_t *ndel, int64_t *nreload, int64_t *bytes) {
    xfer_pending(d->x, ndel, nreload, bytes);
}

void mig_cloner_digest(mig_donor_t *d, int64_t *count, uint64_t *sum) {
    xfer_digest(d->x, count, sum);
}

/* currentOp's read, under d->mu (the capture may have ended: zeros). */
void mig_cloner_pending_locked(mig_donor_t *d, int64_t *ndel, int64_t *nreload, int64_t *bytes) {
    *ndel = *nreload = *bytes = 0;
    if (d->x) xfer_pending(d->x, ndel, nreload, bytes);
}

/* ---- served to the recipient: _migrateClone, _transferMods ------------------------------ */

/* The running donation of sessionId, with a reference (NULL + error when none). */
mig_donor_t *mig_donor_for(cmd_ctx_t *ctx, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_t *m = app->mig;
    bson_iter_t it;
    mig_donor_t *d = NULL;
    const char *sid = cmd_field(ctx, "sessionId", &it) && BSON_ITER_HOLDS_UTF8(&it)
                          ? bson_iter_utf8(&it, NULL) : "";
    pthread_mutex_lock(&m->mu);
    if (m->donor && !m->donor->done && strcmp(m->donor->co.session, sid) == 0) {
        d = m->donor;
        d->refs++;
    }
    pthread_mutex_unlock(&m->mu);
    if (!d)
        err_set(err, MS_ERR_CONFLICTING_OPERATION, "no active migration with session %s", sid);
    return d;
}

void mig_donor_release(mig_t *m, mig_donor_t *d) {
    pthread_mutex_lock(&m->mu);
    mig_donor_unref_locked(d);
    pthread_mutex_unlock(&m->mu);
}

typedef struct clone_batch_arg {
    mig_donor_t *d;
    bson_t *arr;
    int n;
    size_t bytes;
} clone_batch_arg_t;

/* Pops record ids and appends their current documents: gone ones are skipped, and so are
 * ones whose key left the range since the scan (the recipient never deletes what it should
 * not have got). At most MS_BATCH_BYTES_MAX, at least one document. */
static int clone_batch_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    clone_batch_arg_t *a = arg;
    mig_donor_t *d = a->d;
    store_coll_t *c = store_coll_get(t, d->ns);
    char k[16];
    if (!c) return err_set(err, MS_ERR_NAMESPACE_NOT_FOUND, "%s was dropped", d->ns);
    while (d->pos < d->nrids) {
        bson_t doc;
        buf_t key = {0};
        int rc = store_get_by_rowid(t, c, d->rids[d->pos], &doc, err);
        if (rc == MS_ERR_NO_MATCHING_DOCUMENT) {
            d->pos++;
            continue;
        }
        if (rc != 0) return rc;
        bool keep = keys_extract(&d->pat, &doc, NULL, &key, NULL) == 0 &&
                    mig_key_in_range(&key, &d->min_enc, &d->max_enc);
        buf_free(&key);
        if (keep) {
            if (a->n > 0 && a->bytes + doc.len > MS_BATCH_BYTES_MAX) {
                bson_destroy(&doc);
                break;
            }
            snprintf(k, sizeof k, "%d", a->n++);
            BSON_APPEND_DOCUMENT(a->arr, k, &doc);
            a->bytes += doc.len;
        }
        bson_destroy(&doc);
        d->pos++;
    }
    return 0;
}

int cmd_migrate_clone(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_donor_t *d = mig_donor_for(ctx, err);
    bson_t arr;
    int rc;
    if (!d) return err->code;
    BSON_APPEND_ARRAY_BEGIN(reply, "objects", &arr);
    pthread_mutex_lock(&d->mu);
    clone_batch_arg_t a = {d, &arr, 0, 0};
    rc = store_read(app->st, clone_batch_fn, &a, err);
    d->cloned_docs += a.n;
    d->cloned_bytes += (int64_t)a.bytes;
    pthread_mutex_unlock(&d->mu);
    bson_append_array_end(reply, &arr);
    mig_donor_release(app->mig, d);
    return rc;
}

typedef struct mods_arg {
    mig_donor_t *d;
    buf_t *reload;
    int nreload, used;
    bson_t *arr;
    size_t bytes;
} mods_arg_t;

static int reload_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    mods_arg_t *a = arg;
    store_coll_t *c = store_coll_get(t, a->d->ns);
    char k[16];
    int n = 0;
    if (!c) return 0;
    for (a->used = 0; a->used < a->nreload; a->used++) {
        bson_t idv, doc;
        int64_t rid;
        bool exists = false;
        int rc;
        if (!bson_init_static(&idv, a->reload[a->used].data, a->reload[a->used].len)) continue;
        bson_init(&doc);
        if ((rc = mig_find_by_id(t, c, &idv, &rid, &doc, &exists, err)) != 0) {
            bson_destroy(&doc);
            return rc;
        }
        if (exists) {
            if (n > 0 && a->bytes + doc.len > MS_BATCH_BYTES_MAX) {
                bson_destroy(&doc);
                break;
            }
            snprintf(k, sizeof k, "%d", n++);
            BSON_APPEND_DOCUMENT(a->arr, k, &doc);
            a->bytes += doc.len;
        }
        bson_destroy(&doc);
    }
    return 0;
}

/* `_transferMods`: deletes first, then the current documents of the reloaded ids (notes
 * §1.3); what does not fit goes back to the head of the lists. */
int cmd_transfer_mods(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    mig_donor_t *d = mig_donor_for(ctx, err);
    buf_t *del = NULL, *rel = NULL;
    int ndel = 0, nrel = 0, rc = 0;
    bson_t arr;
    char k[16];
    size_t bytes = 0;
    xfer_t *x;
    if (!d) return err->code;
    /* The capture, counted as in use (struct mig_donor's rule): the donor thread frees it
     * only after we let go, however long this takes. */
    pthread_mutex_lock(&d->mu);
    if ((x = d->x) != NULL) d->x_users++;
    pthread_mutex_unlock(&d->mu);
    if (!x) {
        mig_donor_release(app->mig, d);
        return err_set(err, MS_ERR_CONFLICTING_OPERATION, "the migration's capture has ended");
    }
    /* The capture in hand, nothing taken from it yet: a test holds it in use here. */
    fp_eval(FP_HANG_IN_TRANSFER_MODS, NULL);
    if ((rc = xfer_failed(x, err)) != 0) goto out;
    xfer_take(x, MS_BATCH_BYTES_MAX / 2, &del, &ndel, &rel, &nrel);
    BSON_APPEND_ARRAY_BEGIN(reply, "deleted", &arr);
    for (int i = 0; i < ndel; i++) {
        bson_t idv;
        if (!bson_init_static(&idv, del[i].data, del[i].len)) continue;
        snprintf(k, sizeof k, "%d", i);
        BSON_APPEND_DOCUMENT(&arr, k, &idv);
        bytes += del[i].len;
    }
    bson_append_array_end(reply, &arr);
    BSON_APPEND_ARRAY_BEGIN(reply, "reload", &arr);
    mods_arg_t a = {d, rel, nrel, 0, &arr, bytes};
    rc = store_read(app->st, reload_fn, &a, err);
    bson_append_array_end(reply, &arr);
    if (rc == 0 && a.used < nrel) {
        /* Did not fit: back to the head, after nothing (deletes all went out). */
        int left = nrel - a.used;
        buf_t *rest = calloc((size_t)left, sizeof *rest);
        if (rest) {
            memcpy(rest, rel + a.used, (size_t)left * sizeof *rest);
            memset(rel + a.used, 0, (size_t)left * sizeof *rest);
            xfer_putback(x, NULL, 0, rest, left);
        }
    }
    BSON_APPEND_INT64(reply, "size", (int64_t)a.bytes);
    pthread_mutex_lock(&d->mu);
    d->mods_sent += ndel + a.used;
    pthread_mutex_unlock(&d->mu);
out:
    pthread_mutex_lock(&d->mu);
    d->x_users--;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    xfer_ids_free(del, ndel);
    xfer_ids_free(rel, nrel);
    mig_donor_release(app->mig, d);
    return rc;
}
