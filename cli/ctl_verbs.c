/*
 * ctl_verbs.c — shardctl's friendly verbs: `status` (what sh.status() shows: shards,
 * balancer, the migrations in flight with their progress (the router's currentOp), each
 * database and sharded collection with its key and chunks per shard), `watch` (status
 * redrawn live, so a migration's progress moves on screen) and `load` (generate
 * documents, with progress).
 * Everything goes through the router's commands, so it shows what a client sees.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/ctl.h"
#include "common/bsonx.h"
#include "common/flags.h"
#include "common/limits.h"
#include "common/log.h"

/* Upper bound on documents status reads from one config collection. */
#define CTL_STATUS_DOCS_MAX 200000
/* Chunks listed per collection, as sh.status() (more with --chunks N; all with --verbose). */
#define CTL_STATUS_CHUNKS_LISTED 20
/* currentOp entries status reads: a shard takes part in one migration at a time (two
 * entries per migration), so this is far more than any cluster of MS_SHARDS_MAX shows. */
#define CTL_STATUS_OPS_MAX 256

static void print_version(const bson_t *chunk) {
    bson_iter_t it;
    uint32_t t = 0, i = 0;
    if (bson_iter_init_find(&it, chunk, "lastmod") && BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, &t, &i);
    printf("Timestamp(%u, %u)", t, i);
}

static bool print_chunk(void *arg, const bson_t *chunk) {
    int64_t *left = arg;
    printf("        ");
    ctl_print_json(stdout, chunk, "min", "?");
    printf(" -->> ");
    ctl_print_json(stdout, chunk, "max", "?");
    printf(" on: %s ", ctl_str(chunk, "shard"));
    print_version(chunk);
    printf("%s\n", ctl_bool(chunk, "jumbo") ? " jumbo" : "");
    return *left < 0 || --*left > 0;
}

/* One sharded collection as sh.status() prints it: chunks per shard (an aggregate the
 * config server counts on an index), then the first `listed` chunks in key order (< 0:
 * all of them, read batch by batch) and "too many chunks to print" when there are more.
 * What it reads does not grow with the collection, except with --verbose. */
static void print_collection(ctl_t *c, const bson_t *coll, int64_t listed) {
    const char *ns = ctl_str(coll, "_id");
    ctl_docs_t per_shard = {0};
    bson_t filter, jumbo_filter, sort;
    ms_error_t err = {0};
    bson_iter_t it;
    int64_t total = 0, jumbo = 0;

    printf("      %s\n        shard key: ", ns);
    ctl_print_json(stdout, coll, "key", "?");
    printf("\n        unique: %s\n        balancing: %s\n", ctl_bool(coll, "unique") ? "true" : "false",
           ctl_bool(coll, "noBalance") ? "false" : "true");
    ctl_print_compliance(c, ns);
    bson_init(&filter);
    if (bson_iter_init_find(&it, coll, "uuid")) bsonx_append_iter(&filter, "uuid", &it);
    else BSON_APPEND_UTF8(&filter, "ns", ns);
    bson_copy_to(&filter, &jumbo_filter);
    BSON_APPEND_BOOL(&jumbo_filter, "jumbo", true);
    bson_init(&sort);
    BSON_APPEND_INT32(&sort, "min", 1);
    if (ctl_chunks_per_shard(c, &filter, &per_shard, &err) ||
        ctl_count(c, "config", "chunks", &jumbo_filter, &jumbo, &err)) {
        printf("        chunks: (could not read: %s)\n", err.msg);
        goto out;
    }
    for (int i = 0; i < per_shard.n; i++) total += ctl_int(per_shard.v[i], "n", 0);
    printf("        chunks: %lld total\n", (long long)total);
    for (int i = 0; i < per_shard.n; i++)
        printf("          %-16s %lld\n", ctl_str(per_shard.v[i], "_id"),
               (long long)ctl_int(per_shard.v[i], "n", 0));
    if (jumbo) printf("          jumbo chunks: %lld\n", (long long)jumbo);
    int64_t left = listed;
    if (listed != 0 && ctl_find_each(c, "config", "chunks", &filter, &sort, listed > 0 ? listed : 0,
                                     print_chunk, &left, &err))
        printf("        (could not list the chunks: %s)\n", err.msg);
    if (listed >= 0 && total > listed)
        printf("        too many chunks to print, use --verbose if you want to force print\n");
out:
    bson_destroy(&filter);
    bson_destroy(&jumbo_filter);
    bson_destroy(&sort);
    ctl_docs_free(&per_shard);
}

/* One migration on one line. The donor's entry knows the whole story (documents to clone,
 * mods pending, estimate); `peer` is the other side's entry when the router has it. */
static void print_migration(const bson_t *op, const bson_t *peer) {
    bool donor = strcmp(ctl_str(op, "role"), "donor") == 0;
    int64_t total = ctl_int(op, "docsToClone", -1), left_ms = ctl_int(op, "estimatedMSLeft", -1);
    printf("    %s ", ctl_str(op, "ns"));
    ctl_print_json(stdout, op, "min", "?");
    printf(" -->> ");
    ctl_print_json(stdout, op, "max", "?");
    if (donor) printf("  %s -> %s", ctl_str(op, "from"), ctl_str(op, "to"));
    else printf("  %s -> %s", ctl_str(op, "fromShardId"), ctl_str(op, "to"));
    printf("  ");
    ctl_print_migration_phase(stdout, op, peer);
    printf("  docs: %lld", (long long)ctl_int(op, "docsCloned", 0));
    if (total >= 0) printf(" / %lld", (long long)total);
    printf("  %.1f MB", (double)ctl_int(op, "bytesCloned", 0) / (1024.0 * 1024.0));
    if (donor) printf("  mods pending: %lld", (long long)ctl_int(op, "modsPending", 0));
    else printf("  mods applied: %lld", (long long)ctl_int(op, "modsApplied", 0));
    printf("  %.0f docs/s  elapsed: %.1f s", ctl_num(op, "docsPerSec"),
           (double)ctl_int(op, "elapsedMS", 0) / 1000.0);
    if (left_ms >= 0) printf("  left: ~%.1f s\n", (double)left_ms / 1000.0);
    else printf("  left: ?\n");
}

/* "migrations in flight", from the router's currentOp (every shard's): one line per
 * migration, the donor's view with the recipient's state beside it. */
static void print_migrations(ctl_t *c) {
    bson_t cmd, reply;
    bson_iter_t it, arr;
    ms_error_t err = {0};
    ctl_docs_t ops = {0};
    int shown = 0;
    printf("  migrations in flight:\n");
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "currentOp", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (ctl_command(c, &cmd, &reply, &err) != 0) {
        printf("    (currentOp: %s)\n", err.msg);
        bson_destroy(&cmd);
        return;
    }
    bson_destroy(&cmd);
    ctl_docs_add_array(&ops, &reply, NULL, "inprog", CTL_STATUS_OPS_MAX);
    for (int i = 0; i < ops.n; i++) {
        const bson_t *peer;
        if (!ctl_migration_shown(&ops, i, &peer)) continue;
        print_migration(ops.v[i], peer);
        shown++;
    }
    if (shown == 0) printf("    (none)\n");
    if (bson_iter_init_find(&it, &reply, "shardErrors") && bson_iter_recurse(&it, &arr))
        while (bson_iter_next(&arr)) {
            bson_t e;
            if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bsonx_view_container(&arr, &e)) continue;
            printf("    (shard %s did not answer: %s)\n", ctl_str(&e, "shard"), ctl_str(&e, "errmsg"));
        }
    bson_destroy(&reply);
    ctl_docs_free(&ops);
}

static int status_once(ctl_t *c, int64_t listed) {
    ctl_docs_t shards = {0}, dbs = {0}, colls = {0};
    bson_t cmd, reply, sort;
    ms_error_t err = {0};
    int rc = 1;

    printf("--- Sharding Status ---\n  shards:\n");
    bson_init(&sort);
    BSON_APPEND_INT32(&sort, "_id", 1);
    if (ctl_find_all(c, "config", "shards", NULL, &sort, 0, CTL_STATUS_DOCS_MAX, &shards, &err)) {
        printf("    (could not read config.shards: %s)\n", err.msg);
        goto out;
    }
    for (int i = 0; i < shards.n; i++)
        printf("    { _id: '%s', host: '%s', state: 1%s }\n", ctl_str(shards.v[i], "_id"),
               ctl_str(shards.v[i], "host"), ctl_bool(shards.v[i], "draining") ? ", draining: true" : "");
    if (shards.n == 0) printf("    (none)\n");

    printf("  balancer:\n");
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "balancerStatus", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (ctl_command(c, &cmd, &reply, &err) == 0) {
        bson_iter_t it;
        printf("    mode: %s\n", ctl_str(&reply, "mode"));
        printf("    in balancer round: %s\n", ctl_bool(&reply, "inBalancerRound") ? "yes" : "no");
        if (bson_iter_init_find(&it, &reply, "numBalancerRounds")) {
            int64_t n = 0;
            bsonx_as_int64(&it, &n);
            printf("    balancer rounds: %lld\n", (long long)n);
        }
        bson_destroy(&reply);
    } else {
        printf("    (balancerStatus: %s)\n", err.msg);
    }
    bson_destroy(&cmd);
    print_migrations(c);

    printf("  databases:\n");
    if (ctl_find_all(c, "config", "databases", NULL, &sort, 0, CTL_STATUS_DOCS_MAX, &dbs, &err) ||
        ctl_find_all(c, "config", "collections", NULL, &sort, 0, CTL_STATUS_DOCS_MAX, &colls, &err)) {
        printf("    (could not read the catalog: %s)\n", err.msg);
        goto out;
    }
    for (int i = 0; i < dbs.n; i++) {
        const char *db = ctl_str(dbs.v[i], "_id");
        size_t dblen = strlen(db);
        printf("    { _id: '%s', primary: '%s' }\n", db, ctl_str(dbs.v[i], "primary"));
        for (int k = 0; k < colls.n; k++) {
            const char *ns = ctl_str(colls.v[k], "_id");
            if (strncmp(ns, db, dblen) == 0 && ns[dblen] == '.' && !ctl_bool(colls.v[k], "dropped"))
                print_collection(c, colls.v[k], listed);
        }
    }
    if (dbs.n == 0) printf("    (none)\n");
    rc = 0;
out:
    fflush(stdout);
    bson_destroy(&sort);
    ctl_docs_free(&shards);
    ctl_docs_free(&dbs);
    ctl_docs_free(&colls);
    return rc;
}

/* The chunks listed per collection: --chunks N, every one with --verbose (-1). */
static int64_t chunks_listed(bool verbose, int chunks) {
    if (verbose) return -1;
    return chunks >= 0 ? chunks : CTL_STATUS_CHUNKS_LISTED;
}

int ctl_status(ctl_t *c, int argc, char **argv) {
    bool verbose = false;
    int chunks = CTL_STATUS_CHUNKS_LISTED;
    const flag_spec_t specs[] = {
        {"verbose", FLAG_BOOL, &verbose, "list every chunk even when there are many"},
        {"chunks", FLAG_INT, &chunks, "chunks listed per collection (default 20)"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    flags_parse(argc, argv, specs, "usage: shardctl [--host URL] status [--verbose] [--chunks N]\n");
    return status_once(c, chunks_listed(verbose, chunks));
}

int ctl_watch(ctl_t *c, int argc, char **argv) {
    int interval_ms = 1000, count = 0;
    bool verbose = false;
    for (int i = 1; i < argc; i++)   /* the balancing view: its own flags (ctl_bars.c) */
        if (strcmp(argv[i], "--bars") == 0) return ctl_watch_bars(c, argc, argv);
    const flag_spec_t specs[] = {
        {"interval-ms", FLAG_INT, &interval_ms, "redraw period (default 1000)"},
        {"count", FLAG_INT, &count, "stop after this many redraws (default: until Ctrl-C)"},
        {"verbose", FLAG_BOOL, &verbose, "list every chunk"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    flags_parse(argc, argv, specs,
                "usage: shardctl [--host URL] watch [--interval-ms N] [--count N]\n"
                "       shardctl [--host URL] watch --bars ... (shardctl watch --bars --help)\n");
    if (interval_ms < 50) interval_ms = 50;
    for (int i = 0; count <= 0 || i < count; i++) {
        time_t now = time(NULL);
        char when[64];
        strftime(when, sizeof when, "%H:%M:%S", localtime(&now));
        if (isatty(STDOUT_FILENO)) fputs("\033[H\033[2J", stdout);
        printf("shardctl watch — %s — every %d ms (Ctrl-C to stop)\n", when, interval_ms);
        status_once(c, chunks_listed(verbose, CTL_STATUS_CHUNKS_LISTED));
        usleep((useconds_t)interval_ms * 1000u);
    }
    return 0;
}

/* The load's random numbers: SplitMix64 (Steele, Lea and Flood), a full-period 64-bit
 * generator that passes BigCrush, started from a fixed seed so that a load is reproducible. */
static uint64_t load_next(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A uniform integer in [0, n): the high word of the 128-bit product of a 64-bit draw and n
 * (Lemire's multiply-shift). Its bias is below n / 2^64 (5e-12 for n = 1e8), where a modulo
 * of a 28-bit draw put 43 % of the keys above the middle instead of half. */
static int64_t load_below(uint64_t *state, uint64_t n) {
    return (int64_t)(((unsigned __int128)load_next(state) * n) >> 64);
}

int ctl_load(ctl_t *c, int argc, char **argv) {
    const char *ns = NULL, *key = NULL;
    int count = 0, batch = 1000, size = 200, start = 0;
    bool quiet = false;
    const flag_spec_t specs[] = {
        {"ns", FLAG_STR, &ns, "namespace db.collection (required)"},
        {"count", FLAG_INT, &count, "documents to insert (required)"},
        {"batch", FLAG_INT, &batch, "documents per insert command (default 1000)"},
        {"size", FLAG_INT, &size, "approximate document size in bytes (default 200)"},
        {"start", FLAG_INT, &start, "first _id (default 0)"},
        {"key", FLAG_STR, &key, "also set this field to a random integer in [0, 100000000) (a shard key)"},
        {"quiet", FLAG_BOOL, &quiet, "no progress display"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    char db[MS_NS_BYTES_MAX + 1];
    const char *dot;
    char *pad;
    long long t0 = time_mono_ms();
    int done = 0;
    uint64_t rnd = 12345;

    flags_parse(argc, argv, specs,
                "usage: shardctl [--host URL] load --ns DB.COLL --count N [--batch N] [--size B]\n");
    if (!ns || !(dot = strchr(ns, '.')) || dot == ns || !dot[1] || strlen(ns) > MS_NS_BYTES_MAX || count <= 0 ||
        batch <= 0 || batch > MS_WRITE_BATCH_OPS_MAX || size < 0 || size > 1024 * 1024) {
        fprintf(stderr, "shardctl load: need --ns DB.COLL and --count N > 0 (batch 1..%d, size 0..1 MiB)\n",
                MS_WRITE_BATCH_OPS_MAX);
        return 2;
    }
    memcpy(db, ns, (size_t)(dot - ns));
    db[dot - ns] = '\0';
    pad = malloc((size_t)size + 1);
    if (!pad) return 1;
    memset(pad, 'x', (size_t)size);
    pad[size > 60 ? size - 60 : 0] = '\0';  /* the other fields take about 60 bytes */

    while (done < count) {
        int n = count - done < batch ? count - done : batch;
        bson_t cmd, docs, reply;
        ms_error_t err = {0};
        char idx[16];
        int rc;
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "insert", dot + 1);
        BSON_APPEND_UTF8(&cmd, "$db", db);
        BSON_APPEND_ARRAY_BEGIN(&cmd, "documents", &docs);
        for (int i = 0; i < n; i++) {
            bson_t d;
            const char *k;
            bson_uint32_to_string((uint32_t)i, &k, idx, sizeof idx);
            BSON_APPEND_DOCUMENT_BEGIN(&docs, k, &d);
            BSON_APPEND_INT64(&d, "_id", (int64_t)start + done + i);
            BSON_APPEND_INT64(&d, "x", load_below(&rnd, 1000000));
            if (key) BSON_APPEND_INT64(&d, key, load_below(&rnd, 100000000));
            BSON_APPEND_UTF8(&d, "pad", pad);
            bson_append_document_end(&docs, &d);
        }
        bson_append_array_end(&cmd, &docs);
        BSON_APPEND_BOOL(&cmd, "ordered", false);
        rc = ctl_command(c, &cmd, &reply, &err);
        bson_destroy(&cmd);
        if (rc == 0) {
            bson_iter_t it;
            if (bson_iter_init_find(&it, &reply, "writeErrors")) {
                char *json = bsonx_to_json(&reply);
                fprintf(stderr, "\nshardctl load: write errors: %.500s\n", json ? json : "?");
                bson_free(json);
                rc = 1;
            }
            bson_destroy(&reply);
        } else {
            fprintf(stderr, "\nshardctl load: insert failed: %s\n", err.msg);
        }
        if (rc) {
            free(pad);
            return 1;
        }
        done += n;
        if (!quiet) {
            long long ms = time_mono_ms() - t0;
            fprintf(stderr, "\rloading %s: %d / %d (%3d%%)  %.0f docs/s   ", ns, done, count,
                    (int)(100LL * done / count), ms > 0 ? done * 1000.0 / (double)ms : 0.0);
        }
    }
    free(pad);
    {
        long long ms = time_mono_ms() - t0;
        if (!quiet) fputc('\n', stderr);
        printf("loaded %d documents into %s in %.1f s (%.0f docs/s)\n", count, ns, (double)ms / 1000.0,
               ms > 0 ? count * 1000.0 / (double)ms : 0.0);
    }
    return 0;
}
