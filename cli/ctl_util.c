/*
 * ctl_util.c — the small readers every shardctl view shares (run by bin/shardctl):
 * field getters that answer a default instead of failing (a view prints what it can of
 * a reply, a missing field is not an error), the JSON print of a field, and the one
 * "find every document of a collection" that drains a find cursor with getMore into a
 * growable list. status, watch, watch --bars, changelog and explain-balance read through
 * these, so a field reads the same way in every view.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/ctl.h"
#include "common/bsonx.h"
#include "common/buf.h"
#include "common/limits.h"

/* Documents asked for per find / getMore: a config collection of a small cluster comes
 * back in one or two round trips. */
#define CTL_FIND_BATCH_DOCS 10000

const char *ctl_str(const bson_t *d, const char *name) {
    bson_iter_t it;
    if (bson_iter_init_find(&it, d, name) && BSON_ITER_HOLDS_UTF8(&it)) return bson_iter_utf8(&it, NULL);
    return "";
}

bool ctl_bool(const bson_t *d, const char *name) {
    bson_iter_t it;
    return bson_iter_init_find(&it, d, name) && bsonx_truthy(&it);
}

int64_t ctl_int(const bson_t *d, const char *path, int64_t dflt) {
    bson_iter_t it, f;
    int64_t v;
    if (bson_iter_init(&it, d) && bson_iter_find_descendant(&it, path, &f) && bsonx_as_int64(&f, &v)) return v;
    return dflt;
}

double ctl_num(const bson_t *d, const char *name) {
    bson_iter_t it;
    if (bson_iter_init_find(&it, d, name) && BSON_ITER_HOLDS_NUMBER(&it)) return bson_iter_as_double(&it);
    return 0;
}

int64_t ctl_date(const bson_t *d, const char *name) {
    bson_iter_t it;
    if (bson_iter_init_find(&it, d, name) && BSON_ITER_HOLDS_DATE_TIME(&it)) return bson_iter_date_time(&it);
    return 0;
}

bool ctl_sub(const bson_t *d, const char *name, bson_t *out) {
    bson_iter_t it;
    return bson_iter_init_find(&it, d, name) && bsonx_view_container(&it, out);
}

void ctl_print_json(FILE *fp, const bson_t *d, const char *name, const char *missing) {
    bson_t sub;
    char *json = ctl_sub(d, name, &sub) ? bsonx_to_json(&sub) : NULL;
    fputs(json ? json : missing, fp);
    bson_free(json);
}

int64_t ctl_cursor_id(const bson_t *reply) {
    bson_iter_t it;
    int64_t id = 0;
    if (bson_iter_init_find(&it, reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
        bson_iter_recurse(&it, &it) && bson_iter_find(&it, "id"))
        bsonx_as_int64(&it, &id);
    return id;
}

void ctl_docs_free(ctl_docs_t *d) {
    for (int i = 0; i < d->n; i++) bson_destroy(d->v[i]);
    free(d->v);
    memset(d, 0, sizeof *d);
}

void ctl_docs_add_array(ctl_docs_t *d, const bson_t *reply, const char *outer, const char *name, int max) {
    bson_iter_t it, arr;
    if (outer) {
        if (!bson_iter_init_find(&it, reply, outer) || !BSON_ITER_HOLDS_DOCUMENT(&it)) return;
        bson_iter_recurse(&it, &arr);
        if (!bson_iter_find(&arr, name)) return;
    } else if (!bson_iter_init_find(&arr, reply, name)) {
        return;
    }
    if (!BSON_ITER_HOLDS_ARRAY(&arr)) return;
    bson_iter_recurse(&arr, &arr);
    while (bson_iter_next(&arr) && d->n < max) {
        uint32_t len;
        const uint8_t *data;
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) continue;
        bson_iter_document(&arr, &len, &data);
        if (d->n == d->cap) {
            d->cap = d->cap ? d->cap * 2 : 32;
            d->v = xrealloc(d->v, sizeof *d->v * (size_t)d->cap);
        }
        d->v[d->n++] = bson_new_from_data(data, len);
    }
}

/* killCursors of a cursor a reader leaves before its end (best effort: an idle cursor
 * times out anyway). */
static void kill_cursor(ctl_t *c, const char *db, const char *coll, int64_t id) {
    bson_t cmd, reply, ids;
    ms_error_t err = {0};
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "killCursors", coll);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "cursors", &ids);
    BSON_APPEND_INT64(&ids, "0", id);
    bson_append_array_end(&cmd, &ids);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    if (ctl_command(c, &cmd, &reply, &err) == 0) bson_destroy(&reply);
    bson_destroy(&cmd);
}

int ctl_find_each(ctl_t *c, const char *db, const char *coll, const bson_t *filter, const bson_t *sort,
                  int64_t limit, ctl_doc_fn fn, void *arg, ms_error_t *err) {
    bson_t cmd, reply;
    bson_iter_t it, arr;
    int64_t id = 0;
    bool first = true, more = true;
    int rc;
    /* find, then getMore while the cursor lives and fn wants more */
    while (more && (first || id != 0)) {
        bson_init(&cmd);
        if (first) {
            BSON_APPEND_UTF8(&cmd, "find", coll);
            BSON_APPEND_UTF8(&cmd, "$db", db);
            if (filter) BSON_APPEND_DOCUMENT(&cmd, "filter", filter);
            if (sort) BSON_APPEND_DOCUMENT(&cmd, "sort", sort);
            if (limit > 0) BSON_APPEND_INT64(&cmd, "limit", limit);
        } else {
            BSON_APPEND_INT64(&cmd, "getMore", id);
            BSON_APPEND_UTF8(&cmd, "collection", coll);
            BSON_APPEND_UTF8(&cmd, "$db", db);
        }
        BSON_APPEND_INT32(&cmd, "batchSize", limit > 0 && limit < CTL_FIND_BATCH_DOCS ? (int32_t)limit
                                                                                      : CTL_FIND_BATCH_DOCS);
        rc = ctl_command(c, &cmd, &reply, err);
        bson_destroy(&cmd);
        if (rc) return rc;
        id = ctl_cursor_id(&reply);
        if (bson_iter_init_find(&it, &reply, "cursor") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &arr) && bson_iter_find(&arr, first ? "firstBatch" : "nextBatch") &&
            BSON_ITER_HOLDS_ARRAY(&arr) && bson_iter_recurse(&arr, &arr)) {
            while (more && bson_iter_next(&arr)) {
                uint32_t len;
                const uint8_t *data;
                bson_t d;
                if (!BSON_ITER_HOLDS_DOCUMENT(&arr)) continue;
                bson_iter_document(&arr, &len, &data);
                if (bson_init_static(&d, data, len)) more = fn(arg, &d);
            }
        }
        bson_destroy(&reply);
        first = false;
    }
    if (id != 0) kill_cursor(c, db, coll, id);
    return 0;
}

typedef struct docs_arg {
    ctl_docs_t *out;
    int max;
} docs_arg_t;

static bool docs_add(void *arg, const bson_t *doc) {
    docs_arg_t *a = arg;
    if (a->out->n == a->out->cap) {
        a->out->cap = a->out->cap ? a->out->cap * 2 : 32;
        a->out->v = xrealloc(a->out->v, sizeof *a->out->v * (size_t)a->out->cap);
    }
    a->out->v[a->out->n++] = bson_copy(doc);
    return a->out->n < a->max;
}

int ctl_find_all(ctl_t *c, const char *db, const char *coll, const bson_t *filter, const bson_t *sort, int limit,
                 int max, ctl_docs_t *out, ms_error_t *err) {
    docs_arg_t a = {out, limit > 0 && limit < max ? limit : max};
    if (a.max <= 0) return 0;
    return ctl_find_each(c, db, coll, filter, sort, limit, docs_add, &a, err);
}

int ctl_chunks_per_shard(ctl_t *c, const bson_t *filter, ctl_docs_t *out, ms_error_t *err) {
    bson_t cmd, reply, pipe, st, g, sum, cur;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "aggregate", "chunks");
    BSON_APPEND_ARRAY_BEGIN(&cmd, "pipeline", &pipe);
    BSON_APPEND_DOCUMENT_BEGIN(&pipe, "0", &st);
    BSON_APPEND_DOCUMENT(&st, "$match", filter);
    bson_append_document_end(&pipe, &st);
    BSON_APPEND_DOCUMENT_BEGIN(&pipe, "1", &st);
    BSON_APPEND_DOCUMENT_BEGIN(&st, "$group", &g);
    BSON_APPEND_UTF8(&g, "_id", "$shard");
    BSON_APPEND_DOCUMENT_BEGIN(&g, "n", &sum);
    BSON_APPEND_INT32(&sum, "$sum", 1);
    bson_append_document_end(&g, &sum);
    bson_append_document_end(&st, &g);
    bson_append_document_end(&pipe, &st);
    BSON_APPEND_DOCUMENT_BEGIN(&pipe, "2", &st);
    BSON_APPEND_DOCUMENT_BEGIN(&st, "$sort", &g);
    BSON_APPEND_INT32(&g, "_id", 1);
    bson_append_document_end(&st, &g);
    bson_append_document_end(&pipe, &st);
    bson_append_array_end(&cmd, &pipe);
    BSON_APPEND_DOCUMENT_BEGIN(&cmd, "cursor", &cur);   /* one group per shard: one batch */
    BSON_APPEND_INT32(&cur, "batchSize", MS_SHARDS_MAX + 1);
    bson_append_document_end(&cmd, &cur);
    BSON_APPEND_UTF8(&cmd, "$db", "config");
    rc = ctl_command(c, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    ctl_docs_add_array(out, &reply, "cursor", "firstBatch", MS_SHARDS_MAX + 1);
    bson_destroy(&reply);
    return 0;
}

int ctl_count(ctl_t *c, const char *db, const char *coll, const bson_t *filter, int64_t *n, ms_error_t *err) {
    bson_t cmd, reply;
    bson_iter_t it;
    int rc;
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "count", coll);
    BSON_APPEND_DOCUMENT(&cmd, "query", filter);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    rc = ctl_command(c, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    *n = 0;
    if (bson_iter_init_find(&it, &reply, "n")) bsonx_as_int64(&it, n);
    bson_destroy(&reply);
    return 0;
}

bool ctl_migration_shown(const ctl_docs_t *ops, int i, const bson_t **peer) {
    const bson_t *op = ops->v[i];
    const char *role = ctl_str(op, "role"), *id = ctl_str(op, "migrationId");
    *peer = NULL;
    if (strcmp(role, "donor") != 0 && strcmp(role, "recipient") != 0) return false;
    for (int k = 0; k < ops->n && !*peer; k++)
        if (k != i && *id && strcmp(ctl_str(ops->v[k], "migrationId"), id) == 0) *peer = ops->v[k];
    return strcmp(role, "donor") == 0 || !*peer;   /* a recipient with its donor is shown with it */
}

/* The donor's phases and their words, in step order: the first six are moveChunk.from's
 * steps 1..6. */
static const struct {
    const char *phase, *words;
} ctl_phases[] = {
    {"checks", "checks"},
    {"startClone", "start clone"},
    {"clone", "clone"},
    {"criticalSection", "critical section"},
    {"commitOnRecipient", "commit on recipient"},
    {"commitOnConfig", "commit on config server"},
    {"completing", "completing"},
    {"done", "done"},
};

const char *ctl_phase_words(const char *phase) {
    for (size_t i = 0; i < sizeof ctl_phases / sizeof ctl_phases[0]; i++)
        if (strcmp(ctl_phases[i].phase, phase) == 0) return ctl_phases[i].words;
    return phase;
}

void ctl_print_migration_phase(FILE *fp, const bson_t *op, const bson_t *peer) {
    bool donor = strcmp(ctl_str(op, "role"), "donor") == 0;
    const bson_t *d = donor ? op : peer, *r = donor ? peer : op;
    if (!d) {
        fprintf(fp, "phase: ? (recipient: %s; donor not answering)", ctl_str(r, "phase"));
    } else {
        /* The recipient's own entry is the fresher; without it, the state the donor saw last. */
        fprintf(fp, "phase: %s (recipient: %s)", ctl_phase_words(ctl_str(d, "phase")),
                r ? ctl_str(r, "phase") : ctl_str(d, "recipientState"));
    }
    if (d && *ctl_str(d, "heldAt")) fprintf(fp, "  held at %s", ctl_str(d, "heldAt"));
    if (r && *ctl_str(r, "heldAt")) fprintf(fp, "  held at %s", ctl_str(r, "heldAt"));
}

const char *ctl_step_words(int n) {
    return n >= 1 && n <= 6 ? ctl_phases[n - 1].words : "?";
}
