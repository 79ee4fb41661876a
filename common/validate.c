/*
 * validate.c — MongoDB's rules for database and collection names and for numeric command
 * arguments (see validate.h). Runs in every daemon, called by common/cmd.c dispatch before
 * any handler and by handlers for names found inside a command (getMore's collection, an
 * explained find).
 */
#include "common/validate.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/limits.h"

/* Bytes of a name quoted in an errmsg: enough to recognise it, bounded for huge input. */
#define VAL_SHOWN_BYTES_MAX 128

/* A printable copy of a name from the wire for an errmsg: NUL (which a C string cannot
 * carry) shows as \x00; other bytes are kept (the log escapes them, a reply carries them). */
static const char *val_shown(char *dst, size_t cap, const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len && i < VAL_SHOWN_BYTES_MAX && n + 5 < cap; i++) {
        if (s[i] == '\0') {
            memcpy(dst + n, "\\x00", 4);
            n += 4;
        } else {
            dst[n++] = s[i];
        }
    }
    if (len > VAL_SHOWN_BYTES_MAX && n + 4 < cap) {
        memcpy(dst + n, "...", 3);
        n += 3;
    }
    dst[n] = '\0';
    return dst;
}

int val_db_name(const char *name, size_t len, ms_error_t *err) {
    char shown[VAL_SHOWN_BYTES_MAX * 4 + 8];
    /* MongoDB: size() >= 64 is invalid (MaxDatabaseNameLen = 64 with the NUL). */
    if (len >= 64)
        return err_set(err, MS_ERR_INVALID_NAMESPACE,
                       "db name must be at most 63 characters, found: %zu", len);
    if (len == 0) return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid database name: ''");
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        /* validDBName's set (the Windows characters on every platform, so a database can
         * move between machines) plus control characters, which no name needs and which
         * would otherwise reach one-line logs and file-like outputs raw. */
        if (ch < 0x20 || ch == 0x7f || strchr("/\\. \"$*<>:|?", ch))
            return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid database name: '%s'",
                           val_shown(shown, sizeof shown, name, len));
    }
    return 0;
}

/* MongoDB's NamespaceString::isLegalClientSystemNS: the system collections a client may
 * write or create. */
static bool val_legal_system(const char *db, const char *coll, size_t len) {
    static const char *const any_db[] = {"system.users", "system.js", "system.views"};
    static const struct {
        const char *db, *coll;
    } per_db[] = {
        {"admin", "system.roles"},      {"admin", "system.version"},
        {"admin", "system.keys"},       {"admin", "system.backup_users"},
        {"admin", "system.new_users"},  {"config", "system.sessions"},
        {"local", "system.replset"},
    };
    for (size_t i = 0; i < sizeof any_db / sizeof any_db[0]; i++)
        if (strlen(any_db[i]) == len && memcmp(any_db[i], coll, len) == 0) return true;
    for (size_t i = 0; i < sizeof per_db / sizeof per_db[0]; i++)
        if (strcmp(per_db[i].db, db) == 0 && strlen(per_db[i].coll) == len &&
            memcmp(per_db[i].coll, coll, len) == 0)
            return true;
    return false;
}

int val_coll_name(const char *db, const char *coll, size_t len, bool write, ms_error_t *err) {
    char shown[VAL_SHOWN_BYTES_MAX * 4 + 8];
    size_t dblen = strlen(db);
    if (len == 0)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Collection names cannot be empty");
    if (coll[0] == '.')
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Collection names cannot start with '.': %s",
                       val_shown(shown, sizeof shown, coll, len));
    /* validCollectionName: no NUL (a C-string view would silently cut the name) and no '$'. */
    if (memchr(coll, '\0', len) || memchr(coll, '$', len))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s.%s'", db,
                       val_shown(shown, sizeof shown, coll, len));
    if (dblen + 1 + len > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE,
                       "Fully qualified namespace is too long. Namespace: %s.%s Max: %d", db,
                       val_shown(shown, sizeof shown, coll, len), MS_NS_BYTES_MAX);
    if (write && len >= 7 && memcmp(coll, "system.", 7) == 0 && !val_legal_system(db, coll, len))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid system namespace: %s.%s", db,
                       val_shown(shown, sizeof shown, coll, len));
    return 0;
}

int val_full_ns(const char *ns, size_t len, bool write, ms_error_t *err) {
    char db[64];
    const char *dot = memchr(ns, '.', len);
    size_t dblen;
    int rc;
    if (!dot) {
        char shown[VAL_SHOWN_BYTES_MAX * 4 + 8];
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "Invalid namespace specified '%s'",
                       val_shown(shown, sizeof shown, ns, len));
    }
    dblen = (size_t)(dot - ns);
    if ((rc = val_db_name(ns, dblen, err)) != 0) return rc;
    memcpy(db, ns, dblen);   /* dblen < 64: val_db_name checked it */
    db[dblen] = '\0';
    return val_coll_name(db, dot + 1, len - dblen - 1, write, err);
}

/* ---- numbers ------------------------------------------------------------------------ */

/* 2^63 as a double: the first value past INT64_MAX. */
#define VAL_TWO_POW_63 9223372036854775808.0

int val_int64(const bson_iter_t *it, const char *field, int64_t *out, ms_error_t *err) {
    double d;
    bson_type_t t = bson_iter_type(it);
    if (t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64) {
        *out = bson_iter_as_int64(it);
        return 0;
    }
    if (!bsonx_as_double(it, &d))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "Expected a number in: %s", field);
    /* The texts of MongoDB's BSONElement::parseIntegerElementToLong. */
    if (isnan(d))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "Expected an integer, but found NaN in: %s: %g",
                       field, d);
    if (d >= VAL_TWO_POW_63 || d < -VAL_TWO_POW_63)
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "Cannot represent as a 64-bit integer: %s: %g",
                       field, d);
    if (trunc(d) != d)
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "Expected an integer: %s: %g", field, d);
    *out = (int64_t)d;
    return 0;
}

int val_int64_min(const bson_iter_t *it, const char *field, int64_t min, int64_t *out,
                  ms_error_t *err) {
    int rc = val_int64(it, field, out, err);
    if (rc) return rc;
    if (*out < min)
        return err_set(err, MS_ERR_IDL_VALUE_TOO_LOW,
                       "BSON field '%s' value must be >= %lld, actual value '%lld'", field,
                       (long long)min, (long long)*out);
    return 0;
}

int val_rename(const char *from, const char *to, ms_error_t *err) {
    const char *fd = strchr(from, '.'), *td = strchr(to, '.');
    if (!fd || !td || fd - from != td - to || strncmp(from, to, (size_t)(fd - from)) != 0)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION,
                       "Source and destination collections must be on the same database: "
                       "minishard does not rename across databases");
    if (strcmp(from, to) == 0)
        return err_set(err, MS_ERR_ILLEGAL_OPERATION, "Can't rename a collection to itself");
    return 0;
}

int val_scale(const bson_iter_t *it, const char *field, int64_t *out, ms_error_t *err) {
    double d;
    if (bson_iter_type(it) == BSON_TYPE_INT32 || bson_iter_type(it) == BSON_TYPE_INT64) {
        *out = bson_iter_as_int64(it);
    } else {
        if (!bsonx_as_double(it, &d))
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "Expected a number in: %s", field);
        if (isnan(d))
            return err_set(err, MS_ERR_FAILED_TO_PARSE,
                           "Expected an integer, but found NaN in: %s: %g", field, d);
        d = trunc(d);
        *out = d >= VAL_TWO_POW_63 ? INT64_MAX : d < -VAL_TWO_POW_63 ? INT64_MIN : (int64_t)d;
    }
    if (*out < 1)
        return err_set(err, MS_ERR_IDL_VALUE_TOO_LOW,
                       "BSON field '%s' value must be >= 1, actual value '%lld'", field,
                       (long long)*out);
    return 0;
}

int val_num_field(const bson_iter_t *it, const char *field, int check, ms_error_t *err) {
    int64_t v;
    int rc;
    switch (check) {
    case VAL_I64: return val_int64(it, field, &v, err);
    case VAL_I64_NONNEG: return val_int64_min(it, field, 0, &v, err);
    case VAL_GETMORE_BATCH:
        if ((rc = val_int64(it, field, &v, err)) != 0) return rc;
        if (v < 0)
            return err_set(err, MS_ERR_BAD_VALUE,
                           "Batch size for getMore must be non-negative, but received: %lld",
                           (long long)v);
        return 0;
    default: return 0;
    }
}
