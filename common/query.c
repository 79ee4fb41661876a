/*
 * query.c — the filter matcher of the shard daemon (find, count, distinct, update,
 * delete, findAndModify all call it). A filter is compiled once into a small tree of
 * match expressions, the same shape MongoDB's MatchExpression parser builds:
 *
 *   logical nodes   $and / $or / $nor / $not          (children)
 *   leaf predicates $eq $lt $lte $gt $gte $in $exists $type $regex $size $elemMatch
 *   $expr           an aggregation expression (common/expr.c) over the whole document
 *
 * $ne is NOT($eq), $nin is NOT($in), $all is AND($eq...), {$exists: false} is
 * NOT($exists) — MongoDB builds the same negations, and they give the array rules for
 * free: {a: {$ne: 1}} must fail on {a: [1, 2]} because the positive match succeeds.
 *
 * A leaf with a path is tested against every value the path reaches (MongoDB's element
 * iterator, path_visit below): through embedded documents, through arrays of documents,
 * numeric components index arrays, and at the end of the path an array is tested both
 * element by element and as a whole. The leaf matches if any reached value matches.
 * Inside {$elemMatch: {$gt: 1}} the leaves have no path: they test one array element
 * as it is (MongoDB's matchesSingleElement), without expanding it further.
 *
 * All comparisons use MongoDB's BSON order (bsonx_compare_values) and are type-bracketed:
 * {$gt: 5} only looks at numbers. Regular expressions use common/regex.c, a linear-time
 * engine for the PCRE syntax MongoDB users write; docs/query-language.md lists what it
 * takes and refuses. A regex that runs past the operation's maxTimeMS ends the whole
 * evaluation with MaxTimeMSExpired (query_match_checked), never with a wrong answer.
 */
#include "common/query.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/expr.h"
#include "common/log.h"
#include "common/regex.h"

enum qkind {
    Q_AND, Q_OR, Q_NOR, Q_NOT,                      /* logical */
    Q_EQ, Q_LT, Q_LTE, Q_GT, Q_GTE, Q_IN,          /* comparisons */
    Q_EXISTS, Q_TYPE, Q_REGEX, Q_SIZE,
    Q_ELEM_OBJ, Q_ELEM_VAL,
    Q_EXPR,                                         /* {$expr: <aggregation expression>} */
};

/* One compiled regular expression with the flags it came with. */
typedef struct qregex {
    rx_t *re;
    char *pattern, *options;   /* as written by the user: used to compare with stored regex values */
} qregex_t;

/* Most $type aliases map to one BSON type; "number" matches four. */
#define QTYPES_MAX 32

typedef struct qnode qnode_t;
struct qnode {
    enum qkind kind;
    char *path;          /* dotted path; NULL for logical nodes and $elemMatch value leaves */
    bson_t *operand;     /* {"v": value} for comparisons; {"v": [..]} for $in; a pointer
                            because a bson_t wants 128-byte alignment malloc does not give */
    qregex_t *rx;        /* Q_REGEX, or an $eq whose operand is a regex */
    qregex_t **in_rx;    /* Q_IN: one regex per regex element of the list */
    int n_in_rx;
    int64_t size;        /* Q_SIZE */
    bson_type_t types[QTYPES_MAX];
    int ntypes;
    bool type_number;    /* $type: "number" */
    query_t *sub;        /* Q_ELEM_OBJ: the filter applied to each element document */
    expr_t *expr;        /* Q_EXPR */
    const expr_vars_t *vars;  /* Q_EXPR: the command's `let` (borrowed from the caller) */
    qnode_t **kids;      /* logical nodes and Q_ELEM_VAL */
    int nkids;
};

struct query {
    qnode_t *root;       /* an AND of the top-level fields */
    expr_vars_t *own_vars;  /* query_compile_let: the `let` variables $expr nodes borrow */
};

/* One evaluation of a filter against a document. The first error (a regular expression
 * that ran past the deadline) sticks; from then on every regex answers false and the
 * caller discards the result, so a $not around it cannot turn the error into a match. */
typedef struct qeval {
    bool check_deadline;   /* query_match_checked; query_match never interrupts */
    int rc;
    ms_error_t *err;
} qeval_t;

/* ------------------------------------------------------------------------------------ */
/* Nodes                                                                                 */

static qnode_t *node_new(enum qkind kind, const char *path) {
    qnode_t *n = bson_malloc0(sizeof *n);
    n->kind = kind;
    n->path = path ? bson_strdup(path) : NULL;
    return n;
}

static void regex_free(qregex_t *rx) {
    if (!rx) return;
    rx_free(rx->re);
    bson_free(rx->pattern);
    bson_free(rx->options);
    bson_free(rx);
}

static void node_free(qnode_t *n) {
    if (!n) return;
    for (int i = 0; i < n->nkids; i++) node_free(n->kids[i]);
    bson_free(n->kids);
    for (int i = 0; i < n->n_in_rx; i++) regex_free(n->in_rx[i]);
    bson_free(n->in_rx);
    regex_free(n->rx);
    query_free(n->sub);
    expr_free(n->expr);
    bson_destroy(n->operand);
    bson_free(n->path);
    bson_free(n);
}

static void node_add(qnode_t *parent, qnode_t *kid) {
    parent->kids = bson_realloc(parent->kids, sizeof *parent->kids * (size_t)(parent->nkids + 1));
    parent->kids[parent->nkids++] = kid;
}

/* Keeps a copy of the value at it as the node's operand. */
static void node_set_operand(qnode_t *n, const bson_iter_t *it) {
    n->operand = bson_new();
    bsonx_append_iter(n->operand, "v", it);
}

static void node_operand(const qnode_t *n, bson_iter_t *out) {
    bool ok = bson_iter_init_find(out, n->operand, "v");
    ASSERT(ok);
}

/* ------------------------------------------------------------------------------------ */
/* Regular expressions                                                                   */

/* Compiles pattern with MongoDB's option letters (i m s x u). */
static int regex_compile(const char *pattern, const char *options, qregex_t **out,
                         ms_error_t *err) {
    unsigned flags;
    int rc = rx_parse_options(options, &flags, err);
    if (rc) return rc;
    qregex_t *rx = bson_malloc0(sizeof *rx);
    if ((rc = rx_compile(pattern, flags, &rx->re, err)) != 0) {
        bson_free(rx);
        return rc;
    }
    rx->pattern = bson_strdup(pattern);
    rx->options = bson_strdup(options);
    *out = rx;
    return 0;
}

/* Tests one string; records a deadline error in ev (and answers false). */
static bool regex_match_str(qeval_t *ev, const qregex_t *rx, const char *s, uint32_t len) {
    bool m = false;
    if (ev->rc) return false;
    if (!ev->check_deadline) return rx_matches(rx->re, s, len);
    ev->rc = rx_search(rx->re, s, len, &m, ev->err);
    return ev->rc == 0 && m;
}

/* A regex predicate matches strings and symbols by the expression, and a stored regex
 * value when pattern and flags are the same (MongoDB's RegexMatchExpression). */
static bool regex_match_value(qeval_t *ev, const qregex_t *rx, const bson_iter_t *v) {
    uint32_t len;
    const char *str;
    if (BSON_ITER_HOLDS_UTF8(v)) {
        str = bson_iter_utf8(v, &len);
        return regex_match_str(ev, rx, str, len);
    }
    if (BSON_ITER_HOLDS_SYMBOL(v)) {
        str = bson_iter_symbol(v, &len);
        return regex_match_str(ev, rx, str, len);
    }
    if (BSON_ITER_HOLDS_REGEX(v)) {
        const char *opts = NULL;
        const char *pat = bson_iter_regex(v, &opts);
        return strcmp(pat, rx->pattern) == 0 && strcmp(opts ? opts : "", rx->options) == 0;
    }
    return false;
}

/* ------------------------------------------------------------------------------------ */
/* Leaf predicates on one value (MongoDB's matchesSingleElement). v == NULL: missing.     */

static bool is_nan(const bson_iter_t *v) {
    return BSON_ITER_HOLDS_DOUBLE(v) && isnan(bson_iter_double(v));
}

/* $eq/$lt/$lte/$gt/$gte. Type-bracketed: values of another canonical type never match,
 * except that MinKey / MaxKey operands compare across types. NaN equals only NaN and is
 * neither smaller nor larger than any number. {$eq/$lte/$gte: null} match a missing field. */
static bool compare_match(enum qkind kind, const bson_iter_t *rhs, const bson_iter_t *v) {
    bson_type_t rt = bson_iter_type(rhs);
    if (!v) return rt == BSON_TYPE_NULL && (kind == Q_EQ || kind == Q_LTE || kind == Q_GTE);
    if (bsonx_canonical_rank(bson_iter_type(v)) != bsonx_canonical_rank(rt)) {
        if (rt == BSON_TYPE_MINKEY) return kind == Q_GT || kind == Q_GTE;
        if (rt == BSON_TYPE_MAXKEY) return kind == Q_LT || kind == Q_LTE;
        return false;
    }
    if (is_nan(v) || is_nan(rhs)) {
        bool both = is_nan(v) && is_nan(rhs);
        return both && (kind == Q_EQ || kind == Q_LTE || kind == Q_GTE);
    }
    int c = bsonx_compare_values(v, rhs);
    switch (kind) {
    case Q_EQ: return c == 0;
    case Q_LT: return c < 0;
    case Q_LTE: return c <= 0;
    case Q_GT: return c > 0;
    case Q_GTE: return c >= 0;
    default: return false;
    }
}

static bool in_match(qeval_t *ev, const qnode_t *n, const bson_iter_t *v) {
    bson_iter_t list, el;
    node_operand(n, &list);
    if (!bson_iter_recurse(&list, &el)) return false;
    while (bson_iter_next(&el)) {
        if (BSON_ITER_HOLDS_REGEX(&el)) continue;   /* tested below with the compiled form */
        if (compare_match(Q_EQ, &el, v)) return true;
    }
    for (int i = 0; v && i < n->n_in_rx; i++)
        if (regex_match_value(ev, n->in_rx[i], v)) return true;
    return false;
}

static bool type_match(const qnode_t *n, const bson_iter_t *v) {
    if (!v) return false;
    if (n->type_number && bsonx_is_number(v)) return true;
    for (int i = 0; i < n->ntypes; i++)
        if (bson_iter_type(v) == n->types[i]) return true;
    return false;
}

static bool size_match(const qnode_t *n, const bson_iter_t *v) {
    if (!v || !BSON_ITER_HOLDS_ARRAY(v)) return false;
    bson_iter_t el;
    int64_t count = 0;
    if (!bson_iter_recurse(v, &el)) return false;
    while (bson_iter_next(&el)) count++;
    return count == n->size;
}

static bool elem_match(qeval_t *ev, const qnode_t *n, const bson_iter_t *v);
static bool node_match_value(qeval_t *ev, const qnode_t *n, const bson_iter_t *v);
static bool node_match_doc(qeval_t *ev, const qnode_t *n, const bson_t *doc);

/* The predicate of a leaf on one value. */
static bool leaf_match(qeval_t *ev, const qnode_t *n, const bson_iter_t *v) {
    bson_iter_t rhs;
    if (ev->rc) return false;
    switch (n->kind) {
    case Q_EQ:
        if (n->rx) return v && regex_match_value(ev, n->rx, v);
        /* fall through */
    case Q_LT: case Q_LTE: case Q_GT: case Q_GTE:
        node_operand(n, &rhs);
        return compare_match(n->kind, &rhs, v);
    case Q_IN: return in_match(ev, n, v);
    case Q_EXISTS: return v != NULL;
    case Q_TYPE: return type_match(n, v);
    case Q_REGEX: return v && regex_match_value(ev, n->rx, v);
    case Q_SIZE: return size_match(n, v);
    case Q_ELEM_OBJ: case Q_ELEM_VAL: return elem_match(ev, n, v);
    default: return false;   /* logical nodes are evaluated by their callers */
    }
}

/* $elemMatch: some element of the array satisfies every condition. The document form
 * ({$elemMatch: {b: 1}}) looks at elements that are documents (or arrays, read as
 * documents with keys "0", "1"...); the value form ({$elemMatch: {$gt: 1}}) at any
 * element. */
static bool elem_match(qeval_t *ev, const qnode_t *n, const bson_iter_t *v) {
    bson_iter_t el;
    if (!v || !BSON_ITER_HOLDS_ARRAY(v) || !bson_iter_recurse(v, &el)) return false;
    while (bson_iter_next(&el)) {
        if (n->kind == Q_ELEM_OBJ) {
            if (!BSON_ITER_HOLDS_DOCUMENT(&el) && !BSON_ITER_HOLDS_ARRAY(&el)) continue;
            uint32_t len;
            const uint8_t *data;
            bson_t sub;
            if (BSON_ITER_HOLDS_DOCUMENT(&el)) bson_iter_document(&el, &len, &data);
            else bson_iter_array(&el, &len, &data);
            if (bson_init_static(&sub, data, len) && node_match_doc(ev, n->sub->root, &sub))
                return true;
        } else {
            bool all = true;
            for (int i = 0; all && i < n->nkids; i++) all = node_match_value(ev, n->kids[i], &el);
            if (all) return true;
        }
    }
    return false;
}

/* A node evaluated against one value, not a document: the children of an $elemMatch
 * value form. */
static bool node_match_value(qeval_t *ev, const qnode_t *n, const bson_iter_t *v) {
    switch (n->kind) {
    case Q_AND:
        for (int i = 0; i < n->nkids; i++)
            if (!node_match_value(ev, n->kids[i], v)) return false;
        return true;
    case Q_NOT: return !node_match_value(ev, n->kids[0], v);
    default: return leaf_match(ev, n, v);
    }
}

/* ------------------------------------------------------------------------------------ */
/* Paths: every value a dotted path reaches (MongoDB's BSONElementIterator)              */

/* Does the leaf match at least one value reached by path in doc? */
static bool path_visit_doc(qeval_t *ev, const qnode_t *n, const bson_t *doc, const char *path,
                           bool expand);

/* True when the leaf tests arrays only as a whole ($size, $elemMatch). */
static bool leaf_expands_arrays(const qnode_t *n) {
    return n->kind != Q_SIZE && n->kind != Q_ELEM_OBJ && n->kind != Q_ELEM_VAL;
}

/* "12" → 12; false for anything that is not a plain array index. */
static bool path_component_index(const char *s, size_t len, uint32_t *out) {
    if (len == 0 || len > 9 || (len > 1 && s[0] == '0')) return false;
    uint32_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (uint32_t)(s[i] - '0');
    }
    *out = v;
    return true;
}

static bool path_visit_value(qeval_t *ev, const qnode_t *n, const bson_iter_t *v, const char *rest,
                             bool expand);

/* The path continues (rest) below an array: a numeric first component picks that
 * element; besides, every element that is a document is searched for rest. Elements
 * that are scalars or nested arrays contribute nothing. */
static bool path_visit_array(qeval_t *ev, const qnode_t *n, const bson_iter_t *arr,
                             const char *rest, bool expand) {
    bson_t a;
    bson_iter_t el;
    const char *dot = strchr(rest, '.');
    size_t head_len = dot ? (size_t)(dot - rest) : strlen(rest);
    uint32_t index;
    if (!bsonx_view_container(arr, &a)) return false;
    if (path_component_index(rest, head_len, &index)) {
        char key[16];
        bson_snprintf(key, sizeof key, "%u", index);
        if (bson_iter_init_find(&el, &a, key) &&
            path_visit_value(ev, n, &el, dot ? dot + 1 : NULL, expand))
            return true;
    }
    if (!bson_iter_init(&el, &a)) return false;
    while (bson_iter_next(&el)) {
        bson_t sub;
        if (BSON_ITER_HOLDS_DOCUMENT(&el) && bsonx_view_container(&el, &sub) &&
            path_visit_doc(ev, n, &sub, rest, expand))
            return true;
    }
    return false;
}

/* v is the value of the path's current component; rest is what follows (NULL: v is the
 * end of the path). At the end an array is tested element by element, then whole. */
static bool path_visit_value(qeval_t *ev, const qnode_t *n, const bson_iter_t *v, const char *rest,
                             bool expand) {
    if (!rest) {
        if (expand && BSON_ITER_HOLDS_ARRAY(v)) {
            bson_iter_t el;
            if (bson_iter_recurse(v, &el))
                while (bson_iter_next(&el))
                    if (leaf_match(ev, n, &el)) return true;
        }
        return leaf_match(ev, n, v);
    }
    if (BSON_ITER_HOLDS_ARRAY(v)) return path_visit_array(ev, n, v, rest, expand);
    if (BSON_ITER_HOLDS_DOCUMENT(v)) {
        bson_t sub;
        return bsonx_view_container(v, &sub) && path_visit_doc(ev, n, &sub, rest, expand);
    }
    return leaf_match(ev, n, NULL);   /* the path runs through a scalar: missing */
}

static bool path_visit_doc(qeval_t *ev, const qnode_t *n, const bson_t *doc, const char *path,
                           bool expand) {
    const char *dot = strchr(path, '.');
    size_t head_len = dot ? (size_t)(dot - path) : strlen(path);
    bson_iter_t it;
    if (!bson_iter_init_find_w_len(&it, doc, path, (int)head_len)) return leaf_match(ev, n, NULL);
    return path_visit_value(ev, n, &it, dot ? dot + 1 : NULL, expand);
}

/* ------------------------------------------------------------------------------------ */
/* Evaluation                                                                            */

/* {$expr: e}: e evaluated with $$ROOT = the document, true when the value is truthy
 * (MongoDB's coerceToBool). An evaluation error ($add of a string ...) fails the whole
 * operation as in MongoDB: it sticks like a regex timeout, and query_match (which has no
 * error to report) answers false. */
static bool expr_match(qeval_t *ev, const qnode_t *n, const bson_t *doc) {
    bson_value_t v;
    ms_error_t local;
    if (ev->rc) return false;
    int rc = expr_eval(n->expr, doc, n->vars, &v, ev->err ? ev->err : &local);
    if (rc) {
        ev->rc = rc;
        return false;
    }
    bool t = expr_value_truthy(&v);
    bson_value_destroy(&v);
    return t;
}

static bool node_match_doc(qeval_t *ev, const qnode_t *n, const bson_t *doc) {
    switch (n->kind) {
    case Q_AND:
        for (int i = 0; i < n->nkids; i++)
            if (!node_match_doc(ev, n->kids[i], doc)) return false;
        return true;
    case Q_OR:
        for (int i = 0; i < n->nkids; i++)
            if (node_match_doc(ev, n->kids[i], doc)) return true;
        return false;
    case Q_NOR:
        for (int i = 0; i < n->nkids; i++)
            if (node_match_doc(ev, n->kids[i], doc)) return false;
        return true;
    case Q_NOT: return !node_match_doc(ev, n->kids[0], doc);
    case Q_EXPR: return expr_match(ev, n, doc);
    default: return path_visit_doc(ev, n, doc, n->path, leaf_expands_arrays(n));
    }
}

bool query_match(const query_t *q, const bson_t *doc) {
    qeval_t ev = {false, 0, NULL};
    return node_match_doc(&ev, q->root, doc);
}

int query_match_checked(const query_t *q, const bson_t *doc, bool *matched, ms_error_t *err) {
    qeval_t ev = {true, 0, err};
    bool m = node_match_doc(&ev, q->root, doc);
    if (ev.rc) return ev.rc;
    *matched = m;
    return 0;
}

bool query_is_empty(const query_t *q) {
    return q->root->kind == Q_AND && q->root->nkids == 0;
}

void query_free(query_t *q) {
    if (!q) return;
    node_free(q->root);
    expr_vars_free(q->own_vars);
    bson_free(q);
}

/* ------------------------------------------------------------------------------------ */
/* Parsing                                                                               */

static int parse_filter(const bson_t *filter, qnode_t *and_node, ms_error_t *err);
static int parse_field(const char *path, const bson_iter_t *value, qnode_t *and_node,
                       ms_error_t *err);

/* What the parse of one filter needs besides the filter: the command's `let` variables
 * for $expr, and whether we are inside an $elemMatch (where MongoDB refuses $expr: it
 * only applies to the top-level document). Thread-local rather than threaded through
 * every parse function because only $expr reads it; query_compile_vars saves and
 * restores it, so nested compiles ($elemMatch) see their own depth. */
static __thread struct {
    const expr_vars_t *vars;
    int depth;     /* query_compile calls in progress: > 1 inside $elemMatch */
} parse_ctx;

/* {$expr: <expression>} at the top level or inside $and / $or / $nor. */
static int parse_expr(const bson_iter_t *it, qnode_t *and_node, ms_error_t *err) {
    expr_t *e = NULL;
    if (parse_ctx.depth > 1)
        return err_set(err, MS_ERR_BAD_VALUE, "$expr can only be applied to the top-level document");
    int rc = expr_parse(it, parse_ctx.vars, &e, err);
    if (rc) return rc;
    qnode_t *n = node_new(Q_EXPR, NULL);
    n->expr = e;
    n->vars = parse_ctx.vars;
    node_add(and_node, n);
    return 0;
}

/* True when a field's value is an operator document ({$gt: 1}), not a literal. */
static bool is_operator_doc(const bson_iter_t *value) {
    bson_iter_t it;
    if (!BSON_ITER_HOLDS_DOCUMENT(value) || !bson_iter_recurse(value, &it)) return false;
    return bson_iter_next(&it) && bson_iter_key(&it)[0] == '$';
}

/* An equality leaf: {a: 5}, {a: {$eq: 5}}, {a: /re/}. */
static int make_eq(const char *path, const bson_iter_t *v, qnode_t **out, ms_error_t *err) {
    qnode_t *n = node_new(Q_EQ, path);
    node_set_operand(n, v);
    if (BSON_ITER_HOLDS_REGEX(v)) {
        const char *opts = NULL;
        const char *pat = bson_iter_regex(v, &opts);
        int rc = regex_compile(pat, opts ? opts : "", &n->rx, err);
        if (rc) {
            node_free(n);
            return rc;
        }
    }
    *out = n;
    return 0;
}

static int make_in(const char *path, const bson_iter_t *v, qnode_t **out, ms_error_t *err) {
    bson_iter_t el;
    if (!BSON_ITER_HOLDS_ARRAY(v) || !bson_iter_recurse(v, &el))
        return err_set(err, MS_ERR_BAD_VALUE, "$in needs an array");
    qnode_t *n = node_new(Q_IN, path);
    node_set_operand(n, v);
    while (bson_iter_next(&el)) {
        if (is_operator_doc(&el)) {
            node_free(n);
            return err_set(err, MS_ERR_BAD_VALUE, "cannot nest $ under $in");
        }
        if (!BSON_ITER_HOLDS_REGEX(&el)) continue;
        const char *opts = NULL;
        const char *pat = bson_iter_regex(&el, &opts);
        qregex_t *rx;
        int rc = regex_compile(pat, opts ? opts : "", &rx, err);
        if (rc) {
            node_free(n);
            return rc;
        }
        n->in_rx = bson_realloc(n->in_rx, sizeof *n->in_rx * (size_t)(n->n_in_rx + 1));
        n->in_rx[n->n_in_rx++] = rx;
    }
    *out = n;
    return 0;
}

static int type_code_add(qnode_t *n, const bson_iter_t *v, ms_error_t *err) {
    if (n->ntypes >= QTYPES_MAX) return err_set(err, MS_ERR_BAD_VALUE, "too many types in $type");
    if (BSON_ITER_HOLDS_UTF8(v)) {
        bool is_number = false;
        int t = bsonx_type_from_alias(bson_iter_utf8(v, NULL), &is_number);
        if (is_number) { n->type_number = true; return 0; }
        if (t < 0)
            return err_set(err, MS_ERR_BAD_VALUE, "Unknown type name alias: %s",
                           bson_iter_utf8(v, NULL));
        n->types[n->ntypes++] = (bson_type_t)t;
        return 0;
    }
    int64_t code;
    if (!bsonx_as_int64_exact(v, &code))
        return err_set(err, MS_ERR_BAD_VALUE, "type must be represented as a number or a string");
    if (code == -1) code = BSON_TYPE_MINKEY;
    else if (code == 127) code = BSON_TYPE_MAXKEY;
    else if (code < 1 || code > 19)
        return err_set(err, MS_ERR_BAD_VALUE, "Invalid numerical type code: %lld", (long long)code);
    n->types[n->ntypes++] = (bson_type_t)code;
    return 0;
}

static int make_type(const char *path, const bson_iter_t *v, qnode_t **out, ms_error_t *err) {
    qnode_t *n = node_new(Q_TYPE, path);
    int rc = 0;
    if (BSON_ITER_HOLDS_ARRAY(v)) {
        bson_iter_t el;
        if (bson_iter_recurse(v, &el))
            while (rc == 0 && bson_iter_next(&el)) rc = type_code_add(n, &el, err);
    } else {
        rc = type_code_add(n, v, err);
    }
    if (rc) {
        node_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

static int make_size(const char *path, const bson_iter_t *v, qnode_t **out, ms_error_t *err) {
    int64_t size;
    if (!bsonx_is_number(v)) return err_set(err, MS_ERR_BAD_VALUE, "$size needs a number");
    if (!bsonx_as_int64_exact(v, &size))
        return err_set(err, MS_ERR_BAD_VALUE, "$size must be a whole number");
    if (size < 0) return err_set(err, MS_ERR_BAD_VALUE, "$size may not be negative");
    *out = node_new(Q_SIZE, path);
    (*out)->size = size;
    return 0;
}

/* {$regex: "x", $options: "i"} or {$regex: /x/i}; options given beside a regex value
 * replace its own flags only when the regex has none (MongoDB refuses both). */
static int make_regex(const char *path, const bson_iter_t *re, const bson_iter_t *options,
                      qnode_t **out, ms_error_t *err) {
    const char *pat, *opts = "";
    if (BSON_ITER_HOLDS_UTF8(re)) {
        uint32_t len;
        pat = bson_iter_utf8(re, &len);
        if (strlen(pat) != len)
            return err_set(err, MS_ERR_BAD_VALUE,
                           "Regular expression cannot contain an embedded null byte");
    } else if (BSON_ITER_HOLDS_REGEX(re)) {
        const char *o = NULL;
        pat = bson_iter_regex(re, &o);
        opts = o ? o : "";
        if (options && *opts)
            return err_set(err, MS_ERR_BAD_VALUE, "options set in both $regex and $options");
    } else {
        return err_set(err, MS_ERR_BAD_VALUE, "$regex has to be a string");
    }
    if (options) {
        if (!BSON_ITER_HOLDS_UTF8(options))
            return err_set(err, MS_ERR_BAD_VALUE, "$options has to be a string");
        opts = bson_iter_utf8(options, NULL);
    }
    qnode_t *n = node_new(Q_REGEX, path);
    int rc = regex_compile(pat, opts, &n->rx, err);
    if (rc) {
        node_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

static int make_elem_match(const char *path, const bson_iter_t *v, qnode_t **out,
                           ms_error_t *err);
static int parse_operators(const char *path, const bson_iter_t *opdoc, qnode_t *and_node,
                           ms_error_t *err);

/* {$all: [1, 2]} is AND($eq 1, $eq 2); {$all: [{$elemMatch: ...}, ...]} is AND of the
 * $elemMatch. An empty $all matches nothing (an empty $in). */
static int make_all(const char *path, const bson_iter_t *v, qnode_t *and_node, ms_error_t *err) {
    bson_iter_t el;
    if (!BSON_ITER_HOLDS_ARRAY(v) || !bson_iter_recurse(v, &el))
        return err_set(err, MS_ERR_BAD_VALUE, "$all needs an array");
    bool any = false;
    while (bson_iter_next(&el)) {
        qnode_t *kid = NULL;
        int rc;
        any = true;
        if (is_operator_doc(&el)) {
            bson_iter_t op;
            bson_iter_recurse(&el, &op);
            bson_iter_next(&op);
            if (strcmp(bson_iter_key(&op), "$elemMatch") != 0)
                return err_set(err, MS_ERR_BAD_VALUE, "no $ expressions in $all");
            rc = make_elem_match(path, &op, &kid, err);
        } else {
            rc = make_eq(path, &el, &kid, err);
        }
        if (rc) return rc;
        node_add(and_node, kid);
    }
    if (!any) {
        qnode_t *none = node_new(Q_IN, path);   /* $in: [] — nothing is in it */
        none->operand = bson_new();
        bson_t list;
        bson_append_array_begin(none->operand, "v", 1, &list);
        bson_append_array_end(none->operand, &list);
        node_add(and_node, none);
    }
    return 0;
}

/* Logical operators that make an $elemMatch operand a document filter even though their
 * name starts with '$' (MongoDB: only path-accepting keywords select the value form). */
static bool is_top_level_name(const char *key) {
    return strcmp(key, "$and") == 0 || strcmp(key, "$or") == 0 || strcmp(key, "$nor") == 0 ||
           strcmp(key, "$where") == 0 || strcmp(key, "$expr") == 0 ||
           strcmp(key, "$comment") == 0 || strcmp(key, "$text") == 0;
}

static int make_elem_match(const char *path, const bson_iter_t *v, qnode_t **out,
                           ms_error_t *err) {
    bson_t spec;
    bson_iter_t first;
    if (!BSON_ITER_HOLDS_DOCUMENT(v) || !bsonx_view_container(v, &spec))
        return err_set(err, MS_ERR_BAD_VALUE, "$elemMatch needs an Object");
    bool value_form = bson_iter_init(&first, &spec) && bson_iter_next(&first) &&
                      bson_iter_key(&first)[0] == '$' && !is_top_level_name(bson_iter_key(&first));
    qnode_t *n = node_new(value_form ? Q_ELEM_VAL : Q_ELEM_OBJ, path);
    int rc = value_form ? parse_operators(NULL, v, n, err) : query_compile(&spec, &n->sub, err);
    if (rc) {
        node_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

static qnode_t *make_not(qnode_t *kid) {
    qnode_t *n = node_new(Q_NOT, NULL);
    node_add(n, kid);
    return n;
}

/* {$not: /re/} or {$not: {<operators>}}: the negation of the whole path expression. */
static int make_not_op(const char *path, const bson_iter_t *v, qnode_t **out, ms_error_t *err) {
    qnode_t *inner = NULL;
    int rc;
    if (BSON_ITER_HOLDS_REGEX(v)) {
        rc = make_regex(path, v, NULL, &inner, err);
    } else if (BSON_ITER_HOLDS_DOCUMENT(v)) {
        bson_iter_t first;
        if (!bson_iter_recurse(v, &first) || !bson_iter_next(&first))
            return err_set(err, MS_ERR_BAD_VALUE, "$not cannot be empty");
        if (bson_iter_key(&first)[0] != '$')
            return err_set(err, MS_ERR_BAD_VALUE, "unknown operator: %s", bson_iter_key(&first));
        inner = node_new(Q_AND, NULL);
        rc = parse_operators(path, v, inner, err);
    } else {
        return err_set(err, MS_ERR_BAD_VALUE, "$not needs a regex or a document");
    }
    if (rc) {
        node_free(inner);
        return rc;
    }
    *out = make_not(inner);
    return 0;
}

static int make_compare(enum qkind kind, const char *path, const bson_iter_t *v, qnode_t **out,
                        ms_error_t *err) {
    if (BSON_ITER_HOLDS_REGEX(v))
        return err_set(err, MS_ERR_BAD_VALUE, "Can't have RegEx as arg to predicate over field '%s'.",
                       path ? path : "");
    qnode_t *n = node_new(kind, path);
    node_set_operand(n, v);
    *out = n;
    return 0;
}

/* Operators MongoDB has that this engine refuses clearly instead of calling unknown. */
static bool is_unsupported_operator(const char *op) {
    static const char *const names[] = {"$mod", "$bitsAllSet", "$bitsAnySet", "$bitsAllClear",
                                        "$bitsAnyClear", "$geoWithin", "$geoIntersects",
                                        "$near", "$nearSphere", "$within", "$jsonSchema", NULL};
    for (int i = 0; names[i]; i++)
        if (strcmp(op, names[i]) == 0) return true;
    return false;
}

/* One operator of an operator document ({$gt: 5} in {a: {$gt: 5, $lt: 9}}). $options
 * belongs to the $regex beside it (found by the caller). */
static int parse_operator(const char *path, const bson_iter_t *op, const bson_iter_t *options,
                          qnode_t *and_node, ms_error_t *err) {
    const char *name = bson_iter_key(op);
    qnode_t *n = NULL;
    int rc = 0;
    if (strcmp(name, "$eq") == 0) rc = make_eq(path, op, &n, err);
    else if (strcmp(name, "$ne") == 0) {
        if (BSON_ITER_HOLDS_REGEX(op)) return err_set(err, MS_ERR_BAD_VALUE, "Can't have regex as arg to $ne.");
        rc = make_eq(path, op, &n, err);
        if (rc == 0) n = make_not(n);
    }
    else if (strcmp(name, "$lt") == 0) rc = make_compare(Q_LT, path, op, &n, err);
    else if (strcmp(name, "$lte") == 0) rc = make_compare(Q_LTE, path, op, &n, err);
    else if (strcmp(name, "$gt") == 0) rc = make_compare(Q_GT, path, op, &n, err);
    else if (strcmp(name, "$gte") == 0) rc = make_compare(Q_GTE, path, op, &n, err);
    else if (strcmp(name, "$in") == 0) rc = make_in(path, op, &n, err);
    else if (strcmp(name, "$nin") == 0) {
        rc = make_in(path, op, &n, err);
        if (rc == 0) n = make_not(n);
    } else if (strcmp(name, "$exists") == 0) {
        n = node_new(Q_EXISTS, path);
        if (!bsonx_truthy(op)) n = make_not(n);
    }
    else if (strcmp(name, "$type") == 0) rc = make_type(path, op, &n, err);
    else if (strcmp(name, "$size") == 0) rc = make_size(path, op, &n, err);
    else if (strcmp(name, "$regex") == 0) rc = make_regex(path, op, options, &n, err);
    else if (strcmp(name, "$options") == 0) return 0;   /* consumed with $regex */
    else if (strcmp(name, "$not") == 0) rc = make_not_op(path, op, &n, err);
    else if (strcmp(name, "$elemMatch") == 0) rc = make_elem_match(path, op, &n, err);
    else if (strcmp(name, "$all") == 0) return make_all(path, op, and_node, err);
    else if (is_unsupported_operator(name))
        return err_set(err, MS_ERR_BAD_VALUE, "%s is not supported", name);
    else return err_set(err, MS_ERR_BAD_VALUE, "unknown operator: %s", name);
    if (rc) return rc;
    node_add(and_node, n);
    return 0;
}

/* Every operator of an operator document; each one adds a leaf to and_node. */
static int parse_operators(const char *path, const bson_iter_t *opdoc, qnode_t *and_node,
                           ms_error_t *err) {
    bson_iter_t it, options;
    bool has_regex = false, has_options = false;
    if (!bson_iter_recurse(opdoc, &it)) return err_set(err, MS_ERR_BAD_VALUE, "bad operator document");
    while (bson_iter_next(&it)) {
        if (strcmp(bson_iter_key(&it), "$regex") == 0) has_regex = true;
        if (strcmp(bson_iter_key(&it), "$options") == 0) { has_options = true; options = it; }
    }
    if (has_options && !has_regex) return err_set(err, MS_ERR_BAD_VALUE, "$options needs a $regex");
    bson_iter_recurse(opdoc, &it);
    while (bson_iter_next(&it)) {
        if (bson_iter_key(&it)[0] != '$')
            return err_set(err, MS_ERR_BAD_VALUE, "unknown operator: %s", bson_iter_key(&it));
        int rc = parse_operator(path, &it, has_options ? &options : NULL, and_node, err);
        if (rc) return rc;
    }
    return 0;
}

static int parse_field(const char *path, const bson_iter_t *value, qnode_t *and_node,
                       ms_error_t *err) {
    if (is_operator_doc(value)) return parse_operators(path, value, and_node, err);
    qnode_t *n = NULL;
    int rc = make_eq(path, value, &n, err);
    if (rc) return rc;
    node_add(and_node, n);
    return 0;
}

/* $and / $or / $nor: a non-empty array of filters. */
static int parse_logical(enum qkind kind, const bson_iter_t *v, qnode_t *and_node,
                         ms_error_t *err) {
    const char *name = kind == Q_AND ? "$and" : kind == Q_OR ? "$or" : "$nor";
    bson_iter_t el;
    if (!BSON_ITER_HOLDS_ARRAY(v) || !bson_iter_recurse(v, &el))
        return err_set(err, MS_ERR_BAD_VALUE, "%s must be an array", name);
    qnode_t *n = node_new(kind, NULL);
    while (bson_iter_next(&el)) {
        bson_t branch;
        if (!BSON_ITER_HOLDS_DOCUMENT(&el) || !bsonx_view_container(&el, &branch)) {
            node_free(n);
            return err_set(err, MS_ERR_BAD_VALUE, "$or/$and/$nor entries need to be full objects");
        }
        qnode_t *kid = node_new(Q_AND, NULL);
        node_add(n, kid);
        int rc = parse_filter(&branch, kid, err);
        if (rc) {
            node_free(n);
            return rc;
        }
    }
    if (n->nkids == 0) {
        node_free(n);
        return err_set(err, MS_ERR_BAD_VALUE, "$and/$or/$nor must be a nonempty array");
    }
    node_add(and_node, n);
    return 0;
}

static int parse_top_level(const bson_iter_t *it, qnode_t *and_node, ms_error_t *err) {
    const char *name = bson_iter_key(it);
    if (strcmp(name, "$and") == 0) return parse_logical(Q_AND, it, and_node, err);
    if (strcmp(name, "$or") == 0) return parse_logical(Q_OR, it, and_node, err);
    if (strcmp(name, "$nor") == 0) return parse_logical(Q_NOR, it, and_node, err);
    if (strcmp(name, "$comment") == 0) return 0;   /* a note for logs; matches everything */
    if (strcmp(name, "$expr") == 0) return parse_expr(it, and_node, err);
    if (strcmp(name, "$where") == 0 ||
        strcmp(name, "$text") == 0 || strcmp(name, "$jsonSchema") == 0)
        return err_set(err, MS_ERR_BAD_VALUE, "%s is not supported", name);
    return err_set(err, MS_ERR_BAD_VALUE, "unknown top level operator: %s", name);
}

static int parse_filter(const bson_t *filter, qnode_t *and_node, ms_error_t *err) {
    bson_iter_t it;
    if (!bson_iter_init(&it, filter)) return err_set(err, MS_ERR_BAD_VALUE, "invalid filter");
    while (bson_iter_next(&it)) {
        const char *key = bson_iter_key(&it);
        int rc = key[0] == '$' ? parse_top_level(&it, and_node, err)
                               : parse_field(key, &it, and_node, err);
        if (rc) return rc;
    }
    return 0;
}

int query_compile(const bson_t *filter, query_t **out, ms_error_t *err) {
    /* Nested compiles ($elemMatch's sub-filter) keep the outer variables. */
    return query_compile_vars(filter, parse_ctx.depth ? parse_ctx.vars : NULL, out, err);
}

int query_compile_vars(const bson_t *filter, const expr_vars_t *vars, query_t **out,
                       ms_error_t *err) {
    query_t *q = bson_malloc0(sizeof *q);
    q->root = node_new(Q_AND, NULL);
    const expr_vars_t *saved = parse_ctx.vars;
    parse_ctx.vars = vars;
    parse_ctx.depth++;
    int rc = parse_filter(filter, q->root, err);
    parse_ctx.depth--;
    parse_ctx.vars = saved;
    if (rc) {
        query_free(q);
        return rc;
    }
    *out = q;
    return 0;
}

int query_compile_let(const bson_t *filter, const bson_t *let, query_t **out, ms_error_t *err) {
    expr_vars_t *vars = NULL;
    int rc;
    if (let && (rc = expr_vars_from_let(let, &vars, err)) != 0) return rc;
    if ((rc = query_compile_vars(filter, vars, out, err)) != 0) {
        expr_vars_free(vars);
        return rc;
    }
    (*out)->own_vars = vars;
    return 0;
}
