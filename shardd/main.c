/*
 * main.c — bin/shardd, the shard daemon: parses flags, opens the SQLite store under
 * --dbpath, restores the shard identity (from a previous _addShard), starts the command
 * server with the shard's table (shardd_cmd.c) and a cursor reaper, prints one
 * `ready url=...` line, and serves until SIGINT or SIGTERM, then stops cleanly.
 * Same start-up order as configsvr/main.c: block signals, open state, serve, say ready,
 * wait, stop serving (in-flight commands finish), close state.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/cmd.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/rpc.h"
#include "shardd/shardd.h"

#define SHARDD_PORT_DEFAULT 27018  /* MongoDB's shard server port */

static const char shardd_usage[] =
    "usage: shardd --dbpath DIR [--port N] [--name NAME] [--bind ADDR] [--url URL]\n"
    "              [--workers N] [--cursor-timeout-ms N] [--sync full|normal]\n"
    "              [--enable-test-commands]\n"
    "A minishard shard daemon: documents in one SQLite file, MongoDB's CRUD commands.";

/* The idle-cursor reaper (MongoDB's clientcursormon): wakes every second. */
typedef struct reaper {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    cursors_t *cs;
} reaper_t;

static void *reaper_main(void *arg) {
    reaper_t *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->stop) break;
        pthread_mutex_unlock(&r->mu);
        cursors_reap(r->cs);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int main(int argc, char **argv) {
    int port = SHARDD_PORT_DEFAULT, workers = 0, cursor_timeout_ms = MS_CURSOR_IDLE_MS_MAX, sig;
    const char *bind_addr = "127.0.0.1", *url_flag = NULL, *dbpath = NULL, *name = NULL;
    const char *sync = "normal";
    bool test_commands = false;
    const flag_spec_t flags[] = {
        {"dbpath", FLAG_STR, &dbpath, "directory of the data file (required)"},
        {"port", FLAG_INT, &port, "TCP port to listen on (default 27018)"},
        {"name", FLAG_STR, &name, "process name in logs (default shardd)"},
        {"bind", FLAG_STR, &bind_addr, "address to listen on (default 127.0.0.1)"},
        {"url", FLAG_STR, &url_flag, "listen URL, overrides --port/--bind (tcp:// or ipc://)"},
        {"workers", FLAG_INT, &workers, "request worker threads (default 16)"},
        {"cursor-timeout-ms", FLAG_INT, &cursor_timeout_ms,
         "idle cursors are killed after this long (default 600000)"},
        {"sync", FLAG_STR, &sync,
         "normal (survives a process crash) or full (also survives power loss)"},
        {"enable-test-commands", FLAG_BOOL, &test_commands,
         "serve configureFailPoint and other test-only commands"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    char url[MS_URL_BYTES_MAX], logname[96];
    shardd_t app;
    store_opts_t so = {0};
    cmd_server_t *srv = NULL;
    reaper_t reaper;
    ms_error_t err = {0};
    int rc = 1;

    cmd_block_signals();  /* before any thread starts: they all inherit the mask */
    if (flags_parse(argc, argv, flags, shardd_usage) != argc) {
        fprintf(stderr, "shardd: unexpected argument (try --help)\n");
        return 2;
    }
    if (!dbpath) {
        fprintf(stderr, "shardd: --dbpath is required (try --help)\n");
        return 2;
    }
    if (port < 1 || port > 65535 || workers < 0 || workers > MS_RPC_WORKERS_MAX ||
        cursor_timeout_ms < 1) {
        fprintf(stderr, "shardd: --port must be 1..65535, --workers 0..%d, --cursor-timeout-ms > 0\n",
                MS_RPC_WORKERS_MAX);
        return 2;
    }
    if (strcmp(sync, "normal") != 0 && strcmp(sync, "full") != 0) {
        fprintf(stderr, "shardd: --sync must be normal or full\n");
        return 2;
    }
    so.sync_full = strcmp(sync, "full") == 0;
    if (url_flag) snprintf(url, sizeof url, "%s", url_flag);
    else snprintf(url, sizeof url, "tcp://%s:%d", bind_addr, port);
    if (name) snprintf(logname, sizeof logname, "shardd.%s", name);
    else snprintf(logname, sizeof logname, "shardd");
    log_init(logname, LOG_INFO);

    /* Before anything can evaluate them, and before cmd.c's own (failCommand), so the
     * per-document point is the first one a lookup meets. */
    shardd_register_failpoints();
    memset(&app, 0, sizeof app);
    app.name = name ? name : "";
    if (store_open(dbpath, &so, &app.st, &err) != 0) {
        log_error("startup failed step=store dbpath=%s code=%d errmsg=\"%s\"", dbpath, err.code, err.msg);
        return 1;
    }
    if (shv_open(&app.shv, &err) != 0 || shardd_load_identity(&app, &err) != 0) {
        log_error("startup failed step=sharding code=%d errmsg=\"%s\"", err.code, err.msg);
        goto out_store;
    }
    if (cursors_new(cursor_timeout_ms, &app.cursors) != 0) {
        log_error("startup failed step=cursors");
        goto out_store;
    }
    memset(&reaper, 0, sizeof reaper);
    pthread_mutex_init(&reaper.mu, NULL);
    pthread_cond_init(&reaper.cv, NULL);
    reaper.cs = app.cursors;
    if (pthread_create(&reaper.th, NULL, reaper_main, &reaper) != 0) {
        log_error("startup failed step=reaper");
        goto out_store;
    }
    {
        cmd_server_opts_t opts = {
            .process = "shardd",
            .url = url,
            .workers = workers,
            .enable_test_commands = test_commands,
            .table = shardd_cmd_table,
            .table_len = shardd_cmd_table_len,
            .app = &app,
            .status = shardd_status,
        };
        if (cmd_server_start(&opts, &srv, &err) != 0) {
            log_error("startup failed step=listen url=%s code=%d errmsg=\"%s\"", url, err.code,
                      err.msg);
            goto out_reaper;
        }
    }
    log_info("ready url=%s dbpath=%s test_commands=%d", url, dbpath, test_commands);

    sig = cmd_wait_for_signal();
    log_info("shutting down signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    cmd_server_stop(srv);
    rc = 0;
out_reaper:
    pthread_mutex_lock(&reaper.mu);
    reaper.stop = true;
    pthread_cond_signal(&reaper.cv);
    pthread_mutex_unlock(&reaper.mu);
    pthread_join(reaper.th, NULL);
out_store:
    rpc_peers_close_all();
    cursors_free(app.cursors);
    shv_close(app.shv);
    store_close(app.st);
    if (rc == 0) log_info("stopped");
    return rc;
}
