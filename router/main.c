/*
 * main.c — bin/router, the router (MongoDB's mongos in miniature): parses flags,
 * opens the router state (routing caches, pointed at --configdb), starts the command
 * server with the router's table (router_cmd.c), starts the config.mongos pinger,
 * prints one `ready url=...` line, and serves until SIGINT or SIGTERM.
 *
 * Same order as every daemon: block the stop signals before any thread exists, open
 * state, start serving, say ready, wait, stop serving (in-flight commands finish),
 * close state.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/cmd.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/rpc.h"
#include "router/router.h"

#define RT_PORT_DEFAULT 27017  /* MongoDB's mongos port */

static const char rt_usage[] =
    "usage: router --configdb URL [--port N] [--bind ADDR] [--url URL] [--workers N]\n"
    "              [--enable-test-commands]\n"
    "The router of a minishard cluster: clients connect here; it routes by shard key.";

int main(int argc, char **argv) {
    int port = RT_PORT_DEFAULT, workers = 0, sig, rc = 1;
    const char *bind_addr = "127.0.0.1", *url_flag = NULL, *configdb = NULL;
    bool test_commands = false;
    const flag_spec_t flags[] = {
        {"configdb", FLAG_STR, &configdb, "URL of the config server (required)"},
        {"port", FLAG_INT, &port, "TCP port to listen on (default 27017)"},
        {"bind", FLAG_STR, &bind_addr, "address to listen on (default 127.0.0.1)"},
        {"url", FLAG_STR, &url_flag, "listen URL, overrides --port/--bind (tcp:// or ipc://)"},
        {"workers", FLAG_INT, &workers, "request worker threads (default 16)"},
        {"enable-test-commands", FLAG_BOOL, &test_commands,
         "serve configureFailPoint and other test-only commands"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    char url[MS_URL_BYTES_MAX];
    router_t *r = NULL;
    cmd_server_t *srv = NULL;
    ms_error_t err = {0};

    cmd_block_signals();  /* before any thread starts: they all inherit the mask */
    if (flags_parse(argc, argv, flags, rt_usage) != argc) {
        fprintf(stderr, "router: unexpected argument (try --help)\n");
        return 2;
    }
    if (!configdb) {
        fprintf(stderr, "router: --configdb is required (try --help)\n");
        return 2;
    }
    if (port < 1 || port > 65535 || workers < 0 || workers > MS_RPC_WORKERS_MAX) {
        fprintf(stderr, "router: --port must be 1..65535 and --workers 0..%d\n",
                MS_RPC_WORKERS_MAX);
        return 2;
    }
    if (url_flag) snprintf(url, sizeof url, "%s", url_flag);
    else snprintf(url, sizeof url, "tcp://%s:%d", bind_addr, port);
    log_init("router", LOG_INFO);

    if (rt_open(configdb, url, &r, &err) != 0) {
        log_error("startup failed step=open code=%d errmsg=\"%s\"", err.code, err.msg);
        goto out;
    }
    {
        cmd_server_opts_t opts = {
            .process = "router",
            .url = url,
            .workers = workers,
            .enable_test_commands = test_commands,
            .table = router_table,
            .table_len = router_table_len,
            .app = r,
            .status = rt_status,
            .intercept = rt_refuse_internal,
        };
        if (cmd_server_start(&opts, &srv, &err) != 0) {
            log_error("startup failed step=listen url=%s code=%d errmsg=\"%s\"", url, err.code,
                      err.msg);
            goto out;
        }
    }
    if (rt_pinger_start(r, &err) != 0) {
        log_error("startup failed step=pinger code=%d errmsg=\"%s\"", err.code, err.msg);
        goto out;
    }
    log_info("ready url=%s configdb=%s test_commands=%d", url, configdb, test_commands);

    sig = cmd_wait_for_signal();
    log_info("shutting down signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;
out:
    cmd_server_stop(srv);  /* first: no handler may still use r */
    rt_close(r);
    rpc_peers_close_all();
    if (rc == 0) log_info("stopped");
    return rc;
}
