/*
 * cmd_consistency.c — the shard's half of checkMetadataConsistency (bin/shardd): MongoDB
 * 7.0's _shardsvrCheckMetadataConsistencyParticipant in miniature. The config server
 * sends, for one database, what its catalog says (the primary shard, and each sharded
 * collection with its uuid, shard key and whether this shard owns chunks of it); the
 * shard compares that with its own catalog and answers the inconsistencies it sees:
 *
 *   CollectionUUIDMismatch  a sharded collection here with another uuid than the catalog's
 *   MissingShardKeyIndex    a sharded collection whose chunks this shard owns, without an
 *                           index that starts with the (ranged) shard key
 *   MisplacedCollection     an unsharded collection (absent from config.collections) on a
 *                           shard that is not the database's primary
 *   MissingLocalCollection  a sharded collection this shard owns chunks of, absent here
 *                           (MongoDB 8.0's type)
 *
 * and, for the collections it owns chunks of, their ready index specs, which the config
 * server compares across the owners (InconsistentIndex). Read only: one store_read
 * snapshot of the catalog.
 */
#include "shardd/shardd.h"

#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"

/* One sharded collection of the request. */
typedef struct cm_coll {
    const char *ns;
    uint8_t uuid[16];
    keys_pattern_t key;
    bool owned;
    bool seen;        /* found in the local catalog */
} cm_coll_t;

typedef struct cm_arg {
    const char *db;
    const char *only;            /* collection level: this ns only; NULL: every one */
    const char *me, *primary;
    cm_coll_t *colls;
    int ncolls;
    bson_t *found;               /* array of inconsistency documents */
    int nfound;
    bson_t *indexes;             /* array of {ns, specs} */
    int nindexes;
} cm_arg_t;

static void add_found(cm_arg_t *a, const char *type, const char *description, bson_t *details) {
    bson_t d;
    char k[16];
    snprintf(k, sizeof k, "%d", a->nfound++);
    BSON_APPEND_DOCUMENT_BEGIN(a->found, k, &d);
    BSON_APPEND_UTF8(&d, "type", type);
    BSON_APPEND_UTF8(&d, "description", description);
    BSON_APPEND_DOCUMENT(&d, "details", details);
    bson_append_document_end(a->found, &d);
    log_warn("metadata inconsistency type=%s shard=%s db=%s", type, log_str(a->me), log_str(a->db));
}

static void append_uuid(bson_t *d, const char *key, const uint8_t *uuid) {
    bson_append_binary(d, key, -1, BSON_SUBTYPE_UUID, uuid, 16);
}

/* MongoDB's findShardKeyPrefixedIndex: an index whose first fields are the shard key's,
 * with the same directions, none hashed (a hashed shard key needs no such index). */
static bool has_shard_key_index(const store_coll_t *c, const keys_pattern_t *sk) {
    if (sk->hashed_field >= 0) return true;
    for (int i = 0; i < c->nindexes; i++) {
        const keys_pattern_t *p = &c->ix[i]->pat;
        bool ok = p->nfields >= sk->nfields;
        for (int f = 0; ok && f < sk->nfields; f++)
            ok = strcmp(p->fields[f], sk->fields[f]) == 0 && !p->hashed[f] && p->dir[f] == sk->dir[f];
        if (ok) return true;
    }
    return false;
}

static bool in_db(const char *ns, const char *db) {
    size_t n = strlen(db);
    return strncmp(ns, db, n) == 0 && ns[n] == '.';
}

static int participant_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    cm_arg_t *a = arg;
    int ncoll = store_coll_count(t);
    for (int i = 0; i < ncoll; i++) {
        store_coll_t *c = store_coll_at(t, i);
        bson_t d;
        if (!c || !in_db(c->ns, a->db) || (a->only && strcmp(c->ns, a->only) != 0)) continue;
        cm_coll_t *cat = NULL;
        for (int k = 0; k < a->ncolls && !cat; k++)
            if (strcmp(a->colls[k].ns, c->ns) == 0) cat = &a->colls[k];
        if (!cat) {
            /* Unsharded: it belongs on the primary shard only (system collections are
             * never sharded nor moved: MongoDB's isNamespaceAlwaysUnsharded). */
            if (strcmp(a->me, a->primary) == 0 || strncmp(c->ns + strlen(a->db) + 1, "system.", 7) == 0)
                continue;
            int64_t n = 0, bytes = 0;
            int rc = store_coll_stats(t, c, &n, &bytes, NULL, NULL, err);
            if (rc) return rc;
            bson_init(&d);
            BSON_APPEND_UTF8(&d, "namespace", c->ns);
            BSON_APPEND_UTF8(&d, "shard", a->me);
            append_uuid(&d, "localUUID", c->uuid);
            BSON_APPEND_INT64(&d, "numDocs", n);
            add_found(a, "MisplacedCollection",
                      "Unsharded collection found on shard different from database primary shard",
                      &d);
            bson_destroy(&d);
            continue;
        }
        cat->seen = true;
        if (memcmp(cat->uuid, c->uuid, 16) != 0) {
            bson_init(&d);
            BSON_APPEND_UTF8(&d, "namespace", c->ns);
            BSON_APPEND_UTF8(&d, "shard", a->me);
            append_uuid(&d, "localUUID", c->uuid);
            append_uuid(&d, "uuid", cat->uuid);
            add_found(a, "CollectionUUIDMismatch",
                      "Found collection on shard with a UUID different from the sharding catalog's",
                      &d);
            bson_destroy(&d);
            continue;
        }
        if (!cat->owned) continue;   /* a shard without chunks takes no part in index DDL */
        if (!has_shard_key_index(c, &cat->key)) {
            bson_init(&d);
            BSON_APPEND_UTF8(&d, "namespace", c->ns);
            BSON_APPEND_UTF8(&d, "shard", a->me);
            BSON_APPEND_DOCUMENT(&d, "shardKey", &cat->key.spec);
            add_found(a, "MissingShardKeyIndex", "Found sharded collection without a shard key index",
                      &d);
            bson_destroy(&d);
        }
        bson_t e, specs;
        char k[16];
        snprintf(k, sizeof k, "%d", a->nindexes++);
        BSON_APPEND_DOCUMENT_BEGIN(a->indexes, k, &e);
        BSON_APPEND_UTF8(&e, "ns", c->ns);
        BSON_APPEND_ARRAY_BEGIN(&e, "specs", &specs);
        for (int x = 0; x < c->nindexes; x++) {
            snprintf(k, sizeof k, "%d", x);
            BSON_APPEND_DOCUMENT(&specs, k, &c->ix[x]->spec);
        }
        bson_append_array_end(&e, &specs);
        bson_append_document_end(a->indexes, &e);
    }
    for (int k = 0; k < a->ncolls; k++) {
        cm_coll_t *cat = &a->colls[k];
        bson_t d;
        if (!cat->owned || cat->seen || !in_db(cat->ns, a->db) ||
            (a->only && strcmp(cat->ns, a->only) != 0))
            continue;
        bson_init(&d);
        BSON_APPEND_UTF8(&d, "namespace", cat->ns);
        append_uuid(&d, "uuid", cat->uuid);
        BSON_APPEND_UTF8(&d, "shard", a->me);
        add_found(a, "MissingLocalCollection",
                  "Collection registered on the sharding catalog not found on the given shards", &d);
        bson_destroy(&d);
    }
    return 0;
}

/* {_shardsvrCheckMetadataConsistencyParticipant: "db", primaryShard, collection?: "db.c",
 *  collections: [{ns, uuid, key, owned}]} → {inconsistencies: [...], indexes: [{ns, specs}]} */
int cmd_check_metadata_participant(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    shardd_t *app = ctx->app;
    char me[128] = "";
    cm_arg_t a;
    cm_coll_t *colls = calloc(MS_CHECK_METADATA_COLLS_MAX, sizeof *colls);
    bson_iter_t it, arr;
    bson_t found = BSON_INITIALIZER, indexes = BSON_INITIALIZER;
    int rc = 0, n = 0;
    memset(&a, 0, sizeof a);
    if (!colls) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "checkMetadataConsistency: out of memory");
    if (app->shv) shv_identity(app->shv, me, sizeof me, NULL, 0);
    if (!me[0]) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION,
                     "checkMetadataConsistency: this shard is not part of a cluster (addShard)");
        goto out;
    }
    a.db = bson_iter_utf8(&ctx->arg, NULL);
    a.me = me;
    a.primary = cmd_field(ctx, "primaryShard", &it) ? bson_iter_utf8(&it, NULL) : "";
    if (cmd_field(ctx, "collection", &it)) a.only = bson_iter_utf8(&it, NULL);
    if (cmd_field(ctx, "collections", &it) && bson_iter_recurse(&it, &arr)) {
        while (bson_iter_next(&arr)) {
            bson_t one, key;
            bson_iter_t f;
            if (n >= MS_CHECK_METADATA_COLLS_MAX) {
                rc = err_set(err, MS_ERR_BAD_VALUE, "checkMetadataConsistency: more than %d collections in one database",
                             MS_CHECK_METADATA_COLLS_MAX);
                goto out;
            }
            cm_coll_t *c = &colls[n];
            memset(c, 0, sizeof *c);
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bsonx_view_container(&arr, &one) ||
                !bson_iter_init_find(&f, &one, "ns") || !BSON_ITER_HOLDS_UTF8(&f)) {
                rc = err_set(err, MS_ERR_TYPE_MISMATCH, "collections: each entry needs ns");
                goto out;
            }
            c->ns = bson_iter_utf8(&f, NULL);
            if (bson_iter_init_find(&f, &one, "uuid") && BSON_ITER_HOLDS_BINARY(&f)) {
                bson_subtype_t st;
                uint32_t len;
                const uint8_t *data;
                bson_iter_binary(&f, &st, &len, &data);
                if (len == 16) memcpy(c->uuid, data, 16);
            }
            c->owned = bson_iter_init_find(&f, &one, "owned") && bsonx_truthy(&f);
            if (!bson_iter_init_find(&f, &one, "key") || !bsonx_view_container(&f, &key)) {
                rc = err_set(err, MS_ERR_TYPE_MISMATCH, "collections: %s has no key", c->ns);
                goto out;
            }
            if ((rc = keys_pattern_parse(&key, &c->key, err)) != 0) goto out;
            n++;
        }
    }
    a.colls = colls;
    a.ncolls = n;
    a.found = &found;
    a.indexes = &indexes;
    if ((rc = store_read(app->st, participant_fn, &a, err)) != 0) goto out;
    BSON_APPEND_ARRAY(reply, "inconsistencies", &found);
    BSON_APPEND_ARRAY(reply, "indexes", &indexes);
out:
    for (int i = 0; i < n; i++) keys_pattern_free(&colls[i].key);
    free(colls);
    bson_destroy(&found);
    bson_destroy(&indexes);
    return rc;
}
