/*
 * cat_settings.c — updates of config.settings in the config server's catalog
 * (bin/configsvr): MongoDB's update semantics (query, update operators or replacement,
 * upsert, multi) applied to the stored settings documents in one SQLite transaction,
 * each resulting document validated (cat_settings_validate) before COMMIT. Part of the
 * catalog module (prefix cat_); kept apart from catalog.c because it needs the query
 * engine (common/query.h, common/update.h).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/buf.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/query.h"
#include "common/update.h"

static int exec(sqlite3 *db, const char *sql, ms_error_t *err) {
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : err_from_sqlite(err, rc, "settings", db);
}

/* Encoded _id of a settings document (BSON order, the table's key). */
static int id_enc(const bson_t *doc, buf_t *out, ms_error_t *err) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, doc, "_id"))
        return err_set(err, MS_ERR_BAD_VALUE, "a settings document needs an _id");
    return keys_encode_value(out, &it, err);
}

static int put_doc(sqlite3 *db, const bson_t *doc, bool insert, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    buf_t key = {0};
    int rc = id_enc(doc, &key, err);
    if (rc) return rc;
    int s = sqlite3_prepare_v2(db, insert ? "INSERT INTO settings (doc, id_enc) VALUES (?, ?)"
                                          : "UPDATE settings SET doc = ? WHERE id_enc = ?",
                               -1, &st, NULL);
    if (s == SQLITE_OK) {
        sqlite3_bind_blob(st, 1, bson_get_data(doc), (int)doc->len, SQLITE_TRANSIENT);
        sqlite3_bind_blob(st, 2, key.data, (int)key.len, SQLITE_TRANSIENT);
        s = sqlite3_step(st);
        if (s == SQLITE_DONE) s = SQLITE_OK;
    }
    if (s != SQLITE_OK) rc = err_from_sqlite(err, s, "write settings", db);
    sqlite3_finalize(st);
    buf_free(&key);
    return rc;
}

/* The work of one update statement inside the caller's transaction. */
static int update_locked(sqlite3 *db, const query_t *qc, const update_t *uc, const bson_t *q,
                         bool upsert, bool multi, int64_t *n, int64_t *n_modified,
                         bool *upserted, bson_t *upserted_id, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    bson_t **docs = NULL;  /* pointers: a bson_t must not move (it may point into itself) */
    int ndocs = 0, cap = 0, rc = 0, s;
    /* Settings are a handful of documents: read them all, then write. */
    s = sqlite3_prepare_v2(db, "SELECT doc FROM settings ORDER BY id_enc", -1, &st, NULL);
    if (s != SQLITE_OK) return err_from_sqlite(err, s, "read settings", db);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        bson_t v;
        const uint8_t *p = sqlite3_column_blob(st, 0);
        int len = sqlite3_column_bytes(st, 0);
        ASSERT(p && len >= 5 && bson_init_static(&v, p, (size_t)len));
        if (ndocs == cap) {
            cap = cap ? cap * 2 : 8;
            docs = bson_realloc(docs, sizeof *docs * (size_t)cap);
        }
        docs[ndocs++] = bson_copy(&v);
    }
    sqlite3_finalize(st);
    if (s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "read settings", db);
        goto out;
    }
    for (int i = 0; i < ndocs && rc == 0; i++) {
        bson_t out;
        bool changed = false;
        if (!query_match(qc, docs[i])) continue;
        (*n)++;
        rc = update_apply(uc, docs[i], false, &out, &changed, err);
        if (rc) break;
        if (changed) {
            rc = cat_settings_validate(&out, err);
            if (rc == 0) rc = put_doc(db, &out, false, err);
            if (rc == 0) (*n_modified)++;
        }
        bson_destroy(&out);
        if (!multi) break;
    }
    if (rc || *n > 0 || !upsert) goto out;
    /* Upsert: the query's equality fields seed the new document; an _id is generated when
     * neither gives one (MongoDB's rule). */
    {
        bson_t seed, out, withid;
        bool changed = false;
        bson_iter_t it;
        rc = update_upsert_seed(q, &seed, err);
        if (rc) goto out;
        rc = update_apply(uc, &seed, true, &out, &changed, err);
        bson_destroy(&seed);
        if (rc) goto out;
        if (!bson_iter_init_find(&it, &out, "_id")) {
            bson_oid_t oid;
            bson_oid_init(&oid, NULL);
            bson_init(&withid);
            BSON_APPEND_OID(&withid, "_id", &oid);
            bson_concat(&withid, &out);
            bson_destroy(&out);
            bson_copy_to(&withid, &out);
            bson_destroy(&withid);
            bson_iter_init_find(&it, &out, "_id");
        }
        rc = cat_settings_validate(&out, err);
        if (rc == 0) rc = put_doc(db, &out, true, err);
        if (rc == 0) {
            bson_init(upserted_id);
            bson_append_iter(upserted_id, "_id", -1, &it);
            *upserted = true;
        }
        bson_destroy(&out);
    }
out:
    for (int i = 0; i < ndocs; i++) bson_destroy(docs[i]);
    bson_free(docs);
    return rc;
}

int cat_settings_update(cat_t *c, const bson_t *q, const bson_t *u, bool upsert, bool multi,
                        int64_t *n, int64_t *n_modified, bool *upserted, bson_t *upserted_id,
                        ms_error_t *err) {
    query_t *qc = NULL;
    update_t *uc = NULL;
    sqlite3 *db = cat_db_handle(c);
    fp_early_t fpe;
    int rc;
    *n = *n_modified = 0;
    *upserted = false;
    rc = query_compile(q, &qc, err);
    if (rc == 0) rc = update_compile(u, &uc, err);
    if (rc) goto out;
    if (multi && update_is_replacement(uc)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "multi update is not supported for replacement-style update");
        goto out;
    }
    fp_eval_early(CFG_FP_SETTINGS_BEFORE_COMMIT, &fpe);   /* hang: unlocked */
    cat_lock(c);
    rc = exec(db, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = update_locked(db, qc, uc, q, upsert, multi, n, n_modified, upserted, upserted_id, err);
        if (rc == 0) rc = fp_late(&fpe, err);
        if (rc == 0) rc = exec(db, "COMMIT", err);
        if (rc) {
            exec(db, "ROLLBACK", NULL);
            if (*upserted) bson_destroy(upserted_id);
            *upserted = false;
            *n = *n_modified = 0;
        }
    }
    cat_unlock(c);
    if (rc == 0 && (*n_modified > 0 || *upserted)) log_info("settings updated n=%lld", (long long)*n);
out:
    query_free(qc);
    update_free(uc);
    return rc;
}

/* ---- reads and validation ---------------------------------------------------------- */

int cat_settings_get(cat_t *c, const char *id, bson_t *out, bool *found, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    bson_t key = BSON_INITIALIZER;
    bson_iter_t it;
    buf_t enc = {0};
    int rc;
    *found = false;
    BSON_APPEND_UTF8(&key, "_id", id);
    bson_iter_init_find(&it, &key, "_id");
    rc = keys_encode_value(&enc, &it, err);
    bson_destroy(&key);
    if (rc) return rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, "SELECT doc FROM settings WHERE id_enc = ?", &st, err);
    if (rc == 0) {
        cat_bind_buf(st, 1, &enc);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW) {
            bson_t v;
            cat_col_view(st, 0, &v);
            bson_copy_to(&v, out);
            *found = true;
        } else if (s != SQLITE_DONE) {
            rc = err_from_sqlite(err, s, "read settings", c->db);
        }
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    buf_free(&enc);
    return rc;
}

/* Set once at start-up (before any thread reads it) from --enable-test-commands. */
static bool settings_test_fields;

void cat_settings_allow_test_fields(bool on) { settings_test_fields = on; }

int64_t cat_chunk_size_bytes(cat_t *c) {
    bson_t doc;
    bool found = false;
    bson_iter_t it;
    int64_t mb = CAT_CHUNKSIZE_MB_DEFAULT, bytes = 0;
    if (cat_settings_get(c, "chunksize", &doc, &found, NULL) == 0 && found) {
        int64_t v;
        if (bson_iter_init_find(&it, &doc, "value") && bsonx_as_int64(&it, &v) &&
            v >= CAT_CHUNKSIZE_MB_MIN && v <= CAT_CHUNKSIZE_MB_MAX)
            mb = v;
        /* valueBytes (tests only) wins over value: many chunks from little data. */
        if (settings_test_fields && bson_iter_init_find(&it, &doc, "valueBytes") &&
            bsonx_as_int64(&it, &v) && v >= MS_CHUNKSIZE_VALUE_BYTES_MIN &&
            v <= MS_CHUNKSIZE_VALUE_BYTES_MAX)
            bytes = v;
        bson_destroy(&doc);
    }
    return bytes > 0 ? bytes : mb * 1024 * 1024;
}

/* "HH:MM" with 0 <= HH <= 23 and 0 <= MM <= 59 → minutes since midnight, else -1. */
static int hhmm(const char *s) {
    if (!s || strlen(s) != 5 || s[2] != ':') return -1;
    for (int i = 0; i < 5; i++)
        if (i != 2 && (s[i] < '0' || s[i] > '9')) return -1;
    int h = (s[0] - '0') * 10 + (s[1] - '0'), m = (s[3] - '0') * 10 + (s[4] - '0');
    if (h > 23 || m > 59) return -1;
    return h * 60 + m;
}

int cat_settings_validate(const bson_t *doc, ms_error_t *err) {
    bson_iter_t it;
    const char *id;
    if (!bson_iter_init_find(&it, doc, "_id"))
        return err_set(err, MS_ERR_BAD_VALUE, "a settings document needs an _id");
    if (!BSON_ITER_HOLDS_UTF8(&it)) return 0;  /* not one of ours: stored as given */
    id = bson_iter_utf8(&it, NULL);
    if (!bson_iter_init(&it, doc)) return err_set(err, MS_ERR_BAD_VALUE, "malformed settings document");
    if (strcmp(id, "balancer") == 0) {
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strcmp(k, "mode") == 0) {
                const char *m = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
                if (!m || (strcmp(m, "full") != 0 && strcmp(m, "off") != 0))
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "balancer mode must be \"full\" or \"off\"");
            } else if (strcmp(k, "stopped") == 0 || strcmp(k, "_waitForDelete") == 0 ||
                       strcmp(k, "attemptToBalanceJumboChunks") == 0) {
                if (!BSON_ITER_HOLDS_BOOL(&it))
                    return err_set(err, MS_ERR_BAD_VALUE, "balancer setting %s must be a boolean", k);
            } else if (strcmp(k, "policy") == 0) {
                const char *m = BSON_ITER_HOLDS_UTF8(&it) ? bson_iter_utf8(&it, NULL) : NULL;
                if (!m || (strcmp(m, "chunkCount") != 0 && strcmp(m, "dataSize") != 0))
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "balancer policy must be \"chunkCount\" or \"dataSize\"");
            } else if (strcmp(k, "_secondaryThrottle") == 0) {
                if (!BSON_ITER_HOLDS_BOOL(&it) && !BSON_ITER_HOLDS_DOCUMENT(&it))
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "_secondaryThrottle must be a boolean or a write concern document");
            } else if (strcmp(k, "activeWindow") == 0) {
                bson_iter_t w;
                const char *start = NULL, *stop = NULL;
                if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bson_iter_recurse(&it, &w))
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "activeWindow must be {start: \"HH:MM\", stop: \"HH:MM\"}");
                while (bson_iter_next(&w)) {
                    const char *wk = bson_iter_key(&w);
                    const char *v = BSON_ITER_HOLDS_UTF8(&w) ? bson_iter_utf8(&w, NULL) : NULL;
                    if (strcmp(wk, "start") == 0) start = v ? v : "";
                    else if (strcmp(wk, "stop") == 0) stop = v ? v : "";
                    else
                        return err_set(err, MS_ERR_BAD_VALUE, "activeWindow: unknown field %s", wk);
                }
                int a = hhmm(start), b = hhmm(stop);
                if (a < 0 || b < 0)
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "activeWindow start and stop must both be \"HH:MM\" times");
                if (a == b)
                    return err_set(err, MS_ERR_BAD_VALUE,
                                   "activeWindow start and stop cannot be the same time");
            }
        }
        return 0;
    }
    if (strcmp(id, "chunksize") == 0) {
        int64_t v = 0;
        bson_iter_t vb;
        bool has_vb = bson_iter_init_find(&vb, doc, "valueBytes");
        if (has_vb) {
            if (!settings_test_fields)
                return err_set(err, MS_ERR_BAD_VALUE, "chunksize valueBytes is a test-only field "
                               "(the config server runs without --enable-test-commands)");
            if (!bsonx_as_int64_exact(&vb, &v) || v < MS_CHUNKSIZE_VALUE_BYTES_MIN ||
                v > MS_CHUNKSIZE_VALUE_BYTES_MAX)
                return err_set(err, MS_ERR_BAD_VALUE, "chunksize valueBytes must be an integer "
                               "between %d and %lld", MS_CHUNKSIZE_VALUE_BYTES_MIN,
                               (long long)MS_CHUNKSIZE_VALUE_BYTES_MAX);
            if (!bson_iter_find(&it, "value")) return 0;  /* valueBytes alone is enough */
        } else if (!bson_iter_find(&it, "value")) {
            return err_set(err, MS_ERR_BAD_VALUE, "chunksize needs an integral value in MB");
        }
        if (!bsonx_as_int64_exact(&it, &v))
            return err_set(err, MS_ERR_BAD_VALUE, "chunksize needs an integral value in MB");
        if (v < CAT_CHUNKSIZE_MB_MIN || v > CAT_CHUNKSIZE_MB_MAX)
            return err_set(err, MS_ERR_BAD_VALUE, "chunksize value must be between %d and %d MB, not %lld",
                           CAT_CHUNKSIZE_MB_MIN, CAT_CHUNKSIZE_MB_MAX, (long long)v);
        return 0;
    }
    if (strcmp(id, "autosplit") == 0 || strcmp(id, "automerge") == 0) {
        if (bson_iter_find(&it, "enabled") && !BSON_ITER_HOLDS_BOOL(&it))
            return err_set(err, MS_ERR_BAD_VALUE, "%s.enabled must be a boolean", id);
        return 0;
    }
    return 0;
}
