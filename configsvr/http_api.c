/*
 * http_api.c — what the config server's web view shows (bin/configsvr): one
 * build of the whole cluster state as one BSON document, which http.c caches and serves
 * as JSON (the page's /api/state and the per-section endpoints). Everything here only
 * reads: the catalog (shards, collections, chunks, changelog and actionlog tails), the
 * balancer's own answers (balancerStatus and balancerExplain, called in-process through
 * their handlers), and three cheap commands per shard (listDatabases, currentOp,
 * collStats per collection) with short deadlines. It runs on http.c's collector thread,
 * never on an NNG I/O thread, since a shard call may wait up to MS_HTTP_SHARD_CALL_MS.
 *
 * Sizes are bounded by common/limits.h: at most MS_HTTP_COLLS_MAX collections and
 * MS_HTTP_CHUNKS_MAX chunks (cut ones are counted and flagged `truncated`), the newest
 * MS_HTTP_CHANGELOG_MAX changelog entries and MS_HTTP_ROUNDS_MAX balancer rounds. Chunks
 * per collection and shard are counted by the catalog on an index; only the chunks drawn
 * are read, so a build costs the same at a thousand chunks or a million.
 *
 * Each chunk's size is measured on its shard with dataSize (what the defragmenter asks),
 * at most WEB_SIZE_PROBES per build, and remembered across builds for
 * WEB_SIZE_TTL_MS under the chunk's identity (collection, min, shard, version: a split, a
 * merge or a move makes a new chunk, measured afresh). Until then a chunk is drawn at its
 * share of the collection's bytes on its shard (`sizeFrom: "share"`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

/* Upper bound of shards shown: the balancer's own (it cannot balance more). */
#define WEB_SHARDS_MAX MS_BALANCER_SHARDS_MAX
/* Chunk sizes: dataSize calls per build (a build runs at most every MS_HTTP_STATE_TTL_MS
 * while someone looks, and each call walks its range on the shard: at most 40 ranges a
 * second), how long a measure is kept before it is taken again, and the memo's slots
 * (twice the chunks listed). */
#define WEB_SIZE_PROBES 16
#define WEB_SIZE_TTL_MS 15000
#define WEB_SIZE_SLOTS (2 * MS_HTTP_CHUNKS_MAX)
/* A migration committed this recently is listed under migrations.recent: the page polls
 * once a second, so a 100 ms move would otherwise never be seen. */
#define WEB_RECENT_MS 5000

typedef struct web_shard {
    char name[CAT_SHARD_NAME_BYTES_MAX];
    bson_t doc;              /* the config.shards document (owned) */
    bool reachable;
    char error[sizeof(((ms_error_t *)0)->msg)];
    int64_t data_bytes, docs;
    int64_t *coll_bytes;     /* per collection index: collStats size there */
    int *coll_chunks;        /* per collection index: chunks of it on this shard */
} web_shard_t;

typedef struct web_coll {
    char ns[MS_NS_BYTES_MAX + 1];
    uint8_t uuid[16];        /* config.chunks names its collection by uuid (MongoDB 5.0+) */
    bson_t doc;              /* the config.collections document (owned) */
    int64_t nchunks;         /* all of them, listed or not */
    bool truncated;
} web_coll_t;

typedef struct web_chunk {
    int coll, shard;         /* indexes; shard -1 when not in config.shards */
    bson_t min, max;         /* owned copies */
    uint32_t major, minor;
    bool jumbo;
    int64_t est;             /* estimatedDataSizeBytes, -1 when unknown */
    uint64_t fp;             /* identity for the size memo (size_fp) */
    int64_t measured;        /* dataSize of the range on its shard, -1 when not (yet) */
    long long probed_at;     /* time_mono_ms of the last dataSize asked (answered or not), 0: never */
} web_chunk_t;

typedef struct web_build {
    cfg_t *cfg;
    web_shard_t *shards;
    int nshards;
    web_coll_t *colls;
    int ncolls, ncolls_total;
    web_chunk_t *chunks;
    int nchunks;
    int64_t chunks_total;
    bool chunks_cut;
    bson_t tags;             /* config.tags rows (at most MS_HTTP_CHUNKS_MAX), as an array */
    int ntags;
} web_build_t;

static int shard_index(const web_build_t *b, const char *name) {
    for (int i = 0; i < b->nshards; i++)
        if (strcmp(b->shards[i].name, name) == 0) return i;
    return -1;
}

/* The uuid of a document's field key (16 bytes of subtype 4), false when absent. */
static bool doc_uuid(const bson_t *doc, const char *key, uint8_t out[16]) {
    bson_iter_t it;
    bson_subtype_t sub;
    uint32_t len = 0;
    const uint8_t *data = NULL;
    if (!bson_iter_init_find(&it, doc, key) || !BSON_ITER_HOLDS_BINARY(&it)) return false;
    bson_iter_binary(&it, &sub, &len, &data);
    if (len != 16) return false;
    memcpy(out, data, 16);
    return true;
}

static int coll_index(const web_build_t *b, const bson_t *chunk) {
    uint8_t u[16];
    if (!doc_uuid(chunk, "uuid", u)) return -1;
    for (int i = 0; i < b->ncolls; i++)
        if (memcmp(b->colls[i].uuid, u, 16) == 0) return i;
    return -1;
}

/* ---- catalog reads ------------------------------------------------------------------ */

static int shard_row(void *arg, const bson_t *doc) {
    web_build_t *b = arg;
    if (b->nshards >= WEB_SHARDS_MAX) return 0;
    web_shard_t *s = &b->shards[b->nshards];
    snprintf(s->name, sizeof s->name, "%s", bsonx_utf8_or(doc, "_id", ""));
    bson_copy_to(doc, &s->doc);
    b->nshards++;
    return 0;
}

static int coll_row(void *arg, const bson_t *doc) {
    web_build_t *b = arg;
    b->ncolls_total++;
    if (b->ncolls >= MS_HTTP_COLLS_MAX) return 0;
    web_coll_t *c = &b->colls[b->ncolls];
    snprintf(c->ns, sizeof c->ns, "%s", bsonx_utf8_or(doc, "_id", ""));
    if (!doc_uuid(doc, "uuid", c->uuid)) memset(c->uuid, 0, sizeof c->uuid);
    bson_copy_to(doc, &c->doc);
    b->ncolls++;
    return 0;
}

static int coll_index_by_ns(const web_build_t *b, const char *ns) {
    for (int i = 0; i < b->ncolls; i++)
        if (strcmp(b->colls[i].ns, ns) == 0) return i;
    return -1;
}

/* Chunks per (collection, shard), counted by the catalog on its (ns, shard, min) index:
 * every chunk counts, listed or not, and none is read for it. */
static int chunk_count_row(void *arg, const char *ns, const char *shard, int64_t n) {
    web_build_t *b = arg;
    b->chunks_total += n;
    int ci = coll_index_by_ns(b, ns);
    if (ci < 0) return 0;
    b->colls[ci].nchunks += n;
    int si = shard_index(b, shard);
    if (si >= 0) b->shards[si].coll_chunks[ci] += (int)n;
    return 0;
}

/* A chunk drawn: the first MS_HTTP_CHUNKS_MAX chunks of the shown collections, in
 * catalog order, are read (chunk_pages) and kept. */
static int chunk_row(void *arg, const bson_t *doc) {
    web_build_t *b = arg;
    bson_iter_t it;
    bson_t v;
    int ci = coll_index(b, doc);
    if (ci < 0 || b->nchunks >= MS_HTTP_CHUNKS_MAX) return CAT_PAGE_STOP;
    int si = shard_index(b, bsonx_utf8_or(doc, "shard", ""));
    web_chunk_t *k = &b->chunks[b->nchunks];
    memset(k, 0, sizeof *k);
    k->coll = ci;
    k->shard = si;
    if (bson_iter_init_find(&it, doc, "min") && bsonx_view_container(&it, &v)) bson_copy_to(&v, &k->min);
    else bson_init(&k->min);
    if (bson_iter_init_find(&it, doc, "max") && bsonx_view_container(&it, &v)) bson_copy_to(&v, &k->max);
    else bson_init(&k->max);
    if (bson_iter_init_find(&it, doc, "lastmod") && BSON_ITER_HOLDS_TIMESTAMP(&it))
        bson_iter_timestamp(&it, &k->major, &k->minor);
    k->jumbo = bson_iter_init_find(&it, doc, "jumbo") && bsonx_truthy(&it);
    k->est = bsonx_int64_or(doc, "estimatedDataSizeBytes", -1);
    k->measured = -1;
    b->nchunks++;
    return 0;
}

/* The chunks drawn, read collection by collection (each one page, at most what is left
 * of MS_HTTP_CHUNKS_MAX): a build reads as many chunks as it draws, whatever exists. A
 * collection with more chunks than were listed is flagged truncated. */
static int chunk_pages(web_build_t *b, ms_error_t *err) {
    int rc = 0;
    for (int ci = 0; ci < b->ncolls && rc == 0; ci++) {
        cat_pin_t pin = {.uuid = b->colls[ci].uuid};
        int before = b->nchunks, room = MS_HTTP_CHUNKS_MAX - b->nchunks;
        cat_page_pos_t *pos = cat_page_pos_new();
        if (room > 0 && b->colls[ci].nchunks > 0)
            rc = cat_config_page(b->cfg->cat, "chunks", &pin, pos, room, chunk_row, b, err);
        cat_page_pos_free(pos);
        if (b->nchunks - before < b->colls[ci].nchunks) {
            b->colls[ci].truncated = true;
            b->chunks_cut = true;
        }
    }
    return rc;
}

typedef struct tail_arg {
    bson_t *arr;
    int n;
    const char *what;        /* keep only entries of this `what` (NULL: all) */
} tail_arg_t;

static int tail_row(void *arg, const bson_t *doc) {
    tail_arg_t *a = arg;
    char k[16];
    if (a->what && strcmp(bsonx_utf8_or(doc, "what", ""), a->what) != 0) return 0;
    snprintf(k, sizeof k, "%d", a->n++);
    bson_append_document(a->arr, k, -1, doc);
    return 0;
}

/* A zone range (config.tags) of a shown collection; attached to it in append_collections. */
static int tag_row(void *arg, const bson_t *doc) {
    web_build_t *b = arg;
    char k[16];
    if (b->ntags >= MS_HTTP_CHUNKS_MAX) return 0;
    snprintf(k, sizeof k, "%d", b->ntags++);
    bson_append_document(&b->tags, k, -1, doc);
    return 0;
}

/* ---- shard calls -------------------------------------------------------------------- */

/* One command to shard s with the build's short deadline. A transport failure marks the
 * shard unreachable (its other calls of this build are skipped); an {ok: 0} answer
 * (collStats of a collection the shard never saw) is only a miss. */
static int shard_call(web_build_t *b, web_shard_t *s, const bson_t *cmd, bson_t *reply) {
    ms_error_t e = {0};
    if (!s->reachable) return -1;
    int rc = cfg_shard_command(b->cfg, s->name, cmd, MS_HTTP_SHARD_CALL_MS, reply, &e);
    if (rc == MS_ERR_HOST_UNREACHABLE || rc == MS_ERR_NETWORK_TIMEOUT ||
        rc == MS_ERR_EXCEEDED_TIME_LIMIT || rc == MS_ERR_MAX_TIME_MS_EXPIRED) {
        s->reachable = false;
        snprintf(s->error, sizeof s->error, "%s", e.msg);
    }
    return rc;
}

/* Size, documents and migrations of one shard; the migrations (currentOp's inprog
 * entries of role donor or recipient) are appended to migs with the shard's name. */
static void shard_probe(web_build_t *b, web_shard_t *s, bson_t *migs, int *nmig) {
    bson_t cmd, reply;
    bson_iter_t it, a;
    s->reachable = true;
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "listDatabases", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (shard_call(b, s, &cmd, &reply) == 0) {
        s->data_bytes = bsonx_int64_or(&reply, "totalSize", 0);
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    bson_init(&cmd);
    BSON_APPEND_INT32(&cmd, "currentOp", 1);
    BSON_APPEND_UTF8(&cmd, "$db", "admin");
    if (shard_call(b, s, &cmd, &reply) == 0) {
        if (bson_iter_init_find(&it, &reply, "inprog") && BSON_ITER_HOLDS_ARRAY(&it) &&
            bson_iter_recurse(&it, &a)) {
            while (bson_iter_next(&a)) {
                bson_t op, tagged;
                char k[16];
                if (!bsonx_view_container(&a, &op)) continue;
                const char *role = bsonx_utf8_or(&op, "role", "");
                if (strcmp(role, "donor") != 0 && strcmp(role, "recipient") != 0) continue;
                snprintf(k, sizeof k, "%d", (*nmig)++);
                BSON_APPEND_DOCUMENT_BEGIN(migs, k, &tagged);
                BSON_APPEND_UTF8(&tagged, "shard", s->name);
                bson_concat(&tagged, &op);
                bson_append_document_end(migs, &tagged);
            }
        }
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
    for (int c = 0; c < b->ncolls && s->reachable; c++) {
        char db[CAT_DB_NAME_BYTES_MAX];
        const char *coll = NULL;
        if (s->coll_chunks[c] == 0 && b->colls[c].nchunks > 0 && !b->colls[c].truncated) continue;
        if (cfg_ns_split(b->colls[c].ns, db, sizeof db, &coll, NULL) != 0) continue;
        bson_init(&cmd);
        BSON_APPEND_UTF8(&cmd, "collStats", coll);
        BSON_APPEND_UTF8(&cmd, "$db", db);
        if (shard_call(b, s, &cmd, &reply) == 0) {
            s->coll_bytes[c] = bsonx_int64_or(&reply, "size", 0);
            s->docs += bsonx_int64_or(&reply, "count", 0);
            bson_destroy(&reply);
        }
        bson_destroy(&cmd);
    }
}

/* ---- chunk sizes ---------------------------------------------------------------------- */

/* The memo of measured chunk sizes, kept across builds. Only the collector thread (http.c)
 * builds, so it needs no lock; two tables: the last build's, read, and this build's,
 * filled with what is still listed (so a chunk gone is forgotten). Open addressing on the
 * chunk's fingerprint. */
typedef struct size_memo {
    uint64_t fp;             /* 0: empty slot */
    int64_t bytes;           /* -1: asked, no answer (asked again after WEB_SIZE_TTL_MS) */
    long long at_ms;
} size_memo_t;

static size_memo_t size_tables[2][WEB_SIZE_SLOTS];
static int size_cur;

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ULL;
    return h;
}

/* A chunk's identity: collection uuid, min, shard and version, as a 64-bit FNV-1a hash
 * (a collision is unlikely until some 10^9 chunks; the memo holds at most 2000). */
static uint64_t size_fp(const web_build_t *b, const web_chunk_t *k) {
    uint64_t h = 14695981039346656037ULL;
    const char *shard = b->shards[k->shard].name;
    h = fnv1a(h, b->colls[k->coll].uuid, 16);
    h = fnv1a(h, bson_get_data(&k->min), k->min.len);
    h = fnv1a(h, shard, strlen(shard) + 1);
    h = fnv1a(h, &k->major, sizeof k->major);
    h = fnv1a(h, &k->minor, sizeof k->minor);
    return h ? h : 1;
}

static size_memo_t *size_slot(size_memo_t *t, uint64_t fp) {
    size_t i = fp % WEB_SIZE_SLOTS;
    while (t[i].fp != 0 && t[i].fp != fp) i = (i + 1) % WEB_SIZE_SLOTS;
    return &t[i];
}

/* dataSize {keyPattern, min, max, estimate: true} of one chunk on its shard, as the
 * defragmenter asks it: the bytes of the range's documents there (shardd sums them along
 * the shard-key index; estimate is accepted and answered exactly). */
static void size_probe(web_build_t *b, web_chunk_t *k) {
    web_shard_t *s = &b->shards[k->shard];
    const web_coll_t *co = &b->colls[k->coll];
    char db[CAT_DB_NAME_BYTES_MAX];
    bson_t cmd = BSON_INITIALIZER, reply, key;
    bson_iter_t it;
    if (cfg_ns_split(co->ns, db, sizeof db, NULL, NULL) != 0) return;
    if (!bson_iter_init_find(&it, &co->doc, "key") || !bsonx_view_container(&it, &key)) return;
    BSON_APPEND_UTF8(&cmd, "dataSize", co->ns);
    BSON_APPEND_DOCUMENT(&cmd, "keyPattern", &key);
    BSON_APPEND_DOCUMENT(&cmd, "min", &k->min);
    BSON_APPEND_DOCUMENT(&cmd, "max", &k->max);
    BSON_APPEND_BOOL(&cmd, "estimate", true);
    BSON_APPEND_UTF8(&cmd, "$db", db);
    k->probed_at = time_mono_ms();
    k->measured = -1;        /* no answer: drawn from the catalog or its share until next time */
    if (shard_call(b, s, &cmd, &reply) == 0) {
        k->measured = bsonx_int64_or(&reply, "size", 0);
        bson_destroy(&reply);
    }
    bson_destroy(&cmd);
}

/* Each listed chunk takes its last measure from the memo; up to WEB_SIZE_PROBES chunks
 * are measured now: the never asked first, then those asked more than WEB_SIZE_TTL_MS ago
 * (both in catalog order; a chunk whose shard did not answer waits its turn like the
 * others, so a few failing ones cannot starve the rest). What is known then goes into the
 * next build's table. */
static void chunk_sizes(web_build_t *b) {
    size_memo_t *old = size_tables[size_cur], *fresh = size_tables[1 - size_cur];
    long long now = time_mono_ms();
    int probes = 0;
    memset(fresh, 0, sizeof size_tables[0]);
    for (int i = 0; i < b->nchunks; i++) {
        web_chunk_t *k = &b->chunks[i];
        if (k->shard < 0) continue;
        k->fp = size_fp(b, k);
        size_memo_t *m = size_slot(old, k->fp);
        if (m->fp) {
            k->measured = m->bytes;
            k->probed_at = m->at_ms;
        }
    }
    for (int pass = 0; pass < 2 && probes < WEB_SIZE_PROBES; pass++) {
        for (int i = 0; i < b->nchunks && probes < WEB_SIZE_PROBES; i++) {
            web_chunk_t *k = &b->chunks[i];
            if (k->shard < 0 || !b->shards[k->shard].reachable) continue;
            if (pass == 0 ? k->probed_at != 0 : k->probed_at == 0 || now - k->probed_at < WEB_SIZE_TTL_MS)
                continue;
            size_probe(b, k);
            probes++;
        }
    }
    for (int i = 0; i < b->nchunks; i++) {
        web_chunk_t *k = &b->chunks[i];
        if (k->shard < 0 || k->probed_at == 0) continue;
        size_memo_t *m = size_slot(fresh, k->fp);
        *m = (size_memo_t){k->fp, k->measured, k->probed_at};
    }
    size_cur = 1 - size_cur;
}

/* ---- sections ------------------------------------------------------------------------ */

static void append_cluster(web_build_t *b, bson_t *out) {
    bson_t sec, arr, d, z;
    bson_iter_t it;
    int64_t nsh = 0, ndb = 0, nco = 0, nch = 0;
    ms_error_t e = {0};
    cat_counts(b->cfg->cat, &nsh, &ndb, &nco, &nch, &e);
    BSON_APPEND_DOCUMENT_BEGIN(out, "cluster", &sec);
    BSON_APPEND_UTF8(&sec, "configsvr", b->cfg->url);
    BSON_APPEND_INT64(&sec, "databases", ndb);
    BSON_APPEND_INT64(&sec, "collections", nco);
    BSON_APPEND_INT64(&sec, "chunks", nch);
    BSON_APPEND_ARRAY_BEGIN(&sec, "shards", &arr);
    for (int i = 0; i < b->nshards; i++) {
        web_shard_t *s = &b->shards[i];
        char k[16];
        int64_t chunks = 0;
        for (int c = 0; c < b->ncolls; c++) chunks += s->coll_chunks[c];
        snprintf(k, sizeof k, "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &d);
        BSON_APPEND_UTF8(&d, "name", s->name);
        BSON_APPEND_UTF8(&d, "url", bsonx_utf8_or(&s->doc, "host", ""));
        BSON_APPEND_INT32(&d, "state", (int32_t)bsonx_int64_or(&s->doc, "state", 0));
        BSON_APPEND_BOOL(&d, "draining", bson_iter_init_find(&it, &s->doc, "draining") && bsonx_truthy(&it));
        BSON_APPEND_ARRAY_BEGIN(&d, "zones", &z);
        if (bson_iter_init_find(&it, &s->doc, "tags") && BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_t tags;
            if (bsonx_view_container(&it, &tags)) bson_concat(&z, &tags);
        }
        bson_append_array_end(&d, &z);
        if (bson_iter_init_find(&it, &s->doc, "maxSize")) BSON_APPEND_INT64(&d, "maxSizeMB", bsonx_int64_or(&s->doc, "maxSize", 0));
        else BSON_APPEND_NULL(&d, "maxSizeMB");
        BSON_APPEND_BOOL(&d, "reachable", s->reachable);
        if (!s->reachable) BSON_APPEND_UTF8(&d, "error", s->error);
        BSON_APPEND_INT64(&d, "dataSize", s->data_bytes);
        BSON_APPEND_INT64(&d, "docCount", s->docs);
        BSON_APPEND_INT64(&d, "chunks", chunks);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(&sec, &arr);
    bson_append_document_end(out, &sec);
}

/* A chunk's size and where it comes from: its dataSize measure ("dataSize"), else the
 * catalog's estimatedDataSizeBytes that defragmentation keeps ("catalog"), else the
 * collection's bytes on that shard shared evenly among its chunks there ("share"). */
static int64_t chunk_size(const web_build_t *b, const web_chunk_t *k, const char **from) {
    if (k->measured >= 0) {
        *from = "dataSize";
        return k->measured;
    }
    if (k->est >= 0) {
        *from = "catalog";
        return k->est;
    }
    *from = "share";
    if (k->shard < 0) return 0;
    const web_shard_t *s = &b->shards[k->shard];
    int n = s->coll_chunks[k->coll];
    return n > 0 ? s->coll_bytes[k->coll] / n : 0;
}

/* The zone ranges of collection ns (config.tags, in min order) as {tag, min, max}. */
static void append_zone_ranges(const web_build_t *b, const char *ns, bson_t *d) {
    bson_t arr, z, v;
    bson_iter_t it, f;
    int n = 0;
    BSON_APPEND_ARRAY_BEGIN(d, "zones", &arr);
    if (bson_iter_init(&it, &b->tags))
        while (bson_iter_next(&it)) {
            bson_t tag;
            char k[16];
            if (!bsonx_view_container(&it, &tag) || strcmp(bsonx_utf8_or(&tag, "ns", ""), ns) != 0) continue;
            snprintf(k, sizeof k, "%d", n++);
            BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &z);
            BSON_APPEND_UTF8(&z, "tag", bsonx_utf8_or(&tag, "tag", ""));
            if (bson_iter_init_find(&f, &tag, "min") && bsonx_view_container(&f, &v)) BSON_APPEND_DOCUMENT(&z, "min", &v);
            if (bson_iter_init_find(&f, &tag, "max") && bsonx_view_container(&f, &v)) BSON_APPEND_DOCUMENT(&z, "max", &v);
            bson_append_document_end(&arr, &z);
        }
    bson_append_array_end(d, &arr);
}

static void append_collections(web_build_t *b, bson_t *out) {
    bson_t sec, arr, d, ch, c;
    bson_iter_t it;
    BSON_APPEND_DOCUMENT_BEGIN(out, "collections", &sec);
    BSON_APPEND_INT32(&sec, "collectionsTotal", b->ncolls_total);
    BSON_APPEND_INT32(&sec, "chunksReturned", b->nchunks);
    BSON_APPEND_INT64(&sec, "chunksTotal", b->chunks_total);
    BSON_APPEND_BOOL(&sec, "truncated", b->chunks_cut || b->ncolls_total > b->ncolls);
    BSON_APPEND_INT32(&sec, "chunksMax", MS_HTTP_CHUNKS_MAX);
    BSON_APPEND_ARRAY_BEGIN(&sec, "collections", &arr);
    for (int i = 0; i < b->ncolls; i++) {
        web_coll_t *co = &b->colls[i];
        char k[16];
        int64_t bytes = 0;
        for (int s = 0; s < b->nshards; s++) bytes += b->shards[s].coll_bytes[i];
        snprintf(k, sizeof k, "%d", i);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &d);
        BSON_APPEND_UTF8(&d, "ns", co->ns);
        if (bson_iter_init_find(&it, &co->doc, "key") && BSON_ITER_HOLDS_DOCUMENT(&it)) {
            bson_t key;
            if (bsonx_view_container(&it, &key)) BSON_APPEND_DOCUMENT(&d, "key", &key);
        }
        BSON_APPEND_BOOL(&d, "noBalance", bson_iter_init_find(&it, &co->doc, "noBalance") && bsonx_truthy(&it));
        BSON_APPEND_BOOL(&d, "defragmentCollection",
                         bson_iter_init_find(&it, &co->doc, "defragmentCollection") && bsonx_truthy(&it));
        if (bson_iter_init_find(&it, &co->doc, "defragmentationPhase") && BSON_ITER_HOLDS_UTF8(&it))
            BSON_APPEND_UTF8(&d, "defragmentationPhase", bson_iter_utf8(&it, NULL));
        append_zone_ranges(b, co->ns, &d);
        BSON_APPEND_INT64(&d, "dataSize", bytes);
        BSON_APPEND_INT64(&d, "chunkCount", co->nchunks);
        BSON_APPEND_BOOL(&d, "truncated", co->truncated);
        BSON_APPEND_ARRAY_BEGIN(&d, "chunks", &ch);
        int n = 0;
        for (int j = 0; j < b->nchunks; j++) {
            web_chunk_t *kk = &b->chunks[j];
            char key[16], ver[32];
            const char *from;
            if (kk->coll != i) continue;
            snprintf(key, sizeof key, "%d", n++);
            snprintf(ver, sizeof ver, "%u|%u", kk->major, kk->minor);
            BSON_APPEND_DOCUMENT_BEGIN(&ch, key, &c);
            BSON_APPEND_DOCUMENT(&c, "min", &kk->min);
            BSON_APPEND_DOCUMENT(&c, "max", &kk->max);
            BSON_APPEND_UTF8(&c, "shard", kk->shard >= 0 ? b->shards[kk->shard].name : "");
            BSON_APPEND_UTF8(&c, "version", ver);
            BSON_APPEND_BOOL(&c, "jumbo", kk->jumbo);
            BSON_APPEND_INT64(&c, "sizeEstimate", chunk_size(b, kk, &from));
            BSON_APPEND_UTF8(&c, "sizeFrom", from);
            BSON_APPEND_BOOL(&c, "sizeFromShare", strcmp(from, "share") == 0);
            if (kk->measured >= 0) BSON_APPEND_INT64(&c, "sizeAgeMS", time_mono_ms() - kk->probed_at);
            bson_append_document_end(&ch, &c);
        }
        bson_append_array_end(&d, &ch);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(&sec, &arr);
    bson_append_document_end(out, &sec);
}

/* A donor phase (mig_donor.c) with the number of its timed step of moveChunk.from
 * (docs/how-a-migration-works.md: "step N of 6"; 0 for completing and done, after them). */
static const struct {
    const char *phase;
    int number;
} donor_steps[] = {{"checks", 1}, {"startClone", 2}, {"clone", 3}, {"criticalSection", 4},
                   {"commitOnRecipient", 5}, {"commitOnConfig", 6}, {"completing", 0}, {"done", 0}};

static void append_step(bson_t *d, const char *phase) {
    int number = 0;
    for (size_t i = 0; i < sizeof donor_steps / sizeof donor_steps[0]; i++)
        if (strcmp(phase, donor_steps[i].phase) == 0) number = donor_steps[i].number;
    BSON_APPEND_UTF8(d, "step", phase);
    BSON_APPEND_INT32(d, "stepNumber", number);
}

/* The migrations committed in the last WEB_RECENT_MS (the donor's moveChunk.commit
 * changelog entries, newest first), so that the page can show a move that began and
 * ended between two of its polls. */
typedef struct recent_arg {
    bson_t *arr;
    int n;
    long long since_ms;
} recent_arg_t;

static int recent_row(void *arg, const bson_t *doc) {
    recent_arg_t *a = arg;
    bson_iter_t it, f;
    bson_t det, v, d;
    char k[16];
    if (strcmp(bsonx_utf8_or(doc, "what", ""), "moveChunk.commit") != 0) return 0;
    if (!bson_iter_init_find(&it, doc, "time") || !BSON_ITER_HOLDS_DATE_TIME(&it)) return 0;
    long long t = bson_iter_date_time(&it);
    if (t < a->since_ms) return 1;  /* newest first: the rest are older still */
    if (!bson_iter_init_find(&it, doc, "details") || !bsonx_view_container(&it, &det)) return 0;
    snprintf(k, sizeof k, "%d", a->n++);
    BSON_APPEND_DOCUMENT_BEGIN(a->arr, k, &d);
    BSON_APPEND_UTF8(&d, "ns", bsonx_utf8_or(doc, "ns", ""));
    BSON_APPEND_UTF8(&d, "from", bsonx_utf8_or(&det, "from", ""));
    BSON_APPEND_UTF8(&d, "to", bsonx_utf8_or(&det, "to", ""));
    if (bson_iter_init_find(&f, &det, "min") && bsonx_view_container(&f, &v)) BSON_APPEND_DOCUMENT(&d, "min", &v);
    if (bson_iter_init_find(&f, &det, "max") && bsonx_view_container(&f, &v)) BSON_APPEND_DOCUMENT(&d, "max", &v);
    BSON_APPEND_DATE_TIME(&d, "committedAt", t);
    BSON_APPEND_INT64(&d, "agoMS", time_now_ms() - t);
    BSON_APPEND_INT64(&d, "writePauseMS", bsonx_int64_or(&det, "writePauseMS", -1));
    bson_append_document_end(a->arr, &d);
    return 0;
}

static void append_recent(web_build_t *b, bson_t *sec) {
    bson_t arr;
    ms_error_t e = {0};
    BSON_APPEND_ARRAY_BEGIN(sec, "recent", &arr);
    recent_arg_t ra = {&arr, 0, time_now_ms() - WEB_RECENT_MS};
    cat_log_tail(b->cfg->cat, "changelog", MS_HTTP_CHANGELOG_MAX, recent_row, &ra, &e);
    bson_append_array_end(sec, &arr);
}

/* One entry per migration: the donor's view (the progress), with the recipient's state
 * added; a recipient seen without its donor (the donor silent) is listed on its own. */
static void append_migrations(web_build_t *b, const bson_t *ops, bson_t *out) {
    bson_t sec, arr, d, errs;
    bson_iter_t it, jt;
    int n = 0;
    BSON_APPEND_DOCUMENT_BEGIN(out, "migrations", &sec);
    BSON_APPEND_ARRAY_BEGIN(&sec, "inprog", &arr);
    for (int pass = 0; pass < 2; pass++) {
        if (!bson_iter_init(&it, ops)) break;
        while (bson_iter_next(&it)) {
            bson_t op, other;
            char k[16];
            if (!bsonx_view_container(&it, &op)) continue;
            const char *role = bsonx_utf8_or(&op, "role", "");
            const char *id = bsonx_utf8_or(&op, "migrationId", "");
            bool found = false;
            if (pass == 0 && strcmp(role, "donor") != 0) continue;
            if (pass == 1) {
                if (strcmp(role, "recipient") != 0) continue;
                /* listed with its donor already? */
                bson_iter_t kt;
                bool dup = false;
                if (bson_iter_init(&kt, ops))
                    while (bson_iter_next(&kt)) {
                        bson_t o2;
                        if (bsonx_view_container(&kt, &o2) && !strcmp(bsonx_utf8_or(&o2, "role", ""), "donor") &&
                            !strcmp(bsonx_utf8_or(&o2, "migrationId", ""), id))
                            dup = true;
                    }
                if (dup) continue;
            }
            snprintf(k, sizeof k, "%d", n++);
            BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &d);
            bson_concat(&d, &op);
            const char *phase = bsonx_utf8_or(&op, "phase", "");
            if (pass == 0) append_step(&d, phase);  /* a recipient alone: its state says where it is */
            if (pass == 0 && bson_iter_init(&jt, ops)) {
                while (!found && bson_iter_next(&jt)) {
                    if (bsonx_view_container(&jt, &other) && !strcmp(bsonx_utf8_or(&other, "role", ""), "recipient") &&
                        !strcmp(bsonx_utf8_or(&other, "migrationId", ""), id)) {
                        BSON_APPEND_DOCUMENT(&d, "recipient", &other);
                        found = true;
                    }
                }
            }
            bson_append_document_end(&arr, &d);
        }
    }
    bson_append_array_end(&sec, &arr);
    append_recent(b, &sec);
    BSON_APPEND_ARRAY_BEGIN(&sec, "shardErrors", &errs);
    int ne = 0;
    for (int i = 0; i < b->nshards; i++) {
        if (b->shards[i].reachable) continue;
        char k[16];
        snprintf(k, sizeof k, "%d", ne++);
        BSON_APPEND_DOCUMENT_BEGIN(&errs, k, &d);
        BSON_APPEND_UTF8(&d, "shard", b->shards[i].name);
        BSON_APPEND_UTF8(&d, "errmsg", b->shards[i].error);
        bson_append_document_end(&errs, &d);
    }
    bson_append_array_end(&sec, &errs);
    bson_append_document_end(out, &sec);
}

/* The balancer: balancerStatus, the last rounds (config.actionlog balancer.round, newest
 * first) and balancerExplain of each shown collection. Both commands are called through
 * their handlers (cmd_status.c, cmd_bal.c) with a context of our own: the same answers a
 * client gets, without a trip through our own RPC server. balancerExplain under the
 * dataSize policy asks every shard for its data size with the long default deadline, so
 * it is skipped while a shard is silent (explainSkipped says why). */
static void append_balancer(web_build_t *b, bool all_reachable, bson_t *out) {
    bson_t sec, st, arr, d;
    ms_error_t e = {0};
    cmd_ctx_t ctx;
    BSON_APPEND_DOCUMENT_BEGIN(out, "balancer", &sec);
    memset(&ctx, 0, sizeof ctx);
    ctx.app = b->cfg;
    bson_init(&st);
    if (cfg_cmd_balancer_status(&ctx, &st, &e) == 0) bson_concat(&sec, &st);
    bson_destroy(&st);
    BSON_APPEND_ARRAY_BEGIN(&sec, "rounds", &arr);
    tail_arg_t ta = {&arr, 0, "balancer.round"};
    memset(&e, 0, sizeof e);
    cat_log_tail(b->cfg->cat, "actionlog", MS_HTTP_ROUNDS_MAX, tail_row, &ta, &e);
    bson_append_array_end(&sec, &arr);
    if (!all_reachable) BSON_APPEND_UTF8(&sec, "explainSkipped", "a shard did not answer");
    BSON_APPEND_ARRAY_BEGIN(&sec, "explain", &arr);
    for (int i = 0; all_reachable && i < b->ncolls; i++) {
        bson_t req = BSON_INITIALIZER, rep = BSON_INITIALIZER;
        char k[16];
        BSON_APPEND_UTF8(&req, "balancerExplain", b->colls[i].ns);
        memset(&e, 0, sizeof e);
        if (bson_iter_init(&ctx.arg, &req) && bson_iter_next(&ctx.arg)) {
            ctx.req = &req;
            ctx.name = "balancerExplain";
            snprintf(k, sizeof k, "%d", i);
            BSON_APPEND_DOCUMENT_BEGIN(&arr, k, &d);
            BSON_APPEND_UTF8(&d, "ns", b->colls[i].ns);
            if (cfg_cmd_balancer_explain(&ctx, &rep, &e) == 0) {
                bson_concat(&d, &rep);
            } else {
                BSON_APPEND_INT32(&d, "code", e.code);
                BSON_APPEND_UTF8(&d, "errmsg", e.msg);
            }
            bson_append_document_end(&arr, &d);
        }
        bson_destroy(&rep);
        bson_destroy(&req);
    }
    bson_append_array_end(&sec, &arr);
    bson_append_document_end(out, &sec);
}

static void append_changelog(web_build_t *b, bson_t *out) {
    bson_t sec, arr;
    ms_error_t e = {0};
    BSON_APPEND_DOCUMENT_BEGIN(out, "changelog", &sec);
    BSON_APPEND_ARRAY_BEGIN(&sec, "entries", &arr);
    tail_arg_t ta = {&arr, 0, NULL};
    cat_log_tail(b->cfg->cat, "changelog", MS_HTTP_CHANGELOG_MAX, tail_row, &ta, &e);
    bson_append_array_end(&sec, &arr);
    bson_append_document_end(out, &sec);
}

static void build_free(web_build_t *b) {
    for (int i = 0; i < b->nshards; i++) {
        bson_destroy(&b->shards[i].doc);
        free(b->shards[i].coll_bytes);
        free(b->shards[i].coll_chunks);
    }
    for (int i = 0; i < b->ncolls; i++) bson_destroy(&b->colls[i].doc);
    for (int i = 0; i < b->nchunks; i++) {
        bson_destroy(&b->chunks[i].min);
        bson_destroy(&b->chunks[i].max);
    }
    bson_destroy(&b->tags);
    free(b->shards);
    free(b->colls);
    free(b->chunks);
}

void cfg_web_state_build(cfg_t *cfg, bson_t *out) {
    web_build_t b;
    bson_t ops = BSON_INITIALIZER;
    ms_error_t e = {0};
    int nmig = 0;
    bool all_reachable = true;
    long long t0 = time_mono_ms();
    memset(&b, 0, sizeof b);
    b.cfg = cfg;
    b.shards = calloc(WEB_SHARDS_MAX, sizeof *b.shards);
    b.colls = calloc(MS_HTTP_COLLS_MAX, sizeof *b.colls);
    b.chunks = calloc(MS_HTTP_CHUNKS_MAX, sizeof *b.chunks);
    if (!b.shards || !b.colls || !b.chunks) abort();
    if (cat_config_scan(cfg->cat, "shards", shard_row, &b, &e) != 0)
        log_warn("web state shards failed errmsg=%s", log_str(e.msg));
    for (int i = 0; i < b.nshards; i++) {
        b.shards[i].coll_bytes = calloc(MS_HTTP_COLLS_MAX, sizeof *b.shards[i].coll_bytes);
        b.shards[i].coll_chunks = calloc(MS_HTTP_COLLS_MAX, sizeof *b.shards[i].coll_chunks);
        if (!b.shards[i].coll_bytes || !b.shards[i].coll_chunks) abort();
    }
    if (cat_config_scan(cfg->cat, "collections", coll_row, &b, &e) != 0 ||
        cat_chunk_counts(cfg->cat, NULL, chunk_count_row, &b, &e) != 0 || chunk_pages(&b, &e) != 0)
        log_warn("web state catalog read failed errmsg=%s", log_str(e.msg));
    bson_init(&b.tags);
    if (cat_config_scan(cfg->cat, "tags", tag_row, &b, &e) != 0)
        log_warn("web state zones read failed errmsg=%s", log_str(e.msg));
    for (int i = 0; i < b.nshards; i++) {
        shard_probe(&b, &b.shards[i], &ops, &nmig);
        if (!b.shards[i].reachable) all_reachable = false;
    }
    chunk_sizes(&b);
    BSON_APPEND_DATE_TIME(out, "builtAt", time_now_ms());
    append_cluster(&b, out);
    append_collections(&b, out);
    append_migrations(&b, &ops, out);
    append_balancer(&b, all_reachable, out);
    append_changelog(&b, out);
    BSON_APPEND_INT64(out, "buildMS", time_mono_ms() - t0);
    bson_destroy(&ops);
    build_free(&b);
}
