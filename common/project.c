/*
 * project.c — find projections in the shard daemon (find, findAndModify). A projection
 * is compiled into a tree of field names ({"a.b": 1, c: 1} → a{b}, c) and applied in one
 * walk over the document, keeping the document's own field order (as MongoDB does).
 *
 * Rules followed (MongoDB ≥ 4.4): a projection is either an inclusion or an exclusion;
 * _id is included unless {_id: 0}, which is allowed in both kinds; mixing the kinds is
 * refused with MongoDB's messages (31254 / 31253); "a" and "a.b" together is a path
 * collision (31250). A dotted path through an array applies to every element: an
 * inclusion keeps the element documents (reduced) and drops scalars, an exclusion keeps
 * scalars. $slice, $elemMatch, $meta and computed fields are refused with a clear error.
 */
#include "common/project.h"

#include <string.h>

#include "common/bsonx.h"

typedef struct pnode pnode_t;
struct pnode {
    char *name;
    bool leaf;        /* the whole field is included / excluded */
    pnode_t **kids;
    int n;
};

struct projection {
    bool inclusion;
    bool empty;       /* {}: the whole document */
    pnode_t *root;
};

static void pnode_free(pnode_t *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pnode_free(p->kids[i]);
    bson_free(p->kids);
    bson_free(p->name);
    bson_free(p);
}

void projection_free(projection_t *p) {
    if (!p) return;
    pnode_free(p->root);
    bson_free(p);
}

static pnode_t *pnode_child(const pnode_t *p, const char *name, size_t len) {
    for (int i = 0; i < p->n; i++)
        if (strlen(p->kids[i]->name) == len && strncmp(p->kids[i]->name, name, len) == 0) return p->kids[i];
    return NULL;
}

/* Adds a dotted path; a path that is a prefix of another (or equal) collides. */
static int pnode_add(pnode_t *root, const char *path, ms_error_t *err) {
    pnode_t *cur = root;
    const char *s = path;
    for (;;) {
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        if (len == 0) return err_set(err, MS_ERR_BAD_VALUE, "FieldPath field names may not be empty strings.");
        pnode_t *next = pnode_child(cur, s, len);
        if (next && (next->leaf || !dot))
            return err_set(err, MS_ERR_BAD_VALUE, "Path collision at %s", path);
        if (!next) {
            next = bson_malloc0(sizeof *next);
            next->name = bson_strndup(s, len);
            cur->kids = bson_realloc(cur->kids, sizeof *cur->kids * (size_t)(cur->n + 1));
            cur->kids[cur->n++] = next;
        }
        if (!dot) {
            next->leaf = true;
            return 0;
        }
        cur = next;
        s = dot + 1;
    }
}

/* 1 include, 0 exclude, -1 refused (with *err set). */
static int spec_value(const bson_iter_t *it, ms_error_t *err) {
    if (BSON_ITER_HOLDS_BOOL(it) || bsonx_is_number(it)) return bsonx_truthy(it) ? 1 : 0;
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t op;
        if (bson_iter_recurse(it, &op) && bson_iter_next(&op) && bson_iter_key(&op)[0] == '$') {
            err_set(err, MS_ERR_BAD_VALUE, "%s projection is not supported (field '%s')", bson_iter_key(&op),
                    bson_iter_key(it));
            return -1;
        }
    }
    err_set(err, MS_ERR_BAD_VALUE,
            "projection values other than 0, 1, true and false are not supported (field '%s')", bson_iter_key(it));
    return -1;
}

int projection_compile(const bson_t *spec, projection_t **out, ms_error_t *err) {
    projection_t *p = bson_malloc0(sizeof *p);
    bson_iter_t it;
    int rc = 0, mode = -1, id = 1;   /* mode: -1 unknown, 1 inclusion, 0 exclusion */
    p->root = bson_malloc0(sizeof *p->root);
    p->root->name = bson_strdup("");
    if (!bson_iter_init(&it, spec)) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "invalid projection");
        goto out;
    }
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        int v = spec_value(&it, err);
        if (v < 0) {
            rc = MS_ERR_BAD_VALUE;
            goto out;
        }
        if (strcmp(key, "_id") == 0) {
            id = v;
            continue;
        }
        if (mode >= 0 && v != mode) {
            rc = err_set(err, MS_ERR_BAD_VALUE, mode ? "Cannot do exclusion on field %s in inclusion projection"
                                                     : "Cannot do inclusion on field %s in exclusion projection",
                         key);
            goto out;
        }
        mode = v;
        if ((rc = pnode_add(p->root, key, err))) goto out;
    }
    p->empty = bson_count_keys(spec) == 0;
    p->inclusion = mode == 1 || (mode < 0 && id == 1);
    /* _id: an inclusion lists it unless excluded; an exclusion lists it only when excluded. */
    bool id_listed = pnode_child(p->root, "_id", 3) != NULL;   /* {"_id.x": 1} names a part of it */
    if (!id_listed && ((p->inclusion && id == 1) || (!p->inclusion && id == 0)))
        rc = pnode_add(p->root, "_id", err);
out:
    if (rc) {
        projection_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

static void project_doc(const projection_t *p, const pnode_t *node, const bson_t *doc, bson_t *dst);

/* An array under a projected path: documents are projected, nested arrays recursed,
 * scalars kept only by an exclusion. */
static void project_array(const projection_t *p, const pnode_t *node, const bson_t *arr, bson_t *dst) {
    bson_iter_t el;
    int i = 0;
    bson_iter_init(&el, arr);
    while (bson_iter_next(&el)) {
        char key[16];
        bson_t sub, child;
        bson_snprintf(key, sizeof key, "%d", i);
        if (BSON_ITER_HOLDS_DOCUMENT(&el) && bsonx_view_container(&el, &sub)) {
            bson_append_document_begin(dst, key, -1, &child);
            project_doc(p, node, &sub, &child);
            bson_append_document_end(dst, &child);
        } else if (BSON_ITER_HOLDS_ARRAY(&el) && bsonx_view_container(&el, &sub)) {
            bson_append_array_begin(dst, key, -1, &child);
            project_array(p, node, &sub, &child);
            bson_append_array_end(dst, &child);
        } else if (!p->inclusion) {
            bsonx_append_iter(dst, key, &el);
        } else {
            continue;
        }
        i++;
    }
}

static void project_doc(const projection_t *p, const pnode_t *node, const bson_t *doc, bson_t *dst) {
    bson_iter_t it;
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        const pnode_t *kid = pnode_child(node, key, strlen(key));
        bson_t sub, child;
        if (!kid) {
            if (!p->inclusion) bsonx_append_iter(dst, key, &it);
        } else if (kid->leaf) {
            if (p->inclusion) bsonx_append_iter(dst, key, &it);
        } else if (BSON_ITER_HOLDS_DOCUMENT(&it) && bsonx_view_container(&it, &sub)) {
            bson_append_document_begin(dst, key, -1, &child);
            project_doc(p, kid, &sub, &child);
            bson_append_document_end(dst, &child);
        } else if (BSON_ITER_HOLDS_ARRAY(&it) && bsonx_view_container(&it, &sub)) {
            bson_append_array_begin(dst, key, -1, &child);
            project_array(p, kid, &sub, &child);
            bson_append_array_end(dst, &child);
        } else if (!p->inclusion) {
            bsonx_append_iter(dst, key, &it);   /* "a.b" excluded but a is a scalar: kept */
        }
    }
}

int projection_apply(const projection_t *p, const bson_t *doc, bson_t *out, ms_error_t *err) {
    bson_iter_t it;
    if (!bson_iter_init(&it, doc)) return err_set(err, MS_ERR_INVALID_BSON, "invalid document");
    bson_init(out);
    if (p->empty) bson_concat(out, doc);
    else project_doc(p, p->root, doc, out);
    return 0;
}
