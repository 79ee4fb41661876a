/*
 * main.c — bin/router, the router (MongoDB's mongos in miniature): parses flags,
 * opens the router state (routing caches, pointed at --configdb), starts the command
 * server with the router's table (router_cmd.c), starts the config.mongos pinger,
 * prints one `ready url=...` line, and serves until SIGINT or SIGTERM. The start-up
 * order every daemon shares (signals blocked first, state opened, serve, ready, wait,
 * stop serving, close state) is common/daemon.h's.
 */
#include <stdio.h>

#include "common/daemon.h"
#include "common/lclock.h"
#include "common/log.h"
#include "common/lsess.h"
#include "router/router.h"

#define RT_PORT_DEFAULT 27017  /* MongoDB's mongos port */

static const char rt_usage[] =
    "usage: router --configdb URL [--port N] [--bind ADDR] [--url URL] [--workers N]\n"
    "              [--peer-timeout-ms MS] [--session-timeout-ms MS] [--enable-test-commands]\n"
    "The router of a minishard cluster: clients connect here; it routes by shard key.";

int main(int argc, char **argv) {
    const char *configdb = NULL;
    int peer_timeout_ms = RT_CALL_TIMEOUT_MS, session_timeout_ms = MS_SESSION_TIMEOUT_MS;
    const flag_spec_t own[] = {
        {"configdb", FLAG_STR, &configdb, "URL of the config server (required)"},
        {"peer-timeout-ms", FLAG_INT, &peer_timeout_ms,
         "deadline of a call to a shard or the config server when the request has no "
         "maxTimeMS (default 20000; keep it below the clients' own timeout)"},
        {"session-timeout-ms", FLAG_INT, &session_timeout_ms,
         "sessions of the session cache expire after this long unused (MongoDB's "
         "localLogicalSessionTimeoutMinutes; default 1800000 = 30 min)"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    daemon_t d;
    router_t *r = NULL;
    ms_error_t err = {0};
    int rc = daemon_parse(&d, "router", RT_PORT_DEFAULT, argc, argv, own, rt_usage);
    if (rc) return rc;
    if (!configdb) {
        fprintf(stderr, "router: --configdb is required (try --help)\n");
        return 2;
    }
    if (peer_timeout_ms <= 0 || session_timeout_ms <= 0) {
        fprintf(stderr, "router: --peer-timeout-ms and --session-timeout-ms must be positive\n");
        return 2;
    }
    lsess_set_timeout_ms(session_timeout_ms);
    log_init("router", LOG_INFO);
    lclock_init(LCLOCK_ROUTER);

    rc = 1;
    if (rt_open(configdb, d.url, &r, &err) != 0) {
        daemon_fail("open", &err);
        goto out;
    }
    r->peer_timeout_ms = peer_timeout_ms;
    const cmd_server_opts_t opts = {
        .table = router_table,
        .table_len = router_table_len,
        .app = r,
        .status = rt_status,
        .metrics = rt_metrics,
        .intercept = rt_refuse_internal,
    };
    if (daemon_start(&d, &opts, &err) != 0) goto out;
    if (rt_pinger_start(r, &err) != 0) {
        daemon_fail("pinger", &err);
        goto out;
    }
    daemon_ready(&d, "configdb", configdb);

    daemon_wait(&d);
    rc = 0;
out:
    daemon_stop_serving(&d);  /* first: no handler may still use r */
    rt_close(r);
    return daemon_exit(&d, rc);
}
