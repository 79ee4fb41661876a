/*
 * sp.h — the bytes of NNG's SP protocol over TCP (and IPC) that both sides of minishard's
 * RPC layer write by hand: the server (rpc_server.c, which frames SP itself to bound what
 * a peer costs) and the tcp:// client (rpc.c, which does a call on the calling thread).
 * docs/protocol.md, "connections and their limits", describes the framing.
 *
 * After connect each side sends an 8-byte greeting 00 'S' 'P' 00 <16-bit protocol> 00 00;
 * then every message is an 8-byte big-endian length and that many bytes. A REQ payload
 * starts with its backtrace (4-byte words up to the request id, whose top bit is set),
 * which the reply echoes.
 */
#ifndef MS_SP_H
#define MS_SP_H

#include <stdbool.h>
#include <stdint.h>

#define SP_HELLO_BYTES 8
#define SP_TCP_HEAD_BYTES 8   /* the length in front of each message */
#define SP_ID_BYTES 4         /* one backtrace word: the request id */
#define SP_ID_FLAG 0x80000000u
#define SP_REQ0 0x30          /* protocol numbers: REQ v0 (client), REP v0 (server) */
#define SP_REP0 0x31

static inline void sp_put_be64(uint8_t *p, uint64_t v) {
    for (int i = 7; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

static inline uint64_t sp_get_be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

static inline void sp_put_be32(uint8_t *p, uint32_t v) {
    for (int i = 3; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

static inline uint32_t sp_get_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The greeting of a peer speaking protocol proto. */
static inline void sp_hello(uint8_t out[SP_HELLO_BYTES], uint8_t proto) {
    const uint8_t hello[SP_HELLO_BYTES] = {0, 'S', 'P', 0, 0, proto, 0, 0};
    for (int i = 0; i < SP_HELLO_BYTES; i++) out[i] = hello[i];
}

/* Whether in is the greeting of a peer speaking protocol proto. */
static inline bool sp_hello_is(const uint8_t in[SP_HELLO_BYTES], uint8_t proto) {
    return in[0] == 0 && in[1] == 'S' && in[2] == 'P' && in[3] == 0 && in[4] == 0 &&
           in[5] == proto && in[6] == 0 && in[7] == 0;
}

#endif
