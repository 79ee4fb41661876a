/*
 * bounds.c — index bounds from a query filter (MongoDB's IndexBoundsBuilder in
 * miniature). The shard's planner uses them to scan one index range instead of the whole
 * collection, and the router to send a query only to the chunks (hence shards) it can
 * touch, so the one rule that matters is: the bounds are a SUPERSET of the keys of the
 * documents the filter matches. Anything not understood widens the bounds, never narrows.
 *
 * Steps, as MongoDB takes them:
 *  1. For every field of the key pattern, intersect the intervals of the predicates on
 *     exactly that path in the filter's top-level AND ($eq, $in, $gt.., $exists:false,
 *     null) — an "ordered interval list" over the field's encoded values (keys.h).
 *     Comparisons are type-bracketed: {$gt: 5} covers numbers only, up to +Infinity.
 *  2. Hashed fields keep only equality points, hashed; a descending field's list is
 *     reversed and byte-complemented (keys_invert).
 *  3. Compound keys "explode": a run of point fields gives the cross product of points,
 *     the first non-point field gives ranges, and later fields span MinKey..MaxKey.
 *  4. Each $or is the union of its branches' bounds, intersected with the rest of the AND.
 * Lists longer than max_ranges collapse into their hull (coarser, still a superset).
 *
 * Assumption (written in bounds.h): a key holds no arrays (shard keys; indexes whose
 * documents have no arrays on the indexed paths). For a multikey index MongoDB may not
 * intersect two ranges on one field; these bounds do.
 */
#include "common/bounds.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"

/* ---- byte ranges ------------------------------------------------------------------- */

static int bytes_cmp(const buf_t *a, const buf_t *b) {
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->data, b->data, n) : 0;
    if (c) return c;
    return a->len < b->len ? -1 : a->len > b->len ? 1 : 0;
}

static void buf_copy(buf_t *dst, const buf_t *src) {
    buf_init(dst);
    buf_put(dst, src->data, src->len);
}

static void range_free(bounds_range_t *r) {
    buf_free(&r->lo);
    buf_free(&r->hi);
}

/* An empty range: lo above hi, or one point that is not included at both ends. */
static bool range_is_empty(const bounds_range_t *r) {
    int c = bytes_cmp(&r->lo, &r->hi);
    return c > 0 || (c == 0 && !(r->lo_incl && r->hi_incl));
}

static void list_push(bounds_t *l, const buf_t *lo, bool lo_incl, const buf_t *hi, bool hi_incl) {
    l->r = bson_realloc(l->r, sizeof *l->r * (size_t)(l->n + 1));
    bounds_range_t *r = &l->r[l->n++];
    buf_copy(&r->lo, lo);
    buf_copy(&r->hi, hi);
    r->lo_incl = lo_incl;
    r->hi_incl = hi_incl;
}

static void list_clear(bounds_t *l) {
    for (int i = 0; i < l->n; i++) range_free(&l->r[i]);
    bson_free(l->r);
    l->r = NULL;
    l->n = 0;
    l->all = false;
}

void bounds_free(bounds_t *b) {
    if (b) list_clear(b);
}

/* Lower ends in order: smaller bytes first; at equal bytes the inclusive end first. */
static int lo_cmp(const void *pa, const void *pb) {
    const bounds_range_t *a = pa, *b = pb;
    int c = bytes_cmp(&a->lo, &b->lo);
    if (c) return c;
    return (int)b->lo_incl - (int)a->lo_incl;
}

/* Sorts, drops empty ranges and merges ranges that overlap or touch. */
static void list_normalise(bounds_t *l) {
    int w = 0;
    for (int i = 0; i < l->n; i++) {
        if (range_is_empty(&l->r[i])) range_free(&l->r[i]);
        else l->r[w++] = l->r[i];
    }
    l->n = w;
    if (l->n == 0) return;
    qsort(l->r, (size_t)l->n, sizeof *l->r, lo_cmp);
    w = 0;
    for (int i = 1; i < l->n; i++) {
        bounds_range_t *a = &l->r[w], *b = &l->r[i];
        int c = bytes_cmp(&b->lo, &a->hi);
        if (c < 0 || (c == 0 && (a->hi_incl || b->lo_incl))) {
            int h = bytes_cmp(&b->hi, &a->hi);
            if (h > 0 || (h == 0 && b->hi_incl)) {
                buf_free(&a->hi);
                a->hi = b->hi;
                buf_init(&b->hi);
                a->hi_incl = b->hi_incl;
            }
            range_free(b);
        } else {
            l->r[++w] = *b;
        }
    }
    l->n = w + 1;
}

/* One range from the first lower end to the last upper end (l normalised, n >= 1). */
static void list_hull(bounds_t *l) {
    if (l->n <= 1) return;
    bounds_range_t *first = &l->r[0], *last = &l->r[l->n - 1];
    buf_free(&first->hi);
    first->hi = last->hi;
    buf_init(&last->hi);
    first->hi_incl = last->hi_incl;
    for (int i = 1; i < l->n; i++) range_free(&l->r[i]);
    l->n = 1;
}

/* a ∩ b of two normalised lists into *out (normalised). */
static void list_intersect(const bounds_t *a, const bounds_t *b, bounds_t *out) {
    bounds_t res = {0};
    int i = 0, j = 0;
    while (i < a->n && j < b->n) {
        const bounds_range_t *x = &a->r[i], *y = &b->r[j];
        const bounds_range_t *lo = lo_cmp(x, y) >= 0 ? x : y;   /* the later start */
        int h = bytes_cmp(&x->hi, &y->hi);
        const bounds_range_t *hi = (h < 0 || (h == 0 && !x->hi_incl)) ? x : y;   /* earlier end */
        list_push(&res, &lo->lo, lo->lo_incl, &hi->hi, hi->hi_incl);
        if (hi == x) i++;
        else j++;
    }
    list_normalise(&res);
    *out = res;
}

static void list_append(bounds_t *dst, bounds_t *src) {
    for (int i = 0; i < src->n; i++) list_push(dst, &src->r[i].lo, src->r[i].lo_incl,
                                                &src->r[i].hi, src->r[i].hi_incl);
}

/* ---- encoded values ---------------------------------------------------------------- */

/* Encodes one BSON value (ascending); false when keys.h refuses it (decimal128). */
static bool enc_value(const bson_iter_t *it, buf_t *out) {
    buf_init(out);
    if (keys_encode_value(out, it, NULL) == 0) return true;
    buf_free(out);
    return false;
}

static bool enc_bson_value(const bson_value_t *v, buf_t *out) {
    bson_t tmp = BSON_INITIALIZER;
    bson_iter_t it;
    bson_append_value(&tmp, "v", 1, v);
    bool ok = bson_iter_init_find(&it, &tmp, "v") && enc_value(&it, out);
    bson_destroy(&tmp);
    return ok;
}

static void list_all(bounds_t *l) {
    buf_t lo = {0}, hi = {0};
    keys_encode_minkey(&lo);
    keys_encode_maxkey(&hi);
    list_push(l, &lo, true, &hi, true);
    buf_free(&lo);
    buf_free(&hi);
}

static void list_point(bounds_t *l, const buf_t *p) {
    list_push(l, p, true, p, true);
}

/* The smallest and largest value of v's type bracket (MongoDB's type-bracketed
 * comparisons). *hi_incl = false when hi is the first value of the next bracket.
 * False for brackets not handled here (the caller then leaves the field unbounded). */
static bool type_bracket(const bson_iter_t *v, buf_t *lo, buf_t *hi, bool *hi_incl) {
    bson_value_t a = {0}, b = {0};
    *hi_incl = true;
    switch (bson_iter_type(v)) {
    case BSON_TYPE_DOUBLE: case BSON_TYPE_INT32: case BSON_TYPE_INT64:
        a.value_type = b.value_type = BSON_TYPE_DOUBLE;
        a.value.v_double = -INFINITY;   /* NaN sorts below, but no comparison matches NaN */
        b.value.v_double = INFINITY;
        break;
    case BSON_TYPE_UTF8: case BSON_TYPE_SYMBOL:
        a.value_type = BSON_TYPE_UTF8;
        a.value.v_utf8.str = "";
        b.value_type = BSON_TYPE_DOCUMENT;   /* {} starts the next bracket */
        b.value.v_doc.data = (uint8_t *)"\x05\x00\x00\x00\x00";
        b.value.v_doc.data_len = 5;
        *hi_incl = false;
        break;
    case BSON_TYPE_DOCUMENT:
        a.value_type = BSON_TYPE_DOCUMENT;
        a.value.v_doc.data = (uint8_t *)"\x05\x00\x00\x00\x00";
        a.value.v_doc.data_len = 5;
        b.value_type = BSON_TYPE_ARRAY;      /* [] starts the next bracket */
        b.value.v_doc.data = (uint8_t *)"\x05\x00\x00\x00\x00";
        b.value.v_doc.data_len = 5;
        *hi_incl = false;
        break;
    case BSON_TYPE_OID:
        a.value_type = b.value_type = BSON_TYPE_OID;
        memset(a.value.v_oid.bytes, 0x00, 12);
        memset(b.value.v_oid.bytes, 0xff, 12);
        break;
    case BSON_TYPE_BOOL:
        a.value_type = b.value_type = BSON_TYPE_BOOL;
        a.value.v_bool = false;
        b.value.v_bool = true;
        break;
    case BSON_TYPE_DATE_TIME:
        a.value_type = b.value_type = BSON_TYPE_DATE_TIME;
        a.value.v_datetime = INT64_MIN;
        b.value.v_datetime = INT64_MAX;
        break;
    case BSON_TYPE_TIMESTAMP:
        a.value_type = b.value_type = BSON_TYPE_TIMESTAMP;
        b.value.v_timestamp.timestamp = UINT32_MAX;
        b.value.v_timestamp.increment = UINT32_MAX;
        break;
    default:
        return false;
    }
    if (!enc_bson_value(&a, lo)) return false;
    if (!enc_bson_value(&b, hi)) {
        buf_free(lo);
        return false;
    }
    return true;
}

static bool is_nan_value(const bson_iter_t *v) {
    return BSON_ITER_HOLDS_DOUBLE(v) && isnan(bson_iter_double(v));
}

/* ---- one field: the interval list of one predicate --------------------------------- */

/* {f: v} / {$eq: v}: one point. Arrays, regexes and unencodable values → unbounded. */
static void pred_eq(const bson_iter_t *v, bounds_t *l) {
    buf_t p;
    if (BSON_ITER_HOLDS_ARRAY(v) || BSON_ITER_HOLDS_REGEX(v) || !enc_value(v, &p)) {
        list_all(l);
        return;
    }
    list_point(l, &p);
    buf_free(&p);
}

static void pred_in(const bson_iter_t *v, bounds_t *l) {
    bson_iter_t el;
    if (!BSON_ITER_HOLDS_ARRAY(v) || !bson_iter_recurse(v, &el)) {
        list_all(l);
        return;
    }
    while (bson_iter_next(&el)) {
        bounds_t one = {0};
        pred_eq(&el, &one);
        list_append(l, &one);
        list_clear(&one);
    }
    list_normalise(l);
}

/* $gt/$gte/$lt/$lte within v's type bracket. */
static void pred_cmp(const char *op, const bson_iter_t *v, bounds_t *l) {
    bool gt = op[1] == 'g', incl = op[3] == 'e';
    buf_t val, lo, hi;
    bool hi_incl;
    if (BSON_ITER_HOLDS_NULL(v) || is_nan_value(v)) {
        if (incl) pred_eq(v, l);   /* {$gte: null} is {$eq: null}; {$gt: null} matches nothing */
        return;
    }
    if (!type_bracket(v, &lo, &hi, &hi_incl)) {
        list_all(l);
        return;
    }
    if (!enc_value(v, &val)) {
        list_all(l);
    } else if (gt) {
        list_push(l, &val, incl, &hi, hi_incl);
    } else {
        list_push(l, &lo, true, &val, incl);
    }
    buf_free(&val);
    buf_free(&lo);
    buf_free(&hi);
    list_normalise(l);
}

/* One operator of {f: {$op: v, ...}} → its interval list; unknown operators bound nothing. */
static void pred_operator(const bson_iter_t *op, bounds_t *l) {
    const char *name = bson_iter_key(op);
    if (strcmp(name, "$eq") == 0) pred_eq(op, l);
    else if (strcmp(name, "$in") == 0) pred_in(op, l);
    else if (strcmp(name, "$gt") == 0 || strcmp(name, "$gte") == 0 || strcmp(name, "$lt") == 0 ||
             strcmp(name, "$lte") == 0)
        pred_cmp(name, op, l);
    else if (strcmp(name, "$exists") == 0 && !bsonx_truthy(op)) {
        buf_t p = {0};
        keys_encode_null(&p);   /* a missing field is keyed as null */
        list_point(l, &p);
        buf_free(&p);
    } else list_all(l);
}

/* [MinKey, MaxKey]: a predicate that bounds nothing. */
static bool is_whole_field(const bounds_t *l) {
    buf_t lo = {0}, hi = {0};
    keys_encode_minkey(&lo);
    keys_encode_maxkey(&hi);
    bool whole = l->n == 1 && l->r[0].lo_incl && l->r[0].hi_incl && bytes_cmp(&lo, &l->r[0].lo) == 0 &&
                 bytes_cmp(&hi, &l->r[0].hi) == 0;
    buf_free(&lo);
    buf_free(&hi);
    return whole;
}

static bool is_operator_doc(const bson_iter_t *v) {
    bson_iter_t it;
    return BSON_ITER_HOLDS_DOCUMENT(v) && bson_iter_recurse(v, &it) && bson_iter_next(&it) &&
           bson_iter_key(&it)[0] == '$';
}

/* Per-call settings: a multikey index may only use ONE predicate per field (an array
 * [1, 10] satisfies {$gt: 5, $lt: 3} through two different elements), only its first
 * field, and no intersection of an $or with the rest (MongoDB's multikey rules, made
 * coarser: no path-level multikey information here). */
typedef struct bctx {
    const keys_pattern_t *p;
    int max_ranges;
    bool multikey;
    int npred;         /* predicates applied to the current field */
} bctx_t;

/* field ∩= the bounds of one predicate (multikey: only the first predicate counts). */
static void field_intersect(bctx_t *c, bounds_t *field, bounds_t *pred) {
    bounds_t tmp;
    if (c->multikey && c->npred++ > 0) return;
    list_intersect(field, pred, &tmp);
    list_clear(field);
    *field = tmp;
}

/* field ∩= the bounds of the value given for it in the filter. */
static void field_constrain(bctx_t *c, bounds_t *field, const bson_iter_t *value) {
    if (!is_operator_doc(value)) {
        bounds_t p = {0};
        pred_eq(value, &p);
        field_intersect(c, field, &p);
        list_clear(&p);
        return;
    }
    bson_iter_t op;
    bson_iter_recurse(value, &op);
    while (bson_iter_next(&op)) {
        bounds_t p = {0};
        pred_operator(&op, &p);
        if (p.n == 1 && is_whole_field(&p)) {   /* $ne, $exists:true...: bounds nothing */
            list_clear(&p);
            continue;
        }
        field_intersect(c, field, &p);
        list_clear(&p);
    }
}

/* Walks the AND of filter (implicit and $and) and constrains field by path. */
static void field_from_and(bctx_t *c, const bson_t *filter, const char *path, bounds_t *field) {
    bson_iter_t it;
    if (!bson_iter_init(&it, filter)) return;
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        if (strcmp(key, path) == 0) {
            field_constrain(c, field, &it);
        } else if (strcmp(key, "$and") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t el;
            bson_iter_recurse(&it, &el);
            while (bson_iter_next(&el)) {
                bson_t sub;
                if (BSON_ITER_HOLDS_DOCUMENT(&el) && bsonx_view_container(&el, &sub))
                    field_from_and(c, &sub, path, field);
            }
        }
    }
}

/* ---- from fields to keys ------------------------------------------------------------ */

/* Keeps only equality points, hashed; any range on a hashed field → unbounded. */
static void field_hash(bounds_t *field) {
    bounds_t out = {0};
    for (int i = 0; i < field->n; i++) {
        bounds_range_t *r = &field->r[i];
        bson_t dec = BSON_INITIALIZER;
        bson_iter_t it;
        size_t pos = 0;
        bool point = r->lo_incl && r->hi_incl && bytes_cmp(&r->lo, &r->hi) == 0;
        if (!point || keys_decode_value(r->lo.data, r->lo.len, &pos, &dec, "v", NULL) != 0 ||
            !bson_iter_init_find(&it, &dec, "v")) {
            bson_destroy(&dec);
            list_clear(&out);
            list_all(&out);
            break;
        }
        buf_t h = {0};
        keys_encode_int64(&h, keys_hash64(&it));
        list_point(&out, &h);
        buf_free(&h);
        bson_destroy(&dec);
    }
    list_normalise(&out);
    list_clear(field);
    *field = out;
}

/* Descending: reverse the list and complement every end, swapping lo and hi. */
static void field_invert(bounds_t *field) {
    for (int i = 0; i < field->n; i++) {
        bounds_range_t *r = &field->r[i];
        buf_t t = r->lo;
        bool ti = r->lo_incl;
        r->lo = r->hi;
        r->lo_incl = r->hi_incl;
        r->hi = t;
        r->hi_incl = ti;
        keys_invert(&r->lo, 0);
        keys_invert(&r->hi, 0);
    }
    for (int i = 0, j = field->n - 1; i < j; i++, j--) {
        bounds_range_t t = field->r[i];
        field->r[i] = field->r[j];
        field->r[j] = t;
    }
}

static bool field_all_points(const bounds_t *field) {
    for (int i = 0; i < field->n; i++)
        if (!field->r[i].lo_incl || !field->r[i].hi_incl ||
            bytes_cmp(&field->r[i].lo, &field->r[i].hi) != 0)
            return false;
    return true;
}

/* The smallest / largest encoding of field i in key order (MinKey / MaxKey, complemented
 * for a descending field). */
static void fill(const keys_pattern_t *p, int i, bool smallest, buf_t *out) {
    size_t from = out->len;
    bool min_key = (p->dir[i] > 0) == smallest;
    if (min_key) keys_encode_minkey(out);
    else keys_encode_maxkey(out);
    if (p->dir[i] < 0) keys_invert(out, from);
}

/* The interval list of field i in key order (hashed, inverted as the pattern says). */
static void field_list(bctx_t *c, const bson_t *filter, int i, bounds_t *field) {
    const keys_pattern_t *p = c->p;
    list_all(field);
    c->npred = 0;
    field_from_and(c, filter, p->fields[i], field);
    if (p->hashed[i]) field_hash(field);
    if (p->dir[i] < 0) field_invert(field);
}

/* prefix × field: each prefix range (all points so far) extended by each interval. */
static void explode(const bounds_t *prefix, const bounds_t *field, bounds_t *out) {
    for (int a = 0; a < prefix->n; a++)
        for (int b = 0; b < field->n; b++) {
            buf_t lo = {0}, hi = {0};
            buf_put(&lo, prefix->r[a].lo.data, prefix->r[a].lo.len);
            buf_put(&lo, field->r[b].lo.data, field->r[b].lo.len);
            buf_put(&hi, prefix->r[a].hi.data, prefix->r[a].hi.len);
            buf_put(&hi, field->r[b].hi.data, field->r[b].hi.len);
            list_push(out, &lo, field->r[b].lo_incl, &hi, field->r[b].hi_incl);
            buf_free(&lo);
            buf_free(&hi);
        }
}

/* Fields from..n-1 span MinKey..MaxKey: an inclusive lower end is followed by the
 * smallest fills, an exclusive one by the largest (so every key sharing that prefix stays
 * out); the upper end the other way round. */
static void add_fills(const keys_pattern_t *p, int from, bounds_t *l) {
    for (int k = 0; k < l->n; k++)
        for (int i = from; i < p->nfields; i++) {
            fill(p, i, l->r[k].lo_incl, &l->r[k].lo);
            fill(p, i, !l->r[k].hi_incl, &l->r[k].hi);
        }
}

/* Bounds of the plain predicates of filter's AND (no $or), steps 1–3. */
static void and_bounds(bctx_t *c, const bson_t *filter, bounds_t *out) {
    const keys_pattern_t *p = c->p;
    int max_ranges = c->max_ranges;
    bounds_t cur = {0};
    buf_t empty = {0};
    list_push(&cur, &empty, true, &empty, true);
    int i;
    for (i = 0; i < p->nfields; i++) {
        bounds_t field = {0}, next = {0};
        field_list(c, filter, i, &field);
        bool points = field_all_points(&field);
        if ((long)cur.n * field.n > max_ranges) {
            list_hull(&field);
            points = field_all_points(&field);
        }
        explode(&cur, &field, &next);
        list_clear(&field);
        list_clear(&cur);
        cur = next;
        if (!points || c->multikey) {   /* multikey: the first field only */
            i++;
            break;
        }
    }
    add_fills(p, i, &cur);
    list_normalise(&cur);
    *out = cur;
}

/* True when l is the one range [all MinKey.., all MaxKey..]. */
static bool is_whole_space(const bounds_t *l, const keys_pattern_t *p) {
    if (l->n != 1 || !l->r[0].lo_incl || !l->r[0].hi_incl) return false;
    buf_t lo = {0}, hi = {0};
    for (int i = 0; i < p->nfields; i++) {
        fill(p, i, true, &lo);
        fill(p, i, false, &hi);
    }
    bool whole = bytes_cmp(&lo, &l->r[0].lo) == 0 && bytes_cmp(&hi, &l->r[0].hi) == 0;
    buf_free(&lo);
    buf_free(&hi);
    return whole;
}

static int filter_bounds(bctx_t *c, const bson_t *filter, bounds_t *out, ms_error_t *err);

/* The union of an $or's branches. */
static int or_bounds(bctx_t *c, const bson_iter_t *v, bounds_t *out, ms_error_t *err) {
    bson_iter_t el;
    bounds_t u = {0};
    if (!BSON_ITER_HOLDS_ARRAY(v) || !bson_iter_recurse(v, &el))
        return err_set(err, MS_ERR_BAD_VALUE, "$or must be an array");
    while (bson_iter_next(&el)) {
        bson_t branch;
        bounds_t b = {0};
        if (!BSON_ITER_HOLDS_DOCUMENT(&el)) {
            list_clear(&u);
            return err_set(err, MS_ERR_BAD_VALUE, "$or/$and/$nor entries need to be full objects");
        }
        int rc = bsonx_view_container(&el, &branch) ? filter_bounds(c, &branch, &b, err)
                                                    : err_set(err, MS_ERR_BAD_VALUE, "bad $or entry");
        if (rc) {
            list_clear(&u);
            return rc;
        }
        list_append(&u, &b);
        list_clear(&b);
    }
    list_normalise(&u);
    if (u.n > c->max_ranges) list_hull(&u);
    *out = u;
    return 0;
}

/* Intersects *acc with the $or bounds of every $or in filter's AND (also inside $and). */
static int apply_ors(bctx_t *c, const bson_t *filter, bounds_t *acc, ms_error_t *err) {
    bson_iter_t it;
    if (!bson_iter_init(&it, filter)) return err_set(err, MS_ERR_BAD_VALUE, "invalid filter");
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        int rc = 0;
        if (strcmp(key, "$or") == 0) {
            bounds_t o = {0}, tmp;
            rc = or_bounds(c, &it, &o, err);
            if (rc) return rc;
            if (c->multikey && !is_whole_space(acc, c->p)) {   /* keep one predicate's bounds */
                list_clear(&o);
                continue;
            }
            list_intersect(acc, &o, &tmp);
            list_clear(&o);
            list_clear(acc);
            *acc = tmp;
        } else if (strcmp(key, "$and") == 0) {
            bson_iter_t el;
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &el))
                return err_set(err, MS_ERR_BAD_VALUE, "$and must be an array");
            while (rc == 0 && bson_iter_next(&el)) {
                bson_t sub;
                if (!BSON_ITER_HOLDS_DOCUMENT(&el))
                    return err_set(err, MS_ERR_BAD_VALUE, "$or/$and/$nor entries need to be full objects");
                if (bsonx_view_container(&el, &sub)) rc = apply_ors(c, &sub, acc, err);
            }
        }
        if (rc) return rc;
    }
    return 0;
}

static int filter_bounds(bctx_t *c, const bson_t *filter, bounds_t *out, ms_error_t *err) {
    bounds_t acc = {0};
    and_bounds(c, filter, &acc);
    int rc = apply_ors(c, filter, &acc, err);
    if (rc) {
        list_clear(&acc);
        return rc;
    }
    if (acc.n > c->max_ranges) list_hull(&acc);
    *out = acc;
    return 0;
}

static int bounds_build(const bson_t *filter, const keys_pattern_t *p, int max_ranges, bool multikey,
                        bounds_t *out, ms_error_t *err) {
    bounds_t res = {0};
    bctx_t c = {.p = p, .max_ranges = max_ranges < 1 ? 1 : max_ranges, .multikey = multikey};
    int rc = filter_bounds(&c, filter, &res, err);
    if (rc) return rc;
    res.all = is_whole_space(&res, p);
    *out = res;
    return 0;
}

bool bounds_is_point(const bounds_t *b) {
    return !b->all && b->n == 1 && b->r[0].lo_incl && b->r[0].hi_incl &&
           bytes_cmp(&b->r[0].lo, &b->r[0].hi) == 0;
}

int bounds_from_filter(const bson_t *filter, const keys_pattern_t *p, int max_ranges,
                       bounds_t *out, ms_error_t *err) {
    return bounds_build(filter, p, max_ranges, false, out, err);
}

int bounds_from_filter_multikey(const bson_t *filter, const keys_pattern_t *p, int max_ranges,
                                bounds_t *out, ms_error_t *err) {
    return bounds_build(filter, p, max_ranges, true, out, err);
}
