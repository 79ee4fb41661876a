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
#include "common/opctx.h"
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
    /* MongoDB's text first, then how to turn test commands on */
    CHECK_STR(get_str(&r, "errmsg"), "no such command: 'testOnly' (a test-only command: start "
              "the daemon with --enable-test-commands, e.g. scripts/cluster.sh start --test ...)");
    bson_destroy(&r);
    call_json(c, "{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}", &r);
    EXPECT_ERR(r, MS_ERR_COMMAND_NOT_FOUND);
    CHECK(strstr(get_str(&r, "errmsg"), "--enable-test-commands") != NULL);
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
              "{\"failCommands\": [\"echo\"], \"errorCode\": 96, \"failInternalCommands\": true}}",
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
              "{\"failCommands\": [\"ping\"], \"blockConnection\": true, \"blockTimeMS\": 200, "
              "\"failInternalCommands\": true}}",
              &r);
    bson_destroy(&r);
    t0 = time_mono_ms();
    call_json(c, "{\"ping\": 1}", &r);
    ms = time_mono_ms() - t0;
    CHECK(ok_is(&r, 1.0));
    CHECK_MSG(ms >= 190, "ping took %lld ms, expected a 200 ms block", ms);
    bson_destroy(&r);
    /* Over NNG the client is internal: without failInternalCommands it is not failed. */
    call_json(c,
              "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
              "{\"failCommands\": [\"echo\"], \"errorCode\": 96}}",
              &r);
    bson_destroy(&r);
    call_json(c, "{\"echo\": \"x\", \"n\": 1}", &r);
    CHECK(ok_is(&r, 1.0));
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

/* ---- failCommand's data fields, modes and the errorLabels rules ------------------- */

static int write_runs;  /* how many times h_write ran (the command ran or did not) */

/* A write command for the label rules: {insert: "c", errCode: N} fails with N,
 * {wcCode: N} answers ok with a writeConcernError, {writeErrCode: N} with writeErrors. */
static int h_write(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    bson_iter_t it;
    bson_t arr, doc;
    write_runs++;
    BSON_APPEND_INT32(reply, "n", 1);
    if (cmd_field(ctx, "errCode", &it))
        return err_set(err, (int)bson_iter_as_int64(&it), "asked to fail");
    if (cmd_field(ctx, "wcCode", &it)) {
        BSON_APPEND_DOCUMENT_BEGIN(reply, "writeConcernError", &doc);
        BSON_APPEND_INT32(&doc, "code", (int32_t)bson_iter_as_int64(&it));
        BSON_APPEND_UTF8(&doc, "errmsg", "asked");
        bson_append_document_end(reply, &doc);
    }
    if (cmd_field(ctx, "writeErrCode", &it)) {
        BSON_APPEND_ARRAY_BEGIN(reply, "writeErrors", &arr);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &doc);
        BSON_APPEND_INT32(&doc, "index", 0);
        BSON_APPEND_INT32(&doc, "code", (int32_t)bson_iter_as_int64(&it));
        bson_append_document_end(&arr, &doc);
        bson_append_array_end(reply, &arr);
    }
    return 0;
}

static const cmd_spec_t write_table[] = {
    {.name = "insert", .handler = h_write, .arg_types = CT_STR, .help = "a write"},
    {.name = "find", .handler = h_write, .flags = CMD_NS_ARG, .arg_types = CT_STR, .help = "not a write"},
    {.name = "commitTransaction", .handler = h_write, .help = "ends a transaction"},
};

/* Runs json through dispatch as if it came on the wire connection of `client` (NULL: an
 * internal NNG request). *closed: the command asked the connection layer to close. */
static void wire_call(cmd_server_t *s, op_client_t *client, const char *json, bson_t *reply,
                      bool *closed) {
    bson_t cmd;
    bson_init(reply);
    if (!t_json(json, &cmd)) return;
    op_set_client(client);
    cmd_dispatch(s, bson_get_data(&cmd), cmd.len, reply);
    op_set_client(NULL);
    *closed = op_take_close();
    bson_destroy(&cmd);
}

/* One configureFailPoint, checked to succeed. */
static void fail_cmd(cmd_server_t *s, const char *json) {
    bson_t r;
    bool closed;
    wire_call(s, NULL, json, &r, &closed);
    CHECK_MSG(ok_is(&r, 1.0), "configureFailPoint refused: %s", json);
    bson_destroy(&r);
}

/* The reply's errorLabels as "A,B" ("-" when absent, "" when empty). */
static const char *labels_of(const bson_t *r, char *buf, size_t cap) {
    bson_iter_t it, arr;
    size_t n = 0;
    if (!has(r, "errorLabels", &it) || !bson_iter_recurse(&it, &arr)) return "-";
    buf[0] = '\0';
    while (bson_iter_next(&arr) && n < cap)
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "," : "",
                              BSON_ITER_HOLDS_UTF8(&arr) ? bson_iter_utf8(&arr, NULL) : "?");
    return buf;
}

static cmd_server_t *start_writes(const char *name) {
    cmd_server_opts_t o = {.process = "testd", .url = t_url(name), .workers = 2,
                           .enable_test_commands = true, .table = write_table,
                           .table_len = (int)(sizeof write_table / sizeof write_table[0])};
    cmd_server_t *s = NULL;
    ms_error_t err = {0};
    CHECK_MSG(cmd_server_start(&o, &s, &err) == 0, "cmd_server_start: %s", err.msg);
    return s;
}

/* Each data field: errorCode with errorLabels, closeConnection, writeConcernError,
 * blockConnection, appName (from the first hello), namespace, failInternalCommands, and
 * the commands it may and may not fail (hello's aliases; never configureFailPoint). */
static void cmd_fail_command_fields(void) {
    cmd_server_t *s = start_writes("cmd_failfields");
    op_client_t a = {0}, b = {0};
    bson_t r;
    bool closed;
    char lb[128];
    long long t0;
    int runs;

    /* errorLabels: exactly these, whatever the rules would say */
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
                "{\"failCommands\": [\"insert\"], \"errorCode\": 112, \"errorLabels\": [\"A\", \"B\"]}}");
    wire_call(s, &a, "{\"insert\": \"c\"}", &r, &closed);
    EXPECT_ERR(r, 112);
    CHECK_STR(get_str(&r, "codeName"), "WriteConflict");
    CHECK_STR(get_str(&r, "errmsg"), "Failing command via 'failCommand' failpoint");
    CHECK_STR(labels_of(&r, lb, sizeof lb), "A,B");
    CHECK(!closed);
    bson_destroy(&r);

    /* closeConnection: no reply goes out, and the command does not run */
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
                "{\"failCommands\": [\"insert\"], \"closeConnection\": true}}");
    runs = write_runs;
    wire_call(s, &a, "{\"insert\": \"c\"}", &r, &closed);
    CHECK(closed);
    CHECK_INT(write_runs, runs);
    bson_destroy(&r);
    wire_call(s, &a, "{\"insert\": \"c\"}", &r, &closed);   /* {times: 1} is used up */
    CHECK(!closed && ok_is(&r, 1.0));
    CHECK_INT(write_runs, runs + 1);
    bson_destroy(&r);

    /* writeConcernError: the command runs and answers ok: 1 with the document */
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
                "{\"failCommands\": [\"insert\"], \"writeConcernError\": "
                "{\"code\": 100, \"codeName\": \"UnsatisfiableWriteConcern\", \"errmsg\": \"wc\"}}}");
    runs = write_runs;
    wire_call(s, &a, "{\"insert\": \"c\", \"txnNumber\": 1}", &r, &closed);
    CHECK(ok_is(&r, 1.0));
    CHECK_INT(write_runs, runs + 1);
    CHECK_INT(get_int(&r, "n"), 1);
    CHECK_INT(get_int(&r, "writeConcernError.code"), 100);
    CHECK_STR(get_str(&r, "writeConcernError.errmsg"), "wc");
    CHECK_STR(labels_of(&r, lb, sizeof lb), "-");   /* 100 is not retriable */
    bson_destroy(&r);

    /* blockConnection delays, then errorCode fails (MongoDB's order) */
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
                "{\"failCommands\": [\"find\"], \"blockConnection\": true, \"blockTimeMS\": 150, "
                "\"errorCode\": 2}}");
    t0 = time_mono_ms();
    wire_call(s, &a, "{\"find\": \"c\"}", &r, &closed);
    CHECK(time_mono_ms() - t0 >= 140);
    EXPECT_ERR(r, MS_ERR_BAD_VALUE);
    bson_destroy(&r);

    /* a block is cut short by the command's maxTimeMS, which then answers */
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
                "{\"failCommands\": [\"find\"], \"blockConnection\": true, \"blockTimeMS\": 20000}}");
    t0 = time_mono_ms();
    wire_call(s, &a, "{\"find\": \"c\", \"maxTimeMS\": 100}", &r, &closed);
    CHECK_MSG(time_mono_ms() - t0 < 10000, "a 20 s block outlived maxTimeMS 100 by %lld ms",
              time_mono_ms() - t0);
    EXPECT_ERR(r, MS_ERR_MAX_TIME_MS_EXPIRED);
    bson_destroy(&r);

    /* appName: the first hello's client.application.name, per connection */
    wire_call(s, &a, "{\"hello\": 1, \"client\": {\"application\": {\"name\": \"appA\"}}}", &r,
              &closed);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    wire_call(s, &a, "{\"hello\": 1, \"client\": {\"application\": {\"name\": \"later\"}}}", &r,
              &closed);
    bson_destroy(&r);
    CHECK_STR(a.app_name, "appA");   /* only the first hello names the connection */
    wire_call(s, &b, "{\"isMaster\": 1, \"client\": {\"application\": {\"name\": \"appB\"}}}",
              &r, &closed);
    bson_destroy(&r);
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
                "{\"failCommands\": [\"find\"], \"errorCode\": 2, \"appName\": \"appA\", "
                "\"failInternalCommands\": true}}");
    wire_call(s, &b, "{\"find\": \"c\"}", &r, &closed);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    wire_call(s, NULL, "{\"find\": \"c\"}", &r, &closed);   /* internal: no appName */
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    wire_call(s, &a, "{\"find\": \"c\"}", &r, &closed);
    EXPECT_ERR(r, MS_ERR_BAD_VALUE);
    bson_destroy(&r);
    {
        char big[400];
        op_client_t c3 = {0};
        memset(big, 'x', 129);
        big[129] = '\0';
        char json[600];
        snprintf(json, sizeof json,
                 "{\"hello\": 1, \"client\": {\"application\": {\"name\": \"%s\"}}}", big);
        wire_call(s, &c3, json, &r, &closed);
        EXPECT_ERR(r, MS_ERR_CLIENT_METADATA_APP_NAME_TOO_LARGE);
        bson_destroy(&r);
    }

    /* failInternalCommands: an NNG request is failed only with it */
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
                "{\"failCommands\": [\"find\"], \"errorCode\": 2}}");
    wire_call(s, NULL, "{\"find\": \"c\"}", &r, &closed);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    wire_call(s, &b, "{\"find\": \"c\"}", &r, &closed);
    EXPECT_ERR(r, MS_ERR_BAD_VALUE);
    bson_destroy(&r);

    /* namespace: only commands on that collection */
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
                "{\"failCommands\": [\"find\"], \"errorCode\": 2, \"namespace\": \"db1.c\"}}");
    wire_call(s, &b, "{\"find\": \"c\", \"$db\": \"db2\"}", &r, &closed);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    wire_call(s, &b, "{\"find\": \"c\", \"$db\": \"db1\"}", &r, &closed);
    EXPECT_ERR(r, MS_ERR_BAD_VALUE);
    bson_destroy(&r);

    /* hello is failable, under any of its names; configureFailPoint never is */
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": \"alwaysOn\", \"data\": "
                "{\"failCommands\": [\"isMaster\", \"configureFailPoint\"], \"errorCode\": 91}}");
    wire_call(s, &b, "{\"hello\": 1}", &r, &closed);
    EXPECT_ERR(r, MS_ERR_SHUTDOWN_IN_PROGRESS);
    bson_destroy(&r);
    wire_call(s, &b, "{\"ismaster\": 1}", &r, &closed);
    EXPECT_ERR(r, MS_ERR_SHUTDOWN_IN_PROGRESS);
    bson_destroy(&r);
    wire_call(s, &b, "{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}", &r, &closed);
    CHECK(ok_is(&r, 1.0));
    bson_destroy(&r);
    cmd_server_stop(s);
}

/* {skip: n} and {activationProbability: p}, besides alwaysOn and {times} above. */
static void cmd_fail_command_modes(void) {
    cmd_server_t *s = start_writes("cmd_failmodes");
    op_client_t a = {0};
    bson_t r;
    bool closed;
    int failed = 0;

    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"skip\": 2}, \"data\": "
                "{\"failCommands\": [\"find\"], \"errorCode\": 2}}");
    for (int i = 0; i < 4; i++) {
        wire_call(s, &a, "{\"find\": \"c\"}", &r, &closed);
        CHECK_MSG(ok_is(&r, i < 2 ? 1.0 : 0.0), "skip 2: call %d", i);
        bson_destroy(&r);
    }
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": "
                "{\"activationProbability\": 0}, \"data\": {\"failCommands\": [\"find\"], \"errorCode\": 2}}");
    for (int i = 0; i < 50; i++) {
        wire_call(s, &a, "{\"find\": \"c\"}", &r, &closed);
        failed += !ok_is(&r, 1.0);
        bson_destroy(&r);
    }
    CHECK_INT(failed, 0);
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": "
                "{\"activationProbability\": 0.5}, \"data\": {\"failCommands\": [\"find\"], \"errorCode\": 2}}");
    for (int i = 0; i < 400; i++) {
        wire_call(s, &a, "{\"find\": \"c\"}", &r, &closed);
        failed += !ok_is(&r, 1.0);
        bson_destroy(&r);
    }
    /* 400 draws at 0.5: outside [120, 280] has a chance below 1e-15 */
    CHECK_MSG(failed >= 120 && failed <= 280, "activationProbability 0.5 failed %d of 400", failed);
    wire_call(s, NULL, "{\"configureFailPoint\": \"failCommand\", \"mode\": "
                       "{\"activationProbability\": 1.5}}", &r, &closed);
    EXPECT_ERR(r, MS_ERR_BAD_VALUE);
    bson_destroy(&r);
    wire_call(s, NULL, "{\"configureFailPoint\": \"failCommand\", \"mode\": "
                       "{\"activationProbability\": \"x\"}}", &r, &closed);
    EXPECT_ERR(r, MS_ERR_TYPE_MISMATCH);
    bson_destroy(&r);
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": \"off\"}");
    cmd_server_stop(s);
}

/* RetryableWriteError: retryable writes (txnNumber, no transaction) whose error or
 * writeConcernError code is retriable; never writeErrors; failCommand's errorLabels win. */
static void cmd_error_labels_rules(void) {
    static const struct {
        const char *json;
        const char *labels;
    } cases[] = {
        {"{\"insert\": \"c\", \"txnNumber\": 1, \"errCode\": 91}", "RetryableWriteError"},
        {"{\"insert\": \"c\", \"txnNumber\": 1, \"errCode\": 10107}", "RetryableWriteError"},
        {"{\"insert\": \"c\", \"txnNumber\": 1, \"errCode\": 6}", "RetryableWriteError"},
        {"{\"insert\": \"c\", \"txnNumber\": 1, \"errCode\": 11000}", "-"},
        {"{\"insert\": \"c\", \"txnNumber\": 1, \"errCode\": 50}", "-"},
        {"{\"insert\": \"c\", \"errCode\": 91}", "-"},                  /* no txnNumber */
        {"{\"find\": \"c\", \"txnNumber\": 1, \"errCode\": 91}", "-"},  /* not a write */
        {"{\"insert\": \"c\", \"txnNumber\": 1, \"wcCode\": 91}", "RetryableWriteError"},
        {"{\"insert\": \"c\", \"txnNumber\": 1, \"wcCode\": 64}", "-"},
        {"{\"insert\": \"c\", \"txnNumber\": 1, \"writeErrCode\": 91}", "-"},
        {"{\"insert\": \"c\", \"txnNumber\": 1}", "-"},
        {"{\"commitTransaction\": 1, \"txnNumber\": 1, \"errCode\": 189}", "RetryableWriteError"},
        /* a transaction is refused (IllegalOperation 20): not retriable */
        {"{\"insert\": \"c\", \"txnNumber\": 1, \"autocommit\": false, \"errCode\": 91}", "-"},
    };
    cmd_server_t *s = start_writes("cmd_labels");
    op_client_t a = {0};
    bson_t r;
    bool closed;
    char lb[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int k = 0; k < 2; k++) {   /* both transports: one dispatch */
            wire_call(s, k ? &a : NULL, cases[i].json, &r, &closed);
            CHECK_MSG(strcmp(labels_of(&r, lb, sizeof lb), cases[i].labels) == 0,
                      "%s: labels %s, expected %s", cases[i].json, lb, cases[i].labels);
            bson_destroy(&r);
        }
    }
    /* failCommand's code goes through the same rules; errorLabels: [] turns them off */
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
                "{\"failCommands\": [\"insert\"], \"errorCode\": 91}}");
    wire_call(s, &a, "{\"insert\": \"c\", \"txnNumber\": 2}", &r, &closed);
    CHECK_STR(labels_of(&r, lb, sizeof lb), "RetryableWriteError");
    bson_destroy(&r);
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
                "{\"failCommands\": [\"insert\"], \"errorCode\": 91, \"errorLabels\": []}}");
    wire_call(s, &a, "{\"insert\": \"c\", \"txnNumber\": 3}", &r, &closed);
    EXPECT_ERR(r, MS_ERR_SHUTDOWN_IN_PROGRESS);
    CHECK_STR(labels_of(&r, lb, sizeof lb), "");
    bson_destroy(&r);
    fail_cmd(s, "{\"configureFailPoint\": \"failCommand\", \"mode\": {\"times\": 1}, \"data\": "
                "{\"failCommands\": [\"insert\"], \"writeConcernError\": {\"code\": 91, "
                "\"errmsg\": \"shutting down\"}}}");
    wire_call(s, &a, "{\"insert\": \"c\", \"txnNumber\": 4}", &r, &closed);
    CHECK(ok_is(&r, 1.0));
    CHECK_STR(labels_of(&r, lb, sizeof lb), "RetryableWriteError");
    bson_destroy(&r);
    cmd_server_stop(s);
}

/* codeName as error_codes.yml spells it; Location<code> for a code it does not list. */
static void cmd_code_names(void) {
    static const struct {
        int code;
        const char *name;
    } names[] = {
        {112, "WriteConflict"}, {91, "ShutdownInProgress"}, {189, "PrimarySteppedDown"},
        {10107, "NotWritablePrimary"}, {11600, "InterruptedAtShutdown"},
        {11602, "InterruptedDueToReplStateChange"}, {13435, "NotPrimaryNoSecondaryOk"},
        {13436, "NotPrimaryOrSecondary"}, {6, "HostUnreachable"}, {7, "HostNotFound"},
        {89, "NetworkTimeout"}, {9001, "SocketException"}, {262, "ExceededTimeLimit"},
        {50, "MaxTimeMSExpired"}, {64, "WriteConcernFailed"}, {100, "UnsatisfiableWriteConcern"},
        {20, "IllegalOperation"}, {251, "NoSuchTransaction"}, {225, "TransactionTooOld"},
        {217, "IncompleteTransactionHistory"}, {24, "LockTimeout"}, {8, "UnknownError"},
        {2, "BadValue"}, {11, "UserNotFound"}, {13, "Unauthorized"}, {18, "AuthenticationFailed"},
        {43, "CursorNotFound"}, {136, "CappedPositionLost"}, {175, "QueryPlanKilled"},
        {237, "CursorKilled"}, {244, "TransactionCoordinatorSteppedDown"},
        {234, "RetryChangeStream"}, {280, "ChangeStreamFatalError"},
        {133, "FailedToSatisfyReadPreference"}, {26, "NamespaceNotFound"},
        {48, "NamespaceExists"}, {59, "CommandNotFound"}, {115, "CommandNotSupported"},
        {322, "APIVersionError"}, {323, "APIStrictError"}, {324, "APIDeprecationError"},
        {134, "ReadConcernMajorityNotAvailableYet"}, {50737, "Location50737"},
        {999999, "Location999999"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK_STR(err_code_name(names[i].code), names[i].name);
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

/* One conformance check on a JSON command: its code (0 = accepted). */
static int conform_json(const char *json) {
    bson_t doc;
    bson_iter_t it;
    ms_error_t err = {0};
    int rc;
    if (!t_json(json, &doc)) return -1;
    rc = bson_iter_init(&it, &doc) && bson_iter_next(&it)
             ? cmd_check_conformance(bson_iter_key(&it), &doc, &err) : -1;
    bson_destroy(&doc);
    return rc;
}

/* Each of n commands is refused with code. */
static void all_refused(const char *const *cmds, size_t n, int code) {
    for (size_t i = 0; i < n; i++)
        CHECK_MSG(conform_json(cmds[i]) == code, "not refused with %d: %s", code, cmds[i]);
}

/* MongoDB's initializeAPIParameters: the version, the strict list, and the order. */
static void cmd_api_params(void) {
    CHECK_INT(conform_json("{\"find\": \"c\", \"apiVersion\": \"1\", \"apiStrict\": true}"), 0);
    CHECK_INT(conform_json("{\"ping\": 1, \"apiVersion\": \"1\", \"apiDeprecationErrors\": true}"), 0);
    CHECK_INT(conform_json("{\"ping\": 1, \"apiVersion\": \"2\"}"), MS_ERR_API_VERSION_ERROR);
    CHECK_INT(conform_json("{\"ping\": 1, \"apiVersion\": 1}"), MS_ERR_TYPE_MISMATCH);
    CHECK_INT(conform_json("{\"ping\": 1, \"apiStrict\": false}"), MS_ERR_LOC_4886600);
    CHECK_INT(conform_json("{\"ping\": 1, \"apiDeprecationErrors\": true}"), MS_ERR_LOC_4886600);
    CHECK_INT(conform_json("{\"ping\": 1, \"apiVersion\": \"1\", \"apiStrict\": 1}"),
              MS_ERR_TYPE_MISMATCH);
    CHECK_INT(conform_json("{\"distinct\": \"c\", \"key\": \"a\", \"apiVersion\": \"1\", "
                           "\"apiStrict\": true}"), MS_ERR_API_STRICT_ERROR);
    CHECK_INT(conform_json("{\"distinct\": \"c\", \"key\": \"a\", \"apiVersion\": \"1\", "
                           "\"apiStrict\": false}"), 0);
    CHECK_INT(conform_json("{\"_recvChunkStatus\": \"c\", \"apiStrict\": true}"), 0);
}

/* Every place a command takes a collation, and what counts as the simple one. */
static void cmd_collation_everywhere(void) {
    static const char *const refused[] = {
        "{\"find\": \"c\", \"collation\": {\"locale\": \"en\"}}",
        "{\"count\": \"c\", \"collation\": {\"locale\": \"fr\", \"strength\": 1}}",
        "{\"distinct\": \"c\", \"key\": \"a\", \"collation\": {\"locale\": \"en\"}}",
        "{\"aggregate\": \"c\", \"pipeline\": [], \"collation\": {\"locale\": \"en\"}}",
        "{\"findAndModify\": \"c\", \"collation\": {\"locale\": \"en\"}}",
        "{\"create\": \"c\", \"collation\": {\"locale\": \"en\"}}",
        "{\"delete\": \"c\", \"deletes\": [{\"q\": {}, \"limit\": 0}, "
        "{\"q\": {}, \"limit\": 0, \"collation\": {\"locale\": \"en\"}}]}",
        "{\"update\": \"c\", \"updates\": [{\"q\": {}, \"u\": {}, "
        "\"collation\": {\"locale\": \"en\", \"strength\": 2}}]}",
        "{\"createIndexes\": \"c\", \"indexes\": [{\"key\": {\"a\": 1}, \"name\": \"a\", "
        "\"collation\": {\"locale\": \"en\"}}]}",
        "{\"explain\": {\"find\": \"c\", \"collation\": {\"locale\": \"en\"}}}",
        "{\"shardCollection\": \"d.c\", \"key\": {\"a\": 1}, \"collation\": {\"locale\": \"en\"}}",
        "{\"find\": \"c\", \"collation\": {\"locale\": \"simple\", \"strength\": 1}}",
    };
    all_refused(refused, sizeof refused / sizeof refused[0], MS_ERR_BAD_VALUE);
    CHECK_INT(conform_json("{\"find\": \"c\", \"collation\": {\"locale\": \"simple\"}}"), 0);
    CHECK_INT(conform_json("{\"update\": \"c\", \"updates\": [{\"q\": {}, \"u\": {}, "
                           "\"collation\": {\"locale\": \"simple\"}}]}"), 0);
    CHECK_INT(conform_json("{\"find\": \"c\", \"collation\": {}}"), MS_ERR_IDL_MISSING_FIELD);
    CHECK_INT(conform_json("{\"find\": \"c\", \"collation\": \"en\"}"), MS_ERR_TYPE_MISMATCH);
    CHECK_INT(conform_json("{\"find\": \"c\", \"collation\": {\"locale\": 1}}"), MS_ERR_TYPE_MISMATCH);
    /* A field named collation inside documents is data, not an option. */
    CHECK_INT(conform_json("{\"insert\": \"c\", \"documents\": [{\"collation\": {\"locale\": \"en\"}}]}"), 0);
}

/* create's options: refused unless absent or off. */
static void cmd_create_options(void) {
    static const char *const refused[] = {
        "{\"create\": \"v\", \"viewOn\": \"c\", \"pipeline\": []}",
        "{\"create\": \"c\", \"capped\": true, \"size\": 4096, \"max\": 3}",
        "{\"create\": \"c\", \"timeseries\": {\"timeField\": \"t\"}}",
        "{\"create\": \"c\", \"clusteredIndex\": {\"key\": {\"_id\": 1}, \"unique\": true}}",
        "{\"create\": \"c\", \"expireAfterSeconds\": 10}",
        "{\"create\": \"c\", \"validator\": {\"a\": {\"$exists\": true}}}",
        "{\"create\": \"c\", \"changeStreamPreAndPostImages\": {\"enabled\": true}}",
        "{\"create\": \"c\", \"encryptedFields\": {\"fields\": []}}",
    };
    all_refused(refused, sizeof refused / sizeof refused[0], MS_ERR_INVALID_OPTIONS);
    CHECK_INT(conform_json("{\"create\": \"c\", \"capped\": false, \"validator\": {}, "
                           "\"changeStreamPreAndPostImages\": {\"enabled\": false}, "
                           "\"storageEngine\": {}, \"indexOptionDefaults\": {}, "
                           "\"validationLevel\": \"off\"}"), 0);
}

T_MAIN(T_CASE(cmd_api_params), T_CASE(cmd_collation_everywhere), T_CASE(cmd_create_options),
       T_CASE(cmd_common_commands), T_CASE(cmd_unknown_command), T_CASE(cmd_field_checks),
       T_CASE(cmd_test_only_hidden), T_CASE(cmd_error_fields), T_CASE(cmd_error_logged),
       T_CASE(cmd_size_limits), T_CASE(cmd_garbage), T_CASE(cmd_dispatch_direct), T_CASE(cmd_strict_fields), T_CASE(cmd_strict_doc),
       T_CASE(cmd_fail_command), T_CASE(cmd_fail_command_fields), T_CASE(cmd_fail_command_modes),
       T_CASE(cmd_error_labels_rules), T_CASE(cmd_code_names), T_CASE(cmd_intercept), T_CASE(cmd_half_built_reply),
       T_CASE(cmd_session_args), T_CASE(cmd_repeated_keys))
