/*
 * t_store.h — a fixture the shard store's unit tests share (test_shardd_sdoc,
 * test_shardd_sessions): a store opened (or reopened, to check what persisted) in a
 * directory of the test's temporary directory. Static inline, as t_cat.h.
 */
#ifndef MS_T_STORE_H
#define MS_T_STORE_H

#include <stdio.h>

#include "shardd/shardd.h"
#include "tests/unit/t.h"

/* The store in <tmpdir>/<name>: created on first use, the same files after. */
static inline store_t *open_at(const char *name) {
    char dir[512];
    store_t *st = NULL;
    ms_error_t e;
    store_opts_t o = {0};
    snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
    CHECK_INT(store_open(dir, &o, &st, &e), 0);
    return st;
}

#endif
