/*
 * test_common_regex.c — the linear-time regex engine (common/regex.c). A table of
 * (pattern, flags, subject, expected) rows written from PCRE's documented rules; a
 * table of compile errors, one per refused construct and per limit; pathological
 * patterns that backtracking engines take exponential time on (here they must simply
 * finish); the maxTimeMS check inside matching; and a seeded random differential test
 * against glibc's regexec (POSIX ERE) on the subset where both define the same answer.
 * Runs in `make test`.
 */
#include "common/regex.h"

#include <regex.h>
#include <stdlib.h>

#include "common/limits.h"
#include "common/log.h"
#include "common/opctx.h"
#include "tests/unit/t.h"

typedef struct mrow {
    const char *pattern, *flags, *subject;
    bool match;
} mrow_t;

/* UTF-8 spellings used below. */
#define E_ACUTE "\xc3\xa9"    /* é U+00E9 */
#define E_ACUTE_UP "\xc3\x89" /* É U+00C9 */
#define SMILE "\xe2\x98\xba"  /* ☺ U+263A */
#define GRIN "\xf0\x9f\x98\x80" /* 😀 U+1F600 */

static const mrow_t rows[] = {
    /* --- literals and escapes --- */
    {"abc", "", "abc", true},
    {"abc", "", "xabcx", true},            /* unanchored: anywhere in the string */
    {"abc", "", "ab", false},
    {"abc", "", "ABC", false},
    {"", "", "", true},
    {"", "", "abc", true},
    {"a", "", "", false},
    {"a.c", "", "abc", true},
    {"a.c", "", "ac", false},
    {"a\\.c", "", "a.c", true},
    {"a\\.c", "", "abc", false},
    {"a\\\\b", "", "a\\b", true},
    {"a\\/b", "", "a/b", true},
    {"\\t", "", "a\tb", true},
    {"\\n", "", "a\nb", true},
    {"\\r", "", "\r", true},
    {"\\f", "", "\f", true},
    {"\\x41", "", "A", true},
    {"\\x41", "", "B", false},
    {"\\x4", "", "\x04", true},
    {"\\x{263A}", "", SMILE, true},
    {"\\x{e9}", "", E_ACUTE, true},
    {"\\o{101}", "", "A", true},
    {"\\010", "", "\b", true},              /* \0 and up to two more octal digits */
    {"\\e", "", "\x1b", true},
    {"\\cA", "", "\x01", true},
    {"\\ca", "", "\x01", true},
    {"\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$", "", "*+?()[]{}|^$", true},
    {"\\Qa.b\\E", "", "a.b", true},
    {"\\Qa.b\\E", "", "axb", false},
    {"\\Qa.b", "", "a.b", true},            /* \Q runs to the end without \E */
    {"^\\Qab\\E+$", "", "abbb", true},      /* the quantifier takes the last quoted char */
    {"^\\Qab\\E+$", "", "abab", false},
    {"\\Q(a|\\E", "", "(a|", true},
    {"x\\Ey", "", "xy", true},              /* a lone \E is ignored */
    {SMILE, "", "a" SMILE "b", true},
    {"^" SMILE "+$", "", SMILE SMILE, true}, /* + repeats the whole code point */
    /* --- anchors --- */
    {"^abc", "", "abc", true},
    {"^abc", "", "xabc", false},
    {"abc$", "", "abc", true},
    {"abc$", "", "abc\n", true},            /* $ also before a final newline */
    {"abc$", "", "abc\n\n", false},
    {"abc$", "", "abc\nx", false},
    {"abc\\z", "", "abc\n", false},
    {"abc\\z", "", "xabc", true},
    {"abc\\Z", "", "abc\n", true},
    {"abc\\Z", "", "abc\nx", false},
    {"\\Aabc", "", "abc", true},
    {"\\Aabc", "", "\nabc", false},
    {"\\Aabc", "m", "\nabc", false},        /* \A ignores m */
    {"\\Gabc", "", "abc", true},
    {"^abc", "m", "x\nabc", true},
    {"^abc", "", "x\nabc", false},
    {"abc$", "m", "abc\nx", true},
    {"^$", "", "", true},
    {"^$", "", "\n", true},
    {"^$", "m", "a\n\nb", true},
    {"^$", "", "a\n\nb", false},
    {"^$", "m", "a\n", false},              /* m: ^ does not match after a final newline */
    {"a^b", "", "a^b", false},              /* ^ is always an anchor */
    {"a$b", "", "a$b", false},
    {"\\bfoo\\b", "", "a foo b", true},
    {"\\bfoo\\b", "", "afoo", false},
    {"\\bfoo\\b", "", "foo_", false},
    {"\\Bfoo", "", "afoo", true},
    {"\\Bfoo", "", "foo", false},
    {"foo\\b", "", "foo!", true},
    {"\\b", "", "", false},
    {"\\B", "", "", true},
    {"\\b" E_ACUTE, "", E_ACUTE, false},    /* \w is ASCII: no boundary before é */
    /* --- character classes --- */
    {"[abc]", "", "b", true},
    {"[abc]", "", "d", false},
    {"[^abc]", "", "d", true},
    {"[^abc]", "", "abc", false},
    {"^[a-z]+$", "", "hello", true},
    {"^[a-z]+$", "", "Hello", false},
    {"^[a-z]+$", "i", "Hello", true},
    {"[]a]", "", "]", true},                /* ] first is a literal */
    {"[^]a]", "", "]", false},
    {"[^]a]", "", "b", true},
    {"[a-]", "", "-", true},
    {"[-a]", "", "-", true},
    {"[a\\-z]", "", "-", true},
    {"[a\\-z]", "", "b", false},
    {"[a-c-e]", "", "-", true},
    {"[a-c-e]", "", "d", false},
    {"[\\d]", "", "5", true},
    {"[\\D]", "", "D", true},
    {"[\\D]", "", "5", false},
    {"[\\w.]", "", ".", true},
    {"[^\\d\\s]", "", "a", true},
    {"[^\\d\\s]", "", " 1", false},
    {"[\\s]", "", "\t", true},
    {"[.]", "", "a", false},
    {"[.]", "", ".", true},
    {"[$^]", "", "^", true},
    {"[[:alpha:]]", "", "q", true},
    {"[[:alpha:]]", "", "1", false},
    {"[[:digit:][:upper:]]", "", "Q", true},
    {"[[:digit:][:upper:]]", "", "q", false},
    {"[[:^digit:]]", "", "5", false},
    {"[[:^digit:]]", "", "x", true},
    {"[[:space:]]", "", "\v", true},
    {"[[:punct:]]", "", "!", true},
    {"[[:blank:]]", "", "\n", false},
    {"^[[:xdigit:]]+$", "", "beef", true},
    {"^[[:xdigit:]]+$", "", "beefy", false},
    {"[[:upper:]]", "i", "a", true},
    {"[[:word:]]", "", "_", true},
    {"[\\x41-\\x43]", "", "B", true},
    {"[\\x41-\\x43]", "", "D", false},
    {"[\\x{100}-\\x{10F}]", "", "\xc4\x85", true},   /* ą U+0105 */
    {"[" E_ACUTE "]", "", E_ACUTE, true},
    {"^[" E_ACUTE "]$", "", "e", false},
    {"^[^" E_ACUTE "]$", "", E_ACUTE, false},
    {"^[^" E_ACUTE "]$", "", SMILE, true},
    {"[\\b]", "", "\b", true},              /* backspace inside brackets */
    {"[\\Q]\\E]", "", "]", true},
    {"[\\n]", "", "\n", true},
    {"[\\1]", "", "\x01", true},            /* octal inside brackets */
    /* --- class escapes --- */
    {"\\d+", "", "abc123", true},
    {"^\\d+$", "", "123a", false},
    {"\\D", "", "123", false},
    {"\\w", "", "!@#", false},
    {"\\W", "", "abc", false},
    {"\\s", "", "a b", true},
    {"\\s", "", "a\x0b" "b", true},         /* \s includes VT, as in PCRE2 */
    {"\\S", "", "   ", false},
    {"^\\w+$", "", E_ACUTE, false},         /* \w is ASCII */
    {"\\h", "", "a\tb", true},
    {"\\h", "", "\n", false},
    {"\\h", "", "\xc2\xa0", true},          /* NO-BREAK SPACE */
    {"\\v", "", "\n", true},
    {"\\v", "", " ", false},
    {"\\H", "", "\t", false},
    {"\\N", "", "\n", false},
    {"\\N", "", "a", true},
    /* --- alternation --- */
    {"cat|dog", "", "hotdog", true},
    {"cat|dog", "", "bird", false},
    {"^(cat|dog)$", "", "dog", true},
    {"^(cat|dog)$", "", "dogs", false},
    {"^(a|ab)(c|bcd)$", "", "abcd", true},
    {"a|", "", "xyz", true},                 /* an empty branch matches the empty string */
    {"|a", "", "", true},
    {"^(?:a|b|c|d)+$", "", "abcdcba", true},
    {"^(?:a|b|c|d)+$", "", "abcde", false},
    {"^(?:x|y|)z$", "", "z", true},
    /* --- quantifiers --- */
    {"ab*c", "", "ac", true},
    {"ab*c", "", "abbbc", true},
    {"ab+c", "", "ac", false},
    {"ab+c", "", "abc", true},
    {"ab?c", "", "abbc", false},
    {"^a{3}$", "", "aaa", true},
    {"^a{3}$", "", "aa", false},
    {"^a{3}$", "", "aaaa", false},
    {"^a{2,}$", "", "a", false},
    {"^a{2,}$", "", "aaaaa", true},
    {"^a{2,4}$", "", "aaaa", true},
    {"^a{2,4}$", "", "aaaaa", false},
    {"^a{0}$", "", "", true},
    {"^a{0}b$", "", "b", true},
    {"^a{0,1}$", "", "a", true},
    {"^(ab){2}$", "", "abab", true},
    {"^(ab){2}$", "", "ab", false},
    {"^(a|b){2,3}$", "", "aba", true},
    {"^(a|b){2,3}$", "", "abab", false},
    {"a{,3}", "", "a{,3}", true},           /* not a quantifier: literal text */
    {"a{,3}", "", "aaa", false},
    {"a{x}", "", "a{x}", true},
    {"{", "", "{", true},
    {"a{1", "", "a{1", true},
    {"^a*?$", "", "aaa", true},             /* lazy forms: same yes/no answer */
    {"^a+?b", "", "aaab", true},
    {"^a??b$", "", "ab", true},
    {"^a{2,3}?$", "", "aaa", true},
    {"^(a*)*$", "", "aaaa", true},
    {"^(a*)+$", "", "", true},
    {"^(a?){3}a{3}$", "", "aaa", true},
    {"^(?:a|b)*c", "", "ababc", true},
    {"^(?:)*$", "", "", true},
    {"^(x?y?)*$", "", "xyyx", true},
    {"^(x?y?)*$", "", "xyzx", false},
    {"(?:ab)+", "", "aab", true},
    {"^(?:ab)+$", "", "aab", false},
    {"^.{3}$", "", E_ACUTE E_ACUTE E_ACUTE, true},  /* . is one code point */
    {"^.{3}$", "", E_ACUTE E_ACUTE, false},
    {"^.$", "", GRIN, true},
    {"^\\x{1F600}$", "", GRIN, true},
    {"^(?:a{2}){2,}$", "", "aaaaaa", true},
    {"^(?:a{2}){2,}$", "", "aaaaa", false},
    /* --- groups --- */
    {"^(?<name>ab)+$", "", "abab", true},
    {"^(?P<n>a)b$", "", "ab", true},
    {"^(?'n'a)b$", "", "ab", true},
    {"^(?|a|b)$", "", "b", true},
    {"a(?#comment)b", "", "ab", true},
    {"((((a))))", "", "a", true},
    {"()", "", "", true},
    {"(|a)", "", "", true},
    /* --- flags: i --- */
    {"abc", "i", "ABC", true},
    {"ABC", "i", "abc", true},
    {"[A-Z]", "i", "q", true},
    {"[^a]", "i", "A", false},
    {"[^a]", "i", "b", true},
    {"\\x41", "i", "a", true},
    {E_ACUTE, "i", E_ACUTE_UP, true},                  /* Latin-1 folds */
    {E_ACUTE, "", E_ACUTE_UP, false},
    {"\xcf\x83", "i", "\xce\xa3", true},               /* σ / Σ */
    {"\xd0\xb4", "i", "\xd0\x94", true},               /* д / Д */
    {"\xc4\x85", "i", "\xc4\x84", true},               /* ą / Ą */
    {"[\xc3\xa0-\xc3\xbe]", "i", E_ACUTE_UP, true},    /* range à-þ folds É */
    {"(?i)abc", "", "ABC", true},
    {"a(?i)bc", "", "aBC", true},
    {"a(?i)bc", "", "ABC", false},
    {"(?i:a)b", "", "Ab", true},
    {"(?i:a)b", "", "AB", false},
    {"(a(?i)b)c", "", "aBc", true},
    {"(a(?i)b)c", "", "aBC", false},        /* (?i) ends with its group */
    {"(?i)a(?-i)b", "", "Ab", true},
    {"(?i)a(?-i)b", "", "AB", false},
    {"^(a(?i)b|c)$", "", "C", true},        /* carries into later branches of the group */
    {"(?i)ab", "i", "AB", true},
    {"(?-i)ab", "i", "AB", false},
    /* --- flags: m, s, x, u --- */
    {".", "", "\n", false},
    {"(?s).", "", "\n", true},
    {"(?m)^b", "", "a\nb", true},
    {"^.*$", "", "ab\ncd", false},
    {"^.*$", "s", "ab\ncd", true},
    {"^.*$", "m", "ab\ncd", true},
    {"^b.c$", "ms", "a\nb\nc", true},
    {"^abc$", "m", "x\nabc\ny", true},
    {"(?x) a b ", "", "ab", true},
    {"a b", "x", "ab", true},
    {"a b", "x", "a b", false},
    {"a\\ b", "x", "a b", true},
    {"a[ ]b", "x", "a b", true},            /* white space inside [] is kept */
    {"a#comment\nb", "x", "ab", true},
    {"^a # c\n$", "x", "a", true},
    {"a\\#b", "x", "a#b", true},
    {"^a +$", "x", "aaa", true},            /* white space before a quantifier */
    {"^a{2} $", "x", "aa", true},
    {"abc", "u", "abc", true},
    /* --- invalid UTF-8 in the subject: one character per bad byte --- */
    {"^.$", "", "\xff", true},
    {"^.$", "", "\xc3", true},
    {"^a..b$", "", "a\xe2\x98" "b", true},
    {"^a.b$", "", "a\xe2\x98" "b", false},
    {"\xc3\xa9", "", "\xc3", false},
};

static unsigned flags_of(const char *s) {
    unsigned f = 0;
    ms_error_t err;
    int rc = rx_parse_options(s, &f, &err);
    CHECK_INT(rc, 0);
    return f;
}

static void test_match_table(void) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const mrow_t *r = &rows[i];
        rx_t *rx = NULL;
        ms_error_t err = {0};
        if (rx_compile(r->pattern, flags_of(r->flags), &rx, &err) != 0) {
            t_fail(__FILE__, __LINE__, "row %zu /%s/%s: compile failed: %s", i, r->pattern,
                   r->flags, err.msg);
            continue;
        }
        bool m = !r->match;
        int rc = rx_search(rx, r->subject, strlen(r->subject), &m, &err);
        CHECK_MSG(rc == 0 && m == r->match, "row %zu /%s/%s on \"%s\": got %d (rc %d), expected %d",
                  i, r->pattern, r->flags, r->subject, m, rc, r->match);
        rx_free(rx);
    }
    CHECK_MSG(sizeof rows / sizeof rows[0] >= 150, "only %zu rows", sizeof rows / sizeof rows[0]);
}

/* A subject with an embedded NUL is matched over its whole length. */
static void test_embedded_nul(void) {
    rx_t *rx = NULL;
    ms_error_t err;
    bool m = false;
    CHECK_INT(rx_compile("b$", 0, &rx, &err), 0);
    CHECK_INT(rx_search(rx, "a\0b", 3, &m, &err), 0);
    CHECK(m);
    rx_free(rx);
}

typedef struct erow {
    const char *pattern, *flags, *msg;   /* msg: a part of the error message */
} erow_t;

static const erow_t errors[] = {
    /* refused: need backtracking */
    {"(a)\\1", "", "back-reference \\1 is not supported"},
    {"(a)\\9", "", "back-reference \\9"},
    {"(?<n>a)\\k<n>", "", "named back-reference \\k"},
    {"(?P<n>a)(?P=n)", "", "named back-reference (?P=name)"},
    {"(a)\\g1", "", "\\g"},
    {"(a)\\g{-1}", "", "\\g"},
    {"a(?=b)", "", "lookahead assertion"},
    {"a(?!b)", "", "lookahead assertion"},
    {"(?<=a)b", "", "lookbehind assertion"},
    {"(?<!a)b", "", "lookbehind assertion"},
    {"(?>a+)b", "", "atomic group"},
    {"a*+", "", "possessive quantifier"},
    {"a++", "", "possessive quantifier"},
    {"a?+", "", "possessive quantifier"},
    {"a{1,2}+", "", "possessive quantifier"},
    {"(?R)", "", "recursion"},
    {"(a)(?1)", "", "recursion"},
    {"(a)(?-1)", "", "recursion"},
    {"(?<n>a)(?&n)", "", "recursion"},
    {"(?P<n>a)(?P>n)", "", "recursion"},
    {"(?(1)a|b)", "", "conditional group"},
    {"\\p{L}", "", "Unicode property"},
    {"\\P{L}", "", "Unicode property"},
    {"[\\p{L}]", "", "Unicode property"},
    {"\\X", "", "grapheme"},
    {"\\R", "", "\\R"},
    {"a\\Kb", "", "\\K"},
    {"\\C", "", "\\C"},
    {"(*FAIL)", "", "verbs"},
    {"(*UTF)a", "", "verbs"},
    {"(?C1)", "", "callout"},
    {"(?U)a", "", "inline option (?U)"},
    {"(?J)a", "", "inline option (?J)"},
    /* syntax */
    {"(", "", "missing closing parenthesis"},
    {"(a|b", "", "missing closing parenthesis"},
    {")", "", "unmatched closing parenthesis"},
    {"a)", "", "unmatched closing parenthesis"},
    {"[a", "", "missing terminating ]"},
    {"[]", "", "missing terminating ]"},
    {"*a", "", "quantifier does not follow"},
    {"a|*", "", "quantifier does not follow"},
    {"a**", "", "quantifier does not follow"},
    {"a{2}{3}", "", "quantifier does not follow"},
    {"^*", "", "quantifier does not follow"},
    {"\\b+", "", "quantifier does not follow"},
    {"(?i)*", "", "quantifier does not follow"},
    {"{2}", "", "quantifier does not follow"},
    {"a{3,2}", "", "numbers out of order"},
    {"[z-a]", "", "range out of order"},
    {"[a-\\d]", "", "invalid range"},
    {"\\", "", "\\ at end of pattern"},
    {"\\y", "", "unrecognized escape sequence \\y"},
    {"[\\y]", "", "invalid in a character class"},
    {"[[:foo:]]", "", "unknown POSIX class name"},
    {"[[.a.]]", "", "collating elements"},
    {"(?Q)", "", "unrecognized character after (?"},
    {"(?<1a>x)", "", "bad group name"},
    {"a(?#x", "", "missing ) after (?# comment"},
    {"\\x{110000}", "", "too large"},
    {"\\x{d800}", "", "surrogate"},
    {"\\x{zz}", "", "\\x{ must be followed by hex digits"},
    {"\\c", "", "\\c must be followed"},
    {"\xff", "", "invalid UTF-8"},
    {"a\xc3", "", "invalid UTF-8"},
    /* limits */
    {"a{65536}", "", "number too big in {} quantifier (limit 65535)"},
    {"a{1,99999999999999}", "", "number too big"},
    {"(a{1,700}){1,700}", "", "pattern is too large to compile"},
    {"((a{1,100}){1,100}){1,100}", "", "pattern is too large to compile"},
    {"a{50000}", "", "would exceed 50000 instructions"},
    {"(?:(?:(?:(?:a{10}){10}){10}){10}){10}", "", "too large"},
};

static void test_compile_errors(void) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        const erow_t *r = &errors[i];
        rx_t *rx = NULL;
        ms_error_t err = {0};
        int rc = rx_compile(r->pattern, flags_of(r->flags), &rx, &err);
        CHECK_MSG(rc == MS_ERR_BAD_VALUE && err.code == MS_ERR_BAD_VALUE,
                  "row %zu /%s/: rc %d, expected BadValue", i, r->pattern, rc);
        CHECK_MSG(strncmp(err.msg, "Regular expression is invalid: ", 31) == 0 &&
                      strstr(err.msg, r->msg) != NULL,
                  "row %zu /%s/: message \"%s\", expected it to contain \"%s\"", i, r->pattern,
                  err.msg, r->msg);
        CHECK(rx == NULL);
        rx_free(rx);
    }
}

static void test_bad_options(void) {
    unsigned f = 0;
    ms_error_t err = {0};
    CHECK_INT(rx_parse_options("iq", &f, &err), MS_ERR_BAD_VALUE);
    CHECK_STR(err.msg, "invalid flag in regex options: q");
    CHECK_INT(rx_parse_options("imsxu", &f, &err), 0);
    CHECK_INT(f, RX_ICASE | RX_MULTILINE | RX_DOTALL | RX_EXTENDED);
}

/* The limits themselves: one under each bound compiles, one over is refused. */
static void test_limits_edges(void) {
    ms_error_t err = {0};
    rx_t *rx = NULL;
    char *pat = malloc(MS_REGEX_PATTERN_BYTES_MAX + 2);
    /* pattern length */
    memset(pat, 'a', MS_REGEX_PATTERN_BYTES_MAX);
    pat[MS_REGEX_PATTERN_BYTES_MAX] = '\0';
    CHECK_INT(rx_compile(pat, 0, &rx, &err), 0);
    rx_free(rx);
    rx = NULL;
    pat[MS_REGEX_PATTERN_BYTES_MAX] = 'a';
    pat[MS_REGEX_PATTERN_BYTES_MAX + 1] = '\0';
    CHECK_INT(rx_compile(pat, 0, &rx, &err), MS_ERR_BAD_VALUE);
    CHECK(strstr(err.msg, "longer than 32764 bytes") != NULL);
    /* nesting: 100 groups deep compiles, 101 does not */
    for (int depth = MS_REGEX_NEST_MAX; depth <= MS_REGEX_NEST_MAX + 1; depth++) {
        int o = 0;
        for (int k = 0; k < depth; k++) pat[o++] = '(';
        pat[o++] = 'a';
        for (int k = 0; k < depth; k++) pat[o++] = ')';
        pat[o] = '\0';
        rx = NULL;
        int rc = rx_compile(pat, 0, &rx, &err);
        if (depth == MS_REGEX_NEST_MAX) {
            CHECK_INT(rc, 0);
            bool m = false;
            CHECK_INT(rx_search(rx, "xa", 2, &m, &err), 0);
            CHECK(m);
        } else {
            CHECK_INT(rc, MS_ERR_BAD_VALUE);
            CHECK(strstr(err.msg, "nested more than 100 deep") != NULL);
        }
        rx_free(rx);
    }
    /* program size: a{49999} is 49,999 instructions + MATCH = the cap */
    rx = NULL;
    CHECK_INT(rx_compile("a{49999}", 0, &rx, &err), 0);
    if (rx) CHECK_INT(rx_program_size(rx), MS_REGEX_INSTS_MAX);
    rx_free(rx);
    /* deep nesting of repetition does not overflow the size arithmetic */
    rx = NULL;
    CHECK_INT(rx_compile("((((((a{65535}){65535}){65535}){65535}){65535}){65535})", 0, &rx, &err),
              MS_ERR_BAD_VALUE);
    free(pat);
}

static char *repeat_char(char c, size_t n, const char *tail) {
    size_t tl = strlen(tail);
    char *s = malloc(n + tl + 1);
    memset(s, c, n);
    memcpy(s + n, tail, tl + 1);
    return s;
}

/* Patterns that take exponential time in a backtracking engine. Here each is one pass
 * over the subject; they only have to finish (no timing is asserted). */
static void test_pathological(void) {
    static const struct {
        const char *pattern;
        char c;
        size_t n;
        const char *tail;
        bool match;
    } cases[] = {
        {"(a*)*b", 'a', 10000, "", false},
        {"(a|a)*b", 'a', 10000, "", false},
        {"(a+)+$", 'a', 10000, "!", false},
        {"^(a+)+$", 'a', 10000, "", true},
        {"(a|aa)*c", 'a', 10000, "", false},
        {"(x+x+)+y", 'x', 5000, "", false},
        {"(.*)*x", 'a', 10000, "", false},
        {"^(a?){30}a{30}$", 'a', 30, "", true},
        {"(\\w+\\s?)+$", 'a', 10000, "!", false},
        {"^(([a-z])+.)+[A-Z]([a-z])+$", 'a', 10000, "", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rx_t *rx = NULL;
        ms_error_t err = {0};
        char *s = repeat_char(cases[i].c, cases[i].n, cases[i].tail);
        bool m = !cases[i].match;
        CHECK_INT(rx_compile(cases[i].pattern, 0, &rx, &err), 0);
        if (rx) {
            CHECK_INT(rx_search(rx, s, strlen(s), &m, &err), 0);
            CHECK_MSG(m == cases[i].match, "/%s/ got %d", cases[i].pattern, m);
        }
        rx_free(rx);
        free(s);
    }
}

/* Matching checks the operation's deadline: an expired one stops a long match with
 * MaxTimeMSExpired; a distant one changes nothing. */
static void test_max_time(void) {
    rx_t *rx = NULL;
    ms_error_t err = {0};
    char *s = repeat_char('x', 200000, "");
    bool m = true;
    CHECK_INT(rx_compile("(x+x+)+y", 0, &rx, &err), 0);
    op_set_deadline_ms(time_mono_ms() - 1);
    CHECK_INT(rx_search(rx, s, strlen(s), &m, &err), MS_ERR_MAX_TIME_MS_EXPIRED);
    CHECK_INT(err.code, MS_ERR_MAX_TIME_MS_EXPIRED);
    CHECK(m);   /* not written on failure */
    /* a short subject may finish before the first check: that is a plain answer */
    CHECK_INT(rx_search(rx, "xxy", 3, &m, &err), 0);
    CHECK(m);
    op_set_deadline_ms(time_mono_ms() + 600000);
    CHECK_INT(rx_search(rx, s, strlen(s), &m, &err), 0);
    CHECK(!m);
    op_set_deadline_ms(0);
    rx_free(rx);
    free(s);
}

/* ---- differential test against glibc regexec (POSIX ERE) ------------------------------ */

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state % n);
}

typedef struct gbuf {
    char s[256];
    size_t n;
} gbuf_t;

static void gput(gbuf_t *b, const char *t) {
    size_t l = strlen(t);
    if (b->n + l < sizeof b->s) {
        memcpy(b->s + b->n, t, l + 1);
        b->n += l;
    }
}

static void gen_alt(gbuf_t *b, int depth);

/* An atom both dialects read alike: a b c, '.', a bracket, a group, or an anchor. */
static void gen_piece(gbuf_t *b, int depth) {
    static const char *const lits[] = {"a", "b", "c", ".", "[ab]", "[^a]", "[a-c]", "[^bc]"};
    static const char *const quants[] = {"*", "+", "?", "{2}", "{1,2}", "{0,3}", "{2,}"};
    bool anchor = false;
    uint32_t k = rnd(10);
    if (k < 6) {
        gput(b, lits[rnd(8)]);
    } else if (k < 8 && depth < 3) {
        gput(b, "(");
        gen_alt(b, depth + 1);
        gput(b, ")");
    } else if (k == 8 && depth == 0) {   /* glibc mishandles anchors in repeated groups */
        gput(b, rnd(2) ? "^" : "$");
        anchor = true;
    } else {
        gput(b, lits[rnd(3)]);
    }
    if (!anchor && rnd(3) == 0) gput(b, quants[rnd(7)]);
}

static void gen_alt(gbuf_t *b, int depth) {
    int branches = 1 + (rnd(4) == 0);
    for (int i = 0; i < branches; i++) {
        if (i) gput(b, "|");
        int pieces = 1 + (int)rnd(4);
        for (int k = 0; k < pieces; k++) gen_piece(b, depth);
    }
}

static void test_differential_glibc(void) {
    uint64_t seed = t_seed("test_differential_glibc");
    rng_state = seed ? seed : 1;
    int compared = 0;
    for (int iter = 0; iter < 3000; iter++) {
        gbuf_t pat = {{0}, 0};
        gen_alt(&pat, 0);
        bool icase = rnd(4) == 0;
        regex_t re;
        if (regcomp(&re, pat.s, REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0)) != 0) continue;
        rx_t *rx = NULL;
        ms_error_t err = {0};
        if (rx_compile(pat.s, icase ? RX_ICASE : 0, &rx, &err) != 0) {
            /* glibc takes some things PCRE refuses (a quantified anchor, a{2}*): skip those */
            bool expected = strstr(err.msg, "quantifier does not follow") != NULL;
            CHECK_MSG(expected, "seed %llu: /%s/ compiles in glibc, not here: %s",
                      (unsigned long long)seed, pat.s, err.msg);
            regfree(&re);
            continue;
        }
        for (int k = 0; k < 20; k++) {
            char subj[16];
            int len = (int)rnd(12);
            for (int j = 0; j < len; j++) subj[j] = "abcAB"[rnd(icase ? 5 : 3)];
            subj[len] = '\0';
            bool ours = false;
            CHECK_INT(rx_search(rx, subj, (size_t)len, &ours, &err), 0);
            bool theirs = regexec(&re, subj, 0, NULL, 0) == 0;
            CHECK_MSG(ours == theirs, "seed %llu: /%s/%s on \"%s\": ours %d, glibc %d",
                      (unsigned long long)seed, pat.s, icase ? "i" : "", subj, ours, theirs);
            compared++;
        }
        rx_free(rx);
        regfree(&re);
    }
    CHECK_MSG(compared > 20000, "only %d comparisons", compared);
}

/* Random strings over the metacharacters: compile must answer (ok or BadValue) and a
 * compiled program must run; run under `make SAN=address,undefined` this finds memory
 * errors in the parser. */
static void test_random_syntax(void) {
    static const char *const toks[] = {"(", ")", "(?:", "(?i)", "(?<n>", "[", "]", "[^", "-",
                                       "\\", "\\d", "\\b", "\\Q", "\\E", "\\x{41}",
                                       "*", "+", "?", "{", "}", "{2}", "{1,3}", ",", "|", "^",
                                       "$", ".", "a", "b", " ", "#", "\n", ":", "[:alpha:]",
                                       "\xc3\xa9"};
    uint64_t seed = t_seed("test_random_syntax");
    rng_state = seed ? seed : 1;
    int compiled = 0;
    for (int iter = 0; iter < 20000; iter++) {
        char pat[128];
        size_t n = 0;
        int count = 1 + (int)rnd(12);
        for (int k = 0; k < count; k++) {
            const char *t = toks[rnd(sizeof toks / sizeof toks[0])];
            size_t l = strlen(t);
            if (n + l >= sizeof pat) break;
            memcpy(pat + n, t, l);
            n += l;
        }
        pat[n] = '\0';
        rx_t *rx = NULL;
        ms_error_t err = {0};
        int rc = rx_compile(pat, rnd(16), &rx, &err);
        CHECK_MSG(rc == 0 || (rc == MS_ERR_BAD_VALUE && strstr(err.msg, "Regular expression is invalid: ")),
                  "seed %llu: /%s/: rc %d %s", (unsigned long long)seed, pat, rc, err.msg);
        if (rc == 0) {
            bool m;
            compiled++;
            CHECK_INT(rx_search(rx, "ab\n\xc3\xa9 A{2}#", 11, &m, &err), 0);
        }
        rx_free(rx);
    }
    CHECK_MSG(compiled > 1000, "only %d compiled", compiled);
}

T_MAIN(T_CASE(test_match_table), T_CASE(test_embedded_nul), T_CASE(test_compile_errors),
       T_CASE(test_bad_options), T_CASE(test_limits_edges), T_CASE(test_pathological),
       T_CASE(test_max_time), T_CASE(test_differential_glibc), T_CASE(test_random_syntax))
