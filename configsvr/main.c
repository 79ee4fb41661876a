/*
 * main.c — bin/configsvr, the config server: parses flags, prepares --dbpath, opens the
 * catalog (<dbpath>/config.db, catalog.c), starts the command server with the config
 * server's table (configsvr_cmd.c), prints one `ready url=...` line, and serves until
 * SIGINT or SIGTERM, then stops cleanly. The start-up order every daemon shares (signals
 * blocked first, state opened, serve, ready, wait, stop serving, close state) is
 * common/daemon.h's.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/daemon.h"
#include "common/log.h"
#include "configsvr/configsvr.h"

#define CFG_PORT_DEFAULT 27019  /* MongoDB's config server port */

static const char cfg_usage[] =
    "usage: configsvr --dbpath DIR [--port N] [--bind ADDR] [--url URL] [--workers N]\n"
    "                 [--enable-test-commands]\n"
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

/* Opens the daemon's state: the catalog in dbpath and the config-collection cursors. */
static int cfg_open(cfg_t *cfg, const char *dbpath, const char *url, ms_error_t *err) {
    char path[4096];
    int rc;
    memset(cfg, 0, sizeof *cfg);
    snprintf(cfg->url, sizeof cfg->url, "%s", url);
    cfg->started_ms = time_now_ms();
    if (cfg_ddl_open(&cfg->ddl) != 0)
        return err_set(err, MS_ERR_EXCEEDED_MEMORY_LIMIT, "ddl locks: out of memory");
    rc = cfg_prepare_dbpath(dbpath, err);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/config.db", dbpath);
    rc = cat_open(path, &cfg->cat, err);
    if (rc) return rc;
    cat_set_server(cfg->cat, url);
    cfg_migrations_recover(cfg);
    return cfg_cursors_open(&cfg->cursors, err);
}

static void cfg_close(cfg_t *cfg) {
    cfg_cursors_close(cfg->cursors);
    cat_close(cfg->cat);
    cfg_ddl_close(cfg->ddl);
}

int main(int argc, char **argv) {
    const char *dbpath = NULL;
    const flag_spec_t own[] = {
        {"dbpath", FLAG_STR, &dbpath, "directory of the catalog (required)"},
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
    log_init("configsvr", LOG_INFO);
    cfg_register_failpoints();  /* before anything can evaluate one */

    if (cfg_open(&cfg, dbpath, d.url, &err) != 0) {
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
    daemon_ready(&d, "dbpath", dbpath);

    daemon_wait(&d);
    daemon_stop_serving(&d);  /* first: no handler may still use cfg */
    cfg_close(&cfg);
    return daemon_exit(&d, 0);
}
