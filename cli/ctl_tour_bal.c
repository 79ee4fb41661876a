/*
 * ctl_tour_bal.c — `shardctl tour balancer`: one balancer round, step by step
 * (configsvr/balancer.c, docs/balancer.md). It shows each collection's threshold and the
 * moves the policy would choose (balancerExplain), then makes exactly one round happen:
 * with the balancer stopped and every shard's moveChunkHangAtStep1 on, balancerStart wakes
 * a round now; once a donor is held at the end of its first step, the round has read its
 * settings and chosen its migrations, so the tour turns the balancer off (a settings
 * write, which does not wait) — the next round moves nothing — and releases the donors.
 * The round's migrations finish, and its `balancer.round` entry in config.actionlog is
 * printed. Every failpoint it turned on is turned off on any way out, Ctrl-C included, and
 * the balancer is left as it was found.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/ctl.h"
#include "common/bsonx.h"
#include "common/limits.h"
#include "common/log.h"

#define TOUR_BAL_FP "moveChunkHangAtStep1"
/* How long the tour waits for the round to start its migrations, and then to end. */
#define TOUR_BAL_ROUND_WAIT_MS (5 * 60 * 1000)
/* Collections the tour explains (a small cluster has a handful). */
#define TOUR_BAL_COLLS_MAX 64

typedef struct tour_bal {
    ctl_t *router;
    ctl_t shards[MS_SHARDS_MAX];     /* direct connections, for the failpoints */
    char names[MS_SHARDS_MAX][64];
    char urls[MS_SHARDS_MAX][MS_URL_BYTES_MAX];   /* shards[i].host */
    int64_t fp_base[MS_SHARDS_MAX];
    bool fp_on[MS_SHARDS_MAX];
    int nshards;
    bool automatic;
    int pause_ms;
} tour_bal_t;

/* {name: 1} on admin through the router; the reply is dropped. */
static int send_admin(ctl_t *c, const char *name, ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, reply;
    int rc;
    BSON_APPEND_INT32(&cmd, name, 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    rc = ctl_command(c, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0) bson_destroy(&reply);
    return rc;
}

/* balancerStatus: *on = mode is not off; *rounds = numBalancerRounds. */
static int balancer_status(ctl_t *c, bool *on, int64_t *rounds, ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, reply;
    int rc;
    BSON_APPEND_INT32(&cmd, "balancerStatus", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    rc = ctl_command(c, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if (on) *on = strcmp(ctl_str(&reply, "mode"), "off") != 0;
    if (rounds) *rounds = ctl_int(&reply, "numBalancerRounds", 0);
    bson_destroy(&reply);
    return 0;
}

/* Balancing off by a config.settings write (what balancerStop writes, without its wait
 * for the round in progress: that round is held at the failpoints). */
static int settings_off(ctl_t *c, ms_error_t *err) {
    bson_t *cmd = BCON_NEW("update", "settings", "$db", "config", "updates", "[", "{", "q", "{", "_id", "balancer", "}",
                           "u", "{", "$set", "{", "stopped", BCON_BOOL(true), "mode", "off", "}", "}", "upsert",
                           BCON_BOOL(true), "}", "]");
    bson_t reply;
    int rc = ctl_command(c, cmd, &reply, err);
    bson_destroy(cmd);
    if (rc == 0) bson_destroy(&reply);
    return rc;
}

static int open_shards(tour_bal_t *b, ms_error_t *err) {
    ctl_docs_t shards = {0};
    bson_t sort = BSON_INITIALIZER;
    int rc;
    BSON_APPEND_INT32(&sort, "_id", 1);
    rc = ctl_find_all(b->router, "config", "shards", NULL, &sort, 0, MS_SHARDS_MAX, &shards, err);
    bson_destroy(&sort);
    for (int i = 0; rc == 0 && i < shards.n; i++) {
        snprintf(b->names[i], sizeof b->names[i], "%s", ctl_str(shards.v[i], "_id"));
        snprintf(b->urls[i], sizeof b->urls[i], "%s", ctl_str(shards.v[i], "host"));
        rc = tour_open(b->urls[i], &b->shards[i], err);
        if (rc == 0) b->nshards++;
    }
    ctl_docs_free(&shards);
    return rc;
}

static int failpoints_on(tour_bal_t *b, ms_error_t *err) {
    for (int i = 0; i < b->nshards; i++) {
        int rc = tour_fp(&b->shards[i], TOUR_BAL_FP, true, &b->fp_base[i], err);
        if (rc) {
            if (rc == MS_ERR_COMMAND_NOT_FOUND) tour_say_no_test_commands(b->names[i], err);
            return rc;
        }
        b->fp_on[i] = true;
    }
    return 0;
}

/* Every failpoint the tour turned on, off: the one path out, whatever happened. */
static void failpoints_off(tour_bal_t *b) {
    for (int i = 0; i < b->nshards; i++) {
        ms_error_t err = {0};
        if (!b->fp_on[i]) continue;
        if (tour_fp(&b->shards[i], TOUR_BAL_FP, false, NULL, &err) == 0) {
            b->fp_on[i] = false;
            continue;
        }
        printf("could not turn %s off on %s: %s; to release it by hand:\n"
               "  shardctl --host %s '{\"configureFailPoint\": \"%s\", \"mode\": \"off\"}'\n",
               TOUR_BAL_FP, b->names[i], err.msg, b->shards[i].host, TOUR_BAL_FP);
    }
}

/* Each collection's balancerExplain, as explain-balance prints it; how many would move. */
static int explain_all(tour_bal_t *b, const char *only_ns) {
    ctl_docs_t colls = {0};
    ms_error_t err = {0};
    int moving = 0;
    if (ctl_find_all(b->router, "config", "collections", NULL, NULL, 0, TOUR_BAL_COLLS_MAX, &colls, &err)) {
        printf("(config.collections: %s)\n", err.msg);
        return 0;
    }
    for (int i = 0; i < colls.n; i++) {
        const char *ns = ctl_str(colls.v[i], "_id");
        bson_t cmd = BSON_INITIALIZER, reply, pol;
        if (ctl_bool(colls.v[i], "dropped") || strncmp(ns, "config.", 7) == 0) continue;
        if (only_ns && strcmp(ns, only_ns) != 0) continue;
        BSON_APPEND_UTF8(&cmd, "balancerExplain", ns);
        BSON_APPEND_UTF8(&cmd, "$db", "admin");
        if (ctl_command(b->router, &cmd, &reply, &err) == 0) {
            printf("\n");
            ctl_print_explain(ns, &reply);
            if (ctl_sub(&reply, "policy", &pol) && strcmp(ctl_str(&pol, "decision"), "move") == 0) moving++;
            bson_destroy(&reply);
        } else {
            printf("\n%s: balancerExplain: %s\n", ns, err.msg);
        }
        bson_destroy(&cmd);
    }
    ctl_docs_free(&colls);
    return moving;
}

/* Whether some shard is held at the end of step 1 of a migration of this round. */
static bool donor_held(tour_bal_t *b) {
    for (int i = 0; i < b->nshards; i++) {
        ms_error_t err = {0};
        if (tour_fp_wait(&b->shards[i], TOUR_BAL_FP, b->fp_base[i] + 1, 100, &err) == 0) return true;
    }
    return false;
}

/* The migrations in flight, from the router's currentOp: one line each. */
static void show_migrations(tour_bal_t *b) {
    bson_t cmd = BSON_INITIALIZER, reply;
    ms_error_t err = {0};
    ctl_docs_t ops = {0};
    BSON_APPEND_INT32(&cmd, "currentOp", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    printf("migrations the round started (currentOp):\n");
    if (ctl_command(b->router, &cmd, &reply, &err) == 0) {
        ctl_docs_add_array(&ops, &reply, NULL, "inprog", 256);
        bson_destroy(&reply);
    } else {
        printf("  (currentOp: %s)\n", err.msg);
    }
    for (int i = 0; i < ops.n; i++) {
        if (strcmp(ctl_str(ops.v[i], "role"), "donor") != 0) continue;
        printf("  %s ", ctl_str(ops.v[i], "ns"));
        ctl_print_json(stdout, ops.v[i], "min", "?");
        printf(" -->> ");
        ctl_print_json(stdout, ops.v[i], "max", "(max: shown once past step 1)");
        printf("  %s -> %s\n", ctl_str(ops.v[i], "from"), ctl_str(ops.v[i], "to"));
    }
    bson_destroy(&cmd);
    ctl_docs_free(&ops);
}

/* The round's balancer.round entries in config.actionlog since since_ms. */
static void show_round_entry(tour_bal_t *b, int64_t since_ms) {
    ctl_docs_t docs = {0};
    bson_t filter = BSON_INITIALIZER, range, sort = BSON_INITIALIZER, det, arr;
    bson_iter_t it;
    ms_error_t err = {0};
    BSON_APPEND_UTF8(&filter, "what", "balancer.round");
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "time", &range);
    BSON_APPEND_DATE_TIME(&range, "$gte", since_ms);
    bson_append_document_end(&filter, &range);
    BSON_APPEND_INT32(&sort, "time", 1);
    if (ctl_find_all(b->router, "config", "actionlog", &filter, &sort, 0, 16, &docs, &err)) {
        printf("(config.actionlog: %s)\n", err.msg);
        goto out;
    }
    for (int i = 0; i < docs.n; i++) {
        if (!ctl_sub(docs.v[i], "details", &det)) continue;
        if (*ctl_str(&det, "why")) {   /* the round that found balancing off */
            printf("balancer.round: balancing off (%s), nothing chosen\n", ctl_str(&det, "why"));
            continue;
        }
        printf("balancer.round: candidateChunks %lld, chunksMoved %lld, chunksSplit %lld, "
               "errorOccurred %s, executionTimeMillis %lld\n",
               (long long)ctl_int(&det, "candidateChunks", 0), (long long)ctl_int(&det, "chunksMoved", 0),
               (long long)ctl_int(&det, "chunksSplit", 0), ctl_bool(&det, "errorOccurred") ? "true" : "false",
               (long long)ctl_int(&det, "executionTimeMillis", 0));
        if (ctl_sub(&det, "migrations", &arr) && bson_iter_init(&it, &arr))
            while (bson_iter_next(&it)) {
                bson_t m;
                if (BSON_ITER_HOLDS_DOCUMENT(&it) && bsonx_view_container(&it, &m)) tour_print_doc("  migration: ", &m);
            }
        tour_print_doc("  entry: ", docs.v[i]);
    }
    if (docs.n == 0) printf("no balancer.round entry since the tour started\n");
out:
    bson_destroy(&filter);
    bson_destroy(&sort);
    ctl_docs_free(&docs);
}

/* balancerStart, then the round's migrations held at step 1 until the balancer is off
 * again; returns once the round ended (numBalancerRounds past rounds0). */
static int one_round(tour_bal_t *b, int64_t rounds0, ms_error_t *err) {
    long long until = time_mono_ms() + TOUR_BAL_ROUND_WAIT_MS;
    int64_t rounds = rounds0;
    bool held = false;
    int rc;
    printf("... balancerStart: it wakes the balancer for a round now\n");
    if ((rc = send_admin(b->router, "balancerStart", err)) != 0) return rc;
    while (!held && rounds <= rounds0) {
        if (tour_interrupted()) return err_set(err, MS_ERR_INTERRUPTED, "interrupted (Ctrl-C)");
        if (time_mono_ms() > until) return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT, "no balancer round ended");
        /* Checked even when the explain foresaw no move: the round may see more (a split
         * between the two), and a donor it holds would keep the round from ending. */
        held = donor_held(b);
        if (!held && (rc = balancer_status(b->router, NULL, &rounds, err)) != 0) return rc;
        if (!held && rounds <= rounds0) tour_sleep_ms(50);
    }
    /* The round has read its settings (and chosen) by now: off, so no round after it moves. */
    if ((rc = settings_off(b->router, err)) != 0) return rc;
    if (held) {
        printf("-- the round chose its migrations; each donor is held at the end of step 1 (checks) --\n"
               "(the balancer is set off now, so the round after this one moves nothing)\n");
        show_migrations(b);
        tour_pause(b->automatic, b->pause_ms);
        printf("... releasing the donors (%s off); the round waits for its migrations\n", TOUR_BAL_FP);
        failpoints_off(b);
    } else {
        printf("-- the round ended without starting a migration --\n");
    }
    while (rounds <= rounds0) {
        if (tour_interrupted()) return err_set(err, MS_ERR_INTERRUPTED, "interrupted (Ctrl-C)");
        if (time_mono_ms() > until) return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT, "the round did not end");
        if ((rc = balancer_status(b->router, NULL, &rounds, err)) != 0) return rc;
        if (rounds <= rounds0) tour_sleep_ms(50);
    }
    return 0;
}

int ctl_tour_balancer(ctl_t *router, const char *ns, bool automatic, int pause_ms) {
    tour_bal_t *b = calloc(1, sizeof *b);
    ms_error_t err = {0};
    bool was_on = false, touched = false;   /* touched: the tour changed the balancer's mode */
    int64_t rounds0 = 0, since_ms = time_now_ms() - 1;
    int rc, moving;
    if (!b) return 1;
    b->router = router;
    b->automatic = automatic;
    b->pause_ms = pause_ms;
    printf("A guided tour of one balancer round (configsvr/balancer.c, docs/balancer.md).\n");
    if ((rc = open_shards(b, &err)) != 0 || (rc = failpoints_on(b, &err)) != 0 ||
        (rc = balancer_status(router, &was_on, &rounds0, &err)) != 0)
        goto out;
    printf("\n== 1. the balancer is %s; %lld rounds so far ==\n", was_on ? "on" : "off", (long long)rounds0);
    if (was_on) {
        printf("... balancerStop, so that the tour starts the round itself (it waits for a round in progress)\n");
        touched = true;
        if ((rc = send_admin(router, "balancerStop", &err)) != 0) goto out;
        if ((rc = balancer_status(router, NULL, &rounds0, &err)) != 0) goto out;
    }
    printf("\n== 2. what a round would do, per collection (balancerExplain) ==\n"
           "The classic policy moves a collection's chunks when the chunk count difference between\n"
           "the fullest and the emptiest shard reaches the threshold: 2 below 20 chunks, 4 below 80,\n"
           "8 above (MongoDB's migration thresholds); the dataSize policy uses data sizes instead.\n"
           "A round runs one migration per shard at most, the chosen ones in parallel.\n");
    moving = explain_all(b, ns);
    tour_pause(automatic, pause_ms);
    if (tour_interrupted()) {
        rc = err_set(&err, MS_ERR_INTERRUPTED, "interrupted (Ctrl-C)");
        goto out;
    }
    touched = true;
    printf("\n== 3. one round ==\n%s\n", moving ? "It will move the collections whose decision is \"move\" above."
                                               : "No collection is over its threshold: the round moves nothing.");
    if ((rc = one_round(b, rounds0, &err)) != 0) goto out;
    printf("\n== 4. the round's entry (config.actionlog, what: \"balancer.round\") ==\n");
    show_round_entry(b, since_ms);
    printf("\n== 5. after the round ==\n");
    explain_all(b, ns);
out:
    failpoints_off(b);
    if (touched && was_on) tour_balancer_start(router);
    else if (touched) {
        ms_error_t e2 = {0};
        if (settings_off(router, &e2) != 0) printf("could not turn the balancer back off: %s\n", e2.msg);
    }
    if (rc) {
        printf("\nshardctl tour balancer stopped: %s (code %d)\n", err.msg, rc);
        bool all_off = true;
        for (int i = 0; i < b->nshards; i++) all_off = all_off && !b->fp_on[i];
        printf("%s; the balancer is %s as before.\n"
               "See what happened: shardctl --host %s status; shardctl --host %s watch --bars\n",
               all_off ? "Every failpoint the tour set is off" : "The failpoints named above are still on",
               was_on ? "on" : "off", router->host, router->host);
    } else {
        printf("\nThe tour is over: one balancer round; the balancer is %s again, as it was.\n", was_on ? "on" : "off");
    }
    for (int i = 0; i < b->nshards; i++) tour_close(&b->shards[i]);
    free(b);
    return rc ? 1 : 0;
}
