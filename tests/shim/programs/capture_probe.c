/* A program that captures a CUDA graph while its own process keeps the
 * GPU busy from another thread (so the shim's gate, checkpoints and keeper
 * are all active during the capture), then replays the graph.
 *
 *   capture_probe MODE LAUNCHES KERNEL_NS REPLAYS [CAPTURES]
 *     MODE: global | local | relaxed (the capture's cuStreamCaptureMode)
 *     CAPTURES: capture that many times, 0.5 ms apart, without host pauses
 *       (default 1): many capture starts, each one a chance to land while
 *       the background thread is inside the shim's own driver calls
 *
 *   capture_probe held MS [THINK_US]
 *     one GLOBAL capture held open MS milliseconds, with nothing launched
 *     into it, while the background thread launches: without THINK_US
 *     without synchronising (so its gate asks for tokens with checkpoints
 *     still pending); with it, bursts of 8 kernels, each synchronised and
 *     followed by THINK_US of think time (so its synchronisations end its
 *     slices: gate_burst_end.c). Any potentially unsafe call the shim makes
 *     from the background thread in GLOBAL mode invalidates the capture.
 *     Prints end_rc, held_tokens (tokens the background thread acquired
 *     while the capture was open), background_launches.
 *
 * Prints key=value lines: end_rc (cuStreamEndCapture, the first failure's
 * if any), captures_failed, nodes (of the last capture), and for the
 * replays the shim's gate counters before/after (tokens, used_us). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"
#include "../../../hook/shim_api.h"

static CUcontext ctx;
static CUfunction sleep_kernel;
static volatile int stop_background;
static long background_launches;
static int background_sync_every = 10;   /* launches between the background's synchronisations */
static useconds_t background_think_us;   /* after each synchronisation */

static void check(CUresult rc, const char *what)
{
    if (rc != CUDA_SUCCESS) {
        printf("error=%s:%d\n", what, rc);
        fflush(stdout);
        exit(3);
    }
}

static CUresult launch_sleep(CUstream s, uint64_t ns)
{
    void *params[] = {&ns};
    return cuLaunchKernel(sleep_kernel, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
}

/* The same process keeps its gate busy: launches, checkpoints, slice ends. */
static void *background(void *arg)
{
    (void)arg;
    check(cuCtxSetCurrent(ctx), "bg cuCtxSetCurrent");
    CUstream s;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "bg cuStreamCreate");
    while (!stop_background) {
        for (int i = 0; i < background_sync_every; i++)
            check(launch_sleep(s, 200000), "bg launch");
        background_launches += background_sync_every;
        check(cuStreamSynchronize(s), "bg sync");
        if (background_think_us)
            usleep(background_think_us);
    }
    return NULL;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* capture_probe held MS (see the top). */
static int held_capture(CUstream s, int hold_ms, int (*stats)(gslice_shim_stats *))
{
    gslice_shim_stats before = {0}, after = {0};
    if (stats)
        stats(&before);
    check(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture_v2");
    usleep((useconds_t)hold_ms * 1000);
    CUgraph graph = NULL;
    CUresult end_rc = cuStreamEndCapture(s, &graph);
    if (stats)
        stats(&after);
    stop_background = 1;
    printf("end_rc=%d\nheld_tokens=%llu\nstats_found=%d\n", end_rc,
           (unsigned long long)(after.tokens_acquired - before.tokens_acquired), stats != NULL);
    fflush(stdout);
    return end_rc == CUDA_SUCCESS ? 0 : 1;
}

int main(int argc, char **argv)
{
    bool held = (argc == 3 || argc == 4) && !strcmp(argv[1], "held");
    if (argc != 5 && argc != 6 && !held) {
        fprintf(stderr, "usage: %s global|local|relaxed LAUNCHES KERNEL_NS REPLAYS [CAPTURES] | held MS [THINK_US]\n",
                argv[0]);
        return 2;
    }
    int mode = !strcmp(argv[1], "global") ? CU_STREAM_CAPTURE_MODE_GLOBAL
               : !strcmp(argv[1], "local") ? CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
                                           : CU_STREAM_CAPTURE_MODE_RELAXED;
    int launches = held ? 0 : atoi(argv[2]);
    uint64_t kernel_ns = held ? 0 : strtoull(argv[3], NULL, 10);
    int replays = held ? 0 : atoi(argv[4]);
    int captures = argc == 6 ? atoi(argv[5]) : 1;
    int (*stats)(gslice_shim_stats *) = (int (*)(gslice_shim_stats *))dlsym(RTLD_DEFAULT, "gslice_shim_stats_get");

    check(cuInit(0), "cuInit");
    CUdevice dev;
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    CUmodule mod;
    check(cuModuleLoadData(&mod, "probe"), "cuModuleLoadData");
    check(cuModuleGetFunction(&sleep_kernel, mod, "gslice_sim_sleep"), "cuModuleGetFunction");
    CUstream s;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

    if (held) {
        background_think_us = argc == 4 ? (useconds_t)atoi(argv[3]) : 0;
        /* Never synchronised: the FIFO holds 1024; the gate's bound keeps it far lower. */
        background_sync_every = background_think_us ? 8 : 1000;
    }
    pthread_t bg;
    pthread_create(&bg, NULL, background, NULL);
    usleep(50000);
    if (held) {
        int rc = held_capture(s, atoi(argv[2]), stats);
        pthread_join(bg, NULL);
        printf("background_launches=%ld\n", background_launches);
        return rc;
    }

    /* One capture spans many slices of the background work: a short host
     * pause every 100 launches, as a framework tracing Python would. Many
     * captures: 0.5 ms apart, none inside a capture. */
    double t0 = now_ms();
    CUresult launch_rc = CUDA_SUCCESS, end_rc = CUDA_SUCCESS;
    CUgraph graph = NULL;
    int captures_failed = 0;
    for (int c = 0; c < captures; c++) {
        CUresult launch_c = CUDA_SUCCESS;
        if (graph) {
            check(cuGraphDestroy(graph), "cuGraphDestroy");
            usleep(500);   /* spread the capture starts over the background's slices */
        }
        graph = NULL;
        check(cuStreamBeginCapture_v2(s, mode), "cuStreamBeginCapture_v2");
        for (int i = 0; i < launches && launch_c == CUDA_SUCCESS; i++) {
            launch_c = launch_sleep(s, kernel_ns);
            if (captures == 1 && i % 100 == 99)
                usleep(10000);
        }
        CUresult end_c = cuStreamEndCapture(s, &graph);
        if (launch_c != CUDA_SUCCESS || end_c != CUDA_SUCCESS) {
            if (!captures_failed++) {
                launch_rc = launch_c;
                end_rc = end_c;
            }
        }
    }
    printf("capture_ms=%.1f\nlaunch_rc=%d\nend_rc=%d\ncaptures_failed=%d\n", now_ms() - t0, launch_rc, end_rc,
           captures_failed);
    stop_background = 1;
    pthread_join(bg, NULL);
    printf("background_launches=%ld\n", background_launches);
    if (end_rc != CUDA_SUCCESS || !graph) {
        fflush(stdout);
        return 1;
    }
    size_t nodes = 0;
    check(cuGraphGetNodes(graph, NULL, &nodes), "cuGraphGetNodes");
    printf("nodes=%zu\n", nodes);
    CUgraphExec exec;
    check(cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
    check(cuGraphUpload(exec, s), "cuGraphUpload");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");

    gslice_shim_stats before = {0}, after = {0};
    if (stats)
        stats(&before);
    t0 = now_ms();
    for (int r = 0; r < replays; r++) {
        check(cuGraphLaunch(exec, s), "cuGraphLaunch");
        check(cuStreamSynchronize(s), "cuStreamSynchronize");
    }
    double replay_ms = now_ms() - t0;
    usleep(200000);   /* the idle slice ends and is charged */
    if (stats)
        stats(&after);
    printf("replay_ms=%.1f\n", replay_ms);
    printf("replay_tokens=%llu\n", (unsigned long long)(after.tokens_acquired - before.tokens_acquired));
    printf("replay_used_us=%llu\n", (unsigned long long)(after.used_us - before.used_us));
    printf("replay_slow_entries=%llu\n", (unsigned long long)(after.slow_entries - before.slow_entries));
    printf("stats_found=%d\n", stats != NULL);
    printf("done=1\n");
    fflush(stdout);
    return 0;
}
