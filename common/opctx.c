/*
 * opctx.c — the operation running on the calling thread (see opctx.h): its connection
 * and its maxTimeMS deadline, kept thread-local because a request runs on one worker.
 */
#include "common/opctx.h"

#include <math.h>
#include <stdint.h>

#include "common/bsonx.h"
#include "common/log.h"

static _Thread_local uint32_t op_conn_id;
static _Thread_local long long op_deadline_mono_ms;

void op_set_conn(uint32_t conn_id) { op_conn_id = conn_id; }
uint32_t op_conn(void) { return op_conn_id; }

void op_set_deadline_ms(long long deadline_mono_ms) { op_deadline_mono_ms = deadline_mono_ms; }
long long op_deadline_ms(void) { return op_deadline_mono_ms; }

long long op_time_left_ms(long long dflt_ms) {
    long long left;
    if (op_deadline_mono_ms <= 0) return dflt_ms;
    left = op_deadline_mono_ms - time_mono_ms();
    if (left <= 0) return 0;
    return dflt_ms > 0 && dflt_ms < left ? dflt_ms : left;
}

int op_check(ms_error_t *err) {
    if (op_deadline_mono_ms <= 0 || time_mono_ms() < op_deadline_mono_ms) return 0;
    return err_set(err, MS_ERR_MAX_TIME_MS_EXPIRED, "operation exceeded time limit");
}

int op_parse_max_time_ms(const bson_iter_t *it, long long *ms_out, ms_error_t *err) {
    double d;
    if (!bsonx_is_number(it) || !bsonx_as_double(it, &d))
        return err_set(err, MS_ERR_BAD_VALUE, "maxTimeMS must be a number");
    if (isnan(d) || d != floor(d))
        return err_set(err, MS_ERR_BAD_VALUE, "maxTimeMS has non-integral value");
    if (d < 0) return err_set(err, MS_ERR_BAD_VALUE, "maxTimeMS value for command cannot be negative");
    if (d > INT32_MAX) return err_set(err, MS_ERR_BAD_VALUE, "maxTimeMS value is out of range");
    *ms_out = (long long)d;
    return 0;
}
