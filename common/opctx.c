/*
 * opctx.c — the operation running on the calling thread (see opctx.h), in every daemon:
 * its connection and its maxTimeMS deadline, kept thread-local because a request runs on
 * one worker; the interrupt check and its two test failpoints.
 */
#include "common/opctx.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/failpoint.h"
#include "common/log.h"

static _Thread_local uint32_t op_conn_id;
static _Thread_local long long op_deadline_mono_ms;

void op_set_conn(uint32_t conn_id) { op_conn_id = conn_id; }
uint32_t op_conn(void) { return op_conn_id; }

static _Thread_local const char *op_peer_name;
void op_set_peer(const char *peer) { op_peer_name = peer; }
const char *op_peer(void) { return op_peer_name ? op_peer_name : "unknown"; }

static _Thread_local op_client_t *op_client_now;
void op_set_client(op_client_t *client) { op_client_now = client; }
op_client_t *op_client(void) { return op_client_now; }

static _Thread_local bool op_close_asked;
void op_close_connection(void) { op_close_asked = true; }
bool op_take_close(void) {
    bool asked = op_close_asked;
    op_close_asked = false;
    return asked;
}

static _Thread_local op_lsid_t op_session;
void op_set_lsid(const op_lsid_t *l) {
    if (l) op_session = *l;
    else memset(&op_session, 0, sizeof op_session);
}
void op_get_lsid(op_lsid_t *out) { *out = op_session; }

void op_lsid_of(const bson_t *cmd, op_lsid_t *out) {
    bson_iter_t it, id;
    const uint8_t *data = NULL;
    uint32_t len = 0;
    bson_subtype_t st;
    memset(out, 0, sizeof *out);
    if (!bson_iter_init_find(&it, cmd, "lsid") || !BSON_ITER_HOLDS_DOCUMENT(&it) ||
        !bson_iter_recurse(&it, &id) || !bson_iter_find(&id, "id") || !BSON_ITER_HOLDS_BINARY(&id))
        return;
    bson_iter_binary(&id, &st, &len, &data);
    if (len != sizeof out->id) return;
    memcpy(out->id, data, sizeof out->id);
    out->has = true;
}

void op_lsid_text(const op_lsid_t *l, char *dst, size_t cap) {
    static const char hex[] = "0123456789abcdef";
    char uuid[37];
    size_t n = 0;
    if (!l->has) {
        snprintf(dst, cap, "none");
        return;
    }
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) uuid[n++] = '-';
        uuid[n++] = hex[l->id[i] >> 4];
        uuid[n++] = hex[l->id[i] & 15];
    }
    uuid[n] = '\0';
    snprintf(dst, cap, "{ id: UUID(\"%s\") }", uuid);
}

void op_append_lsid(bson_t *cmd) {
    bson_t sub;
    if (!op_session.has) return;
    BSON_APPEND_DOCUMENT_BEGIN(cmd, "lsid", &sub);
    bson_append_binary(&sub, "id", 2, BSON_SUBTYPE_UUID, op_session.id, sizeof op_session.id);
    bson_append_document_end(cmd, &sub);
}
static _Thread_local op_await_t *op_await_cur;
void op_set_await(op_await_t *a) { op_await_cur = a; }
op_await_t *op_await(void) { return op_await_cur; }

void op_set_deadline_ms(long long deadline_mono_ms) { op_deadline_mono_ms = deadline_mono_ms; }
long long op_deadline_ms(void) { return op_deadline_mono_ms; }

long long op_time_left_ms(long long dflt_ms) {
    long long left;
    if (op_deadline_mono_ms <= 0) return dflt_ms;
    left = op_deadline_mono_ms - time_mono_ms();
    if (left <= 0) return 0;
    return dflt_ms > 0 && dflt_ms < left ? dflt_ms : left;
}

void op_register_failpoints(void) {
    fp_register(OP_FP_MAX_TIME_ALWAYS_TIME_OUT);
    fp_register(OP_FP_MAX_TIME_NEVER_TIME_OUT);
}

int op_check(ms_error_t *err) {
    if (op_deadline_mono_ms <= 0) return 0;
    /* The failpoints are looked up only for operations with a deadline (a short walk of
     * the registered names): cheap beside the documents read between two checks. */
    if (fp_check(OP_FP_MAX_TIME_ALWAYS_TIME_OUT, NULL, NULL, NULL))
        op_deadline_mono_ms = 1;   /* killed: every later check fails too */
    else if (fp_active(OP_FP_MAX_TIME_NEVER_TIME_OUT) && op_deadline_mono_ms > 1)
        return 0;
    if (time_mono_ms() < op_deadline_mono_ms) return 0;
    op_deadline_mono_ms = 1;
    return err_set(err, MS_ERR_MAX_TIME_MS_EXPIRED, "operation exceeded time limit");
}

/* BSONElement::safeNumberLong of a double: NaN reads as 0, values beyond int64 clamp. */
static long long op_safe_long(double d) {
    if (isnan(d)) return 0;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    return (long long)d;
}

int op_parse_max_time_ms(const bson_iter_t *it, long long *ms_out, ms_error_t *err) {
    bool is_double = BSON_ITER_HOLDS_DOUBLE(it);
    long long v;
    double d = 0;
    if (!bsonx_is_number(it) || !bsonx_as_double(it, &d))
        return err_set(err, MS_ERR_BAD_VALUE, "maxTimeMS must be a number");
    if (BSON_ITER_HOLDS_INT32(it) || BSON_ITER_HOLDS_INT64(it)) v = bson_iter_as_int64(it);
    else v = op_safe_long(d);
    /* MongoDB checks the range before integrality: -1.5 is out of range, 1.5 is not
     * integral. */
    if (v < 0 || v > INT32_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "%lld value for maxTimeMS is out of range", v);
    if (is_double && floor(d) != d)
        return err_set(err, MS_ERR_BAD_VALUE, "maxTimeMS has non-integral value");
    *ms_out = v;
    return 0;
}
