/*
 * cat_migrate.c — the catalog side of chunk migration (bin/configsvr): the commit of a
 * migration (_configsvrCommitChunkMigration) as one SQLite transaction with MongoDB's
 * version rules (notes §2.2), the recovery fence (_configsvrEnsureChunkVersionIsGreaterThan),
 * the lookup of the one chunk holding a requested range, changelog entries sent by shards,
 * and config.migrations (the requests in flight, MongoDB 3.4–4.4's shape). Every change of
 * config.chunks here checks the tiling around the range it changes (cat_chunks.c): refused
 * when the stored chunks there are already inconsistent, asserted after its writes before
 * COMMIT. Part of the catalog module (catalog.c says how the files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/buf.h"
#include "common/failpoint.h"
#include "common/log.h"

/* (aM, am) newer than (bM, bm) within one generation. */
static bool ver_newer(uint32_t aM, uint32_t am, uint32_t bM, uint32_t bm) {
    return aM > bM || (aM == bM && am > bm);
}

static void bounds_text(const bson_t *min, const bson_t *max, char *out, size_t cap) {
    char *a = min ? bson_as_relaxed_extended_json(min, NULL) : NULL;
    char *b = max ? bson_as_relaxed_extended_json(max, NULL) : NULL;
    snprintf(out, cap, "[%s, %s)", a ? a : "?", b ? b : "?");
    bson_free(a);
    bson_free(b);
}

/* The chunk of ns holding [mn, mx) (either NULL, not both), positioned on its row (caller
 * finalizes *out), or ConflictingOperationInProgress. */
static int range_chunk_locked(cat_t *c, const char *ns, const buf_t *mn, const buf_t *mx,
                              const bson_t *min, const bson_t *max, sqlite3_stmt **out,
                              ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    char txt[600];
    /* With min: the chunk starting at or before it. With only max: the chunk starting
     * strictly before it (max is exclusive). */
    int rc = cat_sql_prep(c, mn ? CAT_SQL_CHUNK_CONTAINING : CAT_SQL_CHUNK_ENDING_AT, &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    cat_bind_buf(st, 2, mn ? mn : mx);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        const void *cmax = sqlite3_column_blob(st, CC_MAX_ENC);
        size_t cmaxl = (size_t)sqlite3_column_bytes(st, CC_MAX_ENC);
        bool inside = mx ? cat_blob_cmp(mx->data, mx->len, cmax, cmaxl) <= 0
                         : cat_blob_cmp(mn->data, mn->len, cmax, cmaxl) < 0;
        if (inside) {
            *out = st;
            return 0;
        }
    }
    sqlite3_finalize(st);
    if (s != SQLITE_ROW && s != SQLITE_DONE) return err_from_sqlite(err, s, "find chunk", c->db);
    bounds_text(min, max, txt, sizeof txt);
    return err_set(err, MS_ERR_CONFLICTING_OPERATION,
                   "the range %s of %s is not inside one chunk (the chunk boundaries may have "
                   "changed)", txt, ns);
}

/* New history: {validAfter: va, shard: to} first, then the entries of old still inside
 * the history window (notes §2.2: MongoDB keeps max(300 s, 60 s, 10 s)). */
static void history_prepend(const bson_t *old, cat_ts_t va, const char *to, bson_t *out) {
    bson_iter_t it;
    int n = 1;
    cat_history_one(out, va, to);
    if (!bson_iter_init(&it, old)) return;
    while (bson_iter_next(&it)) {
        bson_iter_t e;
        uint32_t t = 0, i = 0;
        char key[16];
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &e) ||
            !bson_iter_find(&e, "validAfter") || !BSON_ITER_HOLDS_TIMESTAMP(&e))
            continue;
        bson_iter_timestamp(&e, &t, &i);
        if ((uint64_t)t + CAT_HISTORY_WINDOW_S < va.t) continue;
        snprintf(key, sizeof key, "%d", n++);
        bson_append_iter(out, key, -1, &it);
    }
}

static int donor_version_locked(cat_t *c, const cat_coll_t *coll, const char *from,
                                cat_version_t *out, ms_error_t *err) {
    bson_oid_copy(&coll->epoch, &out->epoch);
    out->ts = coll->ts;
    return cat_coll_version_locked(c, coll->ns, from, &out->major, &out->minor, err);
}

/* The protocol's invariants after a commit, inside its transaction (they hold whatever the
 * input, so a failure is a bug of ours: ASSERT). One owner per range: exactly one chunk
 * row is [min, max), and it is the recipient's at (M+1, 0) (the tiling check already
 * proved no other row overlaps it). Versions only grow: the collection's major is M+1. */
static int commit_postcondition_locked(cat_t *c, const cat_mig_commit_t *m, const buf_t *mn,
                                       const buf_t *mx, uint32_t M, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    uint32_t cM = 0, cm = 0;
    int rows = 0, rc = cat_sql_prep(c, "SELECT shard, major, minor FROM chunks WHERE ns = ? AND"
                                       " min_enc = ? AND max_enc = ?", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, m->ns);
    cat_bind_buf(st, 2, mn);
    cat_bind_buf(st, 3, mx);
    while (sqlite3_step(st) == SQLITE_ROW) {
        rows++;
        ASSERT(strcmp((const char *)sqlite3_column_text(st, 0), m->to) == 0);
        ASSERT(sqlite3_column_int64(st, 1) == (int64_t)M + 1 && sqlite3_column_int64(st, 2) == 0);
    }
    sqlite3_finalize(st);
    ASSERT(rows == 1);
    if ((rc = cat_coll_version_locked(c, m->ns, NULL, &cM, &cm, err)) != 0) return rc;
    ASSERT(cM == M + 1);
    return 0;
}

static int commit_locked(cat_t *c, const cat_mig_commit_t *m, cat_version_t *donor_out,
                         ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0}, cmn = {0}, cmx = {0};
    sqlite3_stmt *st = NULL, *up = NULL;
    bson_t hist_old = BSON_INITIALIZER, hist_new = BSON_INITIALIZER, cmin = BSON_INITIALIZER,
           cmax = BSON_INITIALIZER;
    bool draining = false;
    char shard[CAT_SHARD_NAME_BYTES_MAX];
    uint8_t uuid[16];
    bson_oid_t id;
    cat_ts_t since, va = m->valid_after;
    uint32_t CM, Cm, M = 0, mm = 0, next_minor = 1;
    int rc = cat_coll_pattern_locked(c, m->ns, &coll, &p, err);
    if (rc == MS_ERR_NAMESPACE_NOT_SHARDED)
        return err_set(err, MS_ERR_STALE_EPOCH, "%s is not sharded any more (dropped since the "
                       "migration started?)", m->ns);
    if (rc) return rc;
    if (!bson_oid_equal(&coll.epoch, &m->epoch) || coll.ts.t != m->ts.t || coll.ts.i != m->ts.i) {
        rc = err_set(err, MS_ERR_STALE_EPOCH, "%s was dropped and recreated since the migration "
                     "started (collection generation changed)", m->ns);
        goto out;
    }
    rc = cat_shard_host_locked(c, m->to, NULL, 0, &draining, err);
    if (rc) goto out;
    if (draining) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "cannot commit a migration to %s: the shard is draining", m->to);
        goto out;
    }
    if (!coll.allow_migrations) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "migrations of %s are not allowed (allowMigrations: false)", m->ns);
        goto out;
    }
    rc = keys_encode_bound(&p, m->min, &mn, err);
    if (rc == 0) rc = keys_encode_bound(&p, m->max, &mx, err);
    if (rc) goto out;
    if (cat_buf_cmp(&mn, &mx) >= 0) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "migrated range: min must be less than max");
        goto out;
    }
    rc = range_chunk_locked(c, m->ns, &mn, &mx, m->min, m->max, &st, err);
    if (rc) goto out;
    cat_copy_str(shard, sizeof shard, cat_col_text(st, CC_SHARD));
    buf_put(&cmn, sqlite3_column_blob(st, CC_MIN_ENC), (size_t)sqlite3_column_bytes(st, CC_MIN_ENC));
    buf_put(&cmx, sqlite3_column_blob(st, CC_MAX_ENC), (size_t)sqlite3_column_bytes(st, CC_MAX_ENC));
    /* Idempotent: a retried commit finds the range already exactly on the recipient. */
    if (strcmp(shard, m->to) == 0 && cat_buf_cmp(&cmn, &mn) == 0 && cat_buf_cmp(&cmx, &mx) == 0) {
        rc = donor_version_locked(c, &coll, m->from, donor_out, err);
        goto out;
    }
    if (strcmp(shard, m->from) != 0) {
        char txt[600];
        bounds_text(m->min, m->max, txt, sizeof txt);
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "the range %s of %s is owned by %s, not by the donor %s", txt, m->ns, shard,
                     m->from);
        goto out;
    }
    CM = (uint32_t)sqlite3_column_int64(st, CC_MAJOR);
    Cm = (uint32_t)sqlite3_column_int64(st, CC_MINOR);
    /* The chunk changed since the donor started (a split, or the recovery fence of
     * cat_chunk_ensure_version_gt): the migration's view is stale. */
    if (ver_newer(CM, Cm, m->chunk_major, m->chunk_minor)) {
        rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                     "the chunk of %s changed since the migration started (now %u|%u, the "
                     "migration saw %u|%u)", m->ns, CM, Cm, m->chunk_major, m->chunk_minor);
        goto out;
    }
    cat_col_oid(st, CC_ID, &id);
    memcpy(uuid, sqlite3_column_blob(st, CC_UUID), 16);
    since.t = (uint32_t)sqlite3_column_int64(st, CC_SINCE_T);
    since.i = (uint32_t)sqlite3_column_int64(st, CC_SINCE_I);
    {
        bson_t v;
        cat_col_view(st, CC_HISTORY, &v);
        bson_destroy(&hist_old);
        bson_copy_to(&v, &hist_old);
        cat_col_view(st, CC_MIN, &v);
        bson_destroy(&cmin);
        bson_copy_to(&v, &cmin);
        cat_col_view(st, CC_MAX, &v);
        bson_destroy(&cmax);
        bson_copy_to(&v, &cmax);
    }
    sqlite3_finalize(st);
    st = NULL;

    rc = cat_tiling_refuse_locked(c, m->ns, &p, &cmn, &cmx, err);
    if (rc == 0) rc = cat_coll_version_locked(c, m->ns, NULL, &M, &mm, err);
    if (rc) goto out;
    if (M == UINT32_MAX) {
        rc = err_set(err, MS_ERR_OVERFLOW, "major version of %s would overflow", m->ns);
        goto out;
    }
    if (va.t == 0 && va.i == 0) {
        rc = cat_next_ts_locked(c, &va, err);
        if (rc) goto out;
    }
    history_prepend(&hist_old, va, m->to, &hist_new);

    bool left = cat_buf_cmp(&cmn, &mn) < 0, right = cat_buf_cmp(&mx, &cmx) < 0;
    if (!left && !right) {
        /* The whole chunk moves: (M+1, 0) on the recipient, same _id. */
        rc = cat_sql_prep(c, "UPDATE chunks SET shard = ?, major = ?, minor = 0, jumbo = 0,"
                             " history = ?, since_t = ?, since_i = ? WHERE id = ?", &up, err);
        if (rc) goto out;
        cat_bind_text(up, 1, m->to);
        sqlite3_bind_int64(up, 2, (int64_t)M + 1);
        cat_bind_bson(up, 3, &hist_new);
        sqlite3_bind_int64(up, 4, va.t);
        sqlite3_bind_int64(up, 5, va.i);
        sqlite3_bind_blob(up, 6, id.bytes, 12, SQLITE_TRANSIENT);
        rc = cat_sql_done(c, up, "migrate: move chunk", err);
        if (rc) goto out;
    } else {
        /* moveRange: the chunk becomes up to three pieces. The remainders stay on the
         * donor with the chunk's history, left (M+1, 1) then right (M+1, next); the left
         * one keeps the chunk's _id (the moved piece does when there is no left one). */
        bson_oid_t moved_id, right_id;
        rc = cat_sql_prep(c, "DELETE FROM chunks WHERE id = ?", &up, err);
        if (rc) goto out;
        sqlite3_bind_blob(up, 1, id.bytes, 12, SQLITE_TRANSIENT);
        rc = cat_sql_done(c, up, "migrate: remove chunk", err);
        if (rc) goto out;
        if (left) {
            rc = cat_chunk_insert_locked(c, m->ns, uuid, &id, &cmin, m->min, &cmn, &mn, m->from,
                                         M + 1, next_minor++, since, &hist_old, err);
            if (rc) goto out;
            bson_oid_init(&moved_id, NULL);
        } else {
            bson_oid_copy(&id, &moved_id);
        }
        rc = cat_chunk_insert_locked(c, m->ns, uuid, &moved_id, m->min, m->max, &mn, &mx, m->to,
                                     M + 1, 0, va, &hist_new, err);
        if (rc) goto out;
        if (right) {
            bson_oid_init(&right_id, NULL);
            rc = cat_chunk_insert_locked(c, m->ns, uuid, &right_id, m->max, &cmax, &mx, &cmx,
                                         m->from, M + 1, next_minor++, since, &hist_old, err);
            if (rc) goto out;
        }
    }
    sqlite3_finalize(up);
    up = NULL;
    /* The control chunk: the donor's lowest other chunk gets the new major too, so a
     * router using the donor's old version goes stale (notes §2.2). */
    rc = cat_sql_prep(c, CAT_SQL_CONTROL_CHUNK, &up, err);
    if (rc) goto out;
    sqlite3_bind_int64(up, 1, (int64_t)M + 1);
    sqlite3_bind_int64(up, 2, next_minor);
    cat_bind_text(up, 3, m->ns);
    cat_bind_text(up, 4, m->from);
    sqlite3_bind_int64(up, 5, M);
    rc = cat_sql_done(c, up, "migrate: control chunk", err);
    if (rc) goto out;
    /* The chunk's range is all that changed bounds; the control chunk changed only its
     * version (checked by commit_postcondition_locked through the donor's version). */
    cat_tiling_assert_range_locked(c, m->ns, &p, &cmn, &cmx, &(cat_lastmod_t){M, mm});
    rc = donor_version_locked(c, &coll, m->from, donor_out, err);
    if (rc == 0)
        ASSERT(donor_out->major == 0 || donor_out->major == M + 1);  /* donor's major moved */
    if (rc == 0) rc = commit_postcondition_locked(c, m, &mn, &mx, M, err);
out:
    sqlite3_finalize(st);
    sqlite3_finalize(up);
    buf_free(&mn);
    buf_free(&mx);
    buf_free(&cmn);
    buf_free(&cmx);
    bson_destroy(&hist_old);
    bson_destroy(&hist_new);
    bson_destroy(&cmin);
    bson_destroy(&cmax);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
    return rc;
}

int cat_migration_commit(cat_t *c, const cat_mig_commit_t *m, cat_version_t *donor_out,
                         ms_error_t *err) {
    cat_version_t v;
    cat_ts_t saved;
    fp_early_t fpe;
    int rc;
    memset(&v, 0, sizeof v);
    fp_eval_early(CFG_FP_HANG_BEFORE_COMMIT_MIGRATION, &fpe);   /* hang: unlocked */
    pthread_mutex_lock(&c->mu);
    saved = c->ts_last;
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = commit_locked(c, m, &v, err);
        /* Every row written, nothing committed: a crash here leaves the migration
         * uncommitted, and the donor's recovery finds the chunk still its own. */
        if (rc == 0) rc = fp_late(&fpe, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) {
            cat_sql_exec(c, "ROLLBACK", NULL);
            c->ts_last = saved;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0) {
        log_info("migration committed ns=%s from=%s to=%s donorVersion=%u|%u", log_str(m->ns),
                 log_str(m->from), log_str(m->to), v.major, v.minor);
        *donor_out = v;
    }
    return rc;
}

static int ensure_locked(cat_t *c, const char *ns, const uint8_t uuid[16], const bson_t *min,
                         const bson_t *max, const cat_version_t *v, bool *bumped,
                         ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0};
    sqlite3_stmt *st = NULL, *up = NULL;
    uint32_t M = 0, mm = 0;
    int rc = cat_coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc == MS_ERR_NAMESPACE_NOT_SHARDED) return 0;  /* dropped: nothing to fence */
    if (rc) return rc;
    /* Another incarnation of the collection: its chunks are not the migration's. */
    if (memcmp(coll.uuid, uuid, 16) != 0 || !bson_oid_equal(&coll.epoch, &v->epoch) ||
        coll.ts.t != v->ts.t || coll.ts.i != v->ts.i)
        goto out;
    rc = keys_encode_bound(&p, min, &mn, err);
    if (rc == 0) rc = keys_encode_bound(&p, max, &mx, err);
    if (rc) goto out;
    rc = cat_sql_prep(c, CAT_SQL_CHUNK_AT, &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, ns);
    cat_bind_buf(st, 2, &mn);
    int s = sqlite3_step(st);
    if (s != SQLITE_ROW) {
        if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "find chunk", c->db);
        goto out;  /* no chunk starts there: the range changed, nothing to fence */
    }
    if (cat_blob_cmp(sqlite3_column_blob(st, CC_MAX_ENC), (size_t)sqlite3_column_bytes(st, CC_MAX_ENC),
                     mx.data, mx.len) != 0)
        goto out;
    if (ver_newer((uint32_t)sqlite3_column_int64(st, CC_MAJOR),
                  (uint32_t)sqlite3_column_int64(st, CC_MINOR), v->major, v->minor))
        goto out;  /* already newer: a commit or an earlier fence happened */
    bson_oid_t id;
    cat_col_oid(st, CC_ID, &id);
    sqlite3_finalize(st);
    st = NULL;
    rc = cat_tiling_refuse_locked(c, ns, &p, &mn, &mx, err);
    if (rc == 0) rc = cat_coll_version_locked(c, ns, NULL, &M, &mm, err);
    if (rc) goto out;
    if (M == UINT32_MAX) {
        rc = err_set(err, MS_ERR_OVERFLOW, "major version of %s would overflow", ns);
        goto out;
    }
    rc = cat_sql_prep(c, "UPDATE chunks SET major = ?, minor = 0 WHERE id = ?", &up, err);
    if (rc) goto out;
    sqlite3_bind_int64(up, 1, (int64_t)M + 1);
    sqlite3_bind_blob(up, 2, id.bytes, 12, SQLITE_TRANSIENT);
    rc = cat_sql_done(c, up, "fence chunk version", err);
    if (rc) goto out;
    cat_tiling_assert_range_locked(c, ns, &p, &mn, &mx, &(cat_lastmod_t){M, mm});
    *bumped = true;
out:
    sqlite3_finalize(st);
    sqlite3_finalize(up);
    buf_free(&mn);
    buf_free(&mx);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
    return rc;
}

int cat_chunk_ensure_version_gt(cat_t *c, const char *ns, const uint8_t uuid[16],
                                const bson_t *min, const bson_t *max, const cat_version_t *v,
                                bool *bumped, ms_error_t *err) {
    int rc;
    *bumped = false;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = ensure_locked(c, ns, uuid, min, max, v, bumped, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) {
            cat_sql_exec(c, "ROLLBACK", NULL);
            *bumped = false;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (rc == 0 && *bumped) log_info("chunk version fenced ns=%s", log_str(ns));
    return rc;
}

int cat_chunk_for_range(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                        cat_chunk_info_t *out, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0};
    sqlite3_stmt *st = NULL;
    int rc;
    ASSERT(min || max);
    pthread_mutex_lock(&c->mu);
    rc = cat_coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) goto unlock;
    if (min) rc = keys_encode_bound(&p, min, &mn, err);
    if (rc == 0 && max) rc = keys_encode_bound(&p, max, &mx, err);
    if (rc == 0 && min && max && cat_buf_cmp(&mn, &mx) >= 0)
        rc = err_set(err, MS_ERR_BAD_VALUE, "min must be less than max");
    if (rc == 0)
        rc = range_chunk_locked(c, ns, min ? &mn : NULL, max ? &mx : NULL, min, max, &st, err);
    if (rc == 0) {
        bson_t v;
        bson_init(&out->min);
        bson_init(&out->max);
        cat_col_view(st, CC_MIN, &v);
        bson_concat(&out->min, &v);
        cat_col_view(st, CC_MAX, &v);
        bson_concat(&out->max, &v);
        cat_copy_str(out->shard, sizeof out->shard, cat_col_text(st, CC_SHARD));
        out->major = (uint32_t)sqlite3_column_int64(st, CC_MAJOR);
        out->minor = (uint32_t)sqlite3_column_int64(st, CC_MINOR);
    }
    sqlite3_finalize(st);
    buf_free(&mn);
    buf_free(&mx);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
unlock:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_changelog_from(cat_t *c, const char *shard, const char *what, const char *ns,
                       const bson_t *details, ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = cat_log_change_as_locked(c, "changelog", shard, shard, what, ns, details, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}


/* ---- config.migrations ------------------------------------------------------------------ */

int cat_migration_record(cat_t *c, const bson_t *doc, bool *joined, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    const char *id = bsonx_utf8_or(doc, "_id", "");
    int rc, s;
    *joined = false;
    ASSERT(id[0]);
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, "SELECT doc FROM migrations WHERE id = ?", &st, err);
    if (rc) goto unlock;
    cat_bind_text(st, 1, id);
    s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        bson_t old;
        cat_col_view(st, 0, &old);
        const char *to = bsonx_utf8_or(&old, "toShard", "");
        if (strcmp(to, bsonx_utf8_or(doc, "toShard", "")) == 0)
            *joined = true;
        else
            rc = err_set(err, MS_ERR_CONFLICTING_OPERATION,
                         "a migration of %s to %s is already in progress", id, to);
        goto unlock;
    }
    if (s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "find migration", c->db);
        goto unlock;
    }
    sqlite3_finalize(st);
    st = NULL;
    rc = cat_sql_prep(c, "INSERT INTO migrations (id, doc) VALUES (?, ?)", &st, err);
    if (rc) goto unlock;
    cat_bind_text(st, 1, id);
    cat_bind_bson(st, 2, doc);
    rc = cat_sql_done(c, st, "record migration", err);
unlock:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_migration_forget(cat_t *c, const char *id, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, "DELETE FROM migrations WHERE id = ?", &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, id);
        rc = cat_sql_done(c, st, "forget migration", err);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_migrations_clear(cat_t *c, int64_t *n, ms_error_t *err) {
    int rc;
    *n = 0;
    pthread_mutex_lock(&c->mu);
    rc = cat_count_locked(c, "SELECT count(*) FROM migrations", NULL, NULL, n, err);
    if (rc == 0) rc = cat_sql_exec(c, "DELETE FROM migrations", err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}
