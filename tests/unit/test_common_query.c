/*
 * test_shardd_query.c — the filter matcher (shardd/query.c) against a table of
 * (filter, document, expected) rows written from MongoDB's documented query behaviour,
 * plus the parse errors users see. Runs in `make test`.
 */
#include "common/query.h"

#include <bson/bson.h>

#include "common/log.h"
#include "common/opctx.h"
#include "tests/unit/t.h"

typedef struct mrow {
    const char *filter, *doc;
    bool match;
} mrow_t;

/* Extended JSON shorthands for the table. */
#define MINKEY "{\"$minKey\": 1}"
#define MAXKEY "{\"$maxKey\": 1}"
#define RE(p, o) "{\"$regularExpression\": {\"pattern\": \"" p "\", \"options\": \"" o "\"}}"
#define LONG(v) "{\"$numberLong\": \"" v "\"}"
#define NAN_ "{\"$numberDouble\": \"NaN\"}"

static const mrow_t rows[] = {
    /* --- equality, implicit and $eq --- */
    {"{}", "{\"a\": 1}", true},
    {"{\"a\": 1}", "{\"a\": 1}", true},
    {"{\"a\": 1}", "{\"a\": 2}", false},
    {"{\"a\": 1}", "{\"b\": 1}", false},
    {"{\"a\": 1}", "{\"a\": 1.0}", true},                 /* numbers compare by value across types */
    {"{\"a\": 1}", "{\"a\": " LONG("1") "}", true},
    {"{\"a\": 1}", "{\"a\": \"1\"}", false},              /* no type coercion */
    {"{\"a\": {\"$eq\": 1}}", "{\"a\": 1}", true},
    {"{\"a\": {\"$eq\": 1}}", "{\"a\": [3, 1]}", true},
    {"{\"a\": \"x\", \"b\": 2}", "{\"a\": \"x\", \"b\": 2}", true},
    {"{\"a\": \"x\", \"b\": 2}", "{\"a\": \"x\", \"b\": 3}", false},
    {"{\"a\": true}", "{\"a\": 1}", false},               /* bool is not a number */
    {"{\"a\": {\"b\": 1}}", "{\"a\": {\"b\": 1}}", true}, /* whole embedded document */
    {"{\"a\": {\"b\": 1}}", "{\"a\": {\"b\": 1, \"c\": 2}}", false},
    {"{\"a\": {\"b\": 1, \"c\": 2}}", "{\"a\": {\"c\": 2, \"b\": 1}}", false}, /* field order matters */
    {"{\"a\": {\"$eq\": {\"b\": 1}}}", "{\"a\": {\"b\": 1}}", true},
    /* --- arrays: any element, or the whole array --- */
    {"{\"a\": 2}", "{\"a\": [1, 2, 3]}", true},
    {"{\"a\": 4}", "{\"a\": [1, 2, 3]}", false},
    {"{\"a\": [1, 2]}", "{\"a\": [1, 2]}", true},
    {"{\"a\": [1, 2]}", "{\"a\": [2, 1]}", false},
    {"{\"a\": [1, 2]}", "{\"a\": [[1, 2], 3]}", true},    /* an element equal to the array */
    {"{\"a\": [1, 2]}", "{\"a\": [1, 2, 3]}", false},
    {"{\"a\": []}", "{\"a\": []}", true},
    {"{\"a\": []}", "{\"a\": [[]]}", true},
    {"{\"a\": 1}", "{\"a\": [[1]]}", false},              /* only one level is expanded */
    {"{\"a\": {\"b\": 1}}", "{\"a\": [{\"b\": 1}]}", true},
    /* --- dotted paths --- */
    {"{\"a.b\": 1}", "{\"a\": {\"b\": 1}}", true},
    {"{\"a.b\": 1}", "{\"a\": {\"b\": 2}}", false},
    {"{\"a.b.c\": 1}", "{\"a\": {\"b\": {\"c\": 1}}}", true},
    {"{\"a.b\": 1}", "{\"a\": [{\"b\": 2}, {\"b\": 1}]}", true},
    {"{\"a.b\": 1}", "{\"a\": [{\"b\": [0, 1]}]}", true},
    {"{\"a.b\": 1}", "{\"a\": 1}", false},
    {"{\"a.b.c\": 1}", "{\"a\": [{\"b\": [{\"c\": 1}]}]}", true},
    {"{\"a.b\": 1}", "{\"a\": [[{\"b\": 1}]]}", false},   /* nested arrays are not traversed */
    /* numeric components index arrays */
    {"{\"a.0\": 5}", "{\"a\": [5, 6]}", true},
    {"{\"a.1\": 5}", "{\"a\": [5, 6]}", false},
    {"{\"a.0.b\": 1}", "{\"a\": [{\"b\": 1}, {\"b\": 2}]}", true},
    {"{\"a.1.b\": 1}", "{\"a\": [{\"b\": 1}, {\"b\": 2}]}", false},
    {"{\"a.0\": 1}", "{\"a\": {\"0\": 1}}", true},        /* "0" is also a field name */
    {"{\"a.0\": 1}", "{\"a\": [{\"0\": 1}]}", true},
    {"{\"a.0\": 7}", "{\"a\": [[7, 8]]}", true},          /* the picked element is expanded */
    {"{\"a.01\": 5}", "{\"a\": [5]}", false},             /* not a plain index */
    {"{\"a.5\": 5}", "{\"a\": [5]}", false},
    /* --- null and missing --- */
    {"{\"a\": null}", "{\"a\": null}", true},
    {"{\"a\": null}", "{}", true},                        /* null matches missing */
    {"{\"a\": null}", "{\"a\": 0}", false},
    {"{\"a\": null}", "{\"a\": [1, null]}", true},        /* an array containing null */
    {"{\"a\": null}", "{\"a\": []}", false},
    {"{\"a\": null}", "{\"a\": [1]}", false},
    {"{\"a.b\": null}", "{\"a\": {\"c\": 1}}", true},
    {"{\"a.b\": null}", "{\"a\": [{\"c\": 1}]}", true},   /* an element missing b */
    {"{\"a.b\": null}", "{\"a\": [{\"b\": 1}]}", false},
    {"{\"a.b\": null}", "{\"a\": 5}", true},              /* path through a scalar: missing */
    {"{\"a\": {\"$ne\": null}}", "{\"a\": 1}", true},
    {"{\"a\": {\"$ne\": null}}", "{}", false},
    {"{\"a\": {\"$ne\": null}}", "{\"a\": [1, null]}", false},
    {"{\"a\": {\"$eq\": null}}", "{\"b\": 1}", true},
    {"{\"a\": {\"$gte\": null}}", "{}", true},            /* $gte/$lte null behave like $eq null */
    {"{\"a\": {\"$lte\": null}}", "{\"a\": null}", true},
    {"{\"a\": {\"$gt\": null}}", "{\"a\": null}", false},
    {"{\"a\": {\"$lt\": null}}", "{}", false},
    {"{\"a\": {\"$in\": [null]}}", "{}", true},
    {"{\"a\": {\"$in\": [5, null]}}", "{\"a\": 5}", true},
    {"{\"a\": {\"$nin\": [null]}}", "{}", false},
    /* --- $ne / $nin: negations of the positive match (arrays included) --- */
    {"{\"a\": {\"$ne\": 1}}", "{\"a\": 2}", true},
    {"{\"a\": {\"$ne\": 1}}", "{\"a\": 1}", false},
    {"{\"a\": {\"$ne\": 1}}", "{}", true},                /* missing is not equal to 1 */
    {"{\"a\": {\"$ne\": 1}}", "{\"a\": [1, 2]}", false},
    {"{\"a\": {\"$ne\": 3}}", "{\"a\": [1, 2]}", true},
    {"{\"a\": {\"$ne\": [1, 2]}}", "{\"a\": [1, 2]}", false},
    {"{\"a\": {\"$ne\": \"1\"}}", "{\"a\": 1}", true},
    {"{\"a\": {\"$nin\": [1, 2]}}", "{\"a\": 3}", true},
    {"{\"a\": {\"$nin\": [1, 2]}}", "{\"a\": 2}", false},
    {"{\"a\": {\"$nin\": [1, 2]}}", "{\"a\": [3, 2]}", false},
    {"{\"a\": {\"$nin\": [1, 2]}}", "{}", true},
    {"{\"a\": {\"$nin\": []}}", "{\"a\": 1}", true},
    {"{\"a.b\": {\"$ne\": 1}}", "{\"a\": [{\"b\": 1}, {\"b\": 2}]}", false},
    /* --- comparisons, type-bracketed --- */
    {"{\"a\": {\"$gt\": 5}}", "{\"a\": 6}", true},
    {"{\"a\": {\"$gt\": 5}}", "{\"a\": 5}", false},
    {"{\"a\": {\"$gte\": 5}}", "{\"a\": 5}", true},
    {"{\"a\": {\"$lt\": 5}}", "{\"a\": 4.5}", true},
    {"{\"a\": {\"$lte\": 5}}", "{\"a\": " LONG("5") "}", true},
    {"{\"a\": {\"$lt\": 5}}", "{\"a\": 5}", false},
    {"{\"a\": {\"$gt\": 5}}", "{\"a\": \"6\"}", false},   /* a string is not > a number */
    {"{\"a\": {\"$lt\": 5}}", "{\"a\": null}", false},
    {"{\"a\": {\"$lt\": 5}}", "{}", false},
    {"{\"a\": {\"$gt\": 5}}", "{\"a\": true}", false},
    {"{\"a\": {\"$gt\": \"b\"}}", "{\"a\": \"c\"}", true},
    {"{\"a\": {\"$gt\": \"b\"}}", "{\"a\": \"a\"}", false},
    {"{\"a\": {\"$gt\": \"b\"}}", "{\"a\": 9}", false},
    {"{\"a\": {\"$lt\": \"b\"}}", "{\"a\": \"B\"}", true}, /* simple collation: bytes */
    {"{\"a\": {\"$gt\": 5}}", "{\"a\": [1, 7]}", true},   /* some element */
    {"{\"a\": {\"$gt\": 5}}", "{\"a\": [1, 2]}", false},
    {"{\"a\": {\"$gt\": 5, \"$lt\": 7}}", "{\"a\": [4, 8]}", true}, /* each bound by some element */
    {"{\"a\": {\"$gt\": 5, \"$lt\": 7}}", "{\"a\": 8}", false},
    {"{\"a\": {\"$gt\": 5, \"$lt\": 7}}", "{\"a\": 6}", true},
    {"{\"a\": {\"$gt\": [1]}}", "{\"a\": [2]}", true},    /* the whole array compares as an array */
    {"{\"a\": {\"$gte\": {\"b\": 1}}}", "{\"a\": {\"b\": 2}}", true},
    {"{\"a\": {\"$gte\": {\"b\": 1}}}", "{\"a\": 3}", false},
    {"{\"a\": {\"$gt\": " MINKEY "}}", "{\"a\": \"x\"}", true},   /* MinKey/MaxKey cross types */
    {"{\"a\": {\"$gt\": " MINKEY "}}", "{\"a\": null}", true},
    {"{\"a\": {\"$lt\": " MAXKEY "}}", "{\"a\": {\"b\": 1}}", true},
    {"{\"a\": {\"$gt\": " MAXKEY "}}", "{\"a\": 1}", false},
    {"{\"a\": {\"$lt\": " MINKEY "}}", "{\"a\": 1}", false},
    {"{\"a\": " MINKEY "}", "{\"a\": " MINKEY "}", true},
    {"{\"a\": {\"$gt\": 0}}", "{\"a\": " NAN_ "}", false},  /* NaN: only equal to NaN */
    {"{\"a\": {\"$lt\": 0}}", "{\"a\": " NAN_ "}", false},
    {"{\"a\": " NAN_ "}", "{\"a\": " NAN_ "}", true},
    {"{\"a\": {\"$gte\": " NAN_ "}}", "{\"a\": " NAN_ "}", true},
    {"{\"a\": {\"$gt\": " NAN_ "}}", "{\"a\": 5}", false},
    {"{\"a\": {\"$gt\": {\"$date\": \"2020-01-01T00:00:00Z\"}}}",
     "{\"a\": {\"$date\": \"2021-01-01T00:00:00Z\"}}", true},
    {"{\"a\": {\"$gt\": {\"$date\": \"2020-01-01T00:00:00Z\"}}}", "{\"a\": 99999999999999}", false},
    {"{\"a\": {\"$gt\": " LONG("9007199254740992") "}}", "{\"a\": " LONG("9007199254740993") "}", true},
    /* --- $in --- */
    {"{\"a\": {\"$in\": [1, 2]}}", "{\"a\": 2}", true},
    {"{\"a\": {\"$in\": [1, 2]}}", "{\"a\": 3}", false},
    {"{\"a\": {\"$in\": [1, 2]}}", "{\"a\": [5, 1]}", true},
    {"{\"a\": {\"$in\": []}}", "{\"a\": 1}", false},
    {"{\"a\": {\"$in\": [[1, 2]]}}", "{\"a\": [1, 2]}", true},
    {"{\"a\": {\"$in\": [" RE("^ab", "") "]}}", "{\"a\": \"abc\"}", true},
    {"{\"a\": {\"$in\": [" RE("^ab", "") "]}}", "{\"a\": \"cab\"}", false},
    {"{\"a\": {\"$in\": [" RE("^ab", "") ", 5]}}", "{\"a\": 5}", true},
    {"{\"a\": {\"$in\": [" RE("^ab", "") "]}}", "{\"a\": " RE("^ab", "") "}", true},
    {"{\"a\": {\"$in\": [\"1\"]}}", "{\"a\": 1}", false},
    /* --- $exists --- */
    {"{\"a\": {\"$exists\": true}}", "{\"a\": null}", true},
    {"{\"a\": {\"$exists\": true}}", "{}", false},
    {"{\"a\": {\"$exists\": false}}", "{}", true},
    {"{\"a\": {\"$exists\": false}}", "{\"a\": 1}", false},
    {"{\"a\": {\"$exists\": 1}}", "{\"a\": 1}", true},
    {"{\"a\": {\"$exists\": 0}}", "{\"a\": 1}", false},
    {"{\"a\": {\"$exists\": true}}", "{\"a\": []}", true},
    {"{\"a.b\": {\"$exists\": true}}", "{\"a\": [{\"c\": 1}, {\"b\": 1}]}", true},
    {"{\"a.b\": {\"$exists\": false}}", "{\"a\": [{\"c\": 1}, {\"b\": 1}]}", false},
    {"{\"a.b\": {\"$exists\": false}}", "{\"a\": [1, 2]}", true},
    {"{\"a.1\": {\"$exists\": true}}", "{\"a\": [1, 2]}", true},
    {"{\"a.2\": {\"$exists\": true}}", "{\"a\": [1, 2]}", false},
    /* --- $type --- */
    {"{\"a\": {\"%type\": \"string\"}}", "{\"a\": \"x\"}", true},
    {"{\"a\": {\"%type\": 2}}", "{\"a\": \"x\"}", true},
    {"{\"a\": {\"%type\": \"string\"}}", "{\"a\": 1}", false},
    {"{\"a\": {\"%type\": \"number\"}}", "{\"a\": 1.5}", true},
    {"{\"a\": {\"%type\": \"number\"}}", "{\"a\": " LONG("1") "}", true},
    {"{\"a\": {\"%type\": \"number\"}}", "{\"a\": \"1\"}", false},
    {"{\"a\": {\"%type\": \"int\"}}", "{\"a\": 1}", true},
    {"{\"a\": {\"%type\": \"long\"}}", "{\"a\": 1}", false},
    {"{\"a\": {\"%type\": \"double\"}}", "{\"a\": 1.0}", true},
    {"{\"a\": {\"%type\": [\"string\", \"null\"]}}", "{\"a\": null}", true},
    {"{\"a\": {\"%type\": \"null\"}}", "{}", false},      /* missing has no type */
    {"{\"a\": {\"%type\": \"array\"}}", "{\"a\": [1]}", true},
    {"{\"a\": {\"%type\": \"array\"}}", "{\"a\": []}", true},
    {"{\"a\": {\"%type\": \"array\"}}", "{\"a\": 1}", false},
    {"{\"a\": {\"%type\": \"string\"}}", "{\"a\": [1, \"x\"]}", true}, /* elements are checked */
    {"{\"a\": {\"%type\": \"object\"}}", "{\"a\": {\"b\": 1}}", true},
    {"{\"a\": {\"%type\": -1}}", "{\"a\": " MINKEY "}", true},
    {"{\"a\": {\"%type\": \"maxKey\"}}", "{\"a\": " MAXKEY "}", true},
    {"{\"a\": {\"%type\": \"bool\"}}", "{\"a\": false}", true},
    {"{\"a\": {\"%type\": \"objectId\"}}", "{\"a\": {\"$oid\": \"5f0000000000000000000000\"}}", true},
    /* --- $regex --- */
    {"{\"a\": {\"%regex\": \"^ab\"}}", "{\"a\": \"abc\"}", true},
    {"{\"a\": {\"%regex\": \"^ab\"}}", "{\"a\": \"Abc\"}", false},
    {"{\"a\": {\"%regex\": \"^ab\", \"%options\": \"i\"}}", "{\"a\": \"Abc\"}", true},
    {"{\"a\": {\"%regex\": \"b\"}}", "{\"a\": \"abc\"}", true},    /* unanchored */
    {"{\"a\": {\"%regex\": \"b\"}}", "{\"a\": 5}", false},
    {"{\"a\": {\"%regex\": \"b\"}}", "{}", false},
    {"{\"a\": {\"%regex\": \"^b\"}}", "{\"a\": [\"x\", \"bc\"]}", true},
    {"{\"a\": {\"%regex\": \"^b$\", \"%options\": \"m\"}}", "{\"a\": \"a\\nb\\nc\"}", true},
    {"{\"a\": {\"%regex\": \"^b$\"}}", "{\"a\": \"a\\nb\\nc\"}", false},
    {"{\"a\": {\"%regex\": \"a b # comment\", \"%options\": \"x\"}}", "{\"a\": \"ab\"}", true},
    {"{\"a\": {\"%regex\": \"^\\\\d+$\"}}", "{\"a\": \"123\"}", true},
    {"{\"a\": {\"%regex\": \"^\\\\d+$\"}}", "{\"a\": \"12a\"}", false},
    {"{\"a\": {\"%regex\": \"^[\\\\D]$\"}}", "{\"a\": \"D\"}", true},   /* [\D]: not a digit */
    {"{\"a\": {\"%regex\": \"^\\\\w+$\"}}", "{\"a\": \"ab_1\"}", true},
    {"{\"a\": {\"%regex\": " RE("^AB", "i") "}}", "{\"a\": \"abc\"}", true},
    {"{\"a\": " RE("^ab", "") "}", "{\"a\": \"abx\"}", true},          /* regex as equality */
    {"{\"a\": " RE("^ab", "") "}", "{\"a\": " RE("^ab", "") "}", true},  /* same regex value */
    {"{\"a\": " RE("^ab", "") "}", "{\"a\": " RE("^ab", "i") "}", false},
    {"{\"a\": {\"%regex\": \"^ab\"}}", "{\"a\": {\"$symbol\": \"abc\"}}", true},
    {"{\"a\": {\"$not\": " RE("^ab", "") "}}", "{\"a\": \"abc\"}", false},
    {"{\"a\": {\"$not\": " RE("^ab", "") "}}", "{\"a\": \"xbc\"}", true},
    {"{\"a\": {\"$not\": " RE("^ab", "") "}}", "{}", true},
    {"{\"a\": {\"%regex\": \"^[\\\\d]+$\"}}", "{\"a\": \"123\"}", true},   /* PCRE: \d inside [] */
    {"{\"a\": {\"%regex\": \"^(?:ab)+?$\"}}", "{\"a\": \"abab\"}", true},
    {"{\"a\": {\"%regex\": \"^.$\"}}", "{\"a\": \"\\n\"}", false},      /* . stops at \n without s */
    {"{\"a\": {\"%regex\": \"^.$\", \"%options\": \"s\"}}", "{\"a\": \"\\n\"}", true},
    {"{\"a\": {\"%regex\": \"^\\\\w+$\", \"%options\": \"u\"}}", "{\"a\": \"ab\"}", true},
    /* --- $not --- */
    {"{\"a\": {\"$not\": {\"$gt\": 5}}}", "{\"a\": 3}", true},
    {"{\"a\": {\"$not\": {\"$gt\": 5}}}", "{\"a\": 6}", false},
    {"{\"a\": {\"$not\": {\"$gt\": 5}}}", "{}", true},              /* unlike {$lte: 5} */
    {"{\"a\": {\"$not\": {\"$gt\": 5}}}", "{\"a\": \"x\"}", true},
    {"{\"a\": {\"$not\": {\"$gt\": 5}}}", "{\"a\": [1, 9]}", false},
    {"{\"a\": {\"$not\": {\"$gt\": 2, \"$lt\": 5}}}", "{\"a\": 3}", false},
    {"{\"a\": {\"$not\": {\"$gt\": 2, \"$lt\": 5}}}", "{\"a\": 7}", true},
    /* --- $and / $or / $nor --- */
    {"{\"$and\": [{\"a\": 1}, {\"b\": 2}]}", "{\"a\": 1, \"b\": 2}", true},
    {"{\"$and\": [{\"a\": 1}, {\"b\": 2}]}", "{\"a\": 1, \"b\": 3}", false},
    {"{\"$and\": [{\"a\": {\"$gt\": 1}}, {\"a\": {\"$lt\": 3}}]}", "{\"a\": 2}", true},
    {"{\"$or\": [{\"a\": 1}, {\"b\": 2}]}", "{\"b\": 2}", true},
    {"{\"$or\": [{\"a\": 1}, {\"b\": 2}]}", "{\"a\": 2, \"b\": 1}", false},
    {"{\"$or\": [{\"a\": 1}], \"b\": 2}", "{\"a\": 1, \"b\": 2}", true},
    {"{\"$or\": [{\"a\": 1}], \"b\": 2}", "{\"a\": 1, \"b\": 3}", false},
    {"{\"$nor\": [{\"a\": 1}, {\"b\": 2}]}", "{\"a\": 2}", true},
    {"{\"$nor\": [{\"a\": 1}, {\"b\": 2}]}", "{\"b\": 2}", false},
    {"{\"$nor\": [{\"a\": 1}]}", "{}", true},
    {"{\"$or\": [{\"$and\": [{\"a\": 1}, {\"b\": 1}]}, {\"c\": 1}]}", "{\"a\": 1, \"b\": 1}", true},
    {"{\"$comment\": \"hi\", \"a\": 1}", "{\"a\": 1}", true},
    {"{\"a\": 1, \"$and\": [{\"a\": {\"$gt\": 0}}]}", "{\"a\": 1}", true},
    /* --- $all --- */
    {"{\"a\": {\"$all\": [1, 2]}}", "{\"a\": [2, 3, 1]}", true},
    {"{\"a\": {\"$all\": [1, 2]}}", "{\"a\": [1, 3]}", false},
    {"{\"a\": {\"$all\": [1]}}", "{\"a\": 1}", true},     /* a scalar field can satisfy $all */
    {"{\"a\": {\"$all\": []}}", "{\"a\": [1]}", false},   /* empty $all matches nothing */
    {"{\"a\": {\"$all\": [[1, 2]]}}", "{\"a\": [1, 2]}", true},
    {"{\"a\": {\"$all\": [{\"$elemMatch\": {\"b\": 1}}, {\"$elemMatch\": {\"c\": 2}}]}}",
     "{\"a\": [{\"b\": 1}, {\"c\": 2}]}", true},
    {"{\"a\": {\"$all\": [{\"$elemMatch\": {\"b\": 1}}, {\"$elemMatch\": {\"c\": 2}}]}}",
     "{\"a\": [{\"b\": 1}]}", false},
    /* --- $size --- */
    {"{\"a\": {\"$size\": 2}}", "{\"a\": [1, 2]}", true},
    {"{\"a\": {\"$size\": 2}}", "{\"a\": [1]}", false},
    {"{\"a\": {\"$size\": 0}}", "{\"a\": []}", true},
    {"{\"a\": {\"$size\": 0}}", "{}", false},
    {"{\"a\": {\"$size\": 1}}", "{\"a\": 1}", false},
    {"{\"a\": {\"$size\": 1}}", "{\"a\": [[1, 2]]}", true},   /* the outer array only */
    {"{\"a\": {\"$size\": 2}}", "{\"a\": [[1, 2]]}", false},
    {"{\"a.b\": {\"$size\": 2}}", "{\"a\": [{\"b\": [1, 2]}, {\"b\": [1]}]}", true},
    {"{\"a\": {\"$size\": 2.0}}", "{\"a\": [1, 2]}", true},
    /* --- $elemMatch --- */
    {"{\"a\": {\"$elemMatch\": {\"$gt\": 5, \"$lt\": 7}}}", "{\"a\": [4, 8]}", false}, /* one element both */
    {"{\"a\": {\"$elemMatch\": {\"$gt\": 5, \"$lt\": 7}}}", "{\"a\": [4, 6]}", true},
    {"{\"a\": {\"$elemMatch\": {\"$gt\": 5}}}", "{\"a\": 6}", false},   /* not an array */
    {"{\"a\": {\"$elemMatch\": {\"$gt\": 5}}}", "{\"a\": [[6]]}", false},
    {"{\"a\": {\"$elemMatch\": {\"b\": 1, \"c\": 2}}}", "{\"a\": [{\"b\": 1}, {\"c\": 2}]}", false},
    {"{\"a\": {\"$elemMatch\": {\"b\": 1, \"c\": 2}}}", "{\"a\": [{\"b\": 1, \"c\": 2}]}", true},
    {"{\"a\": {\"$elemMatch\": {\"b\": {\"$gt\": 1}}}}", "{\"a\": [{\"b\": 0}, {\"b\": 3}]}", true},
    {"{\"a\": {\"$elemMatch\": {\"b\": 1}}}", "{\"a\": {\"b\": 1}}", false},
    {"{\"a\": {\"$elemMatch\": {\"$or\": [{\"b\": 1}, {\"c\": 1}]}}}", "{\"a\": [{\"c\": 1}]}", true},
    {"{\"a\": {\"$elemMatch\": {\"$not\": {\"$gt\": 5}}}}", "{\"a\": [9, 3]}", true},
    {"{\"a\": {\"$elemMatch\": {\"$not\": {\"$gt\": 5}}}}", "{\"a\": [9]}", false},
    {"{\"a\": {\"$elemMatch\": {\"$in\": [1, 2]}}}", "{\"a\": [3, 2]}", true},
    {"{\"a.b\": {\"$elemMatch\": {\"$eq\": 2}}}", "{\"a\": [{\"b\": [1]}, {\"b\": [2]}]}", true},
    {"{\"a\": {\"$elemMatch\": {\"0\": 1}}}", "{\"a\": [[1, 2]]}", true},   /* arrays read as documents */
    {"{\"a\": {\"$elemMatch\": {\"b.c\": 1}}}", "{\"a\": [{\"b\": {\"c\": 1}}]}", true},
    /* $expr: an aggregation expression over the whole document, truthy = match */
    {"{\"$expr\": {\"$gt\": [\"$a\", \"$b\"]}}", "{\"a\": 5, \"b\": 3}", true},   /* field to field */
    {"{\"$expr\": {\"$gt\": [\"$a\", \"$b\"]}}", "{\"a\": 2, \"b\": 3}", false},
    {"{\"$expr\": {\"$eq\": [\"$a\", \"$b\"]}}", "{\"a\": [1], \"b\": [1]}", true},  /* whole values, no array expansion */
    {"{\"$expr\": {\"$eq\": [\"$a\", 1]}}", "{\"a\": [1]}", false},
    {"{\"$expr\": \"$a\"}", "{\"a\": 0}", false},                                  /* coerceToBool */
    {"{\"$expr\": \"$a\"}", "{\"a\": \"\"}", true},
    {"{\"$expr\": \"$a\"}", "{}", false},
    {"{\"$expr\": {}}", "{}", true},                                                   /* {} is truthy */
    {"{\"b\": 1, \"$or\": [{\"$expr\": {\"$lt\": [\"$a\", 0]}}, {\"c\": 1}]}", "{\"a\": -1, \"b\": 1}", true},
    {"{\"$nor\": [{\"$expr\": {\"$lt\": [\"$a\", 0]}}]}", "{\"a\": -1}", false},
};


static void test_match_table(void) {
    int n = (int)(sizeof rows / sizeof rows[0]);
    for (int i = 0; i < n; i++) {
        bson_t filter, doc;
        query_t *q = NULL;
        ms_error_t err = {0};
        if (!t_json(rows[i].filter, &filter)) continue;
        if (!t_json(rows[i].doc, &doc)) {
            bson_destroy(&filter);
            continue;
        }
        int rc = query_compile(&filter, &q, &err);
        CHECK_MSG(rc == 0, "row %d: compile %s failed: %s", i, rows[i].filter, err.msg);
        if (rc == 0) {
            bool got = query_match(q, &doc);
            CHECK_MSG(got == rows[i].match, "row %d: %s on %s: got %d, expected %d", i,
                      rows[i].filter, rows[i].doc, got, rows[i].match);
        }
        query_free(q);
        bson_destroy(&filter);
        bson_destroy(&doc);
    }
    CHECK(n >= 150);
}

typedef struct erow {
    const char *filter;
    int code;
    const char *msg;   /* expected text (a prefix) */
} erow_t;

static const erow_t errors[] = {
    {"{\"a\": {\"$foo\": 1}}", 2, "unknown operator: $foo"},
    {"{\"$foo\": 1}", 2, "unknown top level operator: $foo"},
    {"{\"a\": {\"$gt\": 1, \"b\": 2}}", 2, "unknown operator: b"},
    {"{\"a\": {\"$in\": 1}}", 2, "$in needs an array"},
    {"{\"a\": {\"$nin\": {\"x\": 1}}}", 2, "$in needs an array"},
    {"{\"a\": {\"$size\": -1}}", 2, "$size may not be negative"},
    {"{\"a\": {\"$size\": 1.5}}", 2, "$size must be a whole number"},
    {"{\"a\": {\"$size\": \"2\"}}", 2, "$size needs a number"},
    {"{\"a\": {\"%type\": \"nope\"}}", 2, "Unknown type name alias: nope"},
    {"{\"a\": {\"%type\": 99}}", 2, "Invalid numerical type code: 99"},
    {"{\"a\": {\"%options\": \"i\"}}", 2, "$options needs a $regex"},
    {"{\"a\": {\"%regex\": \"(\"}}", 2, "Regular expression is invalid"},
    {"{\"a\": {\"%regex\": \"a\", \"%options\": \"q\"}}", 2, "invalid flag in regex options: q"},
    {"{\"a\": {\"%regex\": \"(a)\\\\1\"}}", 2, "Regular expression is invalid: back-reference \\1"},
    {"{\"a\": {\"%regex\": \"(a{1,700}){1,700}\"}}", 2, "Regular expression is invalid: pattern is too large"},
    {"{\"a\": {\"$in\": [" RE("x(?=y)", "") "]}}", 2, "Regular expression is invalid: lookahead"},
    {"{\"a\": {\"$not\": " RE("x(?<=y)", "") "}}", 2, "Regular expression is invalid: lookbehind"},
    {"{\"a\": " RE("a*+", "") "}", 2, "Regular expression is invalid: possessive"},
    {"{\"a\": {\"$not\": {}}}", 2, "$not cannot be empty"},
    {"{\"a\": {\"$not\": 5}}", 2, "$not needs a regex or a document"},
    {"{\"$and\": []}", 2, "$and/$or/$nor must be a nonempty array"},
    {"{\"$or\": {\"a\": 1}}", 2, "$or must be an array"},
    {"{\"$or\": [1]}", 2, "$or/$and/$nor entries need to be full objects"},
    {"{\"a\": {\"$elemMatch\": 1}}", 2, "$elemMatch needs an Object"},
    {"{\"a\": {\"$all\": 1}}", 2, "$all needs an array"},
    {"{\"$where\": \"1\"}", 2, "$where is not supported"},
    {"{\"$expr\": {\"$bogus\": 1}}", 168, "Unrecognized expression '$bogus'"},
    {"{\"$expr\": \"$$nope\"}", 17276, "Use of undefined variable: nope"},
    {"{\"a\": {\"$elemMatch\": {\"$expr\": true}}}", 2, "$expr can only be applied to the top-level document"},
    {"{\"a\": {\"$mod\": [2, 0]}}", 2, "$mod is not supported"},
    {"{\"a\": {\"$gt\": " RE("x", "") "}}", 2, "Can't have RegEx as arg to predicate"},
    {"{\"a\": {\"$in\": [{\"$gt\": 1}]}}", 2, "cannot nest $ under $in"},
    {"{\"$or\": [{\"a\": {\"$bad\": 1}}]}", 2, "unknown operator: $bad"},
};

static void test_compile_errors(void) {
    int n = (int)(sizeof errors / sizeof errors[0]);
    for (int i = 0; i < n; i++) {
        bson_t filter;
        query_t *q = NULL;
        ms_error_t err = {0};
        if (!t_json(errors[i].filter, &filter)) continue;
        int rc = query_compile(&filter, &q, &err);
        CHECK_MSG(rc == errors[i].code, "row %d: %s: rc %d, expected %d", i, errors[i].filter,
                  rc, errors[i].code);
        CHECK_MSG(rc == 0 || strncmp(err.msg, errors[i].msg, strlen(errors[i].msg)) == 0,
                  "row %d: message \"%s\", expected \"%s\"", i, err.msg, errors[i].msg);
        CHECK(rc != 0 || q != NULL);
        query_free(q);
        bson_destroy(&filter);
    }
}

static void test_is_empty(void) {
    bson_t f;
    query_t *q = NULL;
    CHECK(t_json("{}", &f));
    CHECK_INT(query_compile(&f, &q, NULL), 0);
    CHECK(query_is_empty(q));
    query_free(q);
    bson_destroy(&f);
    CHECK(t_json("{\"a\": 1}", &f));
    CHECK_INT(query_compile(&f, &q, NULL), 0);
    CHECK(!query_is_empty(q));
    query_free(q);
    bson_destroy(&f);
    query_free(NULL);
}

/* The compiled filter keeps its own copies: the filter may go away after compiling. */
static void test_filter_copied(void) {
    bson_t *f = bson_new_from_json((const uint8_t *)"{\"a\": {\"$in\": [1, 2]}, \"b\": \"x\"}", -1, NULL);
    query_t *q = NULL;
    CHECK_INT(query_compile(f, &q, NULL), 0);
    bson_destroy(f);
    bson_t d;
    CHECK(t_json("{\"a\": 2, \"b\": \"x\"}", &d));
    CHECK(query_match(q, &d));
    bson_destroy(&d);
    query_free(q);
}

/* A regex that runs past the deadline ends the evaluation with MaxTimeMSExpired; under
 * $not that must not turn into a match. query_match (no error path) is never cut short. */
static void test_regex_deadline(void) {
    static const char *const filters[] = {
        "{\"s\": {\"%regex\": \"(?:x?){300}x{300}y\"}}",
        "{\"s\": {\"$not\": " RE("(?:x?){300}x{300}y", "") "}}",
        "{\"s\": {\"$in\": [1, " RE("(?:x?){300}x{300}y", "") "]}}",
        "{\"$nor\": [{\"s\": " RE("(?:x?){300}x{300}y", "") "}]}",
        "{\"t\": {\"$elemMatch\": {\"s\": {\"$not\": " RE("(?:x?){300}x{300}y", "") "}}}}",
    };
    bson_t doc = BSON_INITIALIZER, arr, el;
    char *big = bson_malloc(20001);
    memset(big, 'x', 20000);
    big[20000] = '\0';
    BSON_APPEND_UTF8(&doc, "s", big);
    BSON_APPEND_ARRAY_BEGIN(&doc, "t", &arr);
    BSON_APPEND_DOCUMENT_BEGIN(&arr, "0", &el);
    BSON_APPEND_UTF8(&el, "s", big);
    bson_append_document_end(&arr, &el);
    bson_append_array_end(&doc, &arr);
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++) {
        bson_t f;
        query_t *q = NULL;
        ms_error_t err = {0};
        bool m = true;
        if (!t_json(filters[i], &f)) continue;
        CHECK_INT(query_compile(&f, &q, &err), 0);
        op_set_deadline_ms(time_mono_ms() - 1);
        CHECK_MSG(query_match_checked(q, &doc, &m, &err) == MS_ERR_MAX_TIME_MS_EXPIRED,
                  "filter %zu: not interrupted", i);
        CHECK_INT(err.code, MS_ERR_MAX_TIME_MS_EXPIRED);
        CHECK(m);   /* untouched */
        bool plain = query_match(q, &doc);   /* runs to the end despite the deadline */
        op_set_deadline_ms(0);
        CHECK_INT(query_match_checked(q, &doc, &m, &err), 0);
        CHECK_INT(m, plain);
        CHECK_INT(m, i == 1 || i == 3 || i == 4);
        query_free(q);
        bson_destroy(&f);
    }
    bson_free(big);
    bson_destroy(&doc);
}

/* An embedded NUL cannot be part of a $regex pattern (MongoDB refuses it too). */
static void test_regex_nul(void) {
    bson_t f = BSON_INITIALIZER, op;
    query_t *q = NULL;
    ms_error_t err = {0};
    BSON_APPEND_DOCUMENT_BEGIN(&f, "a", &op);
    bson_append_utf8(&op, "$regex", -1, "a\0b", 3);
    bson_append_document_end(&f, &op);
    CHECK_INT(query_compile(&f, &q, &err), MS_ERR_BAD_VALUE);
    CHECK_STR(err.msg, "Regular expression cannot contain an embedded null byte");
    bson_destroy(&f);
}

/* $expr with a command's `let`, and an evaluation error surfacing from the checked match. */
static void test_expr_let(void) {
    bson_t f, let, d1, d2;
    query_t *q = NULL;
    ms_error_t err = {0};
    bool m = false;
    t_json("{\"$expr\": {\"$gte\": [\"$a\", \"$$lim\"]}}", &f);
    t_json("{\"lim\": {\"$add\": [2, 3]}}", &let);
    t_json("{\"a\": 5}", &d1);
    t_json("{\"a\": 4}", &d2);
    CHECK(query_compile_let(&f, &let, &q, &err) == 0);
    if (q) {
        CHECK(query_match(q, &d1));
        CHECK(!query_match(q, &d2));
        query_free(q);
        q = NULL;
    }
    CHECK(query_compile_let(&f, NULL, &q, &err) == 17276);   /* no let: undefined */
    bson_destroy(&let);
    t_json("{\"Lim\": 1}", &let);
    CHECK(query_compile_let(&f, &let, &q, &err) == 9);       /* names start lower-case */
    bson_destroy(&let);
    bson_destroy(&f);
    t_json("{\"$expr\": {\"$add\": [\"$a\", 1]}}", &f);
    CHECK(query_compile(&f, &q, &err) == 0);
    bson_destroy(&d1);
    t_json("{\"a\": \"x\"}", &d1);
    if (q) {
        CHECK(query_match_checked(q, &d1, &m, &err) == 16554);   /* $add of a string */
        CHECK(!query_match(q, &d1));
        CHECK(query_match_checked(q, &d2, &m, &err) == 0 && m);
        query_free(q);
    }
    bson_destroy(&f);
    bson_destroy(&d1);
    bson_destroy(&d2);
}

T_MAIN(T_CASE(test_match_table), T_CASE(test_compile_errors), T_CASE(test_expr_let), T_CASE(test_is_empty),
       T_CASE(test_filter_copied), T_CASE(test_regex_deadline), T_CASE(test_regex_nul))
