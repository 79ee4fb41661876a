/*
 * cmd.c — command tables and dispatch (see cmd.h), run by every daemon on its RPC
 * worker threads.
 *
 * Dispatch mirrors what mongod/mongos do before a command's run(): the message size
 * limit (maxMessageSizeBytes), BSON validation, command lookup by the first key
 * (CommandNotFound), test-only commands hidden unless enabled (as MongoDB hides
 * configureFailPoint without enableTestCommands), a repeated top-level key (Location40413),
 * then the IDL-style field checks (TypeMismatch, or FailedToParse for a missing required
 * field). The failCommand
 * failpoint is evaluated here, as in MongoDB's ServiceEntryPoint, so a test can make
 * any command fail, and error replies get MongoDB's errorLabels (both in
 * common/fail_command.c). Every error reply is logged on one line with the command name.
 */
#include "common/cmd.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/cmd_priv.h"
#include "common/curop.h"
#include "common/failpoint.h"
#include "common/lclock.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/validate.h"

/* A command at least this slow is logged at info, like mongod's slowms default. */
#define CMD_SLOW_MS 100
/* Bytes of a command name kept for errmsg and log lines (names come from the wire). */
#define CMD_NAME_SHOWN_MAX 100

/* ---- small helpers --------------------------------------------------------------- */

/* A printable, bounded copy of a name from the wire, for one-line logs and errmsg. */
static void cmd_printable(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src[i] && i + 1 < cap && i < CMD_NAME_SHOWN_MAX; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = (ch < 0x20 || ch == 0x7f || ch == '"') ? '?' : (char)ch;
    }
    dst[i] = '\0';
}

/* "string" or "int, long, double": the types a mask allows, for TypeMismatch texts. */
static void cmd_types_text(uint32_t mask, char *dst, size_t cap) {
    size_t n = 0;
    dst[0] = '\0';
    for (unsigned t = 1; t < 32; t++) {
        const char *name;
        if (!(mask & CT_BIT(t))) continue;
        /* MinKey (0xff) and MaxKey (0x7f) share bit 31 of the mask. */
        name = t == 31 ? "minKey, maxKey" : bsonx_type_name((bson_type_t)t);
        if (!name || !*name || strcmp(name, "unknown") == 0) continue;
        int w = snprintf(dst + n, cap - n, "%s%s", n ? ", " : "", name);
        if (w < 0 || (size_t)w >= cap - n) break;
        n += (size_t)w;
    }
}

void cmd_error_reply(bson_t *reply, const ms_error_t *err) {
    BSON_APPEND_DOUBLE(reply, "ok", 0.0);
    BSON_APPEND_UTF8(reply, "errmsg", err->msg);
    BSON_APPEND_INT32(reply, "code", err->code);
    BSON_APPEND_UTF8(reply, "codeName", err_code_name(err->code));
}

bool cmd_field(const cmd_ctx_t *ctx, const char *name, bson_iter_t *out) {
    return bson_iter_init_find(out, ctx->req, name);
}

bool cmd_flag(const cmd_ctx_t *ctx, const char *name, bool dflt) {
    bson_iter_t it;
    if (!cmd_field(ctx, name, &it)) return dflt;
    return bsonx_truthy(&it);
}

int cmd_check_cursor_ids(const cmd_ctx_t *ctx, ms_error_t *err) {
    bson_iter_t it, ids;
    if (!cmd_field(ctx, "cursors", &it) || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &ids))
        return 0;
    for (int i = 0; bson_iter_next(&ids); i++) {
        bson_type_t t = bson_iter_type(&ids);
        if (t == BSON_TYPE_INT64 || t == BSON_TYPE_INT32) continue;
        log_warn("killCursors refused: cursor id %d of type %s", i, bsonx_type_name(t));
        return err_set(err, MS_ERR_TYPE_MISMATCH,
                       "BSON field '%s.cursors.%d' is the wrong type '%s', expected type 'long'",
                       ctx->spec ? ctx->spec->name : "killCursors", i, bsonx_type_name(t));
    }
    return 0;
}

/* ---- lookup ---------------------------------------------------------------------- */

static const cmd_spec_t *cmd_find_in(const cmd_spec_t *table, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(table[i].name, name) == 0) return &table[i];
    return NULL;
}

/* The daemon's own table first, then the commands every daemon answers. */
static const cmd_spec_t *cmd_find(const cmd_server_t *s, const char *name) {
    const cmd_spec_t *spec = cmd_find_in(s->table, s->table_len, name);
    return spec ? spec : cmd_find_in(cmd_common_table, cmd_common_table_len, name);
}

const cmd_spec_t *cmd_lookup(const cmd_server_t *s, const char *name) {
    const cmd_spec_t *spec = cmd_find(s, name);
    /* Without --enable-test-commands a test command does not exist at all. */
    if (spec && (spec->flags & CMD_TEST) && !s->test_commands) return NULL;
    return spec;
}

/* The reply to a name cmd_lookup did not find. MongoDB answers CommandNotFound for a
 * test-only command when testing is off, as for any unknown name; the errmsg keeps
 * MongoDB's start and, for a test command, adds how to turn them on, so that a learner
 * who types configureFailPoint at a plain cluster learns the flag instead of a typo hunt. */
static int cmd_not_found(const cmd_server_t *s, const char *name, const char *shown,
                         ms_error_t *err) {
    const cmd_spec_t *spec = cmd_find(s, name);
    if (spec && (spec->flags & CMD_TEST))
        return err_set(err, MS_ERR_COMMAND_NOT_FOUND,
                       "no such command: '%s' (a test-only command: start the daemon with "
                       "--enable-test-commands, e.g. scripts/cluster.sh start --test ...)",
                       shown);
    return err_set(err, MS_ERR_COMMAND_NOT_FOUND, "no such command: '%s'", shown);
}

cmd_counter_t *cmd_counter_of(cmd_server_t *s, const cmd_spec_t *spec) {
    if (spec >= s->table && spec < s->table + s->table_len) return &s->own_counts[spec - s->table];
    ASSERT(spec >= cmd_common_table && spec < cmd_common_table + cmd_common_table_len);
    return &s->common_counts[spec - cmd_common_table];
}

/* ---- checks before the handler --------------------------------------------------- */

static int cmd_check_type(const char *cmd, const char *field, const bson_iter_t *it,
                          uint32_t types, ms_error_t *err) {
    bson_type_t t = bson_iter_type(it);
    char want[160];
    if (types & CT_BIT(t)) return 0;
    cmd_types_text(types, want, sizeof want);
    if (field)
        return err_set(err, MS_ERR_TYPE_MISMATCH,
                       "BSON field '%s.%s' is the wrong type '%s', expected type '%s'", cmd, field,
                       bsonx_type_name(t), want);
    return err_set(err, MS_ERR_TYPE_MISMATCH,
                   "BSON field '%s' is the wrong type '%s', expected type '%s'", cmd,
                   bsonx_type_name(t), want);
}

const char *const cmd_generic_args[] = {
    /* generic_args_api_v1 */
    "apiVersion", "apiStrict", "apiDeprecationErrors", "$db", "maxTimeMS", "readConcern",
    "writeConcern", "lsid", "clientOperationKey", "txnNumber", "autocommit", "startTransaction",
    "stmtId", "comment", "$readPreference", "$clusterTime",
    /* generic_args_unstable_v1 */
    "$audit", "$client", "$configServerState", "allowImplicitCollectionCreation",
    "$oplogQueryData", "$queryOptions", "$replData", "databaseVersion", "shardVersion",
    "tracking_info", "coordinator", "maxTimeMSOpOnly", "$configTime", "$topologyTime",
    "txnRetryCounter", "mayBypassWriteBlocking", "$tenant", "expectPrefix", NULL};

const char *const cmd_update_stmt_fields[] = {
    "q", "u", "c", "arrayFilters", "hint", "multi", "upsert", "upsertSupplied", "collation",
    "sampleId", "$_allowShardKeyUpdatesWithoutFullShardKeyInQuery", NULL};

const char *const cmd_delete_stmt_fields[] = {"q", "limit", "hint", "collation", "sampleId",
                                              NULL};

/* The shard's statements also take the router's internal narrowing of a multi-write
 * ($_shardKeyRanges, common/krange.h); a router refuses it from a client. */
const char *const cmd_shard_update_stmt_fields[] = {
    "q", "u", "c", "arrayFilters", "hint", "multi", "upsert", "upsertSupplied", "collation",
    "sampleId", "$_allowShardKeyUpdatesWithoutFullShardKeyInQuery", "$_shardKeyRanges", NULL};

const char *const cmd_shard_delete_stmt_fields[] = {"q", "limit", "hint", "collation",
                                                    "sampleId", "$_shardKeyRanges", NULL};

static bool cmd_name_in(const char *const *list, const char *name) {
    for (int i = 0; list && list[i]; i++)
        if (strcmp(list[i], name) == 0) return true;
    return false;
}

bool cmd_is_generic_arg(const char *name) { return cmd_name_in(cmd_generic_args, name); }

static const cmd_field_t *cmd_spec_field(const cmd_spec_t *spec, const char *name) {
    for (int i = 0; i < CMD_FIELDS_MAX && spec->fields[i].name; i++)
        if (strcmp(spec->fields[i].name, name) == 0) return &spec->fields[i];
    return NULL;
}

/* CMD_STRICT_FIELDS: the request's fields in document order, as MongoDB's IDL parser
 * meets them (a listed field of the wrong type before an unknown one is TypeMismatch),
 * then the statements of spec->stmts. */
int cmd_check_strict_doc(const cmd_spec_t *spec, const bson_t *doc, ms_error_t *err) {
    bson_iter_t it, arr, st;
    char shown[CMD_NAME_SHOWN_MAX + 1];
    int rc;
    if (!bson_iter_init(&it, doc) || !bson_iter_next(&it)) return 0;   /* the command */
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        const cmd_field_t *f = cmd_spec_field(spec, k);
        if (f) {
            if ((rc = cmd_check_type(spec->name, k, &it, f->types, err))) return rc;
            continue;
        }
        if (cmd_is_generic_arg(k)) continue;
        cmd_printable(shown, sizeof shown, k);
        return err_set(err, MS_ERR_IDL_UNKNOWN_FIELD, "BSON field '%s.%s' is an unknown field.",
                       spec->name, shown);
    }
    if (!spec->stmts || !bson_iter_init_find(&it, doc, spec->stmts) ||
        !BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &arr))
        return 0;
    while (bson_iter_next(&arr)) {
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &st)) continue;
        while (bson_iter_next(&st)) {
            const char *k = bson_iter_key(&st);
            if (cmd_name_in(spec->stmt_fields, k)) continue;
            cmd_printable(shown, sizeof shown, k);
            return err_set(err, MS_ERR_IDL_UNKNOWN_FIELD,
                           "BSON field '%s.%s.%s' is an unknown field.", spec->name, spec->stmts,
                           shown);
        }
    }
    return 0;
}

static int cmd_check_fields(const cmd_ctx_t *ctx, ms_error_t *err) {
    const cmd_spec_t *spec = ctx->spec;
    bson_iter_t it;
    int rc;
    if (spec->arg_types && (rc = cmd_check_type(spec->name, NULL, &ctx->arg, spec->arg_types, err)))
        return rc;
    if ((spec->flags & CMD_STRICT_FIELDS) && (rc = cmd_check_strict_doc(spec, ctx->req, err)))
        return rc;
    for (int i = 0; i < CMD_FIELDS_MAX && spec->fields[i].name; i++) {
        const cmd_field_t *f = &spec->fields[i];
        if (!bson_iter_init_find(&it, ctx->req, f->name)) {
            if (f->required)
                return err_set(err, MS_ERR_FAILED_TO_PARSE,
                               "BSON field '%s.%s' is missing but a required field", spec->name,
                               f->name);
            continue;
        }
        if ((rc = cmd_check_type(spec->name, f->name, &it, f->types, err))) return rc;
        if (f->check && bsonx_is_number(&it) && (rc = val_num_field(&it, f->name, f->check, err)))
            return rc;
    }
    return 0;
}

/* "$cmd.aggregate" names the cursor of a collection-less aggregate ({aggregate: 1}:
 * $currentOp, $shardedDataDistribution), as MongoDB's collectionless aggregate namespace:
 * getMore and killCursors accept it, no other command does. */
static bool collectionless_cursor(const cmd_ctx_t *ctx, const char *coll, uint32_t len) {
    static const char agg[] = "$cmd.aggregate";
    return len == sizeof agg - 1 && memcmp(coll, agg, len) == 0 &&
           (strcmp(ctx->name, "getMore") == 0 || strcmp(ctx->name, "killCursors") == 0);
}

/* The names a row's flags point at (common/validate.h), after $db itself was checked.
 * Values of the wrong type were refused by the type checks already, or are left to the
 * handler when the row lists no type. */
static int cmd_check_names(const cmd_ctx_t *ctx, ms_error_t *err) {
    unsigned fl = ctx->spec->flags;
    bool write = (fl & CMD_WRITE) != 0;
    const char *s;
    uint32_t len = 0;
    bson_iter_t it;
    if ((fl & (CMD_NS_ARG | CMD_DB_ARG | CMD_FULL_NS_ARG)) && BSON_ITER_HOLDS_UTF8(&ctx->arg)) {
        s = bson_iter_utf8(&ctx->arg, &len);
        if ((fl & CMD_NS_ARG) && collectionless_cursor(ctx, s, len)) return 0;
        if (fl & CMD_NS_ARG) return val_coll_name(ctx->db, s, len, write, err);
        if (fl & CMD_DB_ARG) return val_db_name(s, len, err);
        return val_full_ns(s, len, write, err);
    }
    if ((fl & CMD_NS_FIELD) && bson_iter_init_find(&it, ctx->req, "collection") &&
        BSON_ITER_HOLDS_UTF8(&it)) {
        s = bson_iter_utf8(&it, &len);
        return collectionless_cursor(ctx, s, len) ? 0 : val_coll_name(ctx->db, s, len, false, err);
    }
    return 0;
}

/* A command document whose top-level key repeats is refused (MongoDB's IDL parser:
 * IDLDuplicateField 40413 "BSON field 'find.filter' is a duplicate field"), whatever the
 * command and transport: two values for one field would leave it to each reader (a
 * lookup takes the first, a copy keeps both and the peer takes its first) which one
 * counts — a shard and the router it serves could act on different ones. The keys are
 * sorted (bounded by MS_CMD_TOP_FIELDS_MAX), so a wide document costs n log n. */
static int cmd_key_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmd_check_unique_keys(const char *cmd, const bson_t *req, ms_error_t *err) {
    const char *small[64], **keys = small;
    bson_iter_t it;
    int n = 0, rc = 0;
    char shown[CMD_NAME_SHOWN_MAX + 1];
    if (!bson_iter_init(&it, req)) return 0;
    while (bson_iter_next(&it)) n++;
    if (n <= 1) return 0;
    if (n > MS_CMD_TOP_FIELDS_MAX)
        return err_set(err, MS_ERR_BAD_VALUE,
                       "command %s has %d top-level fields; at most %d are accepted", cmd, n,
                       MS_CMD_TOP_FIELDS_MAX);
    if ((size_t)n > sizeof small / sizeof small[0] && !(keys = malloc((size_t)n * sizeof *keys)))
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "out of memory checking %s's fields",
                       cmd);
    n = 0;
    bson_iter_init(&it, req);
    while (bson_iter_next(&it)) keys[n++] = bson_iter_key(&it);
    qsort(keys, (size_t)n, sizeof *keys, cmd_key_cmp);
    for (int i = 1; i < n; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            cmd_printable(shown, sizeof shown, keys[i]);
            rc = err_set(err, MS_ERR_IDL_DUPLICATE_FIELD,
                         "BSON field '%s.%s' is a duplicate field", cmd, shown);
            break;
        }
    if (keys != small) free(keys);
    return rc;
}

/* ---- sessions, transactions, read and write concerns ---------------------------- */

/* What a standalone mongod answers to a transaction (IllegalOperation 20); the router
 * refuses with the same code, since no shard of minishard is a replica set. */
#define CMD_TXN_REFUSED "Transaction numbers are only allowed on a replica set member or mongos"
#define CMD_TXN_REFUSED_ROUTER \
    "Transactions are not supported: minishard's shards are not replica sets"

int cmd_refuse_transaction(const cmd_server_t *s, ms_error_t *err) {
    return err_set(err, MS_ERR_ILLEGAL_OPERATION, "%s",
                   strcmp(s->process, "router") == 0 ? CMD_TXN_REFUSED_ROUTER : CMD_TXN_REFUSED);
}

/* The generic arguments drivers put on every command (docs/protocol.md "Sessions,
 * transactions, read and write concerns"). One node holds each piece of data and every
 * write is durable when its SQLite transaction commits, so readConcern local, majority
 * and available read the same committed data, and any writeConcern is met at commit.
 * What needs a replica set (snapshot and linearizable reads, afterOpTime, atClusterTime,
 * transactions) is refused with the code a standalone mongod gives. afterClusterTime is
 * served (checked by lclock_check_read_concern, waited for in lclock_request_in). lsid and a bare
 * txnNumber (a retryable write) are accepted: the write runs once, no retry record. */
static int cmd_check_session_args(const cmd_ctx_t *ctx, ms_error_t *err) {
    bson_iter_t it, sub;
    int rc;
    if (bson_iter_init_find(&it, ctx->req, "startTransaction") ||
        bson_iter_init_find(&it, ctx->req, "autocommit"))
        return cmd_refuse_transaction(ctx->srv, err);
    if (bson_iter_init_find(&it, ctx->req, "lsid") &&
        (rc = cmd_check_type(ctx->name, "lsid", &it, CT_DOC, err)))
        return rc;
    if (bson_iter_init_find(&it, ctx->req, "txnNumber") &&
        (rc = cmd_check_type(ctx->name, "txnNumber", &it, CT_NUM, err)))
        return rc;
    if (bson_iter_init_find(&it, ctx->req, "writeConcern") &&
        (rc = cmd_check_type(ctx->name, "writeConcern", &it, CT_DOC, err)))
        return rc;
    if (!bson_iter_init_find(&it, ctx->req, "readConcern")) return 0;
    if ((rc = cmd_check_type(ctx->name, "readConcern", &it, CT_DOC, err))) return rc;
    bson_t rc_doc;
    const char *level = NULL;
    if (!bsonx_view_container(&it, &rc_doc) || !bson_iter_recurse(&it, &sub)) return 0;
    while (bson_iter_next(&sub)) {
        const char *k = bson_iter_key(&sub);
        if (strcmp(k, "level") == 0) {
            const char *lv;
            if ((rc = cmd_check_type("readConcern", "level", &sub, CT_STR, err))) return rc;
            lv = level = bson_iter_utf8(&sub, NULL);
            if (strcmp(lv, "local") == 0 || strcmp(lv, "majority") == 0 ||
                strcmp(lv, "available") == 0)
                continue;
            if (strcmp(lv, "snapshot") == 0 || strcmp(lv, "linearizable") == 0)
                return err_set(err, MS_ERR_NOT_A_REPLICA_SET,
                               "node needs to be a replica set member to use read concern");
            char shown[CMD_NAME_SHOWN_MAX + 1];
            cmd_printable(shown, sizeof shown, lv);
            return err_set(err, MS_ERR_BAD_VALUE,
                           "Enumeration value '%s' for field 'readConcern.level' is not a valid "
                           "value.", shown);
        }
        /* afterClusterTime's rules, with afterOpTime beside it: lclock_check_read_concern. */
        if (strcmp(k, "afterClusterTime") == 0 ||
            (strcmp(k, "afterOpTime") == 0 && bson_has_field(&rc_doc, "afterClusterTime")))
            continue;
        if (strcmp(k, "afterOpTime") == 0 || strcmp(k, "atClusterTime") == 0)
            return err_set(err, MS_ERR_NOT_A_REPLICA_SET,
                           "node needs to be a replica set member to use read concern");
        if (strcmp(k, "provenance") == 0) continue;
        char shown[CMD_NAME_SHOWN_MAX + 1];
        cmd_printable(shown, sizeof shown, k);
        return err_set(err, MS_ERR_IDL_UNKNOWN_FIELD,
                       "BSON field 'readConcern.%s' is an unknown field.", shown);
    }
    return lclock_check_read_concern(&rc_doc, level, err);
}

/* The request's session for the handler (common/opctx.h): the cursors it opens belong to
 * it, and a getMore must come from it. */
static void cmd_set_session(const bson_t *req) {
    op_lsid_t l;
    op_lsid_of(req, &l);
    op_set_lsid(&l);
}

/* ---- dispatch -------------------------------------------------------------------- */

void cmd_dispatch(cmd_server_t *s, const uint8_t *data, size_t len, bson_t *reply) {
    ms_error_t err = {0};
    cmd_ctx_t ctx;
    cmd_counter_t *ctr = NULL;
    cmd_fail_t fail = {0};
    bson_t req, body, renumbered;
    bool have_renumbered = false;
    bson_iter_t it;
    char shown[CMD_NAME_SHOWN_MAX + 1] = "-";
    long long t0_us = time_mono_us(), ms;
    int rc;

    memset(&ctx, 0, sizeof ctx);
    lclock_op_reset();
    bson_init(&ctx.err_info);
    ctx.srv = s;
    ctx.app = s->app;
    ctx.db = "admin";

    if (len > MS_MSG_BYTES_MAX) {
        rc = err_set(&err, MS_ERR_BSON_OBJECT_TOO_LARGE,
                     "message of %zu bytes is larger than the limit of %d bytes", len,
                     MS_MSG_BYTES_MAX);
        goto out;
    }
    if ((rc = bsonx_view(data, len, &req, &err)) != 0) goto out;
    {
        /* MongoDB ignores the keys of an array; libbson warns when one that is not
         * numbered "0", "1", ... is appended, and handlers copy arrays from requests into
         * stored documents, replies and peer commands. One renumbered copy here, and no
         * handler on either transport ever sees such an array. */
        int64_t new_len;
        if (!bsonx_arrays_numbered(&req, &new_len)) {
            if (new_len > MS_MSG_BYTES_MAX) {
                rc = err_set(&err, MS_ERR_BSON_OBJECT_TOO_LARGE,
                             "message of %lld bytes with its arrays renumbered is larger "
                             "than the limit of %d bytes",
                             (long long)new_len, MS_MSG_BYTES_MAX);
                goto out;
            }
            bsonx_renumber_arrays(&req, &renumbered);
            have_renumbered = true;
            data = bson_get_data(&renumbered);
            len = renumbered.len;
            if (!bson_init_static(&req, data, len)) {
                rc = err_set(&err, MS_ERR_INTERNAL, "renumbered command is not BSON");
                goto out;
            }
        }
    }
    ctx.req = &req;
    if (s->intercept && s->intercept(data, len, reply)) {
        bson_iter_t f;
        atomic_fetch_add(&s->rejected, 1);
        if (bson_iter_init(&f, &req) && bson_iter_next(&f))
            cmd_printable(shown, sizeof shown, bson_iter_key(&f));
        log_warn("command refused cmd=%s code=%d", log_str(shown),
                 bson_iter_init_find(&it, reply, "code") ? (int)bson_iter_as_int64(&it) : 0);
        goto done;
    }
    if (!bson_iter_init(&ctx.arg, &req) || !bson_iter_next(&ctx.arg)) {
        rc = err_set(&err, MS_ERR_FAILED_TO_PARSE, "empty command document");
        goto out;
    }
    cmd_printable(shown, sizeof shown, bson_iter_key(&ctx.arg));
    ctx.spec = cmd_lookup(s, bson_iter_key(&ctx.arg));
    if (!ctx.spec) {
        rc = cmd_not_found(s, bson_iter_key(&ctx.arg), shown, &err);
        goto out;
    }
    ctx.name = ctx.spec->name;
    ctr = cmd_counter_of(s, ctx.spec);
    /* A parked request's second run (opctx.h, op_await_t) is the same command: counted,
     * and failCommand evaluated, once. */
    bool rerun = op_await() && op_await()->woken;
    if (!rerun) atomic_fetch_add(&ctr->total, 1);
    if ((rc = cmd_check_unique_keys(ctx.name, &req, &err)) != 0) goto out;
    if ((rc = cmd_check_fields(&ctx, &err)) != 0) goto out;
    if (bson_iter_init_find(&it, &req, "$db")) {
        if (!BSON_ITER_HOLDS_UTF8(&it)) {
            rc = cmd_check_type(ctx.name, "$db", &it, CT_STR, &err);
            goto out;
        }
        uint32_t dblen = 0;
        ctx.db = bson_iter_utf8(&it, &dblen);
        /* The length, not strlen: "admin\0x" must not become "admin". */
        if ((rc = val_db_name(ctx.db, dblen, &err)) != 0) {
            ctx.db = "admin";
            goto out;
        }
    }
    if ((rc = cmd_check_names(&ctx, &err)) != 0) goto out;
    if ((rc = cmd_check_session_args(&ctx, &err)) != 0) goto out;
    if ((rc = cmd_check_conformance(ctx.name, &req, &err)) != 0) goto out;
    cmd_set_session(&req);
    /* maxTimeMS is a generic field of every command, as in MongoDB: it bounds the
     * whole operation from here on (op_check in long loops, deadlines of peer calls). */
    if (bson_iter_init_find(&it, &req, "maxTimeMS")) {
        long long max_ms;
        if ((rc = op_parse_max_time_ms(&it, &max_ms, &err)) != 0) goto out;
        if (max_ms > 0) op_set_deadline_ms(time_mono_ms() + max_ms);
    }
    if ((rc = cmd_note_client(&ctx, &err)) != 0) goto out;
    if (!rerun && (rc = cmd_fail_command_before(&ctx, &fail, &err)) != 0) goto out;
    /* MongoDB checks for interrupt before running a command: an operation whose time is
     * already up (or that maxTimeAlwaysTimeOut kills) never starts. */
    if (strcmp(ctx.name, "configureFailPoint") != 0 && (rc = op_check(&err)) != 0) goto out;
    /* $clusterTime gossip in, and readConcern.afterClusterTime's wait (common/lclock.h). */
    if ((rc = lclock_request_in(&req, &err)) != 0) goto out;

    /* The handler builds into a document of its own: whatever state it leaves it in
     * (a sub-document still open on an error path), dispatch can drop it. libbson
     * refuses to append to or bson_reinit a document with an open child, but
     * bson_destroy frees it, and bson_steal only takes a finished one. */
    bson_init(&body);
    atomic_fetch_add(&s->active, 1);
    {
        curop_t op;   /* listed by $currentOp while the handler runs */
        curop_begin(&op, &req, ctx.name, ctx.db, ctx.spec->flags);
        rc = ctx.spec->handler(&ctx, &body, &err);
        curop_end(&op);
    }
    atomic_fetch_sub(&s->active, 1);
    if (rc != 0) {
        bson_destroy(&body);
        if (err.code != rc) {
            /* The handler returned a code without filling err: keep its code. */
            if (!err.msg[0]) snprintf(err.msg, sizeof err.msg, "%s failed", ctx.name);
            err.code = rc;
        }
        goto out;
    }
    bson_destroy(reply);
    if (!bson_steal(reply, &body)) {
        /* Our bug, not the client's: answer it instead of aborting the process. */
        bson_destroy(&body);
        rc = err_set(&err, MS_ERR_INTERNAL, "%s left its reply unfinished", ctx.name);
        goto out;
    }
    if (!bson_has_field(reply, "ok")) BSON_APPEND_DOUBLE(reply, "ok", 1.0);
    cmd_fail_command_after(&fail, reply);
    if (reply->len > MS_MSG_BYTES_MAX)
        rc = err_set(&err, MS_ERR_BSON_OBJECT_TOO_LARGE,
                     "reply of %u bytes is larger than the limit of %d bytes", reply->len,
                     MS_MSG_BYTES_MAX);
out:
    op_set_deadline_ms(0);
    op_set_lsid(NULL);
    ms = (time_mono_us() - t0_us) / 1000;
    if (rc != 0) {
        bson_t info;
        /* Destroy + init, not bson_reinit: reply may be large (the too-large case). */
        bson_destroy(reply);
        bson_init(reply);
        cmd_error_reply(reply, &err);
        /* err_info too is the handler's: added only when finished (bson_steal refuses a
         * document with an open child; the later bson_destroy frees it either way). */
        if (bson_steal(&info, &ctx.err_info)) {
            if (!bson_empty(&info)) bson_concat(reply, &info);
            bson_destroy(&info);
            bson_init(&ctx.err_info);
        }
        if (ctr) atomic_fetch_add(&ctr->failed, 1);
        else atomic_fetch_add(&s->rejected, 1);
        log_warn("command failed cmd=%s code=%d codeName=%s ms=%lld errmsg=%s", log_str(shown),
                 err.code, err_code_name(err.code), ms, log_str(err.msg));
    } else if (!(ctx.spec->flags & CMD_NO_LOG)) {
        if (ms >= CMD_SLOW_MS)
            log_info("slow command cmd=%s db=%s ms=%lld", ctx.name, log_str(ctx.db), ms);
        else
            log_debug("command cmd=%s db=%s ms=%lld", ctx.name, log_str(ctx.db), ms);
    }
    cmd_error_labels(ctx.name ? &req : NULL, ctx.name, &fail, reply);
done:
    cmd_fail_done(&fail);
    lclock_reply_out(reply);  /* $clusterTime and operationTime on every reply */
    bson_destroy(&ctx.err_info);
    if (have_renumbered) bson_destroy(&renumbered);
}

/* ---- server ---------------------------------------------------------------------- */

static void cmd_rpc_handler(void *arg, const uint8_t *data, size_t len, bson_t *reply) {
    cmd_dispatch(arg, data, len, reply);
}

static void cmd_server_free(cmd_server_t *s) {
    if (!s) return;
    free(s->own_counts);
    free(s->common_counts);
    free(s);
}

int cmd_server_start(const cmd_server_opts_t *opts, cmd_server_t **out, ms_error_t *err) {
    cmd_server_t *s;
    int rc;

    if (!opts->process || !opts->url || opts->table_len < 0 || (opts->table_len && !opts->table))
        return err_set(err, MS_ERR_BAD_VALUE, "cmd server: process, url and table are required");
    s = calloc(1, sizeof *s);
    if (!s) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "cmd server: out of memory");
    snprintf(s->process, sizeof s->process, "%s", opts->process);
    snprintf(s->url, sizeof s->url, "%s", opts->url);
    s->test_commands = opts->enable_test_commands;
    s->table = opts->table;
    s->table_len = opts->table_len;
    s->app = opts->app;
    s->status = opts->status;
    s->metrics = opts->metrics;
    s->intercept = opts->intercept;
    s->start_mono_ms = time_mono_ms();
    bson_oid_init(&s->process_oid, NULL);
    /* calloc'd zeros are valid initial atomics on every platform we build for. */
    s->own_counts = calloc((size_t)opts->table_len + 1, sizeof *s->own_counts);
    s->common_counts = calloc((size_t)cmd_common_table_len, sizeof *s->common_counts);
    if (!s->own_counts || !s->common_counts) {
        cmd_server_free(s);
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "cmd server: out of memory");
    }
    for (int i = 0; i < opts->table_len; i++)
        ASSERT(opts->table[i].name && opts->table[i].handler);
    fp_register("failCommand");
    op_register_failpoints();

    {
        rpc_server_opts_t ro = {.nworkers = opts->workers, .fn = cmd_rpc_handler, .arg = s,
                                .internal_workers = opts->internal_workers,
                                .is_internal = rpc_internal_by_name};
        rc = rpc_server_start_opts(opts->url, &ro, &s->rpc, err);
    }
    if (rc == 0 && opts->wire_url) {
        rpc_server_opts_t wo = {.nworkers = opts->workers, .fn = cmd_rpc_handler, .arg = s,
                                .wire = true, .idle_ms = opts->wire_idle_ms};
        snprintf(s->wire_url, sizeof s->wire_url, "%s", opts->wire_url);
        if ((rc = rpc_server_start_opts(opts->wire_url, &wo, &s->wire, err)) != 0) {
            rpc_server_stop(s->rpc);
            s->rpc = NULL;
        }
    }
    if (rc != 0) {
        cmd_server_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* Quiesce mode, as mongos enters it on SIGTERM: the topologyVersion counter is bumped and
 * every waiting hello answers ShutdownInProgress at once, so monitoring drivers learn of
 * the shutdown before their connections close (then hellos keep failing until the stop). */
static void cmd_server_quiesce(cmd_server_t *s) {
    atomic_store(&s->quiescing, true);
    atomic_fetch_add(&s->topology_counter, 1);
    rpc_server_quiesce(s->wire, MS_QUIESCE_FLUSH_MS);  /* NULL-safe */
    rpc_server_quiesce(s->rpc, MS_QUIESCE_FLUSH_MS);
}

void cmd_server_stop(cmd_server_t *s) {
    if (!s) return;
    /* A handler hung on a failpoint would hold its worker, and the join, forever. */
    fp_release_all();
    cmd_server_quiesce(s);
    rpc_server_stop(s->wire);  /* NULL-safe */
    rpc_server_stop(s->rpc);
    cmd_server_free(s);
}

bool cmd_server_test_commands(const cmd_server_t *s) { return s->test_commands; }
const char *cmd_server_url(const cmd_server_t *s) { return s->url; }
const char *cmd_server_process(const cmd_server_t *s) { return s->process; }

/* ---- signals --------------------------------------------------------------------- */

static void cmd_signal_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
}

void cmd_block_signals(void) {
    sigset_t set;
    cmd_signal_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

int cmd_wait_for_signal(void) {
    sigset_t set;
    int sig = 0;
    cmd_signal_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    /* sigwait only fails for an invalid set; loop until one of ours arrives. */
    while (sigwait(&set, &sig) != 0 || (sig != SIGINT && sig != SIGTERM)) {
    }
    return sig;
}

void cmd_ns_of(const char *name, unsigned flags, const char *db, const bson_t *cmd, char *ns,
               size_t cap) {
    bson_iter_t it, f;
    const char *coll = NULL;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it)) {
        snprintf(ns, cap, "%s.$cmd", db);
        return;
    }
    if (strcmp(name, "getMore") == 0 && bson_iter_init_find(&f, cmd, "collection") &&
        BSON_ITER_HOLDS_UTF8(&f))
        coll = bson_iter_utf8(&f, NULL);
    else if ((flags & (CMD_NS_ARG | CMD_FULL_NS_ARG)) && BSON_ITER_HOLDS_UTF8(&it))
        coll = bson_iter_utf8(&it, NULL);
    if (coll && (flags & CMD_FULL_NS_ARG)) snprintf(ns, cap, "%s", coll);
    else if (coll) snprintf(ns, cap, "%s.%s", db, coll);
    else if (strcmp(name, "aggregate") == 0) snprintf(ns, cap, "%s.$cmd.aggregate", db);
    else snprintf(ns, cap, "%s.$cmd", db);
}

int cmd_parse_stmt_ids(const bson_iter_t *it, int nops, int32_t *ids, ms_error_t *err) {
    bson_iter_t arr;
    int n = 0;
    if (!BSON_ITER_HOLDS_ARRAY(it) || !bson_iter_recurse(it, &arr))
        return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'stmtIds' is the wrong type '%s', "
                       "expected type 'array'", bsonx_type_name(bson_iter_type(it)));
    while (bson_iter_next(&arr)) {   /* bounded by nops (the batch's own bound) */
        int64_t v;
        if (n == nops) {             /* one id more than statements */
            n++;
            break;
        }
        if (!bsonx_as_int64(&arr, &v) || v < INT32_MIN || v > INT32_MAX)
            return err_set(err, MS_ERR_TYPE_MISMATCH, "stmtIds elements must be 32-bit integers");
        ids[n++] = (int32_t)v;
    }
    if (n != nops)
        return err_set(err, MS_ERR_INVALID_LENGTH, "Number of statement ids must match the "
                       "number of batch entries");
    return 0;
}
