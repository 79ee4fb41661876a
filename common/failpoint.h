/*
 * failpoint.h — named failpoints, MongoDB style, in every daemon.
 *
 * Code marks a step with fp_eval("moveChunkHangAtStep3", &err). A test turns a point
 * on with {configureFailPoint: NAME, mode: "alwaysOn" | "off" | {times: N} | {skip: N},
 * data: {action: "hang" | "error" | "crash", code: N, errmsg: "..."}} (only when the
 * daemon runs with --enable-test-commands), and {waitForFailPoint: NAME,
 * timesEntered: N, maxTimeMS: M} tells it when the point has been reached.
 *
 * Actions when a point fires: "hang" (default) waits there until the point is turned
 * off; "error" makes fp_eval return data.code (default FailPointEnabled) with a
 * message naming the point; "crash" logs one line and kills the process with SIGKILL
 * (no cleanup, exactly what kill -9 leaves behind).
 */
#ifndef MS_FAILPOINT_H
#define MS_FAILPOINT_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdbool.h>

#include "errors.h"

/* Declares a failpoint (name must be a static string). Call at start-up, before
 * serving; declaring the same name twice is harmless. */
void fp_register(const char *name);

/* Evaluates a point: 0 to carry on (after any hang), or the error the point injects. */
int fp_eval(const char *name, ms_error_t *err);

/* Like fp_eval; when the point fires and data_out is non-NULL, *data_out is initialised
 * with a copy of the point's data (caller destroys) and *fired set true. */
int fp_eval_data(const char *name, bson_t *data_out, bool *fired, ms_error_t *err);

/* Where a thread says which point holds it, for its own status readers (a migration's
 * currentOp `heldAt`): *slot, guarded by mu (the caller's own lock, which its readers
 * take), names the point while a hang holds the thread and is NULL otherwise. */
typedef struct fp_held {
    pthread_mutex_t *mu;
    const char **slot;
} fp_held_t;

/* Like fp_eval; while a hang holds the thread, held->slot names the point. It is set
 * before the point counts as entered, so a waitForFailPoint that returns sees it set;
 * it is cleared once the hang is released. fp's own lock is never held while mu is
 * taken: the caller's lock order is untouched. */
int fp_eval_held(const char *name, const fp_held_t *held, ms_error_t *err);

/* A point whose place is inside a lock other requests need (a catalog transaction, the
 * shard's writer lock), split in two so that a hang never holds that lock:
 * fp_eval_early, called before the caller takes its lock, decides whether the point fires
 * (counting it, waking waitForFailPoint) and runs a `hang` right there; fp_late, called
 * where the point stands inside the lock, applies what remains: `error` (returns the code,
 * so the transaction rolls back) or `crash` (exactly the state kill -9 leaves there).
 * data.holdLocks: true makes fp_late hang instead, holding the caller's locks: a test
 * instrument for proving what waits behind a held lock, never a default. */
typedef struct fp_early {
    const char *name;
    bool fired;            /* something is left for fp_late */
    bool hold;
    int action;
    int code;
    uint64_t gen;
    char errmsg[MS_ERRMSG_BYTES];
} fp_early_t;
void fp_eval_early(const char *name, fp_early_t *e);
int fp_late(const fp_early_t *e, ms_error_t *err);

/* Cheap check for hot paths: true when the point is on (any mode but off). */
bool fp_active(const char *name);

/* The command handlers' work: configure (reply gets `count`: times entered so far) and
 * wait until timesEntered >= N (bounded by maxTimeMS, default 30 s → MaxTimeMSExpired). */
int fp_configure(const bson_t *cmd, bson_t *reply, ms_error_t *err);
int fp_wait(const bson_t *cmd, bson_t *reply, ms_error_t *err);

/* Appends {name: {mode, timesEntered}} of every registered point (serverStatus). */
void fp_append_status(bson_t *reply);

/* Evaluates a point without acting on it, for points whose caller decides what firing
 * means (dispatch's failCommand). pred, when non-NULL, sees the point's data (borrowed)
 * and decides whether this evaluation counts at all, as MongoDB's failCommand counts
 * only the commands it names. Returns true when the point fires; then *data_out (when
 * non-NULL) is initialised with a copy of the data (caller destroys). */
bool fp_check(const char *name, bool (*pred)(const bson_t *data, void *arg), void *arg,
              bson_t *data_out);

/* Sleeps ms milliseconds, or less when fp_release_all runs meanwhile (a daemon stopping
 * does not wait out failCommand's blockConnection). */
void fp_sleep_ms(int64_t ms);

/* Turns every point off, releases every hang and ends every fp_sleep_ms (a daemon
 * shutting down). */
void fp_release_all(void);

#endif
