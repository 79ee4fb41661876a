/*
 * mig.h — chunk migration on the shard daemon (DESIGN §7; notes §1): what the donor
 * (mig_donor.c, MongoDB's MigrationSourceManager; mig_coord.c, its MigrationCoordinator;
 * mig_cloner.c, its MigrationChunkClonerSource; shared by them in mig_priv.h), the recipient
 * (mig_recipient.c, MongoDB's MigrationDestinationManager) and their shared registry
 * (mig.c, MongoDB's ActiveMigrationsRegistry) show each other and the command table.
 *
 * A shard takes part in one migration at a time, as donor or recipient. The donor's
 * steps and the recipient's states run on threads of their own, each with its own RPC
 * clients, never on a command worker that user writes might be waiting for: the
 * commands only start them, answer their questions, or wait for their end.
 */
#ifndef MS_SHARDD_MIG_H
#define MS_SHARDD_MIG_H

#include <bson/bson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/cmd.h"
#include "common/errors.h"
#include "common/keys.h"
#include "shardd/shardd.h"

typedef struct mig_donor mig_donor_t;
typedef struct mig_recv mig_recv_t;

/* The shard's migration registry: at most one donation or one receive at a time, plus
 * the donor recoveries left by a crash (new migrations wait until they are done). */
typedef struct mig {
    shardd_t *app;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    mig_donor_t *donor;          /* the donation running now, or NULL */
    mig_recv_t *recv;            /* the receive running now (or waiting for its decision) */
    int recoveries;              /* donor recoveries not finished yet (threads running) */
    int stuck;                   /* recoveries that could not run (no memory, no thread,
                                  * unreadable document): new migrations stay refused and
                                  * their collections blocked until a restart */
    bool stopping;
    /* settings (flags of bin/shardd) */
    int write_pause_budget_ms;   /* --migration-write-pause-budget-ms */
    int catchup_timeout_ms;      /* --migration-catchup-timeout-ms */
    bool archive;                /* --archive-moved-chunks */
    char dbpath[4096];
    /* totals for serverStatus */
    int64_t donated, received, aborted;
    /* Migrations whose abort reached this shard before their _recvChunkStart (under mu;
     * a ring of the last MS_MIG_ABORTS_REMEMBERED): such a start is refused. */
    uint8_t aborted_ids[MS_MIG_ABORTS_REMEMBERED][16];
    int naborted_ids, aborted_next;
    /* Index DDL vs migrations of the same collection (under mu; see mig_index_ddl_begin):
     * the index commands running now, per namespace, and the donor's fence. */
    struct { char ns[MS_NS_BYTES_MAX + 1]; int n; } ddl[MS_MIG_INDEX_DDL_MAX];
    bool ddl_fence;
    char ddl_fence_ns[MS_NS_BYTES_MAX + 1];
} mig_t;

int mig_open(shardd_t *app, mig_t **out, ms_error_t *err);
/* Starts the recovery of every migration a crash left unfinished (persisted coordinator
 * documents): each ends committed or aborted as the config server's chunk table says. */
void mig_recover(mig_t *m);
/* NULL-safe; waits (bounded) for the migration threads, then frees the registry unless
 * one is still running (it then lives until the process exits). */
void mig_close(mig_t *m);

/* serverStatus / currentOp: the migration running now with its phase and progress. */
void mig_append_status(mig_t *m, bson_t *out);
/* currentOp-style entries, one per migration in flight (donor or recipient side). */
void mig_append_inprog(mig_t *m, bson_t *arr);

/* ---- shared helpers (mig.c) -------------------------------------------------------- */

/* 32 lowercase hex characters of a UUID (id of the persisted documents). */
void mig_uuid_hex(const uint8_t uuid[16], char out[33]);
void mig_uuid_new(uint8_t uuid[16]);
/* Order-independent digest of the documents of ns whose shard key lies in [min, max):
 * their number and the sum (mod 2^64) of a 64-bit hash of each document's bytes. */
int mig_range_digest(store_t *st, const char *ns, const buf_t *min, const buf_t *max,
                     int64_t *count, uint64_t *sum, int64_t *bytes, ms_error_t *err);
/* The same inside the caller's transaction. */
int mig_range_digest_txn(store_txn_t *t, const char *ns, const buf_t *min, const buf_t *max,
                         int64_t *count, uint64_t *sum, int64_t *bytes, ms_error_t *err);
/* Sends cmd to url and turns {ok: 0} into an error (rpc_command); reply initialised only
 * on success (caller destroys). */
int mig_call(const char *url, const bson_t *cmd, int timeout_ms, bson_t *reply, ms_error_t *err);
/* Appends an entry to config.changelog through the config server (_configsvrLogChange);
 * failures are logged, never fatal. */
void mig_log_change(mig_t *m, const char *what, const char *ns, const bson_t *details);

/* Range reads inside a store transaction (mig.c). fn gets each document's bytes of c
 * whose shard key lies in [min, max), in key order; non-zero stops and is returned. */
int mig_range_docs(store_txn_t *t, store_coll_t *c, const buf_t *min, const buf_t *max,
                   int (*fn)(void *arg, const uint8_t *doc, size_t len, ms_error_t *err), void *arg,
                   ms_error_t *err);
/* The record ids of those documents in key order (more than cap → *n = cap + 1: too
 * many) and the range's digest (document count, sum of xfer_doc_hash), in one scan. */
int mig_range_rowids_digest(store_txn_t *t, store_coll_t *c, const buf_t *min, const buf_t *max,
                            size_t cap, int64_t **rids, size_t *n, int64_t *count, uint64_t *sum,
                            ms_error_t *err);
/* The document with doc's _id, if any: *exists, *rid and *found (initialised by the caller,
 * replaced with a copy) on a hit. */
int mig_find_by_id(store_txn_t *t, store_coll_t *c, const bson_t *doc, int64_t *rid,
                   bson_t *found, bool *exists, ms_error_t *err);
/* Encoded keys compare as bytes (memcmp, then length), as SQLite orders the sk column. */
int mig_key_cmp(const buf_t *a, const buf_t *b);
bool mig_key_in_range(const buf_t *k, const buf_t *min, const buf_t *max);
/* The shard-key pattern (and uuid) of ns in this shard's catalog; NamespaceNotSharded. */
int mig_local_pattern(store_t *st, const char *ns, keys_pattern_t *pat, uint8_t uuid[16],
                      ms_error_t *err);
/* A config.rangeDeletions task document for a migration (notes §1.7), *doc initialised. */
void mig_task_doc(const uint8_t mig_uuid[16], const char *ns, const uint8_t coll_uuid[16],
                  const char *donor, const bson_t *min, const bson_t *max,
                  const keys_pattern_t *pat, bool pending, bool now, bson_t *doc);
/* Inside a write transaction: the task's numOrphanDocs set to n (set) or raised by n;
 * an absent task is not an error. */
int mig_task_add_orphans(store_txn_t *t, const char *id, int64_t n, bool set, ms_error_t *err);
/* Remembers that migration uuid was aborted before this shard saw its start (locks mu);
 * the _locked check, under mu, tells whether it was. */
void mig_remember_abort(mig_t *m, const uint8_t uuid[16]);
bool mig_abort_remembered_locked(const mig_t *m, const uint8_t uuid[16]);
/* Index DDL and migrations of one collection on this shard: an index
 * command (createIndexes, dropIndexes) calls begin before it changes anything and end
 * after. begin waits (MS_MIG_INDEX_DDL_WAIT_MS or the op's maxTimeMS) while this shard
 * receives ns, or donates ns past its fence (from just before the critical section to
 * the end of the donation): ConflictingOperationInProgress past that. *waited tells the
 * caller it had to wait (a dropIndexes that then finds its index gone was beaten by the
 * migration's index sync, which already applied the donor's list). A donor fences
 * before its critical section, waiting (until until_ms) for running index commands of ns;
 * the recipient refuses to start while one runs. So the index list the donor sends the
 * recipient inside its critical section (mig_index_specs, _recvChunkSetIndexes) is
 * final: every index command of ns on the donor is before it or after the commit, and
 * every one on the recipient before the receive or after its end. */
int mig_index_ddl_begin(mig_t *m, const char *ns, bool *waited, ms_error_t *err);
void mig_index_ddl_end(mig_t *m, const char *ns);
int mig_index_ddl_fence(mig_t *m, const char *ns, long long until_ms, ms_error_t *err);
void mig_index_ddl_unfence(mig_t *m);
bool mig_index_ddl_running_locked(const mig_t *m, const char *ns);
/* The namespace a receive is for (fixed at its creation). */
const char *mig_recv_ns(const mig_recv_t *r);
/* The ready index specs of ns on this shard, as {key, name, unique?} documents appended
 * to arr (an array under construction). */
int mig_index_specs(store_t *st, const char *ns, bson_t *arr, ms_error_t *err);
/* The recipient's task of migration id becomes ready (its copy is deleted); absent = ok. */
int mig_recv_task_ready(mig_t *m, const char *id, ms_error_t *err);

/* ---- donor: the driver (mig_donor.c), the cloner source (mig_cloner.c), the
 * coordinator (mig_coord.c) ---------------------------------------------------------- */

int cmd_shardsvr_move_range(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
void mig_donor_status(mig_donor_t *d, bson_t *out);
int cmd_migrate_clone(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_transfer_mods(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
void mig_donor_recover_all(mig_t *m);

/* ---- recipient (mig_recipient.c) ----------------------------------------------------- */

int cmd_recv_chunk_start(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_recv_chunk_status(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_recv_chunk_commit(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_recv_chunk_abort(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_recv_chunk_release(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int cmd_recv_chunk_set_indexes(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
void mig_recv_status(mig_recv_t *r, bson_t *out);
void mig_recv_free(mig_recv_t *r);

/* ---- session migration (mig_session.c): MongoDB's SessionCatalogMigrationSource and
 * SessionCatalogMigrationDestination ----------------------------------------------------- */

/* `_getNextSessionMods` (recipient -> donor): the retryable-write records of the range
 * after afterSeq, with dead-end sentinels for what cannot be placed. */
int cmd_get_next_session_mods(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* The recipient's puller: a thread of its own that persists the donor's records here until
 * a pull answered inside the donor's critical section comes back empty. Owner: the
 * receive's migrate thread, which starts it, waits for it and frees it (free joins the
 * thread); stop(stop_arg) is asked between pulls (the receive aborted, the shard stops).
 * min_enc/max_enc are copied. */
typedef struct mig_sessdest mig_sessdest_t;
int mig_sessdest_start(mig_t *m, const char *ns, const char *from_url, const char *session,
                       const buf_t *min_enc, const buf_t *max_enc, bool (*stop)(void *arg),
                       void *stop_arg, mig_sessdest_t **out, ms_error_t *err);
/* Waits (until until_ms, monotonic) for the final pull: 0 done, else why not. */
int mig_sessdest_wait(mig_sessdest_t *s, long long until_ms, ms_error_t *err);
/* True (and err set) once the puller failed. */
bool mig_sessdest_failed(mig_sessdest_t *s, ms_error_t *err);
/* Wakes the puller between pulls (it then looks at stop at once). */
void mig_sessdest_kick(mig_sessdest_t *s);
void mig_sessdest_counts(mig_sessdest_t *s, int64_t *records, int64_t *sentinels);
/* Appends sessionMigration: {state, records, sentinels, batches, lastSeq, errmsg?}. */
void mig_sessdest_status(mig_sessdest_t *s, bson_t *out);
/* NULL-safe; joins the thread (it ends at its next stop check or call deadline). */
void mig_sessdest_free(mig_sessdest_t *s);

/* Failpoints (named as MongoDB names them; registered by shardd_register_failpoints). */
extern const char *const mig_donor_step_fps[6];     /* moveChunkHangAtStep1..6 */
extern const char *const mig_recv_step_fps[7];      /* migrateThreadHangAtStep1..7 */
#define FP_HANG_BEFORE_LEAVING_CRIT_SEC "hangBeforeLeavingCriticalSection"
#define FP_FAIL_MIGRATION_COMMIT "failMigrationCommit"
#define FP_MIGRATION_COMMIT_NETWORK_ERROR "migrationCommitNetworkError"
#define FP_HANG_DONOR_RECOVERY "hangBeforeMigrationRecovery"   /* minishard: before a recovery decides */
/* minishard, tests only: a _transferMods worker holds the capture in use (in hand,
 * nothing taken from it yet). */
#define FP_HANG_IN_TRANSFER_MODS "hangInTransferModsWithCapture"
/* minishard, tests only: _recvChunkStart waits before the recipient looks at it, as if
 * the network held the request back (a cut between donor and recipient that heals). */
#define FP_HANG_BEFORE_RECV_CHUNK_START "hangBeforeRecvChunkStart"
/* minishard, tests only: the recipient drops one cloned document, so the count and
 * checksum comparison before the commit has something to catch. */
#define FP_SKIP_ONE_MIGRATED_DOC "skipOneMigratedDocument"
/* minishard: session migration. The donor, in `_getNextSessionMods` after the batch was
 * read, before it answers; the recipient after a non-empty batch was persisted, and after
 * the final (empty, inside the donor's critical section) pull, before the session step is
 * done. */
#define FP_HANG_IN_GET_NEXT_SESSION_MODS "hangInGetNextSessionMods"
#define FP_SESSION_MIGRATION_HANG_AFTER_BATCH "sessionMigrationHangAfterBatch"
#define FP_SESSION_MIGRATION_HANG_BEFORE_DONE "sessionMigrationHangBeforeDone"
void mig_register_failpoints(void);

#endif
