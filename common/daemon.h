/*
 * daemon.h — the start-up and shutdown every daemon (bin/configsvr, bin/shardd,
 * bin/router) shares, so each main.c holds only what is its own: its flags, its state,
 * its command table.
 *
 * The order is the same in every daemon, and these calls keep it:
 *   daemon_parse     block SIGINT/SIGTERM before any thread exists (every thread started
 *                    later inherits the mask, so only daemon_wait sees them), parse the
 *                    daemon's own flags plus the common ones (--port, --bind, --url,
 *                    --workers, --enable-test-commands, --wire-port, --wire-bind,
 *                    --wire-idle-ms), check them, build the URLs;
 *   (main)           log_init, open its state;
 *   daemon_start     start the command server on that URL with the daemon's table;
 *   daemon_ready     the one `ready url=...` line tests and scripts wait for;
 *   daemon_wait      until SIGINT or SIGTERM;
 *   daemon_stop_serving  stop the command server (in-flight commands finish) — before
 *                    the state its handlers use is closed;
 *   (main)           close its state;
 *   daemon_exit      close the RPC peers, log `stopped` on a clean stop, give the
 *                    process exit code.
 */
#ifndef MS_DAEMON_H
#define MS_DAEMON_H

#include <stdbool.h>

#include "cmd.h"
#include "errors.h"
#include "flags.h"
#include "limits.h"

/* A daemon's own flags, at most (the common ones are added to them). */
#define DAEMON_OWN_FLAGS_MAX 16

typedef struct daemon {
    const char *process;          /* "configsvr", "shardd", "router" */
    int port;                     /* --port (default: the daemon's) */
    int workers;                  /* --workers (0 = MS_RPC_WORKERS_DEFAULT) */
    const char *bind_addr;        /* --bind (default 127.0.0.1); points into argv */
    const char *url_flag;         /* --url, or NULL; points into argv */
    int wire_port;                /* --wire-port (0 = no wire listener) */
    const char *wire_bind;        /* --wire-bind (default 127.0.0.1); points into argv */
    int wire_idle_ms;             /* --wire-idle-ms (default MS_WIRE_IDLE_MS_DEFAULT) */
    char wire_url[MS_URL_BYTES_MAX];  /* tcp://wire_bind:wire_port, or "" */
    bool test_commands;           /* --enable-test-commands */
    char url[MS_URL_BYTES_MAX];   /* where it listens: --url, else tcp://bind:port */
    char port_help[64];
    cmd_server_t *srv;            /* set by daemon_start */
} daemon_t;

/* Call first in main. Blocks the stop signals, then parses argv with own (the daemon's
 * flags, NULL-name terminated, may be NULL; at most DAEMON_OWN_FLAGS_MAX) followed by the
 * common flags, and checks --port and --workers. --help prints usage and exits 0; a bad
 * flag prints why and exits 2 (flags.h). Returns 0, or 2 (the exit code) after printing
 * the reason for an unexpected argument or an out-of-range value. */
int daemon_parse(daemon_t *d, const char *process, int port_default, int argc, char **argv,
                 const flag_spec_t *own, const char *usage);

/* Starts the command server: opts carries the daemon's table, app, status and intercept;
 * process, url, workers and enable_test_commands are taken from d. Logs `startup failed
 * step=listen` on failure. */
int daemon_start(daemon_t *d, const cmd_server_opts_t *opts, ms_error_t *err);

/* Logs `ready url=<url> <key>=<value> test_commands=<0|1>` (key NULL: no pair), then
 * ` wire=mongodb://<bind>:<port>` when the wire protocol is served. */
void daemon_ready(const daemon_t *d, const char *key, const char *value);

/* Logs `startup failed step=<step> code errmsg` and returns 1 (the exit code). */
int daemon_fail(const char *step, const ms_error_t *err);

/* Blocks until SIGINT or SIGTERM, logs `shutting down signal=...`, returns the signal. */
int daemon_wait(daemon_t *d);

/* Stops the command server; in-flight commands finish first. Idempotent. */
void daemon_stop_serving(daemon_t *d);

/* Stops serving (when not yet), closes the RPC peers, logs `stopped` when rc == 0;
 * returns rc for main to return. */
int daemon_exit(daemon_t *d, int rc);

#endif
