/*
 * cmd_common.c — the commands every daemon serves (hello/isMaster, ping,
 * serverStatus, buildInfo, listCommands, configureFailPoint, waitForFailPoint).
 * Reply shapes follow mongod's so drivers and tools read them unchanged; a daemon
 * overrides a row by putting one of the same name in its own table (the router's
 * hello adds msg: "isdbgrid", as mongos does).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/bsonx.h"
#include "common/cmd.h"
#include "common/cmd_priv.h"
#include "common/failpoint.h"
#include "common/lsess.h"
#include "common/log.h"
#include "common/opctx.h"

/* hello's logicalSessionTimeoutMinutes (MS_SESSION_TIMEOUT_MINUTES): drivers use sessions
 * (and retryable writes) only when a server reports it. A test may shorten the process's
 * session timeout (--session-timeout-ms); hello keeps the default, the figure drivers plan
 * their session pools by. */

/* ---- hello's awaitable protocol ------------------------------------------------------
 * MongoDB's server monitoring: a driver's monitor sends hello with the topologyVersion of
 * the last reply it saw and maxAwaitTimeMS; the server answers when its own
 * topologyVersion differs (at once) or after maxAwaitTimeMS. With OP_MSG exhaustAllowed
 * the reply carries moreToCome and the server keeps answering (common/rpc_server.c). The
 * wait never holds a worker: the request is parked in the connection layer (opctx.h,
 * op_await_t). The rules are mongos's (cluster_hello_cmd.cpp, its topology coordinator);
 * a standalone mongod differs only in the code of a counter ahead (31382). */

/* The awaitable fields of a hello request. */
typedef struct cmd_hello_await {
    bool has_tv;             /* topologyVersion given */
    bool has_max;            /* maxAwaitTimeMS given */
    bson_oid_t process_id;
    int64_t counter;
    int64_t max_await_ms;
} cmd_hello_await_t;

/* topologyVersion as MongoDB's IDL reads it: a strict {processId: objectId, counter: long}. */
static int cmd_hello_parse_tv(const bson_iter_t *field, cmd_hello_await_t *a, ms_error_t *err) {
    bson_iter_t it;
    bool has_pid = false, has_counter = false;
    if (!BSON_ITER_HOLDS_DOCUMENT(field) || !bson_iter_recurse(field, &it))
        return err_set(err, MS_ERR_LOC_EXPECTED_OBJECT,
                       "invalid parameter: expected an object (topologyVersion)");
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        bson_type_t want = strcmp(k, "processId") == 0 ? BSON_TYPE_OID
                           : strcmp(k, "counter") == 0 ? BSON_TYPE_INT64
                                                       : BSON_TYPE_EOD;
        if (want == BSON_TYPE_EOD)
            return err_set(err, MS_ERR_IDL_UNKNOWN_FIELD,
                           "BSON field 'TopologyVersion.%.100s' is an unknown field.", k);
        if (bson_iter_type(&it) != want)
            return err_set(err, MS_ERR_TYPE_MISMATCH,
                           "BSON field 'TopologyVersion.%s' is the wrong type '%s', expected "
                           "type '%s'",
                           k, bsonx_type_name(bson_iter_type(&it)), bsonx_type_name(want));
        if (want == BSON_TYPE_OID) {
            bson_oid_copy(bson_iter_oid(&it), &a->process_id);
            has_pid = true;
        } else {
            a->counter = bson_iter_int64(&it);
            has_counter = true;
        }
    }
    if (!has_pid || !has_counter)
        return err_set(err, MS_ERR_IDL_MISSING_FIELD,
                       "BSON field 'TopologyVersion.%s' is missing but a required field",
                       has_pid ? "counter" : "processId");
    a->has_tv = true;
    return 0;
}

/* Reads topologyVersion and maxAwaitTimeMS (types: the table checked maxAwaitTimeMS is a
 * number) and checks them together, in mongos's order. */
static int cmd_hello_parse_await(cmd_ctx_t *ctx, cmd_hello_await_t *a, ms_error_t *err) {
    bson_iter_t it;
    int rc;
    memset(a, 0, sizeof *a);
    if (bson_iter_init_find(&it, ctx->req, "topologyVersion") &&
        (rc = cmd_hello_parse_tv(&it, a, err)) != 0)
        return rc;
    if (bson_iter_init_find(&it, ctx->req, "maxAwaitTimeMS")) {
        /* safeInt64: any number, doubles truncated. */
        if (!bsonx_as_int64(&it, &a->max_await_ms))
            return err_set(err, MS_ERR_TYPE_MISMATCH,
                           "BSON field 'maxAwaitTimeMS' is not a number MongoDB reads as long");
        if (a->max_await_ms < 0)
            return err_set(err, MS_ERR_IDL_VALUE_TOO_LOW,
                           "BSON field 'maxAwaitTimeMS' value must be >= 0, actual value '%lld'",
                           (long long)a->max_await_ms);
        a->has_max = true;
    }
    if (a->has_tv != a->has_max)
        return err_set(err, MS_ERR_LOC_AWAIT_NEEDS_BOTH,
                       a->has_tv ? "A request with a 'topologyVersion' must include "
                                   "'maxAwaitTimeMS'"
                                 : "A request with 'maxAwaitTimeMS' must include a "
                                   "'topologyVersion'");
    if (a->has_tv && a->counter < 0)
        return err_set(err, MS_ERR_LOC_TV_NEGATIVE_COUNTER,
                       "topologyVersion must have a non-negative counter");
    return 0;
}

static void cmd_append_topology_version(cmd_server_t *s, bson_t *dst) {
    bson_t tv;
    BSON_APPEND_DOCUMENT_BEGIN(dst, "topologyVersion", &tv);
    BSON_APPEND_OID(&tv, "processId", &s->process_oid);
    BSON_APPEND_INT64(&tv, "counter", (int64_t)atomic_load(&s->topology_counter));
    bson_append_document_end(dst, &tv);
}

/* Decides whether this hello waits: it does when the client's topologyVersion is this
 * process's current one and the connection layer can park it (not the parked request's
 * own second run, which answers). A topologyVersion of another process (a restart) or an
 * older counter is answered at once; a counter ahead of ours is an error. Sets *parked. */
static int cmd_hello_maybe_wait(cmd_ctx_t *ctx, const cmd_hello_await_t *a, bool *parked,
                                ms_error_t *err) {
    cmd_server_t *s = ctx->srv;
    op_await_t *aw = op_await();
    int64_t current = (int64_t)atomic_load(&s->topology_counter);
    bool router = strcmp(cmd_server_process(s), "router") == 0;
    long long wait_ms;

    *parked = false;
    if (!a->has_tv || !bson_oid_equal(&a->process_id, &s->process_oid) || a->counter < current)
        return 0;
    if (a->counter > current)
        return err_set(err, router ? MS_ERR_LOC_TV_COUNTER_AHEAD_MONGOS : MS_ERR_LOC_TV_COUNTER_AHEAD,
                       "Received a topology version with counter: %lld which is greater than "
                       "the %s topology version counter: %lld",
                       (long long)a->counter, router ? "mongos" : "server", (long long)current);
    if (!aw || !aw->can_park || aw->woken) return 0;
    wait_ms = a->max_await_ms < MS_HELLO_AWAIT_MS_MAX ? a->max_await_ms : MS_HELLO_AWAIT_MS_MAX;
    if (wait_ms == 0) return 0;
    aw->park_until_ms = time_mono_ms() + wait_ms;
    *parked = true;
    return 0;
}

/* hello / isMaster: the handshake (MongoDB 7.0's hello command, as a standalone mongod
 * answers it; the router and the config server add their marks). `hello` answers
 * isWritablePrimary, the legacy names answer ismaster. The handshake's own fields are
 * accepted: `client` (metadata: dispatch keeps a wire connection's first application name,
 * common/fail_command.c), `compression` (none offered: the reply has
 * no `compression` field, so drivers send uncompressed), `saslSupportedMechs` and
 * `speculativeAuthenticate` (no authentication here: nothing to answer), `loadBalanced`
 * (refused when true, as a server without a load balancer does), `topologyVersion` /
 * `maxAwaitTimeMS` (the awaitable hello above). */
static int cmd_hello(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cmd_server_t *s = ctx->srv;
    op_await_t *aw = op_await();
    cmd_hello_await_t a;
    bool parked;
    int rc;
    if (cmd_flag(ctx, "loadBalanced", false))
        return err_set(err, MS_ERR_LOAD_BALANCER_SUPPORT_MISMATCH,
                       "The server is not configured for load-balanced connections: "
                       "connect without loadBalanced=true");
    if ((rc = cmd_hello_parse_await(ctx, &a, err)) != 0) return rc;
    if (atomic_load(&s->quiescing)) {
        /* mongos in quiesce mode: every hello fails, with the bumped topologyVersion. */
        cmd_append_topology_version(s, &ctx->err_info);
        return err_set(err, MS_ERR_SHUTDOWN_IN_PROGRESS, "%s is in quiesce mode and will shut down",
                       strcmp(cmd_server_process(s), "router") == 0 ? "Mongos" : "The server");
    }
    if ((rc = cmd_hello_maybe_wait(ctx, &a, &parked, err)) != 0) return rc;
    if (parked) return 0;  /* the reply is dropped: the request runs again, woken */
    if (aw && aw->exhaust_allowed) {
        if (!a.has_max)
            return err_set(err, MS_ERR_LOC_EXHAUST_NEEDS_AWAIT,
                           "A hello/isMaster request with exhaust must specify 'maxAwaitTimeMS'");
        aw->stream = true;
    }
    if (strcmp(ctx->name, "hello") == 0) BSON_APPEND_BOOL(reply, "isWritablePrimary", true);
    else BSON_APPEND_BOOL(reply, "ismaster", true);
    if (cmd_flag(ctx, "helloOk", false)) BSON_APPEND_BOOL(reply, "helloOk", true);
    cmd_append_topology_version(s, reply);
    BSON_APPEND_INT32(reply, "maxBsonObjectSize", MS_DOC_BYTES_MAX);
    BSON_APPEND_INT32(reply, "maxMessageSizeBytes", MS_MSG_BYTES_MAX);
    BSON_APPEND_INT32(reply, "maxWriteBatchSize", MS_WRITE_BATCH_OPS_MAX);
    BSON_APPEND_DATE_TIME(reply, "localTime", time_now_ms());
    BSON_APPEND_INT32(reply, "logicalSessionTimeoutMinutes", MS_SESSION_TIMEOUT_MINUTES);
    /* The id of the connection this request came on (op_conn: unique in the process,
     * shared by every transport), as mongod's connectionId. */
    BSON_APPEND_INT64(reply, "connectionId", (int64_t)op_conn());
    BSON_APPEND_INT32(reply, "minWireVersion", MS_MIN_WIRE_VERSION);
    BSON_APPEND_INT32(reply, "maxWireVersion", MS_MAX_WIRE_VERSION);
    BSON_APPEND_BOOL(reply, "readOnly", false);
    BSON_APPEND_UTF8(reply, "process", cmd_server_process(s));
    return 0;
}

static int cmd_ping(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)ctx, (void)reply, (void)err;
    return 0;
}

static void cmd_append_command_metrics(cmd_server_t *s, bson_t *reply) {
    bson_t metrics, cmds;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "metrics", &metrics);
    BSON_APPEND_DOCUMENT_BEGIN(&metrics, "commands", &cmds);
    for (int pass = 0; pass < 2; pass++) {
        const cmd_spec_t *table = pass == 0 ? s->table : cmd_common_table;
        int n = pass == 0 ? s->table_len : cmd_common_table_len;
        for (int i = 0; i < n; i++) {
            const cmd_spec_t *spec = &table[i];
            cmd_counter_t *c;
            bson_t one;
            /* A common row shadowed by the daemon's own is never dispatched. */
            if (pass == 1 && cmd_lookup(s, spec->name) != spec) continue;
            c = cmd_counter_of(s, spec);
            if (atomic_load(&c->total) == 0) continue;
            BSON_APPEND_DOCUMENT_BEGIN(&cmds, spec->name, &one);
            BSON_APPEND_INT64(&one, "total", (int64_t)atomic_load(&c->total));
            BSON_APPEND_INT64(&one, "failed", (int64_t)atomic_load(&c->failed));
            bson_append_document_end(&cmds, &one);
        }
    }
    bson_append_document_end(&metrics, &cmds);
    BSON_APPEND_INT64(&metrics, "rejectedRequests", (int64_t)atomic_load(&s->rejected));
    if (s->metrics) s->metrics(s->app, &metrics);
    bson_append_document_end(reply, &metrics);
}

/* serverStatus: MongoDB's process overview, plus the daemon's own sections. */
static int cmd_server_status(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cmd_server_t *s = ctx->srv;
    char host[256];
    long long up_ms = time_mono_ms() - s->start_mono_ms;
    uint64_t conns_now, conns_total;
    bson_t sub;
    (void)err;

    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    BSON_APPEND_UTF8(reply, "host", host);
    BSON_APPEND_UTF8(reply, "url", s->url);
    BSON_APPEND_UTF8(reply, "version", MS_MONGODB_VERSION);   /* as buildInfo's */
    BSON_APPEND_UTF8(reply, "minishardVersion", MS_VERSION);
    BSON_APPEND_UTF8(reply, "process", s->process);
    BSON_APPEND_INT64(reply, "pid", (int64_t)getpid());
    BSON_APPEND_DOUBLE(reply, "uptime", (double)up_ms / 1000.0);
    BSON_APPEND_INT64(reply, "uptimeMillis", up_ms);
    BSON_APPEND_DATE_TIME(reply, "localTime", time_now_ms());

    rpc_server_connections(s->rpc, &conns_now, &conns_total);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "connections", &sub);
    BSON_APPEND_INT64(&sub, "current", (int64_t)conns_now);
    BSON_APPEND_INT64(&sub, "totalCreated", (int64_t)conns_total);
    BSON_APPEND_INT32(&sub, "active", atomic_load(&s->active));
    BSON_APPEND_INT64(&sub, "available", (int64_t)(MS_RPC_CONNS_MAX - (int64_t)conns_now));
    /* MongoDB's name for connections refused over the cap; then ours, by reason. */
    BSON_APPEND_INT64(&sub, "rejected",
                      (int64_t)rpc_server_closed(s->rpc, RPC_CLOSE_TOO_MANY_CONNECTIONS));
    {
        bson_t closed;
        BSON_APPEND_DOCUMENT_BEGIN(&sub, "closedByServer", &closed);
        for (int r = 0; r < RPC_CLOSE_REASONS; r++)
            if (r != RPC_CLOSE_TOO_MANY_CONNECTIONS)
                BSON_APPEND_INT64(&closed, rpc_close_reason_name((rpc_close_reason_t)r),
                                  (int64_t)rpc_server_closed(s->rpc, (rpc_close_reason_t)r));
        bson_append_document_end(&sub, &closed);
    }
    if (s->wire) {  /* the MongoDB wire protocol listener's own connections */
        bson_t w, closed;
        rpc_server_connections(s->wire, &conns_now, &conns_total);
        BSON_APPEND_DOCUMENT_BEGIN(&sub, "wire", &w);
        BSON_APPEND_UTF8(&w, "url", s->wire_url);
        BSON_APPEND_INT64(&w, "current", (int64_t)conns_now);
        BSON_APPEND_INT64(&w, "totalCreated", (int64_t)conns_total);
        BSON_APPEND_INT64(&w, "numRequests", (int64_t)rpc_server_requests(s->wire));
        BSON_APPEND_DOCUMENT_BEGIN(&w, "closedByServer", &closed);
        for (int r = 0; r < RPC_CLOSE_REASONS; r++)
            BSON_APPEND_INT64(&closed, rpc_close_reason_name((rpc_close_reason_t)r),
                              (int64_t)rpc_server_closed(s->wire, (rpc_close_reason_t)r));
        bson_append_document_end(&w, &closed);
        bson_append_document_end(&sub, &w);
    }
    bson_append_document_end(reply, &sub);

    BSON_APPEND_DOCUMENT_BEGIN(reply, "network", &sub);
    /* This request is still being served, so it is not counted yet. */
    BSON_APPEND_INT64(&sub, "numRequests", (int64_t)rpc_server_requests(s->rpc));
    bson_append_document_end(reply, &sub);
    rpc_peers_append_status(reply);   /* calls from this process to each peer */

    cmd_append_command_metrics(s, reply);
    if (s->test_commands) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "failpoints", &sub);
        fp_append_status(&sub);
        bson_append_document_end(reply, &sub);
    }
    if (s->status) s->status(s->app, reply);
    return 0;
}

/* buildInfo: the MongoDB release minishard follows (version, versionArray), so tools
 * that choose their behaviour by version (mongosh, drivers) act as with MongoDB 7.0;
 * minishard's own version is minishardVersion. */
static int cmd_build_info(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    static const int va[] = MS_MONGODB_VERSION_ARRAY;
    bson_t arr;
    char key[16];
    (void)err;
    BSON_APPEND_UTF8(reply, "version", MS_MONGODB_VERSION);
    BSON_APPEND_UTF8(reply, "gitVersion", "minishard-" MS_VERSION);
    BSON_APPEND_ARRAY_BEGIN(reply, "modules", &arr);
    bson_append_array_end(reply, &arr);
    BSON_APPEND_UTF8(reply, "allocator", "system");
    BSON_APPEND_UTF8(reply, "javascriptEngine", "none");
    BSON_APPEND_UTF8(reply, "sysInfo", "deprecated");
    BSON_APPEND_ARRAY_BEGIN(reply, "versionArray", &arr);
    for (size_t i = 0; i < sizeof va / sizeof va[0]; i++) {
        snprintf(key, sizeof key, "%zu", i);
        BSON_APPEND_INT32(&arr, key, va[i]);
    }
    bson_append_array_end(reply, &arr);
    BSON_APPEND_INT32(reply, "bits", (int32_t)(sizeof(void *) * 8));
    BSON_APPEND_BOOL(reply, "debug", false);
    BSON_APPEND_INT32(reply, "maxBsonObjectSize", MS_DOC_BYTES_MAX);
    BSON_APPEND_ARRAY_BEGIN(reply, "storageEngines", &arr);
    BSON_APPEND_UTF8(&arr, "0", "sqlite");
    bson_append_array_end(reply, &arr);
    BSON_APPEND_UTF8(reply, "minishardVersion", MS_VERSION);
    BSON_APPEND_UTF8(reply, "process", cmd_server_process(ctx->srv));
    BSON_APPEND_UTF8(reply, "storageEngine", "sqlite");
    return 0;
}

/* getParameter: {getParameter: 1 | "*" | {showDetails?, allParameters?}, <name>: 1, ...}.
 * The parameters a driver or mongosh asks for; `*` (or allParameters) lists them all. */
static void cmd_param_value(const char *name, bson_t *dst, const char *key) {
    if (strcmp(name, "featureCompatibilityVersion") == 0) {
        bson_t v;
        BSON_APPEND_DOCUMENT_BEGIN(dst, key, &v);
        BSON_APPEND_UTF8(&v, "version", MS_MONGODB_FCV);
        bson_append_document_end(dst, &v);
    } else if (strcmp(name, "maxBSONDepth") == 0) {
        BSON_APPEND_INT32(dst, key, MS_DOC_DEPTH_MAX);
    } else if (strcmp(name, "maxAcceptableLogicalClockDriftSecs") == 0) {
        BSON_APPEND_INT64(dst, key, MS_CLOCK_DRIFT_SECS_MAX);  /* docs/cluster-time.md */
    }
}

static const char *const cmd_params[] = {"featureCompatibilityVersion", "maxBSONDepth",
                                         "enableTestCommands",
                                         "maxAcceptableLogicalClockDriftSecs", NULL};

static void cmd_append_param(cmd_ctx_t *ctx, const char *name, bool details, bson_t *reply) {
    bson_t d;
    bson_t *dst = reply;
    const char *key = name;
    if (details) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, name, &d);
        dst = &d;
        key = "value";
    }
    if (strcmp(name, "enableTestCommands") == 0)
        BSON_APPEND_BOOL(dst, key, cmd_server_test_commands(ctx->srv));
    else
        cmd_param_value(name, dst, key);
    if (details) {
        BSON_APPEND_BOOL(&d, "settableAtRuntime", false);
        BSON_APPEND_BOOL(&d, "settableAtStartup", false);
        bson_append_document_end(reply, &d);
    }
}

static int cmd_get_parameter(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bool all = false, details = false;
    int found = 0;
    bson_iter_t it;
    if (BSON_ITER_HOLDS_UTF8(&ctx->arg)) {
        all = strcmp(bson_iter_utf8(&ctx->arg, NULL), "*") == 0;
    } else if (BSON_ITER_HOLDS_DOCUMENT(&ctx->arg)) {
        bson_iter_t o;
        if (bson_iter_recurse(&ctx->arg, &o))
            while (bson_iter_next(&o)) {
                if (strcmp(bson_iter_key(&o), "showDetails") == 0) details = bsonx_truthy(&o);
                else if (strcmp(bson_iter_key(&o), "allParameters") == 0) all = bsonx_truthy(&o);
            }
    }
    for (int i = 0; cmd_params[i]; i++) {
        if (!all && !bson_iter_init_find(&it, ctx->req, cmd_params[i])) continue;
        cmd_append_param(ctx, cmd_params[i], details, reply);
        found++;
    }
    if (found == 0)
        return err_set(err, MS_ERR_INVALID_OPTIONS, "no option found to get");
    return 0;
}

/* getLog: minishard logs to stderr and keeps no log in memory, so the RAM logs MongoDB
 * names are there and empty; startupWarnings is what mongosh prints on connect. */
static int cmd_get_log(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    const char *name = bson_iter_utf8(&ctx->arg, NULL);
    bson_t arr;
    if (strcmp(name, "*") == 0) {
        BSON_APPEND_ARRAY_BEGIN(reply, "names", &arr);
        BSON_APPEND_UTF8(&arr, "0", "global");
        BSON_APPEND_UTF8(&arr, "1", "startupWarnings");
        bson_append_array_end(reply, &arr);
        return 0;
    }
    if (strcmp(name, "global") != 0 && strcmp(name, "startupWarnings") != 0) {
        char shown[101];
        size_t i = 0;
        for (; name[i] && i + 1 < sizeof shown; i++)
            shown[i] = (name[i] < 0x20 || name[i] == '\'') ? '?' : name[i];
        shown[i] = '\0';
        return err_set(err, MS_ERR_OPERATION_FAILED, "No log named '%s'", shown);
    }
    BSON_APPEND_INT32(reply, "totalLinesWritten", 0);
    BSON_APPEND_ARRAY_BEGIN(reply, "log", &arr);
    bson_append_array_end(reply, &arr);
    return 0;
}

/* connectionStatus: no authentication in minishard, so nobody is authenticated. */
static int cmd_connection_status(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_t ai, arr;
    (void)err;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "authInfo", &ai);
    BSON_APPEND_ARRAY_BEGIN(&ai, "authenticatedUsers", &arr);
    bson_append_array_end(&ai, &arr);
    BSON_APPEND_ARRAY_BEGIN(&ai, "authenticatedUserRoles", &arr);
    bson_append_array_end(&ai, &arr);
    if (cmd_flag(ctx, "showPrivileges", false)) {
        BSON_APPEND_ARRAY_BEGIN(&ai, "authenticatedUserPrivileges", &arr);
        bson_append_array_end(&ai, &arr);
    }
    bson_append_document_end(reply, &ai);
    return 0;
}

/* whatsmyuri: the peer address of this connection as the server sees it. */
static int cmd_whatsmyuri(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)ctx, (void)err;
    BSON_APPEND_UTF8(reply, "you", op_peer());
    return 0;
}

/* commitTransaction / abortTransaction: there is never a transaction to end. */
static int cmd_end_transaction(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)reply;
    return cmd_refuse_transaction(ctx->srv, err);
}

static int cmd_spec_cmp(const void *a, const void *b) {
    const cmd_spec_t *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* listCommands: {commands: {name: {help, requiresAuth, secondaryOk, adminOnly,
 * apiVersions, deprecatedApiVersions, write, internal, test}}}, sorted by name as
 * mongod's (its fields first, then minishard's flags); shadowed common rows and hidden
 * test commands left out. */
static int cmd_list_commands(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    cmd_server_t *s = ctx->srv;
    int n = 0, cap = s->table_len + cmd_common_table_len;
    const cmd_spec_t **all = calloc((size_t)cap, sizeof *all);
    bson_t cmds;
    if (!all) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "listCommands: out of memory");
    for (int pass = 0; pass < 2; pass++) {
        const cmd_spec_t *table = pass == 0 ? s->table : cmd_common_table;
        int len = pass == 0 ? s->table_len : cmd_common_table_len;
        for (int i = 0; i < len; i++)
            if (cmd_lookup(s, table[i].name) == &table[i]) all[n++] = &table[i];
    }
    qsort(all, (size_t)n, sizeof *all, cmd_spec_cmp);
    BSON_APPEND_DOCUMENT_BEGIN(reply, "commands", &cmds);
    for (int i = 0; i < n; i++) {
        bson_t one;
        BSON_APPEND_DOCUMENT_BEGIN(&cmds, all[i]->name, &one);
        bson_t none;
        BSON_APPEND_UTF8(&one, "help", all[i]->help ? all[i]->help : "");
        BSON_APPEND_BOOL(&one, "requiresAuth", false);
        BSON_APPEND_BOOL(&one, "secondaryOk", true);
        BSON_APPEND_BOOL(&one, "adminOnly", false);
        BSON_APPEND_ARRAY_BEGIN(&one, "apiVersions", &none);
        if (cmd_in_api_v1(all[i]->name)) BSON_APPEND_UTF8(&none, "0", "1");
        bson_append_array_end(&one, &none);
        BSON_APPEND_ARRAY_BEGIN(&one, "deprecatedApiVersions", &none);
        bson_append_array_end(&one, &none);
        BSON_APPEND_BOOL(&one, "write", (all[i]->flags & CMD_WRITE) != 0);
        BSON_APPEND_BOOL(&one, "internal", (all[i]->flags & CMD_INTERNAL) != 0);
        BSON_APPEND_BOOL(&one, "test", (all[i]->flags & CMD_TEST) != 0);
        bson_append_document_end(&cmds, &one);
    }
    bson_append_document_end(reply, &cmds);
    free(all);
    return 0;
}

static int cmd_configure_fail_point(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return fp_configure(ctx->req, reply, err);
}

static int cmd_wait_for_fail_point(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    return fp_wait(ctx->req, reply, err);
}

#define HELLO_FIELDS CMD_HELLO_FIELDS

const cmd_spec_t cmd_common_table[] = {
    {.name = "hello", .handler = cmd_hello, .flags = CMD_NO_LOG, .fields = HELLO_FIELDS,
     .help = "handshake: limits, wire versions, the process kind"},
    {.name = "isMaster", .handler = cmd_hello, .flags = CMD_NO_LOG, .fields = HELLO_FIELDS,
     .help = "legacy name of hello"},
    {.name = "ismaster", .handler = cmd_hello, .flags = CMD_NO_LOG, .fields = HELLO_FIELDS,
     .help = "legacy name of hello"},
    {.name = "ping", .handler = cmd_ping, .flags = CMD_NO_LOG, .help = "answers {ok: 1}"},
    {.name = "serverStatus", .handler = cmd_server_status, .flags = CMD_NO_LOG,
     .help = "process overview: uptime, connections, command counters, daemon sections"},
    {.name = "buildInfo", .handler = cmd_build_info, .flags = CMD_NO_LOG,
     .help = "the MongoDB version followed (7.0.0) and minishard's own"},
    {.name = "buildinfo", .handler = cmd_build_info, .flags = CMD_NO_LOG,
     .help = "legacy name of buildInfo"},
    {.name = "getParameter", .handler = cmd_get_parameter, .flags = CMD_NO_LOG,
     .arg_types = CT_NUM | CT_STR | CT_DOC | CT_BOOL,
     .help = "server parameters: featureCompatibilityVersion, maxBSONDepth, enableTestCommands"},
    {.name = "getLog", .handler = cmd_get_log, .flags = CMD_NO_LOG, .arg_types = CT_STR,
     .help = "RAM logs: \"*\" names them; global and startupWarnings are empty"},
    /* the logical session cache (lsess.c) */
    {.name = "startSession", .handler = lsess_cmd_start, .flags = CMD_NO_LOG,
     .help = "a new session: {startSession: 1} -> {id: {id: UUID}, timeoutMinutes}"},
    {.name = "refreshSessions", .handler = lsess_cmd_refresh, .flags = CMD_NO_LOG,
     .arg_types = CT_ARR, .help = "mark sessions used: {refreshSessions: [{id: UUID}]}"},
    {.name = "endSessions", .handler = lsess_cmd_end, .flags = CMD_NO_LOG,
     .arg_types = CT_ARR, .help = "end sessions: {endSessions: [{id: UUID}]}"},
    {.name = "killSessions", .handler = lsess_cmd_kill, .arg_types = CT_ARR,
     .help = "kill sessions: {killSessions: [{id: UUID}]}"},
    {.name = "killAllSessions", .handler = lsess_cmd_kill_all, .arg_types = CT_ARR,
     .help = "kill every session of the users named: {killAllSessions: [{user, db}] | []}"},
    {.name = "connectionStatus", .handler = cmd_connection_status, .flags = CMD_NO_LOG,
     .fields = {{"showPrivileges", CT_FLAG, false}},
     .help = "no authentication: no authenticated users"},
    {.name = "hostInfo", .handler = cmd_host_info, .flags = CMD_NO_LOG | CMD_STRICT_FIELDS,
     .help = "this host: system (memory, cores, arch), os, extra (kernel, libc, cpu)"},
    {.name = "whatsmyuri", .handler = cmd_whatsmyuri, .flags = CMD_NO_LOG,
     .help = "the client's address as this process sees it"},
    {.name = "commitTransaction", .handler = cmd_end_transaction,
     .help = "refused: no transactions (IllegalOperation)"},
    {.name = "abortTransaction", .handler = cmd_end_transaction,
     .help = "refused: no transactions (IllegalOperation)"},
    {.name = "listCommands", .handler = cmd_list_commands,
     .help = "every command this process serves, with its help and flags"},
    {.name = "configureFailPoint", .handler = cmd_configure_fail_point, .flags = CMD_TEST,
     .arg_types = CT_STR,
     .fields = {{"mode", CT_STR | CT_DOC, true}, {"data", CT_DOC, false}},
     .help = "turns a failpoint on or off: mode alwaysOn | off | {times: N} | {skip: N}"},
    {.name = "waitForFailPoint", .handler = cmd_wait_for_fail_point, .flags = CMD_TEST,
     .arg_types = CT_STR,
     .fields = {{"timesEntered", CT_NUM, true}, {"maxTimeMS", CT_NUM, false}},
     .help = "waits until a failpoint has been entered timesEntered times"},
};
const int cmd_common_table_len = (int)(sizeof cmd_common_table / sizeof cmd_common_table[0]);

void cmd_cursor_metrics_begin(bson_t *metrics, const cmd_cursor_metrics_t *m, bson_t *cur) {
    bson_t sub;
    BSON_APPEND_DOCUMENT_BEGIN(metrics, "cursor", cur);
    BSON_APPEND_DOCUMENT_BEGIN(cur, "open", &sub);
    BSON_APPEND_INT64(&sub, "total", m->open);
    bson_append_document_end(cur, &sub);
    BSON_APPEND_INT64(cur, m->bytes_field, m->bytes);
    BSON_APPEND_DOCUMENT_BEGIN(cur, "refused", &sub);
    if (m->refused_conn >= 0) BSON_APPEND_INT64(&sub, "perConnection", m->refused_conn);
    if (m->refused_client >= 0) BSON_APPEND_INT64(&sub, "perClient", m->refused_client);
    if (m->refused_total >= 0) BSON_APPEND_INT64(&sub, "total", m->refused_total);
    if (m->refused_bytes >= 0) BSON_APPEND_INT64(&sub, "bytes", m->refused_bytes);
    bson_append_document_end(cur, &sub);
    BSON_APPEND_DOCUMENT_BEGIN(cur, "limits", &sub);
    if (m->limit_conn >= 0) BSON_APPEND_INT64(&sub, "perConnection", m->limit_conn);
    if (m->limit_client >= 0) BSON_APPEND_INT64(&sub, "perClient", m->limit_client);
    if (m->limit_total >= 0) BSON_APPEND_INT64(&sub, "total", m->limit_total);
    if (m->limit_bytes >= 0) BSON_APPEND_INT64(&sub, "bytes", m->limit_bytes);
    bson_append_document_end(cur, &sub);
}
