/*
 * main.c — bin/configsvr, the config server: parses flags, prepares --dbpath, opens the
 * catalog (<dbpath>/config.db, catalog.c), starts the command server with the config
 * server's table (configsvr_cmd.c), prints one `ready url=...` line, and serves until
 * SIGINT or SIGTERM, then stops cleanly.
 *
 * The order matters and every daemon follows it: block the stop signals before any
 * thread exists (so only cmd_wait_for_signal sees them), open state, start serving,
 * say ready, wait, stop serving (in-flight commands finish), close state.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cmd.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/rpc.h"
#include "configsvr/configsvr.h"

#define CFG_PORT_DEFAULT 27019  /* MongoDB's config server port */

static const char cfg_usage[] =
    "usage: configsvr --dbpath DIR [--port N] [--bind ADDR] [--url URL] [--workers N]\n"
    "                 [--enable-test-commands]\n"
    "The config server of a minishard cluster: the sharding catalog and the balancer.";

/* Creates dir when missing (one level, as the parent is the caller's); it must be a
 * directory we can write. */
static int cfg_prepare_dbpath(const char *dir, ms_error_t *err) {
    struct stat st;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return err_set(err, MS_ERR_NON_EXISTENT_PATH, "cannot create dbpath %s: %s", dir,
                       strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(err, MS_ERR_NON_EXISTENT_PATH, "dbpath %s is not a directory", dir);
    return 0;
}

int main(int argc, char **argv) {
    int port = CFG_PORT_DEFAULT, workers = 0, sig;
    const char *bind_addr = "127.0.0.1", *url_flag = NULL, *dbpath = NULL;
    bool test_commands = false;
    const flag_spec_t flags[] = {
        {"dbpath", FLAG_STR, &dbpath, "directory of the catalog (required)"},
        {"port", FLAG_INT, &port, "TCP port to listen on (default 27019)"},
        {"bind", FLAG_STR, &bind_addr, "address to listen on (default 127.0.0.1)"},
        {"url", FLAG_STR, &url_flag, "listen URL, overrides --port/--bind (tcp:// or ipc://)"},
        {"workers", FLAG_INT, &workers, "request worker threads (default 16)"},
        {"enable-test-commands", FLAG_BOOL, &test_commands,
         "serve configureFailPoint and other test-only commands"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    char url[MS_URL_BYTES_MAX];
    cfg_t cfg;
    cmd_server_t *srv = NULL;
    ms_error_t err = {0};

    cmd_block_signals();  /* before any thread starts: they all inherit the mask */
    if (flags_parse(argc, argv, flags, cfg_usage) != argc) {
        fprintf(stderr, "configsvr: unexpected argument (try --help)\n");
        return 2;
    }
    if (!dbpath) {
        fprintf(stderr, "configsvr: --dbpath is required (try --help)\n");
        return 2;
    }
    if (port < 1 || port > 65535 || workers < 0 || workers > MS_RPC_WORKERS_MAX) {
        fprintf(stderr, "configsvr: --port must be 1..65535 and --workers 0..%d\n",
                MS_RPC_WORKERS_MAX);
        return 2;
    }
    if (url_flag) snprintf(url, sizeof url, "%s", url_flag);
    else snprintf(url, sizeof url, "tcp://%s:%d", bind_addr, port);
    log_init("configsvr", LOG_INFO);
    cfg_register_failpoints();  /* before anything can evaluate one */

    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.url, sizeof cfg.url, "%s", url);
    pthread_mutex_init(&cfg.ddl_mu, NULL);
    cfg.started_ms = time_now_ms();
    if (cfg_prepare_dbpath(dbpath, &err) != 0) {
        log_error("startup failed step=dbpath code=%d errmsg=\"%s\"", err.code, err.msg);
        return 1;
    }
    {
        char path[4096];
        snprintf(path, sizeof path, "%s/config.db", dbpath);
        if (cat_open(path, &cfg.cat, &err) != 0) {
            log_error("startup failed step=catalog code=%d errmsg=\"%s\"", err.code, err.msg);
            return 1;
        }
        cat_set_server(cfg.cat, url);
    }
    if (cfg_cursors_open(&cfg.cursors, &err) != 0) {
        log_error("startup failed step=cursors code=%d errmsg=\"%s\"", err.code, err.msg);
        cat_close(cfg.cat);
        return 1;
    }

    {
        cmd_server_opts_t opts = {
            .process = "configsvr",
            .url = url,
            .workers = workers,
            .enable_test_commands = test_commands,
            .table = cfg_cmd_table,
            .table_len = cfg_cmd_table_len,
            .app = &cfg,
            .status = cfg_status,
        };
        if (cmd_server_start(&opts, &srv, &err) != 0) {
            log_error("startup failed step=listen url=%s code=%d errmsg=\"%s\"", url, err.code,
                      err.msg);
            cfg_cursors_close(cfg.cursors);
            cat_close(cfg.cat);
            return 1;
        }
    }
    log_info("ready url=%s dbpath=%s test_commands=%d", url, dbpath, test_commands);

    sig = cmd_wait_for_signal();
    log_info("shutting down signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    cmd_server_stop(srv);
    rpc_peers_close_all();
    cfg_cursors_close(cfg.cursors);
    cat_close(cfg.cat);
    pthread_mutex_destroy(&cfg.ddl_mu);
    log_info("stopped");
    return 0;
}
