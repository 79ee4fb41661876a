/*
 * test_common_validate.c — MongoDB's name and number rules (common/validate.c) as tables
 * of input and expected code, dispatch applying them for every command of a table
 * (common/cmd.c, over cmd_dispatch without a transport), and the one-line log format
 * (common/log.c): a name holding a newline or a quote cannot forge a line or a field.
 */
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "common/cmd.h"
#include "common/log.h"
#include "common/validate.h"
#include "tests/unit/t.h"

#define NS73 MS_ERR_INVALID_NAMESPACE

static void validate_db_names(void) {
    static const struct {
        const char *name;
        size_t len;   /* 0: strlen */
        int code;
    } cases[] = {
        {"app", 0, 0},
        {"a-b_c9", 0, 0},
        {"admin", 0, 0},
        {"", 0, NS73},
        {"a.b", 0, NS73},
        {"a b", 0, NS73},
        {"a$b", 0, NS73},
        {"a/b", 0, NS73},
        {"a\\b", 0, NS73},
        {"a\"b", 0, NS73},
        {"a*b", 0, NS73},
        {"a<b", 0, NS73},
        {"a>b", 0, NS73},
        {"a:b", 0, NS73},
        {"a|b", 0, NS73},
        {"a?b", 0, NS73},
        {"a\nb", 0, NS73},
        {"a\tb", 0, NS73},
        {"a\x7f", 0, NS73},
        {"admin\0x", 7, NS73},    /* embedded NUL: not "admin" */
        {"\xc3\xa9t\xc3\xa9", 0, 0},   /* UTF-8 is fine */
        {"123456789012345678901234567890123456789012345678901234567890123", 0, 0},  /* 63 */
        {"1234567890123456789012345678901234567890123456789012345678901234", 0, NS73}, /* 64 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ms_error_t err = {0};
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].name);
        int rc = val_db_name(cases[i].name, len, &err);
        CHECK_MSG(rc == cases[i].code, "db row %zu: got %d (%s), want %d", i, rc, err.msg,
                  cases[i].code);
    }
}

static void validate_coll_names(void) {
    static char long_coll[300];
    memset(long_coll, 'c', sizeof long_coll - 1);
    static const struct {
        const char *db, *coll;
        size_t len;   /* 0: strlen */
        bool write;
        int code;
    } cases[] = {
        {"app", "users", 0, true, 0},
        {"app", "a.b.c", 0, true, 0},
        {"app", "with space", 0, true, 0},
        {"app", "", 0, false, NS73},
        {"app", ".a", 0, false, NS73},
        {"app", "a$b", 0, false, NS73},
        {"app", "$cmd", 0, false, NS73},
        {"app", "a\0b", 3, false, NS73},
        {"app", "system.x", 0, false, 0},     /* reads of system collections are fine */
        {"app", "system.x", 0, true, NS73},   /* writes are not */
        {"app", "system.js", 0, true, 0},     /* MongoDB's legal client system collections */
        {"app", "system.views", 0, true, 0},
        {"admin", "system.version", 0, true, 0},
        {"app", "system.version", 0, true, NS73},
        {"config", "system.sessions", 0, true, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ms_error_t err = {0};
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].coll);
        int rc = val_coll_name(cases[i].db, cases[i].coll, len, cases[i].write, &err);
        CHECK_MSG(rc == cases[i].code, "coll row %zu: got %d (%s), want %d", i, rc, err.msg,
                  cases[i].code);
    }
    /* The namespace "app." + coll is at most 255 bytes. */
    ms_error_t err = {0};
    CHECK_INT(val_coll_name("app", long_coll, 251, true, &err), 0);
    CHECK_INT(val_coll_name("app", long_coll, 252, true, &err), NS73);
    CHECK(strstr(err.msg, "too long") != NULL);
    CHECK_INT(val_coll_name("app", long_coll, 260, false, &err), NS73);
    /* An errmsg shows a NUL as \x00 rather than cutting the name there. */
    CHECK_INT(val_coll_name("app", "a\0b", 3, false, &err), NS73);
    CHECK(strstr(err.msg, "a\\x00b") != NULL);
}

static void validate_full_ns(void) {
    ms_error_t err = {0};
    CHECK_INT(val_full_ns("app.c", 5, true, &err), 0);
    CHECK_INT(val_full_ns("app.c.d", 7, true, &err), 0);
    CHECK_INT(val_full_ns("app", 3, false, &err), NS73);
    CHECK_INT(val_full_ns(".c", 2, false, &err), NS73);
    CHECK_INT(val_full_ns("app.", 4, false, &err), NS73);
    CHECK_INT(val_full_ns("a b.c", 5, false, &err), NS73);
    CHECK_INT(val_full_ns("app.system.x", 12, true, &err), NS73);
    CHECK_INT(val_full_ns("app.system.x", 12, false, &err), 0);
}

static void validate_numbers(void) {
    static const struct {
        const char *json;   /* {v: ...} */
        int check;
        int code;
        long long want;
    } cases[] = {
        {"{\"v\": 5}", VAL_I64_NONNEG, 0, 5},
        {"{\"v\": {\"$numberLong\": \"9223372036854775807\"}}", VAL_I64_NONNEG, 0, INT64_MAX},
        {"{\"v\": 3.0}", VAL_I64_NONNEG, 0, 3},
        {"{\"v\": 0}", VAL_I64_NONNEG, 0, 0},
        {"{\"v\": -1}", VAL_I64_NONNEG, MS_ERR_IDL_VALUE_TOO_LOW, 0},
        {"{\"v\": -1}", VAL_I64, 0, -1},
        {"{\"v\": -1}", VAL_GETMORE_BATCH, MS_ERR_BAD_VALUE, 0},
        {"{\"v\": 1.5}", VAL_I64, MS_ERR_FAILED_TO_PARSE, 0},
        {"{\"v\": {\"$numberDouble\": \"NaN\"}}", VAL_I64_NONNEG, MS_ERR_FAILED_TO_PARSE, 0},
        {"{\"v\": {\"$numberDouble\": \"Infinity\"}}", VAL_I64_NONNEG, MS_ERR_FAILED_TO_PARSE, 0},
        {"{\"v\": {\"$numberDouble\": \"-Infinity\"}}", VAL_I64_NONNEG, MS_ERR_FAILED_TO_PARSE, 0},
        {"{\"v\": 1e30}", VAL_I64, MS_ERR_FAILED_TO_PARSE, 0},
        {"{\"v\": 9223372036854775808.0}", VAL_I64, MS_ERR_FAILED_TO_PARSE, 0},
        {"{\"v\": -9223372036854775808.0}", VAL_I64, 0, INT64_MIN},
        {"{\"v\": {\"$numberDecimal\": \"7\"}}", VAL_I64_NONNEG, 0, 7},
        {"{\"v\": {\"$numberDecimal\": \"NaN\"}}", VAL_I64_NONNEG, MS_ERR_FAILED_TO_PARSE, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bson_t doc;
        bson_iter_t it;
        ms_error_t err = {0};
        int64_t v = 0;
        if (!t_json(cases[i].json, &doc)) continue;
        CHECK(bson_iter_init_find(&it, &doc, "v"));
        int rc = val_num_field(&it, "skip", cases[i].check, &err);
        CHECK_MSG(rc == cases[i].code, "%s (check %d): got %d (%s), want %d", cases[i].json,
                  cases[i].check, rc, err.msg, cases[i].code);
        if (rc == 0 && cases[i].check != VAL_GETMORE_BATCH) {
            CHECK_INT(val_int64(&it, "skip", &v, &err), 0);
            CHECK_INT(v, cases[i].want);
        }
        bson_destroy(&doc);
    }
    /* MongoDB's IDL validator text. */
    bson_t d = BSON_INITIALIZER;
    bson_iter_t it;
    ms_error_t err = {0};
    int64_t v;
    BSON_APPEND_INT32(&d, "batchSize", -1);
    CHECK(bson_iter_init_find(&it, &d, "batchSize"));
    CHECK_INT(val_int64_min(&it, "batchSize", 0, &v, &err), 51024);
    CHECK_STR(err.msg, "BSON field 'batchSize' value must be >= 0, actual value '-1'");
    CHECK_STR(err_code_name(51024), "Location51024");
    bson_destroy(&d);
}

/* ---- dispatch applies the rules for every row ---------------------------------------- */

static int h_ok(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    (void)err;
    BSON_APPEND_UTF8(reply, "db", ctx->db);
    return 0;
}

static const cmd_spec_t table[] = {
    {.name = "find", .handler = h_ok, .flags = CMD_NS_ARG, .arg_types = CT_STR,
     .fields = {{"skip", CT_NUM, false, VAL_I64_NONNEG}, {"limit", CT_NUM, false, VAL_I64_NONNEG},
                {"batchSize", CT_NUM, false, VAL_I64_NONNEG}}},
    {.name = "insert", .handler = h_ok, .flags = CMD_WRITE | CMD_NS_ARG, .arg_types = CT_STR},
    {.name = "getMore", .handler = h_ok, .flags = CMD_NS_FIELD, .arg_types = CT_NUM,
     .fields = {{"collection", CT_STR, true}, {"batchSize", CT_NUM, false, VAL_GETMORE_BATCH}}},
    {.name = "enableSharding", .handler = h_ok, .flags = CMD_WRITE | CMD_DB_ARG,
     .arg_types = CT_STR},
    {.name = "shardCollection", .handler = h_ok, .flags = CMD_WRITE | CMD_FULL_NS_ARG,
     .arg_types = CT_STR},
};

static int dispatch_code(cmd_server_t *s, const bson_t *cmd) {
    bson_t r = BSON_INITIALIZER;
    bson_iter_t it;
    int code = 0;
    cmd_dispatch(s, bson_get_data(cmd), cmd->len, &r);
    if (bson_iter_init_find(&it, &r, "code")) code = (int)bson_iter_as_int64(&it);
    bson_destroy(&r);
    return code;
}

static int dispatch_json(cmd_server_t *s, const char *json) {
    bson_t cmd;
    int code;
    if (!t_json(json, &cmd)) return -1;
    code = dispatch_code(s, &cmd);
    bson_destroy(&cmd);
    return code;
}

static void validate_dispatch(void) {
    cmd_server_opts_t o = {.process = "t", .url = t_url("validate_dispatch"), .workers = 1,
                           .table = table, .table_len = (int)(sizeof table / sizeof table[0])};
    cmd_server_t *s = NULL;
    ms_error_t err = {0};
    CHECK_INT(cmd_server_start(&o, &s, &err), 0);
    if (!s) return;
    static const struct {
        const char *json;
        int code;
    } cases[] = {
        {"{\"find\": \"c\", \"$db\": \"app\", \"skip\": 1, \"limit\": 2, \"batchSize\": 0}", 0},
        {"{\"find\": \"c\", \"$db\": \"app\", \"batchSize\": -1}", 51024},
        {"{\"find\": \"c\", \"$db\": \"app\", \"limit\": {\"$numberDouble\": \"NaN\"}}", 9},
        {"{\"find\": \"c\", \"$db\": \"app\", \"limit\": 1e30}", 9},
        {"{\"find\": \"c\", \"$db\": \"app\", \"skip\": {\"$numberDouble\": \"-Infinity\"}}", 9},
        {"{\"find\": \"c\", \"$db\": \"\"}", 73},
        {"{\"find\": \"c\", \"$db\": \"a b\"}", 73},
        {"{\"find\": \".a\", \"$db\": \"app\"}", 73},
        {"{\"find\": \"system.x\", \"$db\": \"app\"}", 0},
        {"{\"insert\": \"system.x\", \"$db\": \"app\"}", 73},
        {"{\"insert\": \"a$b\", \"$db\": \"app\"}", 73},
        {"{\"getMore\": 1, \"collection\": \"\", \"$db\": \"app\"}", 73},
        {"{\"getMore\": 1, \"collection\": \"c\", \"$db\": \"app\", \"batchSize\": -2}", 2},
        {"{\"enableSharding\": \"a\\nb\"}", 73},
        {"{\"enableSharding\": \"good\"}", 0},
        {"{\"shardCollection\": \"app\"}", 73},
        {"{\"shardCollection\": \"app.system.y\"}", 73},
        {"{\"shardCollection\": \"app.c\"}", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int code = dispatch_json(s, cases[i].json);
        CHECK_MSG(code == cases[i].code, "%s: got %d, want %d", cases[i].json, code,
                  cases[i].code);
    }
    /* $db with an embedded NUL: refused, never read as "admin". */
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&cmd, "insert", "c");
    bson_append_utf8(&cmd, "$db", -1, "admin\0x", 7);
    CHECK_INT(dispatch_code(s, &cmd), 73);
    bson_destroy(&cmd);
    /* A collection name with an embedded NUL. */
    bson_init(&cmd);
    bson_append_utf8(&cmd, "insert", -1, "c\0d", 3);
    BSON_APPEND_UTF8(&cmd, "$db", "app");
    CHECK_INT(dispatch_code(s, &cmd), 73);
    bson_destroy(&cmd);
    /* A 260-byte namespace. */
    char coll[260];
    memset(coll, 'x', sizeof coll - 1);
    coll[sizeof coll - 1] = '\0';
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_UTF8(&cmd, "$db", "app");
    CHECK_INT(dispatch_code(s, &cmd), 73);
    bson_destroy(&cmd);
    cmd_server_stop(s);
}

/* ---- logs cannot be forged ------------------------------------------------------------- */

/* Runs one log call with stderr sent to a temporary file; returns what it wrote
 * (static buffer). */
static const char *captured(const char *db, const char *msg) {
    static char out[8192];
    char path[512];
    int saved, fd;
    ssize_t n;
    snprintf(path, sizeof path, "%s/log.txt", t_tmpdir());
    fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0) return "";
    saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    log_warn("command failed cmd=insert db=%s errmsg=%s", log_str(db), log_str(msg));
    dup2(saved, STDERR_FILENO);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    n = read(fd, out, sizeof out - 1);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    return out;
}

static int count_char(const char *s, char c) {
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

static void log_one_line(void) {
    log_init("t", LOG_INFO);
    /* A newline in a database name: one line, the fake "ready" line stays inside it. */
    const char *line = captured("a\nI ready url=fake", "Invalid database name: 'a\nI ready'");
    CHECK_INT(count_char(line, '\n'), 1);
    CHECK(line[strlen(line) - 1] == '\n');
    CHECK(strstr(line, "db=\"a\\nI ready url=fake\"") != NULL);
    CHECK(strstr(line, "\nI ready") == NULL);
    /* A quote cannot close the value early and add a field of its own. */
    line = captured("x\" admin=1 \"", "bad \"quoted\" text\r\n2026-01-01T00:00:00.000Z t E fake");
    CHECK_INT(count_char(line, '\n'), 1);
    CHECK(strstr(line, "db=\"x\\\" admin=1 \\\"\"") != NULL);
    CHECK(strstr(line, "\\r\\n2026") != NULL);
    /* Other control characters as \xNN; plain values stay unquoted. */
    line = captured("plain", "bell\x07");
    CHECK(strstr(line, "db=plain ") != NULL);
    CHECK(strstr(line, "errmsg=\"bell\\x07\"") != NULL);
    /* Even text put in the format without log_str is kept on one line. */
    char path[512];
    snprintf(path, sizeof path, "%s/log2.txt", t_tmpdir());
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600), saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    log_info("raw db=%s", "a\nI ready url=fake");
    dup2(saved, STDERR_FILENO);
    close(saved);
    char buf[1024] = {0};
    lseek(fd, 0, SEEK_SET);
    CHECK(read(fd, buf, sizeof buf - 1) > 0);
    close(fd);
    CHECK_INT(count_char(buf, '\n'), 1);
    CHECK(strstr(buf, "db=a\\nI ready") != NULL);
    /* NULL and "" are quoted empties; a long value is cut, not overflowed. */
    CHECK_STR(log_str(NULL), "\"\"");
    CHECK_STR(log_str(""), "\"\"");
    char *big = malloc(5000);
    memset(big, 'q', 4999);
    big[4999] = '\0';
    CHECK(strlen(log_str(big)) < MS_LOG_VALUE_BYTES_MAX);
    free(big);
}

T_MAIN(T_CASE(validate_db_names), T_CASE(validate_coll_names), T_CASE(validate_full_ns),
       T_CASE(validate_numbers), T_CASE(validate_dispatch), T_CASE(log_one_line))
