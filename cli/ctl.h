/*
 * ctl.h — shardctl, the command-line client: sends any command document to any
 * daemon and prints the reply as relaxed extended JSON on one line; friendly verbs
 * (status, watch, load) on top. This header shows the whole shape of the tool.
 */
#ifndef MS_CTL_H
#define MS_CTL_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdio.h>

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
/* A balancerExplain reply r of ns as explain-balance prints it (r borrowed). */
void ctl_print_explain(const char *ns, const bson_t *r);
/* status's "balancerCompliant: ..." line of a collection (nothing when the call fails). */
void ctl_print_compliance(ctl_t *c, const char *ns);
/* ctl_bars.c: `watch --bars` (chunks per shard as bars, migrations, balancer rounds;
 * --until-balanced) and `changelog` (entries, or --summary of the migrations). */
int ctl_watch_bars(ctl_t *c, int argc, char **argv);
int ctl_changelog(ctl_t *c, int argc, char **argv);

/* ctl_tour.c: `tour` — one chunk migration step by step, held at the donor's failpoints
 * moveChunkHangAtStep1..6 (needs --enable-test-commands); `tour balancer` — one balancer
 * round (ctl_tour_bal.c). Both turn every failpoint they set off again on any way out. */
int ctl_tour(ctl_t *c, int argc, char **argv);
int ctl_tour_balancer(ctl_t *router, const char *ns, bool automatic, int pause_ms);
/* The tour's shared pieces. Ctrl-C / SIGTERM set a flag (tour_catch_signals) that every
 * wait checks (tour_interrupted); tour_sleep_ms ends early then. */
void tour_catch_signals(void);
bool tour_interrupted(void);
void tour_sleep_ms(int ms);
/* Between two steps: Enter (EOF goes on), or pause_ms when automatic. */
void tour_pause(bool automatic, int pause_ms);
/* A ctl_t on url (borrowed: kept by the caller while *out lives) with the default
 * deadline, for a shard the tour talks to directly. */
int tour_open(const char *url, ctl_t *out, ms_error_t *err);
void tour_close(ctl_t *c);
/* configureFailPoint name alwaysOn (a hang) or off; *count = times entered so far. */
int tour_fp(ctl_t *c, const char *name, bool on, int64_t *count, ms_error_t *err);
/* waitForFailPoint name until entered `times` in all, at most max_ms (MaxTimeMSExpired). */
int tour_fp_wait(ctl_t *c, const char *name, int64_t times, int max_ms, ms_error_t *err);
/* What to do when a process answered configureFailPoint with CommandNotFound. */
void tour_say_no_test_commands(const char *who, const ms_error_t *err);
/* indent, then d as relaxed JSON, then a newline. */
void tour_print_doc(const char *indent, const bson_t *d);
/* balancerStart through the router; says so when it fails. */
void tour_balancer_start(ctl_t *router);

/* ctl_util.c: field readers shared by the views. A missing or mistyped field reads as
 * the default (a view prints what it can of a reply); d is borrowed throughout. */
/* d.name as a string borrowed from d; "" when absent or not a string. */
const char *ctl_str(const bson_t *d, const char *name);
/* d.name read as MongoDB reads a flag (bsonx_truthy); false when absent. */
bool ctl_bool(const bson_t *d, const char *name);
/* The integer at a dotted path ("details.chunksMoved"), doubles truncated; dflt when absent. */
int64_t ctl_int(const bson_t *d, const char *path, int64_t dflt);
/* d.name as a double when it is a number; 0 otherwise. */
double ctl_num(const bson_t *d, const char *name);
/* The BSON date d.name as ms since the epoch; 0 when absent. */
int64_t ctl_date(const bson_t *d, const char *name);
/* *out = a read-only view of the sub-document or array d.name, borrowing d's bytes (no
 * destroy needed); false when absent or neither. */
bool ctl_sub(const bson_t *d, const char *name, bson_t *out);
/* Prints the sub-document or array d.name to fp as relaxed JSON, or `missing`. */
void ctl_print_json(FILE *fp, const bson_t *d, const char *name, const char *missing);
/* reply.cursor.id of a find / getMore reply; 0 (exhausted) when absent. */
int64_t ctl_cursor_id(const bson_t *reply);

/* A growable list of documents; each v[i] is owned by the list. Start from {0}. */
typedef struct ctl_docs {
    bson_t **v;
    int n, cap;
} ctl_docs_t;
/* Destroys every document and empties d (usable again). */
void ctl_docs_free(ctl_docs_t *d);
/* Appends copies of the documents of the array reply.<outer>.<name> (a cursor batch), or
 * reply.<name> when outer is NULL (currentOp's inprog), until d holds max; reply borrowed. */
void ctl_docs_add_array(ctl_docs_t *d, const bson_t *reply, const char *outer, const char *name, int max);
/* find on db.coll with filter and sort (each may be NULL; borrowed) and limit (0 = none):
 * fn gets each document (borrowed for the call) until it returns false or the cursor
 * ends; a cursor left before its end is killed (killCursors). Errors: ctl_command's. */
typedef bool (*ctl_doc_fn)(void *arg, const bson_t *doc);
int ctl_find_each(ctl_t *c, const char *db, const char *coll, const bson_t *filter, const bson_t *sort,
                  int64_t limit, ctl_doc_fn fn, void *arg, ms_error_t *err);
/* Chunks per shard of the chunks matching filter (borrowed; {uuid} names a collection):
 * sh.status()'s aggregate, [{$match}, {$group: {_id: "$shard", n: {$sum: 1}}}, {$sort}],
 * which the config server counts on an index. out gets {_id: shard, n} in shard order. */
int ctl_chunks_per_shard(ctl_t *c, const bson_t *filter, ctl_docs_t *out, ms_error_t *err);
/* count {count: coll, query: filter} on db into *n. */
int ctl_count(ctl_t *c, const char *db, const char *coll, const bson_t *filter, int64_t *n, ms_error_t *err);
/* find on db.coll with filter and sort (each may be NULL; borrowed) and limit (0 = none),
 * draining the cursor with getMore into out (caller frees, also on error) until it holds
 * max documents (or limit, when smaller); a cursor left before its end is killed.
 * Errors: those of ctl_command. */
int ctl_find_all(ctl_t *c, const char *db, const char *coll, const bson_t *filter, const bson_t *sort, int limit,
                 int max, ctl_docs_t *out, ms_error_t *err);
/* Whether currentOp entry ops->v[i] is a migration to print on its own line: a donor, or a
 * recipient whose donor is not in ops. *peer = the other side's entry (borrowed from ops)
 * or NULL, set in every case. */
bool ctl_migration_shown(const ctl_docs_t *ops, int i, const bson_t **peer);
/* A donor phase (currentOp's `phase`: the step it is in, docs/protocol.md) in words:
 * "start clone", "critical section", ...; a phase it does not know comes back as is. */
const char *ctl_phase_words(const char *phase);
/* The words of the donor's step n (1..6, moveChunk.from's "step n of 6"): "checks" ..
 * "commit on config server". */
const char *ctl_step_words(int n);
/* A migration's phase as status and watch print it: the donor's in words, the recipient's
 * state beside it, and where a failpoint holds either side ("phase: clone (recipient:
 * catchup)  held at moveChunkHangAtStep3"). op and peer as ctl_migration_shown gives them. */
void ctl_print_migration_phase(FILE *fp, const bson_t *op, const bson_t *peer);

#endif
