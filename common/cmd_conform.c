/*
 * cmd_conform.c — checks of a command's document that MongoDB applies to many commands
 * at once, run by dispatch (cmd.c) in every daemon before the handler, so a router
 * refuses before it routes and a shard refuses a direct client the same way:
 *
 *   - the Stable API fields apiVersion, apiStrict, apiDeprecationErrors
 *     (MongoDB's initializeAPIParameters);
 *   - `collation` wherever a command takes one: minishard compares strings by their bytes
 *     (the simple collation) and refuses any other, rather than answer as if it had
 *     honoured it;
 *   - the options of `create` minishard does not implement (views, capped, time series,
 *     clustered, validators, change-stream images, queryable encryption).
 */
#include <string.h>

#include "common/bsonx.h"
#include "common/cmd.h"
#include "common/log.h"

/* ---- Stable API ------------------------------------------------------------------ */

/* The commands of API version 1 that minishard serves or may meet (MongoDB 7.0's list:
 * docs "Stable API Changelog"; count since 6.0). distinct and explain are not in it. */
static const char *const cmd_api_v1[] = {
    "abortTransaction", "aggregate", "authenticate", "collMod", "commitTransaction", "count",
    "create", "createIndexes", "delete", "drop", "dropDatabase", "dropIndexes", "endSessions",
    "find", "findAndModify", "findandmodify", "getMore", "hello", "insert", "killCursors",
    "listCollections", "listDatabases", "listIndexes", "ping", "refreshSessions", "update",
    NULL};

bool cmd_in_api_v1(const char *name) {
    for (int i = 0; cmd_api_v1[i]; i++)
        if (strcmp(cmd_api_v1[i], name) == 0) return true;
    return false;
}

static int cmd_api_field_type(const bson_iter_t *it, const char *field, bson_type_t want,
                              const char *want_name, ms_error_t *err) {
    if (bson_iter_type(it) == want) return 0;
    return err_set(err, MS_ERR_TYPE_MISMATCH,
                   "BSON field 'APIParametersFromClient.%s' is the wrong type '%s', expected "
                   "type '%s'", field, bsonx_type_name(bson_iter_type(it)), want_name);
}

int cmd_check_api_params(const char *name, const bson_t *req, ms_error_t *err) {
    bson_iter_t ver, strict, dep;
    bool has_ver = bson_iter_init_find(&ver, req, "apiVersion");
    bool has_strict = bson_iter_init_find(&strict, req, "apiStrict");
    bool has_dep = bson_iter_init_find(&dep, req, "apiDeprecationErrors");
    int rc;
    /* Peer-to-peer commands are not client commands: MongoDB's internal commands skip the
     * check (skipApiVersionCheck), and a router's copy of a client's fields may reach one. */
    if (name[0] == '_') return 0;
    if (has_ver && (rc = cmd_api_field_type(&ver, "apiVersion", BSON_TYPE_UTF8, "string", err)))
        return rc;
    if (has_strict && (rc = cmd_api_field_type(&strict, "apiStrict", BSON_TYPE_BOOL, "bool", err)))
        return rc;
    if (has_dep &&
        (rc = cmd_api_field_type(&dep, "apiDeprecationErrors", BSON_TYPE_BOOL, "bool", err)))
        return rc;
    if ((has_strict || has_dep) && !has_ver)
        return err_set(err, MS_ERR_LOC_4886600,
                       "Provided apiStrict and/or apiDeprecationErrors without passing apiVersion");
    if (!has_ver) return 0;
    uint32_t len = 0;
    const char *v = bson_iter_utf8(&ver, &len);
    if (len != 1 || v[0] != '1')   /* by length: "1\0x" is not "1" */
        return err_set(err, MS_ERR_API_VERSION_ERROR, "API version must be \"1\"");
    if (has_strict && bson_iter_bool(&strict) && !cmd_in_api_v1(name))
        return err_set(err, MS_ERR_API_STRICT_ERROR,
                       "Provided apiStrict:true, but the command %s is not in API Version 1",
                       name);
    /* apiDeprecationErrors: no command of version 1 is deprecated, so nothing to refuse. */
    return 0;
}

/* ---- collation ------------------------------------------------------------------- */

/* One collation value at `where` (the field's path, for the message): absent and
 * {locale: "simple"} are the byte-wise comparison minishard does; anything else would
 * need ICU's collators and is refused. MongoDB's own codes for a malformed spec
 * (TypeMismatch, 40414 for a missing locale); BadValue (2) for a well-formed one minishard
 * cannot honour, as a mongod answers a locale its ICU does not know. */
static int cmd_check_one_collation(const char *where, const bson_iter_t *it, ms_error_t *err) {
    bson_t spec;
    bson_iter_t loc;
    char *js;
    int rc;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bsonx_view_container(it, &spec))
        return err_set(err, MS_ERR_TYPE_MISMATCH,
                       "BSON field '%s' is the wrong type '%s', expected type 'object'", where,
                       bsonx_type_name(bson_iter_type(it)));
    if (!bson_iter_init_find(&loc, &spec, "locale"))
        return err_set(err, MS_ERR_IDL_MISSING_FIELD,
                       "BSON field 'Collation.locale' is missing but a required field");
    if (!BSON_ITER_HOLDS_UTF8(&loc))
        return err_set(err, MS_ERR_TYPE_MISMATCH,
                       "BSON field 'Collation.locale' is the wrong type '%s', expected type "
                       "'string'", bsonx_type_name(bson_iter_type(&loc)));
    if (strcmp(bson_iter_utf8(&loc, NULL), "simple") == 0 && bson_count_keys(&spec) == 1) return 0;
    js = bsonx_to_json(&spec);
    rc = err_set(err, MS_ERR_BAD_VALUE,
                 "%s %s is not supported: minishard compares strings by their bytes (the "
                 "simple collation) only; omit it or pass {locale: \"simple\"}", where,
                 js ? js : "?");
    bson_free(js);
    log_warn("collation refused where=%s", log_str(where));
    return rc;
}

/* The `collation` of each document in the array field `arr` of cmd (update and delete
 * statements, createIndexes's index specs). */
static int cmd_check_collations_in(const char *cmd, const bson_t *doc, const char *arr,
                                   ms_error_t *err) {
    bson_iter_t it, el, c;
    char where[160];
    int rc;
    if (!bson_iter_init_find(&it, doc, arr) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &el))
        return 0;
    while (bson_iter_next(&el)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&el) || !bson_iter_recurse(&el, &c) ||
            !bson_iter_find(&c, "collation"))
            continue;
        snprintf(where, sizeof where, "%s.%s.%s.collation", cmd, arr, bson_iter_key(&el));
        if ((rc = cmd_check_one_collation(where, &c, err)) != 0) return rc;
    }
    return 0;
}

int cmd_check_collation(const bson_t *doc, ms_error_t *err) {
    static const char *const arrays[] = {"updates", "deletes", "indexes", NULL};
    bson_iter_t it;
    char cmd[64], where[96];
    int rc;
    if (!bson_iter_init(&it, doc) || !bson_iter_next(&it)) return 0;
    snprintf(cmd, sizeof cmd, "%s", bson_iter_key(&it));
    /* explain's inner command is a command of its own (one level: explain of explain is
     * refused by the inner command's table). */
    if (strcmp(cmd, "explain") == 0 && BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t inner;
        if (bsonx_view_container(&it, &inner) && (rc = cmd_check_collation(&inner, err)) != 0)
            return rc;
    }
    if (bson_iter_init_find(&it, doc, "collation")) {
        snprintf(where, sizeof where, "%s.collation", cmd);
        if ((rc = cmd_check_one_collation(where, &it, err)) != 0) return rc;
    }
    for (int i = 0; arrays[i]; i++)
        if ((rc = cmd_check_collations_in(cmd, doc, arrays[i], err)) != 0) return rc;
    return 0;
}

/* ---- create's options ------------------------------------------------------------ */

/* An option of create that is refused unless it is absent or "off": capped: false,
 * changeStreamPreAndPostImages: {enabled: false} and validator: {} mean what a plain
 * collection does. */
static bool cmd_option_off(const char *name, const bson_iter_t *it) {
    bson_t d;
    bson_iter_t e;
    if (strcmp(name, "capped") == 0) return !bsonx_truthy(it);
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bsonx_view_container(it, &d)) return false;
    if (strcmp(name, "validator") == 0) return bson_empty(&d);
    if (strcmp(name, "changeStreamPreAndPostImages") == 0)
        return bson_iter_init_find(&e, &d, "enabled") && !bsonx_truthy(&e) &&
               bson_count_keys(&d) == 1;
    return false;
}

int cmd_check_create_options(const bson_t *req, ms_error_t *err) {
    static const struct {
        const char *name, *why;
    } refused[] = {
        {"viewOn", "views are not supported"},
        {"pipeline", "views are not supported"},
        {"capped", "capped collections are not supported"},
        {"timeseries", "time series collections are not supported"},
        {"clusteredIndex", "clustered collections are not supported (every collection is "
                           "already stored in _id order, with an ordinary _id index)"},
        {"expireAfterSeconds", "expireAfterSeconds needs a clustered or time series "
                               "collection, which are not supported"},
        {"validator", "document validation is not supported"},
        {"changeStreamPreAndPostImages", "change streams are not supported"},
        {"encryptedFields", "queryable encryption is not supported"},
    };
    bson_iter_t it;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        if (!bson_iter_init_find(&it, req, refused[i].name) ||
            cmd_option_off(refused[i].name, &it))
            continue;
        log_warn("create option refused option=%s", refused[i].name);
        return err_set(err, MS_ERR_INVALID_OPTIONS,
                       "create option '%s' is not supported: %s in minishard", refused[i].name,
                       refused[i].why);
    }
    return 0;
}

int cmd_check_conformance(const char *name, const bson_t *req, ms_error_t *err) {
    int rc;
    if ((rc = cmd_check_api_params(name, req, err)) != 0) return rc;
    if ((rc = cmd_check_collation(req, err)) != 0) return rc;
    if (strcmp(name, "create") == 0 && (rc = cmd_check_create_options(req, err)) != 0) return rc;
    return 0;
}
