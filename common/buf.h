/*
 * buf.h — a growable byte buffer (encoded keys, messages). Used by every process.
 * A zeroed buf_t is an empty buffer; buf_free() accepts a zeroed or freed one.
 */
#ifndef MS_BUF_H
#define MS_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct buf {
    uint8_t *data;
    size_t len;
    size_t cap;
} buf_t;

void buf_init(buf_t *b);                 /* same as zeroing */
void buf_free(buf_t *b);                 /* releases and zeroes; NULL-safe */
void buf_reset(buf_t *b);                /* len = 0, keeps memory */
void buf_reserve(buf_t *b, size_t extra);/* aborts on out-of-memory, as libbson does */
void buf_put(buf_t *b, const void *p, size_t n);
void buf_put_u8(buf_t *b, uint8_t v);
void buf_put_be32(buf_t *b, uint32_t v);
void buf_put_be64(buf_t *b, uint64_t v);

/* realloc that aborts on out-of-memory (as libbson and buf_reserve do): growing an
 * array never leaves a caller with a NULL to check. */
void *xrealloc(void *p, size_t size);

#endif
