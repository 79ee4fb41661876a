/*
 * regex.c — a linear-time regular-expression engine for the query language (see
 * regex.h), linked into every process through common/query.c.
 *
 * Three stages, each with a bound:
 *   parse    pattern → syntax tree (nodes in one array). Recursive descent that recurses
 *            once per group level, so its depth is bounded by MS_REGEX_NEST_MAX; the tree
 *            is at most a few nodes per pattern byte.
 *   size     each node's program size is computed bottom-up with saturating arithmetic,
 *            BEFORE anything is expanded: (a{1,700}){1,700} is refused by multiplying
 *            two numbers, not by generating a million instructions.
 *   emit     tree → program (instructions CHAR ANY CLASS ASSERT SPLIT JMP MATCH), the
 *            classic Thompson construction; counted repetition copies its operand.
 *
 * Matching is Thompson's NFA simulation (Russ Cox, "Regular Expression Matching Can Be
 * Simple And Fast"): the set of live program counters is advanced one character at a
 * time; a state is added at most once per position (a generation mark), so each
 * position costs at most the program size, whatever the pattern. A new thread starts
 * at every position (an unanchored search) unless the pattern begins with \A or ^.
 * Since only match/no-match is needed there are no captures, and lazy quantifiers
 * compile like greedy ones.
 *
 * Characters are Unicode code points decoded from UTF-8. \d \w \s \b are ASCII (PCRE
 * without UCP, as MongoDB builds it); case-insensitivity folds simple one-to-one pairs
 * of ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (rx_other_case).
 */
#include "common/regex.h"

#include <bson/bson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"

#define RX_INF UINT32_MAX          /* no upper bound in {n,} * + */
#define RX_CP_MAX 0x10FFFFu
#define RX_BAD_BYTE_BASE 0xDC00u   /* an invalid UTF-8 byte b reads as U+DC00+b (a lone
                                      surrogate: no valid character compares equal) */

/* ------------------------------------------------------------------------------------ */
/* Program                                                                               */

enum rx_op { OP_CHAR, OP_ANY, OP_CLASS, OP_ASSERT, OP_SPLIT, OP_JMP, OP_MATCH };

enum rx_assert {
    A_BOT,      /* \A, ^ without m, \G: start of subject */
    A_BOL,      /* ^ with m: start, or after a newline that is not the last character */
    A_EOT,      /* \z: end of subject */
    A_EOTNL,    /* \Z, $ without m: end, or before a newline that is the last character */
    A_EOL,      /* $ with m: end, or before any newline */
    A_WORDB,    /* \b */
    A_NWORDB,   /* \B */
};

typedef struct rx_inst {
    uint8_t op;
    uint8_t arg;      /* OP_CHAR: case-insensitive; OP_ANY: dot-all; OP_ASSERT: kind */
    uint32_t x, y;    /* OP_CHAR: code point; OP_CLASS: class index; SPLIT: x, y; JMP: x */
} rx_inst_t;

typedef struct rx_range {
    uint32_t lo, hi;
} rx_range_t;

/* A bracket expression or class escape. The bitmap answers for ASCII with negation and
 * case folding already applied; other code points search the ranges. */
typedef struct rx_class {
    uint32_t first, n;   /* ranges[first .. first+n), sorted, disjoint */
    bool negated, icase;
    uint8_t ascii[16];
} rx_class_t;

struct rx {
    rx_inst_t *prog;
    uint32_t ninst;
    rx_class_t *classes;
    uint32_t nclasses;
    rx_range_t *ranges;
    uint32_t nranges;
    bool anchored;       /* every match starts at offset 0 */
    bool skip;           /* a match must start with a byte in first_set (so, not empty) */
    int first_byte;      /* ... and when that set has one byte, it (else -1) */
    uint8_t first_set[32];
};

/* ------------------------------------------------------------------------------------ */
/* Characters                                                                            */

/* Decodes one code point at s[*i] (s has len bytes) and advances *i. Invalid UTF-8 reads
 * one byte as RX_BAD_BYTE_BASE + byte. */
static uint32_t utf8_next(const uint8_t *s, size_t len, size_t *i) {
    uint8_t b = s[*i];
    uint32_t c, min;
    int extra;
    if (b < 0x80) { (*i)++; return b; }
    if (b >= 0xC2 && b <= 0xDF) { c = b & 0x1Fu; extra = 1; min = 0x80; }
    else if (b >= 0xE0 && b <= 0xEF) { c = b & 0x0Fu; extra = 2; min = 0x800; }
    else if (b >= 0xF0 && b <= 0xF4) { c = b & 0x07u; extra = 3; min = 0x10000; }
    else goto bad;
    if (len - *i <= (size_t)extra) goto bad;
    for (int k = 1; k <= extra; k++) {
        uint8_t cb = s[*i + (size_t)k];
        if ((cb & 0xC0) != 0x80) goto bad;
        c = (c << 6) | (cb & 0x3Fu);
    }
    if (c < min || c > RX_CP_MAX || (c >= 0xD800 && c <= 0xDFFF)) goto bad;
    *i += (size_t)extra + 1;
    return c;
bad:
    (*i)++;
    return RX_BAD_BYTE_BASE + b;
}

/* The other case of c in a simple one-to-one pair, or c itself. */
static uint32_t rx_other_case(uint32_t c) {
    if (c < 0x80) {
        if (c >= 'a' && c <= 'z') return c - 32;
        if (c >= 'A' && c <= 'Z') return c + 32;
        return c;
    }
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;            /* Latin-1 */
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 0x20;
    if (c == 0xFF) return 0x178;
    if (c == 0x178) return 0xFF;
    if ((c >= 0x100 && c <= 0x12F) || (c >= 0x132 && c <= 0x137) ||      /* Latin Ext-A */
        (c >= 0x14A && c <= 0x177))
        return c ^ 1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E))
        return (c & 1u) ? c + 1 : c - 1;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;          /* Greek */
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
    if (c == 0x386) return 0x3AC;
    if (c == 0x3AC) return 0x386;
    if (c >= 0x388 && c <= 0x38A) return c + 0x25;
    if (c >= 0x3AD && c <= 0x3AF) return c - 0x25;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x3CC) return 0x38C;
    if (c >= 0x38E && c <= 0x38F) return c + 0x3F;
    if (c >= 0x3CD && c <= 0x3CE) return c - 0x3F;
    if (c >= 0x410 && c <= 0x42F) return c + 0x20;                        /* Cyrillic */
    if (c >= 0x430 && c <= 0x44F) return c - 0x20;
    if (c >= 0x400 && c <= 0x40F) return c + 0x50;
    if (c >= 0x450 && c <= 0x45F) return c - 0x50;
    return c;
}

static bool is_word_byte(uint8_t b) {
    return (b >= '0' && b <= '9') || (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || b == '_';
}

static bool ranges_contain(const rx_range_t *r, uint32_t n, uint32_t c) {
    uint32_t lo = 0, hi = n;
    while (lo < hi) {   /* sorted and disjoint: binary search */
        uint32_t mid = lo + (hi - lo) / 2;
        if (c < r[mid].lo) hi = mid;
        else if (c > r[mid].hi) lo = mid + 1;
        else return true;
    }
    return false;
}

static bool class_match(const rx_t *rx, const rx_class_t *cl, uint32_t c) {
    if (c < 0x80) return (cl->ascii[c >> 3] >> (c & 7)) & 1;
    const rx_range_t *r = rx->ranges + cl->first;
    bool in = ranges_contain(r, cl->n, c);
    if (!in && cl->icase) {
        uint32_t o = rx_other_case(c);
        in = o != c && ranges_contain(r, cl->n, o);
    }
    return in != cl->negated;
}

/* ------------------------------------------------------------------------------------ */
/* Syntax tree                                                                           */

enum nkind { N_EMPTY, N_CHAR, N_ANY, N_CLASS, N_ASSERT, N_CAT, N_ALT, N_REPEAT };

typedef struct rnode {
    uint8_t kind;
    uint8_t arg;          /* as rx_inst_t.arg */
    uint32_t a, b;        /* N_CHAR: code point; N_CLASS: class; N_REPEAT: min, max */
    int32_t kid, next;    /* first child (CAT, ALT, REPEAT) and next sibling; -1: none */
    uint32_t size;        /* instructions it emits, saturated at MS_REGEX_INSTS_MAX + 1 */
} rnode_t;

#define NO_NODE (-1)

typedef struct parser {
    const uint8_t *s;
    size_t i, n;
    unsigned flags;       /* RX_* in effect here (inline (?i) changes them per group) */
    int depth;
    bool in_quote;        /* inside \Q...\E */
    rnode_t *nodes;
    size_t nnodes, cap_nodes;
    rx_class_t *classes;
    size_t nclasses, cap_classes;
    rx_range_t *ranges;   /* every class's ranges, one after the other */
    size_t nranges, cap_ranges;
    rx_range_t *tmp;      /* the class being built */
    size_t ntmp, cap_tmp;
    ms_error_t *err;
    int rc;
} parser_t;

static int p_fail(parser_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records the first error: "Regular expression is invalid: <what> at offset N". */
static int p_fail(parser_t *p, const char *fmt, ...) {
    if (p->rc) return p->rc;
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    p->rc = err_set(p->err, MS_ERR_BAD_VALUE, "Regular expression is invalid: %s at offset %zu",
                    what, p->i);
    return p->rc;
}

#define GROW(arr, count, cap)                                                         \
    do {                                                                              \
        if ((count) == (cap)) {                                                       \
            (cap) = (cap) ? (cap) * 2 : 16;                                           \
            (arr) = bson_realloc((arr), sizeof *(arr) * (cap));                       \
        }                                                                             \
    } while (0)

static int32_t node_new(parser_t *p, enum nkind kind, uint8_t arg, uint32_t a, uint32_t b) {
    GROW(p->nodes, p->nnodes, p->cap_nodes);
    rnode_t *nd = &p->nodes[p->nnodes];
    memset(nd, 0, sizeof *nd);
    nd->kind = (uint8_t)kind;
    nd->arg = arg;
    nd->a = a;
    nd->b = b;
    nd->kid = nd->next = NO_NODE;
    return (int32_t)p->nnodes++;
}

/* Adds kid as the last child of a CAT or ALT node (last = its current last child). */
static void node_append(parser_t *p, int32_t parent, int32_t *last, int32_t kid) {
    if (*last == NO_NODE) p->nodes[parent].kid = kid;
    else p->nodes[*last].next = kid;
    *last = kid;
}

/* ---- character classes ---- */

static void tmp_add(parser_t *p, uint32_t lo, uint32_t hi) {
    GROW(p->tmp, p->ntmp, p->cap_tmp);
    p->tmp[p->ntmp].lo = lo;
    p->tmp[p->ntmp].hi = hi;
    p->ntmp++;
}

static int range_cmp(const void *a, const void *b) {
    const rx_range_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorts and merges tmp[from..] in place. */
static void tmp_normalize(parser_t *p, size_t from) {
    size_t n = p->ntmp - from, o = 0;
    rx_range_t *r = p->tmp + from;
    if (n == 0) return;
    qsort(r, n, sizeof *r, range_cmp);
    for (size_t k = 1; k < n; k++) {
        if (r[k].lo <= r[o].hi + 1) {
            if (r[k].hi > r[o].hi) r[o].hi = r[k].hi;
        } else {
            r[++o] = r[k];
        }
    }
    p->ntmp = from + o + 1;
}

/* Replaces tmp[from..] by its complement over 0..RX_CP_MAX (and the invalid-byte range). */
static void tmp_complement(parser_t *p, size_t from) {
    tmp_normalize(p, from);
    size_t n = p->ntmp - from;
    rx_range_t *old = bson_malloc(sizeof *old * (n ? n : 1));
    memcpy(old, p->tmp + from, sizeof *old * n);
    p->ntmp = from;
    uint32_t next = 0;
    for (size_t k = 0; k < n; k++) {
        if (old[k].lo > next) tmp_add(p, next, old[k].lo - 1);
        next = old[k].hi + 1;
    }
    if (next <= RX_CP_MAX) tmp_add(p, next, RX_CP_MAX);
    bson_free(old);
}

/* The ranges of a class escape letter (d w s h v, lower case) into tmp. */
static void tmp_add_escape_class(parser_t *p, char letter) {
    switch (letter) {
    case 'd': tmp_add(p, '0', '9'); break;
    case 'w': tmp_add(p, '0', '9'); tmp_add(p, 'A', 'Z'); tmp_add(p, '_', '_'); tmp_add(p, 'a', 'z'); break;
    case 's': tmp_add(p, 9, 13); tmp_add(p, ' ', ' '); break;
    case 'h':
        tmp_add(p, 9, 9); tmp_add(p, ' ', ' '); tmp_add(p, 0xA0, 0xA0); tmp_add(p, 0x1680, 0x1680);
        tmp_add(p, 0x180E, 0x180E); tmp_add(p, 0x2000, 0x200A); tmp_add(p, 0x202F, 0x202F);
        tmp_add(p, 0x205F, 0x205F); tmp_add(p, 0x3000, 0x3000);
        break;
    case 'v': tmp_add(p, 10, 13); tmp_add(p, 0x85, 0x85); tmp_add(p, 0x2028, 0x2029); break;
    default: break;
    }
}

/* Adds a class escape (\d, \D, ...) or POSIX class to tmp: its own ranges, or their
 * complement for the negated forms. */
static void tmp_add_set(parser_t *p, void (*add)(parser_t *, const char *), const char *arg,
                        bool negate) {
    size_t from = p->ntmp;
    add(p, arg);
    if (negate) tmp_complement(p, from);
}

static void add_escape_fn(parser_t *p, const char *letter) { tmp_add_escape_class(p, letter[0]); }

/* POSIX [:name:] classes (ASCII, as PCRE without UCP). False for an unknown name. */
static bool posix_class_known(const char *name) {
    static const char *const names[] = {"alpha", "digit", "alnum", "space", "upper", "lower",
                                        "punct", "print", "graph", "cntrl", "xdigit", "blank",
                                        "word", "ascii", NULL};
    for (int k = 0; names[k]; k++)
        if (strcmp(name, names[k]) == 0) return true;
    return false;
}

static void add_posix_fn(parser_t *p, const char *name) {
    if (!strcmp(name, "alpha")) { tmp_add(p, 'A', 'Z'); tmp_add(p, 'a', 'z'); }
    else if (!strcmp(name, "digit")) tmp_add(p, '0', '9');
    else if (!strcmp(name, "alnum")) { tmp_add(p, '0', '9'); tmp_add(p, 'A', 'Z'); tmp_add(p, 'a', 'z'); }
    else if (!strcmp(name, "space")) { tmp_add(p, 9, 13); tmp_add(p, ' ', ' '); }
    else if (!strcmp(name, "upper")) tmp_add(p, 'A', 'Z');
    else if (!strcmp(name, "lower")) tmp_add(p, 'a', 'z');
    else if (!strcmp(name, "punct")) { tmp_add(p, '!', '/'); tmp_add(p, ':', '@'); tmp_add(p, '[', '`'); tmp_add(p, '{', '~'); }
    else if (!strcmp(name, "print")) tmp_add(p, ' ', '~');
    else if (!strcmp(name, "graph")) tmp_add(p, '!', '~');
    else if (!strcmp(name, "cntrl")) { tmp_add(p, 0, 31); tmp_add(p, 127, 127); }
    else if (!strcmp(name, "xdigit")) { tmp_add(p, '0', '9'); tmp_add(p, 'A', 'F'); tmp_add(p, 'a', 'f'); }
    else if (!strcmp(name, "blank")) { tmp_add(p, 9, 9); tmp_add(p, ' ', ' '); }
    else if (!strcmp(name, "word")) add_escape_fn(p, "w");
    else if (!strcmp(name, "ascii")) tmp_add(p, 0, 127);
}

/* Turns tmp (all of it) into a new class; returns its index. */
static uint32_t class_finish(parser_t *p, bool negated) {
    tmp_normalize(p, 0);
    GROW(p->classes, p->nclasses, p->cap_classes);
    rx_class_t *cl = &p->classes[p->nclasses];
    memset(cl, 0, sizeof *cl);
    cl->first = (uint32_t)p->nranges;
    cl->n = (uint32_t)p->ntmp;
    cl->negated = negated;
    cl->icase = (p->flags & RX_ICASE) != 0;
    for (size_t k = 0; k < p->ntmp; k++) {
        GROW(p->ranges, p->nranges, p->cap_ranges);
        p->ranges[p->nranges++] = p->tmp[k];
    }
    for (uint32_t c = 0; c < 0x80; c++) {
        bool in = ranges_contain(p->tmp, (uint32_t)p->ntmp, c);
        if (!in && cl->icase) in = ranges_contain(p->tmp, (uint32_t)p->ntmp, rx_other_case(c));
        if (in != negated) cl->ascii[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
    p->ntmp = 0;
    return (uint32_t)p->nclasses++;
}

/* ---- lexing helpers ---- */

static bool at_end(const parser_t *p) { return p->i >= p->n; }
static int peek(const parser_t *p, size_t ahead) {
    return p->i + ahead < p->n ? p->s[p->i + ahead] : -1;
}
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static int hex_val(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The next pattern character as a code point (the pattern was checked to be UTF-8). */
static uint32_t next_cp(parser_t *p) { return utf8_next(p->s, p->n, &p->i); }

/* With x: skips white space and # comments; always skips (?#...) comments. */
static void skip_ignorable(parser_t *p) {
    for (;;) {
        if (p->in_quote) return;
        int c = peek(p, 0);
        if ((p->flags & RX_EXTENDED) && (c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
                                         c == '\f' || c == '\v')) {
            p->i++;
        } else if ((p->flags & RX_EXTENDED) && c == '#') {
            while (!at_end(p) && p->s[p->i] != '\n') p->i++;
        } else if (c == '(' && peek(p, 1) == '?' && peek(p, 2) == '#') {
            size_t start = p->i;
            while (!at_end(p) && p->s[p->i] != ')') p->i++;
            if (at_end(p)) {
                p->i = start;
                p_fail(p, "missing ) after (?# comment");
                return;
            }
            p->i++;
        } else {
            return;
        }
    }
}

/* Reads up to max_digits digits of base (8 or 16) into *out; false when there are none. */
static bool read_number(parser_t *p, int base, int max_digits, uint32_t *out) {
    uint32_t v = 0;
    int k = 0;
    while (k < max_digits) {
        int c = peek(p, 0), d = base == 16 ? hex_val(c) : (c >= '0' && c <= '7' ? c - '0' : -1);
        if (d < 0) break;
        if (v > RX_CP_MAX) v = RX_CP_MAX + 1;   /* saturate; reported by the caller */
        else v = v * (uint32_t)base + (uint32_t)d;
        p->i++;
        k++;
    }
    *out = v;
    return k > 0;
}

static int check_cp(parser_t *p, uint32_t cp) {
    if (cp > RX_CP_MAX || (cp >= 0xD800 && cp <= 0xDFFF))
        return p_fail(p, "character code point value in \\x{} or \\o{} is too large or a surrogate");
    return 0;
}

/* \x.. \o{..} \0.. \cX and the one-letter literal escapes; p->i is after the letter.
 * Returns 1 with *cp set when the escape is one of these, 0 when it is not, or an error. */
static int escape_literal(parser_t *p, int letter, uint32_t *cp) {
    switch (letter) {
    case 't': *cp = '\t'; return 1;
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'e': *cp = 0x1B; return 1;
    case 'a': *cp = 0x07; return 1;
    case 'x':
        if (peek(p, 0) == '{') {
            p->i++;
            if (!read_number(p, 16, 8, cp) || peek(p, 0) != '}')
                return p_fail(p, "\\x{ must be followed by hex digits and }");
            p->i++;
        } else {
            read_number(p, 16, 2, cp);   /* \x alone is NUL, as in PCRE */
        }
        return check_cp(p, *cp) ? p->rc : 1;
    case 'o':
        if (peek(p, 0) != '{') return p_fail(p, "\\o must be followed by {");
        p->i++;
        if (!read_number(p, 8, 11, cp) || peek(p, 0) != '}')
            return p_fail(p, "\\o{ must be followed by octal digits and }");
        p->i++;
        return check_cp(p, *cp) ? p->rc : 1;
    case '0':
        read_number(p, 8, 2, cp);
        return 1;
    case 'c': {
        int c = peek(p, 0);
        if (c < 32 || c > 126) return p_fail(p, "\\c must be followed by a printable ASCII character");
        p->i++;
        if (c >= 'a' && c <= 'z') c -= 32;
        *cp = (uint32_t)c ^ 0x40u;
        return 1;
    }
    default: return 0;
    }
}

/* Escapes that are refused everywhere; NULL when letter is not one of them. */
static const char *escape_refused(int letter) {
    switch (letter) {
    case 'k': return "named back-reference \\k";
    case 'g': return "back-reference or subroutine call \\g";
    case 'p': case 'P': return "Unicode property \\p / \\P";
    case 'X': return "extended grapheme cluster \\X";
    case 'R': return "newline sequence \\R";
    case 'K': return "match start reset \\K";
    case 'C': return "single code unit \\C";
    case 'L': case 'l': case 'U': case 'u': return "case-changing escape (\\L \\l \\U \\u)";
    default: return NULL;
    }
}

/* ---- brackets ---- */

/* One item of a bracket expression. Returns 1 with *cp for a single character, 2 when
 * it added a set to tmp (\d, [:alpha:]), 0 at the end of a \Q..\E or an empty \E, or an
 * error. */
static int class_item(parser_t *p, uint32_t *cp) {
    if (p->in_quote) {
        if (peek(p, 0) == '\\' && peek(p, 1) == 'E') {
            p->i += 2;
            p->in_quote = false;
            return 0;
        }
        *cp = next_cp(p);
        return 1;
    }
    int c = peek(p, 0);
    if (c == '[' && (peek(p, 1) == ':' || peek(p, 1) == '.' || peek(p, 1) == '=')) {
        int kind = peek(p, 1);
        size_t j = p->i + 2;
        while (j + 1 < p->n && p->s[j] != ']' && !(p->s[j] == kind && p->s[j + 1] == ']')) j++;
        if (j + 1 < p->n && p->s[j] == kind && p->s[j + 1] == ']') {
            if (kind != ':') return p_fail(p, "POSIX collating elements are not supported");
            size_t start = p->i + 2;
            bool negate = start < j && p->s[start] == '^';
            if (negate) start++;
            char name[16];
            size_t len = j - start;
            if (len >= sizeof name) return p_fail(p, "unknown POSIX class name");
            memcpy(name, p->s + start, len);
            name[len] = '\0';
            if (!posix_class_known(name)) return p_fail(p, "unknown POSIX class name [:%s:]", name);
            tmp_add_set(p, add_posix_fn, name, negate);
            p->i = j + 2;
            return 2;
        }
    }
    if (c != '\\') {
        *cp = next_cp(p);
        return 1;
    }
    p->i++;
    if (at_end(p)) return p_fail(p, "\\ at end of pattern");
    int letter = p->s[p->i];
    if (letter >= 0x80) {
        *cp = next_cp(p);
        return 1;
    }
    p->i++;
    const char *refused = escape_refused(letter);
    if (refused) return p_fail(p, "%s is not supported", refused);
    switch (letter) {
    case 'd': case 'w': case 's': case 'h': case 'v': {
        char l[2] = {(char)letter, 0};
        tmp_add_set(p, add_escape_fn, l, false);
        return 2;
    }
    case 'D': case 'W': case 'S': case 'H': case 'V': {
        char l[2] = {(char)(letter + 32), 0};
        tmp_add_set(p, add_escape_fn, l, true);
        return 2;
    }
    case 'b': *cp = 0x08; return 1;   /* backspace inside brackets, as in PCRE */
    case 'Q': p->in_quote = true; return 0;
    case 'E': return 0;
    default: break;
    }
    int r = escape_literal(p, letter, cp);
    if (r) return r;
    if (letter >= '1' && letter <= '7') {   /* octal inside brackets, as in PCRE */
        p->i--;
        read_number(p, 8, 3, cp);
        return 1;
    }
    if ((letter >= 'A' && letter <= 'Z') || (letter >= 'a' && letter <= 'z') || is_digit(letter))
        return p_fail(p, "escape sequence \\%c is invalid in a character class", letter);
    *cp = (uint32_t)letter;
    return 1;
}

/* [...] after the '['; returns a CLASS node. */
static int32_t parse_bracket(parser_t *p) {
    size_t open = p->i - 1;
    bool negated = false;
    if (peek(p, 0) == '^') {
        negated = true;
        p->i++;
    }
    p->ntmp = 0;
    bool first = true;
    for (;;) {
        if (at_end(p)) {
            p->i = open;
            p_fail(p, "missing terminating ] for character class");
            return NO_NODE;
        }
        if (!p->in_quote && peek(p, 0) == ']' && !first) {
            p->i++;
            break;
        }
        uint32_t lo, hi;
        int r;
        if (!p->in_quote && first && peek(p, 0) == ']') {   /* ] first is a literal */
            p->i++;
            lo = ']';
            r = 1;
        } else {
            r = class_item(p, &lo);
        }
        if (p->rc) return NO_NODE;
        if (r == 0) continue;   /* \Q or \E: not an item; ] may still be first */
        first = false;
        if (r == 2) continue;
        /* a range lo-hi? '-' before ']' or at the end is a literal */
        if (!p->in_quote && peek(p, 0) == '-' && peek(p, 1) != ']' && peek(p, 1) != -1) {
            size_t dash = p->i;
            p->i++;
            r = class_item(p, &hi);
            if (p->rc) return NO_NODE;
            if (r != 1) {
                p->i = dash;
                p_fail(p, "invalid range in character class");
                return NO_NODE;
            }
            if (hi < lo) {
                p->i = dash;
                p_fail(p, "range out of order in character class");
                return NO_NODE;
            }
            tmp_add(p, lo, hi);
        } else {
            tmp_add(p, lo, lo);
        }
    }
    return node_new(p, N_CLASS, 0, class_finish(p, negated), 0);
}

/* ---- atoms, quantifiers, groups ---- */

static int32_t parse_alt(parser_t *p);

/* A literal character node, case-folded per the flags in effect. */
static int32_t literal(parser_t *p, uint32_t cp) {
    bool icase = (p->flags & RX_ICASE) && rx_other_case(cp) != cp;
    return node_new(p, N_CHAR, icase, cp, 0);
}

/* A class node for an escape letter (d w s h v; negated when upper case). */
static int32_t escape_class(parser_t *p, int letter) {
    bool negate = letter >= 'A' && letter <= 'Z';
    char l[2] = {(char)(negate ? letter + 32 : letter), 0};
    p->ntmp = 0;
    tmp_add_set(p, add_escape_fn, l, false);
    return node_new(p, N_CLASS, 0, class_finish(p, negate), 0);
}

/* An escape outside brackets; p->i is on the backslash. Sets *repeatable = false for
 * assertions. Returns NO_NODE (with no error) for \E and \Q, which are no items. */
static int32_t parse_escape(parser_t *p, bool *repeatable) {
    p->i++;
    if (at_end(p)) {
        p_fail(p, "\\ at end of pattern");
        return NO_NODE;
    }
    int letter = p->s[p->i];
    if (letter >= 0x80) return literal(p, next_cp(p));
    p->i++;
    const char *refused = escape_refused(letter);
    if (refused) {
        p_fail(p, "%s is not supported", refused);
        return NO_NODE;
    }
    if (letter >= '1' && letter <= '9') {
        p_fail(p, "back-reference \\%c is not supported (it needs backtracking, whose cost "
                  "is unbounded)", letter);
        return NO_NODE;
    }
    switch (letter) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
    case 'h': case 'H': case 'v': case 'V':
        return escape_class(p, letter);
    case 'N': return node_new(p, N_ANY, 0, 0, 0);
    case 'b': *repeatable = false; return node_new(p, N_ASSERT, A_WORDB, 0, 0);
    case 'B': *repeatable = false; return node_new(p, N_ASSERT, A_NWORDB, 0, 0);
    case 'A': case 'G': *repeatable = false; return node_new(p, N_ASSERT, A_BOT, 0, 0);
    case 'z': *repeatable = false; return node_new(p, N_ASSERT, A_EOT, 0, 0);
    case 'Z': *repeatable = false; return node_new(p, N_ASSERT, A_EOTNL, 0, 0);
    case 'Q': p->in_quote = true; return NO_NODE;
    case 'E': return NO_NODE;
    default: break;
    }
    uint32_t cp;
    int r = escape_literal(p, letter, &cp);
    if (p->rc) return NO_NODE;
    if (r == 1) return literal(p, cp);
    if ((letter >= 'A' && letter <= 'Z') || (letter >= 'a' && letter <= 'z')) {
        p_fail(p, "unrecognized escape sequence \\%c", letter);
        return NO_NODE;
    }
    return literal(p, (uint32_t)letter);
}

/* Inline flags after "(?": letters up to ')' (for the rest of the group) or ':' (for a
 * new non-capturing group). Returns ')' or ':' and updates *flags, or -1 on error. */
static int parse_inline_flags(parser_t *p, unsigned *flags) {
    bool off = false;
    for (;;) {
        int c = peek(p, 0);
        unsigned bit = 0;
        switch (c) {
        case ')': case ':': p->i++; return c;
        case '-':
            if (off) break;
            off = true;
            p->i++;
            continue;
        case 'i': bit = RX_ICASE; break;
        case 'm': bit = RX_MULTILINE; break;
        case 's': bit = RX_DOTALL; break;
        case 'x': bit = RX_EXTENDED; break;
        default: break;
        }
        if (!bit) {
            if (c == 'n' || c == 'U' || c == 'J' || c == '^')
                p_fail(p, "inline option (?%c) is not supported", c);
            else
                p_fail(p, "unrecognized character after (? or (?-");
            return -1;
        }
        if (off) *flags &= ~bit;
        else *flags |= bit;
        p->i++;
    }
}

/* A group; p->i is on the '('. Returns the group's node, or NO_NODE with no error for
 * an inline option setting "(?i)", which changes p->flags for the rest of the group. */
static int32_t parse_group(parser_t *p) {
    size_t open = p->i;
    p->i++;
    if (peek(p, 0) == '*') {
        p_fail(p, "backtracking control verbs and (*OPTION) settings are not supported");
        return NO_NODE;
    }
    unsigned saved = p->flags, inner = p->flags;
    if (peek(p, 0) == '?') {
        p->i++;
        int c = peek(p, 0), c1 = peek(p, 1);
        const char *refused = NULL;
        if (c == '=' || c == '!') refused = "lookahead assertion (?= (?!";
        else if (c == '<' && (c1 == '=' || c1 == '!')) refused = "lookbehind assertion (?<= (?<!";
        else if (c == '>') refused = "atomic group (?>";
        else if (c == '(') refused = "conditional group (?(";
        else if (c == 'R' || is_digit(c) || c == '&' || ((c == '+' || c == '-') && is_digit(c1)))
            refused = "recursion or subroutine call (?R (?1 (?&name";
        else if (c == 'P' && c1 == '=') refused = "named back-reference (?P=name)";
        else if (c == 'P' && c1 == '>') refused = "recursion (?P>name)";
        else if (c == 'C') refused = "callout (?C";
        if (refused) {
            p_fail(p, "%s is not supported", refused);
            return NO_NODE;
        }
        if (c == ':' || c == '|') {       /* non-capturing; branch reset only renumbers */
            p->i++;
        } else if (c == '<' || c == '\'' || (c == 'P' && c1 == '<')) {   /* named group */
            int close = c == '\'' ? '\'' : '>';
            p->i += c == 'P' ? 2 : 1;
            size_t start = p->i;
            while (!at_end(p) && (p->s[p->i] == '_' || (p->s[p->i] < 0x80 &&
                   ((p->s[p->i] | 32) >= 'a' && (p->s[p->i] | 32) <= 'z'))
                   || is_digit(p->s[p->i])))
                p->i++;
            if (p->i == start || is_digit(p->s[start]) || peek(p, 0) != close) {
                p_fail(p, "bad group name");
                return NO_NODE;
            }
            p->i++;
        } else {
            int end = parse_inline_flags(p, &inner);
            if (end < 0) return NO_NODE;
            if (end == ')') {             /* (?i): applies to the rest of this group */
                p->flags = inner;
                return NO_NODE;
            }
        }
    }
    if (++p->depth > MS_REGEX_NEST_MAX) {
        p->i = open;
        p_fail(p, "parentheses are nested more than %d deep", MS_REGEX_NEST_MAX);
        return NO_NODE;
    }
    p->flags = inner;
    int32_t body = parse_alt(p);
    p->flags = saved;
    p->depth--;
    if (p->rc) return NO_NODE;
    if (peek(p, 0) != ')') {
        p->i = open;
        p_fail(p, "missing closing parenthesis");
        return NO_NODE;
    }
    p->i++;
    return body;
}

/* Reads "{n}", "{n,}" or "{n,m}" at p->i into min/max. False (p->i unchanged) when the
 * text is not a quantifier — then '{' is a literal, as in PCRE. */
static bool parse_braces(parser_t *p, uint32_t *min, uint32_t *max) {
    size_t j = p->i + 1;
    uint64_t a = 0, b = 0;
    size_t digits = 0;
    while (j < p->n && is_digit(p->s[j])) {   /* saturating: the value is checked below */
        a = a > MS_REGEX_REPEAT_MAX ? a : a * 10 + (uint64_t)(p->s[j] - '0');
        j++;
        digits++;
    }
    if (digits == 0 || j >= p->n) return false;
    if (p->s[j] == '}') {
        b = a;
    } else if (p->s[j] == ',') {
        j++;
        size_t d2 = 0;
        while (j < p->n && is_digit(p->s[j])) {
            b = b > MS_REGEX_REPEAT_MAX ? b : b * 10 + (uint64_t)(p->s[j] - '0');
            j++;
            d2++;
        }
        if (j >= p->n || p->s[j] != '}') return false;
        if (d2 == 0) b = RX_INF;
    } else {
        return false;
    }
    if (a > MS_REGEX_REPEAT_MAX || (b != RX_INF && b > MS_REGEX_REPEAT_MAX)) {
        p_fail(p, "number too big in {} quantifier (limit %d)", MS_REGEX_REPEAT_MAX);
        return true;
    }
    if (b < a) {
        p_fail(p, "numbers out of order in {} quantifier");
        return true;
    }
    *min = (uint32_t)a;
    *max = (uint32_t)b;
    p->i = j + 1;
    return true;
}

/* A quantifier at p->i, if any: sets min/max and returns true. Lazy forms (x*?) are
 * accepted and mean the same here; possessive forms (x*+) are refused. */
static bool parse_quantifier(parser_t *p, uint32_t *min, uint32_t *max) {
    if (p->in_quote) return false;
    int c = peek(p, 0);
    if (c == '*') { *min = 0; *max = RX_INF; p->i++; }
    else if (c == '+') { *min = 1; *max = RX_INF; p->i++; }
    else if (c == '?') { *min = 0; *max = 1; p->i++; }
    else if (c == '{') { if (!parse_braces(p, min, max) || p->rc) return false; }
    else return false;
    if (peek(p, 0) == '?') {
        p->i++;
    } else if (peek(p, 0) == '+') {
        p_fail(p, "possessive quantifier (*+ ++ ?+ {n,m}+) is not supported");
        return false;
    }
    return true;
}

/* One atom; *repeatable tells whether a quantifier may follow. NO_NODE without an
 * error: nothing was produced (an option setting, \Q, \E). */
static int32_t parse_atom(parser_t *p, bool *repeatable) {
    *repeatable = true;
    if (p->in_quote) {
        if (peek(p, 0) == '\\' && peek(p, 1) == 'E') {
            p->i += 2;
            p->in_quote = false;
            return NO_NODE;
        }
        int32_t n = literal(p, next_cp(p));
        if (peek(p, 0) == '\\' && peek(p, 1) == 'E') {   /* x\E+ : + applies to x */
            p->i += 2;
            p->in_quote = false;
        }
        return n;
    }
    int c = peek(p, 0);
    switch (c) {
    case '(': return parse_group(p);
    case '[': p->i++; return parse_bracket(p);
    case '.': p->i++; return node_new(p, N_ANY, (p->flags & RX_DOTALL) != 0, 0, 0);
    case '^':
        p->i++;
        *repeatable = false;
        return node_new(p, N_ASSERT, (p->flags & RX_MULTILINE) ? A_BOL : A_BOT, 0, 0);
    case '$':
        p->i++;
        *repeatable = false;
        return node_new(p, N_ASSERT, (p->flags & RX_MULTILINE) ? A_EOL : A_EOTNL, 0, 0);
    case '\\': return parse_escape(p, repeatable);
    case '*': case '+': case '?':
        p_fail(p, "quantifier does not follow a repeatable item");
        return NO_NODE;
    case '{': {
        uint32_t mn, mx;
        size_t at = p->i;
        if (parse_braces(p, &mn, &mx)) {
            if (!p->rc) {
                p->i = at;
                p_fail(p, "quantifier does not follow a repeatable item");
            }
            return NO_NODE;
        }
        p->i++;
        return literal(p, '{');
    }
    default: return literal(p, next_cp(p));
    }
}

/* A sequence of quantified atoms up to '|', ')' or the end. */
static int32_t parse_cat(parser_t *p) {
    int32_t cat = node_new(p, N_CAT, 0, 0, 0), last = NO_NODE;
    for (;;) {
        skip_ignorable(p);
        if (p->rc) return NO_NODE;
        if (at_end(p) || (!p->in_quote && (peek(p, 0) == '|' || peek(p, 0) == ')'))) break;
        bool repeatable;
        int32_t atom = parse_atom(p, &repeatable);
        if (p->rc) return NO_NODE;
        skip_ignorable(p);
        if (p->rc) return NO_NODE;
        uint32_t min, max;
        size_t qat = p->i;
        if (parse_quantifier(p, &min, &max)) {
            if (atom == NO_NODE || !repeatable) {
                p->i = qat;
                p_fail(p, "quantifier does not follow a repeatable item");
                return NO_NODE;
            }
            int32_t rep = node_new(p, N_REPEAT, 0, min, max);
            p->nodes[rep].kid = atom;
            atom = rep;
            skip_ignorable(p);
            int c = peek(p, 0);
            if (!p->rc && !p->in_quote && (c == '*' || c == '+' || c == '?' ||
                                           (c == '{' && parse_braces(p, &min, &max)))) {
                if (!p->rc) {
                    p->i = qat;
                    p_fail(p, "quantifier does not follow a repeatable item (stacked quantifiers)");
                }
                return NO_NODE;
            }
        }
        if (p->rc) return NO_NODE;
        if (atom != NO_NODE) node_append(p, cat, &last, atom);
    }
    return cat;
}

static int32_t parse_alt(parser_t *p) {
    int32_t first = parse_cat(p);
    if (p->rc) return NO_NODE;
    if (p->in_quote || peek(p, 0) != '|') return first;
    int32_t alt = node_new(p, N_ALT, 0, 0, 0), last = NO_NODE;
    node_append(p, alt, &last, first);
    while (!p->in_quote && peek(p, 0) == '|') {
        p->i++;
        int32_t branch = parse_cat(p);
        if (p->rc) return NO_NODE;
        node_append(p, alt, &last, branch);
    }
    return alt;
}

/* ------------------------------------------------------------------------------------ */
/* Sizing and code generation                                                            */

#define SIZE_CAP ((uint64_t)MS_REGEX_INSTS_MAX + 1)

static uint64_t sat(uint64_t v) { return v > SIZE_CAP ? SIZE_CAP : v; }

/* Instructions node n emits (saturated at SIZE_CAP), stored in each node. Recursion
 * depth follows the tree's depth: a few levels per group, bounded by the nesting cap. */
static uint32_t node_size(rnode_t *nodes, int32_t n) {
    rnode_t *nd = &nodes[n];
    uint64_t s = 0;
    switch (nd->kind) {
    case N_EMPTY: s = 0; break;
    case N_CHAR: case N_ANY: case N_CLASS: case N_ASSERT: s = 1; break;
    case N_CAT:
        for (int32_t k = nd->kid; k != NO_NODE; k = nodes[k].next) s = sat(s + node_size(nodes, k));
        break;
    case N_ALT: {
        uint64_t branches = 0;
        for (int32_t k = nd->kid; k != NO_NODE; k = nodes[k].next) {
            s = sat(s + node_size(nodes, k));
            branches++;
        }
        s = sat(s + 2 * (branches - 1));   /* a SPLIT and a JMP per branch but the last */
        break;
    }
    case N_REPEAT: {
        uint64_t e = node_size(nodes, nd->kid), min = nd->a, max = nd->b;
        if (max == RX_INF) s = min == 0 ? e + 2 : sat(min * e) + 1;
        else s = sat(min * e) + sat((max - min) * (e + 1));
        s = sat(s);
        break;
    }
    default: ASSERT(0);
    }
    nd->size = (uint32_t)s;
    return nd->size;
}

typedef struct emitter {
    const rnode_t *nodes;
    rx_inst_t *prog;
    uint32_t pc;
} emitter_t;

static uint32_t emit_inst(emitter_t *e, uint8_t op, uint8_t arg, uint32_t x, uint32_t y) {
    rx_inst_t *in = &e->prog[e->pc];
    in->op = op;
    in->arg = arg;
    in->x = x;
    in->y = y;
    return e->pc++;
}

/* Writes node n's instructions at e->pc. Exactly nodes[n].size of them (checked). */
static void emit(emitter_t *e, int32_t n) {
    const rnode_t *nd = &e->nodes[n];
    uint32_t start = e->pc;
    switch (nd->kind) {
    case N_EMPTY: break;
    case N_CHAR: emit_inst(e, OP_CHAR, nd->arg, nd->a, 0); break;
    case N_ANY: emit_inst(e, OP_ANY, nd->arg, 0, 0); break;
    case N_CLASS: emit_inst(e, OP_CLASS, 0, nd->a, 0); break;
    case N_ASSERT: emit_inst(e, OP_ASSERT, nd->arg, 0, 0); break;
    case N_CAT:
        for (int32_t k = nd->kid; k != NO_NODE; k = e->nodes[k].next) emit(e, k);
        break;
    case N_ALT: {
        /* SPLIT next-branch; branch; JMP end — the JMPs are chained through x and
         * patched to the end once it is known. */
        uint32_t jmps = UINT32_MAX;
        for (int32_t k = nd->kid; k != NO_NODE; k = e->nodes[k].next) {
            if (e->nodes[k].next == NO_NODE) {
                emit(e, k);
                break;
            }
            uint32_t split = emit_inst(e, OP_SPLIT, 0, e->pc + 1, 0);
            emit(e, k);
            jmps = emit_inst(e, OP_JMP, 0, jmps, 0);
            e->prog[split].y = e->pc;
        }
        while (jmps != UINT32_MAX) {
            uint32_t prev = e->prog[jmps].x;
            e->prog[jmps].x = e->pc;
            jmps = prev;
        }
        break;
    }
    case N_REPEAT: {
        uint32_t min = nd->a, max = nd->b, esz = e->nodes[nd->kid].size;
        if (max == RX_INF && min == 0) {          /* L: SPLIT L+1, end; e; JMP L */
            uint32_t split = emit_inst(e, OP_SPLIT, 0, e->pc + 1, 0);
            emit(e, nd->kid);
            emit_inst(e, OP_JMP, 0, split, 0);
            e->prog[split].y = e->pc;
        } else if (max == RX_INF) {               /* e{min-1}; L: e; SPLIT L, next */
            for (uint32_t k = 1; k < min; k++) emit(e, nd->kid);
            uint32_t loop = e->pc;
            emit(e, nd->kid);
            emit_inst(e, OP_SPLIT, 0, loop, e->pc + 1);
        } else {                                  /* e{min}; then (SPLIT next, end; e) x (max-min) */
            for (uint32_t k = 0; k < min; k++) emit(e, nd->kid);
            uint32_t end = e->pc + (max - min) * (esz + 1);
            for (uint32_t k = min; k < max; k++) {
                emit_inst(e, OP_SPLIT, 0, e->pc + 1, end);
                emit(e, nd->kid);
            }
            ASSERT(e->pc == end);
        }
        break;
    }
    default: ASSERT(0);
    }
    ASSERT(e->pc - start == nd->size);
}

/* The node every match must begin with, looking through leading CATs; NO_NODE if none. */
static int32_t leading_node(const rnode_t *nodes, int32_t n) {
    while (n != NO_NODE && nodes[n].kind == N_CAT) n = nodes[n].kid;
    return n;
}

/* The first byte of c's UTF-8 form. */
static unsigned lead_byte(uint32_t c) {
    return c < 0x80 ? c : c < 0x800 ? 0xC0 | (c >> 6) : c < 0x10000 ? 0xE0 | (c >> 12)
                                                                    : 0xF0 | (c >> 18);
}

/* Which bytes can start a match: the consuming instructions reachable from pc 0 without
 * consuming (assertions are assumed to hold: a superset is safe). If MATCH is reachable
 * the empty string matches and no skipping is possible. Sets rx->skip and first_set. */
static void first_bytes(rx_t *rx) {
    uint32_t *stack = bson_malloc(sizeof *stack * rx->ninst);
    uint8_t *seen = bson_malloc0(rx->ninst);
    uint8_t *set = rx->first_set;
    uint32_t top = 0, count = 0;
    bool all = false;
    memset(set, 0, sizeof rx->first_set);
    stack[top++] = 0;
    seen[0] = 1;
    while (top > 0 && !all) {
        uint32_t pc = stack[--top], next[2];
        const rx_inst_t *in = &rx->prog[pc];
        int nn = 0;
        switch (in->op) {
        case OP_JMP: next[nn++] = in->x; break;
        case OP_SPLIT: next[nn++] = in->x; next[nn++] = in->y; break;
        case OP_ASSERT: next[nn++] = pc + 1; break;
        case OP_MATCH: case OP_ANY: all = true; break;
        case OP_CHAR:
            set[lead_byte(in->x) >> 3] |= (uint8_t)(1u << (lead_byte(in->x) & 7));
            if (in->arg) {
                unsigned o = lead_byte(rx_other_case(in->x));
                set[o >> 3] |= (uint8_t)(1u << (o & 7));
            }
            break;
        case OP_CLASS: {
            const rx_class_t *cl = &rx->classes[in->x];
            for (int k = 0; k < 16; k++) set[k] |= cl->ascii[k];
            /* any non-ASCII character (or invalid byte) it may take: all high bytes */
            if (cl->negated || (cl->n > 0 && rx->ranges[cl->first + cl->n - 1].hi >= 0x80))
                for (int k = 16; k < 32; k++) set[k] = 0xFF;
            break;
        }
        default: break;
        }
        for (int k = 0; k < nn; k++)
            if (!seen[next[k]]) {
                seen[next[k]] = 1;
                stack[top++] = next[k];
            }
    }
    rx->skip = !all;
    rx->first_byte = -1;
    for (int b = 0; b < 256 && rx->skip; b++)
        if ((set[b >> 3] >> (b & 7)) & 1) {
            count++;
            rx->first_byte = b;
        }
    if (count != 1) rx->first_byte = -1;
    if (count == 256) rx->skip = false;
    bson_free(stack);
    bson_free(seen);
}

/* ------------------------------------------------------------------------------------ */
/* Public: compile                                                                       */

int rx_parse_options(const char *options, unsigned *flags_out, ms_error_t *err) {
    unsigned f = 0;
    for (const char *o = options; *o; o++) {
        switch (*o) {
        case 'i': f |= RX_ICASE; break;
        case 'm': f |= RX_MULTILINE; break;
        case 's': f |= RX_DOTALL; break;
        case 'x': f |= RX_EXTENDED; break;
        case 'u': break;   /* UTF-8 is always on */
        default: return err_set(err, MS_ERR_BAD_VALUE, "invalid flag in regex options: %c", *o);
        }
    }
    *flags_out = f;
    return 0;
}

static void parser_free(parser_t *p) {
    bson_free(p->nodes);
    bson_free(p->classes);
    bson_free(p->ranges);
    bson_free(p->tmp);
}

int rx_compile(const char *pattern, unsigned flags, rx_t **out, ms_error_t *err) {
    parser_t p;
    rx_t *rx = NULL;
    size_t len = strlen(pattern);
    memset(&p, 0, sizeof p);
    p.err = err;
    if (len > MS_REGEX_PATTERN_BYTES_MAX)
        return err_set(err, MS_ERR_BAD_VALUE,
                       "Regular expression is invalid: pattern is longer than %d bytes",
                       MS_REGEX_PATTERN_BYTES_MAX);
    for (size_t i = 0; i < len;) {
        size_t at = i;
        uint32_t c = utf8_next((const uint8_t *)pattern, len, &i);
        if (c >= RX_BAD_BYTE_BASE + 0x80 && c <= RX_BAD_BYTE_BASE + 0xFF)
            return err_set(err, MS_ERR_BAD_VALUE,
                           "Regular expression is invalid: invalid UTF-8 at offset %zu", at);
    }
    p.s = (const uint8_t *)pattern;
    p.n = len;
    p.flags = flags;
    int32_t root = parse_alt(&p);
    if (!p.rc && p.i < p.n) p_fail(&p, "unmatched closing parenthesis");
    if (p.rc) goto out;
    uint32_t size = node_size(p.nodes, root);
    if ((uint64_t)size + 1 > MS_REGEX_INSTS_MAX) {
        p.rc = err_set(err, MS_ERR_BAD_VALUE,
                       "Regular expression is invalid: pattern is too large to compile: its "
                       "program would exceed %d instructions (counted repetition such as "
                       "{n,m} copies its operand)", MS_REGEX_INSTS_MAX);
        goto out;
    }
    rx = bson_malloc0(sizeof *rx);
    rx->ninst = size + 1;
    rx->prog = bson_malloc(sizeof *rx->prog * rx->ninst);
    emitter_t e = {p.nodes, rx->prog, 0};
    emit(&e, root);
    emit_inst(&e, OP_MATCH, 0, 0, 0);
    ASSERT(e.pc == rx->ninst);
    rx->classes = p.classes;
    rx->nclasses = (uint32_t)p.nclasses;
    rx->ranges = p.ranges;
    rx->nranges = (uint32_t)p.nranges;
    p.classes = NULL;
    p.ranges = NULL;
    int32_t lead = leading_node(p.nodes, root);
    rx->anchored = lead != NO_NODE && p.nodes[lead].kind == N_ASSERT && p.nodes[lead].arg == A_BOT;
    first_bytes(rx);
    *out = rx;
out:
    parser_free(&p);
    return p.rc;
}

size_t rx_program_size(const rx_t *rx) { return rx->ninst; }

void rx_free(rx_t *rx) {
    if (!rx) return;
    bson_free(rx->prog);
    bson_free(rx->classes);
    bson_free(rx->ranges);
    bson_free(rx);
}

/* ------------------------------------------------------------------------------------ */
/* Public: match                                                                         */

typedef struct matcher {
    const rx_t *rx;
    const uint8_t *s;
    size_t len;
    uint32_t *mark;       /* generation that last added each pc */
    uint32_t *stack;      /* pending pcs of one closure */
    uint64_t steps;
    bool found;
} matcher_t;

static bool assert_holds(const matcher_t *m, uint8_t kind, size_t pos) {
    const uint8_t *s = m->s;
    size_t len = m->len;
    switch (kind) {
    case A_BOT: return pos == 0;
    case A_BOL: return pos == 0 || (s[pos - 1] == '\n' && pos < len);
    case A_EOT: return pos == len;
    case A_EOTNL: return pos == len || (pos + 1 == len && s[pos] == '\n');
    case A_EOL: return pos == len || s[pos] == '\n';
    case A_WORDB: case A_NWORDB: {
        /* \w is ASCII, so the bytes beside pos decide (a UTF-8 byte >= 0x80 is no word) */
        bool before = pos > 0 && is_word_byte(s[pos - 1]);
        bool after = pos < len && is_word_byte(s[pos]);
        return (before != after) == (kind == A_WORDB);
    }
    default: return false;
    }
}

/* Adds pc and everything reachable from it without consuming a character at pos to
 * list (the consuming instructions only). Each pc at most once per generation. */
static void add_thread(matcher_t *m, uint32_t *list, uint32_t *n, uint32_t pc0, size_t pos,
                       uint32_t gen) {
    const rx_inst_t *prog = m->rx->prog;
    uint32_t top = 0;
    if (m->mark[pc0] == gen) return;
    m->mark[pc0] = gen;
    m->stack[top++] = pc0;
    while (top > 0) {
        uint32_t pc = m->stack[--top];
        const rx_inst_t *in = &prog[pc];
        uint32_t next[2];
        int nn = 0;
        m->steps++;
        switch (in->op) {
        case OP_JMP: next[nn++] = in->x; break;
        case OP_SPLIT: next[nn++] = in->y; next[nn++] = in->x; break;
        case OP_ASSERT:
            if (assert_holds(m, in->arg, pos)) next[nn++] = pc + 1;
            break;
        case OP_MATCH: m->found = true; return;
        default: list[(*n)++] = pc; break;
        }
        for (int k = 0; k < nn; k++) {
            if (m->mark[next[k]] == gen) continue;
            m->mark[next[k]] = gen;
            m->stack[top++] = next[k];
        }
    }
}

static bool inst_consumes(const rx_t *rx, const rx_inst_t *in, uint32_t c) {
    switch (in->op) {
    case OP_CHAR: return c == in->x || (in->arg && rx_other_case(c) == in->x);
    case OP_ANY: return in->arg || c != '\n';
    case OP_CLASS: return class_match(rx, &rx->classes[in->x], c);
    default: return false;
    }
}

/* The search; checks the deadline when check_deadline is set. */
static int search(const rx_t *rx, const char *subject, size_t len, bool check_deadline,
                  bool *matched, ms_error_t *err) {
    enum { SMALL = 256 };
    uint32_t small[4 * SMALL];
    uint32_t *mem = rx->ninst <= SMALL ? small : bson_malloc(sizeof *mem * 4 * rx->ninst);
    uint32_t *clist = mem, *nlist = mem + rx->ninst, ncl = 0, nnl = 0, gen = 1;
    matcher_t m = {rx, (const uint8_t *)subject, len, mem + 2 * rx->ninst, mem + 3 * rx->ninst,
                   0, false};
    uint64_t next_check = MS_REGEX_STEPS_PER_CHECK;
    size_t pos = 0;
    int rc = 0;
    memset(m.mark, 0, sizeof *m.mark * rx->ninst);
    for (;;) {
        if (ncl == 0) {
            if (rx->anchored && pos > 0) break;
            if (rx->skip) {   /* nothing alive: skip to where a match can start */
                size_t at = pos;
                if (rx->first_byte >= 0) {
                    const void *hit = memchr(m.s + pos, rx->first_byte, len - pos);
                    at = hit ? (size_t)((const uint8_t *)hit - m.s) : len;
                } else {
                    while (at < len && !((rx->first_set[m.s[at] >> 3] >> (m.s[at] & 7)) & 1)) at++;
                }
                if (at >= len) break;   /* a match needs at least one more byte */
                if (at != pos) {
                    pos = at;
                    gen++;   /* marks made at the old position must not hide states here */
                }
            }
        }
        if (!rx->anchored || pos == 0) add_thread(&m, clist, &ncl, 0, pos, gen);
        if (m.found || pos >= len) break;
        if (check_deadline && m.steps >= next_check) {
            if ((rc = op_check(err)) != 0) goto out;
            next_check = m.steps + MS_REGEX_STEPS_PER_CHECK;
        }
        size_t at = pos;
        uint32_t c = utf8_next(m.s, len, &at);
        gen++;
        nnl = 0;
        for (uint32_t k = 0; k < ncl && !m.found; k++) {
            uint32_t pc = clist[k];
            if (inst_consumes(rx, &rx->prog[pc], c)) add_thread(&m, nlist, &nnl, pc + 1, at, gen);
        }
        m.steps += ncl;
        if (m.found) break;
        uint32_t *t = clist;
        clist = nlist;
        nlist = t;
        ncl = nnl;
        pos = at;
    }
    *matched = m.found;
out:
    if (mem != small) bson_free(mem);
    return rc;
}

int rx_search(const rx_t *rx, const char *subject, size_t len, bool *matched, ms_error_t *err) {
    return search(rx, subject, len, true, matched, err);
}

bool rx_matches(const rx_t *rx, const char *subject, size_t len) {
    bool matched = false;
    int rc = search(rx, subject, len, false, &matched, NULL);
    ASSERT(rc == 0);
    return matched;
}
