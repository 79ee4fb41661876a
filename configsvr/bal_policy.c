/*
 * bal_policy.c — the balancer's chunk selection policy (bin/configsvr, called by the
 * balancer thread in balancer.c and by tests): pure functions over a snapshot of one
 * collection and the shards (configsvr.h "balancer policy"), no catalog, no network.
 * MongoDB's BalancerPolicy (notes §4.3) in priority order: chunks on draining shards,
 * zone violations, then per-zone imbalance with the classic chunk-count rule (start at
 * the threshold 2/4/8, go on while the difference is >= 2) or the data-size rule
 * (largest − smallest >= 3 × chunk size, moveRange with only min). A shard takes part in
 * at most one migration per round: its busy flag, shared by every collection of a round.
 */
#include <stdio.h>
#include <string.h>

#include "common/rtable.h"
#include "configsvr/configsvr.h"

int bal_threshold(int nchunks) {
    if (nchunks < 20) return 2;
    if (nchunks < 80) return 4;
    return 8;
}


const char *bal_chunk_zone(const bal_coll_t *c, int i) {
    const bal_chunk_t *ch = &c->chunks[i];
    /* In a zone only when a range contains the chunk whole (partial overlap = no zone). */
    for (int z = 0; z < c->nzones; z++) {
        const bal_zone_range_t *r = &c->zones[z];
        if (rtable_bytes_cmp(r->min_enc, r->min_len, ch->min_enc, ch->min_len) <= 0 &&
            rtable_bytes_cmp(ch->max_enc, ch->max_len, r->max_enc, r->max_len) <= 0)
            return r->zone;
    }
    return "";
}

static bool shard_has_zone(const bal_shard_t *s, const char *zone) {
    if (!zone[0]) return true;  /* chunks of no zone may live anywhere */
    for (int i = 0; i < s->nzones; i++)
        if (strcmp(s->zones[i], zone) == 0) return true;
    return false;
}

static bool at_max_size(const bal_shard_t *s) {
    return s->max_size_bytes > 0 && s->total_bytes >= s->max_size_bytes;
}

/* Can shard s receive a chunk of zone z this round? */
static bool can_receive(const bal_shard_t *s, const char *zone) {
    return !s->busy && !s->draining && !at_max_size(s) && shard_has_zone(s, zone);
}

/* The chunks of the collection: counted by a summary snapshot, else chunks[] is all. */
static int coll_chunks(const bal_coll_t *c) {
    return c->shard_chunks ? c->total_chunks : c->nchunks;
}

/* count_chunks from a summary's counts: a zone's chunks are those wholly inside its
 * ranges; no zone's are the rest. */
static void count_from_summary(const bal_coll_t *c, int nshards, const char *zone, int *counts) {
    for (int s = 0; s < nshards; s++) {
        int in_zone = 0, in_any = 0;
        for (int z = 0; zone && z < c->nzones; z++) {
            int k = c->range_chunks[z * nshards + s];
            in_any += k;
            if (strcmp(c->zones[z].zone, zone) == 0) in_zone += k;
        }
        counts[s] = !zone ? c->shard_chunks[s] : zone[0] ? in_zone : c->shard_chunks[s] - in_any;
    }
}

/* Chunks of c per shard (counts[nshards]), only those of zone when zone != NULL. */
static void count_chunks(const bal_coll_t *c, int nshards, const char *zone, int *counts) {
    if (c->shard_chunks) {
        count_from_summary(c, nshards, zone, counts);
        return;
    }
    for (int s = 0; s < nshards; s++) counts[s] = 0;
    for (int i = 0; i < c->nchunks; i++) {
        int o = c->chunks[i].owner;
        if (o < 0 || o >= nshards) continue;
        if (zone && strcmp(bal_chunk_zone(c, i), zone) != 0) continue;
        counts[o]++;
    }
}

/* The least loaded shard that may receive a chunk of zone (fewest chunks of c, ties by
 * index, which is name order), or -1. */
static int least_loaded(const bal_shard_t *shards, int nshards, const int *counts, const char *zone,
                        bal_policy_t policy) {
    int best = -1;
    for (int s = 0; s < nshards; s++) {
        if (!can_receive(&shards[s], zone)) continue;
        if (best < 0) best = s;
        else if (policy == BAL_POLICY_DATA_SIZE ? shards[s].coll_bytes < shards[best].coll_bytes
                                                : counts[s] < counts[best])
            best = s;
    }
    return best;
}

static int add(bal_move_t *out, int n, int cap, int chunk, int from, int to, bool min_only,
               const char *reason, bal_shard_t *shards) {
    if (n >= cap) return n;
    out[n].chunk = chunk;
    out[n].from = from;
    out[n].to = to;
    out[n].min_only = min_only;
    out[n].reason = reason;
    shards[from].busy = shards[to].busy = true;
    return n + 1;
}

/* The distinct zones of c plus "" (no zone), in the order of c->zones: the imbalance is
 * computed per zone among the shards carrying it. */
static int zone_list(const bal_coll_t *c, const char **zl, int cap) {
    int n = 0;
    zl[n++] = "";
    for (int z = 0; z < c->nzones && n < cap; z++) {
        bool seen = false;
        for (int k = 0; k < n; k++)
            if (strcmp(zl[k], c->zones[z].zone) == 0) seen = true;
        if (!seen) zl[n++] = c->zones[z].zone;
    }
    return n;
}

/* First non-jumbo chunk of zone on shard s, or -1. */
static int first_movable(const bal_coll_t *c, int s, const char *zone) {
    for (int i = 0; i < c->nchunks; i++)
        if (c->chunks[i].owner == s && !c->chunks[i].jumbo &&
            strcmp(bal_chunk_zone(c, i), zone) == 0)
            return i;
    return -1;
}

int bal_choose(const bal_coll_t *c, bal_shard_t *shards, int nshards, bal_policy_t policy,
               bal_move_t *out, int cap) {
    int n = 0;
    if (c->no_balance || nshards < 2 || coll_chunks(c) == 0 || cap <= 0) return 0;
    int counts[nshards];
    count_chunks(c, nshards, NULL, counts);

    /* 1. Draining shards: the first movable chunk of each, to the least loaded shard. */
    for (int s = 0; s < nshards; s++) {
        if (!shards[s].draining || shards[s].busy) continue;
        for (int i = 0; i < c->nchunks; i++) {
            if (c->chunks[i].owner != s || c->chunks[i].jumbo) continue;
            int to = least_loaded(shards, nshards, counts, bal_chunk_zone(c, i), policy);
            if (to < 0) break;  /* no appropriate recipient: nothing for this shard */
            n = add(out, n, cap, i, s, to, false, "draining", shards);
            counts[s]--;
            counts[to]++;
            break;
        }
    }

    /* 2. Zone violations: a chunk whose zone its shard does not carry. */
    for (int i = 0; i < c->nchunks; i++) {
        const bal_chunk_t *ch = &c->chunks[i];
        const char *zone = bal_chunk_zone(c, i);
        if (!zone[0] || ch->jumbo || ch->owner < 0 || ch->owner >= nshards) continue;
        if (shards[ch->owner].busy || shards[ch->owner].draining) continue;
        if (shard_has_zone(&shards[ch->owner], zone)) continue;
        int to = least_loaded(shards, nshards, counts, zone, policy);
        if (to < 0) continue;
        n = add(out, n, cap, i, ch->owner, to, false, "zoneViolation", shards);
        counts[ch->owner]--;
        counts[to]++;
    }

    /* 3. Imbalance, per zone among the shards carrying it (no zone: every shard). */
    const char *zl[c->nzones + 1];
    int nz = zone_list(c, zl, c->nzones + 1);
    int threshold = c->moved_last_round ? 2 : bal_threshold(coll_chunks(c));
    int64_t sizes[nshards];
    for (int s = 0; s < nshards; s++) sizes[s] = shards[s].coll_bytes;
    for (int z = 0; z < nz; z++) {
        const char *zone = zl[z];
        int zc[nshards];
        bool gave_up[nshards];
        int thr = threshold;
        count_chunks(c, nshards, zone, zc);
        memset(gave_up, 0, sizeof gave_up);
        for (;;) {  /* the single-zone step repeats while it yields a migration */
            int donor = -1, to = -1;
            for (int s = 0; s < nshards; s++) {
                if (shards[s].busy || shards[s].draining || gave_up[s] ||
                    !shard_has_zone(&shards[s], zone))
                    continue;
                bool bigger = policy == BAL_POLICY_DATA_SIZE ? sizes[s] > sizes[donor < 0 ? s : donor]
                                                             : zc[s] > zc[donor < 0 ? s : donor];
                if (donor < 0 || bigger) donor = s;
            }
            for (int s = 0; s < nshards; s++) {
                if (s == donor || !can_receive(&shards[s], zone)) continue;
                bool smaller = policy == BAL_POLICY_DATA_SIZE ? sizes[s] < sizes[to < 0 ? s : to]
                                                              : zc[s] < zc[to < 0 ? s : to];
                if (to < 0 || smaller) to = s;
            }
            if (donor < 0 || to < 0) break;
            if (policy == BAL_POLICY_DATA_SIZE) {
                if (sizes[donor] - sizes[to] < 3 * c->chunk_size_bytes) break;
            } else if (zc[donor] - zc[to] < thr) {
                break;
            }
            int i = first_movable(c, donor, zone);
            if (i < 0) {
                /* Every chunk of the donor in this zone is jumbo: it cannot give; the
                 * others may (a local mark: the shard is not busy for other moves). */
                gave_up[donor] = true;
                continue;
            }
            if (policy == BAL_POLICY_DATA_SIZE) {
                n = add(out, n, cap, i, donor, to, true, "dataSizeImbalance", shards);
                sizes[donor] -= c->chunk_size_bytes;
                sizes[to] += c->chunk_size_bytes;
            } else {
                n = add(out, n, cap, i, donor, to, false, "chunksImbalance", shards);
                zc[donor]--;
                zc[to]++;
            }
            thr = 2;  /* once started, go on while the difference is >= 2 */
            if (n >= cap) return n;
        }
    }
    return n;
}

/* ---- explain --------------------------------------------------------------------------- */

static const char *policy_name(bal_policy_t p) {
    return p == BAL_POLICY_DATA_SIZE ? "dataSize" : "chunkCount";
}

void bal_explain(const bal_coll_t *c, const bal_shard_t *shards, int nshards,
                 bal_policy_t policy, bson_t *out) {
    int counts[nshards > 0 ? nshards : 1], jumbo[nshards > 0 ? nshards : 1];
    int threshold = c->moved_last_round ? 2 : bal_threshold(coll_chunks(c));
    int maxc = -1, minc = -1;
    int64_t maxb = -1, minb = -1;
    bson_t arr, d;
    count_chunks(c, nshards, NULL, counts);
    for (int s = 0; s < nshards; s++) jumbo[s] = c->shard_jumbo ? c->shard_jumbo[s] : 0;
    for (int i = 0; !c->shard_jumbo && i < c->nchunks; i++)
        if (c->chunks[i].jumbo && c->chunks[i].owner >= 0 && c->chunks[i].owner < nshards)
            jumbo[c->chunks[i].owner]++;
    BSON_APPEND_UTF8(out, "ns", c->ns);
    BSON_APPEND_UTF8(out, "policy", policy_name(policy));
    BSON_APPEND_INT32(out, "nChunks", coll_chunks(c));
    BSON_APPEND_INT32(out, "threshold", threshold);
    BSON_APPEND_INT64(out, "chunkSizeBytes", c->chunk_size_bytes);
    BSON_APPEND_BOOL(out, "noBalance", c->no_balance);
    BSON_APPEND_ARRAY_BEGIN(out, "shards", &arr);
    for (int s = 0; s < nshards; s++) {
        char k[16];
        const char *key;
        bson_uint32_to_string((uint32_t)s, &key, k, sizeof k);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &d);
        BSON_APPEND_UTF8(&d, "shard", shards[s].name);
        BSON_APPEND_INT32(&d, "chunks", counts[s]);
        BSON_APPEND_INT32(&d, "jumboChunks", jumbo[s]);
        BSON_APPEND_INT64(&d, "dataBytes", shards[s].coll_bytes);
        BSON_APPEND_BOOL(&d, "draining", shards[s].draining);
        BSON_APPEND_INT64(&d, "maxSizeBytes", shards[s].max_size_bytes);
        BSON_APPEND_BOOL(&d, "atMaxSize", at_max_size(&shards[s]));
        BSON_APPEND_BOOL(&d, "busy", shards[s].busy);
        bson_append_document_end(&arr, &d);
        if (shards[s].draining) continue;
        if (maxc < 0 || counts[s] > maxc) maxc = counts[s];
        if (minc < 0 || counts[s] < minc) minc = counts[s];
        if (maxb < 0 || shards[s].coll_bytes > maxb) maxb = shards[s].coll_bytes;
        if (minb < 0 || shards[s].coll_bytes < minb) minb = shards[s].coll_bytes;
    }
    bson_append_array_end(out, &arr);
    if (policy == BAL_POLICY_DATA_SIZE) {
        BSON_APPEND_INT64(out, "dataSizeDifference", maxb - minb);
        BSON_APPEND_INT64(out, "dataSizeThreshold", 3 * c->chunk_size_bytes);
    } else {
        BSON_APPEND_INT32(out, "chunkCountDifference", maxc - minc);
    }

    /* What bal_choose would do now, on a copy of the shards. */
    bal_shard_t copy[nshards > 0 ? nshards : 1];
    bal_move_t mv[nshards > 0 ? nshards : 1];
    memcpy(copy, shards, sizeof(bal_shard_t) * (size_t)nshards);
    int n = bal_choose(c, copy, nshards, policy, mv, nshards);
    BSON_APPEND_ARRAY_BEGIN(out, "next", &arr);
    for (int m = 0; m < n; m++) {
        char k[16];
        const char *key;
        const bal_chunk_t *ch = &c->chunks[mv[m].chunk];
        bson_uint32_to_string((uint32_t)m, &key, k, sizeof k);
        BSON_APPEND_DOCUMENT_BEGIN(&arr, key, &d);
        if (ch->min) BSON_APPEND_DOCUMENT(&d, "min", ch->min);
        if (ch->max && !mv[m].min_only) BSON_APPEND_DOCUMENT(&d, "max", ch->max);
        BSON_APPEND_UTF8(&d, "from", shards[mv[m].from].name);
        BSON_APPEND_UTF8(&d, "to", shards[mv[m].to].name);
        BSON_APPEND_UTF8(&d, "reason", mv[m].reason);
        bson_append_document_end(&arr, &d);
    }
    bson_append_array_end(out, &arr);
    if (n > 0) {
        BSON_APPEND_UTF8(out, "decision", "move");
        return;
    }
    /* Nothing: say the first thing that stops it. */
    const char *why = "balanced";
    char msg[256];
    if (c->no_balance) {
        why = "noBalance";
    } else if (nshards < 2) {
        why = "fewerThanTwoShards";
    } else {
        bool any_jumbo = false, any_full = false, any_busy = false;
        for (int s = 0; s < nshards; s++) {
            any_jumbo |= jumbo[s] > 0;
            any_full |= at_max_size(&shards[s]);
            any_busy |= shards[s].busy;
        }
        bool imbalanced = policy == BAL_POLICY_DATA_SIZE ? maxb - minb >= 3 * c->chunk_size_bytes
                                                         : maxc - minc >= threshold;
        if (imbalanced && any_busy) why = "shardBusy";
        else if (imbalanced && any_full) why = "maxSize";
        else if (imbalanced && any_jumbo) why = "jumbo";
        else if (imbalanced) why = "noEligibleRecipient";
    }
    if (strcmp(why, "balanced") == 0 && policy == BAL_POLICY_CHUNK_COUNT)
        snprintf(msg, sizeof msg, "chunk count difference %d is below the threshold %d",
                 maxc - minc, threshold);
    else if (strcmp(why, "balanced") == 0)
        snprintf(msg, sizeof msg, "data size difference %lld is below 3 x chunk size %lld",
                 (long long)(maxb - minb), (long long)(3 * c->chunk_size_bytes));
    else
        snprintf(msg, sizeof msg, "nothing to move: %s", why);
    BSON_APPEND_UTF8(out, "decision", "none");
    BSON_APPEND_UTF8(out, "why", why);
    BSON_APPEND_UTF8(out, "message", msg);
}

/* ---- compliance (balancerCollectionStatus) -------------------------------------------- */

bool bal_chunk_straddles_zone(const bal_coll_t *c) {
    /* A zone bound strictly inside a chunk: the chunk must be split there before the
     * balancer can place either side (MongoDB's selectChunksToSplit → zoneViolation). */
    for (int z = 0; z < c->nzones; z++) {
        const bal_zone_range_t *r = &c->zones[z];
        for (int i = 0; i < c->nchunks; i++) {
            const bal_chunk_t *ch = &c->chunks[i];
            if ((rtable_bytes_cmp(ch->min_enc, ch->min_len, r->min_enc, r->min_len) < 0 &&
                 rtable_bytes_cmp(r->min_enc, r->min_len, ch->max_enc, ch->max_len) < 0) ||
                (rtable_bytes_cmp(ch->min_enc, ch->min_len, r->max_enc, r->max_len) < 0 &&
                 rtable_bytes_cmp(r->max_enc, r->max_len, ch->max_enc, ch->max_len) < 0))
                return true;
        }
    }
    return false;
}

const char *bal_compliance(const bal_coll_t *c, const bal_shard_t *shards, int nshards,
                           bal_policy_t policy) {
    if (bal_chunk_straddles_zone(c)) return "zoneViolation";
    /* The distribution alone: noBalance, the round's busy shards and "moved last round"
     * play no part (a collection is compliant or not whether or not it may move). */
    bal_coll_t copy = *c;
    copy.no_balance = false;
    copy.moved_last_round = false;
    bal_shard_t sh[nshards > 0 ? nshards : 1];
    bal_move_t mv[nshards > 0 ? nshards : 1];
    memcpy(sh, shards, sizeof(bal_shard_t) * (size_t)nshards);
    for (int s = 0; s < nshards; s++) sh[s].busy = false;
    int n = bal_choose(&copy, sh, nshards, policy, mv, nshards);
    if (n == 0) return NULL;
    /* bal_choose lists draining first, then zone violations, then imbalance; the data
     * size imbalance is MongoDB 7.0's chunksImbalance (its only policy is data size). */
    return strcmp(mv[0].reason, "dataSizeImbalance") == 0 ? "chunksImbalance" : mv[0].reason;
}
