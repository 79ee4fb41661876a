/*
 * md5.c — MD5 (RFC 1321) for keys_hash64, linked into every process through
 * libcommon. Written from the RFC's description: 64-byte blocks, four rounds of
 * sixteen steps with the sine-derived constants, little-endian words throughout.
 */
#include "common/md5.h"

#include <string.h>

/* Per-step left rotations, four per round (RFC 1321 §3.4). */
static const uint8_t md5_shift[64] = {
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
    5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
};

/* T[i] = floor(2^32 * |sin(i + 1)|) (RFC 1321 §3.4). */
static const uint32_t md5_t[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
    0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
    0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
    0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
    0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
    0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
    0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
    0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
    0xeb86d391,
};

static uint32_t rotl32(uint32_t x, unsigned n) { return (x << n) | (x >> (32 - n)); }

static void md5_block(uint32_t st[4], const uint8_t *p) {
    uint32_t x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
               (uint32_t)p[4 * i + 3] << 24;
    uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (b & d) | (c & ~d);
            g = (5 * i + 1) & 15;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) & 15;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) & 15;
        }
        uint32_t tmp = d;
        d = c;
        c = b;
        b = b + rotl32(a + f + md5_t[i] + x[g], md5_shift[i]);
        a = tmp;
    }
    st[0] += a;
    st[1] += b;
    st[2] += c;
    st[3] += d;
}

void md5_init(md5_ctx_t *c) {
    c->state[0] = 0x67452301;
    c->state[1] = 0xefcdab89;
    c->state[2] = 0x98badcfe;
    c->state[3] = 0x10325476;
    c->nbytes = 0;
}

void md5_update(md5_ctx_t *c, const void *p, size_t n) {
    const uint8_t *in = p;
    size_t used = (size_t)(c->nbytes & 63);
    c->nbytes += n;
    if (used) {
        size_t take = 64 - used < n ? 64 - used : n;
        memcpy(c->block + used, in, take);
        in += take;
        n -= take;
        if (used + take < 64) return;
        md5_block(c->state, c->block);
    }
    for (; n >= 64; in += 64, n -= 64) md5_block(c->state, in);
    if (n) memcpy(c->block, in, n);
}

void md5_final(md5_ctx_t *c, uint8_t out[16]) {
    /* Padding: 0x80, zeros to 56 mod 64, then the bit length as 64-bit little-endian. */
    uint64_t bits = c->nbytes * 8;
    uint8_t pad[72] = {0x80};
    size_t used = (size_t)(c->nbytes & 63);
    size_t padlen = used < 56 ? 56 - used : 120 - used;
    uint8_t len_le[8];
    for (int i = 0; i < 8; i++) len_le[i] = (uint8_t)(bits >> (8 * i));
    md5_update(c, pad, padlen);
    md5_update(c, len_le, 8);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) out[4 * i + j] = (uint8_t)(c->state[i] >> (8 * j));
}
