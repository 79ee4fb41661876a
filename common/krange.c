/*
 * krange.c — sets of encoded shard-key ranges and their wire form (krange.h), used by
 * bin/router (building a retry's $_shardKeyRanges) and bin/shardd (honouring it).
 */
#include "common/krange.h"

#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/rtable.h"

void krset_free(krset_t *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        buf_free(&s->r[i].lo);
        buf_free(&s->r[i].hi);
    }
    free(s->r);
    memset(s, 0, sizeof *s);
}

static bool same_bytes(const buf_t *a, const uint8_t *p, size_t n) {
    return a->len == n && (n == 0 || memcmp(a->data, p, n) == 0);
}

void krset_add(krset_t *s, const uint8_t *lo, size_t lolen, const uint8_t *hi, size_t hilen) {
    if (s->n > 0 && s->r[s->n - 1].hi.len > 0 && same_bytes(&s->r[s->n - 1].hi, lo, lolen)) {
        buf_reset(&s->r[s->n - 1].hi);
        buf_put(&s->r[s->n - 1].hi, hi, hilen);
        return;
    }
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4;
        s->r = xrealloc(s->r, (size_t)s->cap * sizeof *s->r);
    }
    krange_t *r = &s->r[s->n++];
    memset(r, 0, sizeof *r);
    buf_put(&r->lo, lo, lolen);
    buf_put(&r->hi, hi, hilen);
}

bool krset_contains(const krset_t *s, const uint8_t *key, size_t len) {
    int lo = 0, hi = s->n - 1, found = -1;
    while (lo <= hi) {   /* the last range whose lo <= key */
        int mid = lo + (hi - lo) / 2;
        const buf_t *b = &s->r[mid].lo;
        if (b->len == 0 || rtable_bytes_cmp(b->data, b->len, key, len) <= 0) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (found < 0) return false;
    const buf_t *h = &s->r[found].hi;
    return h->len == 0 || rtable_bytes_cmp(key, len, h->data, h->len) < 0;
}

static void append_bin(bson_t *d, const char *key, const buf_t *b) {
    bson_append_binary(d, key, -1, BSON_SUBTYPE_BINARY, b->data, (uint32_t)b->len);
}

void krset_append(bson_t *dst, const char *key, const krset_t *s) {
    bson_t arr, d;
    char idx[16];
    bson_append_array_begin(dst, key, -1, &arr);
    for (int i = 0; i < s->n; i++) {
        snprintf(idx, sizeof idx, "%d", i);
        bson_append_document_begin(&arr, idx, -1, &d);
        if (s->r[i].lo.len) append_bin(&d, "min", &s->r[i].lo);
        if (s->r[i].hi.len) append_bin(&d, "max", &s->r[i].hi);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(dst, &arr);
}

/* A bound of the wire form: binData, non-empty, into out. */
static int parse_bound(const bson_iter_t *it, const char *field, int i, buf_t *out,
                       ms_error_t *err) {
    bson_subtype_t sub;
    uint32_t n = 0;
    const uint8_t *p = NULL;
    if (!BSON_ITER_HOLDS_BINARY(it))
        return err_set(err, MS_ERR_BAD_VALUE, "%s.%d.%s must be binData, not %s", field, i,
                       bson_iter_key(it), bsonx_type_name(bson_iter_type(it)));
    bson_iter_binary(it, &sub, &n, &p);
    if (n == 0)
        return err_set(err, MS_ERR_BAD_VALUE, "%s.%d.%s is empty (omit it for no bound)", field,
                       i, bson_iter_key(it));
    buf_put(out, p, n);
    return 0;
}

int krset_parse(const bson_iter_t *it, const char *field, krset_t *out, ms_error_t *err) {
    bson_iter_t arr, d;
    int i = 0;
    memset(out, 0, sizeof *out);
    if (!BSON_ITER_HOLDS_ARRAY(it) || !bson_iter_recurse(it, &arr))
        return err_set(err, MS_ERR_BAD_VALUE, "%s must be an array, not %s", field,
                       bsonx_type_name(bson_iter_type(it)));
    for (; bson_iter_next(&arr); i++) {
        buf_t lo = {0}, hi = {0};
        int rc = 0;
        if (i >= MS_MULTIWRITE_RANGES_MAX)
            return err_set(err, MS_ERR_BAD_VALUE, "%s names more than %d ranges", field,
                           MS_MULTIWRITE_RANGES_MAX);
        if (!BSON_ITER_HOLDS_DOCUMENT(&arr) || !bson_iter_recurse(&arr, &d))
            return err_set(err, MS_ERR_BAD_VALUE, "%s.%d must be a document {min?, max?}", field, i);
        while (rc == 0 && bson_iter_next(&d)) {
            const char *k = bson_iter_key(&d);
            if (!strcmp(k, "min") && lo.len == 0) rc = parse_bound(&d, field, i, &lo, err);
            else if (!strcmp(k, "max") && hi.len == 0) rc = parse_bound(&d, field, i, &hi, err);
            else rc = err_set(err, MS_ERR_BAD_VALUE, "%s.%d: unknown or repeated field '%s'",
                              field, i, k);
        }
        if (rc == 0 && lo.len && hi.len && rtable_bytes_cmp(lo.data, lo.len, hi.data, hi.len) >= 0)
            rc = err_set(err, MS_ERR_BAD_VALUE, "%s.%d is empty (min >= max)", field, i);
        if (rc == 0 && out->n > 0) {
            /* sorted and disjoint: the previous range ends at or before this one starts */
            const buf_t *ph = &out->r[out->n - 1].hi;
            if (ph->len == 0 || lo.len == 0 ||
                rtable_bytes_cmp(ph->data, ph->len, lo.data, lo.len) > 0)
                rc = err_set(err, MS_ERR_BAD_VALUE, "%s.%d overlaps or precedes the range before "
                             "it (ranges must be sorted and disjoint)", field, i);
        }
        if (rc == 0) krset_add(out, lo.data, lo.len, hi.data, hi.len);
        buf_free(&lo);
        buf_free(&hi);
        if (rc) return rc;
    }
    return 0;
}
