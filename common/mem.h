/*
 * mem.h — the one allocator for heap blocks that hold a bson_t or bson_iter_t by
 * value, and giving freed memory back after large operations. Used by every process.
 *
 * libbson declares bson_t and bson_iter_t 128-byte aligned, and the compiler may rely
 * on it; malloc and calloc only promise 16 bytes (UBSan reports every access through
 * such a block as misaligned). A struct with a bson_t member therefore lives on the
 * heap only in a block from mem_calloc_aligned — and never moves once built: an
 * inline bson_t keeps its bytes inside the struct and an allocated one points into
 * itself (its buf points at its own alloc field), so realloc, qsort or a struct copy
 * of it corrupts the document. Arrays that grow or sort hold pointers or positions.
 */
#ifndef MS_MEM_H
#define MS_MEM_H

#include <bson/bson.h>
#include <stddef.h>

/* Alignment of every block mem_calloc_aligned returns (bytes): libbson's bson_t. */
#define MEM_ALIGN_BYTES 128
_Static_assert(_Alignof(bson_t) <= MEM_ALIGN_BYTES, "bson_t needs a larger alignment");
_Static_assert(_Alignof(bson_iter_t) <= MEM_ALIGN_BYTES, "bson_iter_t needs a larger alignment");

/* n zeroed elements of size bytes, MEM_ALIGN_BYTES-aligned; released with free().
 * NULL when out of memory or when n * size overflows. */
void *mem_calloc_aligned(size_t n, size_t size);

/* After an operation that allocated and freed small pieces per chunk (or per item) for n
 * of them: at n >= MEM_TRIM_ITEMS, gives the freed heap pages back to the system. Small
 * frees leave holes between what stays allocated that the allocator keeps resident (at
 * 100,000 chunks 20-25 MB in a router, a shard or the config server); malloc_trim
 * releases whole free pages, at a cost of one pass over the free lists. */
#define MEM_TRIM_ITEMS 4096
void mem_trim_after(size_t n);

#endif
