/*
 * agg.c — the aggregation pipeline (MongoDB's Pipeline and DocumentSource stages):
 * parsing, a push-driven run over documents a caller supplies, and the split of a
 * pipeline into a shards part and a merger part. Linked into every process: the shard's
 * aggregate runs it over its planned scan today; the router and the config server are
 * meant to run it the same way. Pure logic over BSON (expressions in common/expr.c,
 * $match filters in common/query.c, sort order in common/sortspec.c).
 *
 * A run is push-driven: the caller pushes each source document, a streaming stage passes
 * what it makes to the next at once, a blocking stage ($group, $sort) keeps what it needs
 * until agg_run_finish. Everything is in memory: $sort and $group stop at the blocking
 * cap with MongoDB's 292 (allowDiskUse raises the cap, it does not spill), and the run's
 * results are capped too (the shard holds a pipeline's whole result in its cursor).
 */
#include "common/agg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/limits.h"
#include "common/opctx.h"
#include "common/query.h"
#include "common/sortspec.h"

/* ---- stages ------------------------------------------------------------------------- */

enum stage_kind { S_MATCH, S_PROJECT, S_ADDFIELDS, S_UNSET, S_GROUP, S_SORT, S_SKIP, S_LIMIT,
                  S_UNWIND, S_REPLACE };

/* A projection tree ($project, $addFields / $set, $unset): one node per path component. */
enum pnode_kind { P_INCLUDE, P_EXCLUDE, P_COMPUTED, P_NESTED };
typedef struct pnode {
    char *name;
    enum pnode_kind kind;
    expr_t *e;                 /* P_COMPUTED */
    struct pnode **kids;       /* P_NESTED, in spec order */
    int n;
} pnode_t;

enum acc_kind { A_SUM, A_AVG, A_MIN, A_MAX, A_FIRST, A_LAST, A_PUSH, A_ADDTOSET, A_COUNT,
                A_PARTIAL_AVG, A_MERGE_AVG, A_CONCAT_ARRAYS, A_UNION_SETS };
static const char *const ACC_NAMES[] = {"$sum", "$avg", "$min", "$max", "$first", "$last",
                                        "$push", "$addToSet", "$count", "$_partialAvg",
                                        "$_mergeAvg", "$_concatArrays", "$_unionSets"};

typedef struct acc_spec {
    char *field;
    enum acc_kind kind;
    expr_t *e;                 /* NULL for $count */
    bson_value_t arg;          /* the argument as written (for the split) */
} acc_spec_t;

typedef struct stage {
    enum stage_kind kind;
    bson_t spec;               /* {$name: ...} as it runs (for explain and the split) */
    /* $match */
    query_t *q;
    bson_t *filter;
    /* $project / $addFields / $unset */
    pnode_t root;
    bool inclusion;            /* $project: inclusion (vs exclusion) */
    bool id_excluded;          /* $project inclusion with _id: 0 */
    /* $group */
    expr_t *id;                /* _id expression (NULL when id_fields) */
    expr_t **id_fields;        /* _id: {a: e1, b: e2}: each field alone (missing → null) */
    char **id_names;
    int nid;
    bson_value_t id_arg;
    acc_spec_t *accs;
    int nacc;
    /* $sort */
    sortspec_t *sort;
    int64_t sort_limit;        /* a directly following $limit (top-k), 0 = none */
    /* $skip / $limit */
    int64_t n;
    /* $replaceRoot / $replaceWith */
    expr_t *new_root;
    /* $unwind */
    char *path;
    char *index_field;
    bool preserve;
} stage_t;

struct agg_pipeline {
    stage_t *st;
    int n, cap;
    agg_opts_t opts;
};

static void pnode_clear(pnode_t *p) {
    free(p->name);
    expr_free(p->e);
    for (int i = 0; i < p->n; i++) {
        pnode_clear(p->kids[i]);
        free(p->kids[i]);
    }
    free(p->kids);
    memset(p, 0, sizeof *p);
}

static void stage_clear(stage_t *s) {
    bson_destroy(&s->spec);
    query_free(s->q);
    if (s->filter) bson_destroy(s->filter);
    pnode_clear(&s->root);
    expr_free(s->id);
    for (int i = 0; i < s->nid; i++) {
        expr_free(s->id_fields[i]);
        free(s->id_names[i]);
    }
    free(s->id_fields);
    free(s->id_names);
    bson_value_destroy(&s->id_arg);
    for (int i = 0; i < s->nacc; i++) {
        free(s->accs[i].field);
        expr_free(s->accs[i].e);
        bson_value_destroy(&s->accs[i].arg);
    }
    free(s->accs);
    sortspec_free(s->sort);
    free(s->path);
    free(s->index_field);
    expr_free(s->new_root);
}

void agg_free(agg_pipeline_t *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) stage_clear(&p->st[i]);
    free(p->st);
    free(p);
}

int agg_nstages(const agg_pipeline_t *p) { return p->n; }

void agg_pipeline_rest(const bson_t *pipeline, bson_t *out) {
    bson_iter_t it;
    int k = 0;
    bson_init(out);
    if (bson_iter_init(&it, pipeline) && bson_iter_next(&it))
        while (bson_iter_next(&it)) {
            char key[16];
            snprintf(key, sizeof key, "%d", k++);
            bson_append_iter(out, key, -1, &it);
        }
}

const bson_t *agg_leading_match(const agg_pipeline_t *p) {
    return p->n > 0 && p->st[0].kind == S_MATCH ? p->st[0].filter : NULL;
}

/* A new stage at the end (zeroed, spec initialised) or NULL. */
static stage_t *stage_add(agg_pipeline_t *p, enum stage_kind k) {
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 8;
        stage_t *ns = realloc(p->st, (size_t)cap * sizeof *ns);
        if (!ns) return NULL;
        p->st = ns;
        p->cap = cap;
    }
    memset(&p->st[p->n], 0, sizeof p->st[p->n]);
    p->st[p->n].kind = k;
    bson_init(&p->st[p->n].spec);
    return &p->st[p->n++];
}

/* ---- projection trees --------------------------------------------------------------- */

static pnode_t *pnode_child(pnode_t *p, const char *name, size_t len) {
    pnode_t *c, **nk;
    for (int i = 0; i < p->n; i++)
        if (strlen(p->kids[i]->name) == len && memcmp(p->kids[i]->name, name, len) == 0)
            return p->kids[i];
    if (!(nk = realloc(p->kids, (size_t)(p->n + 1) * sizeof *nk))) return NULL;
    p->kids = nk;
    if (!(c = calloc(1, sizeof *c))) return NULL;
    c->name = strndup(name, len);
    c->kind = P_NESTED;
    p->kids[p->n++] = c;
    return c;
}

typedef struct pparse {
    const char *stage;       /* "$project", "$addFields", "$unset" */
    const expr_vars_t *vars;
    bool any_incl, any_excl; /* besides _id at the top */
} pparse_t;

static int pparse_field(pparse_t *pp, pnode_t *parent, const char *path, const bson_iter_t *it,
                        bool top, int depth, ms_error_t *err);

/* The fields of a projection document under parent. */
static int pparse_doc(pparse_t *pp, pnode_t *parent, const bson_iter_t *it, bool top, int depth,
                      ms_error_t *err) {
    bson_iter_t di;
    int rc = 0;
    if (depth > MS_EXPR_DEPTH_MAX)
        return err_set(err, MS_ERR_OVERFLOW, "projection nested too deeply");
    bson_iter_recurse(it, &di);
    while (rc == 0 && bson_iter_next(&di))
        rc = pparse_field(pp, parent, bson_iter_key(&di), &di, top, depth, err);
    return rc;
}

static int pparse_field(pparse_t *pp, pnode_t *parent, const char *path, const bson_iter_t *it,
                        bool top, int depth, ms_error_t *err) {
    pnode_t *node = parent;
    const char *s = path;
    bool is_id = top && strcmp(path, "_id") == 0;
    if (!path[0])
        return err_set(err, MS_ERR_LOC_40352, "Invalid %s :: caused by :: FieldPath cannot be constructed "
                       "with empty string", pp->stage);
    if (path[0] == '$')
        return err_set(err, MS_ERR_LOC_16410, "Invalid %s :: caused by :: FieldPath field names may not "
                       "start with '$'. Consider using $getField or $setField.", pp->stage);
    for (;;) {   /* walk / create the nodes of a dotted path */
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        if (len == 0)
            return err_set(err, MS_ERR_LOC_15998, "Invalid %s :: caused by :: FieldPath field names may "
                           "not be empty strings.", pp->stage);
        if (node->kind != P_NESTED)
            return err_set(err, MS_ERR_LOC_31250, "Invalid %s :: caused by :: Path collision at %s",
                           pp->stage, path);
        if (!(node = pnode_child(node, s, len)))
            return err_set(err, MS_ERR_INTERNAL, "out of memory");
        if (!dot) break;
        s = dot + 1;
    }
    if (node->n > 0 || node->kind != P_NESTED || node->e)
        return err_set(err, MS_ERR_LOC_31250, "Invalid %s :: caused by :: Path collision at %s",
                       pp->stage, path);
    if (strcmp(pp->stage, "$project") == 0 &&
        (BSON_ITER_HOLDS_BOOL(it) || bsonx_is_number(it))) {
        bool incl = bsonx_truthy(it);
        node->kind = incl ? P_INCLUDE : P_EXCLUDE;
        if (!is_id) {
            if (incl && pp->any_excl)
                return err_set(err, MS_ERR_LOC_31253, "Invalid $project :: caused by :: Cannot do inclusion "
                               "on field %s in exclusion projection", path);
            if (!incl && pp->any_incl)
                return err_set(err, MS_ERR_LOC_31254, "Invalid $project :: caused by :: Cannot do exclusion "
                               "on field %s in inclusion projection", path);
            if (incl) pp->any_incl = true;
            else pp->any_excl = true;
        }
        return 0;
    }
    if (strcmp(pp->stage, "$project") == 0 && BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t di;
        bson_iter_recurse(it, &di);
        if (!bson_iter_next(&di))
            return err_set(err, MS_ERR_LOC_51270, "Invalid $project :: caused by :: An empty sub-projection "
                           "is not a valid value. Found empty object at path");
        if (bson_iter_key(&di)[0] != '$')
            return pparse_doc(pp, node, it, false, depth + 1, err);
    }
    if (strcmp(pp->stage, "$addFields") == 0 && BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t di;
        bson_iter_recurse(it, &di);
        if (bson_iter_next(&di) && bson_iter_key(&di)[0] != '$')
            return pparse_doc(pp, node, it, false, depth + 1, err);
    }
    /* a computed field: an inclusion for $project's mode rules */
    if (strcmp(pp->stage, "$project") == 0 && !is_id) {
        if (pp->any_excl)
            return err_set(err, MS_ERR_LOC_31252, "Invalid $project :: caused by :: Cannot use expression "
                           "other than $meta in exclusion projection");
        pp->any_incl = true;
    }
    node->kind = P_COMPUTED;
    return expr_parse(it, pp->vars, &node->e, err);
}

/* Evaluates a computed node against root and appends it under name (missing: nothing). */
static int put_computed(const pnode_t *c, const bson_t *root, const expr_vars_t *vars,
                        bson_t *out, ms_error_t *err) {
    bson_value_t v;
    int rc = expr_eval(c->e, root, vars, &v, err);
    if (rc != 0) return rc;
    expr_value_append(out, c->name, &v);
    bson_value_destroy(&v);
    return 0;
}

static pnode_t *kid_named(const pnode_t *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->kids[i]->name, name) == 0) return p->kids[i];
    return NULL;
}

static bool has_computed(const pnode_t *p) {
    if (p->kind == P_COMPUTED) return true;
    for (int i = 0; i < p->n; i++)
        if (has_computed(p->kids[i])) return true;
    return false;
}

typedef int (*papply_fn)(const pnode_t *n, const bson_t *doc, const bson_t *root,
                         const expr_vars_t *vars, bool top, bool keep_id, bson_t *out,
                         ms_error_t *err);

/* Appends key: apply(n) over sub (NULL = a missing or scalar value: a new document), as a
 * nested projection level (never the top one). */
static int apply_sub(papply_fn apply, const pnode_t *n, const bson_t *sub, const bson_t *root,
                     const expr_vars_t *vars, bson_t *out, const char *key, ms_error_t *err) {
    bson_t o;
    BSON_APPEND_DOCUMENT_BEGIN(out, key, &o);
    int rc = apply(n, sub, root, vars, false, false, &o, err);
    bson_append_document_end(out, &o);
    return rc;
}

/* apply_sub over the document the iterator holds. */
static int apply_sub_doc(papply_fn apply, const pnode_t *n, const bson_iter_t *it,
                         const bson_t *root, const expr_vars_t *vars, bson_t *out,
                         const char *key, ms_error_t *err) {
    bson_t sub;
    bsonx_view_container(it, &sub);
    return apply_sub(apply, n, &sub, root, vars, out, key, err);
}

/* Maps apply over the documents (and nested arrays) of an array; other elements: kept
 * when keep_scalars, else dropped (inclusion drops them, as MongoDB's does). */
static int apply_array(papply_fn apply, const pnode_t *n, const bson_iter_t *it,
                       const bson_t *root, const expr_vars_t *vars, bool keep_scalars,
                       bson_t *out, const char *key, ms_error_t *err) {
    bson_t arr, res;
    bson_iter_t ai;
    int i = 0, rc = 0;
    char k[16];
    bsonx_view_container(it, &arr);
    bson_iter_init(&ai, &arr);
    BSON_APPEND_ARRAY_BEGIN(out, key, &res);
    while (rc == 0 && bson_iter_next(&ai)) {
        snprintf(k, sizeof k, "%d", i);
        if (BSON_ITER_HOLDS_DOCUMENT(&ai)) {
            rc = apply_sub_doc(apply, n, &ai, root, vars, &res, k, err);
            i++;
        } else if (BSON_ITER_HOLDS_ARRAY(&ai)) {
            rc = apply_array(apply, n, &ai, root, vars, keep_scalars, &res, k, err);
            i++;
        } else if (keep_scalars) {
            bsonx_append_iter(&res, k, &ai);
            i++;
        } else if (has_computed(n)) {
            /* a computed sub-field replaces a scalar element with a new document */
            rc = apply_sub(apply, n, NULL, root, vars, &res, k, err);
            i++;
        }
    }
    bson_append_array_end(out, &res);
    return rc;
}

/* $project inclusion: the included fields in document order, then the computed ones (and
 * new nested documents holding computed fields) in spec order. doc NULL = missing. */
static int apply_incl(const pnode_t *n, const bson_t *doc, const bson_t *root,
                      const expr_vars_t *vars, bool top, bool keep_id, bson_t *out,
                      ms_error_t *err) {
    bson_iter_t it;
    int rc = 0;
    if (doc && bson_iter_init(&it, doc)) {
        while (rc == 0 && bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            const pnode_t *c = kid_named(n, k);
            if (top && keep_id && strcmp(k, "_id") == 0 && (!c || c->kind == P_INCLUDE)) {
                bsonx_append_iter(out, k, &it);
                continue;
            }
            if (!c) continue;
            if (c->kind == P_INCLUDE) {
                bsonx_append_iter(out, k, &it);
            } else if (c->kind == P_NESTED) {
                if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                    rc = apply_sub_doc(apply_incl, c, &it, root, vars, out, k, err);
                } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
                    rc = apply_array(apply_incl, c, &it, root, vars, false, out, k, err);
                } else if (has_computed(c)) {
                    rc = apply_sub(apply_incl, c, NULL, root, vars, out, k, err);
                }
            }
        }
    }
    for (int i = 0; rc == 0 && i < n->n; i++) {
        const pnode_t *c = n->kids[i];
        if (c->kind == P_COMPUTED) {
            rc = put_computed(c, root, vars, out, err);
        } else if (c->kind == P_NESTED && has_computed(c) &&
                   !(doc && bson_has_field(doc, c->name))) {
            rc = apply_sub(apply_incl, c, NULL, root, vars, out, c->name, err);
        }
    }
    return rc;
}

/* Exclusion ($project with 0s, $unset): everything but the excluded paths. */
static int apply_excl(const pnode_t *n, const bson_t *doc, const bson_t *root,
                      const expr_vars_t *vars, bool top, bool keep_id, bson_t *out,
                      ms_error_t *err) {
    bson_iter_t it;
    int rc = 0;
    (void)top;
    (void)keep_id;
    if (!doc || !bson_iter_init(&it, doc)) return 0;
    while (rc == 0 && bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        const pnode_t *c = kid_named(n, k);
        if (!c || c->kind == P_INCLUDE) {
            bsonx_append_iter(out, k, &it);
        } else if (c->kind == P_NESTED) {
            if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                rc = apply_sub_doc(apply_excl, c, &it, root, vars, out, k, err);
            } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
                rc = apply_array(apply_excl, c, &it, root, vars, true, out, k, err);
            } else {
                bsonx_append_iter(out, k, &it);
            }
        }
    }
    return rc;
}

/* $addFields: the document with computed fields replacing theirs in place or appended. */
static int apply_add(const pnode_t *n, const bson_t *doc, const bson_t *root,
                     const expr_vars_t *vars, bool top, bool keep_id, bson_t *out,
                     ms_error_t *err) {
    bson_iter_t it;
    int rc = 0;
    (void)top;
    (void)keep_id;
    if (doc && bson_iter_init(&it, doc)) {
        while (rc == 0 && bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            const pnode_t *c = kid_named(n, k);
            if (!c) {
                bsonx_append_iter(out, k, &it);
            } else if (c->kind == P_COMPUTED) {
                rc = put_computed(c, root, vars, out, err);
            } else if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
                rc = apply_sub_doc(apply_add, c, &it, root, vars, out, k, err);
            } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
                rc = apply_array(apply_add, c, &it, root, vars, false, out, k, err);
            } else {
                rc = apply_sub(apply_add, c, NULL, root, vars, out, k, err);
            }
        }
    }
    for (int i = 0; rc == 0 && i < n->n; i++) {
        const pnode_t *c = n->kids[i];
        if (doc && bson_has_field(doc, c->name)) continue;
        if (c->kind == P_COMPUTED) {
            rc = put_computed(c, root, vars, out, err);
        } else {
            rc = apply_sub(apply_add, c, NULL, root, vars, out, c->name, err);
        }
    }
    return rc;
}

/* ---- stage parsers ------------------------------------------------------------------ */

static int parse_match(agg_pipeline_t *p, const bson_iter_t *it, ms_error_t *err) {
    bson_t f;
    stage_t *s;
    int rc;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bsonx_view_container(it, &f))
        return err_set(err, MS_ERR_LOC_15959, "the match filter must be an expression in an object");
    if (!(s = stage_add(p, S_MATCH))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    s->filter = bson_copy(&f);
    BSON_APPEND_DOCUMENT(&s->spec, "$match", &f);
    /* $expr in the filter may name the pipeline's `let` variables. */
    if ((rc = query_compile_vars(&f, p->opts.vars, &s->q, err)) != 0) return rc;
    return 0;
}

/* {$replaceRoot: {newRoot: <expression>}} and its shorthand {$replaceWith: <expression>}
 * (rewritten to the former, as MongoDB does): the document becomes the expression's
 * value, which must be a document (40228 at run time). */
static int parse_replace(agg_pipeline_t *p, const char *name, const bson_iter_t *it,
                         ms_error_t *err) {
    bson_iter_t root = *it;
    stage_t *s;
    bson_t in;
    if (strcmp(name, "$replaceRoot") == 0) {
        bson_iter_t f;
        bool found = false;
        if (!BSON_ITER_HOLDS_DOCUMENT(it))
            return err_set(err, MS_ERR_LOC_40229, "expected an object as specification for "
                           "$replaceRoot stage, got %s", bsonx_type_name(bson_iter_type(it)));
        bson_iter_recurse(it, &f);
        while (bson_iter_next(&f)) {
            if (strcmp(bson_iter_key(&f), "newRoot") != 0)
                return err_set(err, MS_ERR_IDL_UNKNOWN_FIELD, "BSON field '$replaceRoot.%s' is an "
                               "unknown field.", bson_iter_key(&f));
            root = f;
            found = true;
        }
        if (!found)
            return err_set(err, MS_ERR_LOC_40231, "no newRoot specified for the $replaceRoot stage");
    }
    if (!(s = stage_add(p, S_REPLACE))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    int rc = expr_parse(&root, p->opts.vars, &s->new_root, err);
    if (rc) return rc;
    BSON_APPEND_DOCUMENT_BEGIN(&s->spec, "$replaceRoot", &in);
    expr_append(s->new_root, &in, "newRoot");
    bson_append_document_end(&s->spec, &in);
    return 0;
}

static int parse_projection(agg_pipeline_t *p, const char *name, const bson_iter_t *it,
                            ms_error_t *err) {
    pparse_t pp = {name, p->opts.vars, false, false};
    stage_t *s;
    bson_t view;
    int rc;
    enum stage_kind k = strcmp(name, "$project") == 0 ? S_PROJECT : S_ADDFIELDS;
    if (strcmp(name, "$set") == 0) pp.stage = "$addFields";
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bsonx_view_container(it, &view)) {
        if (k == S_PROJECT)
            return err_set(err, MS_ERR_LOC_15969, "$project specification must be an object");
        return err_set(err, MS_ERR_LOC_40272, "%s specification stage must be an object, got %s", name,
                       bsonx_type_name(bson_iter_type(it)));
    }
    if (k == S_PROJECT && bson_empty(&view))
        return err_set(err, MS_ERR_LOC_51272, "Invalid $project :: caused by :: projection specification "
                       "must have at least one field");
    if (!(s = stage_add(p, k))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    s->root.kind = P_NESTED;
    bson_append_document(&s->spec, name, -1, &view);
    if ((rc = pparse_doc(&pp, &s->root, it, true, 0, err)) != 0) return rc;
    if (k == S_PROJECT) {
        pnode_t *id = kid_named(&s->root, "_id");
        s->inclusion = pp.any_incl || !pp.any_excl;
        if (!pp.any_incl && !pp.any_excl && id && id->kind == P_EXCLUDE)
            s->inclusion = false;    /* {_id: 0} alone is an exclusion */
        if (!pp.any_incl && !pp.any_excl && id && id->kind != P_EXCLUDE)
            s->inclusion = true;
        s->id_excluded = id && id->kind == P_EXCLUDE;
    }
    return 0;
}

static int parse_unset(agg_pipeline_t *p, const bson_iter_t *it, ms_error_t *err) {
    pparse_t pp = {"$unset", p->opts.vars, false, false};
    stage_t *s;
    bson_t arr;
    bson_iter_t ai;
    int rc = 0;
    if (!BSON_ITER_HOLDS_UTF8(it) && !BSON_ITER_HOLDS_ARRAY(it))
        return err_set(err, MS_ERR_LOC_31002, "$unset specification must be a string or an array");
    if (!(s = stage_add(p, S_UNSET))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    s->root.kind = P_NESTED;
    bsonx_append_iter(&s->spec, "$unset", it);
    if (BSON_ITER_HOLDS_ARRAY(it)) {
        bsonx_view_container(it, &arr);
        bson_iter_init(&ai, &arr);
        if (bson_empty(&arr))
            return err_set(err, MS_ERR_LOC_31119, "$unset specification must be a string or an array with "
                           "at least one field");
    }
    for (bool more = true; more && rc == 0;) {
        const bson_iter_t *cur = it;
        bson_t one = BSON_INITIALIZER;
        bson_iter_t oi;
        if (BSON_ITER_HOLDS_ARRAY(it)) {
            if (!bson_iter_next(&ai)) break;
            if (!BSON_ITER_HOLDS_UTF8(&ai)) {
                bson_destroy(&one);
                return err_set(err, MS_ERR_LOC_31120, "$unset specification must be a string or an array "
                               "containing only string values");
            }
            cur = &ai;
        } else {
            more = false;
        }
        BSON_APPEND_INT32(&one, "x", 0);
        bson_iter_init_find(&oi, &one, "x");
        pp.stage = "$project";   /* as an exclusion: {path: 0} */
        rc = pparse_field(&pp, &s->root, bson_iter_utf8(cur, NULL), &oi, false, 0, err);
        bson_destroy(&one);
    }
    return rc;
}

static int acc_kind_of(const char *name) {
    for (int i = 0; i < (int)(sizeof ACC_NAMES / sizeof ACC_NAMES[0]); i++)
        if (strcmp(ACC_NAMES[i], name) == 0) return i;
    return -1;
}

static int parse_group(agg_pipeline_t *p, const bson_iter_t *it, ms_error_t *err) {
    stage_t *s;
    bson_iter_t gi;
    bson_t view;
    bool have_id = false;
    int rc = 0;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bsonx_view_container(it, &view))
        return err_set(err, MS_ERR_LOC_15947, "a group's fields must be specified in an object");
    if (!(s = stage_add(p, S_GROUP))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    BSON_APPEND_DOCUMENT(&s->spec, "$group", &view);
    bson_iter_init(&gi, &view);
    while (rc == 0 && bson_iter_next(&gi)) {
        const char *f = bson_iter_key(&gi);
        bson_iter_t ai;
        acc_spec_t *a;
        int k;
        if (strcmp(f, "_id") == 0) {
            bson_iter_t di;
            have_id = true;
            expr_value_from_iter(&gi, &s->id_arg);
            bson_iter_recurse(&gi, &di);
            if (BSON_ITER_HOLDS_DOCUMENT(&gi) && bson_iter_next(&di) &&
                bson_iter_key(&di)[0] != '$') {
                /* _id: {a: e1, b: e2}: each field alone, so a missing one is null */
                bson_iter_recurse(&gi, &di);
                while (rc == 0 && bson_iter_next(&di)) {
                    expr_t *e = NULL;
                    expr_t **nf;
                    char **nn;
                    if ((rc = expr_parse(&di, p->opts.vars, &e, err)) != 0) break;
                    nf = realloc(s->id_fields, (size_t)(s->nid + 1) * sizeof *nf);
                    if (nf) s->id_fields = nf;
                    nn = nf ? realloc(s->id_names, (size_t)(s->nid + 1) * sizeof *nn) : NULL;
                    if (nn) s->id_names = nn;
                    if (!nf || !nn) {
                        expr_free(e);
                        rc = err_set(err, MS_ERR_INTERNAL, "out of memory");
                        break;
                    }
                    s->id_fields[s->nid] = e;
                    s->id_names[s->nid++] = strdup(bson_iter_key(&di));
                }
            } else {
                rc = expr_parse(&gi, p->opts.vars, &s->id, err);
            }
            continue;
        }
        if (f[0] == '$')
            return err_set(err, MS_ERR_LOC_40236, "The field name '%s' cannot be an operator name", f);
        if (strchr(f, '.'))
            return err_set(err, MS_ERR_LOC_40235, "The field name '%s' cannot contain '.'", f);
        if (!BSON_ITER_HOLDS_DOCUMENT(&gi))
            return err_set(err, MS_ERR_LOC_40234, "The field '%s' must be an accumulator object", f);
        bson_iter_recurse(&gi, &ai);
        if (!bson_iter_next(&ai))
            return err_set(err, MS_ERR_LOC_40238, "The field '%s' must specify one accumulator", f);
        {
            bson_iter_t cnt = ai;
            if (bson_iter_next(&cnt))
                return err_set(err, MS_ERR_LOC_40238, "The field '%s' must specify one accumulator", f);
        }
        if ((k = acc_kind_of(bson_iter_key(&ai))) < 0)
            return err_set(err, MS_ERR_LOC_15952, "unknown group operator '%s'", bson_iter_key(&ai));
        if (BSON_ITER_HOLDS_ARRAY(&ai))
            return err_set(err, MS_ERR_LOC_40237, "The %s accumulator is a unary operator",
                           bson_iter_key(&ai));
        if (s->nacc >= MS_AGG_ACCUMULATORS_MAX)
            return err_set(err, MS_ERR_BAD_VALUE, "a $group has at most %d accumulators in "
                           "minishard", MS_AGG_ACCUMULATORS_MAX);
        {
            acc_spec_t *na = realloc(s->accs, (size_t)(s->nacc + 1) * sizeof *na);
            if (!na) return err_set(err, MS_ERR_INTERNAL, "out of memory");
            s->accs = na;
        }
        a = &s->accs[s->nacc++];
        memset(a, 0, sizeof *a);
        a->field = strdup(f);
        a->kind = (enum acc_kind)k;
        expr_value_from_iter(&ai, &a->arg);
        if (a->kind == A_COUNT) {
            bson_t cv;
            if (!BSON_ITER_HOLDS_DOCUMENT(&ai) || !bsonx_view_container(&ai, &cv) ||
                !bson_empty(&cv))
                return err_set(err, MS_ERR_FAILED_TO_PARSE, "$count takes no arguments, i.e. "
                               "$count:{}");
        } else {
            rc = expr_parse(&ai, p->opts.vars, &a->e, err);
        }
    }
    if (rc == 0 && !have_id)
        rc = err_set(err, MS_ERR_LOC_15955, "a group specification must include an _id");
    return rc;
}

static int parse_sort(agg_pipeline_t *p, const bson_iter_t *it, ms_error_t *err) {
    stage_t *s;
    bson_t view;
    bson_iter_t si;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || !bsonx_view_container(it, &view))
        return err_set(err, MS_ERR_LOC_15973, "the $sort key specification must be an object");
    if (bson_empty(&view))
        return err_set(err, MS_ERR_LOC_15976, "$sort stage must have at least one sort key");
    bson_iter_init(&si, &view);
    while (bson_iter_next(&si)) {
        int64_t v;
        if (!bsonx_as_int64_exact(&si, &v) || (v != 1 && v != -1))
            return err_set(err, MS_ERR_LOC_15975, "$sort key ordering must be 1 (for ascending) or -1 "
                           "(for descending)");
    }
    if (!(s = stage_add(p, S_SORT))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    BSON_APPEND_DOCUMENT(&s->spec, "$sort", &view);
    return sortspec_compile(&view, &s->sort, err);
}

static int parse_skip_limit(agg_pipeline_t *p, bool is_limit, const bson_iter_t *it,
                            ms_error_t *err) {
    stage_t *s;
    int64_t v;
    if (!bsonx_is_number(it))
        return is_limit ? err_set(err, MS_ERR_LOC_15957, "the limit must be specified as a number")
                        : err_set(err, MS_ERR_LOC_15972, "Argument to $skip must be a number");
    if (!bsonx_as_int64_exact(it, &v))
        return err_set(err, is_limit ? MS_ERR_LOC_15957 : MS_ERR_LOC_15972, "invalid argument to %s stage: Cannot "
                       "represent as a 64-bit integer", is_limit ? "$limit" : "$skip");
    if (is_limit && v <= 0) return err_set(err, MS_ERR_LOC_15958, "the limit must be positive");
    if (!is_limit && v < 0)
        return err_set(err, MS_ERR_LOC_15956, "invalid argument to $skip stage: Expected a non-negative "
                       "number in: $skip: %lld", (long long)v);
    if (!(s = stage_add(p, is_limit ? S_LIMIT : S_SKIP)))
        return err_set(err, MS_ERR_INTERNAL, "out of memory");
    s->n = v;
    BSON_APPEND_INT64(&s->spec, is_limit ? "$limit" : "$skip", v);
    return 0;
}

static int parse_unwind(agg_pipeline_t *p, const bson_iter_t *it, ms_error_t *err) {
    stage_t *s;
    const char *path = NULL, *idx = NULL;
    bool preserve = false;
    if (BSON_ITER_HOLDS_UTF8(it)) {
        path = bson_iter_utf8(it, NULL);
    } else if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t ui;
        bson_iter_recurse(it, &ui);
        while (bson_iter_next(&ui)) {
            const char *k = bson_iter_key(&ui);
            if (strcmp(k, "path") == 0) {
                if (!BSON_ITER_HOLDS_UTF8(&ui))
                    return err_set(err, MS_ERR_LOC_28808, "expected a string as the path for $unwind "
                                   "stage, got %s", bsonx_type_name(bson_iter_type(&ui)));
                path = bson_iter_utf8(&ui, NULL);
            } else if (strcmp(k, "includeArrayIndex") == 0) {
                if (!BSON_ITER_HOLDS_UTF8(&ui))
                    return err_set(err, MS_ERR_LOC_28810, "expected a non-empty string for the "
                                   "includeArrayIndex option to $unwind stage");
                idx = bson_iter_utf8(&ui, NULL);
                if (!idx[0])
                    return err_set(err, MS_ERR_LOC_28810, "expected a non-empty string for the "
                                   "includeArrayIndex option to $unwind stage");
                if (strchr(idx, '.'))
                    return err_set(err, MS_ERR_BAD_VALUE, "includeArrayIndex with a dotted "
                                   "path is not supported by minishard: %s", idx);
                if (idx[0] == '$')
                    return err_set(err, MS_ERR_LOC_28822, "includeArrayIndex option to $unwind stage "
                                   "should not be prefixed with a '$': %s", idx);
            } else if (strcmp(k, "preserveNullAndEmptyArrays") == 0) {
                if (!BSON_ITER_HOLDS_BOOL(&ui))
                    return err_set(err, MS_ERR_LOC_28809, "expected a boolean for the "
                                   "preserveNullAndEmptyArrays option to $unwind stage");
                preserve = bson_iter_bool(&ui);
            } else {
                return err_set(err, MS_ERR_LOC_28811, "unrecognized option to $unwind stage: %s", k);
            }
        }
        if (!path) return err_set(err, MS_ERR_LOC_28812, "no path specified to $unwind stage");
    } else {
        return err_set(err, MS_ERR_LOC_15981, "expected either a string or an object as specification for "
                       "$unwind stage, got %s", bsonx_type_name(bson_iter_type(it)));
    }
    if (path[0] != '$')
        return err_set(err, MS_ERR_LOC_28818, "path option to $unwind stage should be prefixed with a "
                       "'$': %s", path);
    if (!path[1] || path[1] == '$' || strstr(path, "..") || path[strlen(path) - 1] == '.')
        return err_set(err, MS_ERR_LOC_28818, "invalid path for $unwind stage: %s", path);
    if (!(s = stage_add(p, S_UNWIND))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    s->path = strdup(path + 1);
    s->index_field = idx ? strdup(idx) : NULL;
    s->preserve = preserve;
    {
        bson_t u;
        BSON_APPEND_DOCUMENT_BEGIN(&s->spec, "$unwind", &u);
        BSON_APPEND_UTF8(&u, "path", path);
        if (idx) BSON_APPEND_UTF8(&u, "includeArrayIndex", idx);
        if (preserve) BSON_APPEND_BOOL(&u, "preserveNullAndEmptyArrays", true);
        bson_append_document_end(&s->spec, &u);
    }
    return 0;
}

/* Parses a stage given as a document built here (the rewrites of $count / $sortByCount). */
static int parse_stage(agg_pipeline_t *p, const bson_iter_t *it, ms_error_t *err);
static int parse_built(agg_pipeline_t *p, bson_t *stage, ms_error_t *err) {
    bson_iter_t it;
    int rc;
    bson_iter_init(&it, stage);
    bson_iter_next(&it);
    rc = parse_stage(p, &it, err);
    bson_destroy(stage);
    return rc;
}

/* $count: name → {$group: {_id: null, name: {$sum: 1}}}, {$project: {_id: 0, name: 1}}. */
static int parse_count(agg_pipeline_t *p, const bson_iter_t *it, ms_error_t *err) {
    const char *name;
    bson_t g = BSON_INITIALIZER, pr = BSON_INITIALIZER, in, acc;
    int rc;
    if (!BSON_ITER_HOLDS_UTF8(it))
        return err_set(err, MS_ERR_LOC_40156, "the count field must be a non-empty string");
    name = bson_iter_utf8(it, NULL);
    if (!name[0]) return err_set(err, MS_ERR_LOC_40157, "the count field must be a non-empty string");
    if (name[0] == '$') return err_set(err, MS_ERR_LOC_40158, "the count field cannot be a $-prefixed path");
    if (strchr(name, '.')) return err_set(err, MS_ERR_LOC_40160, "the count field cannot contain '.'");
    BSON_APPEND_DOCUMENT_BEGIN(&g, "$group", &in);
    BSON_APPEND_NULL(&in, "_id");
    BSON_APPEND_DOCUMENT_BEGIN(&in, name, &acc);
    BSON_APPEND_INT32(&acc, "$sum", 1);
    bson_append_document_end(&in, &acc);
    bson_append_document_end(&g, &in);
    BSON_APPEND_DOCUMENT_BEGIN(&pr, "$project", &in);
    BSON_APPEND_INT32(&in, "_id", 0);
    BSON_APPEND_INT32(&in, name, 1);
    bson_append_document_end(&pr, &in);
    if ((rc = parse_built(p, &g, err)) != 0) {
        bson_destroy(&pr);
        return rc;
    }
    return parse_built(p, &pr, err);
}

/* $sortByCount: e → {$group: {_id: e, count: {$sum: 1}}}, {$sort: {count: -1}}. */
static int parse_sort_by_count(agg_pipeline_t *p, const bson_iter_t *it, ms_error_t *err) {
    bson_t g = BSON_INITIALIZER, so = BSON_INITIALIZER, in, acc;
    int rc;
    bool ok = (BSON_ITER_HOLDS_UTF8(it) && bson_iter_utf8(it, NULL)[0] == '$');
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t di;
        bson_iter_recurse(it, &di);
        ok = bson_iter_next(&di) && bson_iter_key(&di)[0] == '$';
    }
    if (!ok)
        return err_set(err, MS_ERR_LOC_40148, "the sortByCount field must be defined as a $-prefixed path "
                       "or an expression");
    BSON_APPEND_DOCUMENT_BEGIN(&g, "$group", &in);
    bsonx_append_iter(&in, "_id", it);
    BSON_APPEND_DOCUMENT_BEGIN(&in, "count", &acc);
    BSON_APPEND_INT32(&acc, "$sum", 1);
    bson_append_document_end(&in, &acc);
    bson_append_document_end(&g, &in);
    BSON_APPEND_DOCUMENT_BEGIN(&so, "$sort", &in);
    BSON_APPEND_INT32(&in, "count", -1);
    bson_append_document_end(&so, &in);
    if ((rc = parse_built(p, &g, err)) != 0) {
        bson_destroy(&so);
        return rc;
    }
    return parse_built(p, &so, err);
}

static int parse_stage(agg_pipeline_t *p, const bson_iter_t *it, ms_error_t *err) {
    const char *name = bson_iter_key(it);
    if (strcmp(name, "$match") == 0) return parse_match(p, it, err);
    if (strcmp(name, "$project") == 0 || strcmp(name, "$addFields") == 0 ||
        strcmp(name, "$set") == 0)
        return parse_projection(p, name, it, err);
    if (strcmp(name, "$unset") == 0) return parse_unset(p, it, err);
    if (strcmp(name, "$replaceRoot") == 0 || strcmp(name, "$replaceWith") == 0)
        return parse_replace(p, name, it, err);
    if (strcmp(name, "$group") == 0) return parse_group(p, it, err);
    if (strcmp(name, "$sort") == 0) return parse_sort(p, it, err);
    if (strcmp(name, "$skip") == 0) return parse_skip_limit(p, false, it, err);
    if (strcmp(name, "$limit") == 0) return parse_skip_limit(p, true, it, err);
    if (strcmp(name, "$unwind") == 0) return parse_unwind(p, it, err);
    if (strcmp(name, "$count") == 0) return parse_count(p, it, err);
    if (strcmp(name, "$sortByCount") == 0) return parse_sort_by_count(p, it, err);
    return err_set(err, MS_ERR_LOC_40324, "Unrecognized pipeline stage name: '%s'", name);
}

int agg_parse(const bson_t *pipeline, const agg_opts_t *opts, agg_pipeline_t **out,
              ms_error_t *err) {
    agg_pipeline_t *p = calloc(1, sizeof *p);
    bson_iter_t it;
    int rc = 0, n = 0;
    if (!p) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    if (opts) p->opts = *opts;
    if (!p->opts.blocking_bytes_max)
        p->opts.blocking_bytes_max = p->opts.allow_disk_use ? MS_AGG_DISK_USE_BYTES_MAX
                                                            : MS_AGG_BLOCKING_BYTES_MAX;
    else if (p->opts.allow_disk_use && p->opts.blocking_bytes_max < MS_AGG_DISK_USE_BYTES_MAX)
        p->opts.blocking_bytes_max = MS_AGG_DISK_USE_BYTES_MAX;
    if (!p->opts.result_bytes_max) p->opts.result_bytes_max = MS_AGG_RESULT_BYTES_MAX;
    if (!bson_iter_init(&it, pipeline)) rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "bad pipeline");
    while (rc == 0 && bson_iter_next(&it)) {
        bson_iter_t si;
        if (++n > MS_AGG_STAGES_MAX) {
            rc = err_set(err, MS_ERR_LOC_7749501, "Pipeline length must be no longer than %d stages",
                         MS_AGG_STAGES_MAX);
            break;
        }
        if (!BSON_ITER_HOLDS_DOCUMENT(&it)) {
            rc = err_set(err, MS_ERR_TYPE_MISMATCH, "Each element of the 'pipeline' array must "
                         "be an object");
            break;
        }
        bson_iter_recurse(&it, &si);
        if (!bson_iter_next(&si)) {
            rc = err_set(err, MS_ERR_LOC_40323, "A pipeline stage specification object must contain "
                         "exactly one field.");
            break;
        }
        {
            bson_iter_t more = si;
            if (bson_iter_next(&more)) {
                rc = err_set(err, MS_ERR_LOC_40323, "A pipeline stage specification object must contain "
                             "exactly one field.");
                break;
            }
        }
        rc = parse_stage(p, &si, err);
    }
    /* $sort directly followed by $limit keeps only the top k (MongoDB's coalescing). */
    for (int i = 0; rc == 0 && i + 1 < p->n; i++)
        if (p->st[i].kind == S_SORT && p->st[i + 1].kind == S_LIMIT)
            p->st[i].sort_limit = p->st[i + 1].n;
    if (rc != 0) {
        agg_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

void agg_append_stages(const agg_pipeline_t *p, int from, bson_t *arr, int *idx) {
    char k[16];
    for (int i = from; i < p->n; i++) {
        snprintf(k, sizeof k, "%d", (*idx)++);
        BSON_APPEND_DOCUMENT(arr, k, &p->st[i].spec);
    }
}

/* ---- the split ---------------------------------------------------------------------- */

static void arr_push(bson_t *arr, int *idx, const bson_t *stage) {
    char k[16];
    snprintf(k, sizeof k, "%d", (*idx)++);
    BSON_APPEND_DOCUMENT(arr, k, stage);
}

static void append_group_split(const stage_t *s, bson_t *shards, int *si, bson_t *merger,
                               int *mi) {
    bson_t ps = BSON_INITIALIZER, ms = BSON_INITIALIZER, pg, mg, a;
    BSON_APPEND_DOCUMENT_BEGIN(&ps, "$group", &pg);
    BSON_APPEND_DOCUMENT_BEGIN(&ms, "$group", &mg);
    bson_append_value(&pg, "_id", 3, &s->id_arg);
    BSON_APPEND_UTF8(&mg, "_id", "$_id");
    for (int i = 0; i < s->nacc; i++) {
        const acc_spec_t *ac = &s->accs[i];
        char *ref = bson_strdup_printf("$%s", ac->field);
        const char *pname = ACC_NAMES[ac->kind], *mname = ACC_NAMES[ac->kind];
        switch (ac->kind) {
        case A_COUNT: pname = "$sum"; mname = "$sum"; break;
        case A_AVG: pname = "$_partialAvg"; mname = "$_mergeAvg"; break;
        case A_PUSH: mname = "$_concatArrays"; break;
        case A_ADDTOSET: mname = "$_unionSets"; break;
        default: break;
        }
        BSON_APPEND_DOCUMENT_BEGIN(&pg, ac->field, &a);
        if (ac->kind == A_COUNT) BSON_APPEND_INT32(&a, pname, 1);
        else bson_append_value(&a, pname, -1, &ac->arg);
        bson_append_document_end(&pg, &a);
        BSON_APPEND_DOCUMENT_BEGIN(&mg, ac->field, &a);
        BSON_APPEND_UTF8(&a, mname, ref);
        bson_append_document_end(&mg, &a);
        bson_free(ref);
    }
    bson_append_document_end(&ps, &pg);
    bson_append_document_end(&ms, &mg);
    arr_push(shards, si, &ps);
    arr_push(merger, mi, &ms);
    bson_destroy(&ps);
    bson_destroy(&ms);
}

void agg_split(const agg_pipeline_t *p, bson_t *shards_part, bson_t *merger_part,
               bool *merge_sort) {
    int si = 0, mi = 0, i = 0;
    bson_init(shards_part);
    bson_init(merger_part);
    if (merge_sort) *merge_sort = false;
    for (; i < p->n; i++) {
        const stage_t *s = &p->st[i];
        if (s->kind == S_GROUP || s->kind == S_SORT || s->kind == S_SKIP || s->kind == S_LIMIT)
            break;
        arr_push(shards_part, &si, &s->spec);
    }
    if (i == p->n) return;
    switch (p->st[i].kind) {
    case S_GROUP:
        append_group_split(&p->st[i], shards_part, &si, merger_part, &mi);
        i++;
        break;
    case S_SORT:
        arr_push(shards_part, &si, &p->st[i].spec);
        if (i + 1 < p->n && p->st[i + 1].kind == S_LIMIT) {
            arr_push(shards_part, &si, &p->st[i + 1].spec);
        } else if (i + 2 < p->n && p->st[i + 1].kind == S_SKIP && p->st[i + 2].kind == S_LIMIT &&
                   p->st[i + 1].n <= INT64_MAX - p->st[i + 2].n) {
            /* $sort, $skip s, $limit n: each shard's top s + n suffice (MongoDB moves the
             * $limit before the $skip and lets the $sort absorb it) */
            bson_t l = BSON_INITIALIZER;
            BSON_APPEND_INT64(&l, "$limit", p->st[i + 1].n + p->st[i + 2].n);
            arr_push(shards_part, &si, &l);
            bson_destroy(&l);
        }
        if (merge_sort) *merge_sort = true;
        break;
    case S_LIMIT:
        arr_push(shards_part, &si, &p->st[i].spec);
        break;
    case S_SKIP:
        if (i + 1 < p->n && p->st[i + 1].kind == S_LIMIT) {
            bson_t l = BSON_INITIALIZER;
            BSON_APPEND_INT64(&l, "$limit", p->st[i].n + p->st[i + 1].n);
            arr_push(shards_part, &si, &l);
            bson_destroy(&l);
        }
        break;
    default:
        break;
    }
    for (; i < p->n; i++) arr_push(merger_part, &mi, &p->st[i].spec);
}

/* ---- running ------------------------------------------------------------------------ */

/* One group: its key and each accumulator's state. */
typedef struct acc_state {
    bson_value_t v;            /* sum / min / max / first / last; EOD = none yet */
    double dsum;               /* $avg */
    int64_t count;             /* $avg, $_mergeAvg */
    bool have_first;
    bson_t *list;              /* $push / $addToSet: an array being built */
    int nlist;
} acc_state_t;

typedef struct group {
    bson_value_t key;
    uint64_t hash;
    acc_state_t *acc;
    struct group *next;        /* hash chain */
} group_t;

typedef struct stage_run {
    int64_t n;                 /* $skip / $limit count so far */
    /* $group */
    group_t **buckets;
    size_t nbuckets, ngroups;
    group_t **order;           /* groups in first-seen order */
    size_t norder, caporder;
    /* $sort */
    bson_t **docs;
    size_t ndocs, capdocs;
    size_t bytes;              /* $group / $sort memory, counted against the cap */
} stage_run_t;

struct agg_run {
    const agg_pipeline_t *p;
    int from;
    stage_run_t *sr;
    bson_t **res;
    size_t nres, capres, res_bytes;
    bool done;                 /* a $limit was reached: nothing more changes the result */
    int64_t pushes;
};

static int push_at(agg_run_t *r, int i, const bson_t *doc, ms_error_t *err);

static int blocking_exceeded(const char *what, size_t cap, ms_error_t *err) {
    if (strcmp(what, "$group") == 0)   /* MongoDB's own wording for each stage */
        return err_set(err, MS_ERR_QUERY_EXCEEDED_MEMORY_LIMIT,
                       "PlanExecutor error during aggregation :: caused by :: Exceeded memory "
                       "limit for $group (%zu bytes), but didn't allow external sort. Pass "
                       "allowDiskUse:true to opt in.", cap);
    return err_set(err, MS_ERR_QUERY_EXCEEDED_MEMORY_LIMIT,
                   "PlanExecutor error during aggregation :: caused by :: %s exceeded memory limit "
                   "of %zu bytes, but did not opt in to external sorting.", what, cap);
}

/* ---- group keys: hash + comparison (1 and 1.0 are one group, as in MongoDB) ---- */

static uint64_t fnv(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t hash_iter(uint64_t h, const bson_iter_t *it);

static uint64_t hash_container(uint64_t h, const bson_iter_t *it, bool names) {
    bson_iter_t ci;
    if (!bson_iter_recurse(it, &ci)) return h;
    while (bson_iter_next(&ci)) {
        if (names) h = fnv(h, bson_iter_key(&ci), strlen(bson_iter_key(&ci)));
        h = hash_iter(h, &ci);
    }
    return h;
}

static uint64_t hash_iter(uint64_t h, const bson_iter_t *it) {
    bson_type_t t = bson_iter_type(it);
    int rank = bsonx_canonical_rank(t);
    h = fnv(h, &rank, sizeof rank);
    switch (t) {
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DOUBLE: {
        double d = 0;
        int64_t i;
        bsonx_as_double(it, &d);
        if (t != BSON_TYPE_DOUBLE || (d == floor(d) && fabs(d) < 9.2e18)) {
            bsonx_as_int64(it, &i);
            return fnv(h, &i, sizeof i);
        }
        if (isnan(d)) return fnv(h, "nan", 3);
        return fnv(h, &d, sizeof d);
    }
    case BSON_TYPE_DECIMAL128: return h;   /* compared after conversion: hash by rank only */
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        uint32_t len = 0;
        const char *s = t == BSON_TYPE_UTF8 ? bson_iter_utf8(it, &len) : bson_iter_symbol(it, &len);
        return fnv(h, s, len);
    }
    case BSON_TYPE_DOCUMENT: return hash_container(h, it, true);
    case BSON_TYPE_ARRAY: return hash_container(h, it, false);
    default: {
        const bson_value_t *v = bson_iter_value((bson_iter_t *)it);
        if (t == BSON_TYPE_OID) return fnv(h, v->value.v_oid.bytes, 12);
        if (t == BSON_TYPE_BOOL) return fnv(h, &v->value.v_bool, 1);
        if (t == BSON_TYPE_DATE_TIME) return fnv(h, &v->value.v_datetime, 8);
        return h;   /* rare key types: one chain, equality decides */
    }
    }
}

static uint64_t hash_value(const bson_value_t *v) {
    bson_t tmp = BSON_INITIALIZER;
    bson_iter_t it;
    uint64_t h;
    if (v->value_type == BSON_TYPE_EOD) BSON_APPEND_NULL(&tmp, "");
    else bson_append_value(&tmp, "", 0, v);
    bson_iter_init(&it, &tmp);
    bson_iter_next(&it);
    h = hash_iter(14695981039346656037ULL, &it);
    bson_destroy(&tmp);
    return h;
}

static size_t value_bytes(const bson_value_t *v) {
    switch (v->value_type) {
    case BSON_TYPE_UTF8: return v->value.v_utf8.len + 16;
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: return v->value.v_doc.data_len + 16;
    default: return 16;
    }
}

static int group_key(const stage_t *s, const bson_t *doc, const expr_vars_t *vars,
                     bson_value_t *key, ms_error_t *err) {
    int rc;
    if (s->id) {
        if ((rc = expr_eval(s->id, doc, vars, key, err)) != 0) return rc;
        if (key->value_type == BSON_TYPE_EOD) key->value_type = BSON_TYPE_NULL;
        return 0;
    }
    {
        bson_t d = BSON_INITIALIZER;
        uint32_t len;
        for (int i = 0; i < s->nid; i++) {
            bson_value_t v;
            if ((rc = expr_eval(s->id_fields[i], doc, vars, &v, err)) != 0) {
                bson_destroy(&d);
                return rc;
            }
            if (v.value_type == BSON_TYPE_EOD) BSON_APPEND_NULL(&d, s->id_names[i]);
            else bson_append_value(&d, s->id_names[i], -1, &v);
            bson_value_destroy(&v);
        }
        memset(key, 0, sizeof *key);
        key->value_type = BSON_TYPE_DOCUMENT;
        key->value.v_doc.data = bson_destroy_with_steal(&d, true, &len);
        key->value.v_doc.data_len = len;
    }
    return 0;
}

static void list_append(acc_state_t *a, const bson_value_t *v) {
    char k[16];
    if (!a->list) a->list = bson_new();
    snprintf(k, sizeof k, "%d", a->nlist++);
    bson_append_value(a->list, k, -1, v);
}

static bool list_has(const acc_state_t *a, const bson_value_t *v) {
    bson_iter_t it;
    if (!a->list || !bson_iter_init(&it, a->list)) return false;
    while (bson_iter_next(&it)) {
        bson_value_t el;
        bool eq;
        expr_value_from_iter(&it, &el);
        eq = expr_value_cmp(&el, v) == 0;
        bson_value_destroy(&el);
        if (eq) return true;
    }
    return false;
}

/* Accumulates one value (missing allowed) into a. Returns the bytes added. */
static int acc_add(const acc_spec_t *sp, acc_state_t *a, const bson_value_t *v, size_t *grown,
                   ms_error_t *err) {
    int rc = 0;
    switch (sp->kind) {
    case A_SUM:
    case A_COUNT: {
        bson_value_t one, r;
        const bson_value_t *x = v;
        if (sp->kind == A_COUNT) {
            memset(&one, 0, sizeof one);
            one.value_type = BSON_TYPE_INT32;
            one.value.v_int32 = 1;
            x = &one;
        }
        if (!expr_value_is_number(x)) return 0;   /* $sum ignores non-numbers */
        if (a->v.value_type == BSON_TYPE_EOD) {
            a->v.value_type = BSON_TYPE_INT32;
            a->v.value.v_int32 = 0;
        }
        if ((rc = expr_num_add(&a->v, x, &r, err)) != 0) return rc;
        a->v = r;
        return 0;
    }
    case A_AVG:
    case A_PARTIAL_AVG: {
        double d;
        bson_value_t r;
        if (!expr_value_is_number(v)) return 0;
        if (v->value_type == BSON_TYPE_DECIMAL128)
            return err_set(err, MS_ERR_NOT_IMPLEMENTED, "$avg of decimal128 values is not "
                           "supported by minishard (no decimal arithmetic)");
        d = v->value_type == BSON_TYPE_INT32 ? v->value.v_int32
            : v->value_type == BSON_TYPE_INT64 ? (double)v->value.v_int64 : v->value.v_double;
        a->dsum += d;
        a->count++;
        if (sp->kind == A_PARTIAL_AVG) {   /* keep an exact sum for the merger */
            if (a->v.value_type == BSON_TYPE_EOD) {
                a->v.value_type = BSON_TYPE_INT32;
                a->v.value.v_int32 = 0;
            }
            if ((rc = expr_num_add(&a->v, v, &r, err)) != 0) return rc;
            a->v = r;
        }
        return 0;
    }
    case A_MERGE_AVG: {
        bson_t d;
        bson_iter_t it;
        bson_value_t sum, r;
        if (v->value_type != BSON_TYPE_DOCUMENT ||
            !bson_init_static(&d, v->value.v_doc.data, v->value.v_doc.data_len))
            return 0;
        if (bson_iter_init_find(&it, &d, "count")) {
            int64_t c = 0;
            bsonx_as_int64(&it, &c);
            a->count += c;
        }
        if (bson_iter_init_find(&it, &d, "sum") && bsonx_is_number(&it)) {
            expr_value_from_iter(&it, &sum);
            if (a->v.value_type == BSON_TYPE_EOD) {
                a->v.value_type = BSON_TYPE_INT32;
                a->v.value.v_int32 = 0;
            }
            rc = expr_num_add(&a->v, &sum, &r, err);
            if (rc == 0) a->v = r;
        }
        return rc;
    }
    case A_MIN:
    case A_MAX: {
        int c;
        if (v->value_type == BSON_TYPE_EOD || v->value_type == BSON_TYPE_NULL ||
            v->value_type == BSON_TYPE_UNDEFINED)
            return 0;   /* $min / $max ignore null and missing */
        if (a->v.value_type != BSON_TYPE_EOD) {
            c = expr_value_cmp(v, &a->v);
            if ((sp->kind == A_MIN && c >= 0) || (sp->kind == A_MAX && c <= 0)) return 0;
            bson_value_destroy(&a->v);
        }
        bson_value_copy(v, &a->v);
        *grown += value_bytes(v);
        return 0;
    }
    case A_FIRST:
        if (a->have_first) return 0;
        a->have_first = true;
        if (v->value_type == BSON_TYPE_EOD) {
            a->v.value_type = BSON_TYPE_NULL;
        } else {
            bson_value_copy(v, &a->v);
            *grown += value_bytes(v);
        }
        return 0;
    case A_LAST:
        if (a->v.value_type != BSON_TYPE_EOD) bson_value_destroy(&a->v);
        memset(&a->v, 0, sizeof a->v);
        if (v->value_type == BSON_TYPE_EOD) a->v.value_type = BSON_TYPE_NULL;
        else bson_value_copy(v, &a->v);
        *grown += value_bytes(v);
        return 0;
    case A_PUSH:
    case A_ADDTOSET:
        if (v->value_type == BSON_TYPE_EOD) return 0;
        if (sp->kind == A_ADDTOSET && list_has(a, v)) return 0;
        list_append(a, v);
        *grown += value_bytes(v);
        return 0;
    case A_CONCAT_ARRAYS:
    case A_UNION_SETS: {
        bson_t arr;
        bson_iter_t it;
        if (v->value_type != BSON_TYPE_ARRAY ||
            !bson_init_static(&arr, v->value.v_doc.data, v->value.v_doc.data_len))
            return 0;
        bson_iter_init(&it, &arr);
        while (bson_iter_next(&it)) {
            bson_value_t el;
            expr_value_from_iter(&it, &el);
            if (sp->kind == A_CONCAT_ARRAYS || !list_has(a, &el)) {
                list_append(a, &el);
                *grown += value_bytes(&el);
            }
            bson_value_destroy(&el);
        }
        return 0;
    }
    }
    return 0;
}

/* Appends the accumulator's result under name. */
static void acc_result(const acc_spec_t *sp, const acc_state_t *a, bson_t *out) {
    const char *f = sp->field;
    switch (sp->kind) {
    case A_SUM:
    case A_COUNT:
        if (a->v.value_type == BSON_TYPE_EOD) BSON_APPEND_INT32(out, f, 0);
        else bson_append_value(out, f, -1, &a->v);
        return;
    case A_AVG:
        if (a->count == 0) BSON_APPEND_NULL(out, f);
        else BSON_APPEND_DOUBLE(out, f, a->dsum / (double)a->count);
        return;
    case A_PARTIAL_AVG: {
        bson_t d;
        BSON_APPEND_DOCUMENT_BEGIN(out, f, &d);
        if (a->v.value_type == BSON_TYPE_EOD) BSON_APPEND_INT32(&d, "sum", 0);
        else bson_append_value(&d, "sum", -1, &a->v);
        BSON_APPEND_INT64(&d, "count", a->count);
        bson_append_document_end(out, &d);
        return;
    }
    case A_MERGE_AVG: {
        double s = 0;
        if (a->count == 0) {
            BSON_APPEND_NULL(out, f);
            return;
        }
        if (a->v.value_type == BSON_TYPE_INT32) s = a->v.value.v_int32;
        else if (a->v.value_type == BSON_TYPE_INT64) s = (double)a->v.value.v_int64;
        else if (a->v.value_type == BSON_TYPE_DOUBLE) s = a->v.value.v_double;
        BSON_APPEND_DOUBLE(out, f, s / (double)a->count);
        return;
    }
    case A_MIN:
    case A_MAX:
    case A_FIRST:
    case A_LAST:
        if (a->v.value_type == BSON_TYPE_EOD) BSON_APPEND_NULL(out, f);
        else bson_append_value(out, f, -1, &a->v);
        return;
    case A_PUSH:
    case A_ADDTOSET:
    case A_CONCAT_ARRAYS:
    case A_UNION_SETS:
        if (a->list) {
            BSON_APPEND_ARRAY(out, f, a->list);
        } else {
            bson_t e;
            BSON_APPEND_ARRAY_BEGIN(out, f, &e);
            bson_append_array_end(out, &e);
        }
        return;
    }
}

static void group_free(group_t *g, int nacc) {
    if (!g) return;
    bson_value_destroy(&g->key);
    for (int i = 0; i < nacc; i++) {
        bson_value_destroy(&g->acc[i].v);
        if (g->acc[i].list) bson_destroy(g->acc[i].list);
    }
    free(g->acc);
    free(g);
}

static int group_push(agg_run_t *r, int i, const bson_t *doc, ms_error_t *err) {
    const stage_t *s = &r->p->st[i];
    stage_run_t *sr = &r->sr[i];
    const expr_vars_t *vars = r->p->opts.vars;
    bson_value_t key;
    uint64_t h;
    group_t *g;
    size_t grown = 0;
    int rc;
    if ((rc = group_key(s, doc, vars, &key, err)) != 0) return rc;
    h = hash_value(&key);
    if (!sr->buckets) {
        sr->nbuckets = 1024;
        sr->buckets = calloc(sr->nbuckets, sizeof *sr->buckets);
        if (!sr->buckets) {
            bson_value_destroy(&key);
            return err_set(err, MS_ERR_INTERNAL, "out of memory");
        }
    }
    for (g = sr->buckets[h % sr->nbuckets]; g; g = g->next)
        if (g->hash == h && expr_value_cmp(&g->key, &key) == 0) break;
    if (g) {
        bson_value_destroy(&key);
    } else {
        if (sr->ngroups >= sr->nbuckets) {   /* grow the table: rehash the chains */
            size_t nb = sr->nbuckets * 4;
            group_t **b = calloc(nb, sizeof *b);
            if (!b) {
                bson_value_destroy(&key);
                return err_set(err, MS_ERR_INTERNAL, "out of memory");
            }
            for (size_t k = 0; k < sr->norder; k++) {
                group_t *x = sr->order[k];
                x->next = b[x->hash % nb];
                b[x->hash % nb] = x;
            }
            free(sr->buckets);
            sr->buckets = b;
            sr->nbuckets = nb;
        }
        g = calloc(1, sizeof *g);
        if (g) g->acc = calloc((size_t)(s->nacc ? s->nacc : 1), sizeof *g->acc);
        if (sr->norder == sr->caporder) {
            size_t cap = sr->caporder ? sr->caporder * 2 : 64;
            group_t **no = realloc(sr->order, cap * sizeof *no);
            if (no) {
                sr->order = no;
                sr->caporder = cap;
            }
        }
        if (!g || !g->acc || sr->norder == sr->caporder) {
            if (g) free(g->acc);
            free(g);
            bson_value_destroy(&key);
            return err_set(err, MS_ERR_INTERNAL, "out of memory");
        }
        g->key = key;
        g->hash = h;
        g->next = sr->buckets[h % sr->nbuckets];
        sr->buckets[h % sr->nbuckets] = g;
        sr->order[sr->norder++] = g;
        sr->ngroups++;
        grown += value_bytes(&key) + sizeof *g + (size_t)s->nacc * sizeof *g->acc;
    }
    for (int k = 0; k < s->nacc; k++) {
        bson_value_t v;
        memset(&v, 0, sizeof v);
        if (s->accs[k].e && (rc = expr_eval(s->accs[k].e, doc, vars, &v, err)) != 0) return rc;
        rc = acc_add(&s->accs[k], &g->acc[k], &v, &grown, err);
        bson_value_destroy(&v);
        if (rc != 0) return rc;
    }
    sr->bytes += grown;
    if (sr->bytes > r->p->opts.blocking_bytes_max)
        return blocking_exceeded("$group", r->p->opts.blocking_bytes_max, err);
    return 0;
}

static int group_flush(agg_run_t *r, int i, ms_error_t *err) {
    const stage_t *s = &r->p->st[i];
    stage_run_t *sr = &r->sr[i];
    int rc = 0;
    for (size_t k = 0; k < sr->norder && rc == 0 && !r->done; k++) {
        group_t *g = sr->order[k];
        bson_t out = BSON_INITIALIZER;
        bson_append_value(&out, "_id", 3, &g->key);
        for (int a = 0; a < s->nacc; a++) acc_result(&s->accs[a], &g->acc[a], &out);
        if ((rc = op_check(err)) == 0) rc = push_at(r, i + 1, &out, err);
        bson_destroy(&out);
    }
    return rc;
}

/* ---- sort ---- */

/* Sorts docs stably (qsort_r is not): ties keep their arrival order, so a pipeline's
 * output does not depend on the sort implementation. */
typedef struct sidx {
    bson_t *doc;
    size_t idx;
} sidx_t;

static int sidx_cmp(const void *a, const void *b, void *arg) {
    const sidx_t *x = a, *y = b;
    int c = sortspec_compare_docs(arg, x->doc, y->doc);
    if (c) return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void sort_docs(const stage_t *s, stage_run_t *sr, size_t keep) {
    sidx_t *v;
    if (sr->ndocs < 2 && keep == 0) return;
    v = malloc(sr->ndocs * sizeof *v);
    if (!v) return;   /* leave unsorted on OOM: the order check below is best effort */
    for (size_t k = 0; k < sr->ndocs; k++) {
        v[k].doc = sr->docs[k];
        v[k].idx = k;
    }
    qsort_r(v, sr->ndocs, sizeof *v, sidx_cmp, (void *)s->sort);
    for (size_t k = 0; k < sr->ndocs; k++) sr->docs[k] = v[k].doc;
    free(v);
    while (keep && sr->ndocs > keep) {
        sr->ndocs--;
        sr->bytes -= sr->docs[sr->ndocs]->len;
        bson_destroy(sr->docs[sr->ndocs]);
    }
}

static int sort_push(agg_run_t *r, int i, const bson_t *doc, ms_error_t *err) {
    const stage_t *s = &r->p->st[i];
    stage_run_t *sr = &r->sr[i];
    if (sr->ndocs == sr->capdocs) {
        size_t cap = sr->capdocs ? sr->capdocs * 2 : 256;
        bson_t **nd = realloc(sr->docs, cap * sizeof *nd);
        if (!nd) return err_set(err, MS_ERR_INTERNAL, "out of memory");
        sr->docs = nd;
        sr->capdocs = cap;
    }
    sr->docs[sr->ndocs++] = bson_copy(doc);
    sr->bytes += doc->len;
    /* top-k: with a directly following $limit only the first k survive */
    if (s->sort_limit > 0 && (sr->ndocs >= 2 * (size_t)s->sort_limit + 64 ||
                              sr->bytes > r->p->opts.blocking_bytes_max))
        sort_docs(s, sr, (size_t)s->sort_limit);   /* only what the top k holds counts */
    if (sr->bytes > r->p->opts.blocking_bytes_max)
        return blocking_exceeded("Sort", r->p->opts.blocking_bytes_max, err);
    return 0;
}

static int sort_flush(agg_run_t *r, int i, ms_error_t *err) {
    const stage_t *s = &r->p->st[i];
    stage_run_t *sr = &r->sr[i];
    int rc;
    sort_docs(s, sr, s->sort_limit > 0 ? (size_t)s->sort_limit : 0);
    if ((rc = op_check(err)) != 0) return rc;
    for (size_t k = 0; k < sr->ndocs && rc == 0 && !r->done; k++) rc = push_at(r, i + 1, sr->docs[k], err);
    return rc;
}

/* ---- unwind ---- */

/* Appends doc with the value at dotted path replaced by v (path exists: unwind only calls
 * it for a path it found). */
static void set_path(const bson_t *doc, const char *path, const bson_value_t *v, bson_t *out) {
    const char *dot = strchr(path, '.');
    size_t flen = dot ? (size_t)(dot - path) : strlen(path);
    bson_iter_t it;
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        const char *k = bson_iter_key(&it);
        if (strlen(k) != flen || memcmp(k, path, flen) != 0) {
            bsonx_append_iter(out, k, &it);
        } else if (!dot) {
            bson_append_value(out, k, -1, v);
        } else {
            bson_t sub, o;
            bsonx_view_container(&it, &sub);
            BSON_APPEND_DOCUMENT_BEGIN(out, k, &o);
            set_path(&sub, dot + 1, v, &o);
            bson_append_document_end(out, &o);
        }
    }
}

/* Appends doc with the top-level field set to v: replaced in place or appended. */
static void set_field(const bson_t *doc, const char *field, const bson_value_t *v, bson_t *out) {
    bson_iter_t it;
    bool done = false;
    bson_iter_init(&it, doc);
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), field) == 0) {
            bson_append_value(out, field, -1, v);
            done = true;
        } else {
            bsonx_append_iter(out, bson_iter_key(&it), &it);
        }
    }
    if (!done) bson_append_value(out, field, -1, v);
}

static int unwind_push(agg_run_t *r, int i, const bson_t *doc, ms_error_t *err) {
    const stage_t *s = &r->p->st[i];
    bson_iter_t it;
    bool found = bsonx_find_path(doc, s->path, &it);
    bson_value_t nullv;
    int rc = 0;
    memset(&nullv, 0, sizeof nullv);
    nullv.value_type = BSON_TYPE_NULL;
    if (found && BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_t arr;
        bson_iter_t ai;
        int64_t idx = 0;
        bsonx_view_container(&it, &arr);
        if (bson_empty(&arr)) goto empty;
        bson_iter_init(&ai, &arr);
        while (rc == 0 && !r->done && bson_iter_next(&ai)) {
            bson_t o = BSON_INITIALIZER;
            set_path(doc, s->path, bson_iter_value(&ai), &o);
            if (s->index_field) {
                bson_t o2 = BSON_INITIALIZER;
                bson_value_t iv;
                memset(&iv, 0, sizeof iv);
                iv.value_type = BSON_TYPE_INT64;
                iv.value.v_int64 = idx;
                set_field(&o, s->index_field, &iv, &o2);
                bson_destroy(&o);
                rc = push_at(r, i + 1, &o2, err);
                bson_destroy(&o2);
            } else {
                rc = push_at(r, i + 1, &o, err);
                bson_destroy(&o);
            }
            idx++;
        }
        return rc;
    }
    if (found && !BSON_ITER_HOLDS_NULL(&it) && !BSON_ITER_HOLDS_UNDEFINED(&it)) {
        /* a non-array value unwinds as a one-element array (index null) */
        if (s->index_field) {
            bson_t o = BSON_INITIALIZER;
            set_field(doc, s->index_field, &nullv, &o);
            rc = push_at(r, i + 1, &o, err);
            bson_destroy(&o);
            return rc;
        }
        return push_at(r, i + 1, doc, err);
    }
empty:
    if (!s->preserve) return 0;
    if (s->index_field) {
        bson_t o = BSON_INITIALIZER;
        set_field(doc, s->index_field, &nullv, &o);
        rc = push_at(r, i + 1, &o, err);
        bson_destroy(&o);
        return rc;
    }
    return push_at(r, i + 1, doc, err);
}

/* ---- the driver ---- */

static int result_add(agg_run_t *r, const bson_t *doc, ms_error_t *err) {
    if (r->nres == r->capres) {
        size_t cap = r->capres ? r->capres * 2 : 64;
        bson_t **nr = realloc(r->res, cap * sizeof *nr);
        if (!nr) return err_set(err, MS_ERR_INTERNAL, "out of memory");
        r->res = nr;
        r->capres = cap;
    }
    r->res_bytes += doc->len;
    if (r->res_bytes > r->p->opts.result_bytes_max)
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT,
                       "aggregate results exceed %zu bytes: minishard holds a pipeline's whole "
                       "result in its cursor; add a $limit or a $project", 
                       r->p->opts.result_bytes_max);
    r->res[r->nres++] = bson_copy(doc);
    return 0;
}

static int push_at(agg_run_t *r, int i, const bson_t *doc, ms_error_t *err) {
    const agg_pipeline_t *p = r->p;
    const stage_t *s;
    stage_run_t *sr;
    int rc = 0;
    if (r->done) return 0;
    if (i >= p->n) return result_add(r, doc, err);
    s = &p->st[i];
    sr = &r->sr[i];
    switch (s->kind) {
    case S_MATCH: {
        bool m = false;
        if ((rc = query_match_checked(s->q, doc, &m, err)) != 0) return rc;
        return m ? push_at(r, i + 1, doc, err) : 0;
    }
    case S_PROJECT:
    case S_ADDFIELDS:
    case S_UNSET: {
        bson_t out = BSON_INITIALIZER;
        const expr_vars_t *vars = p->opts.vars;
        if (s->kind == S_ADDFIELDS)
            rc = apply_add(&s->root, doc, doc, vars, true, false, &out, err);
        else if (s->kind == S_PROJECT && s->inclusion)
            rc = apply_incl(&s->root, doc, doc, vars, true, !s->id_excluded, &out, err);
        else
            rc = apply_excl(&s->root, doc, doc, vars, true, false, &out, err);
        if (rc == 0) rc = push_at(r, i + 1, &out, err);
        bson_destroy(&out);
        return rc;
    }
    case S_SKIP:
        if (sr->n < s->n) {
            sr->n++;
            return 0;
        }
        return push_at(r, i + 1, doc, err);
    case S_LIMIT:
        if (sr->n >= s->n) return 0;
        sr->n++;
        rc = push_at(r, i + 1, doc, err);
        /* the first $limit reached with only streaming stages before it ends the input */
        if (rc == 0 && sr->n >= s->n) {
            bool streaming = true;
            for (int k = r->from; k < i; k++)
                if (p->st[k].kind == S_GROUP || p->st[k].kind == S_SORT) streaming = false;
            if (streaming) r->done = true;
        }
        return rc;
    case S_GROUP:
        return group_push(r, i, doc, err);
    case S_SORT:
        return sort_push(r, i, doc, err);
    case S_UNWIND:
        return unwind_push(r, i, doc, err);
    case S_REPLACE: {
        bson_value_t v;
        bson_t nd;
        if ((rc = expr_eval(s->new_root, doc, p->opts.vars, &v, err)) != 0) return rc;
        if (v.value_type != BSON_TYPE_DOCUMENT ||
            !bson_init_static(&nd, v.value.v_doc.data, v.value.v_doc.data_len)) {
            bson_t h = BSON_INITIALIZER;
            expr_value_append(&h, "v", &v);
            char *j = bsonx_to_json(&h);
            rc = err_set(err, MS_ERR_LOC_40228, "'newRoot' expression must evaluate to an object, "
                         "but resulting value was: %s. Type of resulting value: '%s'. Input "
                         "document: ...", j, v.value_type == BSON_TYPE_EOD ? "missing"
                         : bsonx_type_name(v.value_type));
            bson_free(j);
            bson_destroy(&h);
            bson_value_destroy(&v);
            return rc;
        }
        rc = push_at(r, i + 1, &nd, err);
        bson_value_destroy(&v);
        return rc;
    }
    }
    return err_set(err, MS_ERR_INTERNAL, "bad stage");
}

int agg_run_new(const agg_pipeline_t *p, int from, agg_run_t **out, ms_error_t *err) {
    agg_run_t *r = calloc(1, sizeof *r);
    if (!r) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    r->p = p;
    r->from = from < 0 ? 0 : from > p->n ? p->n : from;
    r->sr = calloc((size_t)(p->n ? p->n : 1), sizeof *r->sr);
    if (!r->sr) {
        free(r);
        return err_set(err, MS_ERR_INTERNAL, "out of memory");
    }
    *out = r;
    return 0;
}

int agg_run_push(agg_run_t *r, const bson_t *doc, ms_error_t *err) {
    int rc;
    if ((++r->pushes & 255) == 0 && (rc = op_check(err)) != 0) return rc;
    return push_at(r, r->from, doc, err);
}

bool agg_run_done(const agg_run_t *r) { return r->done; }

int agg_run_finish(agg_run_t *r, ms_error_t *err) {
    int rc = 0;
    /* flush blocking stages front to back: each flush pushes into the later ones */
    r->done = false;   /* a $limit reached before a blocking stage still lets it flush */
    for (int i = r->from; i < r->p->n && rc == 0; i++) {
        if (r->p->st[i].kind == S_GROUP) rc = group_flush(r, i, err);
        else if (r->p->st[i].kind == S_SORT) rc = sort_flush(r, i, err);
    }
    return rc;
}

size_t agg_run_count(const agg_run_t *r) { return r->nres; }
const bson_t *agg_run_result(const agg_run_t *r, size_t i) { return r->res[i]; }

void agg_run_take(agg_run_t *r, bson_t ***docs, size_t *n) {
    *docs = r->res;
    *n = r->nres;
    r->res = NULL;
    r->nres = r->capres = 0;
}

void agg_run_free(agg_run_t *r) {
    if (!r) return;
    for (int i = 0; i < r->p->n; i++) {
        stage_run_t *sr = &r->sr[i];
        for (size_t k = 0; k < sr->norder; k++) group_free(sr->order[k], r->p->st[i].nacc);
        free(sr->order);
        free(sr->buckets);
        for (size_t k = 0; k < sr->ndocs; k++) bson_destroy(sr->docs[k]);
        free(sr->docs);
    }
    free(r->sr);
    for (size_t k = 0; k < r->nres; k++) bson_destroy(r->res[k]);
    free(r->res);
    free(r);
}

int agg_run_all(const agg_pipeline_t *p, const bson_t *const *docs, size_t n, bson_t *out_arr,
                ms_error_t *err) {
    agg_run_t *r = NULL;
    int rc;
    char k[24];
    if ((rc = agg_run_new(p, 0, &r, err)) != 0) return rc;
    for (size_t i = 0; i < n && rc == 0 && !agg_run_done(r); i++) rc = agg_run_push(r, docs[i], err);
    if (rc == 0) rc = agg_run_finish(r, err);
    for (size_t i = 0; rc == 0 && i < r->nres; i++) {
        snprintf(k, sizeof k, "%zu", i);
        BSON_APPEND_DOCUMENT(out_arr, k, r->res[i]);
    }
    agg_run_free(r);
    return rc;
}
