/*
 * main.c — bin/configsvr, the config server: parses flags, prepares --dbpath, opens the
 * catalog (<dbpath>/config.db, catalog.c), starts the command server with the config
 * server's table (configsvr_cmd.c), prints one `ready url=...` line, and serves until
 * SIGINT or SIGTERM, then stops cleanly. The start-up order every daemon shares (signals
 * blocked first, state opened, serve, ready, wait, stop serving, close state) is
 * common/daemon.h's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/daemon.h"
#include "common/lclock.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

#define CFG_PORT_DEFAULT 27019  /* MongoDB's config server port */

static const char cfg_usage[] =
    "usage: configsvr --dbpath DIR [--port N] [--bind ADDR] [--url URL] [--workers N]\n"
    "                 [--enable-test-commands] [--balancer-idle-ms N] [--balancer-throttle-ms N]\n"
    "                 [--auto-merger-interval-ms N] [--auto-merger-throttle-ms N]\n"
    "                 [--auto-merger-horizon-ms N] [--defrag-throttle-ms N]\n"
    "                 [--http-port P] [--http-bind ADDR] [--http-idle-ms N]\n"
    "                 [--routing-table-page-chunks N]\n"
    "The config server of a minishard cluster: the sharding catalog and the balancer.";

/* Creates dir when missing (one level, as the parent is the caller's); it must be a
 * directory we can write. */
static int cfg_prepare_dbpath(const char *dir, ms_error_t *err) {
    struct stat st;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return err_set(err, MS_ERR_NON_EXISTENT_PATH, "cannot create dbpath %s: %s", dir,
                       strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(err, MS_ERR_NON_EXISTENT_PATH, "dbpath %s is not a directory", dir);
    return 0;
}

/* One config server per dbpath: <dbpath>/mongod.lock held with an exclusive flock for the
 * life of the process (the kernel drops it when we die, so a crash leaves nothing stale).
 * A second server on the same dbpath would run a second balancer and write the same
 * SQLite file: it is refused with DBPathInUse, as mongod refuses a locked dbpath. */
static int cfg_lock_dbpath(cfg_t *cfg, const char *dbpath, ms_error_t *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/mongod.lock", dbpath);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return err_set(err, MS_ERR_DB_PATH_IN_USE, "cannot open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, MS_ERR_DB_PATH_IN_USE, "unable to lock %s: %s (is another "
                       "configsvr running on this dbpath?)", path, strerror(e));
    }
    cfg->dbpath_lock_fd = fd;
    return 0;
}

/* Opens the daemon's state: the catalog in dbpath and the config-collection cursors. */
static int cfg_open(cfg_t *cfg, const char *dbpath, const char *url, int cursor_idle_ms,
                    ms_error_t *err) {
    char path[4096];
    int rc;
    memset(cfg, 0, sizeof *cfg);
    cfg->dbpath_lock_fd = -1;
    snprintf(cfg->url, sizeof cfg->url, "%s", url);
    cfg->started_ms = time_now_ms();
    if (cfg_ddl_open(&cfg->ddl) != 0)
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "ddl locks: out of memory");
    rc = cfg_prepare_dbpath(dbpath, err);
    if (rc == 0) rc = cfg_lock_dbpath(cfg, dbpath, err);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/config.db", dbpath);
    rc = cat_open(path, &cfg->cat, err);
    if (rc) return rc;
    cat_set_server(cfg->cat, url);
    cfg_migrations_recover(cfg);
    return cfg_query_cursors_new(cursor_idle_ms, &cfg->cursors, err);
}

static void cfg_close(cfg_t *cfg) {
    curs_reg_free(cfg->cursors);
    cat_close(cfg->cat);
    cfg_ddl_close(cfg->ddl);
    if (cfg->dbpath_lock_fd >= 0) close(cfg->dbpath_lock_fd);  /* releases the flock */
}

int main(int argc, char **argv) {
    const char *dbpath = NULL;
    int idle_ms = MS_BALANCER_IDLE_MS_DEFAULT, throttle_ms = MS_BALANCER_THROTTLE_MS_DEFAULT;
    int am_interval_ms = MS_AUTOMERGER_INTERVAL_MS_DEFAULT;
    int am_throttle_ms = MS_AUTOMERGER_THROTTLE_MS_DEFAULT;
    int am_horizon_ms = MS_AUTOMERGER_HORIZON_MS_DEFAULT;
    int defrag_throttle_ms = MS_DEFRAG_THROTTLE_MS_DEFAULT;
    int http_port = 0, http_idle_ms = MS_HTTP_IDLE_MS_DEFAULT, page_chunks = 0;
    int cursor_idle_ms = MS_CURSOR_IDLE_MS_MAX;
    const char *http_bind = "127.0.0.1";
    cfg_http_t *http = NULL;
    const flag_spec_t own[] = {
        {"dbpath", FLAG_STR, &dbpath, "directory of the catalog (required)"},
        {"balancer-idle-ms", FLAG_INT, &idle_ms,
         "pause between balancer rounds that moved nothing (default 10000)"},
        {"balancer-throttle-ms", FLAG_INT, &throttle_ms,
         "pause after a balancer round that moved chunks (default 1000)"},
        {"auto-merger-interval-ms", FLAG_INT, &am_interval_ms,
         "pause between auto-merger passes (default 3600000, MongoDB's autoMergerIntervalSecs)"},
        {"auto-merger-throttle-ms", FLAG_INT, &am_throttle_ms,
         "pause between two auto-merges of one collection (default 15000)"},
        {"auto-merger-horizon-ms", FLAG_INT, &am_horizon_ms,
         "chunks moved less than this long ago are not auto-merged (default 60000)"},
        {"defrag-throttle-ms", FLAG_INT, &defrag_throttle_ms,
         "pause between two defragmentation steps of the balancer's secondary thread "
         "(default 1000, MongoDB's chunkDefragmentationThrottlingMS)"},
        {"http-port", FLAG_INT, &http_port,
         "serve the live web view (page + JSON, read-only) on this port (default: none)"},
        {"http-bind", FLAG_STR, &http_bind, "address of the web view (default 127.0.0.1)"},
        {"http-idle-ms", FLAG_INT, &http_idle_ms,
         "close a web-view connection sent nothing for this long (default 10000)"},
        {"cursor-timeout-ms", FLAG_INT, &cursor_idle_ms,
         "an idle config cursor is killed after this long (default 600000, MongoDB's "
         "cursorTimeoutMillis)"},
        {"routing-table-page-chunks", FLAG_INT, &page_chunks,
         "test: at most N chunks in one getRoutingTable page (needs --enable-test-commands; "
         "default: pages end at 4 MiB only)"},
        {NULL, FLAG_BOOL, NULL, NULL},
    };
    daemon_t d;
    cfg_t cfg;
    ms_error_t err = {0};
    int rc = daemon_parse(&d, "configsvr", CFG_PORT_DEFAULT, argc, argv, own, cfg_usage);
    if (rc) return rc;
    if (!dbpath) {
        fprintf(stderr, "configsvr: --dbpath is required (try --help)\n");
        return 2;
    }
    if (idle_ms < 1 || idle_ms > MS_BALANCER_INTERVAL_MS_MAX || throttle_ms < 0 ||
        throttle_ms > MS_BALANCER_INTERVAL_MS_MAX) {
        fprintf(stderr, "configsvr: --balancer-idle-ms must be 1..%d and --balancer-throttle-ms "
                "0..%d\n", MS_BALANCER_INTERVAL_MS_MAX, MS_BALANCER_INTERVAL_MS_MAX);
        return 2;
    }
    if (am_interval_ms < 1 || am_interval_ms > MS_AUTOMERGER_MS_MAX || am_throttle_ms < 0 ||
        am_throttle_ms > MS_AUTOMERGER_MS_MAX || am_horizon_ms < 0 ||
        am_horizon_ms > MS_AUTOMERGER_MS_MAX || defrag_throttle_ms < 0 ||
        defrag_throttle_ms > MS_AUTOMERGER_MS_MAX) {
        fprintf(stderr, "configsvr: --auto-merger-interval-ms must be 1..%d, --auto-merger-throttle-ms, "
                "--auto-merger-horizon-ms and --defrag-throttle-ms 0..%d\n", MS_AUTOMERGER_MS_MAX,
                MS_AUTOMERGER_MS_MAX);
        return 2;
    }
    if (http_port < 0 || http_port > 65535) {
        fprintf(stderr, "configsvr: --http-port must be 1..65535\n");
        return 2;
    }
    if (http_idle_ms < MS_HTTP_IDLE_MS_MIN || http_idle_ms > MS_HTTP_IDLE_MS_MAX) {
        fprintf(stderr, "configsvr: --http-idle-ms must be %d..%d\n", MS_HTTP_IDLE_MS_MIN,
                MS_HTTP_IDLE_MS_MAX);
        return 2;
    }
    if (cursor_idle_ms < 1 || cursor_idle_ms > MS_CURSOR_IDLE_MS_MAX) {
        fprintf(stderr, "configsvr: --cursor-timeout-ms must be 1..%d\n", MS_CURSOR_IDLE_MS_MAX);
        return 2;
    }
    if (page_chunks != 0 && (!d.test_commands || page_chunks < 1 ||
                             page_chunks > MS_CHUNKS_PER_COLLECTION_MAX)) {
        fprintf(stderr, "configsvr: --routing-table-page-chunks must be 1..%d and needs "
                "--enable-test-commands\n", MS_CHUNKS_PER_COLLECTION_MAX);
        return 2;
    }
    cat_set_routing_page_chunks(page_chunks);
    log_init("configsvr", LOG_INFO);
    cat_settings_allow_test_fields(d.test_commands);
    cfg_register_failpoints();  /* before anything can evaluate one */

    lclock_init(LCLOCK_DATA);
    if (cfg_open(&cfg, dbpath, d.url, cursor_idle_ms, &err) != 0 || lclock_open(dbpath, &err) != 0) {
        rc = daemon_fail("open", &err);
        cfg_close(&cfg);
        return rc;
    }
    const cmd_server_opts_t opts = {
        .table = cfg_cmd_table,
        .table_len = cfg_cmd_table_len,
        .app = &cfg,
        .status = cfg_status,
        .metrics = cfg_metrics,
    };
    if (daemon_start(&d, &opts, &err) != 0) {
        cfg_close(&cfg);
        return daemon_exit(&d, 1);
    }
    /* After serving starts: a migration's donor calls us back to commit. The secondary
     * thread first: the balancer's round wakes it (cfg->merger set before any round). */
    if (cfg_merger_start(&cfg, am_interval_ms, am_throttle_ms, am_horizon_ms, defrag_throttle_ms,
                         &err) != 0) {
        rc = daemon_fail("balancer secondary thread", &err);
        daemon_stop_serving(&d);
        cfg_close(&cfg);
        return rc;
    }
    if (cfg_balancer_start(&cfg, idle_ms, throttle_ms, &err) != 0) {
        rc = daemon_fail("balancer", &err);
        cfg_merger_shutdown(&cfg);
        daemon_stop_serving(&d);
        cfg_merger_free(&cfg);
        cfg_close(&cfg);
        return rc;
    }
    /* The web view last: it only reads what is open by now. */
    if (http_port > 0 && cfg_http_start(&cfg, http_bind, http_port, http_idle_ms, &http, &err) != 0) {
        rc = daemon_fail("http", &err);
        cfg_merger_shutdown(&cfg);
        cfg_balancer_shutdown(&cfg);
        daemon_stop_serving(&d);
        cfg_balancer_free(&cfg);
        cfg_merger_free(&cfg);
        cfg_close(&cfg);
        return rc;
    }
    daemon_ready(&d, "dbpath", dbpath);

    daemon_wait(&d);
    cfg_http_stop(http);  /* its collector reads the catalog and calls shards */
    /* The balancer's two threads first (its round ends, migrations included, while donors
     * can still reach us to commit), then the handlers, then the catalog. Both threads
     * are stopped first but freed last: each wakes the other (a no-op once stopped), and
     * handlers (balancerStart / Stop / Status, configureCollectionBalancing,
     * mergeAllChunksOnShard) use them until serving stops. */
    cfg_merger_shutdown(&cfg);
    cfg_balancer_shutdown(&cfg);
    daemon_stop_serving(&d);  /* first: no handler may still use cfg */
    cfg_balancer_free(&cfg);
    cfg_merger_free(&cfg);
    cfg_close(&cfg);
    return daemon_exit(&d, 0);
}
