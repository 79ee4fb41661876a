/*
 * mem.c — the aligned allocator for structs that hold a bson_t, and giving freed memory
 * back after large operations (see mem.h). Used by every process.
 */
#include "common/mem.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *mem_calloc_aligned(size_t n, size_t size) {
    size_t bytes, rounded;
    void *p;
    if (size != 0 && n > SIZE_MAX / size) return NULL;
    bytes = n * size;
    if (bytes == 0) bytes = 1;
    /* aligned_alloc wants a multiple of the alignment. */
    if (bytes > SIZE_MAX - (MEM_ALIGN_BYTES - 1)) return NULL;
    rounded = (bytes + MEM_ALIGN_BYTES - 1) / MEM_ALIGN_BYTES * MEM_ALIGN_BYTES;
    p = aligned_alloc(MEM_ALIGN_BYTES, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

void mem_trim_after(size_t n) {
    if (n >= MEM_TRIM_ITEMS) malloc_trim(0);
}
