/* latency_series: what the C benchmark programs in hook/bench/ share: a
 * microsecond clock, and one series of round trips printed as a JSON object
 * (the fields benchmarks/ reads: n, p50_us, p99_us, mean_us, max_us). */
#ifndef GSLICE_BENCH_LATENCY_SERIES_H
#define GSLICE_BENCH_LATENCY_SERIES_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static inline int latency_by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts us[0..n) (n >= 1) and prints its summary object, no newline. */
static inline void print_latency_series(double *us, int n)
{
    qsort(us, (size_t)n, sizeof us[0], latency_by_value);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += us[i];
    printf("{\"n\": %d, \"p50_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f, \"max_us\": %.1f}", n,
           us[(n - 1) / 2], us[(int)(0.99 * (n - 1) + 0.5)], sum / n, us[n - 1]);
}

#endif
