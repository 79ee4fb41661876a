/*
 * md5.h — MD5 message digest (RFC 1321), used only by keys_hash64 to reproduce
 * MongoDB's hashed shard-key values in every process. Our own implementation: the
 * libbson bson_md5_* functions are deprecated and -Werror rejects them.
 */
#ifndef MS_MD5_H
#define MS_MD5_H

#include <stddef.h>
#include <stdint.h>

typedef struct md5_ctx {
    uint32_t state[4];   /* A, B, C, D */
    uint64_t nbytes;     /* message length so far, in bytes */
    uint8_t block[64];   /* pending input not yet forming a full block */
} md5_ctx_t;

void md5_init(md5_ctx_t *c);
/* Feeds n bytes at p (borrows p). */
void md5_update(md5_ctx_t *c, const void *p, size_t n);
/* Pads, writes the 16-byte digest to out and leaves c unusable until md5_init. */
void md5_final(md5_ctx_t *c, uint8_t out[16]);

#endif
