/*
 * agg.h — aggregation pipelines: parse a pipeline array once, run it over documents a
 * caller pushes in (the shard pushes what its planned, ownership-filtered scan finds; a
 * router's merger will push what its shards return; the config server its catalog
 * documents), collect the results; split a pipeline into the part shards run and the part
 * the merger runs, as MongoDB's Pipeline::splitPipeline does. Pure logic over BSON, no
 * I/O; long loops check the operation's deadline (op_check). Stages and rules:
 * docs/aggregation.md.
 */
#ifndef MS_AGG_H
#define MS_AGG_H

#include <bson/bson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/errors.h"
#include "common/expr.h"

typedef struct agg_pipeline agg_pipeline_t;
typedef struct agg_run agg_run_t;

typedef struct agg_opts {
    bool allow_disk_use;        /* raises the blocking-stage cap (no spilling: see below) */
    size_t blocking_bytes_max;  /* $sort / $group memory before 292; 0 = MS_AGG_BLOCKING_BYTES_MAX */
    size_t result_bytes_max;    /* results held at once; 0 = MS_AGG_RESULT_BYTES_MAX */
    const expr_vars_t *vars;    /* `let` variables, borrowed for the pipeline's life; NULL = none */
} agg_opts_t;

/* Parses pipeline (a BSON array of stage documents) into *out (caller owns; free with
 * agg_free). Borrows pipeline and opts (copies what it keeps, except opts->vars).
 * $count and $sortByCount are rewritten as MongoDB does ($group + $project / $sort).
 * Errors: 40324 unknown stage, 40323 a stage with more than one field, 14 a stage that is
 * not a document, each stage's own shape errors (MongoDB's codes), expression errors. */
int agg_parse(const bson_t *pipeline, const agg_opts_t *opts, agg_pipeline_t **out,
              ms_error_t *err);

/* Number of stages after the rewrites. */
int agg_nstages(const agg_pipeline_t *p);

/* The filter of the first stage when it is a $match (borrowed), else NULL: a caller with an
 * index planner uses it as the scan's filter and starts the run at stage 1. */
const bson_t *agg_leading_match(const agg_pipeline_t *p);
/* The stages of pipeline after its first, renumbered "0", "1", ... into *out (initialised
 * here; caller destroys): what runs after a stage the daemon answers itself ($collStats,
 * $currentOp, $shardedDataDistribution). */
void agg_pipeline_rest(const bson_t *pipeline, bson_t *out);

/* Appends the stages (as they run, rewrites included) from stage `from` on to arr, an
 * array being built, numbering from *idx (advanced). For explain. */
void agg_append_stages(const agg_pipeline_t *p, int from, bson_t *arr, int *idx);

/* MongoDB's split of a sharded pipeline: shards run everything up to the first stage that
 * needs all the data ($group, $sort, $limit, $skip); the merger runs from there on.
 *   $group → shards: a partial $group (same _id; $avg as {$_partialAvg} = {sum, count},
 *            $count as $sum: 1); merger: a final $group on _id "$_id" combining partials
 *            ($sum / $min / $max / $first / $last of the partials, $_mergeAvg, $push →
 *            $_concatArrays, $addToSet → $_unionSets).
 *   $sort  → shards sort (and keep a directly following $limit); the merger merge-sorts
 *            with the same $sort (*merge_sort set to true).
 *   $limit → both; $skip → merger only (a directly following $limit n gives shards
 *            $limit skip + n).
 * No such stage: everything on the shards, the merger part empty. shards_part and
 * merger_part are initialised here as BSON arrays of stage documents (caller destroys;
 * append them with BSON_APPEND_ARRAY). merge_sort may be NULL. */
void agg_split(const agg_pipeline_t *p, bson_t *shards_part, bson_t *merger_part,
               bool *merge_sort);

void agg_free(agg_pipeline_t *p);  /* NULL-safe */

/* Starts a run of p from stage `from` (1 when the caller applied agg_leading_match
 * itself). *out is the caller's (free with agg_run_free); p must outlive it. */
int agg_run_new(const agg_pipeline_t *p, int from, agg_run_t **out, ms_error_t *err);

/* Pushes one source document (borrowed) through the stages. 0 or an error (then the run
 * is finished: free it). After 0, agg_run_done() tells whether more input can change
 * anything (a $limit is reached): the caller may stop its scan. */
int agg_run_push(agg_run_t *r, const bson_t *doc, ms_error_t *err);
bool agg_run_done(const agg_run_t *r);

/* No more input: flushes the blocking stages. Then the results are ready. */
int agg_run_finish(agg_run_t *r, ms_error_t *err);

/* The results, in order (borrowed; valid until agg_run_free or agg_run_take). */
size_t agg_run_count(const agg_run_t *r);
const bson_t *agg_run_result(const agg_run_t *r, size_t i);
/* Takes the results: *docs is a malloc'd array of heap bson_t (each bson_destroy, then
 * free the array). The run keeps none. */
void agg_run_take(agg_run_t *r, bson_t ***docs, size_t *n);

void agg_run_free(agg_run_t *r);  /* NULL-safe */

/* Convenience for callers holding all the input: runs p over docs[0..n) and appends the
 * results to out_arr (an array being built). */
int agg_run_all(const agg_pipeline_t *p, const bson_t *const *docs, size_t n, bson_t *out_arr,
                ms_error_t *err);

#endif
