/*
 * main.c — bin/shardd, the shard daemon: parses flags, opens the SQLite store under
 * --dbpath, restores the shard identity (from a previous _addShard), starts the command
 * server with the shard's table (shardd_cmd.c) and a cursor reaper, prints one
 * `ready url=...` line, and serves until SIGINT or SIGTERM, then stops cleanly.
 * The start-up and shutdown order every daemon shares lives in common/daemon.h: block
 * signals, parse, open state, serve, say ready, wait, stop serving (in-flight commands
 * finish), close state.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/daemon.h"
#include "common/lclock.h"
#include "common/log.h"
#include "common/lsess.h"
#include "shardd/shardd.h"
#include "shardd/mig.h"
#include "shardd/sessions.h"

#define SHARDD_PORT_DEFAULT 27018  /* MongoDB's shard server port */

static const char shardd_usage[] =
    "usage: shardd --dbpath DIR [--port N] [--name NAME] [--bind ADDR] [--url URL]\n"
    "              [--workers N] [--cursor-timeout-ms N] [--sync full|normal]\n"
    "              [--range-deleter-batch-size N] [--range-deleter-batch-delay-ms N]\n"
    "              [--orphan-cleanup-delay-ms N] [--agg-blocking-bytes-max N]\n"
    "              [--session-timeout-ms N] [--session-stmts-max N] [--enable-test-commands]\n"
    "A minishard shard daemon: documents in one SQLite file, MongoDB's CRUD commands.";

/* The idle-cursor reaper (MongoDB's clientcursormon) and the session reaper (expired
 * retryable-write records, sessions.c): wakes every second. */
typedef struct reaper {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    curs_reg_t *cs;
    store_t *st;
} reaper_t;

static void *reaper_main(void *arg) {
    reaper_t *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->stop) break;
        pthread_mutex_unlock(&r->mu);
        curs_reap(r->cs);
        sess_reap(r->st, lsess_timeout_ms());
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int main(int argc, char **argv) {
    int cursor_timeout_ms = MS_CURSOR_IDLE_MS_MAX, rc, agg_blocking = 0;
    rdel_opts_t ro = {MS_RDEL_BATCH_DOCS_DEFAULT, MS_RDEL_BATCH_DELAY_MS_DEFAULT,
                      MS_RDEL_CLEANUP_DELAY_MS_DEFAULT};
    const char *dbpath = NULL, *name = NULL, *sync = "normal";
    int pause_budget_ms = MS_MIG_WRITE_PAUSE_BUDGET_MS_DEFAULT, catchup_ms = MS_MIG_CATCHUP_MS_DEFAULT;
    bool archive = false;
    int session_timeout_ms = MS_SESSION_TIMEOUT_MS, session_stmts_max = MS_SESSION_STMTS_MAX;
    const flag_spec_t own[] = {
        {"dbpath", FLAG_STR, &dbpath, "directory of the data file (required)"},
        {"name", FLAG_STR, &name, "process name in logs (default shardd)"},
        {"cursor-timeout-ms", FLAG_INT, &cursor_timeout_ms,
         "idle cursors are killed after this long (default 600000)"},
        {"sync", FLAG_STR, &sync,
         "normal (survives a process crash) or full (also survives power loss)"},
        {"migration-write-pause-budget-ms", FLAG_INT, &pause_budget_ms,
         "a donor enters the critical section once the writes left fit this pause (default 20)"},
        {"migration-catchup-timeout-ms", FLAG_INT, &catchup_ms,
         "a migration whose catch-up does not converge this fast aborts (default 60000)"},
        {"archive-moved-chunks", FLAG_BOOL, &archive,
         "write each moved chunk's documents to DBPATH/moveChunk/<ns>/ before deleting them"},
        {"range-deleter-batch-size", FLAG_INT, &ro.batch_docs,
         "documents per range-deletion batch (default 128, 1..10000)"},
        {"range-deleter-batch-delay-ms", FLAG_INT, &ro.batch_delay_ms,
         "pause between range-deletion batches (default 20, 0..60000)"},
        {"agg-blocking-bytes-max", FLAG_INT, &agg_blocking,
         "test aid: memory of one $sort / $group before error 292 (default 100 MB)"},
        {"orphan-cleanup-delay-ms", FLAG_INT, &ro.cleanup_delay_ms,
         "wait before a \"delayed\" range deletion starts (default 2000, 0..86400000)"},
        {"session-timeout-ms", FLAG_INT, &session_timeout_ms,
         "sessions and their retryable-write records expire after this long unused "
         "(MongoDB's localLogicalSessionTimeoutMinutes; default 1800000 = 30 min)"},
        {"session-stmts-max", FLAG_INT, &session_stmts_max,
         "test aid: retryable-write statements a session keeps per txnNumber before its "
         "history is marked incomplete (default 100000, a whole batch)"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    char logname[96];
    daemon_t d;
    shardd_t app;
    store_opts_t so = {0};
    reaper_t reaper;
    ms_error_t err = {0};

    if ((rc = daemon_parse(&d, "shardd", SHARDD_PORT_DEFAULT, argc, argv, own, shardd_usage)) != 0)
        return rc;
    if (!dbpath) {
        fprintf(stderr, "shardd: --dbpath is required (try --help)\n");
        return 2;
    }
    if (session_timeout_ms < 1) {
        fprintf(stderr, "shardd: --session-timeout-ms must be > 0\n");
        return 2;
    }
    lsess_set_timeout_ms(session_timeout_ms);
    sess_set_stmts_max(session_stmts_max);
    if (cursor_timeout_ms < 1) {
        fprintf(stderr, "shardd: --cursor-timeout-ms must be > 0\n");
        return 2;
    }
    if (strcmp(sync, "normal") != 0 && strcmp(sync, "full") != 0) {
        fprintf(stderr, "shardd: --sync must be normal or full\n");
        return 2;
    }
    if (ro.batch_docs < 1 || ro.batch_docs > MS_RDEL_BATCH_DOCS_MAX ||
        ro.batch_delay_ms < 0 || ro.batch_delay_ms > MS_RDEL_BATCH_DELAY_MS_MAX ||
        ro.cleanup_delay_ms < 0 || ro.cleanup_delay_ms > MS_RDEL_CLEANUP_DELAY_MS_MAX) {
        fprintf(stderr, "shardd: --range-deleter-batch-size must be 1..%d, "
                        "--range-deleter-batch-delay-ms 0..%d, --orphan-cleanup-delay-ms 0..%d\n",
                MS_RDEL_BATCH_DOCS_MAX, MS_RDEL_BATCH_DELAY_MS_MAX, MS_RDEL_CLEANUP_DELAY_MS_MAX);
        return 2;
    }
    so.sync_full = strcmp(sync, "full") == 0;
    if (name) snprintf(logname, sizeof logname, "shardd.%s", name);
    else snprintf(logname, sizeof logname, "shardd");
    log_init(logname, LOG_INFO);

    /* Before anything can evaluate them, and before cmd.c's own (failCommand), so the
     * per-document point is the first one a lookup meets. */
    shardd_register_failpoints();
    memset(&app, 0, sizeof app);
    app.name = name ? name : "";
    app.agg_blocking_bytes_max = agg_blocking > 0 ? agg_blocking : 0;
    rc = 1;
    if (store_open(dbpath, &so, &app.st, &err) != 0) return daemon_fail("store", &err);
    lclock_init(LCLOCK_DATA);
    if (lclock_open(dbpath, &err) != 0) {
        daemon_fail("cluster time", &err);
        goto out_store;
    }
    if (shv_open(&app.shv, &err) != 0 || shardd_load_identity(&app, &err) != 0 ||
        shv_dbcrit_load(app.shv, app.st, &err) != 0) {
        daemon_fail("sharding", &err);
        goto out_store;
    }
    if (pause_budget_ms < 0 || catchup_ms < 1) {
        fprintf(stderr, "shardd: --migration-write-pause-budget-ms must be >= 0 and "
                        "--migration-catchup-timeout-ms > 0\n");
        goto out_store;
    }
    if (mig_open(&app, &app.mig, &err) != 0) {
        daemon_fail("migrations", &err);
        goto out_store;
    }
    app.mig->write_pause_budget_ms = pause_budget_ms;
    app.mig->catchup_timeout_ms = catchup_ms;
    app.mig->archive = archive;
    snprintf(app.mig->dbpath, sizeof app.mig->dbpath, "%s", dbpath);
    if (plan_cursors_new(cursor_timeout_ms, &app.cursors) != 0) {
        err_set(&err, MS_ERR_INTERNAL, "cannot allocate the cursor table");
        daemon_fail("cursors", &err);
        goto out_store;
    }
    /* Resumes the tasks a previous run left (docs/range-deleter.md). */
    if (rdel_open(app.st, app.shv, &ro, &app.rdel, &err) != 0) {
        daemon_fail("range deleter", &err);
        goto out_store;
    }
    rdel_set_cursors(app.rdel, app.cursors);
    memset(&reaper, 0, sizeof reaper);
    pthread_mutex_init(&reaper.mu, NULL);
    pthread_cond_init(&reaper.cv, NULL);
    reaper.cs = app.cursors;
    reaper.st = app.st;
    if (pthread_create(&reaper.th, NULL, reaper_main, &reaper) != 0) {
        err_set(&err, MS_ERR_INTERNAL, "cannot start the cursor reaper thread");
        daemon_fail("reaper", &err);
        goto out_store;
    }
    app.url = d.url;
    /* Migrations a crash interrupted, before serving: an undecided one holds its
     * collection's writes until the config server's chunk table decides it. */
    mig_recover(app.mig);
    {
        cmd_server_opts_t opts = {
            .table = shardd_cmd_table,
            .table_len = shardd_cmd_table_len,
            .app = &app,
            .status = shardd_status,
            .metrics = shardd_metrics,
            /* The migration's peer calls (_migrateClone, _transferMods, _recvChunk*) are
             * served even while user writes wait on a critical section. */
            .internal_workers = MS_RPC_INTERNAL_WORKERS,
        };
        if (daemon_start(&d, &opts, &err) != 0) goto out_reaper;
    }
    daemon_ready(&d, "dbpath", dbpath);
    daemon_wait(&d);
    rc = 0;
out_reaper:
    daemon_stop_serving(&d);  /* in-flight commands finish before their state is closed */
    mig_close(app.mig);
    app.mig = NULL;
    pthread_mutex_lock(&reaper.mu);
    reaper.stop = true;
    pthread_cond_signal(&reaper.cv);
    pthread_mutex_unlock(&reaper.mu);
    pthread_join(reaper.th, NULL);
out_store:
    rdel_close(app.rdel);   /* before the cursors and the store it reads */
    curs_reg_free(app.cursors);
    shv_close(app.shv);
    store_close(app.st);
    return daemon_exit(&d, rc);
}
