/*
 * cat_zones.c — zones in the config server's catalog (bin/configsvr): which shards carry
 * a zone (config.shards `tags`, a BSON array per shard) and which key ranges of a
 * collection belong to a zone (the `tags` table = config.tags), with MongoDB's rules
 * (sharding_catalog_manager_zone_operations): a range uses a prefix of the shard key and
 * is extended to the full key with MinKey, ranges of a collection never overlap
 * (RangeOverlapConflict) except an identical re-add, a range needs its zone on some shard
 * (ZoneNotFound), and the last shard of a zone still used by a range cannot leave it
 * (ZoneStillInUse). Each change is one transaction. The balancer reads the result with
 * cat_zones_of / cat_shard_zones. Part of the catalog module (catalog.c says how the
 * files divide it).
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

static int zone_name_check(const char *zone, ms_error_t *err) {
    size_t n = strlen(zone);
    if (n == 0) return err_set(err, MS_ERR_BAD_VALUE, "zone name cannot be empty");
    if (n >= MS_ZONE_NAME_BYTES_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "zone name must be shorter than %d bytes",
                       MS_ZONE_NAME_BYTES_MAX);
    return 0;
}

static bool tags_contain(const bson_t *tags, const char *zone) {
    bson_iter_t it;
    if (!bson_iter_init(&it, tags)) return false;
    while (bson_iter_next(&it))
        if (BSON_ITER_HOLDS_UTF8(&it) && strcmp(bson_iter_utf8(&it, NULL), zone) == 0) return true;
    return false;
}

/* The shard's tags array into *tags_out (initialised); ShardNotFound when unknown. */
static int shard_tags_locked(cat_t *c, const char *shard, bson_t *tags_out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, "SELECT tags FROM shards WHERE id = ?", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, shard);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        bson_t v;
        cat_col_view(st, 0, &v);
        bson_copy_to(&v, tags_out);
    } else if (s == SQLITE_DONE) {
        rc = err_set(err, MS_ERR_SHARD_NOT_FOUND, "shard %s does not exist", shard);
    } else {
        rc = err_from_sqlite(err, s, "read shard tags", c->db);
    }
    sqlite3_finalize(st);
    return rc;
}

static int shard_tags_write_locked(cat_t *c, const char *shard, const bson_t *tags,
                                   ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, "UPDATE shards SET tags = ? WHERE id = ?", &st, err);
    if (rc) return rc;
    cat_bind_bson(st, 1, tags);
    cat_bind_text(st, 2, shard);
    rc = cat_sql_done(c, st, "write shard tags", err);
    sqlite3_finalize(st);
    return rc;
}

/* How many shards carry zone (stops counting at 2: callers ask "none / only one"), and
 * the first such shard's name into first (may be NULL). */
static int zone_shards_locked(cat_t *c, const char *zone, int *n_out, char *first, size_t cap,
                              ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, "SELECT id, tags FROM shards ORDER BY id", &st, err), s;
    if (rc) return rc;
    *n_out = 0;
    while ((s = sqlite3_step(st)) == SQLITE_ROW && *n_out < 2) {
        bson_t tags;
        cat_col_view(st, 1, &tags);
        if (!tags_contain(&tags, zone)) continue;
        if (*n_out == 0 && first) cat_copy_str(first, cap, cat_col_text(st, 0));
        (*n_out)++;
    }
    if (s != SQLITE_DONE && s != SQLITE_ROW) rc = err_from_sqlite(err, s, "scan shard tags", c->db);
    sqlite3_finalize(st);
    return rc;
}

/* MongoDB's _isShardRequiredByZoneStillInUse: shard is the only one carrying zone and a
 * range still uses the zone. */
static int shard_required_by_zone_locked(cat_t *c, const char *shard, const char *zone,
                                         bool *required, ms_error_t *err) {
    char first[CAT_SHARD_NAME_BYTES_MAX] = "";
    int n = 0;
    int64_t ranges = 0;
    *required = false;
    int rc = zone_shards_locked(c, zone, &n, first, sizeof first, err);
    if (rc || n != 1 || strcmp(first, shard) != 0) return rc;
    rc = cat_count_locked(c, "SELECT count(*) FROM tags WHERE tag = ?", zone, NULL, &ranges, err);
    if (rc == 0) *required = ranges > 0;
    return rc;
}

int cat_zone_check_shard_removable_locked(cat_t *c, const char *shard, ms_error_t *err) {
    bson_t tags;
    bson_iter_t it;
    int rc = shard_tags_locked(c, shard, &tags, err);
    if (rc) return rc;
    if (bson_iter_init(&it, &tags))
        while (rc == 0 && bson_iter_next(&it)) {
            bool required = false;
            if (!BSON_ITER_HOLDS_UTF8(&it)) continue;
            const char *zone = bson_iter_utf8(&it, NULL);
            rc = shard_required_by_zone_locked(c, shard, zone, &required, err);
            if (rc == 0 && required)
                rc = err_set(err, MS_ERR_ZONE_STILL_IN_USE,
                             "Operation not allowed because it would remove the only shard for "
                             "zone %s which has a chunk range is associated with it", zone);
        }
    bson_destroy(&tags);
    return rc;
}

/* Runs fn inside one transaction under the catalog mutex. */
static int in_txn(cat_t *c, int (*fn)(cat_t *, void *, ms_error_t *), void *arg,
                  ms_error_t *err) {
    int rc;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = fn(c, arg, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

typedef struct zone_shard_arg {
    const char *shard, *zone;
    bool add;
} zone_shard_arg_t;

static int zone_shard_fn(cat_t *c, void *arg, ms_error_t *err) {
    zone_shard_arg_t *a = arg;
    bson_t tags, out = BSON_INITIALIZER;
    bson_iter_t it;
    int rc = shard_tags_locked(c, a->shard, &tags, err), i = 0;
    if (rc) {
        bson_destroy(&out);
        return rc;
    }
    bool has = tags_contain(&tags, a->zone);
    if (a->add ? has : !has) goto done;  /* $addToSet / $pull of what is (not) there: no-op */
    if (!a->add) {
        bool required = false;
        rc = shard_required_by_zone_locked(c, a->shard, a->zone, &required, err);
        if (rc) goto done;
        if (required) {
            rc = err_set(err, MS_ERR_ZONE_STILL_IN_USE,
                         "cannot remove a shard from zone if a chunk range is associated with it");
            goto done;
        }
    }
    if (bson_iter_init(&it, &tags))
        while (bson_iter_next(&it)) {
            char idx[16];
            if (!a->add && BSON_ITER_HOLDS_UTF8(&it) &&
                strcmp(bson_iter_utf8(&it, NULL), a->zone) == 0)
                continue;
            snprintf(idx, sizeof idx, "%d", i++);
            bson_append_iter(&out, idx, -1, &it);
        }
    if (a->add) {
        char idx[16];
        snprintf(idx, sizeof idx, "%d", i);
        BSON_APPEND_UTF8(&out, idx, a->zone);
    }
    rc = shard_tags_write_locked(c, a->shard, &out, err);
done:
    bson_destroy(&tags);
    bson_destroy(&out);
    return rc;
}

int cat_zone_add_shard(cat_t *c, const char *shard, const char *zone, ms_error_t *err) {
    zone_shard_arg_t a = {shard, zone, true};
    int rc = zone_name_check(zone, err);
    return rc ? rc : in_txn(c, zone_shard_fn, &a, err);
}

int cat_zone_remove_shard(cat_t *c, const char *shard, const char *zone, ms_error_t *err) {
    zone_shard_arg_t a = {shard, zone, false};
    int rc = zone_name_check(zone, err);
    return rc ? rc : in_txn(c, zone_shard_fn, &a, err);
}

/* ---- key ranges ---------------------------------------------------------------------- */

/* Field names of doc in order as a pattern {f: 1, ...} (an unsharded collection's range:
 * MongoDB's ChunkRange::extractKeyPattern). */
static int pattern_of_doc(const bson_t *doc, keys_pattern_t *p, ms_error_t *err) {
    bson_t spec = BSON_INITIALIZER;
    bson_iter_t it;
    if (bson_iter_init(&it, doc))
        while (bson_iter_next(&it)) BSON_APPEND_INT32(&spec, bson_iter_key(&it), 1);
    int rc = keys_pattern_parse(&spec, p, err);
    bson_destroy(&spec);
    return rc;
}

/* bound's fields must be a prefix of p's names in order (ShardKeyNotFound otherwise);
 * missing fields are filled with MinKey (MongoDB's extendRangeBound(bound, false)). */
static int extend_bound(const keys_pattern_t *p, const bson_t *bound, const char *which,
                        const char *ns, bson_t *out, ms_error_t *err) {
    bson_iter_t it;
    int i = 0;
    bson_init(out);
    if (bson_iter_init(&it, bound))
        while (bson_iter_next(&it)) {
            if (i >= p->nfields || strcmp(bson_iter_key(&it), p->fields[i]) != 0) {
                char *s = bson_as_relaxed_extended_json(bound, NULL);
                int rc = err_set(err, MS_ERR_SHARD_KEY_NOT_FOUND,
                                 "%s: %s is not a prefix of the shard key of ns: %s", which,
                                 s ? s : "?", ns);
                bson_free(s);
                bson_destroy(out);
                return rc;
            }
            if (p->hashed[i] && !BSON_ITER_HOLDS_INT64(&it) &&
                !BSON_ITER_HOLDS_MINKEY(&it) && !BSON_ITER_HOLDS_MAXKEY(&it)) {
                bson_destroy(out);
                return err_set(err, MS_ERR_INVALID_OPTIONS,
                               "there exists a field in the range not of type NumberLong, "
                               "MinKey, or MaxKey which corresponds to a hashed field in the "
                               "shard key pattern of %s", ns);
            }
            bson_append_iter(out, p->fields[i], -1, &it);
            i++;
        }
    for (; i < p->nfields; i++) bson_append_minkey(out, p->fields[i], -1);
    return 0;
}

/* The same field names in the same order (ChunkRange::extractKeyPattern's rule). */
static bool same_fields(const bson_t *a, const bson_t *b) {
    bson_iter_t i, j;
    if (!bson_iter_init(&i, a) || !bson_iter_init(&j, b)) return false;
    for (;;) {
        bool more_i = bson_iter_next(&i), more_j = bson_iter_next(&j);
        if (more_i != more_j) return false;
        if (!more_i) return true;
        if (strcmp(bson_iter_key(&i), bson_iter_key(&j)) != 0) return false;
    }
}

typedef struct zone_range_arg {
    const char *ns;
    const bson_t *min, *max;
    const char *zone;  /* NULL: remove the range */
    bool changed;
} zone_range_arg_t;

static int zone_range_fn(cat_t *c, void *arg, ms_error_t *err) {
    zone_range_arg_t *a = arg;
    cat_coll_t coll;
    keys_pattern_t p;
    bool sharded = false;
    bson_t mn, mx;
    buf_t mn_enc = {0}, mx_enc = {0};
    sqlite3_stmt *st = NULL;
    int rc, s;
    bool have_bounds = false;

    if (a->zone) {
        int n = 0;
        rc = zone_shards_locked(c, a->zone, &n, NULL, 0, err);
        if (rc) return rc;
        if (n == 0) return err_set(err, MS_ERR_ZONE_NOT_FOUND, "zone %s does not exist", a->zone);
    }
    rc = cat_coll_pattern_locked(c, a->ns, &coll, &p, err);
    if (rc == 0) {
        sharded = true;
        cat_coll_free(&coll);
    } else if (rc == MS_ERR_NAMESPACE_NOT_SHARDED) {
        /* MongoDB 4.4+: a range for a collection not sharded (yet) is stored as given. */
        rc = pattern_of_doc(a->min, &p, err);
    }
    if (rc) return rc;
    if (!sharded && !same_fields(a->min, a->max)) {
        rc = err_set(err, MS_ERR_BAD_VALUE,
                     "min and max of a zone range must have the same fields in the same order");
        goto out_pattern;
    }
    rc = extend_bound(&p, a->min, "min", a->ns, &mn, err);
    if (rc) goto out_pattern;
    rc = extend_bound(&p, a->max, "max", a->ns, &mx, err);
    if (rc) {
        bson_destroy(&mn);
        goto out_pattern;
    }
    have_bounds = true;
    rc = keys_encode_bound(&p, &mn, &mn_enc, err);
    if (rc == 0) rc = keys_encode_bound(&p, &mx, &mx_enc, err);
    if (rc) goto out;
    if (cat_buf_cmp(&mn_enc, &mx_enc) >= 0) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "Illegal zone range: min must be less than max");
        goto out;
    }
    if (!a->zone) {  /* removeKeyRangeFromZone: exactly this range; absent is fine */
        rc = cat_sql_prep(c, "DELETE FROM tags WHERE ns = ? AND min_enc = ? AND max_enc = ?", &st, err);
        if (rc) goto out;
        cat_bind_text(st, 1, a->ns);
        cat_bind_buf(st, 2, &mn_enc);
        cat_bind_buf(st, 3, &mx_enc);
        rc = cat_sql_done(c, st, "delete zone range", err);
        a->changed = rc == 0 && sqlite3_changes(c->db) > 0;
        goto out;
    }
    /* Overlap: any range of ns with min < our max and max > our min. Only an identical
     * range of the same zone is accepted (and changes nothing). */
    rc = cat_sql_prep(c, "SELECT min_enc, max_enc, tag, min, max FROM tags WHERE ns = ?"
                         " AND min_enc < ? AND max_enc > ? LIMIT 1", &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, a->ns);
    cat_bind_buf(st, 2, &mx_enc);
    cat_bind_buf(st, 3, &mn_enc);
    s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        bool same = cat_blob_cmp(sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0),
                                 mn_enc.data, mn_enc.len) == 0 &&
                    cat_blob_cmp(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1),
                                 mx_enc.data, mx_enc.len) == 0 &&
                    strcmp(cat_col_text(st, 2), a->zone) == 0;
        if (!same) {
            bson_t emin, emax;
            cat_col_view(st, 3, &emin);
            cat_col_view(st, 4, &emax);
            char *s1 = bson_as_relaxed_extended_json(&mn, NULL);
            char *s2 = bson_as_relaxed_extended_json(&mx, NULL);
            char *s3 = bson_as_relaxed_extended_json(&emin, NULL);
            char *s4 = bson_as_relaxed_extended_json(&emax, NULL);
            rc = err_set(err, MS_ERR_RANGE_OVERLAP_CONFLICT,
                         "Zone range: { min: %s, max: %s } on %s is overlapping with existing: "
                         "{ min: %s, max: %s } on %s", s1 ? s1 : "?", s2 ? s2 : "?", a->zone,
                         s3 ? s3 : "?", s4 ? s4 : "?", cat_col_text(st, 2));
            bson_free(s1);
            bson_free(s2);
            bson_free(s3);
            bson_free(s4);
        }
        goto out;
    }
    if (s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "check zone overlap", c->db);
        goto out;
    }
    sqlite3_finalize(st);
    st = NULL;
    {
        bson_oid_t id;
        bson_oid_init(&id, NULL);
        rc = cat_sql_prep(c, "INSERT INTO tags (id, ns, min, max, min_enc, max_enc, tag)"
                             " VALUES (?, ?, ?, ?, ?, ?, ?)", &st, err);
        if (rc) goto out;
        sqlite3_bind_blob(st, 1, id.bytes, 12, SQLITE_TRANSIENT);
        cat_bind_text(st, 2, a->ns);
        cat_bind_bson(st, 3, &mn);
        cat_bind_bson(st, 4, &mx);
        cat_bind_buf(st, 5, &mn_enc);
        cat_bind_buf(st, 6, &mx_enc);
        cat_bind_text(st, 7, a->zone);
        rc = cat_sql_done(c, st, "insert zone range", err);
        a->changed = rc == 0;
    }
out:
    sqlite3_finalize(st);
    if (have_bounds) {
        bson_destroy(&mn);
        bson_destroy(&mx);
    }
    buf_free(&mn_enc);
    buf_free(&mx_enc);
out_pattern:
    keys_pattern_free(&p);
    return rc;
}

int cat_zone_update_range(cat_t *c, const char *ns, const bson_t *min, const bson_t *max,
                          const char *zone, bool *changed, ms_error_t *err) {
    zone_range_arg_t a = {ns, min, max, zone, false};
    int rc = zone ? zone_name_check(zone, err) : 0;
    if (rc == 0) rc = in_txn(c, zone_range_fn, &a, err);
    if (changed) *changed = a.changed;
    return rc;
}

/* ---- reads for the balancer ---------------------------------------------------------- */

void cat_zones_free(cat_zone_range_t *v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++) {
        bson_destroy(&v[i].min);
        bson_destroy(&v[i].max);
    }
    free(v);
}

int cat_zones_of(cat_t *c, const char *ns, cat_zone_range_t **out, int *n_out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    cat_zone_range_t *v = NULL;
    int n = 0, cap = 0, rc, s;
    *out = NULL;
    *n_out = 0;
    pthread_mutex_lock(&c->mu);
    rc = cat_sql_prep(c, "SELECT min, max, tag FROM tags WHERE ns = ? ORDER BY min_enc", &st, err);
    if (rc) goto unlock;
    cat_bind_text(st, 1, ns);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        bson_t b;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            v = xrealloc(v, sizeof *v * (size_t)cap);
        }
        cat_col_view(st, 0, &b);
        bson_copy_to(&b, &v[n].min);
        cat_col_view(st, 1, &b);
        bson_copy_to(&b, &v[n].max);
        cat_copy_str(v[n].zone, sizeof v[n].zone, cat_col_text(st, 2));
        n++;
    }
    if (s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "list zone ranges", c->db);
        cat_zones_free(v, n);
    } else {
        *out = v;
        *n_out = n;
    }
unlock:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int cat_shard_zones(cat_t *c, const char *shard, char ***zones_out, int *n_out, ms_error_t *err) {
    bson_t tags;
    bson_iter_t it;
    char **v = NULL;
    int n = 0, cap = 0, rc;
    *zones_out = NULL;
    *n_out = 0;
    pthread_mutex_lock(&c->mu);
    rc = shard_tags_locked(c, shard, &tags, err);
    pthread_mutex_unlock(&c->mu);
    if (rc) return rc;
    if (bson_iter_init(&it, &tags))
        while (bson_iter_next(&it)) {
            if (!BSON_ITER_HOLDS_UTF8(&it)) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 4;
                v = xrealloc(v, sizeof *v * (size_t)cap);
            }
            v[n] = strdup(bson_iter_utf8(&it, NULL));
            ASSERT(v[n]);
            n++;
        }
    bson_destroy(&tags);
    *zones_out = v;
    *n_out = n;
    return 0;
}
