/*
 * test_common_curop.c — the operations registry and the $currentOp stage (common/curop.c):
 * the stage's options parsed as MongoDB parses them (texts and codes), operations listed
 * while registered and gone once ended, their fields (op kind, ns, opid, client), the
 * shard form a router gets (shard first, "shard:N" opid, client_s), the rest of the
 * pipeline run over the listing, truncateOps, and commands of other threads (each thread
 * its own registry slot, gone when the thread ends).
 */
#include <pthread.h>

#include "common/cmd.h"
#include "common/curop.h"
#include "common/opctx.h"
#include "tests/unit/t.h"

/* Parses {$currentOp: <json value>} with curop_parse_pipeline: the code and message. */
static int parse(const char *stage_json, curop_spec_t *spec, ms_error_t *err) {
    char json[512];
    bson_t stage, pipeline;
    int rc = -1;
    memset(err, 0, sizeof *err);
    snprintf(json, sizeof json, "{\"$currentOp\": %s}", stage_json);
    if (!t_json(json, &stage)) return -1;
    bson_init(&pipeline);
    BSON_APPEND_DOCUMENT(&pipeline, "0", &stage);
    rc = curop_parse_pipeline(&pipeline, spec, err);
    bson_destroy(&pipeline);
    bson_destroy(&stage);
    return rc;
}

static void curop_spec_parsing(void) {
    curop_spec_t s;
    ms_error_t err;
    CHECK_INT(parse("{}", &s, &err), 0);
    CHECK(!s.all_users && !s.local_ops && s.idle_sessions);   /* MongoDB's defaults */
    CHECK_INT(parse("{\"allUsers\": true, \"localOps\": true, \"truncateOps\": false}", &s, &err), 0);
    CHECK(s.all_users && s.local_ops && !s.truncate_ops);
    static const struct { const char *json, *msg; } bad[] = {
        {"1", "$currentOp options must be specified in an object, but found: int"},
        {"{\"nosuch\": true}", "Unrecognized option 'nosuch' in $currentOp stage."},
        {"{\"localOps\": 1}", "The 'localOps' parameter of the $currentOp stage must be a boolean "
                              "value, but found: int"},
        {"{\"idleConnections\": \"x\"}", "The 'idleConnections' parameter of the $currentOp stage "
                                         "must be a boolean value, but found: string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_INT(parse(bad[i].json, &s, &err), MS_ERR_FAILED_TO_PARSE);
        CHECK_MSG(strcmp(err.msg, bad[i].msg) == 0, "%s: %s", bad[i].json, err.msg);
    }
}

static void curop_namespace_check(void) {
    bson_t one, named;
    bson_iter_t a, b;
    ms_error_t err;
    CHECK(t_json("{\"aggregate\": 1}", &one));
    CHECK(t_json("{\"aggregate\": \"c\"}", &named));
    bson_iter_init(&a, &one);
    bson_iter_next(&a);
    bson_iter_init(&b, &named);
    bson_iter_next(&b);
    CHECK_INT(curop_check_ns("admin", &a, &err), 0);
    CHECK_INT(curop_check_ns("app", &a, &err), MS_ERR_INVALID_NAMESPACE);
    CHECK_INT(curop_check_ns("admin", &b, &err), MS_ERR_INVALID_NAMESPACE);
    CHECK(strcmp(err.msg, "$currentOp must be run against the 'admin' database with {aggregate: 1}") == 0);
    bson_destroy(&one);
    bson_destroy(&named);
}

/* Runs [{$currentOp: spec}, ...rest] and returns the results as one array document. */
static bool run(const char *pipeline_json, const char *shard, bson_t *out) {
    bson_t wrap, pipeline;
    bson_iter_t it;
    curop_spec_t spec;
    bson_t **docs = NULL;
    size_t n = 0;
    ms_error_t err;
    bool ok = false;
    bson_init(out);
    if (!t_json(pipeline_json, &wrap)) return false;
    if (bson_iter_init_find(&it, &wrap, "p") && BSON_ITER_HOLDS_ARRAY(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_iter_array(&it, &len, &data);
        bson_init_static(&pipeline, data, len);
        ok = curop_parse_pipeline(&pipeline, &spec, &err) == 0 &&
             curop_stage_run(&pipeline, &spec, "h:1", shard, &docs, &n, &err) == 0;
        CHECK_MSG(ok, "run: %s", err.msg);
    }
    for (size_t i = 0; ok && i < n; i++) {
        char key[24];
        snprintf(key, sizeof key, "%zu", i);
        BSON_APPEND_DOCUMENT(out, key, docs[i]);
    }
    for (size_t i = 0; i < n; i++) bson_destroy(docs[i]);
    bson_free(docs);
    bson_destroy(&wrap);
    return ok;
}

static const char *str_at(const bson_t *arr, const char *path) {
    bson_iter_t it;
    if (bson_iter_init(&it, arr) && bson_iter_find_descendant(&it, path, &it) && BSON_ITER_HOLDS_UTF8(&it))
        return bson_iter_utf8(&it, NULL);
    return NULL;
}

static void curop_lists_registered_ops(void) {
    bson_t find, ins, out;
    curop_t a, b;
    bson_iter_t it;
    CHECK(t_json("{\"find\": \"people\", \"filter\": {}, \"$db\": \"app\"}", &find));
    CHECK(t_json("{\"insert\": \"people\", \"documents\": [{\"_id\": 1}], \"$db\": \"app\"}", &ins));
    op_set_conn(7);
    op_set_peer("127.0.0.1:5555");
    curop_begin(&a, &find, "find", "app", CMD_NS_ARG);
    curop_begin(&b, &ins, "insert", "app", CMD_NS_ARG | CMD_WRITE);
    op_set_peer(NULL);
    op_set_conn(0);
    CHECK(run("{\"p\": [{\"$currentOp\": {}}, {\"$match\": {\"ns\": \"app.people\"}}, "
              "{\"$sort\": {\"op\": 1}}]}", NULL, &out));
    CHECK_INT((int)bson_count_keys(&out), 2);
    CHECK(str_at(&out, "0.op") && strcmp(str_at(&out, "0.op"), "insert") == 0);
    CHECK(str_at(&out, "1.op") && strcmp(str_at(&out, "1.op"), "query") == 0);
    CHECK(str_at(&out, "0.client") && strcmp(str_at(&out, "0.client"), "127.0.0.1:5555") == 0);
    CHECK(str_at(&out, "0.desc") && strcmp(str_at(&out, "0.desc"), "conn7") == 0);
    CHECK(str_at(&out, "0.host") && strcmp(str_at(&out, "0.host"), "h:1") == 0);
    CHECK(str_at(&out, "0.command.insert") && strcmp(str_at(&out, "0.command.insert"), "people") == 0);
    CHECK(bson_iter_init(&it, &out) && bson_iter_find_descendant(&it, "0.opid", &it) &&
          BSON_ITER_HOLDS_INT32(&it) && bson_iter_int32(&it) == b.opid);
    bson_destroy(&out);

    /* As a shard answers a router: shard first, "shard:N", client_s. */
    CHECK(run("{\"p\": [{\"$currentOp\": {}}, {\"$match\": {\"op\": \"query\", \"ns\": \"app.people\"}}]}",
              "shard3", &out));
    CHECK_INT((int)bson_count_keys(&out), 1);
    CHECK(bson_iter_init(&it, &out) && bson_iter_find_descendant(&it, "0", &it) &&
          bson_iter_recurse(&it, &it) && bson_iter_next(&it) && strcmp(bson_iter_key(&it), "shard") == 0);
    char want[32];
    snprintf(want, sizeof want, "shard3:%d", (int)a.opid);
    CHECK(str_at(&out, "0.opid") && strcmp(str_at(&out, "0.opid"), want) == 0);
    CHECK(str_at(&out, "0.client_s") && !str_at(&out, "0.client"));
    bson_destroy(&out);

    curop_end(&b);
    CHECK(run("{\"p\": [{\"$currentOp\": {}}, {\"$match\": {\"ns\": \"app.people\"}}]}", NULL, &out));
    CHECK_INT((int)bson_count_keys(&out), 1);
    curop_end(&a);
    bson_destroy(&out);
    CHECK(run("{\"p\": [{\"$currentOp\": {}}, {\"$match\": {\"ns\": \"app.people\"}}]}", NULL, &out));
    CHECK_INT((int)bson_count_keys(&out), 0);
    bson_destroy(&out);
    bson_destroy(&find);
    bson_destroy(&ins);
}

static void curop_namespaces_and_truncation(void) {
    bson_t agg, big, out;
    curop_t a, b;
    char json[3000];
    CHECK(t_json("{\"aggregate\": 1, \"pipeline\": [], \"$db\": \"admin\"}", &agg));
    snprintf(json, sizeof json, "{\"insert\": \"t\", \"documents\": [{\"s\": \"%0*d\"}], \"$db\": \"x\"}",
             2000, 0);
    CHECK(t_json(json, &big));
    curop_begin(&a, &agg, "aggregate", "admin", CMD_NS_ARG);
    curop_begin(&b, &big, "insert", "x", CMD_NS_ARG | CMD_WRITE);
    CHECK(run("{\"p\": [{\"$currentOp\": {\"truncateOps\": true}}, {\"$match\": {\"ns\": \"x.t\"}}]}",
              NULL, &out));
    const char *t = str_at(&out, "0.command.$truncated");
    CHECK_MSG(t && strlen(t) == 1000 && strncmp(t, "{ \"insert\" : \"t\"", 16) == 0, "%s", t ? t : "-");
    bson_destroy(&out);
    CHECK(run("{\"p\": [{\"$currentOp\": {}}, {\"$match\": {\"ns\": \"x.t\"}}]}", NULL, &out));
    CHECK(str_at(&out, "0.command.insert"));   /* under 1 MB: whole */
    bson_destroy(&out);
    CHECK(run("{\"p\": [{\"$currentOp\": {}}, {\"$match\": {\"command.aggregate\": 1, "
              "\"command.$db\": \"admin\"}}]}", NULL, &out));
    CHECK(str_at(&out, "0.ns") && strcmp(str_at(&out, "0.ns"), "admin.$cmd.aggregate") == 0);
    bson_destroy(&out);
    curop_end(&b);
    curop_end(&a);
    bson_destroy(&agg);
    bson_destroy(&big);
}

/* A command on another thread: registered there, listed here while it runs. */
typedef struct worker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool begun, release;
    const bson_t *cmd;
} worker_t;

static void *worker_main(void *p) {
    worker_t *w = p;
    curop_t op;
    curop_begin(&op, w->cmd, "find", "thr", CMD_NS_ARG);
    pthread_mutex_lock(&w->mu);
    w->begun = true;
    pthread_cond_broadcast(&w->cv);
    while (!w->release) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    curop_end(&op);
    return NULL;
}

static int listed_in(const char *db_ns) {
    char json[200];
    bson_t out;
    snprintf(json, sizeof json, "{\"p\": [{\"$currentOp\": {}}, {\"$match\": {\"ns\": \"%s\"}}]}",
             db_ns);
    if (!run(json, NULL, &out)) return -1;
    int n = (int)bson_count_keys(&out);
    bson_destroy(&out);
    return n;
}

static void curop_lists_other_threads(void) {
    enum { NTHREADS = 8 };
    worker_t w[NTHREADS];
    pthread_t th[NTHREADS];
    bson_t find;
    CHECK(t_json("{\"find\": \"t\", \"filter\": {}, \"$db\": \"thr\"}", &find));
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (worker_t){.cmd = &find};
        pthread_mutex_init(&w[i].mu, NULL);
        pthread_cond_init(&w[i].cv, NULL);
        CHECK_INT(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
        pthread_mutex_lock(&w[i].mu);
        while (!w[i].begun) pthread_cond_wait(&w[i].cv, &w[i].mu);
        pthread_mutex_unlock(&w[i].mu);
    }
    CHECK_INT(listed_in("thr.t"), NTHREADS);
    for (int i = 0; i < NTHREADS; i++) {
        pthread_mutex_lock(&w[i].mu);
        w[i].release = true;
        pthread_cond_broadcast(&w[i].cv);
        pthread_mutex_unlock(&w[i].mu);
        pthread_join(th[i], NULL);
        CHECK_INT(listed_in("thr.t"), NTHREADS - 1 - i);   /* its slot went with the thread */
        pthread_cond_destroy(&w[i].cv);
        pthread_mutex_destroy(&w[i].mu);
    }
    bson_destroy(&find);
}

T_MAIN(T_CASE(curop_spec_parsing), T_CASE(curop_namespace_check), T_CASE(curop_lists_registered_ops),
       T_CASE(curop_namespaces_and_truncation), T_CASE(curop_lists_other_threads))
