/*
 * test_common_bsonx.c — unit tests of the BSON helpers in common/bsonx.c: validation
 * of raw input (garbage, truncation, depth bombs), storability rules, extended JSON
 * round trips, $type aliases, dotted paths, numbers, truthiness and document order.
 */
#include <bson/bson.h>
#include <math.h>
#include <stdlib.h>

#include "common/bsonx.h"
#include "common/limits.h"
#include "tests/unit/t.h"

static bson_t *from_json(const char *json) {
    bson_error_t berr;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &berr);
    if (!b) t_fail(__FILE__, __LINE__, "bad test json %s: %s", json, berr.message);
    return b;
}

/* Raw bytes of `levels` documents nested inside one another ({"": {"": ... {}}}), so
 * the outer document has depth levels + 1. Each level costs 7 bytes. */
static uint8_t *depth_bomb(size_t levels, size_t *len) {
    size_t total = 5 + 7 * levels;
    uint8_t *p = calloc(1, total);
    for (size_t i = 0; i <= levels; i++) {
        uint32_t l = (uint32_t)(total - 7 * i);
        uint8_t *d = p + 6 * i;
        d[0] = (uint8_t)l;
        d[1] = (uint8_t)(l >> 8);
        d[2] = (uint8_t)(l >> 16);
        d[3] = (uint8_t)(l >> 24);
        if (i < levels) d[4] = BSON_TYPE_DOCUMENT;  /* key "" is the NUL at d[5] */
    }
    *len = total;
    return p;
}

static void test_view_valid(void) {
    bson_t *b = from_json("{\"a\": 1, \"s\": \"x\", \"d\": {\"e\": [1, 2, {\"f\": null}]}}");
    bson_t v;
    ms_error_t err = {0};
    CHECK_INT(bsonx_view(bson_get_data(b), b->len, &v, &err), 0);
    CHECK_INT(v.len, b->len);
    CHECK(bson_get_data(&v) == bson_get_data(b));  /* a view, not a copy */
    CHECK_INT(bsonx_compare_docs(&v, b), 0);
    /* Strings with embedded NULs are valid BSON. */
    bson_t n = BSON_INITIALIZER;
    bson_append_utf8(&n, "s", -1, "a\0b", 3);
    CHECK_INT(bsonx_view(bson_get_data(&n), n.len, &v, &err), 0);
    bson_destroy(&n);
    bson_destroy(b);
}

static void test_view_truncated_and_garbage(void) {
    bson_t *b = from_json("{\"a\": 1, \"s\": \"xyz\", \"d\": {\"e\": [1, 2.5, {\"f\": null}]},"
                          " \"c\": {\"$code\": \"x\", \"$scope\": {\"y\": 1}}}");
    bson_t v;
    ms_error_t err = {0};
    const uint8_t *data = bson_get_data(b);
    /* Every proper prefix is refused. */
    for (size_t cut = 0; cut < b->len; cut++) {
        memset(&err, 0, sizeof err);
        CHECK_MSG(bsonx_view(data, cut, &v, &err) == MS_ERR_INVALID_BSON, "prefix %zu accepted", cut);
        CHECK(err.msg[0] != '\0');
    }
    CHECK(bsonx_view(NULL, 0, &v, &err) != 0);
    /* Random corruption: each result is either a clean error or a document that can be
     * walked completely (checked under the sanitizers). */
    uint64_t s = t_seed("test_view_truncated_and_garbage");
    uint8_t *copy = malloc(b->len);
    int accepted = 0, refused = 0;
    for (int round = 0; round < 50000; round++) {
        memcpy(copy, data, b->len);
        int flips = 1 + (int)(s % 3);
        for (int f = 0; f < flips; f++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            copy[(s >> 33) % b->len] = (uint8_t)(s >> 17);
        }
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if (bsonx_view(copy, b->len, &v, &err) == 0) {
            accepted++;
            char *j = bsonx_to_canonical_json(&v);
            bson_free(j);
            CHECK_INT(bsonx_compare_docs(&v, &v), 0);
        } else {
            refused++;
        }
    }
    printf("  corrupted documents: %d accepted, %d refused\n", accepted, refused);
    CHECK(refused > 0);
    /* Pure garbage. */
    uint8_t junk[64];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 37 + 11);
    CHECK(bsonx_view(junk, sizeof junk, &v, &err) != 0);
    /* Invalid UTF-8 in a string. */
    bson_t u = BSON_INITIALIZER;
    bson_append_utf8(&u, "s", -1, "\xff\xfe", 2);
    CHECK_INT(bsonx_view(bson_get_data(&u), u.len, &v, &err), MS_ERR_INVALID_BSON);
    bson_destroy(&u);
    free(copy);
    bson_destroy(b);
}

static void test_view_depth_bomb(void) {
    bson_t v;
    ms_error_t err = {0};
    size_t len;
    /* depth_bomb(n) is n levels deep: its innermost document is empty and adds none. A
     * message may be as deep as MS_MSG_DEPTH_MAX (a stored document plus its envelope). */
    uint8_t *p = depth_bomb(MS_MSG_DEPTH_MAX, &len);  /* depth exactly the limit */
    CHECK_INT(bsonx_view(p, len, &v, &err), 0);
    CHECK_INT(bsonx_depth(&v), MS_MSG_DEPTH_MAX);
    free(p);
    p = depth_bomb(MS_MSG_DEPTH_MAX + 1, &len);
    CHECK_INT(bsonx_view(p, len, &v, &err), MS_ERR_OVERFLOW);
    CHECK(strstr(err.msg, "depth") != NULL);
    free(p);
    /* A million levels (7 MB): refused without deep recursion. */
    p = depth_bomb(1000000, &len);
    CHECK_INT(bsonx_view(p, len, &v, &err), MS_ERR_OVERFLOW);
    free(p);
}

static void test_depth(void) {
    bson_t *b = from_json("{}");
    CHECK_INT(bsonx_depth(b), 1);
    bson_destroy(b);
    /* Empty embedded documents and arrays add no level, as MongoDB counts. */
    b = from_json("{\"a\": 1, \"b\": {\"c\": [1, {\"d\": {}}]}, \"e\": {}}");
    CHECK_INT(bsonx_depth(b), 4);
    bson_destroy(b);
    b = from_json("{\"a\": {}, \"b\": []}");
    CHECK_INT(bsonx_depth(b), 1);
    bson_destroy(b);
    b = from_json("{\"a\": {\"b\": 1}}");
    CHECK_INT(bsonx_depth(b), 2);
    bson_destroy(b);
    b = from_json("{\"c\": {\"$code\": \"x\", \"$scope\": {\"y\": {\"z\": 1}}}}");
    CHECK_INT(bsonx_depth(b), 3);
    bson_destroy(b);
}

static void test_storable(void) {
    ms_error_t err = {0};
    static const struct {
        const char *json;
        int code;
    } cases[] = {
        {"{\"_id\": 1, \"a\": {\"b\": [1, {\"c\": 2}]}}", 0},
        {"{\"_id\": {\"x\": 1}}", 0},
        {"{\"a.b\": 1}", 0},
        {"{\"$set\": 1}", 0},                           /* top level too, as 5.0+ inserts */
        {"{\"$price\": 1, \"$id\": 2, \"$db\": 3}", 0},
        {"{\"a\": {\"$x\": 1}}", 0},                      /* nested: allowed since 5.0 */
        {"{\"a\": [{\"$x\": 1}]}", 0},
        {"{\"a\": {\"b\": {\"$ref\": 1, \"$id\": 2}}}", 0},
        {"{\"_id\": {\"$b\": 1}}", MS_ERR_DOLLAR_PREFIXED_FIELD_NAME},   /* not inside _id */
        {"{\"_id\": {\"a\": {\"$b\": 1}}}", MS_ERR_DOLLAR_PREFIXED_FIELD_NAME},
        {"{\"a\": {\"_id\": {\"$b\": 1}}}", 0},
        {"{\"\": 1}", MS_ERR_EMPTY_FIELD_NAME},
        {"{\"a\": {\"\": 1}}", MS_ERR_EMPTY_FIELD_NAME},
        {"{\"_id\": [1]}", MS_ERR_INVALID_ID_FIELD},
        {"{\"_id\": {\"$regularExpression\": {\"pattern\": \"a\", \"options\": \"\"}}}",
         MS_ERR_INVALID_ID_FIELD},
        {"{\"_id\": {\"$undefined\": true}}", MS_ERR_INVALID_ID_FIELD},
        {"{\"a\": {\"_id\": [1]}}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_t *b = from_json(cases[i].json);
        memset(&err, 0, sizeof err);
        int rc = bsonx_check_storable(b, &err);
        CHECK_MSG(rc == cases[i].code, "%s: got %d (%s), want %d", cases[i].json, rc, err.msg,
                  cases[i].code);
        bson_destroy(b);
    }
    /* Too large. */
    bson_t big = BSON_INITIALIZER;
    char *s = malloc(MS_DOC_BYTES_MAX);
    memset(s, 'x', MS_DOC_BYTES_MAX - 1);
    s[MS_DOC_BYTES_MAX - 1] = '\0';
    bson_append_utf8(&big, "s", -1, s, -1);
    CHECK_INT(bsonx_check_storable(&big, &err), MS_ERR_BSON_OBJECT_TOO_LARGE);
    bson_destroy(&big);
    free(s);
    /* Too deep: one level past the limit; the limit itself passes the depth check (and
     * then fails on the bomb's empty field names). */
    size_t len;
    uint8_t *p = depth_bomb(MS_DOC_DEPTH_MAX + 1, &len);
    bson_t deep;
    CHECK(bson_init_static(&deep, p, len));
    CHECK_INT(bsonx_check_storable(&deep, &err), MS_ERR_OVERFLOW);
    CHECK(strstr(err.msg, "100 levels of nesting") != NULL);
    free(p);
    p = depth_bomb(MS_DOC_DEPTH_MAX, &len);
    CHECK(bson_init_static(&deep, p, len));
    CHECK_INT(bsonx_check_storable(&deep, &err), MS_ERR_EMPTY_FIELD_NAME);
    free(p);
}

static void test_json(void) {
    const char *json =
        "{\"i\": 1, \"l\": {\"$numberLong\": \"5000000000\"}, \"d\": 1.5, \"s\": \"h\\u00e9\","
        " \"o\": {\"a\": [1, \"x\", null]}, \"b\": true, \"n\": null,"
        " \"oid\": {\"$oid\": \"0123456789abcdef01234567\"},"
        " \"dt\": {\"$date\": {\"$numberLong\": \"1700000000000\"}},"
        " \"ts\": {\"$timestamp\": {\"t\": 5, \"i\": 6}},"
        " \"bin\": {\"$binary\": {\"base64\": \"AQI=\", \"subType\": \"00\"}},"
        " \"re\": {\"$regularExpression\": {\"pattern\": \"^a\", \"options\": \"i\"}},"
        " \"mn\": {\"$minKey\": 1}, \"mx\": {\"$maxKey\": 1}}";
    bson_t doc, back;
    ms_error_t err = {0};
    CHECK_INT(bsonx_from_json(json, &doc, &err), 0);
    char *canon = bsonx_to_canonical_json(&doc);
    CHECK(canon != NULL && strchr(canon, '\n') == NULL);
    CHECK_INT(bsonx_from_json(canon, &back, &err), 0);
    CHECK(back.len == doc.len && memcmp(bson_get_data(&back), bson_get_data(&doc), doc.len) == 0);
    bson_destroy(&back);
    char *relaxed = bsonx_to_json(&doc);
    CHECK(relaxed != NULL && strchr(relaxed, '\n') == NULL);
    CHECK(strstr(relaxed, "\"i\" : 1,") != NULL);
    CHECK_INT(bsonx_from_json(relaxed, &back, &err), 0);
    CHECK_INT(bsonx_compare_docs(&doc, &back), 0);
    bson_destroy(&back);
    bson_free(canon);
    bson_free(relaxed);
    bson_destroy(&doc);

    CHECK_INT(bsonx_from_json("{\"a\": ", &doc, &err), MS_ERR_FAILED_TO_PARSE);
    CHECK_INT(bsonx_from_json("not json", &doc, &err), MS_ERR_FAILED_TO_PARSE);
    CHECK_INT(bsonx_from_json(NULL, &doc, &err), MS_ERR_FAILED_TO_PARSE);

    /* Arrays holding $code / $dbPointer values come out with proper "0", "1" keys. */
    CHECK_INT(bsonx_from_json("{\"g\": [1, {\"$code\": \"a\"}, 2, {\"$dbPointer\": {\"$ref\": \"c\","
                              " \"$id\": {\"$oid\": \"000000000000000000000000\"}}}, 3]}",
                              &doc, &err),
              0);
    CHECK(bson_validate(&doc, BSON_VALIDATE_UTF8, NULL));
    bson_iter_t it, c;
    CHECK(bson_iter_init_find(&it, &doc, "g") && bson_iter_recurse(&it, &c));
    int i = 0;
    while (bson_iter_next(&c)) {
        char k[16];
        snprintf(k, sizeof k, "%d", i++);
        CHECK_STR(bson_iter_key(&c), k);
    }
    CHECK_INT(i, 5);
    bson_destroy(&doc);
}

static void test_type_names(void) {
    static const bson_type_t all[] = {
        BSON_TYPE_DOUBLE,   BSON_TYPE_UTF8,      BSON_TYPE_DOCUMENT, BSON_TYPE_ARRAY,
        BSON_TYPE_BINARY,   BSON_TYPE_UNDEFINED, BSON_TYPE_OID,      BSON_TYPE_BOOL,
        BSON_TYPE_DATE_TIME, BSON_TYPE_NULL,     BSON_TYPE_REGEX,    BSON_TYPE_DBPOINTER,
        BSON_TYPE_CODE,     BSON_TYPE_SYMBOL,    BSON_TYPE_CODEWSCOPE, BSON_TYPE_INT32,
        BSON_TYPE_TIMESTAMP, BSON_TYPE_INT64,    BSON_TYPE_DECIMAL128, BSON_TYPE_MINKEY,
        BSON_TYPE_MAXKEY};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        bool num = true;
        CHECK_INT(bsonx_type_from_alias(bsonx_type_name(all[i]), &num), all[i]);
        CHECK(!num);
    }
    CHECK_STR(bsonx_type_name(BSON_TYPE_INT32), "int");
    CHECK_STR(bsonx_type_name(BSON_TYPE_CODEWSCOPE), "javascriptWithScope");
    CHECK_STR(bsonx_type_name(BSON_TYPE_OID), "objectId");
    bool num = false;
    CHECK_INT(bsonx_type_from_alias("number", &num), BSON_TYPE_EOD);
    CHECK(num);
    CHECK_INT(bsonx_type_from_alias("integer", &num), -1);
    CHECK(!num);
    CHECK_INT(bsonx_type_from_alias("", NULL), -1);
    CHECK_INT(bsonx_type_from_alias("long", NULL), BSON_TYPE_INT64);
}

static void test_ranks(void) {
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_MINKEY), -1);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_UNDEFINED), 0);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_NULL), 5);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_INT32), 10);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_DECIMAL128), 10);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_SYMBOL), 15);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_DOCUMENT), 20);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_ARRAY), 25);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_BINARY), 30);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_OID), 35);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_BOOL), 40);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_DATE_TIME), 45);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_TIMESTAMP), 47);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_REGEX), 50);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_DBPOINTER), 55);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_CODE), 60);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_CODEWSCOPE), 65);
    CHECK_INT(bsonx_canonical_rank(BSON_TYPE_MAXKEY), 127);
}

static void test_find_path(void) {
    bson_t *b = from_json("{\"a\": {\"b\": {\"c\": 7}}, \"x\": [{\"y\": 1}], \"s\": 5}");
    bson_iter_t it;
    CHECK(bsonx_find_path(b, "a.b.c", &it) && bson_iter_int32(&it) == 7);
    CHECK(bsonx_find_path(b, "a.b", &it) && bson_iter_type(&it) == BSON_TYPE_DOCUMENT);
    CHECK(bsonx_find_path(b, "s", &it));
    CHECK(!bsonx_find_path(b, "x.0.y", &it));  /* no array traversal */
    CHECK(!bsonx_find_path(b, "s.t", &it));
    CHECK(!bsonx_find_path(b, "a.b.d", &it));
    CHECK(!bsonx_find_path(b, "a..b", &it));
    CHECK(!bsonx_find_path(b, "", &it));
    CHECK(!bsonx_find_path(b, "a.", &it));
    CHECK(!bsonx_find_path(b, "ab", &it));
    bson_destroy(b);
}

static void test_numbers(void) {
    bson_t *b = from_json(
        "{\"i\": 7, \"l\": {\"$numberLong\": \"-9000000000\"}, \"d\": -2.9, \"e\": 3.0,"
        " \"nan\": {\"$numberDouble\": \"NaN\"}, \"big\": 1e19, \"dec\": {\"$numberDecimal\": \"2.5\"},"
        " \"s\": \"1\", \"t\": true, \"z\": 0.0, \"n\": null, \"str\": \"\", \"o\": {}, \"f\": false}");
    bson_iter_t it;
    int64_t v;
    double d;
#define AT(k) (bson_iter_init_find(&it, b, k) ? &it : NULL)
    CHECK(bsonx_is_number(AT("i")) && bsonx_is_number(AT("dec")) && !bsonx_is_number(AT("s")));
    CHECK(bsonx_as_int64(AT("i"), &v) && v == 7);
    CHECK(bsonx_as_int64(AT("l"), &v) && v == INT64_C(-9000000000));
    CHECK(bsonx_as_int64(AT("d"), &v) && v == -2);
    CHECK(!bsonx_as_int64(AT("nan"), &v));
    CHECK(!bsonx_as_int64(AT("big"), &v));
    CHECK(!bsonx_as_int64(AT("s"), &v));
    CHECK(bsonx_as_int64(AT("dec"), &v) && v == 2);
    CHECK(!bsonx_as_int64_exact(AT("d"), &v));
    CHECK(bsonx_as_int64_exact(AT("e"), &v) && v == 3);
    CHECK(!bsonx_as_int64_exact(AT("nan"), &v));
    CHECK(!bsonx_as_int64_exact(AT("dec"), &v));
    CHECK(bsonx_as_double(AT("dec"), &d) && d == 2.5);
    CHECK(bsonx_as_double(AT("l"), &d) && d == -9e9);
    CHECK(!bsonx_as_double(AT("t"), &d));
    CHECK(bsonx_truthy(AT("i")) && bsonx_truthy(AT("t")) && bsonx_truthy(AT("s")));
    CHECK(bsonx_truthy(AT("str")) && bsonx_truthy(AT("o")) && bsonx_truthy(AT("nan")));
    CHECK(!bsonx_truthy(AT("z")) && !bsonx_truthy(AT("n")) && !bsonx_truthy(AT("f")));
#undef AT
    bson_destroy(b);
}

static void test_compare_docs(void) {
    /* Ascending. */
    static const char *order[] = {
        "{}",
        "{\"a\": {\"$minKey\": 1}}",
        "{\"a\": 1}",
        "{\"a\": 1, \"b\": {\"$minKey\": 1}}",
        "{\"a\": 2}",
        "{\"b\": 1}",           /* same rank: field name decides */
        "{\"a\": \"s\"}",       /* higher rank beats any field name */
        "{\"a\": {\"$maxKey\": 1}}",
    };
    int n = (int)(sizeof order / sizeof order[0]);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            bson_t *a = from_json(order[i]), *b = from_json(order[j]);
            int c = bsonx_compare_docs(a, b);
            CHECK_MSG((c > 0) - (c < 0) == (i > j) - (i < j), "%s vs %s gave %d", order[i], order[j], c);
            bson_destroy(a);
            bson_destroy(b);
        }
    bson_t *a = from_json("{\"a\": 1, \"b\": [1, 2.0]}");
    bson_t *b = from_json("{\"a\": 1.0, \"b\": [{\"$numberLong\": \"1\"}, 2]}");
    CHECK_INT(bsonx_compare_docs(a, b), 0);
    bson_destroy(a);
    bson_destroy(b);
}

static void test_append_iter(void) {
    bson_t *src = from_json("{\"x\": {\"y\": [1, 2]}}");
    bson_t dst = BSON_INITIALIZER;
    bson_iter_t it;
    CHECK(bson_iter_init_find(&it, src, "x"));
    bsonx_append_iter(&dst, "z", &it);
    char *j = bsonx_to_json(&dst);
    CHECK_STR(j, "{ \"z\" : { \"y\" : [ 1, 2 ] } }");
    bson_free(j);
    bson_destroy(&dst);
    bson_destroy(src);
}

/* Arrays keyed other than "0", "1", ... (legal on the wire): detected at any depth, with
 * the length renumbering gives, and renumbered with values and order kept. */
static void test_renumber_arrays(void) {
    struct {
        const char *keys[3];
        int n;
        bool numbered;
    } cases[] = {
        {{"0", "1", "2"}, 3, true}, {{"a", "b"}, 2, false}, {{"1"}, 1, false},
        {{"0", "01"}, 2, false},    {{"00"}, 1, false},     {{""}, 1, false},
        {{"0", "2"}, 2, false},     {{"0", "1x"}, 2, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bson_t doc = BSON_INITIALIZER, outer, arr, out;
        /* {d: {arr: [...], n: 7}}: the array one level down. */
        bson_append_document_begin(&doc, "d", -1, &outer);
        bson_append_array_begin(&outer, "arr", -1, &arr);
        for (int i = 0; i < cases[c].n; i++) BSON_APPEND_INT32(&arr, cases[c].keys[i], 10 + i);
        bson_append_array_end(&outer, &arr);
        BSON_APPEND_INT32(&outer, "n", 7);
        bson_append_document_end(&doc, &outer);
        int64_t len = -1;
        CHECK_MSG(bsonx_arrays_numbered(&doc, &len) == cases[c].numbered, "case %zu", c);
        bsonx_renumber_arrays(&doc, &out);
        CHECK_MSG(len == (int64_t)out.len, "case %zu: predicted %lld, got %u", c, (long long)len,
                  out.len);
        CHECK(bsonx_arrays_numbered(&out, NULL));
        char *j = bsonx_to_json(&out);
        const char *want[] = {"{ \"d\" : { \"arr\" : [ 10 ], \"n\" : 7 } }",
                              "{ \"d\" : { \"arr\" : [ 10, 11 ], \"n\" : 7 } }",
                              "{ \"d\" : { \"arr\" : [ 10, 11, 12 ], \"n\" : 7 } }"};
        CHECK_STR(j, want[cases[c].n - 1]);
        bson_free(j);
        bson_destroy(&out);
        bson_destroy(&doc);
    }
}

T_MAIN(T_CASE(test_view_valid), T_CASE(test_view_truncated_and_garbage),
       T_CASE(test_view_depth_bomb), T_CASE(test_depth), T_CASE(test_storable), T_CASE(test_json),
       T_CASE(test_type_names), T_CASE(test_ranks), T_CASE(test_find_path), T_CASE(test_numbers),
       T_CASE(test_compare_docs), T_CASE(test_append_iter),
       T_CASE(test_renumber_arrays))
