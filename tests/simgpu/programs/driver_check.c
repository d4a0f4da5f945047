/* Exercises the simulated driver through -lcuda, one scenario per
 * sub-command; prints "key=value" lines the tests parse, and "FAIL ..." with
 * exit status 1 when a call returns something unexpected. */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"

#define CHECK(call) expect((call), CUDA_SUCCESS, #call, __LINE__)
#define EXPECT(call, want) expect((call), (want), #call, __LINE__)

static void expect(CUresult got, CUresult want, const char *what, int line) {
    if (got != want) {
        printf("FAIL line %d: %s returned %d, expected %d\n", line, what, got, want);
        fflush(stdout);
        exit(1);
    }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static CUfunction sleep_kernel;

static void setup(void) {
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, "any image"));
    CHECK(cuModuleGetFunction(&sleep_kernel, mod, "gslice_sim_sleep"));
}

static void launch_sleep(CUstream s, uint64_t ns) {
    void *params[] = {&ns};
    CHECK(cuLaunchKernel(sleep_kernel, 1, 1, 1, 32, 1, 1, 0, s, params, NULL));
}

/* ---- scenarios ---- */

static int memory(void) {
    size_t free0, total, free1;
    CHECK(cuMemGetInfo_v2(&free0, &total));
    CUdeviceptr a, b;
    CHECK(cuMemAlloc_v2(&a, 64 << 20));
    CHECK(cuMemAlloc_v2(&b, 64 << 20));
    CHECK(cuMemGetInfo_v2(&free1, &total));
    printf("alloc_delta=%zu\n", free0 - free1);
    char in[4096], out[4096];
    for (size_t i = 0; i < sizeof in; i++) in[i] = (char)(i * 7);
    CHECK(cuMemcpyHtoD_v2(a + 1000, in, sizeof in));
    CHECK(cuMemcpyDtoD_v2(b, a + 1000, sizeof in));
    CHECK(cuMemcpyDtoH_v2(out, b, sizeof out));
    printf("roundtrip_ok=%d\n", memcmp(in, out, sizeof in) == 0);
    CHECK(cuMemsetD32_v2(b, 0xdeadbeef, 4));
    uint32_t words[4];
    CHECK(cuMemcpyDtoH_v2(words, b, sizeof words));
    printf("memset32_ok=%d\n", words[0] == 0xdeadbeef && words[3] == 0xdeadbeef);
    CHECK(cuMemsetD8_v2(b, 0x5a, 3));
    CHECK(cuMemcpyDtoH_v2(out, b, 4));
    printf("memset8_ok=%d\n", out[0] == 0x5a && out[2] == 0x5a && (unsigned char)out[3] == 0xde);
    /* copies that leave the allocation, frees of unknown pointers */
    EXPECT(cuMemcpyHtoD_v2(a + (64 << 20) - 10, in, 100), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemFree_v2(a + 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemAlloc_v2(&a, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree_v2(b));
    EXPECT(cuMemFree_v2(b), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemFree_v2(a));
    size_t free2;
    CHECK(cuMemGetInfo_v2(&free2, &total));
    printf("all_freed=%d\n", free2 == free0);

    size_t pitch;
    CUdeviceptr p;
    CHECK(cuMemAllocPitch_v2(&p, &pitch, 1000, 10, 4));
    printf("pitch=%zu\n", pitch);
    CHECK(cuMemFree_v2(p));
    CHECK(cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL));
    ((char *)(uintptr_t)p)[0] = 1; /* managed memory is host-accessible */
    CHECK(cuMemFree_v2(p));

    /* stream-ordered free returns the memory when the stream gets there */
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuMemAllocAsync(&p, 32 << 20, s));
    launch_sleep(s, 100 * 1000 * 1000ull);
    CHECK(cuMemFreeAsync(p, s));
    size_t during, after;
    CHECK(cuMemGetInfo_v2(&during, &total));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemGetInfo_v2(&after, &total));
    printf("async_free_deferred=%d\n", free0 - during == (32u << 20) && after == free0);

    /* virtual memory management */
    size_t gran;
    CUmemAllocationProp prop = {.type = 1, .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, 0));
    CUmemGenericAllocationHandle h;
    EXPECT(cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemCreate(&h, 2 * gran, &prop, 0));
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
    CHECK(cuMemMap(va + gran, 2 * gran, 0, h, 0));
    CHECK(cuMemcpyHtoD_v2(va + gran, in, sizeof in));
    CHECK(cuMemcpyDtoH_v2(out, va + gran, sizeof out));
    size_t vmm_free;
    CHECK(cuMemGetInfo_v2(&vmm_free, &total));
    printf("vmm_ok=%d vmm_counted=%zu granularity=%zu\n", memcmp(in, out, sizeof in) == 0, free0 - vmm_free, gran);
    CHECK(cuMemUnmap(va + gran, 2 * gran));
    CHECK(cuMemRelease(h));
    CHECK(cuMemAddressFree(va, 4 * gran));

    CUDA_ARRAY_DESCRIPTOR desc = {1024, 256, CU_AD_FORMAT_FLOAT, 4};
    CUarray arr;
    CHECK(cuArrayCreate_v2(&arr, &desc));
    size_t arr_free;
    CHECK(cuMemGetInfo_v2(&arr_free, &total));
    printf("array_counted=%zu\n", free0 - arr_free);
    CHECK(cuArrayDestroy(arr));

    unsigned int small;
    CHECK(cuMemAlloc(&small, 4096)); /* the 32-bit CUDA 2.x entry point */
    CHECK(cuMemcpyHtoD_v2(small, in, 16));
    CHECK(cuMemFree(small));
    CHECK(cuMemGetInfo_v2(&free2, &total));
    printf("end_free_equal=%d\n", free2 == free0);
    return 0;
}

/* 2D / 3D / peer / batch copies: the bytes land where the pitches and
 * offsets say, arrays are addressed by their rows, bad descriptors are
 * refused, and a device-side copy takes engine time for its bytes. */
static int shaped(void) {
    enum { W = 100, H = 6, HP = 128, DP = 512 };
    unsigned char host[HP * H * 2], back[HP * H * 2];
    for (size_t i = 0; i < sizeof host; i++) host[i] = (unsigned char)(i * 13 + 1);
    CUdeviceptr a, b;
    CUcontext ctx;
    CHECK(cuCtxGetCurrent(&ctx));
    CHECK(cuMemAlloc_v2(&a, 64 << 20));
    CHECK(cuMemAlloc_v2(&b, 64 << 20));
    /* host (pitch 128) -> device (pitch 512, at x=8, y=2) -> device b (3D, 2 slices) -> host (pitch 128) */
    CUDA_MEMCPY2D up = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = HP,
                        .dstXInBytes = 8, .dstY = 2, .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = a,
                        .dstPitch = DP, .WidthInBytes = W, .Height = H};
    CHECK(cuMemcpy2D_v2(&up));
    up.srcHost = host + HP * H;
    up.dstY = 2 + 8;                       /* second slice: 8 rows further */
    CHECK(cuMemcpy2D_v2(&up));
    CUDA_MEMCPY3D across = {.srcXInBytes = 8, .srcY = 2, .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a,
                            .srcPitch = DP, .srcHeight = 8, .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b,
                            .dstPitch = DP, .dstHeight = H, .WidthInBytes = W, .Height = H, .Depth = 2};
    CHECK(cuMemcpy3D_v2(&across));
    CUDA_MEMCPY3D_PEER down = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = b, .srcContext = ctx,
                               .srcPitch = DP, .srcHeight = H, .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = back,
                               .dstContext = ctx, .dstPitch = HP, .dstHeight = H, .WidthInBytes = W, .Height = H,
                               .Depth = 2};
    memset(back, 0, sizeof back);
    CHECK(cuMemcpy3DPeer(&down));
    int same = 1;
    for (size_t z = 0; z < 2; z++)
        for (size_t y = 0; y < H; y++) same &= !memcmp(back + (z * H + y) * HP, host + (z * H + y) * HP, W);
    printf("shaped_roundtrip_ok=%d\n", same);
    /* an array side: rows of 64 x 4 bytes */
    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR desc = {64, 8, CU_AD_FORMAT_FLOAT, 1};
    CHECK(cuArrayCreate_v2(&arr, &desc));
    CUDA_MEMCPY2D to_arr = {.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = host, .srcPitch = HP,
                            .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = arr, .WidthInBytes = W, .Height = H};
    CHECK(cuMemcpy2D_v2(&to_arr));
    CUDA_MEMCPY2D from_arr = {.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = arr,
                              .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = back, .dstPitch = HP,
                              .WidthInBytes = W, .Height = H};
    memset(back, 0, sizeof back);
    CHECK(cuMemcpy2D_v2(&from_arr));
    same = 1;
    for (size_t y = 0; y < H; y++) same &= !memcmp(back + y * HP, host + y * HP, W);
    printf("array_roundtrip_ok=%d\n", same);
    to_arr.WidthInBytes = 257;             /* wider than the array's 256-byte rows */
    EXPECT(cuMemcpy2D_v2(&to_arr), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuArrayDestroy(arr));
    /* refused descriptors */
    CUDA_MEMCPY2D narrow = up;
    narrow.dstPitch = W - 1;               /* pitch below the width */
    EXPECT(cuMemcpy2D_v2(&narrow), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY2D beyond = up;
    beyond.dstY = (64 << 20) / DP;         /* rows past the allocation's end */
    EXPECT(cuMemcpy2D_v2(&beyond), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEMCPY3D reserved = across;
    reserved.reserved0 = &reserved;
    EXPECT(cuMemcpy3D_v2(&reserved), CUDA_ERROR_INVALID_VALUE);
    EXPECT(cuMemcpyPeer(b, NULL, a, ctx, 4096), CUDA_ERROR_INVALID_CONTEXT);
    CHECK(cuMemcpyPeer(b, ctx, a, ctx, 4096));
    CUdeviceptr dsts[1] = {b}, srcs[1] = {a};
    size_t sizes[1] = {4096}, idx[1] = {0}, fail = 0;
    unsigned long long attr[4] = {0};      /* CUmemcpyAttributes: 24 bytes in cuda.h */
    EXPECT(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, (CUmemcpyAttributes *)(void *)attr, idx, 1, &fail, NULL),
           CUDA_ERROR_INVALID_VALUE);      /* not on the legacy NULL stream */
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemcpyBatchAsync(dsts, srcs, sizes, 1, (CUmemcpyAttributes *)(void *)attr, idx, 1, &fail, s));
    CHECK(cuStreamSynchronize(s));
    /* engine time: 32 MiB device to device in 2D rows (GSLICE_SIM_DEVICE_GBPS sets the rate) */
    CUDA_MEMCPY2D big = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcPitch = 1 << 20,
                         .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b, .dstPitch = 1 << 20,
                         .WidthInBytes = 1 << 20, .Height = 32};
    double t0 = now_ms();
    CHECK(cuMemcpy2D_v2(&big));
    printf("copy2d_32mib_ms=%.1f\n", now_ms() - t0);
    t0 = now_ms();
    CHECK(cuMemcpy2DAsync_v2(&big, s));
    double queued = now_ms() - t0;
    CHECK(cuStreamSynchronize(s));
    printf("copy2d_async_queued_ms=%.1f\ncopy2d_async_total_ms=%.1f\n", queued, now_ms() - t0);
    return 0;
}

static unsigned long long graph_attr(CUgraphMem_attribute attr) {
    cuuint64_t v = 0;
    CHECK(cuDeviceGetGraphMemAttribute(0, attr, &v));
    return (unsigned long long)v;
}

/* Graph memory: captured stream-ordered allocations become mem alloc /
 * free nodes; a launch takes the bytes from the graph memory pool, which
 * keeps them until trimmed; unfreed allocations stay used; a graph larger
 * than the device is out of memory at launch. */
static int graphmem(void) {
    size_t free0, free1, total;
    CUstream s;
    CUdeviceptr p;
    CUgraph g;
    CUgraphExec e;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemGetInfo_v2(&free0, &total));
    CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(cuMemAllocAsync(&p, 64 << 20, s));
    launch_sleep(s, 1000000);
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamEndCapture(s, &g));
    CUgraphNode nodes[8];
    size_t n = 8;
    CHECK(cuGraphGetNodes(g, nodes, &n));
    CUgraphNodeType t0, t1, t2;
    CHECK(cuGraphNodeGetType(nodes[0], &t0));
    CHECK(cuGraphNodeGetType(nodes[1], &t1));
    CHECK(cuGraphNodeGetType(nodes[2], &t2));
    printf("captured_nodes=%zu\ncaptured_types=%d,%d,%d\n", n, t0, t1, t2);
    CHECK(cuGraphInstantiateWithFlags(&e, g, 0));
    printf("reserved_before_launch=%llu\n", graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
    CHECK(cuGraphLaunch(e, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemGetInfo_v2(&free1, &total));
    printf("reserved_after_launch=%llu\nused_after_launch=%llu\nused_high=%llu\nfree_drop=%zu\n",
           graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT),
           graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), free0 - free1);
    CHECK(cuGraphLaunch(e, s));
    CHECK(cuStreamSynchronize(s));
    printf("reserved_after_relaunch=%llu\n", graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
    CHECK(cuDeviceGraphMemTrim(0));
    CHECK(cuMemGetInfo_v2(&free1, &total));
    printf("reserved_after_trim=%llu\nfree_restored=%d\n", graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT),
           free1 == free0);
    /* an explicit alloc node without a free node */
    CUgraph g2;
    CUgraphExec e2;
    CUgraphNode an, fn;
    CUDA_MEM_ALLOC_NODE_PARAMS ap = {.poolProps = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                                   .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}},
                                     .bytesize = 32 << 20};
    CHECK(cuGraphCreate(&g2, 0));
    CHECK(cuGraphAddMemAllocNode(&an, g2, NULL, 0, &ap));
    printf("alloc_node_dptr_set=%d\n", ap.dptr != 0);
    EXPECT(cuGraphAddMemFreeNode(&fn, g2, NULL, 0, ap.dptr + 4096), CUDA_ERROR_INVALID_VALUE);
    CUDA_MEM_ALLOC_NODE_PARAMS host = ap;
    host.poolProps.location.type = CU_MEM_LOCATION_TYPE_HOST;
    EXPECT(cuGraphAddMemAllocNode(&fn, g2, NULL, 0, &host), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuGraphInstantiateWithFlags(&e2, g2, 0));
    CHECK(cuGraphLaunch(e2, s));
    CHECK(cuStreamSynchronize(s));
    printf("used_unfreed=%llu\n", graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
    EXPECT(cuGraphLaunch(e2, s), CUDA_ERROR_INVALID_VALUE);   /* its allocation is still live */
    CHECK(cuDeviceGraphMemTrim(0));
    printf("reserved_trim_while_used=%llu\n", graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
    CHECK(cuGraphExecDestroy(e2));
    CHECK(cuDeviceGraphMemTrim(0));
    printf("reserved_after_exec_destroy_trim=%llu\n", graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
    /* more graph memory than the device has */
    CUgraph g3;
    CUgraphExec e3;
    ap.bytesize = total + (1 << 20);
    CHECK(cuGraphCreate(&g3, 0));
    CHECK(cuGraphAddMemAllocNode(&an, g3, NULL, 0, &ap));
    CHECK(cuGraphInstantiateWithFlags(&e3, g3, 0));
    EXPECT(cuGraphLaunch(e3, s), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT(cuGraphUpload(e3, s), CUDA_ERROR_OUT_OF_MEMORY);
    printf("reserved_after_oom=%llu\n", graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
    return 0;
}

static int oom(size_t bytes) {
    CUdeviceptr p;
    size_t fr, total;
    CHECK(cuMemGetInfo_v2(&fr, &total));
    CUresult rc = cuMemAlloc_v2(&p, bytes);
    printf("result=%d free=%zu total=%zu\n", rc, fr, total);
    if (rc == CUDA_SUCCESS) CHECK(cuMemFree_v2(p));
    return 0;
}

static int events(uint64_t ns, int count) {
    CUstream s;
    CUevent a, b;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuEventCreate(&a, 0));
    CHECK(cuEventCreate(&b, 0));
    CHECK(cuEventRecord(a, s));
    for (int i = 0; i < count; i++) launch_sleep(s, ns);
    CHECK(cuEventRecord(b, s));
    CUresult early = cuEventQuery(b);
    float ms = 0;
    CUresult early_elapsed = cuEventElapsedTime(&ms, a, b);
    CHECK(cuEventSynchronize(b));
    CHECK(cuEventQuery(b));
    CHECK(cuEventElapsedTime(&ms, a, b));
    printf("early_query=%d early_elapsed=%d elapsed_ms=%.3f\n", early, early_elapsed, ms);
    CHECK(cuEventDestroy_v2(a));
    CHECK(cuEventDestroy_v2(b));
    return 0;
}

struct order_log {
    int seen[8];
    double at_ms[8];
    int n;
};

static void note(void *arg) {
    struct order_log *log = arg;
    log->at_ms[log->n] = now_ms();
    log->seen[log->n] = log->n;
    log->n++;
}

static int order(void) {
    CUstream s, other;
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuStreamCreate(&other, 0));
    struct order_log log = {{0}, {0}, 0};
    double start = now_ms();
    launch_sleep(s, 40 * 1000 * 1000ull);
    CHECK(cuLaunchHostFunc(s, note, &log));
    launch_sleep(s, 40 * 1000 * 1000ull);
    CHECK(cuLaunchHostFunc(s, note, &log));
    double queued = now_ms();
    CUresult busy = cuStreamQuery(s);
    /* a second stream waits for an event recorded after the first kernels */
    CUevent done;
    CHECK(cuEventCreate(&done, 0));
    CHECK(cuEventRecord(done, s));
    CHECK(cuStreamWaitEvent(other, done, 0));
    CHECK(cuLaunchHostFunc(other, note, &log));
    CHECK(cuStreamSynchronize(other));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuStreamQuery(s));
    printf("launch_ms=%.3f busy_query=%d notes=%d first_ms=%.3f second_ms=%.3f waited_ms=%.3f\n",
           queued - start, busy, log.n, log.at_ms[0] - start, log.at_ms[1] - start, log.at_ms[2] - start);
    CHECK(cuStreamDestroy_v2(s));
    EXPECT(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
    return 0;
}

static int ctxsync(void) {
    CUstream streams[3];
    double start = now_ms();
    for (int i = 0; i < 3; i++) {
        CHECK(cuStreamCreate(&streams[i], 0));
        launch_sleep(streams[i], 30 * 1000 * 1000ull);
    }
    launch_sleep(NULL, 30 * 1000 * 1000ull); /* the legacy default stream too */
    CHECK(cuCtxSynchronize());
    double waited = now_ms() - start;
    int idle = 1;
    for (int i = 0; i < 3; i++) idle &= cuStreamQuery(streams[i]) == CUDA_SUCCESS;
    idle &= cuStreamQuery(NULL) == CUDA_SUCCESS;
    printf("ctxsync_ms=%.3f all_idle=%d\n", waited, idle);
    return 0;
}

static int graph(int nodes, uint64_t ns) {
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUgraphNode prev = NULL, node;
    for (int i = 0; i < nodes; i++) {
        CUDA_KERNEL_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        p.func = sleep_kernel;
        p.gridDimX = p.gridDimY = p.gridDimZ = 1;
        p.blockDimX = p.blockDimY = p.blockDimZ = 1;
        void *params[] = {&ns};
        p.kernelParams = params;
        CHECK(cuGraphAddKernelNode_v2(&node, g, prev ? &prev : NULL, prev ? 1 : 0, &p));
        prev = node;
    }
    CUgraphExec exec;
    CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    double start = now_ms();
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuGraphExecDestroy(exec)); /* a launched graph still runs */
    CHECK(cuStreamSynchronize(s));
    double graph_ms = now_ms() - start;

    /* stream capture turns launches into a graph */
    CHECK(cuStreamBeginCapture_v2(s, 0));
    for (int i = 0; i < nodes; i++) launch_sleep(s, ns);
    CUgraph captured;
    CHECK(cuStreamEndCapture(s, &captured));
    double capture_ms = now_ms() - start - graph_ms;
    CHECK(cuGraphInstantiateWithFlags(&exec, captured, 0));
    start = now_ms();
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    double captured_ms = now_ms() - start;
    printf("graph_ms=%.3f capture_ms=%.3f captured_ms=%.3f\n", graph_ms, capture_ms, captured_ms);
    CHECK(cuGraphDestroy(g));
    CHECK(cuGraphDestroy(captured));
    return 0;
}

/* Keep launching `ns` kernels (in batches of 8, synchronising) for `count` kernels. */
static int spin(uint64_t ns, int count) {
    CUstream s;
    CHECK(cuStreamCreate(&s, 0));
    double start = now_ms();
    for (int i = 0; i < count; i++) {
        launch_sleep(s, ns);
        if (i % 8 == 7) CHECK(cuStreamSynchronize(s));
    }
    CHECK(cuStreamSynchronize(s));
    printf("pid=%d start_ms=%.3f end_ms=%.3f\n", getpid(), start, now_ms());
    return 0;
}

/* Hold memory and the engine: allocate, then run one long kernel. */
static int hold(size_t bytes, uint64_t ns) {
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, bytes));
    launch_sleep(NULL, ns);
    printf("holding pid=%d\n", getpid());
    fflush(stdout);
    CHECK(cuCtxSynchronize());
    return 0;
}

/* Device-side fills only, no kernel: engine work all the same. */
static int fills(size_t bytes, int count) {
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, bytes));
    for (int i = 0; i < count; i++) CHECK(cuMemsetD8_v2(p, (unsigned char)i, bytes));
    CHECK(cuMemFree_v2(p));
    printf("fills=%d\n", count);
    return 0;
}

/* Allocate and wait until stdin closes (memory visible to other processes). */
static int keep(size_t bytes) {
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, bytes));
    printf("kept pid=%d\n", getpid());
    fflush(stdout);
    char buf[16];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    return 0;
}

/* Many threads at once: allocations, launches on the per-thread default
 * stream and on their own stream; the threads then exit with work queued. */
static CUcontext shared_context;

static void *thread_body(void *arg) {
    (void)arg;
    CHECK(cuCtxSetCurrent(shared_context));
    CUstream own;
    CHECK(cuStreamCreate(&own, 0));
    uint64_t ns = 100 * 1000;
    void *params[] = {&ns};
    for (int i = 0; i < 100; i++) {
        CUdeviceptr p;
        CHECK(cuMemAlloc_v2(&p, 1 << 20));
        CHECK(cuMemsetD8_v2(p, (unsigned char)i, 1 << 20));
        CHECK(cuMemFree_v2(p));
        if (i % 2) CHECK(cuLaunchKernel_ptsz(sleep_kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
        else CHECK(cuLaunchKernel(sleep_kernel, 1, 1, 1, 1, 1, 1, 0, own, params, NULL));
    }
    CHECK(cuStreamSynchronize_ptsz(NULL));
    CHECK(cuStreamDestroy_v2(own)); /* still has work queued: it finishes first */
    return NULL;
}

static int threads(int count) {
    size_t free0, free1, total;
    CHECK(cuMemGetInfo_v2(&free0, &total));
    CHECK(cuCtxGetCurrent(&shared_context));
    pthread_t tids[64];
    for (int i = 0; i < count; i++) pthread_create(&tids[i], NULL, thread_body, NULL);
    for (int i = 0; i < count; i++) pthread_join(tids[i], NULL);
    CHECK(cuCtxSynchronize());
    CHECK(cuMemGetInfo_v2(&free1, &total));
    printf("threads_done=%d memory_back=%d\n", count, free0 == free1);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s memory|oom BYTES|events NS COUNT|order|ctxsync|graph N NS|spin NS COUNT|"
                        "hold BYTES NS|keep BYTES|fills BYTES COUNT|uninit\n", argv[0]);
        return 2;
    }
    const char *what = argv[1];
    if (strcmp(what, "uninit") == 0) {
        CUdeviceptr p;
        EXPECT(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
        CHECK(cuInit(0));
        EXPECT(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
        printf("uninit_ok=1\n");
        return 0;
    }
    if (strcmp(what, "init") == 0) {
        CUresult rc = cuInit(0);
        printf("init=%d\n", rc);
        return 0;
    }
    setup();
    if (strcmp(what, "memory") == 0) return memory();
    if (strcmp(what, "shaped") == 0) return shaped();
    if (strcmp(what, "graphmem") == 0) return graphmem();
    if (strcmp(what, "oom") == 0 && argc == 3) return oom(strtoull(argv[2], NULL, 10));
    if (strcmp(what, "events") == 0 && argc == 4) return events(strtoull(argv[2], NULL, 10), atoi(argv[3]));
    if (strcmp(what, "order") == 0) return order();
    if (strcmp(what, "ctxsync") == 0) return ctxsync();
    if (strcmp(what, "graph") == 0 && argc == 4) return graph(atoi(argv[2]), strtoull(argv[3], NULL, 10));
    if (strcmp(what, "spin") == 0 && argc == 4) return spin(strtoull(argv[2], NULL, 10), atoi(argv[3]));
    if (strcmp(what, "hold") == 0 && argc == 4) return hold(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
    if (strcmp(what, "threads") == 0 && argc == 3) return threads(atoi(argv[2]) > 64 ? 64 : atoi(argv[2]));
    if (strcmp(what, "fills") == 0 && argc == 4) return fills(strtoull(argv[2], NULL, 10), atoi(argv[3]));
    if (strcmp(what, "keep") == 0 && argc == 3) return keep(strtoull(argv[2], NULL, 10));
    fprintf(stderr, "unknown scenario %s\n", what);
    return 2;
}
