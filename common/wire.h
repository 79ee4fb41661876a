/*
 * wire.h — MongoDB's wire protocol, the codec (common/wire.c): turns one received message
 * into the BSON command that cmd_dispatch serves, and a command's reply into the message
 * sent back. Pure: no sockets, no state; the connection layer (common/rpc_server.c, the
 * "wire" framing) reads whole messages and calls these from its workers. Run by every
 * daemon that listens with --wire-port (router, shardd). docs/wire-protocol.md says what
 * is spoken and what is refused.
 *
 * A message is a 16-byte little-endian header {messageLength, requestID, responseTo,
 * opCode} and a body. Understood: OP_MSG (2013) with sections kind 0 (the body) and
 * kind 1 (document sequences, merged into the command as arrays), flag bits
 * checksumPresent (CRC-32C), moreToCome (no reply) and exhaustAllowed (a streamed reply, for
 * the awaitable hello: wire_exhaust_next); legacy
 * OP_QUERY (2004) on "<db>.$cmd", answered with OP_REPLY (1); OP_COMPRESSED (2012) is
 * answered with an error (no compressor is ever negotiated). Any other opcode closes the
 * connection, as MongoDB does.
 */
#ifndef MS_WIRE_H
#define MS_WIRE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errors.h"

#define WIRE_HEADER_BYTES 16

#define WIRE_OP_REPLY 1
#define WIRE_OP_QUERY 2004
#define WIRE_OP_COMPRESSED 2012
#define WIRE_OP_MSG 2013

/* OP_MSG flagBits. Bits 0-15 are "required": a peer must understand them or fail. */
#define WIRE_MSG_CHECKSUM 0x1u
#define WIRE_MSG_MORE_TO_COME 0x2u
#define WIRE_MSG_EXHAUST_ALLOWED 0x10000u
#define WIRE_MSG_REQUIRED_MASK 0xffffu

/* OP_REPLY responseFlags: QueryFailure (bit 1), set when a non-command query is refused. */
#define WIRE_REPLY_QUERY_FAILURE 0x2u

typedef struct wire_header {
    int32_t length;       /* messageLength: the whole message, header included */
    int32_t request_id;
    int32_t response_to;
    int32_t opcode;
} wire_header_t;

/* Reads the 16-byte header at p (p must hold WIRE_HEADER_BYTES bytes). */
void wire_header_read(const uint8_t *p, wire_header_t *h);

/* Whether the opcode is one we answer (OP_MSG, OP_QUERY, OP_COMPRESSED); any other
 * closes the connection. */
bool wire_opcode_known(int32_t opcode);

typedef enum wire_rc {
    WIRE_OK = 0,       /* out->cmd holds the command to dispatch */
    WIRE_ERROR,        /* answer with an error reply built from err (out set for the reply) */
    WIRE_CLOSE,        /* close the connection (MongoDB's connection-fatal parse errors);
                        * err says why, for the log */
} wire_rc_t;

/* A decoded request: what the reply needs, and the command. */
typedef struct wire_request {
    int32_t request_id;
    int32_t reply_opcode;    /* WIRE_OP_MSG or WIRE_OP_REPLY: the form of our answer */
    bool checksum;           /* the request carried a CRC-32C: the reply carries one too */
    bool more_to_come;       /* moreToCome: no reply at all, not even an error */
    bool exhaust_allowed;    /* OP_MSG exhaustAllowed: the client accepts a reply stream */
    bool reply_more_to_come; /* set by the caller: wire_reply_encode sets moreToCome on the
                              * reply (an exhaust stream goes on; OP_MSG only) */
    bool query_failure;      /* OP_REPLY with the QueryFailure flag (error on a non-$cmd query) */
    bool has_cmd;            /* cmd is initialised (caller destroys it via wire_request_free) */
    bson_t cmd;              /* the command: body + sequences (+ $db for OP_QUERY) */
    bool has_renumbered;     /* renumbered is initialised (wire_request_free destroys it) */
    bson_t renumbered;       /* an OP_QUERY query with its arrays renumbered "0", "1", ... */
} wire_request_t;

/* Decodes the whole message msg/len (header included; len == the header's length, which
 * the connection layer has checked against its limit). msg borrowed for the call; out is
 * always initialised (free it with wire_request_free). The command is checked only for
 * what the wire format itself says (every length inside the message); cmd_dispatch
 * validates it as BSON, as it does every command from NNG. */
wire_rc_t wire_request_decode(const uint8_t *msg, size_t len, wire_request_t *out,
                              ms_error_t *err);
void wire_request_free(wire_request_t *r);

/* Builds {ok: 0, errmsg, code, codeName} (+ $err for a QueryFailure reply) into reply
 * (initialised, empty). */
void wire_error_doc(const wire_request_t *req, const ms_error_t *err, bson_t *reply);

/* Builds the reply message to req carrying doc: OP_MSG (with a CRC-32C when the request
 * had one) or OP_REPLY. our_id is the reply's own requestID. Returns bson_malloc'd bytes
 * (caller owns, bson_free) and sets *len; NULL when out of memory or doc too large for a
 * message (over INT32_MAX, which dispatch's own limit prevents). */
uint8_t *wire_reply_encode(const wire_request_t *req, int32_t our_id, const bson_t *doc,
                           size_t *len);

/* The next invocation of an exhaust stream (MongoDB's exhaust hello): the OP_MSG req would
 * be if the client sent it again with its topologyVersion replaced by tv (the one the
 * reply carried), requestID our_id (the reply's own, so that the next reply's responseTo
 * chains to it) and exhaustAllowed (plus checksumPresent when req had it). req must be
 * an OP_MSG whose cmd is initialised. Returns bson_malloc'd bytes (caller owns) and sets
 * *len; NULL when out of memory. */
uint8_t *wire_exhaust_next(const wire_request_t *req, const bson_t *tv, int32_t our_id,
                           size_t *len);

/* CRC-32C (Castagnoli, reflected 0x82F63B78) of data, continuing from crc (0 to start).
 * wire_crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t wire_crc32c(uint32_t crc, const void *data, size_t len);

#endif
