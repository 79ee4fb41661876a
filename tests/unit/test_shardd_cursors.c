/*
 * test_shardd_cursors.c — unit tests of the shard daemon's cursor registry
 * (shardd/cursors.c) on stand-in cursors: a struct that begins with its cursor_reg_t, as
 * plan.c's cursor_t does, and counts its frees. cursors_list_ns lists the cursors open on
 * one namespace only, a pinned cursor killed meanwhile included until its getMore unpins
 * it; every cursor is freed exactly once (kill, unpin, cursors_free).
 */
#include <stdlib.h>
#include <string.h>

#include "shardd/shardd.h"
#include "tests/unit/t.h"

typedef struct fake {
    cursor_reg_t reg;            /* first, as in plan.c's cursor_t */
    int *freed;
} fake_t;

static size_t fake_held(const cursor_t *cur) {
    (void)cur;
    return 10;
}

static void fake_free(cursor_t *cur) {
    fake_t *f = (fake_t *)(void *)cur;
    (*f->freed)++;
    free(f);
}

/* Registers a stand-in cursor on ns; returns its id (0 on failure). */
static int64_t add_fake(cursors_t *cs, const char *ns, uint32_t conn, int *freed) {
    fake_t *f = calloc(1, sizeof *f);
    ms_error_t e = {0};
    if (!f) return 0;
    snprintf(f->reg.ns, sizeof f->reg.ns, "%s", ns);
    f->reg.conn = conn;
    f->reg.held_fn = fake_held;
    f->reg.free_fn = fake_free;
    f->freed = freed;
    if (cursors_add(cs, (cursor_t *)(void *)f, &e) != 0) {
        free(f);
        return 0;
    }
    return f->reg.id;
}

typedef struct ids {
    int64_t v[8];
    int n;
} ids_t;

static void collect(void *arg, int64_t id) {
    ids_t *ids = arg;
    if (ids->n < 8) ids->v[ids->n] = id;
    ids->n++;
}

static bool has(const ids_t *ids, int64_t id) {
    for (int i = 0; i < ids->n && i < 8; i++)
        if (ids->v[i] == id) return true;
    return false;
}

static void test_list_ns_lists_one_namespace(void) {
    cursors_t *cs = NULL;
    int freed = 0;
    int64_t a[3], b[2];
    ids_t ids = {0};
    CHECK_INT(cursors_new(60000, &cs), 0);
    for (int i = 0; i < 3; i++) a[i] = add_fake(cs, "db.a", 1, &freed);
    for (int i = 0; i < 2; i++) b[i] = add_fake(cs, "db.b", 2, &freed);
    for (int i = 0; i < 3; i++) CHECK(a[i] > 0);
    for (int i = 0; i < 2; i++) CHECK(b[i] > 0);
    CHECK_INT(cursors_count(cs), 5);

    CHECK_INT(cursors_list_ns(cs, "db.a", collect, &ids), 3);
    CHECK_INT(ids.n, 3);
    for (int i = 0; i < 3; i++) CHECK(has(&ids, a[i]));
    for (int i = 0; i < 2; i++) CHECK(!has(&ids, b[i]));
    CHECK_INT(cursors_list_ns(cs, "db.b", NULL, NULL), 2);
    CHECK_INT(cursors_list_ns(cs, "db.c", NULL, NULL), 0);
    CHECK_INT(cursors_list_ns(cs, "db.aa", NULL, NULL), 0);   /* whole names only */
    CHECK_INT(cursors_list_ns(cs, "db", NULL, NULL), 0);

    /* killCursors on an idle cursor: gone from the list at once. */
    CHECK(cursors_kill(cs, a[0]));
    CHECK_INT(freed, 1);
    CHECK_INT(cursors_list_ns(cs, "db.a", NULL, NULL), 2);
    cursors_free(cs);
    CHECK_INT(freed, 5);
}

/* A cursor killed while a getMore holds it still reads the namespace: it stays listed
 * until the getMore unpins it, and only then is it freed. */
static void test_list_ns_keeps_pinned_killed_cursor(void) {
    cursors_t *cs = NULL;
    cursor_t *pinned = NULL;
    ms_error_t e = {0};
    int freed = 0;
    int64_t id;
    ids_t ids = {0};
    CHECK_INT(cursors_new(60000, &cs), 0);
    id = add_fake(cs, "db.a", 1, &freed);
    add_fake(cs, "db.b", 1, &freed);
    CHECK_INT(cursors_pin(cs, id, &pinned, &e), 0);
    CHECK(cursors_kill(cs, id));
    CHECK_INT(freed, 0);
    CHECK_INT(cursors_list_ns(cs, "db.a", collect, &ids), 1);
    CHECK(has(&ids, id));
    cursors_unpin(cs, pinned, false);
    CHECK_INT(freed, 1);
    CHECK_INT(cursors_list_ns(cs, "db.a", NULL, NULL), 0);
    CHECK_INT(cursors_list_ns(cs, "db.b", NULL, NULL), 1);
    cursors_free(cs);
    CHECK_INT(freed, 2);
}

T_MAIN(T_CASE(test_list_ns_lists_one_namespace), T_CASE(test_list_ns_keeps_pinned_killed_cursor))
