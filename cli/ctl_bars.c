/*
 * ctl_bars.c — shardctl's balancing views (run by bin/shardctl): `watch --bars` redraws,
 * every interval, the chunks per shard of each sharded collection as bars, the
 * migrations in flight with their phase and clone progress (the router's currentOp) and
 * the balancer's last rounds (config.actionlog balancer.round); with --until-balanced it
 * returns once the cluster is balanced. `changelog` prints config.changelog one entry a
 * line, or with --summary what the migrations cost (moves, documents, the donor's mean
 * ms per step, the write pause). On a terminal a frame replaces the last one (ANSI home +
 * clear); otherwise frames follow each other with no escape codes, so a log stays
 * readable. Everything goes through the router, so it shows what a client sees.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/ctl.h"
#include "common/bsonx.h"
#include "common/flags.h"
#include "common/limits.h"
#include "common/log.h"

/* Upper bound on documents one view reads from one config collection (a frame stays
 * bounded whatever the catalog holds). */
#define CTL_BARS_DOCS_MAX 100000
/* Width of the longest bar, in characters: fits an 80-column terminal with the names. */
#define CTL_BARS_WIDTH 40
/* balancer.round entries shown, newest first, unless --rounds says otherwise. */
#define CTL_BARS_ROUNDS_DEFAULT 5
/* currentOp entries read per frame (two per migration; one migration per shard). */
#define CTL_BARS_OPS_MAX 256

/* Where the views print: stdout, or while `watch --bars` builds a frame, the frame's
 * memory stream (so it knows the frame's height before it draws it). */
static FILE *out_fp;

static void print_clock(int64_t ms) {
    time_t s = (time_t)(ms / 1000);
    char buf[16];
    strftime(buf, sizeof buf, "%H:%M:%S", localtime(&s));
    fputs(buf, out_fp);
}

/* n repetitions of a block (a full block on a terminal, '#' otherwise). */
static void print_bar(int n, bool tty) {
    for (int i = 0; i < n; i++) fputs(tty ? "\xe2\x96\x88" : "#", out_fp);
}

/* ---- one frame --------------------------------------------------------------------------- */

typedef struct frame_state {
    int migrations;        /* in flight now */
    int64_t last_round_ms; /* time of the newest balancer.round (0: none) */
    int64_t last_moved;    /* its chunksMoved + candidateChunks + chunksSplit */
    bool every_shard_has_chunks;
} frame_state_t;

/* Chunks per shard of one collection, as bars; clears st->every_shard_has_chunks when a
 * shard that may receive (not draining) owns none while there are enough chunks. */
static void frame_collection(ctl_t *c, const bson_t *coll, const ctl_docs_t *shards, bool tty, frame_state_t *st) {
    const char *ns = ctl_str(coll, "_id");
    ctl_docs_t per_shard = {0};
    bson_t filter, jumbo_filter;
    bson_iter_t it;
    ms_error_t err = {0};
    int64_t counts[MS_SHARDS_MAX] = {0}, other = 0, max = 1, jumbo = 0, total = 0;
    int receivers = 0;

    bson_init(&filter);
    if (bson_iter_init_find(&it, coll, "uuid")) bsonx_append_iter(&filter, "uuid", &it);
    else BSON_APPEND_UTF8(&filter, "ns", ns);
    bson_copy_to(&filter, &jumbo_filter);
    BSON_APPEND_BOOL(&jumbo_filter, "jumbo", true);
    /* counted by the config server on an index: a frame costs the same at any chunk count */
    if (ctl_chunks_per_shard(c, &filter, &per_shard, &err) ||
        ctl_count(c, "config", "chunks", &jumbo_filter, &jumbo, &err)) {
        fprintf(out_fp, "  %s: (could not read config.chunks: %s)\n", ns, err.msg);
        goto out;
    }
    for (int i = 0; i < per_shard.n; i++) {
        const char *sh = ctl_str(per_shard.v[i], "_id");
        int64_t n = ctl_int(per_shard.v[i], "n", 0);
        int k;
        total += n;
        for (k = 0; k < shards->n && k < MS_SHARDS_MAX; k++)
            if (strcmp(ctl_str(shards->v[k], "_id"), sh) == 0) break;
        if (k < shards->n && k < MS_SHARDS_MAX) counts[k] += n;
        else other += n;
    }
    for (int k = 0; k < shards->n && k < MS_SHARDS_MAX; k++) {
        if (counts[k] > max) max = counts[k];
        if (!ctl_bool(shards->v[k], "draining")) receivers++;
    }
    fprintf(out_fp, "chunks per shard — %s, key ", ns);
    ctl_print_json(out_fp, coll, "key", "?");
    fprintf(out_fp, ", %lld chunks\n", (long long)total);
    for (int k = 0; k < shards->n && k < MS_SHARDS_MAX; k++) {
        bool draining = ctl_bool(shards->v[k], "draining");
        int w = (int)(counts[k] * CTL_BARS_WIDTH / max);
        fprintf(out_fp, "  %-10s ", ctl_str(shards->v[k], "_id"));
        print_bar(w, tty);
        fprintf(out_fp, "%*s %lld%s\n", CTL_BARS_WIDTH - w, "", (long long)counts[k],
               draining ? "  (draining)" : "");
        if (!draining && counts[k] == 0 && total >= receivers) st->every_shard_has_chunks = false;
    }
    if (other) fprintf(out_fp, "  (%lld chunks on shards not in config.shards)\n", (long long)other);
    if (jumbo) fprintf(out_fp, "  jumbo chunks: %lld\n", (long long)jumbo);
out:
    bson_destroy(&filter);
    bson_destroy(&jumbo_filter);
    ctl_docs_free(&per_shard);
}

/* One migration, compact: donor -> recipient, range, phase (both sides), clone progress. */
static void frame_migration(const bson_t *op, const bson_t *peer, bool tty) {
    int64_t total = ctl_int(op, "docsToClone", -1), done = ctl_int(op, "docsCloned", 0);
    bool donor = strcmp(ctl_str(op, "role"), "donor") == 0;
    fprintf(out_fp, "  %s -> %s  %s ", donor ? ctl_str(op, "from") : ctl_str(op, "fromShardId"), ctl_str(op, "to"),
           ctl_str(op, "ns"));
    ctl_print_json(out_fp, op, "min", "?");
    fprintf(out_fp, " -->> ");
    ctl_print_json(out_fp, op, "max", "?");
    fprintf(out_fp, "\n      ");
    ctl_print_migration_phase(out_fp, op, peer);
    if (total > 0) {
        int filled = (int)(done * 20 / total);
        if (filled > 20) filled = 20;
        fprintf(out_fp, "  [");
        print_bar(filled, tty);
        fprintf(out_fp, "%*s] %lld / %lld docs", 20 - filled, "", (long long)done, (long long)total);
    } else {
        fprintf(out_fp, "  %lld docs", (long long)done);
    }
    fprintf(out_fp, "  %.1f s\n", (double)ctl_int(op, "elapsedMS", 0) / 1000.0);
}

static void frame_migrations(ctl_t *c, bool tty, frame_state_t *st) {
    bson_t cmd, reply;
    ms_error_t err = {0};
    ctl_docs_t ops = {0};
    fprintf(out_fp, "migrations in flight\n");
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "currentOp", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (ctl_command(c, &cmd, &reply, &err) != 0) {
        fprintf(out_fp, "  (currentOp: %s)\n", err.msg);
        st->migrations = -1;   /* unknown: never "balanced" on a frame that could not see */
        bson_destroy(&cmd);
        return;
    }
    bson_destroy(&cmd);
    ctl_docs_add_array(&ops, &reply, NULL, "inprog", CTL_BARS_OPS_MAX);
    bson_destroy(&reply);
    for (int i = 0; i < ops.n; i++) {
        const bson_t *peer;
        if (!ctl_migration_shown(&ops, i, &peer)) continue;
        frame_migration(ops.v[i], peer, tty);
        st->migrations++;
    }
    if (st->migrations == 0) fprintf(out_fp, "  (none)\n");
    ctl_docs_free(&ops);
}

/* The last `n` balancer.round entries, newest first, one line each (moves listed). */
static void frame_rounds(ctl_t *c, int n, frame_state_t *st) {
    ctl_docs_t rs = {0};
    bson_t filter, sort;
    ms_error_t err = {0};
    bson_init(&filter);
    BSON_APPEND_UTF8(&filter, "what", "balancer.round");
    bson_init(&sort);
    BSON_APPEND_INT32(&sort, "time", -1);
    fprintf(out_fp, "balancer rounds (newest first)\n");
    if (ctl_find_all(c, "config", "actionlog", &filter, &sort, n > 0 ? n : 1, CTL_BARS_DOCS_MAX, &rs, &err)) {
        fprintf(out_fp, "  (config.actionlog: %s)\n", err.msg);
        st->last_round_ms = 0;
        goto out;
    }
    if (rs.n > 0) {
        st->last_round_ms = ctl_date(rs.v[0], "time");
        st->last_moved = ctl_int(rs.v[0], "details.chunksMoved", 0) + ctl_int(rs.v[0], "details.candidateChunks", 0) +
                         ctl_int(rs.v[0], "details.chunksSplit", 0);
    }
    for (int i = 0; i < rs.n && i < n; i++) {
        bson_t details, moves;
        bson_iter_t it;
        fprintf(out_fp, "  ");
        print_clock(ctl_date(rs.v[i], "time"));
        int64_t ms = ctl_int(rs.v[i], "details.executionTimeMillis", -1);
        fprintf(out_fp, "  moved %lld  split %lld", (long long)ctl_int(rs.v[i], "details.chunksMoved", 0),
               (long long)ctl_int(rs.v[i], "details.chunksSplit", 0));
        if (ms >= 0) fprintf(out_fp, "  %lld ms", (long long)ms);
        if (!ctl_sub(rs.v[i], "details", &details)) {
            fprintf(out_fp, "\n");
            continue;
        }
        if (*ctl_str(&details, "why")) fprintf(out_fp, "  %s", ctl_str(&details, "why"));
        fprintf(out_fp, "\n");
        if (bson_iter_init_find(&it, &details, "migrations") && BSON_ITER_HOLDS_ARRAY(&it) &&
            bsonx_view_container(&it, &moves) && bson_iter_init(&it, &moves))
            while (bson_iter_next(&it)) {
                bson_t m;
                if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bsonx_view_container(&it, &m)) continue;
                fprintf(out_fp, "            %s -> %s  ", ctl_str(&m, "from"), ctl_str(&m, "to"));
                ctl_print_json(out_fp, &m, "min", "?");
                fprintf(out_fp, "  %s  %lld ms%s%s\n", ctl_str(&m, "reason"),
                        (long long)ctl_int(&m, "durationMillis", 0), ctl_bool(&m, "ok") ? "" : "  failed: ",
                        ctl_bool(&m, "ok") ? "" : ctl_str(&m, "errmsg"));
            }
    }
    if (rs.n == 0) fprintf(out_fp, "  (none yet)\n");
out:
    bson_destroy(&filter);
    bson_destroy(&sort);
    ctl_docs_free(&rs);
}

static void frame(ctl_t *c, const char *ns, int nrounds, bool tty, frame_state_t *st) {
    ctl_docs_t shards = {0}, colls = {0};
    bson_t sort, filter, cmd, reply;
    ms_error_t err = {0};
    int shown = 0;

    memset(st, 0, sizeof *st);
    st->every_shard_has_chunks = true;
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "balancerStatus", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (ctl_command(c, &cmd, &reply, &err) == 0) {
        fprintf(out_fp, "balancer: %s, %s, rounds: %lld\n", ctl_str(&reply, "mode"),
               ctl_bool(&reply, "inBalancerRound") ? "in a round" : "between rounds",
               (long long)ctl_int(&reply, "numBalancerRounds", 0));
        bson_destroy(&reply);
    } else {
        fprintf(out_fp, "balancer: (balancerStatus: %s)\n", err.msg);
    }
    bson_destroy(&cmd);

    bson_init(&sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    bson_init(&filter);
    if (ns) BSON_APPEND_UTF8(&filter, "_id", ns);
    if (ctl_find_all(c, "config", "shards", NULL, &sort, 0, CTL_BARS_DOCS_MAX, &shards, &err) ||
        ctl_find_all(c, "config", "collections", &filter, &sort, 0, CTL_BARS_DOCS_MAX, &colls, &err)) {
        fprintf(out_fp, "(could not read the catalog: %s)\n", err.msg);
        st->every_shard_has_chunks = false;
    } else {
        for (int i = 0; i < colls.n; i++) {
            if (ctl_bool(colls.v[i], "dropped")) continue;
            fprintf(out_fp, "\n");
            frame_collection(c, colls.v[i], &shards, tty, st);
            shown++;
        }
        if (shown == 0) fprintf(out_fp, "\n(no sharded collection%s%s)\n", ns ? " " : "", ns ? ns : "");
    }
    fprintf(out_fp, "\n");
    frame_migrations(c, tty, st);
    fprintf(out_fp, "\n");
    frame_rounds(c, nrounds, st);
    bson_destroy(&sort);
    bson_destroy(&filter);
    ctl_docs_free(&shards);
    ctl_docs_free(&colls);
}

int ctl_watch_bars(ctl_t *c, int argc, char **argv) {
    int interval_ms = 1000, count = 0, nrounds = CTL_BARS_ROUNDS_DEFAULT;
    bool bars = false, until = false, verbose = false;
    const char *ns = NULL;
    const flag_spec_t specs[] = {
        {"bars", FLAG_BOOL, &bars, "chunks per shard as bars, migrations, balancer rounds"},
        {"ns", FLAG_STR, &ns, "only this collection (default: every sharded collection)"},
        {"rounds", FLAG_INT, &nrounds, "balancer rounds shown (default 5)"},
        {"until-balanced", FLAG_BOOL, &until,
         "return once balanced: no migration in flight, the newest balancer round (after the start) "
         "split and moved nothing, every shard owns a chunk (exit 1 when --count ends first)"},
        {"interval-ms", FLAG_INT, &interval_ms, "redraw period (default 1000)"},
        {"count", FLAG_INT, &count, "stop after this many frames (default: until Ctrl-C)"},
        {"verbose", FLAG_BOOL, &verbose, "(ignored with --bars)"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    bool tty = isatty(STDOUT_FILENO);
    int64_t start_ms = time_now_ms();
    int prev_lines = 0;   /* height of the frame on screen (tty) */
    flags_parse(argc, argv, specs,
                "usage: shardctl [--host URL] watch --bars [--ns DB.COLL] [--rounds N] [--until-balanced]\n"
                "                [--interval-ms N] [--count N]\n");
    if (interval_ms < 50) interval_ms = 50;
    if (nrounds < 0) nrounds = 0;
    for (int i = 0; count <= 0 || i < count; i++) {
        frame_state_t st;
        time_t now = time(NULL);
        char when[16], *buf = NULL;
        size_t len = 0;
        int lines = 0;
        bool done;
        strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
        /* The frame is built in memory first: on a terminal it then replaces the last
         * one in place (cursor up over its lines, clear below), so what was printed
         * before the watch stays on screen; a frame taller than the terminal is drawn
         * from the top of a cleared screen instead. */
        out_fp = open_memstream(&buf, &len);
        if (!out_fp) abort();
        fprintf(out_fp, "shardctl watch --bars — %s — every %d ms%s\n", when, interval_ms,
                until ? ", until balanced" : " (Ctrl-C to stop)");
        frame(c, ns, nrounds, tty, &st);
        done = until && st.migrations == 0 && st.last_round_ms > start_ms && st.last_moved == 0 &&
               st.every_shard_has_chunks;
        if (done)
            fprintf(out_fp, "\nbalanced: no migration in flight, the last round split and moved nothing, every "
                            "shard has chunks\n");
        fclose(out_fp);
        out_fp = stdout;
        if (tty) {
            struct winsize ws;
            bool sized = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0;
            int rows = sized ? ws.ws_row : 24, cols = sized ? ws.ws_col : 80, width = 0;
            /* screen rows, not text lines: a line wider than the terminal wraps (width in
             * UTF-8 characters: continuation bytes do not count) */
            for (size_t k = 0; k < len; k++) {
                if (buf[k] == '\n') {
                    lines += width > cols ? (width + cols - 1) / cols : 1;
                    width = 0;
                } else if (((unsigned char)buf[k] & 0xC0) != 0x80) {
                    width++;
                }
            }
            if (lines >= rows || prev_lines >= rows) fputs("\033[H\033[2J", stdout);
            else if (prev_lines > 0) printf("\033[%dA\033[J", prev_lines);
        } else if (i > 0) {
            fputc('\n', stdout);
        }
        fwrite(buf, 1, len, stdout);
        fflush(stdout);
        free(buf);
        prev_lines = lines;
        if (done) return 0;
        if (count <= 0 || i + 1 < count) usleep((useconds_t)interval_ms * 1000u);
    }
    return until ? 1 : 0;
}

/* ---- changelog ----------------------------------------------------------------------------- */

static void changelog_summary(const ctl_docs_t *log) {
    int64_t moves = 0, aborted = 0, docs = 0, bytes = 0, pause_sum = 0, pause_max = 0, steps[6] = {0};
    for (int i = 0; i < log->n; i++) {
        const bson_t *e = log->v[i];
        if (strcmp(ctl_str(e, "what"), "moveChunk.from") != 0) continue;
        bson_t d;
        if (!ctl_sub(e, "details", &d) || strcmp(ctl_str(&d, "note"), "success") != 0) {
            aborted++;
            continue;
        }
        moves++;
        docs += ctl_int(&d, "clonedDocs", 0);
        bytes += ctl_int(&d, "clonedBytes", 0);
        int64_t p = ctl_int(&d, "writePauseMS", 0);
        pause_sum += p;
        if (p > pause_max) pause_max = p;
        for (int s = 0; s < 6; s++) {
            char key[16];
            snprintf(key, sizeof key, "step %d of 6", s + 1);
            steps[s] += ctl_int(&d, key, 0);
        }
    }
    printf("migrations (config.changelog moveChunk.from): %lld done, %lld not done\n", (long long)moves,
           (long long)aborted);
    if (moves == 0) return;
    printf("  documents moved: %lld (%.1f MB), %.0f per move\n", (long long)docs, (double)bytes / 1e6,
           (double)docs / (double)moves);
    printf("  donor's mean ms per step (moveChunk.from step 1..6):");
    for (int s = 0; s < 6; s++)
        printf("%s %s %.0f", s ? "," : "", ctl_step_words(s + 1), (double)steps[s] / (double)moves);
    printf("\n  write pause (critical section): mean %.1f ms, max %lld ms\n",
           (double)pause_sum / (double)moves, (long long)pause_max);
}

int ctl_changelog(ctl_t *c, int argc, char **argv) {
    const char *ns = NULL, *what = NULL;
    bool summary = false;
    int limit = 0;
    const flag_spec_t specs[] = {
        {"ns", FLAG_STR, &ns, "only entries of this namespace"},
        {"what", FLAG_STR, &what, "only entries of this kind (moveChunk.from, split, ...)"},
        {"summary", FLAG_BOOL, &summary, "what the migrations cost instead of the entries"},
        {"limit", FLAG_INT, &limit, "the newest N entries only"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    ctl_docs_t log = {0};
    bson_t filter, sort;
    ms_error_t err = {0};
    int rc = 0;
    out_fp = stdout;
    flags_parse(argc, argv, specs,
                "usage: shardctl [--host URL] changelog [--ns DB.COLL] [--what KIND] [--limit N] [--summary]\n");
    bson_init(&filter);
    if (ns) BSON_APPEND_UTF8(&filter, "ns", ns);
    if (what) BSON_APPEND_UTF8(&filter, "what", what);
    else if (summary) BSON_APPEND_UTF8(&filter, "what", "moveChunk.from");
    bson_init(&sort);
    BSON_APPEND_INT32(&sort, "time", -1);
    if (ctl_find_all(c, "config", "changelog", &filter, &sort, limit, CTL_BARS_DOCS_MAX, &log, &err)) {
        fprintf(stderr, "shardctl changelog: %s\n", err.msg);
        rc = 1;
        goto out;
    }
    if (summary) {
        changelog_summary(&log);
        goto out;
    }
    for (int i = log.n - 1; i >= 0; i--) {   /* oldest first, as a log reads */
        bson_t d;
        int64_t ms = ctl_date(log.v[i], "time");
        char *json = NULL;
        print_clock(ms);
        printf(".%03d  %-18s %s", (int)(ms % 1000), ctl_str(log.v[i], "what"), ctl_str(log.v[i], "ns"));
        if (ctl_sub(log.v[i], "details", &d)) json = bsonx_to_json(&d);
        printf("  %s\n", json ? json : "{}");
        bson_free(json);
    }
out:
    fflush(stdout);
    bson_destroy(&filter);
    bson_destroy(&sort);
    ctl_docs_free(&log);
    return rc;
}
