/*
 * test_common_opctx.c — the operation context (common/opctx.c): maxTimeMS parsed as
 * MongoDB's parseMaxTimeMS parses it (types, range before integrality, the messages),
 * op_check before and after the deadline and its sticky expiry, op_time_left_ms with and
 * without a default, and the maxTimeAlwaysTimeOut / maxTimeNeverTimeOut failpoints.
 */
#include <time.h>

#include "common/failpoint.h"
#include "common/log.h"
#include "common/opctx.h"
#include "tests/unit/t.h"

/* Parses {maxTimeMS: <json value>}: the return code, *ms and the message. */
static int parse_json(const char *json, long long *ms, ms_error_t *err) {
    bson_t doc;
    bson_iter_t it;
    int rc = -1;
    memset(err, 0, sizeof *err);
    if (!t_json(json, &doc)) return -1;
    if (bson_iter_init_find(&it, &doc, "maxTimeMS")) rc = op_parse_max_time_ms(&it, ms, err);
    bson_destroy(&doc);
    return rc;
}

static void opctx_parse_accepts(void) {
    static const struct { const char *json; long long want; } ok[] = {
        {"{\"maxTimeMS\": 0}", 0},
        {"{\"maxTimeMS\": 1}", 1},
        {"{\"maxTimeMS\": 2147483647}", 2147483647},
        {"{\"maxTimeMS\": {\"$numberLong\": \"1000\"}}", 1000},
        {"{\"maxTimeMS\": 5.0}", 5},
        {"{\"maxTimeMS\": -0.0}", 0},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        long long ms = -7;
        ms_error_t err;
        CHECK_MSG(parse_json(ok[i].json, &ms, &err) == 0, "%s refused: %s", ok[i].json, err.msg);
        CHECK_MSG(ms == ok[i].want, "%s gave %lld", ok[i].json, ms);
    }
}

static void opctx_parse_refuses(void) {
    static const struct { const char *json; const char *msg; } bad[] = {
        {"{\"maxTimeMS\": \"x\"}", "maxTimeMS must be a number"},
        {"{\"maxTimeMS\": true}", "maxTimeMS must be a number"},
        {"{\"maxTimeMS\": null}", "maxTimeMS must be a number"},
        {"{\"maxTimeMS\": {\"a\": 1}}", "maxTimeMS must be a number"},
        {"{\"maxTimeMS\": -1}", "-1 value for maxTimeMS is out of range"},
        {"{\"maxTimeMS\": 2147483648}", "2147483648 value for maxTimeMS is out of range"},
        {"{\"maxTimeMS\": {\"$numberLong\": \"-5\"}}", "-5 value for maxTimeMS is out of range"},
        /* range first, as MongoDB: -1.5 truncates to -1 (out of range) ... */
        {"{\"maxTimeMS\": -1.5}", "-1 value for maxTimeMS is out of range"},
        /* ... while 1.5 is in range and not integral */
        {"{\"maxTimeMS\": 1.5}", "maxTimeMS has non-integral value"},
        {"{\"maxTimeMS\": 1e300}", "9223372036854775807 value for maxTimeMS is out of range"},
        {"{\"maxTimeMS\": {\"$numberDouble\": \"NaN\"}}", "maxTimeMS has non-integral value"},
        {"{\"maxTimeMS\": {\"$numberDouble\": \"-Infinity\"}}",
         "-9223372036854775808 value for maxTimeMS is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long long ms = -7;
        ms_error_t err;
        int rc = parse_json(bad[i].json, &ms, &err);
        CHECK_MSG(rc == MS_ERR_BAD_VALUE, "%s: rc %d", bad[i].json, rc);
        CHECK_STR(err.msg, bad[i].msg);
        CHECK_MSG(ms == -7, "%s wrote *ms_out on failure", bad[i].json);
    }
}

static void opctx_check_and_time_left(void) {
    ms_error_t err = {0};
    op_set_deadline_ms(0);
    CHECK_INT(op_check(&err), 0);
    CHECK_INT(op_time_left_ms(0), 0);        /* no deadline: the default */
    CHECK_INT(op_time_left_ms(30000), 30000);

    op_set_deadline_ms(time_mono_ms() + 60000);
    CHECK_INT(op_check(&err), 0);
    long long left = op_time_left_ms(0);
    CHECK_MSG(left > 50000 && left <= 60000, "left %lld", left);
    CHECK_INT(op_time_left_ms(500), 500);    /* the smaller of the two */

    op_set_deadline_ms(time_mono_ms() + 20);
    t_sleep_ms(40);
    CHECK_INT(op_time_left_ms(0), 0);
    CHECK_INT(op_time_left_ms(30000), 0);
    CHECK_INT(op_check(&err), MS_ERR_MAX_TIME_MS_EXPIRED);
    CHECK_INT(err.code, MS_ERR_MAX_TIME_MS_EXPIRED);
    CHECK_STR(err.msg, "operation exceeded time limit");
    CHECK_INT(op_check(&err), MS_ERR_MAX_TIME_MS_EXPIRED);   /* stays expired */
    op_set_deadline_ms(0);
    CHECK_INT(op_check(&err), 0);
}

static void set_mode(const char *name, const char *mode) {
    bson_t cmd, reply = BSON_INITIALIZER;
    ms_error_t err = {0};
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "configureFailPoint", name);
    BSON_APPEND_UTF8(&cmd, "mode", mode);
    CHECK_INT(fp_configure(&cmd, &reply, &err), 0);
    bson_destroy(&cmd);
    bson_destroy(&reply);
}

static void opctx_failpoints(void) {
    ms_error_t err = {0};
    op_register_failpoints();

    /* maxTimeAlwaysTimeOut: only operations with a deadline, and from then on. */
    set_mode(OP_FP_MAX_TIME_ALWAYS_TIME_OUT, "alwaysOn");
    op_set_deadline_ms(0);
    CHECK_INT(op_check(&err), 0);
    op_set_deadline_ms(time_mono_ms() + 600000);
    CHECK_INT(op_check(&err), MS_ERR_MAX_TIME_MS_EXPIRED);
    CHECK_INT(op_time_left_ms(1000), 0);
    set_mode(OP_FP_MAX_TIME_ALWAYS_TIME_OUT, "off");
    CHECK_INT(op_check(&err), MS_ERR_MAX_TIME_MS_EXPIRED);   /* killed stays killed */
    op_set_deadline_ms(time_mono_ms() + 600000);
    CHECK_INT(op_check(&err), 0);

    /* maxTimeNeverTimeOut: a passed deadline does not fire. */
    set_mode(OP_FP_MAX_TIME_NEVER_TIME_OUT, "alwaysOn");
    op_set_deadline_ms(time_mono_ms() + 5);
    t_sleep_ms(20);
    CHECK_INT(op_check(&err), 0);
    set_mode(OP_FP_MAX_TIME_NEVER_TIME_OUT, "off");
    CHECK_INT(op_check(&err), MS_ERR_MAX_TIME_MS_EXPIRED);
    op_set_deadline_ms(0);
}

static void opctx_conn(void) {
    op_set_conn(42);
    CHECK_INT(op_conn(), 42);
    op_set_conn(0);
    CHECK_INT(op_conn(), 0);
}

T_MAIN(T_CASE(opctx_parse_accepts), T_CASE(opctx_parse_refuses),
       T_CASE(opctx_check_and_time_left), T_CASE(opctx_failpoints), T_CASE(opctx_conn))
