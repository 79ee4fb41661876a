/*
 * ctl.h — shardctl, the command-line client: sends any command document to any
 * daemon and prints the reply as relaxed extended JSON on one line; friendly verbs
 * (status, watch, load) on top. This header shows the whole shape of the tool.
 */
#ifndef MS_CTL_H
#define MS_CTL_H

#include <bson/bson.h>
#include <stdbool.h>

#include "common/errors.h"
#include "common/rpc.h"

#define CTL_HOST_DEFAULT "tcp://127.0.0.1:27017"   /* the local router's default URL */

typedef struct ctl {
    const char *host;
    int timeout_ms;
    bool timeout_given;   /* --timeout on the command line: used for every command */
    rpc_client_t *client;
} ctl_t;

/* The deadline of cmd: --timeout when given; for moveChunk / moveRange (which wait for a
 * whole migration) the command's maxTimeMS, else the migration deadline, plus two hops of
 * margin so the daemons' own timeouts are the ones reported; else the default. */
int ctl_timeout_for(const ctl_t *c, const bson_t *cmd);
/* Sends a command built from JSON text; *reply initialised on success (caller destroys).
 * Errors: bad JSON (FailedToParse), transport errors. */
int ctl_send_json(ctl_t *c, const char *json, bson_t *reply, ms_error_t *err);
/* Sends cmd and requires ok: 1; an {ok: 0} reply becomes the error (code, errmsg).
 * *reply is initialised (caller destroys) only when 0 is returned. */
int ctl_command(ctl_t *c, const bson_t *cmd, bson_t *reply, ms_error_t *err);

/* Verbs; each returns the process exit code. */
int ctl_status(ctl_t *c, int argc, char **argv);   /* like sh.status() */
int ctl_watch(ctl_t *c, int argc, char **argv);    /* status, redrawn every second */
int ctl_load(ctl_t *c, int argc, char **argv);     /* generate N documents */
int ctl_explain_balance(ctl_t *c, int argc, char **argv); /* balancerExplain, readable */
/* status's "balancerCompliant: ..." line of a collection (nothing when the call fails). */
void ctl_print_compliance(ctl_t *c, const char *ns);
/* ctl_bars.c: `watch --bars` (chunks per shard as bars, migrations, balancer rounds;
 * --until-balanced) and `changelog` (entries, or --summary of the migrations). */
int ctl_watch_bars(ctl_t *c, int argc, char **argv);
int ctl_changelog(ctl_t *c, int argc, char **argv);

#endif
