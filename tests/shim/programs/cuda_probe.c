/* cuda_probe: a small CUDA driver-API program for the shim's tests.
 *
 * Linked with -lcuda (the simulated libcuda.so.1). The "runtime" route
 * reaches the driver the way libcudart does: dlopen("libcuda.so.1"),
 * dlsym(handle, "cuGetProcAddress_v2"), then look-ups by base name +
 * version + flags. Every mode prints key=value lines on stdout.
 *
 *   cuda_probe launch ROUTE N KERNEL_NS        N sleep kernels, no sync, then one sync
 *   cuda_probe loop ROUTE SECONDS KERNEL_NS SYNC_EVERY   saturating loop (0: never sync)
 *   cuda_probe bursts ROUTE SECONDS KERNEL_NS BURST THINK_MS  think, BURST kernels, sync, again
 *   cuda_probe resume ROUTE KERNEL_NS          one kernel, sync, wait until the gate keeps the token
 *                                              as a lease, print leased=1, read a line from stdin,
 *                                              then time the launch that resumes the lease
 *   cuda_probe stalls ROUTE SECONDS KERNEL_NS EVERY STALL_US  kernels back to back, never synchronised,
 *                                              the launching thread stalling STALL_US after every
 *                                              EVERY (a collection, a data loader); prints the GPU's
 *                                              fraction busy with them (kernel time over the wall
 *                                              time from the first launch to the final sync's end)
 *   cuda_probe fills ROUTE SECONDS KERNEL_NS FILL_BYTES [SMALL_FILL_BYTES]  a fill of FILL_BYTES
 *                                              (cuMemsetD32Async), then a kernel (then a fill of
 *                                              SMALL_FILL_BYTES), sync, again: kinds of work of very
 *                                              different lengths, not all kernels
 *   cuda_probe synced ROUTE SECONDS KERNEL_NS PROBE_EVERY  each kernel synchronised; before every
 *                                              PROBE_EVERY-th, a 0 ns kernel of the same function
 *                                              (the real-GPU check's probe: scripts/gpu-check)
 *   cuda_probe alloc ROUTE CHUNK MAX [wait [gated]]  allocate CHUNK bytes until refused or MAX
 *                                              (wait: hold them until stdin closes; gated: print
 *                                              context-ready=1 and allocate after a line on stdin)
 *   cuda_probe hold ROUTE BYTES                allocate, launch, print ready, sleep forever
 *   cuda_probe fork N KERNEL_NS                child launches N kernels after fork
 *   cuda_probe routes                          which pointers the runtime route hands out
 * ROUTE is "driver" (exported names) or "runtime" (cuGetProcAddress_v2 route).
 * launch, loop, fills and bursts end with the shim's gate counters (shim_revokes=...) when
 * the shim is preloaded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"
#include "../../../hook/shim_api.h"

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*sync_fn)(void);
typedef CUresult (*proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static launch_fn launch;
static alloc_fn mem_alloc;
static free_fn mem_free;
static info_fn mem_info;
static sync_fn ctx_sync;
static CUfunction sleep_kernel;

static void check(CUresult rc, const char *what)
{
    if (rc != CUDA_SUCCESS) {
        printf("error=%s:%d\n", what, rc);
        fflush(stdout);
        exit(3);
    }
}

static void *lookup(proc_fn proc, const char *name, int version, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult rc = proc(name, &fn, version, flags, &status);
    if (rc != CUDA_SUCCESS || !fn) {
        printf("error=lookup:%s:%d:%d\n", name, rc, status);
        exit(3);
    }
    return fn;
}

static void setup(const char *route, int ptsz)
{
    check(cuInit(0), "cuInit");
    CUdevice dev;
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    CUcontext ctx;
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    CUmodule mod;
    check(cuModuleLoadData(&mod, "probe"), "cuModuleLoadData");
    check(cuModuleGetFunction(&sleep_kernel, mod, "gslice_sim_sleep"), "cuModuleGetFunction");
    if (!strcmp(route, "runtime")) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!h) {
            printf("error=dlopen:%s\n", dlerror());
            exit(3);
        }
        proc_fn proc = (proc_fn)dlsym(h, "cuGetProcAddress_v2");
        if (!proc) {
            printf("error=dlsym:cuGetProcAddress_v2\n");
            exit(3);
        }
        launch = (launch_fn)lookup(proc, "cuLaunchKernel", ptsz ? 7000 : 4000,
                                   ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0);
        mem_alloc = (alloc_fn)lookup(proc, "cuMemAlloc", 3020, 0);
        mem_free = (free_fn)lookup(proc, "cuMemFree", 3020, 0);
        mem_info = (info_fn)lookup(proc, "cuMemGetInfo", 3020, 0);
        ctx_sync = (sync_fn)lookup(proc, "cuCtxSynchronize", 2000, 0);
    } else {
        launch = ptsz ? cuLaunchKernel_ptsz : cuLaunchKernel;
        mem_alloc = cuMemAlloc_v2;
        mem_free = cuMemFree_v2;
        mem_info = cuMemGetInfo_v2;
        ctx_sync = cuCtxSynchronize;
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static CUresult launch_sleep(uint64_t ns)
{
    void *params[] = {&ns};
    return launch(sleep_kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
}

/* The preloaded shim's gate counters (nothing without the shim). */
static void print_shim_stats(void)
{
    int (*stats)(gslice_shim_stats *) = (int (*)(gslice_shim_stats *))dlsym(RTLD_DEFAULT, "gslice_shim_stats_get");
    gslice_shim_stats st;
    if (!stats || stats(&st) != 0)
        return;
    printf("shim_revokes=%llu\nshim_doorbell_pauses=%llu\nshim_doorbell_unanswered=%llu\nshim_doorbell_rings=%llu\n",
           (unsigned long long)st.revokes, (unsigned long long)st.doorbell_pauses,
           (unsigned long long)st.doorbell_unanswered, (unsigned long long)st.doorbell_rings);
    printf("shim_anticipation_pauses=%llu\nshim_anticipation_lapses=%llu\n",
           (unsigned long long)st.anticipation_pauses, (unsigned long long)st.anticipation_lapses);
    printf("shim_tokens_acquired=%llu\nshim_lease_resumes=%llu\nshim_leases_at_start=%llu\n",
           (unsigned long long)st.tokens_acquired, (unsigned long long)st.lease_resumes,
           (unsigned long long)st.leases_at_start);
    printf("shim_head_starts=%llu\nshim_head_start_refusals=%llu\n", (unsigned long long)st.head_starts,
           (unsigned long long)st.head_start_refusals);
    printf("shim_paced_launches=%llu\n", (unsigned long long)st.paced_launches);
    printf("shim_handbacks_sent=%llu\nshim_handback_starts=%llu\nshim_handback_lapses=%llu\n",
           (unsigned long long)st.handbacks_sent, (unsigned long long)st.handback_starts,
           (unsigned long long)st.handback_lapses);
    printf("shim_burst_ends=%llu\n", (unsigned long long)st.burst_ends);
    printf("shim_longest_work_us=%llu\n", (unsigned long long)st.longest_work_us);
    printf("shim_submit_lag_margin_us=%llu\n", (unsigned long long)st.submit_lag_margin_us);
}

static int run_launch(int n, uint64_t ns)
{
    /* PROBE_ATTACH_FIRST=1: a memory query first, which waits for the
     * shim's attach, so queue_seconds times the launches' gate alone. */
    const char *attach_first = getenv("PROBE_ATTACH_FIRST");
    if (attach_first && !strcmp(attach_first, "1")) {
        size_t free_bytes = 0, total_bytes = 0;
        check(mem_info(&free_bytes, &total_bytes), "cuMemGetInfo");
    }
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        check(launch_sleep(ns), "launch");
    double queued = now_s() - t0;
    check(ctx_sync(), "cuCtxSynchronize");
    printf("launched=%d\nqueue_seconds=%.6f\nseconds=%.6f\n", n, queued, now_s() - t0);
    print_shim_stats();
    return 0;
}

static int run_loop(double seconds, uint64_t ns, int sync_every)
{
    double end = now_s() + seconds;
    long n = 0;
    printf("ready=1\n");
    fflush(stdout);
    double next_tick = now_s() + 1.0;
    int tick = 0;
    while (now_s() < end) {
        check(launch_sleep(ns), "launch");
        n++;
        if (n % 16 == 0 && now_s() >= next_tick) {
            /* Cumulative launches each second, for steady-state shares. */
            printf("tick%d=%ld\n", ++tick, n);
            next_tick += 1.0;
        }
        if (sync_every > 0 && n % sync_every == 0)
            check(ctx_sync(), "cuCtxSynchronize");
    }
    check(ctx_sync(), "cuCtxSynchronize");
    printf("launched=%ld\n", n);
    print_shim_stats();
    return 0;
}

static int run_stalls(double seconds, uint64_t ns, int every, long stall_us)
{
    struct timespec stall = {stall_us / 1000000, (stall_us % 1000000) * 1000};
    printf("ready=1\n");
    fflush(stdout);
    double start = now_s(), end = start + seconds;
    long n = 0;
    while (now_s() < end) {
        check(launch_sleep(ns), "launch");
        if (++n % every == 0)
            nanosleep(&stall, NULL);
    }
    check(ctx_sync(), "cuCtxSynchronize");
    printf("launched=%ld\ngpu_fraction=%.4f\n", n, (double)n * (double)ns / 1e9 / (now_s() - start));
    print_shim_stats();
    return 0;
}

static int run_fills(double seconds, uint64_t ns, size_t fill_bytes, size_t small_fill_bytes)
{
    CUdeviceptr fill;
    check(mem_alloc(&fill, fill_bytes), "cuMemAlloc");
    double end = now_s() + seconds;
    long n = 0;
    printf("ready=1\n");
    fflush(stdout);
    while (now_s() < end) {
        check(cuMemsetD32Async(fill, 0, fill_bytes / 4, NULL), "cuMemsetD32Async");
        check(launch_sleep(ns), "launch");
        if (small_fill_bytes)
            check(cuMemsetD32Async(fill, 0, small_fill_bytes / 4, NULL), "cuMemsetD32Async (small)");
        n++;
        check(ctx_sync(), "cuCtxSynchronize");
    }
    check(mem_free(fill), "cuMemFree");
    printf("launched=%ld\n", n);
    print_shim_stats();
    return 0;
}

/* A training step's shape with long kernels: launch, wait for it, again. */
static int run_synced(double seconds, uint64_t ns, int probe_every)
{
    double end = now_s() + seconds;
    long n = 0;
    printf("ready=1\n");
    fflush(stdout);
    while (now_s() < end) {
        if (probe_every > 0 && n % probe_every == 0)
            check(launch_sleep(0), "launch");
        check(launch_sleep(ns), "launch");
        n++;
        check(ctx_sync(), "cuCtxSynchronize");
    }
    printf("launched=%ld\n", n);
    print_shim_stats();
    return 0;
}

/* Inference-like: periodic bursts, so tokend sees arrivals at regular
 * periods; like a server, it thinks (waits for a request) before the first. */
static int run_bursts(double seconds, uint64_t ns, int burst, double think_ms)
{
    double end = now_s() + seconds;
    long bursts = 0;
    uint64_t think_ns = (uint64_t)(think_ms * 1e6);
    struct timespec think = {(time_t)(think_ns / 1000000000ull), (long)(think_ns % 1000000000ull)};
    while (now_s() < end) {
        nanosleep(&think, NULL);
        for (int i = 0; i < burst; i++)
            check(launch_sleep(ns), "launch");
        check(ctx_sync(), "cuCtxSynchronize");
        bursts++;
    }
    printf("bursts=%ld\n", bursts);
    print_shim_stats();
    return 0;
}

/* A lease resumed on cue: the test rings between leased=1 and its line on
 * stdin, and reads how long the resuming launch call took. */
static int run_resume(uint64_t ns)
{
    int (*stats)(gslice_shim_stats *) = (int (*)(gslice_shim_stats *))dlsym(RTLD_DEFAULT, "gslice_shim_stats_get");
    check(launch_sleep(ns), "launch");
    check(ctx_sync(), "cuCtxSynchronize");
    gslice_shim_stats st;
    double deadline = now_s() + 10.0;
    while (!stats || stats(&st) != 0 || st.gate_state != GSLICE_GATE_LEASED) {
        if (!stats || now_s() > deadline) {
            printf("error=no lease within 10 s\n");
            return 3;
        }
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    printf("leased=1\n");
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 3;
    double t0 = now_s();
    check(launch_sleep(ns), "launch");
    printf("resume_launch_us=%.0f\n", (now_s() - t0) * 1e6);
    check(ctx_sync(), "cuCtxSynchronize");
    print_shim_stats();
    return 0;
}

static int run_alloc(size_t chunk, int max)
{
    int ok = 0;
    CUresult last = CUDA_SUCCESS;
    CUdeviceptr p;
    for (int i = 0; i < max; i++) {
        last = mem_alloc(&p, chunk);
        if (last != CUDA_SUCCESS)
            break;
        ok++;
    }
    size_t free_bytes = 0, total_bytes = 0;
    check(mem_info(&free_bytes, &total_bytes), "cuMemGetInfo");
    printf("allocated=%d\nbytes=%llu\nlast_result=%d\nfree=%zu\ntotal=%zu\n", ok,
           (unsigned long long)ok * chunk, last, free_bytes, total_bytes);
    (void)mem_free;
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: see the comment at the top of cuda_probe.c\n");
        return 2;
    }
    const char *mode = argv[1];
    if (!strcmp(mode, "launch") && argc >= 5) {
        int ptsz = argc >= 6 && !strcmp(argv[5], "ptsz");
        setup(argv[2], ptsz);
        return run_launch(atoi(argv[3]), strtoull(argv[4], NULL, 10));
    }
    if (!strcmp(mode, "loop") && argc >= 6) {
        setup(argv[2], 0);
        return run_loop(atof(argv[3]), strtoull(argv[4], NULL, 10), atoi(argv[5]));
    }
    if (!strcmp(mode, "stalls") && argc >= 7) {
        setup(argv[2], 0);
        return run_stalls(atof(argv[3]), strtoull(argv[4], NULL, 10), atoi(argv[5]), atol(argv[6]));
    }
    if (!strcmp(mode, "fills") && argc >= 6) {
        setup(argv[2], 0);
        return run_fills(atof(argv[3]), strtoull(argv[4], NULL, 10), (size_t)strtoull(argv[5], NULL, 10),
                         argc >= 7 ? (size_t)strtoull(argv[6], NULL, 10) : 0);
    }
    if (!strcmp(mode, "synced") && argc >= 6) {
        setup(argv[2], 0);
        return run_synced(atof(argv[3]), strtoull(argv[4], NULL, 10), atoi(argv[5]));
    }
    if (!strcmp(mode, "bursts") && argc >= 7) {
        setup(argv[2], 0);
        return run_bursts(atof(argv[3]), strtoull(argv[4], NULL, 10), atoi(argv[5]), atof(argv[6]));
    }
    if (!strcmp(mode, "resume") && argc >= 4) {
        setup(argv[2], 0);
        return run_resume(strtoull(argv[3], NULL, 10));
    }
    if (!strcmp(mode, "alloc") && argc >= 5) {
        setup(argv[2], 0);
        if (argc >= 7 && !strcmp(argv[6], "gated")) {
            /* Context made: say so, and allocate only when the test says go
             * (a line on stdin), so several processes' contexts all exist
             * before the first allocation. */
            printf("context-ready=1\n");
            fflush(stdout);
            char line[16];
            if (!fgets(line, sizeof line, stdin))
                return 3;
        }
        int rc = run_alloc(strtoull(argv[3], NULL, 10), atoi(argv[4]));
        if (argc >= 6 && !strcmp(argv[5], "wait")) {
            /* Hold the memory until the test closes our stdin. */
            char buf[64];
            while (read(0, buf, sizeof buf) > 0) {
            }
        }
        return rc;
    }
    if (!strcmp(mode, "hold") && argc >= 4) {
        setup(argv[2], 0);
        CUdeviceptr p;
        check(mem_alloc(&p, strtoull(argv[3], NULL, 10)), "cuMemAlloc");
        check(launch_sleep(1000000), "launch");
        printf("ready=1\n");
        for (;;) {
            /* Keep launching so the token is held most of the time. */
            launch_sleep(2000000);
        }
    }
    if (!strcmp(mode, "fork") && argc >= 4) {
        setup("driver", 0);
        check(launch_sleep(1000), "launch");
        check(ctx_sync(), "sync");
        pid_t pid = fork();
        if (pid == 0) {
            /* CUDA does not survive fork: the child starts its own context. */
            setup("driver", 0);
            return run_launch(atoi(argv[2]), strtoull(argv[3], NULL, 10));
        }
        int status = 0;
        waitpid(pid, &status, 0);
        printf("child_status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        return 0;
    }
    if (!strcmp(mode, "routes")) {
        setup("driver", 0);
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        proc_fn proc = (proc_fn)dlsym(h, "cuGetProcAddress_v2");
        void *self = dlopen(NULL, RTLD_NOW);
        printf("dlsym_proc_is_export=%d\n", proc == (proc_fn)dlsym(self, "cuGetProcAddress_v2"));
        void *legacy = lookup(proc, "cuLaunchKernel", 4000, 0);
        void *ptsz = lookup(proc, "cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
        void *gpa = lookup(proc, "cuGetProcAddress", 12000, 0);
        printf("legacy_is_export=%d\n", legacy == dlsym(self, "cuLaunchKernel"));
        printf("ptsz_is_export=%d\n", ptsz == dlsym(self, "cuLaunchKernel_ptsz"));
        printf("ptsz_differs=%d\n", ptsz != legacy);
        printf("proc_v2_is_export=%d\n", gpa == dlsym(self, "cuGetProcAddress_v2"));
        Dl_info info;
        dladdr(ptsz, &info);
        printf("ptsz_object=%s\n", info.dli_fname ? info.dli_fname : "?");
        dladdr(dlsym(h, "cuMemAlloc_v2"), &info);
        printf("handle_alloc_object=%s\n", info.dli_fname ? info.dli_fname : "?");
        return 0;
    }
    fprintf(stderr, "unknown mode or missing arguments: %s\n", mode);
    return 2;
}
