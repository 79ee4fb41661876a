/*
 * bench_common_keys.c — measures the key encoding (common/keys.c) on a mix of value
 * types: values encoded per second, and how fast two keys compare as encodings
 * (memcmp, what SQLite does) against bsonx_compare_values on the BSON values.
 * Prints a table and one final `BENCH_JSON {"keys": {...}}` line.
 */
#include <bson/bson.h>
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/keys.h"
#include "common/log.h"

#define NVALUES 4096

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A realistic shard-key mix: integers, doubles, strings, ObjectIds, dates, a few small
 * embedded documents. */
static void add_value(bson_t *doc, const char *key, uint64_t *s) {
    uint64_t r = rng(s);
    switch (r % 8) {
    case 0: bson_append_int32(doc, key, -1, (int32_t)(r >> 32)); break;
    case 1: bson_append_int64(doc, key, -1, (int64_t)rng(s)); break;
    case 2: bson_append_double(doc, key, -1, (double)(int64_t)rng(s) / 1e6); break;
    case 3: {
        char str[24];
        snprintf(str, sizeof str, "user%llu", (unsigned long long)(r % 1000000));
        bson_append_utf8(doc, key, -1, str, -1);
        break;
    }
    case 4: {
        bson_oid_t oid;
        uint64_t a = rng(s), b = rng(s);
        memcpy(oid.bytes, &a, 8);
        memcpy(oid.bytes + 8, &b, 4);
        bson_append_oid(doc, key, -1, &oid);
        break;
    }
    case 5: bson_append_date_time(doc, key, -1, (int64_t)(r % 2000000000000ull)); break;
    case 6: {
        bson_t sub;
        bson_append_document_begin(doc, key, -1, &sub);
        bson_append_utf8(&sub, "city", -1, (r & 1) ? "Paris" : "Oslo", -1);
        bson_append_int32(&sub, "zip", -1, (int32_t)(r >> 40));
        bson_append_document_end(doc, &sub);
        break;
    }
    default: bson_append_bool(doc, key, -1, r & 1); break;
    }
}

int main(void) {
    uint64_t seed = 42;
    bson_t doc = BSON_INITIALIZER;
    static struct {
        bson_iter_t it;
    } vals[NVALUES];
    static buf_t enc[NVALUES];
    ms_error_t err;
    for (int i = 0; i < NVALUES; i++) {
        char k[16];
        snprintf(k, sizeof k, "%d", i);
        add_value(&doc, k, &seed);
    }
    bson_iter_t it;
    bson_iter_init(&it, &doc);
    for (int i = 0; bson_iter_next(&it); i++) vals[i].it = it;

    /* Encode rate. */
    buf_t out = {0};
    const int enc_rounds = 500;
    long long t0 = time_mono_us();
    size_t bytes = 0;
    for (int r = 0; r < enc_rounds; r++)
        for (int i = 0; i < NVALUES; i++) {
            buf_reset(&out);
            if (keys_encode_value(&out, &vals[i].it, &err) != 0) return 1;
            bytes += out.len;
        }
    long long t1 = time_mono_us();
    double enc_s = (double)enc_rounds * NVALUES / ((double)(t1 - t0) / 1e6);
    double avg_len = (double)bytes / ((double)enc_rounds * NVALUES);
    for (int i = 0; i < NVALUES; i++) {
        buf_init(&enc[i]);
        keys_encode_value(&enc[i], &vals[i].it, &err);
    }

    /* Compare rates over the same pseudo-random pairs. */
    const long pairs = 20000000;
    volatile long sink = 0;
    uint64_t s = 7;
    t0 = time_mono_us();
    for (long p = 0; p < pairs; p++) {
        uint64_t r = rng(&s);
        const buf_t *a = &enc[r % NVALUES], *b = &enc[(r >> 32) % NVALUES];
        size_t n = a->len < b->len ? a->len : b->len;
        int c = memcmp(a->data, b->data, n);
        sink += c ? c : (long)a->len - (long)b->len;
    }
    t1 = time_mono_us();
    double memcmp_s = (double)pairs / ((double)(t1 - t0) / 1e6);
    s = 7;
    const long cpairs = pairs / 4;
    t0 = time_mono_us();
    for (long p = 0; p < cpairs; p++) {
        uint64_t r = rng(&s);
        sink += bsonx_compare_values(&vals[r % NVALUES].it, &vals[(r >> 32) % NVALUES].it);
    }
    t1 = time_mono_us();
    double bson_s = (double)cpairs / ((double)(t1 - t0) / 1e6);

    /* Hashing rate (hashed shard keys). */
    const int hash_rounds = 100;
    t0 = time_mono_us();
    for (int r = 0; r < hash_rounds; r++)
        for (int i = 0; i < NVALUES; i++) sink += keys_hash64(&vals[i].it);
    t1 = time_mono_us();
    double hash_s = (double)hash_rounds * NVALUES / ((double)(t1 - t0) / 1e6);
    (void)sink;

    printf("%-34s %14s\n", "measure (mixed value types)", "rate");
    printf("%-34s %12.0f/s\n", "encode values", enc_s);
    printf("%-34s %14.1f\n", "mean encoded bytes per value", avg_len);
    printf("%-34s %12.0f/s\n", "compare: memcmp of encodings", memcmp_s);
    printf("%-34s %12.0f/s\n", "compare: bsonx_compare_values", bson_s);
    printf("%-34s %12.0f/s\n", "hash64 (hashed keys)", hash_s);
    printf("BENCH_JSON {\"keys\": {\"encode_values_per_s\": %.0f, \"encoded_bytes_mean\": %.1f, "
           "\"memcmp_compares_per_s\": %.0f, \"bson_compares_per_s\": %.0f, "
           "\"hash64_per_s\": %.0f}}\n",
           enc_s, avg_len, memcmp_s, bson_s, hash_s);
    for (int i = 0; i < NVALUES; i++) buf_free(&enc[i]);
    buf_free(&out);
    bson_destroy(&doc);
    return 0;
}
