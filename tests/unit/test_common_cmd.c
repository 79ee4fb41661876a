/*
 * test_common_cmd.c — command dispatch (common/cmd.c) and the common commands
 * (common/cmd_common.c), served over ipc:// (tcp for the oversized message):
 * reply shapes, unknown commands, field and type checks, hidden test commands,
 * error replies with extra fields and their log lines, size limits both ways,
 * thousands of seeded garbage messages, and the failCommand failpoint.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cmd.h"
#include "common/log.h"
#include "tests/unit/t.h"

/* ---- a daemon table for the tests ------------------------------------------------ */

static int h_echo(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)err;
    BSON_APPEND_UTF8(reply, "db", ctx->db);
    BSON_APPEND_UTF8(reply, "name", ctx->name);
    BSON_APPEND_UTF8(reply, "arg", bson_iter_utf8(&ctx->arg, NULL));
    BSON_APPEND_BOOL(reply, "flag", cmd_flag(ctx, "flag", false));
    return 0;
}

static int h_stale(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    BSON_APPEND_UTF8(reply, "dropped", "on error");  /* must not reach the client */
    BSON_APPEND_INT32(&ctx->err_info, "vWanted", 7);
    return err_set(err, MS_ERR_STALE_CONFIG, "version mismatch");
}

static int h_bare_rc(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)ctx, (void)reply, (void)err;
    return MS_ERR_INTERNAL;
}

static int h_big_reply(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    size_t n = (size_t)MS_MSG_BYTES_MAX + 1;
    uint8_t *junk = calloc(1, n);
    (void)ctx;
    if (!junk) return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "no memory");
    BSON_APPEND_BINARY(reply, "junk", BSON_SUBTYPE_BINARY, junk, (uint32_t)n);
    free(junk);
    return 0;
}

/* Handlers that leave a sub-document of reply (or of err_info) open: libbson refuses
 * every later append to, and bson_reinit of, such a document by aborting. */
static int h_open_fail(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_t cur, arr;
    (void)ctx;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    BSON_APPEND_ARRAY_BEGIN(&cur, "firstBatch", &arr);
    BSON_APPEND_UTF8(&arr, "0", "half-built");
    return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "too many open cursors");
}

static int h_open_ok(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_t cur;
    (void)ctx, (void)err;
    BSON_APPEND_DOCUMENT_BEGIN(reply, "cursor", &cur);
    return 0;
}

static int h_open_info(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_t sub;
    BSON_APPEND_INT32(reply, "dropped", 1);
    BSON_APPEND_DOCUMENT_BEGIN(&ctx->err_info, "detail", &sub);
    return err_set(err, MS_ERR_BAD_VALUE, "bad detail");
}

static int h_hello(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)ctx, (void)err;
    BSON_APPEND_UTF8(reply, "msg", "overridden");
    return 0;
}

static void status_section(void *app, bson_t *reply) {
    BSON_APPEND_UTF8(reply, "testSection", (const char *)app);
}

static const cmd_spec_t test_table[] = {
    {.name = "echo", .handler = h_echo, .arg_types = CT_STR,
     .fields = {{"n", CT_INT32 | CT_INT64, true}, {"opt", CT_DOC, false}, {"flag", CT_FLAG, false}},
     .help = "echoes"},
    {.name = "stale", .handler = h_stale, .help = "fails with extra fields"},
    {.name = "bareRc", .handler = h_bare_rc, .help = "fails without a message"},
    {.name = "bigReply", .handler = h_big_reply, .help = "answers too much"},
    {.name = "testOnly", .handler = h_echo, .flags = CMD_TEST, .arg_types = CT_STR,
     .fields = {{"n", CT_NUM, true}}, .help = "hidden without test commands"},
    {.name = "hello", .handler = h_hello, .help = "overrides the common hello"},
    {.name = "openFail", .handler = h_open_fail, .help = "fails with a sub-document open"},
    {.name = "openOk", .handler = h_open_ok, .help = "succeeds with a sub-document open"},
    {.name = "openInfo", .handler = h_open_info, .help = "fails with err_info half-built"},
    {.name = "strict", .handler = h_echo, .flags = CMD_STRICT_FIELDS, .arg_types = CT_STR,
     .fields = {{"n", CT_INT32 | CT_INT64, true}, {"updates", CT_ARR, false}},
     .stmts = "updates", .stmt_fields = cmd_update_stmt_fields,
     .help = "refuses unknown fields"},
};

static cmd_server_t *start(const char *url, bool test_commands) {
    cmd_server_opts_t o = {.process = "testd", .url = url, .workers = 4,
                           .enable_test_commands = test_commands, .table = test_table,
                           .table_len = (int)(sizeof test_table / sizeof test_table[0]),
                           .app = (void *)"present", .status = status_section};
    cmd_server_t *s = NULL;
    ms_error_t err = {0};
    int rc = cmd_server_start(&o, &s, &err);
    CHECK_MSG(rc == 0, "cmd_server_start: %s", err.msg);
    return s;
}

/* Sends extended JSON, returns the reply (caller destroys); {} on transport failure. */
static void call_json(rpc_client_t *c, const char *json, bson_t *reply) {
    bson_t cmd;
    bson_error_t berr;
    ms_error_t err = {0};
    if (!bson_init_from_json(&cmd, json, -1, &berr)) {
        t_fail(__FILE__, __LINE__, "bad test json %s: %s", json, berr.message);
        bson_init(reply);
        return;
    }
    if (rpc_call(c, &cmd, 10000, reply, &err) != 0) {
        t_fail(__FILE__, __LINE__, "rpc_call %s: %s", json, err.msg);
        bson_init(reply);
    }
    bson_destroy(&cmd);
}

static bool has(const bson_t *doc, const char *path, bson_iter_t *out) {
    bson_iter_t it;
    return bson_iter_init(&it, doc) && bson_iter_find_descendant(&it, path, out);
}

static int64_t get_int(const bson_t *doc, const char *path) {
    bson_iter_t f;
    return has(doc, path, &f) ? bson_iter_as_int64(&f) : -1;
}

static const char *get_str(const bson_t *doc, const char *path) {
    bson_iter_t f;
    return has(doc, path, &f) && BSON_ITER_HOLDS_UTF8(&f) ? bson_iter_utf8(&f, NULL) : NULL;
}

/* ok must be present, a double, and equal want (MongoDB sends ok as a double). */
static bool ok_is(const bson_t *doc, double want) {
    bson_iter_t f;
    return has(doc, "ok", &f) && BSON_ITER_HOLDS_DOUBLE(&f) && bson_iter_double(&f) == want;
}

#define EXPECT_ERR(reply, code_)                                                      \
    do {                                                                              \
        CHECK_MSG(ok_is(&(reply), 0.0), "expected ok: 0");                            \
        CHECK_INT(get_int(&(reply), "code"), code_);                                  \
        CHECK_STR(get_str(&(reply), "codeName"), err_code_name(code_));               \
        CHECK(get_str(&(reply), "errmsg") != NULL);                                   \
    } while (0)

/* ---- tests ----------------------------------------------------------------------- */

static void cmd_common_commands(void) {
    cmd_server_t *s = start(t_url("cmd_common"), true);
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    bson_t r;
    bson_iter_t f;
    CHECK_INT(rpc_client_open(t_url("cmd_common"), &c, &err), 0);

    call_json(c, "{\"ping\": 1}", &r);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);

    call_json(c, "{\"isMaster\": 1, \"helloOk\": true}", &r);
    CHECK(ok_is(&r, 1.0));
    CHECK(has(&r, "ismaster", &f) && bson_iter_as_bool(&f));
    CHECK(has(&r, "helloOk", &f) && bson_iter_as_bool(&f));
    CHECK_INT(get_int(&r, "maxBsonObjectSize"), 16777216);
    CHECK_INT(get_int(&r, "maxMessageSizeBytes"), 48000000);
    CHECK_INT(get_int(&r, "maxWriteBatchSize"), 100000);
    CHECK_INT(get_int(&r, "minWireVersion"), 0);
    CHECK_INT(get_int(&r, "maxWireVersion"), 21);
    CHECK(has(&r, "localTime", &f) && BSON_ITER_HOLDS_DATE_TIME(&f));
    CHECK_STR(get_str(&r, "process"), "testd");
    bson_destroy(&r);

    /* The daemon's own hello row wins over the common one. */
    call_json(c, "{\"hello\": 1}", &r);
    CHECK_STR(get_str(&r, "msg"), "overridden");
    CHECK(!has(&r, "isWritablePrimary", &f));
    bson_destroy(&r);

    call_json(c, "{\"buildInfo\": 1}", &r);
    CHECK_STR(get_str(&r, "version"), "7.0.0");
    CHECK_STR(get_str(&r, "minishardVersion"), "0.1.0");
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);

    call_json(c, "{\"listCommands\": 1}", &r);
    CHECK(has(&r, "commands.echo.help", &f));
    CHECK(has(&r, "commands.ping", &f));
    CHECK(has(&r, "commands.testOnly.test", &f) && bson_iter_as_bool(&f));
    CHECK(has(&r, "commands.configureFailPoint", &f));
    CHECK_STR(get_str(&r, "commands.hello.help"), "overrides the common hello");
    bson_destroy(&r);

    call_json(c, "{\"serverStatus\": 1}", &r);
    CHECK(ok_is(&r, 1.0));
    CHECK_INT(get_int(&r, "pid"), getpid());
    CHECK_STR(get_str(&r, "process"), "testd");
    CHECK_STR(get_str(&r, "url"), t_url("cmd_common"));
    CHECK_STR(get_str(&r, "version"), "7.0.0");
    CHECK_STR(get_str(&r, "minishardVersion"), "0.1.0");
    CHECK(get_int(&r, "uptimeMillis") >= 0);
    CHECK(has(&r, "uptime", &f));
    CHECK(has(&r, "localTime", &f));
    CHECK(get_int(&r, "connections.current") >= 1);
    CHECK(get_int(&r, "connections.totalCreated") >= 1);
    CHECK_INT(get_int(&r, "network.numRequests"), 5);
    CHECK_INT(get_int(&r, "metrics.commands.ping.total"), 1);
    CHECK_INT(get_int(&r, "metrics.commands.hello.total"), 1);
    CHECK(has(&r, "failpoints.failCommand.mode", &f));
    CHECK_STR(get_str(&r, "testSection"), "present");
    bson_destroy(&r);

    rpc_client_close(c);
    cmd_server_stop(s);
}

static void cmd_unknown_command(void) {
    cmd_server_t *s = start(t_url("cmd_unknown"), true);
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    bson_t r;
    CHECK_INT(rpc_client_open(t_url("cmd_unknown"), &c, &err), 0);
    call_json(c, "{\"nope\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_COMMAND_NOT_FOUND);
    CHECK_STR(get_str(&r, "errmsg"), "no such command: 'nope'");
    bson_destroy(&r);
    call_json(c, "{}", &r);
    EXPECT_ERR(r, MS_ERR_FAILED_TO_PARSE);
    bson_destroy(&r);
    /* Lookup is case-sensitive, as in MongoDB (except the legacy ismaster). */
    call_json(c, "{\"PING\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_COMMAND_NOT_FOUND);
    bson_destroy(&r);
    CHECK(cmd_lookup(s, "ping") != NULL);
    CHECK(cmd_lookup(s, "nope") == NULL);
    rpc_client_close(c);
    cmd_server_stop(s);
}

static void cmd_field_checks(void) {
    cmd_server_t *s = start(t_url("cmd_fields"), true);
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    bson_t r;
    CHECK_INT(rpc_client_open(t_url("cmd_fields"), &c, &err), 0);

    call_json(c, "{\"echo\": \"x\", \"n\": 1, \"$db\": \"app\", \"flag\": 1}", &r);
    CHECK(ok_is(&r, 1.0));
    CHECK_STR(get_str(&r, "db"), "app");
    CHECK_STR(get_str(&r, "name"), "echo");
    CHECK_STR(get_str(&r, "arg"), "x");
    CHECK_INT(get_int(&r, "flag"), 1);
    bson_destroy(&r);

    call_json(c, "{\"echo\": \"x\", \"n\": {\"$numberLong\": \"5\"}}", &r);
    CHECK(ok_is(&r, 1.0));
    CHECK_STR(get_str(&r, "db"), "admin");
    bson_destroy(&r);

    call_json(c, "{\"echo\": 1, \"n\": 1}", &r);  /* the command's own value */
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    bson_destroy(&r);

    call_json(c, "{\"echo\": \"x\"}", &r);  /* required n missing */
    EXPECT_ERR(r, MS_ERR_FAILED_TO_PARSE);
    CHECK_STR(get_str(&r, "errmsg"), "BSON field 'echo.n' is missing but a required field");
    bson_destroy(&r);

    call_json(c, "{\"echo\": \"x\", \"n\": \"one\"}", &r);
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    CHECK_MSG(strstr(get_str(&r, "errmsg") ? get_str(&r, "errmsg") : "", "'echo.n'") != NULL,
              "errmsg names the field");
    bson_destroy(&r);

    call_json(c, "{\"echo\": \"x\", \"n\": 1.5}", &r);  /* double not in the mask */
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    bson_destroy(&r);

    call_json(c, "{\"echo\": \"x\", \"n\": 1, \"opt\": 3}", &r);
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    bson_destroy(&r);

    call_json(c, "{\"echo\": \"x\", \"n\": 1, \"flag\": \"yes\"}", &r);
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    bson_destroy(&r);

    call_json(c, "{\"echo\": \"x\", \"n\": 1, \"$db\": 5}", &r);
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    bson_destroy(&r);

    call_json(c, "{\"configureFailPoint\": \"failCommand\"}", &r);  /* mode required */
    EXPECT_ERR(r, MS_ERR_FAILED_TO_PARSE);
    bson_destroy(&r);

    rpc_client_close(c);
    cmd_server_stop(s);
}

static void cmd_test_only_hidden(void) {
    cmd_server_t *s = start(t_url("cmd_hidden"), false);
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    bson_t r;
    bson_iter_t f;
    CHECK_INT(rpc_client_open(t_url("cmd_hidden"), &c, &err), 0);
    CHECK(!cmd_server_test_commands(s));
    call_json(c, "{\"testOnly\": \"x\", \"n\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_COMMAND_NOT_FOUND);
    CHECK_STR(get_str(&r, "errmsg"), "no such command: 'testOnly'");
    bson_destroy(&r);
    call_json(c, "{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}", &r);
    EXPECT_ERR(r, MS_ERR_COMMAND_NOT_FOUND);
    bson_destroy(&r);
    call_json(c, "{\"waitForFailPoint\": \"failCommand\", \"timesEntered\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_COMMAND_NOT_FOUND);
    bson_destroy(&r);
    call_json(c, "{\"listCommands\": 1}", &r);
    CHECK(has(&r, "commands.echo", &f));
    CHECK(!has(&r, "commands.testOnly", &f));
    CHECK(!has(&r, "commands.configureFailPoint", &f));
    bson_destroy(&r);
    call_json(c, "{\"serverStatus\": 1}", &r);
    CHECK(!has(&r, "failpoints", &f));
    bson_destroy(&r);
    rpc_client_close(c);
    cmd_server_stop(s);
}

static void cmd_error_fields(void) {
    cmd_server_t *s = start(t_url("cmd_errinfo"), true);
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    bson_t r;
    bson_iter_t f;
    CHECK_INT(rpc_client_open(t_url("cmd_errinfo"), &c, &err), 0);
    call_json(c, "{\"stale\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_STALE_CONFIG);
    CHECK_STR(get_str(&r, "errmsg"), "version mismatch");
    CHECK_INT(get_int(&r, "vWanted"), 7);
    CHECK(!has(&r, "dropped", &f));
    bson_destroy(&r);
    call_json(c, "{\"bareRc\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_INTERNAL);
    CHECK_STR(get_str(&r, "errmsg"), "bareRc failed");
    bson_destroy(&r);
    /* rpc_command surfaces the code and keeps the reply for its extra fields. */
    {
        bson_t cmd = BSON_INITIALIZER;
        BSON_APPEND_INT32(&cmd, "stale", 1);
        CHECK_INT(rpc_command(c, &cmd, 5000, &r, &err), MS_ERR_STALE_CONFIG);
        CHECK_INT(get_int(&r, "vWanted"), 7);
        bson_destroy(&r);
        bson_destroy(&cmd);
    }
    rpc_client_close(c);
    cmd_server_stop(s);
}

/* Every error reply leaves one log line naming the command and the code. */
static void cmd_error_logged(void) {
    cmd_server_t *s = start(t_url("cmd_logged"), true);
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    char path[512], text[8192];
    int fd, saved;
    ssize_t n;
    bson_t r;
    CHECK_INT(rpc_client_open(t_url("cmd_logged"), &c, &err), 0);
    snprintf(path, sizeof path, "%s/log.txt", t_tmpdir());
    fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    call_json(c, "{\"nope\": 1}", &r);
    bson_destroy(&r);
    call_json(c, "{\"echo\": \"x\"}", &r);
    bson_destroy(&r);
    dup2(saved, STDERR_FILENO);
    close(saved);
    n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    CHECK_MSG(strstr(text, "cmd=nope code=59 ") != NULL, "log: %s", text);
    CHECK_MSG(strstr(text, "cmd=echo code=9 ") != NULL, "log: %s", text);
    CHECK_MSG(strstr(text, "errmsg=\"no such command: 'nope'\"") != NULL, "log: %s", text);
    rpc_client_close(c);
    cmd_server_stop(s);
}


static void cmd_size_limits(void) {
    char url[64];
    cmd_server_t *s;
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    size_t big = (size_t)MS_MSG_BYTES_MAX + 100;
    uint8_t *buf = calloc(1, big);
    bson_t r;
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", t_free_port(10));
    s = start(url, true);
    CHECK_INT(rpc_client_open(url, &c, &err), 0);
    /* A well-formed document over 48 MB: {x: <binary>} with a truthful length. */
    {
        uint32_t doclen = (uint32_t)big, binlen = (uint32_t)(big - 4 - 1 - 2 - 4 - 1 - 1);
        memcpy(buf, &doclen, 4);
        buf[4] = 0x05, buf[5] = 'x', buf[6] = 0;
        memcpy(buf + 7, &binlen, 4);
        buf[11] = 0;
        buf[big - 1] = 0;
    }
    CHECK_INT(rpc_call_raw(c, buf, big, 20000, &r, &err), 0);
    EXPECT_ERR(r, MS_ERR_BSON_OBJECT_TOO_LARGE);
    bson_destroy(&r);
    free(buf);
    /* A reply over the limit becomes an error reply too. */
    call_json(c, "{\"bigReply\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_BSON_OBJECT_TOO_LARGE);
    CHECK(r.len < 1024);
    bson_destroy(&r);
    call_json(c, "{\"ping\": 1}", &r);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    rpc_client_close(c);
    cmd_server_stop(s);
}

static uint64_t rng_next(uint64_t *x) {
    /* xorshift64*: small, seeded, reproducible */
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1DULL;
}

/* Garbage of every kind gets an error reply, never a crash, and the server serves on. */
static void cmd_garbage(void) {
    cmd_server_t *s = start(t_url("cmd_garbage"), true);
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    uint64_t x = t_seed("cmd_garbage") | 1;
    uint8_t buf[512];
    bson_t r, good;
    int bad_replies = 0, transport_errors = 0;
    CHECK_INT(rpc_client_open(t_url("cmd_garbage"), &c, &err), 0);
    log_init("test", LOG_ERROR);  /* thousands of error lines otherwise */

    /* 1. random bytes, random lengths (a random 4-byte prefix sometimes tells the truth) */
    for (int i = 0; i < 3000; i++) {
        size_t len = (size_t)(rng_next(&x) % sizeof buf);
        for (size_t j = 0; j < len; j++) buf[j] = (uint8_t)rng_next(&x);
        if (len >= 5 && (i & 1)) {
            uint32_t l = (uint32_t)len;
            memcpy(buf, &l, 4);
            buf[len - 1] = 0;
        }
        if (rpc_call_raw(c, buf, len, 5000, &r, &err) != 0) {
            transport_errors++;
            continue;
        }
        if (!ok_is(&r, 0.0) || get_int(&r, "code") <= 0) bad_replies++;
        bson_destroy(&r);
    }
    /* 2. a valid command cut short at every length, and with a lying length prefix */
    bson_init(&good);
    BSON_APPEND_UTF8(&good, "echo", "x");
    BSON_APPEND_INT32(&good, "n", 1);
    BSON_APPEND_UTF8(&good, "s", "some text");
    for (uint32_t len = 0; len < good.len; len++) {
        if (rpc_call_raw(c, bson_get_data(&good), len, 5000, &r, &err) != 0) {
            transport_errors++;
            continue;
        }
        if (!ok_is(&r, 0.0)) bad_replies++;
        bson_destroy(&r);
    }
    for (int delta = -8; delta <= 8; delta++) {
        uint32_t lie = good.len + (uint32_t)delta;
        if (delta == 0) continue;
        memcpy(buf, bson_get_data(&good), good.len);
        memcpy(buf, &lie, 4);
        if (rpc_call_raw(c, buf, good.len, 5000, &r, &err) != 0) {
            transport_errors++;
            continue;
        }
        if (!ok_is(&r, 0.0)) bad_replies++;
        bson_destroy(&r);
    }
    /* 3. byte flips of a valid command: any reply at all is fine, as long as one comes */
    for (int i = 0; i < 2000; i++) {
        memcpy(buf, bson_get_data(&good), good.len);
        buf[4 + rng_next(&x) % (good.len - 4)] = (uint8_t)rng_next(&x);
        if (rpc_call_raw(c, buf, good.len, 5000, &r, &err) != 0) {
            transport_errors++;
            continue;
        }
        bson_iter_t f;
        if (!has(&r, "ok", &f)) bad_replies++;
        bson_destroy(&r);
    }
    /* 4. nesting deeper than MS_MSG_DEPTH_MAX */
    {
        bson_t deep[MS_MSG_DEPTH_MAX + 10];
        int d = MS_MSG_DEPTH_MAX + 9;
        bson_init(&deep[0]);
        BSON_APPEND_INT32(&deep[0], "ping", 1);
        for (int i = 1; i <= d; i++) BSON_APPEND_DOCUMENT_BEGIN(&deep[i - 1], "a", &deep[i]);
        for (int i = d; i >= 1; i--) bson_append_document_end(&deep[i - 1], &deep[i]);
        CHECK_INT(rpc_call(c, &deep[0], 5000, &r, &err), 0);
        CHECK(ok_is(&r, 0.0));
        bson_destroy(&r);
        bson_destroy(&deep[0]);
    }
    bson_destroy(&good);
    log_init("test", LOG_INFO);
    CHECK_INT(transport_errors, 0);
    CHECK_INT(bad_replies, 0);
    call_json(c, "{\"ping\": 1}", &r);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    rpc_client_close(c);
    cmd_server_stop(s);
}

/* cmd_dispatch is callable without any transport (what the RPC worker runs). */
static void cmd_dispatch_direct(void) {
    cmd_server_t *s = start(t_url("cmd_direct"), true);
    bson_t cmd = BSON_INITIALIZER, r = BSON_INITIALIZER;
    BSON_APPEND_INT32(&cmd, "ping", 1);
    cmd_dispatch(s, bson_get_data(&cmd), cmd.len, &r);
    CHECK(ok_is(&r, 1.0));
    bson_reinit(&r);
    cmd_dispatch(s, (const uint8_t *)"", 0, &r);
    EXPECT_ERR(r, MS_ERR_INVALID_BSON);
    bson_destroy(&r);
    bson_destroy(&cmd);
    {
        ms_error_t e = {MS_ERR_BAD_VALUE, "bad thing"};
        bson_t er = BSON_INITIALIZER;
        cmd_error_reply(&er, &e);
        EXPECT_ERR(er, MS_ERR_BAD_VALUE);
        CHECK_STR(get_str(&er, "errmsg"), "bad thing");
        bson_destroy(&er);
    }
    CHECK_STR(cmd_server_url(s), t_url("cmd_direct"));
    CHECK_STR(cmd_server_process(s), "testd");
    cmd_server_stop(s);
    cmd_server_stop(NULL);
}

/* Dispatches extended JSON without a transport; r is reinitialised with the reply. */
static void dispatch_json(cmd_server_t *s, const char *json, bson_t *r) {
    bson_t cmd;
    bson_error_t berr;
    bson_reinit(r);
    if (!bson_init_from_json(&cmd, json, -1, &berr)) {
        t_fail(__FILE__, __LINE__, "bad test json %s: %s", json, berr.message);
        return;
    }
    cmd_dispatch(s, bson_get_data(&cmd), cmd.len, r);
    bson_destroy(&cmd);
}

/* The generic fields of sessions and concerns (cmd_check_session_args) on any command:
 * transactions refused with IllegalOperation and mongod's text, read concerns needing a
 * replica set refused with NotAReplicaSet, the rest accepted; and the connect-time
 * commands without a transport (no connection: id 0, peer "unknown"). */
static void cmd_session_args(void) {
    cmd_server_t *s = start(t_url("cmd_session"), true);
    bson_t r = BSON_INITIALIZER;
    bson_iter_t f;
    dispatch_json(s, "{\"ping\": 1, \"lsid\": {\"id\": 1}, \"txnNumber\": {\"$numberLong\": \"3\"}, "
                     "\"writeConcern\": {\"w\": \"majority\", \"j\": true}, "
                     "\"readConcern\": {\"level\": \"majority\"}, \"apiVersion\": \"1\"}", &r);
    CHECK(ok_is(&r, 1.0));
    dispatch_json(s, "{\"ping\": 1, \"startTransaction\": true, \"autocommit\": false}", &r);
    EXPECT_ERR(r, MS_ERR_ILLEGAL_OPERATION);
    CHECK_STR(get_str(&r, "errmsg"),
              "Transaction numbers are only allowed on a replica set member or mongos");
    dispatch_json(s, "{\"ping\": 1, \"autocommit\": false}", &r);
    EXPECT_ERR(r, MS_ERR_ILLEGAL_OPERATION);
    dispatch_json(s, "{\"commitTransaction\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_ILLEGAL_OPERATION);
    dispatch_json(s, "{\"abortTransaction\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_ILLEGAL_OPERATION);
    dispatch_json(s, "{\"ping\": 1, \"readConcern\": {\"level\": \"snapshot\"}}", &r);
    EXPECT_ERR(r, MS_ERR_NOT_A_REPLICA_SET);
    CHECK_STR(get_str(&r, "codeName"), "NotAReplicaSet");
    /* afterClusterTime is served (common/lclock.h), with MongoDB's ReadConcernArgs rules. */
    dispatch_json(s, "{\"ping\": 1, \"readConcern\": {\"afterClusterTime\": "
                     "{\"$timestamp\": {\"t\": 1, \"i\": 1}}}}", &r);
    CHECK(ok_is(&r, 1.0));
    dispatch_json(s, "{\"ping\": 1, \"readConcern\": {\"afterClusterTime\": "
                     "{\"$timestamp\": {\"t\": 0, \"i\": 0}}}}", &r);
    EXPECT_ERR(r, MS_ERR_INVALID_OPTIONS);
    CHECK_STR(get_str(&r, "errmsg"), "afterClusterTime cannot be a null timestamp");
    dispatch_json(s, "{\"ping\": 1, \"readConcern\": {\"level\": \"available\", "
                     "\"afterClusterTime\": {\"$timestamp\": {\"t\": 1, \"i\": 1}}}}", &r);
    EXPECT_ERR(r, MS_ERR_INVALID_OPTIONS);
    CHECK_STR(get_str(&r, "errmsg"), "afterClusterTime field can be set only if level is "
                                     "equal to majority, local, or snapshot");
    dispatch_json(s, "{\"ping\": 1, \"readConcern\": {\"afterClusterTime\": 5}}", &r);
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    dispatch_json(s, "{\"ping\": 1, \"readConcern\": {\"afterOpTime\": {}}}", &r);
    EXPECT_ERR(r, MS_ERR_NOT_A_REPLICA_SET);
    dispatch_json(s, "{\"ping\": 1, \"readConcern\": {\"afterOpTime\": {}, \"afterClusterTime\": "
                     "{\"$timestamp\": {\"t\": 1, \"i\": 1}}}}", &r);
    EXPECT_ERR(r, MS_ERR_INVALID_OPTIONS);
    CHECK_STR(get_str(&r, "errmsg"), "Can not specify both afterClusterTime and afterOpTime");
    dispatch_json(s, "{\"ping\": 1, \"readConcern\": {\"level\": \"bogus\"}}", &r);
    EXPECT_ERR(r, MS_ERR_BAD_VALUE);
    dispatch_json(s, "{\"ping\": 1, \"readConcern\": \"local\"}", &r);
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    dispatch_json(s, "{\"ping\": 1, \"writeConcern\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    dispatch_json(s, "{\"whatsmyuri\": 1}", &r);
    CHECK_STR(get_str(&r, "you"), "unknown");
    dispatch_json(s, "{\"isMaster\": 1}", &r);
    CHECK(has(&r, "connectionId", &f) && BSON_ITER_HOLDS_INT64(&f) && bson_iter_int64(&f) == 0);
    CHECK(has(&r, "topologyVersion.processId", &f) && BSON_ITER_HOLDS_OID(&f));
    CHECK(!has(&r, "msg", &f));
    dispatch_json(s, "{\"isMaster\": 1, \"loadBalanced\": true}", &r);
    EXPECT_ERR(r, MS_ERR_LOAD_BALANCER_SUPPORT_MISMATCH);
    dispatch_json(s, "{\"getParameter\": 1, \"featureCompatibilityVersion\": 1}", &r);
    CHECK_STR(get_str(&r, "featureCompatibilityVersion.version"), "7.0");
    dispatch_json(s, "{\"getParameter\": 1, \"nope\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_INVALID_OPTIONS);
    CHECK_STR(get_str(&r, "errmsg"), "no option found to get");
    bson_destroy(&r);
    cmd_server_stop(s);
}

/* cmd_check_strict_doc: the same check on a document dispatch never saw (explain's inner
 * command): unknown top-level or statement field 40415, generic arguments accepted,
 * a listed field of the wrong type TypeMismatch. */
static void cmd_strict_doc(void) {
    const cmd_spec_t *spec = NULL;
    for (size_t i = 0; i < sizeof test_table / sizeof test_table[0]; i++)
        if (strcmp(test_table[i].name, "strict") == 0) spec = &test_table[i];
    CHECK(spec != NULL);
    static const struct {
        const char *json;
        int code;
        const char *msg;
    } cases[] = {
        {"{\"strict\": \"x\", \"n\": 1}", 0, NULL},
        {"{\"strict\": \"x\", \"n\": 1, \"comment\": 1, \"$db\": \"d\"}", 0, NULL},
        {"{\"strict\": \"x\", \"zz\": 1}", MS_ERR_IDL_UNKNOWN_FIELD,
         "BSON field 'strict.zz' is an unknown field."},
        {"{\"strict\": \"x\", \"n\": \"s\", \"zz\": 1}", MS_ERR_TYPE_MISMATCH, NULL},
        {"{\"strict\": \"x\", \"updates\": [{\"q\": {}, \"multi\": true, \"limit\": 1}]}",
         MS_ERR_IDL_UNKNOWN_FIELD, "BSON field 'strict.updates.limit' is an unknown field."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_error_t je;
        bson_t *doc = bson_new_from_json((const uint8_t *)cases[i].json, -1, &je);
        ms_error_t e = {0};
        CHECK(doc != NULL);
        if (!doc) continue;
        CHECK_INT(cmd_check_strict_doc(spec, doc, &e), cases[i].code);
        if (cases[i].msg) CHECK_STR(e.msg, cases[i].msg);
        bson_destroy(doc);
    }
}

/* CMD_STRICT_FIELDS: an unknown top-level or statement field is 40415 naming it; generic
 * arguments pass; a listed field of the wrong type met first is TypeMismatch. */
static void cmd_strict_fields(void) {
    cmd_server_t *s = start(t_url("cmd_strict"), true);
    bson_t r = BSON_INITIALIZER;
    dispatch_json(s, "{\"strict\": \"x\", \"n\": 1, \"bogus\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_IDL_UNKNOWN_FIELD);
    CHECK_STR(get_str(&r, "codeName"), "Location40415");
    CHECK_STR(get_str(&r, "errmsg"), "BSON field 'strict.bogus' is an unknown field.");
    dispatch_json(s, "{\"strict\": \"x\", \"n\": \"s\", \"bogus\": 1}", &r);
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    dispatch_json(s, "{\"strict\": \"x\", \"n\": 1, \"updates\": [{\"q\": {}, \"u\": {}}, "
                     "{\"q\": {}, \"u\": {}, \"sort\": {\"a\": 1}}]}", &r);
    EXPECT_ERR(r, MS_ERR_IDL_UNKNOWN_FIELD);
    CHECK_STR(get_str(&r, "errmsg"), "BSON field 'strict.updates.sort' is an unknown field.");
    dispatch_json(s, "{\"strict\": \"x\", \"n\": 1, \"updates\": [{\"q\": {}, \"u\": {}, "
                     "\"upsert\": true, \"multi\": false, \"arrayFilters\": []}, 5], "
                     "\"maxTimeMS\": 1000, \"comment\": \"c\", \"lsid\": {}, "
                     "\"writeConcern\": {}, \"readConcern\": {}, \"$readPreference\": {}, "
                     "\"$db\": \"d\", \"shardVersion\": {}, \"databaseVersion\": {}}", &r);
    CHECK(ok_is(&r, 1.0));
    /* a non-strict row still ignores what it does not know */
    dispatch_json(s, "{\"echo\": \"x\", \"n\": 1, \"bogus\": 1}", &r);
    CHECK(ok_is(&r, 1.0));
    CHECK(cmd_is_generic_arg("maxTimeMS") && cmd_is_generic_arg("$clusterTime") &&
          !cmd_is_generic_arg("bogus") && !cmd_is_generic_arg("readPreference"));
    bson_destroy(&r);
    cmd_server_stop(s);
}

/* A handler's error path may leave its reply half-built (a sub-document open): the
 * client gets the error, the process lives, and the next command is answered. */
static void cmd_half_built_reply(void) {
    cmd_server_t *s = start(t_url("cmd_halfbuilt"), true);
    static const char *const cmds[] = {"openFail", "openOk", "openInfo", "openFail"};
    static const int codes[] = {MS_ERR_EXCEEDED_MEMORY_LIMIT, MS_ERR_INTERNAL, MS_ERR_BAD_VALUE,
                                MS_ERR_EXCEEDED_MEMORY_LIMIT};
    for (int i = 0; i < 4; i++) {
        bson_t cmd = BSON_INITIALIZER, r = BSON_INITIALIZER;
        bson_iter_t f;
        BSON_APPEND_INT32(&cmd, cmds[i], 1);
        cmd_dispatch(s, bson_get_data(&cmd), cmd.len, &r);
        EXPECT_ERR(r, codes[i]);
        CHECK(!has(&r, "cursor", &f));
        CHECK(!has(&r, "dropped", &f));
        CHECK(!has(&r, "detail", &f));
        CHECK(bson_validate(&r, BSON_VALIDATE_NONE, NULL));
        bson_destroy(&r);
        bson_destroy(&cmd);
    }
    {
        rpc_client_t *c = NULL;
        ms_error_t err = {0};
        bson_t r;
        CHECK_INT(rpc_client_open(t_url("cmd_halfbuilt"), &c, &err), 0);
        call_json(c, "{\"openFail\": 1}", &r);
        EXPECT_ERR(r, MS_ERR_EXCEEDED_MEMORY_LIMIT);
        CHECK_STR(get_str(&r, "errmsg"), "too many open cursors");
        bson_destroy(&r);
        call_json(c, "{\"ping\": 1}", &r);
        CHECK(ok_is(&r, 1.0));
        bson_destroy(&r);
        rpc_client_close(c);
    }
    cmd_server_stop(s);
}

/* MongoDB's failCommand: named commands fail with errorCode, others are untouched. */
static void cmd_fail_command(void) {
    cmd_server_t *s = start(t_url("cmd_failcmd"), true);
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    bson_t r;
    long long t0, ms;
    CHECK_INT(rpc_client_open(t_url("cmd_failcmd"), &c, &err), 0);
    call_json(c,
              "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 2}, \"data\": "
              "{\"failCommands\": [\"echo\"], \"errorCode\": 96}}",
              &r);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    call_json(c, "{\"ping\": 1}", &r);  /* not named: does not use up a time */
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    for (int i = 0; i < 2; i++) {
        call_json(c, "{\"echo\": \"x\", \"n\": 1}", &r);
        EXPECT_ERR(r, MS_ERR_OPERATION_FAILED);
        bson_destroy(&r);
    }
    call_json(c, "{\"echo\": \"x\", \"n\": 1}", &r);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);

    /* blockConnection delays the command, which then runs normally */
    call_json(c,
              "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
              "{\"failCommands\": [\"ping\"], \"blockConnection\": true, \"blockTimeMS\": 200}}",
              &r);
    bson_destroy(&r);
    t0 = time_mono_ms();
    call_json(c, "{\"ping\": 1}", &r);
    ms = time_mono_ms() - t0;
    CHECK(ok_is(&r, 1.0));
    CHECK_MSG(ms >= 190, "ping took %lld ms, expected a 200 ms block", ms);
    bson_destroy(&r);
    /* configureFailPoint itself is never failed */
    call_json(c,
              "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
              "{\"failCommands\": [\"configureFailPoint\"], \"errorCode\": 2}}",
              &r);
    bson_destroy(&r);
    call_json(c, "{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}", &r);
    CHECK(ok_is(&r, 1.0));
    CHECK(get_int(&r, "count") >= 3);
    bson_destroy(&r);
    rpc_client_close(c);
    cmd_server_stop(s);
}

static bool refuse_underscore(const uint8_t *data, size_t len, bson_t *reply) {
    bson_t doc;
    bson_iter_t it;
    if (!bson_init_static(&doc, data, len) || !bson_iter_init(&it, &doc) || !bson_iter_next(&it) ||
        bson_iter_key(&it)[0] != '_')
        return false;
    ms_error_t e = {MS_ERR_UNAUTHORIZED, "internal command"};
    cmd_error_reply(reply, &e);
    return true;
}

/* The intercept hook (the router's internal-command guard) runs before lookup. */
static void cmd_intercept(void) {
    cmd_server_opts_t o = {.process = "testd", .url = t_url("cmd_intercept"), .workers = 2,
                           .table = test_table, .table_len = 1, .intercept = refuse_underscore};
    cmd_server_t *s = NULL;
    rpc_client_t *c = NULL;
    ms_error_t err = {0};
    bson_t r;
    CHECK_INT(cmd_server_start(&o, &s, &err), 0);
    CHECK_INT(rpc_client_open(t_url("cmd_intercept"), &c, &err), 0);
    call_json(c, "{\"_recvChunkStart\": \"a.b\"}", &r);
    EXPECT_ERR(r, MS_ERR_UNAUTHORIZED);
    bson_destroy(&r);
    call_json(c, "{\"ping\": 1}", &r);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    call_json(c, "{\"serverStatus\": 1}", &r);
    CHECK_INT(get_int(&r, "metrics.rejectedRequests"), 1);
    bson_destroy(&r);
    rpc_client_close(c);
    cmd_server_stop(s);
}

/* A repeated top-level key is refused before the handler (Location40413); a document
 * with more than MS_CMD_TOP_FIELDS_MAX fields is BadValue; wide documents of distinct
 * keys pass (the sort, not a pairwise scan). */
static void cmd_repeated_keys(void) {
    cmd_server_t *s = start(t_url("cmd_dupkeys"), true);
    bson_t cmd = BSON_INITIALIZER, r = BSON_INITIALIZER;
    BSON_APPEND_INT32(&cmd, "ping", 1);
    BSON_APPEND_INT32(&cmd, "comment", 1);
    BSON_APPEND_INT32(&cmd, "comment", 2);
    cmd_dispatch(s, bson_get_data(&cmd), cmd.len, &r);
    EXPECT_ERR(r, MS_ERR_IDL_DUPLICATE_FIELD);
    CHECK_STR(get_str(&r, "errmsg"), "BSON field 'ping.comment' is a duplicate field");
    bson_reinit(&cmd);
    bson_reinit(&r);
    BSON_APPEND_INT32(&cmd, "ping", 1);
    for (int i = 0; i < 2000; i++) {
        char k[16];
        snprintf(k, sizeof k, "x%d", i);
        BSON_APPEND_INT32(&cmd, k, i);
    }
    cmd_dispatch(s, bson_get_data(&cmd), cmd.len, &r);
    CHECK(ok_is(&r, 1.0));
    BSON_APPEND_INT32(&cmd, "x1999", 0);   /* the last key repeats one far before it */
    bson_reinit(&r);
    cmd_dispatch(s, bson_get_data(&cmd), cmd.len, &r);
    EXPECT_ERR(r, MS_ERR_IDL_DUPLICATE_FIELD);
    bson_reinit(&cmd);
    bson_reinit(&r);
    BSON_APPEND_INT32(&cmd, "ping", 1);
    for (int i = 0; i < MS_CMD_TOP_FIELDS_MAX; i++) {
        char k[16];
        snprintf(k, sizeof k, "y%d", i);
        BSON_APPEND_INT32(&cmd, k, i);
    }
    cmd_dispatch(s, bson_get_data(&cmd), cmd.len, &r);
    EXPECT_ERR(r, MS_ERR_BAD_VALUE);
    bson_destroy(&r);
    bson_destroy(&cmd);
    cmd_server_stop(s);
}

T_MAIN(T_CASE(cmd_common_commands), T_CASE(cmd_unknown_command), T_CASE(cmd_field_checks),
       T_CASE(cmd_test_only_hidden), T_CASE(cmd_error_fields), T_CASE(cmd_error_logged),
       T_CASE(cmd_size_limits), T_CASE(cmd_garbage), T_CASE(cmd_dispatch_direct), T_CASE(cmd_strict_fields), T_CASE(cmd_strict_doc),
       T_CASE(cmd_fail_command), T_CASE(cmd_intercept), T_CASE(cmd_half_built_reply),
       T_CASE(cmd_session_args), T_CASE(cmd_repeated_keys))
