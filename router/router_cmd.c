/*
 * router_cmd.c — the router's command table (bin/router): one row per command, each
 * with its flags and field types (checked by common/cmd.c before the handler runs). A
 * new command is one row here plus its handler in an rt_*.c file. Rows named like a
 * common command (hello, isMaster) replace it for this daemon.
 */
#include <string.h>
#include <unistd.h>

#include "router/router.h"

/* hello as mongos answers it: the common reply plus msg: "isdbgrid", the field by which
 * drivers recognise a router (notes §8.4). */
static int rt_hello(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    for (int i = 0; i < cmd_common_table_len; i++) {
        if (strcmp(cmd_common_table[i].name, ctx->name) == 0) {
            int rc = cmd_common_table[i].handler(ctx, reply, err);
            if (rc == 0) BSON_APPEND_UTF8(reply, "msg", "isdbgrid");
            return rc;
        }
    }
    return err_set(err, MS_ERR_INTERNAL, "no common row for %s", ctx->name);
}

/* The legacy isdbgrid command: {isdbgrid: 1, hostname}. */
static int rt_isdbgrid(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    char host[256];
    (void)ctx, (void)err;
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    BSON_APPEND_INT32(reply, "isdbgrid", 1);
    BSON_APPEND_UTF8(reply, "hostname", host);
    return 0;
}

#define RT_HELLO_FIELDS {{"helloOk", CT_FLAG, false}, {"client", CT_DOC, false}}

const cmd_spec_t router_table[] = {
    {.name = "hello", .handler = rt_hello, .flags = CMD_NO_LOG, .fields = RT_HELLO_FIELDS,
     .help = "handshake; msg: \"isdbgrid\" marks a router"},
    {.name = "isMaster", .handler = rt_hello, .flags = CMD_NO_LOG, .fields = RT_HELLO_FIELDS,
     .help = "legacy name of hello"},
    {.name = "ismaster", .handler = rt_hello, .flags = CMD_NO_LOG, .fields = RT_HELLO_FIELDS,
     .help = "legacy name of hello"},
    {.name = "isdbgrid", .handler = rt_isdbgrid, .flags = CMD_NO_LOG,
     .help = "legacy router check: {isdbgrid: 1, hostname}"},
};
const int router_table_len = (int)(sizeof router_table / sizeof router_table[0]);
