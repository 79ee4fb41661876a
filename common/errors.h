/*
 * errors.h — the one error enum of minishard, used by every process.
 *
 * Fallible functions return 0 on success or one of these codes. The values are
 * MongoDB's own error code numbers (src/mongo/base/error_codes.yml), so a code
 * goes straight into a reply's `code` field and err_code_name() gives its
 * `codeName`. SQLite and NNG codes are translated at the boundary
 * (err_from_sqlite / err_from_nng) with their own text kept in the message.
 */
#ifndef MS_ERRORS_H
#define MS_ERRORS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* X(ENUM_SUFFIX, code, "codeName") — one row per code we send. */
#define MS_ERROR_LIST(X)                                            \
    X(INTERNAL, 1, "InternalError")                                 \
    X(BAD_VALUE, 2, "BadValue")                                     \
    X(NO_SUCH_KEY, 4, "NoSuchKey")                                  \
    X(HOST_UNREACHABLE, 6, "HostUnreachable")                       \
    X(HOST_NOT_FOUND, 7, "HostNotFound")                            \
    X(UNKNOWN_ERROR, 8, "UnknownError")                             \
    X(FAILED_TO_PARSE, 9, "FailedToParse")                          \
    X(CANNOT_MUTATE_OBJECT, 10, "CannotMutateObject")               \
    X(UNAUTHORIZED, 13, "Unauthorized")                             \
    X(TYPE_MISMATCH, 14, "TypeMismatch")                            \
    X(OVERFLOW, 15, "Overflow")                                     \
    X(INVALID_LENGTH, 16, "InvalidLength")                          \
    X(PROTOCOL_ERROR, 17, "ProtocolError")                          \
    X(ILLEGAL_OPERATION, 20, "IllegalOperation")                    \
    X(EMPTY_ARRAY_OPERATION, 21, "EmptyArrayOperation")             \
    X(INVALID_BSON, 22, "InvalidBSON")                              \
    X(ALREADY_INITIALIZED, 23, "AlreadyInitialized")                \
    X(LOCK_TIMEOUT, 24, "LockTimeout")                              \
    X(NAMESPACE_NOT_FOUND, 26, "NamespaceNotFound")                 \
    X(INDEX_NOT_FOUND, 27, "IndexNotFound")                         \
    X(PATH_NOT_VIABLE, 28, "PathNotViable")                         \
    X(NON_EXISTENT_PATH, 29, "NonExistentPath")                     \
    X(INVALID_PATH, 30, "InvalidPath")                              \
    X(LOCK_BUSY, 46, "LockBusy")                                    \
    X(CONFLICTING_UPDATE_OPERATORS, 40, "ConflictingUpdateOperators") \
    X(CURSOR_NOT_FOUND, 43, "CursorNotFound")                       \
    X(NO_MATCHING_DOCUMENT, 47, "NoMatchingDocument")               \
    X(NAMESPACE_EXISTS, 48, "NamespaceExists")                      \
    X(MAX_TIME_MS_EXPIRED, 50, "MaxTimeMSExpired")                  \
    X(DOLLAR_PREFIXED_FIELD_NAME, 52, "DollarPrefixedFieldName")    \
    X(INVALID_ID_FIELD, 53, "InvalidIdField")                       \
    X(NOT_SINGLE_VALUE_FIELD, 54, "NotSingleValueField")            \
    X(EMPTY_FIELD_NAME, 56, "EmptyFieldName")                       \
    X(DOTTED_FIELD_NAME, 57, "DottedFieldName")                     \
    X(COMMAND_NOT_FOUND, 59, "CommandNotFound")                     \
    X(SHARD_KEY_NOT_FOUND, 61, "ShardKeyNotFound")                  \
    X(IMMUTABLE_FIELD, 66, "ImmutableField")                        \
    X(CANNOT_CREATE_INDEX, 67, "CannotCreateIndex")                 \
    X(INDEX_ALREADY_EXISTS, 68, "IndexAlreadyExists")               \
    X(SHARD_NOT_FOUND, 70, "ShardNotFound")                         \
    X(INVALID_OPTIONS, 72, "InvalidOptions")                        \
    X(INVALID_NAMESPACE, 73, "InvalidNamespace")                    \
    X(OPERATION_INCOMPLETE, 77, "OperationIncomplete")              \
    X(NO_PROGRESS_MADE, 82, "NoProgressMade")                       \
    X(INDEX_OPTIONS_CONFLICT, 85, "IndexOptionsConflict")           \
    X(INDEX_KEY_SPECS_CONFLICT, 86, "IndexKeySpecsConflict")        \
    X(CANNOT_SPLIT, 87, "CannotSplit")                              \
    X(NETWORK_TIMEOUT, 89, "NetworkTimeout")                        \
    X(SHUTDOWN_IN_PROGRESS, 91, "ShutdownInProgress")               \
    X(OPERATION_FAILED, 96, "OperationFailed")                      \
    X(DB_PATH_IN_USE, 98, "DBPathInUse")                            \
    X(COMMAND_NOT_SUPPORTED, 115, "CommandNotSupported")            \
    X(CONFLICTING_OPERATION, 117, "ConflictingOperationInProgress") \
    X(NAMESPACE_NOT_SHARDED, 118, "NamespaceNotSharded")            \
    X(CURSOR_IN_USE, 143, "CursorInUse")                            \
    X(EXCEEDED_MEMORY_LIMIT, 146, "ExceededMemoryLimit")            \
    X(STALE_EPOCH, 150, "StaleEpoch")                               \
    X(CHUNK_TOO_BIG, 153, "ChunkTooBig")                            \
    X(ZONE_STILL_IN_USE, 163, "ZoneStillInUse")                     \
    X(CANNOT_INDEX_PARALLEL_ARRAYS, 171, "CannotIndexParallelArrays") \
    X(ZONE_NOT_FOUND, 177, "ZoneNotFound")                          \
    X(RANGE_OVERLAP_CONFLICT, 178, "RangeOverlapConflict")          \
    X(FAIL_POINT_ENABLED, 192, "FailPointEnabled")                  \
    X(CANNOT_BUILD_INDEX_KEYS, 201, "CannotBuildIndexKeys")         \
    X(NO_SUCH_SESSION, 206, "NoSuchSession")                        \
    X(CLUSTER_TIME_FAILS_RATE_LIMITER, 205, "ClusterTimeFailsRateLimiter") \
    X(INVALID_UUID, 207, "InvalidUUID")                             \
    X(INCOMPLETE_TRANSACTION_HISTORY, 217, "IncompleteTransactionHistory") \
    X(TRANSACTION_TOO_OLD, 225, "TransactionTooOld")                \
    X(TOO_MANY_LOGICAL_SESSIONS, 261, "TooManyLogicalSessions")     \
    X(CANNOT_IMPLICITLY_CREATE_COLLECTION, 227, "CannotImplicitlyCreateCollection") \
    X(NOT_IMPLEMENTED, 238, "NotImplemented")                       \
    X(CANNOT_CREATE_COLLECTION, 242, "CannotCreateCollection")      \
    X(STALE_DB_VERSION, 249, "StaleDbVersion")                      \
    X(EXCEEDED_TIME_LIMIT, 262, "ExceededTimeLimit")                \
    X(INDEX_BUILD_ABORTED, 276, "IndexBuildAborted")                \
    X(WOULD_CHANGE_OWNING_SHARD, 283, "WouldChangeOwningShard")     \
    X(INDEX_BUILD_ALREADY_IN_PROGRESS, 285, "IndexBuildAlreadyInProgress") \
    X(QUERY_EXCEEDED_MEMORY_LIMIT, 292, "QueryExceededMemoryLimitNoDiskUseAllowed") \
    X(OBJECT_IS_BUSY, 314, "ObjectIsBusy")                          \
    X(BSON_OBJECT_TOO_LARGE, 10334, "BSONObjectTooLarge")           \
    X(DUPLICATE_KEY, 11000, "DuplicateKey")                         \
    X(STALE_CONFIG, 13388, "StaleConfig")                           \
    X(IDL_UNKNOWN_FIELD, 40415, "Location40415")                    \
    X(IDL_DUPLICATE_FIELD, 40413, "Location40413")                  \
    X(IDL_VALUE_TOO_LOW, 51024, "Location51024")                    \
    X(LOC_NO_SHARD_KEY_IN_QUERY, 51260, "Location51260")            \
    X(LOC_NO_CHUNK_WITH_BOUNDS, 51261, "Location51261")             \
    X(LOC_CHUNK_NOT_FOUND, 51262, "Location51262")                  \
    X(NOT_A_REPLICA_SET, 123, "NotAReplicaSet")                     \
    X(LOAD_BALANCER_SUPPORT_MISMATCH, 354, "LoadBalancerSupportMismatch") \
    X(API_VERSION_ERROR, 322, "APIVersionError")                    \
    X(API_STRICT_ERROR, 323, "APIStrictError")                      \
    X(API_DEPRECATION_ERROR, 324, "APIDeprecationError")            \
    X(INVALID_DBREF, 55, "InvalidDBRef")                            \
    X(IDL_MISSING_FIELD, 40414, "Location40414")                    \
    X(LOC_4886600, 4886600, "Location4886600")                      \
    X(LOC_50736, 50736, "Location50736")                            \
    X(LOC_50737, 50737, "Location50737")                            \
    X(LOC_50738, 50738, "Location50738")                            \
    X(LOC_50799, 50799, "Location50799")                            \
    X(LOC_50800, 50800, "Location50800")                            \
    X(LOC_50801, 50801, "Location50801")                            \
    /* hello's awaitable protocol (topologyVersion, maxAwaitTimeMS, exhaust) */ \
    X(LOC_EXPECTED_OBJECT, 10065, "Location10065")                 \
    X(LOC_TV_NEGATIVE_COUNTER, 51758, "Location51758")             \
    X(LOC_AWAIT_NEEDS_BOTH, 51760, "Location51760")                \
    X(LOC_TV_COUNTER_AHEAD_MONGOS, 51761, "Location51761")         \
    X(LOC_EXHAUST_NEEDS_AWAIT, 51763, "Location51763")             \
    X(LOC_TV_COUNTER_AHEAD, 31382, "Location31382")                \
    X(INVALID_PIPELINE_OPERATOR, 168, "InvalidPipelineOperator")   \
    X(CONVERSION_FAILURE, 241, "ConversionFailure")                \
    /* aggregation (common/expr.c, common/agg.c): MongoDB's uassert locations */ \
    X(LOC_15947, 15947, "Location15947") \
    X(LOC_15952, 15952, "Location15952") \
    X(LOC_15955, 15955, "Location15955") \
    X(LOC_15956, 15956, "Location15956") \
    X(LOC_15957, 15957, "Location15957") \
    X(LOC_15958, 15958, "Location15958") \
    X(LOC_15959, 15959, "Location15959") \
    X(LOC_15969, 15969, "Location15969") \
    X(LOC_15972, 15972, "Location15972") \
    X(LOC_15973, 15973, "Location15973") \
    X(LOC_15975, 15975, "Location15975") \
    X(LOC_15976, 15976, "Location15976") \
    X(LOC_15981, 15981, "Location15981") \
    X(LOC_15983, 15983, "Location15983") \
    X(LOC_15998, 15998, "Location15998") \
    X(LOC_16007, 16007, "Location16007") \
    X(LOC_16020, 16020, "Location16020") \
    X(LOC_16021, 16021, "Location16021") \
    X(LOC_16404, 16404, "Location16404") \
    X(LOC_16410, 16410, "Location16410") \
    X(LOC_16412, 16412, "Location16412") \
    X(LOC_16554, 16554, "Location16554") \
    X(LOC_16555, 16555, "Location16555") \
    X(LOC_16556, 16556, "Location16556") \
    X(LOC_16609, 16609, "Location16609") \
    X(LOC_16610, 16610, "Location16610") \
    X(LOC_16611, 16611, "Location16611") \
    X(LOC_16612, 16612, "Location16612") \
    X(LOC_16702, 16702, "Location16702") \
    X(LOC_17080, 17080, "Location17080") \
    X(LOC_17083, 17083, "Location17083") \
    X(LOC_17124, 17124, "Location17124") \
    X(LOC_17276, 17276, "Location17276") \
    X(LOC_28680, 28680, "Location28680") \
    X(LOC_28689, 28689, "Location28689") \
    X(LOC_28690, 28690, "Location28690") \
    X(LOC_28691, 28691, "Location28691") \
    X(LOC_28765, 28765, "Location28765") \
    X(LOC_28808, 28808, "Location28808") \
    X(LOC_28809, 28809, "Location28809") \
    X(LOC_28810, 28810, "Location28810") \
    X(LOC_28811, 28811, "Location28811") \
    X(LOC_28812, 28812, "Location28812") \
    X(LOC_28818, 28818, "Location28818") \
    X(LOC_28822, 28822, "Location28822") \
    X(LOC_31002, 31002, "Location31002") \
    X(LOC_31119, 31119, "Location31119") \
    X(LOC_31120, 31120, "Location31120") \
    X(LOC_31250, 31250, "Location31250") \
    X(LOC_31252, 31252, "Location31252") \
    X(LOC_31253, 31253, "Location31253") \
    X(LOC_31254, 31254, "Location31254") \
    X(LOC_40081, 40081, "Location40081") \
    X(LOC_40148, 40148, "Location40148") \
    X(LOC_40156, 40156, "Location40156") \
    X(LOC_40157, 40157, "Location40157") \
    X(LOC_40158, 40158, "Location40158") \
    X(LOC_40160, 40160, "Location40160") \
    X(LOC_40234, 40234, "Location40234") \
    X(LOC_40235, 40235, "Location40235") \
    X(LOC_40236, 40236, "Location40236") \
    X(LOC_40237, 40237, "Location40237") \
    X(LOC_40238, 40238, "Location40238") \
    X(LOC_40272, 40272, "Location40272") \
    X(LOC_40323, 40323, "Location40323") \
    X(LOC_40324, 40324, "Location40324") \
    X(LOC_40352, 40352, "Location40352") \
    X(LOC_51270, 51270, "Location51270") \
    X(LOC_51272, 51272, "Location51272") \
    X(LOC_7749501, 7749501, "Location7749501") \
    /* query: $replaceRoot, pipeline updates, arrayFilters */ \
    X(LOC_40228, 40228, "Location40228") \
    X(LOC_40229, 40229, "Location40229") \
    X(LOC_40231, 40231, "Location40231") \
    X(ILLEGAL_OP_MSG_FLAG, 223, "IllegalOpMsgFlag")                  \
    X(UNSUPPORTED_OP_QUERY_COMMAND, 352, "UnsupportedOpQueryCommand") \
    X(LOC_OPMSG_MULTIPLE_BODIES, 40430, "Location40430")            \
    X(LOC_OPMSG_DUP_SEQUENCE, 40431, "Location40431")               \
    X(LOC_OPMSG_UNKNOWN_SECTION, 40432, "Location40432")            \
    X(LOC_OPMSG_DUP_FIELD, 40433, "Location40433")                  \
    X(LOC_OPMSG_NO_DB, 40571, "Location40571")                      \
    X(LOC_OPMSG_NO_BODY, 40587, "Location40587")                   \
    /* mongosh: $shardedDataDistribution (sh.status()) */ \
    X(LOC_SDD_SPEC, 6789100, "Location6789100")                     \
    X(LOC_SDD_NOT_MONGOS, 6789101, "Location6789101")               \
    /* codes failCommand is asked for in drivers' tests (replication, transactions, network,
     * change streams, stable API): named as error_codes.yml names them */ \
    X(USER_NOT_FOUND, 11, "UserNotFound") \
    X(AUTHENTICATION_FAILED, 18, "AuthenticationFailed") \
    X(WRITE_CONCERN_FAILED, 64, "WriteConcernFailed") \
    X(UNKNOWN_REPL_WRITE_CONCERN, 79, "UnknownReplWriteConcern") \
    X(UNSATISFIABLE_WRITE_CONCERN, 100, "UnsatisfiableWriteConcern") \
    X(WRITE_CONFLICT, 112, "WriteConflict") \
    X(FAILED_TO_SATISFY_READ_PREFERENCE, 133, "FailedToSatisfyReadPreference") \
    X(READ_CONCERN_MAJORITY_NOT_AVAILABLE_YET, 134, "ReadConcernMajorityNotAvailableYet") \
    X(CAPPED_POSITION_LOST, 136, "CappedPositionLost") \
    X(QUERY_PLAN_KILLED, 175, "QueryPlanKilled") \
    X(PRIMARY_STEPPED_DOWN, 189, "PrimarySteppedDown") \
    X(NETWORK_INTERFACE_EXCEEDED_TIME_LIMIT, 202, "NetworkInterfaceExceededTimeLimit") \
    X(RETRY_CHANGE_STREAM, 234, "RetryChangeStream") \
    X(CURSOR_KILLED, 237, "CursorKilled") \
    X(TRANSACTION_COORDINATOR_STEPPED_DOWN, 244, "TransactionCoordinatorSteppedDown") \
    X(NO_SUCH_TRANSACTION, 251, "NoSuchTransaction") \
    X(TRANSACTION_COMMITTED, 256, "TransactionCommitted") \
    X(TRANSACTION_TOO_LARGE, 257, "TransactionTooLarge") \
    X(OPERATION_NOT_SUPPORTED_IN_TRANSACTION, 263, "OperationNotSupportedInTransaction") \
    X(CLIENT_DISCONNECT, 279, "ClientDisconnect") \
    X(CHANGE_STREAM_FATAL_ERROR, 280, "ChangeStreamFatalError") \
    X(CONNECTION_POOL_EXPIRED, 320, "ConnectionPoolExpired") \
    X(CLIENT_METADATA_APP_NAME_TOO_LARGE, 184, "ClientMetadataAppNameTooLarge") \
    X(SOCKET_EXCEPTION, 9001, "SocketException") \
    X(LEGACY_NOT_PRIMARY, 10058, "LegacyNotPrimary") \
    X(NOT_WRITABLE_PRIMARY, 10107, "NotWritablePrimary") \
    X(INTERRUPTED_AT_SHUTDOWN, 11600, "InterruptedAtShutdown") \
    X(INTERRUPTED, 11601, "Interrupted") \
    X(INTERRUPTED_DUE_TO_REPL_STATE_CHANGE, 11602, "InterruptedDueToReplStateChange") \
    X(NOT_PRIMARY_NO_SECONDARY_OK, 13435, "NotPrimaryNoSecondaryOk") \
    X(NOT_PRIMARY_OR_SECONDARY, 13436, "NotPrimaryOrSecondary") \
    X(LOC_SDD_NOT_ADMIN, 6789102, "Location6789102")                \
    /* $currentOp from a router on a shard that has no name yet */ \
    X(LOC_CUROP_NO_SHARD_NAME, 40465, "Location40465")

enum ms_err {
    MS_OK = 0,
#define MS_ERR_ENUM_ROW(name, code, str) MS_ERR_##name = code,
    MS_ERROR_LIST(MS_ERR_ENUM_ROW)
#undef MS_ERR_ENUM_ROW
};

#define MS_ERRMSG_BYTES 512  /* one error message: a line, never a dump */

/* One error with its text. Functions that fail fill it when the pointer is non-NULL. */
typedef struct ms_error {
    int code;          /* an enum ms_err value (a MongoDB code) */
    char msg[MS_ERRMSG_BYTES]; /* human text: what a reply's errmsg carries */
} ms_error_t;

/* codeName for a code ("BadValue"); for a code not in the list "Location<code>", as MongoDB
 * names an assertion code that error_codes.yml does not list. The string of an unlisted
 * code lives in a thread-local buffer until the calling thread's next call. */
const char *err_code_name(int code);

/* The code is in MongoDB's RetriableError category (error_codes.yml: network errors,
 * shutdown, not-primary): a retryable write failing with it may be sent again — the
 * RetryableWriteError label of a reply (common/fail_command.c) and the router's own
 * resends (router/rt_write.c) both ask this. */
bool err_code_is_retriable(int code);

/* Fills *err (when non-NULL) and returns code, so call sites read `return err_set(err, ...)`. */
int err_set(ms_error_t *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int err_setv(ms_error_t *err, int code, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

/* Prefixes the message already in *err with "what: " so one line names the failed step. */
void err_prefix(ms_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Boundary translations; both keep the library's own text in the message and log it.
 * db is a sqlite3* (may be NULL) — void* so this header does not pull in sqlite3.h. */
int err_from_sqlite(ms_error_t *err, int sqlite_rc, const char *what, void *db);
int err_from_nng(ms_error_t *err, int nng_rv, const char *what);

#endif
