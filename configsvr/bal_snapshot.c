/*
 * bal_snapshot.c — the balancer's view of the cluster (bin/configsvr): what a balancer
 * round (balancer.c round_run), balancerExplain and balancerCollectionStatus (cmd_bal.c)
 * all read before they ask the policy (bal_policy.c): the balancer settings
 * (config.settings: mode / stopped / activeWindow / policy / _waitForDelete /
 * _secondaryThrottle, autosplit, chunksize), the shards (config.shards: draining, zones,
 * maxSize, with their total data size from listDatabases when a maxSize needs it), one
 * collection's chunks with their owners mapped to the shard array and, for the dataSize
 * policy, its data size on every shard (dataSize), and the shards in a migration now
 * (config.migrations). One code path, so that what the explain shows is what a round
 * would see.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* ---- settings ---------------------------------------------------------------------------- */

static int hhmm(const char *s) {
    if (!s || strlen(s) != 5 || s[2] != ':') return -1;
    for (int i = 0; i < 5; i++)
        if (i != 2 && (s[i] < '0' || s[i] > '9')) return -1;
    int h = (s[0] - '0') * 10 + (s[1] - '0'), m = (s[3] - '0') * 10 + (s[4] - '0');
    return h > 23 || m > 59 ? -1 : h * 60 + m;
}

/* Is now (local time, minutes since midnight) inside [start, stop)? Wraps midnight when
 * stop < start (MongoDB: the config primary's local time). */
static bool in_window(int start, int stop, int now) {
    if (start <= stop) return now >= start && now < stop;
    return now >= start || now < stop;
}

void bal_settings_read(cfg_t *cfg, bal_settings_t *s) {
    bson_t doc;
    bool found = false;
    bson_iter_t it, w;
    memset(s, 0, sizeof *s);
    s->enabled = true;
    s->autosplit = true;
    s->policy = BAL_POLICY_CHUNK_COUNT;
    if (cat_settings_get(cfg->cat, "balancer", &doc, &found, NULL) == 0 && found) {
        if (bson_iter_init_find(&it, &doc, "mode") && BSON_ITER_HOLDS_UTF8(&it) &&
            strcmp(bson_iter_utf8(&it, NULL), "off") == 0) {
            s->enabled = false;
            snprintf(s->off_reason, sizeof s->off_reason, "mode off");
        }
        if (bson_iter_init_find(&it, &doc, "stopped") && bsonx_truthy(&it)) {
            s->enabled = false;
            snprintf(s->off_reason, sizeof s->off_reason, "stopped");
        }
        if (bson_iter_init_find(&it, &doc, "_waitForDelete")) s->wait_delete = bsonx_truthy(&it);
        if (bson_iter_init_find(&it, &doc, "_secondaryThrottle"))
            s->throttle = BSON_ITER_HOLDS_DOCUMENT(&it) || bsonx_truthy(&it);
        if (bson_iter_init_find(&it, &doc, "policy") && BSON_ITER_HOLDS_UTF8(&it) &&
            strcmp(bson_iter_utf8(&it, NULL), "dataSize") == 0)
            s->policy = BAL_POLICY_DATA_SIZE;
        if (bson_iter_init_find(&it, &doc, "activeWindow") && BSON_ITER_HOLDS_DOCUMENT(&it) &&
            bson_iter_recurse(&it, &w)) {
            int start = -1, stop = -1;
            while (bson_iter_next(&w)) {
                const char *v = BSON_ITER_HOLDS_UTF8(&w) ? bson_iter_utf8(&w, NULL) : NULL;
                if (strcmp(bson_iter_key(&w), "start") == 0) start = hhmm(v);
                else if (strcmp(bson_iter_key(&w), "stop") == 0) stop = hhmm(v);
            }
            time_t t = time(NULL);
            struct tm tm;
            localtime_r(&t, &tm);
            if (start >= 0 && stop >= 0) {
                s->has_window = true;
                snprintf(s->window_start, sizeof s->window_start, "%02d:%02d", (start / 60) % 24, start % 60);
                snprintf(s->window_stop, sizeof s->window_stop, "%02d:%02d", (stop / 60) % 24, stop % 60);
                s->in_window = in_window(start, stop, tm.tm_hour * 60 + tm.tm_min);
                if (s->enabled && !s->in_window) {
                    s->enabled = false;
                    snprintf(s->off_reason, sizeof s->off_reason, "outside activeWindow");
                }
            }
        }
        bson_destroy(&doc);
    }
    found = false;
    if (cat_settings_get(cfg->cat, "autosplit", &doc, &found, NULL) == 0 && found) {
        if (bson_iter_init_find(&it, &doc, "enabled") && BSON_ITER_HOLDS_BOOL(&it))
            s->autosplit = bson_iter_bool(&it);
        bson_destroy(&doc);
    }
    s->chunk_size = cat_chunk_size_bytes(cfg->cat);
}

/* ---- shard calls --------------------------------------------------------------------------- */

static int64_t shard_int(cfg_t *cfg, const char *shard, const bson_t *cmd, const char *field) {
    bson_t r;
    bson_iter_t it;
    ms_error_t e = {0};
    int64_t v = 0;
    if (cfg_shard_command(cfg, shard, cmd, CFG_SHARD_CMD_TIMEOUT_MS, &r, &e) != 0) {
        log_warn("balancer shard call failed shard=%s err=%s", log_str(shard), log_str(e.msg));
        return 0;
    }
    if (bson_iter_init_find(&it, &r, field)) bsonx_as_int64(&it, &v);
    bson_destroy(&r);
    return v;
}

static int64_t coll_bytes_on(cfg_t *cfg, const char *shard, const char *ns) {
    char db[CAT_DB_NAME_BYTES_MAX];
    bson_t cmd = BSON_INITIALIZER;
    int64_t v = 0;
    if (cfg_ns_split(ns, db, sizeof db, NULL, NULL) == 0) {
        BSON_APPEND_UTF8(&cmd, "dataSize", ns);
        BSON_APPEND_UTF8(&cmd, "$db", db);
        v = shard_int(cfg, shard, &cmd, "size");
    }
    bson_destroy(&cmd);
    return v;
}

static int64_t total_bytes_on(cfg_t *cfg, const char *shard) {
    bson_t cmd = BSON_INITIALIZER;
    BSON_APPEND_INT32(&cmd, "listDatabases", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    int64_t v = shard_int(cfg, shard, &cmd, "totalSize");
    bson_destroy(&cmd);
    return v;
}

/* ---- the shards ----------------------------------------------------------------------------- */

static int shard_scan(void *arg, const bson_t *doc) {
    bal_snap_t *sn = arg;
    bson_iter_t it, a;
    if (sn->nshards >= MS_BALANCER_SHARDS_MAX) return 0;
    bal_snap_shard_t *r = &sn->rows[sn->nshards];
    memset(r, 0, sizeof *r);
    if (!bson_iter_init_find(&it, doc, "_id") || !BSON_ITER_HOLDS_UTF8(&it)) return 0;
    snprintf(r->name, sizeof r->name, "%s", bson_iter_utf8(&it, NULL));
    if (bson_iter_init_find(&it, doc, "draining")) r->draining = bsonx_truthy(&it);
    if (bson_iter_init_find(&it, doc, "maxSize")) bsonx_as_int64(&it, &r->max_size_mb);
    if (bson_iter_init_find(&it, doc, "tags") && BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &a)) {
        while (bson_iter_next(&a)) {
            if (!BSON_ITER_HOLDS_UTF8(&a)) continue;
            r->zones = realloc(r->zones, sizeof *r->zones * (size_t)(r->nzones + 1));
            if (!r->zones) abort();
            r->zones[r->nzones] = strdup(bson_iter_utf8(&a, NULL));
            if (!r->zones[r->nzones]) abort();
            r->nzones++;
        }
    }
    sn->nshards++;
    return 0;
}

int bal_snap_shards(cfg_t *cfg, bal_snap_t *sn, ms_error_t *err) {
    memset(sn, 0, sizeof *sn);
    sn->rows = calloc(MS_BALANCER_SHARDS_MAX, sizeof *sn->rows);
    sn->shards = calloc(MS_BALANCER_SHARDS_MAX, sizeof *sn->shards);
    if (!sn->rows || !sn->shards) abort();
    int rc = cat_config_scan(cfg->cat, "shards", shard_scan, sn, err);
    for (int s = 0; s < sn->nshards; s++) {
        bal_snap_shard_t *r = &sn->rows[s];
        bal_shard_t *b = &sn->shards[s];
        b->name = r->name;
        b->draining = r->draining;
        b->zones = (const char *const *)r->zones;
        b->nzones = r->nzones;
        b->max_size_bytes = r->max_size_mb * 1024 * 1024;
        /* Only a shard with a cap needs its total: listDatabases is a shard call each. */
        if (b->max_size_bytes > 0) b->total_bytes = total_bytes_on(cfg, b->name);
    }
    return rc;
}

void bal_snap_free(bal_snap_t *sn) {
    if (!sn) return;
    for (int s = 0; sn->rows && s < sn->nshards; s++) {
        for (int z = 0; z < sn->rows[s].nzones; z++) free(sn->rows[s].zones[z]);
        free(sn->rows[s].zones);
    }
    free(sn->rows);
    free(sn->shards);
    memset(sn, 0, sizeof *sn);
}

int bal_snap_index(const bal_snap_t *sn, const char *name) {
    for (int s = 0; s < sn->nshards; s++)
        if (strcmp(sn->rows[s].name, name) == 0) return s;
    return -1;
}

/* ---- one collection --------------------------------------------------------------------------- */

void bal_snap_map(const bal_snap_t *sn, cat_bal_data_t *d) {
    for (int i = 0; i < d->nchunks; i++) d->chunks[i].owner = bal_snap_index(sn, d->owners[i]);
    if (!d->summary) return;
    int ns = sn->nshards > 0 ? sn->nshards : 1, nz = d->nzones;
    d->shard_chunks = calloc((size_t)ns, sizeof *d->shard_chunks);
    d->shard_jumbo = calloc((size_t)ns, sizeof *d->shard_jumbo);
    d->range_chunks = calloc((size_t)ns * (size_t)(nz > 0 ? nz : 1), sizeof *d->range_chunks);
    if (!d->shard_chunks || !d->shard_jumbo || !d->range_chunks) abort();
    for (int k = 0; k < d->ncounts; k++) {
        int s = bal_snap_index(sn, d->counts[k].shard);
        if (s < 0) continue;
        d->shard_chunks[s] = d->counts[k].chunks;
        d->shard_jumbo[s] = d->counts[k].jumbo;
        for (int z = 0; z < nz; z++) d->range_chunks[z * sn->nshards + s] = d->counts[k].in_range[z];
    }
}

int bal_snap_coll(cfg_t *cfg, bal_snap_t *sn, const char *ns, bal_policy_t policy,
                  cat_bal_data_t *d, ms_error_t *err) {
    int rc = cat_bal_load_summary(cfg->cat, ns, d, err);
    if (rc) return rc;
    bal_snap_map(sn, d);
    for (int s = 0; s < sn->nshards; s++)
        sn->shards[s].coll_bytes = policy == BAL_POLICY_DATA_SIZE
                                       ? coll_bytes_on(cfg, sn->shards[s].name, ns) : 0;
    return 0;
}

void bal_coll_view(const cat_bal_data_t *d, bal_coll_t *bc) {
    bc->chunks = d->chunks;
    bc->nchunks = d->nchunks;
    bc->zones = d->zones;
    bc->nzones = d->nzones;
    bc->shard_chunks = d->shard_chunks;
    bc->shard_jumbo = d->shard_jumbo;
    bc->range_chunks = d->range_chunks;
    bc->total_chunks = d->summary ? d->total : d->nchunks;
}

/* ---- migrations in progress --------------------------------------------------------------------- */

typedef struct mig_scan {
    bal_snap_t *sn;
    bson_t *out;   /* NULL-able */
    int n;
} mig_scan_t;

static int mig_row(void *arg, const bson_t *doc) {
    mig_scan_t *m = arg;
    bson_iter_t it;
    const char *f[2] = {"fromShard", "toShard"};
    for (int k = 0; k < 2; k++) {
        if (!bson_iter_init_find(&it, doc, f[k]) || !BSON_ITER_HOLDS_UTF8(&it)) continue;
        int s = bal_snap_index(m->sn, bson_iter_utf8(&it, NULL));
        if (s >= 0) m->sn->shards[s].busy = true;
    }
    if (m->out) {
        char key[16];
        const char *kp;
        bson_t d;
        bson_uint32_to_string((uint32_t)m->n, &kp, key, sizeof key);
        BSON_APPEND_DOCUMENT_BEGIN(m->out, kp, &d);
        const char *copy[3] = {"ns", "fromShard", "toShard"};
        for (int k = 0; k < 3; k++)
            if (bson_iter_init_find(&it, doc, copy[k])) bson_append_iter(&d, copy[k], -1, &it);
        bson_append_document_end(m->out, &d);
    }
    m->n++;
    return 0;
}

int bal_snap_busy(cfg_t *cfg, bal_snap_t *sn, bson_t *list, int *n, ms_error_t *err) {
    mig_scan_t m = {.sn = sn, .out = list, .n = 0};
    int rc = cat_config_scan(cfg->cat, "migrations", mig_row, &m, err);
    if (n) *n = m.n;
    return rc;
}
