/*
 * fuzz_wire.c — libFuzzer target (`make fuzz`, clang -fsanitize=fuzzer,address,undefined):
 * arbitrary bytes go through what a wire connection does with a message, against a real
 * shard's command table and store:
 *   1. the connection layer's header check (length, known opcode: wire_header_read /
 *      wire_opcode_known, as rpc_server.c's wire framing does before reading the body);
 *   2. wire_request_decode (OP_MSG sections and flags, CRC-32C, OP_QUERY, OP_COMPRESSED);
 *   3. cmd_dispatch of the decoded command on shardd's table (common + shardd_cmd.c)
 *      with the shard's state on a temporary SQLite store, as a shardd worker runs it;
 *   4. wire_reply_encode of the reply (or the decoder's error document).
 * What is left out, and why: commands whose name starts with '_' (the migration's and the
 * config server's peer calls: they connect to URLs taken from the input, enter critical
 * sections that would block every later write, and are not reachable by a client with
 * anything but the same dispatch code this target already runs) and cleanupOrphaned
 * (waits on the range deleter). Test-only commands stay refused, as in a daemon started
 * without --enable-test-commands. The store lives under $TMPDIR and is removed at exit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cmd.h"
#include "common/log.h"
#include "common/opctx.h"
#include "common/wire.h"
#include "shardd/mig.h"
#include "shardd/shardd.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static shardd_t fz_app;
static cmd_server_t *fz_srv;
static char fz_dir[256];

static void fz_cleanup(void) {
    char cmd[300];
    cmd_server_stop(fz_srv);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz_wire: could not remove %s\n", fz_dir);
}

static void fz_die(const char *what, const ms_error_t *err) {
    fprintf(stderr, "fuzz_wire: %s failed: %d %s\n", what, err->code, err->msg);
    exit(1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *tmp = getenv("TMPDIR");
    store_opts_t so = {0};
    rdel_opts_t ro = {.batch_docs = 128, .batch_delay_ms = 0, .cleanup_delay_ms = 0};
    ms_error_t err = {0};
    char url[320];
    (void)argc;
    (void)argv;

    log_init("fuzz_wire", LOG_ERROR);  /* refused commands log warnings: keep output quiet */
    snprintf(fz_dir, sizeof fz_dir, "%s/fuzz-wire-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(fz_dir)) {
        perror("fuzz_wire: mkdtemp");
        exit(1);
    }
    shardd_register_failpoints();
    memset(&fz_app, 0, sizeof fz_app);
    fz_app.name = "fuzz";
    if (store_open(fz_dir, &so, &fz_app.st, &err) != 0) fz_die("store_open", &err);
    if (shv_open(&fz_app.shv, &err) != 0 || shardd_load_identity(&fz_app, &err) != 0 ||
        shv_dbcrit_load(fz_app.shv, fz_app.st, &err) != 0)
        fz_die("sharding state", &err);
    if (mig_open(&fz_app, &fz_app.mig, &err) != 0) fz_die("mig_open", &err);
    snprintf(fz_app.mig->dbpath, sizeof fz_app.mig->dbpath, "%s", fz_dir);
    if (plan_cursors_new(600000, &fz_app.cursors) != 0) {
        fprintf(stderr, "fuzz_wire: plan_cursors_new failed\n");
        exit(1);
    }
    if (rdel_open(fz_app.st, fz_app.shv, &ro, &fz_app.rdel, &err) != 0) fz_die("rdel_open", &err);
    rdel_set_cursors(fz_app.rdel, fz_app.cursors);
    /* The command server needs a listener; an ipc:// one in the temp dir reaches nobody. */
    snprintf(url, sizeof url, "ipc://%s/sock", fz_dir);
    fz_app.url = url;
    {
        cmd_server_opts_t opts = {
            .process = "shardd",
            .url = url,
            .workers = 1,
            .table = shardd_cmd_table,
            .table_len = shardd_cmd_table_len,
            .app = &fz_app,
            .status = shardd_status,
            .metrics = shardd_metrics,
        };
        if (cmd_server_start(&opts, &fz_srv, &err) != 0) fz_die("cmd_server_start", &err);
    }
    fz_app.url = cmd_server_url(fz_srv);  /* url above is on this stack frame */
    atexit(fz_cleanup);
    return 0;
}

/* Every FZ_RESET_EVERY inputs the databases the inputs created are dropped: a store that
 * only grows makes every later input slower (the first runs fell from 9,000 to 3,500
 * executions a second in 5 minutes) without reaching new code. */
#define FZ_RESET_EVERY 20000

static void fz_reset(void) {
    bson_t cmd, reply;
    bson_iter_t it, dbs, db;
    char names[64][128];
    int n = 0;
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "listDatabases", 1);
    BSON_APPEND_BOOL(&cmd, "nameOnly", true);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    bson_init(&reply);
    cmd_dispatch(fz_srv, bson_get_data(&cmd), cmd.len, &reply);
    if (bson_iter_init_find(&it, &reply, "databases") && bson_iter_recurse(&it, &dbs))
        while (n < 64 && bson_iter_next(&dbs))
            if (bson_iter_recurse(&dbs, &db) && bson_iter_find(&db, "name") &&
                BSON_ITER_HOLDS_UTF8(&db))
                snprintf(names[n++], sizeof names[0], "%s", bson_iter_utf8(&db, NULL));
    bson_destroy(&reply);
    bson_destroy(&cmd);
    for (int i = 0; i < n; i++) {
        bson_init(&cmd);
        BSON_APPEND_INT32(&cmd, "dropDatabase", 1);
        BSON_APPEND_UTF8(&cmd, "$db", names[i]);
        bson_init(&reply);
        cmd_dispatch(fz_srv, bson_get_data(&cmd), cmd.len, &reply);
        bson_destroy(&reply);
        bson_destroy(&cmd);
    }
}

/* The command's name (first key) may run here: see the file comment. */
static bool fz_dispatchable(const bson_t *cmd) {
    bson_iter_t it;
    const char *name;
    if (!bson_iter_init(&it, cmd) || !bson_iter_next(&it)) return true;  /* dispatch refuses */
    name = bson_iter_key(&it);
    return name[0] != '_' && strcmp(name, "cleanupOrphaned") != 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    wire_header_t h;
    wire_request_t req;
    ms_error_t err = {0};
    bson_t reply;
    uint8_t *out;
    size_t out_len = 0;
    wire_rc_t rc;
    static unsigned long runs;

    if (++runs % FZ_RESET_EVERY == 0) fz_reset();
    /* The connection layer: a header it would refuse never reaches the decoder. */
    if (size < WIRE_HEADER_BYTES) return 0;
    wire_header_read(data, &h);
    if (h.length < WIRE_HEADER_BYTES || !wire_opcode_known(h.opcode)) return 0;
    /* The framing reads exactly messageLength bytes: hand the decoder that, as it would
     * (inputs shorter than their header's length are refused as the decoder would
     * refuse them, which it checks itself). */
    if ((size_t)h.length < size) size = (size_t)h.length;

    rc = wire_request_decode(data, size, &req, &err);
    if (rc == WIRE_CLOSE) {
        wire_request_free(&req);
        return 0;
    }
    bson_init(&reply);
    if (rc == WIRE_OK) {
        if (fz_dispatchable(&req.cmd)) {
            op_set_conn(1);
            cmd_dispatch(fz_srv, bson_get_data(&req.cmd), req.cmd.len, &reply);
            op_set_conn(0);
        }
    } else {
        wire_error_doc(&req, &err, &reply);
    }
    out = wire_reply_encode(&req, 1, &reply, &out_len);
    if (out) {
        wire_header_t back;
        wire_header_read(out, &back);
        if ((size_t)back.length != out_len || back.response_to != req.request_id) abort();
        bson_free(out);
    }
    bson_destroy(&reply);
    wire_request_free(&req);
    return 0;
}
