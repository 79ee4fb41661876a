/*
 * test_common_krange.c — sets of encoded shard-key ranges (common/krange.c), the
 * $_shardKeyRanges of a narrowed multi-write: adjacent ranges merge, membership at the
 * bounds (lo in, hi out, empty bounds unbounded), the wire form round trip, and what the
 * parser refuses (not binData, empty, unsorted, overlapping, unknown fields).
 */
#include <stdint.h>
#include <string.h>

#include "common/krange.h"
#include "tests/unit/t.h"

static const uint8_t K1[] = {0x14, 1}, K2[] = {0x14, 2}, K3[] = {0x14, 3}, K4[] = {0x14, 4};

static void krange_add_merges_and_contains(void) {
    krset_t s = {0};
    krset_add(&s, NULL, 0, K1, sizeof K1);          /* (-inf, K1) */
    krset_add(&s, K2, sizeof K2, K3, sizeof K3);    /* [K2, K3) */
    krset_add(&s, K3, sizeof K3, K4, sizeof K4);    /* merges: [K2, K4) */
    CHECK_INT(s.n, 2);
    const uint8_t below[] = {0x01}, mid[] = {0x14, 2, 9}, top[] = {0x7f};
    CHECK(krset_contains(&s, below, sizeof below));
    CHECK(!krset_contains(&s, K1, sizeof K1));       /* hi is exclusive */
    CHECK(krset_contains(&s, K2, sizeof K2));        /* lo is inclusive */
    CHECK(krset_contains(&s, mid, sizeof mid));
    CHECK(krset_contains(&s, K3, sizeof K3));        /* inside the merged range */
    CHECK(!krset_contains(&s, K4, sizeof K4));
    CHECK(!krset_contains(&s, top, sizeof top));
    krset_add(&s, K4, sizeof K4, NULL, 0);           /* merges: [K2, +inf) */
    CHECK_INT(s.n, 2);
    CHECK(krset_contains(&s, top, sizeof top));
    krset_free(&s);
    CHECK(!krset_contains(&s, K2, sizeof K2));       /* empty set: nothing */
}

static void krange_wire_round_trip(void) {
    krset_t s = {0}, back = {0};
    bson_t d = BSON_INITIALIZER;
    bson_iter_t it;
    ms_error_t e = {0};
    krset_add(&s, NULL, 0, K1, sizeof K1);
    krset_add(&s, K2, sizeof K2, K3, sizeof K3);
    krset_add(&s, K4, sizeof K4, NULL, 0);
    krset_append(&d, "r", &s);
    CHECK(bson_iter_init_find(&it, &d, "r"));
    CHECK_INT(krset_parse(&it, "r", &back, &e), 0);
    CHECK_INT(back.n, 3);
    for (int i = 0; i < 3 && back.n == 3; i++) {
        CHECK_INT(back.r[i].lo.len, s.r[i].lo.len);
        CHECK_INT(back.r[i].hi.len, s.r[i].hi.len);
        CHECK(back.r[i].lo.len == 0 || !memcmp(back.r[i].lo.data, s.r[i].lo.data, s.r[i].lo.len));
        CHECK(back.r[i].hi.len == 0 || !memcmp(back.r[i].hi.data, s.r[i].hi.data, s.r[i].hi.len));
    }
    krset_free(&s);
    krset_free(&back);
    bson_destroy(&d);
}

/* Parses {r: <ranges built by fn>} and expects BadValue. */
static void refused(const char *what, void (*fn)(bson_t *arr)) {
    bson_t d = BSON_INITIALIZER, arr;
    bson_iter_t it;
    krset_t s = {0};
    ms_error_t e = {0};
    BSON_APPEND_ARRAY_BEGIN(&d, "r", &arr);
    fn(&arr);
    bson_append_array_end(&d, &arr);
    CHECK(bson_iter_init_find(&it, &d, "r"));
    int rc = krset_parse(&it, "r", &s, &e);
    CHECK_MSG(rc == MS_ERR_BAD_VALUE, "%s: rc %d (%s)", what, rc, e.msg);
    krset_free(&s);
    bson_destroy(&d);
}

static void range(bson_t *arr, const char *idx, const uint8_t *lo, size_t ll, const uint8_t *hi,
                  size_t hl) {
    bson_t r;
    BSON_APPEND_DOCUMENT_BEGIN(arr, idx, &r);
    if (lo) bson_append_binary(&r, "min", -1, BSON_SUBTYPE_BINARY, lo, (uint32_t)ll);
    if (hi) bson_append_binary(&r, "max", -1, BSON_SUBTYPE_BINARY, hi, (uint32_t)hl);
    bson_append_document_end(arr, &r);
}

static void r_unsorted(bson_t *a) {
    range(a, "0", K3, 2, K4, 2);
    range(a, "1", K1, 2, K2, 2);
}
static void r_overlap(bson_t *a) {
    range(a, "0", K1, 2, K3, 2);
    range(a, "1", K2, 2, K4, 2);
}
static void r_unbounded_then_more(bson_t *a) {
    range(a, "0", K1, 2, NULL, 0);
    range(a, "1", K3, 2, K4, 2);
}
static void r_empty(bson_t *a) { range(a, "0", K2, 2, K2, 2); }
static void r_inverted(bson_t *a) { range(a, "0", K3, 2, K1, 2); }
static void r_zero_length(bson_t *a) { range(a, "0", K1, 0, K2, 2); }
static void r_not_doc(bson_t *a) { BSON_APPEND_INT32(a, "0", 1); }
static void r_not_bin(bson_t *a) {
    bson_t r;
    BSON_APPEND_DOCUMENT_BEGIN(a, "0", &r);
    BSON_APPEND_UTF8(&r, "min", "k");
    bson_append_document_end(a, &r);
}
static void r_unknown_field(bson_t *a) {
    bson_t r;
    BSON_APPEND_DOCUMENT_BEGIN(a, "0", &r);
    BSON_APPEND_INT32(&r, "lo", 1);
    bson_append_document_end(a, &r);
}

static void krange_parse_refusals(void) {
    refused("unsorted", r_unsorted);
    refused("overlapping", r_overlap);
    refused("a range after an unbounded one", r_unbounded_then_more);
    refused("empty", r_empty);
    refused("min > max", r_inverted);
    refused("zero-length bound", r_zero_length);
    refused("not a document", r_not_doc);
    refused("not binData", r_not_bin);
    refused("unknown field", r_unknown_field);
    /* not an array at all */
    bson_t d = BSON_INITIALIZER;
    bson_iter_t it;
    krset_t s = {0};
    ms_error_t e = {0};
    BSON_APPEND_INT32(&d, "r", 1);
    CHECK(bson_iter_init_find(&it, &d, "r"));
    CHECK_INT(krset_parse(&it, "r", &s, &e), MS_ERR_BAD_VALUE);
    bson_destroy(&d);
}

T_MAIN(T_CASE(krange_add_merges_and_contains), T_CASE(krange_wire_round_trip),
       T_CASE(krange_parse_refusals))
