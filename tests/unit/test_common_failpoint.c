/*
 * test_common_failpoint.c — failpoints (common/failpoint.c): the modes alwaysOn, off,
 * {times}, {skip}; the actions error (default and given code), hang (released from
 * another connection while the worker pool keeps serving, observed with
 * waitForFailPoint) and crash (in a forked child, which must die by SIGKILL); bad
 * configurations; the status section; fp_check's predicate; data handed to callers; the
 * split evaluation fp_eval_early / fp_late (a hang in the early half, holdLocks in the late).
 */
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cmd.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "tests/unit/t.h"

static int configure(const char *json, bson_t *reply, ms_error_t *err) {
    bson_t cmd;
    int rc;
    bson_init(reply);
    if (!bson_init_from_json(&cmd, json, -1, NULL)) {
        t_fail(__FILE__, __LINE__, "bad test json: %s", json);
        return -1;
    }
    rc = fp_configure(&cmd, reply, err);
    bson_destroy(&cmd);
    return rc;
}

static int conf(const char *json) {
    bson_t r;
    ms_error_t err = {0};
    int rc = configure(json, &r, &err);
    bson_destroy(&r);
    return rc;
}

static int64_t get_int(const bson_t *doc, const char *path) {
    bson_iter_t it, f;
    if (bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, &f))
        return bson_iter_as_int64(&f);
    return -1;
}

/* How many of n evaluations fire (error action so nothing hangs). */
static int fires(const char *name, int n) {
    int count = 0;
    for (int i = 0; i < n; i++) {
        ms_error_t err = {0};
        if (fp_eval(name, &err) != 0) count++;
    }
    return count;
}

static void fp_modes(void) {
    fp_register("fpModes");
    fp_register("fpModes"); /* twice is harmless */
    CHECK(!fp_active("fpModes"));
    CHECK_INT(fires("fpModes", 5), 0);

    CHECK_INT(conf("{\"configureFailPoint\": \"fpModes\", \"mode\": \"alwaysOn\", "
                   "\"data\": {\"action\": \"error\"}}"), 0);
    CHECK(fp_active("fpModes"));
    CHECK_INT(fires("fpModes", 5), 5);

    CHECK_INT(conf("{\"configureFailPoint\": \"fpModes\", \"mode\": {\"times\": 3}, "
                   "\"data\": {\"action\": \"error\"}}"), 0);
    CHECK_INT(fires("fpModes", 10), 3);
    CHECK(!fp_active("fpModes")); /* exhausted */

    CHECK_INT(conf("{\"configureFailPoint\": \"fpModes\", \"mode\": {\"skip\": 4}, "
                   "\"data\": {\"action\": \"error\"}}"), 0);
    CHECK_INT(fires("fpModes", 4), 0);
    CHECK_INT(fires("fpModes", 6), 6);

    CHECK_INT(conf("{\"configureFailPoint\": \"fpModes\", \"mode\": \"off\"}"), 0);
    CHECK(!fp_active("fpModes"));
    CHECK_INT(fires("fpModes", 5), 0);

    /* count = times entered so far, cumulative: 5 + 3 + 6 */
    {
        bson_t r;
        ms_error_t err = {0};
        CHECK_INT(configure("{\"configureFailPoint\": \"fpModes\", \"mode\": \"off\"}", &r, &err), 0);
        CHECK_INT(get_int(&r, "count"), 14);
        bson_destroy(&r);
    }
    /* {times: 0} is off */
    CHECK_INT(conf("{\"configureFailPoint\": \"fpModes\", \"mode\": {\"times\": 0}}"), 0);
    CHECK(!fp_active("fpModes"));
    /* an unregistered point never fires */
    CHECK_INT(fp_eval("fpNeverRegistered", NULL), 0);
    CHECK(!fp_active("fpNeverRegistered"));
}

static void fp_error_action(void) {
    ms_error_t err = {0};
    fp_register("fpError");
    CHECK_INT(conf("{\"configureFailPoint\": \"fpError\", \"mode\": \"alwaysOn\", "
                   "\"data\": {\"action\": \"error\"}}"), 0);
    CHECK_INT(fp_eval("fpError", &err), MS_ERR_FAIL_POINT_ENABLED);
    CHECK_INT(err.code, 192);
    CHECK_MSG(strstr(err.msg, "fpError") != NULL, "errmsg names the point: %s", err.msg);

    CHECK_INT(conf("{\"configureFailPoint\": \"fpError\", \"mode\": \"alwaysOn\", "
                   "\"data\": {\"action\": \"error\", \"code\": 13388, \"errmsg\": \"boom\"}}"), 0);
    CHECK_INT(fp_eval("fpError", &err), MS_ERR_STALE_CONFIG);
    CHECK_STR(err.msg, "boom");

    /* fp_eval_data hands the data over */
    {
        bson_t data;
        bool fired = false;
        CHECK_INT(fp_eval_data("fpError", &data, &fired, &err), MS_ERR_STALE_CONFIG);
        CHECK(fired);
        if (fired) {
            CHECK_INT(get_int(&data, "code"), 13388);
            bson_destroy(&data);
        }
    }
    CHECK_INT(conf("{\"configureFailPoint\": \"fpError\", \"mode\": \"off\"}"), 0);
    {
        bool fired = true;
        CHECK_INT(fp_eval_data("fpError", NULL, &fired, &err), 0);
        CHECK(!fired);
    }
}

static void fp_bad_config(void) {
    bson_t r;
    ms_error_t err = {0};
    fp_register("fpBad");
    CHECK_INT(configure("{\"configureFailPoint\": \"noSuchPoint\", \"mode\": \"off\"}", &r, &err),
              MS_ERR_BAD_VALUE);
    CHECK_STR(err.msg, "Cannot find failpoint noSuchPoint");
    bson_destroy(&r);
    CHECK_INT(conf("{\"configureFailPoint\": \"fpBad\", \"mode\": \"sometimes\"}"), MS_ERR_BAD_VALUE);
    CHECK_INT(conf("{\"configureFailPoint\": \"fpBad\", \"mode\": {\"times\": -1}}"), MS_ERR_BAD_VALUE);
    CHECK_INT(conf("{\"configureFailPoint\": \"fpBad\", \"mode\": {\"times\": 1.5}}"), MS_ERR_BAD_VALUE);
    CHECK_INT(conf("{\"configureFailPoint\": \"fpBad\", \"mode\": {\"often\": 1}}"), MS_ERR_BAD_VALUE);
    CHECK_INT(conf("{\"configureFailPoint\": \"fpBad\", \"mode\": \"alwaysOn\", "
                   "\"data\": {\"action\": \"explode\"}}"), MS_ERR_BAD_VALUE);
    CHECK_INT(conf("{\"configureFailPoint\": \"fpBad\", \"mode\": \"alwaysOn\", "
                   "\"data\": {\"action\": \"error\", \"code\": \"x\"}}"), MS_ERR_BAD_VALUE);
    CHECK_INT(conf("{\"configureFailPoint\": \"fpBad\"}"), MS_ERR_FAILED_TO_PARSE);
    CHECK_INT(conf("{\"configureFailPoint\": 5, \"mode\": \"off\"}"), MS_ERR_TYPE_MISMATCH);
    CHECK(!fp_active("fpBad")); /* nothing half-applied */
}

static void fp_status(void) {
    bson_t st = BSON_INITIALIZER;
    fp_register("fpStatus");
    CHECK_INT(conf("{\"configureFailPoint\": \"fpStatus\", \"mode\": {\"skip\": 2}, "
                   "\"data\": {\"action\": \"error\"}}"), 0);
    fires("fpStatus", 3);
    fp_append_status(&st);
    {
        bson_iter_t it, f;
        CHECK(bson_iter_init(&it, &st) && bson_iter_find_descendant(&it, "fpStatus.mode", &f) &&
              strcmp(bson_iter_utf8(&f, NULL), "skip") == 0);
        CHECK_INT(get_int(&st, "fpStatus.timesEntered"), 1);
    }
    bson_destroy(&st);
    conf("{\"configureFailPoint\": \"fpStatus\", \"mode\": \"off\"}");
}

static bool pred_wants(const bson_t *data, void *arg) {
    bson_iter_t it;
    return bson_iter_init_find(&it, data, "want") && BSON_ITER_HOLDS_UTF8(&it) &&
           strcmp(bson_iter_utf8(&it, NULL), (const char *)arg) == 0;
}

static void fp_check_predicate(void) {
    bson_t data, r;
    ms_error_t err = {0};
    fp_register("fpCheck");
    CHECK(!fp_check("fpCheck", NULL, NULL, NULL));
    CHECK_INT(conf("{\"configureFailPoint\": \"fpCheck\", \"mode\": {\"times\": 1}, "
                   "\"data\": {\"want\": \"a\"}}"), 0);
    /* non-matching evaluations do not use up the one time */
    CHECK(!fp_check("fpCheck", pred_wants, (void *)"b", NULL));
    CHECK(!fp_check("fpCheck", pred_wants, (void *)"b", NULL));
    CHECK(fp_check("fpCheck", pred_wants, (void *)"a", &data));
    CHECK_INT(get_int(&data, "want") == -1 ? 0 : 1, 1);
    bson_destroy(&data);
    CHECK(!fp_check("fpCheck", pred_wants, (void *)"a", NULL));
    CHECK_INT(configure("{\"configureFailPoint\": \"fpCheck\", \"mode\": \"off\"}", &r, &err), 0);
    CHECK_INT(get_int(&r, "count"), 1);
    bson_destroy(&r);
}

/* ---- hang, over a real command server -------------------------------------------- */

static int h_hang_here(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)ctx;
    int rc = fp_eval("fpHang", err);
    if (rc == 0) BSON_APPEND_BOOL(reply, "passed", true);
    return rc;
}

static const cmd_spec_t hang_table[] = {
    {.name = "hangHere", .handler = h_hang_here, .help = "evaluates fpHang"},
};

typedef struct hang_call {
    rpc_client_t *c;
    int rc;
    bool passed;
    long long done_ms;
} hang_call_t;

static void *hang_call_main(void *p) {
    hang_call_t *a = p;
    bson_t cmd = BSON_INITIALIZER, reply = BSON_INITIALIZER;
    bson_iter_t it;
    ms_error_t err = {0};
    BSON_APPEND_INT32(&cmd, "hangHere", 1);
    /* On a transport error the reply is left untouched (still the empty one). */
    a->rc = rpc_command(a->c, &cmd, 20000, &reply, &err);
    if (a->rc == 0 && bson_iter_init_find(&it, &reply, "passed")) a->passed = true;
    a->done_ms = time_mono_ms();
    bson_destroy(&reply);
    bson_destroy(&cmd);
    return NULL;
}

static int call_json(rpc_client_t *c, const char *json, bson_t *reply, ms_error_t *err) {
    bson_t cmd;
    int rc;
    bson_init_from_json(&cmd, json, -1, NULL);
    bson_init(reply); /* stays empty (and destroyable) on a transport error */
    rc = rpc_command(c, &cmd, 20000, reply, err);
    bson_destroy(&cmd);
    return rc;
}

static void fp_hang_release(void) {
    cmd_server_opts_t o = {.process = "testd", .url = t_url("fp_hang"), .workers = 4,
                           .enable_test_commands = true, .table = hang_table, .table_len = 1};
    cmd_server_t *s = NULL;
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    hang_call_t calls[2] = {{0}, {0}};
    pthread_t th[2];
    bson_t r;
    int64_t count;
    long long released_ms;

    fp_register("fpHang");
    CHECK_INT(cmd_server_start(&o, &s, &err), 0);
    CHECK_INT(rpc_client_open(t_url("fp_hang"), &c, &err), 0);
    if (!s || !c) goto out;

    CHECK_INT(call_json(c, "{\"configureFailPoint\": \"fpHang\", \"mode\": \"alwaysOn\"}", &r, &err), 0);
    count = get_int(&r, "count");
    bson_destroy(&r);
    for (int i = 0; i < 2; i++) {
        calls[i].c = c;
        pthread_create(&th[i], NULL, hang_call_main, &calls[i]);
    }
    /* Both calls reach the point; the other two workers keep serving meanwhile. */
    {
        char json[200];
        snprintf(json, sizeof json,
                 "{\"waitForFailPoint\": \"fpHang\", \"timesEntered\": %lld, \"maxTimeMS\": 10000}",
                 (long long)count + 2);
        CHECK_INT(call_json(c, json, &r, &err), 0);
        bson_destroy(&r);
    }
    CHECK_INT(call_json(c, "{\"ping\": 1}", &r, &err), 0);
    bson_destroy(&r);
    CHECK(calls[0].done_ms == 0 && calls[1].done_ms == 0); /* still held */
    {
        bson_t st;
        CHECK_INT(call_json(c, "{\"serverStatus\": 1}", &st, &err), 0);
        CHECK_INT(get_int(&st, "connections.active"), 3); /* two hung + serverStatus */
        bson_destroy(&st);
    }

    released_ms = time_mono_ms();
    CHECK_INT(call_json(c, "{\"configureFailPoint\": \"fpHang\", \"mode\": \"off\"}", &r, &err), 0);
    bson_destroy(&r);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(calls[i].rc, 0);
        CHECK(calls[i].passed);
        CHECK(calls[i].done_ms >= released_ms);
    }

    /* waitForFailPoint gives up at maxTimeMS */
    {
        long long t0 = time_mono_ms(), ms;
        CHECK_INT(call_json(c, "{\"waitForFailPoint\": \"fpHang\", \"timesEntered\": 1000, "
                               "\"maxTimeMS\": 200}", &r, &err),
                  MS_ERR_MAX_TIME_MS_EXPIRED);
        ms = time_mono_ms() - t0;
        CHECK_MSG(ms >= 190 && ms < 2000, "waited %lld ms", ms);
        bson_destroy(&r);
    }
    /* the error action over the wire, with its code */
    CHECK_INT(call_json(c, "{\"configureFailPoint\": \"fpHang\", \"mode\": {\"times\": 1}, "
                           "\"data\": {\"action\": \"error\", \"code\": 117}}", &r, &err), 0);
    bson_destroy(&r);
    CHECK_INT(call_json(c, "{\"hangHere\": 1}", &r, &err), MS_ERR_CONFLICTING_OPERATION);
    bson_destroy(&r);
    CHECK_INT(call_json(c, "{\"hangHere\": 1}", &r, &err), 0);
    bson_destroy(&r);

    /* a hang still held when the server stops is released by the stop */
    CHECK_INT(call_json(c, "{\"configureFailPoint\": \"fpHang\", \"mode\": \"alwaysOn\"}", &r, &err), 0);
    count = get_int(&r, "count");
    bson_destroy(&r);
    calls[0] = (hang_call_t){c, 0, false, 0};
    pthread_create(&th[0], NULL, hang_call_main, &calls[0]);
    {
        char json[200];
        snprintf(json, sizeof json, "{\"waitForFailPoint\": \"fpHang\", \"timesEntered\": %lld}",
                 (long long)count + 1);
        CHECK_INT(call_json(c, json, &r, &err), 0);
        bson_destroy(&r);
    }
    cmd_server_stop(s);
    s = NULL;
    pthread_join(th[0], NULL);
    CHECK(calls[0].done_ms != 0);
out:
    rpc_client_close(c);
    cmd_server_stop(s);
}

/* The crash action: one log line, then SIGKILL — checked in a forked child. */
static void fp_crash_action(void) {
    pid_t pid;
    int status = 0;
    fp_register("fpCrash");
    pid = fork();
    if (pid == 0) {
        ms_error_t err = {0};
        int rc = conf("{\"configureFailPoint\": \"fpCrash\", \"mode\": \"alwaysOn\", "
                      "\"data\": {\"action\": \"crash\"}}");
        if (rc != 0) _exit(3);
        fp_eval("fpCrash", &err);
        _exit(4); /* not reached when the point works */
    }
    CHECK(pid > 0);
    CHECK_INT(waitpid(pid, &status, 0), pid);
    CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "child status %d: expected death by SIGKILL", status);
    /* the parent's copy of the point is untouched */
    CHECK(!fp_active("fpCrash"));
}

static void fp_release_everything(void) {
    fp_register("fpRelA");
    fp_register("fpRelB");
    conf("{\"configureFailPoint\": \"fpRelA\", \"mode\": \"alwaysOn\"}");
    conf("{\"configureFailPoint\": \"fpRelB\", \"mode\": {\"skip\": 1}}");
    CHECK(fp_active("fpRelA") && fp_active("fpRelB"));
    fp_release_all();
    CHECK(!fp_active("fpRelA") && !fp_active("fpRelB"));
}

/* fp_eval_early / fp_late: a hang waits in the early half (before the caller's
 * lock), error and crash act in the late half; holdLocks moves the hang to the late half. */
typedef struct early_call {
    const char *name;
    atomic_int stage;   /* 1: early returned, 2: late returned */
    int late_rc;
} early_call_t;

static void *early_main(void *p) {
    early_call_t *a = p;
    fp_early_t e;
    ms_error_t err = {0};
    fp_eval_early(a->name, &e);
    atomic_store(&a->stage, 1);
    a->late_rc = fp_late(&e, &err);
    atomic_store(&a->stage, 2);
    return NULL;
}

static int64_t entered(const char *name) {
    bson_t st = BSON_INITIALIZER;
    char path[96];
    fp_append_status(&st);
    snprintf(path, sizeof path, "%s.timesEntered", name);
    int64_t n = get_int(&st, path);
    bson_destroy(&st);
    return n;
}

static void fp_early_late(void) {
    fp_early_t e;
    ms_error_t err = {0};
    pthread_t th;
    early_call_t a = {.name = "fpEarly"};
    fp_register("fpEarly");
    fp_eval_early("fpEarly", &e);   /* off: nothing fires, nothing to apply */
    CHECK(!e.fired);
    CHECK_INT(fp_late(&e, &err), 0);
    conf("{\"configureFailPoint\": \"fpEarly\", \"mode\": {\"times\": 1}, "
         "\"data\": {\"action\": \"error\", \"code\": 96}}");
    fp_eval_early("fpEarly", &e);
    CHECK(e.fired);
    CHECK_INT(fp_late(&e, &err), 96);
    fp_eval_early("fpEarly", &e);   /* {times: 1} used up */
    CHECK(!e.fired);
    /* hang: held in the early half, before any lock the caller would take */
    int64_t n = entered("fpEarly");
    conf("{\"configureFailPoint\": \"fpEarly\", \"mode\": \"alwaysOn\"}");
    pthread_create(&th, NULL, early_main, &a);
    for (int i = 0; i < 500 && entered("fpEarly") == n; i++) t_sleep_ms(10);
    CHECK_INT(entered("fpEarly"), n + 1);
    t_sleep_ms(50);
    CHECK_INT(atomic_load(&a.stage), 0);
    conf("{\"configureFailPoint\": \"fpEarly\", \"mode\": \"off\"}");
    pthread_join(th, NULL);
    CHECK_INT(atomic_load(&a.stage), 2);
    CHECK_INT(a.late_rc, 0);
    /* holdLocks: the early half returns, the late half (inside the lock) holds */
    atomic_store(&a.stage, 0);
    conf("{\"configureFailPoint\": \"fpEarly\", \"mode\": \"alwaysOn\", "
         "\"data\": {\"holdLocks\": true}}");
    pthread_create(&th, NULL, early_main, &a);
    for (int i = 0; i < 500 && atomic_load(&a.stage) == 0; i++) t_sleep_ms(10);
    t_sleep_ms(50);
    CHECK_INT(atomic_load(&a.stage), 1);
    conf("{\"configureFailPoint\": \"fpEarly\", \"mode\": \"off\"}");
    pthread_join(th, NULL);
    CHECK_INT(atomic_load(&a.stage), 2);
    CHECK_INT(a.late_rc, 0);
}

/* fp_eval_held: the caller's slot names the point exactly while a hang holds the thread
 * (already when waitForFailPoint's count moves), and never for a point that does not hang. */
typedef struct held_call {
    pthread_mutex_t mu;
    const char *held_at;   /* under mu */
    atomic_int done;
    int rc;
} held_call_t;

static void *held_main(void *p) {
    held_call_t *a = p;
    ms_error_t err = {0};
    fp_held_t h = {.mu = &a->mu, .slot = &a->held_at};
    a->rc = fp_eval_held("fpHeld", &h, &err);
    atomic_store(&a->done, 1);
    return NULL;
}

static const char *held_at(held_call_t *a) {
    pthread_mutex_lock(&a->mu);
    const char *s = a->held_at;
    pthread_mutex_unlock(&a->mu);
    return s;
}

static void fp_held_slot(void) {
    held_call_t a = {.mu = PTHREAD_MUTEX_INITIALIZER};
    pthread_t th;
    ms_error_t err = {0};
    fp_held_t h = {.mu = &a.mu, .slot = &a.held_at};
    fp_register("fpHeld");
    CHECK_INT(fp_eval_held("fpHeld", &h, &err), 0);   /* off */
    CHECK(held_at(&a) == NULL);
    conf("{\"configureFailPoint\": \"fpHeld\", \"mode\": {\"times\": 1}, "
         "\"data\": {\"action\": \"error\", \"code\": 96}}");
    CHECK_INT(fp_eval_held("fpHeld", &h, &err), 96);  /* an error is not a hold */
    CHECK(held_at(&a) == NULL);
    int64_t n = entered("fpHeld");
    conf("{\"configureFailPoint\": \"fpHeld\", \"mode\": \"alwaysOn\"}");
    pthread_create(&th, NULL, held_main, &a);
    for (int i = 0; i < 500 && entered("fpHeld") == n; i++) t_sleep_ms(10);
    CHECK_INT(entered("fpHeld"), n + 1);
    CHECK_STR(held_at(&a), "fpHeld");   /* set before the count moved */
    t_sleep_ms(30);
    CHECK_INT(atomic_load(&a.done), 0);
    CHECK_STR(held_at(&a), "fpHeld");
    conf("{\"configureFailPoint\": \"fpHeld\", \"mode\": \"off\"}");
    pthread_join(th, NULL);
    CHECK_INT(a.rc, 0);
    CHECK(held_at(&a) == NULL);
}

T_MAIN(T_CASE(fp_modes), T_CASE(fp_error_action), T_CASE(fp_bad_config), T_CASE(fp_status),
       T_CASE(fp_check_predicate), T_CASE(fp_hang_release), T_CASE(fp_crash_action),
       T_CASE(fp_release_everything), T_CASE(fp_early_late), T_CASE(fp_held_slot))
