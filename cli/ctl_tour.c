/*
 * ctl_tour.c — `shardctl tour`: a guided tour of one chunk migration, step by step, on a
 * cluster started with --enable-test-commands (scripts/cluster.sh start --test, make tour).
 *
 * The donor's failpoints moveChunkHangAtStep1..6 (shardd/mig_donor.c) hold the migration
 * at the end of each of MongoDB's six timed steps. The tour turns them on (on the donor
 * only), starts a moveChunk in the background (its own thread and connection), and for
 * each step: says what it is (MongoDB's name), why it exists and what to watch; releases
 * the previous hold and waits (waitForFailPoint) until the donor is held at the end of
 * this step; then shows what is persisted now — the donor's coordinator document, both
 * shards' range-deletion tasks, the chunk on the config server, each shard's filtering
 * metadata — sends a read and a write through the router, and prints the step's new
 * changelog entries. Control flow never depends on the donor's phase strings, only on
 * the failpoints' counts. Ctrl-C or any error turns every failpoint off (the cluster is
 * never left held) and says how to check and recover.
 *
 * `shardctl tour balancer` (ctl_tour_bal.c) does the same for one balancer round.
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
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

#define TOUR_STEPS 6
/* The probe write's maxTimeMS: far below the shard's critical-section wait
 * (MS_CRITSEC_WAIT_MS), so a write held by the critical section answers MaxTimeMSExpired
 * instead of keeping the tour waiting. */
#define TOUR_PROBE_MAXTIME_MS 500
/* Documents of a config collection the tour lists (coordinators, range deletions, changelog). */
#define TOUR_DOCS_MAX 64
/* How long the tour waits for the donor to reach the end of one step (the clone of a large
 * chunk is the long one) and for the moveChunk to answer after the last release. */
#define TOUR_STEP_WAIT_MS (10 * 60 * 1000)

static const char usage_text[] =
    "usage: shardctl [--host ROUTER] tour [--ns DB.COLL] [--auto] [--pause-ms N]\n"
    "       shardctl [--host ROUTER] tour balancer [--ns DB.COLL] [--auto] [--pause-ms N]\n"
    "Walks one chunk migration (or one balancer round) step by step on a cluster started\n"
    "with --enable-test-commands (scripts/cluster.sh start --test, or make tour).\n";

/* What the tour says before each step: NAMES.md's words, MongoDB's name, why, what to watch. */
typedef struct tour_step_text {
    const char *words, *phase, *mongo, *why, *watch;
} tour_step_text_t;

static const tour_step_text_t step_texts[TOUR_STEPS] = {
    {"checks", "checks",
     "MigrationSourceManager's constructor, on the donor: _shardsvrMoveRange arrived from the\n"
     "config server (_configsvrMoveRange); the donor refreshes its filtering metadata and checks\n"
     "the range lies in one chunk it owns, of the generation (epoch) the config server saw.",
     "a donor working from stale routing information (a split or a move it has not seen) would\n"
     "copy the wrong documents, or none, and the commit would hand over a range it never had.",
     "nothing is persisted yet: no coordinator document, no range-deletion task; reads and\n"
     "writes run as usual."},
    {"start clone", "startClone",
     "MigrationSourceManager::startClone: moveChunk.start in the changelog; the MigrationCoordinator's\n"
     "document (config.migrationCoordinators) and a pending range-deletion task\n"
     "(config.rangeDeletions) persisted in one transaction; the write capture on; then\n"
     "_recvChunkStart to the recipient, whose migrate thread persists its own pending task first.",
     "the coordinator document is the migration's memory: if the donor dies from here on, its\n"
     "recovery reads it, asks the config server who owns the chunk and finishes either way.\n"
     "Without it, documents half-copied to the recipient would be orphans nobody deletes.",
     "the coordinator document appears on the donor; a pending task on each shard (the range\n"
     "each would clean if the move fails; the recipient's thread writes its own as its first act,\n"
     "so it can appear a moment after this hold); writes still succeed, and are captured."},
    {"clone", "clone",
     "cloning: the recipient's MigrationDestinationManager pulls the documents with _migrateClone,\n"
     "then the writes made meanwhile with _transferMods (recipient: clone, catchup, steady);\n"
     "the donor polls _recvChunkStatus until what is left fits the write-pause budget.",
     "copying while writes go on keeps the write pause short: only the changes made during the\n"
     "copy are left for the critical section. Stopping writes for the whole copy would block\n"
     "the application for as long as the copy takes.",
     "the config server still gives the chunk to the donor; both shards' filtering metadata\n"
     "are unchanged; writes still succeed."},
    {"critical section", "criticalSection",
     "MigrationSourceManager::enterCriticalSection: the write pause begins; writes to the\n"
     "collection wait on the donor from here to the commit.",
     "the last changes must be copied while no new ones arrive: a write the donor acknowledged\n"
     "after the final copy would be lost when the chunk changes owner.",
     "the write through the router waits: the tour sends it with a short maxTimeMS, so it\n"
     "answers MaxTimeMSExpired without being applied; reads still run on the donor."},
    {"commit on recipient", "commitOnRecipient",
     "_recvChunkCommit: the recipient drains the last _transferMods and reports done; minishard\n"
     "then makes the recipient's indexes equal to the donor's and compares count and checksum\n"
     "of the range on both sides.",
     "the config server must not name the recipient as the owner before the recipient holds\n"
     "every document of the range, the last writes included.",
     "still inside the critical section: writes wait; nothing has changed on the config server."},
    {"commit on config server", "commitOnConfig",
     "MigrationSourceManager::commitChunkMetadataOnConfig: reads wait too;\n"
     "_configsvrCommitChunkMigration gives the chunk to the recipient with a new major version;\n"
     "the donor persists the decision, refreshes its filtering metadata and leaves the critical\n"
     "section: the write pause ends.",
     "the commit is the one transaction where the move becomes true. Before it the migration can\n"
     "still abort cleanly; after it, it can only complete. Two places deciding would let both\n"
     "shards, or neither, own the range.",
     "config.chunks names the recipient, with a higher version; the coordinator document says\n"
     "decision: committed; the donor's filtering metadata no longer owns the range; the write\n"
     "succeeds again (StaleConfig at the donor, the router retries at the recipient)."},
};

/* Set by SIGINT / SIGTERM; every wait of the tour checks it. */
static volatile sig_atomic_t tour_stop_flag;

static void tour_on_signal(int sig) {
    (void)sig;
    tour_stop_flag = 1;
}

bool tour_interrupted(void) {
    return tour_stop_flag != 0;
}

void tour_catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tour_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

void tour_sleep_ms(int ms) {
    long long until = time_mono_ms() + ms;
    while (!tour_interrupted() && time_mono_ms() < until)
        nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
}

/* Reads stdin up to a newline, a byte at a time (what follows stays for the next pause)
 * and polling, so that Ctrl-C ends the wait whichever thread the signal reached. */
static void wait_enter(void) {
    char ch;
    while (!tour_interrupted()) {
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0) continue;
        if (read(STDIN_FILENO, &ch, 1) != 1 || ch == '\n') return;   /* EOF goes on too */
    }
}

void tour_pause(bool automatic, int pause_ms) {
    if (tour_interrupted()) return;
    if (automatic) {
        tour_sleep_ms(pause_ms);
        return;
    }
    printf("\n[Enter: go on   Ctrl-C: stop the tour, the cluster is released] ");
    fflush(stdout);
    wait_enter();
    printf("\n");
}

int tour_open(const char *url, ctl_t *out, ms_error_t *err) {
    memset(out, 0, sizeof *out);
    out->host = url;
    out->timeout_ms = MS_RPC_TIMEOUT_MS_DEFAULT;
    return rpc_client_open(url, &out->client, err);
}

void tour_close(ctl_t *c) {
    rpc_client_close(c->client);
    c->client = NULL;
}

int tour_fp(ctl_t *c, const char *name, bool on, int64_t *count, ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, reply;
    int rc;
    BSON_APPEND_UTF8(&cmd, "configureFailPoint", name);
    BSON_APPEND_UTF8(&cmd, "mode", on ? "alwaysOn" : "off");
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    rc = ctl_command(c, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc) return rc;
    if (count) *count = ctl_int(&reply, "count", 0);
    bson_destroy(&reply);
    return 0;
}

int tour_fp_wait(ctl_t *c, const char *name, int64_t times, int max_ms, ms_error_t *err) {
    bson_t cmd = BSON_INITIALIZER, reply;
    int rc;
    BSON_APPEND_UTF8(&cmd, "waitForFailPoint", name);
    BSON_APPEND_INT64(&cmd, "timesEntered", times);
    BSON_APPEND_INT32(&cmd, "maxTimeMS", max_ms);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    rc = ctl_command(c, &cmd, &reply, err);
    bson_destroy(&cmd);
    if (rc == 0) bson_destroy(&reply);
    return rc;
}

void tour_say_no_test_commands(const char *who, const ms_error_t *err) {
    printf("\nThe tour needs failpoints, which %s serves only when started with\n"
           "--enable-test-commands (it answered: %s, code %d). Start a cluster that has them:\n"
           "  scripts/cluster.sh start --dir DIR --test        (or: make tour)\n"
           "then: shardctl --host <its router> tour\n",
           who, err->msg, err->code);
}

void tour_print_doc(const char *indent, const bson_t *d) {
    char *json = bsonx_to_json(d);
    printf("%s%s\n", indent, json ? json : "?");
    bson_free(json);
}

/* ---- the migration tour ------------------------------------------------------------------ */

/* The moveChunk running in the background: its own connection, its answer. The fields
 * below mu are written by the mover thread and read by the tour under mu. On the heap and
 * shared: a tour that stops early (Ctrl-C, an error) returns while the thread may still
 * wait for its answer, so whichever of the two lets go last frees it. */
typedef struct tour_mover {
    ctl_t c;                /* the mover thread's own connection to the router */
    bson_t cmd;             /* the moveChunk; owned, read-only once the thread runs */
    pthread_mutex_t mu;
    int refs;               /* the tour and the thread */
    bool done;
    int rc;
    ms_error_t err;
} tour_mover_t;

typedef struct tour {
    ctl_t *router;
    ctl_t donor, recipient;            /* direct connections to the two shards */
    char ns[MS_NS_BYTES_MAX + 1], db[MS_NS_BYTES_MAX + 1];
    char donor_name[64], recipient_name[64];
    char donor_url[MS_URL_BYTES_MAX], recipient_url[MS_URL_BYTES_MAX];   /* donor.host, recipient.host */
    bson_t coll;                       /* the collection's config.collections document */
    bson_t chunk;                      /* the chunk moved, as config.chunks had it at the start */
    bson_t probe;                      /* filter of one document of the chunk ({} = none found) */
    bool has_probe;
    bool automatic;
    int pause_ms;
    int64_t fp_base[TOUR_STEPS];       /* each step's count before the tour's migration */
    bool fps_on;
    bool balancer_stopped;             /* the tour stopped it; restarted at the end */
    int64_t since_ms;                  /* changelog entries from here on are the tour's */
    int changelog_shown;
    int writes_ok;                     /* probe writes that answered ok (each $inc tourWrites) */
    tour_mover_t *mover;               /* NULL until the moveChunk started */
} tour_t;

static void step_fp_name(int step, char *out, size_t n) {
    snprintf(out, n, "moveChunkHangAtStep%d", step);
}

/* The collection the tour moves a chunk of: --ns, else the first sharded user collection. */
static int pick_collection(tour_t *t, const char *ns, ms_error_t *err) {
    ctl_docs_t colls = {0};
    bson_t sort = BSON_INITIALIZER;
    int rc;
    BSON_APPEND_INT32(&sort, "_id", 1);
    rc = ctl_find_all(t->router, "config", "collections", NULL, &sort, 0, 10000, &colls, err);
    bson_destroy(&sort);
    if (rc) return rc;
    rc = err_set(err, MS_ERR_NAMESPACE_NOT_SHARDED, "%s", ns ? ns : "no sharded collection");
    for (int i = 0; i < colls.n; i++) {
        const char *id = ctl_str(colls.v[i], "_id");
        if (ctl_bool(colls.v[i], "dropped") || strncmp(id, "config.", 7) == 0) continue;
        if (ns && strcmp(id, ns) != 0) continue;
        snprintf(t->ns, sizeof t->ns, "%s", id);
        bson_reinit(&t->coll);
        bson_concat(&t->coll, colls.v[i]);
        rc = 0;
        break;
    }
    ctl_docs_free(&colls);
    if (rc == 0) {
        const char *dot = strchr(t->ns, '.');
        snprintf(t->db, sizeof t->db, "%.*s", (int)(dot ? dot - t->ns : 0), t->ns);
    }
    return rc;
}

/* The config.shards document of shard `name` → its URL copied to url (n bytes, kept by
 * the caller for as long as *c) and opened in *c. */
static int open_shard(const ctl_docs_t *shards, const char *name, char *url, size_t n, ctl_t *c, ms_error_t *err) {
    for (int i = 0; i < shards->n; i++)
        if (strcmp(ctl_str(shards->v[i], "_id"), name) == 0) {
            snprintf(url, n, "%s", ctl_str(shards->v[i], "host"));
            return tour_open(url, c, err);
        }
    return err_set(err, MS_ERR_SHARD_NOT_FOUND, "shard %s is not in config.shards", name);
}

/* The chunk to move: the first (in key order) of the shard owning the most chunks; the
 * recipient: the shard owning the fewest, so the tour's move is one the balancer might make. */
static int pick_chunk(tour_t *t, ms_error_t *err) {
    ctl_docs_t chunks = {0}, shards = {0};
    bson_t filter = BSON_INITIALIZER, sort = BSON_INITIALIZER;
    bson_iter_t it;
    int most = -1, fewest = -1, rc;
    int counts[MS_SHARDS_MAX] = {0};
    if (bson_iter_init_find(&it, &t->coll, "uuid")) bsonx_append_iter(&filter, "uuid", &it);
    BSON_APPEND_INT32(&sort, "min", 1);
    rc = ctl_find_all(t->router, "config", "chunks", &filter, &sort, 0, 100000, &chunks, err);
    if (rc == 0) rc = ctl_find_all(t->router, "config", "shards", NULL, NULL, 0, MS_SHARDS_MAX, &shards, err);
    if (rc) goto out;
    if (shards.n < 2) {
        rc = err_set(err, MS_ERR_ILLEGAL_OPERATION, "a migration needs two shards; the cluster has %d", shards.n);
        goto out;
    }
    for (int i = 0; i < chunks.n; i++)
        for (int k = 0; k < shards.n; k++)
            if (strcmp(ctl_str(chunks.v[i], "shard"), ctl_str(shards.v[k], "_id")) == 0) counts[k]++;
    for (int k = 0; k < shards.n; k++) {
        if (most < 0 || counts[k] > counts[most]) most = k;
        if (fewest < 0 || counts[k] < counts[fewest] || (counts[k] == counts[fewest] && fewest == most)) fewest = k;
    }
    if (fewest == most) fewest = most == 0 ? 1 : 0;
    snprintf(t->donor_name, sizeof t->donor_name, "%s", ctl_str(shards.v[most], "_id"));
    snprintf(t->recipient_name, sizeof t->recipient_name, "%s", ctl_str(shards.v[fewest], "_id"));
    rc = err_set(err, MS_ERR_NAMESPACE_NOT_SHARDED, "%s has no chunk", t->ns);
    for (int i = 0; i < chunks.n; i++)
        if (strcmp(ctl_str(chunks.v[i], "shard"), t->donor_name) == 0) {
            bson_reinit(&t->chunk);
            bson_concat(&t->chunk, chunks.v[i]);
            rc = 0;
            break;
        }
    if (rc == 0) rc = open_shard(&shards, t->donor_name, t->donor_url, sizeof t->donor_url, &t->donor, err);
    if (rc == 0)
        rc = open_shard(&shards, t->recipient_name, t->recipient_url, sizeof t->recipient_url, &t->recipient, err);
out:
    bson_destroy(&filter);
    bson_destroy(&sort);
    ctl_docs_free(&chunks);
    ctl_docs_free(&shards);
    return rc;
}

/* Appends bound b.field to f as `op: value` unless it is MinKey / MaxKey (no bound then). */
static void append_bound(bson_t *f, const char *op, const bson_t *b, const char *field) {
    bson_iter_t it;
    if (!bson_iter_init_find(&it, b, field)) return;
    if (BSON_ITER_HOLDS_MINKEY(&it) || BSON_ITER_HOLDS_MAXKEY(&it)) return;
    bsonx_append_iter(f, op, &it);
}

/* One document of the chunk, found through the router, to read and write at each step.
 * Needs a single-field ranged shard key (a hashed or compound key's chunk bounds are not
 * a simple query); else the tour shows the persisted state without the probes. */
static void pick_probe(tour_t *t) {
    bson_t key, min, max, filter = BSON_INITIALIZER, range;
    bson_iter_t it;
    ctl_docs_t docs = {0};
    ms_error_t err = {0};
    const char *field;
    bson_init(&t->probe);
    if (!ctl_sub(&t->coll, "key", &key) || bson_count_keys(&key) != 1 || !bson_iter_init(&it, &key) ||
        !bson_iter_next(&it) || !bsonx_is_number(&it) || !ctl_sub(&t->chunk, "min", &min) ||
        !ctl_sub(&t->chunk, "max", &max))
        goto out;
    field = bson_iter_key(&it);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, field, &range);
    append_bound(&range, "$gte", &min, field);
    append_bound(&range, "$lt", &max, field);
    bson_append_document_end(&filter, &range);
    if (ctl_find_all(t->router, t->db, strchr(t->ns, '.') + 1, &filter, NULL, 1, 1, &docs, &err) || docs.n < 1)
        goto out;
    if (bson_iter_init_find(&it, docs.v[0], "_id")) bsonx_append_iter(&t->probe, "_id", &it);
    if (strcmp(field, "_id") != 0 && bson_iter_init_find(&it, docs.v[0], field)) bsonx_append_iter(&t->probe, field, &it);
    t->has_probe = true;
out:
    bson_destroy(&filter);
    ctl_docs_free(&docs);
}

/* The balancer would move chunks of its own during the tour: stopped, restarted at the end. */
static void balancer_hold(tour_t *t) {
    bson_t cmd = BSON_INITIALIZER, reply;
    ms_error_t err = {0};
    BSON_APPEND_INT32(&cmd, "balancerStatus", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (ctl_command(t->router, &cmd, &reply, &err) == 0) {
        bool on = strcmp(ctl_str(&reply, "mode"), "off") != 0;
        bson_destroy(&reply);
        if (on) {
            bson_t stop = BSON_INITIALIZER;
            BSON_APPEND_INT32(&stop, "balancerStop", 1);
            BSON_APPEND_UTF8(&stop, "$db", "admin");
            if (ctl_command(t->router, &stop, &reply, &err) == 0) {
                bson_destroy(&reply);
                t->balancer_stopped = true;
                printf("The balancer was on: stopped for the tour (balancerStop), restarted at the end.\n");
            }
            bson_destroy(&stop);
        }
    }
    bson_destroy(&cmd);
}

void tour_balancer_start(ctl_t *router) {
    bson_t cmd = BSON_INITIALIZER, reply;
    ms_error_t err = {0};
    BSON_APPEND_INT32(&cmd, "balancerStart", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (ctl_command(router, &cmd, &reply, &err) == 0) bson_destroy(&reply);
    else printf("balancerStart failed: %s — run: shardctl '{\"balancerStart\": 1}'\n", err.msg);
    bson_destroy(&cmd);
}

/* Turns the six holds on, on the donor; a process without test commands ends the tour. */
static int failpoints_on(tour_t *t, ms_error_t *err) {
    char name[64];
    for (int s = 1; s <= TOUR_STEPS; s++) {
        step_fp_name(s, name, sizeof name);
        int rc = tour_fp(&t->donor, name, true, &t->fp_base[s - 1], err);
        if (rc) return rc;
        t->fps_on = true;
    }
    return 0;
}

/* Every hold off: the one path out of the tour, after an error, Ctrl-C or the end. */
static void failpoints_off(tour_t *t) {
    char name[64];
    int failed = 0;
    if (!t->fps_on) return;
    for (int s = 1; s <= TOUR_STEPS; s++) {
        ms_error_t err = {0};
        step_fp_name(s, name, sizeof name);
        if (tour_fp(&t->donor, name, false, NULL, &err) != 0) {
            printf("could not turn %s off on %s: %s\n", name, t->donor_name, err.msg);
            failed++;
        }
    }
    t->fps_on = failed > 0;
    if (failed)
        printf("To release the donor by hand, for N = 1..6:\n"
               "  shardctl --host %s '{\"configureFailPoint\": \"moveChunkHangAtStepN\", \"mode\": \"off\"}'\n",
               t->donor.host);
}

static void mover_release(tour_mover_t *m) {
    pthread_mutex_lock(&m->mu);
    bool last = --m->refs == 0;
    pthread_mutex_unlock(&m->mu);
    if (!last) return;
    pthread_mutex_destroy(&m->mu);
    bson_destroy(&m->cmd);
    tour_close(&m->c);
    free(m);
}

static void *mover_main(void *arg) {
    tour_mover_t *m = arg;
    bson_t reply;
    ms_error_t err = {0};
    int rc = ctl_command(&m->c, &m->cmd, &reply, &err);
    if (rc == 0) bson_destroy(&reply);
    pthread_mutex_lock(&m->mu);
    m->done = true;
    m->rc = rc;
    m->err = err;
    pthread_mutex_unlock(&m->mu);
    mover_release(m);
    return NULL;
}

/* moveChunk of exactly the chunk's bounds to the recipient, on its own connection. */
static int mover_start(tour_t *t, ms_error_t *err) {
    tour_mover_t *m = calloc(1, sizeof *m);
    bson_t min, max, bounds;
    pthread_t th;
    if (!m) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    int rc = tour_open(t->router->host, &m->c, err);
    if (rc) {
        free(m);
        return rc;
    }
    ctl_sub(&t->chunk, "min", &min);
    ctl_sub(&t->chunk, "max", &max);
    bson_init(&m->cmd);
    BSON_APPEND_UTF8(&m->cmd, "moveChunk", t->ns);
    BSON_APPEND_ARRAY_BEGIN(&m->cmd, "bounds", &bounds);
    BSON_APPEND_DOCUMENT(&bounds, "0", &min);
    BSON_APPEND_DOCUMENT(&bounds, "1", &max);
    bson_append_array_end(&m->cmd, &bounds);
    BSON_APPEND_UTF8(&m->cmd, "to", t->recipient_name);
    BSON_APPEND_UTF8(&m->cmd, "$db", "admin");
    pthread_mutex_init(&m->mu, NULL);
    m->refs = 2;
    if (pthread_create(&th, NULL, mover_main, m) != 0) {
        pthread_mutex_destroy(&m->mu);
        bson_destroy(&m->cmd);
        tour_close(&m->c);
        free(m);
        return err_set(err, MS_ERR_INTERNAL, "could not start the moveChunk thread");
    }
    pthread_detach(th);   /* on Ctrl-C the tour does not wait for the whole migration */
    t->mover = m;
    return 0;
}

/* Whether the moveChunk answered; *rc / *err its answer then. */
static bool mover_done(tour_t *t, int *rc, ms_error_t *err) {
    tour_mover_t *m = t->mover;
    bool done;
    if (!m) return false;
    pthread_mutex_lock(&m->mu);
    done = m->done;
    if (done) {
        *rc = m->rc;
        *err = m->err;
    }
    pthread_mutex_unlock(&m->mu);
    return done;
}

/* Waits until the donor is held at the end of `step`, in slices of a second so that
 * Ctrl-C and a failed moveChunk end the wait. */
static int wait_held(tour_t *t, int step, ms_error_t *err) {
    char name[64];
    long long until = time_mono_ms() + TOUR_STEP_WAIT_MS;
    step_fp_name(step, name, sizeof name);
    while (time_mono_ms() < until) {
        int rc, mrc;
        ms_error_t me = {0};
        if (tour_interrupted()) return err_set(err, MS_ERR_INTERRUPTED, "interrupted (Ctrl-C)");
        rc = tour_fp_wait(&t->donor, name, t->fp_base[step - 1] + 1, 1000, err);
        if (rc == 0) return 0;
        if (rc != MS_ERR_MAX_TIME_MS_EXPIRED) return rc;
        if (mover_done(t, &mrc, &me))
            return err_set(err, mrc ? mrc : MS_ERR_INTERNAL, "the moveChunk ended before step %d: %s", step,
                           mrc ? me.msg : "ok");
    }
    return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT, "the donor did not reach the end of step %d in %d s", step,
                   TOUR_STEP_WAIT_MS / 1000);
}

/* The fields of a coordinator document and of a range-deletion task a reader follows
 * (the full documents: find on the shard's config collection). */
static const char *const coordinator_fields[] = {"donorShardId", "recipientShardId", "range", "decision", NULL};
static const char *const task_fields[] = {"donorShardId", "range", "pending", "processing", "whenToClean",
                                          "numOrphanDocs", NULL};

/* Prints those of d's fields named in `fields` (NULL-ended), in d's order, as JSON. */
static void print_fields(const char *indent, const bson_t *d, const char *const *fields) {
    bson_t out = BSON_INITIALIZER;
    bson_iter_t it;
    if (bson_iter_init(&it, d))
        while (bson_iter_next(&it))
            for (int k = 0; fields[k]; k++)
                if (strcmp(bson_iter_key(&it), fields[k]) == 0) bsonx_append_iter(&out, fields[k], &it);
    tour_print_doc(indent, &out);
    bson_destroy(&out);
}

/* Lists find(filter) on a shard's config collection, one document a line. */
static void show_shard_docs(ctl_t *shard, const char *who, const char *coll, const bson_t *filter,
                            const char *const *fields) {
    ctl_docs_t docs = {0};
    ms_error_t err = {0};
    printf("  %s config.%s:", who, coll);
    if (ctl_find_all(shard, "config", coll, filter, NULL, 0, TOUR_DOCS_MAX, &docs, &err)) {
        printf(" (could not read: %s)\n", err.msg);
    } else {
        printf(docs.n ? "\n" : " none\n");
        for (int i = 0; i < docs.n; i++) print_fields("    ", docs.v[i], fields);
    }
    ctl_docs_free(&docs);
}

/* The chunk's row on the config server now: who owns it, its version (lastmod). */
static void show_config_chunk(tour_t *t) {
    ctl_docs_t docs = {0};
    bson_t filter = BSON_INITIALIZER, min;
    bson_iter_t it;
    ms_error_t err = {0};
    if (bson_iter_init_find(&it, &t->coll, "uuid")) bsonx_append_iter(&filter, "uuid", &it);
    if (ctl_sub(&t->chunk, "min", &min)) BSON_APPEND_DOCUMENT(&filter, "min", &min);
    if (ctl_find_all(t->router, "config", "chunks", &filter, NULL, 1, 1, &docs, &err) || docs.n < 1) {
        printf("  config server config.chunks: (could not read: %s)\n", err.msg[0] ? err.msg : "no such chunk");
    } else {
        uint32_t ts = 0, inc = 0;
        if (bson_iter_init_find(&it, docs.v[0], "lastmod") && BSON_ITER_HOLDS_TIMESTAMP(&it))
            bson_iter_timestamp(&it, &ts, &inc);
        printf("  config server config.chunks: the chunk is on %s, version (lastmod) %u|%u\n",
               ctl_str(docs.v[0], "shard"), ts, inc);
    }
    bson_destroy(&filter);
    ctl_docs_free(&docs);
}

/* A shard's filtering metadata of the collection: serverStatus.sharding.<ns>. */
static void show_filtering(tour_t *t, ctl_t *shard, const char *who) {
    bson_t cmd = BSON_INITIALIZER, reply, sharding, entry;
    ms_error_t err = {0};
    BSON_APPEND_INT32(&cmd, "serverStatus", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    printf("  %s filtering metadata: ", who);
    if (ctl_command(shard, &cmd, &reply, &err) != 0) {
        printf("(serverStatus: %s)\n", err.msg);
    } else {
        bson_t sv;
        bson_iter_t it;
        if (ctl_sub(&reply, "sharding", &sharding) && ctl_sub(&sharding, t->ns, &entry) &&
            ctl_sub(&entry, "shardVersion", &sv) && bson_iter_init_find(&it, &sv, "v") &&
            BSON_ITER_HOLDS_TIMESTAMP(&it)) {
            uint32_t major, minor;
            bson_iter_timestamp(&it, &major, &minor);
            printf("shardVersion %u|%u, chunks owned %lld\n", major, minor,
                   (long long)ctl_int(&entry, "chunksOwned", 0));
        } else {
            printf("unknown (not loaded: the next versioned request refreshes it)\n");
        }
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
}

/* Says how a probe failed: code (its top-level error or its first write error) after ms. */
static void say_failed(const char *what, int code, const char *msg, long long ms) {
    if (code == MS_ERR_MAX_TIME_MS_EXPIRED)
        printf("  %s: MaxTimeMSExpired (code 50) after %lld ms — it waited, and was not applied\n", what, ms);
    else
        printf("  %s: %s (code %d) after %lld ms: %s\n", what, err_code_name(code), code, ms, msg);
}

/* Sends cmd with maxTimeMS through the router; says how it failed, or returns 0 with
 * *reply_out initialised (caller destroys) and *ms its time, for the caller to say more. */
static int probe(tour_t *t, const char *what, bson_t *cmd, bson_t *reply_out, long long *ms) {
    ms_error_t err = {0};
    long long t0 = time_mono_ms();
    int rc;
    BSON_APPEND_INT32(cmd, "maxTimeMS", TOUR_PROBE_MAXTIME_MS);
    rc = ctl_command(t->router, cmd, reply_out, &err);
    *ms = time_mono_ms() - t0;
    if (rc) say_failed(what, rc, err.msg, *ms);
    return rc;
}

/* A read and a write of the probe document through the router, now. */
static void show_probes(tour_t *t) {
    bson_t cmd, reply, updates, u, inc, set;
    const char *coll = strchr(t->ns, '.') + 1;
    long long ms;
    if (!t->has_probe) {
        printf("through the router: (no probe: the tour reads and writes a document only for a\n"
               "  single-field ranged shard key with a document in the chunk)\n");
        return;
    }
    printf("through the router now (maxTimeMS %d), on the document ", TOUR_PROBE_MAXTIME_MS);
    tour_print_doc("", &t->probe);
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "find", coll);
    BSON_APPEND_UTF8(&cmd, "$db", t->db);
    BSON_APPEND_DOCUMENT(&cmd, "filter", &t->probe);
    BSON_APPEND_INT32(&cmd, "limit", 1);
    if (probe(t, "read ", &cmd, &reply, &ms) == 0) {
        ctl_docs_t docs = {0};
        ctl_docs_add_array(&docs, &reply, "cursor", "firstBatch", 1);
        printf("  read : ok in %lld ms, %s\n", ms, docs.n == 1 ? "found it" : "NOT FOUND");
        ctl_docs_free(&docs);
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    bson_init(&cmd);
    BSON_APPEND_UTF8(&cmd, "update", coll);
    BSON_APPEND_UTF8(&cmd, "$db", t->db);
    BSON_APPEND_ARRAY_BEGIN(&cmd, "updates", &updates);
    BSON_APPEND_DOCUMENT_BEGIN(&updates, "0", &u);
    BSON_APPEND_DOCUMENT(&u, "q", &t->probe);
    BSON_APPEND_DOCUMENT_BEGIN(&u, "u", &set);
    BSON_APPEND_DOCUMENT_BEGIN(&set, "$inc", &inc);
    BSON_APPEND_INT32(&inc, "tourWrites", 1);
    bson_append_document_end(&set, &inc);
    bson_append_document_end(&u, &set);
    bson_append_document_end(&updates, &u);
    bson_append_array_end(&cmd, &updates);
    if (probe(t, "write", &cmd, &reply, &ms) == 0) {
        int64_t code = ctl_int(&reply, "writeErrors.0.code", 0);
        bson_t we, first;
        if (code) {   /* a write error: ok: 1 with the statement's error */
            bool has = ctl_sub(&reply, "writeErrors", &we) && ctl_sub(&we, "0", &first);
            say_failed("write", (int)code, has ? ctl_str(&first, "errmsg") : "", ms);
        } else {
            printf("  write: ok in %lld ms, nModified %lld\n", ms, (long long)ctl_int(&reply, "nModified", 0));
            t->writes_ok += ctl_int(&reply, "nModified", 0) == 1;
        }
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
}

/* The collection's changelog entries the tour has not shown yet, oldest first. */
static void show_changelog(tour_t *t) {
    ctl_docs_t docs = {0};
    bson_t filter = BSON_INITIALIZER, range, sort = BSON_INITIALIZER;
    ms_error_t err = {0};
    BSON_APPEND_UTF8(&filter, "ns", t->ns);
    BSON_APPEND_DOCUMENT_BEGIN(&filter, "time", &range);
    BSON_APPEND_DATE_TIME(&range, "$gte", t->since_ms);
    bson_append_document_end(&filter, &range);
    BSON_APPEND_INT32(&sort, "time", 1);
    BSON_APPEND_INT32(&sort, "_id", 1);
    printf("changelog (config.changelog), new entries:");
    if (ctl_find_all(t->router, "config", "changelog", &filter, &sort, 0, TOUR_DOCS_MAX, &docs, &err)) {
        printf(" (could not read: %s)\n", err.msg);
    } else {
        printf(docs.n > t->changelog_shown ? "\n" : " none\n");
        for (int i = t->changelog_shown; i < docs.n; i++) {
            printf("  %s (%s) ", ctl_str(docs.v[i], "what"),
                   *ctl_str(docs.v[i], "shard") ? ctl_str(docs.v[i], "shard") : ctl_str(docs.v[i], "server"));
            ctl_print_json(stdout, docs.v[i], "details", "{}");
            printf("\n");
        }
        if (docs.n > t->changelog_shown) t->changelog_shown = docs.n;
    }
    bson_destroy(&filter);
    bson_destroy(&sort);
    ctl_docs_free(&docs);
}

/* What is persisted now, and what a client sees. */
static void show_state(tour_t *t) {
    bson_t rfilter = BSON_INITIALIZER;
    BSON_APPEND_UTF8(&rfilter, "nss", t->ns);
    printf("persisted now:\n");
    show_shard_docs(&t->donor, "donor", "migrationCoordinators", NULL, coordinator_fields);
    show_shard_docs(&t->donor, "donor", "rangeDeletions", &rfilter, task_fields);
    show_shard_docs(&t->recipient, "recipient", "rangeDeletions", &rfilter, task_fields);
    show_config_chunk(t);
    show_filtering(t, &t->donor, "donor    ");
    show_filtering(t, &t->recipient, "recipient");
    show_probes(t);
    show_changelog(t);
    bson_destroy(&rfilter);
}

static void say_step(int s) {
    const tour_step_text_t *x = &step_texts[s - 1];
    printf("\n== step %d of %d: %s (%s) ==\n", s, TOUR_STEPS, x->words, x->phase);
    printf("MongoDB: %s\n", x->mongo);
    printf("why: %s\n", x->why);
    printf("watch: %s\n", x->watch);
}

/* The six steps: say, release the previous hold (or start the move), wait, show. */
static int run_steps(tour_t *t, ms_error_t *err) {
    char name[64];
    for (int s = 1; s <= TOUR_STEPS; s++) {
        int rc;
        say_step(s);
        if (s == 1) {
            printf("... starting moveChunk %s to %s in the background\n", t->ns, t->recipient_name);
            if ((rc = mover_start(t, err)) != 0) return rc;
        } else {
            step_fp_name(s - 1, name, sizeof name);
            printf("... releasing %s (configureFailPoint off)\n", name);
            if ((rc = tour_fp(&t->donor, name, false, NULL, err)) != 0) return rc;
        }
        step_fp_name(s, name, sizeof name);
        printf("... waiting for the donor to be held at the end of step %d (waitForFailPoint %s)\n", s, name);
        if ((rc = wait_held(t, s, err)) != 0) return rc;
        printf("-- held at the end of step %d (%s) --\n", s, step_texts[s - 1].words);
        show_state(t);
        tour_pause(t->automatic, t->pause_ms);
        if (tour_interrupted()) return err_set(err, MS_ERR_INTERRUPTED, "interrupted (Ctrl-C)");
    }
    return 0;
}

/* After the last release: the coordinator completes; waits for the moveChunk's answer. */
static int run_end(tour_t *t, ms_error_t *err) {
    long long until = time_mono_ms() + TOUR_STEP_WAIT_MS;
    int rc = 0;
    printf("\n== then: completing ==\n"
           "MongoDB: MigrationCoordinator::completeMigration: _recvChunkReleaseCritSec to the recipient,\n"
           "the recipient's range-deletion task deleted, the donor's made ready (the range deleter\n"
           "removes the donor's copy later: the orphans), the coordinator document deleted;\n"
           "moveChunk.commit and moveChunk.from in the changelog (moveChunk.to from the recipient).\n"
           "why: the decision must reach both shards even if one of them restarts; each document is\n"
           "deleted only after what it guards is done.\n"
           "... releasing moveChunkHangAtStep6 (configureFailPoint off)\n");
    if ((rc = tour_fp(&t->donor, "moveChunkHangAtStep6", false, NULL, err)) != 0) return rc;
    while (!mover_done(t, &rc, err)) {
        if (tour_interrupted()) return err_set(err, MS_ERR_INTERRUPTED, "interrupted (Ctrl-C)");
        if (time_mono_ms() > until) return err_set(err, MS_ERR_EXCEEDED_TIME_LIMIT, "moveChunk did not answer");
        tour_sleep_ms(50);
    }
    if (rc) return rc;
    printf("-- moveChunk answered ok: the migration committed --\n");
    show_state(t);
    if (t->has_probe) {
        ctl_docs_t docs = {0};
        ms_error_t e2 = {0};
        if (ctl_find_all(t->router, t->db, strchr(t->ns, '.') + 1, &t->probe, NULL, 1, 1, &docs, &e2) == 0 &&
            docs.n == 1)
            printf("the probe document now: tourWrites %lld; writes that answered ok during the tour: %d\n",
                   (long long)ctl_int(docs.v[0], "tourWrites", 0), t->writes_ok);
        ctl_docs_free(&docs);
    }
    return 0;
}

static void tour_free(tour_t *t) {
    if (t->mover) mover_release(t->mover);
    tour_close(&t->donor);
    tour_close(&t->recipient);
    bson_destroy(&t->coll);
    bson_destroy(&t->chunk);
    bson_destroy(&t->probe);
}

static int tour_migration(ctl_t *router, const char *ns, bool automatic, int pause_ms) {
    tour_t t;
    ms_error_t err = {0};
    int rc;
    memset(&t, 0, sizeof t);
    t.router = router;
    t.automatic = automatic;
    t.pause_ms = pause_ms;
    bson_init(&t.coll);
    bson_init(&t.chunk);
    if ((rc = pick_collection(&t, ns, &err)) != 0 || (rc = pick_chunk(&t, &err)) != 0) {
        printf("shardctl tour: %s (code %d)\n", err.msg, rc);
        if (rc == MS_ERR_NAMESPACE_NOT_SHARDED)
            printf("Shard a collection and load it first, e.g.:\n"
                   "  shardctl '{\"shardCollection\": \"tour.users\", \"key\": {\"_id\": 1}}'\n"
                   "  shardctl load --ns tour.users --count 20000\n");
        bson_init(&t.probe);
        tour_free(&t);
        return 1;
    }
    pick_probe(&t);
    printf("A guided tour of one chunk migration: %s, chunk ", t.ns);
    ctl_print_json(stdout, &t.chunk, "min", "?");
    printf(" -->> ");
    ctl_print_json(stdout, &t.chunk, "max", "?");
    printf("\nfrom %s (the donor, %s) to %s (the recipient, %s).\n", t.donor_name, t.donor.host, t.recipient_name,
           t.recipient.host);
    printf("The donor stops at the end of each of MongoDB's six steps (failpoints\n"
           "moveChunkHangAtStep1..6); at each stop the tour shows what is persisted and what a\n"
           "client sees.\n");
    t.since_ms = time_now_ms() - 1;
    if ((rc = failpoints_on(&t, &err)) != 0) {
        if (rc == MS_ERR_COMMAND_NOT_FOUND) tour_say_no_test_commands(t.donor_name, &err);
        else printf("shardctl tour: configureFailPoint on %s: %s (code %d)\n", t.donor_name, err.msg, rc);
        failpoints_off(&t);
        tour_free(&t);
        return 1;
    }
    balancer_hold(&t);
    printf("\n== before the move ==\n");
    show_state(&t);
    tour_pause(t.automatic, t.pause_ms);
    rc = tour_interrupted() ? err_set(&err, MS_ERR_INTERRUPTED, "interrupted (Ctrl-C)") : run_steps(&t, &err);
    if (rc == 0) rc = run_end(&t, &err);
    failpoints_off(&t);   /* whatever happened: the donor is never left held */
    if (t.balancer_stopped) tour_balancer_start(router);
    if (rc) {
        printf("\nshardctl tour stopped: %s (code %d)\n", err.msg, rc);
        printf("Every moveChunkHangAtStep failpoint of %s is off%s, so the migration goes on by itself\n"
               "(or has ended). See how it ends: shardctl --host %s status; shardctl --host %s changelog --ns %s\n",
               t.donor_name, t.fps_on ? " EXCEPT those named above" : "", router->host, router->host, t.ns);
    } else {
        printf("\nThe tour is over: %s moved from %s to %s.\n", t.ns, t.donor_name, t.recipient_name);
    }
    tour_free(&t);
    return rc ? 1 : 0;
}

int ctl_tour(ctl_t *c, int argc, char **argv) {
    const char *ns = NULL;
    bool automatic = false;
    int pause_ms = 1500;
    const flag_spec_t specs[] = {
        {"ns", FLAG_STR, &ns, "the collection (default: the first sharded one)"},
        {"auto", FLAG_BOOL, &automatic, "go on by itself after --pause-ms instead of waiting for Enter"},
        {"pause-ms", FLAG_INT, &pause_ms, "with --auto, the pause at each step (default 1500)"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    bool balancer = argc > 1 && strcmp(argv[1], "balancer") == 0;
    int i = flags_parse(argc - balancer, argv + balancer, specs, usage_text);
    if (i < argc - balancer || pause_ms < 0 || pause_ms > 600000) {
        fputs(usage_text, stderr);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    tour_catch_signals();
    return balancer ? ctl_tour_balancer(c, ns, automatic, pause_ms) : tour_migration(c, ns, automatic, pause_ms);
}
