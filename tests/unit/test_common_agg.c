/*
 * test_common_agg.c — aggregation pipelines (common/agg.c): a table of (pipeline, input,
 * expected output or MongoDB error code) rows for every stage; the memory cap of $sort
 * and $group (292); and the split: the shards part run over three slices of the input,
 * then the merger part over their concatenation, must give what the whole pipeline gives
 * on one node — for every row that has an output. Runs in `make test`.
 */
#include "common/agg.h"

#include <bson/bson.h>
#include <stdlib.h>

#include "common/bsonx.h"
#include "common/errors.h"
#include "tests/unit/t.h"

typedef struct arow {
    const char *pipeline;   /* {"p": [...]} with "%stage" keys */
    const char *want;       /* {"r": [...]}; NULL: error code */
    int code;
    bool ordered;           /* compare in order (else as multisets) */
} arow_t;

/* The input of every row. */
static const char *INPUT =
    "{\"d\": ["
    "{\"_id\": 1, \"g\": \"a\", \"x\": 1, \"tags\": [\"p\", \"q\"], \"o\": {\"k\": 1}},"
    "{\"_id\": 2, \"g\": \"b\", \"x\": 2, \"tags\": [], \"o\": {\"k\": 2}},"
    "{\"_id\": 3, \"g\": \"a\", \"x\": 3, \"tags\": \"r\"},"
    "{\"_id\": 4, \"g\": \"c\", \"x\": 4.5},"
    "{\"_id\": 5, \"g\": \"b\", \"x\": \"str\", \"tags\": [\"q\"]},"
    "{\"_id\": 6, \"x\": 6, \"tags\": null}"
    "]}";

static const arow_t rows[] = {
    {"{\"p\": [{\"%match\": {\"g\": \"a\"}}]}",
     "{\"r\": [{\"_id\": 1, \"g\": \"a\", \"x\": 1, \"tags\": [\"p\", \"q\"], \"o\": {\"k\": 1}},"
     " {\"_id\": 3, \"g\": \"a\", \"x\": 3, \"tags\": \"r\"}]}", 0, false},
    {"{\"p\": [{\"%match\": {\"x\": {\"%gte\": 3}}}, {\"%project\": {\"x\": 1}}]}",
     "{\"r\": [{\"_id\": 3, \"x\": 3}, {\"_id\": 4, \"x\": 4.5}, {\"_id\": 6, \"x\": 6}]}", 0, false},
    {"{\"p\": [{\"%match\": {\"_id\": 1}}, {\"%project\": {\"_id\": 0, \"o.k\": 1, \"y\": {\"%add\": [\"$x\", 10]}}}]}",
     "{\"r\": [{\"o\": {\"k\": 1}, \"y\": 11}]}", 0, true},
    {"{\"p\": [{\"%match\": {\"_id\": 1}}, {\"%project\": {\"tags\": 0, \"o\": 0}}]}",
     "{\"r\": [{\"_id\": 1, \"g\": \"a\", \"x\": 1}]}", 0, true},
    {"{\"p\": [{\"%match\": {\"_id\": 2}}, {\"%addFields\": {\"x\": \"new\", \"z\": {\"%size\": \"$tags\"}, \"o.m\": 5}}]}",
     "{\"r\": [{\"_id\": 2, \"g\": \"b\", \"x\": \"new\", \"tags\": [], \"o\": {\"k\": 2, \"m\": 5}, \"z\": 0}]}", 0, true},
    {"{\"p\": [{\"%match\": {\"_id\": 1}}, {\"%set\": {\"g\": \"$$REMOVE\"}}, {\"%unset\": [\"tags\", \"o.k\"]}]}",
     "{\"r\": [{\"_id\": 1, \"x\": 1, \"o\": {}}]}", 0, true},
    {"{\"p\": [{\"%group\": {\"_id\": \"$g\", \"n\": {\"%sum\": 1}, \"s\": {\"%sum\": \"$x\"}, \"avg\": {\"%avg\": \"$x\"},"
     " \"mn\": {\"%min\": \"$x\"}, \"mx\": {\"%max\": \"$x\"}, \"c\": {\"%count\": {}}}}]}",
     "{\"r\": [{\"_id\": \"a\", \"n\": 2, \"s\": 4, \"avg\": 2.0, \"mn\": 1, \"mx\": 3, \"c\": 2},"
     " {\"_id\": \"b\", \"n\": 2, \"s\": 2, \"avg\": 2.0, \"mn\": 2, \"mx\": \"str\", \"c\": 2},"
     " {\"_id\": \"c\", \"n\": 1, \"s\": 4.5, \"avg\": 4.5, \"mn\": 4.5, \"mx\": 4.5, \"c\": 1},"
     " {\"_id\": null, \"n\": 1, \"s\": 6, \"avg\": 6.0, \"mn\": 6, \"mx\": 6, \"c\": 1}]}", 0, false},
    {"{\"p\": [{\"%group\": {\"_id\": null, \"all\": {\"%addToSet\": \"$g\"}}}, {\"%project\": {\"_id\": 0, \"n\": {\"%size\": \"$all\"}}}]}",
     "{\"r\": [{\"n\": 3}]}", 0, true},
    {"{\"p\": [{\"%sort\": {\"_id\": -1}}, {\"%group\": {\"_id\": {\"grp\": \"$g\"}, \"ids\": {\"%push\": \"$_id\"}}},"
     " {\"%sort\": {\"_id.grp\": 1}}]}",
     "{\"r\": [{\"_id\": {\"grp\": null}, \"ids\": [6]}, {\"_id\": {\"grp\": \"a\"}, \"ids\": [3, 1]},"
     " {\"_id\": {\"grp\": \"b\"}, \"ids\": [5, 2]}, {\"_id\": {\"grp\": \"c\"}, \"ids\": [4]}]}", 0, true},
    {"{\"p\": [{\"%sort\": {\"x\": 1}}, {\"%group\": {\"_id\": 1, \"f\": {\"%first\": \"$_id\"}, \"l\": {\"%last\": \"$_id\"}}}]}",
     "{\"r\": [{\"_id\": 1, \"f\": 1, \"l\": 5}]}", 0, true},
    {"{\"p\": [{\"%sort\": {\"x\": -1}}, {\"%skip\": 1}, {\"%limit\": 2}, {\"%project\": {\"_id\": 1}}]}",
     "{\"r\": [{\"_id\": 6}, {\"_id\": 4}]}", 0, true},
    {"{\"p\": [{\"%sort\": {\"g\": 1, \"_id\": -1}}, {\"%limit\": 3}, {\"%project\": {\"_id\": 1}}]}",
     "{\"r\": [{\"_id\": 6}, {\"_id\": 3}, {\"_id\": 1}]}", 0, true},
    {"{\"p\": [{\"%match\": {\"g\": {\"%exists\": true}}}, {\"%count\": \"total\"}]}",
     "{\"r\": [{\"total\": 5}]}", 0, true},
    {"{\"p\": [{\"%match\": {\"g\": \"zzz\"}}, {\"%count\": \"total\"}]}", "{\"r\": []}", 0, true},
    {"{\"p\": [{\"%unwind\": \"$tags\"}, {\"%project\": {\"tags\": 1}}]}",
     "{\"r\": [{\"_id\": 1, \"tags\": \"p\"}, {\"_id\": 1, \"tags\": \"q\"}, {\"_id\": 3, \"tags\": \"r\"},"
     " {\"_id\": 5, \"tags\": \"q\"}]}", 0, false},
    {"{\"p\": [{\"%unwind\": {\"path\": \"$tags\", \"includeArrayIndex\": \"i\", \"preserveNullAndEmptyArrays\": true}},"
     " {\"%project\": {\"tags\": 1, \"i\": 1}}]}",
     "{\"r\": [{\"_id\": 1, \"tags\": \"p\", \"i\": {\"$numberLong\": \"0\"}}, {\"_id\": 1, \"tags\": \"q\", \"i\": {\"$numberLong\": \"1\"}},"
     " {\"_id\": 2, \"tags\": [], \"i\": null}, {\"_id\": 3, \"tags\": \"r\", \"i\": null}, {\"_id\": 4, \"i\": null},"
     " {\"_id\": 5, \"tags\": \"q\", \"i\": {\"$numberLong\": \"0\"}}, {\"_id\": 6, \"tags\": null, \"i\": null}]}", 0, false},
    {"{\"p\": [{\"%unwind\": \"$tags\"}, {\"%sortByCount\": \"$tags\"}, {\"%limit\": 1}]}",
     "{\"r\": [{\"_id\": \"q\", \"count\": 2}]}", 0, true},
    {"{\"p\": [{\"%group\": {\"_id\": {\"%cond\": [{\"%isNumber\": \"$x\"}, \"num\", \"other\"]}, \"n\": {\"%sum\": 1}}}, {\"%sort\": {\"_id\": 1}}]}",
     "{\"r\": [{\"_id\": \"num\", \"n\": 5}, {\"_id\": \"other\", \"n\": 1}]}", 0, true},
    {"{\"p\": [{\"%limit\": 2}, {\"%group\": {\"_id\": null, \"n\": {\"%sum\": 1}}}]}",
     "{\"r\": [{\"_id\": null, \"n\": 2}]}", 0, true},
    /* errors */
    {"{\"p\": [{\"%bogus\": {}}]}", NULL, MS_ERR_LOC_40324, false},
    {"{\"p\": [{\"%match\": {}, \"%limit\": 1}]}", NULL, MS_ERR_LOC_40323, false},
    {"{\"p\": [1]}", NULL, MS_ERR_TYPE_MISMATCH, false},
    {"{\"p\": [{\"%project\": {\"a\": 1, \"b\": 0}}]}", NULL, MS_ERR_LOC_31254, false},
    {"{\"p\": [{\"%project\": {\"a\": 0, \"b\": 1}}]}", NULL, MS_ERR_LOC_31253, false},
    {"{\"p\": [{\"%project\": {}}]}", NULL, MS_ERR_LOC_51272, false},
    {"{\"p\": [{\"%project\": {\"y\": {\"%nope\": 1}}}]}", NULL, MS_ERR_INVALID_PIPELINE_OPERATOR, false},
    {"{\"p\": [{\"%group\": {\"n\": {\"%sum\": 1}}}]}", NULL, MS_ERR_LOC_15955, false},
    {"{\"p\": [{\"%group\": {\"_id\": null, \"n\": {\"%median\": 1}}}]}", NULL, MS_ERR_LOC_15952, false},
    {"{\"p\": [{\"%group\": {\"_id\": null, \"n\": 1}}]}", NULL, MS_ERR_LOC_40234, false},
    {"{\"p\": [{\"%group\": {\"_id\": null, \"a.b\": {\"%sum\": 1}}}]}", NULL, MS_ERR_LOC_40235, false},
    {"{\"p\": [{\"%sort\": {\"x\": 2}}]}", NULL, MS_ERR_LOC_15975, false},
    {"{\"p\": [{\"%sort\": {}}]}", NULL, MS_ERR_LOC_15976, false},
    {"{\"p\": [{\"%limit\": 0}]}", NULL, MS_ERR_LOC_15958, false},
    {"{\"p\": [{\"%limit\": \"x\"}]}", NULL, MS_ERR_LOC_15957, false},
    {"{\"p\": [{\"%skip\": -1}]}", NULL, MS_ERR_LOC_15956, false},
    {"{\"p\": [{\"%unwind\": \"tags\"}]}", NULL, MS_ERR_LOC_28818, false},
    {"{\"p\": [{\"%unwind\": {\"path\": \"$t\", \"bad\": 1}}]}", NULL, MS_ERR_LOC_28811, false},
    {"{\"p\": [{\"%unwind\": 3}]}", NULL, MS_ERR_LOC_15981, false},
    {"{\"p\": [{\"%count\": \"\"}]}", NULL, MS_ERR_LOC_40157, false},
    {"{\"p\": [{\"%count\": \"$x\"}]}", NULL, MS_ERR_LOC_40158, false},
    {"{\"p\": [{\"%match\": 1}]}", NULL, MS_ERR_LOC_15959, false},
    {"{\"p\": [{\"%addFields\": 1}]}", NULL, MS_ERR_LOC_40272, false},
    {"{\"p\": [{\"%unset\": 1}]}", NULL, MS_ERR_LOC_31002, false},
    /* runtime errors */
    {"{\"p\": [{\"%project\": {\"y\": {\"%divide\": [1, 0]}}}]}", NULL, MS_ERR_BAD_VALUE, false},
    {"{\"p\": [{\"%project\": {\"y\": {\"%add\": [\"$g\", 1]}}}]}", NULL, MS_ERR_LOC_16554, false},
};

static bson_t *input_docs(const bson_t *const **out, size_t *n, bson_t *holder) {
    bson_iter_t it, ai;
    static bson_t views[16];
    static const bson_t *ptrs[16];
    size_t k = 0;
    t_json(INPUT, holder);
    bson_iter_init_find(&it, holder, "d");
    bson_iter_recurse(&it, &ai);
    while (bson_iter_next(&ai) && k < 16) {
        bsonx_view_container(&ai, &views[k]);
        ptrs[k] = &views[k];
        k++;
    }
    *out = ptrs;
    *n = k;
    return holder;
}

/* Same documents, order ignored unless ordered. */
static bool same_results(const bson_t *got, const bson_t *want, bool ordered) {
    bson_iter_t a, b;
    int na = 0, nb = 0;
    if (ordered) return bson_equal(got, want);
    bson_iter_init(&a, got);
    while (bson_iter_next(&a)) na++;
    bson_iter_init(&b, want);
    while (bson_iter_next(&b)) nb++;
    if (na != nb) return false;
    bson_iter_init(&a, got);
    while (bson_iter_next(&a)) {
        bool found = false;
        bson_t da, db;
        bsonx_view_container(&a, &da);
        bson_iter_init(&b, want);
        while (!found && bson_iter_next(&b)) {
            bsonx_view_container(&b, &db);
            found = bson_equal(&da, &db);
        }
        if (!found) return false;
    }
    return true;
}

static int run_json(const char *pjson, const bson_t *const *docs, size_t n, bson_t *out,
                    agg_pipeline_t **pp, ms_error_t *err) {
    bson_t wrap, arr;
    bson_iter_t it;
    agg_pipeline_t *p = NULL;
    int rc;
    bson_init(out);
    if (!t_json(pjson, &wrap)) return -1;
    bson_iter_init_find(&it, &wrap, "p");
    bsonx_view_container(&it, &arr);
    rc = agg_parse(&arr, NULL, &p, err);
    if (rc == 0) rc = agg_run_all(p, docs, n, out, err);
    bson_destroy(&wrap);
    if (pp && rc == 0) *pp = p;
    else agg_free(p);
    return rc;
}

static void test_agg_table(void) {
    bson_t holder;
    const bson_t *const *docs;
    size_t n;
    input_docs(&docs, &n, &holder);
    for (int i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
        bson_t got, want_w, want;
        bson_iter_t it;
        ms_error_t err = {0};
        int rc = run_json(rows[i].pipeline, docs, n, &got, NULL, &err);
        if (!rows[i].want) {
            CHECK_MSG(rc == rows[i].code, "row %d: %s gave rc %d (%s), expected %d", i,
                      rows[i].pipeline, rc, err.msg, rows[i].code);
        } else if (rc != 0) {
            t_fail(__FILE__, __LINE__, "row %d: %s failed: %d %s", i, rows[i].pipeline, rc, err.msg);
        } else {
            t_json(rows[i].want, &want_w);
            bson_iter_init_find(&it, &want_w, "r");
            bsonx_view_container(&it, &want);
            char *g = bsonx_to_json(&got);
            CHECK_MSG(same_results(&got, &want, rows[i].ordered), "row %d: %s gave %s, expected %s",
                      i, rows[i].pipeline, g, rows[i].want);
            bson_free(g);
            bson_destroy(&want_w);
        }
        bson_destroy(&got);
    }
    bson_destroy(&holder);
}

/* Runs a pipeline given as a BSON array over docs into out. */
static int run_arr(const bson_t *arr, const bson_t *const *docs, size_t n, bson_t *out,
                   ms_error_t *err) {
    agg_pipeline_t *p = NULL;
    int rc = agg_parse(arr, NULL, &p, err);
    bson_init(out);
    if (rc == 0) rc = agg_run_all(p, docs, n, out, err);
    agg_free(p);
    return rc;
}

/* The split is right when shards-then-merger equals the whole pipeline on one node: each
 * row's input dealt round-robin to three "shards". */
static void test_agg_split_equivalence(void) {
    bson_t holder;
    const bson_t *const *docs;
    size_t n;
    int checked = 0;
    input_docs(&docs, &n, &holder);
    for (int i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
        bson_t whole, shards, merger, merged_in, final;
        agg_pipeline_t *p = NULL;
        ms_error_t err = {0};
        bool msort;
        const bson_t *parts[3][16];
        size_t np[3] = {0, 0, 0};
        const bson_t *inter[64];
        bson_t outs[3];
        size_t ni = 0;
        if (!rows[i].want) continue;
        if (run_json(rows[i].pipeline, docs, n, &whole, &p, &err) != 0) {
            t_fail(__FILE__, __LINE__, "row %d: %s", i, err.msg);
            bson_destroy(&whole);
            continue;
        }
        agg_split(p, &shards, &merger, &msort);
        for (size_t k = 0; k < n; k++) parts[k % 3][np[k % 3]++] = docs[k];
        bson_init(&merged_in);
        for (int s = 0; s < 3; s++) {
            bson_iter_t it;
            CHECK_INT(run_arr(&shards, parts[s], np[s], &outs[s], &err), 0);
            bson_iter_init(&it, &outs[s]);
            while (bson_iter_next(&it) && ni < 64) {
                bson_t v;
                bsonx_view_container(&it, &v);
                inter[ni++] = bson_copy(&v);   /* heap bson_t: libbson aligns it */
            }
        }
        if (bson_empty(&merger)) {
            bson_init(&final);
            for (size_t k = 0; k < ni; k++) {
                char key[24];
                snprintf(key, sizeof key, "%zu", k);
                BSON_APPEND_DOCUMENT(&final, key, inter[k]);
            }
        } else {
            CHECK_INT(run_arr(&merger, inter, ni, &final, &err), 0);
        }
        {
            char *a = bsonx_to_json(&whole), *b = bsonx_to_json(&final);
            char *sj = bsonx_to_json(&shards), *mj = bsonx_to_json(&merger);
            /* without a merge sort the order across shards is the merger's; compare as sets */
            CHECK_MSG(same_results(&final, &whole, rows[i].ordered && !bson_empty(&merger)),
                      "row %d: split %s | %s gave %s, whole gave %s", i, sj, mj, b, a);
            bson_free(a);
            bson_free(b);
            bson_free(sj);
            bson_free(mj);
        }
        checked++;
        for (size_t k = 0; k < ni; k++) bson_destroy((bson_t *)inter[k]);
        for (int s = 0; s < 3; s++) bson_destroy(&outs[s]);
        bson_destroy(&whole);
        bson_destroy(&shards);
        bson_destroy(&merger);
        bson_destroy(&merged_in);
        bson_destroy(&final);
        agg_free(p);
    }
    CHECK(checked >= 15);
    bson_destroy(&holder);
}

/* The split's shape: streaming stages to the shards, a partial $group with $avg as
 * sum and count, the final $group on the merger; $sort merges; $skip+$limit. */
static void test_agg_split_shape(void) {
    static const struct {
        const char *p, *shards, *merger;
        bool msort;
    } cases[] = {
        {"{\"p\": [{\"%match\": {\"a\": 1}}, {\"%project\": {\"a\": 1}}]}",
         "[{\"$match\": {\"a\": 1}}, {\"$project\": {\"a\": 1}}]", "[]", false},
        {"{\"p\": [{\"%match\": {\"a\": 1}}, {\"%group\": {\"_id\": \"$g\", \"m\": {\"%avg\": \"$x\"}, \"c\": {\"%count\": {}}}}, {\"%sort\": {\"m\": 1}}]}",
         "[{\"$match\": {\"a\": 1}}, {\"$group\": {\"_id\": \"$g\", \"m\": {\"$_partialAvg\": \"$x\"}, \"c\": {\"$sum\": 1}}}]",
         "[{\"$group\": {\"_id\": \"$_id\", \"m\": {\"$_mergeAvg\": \"$m\"}, \"c\": {\"$sum\": \"$c\"}}}, {\"$sort\": {\"m\": 1}}]", false},
        {"{\"p\": [{\"%sort\": {\"x\": -1}}, {\"%limit\": 5}, {\"%project\": {\"x\": 1}}]}",
         "[{\"$sort\": {\"x\": -1}}, {\"$limit\": {\"$numberLong\": \"5\"}}]",
         "[{\"$sort\": {\"x\": -1}}, {\"$limit\": {\"$numberLong\": \"5\"}}, {\"$project\": {\"x\": 1}}]", true},
        {"{\"p\": [{\"%sort\": {\"x\": 1}}, {\"%skip\": 2}, {\"%limit\": 3}]}",
         "[{\"$sort\": {\"x\": 1}}, {\"$limit\": {\"$numberLong\": \"5\"}}]",
         "[{\"$sort\": {\"x\": 1}}, {\"$skip\": {\"$numberLong\": \"2\"}}, {\"$limit\": {\"$numberLong\": \"3\"}}]", true},
        {"{\"p\": [{\"%skip\": 2}, {\"%limit\": 3}]}", "[{\"$limit\": {\"$numberLong\": \"5\"}}]",
         "[{\"$skip\": {\"$numberLong\": \"2\"}}, {\"$limit\": {\"$numberLong\": \"3\"}}]", false},
        {"{\"p\": [{\"%count\": \"n\"}]}", "[{\"$group\": {\"_id\": null, \"n\": {\"$sum\": 1}}}]",
         "[{\"$group\": {\"_id\": \"$_id\", \"n\": {\"$sum\": \"$n\"}}}, {\"$project\": {\"_id\": 0, \"n\": 1}}]", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_t wrap, arr, shards, merger;
        bson_iter_t it;
        agg_pipeline_t *p = NULL;
        ms_error_t err = {0};
        bool msort = false;
        t_json(cases[i].p, &wrap);
        bson_iter_init_find(&it, &wrap, "p");
        bsonx_view_container(&it, &arr);
        CHECK_INT(agg_parse(&arr, NULL, &p, &err), 0);
        if (p) {
            char *sj, *mj, *ws, *wm;
            bson_t want_s, want_m;
            char buf[1024];
            agg_split(p, &shards, &merger, &msort);
            /* compare through canonical JSON of a wrapper {"a": [...]} */
            snprintf(buf, sizeof buf, "{\"a\": %s}", cases[i].shards);
            bson_init_from_json(&want_s, buf, -1, NULL);
            snprintf(buf, sizeof buf, "{\"a\": %s}", cases[i].merger);
            bson_init_from_json(&want_m, buf, -1, NULL);
            bson_t gs = BSON_INITIALIZER, gm = BSON_INITIALIZER;
            BSON_APPEND_ARRAY(&gs, "a", &shards);
            BSON_APPEND_ARRAY(&gm, "a", &merger);
            sj = bsonx_to_canonical_json(&gs);
            mj = bsonx_to_canonical_json(&gm);
            ws = bsonx_to_canonical_json(&want_s);
            wm = bsonx_to_canonical_json(&want_m);
            CHECK_MSG(strcmp(sj, ws) == 0, "case %zu shards: %s, want %s", i, sj, ws);
            CHECK_MSG(strcmp(mj, wm) == 0, "case %zu merger: %s, want %s", i, mj, wm);
            CHECK(msort == cases[i].msort);
            bson_free(sj);
            bson_free(mj);
            bson_free(ws);
            bson_free(wm);
            bson_destroy(&gs);
            bson_destroy(&gm);
            bson_destroy(&want_s);
            bson_destroy(&want_m);
            bson_destroy(&shards);
            bson_destroy(&merger);
        }
        agg_free(p);
        bson_destroy(&wrap);
    }
}

/* $sort and $group stop at the blocking cap with 292 (a tiny cap here); allowDiskUse
 * raises it. The leading $match is exposed for a planner. */
static void test_agg_memory_cap(void) {
    bson_t wrap, arr, out = BSON_INITIALIZER;
    bson_iter_t it;
    agg_pipeline_t *p = NULL;
    agg_opts_t o = {0};
    ms_error_t err = {0};
    bson_t holder;
    const bson_t *const *docs;
    size_t n;
    input_docs(&docs, &n, &holder);
    t_json("{\"p\": [{\"%match\": {\"x\": {\"%gt\": 0}}}, {\"%sort\": {\"x\": 1}}]}", &wrap);
    bson_iter_init_find(&it, &wrap, "p");
    bsonx_view_container(&it, &arr);
    o.blocking_bytes_max = 100;
    CHECK_INT(agg_parse(&arr, &o, &p, &err), 0);
    CHECK(p && agg_leading_match(p) != NULL);
    if (p) CHECK_INT(agg_run_all(p, docs, n, &out, &err), MS_ERR_QUERY_EXCEEDED_MEMORY_LIMIT);
    agg_free(p);
    p = NULL;
    bson_destroy(&out);
    bson_init(&out);
    o.allow_disk_use = true;
    CHECK_INT(agg_parse(&arr, &o, &p, &err), 0);
    if (p) CHECK_INT(agg_run_all(p, docs, n, &out, &err), 0);
    agg_free(p);
    p = NULL;
    bson_destroy(&out);
    bson_destroy(&wrap);
    bson_init(&out);
    t_json("{\"p\": [{\"%group\": {\"_id\": \"$_id\", \"a\": {\"%push\": \"$$ROOT\"}}}]}", &wrap);
    bson_iter_init_find(&it, &wrap, "p");
    bsonx_view_container(&it, &arr);
    o.allow_disk_use = false;
    CHECK_INT(agg_parse(&arr, &o, &p, &err), 0);
    if (p) CHECK_INT(agg_run_all(p, docs, n, &out, &err), MS_ERR_QUERY_EXCEEDED_MEMORY_LIMIT);
    agg_free(p);
    bson_destroy(&out);
    bson_destroy(&wrap);
    bson_destroy(&holder);
}

T_MAIN(T_CASE(test_agg_table), T_CASE(test_agg_split_shape), T_CASE(test_agg_split_equivalence),
       T_CASE(test_agg_memory_cap))
