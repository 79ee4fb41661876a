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

int ctl_find_all(ctl_t *c, const char *db, const char *coll, const bson_t *filter, const bson_t *sort, int limit,
                 int max, ctl_docs_t *out, ms_error_t *err) {
    bson_t cmd, reply;
    int64_t id = 0;
    bool first = true;
    int rc;
    if (limit > 0 && limit < max) max = limit;
    /* find, then getMore while the cursor lives and the list has room */
    while (first || (id != 0 && out->n < max)) {
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
        BSON_APPEND_INT32(&cmd, "batchSize", CTL_FIND_BATCH_DOCS);
        rc = ctl_command(c, &cmd, &reply, err);
        bson_destroy(&cmd);
        if (rc) return rc;
        ctl_docs_add_array(out, &reply, "cursor", first ? "firstBatch" : "nextBatch", max);
        id = ctl_cursor_id(&reply);
        bson_destroy(&reply);
        first = false;
    }
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
