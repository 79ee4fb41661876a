/*
 * errors.c — code names and the boundary translations of SQLite and NNG errors.
 * Used by every process.
 */
#include "common/errors.h"

#include <nng/nng.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"

const char *err_code_name(int code) {
    switch (code) {
    case MS_OK: return "OK";
#define MS_ERR_NAME_ROW(name, num, str) case num: return str;
        MS_ERROR_LIST(MS_ERR_NAME_ROW)
#undef MS_ERR_NAME_ROW
    default: break;
    }
    {
        /* "Location" + up to 11 characters of an int: returned to one thread at a time. */
        static _Thread_local char loc[24];
        snprintf(loc, sizeof loc, "Location%d", code);
        return loc;
    }
}

bool err_code_is_retriable(int code) {
    switch (code) {
    case MS_ERR_HOST_UNREACHABLE:
    case MS_ERR_HOST_NOT_FOUND:
    case MS_ERR_NETWORK_TIMEOUT:
    case MS_ERR_SHUTDOWN_IN_PROGRESS:
    case MS_ERR_READ_CONCERN_MAJORITY_NOT_AVAILABLE_YET:
    case MS_ERR_PRIMARY_STEPPED_DOWN:
    case MS_ERR_EXCEEDED_TIME_LIMIT:
    case MS_ERR_CONNECTION_POOL_EXPIRED:
    case MS_ERR_SOCKET_EXCEPTION:
    case MS_ERR_NOT_WRITABLE_PRIMARY:
    case MS_ERR_INTERRUPTED_AT_SHUTDOWN:
    case MS_ERR_INTERRUPTED_DUE_TO_REPL_STATE_CHANGE:
    case MS_ERR_NOT_PRIMARY_NO_SECONDARY_OK:
    case MS_ERR_NOT_PRIMARY_OR_SECONDARY:
        return true;
    default:
        return false;
    }
}

int err_setv(ms_error_t *err, int code, const char *fmt, va_list ap) {
    if (err) {
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    }
    return code;
}

int err_set(ms_error_t *err, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_setv(err, code, fmt, ap);
    va_end(ap);
    return code;
}

void err_prefix(ms_error_t *err, const char *fmt, ...) {
    char head[256], old[MS_ERRMSG_BYTES];
    va_list ap;
    if (!err) return;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    /* Truncation is fine: the head matters most and the line stays bounded. */
    int n = snprintf(err->msg, sizeof err->msg, "%.200s: ", head);
    if (n > 0 && (size_t)n < sizeof err->msg)
        snprintf(err->msg + n, sizeof err->msg - (size_t)n, "%.*s", (int)(sizeof err->msg - (size_t)n - 1), old);
}

int err_from_sqlite(ms_error_t *err, int rc, const char *what, void *db) {
    const char *text = db ? sqlite3_errmsg((sqlite3 *)db) : sqlite3_errstr(rc);
    int code = MS_ERR_INTERNAL;
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED: code = MS_ERR_LOCK_TIMEOUT; break;
    case SQLITE_TOOBIG: code = MS_ERR_BSON_OBJECT_TOO_LARGE; break;
    case SQLITE_CONSTRAINT: code = MS_ERR_DUPLICATE_KEY; break;
    default: break;
    }
    log_error("sqlite error op=%s rc=%d text=%s", log_str(what), rc, log_str(text));
    return err_set(err, code, "%s: sqlite: %s", what, text);
}

int err_from_nng(ms_error_t *err, int rv, const char *what) {
    int code;
    switch (rv) {
    case NNG_ETIMEDOUT: code = MS_ERR_NETWORK_TIMEOUT; break;
    case NNG_ECLOSED:
    case NNG_ECONNREFUSED:
    case NNG_ECONNRESET:
    case NNG_ECONNSHUT:
    case NNG_EADDRINVAL:
    case NNG_EUNREACHABLE: code = MS_ERR_HOST_UNREACHABLE; break;
    case NNG_EMSGSIZE: code = MS_ERR_BSON_OBJECT_TOO_LARGE; break;
    case NNG_ENOMEM: code = MS_ERR_EXCEEDED_MEMORY_LIMIT; break;
    case NNG_EADDRINUSE: code = MS_ERR_ILLEGAL_OPERATION; break;
    default: code = MS_ERR_INTERNAL; break;
    }
    return err_set(err, code, "%s: nng: %s", what, nng_strerror(rv));
}
