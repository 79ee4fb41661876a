/*
 * bsonx.c — BSON helpers linked into every process (config server, shard daemons,
 * routers, shardctl): MongoDB's value comparison (BSONElement::woCompare /
 * compareElementValues), $type names, dotted-path lookup, validation of raw input
 * bytes, storability checks (storage_validation), numbers, and extended JSON.
 *
 * The comparator is written plainly from MongoDB's rules and deliberately shares no
 * code with the key encoder in keys.c: the unit tests check each against the other.
 */
#include "common/bsonx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h"

/* 2^63 as a double: the first double above every int64 (MongoDB's
 * kLongLongMaxPlusOneAsDouble). */
#define TWO_POW_63 9223372036854775808.0

int bsonx_canonical_rank(bson_type_t t) {
    switch (t) {
    case BSON_TYPE_MINKEY: return -1;
    case BSON_TYPE_EOD:
    case BSON_TYPE_UNDEFINED: return 0;
    case BSON_TYPE_NULL: return 5;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128: return 10;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: return 15;
    case BSON_TYPE_DOCUMENT: return 20;
    case BSON_TYPE_ARRAY: return 25;
    case BSON_TYPE_BINARY: return 30;
    case BSON_TYPE_OID: return 35;
    case BSON_TYPE_BOOL: return 40;
    case BSON_TYPE_DATE_TIME: return 45;
    case BSON_TYPE_TIMESTAMP: return 47;
    case BSON_TYPE_REGEX: return 50;
    case BSON_TYPE_DBPOINTER: return 55;
    case BSON_TYPE_CODE: return 60;
    case BSON_TYPE_CODEWSCOPE: return 65;
    case BSON_TYPE_MAXKEY: return 127;
    }
    /* libbson's iterator refuses unknown type bytes, so this is not reached for
     * validated input; rank it with EOO rather than abort on a stray value. */
    return 0;
}

/* ---- numbers ------------------------------------------------------------------------ */

static int cmp_i64(int64_t a, int64_t b) { return a < b ? -1 : a > b ? 1 : 0; }
static int cmp_u64(uint64_t a, uint64_t b) { return a < b ? -1 : a > b ? 1 : 0; }

/* MongoDB's compareDoubles: NaN equals NaN and is below every other number. */
static int cmp_double(double a, double b) {
    if (a < b) return -1;
    if (a > b) return 1;
    if (a == b) return 0;  /* also -0.0 == 0.0 */
    if (isnan(a)) return isnan(b) ? 0 : -1;
    return 1;
}

/* MongoDB's compareLongToDouble: exact even where int64 has more precision than double. */
static int cmp_i64_double(int64_t l, double d) {
    if (isnan(d)) return 1;
    /* Integers of magnitude <= 2^53 are exact doubles. */
    if (l >= -(INT64_C(1) << 53) && l <= (INT64_C(1) << 53)) return cmp_double((double)l, d);
    /* Doubles at or beyond +-2^63 (and +-inf) lie outside every int64. */
    if (d >= TWO_POW_63) return -1;
    if (d < -TWO_POW_63) return 1;
    /* |l| > 2^53, so a double with a fraction (|d| < 2^52) is far from l and truncating
     * it cannot change the answer; larger doubles are integers and convert exactly. */
    return cmp_i64(l, (int64_t)d);
}

static double decimal_to_double(const bson_iter_t *it) {
    bson_decimal128_t dec;
    char s[BSON_DECIMAL128_STRING];
    if (!bson_iter_decimal128(it, &dec)) return NAN;
    bson_decimal128_to_string(&dec, s);
    return strtod(s, NULL);  /* understands "NaN", "Infinity", "-Infinity", "1E+3" */
}

static int cmp_numbers(const bson_iter_t *a, const bson_iter_t *b) {
    bson_type_t ta = bson_iter_type(a), tb = bson_iter_type(b);
    bool a_int = ta == BSON_TYPE_INT32 || ta == BSON_TYPE_INT64;
    bool b_int = tb == BSON_TYPE_INT32 || tb == BSON_TYPE_INT64;
    if (a_int && b_int) return cmp_i64(bson_iter_as_int64(a), bson_iter_as_int64(b));
    double da = ta == BSON_TYPE_DECIMAL128 ? decimal_to_double(a)
                : ta == BSON_TYPE_DOUBLE   ? bson_iter_double(a)
                                           : 0.0;
    double db = tb == BSON_TYPE_DECIMAL128 ? decimal_to_double(b)
                : tb == BSON_TYPE_DOUBLE   ? bson_iter_double(b)
                                           : 0.0;
    if (a_int) return cmp_i64_double(bson_iter_as_int64(a), db);
    if (b_int) return -cmp_i64_double(bson_iter_as_int64(b), da);
    return cmp_double(da, db);
}

/* ---- strings and documents ------------------------------------------------------------ */

/* MongoDB's compareElementStringValues: bytes of the common length, then the length
 * (embedded NULs are ordinary bytes). */
static int cmp_bytes(const char *a, uint32_t alen, const char *b, uint32_t blen) {
    uint32_t n = alen < blen ? alen : blen;
    int c = n ? memcmp(a, b, n) : 0;
    if (c) return c < 0 ? -1 : 1;
    return alen < blen ? -1 : alen > blen ? 1 : 0;
}

static int sign_of(int x) { return x < 0 ? -1 : x > 0 ? 1 : 0; }

/* BSONObj::woCompare with field names: element by element; the document that ends
 * first is smaller whatever the other's next element is. */
static int cmp_doc_iters(bson_iter_t *a, bson_iter_t *b) {
    for (;;) {
        bool more_a = bson_iter_next(a), more_b = bson_iter_next(b);
        if (!more_a) return more_b ? -1 : 0;
        if (!more_b) return 1;
        int ra = bsonx_canonical_rank(bson_iter_type(a));
        int rb = bsonx_canonical_rank(bson_iter_type(b));
        if (ra != rb) return ra < rb ? -1 : 1;
        int c = strcmp(bson_iter_key(a), bson_iter_key(b));
        if (c) return sign_of(c);
        c = bsonx_compare_values(a, b);
        if (c) return c;
    }
}

static int cmp_embedded(const bson_iter_t *a, const bson_iter_t *b) {
    bson_iter_t ca, cb;
    if (!bson_iter_recurse(a, &ca) || !bson_iter_recurse(b, &cb)) return 0;
    return cmp_doc_iters(&ca, &cb);
}

static int cmp_scopes(const uint8_t *sa, uint32_t la, const uint8_t *sb, uint32_t lb) {
    bson_t da, db;
    bson_iter_t ia, ib;
    if (!bson_init_static(&da, sa, la) || !bson_init_static(&db, sb, lb)) return 0;
    if (!bson_iter_init(&ia, &da) || !bson_iter_init(&ib, &db)) return 0;
    return cmp_doc_iters(&ia, &ib);
}

int bsonx_compare_values(const bson_iter_t *a, const bson_iter_t *b) {
    bson_type_t ta = bson_iter_type(a), tb = bson_iter_type(b);
    int ra = bsonx_canonical_rank(ta), rb = bsonx_canonical_rank(tb);
    if (ra != rb) return ra < rb ? -1 : 1;

    switch (ta) {
    case BSON_TYPE_EOD:
    case BSON_TYPE_UNDEFINED:
    case BSON_TYPE_NULL:
    case BSON_TYPE_MINKEY:
    case BSON_TYPE_MAXKEY:
        return 0;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128:
        return cmp_numbers(a, b);
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        uint32_t la = 0, lb = 0;
        const char *sa = ta == BSON_TYPE_UTF8 ? bson_iter_utf8(a, &la) : bson_iter_symbol(a, &la);
        const char *sb = tb == BSON_TYPE_UTF8 ? bson_iter_utf8(b, &lb) : bson_iter_symbol(b, &lb);
        return cmp_bytes(sa, la, sb, lb);
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY:
        return cmp_embedded(a, b);
    case BSON_TYPE_BINARY: {
        /* Length first, then subtype, then bytes (MongoDB compares the declared length,
         * then memcmp from the subtype byte on). The old subtype 2 carries an inner
         * length that libbson strips; it equals the outer length less 4, so it cannot
         * decide anything once the outer lengths are equal. */
        bson_subtype_t sa, sb;
        uint32_t la, lb;
        const uint8_t *pa, *pb;
        bson_iter_binary(a, &sa, &la, &pa);
        bson_iter_binary(b, &sb, &lb, &pb);
        uint64_t oa = (uint64_t)la + (sa == BSON_SUBTYPE_BINARY_DEPRECATED ? 4 : 0);
        uint64_t ob = (uint64_t)lb + (sb == BSON_SUBTYPE_BINARY_DEPRECATED ? 4 : 0);
        if (oa != ob) return oa < ob ? -1 : 1;
        if (sa != sb) return (unsigned)sa < (unsigned)sb ? -1 : 1;
        return la ? sign_of(memcmp(pa, pb, la)) : 0;
    }
    case BSON_TYPE_OID:
        return sign_of(memcmp(bson_iter_oid(a)->bytes, bson_iter_oid(b)->bytes, 12));
    case BSON_TYPE_BOOL:
        return (int)bson_iter_bool(a) - (int)bson_iter_bool(b);
    case BSON_TYPE_DATE_TIME:
        return cmp_i64(bson_iter_date_time(a), bson_iter_date_time(b));
    case BSON_TYPE_TIMESTAMP: {
        uint32_t ta_t, ta_i, tb_t, tb_i;
        bson_iter_timestamp(a, &ta_t, &ta_i);
        bson_iter_timestamp(b, &tb_t, &tb_i);
        return cmp_u64((uint64_t)ta_t << 32 | ta_i, (uint64_t)tb_t << 32 | tb_i);
    }
    case BSON_TYPE_REGEX: {
        const char *oa, *ob;
        const char *pa = bson_iter_regex(a, &oa), *pb = bson_iter_regex(b, &ob);
        int c = strcmp(pa, pb);
        return c ? sign_of(c) : sign_of(strcmp(oa, ob));
    }
    case BSON_TYPE_DBPOINTER: {
        /* Value size first, then the raw value bytes: the name, then the ObjectId. */
        uint32_t la, lb;
        const char *ca, *cb;
        const bson_oid_t *oa, *ob;
        bson_iter_dbpointer(a, &la, &ca, &oa);
        bson_iter_dbpointer(b, &lb, &cb, &ob);
        if (la != lb) return la < lb ? -1 : 1;
        int c = la ? memcmp(ca, cb, la) : 0;
        return c ? sign_of(c) : sign_of(memcmp(oa->bytes, ob->bytes, 12));
    }
    case BSON_TYPE_CODE: {
        uint32_t la, lb;
        const char *ca = bson_iter_code(a, &la), *cb = bson_iter_code(b, &lb);
        return cmp_bytes(ca, la, cb, lb);
    }
    case BSON_TYPE_CODEWSCOPE: {
        /* The code as a string, then the scope as a document with field names. */
        uint32_t la, lb, sla, slb;
        const uint8_t *sa, *sb;
        const char *ca = bson_iter_codewscope(a, &la, &sla, &sa);
        const char *cb = bson_iter_codewscope(b, &lb, &slb, &sb);
        int c = cmp_bytes(ca, la, cb, lb);
        return c ? c : cmp_scopes(sa, sla, sb, slb);
    }
    }
    return 0;
}

int bsonx_compare_docs(const bson_t *a, const bson_t *b) {
    bson_iter_t ia, ib;
    if (!bson_iter_init(&ia, a) || !bson_iter_init(&ib, b)) return 0;
    return cmp_doc_iters(&ia, &ib);
}

/* ---- type names --------------------------------------------------------------------- */

static const struct {
    bson_type_t type;
    const char *name;
} type_names[] = {
    {BSON_TYPE_DOUBLE, "double"},       {BSON_TYPE_UTF8, "string"},
    {BSON_TYPE_DOCUMENT, "object"},     {BSON_TYPE_ARRAY, "array"},
    {BSON_TYPE_BINARY, "binData"},      {BSON_TYPE_UNDEFINED, "undefined"},
    {BSON_TYPE_OID, "objectId"},        {BSON_TYPE_BOOL, "bool"},
    {BSON_TYPE_DATE_TIME, "date"},      {BSON_TYPE_NULL, "null"},
    {BSON_TYPE_REGEX, "regex"},         {BSON_TYPE_DBPOINTER, "dbPointer"},
    {BSON_TYPE_CODE, "javascript"},     {BSON_TYPE_SYMBOL, "symbol"},
    {BSON_TYPE_CODEWSCOPE, "javascriptWithScope"},
    {BSON_TYPE_INT32, "int"},           {BSON_TYPE_TIMESTAMP, "timestamp"},
    {BSON_TYPE_INT64, "long"},          {BSON_TYPE_DECIMAL128, "decimal"},
    {BSON_TYPE_MINKEY, "minKey"},       {BSON_TYPE_MAXKEY, "maxKey"},
};

const char *bsonx_type_name(bson_type_t t) {
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
        if (type_names[i].type == t) return type_names[i].name;
    return t == BSON_TYPE_EOD ? "missing" : "unknown";
}

int bsonx_type_from_alias(const char *alias, bool *is_number) {
    if (is_number) *is_number = false;
    if (!alias) return -1;
    if (strcmp(alias, "number") == 0) {
        if (is_number) *is_number = true;
        return BSON_TYPE_EOD;
    }
    for (size_t i = 0; i < sizeof type_names / sizeof type_names[0]; i++)
        if (strcmp(type_names[i].name, alias) == 0) return (int)type_names[i].type;
    return -1;
}

/* ---- paths and numbers -------------------------------------------------------------- */

bool bsonx_find_path(const bson_t *doc, const char *dotted, bson_iter_t *out) {
    bson_iter_t it, child;
    const char *p = dotted;
    if (!doc || !dotted || !*dotted || !bson_iter_init(&it, doc)) return false;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        bool found = false;
        if (n == 0) return false;
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strncmp(k, p, n) == 0 && k[n] == '\0') {
                found = true;
                break;
            }
        }
        if (!found) return false;
        if (!dot) {
            *out = it;
            return true;
        }
        /* Embedded documents only: an array on the path ends the lookup. */
        if (bson_iter_type(&it) != BSON_TYPE_DOCUMENT || !bson_iter_recurse(&it, &child))
            return false;
        it = child;
        p = dot + 1;
    }
}

bool bsonx_is_number(const bson_iter_t *it) {
    switch (bson_iter_type(it)) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_DECIMAL128: return true;
    default: return false;
    }
}

bool bsonx_as_double(const bson_iter_t *it, double *out) {
    switch (bson_iter_type(it)) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64: *out = (double)bson_iter_as_int64(it); return true;
    case BSON_TYPE_DOUBLE: *out = bson_iter_double(it); return true;
    case BSON_TYPE_DECIMAL128: *out = decimal_to_double(it); return true;
    default: return false;
    }
}

/* Doubles (and decimals, through double) truncate toward zero; NaN and values outside
 * int64 give false, since no int64 stands for them. */
bool bsonx_as_int64(const bson_iter_t *it, int64_t *out) {
    bson_type_t t = bson_iter_type(it);
    if (t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64) {
        *out = bson_iter_as_int64(it);
        return true;
    }
    double d;
    if (!bsonx_as_double(it, &d)) return false;
    if (isnan(d) || d >= TWO_POW_63 || d < -TWO_POW_63) return false;
    *out = (int64_t)d;
    return true;
}

const char *bsonx_utf8_or(const bson_t *doc, const char *key, const char *dflt) {
    bson_iter_t it;
    if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it)) return bson_iter_utf8(&it, NULL);
    return dflt;
}

int64_t bsonx_int64_or(const bson_t *doc, const char *key, int64_t dflt) {
    bson_iter_t it;
    int64_t v;
    if (bson_iter_init_find(&it, doc, key) && bsonx_as_int64(&it, &v)) return v;
    return dflt;
}

bool bsonx_as_int64_exact(const bson_iter_t *it, int64_t *out) {
    bson_type_t t = bson_iter_type(it);
    if (t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64) {
        *out = bson_iter_as_int64(it);
        return true;
    }
    double d;
    if (!bsonx_as_double(it, &d)) return false;
    if (isnan(d) || d >= TWO_POW_63 || d < -TWO_POW_63 || trunc(d) != d) return false;
    *out = (int64_t)d;
    return true;
}

/* BSONElement::trueValue: false, 0 (any number type), null, undefined and a missing
 * element read as false; every other present value (even "" or {}) reads as true. */
bool bsonx_truthy(const bson_iter_t *it) {
    switch (bson_iter_type(it)) {
    case BSON_TYPE_EOD:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED: return false;
    case BSON_TYPE_BOOL: return bson_iter_bool(it);
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64: return bson_iter_as_int64(it) != 0;
    case BSON_TYPE_DOUBLE: return bson_iter_double(it) != 0.0;
    case BSON_TYPE_DECIMAL128: return decimal_to_double(it) != 0.0;
    default: return true;
    }
}

/* ---- depth and validation ------------------------------------------------------------- */

/* Depth of the elements under it, counting the level it is on as `level`. An empty
 * embedded document or array adds no level (MongoDB's validateDepth: "Empty subdocuments
 * do not count toward the depth of a document"). Stops descending past `cap`, so a depth
 * bomb costs at most cap stack frames: that is what keeps raw network input from
 * exhausting the stack before libbson's own (unbounded) recursive validation runs.
 * Malformed structure simply ends the walk; validation then reports it. */
static int depth_walk(bson_iter_t *it, int level, int cap) {
    int max = level;
    while (bson_iter_next(it)) {
        bson_iter_t child;
        bson_type_t t = bson_iter_type(it);
        bool has_child = false;
        if (t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) {
            has_child = bson_iter_recurse(it, &child);
        } else if (t == BSON_TYPE_CODEWSCOPE) {
            uint32_t code_len, scope_len;
            const uint8_t *scope;
            bson_iter_codewscope(it, &code_len, &scope_len, &scope);
            has_child = scope && bson_iter_init_from_data(&child, scope, scope_len);
        }
        if (!has_child) continue;
        {
            bson_iter_t probe = child;
            if (!bson_iter_next(&probe)) continue;   /* empty: no level */
        }
        if (level + 1 > cap) return cap + 1;
        int d = depth_walk(&child, level + 1, cap);
        if (d > max) max = d;
        if (max > cap) return max;
    }
    return max;
}

/* Depths beyond MS_MSG_DEPTH_MAX are reported as MS_MSG_DEPTH_MAX + 1 ("too deep"):
 * the walk stops there so that its own recursion stays bounded. */
int bsonx_depth(const bson_t *doc) {
    bson_iter_t it;
    if (!bson_iter_init(&it, doc)) return 0;
    return depth_walk(&it, 1, MS_MSG_DEPTH_MAX);
}

/* UTF-8 of every key and text value. bson_validate(BSON_VALIDATE_UTF8) in libbson 1.23
 * lets some invalid sequences through (e.g. "\xff\xfe" in a string value), and text
 * that is not UTF-8 would later make extended-JSON output fail, so the check is done
 * again here, value by value. Runs on structurally valid documents of bounded depth.
 * Also every embedded document and array must end with its 0 terminator: libbson 1.23's
 * iterator and validator walk one without it, but bson_init_static (so bson_iter_document
 * users, bson_append_iter, bson_copy_to_excluding) refuses it, and some of those paths
 * abort (BSON_ASSERT) — found by tests/fuzz/fuzz_wire.c; over NNG a find whose filter held
 * such a document killed shardd (query.c's ASSERT). */
static bool utf8_walk(bson_iter_t *it, int level) {
    while (bson_iter_next(it)) {
        const char *k = bson_iter_key(it);
        uint32_t n = 0;
        const char *s = NULL;
        bson_iter_t child;
        if (!bson_utf8_validate(k, strlen(k), false)) return false;
        switch (bson_iter_type(it)) {
        case BSON_TYPE_UTF8: s = bson_iter_utf8(it, &n); break;
        case BSON_TYPE_SYMBOL: s = bson_iter_symbol(it, &n); break;
        case BSON_TYPE_CODE: s = bson_iter_code(it, &n); break;
        case BSON_TYPE_DBPOINTER: {
            const bson_oid_t *oid;
            bson_iter_dbpointer(it, &n, &s, &oid);
            break;
        }
        case BSON_TYPE_REGEX: {
            const char *opts;
            const char *pat = bson_iter_regex(it, &opts);
            if (!bson_utf8_validate(pat, strlen(pat), false) ||
                !bson_utf8_validate(opts, strlen(opts), false))
                return false;
            break;
        }
        case BSON_TYPE_CODEWSCOPE: {
            uint32_t scope_len;
            const uint8_t *scope;
            s = bson_iter_codewscope(it, &n, &scope_len, &scope);
            if (level < MS_MSG_DEPTH_MAX + 1 &&
                bson_iter_init_from_data(&child, scope, scope_len) &&
                !utf8_walk(&child, level + 1))
                return false;
            break;
        }
        case BSON_TYPE_DOCUMENT:
        case BSON_TYPE_ARRAY: {
            bson_t view;
            if (!bsonx_view_container(it, &view)) return false;
            if (level < MS_MSG_DEPTH_MAX + 1 && bson_iter_recurse(it, &child) &&
                !utf8_walk(&child, level + 1))
                return false;
            break;
        }
        default: break;
        }
        if (s && !bson_utf8_validate(s, n, true)) return false;
    }
    return true;
}

int bsonx_view(const uint8_t *data, size_t len, bson_t *out, ms_error_t *err) {
    bson_iter_t it;
    bson_error_t berr;
    if (!data || len < 5 || len > (size_t)INT32_MAX)
        return err_set(err, MS_ERR_INVALID_BSON, "invalid BSON: length %zu", len);
    if (!bson_init_static(out, data, len))
        return err_set(err, MS_ERR_INVALID_BSON,
                       "invalid BSON: declared length or terminator does not match %zu bytes",
                       len);
    /* Bound nesting before libbson validates (its validator recurses without a limit).
     * A message may be deeper than a stored document by its envelope (MS_MSG_DEPTH_MAX),
     * so whatever was stored can be carried in a reply. */
    if (bsonx_depth(out) > MS_MSG_DEPTH_MAX)
        return err_set(err, MS_ERR_OVERFLOW,
                       "BSONObj exceeds maximum nested object depth: %d", MS_MSG_DEPTH_MAX);
    if (!bson_validate_with_error(out, BSON_VALIDATE_UTF8 | BSON_VALIDATE_UTF8_ALLOW_NULL,
                                  &berr))
        return err_set(err, MS_ERR_INVALID_BSON, "invalid BSON: %s", berr.message);
    if (!bson_iter_init(&it, out) || !utf8_walk(&it, 1))
        return err_set(err, MS_ERR_INVALID_BSON,
                       "invalid BSON: text is not valid UTF-8 or an embedded document is not "
                       "terminated");
    return 0;
}

/* Field-name rules of MongoDB's storage validation: no empty name at any level.
 * '$'-prefixed names are stored at any level, as MongoDB 5.0+ stores them (an insert's
 * {$price: 1}, a DBRef's $ref/$id/$db); a replacement of an existing document refuses them
 * at the top level (common/update.c), and _id may not hold them (check_id_names). depth
 * bounds the recursion (callers have checked the document's depth already). */
static int check_names(bson_iter_t *it, int depth, ms_error_t *err) {
    while (bson_iter_next(it)) {
        const char *k = bson_iter_key(it);
        bson_type_t t = bson_iter_type(it);
        bson_iter_t child;
        if (k[0] == '\0')
            return err_set(err, MS_ERR_EMPTY_FIELD_NAME, "An empty field name is not allowed");
        if ((t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) && depth < MS_DOC_DEPTH_MAX &&
            bson_iter_recurse(it, &child)) {
            int rc = check_names(&child, depth + 1, err);
            if (rc) return rc;
        }
    }
    return 0;
}

/* MongoDB: an _id that is a document has no '$'-prefixed field at any depth. */
static int check_id_names(bson_iter_t *it, int depth, ms_error_t *err) {
    while (bson_iter_next(it)) {
        const char *k = bson_iter_key(it);
        bson_type_t t = bson_iter_type(it);
        bson_iter_t child;
        if (k[0] == '$')
            return err_set(err, MS_ERR_DOLLAR_PREFIXED_FIELD_NAME,
                           "_id fields may not contain '$'-prefixed fields: %s is not valid for "
                           "storage.", k);
        if ((t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) && depth < MS_DOC_DEPTH_MAX &&
            bson_iter_recurse(it, &child)) {
            int rc = check_id_names(&child, depth + 1, err);
            if (rc) return rc;
        }
    }
    return 0;
}

int bsonx_check_storable(const bson_t *doc, ms_error_t *err) {
    bson_iter_t it;
    if (doc->len > MS_DOC_BYTES_MAX)
        return err_set(err, MS_ERR_BSON_OBJECT_TOO_LARGE,
                       "object to insert too large. size in bytes: %u, max size: %d", doc->len,
                       MS_DOC_BYTES_MAX);
    if (bsonx_depth(doc) > MS_DOC_DEPTH_MAX)
        return err_set(err, MS_ERR_OVERFLOW,
                       "cannot insert document because it exceeds %d levels of nesting",
                       MS_DOC_DEPTH_MAX);
    if (!bson_iter_init(&it, doc)) return err_set(err, MS_ERR_INVALID_BSON, "invalid BSON");
    int rc = check_names(&it, 1, err);
    if (rc) return rc;
    if (bson_iter_init_find(&it, doc, "_id")) {
        bson_type_t t = bson_iter_type(&it);
        bson_iter_t child;
        if (t == BSON_TYPE_ARRAY || t == BSON_TYPE_REGEX || t == BSON_TYPE_UNDEFINED)
            return err_set(err, MS_ERR_INVALID_ID_FIELD, "can't use a %s for _id",
                           bsonx_type_name(t));
        if (t == BSON_TYPE_DOCUMENT && bson_iter_recurse(&it, &child) &&
            (rc = check_id_names(&child, 2, err)) != 0)
            return rc;
    }
    return 0;
}

/* ---- extended JSON ------------------------------------------------------------------ */

char *bsonx_to_json(const bson_t *doc) { return bson_as_relaxed_extended_json(doc, NULL); }

char *bsonx_to_canonical_json(const bson_t *doc) {
    return bson_as_canonical_extended_json(doc, NULL);
}

/* Copies the elements at it into dst, naming array elements "0", "1", ... Used for
 * commands that arrive with other keys (bsonx_renumber_arrays) and for libbson 1.23's
 * JSON reader, which writes garbage keys for array elements that follow a {"$code"} or
 * {"$dbPointer"} value inside an array. The recursion is bounded by the input's depth,
 * which bsonx_view (MS_MSG_DEPTH_MAX) or the JSON reader's own limit has checked. */
static void copy_renumbering_arrays(bson_iter_t *it, bson_t *dst, bool array) {
    uint32_t i = 0;
    while (bson_iter_next(it)) {
        char idx[16];
        const char *key = bson_iter_key(it);
        bson_type_t t = bson_iter_type(it);
        bson_iter_t child;
        if (array) {
            snprintf(idx, sizeof idx, "%u", i++);
            key = idx;
        }
        if ((t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) && bson_iter_recurse(it, &child)) {
            bson_t sub;
            if (t == BSON_TYPE_DOCUMENT) bson_append_document_begin(dst, key, -1, &sub);
            else bson_append_array_begin(dst, key, -1, &sub);
            copy_renumbering_arrays(&child, &sub, t == BSON_TYPE_ARRAY);
            if (t == BSON_TYPE_DOCUMENT) bson_append_document_end(dst, &sub);
            else bson_append_array_end(dst, &sub);
        } else {
            bson_append_iter(dst, key, -1, it);
        }
    }
}

/* Length of the decimal text of i: the key bsonx_renumber_arrays gives element i. */
static int index_len(uint32_t i) {
    int n = 1;
    while (i >= 10) {
        i /= 10;
        n++;
    }
    return n;
}

/* True when key is the decimal text of i with no leading zero: "0", "1", ... "10". */
static bool key_is_index(const char *key, uint32_t i) {
    uint64_t v = 0;
    int n = 0;
    if (key[0] == '0') return key[1] == '\0' && i == 0;
    for (; key[n] >= '0' && key[n] <= '9'; n++) {
        if (n >= 10) return false;
        v = v * 10 + (uint64_t)(key[n] - '0');
    }
    return n > 0 && key[n] == '\0' && v == i;
}

/* Walks the elements at it, adding to *grow how many bytes renumbering would add (or
 * take away, as a negative number) and setting *bad at the first array key that is not
 * its index. level stops the walk where bsonx_depth would (the input was bounded
 * before). */
static void numbered_walk(bson_iter_t *it, bool array, int level, bool *bad, int64_t *grow) {
    uint32_t i = 0;
    while (bson_iter_next(it)) {
        bson_iter_t child;
        bson_type_t t = bson_iter_type(it);
        if (array) {
            const char *k = bson_iter_key(it);
            if (!key_is_index(k, i)) {
                *bad = true;
                *grow += index_len(i) - (int64_t)bson_iter_key_len(it);
            }
            i++;
        }
        if ((t == BSON_TYPE_DOCUMENT || t == BSON_TYPE_ARRAY) && level <= MS_MSG_DEPTH_MAX &&
            bson_iter_recurse(it, &child))
            numbered_walk(&child, t == BSON_TYPE_ARRAY, level + 1, bad, grow);
    }
}

bool bsonx_arrays_numbered(const bson_t *doc, int64_t *renumbered_len) {
    bson_iter_t it;
    bool bad = false;
    int64_t grow = 0;
    if (bson_iter_init(&it, doc)) numbered_walk(&it, false, 1, &bad, &grow);
    if (renumbered_len) *renumbered_len = (int64_t)doc->len + grow;
    return !bad;
}

void bsonx_renumber_arrays(const bson_t *doc, bson_t *out) {
    bson_iter_t it;
    bson_init(out);
    if (bson_iter_init(&it, doc)) copy_renumbering_arrays(&it, out, false);
}

int bsonx_from_json(const char *json, bson_t *out, ms_error_t *err) {
    bson_error_t berr;
    bson_t parsed;
    bson_iter_t it;
    if (!json) return err_set(err, MS_ERR_FAILED_TO_PARSE, "no JSON text");
    /* bson_init_from_json leaves the document destroyed when it fails. */
    if (!bson_init_from_json(&parsed, json, -1, &berr))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "bad JSON: %s", berr.message);
    bson_init(out);
    if (bson_iter_init(&it, &parsed)) copy_renumbering_arrays(&it, out, false);
    bson_destroy(&parsed);
    return 0;
}

void bsonx_append_iter(bson_t *dst, const char *key, const bson_iter_t *it) {
    bson_append_iter(dst, key, -1, it);
}

bool bsonx_view_container(const bson_iter_t *it, bson_t *out) {
    uint32_t len;
    const uint8_t *data;
    if (BSON_ITER_HOLDS_DOCUMENT(it)) bson_iter_document(it, &len, &data);
    else if (BSON_ITER_HOLDS_ARRAY(it)) bson_iter_array(it, &len, &data);
    else return false;
    return bson_init_static(out, data, len);
}
