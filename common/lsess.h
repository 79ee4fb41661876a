/*
 * lsess.h — the logical session cache every daemon serves (router, shard, config server):
 * MongoDB's startSession, refreshSessions, endSessions, killSessions and killAllSessions
 * over an in-memory table of session ids and their last use (MongoDB's
 * LogicalSessionCache, whose persisted side is config.system.sessions). Kept in memory
 * only: what must survive a crash — a shard's retryable-write records — lives in the
 * shard's SQLite file (shardd/sessions.c) and expires on its own clock.
 */
#ifndef MS_LSESS_H
#define MS_LSESS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/cmd.h"

/* The session timeout (MongoDB's localLogicalSessionTimeoutMinutes, 30 min by default),
 * set once at start-up (a daemon's --session-timeout-ms) before serving. */
void lsess_set_timeout_ms(int64_t ms);
int64_t lsess_timeout_ms(void);

/* The command handlers (rows of cmd_common.c's table). */
int lsess_cmd_start(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int lsess_cmd_refresh(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int lsess_cmd_end(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int lsess_cmd_kill(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);
int lsess_cmd_kill_all(cmd_ctx_t *ctx, bson_t *reply, ms_error_t *err);

/* Sessions in the cache now (serverStatus.logicalSessionRecordCache.activeSessionsCount). */
int64_t lsess_active(void);

#endif
