/*
 * test_common_sortspec.c — sort specs and sort keys (common/sortspec.c): parse errors,
 * the $sortKey shape, MongoDB's array / missing / empty-array rules, multi-field order,
 * and agreement between compare_docs and compare_keys. Runs in `make test`.
 */
#include "common/sortspec.h"

#include <stdlib.h>

#include "tests/unit/t.h"

static bson_t *J(const char *json) {
    bson_error_t e;
    bson_t *b = bson_new_from_json((const uint8_t *)json, -1, &e);
    if (!b) t_fail(__FILE__, __LINE__, "bad JSON %s: %s", json, e.message);
    return b ? b : bson_new();
}

static sortspec_t *S(const char *json) {
    bson_t *spec = J(json);
    sortspec_t *s = NULL;
    ms_error_t err = {0};
    if (sortspec_compile(spec, &s, &err) != 0) t_fail(__FILE__, __LINE__, "compile %s: %s", json, err.msg);
    bson_destroy(spec);
    return s;
}

static void test_compile_errors(void) {
    const char *bad[] = {"{\"a\": 2}", "{\"a\": 0}", "{\"a\": \"x\"}", "{\"a\": {\"$meta\": \"textScore\"}}",
                         "{\"a\": 1, \"b\": true}", "{\"$a\": 1}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bson_t *spec = J(bad[i]);
        sortspec_t *s = NULL;
        ms_error_t err = {0};
        CHECK_MSG(sortspec_compile(spec, &s, &err) == MS_ERR_BAD_VALUE, "%s accepted", bad[i]);
        CHECK(s == NULL);
        bson_destroy(spec);
    }
    const char *good[] = {"{\"a\": 1}", "{\"a\": -1.0}", "{\"a\": {\"$numberLong\": \"-1\"}}", "{}"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        sortspec_t *s = S(good[i]);
        CHECK(s != NULL);
        sortspec_free(s);
    }
    sortspec_free(NULL);
}

typedef struct krow {
    const char *spec, *doc, *key;   /* key: the expected {"": ...} document as JSON */
} krow_t;

static const krow_t keys[] = {
    {"{\"a\": 1}", "{\"a\": 5}", "{\"\": 5}"},
    {"{\"a\": 1}", "{}", "{\"\": null}"},                            /* missing = null */
    {"{\"a\": 1}", "{\"a\": [3, 1, 2]}", "{\"\": 1}"},               /* ascending: smallest */
    {"{\"a\": -1}", "{\"a\": [3, 1, 2]}", "{\"\": 3}"},              /* descending: largest */
    {"{\"a\": 1}", "{\"a\": []}", "{\"\": {\"$undefined\": true}}"}, /* below null */
    {"{\"a\": 1}", "{\"a\": [\"x\", 2]}", "{\"\": 2}"},              /* numbers < strings */
    {"{\"a\": -1}", "{\"a\": [\"x\", 2]}", "{\"\": \"x\"}"},
    {"{\"a.b\": 1}", "{\"a\": {\"b\": 7}}", "{\"\": 7}"},
    {"{\"a.b\": 1}", "{\"a\": [{\"b\": 7}, {\"b\": 4}]}", "{\"\": 4}"},
    {"{\"a.b\": -1}", "{\"a\": [{\"b\": 7}, {\"b\": 4}]}", "{\"\": 7}"},
    {"{\"a.b\": 1}", "{\"a\": [{\"b\": 7}, {\"c\": 4}]}", "{\"\": null}"}, /* an element lacks b */
    {"{\"a.b\": 1}", "{\"a\": 3}", "{\"\": null}"},
    {"{\"a\": 1, \"b\": -1}", "{\"b\": \"x\", \"a\": 1}", "{\"\": 1, \"\": \"x\"}"},
    {"{\"a\": 1}", "{\"a\": [[1, 2], 3]}", "{\"\": 3}"},             /* nested array is one value */
    {"{\"a\": 1}", "{\"a\": {\"x\": 1}}", "{\"\": {\"x\": 1}}"},
};

static void test_keys(void) {
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        sortspec_t *s = S(keys[i].spec);
        bson_t *doc = J(keys[i].doc), *want = J(keys[i].key);
        bson_t holder = BSON_INITIALIZER, got;
        bson_iter_t it;
        uint32_t len;
        const uint8_t *data;
        sortspec_key(s, doc, &holder, "k");
        CHECK(bson_iter_init_find(&it, &holder, "k") && BSON_ITER_HOLDS_DOCUMENT(&it));
        bson_iter_document(&it, &len, &data);
        bson_init_static(&got, data, len);
        char *gj = bson_as_canonical_extended_json(&got, NULL);
        char *wj = bson_as_canonical_extended_json(want, NULL);
        CHECK_MSG(strcmp(gj, wj) == 0, "row %zu: key %s, expected %s", i, gj, wj);
        bson_free(gj);
        bson_free(wj);
        bson_destroy(&holder);
        bson_destroy(doc);
        bson_destroy(want);
        sortspec_free(s);
    }
}

/* docs[] must come out in exactly this order (ties kept as listed). */
typedef struct orow {
    const char *spec;
    const char *docs[6];
} orow_t;

static const orow_t orders[] = {
    {"{\"a\": 1}", {"{\"a\": []}", "{}", "{\"a\": 1}", "{\"a\": 2.5}", "{\"a\": \"s\"}", "{\"a\": {}}"}},
    {"{\"a\": -1}", {"{\"a\": true}", "{\"a\": \"z\"}", "{\"a\": \"a\"}", "{\"a\": 10}", "{\"a\": null}", NULL}},
    {"{\"a\": 1, \"b\": -1}", {"{\"a\": 1, \"b\": 3}", "{\"a\": 1, \"b\": 2}", "{\"a\": 2, \"b\": 9}", "{\"a\": 2, \"b\": 1}", NULL}},
    {"{\"a\": 1}", {"{\"a\": [0, 9]}", "{\"a\": [5]}", "{\"a\": 6}", "{\"a\": [7, 1000]}", NULL}},
    {"{\"a\": -1}", {"{\"a\": [0, 9]}", "{\"a\": [7, 1]}", "{\"a\": 6}", "{\"a\": [5]}", NULL}},
    {"{\"a\": 1}", {"{\"a\": {\"$minKey\": 1}}", "{\"a\": null}", "{\"a\": {\"$numberLong\": \"3\"}}", "{\"a\": 3.5}", "{\"a\": {\"$maxKey\": 1}}", NULL}},
};

static void test_orders(void) {
    for (size_t r = 0; r < sizeof orders / sizeof orders[0]; r++) {
        sortspec_t *s = S(orders[r].spec);
        for (int i = 0; i < 6 && orders[r].docs[i]; i++)
            for (int j = 0; j < 6 && orders[r].docs[j]; j++) {
                bson_t *a = J(orders[r].docs[i]), *b = J(orders[r].docs[j]);
                int c = sortspec_compare_docs(s, a, b);
                int want = i < j ? -1 : i > j ? 1 : 0;
                int sign = c < 0 ? -1 : c > 0 ? 1 : 0;
                CHECK_MSG(sign == want, "spec %s: %s vs %s gave %d, expected %d", orders[r].spec,
                          orders[r].docs[i], orders[r].docs[j], sign, want);
                bson_destroy(a);
                bson_destroy(b);
            }
        sortspec_free(s);
    }
}

/* Equal sort keys: an ascending sort cannot tell {} from {a: null}. */
static void test_missing_equals_null(void) {
    sortspec_t *s = S("{\"a\": 1}");
    bson_t *a = J("{}"), *b = J("{\"a\": null}");
    CHECK_INT(sortspec_compare_docs(s, a, b), 0);
    bson_destroy(a);
    bson_destroy(b);
    sortspec_free(s);
}

/* compare_keys on stored keys must agree with compare_docs (the router merges by keys). */
static void test_keys_agree_random(void) {
    uint64_t seed = t_seed("test_keys_agree_random");
    srand((unsigned)seed);
    sortspec_t *s = S("{\"a\": 1, \"b.c\": -1}");
    for (int n = 0; n < 2000; n++) {
        bson_t *d[2];
        bson_t keys_h[2], kv[2];
        for (int k = 0; k < 2; k++) {
            char json[256];
            int kind = rand() % 4;
            int v1 = rand() % 5, v2 = rand() % 5;
            if (kind == 0) snprintf(json, sizeof json, "{\"a\": %d, \"b\": {\"c\": %d}}", v1, v2);
            else if (kind == 1) snprintf(json, sizeof json, "{\"a\": [%d, %d], \"b\": [{\"c\": %d}]}", v1, v2, v2);
            else if (kind == 2) snprintf(json, sizeof json, "{\"b\": {\"c\": \"%d\"}}", v2);
            else snprintf(json, sizeof json, "{\"a\": %d.5}", v1);
            d[k] = J(json);
            bson_init(&keys_h[k]);
            sortspec_key(s, d[k], &keys_h[k], "k");
            bson_iter_t it;
            uint32_t len;
            const uint8_t *data;
            bson_iter_init_find(&it, &keys_h[k], "k");
            bson_iter_document(&it, &len, &data);
            bson_init_static(&kv[k], data, len);
        }
        int c1 = sortspec_compare_docs(s, d[0], d[1]);
        int c2 = sortspec_compare_keys(s, &kv[0], &kv[1]);
        int c3 = sortspec_compare_docs(s, d[1], d[0]);
        CHECK((c1 > 0) == (c2 > 0) && (c1 < 0) == (c2 < 0));
        CHECK((c1 > 0) == (c3 < 0));
        for (int k = 0; k < 2; k++) {
            bson_destroy(&keys_h[k]);
            bson_destroy(d[k]);
        }
    }
    sortspec_free(s);
}

static void test_spec_kept(void) {
    sortspec_t *s = S("{\"x\": -1}");
    char *j = bson_as_relaxed_extended_json(sortspec_spec(s), NULL);
    CHECK_STR(j, "{ \"x\" : -1 }");
    bson_free(j);
    sortspec_free(s);
}

T_MAIN(T_CASE(test_compile_errors), T_CASE(test_keys), T_CASE(test_orders),
       T_CASE(test_missing_equals_null), T_CASE(test_keys_agree_random), T_CASE(test_spec_kept))
