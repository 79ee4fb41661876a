/*
 * test_common_wire.c — the MongoDB wire protocol codec (common/wire.c): CRC-32C against
 * known vectors, OP_MSG decoding (flags, kind-0/kind-1 sections merged into the command,
 * every malformed length refused), OP_QUERY on <db>.$cmd unwrapped into a command,
 * OP_COMPRESSED refused, unknown opcodes closing, and the replies' encoding.
 */
#include <string.h>

#include "common/bsonx.h"
#include "common/log.h"
#include "common/wire.h"
#include "tests/unit/t.h"

/* ---- message building --------------------------------------------------------------- */

typedef struct msgbuf {
    uint8_t b[4096];
    size_t n;
} msgbuf_t;

static void mb_bytes(msgbuf_t *m, const void *p, size_t n) {
    ASSERT(m->n + n <= sizeof m->b);
    memcpy(m->b + m->n, p, n);
    m->n += n;
}

static void mb_u32(msgbuf_t *m, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    mb_bytes(m, b, 4);
}

static void mb_u8(msgbuf_t *m, uint8_t v) { mb_bytes(m, &v, 1); }

static void mb_doc(msgbuf_t *m, const char *json) {
    bson_t b;
    t_json(json, &b);
    mb_bytes(m, bson_get_data(&b), b.len);
    bson_destroy(&b);
}

static void mb_header(msgbuf_t *m, int32_t id, int32_t opcode) {
    m->n = 0;
    mb_u32(m, 0);  /* length: set by mb_finish */
    mb_u32(m, (uint32_t)id);
    mb_u32(m, 0);
    mb_u32(m, (uint32_t)opcode);
}

static void mb_set_u32(msgbuf_t *m, size_t at, uint32_t v) {
    m->b[at] = (uint8_t)v;
    m->b[at + 1] = (uint8_t)(v >> 8);
    m->b[at + 2] = (uint8_t)(v >> 16);
    m->b[at + 3] = (uint8_t)(v >> 24);
}

/* Sets messageLength; with checksum, appends the CRC-32C (flagBits must say so). */
static void mb_finish(msgbuf_t *m, bool checksum) {
    mb_set_u32(m, 0, (uint32_t)(m->n + (checksum ? 4 : 0)));
    if (checksum) mb_u32(m, wire_crc32c(0, m->b, m->n));
}

/* Starts a kind-1 section; returns where its size goes (mb_seq_end fills it). */
static size_t mb_seq_begin(msgbuf_t *m, const char *ident) {
    size_t at = m->n;
    mb_u8(m, 1);
    mb_u32(m, 0);
    mb_bytes(m, ident, strlen(ident) + 1);
    return at;
}

static void mb_seq_end(msgbuf_t *m, size_t at) { mb_set_u32(m, at + 1, (uint32_t)(m->n - at - 1)); }

static wire_rc_t decode(const msgbuf_t *m, wire_request_t *r, ms_error_t *err) {
    memset(err, 0, sizeof *err);
    return wire_request_decode(m->b, m->n, r, err);
}

static int64_t field_int(const bson_t *b, const char *path) {
    bson_iter_t it, f;
    if (!bson_iter_init(&it, b) || !bson_iter_find_descendant(&it, path, &f)) return -999;
    return bson_iter_as_int64(&f);
}

static const char *field_str(const bson_t *b, const char *path) {
    bson_iter_t it, f;
    if (!bson_iter_init(&it, b) || !bson_iter_find_descendant(&it, path, &f) ||
        !BSON_ITER_HOLDS_UTF8(&f))
        return "";
    return bson_iter_utf8(&f, NULL);
}

/* ---- cases -------------------------------------------------------------------------- */

static void wire_crc_vectors(void) {
    CHECK_INT(wire_crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_INT(wire_crc32c(0, "", 0), 0);
    /* iSCSI test vectors (RFC 3720 B.4): 32 zero bytes, 32 bytes of 0xff. */
    {
        uint8_t z[32] = {0}, f[32];
        memset(f, 0xff, sizeof f);
        CHECK_INT(wire_crc32c(0, z, sizeof z), 0x8A9136AAu);
        CHECK_INT(wire_crc32c(0, f, sizeof f), 0x62A8AB43u);
    }
    /* Incremental = whole. */
    CHECK_INT(wire_crc32c(wire_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
}

static void wire_op_msg_body(void) {
    msgbuf_t m;
    wire_request_t r;
    ms_error_t err;
    mb_header(&m, 77, WIRE_OP_MSG);
    mb_u32(&m, WIRE_MSG_EXHAUST_ALLOWED);  /* accepted: only an awaitable hello streams */
    mb_u8(&m, 0);
    mb_doc(&m, "{\"ping\": 1, \"$db\": \"admin\"}");
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_OK);
    CHECK_INT(r.request_id, 77);
    CHECK_INT(r.reply_opcode, WIRE_OP_MSG);
    CHECK(!r.checksum && !r.more_to_come && r.exhaust_allowed);
    CHECK_INT(field_int(&r.cmd, "ping"), 1);
    CHECK_STR(field_str(&r.cmd, "$db"), "admin");
    wire_request_free(&r);
}

static void wire_op_msg_sequences(void) {
    msgbuf_t m;
    wire_request_t r;
    ms_error_t err;
    size_t at;
    bson_t view;
    mb_header(&m, 5, WIRE_OP_MSG);
    mb_u32(&m, WIRE_MSG_CHECKSUM);
    /* The sequence before the body: drivers put it either side. */
    at = mb_seq_begin(&m, "documents");
    for (int i = 0; i < 3; i++) {
        char j[32];
        snprintf(j, sizeof j, "{\"_id\": %d}", i);
        mb_doc(&m, j);
    }
    mb_seq_end(&m, at);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"insert\": \"c\", \"$db\": \"app\", \"ordered\": true}");
    mb_finish(&m, true);
    CHECK_INT(decode(&m, &r, &err), WIRE_OK);
    CHECK(r.checksum);
    CHECK_STR(field_str(&r.cmd, "insert"), "c");
    CHECK_INT(field_int(&r.cmd, "documents.0._id"), 0);
    CHECK_INT(field_int(&r.cmd, "documents.2._id"), 2);
    CHECK_INT(bsonx_view(bson_get_data(&r.cmd), r.cmd.len, &view, &err), 0);
    {   /* the command name stays first */
        bson_iter_t it;
        CHECK(bson_iter_init(&it, &r.cmd) && bson_iter_next(&it));
        CHECK_STR(bson_iter_key(&it), "insert");
    }
    wire_request_free(&r);

    /* An empty sequence is an empty array. */
    mb_header(&m, 6, WIRE_OP_MSG);
    mb_u32(&m, 0);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"insert\": \"c\", \"$db\": \"app\"}");
    at = mb_seq_begin(&m, "documents");
    mb_seq_end(&m, at);
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_OK);
    {
        bson_iter_t it;
        CHECK(bson_iter_init_find(&it, &r.cmd, "documents") && BSON_ITER_HOLDS_ARRAY(&it));
    }
    wire_request_free(&r);
}

static void wire_op_msg_flags(void) {
    msgbuf_t m;
    wire_request_t r;
    ms_error_t err;
    /* moreToCome */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, WIRE_MSG_MORE_TO_COME);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"ping\": 1, \"$db\": \"admin\"}");
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_OK);
    CHECK(r.more_to_come);
    wire_request_free(&r);
    /* an unknown required bit (2..15) closes; an unknown optional one (17..31) does not */
    for (int bit = 2; bit < 32; bit++) {
        wire_rc_t want = bit < 16 ? WIRE_CLOSE : WIRE_OK;
        mb_header(&m, 1, WIRE_OP_MSG);
        mb_u32(&m, 1u << bit);
        mb_u8(&m, 0);
        mb_doc(&m, "{\"ping\": 1, \"$db\": \"admin\"}");
        mb_finish(&m, false);
        CHECK_INT(decode(&m, &r, &err), want);
        if (bit < 16) CHECK_INT(err.code, MS_ERR_ILLEGAL_OP_MSG_FLAG);
        wire_request_free(&r);
    }
    /* a wrong checksum closes */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, WIRE_MSG_CHECKSUM);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"ping\": 1, \"$db\": \"admin\"}");
    mb_finish(&m, true);
    m.b[m.n - 1] ^= 1;
    CHECK_INT(decode(&m, &r, &err), WIRE_CLOSE);
    wire_request_free(&r);
    /* checksumPresent with no room for one */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, WIRE_MSG_CHECKSUM);
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_CLOSE);
    wire_request_free(&r);
}

static void wire_op_msg_refused(void) {
    msgbuf_t m;
    wire_request_t r;
    ms_error_t err;
    size_t at;

    /* no body */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, 0);
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    CHECK_INT(err.code, MS_ERR_LOC_OPMSG_NO_BODY);
    wire_request_free(&r);
    /* two bodies */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, 0);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"ping\": 1, \"$db\": \"admin\"}");
    mb_u8(&m, 0);
    mb_doc(&m, "{\"ping\": 1, \"$db\": \"admin\"}");
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    CHECK_INT(err.code, MS_ERR_LOC_OPMSG_MULTIPLE_BODIES);
    wire_request_free(&r);
    /* unknown section kind */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, 0);
    mb_u8(&m, 2);
    mb_doc(&m, "{\"ping\": 1, \"$db\": \"admin\"}");
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    CHECK_INT(err.code, MS_ERR_LOC_OPMSG_UNKNOWN_SECTION);
    wire_request_free(&r);
    /* no $db */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, 0);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"ping\": 1}");
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    CHECK_INT(err.code, MS_ERR_LOC_OPMSG_NO_DB);
    wire_request_free(&r);
    /* a field both in the body and as a sequence */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, 0);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"insert\": \"c\", \"documents\": [], \"$db\": \"app\"}");
    at = mb_seq_begin(&m, "documents");
    mb_doc(&m, "{\"_id\": 1}");
    mb_seq_end(&m, at);
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    CHECK_INT(err.code, MS_ERR_LOC_OPMSG_DUP_FIELD);
    wire_request_free(&r);
    /* the same sequence twice */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, 0);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"insert\": \"c\", \"$db\": \"app\"}");
    for (int i = 0; i < 2; i++) {
        at = mb_seq_begin(&m, "documents");
        mb_seq_end(&m, at);
    }
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    CHECK_INT(err.code, MS_ERR_LOC_OPMSG_DUP_SEQUENCE);
    wire_request_free(&r);
    /* more sequences than MongoDB takes: the connection closes */
    mb_header(&m, 1, WIRE_OP_MSG);
    mb_u32(&m, 0);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"insert\": \"c\", \"$db\": \"app\"}");
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "s%d", i);
        at = mb_seq_begin(&m, name);
        mb_seq_end(&m, at);
    }
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_CLOSE);
    wire_request_free(&r);
}

/* Every length that points past its container is refused, never followed. */
static void wire_op_msg_lengths(void) {
    msgbuf_t m, ok;
    wire_request_t r;
    ms_error_t err;
    size_t at, body_at;

    mb_header(&ok, 1, WIRE_OP_MSG);
    mb_u32(&ok, 0);
    at = mb_seq_begin(&ok, "documents");
    mb_doc(&ok, "{\"_id\": 1}");
    mb_seq_end(&ok, at);
    mb_u8(&ok, 0);
    body_at = ok.n;
    mb_doc(&ok, "{\"insert\": \"c\", \"$db\": \"app\"}");
    mb_finish(&ok, false);
    CHECK_INT(decode(&ok, &r, &err), WIRE_OK);
    wire_request_free(&r);

    /* section size past the message, and below its own 4 bytes */
    m = ok;
    mb_set_u32(&m, at + 1, 100000);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    wire_request_free(&r);
    m = ok;
    mb_set_u32(&m, at + 1, 3);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    wire_request_free(&r);
    /* a sequence document longer than its section */
    m = ok;
    mb_set_u32(&m, at + 1 + 4 + 10, 200);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    CHECK_INT(err.code, MS_ERR_INVALID_BSON);
    wire_request_free(&r);
    /* body length past the message, and too short */
    m = ok;
    mb_set_u32(&m, body_at, 4000);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    wire_request_free(&r);
    m = ok;
    mb_set_u32(&m, body_at, 4);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    wire_request_free(&r);
    /* messageLength disagreeing with the bytes, and a message shorter than a header */
    m = ok;
    mb_set_u32(&m, 0, (uint32_t)m.n + 1);
    CHECK_INT(decode(&m, &r, &err), WIRE_CLOSE);
    wire_request_free(&r);
    CHECK_INT(wire_request_decode(ok.b, 10, &r, &err), WIRE_CLOSE);
    wire_request_free(&r);
    /* every truncation of a valid message is refused, never read past */
    for (size_t n = WIRE_HEADER_BYTES; n < ok.n; n++) {
        m = ok;
        m.n = n;
        mb_set_u32(&m, 0, (uint32_t)n);
        CHECK(decode(&m, &r, &err) != WIRE_OK);
        wire_request_free(&r);
    }
}

static void wire_op_query(void) {
    msgbuf_t m;
    wire_request_t r;
    ms_error_t err;
    /* plain: isMaster on admin.$cmd, as drivers send their first handshake */
    mb_header(&m, 9, WIRE_OP_QUERY);
    mb_u32(&m, 0);
    mb_bytes(&m, "admin.$cmd", 11);
    mb_u32(&m, 0);
    mb_u32(&m, (uint32_t)-1);
    mb_doc(&m, "{\"isMaster\": 1, \"helloOk\": true, \"$db\": \"evil\"}");
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_OK);
    CHECK_INT(r.reply_opcode, WIRE_OP_REPLY);
    CHECK_INT(field_int(&r.cmd, "isMaster"), 1);
    CHECK_STR(field_str(&r.cmd, "$db"), "admin");  /* the namespace's, not the body's */
    wire_request_free(&r);
    /* wrapped in $query with $readPreference */
    mb_header(&m, 9, WIRE_OP_QUERY);
    mb_u32(&m, 4);
    mb_bytes(&m, "app.$cmd", 9);
    mb_u32(&m, 0);
    mb_u32(&m, 1);
    mb_doc(&m, "{\"$query\": {\"count\": \"c\"}, \"$readPreference\": {\"mode\": \"primary\"}}");
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_OK);
    CHECK_STR(field_str(&r.cmd, "count"), "c");
    CHECK_STR(field_str(&r.cmd, "$readPreference.mode"), "primary");
    CHECK_STR(field_str(&r.cmd, "$db"), "app");
    wire_request_free(&r);
    /* a non-command namespace: an error with QueryFailure */
    mb_header(&m, 9, WIRE_OP_QUERY);
    mb_u32(&m, 0);
    mb_bytes(&m, "app.c", 6);
    mb_u32(&m, 0);
    mb_u32(&m, 1);
    mb_doc(&m, "{}");
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    CHECK(r.query_failure);
    CHECK_INT(err.code, MS_ERR_UNSUPPORTED_OP_QUERY_COMMAND);
    wire_request_free(&r);
    /* an array keyed other than "0", "1", ... (found by make fuzz: libbson warned when the
     * rewrite copied it): renumbered before the copy */
    {
        static const uint8_t q[] = {32, 0, 0, 0, 0x04, '$', 'q', 'u', 'e', 'r', 'y', 0,
                                    19, 0, 0, 0, 0x10, 'i', 's', 'm', 'a', 's', 't', 'e', 'r', 0,
                                    1, 0, 0, 0, 0, 0};
        bson_iter_t it, arr;
        mb_header(&m, 9, WIRE_OP_QUERY);
        mb_u32(&m, 0);
        mb_bytes(&m, "admin.$cmd", 11);
        mb_u32(&m, 0);
        mb_u32(&m, (uint32_t)-1);
        mb_bytes(&m, q, sizeof q);
        mb_finish(&m, false);
        CHECK_INT(decode(&m, &r, &err), WIRE_OK);
        CHECK(bsonx_arrays_numbered(&r.cmd, NULL));
        CHECK(bson_iter_init_find(&it, &r.cmd, "$query") && BSON_ITER_HOLDS_ARRAY(&it) &&
              bson_iter_recurse(&it, &arr) && bson_iter_next(&arr) &&
              strcmp(bson_iter_key(&arr), "0") == 0 && bson_iter_int32(&arr) == 1);
        wire_request_free(&r);
    }
    /* no terminator on the namespace */
    mb_header(&m, 9, WIRE_OP_QUERY);
    mb_u32(&m, 0);
    mb_bytes(&m, "admin.$cmd", 10);
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    wire_request_free(&r);
}

static void wire_other_opcodes(void) {
    msgbuf_t m;
    wire_request_t r;
    ms_error_t err;
    mb_header(&m, 3, WIRE_OP_COMPRESSED);
    mb_u32(&m, WIRE_OP_QUERY);
    mb_u32(&m, 10);
    mb_u8(&m, 2);
    mb_bytes(&m, "xxxxxxxxxx", 10);
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_ERROR);
    CHECK_INT(r.reply_opcode, WIRE_OP_REPLY);
    wire_request_free(&r);
    CHECK(wire_opcode_known(WIRE_OP_MSG) && wire_opcode_known(WIRE_OP_QUERY));
    CHECK(!wire_opcode_known(WIRE_OP_REPLY) && !wire_opcode_known(2001) &&
          !wire_opcode_known(2005));
    mb_header(&m, 3, 2005);  /* OP_GET_MORE: removed from MongoDB */
    mb_u32(&m, 0);
    mb_finish(&m, false);
    CHECK_INT(decode(&m, &r, &err), WIRE_CLOSE);
    wire_request_free(&r);
}

static void wire_replies(void) {
    wire_request_t req = {.request_id = 42, .reply_opcode = WIRE_OP_MSG, .checksum = true};
    bson_t doc, back;
    size_t len = 0;
    uint8_t *out;
    wire_header_t h;
    ms_error_t err = {MS_ERR_BAD_VALUE, "nope"};

    t_json("{\"ok\": 1}", &doc);
    out = wire_reply_encode(&req, 7, &doc, &len);
    CHECK(out);
    CHECK_INT(len, 16 + 4 + 1 + doc.len + 4);
    wire_header_read(out, &h);
    CHECK_INT(h.length, (int)len);
    CHECK_INT(h.request_id, 7);
    CHECK_INT(h.response_to, 42);
    CHECK_INT(h.opcode, WIRE_OP_MSG);
    CHECK_INT(out[16], WIRE_MSG_CHECKSUM);
    CHECK_INT(out[20], 0);
    CHECK_INT(wire_crc32c(0, out, len - 4),
              (uint32_t)out[len - 4] | (uint32_t)out[len - 3] << 8 |
                  (uint32_t)out[len - 2] << 16 | (uint32_t)out[len - 1] << 24);
    CHECK(bson_init_static(&back, out + 21, doc.len) && bson_equal(&back, &doc));
    bson_free(out);

    req.reply_opcode = WIRE_OP_REPLY;
    out = wire_reply_encode(&req, 8, &doc, &len);
    CHECK(out);
    CHECK_INT(len, 16 + 20 + doc.len);
    wire_header_read(out, &h);
    CHECK_INT(h.opcode, WIRE_OP_REPLY);
    CHECK_INT(out[16], 0);                 /* responseFlags */
    CHECK_INT(out[16 + 4 + 8 + 4], 1);     /* numberReturned */
    bson_free(out);
    bson_destroy(&doc);

    bson_init(&doc);
    req.query_failure = true;
    wire_error_doc(&req, &err, &doc);
    CHECK_INT(field_int(&doc, "code"), MS_ERR_BAD_VALUE);
    CHECK_STR(field_str(&doc, "codeName"), "BadValue");
    CHECK_STR(field_str(&doc, "$err"), "nope");
    out = wire_reply_encode(&req, 9, &doc, &len);
    CHECK_INT(out[16], WIRE_REPLY_QUERY_FAILURE);
    bson_free(out);
    bson_destroy(&doc);
}

/* The exhaust hello: a streamed reply carries moreToCome; the next invocation is the same
 * command with the reply's topologyVersion, requestID = the reply's own (so the next
 * reply's responseTo chains to it), exhaustAllowed and, as the request, a checksum. */
static void wire_exhaust(void) {
    msgbuf_t m;
    wire_request_t req, next;
    ms_error_t err = {0};
    bson_t tv, doc, want;
    uint8_t *out;
    size_t len = 0;
    wire_header_t h;

    mb_header(&m, 5, WIRE_OP_MSG);
    mb_u32(&m, WIRE_MSG_EXHAUST_ALLOWED | WIRE_MSG_CHECKSUM);
    mb_u8(&m, 0);
    mb_doc(&m, "{\"hello\": 1, \"topologyVersion\": {\"processId\": {\"$oid\": "
               "\"0123456789abcdef01234567\"}, \"counter\": {\"$numberLong\": \"0\"}}, "
               "\"maxAwaitTimeMS\": 500, \"$db\": \"admin\"}");
    mb_finish(&m, true);
    CHECK_INT(wire_request_decode(m.b, m.n, &req, &err), WIRE_OK);
    CHECK(req.exhaust_allowed && req.checksum && !req.more_to_come);

    t_json("{\"ok\": 1}", &doc);
    req.reply_more_to_come = true;
    out = wire_reply_encode(&req, 77, &doc, &len);
    CHECK(out);
    CHECK_INT(out[16], WIRE_MSG_CHECKSUM | WIRE_MSG_MORE_TO_COME);
    bson_free(out);
    bson_destroy(&doc);

    t_json("{\"processId\": {\"$oid\": \"0123456789abcdef01234567\"}, "
           "\"counter\": {\"$numberLong\": \"1\"}}", &tv);
    out = wire_exhaust_next(&req, &tv, 77, &len);
    CHECK(out);
    if (out) {
        wire_header_read(out, &h);
        CHECK_INT(h.request_id, 77);
        CHECK_INT(h.response_to, 0);
        CHECK_INT(wire_request_decode(out, len, &next, &err), WIRE_OK);  /* checksum verified */
        CHECK(next.exhaust_allowed && next.checksum && !next.more_to_come);
        t_json("{\"hello\": 1, \"topologyVersion\": {\"processId\": {\"$oid\": "
               "\"0123456789abcdef01234567\"}, \"counter\": {\"$numberLong\": \"1\"}}, "
               "\"maxAwaitTimeMS\": 500, \"$db\": \"admin\"}", &want);
        CHECK(next.has_cmd && bson_equal(&next.cmd, &want));  /* same fields, same order */
        bson_destroy(&want);
        wire_request_free(&next);
    }
    bson_free(out);
    bson_destroy(&tv);
    wire_request_free(&req);
}

/* Found by the fuzzer: an embedded document without its 0 terminator passes libbson's
 * validator but makes bson_init_static (and so BSON_ASSERTs in libbson and in query.c)
 * fail later; dispatch's bsonx_view must refuse it, so neither transport lets it in. */
static void wire_unterminated_embedded_doc(void) {
    /* {a: {x: 1}} with the inner document's terminator replaced by 0x06 */
    const uint8_t good[] = {20, 0, 0, 0, 0x03, 'a', 0, 12, 0, 0, 0, 0x10, 'x', 0, 1, 0, 0, 0, 0,
                            0};
    bson_t view;
    ms_error_t err = {0};
    uint8_t bad[sizeof good];
    CHECK_INT(bsonx_view(good, sizeof good, &view, &err), 0);
    memcpy(bad, good, sizeof good);
    bad[18] = 0x06;
    CHECK_INT(bsonx_view(bad, sizeof bad, &view, &err), MS_ERR_INVALID_BSON);
}

T_MAIN(T_CASE(wire_crc_vectors), T_CASE(wire_unterminated_embedded_doc), T_CASE(wire_op_msg_body),
       T_CASE(wire_op_msg_sequences), T_CASE(wire_op_msg_flags), T_CASE(wire_op_msg_refused), T_CASE(wire_op_msg_lengths),
       T_CASE(wire_op_query), T_CASE(wire_other_opcodes), T_CASE(wire_replies), T_CASE(wire_exhaust))
