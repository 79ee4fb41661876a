/*
 * fail_command.c — MongoDB's failCommand test hook and the RetryableWriteError label
 * rules, as dispatch (common/cmd.c) applies them to every command of every daemon.
 *
 * failCommand is a failpoint (common/failpoint.c: modes off, alwaysOn, {times},
 * {skip}, {activationProbability}) whose data says which commands it fails and how:
 *
 *   {failCommands: [names], errorCode, errmsg, errorLabels, writeConcernError,
 *    closeConnection, blockConnection, blockTimeMS, appName, namespace,
 *    failInternalCommands}
 *
 * A command counts (and uses up a {times} firing) only when it is named in failCommands
 * and passes the filters, as MongoDB's shouldActivateFailCommandFailPoint decides:
 * configureFailPoint is never failed (a test could lock itself out); a request from an
 * internal client is failed only with failInternalCommands: true; appName and namespace
 * must match when given. "Internal" here is the transport: minishard's processes talk to
 * each other over NNG, drivers over MongoDB's wire protocol (where MongoDB tells its own
 * peers by the internalClient field of their hello, which only they send).
 *
 * When it fires, in MongoDB's order: closeConnection drops the connection with no reply
 * and the command does not run; blockConnection sleeps blockTimeMS first (bounded);
 * errorCode fails the command with that code; writeConcernError lets the command run and
 * adds the document to its `ok: 1` reply.
 *
 * Labels (MongoDB's ErrorLabelBuilder, 4.4+): the error of a retryable write (insert,
 * update, delete, findAndModify with a txnNumber, outside a multi-document transaction)
 * or of commitTransaction/abortTransaction gets errorLabels: ["RetryableWriteError"]
 * when its code — the top-level one of an `ok: 0` reply, or the writeConcernError's —
 * is in the RetriableError category of error_codes.yml. failCommand's errorLabels, when
 * given, replace the rules. Errors inside writeErrors[] never carry labels. A mongos
 * leaves labelling to the shard primaries whose replies it passes on; minishard's router
 * builds its own replies from shards that are not replica sets, so it labels them itself.
 */
#include <string.h>

#include "common/bsonx.h"
#include "common/cmd_priv.h"
#include "common/failpoint.h"
#include "common/log.h"
#include "common/opctx.h"

/* failCommand's blockTimeMS ceiling: a test's block must end on its own. */
#define FAIL_BLOCK_MS_MAX (10 * 60 * 1000)
#define FAIL_ERRMSG "Failing command via 'failCommand' failpoint"

/* ---- which commands a firing counts for ------------------------------------------- */

/* What the filters of failCommand's data are matched against. */
typedef struct fail_subject {
    const char *name;       /* the command, as its row names it */
    const char *app_name;   /* the wire connection's appName; NULL for an internal client */
    bool internal;
    char ns[MS_NS_BYTES_MAX + 16];   /* the command's namespace (cmd_ns_of) */
} fail_subject_t;

static bool fail_is_hello(const char *name) {
    return strcmp(name, "hello") == 0 || strcmp(name, "isMaster") == 0 ||
           strcmp(name, "ismaster") == 0;
}

/* MongoDB matches a listed name against every alias of the command: hello's are
 * isMaster and ismaster. */
static bool fail_names(const char *listed, const char *name) {
    return strcmp(listed, name) == 0 || (fail_is_hello(listed) && fail_is_hello(name));
}

static bool fail_listed(const bson_t *data, const char *name) {
    bson_iter_t it, arr;
    if (!bson_iter_init_find(&it, data, "failCommands") || !BSON_ITER_HOLDS_ARRAY(&it) ||
        !bson_iter_recurse(&it, &arr))
        return false;
    while (bson_iter_next(&arr))
        if (BSON_ITER_HOLDS_UTF8(&arr) && fail_names(bson_iter_utf8(&arr, NULL), name))
            return true;
    return false;
}

/* data.namespace ("db.coll"): only commands on that namespace, as currentOp names it
 * (a getMore by its collection, shardCollection by its value). */
static bool fail_namespace_matches(const bson_t *data, const fail_subject_t *sub) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, data, "namespace") || !BSON_ITER_HOLDS_UTF8(&it)) return true;
    return strcmp(bson_iter_utf8(&it, NULL), sub->ns) == 0;
}

static bool fail_matches(const bson_t *data, void *arg) {
    const fail_subject_t *sub = arg;
    bson_iter_t it;
    if (strcmp(sub->name, "configureFailPoint") == 0) return false;
    if (sub->internal && !(bson_iter_init_find(&it, data, "failInternalCommands") &&
                           bsonx_truthy(&it)))
        return false;
    if (bson_iter_init_find(&it, data, "appName") &&
        (!BSON_ITER_HOLDS_UTF8(&it) || !sub->app_name ||
         strcmp(bson_iter_utf8(&it, NULL), sub->app_name) != 0))
        return false;
    if (!fail_namespace_matches(data, sub)) return false;
    return fail_listed(data, sub->name);
}

/* ---- what a firing does ------------------------------------------------------------ */

/* blockConnection: the command waits blockTimeMS on its worker, as MongoDB's
 * opCtx->sleepFor: bounded (FAIL_BLOCK_MS_MAX), cut short by the command's maxTimeMS (the
 * interrupt check after it answers MaxTimeMSExpired) and by the daemon stopping. */
static void fail_block(const bson_t *data) {
    bson_iter_t it;
    int64_t ms;
    if (!bson_iter_init_find(&it, data, "blockConnection") || !bsonx_truthy(&it) ||
        !bson_iter_init_find(&it, data, "blockTimeMS") || !bsonx_as_int64(&it, &ms) || ms <= 0)
        return;
    if (ms > FAIL_BLOCK_MS_MAX) ms = FAIL_BLOCK_MS_MAX;
    fp_sleep_ms(op_time_left_ms(ms));
}

int cmd_fail_command_before(const cmd_ctx_t *ctx, cmd_fail_t *fc, ms_error_t *err) {
    op_client_t *client = op_client();
    fail_subject_t sub = {.name = ctx->name, .app_name = client ? client->app_name : NULL,
                          .internal = client == NULL};
    bson_iter_t it;
    int64_t code;

    memset(fc, 0, sizeof *fc);
    cmd_ns_of(ctx->name, ctx->spec->flags, ctx->db, ctx->req, sub.ns, sizeof sub.ns);
    if (!fp_check("failCommand", fail_matches, &sub, &fc->data)) return 0;
    fc->fired = true;
    if (bson_iter_init_find(&it, &fc->data, "closeConnection") && bsonx_truthy(&it)) {
        log_info("failCommand closes the connection cmd=%s conn=%u", ctx->name, op_conn());
        op_close_connection();
        /* The reply is never sent; the command must not run. */
        return err_set(err, 50985, "Failing command due to 'failCommand' failpoint");
    }
    fail_block(&fc->data);
    if (bson_iter_init_find(&it, &fc->data, "errorCode") && bsonx_as_int64(&it, &code) &&
        code > 0 && code <= INT32_MAX) {
        const char *msg = FAIL_ERRMSG;
        if (bson_iter_init_find(&it, &fc->data, "errmsg") && BSON_ITER_HOLDS_UTF8(&it))
            msg = bson_iter_utf8(&it, NULL);
        return err_set(err, (int)code, "%s", msg);
    }
    return 0;
}

void cmd_fail_command_after(const cmd_fail_t *fc, bson_t *reply) {
    bson_iter_t it;
    bson_t wce;
    if (!fc->fired || !bson_iter_init_find(&it, &fc->data, "writeConcernError") ||
        !BSON_ITER_HOLDS_DOCUMENT(&it) || bson_has_field(reply, "writeConcernError") ||
        !bsonx_view_container(&it, &wce))
        return;
    BSON_APPEND_DOCUMENT(reply, "writeConcernError", &wce);
}

void cmd_fail_done(cmd_fail_t *fc) {
    if (fc->fired) bson_destroy(&fc->data);
    fc->fired = false;
}

/* ---- the client's hello ------------------------------------------------------------ */

int cmd_note_client(const cmd_ctx_t *ctx, ms_error_t *err) {
    op_client_t *client = op_client();
    bson_iter_t it, meta, app;
    const char *name;
    uint32_t len = 0;
    if (!client || client->metadata_seen || !fail_is_hello(ctx->name) ||
        !bson_iter_init_find(&it, ctx->req, "client") || !BSON_ITER_HOLDS_DOCUMENT(&it))
        return 0;
    client->metadata_seen = true;   /* only the first hello describes the connection */
    if (!bson_iter_recurse(&it, &meta) ||
        !bson_iter_find_descendant(&meta, "application.name", &app) || !BSON_ITER_HOLDS_UTF8(&app))
        return 0;
    name = bson_iter_utf8(&app, &len);
    if (len > OP_APP_NAME_MAX)
        return err_set(err, MS_ERR_CLIENT_METADATA_APP_NAME_TOO_LARGE,
                       "The 'application.name' field must be less then or equal to %d bytes "
                       "in length", OP_APP_NAME_MAX);
    memcpy(client->app_name, name, len);
    client->app_name[len] = '\0';
    return 0;
}

/* ---- errorLabels ------------------------------------------------------------------- */

/* A retryable write: a write command with a txnNumber outside a transaction; or the end
 * of a transaction (commitTransaction/abortTransaction with its txnNumber). */
static bool cmd_is_retryable_write(const bson_t *req, const char *name) {
    bool in_txn = bson_has_field(req, "autocommit") || bson_has_field(req, "startTransaction");
    if (!bson_has_field(req, "txnNumber")) return false;
    if (strcmp(name, "commitTransaction") == 0 || strcmp(name, "abortTransaction") == 0)
        return true;
    return !in_txn && (strcmp(name, "insert") == 0 || strcmp(name, "update") == 0 ||
                       strcmp(name, "delete") == 0 || strcmp(name, "findAndModify") == 0 ||
                       strcmp(name, "findandmodify") == 0);
}

static int cmd_reply_int(const bson_t *doc, const char *dotted) {
    bson_iter_t it, f;
    int64_t v;
    if (!bson_iter_init(&it, doc) || !bson_iter_find_descendant(&it, dotted, &f) ||
        !bsonx_as_int64(&f, &v) || v < INT32_MIN || v > INT32_MAX)
        return 0;
    return (int)v;
}

void cmd_error_labels(const bson_t *req, const char *name, const cmd_fail_t *fc,
                      bson_t *reply) {
    bson_iter_t it;
    bool failed = bson_iter_init_find(&it, reply, "ok") && !bsonx_truthy(&it);
    int code = failed ? cmd_reply_int(reply, "code") : 0;
    int wce = bson_has_field(reply, "writeConcernError")
                  ? cmd_reply_int(reply, "writeConcernError.code") : 0;
    if ((!failed && !bson_has_field(reply, "writeConcernError")) ||
        bson_has_field(reply, "errorLabels"))
        return;
    if (fc && fc->fired && bson_iter_init_find(&it, &fc->data, "errorLabels") &&
        BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_t labels;
        if (bsonx_view_container(&it, &labels)) BSON_APPEND_ARRAY(reply, "errorLabels", &labels);
        return;
    }
    if (!req || !name || !cmd_is_retryable_write(req, name)) return;
    if (err_code_is_retriable(code) || err_code_is_retriable(wce)) {
        bson_t arr;
        BSON_APPEND_ARRAY_BEGIN(reply, "errorLabels", &arr);
        BSON_APPEND_UTF8(&arr, "0", "RetryableWriteError");
        bson_append_array_end(reply, &arr);
    }
}
