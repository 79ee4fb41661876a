/*
 * xfer.c — a migration's write capture on the donor shard (bin/shardd): MongoDB's
 * MigrationChunkClonerSource "xfer mods" (notes §1.3). While a chunk is being cloned, every
 * committed insert, update and delete of the collection whose old or new shard key lies in
 * the moving range records the document's _id; _transferMods hands those ids out (deletes
 * as ids, the rest re-read as current documents), so the recipient converges on the donor.
 *
 * The store calls the observer for each document inside the writing transaction and then
 * tells it how the transaction ended, still under the writer lock (store.c write_txn). Ids
 * seen inside a transaction are staged and join the pending lists only at COMMIT; a
 * ROLLBACK drops them. Publishing before COMMIT would let _transferMods read a document
 * whose write is not visible yet and the recipient would miss that write. There is one
 * writer at a time, so one staging area suffices.
 *
 * Memory is bounded (bytes_max, MS_MIG_CAPTURE_BYTES_MAX by default): past it the capture
 * fails with ExceededMemoryLimit, drops everything it holds, and the migration aborts; the
 * user's write that crossed the bound still succeeds (the observer cannot fail a write).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "common/rtable.h"
#include "shardd/shardd.h"

/* One captured _id: the BSON bytes of {_id: value}. */
typedef struct xid {
    buf_t id;
    uint64_t h;
    struct xid *hnext;   /* hash chain */
    struct xid *next;    /* list order */
} xid_t;

/* Ids in capture order, de-duplicated by bytes through a chained hash table. */
typedef struct xlist {
    xid_t *head, *tail;
    int64_t n;
    xid_t **tab;
    size_t ntab;         /* a power of two, or 0 before the first id */
} xlist_t;

struct xfer {
    store_t *st;
    char ns[MS_NS_BYTES_MAX + 1];
    buf_t min, max;                 /* encoded shard keys, [min, max) */
    size_t bytes_max;
    pthread_mutex_t mu;             /* everything below (the observer runs under the
                                     * writer lock too, take/putback only under mu) */
    xlist_t del, reload;            /* committed, waiting for _transferMods */
    xlist_t sdel, sreload;          /* staged by the open write transaction */
    size_t bytes;                   /* id bytes held in all four lists */
    size_t sbytes;                  /* ... of which staged */
    bool failed;
    ms_error_t ferr;
    /* The range's digest since the last xfer_digest_reset: documents in it and the sum of
     * their hashes, published at commit (d*) from what the open transaction staged (s*). */
    int64_t dcount, scount;
    uint64_t dsum, ssum;
};

/* ---- the id lists ------------------------------------------------------------------- */

static uint64_t id_hash(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ULL;  /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static xid_t *xl_find(const xlist_t *l, const buf_t *id, uint64_t h) {
    if (!l->ntab) return NULL;
    for (xid_t *e = l->tab[h & (l->ntab - 1)]; e; e = e->hnext)
        if (e->h == h && e->id.len == id->len && memcmp(e->id.data, id->data, id->len) == 0)
            return e;
    return NULL;
}

static void xl_hash_in(xlist_t *l, xid_t *e) {
    size_t b;
    if ((size_t)l->n + 1 > l->ntab) {
        /* Grow to keep chains short: at most one id per bucket on average. */
        size_t nt = l->ntab ? l->ntab * 2 : 64;
        xid_t **tab = calloc(nt, sizeof *tab);
        ASSERT(tab != NULL);
        for (size_t i = 0; i < l->ntab; i++)
            for (xid_t *o = l->tab[i], *nx; o; o = nx) {
                nx = o->hnext;
                o->hnext = tab[o->h & (nt - 1)];
                tab[o->h & (nt - 1)] = o;
            }
        free(l->tab);
        l->tab = tab;
        l->ntab = nt;
    }
    b = e->h & (l->ntab - 1);
    e->hnext = l->tab[b];
    l->tab[b] = e;
}

static void xl_hash_out(xlist_t *l, xid_t *e) {
    xid_t **pp = &l->tab[e->h & (l->ntab - 1)];
    while (*pp != e) pp = &(*pp)->hnext;
    *pp = e->hnext;
}

/* Adds e at the back (front when at_front); a duplicate is freed: false. Takes e. */
static bool xl_add(xlist_t *l, xid_t *e, bool at_front) {
    if (xl_find(l, &e->id, e->h)) {
        buf_free(&e->id);
        free(e);
        return false;
    }
    xl_hash_in(l, e);
    if (at_front) {
        e->next = l->head;
        l->head = e;
        if (!l->tail) l->tail = e;
    } else {
        e->next = NULL;
        if (l->tail) l->tail->next = e; else l->head = e;
        l->tail = e;
    }
    l->n++;
    return true;
}

static xid_t *xl_pop(xlist_t *l) {
    xid_t *e = l->head;
    if (!e) return NULL;
    l->head = e->next;
    if (!l->head) l->tail = NULL;
    xl_hash_out(l, e);
    l->n--;
    return e;
}

static void xl_free(xlist_t *l) {
    for (xid_t *e = l->head, *nx; e; e = nx) {
        nx = e->next;
        buf_free(&e->id);
        free(e);
    }
    free(l->tab);
    memset(l, 0, sizeof *l);
}

static xid_t *xid_new(const uint8_t *p, size_t n) {
    xid_t *e = calloc(1, sizeof *e);
    ASSERT(e != NULL);
    buf_put(&e->id, p, n);
    e->h = id_hash(p, n);
    return e;
}

/* ---- capture ------------------------------------------------------------------------ */

/* Encoded keys order as the sk column does (rtable_bytes_cmp: SQLite's BLOB order). */
static int key_cmp(const buf_t *a, const buf_t *b) {
    return rtable_bytes_cmp(a->data, a->len, b->data, b->len);
}

static bool in_range(const xfer_t *x, const buf_t *sk) {
    return sk && key_cmp(sk, &x->min) >= 0 && key_cmp(sk, &x->max) < 0;
}

/* Under mu: gives up, drops every id held. */
static void fail_locked(xfer_t *x) {
    x->failed = true;
    err_set(&x->ferr, MS_ERR_EXCEEDED_MEMORY_LIMIT,
            "migration write capture of %s exceeded %zu bytes of queued _ids "
            "(MS_MIG_CAPTURE_BYTES_MAX): too many writes to the moving range; the migration "
            "is aborted", x->ns, x->bytes_max);
    log_warn("write capture failed ns=%s bytes_max=%zu del=%lld reload=%lld", x->ns,
             x->bytes_max, (long long)x->del.n, (long long)x->reload.n);
    xl_free(&x->del);
    xl_free(&x->reload);
    xl_free(&x->sdel);
    xl_free(&x->sreload);
    x->bytes = x->sbytes = 0;
}

static void capture(xfer_t *x, const bson_t *doc, bool del) {
    bson_iter_t it;
    bson_t idd;
    xid_t *e;
    xlist_t *l;
    if (!bson_iter_init_find(&it, doc, "_id")) return;  /* the write path refuses these */
    bson_init(&idd);
    bsonx_append_iter(&idd, "_id", &it);
    e = xid_new(bson_get_data(&idd), idd.len);
    bson_destroy(&idd);
    pthread_mutex_lock(&x->mu);
    if (x->failed) {
        buf_free(&e->id);
        free(e);
    } else {
        size_t n = e->id.len;
        l = del ? &x->sdel : &x->sreload;
        if (xl_add(l, e, false)) {
            x->bytes += n;
            x->sbytes += n;
            if (x->bytes > x->bytes_max) fail_locked(x);
        }
    }
    pthread_mutex_unlock(&x->mu);
}

/* The store's write observer (under the writer lock, inside the transaction). */
uint64_t xfer_doc_hash(const uint8_t *p, size_t n) {
    /* Eight bytes at a time (a multiply-xorshift mix per word, the tail zero-padded):
     * the digest hashes every document of a range once, so speed matters; it only has to
     * make a lost or altered document show, not resist an adversary. */
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = (h ^ w) * 0x94D049BB133111EBull;
        h ^= h >> 29;
    }
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 32);
}

static void xfer_observe(void *arg, const char *ns, const bson_t *old_doc,
                         const bson_t *new_doc, const buf_t *old_sk, const buf_t *new_sk) {
    xfer_t *x = arg;
    if (strcmp(ns, x->ns) != 0) return;
    {
        bool o = old_doc && in_range(x, old_sk), n = new_doc && in_range(x, new_sk);
        if (o || n) {
            pthread_mutex_lock(&x->mu);
            if (o) {
                x->scount--;
                x->ssum -= xfer_doc_hash(bson_get_data(old_doc), old_doc->len);
            }
            if (n) {
                x->scount++;
                x->ssum += xfer_doc_hash(bson_get_data(new_doc), new_doc->len);
            }
            pthread_mutex_unlock(&x->mu);
        }
    }
    if (new_doc && in_range(x, new_sk))
        capture(x, new_doc, false);         /* insert, or update landing in the range */
    else if (old_doc && in_range(x, old_sk))
        capture(x, old_doc, true);          /* delete, or update moving the key out */
}

/* Moves every staged id of s into l (de-duplicated; a duplicate's bytes are released). */
static void merge_locked(xfer_t *x, xlist_t *l, xlist_t *s) {
    xid_t *e;
    while ((e = xl_pop(s)) != NULL) {
        size_t n = e->id.len;
        x->sbytes -= n;
        if (!xl_add(l, e, false)) x->bytes -= n;
    }
    xl_free(s);
}

static void drop_staged_locked(xfer_t *x, xlist_t *s) {
    for (xid_t *e = s->head; e; e = e->next) {
        x->bytes -= e->id.len;
        x->sbytes -= e->id.len;
    }
    xl_free(s);
}

/* The store's end-of-transaction hook (still under the writer lock). */
static void xfer_txn_end(void *arg, bool committed) {
    xfer_t *x = arg;
    pthread_mutex_lock(&x->mu);
    if (committed) {
        x->dcount += x->scount;
        x->dsum += x->ssum;
    }
    x->scount = 0;
    x->ssum = 0;
    if (committed) {
        merge_locked(x, &x->del, &x->sdel);
        merge_locked(x, &x->reload, &x->sreload);
    } else {
        drop_staged_locked(x, &x->sdel);
        drop_staged_locked(x, &x->sreload);
    }
    pthread_mutex_unlock(&x->mu);
}

int xfer_start(store_t *st, const char *ns, const buf_t *min, const buf_t *max,
               size_t bytes_max, xfer_t **out, ms_error_t *err) {
    xfer_t *x;
    int rc;
    if (strlen(ns) > MS_NS_BYTES_MAX)
        return err_set(err, MS_ERR_INVALID_NAMESPACE, "namespace too long");
    x = calloc(1, sizeof *x);
    ASSERT(x != NULL);
    x->st = st;
    strcpy(x->ns, ns);
    buf_put(&x->min, min->data, min->len);
    buf_put(&x->max, max->data, max->len);
    x->bytes_max = bytes_max;
    pthread_mutex_init(&x->mu, NULL);
    if ((rc = store_set_write_observer(st, xfer_observe, xfer_txn_end, x, err)) != 0) {
        err_prefix(err, "cannot start the write capture of %s: ", ns);
        pthread_mutex_destroy(&x->mu);
        buf_free(&x->min);
        buf_free(&x->max);
        free(x);
        return rc;
    }
    log_info("write capture started ns=%s bytes_max=%zu", ns, bytes_max);
    *out = x;
    return 0;
}

void xfer_stop(store_t *st, xfer_t *x) {
    if (!x) return;
    /* Takes the writer lock: no observer call of x runs after this returns. */
    store_set_write_observer(st, NULL, NULL, NULL, NULL);
    log_info("write capture stopped ns=%s del=%lld reload=%lld", x->ns, (long long)x->del.n,
             (long long)x->reload.n);
    xl_free(&x->del);
    xl_free(&x->reload);
    xl_free(&x->sdel);
    xl_free(&x->sreload);
    buf_free(&x->min);
    buf_free(&x->max);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

/* Appends e's bytes to the growing array v (moved out of e, which is freed). */
static void take_one(xfer_t *x, xid_t *e, buf_t **v, int *n) {
    *v = xrealloc(*v, (size_t)(*n + 1) * sizeof **v);
    (*v)[*n] = e->id;          /* moves the bytes */
    (*n)++;
    x->bytes -= e->id.len;
    free(e);
}

void xfer_take(xfer_t *x, size_t max_bytes, buf_t **del, int *ndel, buf_t **reload,
               int *nreload) {
    size_t used = 0;
    *del = *reload = NULL;
    *ndel = *nreload = 0;
    pthread_mutex_lock(&x->mu);
    while (x->del.head && *ndel < INT32_MAX &&
           (*ndel == 0 || used + x->del.head->id.len <= max_bytes)) {
        used += x->del.head->id.len;
        take_one(x, xl_pop(&x->del), del, ndel);
    }
    /* Reloads only after every delete went: a reload of an id whose delete is still
     * pending would otherwise reach the recipient before it. */
    while (!x->del.head && x->reload.head && *nreload < INT32_MAX &&
           (*ndel + *nreload == 0 || used + x->reload.head->id.len <= max_bytes)) {
        used += x->reload.head->id.len;
        take_one(x, xl_pop(&x->reload), reload, nreload);
    }
    pthread_mutex_unlock(&x->mu);
}

void xfer_ids_free(buf_t *v, int n) {
    for (int i = 0; i < n; i++) buf_free(&v[i]);
    free(v);
}

static void putback_locked(xfer_t *x, xlist_t *l, buf_t *v, int n) {
    /* Backwards, each to the front: v keeps its order, ahead of ids captured since. */
    for (int i = n - 1; i >= 0; i--) {
        xid_t *e = calloc(1, sizeof *e);
        size_t len = v[i].len;
        ASSERT(e != NULL);
        e->id = v[i];
        e->h = id_hash(e->id.data, e->id.len);
        memset(&v[i], 0, sizeof v[i]);
        if (xl_add(l, e, true)) x->bytes += len;
    }
}

void xfer_putback(xfer_t *x, buf_t *del, int ndel, buf_t *reload, int nreload) {
    pthread_mutex_lock(&x->mu);
    if (!x->failed) {
        putback_locked(x, &x->del, del, ndel);
        putback_locked(x, &x->reload, reload, nreload);
        if (x->bytes > x->bytes_max) fail_locked(x);
    }
    pthread_mutex_unlock(&x->mu);
    xfer_ids_free(del, ndel);        /* what was not moved (failed: everything) */
    xfer_ids_free(reload, nreload);
}

void xfer_pending(xfer_t *x, int64_t *ndel, int64_t *nreload, int64_t *bytes) {
    pthread_mutex_lock(&x->mu);
    *ndel = x->del.n;
    *nreload = x->reload.n;
    *bytes = (int64_t)(x->bytes - x->sbytes);
    pthread_mutex_unlock(&x->mu);
}

int xfer_failed(xfer_t *x, ms_error_t *err) {
    int rc = 0;
    pthread_mutex_lock(&x->mu);
    if (x->failed) {
        rc = x->ferr.code;
        if (err) *err = x->ferr;
    }
    pthread_mutex_unlock(&x->mu);
    return rc;
}

void xfer_digest_reset(void *arg) {
    xfer_t *x = arg;
    pthread_mutex_lock(&x->mu);
    x->dcount = x->scount = 0;
    x->dsum = x->ssum = 0;
    pthread_mutex_unlock(&x->mu);
}

void xfer_digest(xfer_t *x, int64_t *count, uint64_t *sum) {
    pthread_mutex_lock(&x->mu);
    *count = x->dcount;
    *sum = x->dsum;
    pthread_mutex_unlock(&x->mu);
}
