/*
 * configsvr_cmd.c — the config server's command table: one row per command, each with
 * its flags and field types (checked by common/cmd.c before the handler runs). A new
 * command is one row here plus its handler in a cmd_*.c file. Rows named like a common
 * command (hello, isMaster) replace it for this daemon.
 */
#include <string.h>

#include "configsvr/configsvr.h"

/* hello as a config server answers it: the common reply plus `configsvr: 2`, the field
 * by which mongos and drivers recognise a config server (mongod --configsvr). */
static int cfg_hello(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err) {
    for (int i = 0; i < cmd_common_table_len; i++) {
        if (strcmp(cmd_common_table[i].name, ctx->name) == 0) {
            int rc = cmd_common_table[i].handler(ctx, reply, err);
            if (rc == 0) BSON_APPEND_INT32(reply, "configsvr", 2);
            return rc;
        }
    }
    return err_set(err, MS_ERR_INTERNAL, "no common row for %s", ctx->name);
}

#define CFG_HELLO_FIELDS {{"helloOk", CT_FLAG, false}, {"client", CT_DOC, false}}

const cmd_spec_t cfg_cmd_table[] = {
    {.name = "hello", .handler = cfg_hello, .flags = CMD_NO_LOG, .fields = CFG_HELLO_FIELDS,
     .help = "handshake; configsvr: 2 marks a config server"},
    {.name = "isMaster", .handler = cfg_hello, .flags = CMD_NO_LOG, .fields = CFG_HELLO_FIELDS,
     .help = "legacy name of hello"},
    {.name = "ismaster", .handler = cfg_hello, .flags = CMD_NO_LOG, .fields = CFG_HELLO_FIELDS,
     .help = "legacy name of hello"},
};
const int cfg_cmd_table_len = (int)(sizeof cfg_cmd_table / sizeof cfg_cmd_table[0]);
