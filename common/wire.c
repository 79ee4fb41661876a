/*
 * wire.c — MongoDB's wire protocol codec (see wire.h): decodes one whole message into the
 * command document cmd_dispatch serves and encodes the reply. Pure functions; the
 * connection layer (rpc_server.c's wire framing, in every daemon started with
 * --wire-port) reads the bytes and calls them from its worker threads.
 *
 * Every length inside a message is checked against the message before it is used; the
 * bytes of documents themselves are not validated here (dispatch validates the command
 * as it validates every NNG request), only their declared lengths and terminators.
 */
#include "common/wire.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/bsonx.h"
#include "common/limits.h"

/* ---- CRC-32C ------------------------------------------------------------------------ */

/* The Castagnoli polynomial, bit-reflected (as iSCSI and MongoDB use it). */
#define WIRE_CRC32C_POLY 0x82F63B78u

static uint32_t wire_crc_table[256];
static pthread_once_t wire_crc_once = PTHREAD_ONCE_INIT;

static void wire_crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ WIRE_CRC32C_POLY : c >> 1;
        wire_crc_table[i] = c;
    }
}

uint32_t wire_crc32c(uint32_t crc, const void *data, size_t len) {
    const uint8_t *p = data;
    pthread_once(&wire_crc_once, wire_crc_init);
    crc = ~crc;
    while (len--) crc = wire_crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- little-endian fields ----------------------------------------------------------- */

static uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

void wire_header_read(const uint8_t *p, wire_header_t *h) {
    h->length = (int32_t)get_le32(p);
    h->request_id = (int32_t)get_le32(p + 4);
    h->response_to = (int32_t)get_le32(p + 8);
    h->opcode = (int32_t)get_le32(p + 12);
}

bool wire_opcode_known(int32_t opcode) {
    return opcode == WIRE_OP_MSG || opcode == WIRE_OP_QUERY || opcode == WIRE_OP_COMPRESSED;
}

/* A BSON document at p with at most avail bytes: its declared length if it fits, is at
 * least the empty document's 5 bytes and ends with its terminator; 0 otherwise. */
static size_t wire_doc_len(const uint8_t *p, size_t avail) {
    uint32_t n;
    if (avail < 5) return 0;
    n = get_le32(p);
    if (n < 5 || n > avail || p[n - 1] != 0) return 0;
    return n;
}

/* A C string at p within avail bytes: its length without the NUL, or -1 if unterminated. */
static long wire_cstr_len(const uint8_t *p, size_t avail) {
    const uint8_t *z = memchr(p, 0, avail);
    return z ? (long)(z - p) : -1;
}

/* ---- OP_MSG ------------------------------------------------------------------------- */

typedef struct wire_seq {
    const char *name;        /* points into the message (NUL-terminated there) */
    const uint8_t *docs;     /* the documents, back to back */
    size_t len;
} wire_seq_t;

/* Appends the sequence's documents to cmd as the array seq->name. */
static wire_rc_t wire_seq_append(bson_t *cmd, const wire_seq_t *seq, ms_error_t *err) {
    bson_t arr, doc;
    size_t off = 0;
    uint32_t i = 0;
    char key[16];
    const char *k;
    if (!bson_append_array_begin(cmd, seq->name, -1, &arr)) goto big;
    while (off < seq->len) {
        size_t n = wire_doc_len(seq->docs + off, seq->len - off);
        if (!n) {
            bson_append_array_end(cmd, &arr);
            err_set(err, MS_ERR_INVALID_BSON,
                    "document sequence '%s': document %u has an invalid length", seq->name, i);
            return WIRE_ERROR;
        }
        bson_uint32_to_string(i++, &k, key, sizeof key);
        if (!bson_init_static(&doc, seq->docs + off, n) || !bson_append_document(&arr, k, -1, &doc)) {
            bson_append_array_end(cmd, &arr);
            goto big;
        }
        off += n;
    }
    if (bson_append_array_end(cmd, &arr)) return WIRE_OK;
big:
    err_set(err, MS_ERR_BSON_OBJECT_TOO_LARGE,
            "document sequence '%s' makes a command larger than BSON allows", seq->name);
    return WIRE_ERROR;
}

static wire_rc_t wire_decode_msg(const uint8_t *msg, size_t len, wire_request_t *out,
                                 ms_error_t *err) {
    const uint8_t *body = NULL, *p, *end;
    size_t body_len = 0;
    wire_seq_t seqs[MS_WIRE_DOC_SEQUENCES_MAX];
    int nseq = 0;
    uint32_t flags;
    bson_t body_doc;

    out->reply_opcode = WIRE_OP_MSG;
    if (len < WIRE_HEADER_BYTES + 4) {
        err_set(err, MS_ERR_PROTOCOL_ERROR, "OP_MSG of %zu bytes has no flagBits", len);
        return WIRE_CLOSE;
    }
    flags = get_le32(msg + WIRE_HEADER_BYTES);
    out->more_to_come = (flags & WIRE_MSG_MORE_TO_COME) != 0;
    out->exhaust_allowed = (flags & WIRE_MSG_EXHAUST_ALLOWED) != 0;
    /* MongoDB closes the connection on a required flag it does not know. */
    if (flags & WIRE_MSG_REQUIRED_MASK & ~(WIRE_MSG_CHECKSUM | WIRE_MSG_MORE_TO_COME)) {
        err_set(err, MS_ERR_ILLEGAL_OP_MSG_FLAG, "Message contains illegal flags value: 0x%08x",
                flags);
        return WIRE_CLOSE;
    }
    end = msg + len;
    if (flags & WIRE_MSG_CHECKSUM) {
        uint32_t want, got;
        if (len < WIRE_HEADER_BYTES + 4 + 4) {
            err_set(err, MS_ERR_PROTOCOL_ERROR, "OP_MSG with checksumPresent has no checksum");
            return WIRE_CLOSE;
        }
        end -= 4;
        want = get_le32(end);
        got = wire_crc32c(0, msg, len - 4);
        if (want != got) {
            /* MongoDB's ChecksumMismatch is connection-fatal too: the bytes cannot be
             * trusted, so neither can the requestID an error reply would answer. */
            err_set(err, MS_ERR_PROTOCOL_ERROR,
                    "OP_MSG checksum does not match contents: sent 0x%08x computed 0x%08x", want,
                    got);
            return WIRE_CLOSE;
        }
        out->checksum = true;
    }

    for (p = msg + WIRE_HEADER_BYTES + 4; p < end;) {
        uint8_t kind = *p++;
        if (kind == 0) {
            size_t n = wire_doc_len(p, (size_t)(end - p));
            if (body) {
                err_set(err, MS_ERR_LOC_OPMSG_MULTIPLE_BODIES, "Multiple body sections in message");
                return WIRE_ERROR;
            }
            if (!n) {
                err_set(err, MS_ERR_INVALID_BSON, "OP_MSG body has an invalid length");
                return WIRE_ERROR;
            }
            body = p;
            body_len = n;
            p += n;
        } else if (kind == 1) {
            uint32_t size;
            long name_len;
            if (nseq == MS_WIRE_DOC_SEQUENCES_MAX) {
                err_set(err, MS_ERR_PROTOCOL_ERROR, "Too many document sequences in OP_MSG");
                return WIRE_CLOSE;  /* TooManyDocumentSequences: connection-fatal in MongoDB */
            }
            if (end - p < 4 || (size = get_le32(p)) < 4 || size > (size_t)(end - p)) {
                err_set(err, MS_ERR_PROTOCOL_ERROR,
                        "OP_MSG document sequence size runs past the message");
                return WIRE_ERROR;
            }
            name_len = wire_cstr_len(p + 4, size - 4);
            if (name_len < 0) {
                err_set(err, MS_ERR_PROTOCOL_ERROR,
                        "OP_MSG document sequence identifier is not terminated");
                return WIRE_ERROR;
            }
            if (name_len == 0) {
                err_set(err, MS_ERR_PROTOCOL_ERROR, "OP_MSG document sequence has no identifier");
                return WIRE_ERROR;
            }
            seqs[nseq].name = (const char *)(p + 4);
            seqs[nseq].docs = p + 4 + name_len + 1;
            seqs[nseq].len = size - 4 - (size_t)name_len - 1;
            for (int i = 0; i < nseq; i++)
                if (strcmp(seqs[i].name, seqs[nseq].name) == 0) {
                    err_set(err, MS_ERR_LOC_OPMSG_DUP_SEQUENCE, "Duplicate document sequence: %s",
                            seqs[nseq].name);
                    return WIRE_ERROR;
                }
            nseq++;
            p += size;
        } else {
            err_set(err, MS_ERR_LOC_OPMSG_UNKNOWN_SECTION, "Unknown section kind %u", kind);
            return WIRE_ERROR;
        }
    }
    if (!body) {
        err_set(err, MS_ERR_LOC_OPMSG_NO_BODY, "OP_MSG messages must have a body");
        return WIRE_ERROR;
    }
    if (!bson_init_static(&body_doc, body, body_len)) {
        err_set(err, MS_ERR_INVALID_BSON, "OP_MSG body has an invalid length");
        return WIRE_ERROR;
    }
    /* bson_iter stops at the first malformed element: a lookup never reads past the body.
     * A $db it did not reach may lie behind a corrupt element: the body is validated then,
     * so that the answer is InvalidBSON, as on the NNG port (dispatch validates the rest). */
    if (!bson_has_field(&body_doc, "$db")) {
        bson_t whole;
        if (bsonx_view(body, body_len, &whole, err) != 0) return WIRE_ERROR;
        err_set(err, MS_ERR_LOC_OPMSG_NO_DB, "OP_MSG requests require a $db argument");
        return WIRE_ERROR;
    }
    for (int i = 0; i < nseq; i++) {
        bson_iter_t it;
        if (bson_iter_init_find(&it, &body_doc, seqs[i].name)) {
            err_set(err, MS_ERR_LOC_OPMSG_DUP_FIELD,
                    "Duplicate field between body and document sequence %s", seqs[i].name);
            return WIRE_ERROR;
        }
    }
    /* The command: the body's own bytes, then one array per sequence. */
    bson_init(&out->cmd);
    out->has_cmd = true;
    if (!bson_concat(&out->cmd, &body_doc)) {
        err_set(err, MS_ERR_BSON_OBJECT_TOO_LARGE, "OP_MSG body too large");
        return WIRE_ERROR;
    }
    for (int i = 0; i < nseq; i++)
        if (wire_seq_append(&out->cmd, &seqs[i], err) != WIRE_OK) return WIRE_ERROR;
    return WIRE_OK;
}

/* ---- OP_QUERY ----------------------------------------------------------------------- */

/* OP_QUERY body: flags int32, fullCollectionName cstring, numberToSkip int32,
 * numberToReturn int32, query document, [returnFieldsSelector document]. */
static wire_rc_t wire_decode_query(const uint8_t *msg, size_t len, wire_request_t *out,
                                   ms_error_t *err) {
    const uint8_t *p = msg + WIRE_HEADER_BYTES + 4, *end = msg + len;
    const char *ns;
    long ns_len;
    size_t db_len, qlen;
    bson_t query, inner;
    bson_iter_t it;
    const bson_t *cmd;
    bool wrapped = false;

    out->reply_opcode = WIRE_OP_REPLY;
    if (len < WIRE_HEADER_BYTES + 4 || (ns_len = wire_cstr_len(p, (size_t)(end - p))) < 0) {
        err_set(err, MS_ERR_PROTOCOL_ERROR, "OP_QUERY has no collection name");
        return WIRE_ERROR;
    }
    ns = (const char *)p;
    p += ns_len + 1;
    if (end - p < 8) {
        err_set(err, MS_ERR_PROTOCOL_ERROR, "OP_QUERY is truncated before its query");
        return WIRE_ERROR;
    }
    p += 8;  /* numberToSkip, numberToReturn: meaningless for a command */
    if (!(qlen = wire_doc_len(p, (size_t)(end - p)))) {
        err_set(err, MS_ERR_INVALID_BSON, "OP_QUERY query has an invalid length");
        return WIRE_ERROR;
    }
    /* Validated whole before it is rewritten: a copy would stop silently at a malformed
     * element and run what came before it. */
    if (bsonx_view(p, qlen, &query, err) != 0) return WIRE_ERROR;
    /* Arrays keyed other than "0", "1", ... are renumbered before the rewrite copies them
     * (libbson warns when it appends one; dispatch does the same for OP_MSG bodies). */
    int64_t renumbered_len;
    if (!bsonx_arrays_numbered(&query, &renumbered_len)) {
        if (renumbered_len > MS_MSG_BYTES_MAX) {
            err_set(err, MS_ERR_BSON_OBJECT_TOO_LARGE, "OP_QUERY query of %lld bytes with its "
                    "arrays renumbered is larger than %d bytes", (long long)renumbered_len,
                    MS_MSG_BYTES_MAX);
            return WIRE_ERROR;
        }
        bsonx_renumber_arrays(&query, &out->renumbered);
        out->has_renumbered = true;   /* query views its bytes until wire_request_free */
        if (!bson_init_static(&query, bson_get_data(&out->renumbered), out->renumbered.len)) {
            err_set(err, MS_ERR_INTERNAL, "renumbered OP_QUERY query is not BSON");
            return WIRE_ERROR;
        }
    }
    /* Only commands: "<db>.$cmd". MongoDB 6.0 no longer serves OP_QUERY reads. */
    if (ns_len < 6 || strcmp(ns + ns_len - 5, ".$cmd") != 0) {
        out->query_failure = true;
        err_set(err, MS_ERR_UNSUPPORTED_OP_QUERY_COMMAND,
                "OP_QUERY is supported only for commands on <db>.$cmd, not on '%.100s'; use "
                "OP_MSG (the client driver may require an upgrade)",
                ns);
        return WIRE_ERROR;
    }
    db_len = (size_t)ns_len - 5;
    /* Old drivers wrap the command: {$query: {...}, $readPreference: ...}. */
    cmd = &query;
    if (bson_iter_init(&it, &query) && bson_iter_next(&it) &&
        (strcmp(bson_iter_key(&it), "$query") == 0 || strcmp(bson_iter_key(&it), "query") == 0) &&
        BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t n;
        const uint8_t *d;
        bson_iter_document(&it, &n, &d);
        if (!bson_init_static(&inner, d, n)) {
            err_set(err, MS_ERR_INVALID_BSON, "OP_QUERY $query has an invalid length");
            return WIRE_ERROR;
        }
        cmd = &inner;
        wrapped = true;
    }
    bson_init(&out->cmd);
    out->has_cmd = true;
    /* $db comes from the namespace; one given in the command is dropped. */
    bson_copy_to_excluding_noinit(cmd, &out->cmd, "$db", wrapped ? "$readPreference" : NULL,
                                  NULL);
    if (wrapped && bson_iter_init_find(&it, &query, "$readPreference"))
        bson_append_iter(&out->cmd, "$readPreference", -1, &it);
    if (!bson_append_utf8(&out->cmd, "$db", 3, ns, (int)db_len)) {
        err_set(err, MS_ERR_BSON_OBJECT_TOO_LARGE, "OP_QUERY command too large");
        return WIRE_ERROR;
    }
    return WIRE_OK;
}

/* ---- API ---------------------------------------------------------------------------- */

wire_rc_t wire_request_decode(const uint8_t *msg, size_t len, wire_request_t *out,
                              ms_error_t *err) {
    wire_header_t h;
    memset(out, 0, sizeof *out);
    out->reply_opcode = WIRE_OP_MSG;
    if (len < WIRE_HEADER_BYTES) {
        err_set(err, MS_ERR_PROTOCOL_ERROR, "message of %zu bytes is shorter than a header", len);
        return WIRE_CLOSE;
    }
    wire_header_read(msg, &h);
    out->request_id = h.request_id;
    if (h.length < WIRE_HEADER_BYTES || (size_t)h.length != len) {
        err_set(err, MS_ERR_PROTOCOL_ERROR, "messageLength %d does not match %zu bytes", h.length,
                len);
        return WIRE_CLOSE;
    }
    switch (h.opcode) {
    case WIRE_OP_MSG:
        return wire_decode_msg(msg, len, out, err);
    case WIRE_OP_QUERY:
        return wire_decode_query(msg, len, out, err);
    case WIRE_OP_COMPRESSED: {
        /* {originalOpcode, uncompressedSize, compressorId, bytes}: answered in the
         * original opcode's reply form, so the driver reads a plain error. */
        int32_t orig = len >= WIRE_HEADER_BYTES + 4 ? (int32_t)get_le32(msg + WIRE_HEADER_BYTES)
                                                    : 0;
        out->reply_opcode = orig == WIRE_OP_QUERY ? WIRE_OP_REPLY : WIRE_OP_MSG;
        err_set(err, MS_ERR_BAD_VALUE,
                "OP_COMPRESSED is not accepted: no compressor was negotiated (the hello reply "
                "lists none)");
        return WIRE_ERROR;
    }
    default:
        err_set(err, MS_ERR_PROTOCOL_ERROR, "unknown opCode %d", h.opcode);
        return WIRE_CLOSE;
    }
}

void wire_request_free(wire_request_t *r) {
    if (r && r->has_cmd) {
        bson_destroy(&r->cmd);
        r->has_cmd = false;
    }
    if (r && r->has_renumbered) {
        bson_destroy(&r->renumbered);
        r->has_renumbered = false;
    }
}

void wire_error_doc(const wire_request_t *req, const ms_error_t *err, bson_t *reply) {
    BSON_APPEND_DOUBLE(reply, "ok", 0.0);
    BSON_APPEND_UTF8(reply, "errmsg", err->msg);
    BSON_APPEND_INT32(reply, "code", err->code);
    BSON_APPEND_UTF8(reply, "codeName", err_code_name(err->code));
    if (req->query_failure) BSON_APPEND_UTF8(reply, "$err", err->msg);
}

uint8_t *wire_reply_encode(const wire_request_t *req, int32_t our_id, const bson_t *doc,
                           size_t *len) {
    const uint8_t *data = bson_get_data(doc);
    size_t head, total;
    uint8_t *out, *p;

    if (req->reply_opcode == WIRE_OP_REPLY)
        head = WIRE_HEADER_BYTES + 4 + 8 + 4 + 4;  /* responseFlags, cursorID, startingFrom, numberReturned */
    else
        head = WIRE_HEADER_BYTES + 4 + 1;          /* flagBits, section kind 0 */
    total = head + doc->len + (req->reply_opcode == WIRE_OP_MSG && req->checksum ? 4 : 0);
    if (total > (size_t)INT32_MAX || !(out = bson_malloc(total))) return NULL;
    p = out;
    put_le32(p, (uint32_t)total);
    put_le32(p + 4, (uint32_t)our_id);
    put_le32(p + 8, (uint32_t)req->request_id);
    put_le32(p + 12, (uint32_t)req->reply_opcode);
    p += WIRE_HEADER_BYTES;
    if (req->reply_opcode == WIRE_OP_REPLY) {
        put_le32(p, req->query_failure ? WIRE_REPLY_QUERY_FAILURE : 0);
        memset(p + 4, 0, 8 + 4);  /* cursorID 0, startingFrom 0 */
        put_le32(p + 16, 1);      /* numberReturned */
        p += 20;
    } else {
        put_le32(p, (req->checksum ? WIRE_MSG_CHECKSUM : 0) |
                        (req->reply_more_to_come ? WIRE_MSG_MORE_TO_COME : 0));
        p[4] = 0;
        p += 5;
    }
    memcpy(p, data, doc->len);
    p += doc->len;
    if (req->reply_opcode == WIRE_OP_MSG && req->checksum)
        put_le32(p, wire_crc32c(0, out, total - 4));
    *len = total;
    return out;
}

uint8_t *wire_exhaust_next(const wire_request_t *req, const bson_t *tv, int32_t our_id,
                           size_t *len) {
    wire_request_t next;
    bson_t cmd;
    bson_iter_t it;
    uint8_t *out;

    /* MongoDB's exhaust hello: the same command, its topologyVersion the one just sent. */
    bson_init(&cmd);
    if (bson_iter_init(&it, &req->cmd))
        while (bson_iter_next(&it)) {
            if (strcmp(bson_iter_key(&it), "topologyVersion") == 0)
                BSON_APPEND_DOCUMENT(&cmd, "topologyVersion", tv);
            else
                bson_append_iter(&cmd, bson_iter_key(&it), (int)bson_iter_key_len(&it), &it);
        }
    /* An OP_MSG "reply" to nobody, of the same shape as the request: encode it as one. */
    memset(&next, 0, sizeof next);
    next.reply_opcode = WIRE_OP_MSG;
    next.checksum = req->checksum;
    next.request_id = 0;  /* its responseTo */
    out = wire_reply_encode(&next, our_id, &cmd, len);
    bson_destroy(&cmd);
    if (out) {
        /* flagBits: exhaustAllowed (and checksumPresent): rewrite, then re-sum. */
        put_le32(out + WIRE_HEADER_BYTES,
                 WIRE_MSG_EXHAUST_ALLOWED | (req->checksum ? WIRE_MSG_CHECKSUM : 0));
        if (req->checksum) put_le32(out + *len - 4, wire_crc32c(0, out, *len - 4));
    }
    return out;
}
