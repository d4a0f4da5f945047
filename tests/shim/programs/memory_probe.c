/* Memory routes under the shim: virtual memory references and mappings,
 * stream-ordered pools, context teardown. After each step it prints what
 * this process holds at tokend (the shim's own ledger counter):
 *
 *   memory_probe vmm | pool | teardown | overhead | copies | shaped_copies | fills_2d | graph | graph_unseen
 *                | graph_over [EARLIER_GRAPHS] | lazy_fill WARM CHUNK_MIB EVERY AFTER
 *
 * key=value lines; "error=..." and exit 3 on an unexpected driver result. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"
#include "../../../hook/shim_api.h"

/* Not in gslice_cuda_driver_api.h. */
CUresult cuMemsetD2D32_v2(CUdeviceptr dst, size_t pitch, unsigned int value, size_t width, size_t height);
CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,
                           CUstream hStream);
CUresult cuMemcpyAtoA_v2(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset, size_t bytes);
CUresult cuMemcpyDtoA_v2(CUarray dst, size_t dst_offset, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t src_offset, size_t bytes);

#define MiB (1ull << 20)

static int (*stats_fn)(gslice_shim_stats *);
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

static void held(const char *step)
{
    gslice_shim_stats s = {0};
    if (!stats_fn || stats_fn(&s) != 0) {
        printf("%s=none\n", step);
        return;
    }
    printf("%s=%llu\n", step, (unsigned long long)s.memory_held);
}

static int run_vmm(void)
{
    CUmemAllocationProp prop = {.type = 1, .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle h, again;
    CUdeviceptr va;
    check(cuMemCreate(&h, 64 * MiB, &prop, 0), "cuMemCreate");
    held("after_create");
    check(cuMemAddressReserve(&va, 64 * MiB, 0, 0, 0), "cuMemAddressReserve");
    check(cuMemMap(va, 64 * MiB, 0, h, 0), "cuMemMap");
    check(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va), "cuMemRetainAllocationHandle");
    printf("same_handle=%d\n", again == h);
    check(cuMemRelease(again), "cuMemRelease (retained)");
    held("after_retain_release");
    check(cuMemRelease(h), "cuMemRelease (created)");
    held("after_release_while_mapped");
    check(cuMemUnmap(va, 64 * MiB), "cuMemUnmap");
    held("after_unmap");
    check(cuMemAddressFree(va, 64 * MiB), "cuMemAddressFree");
    CUmemAllocationProp host = {.type = 1, .location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}};
    check(cuMemCreate(&h, 64 * MiB, &host, 0), "cuMemCreate (host NUMA)");
    held("after_host_numa_create");
    check(cuMemRelease(h), "cuMemRelease (host NUMA)");
    return 0;
}

static int run_pool(void)
{
    CUmemoryPool pool;
    check(cuDeviceGetDefaultMemPool(&pool, dev), "cuDeviceGetDefaultMemPool");
    cuuint64_t threshold = ~0ull;   /* keep everything, as RMM does */
    check(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), "cuMemPoolSetAttribute");
    CUdeviceptr p[4];
    for (int i = 0; i < 4; i++)
        check(cuMemAllocAsync(&p[i], 32 * MiB, NULL), "cuMemAllocAsync");
    held("after_prime");
    for (int i = 0; i < 4; i++)
        check(cuMemFreeAsync(p[i], NULL), "cuMemFreeAsync");
    check(cuStreamSynchronize(NULL), "cuStreamSynchronize");
    held("after_free");
    check(cuMemAllocAsync(&p[0], 64 * MiB, NULL), "cuMemAllocAsync (reuse)");
    held("after_reuse");
    check(cuMemFreeAsync(p[0], NULL), "cuMemFreeAsync (reuse)");
    check(cuStreamSynchronize(NULL), "cuStreamSynchronize");
    check(cuMemPoolTrimTo(pool, 0), "cuMemPoolTrimTo");
    held("after_trim");
    return 0;
}

static int run_teardown(void)
{
    held("start");
    CUcontext created;
    check(cuCtxCreate_v2(&created, 0, dev), "cuCtxCreate_v2");
    CUdeviceptr p;
    check(cuMemAlloc_v2(&p, 64 * MiB), "cuMemAlloc_v2 (created context)");
    held("created_with_alloc");
    check(cuCtxDestroy_v2(created), "cuCtxDestroy_v2");
    held("after_destroy");
    check(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
    check(cuMemAlloc_v2(&p, 64 * MiB), "cuMemAlloc_v2 (primary)");
    held("primary_with_alloc");
    check(cuDevicePrimaryCtxReset_v2(dev), "cuDevicePrimaryCtxReset_v2");
    held("after_reset");
    return 0;
}

/* The gate counters after settle_us (200 ms: an idle slice ends and is charged). */
static gslice_shim_stats gate_counters(useconds_t settle_us)
{
    gslice_shim_stats s = {0};
    if (settle_us)
        usleep(settle_us);
    if (stats_fn)
        stats_fn(&s);
    return s;
}

/* s0 before the device-side copies, s1 after them, s2 after the host ones. */
static void print_copy_gating(gslice_shim_stats s0, gslice_shim_stats s1, gslice_shim_stats s2)
{
    printf("device_copy_slow_entries=%llu\n", (unsigned long long)(s1.slow_entries - s0.slow_entries));
    printf("device_copy_used_us=%llu\n", (unsigned long long)(s1.used_us - s0.used_us));
    printf("host_copy_slow_entries=%llu\n", (unsigned long long)(s2.slow_entries - s1.slow_entries));
}

/* 50 device-to-device copies and 50 fills of 4 MiB (gated), then host to
 * device copies (not gated): the gate counters after each part. */
static int run_copies(void)
{
    CUdeviceptr a, b;
    check(cuMemAlloc_v2(&a, 4 * MiB), "cuMemAlloc_v2");
    check(cuMemAlloc_v2(&b, 4 * MiB), "cuMemAlloc_v2");
    gslice_shim_stats s0 = gate_counters(0);
    for (int i = 0; i < 50; i++) {
        check(cuMemcpyDtoD_v2(b, a, 4 * MiB), "cuMemcpyDtoD_v2");
        check(cuMemsetD32Async(a, 7, MiB, NULL), "cuMemsetD32Async");
    }
    check(cuStreamSynchronize(NULL), "cuStreamSynchronize");
    gslice_shim_stats s1 = gate_counters(200000);
    static char host[4 * MiB];
    for (int i = 0; i < 20; i++)
        check(cuMemcpyHtoD_v2(a, host, sizeof host), "cuMemcpyHtoD_v2");
    print_copy_gating(s0, s1, gate_counters(200000));
    return 0;
}

/* 2D, 3D, peer and batch device-to-device copies, 4 MiB each (gated),
 * then 2D host-to-device copies (not gated): the gate counters after each. */
static int run_shaped_copies(void)
{
    CUdeviceptr a, b;
    CUstream s;
    check(cuMemAlloc_v2(&a, 4 * MiB), "cuMemAlloc_v2");
    check(cuMemAlloc_v2(&b, 4 * MiB), "cuMemAlloc_v2");
    check(cuStreamCreate(&s, 0), "cuStreamCreate");
    CUDA_MEMCPY2D c2 = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcPitch = 4096,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b, .dstPitch = 4096,
                        .WidthInBytes = 4096, .Height = 1024};
    CUDA_MEMCPY3D c3 = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcPitch = 4096, .srcHeight = 256,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b, .dstPitch = 4096, .dstHeight = 256,
                        .WidthInBytes = 4096, .Height = 256, .Depth = 4};
    CUdeviceptr dsts[2] = {b, b + 2 * MiB}, srcs[2] = {a, a + 2 * MiB};
    size_t sizes[2] = {2 * MiB, 2 * MiB}, attr_idx[1] = {0};
    unsigned long long attr[4] = {0};   /* CUmemcpyAttributes: 24 bytes in cuda.h */
    gslice_shim_stats s0 = gate_counters(0);
    for (int i = 0; i < 10; i++) {
        check(cuMemcpy2D_v2(&c2), "cuMemcpy2D_v2");
        check(cuMemcpy3D_v2(&c3), "cuMemcpy3D_v2");
        check(cuMemcpyPeerAsync(b, primary, a, primary, 4 * MiB, s), "cuMemcpyPeerAsync");
        check(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 2, (CUmemcpyAttributes *)(void *)attr, attr_idx, 1, s),
              "cuMemcpyBatchAsync_v2");
    }
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    gslice_shim_stats s1 = gate_counters(200000);
    static char host[4 * MiB];
    CUDA_MEMCPY2D h2 = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = 4096,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = a, .dstPitch = 4096,
                        .WidthInBytes = 4096, .Height = 1024};
    for (int i = 0; i < 20; i++)
        check(cuMemcpy2D_v2(&h2), "cuMemcpy2D_v2 (host to device)");
    print_copy_gating(s0, s1, gate_counters(200000));
    return 0;
}

/* 2D fills (cudaMemset2D(Async)) and copies between arrays and device
 * memory, 4 MiB each (gated): the gate counters before and after them. */
static int run_fills_2d(void)
{
    CUdeviceptr a, b;
    CUstream s;
    CUarray x, y;
    CUDA_ARRAY_DESCRIPTOR d = {1024, 1024, CU_AD_FORMAT_FLOAT, 1};   /* 4 MiB */
    check(cuMemAlloc_v2(&a, 4 * MiB), "cuMemAlloc_v2");
    check(cuMemAlloc_v2(&b, 4 * MiB), "cuMemAlloc_v2");
    check(cuArrayCreate_v2(&x, &d), "cuArrayCreate_v2");
    check(cuArrayCreate_v2(&y, &d), "cuArrayCreate_v2");
    check(cuStreamCreate(&s, 0), "cuStreamCreate");
    gslice_shim_stats s0 = gate_counters(0);
    for (int i = 0; i < 10; i++) {   /* 1024 rows of 4096 bytes at a 4096-byte pitch */
        check(cuMemsetD2D32_v2(a, 4096, 7, 1024, 1024), "cuMemsetD2D32_v2");
        check(cuMemsetD2D8Async(b, 4096, 7, 4096, 1024, s), "cuMemsetD2D8Async");
        check(cuMemcpyAtoA_v2(y, 0, x, 0, 4 * MiB), "cuMemcpyAtoA_v2");
        check(cuMemcpyDtoA_v2(x, 0, a, 4 * MiB), "cuMemcpyDtoA_v2");
        check(cuMemcpyAtoD_v2(b, y, 0, 4 * MiB), "cuMemcpyAtoD_v2");
    }
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    gslice_shim_stats s1 = gate_counters(200000);
    printf("device_copy_slow_entries=%llu\n", (unsigned long long)(s1.slow_entries - s0.slow_entries));
    printf("device_copy_used_us=%llu\n", (unsigned long long)(s1.used_us - s0.used_us));
    return 0;
}

/* A graph captured from cuMemAllocAsync + cuMemFreeAsync of bytes. */
static CUgraphExec captured_graph_with_memory(CUstream s, size_t bytes)
{
    CUdeviceptr p;
    CUgraph g;
    CUgraphExec e;
    check(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture_v2");
    check(cuMemAllocAsync(&p, bytes, s), "cuMemAllocAsync (captured)");
    check(cuMemFreeAsync(p, s), "cuMemFreeAsync (captured)");
    check(cuStreamEndCapture(s, &g), "cuStreamEndCapture");
    check(cuGraphInstantiateWithFlags(&e, g, 0), "cuGraphInstantiateWithFlags");
    return e;
}

static unsigned long long graph_reserved(void)
{
    cuuint64_t v = 0;
    check(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v), "cuDeviceGetGraphMemAttribute");
    return (unsigned long long)v;
}

/* Graph memory: charged when a launch takes it, kept (the graph memory
 * pool keeps it after the graph frees it) until cuDeviceGraphMemTrim. */
static int run_graph(void)
{
    CUstream s;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    CUgraphExec e = captured_graph_with_memory(s, 256 * MiB);
    held("after_instantiate");
    check(cuGraphLaunch(e, s), "cuGraphLaunch");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    held("after_launch");
    printf("reserved_after_launch=%llu\n", graph_reserved());
    size_t free_b, total;
    check(cuMemGetInfo_v2(&free_b, &total), "cuMemGetInfo_v2");
    held("after_query");
    check(cuGraphLaunch(e, s), "cuGraphLaunch");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    held("after_relaunch");
    check(cuGraphExecDestroy(e), "cuGraphExecDestroy");
    held("after_exec_destroy");
    check(cuDeviceGraphMemTrim(dev), "cuDeviceGraphMemTrim");
    held("after_trim");
    printf("reserved_after_trim=%llu\n", graph_reserved());
    /* an upload takes the memory too */
    e = captured_graph_with_memory(s, 64 * MiB);
    check(cuGraphUpload(e, s), "cuGraphUpload");
    held("after_upload");
    check(cuGraphExecDestroy(e), "cuGraphExecDestroy");
    check(cuDeviceGraphMemTrim(dev), "cuDeviceGraphMemTrim");
    held("after_second_trim");
    return 0;
}

/* A graph instantiated by a route the shim's table does not have (the CUDA
 * 11 cuGraphInstantiate_v2): its memory is charged at the next memory query. */
static int run_graph_unseen(void)
{
    CUstream s;
    CUdeviceptr p;
    CUgraph g;
    CUgraphExec e;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture_v2");
    check(cuMemAllocAsync(&p, 64 * MiB, s), "cuMemAllocAsync (captured)");
    check(cuMemFreeAsync(p, s), "cuMemFreeAsync (captured)");
    check(cuStreamEndCapture(s, &g), "cuStreamEndCapture");
    check(cuGraphInstantiate_v2(&e, g, NULL, NULL, 0), "cuGraphInstantiate_v2");
    check(cuGraphLaunch(e, s), "cuGraphLaunch");
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    size_t free_b, total;
    check(cuMemGetInfo_v2(&free_b, &total), "cuMemGetInfo_v2");
    held("after_query");
    check(cuDeviceGraphMemTrim(dev), "cuDeviceGraphMemTrim");
    held("after_trim");
    return 0;
}

/* A graph whose memory is beyond the group's quota: its launch is refused
 * (out of memory) before the driver takes anything. */
/* `earlier` graphs with memory nodes are instantiated first (never
 * launched): the shim follows every one, however many. */
static int run_graph_over(size_t bytes, int earlier)
{
    CUstream s;
    check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    for (int i = 0; i < earlier; i++)
        captured_graph_with_memory(s, MiB);
    CUgraphExec e = captured_graph_with_memory(s, bytes);
    printf("launch_rc=%d\n", (int)cuGraphLaunch(e, s));
    check(cuStreamSynchronize(s), "cuStreamSynchronize");
    held("after_refused_launch");
    printf("reserved_after_refused_launch=%llu\n", graph_reserved());
    printf("upload_rc=%d\n", (int)cuGraphUpload(e, s));
    return 0;
}

/* A context that costs more than the shim's reserve: after a memory query
 * the charge follows NVML's per-process used memory. */
static int run_overhead(void)
{
    CUdeviceptr p;
    check(cuMemAlloc_v2(&p, 64 * MiB), "cuMemAlloc_v2");
    size_t free_b, total;
    check(cuMemGetInfo_v2(&free_b, &total), "cuMemGetInfo_v2");
    held("after_query");
    return 0;
}

/* Launch a kernel this process has not launched before: on a driver with
 * lazy module loading (GSLICE_SIM_MODULE_LOAD_MEMORY) its first launch
 * grows the context. */
static void launch_new_kernel(CUmodule mod, int *kernels)
{
    char name[32];
    CUfunction f;
    snprintf(name, sizeof name, "lazy_%d", (*kernels)++);
    check(cuModuleGetFunction(&f, mod, name), "cuModuleGetFunction");
    check(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), "cuLaunchKernel (first launch)");
}

/* Near its quota the shim reconciles against NVML at most every 2 ms
 * (hook/process_overhead.c) and sizes the growth margin for what a context
 * grows in that time. The fill grows no faster: each new kernel is followed
 * by a pause past that interval. (Without it, 8 allocations of 4 MiB ran
 * within 2 ms here, four new kernels went uncharged, and a fill without a
 * margin ended 52-96 MiB over the quota in 2 runs of 12.) */
#define GROWTH_SPACING_US 2500

/* A context that grows after its allocations: WARM new kernels first (a
 * library's first use, e.g. cuBLAS's first matmul), then CHUNK_MIB
 * allocations until one is refused, with a new kernel before every EVERY-th
 * allocation (0: none), then AFTER new kernels once the quota is full. */
static int run_lazy_fill(int warm, size_t chunk, int every, int after)
{
    CUmodule mod;
    int kernels = 0;
    check(cuModuleLoadData(&mod, "lazy"), "cuModuleLoadData");
    for (int i = 0; i < warm; i++)
        launch_new_kernel(mod, &kernels);
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    unsigned long long allocated = 0;
    CUresult rc;
    for (int n = 0;; n++) {
        if (every && n % every == 0) {
            launch_new_kernel(mod, &kernels);
            usleep(GROWTH_SPACING_US);
        }
        CUdeviceptr p;
        rc = cuMemAlloc_v2(&p, chunk);
        if (rc != CUDA_SUCCESS)
            break;
        allocated += chunk;
    }
    printf("last_result=%d\nallocated=%llu\n", (int)rc, allocated);
    for (int i = 0; i < after; i++)
        launch_new_kernel(mod, &kernels);
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    printf("kernels=%d\n", kernels);
    held("held");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 2 && !(argc == 6 && !strcmp(argv[1], "lazy_fill")) && !(argc == 3 && !strcmp(argv[1], "graph_over")))
        return 2;
    stats_fn = (int (*)(gslice_shim_stats *))dlsym(RTLD_DEFAULT, "gslice_shim_stats_get");
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&primary, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
    if (!strcmp(argv[1], "vmm"))
        return run_vmm();
    if (!strcmp(argv[1], "pool"))
        return run_pool();
    if (!strcmp(argv[1], "teardown"))
        return run_teardown();
    if (!strcmp(argv[1], "overhead"))
        return run_overhead();
    if (!strcmp(argv[1], "copies"))
        return run_copies();
    if (!strcmp(argv[1], "shaped_copies"))
        return run_shaped_copies();
    if (!strcmp(argv[1], "fills_2d"))
        return run_fills_2d();
    if (!strcmp(argv[1], "graph"))
        return run_graph();
    if (!strcmp(argv[1], "graph_unseen"))
        return run_graph_unseen();
    if (!strcmp(argv[1], "lazy_fill"))
        return run_lazy_fill(atoi(argv[2]), (size_t)atoi(argv[3]) * MiB, atoi(argv[4]), atoi(argv[5]));
    if (!strcmp(argv[1], "graph_over"))
        return run_graph_over(3072 * MiB, argc > 2 ? atoi(argv[2]) : 0);
    return 2;
}
