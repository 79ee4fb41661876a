/*
 * cat_balancer.c — what the balancer reads from and writes to the config server's
 * catalog (bin/configsvr, the balancer thread of balancer.c): one collection's chunks
 * and zone ranges as the policy's snapshot (encoded bounds, owners, jumbo, estimated
 * sizes), config.actionlog entries (balancer.round) and config.locks documents (the
 * balancer lock). Part of the catalog module (prefix cat_), beside catalog.c.
 */
#include "configsvr/cat_priv.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *blob_copy(sqlite3_stmt *st, int i, size_t *len) {
    const void *p = sqlite3_column_blob(st, i);
    int n = sqlite3_column_bytes(st, i);
    uint8_t *out = malloc(n > 0 ? (size_t)n : 1);
    if (!out) abort();
    if (n > 0) memcpy(out, p, (size_t)n);
    *len = (size_t)(n > 0 ? n : 0);
    return out;
}

static bson_t *bson_col_copy(sqlite3_stmt *st, int i) {
    bson_t v;
    cat_col_view(st, i, &v);
    return bson_copy(&v);
}

void cat_bal_free(cat_bal_data_t *d) {
    if (!d) return;
    for (int i = 0; i < d->nchunks; i++) {
        free((void *)d->chunks[i].min_enc);
        free((void *)d->chunks[i].max_enc);
        bson_destroy((bson_t *)d->chunks[i].min);
        bson_destroy((bson_t *)d->chunks[i].max);
    }
    for (int i = 0; i < d->nzones; i++) {
        free((void *)d->zones[i].min_enc);
        free((void *)d->zones[i].max_enc);
        free((void *)d->zones[i].zone);
        if (d->zones[i].min) bson_destroy((bson_t *)d->zones[i].min);
        if (d->zones[i].max) bson_destroy((bson_t *)d->zones[i].max);
    }
    for (int i = 0; i < d->ncounts; i++) free(d->counts[i].in_range);
    free(d->chunks);
    free(d->owners);
    free(d->zones);
    free(d->counts);
    free(d->shard_chunks);
    free(d->shard_jumbo);
    free(d->range_chunks);
    memset(d, 0, sizeof *d);
}

/* The columns every chunk read of this file selects, in chunk_append's order. */
#define BAL_CHUNK_COLS "min, max, min_enc, max_enc, shard, jumbo, est_size"

/* Appends the current row of st (BAL_CHUNK_COLS) to out's chunks; *cap is the capacity. */
static void chunk_append(cat_bal_data_t *out, sqlite3_stmt *st, int *cap) {
    if (out->nchunks == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        out->chunks = realloc(out->chunks, sizeof *out->chunks * (size_t)*cap);
        out->owners = realloc(out->owners, sizeof *out->owners * (size_t)*cap);
        if (!out->chunks || !out->owners) abort();
    }
    bal_chunk_t *ch = &out->chunks[out->nchunks];
    memset(ch, 0, sizeof *ch);
    ch->min = bson_col_copy(st, 0);
    ch->max = bson_col_copy(st, 1);
    ch->min_enc = blob_copy(st, 2, &ch->min_len);
    ch->max_enc = blob_copy(st, 3, &ch->max_len);
    cat_copy_str(out->owners[out->nchunks], CAT_SHARD_NAME_BYTES_MAX, cat_col_text(st, 4));
    ch->owner = -1;  /* the caller maps owners[] to its shard array */
    ch->jumbo = sqlite3_column_int(st, 5) != 0;
    ch->est_bytes = sqlite3_column_type(st, 6) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 6);
    out->nchunks++;
}

/* Steps st to its end, appending every row; 0 or the SQLite error. */
static int chunks_read(cat_t *c, sqlite3_stmt *st, cat_bal_data_t *out, int *cap, ms_error_t *err) {
    int s;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) chunk_append(out, st, cap);
    return s == SQLITE_DONE ? 0 : err_from_sqlite(err, s, "read chunks", cat_db_handle(c));
}

static int zones_load(cat_t *c, const char *ns, cat_bal_data_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int s, cap = 0;
    int rc = cat_sql_prep(c, "SELECT min_enc, max_enc, tag, min, max FROM tags WHERE ns = ? ORDER BY min_enc",
                          &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->nzones == cap) {
            cap = cap ? cap * 2 : 8;
            out->zones = realloc(out->zones, sizeof *out->zones * (size_t)cap);
            if (!out->zones) abort();
        }
        bal_zone_range_t *z = &out->zones[out->nzones++];
        z->min_enc = blob_copy(st, 0, &z->min_len);
        z->max_enc = blob_copy(st, 1, &z->max_len);
        z->zone = strdup(cat_col_text(st, 2));
        if (!z->zone) abort();
        z->min = bson_col_copy(st, 3);
        z->max = bson_col_copy(st, 4);
    }
    if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "read tags", cat_db_handle(c));
    sqlite3_finalize(st);
    return rc;
}

int cat_bal_load(cat_t *c, const char *ns, cat_bal_data_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int cap = 0;
    memset(out, 0, sizeof *out);
    cat_lock(c);
    int rc = cat_sql_prep(c, "SELECT " BAL_CHUNK_COLS " FROM chunks WHERE ns = ? ORDER BY min_enc", &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, ns);
        rc = chunks_read(c, st, out, &cap, err);
    }
    sqlite3_finalize(st);
    if (rc == 0) rc = zones_load(c, ns, out, err);
    cat_unlock(c);
    if (rc) cat_bal_free(out);
    return rc;
}

/* ---- the summary: counts and candidates ------------------------------------------------ */

/* The maintained counts of ns, one row per shard owning chunks (catalog.c chunk_counts). */
static int counts_load(cat_t *c, const char *ns, cat_bal_data_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int s, cap = 0;
    int rc = cat_sql_prep(c, "SELECT shard, n, jumbo FROM chunk_counts WHERE ns = ? ORDER BY shard", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (out->ncounts == cap) {
            cap = cap ? cap * 2 : 8;
            out->counts = realloc(out->counts, sizeof *out->counts * (size_t)cap);
            if (!out->counts) abort();
        }
        cat_bal_count_t *k = &out->counts[out->ncounts++];
        cat_copy_str(k->shard, sizeof k->shard, cat_col_text(st, 0));
        k->chunks = sqlite3_column_int(st, 1);
        k->jumbo = sqlite3_column_int(st, 2);
        k->in_range = calloc((size_t)(out->nzones > 0 ? out->nzones : 1), sizeof *k->in_range);
        if (!k->in_range) abort();
        out->total += k->chunks;
    }
    if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "read chunk counts", cat_db_handle(c));
    sqlite3_finalize(st);
    return rc;
}

static cat_bal_count_t *count_of(cat_bal_data_t *d, const char *shard) {
    for (int i = 0; i < d->ncounts; i++)
        if (strcmp(d->counts[i].shard, shard) == 0) return &d->counts[i];
    return NULL;
}

/* The chunk of ns whose min starts in [zmin, zmax) and whose max passes zmax (at most one:
 * chunks tile), its owner into shard: it starts in the range but is not wholly inside. */
static int range_straddler(cat_t *c, const char *ns, const bal_zone_range_t *r, char *shard, size_t cap,
                           bool *found, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    *found = false;
    int rc = cat_sql_prep(c, "SELECT shard, min_enc, max_enc FROM chunks INDEXED BY chunks_ns_min WHERE ns = ?1"
                             " AND min_enc < ?2 ORDER BY min_enc DESC LIMIT 1", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    sqlite3_bind_blob(st, 2, r->max_enc, (int)r->max_len, SQLITE_STATIC);
    int s = sqlite3_step(st);
    if (s == SQLITE_ROW) {
        const void *mn = sqlite3_column_blob(st, 1), *mx = sqlite3_column_blob(st, 2);
        size_t mnl = (size_t)sqlite3_column_bytes(st, 1), mxl = (size_t)sqlite3_column_bytes(st, 2);
        *found = cat_blob_cmp(mn, mnl, r->min_enc, r->min_len) >= 0 &&
                 cat_blob_cmp(mx, mxl, r->max_enc, r->max_len) > 0;
        if (*found) cat_copy_str(shard, cap, cat_col_text(st, 0));
    } else if (s != SQLITE_DONE) {
        rc = err_from_sqlite(err, s, "read zone range end", cat_db_handle(c));
    }
    sqlite3_finalize(st);
    return rc;
}

/* Chunks wholly inside each zone range per shard: the chunks of the shard whose min lies
 * in the range, counted on the (ns, shard, min) index alone (no row read), less the one
 * chunk that starts inside and ends past the range. This is the one read that grows —
 * with the chunks inside zone ranges, not with the collection. */
static int range_counts_load(cat_t *c, const char *ns, cat_bal_data_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, "SELECT count(*) FROM chunks INDEXED BY chunks_ns_shard_min WHERE ns = ?1"
                             " AND shard = ?2 AND min_enc >= ?3 AND min_enc < ?4", &st, err);
    for (int z = 0; rc == 0 && z < out->nzones; z++) {
        const bal_zone_range_t *r = &out->zones[z];
        for (int k = 0; rc == 0 && k < out->ncounts; k++) {
            sqlite3_reset(st);
            cat_bind_text(st, 1, ns);
            cat_bind_text(st, 2, out->counts[k].shard);
            sqlite3_bind_blob(st, 3, r->min_enc, (int)r->min_len, SQLITE_STATIC);
            sqlite3_bind_blob(st, 4, r->max_enc, (int)r->max_len, SQLITE_STATIC);
            int s = sqlite3_step(st);
            if (s == SQLITE_ROW) out->counts[k].in_range[z] = sqlite3_column_int(st, 0);
            else rc = err_from_sqlite(err, s, "count zone range", cat_db_handle(c));
        }
        char owner[CAT_SHARD_NAME_BYTES_MAX];
        bool found = false;
        if (rc == 0) rc = range_straddler(c, ns, r, owner, sizeof owner, &found, err);
        cat_bal_count_t *k = rc == 0 && found ? count_of(out, owner) : NULL;
        if (k) k->in_range[z]--;
    }
    sqlite3_finalize(st);
    return rc;
}

/* A key range [lo, hi) of chunk minimums, and an optional cap on their maximums; a NULL
 * bound is open. */
typedef struct key_span {
    const uint8_t *lo, *hi, *max_cap;
    size_t lo_len, hi_len, max_cap_len;
} key_span_t;

/* Appends the first movable (non-jumbo) chunk of shard in span, if any. The statement is
 * one of four shapes (which bounds are open), pinned to the (ns, shard, min) index: one
 * probe, O(log n), whatever the collection's size. */
static int first_movable_read(cat_t *c, const char *ns, const char *shard, const key_span_t *sp,
                              cat_bal_data_t *out, int *cap, ms_error_t *err) {
    char sql[384];
    sqlite3_stmt *st = NULL;
    snprintf(sql, sizeof sql,
             "SELECT " BAL_CHUNK_COLS " FROM chunks INDEXED BY chunks_ns_shard_min WHERE ns = ?1"
             " AND shard = ?2 AND jumbo = 0%s%s%s ORDER BY min_enc LIMIT 1",
             sp->lo ? " AND min_enc >= ?3" : "", sp->hi ? " AND min_enc < ?4" : "",
             sp->max_cap ? " AND max_enc <= ?5" : "");
    int rc = cat_sql_prep(c, sql, &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    cat_bind_text(st, 2, shard);
    if (sp->lo) sqlite3_bind_blob(st, 3, sp->lo, (int)sp->lo_len, SQLITE_STATIC);
    if (sp->hi) sqlite3_bind_blob(st, 4, sp->hi, (int)sp->hi_len, SQLITE_STATIC);
    if (sp->max_cap) sqlite3_bind_blob(st, 5, sp->max_cap, (int)sp->max_cap_len, SQLITE_STATIC);
    rc = chunks_read(c, st, out, cap, err);
    sqlite3_finalize(st);
    return rc;
}

/* Appends the chunk that holds bound strictly after its min (the one a zone bound may
 * fall inside), if any. */
static int chunk_below_read(cat_t *c, const char *ns, const uint8_t *b, size_t blen, cat_bal_data_t *out,
                            int *cap, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc = cat_sql_prep(c, "SELECT " BAL_CHUNK_COLS " FROM chunks INDEXED BY chunks_ns_min WHERE ns = ?1"
                             " AND min_enc < ?2 ORDER BY min_enc DESC LIMIT 1", &st, err);
    if (rc) return rc;
    cat_bind_text(st, 1, ns);
    sqlite3_bind_blob(st, 2, b, (int)blen, SQLITE_STATIC);
    rc = chunks_read(c, st, out, cap, err);
    sqlite3_finalize(st);
    return rc;
}

/* The candidates of one shard: its first movable chunk overall (draining), in each zone
 * range (zone violations, a zone's imbalance) and in each gap before, between and after
 * the ranges (no zone's imbalance). */
static int shard_candidates(cat_t *c, const char *ns, const char *shard, cat_bal_data_t *out, int *cap,
                            ms_error_t *err) {
    key_span_t all = {0};
    int rc = first_movable_read(c, ns, shard, &all, out, cap, err);
    for (int z = 0; rc == 0 && z <= out->nzones; z++) {
        const bal_zone_range_t *prev = z > 0 ? &out->zones[z - 1] : NULL;
        const bal_zone_range_t *r = z < out->nzones ? &out->zones[z] : NULL;
        key_span_t gap = {.lo = prev ? prev->max_enc : NULL, .lo_len = prev ? prev->max_len : 0,
                          .hi = r ? r->min_enc : NULL, .hi_len = r ? r->min_len : 0};
        if (!(gap.lo && gap.hi && cat_blob_cmp(gap.lo, gap.lo_len, gap.hi, gap.hi_len) >= 0))
            rc = first_movable_read(c, ns, shard, &gap, out, cap, err);
        if (rc || !r) continue;
        key_span_t in = {.lo = r->min_enc, .lo_len = r->min_len, .hi = r->max_enc, .hi_len = r->max_len,
                         .max_cap = r->max_enc, .max_cap_len = r->max_len};
        rc = first_movable_read(c, ns, shard, &in, out, cap, err);
    }
    return rc;
}

/* A candidate and its owner's name, for sorting the two arrays together. */
typedef struct cand {
    bal_chunk_t ch;
    char owner[CAT_SHARD_NAME_BYTES_MAX];
} cand_t;

static int cand_cmp(const void *a, const void *b) {
    const bal_chunk_t *x = &((const cand_t *)a)->ch, *y = &((const cand_t *)b)->ch;
    return cat_blob_cmp(x->min_enc, x->min_len, y->min_enc, y->min_len);
}

/* Key order, each chunk once (a chunk may be the candidate of several reads). */
static void candidates_sort(cat_bal_data_t *d) {
    if (d->nchunks == 0) return;
    cand_t *v = malloc(sizeof *v * (size_t)d->nchunks);
    if (!v) abort();
    for (int i = 0; i < d->nchunks; i++) {
        v[i].ch = d->chunks[i];
        memcpy(v[i].owner, d->owners[i], sizeof v[i].owner);
    }
    qsort(v, (size_t)d->nchunks, sizeof *v, cand_cmp);
    int n = 0;
    for (int i = 0; i < d->nchunks; i++) {
        if (n > 0 && cand_cmp(&v[i], &v[n - 1]) == 0) {
            free((void *)v[i].ch.min_enc);
            free((void *)v[i].ch.max_enc);
            bson_destroy((bson_t *)v[i].ch.min);
            bson_destroy((bson_t *)v[i].ch.max);
            continue;
        }
        v[n++] = v[i];
    }
    for (int i = 0; i < n; i++) {
        d->chunks[i] = v[i].ch;
        memcpy(d->owners[i], v[i].owner, sizeof v[i].owner);
    }
    d->nchunks = n;
    free(v);
}

int cat_bal_load_summary(cat_t *c, const char *ns, cat_bal_data_t *out, ms_error_t *err) {
    int cap = 0;
    memset(out, 0, sizeof *out);
    out->summary = true;
    cat_lock(c);
    int rc = zones_load(c, ns, out, err);
    if (rc == 0) rc = counts_load(c, ns, out, err);
    if (rc == 0) rc = range_counts_load(c, ns, out, err);
    for (int k = 0; rc == 0 && k < out->ncounts; k++)
        rc = shard_candidates(c, ns, out->counts[k].shard, out, &cap, err);
    for (int z = 0; rc == 0 && z < out->nzones; z++) {
        const bal_zone_range_t *r = &out->zones[z];
        rc = chunk_below_read(c, ns, r->min_enc, r->min_len, out, &cap, err);
        if (rc == 0) rc = chunk_below_read(c, ns, r->max_enc, r->max_len, out, &cap, err);
    }
    cat_unlock(c);
    if (rc == 0) candidates_sort(out);
    else cat_bal_free(out);
    return rc;
}

int cat_bal_load_shard(cat_t *c, const char *ns, const char *shard, cat_bal_data_t *out, int64_t **since_out,
                       ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int cap = 0, scap = 0, s;
    int64_t *since = NULL;
    memset(out, 0, sizeof *out);
    cat_lock(c);
    int rc = cat_sql_prep(c, "SELECT " BAL_CHUNK_COLS ", since_t FROM chunks INDEXED BY chunks_ns_shard_min"
                             " WHERE ns = ?1 AND shard = ?2 ORDER BY min_enc", &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, ns);
        cat_bind_text(st, 2, shard);
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            chunk_append(out, st, &cap);
            if (out->nchunks > scap) {
                scap = cap;
                since = realloc(since, sizeof *since * (size_t)scap);
                if (!since) abort();
            }
            since[out->nchunks - 1] = sqlite3_column_int64(st, 7);
        }
        if (s != SQLITE_DONE) rc = err_from_sqlite(err, s, "read a shard's chunks", cat_db_handle(c));
    }
    sqlite3_finalize(st);
    if (rc == 0) rc = zones_load(c, ns, out, err);
    cat_unlock(c);
    if (rc) {
        cat_bal_free(out);
        free(since);
        since = NULL;
    }
    *since_out = since;
    return rc;
}

int cat_bal_chunks_after(cat_t *c, const char *ns, const uint8_t *after, size_t after_len, int limit,
                         cat_bal_data_t *out, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int cap = 0;
    memset(out, 0, sizeof *out);
    cat_lock(c);
    int rc = cat_sql_prep(c, after ? "SELECT " BAL_CHUNK_COLS " FROM chunks INDEXED BY chunks_ns_min WHERE ns = ?1"
                                     " AND min_enc > ?2 AND jumbo = 0 ORDER BY min_enc LIMIT ?3"
                                   : "SELECT " BAL_CHUNK_COLS " FROM chunks INDEXED BY chunks_ns_min WHERE ns = ?1"
                                     " AND jumbo = 0 ORDER BY min_enc LIMIT ?3",
                          &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, ns);
        if (after) sqlite3_bind_blob(st, 2, after, (int)after_len, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, limit);
        rc = chunks_read(c, st, out, &cap, err);
    }
    sqlite3_finalize(st);
    cat_unlock(c);
    if (rc) cat_bal_free(out);
    return rc;
}

int cat_actionlog(cat_t *c, const char *what, const char *ns, const bson_t *details,
                  ms_error_t *err) {
    int rc;
    cat_lock(c);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc == 0) {
        rc = cat_log_change_locked(c, "actionlog", what, ns, details, err);
        if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
        if (rc) cat_sql_exec(c, "ROLLBACK", NULL);
    }
    cat_unlock(c);
    return rc;
}

int cat_lock_doc_put(cat_t *c, const char *id, const bson_t *doc, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc;
    cat_lock(c);
    rc = cat_sql_prep(c, "INSERT OR REPLACE INTO locks (id, doc) VALUES (?, ?)", &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, id);
        cat_bind_bson(st, 2, doc);
        rc = cat_sql_done(c, st, "write config.locks", err);
    }
    sqlite3_finalize(st);
    cat_unlock(c);
    return rc;
}

/* The jumbo flag of the chunk of ns exactly [min, max) (notes §4.6). set = true is the
 * balancer's markJumbo: the flag only, no version change (routers need not refresh for a
 * flag only the balancer reads); a chunk no longer there (split or moved meanwhile) is
 * left alone. set = false is clearJumboFlag as MongoDB 7.0's config server does it: a
 * chunk that is not jumbo is left as it is; a jumbo one loses the flag and takes the
 * collection's next major version (M+1, 0), so every router and the owner refresh. */
int cat_chunk_jumbo(cat_t *c, const char *ns, const bson_t *min, const bson_t *max, bool set,
                    bool *changed, char *shard_out, size_t shard_cap, ms_error_t *err) {
    cat_coll_t coll;
    keys_pattern_t p;
    buf_t mn = {0}, mx = {0};
    sqlite3_stmt *st = NULL, *up = NULL;
    uint32_t M = 0, mm = 0;
    int rc;
    *changed = false;
    cat_lock(c);
    rc = cat_sql_exec(c, "BEGIN IMMEDIATE", err);
    if (rc) {
        cat_unlock(c);
        return rc;
    }
    rc = cat_coll_pattern_locked(c, ns, &coll, &p, err);
    if (rc) goto done;
    rc = keys_encode_bound(&p, min, &mn, err);
    if (rc == 0) rc = keys_encode_bound(&p, max, &mx, err);
    if (rc == 0) rc = cat_sql_prep(c, "SELECT id, jumbo, shard, max_enc FROM chunks WHERE ns = ? AND min_enc = ?",
                                   &st, err);
    if (rc) goto out;
    cat_bind_text(st, 1, ns);
    cat_bind_buf(st, 2, &mn);
    int s = sqlite3_step(st);
    if (s != SQLITE_ROW || cat_blob_cmp(sqlite3_column_blob(st, 3), (size_t)sqlite3_column_bytes(st, 3),
                                        mx.data, mx.len) != 0) {
        if (s != SQLITE_ROW && s != SQLITE_DONE) rc = err_from_sqlite(err, s, "find chunk", cat_db_handle(c));
        else if (!set) {
            char *a = bson_as_relaxed_extended_json(min, NULL), *b = bson_as_relaxed_extended_json(max, NULL);
            rc = err_set(err, MS_ERR_LOC_CHUNK_NOT_FOUND, "Unable to locate chunk [%s, %s) from ns: %s",
                         a ? a : "?", b ? b : "?", ns);
            bson_free(a);
            bson_free(b);
        }
        goto out;
    }
    bool jumbo = sqlite3_column_int(st, 1) != 0;
    if (shard_out) cat_copy_str(shard_out, shard_cap, cat_col_text(st, 2));
    bson_oid_t id;
    cat_col_oid(st, 0, &id);
    sqlite3_finalize(st);
    st = NULL;
    if (jumbo == set) goto out;  /* nothing to write */
    if (set) {
        rc = cat_sql_prep(c, "UPDATE chunks SET jumbo = 1 WHERE id = ?", &up, err);
        if (rc == 0) sqlite3_bind_blob(up, 1, id.bytes, 12, SQLITE_TRANSIENT);
    } else {
        rc = cat_coll_version_locked(c, ns, NULL, &M, &mm, err);
        if (rc == 0 && M == UINT32_MAX) rc = err_set(err, MS_ERR_OVERFLOW, "major version of %s would overflow", ns);
        if (rc == 0) rc = cat_sql_prep(c, "UPDATE chunks SET jumbo = 0, major = ?, minor = 0 WHERE id = ?", &up, err);
        if (rc == 0) {
            sqlite3_bind_int64(up, 1, (int64_t)M + 1);
            sqlite3_bind_blob(up, 2, id.bytes, 12, SQLITE_TRANSIENT);
        }
    }
    if (rc == 0) rc = cat_sql_done(c, up, set ? "mark chunk jumbo" : "clear jumbo flag", err);
    if (rc == 0) *changed = true;
out:
    sqlite3_finalize(st);
    sqlite3_finalize(up);
    buf_free(&mn);
    buf_free(&mx);
    keys_pattern_free(&p);
    cat_coll_free(&coll);
done:
    if (rc == 0) rc = cat_sql_exec(c, "COMMIT", err);
    if (rc) {
        cat_sql_exec(c, "ROLLBACK", NULL);
        *changed = false;
    }
    cat_unlock(c);
    return rc;
}

/* The catalog column of each cat_coll_flags_t slot (fixed names: never from input). */
static const char *const flag_column[CAT_COLL_FLAGS] = {"no_balance", "enable_auto_merge"};

/* The stored value of slot i as cat_coll_flags_t counts it (NULL → CAT_FLAG_UNSET; a
 * NULL no_balance cannot happen: the column is NOT NULL). */
static int flag_of(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? CAT_FLAG_UNSET : sqlite3_column_int(st, i) != 0;
}

/* A $unset of noBalance stores 0 (the column is NOT NULL, and 0 reads back as absent). */
static int flag_stored(int i, int v) {
    return (v == CAT_FLAG_UNSET && i == CAT_FLAG_NO_BALANCE) ? 0 : v;
}

int cat_coll_set_flags(cat_t *c, const char *ns, const cat_coll_flags_t *f, int64_t *n,
                       int64_t *nmod, ms_error_t *err) {
    sqlite3_stmt *st = NULL;
    int rc, now[CAT_COLL_FLAGS];
    *n = *nmod = 0;
    cat_lock(c);
    /* Matched = the collection exists; modified = a flag changed (MongoDB's n /
     * nModified: a $set to the value already there matches and modifies nothing). */
    rc = cat_sql_prep(c, "SELECT no_balance, enable_auto_merge FROM collections WHERE ns = ?", &st, err);
    if (rc == 0) {
        cat_bind_text(st, 1, ns);
        int s = sqlite3_step(st);
        if (s == SQLITE_ROW) {
            *n = 1;
            for (int i = 0; i < CAT_COLL_FLAGS; i++) {
                now[i] = flag_of(st, i);
                if (f->v[i] != CAT_FLAG_KEEP && flag_stored(i, f->v[i]) != now[i]) *nmod = 1;
            }
        } else if (s != SQLITE_DONE) {
            rc = err_from_sqlite(err, s, "read collection", cat_db_handle(c));
        }
        sqlite3_finalize(st);
        st = NULL;
    }
    for (int i = 0; rc == 0 && *nmod && i < CAT_COLL_FLAGS; i++) {
        char sql[96];
        int v = f->v[i] == CAT_FLAG_KEEP ? CAT_FLAG_KEEP : flag_stored(i, f->v[i]);
        if (v == CAT_FLAG_KEEP || v == now[i]) continue;
        snprintf(sql, sizeof sql, "UPDATE collections SET %s = ? WHERE ns = ?", flag_column[i]);
        rc = cat_sql_prep(c, sql, &st, err);
        if (rc == 0) {
            if (v == CAT_FLAG_UNSET) sqlite3_bind_null(st, 1);
            else sqlite3_bind_int(st, 1, v);
            cat_bind_text(st, 2, ns);
            rc = cat_sql_done(c, st, "set a config.collections flag", err);
        }
        sqlite3_finalize(st);
        st = NULL;
    }
    cat_unlock(c);
    return rc;
}
