/*
 * cat_consistency.c — the catalog's half of checkMetadataConsistency (bin/configsvr):
 * what the config server can see wrong in its own tables, with MongoDB 7.0's type names
 * and details (MetadataInconsistencyType), and the list of sharded collections (uuid,
 * key, shards that own chunks) that the shards' half is checked against
 * (cmd_consistency.c sends it to each shard).
 *
 *   HiddenShardedCollection   config.collections names a database config.databases lacks
 *                             (cluster level only)
 *   MissingRoutingTable       a sharded collection without any chunk
 *   RoutingTableMissingMinKey the first chunk does not start at the global min
 *   RoutingTableMissingMaxKey the last chunk does not end at the global max
 *   RoutingTableRangeGap      two consecutive chunks leave a gap
 *   RoutingTableRangeOverlap  two consecutive chunks overlap
 *   CorruptedChunkShardKey    a chunk whose min or max is not a key of the shard key pattern
 *   ZonesRangeOverlap         two zone ranges of a collection overlap
 *   CorruptedZoneShardKey     a zone range whose min or max is not a key of the pattern
 *
 * Chunks are read in encoded-min order, one pass per collection: O(chunks) of the scope.
 */
#include "configsvr/cat_priv.h"

#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"

void cat_cm_add(bson_t *found, int *nfound, const char *type, const char *description,
                const bson_t *details) {
    bson_t d;
    char k[16];
    if (*nfound >= MS_CHECK_METADATA_FOUND_MAX) {
        (*nfound)++;   /* counted, not listed: the reply says truncated */
        return;
    }
    snprintf(k, sizeof k, "%d", (*nfound)++);
    BSON_APPEND_DOCUMENT_BEGIN(found, k, &d);
    BSON_APPEND_UTF8(&d, "type", type);
    BSON_APPEND_UTF8(&d, "description", description);
    BSON_APPEND_DOCUMENT(&d, "details", details);
    bson_append_document_end(found, &d);
    log_warn("metadata inconsistency type=%s", type);
}

void cat_cm_colls_free(cat_cm_coll_t *v, int n) {
    if (!v) return;
    for (int i = 0; i < n; i++) {
        bson_destroy(&v[i].key);
        cat_strv_free(v[i].owners, v[i].nowners);
    }
    free(v);
}

int cat_cm_databases(cat_t *c, char ***names, int *n, ms_error_t *err) {
    pthread_mutex_lock(&c->mu);
    int rc = cat_strv_locked(c, "SELECT name FROM databases ORDER BY name", NULL, names, n, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* True when doc's fields are exactly the pattern's, in its order (a chunk or zone bound). */
static bool bound_matches(const keys_pattern_t *p, const bson_t *doc) {
    bson_iter_t it;
    int i = 0;
    if (!bson_iter_init(&it, doc)) return false;
    while (bson_iter_next(&it)) {
        if (i >= p->nfields || strcmp(bson_iter_key(&it), p->fields[i]) != 0) return false;
        i++;
    }
    return i == p->nfields;
}

typedef struct cm_scan {
    cat_t *c;
    const char *ns;
    const uint8_t *uuid;
    const keys_pattern_t *p;
    bson_t *found;
    int *nfound;
} cm_scan_t;

static void details_head(const cm_scan_t *s, bson_t *d) {
    bson_init(d);
    BSON_APPEND_UTF8(d, "namespace", s->ns);
    cat_append_uuid(d, "collectionUUID", s->uuid);
}

/* One collection's chunks: tiling and bound shapes; the owners into *owners. */
static int scan_chunks(cm_scan_t *s, char ***owners, int *nowners, ms_error_t *err) {
    bson_t gmin_doc, gmax_doc, prev_doc = BSON_INITIALIZER, d;
    buf_t gmin = {0}, gmax = {0}, prev_max = {0};
    sqlite3_stmt *st = NULL;
    int64_t n = 0;
    int rc, step;
    bson_init(&gmin_doc);
    bson_init(&gmax_doc);
    keys_global_min(s->p, &gmin_doc);
    keys_global_max(s->p, &gmax_doc);
    if ((rc = keys_encode_bound(s->p, &gmin_doc, &gmin, err)) != 0 ||
        (rc = keys_encode_bound(s->p, &gmax_doc, &gmax, err)) != 0)
        goto out;
    rc = cat_sql_prep(s->c, "SELECT " CHUNK_COLS " FROM chunks WHERE ns = ? ORDER BY min_enc", &st,
                      err);
    if (rc) goto out;
    cat_bind_text(st, 1, s->ns);
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const void *mn = sqlite3_column_blob(st, CC_MIN_ENC), *mx = sqlite3_column_blob(st, CC_MAX_ENC);
        size_t mnl = (size_t)sqlite3_column_bytes(st, CC_MIN_ENC);
        size_t mxl = (size_t)sqlite3_column_bytes(st, CC_MAX_ENC);
        const char *shard = cat_col_text(st, CC_SHARD);
        bson_t chunk, bmin, bmax;
        bson_init(&chunk);
        cat_chunk_doc(st, &chunk);
        cat_col_view(st, CC_MIN, &bmin);
        cat_col_view(st, CC_MAX, &bmax);
        if (!bound_matches(s->p, &bmin) || !bound_matches(s->p, &bmax)) {
            details_head(s, &d);
            BSON_APPEND_DOCUMENT(&d, "chunk", &chunk);
            BSON_APPEND_DOCUMENT(&d, "shardKeyPattern", &s->p->spec);
            cat_cm_add(s->found, s->nfound, "CorruptedChunkShardKey",
                       "Found chunk with a shard key pattern violation", &d);
            bson_destroy(&d);
        }
        if (n == 0 && cat_blob_cmp(mn, mnl, gmin.data, gmin.len) != 0) {
            details_head(s, &d);
            BSON_APPEND_DOCUMENT(&d, "minKeyObj", &bmin);
            BSON_APPEND_DOCUMENT(&d, "globalMin", &gmin_doc);
            cat_cm_add(s->found, s->nfound, "RoutingTableMissingMinKey",
                       "Routing table has a gap because first chunk does not start from MinKey", &d);
            bson_destroy(&d);
        }
        if (n > 0) {
            int gap = cat_blob_cmp(mn, mnl, prev_max.data, prev_max.len);
            if (gap != 0) {
                details_head(s, &d);
                BSON_APPEND_DOCUMENT(&d, "chunkA", &prev_doc);
                BSON_APPEND_DOCUMENT(&d, "chunkB", &chunk);
                if (gap > 0)
                    cat_cm_add(s->found, s->nfound, "RoutingTableRangeGap",
                               "Found a gap between two consecutive chunks", &d);
                else
                    cat_cm_add(s->found, s->nfound, "RoutingTableRangeOverlap",
                               "Found two overlapping consecutive chunks", &d);
                bson_destroy(&d);
            }
        }
        bool known = false;
        for (int i = 0; i < *nowners && !known; i++) known = strcmp((*owners)[i], shard) == 0;
        if (!known) {
            char **g = realloc(*owners, (size_t)(*nowners + 1) * sizeof *g);
            char *dup = g ? strdup(shard) : NULL;
            if (!g || !dup) {
                if (g) *owners = g;
                free(dup);
                bson_destroy(&chunk);
                rc = err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "checkMetadataConsistency: out of memory");
                goto out;
            }
            *owners = g;
            (*owners)[(*nowners)++] = dup;
        }
        buf_reset(&prev_max);
        buf_put(&prev_max, mx, mxl);
        bson_reinit(&prev_doc);
        bson_concat(&prev_doc, &chunk);
        bson_destroy(&chunk);
        n++;
    }
    if (step != SQLITE_DONE) {
        rc = err_from_sqlite(err, step, "checkMetadataConsistency chunk scan", s->c->db);
        goto out;
    }
    if (n == 0) {
        details_head(s, &d);
        cat_cm_add(s->found, s->nfound, "MissingRoutingTable",
                   "There is a sharded collection without routing table", &d);
        bson_destroy(&d);
    } else if (cat_buf_cmp(&prev_max, &gmax) != 0) {
        bson_t last_max;
        bson_iter_t it;
        details_head(s, &d);
        if (bson_iter_init_find(&it, &prev_doc, "max") && bsonx_view_container(&it, &last_max))
            BSON_APPEND_DOCUMENT(&d, "maxKeyObj", &last_max);
        BSON_APPEND_DOCUMENT(&d, "globalMax", &gmax_doc);
        cat_cm_add(s->found, s->nfound, "RoutingTableMissingMaxKey",
                   "Routing table has a gap because last chunk boundary does not reach MaxKey", &d);
        bson_destroy(&d);
    }
out:
    sqlite3_finalize(st);
    buf_free(&gmin);
    buf_free(&gmax);
    buf_free(&prev_max);
    bson_destroy(&gmin_doc);
    bson_destroy(&gmax_doc);
    bson_destroy(&prev_doc);
    return rc;
}

/* One collection's zone ranges (config.tags): overlaps and bound shapes. */
static int scan_zones(cm_scan_t *s, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    bson_t prev = BSON_INITIALIZER, d;
    buf_t prev_max = {0};
    int n = 0, rc, step;
    rc = cat_sql_prep(s->c, "SELECT min, max, min_enc, max_enc, tag FROM tags WHERE ns = ? ORDER BY min_enc",
                      &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, s->ns);
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        bson_t bmin, bmax, zone;
        cat_col_view(st, 0, &bmin);
        cat_col_view(st, 1, &bmax);
        bson_init(&zone);
        BSON_APPEND_UTF8(&zone, "ns", s->ns);
        BSON_APPEND_DOCUMENT(&zone, "min", &bmin);
        BSON_APPEND_DOCUMENT(&zone, "max", &bmax);
        BSON_APPEND_UTF8(&zone, "tag", cat_col_text(st, 4));
        if (!bound_matches(s->p, &bmin) || !bound_matches(s->p, &bmax)) {
            details_head(s, &d);
            BSON_APPEND_DOCUMENT(&d, "zone", &zone);
            BSON_APPEND_DOCUMENT(&d, "shardKeyPattern", &s->p->spec);
            cat_cm_add(s->found, s->nfound, "CorruptedZoneShardKey",
                       "Found zone with a shard key pattern violation", &d);
            bson_destroy(&d);
        }
        if (n > 0 && cat_blob_cmp(sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2),
                                  prev_max.data, prev_max.len) < 0) {
            details_head(s, &d);
            BSON_APPEND_DOCUMENT(&d, "zoneA", &prev);
            BSON_APPEND_DOCUMENT(&d, "zoneB", &zone);
            cat_cm_add(s->found, s->nfound, "ZonesRangeOverlap", "Found overlapping zones", &d);
            bson_destroy(&d);
        }
        buf_reset(&prev_max);
        buf_put(&prev_max, sqlite3_column_blob(st, 3), (size_t)sqlite3_column_bytes(st, 3));
        bson_reinit(&prev);
        bson_concat(&prev, &zone);
        bson_destroy(&zone);
        n++;
    }
    if (step != SQLITE_DONE) rc = err_from_sqlite(err, step, "checkMetadataConsistency zone scan", s->c->db);
out:
    sqlite3_finalize(st);
    bson_destroy(&prev);
    buf_free(&prev_max);
    return rc;
}

/* HiddenShardedCollection: collections whose database has no entry. */
static int hidden_locked(cat_t *c, bson_t *found, int *nfound, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, "SELECT " COLL_COLS " FROM collections"
                             " WHERE db NOT IN (SELECT name FROM databases) ORDER BY ns", &st, err);
    int step;
    if (rc) return rc;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        bson_t d, doc;
        bson_init(&d);
        bson_init(&doc);
        cat_coll_doc(st, &doc);
        BSON_APPEND_UTF8(&d, "namespace", cat_col_text(st, 0));
        BSON_APPEND_DOCUMENT(&d, "collection", &doc);
        cat_cm_add(found, nfound, "HiddenShardedCollection",
                   "Found sharded collection but relative database does not exist", &d);
        bson_destroy(&doc);
        bson_destroy(&d);
    }
    if (step != SQLITE_DONE) rc = err_from_sqlite(err, step, "checkMetadataConsistency hidden scan", c->db);
    sqlite3_finalize(st);
    return rc;
}

int cat_cm_check(cat_t *c, const char *db, const char *only_ns, bson_t *found, int *nfound,
                 cat_cm_coll_t **colls_out, int *ncolls_out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    cat_cm_coll_t *v = NULL;
    int n = 0, rc = 0, step;
    if (colls_out) *colls_out = NULL;
    if (ncolls_out) *ncolls_out = 0;
    pthread_mutex_lock(&c->mu);
    if (!db) {
        rc = hidden_locked(c, found, nfound, err);
        goto out;
    }
    rc = cat_sql_prep(c, "SELECT " COLL_COLS " FROM collections WHERE db = ? ORDER BY ns", &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, db);
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        const char *ns = cat_col_text(st, 0);
        if (only_ns && strcmp(ns, only_ns) != 0) continue;
        if (n >= MS_CHECK_METADATA_COLLS_MAX) {
            rc = err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                         "checkMetadataConsistency: database %s has more than %d sharded collections;"
                         " check them one by one", db, MS_CHECK_METADATA_COLLS_MAX);
            goto out;
        }
        cat_cm_coll_t *g = realloc(v, (size_t)(n + 1) * sizeof *g);
        if (!g) {
            rc = err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "checkMetadataConsistency: out of memory");
            goto out;
        }
        v = g;
        cat_cm_coll_t *e = &v[n++];
        memset(e, 0, sizeof *e);
        cat_coll_t cc;
        cat_coll_from_row(st, &cc);
        cat_copy_str(e->ns, sizeof e->ns, cc.ns);
        memcpy(e->uuid, cc.uuid, 16);
        bson_init(&e->key);
        bson_concat(&e->key, &cc.key);
        cat_coll_free(&cc);
    }
    if (step != SQLITE_DONE) {
        rc = err_from_sqlite(err, step, "checkMetadataConsistency collections", c->db);
        goto out;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        keys_pattern_t p;
        if (keys_pattern_parse(&v[i].key, &p, NULL) != 0) {
            /* A key the catalog cannot parse: its chunks cannot be checked either. */
            bson_t d;
            bson_init(&d);
            BSON_APPEND_UTF8(&d, "namespace", v[i].ns);
            cat_append_uuid(&d, "collectionUUID", v[i].uuid);
            BSON_APPEND_DOCUMENT(&d, "shardKeyPattern", &v[i].key);
            cat_cm_add(found, nfound, "CorruptedChunkShardKey",
                       "The collection's shard key pattern cannot be parsed", &d);
            bson_destroy(&d);
            continue;
        }
        cm_scan_t s = {c, v[i].ns, v[i].uuid, &p, found, nfound};
        rc = scan_chunks(&s, &v[i].owners, &v[i].nowners, err);
        if (rc == 0) rc = scan_zones(&s, err);
        keys_pattern_free(&p);
    }
out:
    sqlite3_finalize(st);
    pthread_mutex_unlock(&c->mu);
    if (rc) {
        cat_cm_colls_free(v, n);
        return rc;
    }
    if (colls_out) *colls_out = v;
    else cat_cm_colls_free(v, n);
    if (ncolls_out) *ncolls_out = colls_out ? n : 0;
    return 0;
}
