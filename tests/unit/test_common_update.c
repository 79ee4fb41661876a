/*
 * test_shardd_update.c — update operators (shardd/update.c): a table of (document,
 * update, expected document or error code) rows written from MongoDB's documented
 * behaviour, plus nModified detection, $setOnInsert, $currentDate and upsert seeds.
 * Runs in `make test`.
 */
#include "common/update.h"

#include <bson/bson.h>

#include "tests/unit/t.h"


typedef struct urow {
    const char *doc, *update;
    const char *result;   /* expected document (exact: types and field order), or NULL */
    int code;             /* expected error code when result is NULL */
} urow_t;

#define LONG(v) "{\"$numberLong\": \"" v "\"}"

static const urow_t rows[] = {
    /* --- replacement --- */
    {"{\"_id\": 1, \"a\": 1}", "{\"b\": 2}", "{\"_id\": 1, \"b\": 2}", 0},     /* _id kept, first */
    {"{\"_id\": 1, \"a\": 1}", "{\"b\": 2, \"_id\": 1}", "{\"b\": 2, \"_id\": 1}", 0},
    {"{\"_id\": 1, \"a\": 1}", "{\"_id\": 2}", NULL, 66},                      /* ImmutableField */
    {"{\"_id\": 1, \"a\": 1}", "{}", "{\"_id\": 1}", 0},
    {"{\"a\": 1}", "{\"b\": 1}", "{\"b\": 1}", 0},
    /* a replacement (first key not '$') with a '$' name: refused as it replaces (5.0+) */
    {"{\"_id\": 1}", "{\"a\": 1, \"$set\": {\"b\": 1}}", NULL, 52},
    /* a DBRef's parts in order are a replacement's only '$' names */
    {"{\"_id\": 1}", "{\"a\": 1, \"$ref\": \"c\", \"$id\": 2, \"$db\": \"d\"}",
     "{\"_id\": 1, \"a\": 1, \"$ref\": \"c\", \"$id\": 2, \"$db\": \"d\"}", 0},
    {"{\"_id\": 1}", "{\"a\": 1, \"$ref\": \"c\"}", NULL, 55},     /* $ref without $id */
    {"{\"_id\": 1}", "{\"a\": 1, \"$id\": 2}", NULL, 55},            /* $id without $ref */
    {"{\"_id\": 1}", "{\"a\": 1, \"$ref\": 1, \"$id\": 2}", NULL, 55},  /* $ref not a string */
    {"{\"_id\": 1}", "{\"a\": 1, \"$db\": \"d\"}", NULL, 55},        /* $db without $id */
    /* --- $set --- */
    {"{\"_id\": 1, \"a\": 1}", "{\"$set\": {\"a\": 2}}", "{\"_id\": 1, \"a\": 2}", 0},
    {"{\"_id\": 1, \"a\": 1, \"b\": 1}", "{\"$set\": {\"a\": \"x\"}}", "{\"_id\": 1, \"a\": \"x\", \"b\": 1}", 0}, /* keeps position */
    {"{\"_id\": 1}", "{\"$set\": {\"b\": 1, \"a\": 1}}", "{\"_id\": 1, \"a\": 1, \"b\": 1}", 0}, /* new fields in path order (5.0+) */
    {"{\"_id\": 1}", "{\"$set\": {\"a.b.c\": 1}}", "{\"_id\": 1, \"a\": {\"b\": {\"c\": 1}}}", 0},
    {"{\"_id\": 1, \"a\": {\"x\": 1}}", "{\"$set\": {\"a.b\": 2}}", "{\"_id\": 1, \"a\": {\"x\": 1, \"b\": 2}}", 0},
    {"{\"_id\": 1, \"a\": 5}", "{\"$set\": {\"a.b\": 2}}", NULL, 28},          /* PathNotViable */
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$set\": {\"a.1\": 9}}", "{\"_id\": 1, \"a\": [1, 9]}", 0},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"a.3\": 9}}", "{\"_id\": 1, \"a\": [1, null, null, 9]}", 0}, /* padded with null */
    {"{\"_id\": 1, \"a\": [{\"b\": 1}]}", "{\"$set\": {\"a.0.b\": 2}}", "{\"_id\": 1, \"a\": [{\"b\": 2}]}", 0},
    {"{\"_id\": 1, \"a\": [{\"b\": 1}]}", "{\"$set\": {\"a.1.b\": 2}}", "{\"_id\": 1, \"a\": [{\"b\": 1}, {\"b\": 2}]}", 0},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"a.x\": 2}}", NULL, 28},        /* field name into an array */
    {"{\"_id\": 1}", "{\"$set\": {\"a.0\": 1}}", "{\"_id\": 1, \"a\": {\"0\": 1}}", 0}, /* creates a document */
    {"{\"_id\": 1}", "{\"$set\": {\"_id\": 2}}", NULL, 66},
    {"{\"_id\": 1}", "{\"$set\": {\"_id\": 1}}", "{\"_id\": 1}", 0},          /* same value: allowed */
    {"{\"_id\": 1}", "{\"$set\": {\"_id\": 1.0}}", NULL, 66},                 /* a different type is a change */
    {"{\"_id\": {\"a\": 1}}", "{\"$set\": {\"_id.a\": 2}}", NULL, 66},
    {"{\"_id\": 1}", "{\"$set\": {\"a\": {\"b\": [1, {\"c\": 2}]}}}", "{\"_id\": 1, \"a\": {\"b\": [1, {\"c\": 2}]}}", 0},
    {"{\"_id\": 1}", "{\"$set\": {\"a\": 1, \"a.b\": 1}}", NULL, 40},        /* ConflictingUpdateOperators */
    {"{\"_id\": 1}", "{\"$set\": {\"a.b\": 1}, \"$inc\": {\"a\": 1}}", NULL, 40},
    {"{\"_id\": 1}", "{\"$set\": {\"a.b\": 1, \"a.c\": 1}}", "{\"_id\": 1, \"a\": {\"b\": 1, \"c\": 1}}", 0}, /* siblings are fine */
    {"{\"_id\": 1}", "{\"$set\": {\"ab\": 1, \"a\": 1}}", "{\"_id\": 1, \"a\": 1, \"ab\": 1}", 0},           /* "a" is not a prefix of "ab" */
    {"{\"_id\": 1}", "{\"$set\": {}}", NULL, 9},                               /* empty operator */
    {"{\"_id\": 1}", "{\"$set\": 1}", NULL, 9},
    {"{\"_id\": 1}", "{\"$foo\": {\"a\": 1}}", NULL, 9},
    {"{\"_id\": 1}", "{\"$set\": {\"a\": 1}, \"b\": 2}", NULL, 9},
    {"{\"_id\": 1}", "{\"$set\": {\"a.$\": 1}}", NULL, 2},                     /* "$" without a query match */
    {"{\"_id\": 1}", "{\"$set\": {\"a.$[]\": 1}}", NULL, 2},                   /* the array must exist */
    {"{\"_id\": 1}", "{\"$set\": {\"a.$[x]\": 1}}", NULL, 2},                  /* no filter for x */
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$inc\": {\"a.$[]\": 10}}", "{\"_id\": 1, \"a\": [11, 12]}", 0},
    {"{\"_id\": 1, \"a\": 5}", "{\"$inc\": {\"a.$[]\": 10}}", NULL, 2},       /* not an array */
    {"{\"_id\": 1}", "{\"$set\": {\"a..b\": 1}}", NULL, 56},
    {"{\"_id\": 1}", "{\"$set\": {\"a.10\": 1, \"a.9\": 1}}", "{\"_id\": 1, \"a\": {\"9\": 1, \"10\": 1}}", 0}, /* numeric order */
    {"{\"_id\": 1, \"a\": 1}", "{\"$set\": {\"a\": 1}}", "{\"_id\": 1, \"a\": 1}", 0},
    /* --- $unset --- */
    {"{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"$unset\": {\"a\": \"\"}}", "{\"_id\": 1, \"b\": 2}", 0},
    {"{\"_id\": 1}", "{\"$unset\": {\"a\": 1}}", "{\"_id\": 1}", 0},            /* missing: no-op */
    {"{\"_id\": 1, \"a\": {\"b\": 1, \"c\": 2}}", "{\"$unset\": {\"a.b\": 1}}", "{\"_id\": 1, \"a\": {\"c\": 2}}", 0},
    {"{\"_id\": 1, \"a\": [1, 2, 3]}", "{\"$unset\": {\"a.1\": 1}}", "{\"_id\": 1, \"a\": [1, null, 3]}", 0}, /* array keeps length */
    {"{\"_id\": 1, \"a\": 5}", "{\"$unset\": {\"a.b\": 1}}", "{\"_id\": 1, \"a\": 5}", 0},
    {"{\"_id\": 1}", "{\"$unset\": {\"_id\": 1}}", NULL, 66},
    /* --- $inc / $mul --- */
    {"{\"_id\": 1, \"a\": 1}", "{\"$inc\": {\"a\": 2}}", "{\"_id\": 1, \"a\": 3}", 0},
    {"{\"_id\": 1}", "{\"$inc\": {\"a\": 2}}", "{\"_id\": 1, \"a\": 2}", 0},
    {"{\"_id\": 1, \"a\": 1}", "{\"$inc\": {\"a\": -1.5}}", "{\"_id\": 1, \"a\": -0.5}", 0},
    {"{\"_id\": 1, \"a\": 1}", "{\"$inc\": {\"a\": " LONG("1") "}}", "{\"_id\": 1, \"a\": " LONG("2") "}", 0},
    {"{\"_id\": 1, \"a\": 2147483647}", "{\"$inc\": {\"a\": 1}}", "{\"_id\": 1, \"a\": " LONG("2147483648") "}", 0}, /* promoted */
    {"{\"_id\": 1, \"a\": -2147483648}", "{\"$inc\": {\"a\": -1}}", "{\"_id\": 1, \"a\": " LONG("-2147483649") "}", 0},
    {"{\"_id\": 1, \"a\": " LONG("9223372036854775807") "}", "{\"$inc\": {\"a\": 1}}", NULL, 2}, /* int64 overflow */
    {"{\"_id\": 1, \"a\": \"x\"}", "{\"$inc\": {\"a\": 1}}", NULL, 14},        /* TypeMismatch */
    {"{\"_id\": 1, \"a\": null}", "{\"$inc\": {\"a\": 1}}", NULL, 14},
    {"{\"_id\": 1}", "{\"$inc\": {\"a\": \"1\"}}", NULL, 14},
    {"{\"_id\": 1, \"a\": {\"b\": 1}}", "{\"$inc\": {\"a.b\": 5, \"a.c\": 1}}", "{\"_id\": 1, \"a\": {\"b\": 6, \"c\": 1}}", 0},
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$inc\": {\"a.1\": 1}}", "{\"_id\": 1, \"a\": [1, 3]}", 0},
    {"{\"_id\": 1, \"a\": 5}", "{\"$inc\": {\"a.b\": 1}}", NULL, 28},
    {"{\"_id\": 1, \"a\": 3}", "{\"$mul\": {\"a\": 2}}", "{\"_id\": 1, \"a\": 6}", 0},
    {"{\"_id\": 1, \"a\": 3}", "{\"$mul\": {\"a\": 0.5}}", "{\"_id\": 1, \"a\": 1.5}", 0},
    {"{\"_id\": 1}", "{\"$mul\": {\"a\": 5}}", "{\"_id\": 1, \"a\": 0}", 0},   /* missing → 0 of the type */
    {"{\"_id\": 1}", "{\"$mul\": {\"a\": 2.5}}", "{\"_id\": 1, \"a\": 0.0}", 0},
    {"{\"_id\": 1}", "{\"$mul\": {\"a\": " LONG("3") "}}", "{\"_id\": 1, \"a\": " LONG("0") "}", 0},
    {"{\"_id\": 1, \"a\": 65536}", "{\"$mul\": {\"a\": 65536}}", "{\"_id\": 1, \"a\": " LONG("4294967296") "}", 0},
    {"{\"_id\": 1, \"a\": true}", "{\"$mul\": {\"a\": 2}}", NULL, 14},
    {"{\"_id\": 1, \"a\": 1}", "{\"$mul\": {\"a\": \"2\"}}", NULL, 14},
    /* --- $min / $max --- */
    {"{\"_id\": 1, \"a\": 5}", "{\"$min\": {\"a\": 3}}", "{\"_id\": 1, \"a\": 3}", 0},
    {"{\"_id\": 1, \"a\": 5}", "{\"$min\": {\"a\": 7}}", "{\"_id\": 1, \"a\": 5}", 0},
    {"{\"_id\": 1, \"a\": 5}", "{\"$max\": {\"a\": 7}}", "{\"_id\": 1, \"a\": 7}", 0},
    {"{\"_id\": 1}", "{\"$max\": {\"a\": 7}}", "{\"_id\": 1, \"a\": 7}", 0},
    {"{\"_id\": 1, \"a\": 5}", "{\"$max\": {\"a\": \"x\"}}", "{\"_id\": 1, \"a\": \"x\"}", 0}, /* BSON order: strings > numbers */
    {"{\"_id\": 1, \"a\": 5}", "{\"$min\": {\"a\": null}}", "{\"_id\": 1, \"a\": null}", 0},
    {"{\"_id\": 1, \"a\": 5}", "{\"$min\": {\"a\": 5.0}}", "{\"_id\": 1, \"a\": 5}", 0},    /* equal: unchanged */
    /* --- $rename --- */
    {"{\"_id\": 1, \"a\": 1, \"b\": 2}", "{\"$rename\": {\"a\": \"c\"}}", "{\"_id\": 1, \"b\": 2, \"c\": 1}", 0},
    {"{\"_id\": 1, \"b\": 2}", "{\"$rename\": {\"a\": \"c\"}}", "{\"_id\": 1, \"b\": 2}", 0},   /* missing source */
    {"{\"_id\": 1, \"a\": 1, \"c\": 0}", "{\"$rename\": {\"a\": \"c\"}}", "{\"_id\": 1, \"c\": 1}", 0},
    {"{\"_id\": 1, \"a\": {\"b\": 1}}", "{\"$rename\": {\"a.b\": \"x.y\"}}", "{\"_id\": 1, \"a\": {}, \"x\": {\"y\": 1}}", 0},
    {"{\"_id\": 1, \"a\": 1}", "{\"$rename\": {\"a\": \"a\"}}", NULL, 2},
    {"{\"_id\": 1, \"a\": 1}", "{\"$rename\": {\"a\": 5}}", NULL, 2},
    {"{\"_id\": 1, \"a\": [{\"b\": 1}]}", "{\"$rename\": {\"a.0.b\": \"c\"}}", NULL, 2},
    {"{\"_id\": 1, \"a\": 1}", "{\"$rename\": {\"a\": \"b\"}, \"$set\": {\"b\": 2}}", NULL, 40},
    {"{\"_id\": 1, \"a\": 1}", "{\"$rename\": {\"_id\": \"b\"}}", NULL, 66},
    /* --- $push --- */
    {"{\"_id\": 1, \"a\": [1]}", "{\"$push\": {\"a\": 2}}", "{\"_id\": 1, \"a\": [1, 2]}", 0},
    {"{\"_id\": 1}", "{\"$push\": {\"a\": 2}}", "{\"_id\": 1, \"a\": [2]}", 0},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$push\": {\"a\": [2, 3]}}", "{\"_id\": 1, \"a\": [1, [2, 3]]}", 0}, /* one element */
    {"{\"_id\": 1, \"a\": [1]}", "{\"$push\": {\"a\": {\"$each\": [2, 3]}}}", "{\"_id\": 1, \"a\": [1, 2, 3]}", 0},
    {"{\"_id\": 1, \"a\": 1}", "{\"$push\": {\"a\": 2}}", NULL, 2},           /* not an array */
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$push\": {\"a\": {\"$each\": [9], \"$position\": 0}}}", "{\"_id\": 1, \"a\": [9, 1, 2]}", 0},
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$push\": {\"a\": {\"$each\": [9], \"$position\": -1}}}", "{\"_id\": 1, \"a\": [1, 9, 2]}", 0},
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$push\": {\"a\": {\"$each\": [9], \"$position\": 10}}}", "{\"_id\": 1, \"a\": [1, 2, 9]}", 0},
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$push\": {\"a\": {\"$each\": [3, 4], \"$slice\": 3}}}", "{\"_id\": 1, \"a\": [1, 2, 3]}", 0},
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$push\": {\"a\": {\"$each\": [3, 4], \"$slice\": -3}}}", "{\"_id\": 1, \"a\": [2, 3, 4]}", 0},
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$push\": {\"a\": {\"$each\": [], \"$slice\": 0}}}", "{\"_id\": 1, \"a\": []}", 0},
    {"{\"_id\": 1, \"a\": [3, 1]}", "{\"$push\": {\"a\": {\"$each\": [2], \"$sort\": 1}}}", "{\"_id\": 1, \"a\": [1, 2, 3]}", 0},
    {"{\"_id\": 1, \"a\": [3, 1]}", "{\"$push\": {\"a\": {\"$each\": [2], \"$sort\": -1, \"$slice\": 2}}}", "{\"_id\": 1, \"a\": [3, 2]}", 0},
    {"{\"_id\": 1, \"a\": [{\"s\": 3}, {\"s\": 1}]}", "{\"$push\": {\"a\": {\"$each\": [{\"s\": 2}], \"$sort\": {\"s\": 1}}}}",
     "{\"_id\": 1, \"a\": [{\"s\": 1}, {\"s\": 2}, {\"s\": 3}]}", 0},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$push\": {\"a\": {\"$each\": 2}}}", NULL, 2},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$push\": {\"a\": {\"$each\": [2], \"$bad\": 1}}}", NULL, 2},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$push\": {\"a\": {\"$each\": [2], \"$sort\": 2}}}", NULL, 2},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$push\": {\"a\": {\"$each\": [2], \"$slice\": 1.5}}}", NULL, 2},
    {"{\"_id\": 1, \"a\": {\"b\": [1]}}", "{\"$push\": {\"a.b\": 2}}", "{\"_id\": 1, \"a\": {\"b\": [1, 2]}}", 0},
    /* --- $addToSet --- */
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$addToSet\": {\"a\": 2}}", "{\"_id\": 1, \"a\": [1, 2]}", 0},
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$addToSet\": {\"a\": 3}}", "{\"_id\": 1, \"a\": [1, 2, 3]}", 0},
    {"{\"_id\": 1, \"a\": [1, 2]}", "{\"$addToSet\": {\"a\": 2.0}}", "{\"_id\": 1, \"a\": [1, 2]}", 0}, /* 2.0 == 2 */
    {"{\"_id\": 1}", "{\"$addToSet\": {\"a\": 1}}", "{\"_id\": 1, \"a\": [1]}", 0},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$addToSet\": {\"a\": {\"$each\": [1, 2, 2, 3]}}}", "{\"_id\": 1, \"a\": [1, 2, 3]}", 0},
    {"{\"_id\": 1, \"a\": [[1, 2]]}", "{\"$addToSet\": {\"a\": [1, 2]}}", "{\"_id\": 1, \"a\": [[1, 2]]}", 0},
    {"{\"_id\": 1, \"a\": [{\"x\": 1, \"y\": 2}]}", "{\"$addToSet\": {\"a\": {\"y\": 2, \"x\": 1}}}",
     "{\"_id\": 1, \"a\": [{\"x\": 1, \"y\": 2}, {\"y\": 2, \"x\": 1}]}", 0},   /* field order matters */
    {"{\"_id\": 1, \"a\": 5}", "{\"$addToSet\": {\"a\": 1}}", NULL, 2},
    /* --- $pull --- */
    {"{\"_id\": 1, \"a\": [1, 2, 1, 3]}", "{\"$pull\": {\"a\": 1}}", "{\"_id\": 1, \"a\": [2, 3]}", 0},
    {"{\"_id\": 1, \"a\": [1, 5, 6, 7]}", "{\"$pull\": {\"a\": {\"$gte\": 6}}}", "{\"_id\": 1, \"a\": [1, 5]}", 0},
    {"{\"_id\": 1, \"a\": [1, 5, 6, 7]}", "{\"$pull\": {\"a\": {\"$in\": [1, 7]}}}", "{\"_id\": 1, \"a\": [5, 6]}", 0},
    {"{\"_id\": 1, \"a\": [{\"s\": 8, \"i\": \"B\"}, {\"s\": 8, \"i\": \"C\"}]}", "{\"$pull\": {\"a\": {\"s\": 8, \"i\": \"B\"}}}",
     "{\"_id\": 1, \"a\": [{\"s\": 8, \"i\": \"C\"}]}", 0},   /* a document condition is a query on elements */
    {"{\"_id\": 1, \"a\": [{\"s\": 8, \"i\": \"B\"}, {\"s\": 9}]}", "{\"$pull\": {\"a\": {\"s\": 8}}}",
     "{\"_id\": 1, \"a\": [{\"s\": 9}]}", 0},
    {"{\"_id\": 1, \"a\": [\"apple\", \"pear\"]}", "{\"$pull\": {\"a\": {\"%regex\": \"^ap\"}}}", "{\"_id\": 1, \"a\": [\"pear\"]}", 0},
    {"{\"_id\": 1}", "{\"$pull\": {\"a\": 1}}", "{\"_id\": 1}", 0},
    {"{\"_id\": 1, \"a\": 1}", "{\"$pull\": {\"a\": 1}}", NULL, 2},
    {"{\"_id\": 1, \"a\": [[1, 2], 1]}", "{\"$pull\": {\"a\": [1, 2]}}", "{\"_id\": 1, \"a\": [1]}", 0},
    /* --- $pop --- */
    {"{\"_id\": 1, \"a\": [1, 2, 3]}", "{\"$pop\": {\"a\": 1}}", "{\"_id\": 1, \"a\": [1, 2]}", 0},
    {"{\"_id\": 1, \"a\": [1, 2, 3]}", "{\"$pop\": {\"a\": -1}}", "{\"_id\": 1, \"a\": [2, 3]}", 0},
    {"{\"_id\": 1, \"a\": []}", "{\"$pop\": {\"a\": 1}}", "{\"_id\": 1, \"a\": []}", 0},
    {"{\"_id\": 1}", "{\"$pop\": {\"a\": 1}}", "{\"_id\": 1}", 0},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$pop\": {\"a\": 2}}", NULL, 9},
    {"{\"_id\": 1, \"a\": 1}", "{\"$pop\": {\"a\": 1}}", NULL, 2},
    /* --- $setOnInsert (not an insert here) and $currentDate argument checks --- */
    {"{\"_id\": 1}", "{\"$setOnInsert\": {\"a\": 1}}", "{\"_id\": 1}", 0},
    {"{\"_id\": 1}", "{\"$setOnInsert\": {\"a\": 1}, \"$set\": {\"b\": 1}}", "{\"_id\": 1, \"b\": 1}", 0},
    {"{\"_id\": 1}", "{\"$currentDate\": {\"a\": {\"%type\": \"string\"}}}", NULL, 2},
    {"{\"_id\": 1}", "{\"$currentDate\": {\"a\": 5}}", NULL, 2},
    /* --- several operators: applied in path order, fields appended in that order --- */
    {"{\"_id\": 1, \"z\": 1}", "{\"$set\": {\"c\": 1}, \"$inc\": {\"b\": 1}, \"$push\": {\"a\": 1}}",
     "{\"_id\": 1, \"z\": 1, \"a\": [1], \"b\": 1, \"c\": 1}", 0},
    {"{\"_id\": 1, \"a\": 1, \"b\": [1]}", "{\"$unset\": {\"a\": 1}, \"$pop\": {\"b\": 1}}", "{\"_id\": 1, \"b\": []}", 0},
    /* --- something shaped like an array is a pipeline --- */
    {"{\"_id\": 1}", "{\"0\": {\"$set\": {\"a\": 1}}}", "{\"_id\": 1, \"a\": 1}", 0},
};

static void test_update_table(void) {
    int n = (int)(sizeof rows / sizeof rows[0]);
    for (int i = 0; i < n; i++) {
        bson_t doc, spec, out, want;
        update_t *u = NULL;
        ms_error_t err = {0};
        bool changed = false;
        if (!t_json(rows[i].doc, &doc)) continue;
        if (!t_json(rows[i].update, &spec)) {
            bson_destroy(&doc);
            continue;
        }
        int rc = update_compile(&spec, &u, &err);
        if (rc == 0) rc = update_apply(u, &doc, false, &out, &changed, &err);
        if (!rows[i].result) {
            CHECK_MSG(rc == rows[i].code, "row %d: %s on %s: rc %d (%s), expected %d", i, rows[i].update,
                      rows[i].doc, rc, err.msg, rows[i].code);
            if (rc == 0) bson_destroy(&out);
        } else if (rc != 0) {
            t_fail(__FILE__, __LINE__, "row %d: %s on %s failed: %d %s", i, rows[i].update, rows[i].doc, rc, err.msg);
        } else {
            t_json(rows[i].result, &want);
            char *got = bson_as_canonical_extended_json(&out, NULL);
            char *exp = bson_as_canonical_extended_json(&want, NULL);
            CHECK_MSG(strcmp(got, exp) == 0, "row %d: %s on %s\n    got      %s\n    expected %s", i,
                      rows[i].update, rows[i].doc, got, exp);
            bool same = bson_equal(&doc, &out);
            CHECK_MSG(changed == !same, "row %d: changed=%d but the document %s", i, changed,
                      same ? "is the same" : "differs");
            bson_free(got);
            bson_free(exp);
            bson_destroy(&want);
            bson_destroy(&out);
        }
        update_free(u);
        bson_destroy(&doc);
        bson_destroy(&spec);
    }
    CHECK(n >= 100);
}

/* An upsert that inserts its replacement keeps its '$' names, as an insert does (5.0+);
 * the same replacement of an existing document is refused. */
static void test_replacement_dollar_names_on_insert(void) {
    bson_t doc, spec, out;
    update_t *u = NULL;
    ms_error_t err = {0};
    CHECK(t_json("{}", &doc) && t_json("{\"a\": 1, \"$hotel\": 2}", &spec));
    CHECK_INT(update_compile(&spec, &u, &err), 0);
    CHECK_INT(update_apply(u, &doc, true, &out, NULL, &err), 0);
    CHECK(bson_has_field(&out, "$hotel"));
    bson_destroy(&out);
    CHECK_INT(update_apply(u, &doc, false, &out, NULL, &err), MS_ERR_DOLLAR_PREFIXED_FIELD_NAME);
    update_free(u);
    bson_destroy(&doc);
    bson_destroy(&spec);
}

static void test_messages(void) {
    static const struct {
        const char *doc, *update, *msg;
    } m[] = {
        {"{\"_id\": 1, \"a\": \"x\"}", "{\"$inc\": {\"a\": 1}}",
         "Cannot apply $inc to a value of non-numeric type. { \"_id\" : 1 } has the field 'a' of non-numeric type string"},
        {"{\"_id\": 1}", "{\"$set\": {\"a\": 1, \"a.b\": 1}}", "Updating the path 'a.b' would create a conflict at 'a'"},
        {"{\"_id\": 1}", "{\"$set\": {}}", "'$set' is empty. You must specify a field like so: {$set: {<field>: ...}}"},
        {"{\"_id\": 1}", "{\"$set\": {\"a.$\": 1}}", "The positional operator did not find the match needed from the query."},
        {"{\"_id\": 1}", "{\"$set\": {\"a.$[x]\": 1}}", "No array filter found for identifier 'x' in path 'a.$[x]'"},
        {"{\"_id\": 1}", "{\"$set\": {\"a.$[]\": 1}}", "The path 'a' must exist in the document in order to apply array updates."},
        {"{\"_id\": 1, \"a\": 5}", "{\"$set\": {\"a.b\": 1}}", "Cannot create field 'b' in element"},
        {"{\"_id\": 1}", "{\"$bad\": {\"a\": 1}}", "Unknown modifier: $bad"},
        {"{\"_id\": 1}", "{\"_id\": 2}", "After applying the update, the (immutable) field '_id' was found to have been altered"},
    };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        bson_t doc, spec, out;
        update_t *u = NULL;
        ms_error_t err = {0};
        t_json(m[i].doc, &doc);
        t_json(m[i].update, &spec);
        int rc = update_compile(&spec, &u, &err);
        if (rc == 0) rc = update_apply(u, &doc, false, &out, NULL, &err);
        CHECK(rc != 0);
        if (rc == 0) bson_destroy(&out);
        CHECK_MSG(strncmp(err.msg, m[i].msg, strlen(m[i].msg)) == 0, "message \"%s\", expected \"%s\"", err.msg, m[i].msg);
        update_free(u);
        bson_destroy(&doc);
        bson_destroy(&spec);
    }
}

static void test_set_on_insert(void) {
    bson_t doc, spec, out, want;
    update_t *u = NULL;
    bool changed;
    t_json("{\"_id\": 7, \"k\": 1}", &doc);
    t_json("{\"$setOnInsert\": {\"c\": 0}, \"$inc\": {\"n\": 1}}", &spec);
    CHECK_INT(update_compile(&spec, &u, NULL), 0);
    CHECK(!update_is_replacement(u));
    CHECK_INT(update_apply(u, &doc, true, &out, &changed, NULL), 0);
    t_json("{\"_id\": 7, \"k\": 1, \"c\": 0, \"n\": 1}", &want);
    CHECK(bson_equal(&out, &want));
    CHECK(changed);
    bson_destroy(&out);
    bson_destroy(&want);
    update_free(u);
    bson_destroy(&doc);
    bson_destroy(&spec);
}

static void test_current_date(void) {
    bson_t doc, spec, out;
    bson_iter_t it;
    update_t *u = NULL;
    t_json("{\"_id\": 1}", &doc);
    t_json("{\"$currentDate\": {\"d\": true, \"t\": {\"%type\": \"timestamp\"}, \"x\": {\"%type\": \"date\"}}}", &spec);
    CHECK_INT(update_compile(&spec, &u, NULL), 0);
    CHECK_INT(update_apply(u, &doc, false, &out, NULL, NULL), 0);
    CHECK(bson_iter_init_find(&it, &out, "d") && BSON_ITER_HOLDS_DATE_TIME(&it) && bson_iter_date_time(&it) > 1600000000000LL);
    CHECK(bson_iter_init_find(&it, &out, "t") && BSON_ITER_HOLDS_TIMESTAMP(&it));
    CHECK(bson_iter_init_find(&it, &out, "x") && BSON_ITER_HOLDS_DATE_TIME(&it));
    bson_destroy(&out);
    update_free(u);
    bson_destroy(&doc);
    bson_destroy(&spec);
}

static const struct {
    const char *query, *seed;
    int code;
} seeds[] = {
    {"{\"a\": 1}", "{\"a\": 1}", 0},
    {"{\"a\": {\"$eq\": 1}, \"b\": {\"$gt\": 5}}", "{\"a\": 1}", 0},
    {"{\"a.b\": 1, \"a.c\": \"x\"}", "{\"a\": {\"b\": 1, \"c\": \"x\"}}", 0},
    {"{\"$and\": [{\"a\": 1}, {\"b\": 2}], \"_id\": 5}", "{\"a\": 1, \"b\": 2, \"_id\": 5}", 0},
    {"{\"$or\": [{\"a\": 1}], \"x\": {\"%regex\": \"^a\"}}", "{}", 0},
    {"{\"a\": {\"b\": 1}}", "{\"a\": {\"b\": 1}}", 0},
    {"{\"a\": 1, \"$and\": [{\"a\": 1}]}", NULL, 54},
    {"{\"a\": 1, \"a.b\": 1}", NULL, 28},
};

static void test_upsert_seed(void) {
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        bson_t q, out, want;
        ms_error_t err = {0};
        t_json(seeds[i].query, &q);
        int rc = update_upsert_seed(&q, &out, &err);
        if (!seeds[i].seed) {
            CHECK_MSG(rc == seeds[i].code, "seed %zu: rc %d expected %d", i, rc, seeds[i].code);
            if (rc == 0) bson_destroy(&out);
        } else {
            CHECK_MSG(rc == 0, "seed %zu: %s", i, err.msg);
            t_json(seeds[i].seed, &want);
            if (rc == 0) {
                char *g = bson_as_relaxed_extended_json(&out, NULL);
                CHECK_MSG(bson_equal(&out, &want), "seed %zu: got %s", i, g);
                bson_free(g);
                bson_destroy(&out);
            }
            bson_destroy(&want);
        }
        bson_destroy(&q);
    }
}

/* update_compile_opts rows: a pipeline (array, given as {"p": [...]}) or operators, with
 * arrayFilters / query / let. */
typedef struct orow {
    const char *doc, *update, *array_filters, *query, *let;
    const char *result;
    int code;
} orow_t;

static const orow_t orows[] = {
    /* arrayFilters */
    {"{\"_id\": 1, \"a\": [1, 5, 9]}", "{\"$set\": {\"a.$[x]\": 0}}", "[{\"x\": {\"$gte\": 5}}]", NULL, NULL,
     "{\"_id\": 1, \"a\": [1, 0, 0]}", 0},
    {"{\"_id\": 1, \"a\": [{\"b\": 1, \"c\": 1}, {\"b\": 2, \"c\": 1}]}", "{\"$inc\": {\"a.$[e].c\": 5}}",
     "[{\"e.b\": 2}]", NULL, NULL, "{\"_id\": 1, \"a\": [{\"b\": 1, \"c\": 1}, {\"b\": 2, \"c\": 6}]}", 0},
    {"{\"_id\": 1, \"a\": [{\"b\": [1, 7]}, {\"b\": [8]}]}", "{\"$mul\": {\"a.$[].b.$[v]\": 2}}",
     "[{\"v\": {\"$gt\": 5}}]", NULL, NULL, "{\"_id\": 1, \"a\": [{\"b\": [1, 14]}, {\"b\": [16]}]}", 0}, /* nested */
    {"{\"_id\": 1, \"a\": [{\"b\": 1}, {\"b\": 2}]}", "{\"$unset\": {\"a.$[e].b\": 1}}", "[{\"e.b\": 1}]", NULL, NULL,
     "{\"_id\": 1, \"a\": [{}, {\"b\": 2}]}", 0},
    {"{\"_id\": 1, \"a\": [{\"t\": [1]}, {\"t\": []}]}", "{\"$push\": {\"a.$[].t\": 3}}", "[]", NULL, NULL,
     "{\"_id\": 1, \"a\": [{\"t\": [1, 3]}, {\"t\": [3]}]}", 0},
    {"{\"_id\": 1, \"a\": [3, 8]}", "{\"$max\": {\"a.$[x]\": 5}}", "[{\"x\": {\"$lt\": 5}}]", NULL, NULL,
     "{\"_id\": 1, \"a\": [5, 8]}", 0},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"a.$[x]\": 0}}", "[{\"x\": 1}, {\"y\": 1}]", NULL, NULL, NULL, 9}, /* y unused */
    {"{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"a.$[x]\": 0}}", "[{\"x\": 1}, {\"x\": 2}]", NULL, NULL, NULL, 9}, /* twice */
    {"{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"a.$[X]\": 0}}", "[{\"X\": 1}]", NULL, NULL, NULL, 2},  /* bad name */
    {"{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"a.$[x]\": 0}}", "[{\"x\": 1, \"y\": 1}]", NULL, NULL, NULL, 9},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"a.$[x]\": 0}}", "[{}]", NULL, NULL, NULL, 9},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"$[x]\": 0}}", "[{\"x\": 1}]", NULL, NULL, NULL, 2},   /* first position */
    {"{\"_id\": 1, \"a\": [1]}", "{\"b\": 1}", "[{\"x\": 1}]", NULL, NULL, NULL, 9},                  /* replacement */
    {"{\"_id\": 1, \"a\": [1]}", "{\"$rename\": {\"a.$[]\": \"b\"}}", "[]", NULL, NULL, NULL, 2},
    /* "$": the element the query's predicates on the array pick */
    {"{\"_id\": 1, \"a\": [{\"b\": 1}, {\"b\": 2}, {\"b\": 2}]}", "{\"$set\": {\"a.$.c\": 1}}", NULL,
     "{\"_id\": 1, \"a.b\": 2}", NULL, "{\"_id\": 1, \"a\": [{\"b\": 1}, {\"b\": 2, \"c\": 1}, {\"b\": 2}]}", 0},
    {"{\"_id\": 1, \"a\": [4, 6, 8]}", "{\"$inc\": {\"a.$\": 1}}", NULL, "{\"a\": {\"$gt\": 5}}", NULL,
     "{\"_id\": 1, \"a\": [4, 7, 8]}", 0},
    {"{\"_id\": 1, \"a\": [{\"b\": 1, \"c\": 2}, {\"b\": 2, \"c\": 1}]}", "{\"$set\": {\"a.$.d\": 0}}", NULL,
     "{\"a\": {\"$elemMatch\": {\"b\": 2, \"c\": 1}}}", NULL,
     "{\"_id\": 1, \"a\": [{\"b\": 1, \"c\": 2}, {\"b\": 2, \"c\": 1, \"d\": 0}]}", 0},
    {"{\"_id\": 1, \"a\": [1]}", "{\"$set\": {\"a.$\": 0}}", NULL, "{\"_id\": 1}", NULL, NULL, 2},  /* no predicate on a */
    {"{\"_id\": 1, \"a\": [[1]]}", "{\"$set\": {\"a.$.$\": 0}}", NULL, "{\"a\": [1]}", NULL, NULL, 2},
    /* pipelines */
    {"{\"_id\": 1, \"a\": 2, \"b\": 3}", "{\"p\": [{\"$set\": {\"s\": {\"$add\": [\"$a\", \"$b\"]}}}, {\"$unset\": \"b\"}]}",
     NULL, NULL, NULL, "{\"_id\": 1, \"a\": 2, \"s\": 5}", 0},
    {"{\"_id\": 1, \"a\": 2}", "{\"p\": [{\"$set\": {\"m\": {\"$multiply\": [\"$a\", \"$$k\"]}}}]}", NULL, NULL,
     "{\"k\": 10}", "{\"_id\": 1, \"a\": 2, \"m\": 20}", 0},
    {"{\"_id\": 1, \"a\": {\"x\": 1}}", "{\"p\": [{\"$replaceWith\": \"$a\"}]}", NULL, NULL, NULL,
     "{\"_id\": 1, \"x\": 1}", 0},                                           /* _id kept */
    {"{\"_id\": 1, \"a\": {\"x\": 1}}", "{\"p\": [{\"$replaceRoot\": {\"newRoot\": {\"_id\": 1, \"y\": \"$a.x\"}}}]}",
     NULL, NULL, NULL, "{\"_id\": 1, \"y\": 1}", 0},
    {"{\"_id\": 1, \"a\": 5}", "{\"p\": [{\"$replaceWith\": \"$a\"}]}", NULL, NULL, NULL, NULL, 40228},
    {"{\"_id\": 1, \"a\": 2}", "{\"p\": [{\"$project\": {\"a\": 0}}]}", NULL, NULL, NULL, "{\"_id\": 1}", 0},
    {"{\"_id\": 1}", "{\"p\": [{\"$set\": {\"_id\": 2}}]}", NULL, NULL, NULL, NULL, 66},
    {"{\"_id\": 1}", "{\"p\": [{\"$match\": {}}]}", NULL, NULL, NULL, NULL, 72},
    {"{\"_id\": 1}", "{\"p\": [{\"$group\": {\"_id\": 1}}]}", NULL, NULL, NULL, NULL, 72},
    {"{\"_id\": 1}", "{\"p\": [{\"$set\": {\"a\": \"$$undefinedVar\"}}]}", NULL, NULL, NULL, NULL, 17276},
    {"{\"_id\": 1}", "{\"p\": [{\"$set\": {\"a\": 1}}]}", "[{\"x\": 1}]", NULL, NULL, NULL, 9},
    {"{\"_id\": 1}", "{\"p\": [{\"$set\": {\"a\": 1}}]}", NULL, NULL, "{\"Bad\": 1}", NULL, 9},
};

static void test_update_opts(void) {
    for (size_t i = 0; i < sizeof orows / sizeof orows[0]; i++) {
        const orow_t *r = &orows[i];
        bson_t doc, spec, q, let, out, want, pipe;
        update_opts_t o = {0};
        update_t *u = NULL;
        ms_error_t err = {0};
        bool changed, is_pipe = false;
        bson_iter_t it;
        t_json(r->doc, &doc);
        t_json(r->update, &spec);
        bson_init(&pipe);
        if (bson_iter_init_find(&it, &spec, "p")) {
            bson_t v;
            uint32_t len;
            const uint8_t *data;
            bson_iter_array(&it, &len, &data);
            bson_init_static(&v, data, len);
            bson_copy_to_excluding_noinit(&v, &pipe, "", NULL);
            is_pipe = true;
        }
        if (r->array_filters) {
            bson_t w;
            char *j = bson_strdup_printf("{\"a\": %s}", r->array_filters);
            t_json(j, &w);
            bson_free(j);
            bson_iter_init_find(&it, &w, "a");
            uint32_t len;
            const uint8_t *data;
            bson_iter_array(&it, &len, &data);
            bson_t v;
            bson_init_static(&v, data, len);
            o.array_filters = bson_copy(&v);
            bson_destroy(&w);
        }
        if (r->query) {
            t_json(r->query, &q);
            o.query = &q;
        }
        if (r->let) {
            t_json(r->let, &let);
            o.let = &let;
        }
        int rc = update_compile_opts(is_pipe ? &pipe : &spec, is_pipe, &o, &u, &err);
        if (rc == 0) rc = update_apply(u, &doc, false, &out, &changed, &err);
        if (!r->result) {
            CHECK_MSG(rc == r->code, "orow %zu: rc %d expected %d (%s)", i, rc, r->code, err.msg);
            if (rc == 0) bson_destroy(&out);
        } else {
            CHECK_MSG(rc == 0, "orow %zu: %s", i, err.msg);
            if (rc == 0) {
                t_json(r->result, &want);
                char *g = bson_as_relaxed_extended_json(&out, NULL);
                CHECK_MSG(bson_equal(&out, &want), "orow %zu: got %s", i, g);
                bson_free(g);
                bson_destroy(&want);
                bson_destroy(&out);
            }
        }
        update_free(u);
        if (r->array_filters) bson_destroy((bson_t *)o.array_filters);
        if (r->query) bson_destroy(&q);
        if (r->let) bson_destroy(&let);
        bson_destroy(&pipe);
        bson_destroy(&spec);
        bson_destroy(&doc);
    }
}

T_MAIN(T_CASE(test_update_table), T_CASE(test_replacement_dollar_names_on_insert), T_CASE(test_update_opts), T_CASE(test_messages), T_CASE(test_set_on_insert),
       T_CASE(test_current_date), T_CASE(test_upsert_seed))
