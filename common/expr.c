/*
 * expr.c — the aggregation expression engine (MongoDB's Expression tree): parse once,
 * evaluate per document. Linked into every process; the shard's aggregate uses it now,
 * the router's merger, the config server's aggregate and $expr / let / pipeline updates
 * are meant to. Pure logic over BSON, no I/O, no globals.
 *
 * Numbers follow MongoDB's ExpressionAdd / ExpressionMultiply: int32 results stay int32
 * while they fit, else int64; an int64 overflow gives a double; a double anywhere gives a
 * double. decimal128 is stored and compared by minishard but there is no decimal
 * arithmetic here: an operator that would compute with one answers NotImplemented.
 */
#include "common/expr.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/limits.h"

/* ---- variables ---------------------------------------------------------------------- */

struct expr_vars {
    char **names;
    bson_value_t *vals;
    int n, cap;
};

expr_vars_t *expr_vars_new(void) { return calloc(1, sizeof(expr_vars_t)); }

void expr_vars_free(expr_vars_t *vars) {
    if (!vars) return;
    for (int i = 0; i < vars->n; i++) {
        free(vars->names[i]);
        bson_value_destroy(&vars->vals[i]);
    }
    free(vars->names);
    free(vars->vals);
    free(vars);
}

/* MongoDB's variableValidation::validateNameForUserWrite: a lower-case letter or a
 * non-ASCII byte first, then letters, digits, '_' or non-ASCII bytes. */
static int check_var_name(const char *name, ms_error_t *err) {
    unsigned char c0 = (unsigned char)name[0];
    if (!name[0])
        return err_set(err, MS_ERR_FAILED_TO_PARSE, "empty variable names are not allowed");
    if (!(islower(c0) || c0 >= 0x80))
        return err_set(err, MS_ERR_FAILED_TO_PARSE,
                       "'%s' starts with an invalid character for a user variable name", name);
    for (const char *p = name + 1; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (!(isalnum(c) || c == '_' || c >= 0x80))
            return err_set(err, MS_ERR_FAILED_TO_PARSE,
                           "'%s' contains an invalid character for a variable name: '%c'",
                           name, *p);
    }
    return 0;
}

static int vars_index(const expr_vars_t *vars, const char *name) {
    if (!vars) return -1;
    for (int i = 0; i < vars->n; i++)
        if (strcmp(vars->names[i], name) == 0) return i;
    return -1;
}

int expr_vars_set(expr_vars_t *vars, const char *name, const bson_value_t *v, ms_error_t *err) {
    int rc, i;
    if ((rc = check_var_name(name, err)) != 0) return rc;
    if ((i = vars_index(vars, name)) >= 0) {
        bson_value_destroy(&vars->vals[i]);
        bson_value_copy(v, &vars->vals[i]);
        return 0;
    }
    if (vars->n == vars->cap) {
        int cap = vars->cap ? vars->cap * 2 : 4;
        char **nn = realloc(vars->names, (size_t)cap * sizeof *nn);
        if (!nn) return err_set(err, MS_ERR_INTERNAL, "out of memory");
        vars->names = nn;
        bson_value_t *nv = realloc(vars->vals, (size_t)cap * sizeof *nv);
        if (!nv) return err_set(err, MS_ERR_INTERNAL, "out of memory");
        vars->vals = nv;
        vars->cap = cap;
    }
    vars->names[vars->n] = strdup(name);
    if (v->value_type == BSON_TYPE_EOD)
        memset(&vars->vals[vars->n], 0, sizeof vars->vals[vars->n]);
    else
        bson_value_copy(v, &vars->vals[vars->n]);
    vars->n++;
    return 0;
}

const bson_value_t *expr_vars_get(const expr_vars_t *vars, const char *name) {
    int i = vars_index(vars, name);
    return i < 0 ? NULL : &vars->vals[i];
}

int expr_vars_from_let(const bson_t *let, expr_vars_t **out, ms_error_t *err) {
    expr_vars_t *vars = expr_vars_new();
    bson_iter_t it;
    bson_t empty = BSON_INITIALIZER;
    int rc = 0;
    if (!vars) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    if (!bson_iter_init(&it, let)) {
        rc = err_set(err, MS_ERR_FAILED_TO_PARSE, "let must be a document");
        goto out;
    }
    while (rc == 0 && bson_iter_next(&it)) {
        expr_t *e = NULL;
        bson_value_t v;
        if ((rc = check_var_name(bson_iter_key(&it), err)) != 0) break;
        if ((rc = expr_parse(&it, vars, &e, err)) != 0) break;
        if ((rc = expr_eval(e, &empty, vars, &v, err)) == 0) {
            rc = expr_vars_set(vars, bson_iter_key(&it), &v, err);
            bson_value_destroy(&v);
        }
        expr_free(e);
    }
out:
    if (rc != 0) {
        expr_vars_free(vars);
        return rc;
    }
    *out = vars;
    return 0;
}

/* ---- values ------------------------------------------------------------------------- */

static const char *type_name(const bson_value_t *v) {
    return v->value_type == BSON_TYPE_EOD ? "missing" : bsonx_type_name(v->value_type);
}

static bool nullish(const bson_value_t *v) {
    return v->value_type == BSON_TYPE_EOD || v->value_type == BSON_TYPE_NULL ||
           v->value_type == BSON_TYPE_UNDEFINED;
}

bool expr_value_is_number(const bson_value_t *v) {
    return v->value_type == BSON_TYPE_INT32 || v->value_type == BSON_TYPE_INT64 ||
           v->value_type == BSON_TYPE_DOUBLE || v->value_type == BSON_TYPE_DECIMAL128;
}

void expr_value_from_iter(const bson_iter_t *it, bson_value_t *out) {
    bson_value_copy(bson_iter_value((bson_iter_t *)it), out);
}

void expr_value_append(bson_t *dst, const char *key, const bson_value_t *v) {
    if (v->value_type == BSON_TYPE_EOD) return;
    bson_append_value(dst, key, -1, v);
}

/* A one-element document holding v (missing as undefined) and an iterator on it, for
 * the comparator in bsonx.c. tmp is initialised here; the caller destroys it. */
static void value_iter(const bson_value_t *v, bson_t *tmp, bson_iter_t *it) {
    bson_init(tmp);
    if (v->value_type == BSON_TYPE_EOD)
        BSON_APPEND_UNDEFINED(tmp, "");
    else
        bson_append_value(tmp, "", 0, v);
    bson_iter_init(it, tmp);
    bson_iter_next(it);
}

int expr_value_cmp(const bson_value_t *a, const bson_value_t *b) {
    bson_t ta, tb;
    bson_iter_t ia, ib;
    int c;
    value_iter(a, &ta, &ia);
    value_iter(b, &tb, &ib);
    c = bsonx_compare_values(&ia, &ib);
    bson_destroy(&ta);
    bson_destroy(&tb);
    return c;
}

bool expr_value_truthy(const bson_value_t *v) {
    switch (v->value_type) {
    case BSON_TYPE_EOD:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED: return false;
    case BSON_TYPE_BOOL: return v->value.v_bool;
    case BSON_TYPE_INT32: return v->value.v_int32 != 0;
    case BSON_TYPE_INT64: return v->value.v_int64 != 0;
    case BSON_TYPE_DOUBLE: return v->value.v_double != 0.0;
    case BSON_TYPE_DECIMAL128: {
        /* zero of any exponent: the 113-bit coefficient is 0 */
        uint64_t hi = v->value.v_decimal128.high, lo = v->value.v_decimal128.low;
        bool steering = ((hi >> 61) & 3) == 3;   /* large-coefficient form is never 0 */
        return steering || (hi & 0x1ffffffffffffULL) != 0 || lo != 0;
    }
    default: return true;
    }
}

static void set_missing(bson_value_t *out) { memset(out, 0, sizeof *out); }
static void set_null(bson_value_t *out) {
    memset(out, 0, sizeof *out);
    out->value_type = BSON_TYPE_NULL;
}
static void set_bool(bson_value_t *out, bool b) {
    memset(out, 0, sizeof *out);
    out->value_type = BSON_TYPE_BOOL;
    out->value.v_bool = b;
}
static void set_int32(bson_value_t *out, int32_t i) {
    memset(out, 0, sizeof *out);
    out->value_type = BSON_TYPE_INT32;
    out->value.v_int32 = i;
}
static void set_int64(bson_value_t *out, int64_t i) {
    memset(out, 0, sizeof *out);
    out->value_type = BSON_TYPE_INT64;
    out->value.v_int64 = i;
}
static void set_double(bson_value_t *out, double d) {
    memset(out, 0, sizeof *out);
    out->value_type = BSON_TYPE_DOUBLE;
    out->value.v_double = d;
}
/* Takes ownership of s (bson_malloc'd). */
static void set_str_owned(bson_value_t *out, char *s, uint32_t len) {
    memset(out, 0, sizeof *out);
    out->value_type = BSON_TYPE_UTF8;
    out->value.v_utf8.str = s;
    out->value.v_utf8.len = len;
}
/* Takes the buffer of b (initialised with bson_init; destroyed here). */
static void set_container(bson_value_t *out, bson_t *b, bool array) {
    uint32_t len = 0;
    uint8_t *data = bson_destroy_with_steal(b, true, &len);
    memset(out, 0, sizeof *out);
    out->value_type = array ? BSON_TYPE_ARRAY : BSON_TYPE_DOCUMENT;
    out->value.v_doc.data = data;
    out->value.v_doc.data_len = len;
}

/* A read-only document view of a document or array value. */
static bool value_view(const bson_value_t *v, bson_t *out) {
    if (v->value_type != BSON_TYPE_DOCUMENT && v->value_type != BSON_TYPE_ARRAY) return false;
    return bson_init_static(out, v->value.v_doc.data, v->value.v_doc.data_len);
}

/* ---- numbers ------------------------------------------------------------------------ */

enum num_kind { N_INT32, N_INT64, N_DOUBLE, N_DECIMAL };

static enum num_kind num_kind(const bson_value_t *v) {
    switch (v->value_type) {
    case BSON_TYPE_INT32: return N_INT32;
    case BSON_TYPE_INT64: return N_INT64;
    case BSON_TYPE_DOUBLE: return N_DOUBLE;
    default: return N_DECIMAL;
    }
}
static int64_t num_i64(const bson_value_t *v) {
    return v->value_type == BSON_TYPE_INT32 ? v->value.v_int32 : v->value.v_int64;
}
static double num_dbl(const bson_value_t *v) {
    switch (v->value_type) {
    case BSON_TYPE_INT32: return v->value.v_int32;
    case BSON_TYPE_INT64: return (double)v->value.v_int64;
    case BSON_TYPE_DOUBLE: return v->value.v_double;
    default: return NAN;
    }
}
/* An integer result: int32 while both inputs were int32 and it fits, else int64. */
static void set_int_result(bson_value_t *out, int64_t r, bool both32) {
    if (both32 && r >= INT32_MIN && r <= INT32_MAX)
        set_int32(out, (int32_t)r);
    else
        set_int64(out, r);
}

static int decimal_refused(const char *op, ms_error_t *err) {
    return err_set(err, MS_ERR_NOT_IMPLEMENTED,
                   "%s of decimal128 values is not supported by minishard (no decimal "
                   "arithmetic)", op);
}

int expr_num_add(const bson_value_t *a, const bson_value_t *b, bson_value_t *out,
                 ms_error_t *err) {
    enum num_kind ka = num_kind(a), kb = num_kind(b);
    int64_t r;
    if (ka == N_DECIMAL || kb == N_DECIMAL) return decimal_refused("$add", err);
    if (ka == N_DOUBLE || kb == N_DOUBLE) {
        set_double(out, num_dbl(a) + num_dbl(b));
        return 0;
    }
    if (__builtin_add_overflow(num_i64(a), num_i64(b), &r))
        set_double(out, num_dbl(a) + num_dbl(b));   /* long overflow → double */
    else
        set_int_result(out, r, ka == N_INT32 && kb == N_INT32);
    return 0;
}

static int num_mul(const bson_value_t *a, const bson_value_t *b, bson_value_t *out,
                   ms_error_t *err) {
    enum num_kind ka = num_kind(a), kb = num_kind(b);
    int64_t r;
    if (ka == N_DECIMAL || kb == N_DECIMAL) return decimal_refused("$multiply", err);
    if (ka == N_DOUBLE || kb == N_DOUBLE) {
        set_double(out, num_dbl(a) * num_dbl(b));
        return 0;
    }
    if (__builtin_mul_overflow(num_i64(a), num_i64(b), &r))
        set_double(out, num_dbl(a) * num_dbl(b));
    else
        set_int_result(out, r, ka == N_INT32 && kb == N_INT32);
    return 0;
}

static int num_sub(const bson_value_t *a, const bson_value_t *b, bson_value_t *out,
                   ms_error_t *err) {
    enum num_kind ka = num_kind(a), kb = num_kind(b);
    int64_t r;
    if (ka == N_DECIMAL || kb == N_DECIMAL) return decimal_refused("$subtract", err);
    if (ka == N_DOUBLE || kb == N_DOUBLE) {
        set_double(out, num_dbl(a) - num_dbl(b));
        return 0;
    }
    if (__builtin_sub_overflow(num_i64(a), num_i64(b), &r))
        set_double(out, num_dbl(a) - num_dbl(b));
    else
        set_int_result(out, r, ka == N_INT32 && kb == N_INT32);
    return 0;
}

/* ---- the tree ----------------------------------------------------------------------- */

enum expr_kind { E_CONST, E_PATH, E_OBJ, E_ARR, E_OP };
enum var_kind { V_ROOT, V_CURRENT, V_REMOVE, V_USER };

typedef struct evctx {
    const bson_t *root;
    const expr_vars_t *vars;
} evctx_t;

typedef int (*op_fn)(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err);

typedef struct op_def {
    const char *name;
    int min_args, max_args;   /* max -1 = any */
    op_fn fn;
} op_def_t;

struct expr {
    enum expr_kind kind;
    bson_value_t val;          /* E_CONST */
    enum var_kind var;         /* E_PATH */
    char *var_name;            /* E_PATH with V_USER */
    char *path;                /* E_PATH: dotted path below the variable, NULL = whole */
    const op_def_t *op;        /* E_OP */
    bool obj_form;             /* E_OP: $cond written {if, then, else} */
    expr_t **kids;             /* E_OBJ / E_ARR / E_OP operands */
    char **names;              /* E_OBJ field names */
    int n;
};

static int eval(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err);

void expr_free(expr_t *e) {
    if (!e) return;
    if (e->kind == E_CONST) bson_value_destroy(&e->val);
    free(e->var_name);
    free(e->path);
    for (int i = 0; i < e->n; i++) {
        expr_free(e->kids[i]);
        if (e->names) free(e->names[i]);
    }
    free(e->kids);
    free(e->names);
    free(e);
}

bool expr_is_const(const expr_t *e) {
    if (e->kind == E_CONST) return true;
    if (e->kind == E_PATH) return false;
    for (int i = 0; i < e->n; i++)
        if (!expr_is_const(e->kids[i])) return false;
    return true;
}

/* Evaluates operand i. */
static int arg(const expr_t *e, int i, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    return eval(e->kids[i], c, out, err);
}

/* ---- field paths -------------------------------------------------------------------- */

/* MongoDB's ExpressionFieldPath::evaluatePath: documents by field; an array maps the rest
 * of the path over its document elements, dropping the missing ones. */
static void path_get(const bson_t *doc, const char *path, bson_value_t *out) {
    const char *dot = strchr(path, '.');
    size_t flen = dot ? (size_t)(dot - path) : strlen(path);
    bson_iter_t it;
    char field[MS_EXPR_FIELD_BYTES_MAX];
    set_missing(out);
    if (flen >= sizeof field) return;
    memcpy(field, path, flen);
    field[flen] = '\0';
    if (!bson_iter_init_find(&it, doc, field)) return;
    if (!dot) {
        expr_value_from_iter(&it, out);
        return;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
        bson_t sub;
        if (bsonx_view_container(&it, &sub)) path_get(&sub, dot + 1, out);
    } else if (BSON_ITER_HOLDS_ARRAY(&it)) {
        bson_t arr, res = BSON_INITIALIZER, sub;
        bson_iter_t ai;
        int n = 0;
        char key[16];
        bsonx_view_container(&it, &arr);
        bson_iter_init(&ai, &arr);
        while (bson_iter_next(&ai)) {
            bson_value_t v;
            if (!BSON_ITER_HOLDS_DOCUMENT(&ai) || !bsonx_view_container(&ai, &sub)) continue;
            path_get(&sub, dot + 1, &v);
            if (v.value_type == BSON_TYPE_EOD) continue;
            snprintf(key, sizeof key, "%d", n++);
            bson_append_value(&res, key, -1, &v);
            bson_value_destroy(&v);
        }
        set_container(out, &res, true);
    }
}

static int eval_path(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    const bson_value_t *base;
    bson_t view;
    switch (e->var) {
    case V_REMOVE:
        set_missing(out);
        return 0;
    case V_ROOT:
    case V_CURRENT:
        if (!e->path) {
            bson_t cp;
            bson_init(&cp);
            bson_concat(&cp, c->root);
            set_container(out, &cp, false);
            return 0;
        }
        path_get(c->root, e->path, out);
        return 0;
    case V_USER:
        base = expr_vars_get(c->vars, e->var_name);
        if (!base)
            return err_set(err, MS_ERR_LOC_17276, "Use of undefined variable: %s", e->var_name);
        if (!e->path) {
            if (base->value_type == BSON_TYPE_EOD) set_missing(out);
            else bson_value_copy(base, out);
            return 0;
        }
        if (base->value_type == BSON_TYPE_DOCUMENT && value_view(base, &view)) {
            path_get(&view, e->path, out);
        } else if (base->value_type == BSON_TYPE_ARRAY && value_view(base, &view)) {
            /* wrap the array so path_get's array rule applies to it */
            bson_t w = BSON_INITIALIZER;
            char *p = bson_strdup_printf("a.%s", e->path);
            BSON_APPEND_ARRAY(&w, "a", &view);
            path_get(&w, p, out);
            bson_free(p);
            bson_destroy(&w);
        } else {
            set_missing(out);
        }
        return 0;
    }
    set_missing(out);
    return 0;
}

/* ---- operators ---------------------------------------------------------------------- */

/* Evaluates every operand into vs[0..n) (caller destroys them all on success). */
static int eval_all(const expr_t *e, const evctx_t *c, bson_value_t *vs, ms_error_t *err) {
    for (int i = 0; i < e->n; i++) {
        int rc = arg(e, i, c, &vs[i], err);
        if (rc != 0) {
            while (i-- > 0) bson_value_destroy(&vs[i]);
            return rc;
        }
    }
    return 0;
}
static void destroy_all(bson_value_t *vs, int n) {
    for (int i = 0; i < n; i++) bson_value_destroy(&vs[i]);
}

static int op_add(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t vs[MS_EXPR_ARGS_MAX], acc, date_v = {0};
    bool have_date = false, is_null = false;
    int rc;
    if ((rc = eval_all(e, c, vs, err)) != 0) return rc;
    set_int32(&acc, 0);
    for (int i = 0; i < e->n && rc == 0; i++) {
        const bson_value_t *v = &vs[i];
        if (nullish(v)) {
            is_null = true;
        } else if (v->value_type == BSON_TYPE_DATE_TIME) {
            if (have_date) rc = err_set(err, MS_ERR_LOC_16612, "only one date allowed in an $add expression");
            have_date = true;
            date_v = *v;
        } else if (expr_value_is_number(v)) {
            bson_value_t r;
            if ((rc = expr_num_add(&acc, v, &r, err)) == 0) acc = r;
        } else {
            rc = err_set(err, MS_ERR_LOC_16554, "$add only supports numeric or date types, not %s",
                         type_name(v));
        }
    }
    destroy_all(vs, e->n);
    if (rc != 0) return rc;
    if (is_null) {
        set_null(out);
    } else if (have_date) {
        double d = num_dbl(&acc);
        int64_t ms = date_v.value.v_datetime;
        if (acc.value_type == BSON_TYPE_DOUBLE) ms += (int64_t)llround(d);
        else ms += num_i64(&acc);
        memset(out, 0, sizeof *out);
        out->value_type = BSON_TYPE_DATE_TIME;
        out->value.v_datetime = ms;
    } else {
        *out = acc;
    }
    return 0;
}

static int op_multiply(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t vs[MS_EXPR_ARGS_MAX], acc;
    bool is_null = false;
    int rc;
    if ((rc = eval_all(e, c, vs, err)) != 0) return rc;
    set_int32(&acc, 1);
    for (int i = 0; i < e->n && rc == 0; i++) {
        if (nullish(&vs[i])) {
            is_null = true;
        } else if (expr_value_is_number(&vs[i])) {
            bson_value_t r;
            if ((rc = num_mul(&acc, &vs[i], &r, err)) == 0) acc = r;
        } else {
            rc = err_set(err, MS_ERR_LOC_16555, "$multiply only supports numeric types, not %s",
                         type_name(&vs[i]));
        }
    }
    destroy_all(vs, e->n);
    if (rc != 0) return rc;
    if (is_null) set_null(out);
    else *out = acc;
    return 0;
}

/* Two operands evaluated: a, b (destroy both). */
static int two(const expr_t *e, const evctx_t *c, bson_value_t *a, bson_value_t *b,
               ms_error_t *err) {
    int rc;
    if ((rc = arg(e, 0, c, a, err)) != 0) return rc;
    if ((rc = arg(e, 1, c, b, err)) != 0) {
        bson_value_destroy(a);
        return rc;
    }
    return 0;
}

static int op_subtract(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t a, b;
    int rc;
    if ((rc = two(e, c, &a, &b, err)) != 0) return rc;
    if (nullish(&a) || nullish(&b)) {
        set_null(out);
    } else if (expr_value_is_number(&a) && expr_value_is_number(&b)) {
        rc = num_sub(&a, &b, out, err);
    } else if (a.value_type == BSON_TYPE_DATE_TIME && b.value_type == BSON_TYPE_DATE_TIME) {
        set_int64(out, a.value.v_datetime - b.value.v_datetime);
    } else if (a.value_type == BSON_TYPE_DATE_TIME && expr_value_is_number(&b) &&
               b.value_type != BSON_TYPE_DECIMAL128) {
        int64_t d = b.value_type == BSON_TYPE_DOUBLE ? (int64_t)llround(b.value.v_double)
                                                     : num_i64(&b);
        memset(out, 0, sizeof *out);
        out->value_type = BSON_TYPE_DATE_TIME;
        out->value.v_datetime = a.value.v_datetime - d;
    } else {
        rc = err_set(err, MS_ERR_LOC_16556, "can't $subtract %s from %s", type_name(&b), type_name(&a));
    }
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

static int op_divide(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t a, b;
    int rc;
    if ((rc = two(e, c, &a, &b, err)) != 0) return rc;
    if (expr_value_is_number(&a) && expr_value_is_number(&b)) {
        if (a.value_type == BSON_TYPE_DECIMAL128 || b.value_type == BSON_TYPE_DECIMAL128)
            rc = decimal_refused("$divide", err);
        else if (num_dbl(&b) == 0.0)
            rc = err_set(err, MS_ERR_BAD_VALUE, "can't $divide by zero");
        else
            set_double(out, num_dbl(&a) / num_dbl(&b));
    } else if (nullish(&a) || nullish(&b)) {
        set_null(out);
    } else {
        rc = err_set(err, MS_ERR_LOC_16609, "$divide only supports numeric types, not %s and %s",
                     type_name(&a), type_name(&b));
    }
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

static int op_mod(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t a, b;
    int rc;
    if ((rc = two(e, c, &a, &b, err)) != 0) return rc;
    if (expr_value_is_number(&a) && expr_value_is_number(&b)) {
        enum num_kind ka = num_kind(&a), kb = num_kind(&b);
        if (ka == N_DECIMAL || kb == N_DECIMAL) {
            rc = decimal_refused("$mod", err);
        } else if (num_dbl(&b) == 0.0) {
            rc = err_set(err, MS_ERR_LOC_16610, "can't $mod by zero");
        } else if (ka == N_DOUBLE || kb == N_DOUBLE) {
            set_double(out, fmod(num_dbl(&a), num_dbl(&b)));
        } else {
            int64_t x = num_i64(&a), y = num_i64(&b);
            int64_t r = (y == -1) ? 0 : x % y;   /* INT64_MIN % -1 is undefined in C */
            set_int_result(out, r, ka == N_INT32 && kb == N_INT32);
        }
    } else if (nullish(&a) || nullish(&b)) {
        set_null(out);
    } else {
        rc = err_set(err, MS_ERR_LOC_16611, "$mod only supports numeric types, not %s and %s",
                     type_name(&a), type_name(&b));
    }
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    return rc;
}

/* $abs, $ceil, $floor (MongoDB's ExpressionSingleNumericArg: null → null, 28765). */
static int single_numeric(const expr_t *e, const evctx_t *c, bson_value_t *out,
                          ms_error_t *err, const char *name, double (*dfn)(double)) {
    bson_value_t a;
    int rc;
    if ((rc = arg(e, 0, c, &a, err)) != 0) return rc;
    if (nullish(&a)) {
        set_null(out);
    } else if (!expr_value_is_number(&a)) {
        rc = err_set(err, MS_ERR_LOC_28765, "%s only supports numeric types, not %s", name, type_name(&a));
    } else if (a.value_type == BSON_TYPE_DECIMAL128) {
        rc = decimal_refused(name, err);
    } else if (a.value_type == BSON_TYPE_DOUBLE) {
        set_double(out, dfn(a.value.v_double));
    } else if (dfn == fabs) {
        int64_t v = num_i64(&a);
        if (v == INT64_MIN)
            rc = err_set(err, MS_ERR_LOC_28680, "can't take $abs of long long min");
        else if (a.value_type == BSON_TYPE_INT32 && v == INT32_MIN)
            set_int64(out, -v);
        else
            set_int_result(out, v < 0 ? -v : v, a.value_type == BSON_TYPE_INT32);
    } else {
        *out = a;   /* integers are their own ceiling and floor */
        return 0;
    }
    bson_value_destroy(&a);
    return rc;
}
static int op_abs(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    return single_numeric(e, c, out, err, "$abs", fabs);
}
static int op_ceil(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    return single_numeric(e, c, out, err, "$ceil", ceil);
}
static int op_floor(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    return single_numeric(e, c, out, err, "$floor", floor);
}

/* Comparisons: $cmp, $eq, $ne, $gt, $gte, $lt, $lte (Value::compare). */
static int compare_op(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t a, b;
    const char *n = e->op->name;
    int rc, r;
    if ((rc = two(e, c, &a, &b, err)) != 0) return rc;
    r = expr_value_cmp(&a, &b);
    bson_value_destroy(&a);
    bson_value_destroy(&b);
    if (strcmp(n, "$cmp") == 0) set_int32(out, r < 0 ? -1 : r > 0 ? 1 : 0);
    else if (strcmp(n, "$eq") == 0) set_bool(out, r == 0);
    else if (strcmp(n, "$ne") == 0) set_bool(out, r != 0);
    else if (strcmp(n, "$gt") == 0) set_bool(out, r > 0);
    else if (strcmp(n, "$gte") == 0) set_bool(out, r >= 0);
    else if (strcmp(n, "$lt") == 0) set_bool(out, r < 0);
    else set_bool(out, r <= 0);
    return 0;
}

/* $and / $or short-circuit as MongoDB's do. */
static int op_andor(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bool is_and = strcmp(e->op->name, "$and") == 0;
    for (int i = 0; i < e->n; i++) {
        bson_value_t v;
        bool t;
        int rc = arg(e, i, c, &v, err);
        if (rc != 0) return rc;
        t = expr_value_truthy(&v);
        bson_value_destroy(&v);
        if (is_and && !t) {
            set_bool(out, false);
            return 0;
        }
        if (!is_and && t) {
            set_bool(out, true);
            return 0;
        }
    }
    set_bool(out, is_and);
    return 0;
}

static int op_not(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t v;
    int rc = arg(e, 0, c, &v, err);
    if (rc != 0) return rc;
    set_bool(out, !expr_value_truthy(&v));
    bson_value_destroy(&v);
    return 0;
}

static int op_cond(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t v;
    bool t;
    int rc = arg(e, 0, c, &v, err);
    if (rc != 0) return rc;
    t = expr_value_truthy(&v);
    bson_value_destroy(&v);
    return arg(e, t ? 1 : 2, c, out, err);
}

/* $ifNull: the first operand that is neither null nor missing, else the last. */
static int op_ifnull(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    for (int i = 0; i < e->n - 1; i++) {
        bson_value_t v;
        int rc = arg(e, i, c, &v, err);
        if (rc != 0) return rc;
        if (!nullish(&v)) {
            *out = v;
            return 0;
        }
        bson_value_destroy(&v);
    }
    return arg(e, e->n - 1, c, out, err);
}

static int op_concat(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_string_t *s = bson_string_new(NULL);
    bool is_null = false;
    int rc = 0;
    for (int i = 0; i < e->n && rc == 0; i++) {
        bson_value_t v;
        if ((rc = arg(e, i, c, &v, err)) != 0) break;
        if (nullish(&v))
            is_null = true;
        else if (v.value_type != BSON_TYPE_UTF8)
            rc = err_set(err, MS_ERR_LOC_16702, "$concat only supports strings, not %s", type_name(&v));
        else if (!is_null) {
            if (s->len + v.value.v_utf8.len > MS_EXPR_STRING_BYTES_MAX)
                rc = err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "$concat result exceeds %d bytes",
                             MS_EXPR_STRING_BYTES_MAX);
            else
                bson_string_append_printf(s, "%.*s", (int)v.value.v_utf8.len, v.value.v_utf8.str);
        }
        bson_value_destroy(&v);
    }
    if (rc != 0 || is_null) {
        bson_string_free(s, true);
        if (rc == 0) set_null(out);
        return rc;
    }
    {
        uint32_t len = s->len;
        set_str_owned(out, bson_string_free(s, false), len);
    }
    return 0;
}

/* The shortest decimal text that reads back as d (MongoDB prints doubles this way). */
static void double_text(double d, char *buf, size_t sz) {
    if (isnan(d)) { snprintf(buf, sz, "NaN"); return; }
    if (isinf(d)) { snprintf(buf, sz, d > 0 ? "Infinity" : "-Infinity"); return; }
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sz, "%.*g", p, d);
        if (strtod(buf, NULL) == d) return;
    }
}

static int op_tostring(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t v;
    char buf[64];
    int rc = arg(e, 0, c, &v, err);
    if (rc != 0) return rc;
    buf[0] = '\0';
    switch (v.value_type) {
    case BSON_TYPE_EOD:
    case BSON_TYPE_NULL:
    case BSON_TYPE_UNDEFINED: set_null(out); return 0;
    case BSON_TYPE_UTF8: *out = v; return 0;
    case BSON_TYPE_INT32: snprintf(buf, sizeof buf, "%d", v.value.v_int32); break;
    case BSON_TYPE_INT64: snprintf(buf, sizeof buf, "%lld", (long long)v.value.v_int64); break;
    case BSON_TYPE_DOUBLE: double_text(v.value.v_double, buf, sizeof buf); break;
    case BSON_TYPE_BOOL: snprintf(buf, sizeof buf, "%s", v.value.v_bool ? "true" : "false"); break;
    case BSON_TYPE_OID: bson_oid_to_string(&v.value.v_oid, buf); break;
    case BSON_TYPE_DECIMAL128: bson_decimal128_to_string(&v.value.v_decimal128, buf); break;
    case BSON_TYPE_DATE_TIME: {
        int64_t ms = v.value.v_datetime;
        time_t s = (time_t)(ms >= 0 ? ms / 1000 : (ms - 999) / 1000);
        struct tm tm;
        gmtime_r(&s, &tm);
        snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (int)(ms - (int64_t)s * 1000));
        break;
    }
    default:
        rc = err_set(err, MS_ERR_CONVERSION_FAILURE, "Unsupported conversion from %s to string in $convert with no "
                     "onError value", type_name(&v));
        bson_value_destroy(&v);
        return rc;
    }
    bson_value_destroy(&v);
    set_str_owned(out, bson_strdup(buf), (uint32_t)strlen(buf));
    return 0;
}

/* $toUpper / $toLower: ASCII only, as MongoDB's; null → "". */
static int op_case(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bool upper = strcmp(e->op->name, "$toUpper") == 0;
    bson_value_t v, s;
    int rc = arg(e, 0, c, &v, err);
    if (rc != 0) return rc;
    if (nullish(&v)) {
        bson_value_destroy(&v);
        set_str_owned(out, bson_strdup(""), 0);
        return 0;
    }
    if (v.value_type != BSON_TYPE_UTF8) {
        /* MongoDB coerces numbers and dates to strings here; minishard only strings */
        rc = err_set(err, MS_ERR_LOC_16007, "can't convert from BSON type %s to String", type_name(&v));
        bson_value_destroy(&v);
        return rc;
    }
    s = v;
    for (uint32_t i = 0; i < s.value.v_utf8.len; i++) {
        char *p = &s.value.v_utf8.str[i];
        *p = upper ? (char)toupper((unsigned char)*p) : (char)tolower((unsigned char)*p);
    }
    *out = s;
    return 0;
}

static int op_size(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t v;
    bson_t arr;
    int rc = arg(e, 0, c, &v, err);
    if (rc != 0) return rc;
    if (v.value_type != BSON_TYPE_ARRAY || !value_view(&v, &arr)) {
        rc = err_set(err, MS_ERR_LOC_17124, "The argument to $size must be an array. Type of argument: %s",
                     type_name(&v));
    } else {
        set_int32(out, (int32_t)bson_count_keys(&arr));
    }
    bson_value_destroy(&v);
    return rc;
}

static int op_in(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t x, a;
    bson_t arr;
    bson_iter_t it;
    bool found = false;
    int rc;
    if ((rc = two(e, c, &x, &a, err)) != 0) return rc;
    if (a.value_type != BSON_TYPE_ARRAY || !value_view(&a, &arr)) {
        rc = err_set(err, MS_ERR_LOC_40081, "$in requires an array as a second argument, found: %s",
                     type_name(&a));
    } else {
        bson_iter_init(&it, &arr);
        while (!found && bson_iter_next(&it)) {
            bson_value_t el;
            expr_value_from_iter(&it, &el);
            found = expr_value_cmp(&x, &el) == 0;
            bson_value_destroy(&el);
        }
        set_bool(out, found);
    }
    bson_value_destroy(&x);
    bson_value_destroy(&a);
    return rc;
}

static int op_elem_at(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t a, i;
    bson_t arr;
    int rc;
    if ((rc = two(e, c, &a, &i, err)) != 0) return rc;
    if (nullish(&a) || nullish(&i)) {
        set_null(out);
    } else if (a.value_type != BSON_TYPE_ARRAY || !value_view(&a, &arr)) {
        rc = err_set(err, MS_ERR_LOC_28689, "$arrayElemAt's first argument must be an array, but is %s",
                     type_name(&a));
    } else if (!expr_value_is_number(&i)) {
        rc = err_set(err, MS_ERR_LOC_28690, "$arrayElemAt's second argument must be a numeric value, but "
                     "is %s", type_name(&i));
    } else {
        double d = i.value_type == BSON_TYPE_DECIMAL128 ? NAN : num_dbl(&i);
        if (!(d == floor(d) && d >= INT32_MIN && d <= INT32_MAX)) {
            rc = err_set(err, MS_ERR_LOC_28691, "$arrayElemAt's second argument must be representable as "
                         "a 32-bit integer");
        } else {
            int64_t n = (int64_t)bson_count_keys(&arr), k = (int64_t)d;
            bson_iter_t it;
            char key[16];
            if (k < 0) k += n;
            set_missing(out);
            snprintf(key, sizeof key, "%lld", (long long)k);
            if (k >= 0 && k < n && bson_iter_init_find(&it, &arr, key))
                expr_value_from_iter(&it, out);
        }
    }
    bson_value_destroy(&a);
    bson_value_destroy(&i);
    return rc;
}

static int op_isnumber(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    bson_value_t v;
    int rc = arg(e, 0, c, &v, err);
    if (rc != 0) return rc;
    set_bool(out, expr_value_is_number(&v));
    bson_value_destroy(&v);
    return 0;
}

static int op_literal(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    (void)e; (void)c; (void)out;
    return err_set(err, MS_ERR_INTERNAL, "$literal is folded at parse time");
}

static const op_def_t OPS[] = {
    {"$abs", 1, 1, op_abs},          {"$add", 0, -1, op_add},
    {"$and", 0, -1, op_andor},       {"$arrayElemAt", 2, 2, op_elem_at},
    {"$ceil", 1, 1, op_ceil},        {"$cmp", 2, 2, compare_op},
    {"$concat", 0, -1, op_concat},   {"$cond", 3, 3, op_cond},
    {"$divide", 2, 2, op_divide},    {"$eq", 2, 2, compare_op},
    {"$floor", 1, 1, op_floor},      {"$gt", 2, 2, compare_op},
    {"$gte", 2, 2, compare_op},      {"$ifNull", 2, -1, op_ifnull},
    {"$in", 2, 2, op_in},            {"$isNumber", 1, 1, op_isnumber},
    {"$literal", 1, 1, op_literal},  {"$lt", 2, 2, compare_op},
    {"$lte", 2, 2, compare_op},      {"$mod", 2, 2, op_mod},
    {"$multiply", 0, -1, op_multiply}, {"$ne", 2, 2, compare_op},
    {"$not", 1, 1, op_not},          {"$or", 0, -1, op_andor},
    {"$size", 1, 1, op_size},        {"$subtract", 2, 2, op_subtract},
    {"$toLower", 1, 1, op_case},     {"$toString", 1, 1, op_tostring},
    {"$toUpper", 1, 1, op_case},
};

static const op_def_t *op_find(const char *name) {
    for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
        if (strcmp(OPS[i].name, name) == 0) return &OPS[i];
    return NULL;
}

/* ---- evaluation --------------------------------------------------------------------- */

static int eval(const expr_t *e, const evctx_t *c, bson_value_t *out, ms_error_t *err) {
    switch (e->kind) {
    case E_CONST:
        if (e->val.value_type == BSON_TYPE_EOD) set_missing(out);
        else bson_value_copy(&e->val, out);
        return 0;
    case E_PATH:
        return eval_path(e, c, out, err);
    case E_OBJ: {
        bson_t d = BSON_INITIALIZER;
        for (int i = 0; i < e->n; i++) {
            bson_value_t v;
            int rc = eval(e->kids[i], c, &v, err);
            if (rc != 0) {
                bson_destroy(&d);
                return rc;
            }
            expr_value_append(&d, e->names[i], &v);   /* missing fields are left out */
            bson_value_destroy(&v);
        }
        set_container(out, &d, false);
        return 0;
    }
    case E_ARR: {
        bson_t a = BSON_INITIALIZER;
        char key[16];
        for (int i = 0; i < e->n; i++) {
            bson_value_t v;
            int rc = eval(e->kids[i], c, &v, err);
            if (rc != 0) {
                bson_destroy(&a);
                return rc;
            }
            snprintf(key, sizeof key, "%d", i);
            if (v.value_type == BSON_TYPE_EOD) BSON_APPEND_NULL(&a, key);   /* as MongoDB */
            else bson_append_value(&a, key, -1, &v);
            bson_value_destroy(&v);
        }
        set_container(out, &a, true);
        return 0;
    }
    case E_OP:
        return e->op->fn(e, c, out, err);
    }
    return err_set(err, MS_ERR_INTERNAL, "bad expression node");
}

int expr_eval(const expr_t *e, const bson_t *root, const expr_vars_t *vars, bson_value_t *out,
              ms_error_t *err) {
    evctx_t c = {root, vars};
    bson_value_t v;
    int rc = eval(e, &c, &v, err);
    if (rc == 0) *out = v;
    return rc;
}

/* ---- parsing ------------------------------------------------------------------------ */

static expr_t *node_new(enum expr_kind k) {
    expr_t *e = calloc(1, sizeof *e);
    if (e) e->kind = k;
    return e;
}

static int add_kid(expr_t *e, expr_t *kid, const char *name, ms_error_t *err) {
    expr_t **nk = realloc(e->kids, (size_t)(e->n + 1) * sizeof *nk);
    if (!nk) {
        expr_free(kid);
        return err_set(err, MS_ERR_INTERNAL, "out of memory");
    }
    e->kids = nk;
    if (name) {
        char **nn = realloc(e->names, (size_t)(e->n + 1) * sizeof *nn);
        if (!nn) {
            expr_free(kid);
            return err_set(err, MS_ERR_INTERNAL, "out of memory");
        }
        e->names = nn;
        e->names[e->n] = strdup(name);
    }
    e->kids[e->n++] = kid;
    return 0;
}

/* Checks a dotted field path below $ / $$var: no empty component, none starting '$'. */
static int check_path(const char *p, ms_error_t *err) {
    const char *s = p;
    if (strlen(p) >= MS_EXPR_FIELD_BYTES_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "field path too long (max %d bytes)",
                       MS_EXPR_FIELD_BYTES_MAX - 1);
    for (;;) {
        const char *dot = strchr(s, '.');
        size_t len = dot ? (size_t)(dot - s) : strlen(s);
        if (len == 0)
            return err_set(err, MS_ERR_LOC_15998, "FieldPath field names may not be empty strings.");
        if (s[0] == '$')
            return err_set(err, MS_ERR_LOC_16410, "FieldPath field names may not start with '$'. Consider "
                           "using $getField or $setField.");
        if (!dot) return 0;
        s = dot + 1;
    }
}

static int parse_string(const char *s, const expr_vars_t *vars, expr_t **out, ms_error_t *err) {
    expr_t *e;
    int rc;
    if (s[0] != '$') {
        bson_value_t v;
        v.value_type = BSON_TYPE_UTF8;
        v.value.v_utf8.str = (char *)s;
        v.value.v_utf8.len = (uint32_t)strlen(s);
        if (!(e = node_new(E_CONST))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
        bson_value_copy(&v, &e->val);
        *out = e;
        return 0;
    }
    if (!(e = node_new(E_PATH))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    if (s[1] != '$') {
        if (s[1] == '\0') {
            expr_free(e);
            return err_set(err, MS_ERR_LOC_40352, "FieldPath cannot be constructed with empty string");
        }
        if ((rc = check_path(s + 1, err)) != 0) {
            expr_free(e);
            return rc;
        }
        e->var = V_CURRENT;
        e->path = strdup(s + 1);
    } else {
        const char *name = s + 2, *dot = strchr(name, '.');
        size_t nlen = dot ? (size_t)(dot - name) : strlen(name);
        char *vn = strndup(name, nlen);
        if (dot && (rc = check_path(dot + 1, err)) != 0) {
            free(vn);
            expr_free(e);
            return rc;
        }
        if (dot) e->path = strdup(dot + 1);
        if (strcmp(vn, "ROOT") == 0) {
            e->var = V_ROOT;
        } else if (strcmp(vn, "CURRENT") == 0) {
            e->var = V_CURRENT;
        } else if (strcmp(vn, "REMOVE") == 0) {
            e->var = V_REMOVE;
        } else {
            if ((rc = check_var_name(vn, err)) != 0 ||
                (vars_index(vars, vn) < 0 &&
                 (rc = err_set(err, MS_ERR_LOC_17276, "Use of undefined variable: %s", vn)) != 0)) {
                free(vn);
                expr_free(e);
                return rc;
            }
            e->var = V_USER;
            e->var_name = vn;
            vn = NULL;
        }
        free(vn);
    }
    *out = e;
    return 0;
}

static int parse_depth(const bson_iter_t *it, const expr_vars_t *vars, int depth, expr_t **out,
                       ms_error_t *err);

/* $cond's object form {if, then, else}: all three required (17080), nothing else (17083). */
static int parse_cond_obj(bson_iter_t *ci, const expr_vars_t *vars, int depth, expr_t *e,
                          ms_error_t *err) {
    static const char *const names[3] = {"if", "then", "else"};
    expr_t *parts[3] = {NULL, NULL, NULL};
    int rc = 0;
    while (rc == 0 && bson_iter_next(ci)) {
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(bson_iter_key(ci), names[i]) == 0) k = i;
        if (k < 0) {
            rc = err_set(err, MS_ERR_LOC_17083, "Unrecognized parameter to $cond: %s", bson_iter_key(ci));
            break;
        }
        expr_free(parts[k]);
        parts[k] = NULL;
        rc = parse_depth(ci, vars, depth + 1, &parts[k], err);
    }
    for (int i = 0; rc == 0 && i < 3; i++)
        if (!parts[i]) rc = err_set(err, MS_ERR_LOC_17080, "Missing '%s' parameter to $cond", names[i]);
    for (int i = 0; i < 3; i++) {
        if (rc == 0) {
            rc = add_kid(e, parts[i], NULL, err);
            parts[i] = NULL;
        }
        expr_free(parts[i]);
    }
    e->obj_form = true;
    return rc;
}

static int parse_op(const bson_iter_t *it, const char *name, const expr_vars_t *vars, int depth,
                    expr_t **out, ms_error_t *err) {
    const op_def_t *op = op_find(name);
    expr_t *e;
    int rc = 0;
    if (!op)
        return err_set(err, MS_ERR_INVALID_PIPELINE_OPERATOR, "Unrecognized expression '%s'", name);
    if (strcmp(name, "$literal") == 0) {
        if (!(e = node_new(E_CONST))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
        expr_value_from_iter(it, &e->val);
        *out = e;
        return 0;
    }
    if (!(e = node_new(E_OP))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    e->op = op;
    if (strcmp(name, "$cond") == 0 && BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t ci;
        bson_iter_recurse(it, &ci);
        rc = parse_cond_obj(&ci, vars, depth, e, err);
    } else if (BSON_ITER_HOLDS_ARRAY(it)) {
        bson_iter_t ai;
        bson_iter_recurse(it, &ai);
        while (rc == 0 && bson_iter_next(&ai)) {
            expr_t *kid = NULL;
            if (e->n >= MS_EXPR_ARGS_MAX) {
                rc = err_set(err, MS_ERR_BAD_VALUE, "Expression %s takes at most %d arguments "
                             "in minishard", name, MS_EXPR_ARGS_MAX);
                break;
            }
            if ((rc = parse_depth(&ai, vars, depth + 1, &kid, err)) == 0)
                rc = add_kid(e, kid, NULL, err);
        }
    } else {
        expr_t *kid = NULL;
        if ((rc = parse_depth(it, vars, depth + 1, &kid, err)) == 0)
            rc = add_kid(e, kid, NULL, err);
    }
    if (rc == 0 && (e->n < op->min_args || (op->max_args >= 0 && e->n > op->max_args))) {
        if (op->min_args == op->max_args)
            rc = err_set(err, MS_ERR_LOC_16020, "Expression %s takes exactly %d arguments. %d were passed "
                         "in.", name, op->min_args, e->n);
        else
            rc = err_set(err, MS_ERR_LOC_16021, "Expression %s takes at least %d arguments, and at most %d. "
                         "%d were passed in.", name, op->min_args, op->max_args, e->n);
    }
    if (rc != 0) {
        expr_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

static int parse_depth(const bson_iter_t *it, const expr_vars_t *vars, int depth, expr_t **out,
                       ms_error_t *err) {
    expr_t *e;
    int rc = 0;
    if (depth > MS_EXPR_DEPTH_MAX)
        return err_set(err, MS_ERR_OVERFLOW, "expression nested deeper than %d levels",
                       MS_EXPR_DEPTH_MAX);
    if (BSON_ITER_HOLDS_UTF8(it)) return parse_string(bson_iter_utf8(it, NULL), vars, out, err);
    if (BSON_ITER_HOLDS_ARRAY(it)) {
        bson_iter_t ai;
        if (!(e = node_new(E_ARR))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
        bson_iter_recurse(it, &ai);
        while (rc == 0 && bson_iter_next(&ai)) {
            expr_t *kid = NULL;
            if ((rc = parse_depth(&ai, vars, depth + 1, &kid, err)) == 0)
                rc = add_kid(e, kid, NULL, err);
        }
        if (rc != 0) {
            expr_free(e);
            return rc;
        }
        *out = e;
        return 0;
    }
    if (BSON_ITER_HOLDS_DOCUMENT(it)) {
        bson_iter_t di;
        int nfields = 0;
        bool first_op = false;
        bson_iter_recurse(it, &di);
        while (bson_iter_next(&di)) {
            if (nfields == 0) first_op = bson_iter_key(&di)[0] == '$';
            nfields++;
        }
        bson_iter_recurse(it, &di);
        if (first_op) {
            bson_iter_next(&di);
            if (nfields > 1)
                return err_set(err, MS_ERR_LOC_15983, "an expression specification must contain exactly "
                               "one field, the name of the expression. Found %d fields",
                               nfields);
            return parse_op(&di, bson_iter_key(&di), vars, depth, out, err);
        }
        if (!(e = node_new(E_OBJ))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
        while (rc == 0 && bson_iter_next(&di)) {
            const char *k = bson_iter_key(&di);
            expr_t *kid = NULL;
            if (k[0] == '$')
                rc = err_set(err, MS_ERR_LOC_16404, "a field name may not start with '$' in an object "
                             "expression: %s (operators must be alone in their object)", k);
            else if (strchr(k, '.'))
                rc = err_set(err, MS_ERR_LOC_16412, "FieldPath field names may not contain '.': %s", k);
            else if ((rc = parse_depth(&di, vars, depth + 1, &kid, err)) == 0)
                rc = add_kid(e, kid, k, err);
        }
        if (rc != 0) {
            expr_free(e);
            return rc;
        }
        *out = e;
        return 0;
    }
    if (!(e = node_new(E_CONST))) return err_set(err, MS_ERR_INTERNAL, "out of memory");
    expr_value_from_iter(it, &e->val);
    *out = e;
    return 0;
}

int expr_parse(const bson_iter_t *it, const expr_vars_t *vars, expr_t **out, ms_error_t *err) {
    expr_t *e = NULL;
    int rc = parse_depth(it, vars, 0, &e, err);
    if (rc == 0) *out = e;
    return rc;
}

/* ---- serialisation ------------------------------------------------------------------ */

void expr_append(const expr_t *e, bson_t *dst, const char *key) {
    switch (e->kind) {
    case E_CONST:
        if (e->val.value_type == BSON_TYPE_UTF8 && e->val.value.v_utf8.str[0] == '$') {
            bson_t lit;
            BSON_APPEND_DOCUMENT_BEGIN(dst, key, &lit);
            bson_append_value(&lit, "$literal", -1, &e->val);
            bson_append_document_end(dst, &lit);
        } else if (e->val.value_type == BSON_TYPE_EOD) {
            BSON_APPEND_UTF8(dst, key, "$$REMOVE");
        } else {
            bson_append_value(dst, key, -1, &e->val);
        }
        return;
    case E_PATH: {
        const char *base = e->var == V_ROOT ? "$$ROOT" : e->var == V_REMOVE ? "$$REMOVE"
                           : e->var == V_USER ? NULL : (e->path ? NULL : "$$CURRENT");
        char *s;
        if (e->var == V_USER)
            s = e->path ? bson_strdup_printf("$$%s.%s", e->var_name, e->path)
                        : bson_strdup_printf("$$%s", e->var_name);
        else if (e->var == V_CURRENT && e->path)
            s = bson_strdup_printf("$%s", e->path);
        else
            s = e->path ? bson_strdup_printf("%s.%s", base, e->path) : bson_strdup(base);
        BSON_APPEND_UTF8(dst, key, s);
        bson_free(s);
        return;
    }
    case E_OBJ: {
        bson_t d;
        BSON_APPEND_DOCUMENT_BEGIN(dst, key, &d);
        for (int i = 0; i < e->n; i++) expr_append(e->kids[i], &d, e->names[i]);
        bson_append_document_end(dst, &d);
        return;
    }
    case E_ARR:
    case E_OP: {
        bson_t d, a;
        char k[16];
        if (e->kind == E_OP) BSON_APPEND_DOCUMENT_BEGIN(dst, key, &d);
        if (e->kind == E_OP && e->obj_form) {
            bson_t o;
            BSON_APPEND_DOCUMENT_BEGIN(&d, e->op->name, &o);
            expr_append(e->kids[0], &o, "if");
            expr_append(e->kids[1], &o, "then");
            expr_append(e->kids[2], &o, "else");
            bson_append_document_end(&d, &o);
            bson_append_document_end(dst, &d);
            return;
        }
        if (e->kind == E_OP) BSON_APPEND_ARRAY_BEGIN(&d, e->op->name, &a);
        else BSON_APPEND_ARRAY_BEGIN(dst, key, &a);
        for (int i = 0; i < e->n; i++) {
            snprintf(k, sizeof k, "%d", i);
            expr_append(e->kids[i], &a, k);
        }
        if (e->kind == E_OP) {
            bson_append_array_end(&d, &a);
            bson_append_document_end(dst, &d);
        } else {
            bson_append_array_end(dst, &a);
        }
        return;
    }
    }
}
