/*
 * cfg_query.c — the query engine over the config collections (bin/configsvr): the config
 * database as MongoDB users know it. find, count and aggregate on config.<collection>
 * (documents built from the catalog in MongoDB's shapes, then filtered, sorted, skipped,
 * limited and projected with the query engine), cursors over those results (getMore,
 * killCursors, idle timeout), and update on config.settings (balancer, chunksize,
 * automerge, ...), validated. Every other config collection is read-only here.
 *
 * A find in catalog order (no sort, or the sort the catalog's index already gives) reads
 * the catalog a page at a time (cat_config_page: keyset paging on the collection's
 * unique index) as its batches are asked for, so config.chunks of a million chunks is
 * read in batches in bounded memory: the first batch 101 documents unless batchSize says
 * otherwise, every batch at most 16 MB, a getMore without batchSize fills 16 MB. Like
 * MongoDB's config reads without a snapshot read concern, a later batch sees the catalog
 * as it is then. A find with another sort materialises its matches, sorts them and
 * serves them from memory (at most MS_MSG_BYTES_MAX of matches). count and aggregate
 * never hold more than one page of catalog rows: count is answered from the indexes
 * when its filter names only a collection and a shard, sh.status()'s chunks-per-shard
 * $group from the (ns, shard, min) index.
 */
#include <stdlib.h>
#include <string.h>

#include "common/agg.h"
#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/project.h"
#include "common/query.h"
#include "common/sortspec.h"
#include "configsvr/configsvr.h"

/* Catalog rows read under the catalog lock at once: a page of a cursor's read. */
#define CFG_PAGE_ROWS 256

/* A filter's narrowing to one collection: config.chunks filtered on uuid (16 bytes of
 * subtype 4; its documents name their collection so, as MongoDB 5.0's do) or
 * config.tags on ns (a string), top-level equality. */
typedef struct pin_buf {
    cat_pin_t pin;
    char ns[MS_NS_BYTES_MAX + 1];
    uint8_t uuid[16];
    int nkeys, npinned;      /* the filter's top-level fields, and those that pinned */
    const char *shard;       /* a top-level {shard: "<name>"} (borrowed from the filter) */
    bool jumbo;              /* a top-level {jumbo: true} */
} pin_buf_t;

static void pin_from_filter(const char *coll, const bson_t *filter, pin_buf_t *pb) {
    bool chunks = strcmp(coll, "chunks") == 0, tags = strcmp(coll, "tags") == 0;
    bson_iter_t it;
    memset(pb, 0, sizeof *pb);
    if (!filter || !bson_iter_init(&it, filter)) return;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bson_subtype_t sub;
        uint32_t len = 0;
        const uint8_t *data = NULL;
        pb->nkeys++;
        if (tags && strcmp(k, "ns") == 0 && BSON_ITER_HOLDS_UTF8(&it) && !pb->pin.ns &&
            strlen(bson_iter_utf8(&it, NULL)) <= MS_NS_BYTES_MAX) {
            snprintf(pb->ns, sizeof pb->ns, "%s", bson_iter_utf8(&it, NULL));
            pb->pin.ns = pb->ns;
            pb->npinned++;
        } else if (chunks && strcmp(k, "uuid") == 0 && BSON_ITER_HOLDS_BINARY(&it) &&
                   !pb->pin.uuid) {
            bson_iter_binary(&it, &sub, &len, &data);
            if (sub != BSON_SUBTYPE_UUID || len != 16) continue;
            memcpy(pb->uuid, data, 16);
            pb->pin.uuid = pb->uuid;
            pb->npinned++;
        } else if (chunks && strcmp(k, "shard") == 0 && BSON_ITER_HOLDS_UTF8(&it) && !pb->shard) {
            pb->shard = bson_iter_utf8(&it, NULL);
        } else if (chunks && strcmp(k, "jumbo") == 0 && BSON_ITER_HOLDS_BOOL(&it) &&
                   bson_iter_bool(&it)) {
            pb->jumbo = true;
        }
    }
}

static const cat_pin_t *pin_of(const pin_buf_t *pb) {
    return pb->pin.ns || pb->pin.uuid ? &pb->pin : NULL;
}

/* ---- scans: the catalog in pages, through a filter ----------------------------------- */

/* One scan of config.<coll> through a compiled filter, a page at a time; take() gets
 * each matching document and answers as a cat_doc_fn does (CAT_PAGE_STOP: not taken). */
typedef struct scan {
    const char *coll;
    const query_t *q;
    const cat_pin_t *pin;
    cat_page_pos_t *pos;     /* owned by whoever owns the scan */
    int (*take)(void *arg, const bson_t *doc);
    void *arg;
    bool stopped;            /* take() said CAT_PAGE_STOP */
    int64_t seen;            /* documents looked at: paces the maxTimeMS check */
    ms_error_t expired;      /* MaxTimeMSExpired, when op_check stopped the scan */
} scan_t;

static int scan_row(void *arg, const bson_t *doc) {
    scan_t *s = arg;
    if (++s->seen % MS_INTERRUPT_CHECK_DOCS == 0 && op_check(&s->expired) != 0)
        return s->expired.code;
    if (!query_match(s->q, doc)) return 0;
    int rc = s->take(s->arg, doc);
    if (rc == CAT_PAGE_STOP) s->stopped = true;
    return rc;
}

/* Runs the scan until take() stops it or the collection ends. An unknown collection is
 * empty, as in MongoDB. */
static int scan_run(cfg_t *cfg, scan_t *s, ms_error_t *err) {
    int rc = 0;
    s->stopped = false;
    if (!cat_config_known(s->coll)) return 0;
    while (rc == 0 && !s->stopped && !cat_page_pos_done(s->pos)) {
        rc = cat_config_page(cfg->cat, s->coll, s->pin, s->pos, CFG_PAGE_ROWS, scan_row, s, err);
        if (rc == MS_ERR_MAX_TIME_MS_EXPIRED && s->expired.code) *err = s->expired;
    }
    return rc;
}

/* Matching documents of one scan (owned copies), for a sort the catalog does not give.
 * Pointers, not bson_t values: an allocated bson_t points into itself, so bson_t structs
 * must never be moved (realloc, qsort). */
typedef struct hits {
    bson_t **docs;
    int n, cap;
    size_t bytes;
} hits_t;

static int hit_fn(void *arg, const bson_t *doc) {
    hits_t *h = arg;
    h->bytes += doc->len;
    if (h->bytes > (size_t)MS_MSG_BYTES_MAX)
        return MS_ERR_BSON_OBJECT_TOO_LARGE;  /* bounds memory; reported by the caller */
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->docs = bson_realloc(h->docs, sizeof *h->docs * (size_t)h->cap);
    }
    h->docs[h->n++] = bson_copy(doc);
    return 0;
}

static void hits_free(hits_t *h) {
    for (int i = 0; i < h->n; i++) bson_destroy(h->docs[i]);
    bson_free(h->docs);
}

static int cmp_docs(const void *a, const void *b, void *arg) {
    return sortspec_compare_docs(arg, *(bson_t *const *)a, *(bson_t *const *)b);
}

static int check_config_db(const cmd_ctx_t *ctx, ms_error_t *err) {
    if (strcmp(ctx->db, "config") != 0)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "the config server serves only the config database, not %s", ctx->db);
    return 0;
}

/* Every document of config.<coll> matching q, held in memory (a sort the catalog's order
 * does not give needs them all). */
static int scan_all(cfg_t *cfg, const char *coll, const query_t *q, const cat_pin_t *pin, hits_t *h,
                    ms_error_t *err) {
    scan_t s = {.coll = coll, .q = q, .pin = pin, .pos = cat_page_pos_new(), .take = hit_fn, .arg = h};
    memset(h, 0, sizeof *h);
    int rc = scan_run(cfg, &s, err);
    if (rc == MS_ERR_BSON_OBJECT_TOO_LARGE)
        err_set(err, rc, "the sorted result of find on config.%s exceeds %d bytes; add a filter, "
                "or read it in the catalog's order (no sort) in batches", coll, MS_MSG_BYTES_MAX);
    cat_page_pos_free(s.pos);
    return rc;
}

static bool int_field(const cmd_ctx_t *ctx, const char *name, int64_t *out, ms_error_t *err, int *rc) {
    bson_iter_t it;
    if (!cmd_field(ctx, name, &it)) return false;
    if (!bsonx_as_int64_exact(&it, out) || *out < 0) {
        *rc = err_set(err, MS_ERR_BAD_VALUE, "%s must be a non-negative integer", name);
        return false;
    }
    return true;
}

/* ---- cursors ------------------------------------------------------------------------ */

/* A cursor: either a live read of the catalog in its order (page set: a find without a
 * sort of its own), or a materialised result (docs: an aggregate's results, a sorted
 * find's matches). The registry (common/cursor.c) holds its curs_t. */
typedef struct cfg_cursor {
    curs_t reg;                   /* id, ns, connection, pin state: the registry's */
    /* the live read */
    cfg_t *cfg;
    char coll[MS_NS_BYTES_MAX + 1];
    cat_page_pos_t *page;         /* where the next batch starts reading */
    bson_t filter, proj_spec;     /* owned copies: the compiled forms may point into them */
    query_t *q;
    projection_t *proj;
    pin_buf_t pin;
    int64_t skip, left;           /* still to skip; still to return (< 0: no limit) */
    /* the materialised result */
    bson_t **docs;                /* owned */
    int n, pos;
    size_t bytes;                 /* of docs: counted against MS_CFG_CURSOR_BYTES_MAX */
} cfg_cursor_t;

static cfg_cursor_t *cursor_new(void) {
    cfg_cursor_t *k = calloc(1, sizeof *k);
    ASSERT(k);
    bson_init(&k->filter);
    bson_init(&k->proj_spec);
    k->left = -1;
    return k;
}

static void cursor_free(cfg_cursor_t *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) bson_destroy(c->docs[i]);
    bson_free(c->docs);
    cat_page_pos_free(c->page);
    query_free(c->q);
    projection_free(c->proj);
    bson_destroy(&c->filter);
    bson_destroy(&c->proj_spec);
    free(c);
}

static void cursor_destroy(void *arg, curs_t *reg) {
    (void)arg;
    cursor_free(curs_entry(reg, cfg_cursor_t, reg));
}

/* What a cursor holds between batches: a materialised result until it ends; a live read
 * holds one position (read under the registry's lock). */
static size_t cursor_held(const curs_t *reg) {
    return curs_entry(reg, cfg_cursor_t, reg)->bytes;
}

int cfg_query_cursors_new(int idle_ms, curs_reg_t **out, ms_error_t *err) {
    curs_opts_t o = {.noun = "cursors", .place = "on the config server", .conn_names_place = true,
                     .owner = "config server", .conn_max = MS_CFG_CURSORS_PER_CONN_MAX,
                     .total_max = MS_CFG_CURSORS_MAX, .bytes_max = MS_CFG_CURSOR_BYTES_MAX,
                     .idle_ms = idle_ms, .held_fn = cursor_held, .destroy_fn = cursor_destroy};
    if (curs_reg_new(&o, out) != 0)
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "cursor table: out of memory");
    return 0;
}

/* A batch being filled: at most max_docs documents (< 0: no count limit) and at most
 * MS_BATCH_BYTES_MAX of them, but at least one when any is left (a document is at most
 * 16 MB, so progress is guaranteed). */
typedef struct batch {
    bson_t *arr;
    int64_t max_docs, out;
    size_t bytes;
    cfg_cursor_t *k;
    ms_error_t err;          /* a projection's error */
} batch_t;

static bool batch_full(const batch_t *b, const bson_t *next) {
    if (b->max_docs >= 0 && b->out >= b->max_docs) return true;
    return b->out > 0 && b->bytes + next->len > (size_t)MS_BATCH_BYTES_MAX;
}

static void batch_append(batch_t *b, const bson_t *d) {
    char idx[24];
    snprintf(idx, sizeof idx, "%lld", (long long)b->out++);
    BSON_APPEND_DOCUMENT(b->arr, idx, d);
    b->bytes += d->len;
}

/* take() of a live read: skip, limit, projection, then into the batch. */
static int batch_take(void *arg, const bson_t *doc) {
    batch_t *b = arg;
    cfg_cursor_t *k = b->k;
    bson_t p;
    if (k->left == 0 || (b->max_docs >= 0 && b->out >= b->max_docs)) return CAT_PAGE_STOP;
    if (k->skip > 0) {
        k->skip--;
        return 0;
    }
    if (k->proj) {
        int rc = projection_apply(k->proj, doc, &p, &b->err);
        if (rc) return rc;
    } else {
        bson_init(&p);
        bson_concat(&p, doc);
    }
    if (batch_full(b, &p)) {
        bson_destroy(&p);
        return CAT_PAGE_STOP;
    }
    batch_append(b, &p);
    bson_destroy(&p);
    if (k->left > 0) k->left--;
    return 0;
}

static bool cursor_exhausted(const cfg_cursor_t *k) {
    if (k->page) return k->left == 0 || cat_page_pos_done(k->page);
    return k->pos >= k->n;
}

/* Appends the next batch of k to arr. */
static int fill_batch(cfg_cursor_t *k, int64_t max_docs, bson_t *arr, ms_error_t *err) {
    batch_t b = {.arr = arr, .max_docs = max_docs, .k = k};
    if (k->page) {
        scan_t s = {.coll = k->coll, .q = k->q, .pin = pin_of(&k->pin), .pos = k->page,
                    .take = batch_take, .arg = &b};
        int rc = scan_run(k->cfg, &s, err);
        if (rc && b.err.code) *err = b.err;
        return rc;
    }
    while (k->pos < k->n && !batch_full(&b, k->docs[k->pos])) batch_append(&b, k->docs[k->pos++]);
    return 0;
}

/* The first reply of a find or an aggregate: its first batch, and the rest behind a
 * registered cursor (*kp then owned by the registry and set to NULL) unless single or
 * nothing is left. The batch is built and the cursor registered before reply is
 * touched: a refusal (the open-cursor cap) leaves reply as it was. */
static int reply_first_batch(cfg_t *cfg, cfg_cursor_t **kp, int64_t batch_size, bool single,
                             const char *ns, bson_t *reply, ms_error_t *err) {
    bson_t batch = BSON_INITIALIZER, cursor;
    int64_t id = 0;
    int rc = fill_batch(*kp, batch_size, &batch, err);
    if (rc) goto out;
    if (!cursor_exhausted(*kp) && !single) {
        if ((rc = curs_add(cfg->cursors, &(*kp)->reg, ns, op_conn(), 0, false, &id, err)) != 0)
            goto out;
        *kp = NULL;
    }
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor);
    bson_append_array(&cursor, "firstBatch", -1, &batch);
    BSON_APPEND_INT64(&cursor, "id", id);
    BSON_APPEND_UTF8(&cursor, "ns", ns);
    bson_append_document_end(reply, &cursor);
out:
    bson_destroy(&batch);
    return rc;
}

/* listCollections of the config database: the collections find serves, as mongod's
 * entries ({name, type, options, info, idIndex}; {name, type} with nameOnly), filtered
 * like them. Other databases have none here. */
int cfg_cmd_list_collections(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bool name_only = cmd_flag(ctx, "nameOnly", false), config = strcmp(ctx->db, "config") == 0;
    bson_t filter, arr, cur;
    query_t *q = NULL;
    char ns[MS_NS_BYTES_MAX + 32];
    int rc = 0, n = 0;
    if (cfg_field_doc(ctx, "filter", &filter) && (rc = query_compile(&filter, &q, err)) != 0)
        return rc;
    bson_init(&arr);
    for (int i = 0; config && cat_config_coll(i); i++) {
        bson_t e = BSON_INITIALIZER, sub;
        char key[16];
        BSON_APPEND_UTF8(&e, "name", cat_config_coll(i));
        BSON_APPEND_UTF8(&e, "type", "collection");
        if (!name_only) {
            BSON_APPEND_DOCUMENT_BEGIN(&e, "options", &sub);
            bson_append_document_end(&e, &sub);
            BSON_APPEND_DOCUMENT_BEGIN(&e, "info", &sub);
            BSON_APPEND_BOOL(&sub, "readOnly", false);
            bson_append_document_end(&e, &sub);
            BCON_APPEND(&e, "idIndex", "{", "v", BCON_INT32(2), "key", "{", "_id", BCON_INT32(1),
                        "}", "name", BCON_UTF8("_id_"), "}");
        }
        if (!q || query_match(q, &e)) {
            snprintf(key, sizeof key, "%d", n++);
            BSON_APPEND_DOCUMENT(&arr, key, &e);
        }
        bson_destroy(&e);
    }
    snprintf(ns, sizeof ns, "%s.$cmd.listCollections", ctx->db);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_INT64(&cur, "id", 0);
    BSON_APPEND_UTF8(&cur, "ns", ns);
    BSON_APPEND_ARRAY(&cur, "firstBatch", &arr);
    bson_append_document_end(reply, &cur);
    bson_destroy(&arr);
    query_free(q);
    return 0;
}

/* True when sort asks for the order the catalog reads config.<coll> in (through its
 * unique index): then a find streams, page by page, whatever the collection's size. The
 * catalog orders by _id (shards, databases, collections, settings), and chunks and tags
 * by (collection, min): {min: 1} once the filter names one collection. */
static bool sort_is_catalog_order(const char *coll, const bson_t *sort, const cat_pin_t *pin) {
    bson_iter_t it;
    int64_t dir = 0;
    if (!sort || bson_count_keys(sort) == 0) return true;
    if (bson_count_keys(sort) != 1 || !bson_iter_init(&it, sort) || !bson_iter_next(&it) ||
        !bsonx_as_int64(&it, &dir) || dir != 1)
        return false;
    const char *key = bson_iter_key(&it);
    if (strcmp(key, "_id") == 0)
        return strcmp(coll, "shards") == 0 || strcmp(coll, "databases") == 0 ||
               strcmp(coll, "collections") == 0 || strcmp(coll, "settings") == 0;
    return strcmp(key, "min") == 0 && pin && (strcmp(coll, "chunks") == 0 || strcmp(coll, "tags") == 0);
}

/* A sorted find: every match read now, sorted, skipped, limited, projected, and held by
 * the cursor (bounded by MS_MSG_BYTES_MAX of matches). */
static int find_sorted(cfg_t *cfg, cfg_cursor_t *k, const sortspec_t *sort, int64_t skip,
                       int64_t limit, ms_error_t *err) {
    hits_t h;
    int rc = scan_all(cfg, k->coll, k->q, pin_of(&k->pin), &h, err);
    if (rc) goto out;
    if (h.n > 1) qsort_r(h.docs, (size_t)h.n, sizeof *h.docs, cmp_docs, (void *)sort);
    if ((rc = op_check(err)) != 0) goto out;
    int64_t first = skip < h.n ? skip : h.n, last = h.n;
    if (limit > 0 && last - first > limit) last = first + limit;
    k->docs = bson_malloc0(sizeof *k->docs * (size_t)(last - first + 1));
    for (int64_t i = first; i < last; i++) {
        bson_t *d = h.docs[i];
        if (k->proj) {
            bson_t p;
            if ((rc = projection_apply(k->proj, h.docs[i], &p, err)) != 0) goto out;
            d = bson_copy(&p);
            bson_destroy(&p);
        } else {
            h.docs[i] = NULL;   /* moved into the cursor */
        }
        k->bytes += d->len;
        k->docs[k->n++] = d;
    }
out:
    hits_free(&h);
    return rc;
}

/* find: in the catalog's order a live read (cat_config_page) whose batches are read as
 * they are asked for; with another sort the matches are materialised and sorted now.
 * Either way the first batch is returned and the rest kept behind a cursor id for
 * getMore (MongoDB's ClusterCursorManager on the config server). */
int cfg_cmd_find(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *coll = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    bson_t view, sort_spec;
    bool has_sort = cfg_field_doc(ctx, "sort", &sort_spec);
    sortspec_t *sort = NULL;
    cfg_cursor_t *k = NULL;
    int64_t skip = 0, limit = 0, batch_size = MS_FIRST_BATCH_DOCS_DEFAULT;
    bool single = cmd_flag(ctx, "singleBatch", false);
    int rc = check_config_db(ctx, err);
    char ns[MS_NS_BYTES_MAX + 8];
    if (rc) return rc;
    if (strlen(coll) > MS_NS_BYTES_MAX - 7)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "collection name too long");
    snprintf(ns, sizeof ns, "config.%s", coll);
    int_field(ctx, "skip", &skip, err, &rc);
    int_field(ctx, "limit", &limit, err, &rc);
    int_field(ctx, "batchSize", &batch_size, err, &rc);
    if (rc) return rc;
    curs_reap(cfg->cursors);   /* no timer thread here: every cursor command reaps */
    if ((rc = curs_admit(cfg->cursors, op_conn(), err)) != 0) return rc;
    k = cursor_new();
    k->cfg = cfg;
    snprintf(k->coll, sizeof k->coll, "%s", coll);
    /* Owned copies: a compiled spec may keep pointing at the document it was given. */
    if (cfg_field_doc(ctx, "filter", &view)) bson_concat(&k->filter, &view);
    if ((rc = query_compile(&k->filter, &k->q, err)) != 0) goto out;
    pin_from_filter(coll, &k->filter, &k->pin);
    if (has_sort && (rc = sortspec_compile(&sort_spec, &sort, err)) != 0) goto out;
    if (cfg_field_doc(ctx, "projection", &view)) {
        bson_concat(&k->proj_spec, &view);
        if ((rc = projection_compile(&k->proj_spec, &k->proj, err)) != 0) goto out;
    }
    if (!cat_config_known(coll)) {
        /* an unknown collection is empty, as in MongoDB: nothing to read */
    } else if (sort_is_catalog_order(coll, has_sort ? &sort_spec : NULL, pin_of(&k->pin))) {
        k->page = cat_page_pos_new();
        k->skip = skip;
        k->left = limit > 0 ? limit : -1;
    } else if ((rc = find_sorted(cfg, k, sort, skip, limit, err)) != 0) {
        goto out;
    }
    rc = reply_first_batch(cfg, &k, batch_size, single, ns, reply, err);
out:
    cursor_free(k);
    sortspec_free(sort);
    return rc;
}

/* getMore {getMore: id, collection, batchSize?}: the next batch (16 MB when batchSize is
 * absent); id 0 in the reply once the read or the held result is exhausted. */
int cfg_cmd_get_more(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    curs_reg_t *cs = cfg->cursors;
    bson_iter_t it;
    int64_t id = 0, batch_size = -1;
    int rc = check_config_db(ctx, err);
    char ns[MS_NS_BYTES_MAX + 8];
    curs_t *reg = NULL;
    cfg_cursor_t *k;
    if (rc) return rc;
    if (!bsonx_as_int64_exact(&ctx->arg, &id))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "getMore: cursor id must be an integer");
    if (int_field(ctx, "batchSize", &batch_size, err, &rc) && batch_size == 0) batch_size = -1;
    if (rc) return rc;
    snprintf(ns, sizeof ns, "config.%s",
             cmd_field(ctx, "collection", &it) && BSON_ITER_HOLDS_UTF8(&it)
                 ? bson_iter_utf8(&it, NULL) : "");
    curs_reap(cs);
    /* CursorNotFound, CursorInUse, or Unauthorized for another namespace. */
    if ((rc = curs_pin(cs, id, ns, &reg, err)) != 0) return rc;
    if (op_deadline_ms() > 0) {   /* as mongod: maxTimeMS is for awaitData cursors */
        curs_unpin(cs, reg, false);
        return err_set(err, MS_ERR_BAD_VALUE,
                       "cannot set maxTimeMS on getMore command for a non-awaitData cursor");
    }
    /* A test holds the cursor pinned here (neither killCursors nor the reaper frees it);
     * an error action fails this getMore and the cursor goes, as on a shard. */
    if ((rc = fp_eval(CFG_FP_GETMORE_AFTER_PIN, err)) != 0) {
        curs_unpin(cs, reg, true);
        return rc;
    }
    k = curs_entry(reg, cfg_cursor_t, reg);

    bson_t cursor, batch = BSON_INITIALIZER;
    if ((rc = fill_batch(k, batch_size, &batch, err)) != 0) {
        bson_destroy(&batch);
        curs_unpin(cs, reg, true);   /* as on a shard: a failed getMore ends its cursor */
        return rc;
    }
    bool done = cursor_exhausted(k);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cursor);
    bson_append_array(&cursor, "nextBatch", -1, &batch);
    bson_destroy(&batch);
    BSON_APPEND_INT64(&cursor, "id", done ? 0 : id);
    BSON_APPEND_UTF8(&cursor, "ns", ns);
    bson_append_document_end(reply, &cursor);
    curs_unpin(cs, reg, done);
    return 0;
}

/* killCursors {killCursors: coll, cursors: [ids]}: MongoDB's reply lists. A cursor in
 * use by a getMore is killed too: marked, and freed when that getMore ends. */
int cfg_cmd_kill_cursors(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    bson_t ids;
    bson_iter_t it;
    int rc = check_config_db(ctx, err);
    if (rc == 0) rc = cmd_check_cursor_ids(ctx, err);
    if (rc) return rc;
    if (!cfg_field_doc(ctx, "cursors", &ids) || !bson_iter_init(&it, &ids))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "killCursors needs a cursors array");
    curs_kill_ids(cfg->cursors, &it, true, reply);
    return 0;
}

/* The stage of pipeline at index i (a view), false when absent or not a document. */
static bool pipeline_stage(const bson_t *pipeline, int i, bson_t *out) {
    bson_iter_t it;
    char key[16];
    uint32_t len;
    const uint8_t *data;
    snprintf(key, sizeof key, "%d", i);
    if (!bson_iter_init_find(&it, pipeline, key) || !BSON_ITER_HOLDS_DOCUMENT(&it)) return false;
    bson_iter_document(&it, &len, &data);
    return bson_init_static(out, data, len);
}

/* sh.status()'s chunks per shard: [{$match: {uuid | ns}}, {$group: {_id: "$shard",
 * <f>: {$sum: 1}}}, ...]. When the pipeline starts so on config.chunks, the name of <f>
 * (borrowed from pipeline), else NULL. */
static const char *chunks_per_shard_group(const char *coll, const bson_t *pipeline,
                                          const pin_buf_t *pb) {
    bson_t stage, group, sum;
    bson_iter_t it, f;
    const char *field = NULL;
    int64_t one = 0;
    if (strcmp(coll, "chunks") != 0 || !pb->pin.uuid || pb->nkeys != 1) return NULL;
    if (!pipeline_stage(pipeline, 1, &stage) || bson_count_keys(&stage) != 1 ||
        !bson_iter_init_find(&it, &stage, "$group") || !bsonx_view_container(&it, &group) ||
        bson_count_keys(&group) != 2 || !bson_iter_init_find(&it, &group, "_id") ||
        !BSON_ITER_HOLDS_UTF8(&it) || strcmp(bson_iter_utf8(&it, NULL), "$shard") != 0)
        return NULL;
    bson_iter_init(&it, &group);
    while (bson_iter_next(&it))
        if (strcmp(bson_iter_key(&it), "_id") != 0) field = bson_iter_key(&it);
    if (!field || !bson_iter_init_find(&it, &group, field) || !bsonx_view_container(&it, &sum) ||
        bson_count_keys(&sum) != 1 || !bson_iter_init_find(&f, &sum, "$sum") ||
        !bsonx_as_int64_exact(&f, &one) || one != 1)
        return NULL;
    return field;
}

typedef struct group_push {
    agg_run_t *run;
    const char *field;
    ms_error_t *err;
} group_push_t;

/* One group of the chunks-per-shard $group, as the stage would emit it: $sum of int 1s
 * is an int while it fits. */
static int group_push_fn(void *arg, const char *ns, const char *shard, int64_t n) {
    group_push_t *g = arg;
    bson_t d = BSON_INITIALIZER;
    (void)ns;
    BSON_APPEND_UTF8(&d, "_id", shard);
    if (n <= INT32_MAX) BSON_APPEND_INT32(&d, g->field, (int32_t)n);
    else BSON_APPEND_INT64(&d, g->field, n);
    int rc = agg_run_push(g->run, &d, g->err);
    bson_destroy(&d);
    return rc;
}

static int agg_push_fn(void *arg, const bson_t *doc) {
    group_push_t *g = arg;
    int rc = agg_run_push(g->run, doc, g->err);
    if (rc == 0 && agg_run_done(g->run)) return CAT_PAGE_STOP;   /* a $limit is reached */
    return rc;
}

/* Runs the parsed pipeline p over config.<coll> into *run (finished), holding one page of
 * catalog rows at a time: the leading $match is the scan's filter; sh.status()'s chunks
 * per shard are counted on the (ns, shard, min) index instead of read. */
static int agg_feed(cfg_t *cfg, const char *coll, const bson_t *pipeline, const agg_pipeline_t *p,
                    const bson_t *filter, agg_run_t **run, ms_error_t *err) {
    bson_t empty = BSON_INITIALIZER;
    pin_buf_t pb;
    query_t *q = NULL;
    group_push_t g = {.err = err};
    const char *field;
    int rc;
    pin_from_filter(coll, filter, &pb);
    if ((field = chunks_per_shard_group(coll, pipeline, &pb)) != NULL) {
        if ((rc = agg_run_new(p, 2, run, err)) != 0) return rc;
        g.run = *run;
        g.field = field;
        rc = cat_chunk_counts(cfg->cat, pin_of(&pb), group_push_fn, &g, err);
    } else {
        if ((rc = query_compile(filter ? filter : &empty, &q, err)) != 0) return rc;
        if ((rc = agg_run_new(p, filter ? 1 : 0, run, err)) != 0) goto out;
        g.run = *run;
        scan_t s = {.coll = coll, .q = q, .pin = pin_of(&pb), .pos = cat_page_pos_new(),
                    .take = agg_push_fn, .arg = &g};
        rc = scan_run(cfg, &s, err);
        cat_page_pos_free(s.pos);
    }
    if (rc == 0) rc = agg_run_finish(*run, err);
out:
    query_free(q);
    return rc;
}

/* aggregate {aggregate: coll, pipeline, cursor: {batchSize}, explain, let, allowDiskUse}
 * over config.<coll>: the leading $match is the scan's filter (as find's), the rest of
 * the pipeline (common/agg.c) runs over the matching catalog documents, read a page at a
 * time; the results are held by a cursor (mongosh's sh.status() and countDocuments send
 * these). */
int cfg_cmd_aggregate(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *coll = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    bson_t pipeline, d;
    bson_iter_t it;
    agg_opts_t o = {0};
    expr_vars_t *vars = NULL;
    agg_pipeline_t *p = NULL;
    agg_run_t *run = NULL;
    const bson_t *filter;
    cfg_cursor_t *k = NULL;
    int64_t batch_size = MS_FIRST_BATCH_DOCS_DEFAULT;
    bool explain = false, have_cursor = false;
    char ns[MS_NS_BYTES_MAX + 8];
    int rc = check_config_db(ctx, err);
    if (rc) return rc;
    if (strlen(coll) > MS_NS_BYTES_MAX - 7)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "collection name too long");
    snprintf(ns, sizeof ns, "config.%s", coll);
    if (!cfg_field_doc(ctx, "pipeline", &pipeline))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'aggregate.pipeline' must be an "
                       "array");
    if (cmd_field(ctx, "explain", &it)) explain = bsonx_truthy(&it);
    if (cfg_field_doc(ctx, "cursor", &d)) {
        have_cursor = true;
        if (bson_iter_init_find(&it, &d, "batchSize") &&
            (!bsonx_as_int64(&it, &batch_size) || batch_size < 0))
            return err_set(err, MS_ERR_IDL_VALUE_TOO_LOW, "BSON field 'batchSize' value must be "
                           ">= 0");
    }
    if (!have_cursor && !explain)
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "The 'cursor' option is required, except "
                       "for aggregate with the explain argument");
    if (cmd_field(ctx, "allowDiskUse", &it)) o.allow_disk_use = bsonx_truthy(&it);
    if (cfg_field_doc(ctx, "let", &d) && (rc = expr_vars_from_let(&d, &vars, err)) != 0) return rc;
    o.vars = vars;
    if ((rc = agg_parse(&pipeline, &o, &p, err)) != 0) goto out;
    filter = agg_leading_match(p);
    if (explain) {
        bson_t stages, first, cur, qp, wp, empty = BSON_INITIALIZER;
        int idx = 1;
        BSON_APPEND_UTF8(reply, "explainVersion", "1");
        BSON_APPEND_ARRAY_BEGIN(reply, "stages", &stages);
        BSON_APPEND_DOCUMENT_BEGIN(&stages, "0", &first);
        BSON_APPEND_DOCUMENT_BEGIN(&first, "$cursor", &cur);
        BSON_APPEND_DOCUMENT_BEGIN(&cur, "queryPlanner", &qp);
        BSON_APPEND_UTF8(&qp, "namespace", ns);
        BSON_APPEND_DOCUMENT(&qp, "parsedQuery", filter ? filter : &empty);
        BSON_APPEND_DOCUMENT_BEGIN(&qp, "winningPlan", &wp);
        BSON_APPEND_UTF8(&wp, "stage", "COLLSCAN");   /* the catalog is scanned whole */
        bson_append_document_end(&qp, &wp);
        bson_append_document_end(&cur, &qp);
        bson_append_document_end(&first, &cur);
        bson_append_document_end(&stages, &first);
        agg_append_stages(p, filter ? 1 : 0, &stages, &idx);
        bson_append_array_end(reply, &stages);
        goto out;
    }
    curs_reap(cfg->cursors);
    if ((rc = curs_admit(cfg->cursors, op_conn(), err)) != 0) goto out;
    if ((rc = agg_feed(cfg, coll, &pipeline, p, filter, &run, err)) != 0) goto out;
    k = cursor_new();
    {
        size_t n = agg_run_count(run);
        k->docs = bson_malloc0(sizeof *k->docs * (n + 1));
        for (size_t i = 0; i < n; i++) {
            k->docs[k->n++] = bson_copy(agg_run_result(run, i));
            k->bytes += k->docs[i]->len;
        }
    }
    rc = reply_first_batch(cfg, &k, batch_size, false, ns, reply, err);
out:
    cursor_free(k);
    agg_run_free(run);
    agg_free(p);
    expr_vars_free(vars);
    return rc;
}

static int count_fn(void *arg, const bson_t *doc) {
    (void)doc;
    (*(int64_t *)arg)++;
    return 0;
}

/* count {count: coll, query, skip, limit}: from the indexes when the query names at most
 * a collection (config.chunks / config.tags), a shard and jumbo: true (config.chunks), else the
 * matches are counted a page at a time; no document is kept either way. */
int cfg_cmd_count(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *coll = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    bson_t filter, empty = BSON_INITIALIZER;
    bool has_filter = cfg_field_doc(ctx, "query", &filter);
    const bson_t *f = has_filter ? &filter : &empty;
    query_t *q = NULL;
    pin_buf_t pb;
    int64_t skip = 0, limit = 0, n = 0;
    int rc = check_config_db(ctx, err);
    if (rc) return rc;
    int_field(ctx, "skip", &skip, err, &rc);
    int_field(ctx, "limit", &limit, err, &rc);
    if (rc) return rc;
    if ((rc = query_compile(f, &q, err)) != 0) return rc;
    pin_from_filter(coll, f, &pb);
    bool indexed = pb.nkeys == pb.npinned + (pb.shard ? 1 : 0) + (pb.jumbo ? 1 : 0);
    if (!cat_config_known(coll)) {
        n = 0;
    } else if (indexed) {
        rc = cat_config_count(cfg->cat, coll, pin_of(&pb), pb.shard, pb.jumbo, &n, err);
    } else {
        scan_t s = {.coll = coll, .q = q, .pin = pin_of(&pb), .pos = cat_page_pos_new(),
                    .take = count_fn, .arg = &n};
        rc = scan_run(cfg, &s, err);
        cat_page_pos_free(s.pos);
    }
    query_free(q);
    if (rc) return rc;
    n = n > skip ? n - skip : 0;
    if (limit > 0 && n > limit) n = limit;
    if (n <= INT32_MAX) BSON_APPEND_INT32(reply, "n", (int32_t)n);   /* as MongoDB's appendNumber */
    else BSON_APPEND_INT64(reply, "n", n);
    return 0;
}

/* update on config.settings: {updates: [{q, u, upsert, multi}], ordered}; MongoDB's
 * write reply {n, nModified, upserted, writeErrors}. config.collections takes noBalance
 * and enableAutoMerge only (cmd_bal.c); the other collections are read-only. */
int cfg_cmd_update(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cfg_t *cfg = ctx->app;
    const char *coll = BSON_ITER_HOLDS_UTF8(&ctx->arg) ? bson_iter_utf8(&ctx->arg, NULL) : "";
    bson_t updates, upserted_arr = BSON_INITIALIZER, errors = BSON_INITIALIZER;
    bson_iter_t it;
    bool ordered = cmd_flag(ctx, "ordered", true);
    int64_t n_total = 0, nmod_total = 0;
    int idx = 0, nup = 0, nerr = 0;
    int rc = check_config_db(ctx, err);
    if (rc) goto out;
    bool colls = strcmp(coll, "collections") == 0;  /* two flags only (cmd_bal.c) */
    if (strcmp(coll, "settings") != 0 && !colls) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "config.%s is read-only; only config.settings "
                     "and config.collections noBalance / enableAutoMerge can be updated", coll);
        goto out;
    }
    if (!cfg_field_doc(ctx, "updates", &updates) || !bson_iter_init(&it, &updates)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "update needs an updates array");
        goto out;
    }
    while (bson_iter_next(&it)) {
        bson_t op, q = BSON_INITIALIZER, u = BSON_INITIALIZER, upid;
        bson_iter_t f;
        bool upsert = false, multi = false, upserted = false, have_u = false;
        int64_t n = 0, nmod = 0;
        ms_error_t e = {0};
        int orc = 0;
        if (idx >= MS_WRITE_BATCH_OPS_MAX) {
            rc = err_set(err, MS_ERR_INVALID_LENGTH, "more than %d updates", MS_WRITE_BATCH_OPS_MAX);
            goto out;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            orc = err_set(&e, MS_ERR_FAILED_TO_PARSE, "an update statement must be a document");
        } else {
            uint32_t len;
            const uint8_t *data;
            bson_iter_document(&it, &len, &data);
            bson_init_static(&op, data, len);
            bson_iter_init(&f, &op);
            while (bson_iter_next(&f)) {
                const char *k = bson_iter_key(&f);
                uint32_t l2;
                const uint8_t *d2;
                if (strcmp(k, "q") == 0 && BSON_ITER_HOLDS_DOCUMENT(&f)) {
                    bson_iter_document(&f, &l2, &d2);
                    bson_init_static(&q, d2, l2);
                } else if (strcmp(k, "u") == 0 && BSON_ITER_HOLDS_DOCUMENT(&f)) {
                    bson_iter_document(&f, &l2, &d2);
                    bson_init_static(&u, d2, l2);
                    have_u = true;
                } else if (strcmp(k, "u") == 0 && BSON_ITER_HOLDS_ARRAY(&f)) {
                    orc = err_set(&e, MS_ERR_BAD_VALUE, "pipeline-style updates are not supported");
                } else if (strcmp(k, "upsert") == 0) {
                    upsert = bsonx_truthy(&f);
                } else if (strcmp(k, "multi") == 0) {
                    multi = bsonx_truthy(&f);
                }
            }
            if (orc == 0 && !have_u) orc = err_set(&e, MS_ERR_FAILED_TO_PARSE, "an update statement needs u");
            if (orc == 0 && colls)
                orc = cfg_coll_update_flags(cfg, &q, &u, upsert, &n, &nmod, &e);
            else if (orc == 0)
                orc = cat_settings_update(cfg->cat, &q, &u, upsert, multi, &n, &nmod, &upserted, &upid, &e);
        }
        if (orc == 0) {
            n_total += n + (upserted ? 1 : 0);
            nmod_total += nmod;
            if (upserted) {
                bson_t d;
                char key[16];
                bson_iter_t id;
                snprintf(key, sizeof key, "%d", nup++);
                BSON_APPEND_DOCUMENT_BEGIN(&upserted_arr, key, &d);
                BSON_APPEND_INT32(&d, "index", idx);
                if (bson_iter_init_find(&id, &upid, "_id")) bson_append_iter(&d, "_id", -1, &id);
                bson_append_document_end(&upserted_arr, &d);
                bson_destroy(&upid);
            }
        } else {
            bson_t d;
            char key[16];
            snprintf(key, sizeof key, "%d", nerr++);
            BSON_APPEND_DOCUMENT_BEGIN(&errors, key, &d);
            BSON_APPEND_INT32(&d, "index", idx);
            BSON_APPEND_INT32(&d, "code", orc);
            BSON_APPEND_UTF8(&d, "codeName", err_code_name(orc));
            BSON_APPEND_UTF8(&d, "errmsg", e.msg);
            bson_append_document_end(&errors, &d);
            log_warn("config update refused coll=%s index=%d code=%d errmsg=%s", log_str(coll), idx,
                     orc, log_str(e.msg));
        }
        idx++;
        if (orc && ordered) break;
    }
    BSON_APPEND_INT32(reply, "n", (int32_t)n_total);            /* int32, as MongoDB's write replies */
    BSON_APPEND_INT32(reply, "nModified", (int32_t)nmod_total);
    if (nup) BSON_APPEND_ARRAY(reply, "upserted", &upserted_arr);
    if (nerr) BSON_APPEND_ARRAY(reply, "writeErrors", &errors);
out:
    bson_destroy(&upserted_arr);
    bson_destroy(&errors);
    return rc;
}
