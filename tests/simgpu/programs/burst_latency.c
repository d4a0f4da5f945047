/* Burst latency on the simulated GPU, from C so that a burst's launches
 * reach the driver microseconds apart (as PyTorch's do on a real GPU), not
 * at the pace of a loaded machine's Python.
 *
 *   burst_latency bursts SECONDS KERNEL_NS BURST THINK_MS [JITTER_MS]
 *       think, BURST sleep kernels on one stream, synchronise the context,
 *       again; prints one JSON line: pid, burst starts (CLOCK_MONOTONIC s)
 *       and latencies (ms, first launch to the end of the synchronise).
 *       With JITTER_MS each think is drawn from THINK_MS +- JITTER_MS, so
 *       that bursts do not lock onto the phase of a neighbour's slices
 *   burst_latency queue N KERNEL_NS
 *       N kernels queued at once on one stream (no sync between them); prints
 *       ready=1 once they are queued, then synchronises
 *   burst_latency loop SECONDS KERNEL_NS SYNC_EVERY [FILL_BYTES]
 *       a neighbour: kernels back to back, synchronising every SYNC_EVERY
 *       (0: never; the stream's queue fills); prints ready=1 once running,
 *       kernels=N at the end. With FILL_BYTES each kernel follows a
 *       cuMemsetD32Async of that many bytes on its stream: a PyTorch matmul
 *       on an H100/H200 is a short fill and the GEMM (two launches of very
 *       different lengths per unit of work)
 *
 * Runs under the shim too (LD_PRELOAD): the launches go through the
 * exported cuLaunchKernel. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "gslice_cuda_driver_api.h"

static CUfunction sleep_kernel;
static CUstream stream;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void setup(void) {
    CUmodule mod;
    check_primary_context(NULL);
    CHECK(cuModuleLoadData(&mod, "simulated"));
    CHECK(cuModuleGetFunction(&sleep_kernel, mod, "gslice_sim_sleep"));
    CHECK(cuStreamCreate(&stream, 0));
}

static void launch_sleep(uint64_t ns) {
    void *params[] = {&ns};
    CHECK(cuLaunchKernel(sleep_kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, NULL));
}

static int bursts(double seconds, uint64_t ns, int burst, double think_ms, double jitter_ms) {
    size_t cap = 1 << 16, n = 0;
    double *starts = malloc(cap * sizeof *starts), *latencies = malloc(cap * sizeof *latencies);
    unsigned seed = (unsigned)getpid();
    double end = now_s() + seconds;
    while (now_s() < end && n < cap) {
        double ms = think_ms + jitter_ms * (2.0 * rand_r(&seed) / RAND_MAX - 1.0);
        uint64_t think_ns = ms > 0 ? (uint64_t)(ms * 1e6) : 0;
        struct timespec think = {(time_t)(think_ns / 1000000000ull), (long)(think_ns % 1000000000ull)};
        nanosleep(&think, NULL);
        double t0 = now_s();
        for (int i = 0; i < burst; i++) launch_sleep(ns);
        CHECK(cuCtxSynchronize());
        starts[n] = t0;
        latencies[n++] = (now_s() - t0) * 1e3;
    }
    printf("{\"pid\": %d, \"bursts\": %zu, \"burst_starts\": [", (int)getpid(), n);
    for (size_t i = 0; i < n; i++) printf("%s%.6f", i ? ", " : "", starts[i]);
    printf("], \"latencies_ms\": [");
    for (size_t i = 0; i < n; i++) printf("%s%.4f", i ? ", " : "", latencies[i]);
    printf("]}\n");
    return 0;
}

static int loop(double seconds, uint64_t ns, int sync_every, size_t fill_bytes) {
    CUdeviceptr fill = 0;
    if (fill_bytes) CHECK(cuMemAlloc_v2(&fill, fill_bytes));
    double end = now_s() + seconds;
    long n = 0;
    printf("ready=1\n");
    fflush(stdout);
    while (now_s() < end) {
        if (fill_bytes) CHECK(cuMemsetD32Async(fill, 0, fill_bytes / 4, stream));
        launch_sleep(ns);
        n++;
        if (sync_every > 0 && n % sync_every == 0) CHECK(cuCtxSynchronize());
    }
    CHECK(cuCtxSynchronize());
    if (fill) CHECK(cuMemFree_v2(fill));
    printf("kernels=%ld\n", n);
    return 0;
}

static int queue(int n, uint64_t ns) {
    for (int i = 0; i < n; i++) launch_sleep(ns);
    printf("ready=1\n");
    fflush(stdout);
    CHECK(cuCtxSynchronize());
    printf("done=1\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if ((argc == 6 || argc == 7) && !strcmp(argv[1], "bursts")) {
        setup();
        return bursts(atof(argv[2]), strtoull(argv[3], NULL, 10), atoi(argv[4]), atof(argv[5]),
                      argc == 7 ? atof(argv[6]) : 0.0);
    }
    if (argc == 4 && !strcmp(argv[1], "queue")) {
        setup();
        return queue(atoi(argv[2]), strtoull(argv[3], NULL, 10));
    }
    if ((argc == 5 || argc == 6) && !strcmp(argv[1], "loop")) {
        setup();
        return loop(atof(argv[2]), strtoull(argv[3], NULL, 10), atoi(argv[4]),
                    argc == 6 ? (size_t)strtoull(argv[5], NULL, 10) : 0);
    }
    fprintf(stderr, "usage: %s bursts SECONDS KERNEL_NS BURST THINK_MS [JITTER_MS] | queue N KERNEL_NS | "
            "loop SECONDS KERNEL_NS SYNC_EVERY [FILL_BYTES]\n",
            argv[0]);
    return 2;
}
