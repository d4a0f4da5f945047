/* Pool charges under the shim, with calls held inside the driver
 * (pausing_driver.c, the shim's GSLICE_REAL_LIBCUDA) to force the
 * interleavings a race needs:
 *
 *   pool_probe alloc_race | graph_race | reconcile_wait | pitch_top_up | pool_destroy | many_pools |
 *              stream_free
 *
 * key=value lines (held: what this process holds at tokend, the shim's own
 * ledger counter); "error=..." and exit 3 on an unexpected driver result.
 * reconcile_wait and pitch_top_up print "waiting=1" and read a line from
 * stdin before going on (the test stops tokend meanwhile). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"
#include "../../../hook/shim_api.h"

#define MiB (1ull << 20)

/* Not in gslice_cuda_driver_api.h. */
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult cuMemPoolDestroy(CUmemoryPool pool);
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);

typedef struct pausing_driver_hold {
    sem_t entered;
    sem_t release;
} pausing_driver_hold;

static int (*stats_fn)(gslice_shim_stats *);
static void (*hold_next)(pausing_driver_hold *);
static CUdevice dev;
static CUcontext primary;

static void check(CUresult rc, const char *what)
{
    if (rc != CUDA_SUCCESS) {
        printf("error=%s:%d\n", what, rc);
        fflush(stdout);
        exit(3);
    }
}

static unsigned long long held_now(void)
{
    gslice_shim_stats s = {0};
    if (!stats_fn || stats_fn(&s) != 0)
        return ~0ull;
    return (unsigned long long)s.memory_held;
}

static void held(const char *step)
{
    printf("%s=%llu\n", step, held_now());
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void wait_for_go(void)
{
    char line[16];
    printf("waiting=1\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        exit(4);
}

static unsigned long long pool_attr(CUmemoryPool pool, CUmemPool_attribute attr)
{
    cuuint64_t v = 0;
    check(cuMemPoolGetAttribute(pool, attr, &v), "cuMemPoolGetAttribute");
    return (unsigned long long)v;
}

static unsigned long long graph_reserved(void)
{
    cuuint64_t v = 0;
    check(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v),
          "cuDeviceGetGraphMemAttribute");
    return (unsigned long long)v;
}

/* A memory query: every pool's charge follows its footprint. */
static void query(void)
{
    size_t free_b, total;
    check(cuMemGetInfo_v2(&free_b, &total), "cuMemGetInfo_v2");
}

static void keep_everything(CUmemoryPool pool)
{
    cuuint64_t threshold = ~0ull;
    check(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), "cuMemPoolSetAttribute");
}

static CUmemoryPool new_pool(void)
{
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemoryPool pool;
    check(cuMemPoolCreate(&pool, &props), "cuMemPoolCreate");
    keep_everything(pool);
    return pool;
}

/* The call a thread makes while held in the driver. */
typedef struct held_call {
    pausing_driver_hold hold;
    int kind;                  /* 0: cuMemAllocAsync, 1: cuGraphLaunch, 2: cuMemAllocPitch_v2 */
    size_t bytes;
    CUstream stream;
    CUgraphExec exec;
    CUdeviceptr ptr;
    size_t pitch;
    CUresult rc;
    double returned_s;
    pthread_t thread;
} held_call;

static void *held_call_run(void *arg)
{
    held_call *c = arg;
    check(cuCtxSetCurrent(primary), "cuCtxSetCurrent (held call's thread)");
    if (c->kind == 0)
        c->rc = cuMemAllocAsync(&c->ptr, c->bytes, c->stream);
    else if (c->kind == 1)
        c->rc = cuGraphLaunch(c->exec, c->stream);
    else
        c->rc = cuMemAllocPitch_v2(&c->ptr, &c->pitch, c->bytes, 1024, 4);
    c->returned_s = now_s();
    return NULL;
}

/* Start the call on its own thread; returns once it is held in the driver
 * (the shim charged it and called the driver). */
static void start_held(held_call *c)
{
    sem_init(&c->hold.entered, 0, 0);
    sem_init(&c->hold.release, 0, 0);
    hold_next(&c->hold);
    pthread_create(&c->thread, NULL, held_call_run, c);
    while (sem_wait(&c->hold.entered) != 0) {
    }
}

static void release_held(held_call *c)
{
    sem_post(&c->hold.release);
}

static void join_held(held_call *c)
{
    pthread_join(c->thread, NULL);
}

/* Two threads allocate 64 MiB each from one pool that has no idle memory
 * (quota 100 MiB): the first is held in the driver after its growth was
 * charged, while the other thread reconciles (a memory query) and then
 * allocates; the first one's growth must stay charged, and the second be
 * refused. */
static int run_alloc_race(void)
{
    CUmemoryPool pool;
    check(cuDeviceGetDefaultMemPool(&pool, dev), "cuDeviceGetDefaultMemPool");
    keep_everything(pool);
    held_call a = {.kind = 0, .bytes = 64 * MiB};
    start_held(&a);
    held("held_while_first_in_driver");
    query();   /* a reconciliation on this thread meanwhile (and releases flushed to tokend) */
    held("held_after_query");
    CUdeviceptr b_ptr;
    CUresult b_rc = cuMemAllocAsync(&b_ptr, 64 * MiB, NULL);
    release_held(&a);
    join_held(&a);
    query();
    printf("first_rc=%d\nsecond_rc=%d\n", a.rc, b_rc);
    printf("pool_reserved=%llu\n", pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    held("held");
    return 0;
}

/* A graph captured from a cuMemAllocAsync of bytes, not freed in the graph
 * (its memory stays in use after the launch). */
static CUgraphExec graph_with_memory(CUstream s, size_t bytes)
{
    CUdeviceptr p;
    CUgraph g;
    CUgraphExec e;
    check(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture_v2");
    check(cuMemAllocAsync(&p, bytes, s), "cuMemAllocAsync (captured)");
    check(cuStreamEndCapture(s, &g), "cuStreamEndCapture");
    check(cuGraphInstantiateWithFlags(&e, g, 0), "cuGraphInstantiateWithFlags");
    return e;
}

/* The same with graph launches: two graphs taking 64 MiB each, launched
 * at once from two threads (quota 100 MiB). */
static int run_graph_race(void)
{
    CUstream s1, s2;
    check(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    CUgraphExec e1 = graph_with_memory(s1, 64 * MiB), e2 = graph_with_memory(s2, 64 * MiB);
    held_call a = {.kind = 1, .stream = s1, .exec = e1};
    start_held(&a);
    held("held_while_first_in_driver");
    query();   /* a reconciliation on this thread meanwhile (and releases flushed to tokend) */
    held("held_after_query");
    CUresult b_rc = cuGraphLaunch(e2, s2);
    release_held(&a);
    join_held(&a);
    check(cuStreamSynchronize(s1), "cuStreamSynchronize");
    check(cuStreamSynchronize(s2), "cuStreamSynchronize");
    query();
    printf("first_rc=%d\nsecond_rc=%d\n", a.rc, b_rc);
    printf("graph_reserved=%llu\n", graph_reserved());
    held("held");
    return 0;
}

/* Growth the shim sees only after the fact while tokend is away: an
 * allocation that counted on idle pool memory, which a synchronisation
 * released before the allocation reached the driver. Its reconciliation
 * cannot charge the growth; neither it nor a free on another thread may
 * wait for tokend over it. */
static int run_reconcile_wait(void)
{
    CUmemoryPool pool;
    CUstream s;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuDeviceGetDefaultMemPool(&pool, dev), "cuDeviceGetDefaultMemPool");
    keep_everything(pool);
    CUdeviceptr kept, idle;
    check(cuMemAllocAsync(&kept, MiB, s), "cuMemAllocAsync");
    check(cuMemAllocAsync(&idle, 64 * MiB, s), "cuMemAllocAsync");
    check(cuMemFreeAsync(idle, s), "cuMemFreeAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");   /* 64 MiB idle in the pool */
    cuuint64_t threshold = 0;
    check(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), "cuMemPoolSetAttribute");
    held_call a = {.kind = 0, .bytes = 64 * MiB, .stream = s};
    start_held(&a);                                          /* no growth charged: the idle part covers it */
    check(cuCtxSynchronize(), "cuCtxSynchronize");           /* the pool releases its idle part */
    query();                                                 /* ... and the charge follows */
    held("held_before_growth");
    wait_for_go();                                           /* tokend is stopped meanwhile */
    double released = now_s();
    release_held(&a);
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    double free_start = now_s();
    check(cuMemFreeAsync(kept, s), "cuMemFreeAsync (another thread's pool call)");
    double free_end = now_s();
    join_held(&a);
    printf("alloc_rc=%d\n", a.rc);
    printf("alloc_after_release_s=%.3f\n", a.returned_s - released);
    printf("free_s=%.3f\n", free_end - free_start);
    return 0;
}

/* cuMemAllocPitch whose pitch (1024 bytes) is above the 512-byte rows
 * reserved first, while tokend is lost under the operator's policy open:
 * the top-up is unmetered, and the free gives back only what was
 * reserved. */
static int run_pitch_top_up(void)
{
    CUdeviceptr base;
    check(cuMemAlloc_v2(&base, 4 * MiB), "cuMemAlloc_v2");
    held("held_start");
    held_call a = {.kind = 2, .bytes = 300};                 /* 300-byte rows x 1024: 512 KiB reserved */
    start_held(&a);
    held("held_with_worst_case");
    wait_for_go();                                           /* tokend is stopped meanwhile */
    release_held(&a);
    join_held(&a);
    check(a.rc, "cuMemAllocPitch_v2");
    printf("pitch=%zu\n", a.pitch);
    held("held_after_alloc");
    check(cuMemFree_v2(a.ptr), "cuMemFree_v2");
    held("held_after_free");
    return 0;
}

/* A pool made by the program: destroyed with nothing allocated from it,
 * its charge goes; destroyed with a block outstanding, it stays (the
 * driver frees that memory only after the block, which the shim cannot
 * see). */
static int run_pool_destroy(void)
{
    CUstream s;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    CUmemoryPool pool = new_pool();
    CUdeviceptr p;
    check(cuMemAllocFromPoolAsync(&p, 64 * MiB, pool, s), "cuMemAllocFromPoolAsync");
    check(cuMemFreeAsync(p, s), "cuMemFreeAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    held("held_kept_by_pool");
    check(cuMemPoolDestroy(pool), "cuMemPoolDestroy");
    held("held_after_destroy");
    pool = new_pool();
    check(cuMemAllocFromPoolAsync(&p, 32 * MiB, pool, s), "cuMemAllocFromPoolAsync");
    check(cuMemPoolDestroy(pool), "cuMemPoolDestroy (a block outstanding)");
    held("held_after_destroy_outstanding");
    check(cuMemFreeAsync(p, s), "cuMemFreeAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    query();
    held("held_after_outstanding_freed");
    return 0;
}

/* The footprint of pools[0..n) (RESERVED_MEM_CURRENT). */
static unsigned long long pools_reserved(const CUmemoryPool *pools, int n)
{
    unsigned long long sum = 0;
    for (int i = 0; i < n; i++)
        sum += pool_attr(pools[i], CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    return sum;
}

/* 40 pools, more than the 32 the shim once followed (the others were
 * charged per allocation and given back at cuMemFreeAsync): each is
 * charged by its footprint, so a block freed into the last one, which
 * keeps it, stays charged until the pool trims. */
static int run_many_pools(void)
{
    enum { POOLS = 40 };
    CUstream s;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    CUmemoryPool pools[POOLS];
    CUdeviceptr blocks[POOLS], p;
    for (int i = 0; i < POOLS; i++) {
        pools[i] = new_pool();
        check(cuMemAllocFromPoolAsync(&blocks[i], MiB, pools[i], s), "cuMemAllocFromPoolAsync");
    }
#define STEP(name)                                                                     \
    do {                                                                               \
        query();                                                                       \
        held("held_" name);                                                            \
        printf("footprint_" name "=%llu\n", pools_reserved(pools, POOLS));            \
    } while (0)
    STEP("all");
    CUmemoryPool last = pools[POOLS - 1];
    check(cuMemFreeAsync(blocks[POOLS - 1], s), "cuMemFreeAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    STEP("after_free");
    check(cuMemAllocFromPoolAsync(&p, 8 * MiB, last, s), "cuMemAllocFromPoolAsync");
    STEP("after_growth");
    check(cuMemFreeAsync(p, s), "cuMemFreeAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    STEP("after_growth_free");
    check(cuMemPoolTrimTo(last, 0), "cuMemPoolTrimTo");
    STEP("after_trim");
#undef STEP
    for (int i = 0; i < POOLS - 1; i++)
        check(cuMemFreeAsync(blocks[i], s), "cuMemFreeAsync");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    for (int i = 0; i < POOLS; i++)
        check(cuMemPoolDestroy(pools[i]), "cuMemPoolDestroy");
    held("held_after_destroy_all");
    return 0;
}

/* A cuMemAlloc block freed with cuMemFreeAsync behind a 300 ms kernel: the
 * driver frees it when the stream gets there, not at the call. */
static int run_stream_free(void)
{
    CUstream s;
    CUmodule mod;
    CUfunction sleep_fn;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuModuleLoadData(&mod, "sleep"), "cuModuleLoadData");
    check(cuModuleGetFunction(&sleep_fn, mod, "gslice_sim_sleep"), "cuModuleGetFunction");
    CUdeviceptr p;
    check(cuMemAlloc_v2(&p, 64 * MiB), "cuMemAlloc_v2");
    held("held_allocated");
    uint64_t ns = 300ull * 1000 * 1000;
    void *params[] = {&ns};
    check(cuLaunchKernel(sleep_fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL), "cuLaunchKernel");
    check(cuMemFreeAsync(p, s), "cuMemFreeAsync");
    query();
    held("held_free_queued");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    held("held_stream_passed");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2)
        return 2;
    stats_fn = (int (*)(gslice_shim_stats *))dlsym(RTLD_DEFAULT, "gslice_shim_stats_get");
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&primary, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
    const char *driver = getenv("GSLICE_REAL_LIBCUDA");
    void *lib = driver ? dlopen(driver, RTLD_NOW | RTLD_NOLOAD) : NULL;
    hold_next = lib ? (void (*)(pausing_driver_hold *))dlsym(lib, "pausing_driver_hold_next") : NULL;
    if (!hold_next && strcmp(argv[1], "pool_destroy") && strcmp(argv[1], "many_pools")) {
        printf("error=not running over pausing_driver (GSLICE_REAL_LIBCUDA)\n");
        return 3;
    }
    if (!strcmp(argv[1], "alloc_race"))
        return run_alloc_race();
    if (!strcmp(argv[1], "graph_race"))
        return run_graph_race();
    if (!strcmp(argv[1], "reconcile_wait"))
        return run_reconcile_wait();
    if (!strcmp(argv[1], "pitch_top_up"))
        return run_pitch_top_up();
    if (!strcmp(argv[1], "pool_destroy"))
        return run_pool_destroy();
    if (!strcmp(argv[1], "many_pools"))
        return run_many_pools();
    if (!strcmp(argv[1], "stream_free"))
        return run_stream_free();
    return 2;
}
