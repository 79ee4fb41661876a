/*
 * test_shardd_project.c — projections (shardd/project.c): a table of (projection,
 * document, expected result or error) rows from MongoDB's documented rules: inclusion,
 * exclusion, the _id rules, dotted paths through documents and arrays, and the errors
 * for mixing, collisions and unsupported operators. Runs in `make test`.
 */
#include "common/project.h"

#include <bson/bson.h>

#include "tests/unit/t.h"

typedef struct prow {
    const char *spec, *doc;
    const char *result;   /* NULL: compile must fail with msg */
    const char *msg;
} prow_t;

static const prow_t rows[] = {
    {"{}", "{\"_id\": 1, \"a\": 1}", "{\"_id\": 1, \"a\": 1}", NULL},
    {"{\"a\": 1}", "{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"_id\": 1, \"a\": 1}", NULL},     /* _id by default */
    {"{\"a\": 1, \"_id\": 0}", "{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"a\": 1}", NULL},    /* allowed in inclusion */
    {"{\"a\": true}", "{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"_id\": 1, \"a\": 1}", NULL},
    {"{\"a\": 1}", "{\"b\": 2, \"a\": 1, \"_id\": 1}", "{\"a\": 1, \"_id\": 1}", NULL},   /* document order kept */
    {"{\"b\": 1, \"a\": 1}", "{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"_id\": 1, \"a\": 1, \"b\": 2}", NULL},
    {"{\"z\": 1}", "{\"_id\": 1, \"a\": 1}", "{\"_id\": 1}", NULL},                          /* missing: omitted */
    {"{\"_id\": 1}", "{\"_id\": 1, \"a\": 1}", "{\"_id\": 1}", NULL},
    {"{\"_id\": 0}", "{\"_id\": 1, \"a\": 1}", "{\"a\": 1}", NULL},                          /* exclusion of _id only */
    {"{\"a\": 0}", "{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"_id\": 1, \"b\": 2}", NULL},
    {"{\"a\": 0, \"_id\": 0}", "{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"b\": 2}", NULL},
    {"{\"a\": false, \"b\": 0}", "{\"_id\": 1, \"a\": 1, \"b\": 2, \"c\": 3}", "{\"_id\": 1, \"c\": 3}", NULL},
    {"{\"a\": 0, \"_id\": 1}", "{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"_id\": 1, \"b\": 2}", NULL},  /* _id: 1 in exclusion */
    {"{\"a.b\": 1}", "{\"_id\": 1, \"a\": {\"b\": 1, \"c\": 2}}", "{\"_id\": 1, \"a\": {\"b\": 1}}", NULL},
    {"{\"a.b\": 1}", "{\"_id\": 1, \"a\": {\"c\": 2}}", "{\"_id\": 1, \"a\": {}}", NULL},        /* empty doc kept */
    {"{\"a.b\": 1}", "{\"_id\": 1, \"a\": 5}", "{\"_id\": 1}", NULL},
    {"{\"a.b\": 1}", "{\"_id\": 1, \"a\": [{\"b\": 1, \"c\": 2}, {\"c\": 3}, 5]}", "{\"_id\": 1, \"a\": [{\"b\": 1}, {}]}", NULL},
    {"{\"a.b\": 1, \"a.c\": 1}", "{\"_id\": 1, \"a\": {\"d\": 0, \"c\": 2, \"b\": 1}}", "{\"_id\": 1, \"a\": {\"c\": 2, \"b\": 1}}", NULL},
    {"{\"a.b.c\": 1}", "{\"_id\": 1, \"a\": {\"b\": {\"c\": 1, \"d\": 2}, \"x\": 1}}", "{\"_id\": 1, \"a\": {\"b\": {\"c\": 1}}}", NULL},
    {"{\"a.b\": 0}", "{\"_id\": 1, \"a\": {\"b\": 1, \"c\": 2}}", "{\"_id\": 1, \"a\": {\"c\": 2}}", NULL},
    {"{\"a.b\": 0}", "{\"_id\": 1, \"a\": [{\"b\": 1, \"c\": 2}, 5]}", "{\"_id\": 1, \"a\": [{\"c\": 2}, 5]}", NULL},
    {"{\"a.b\": 0}", "{\"_id\": 1, \"a\": 5}", "{\"_id\": 1, \"a\": 5}", NULL},
    {"{\"a.b\": 1}", "{\"_id\": 1, \"a\": [[{\"b\": 1, \"c\": 1}]]}", "{\"_id\": 1, \"a\": [[{\"b\": 1}]]}", NULL},
    {"{\"a\": 1}", "{\"_id\": 1, \"a\": [1, 2]}", "{\"_id\": 1, \"a\": [1, 2]}", NULL},
    {"{\"a\": 5}", "{\"_id\": 1, \"a\": 1}", "{\"_id\": 1, \"a\": 1}", NULL},                /* any non-zero number */
    {"{\"a\": 1}", "{}", "{}", NULL},
    {"{\"_id.x\": 1}", "{\"_id\": {\"x\": 1, \"y\": 2}}", "{\"_id\": {\"x\": 1}}", NULL},
    /* errors */
    {"{\"a\": 1, \"b\": 0}", "{}", NULL, "Cannot do exclusion on field b in inclusion projection"},
    {"{\"a\": 0, \"b\": 1}", "{}", NULL, "Cannot do inclusion on field b in exclusion projection"},
    {"{\"a\": 1, \"a.b\": 1}", "{}", NULL, "Path collision at a.b"},
    {"{\"a.b\": 1, \"a\": 1}", "{}", NULL, "Path collision at a"},
    {"{\"a\": {\"$slice\": 2}}", "{}", NULL, "$slice projection is not supported"},
    {"{\"a\": {\"$elemMatch\": {\"b\": 1}}}", "{}", NULL, "$elemMatch projection is not supported"},
    {"{\"a\": \"x\"}", "{}", NULL, "projection values other than 0, 1, true and false are not supported"},
    {"{\"a..b\": 1}", "{}", NULL, "FieldPath field names may not be empty strings."},
};


static void test_projection_table(void) {
    int n = (int)(sizeof rows / sizeof rows[0]);
    for (int i = 0; i < n; i++) {
        bson_t spec, doc, out, want;
        projection_t *p = NULL;
        ms_error_t err = {0};
        t_json(rows[i].spec, &spec);
        t_json(rows[i].doc, &doc);
        int rc = projection_compile(&spec, &p, &err);
        if (!rows[i].result) {
            CHECK_MSG(rc == MS_ERR_BAD_VALUE, "row %d: %s compiled (rc %d)", i, rows[i].spec, rc);
            CHECK_MSG(rc == 0 || strncmp(err.msg, rows[i].msg, strlen(rows[i].msg)) == 0, "row %d: message \"%s\"", i, err.msg);
        } else if (rc != 0) {
            t_fail(__FILE__, __LINE__, "row %d: %s: %s", i, rows[i].spec, err.msg);
        } else {
            CHECK_INT(projection_apply(p, &doc, &out, &err), 0);
            t_json(rows[i].result, &want);
            char *g = bson_as_relaxed_extended_json(&out, NULL);
            CHECK_MSG(bson_equal(&out, &want), "row %d: %s on %s gave %s, expected %s", i, rows[i].spec,
                      rows[i].doc, g, rows[i].result);
            bson_free(g);
            bson_destroy(&out);
            bson_destroy(&want);
        }
        projection_free(p);
        bson_destroy(&spec);
        bson_destroy(&doc);
    }
    CHECK(n >= 30);
    projection_free(NULL);
}

T_MAIN(T_CASE(test_projection_table))
