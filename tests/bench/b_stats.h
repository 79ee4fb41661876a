/*
 * b_stats.h — the timing and order statistics the C benches share: a monotonic clock in
 * milliseconds and a percentile of a sample (sorted in place).
 */
#ifndef MS_B_STATS_H
#define MS_B_STATS_H

#include <stdlib.h>
#include <time.h>

static inline double b_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline int b_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The p-th quantile (0..1) of v[0, n), nearest rank; sorts v. */
static inline double b_pct(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, b_cmp_double);
    return v[(int)(p * (n - 1) + 0.5)];
}

#endif
