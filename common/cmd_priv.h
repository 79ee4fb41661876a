/*
 * cmd_priv.h — the command server's inside, shared by cmd.c (dispatch) and
 * cmd_common.c (the common commands, which report on the server itself). Not for
 * daemons: they see only cmd.h.
 */
#ifndef MS_CMD_PRIV_H
#define MS_CMD_PRIV_H

#include <stdatomic.h>

#include "common/cmd.h"

/* Per-command counters, serverStatus's metrics.commands.<name>. */
typedef struct cmd_counter {
    atomic_uint_fast64_t total;
    atomic_uint_fast64_t failed;
} cmd_counter_t;

struct cmd_server {
    char process[32];
    char url[MS_URL_BYTES_MAX];
    bool test_commands;
    const cmd_spec_t *table;
    int table_len;
    void *app;
    cmd_status_fn status;
    cmd_status_fn metrics;
    bool (*intercept)(const uint8_t *data, size_t len, bson_t *reply);
    rpc_server_t *rpc;
    rpc_server_t *wire;            /* MongoDB wire protocol listener, or NULL */
    char wire_url[MS_URL_BYTES_MAX];
    long long start_mono_ms;
    cmd_counter_t *own_counts;     /* one per row of table */
    cmd_counter_t *common_counts;  /* one per row of cmd_common_table */
    atomic_uint_fast64_t rejected; /* requests refused before any command was found */
    atomic_int active;             /* handlers running now */
    /* hello's topologyVersion.processId: new at every start, as mongod's, so a driver
     * that sees it change knows the process restarted. */
    bson_oid_t process_oid;
    /* hello's topologyVersion.counter: bumped when the process enters quiesce mode at
     * shutdown (cmd_server_stop), the only topology change a standalone or a mongos has. */
    atomic_int_fast64_t topology_counter;
    atomic_bool quiescing;         /* hello answers ShutdownInProgress from then on */
};

/* minishard's own version (buildInfo.minishardVersion, serverStatus). */
#define MS_VERSION "0.1.0"

/* IllegalOperation (20) for a transaction, with the text mongod or mongos would give
 * (the router's names minishard's reason). Returns the code. */
int cmd_refuse_transaction(const cmd_server_t *s, ms_error_t *err);

/* failCommand and the error labels (common/fail_command.c; its header comment has the
 * rules). What one command's evaluation of the failpoint decided: */
typedef struct cmd_fail {
    bool fired;
    bson_t data;   /* the point's data when fired (cmd_fail_done frees it) */
} cmd_fail_t;
/* Before the handler: 0 to run the command (after any block), or the error it fails
 * with (closeConnection also asks the connection layer to drop the reply and close). */
int cmd_fail_command_before(const cmd_ctx_t *ctx, cmd_fail_t *fc, ms_error_t *err);
/* After a handler that succeeded: adds data.writeConcernError to its reply. */
void cmd_fail_command_after(const cmd_fail_t *fc, bson_t *reply);
void cmd_fail_done(cmd_fail_t *fc);
/* hello/isMaster on a wire connection: keeps the first hello's client.application.name
 * (op_client); ClientMetadataAppNameTooLarge (184) past 128 bytes. */
int cmd_note_client(const cmd_ctx_t *ctx, ms_error_t *err);
/* Appends errorLabels to a finished reply by MongoDB's rules: fc's data.errorLabels when
 * it fired with them, else ["RetryableWriteError"] for a retryable write whose error
 * (or writeConcernError) code is retriable. req/name NULL: no command was recognised. */
void cmd_error_labels(const bson_t *req, const char *name, const cmd_fail_t *fc, bson_t *reply);
/* hostInfo (hostinfo.c): {system, os, extra} of this host, as MongoDB's. */
int cmd_host_info(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* The counters of spec (a row of the daemon's table or of the common table). */
cmd_counter_t *cmd_counter_of(cmd_server_t *s, const cmd_spec_t *spec);

#endif
