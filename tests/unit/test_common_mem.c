/*
 * test_common_mem.c — the aligned allocator for structs holding a bson_t
 * (common/mem.c): alignment, zeroing, overflow, and a bson_t living in such a block
 * grown past its inline buffer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/mem.h"
#include "tests/unit/t.h"

typedef struct holder {
    char tag;          /* puts the bson_t off any 16-byte boundary malloc would give */
    bson_t doc;
    bson_iter_t it;
} holder_t;

static void mem_aligned_and_zeroed(void) {
    for (size_t n = 1; n <= 9; n++) {
        holder_t *h = mem_calloc_aligned(n, sizeof *h);
        CHECK(h != NULL);
        if (!h) return;
        CHECK(((uintptr_t)h % MEM_ALIGN_BYTES) == 0);
        CHECK(((uintptr_t)&h[n - 1].doc % _Alignof(bson_t)) == 0);
        const unsigned char *p = (const unsigned char *)h;
        size_t nonzero = 0;
        for (size_t i = 0; i < n * sizeof *h; i++) nonzero += p[i] != 0;
        CHECK_INT(nonzero, 0);
        free(h);
    }
    /* Odd sizes and zero still give a usable, aligned block. */
    void *z = mem_calloc_aligned(0, 0), *o = mem_calloc_aligned(3, 7);
    CHECK(z && o && ((uintptr_t)o % MEM_ALIGN_BYTES) == 0);
    free(z);
    free(o);
}

static void mem_overflow_refused(void) {
    CHECK(mem_calloc_aligned(SIZE_MAX / 2, 4) == NULL);
    CHECK(mem_calloc_aligned(1, SIZE_MAX - 8) == NULL);
}

/* A bson_t in the block grows past its 120 inline bytes and is freed in place. */
static void mem_holds_bson(void) {
    holder_t *h = mem_calloc_aligned(1, sizeof *h);
    char key[16];
    CHECK(h != NULL);
    if (!h) return;
    bson_init(&h->doc);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        BSON_APPEND_UTF8(&h->doc, key, "a value that does not fit inline for long");
    }
    CHECK(bson_iter_init_find(&h->it, &h->doc, "k99"));
    CHECK_STR(bson_iter_utf8(&h->it, NULL), "a value that does not fit inline for long");
    bson_destroy(&h->doc);
    free(h);
}

T_MAIN(T_CASE(mem_aligned_and_zeroed), T_CASE(mem_overflow_refused), T_CASE(mem_holds_bson))
