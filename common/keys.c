/*
 * keys.c — the key encoding, key patterns, shard-key extraction and MongoDB's hashed
 * key, linked into every process through libcommon (the config server stores chunk
 * bounds with it, shard daemons index documents with it, routers target with it).
 *
 * A value becomes bytes whose memcmp order is MongoDB's BSON comparison order
 * (docs/key-encoding.md has the layout byte by byte). Every encoding is prefix-free —
 * no encoding is a proper prefix of another — so compound keys are concatenations
 * and a descending field is the complement of its bytes.
 */
#include "common/keys.h"

#include <math.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/md5.h"

/* Type bytes, in canonical-rank order. 0x00 never starts a value: it ends a document,
 * so a shorter document sorts before a longer one whatever the longer one holds next. */
enum {
    KT_END = 0x00,
    KT_MINKEY = 0x01,
    KT_UNDEFINED = 0x08,
    KT_NULL = 0x0A,
    /* Numbers (rank 10): the class is folded into the type byte. */
    KT_NUM_NAN = 0x10,
    KT_NUM_NEG_INF = 0x11,
    KT_NUM_NEG = 0x12,
    KT_NUM_ZERO = 0x13,
    KT_NUM_POS = 0x14,
    KT_NUM_POS_INF = 0x15,
    KT_STRING = 0x20,  /* string and symbol share rank 15 and compare as equals */
    KT_OBJECT = 0x28,
    KT_ARRAY = 0x30,
    KT_BINDATA = 0x38,
    KT_OID = 0x40,
    KT_FALSE = 0x48,
    KT_TRUE = 0x49,
    KT_DATE = 0x50,
    KT_TIMESTAMP = 0x54,
    KT_REGEX = 0x58,
    KT_DBPOINTER = 0x60,
    KT_CODE = 0x68,
    KT_CODEWSCOPE = 0x70,
    KT_MAXKEY = 0x7F,
};

/* Exponent bias of the number payload: exponents run from -1074 (smallest subnormal
 * double) to 1023, all well inside 16 bits once biased. */
#define KEYS_EXP_BIAS 0x8000

/* Nesting bound for encode / decode / hash recursion. Documents that passed
 * bsonx_view are at most MS_MSG_DEPTH_MAX deep, so a value inside one is shallower. */
#define KEYS_DEPTH_MAX MS_MSG_DEPTH_MAX

/* The byte that stands for a canonical rank inside documents (the first type byte of
 * that rank), so element order is rank, then field name, then value. */
static uint8_t rank_byte(bson_type_t t) {
    switch (t) {
    case BSON_TYPE_MINKEY: return KT_MINKEY;
    case BSON_TYPE_UNDEFINED: return KT_UNDEFINED;
    case BSON_TYPE_NULL: return KT_NULL;
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128: return KT_NUM_NAN;
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: return KT_STRING;
    case BSON_TYPE_DOCUMENT: return KT_OBJECT;
    case BSON_TYPE_ARRAY: return KT_ARRAY;
    case BSON_TYPE_BINARY: return KT_BINDATA;
    case BSON_TYPE_OID: return KT_OID;
    case BSON_TYPE_BOOL: return KT_FALSE;
    case BSON_TYPE_DATE_TIME: return KT_DATE;
    case BSON_TYPE_TIMESTAMP: return KT_TIMESTAMP;
    case BSON_TYPE_REGEX: return KT_REGEX;
    case BSON_TYPE_DBPOINTER: return KT_DBPOINTER;
    case BSON_TYPE_CODE: return KT_CODE;
    case BSON_TYPE_CODEWSCOPE: return KT_CODEWSCOPE;
    case BSON_TYPE_MAXKEY: return KT_MAXKEY;
    case BSON_TYPE_EOD: break;
    }
    return KT_END;
}

/* The rank byte a value's own type byte belongs to (for decode-side checks). */
static uint8_t rank_byte_of_tag(uint8_t tag) {
    if (tag >= KT_NUM_NAN && tag <= KT_NUM_POS_INF) return KT_NUM_NAN;
    if (tag == KT_TRUE) return KT_FALSE;
    return tag;
}

/* ---- encoding --------------------------------------------------------------------- */

/* Bytes with 0x00 escaped as 0x00 0xFF, ended by 0x00 0x00: memcmp order is byte-wise
 * string order with the shorter string first, and no encoding is a prefix of another. */
static void put_escaped(buf_t *out, const uint8_t *p, size_t n) {
    size_t run = 0;
    buf_reserve(out, n + 2);
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0) continue;
        buf_put(out, p + run, i - run);
        buf_put_u8(out, 0x00);
        buf_put_u8(out, 0xFF);
        run = i + 1;
    }
    buf_put(out, p + run, n - run);
    buf_put_u8(out, 0x00);
    buf_put_u8(out, 0x00);
}

/* A finite non-zero number as magnitude = mant * 2^(exp2 - 63) with mant's top bit set:
 * one exact form for int32, int64 and double alike, so equal values encode equally.
 * Negative numbers complement the payload so larger magnitudes sort lower. */
static void put_number_parts(buf_t *out, bool neg, int exp2, uint64_t mant) {
    uint8_t p[10];
    uint16_t e = (uint16_t)(exp2 + KEYS_EXP_BIAS);
    p[0] = (uint8_t)(e >> 8);
    p[1] = (uint8_t)e;
    for (int i = 0; i < 8; i++) p[2 + i] = (uint8_t)(mant >> (56 - 8 * i));
    if (neg)
        for (int i = 0; i < 10; i++) p[i] = (uint8_t)~p[i];
    buf_put_u8(out, neg ? KT_NUM_NEG : KT_NUM_POS);
    buf_put(out, p, sizeof p);
}

void keys_encode_int64(buf_t *out, int64_t v) {
    if (v == 0) {
        buf_put_u8(out, KT_NUM_ZERO);
        return;
    }
    bool neg = v < 0;
    uint64_t u = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;  /* INT64_MIN → 2^63 */
    int lz = __builtin_clzll(u);
    put_number_parts(out, neg, 63 - lz, u << lz);
}

static void encode_double(buf_t *out, double d) {
    if (isnan(d)) {
        buf_put_u8(out, KT_NUM_NAN);
    } else if (isinf(d)) {
        buf_put_u8(out, d < 0 ? KT_NUM_NEG_INF : KT_NUM_POS_INF);
    } else if (d == 0.0) {
        buf_put_u8(out, KT_NUM_ZERO);  /* -0.0 too */
    } else {
        int x;
        double f = frexp(fabs(d), &x);  /* |d| = f * 2^x, f in [0.5, 1) */
        /* f * 2^64 is an integer in [2^63, 2^64): f has at most 53 significant bits. */
        uint64_t mant = (uint64_t)ldexp(f, 64);
        put_number_parts(out, d < 0, x - 1, mant);
    }
}

void keys_encode_minkey(buf_t *out) { buf_put_u8(out, KT_MINKEY); }
void keys_encode_maxkey(buf_t *out) { buf_put_u8(out, KT_MAXKEY); }
void keys_encode_null(buf_t *out) { buf_put_u8(out, KT_NULL); }

static int encode_value(buf_t *out, const bson_iter_t *it, int depth, const char *field,
                        ms_error_t *err);

int keys_decimal_refused(ms_error_t *err, const char *field) {
    return err_set(err, MS_ERR_BAD_VALUE,
                   "decimal128 value in field '%s' cannot be used in an index key or shard key "
                   "(minishard does not support decimal128 in keys)",
                   field ? field : "?");
}

static bool holds_decimal(const bson_iter_t *it, int depth) {
    bson_iter_t child;
    if (BSON_ITER_HOLDS_DECIMAL128(it)) return true;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) && !BSON_ITER_HOLDS_ARRAY(it)) return false;
    if (depth > KEYS_DEPTH_MAX || !bson_iter_recurse(it, &child)) return false;
    while (bson_iter_next(&child))
        if (holds_decimal(&child, depth + 1)) return true;
    return false;
}

bool keys_holds_decimal(const bson_iter_t *it) { return holds_decimal(it, 0); }

/* Elements of a document body, then KT_END. */
static int encode_doc_body(buf_t *out, bson_iter_t *child, int depth, const char *field,
                           ms_error_t *err) {
    if (depth > KEYS_DEPTH_MAX)
        return err_set(err, MS_ERR_BAD_VALUE, "key value nested deeper than %d levels",
                       KEYS_DEPTH_MAX);
    while (bson_iter_next(child)) {
        const char *k = bson_iter_key(child);
        buf_put_u8(out, rank_byte(bson_iter_type(child)));
        put_escaped(out, (const uint8_t *)k, strlen(k));
        int rc = encode_value(out, child, depth, field, err);
        if (rc) return rc;
    }
    buf_put_u8(out, KT_END);
    return 0;
}

/* field: the key field the value belongs to, named in the decimal128 refusal. */
static int encode_value(buf_t *out, const bson_iter_t *it, int depth, const char *field,
                        ms_error_t *err) {
    bson_type_t t = bson_iter_type(it);
    switch (t) {
    case BSON_TYPE_MINKEY: buf_put_u8(out, KT_MINKEY); return 0;
    case BSON_TYPE_MAXKEY: buf_put_u8(out, KT_MAXKEY); return 0;
    case BSON_TYPE_UNDEFINED: buf_put_u8(out, KT_UNDEFINED); return 0;
    case BSON_TYPE_NULL: buf_put_u8(out, KT_NULL); return 0;
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64: keys_encode_int64(out, bson_iter_as_int64(it)); return 0;
    case BSON_TYPE_DOUBLE: encode_double(out, bson_iter_double(it)); return 0;
    case BSON_TYPE_DECIMAL128:
        /* No exact place among doubles and int64s in a memcmp order without
         * arbitrary-precision arithmetic: refused (docs/key-encoding.md "decimal128"). */
        return keys_decimal_refused(err, field);
    case BSON_TYPE_UTF8:
    case BSON_TYPE_SYMBOL: {
        uint32_t n = 0;
        const char *s = t == BSON_TYPE_UTF8 ? bson_iter_utf8(it, &n) : bson_iter_symbol(it, &n);
        buf_put_u8(out, KT_STRING);
        put_escaped(out, (const uint8_t *)s, n);
        return 0;
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        bson_iter_t child;
        if (!bson_iter_recurse(it, &child))
            return err_set(err, MS_ERR_INVALID_BSON, "invalid embedded document in key");
        buf_put_u8(out, t == BSON_TYPE_DOCUMENT ? KT_OBJECT : KT_ARRAY);
        return encode_doc_body(out, &child, depth + 1, field, err);
    }
    case BSON_TYPE_BINARY: {
        /* Length (as BSON declares it), subtype, bytes: MongoDB's binData order. */
        bson_subtype_t sub;
        uint32_t n;
        const uint8_t *p;
        bson_iter_binary(it, &sub, &n, &p);
        buf_put_u8(out, KT_BINDATA);
        if (sub == BSON_SUBTYPE_BINARY_DEPRECATED) {
            /* The old subtype 2 stores an inner length that libbson hides; keep the
             * raw layout so the order (and the round trip) follows the stored bytes. */
            buf_put_be32(out, n + 4);
            buf_put_u8(out, (uint8_t)sub);
            uint8_t le[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
            buf_put(out, le, 4);
        } else {
            buf_put_be32(out, n);
            buf_put_u8(out, (uint8_t)sub);
        }
        buf_put(out, p, n);
        return 0;
    }
    case BSON_TYPE_OID:
        buf_put_u8(out, KT_OID);
        buf_put(out, bson_iter_oid(it)->bytes, 12);
        return 0;
    case BSON_TYPE_BOOL: buf_put_u8(out, bson_iter_bool(it) ? KT_TRUE : KT_FALSE); return 0;
    case BSON_TYPE_DATE_TIME:
        /* Signed milliseconds: flipping the sign bit makes unsigned order signed order. */
        buf_put_u8(out, KT_DATE);
        buf_put_be64(out, (uint64_t)bson_iter_date_time(it) ^ (UINT64_C(1) << 63));
        return 0;
    case BSON_TYPE_TIMESTAMP: {
        uint32_t ts, inc;
        bson_iter_timestamp(it, &ts, &inc);
        buf_put_u8(out, KT_TIMESTAMP);
        buf_put_be32(out, ts);
        buf_put_be32(out, inc);
        return 0;
    }
    case BSON_TYPE_REGEX: {
        const char *opts;
        const char *pat = bson_iter_regex(it, &opts);
        buf_put_u8(out, KT_REGEX);
        put_escaped(out, (const uint8_t *)pat, strlen(pat));
        put_escaped(out, (const uint8_t *)opts, strlen(opts));
        return 0;
    }
    case BSON_TYPE_DBPOINTER: {
        /* MongoDB: value size first, then the raw bytes (name, then ObjectId). */
        uint32_t n;
        const char *coll;
        const bson_oid_t *oid;
        bson_iter_dbpointer(it, &n, &coll, &oid);
        buf_put_u8(out, KT_DBPOINTER);
        buf_put_be32(out, n);
        buf_put(out, coll, n);
        buf_put(out, oid->bytes, 12);
        return 0;
    }
    case BSON_TYPE_CODE: {
        uint32_t n;
        const char *code = bson_iter_code(it, &n);
        buf_put_u8(out, KT_CODE);
        put_escaped(out, (const uint8_t *)code, n);
        return 0;
    }
    case BSON_TYPE_CODEWSCOPE: {
        uint32_t n, scope_len;
        const uint8_t *scope;
        bson_iter_t child;
        const char *code = bson_iter_codewscope(it, &n, &scope_len, &scope);
        if (!code || !bson_iter_init_from_data(&child, scope, scope_len))
            return err_set(err, MS_ERR_INVALID_BSON, "invalid code-with-scope in key");
        buf_put_u8(out, KT_CODEWSCOPE);
        put_escaped(out, (const uint8_t *)code, n);
        return encode_doc_body(out, &child, depth + 1, field, err);
    }
    case BSON_TYPE_EOD: break;
    }
    return err_set(err, MS_ERR_BAD_VALUE, "cannot encode BSON type 0x%02x in a key", (unsigned)t);
}

int keys_encode_field(buf_t *out, const bson_iter_t *it, const char *field, ms_error_t *err) {
    size_t start = out->len;
    int rc = encode_value(out, it, 0, field, err);
    if (rc) out->len = start;  /* no half-written key on failure */
    return rc;
}

int keys_encode_value(buf_t *out, const bson_iter_t *it, ms_error_t *err) {
    return keys_encode_field(out, it, bson_iter_key(it), err);
}

void keys_invert(buf_t *out, size_t from) {
    for (size_t i = from; i < out->len; i++) out->data[i] = (uint8_t)~out->data[i];
}

/* ---- decoding ----------------------------------------------------------------------- */

typedef struct dec {
    const uint8_t *p;
    size_t len;
    size_t pos;
    ms_error_t *err;
} dec_t;

static int dec_fail(dec_t *d, const char *what) {
    return err_set(d->err, MS_ERR_BAD_VALUE, "bad encoded key at byte %zu: %s", d->pos, what);
}

static bool dec_need(const dec_t *d, size_t n) { return d->len - d->pos >= n; }

static uint32_t dec_be32(dec_t *d) {
    const uint8_t *p = d->p + d->pos;
    d->pos += 4;
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads an escaped string into *s (caller frees with bson_free), *n bytes. */
static int dec_escaped(dec_t *d, char **s, size_t *n) {
    size_t cap = 16, used = 0;
    char *b = bson_malloc(cap);
    for (;;) {
        if (!dec_need(d, 1)) goto bad;
        uint8_t c = d->p[d->pos++];
        if (c == 0x00) {
            if (!dec_need(d, 1)) goto bad;
            uint8_t e = d->p[d->pos++];
            if (e == 0x00) break;
            if (e != 0xFF) goto bad;
        }
        if (used + 2 > cap) {
            cap *= 2;
            b = bson_realloc(b, cap);
        }
        b[used++] = (char)c;
    }
    b[used] = '\0';
    *s = b;
    *n = used;
    return 0;
bad:
    bson_free(b);
    return dec_fail(d, "unterminated or badly escaped string");
}

/* A string that must hold no NUL (field names, regex parts). */
static int dec_cstring(dec_t *d, char **s) {
    size_t n;
    int rc = dec_escaped(d, s, &n);
    if (rc) return rc;
    if (strlen(*s) != n) {
        bson_free(*s);
        *s = NULL;
        return dec_fail(d, "NUL inside a name");
    }
    return 0;
}

static int decode_value(dec_t *d, bson_t *dst, const char *key, int depth);

static int decode_doc_body(dec_t *d, bson_t *dst, int depth) {
    if (depth > KEYS_DEPTH_MAX) return dec_fail(d, "nested too deeply");
    for (;;) {
        if (!dec_need(d, 1)) return dec_fail(d, "document not terminated");
        uint8_t rb = d->p[d->pos++];
        if (rb == KT_END) return 0;
        char *name = NULL;
        int rc = dec_cstring(d, &name);
        if (rc) return rc;
        if (!dec_need(d, 1) || rank_byte_of_tag(d->p[d->pos]) != rb) {
            bson_free(name);
            return dec_fail(d, "element rank does not match its value");
        }
        rc = decode_value(d, dst, name, depth);
        bson_free(name);
        if (rc) return rc;
    }
}

static int decode_number(dec_t *d, uint8_t tag, bson_t *dst, const char *key) {
    size_t start = d->pos - 1;
    uint8_t p[10];
    if (!dec_need(d, 10)) return dec_fail(d, "truncated number");
    memcpy(p, d->p + d->pos, 10);
    d->pos += 10;
    bool neg = tag == KT_NUM_NEG;
    if (neg)
        for (int i = 0; i < 10; i++) p[i] = (uint8_t)~p[i];
    int exp2 = ((int)p[0] << 8 | p[1]) - KEYS_EXP_BIAS;
    uint64_t mant = 0;
    for (int i = 0; i < 8; i++) mant = mant << 8 | p[2 + i];
    if (!(mant >> 63) || exp2 < -1074 || exp2 > 1023) return dec_fail(d, "bad number payload");

    /* Integral values within int64 come back as int32 / int64, the rest as double. */
    bool done = false;
    if (exp2 >= 0 && exp2 <= 63) {
        int frac_bits = 63 - exp2;
        uint64_t frac = frac_bits ? mant << (64 - frac_bits) : 0;
        uint64_t u = mant >> frac_bits;
        if (frac == 0 && (neg ? u <= (UINT64_C(1) << 63) : u <= (uint64_t)INT64_MAX)) {
            int64_t v = neg ? (int64_t)((uint64_t)0 - u) : (int64_t)u;
            if (v >= INT32_MIN && v <= INT32_MAX)
                bson_append_int32(dst, key, -1, (int32_t)v);
            else
                bson_append_int64(dst, key, -1, v);
            done = true;
        }
    }
    if (!done) {
        double v = ldexp((double)mant, exp2 - 63);
        /* The only canonical payloads are those the encoder writes: re-encode and compare,
         * which also refuses mantissas a double cannot hold. */
        buf_t check = {0};
        encode_double(&check, neg ? -v : v);
        bool same = check.len == d->pos - start && memcmp(check.data, d->p + start, check.len) == 0;
        buf_free(&check);
        if (!same) return dec_fail(d, "number not representable");
        bson_append_double(dst, key, -1, neg ? -v : v);
    }
    return 0;
}

static int decode_value(dec_t *d, bson_t *dst, const char *key, int depth) {
    if (!dec_need(d, 1)) return dec_fail(d, "missing value");
    uint8_t tag = d->p[d->pos++];
    int rc = 0;
    switch (tag) {
    case KT_MINKEY: bson_append_minkey(dst, key, -1); return 0;
    case KT_MAXKEY: bson_append_maxkey(dst, key, -1); return 0;
    case KT_UNDEFINED: bson_append_undefined(dst, key, -1); return 0;
    case KT_NULL: bson_append_null(dst, key, -1); return 0;
    case KT_NUM_NAN: bson_append_double(dst, key, -1, NAN); return 0;
    case KT_NUM_NEG_INF: bson_append_double(dst, key, -1, -INFINITY); return 0;
    case KT_NUM_POS_INF: bson_append_double(dst, key, -1, INFINITY); return 0;
    case KT_NUM_ZERO: bson_append_int32(dst, key, -1, 0); return 0;
    case KT_NUM_NEG:
    case KT_NUM_POS: return decode_number(d, tag, dst, key);
    case KT_FALSE: bson_append_bool(dst, key, -1, false); return 0;
    case KT_TRUE: bson_append_bool(dst, key, -1, true); return 0;
    case KT_STRING:
    case KT_CODE: {
        char *s;
        size_t n;
        if ((rc = dec_escaped(d, &s, &n))) return rc;
        if (n > INT32_MAX - 1) rc = dec_fail(d, "string too long");
        else if (tag == KT_STRING) bson_append_utf8(dst, key, -1, s, (int)n);
        else bson_append_code(dst, key, -1, s);
        if (!rc && tag == KT_CODE && strlen(s) != n) rc = dec_fail(d, "NUL inside code");
        bson_free(s);
        return rc;
    }
    case KT_OBJECT:
    case KT_ARRAY: {
        bson_t child;
        if (tag == KT_OBJECT) bson_append_document_begin(dst, key, -1, &child);
        else bson_append_array_begin(dst, key, -1, &child);
        rc = decode_doc_body(d, &child, depth + 1);
        if (tag == KT_OBJECT) bson_append_document_end(dst, &child);
        else bson_append_array_end(dst, &child);
        return rc;
    }
    case KT_BINDATA: {
        if (!dec_need(d, 5)) return dec_fail(d, "truncated binData");
        uint32_t n = dec_be32(d);
        uint8_t sub = d->p[d->pos++];
        if (!dec_need(d, n)) return dec_fail(d, "truncated binData");
        const uint8_t *bytes = d->p + d->pos;
        d->pos += n;
        if (sub == BSON_SUBTYPE_BINARY_DEPRECATED) {
            if (n < 4) return dec_fail(d, "short binData subtype 2");
            bson_append_binary(dst, key, -1, (bson_subtype_t)sub, bytes + 4, n - 4);
        } else {
            bson_append_binary(dst, key, -1, (bson_subtype_t)sub, bytes, n);
        }
        return 0;
    }
    case KT_OID: {
        bson_oid_t oid;
        if (!dec_need(d, 12)) return dec_fail(d, "truncated ObjectId");
        memcpy(oid.bytes, d->p + d->pos, 12);
        d->pos += 12;
        bson_append_oid(dst, key, -1, &oid);
        return 0;
    }
    case KT_DATE: {
        if (!dec_need(d, 8)) return dec_fail(d, "truncated date");
        uint64_t hi = dec_be32(d), lo = dec_be32(d);
        bson_append_date_time(dst, key, -1, (int64_t)((hi << 32 | lo) ^ (UINT64_C(1) << 63)));
        return 0;
    }
    case KT_TIMESTAMP: {
        if (!dec_need(d, 8)) return dec_fail(d, "truncated timestamp");
        uint32_t ts = dec_be32(d), inc = dec_be32(d);
        bson_append_timestamp(dst, key, -1, ts, inc);
        return 0;
    }
    case KT_REGEX: {
        char *pat = NULL, *opts = NULL;
        if ((rc = dec_cstring(d, &pat))) return rc;
        if ((rc = dec_cstring(d, &opts))) goto regex_out;
        /* libbson's bson_append_regex sorts the options and drops unknown letters, so
         * only options already in that form (ascending, unique, from "ilmsux") can come
         * back unchanged; anything else would decode to a different key. */
        for (const char *o = opts; *o; o++)
            if (!strchr("ilmsux", *o) || (o > opts && o[-1] >= *o)) {
                rc = dec_fail(d, "regex options not in canonical form");
                goto regex_out;
            }
        bson_append_regex(dst, key, -1, pat, opts);
    regex_out:
        bson_free(pat);
        bson_free(opts);
        return rc;
    }
    case KT_DBPOINTER: {
        if (!dec_need(d, 4)) return dec_fail(d, "truncated dbPointer");
        uint32_t n = dec_be32(d);
        if (!dec_need(d, n) || !dec_need(d, (size_t)n + 12)) return dec_fail(d, "truncated dbPointer");
        char *coll = bson_malloc((size_t)n + 1);
        bson_oid_t oid;
        memcpy(coll, d->p + d->pos, n);
        coll[n] = '\0';
        d->pos += n;
        memcpy(oid.bytes, d->p + d->pos, 12);
        d->pos += 12;
        if (strlen(coll) != n) rc = dec_fail(d, "NUL inside dbPointer name");
        else bson_append_dbpointer(dst, key, -1, coll, &oid);
        bson_free(coll);
        return rc;
    }
    case KT_CODEWSCOPE: {
        char *code;
        size_t n;
        bson_t scope = BSON_INITIALIZER;
        if ((rc = dec_escaped(d, &code, &n))) return rc;
        if (strlen(code) != n) rc = dec_fail(d, "NUL inside code");
        if (!rc) rc = decode_doc_body(d, &scope, depth + 1);
        if (!rc) bson_append_code_with_scope(dst, key, -1, code, &scope);
        bson_destroy(&scope);
        bson_free(code);
        return rc;
    }
    default: break;
    }
    d->pos--;
    return dec_fail(d, "unknown type byte");
}

int keys_decode_value(const uint8_t *data, size_t len, size_t *pos, bson_t *dst,
                      const char *key, ms_error_t *err) {
    dec_t d = {data, len, *pos, err};
    if (*pos > len) return err_set(err, MS_ERR_BAD_VALUE, "bad encoded key: position past end");
    int rc = decode_value(&d, dst, key, 0);
    if (!rc) *pos = d.pos;
    return rc;
}

/* ---- hashed keys (BSONElementHasher::hash64) --------------------------------------- */

static void md5_le32(md5_ctx_t *c, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    md5_update(c, b, 4);
}

static void md5_le64(md5_ctx_t *c, uint64_t v) {
    md5_le32(c, (uint32_t)v);
    md5_le32(c, (uint32_t)(v >> 32));
}

/* A BSON string value as stored: int32 length (with NUL), bytes, NUL. */
static void md5_bson_string(md5_ctx_t *c, const char *s, uint32_t n) {
    md5_le32(c, n + 1);
    md5_update(c, s, n);
    md5_update(c, "", 1);
}

/* safeNumberLongForHash: NaN → 0, exactly 2^63 → INT64_MIN (as old releases did),
 * otherwise clamp to int64 and truncate toward zero. */
static int64_t squash_for_hash(const bson_iter_t *it) {
    bson_type_t t = bson_iter_type(it);
    if (t == BSON_TYPE_INT32 || t == BSON_TYPE_INT64) return bson_iter_as_int64(it);
    double d = 0;
    bsonx_as_double(it, &d);  /* decimal128 goes through double: approximate */
    if (isnan(d)) return 0;
    if (d == 9223372036854775808.0) return INT64_MIN;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    if (d < -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
}

static void hash_elements(md5_ctx_t *c, bson_iter_t *child, int depth);

static void hash_element(md5_ctx_t *c, const bson_iter_t *it, bool with_name, int depth) {
    bson_type_t t = bson_iter_type(it);
    md5_le32(c, (uint32_t)bsonx_canonical_rank(t));
    if (with_name) {
        const char *k = bson_iter_key(it);
        md5_update(c, k, strlen(k) + 1);
    }
    switch (t) {
    case BSON_TYPE_DOUBLE:
    case BSON_TYPE_INT32:
    case BSON_TYPE_INT64:
    case BSON_TYPE_DECIMAL128: md5_le64(c, (uint64_t)squash_for_hash(it)); return;
    case BSON_TYPE_UTF8: {
        uint32_t n;
        const char *s = bson_iter_utf8(it, &n);
        md5_bson_string(c, s, n);
        return;
    }
    case BSON_TYPE_SYMBOL: {
        uint32_t n;
        const char *s = bson_iter_symbol(it, &n);
        md5_bson_string(c, s, n);
        return;
    }
    case BSON_TYPE_CODE: {
        uint32_t n;
        const char *s = bson_iter_code(it, &n);
        md5_bson_string(c, s, n);
        return;
    }
    case BSON_TYPE_DOCUMENT:
    case BSON_TYPE_ARRAY: {
        bson_iter_t child;
        if (bson_iter_recurse(it, &child)) hash_elements(c, &child, depth + 1);
        return;
    }
    case BSON_TYPE_CODEWSCOPE: {
        /* The code characters with their NUL (no length), then the scope's elements. */
        uint32_t n, scope_len;
        const uint8_t *scope;
        bson_iter_t child;
        const char *code = bson_iter_codewscope(it, &n, &scope_len, &scope);
        md5_update(c, code, (size_t)n + 1);
        if (bson_iter_init_from_data(&child, scope, scope_len)) hash_elements(c, &child, depth + 1);
        return;
    }
    case BSON_TYPE_BINARY: {
        bson_subtype_t sub;
        uint32_t n;
        const uint8_t *p;
        bson_iter_binary(it, &sub, &n, &p);
        uint8_t s = (uint8_t)sub;
        if (sub == BSON_SUBTYPE_BINARY_DEPRECATED) {
            md5_le32(c, n + 4);
            md5_update(c, &s, 1);
            md5_le32(c, n);
        } else {
            md5_le32(c, n);
            md5_update(c, &s, 1);
        }
        md5_update(c, p, n);
        return;
    }
    case BSON_TYPE_OID: md5_update(c, bson_iter_oid(it)->bytes, 12); return;
    case BSON_TYPE_BOOL: {
        uint8_t b = bson_iter_bool(it) ? 1 : 0;
        md5_update(c, &b, 1);
        return;
    }
    case BSON_TYPE_DATE_TIME: md5_le64(c, (uint64_t)bson_iter_date_time(it)); return;
    case BSON_TYPE_TIMESTAMP: {
        uint32_t ts, inc;
        bson_iter_timestamp(it, &ts, &inc);
        md5_le32(c, inc);  /* stored as one little-endian uint64: increment first */
        md5_le32(c, ts);
        return;
    }
    case BSON_TYPE_REGEX: {
        const char *opts;
        const char *pat = bson_iter_regex(it, &opts);
        md5_update(c, pat, strlen(pat) + 1);
        md5_update(c, opts, strlen(opts) + 1);
        return;
    }
    case BSON_TYPE_DBPOINTER: {
        uint32_t n;
        const char *coll;
        const bson_oid_t *oid;
        bson_iter_dbpointer(it, &n, &coll, &oid);
        md5_bson_string(c, coll, n);
        md5_update(c, oid->bytes, 12);
        return;
    }
    case BSON_TYPE_EOD:
    case BSON_TYPE_UNDEFINED:
    case BSON_TYPE_NULL:
    case BSON_TYPE_MINKEY:
    case BSON_TYPE_MAXKEY: return;  /* no value bytes */
    }
}

/* Each child as (rank, name, value), then the EOO element: rank 0, no name, no value. */
static void hash_elements(md5_ctx_t *c, bson_iter_t *child, int depth) {
    /* Validated documents never reach the bound; past it the hash stays defined. */
    if (depth <= KEYS_DEPTH_MAX)
        while (bson_iter_next(child)) hash_element(c, child, true, depth);
    md5_le32(c, 0);
}

int64_t keys_hash64(const bson_iter_t *it) {
    md5_ctx_t c;
    uint8_t digest[16];
    uint64_t v = 0;
    md5_init(&c);
    md5_le32(&c, 0);  /* seed */
    hash_element(&c, it, false, 0);
    md5_final(&c, digest);
    for (int i = 7; i >= 0; i--) v = v << 8 | digest[i];
    return (int64_t)v;
}

/* ---- key patterns --------------------------------------------------------------------- */

void keys_pattern_free(keys_pattern_t *p) {
    if (!p) return;
    for (int i = 0; i < p->nfields; i++) bson_free(p->fields[i]);
    if (p->nfields > 0) bson_destroy(&p->spec);
    memset(p, 0, sizeof *p);
    p->hashed_field = -1;
}

/* A dotted path usable as a key field: no empty part, no part starting with '$'. */
static bool path_ok(const char *f) {
    if (!*f) return false;
    for (const char *part = f;;) {
        const char *dot = strchr(part, '.');
        size_t n = dot ? (size_t)(dot - part) : strlen(part);
        if (n == 0 || part[0] == '$') return false;
        if (!dot) return true;
        part = dot + 1;
    }
}

int keys_pattern_parse(const bson_t *spec, keys_pattern_t *out, ms_error_t *err) {
    bson_iter_t it;
    int rc = 0;
    memset(out, 0, sizeof *out);
    out->hashed_field = -1;
    if (!spec || !bson_iter_init(&it, spec))
        return err_set(err, MS_ERR_BAD_VALUE, "key pattern is not a document");
    while (bson_iter_next(&it)) {
        const char *f = bson_iter_key(&it);
        int dir = 1;
        bool hashed = false;
        if (out->nfields >= MS_KEY_FIELDS_MAX) {
            rc = err_set(err, MS_ERR_CANNOT_CREATE_INDEX,
                         "Index key pattern has more than %d fields", MS_KEY_FIELDS_MAX);
            goto out;
        }
        if (!path_ok(f)) {
            rc = err_set(err, MS_ERR_BAD_VALUE, "bad key pattern field name '%s'", f);
            goto out;
        }
        for (int i = 0; i < out->nfields; i++)
            if (strcmp(out->fields[i], f) == 0) {
                rc = err_set(err, MS_ERR_BAD_VALUE, "key pattern repeats field '%s'", f);
                goto out;
            }
        if (bson_iter_type(&it) == BSON_TYPE_UTF8) {
            if (strcmp(bson_iter_utf8(&it, NULL), "hashed") != 0) {
                rc = err_set(err, MS_ERR_BAD_VALUE,
                             "key pattern value for '%s' must be 1, -1 or \"hashed\"", f);
                goto out;
            }
            if (out->hashed_field >= 0) {
                rc = err_set(err, MS_ERR_BAD_VALUE,
                             "key pattern may hold at most one hashed field");
                goto out;
            }
            hashed = true;
        } else {
            double v;
            if (!bsonx_as_double(&it, &v) || isnan(v) || v == 0.0) {
                rc = err_set(err, MS_ERR_BAD_VALUE,
                             "key pattern value for '%s' must be 1, -1 or \"hashed\"", f);
                goto out;
            }
            dir = v > 0 ? 1 : -1;
        }
        out->fields[out->nfields] = bson_strdup(f);
        out->dir[out->nfields] = dir;
        out->hashed[out->nfields] = hashed;
        if (hashed) out->hashed_field = out->nfields;
        out->nfields++;
    }
    if (out->nfields == 0) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "key pattern cannot be empty");
        goto out;
    }
    bson_copy_to(spec, &out->spec);
out:
    if (rc) {
        for (int i = 0; i < out->nfields; i++) bson_free(out->fields[i]);
        memset(out, 0, sizeof *out);
        out->hashed_field = -1;
    }
    return rc;
}

bool keys_pattern_equal(const keys_pattern_t *a, const keys_pattern_t *b) {
    if (a->nfields != b->nfields) return false;
    for (int i = 0; i < a->nfields; i++)
        if (strcmp(a->fields[i], b->fields[i]) != 0 || a->dir[i] != b->dir[i] ||
            a->hashed[i] != b->hashed[i])
            return false;
    return true;
}

/* Names and hashed-ness must match; direction does not matter for a prefix (an index
 * {a: -1, b: 1} still serves a range on a). */
bool keys_pattern_is_prefix_of(const keys_pattern_t *a, const keys_pattern_t *b) {
    if (a->nfields > b->nfields) return false;
    for (int i = 0; i < a->nfields; i++)
        if (strcmp(a->fields[i], b->fields[i]) != 0 || a->hashed[i] != b->hashed[i])
            return false;
    return true;
}

/* ---- shard-key extraction ------------------------------------------------------------ */

/* Finds a dotted path through embedded documents. *found is false for a missing field
 * (or one under a non-document); an array anywhere on the path or as the value is an
 * error, as MongoDB refuses array values in shard keys. */
static int find_key_field(const bson_t *doc, const char *path, bson_iter_t *out, bool *found,
                          ms_error_t *err) {
    bson_iter_t it, child;
    const char *p = path;
    *found = false;
    if (!bson_iter_init(&it, doc)) return err_set(err, MS_ERR_INVALID_BSON, "invalid document");
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        bool hit = false;
        while (bson_iter_next(&it)) {
            const char *k = bson_iter_key(&it);
            if (strncmp(k, p, n) == 0 && k[n] == '\0') {
                hit = true;
                break;
            }
        }
        if (!hit) return 0;
        if (bson_iter_type(&it) == BSON_TYPE_ARRAY)
            return err_set(err, MS_ERR_BAD_VALUE,
                           "shard key cannot contain an array (field '%s')", path);
        if (!dot) {
            *out = it;
            *found = true;
            return 0;
        }
        if (bson_iter_type(&it) != BSON_TYPE_DOCUMENT) return 0;
        if (!bson_iter_recurse(&it, &child))
            return err_set(err, MS_ERR_INVALID_BSON, "invalid embedded document");
        it = child;
        p = dot + 1;
    }
}

int keys_extract(const keys_pattern_t *p, const bson_t *doc, bson_t *key_doc, buf_t *enc,
                 ms_error_t *err) {
    size_t start = enc->len;
    bson_t tmp = BSON_INITIALIZER;
    bson_t null_doc = BSON_INITIALIZER;
    bson_iter_t null_it;
    int rc = 0;
    /* A missing field counts as null (and a missing hashed field hashes as null). */
    bson_append_null(&null_doc, "", 0);
    bson_iter_init(&null_it, &null_doc);
    bson_iter_next(&null_it);
    for (int i = 0; i < p->nfields; i++) {
        bson_iter_t it;
        bool found;
        if ((rc = find_key_field(doc, p->fields[i], &it, &found, err))) goto out;
        const bson_iter_t *v = found ? &it : &null_it;
        if (p->hashed[i]) {
            int64_t h;
            /* The hash would go through double (approximate): one rule for every key. */
            if (keys_holds_decimal(v)) {
                rc = keys_decimal_refused(err, p->fields[i]);
                goto out;
            }
            h = keys_hash64(v);
            keys_encode_int64(enc, h);
            bson_append_int64(&tmp, p->fields[i], -1, h);
        } else {
            if ((rc = keys_encode_field(enc, v, p->fields[i], err))) {
                if (!keys_holds_decimal(v)) err_prefix(err, "shard key field '%s'", p->fields[i]);
                goto out;
            }
            bson_append_iter(&tmp, p->fields[i], -1, v);
        }
    }
    if (enc->len - start > MS_SHARD_KEY_BYTES_MAX) {
        rc = err_set(err, MS_ERR_BAD_VALUE, "shard key is too large (%zu bytes encoded, max %d)",
                     enc->len - start, MS_SHARD_KEY_BYTES_MAX);
        goto out;
    }
    if (key_doc) bson_concat(key_doc, &tmp);
out:
    if (rc) enc->len = start;
    bson_destroy(&tmp);
    bson_destroy(&null_doc);
    return rc;
}

int keys_encode_bound(const keys_pattern_t *p, const bson_t *key_doc, buf_t *enc,
                      ms_error_t *err) {
    size_t start = enc->len;
    bson_iter_t it;
    int i = 0, rc = 0;
    if (!bson_iter_init(&it, key_doc)) return err_set(err, MS_ERR_BAD_VALUE, "bad key document");
    while (bson_iter_next(&it)) {
        if (i >= p->nfields || strcmp(bson_iter_key(&it), p->fields[i]) != 0) {
            rc = err_set(err, MS_ERR_BAD_VALUE, "key field '%s' does not match the key pattern",
                         bson_iter_key(&it));
            goto out;
        }
        if ((rc = keys_encode_field(enc, &it, p->fields[i], err))) {
            if (!keys_holds_decimal(&it)) err_prefix(err, "key field '%s'", p->fields[i]);
            goto out;
        }
        i++;
    }
    if (i != p->nfields)
        rc = err_set(err, MS_ERR_BAD_VALUE, "key has %d fields, the key pattern has %d", i,
                     p->nfields);
out:
    if (rc) enc->len = start;
    return rc;
}

/* True when the value at it is an array or a document holding one at any depth
 * (bounded: BSON nesting is capped by the validator). */
static bool holds_array(const bson_iter_t *it, int depth) {
    bson_iter_t sub;
    if (BSON_ITER_HOLDS_ARRAY(it)) return true;
    if (!BSON_ITER_HOLDS_DOCUMENT(it) || depth > MS_MSG_DEPTH_MAX || !bson_iter_recurse(it, &sub))
        return false;
    while (bson_iter_next(&sub))
        if (holds_array(&sub, depth + 1)) return true;
    return false;
}

int keys_split_point_check(const keys_pattern_t *p, const bson_t *point, ms_error_t *err) {
    bson_iter_t it;
    int i = 0;
    if (!bson_iter_init(&it, point)) return err_set(err, MS_ERR_BAD_VALUE, "bad split key document");
    while (bson_iter_next(&it)) {
        const char *why = NULL;
        bson_type_t t = bson_iter_type(&it);
        if (holds_array(&it, 0)) why = "a shard key value cannot be or contain an array";
        else if (i < p->nfields && p->hashed[i] && t != BSON_TYPE_INT64 &&
                 t != BSON_TYPE_MINKEY && t != BSON_TYPE_MAXKEY)
            why = "a hashed field's split value must be a NumberLong (a hash)";
        if (why) {
            char *pt = bson_as_relaxed_extended_json(point, NULL);
            char *kp = bson_as_relaxed_extended_json(&p->spec, NULL);
            int rc = err_set(err, MS_ERR_BAD_VALUE,
                             "new split key %.200s is not valid for shard key pattern %.200s: "
                             "%s (field '%s')", pt ? pt : "?", kp ? kp : "?", why,
                             bson_iter_key(&it));
            bson_free(pt);
            bson_free(kp);
            return rc;
        }
        i++;
    }
    return 0;
}

void keys_global_min(const keys_pattern_t *p, bson_t *dst) {
    for (int i = 0; i < p->nfields; i++) bson_append_minkey(dst, p->fields[i], -1);
}

void keys_global_max(const keys_pattern_t *p, bson_t *dst) {
    for (int i = 0; i < p->nfields; i++) bson_append_maxkey(dst, p->fields[i], -1);
}

char *keys_hex(const uint8_t *data, size_t len) {
    static const char hexd[] = "0123456789abcdef";
    char *s = bson_malloc(2 * len + 1);
    for (size_t i = 0; i < len; i++) {
        s[2 * i] = hexd[data[i] >> 4];
        s[2 * i + 1] = hexd[data[i] & 15];
    }
    s[2 * len] = '\0';
    return s;
}

/* ---- unique indexes on sharded collections ------------------------------------------ */

bool keys_unique_index_compatible(const keys_pattern_t *sk, const bson_t *index_key) {
    bson_iter_t it;
    int i = 0;
    if (!bson_iter_init(&it, index_key) || !bson_iter_next(&it)) return false;
    if (strcmp(bson_iter_key(&it), "_id") == 0) return true;
    do {
        if (i == sk->nfields) return true;
        if (strcmp(bson_iter_key(&it), sk->fields[i]) != 0) return false;
        i++;
    } while (bson_iter_next(&it));
    return i == sk->nfields;
}

int keys_unique_index_spec_check(const keys_pattern_t *sk, const bson_t *spec, ms_error_t *err) {
    bson_iter_t it;
    bson_t key;
    char *k, *p;
    int rc;
    if (!bson_iter_init_find(&it, spec, "unique") || !bsonx_truthy(&it)) return 0;
    if (!bson_iter_init_find(&it, spec, "key") || !bsonx_view_container(&it, &key)) return 0;
    if (keys_unique_index_compatible(sk, &key)) return 0;
    k = bsonx_to_json(&key);
    p = bsonx_to_json(&sk->spec);
    rc = err_set(err, MS_ERR_CANNOT_CREATE_INDEX,
                 "cannot create unique index over %s with shard key pattern %s", k ? k : "?",
                 p ? p : "?");
    bson_free(k);
    bson_free(p);
    return rc;
}
