/*
 * mig_priv.h — what the donor's three parts share inside bin/shardd, and nobody else
 * sees: the six-step driver (mig_donor.c, MigrationSourceManager), the migration
 * coordinator (mig_coord.c, MigrationCoordinator) and the chunk cloner source
 * (mig_cloner.c, MigrationChunkClonerSource). mig.h is the face they show the rest.
 */
#ifndef MS_SHARDD_MIG_PRIV_H
#define MS_SHARDD_MIG_PRIV_H

#include "shardd/mig.h"

/* The donor's phase: the step it is in (moveChunk.from's "step N of 6"), then the
 * coordinator's completion. A hold at moveChunkHangAtStepN, at the end of step N, is
 * still in step N's phase. */
enum donor_phase { DP_CHECKS, DP_START_CLONE, DP_CLONE, DP_CRITSEC, DP_COMMIT_RECIPIENT,
                   DP_COMMIT_CONFIG, DP_COMPLETING, DP_DONE };

/* What a coordinator document says: everything recovery needs to finish a migration. */
typedef struct coord {
    char id[33];
    uint8_t mig_uuid[16];
    uint8_t coll_uuid[16];
    char ns[MS_NS_BYTES_MAX + 1];
    char session[320];
    char donor[128], recipient[128], recipient_host[MS_URL_BYTES_MAX];
    bson_t range_min, range_max;     /* the moved range */
    bson_t chunk_min, chunk_max;     /* the chunk that held it when the migration started */
    bson_t pre_version;              /* preMigrationChunkVersion {e, t, v} */
    char decision[16];               /* "", "committed", "aborted" */
} coord_t;

struct mig_donor {
    mig_t *m;
    int refs;                        /* under m->mu: the thread and every waiting command */
    bool done;
    int rc;
    ms_error_t err;
    /* the request */
    char ns[MS_NS_BYTES_MAX + 1];
    char to[128], to_url[MS_URL_BYTES_MAX];
    bson_t req_min, req_max;         /* as asked (max may be empty) */
    bool has_min, has_max;
    bool asked_max;                  /* max was in the request (has_max may be worked out) */
    int64_t max_chunk_bytes;
    bool wait_for_delete;
    int force_jumbo;
    bson_oid_t epoch;
    uint32_t ts_t, ts_i;
    /* worked out in step 1 */
    keys_pattern_t pat;
    buf_t min_enc, max_enc;
    coord_t co;
    long long started_ms;
    /* the clone list (MongoDB's recordIds) and capture, used by the command workers */
    pthread_mutex_t mu;
    pthread_cond_t cv;               /* broadcast when x_users drops or sess_caught_up is set */
    int64_t *rids;
    size_t nrids, pos;
    /* The write capture. Owner: the donor thread, which alone creates and frees it,
     * through the cloner source (mig_cloner_start / mig_cloner_stop: only mig_cloner.c
     * touches it). Lock rule: x is set and cleared under mu; a command worker
     * (_transferMods, currentOp) reads it under mu and, to use it after dropping mu,
     * counts itself in x_users first (also under mu); the owner clears x and waits for
     * x_users == 0 before xfer_stop frees it. The donor thread itself uses x without mu:
     * nobody else frees it. */
    xfer_t *x;
    int x_users;
    enum donor_phase phase;
    const char *held_at;             /* under mu: the failpoint whose hang holds the donor
                                      * thread now, or NULL (currentOp's heldAt) */
    int64_t cloned_docs, cloned_bytes, mods_sent;
    int64_t step_ms[6];
    long long pause_start_ms;
    int64_t pause_ms;
    int64_t recv_cloned, recv_catchup, recv_steady;
    char recv_state[16];
    bool capture_on, crit_held;
    bool handed_over;                /* outcome unknown: the recovery finishes (and logs) it */
    bool ddl_fenced;                 /* index commands of ns wait (mig_index_ddl_fence) */
    bson_t from_version;             /* this shard's version when the migration started */
    int64_t digest_count;            /* the range at the clone-list snapshot */
    uint64_t digest_sum;
    /* Session migration (mig_session.c, MongoDB's SessionCatalogMigrationSource), under mu.
     * sess_commit_started: set by the donor thread once its critical section holds the
     * collection's writes (after it, an empty _getNextSessionMods batch is the last one);
     * sess_caught_up: a pull found nothing new (the bulk of the history has moved; step 3
     * waits for it). The counters are for currentOp and moveChunk.from. */
    bool sess_commit_started, sess_caught_up;
    int64_t sess_sent, sess_sentinels;
};

typedef struct persist_arg {
    const coord_t *co;
    const bson_t *task;       /* insert this task too, or NULL */
    bool del_coord, task_ready, task_delete;
} persist_arg_t;

typedef struct clone_list_arg {
    mig_donor_t *d;
    int64_t cap;
    int64_t coll_docs, coll_bytes;
} clone_list_arg_t;

/* ---- the driver (mig_donor.c) ---- */
/* The running donation of the command's sessionId, with a reference (NULL + error when
 * none); mig_donor_release drops it (mig_cloner.c). */
mig_donor_t *mig_donor_for(cmd_ctx_t *ctx, ms_error_t *err);
void mig_donor_release(mig_t *m, mig_donor_t *d);
/* Drops one reference, under m->mu (the last frees the donation). */
void mig_donor_unref_locked(mig_donor_t *d);

/* ---- the coordinator (mig_coord.c) ---- */
void mig_coord_init(coord_t *c);
void mig_coord_destroy(coord_t *c);
/* dst gets doc's string field key ("" when absent or not a string). */
void mig_copy_str(char *dst, size_t cap, const bson_t *doc, const char *key);
/* One transaction: the coordinator document (or its deletion) and the task changes. */
int mig_coord_persist(mig_t *m, persist_arg_t *a, ms_error_t *err);
/* Finishes a decided migration (decision persisted, recipient told, task handed on,
 * document forgotten); non-zero: a step could not be done yet (recovery finishes it). */
int mig_coord_complete(mig_t *m, coord_t *c, bool committed, long long until_ms, ms_error_t *err);
/* Fence, then the owner of the range's min from a table fetched after it: *committed. */
int mig_coord_decide(mig_t *m, const coord_t *c, bool *committed, ms_error_t *err);
/* Starts a recovery of c (crit_held: the caller hands over the critical section it
 * entered as c->id; from_details, borrowed: the moveChunk.from to write once decided). */
void mig_coord_start_recovery(mig_t *m, const coord_t *c, bool crit_held, const bson_t *from_details);
/* The URL of shard in config.shards. */
int mig_shard_host(mig_t *m, const char *shard, char *out, size_t cap, ms_error_t *err);

/* ---- the cloner source (mig_cloner.c): the only code that touches d->x ---- */
int mig_cloner_start(mig_donor_t *d, ms_error_t *err);
void mig_cloner_stop(mig_donor_t *d);
int mig_cloner_build_list(mig_donor_t *d, int64_t *cap, int64_t *coll_docs, int64_t *coll_bytes,
                          ms_error_t *err);
int mig_cloner_failed(mig_donor_t *d, ms_error_t *err);
void mig_cloner_pending(mig_donor_t *d, int64_t *ndel, int64_t *nreload, int64_t *bytes);
void mig_cloner_pending_locked(mig_donor_t *d, int64_t *ndel, int64_t *nreload, int64_t *bytes);
void mig_cloner_digest(mig_donor_t *d, int64_t *count, uint64_t *sum);

#endif
