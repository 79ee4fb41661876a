/*
 * main.c — shardctl: the command-line client of minishard.
 *
 *   shardctl [--host URL] [--timeout MS] '<command as extended JSON>'
 *   shardctl [--host URL] -            one command per line on stdin, one reply per line
 *   shardctl [--host URL] status | watch [--bars] | load | changelog | explain-balance | tour ...
 *
 * Prints each reply as relaxed extended JSON on one line; exits 0 when every reply
 * had ok: 1, else 1 (2 for usage errors).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/ctl.h"
#include "common/bsonx.h"
#include "common/flags.h"
#include "common/limits.h"
#include "common/log.h"

static const char usage[] =
    "usage: shardctl [--host URL] [--timeout MS] '<command as extended JSON>'\n"
    "       shardctl [--host URL] -          (one command per line on stdin)\n"
    "       shardctl [--host URL] status     (shards, balancer, migrations in flight, chunks)\n"
    "       shardctl [--host URL] watch [--interval-ms N] [--count N]\n"
    "       shardctl [--host URL] watch --bars [--ns DB.COLL] [--rounds N] [--until-balanced]\n"
    "                                  (chunks per shard as bars, migrations, balancer rounds)\n"
    "       shardctl [--host URL] changelog [--ns DB.COLL] [--what KIND] [--limit N] [--summary]\n"
    "       shardctl [--host URL] load --ns DB.COLL --count N [--batch N] [--size BYTES]\n"
    "                                  [--key FIELD] [--quiet]\n"
    "       shardctl [--host URL] explain-balance DB.COLL [--json]\n"
    "                                  (why the balancer would or would not move it now)\n"
    "       shardctl [--host URL] tour [--ns DB.COLL] [--auto] [--pause-ms N]\n"
    "                                  (one migration step by step; needs --enable-test-commands)\n"
    "       shardctl [--host URL] tour balancer [--ns DB.COLL] [--auto] [--pause-ms N]\n"
    "The host defaults to the local router (" CTL_HOST_DEFAULT ") or $MS_HOST.\n"
    "moveChunk / moveRange wait for the whole migration (their maxTimeMS, else 30 minutes)\n"
    "unless --timeout is given.\n"
    "Exit status: 0 when the reply had ok: 1, 1 otherwise, 2 for usage errors.\n";

int ctl_timeout_for(const ctl_t *c, const bson_t *cmd) {
    static const char *const long_cmds[] = {"moveChunk", "moveRange", "_configsvrMoveRange",
                                            "_shardsvrMoveRange"};
    bson_iter_t it;
    int64_t mt = 0;
    if (c->timeout_given || !bson_iter_init(&it, cmd) || !bson_iter_next(&it)) return c->timeout_ms;
    for (size_t i = 0; i < sizeof long_cmds / sizeof long_cmds[0]; i++) {
        if (strcmp(bson_iter_key(&it), long_cmds[i]) != 0) continue;
        if (bson_iter_init_find(&it, cmd, "maxTimeMS") && bsonx_as_int64(&it, &mt) && mt > 0 &&
            mt < MS_MOVE_CHUNK_TIMEOUT_MS)
            return (int)mt + 2 * MS_MOVE_CHUNK_HOP_MARGIN_MS;
        return MS_MOVE_CHUNK_TIMEOUT_MS + 2 * MS_MOVE_CHUNK_HOP_MARGIN_MS;
    }
    return c->timeout_ms;
}

int ctl_send_json(ctl_t *c, const char *json, bson_t *reply, ms_error_t *err) {
    bson_t cmd;
    int rc = bsonx_from_json(json, &cmd, err);
    if (rc) return rc;
    rc = rpc_call(c->client, &cmd, ctl_timeout_for(c, &cmd), reply, err);
    bson_destroy(&cmd);
    return rc;
}

int ctl_command(ctl_t *c, const bson_t *cmd, bson_t *reply, ms_error_t *err) {
    bson_iter_t it;
    int rc = rpc_call(c->client, cmd, ctl_timeout_for(c, cmd), reply, err);
    if (rc) return rc;
    if (bson_iter_init_find(&it, reply, "ok") && bsonx_truthy(&it)) return 0;
    {
        int code = MS_ERR_UNKNOWN_ERROR;
        const char *msg = "command failed";
        if (bson_iter_init_find(&it, reply, "code")) {
            int64_t v;
            if (bsonx_as_int64(&it, &v)) code = (int)v;
        }
        if (bson_iter_init_find(&it, reply, "errmsg") && BSON_ITER_HOLDS_UTF8(&it)) msg = bson_iter_utf8(&it, NULL);
        err_set(err, code, "%s", msg);
    }
    bson_destroy(reply);
    return err ? err->code : MS_ERR_UNKNOWN_ERROR;
}

/* Prints a reply (or an error turned into a reply) on one line; returns true for ok: 1. */
static bool print_reply(int rc, bson_t *reply, const ms_error_t *err) {
    bson_iter_t it;
    bool ok = false;
    char *json;
    bson_t tmp;
    if (rc) {
        bson_init(&tmp);
        BSON_APPEND_DOUBLE(&tmp, "ok", 0);
        BSON_APPEND_UTF8(&tmp, "errmsg", err->msg);
        BSON_APPEND_INT32(&tmp, "code", err->code);
        BSON_APPEND_UTF8(&tmp, "codeName", err_code_name(err->code));
        json = bsonx_to_json(&tmp);
        bson_destroy(&tmp);
    } else {
        ok = bson_iter_init_find(&it, reply, "ok") && bsonx_truthy(&it);
        json = bsonx_to_json(reply);
    }
    fputs(json ? json : "{\"ok\": 0, \"errmsg\": \"reply could not be printed\"}", stdout);
    fputc('\n', stdout);
    fflush(stdout);
    bson_free(json);
    return ok;
}

static int run_one(ctl_t *c, const char *json) {
    bson_t reply;
    ms_error_t err = {0};
    int rc = ctl_send_json(c, json, &reply, &err);
    bool ok = print_reply(rc, &reply, &err);
    if (!rc) bson_destroy(&reply);
    return ok ? 0 : 1;
}

/* One command per line; an empty line is skipped. A line longer than the message limit
 * is answered with an error (and the rest of it skipped) so replies stay one per line. */
static int run_stdin(ctl_t *c) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int status = 0;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (n == 0) continue;
        if ((size_t)n > (size_t)MS_MSG_BYTES_MAX * 2) {
            ms_error_t err;
            err_set(&err, MS_ERR_BSON_OBJECT_TOO_LARGE, "command line of %zd bytes is too long", n);
            print_reply(1, NULL, &err);
            status = 1;
            continue;
        }
        if (run_one(c, line)) status = 1;
    }
    free(line);
    return status;
}

int main(int argc, char **argv) {
    const char *host = getenv("MS_HOST");
    int timeout_ms = -1;   /* not given */
    ctl_t c = {0};
    ms_error_t err = {0};
    int first, rc;
    const flag_spec_t specs[] = {
        {"host", FLAG_STR, &host, "URL of the daemon to talk to"},
        {"timeout", FLAG_INT, &timeout_ms, "deadline of each command in milliseconds"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };

    log_init("shardctl", LOG_WARN);
    /* Only the global flags come before the command; a verb parses its own. */
    first = 1;
    while (first < argc && strncmp(argv[first], "--", 2) == 0 && strcmp(argv[first], "--help") != 0 &&
           first + 1 < argc) {
        first += 2;
    }
    if (first < argc && strcmp(argv[first], "--help") == 0) first++;
    flags_parse(first, argv, specs, usage);
    if (first >= argc) {
        fputs(usage, stderr);
        return 2;
    }
    if (!host || !*host) host = CTL_HOST_DEFAULT;
    c.timeout_given = timeout_ms != -1;
    if (!c.timeout_given) timeout_ms = MS_RPC_TIMEOUT_MS_DEFAULT;
    if (timeout_ms <= 0) {
        fprintf(stderr, "shardctl: --timeout must be positive\n");
        return 2;
    }
    c.host = host;
    c.timeout_ms = timeout_ms;
    if (rpc_client_open(host, &c.client, &err)) {
        fprintf(stderr, "shardctl: %s\n", err.msg);
        return 1;
    }
    if (strcmp(argv[first], "-") == 0)
        rc = run_stdin(&c);
    else if (strcmp(argv[first], "status") == 0)
        rc = ctl_status(&c, argc - first, argv + first);
    else if (strcmp(argv[first], "watch") == 0)
        rc = ctl_watch(&c, argc - first, argv + first);
    else if (strcmp(argv[first], "load") == 0)
        rc = ctl_load(&c, argc - first, argv + first);
    else if (strcmp(argv[first], "explain-balance") == 0)
        rc = ctl_explain_balance(&c, argc - first, argv + first);
    else if (strcmp(argv[first], "tour") == 0)
        rc = ctl_tour(&c, argc - first, argv + first);
    else if (strcmp(argv[first], "changelog") == 0)
        rc = ctl_changelog(&c, argc - first, argv + first);
    else if (argv[first][0] == '{') {
        rc = run_one(&c, argv[first]);
    } else {
        fprintf(stderr, "shardctl: unknown verb '%s'\n%s", argv[first], usage);
        rc = 2;
    }
    rpc_client_close(c.client);
    return rc;
}
