/*
 * plan.c — the shard daemon's planner, scans and cursors (bin/shardd); the table of open
 * cursors is common/cursor.c's (plan_cursors_new opens it with this file's callbacks).
 *
 * Planner (MongoDB's QueryPlanner + a trial by counting, in miniature): every index gets
 * bounds from the filter (bounds_from_filter); an _id point wins at once (IDHACK); otherwise
 * each bounded index is costed by counting its keys inside the bounds (capped), an index
 * whose order gives the requested sort saves the blocking sort, and the cheapest plan wins;
 * no useful index → COLLSCAN. Every fetched document is re-checked against the whole filter
 * and, for routed requests, the ownership filter (orphans are never returned).
 *
 * Scans are resumable: a position (range, last key, last rowid) lets each cursor batch run
 * in its own short read transaction, as MongoDB yields and restores between batches.
 * Blocking sorts hold at most 100 MB (MongoDB's limit) and keep only skip+limit documents
 * when a limit is given (top-k). Scans check the operation's maxTimeMS (op_check) every
 * MS_INTERRUPT_CHECK_DOCS rows; a cursor carries what its find's maxTimeMS left to each
 * getMore.
 */
#include "shardd/shardd.h"

#include <sqlite3.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/mem.h"

#include "common/opctx.h"

/* Keys counted per candidate index when costing plans (MongoDB's trial period works). */
#define PLAN_TRIAL_KEYS 10000

/* ---- plans -------------------------------------------------------------------------- */

void plan_free(plan_t *p) {
    if (!p) return;
    bounds_free(&p->bounds);
    if (p->key_pattern.len) bson_destroy(&p->key_pattern);
    memset(p, 0, sizeof *p);
}

/* 1 when the index order gives the sort, -1 when the reversed order does, 0 otherwise. */
static int sort_dir_of(const store_index_t *ix, const sortspec_t *sort) {
    bson_iter_t it;
    int f = 0, dir = 0;
    if (!sort || ix->multikey) return 0;
    if (!bson_iter_init(&it, sortspec_spec(sort))) return 0;
    while (bson_iter_next(&it)) {
        int64_t v = 0;
        int d;
        if (f >= ix->pat.nfields || ix->pat.hashed[f]) return 0;
        if (strcmp(bson_iter_key(&it), ix->pat.fields[f]) != 0) return 0;
        if (!bsonx_as_int64(&it, &v)) return 0;
        d = (v < 0 ? -1 : 1) * ix->pat.dir[f];
        if (dir && d != dir) return 0;
        dir = d;
        f++;
    }
    return dir;
}

/* Appends the SQL conditions of one range (and the resume clause) to sql. Placeholders:
 * ?1 lo, ?2 hi, ?3 last key, ?4 last rowid. */
static void range_sql(char *sql, size_t sz, const char *kcol, const char *ridcol,
                      const bounds_range_t *r, bool resume, int dir, bool id_unique) {
    size_t o = strlen(sql);
    if (r && r->lo.len)
        o += (size_t)snprintf(sql + o, sz - o, " AND %s %s ?1", kcol, r->lo_incl ? ">=" : ">");
    if (r && r->hi.len)
        o += (size_t)snprintf(sql + o, sz - o, " AND %s %s ?2", kcol, r->hi_incl ? "<=" : "<");
    if (resume) {
        if (id_unique)
            o += (size_t)snprintf(sql + o, sz - o, " AND %s %s ?3", kcol, dir > 0 ? ">" : "<");
        else
            o += (size_t)snprintf(sql + o, sz - o, " AND (%s, %s) %s (?3, ?4)", kcol, ridcol,
                                  dir > 0 ? ">" : "<");
    }
    (void)o;
}

static void bind_range(sqlite3_stmt *s, const bounds_range_t *r) {
    if (r && r->lo.len) sqlite3_bind_blob(s, 1, r->lo.data, (int)r->lo.len, SQLITE_STATIC);
    if (r && r->hi.len) sqlite3_bind_blob(s, 2, r->hi.data, (int)r->hi.len, SQLITE_STATIC);
}

/* Keys of ix inside b, counted up to cap. */
static int64_t estimate(store_txn_t *t, store_coll_t *c, const store_index_t *ix,
                        const bounds_t *b, int64_t cap) {
    int64_t total = 0;
    int n = b->all ? 1 : b->n;
    for (int i = 0; i < n && total < cap; i++) {
        const bounds_range_t *r = b->all ? NULL : &b->r[i];
        char sql[320];
        sqlite3_stmt *s;
        if (ix->is_id)
            snprintf(sql, sizeof sql, "SELECT count(*) FROM (SELECT 1 FROM c%lld WHERE 1",
                     (long long)c->id);
        else
            snprintf(sql, sizeof sql, "SELECT count(*) FROM (SELECT 1 FROM i%lld WHERE 1",
                     (long long)ix->id);
        range_sql(sql, sizeof sql, ix->is_id ? "id" : "k", "rid", r, false, 1, ix->is_id);
        strncat(sql, " LIMIT ?5)", sizeof sql - strlen(sql) - 1);
        if (!(s = store_stmt(t, sql, NULL))) return cap;
        bind_range(s, r);
        sqlite3_bind_int64(s, 5, cap - total);
        if (sqlite3_step(s) == SQLITE_ROW) total += sqlite3_column_int64(s, 0);
        sqlite3_reset(s);
    }
    return total;
}

/* Bounds on a multikey index are only safe when no two predicates on one indexed field
 * get intersected: {a: {$gte: 2, $lt: 5}} matches {a: [1, 6]} (each element satisfies one
 * side), yet that document has no key in [2, 5). MongoDB does not intersect bounds of
 * multikey fields; we use such an index only when each indexed field carries one simple
 * predicate (equality, $eq, $in, or one range operator) at the top level. */
static bool multikey_bounds_ok(const bson_t *filter, const keys_pattern_t *p) {
    bson_iter_t it;
    if (!filter || !bson_iter_init(&it, filter)) return true;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bool indexed = false;
        if (k[0] == '$') return false;  /* $and / $or / $nor ...: be conservative */
        for (int f = 0; f < p->nfields; f++)
            if (strcmp(p->fields[f], k) == 0) indexed = true;
        if (!indexed) continue;
        if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_iter_t op;
            int nops = 0, nrange = 0;
            if (!bson_iter_recurse(&it, &op)) return false;
            while (bson_iter_next(&op)) {
                const char *o = bson_iter_key(&op);
                if (o[0] != '$') return false;  /* an embedded document equality: fine, but rare */
                nops++;
                if (!strcmp(o, "$gt") || !strcmp(o, "$gte") || !strcmp(o, "$lt") || !strcmp(o, "$lte"))
                    nrange++;
                else if (strcmp(o, "$eq") != 0 && strcmp(o, "$in") != 0)
                    return false;
            }
            if (nops != 1) return false;
        }
    }
    /* The same field twice at the top level is also an intersection. */
    for (int f = 0; f < p->nfields; f++) {
        int seen = 0;
        bson_iter_init(&it, filter);
        while (bson_iter_next(&it))
            if (strcmp(bson_iter_key(&it), p->fields[f]) == 0) seen++;
        if (seen > 1) return false;
    }
    return true;
}

static store_index_t *hinted_index(store_coll_t *c, const plan_query_t *eq) {
    if (eq->hint_name) return store_index_by_name(c, eq->hint_name);
    if (eq->hint && eq->hint->len > 5)
        for (int i = 0; i < c->nindexes; i++)
            if (bson_equal(&c->ix[i]->pat.spec, eq->hint)) return c->ix[i];
    return NULL;
}

static bool hint_is_natural(const plan_query_t *eq) {
    bson_iter_t it;
    return eq->hint && bson_iter_init(&it, eq->hint) && bson_iter_next(&it) &&
           strcmp(bson_iter_key(&it), "$natural") == 0;
}

static void plan_take(plan_t *p, store_index_t *ix, bounds_t *b, int dir, bool blocking) {
    p->kind = PLAN_IXSCAN;
    p->ix_id = ix->id;
    p->is_id = ix->is_id;
    snprintf(p->ix_name, sizeof p->ix_name, "%s", ix->name);
    bson_copy_to(&ix->pat.spec, &p->key_pattern);
    p->bounds = *b;
    memset(b, 0, sizeof *b);
    p->dir = dir ? dir : 1;
    p->blocking_sort = blocking;
    p->multikey = ix->multikey != 0;
}

int plan_choose(store_txn_t *t, store_coll_t *c, const plan_query_t *eq, plan_t *out,
              ms_error_t *err) {
    bson_t empty = BSON_INITIALIZER;
    const bson_t *filter = eq->filter ? eq->filter : &empty;
    store_index_t *best = NULL;
    bounds_t best_b = {0};
    int64_t best_cost = INT64_MAX, total;
    int best_dir = 0, rc = 0;
    memset(out, 0, sizeof *out);
    out->kind = PLAN_COLLSCAN;
    out->coll_id = c->id;
    out->coll_gen = c->gen;
    out->dir = 1;
    out->blocking_sort = eq->sort != NULL;
    if (hint_is_natural(eq)) return 0;
    if (eq->hint || eq->hint_name) {
        store_index_t *ix = hinted_index(c, eq);
        bounds_t b = {0};
        if (!ix)
            return err_set(err, MS_ERR_BAD_VALUE,
                           "error processing query: planner returned error :: caused by :: hint "
                           "provided does not correspond to an existing index");
        if (ix->multikey && !multikey_bounds_ok(filter, &ix->pat))
            b.all = true;  /* the whole index, re-checked by the filter */
        else if ((rc = bounds_from_filter(filter, &ix->pat, SHARDD_PLAN_RANGES_MAX, &b, err)) != 0)
            return rc;
        {
            int d = sort_dir_of(ix, eq->sort);
            plan_take(out, ix, &b, d, eq->sort && !d);
        }
        out->ncandidates = 1;
        return 0;
    }
    total = -1;
    for (int i = 0; i < c->nindexes; i++) {
        store_index_t *ix = c->ix[i];
        bounds_t b = {0};
        int d;
        int64_t est, cost;
        if (i > 0 && eq->no_index) break;
        if (ix->multikey && !multikey_bounds_ok(filter, &ix->pat)) continue;
        if ((rc = bounds_from_filter(filter, &ix->pat, SHARDD_PLAN_RANGES_MAX, &b, err)) != 0)
            goto out;
        d = sort_dir_of(ix, eq->sort);
        if (b.all && !d) {
            bounds_free(&b);
            continue;
        }
        out->ncandidates++;
        if (ix->is_id && bounds_is_point(&b)) {
            /* IDHACK: an _id equality is one lookup, nothing beats it. */
            bounds_free(&best_b);
            best = ix;
            best_b = b;
            best_dir = d;
            break;
        }
        if (b.all) {
            if (total < 0) total = estimate(t, c, c->ix[0], &b, PLAN_TRIAL_KEYS);
            est = total;
        } else {
            est = estimate(t, c, ix, &b, PLAN_TRIAL_KEYS);
        }
        /* A blocking sort costs about as much again as reading the documents. */
        cost = est + (eq->sort && !d ? est + 1 : 0);
        if (cost < best_cost) {
            bounds_free(&best_b);
            best = ix;
            best_b = b;
            best_dir = d;
            best_cost = cost;
        } else {
            bounds_free(&b);
        }
    }
    if (best) {
        /* A full-range index scan only pays when it saves a sort; a collection scan plus
         * sort costs 2 × total, so compare with that. */
        if (best_b.all && !best_dir) {
            bounds_free(&best_b);
        } else {
            plan_take(out, best, &best_b, best_dir, eq->sort && !best_dir);
        }
    }
out:
    bounds_free(&best_b);
    return rc;
}

static void append_bound_value(bson_t *arr, int i, const bson_t *decoded, int f) {
    bson_iter_t it;
    char key[16], *js = NULL;
    int j = 0;
    snprintf(key, sizeof key, "%d", i);
    if (bson_iter_init(&it, decoded))
        while (bson_iter_next(&it)) {
            if (j++ == f) {
                js = store_value_json(&it);
                break;
            }
        }
    BSON_APPEND_UTF8(arr, key, js ? js : "?");
    bson_free(js);
}

void plan_append_explain(const plan_t *p, const store_coll_t *c, const plan_query_t *eq,
                         bson_t *dst, const char *key) {
    bson_t plan, input, bounds;
    bson_t *s = &plan;
    bson_append_document_begin(dst, key, -1, &plan);
    if (p->blocking_sort) {
        BSON_APPEND_UTF8(&plan, "stage", "SORT");
        BSON_APPEND_DOCUMENT(&plan, "sortPattern", sortspec_spec(eq->sort));
        BSON_APPEND_INT64(&plan, "memLimit", SHARDD_SORT_BYTES_MAX);
        BSON_APPEND_UTF8(&plan, "type", "simple");
        bson_append_document_begin(&plan, "inputStage", -1, &input);
        s = &input;
    }
    {
        if (p->kind == PLAN_COLLSCAN) {
            BSON_APPEND_UTF8(s, "stage", "COLLSCAN");
            if (eq->filter) BSON_APPEND_DOCUMENT(s, "filter", eq->filter);
            BSON_APPEND_UTF8(s, "direction", "forward");
        } else {
            bson_t ix;
            keys_pattern_t pat;
            ms_error_t e;
            BSON_APPEND_UTF8(s, "stage", "FETCH");
            if (eq->filter) BSON_APPEND_DOCUMENT(s, "filter", eq->filter);
            bson_append_document_begin(s, "inputStage", -1, &ix);
            BSON_APPEND_UTF8(&ix, "stage", "IXSCAN");
            BSON_APPEND_DOCUMENT(&ix, "keyPattern", &p->key_pattern);
            BSON_APPEND_UTF8(&ix, "indexName", p->ix_name);
            BSON_APPEND_BOOL(&ix, "isMultiKey", p->multikey);
            BSON_APPEND_BOOL(&ix, "isUnique", p->is_id);
            BSON_APPEND_UTF8(&ix, "direction", p->dir > 0 ? "forward" : "backward");
            bson_append_document_begin(&ix, "indexBounds", -1, &bounds);
            if (keys_pattern_parse(&p->key_pattern, &pat, &e) == 0) {
                for (int f = 0; f < pat.nfields; f++) {
                    bson_t arr;
                    bson_append_array_begin(&bounds, pat.fields[f], -1, &arr);
                    if (p->bounds.all) {
                        BSON_APPEND_UTF8(&arr, "0", "[MinKey, MaxKey]");
                    } else {
                        for (int r = 0; r < p->bounds.n; r++) {
                            bson_t lo, hi, tmp;
                            char *l, *h, text[600], key2[16];
                            store_key_decode(&pat, p->bounds.r[r].lo.data, p->bounds.r[r].lo.len,
                                             &lo);
                            store_key_decode(&pat, p->bounds.r[r].hi.data, p->bounds.r[r].hi.len,
                                             &hi);
                            bson_init(&tmp);
                            append_bound_value(&tmp, 0, &lo, f);
                            append_bound_value(&tmp, 1, &hi, f);
                            {
                                bson_iter_t it;
                                bson_iter_init(&it, &tmp);
                                bson_iter_next(&it);
                                l = bson_strdup(bson_iter_utf8(&it, NULL));
                                bson_iter_next(&it);
                                h = bson_strdup(bson_iter_utf8(&it, NULL));
                            }
                            snprintf(text, sizeof text, "%s%s, %s%s",
                                     p->bounds.r[r].lo_incl ? "[" : "(", l, h,
                                     p->bounds.r[r].hi_incl ? "]" : ")");
                            snprintf(key2, sizeof key2, "%d", r);
                            BSON_APPEND_UTF8(&arr, key2, text);
                            bson_free(l);
                            bson_free(h);
                            bson_destroy(&tmp);
                            bson_destroy(&lo);
                            bson_destroy(&hi);
                        }
                    }
                    bson_append_array_end(&bounds, &arr);
                }
                keys_pattern_free(&pat);
            }
            bson_append_document_end(&ix, &bounds);
            bson_append_document_end(s, &ix);
        }
    }
    if (p->blocking_sort) bson_append_document_end(&plan, &input);
    bson_append_document_end(dst, &plan);
    (void)c;
}

/* ---- scans -------------------------------------------------------------------------- */

void scan_pos_free(scan_pos_t *pos) {
    if (!pos) return;
    buf_free(&pos->key);
    free(pos->seen);
    free(pos->seen_bits);
    memset(pos, 0, sizeof *pos);
}

/* Room for one more element in a growing array (doubling from 64): *cap updated. */
static void *grow_for_one(void *v, size_t n, size_t *cap, size_t elem) {
    if (n < *cap) return v;
    *cap = *cap ? *cap * 2 : 64;
    return xrealloc(v, *cap * elem);
}

/* Multikey dedupe: a document with several keys in the scanned range comes up once per
 * key, and MongoDB returns it once. The record ids seen so far live in an open-addressing
 * hash set (linear probing, at most half full, 0 marks a free slot; SQLite's rowids of our
 * tables start at 1, and a zero rid is remembered apart) or, for the usual small ids, a
 * bitmap; each check is O(1) and a scan stays linear however many documents it returns. */
static size_t seen_slot(int64_t rid, size_t mask) {
    uint64_t h = (uint64_t)rid;  /* splitmix64's finaliser spreads consecutive rids */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (size_t)h & mask;
}

static void seen_grow(scan_pos_t *pos) {
    size_t cap = pos->capseen ? pos->capseen * 2 : 256;
    int64_t *tab = xrealloc(NULL, cap * sizeof *tab);
    memset(tab, 0, cap * sizeof *tab);
    for (size_t i = 0; i < pos->capseen; i++) {
        size_t j;
        if (pos->seen[i] == 0) continue;
        for (j = seen_slot(pos->seen[i], cap - 1); tab[j] != 0; j = (j + 1) & (cap - 1)) {
        }
        tab[j] = pos->seen[i];
    }
    free(pos->seen);
    pos->seen = tab;
    pos->capseen = cap;
}

/* Record ids below this go to a bitmap (at most 8 MiB), denser and kinder to the cache
 * than the hash set; SQLite hands out rowids from 1 upwards, so nearly every table's ids
 * fit. Larger or negative ids (a table that once held an explicit huge rowid) use the set. */
#define SEEN_BITMAP_RIDS_MAX ((int64_t)1 << 26)

/* True when rid was seen already; otherwise records it. */
static bool seen_check_add(scan_pos_t *pos, int64_t rid) {
    size_t j;
    if (rid > 0 && rid < SEEN_BITMAP_RIDS_MAX) {
        size_t w = (size_t)rid / 64;
        uint64_t bit = (uint64_t)1 << (rid % 64);
        if (w >= pos->nseen_words) {
            size_t n = pos->nseen_words ? pos->nseen_words : 64;
            while (n <= w) n *= 2;
            pos->seen_bits = xrealloc(pos->seen_bits, n * sizeof *pos->seen_bits);
            memset(pos->seen_bits + pos->nseen_words, 0, (n - pos->nseen_words) * sizeof *pos->seen_bits);
            pos->nseen_words = n;
        }
        if (pos->seen_bits[w] & bit) return true;
        pos->seen_bits[w] |= bit;
        return false;
    }
    if (rid == 0) {
        bool was = pos->seen_zero;
        pos->seen_zero = true;
        return was;
    }
    if ((pos->nseen + 1) * 2 > pos->capseen) seen_grow(pos);
    /* Bounded: the table is at most half full, so a free slot ends every probe. */
    for (j = seen_slot(rid, pos->capseen - 1); pos->seen[j] != 0; j = (j + 1) & (pos->capseen - 1))
        if (pos->seen[j] == rid) return true;
    pos->seen[j] = rid;
    pos->nseen++;
    return false;
}

/* The ownership filter: documents outside this shard's chunks (orphans) are skipped, and
 * with a multi-write's $_shardKeyRanges those outside the ranges the router sent too. */
static bool owned(const plan_query_t *eq, sqlite3_stmt *s, int skcol, const bson_t *doc) {
    const void *sk;
    int n;
    if (!eq->own) return true;
    sk = sqlite3_column_blob(s, skcol);
    n = sqlite3_column_bytes(s, skcol);
    if (sk && sqlite3_column_type(s, skcol) == SQLITE_BLOB)
        return shv_filter_owns(eq->own, sk, (size_t)n) &&
               (!eq->ranges || krset_contains(eq->ranges, sk, (size_t)n));
    {
        /* sk not filled (the collection is not yet sharded in our catalog): extract it. */
        buf_t enc = {0};
        bool ok = keys_extract(shv_filter_pattern(eq->own), doc, NULL, &enc, NULL) == 0 &&
                  shv_filter_owns(eq->own, enc.data, enc.len) &&
                  (!eq->ranges || krset_contains(eq->ranges, enc.data, enc.len));
        buf_free(&enc);
        return ok;
    }
}

int plan_scan(store_txn_t *t, store_coll_t *c, const plan_t *p, const plan_query_t *eq,
              scan_pos_t *pos, scan_fn fn, void *arg, ms_error_t *err) {
    int nranges = p->kind == PLAN_COLLSCAN || p->bounds.all ? 1 : p->bounds.n;
    if (pos->done) return 0;
    for (; pos->range < nranges; pos->range++, pos->started = false) {
        int ri = p->dir > 0 ? pos->range : nranges - 1 - pos->range;
        const bounds_range_t *r =
            p->kind == PLAN_COLLSCAN || p->bounds.all ? NULL : &p->bounds.r[ri];
        char sql[512];
        sqlite3_stmt *s;
        int src;
        if (p->kind == PLAN_COLLSCAN) {
            snprintf(sql, sizeof sql, "SELECT rid, rid, sk, doc FROM c%lld WHERE 1%s ORDER BY rid",
                     (long long)c->id, pos->started ? " AND rid > ?4" : "");
        } else if (p->is_id) {
            snprintf(sql, sizeof sql, "SELECT id, rid, sk, doc FROM c%lld WHERE 1",
                     (long long)c->id);
            range_sql(sql, sizeof sql, "id", "rid", r, pos->started, p->dir, true);
            strncat(sql, p->dir > 0 ? " ORDER BY id" : " ORDER BY id DESC",
                    sizeof sql - strlen(sql) - 1);
        } else {
            snprintf(sql, sizeof sql,
                     "SELECT i.k, i.rid, c.sk, c.doc FROM i%lld AS i JOIN c%lld AS c"
                     " ON c.rid = i.rid WHERE 1",
                     (long long)p->ix_id, (long long)c->id);
            range_sql(sql, sizeof sql, "i.k", "i.rid", r, pos->started, p->dir, false);
            strncat(sql, p->dir > 0 ? " ORDER BY i.k, i.rid" : " ORDER BY i.k DESC, i.rid DESC",
                    sizeof sql - strlen(sql) - 1);
        }
        if (!(s = store_stmt(t, sql, err))) return err->code;
        bind_range(s, r);
        if (pos->started) {
            if (p->kind != PLAN_COLLSCAN)
                sqlite3_bind_blob(s, 3, pos->key.data ? (const void *)pos->key.data : "",
                                  (int)pos->key.len, SQLITE_TRANSIENT);
            if (p->kind == PLAN_COLLSCAN || !p->is_id) sqlite3_bind_int64(s, 4, pos->rid);
        }
        while ((src = sqlite3_step(s)) == SQLITE_ROW) {
            int64_t rid = sqlite3_column_int64(s, 1);
            bson_t doc;
            int rc;
            pos->keys_examined++;
            /* maxTimeMS: find, count, distinct and the writes' matching all scan here. */
            if (pos->keys_examined % MS_INTERRUPT_CHECK_DOCS == 0 && (rc = op_check(err)) != 0) {
                sqlite3_reset(s);
                return rc;
            }
            if (p->kind != PLAN_COLLSCAN) {
                buf_reset(&pos->key);
                buf_put(&pos->key, sqlite3_column_blob(s, 0), (size_t)sqlite3_column_bytes(s, 0));
            }
            pos->rid = rid;
            pos->started = true;
            if (p->multikey && seen_check_add(pos, rid)) continue;
            if (!bson_init_static(&doc, sqlite3_column_blob(s, 3),
                                  (size_t)sqlite3_column_bytes(s, 3))) {
                sqlite3_reset(s);
                return err_set(err, MS_ERR_INVALID_BSON, "corrupt document rid=%lld in %s",
                               (long long)rid, c->ns);
            }
            pos->docs_examined++;
            if (!owned(eq, s, 2, &doc)) continue;
            if (eq->q) {   /* a regex may run past maxTimeMS: that error ends the scan */
                bool m;
                if ((rc = query_match_checked(eq->q, &doc, &m, err)) != 0) {
                    sqlite3_reset(s);
                    return rc;
                }
                if (!m) continue;
            }
            rc = fn(arg, rid, &doc, err);
            if (rc == 1) {
                sqlite3_reset(s);
                return 0;
            }
            if (rc != 0) {
                sqlite3_reset(s);
                return rc;
            }
        }
        sqlite3_reset(s);
        if (src != SQLITE_DONE) return err_from_sqlite(err, src, "scan", store_txn_db(t));
    }
    pos->done = true;
    return 0;
}

/* ---- blocking sort ------------------------------------------------------------------ */

typedef struct sdoc {
    int64_t rid;
    bson_t *doc;
} sdoc_t;

typedef struct sorter {
    const sortspec_t *sort;
    sdoc_t *v;
    size_t n, cap, keep;   /* keep = skip+limit (0 = all) */
    size_t bytes;
} sorter_t;

static int sdoc_cmp(const void *a, const void *b, void *arg) {
    const sdoc_t *x = a, *y = b;
    int c = sortspec_compare_docs(arg, x->doc, y->doc);
    if (c) return c;
    return x->rid < y->rid ? -1 : x->rid > y->rid;
}

static void sorter_truncate(sorter_t *so) {
    if (so->n > 1) qsort_r(so->v, so->n, sizeof *so->v, sdoc_cmp, (void *)so->sort);
    while (so->n > so->keep) {
        so->n--;
        so->bytes -= so->v[so->n].doc->len;
        bson_destroy(so->v[so->n].doc);
    }
}

static void sorter_free(sorter_t *so) {
    for (size_t i = 0; i < so->n; i++)
        if (so->v[i].doc) bson_destroy(so->v[i].doc);
    free(so->v);
    memset(so, 0, sizeof *so);
}

static int sorter_add(void *arg, int64_t rid, const bson_t *doc, ms_error_t *err) {
    sorter_t *so = arg;
    so->v = grow_for_one(so->v, so->n, &so->cap, sizeof *so->v);
    so->v[so->n].rid = rid;
    so->v[so->n].doc = bson_copy(doc);
    so->n++;
    so->bytes += doc->len;
    if (so->keep && so->n >= 2 * so->keep + 64) sorter_truncate(so);
    if (so->bytes > SHARDD_SORT_BYTES_MAX)
        return err_set(err, MS_ERR_QUERY_EXCEEDED_MEMORY_LIMIT,
                       "Executor error during find command :: caused by :: Sort exceeded memory "
                       "limit of %d bytes, but did not opt in to external sorting.",
                       SHARDD_SORT_BYTES_MAX);
    return 0;
}

static int sorter_run(store_txn_t *t, store_coll_t *c, const plan_t *p, const plan_query_t *eq,
                      scan_pos_t *pos, sorter_t *so, ms_error_t *err) {
    int rc;
    so->sort = eq->sort;
    so->keep = eq->limit > 0 ? (size_t)(eq->skip + eq->limit) : 0;
    if ((rc = plan_scan(t, c, p, eq, pos, sorter_add, so, err)) != 0) return rc;
    if (so->n > 1) qsort_r(so->v, so->n, sizeof *so->v, sdoc_cmp, (void *)so->sort);
    if (so->keep) sorter_truncate(so);
    /* qsort cannot stop halfway (it sorts at most 100 MB): check once it is done. */
    return op_check(err);
}

/* ---- rowids for writes -------------------------------------------------------------- */

typedef struct rid_acc {
    int64_t *v;
    size_t n, cap;
    int64_t skip, limit;
} rid_acc_t;

static int rid_add(void *arg, int64_t rid, const bson_t *doc, ms_error_t *err) {
    rid_acc_t *a = arg;
    (void)doc;
    (void)err;
    if (a->skip > 0) {
        a->skip--;
        return 0;
    }
    a->v = grow_for_one(a->v, a->n, &a->cap, sizeof *a->v);
    a->v[a->n++] = rid;
    return a->limit > 0 && (int64_t)a->n >= a->limit ? 1 : 0;
}

int plan_match_rowids(store_txn_t *t, store_coll_t *c, const plan_query_t *eq, int64_t **rids,
                      size_t *n, ms_error_t *err) {
    plan_t p;
    scan_pos_t pos = {0};
    rid_acc_t acc = {0};
    int rc;
    if ((rc = plan_choose(t, c, eq, &p, err)) != 0) return rc;
    acc.skip = eq->skip;
    acc.limit = eq->limit;
    if (p.blocking_sort) {
        sorter_t so = {0};
        if ((rc = sorter_run(t, c, &p, eq, &pos, &so, err)) == 0)
            for (size_t i = 0; i < so.n; i++)
                if (rid_add(&acc, so.v[i].rid, NULL, NULL) == 1) break;
        sorter_free(&so);
    } else {
        rc = plan_scan(t, c, &p, eq, &pos, rid_add, &acc, err);
    }
    plan_free(&p);
    scan_pos_free(&pos);
    if (rc != 0) {
        free(acc.v);
        return rc;
    }
    *rids = acc.v;
    *n = acc.n;
    return 0;
}

/* ---- cursors ------------------------------------------------------------------------ */

/* A cursor: the registry's part (common/cursor.c keeps the table), then what it runs. */
struct cursor {
    curs_t reg;                  /* id, ns, connection, pin state, bytes held: the registry's */
    char ns[MS_NS_BYTES_MAX + 1];   /* what fa.ns points to */
    find_args_t fa;
    plan_t plan;
    bool planned;
    scan_pos_t pos;
    sorter_t sorted;
    bool sorted_ready;
    size_t sorted_next;
    int64_t skip_left;
    int64_t limit_left;          /* -1 = unlimited */
    bson_t *stash;               /* a result that did not fit the last batch (MongoDB's
                                  * stashResult): the next batch starts with it */
    bool results;                /* an aggregate's: `sorted` holds its whole result, computed
                                  * by the aggregate command; no collection is read again */
    bool timed;                  /* opened with maxTimeMS: time_left_ms bounds each getMore */
    long long time_left_ms;      /* what the find's maxTimeMS left (MongoDB's leftover) */
};

static void cursor_free(cursor_t *cur) {
    if (!cur) return;
    plan_free(&cur->plan);
    scan_pos_free(&cur->pos);
    sorter_free(&cur->sorted);
    find_args_free(&cur->fa);
    if (cur->stash) bson_destroy(cur->stash);
    free(cur);
}

/* What a cursor keeps between batches: a blocking sort's unsent results and a stashed
 * result. (A scan's position is a few keys.) Read under the registry's lock. */
static size_t cursor_held(const curs_t *reg) {
    const cursor_t *cur = curs_entry(reg, cursor_t, reg);
    return cur->sorted.bytes + (cur->stash ? cur->stash->len : 0);
}

static void cursor_destroy(void *arg, curs_t *reg) {
    (void)arg;
    cursor_free(curs_entry(reg, cursor_t, reg));
}

int plan_cursors_new(int idle_ms, curs_reg_t **out) {
    curs_opts_t o = {.noun = "cursors", .place = "on this shard", .owner = "shard",
                     .conn_max = MS_CURSORS_PER_CONN_MAX, .total_max = MS_CURSORS_MAX,
                     .idle_ms = idle_ms, .held_fn = cursor_held, .destroy_fn = cursor_destroy};
    return curs_reg_new(&o, out);
}

void find_args_free(find_args_t *fa) {
    if (!fa) return;
    if (fa->filter) bson_destroy(fa->filter);
    if (fa->hint) bson_destroy(fa->hint);
    query_free(fa->q);
    sortspec_free(fa->sort);
    projection_free(fa->proj);
    shv_filter_release(fa->own);
    memset(fa, 0, sizeof *fa);
}

static void eq_from_fa(const find_args_t *fa, plan_query_t *eq) {
    bson_iter_t it;
    memset(eq, 0, sizeof *eq);
    eq->filter = fa->filter;
    eq->q = fa->q;
    eq->sort = fa->sort;
    if (fa->hint) {
        if (bson_iter_init_find(&it, fa->hint, "$hint") && BSON_ITER_HOLDS_UTF8(&it))
            eq->hint_name = bson_iter_utf8(&it, NULL);
        else
            eq->hint = fa->hint;
    }
    eq->skip = fa->skip;
    eq->limit = fa->limit < 0 ? -fa->limit : fa->limit;
    eq->own = fa->own;
    eq->no_index = fa->no_index;
}

typedef struct batch {
    cursor_t *cur;
    bson_t *arr;
    int64_t max_docs;            /* -1 = bytes only */
    int64_t n;
    size_t bytes;
} batch_t;

/* The batch is complete: limit reached, or the batch's own document count. */
static bool batch_full(const batch_t *b) {
    return b->cur->limit_left == 0 || (b->max_docs >= 0 && b->n >= b->max_docs);
}

/* Appends one result and counts it against the cursor's limit. */
static void batch_append(batch_t *b, const bson_t *doc) {
    char key[24];
    snprintf(key, sizeof key, "%lld", (long long)b->n);
    BSON_APPEND_DOCUMENT(b->arr, key, doc);
    b->bytes += doc->len;
    b->n++;
    if (b->cur->limit_left > 0) b->cur->limit_left--;
}

/* A result fits when the batch stays within 16 MB — or when it is the batch's first: a
 * single large document always goes out (MongoDB's FindCommon::haveSpaceForNext). */
static bool batch_fits(const batch_t *b, const bson_t *doc) {
    return b->n == 0 || b->bytes + doc->len <= MS_BATCH_BYTES_MAX;
}

/* Starts a batch with the result the previous one had no room for. */
static void batch_take_stash(batch_t *b) {
    cursor_t *cur = b->cur;
    if (!cur->stash) return;
    batch_append(b, cur->stash);
    bson_destroy(cur->stash);
    cur->stash = NULL;
}

/* Emits one document into the batch (skip, limit, projection). 1 = batch full or done;
 * a result that does not fit is stashed for the next batch (MongoDB's stashResult). */
static int batch_emit(batch_t *b, const bson_t *doc, ms_error_t *err) {
    cursor_t *cur = b->cur;
    bson_t projected;
    const bson_t *out = doc;
    int rc = 0;
    if (cur->skip_left > 0) {
        cur->skip_left--;
        return 0;
    }
    if (cur->limit_left == 0) return 1;
    if (cur->fa.proj) {
        if ((rc = projection_apply(cur->fa.proj, doc, &projected, err)) != 0) return rc;
        out = &projected;
    }
    if (!batch_fits(b, out)) {
        cur->stash = bson_copy(out);
        rc = 1;
    } else {
        batch_append(b, out);
        rc = batch_full(b) ? 1 : 0;
    }
    if (out == &projected) bson_destroy(&projected);
    return rc;
}

static int batch_scan_fn(void *arg, int64_t rid, const bson_t *doc, ms_error_t *err) {
    (void)rid;
    return batch_emit(arg, doc, err);
}

typedef struct fill_arg {
    cursor_t *cur;
    batch_t *b;
    bool exhausted;
} fill_arg_t;

/* Emits the held results (a blocking sort's, or an aggregate's) into the batch. */
static int emit_sorted(fill_arg_t *fl, ms_error_t *err) {
    cursor_t *cur = fl->cur;
    int rc;
    while (cur->sorted_next < cur->sorted.n) {
        rc = batch_emit(fl->b, cur->sorted.v[cur->sorted_next].doc, err);
        cur->sorted.bytes -= cur->sorted.v[cur->sorted_next].doc->len;
        bson_destroy(cur->sorted.v[cur->sorted_next].doc);
        cur->sorted.v[cur->sorted_next].doc = NULL;  /* sent: release it early */
        cur->sorted_next++;
        if (rc == 1) break;
        if (rc != 0) return rc;
    }
    fl->exhausted = (cur->sorted_next >= cur->sorted.n && !cur->stash) || cur->limit_left == 0;
    return 0;
}

/* One batch of an aggregate's cursor: no transaction, the results are the cursor's. */
static int fill_results(fill_arg_t *fl, ms_error_t *err) {
    if (fl->b->max_docs == 0) return 0;
    batch_take_stash(fl->b);
    if (batch_full(fl->b)) {
        fl->exhausted = fl->cur->limit_left == 0;
        return 0;
    }
    return emit_sorted(fl, err);
}

static int fill_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    fill_arg_t *fl = arg;
    cursor_t *cur = fl->cur;
    store_coll_t *c = store_coll_get(t, cur->ns);
    plan_query_t eq;
    int rc;
    eq_from_fa(&cur->fa, &eq);
    if (!c) {
        if (!cur->planned) {
            fl->exhausted = true;  /* a missing collection is an empty one */
            return 0;
        }
        return err_set(err, MS_ERR_OPERATION_FAILED,
                       "query plan killed :: caused by :: collection dropped: %s", cur->ns);
    }
    if (!cur->planned) {
        if ((rc = plan_choose(t, c, &eq, &cur->plan, err)) != 0) return rc;
        cur->planned = true;
    } else if (c->id != cur->plan.coll_id) {
        return err_set(err, MS_ERR_OPERATION_FAILED,
                       "query plan killed :: caused by :: collection dropped: %s", cur->ns);
    } else if (cur->plan.kind == PLAN_IXSCAN && !cur->plan.is_id) {
        bool found = false;
        for (int i = 1; i < c->nindexes; i++)
            if (c->ix[i]->id == cur->plan.ix_id) found = true;
        if (!found)
            return err_set(err, MS_ERR_OPERATION_FAILED,
                           "query plan killed :: caused by :: index '%s' dropped",
                           cur->plan.ix_name);
    }
    if (fl->b->max_docs == 0) return 0;
    batch_take_stash(fl->b);
    if (batch_full(fl->b)) {
        fl->exhausted = cur->limit_left == 0;
        return 0;
    }
    if (cur->plan.blocking_sort) {
        if (!cur->sorted_ready) {
            if ((rc = sorter_run(t, c, &cur->plan, &eq, &cur->pos, &cur->sorted, err)) != 0)
                return rc;
            cur->sorted_ready = true;
        }
        return emit_sorted(fl, err);
    }
    if ((rc = plan_scan(t, c, &cur->plan, &eq, &cur->pos, batch_scan_fn, fl->b, err)) != 0)
        return rc;
    fl->exhausted = (cur->pos.done && !cur->stash) || cur->limit_left == 0;
    return 0;
}

/* Appends the reply's cursor document: {cursor: {<key>: batch, id, ns}}. */
static void append_cursor_reply(bson_t *reply, const char *key, const bson_t *batch, int64_t id,
                                const char *ns) {
    bson_t cdoc;
    bson_append_document_begin(reply, "cursor", -1, &cdoc);
    BSON_APPEND_ARRAY(&cdoc, key, batch);
    BSON_APPEND_INT64(&cdoc, "id", id);
    BSON_APPEND_UTF8(&cdoc, "ns", ns);
    bson_append_document_end(reply, &cdoc);
}

/* Runs one batch of cur (in its own read transaction, as MongoDB yields between
 * batches) into *arr (initialised here; caller destroys). *exhausted: nothing is left. */
static int run_batch(store_t *st, cursor_t *cur, int64_t max_docs, bson_t *arr, bool *exhausted,
                     ms_error_t *err) {
    batch_t b = {cur, arr, max_docs, 0, 0};
    fill_arg_t fl = {cur, &b, false};
    int rc;
    bson_init(arr);
    rc = cur->results ? fill_results(&fl, err) : store_read(st, fill_fn, &fl, err);
    *exhausted = fl.exhausted;
    return rc;
}

/* find's first batch (MongoDB's find command: run the plan until the first batch is full,
 * then register the cursor when results remain). Takes ownership of fa's parts. */
int plan_find(store_t *st, curs_reg_t *cs, find_args_t *fa, bson_t *reply, ms_error_t *err) {
    cursor_t *cur = mem_calloc_aligned(1, sizeof *cur);
    int64_t first, id = 0;
    char ns[MS_NS_BYTES_MAX + 1];
    bson_t arr;
    bool exhausted;
    int rc;
    if (!cur) {
        find_args_free(fa);
        return err_set(err, MS_ERR_INTERNAL, "out of memory");
    }
    snprintf(cur->ns, sizeof cur->ns, "%s", fa->ns);
    snprintf(ns, sizeof ns, "%s", fa->ns);
    cur->fa = *fa;
    cur->fa.ns = cur->ns;
    memset(fa, 0, sizeof *fa);
    cur->skip_left = cur->fa.skip;
    cur->limit_left = cur->fa.limit == 0 ? -1 : cur->fa.limit < 0 ? -cur->fa.limit : cur->fa.limit;
    first = cur->fa.batch_size >= 0 ? cur->fa.batch_size : MS_FIRST_BATCH_DOCS_DEFAULT;
    if (cur->fa.limit < 0 || cur->fa.single_batch) {
        /* A single batch: as many as asked (|limit| or batchSize), then the cursor closes. */
        if (cur->fa.limit < 0) first = -cur->fa.limit;
        if (first == 0) first = MS_FIRST_BATCH_DOCS_DEFAULT;
        cur->limit_left = cur->limit_left < 0 ? first
                          : (cur->limit_left < first ? cur->limit_left : first);
    }
    if ((rc = run_batch(st, cur, first, &arr, &exhausted, err)) != 0) goto out;
    if (cur->fa.single_batch || cur->fa.limit < 0) exhausted = true;
    /* The find's maxTimeMS covers the cursor's whole life of work, not its idle time:
     * what is left goes on to the getMores (MongoDB's leftover maxTimeMicros). */
    cur->timed = op_deadline_ms() > 0;
    cur->time_left_ms = op_time_left_ms(0);
    if (!exhausted) {
        if ((rc = curs_add(cs, &cur->reg, cur->ns, op_conn(), 0, false, &id, err)) != 0)
            goto out;
        cur = NULL;   /* the table's now: another thread may getMore on it at once */
    }
    append_cursor_reply(reply, "firstBatch", &arr, id, ns);
out:
    bson_destroy(&arr);
    cursor_free(cur);
    return rc;
}

/* An aggregate's cursor (MongoDB's aggregate reply): the pipeline already ran to the end;
 * its results (docs[0..n), heap bson_t from libbson, taken over with the array on
 * success and failure) go out in batches of batch_size (-1 = the default first batch)
 * now and through getMore. */
int plan_agg_cursor(curs_reg_t *cs, const char *ns, bson_t **docs, size_t n, int64_t batch_size,
                    bson_t *reply, ms_error_t *err) {
    cursor_t *cur = mem_calloc_aligned(1, sizeof *cur);
    int64_t first, id = 0;
    bson_t arr = BSON_INITIALIZER;
    bool exhausted;
    int rc;
    if (!cur) {
        for (size_t i = 0; i < n; i++) bson_destroy(docs[i]);
        free(docs);
        return err_set(err, MS_ERR_INTERNAL, "out of memory");
    }
    snprintf(cur->ns, sizeof cur->ns, "%s", ns);
    cur->fa.ns = cur->ns;
    cur->results = true;
    cur->planned = cur->sorted_ready = true;
    cur->plan.blocking_sort = true;
    cur->limit_left = -1;
    cur->sorted.v = calloc(n ? n : 1, sizeof *cur->sorted.v);
    if (!cur->sorted.v) {
        for (size_t i = 0; i < n; i++) bson_destroy(docs[i]);
        free(docs);
        cursor_free(cur);
        return err_set(err, MS_ERR_INTERNAL, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        cur->sorted.v[i].doc = docs[i];
        cur->sorted.v[i].rid = (int64_t)i;
        cur->sorted.bytes += docs[i]->len;
    }
    cur->sorted.n = cur->sorted.cap = n;
    free(docs);
    first = batch_size >= 0 ? batch_size : MS_FIRST_BATCH_DOCS_DEFAULT;
    bson_destroy(&arr);
    if ((rc = run_batch(NULL, cur, first, &arr, &exhausted, err)) != 0) goto out;
    cur->timed = op_deadline_ms() > 0;
    cur->time_left_ms = op_time_left_ms(0);
    if (!exhausted) {
        if ((rc = curs_add(cs, &cur->reg, cur->ns, op_conn(), 0, false, &id, err)) != 0)
            goto out;
        cur = NULL;
    }
    append_cursor_reply(reply, "firstBatch", &arr, id, ns);
out:
    bson_destroy(&arr);
    cursor_free(cur);
    return rc;
}

/* getMore (MongoDB's getMore command: pin the cursor, check the namespace, run one batch,
 * unpin — or dispose of it when exhausted, failed or killed meanwhile). */
int plan_get_more(store_t *st, curs_reg_t *cs, int64_t id, const char *ns, int64_t batch_size,
                  bson_t *reply, ms_error_t *err) {
    cursor_t *cur = NULL;
    curs_t *reg = NULL;
    bson_t arr = BSON_INITIALIZER;
    bool exhausted = false;
    int rc;
    /* CursorNotFound, CursorInUse, or Unauthorized for another namespace. */
    if ((rc = curs_pin(cs, id, ns, &reg, err)) != 0) goto out_unpinned;
    cur = curs_entry(reg, cursor_t, reg);
    /* MongoDB's waitAfterPinningCursorBeforeGetMoreBatch: a test holds the cursor open
     * (pinned, so neither killCursors nor the reaper frees it) at this point. */
    if ((rc = fp_eval(FP_GETMORE_AFTER_PIN, err)) != 0) {
        curs_unpin(cs, reg, true);
        goto out_unpinned;
    }
    /* This getMore runs on what the find's maxTimeMS left; expiring kills the cursor. */
    if (cur->timed) op_set_deadline_ms(time_mono_ms() + cur->time_left_ms);
    if ((rc = op_check(err)) != 0) {
        curs_unpin(cs, reg, true);
        goto out_unpinned;
    }
    bson_destroy(&arr);
    if ((rc = run_batch(st, cur, batch_size > 0 ? batch_size : -1, &arr, &exhausted, err)) == 0)
        append_cursor_reply(reply, "nextBatch", &arr, exhausted ? 0 : id, ns);
    if (cur->timed) cur->time_left_ms = op_time_left_ms(0);
    curs_unpin(cs, reg, rc != 0 || exhausted);
out_unpinned:
    bson_destroy(&arr);
    return rc;
}

/* ---- explain ------------------------------------------------------------------------ */

typedef struct explain_arg {
    find_args_t *fa;
    bool plan_stats;
    bson_t *reply;
} explain_arg_t;

int plan_count_cb(void *arg, int64_t rid, const bson_t *doc, ms_error_t *err) {
    plan_count_t *a = arg;
    (void)rid;
    (void)doc;
    (void)err;
    if (a->skip > 0) {
        a->skip--;
        return 0;
    }
    a->n++;
    return a->limit > 0 && a->n >= a->limit ? 1 : 0;
}

static int explain_fn(store_txn_t *t, void *arg, ms_error_t *err) {
    explain_arg_t *ea = arg;
    plan_query_t eq;
    store_coll_t *c = store_coll_get(t, ea->fa->ns);
    plan_t p;
    bson_t qp, es, empty = BSON_INITIALIZER;
    int rc;
    eq_from_fa(ea->fa, &eq);
    bson_append_document_begin(ea->reply, "queryPlanner", -1, &qp);
    BSON_APPEND_UTF8(&qp, "namespace", ea->fa->ns);
    BSON_APPEND_DOCUMENT(&qp, "parsedQuery", eq.filter ? eq.filter : &empty);
    if (!c) {
        bson_t wp;
        BSON_APPEND_DOCUMENT_BEGIN(&qp, "winningPlan", &wp);
        BSON_APPEND_UTF8(&wp, "stage", "EOF");
        bson_append_document_end(&qp, &wp);
        bson_append_document_end(ea->reply, &qp);
        return 0;
    }
    if ((rc = plan_choose(t, c, &eq, &p, err)) != 0) {
        bson_append_document_end(ea->reply, &qp);
        return rc;
    }
    plan_append_explain(&p, c, &eq, &qp, "winningPlan");
    {
        bson_t rej;
        BSON_APPEND_ARRAY_BEGIN(&qp, "rejectedPlans", &rej);
        bson_append_array_end(&qp, &rej);
    }
    bson_append_document_end(ea->reply, &qp);
    if (ea->plan_stats) {
        scan_pos_t pos = {0};
        plan_count_t acc = {0, eq.skip, eq.limit};
        long long t0 = time_mono_us();
        if (p.blocking_sort) {
            sorter_t so = {0};
            rc = sorter_run(t, c, &p, &eq, &pos, &so, err);
            if (rc == 0)
                for (size_t i = 0; i < so.n; i++)
                    if (plan_count_cb(&acc, 0, NULL, NULL) == 1) break;
            sorter_free(&so);
        } else {
            rc = plan_scan(t, c, &p, &eq, &pos, plan_count_cb, &acc, err);
        }
        if (rc == 0) {
            bson_append_document_begin(ea->reply, "executionStats", -1, &es);
            BSON_APPEND_BOOL(&es, "executionSuccess", true);
            BSON_APPEND_INT64(&es, "nReturned", acc.n);
            BSON_APPEND_INT64(&es, "executionTimeMillis", (time_mono_us() - t0) / 1000);
            BSON_APPEND_INT64(&es, "totalKeysExamined",
                              p.kind == PLAN_COLLSCAN ? 0 : pos.keys_examined);
            BSON_APPEND_INT64(&es, "totalDocsExamined", pos.docs_examined);
            bson_append_document_end(ea->reply, &es);
        }
        scan_pos_free(&pos);
    }
    plan_free(&p);
    return rc;
}

int plan_explain_find(store_t *st, find_args_t *fa, bool plan_stats, bson_t *reply,
                      ms_error_t *err) {
    explain_arg_t ea = {fa, plan_stats, reply};
    return store_read(st, explain_fn, &ea, err);
}
