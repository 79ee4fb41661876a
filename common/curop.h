/*
 * curop.h — the operations in progress of one process (MongoDB's CurOp registry), used
 * by every daemon: command dispatch (common/cmd.c) registers each command for as long as
 * its handler runs, and the $currentOp aggregation stage lists them (shardd and the
 * router's localOps: true; through a router, every shard's list tagged with its name).
 *
 * An entry lives in dispatch's stack frame and borrows the request: both outlive the
 * entry, which is unlinked before dispatch returns. The registry is one slot per thread
 * (made on the thread's first command, freed when it ends), each with its own list and
 * mutex, so that commands on different threads never contend; its length is bounded by
 * the process's threads, so a listing is bounded too. Nothing is allocated per command.
 */
#ifndef MS_CUROP_H
#define MS_CUROP_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "errors.h"

typedef struct curop {
    struct curop *prev, *next;   /* guarded by the slot's mutex (curop.c) */
    struct curop_slot *slot;     /* the registering thread's slot; NULL: not listed */
    int32_t opid;                /* MongoDB's opid: unique in this process, never reused soon */
    long long start_mono_us;
    long long start_ms;          /* wall clock, for currentOpTime */
    const bson_t *cmd;           /* borrowed: the request, alive until curop_end */
    const char *name, *db;       /* borrowed likewise */
    unsigned flags;              /* the command row's flags (enum cmd_flags): ns kind */
    uint32_t conn;               /* connection id (op_conn) */
    char client[64];             /* peer address (op_peer), copied */
} curop_t;

/* Registers op (caller's storage) as running now: cmd, name and db are borrowed until
 * curop_end(op), which the caller must call before any of them goes away. */
void curop_begin(curop_t *op, const bson_t *cmd, const char *name, const char *db, unsigned flags);
void curop_end(curop_t *op);

/* The options of a $currentOp stage (MongoDB 7.0's DocumentSourceCurrentOp). */
typedef struct curop_spec {
    bool all_users, idle_connections, idle_sessions, local_ops, truncate_ops, idle_cursors,
        backtrace;
    bson_t raw;   /* the stage's own document (a view into the request) */
} curop_spec_t;

/* Parses {$currentOp: {...}} the way MongoDB does: the value must be a document and each
 * option a boolean (FailedToParse, MongoDB's texts); an unknown option is FailedToParse
 * "Unrecognized option 'x' in $currentOp stage.". */
int curop_parse_spec(const bson_iter_t *spec_it, curop_spec_t *out, ms_error_t *err);
/* The same for the first stage of pipeline (the caller saw it is $currentOp). */
int curop_parse_pipeline(const bson_t *pipeline, curop_spec_t *out, ms_error_t *err);

/* InvalidNamespace unless db is admin and the aggregate's value is a number: MongoDB's
 * "$currentOp must be run against the 'admin' database with {aggregate: 1}". */
int curop_check_ns(const char *db, const bson_iter_t *agg_arg, ms_error_t *err);

/* Runs pipeline (whose first stage is $currentOp, already parsed into spec) in this
 * process: one document per registered operation (host: this process's address; with
 * shard non-NULL, as a shard answers a router: shard first, opid "shard:N", client as
 * client_s), then the rest of the pipeline over them. On 0 *docs / *n are the results
 * (caller owns: each bson_destroy'd, the array bson_free'd, as agg_run_take hands them). */
int curop_stage_run(const bson_t *pipeline, const curop_spec_t *spec, const char *host,
                    const char *shard, bson_t ***docs, size_t *n, ms_error_t *err);

#endif
