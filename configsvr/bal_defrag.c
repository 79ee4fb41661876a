/*
 * bal_defrag.c — the pure part of defragmentation and of the auto-merger (bin/configsvr,
 * called by defrag.c in the balancer's round, by bal_merge.c and by unit tests): the
 * phases of MongoDB's BalancerDefragmentationPolicy and how one moves to the next
 * (notes §5.1), the runs of contiguous chunks a merge may join, and phase 2's choice of
 * where a small chunk goes (MongoDB's neighbour scoring). No catalog, no network: the
 * snapshot is the balancer's bal_coll_t / bal_shard_t (configsvr.h).
 */
#include <stdint.h>
#include <string.h>

#include "common/rtable.h"
#include "configsvr/configsvr.h"

static const char *const phase_names[] = {
    [BAL_DEFRAG_NONE] = "",
    [BAL_DEFRAG_MERGE_MEASURE] = "mergeAndMeasureChunks",
    [BAL_DEFRAG_MOVE_MERGE] = "moveAndMergeChunks",
    [BAL_DEFRAG_MERGE] = "mergeChunks",
    [BAL_DEFRAG_FINISHED] = "finished",
};

const char *bal_defrag_phase_name(bal_defrag_phase_t p) {
    return p >= BAL_DEFRAG_NONE && p <= BAL_DEFRAG_FINISHED ? phase_names[p] : "";
}

bal_defrag_phase_t bal_defrag_phase_parse(const char *s) {
    if (!s || !s[0]) return BAL_DEFRAG_NONE;
    for (int p = BAL_DEFRAG_MERGE_MEASURE; p <= BAL_DEFRAG_FINISHED; p++)
        if (strcmp(s, phase_names[p]) == 0) return (bal_defrag_phase_t)p;
    /* Anything else (6.0's splitChunks, kept by MongoDB only for parsing): start over. */
    return BAL_DEFRAG_MERGE_MEASURE;
}

bal_defrag_phase_t bal_defrag_next(bal_defrag_phase_t p, int pending, bool restart) {
    switch (p) {
    case BAL_DEFRAG_NONE:
        return BAL_DEFRAG_MERGE_MEASURE;
    case BAL_DEFRAG_MERGE_MEASURE:
        return pending > 0 || restart ? p : BAL_DEFRAG_MOVE_MERGE;
    case BAL_DEFRAG_MOVE_MERGE:
        /* A non-retriable error in phase 2 goes back to phase 1: the chunks it measured
         * may no longer be the chunks there are. */
        if (restart) return BAL_DEFRAG_MERGE_MEASURE;
        return pending > 0 ? p : BAL_DEFRAG_MERGE;
    case BAL_DEFRAG_MERGE:
        return pending > 0 || restart ? p : BAL_DEFRAG_FINISHED;
    case BAL_DEFRAG_FINISHED:
    default:
        return BAL_DEFRAG_FINISHED;
    }
}

bool bal_defrag_retriable(int code) {
    switch (code) {
    case MS_ERR_HOST_UNREACHABLE:
    case MS_ERR_NETWORK_TIMEOUT:
    case MS_ERR_LOCK_BUSY:
    case MS_ERR_LOCK_TIMEOUT:
    case MS_ERR_EXCEEDED_TIME_LIMIT:
    case MS_ERR_CONFLICTING_OPERATION:
    case MS_ERR_STALE_CONFIG:
    /* A merge whose precondition fails (the range is no longer contiguous chunks on one
     * shard, no chunk starts or ends there): the secondary thread merged from a snapshot
     * a moment old while a migration of the round (or another merge) changed the chunks.
     * A lost race: the next step reloads and merges what there is then. */
    case MS_ERR_ILLEGAL_OPERATION:
        return true;
    default:
        return false;
    }
}

int bal_merge_runs(const bal_coll_t *c, const bool *eligible, bal_run_t *out, int cap) {
    int n = 0, i = 0;
    while (i < c->nchunks && n < cap) {
        int j = i;
        const char *z = bal_chunk_zone(c, i);
        bool ok_i = c->chunks[i].owner >= 0 && !c->chunks[i].jumbo && (!eligible || eligible[i]);
        /* Chunks are in key order; a run goes on while neighbours meet (always, over a
         * whole collection; one shard's chunks alone have gaps). A run stops at a gap,
         * another shard, a jumbo or ineligible chunk, or a zone boundary (a merge across
         * it would create a zone violation). */
        while (ok_i && j + 1 < c->nchunks && c->chunks[j + 1].owner == c->chunks[i].owner &&
               rtable_bytes_cmp(c->chunks[j].max_enc, c->chunks[j].max_len, c->chunks[j + 1].min_enc,
                                c->chunks[j + 1].min_len) == 0 &&
               !c->chunks[j + 1].jumbo && (!eligible || eligible[j + 1]) &&
               strcmp(bal_chunk_zone(c, j + 1), z) == 0)
            j++;
        if (j > i) out[n++] = (bal_run_t){.first = i, .last = j};
        i = j + 1;
    }
    return n;
}

/* An unknown estimate counts as big (MongoDB marks chunks it could not measure below the
 * limit with a max marker and leaves them alone). */
static int64_t est(const bal_chunk_t *ch) {
    return ch->est_bytes < 0 ? INT64_MAX / 4 : ch->est_bytes;
}

bool bal_defrag_is_small(const bal_chunk_t *ch, int64_t small_bytes) {
    return ch->est_bytes >= 0 && ch->est_bytes < small_bytes && !ch->jumbo;
}

/* The score of merging chunk i into neighbour nb, compared field by field in order. */
typedef struct score {
    int same_shard;      /* (1) no migration needed */
    int smaller;         /* (2) the chunk is smaller than the neighbour */
    int not_small_after; /* (3) the merged chunk is no longer small */
    int64_t target_bytes; /* (4) less data on the target shard is better */
    const char *target;  /* ties: the smaller shard name */
} score_t;

static score_t score_of(const bal_coll_t *c, const bal_shard_t *shards, const int64_t *shard_bytes,
                        int i, int nb, int64_t small) {
    const bal_chunk_t *ch = &c->chunks[i], *n = &c->chunks[nb];
    score_t s = {
        .same_shard = ch->owner == n->owner,
        .smaller = est(ch) < est(n),
        .not_small_after = est(ch) + est(n) >= small,
        .target_bytes = shard_bytes[n->owner],
        .target = shards[n->owner].name,
    };
    return s;
}

/* > 0 when a is the better target, < 0 when b is. */
static int score_cmp(const score_t *a, const score_t *b) {
    if (a->same_shard != b->same_shard) return a->same_shard - b->same_shard;
    if (a->smaller != b->smaller) return a->smaller - b->smaller;
    if (a->not_small_after != b->not_small_after) return a->not_small_after - b->not_small_after;
    if (a->target_bytes != b->target_bytes) return a->target_bytes < b->target_bytes ? 1 : -1;
    return -strcmp(a->target ? a->target : "", b->target ? b->target : "");
}

void bal_defrag_shard_bytes(const bal_coll_t *c, int nshards, int64_t *out) {
    for (int s = 0; s < nshards; s++) out[s] = 0;
    for (int i = 0; i < c->nchunks; i++) {
        int o = c->chunks[i].owner;
        if (o >= 0 && o < nshards && c->chunks[i].est_bytes > 0) out[o] += c->chunks[i].est_bytes;
    }
}

int bal_defrag_pick(const bal_coll_t *c, const bal_shard_t *shards, int nshards,
                    const int64_t *shard_bytes, int i, int64_t small_bytes) {
    int cand[2], nc = 0, best = -1;
    const char *z = bal_chunk_zone(c, i);
    if (c->chunks[i].owner < 0 || c->chunks[i].owner >= nshards) return -1;
    for (int d = -1; d <= 1; d += 2) {
        int nb = i + d;
        if (nb < 0 || nb >= c->nchunks) continue;
        const bal_chunk_t *n = &c->chunks[nb];
        if (n->owner < 0 || n->owner >= nshards || n->jumbo) continue;
        if (strcmp(bal_chunk_zone(c, nb), z) != 0) continue;  /* same zone only */
        if (n->owner != c->chunks[i].owner && shards[n->owner].draining) continue;
        cand[nc++] = nb;
    }
    for (int k = 0; k < nc; k++) {
        if (best < 0) {
            best = cand[k];
            continue;
        }
        score_t a = score_of(c, shards, shard_bytes, i, cand[k], small_bytes);
        score_t b = score_of(c, shards, shard_bytes, i, best, small_bytes);
        if (score_cmp(&a, &b) > 0) best = cand[k];
    }
    return best;
}

int bal_defrag_small_left(const bal_coll_t *c, const bal_shard_t *shards, int nshards,
                          int64_t small_bytes) {
    int64_t bytes[nshards > 0 ? nshards : 1];
    int n = 0;
    bal_defrag_shard_bytes(c, nshards, bytes);
    for (int i = 0; i < c->nchunks; i++)
        if (bal_defrag_is_small(&c->chunks[i], small_bytes) &&
            bal_defrag_pick(c, shards, nshards, bytes, i, small_bytes) >= 0)
            n++;
    return n;
}

int bal_defrag_moves(const bal_coll_t *c, bal_shard_t *shards, int nshards, int64_t small_bytes,
                     bal_defrag_act_t *out, int cap, int *waiting) {
    int64_t bytes[nshards > 0 ? nshards : 1];
    bool used[c->nchunks > 0 ? c->nchunks : 1];
    int n = 0;
    *waiting = 0;
    memset(used, 0, sizeof used);
    bal_defrag_shard_bytes(c, nshards, bytes);
    /* Smallest first: they are the ones most worth merging and the least costly to move. */
    for (;;) {
        int i = -1;
        for (int k = 0; k < c->nchunks; k++)
            if (!used[k] && bal_defrag_is_small(&c->chunks[k], small_bytes) &&
                (i < 0 || c->chunks[k].est_bytes < c->chunks[i].est_bytes))
                i = k;
        if (i < 0) break;
        used[i] = true;
        int nb = bal_defrag_pick(c, shards, nshards, bytes, i, small_bytes);
        if (nb < 0) continue;  /* alone in its zone: nothing to merge it with */
        if (used[nb]) {        /* its neighbour is already in an action this step */
            (*waiting)++;
            continue;
        }
        int from = c->chunks[i].owner, to = c->chunks[nb].owner;
        bool move = from != to;
        if (move && (shards[from].busy || shards[to].busy)) {
            (*waiting)++;  /* one migration per shard per round: the next round */
            continue;
        }
        if (n >= cap) {
            (*waiting)++;
            break;
        }
        used[nb] = true;
        if (move) shards[from].busy = shards[to].busy = true;
        out[n++] = (bal_defrag_act_t){.chunk = i, .into = nb, .move = move, .from = from, .to = to};
    }
    return n;
}
