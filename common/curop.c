/*
 * curop.c — the operations in progress of one process and the $currentOp stage over
 * them (see curop.h), used by every daemon.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/curop.h"

#include "common/agg.h"
#include "common/bsonx.h"
#include "common/cmd.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"

/* The registry: one slot per thread that ever ran a command, made on its first one and
 * freed when the thread ends. A command's begin and end take only its own thread's slot
 * mutex, which nothing else holds but a $currentOp listing passing by: dispatch never
 * waits on another command. slots_mu guards the list of curop_slots (a thread's first command,
 * a thread's end, a listing); a slot's mu guards its ops and every entry's links there.
 * An entry's other fields are written before it is linked and read only under its slot's
 * mu while it is linked. Lock order: slots_mu, then a slot's mu. */
typedef struct curop_slot {
    pthread_mutex_t mu;
    curop_t *ops;                       /* this thread's running commands, newest first */
    struct curop_slot *prev, *next;     /* guarded by slots_mu */
} curop_slot_t;

static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static curop_slot_t *curop_slots;
static pthread_key_t slot_key;          /* its destructor frees the thread's slot */
static pthread_once_t slot_key_once = PTHREAD_ONCE_INIT;
static _Thread_local curop_slot_t *my_slot;
static atomic_int_fast32_t curop_next_id = 1;

/* A thread ends: its slot leaves the list (no command of it is running any more). */
static void slot_free(void *p) {
    curop_slot_t *slot = p;
    pthread_mutex_lock(&slots_mu);
    if (slot->prev) slot->prev->next = slot->next;
    else curop_slots = slot->next;
    if (slot->next) slot->next->prev = slot->prev;
    pthread_mutex_unlock(&slots_mu);
    pthread_mutex_destroy(&slot->mu);
    free(slot);
    my_slot = NULL;   /* runs on the ending thread: a later command there makes a new one */
}

static void slot_key_make(void) { pthread_key_create(&slot_key, slot_free); }

/* The calling thread's slot, made and listed on its first command; NULL when memory ran
 * out (the command then runs unlisted). */
static curop_slot_t *slot_mine(void) {
    curop_slot_t *slot;
    if (my_slot) return my_slot;
    pthread_once(&slot_key_once, slot_key_make);
    if (!(slot = calloc(1, sizeof *slot))) {
        log_warn("operation not listed in $currentOp: out of memory");
        return NULL;
    }
    pthread_mutex_init(&slot->mu, NULL);
    pthread_mutex_lock(&slots_mu);
    slot->next = curop_slots;
    if (curop_slots) curop_slots->prev = slot;
    curop_slots = slot;
    pthread_mutex_unlock(&slots_mu);
    pthread_setspecific(slot_key, slot);
    my_slot = slot;
    return slot;
}

void curop_begin(curop_t *op, const bson_t *cmd, const char *name, const char *db, unsigned flags) {
    int32_t id = (int32_t)atomic_fetch_add(&curop_next_id, 1);
    curop_slot_t *slot = slot_mine();
    if (id <= 0) {   /* wrapped after 2^31 commands: opids stay positive, as MongoDB's */
        atomic_store(&curop_next_id, 2);
        id = 1;
    }
    op->opid = id;
    op->start_mono_us = time_mono_us();
    op->start_ms = time_now_ms();
    op->cmd = cmd;
    op->name = name;
    op->db = db;
    op->flags = flags;
    op->conn = op_conn();
    snprintf(op->client, sizeof op->client, "%s", op_peer());
    op->prev = NULL;
    op->slot = slot;
    if (!slot) return;
    pthread_mutex_lock(&slot->mu);
    op->next = slot->ops;
    if (slot->ops) slot->ops->prev = op;
    slot->ops = op;
    pthread_mutex_unlock(&slot->mu);
}

void curop_end(curop_t *op) {
    curop_slot_t *slot = op->slot;
    if (!slot) return;
    pthread_mutex_lock(&slot->mu);
    if (op->prev) op->prev->next = op->next;
    else slot->ops = op->next;
    if (op->next) op->next->prev = op->prev;
    pthread_mutex_unlock(&slot->mu);
}

/* ---- the $currentOp stage ------------------------------------------------------------ */

int curop_parse_spec(const bson_iter_t *spec_it, curop_spec_t *out, ms_error_t *err) {
    static const char *const names[] = {"allUsers", "idleConnections", "idleSessions", "localOps",
                                        "truncateOps", "idleCursors", "backtrace"};
    bson_iter_t it;
    memset(out, 0, sizeof *out);
    out->idle_sessions = true;   /* MongoDB's default: SessionMode::kIncludeIdle */
    bool *slots[] = {&out->all_users, &out->idle_connections, &out->idle_sessions, &out->local_ops,
                     &out->truncate_ops, &out->idle_cursors, &out->backtrace};
    if (!BSON_ITER_HOLDS_DOCUMENT(spec_it) || !bsonx_view_container(spec_it, &out->raw))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "$currentOp options must be specified in an "
                       "object, but found: %s", bsonx_type_name(bson_iter_type(spec_it)));
    bson_iter_init(&it, &out->raw);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        size_t i = 0;
        while (i < sizeof names / sizeof names[0] && strcmp(names[i], k) != 0) i++;
        if (i == sizeof names / sizeof names[0])
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "Unrecognized option '%s' in $currentOp "
                           "stage.", k);
        if (!BSON_ITER_HOLDS_BOOL(&it))
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "The '%s' parameter of the $currentOp "
                           "stage must be a boolean value, but found: %s", k,
                           bsonx_type_name(bson_iter_type(&it)));
        *slots[i] = bson_iter_bool(&it);
    }
    return 0;
}

int curop_parse_pipeline(const bson_t *pipeline, curop_spec_t *out, ms_error_t *err) {
    bson_iter_t si, fi;
    if (!bson_iter_init(&si, pipeline) || !bson_iter_next(&si) || !BSON_ITER_HOLDS_DOCUMENT(&si) ||
        !bson_iter_recurse(&si, &fi) || !bson_iter_next(&fi))
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "the pipeline does not start with $currentOp");
    return curop_parse_spec(&fi, out, err);
}

int curop_check_ns(const char *db, const bson_iter_t *agg_arg, ms_error_t *err) {
    if (strcmp(db, "admin") != 0 || !bsonx_is_number(agg_arg))
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "$currentOp must be run against the "
                       "'admin' database with {aggregate: 1}");
    return 0;
}

/* MongoDB's logical op names: find is a query, delete a remove, the rest commands. */
static const char *op_kind(const char *name) {
    static const char *const map[][2] = {{"find", "query"},   {"getMore", "getmore"},
                                         {"insert", "insert"}, {"update", "update"},
                                         {"delete", "remove"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcmp(map[i][0], name) == 0) return map[i][1];
    return "command";
}

/* currentOpTime: the start as ISO 8601 with milliseconds and the UTC offset, as MongoDB
 * prints it ("2024-01-02T03:04:05.678+00:00"). */
static void iso_time(long long ms, char *out, size_t cap) {
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    char base[32];
    gmtime_r(&s, &tm);
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, cap, "%s.%03d+00:00", base, (int)(ms % 1000));
}

/* command: the request itself, or {$truncated: "<its start as JSON>"} past the bound. */
/* Copies into dst the elements of src, in order, until dst holds more than budget bytes:
 * a container is copied the same way (its own prefix), a long string cut at the budget.
 * Nesting is bounded by the document's (validated) depth. */
static void prefix_copy(const bson_t *src, bson_t *dst, size_t budget, int depth) {
    bson_iter_t it;
    if (!bson_iter_init(&it, src)) return;
    while (dst->len <= budget && bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        size_t left = budget > dst->len ? budget - dst->len : 0;
        uint32_t len = 0;
        const uint8_t *data;
        bson_t child, sub;
        if ((BSON_ITER_HOLDS_DOCUMENT(&it) || BSON_ITER_HOLDS_ARRAY(&it)) && depth < 200) {
            bool arr = BSON_ITER_HOLDS_ARRAY(&it);
            if (arr) bson_iter_array(&it, &len, &data);
            else bson_iter_document(&it, &len, &data);
            if (len <= left || !bson_init_static(&sub, data, len)) {
                bson_append_iter(dst, NULL, 0, &it);
                continue;
            }
            if (arr) bson_append_array_begin(dst, key, -1, &child);
            else bson_append_document_begin(dst, key, -1, &child);
            prefix_copy(&sub, &child, left, depth + 1);
            if (arr) bson_append_array_end(dst, &child);
            else bson_append_document_end(dst, &child);
        } else if (BSON_ITER_HOLDS_UTF8(&it)) {
            const char *v = bson_iter_utf8(&it, &len);
            size_t cut = len < left ? len : left;
            while (cut > 0 && cut < len && ((unsigned char)v[cut] & 0xC0) == 0x80)
                cut--;   /* not inside a UTF-8 sequence */
            bson_append_utf8(dst, key, -1, v, (int)cut);
        } else {
            bson_append_iter(dst, NULL, 0, &it);
        }
    }
}

static void append_command(bson_t *d, const bson_t *cmd, bool truncate) {
    size_t bound = truncate ? MS_CUROP_TRUNCATE_BYTES : MS_CUROP_COMMAND_BYTES_MAX;
    bson_t t, part = BSON_INITIALIZER;
    if (cmd->len <= bound) {
        BSON_APPEND_DOCUMENT(d, "command", cmd);
        return;
    }
    /* Only a prefix of the command is turned into text — its first elements, containers
     * and strings cut where `bound` bytes are reached (prefix_copy) — so the work stays
     * bounded by `bound`, not by the command (up to 16 MB): this runs under the
     * operation's slot mutex. The text is the whole command's text up to `bound`. */
    prefix_copy(cmd, &part, bound, 0);
    char *json = bson_as_relaxed_extended_json(&part, NULL);
    bson_destroy(&part);
    BSON_APPEND_DOCUMENT_BEGIN(d, "command", &t);
    if (json) bson_append_utf8(&t, "$truncated", -1, json, (int)strnlen(json, bound));
    else BSON_APPEND_UTF8(&t, "$truncated", "");
    bson_append_document_end(d, &t);
    bson_free(json);
}

/* One operation as MongoDB 7.0's $currentOp shows an active one (a shard answering a
 * router: shard first, opid "shard:N", client_s). Called under op's slot mutex. */
static void append_op(bson_t *d, const curop_t *op, const curop_spec_t *spec, const char *host,
                      const char *shard, long long now_us) {
    char buf[MS_NS_BYTES_MAX + 32];
    long long us = now_us - op->start_mono_us;
    if (us < 0) us = 0;
    if (shard) BSON_APPEND_UTF8(d, "shard", shard);
    BSON_APPEND_UTF8(d, "type", "op");
    BSON_APPEND_UTF8(d, "host", host);
    snprintf(buf, sizeof buf, "conn%u", (unsigned)op->conn);
    BSON_APPEND_UTF8(d, "desc", buf);
    BSON_APPEND_INT64(d, "connectionId", (int64_t)op->conn);
    BSON_APPEND_UTF8(d, shard ? "client_s" : "client", op->client);
    BSON_APPEND_BOOL(d, "active", true);
    iso_time(op->start_ms, buf, sizeof buf);
    BSON_APPEND_UTF8(d, "currentOpTime", buf);
    BSON_APPEND_BOOL(d, "threaded", true);
    if (shard) {
        snprintf(buf, sizeof buf, "%s:%d", shard, (int)op->opid);
        BSON_APPEND_UTF8(d, "opid", buf);
    } else {
        BSON_APPEND_INT32(d, "opid", op->opid);
    }
    BSON_APPEND_INT64(d, "secs_running", (int64_t)(us / 1000000));
    BSON_APPEND_INT64(d, "microsecs_running", (int64_t)us);
    BSON_APPEND_UTF8(d, "op", op_kind(op->name));
    cmd_ns_of(op->name, op->flags, op->db, op->cmd, buf, sizeof buf);
    BSON_APPEND_UTF8(d, "ns", buf);
    BSON_APPEND_BOOL(d, "redacted", false);
    append_command(d, op->cmd, spec->truncate_ops);
    BSON_APPEND_INT32(d, "numYields", 0);
    bson_t empty;
    BSON_APPEND_DOCUMENT_BEGIN(d, "locks", &empty);
    bson_append_document_end(d, &empty);
    BSON_APPEND_BOOL(d, "waitingForLock", false);
    BSON_APPEND_DOCUMENT_BEGIN(d, "lockStats", &empty);
    bson_append_document_end(d, &empty);
}

int curop_stage_run(const bson_t *pipeline, const curop_spec_t *spec, const char *host,
                    const char *shard, bson_t ***docs, size_t *n, ms_error_t *err) {
    agg_pipeline_t *p = NULL;
    agg_run_t *run = NULL;
    agg_opts_t o = {0};
    bson_t rest, listed = BSON_INITIALIZER;
    bson_iter_t it;
    int rc, k = 0;
    agg_pipeline_rest(pipeline, &rest);
    if ((rc = agg_parse(&rest, &o, &p, err)) != 0) goto out;
    /* The listing is built under the mutexes, each slot's held only while its own entries
     * are copied, then fed to the pipeline outside them. */
    pthread_mutex_lock(&slots_mu);
    long long now_us = time_mono_us();
    for (curop_slot_t *slot = curop_slots; slot; slot = slot->next) {
        pthread_mutex_lock(&slot->mu);
        for (const curop_t *op = slot->ops; op; op = op->next) {
            char key[16];
            bson_t d;
            snprintf(key, sizeof key, "%d", k++);
            BSON_APPEND_DOCUMENT_BEGIN(&listed, key, &d);
            append_op(&d, op, spec, host, shard, now_us);
            bson_append_document_end(&listed, &d);
        }
        pthread_mutex_unlock(&slot->mu);
    }
    pthread_mutex_unlock(&slots_mu);
    if ((rc = agg_run_new(p, 0, &run, err)) != 0) goto out;
    bson_iter_init(&it, &listed);
    while (rc == 0 && bson_iter_next(&it)) {
        bson_t one;
        if (bsonx_view_container(&it, &one)) rc = agg_run_push(run, &one, err);
    }
    if (rc == 0) rc = agg_run_finish(run, err);
    if (rc == 0) agg_run_take(run, docs, n);
out:
    agg_run_free(run);
    agg_free(p);
    bson_destroy(&listed);
    bson_destroy(&rest);
    return rc;
}
