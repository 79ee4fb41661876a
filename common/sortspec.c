/*
 * sortspec.c — sort specifications and MongoDB's sort keys. The shard sorts find results
 * with it and the router merges the shards' sorted streams with it, so both sides must
 * order documents identically: each document is reduced to one sort key
 * {"": v1, "": v2, ...} (MongoDB's $sortKey shape) and keys are compared field by field
 * in BSON order (bsonx_compare_values), reversed for descending fields.
 *
 * MongoDB's array rule (docs: "Comparison/Sort Order"): an ascending sort uses the
 * smallest value a path reaches, a descending sort the largest; a missing field sorts as
 * null; an empty array sorts below null.
 */
#include "common/sortspec.h"

#include <string.h>

#include "common/bsonx.h"
#include "common/keys.h"

struct sortspec {
    bson_t *spec;    /* copy of the spec (a pointer: bson_t wants 128-byte alignment) */
    int nfields;
    char **fields;   /* dotted paths */
    int *dir;        /* 1 or -1 */
};

void sortspec_free(sortspec_t *s) {
    if (!s) return;
    for (int i = 0; i < s->nfields; i++) bson_free(s->fields[i]);
    bson_free(s->fields);
    bson_free(s->dir);
    bson_destroy(s->spec);
    bson_free(s);
}

static int sort_direction(const bson_iter_t *it, int *dir, ms_error_t *err) {
    double d;
    if (BSON_ITER_HOLDS_DOCUMENT(it))
        return err_set(err, MS_ERR_BAD_VALUE, "$meta sort keys are not supported");
    if (!bsonx_as_double(it, &d) || (d != 1.0 && d != -1.0))
        return err_set(err, MS_ERR_BAD_VALUE,
                       "$sort key ordering must be 1 (for ascending) or -1 (for descending)");
    *dir = d > 0 ? 1 : -1;
    return 0;
}

int sortspec_compile(const bson_t *spec, sortspec_t **out, ms_error_t *err) {
    sortspec_t *s = bson_malloc0(sizeof *s);
    bson_iter_t it;
    int rc = 0;
    s->spec = bson_copy(spec);
    uint32_t n = bson_count_keys(spec);
    s->fields = bson_malloc0(sizeof *s->fields * (n + 1));
    s->dir = bson_malloc0(sizeof *s->dir * (n + 1));
    if (!bson_iter_init(&it, spec)) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "invalid sort specification");
        goto out;
    }
    while (bson_iter_next(&it)) {
        if (bson_iter_key(&it)[0] == '\0' || bson_iter_key(&it)[0] == '$') {
            rc = err_set(err, MS_ERR_BAD_VALUE, "invalid sort field name: \"%s\"", bson_iter_key(&it));
            goto out;
        }
        rc = sort_direction(&it, &s->dir[s->nfields], err);
        if (rc) goto out;
        s->fields[s->nfields++] = bson_strdup(bson_iter_key(&it));
    }
out:
    if (rc) {
        sortspec_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

const bson_t *sortspec_spec(const sortspec_t *s) {
    return s->spec;
}

/* ---- the value a path contributes to the sort key ---------------------------------- */

/* The best value seen so far: the smallest (ascending) or largest (descending). It is an
 * iterator into the document, or into one of the two constant stand-ins below. */
typedef struct pick {
    int dir;
    bool have;
    bson_iter_t best;
} pick_t;

/* {"v": null} for a missing field and {"v": undefined} for an empty array, as raw BSON. */
static const uint8_t bson_v_null[] = {8, 0, 0, 0, BSON_TYPE_NULL, 'v', 0, 0};
static const uint8_t bson_v_undefined[] = {8, 0, 0, 0, BSON_TYPE_UNDEFINED, 'v', 0, 0};

static void pick_offer_value(pick_t *p, const bson_iter_t *v) {
    if (p->have) {
        int c = bsonx_compare_values(v, &p->best);
        if ((p->dir > 0 && c >= 0) || (p->dir < 0 && c <= 0)) return;
    }
    p->have = true;
    p->best = *v;
}

static void pick_offer_special(pick_t *p, bool empty_array) {
    const uint8_t *raw = empty_array ? bson_v_undefined : bson_v_null;
    bson_t doc;
    bson_iter_t it;
    if (bson_init_static(&doc, raw, 8) && bson_iter_init_find(&it, &doc, "v"))
        pick_offer_value(p, &it);
}

static void pick_path_doc(pick_t *p, const bson_t *doc, const char *path);

/* The end of the path: an array offers each element (one level), an empty one undefined. */
static void pick_leaf(pick_t *p, const bson_iter_t *v) {
    if (!BSON_ITER_HOLDS_ARRAY(v)) {
        pick_offer_value(p, v);
        return;
    }
    bson_iter_t el;
    bool any = false;
    if (bson_iter_recurse(v, &el))
        while (bson_iter_next(&el)) {
            pick_offer_value(p, &el);
            any = true;
        }
    if (!any) pick_offer_special(p, true);
}

static void pick_path_value(pick_t *p, const bson_iter_t *v, const char *rest) {
    bson_t sub;
    if (!rest) {
        pick_leaf(p, v);
    } else if (BSON_ITER_HOLDS_DOCUMENT(v) && bsonx_view_container(v, &sub)) {
        pick_path_doc(p, &sub, rest);
    } else if (BSON_ITER_HOLDS_ARRAY(v) && bsonx_view_container(v, &sub)) {
        bson_iter_t el;
        bool any = false;
        bson_iter_init(&el, &sub);
        while (bson_iter_next(&el)) {
            bson_t elem;
            if (BSON_ITER_HOLDS_DOCUMENT(&el) && bsonx_view_container(&el, &elem)) {
                pick_path_doc(p, &elem, rest);
                any = true;
            }
        }
        if (!any) pick_offer_special(p, false);
    } else {
        pick_offer_special(p, false);
    }
}

static void pick_path_doc(pick_t *p, const bson_t *doc, const char *path) {
    const char *dot = strchr(path, '.');
    int head_len = dot ? (int)(dot - path) : (int)strlen(path);
    bson_iter_t it;
    if (!bson_iter_init_find_w_len(&it, doc, path, head_len)) {
        pick_offer_special(p, false);
        return;
    }
    pick_path_value(p, &it, dot ? dot + 1 : NULL);
}

void sortspec_key(const sortspec_t *s, const bson_t *doc, bson_t *dst, const char *key) {
    bson_t k;
    bson_append_document_begin(dst, key, -1, &k);
    for (int i = 0; i < s->nfields; i++) {
        pick_t p = {.dir = s->dir[i]};
        pick_path_doc(&p, doc, s->fields[i]);
        if (p.have) bson_append_iter(&k, "", 0, &p.best);
        else bson_append_null(&k, "", 0);
    }
    bson_append_document_end(dst, &k);
}

int sortspec_compare_keys(const sortspec_t *s, const bson_t *ka, const bson_t *kb) {
    bson_iter_t a, b;
    if (!bson_iter_init(&a, ka) || !bson_iter_init(&b, kb)) return 0;
    for (int i = 0; i < s->nfields; i++) {
        bool ha = bson_iter_next(&a), hb = bson_iter_next(&b);
        if (!ha || !hb) return (int)ha - (int)hb;
        int c = bsonx_compare_values(&a, &b);
        if (c != 0) return c < 0 ? -s->dir[i] : s->dir[i];
    }
    return 0;
}

/* Extracts the key document stored under "k" of holder. */
static void key_view(const bson_t *holder, bson_t *key) {
    bson_iter_t it;
    uint32_t len = 0;
    const uint8_t *data = NULL;
    if (bson_iter_init_find(&it, holder, "k")) bson_iter_document(&it, &len, &data);
    if (!data || !bson_init_static(key, data, len)) bson_init(key);
}

int sortspec_compare_docs(const sortspec_t *s, const bson_t *a, const bson_t *b) {
    bson_t ha = BSON_INITIALIZER, hb = BSON_INITIALIZER, ka, kb;
    sortspec_key(s, a, &ha, "k");
    sortspec_key(s, b, &hb, "k");
    key_view(&ha, &ka);
    key_view(&hb, &kb);
    int c = sortspec_compare_keys(s, &ka, &kb);
    bson_destroy(&ha);
    bson_destroy(&hb);
    return c;
}
