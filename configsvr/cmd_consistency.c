/*
 * cmd_consistency.c — _configsvrCheckMetadataConsistency (bin/configsvr): the coordinator
 * of checkMetadataConsistency (MongoDB 7.0's command; the router serves it to clients and
 * sends this). For each database in scope, under that database's DDL lock (so no
 * shardCollection, drop, movePrimary or dropDatabase of it runs meanwhile, as MongoDB
 * holds the database DDL lock), it
 *   1. checks the catalog (cat_consistency.c: routing-table gaps, overlaps, min/max key,
 *      corrupted chunk and zone bounds, missing routing tables),
 *   2. asks every shard (_shardsvrCheckMetadataConsistencyParticipant) to compare its own
 *      catalog with the catalog's list of sharded collections (UUID mismatches, missing
 *      shard-key indexes, misplaced unsharded collections, missing local collections), and
 *   3. with checkIndexes, compares the index specs of each sharded collection across the
 *      shards that own its chunks (InconsistentIndex: missingFromShards,
 *      inconsistentProperties, indexName — MongoDB's $indexStats pipeline, done here).
 * At cluster level it also reports sharded collections of databases that do not exist
 * (HiddenShardedCollection). A shard that does not answer fails the command: a partial
 * check would read as a clean one.
 */
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* One shard's participant reply of the database being checked. */
typedef struct cm_shard {
    const char *name;
    bson_t reply;
    bool have;
} cm_shard_t;

/* The specs array shard s reported for ns (a view into its reply), false when none. */
static bool specs_of(const cm_shard_t *s, const char *ns, bson_t *out) {
    bson_iter_t it, arr, f;
    if (!s->have || !bson_iter_init_find(&it, &s->reply, "indexes") || !bson_iter_recurse(&it, &arr))
        return false;
    while (bson_iter_next(&arr)) {
        bson_t one;
        if (!bsonx_view_container(&arr, &one)) continue;
        if (bson_iter_init_find(&f, &one, "ns") && BSON_ITER_HOLDS_UTF8(&f) &&
            strcmp(bson_iter_utf8(&f, NULL), ns) == 0 && bson_iter_init_find(&f, &one, "specs"))
            return bsonx_view_container(&f, out);
    }
    return false;
}

/* The spec named name in a specs array (a view), false when absent. */
static bool spec_named(const bson_t *specs, const char *name, bson_t *out) {
    bson_iter_t it, f;
    if (!bson_iter_init(&it, specs)) return false;
    while (bson_iter_next(&it)) {
        bson_t one;
        if (!bsonx_view_container(&it, &one)) continue;
        if (bson_iter_init_find(&f, &one, "name") && BSON_ITER_HOLDS_UTF8(&f) &&
            strcmp(bson_iter_utf8(&f, NULL), name) == 0)
            return bsonx_view_container(&it, out);   /* a static bson_t is never copied */
    }
    return false;
}

/* True when spec has field k with the same value as it (compared as one-field docs). */
static bool spec_has(const bson_t *spec, const char *k, const bson_iter_t *v) {
    bson_iter_t f;
    bson_t a = BSON_INITIALIZER, b = BSON_INITIALIZER;
    bool eq = false;
    if (bson_iter_init_find(&f, spec, k)) {
        bson_append_iter(&a, "v", 1, v);
        bson_append_iter(&b, "v", 1, &f);
        eq = bson_equal(&a, &b);
    }
    bson_destroy(&a);
    bson_destroy(&b);
    return eq;
}

/* InconsistentIndex for one sharded collection, across the shards that own its chunks. */
static void compare_indexes(const cat_cm_coll_t *coll, cm_shard_t *shards, int nshards,
                            bson_t *found, int *nfound) {
    bson_t specs[MS_SHARDS_MAX];
    const char *owner[MS_SHARDS_MAX];
    bool has[MS_SHARDS_MAX];
    int n = 0;
    /* Owners' spec arrays (an owner that reported none has none: every index missing). */
    for (int o = 0; o < coll->nowners && n < MS_SHARDS_MAX; o++)
        for (int s = 0; s < nshards; s++)
            if (strcmp(shards[s].name, coll->owners[o]) == 0) {
                owner[n] = shards[s].name;
                has[n] = specs_of(&shards[s], coll->ns, &specs[n]);
                n++;
            }
    if (n < 2) return;
    /* Every index name any owner has, once. */
    for (int i = 0; i < n; i++) {
        bson_iter_t it, f;
        if (!has[i] || !bson_iter_init(&it, &specs[i])) continue;
        while (bson_iter_next(&it)) {
            bson_t spec, other;
            const char *name;
            if (!bsonx_view_container(&it, &spec) || !bson_iter_init_find(&f, &spec, "name") ||
                !BSON_ITER_HOLDS_UTF8(&f))
                continue;
            name = bson_iter_utf8(&f, NULL);
            bool earlier = false;
            for (int j = 0; j < i && !earlier; j++) earlier = has[j] && spec_named(&specs[j], name, &other);
            if (earlier) continue;   /* reported with the first owner that has it */
            bson_t missing = BSON_INITIALIZER, props = BSON_INITIALIZER, present[MS_SHARDS_MAX];
            int nmissing = 0, nprops = 0, npresent = 0;
            for (int j = 0; j < n; j++) {
                if (has[j] && spec_named(&specs[j], name, &present[npresent])) {
                    npresent++;
                } else {
                    char k[16];
                    snprintf(k, sizeof k, "%d", nmissing++);
                    BSON_APPEND_UTF8(&missing, k, owner[j]);
                }
            }
            /* Union minus intersection of the {k, v} pairs of the specs that exist. */
            for (int j = 0; j < npresent; j++) {
                bson_iter_t p;
                if (!bson_iter_init(&p, &present[j])) continue;
                while (bson_iter_next(&p)) {
                    const char *k = bson_iter_key(&p);
                    bool everywhere = true, listed = false;
                    for (int x = 0; x < npresent && everywhere; x++) everywhere = spec_has(&present[x], k, &p);
                    if (everywhere) continue;
                    for (int x = 0; x < j && !listed; x++) listed = spec_has(&present[x], k, &p);
                    if (listed) continue;   /* the same pair from an earlier spec */
                    bson_t kv;
                    char key[16];
                    snprintf(key, sizeof key, "%d", nprops++);
                    BSON_APPEND_DOCUMENT_BEGIN(&props, key, &kv);
                    BSON_APPEND_UTF8(&kv, "k", k);
                    bson_append_iter(&kv, "v", 1, &p);
                    bson_append_document_end(&props, &kv);
                }
            }
            if (nmissing || nprops) {
                bson_t d, info;
                bson_init(&d);
                BSON_APPEND_UTF8(&d, "namespace", coll->ns);
                BSON_APPEND_DOCUMENT_BEGIN(&d, "info", &info);
                BSON_APPEND_ARRAY(&info, "missingFromShards", &missing);
                BSON_APPEND_ARRAY(&info, "inconsistentProperties", &props);
                BSON_APPEND_UTF8(&info, "indexName", name);
                bson_append_document_end(&d, &info);
                cat_cm_add(found, nfound, "InconsistentIndex",
                           "Found an index of a sharded collection that is inconsistent between "
                           "different shards", &d);
                bson_destroy(&d);
            }
            bson_destroy(&missing);
            bson_destroy(&props);
        }
    }
}

/* One database, under its DDL lock. */
static int check_db(cfg_t *cfg, const char *db, const char *only_ns, bool check_indexes,
                    char **shard_names, int nshards, bson_t *found, int *nfound, ms_error_t *err) {
    cfg_ddl_guard_t g;
    char primary[CAT_SHARD_NAME_BYTES_MAX] = "";
    cat_cm_coll_t *colls = NULL;
    cm_shard_t *sh = calloc((size_t)(nshards ? nshards : 1), sizeof *sh);
    int ncolls = 0, rc;
    memset(&g, 0, sizeof g);
    if (!sh) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "checkMetadataConsistency: out of memory");
    if ((rc = cfg_ddl_lock_db(cfg, db, "checkMetadataConsistency", &g, err)) != 0) goto out;
    rc = cat_db_primary(cfg->cat, db, primary, sizeof primary, err);
    if (rc == MS_ERR_NAMESPACE_NOT_FOUND) {
        rc = 0;   /* dropped meanwhile, or never created: nothing of it to check */
        goto out;
    }
    if (rc) goto out;
    if ((rc = cat_cm_check(cfg->cat, db, only_ns, found, nfound, &colls, &ncolls, err)) != 0) goto out;
    for (int s = 0; s < nshards && rc == 0; s++) {
        bson_t cmd = BSON_INITIALIZER, arr, one;
        bson_iter_t it;
        char k[16];
        sh[s].name = shard_names[s];
        BSON_APPEND_UTF8(&cmd, "_shardsvrCheckMetadataConsistencyParticipant", db);
        BSON_APPEND_UTF8(&cmd, "primaryShard", primary);
        if (only_ns) BSON_APPEND_UTF8(&cmd, "collection", only_ns);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "collections", &arr);
        for (int i = 0; i < ncolls; i++) {
            bool owned = false;
            for (int o = 0; o < colls[i].nowners && !owned; o++)
                owned = strcmp(colls[i].owners[o], shard_names[s]) == 0;
            snprintf(k, sizeof k, "%d", i);
            BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &one);
            BSON_APPEND_UTF8(&one, "ns", colls[i].ns);
            bson_append_binary(&one, "uuid", -1, BSON_SUBTYPE_UUID, colls[i].uuid, 16);
            BSON_APPEND_DOCUMENT(&one, "key", &colls[i].key);
            BSON_APPEND_BOOL(&one, "owned", owned);
            bson_append_document_end(&arr, &one);
        }
        bson_append_array_end(&cmd, &arr);
        BSON_APPEND_UTF8(&cmd, "$db", "admin");
        rc = cfg_shard_command(cfg, shard_names[s], &cmd, CFG_SHARD_CMD_TIMEOUT_MS, &sh[s].reply, err);
        bson_destroy(&cmd);
        if (rc) {
            err_prefix(err, "checkMetadataConsistency: shard %s", shard_names[s]);
            break;
        }
        sh[s].have = true;
        if (bson_iter_init_find(&it, &sh[s].reply, "inconsistencies") && bson_iter_recurse(&it, &it))
            while (bson_iter_next(&it)) {
                bson_t one_found;
                bson_iter_t t, dsc, det;
                bson_t details;
                if (!bsonx_view_container(&it, &one_found) || !bson_iter_init_find(&t, &one_found, "type") ||
                    !BSON_ITER_HOLDS_UTF8(&t) || !bson_iter_init_find(&dsc, &one_found, "description") ||
                    !BSON_ITER_HOLDS_UTF8(&dsc) || !bson_iter_init_find(&det, &one_found, "details") ||
                    !bsonx_view_container(&det, &details))
                    continue;
                cat_cm_add(found, nfound, bson_iter_utf8(&t, NULL), bson_iter_utf8(&dsc, NULL), &details);
            }
    }
    if (rc == 0 && check_indexes)
        for (int i = 0; i < ncolls; i++) compare_indexes(&colls[i], sh, nshards, found, nfound);
out:
    cfg_ddl_unlock(&g);
    for (int s = 0; s < nshards; s++)
        if (sh[s].have) bson_destroy(&sh[s].reply);
    free(sh);
    cat_cm_colls_free(colls, ncolls);
    return rc;
}

/* {_configsvrCheckMetadataConsistency: 1, db?: "app", collection?: "app.c",
 *  checkIndexes?: bool, $db: "admin"} → {inconsistencies: [...], truncated?: n}.
 * No db: cluster level (every database, and HiddenShardedCollection). */
int cfg_cmd_check_metadata(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    bson_iter_t it;
    const char *db = NULL, *only = NULL;
    char **dbs = NULL, **shards = NULL, onedb[CAT_DB_NAME_BYTES_MAX];
    int ndbs = 0, nshards = 0, nfound = 0, rc;
    bool check_indexes = cmd_flag(ctx, "checkIndexes", false);
    bson_t found = BSON_INITIALIZER;
    if (cmd_field(ctx, "db", &it) && BSON_ITER_HOLDS_UTF8(&it)) {
        uint32_t len = 0;
        db = bson_iter_utf8(&it, &len);
        if (len == 0 || len >= CAT_DB_NAME_BYTES_MAX || strlen(db) != len || strchr(db, '.')) {
            rc = err_set(err, MS_ERR_INVALID_NAMESPACE, "checkMetadataConsistency: invalid database name");
            goto out;
        }
    }
    if (cmd_field(ctx, "collection", &it) && BSON_ITER_HOLDS_UTF8(&it)) {
        only = bson_iter_utf8(&it, NULL);
        if ((rc = cfg_ns_split(only, onedb, sizeof onedb, NULL, err)) != 0) goto out;
        if (db && strcmp(db, onedb) != 0) {
            rc = err_set(err, MS_ERR_INVALID_NAMESPACE, "collection %s is not in database %s", only, db);
            goto out;
        }
        db = onedb;
    }
    if ((rc = cat_shard_names(cfg->cat, true, &shards, &nshards, err)) != 0) goto out;
    if (!db) {
        if ((rc = cat_cm_check(cfg->cat, NULL, NULL, &found, &nfound, NULL, NULL, err)) != 0) goto out;
        if ((rc = cat_cm_databases(cfg->cat, &dbs, &ndbs, err)) != 0) goto out;
        for (int i = 0; i < ndbs && rc == 0; i++)
            rc = check_db(cfg, dbs[i], NULL, check_indexes, shards, nshards, &found, &nfound, err);
    } else {
        rc = check_db(cfg, db, only, check_indexes, shards, nshards, &found, &nfound, err);
    }
    if (rc) goto out;
    BSON_APPEND_ARRAY(reply, "inconsistencies", &found);
    if (nfound > MS_CHECK_METADATA_FOUND_MAX) BSON_APPEND_INT32(reply, "truncated", nfound);
    log_info("checkMetadataConsistency db=%s ns=%s checkIndexes=%d found=%d", log_str(db ? db : "*"),
             log_str(only ? only : "*"), check_indexes, nfound);
out:
    bson_destroy(&found);
    cat_strv_free(dbs, ndbs);
    cat_strv_free(shards, nshards);
    return rc;
}
