/*
 * update.c — update operators of the shard daemon (update, findAndModify, upserts).
 * An update is either a replacement document or a set of operators ($set, $inc, $push
 * ...). Operators are checked once at compile time (unknown or empty operator,
 * conflicting paths, positional operators) and applied to a small mutable tree made from
 * the document (unode_t), which is then written back to BSON. As MongoDB ≥ 5.0 does,
 * the fields of one update are applied in the order of their paths (component by
 * component, numeric components as numbers), so new fields are appended in that order;
 * an existing field keeps its position.
 */
#include "common/update.h"

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "common/agg.h"
#include "common/bsonx.h"
#include "common/expr.h"
#include "common/log.h"
#include "common/sortspec.h"
#include "common/query.h"

/* ---- the mutable document tree ------------------------------------------------------ */

typedef struct unode unode_t;
struct unode {
    char *key;          /* field name; array elements are renumbered when written */
    bson_type_t type;   /* DOCUMENT and ARRAY hold kids, anything else val */
    bson_value_t val;   /* owned copy */
    unode_t **kids;
    int n;
    bool is_new;        /* just created by path_make: the field was missing */
};

static void unode_free(unode_t *u) {
    if (!u) return;
    for (int i = 0; i < u->n; i++) unode_free(u->kids[i]);
    bson_free(u->kids);
    if (u->type != BSON_TYPE_DOCUMENT && u->type != BSON_TYPE_ARRAY) bson_value_destroy(&u->val);
    bson_free(u->key);
    bson_free(u);
}

static bool is_container(const unode_t *u) {
    return u->type == BSON_TYPE_DOCUMENT || u->type == BSON_TYPE_ARRAY;
}

static void unode_insert(unode_t *parent, int at, unode_t *kid) {
    parent->kids = bson_realloc(parent->kids, sizeof *parent->kids * (size_t)(parent->n + 1));
    memmove(parent->kids + at + 1, parent->kids + at, sizeof *parent->kids * (size_t)(parent->n - at));
    parent->kids[at] = kid;
    parent->n++;
}

static void unode_remove(unode_t *parent, int at) {
    unode_free(parent->kids[at]);
    memmove(parent->kids + at, parent->kids + at + 1, sizeof *parent->kids * (size_t)(parent->n - at - 1));
    parent->n--;
}

static unode_t *unode_from_iter(const char *key, const bson_iter_t *it) {
    unode_t *u = bson_malloc0(sizeof *u);
    u->key = bson_strdup(key);
    u->type = bson_iter_type(it);
    if (is_container(u)) {
        bson_iter_t child;
        if (bson_iter_recurse(it, &child))
            while (bson_iter_next(&child)) unode_insert(u, u->n, unode_from_iter(bson_iter_key(&child), &child));
    } else {
        bson_value_copy(bson_iter_value((bson_iter_t *)it), &u->val);
    }
    return u;
}

static unode_t *unode_container(const char *key, bson_type_t type) {
    unode_t *u = bson_malloc0(sizeof *u);
    u->key = bson_strdup(key);
    u->type = type;
    return u;
}

static unode_t *unode_null(const char *key) {
    unode_t *u = bson_malloc0(sizeof *u);
    u->key = bson_strdup(key);
    u->type = BSON_TYPE_NULL;
    u->val.value_type = BSON_TYPE_NULL;
    return u;
}

static unode_t *unode_from_doc(const bson_t *doc) {
    unode_t *root = unode_container("", BSON_TYPE_DOCUMENT);
    bson_iter_t it;
    if (bson_iter_init(&it, doc))
        while (bson_iter_next(&it)) unode_insert(root, root->n, unode_from_iter(bson_iter_key(&it), &it));
    return root;
}

static void unode_append_to(const unode_t *u, bson_t *dst, const char *key);

static void unode_children_to(const unode_t *u, bson_t *dst) {
    for (int i = 0; i < u->n; i++) {
        char idx[16];
        const char *k = u->kids[i]->key;
        if (u->type == BSON_TYPE_ARRAY) {
            bson_snprintf(idx, sizeof idx, "%d", i);
            k = idx;
        }
        unode_append_to(u->kids[i], dst, k);
    }
}

static void unode_append_to(const unode_t *u, bson_t *dst, const char *key) {
    bson_t child;
    if (u->type == BSON_TYPE_DOCUMENT) {
        bson_append_document_begin(dst, key, -1, &child);
        unode_children_to(u, &child);
        bson_append_document_end(dst, &child);
    } else if (u->type == BSON_TYPE_ARRAY) {
        bson_append_array_begin(dst, key, -1, &child);
        unode_children_to(u, &child);
        bson_append_array_end(dst, &child);
    } else {
        bson_append_value(dst, key, -1, &u->val);
    }
}

/* A node as a one-field document {"v": value}, to compare or match it. */
static void unode_holder(const unode_t *u, bson_t *holder, bson_iter_t *it) {
    bson_init(holder);
    unode_append_to(u, holder, "v");
    bson_iter_init_find(it, holder, "v");
}

static int unode_compare(const unode_t *a, const unode_t *b) {
    bson_t ha, hb;
    bson_iter_t ia, ib;
    unode_holder(a, &ha, &ia);
    unode_holder(b, &hb, &ib);
    int c = bsonx_compare_values(&ia, &ib);
    bson_destroy(&ha);
    bson_destroy(&hb);
    return c;
}

static void unode_clear(unode_t *u) {
    for (int i = 0; i < u->n; i++) unode_free(u->kids[i]);
    bson_free(u->kids);
    u->kids = NULL;
    u->n = 0;
    if (!is_container(u)) bson_value_destroy(&u->val);
    memset(&u->val, 0, sizeof u->val);
}

/* Replaces the content of dst with src's (dst keeps its key and position); frees src. */
static void unode_assign(unode_t *dst, unode_t *src) {
    unode_clear(dst);
    dst->type = src->type;
    dst->val = src->val;
    dst->kids = src->kids;
    dst->n = src->n;
    bson_free(src->key);
    bson_free(src);
}

/* ---- paths -------------------------------------------------------------------------- */

#define UPATH_DEPTH_MAX 128

typedef struct upath {
    char *parts[UPATH_DEPTH_MAX];
    int n;
    char *text;
    bool positional;     /* has a "$", "$[]" or "$[<identifier>]" component */
} upath_t;

/* "$" (the element the query matched), "$[]" (every element), "$[id]" (the elements
 * arrayFilters' id accepts). */
static bool part_is_positional(const char *s) {
    return s[0] == '$' && (s[1] == '\0' || s[1] == '[');
}

static void upath_free(upath_t *p) {
    for (int i = 0; i < p->n; i++) bson_free(p->parts[i]);
    bson_free(p->text);
    p->n = 0;
    p->text = NULL;
}

static int upath_parse(const char *text, upath_t *p, ms_error_t *err) {
    memset(p, 0, sizeof *p);
    p->text = bson_strdup(text);
    const char *s = text;
    for (;;) {
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        if (len == 0)
            return err_set(err, MS_ERR_EMPTY_FIELD_NAME,
                           "The update path '%s' contains an empty field name, which is not allowed.", text);
        if (p->n == UPATH_DEPTH_MAX) return err_set(err, MS_ERR_BAD_VALUE, "update path too deep: '%s'", text);
        p->parts[p->n++] = bson_strndup(s, len);
        if (part_is_positional(p->parts[p->n - 1])) p->positional = true;
        if (!dot) return 0;
        s = dot + 1;
    }
}

static bool part_index(const char *s, long *out) {
    if (!*s || strlen(s) > 9) return false;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9') return false;
    *out = strtol(s, NULL, 10);
    return true;
}

/* Path order of MongoDB ≥ 5.0: component by component, numbers numerically. */
static int upath_order(const upath_t *a, const upath_t *b) {
    for (int i = 0; i < a->n && i < b->n; i++) {
        long x, y;
        int c;
        if (part_index(a->parts[i], &x) && part_index(b->parts[i], &y)) c = x < y ? -1 : x > y;
        else c = strcmp(a->parts[i], b->parts[i]);
        if (c) return c;
    }
    return a->n - b->n;
}

/* a is b, or a prefix of b (component-wise). */
static bool upath_covers(const upath_t *a, const upath_t *b) {
    if (a->n > b->n) return false;
    for (int i = 0; i < a->n; i++)
        if (strcmp(a->parts[i], b->parts[i]) != 0) return false;
    return true;
}

/* The child of container c named part; *at its position (or -1). */
static unode_t *child_find(const unode_t *c, const char *part, int *at) {
    *at = -1;
    if (c->type == BSON_TYPE_ARRAY) {
        long i;
        if (!part_index(part, &i) || i >= c->n) return NULL;
        *at = (int)i;
        return c->kids[i];
    }
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->kids[i]->key, part) == 0) {
            *at = i;
            return c->kids[i];
        }
    return NULL;
}

/* Finds the node at path; NULL when missing (or the path runs through a scalar). The
 * parent container and position are returned when the last step reached one. */
static unode_t *path_get(unode_t *root, const upath_t *p, unode_t **parent, int *at) {
    unode_t *cur = root;
    *parent = NULL;
    *at = -1;
    for (int i = 0; i < p->n; i++) {
        if (!is_container(cur)) return NULL;
        *parent = cur;
        cur = child_find(cur, p->parts[i], at);
        if (!cur) return NULL;
    }
    return cur;
}

static char *unode_json(const unode_t *u) {
    bson_t h = BSON_INITIALIZER;
    unode_children_to(u, &h);
    char *j = bsonx_to_json(&h);
    bson_destroy(&h);
    return j;
}

/* Finds or creates the node at path (intermediate documents created; an index past the
 * end of an array pads it with null, as MongoDB's $set does). A scalar on the way →
 * PathNotViable; a field name into an array → PathNotViable. */
static int path_make(unode_t *root, const upath_t *p, unode_t **out, ms_error_t *err) {
    unode_t *cur = root;
    for (int i = 0; i < p->n; i++) {
        int at;
        unode_t *next = child_find(cur, p->parts[i], &at);
        bool last = i == p->n - 1;
        if (!next) {
            long idx = 0;
            if (cur->type == BSON_TYPE_ARRAY && !part_index(p->parts[i], &idx)) {
                char *j = unode_json(cur);
                int rc = err_set(err, MS_ERR_PATH_NOT_VIABLE,
                                 "Cannot create field '%s' in element {%s: %s}", p->parts[i],
                                 cur->key[0] ? cur->key : p->parts[0], j);
                bson_free(j);
                return rc;
            }
            if (idx > 1500000) return err_set(err, MS_ERR_BAD_VALUE, "array index %ld too large", idx);
            while (cur->type == BSON_TYPE_ARRAY && cur->n < idx) unode_insert(cur, cur->n, unode_null(""));
            next = last ? unode_null(p->parts[i]) : unode_container(p->parts[i], BSON_TYPE_DOCUMENT);
            next->is_new = last;
            unode_insert(cur, cur->n, next);
        } else if (!last && !is_container(next)) {
            char *j = NULL;
            bson_t h = BSON_INITIALIZER;
            unode_append_to(next, &h, next->key);
            j = bsonx_to_json(&h);
            bson_destroy(&h);
            int rc = err_set(err, MS_ERR_PATH_NOT_VIABLE, "Cannot create field '%s' in element %s",
                             p->parts[i + 1], j);
            bson_free(j);
            return rc;
        }
        cur = next;
    }
    *out = cur;
    return 0;
}

/* ---- compiled updates --------------------------------------------------------------- */

enum uop {
    U_SET, U_UNSET, U_INC, U_MUL, U_MIN, U_MAX, U_RENAME, U_PUSH, U_ADD_TO_SET, U_PULL,
    U_POP, U_SET_ON_INSERT, U_CURRENT_DATE,
};

static const struct {
    const char *name;
    enum uop op;
} uop_names[] = {
    {"$set", U_SET}, {"$unset", U_UNSET}, {"$inc", U_INC}, {"$mul", U_MUL}, {"$min", U_MIN},
    {"$max", U_MAX}, {"$rename", U_RENAME}, {"$push", U_PUSH}, {"$addToSet", U_ADD_TO_SET},
    {"$pull", U_PULL}, {"$pop", U_POP}, {"$setOnInsert", U_SET_ON_INSERT},
    {"$currentDate", U_CURRENT_DATE},
};

typedef struct uitem {
    enum uop op;
    const char *opname;
    upath_t path;
    upath_t to;            /* $rename target */
    bson_t *arg;           /* {"v": argument} */
    query_t *cond;         /* $pull with a condition */
    bool cond_on_value;    /* $pull {$gte: 6}: matched as {"v": element} */
    query_t *pos_q;        /* "$" in the path: the query's predicates on that array,
                              rebased to match {"v": [element]} */
} uitem_t;

/* One entry of arrayFilters: {"<id>.x": cond, ...} kept as a filter over {"v": element}. */
typedef struct afilter {
    char *id;
    query_t *q;
    bool used;
} afilter_t;

struct update {
    bool replacement;
    bson_t *doc;           /* the replacement document */
    uitem_t *items;
    int n;
    agg_pipeline_t *pipe;  /* a pipeline-style update (u: [stages]) */
    expr_vars_t *vars;     /* its `let` variables (the pipeline borrows them) */
    afilter_t *af;         /* arrayFilters */
    int naf;
};

void update_free(update_t *u) {
    if (!u) return;
    for (int i = 0; i < u->n; i++) {
        upath_free(&u->items[i].path);
        upath_free(&u->items[i].to);
        bson_destroy(u->items[i].arg);
        query_free(u->items[i].cond);
        query_free(u->items[i].pos_q);
    }
    bson_free(u->items);
    bson_destroy(u->doc);
    agg_free(u->pipe);
    expr_vars_free(u->vars);
    for (int i = 0; i < u->naf; i++) {
        bson_free(u->af[i].id);
        query_free(u->af[i].q);
    }
    bson_free(u->af);
    bson_free(u);
}

bool update_is_replacement(const update_t *u) {
    return u->replacement;
}

static void arg_iter(const uitem_t *it, bson_iter_t *out) {
    bool ok = bson_iter_init_find(out, it->arg, "v");
    ASSERT(ok);
}

/* Checks an operator's argument where that needs no document. */
static int item_check(uitem_t *item, const bson_iter_t *v, ms_error_t *err) {
    switch (item->op) {
    case U_INC:
    case U_MUL:
        if (!bsonx_is_number(v)) {
            char *j = bsonx_to_json(item->arg);
            int rc = err_set(err, MS_ERR_TYPE_MISMATCH, "Cannot %s with non-numeric argument: {%s: %s}",
                             item->op == U_INC ? "increment" : "multiply", item->path.text, j);
            bson_free(j);
            return rc;
        }
        if (bson_iter_type(v) == BSON_TYPE_DECIMAL128)
            return err_set(err, MS_ERR_BAD_VALUE, "%s with decimal128 is not supported", item->opname);
        return 0;
    case U_POP: {
        double d;
        if (!bsonx_as_double(v, &d) || (d != 1.0 && d != -1.0))
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "$pop expects 1 or -1, found: %s",
                           bson_iter_type(v) == BSON_TYPE_UTF8 ? bson_iter_utf8(v, NULL) : "a non-number");
        return 0;
    }
    case U_RENAME:
        if (!BSON_ITER_HOLDS_UTF8(v))
            return err_set(err, MS_ERR_BAD_VALUE, "The 'to' field for $rename must be a string: %s",
                           item->path.text);
        if (strcmp(bson_iter_utf8(v, NULL), item->path.text) == 0)
            return err_set(err, MS_ERR_BAD_VALUE, "The source and target field for $rename must differ: %s",
                           item->path.text);
        if (item->path.positional)
            return err_set(err, MS_ERR_BAD_VALUE, "The source field for $rename may not be dynamic: %s",
                           item->path.text);
        {
            int rc = upath_parse(bson_iter_utf8(v, NULL), &item->to, err);
            if (rc == 0 && item->to.positional)
                return err_set(err, MS_ERR_BAD_VALUE, "The destination field for $rename may not "
                               "be dynamic: %s", item->to.text);
            return rc;
        }
    case U_CURRENT_DATE:
        if (BSON_ITER_HOLDS_BOOL(v)) return 0;
        if (BSON_ITER_HOLDS_DOCUMENT(v)) {
            bson_iter_t t;
            if (bson_iter_recurse(v, &t) && bson_iter_find(&t, "$type") && BSON_ITER_HOLDS_UTF8(&t) &&
                (strcmp(bson_iter_utf8(&t, NULL), "date") == 0 ||
                 strcmp(bson_iter_utf8(&t, NULL), "timestamp") == 0))
                return 0;
        }
        return err_set(err, MS_ERR_BAD_VALUE,
                       "$currentDate: expected true or {$type: \"date\" | \"timestamp\"} for '%s'",
                       item->path.text);
    default:
        return 0;
    }
}

/* $pull's argument: a condition ({$gte: 6} on the element, or {b: 1} on element
 * documents) or a plain value (removed by equality). */
static int pull_compile(uitem_t *item, const bson_iter_t *v, ms_error_t *err) {
    bson_iter_t first;
    if (!BSON_ITER_HOLDS_DOCUMENT(v) || !bson_iter_recurse(v, &first) || !bson_iter_next(&first))
        return 0;
    uint32_t len;
    const uint8_t *data;
    bson_t cond;
    bson_iter_document(v, &len, &data);
    if (!bson_init_static(&cond, data, len)) return err_set(err, MS_ERR_BAD_VALUE, "bad $pull condition");
    bool ops = bson_iter_key(&first)[0] == '$' && strcmp(bson_iter_key(&first), "$and") != 0 &&
               strcmp(bson_iter_key(&first), "$or") != 0 && strcmp(bson_iter_key(&first), "$nor") != 0;
    if (!ops) return query_compile(&cond, &item->cond, err);
    bson_t wrapped = BSON_INITIALIZER;
    BSON_APPEND_DOCUMENT(&wrapped, "v", &cond);
    int rc = query_compile(&wrapped, &item->cond, err);
    bson_destroy(&wrapped);
    item->cond_on_value = true;
    return rc;
}

static int item_add(update_t *u, enum uop op, const char *opname, const bson_iter_t *field,
                    ms_error_t *err) {
    u->items = bson_realloc(u->items, sizeof *u->items * (size_t)(u->n + 1));
    uitem_t *item = &u->items[u->n++];
    memset(item, 0, sizeof *item);
    item->op = op;
    item->opname = opname;
    item->arg = bson_new();
    bsonx_append_iter(item->arg, "v", field);
    int rc = upath_parse(bson_iter_key(field), &item->path, err);
    if (rc == 0) rc = item_check(item, field, err);
    if (rc == 0 && op == U_PULL) rc = pull_compile(item, field, err);
    return rc;
}

static int parse_operator(update_t *u, const bson_iter_t *op, ms_error_t *err) {
    const char *name = bson_iter_key(op);
    size_t k;
    for (k = 0; k < sizeof uop_names / sizeof uop_names[0]; k++)
        if (strcmp(uop_names[k].name, name) == 0) break;
    if (k == sizeof uop_names / sizeof uop_names[0])
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "Unknown modifier: %s. Expected a valid update modifier or pipeline-style "
                       "update specified as an array", name);
    bson_iter_t field;
    if (!BSON_ITER_HOLDS_DOCUMENT(op))
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "Modifiers operate on fields but we found type %s instead. For example: "
                       "{$mod: {<field>: ...}} not {%s: %s}",
                       bsonx_type_name(bson_iter_type(op)), name, "...");
    bson_iter_recurse(op, &field);
    if (!bson_iter_next(&field))
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "'%s' is empty. You must specify a field like so: {%s: {<field>: ...}}", name, name);
    do {
        int rc = item_add(u, uop_names[k].op, uop_names[k].name, &field, err);
        if (rc) return rc;
    } while (bson_iter_next(&field));
    return 0;
}

static int cmp_items(const void *pa, const void *pb) {
    return upath_order(&((const uitem_t *)pa)->path, &((const uitem_t *)pb)->path);
}

/* Two fields of one update may not touch the same path or a path and its prefix. */
static int check_conflicts(const update_t *u, ms_error_t *err) {
    const upath_t *all[2 * 1024];
    int n = 0;
    for (int i = 0; i < u->n && n + 2 <= (int)(sizeof all / sizeof all[0]); i++) {
        all[n++] = &u->items[i].path;
        if (u->items[i].op == U_RENAME) all[n++] = &u->items[i].to;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j || !upath_covers(all[i], all[j])) continue;
            return err_set(err, MS_ERR_CONFLICTING_UPDATE_OPERATORS,
                           "Updating the path '%s' would create a conflict at '%s'", all[j]->text,
                           all[i]->text);
        }
    return 0;
}

/* A pipeline update arrives as an array: keys "0", "1", ... */
static bool looks_like_pipeline(const bson_t *spec) {
    bson_iter_t it;
    return bson_iter_init(&it, spec) && bson_iter_next(&it) && strcmp(bson_iter_key(&it), "0") == 0 &&
           BSON_ITER_HOLDS_DOCUMENT(&it);
}

/* ---- arrayFilters and the positional "$" ------------------------------------------ */

/* Copies filter f into out with the keys on prefix (prefix itself or prefix.rest) renamed
 * "v" / "v.rest", so that the filter can be matched against {"v": element}; $and (and, when
 * strict, $or / $nor) are followed. strict (arrayFilters): every key must be on prefix.
 * Otherwise (the query, for "$") keys elsewhere are left out. *n counts the kept keys. */
static int filter_rebase(const bson_t *f, const char *prefix, bool strict, bson_t *out, int *n,
                         ms_error_t *err) {
    bson_iter_t it;
    size_t pl = strlen(prefix);
    if (!bson_iter_init(&it, f)) return err_set(err, MS_ERR_BAD_VALUE, "invalid filter");
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] == '$') {
            bool logical = strcmp(k, "$and") == 0 ||
                           (strict && (strcmp(k, "$or") == 0 || strcmp(k, "$nor") == 0));
            bson_iter_t el;
            bson_t arr;
            int i = 0;
            if (!logical) {
                if (strict)
                    return err_set(err, MS_ERR_BAD_VALUE, "%s is not supported in arrayFilters", k);
                continue;
            }
            if (!BSON_ITER_HOLDS_ARRAY(&it) || !bson_iter_recurse(&it, &el)) {
                bsonx_append_iter(out, k, &it);   /* the filter compiler says what is wrong */
                continue;
            }
            BSON_APPEND_ARRAY_BEGIN(out, k, &arr);
            while (bson_iter_next(&el)) {
                char key[16];
                bson_t view, sub;
                snprintf(key, sizeof key, "%d", i++);
                if (!BSON_ITER_HOLDS_DOCUMENT(&el) || !bsonx_view_container(&el, &view)) {
                    bsonx_append_iter(&arr, key, &el);
                    continue;
                }
                BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &sub);
                int rc = filter_rebase(&view, prefix, strict, &sub, n, err);
                bson_append_document_end(&arr, &sub);
                if (rc) {
                    bson_append_array_end(out, &arr);
                    return rc;
                }
            }
            bson_append_array_end(out, &arr);
            continue;
        }
        if (strncmp(k, prefix, pl) == 0 && (k[pl] == '\0' || k[pl] == '.')) {
            char *nk = bson_strdup_printf("v%s", k + pl);
            bsonx_append_iter(out, nk, &it);
            bson_free(nk);
            (*n)++;
        } else if (strict) {
            size_t kl = strcspn(k, ".");
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "Error parsing array filter :: caused by :: "
                           "Expected a single top-level field name, found '%s' and '%.*s'",
                           prefix, (int)kl, k);
        }
    }
    return 0;
}

/* The identifier an array filter is about: the first component of its first field
 * ($and / $or / $nor followed). False for a filter without one ({}). */
static bool filter_id(const bson_t *f, char *buf, size_t sz) {
    bson_iter_t it;
    if (!bson_iter_init(&it, f)) return false;
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] != '$') {
            size_t kl = strcspn(k, ".");
            snprintf(buf, sz, "%.*s", (int)kl, k);
            return true;
        }
        bson_iter_t el;
        if (BSON_ITER_HOLDS_ARRAY(&it) && bson_iter_recurse(&it, &el))
            while (bson_iter_next(&el)) {
                bson_t view;
                if (BSON_ITER_HOLDS_DOCUMENT(&el) && bsonx_view_container(&el, &view) &&
                    filter_id(&view, buf, sz))
                    return true;
            }
    }
    return false;
}

static int compile_array_filters(update_t *u, const bson_t *afs, ms_error_t *err) {
    bson_iter_t it;
    int idx = 0;
    if (!bson_iter_init(&it, afs)) return err_set(err, MS_ERR_FAILED_TO_PARSE, "bad arrayFilters");
    while (bson_iter_next(&it)) {
        bson_t f, rebased = BSON_INITIALIZER;
        char id[256];
        int n = 0, rc;
        if (!BSON_ITER_HOLDS_DOCUMENT(&it) || !bsonx_view_container(&it, &f))
            return err_set(err, MS_ERR_TYPE_MISMATCH, "BSON field 'arrayFilters.%d' is the wrong "
                           "type '%s', expected type 'object'", idx,
                           bsonx_type_name(bson_iter_type(&it)));
        idx++;
        if (!filter_id(&f, id, sizeof id))
            return err_set(err, MS_ERR_FAILED_TO_PARSE, "Cannot use an expression without a "
                           "top-level field name in arrayFilters");
        {
            bool ok = id[0] >= 'a' && id[0] <= 'z';
            for (const char *c = id; ok && *c; c++)
                ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9');
            if (!ok)
                return err_set(err, MS_ERR_BAD_VALUE, "Error parsing array filter :: caused by :: "
                               "The top-level field name must be an alphanumeric string beginning "
                               "with a lowercase letter, found '%s'", id);
        }
        for (int i = 0; i < u->naf; i++)
            if (strcmp(u->af[i].id, id) == 0)
                return err_set(err, MS_ERR_FAILED_TO_PARSE, "Found multiple array filters with "
                               "the same top-level field name %s", id);
        if ((rc = filter_rebase(&f, id, true, &rebased, &n, err)) == 0) {
            u->af = bson_realloc(u->af, sizeof *u->af * (size_t)(u->naf + 1));
            afilter_t *a = &u->af[u->naf++];
            memset(a, 0, sizeof *a);
            a->id = bson_strdup(id);
            rc = query_compile(&rebased, &a->q, err);
        }
        bson_destroy(&rebased);
        if (rc) return rc;
    }
    return 0;
}

static afilter_t *af_find(const update_t *u, const char *id, size_t len) {
    for (int i = 0; i < u->naf; i++)
        if (strlen(u->af[i].id) == len && memcmp(u->af[i].id, id, len) == 0) return &u->af[i];
    return NULL;
}

/* MongoDB's checks of a path with positional components, and "$"'s query. */
static int check_positional(update_t *u, uitem_t *item, const bson_t *query, ms_error_t *err) {
    const upath_t *p = &item->path;
    int ndollar = 0, at = -1;
    for (int i = 0; i < p->n; i++) {
        const char *part = p->parts[i];
        if (!part_is_positional(part)) continue;
        if (i == 0)
            return err_set(err, MS_ERR_BAD_VALUE, part[1] ? "Cannot have array filter identifier "
                           "(i.e. '$[<id>]') element in the first position in path '%s'"
                           : "Cannot have positional (i.e. '$') element in the first position "
                           "in path '%s'", p->text);
        if (part[1] == '\0') {
            if (++ndollar > 1)
                return err_set(err, MS_ERR_BAD_VALUE, "Too many positional (i.e. '$') elements "
                               "found in path '%s'", p->text);
            at = i;
            continue;
        }
        size_t len = strlen(part);
        if (part[len - 1] != ']')
            return err_set(err, MS_ERR_BAD_VALUE, "Unterminated array filter identifier in path "
                           "'%s'", p->text);
        if (len == 3) continue;   /* "$[]" */
        afilter_t *a = af_find(u, part + 2, len - 3);
        if (!a)
            return err_set(err, MS_ERR_BAD_VALUE, "No array filter found for identifier '%.*s' "
                           "in path '%s'", (int)(len - 3), part + 2, p->text);
        a->used = true;
    }
    if (at < 0 || !query) return 0;
    /* "$": the query's predicates on the array before it ("a" for "a.$.b") say which element. */
    {
        bson_t rebased = BSON_INITIALIZER;
        char prefix[1024] = "";
        size_t off = 0;
        int n = 0, rc;
        for (int i = 0; i < at; i++) {
            if (part_is_positional(p->parts[i]))   /* "a.$[].b.$": nothing to anchor "$" on */
                return err_set(err, MS_ERR_BAD_VALUE, "The positional operator did not find the "
                               "match needed from the query.");
            off += (size_t)snprintf(prefix + off, off < sizeof prefix ? sizeof prefix - off : 0,
                                    "%s%s", i ? "." : "", p->parts[i]);
        }
        if (off >= sizeof prefix) return err_set(err, MS_ERR_BAD_VALUE, "update path too long");
        rc = filter_rebase(query, prefix, false, &rebased, &n, err);
        if (rc == 0 && n > 0) rc = query_compile(&rebased, &item->pos_q, err);
        bson_destroy(&rebased);
        return rc;
    }
}

/* ---- pipeline-style updates --------------------------------------------------------- */

/* The stages MongoDB allows in an update pipeline. */
static bool update_stage_ok(const char *name) {
    static const char *const ok[] = {"$addFields", "$set", "$project", "$unset",
                                     "$replaceRoot", "$replaceWith", NULL};
    for (int i = 0; ok[i]; i++)
        if (strcmp(ok[i], name) == 0) return true;
    return false;
}

static int compile_pipeline(update_t *u, const bson_t *pipe, const bson_t *let, ms_error_t *err) {
    bson_iter_t it, st;
    agg_opts_t o;
    int rc;
    if (!bson_iter_init(&it, pipe)) return err_set(err, MS_ERR_FAILED_TO_PARSE, "bad pipeline");
    while (bson_iter_next(&it))
        if (BSON_ITER_HOLDS_DOCUMENT(&it) && bson_iter_recurse(&it, &st) && bson_iter_next(&st) &&
            !update_stage_ok(bson_iter_key(&st)))
            return err_set(err, MS_ERR_INVALID_OPTIONS, "%s is not allowed to be used within an "
                           "update", bson_iter_key(&st));
    if (let && (rc = expr_vars_from_let(let, &u->vars, err)) != 0) return rc;
    memset(&o, 0, sizeof o);
    o.vars = u->vars;
    return agg_parse(pipe, &o, &u->pipe, err);
}

/* The pipeline over doc: its one result, with doc's _id put back first when the pipeline
 * dropped it (_id is kept, as for a replacement). */
static int apply_pipeline(const update_t *u, const bson_t *doc, bson_t *res, ms_error_t *err) {
    agg_run_t *r = NULL;
    bson_iter_t id, nid;
    int rc = agg_run_new(u->pipe, 0, &r, err);
    if (rc == 0) rc = agg_run_push(r, doc, err);
    if (rc == 0) rc = agg_run_finish(r, err);
    if (rc == 0 && agg_run_count(r) != 1)
        rc = err_set(err, MS_ERR_BAD_VALUE, "an update pipeline must give exactly one document");
    bson_init(res);
    if (rc == 0) {
        const bson_t *d = agg_run_result(r, 0);
        if (!bson_iter_init_find(&nid, d, "_id") && bson_iter_init_find(&id, doc, "_id"))
            bsonx_append_iter(res, "_id", &id);
        bson_concat(res, d);
    }
    agg_run_free(r);
    return rc;
}

int update_compile(const bson_t *spec, update_t **out, ms_error_t *err) {
    return update_compile_opts(spec, looks_like_pipeline(spec), NULL, out, err);
}

int update_compile_opts(const bson_t *spec, bool is_pipeline, const update_opts_t *o,
                        update_t **out, ms_error_t *err) {
    update_t *u = bson_malloc0(sizeof *u);
    bson_iter_t it;
    int rc = 0;
    const bson_t *afs = o && o->array_filters && !bson_empty(o->array_filters) ? o->array_filters
                                                                                : NULL;
    if (is_pipeline) {
        if (afs) {
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "arrayFilters may not be specified for "
                         "pipeline-style updates");
            goto out;
        }
        rc = compile_pipeline(u, spec, o ? o->let : NULL, err);
        goto out;
    }
    bool ops = bson_iter_init(&it, spec) && bson_iter_next(&it) && bson_iter_key(&it)[0] == '$';
    if (!ops) {
        u->replacement = true;
        u->doc = bson_copy(spec);
        if (afs) {
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "arrayFilters may not be specified for "
                         "replacement-style updates");
            goto out;
        }
        /* Its '$'-prefixed names are checked when it replaces a document (update_apply):
         * an upsert that inserts it may keep them, as an insert may. */
        goto out;
    }
    if (afs && (rc = compile_array_filters(u, afs, err)) != 0) goto out;
    bson_iter_init(&it, spec);
    while (rc == 0 && bson_iter_next(&it)) {
        if (bson_iter_key(&it)[0] != '$')
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE,
                         "Unknown modifier: %s. Expected a valid update modifier or pipeline-style "
                         "update specified as an array", bson_iter_key(&it));
        else
            rc = parse_operator(u, &it, err);
    }
    for (int i = 0; rc == 0 && i < u->n; i++)
        if (u->items[i].path.positional)
            rc = check_positional(u, &u->items[i], o ? o->query : NULL, err);
    for (int i = 0; rc == 0 && i < u->naf; i++)
        if (!u->af[i].used) {
            char *j = bsonx_to_json(spec);
            rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "The array filter for identifier '%s' was "
                         "not used in the update %s", u->af[i].id, j);
            bson_free(j);
        }
    if (rc == 0) rc = check_conflicts(u, err);
    if (rc == 0 && u->n > 1) qsort(u->items, (size_t)u->n, sizeof *u->items, cmp_items);
out:
    if (rc) {
        update_free(u);
        return rc;
    }
    *out = u;
    return 0;
}

/* ---- applying operators ------------------------------------------------------------- */

typedef struct uctx {
    unode_t *root;
    const bson_t *doc;   /* the document before the update, for messages */
    bool is_insert;
    const update_t *u;   /* for its arrayFilters */
} uctx_t;

/* "{_id: 1}" of the document, for error messages as MongoDB writes them. */
static char *id_text(const bson_t *doc) {
    bson_iter_t it;
    bson_t h = BSON_INITIALIZER;
    if (bson_iter_init_find(&it, doc, "_id")) bsonx_append_iter(&h, "_id", &it);
    char *j = bsonx_to_json(&h);
    bson_destroy(&h);
    return j;
}

static unode_t *arg_node(const uitem_t *item) {
    bson_iter_t v;
    arg_iter(item, &v);
    return unode_from_iter("", &v);
}

static int apply_set(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    unode_t *target;
    int rc = path_make(c->root, &item->path, &target, err);
    if (rc == 0) unode_assign(target, arg_node(item));
    if (rc == 0) target->is_new = false;
    return rc;
}

static int apply_unset(uctx_t *c, const uitem_t *item) {
    unode_t *parent;
    int at;
    if (!path_get(c->root, &item->path, &parent, &at)) return 0;
    if (parent->type == BSON_TYPE_ARRAY) unode_assign(parent->kids[at], unode_null(""));  /* arrays keep their length */
    else unode_remove(parent, at);
    return 0;
}

/* int32 op int32 stays int32 unless it overflows (then int64); int64 overflow is an
 * error; a double on either side gives a double (MongoDB's SafeNum rules). */
static bool arith(enum uop op, const bson_iter_t *a, const bson_iter_t *b, bson_value_t *out) {
    bson_type_t ta = bson_iter_type(a), tb = bson_iter_type(b);
    if (ta == BSON_TYPE_DOUBLE || tb == BSON_TYPE_DOUBLE) {
        double x, y;
        bsonx_as_double(a, &x);
        bsonx_as_double(b, &y);
        out->value_type = BSON_TYPE_DOUBLE;
        out->value.v_double = op == U_INC ? x + y : x * y;
        return true;
    }
    int64_t x, y, r;
    bsonx_as_int64(a, &x);
    bsonx_as_int64(b, &y);
    bool overflow = op == U_INC ? __builtin_add_overflow(x, y, &r) : __builtin_mul_overflow(x, y, &r);
    if (overflow) return false;
    if (ta == BSON_TYPE_INT32 && tb == BSON_TYPE_INT32 && r >= INT32_MIN && r <= INT32_MAX) {
        out->value_type = BSON_TYPE_INT32;
        out->value.v_int32 = (int32_t)r;
    } else {
        out->value_type = BSON_TYPE_INT64;
        out->value.v_int64 = r;
    }
    return true;
}

static int apply_arith(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    unode_t *target;
    bson_iter_t argv;
    arg_iter(item, &argv);
    int rc = path_make(c->root, &item->path, &target, err);
    if (rc) return rc;
    bson_t h;
    bson_iter_t cur;
    unode_holder(target, &h, &cur);
    bson_value_t res = {0};
    if (target->is_new) {
        /* Missing: $inc sets the operand, $mul sets 0 of the operand's type. */
        bson_t zero = BSON_INITIALIZER;
        bson_iter_t z;
        BSON_APPEND_INT32(&zero, "v", 0);
        bson_iter_init_find(&z, &zero, "v");
        if (item->op == U_INC) res = *bson_iter_value(&argv);
        else arith(U_MUL, &z, &argv, &res);
        bson_destroy(&zero);
    } else if (!bsonx_is_number(&cur) || bson_iter_type(&cur) == BSON_TYPE_DECIMAL128) {
        char *id = id_text(c->doc);
        rc = err_set(err, MS_ERR_TYPE_MISMATCH,
                     "Cannot apply %s to a value of non-numeric type. %s has the field '%s' of "
                     "non-numeric type %s", item->opname, id, target->key,
                     bsonx_type_name(bson_iter_type(&cur)));
        bson_free(id);
    } else if (!arith(item->op, &cur, &argv, &res)) {
        char *id = id_text(c->doc), *v = bsonx_to_json(&h);
        rc = err_set(err, MS_ERR_BAD_VALUE,
                     "Failed to apply %s operations to current value (%s) for document %s",
                     item->opname, v, id);
        bson_free(id);
        bson_free(v);
    }
    bson_destroy(&h);
    if (rc) return rc;
    unode_clear(target);
    target->type = res.value_type;
    target->val = res;   /* numbers own no memory */
    target->is_new = false;
    return 0;
}

static int apply_min_max(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    unode_t *target;
    int rc = path_make(c->root, &item->path, &target, err);
    if (rc) return rc;
    unode_t *arg = arg_node(item);
    int cmp = target->is_new ? 0 : unode_compare(arg, target);
    if (target->is_new || (item->op == U_MIN ? cmp < 0 : cmp > 0)) unode_assign(target, arg);
    else unode_free(arg);
    target->is_new = false;
    return 0;
}

/* The array at the item's path for $push / $addToSet: created empty when missing; any
 * other type is an error. */
static int array_target(uctx_t *c, const uitem_t *item, unode_t **out, ms_error_t *err) {
    unode_t *target;
    int rc = path_make(c->root, &item->path, &target, err);
    if (rc) return rc;
    if (target->is_new) {
        unode_clear(target);
        target->type = BSON_TYPE_ARRAY;
        target->is_new = false;
    }
    if (target->type != BSON_TYPE_ARRAY) {
        char *id = id_text(c->doc);
        rc = err_set(err, MS_ERR_BAD_VALUE, "The field '%s' must be an array but is of type %s in document %s",
                     item->path.text, bsonx_type_name(target->type), id);
        bson_free(id);
        return rc;
    }
    *out = target;
    return 0;
}

/* The elements to add: the $each array, or the argument itself. mods receives the
 * $each document (or NULL). */
static int each_elements(const uitem_t *item, bson_iter_t *mods, bool *has_each, ms_error_t *err) {
    bson_iter_t v, first;
    arg_iter(item, &v);
    *has_each = false;
    if (!BSON_ITER_HOLDS_DOCUMENT(&v) || !bson_iter_recurse(&v, &first) || !bson_iter_next(&first) ||
        bson_iter_key(&first)[0] != '$')
        return 0;
    bson_iter_t e;
    if (!bson_iter_recurse(&v, &e) || !bson_iter_find(&e, "$each"))
        return err_set(err, MS_ERR_BAD_VALUE, "%s modifiers require $each (field '%s')", item->opname,
                       item->path.text);
    if (!BSON_ITER_HOLDS_ARRAY(&e))
        return err_set(err, MS_ERR_BAD_VALUE, "The argument to $each in %s must be an array but it was of type: %s",
                       item->opname, bsonx_type_name(bson_iter_type(&e)));
    *has_each = true;
    *mods = v;
    return 0;
}

typedef struct sort_ctx {
    int dir;                  /* value sort: 1 / -1; 0 when by fields */
    const sortspec_t *spec;   /* by fields of element documents */
} sort_ctx_t;

typedef struct sort_item {
    unode_t *node;
    bson_t *doc;              /* the element as {"v": e} */
    int index;                /* original position: keeps the sort stable */
} sort_item_t;

static int sort_cmp(const void *pa, const void *pb, void *arg) {
    const sort_item_t *a = pa, *b = pb;
    const sort_ctx_t *sc = arg;
    int c;
    bson_iter_t ia, ib;
    bson_iter_init_find(&ia, a->doc, "v");
    bson_iter_init_find(&ib, b->doc, "v");
    if (sc->spec && BSON_ITER_HOLDS_DOCUMENT(&ia) && BSON_ITER_HOLDS_DOCUMENT(&ib)) {
        bson_t da, db;
        uint32_t la, lb;
        const uint8_t *pa_, *pb_;
        bson_iter_document(&ia, &la, &pa_);
        bson_iter_document(&ib, &lb, &pb_);
        bson_init_static(&da, pa_, la);
        bson_init_static(&db, pb_, lb);
        c = sortspec_compare_docs(sc->spec, &da, &db);
    } else {
        c = bsonx_compare_values(&ia, &ib) * (sc->dir ? sc->dir : 1);
    }
    return c ? c : a->index - b->index;
}

static int push_sort(unode_t *arr, const bson_iter_t *how, ms_error_t *err) {
    sort_ctx_t sc = {0};
    sortspec_t *spec = NULL;
    double d;
    if (BSON_ITER_HOLDS_DOCUMENT(how)) {
        uint32_t len;
        const uint8_t *data;
        bson_t sd;
        bson_iter_document(how, &len, &data);
        bson_init_static(&sd, data, len);
        int rc = sortspec_compile(&sd, &spec, err);
        if (rc) return rc;
        sc.spec = spec;
    } else if (bsonx_as_double(how, &d) && (d == 1.0 || d == -1.0)) {
        sc.dir = d > 0 ? 1 : -1;
    } else {
        return err_set(err, MS_ERR_BAD_VALUE, "The $sort is invalid: use 1/-1 to sort the whole element, "
                       "or {field:1/-1} to sort embedded fields");
    }
    sort_item_t *items = bson_malloc0(sizeof *items * (size_t)(arr->n + 1));
    for (int i = 0; i < arr->n; i++) {
        items[i].node = arr->kids[i];
        items[i].doc = bson_new();
        unode_append_to(arr->kids[i], items[i].doc, "v");
        items[i].index = i;
    }
    if (arr->n > 1) qsort_r(items, (size_t)arr->n, sizeof *items, sort_cmp, &sc);
    for (int i = 0; i < arr->n; i++) {
        arr->kids[i] = items[i].node;
        bson_destroy(items[i].doc);
    }
    bson_free(items);
    sortspec_free(spec);
    return 0;
}

/* $push {$each, $position, $sort, $slice}: insert at position, then sort, then slice. */
static int apply_push(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    bson_iter_t mods, m;
    bool has_each;
    unode_t *arr;
    int rc = each_elements(item, &mods, &has_each, err);
    if (rc == 0) rc = array_target(c, item, &arr, err);
    if (rc) return rc;
    if (!has_each) {
        unode_insert(arr, arr->n, arg_node(item));
        return 0;
    }
    int64_t pos = arr->n, slice = 0;
    bool has_slice = false, has_sort = false;
    bson_iter_t sort_how;
    bson_iter_recurse(&mods, &m);
    while (bson_iter_next(&m)) {
        const char *k = bson_iter_key(&m);
        if (strcmp(k, "$each") == 0) continue;
        if (strcmp(k, "$position") == 0 || strcmp(k, "$slice") == 0) {
            int64_t v;
            if (!bsonx_as_int64_exact(&m, &v))
                return err_set(err, MS_ERR_BAD_VALUE, "The value for %s must be an integer value", k);
            if (k[1] == 'p') pos = v < 0 ? (arr->n + v < 0 ? 0 : arr->n + v) : (v > arr->n ? arr->n : v);
            else { slice = v; has_slice = true; }
        } else if (strcmp(k, "$sort") == 0) {
            sort_how = m;
            has_sort = true;
        } else {
            return err_set(err, MS_ERR_BAD_VALUE, "Unrecognized clause in $push: %s", k);
        }
    }
    bson_iter_t e;
    bson_iter_recurse(&mods, &e);
    bson_iter_find(&e, "$each");
    bson_iter_t el;
    bson_iter_recurse(&e, &el);
    while (bson_iter_next(&el)) unode_insert(arr, (int)pos++, unode_from_iter("", &el));
    if (has_sort && (rc = push_sort(arr, &sort_how, err))) return rc;
    if (has_slice) {
        int64_t keep = slice < 0 ? -slice : slice;
        while (arr->n > keep) unode_remove(arr, slice < 0 ? 0 : arr->n - 1);
    }
    return 0;
}

static bool array_contains(const unode_t *arr, const unode_t *v) {
    for (int i = 0; i < arr->n; i++)
        if (unode_compare(arr->kids[i], v) == 0) return true;
    return false;
}

static int apply_add_to_set(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    bson_iter_t mods;
    bool has_each;
    unode_t *arr;
    int rc = each_elements(item, &mods, &has_each, err);
    if (rc == 0) rc = array_target(c, item, &arr, err);
    if (rc) return rc;
    if (!has_each) {
        unode_t *v = arg_node(item);
        if (array_contains(arr, v)) unode_free(v);
        else unode_insert(arr, arr->n, v);
        return 0;
    }
    bson_iter_t e, el;
    bson_iter_recurse(&mods, &e);
    bson_iter_find(&e, "$each");
    bson_iter_recurse(&e, &el);
    while (bson_iter_next(&el)) {
        unode_t *v = unode_from_iter("", &el);
        if (array_contains(arr, v)) unode_free(v);
        else unode_insert(arr, arr->n, v);
    }
    return 0;
}

/* The existing array at the item's path for $pull / $pop; NULL when missing (no-op). */
static int existing_array(uctx_t *c, const uitem_t *item, unode_t **out, ms_error_t *err) {
    unode_t *parent;
    int at;
    *out = path_get(c->root, &item->path, &parent, &at);
    if (*out && (*out)->type != BSON_TYPE_ARRAY)
        return err_set(err, MS_ERR_BAD_VALUE, "Cannot apply %s to a non-array value", item->opname);
    return 0;
}

/* Sets *m; fails only when a regex in the condition runs past maxTimeMS. */
static int pull_matches(const uitem_t *item, const unode_t *e, const unode_t *value, bool *m,
                        ms_error_t *err) {
    int rc = 0;
    *m = false;
    if (!item->cond) {
        *m = unode_compare(e, value) == 0;
        return 0;
    }
    bson_t h = BSON_INITIALIZER;
    if (item->cond_on_value) {
        unode_append_to(e, &h, "v");
        rc = query_match_checked(item->cond, &h, m, err);
    } else if (e->type == BSON_TYPE_DOCUMENT) {
        unode_children_to(e, &h);
        rc = query_match_checked(item->cond, &h, m, err);
    }
    bson_destroy(&h);
    return rc;
}

static int apply_pull(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    unode_t *arr;
    int rc = existing_array(c, item, &arr, err);
    if (rc || !arr) return rc;
    unode_t *value = arg_node(item);
    for (int i = arr->n - 1; i >= 0 && rc == 0; i--) {
        bool m;
        rc = pull_matches(item, arr->kids[i], value, &m, err);
        if (rc == 0 && m) unode_remove(arr, i);
    }
    unode_free(value);
    return rc;
}

static int apply_pop(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    unode_t *arr;
    bson_iter_t v;
    double d = 0;
    int rc = existing_array(c, item, &arr, err);
    if (rc || !arr || arr->n == 0) return rc;
    arg_iter(item, &v);
    bsonx_as_double(&v, &d);
    unode_remove(arr, d > 0 ? arr->n - 1 : 0);
    return 0;
}

static int apply_current_date(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    bson_iter_t v, t;
    unode_t *target;
    struct timeval tv;
    arg_iter(item, &v);
    int rc = path_make(c->root, &item->path, &target, err);
    if (rc) return rc;
    gettimeofday(&tv, NULL);
    unode_clear(target);
    target->is_new = false;
    bool ts = BSON_ITER_HOLDS_DOCUMENT(&v) && bson_iter_recurse(&v, &t) && bson_iter_find(&t, "$type") &&
              strcmp(bson_iter_utf8(&t, NULL), "timestamp") == 0;
    if (ts) {
        target->type = target->val.value_type = BSON_TYPE_TIMESTAMP;
        target->val.value.v_timestamp.timestamp = (uint32_t)tv.tv_sec;
        target->val.value.v_timestamp.increment = 1;
    } else {
        target->type = target->val.value_type = BSON_TYPE_DATE_TIME;
        target->val.value.v_datetime = (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
    }
    return 0;
}

/* $rename: move the value to the new path; a missing source is a no-op. Neither path may
 * go through an array. */
static int apply_rename(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    unode_t *parent, *src;
    int at;
    const upath_t *paths[2] = {&item->path, &item->to};
    for (int k = 0; k < 2; k++) {
        unode_t *cur = c->root;
        for (int i = 0; cur && i < paths[k]->n; i++) {
            if (cur->type == BSON_TYPE_ARRAY)
                return err_set(err, MS_ERR_BAD_VALUE, "The %s field cannot be an array element, '%s'",
                               k == 0 ? "source" : "destination", paths[k]->text);
            cur = is_container(cur) ? child_find(cur, paths[k]->parts[i], &at) : NULL;
        }
    }
    src = path_get(c->root, &item->path, &parent, &at);
    if (!src) return 0;
    parent->kids[at] = NULL;
    memmove(parent->kids + at, parent->kids + at + 1, sizeof *parent->kids * (size_t)(parent->n - at - 1));
    parent->n--;
    unode_t *target;
    int rc = path_make(c->root, &item->to, &target, err);
    if (rc) {
        unode_free(src);
        return rc;
    }
    unode_assign(target, src);
    target->is_new = false;
    return 0;
}

static int apply_positional(uctx_t *c, const uitem_t *item, ms_error_t *err);

static int apply_item(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    if (item->path.positional) return apply_positional(c, item, err);
    switch (item->op) {
    case U_SET: return apply_set(c, item, err);
    case U_SET_ON_INSERT: return c->is_insert ? apply_set(c, item, err) : 0;
    case U_UNSET: return apply_unset(c, item);
    case U_INC: case U_MUL: return apply_arith(c, item, err);
    case U_MIN: case U_MAX: return apply_min_max(c, item, err);
    case U_RENAME: return apply_rename(c, item, err);
    case U_PUSH: return apply_push(c, item, err);
    case U_ADD_TO_SET: return apply_add_to_set(c, item, err);
    case U_PULL: return apply_pull(c, item, err);
    case U_POP: return apply_pop(c, item, err);
    case U_CURRENT_DATE: return apply_current_date(c, item, err);
    }
    return err_set(err, MS_ERR_INTERNAL, "unhandled update operator");
}

/* ---- positional paths: resolved against the document into concrete ones --------- */

typedef struct upaths {
    upath_t *v;
    int n;
} upaths_t;

static void upaths_free(upaths_t *ps) {
    for (int i = 0; i < ps->n; i++) upath_free(&ps->v[i]);
    bson_free(ps->v);
    ps->v = NULL;
    ps->n = 0;
}

/* The first n components of p joined with dots (caller frees). */
static char *upath_join(const upath_t *p, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(p->parts[i]) + 1;
    char *s = bson_malloc0(len), *w = s;
    for (int i = 0; i < n; i++) w += sprintf(w, "%s%s", i ? "." : "", p->parts[i]);
    return s;
}

static void upaths_push(upaths_t *ps, const upath_t *acc) {
    ps->v = bson_realloc(ps->v, sizeof *ps->v * (size_t)(ps->n + 1));
    upath_t *p = &ps->v[ps->n++];
    memset(p, 0, sizeof *p);
    for (int i = 0; i < acc->n; i++) p->parts[i] = bson_strdup(acc->parts[i]);
    p->n = acc->n;
    p->text = upath_join(p, p->n);
}

/* Does element e pass q? wrap_array: matched as {"v": [e]} (the query's own predicates on
 * the array, for "$"), else as {"v": e} (an array filter). */
static bool element_matches(const query_t *q, const unode_t *e, bool wrap_array) {
    bson_t h = BSON_INITIALIZER, arr;
    if (wrap_array) {
        BSON_APPEND_ARRAY_BEGIN(&h, "v", &arr);
        unode_append_to(e, &arr, "0");
        bson_append_array_end(&h, &arr);
    } else {
        unode_append_to(e, &h, "v");
    }
    bool m = query_match(q, &h);
    bson_destroy(&h);
    return m;
}

/* Follows item's path from component i at node cur (NULL: missing), with the concrete
 * components so far in acc; every concrete path found goes to out. MongoDB's rules: the
 * array under a positional component must exist and be an array (BadValue). */
static int expand(const uctx_t *c, const uitem_t *item, const unode_t *cur, int i, upath_t *acc,
                  upaths_t *out, ms_error_t *err) {
    const upath_t *p = &item->path;
    int base = acc->n, rc = 0;
    for (; i < p->n && !part_is_positional(p->parts[i]); i++) {
        int at;
        acc->parts[acc->n++] = p->parts[i];   /* borrowed: acc only lends to upaths_push */
        cur = cur && is_container(cur) ? child_find(cur, p->parts[i], &at) : NULL;
    }
    if (i == p->n) {
        upaths_push(out, acc);
        acc->n = base;
        return 0;
    }
    const char *part = p->parts[i];
    char *where = upath_join(acc, acc->n);
    if (part[1] == '\0' && (c->is_insert || !item->pos_q)) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "The positional operator did not find the match "
                     "needed from the query.");
    } else if (!cur) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "The path '%s' must exist in the document in order "
                     "to apply array updates.", where);
    } else if (cur->type != BSON_TYPE_ARRAY) {
        bson_t h = BSON_INITIALIZER;
        unode_append_to(cur, &h, cur->key);
        char *j = bsonx_to_json(&h);
        rc = err_set(err, MS_ERR_BAD_VALUE, "Cannot apply array updates to non-array element %s",
                     j);
        bson_free(j);
        bson_destroy(&h);
    } else {
        const afilter_t *af = part[1] == '[' && part[2] != ']'
                                  ? af_find(c->u, part + 2, strlen(part) - 3) : NULL;
        bool found = false;
        for (int k = 0; rc == 0 && k < cur->n; k++) {
            char idx[16];
            if (part[1] == '\0' && (found || !element_matches(item->pos_q, cur->kids[k], true)))
                continue;
            if (af && !element_matches(af->q, cur->kids[k], false)) continue;
            found = true;
            snprintf(idx, sizeof idx, "%d", k);
            acc->parts[acc->n++] = idx;
            rc = expand(c, item, cur->kids[k], i + 1, acc, out, err);
            acc->n--;
        }
        if (rc == 0 && part[1] == '\0' && !found)
            rc = err_set(err, MS_ERR_BAD_VALUE, "The positional operator did not find the match "
                         "needed from the query.");
    }
    bson_free(where);
    acc->n = base;
    return rc;
}

/* An item with positional components: applied once per concrete path it resolves to. */
static int apply_positional(uctx_t *c, const uitem_t *item, ms_error_t *err) {
    upaths_t ps = {0};
    upath_t acc;
    memset(&acc, 0, sizeof acc);
    int rc = expand(c, item, c->root, 0, &acc, &ps, err);
    for (int i = 0; rc == 0 && i < ps.n; i++) {
        uitem_t one = *item;
        one.path = ps.v[i];
        one.path.positional = false;
        rc = apply_item(c, &one, err);
    }
    upaths_free(&ps);
    return rc;
}

/* _id may not change once a document has one (MongoDB's immutable-field check). */
static int check_id(const bson_t *before, const bson_t *after, ms_error_t *err) {
    bson_iter_t a, b;
    if (!bson_iter_init_find(&a, before, "_id")) return 0;
    if (bson_iter_init_find(&b, after, "_id") && bson_iter_type(&a) == bson_iter_type(&b) &&
        bsonx_compare_values(&a, &b) == 0)
        return 0;
    bson_t h = BSON_INITIALIZER;
    if (bson_iter_init_find(&b, after, "_id")) bsonx_append_iter(&h, "_id", &b);
    char *j = bsonx_to_json(&h);
    int rc = err_set(err, MS_ERR_IMMUTABLE_FIELD,
                     "After applying the update, the (immutable) field '_id' was found to have been "
                     "altered to %s", j);
    bson_free(j);
    bson_destroy(&h);
    return rc;
}

/* Replacement: the new document, with the old _id first when the new one has none. */
static void replace_doc(const update_t *u, const bson_t *doc, bson_t *out) {
    bson_iter_t id, it;
    bson_init(out);
    if (!bson_iter_init_find(&it, u->doc, "_id") && bson_iter_init_find(&id, doc, "_id"))
        bsonx_append_iter(out, "_id", &id);
    bson_concat(out, u->doc);
}

/* MongoDB 5.0+'s rule for a document that replaces an existing one (storage_validation's
 * check of '$'-prefixed names): a top-level name starting with '$' is refused, except the
 * parts of a DBRef in their order ($ref, then $id, then optionally $db). Inserts and
 * upserts that insert take any name. */
static int check_replacement_names(const bson_t *doc, ms_error_t *err) {
    bson_iter_t it, next;
    const char *prev = "";
    if (!bson_iter_init(&it, doc)) return 0;
    for (; bson_iter_next(&it); prev = bson_iter_key(&it)) {
        const char *k = bson_iter_key(&it);
        if (k[0] != '$') continue;
        if (strcmp(k, "$db") == 0 || strcmp(k, "$ref") == 0) {
            if (!BSON_ITER_HOLDS_UTF8(&it))
                return err_set(err, MS_ERR_INVALID_DBREF,
                               "The DBRef %s field must be a String, not a %s", k,
                               bsonx_type_name(bson_iter_type(&it)));
        }
        if (strcmp(k, "$db") == 0) {
            if (strcmp(prev, "$id") != 0)
                return err_set(err, MS_ERR_INVALID_DBREF,
                               "Found $db field without a $id before it, which is invalid.");
        } else if (strcmp(k, "$id") == 0) {
            if (strcmp(prev, "$ref") != 0)
                return err_set(err, MS_ERR_INVALID_DBREF,
                               "Found $id field without a $ref before it, which is invalid.");
        } else if (strcmp(k, "$ref") == 0) {
            next = it;
            if (!bson_iter_next(&next) || strcmp(bson_iter_key(&next), "$id") != 0)
                return err_set(err, MS_ERR_INVALID_DBREF,
                               "The DBRef $ref field must be followed by a $id field");
        } else {
            return err_set(err, MS_ERR_DOLLAR_PREFIXED_FIELD_NAME,
                           "The dollar ($) prefixed field '%s' in '%s' is not allowed in the "
                           "context of an update's replacement document. Consider using an "
                           "aggregation pipeline with $replaceWith.", k, k);
        }
    }
    return 0;
}

int update_check_replacement(const update_t *u, ms_error_t *err) {
    return u->replacement ? check_replacement_names(u->doc, err) : 0;
}

int update_apply(const update_t *u, const bson_t *doc, bool is_insert, bson_t *out,
                 bool *changed, ms_error_t *err) {
    bson_t res;
    int rc = 0;
    if (!is_insert && (rc = update_check_replacement(u, err)) != 0) return rc;
    if (u->replacement) {
        replace_doc(u, doc, &res);
    } else if (u->pipe) {
        rc = apply_pipeline(u, doc, &res, err);
    } else {
        uctx_t c = {.root = unode_from_doc(doc), .doc = doc, .is_insert = is_insert, .u = u};
        for (int i = 0; rc == 0 && i < u->n; i++) rc = apply_item(&c, &u->items[i], err);
        bson_init(&res);
        if (rc == 0) unode_children_to(c.root, &res);
        unode_free(c.root);
    }
    if (rc == 0) rc = check_id(doc, &res, err);
    if (rc) {
        bson_destroy(&res);
        return rc;
    }
    if (changed) *changed = res.len != doc->len || memcmp(bson_get_data(&res), bson_get_data(doc), doc->len) != 0;
    bson_init(out);
    bson_concat(out, &res);
    bson_destroy(&res);
    return 0;
}

/* ---- upsert seed -------------------------------------------------------------------- */

static int seed_from(const bson_t *query, unode_t *root, ms_error_t *err);

/* The equality value of a query field: {a: 1}, {a: {$eq: 1}}; false for anything else. */
static bool equality_value(const bson_iter_t *v, bson_iter_t *out) {
    bson_iter_t first;
    if (BSON_ITER_HOLDS_REGEX(v)) return false;
    if (!BSON_ITER_HOLDS_DOCUMENT(v) || !bson_iter_recurse(v, &first) || !bson_iter_next(&first) ||
        bson_iter_key(&first)[0] != '$') {
        *out = *v;
        return true;
    }
    bson_iter_t e;
    bson_iter_recurse(v, &e);
    if (bson_iter_find(&e, "$eq") && !BSON_ITER_HOLDS_REGEX(&e)) {
        *out = e;
        return true;
    }
    return false;
}

static int seed_field(const char *path, const bson_iter_t *v, unode_t *root, ms_error_t *err) {
    bson_iter_t value;
    upath_t p;
    unode_t *target;
    if (!equality_value(v, &value)) return 0;
    int rc = upath_parse(path, &p, err);
    if (rc == 0) rc = path_make(root, &p, &target, err);
    if (rc == 0) {
        if (!target->is_new) {
            rc = err_set(err, MS_ERR_NOT_SINGLE_VALUE_FIELD,
                         "cannot infer query fields to set, path '%s' is matched twice", path);
        } else {
            unode_assign(target, unode_from_iter("", &value));
            target->is_new = false;
        }
    }
    upath_free(&p);
    return rc;
}

static int seed_from(const bson_t *query, unode_t *root, ms_error_t *err) {
    bson_iter_t it;
    int rc = 0;
    if (!bson_iter_init(&it, query)) return err_set(err, MS_ERR_BAD_VALUE, "invalid query");
    while (rc == 0 && bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        if (strcmp(key, "$and") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
            bson_iter_t el;
            bson_iter_recurse(&it, &el);
            while (rc == 0 && bson_iter_next(&el)) {
                uint32_t len;
                const uint8_t *data;
                bson_t sub;
                if (!BSON_ITER_HOLDS_DOCUMENT(&el)) continue;
                bson_iter_document(&el, &len, &data);
                if (bson_init_static(&sub, data, len)) rc = seed_from(&sub, root, err);
            }
        } else if (key[0] != '$') {
            rc = seed_field(key, &it, root, err);
        }
    }
    return rc;
}

int update_upsert_seed(const bson_t *query, bson_t *out, ms_error_t *err) {
    unode_t *root = unode_container("", BSON_TYPE_DOCUMENT);
    int rc = seed_from(query, root, err);
    if (rc == 0) {
        bson_init(out);
        unode_children_to(root, out);
    }
    unode_free(root);
    return rc;
}
