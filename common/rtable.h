/*
 * rtable.h — one collection's routing table as the config server's getRoutingTable
 * reply describes it (shardd/shardver.h has the reply shape), shared by the router's
 * routing-table cache (MongoDB's ChunkManager in the CatalogCache) and the shard's
 * filtering metadata (CollectionMetadata). Used by bin/router and bin/shardd.
 *
 * A table is the generation (epoch, timestamp), the key pattern and the chunks sorted
 * by encoded min, tiling [MinKey, MaxKey) without gap or overlap; each chunk names its
 * shard by an index into a small per-table list of shard names. Derived on every build:
 * the collection version (max lastmod) and each shard's version (max lastmod of its
 * chunks, (0,0) when it owns none) — notes §2.1. An incremental reply (full: false, only
 * chunks with lastmod >= sinceVersion) is merged into the previous table: old chunks
 * that no fresh chunk overlaps survive, the fresh ones replace the rest (a split or merge
 * changes boundaries, a migration the owner). Each run of adjacent fresh chunks must
 * start and end on base's chunk boundaries (checked against the neighbours only, so the
 * result tiles because base did); a run that does not, or a reply of another
 * generation, asks the caller to fetch in full (MongoDB's refresh falls back the same
 * way). docs/versioning-and-routing.md describes the structure and its costs.
 *
 * Versions compare as notes §2.1 says: timestamp first (different generations are
 * ordered only by it), then major, then minor; UNSHARDED is comparable with nothing.
 */
#ifndef MS_RTABLE_H
#define MS_RTABLE_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/errors.h"
#include "common/keys.h"
#include "common/limits.h"

/* Shard names (config.shards _id) as kept in a table. */
#define RTABLE_NAME_BYTES_MAX 128

/* MongoDB's ChunkVersion {e, t, v}: generation + placement. */
typedef struct rtable_version {
    bson_oid_t epoch;
    uint32_t ts_t, ts_i;      /* collection timestamp */
    uint32_t major, minor;    /* placement */
} rtable_version_t;

typedef struct rtable_chunk {
    buf_t min, max;           /* encoded bounds (keys_encode_bound); in a table: read-only,
                                 pointing into the chunk's block (cap 0: owned by it) */
    int shard;                /* index into rtable_t.shards */
    uint32_t major, minor;    /* lastmod */
} rtable_chunk_t;

/* A table's chunks live in blocks of at most RTABLE_BLOCK_CHUNKS, blocks in pages of at
 * most RTABLE_PAGE_BLOCKS, all in key order (at 1,000,000 chunks: ~120 pages). Blocks and
 * pages never change once a table holds them, and tables share them by reference count:
 * an incremental refresh builds the new table from base's pages, copying only the blocks
 * the fresh chunks touch, the pages holding those, and the page index. A reader holding
 * either table always sees a whole one, with no lock: nothing it can reach is written. */
#define RTABLE_BLOCK_CHUNKS 64
#define RTABLE_PAGE_BLOCKS 128
typedef struct rtable_block rtable_block_t;
typedef struct rtable_page rtable_page_t;

/* Built in place by rtable_from_reply and released with rtable_clear. Never copy or
 * move one by value: the key pattern holds a bson_t, which may point into itself. */
typedef struct rtable {
    bson_oid_t epoch;
    uint32_t ts_t, ts_i;
    keys_pattern_t pattern;
    bool unique;
    uint32_t coll_major, coll_minor;
    int nshards;
    char shards[MS_SHARDS_MAX][RTABLE_NAME_BYTES_MAX];
    uint32_t shard_major[MS_SHARDS_MAX], shard_minor[MS_SHARDS_MAX];
    int shard_nchunks[MS_SHARDS_MAX];   /* chunks each shard owns */
    /* Chunks of each shard whose lastmod is the shard's version: when a refresh takes the
     * last of them away, only that shard's version is recomputed (from page and block
     * summaries). */
    int shard_at_max[MS_SHARDS_MAX];
    int nchunks;              /* sorted by min, tiling the key space (rtable_chunk) */
    int nblocks, npages;
    rtable_page_t **pages;    /* shared with other tables: read-only */
    int *page_start;          /* index of each page's first chunk; [npages] = nchunks */
    int *page_bstart;         /* index of each page's first block; [npages] = nblocks */
} rtable_t;

/* Builds *out from a getRoutingTable reply (borrowed). base (borrowed, may be NULL) is
 * the previous table: an incremental reply of base's generation is merged into it,
 * sharing base's untouched pages (cost O(changes x log n) plus the page index). On 0
 * either *out is initialised (caller releases with rtable_clear) and *need_full is
 * false, or *need_full is true and nothing is initialised: the reply was incremental
 * but not applicable (no base, another generation, or the fresh chunks do not fit
 * base's boundaries: a gap or overlap) and the caller asks again without sinceVersion.
 * A full reply that does not tile is FailedToParse. On error or need_full *out is left
 * zeroed (rtable_clear is harmless). base stays valid and unchanged either way. */
int rtable_from_reply(const bson_t *reply, const rtable_t *base, rtable_t *out,
                      bool *need_full, ms_error_t *err);

/* ---- many replies, one table: a paged getRoutingTable ------------------------------------
 * The config server answers in pages (docs/versioning-and-routing.md "batched routing
 * tables"): the chunks in lastmod order from sinceVersion (or from the start), `more:
 * true` while chunks remain, the next page asked with `after` = the last lastmod read.
 * A loader collects the pages' chunks and builds one table at the end: a chunk that a
 * newer chunk overlaps was split, merged or moved between two pages and is dropped (its
 * replacements, being newer, came in a later page), so the table is the catalog's as of
 * the last page. A page of another generation (or `full`) than the first asks for a
 * restart. */
typedef struct rtable_slab rtable_slab_t;
typedef struct rtable_load {
    const rtable_t *base;     /* borrowed; NULL: a full load */
    rtable_t *out;            /* built in place at rtable_load_end */
    rtable_chunk_t *fresh;    /* every chunk of every page so far; bounds in slabs */
    rtable_slab_t *slabs;     /* the bounds' bytes, a few large allocations (newest first) */
    buf_t scratch;            /* one bound being encoded */
    int nfresh, cap, npages;
    bool full;                /* the first page's */
    bool have_cv;
    rtable_version_t cv;      /* the last page's collection version (a floor) */
    uint32_t last_major, last_minor;   /* the last lastmod read: the next page's `after` */
    bool more;                /* the last page said chunks remain */
    bool partial;             /* only read (rtable_fetch_owner): an incremental first page
                                 needs no base */
} rtable_load_t;

/* Starts a load into out (zeroed here) for base (NULL: full). */
void rtable_load_begin(rtable_load_t *l, const rtable_t *base, rtable_t *out);
/* Takes one page (borrowed). *restart when the page cannot join the others (another
 * generation or kind than the first, or the first page is incremental and base cannot
 * take it): the caller aborts and starts over in full. FailedToParse for a malformed
 * page, one whose lastmods do not follow the last page's, or past the chunk cap. */
int rtable_load_page(rtable_load_t *l, const bson_t *reply, bool *restart, ms_error_t *err);
/* Builds l->out from the pages (as rtable_from_reply: *need_full when an incremental
 * load does not fit base) and frees the loader. */
int rtable_load_end(rtable_load_t *l, bool *need_full, ms_error_t *err);
/* Frees the loader without building (out stays zeroed). */
void rtable_load_abort(rtable_load_t *l);

/* Sends one getRoutingTable page request (cmd, borrowed) and returns its {ok: 1} reply in
 * *reply (initialised on 0 only); an {ok: 0} answer is returned as its error code. */
typedef int (*rtable_call_fn)(void *arg, const bson_t *cmd, bson_t *reply, ms_error_t *err);
/* Fetches ns's table page by page through call and builds *out: incremental from base
 * when base is non-NULL (falling back to a full load when it does not apply), full
 * otherwise. Starts over on a generation change between pages, at most
 * MS_ROUTING_FETCH_TRIES loads in all (then ConflictingOperationInProgress). The request
 * is {getRoutingTable: ns, $db: "admin", sinceVersion?, after?}. Failpoint
 * hangBetweenRoutingTablePages (test): evaluated before each page but the first. */
/* The collection's UUID a page names (its `uuid`, 16 bytes) into out; false without one. */
bool rtable_reply_uuid(const bson_t *reply, uint8_t out[16]);
#define RTABLE_FP_HANG_BETWEEN_PAGES "hangBetweenRoutingTablePages"
int rtable_fetch(const char *ns, const rtable_t *base, rtable_call_fn call, void *arg,
                 rtable_t *out, ms_error_t *err);

/* The shard that owns key (a shard-key document, borrowed) now, without the whole table:
 * reads the pages of the chunks changed since `since` (a chunk's or collection's version;
 * of another generation: all chunks) and of them takes the newest whose range holds key
 * — the current one, when a chunk holding key had lastmod `since.v` then (every chunk
 * replacing it is newer). *cv: the collection version the pages reported. Restarts on a
 * generation change between pages as rtable_fetch. FailedToParse when no chunk read
 * holds key. */
int rtable_fetch_owner(const char *ns, const rtable_version_t *since, const bson_t *key,
                       rtable_call_fn call, void *arg, char *owner, size_t cap,
                       rtable_version_t *cv, ms_error_t *err);

/* Releases what rtable_from_reply allocated (NULL-safe; a zeroed table is fine). Pages
 * and blocks another table still shares stay. */
void rtable_clear(rtable_t *t);
/* Chunk i (0 <= i < nchunks) of t: two binary searches (page, block). */
const rtable_chunk_t *rtable_chunk(const rtable_t *t, int i);
/* Test hook: new blocks hold at most chunks_per_block chunks and new pages at most
 * blocks_per_page blocks (2 up to the RTABLE_ maxima; out of range: the maxima), so a
 * small table spans many pages. Call before building tables, from one thread. */
void rtable_set_geometry(int chunks_per_block, int blocks_per_page);
/* Renumbers t's shards so index i becomes i-1 and the first goes last (the router's
 * test hook: nothing may rely on a shard keeping its index across refreshes). Copies
 * the pages and blocks t shares with other tables before writing them. */
void rtable_rotate_shards(rtable_t *t);

/* memcmp order of two byte strings; a proper prefix sorts first. */
int rtable_bytes_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);
/* Index of the chunk containing the encoded key (binary search over the pages, then the
 * blocks of one, then the chunks of one: the last chunk whose min <= key — chunks tile the key space, so there is always
 * one). 0 for an empty table. rtable_find_chunk: that chunk (NULL for an empty table). */
int rtable_find(const rtable_t *t, const uint8_t *key, size_t len);
const rtable_chunk_t *rtable_find_chunk(const rtable_t *t, const uint8_t *key, size_t len);
/* Index of the first chunk whose max > key: the one containing key, or nchunks when key
 * is at or past the last chunk's max (MaxKey). Where a scan of [key, ...) starts. */
int rtable_first_ending_after(const rtable_t *t, const uint8_t *key, size_t len);
/* Index of name in t->shards, -1 if it is not there. After an incremental refresh a shard
 * that gave away its last chunk keeps its index (shard_nchunks[i] == 0, version (0,0)). */
int rtable_shard_index(const rtable_t *t, const char *name);

/* The collection version / the version of shard index i (-1 → (0,0)), with generation. */
void rtable_coll_version(const rtable_t *t, rtable_version_t *out);
void rtable_shard_version(const rtable_t *t, int shard, rtable_version_t *out);

/* Wire form {e: ObjectId, t: Timestamp, v: Timestamp(major, minor)}. parse: TypeMismatch
 * when it is not a document with those three fields. */
int rtable_version_parse(const bson_iter_t *it, rtable_version_t *out, ms_error_t *err);
void rtable_version_append(bson_t *dst, const char *key, const rtable_version_t *v);
/* UNSHARDED = zero epoch, Timestamp(0,0), Timestamp(0,0). */
void rtable_version_unsharded(rtable_version_t *out);
bool rtable_version_is_unsharded(const rtable_version_t *v);
/* Same epoch and timestamp. */
bool rtable_same_generation(const rtable_version_t *a, const rtable_version_t *b);
/* Same generation and same major: MongoDB's write-compatible (minor drift tolerated). */
bool rtable_write_compatible(const rtable_version_t *a, const rtable_version_t *b);
/* Compares a with b (notes §2.1): *comparable false when either is UNSHARDED, or the
 * generations differ but share a timestamp (epochs are not ordered); else returns <0, 0,
 * >0 ordering by timestamp, then major, then minor. */
int rtable_version_cmp(const rtable_version_t *a, const rtable_version_t *b, bool *comparable);

/* ---- database versions (notes §2.3) ---------------------------------------------------- */

/* config.databases version {uuid, timestamp, lastMod} (MongoDB's DatabaseVersion): a new
 * uuid and timestamp each time the database is created; lastMod bumped by movePrimary. */
typedef struct rtable_dbv {
    uint8_t uuid[16];
    uint32_t ts_t, ts_i;
    int32_t last_mod;
} rtable_dbv_t;

/* parse: TypeMismatch unless a document with uuid (16-byte binary), timestamp and an
 * int lastMod >= 0. */
int rtable_dbv_parse(const bson_iter_t *it, rtable_dbv_t *out, ms_error_t *err);
void rtable_dbv_append(bson_t *dst, const char *key, const rtable_dbv_t *v);
bool rtable_dbv_equal(const rtable_dbv_t *a, const rtable_dbv_t *b);
/* recv is newer than ours: a later incarnation (timestamps order them), or the same one
 * with a higher lastMod. */
bool rtable_dbv_newer(const rtable_dbv_t *recv, const rtable_dbv_t *ours);
/* {find: "databases", $db: "config", filter: {_id: db}} into cmd (initialised here). */
void rtable_db_find_cmd(bson_t *cmd, const char *db);
/* primary and version of a config.databases document (or a _configsvrCreateDatabase
 * reply). FailedToParse when either is missing or malformed. */
int rtable_db_entry_parse(const bson_t *doc, char *primary, size_t cap, rtable_dbv_t *v,
                          ms_error_t *err);

#endif
