/*
 * test_common_bounds.c — index bounds (common/bounds.c). Table rows check the shape of
 * the bounds for typical filters (points, ranges, $in, $or, hashed, compound). The
 * property test is the one that matters: for seeded random filters and documents,
 * every document the matcher accepts (shardd/query.c's rules, re-checked here through
 * its twin in this test — common tests cannot link shardd, so the matcher is driven by
 * a tiny evaluator below) must have its key inside the bounds.
 *
 * The evaluator: common tests link only libcommon, so the property test carries a small
 * reference matcher for the subset of the language the generator produces (scalars and
 * missing fields, no arrays): eq, $in, $gt/$gte/$lt/$lte, $exists, $ne, $nin, $and, $or.
 * Its rules are the type-bracketed MongoDB rules; shardd's test_shardd_query checks the
 * real matcher against the same rules.
 */
#include "common/bounds.h"

#include <math.h>
#include <stdlib.h>

#include "common/bsonx.h"
#include "tests/unit/t.h"

static bson_t *J(const char *json) {
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    if (!b) t_fail(__FILE__, __LINE__, "bad JSON %s: %s", json, e.message);
    return b ? b : bson_new();
}

static void pattern(const char *json, keys_pattern_t *p) {
    bson_t *spec = J(json);
    ms_error_t err = {0};
    if (keys_pattern_parse(spec, p, &err) != 0) t_fail(__FILE__, __LINE__, "pattern %s: %s", json, err.msg);
    bson_destroy(spec);
}

/* The key of doc under p: keys_extract per field, complemented for descending fields. */
static bool doc_key(const keys_pattern_t *p, const bson_t *doc, buf_t *key) {
    for (int i = 0; i < p->nfields; i++) {
        char spec[300];
        keys_pattern_t one;
        bson_snprintf(spec, sizeof spec, "{\"%s\": %s}", p->fields[i], p->hashed[i] ? "\"hashed\"" : "1");
        pattern(spec, &one);
        size_t from = key->len;
        int rc = keys_extract(&one, doc, NULL, key, NULL);
        keys_pattern_free(&one);
        if (rc) return false;
        if (p->dir[i] < 0) keys_invert(key, from);
    }
    return true;
}

static int bcmp_(const uint8_t *a, size_t al, const buf_t *b) {
    size_t n = al < b->len ? al : b->len;
    int c = n ? memcmp(a, b->data, n) : 0;
    if (c) return c;
    return al < b->len ? -1 : al > b->len ? 1 : 0;
}

static bool key_in(const bounds_t *b, const buf_t *key) {
    if (b->all) return true;
    for (int i = 0; i < b->n; i++) {
        int lo = bcmp_(key->data, key->len, &b->r[i].lo);
        int hi = bcmp_(key->data, key->len, &b->r[i].hi);
        if ((lo > 0 || (lo == 0 && b->r[i].lo_incl)) && (hi < 0 || (hi == 0 && b->r[i].hi_incl)))
            return true;
    }
    return false;
}

/* Ranges sorted, non-empty and disjoint. */
static bool well_formed(const bounds_t *b) {
    for (int i = 0; i < b->n; i++) {
        int c = bcmp_(b->r[i].lo.data, b->r[i].lo.len, &b->r[i].hi);
        if (c > 0 || (c == 0 && !(b->r[i].lo_incl && b->r[i].hi_incl))) return false;
        if (i > 0) {
            int d = bcmp_(b->r[i - 1].hi.data, b->r[i - 1].hi.len, &b->r[i].lo);
            if (d > 0 || (d == 0 && b->r[i - 1].hi_incl && b->r[i].lo_incl)) return false;
        }
    }
    return true;
}

static int bounds_of(const char *filter, const char *pat, int max, bounds_t *b) {
    keys_pattern_t p;
    bson_t *f = J(filter);
    ms_error_t err = {0};
    pattern(pat, &p);
    int rc = bounds_from_filter(f, &p, max, b, &err);
    bson_destroy(f);
    keys_pattern_free(&p);
    return rc;
}

/* Shapes: n ranges, points?, all? */
typedef struct srow {
    const char *filter, *pattern;
    int max;
    int n;          /* expected number of ranges (-1: do not check) */
    bool all, point;
} srow_t;

static const srow_t shapes[] = {
    {"{}", "{\"a\": 1}", 10, 1, true, false},
    {"{\"a\": 5}", "{\"a\": 1}", 10, 1, false, true},
    {"{\"a\": {\"$eq\": 5}}", "{\"a\": -1}", 10, 1, false, true},
    {"{\"a\": 5, \"b\": 1}", "{\"a\": 1}", 10, 1, false, true},
    {"{\"b\": 5}", "{\"a\": 1}", 10, 1, true, false},
    {"{\"a\": {\"$in\": [3, 1, 2, 1]}}", "{\"a\": 1}", 10, 3, false, false},
    {"{\"a\": {\"$in\": [3, 1, 2]}}", "{\"a\": 1}", 2, 1, false, false},   /* coarsened to the hull */
    {"{\"a\": {\"$in\": []}}", "{\"a\": 1}", 10, 0, false, false},           /* matches nothing */
    {"{\"a\": {\"$gt\": 5}}", "{\"a\": 1}", 10, 1, false, false},
    {"{\"a\": {\"$gt\": 5, \"$lt\": 3}}", "{\"a\": 1}", 10, 0, false, false},
    {"{\"a\": {\"$gte\": 5, \"$lte\": 5}}", "{\"a\": 1}", 10, 1, false, true},
    {"{\"a\": {\"$ne\": 5}}", "{\"a\": 1}", 10, 1, true, false},
    {"{\"a\": {\"$exists\": false}}", "{\"a\": 1}", 10, 1, false, true},
    {"{\"a\": null}", "{\"a\": 1}", 10, 1, false, true},
    {"{\"a\": {\"$gt\": null}}", "{\"a\": 1}", 10, 0, false, false},
    {"{\"a\": {\"$regex\": \"^x\"}}", "{\"a\": 1}", 10, 1, true, false},
    {"{\"a\": [1, 2]}", "{\"a\": 1}", 10, 1, true, false},
    {"{\"a\": 1, \"b\": 2}", "{\"a\": 1, \"b\": 1}", 10, 1, false, true},
    {"{\"a\": 1, \"b\": 2}", "{\"a\": 1, \"b\": -1, \"c\": 1}", 10, 1, false, false},
    {"{\"a\": {\"$in\": [1, 2]}, \"b\": {\"$in\": [3, 4]}}", "{\"a\": 1, \"b\": 1}", 10, 4, false, false},
    {"{\"a\": {\"$in\": [1, 2]}, \"b\": {\"$in\": [3, 4]}}", "{\"a\": 1, \"b\": 1}", 3, 2, false, false},
    {"{\"a\": {\"$in\": [1, 2]}, \"b\": {\"$gt\": 3}}", "{\"a\": 1, \"b\": 1}", 10, 2, false, false},
    {"{\"b\": 1}", "{\"a\": 1, \"b\": 1}", 10, 1, true, false},
    {"{\"a\": 5}", "{\"a\": \"hashed\"}", 10, 1, false, true},
    {"{\"a\": {\"$in\": [5, 6]}}", "{\"a\": \"hashed\"}", 10, 2, false, false},
    {"{\"a\": {\"$gt\": 5}}", "{\"a\": \"hashed\"}", 10, 1, true, false},
    {"{\"a\": 1, \"b\": 2}", "{\"a\": 1, \"b\": \"hashed\"}", 10, 1, false, true},
    {"{\"$or\": [{\"a\": 1}, {\"a\": 2}]}", "{\"a\": 1}", 10, 2, false, false},
    {"{\"$or\": [{\"a\": 1}, {\"b\": 2}]}", "{\"a\": 1}", 10, 1, true, false},
    {"{\"a\": {\"$gt\": 0}, \"$or\": [{\"a\": -1}, {\"a\": 2}]}", "{\"a\": 1}", 10, 1, false, true},
    {"{\"$and\": [{\"a\": {\"$gte\": 1}}, {\"a\": {\"$lte\": 1}}]}", "{\"a\": 1}", 10, 1, false, true},
    {"{\"n.x\": 3}", "{\"n.x\": 1}", 10, 1, false, true},
};

static void test_shapes(void) {
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        bounds_t b = {0};
        int rc = bounds_of(shapes[i].filter, shapes[i].pattern, shapes[i].max, &b);
        CHECK_MSG(rc == 0, "row %zu: rc %d", i, rc);
        CHECK_MSG(b.all == shapes[i].all, "row %zu %s on %s: all %d", i, shapes[i].filter,
                  shapes[i].pattern, b.all);
        CHECK_MSG(bounds_is_point(&b) == shapes[i].point, "row %zu %s on %s: point %d", i,
                  shapes[i].filter, shapes[i].pattern, bounds_is_point(&b));
        CHECK_MSG(shapes[i].n < 0 || b.n == shapes[i].n, "row %zu %s on %s: n %d, expected %d", i,
                  shapes[i].filter, shapes[i].pattern, b.n, shapes[i].n);
        CHECK_MSG(well_formed(&b), "row %zu: ranges not sorted/disjoint", i);
        bounds_free(&b);
    }
    bounds_free(NULL);
}

/* The exact bytes: {a: 5} → encode(5); hashed {a: 5} → encode_int64(hash(5)). */
static void test_exact_points(void) {
    bounds_t b = {0};
    bson_t *v = J("{\"v\": 5}");
    bson_iter_t it;
    buf_t want = {0};
    bson_iter_init_find(&it, v, "v");
    CHECK_INT(bounds_of("{\"a\": 5.0}", "{\"a\": 1}", 10, &b), 0);
    keys_encode_value(&want, &it, NULL);
    CHECK(b.n == 1 && bcmp_(want.data, want.len, &b.r[0].lo) == 0);
    bounds_free(&b);
    buf_reset(&want);
    CHECK_INT(bounds_of("{\"a\": 5}", "{\"a\": \"hashed\"}", 10, &b), 0);
    keys_encode_int64(&want, keys_hash64(&it));
    CHECK(b.n == 1 && bcmp_(want.data, want.len, &b.r[0].lo) == 0);
    bounds_free(&b);
    buf_reset(&want);
    CHECK_INT(bounds_of("{\"a\": 5}", "{\"a\": -1}", 10, &b), 0);
    keys_encode_value(&want, &it, NULL);
    keys_invert(&want, 0);
    CHECK(b.n == 1 && bcmp_(want.data, want.len, &b.r[0].lo) == 0);
    bounds_free(&b);
    buf_free(&want);
    bson_destroy(v);
}

static void test_errors(void) {
    bounds_t b = {0};
    CHECK_INT(bounds_of("{\"$or\": 5}", "{\"a\": 1}", 10, &b), MS_ERR_BAD_VALUE);
    CHECK_INT(bounds_of("{\"$or\": [5]}", "{\"a\": 1}", 10, &b), MS_ERR_BAD_VALUE);
    CHECK_INT(bounds_of("{\"$and\": 5}", "{\"a\": 1}", 10, &b), MS_ERR_BAD_VALUE);
}

/* ---- the property test ------------------------------------------------------------ */

static uint64_t rng;
static unsigned rnd(unsigned n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* A value of mixed types, as JSON text. */
static const char *rand_value(void) {
    static const char *vals[] = {
        "0", "1", "2", "-1", "2.5", "-0.5", "{\"$numberLong\": \"2\"}", "{\"$numberDouble\": \"NaN\"}",
        "{\"$numberDouble\": \"Infinity\"}", "{\"$numberDouble\": \"-Infinity\"}", "\"\"", "\"a\"",
        "\"ab\"", "\"b\"", "null", "true", "false", "{\"x\": 1}", "{}", "{\"x\": \"a\"}",
        "{\"$date\": {\"$numberLong\": \"0\"}}", "{\"$date\": {\"$numberLong\": \"-5\"}}",
        "{\"$oid\": \"000000000000000000000001\"}", "{\"$oid\": \"ffffffffffffffffffffff00\"}",
        "{\"$minKey\": 1}", "{\"$maxKey\": 1}", "{\"$timestamp\": {\"t\": 1, \"i\": 2}}",
    };
    return vals[rnd(sizeof vals / sizeof vals[0])];
}

static const char *const fields[] = {"a", "b", "c", "n.x"};

static void rand_doc(char *out, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(out + o, cap - o, "{\"z\": [1, 2]");
    for (int f = 0; f < 3; f++)
        if (rnd(5) != 0) o += (size_t)snprintf(out + o, cap - o, ", \"%s\": %s", fields[f], rand_value());
    if (rnd(4) != 0) o += (size_t)snprintf(out + o, cap - o, ", \"n\": {\"x\": %s}", rand_value());
    snprintf(out + o, cap - o, "}");
}

static void rand_filter(char *out, size_t cap, int depth);

static void rand_pred(char *out, size_t cap) {
    static const char *const weighted[] = {"a", "a", "a", "b", "c", "n.x"};
    const char *f = weighted[rnd(6)];
    switch (rnd(12)) {
    case 0: snprintf(out, cap, "{\"%s\": %s}", f, rand_value()); break;
    case 1: snprintf(out, cap, "{\"%s\": {\"$eq\": %s}}", f, rand_value()); break;
    case 2: snprintf(out, cap, "{\"%s\": {\"$in\": [%s, %s, %s]}}", f, rand_value(), rand_value(), rand_value()); break;
    case 3: snprintf(out, cap, "{\"%s\": {\"$gt\": %s}}", f, rand_value()); break;
    case 4: snprintf(out, cap, "{\"%s\": {\"$gte\": %s, \"$lt\": %s}}", f, rand_value(), rand_value()); break;
    case 5: snprintf(out, cap, "{\"%s\": {\"$lte\": %s}}", f, rand_value()); break;
    case 6: snprintf(out, cap, "{\"%s\": {\"$exists\": %s}}", f, rnd(2) ? "true" : "false"); break;
    case 7: snprintf(out, cap, "{\"%s\": {\"$ne\": %s}}", f, rand_value()); break;
    case 8: snprintf(out, cap, "{\"%s\": {\"$nin\": [%s, %s]}}", f, rand_value(), rand_value()); break;
    case 9: snprintf(out, cap, "{\"%s\": {\"$lt\": %s}}", f, rand_value()); break;
    case 10: snprintf(out, cap, "{\"%s\": {\"$in\": []}}", f); break;
    default: snprintf(out, cap, "{\"%s\": null}", f); break;
    }
}

/* A filter: a predicate, an $and / $or of sub-filters, or two fields side by side. */
static void rand_filter(char *out, size_t cap, int depth) {
    unsigned k = depth > 1 ? 0 : rnd(4);
    char a[1024], b[1024], c[1024];
    if (k == 0) {
        rand_pred(out, cap);
        return;
    }
    rand_filter(a, sizeof a, depth + 1);
    rand_filter(b, sizeof b, depth + 1);
    if (k == 1) snprintf(out, cap, "{\"$and\": [%s, %s]}", a, b);
    else if (k == 2) {
        rand_filter(c, sizeof c, depth + 1);
        snprintf(out, cap, "{\"$or\": [%s, %s, %s]}", a, b, c);
    } else {
        /* {"a": .., "$or": [..]} — a plain predicate beside an $or */
        char p[1024];
        rand_pred(p, sizeof p);
        p[strlen(p) - 1] = '\0';
        snprintf(out, cap, "%s, \"$or\": [%s, %s]}", p, a, b);
    }
}

/* Reference matcher for the generated subset (scalars only; see the file comment). */
static bool ref_match(const bson_t *filter, const bson_t *doc);

static bool ref_cmp(const char *op, const bson_iter_t *rhs, const bson_iter_t *v) {
    bool eq = strcmp(op, "$eq") == 0, lte = strcmp(op, "$lte") == 0, gte = strcmp(op, "$gte") == 0;
    bson_type_t rt = bson_iter_type(rhs);
    if (!v) return rt == BSON_TYPE_NULL && (eq || lte || gte);
    if (bsonx_canonical_rank(bson_iter_type(v)) != bsonx_canonical_rank(rt)) {
        if (rt == BSON_TYPE_MINKEY) return op[1] == 'g';
        if (rt == BSON_TYPE_MAXKEY) return op[1] == 'l';
        return false;
    }
    bool vn = BSON_ITER_HOLDS_DOUBLE(v) && isnan(bson_iter_double(v));
    bool rn = BSON_ITER_HOLDS_DOUBLE(rhs) && isnan(bson_iter_double(rhs));
    if (vn || rn) return vn && rn && (eq || lte || gte);
    int c = bsonx_compare_values(v, rhs);
    if (eq) return c == 0;
    if (strcmp(op, "$lt") == 0) return c < 0;
    if (lte) return c <= 0;
    if (strcmp(op, "$gt") == 0) return c > 0;
    return c >= 0;
}

static bool ref_field(const char *path, const bson_iter_t *cond, const bson_t *doc) {
    bson_iter_t v;
    const bson_iter_t *vp = bsonx_find_path(doc, path, &v) ? &v : NULL;
    bson_iter_t op;
    bool opdoc = BSON_ITER_HOLDS_DOCUMENT(cond) && bson_iter_recurse(cond, &op) && bson_iter_next(&op) &&
                 bson_iter_key(&op)[0] == '$';
    if (!opdoc) return ref_cmp("$eq", cond, vp);
    bson_iter_recurse(cond, &op);
    while (bson_iter_next(&op)) {
        const char *name = bson_iter_key(&op);
        bool ok;
        if (strcmp(name, "$in") == 0 || strcmp(name, "$nin") == 0) {
            bson_iter_t el;
            ok = false;
            bson_iter_recurse(&op, &el);
            while (bson_iter_next(&el)) ok = ok || ref_cmp("$eq", &el, vp);
            if (name[1] == 'n') ok = !ok;
        } else if (strcmp(name, "$exists") == 0) {
            ok = (vp != NULL) == bsonx_truthy(&op);
        } else if (strcmp(name, "$ne") == 0) {
            ok = !ref_cmp("$eq", &op, vp);
        } else {
            ok = ref_cmp(name, &op, vp);
        }
        if (!ok) return false;
    }
    return true;
}

static bool ref_match(const bson_t *filter, const bson_t *doc) {
    bson_iter_t it;
    bson_iter_init(&it, filter);
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        if (key[0] == '$') {
            bool is_or = strcmp(key, "$or") == 0, any = false, all = true;
            bson_iter_t el;
            bson_iter_recurse(&it, &el);
            while (bson_iter_next(&el)) {
                uint32_t len;
                const uint8_t *data;
                bson_t sub;
                bson_iter_document(&el, &len, &data);
                bson_init_static(&sub, data, len);
                bool m = ref_match(&sub, doc);
                any = any || m;
                all = all && m;
            }
            if (is_or ? !any : !all) return false;
        } else if (!ref_field(key, &it, doc)) {
            return false;
        }
    }
    return true;
}

static void test_property_superset(void) {
    static const char *const patterns[] = {
        "{\"a\": 1}", "{\"a\": -1}", "{\"a\": 1, \"b\": 1}", "{\"a\": 1, \"b\": -1, \"c\": 1}",
        "{\"a\": \"hashed\"}", "{\"a\": 1, \"b\": \"hashed\"}", "{\"b\": -1, \"a\": 1}",
        "{\"n.x\": 1}", "{\"c\": -1, \"n.x\": -1}", "{\"a\": \"hashed\", \"c\": -1}",
    };
    static const int maxes[] = {1, 2, 5, 64};
    rng = t_seed("test_property_superset") | 1;
    int matched = 0, cases = 0, narrowed = 0;
    for (int round = 0; round < 2000; round++) {
        char ftxt[4096];
        rand_filter(ftxt, sizeof ftxt, 0);
        bson_t *filter = J(ftxt);
        keys_pattern_t p;
        const char *pat = patterns[rnd(sizeof patterns / sizeof patterns[0])];
        int max = maxes[rnd(4)];
        bounds_t b = {0};
        pattern(pat, &p);
        CHECK_INT(bounds_from_filter(filter, &p, max, &b, NULL), 0);
        CHECK_MSG(well_formed(&b) && b.n <= max, "bounds of %s on %s malformed (n=%d)", ftxt, pat, b.n);
        if (!b.all) narrowed++;
        for (int d = 0; d < 10; d++) {
            char dtxt[1024];
            rand_doc(dtxt, sizeof dtxt);
            bson_t *doc = J(dtxt);
            buf_t key = {0};
            cases++;
            if (ref_match(filter, doc)) {
                matched++;
                CHECK_MSG(doc_key(&p, doc, &key), "no key for %s", dtxt);
                CHECK_MSG(key_in(&b, &key), "%s matches %s but its key under %s is outside the bounds",
                          dtxt, ftxt, pat);
            }
            buf_free(&key);
            bson_destroy(doc);
        }
        bounds_free(&b);
        keys_pattern_free(&p);
        bson_destroy(filter);
    }
    printf("  %d cases, %d matches, %d of 2000 filters narrowed the key space\n", cases, matched, narrowed);
    CHECK(matched > 500);   /* the generator must actually produce matches */
    CHECK(narrowed > 200);
}

/* Multikey: a document a: [1, 10] has keys 1 and 10 and is found when ONE of them is in
 * the bounds, although its elements satisfy different predicates. Each row names the key
 * that must be inside (the one the first predicate covers). */
static void key_of_values(const keys_pattern_t *p, const char *a, const char *b, buf_t *key) {
    char json[128];
    bson_snprintf(json, sizeof json, b ? "{\"a\": %s, \"b\": %s}" : "{\"a\": %s}", a, b);
    bson_t *d = J(json);
    buf_reset(key);
    CHECK(doc_key(p, d, key));
    bson_destroy(d);
}

static void test_multikey(void) {
    static const struct {
        const char *filter, *pattern, *a, *b;   /* (a, b): one index key of a matching document */
    } rows[] = {
        {"{\"a\": {\"$gt\": 5, \"$lt\": 3}}", "{\"a\": 1}", "10", NULL},
        {"{\"a\": {\"$gt\": 5, \"$lt\": 3}}", "{\"a\": -1}", "10", NULL},
        {"{\"a\": {\"$gt\": 5}, \"$or\": [{\"a\": {\"$lt\": 3}}]}", "{\"a\": 1}", "10", NULL},
        {"{\"$and\": [{\"a\": 1}, {\"a\": 2}]}", "{\"a\": 1}", "1", NULL},
        {"{\"a\": 1, \"b\": 1}", "{\"a\": 1, \"b\": 1}", "1", "9"},   /* parallel elements */
        {"{\"a\": {\"$lt\": 3, \"$gt\": 5}}", "{\"a\": -1}", "1", NULL},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        keys_pattern_t p;
        bson_t *f = J(rows[i].filter);
        bounds_t b = {0};
        buf_t key = {0};
        pattern(rows[i].pattern, &p);
        CHECK_INT(bounds_from_filter_multikey(f, &p, 10, &b, NULL), 0);
        key_of_values(&p, rows[i].a, rows[i].b, &key);
        CHECK_MSG(key_in(&b, &key), "multikey row %zu: key (%s, %s) outside", i, rows[i].a, rows[i].b ? rows[i].b : "-");
        CHECK(well_formed(&b));
        bounds_free(&b);
        bounds_free(&(bounds_t){0});
        buf_free(&key);
        keys_pattern_free(&p);
        bson_destroy(f);
    }
    /* A single equality still gives a tight bound. */
    bounds_t b = {0};
    keys_pattern_t p;
    bson_t *f = J("{\"a\": 5}");
    pattern("{\"a\": 1}", &p);
    CHECK_INT(bounds_from_filter_multikey(f, &p, 10, &b, NULL), 0);
    CHECK(bounds_is_point(&b));
    bounds_free(&b);
    keys_pattern_free(&p);
    bson_destroy(f);
}

T_MAIN(T_CASE(test_shapes), T_CASE(test_multikey), T_CASE(test_exact_points), T_CASE(test_errors),
       T_CASE(test_property_superset))
