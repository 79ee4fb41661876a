/*
 * test_common_expr.c — the aggregation expression engine (common/expr.c): a table of
 * (expression, document, expected value or MongoDB error code) rows covering field paths,
 * variables, every operator, MongoDB's numeric promotion (int32 → int64 → double) and the
 * errors for wrong types, arity and unknown operators. Runs in `make test`.
 */
#include "common/expr.h"

#include <bson/bson.h>

#include "common/bsonx.h"
#include "common/errors.h"
#include "tests/unit/t.h"

typedef struct erow {
    const char *e;      /* {"e": <expression>} ("%op" keys for "$op") */
    const char *doc;
    const char *want;   /* {"r": <value>}, {} for missing; NULL: error `code` */
    int code;
} erow_t;

#define D "{\"_id\": 1, \"a\": 5, \"b\": 2.5, \"s\": \"x\", \"n\": null, \"arr\": [1, 2, 3], " \
          "\"sub\": {\"c\": 7, \"d\": {\"e\": \"deep\"}}, \"docs\": [{\"v\": 1}, {\"w\": 2}, {\"v\": 3}]}"

static const erow_t rows[] = {
    /* literals, paths, variables */
    {"{\"e\": 3}", D, "{\"r\": 3}", 0},
    {"{\"e\": \"plain\"}", D, "{\"r\": \"plain\"}", 0},
    {"{\"e\": \"$a\"}", D, "{\"r\": 5}", 0},
    {"{\"e\": \"$sub.d.e\"}", D, "{\"r\": \"deep\"}", 0},
    {"{\"e\": \"$nope\"}", D, "{}", 0},                                  /* missing */
    {"{\"e\": \"$docs.v\"}", D, "{\"r\": [1, 3]}", 0},                   /* arrays map */
    {"{\"e\": \"$$ROOT.a\"}", D, "{\"r\": 5}", 0},
    {"{\"e\": \"$$CURRENT.sub.c\"}", D, "{\"r\": 7}", 0},
    {"{\"e\": \"$$REMOVE\"}", D, "{}", 0},
    {"{\"e\": \"$$nope\"}", D, NULL, MS_ERR_LOC_17276},
    {"{\"e\": \"$\"}", D, NULL, MS_ERR_LOC_40352},
    {"{\"e\": \"$a.$b\"}", D, NULL, MS_ERR_LOC_16410},
    {"{\"e\": {\"%literal\": \"$a\"}}", D, "{\"r\": \"$a\"}", 0},
    {"{\"e\": {\"x\": \"$a\", \"y\": \"$nope\"}}", D, "{\"r\": {\"x\": 5}}", 0},  /* missing left out */
    {"{\"e\": [\"$a\", \"$nope\"]}", D, "{\"r\": [5, null]}", 0},
    /* arithmetic and promotion */
    {"{\"e\": {\"%add\": [1, 2]}}", D, "{\"r\": 3}", 0},
    {"{\"e\": {\"%add\": [2147483647, 1]}}", D, "{\"r\": {\"$numberLong\": \"2147483648\"}}", 0},
    {"{\"e\": {\"%add\": [{\"$numberLong\": \"9223372036854775807\"}, 1]}}", D,
     "{\"r\": 9223372036854775808.0}", 0},
    {"{\"e\": {\"%add\": [1, 2.5]}}", D, "{\"r\": 3.5}", 0},
    {"{\"e\": {\"%add\": [\"$a\", \"$b\", 1]}}", D, "{\"r\": 8.5}", 0},
    {"{\"e\": {\"%add\": [1, null]}}", D, "{\"r\": null}", 0},
    {"{\"e\": {\"%add\": [1, \"$nope\"]}}", D, "{\"r\": null}", 0},
    {"{\"e\": {\"%add\": [1, \"x\"]}}", D, NULL, MS_ERR_LOC_16554},
    {"{\"e\": {\"%add\": [1, {\"$numberDecimal\": \"1\"}]}}", D, NULL, MS_ERR_NOT_IMPLEMENTED},
    {"{\"e\": {\"%subtract\": [10, 3]}}", D, "{\"r\": 7}", 0},
    {"{\"e\": {\"%subtract\": [{\"$numberLong\": \"-9223372036854775807\"}, 10]}}", D,
     "{\"r\": -9223372036854775817.0}", 0},
    {"{\"e\": {\"%subtract\": [1, \"s\"]}}", D, NULL, MS_ERR_LOC_16556},
    {"{\"e\": {\"%subtract\": [1]}}", D, NULL, MS_ERR_LOC_16020},
    {"{\"e\": {\"%multiply\": [\"$a\", 3]}}", D, "{\"r\": 15}", 0},
    {"{\"e\": {\"%multiply\": [65536, 65536]}}", D, "{\"r\": {\"$numberLong\": \"4294967296\"}}", 0},
    {"{\"e\": {\"%multiply\": [2, true]}}", D, NULL, MS_ERR_LOC_16555},
    {"{\"e\": {\"%divide\": [10, 4]}}", D, "{\"r\": 2.5}", 0},
    {"{\"e\": {\"%divide\": [10, 5]}}", D, "{\"r\": 2.0}", 0},                  /* always double */
    {"{\"e\": {\"%divide\": [1, 0]}}", D, NULL, MS_ERR_BAD_VALUE},
    {"{\"e\": {\"%divide\": [1, \"s\"]}}", D, NULL, MS_ERR_LOC_16609},
    {"{\"e\": {\"%mod\": [10, 3]}}", D, "{\"r\": 1}", 0},
    {"{\"e\": {\"%mod\": [10.5, 3]}}", D, "{\"r\": 1.5}", 0},
    {"{\"e\": {\"%mod\": [10, 0]}}", D, NULL, MS_ERR_LOC_16610},
    {"{\"e\": {\"%abs\": -4}}", D, "{\"r\": 4}", 0},
    {"{\"e\": {\"%abs\": -2147483648}}", D, "{\"r\": {\"$numberLong\": \"2147483648\"}}", 0},
    {"{\"e\": {\"%abs\": [\"s\"]}}", D, NULL, MS_ERR_LOC_28765},
    {"{\"e\": {\"%ceil\": 2.1}}", D, "{\"r\": 3.0}", 0},
    {"{\"e\": {\"%floor\": -2.1}}", D, "{\"r\": -3.0}", 0},
    {"{\"e\": {\"%floor\": 7}}", D, "{\"r\": 7}", 0},
    /* comparison (BSON order) */
    {"{\"e\": {\"%eq\": [\"$a\", 5.0]}}", D, "{\"r\": true}", 0},
    {"{\"e\": {\"%ne\": [\"$a\", 5]}}", D, "{\"r\": false}", 0},
    {"{\"e\": {\"%gt\": [\"$s\", 100]}}", D, "{\"r\": true}", 0},             /* string > number */
    {"{\"e\": {\"%lt\": [\"$nope\", null]}}", D, "{\"r\": true}", 0},         /* missing < null */
    {"{\"e\": {\"%eq\": [\"$nope\", null]}}", D, "{\"r\": false}", 0},
    {"{\"e\": {\"%gte\": [\"$arr\", [1, 2]]}}", D, "{\"r\": true}", 0},
    {"{\"e\": {\"%lte\": [2, 1]}}", D, "{\"r\": false}", 0},
    {"{\"e\": {\"%cmp\": [\"a\", \"b\"]}}", D, "{\"r\": -1}", 0},
    {"{\"e\": {\"%cmp\": [3, 1]}}", D, "{\"r\": 1}", 0},
    {"{\"e\": {\"%eq\": [1]}}", D, NULL, MS_ERR_LOC_16020},
    /* boolean */
    {"{\"e\": {\"%and\": [1, \"x\", [] ]}}", D, "{\"r\": true}", 0},
    {"{\"e\": {\"%and\": [1, 0]}}", D, "{\"r\": false}", 0},
    {"{\"e\": {\"%or\": [null, \"$nope\", false]}}", D, "{\"r\": false}", 0},
    {"{\"e\": {\"%or\": [null, 2]}}", D, "{\"r\": true}", 0},
    {"{\"e\": {\"%not\": [\"$n\"]}}", D, "{\"r\": true}", 0},
    {"{\"e\": {\"%and\": []}}", D, "{\"r\": true}", 0},
    /* conditionals */
    {"{\"e\": {\"%cond\": [{\"%gt\": [\"$a\", 3]}, \"big\", \"small\"]}}", D, "{\"r\": \"big\"}", 0},
    {"{\"e\": {\"%cond\": {\"if\": false, \"then\": 1, \"else\": 2}}}", D, "{\"r\": 2}", 0},
    {"{\"e\": {\"%cond\": {\"if\": false, \"then\": 1}}}", D, NULL, MS_ERR_LOC_17080},
    {"{\"e\": {\"%cond\": {\"if\": 1, \"then\": 1, \"else\": 2, \"x\": 3}}}", D, NULL, MS_ERR_LOC_17083},
    {"{\"e\": {\"%cond\": [1, 2]}}", D, NULL, MS_ERR_LOC_16020},
    {"{\"e\": {\"%ifNull\": [\"$nope\", \"$n\", \"dflt\"]}}", D, "{\"r\": \"dflt\"}", 0},
    {"{\"e\": {\"%ifNull\": [\"$a\", \"dflt\"]}}", D, "{\"r\": 5}", 0},
    {"{\"e\": {\"%ifNull\": [\"$a\"]}}", D, NULL, MS_ERR_LOC_16021},
    /* strings, arrays */
    {"{\"e\": {\"%concat\": [\"a\", \"$s\", \"b\"]}}", D, "{\"r\": \"axb\"}", 0},
    {"{\"e\": {\"%concat\": [\"a\", \"$nope\"]}}", D, "{\"r\": null}", 0},
    {"{\"e\": {\"%concat\": [\"a\", 1]}}", D, NULL, MS_ERR_LOC_16702},
    {"{\"e\": {\"%toString\": \"$a\"}}", D, "{\"r\": \"5\"}", 0},
    {"{\"e\": {\"%toString\": \"$b\"}}", D, "{\"r\": \"2.5\"}", 0},
    {"{\"e\": {\"%toString\": 2.0}}", D, "{\"r\": \"2\"}", 0},
    {"{\"e\": {\"%toString\": true}}", D, "{\"r\": \"true\"}", 0},
    {"{\"e\": {\"%toString\": \"$nope\"}}", D, "{\"r\": null}", 0},
    {"{\"e\": {\"%toString\": [[1]]}}", D, NULL, MS_ERR_CONVERSION_FAILURE},
    {"{\"e\": {\"%toUpper\": \"$s\"}}", D, "{\"r\": \"X\"}", 0},
    {"{\"e\": {\"%size\": \"$arr\"}}", D, "{\"r\": 3}", 0},
    {"{\"e\": {\"%size\": \"$s\"}}", D, NULL, MS_ERR_LOC_17124},
    {"{\"e\": {\"%size\": \"$nope\"}}", D, NULL, MS_ERR_LOC_17124},
    {"{\"e\": {\"%in\": [2, \"$arr\"]}}", D, "{\"r\": true}", 0},
    {"{\"e\": {\"%in\": [2, \"$s\"]}}", D, NULL, MS_ERR_LOC_40081},
    {"{\"e\": {\"%arrayElemAt\": [\"$arr\", -1]}}", D, "{\"r\": 3}", 0},
    {"{\"e\": {\"%arrayElemAt\": [\"$arr\", 9]}}", D, "{}", 0},
    {"{\"e\": {\"%arrayElemAt\": [\"$s\", 0]}}", D, NULL, MS_ERR_LOC_28689},
    /* parse errors */
    {"{\"e\": {\"%foo\": 1}}", D, NULL, MS_ERR_INVALID_PIPELINE_OPERATOR},
    {"{\"e\": {\"%add\": [1], \"x\": 1}}", D, NULL, MS_ERR_LOC_15983},
    {"{\"e\": {\"x\": {\"%bar\": []}}}", D, NULL, MS_ERR_INVALID_PIPELINE_OPERATOR},
};

static void test_expr_table(void) {
    int n = (int)(sizeof rows / sizeof rows[0]);
    for (int i = 0; i < n; i++) {
        bson_t wrap, doc, got = BSON_INITIALIZER, want;
        bson_iter_t it;
        expr_t *e = NULL;
        bson_value_t v;
        ms_error_t err = {0};
        int rc;
        if (!t_json(rows[i].e, &wrap)) continue;
        t_json(rows[i].doc, &doc);
        bson_iter_init_find(&it, &wrap, "e");
        rc = expr_parse(&it, NULL, &e, &err);
        if (rc == 0) rc = expr_eval(e, &doc, NULL, &v, &err);
        if (!rows[i].want) {
            CHECK_MSG(rc == rows[i].code, "row %d: %s gave rc %d (%s), expected %d", i, rows[i].e,
                      rc, err.msg, rows[i].code);
        } else if (rc != 0) {
            t_fail(__FILE__, __LINE__, "row %d: %s failed: %d %s", i, rows[i].e, rc, err.msg);
        } else {
            expr_value_append(&got, "r", &v);
            bson_value_destroy(&v);
            t_json(rows[i].want, &want);
            char *g = bsonx_to_canonical_json(&got);
            CHECK_MSG(bson_equal(&got, &want), "row %d: %s gave %s, expected %s", i, rows[i].e,
                      g, rows[i].want);
            bson_free(g);
            bson_destroy(&want);
        }
        bson_destroy(&got);
        expr_free(e);
        bson_destroy(&wrap);
        bson_destroy(&doc);
    }
}

/* `let` variables: defined in order, usable in later ones and in expressions; bad names. */
static void test_expr_let(void) {
    bson_t let, wrap, doc = BSON_INITIALIZER;
    bson_iter_t it;
    expr_vars_t *vars = NULL;
    expr_t *e = NULL;
    bson_value_t v;
    ms_error_t err = {0};
    t_json("{\"x\": 2, \"y\": {\"%add\": [\"$$x\", 1]}, \"o\": {\"k\": 9}}", &let);
    CHECK_INT(expr_vars_from_let(&let, &vars, &err), 0);
    t_json("{\"e\": {\"%multiply\": [\"$$y\", \"$$o.k\"]}}", &wrap);
    bson_iter_init_find(&it, &wrap, "e");
    CHECK_INT(expr_parse(&it, vars, &e, &err), 0);
    if (e) {
        CHECK_INT(expr_eval(e, &doc, vars, &v, &err), 0);
        CHECK(v.value_type == BSON_TYPE_INT32 && v.value.v_int32 == 27);
    }
    expr_free(e);
    expr_vars_free(vars);
    bson_destroy(&let);
    bson_destroy(&wrap);
    t_json("{\"Bad\": 1}", &let);
    CHECK_INT(expr_vars_from_let(&let, &vars, &err), MS_ERR_FAILED_TO_PARSE);
    bson_destroy(&let);
    bson_destroy(&doc);
}

/* Values: truthiness and the comparison order used by $group keys and $sort. */
static void test_expr_values(void) {
    bson_value_t a = {0}, b = {0};
    a.value_type = BSON_TYPE_INT32;
    a.value.v_int32 = 1;
    b.value_type = BSON_TYPE_DOUBLE;
    b.value.v_double = 1.0;
    CHECK(expr_value_cmp(&a, &b) == 0);
    b.value_type = BSON_TYPE_NULL;
    CHECK(expr_value_cmp(&a, &b) > 0);
    a.value_type = BSON_TYPE_EOD;
    CHECK(expr_value_cmp(&a, &b) < 0);          /* missing below null */
    CHECK(!expr_value_truthy(&a));
    CHECK(!expr_value_truthy(&b));
    a.value_type = BSON_TYPE_INT64;
    a.value.v_int64 = 0;
    CHECK(!expr_value_truthy(&a));
    a.value.v_int64 = -3;
    CHECK(expr_value_truthy(&a));
}

/* Serialisation gives back an expression that parses to the same thing. */
static void test_expr_roundtrip(void) {
    bson_t wrap, out = BSON_INITIALIZER, doc;
    bson_iter_t it;
    expr_t *e = NULL, *e2 = NULL;
    bson_value_t v1, v2;
    ms_error_t err = {0};
    t_json("{\"e\": {\"%cond\": {\"if\": {\"%gt\": [\"$a\", 1]}, \"then\": {\"x\": \"$$ROOT.a\"}, "
           "\"else\": {\"%literal\": \"$lit\"}}}}", &wrap);
    t_json("{\"a\": 3}", &doc);
    bson_iter_init_find(&it, &wrap, "e");
    CHECK_INT(expr_parse(&it, NULL, &e, &err), 0);
    if (e) expr_append(e, &out, "e");
    bson_iter_init_find(&it, &out, "e");
    CHECK_INT(expr_parse(&it, NULL, &e2, &err), 0);
    if (e && e2) {
        CHECK_INT(expr_eval(e, &doc, NULL, &v1, &err), 0);
        CHECK_INT(expr_eval(e2, &doc, NULL, &v2, &err), 0);
        CHECK(expr_value_cmp(&v1, &v2) == 0);
        bson_value_destroy(&v1);
        bson_value_destroy(&v2);
    }
    expr_free(e);
    expr_free(e2);
    bson_destroy(&wrap);
    bson_destroy(&out);
    bson_destroy(&doc);
}

T_MAIN(T_CASE(test_expr_table), T_CASE(test_expr_let), T_CASE(test_expr_values),
       T_CASE(test_expr_roundtrip))
