/* Calls every row of the shim's intercept table once, by its exported name
 * resolved in the process (the preloaded shim's wrapper), on the simulated
 * GPU, and checks the driver's answer. Prints one line per row:
 *   row=NAME rc=RESULT object=FILE
 * and "unhandled=NAME" for a row this program does not know (a new row:
 * add it here). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslice_cuda_abi.h"
#include "gslice_nvml_abi.h"
#include "gslice_cuda_driver_api.h"

#define MiB (1ull << 20)

/* Not in gslice_cuda_driver_api.h: pools made by the program (cuMemPoolDestroy's row). */
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props);

static const char *object_of(void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname)
        return "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

/* Call through the row's exported symbol as seen by the process. */
#define CALL(type, ...) ((type)fn)(__VA_ARGS__)
#define BY_NAME(type, name) ((type)dlsym(RTLD_DEFAULT, name))

static CUresult end_capture(CUstream s)
{
    CUgraph captured;
    return BY_NAME(CUresult(*)(CUstream, CUgraph *), "cuStreamEndCapture")(s, &captured);
}

int main(void)
{
    CUdevice dev;
    CUcontext primary, created = NULL;
    CUmodule mod;
    CUfunction f;
    CUstream s;
    if (cuInit(0) || cuDeviceGet(&dev, 0))
        return 3;
    void *retain = dlsym(RTLD_DEFAULT, "cuDevicePrimaryCtxRetain");
    if (((CUresult(*)(CUcontext *, CUdevice))retain)(&primary, dev) || cuCtxSetCurrent(primary) ||
        cuModuleLoadData(&mod, "rows") || cuModuleGetFunction(&f, mod, "gslice_sim_sleep") ||
        cuStreamCreate(&s, CU_STREAM_NON_BLOCKING))
        return 3;
    nvmlDevice_t ndev;
    if (nvmlInit_v2() || nvmlDeviceGetHandleByIndex_v2(0, &ndev))
        return 3;
    uint64_t ns = 1000;
    void *params[] = {&ns};
    CUgraph graph;
    CUgraphExec exec, exec2 = NULL;
    cuGraphCreate(&graph, 0);
    cuGraphInstantiateWithFlags(&exec, graph, 0);
    CUlaunchConfig cfg = {1, 1, 1, 1, 1, 1, 0, s, NULL, 0};
    CUdeviceptr a = 0, b = 0, p = 0, va = 0;
    unsigned int small = 0;
    size_t pitch, free_b, total;
    CUmemAllocationProp prop = {.type = 1, .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle h = 0, h2 = 0;
    CUmemoryPool pool;
    cuDeviceGetDefaultMemPool(&pool, dev);
    CUarray arr = NULL, arr3 = NULL;
    CUmipmappedArray mip = NULL;
    CUDA_ARRAY_DESCRIPTOR d2 = {64, 64, CU_AD_FORMAT_FLOAT, 1};
    CUDA_ARRAY3D_DESCRIPTOR d3 = {64, 64, 4, CU_AD_FORMAT_FLOAT, 1, 0};
    nvmlMemory_t m1;
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    nvmlProcessInfo_v1_t pi1[64];
    nvmlProcessInfo_t pi[64];
    unsigned int n;
    void *pfn;
    CUdriverProcAddressQueryResult qs;
    int failures = 0;
    int (*row_count)(void) = BY_NAME(int (*)(void), "gslice_intercept_count");
    const char *(*row_name)(int) = BY_NAME(const char *(*)(int), "gslice_intercept_name");
    if (!row_count || !row_name) {
        printf("error=not running under the shim\n");
        return 3;
    }
    /* Device memory the copy and fill rows work on. */
    if (BY_NAME(CUresult(*)(CUdeviceptr *, size_t), "cuMemAlloc_v2")(&a, 64 * 1024) ||
        BY_NAME(CUresult(*)(CUdeviceptr *, size_t), "cuMemAlloc_v2")(&b, 64 * 1024))
        return 3;

    /* Arrays the array copy rows work on (16 KiB each). */
    CUarray copy_arr_a = NULL, copy_arr_b = NULL;
    if (BY_NAME(CUresult(*)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *), "cuArrayCreate_v2")(&copy_arr_a, &d2) ||
        BY_NAME(CUresult(*)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *), "cuArrayCreate_v2")(&copy_arr_b, &d2))
        return 3;

    /* 2D / 3D / peer / batch copies between a and b (8 rows of 256 bytes at a 512-byte pitch, 2 slices) */
    CUDA_MEMCPY2D c2 = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcPitch = 512,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b, .dstPitch = 512,
                        .WidthInBytes = 256, .Height = 8};
    CUDA_MEMCPY3D c3 = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcPitch = 512, .srcHeight = 8,
                        .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b, .dstPitch = 512, .dstHeight = 8,
                        .WidthInBytes = 256, .Height = 8, .Depth = 2};
    CUDA_MEMCPY3D_PEER c3p = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = a, .srcContext = primary,
                              .srcPitch = 512, .srcHeight = 8, .dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = b,
                              .dstContext = primary, .dstPitch = 512, .dstHeight = 8, .WidthInBytes = 256, .Height = 8,
                              .Depth = 2};
    CUdeviceptr batch_dst[2] = {b, b + 8192}, batch_src[2] = {a, a + 8192};
    size_t batch_size[2] = {4096, 4096}, batch_attr_idx[1] = {0};
    /* CUmemcpyAttributes (24 bytes in cuda.h); the simulated driver only counts them */
    CUmemcpyAttributes *batch_attr = (CUmemcpyAttributes *)(void *)(unsigned long long[4]){0};

    /* Order matters where one row needs another's result: rows are called
     * in table order, which allocates before it frees. */
    int rows = row_count();
    for (int i = 0; i < rows; i++) {
        const char *name = row_name(i);
        void *fn = dlsym(RTLD_DEFAULT, name);
        int rc = -1;
        int expect = 0;
        n = 64;
#define IS(x) (!strcmp(name, x))
        if (IS("cuLaunchKernel") || IS("cuLaunchKernel_ptsz") || IS("cuLaunchCooperativeKernel") ||
            IS("cuLaunchCooperativeKernel_ptsz"))
            rc = IS("cuLaunchKernel") || IS("cuLaunchKernel_ptsz")
                     ? CALL(CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        CUstream, void **, void **), f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL)
                     : CALL(CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        CUstream, void **), f, 1, 1, 1, 1, 1, 1, 0, s, params);
        else if (IS("cuLaunchKernelEx") || IS("cuLaunchKernelEx_ptsz"))
            rc = CALL(CUresult(*)(const CUlaunchConfig *, CUfunction, void **, void **), &cfg, f, params, NULL);
        else if (IS("cuGraphLaunch") || IS("cuGraphLaunch_ptsz") || IS("cuGraphUpload") || IS("cuGraphUpload_ptsz"))
            rc = CALL(CUresult(*)(CUgraphExec, CUstream), exec, s);
        else if (IS("cuGraphInstantiateWithFlags"))
            rc = CALL(CUresult(*)(CUgraphExec *, CUgraph, unsigned long long), &exec2, graph, 0);
        else if (IS("cuGraphExecDestroy"))
            rc = CALL(CUresult(*)(CUgraphExec), exec2);
        else if (IS("cuDeviceGraphMemTrim"))
            rc = CALL(CUresult(*)(CUdevice), dev);
        else if (IS("cuStreamBeginCapture") || IS("cuStreamBeginCapture_ptsz")) {
            rc = CALL(CUresult(*)(CUstream), s);
            if (!rc)
                rc = end_capture(s);
        } else if (IS("cuStreamBeginCapture_v2") || IS("cuStreamBeginCapture_v2_ptsz")) {
            rc = CALL(CUresult(*)(CUstream, CUstreamCaptureMode), s, CU_STREAM_CAPTURE_MODE_RELAXED);
            if (!rc)
                rc = end_capture(s);
        } else if (IS("cuStreamBeginCaptureToGraph") || IS("cuStreamBeginCaptureToGraph_ptsz")) {
            CUgraph into;
            cuGraphCreate(&into, 0);
            rc = CALL(CUresult(*)(CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                                  CUstreamCaptureMode), s, into, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL);
            if (!rc)
                rc = end_capture(s);
        } else if (IS("cuStreamEndCapture") || IS("cuStreamEndCapture_ptsz")) {
            CUgraph none;
            rc = CALL(CUresult(*)(CUstream, CUgraph *), s, &none);   /* no capture active */
            expect = CUDA_ERROR_ILLEGAL_STATE;
        } else if (IS("cuCtxSynchronize"))
            rc = CALL(CUresult(*)(void));
        else if (IS("cuCtxSynchronize_v2"))
            rc = CALL(CUresult(*)(CUcontext), primary);
        else if (IS("cuStreamSynchronize") || IS("cuStreamSynchronize_ptsz"))
            rc = CALL(CUresult(*)(CUstream), s);
        else if (IS("cuEventSynchronize")) {
            CUevent ev;
            cuEventCreate(&ev, 0);
            cuEventRecord(ev, s);
            rc = CALL(CUresult(*)(CUevent), ev);
            cuEventDestroy(ev);
        } else if (IS("cuMemcpy") || IS("cuMemcpy_ptds") || IS("cuMemcpyDtoD_v2") || IS("cuMemcpyDtoD_v2_ptds"))
            rc = CALL(CUresult(*)(CUdeviceptr, CUdeviceptr, size_t), b, a, 4096);
        else if (IS("cuMemcpyAsync") || IS("cuMemcpyAsync_ptsz") || IS("cuMemcpyDtoDAsync_v2") ||
                 IS("cuMemcpyDtoDAsync_v2_ptsz"))
            rc = CALL(CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream), b, a, 4096, s);
        else if (IS("cuMemsetD8_v2") || IS("cuMemsetD8_v2_ptds"))
            rc = CALL(CUresult(*)(CUdeviceptr, unsigned char, size_t), a, 1, 4096);
        else if (IS("cuMemsetD16_v2") || IS("cuMemsetD16_v2_ptds"))
            rc = CALL(CUresult(*)(CUdeviceptr, unsigned short, size_t), a, 1, 2048);
        else if (IS("cuMemsetD32_v2") || IS("cuMemsetD32_v2_ptds"))
            rc = CALL(CUresult(*)(CUdeviceptr, unsigned int, size_t), a, 1, 1024);
        else if (IS("cuMemsetD8Async") || IS("cuMemsetD8Async_ptsz"))
            rc = CALL(CUresult(*)(CUdeviceptr, unsigned char, size_t, CUstream), a, 1, 4096, s);
        else if (IS("cuMemsetD16Async") || IS("cuMemsetD16Async_ptsz"))
            rc = CALL(CUresult(*)(CUdeviceptr, unsigned short, size_t, CUstream), a, 1, 2048, s);
        else if (IS("cuMemsetD32Async") || IS("cuMemsetD32Async_ptsz"))
            rc = CALL(CUresult(*)(CUdeviceptr, unsigned int, size_t, CUstream), a, 1, 1024, s);
        else if (IS("cuMemsetD2D8_v2") || IS("cuMemsetD2D8_v2_ptds"))   /* 8 rows at a 512-byte pitch */
            rc = CALL(CUresult(*)(CUdeviceptr, size_t, unsigned char, size_t, size_t), a, 512, 1, 256, 8);
        else if (IS("cuMemsetD2D16_v2") || IS("cuMemsetD2D16_v2_ptds"))
            rc = CALL(CUresult(*)(CUdeviceptr, size_t, unsigned short, size_t, size_t), a, 512, 1, 128, 8);
        else if (IS("cuMemsetD2D32_v2") || IS("cuMemsetD2D32_v2_ptds"))
            rc = CALL(CUresult(*)(CUdeviceptr, size_t, unsigned int, size_t, size_t), a, 512, 1, 64, 8);
        else if (IS("cuMemsetD2D8Async") || IS("cuMemsetD2D8Async_ptsz"))
            rc = CALL(CUresult(*)(CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream), a, 512, 1, 256, 8, s);
        else if (IS("cuMemsetD2D16Async") || IS("cuMemsetD2D16Async_ptsz"))
            rc = CALL(CUresult(*)(CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream), a, 512, 1, 128, 8, s);
        else if (IS("cuMemsetD2D32Async") || IS("cuMemsetD2D32Async_ptsz"))
            rc = CALL(CUresult(*)(CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream), a, 512, 1, 64, 8, s);
        else if (IS("cuMemcpyAtoA_v2") || IS("cuMemcpyAtoA_v2_ptds"))
            rc = CALL(CUresult(*)(CUarray, size_t, CUarray, size_t, size_t), copy_arr_b, 0, copy_arr_a, 0, 4096);
        else if (IS("cuMemcpyDtoA_v2") || IS("cuMemcpyDtoA_v2_ptds"))
            rc = CALL(CUresult(*)(CUarray, size_t, CUdeviceptr, size_t), copy_arr_a, 0, a, 4096);
        else if (IS("cuMemcpyAtoD_v2") || IS("cuMemcpyAtoD_v2_ptds"))
            rc = CALL(CUresult(*)(CUdeviceptr, CUarray, size_t, size_t), b, copy_arr_a, 0, 4096);
        else if (IS("cuMemcpy2D_v2") || IS("cuMemcpy2D_v2_ptds") || IS("cuMemcpy2DUnaligned_v2") ||
                 IS("cuMemcpy2DUnaligned_v2_ptds"))
            rc = CALL(CUresult(*)(const CUDA_MEMCPY2D *), &c2);
        else if (IS("cuMemcpy2DAsync_v2") || IS("cuMemcpy2DAsync_v2_ptsz"))
            rc = CALL(CUresult(*)(const CUDA_MEMCPY2D *, CUstream), &c2, s);
        else if (IS("cuMemcpy3D_v2") || IS("cuMemcpy3D_v2_ptds"))
            rc = CALL(CUresult(*)(const CUDA_MEMCPY3D *), &c3);
        else if (IS("cuMemcpy3DAsync_v2") || IS("cuMemcpy3DAsync_v2_ptsz"))
            rc = CALL(CUresult(*)(const CUDA_MEMCPY3D *, CUstream), &c3, s);
        else if (IS("cuMemcpy3DPeer") || IS("cuMemcpy3DPeer_ptds"))
            rc = CALL(CUresult(*)(const CUDA_MEMCPY3D_PEER *), &c3p);
        else if (IS("cuMemcpy3DPeerAsync") || IS("cuMemcpy3DPeerAsync_ptsz"))
            rc = CALL(CUresult(*)(const CUDA_MEMCPY3D_PEER *, CUstream), &c3p, s);
        else if (IS("cuMemcpyPeer") || IS("cuMemcpyPeer_ptds"))
            rc = CALL(CUresult(*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t), b, primary, a, primary, 4096);
        else if (IS("cuMemcpyPeerAsync") || IS("cuMemcpyPeerAsync_ptsz"))
            rc = CALL(CUresult(*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream), b, primary, a,
                      primary, 4096, s);
        else if (IS("cuMemcpyBatchAsync") || IS("cuMemcpyBatchAsync_ptsz")) {
            size_t fail;
            rc = CALL(CUresult(*)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t,
                                  size_t *, CUstream), batch_dst, batch_src, batch_size, 2, batch_attr, batch_attr_idx, 1,
                      &fail, s);
        } else if (IS("cuMemcpyBatchAsync_v2") || IS("cuMemcpyBatchAsync_v2_ptsz"))
            rc = CALL(CUresult(*)(CUdeviceptr *, CUdeviceptr *, size_t *, size_t, CUmemcpyAttributes *, size_t *, size_t,
                                  CUstream), batch_dst, batch_src, batch_size, 2, batch_attr, batch_attr_idx, 1, s);
        else if (IS("cuMemAlloc"))
            rc = CALL(CUresult(*)(unsigned int *, unsigned int), &small, 4096);
        else if (IS("cuMemAlloc_v2"))
            rc = CALL(CUresult(*)(CUdeviceptr *, size_t), &p, MiB);
        else if (IS("cuMemAllocPitch_v2"))
            rc = CALL(CUresult(*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned), &b, &pitch, 4096, 4, 4);
        else if (IS("cuMemAllocManaged")) {
            CUdeviceptr q;
            rc = CALL(CUresult(*)(CUdeviceptr *, size_t, unsigned), &q, 64 * 1024, CU_MEM_ATTACH_GLOBAL);
        }
        else if (IS("cuMemAllocAsync") || IS("cuMemAllocAsync_ptsz")) {
            CUdeviceptr q;
            rc = CALL(CUresult(*)(CUdeviceptr *, size_t, CUstream), &q, MiB, s);
            if (!rc) ((CUresult(*)(CUdeviceptr, CUstream))dlsym(RTLD_DEFAULT, "cuMemFreeAsync"))(q, s);
        } else if (IS("cuMemAllocFromPoolAsync") || IS("cuMemAllocFromPoolAsync_ptsz")) {
            CUdeviceptr q;
            rc = CALL(CUresult(*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream), &q, MiB, pool, s);
            if (!rc) ((CUresult(*)(CUdeviceptr, CUstream))dlsym(RTLD_DEFAULT, "cuMemFreeAsync"))(q, s);
        } else if (IS("cuMemCreate"))
            rc = CALL(CUresult(*)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                  unsigned long long), &h, 2 * MiB, &prop, 0);
        else if (IS("cuArrayCreate_v2"))
            rc = CALL(CUresult(*)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *), &arr, &d2);
        else if (IS("cuArray3DCreate_v2"))
            rc = CALL(CUresult(*)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *), &arr3, &d3);
        else if (IS("cuMipmappedArrayCreate"))
            rc = CALL(CUresult(*)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned), &mip, &d3, 2);
        else if (IS("cuMemPoolTrimTo"))
            rc = CALL(CUresult(*)(CUmemoryPool, size_t), pool, 0);
        else if (IS("cuMemPoolDestroy")) {
            CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
            CUmemoryPool made;
            rc = cuMemPoolCreate(&made, &props);
            if (!rc)
                rc = CALL(CUresult(*)(CUmemoryPool), made);
        }
        else if (IS("cuMemMap")) {
            cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0);
            rc = CALL(CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long), va,
                      2 * MiB, 0, h, 0);
        } else if (IS("cuMemRetainAllocationHandle")) {
            /* table order puts it before cuMemMap: map first, then retain */
            cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0);
            ((CUresult(*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long))dlsym(
                RTLD_DEFAULT, "cuMemMap"))(va, 2 * MiB, 0, h, 0);
            rc = CALL(CUresult(*)(CUmemGenericAllocationHandle *, void *), &h2, (void *)(uintptr_t)va);
            if (!rc && h2 != h) rc = -2;
            ((CUresult(*)(CUmemGenericAllocationHandle))dlsym(RTLD_DEFAULT, "cuMemRelease"))(h2);
            ((CUresult(*)(CUdeviceptr, size_t))dlsym(RTLD_DEFAULT, "cuMemUnmap"))(va, 2 * MiB);
        } else if (IS("cuMemUnmap"))
            rc = CALL(CUresult(*)(CUdeviceptr, size_t), va, 2 * MiB);
        else if (IS("cuCtxCreate_v2") || IS("cuCtxCreate_v3") || IS("cuCtxCreate_v4")) {
            rc = IS("cuCtxCreate_v2") ? CALL(CUresult(*)(CUcontext *, unsigned, CUdevice), &created, 0, dev)
                 : IS("cuCtxCreate_v3") ? CALL(CUresult(*)(CUcontext *, void *, int, unsigned, CUdevice), &created, NULL,
                                               0, 0, dev)
                                        : CALL(CUresult(*)(CUcontext *, void *, unsigned, CUdevice), &created, NULL, 0,
                                               dev);
            if (!rc && !IS("cuCtxCreate_v4"))
                ((CUresult(*)(CUcontext))dlsym(RTLD_DEFAULT, "cuCtxDestroy_v2"))(created);
            cuCtxSetCurrent(primary);
        } else if (IS("cuCtxDestroy_v2")) {
            rc = CALL(CUresult(*)(CUcontext), created);
            cuCtxSetCurrent(primary);
        } else if (IS("cuDevicePrimaryCtxRetain")) {
            CUcontext again;
            rc = CALL(CUresult(*)(CUcontext *, CUdevice), &again, dev);
        } else if (IS("cuDevicePrimaryCtxRelease") || IS("cuDevicePrimaryCtxRelease_v2")) {
            rc = CALL(CUresult(*)(CUdevice), dev);   /* balanced by the retain above and a second one below */
            if (IS("cuDevicePrimaryCtxRelease")) {
                CUcontext again;
                ((CUresult(*)(CUcontext *, CUdevice))retain)(&again, dev);
            }
        } else if (IS("cuDevicePrimaryCtxReset") || IS("cuDevicePrimaryCtxReset_v2")) {
            cuCtxSynchronize();
            rc = CALL(CUresult(*)(CUdevice), dev);
            /* the reset freed the primary's allocations: make new ones for the rows after it */
            BY_NAME(CUresult(*)(CUdeviceptr *, size_t), "cuMemAlloc_v2")(&p, MiB);
            BY_NAME(CUresult(*)(unsigned int *, unsigned int), "cuMemAlloc")(&small, 4096);
            BY_NAME(CUresult(*)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *), "cuArrayCreate_v2")(&arr, &d2);
            BY_NAME(CUresult(*)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned),
                    "cuMipmappedArrayCreate")(&mip, &d3, 2);
        } else if (IS("cuMemFree"))
            rc = CALL(CUresult(*)(unsigned int), small);
        else if (IS("cuMemFree_v2"))
            rc = CALL(CUresult(*)(CUdeviceptr), p);
        else if (IS("cuMemFreeAsync") || IS("cuMemFreeAsync_ptsz")) {
            CUdeviceptr q;
            ((CUresult(*)(CUdeviceptr *, size_t, CUstream))dlsym(RTLD_DEFAULT, "cuMemAllocAsync"))(&q, MiB, s);
            rc = CALL(CUresult(*)(CUdeviceptr, CUstream), q, s);
        } else if (IS("cuMemRelease"))
            rc = CALL(CUresult(*)(CUmemGenericAllocationHandle), h);
        else if (IS("cuArrayDestroy"))
            rc = CALL(CUresult(*)(CUarray), arr);
        else if (IS("cuMipmappedArrayDestroy"))
            rc = CALL(CUresult(*)(CUmipmappedArray), mip);
        else if (IS("cuMemGetInfo")) {
            unsigned int fr, to;
            rc = CALL(CUresult(*)(unsigned int *, unsigned int *), &fr, &to);
        } else if (IS("cuMemGetInfo_v2"))
            rc = CALL(CUresult(*)(size_t *, size_t *), &free_b, &total);
        else if (IS("cuDeviceTotalMem")) {
            unsigned int to;
            rc = CALL(CUresult(*)(unsigned int *, CUdevice), &to, dev);
        } else if (IS("cuDeviceTotalMem_v2"))
            rc = CALL(CUresult(*)(size_t *, CUdevice), &total, dev);
        else if (IS("nvmlDeviceGetMemoryInfo"))
            rc = CALL(nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *), ndev, &m1);
        else if (IS("nvmlDeviceGetMemoryInfo_v2"))
            rc = CALL(nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *), ndev, &m2);
        else if (IS("nvmlDeviceGetComputeRunningProcesses"))
            rc = CALL(nvmlReturn_t(*)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_v1_t *), ndev, &n, pi1);
        else if (IS("nvmlDeviceGetComputeRunningProcesses_v2") || IS("nvmlDeviceGetComputeRunningProcesses_v3"))
            rc = CALL(nvmlReturn_t(*)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *), ndev, &n, pi);
        else if (IS("cuGetProcAddress"))
            rc = CALL(CUresult(*)(const char *, void **, int, cuuint64_t), "cuMemAlloc", &pfn, 3020, 0);
        else if (IS("cuGetProcAddress_v2"))
            rc = CALL(CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *),
                      "cuMemAlloc", &pfn, 3020, 0, &qs);
        else {
            printf("unhandled=%s\n", name);
            failures++;
            continue;
        }
        printf("row=%s rc=%d object=%s\n", name, rc, object_of(fn));
        if (rc != expect || strcmp(object_of(fn), "libgslice.so") != 0)
            failures++;
        cuStreamSynchronize(s);
    }
    /* The runtime's route: each driver row's base name (the name without
     * _ptsz/_ptds and _vN), asked of cuGetProcAddress_v2 at CUDA 13.0 with
     * the row's stream flavour, answers a shim wrapper. */
    CUresult (*proc)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
        BY_NAME(CUresult(*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *),
                "cuGetProcAddress_v2");
    int routed = 0;
    for (int i = 0; i < rows; i++) {
        const char *name = row_name(i);
        if (strncmp(name, "cu", 2) != 0)
            continue;
        char base[128];
        snprintf(base, sizeof base, "%s", name);
        int per_thread = 0;
        char *suffix = strstr(base, "_ptsz");
        if (!suffix)
            suffix = strstr(base, "_ptds");
        if (suffix) {
            *suffix = 0;
            per_thread = 1;
        }
        char *version = strrchr(base, '_');
        if (version && version[1] == 'v' && version[2] >= '0' && version[2] <= '9')
            *version = 0;
        void *pf = NULL;
        CUresult rc = proc(base, &pf, 13000, per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, &qs);
        if (rc || strcmp(object_of(pf), "libgslice.so") != 0) {
            printf("proc_unrouted=%s base=%s rc=%d object=%s\n", name, base, rc, object_of(pf));
            failures++;
        } else {
            routed++;
        }
    }
    printf("proc_routed=%d\n", routed);
    printf("failures=%d\n", failures);
    return failures ? 1 : 0;
}
