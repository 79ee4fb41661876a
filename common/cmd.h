/*
 * cmd.h — command tables and dispatch, used by every daemon.
 *
 * Each daemon has one table (its *_cmd.c): a row per command with its handler, flags
 * and the types of its fields. Dispatch checks, before any handler runs: message size,
 * BSON validity and depth, that the first key names a known command (CommandNotFound),
 * that test-only commands exist only with --enable-test-commands, and the types of
 * the command's value and of every listed field (TypeMismatch; FailedToParse when a
 * required field is missing). Then the handler fills the reply; dispatch adds `ok: 1`,
 * or turns its error into {ok: 0, code, codeName, errmsg} plus any fields the handler
 * put in ctx->err_info. Names ($db, and the collection or namespace a row's flags point
 * at) and numeric fields with a `check` follow common/validate.h, so every daemon applies
 * MongoDB's rules and codes the same way. Then the checks MongoDB applies across commands
 * (cmd_conform.c: the Stable API fields, `collation`, create's options), and the request's
 * session (lsid) is set for the handler (common/opctx.h). Every error reply is logged with
 * the command name.
 *
 * The reply a handler gets is a fresh document of dispatch's own: when the handler
 * fails, it is destroyed whatever state it is in (even with a sub-document still open,
 * which libbson would refuse to append to), so no error path can abort the process.
 * A handler that succeeds but leaves a sub-document open gets InternalError.
 *
 * The common commands every daemon serves (hello/isMaster, ping, serverStatus,
 * buildInfo, listCommands, configureFailPoint and waitForFailPoint) live in
 * cmd_common.c; a daemon's own row of the same name takes precedence.
 */
#ifndef MS_CMD_H
#define MS_CMD_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stdint.h>

#include "errors.h"
#include "limits.h"
#include "rpc.h"

/* Type masks for field checks: one bit per BSON type. */
#define CT_BIT(t) (1u << ((unsigned)(t) & 31u))
#define CT_DOUBLE CT_BIT(BSON_TYPE_DOUBLE)
#define CT_STR CT_BIT(BSON_TYPE_UTF8)
#define CT_DOC CT_BIT(BSON_TYPE_DOCUMENT)
#define CT_ARR CT_BIT(BSON_TYPE_ARRAY)
#define CT_BIN CT_BIT(BSON_TYPE_BINARY)
#define CT_OID CT_BIT(BSON_TYPE_OID)
#define CT_BOOL CT_BIT(BSON_TYPE_BOOL)
#define CT_DATE CT_BIT(BSON_TYPE_DATE_TIME)
#define CT_NULL CT_BIT(BSON_TYPE_NULL)
#define CT_INT32 CT_BIT(BSON_TYPE_INT32)
#define CT_TS CT_BIT(BSON_TYPE_TIMESTAMP)
#define CT_INT64 CT_BIT(BSON_TYPE_INT64)
#define CT_DEC CT_BIT(BSON_TYPE_DECIMAL128)
#define CT_NUM (CT_DOUBLE | CT_INT32 | CT_INT64 | CT_DEC)
#define CT_ANY 0xffffffffu
/* A flag-like field: bool or number, as MongoDB accepts `multi: 1`. */
#define CT_FLAG (CT_BOOL | CT_NUM)

enum cmd_flags {
    CMD_WRITE = 1u << 0,     /* changes data or metadata */
    CMD_INTERNAL = 1u << 1,  /* sent by peers only; a router refuses it from clients */
    CMD_TEST = 1u << 2,      /* exists only with --enable-test-commands */
    CMD_NO_LOG = 1u << 3,    /* too chatty to log at info (ping, hello) */
    /* Names dispatch validates (common/validate.h) before the handler runs; with CMD_WRITE
     * the collection must also be one a client may write or create (no system.*). */
    CMD_NS_ARG = 1u << 4,      /* the command's value is a collection name in $db */
    CMD_DB_ARG = 1u << 5,      /* the command's value is a database name (enableSharding) */
    CMD_FULL_NS_ARG = 1u << 6, /* the command's value is "db.collection" (shardCollection) */
    CMD_NS_FIELD = 1u << 7,    /* the `collection` field is a collection name in $db (getMore) */
    /* MongoDB's IDL `strict: true`: a top-level field neither in `fields` nor one of the
     * generic arguments every command takes (cmd_generic_args) is refused with 40415
     * "BSON field '<cmd>.<field>' is an unknown field."; so is a field of a statement in
     * the row's `stmts` array that is not in `stmt_fields`. Every check runs before the
     * handler, so no statement of a refused batch is executed. */
    CMD_STRICT_FIELDS = 1u << 8,
};

#define CMD_FIELDS_MAX 40

/* The MongoDB release whose commands and replies minishard follows: buildInfo.version
 * and hello's maxWireVersion agree on it (7.0 = wire version 21), since drivers and
 * mongosh pick their behaviour from either (the router's config.mongos mongoVersion too). */
#define MS_MONGODB_VERSION "7.0.0"
#define MS_MONGODB_VERSION_ARRAY {7, 0, 0, 0}
#define MS_MONGODB_FCV "7.0"
#define MS_MIN_WIRE_VERSION 0
#define MS_MAX_WIRE_VERSION 21

typedef struct cmd_field {
    const char *name;   /* NULL ends the list */
    uint32_t types;     /* allowed CT_* mask */
    bool required;
    int check;          /* enum val_num_check (common/validate.h) for numbers; 0 = none */
} cmd_field_t;

struct cmd_ctx;
typedef int (*cmd_handler_fn)(struct cmd_ctx *ctx, bson_t *reply, ms_error_t *err);

typedef struct cmd_spec {
    const char *name;                    /* the first key */
    cmd_handler_fn handler;
    unsigned flags;                      /* enum cmd_flags */
    uint32_t arg_types;                  /* allowed types of the command's own value; 0 = any */
    cmd_field_t fields[CMD_FIELDS_MAX];  /* checked before the handler runs */
    const char *help;                    /* one line for listCommands */
    /* With CMD_STRICT_FIELDS: the array of statements ("updates", "deletes") whose
     * document elements may hold only the names in stmt_fields (NULL-ended). */
    const char *stmts;
    const char *const *stmt_fields;
} cmd_spec_t;

/* MongoDB 7.0's generic arguments (src/mongo/idl/generic_argument.idl): accepted by every
 * command, strict or not. NULL-ended. */
extern const char *const cmd_generic_args[];
/* The fields of an update and of a delete statement in MongoDB 7.0 (write_ops.idl's
 * UpdateOpEntry and DeleteOpEntry; `sort` in an update statement is 7.1+). NULL-ended. */
extern const char *const cmd_update_stmt_fields[];
extern const char *const cmd_delete_stmt_fields[];
/* The same with $_shardKeyRanges (the router's multi-write narrowing): the shard's lists. */
extern const char *const cmd_shard_update_stmt_fields[];
extern const char *const cmd_shard_delete_stmt_fields[];
bool cmd_is_generic_arg(const char *name);
/* CMD_STRICT_FIELDS's check of `doc` (a command document: its first key is the command)
 * against `spec`: 40415 for an unknown field, TypeMismatch for a listed one of the wrong
 * type, in document order. For a command inside another one (explain's inner command),
 * which dispatch never saw. */
int cmd_check_strict_doc(const cmd_spec_t *spec, const bson_t *doc, ms_error_t *err);

/* Fields MongoDB 7.0 accepts on a CRUD command that minishard accepts without acting on
 * them (type unchecked), shared by the shard's and the router's rows so the router never
 * forwards a field the shard refuses. A row lists its own checked fields, then these. */
#define CMD_ANY_FIELD(nm) {nm, CT_ANY, false, 0}
#define CMD_WRITE_BASE_FIELDS                                                          \
    CMD_ANY_FIELD("bypassDocumentValidation"), CMD_ANY_FIELD("stmtIds"),               \
    CMD_ANY_FIELD("isTimeseriesNamespace"), CMD_ANY_FIELD("collectionUUID"),           \
    CMD_ANY_FIELD("encryptionInformation")
#define CMD_INSERT_MORE_FIELDS CMD_WRITE_BASE_FIELDS
#define CMD_UPDATE_MORE_FIELDS \
    CMD_WRITE_BASE_FIELDS, CMD_ANY_FIELD("let"), CMD_ANY_FIELD("runtimeConstants")
#define CMD_DELETE_MORE_FIELDS CMD_UPDATE_MORE_FIELDS
#define CMD_FIND_MORE_FIELDS                                                           \
    CMD_ANY_FIELD("let"), CMD_ANY_FIELD("collation"), CMD_ANY_FIELD("allowDiskUse"),   \
    CMD_ANY_FIELD("max"), CMD_ANY_FIELD("min"), CMD_ANY_FIELD("returnKey"),            \
    CMD_ANY_FIELD("showRecordId"), CMD_ANY_FIELD("tailable"),                          \
    CMD_ANY_FIELD("oplogReplay"), CMD_ANY_FIELD("noCursorTimeout"),                    \
    CMD_ANY_FIELD("awaitData"), CMD_ANY_FIELD("allowPartialResults"),                  \
    CMD_ANY_FIELD("readOnce"), CMD_ANY_FIELD("allowSpeculativeMajorityRead"),          \
    CMD_ANY_FIELD("$_requestResumeToken"), CMD_ANY_FIELD("$_resumeAfter"),             \
    CMD_ANY_FIELD("$_startAt"), CMD_ANY_FIELD("term"),                                 \
    CMD_ANY_FIELD("encryptionInformation"), CMD_ANY_FIELD("sampleId"),                 \
    CMD_ANY_FIELD("runtimeConstants"), CMD_ANY_FIELD("collectionUUID"),                \
    CMD_ANY_FIELD("options")
#define CMD_COUNT_MORE_FIELDS                                                          \
    CMD_ANY_FIELD("collation"), CMD_ANY_FIELD("fields"),                               \
    CMD_ANY_FIELD("encryptionInformation"), CMD_ANY_FIELD("mirrored"),                 \
    CMD_ANY_FIELD("sampleId")
#define CMD_DISTINCT_MORE_FIELDS \
    CMD_ANY_FIELD("collation"), CMD_ANY_FIELD("mirrored"), CMD_ANY_FIELD("sampleId")
#define CMD_FAM_MORE_FIELDS                                                            \
    CMD_ANY_FIELD("hint"), CMD_ANY_FIELD("collation"), CMD_ANY_FIELD("arrayFilters"),  \
    CMD_ANY_FIELD("bypassDocumentValidation"), CMD_ANY_FIELD("let"),                   \
    CMD_ANY_FIELD("runtimeConstants"), CMD_ANY_FIELD("encryptionInformation"),         \
    CMD_ANY_FIELD("sampleId"), CMD_ANY_FIELD("batchSize"),                             \
    CMD_ANY_FIELD("$_allowShardKeyUpdatesWithoutFullShardKeyInQuery")
#define CMD_GETMORE_MORE_FIELDS CMD_ANY_FIELD("term"), CMD_ANY_FIELD("lastKnownCommittedOpTime")
/* The catalog and cursor commands (create.idl, drop.idl, create_indexes.idl,
 * drop_indexes.idl, list_indexes.idl, list_collections.idl, list_databases.idl of 7.0):
 * the 7.0 fields minishard accepts without acting on them (docs/protocol.md). */
#define CMD_CREATE_MORE_FIELDS                                                         \
    CMD_ANY_FIELD("capped"), CMD_ANY_FIELD("autoIndexId"), CMD_ANY_FIELD("idIndex"),   \
    CMD_ANY_FIELD("size"), CMD_ANY_FIELD("max"), CMD_ANY_FIELD("storageEngine"),       \
    CMD_ANY_FIELD("validator"), CMD_ANY_FIELD("validationLevel"),                      \
    CMD_ANY_FIELD("validationAction"), CMD_ANY_FIELD("indexOptionDefaults"),           \
    CMD_ANY_FIELD("viewOn"), CMD_ANY_FIELD("pipeline"), CMD_ANY_FIELD("collation"),    \
    CMD_ANY_FIELD("changeStreamPreAndPostImages"), CMD_ANY_FIELD("timeseries"),        \
    CMD_ANY_FIELD("clusteredIndex"), CMD_ANY_FIELD("expireAfterSeconds"),              \
    CMD_ANY_FIELD("encryptedFields"), CMD_ANY_FIELD("temp"), CMD_ANY_FIELD("flags")
#define CMD_DROP_MORE_FIELDS CMD_ANY_FIELD("collectionUUID")
#define CMD_CREATE_INDEXES_MORE_FIELDS                                                 \
    CMD_ANY_FIELD("v"), CMD_ANY_FIELD("ignoreUnknownIndexOptions"),                    \
    CMD_ANY_FIELD("commitQuorum"), CMD_ANY_FIELD("isTimeseriesNamespace"),             \
    CMD_ANY_FIELD("collectionUUID")
#define CMD_DROP_INDEXES_MORE_FIELDS \
    CMD_ANY_FIELD("isTimeseriesNamespace"), CMD_ANY_FIELD("collectionUUID")
#define CMD_LIST_INDEXES_FIELDS                                                        \
    CMD_ANY_FIELD("cursor"), CMD_ANY_FIELD("includeBuildUUIDs"),                       \
    CMD_ANY_FIELD("includeIndexBuildInfo"), CMD_ANY_FIELD("isTimeseriesNamespace")
#define CMD_LIST_COLLECTIONS_MORE_FIELDS                                               \
    CMD_ANY_FIELD("cursor"), CMD_ANY_FIELD("authorizedCollections"),                   \
    CMD_ANY_FIELD("includePendingDrops")
#define CMD_LIST_DATABASES_MORE_FIELDS CMD_ANY_FIELD("authorizedDatabases")

/* hello's fields (every daemon's hello row): the handshake's, in MongoDB 7.0's
 * hello.idl; what each means here is in cmd_common.c's cmd_hello. */
#define CMD_HELLO_FIELDS                                                               \
    {{"helloOk", CT_FLAG, false},     {"client", CT_DOC, false},                        \
     {"compression", CT_ARR, false},  {"saslSupportedMechs", CT_STR, false},            \
     {"loadBalanced", CT_FLAG, false}, {"speculativeAuthenticate", CT_DOC, false},      \
     {"topologyVersion", CT_ANY, false}, {"maxAwaitTimeMS", CT_NUM, false}}

typedef struct cmd_server cmd_server_t;

/* What a handler sees. Everything is borrowed for the duration of the call. */
typedef struct cmd_ctx {
    cmd_server_t *srv;
    void *app;                 /* the daemon's state, as given to cmd_server_new */
    const bson_t *req;         /* the whole request: a view into the received message */
    const cmd_spec_t *spec;
    const char *name;          /* == spec->name */
    bson_iter_t arg;           /* positioned on the first element (the command's value) */
    const char *db;            /* $db, or "admin" when absent */
    bson_t err_info;           /* extra fields for an error reply (StaleConfig's vWanted...) */
} cmd_ctx_t;

/* serverStatus contributions of a daemon: appends its own sections to reply. */
typedef void (*cmd_status_fn)(void *app, bson_t *reply);

typedef struct cmd_server_opts {
    const char *process;        /* "shardd", "configsvr", "router" */
    const char *url;            /* where it listens */
    int workers;                /* 0 → MS_RPC_WORKERS_DEFAULT */
    /* > 0: commands whose name starts with '_' (peer-to-peer) run on this many workers
     * of their own (rpc_server_opts_t); 0: they share the pool. */
    int internal_workers;
    bool enable_test_commands;
    const cmd_spec_t *table;    /* the daemon's own table */
    int table_len;
    void *app;
    cmd_status_fn status;       /* may be NULL */
    /* May be NULL: appends the daemon's own entries inside serverStatus.metrics (MongoDB's
     * metrics.cursor, for instance). */
    cmd_status_fn metrics;
    /* May be NULL. Sees every request that passed the size and BSON checks, before the
     * command lookup; returning true means it filled reply (an error reply, logged by
     * dispatch) and the request ends there. The router refuses internal commands from
     * clients this way (rt_refuse_internal). */
    bool (*intercept)(const uint8_t *data, size_t len, bson_t *reply);
    /* May be NULL. tcp://host:port where the same commands are also served over MongoDB's
     * wire protocol (rpc_server_opts_t.wire), through the same dispatch. */
    const char *wire_url;
    int wire_idle_ms;           /* the wire listener's idle bound (0 = none) */
} cmd_server_opts_t;

/* Builds a dispatcher and starts serving. *out set on success only. */
int cmd_server_start(const cmd_server_opts_t *opts, cmd_server_t **out, ms_error_t *err);
void cmd_server_stop(cmd_server_t *s);  /* NULL-safe */
bool cmd_server_test_commands(const cmd_server_t *s);
const char *cmd_server_url(const cmd_server_t *s);
const char *cmd_server_process(const cmd_server_t *s);

/* Runs the whole dispatch on raw bytes (what the RPC worker calls); exposed for tests.
 * reply: initialised and empty (caller owns); filled here. */
void cmd_dispatch(cmd_server_t *s, const uint8_t *data, size_t len, bson_t *reply);

/* Finds a command's spec in the daemon table or the common table (NULL if none). */
const cmd_spec_t *cmd_lookup(const cmd_server_t *s, const char *name);

/* Builds an error reply {ok: 0, errmsg, code, codeName} into reply (initialised). */
void cmd_error_reply(bson_t *reply, const ms_error_t *err);

/* Helpers for handlers: the field's iterator if present (false when absent). */
bool cmd_field(const cmd_ctx_t *ctx, const char *name, bson_iter_t *out);
/* Field as bool flag (absent → dflt). */
bool cmd_flag(const cmd_ctx_t *ctx, const char *name, bool dflt);
/* killCursors' `cursors`: every element an int32 or int64 (MongoDB's array<long>), else
 * TypeMismatch "BSON field 'killCursors.cursors.N' is the wrong type 'T', expected type
 * 'long'" — an id that is not an integer cannot name a cursor, and was skipped silently.
 * 0 when the field is absent or not an array (the handler's own checks answer that). */
int cmd_check_cursor_ids(const cmd_ctx_t *ctx, ms_error_t *err);

/* serverStatus `metrics.cursor` of a daemon: MongoDB's shape (`open: {total}`) plus what
 * minishard caps — bytes the cursors hold, refusals per cap, and the caps themselves. A
 * negative refused_* or limit_* is left out (that daemon has no such cap). */
typedef struct cmd_cursor_metrics {
    int64_t open, bytes;
    const char *bytes_field;   /* "bytesHeld" (shard, config server) or "bytesBuffered" */
    int64_t refused_conn, refused_total, refused_bytes;
    int64_t limit_conn, limit_total, limit_bytes;
    int64_t refused_client, limit_client;   /* per client address (the router's) */
} cmd_cursor_metrics_t;
/* Opens metrics.cursor as *cur and fills it; the caller may add fields of its own, then
 * closes it with bson_append_document_end(metrics, cur). */
void cmd_cursor_metrics_begin(bson_t *metrics, const cmd_cursor_metrics_t *m, bson_t *cur);

/* Checks dispatch runs on every command before its handler (cmd_conform.c), here for
 * tests and for a command inside another one. name: the command; req: its document.
 *   cmd_check_api_params: apiVersion must be "1" (APIVersionError 322); apiStrict or
 *     apiDeprecationErrors without apiVersion is 4886600; apiStrict: true on a command
 *     outside API version 1 is APIStrictError 323. Commands named "_..." are exempt.
 *   cmd_check_collation: `collation` (top level, each update/delete statement's, each
 *     createIndexes spec's, explain's inner command's) must be absent or
 *     {locale: "simple"}: BadValue (2) otherwise; TypeMismatch / 40414 when malformed.
 *   cmd_check_create_options: create's views, capped, timeseries, clusteredIndex,
 *     expireAfterSeconds, validator, changeStreamPreAndPostImages, encryptedFields are
 *     refused with InvalidOptions (72) unless absent or off.
 *   cmd_check_conformance: the three, in that order (create's options for create only). */
int cmd_check_api_params(const char *name, const bson_t *req, ms_error_t *err);
/* Whether command name is in API version 1 (listCommands' apiVersions says so too). */
bool cmd_in_api_v1(const char *name);
int cmd_check_collation(const bson_t *req, ms_error_t *err);
int cmd_check_create_options(const bson_t *req, ms_error_t *err);
int cmd_check_conformance(const char *name, const bson_t *req, ms_error_t *err);

/* The common table (hello, ping, serverStatus, ...). */
extern const cmd_spec_t cmd_common_table[];
extern const int cmd_common_table_len;

/* Blocks until SIGINT or SIGTERM (installed by cmd_wait_for_signal), then returns the
 * signal number. Used by every daemon's main after it prints `ready`. */
int cmd_wait_for_signal(void);

/* Blocks SIGINT and SIGTERM in the calling thread, so every thread it starts afterwards
 * (NNG's, the RPC workers, a daemon's own) inherits the mask and the signal reaches only
 * cmd_wait_for_signal. A daemon's main calls it first, before any other library call. */
void cmd_block_signals(void);

/* A retryable write's `stmtIds` (the element it): one 32-bit id per statement of the
 * batch into ids[0..nops) — TypeMismatch for a non-array or an element that is not a
 * 32-bit integer, InvalidLength (16) for another count, as MongoDB answers. The router
 * (passing them on per shard) and the shard (recording them) read them alike. */
int cmd_parse_stmt_ids(const bson_iter_t *it, int nops, int32_t *ids, ms_error_t *err);

/* The namespace a command works on, as MongoDB names it in currentOp and failCommand's
 * `namespace` filter: "db.coll" for a command whose value is a collection (flags
 * CMD_NS_ARG) or a whole namespace (CMD_FULL_NS_ARG), getMore's `collection`,
 * "db.$cmd.aggregate" for a collectionless aggregate, else "db.$cmd". */
void cmd_ns_of(const char *name, unsigned flags, const char *db, const bson_t *cmd, char *ns,
               size_t cap);

#endif
