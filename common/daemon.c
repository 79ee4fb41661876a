/*
 * daemon.c — the start-up and shutdown shared by every daemon (see daemon.h): common
 * flags, the listen URL, the command server, the ready line, the wait for a stop signal
 * and the clean stop.
 */
#include "common/daemon.h"

#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/rpc.h"

/* Large buffers (a routing-table reply or batch, a bulk write) from mmap, unmapped when
 * freed; free memory at the top of a heap past DAEMON_TRIM_BYTES given back. glibc starts
 * with thresholds like these but raises them as it sees large buffers freed (up to 32 and
 * 64 MB), after which every worker thread's arena keeps its last large buffer resident:
 * a config server that had answered 14 refreshes of a 100,000-chunk table held 17 MB per
 * thread, 1.6 KB per chunk, with 3 MB in use. Setting them keeps them fixed. */
#define DAEMON_MMAP_BYTES (256 * 1024)
#define DAEMON_TRIM_BYTES (1024 * 1024)

static void malloc_setup(void) {
    mallopt(M_MMAP_THRESHOLD, DAEMON_MMAP_BYTES);
    mallopt(M_TRIM_THRESHOLD, DAEMON_TRIM_BYTES);
}

int daemon_parse(daemon_t *d, const char *process, int port_default, int argc, char **argv,
                 const flag_spec_t *own, const char *usage) {
    flag_spec_t specs[DAEMON_OWN_FLAGS_MAX + 9];
    int n = 0;

    cmd_block_signals();  /* before any thread starts: they all inherit the mask */
    malloc_setup();       /* before any thread has an arena */
    memset(d, 0, sizeof *d);
    d->process = process;
    d->port = port_default;
    d->bind_addr = "127.0.0.1";
    d->wire_bind = "127.0.0.1";
    d->wire_idle_ms = MS_WIRE_IDLE_MS_DEFAULT;
    snprintf(d->port_help, sizeof d->port_help, "TCP port to listen on (default %d)", port_default);
    for (; own && own[n].name; n++) {
        ASSERT(n < DAEMON_OWN_FLAGS_MAX);  /* the daemons' own tables, fixed at build time */
        specs[n] = own[n];
    }
    specs[n++] = (flag_spec_t){"port", FLAG_INT, &d->port, d->port_help};
    specs[n++] = (flag_spec_t){"bind", FLAG_STR, &d->bind_addr, "address to listen on (default 127.0.0.1)"};
    specs[n++] = (flag_spec_t){"url", FLAG_STR, &d->url_flag,
                               "listen URL, overrides --port/--bind (tcp:// or ipc://)"};
    specs[n++] = (flag_spec_t){"workers", FLAG_INT, &d->workers, "request worker threads (default 16)"};
    specs[n++] = (flag_spec_t){"enable-test-commands", FLAG_BOOL, &d->test_commands,
                               "serve configureFailPoint and other test-only commands"};
    specs[n++] = (flag_spec_t){"wire-port", FLAG_INT, &d->wire_port,
                               "also serve MongoDB's wire protocol on this TCP port (mongosh, "
                               "drivers; default: off)"};
    specs[n++] = (flag_spec_t){"wire-bind", FLAG_STR, &d->wire_bind,
                               "address of the wire protocol listener (default 127.0.0.1)"};
    specs[n++] = (flag_spec_t){"wire-idle-ms", FLAG_INT, &d->wire_idle_ms,
                               "close a wire connection idle this long (default 600000)"};
    specs[n] = (flag_spec_t){NULL, FLAG_BOOL, NULL, NULL};

    if (flags_parse(argc, argv, specs, usage) != argc) {
        fprintf(stderr, "%s: unexpected argument (try --help)\n", process);
        return 2;
    }
    if (d->port < 1 || d->port > 65535 || d->workers < 0 || d->workers > MS_RPC_WORKERS_MAX) {
        fprintf(stderr, "%s: --port must be 1..65535 and --workers 0..%d\n", process,
                MS_RPC_WORKERS_MAX);
        return 2;
    }
    if (d->wire_port < 0 || d->wire_port > 65535 || d->wire_idle_ms < MS_WIRE_IDLE_MS_MIN ||
        d->wire_idle_ms > MS_WIRE_IDLE_MS_MAX) {
        fprintf(stderr, "%s: --wire-port must be 1..65535 and --wire-idle-ms %d..%d\n", process,
                MS_WIRE_IDLE_MS_MIN, MS_WIRE_IDLE_MS_MAX);
        return 2;
    }
    if (d->wire_port) {
        int w = snprintf(d->wire_url, sizeof d->wire_url, "tcp://%s:%d", d->wire_bind,
                         d->wire_port);
        if (w < 0 || (size_t)w >= sizeof d->wire_url) {
            fprintf(stderr, "%s: --wire-bind is too long\n", process);
            return 2;
        }
    }
    if (d->url_flag) {
        if (strlen(d->url_flag) >= sizeof d->url) {
            fprintf(stderr, "%s: --url is longer than %zu bytes\n", process, sizeof d->url - 1);
            return 2;
        }
        snprintf(d->url, sizeof d->url, "%s", d->url_flag);
    } else {
        int w = snprintf(d->url, sizeof d->url, "tcp://%s:%d", d->bind_addr, d->port);
        if (w < 0 || (size_t)w >= sizeof d->url) {
            fprintf(stderr, "%s: --bind is too long\n", process);
            return 2;
        }
    }
    return 0;
}

int daemon_start(daemon_t *d, const cmd_server_opts_t *opts, ms_error_t *err) {
    cmd_server_opts_t o = *opts;
    o.process = d->process;
    o.url = d->url;
    o.workers = d->workers;
    o.enable_test_commands = d->test_commands;
    o.wire_url = d->wire_url[0] ? d->wire_url : NULL;
    o.wire_idle_ms = d->wire_idle_ms;
    /* Calls to any one peer may hold at most a share of these workers. */
    rpc_client_set_workers(d->workers);
    int rc = cmd_server_start(&o, &d->srv, err);
    if (rc)
        log_error("startup failed step=listen url=%s wire_url=%s code=%d errmsg=%s",
                  log_str(d->url), log_str(d->wire_url[0] ? d->wire_url : "-"),
                  err ? err->code : rc, log_str(err ? err->msg : ""));
    return rc;
}

void daemon_ready(const daemon_t *d, const char *key, const char *value) {
    char wire[MS_URL_BYTES_MAX + 24] = "";
    /* mongodb://, as a user pastes it into mongosh (the tcp:// prefix dropped). */
    if (d->wire_url[0]) snprintf(wire, sizeof wire, " wire=mongodb://%s", d->wire_url + 6);
    if (key)
        log_info("ready url=%s %s=%s test_commands=%d%s", d->url, key, value ? value : "",
                 d->test_commands, wire);
    else
        log_info("ready url=%s test_commands=%d%s", d->url, d->test_commands, wire);
}

int daemon_fail(const char *step, const ms_error_t *err) {
    log_error("startup failed step=%s code=%d errmsg=%s", step, err ? err->code : 0,
              log_str(err ? err->msg : ""));
    return 1;
}

int daemon_wait(daemon_t *d) {
    int sig = cmd_wait_for_signal();
    (void)d;
    log_info("shutting down signal=%s", sig == SIGINT ? "SIGINT" : "SIGTERM");
    return sig;
}

void daemon_stop_serving(daemon_t *d) {
    cmd_server_stop(d->srv);  /* NULL-safe */
    d->srv = NULL;
}

int daemon_exit(daemon_t *d, int rc) {
    daemon_stop_serving(d);
    rpc_peers_close_all();
    if (rc == 0) log_info("stopped");
    return rc;
}
