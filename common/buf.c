/*
 * buf.c — growable byte buffer (see buf.h). Used by every process.
 */
#include "common/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(buf_t *b) { memset(b, 0, sizeof *b); }

void buf_free(buf_t *b) {
    if (!b) return;
    free(b->data);
    memset(b, 0, sizeof *b);
}

void buf_reset(buf_t *b) { b->len = 0; }

void buf_reserve(buf_t *b, size_t extra) {
    size_t need = b->len + extra, cap = b->cap ? b->cap : 64;
    uint8_t *p;
    if (need <= b->cap) return;
    while (cap < need) cap *= 2;
    p = realloc(b->data, cap);
    if (!p) {
        fprintf(stderr, "buf: out of memory (%zu bytes)\n", cap);
        abort();
    }
    b->data = p;
    b->cap = cap;
}

void buf_put(buf_t *b, const void *p, size_t n) {
    if (n == 0) return;
    buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void buf_put_u8(buf_t *b, uint8_t v) { buf_put(b, &v, 1); }

void buf_put_be32(buf_t *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    buf_put(b, x, 4);
}

void buf_put_be64(buf_t *b, uint64_t v) {
    buf_put_be32(b, (uint32_t)(v >> 32));
    buf_put_be32(b, (uint32_t)v);
}

void *xrealloc(void *p, size_t size) {
    void *q = realloc(p, size ? size : 1);
    if (!q) {
        fprintf(stderr, "out of memory (%zu bytes)\n", size);
        abort();
    }
    return q;
}
