/* overrides: the exported entry points, thin, generated from
 * intercept_table.h. Each row yields the exported wrapper (calls the
 * pointer dlsym'd from the real library) and a hidden twin for the
 * cuGetProcAddress route (calls the pointer the real cuGetProcAddress
 * answered); both run the same impl_* core below, which forwards to the
 * token gate (launches) or the memory ledger (allocations, frees,
 * queries). */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "device_slot.h"
#include "intercept_table.h"
#include "log.h"
#include "memory_ledger.h"
#include "memory_pools.h"
#include "process_overhead.h"
#include "real_driver.h"
#include "shim.h"
#include "stream_capture.h"
#include "stream_frees.h"
#include "token_gate.h"

#define GS_UNPAREN(...) __VA_ARGS__
/* ", args" or nothing (a row without parameters): GNU comma elision. */
#define GS_AND_ARGS(...) , ##__VA_ARGS__

/* Function pointer type of every row: gs_pfn_<name>. */
#define GS_X_PFN(name, base, version, ptsz, lib, path, impl, ret, params, args) typedef ret(*gs_pfn_##name) params;
GS_INTERCEPT_TABLE(GS_X_PFN)
#undef GS_X_PFN

static inline void *real_cuda(void *const *slot)
{
    void *p = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (__builtin_expect(p == NULL, 0) && gs_real_cuda_load())
        p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    return p;
}

static inline void *real_nvml(void *const *slot)
{
    void *p = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (__builtin_expect(p == NULL, 0) && gs_real_nvml_load())
        p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    return p;
}

/* ---------------- launches: the token gate ---------------- */

/* The slow path of a launch (the inline fast path is in the generated
 * wrapper below, so it needs no stack frame and ends in a tail jump). */
#define GS_LAUNCH_CORE(pfn_type, stream, work, call_args)                                 \
    pfn_type fn = (pfn_type)real_cuda(real_slot);                                     \
    if (!fn)                                                                          \
        return CUDA_ERROR_NOT_INITIALIZED;                                            \
    gs_launch_ticket ticket;                                                          \
    gs_launch_begin(&ticket, (stream), ptsz, (work));                                \
    CUresult rc = fn call_args;                                                       \
    if (ticket.checkpoint)                                                            \
        gs_launch_end(&ticket, (stream), ptsz, rc);                                   \
    return rc;

static inline CUresult impl_launch_kernel(void *const *real_slot, int ptsz, CUfunction f, unsigned int gridDimX,
                                          unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,
                                          unsigned int blockDimY, unsigned int blockDimZ,
                                          unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                                          void **extra)
{
    GS_LAUNCH_CORE(gs_pfn_cuLaunchKernel, hStream, f, GS_LAUNCH_ARGS)
}

static inline CUresult impl_launch_kernel_ex(void *const *real_slot, int ptsz, const CUlaunchConfig *config,
                                             CUfunction f, void **kernelParams, void **extra)
{
    GS_LAUNCH_CORE(gs_pfn_cuLaunchKernelEx, config ? config->hStream : NULL, f, (config, f, kernelParams, extra))
}

static inline CUresult impl_launch_cooperative(void *const *real_slot, int ptsz, CUfunction f,
                                               unsigned int gridDimX, unsigned int gridDimY,
                                               unsigned int gridDimZ, unsigned int blockDimX,
                                               unsigned int blockDimY, unsigned int blockDimZ,
                                               unsigned int sharedMemBytes, CUstream hStream,
                                               void **kernelParams)
{
    GS_LAUNCH_CORE(gs_pfn_cuLaunchCooperativeKernel, hStream, f, GS_COOP_ARGS)
}

static CUresult graph_launch_gated(void *const *real_slot, int ptsz, CUgraphExec hGraphExec, CUstream hStream)
{
    GS_LAUNCH_CORE(gs_pfn_cuGraphLaunch, hStream, hGraphExec, (hGraphExec, hStream))
}

/* A graph with memory nodes takes its bytes from the graph memory pool:
 * the pool's growth is charged first (refused over the quota), its real
 * footprint after (memory_pools.h). The charge comes before the gate: a
 * refused launch never waits for or spends a slice, and no reservation's
 * round trip runs inside one; while the launch waits at the gate its
 * growth is in flight, so no reconciliation gives it back. cuGraphUpload
 * has the same signature and the same memory. */
static inline CUresult impl_graph_launch(void *const *real_slot, int ptsz, CUgraphExec hGraphExec,
                                         CUstream hStream)
{
    if (!__atomic_load_n(&gs_graph_memory_execs, __ATOMIC_ACQUIRE) || !gs_shim_metered() ||
        (gs_capture_any() && gs_capture_launch_is_captured(hStream, ptsz)))   /* a child graph node: nothing runs */
        return graph_launch_gated(real_slot, ptsz, hGraphExec, hStream);
    gs_pool_growth growth;
    if (!gs_graph_memory_charge(hGraphExec, &growth))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = graph_launch_gated(real_slot, ptsz, hGraphExec, hStream);
    gs_pool_growth_done(&growth);
    return rc;
}

/* Calls whose success changes what the ledger must know, after the fact. */
#define GS_AFTER_CORE(pfn_type, call_args, after)                                      \
    (void)ptsz;                                                                        \
    pfn_type fn = (pfn_type)real_cuda(real_slot);                                      \
    if (!fn)                                                                           \
        return CUDA_ERROR_NOT_INITIALIZED;                                             \
    CUresult rc = fn call_args;                                                        \
    if (rc == CUDA_SUCCESS && gs_shim_metered()) {                                     \
        after;                                                                         \
    }                                                                                  \
    return rc;

/* cuGraphUpload puts the graph's work and memory in place on the stream:
 * gated and charged like a launch. */
static inline CUresult impl_graph_upload(void *const *real_slot, int ptsz, CUgraphExec hGraphExec, CUstream hStream)
{
    return impl_graph_launch(real_slot, ptsz, hGraphExec, hStream);
}

static inline CUresult impl_graph_instantiate(void *const *real_slot, int ptsz, CUgraphExec *phGraphExec,
                                              CUgraph hGraph, unsigned long long flags)
{
    gs_slot *slot;
    GS_AFTER_CORE(gs_pfn_cuGraphInstantiateWithFlags, (phGraphExec, hGraph, flags),
                  if (phGraphExec && (slot = gs_shim_slot_for_allocation(NULL)))
                      gs_graph_memory_instantiated(&slot->ledger, *phGraphExec, hGraph))
}

static inline CUresult impl_graph_exec_destroy(void *const *real_slot, int ptsz, CUgraphExec hGraphExec)
{
    GS_AFTER_CORE(gs_pfn_cuGraphExecDestroy, (hGraphExec), gs_graph_memory_forget(hGraphExec); gs_pools_reconcile())
}

/* The graph memory pool gives back what no graph uses. */
static inline CUresult impl_graph_mem_trim(void *const *real_slot, int ptsz, CUdevice device)
{
    GS_AFTER_CORE(gs_pfn_cuDeviceGraphMemTrim, (device), gs_pools_reconcile())
}

/* Device-side copies and fills: the launch core with the row's own
 * function type (synchronous forms run on the legacy / per-thread stream),
 * keyed by kind and size for their length estimate. */
#define GS_COPY_IMPL(impl, pfn_type, params, stream, work, call_args)                  \
    static inline CUresult impl_##impl params                                          \
    {                                                                                  \
        GS_LAUNCH_CORE(pfn_type, stream, work, call_args)                                  \
    }
#ifndef GSLICE_TEST_CUT_COPY_WORK_KEYS   /* test-only build (hook/build.py TEST_CUTS) */
#define GS_COPY_KEY(bytes) gs_copy_work_key(GS_WORK_COPY, (bytes))
#define GS_FILL_KEY(bytes) gs_copy_work_key(GS_WORK_FILL, (bytes))
#else
#define GS_COPY_KEY(bytes) NULL
#define GS_FILL_KEY(bytes) NULL
#endif
GS_COPY_IMPL(copy_sync, gs_pfn_cuMemcpyDtoD_v2,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, CUdeviceptr src, size_t n), NULL, GS_COPY_KEY(n),
             (dst, src, n))
GS_COPY_IMPL(copy_async, gs_pfn_cuMemcpyDtoDAsync_v2,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream),
             hStream, GS_COPY_KEY(n), (dst, src, n, hStream))
GS_COPY_IMPL(fill8, gs_pfn_cuMemsetD8_v2, (void *const *real_slot, int ptsz, CUdeviceptr dst, unsigned char v, size_t n),
             NULL, GS_FILL_KEY(n), (dst, v, n))
GS_COPY_IMPL(fill16, gs_pfn_cuMemsetD16_v2,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, unsigned short v, size_t n), NULL, GS_FILL_KEY(2 * n),
             (dst, v, n))
GS_COPY_IMPL(fill32, gs_pfn_cuMemsetD32_v2, (void *const *real_slot, int ptsz, CUdeviceptr dst, unsigned int v, size_t n),
             NULL, GS_FILL_KEY(4 * n), (dst, v, n))
GS_COPY_IMPL(fill8_async, gs_pfn_cuMemsetD8Async,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, unsigned char v, size_t n, CUstream hStream),
             hStream, GS_FILL_KEY(n), (dst, v, n, hStream))
GS_COPY_IMPL(fill16_async, gs_pfn_cuMemsetD16Async,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, unsigned short v, size_t n, CUstream hStream),
             hStream, GS_FILL_KEY(2 * n), (dst, v, n, hStream))
GS_COPY_IMPL(fill32_async, gs_pfn_cuMemsetD32Async,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, unsigned int v, size_t n, CUstream hStream),
             hStream, GS_FILL_KEY(4 * n), (dst, v, n, hStream))
/* 2D fills (cudaMemset2D(Async)): Height rows of Width elements. */
GS_COPY_IMPL(fill2d8, gs_pfn_cuMemsetD2D8_v2,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h),
             NULL, GS_FILL_KEY(w * h), (dst, pitch, v, w, h))
GS_COPY_IMPL(fill2d16, gs_pfn_cuMemsetD2D16_v2,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h),
             NULL, GS_FILL_KEY(2 * w * h), (dst, pitch, v, w, h))
GS_COPY_IMPL(fill2d32, gs_pfn_cuMemsetD2D32_v2,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h),
             NULL, GS_FILL_KEY(4 * w * h), (dst, pitch, v, w, h))
GS_COPY_IMPL(fill2d8_async, gs_pfn_cuMemsetD2D8Async,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h,
              CUstream hStream),
             hStream, GS_FILL_KEY(w * h), (dst, pitch, v, w, h, hStream))
GS_COPY_IMPL(fill2d16_async, gs_pfn_cuMemsetD2D16Async,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h,
              CUstream hStream),
             hStream, GS_FILL_KEY(2 * w * h), (dst, pitch, v, w, h, hStream))
GS_COPY_IMPL(fill2d32_async, gs_pfn_cuMemsetD2D32Async,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h,
              CUstream hStream),
             hStream, GS_FILL_KEY(4 * w * h), (dst, pitch, v, w, h, hStream))
/* Copies between CUDA arrays and device memory: device-side, synchronous. */
GS_COPY_IMPL(copy_array_to_array, gs_pfn_cuMemcpyAtoA_v2,
             (void *const *real_slot, int ptsz, CUarray dst, size_t dst_offset, CUarray src, size_t src_offset,
              size_t n),
             NULL, GS_COPY_KEY(n), (dst, dst_offset, src, src_offset, n))
GS_COPY_IMPL(copy_device_to_array, gs_pfn_cuMemcpyDtoA_v2,
             (void *const *real_slot, int ptsz, CUarray dst, size_t dst_offset, CUdeviceptr src, size_t n), NULL,
             GS_COPY_KEY(n), (dst, dst_offset, src, n))
GS_COPY_IMPL(copy_array_to_device, gs_pfn_cuMemcpyAtoD_v2,
             (void *const *real_slot, int ptsz, CUdeviceptr dst, CUarray src, size_t src_offset, size_t n), NULL,
             GS_COPY_KEY(n), (dst, src, src_offset, n))
GS_COPY_IMPL(copy_peer, gs_pfn_cuMemcpyPeer, (void *const *real_slot, int ptsz, GS_UNPAREN GS_PEER_PARAMS), NULL,
             GS_COPY_KEY(ByteCount), GS_PEER_ARGS)
GS_COPY_IMPL(copy_peer_async, gs_pfn_cuMemcpyPeerAsync,
             (void *const *real_slot, int ptsz, GS_UNPAREN GS_PEER_ASYNC_PARAMS), hStream, GS_COPY_KEY(ByteCount),
             GS_PEER_ASYNC_ARGS)
/* A batch's copies: one launch of unknown length (the process's per launch). */
GS_COPY_IMPL(copy_batch, gs_pfn_cuMemcpyBatchAsync, (void *const *real_slot, int ptsz, GS_UNPAREN GS_BATCH_PARAMS),
             hStream, NULL, GS_BATCH_ARGS)
GS_COPY_IMPL(copy_batch_v2, gs_pfn_cuMemcpyBatchAsync_v2,
             (void *const *real_slot, int ptsz, GS_UNPAREN GS_BATCH_V2_PARAMS), hStream, NULL, GS_BATCH_V2_ARGS)
#undef GS_COPY_KEY
#undef GS_FILL_KEY

/* 2D / 3D copies name each side's memory type: a copy with a host side
 * runs on the copy engines and passes ungated (as cuMemcpyHtoD does);
 * device, array and unified sides take the launch core. */
static inline bool device_side_copy(CUmemorytype src, CUmemorytype dst)
{
    return src != CU_MEMORYTYPE_HOST && dst != CU_MEMORYTYPE_HOST;
}

#define GS_DESC_COPY_IMPL(impl, pfn_type, params, stream, call_args)                   \
    static inline CUresult impl_##impl params                                          \
    {                                                                                  \
        if (!pCopy || !device_side_copy(pCopy->srcMemoryType, pCopy->dstMemoryType)) { \
            pfn_type pass = (pfn_type)real_cuda(real_slot);                            \
            return pass ? pass call_args : CUDA_ERROR_NOT_INITIALIZED;                 \
        }                                                                              \
        GS_LAUNCH_CORE(pfn_type, stream, NULL, call_args)                                  \
    }
GS_DESC_COPY_IMPL(copy2d, gs_pfn_cuMemcpy2D_v2, (void *const *real_slot, int ptsz, const CUDA_MEMCPY2D *pCopy), NULL,
                  (pCopy))
GS_DESC_COPY_IMPL(copy2d_async, gs_pfn_cuMemcpy2DAsync_v2,
                  (void *const *real_slot, int ptsz, const CUDA_MEMCPY2D *pCopy, CUstream hStream), hStream,
                  (pCopy, hStream))
GS_DESC_COPY_IMPL(copy3d, gs_pfn_cuMemcpy3D_v2, (void *const *real_slot, int ptsz, const CUDA_MEMCPY3D *pCopy), NULL,
                  (pCopy))
GS_DESC_COPY_IMPL(copy3d_async, gs_pfn_cuMemcpy3DAsync_v2,
                  (void *const *real_slot, int ptsz, const CUDA_MEMCPY3D *pCopy, CUstream hStream), hStream,
                  (pCopy, hStream))
GS_DESC_COPY_IMPL(copy3d_peer, gs_pfn_cuMemcpy3DPeer,
                  (void *const *real_slot, int ptsz, const CUDA_MEMCPY3D_PEER *pCopy), NULL, (pCopy))
GS_DESC_COPY_IMPL(copy3d_peer_async, gs_pfn_cuMemcpy3DPeerAsync,
                  (void *const *real_slot, int ptsz, const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), hStream,
                  (pCopy, hStream))
#undef GS_DESC_COPY_IMPL
#undef GS_COPY_IMPL

/* ---------------- stream capture: count active captures ---------------- */

#define GS_CAPTURE_CORE(pfn_type, call_args, notify)                                   \
    (void)ptsz;                                                                        \
    pfn_type fn = (pfn_type)real_cuda(real_slot);                                      \
    if (!fn)                                                                           \
        return CUDA_ERROR_NOT_INITIALIZED;                                             \
    CUresult rc = fn call_args;                                                        \
    notify(rc);                                                                        \
    return rc;

static inline CUresult impl_capture_begin_v1(void *const *real_slot, int ptsz, CUstream hStream)
{
    GS_CAPTURE_CORE(gs_pfn_cuStreamBeginCapture, (hStream), gs_capture_began)
}

static inline CUresult impl_capture_begin(void *const *real_slot, int ptsz, CUstream hStream,
                                          CUstreamCaptureMode mode)
{
    GS_CAPTURE_CORE(gs_pfn_cuStreamBeginCapture_v2, (hStream, mode), gs_capture_began)
}

static inline CUresult impl_capture_begin_to_graph(void *const *real_slot, int ptsz, CUstream hStream,
                                                   CUgraph hGraph, const CUgraphNode *dependencies,
                                                   const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                   CUstreamCaptureMode mode)
{
    GS_CAPTURE_CORE(gs_pfn_cuStreamBeginCaptureToGraph, GS_CAPTURE_TO_GRAPH_ARGS, gs_capture_began)
}

static inline CUresult impl_capture_end(void *const *real_slot, int ptsz, CUstream hStream, CUgraph *phGraph)
{
    GS_CAPTURE_CORE(gs_pfn_cuStreamEndCapture, (hStream, phGraph), gs_capture_ended)
}

/* ---------------- synchronisations: a burst's end (gate_burst_end.c) ---------------- */
/* The application waited for its work: stream-ordered frees it queued
 * before are most likely done (stream_frees.h). */

static inline CUresult impl_ctx_synchronize(void *const *real_slot, int ptsz)
{
    GS_AFTER_CORE(gs_pfn_cuCtxSynchronize, (), gs_gate_after_app_sync(); gs_stream_frees_poll())
}

static inline CUresult impl_ctx_synchronize_v2(void *const *real_slot, int ptsz, CUcontext ctx)
{
    GS_AFTER_CORE(gs_pfn_cuCtxSynchronize_v2, (ctx), gs_gate_after_app_sync(); gs_stream_frees_poll())
}

static inline CUresult impl_stream_synchronize(void *const *real_slot, int ptsz, CUstream hStream)
{
    GS_AFTER_CORE(gs_pfn_cuStreamSynchronize, (hStream), gs_gate_after_app_sync(); gs_stream_frees_poll())
}

static inline CUresult impl_event_synchronize(void *const *real_slot, int ptsz, CUevent hEvent)
{
    GS_AFTER_CORE(gs_pfn_cuEventSynchronize, (hEvent), gs_gate_after_app_sync(); gs_stream_frees_poll())
}

/* ---------------- allocations: reserve first, then the real call ---------------- */

/* Reserve bytes on slot's account; false means answer CUDA_ERROR_OUT_OF_MEMORY.
 * The context's growth since the last look is charged first
 * (process_overhead.h). */
static bool reserve_on(gs_slot *slot, uint64_t bytes, const char *what, bool *reserved)
{
    *reserved = false;
    if (!slot)
        return true;
    gs_stream_frees_poll();   /* a stream-ordered free done meanwhile is room */
    if (!gs_overhead_before_reserve(slot, bytes, what))
        return false;
    int r = gs_ledger_reserve(&slot->ledger, bytes, what);
    if (r == GS_RESERVE_REFUSED || r == GS_RESERVE_UNAVAILABLE)
        return false;
    *reserved = r == GS_RESERVE_GRANTED;
    return true;
}

/* Reserve for an allocation in the current context. */
static bool alloc_reserve(gs_slot **slot, CUcontext *ctx, uint64_t bytes, const char *what, bool *reserved)
{
    *slot = gs_shim_slot_for_allocation(ctx);
    return reserve_on(*slot, bytes, what, reserved);
}

/* After the real call: track it, or give the reservation back. */
static CUresult alloc_finish(gs_slot *slot, CUresult rc, int kind, uint64_t key, uint64_t bytes, bool reserved,
                             CUcontext ctx)
{
    if (!slot)
        return rc;
    if (rc != CUDA_SUCCESS) {
        if (reserved)
            gs_ledger_give_back(&slot->ledger, bytes);
        return rc;
    }
    gs_ledger_entry entry = {&slot->ledger, bytes, reserved, ctx};
    gs_ledger_track(kind, key, &entry);
    return rc;
}

#define GS_ALLOC_CORE(pfn_type, what, bytes, call_args, kind, key_expr)                \
    pfn_type fn = (pfn_type)real_cuda(real_slot);                                      \
    if (!fn)                                                                           \
        return CUDA_ERROR_NOT_INITIALIZED;                                             \
    gs_slot *slot;                                                                     \
    CUcontext ctx;                                                                     \
    bool reserved;                                                                     \
    uint64_t want = (bytes);                                                           \
    if (!alloc_reserve(&slot, &ctx, want, what, &reserved))                            \
        return CUDA_ERROR_OUT_OF_MEMORY;                                               \
    CUresult rc = fn call_args;                                                        \
    return alloc_finish(slot, rc, kind, rc == CUDA_SUCCESS ? (uint64_t)(key_expr) : 0, want, reserved, ctx);

static inline CUresult impl_mem_alloc_v1(void *const *real_slot, int ptsz, unsigned int *dptr,
                                         unsigned int bytesize)
{
    (void)ptsz;
    GS_ALLOC_CORE(gs_pfn_cuMemAlloc, "cuMemAlloc", bytesize, (dptr, bytesize), GS_ALLOC_DEVICE_PTR, *dptr)
}

static inline CUresult impl_mem_alloc(void *const *real_slot, int ptsz, CUdeviceptr *dptr, size_t bytesize)
{
    (void)ptsz;
    GS_ALLOC_CORE(gs_pfn_cuMemAlloc_v2, "cuMemAlloc", bytesize, (dptr, bytesize), GS_ALLOC_DEVICE_PTR, *dptr)
}

static inline CUresult impl_mem_alloc_managed(void *const *real_slot, int ptsz, CUdeviceptr *dptr,
                                              size_t bytesize, unsigned int flags)
{
    (void)ptsz;
    GS_ALLOC_CORE(gs_pfn_cuMemAllocManaged, "cuMemAllocManaged", bytesize, (dptr, bytesize, flags),
                  GS_ALLOC_DEVICE_PTR, *dptr)
}

/* Stream-ordered allocations are charged by the pool's footprint
 * (memory_pools.h): the growth the pool needs before the call, the pool's
 * real footprint after it. Into a capturing stream the allocation becomes
 * a graph mem alloc node: the graph memory pool pays for it at launch. */
#define GS_POOL_ALLOC_CORE(pfn_type, call_args, pool_expr)                             \
    pfn_type fn = (pfn_type)real_cuda(real_slot);                                      \
    if (!fn)                                                                           \
        return CUDA_ERROR_NOT_INITIALIZED;                                             \
    gs_slot *slot = gs_shim_slot_for_allocation(NULL);                                 \
    if (!slot || (gs_capture_any() && gs_capture_launch_is_captured(hStream, ptsz)))   \
        return fn call_args;                                                           \
    CUmemoryPool from = (pool_expr);                                                   \
    gs_pool_growth growth = {from, -1, 0, 0, false, false};                            \
    gs_stream_frees_poll();                                                            \
    if (from && (!gs_overhead_before_reserve(slot, bytesize, "cuMemAllocAsync") ||     \
                 !gs_pool_charge_growth(&slot->ledger, from, bytesize, &growth)))      \
        return CUDA_ERROR_OUT_OF_MEMORY;                                               \
    CUresult rc = fn call_args;                                                        \
    gs_pool_growth_done(&growth);                                                      \
    return rc;

static inline CUresult impl_mem_alloc_async(void *const *real_slot, int ptsz, CUdeviceptr *dptr,
                                            size_t bytesize, CUstream hStream)
{
    GS_POOL_ALLOC_CORE(gs_pfn_cuMemAllocAsync, (dptr, bytesize, hStream), gs_pool_current())
}

static inline CUresult impl_mem_alloc_from_pool(void *const *real_slot, int ptsz, CUdeviceptr *dptr,
                                                size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    GS_POOL_ALLOC_CORE(gs_pfn_cuMemAllocFromPoolAsync, (dptr, bytesize, pool, hStream), pool)
}

/* The pool gives memory back when it trims (or at a synchronisation above
 * its release threshold, seen at the next pool operation or query). */
static inline CUresult impl_mem_pool_trim(void *const *real_slot, int ptsz, CUmemoryPool pool, size_t minBytesToKeep)
{
    GS_AFTER_CORE(gs_pfn_cuMemPoolTrimTo, (pool, minBytesToKeep), gs_pools_reconcile())
}

/* A destroyed pool is forgotten (its handle value may come back for a new
 * pool) and its charge given back, unless blocks allocated from it are
 * still outstanding: the driver then frees its memory only after them. */
static inline CUresult impl_mem_pool_destroy(void *const *real_slot, int ptsz, CUmemoryPool pool)
{
    (void)ptsz;
    gs_pfn_cuMemPoolDestroy fn = (gs_pfn_cuMemPoolDestroy)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!gs_shim_metered())
        return fn(pool);
    uint64_t outstanding = gs_pool_before_destroy(pool);
    CUresult rc = fn(pool);
    if (rc == CUDA_SUCCESS)
        gs_pool_destroyed(pool, outstanding);
    return rc;
}

/* Virtual memory: charged at creation for device locations only, to the
 * device the location names (host / host-NUMA memory is not device
 * memory). The handle keeps its charge until every reference is released
 * and every mapping unmapped (memory_ledger.h). */
static inline CUresult impl_mem_create(void *const *real_slot, int ptsz, CUmemGenericAllocationHandle *handle,
                                       size_t size, const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)ptsz;
    gs_pfn_cuMemCreate fn = (gs_pfn_cuMemCreate)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!gs_shim_metered() || !prop || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return fn(handle, size, prop, flags);
    gs_slot *slot = gs_slot_for_device(prop->location.id);
    bool reserved;
    if (!reserve_on(slot, size, "cuMemCreate", &reserved))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = fn(handle, size, prop, flags);
    return alloc_finish(slot, rc, GS_ALLOC_VMM_HANDLE, rc == CUDA_SUCCESS ? (uint64_t)*handle : 0, size, reserved,
                        NULL);
}

static inline CUresult impl_mem_retain_handle(void *const *real_slot, int ptsz, CUmemGenericAllocationHandle *handle,
                                              void *addr)
{
    /* the same handle value, one more reference */
    GS_AFTER_CORE(gs_pfn_cuMemRetainAllocationHandle, (handle, addr), if (handle) gs_ledger_vmm_retain(*handle))
}

static inline CUresult impl_mem_map(void *const *real_slot, int ptsz, CUdeviceptr ptr, size_t size, size_t offset,
                                    CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    GS_AFTER_CORE(gs_pfn_cuMemMap, (ptr, size, offset, handle, flags), gs_ledger_vmm_mapped(ptr, size, handle))
}

static inline CUresult impl_mem_unmap(void *const *real_slot, int ptsz, CUdeviceptr ptr, size_t size)
{
    GS_AFTER_CORE(gs_pfn_cuMemUnmap, (ptr, size), gs_ledger_vmm_unmapped(ptr, size))
}

static uint64_t array_bytes(size_t width, size_t height, size_t depth, unsigned int channels,
                            CUarray_format format)
{
    uint64_t h = height ? height : 1, d = depth ? depth : 1;
    return (uint64_t)width * h * d * channels * cuda_abi_format_bytes(format);
}

static inline CUresult impl_array_create(void *const *real_slot, int ptsz, CUarray *pHandle,
                                         const CUDA_ARRAY_DESCRIPTOR *desc)
{
    (void)ptsz;
    GS_ALLOC_CORE(gs_pfn_cuArrayCreate_v2, "cuArrayCreate",
                  desc ? array_bytes(desc->Width, desc->Height, 1, desc->NumChannels, desc->Format) : 0,
                  (pHandle, desc), GS_ALLOC_ARRAY, (uintptr_t)*pHandle)
}

static inline CUresult impl_array3d_create(void *const *real_slot, int ptsz, CUarray *pHandle,
                                           const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    (void)ptsz;
    GS_ALLOC_CORE(gs_pfn_cuArray3DCreate_v2, "cuArray3DCreate",
                  desc ? array_bytes(desc->Width, desc->Height, desc->Depth, desc->NumChannels, desc->Format) : 0,
                  (pHandle, desc), GS_ALLOC_ARRAY, (uintptr_t)*pHandle)
}

/* Every level of the mip chain, each dimension halving down to 1. */
static uint64_t mipmapped_bytes(const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels)
{
    if (!desc)
        return 0;
    uint64_t total = 0;
    size_t w = desc->Width, h = desc->Height, d = desc->Depth;
    for (unsigned int i = 0; i < (levels ? levels : 1) && i < 64; i++) {
        total += array_bytes(w, h, d, desc->NumChannels, desc->Format);
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    return total;
}

static inline CUresult impl_mipmapped_array_create(void *const *real_slot, int ptsz, CUmipmappedArray *pHandle,
                                                   const CUDA_ARRAY3D_DESCRIPTOR *pDesc,
                                                   unsigned int numMipmapLevels)
{
    (void)ptsz;
    GS_ALLOC_CORE(gs_pfn_cuMipmappedArrayCreate, "cuMipmappedArrayCreate", mipmapped_bytes(pDesc, numMipmapLevels),
                  (pHandle, pDesc, numMipmapLevels), GS_ALLOC_MIPMAPPED, (uintptr_t)*pHandle)
}

/* Pitch is known only after the call: reserve the worst case (rows
 * rounded up to 512 bytes), then settle on pitch x Height. */
static inline CUresult impl_mem_alloc_pitch(void *const *real_slot, int ptsz, CUdeviceptr *dptr, size_t *pPitch,
                                            size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes)
{
    (void)ptsz;
    gs_pfn_cuMemAllocPitch_v2 fn = (gs_pfn_cuMemAllocPitch_v2)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    gs_slot *slot;
    CUcontext ctx;
    bool reserved;
    uint64_t worst = ((uint64_t)WidthInBytes + 511u) / 512u * 512u * (uint64_t)Height;
    if (!alloc_reserve(&slot, &ctx, worst, "cuMemAllocPitch", &reserved))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = fn(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (rc != CUDA_SUCCESS || !slot)
        return alloc_finish(slot, rc, GS_ALLOC_DEVICE_PTR, 0, worst, reserved, ctx);
    /* charged: what is reserved for it now, given back at its free */
    uint64_t actual = (uint64_t)*pPitch * (uint64_t)Height, charged = worst;
    if (reserved && actual < worst) {
        gs_ledger_give_back(&slot->ledger, worst - actual);
        charged = actual;
    } else if (reserved && actual > worst) {
        int r = gs_ledger_reserve(&slot->ledger, actual - worst, "cuMemAllocPitch (pitch above 512-byte rows)");
        if (r == GS_RESERVE_REFUSED || r == GS_RESERVE_UNAVAILABLE) {
            gs_pfn_cuMemFree_v2 free_fn = (gs_pfn_cuMemFree_v2)real_cuda(&gs_real_exported[GS_ID_cuMemFree_v2]);
            if (free_fn)
                free_fn(*dptr);
            gs_ledger_give_back(&slot->ledger, worst);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        if (r == GS_RESERVE_GRANTED)
            charged = actual;   /* else unmetered by policy: only the worst case was reserved */
    }
    return alloc_finish(slot, rc, GS_ALLOC_DEVICE_PTR, *dptr, charged, reserved, ctx);
}

/* ---------------- frees: forget first, give back after ---------------- */

/* Untrack before the real free: once the driver frees, it may hand the
 * same address to another thread, whose tracking must not be undone by
 * ours. An unknown key releases nothing and goes to the driver untouched. */
#define GS_FREE_CORE(pfn_type, kind, key, call_args)                                   \
    pfn_type fn = (pfn_type)real_cuda(real_slot);                                      \
    if (!fn)                                                                           \
        return CUDA_ERROR_NOT_INITIALIZED;                                             \
    if (!gs_shim_metered())                                                            \
        return fn call_args;                                                           \
    gs_ledger_entry entry;                                                             \
    bool known = gs_ledger_take(kind, (uint64_t)(key), &entry);                        \
    CUresult rc = fn call_args;                                                        \
    if (known && rc == CUDA_SUCCESS && entry.reserved)                                 \
        gs_ledger_give_back(entry.account, entry.bytes);                               \
    else if (known && rc != CUDA_SUCCESS)                                              \
        gs_ledger_track(kind, (uint64_t)(key), &entry);                                \
    return rc;

static inline CUresult impl_mem_free_v1(void *const *real_slot, int ptsz, unsigned int dptr)
{
    (void)ptsz;
    GS_FREE_CORE(gs_pfn_cuMemFree, GS_ALLOC_DEVICE_PTR, dptr, (dptr))
}

static inline CUresult impl_mem_free(void *const *real_slot, int ptsz, CUdeviceptr dptr)
{
    (void)ptsz;
    GS_FREE_CORE(gs_pfn_cuMemFree_v2, GS_ALLOC_DEVICE_PTR, dptr, (dptr))
}

/* A pool's block goes back to its pool, which may keep it: the pool's
 * charge follows its footprint. A block charged by itself (cuMemAlloc*,
 * managed) is freed by the driver only when the stream reaches the free:
 * its charge goes then, not at the call (stream_frees.h). Into a
 * capturing stream the free is a graph node: nothing is given back. */
static inline CUresult impl_mem_free_async(void *const *real_slot, int ptsz, CUdeviceptr dptr, CUstream hStream)
{
    gs_pfn_cuMemFreeAsync fn = (gs_pfn_cuMemFreeAsync)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!gs_shim_metered() || (gs_capture_any() && gs_capture_launch_is_captured(hStream, ptsz)))
        return fn(dptr, hStream);
    gs_stream_frees_poll();
    gs_ledger_entry entry;
    bool known = gs_ledger_take(GS_ALLOC_DEVICE_PTR, (uint64_t)dptr, &entry);
    CUresult rc = fn(dptr, hStream);
    if (known && rc == CUDA_SUCCESS)
        gs_stream_free_queued(&entry, dptr, hStream, ptsz);
    else if (known)
        gs_ledger_track(GS_ALLOC_DEVICE_PTR, (uint64_t)dptr, &entry);
    if (rc == CUDA_SUCCESS)
        gs_pools_reconcile();
    return rc;
}

/* One reference dropped; the charge goes when no reference and no mapping
 * is left (release right after map is a common, legal pattern). */
static inline CUresult impl_mem_release(void *const *real_slot, int ptsz, CUmemGenericAllocationHandle handle)
{
    (void)ptsz;
    gs_pfn_cuMemRelease fn = (gs_pfn_cuMemRelease)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!gs_shim_metered())
        return fn(handle);
    bool freed = false;
    gs_ledger_entry entry;
    bool known = gs_ledger_vmm_release(handle, &freed, &entry);
    CUresult rc = fn(handle);
    if (known && rc != CUDA_SUCCESS)
        gs_ledger_vmm_unrelease(handle, freed, &entry);
    else if (known && freed && entry.reserved)
        gs_ledger_give_back(entry.account, entry.bytes);
    return rc;
}

static inline CUresult impl_array_destroy(void *const *real_slot, int ptsz, CUarray hArray)
{
    (void)ptsz;
    GS_FREE_CORE(gs_pfn_cuArrayDestroy, GS_ALLOC_ARRAY, (uintptr_t)hArray, (hArray))
}

static inline CUresult impl_mipmapped_array_destroy(void *const *real_slot, int ptsz, CUmipmappedArray h)
{
    (void)ptsz;
    GS_FREE_CORE(gs_pfn_cuMipmappedArrayDestroy, GS_ALLOC_MIPMAPPED, (uintptr_t)h, (h))
}

/* ---------------- contexts: their hidden memory, and teardown ---------------- */

/* Each context costs device memory no allocation call shows (context
 * state, module code, device heap and stacks): GSLICE_CONTEXT_RESERVE_MIB
 * is charged per context, on the device's account, before the context is
 * made. Destroying a context (or the last release / a reset of a primary
 * context) frees its allocations in the driver without free calls: their
 * entries go too. */
static CUresult context_made(gs_slot *slot, CUresult rc, CUcontext ctx, bool reserved)
{
    rc = alloc_finish(slot, rc, GS_ALLOC_CONTEXT, (uint64_t)(uintptr_t)ctx, gs_config_get()->context_reserve,
                      reserved, ctx);
    if (slot && rc == CUDA_SUCCESS)
        gs_overhead_reconcile(slot);
    return rc;
}

static void context_gone(CUcontext ctx)
{
    gs_ledger_entry entry;
    if (gs_ledger_take(GS_ALLOC_CONTEXT, (uint64_t)(uintptr_t)ctx, &entry) && entry.reserved)
        gs_ledger_give_back(entry.account, entry.bytes);
    gs_ledger_release_context(ctx);
    gs_stream_frees_context_gone(ctx);
}

#define GS_CTX_CREATE_CORE(pfn_type, call_args, dev)                                   \
    (void)ptsz;                                                                        \
    pfn_type fn = (pfn_type)real_cuda(real_slot);                                      \
    if (!fn)                                                                           \
        return CUDA_ERROR_NOT_INITIALIZED;                                             \
    gs_slot *slot = gs_shim_metered() ? gs_slot_for_device(dev) : NULL;                \
    bool reserved;                                                                     \
    if (!reserve_on(slot, gs_config_get()->context_reserve, "context (GSLICE_CONTEXT_RESERVE_MIB)", &reserved)) \
        return CUDA_ERROR_OUT_OF_MEMORY;                                               \
    CUresult rc = fn call_args;                                                        \
    return context_made(slot, rc, rc == CUDA_SUCCESS && pctx ? *pctx : NULL, reserved);

static inline CUresult impl_ctx_create(void *const *real_slot, int ptsz, CUcontext *pctx, unsigned int flags,
                                       CUdevice dev)
{
    GS_CTX_CREATE_CORE(gs_pfn_cuCtxCreate_v2, (pctx, flags, dev), dev)
}

static inline CUresult impl_ctx_create_v3(void *const *real_slot, int ptsz, CUcontext *pctx,
                                          CUexecAffinityParam *params, int numParams, unsigned int flags,
                                          CUdevice dev)
{
    GS_CTX_CREATE_CORE(gs_pfn_cuCtxCreate_v3, (pctx, params, numParams, flags, dev), dev)
}

static inline CUresult impl_ctx_create_v4(void *const *real_slot, int ptsz, CUcontext *pctx,
                                          CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
    GS_CTX_CREATE_CORE(gs_pfn_cuCtxCreate_v4, (pctx, params, flags, dev), dev)
}

static inline CUresult impl_ctx_destroy(void *const *real_slot, int ptsz, CUcontext ctx)
{
    GS_AFTER_CORE(gs_pfn_cuCtxDestroy_v2, (ctx), context_gone(ctx))
}

/* Primary contexts: made at the first retain, destroyed at the last
 * release; what this process retained, per device. */
#define GS_MAX_DEVICES 64
static pthread_mutex_t primary_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned primary_retains[GS_MAX_DEVICES];
static CUcontext primary_ctx[GS_MAX_DEVICES];

/* fork(): the child has no contexts (its first retain makes one again). */
void gs_contexts_fork_child(void)
{
    pthread_mutex_init(&primary_mu, NULL);
    memset(primary_retains, 0, sizeof primary_retains);
    memset(primary_ctx, 0, sizeof primary_ctx);
}

static inline CUresult impl_primary_retain(void *const *real_slot, int ptsz, CUcontext *pctx, CUdevice dev)
{
    (void)ptsz;
    gs_pfn_cuDevicePrimaryCtxRetain fn = (gs_pfn_cuDevicePrimaryCtxRetain)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!gs_shim_metered() || dev < 0 || dev >= GS_MAX_DEVICES)
        return fn(pctx, dev);
    pthread_mutex_lock(&primary_mu);
    bool first = primary_retains[dev] == 0;
    gs_slot *slot = first ? gs_slot_for_device(dev) : NULL;
    bool reserved;
    if (!reserve_on(slot, gs_config_get()->context_reserve, "primary context (GSLICE_CONTEXT_RESERVE_MIB)",
                    &reserved)) {
        pthread_mutex_unlock(&primary_mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    CUresult rc = fn(pctx, dev);
    if (rc == CUDA_SUCCESS) {
        primary_retains[dev]++;
        primary_ctx[dev] = pctx ? *pctx : NULL;
    }
    context_made(slot, rc, rc == CUDA_SUCCESS && pctx ? *pctx : NULL, reserved);
    pthread_mutex_unlock(&primary_mu);
    return rc;
}

/* release: 1 for cuDevicePrimaryCtxRelease (the last one destroys the
 * context), 0 for cuDevicePrimaryCtxReset (frees its allocations). */
static CUresult primary_release_or_reset(void *const *real_slot, CUdevice dev, bool release)
{
    gs_pfn_cuDevicePrimaryCtxRelease_v2 fn = (gs_pfn_cuDevicePrimaryCtxRelease_v2)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!gs_shim_metered() || dev < 0 || dev >= GS_MAX_DEVICES)
        return fn(dev);
    pthread_mutex_lock(&primary_mu);
    CUresult rc = fn(dev);
    CUcontext ctx = primary_ctx[dev];
    if (rc == CUDA_SUCCESS && ctx) {
        if (!release) {
            gs_ledger_release_context(ctx);
            gs_stream_frees_context_gone(ctx);
        } else if (primary_retains[dev] > 0 && --primary_retains[dev] == 0)
            context_gone(ctx);
    }
    pthread_mutex_unlock(&primary_mu);
    return rc;
}

static inline CUresult impl_primary_release(void *const *real_slot, int ptsz, CUdevice dev)
{
    (void)ptsz;
    return primary_release_or_reset(real_slot, dev, true);
}

static inline CUresult impl_primary_reset(void *const *real_slot, int ptsz, CUdevice dev)
{
    (void)ptsz;
    return primary_release_or_reset(real_slot, dev, false);
}

/* ---------------- memory queries: the group's view ---------------- */

/* total = min(quota, physical); free = total - used, floored at 0 and
 * never above what the driver says is really free. */
static bool group_view(gs_slot *slot, uint64_t real_total, uint64_t real_free, uint64_t *total, uint64_t *free_out,
                       uint64_t *used_out)
{
    uint64_t quota, used, physical;
    if (!slot || !gs_ledger_view(&slot->ledger, &quota, &used, &physical))
        return false;
    uint64_t limit = quota && quota < real_total ? quota : real_total;
    uint64_t left = limit > used ? limit - used : 0;
    *total = limit;
    *free_out = left < real_free ? left : real_free;
    if (used_out)
        *used_out = used;
    return true;
}

static inline CUresult impl_mem_get_info(void *const *real_slot, int ptsz, size_t *free_bytes, size_t *total_bytes)
{
    (void)ptsz;
    gs_pfn_cuMemGetInfo_v2 fn = (gs_pfn_cuMemGetInfo_v2)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = fn(free_bytes, total_bytes);
    if (rc != CUDA_SUCCESS || !free_bytes || !total_bytes || !gs_shim_metered())
        return rc;
    gs_slot *slot = gs_slot_for_current_context(NULL);
    if (slot)
        gs_graph_pool_watch(&slot->ledger);
    gs_stream_frees_poll();
    gs_pools_reconcile();
    gs_overhead_reconcile(slot);
    uint64_t total, left;
    if (group_view(slot, *total_bytes, *free_bytes, &total, &left, NULL)) {
        *total_bytes = (size_t)total;
        *free_bytes = (size_t)left;
    }
    return rc;
}

static inline CUresult impl_mem_get_info_v1(void *const *real_slot, int ptsz, unsigned int *free_bytes,
                                            unsigned int *total_bytes)
{
    (void)ptsz;
    gs_pfn_cuMemGetInfo fn = (gs_pfn_cuMemGetInfo)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = fn(free_bytes, total_bytes);
    if (rc != CUDA_SUCCESS || !free_bytes || !total_bytes || !gs_shim_metered())
        return rc;
    uint64_t total, left;
    if (group_view(gs_slot_for_current_context(NULL), *total_bytes, *free_bytes, &total, &left, NULL)) {
        *total_bytes = total > UINT_MAX ? UINT_MAX : (unsigned int)total;
        *free_bytes = left > UINT_MAX ? UINT_MAX : (unsigned int)left;
    }
    return rc;
}

static inline CUresult impl_device_total_mem(void *const *real_slot, int ptsz, size_t *bytes, CUdevice dev)
{
    (void)ptsz;
    gs_pfn_cuDeviceTotalMem_v2 fn = (gs_pfn_cuDeviceTotalMem_v2)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = fn(bytes, dev);
    if (rc != CUDA_SUCCESS || !bytes || !gs_shim_metered())
        return rc;
    uint64_t total, left;
    if (group_view(gs_slot_for_device(dev), *bytes, *bytes, &total, &left, NULL))
        *bytes = (size_t)total;
    return rc;
}

static inline CUresult impl_device_total_mem_v1(void *const *real_slot, int ptsz, unsigned int *bytes, CUdevice dev)
{
    (void)ptsz;
    gs_pfn_cuDeviceTotalMem fn = (gs_pfn_cuDeviceTotalMem)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = fn(bytes, dev);
    if (rc != CUDA_SUCCESS || !bytes || !gs_shim_metered())
        return rc;
    uint64_t total, left;
    if (group_view(gs_slot_for_device(dev), *bytes, *bytes, &total, &left, NULL))
        *bytes = total > UINT_MAX ? UINT_MAX : (unsigned int)total;
    return rc;
}

/* NVML's two memory structs carry the same three numbers: rewrite them
 * to the group's view (what nvidia-smi shows inside the container). */
static bool nvml_group_view(nvmlDevice_t device, unsigned long long *total, unsigned long long *free_bytes,
                            unsigned long long *used_bytes)
{
    uint64_t view_total, left, used;
    if (!gs_shim_metered())
        return false;
    gs_stream_frees_poll();
    gs_pools_reconcile();
    gs_slot *slot = gs_slot_for_nvml_device(device);
    gs_overhead_reconcile(slot);
    if (!group_view(slot, *total, *free_bytes, &view_total, &left, &used))
        return false;
    *total = view_total;
    *free_bytes = left;
    *used_bytes = used < view_total ? used : view_total;
    return true;
}

static inline nvmlReturn_t impl_nvml_memory_info(void *const *real_slot, int ptsz, nvmlDevice_t device,
                                                 nvmlMemory_t *memory)
{
    (void)ptsz;
    gs_pfn_nvmlDeviceGetMemoryInfo fn = (gs_pfn_nvmlDeviceGetMemoryInfo)real_nvml(real_slot);
    if (!fn)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = fn(device, memory);
    if (rc == NVML_SUCCESS && memory)
        nvml_group_view(device, &memory->total, &memory->free, &memory->used);
    return rc;
}

static inline nvmlReturn_t impl_nvml_memory_info_v2(void *const *real_slot, int ptsz, nvmlDevice_t device,
                                                    nvmlMemory_v2_t *memory)
{
    (void)ptsz;
    gs_pfn_nvmlDeviceGetMemoryInfo_v2 fn = (gs_pfn_nvmlDeviceGetMemoryInfo_v2)real_nvml(real_slot);
    if (!fn)
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlReturn_t rc = fn(device, memory);
    if (rc == NVML_SUCCESS && memory && nvml_group_view(device, &memory->total, &memory->free, &memory->used))
        memory->reserved = 0;   /* the group's view has no driver-reserved part */
    return rc;
}

/* NVML's process listing inside a group shows the group's processes only
 * (tokend's list of the group's clients on this GPU); other devices and
 * unmetered processes see the driver's list. */
#define GS_NVML_PROCESSES_CORE(pfn_type)                                               \
    (void)ptsz;                                                                        \
    pfn_type fn = (pfn_type)real_nvml(real_slot);                                      \
    if (!fn)                                                                           \
        return NVML_ERROR_FUNCTION_NOT_FOUND;                                          \
    nvmlReturn_t rc = fn(device, infoCount, infos);                                    \
    if (rc != NVML_SUCCESS || !infoCount || !infos || !gs_shim_metered())              \
        return rc;                                                                     \
    gs_slot *slot = gs_slot_for_nvml_device(device);                                   \
    uint64_t quota, used, physical;                                                    \
    if (!slot || !gs_ledger_view(&slot->ledger, &quota, &used, &physical))             \
        return rc;                                                                     \
    unsigned int kept = 0;                                                             \
    for (unsigned int i = 0; i < *infoCount; i++)                                      \
        if (gs_ledger_group_has_pid(&slot->ledger, infos[i].pid))                      \
            infos[kept++] = infos[i];                                                  \
    *infoCount = kept;                                                                 \
    return rc;

static inline nvmlReturn_t impl_nvml_processes_v1(void *const *real_slot, int ptsz, nvmlDevice_t device,
                                                  unsigned int *infoCount, nvmlProcessInfo_v1_t *infos)
{
    GS_NVML_PROCESSES_CORE(gs_pfn_nvmlDeviceGetComputeRunningProcesses)
}

static inline nvmlReturn_t impl_nvml_processes(void *const *real_slot, int ptsz, nvmlDevice_t device,
                                               unsigned int *infoCount, nvmlProcessInfo_t *infos)
{
    GS_NVML_PROCESSES_CORE(gs_pfn_nvmlDeviceGetComputeRunningProcesses_v2)
}

/* ---------------- cuGetProcAddress: the runtime's route ---------------- */

void *gs_route_proc_address(const char *symbol, void *fn, int cuda_version, cuuint64_t flags);

static inline CUresult impl_get_proc_address_v1(void *const *real_slot, int ptsz, const char *symbol, void **pfn,
                                                int cudaVersion, cuuint64_t flags)
{
    (void)ptsz;
    gs_pfn_cuGetProcAddress fn = (gs_pfn_cuGetProcAddress)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = fn(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && symbol && pfn && *pfn)
        *pfn = gs_route_proc_address(symbol, *pfn, cudaVersion, flags);
    return rc;
}

static inline CUresult impl_get_proc_address(void *const *real_slot, int ptsz, const char *symbol, void **pfn,
                                             int cudaVersion, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult *symbolStatus)
{
    (void)ptsz;
    gs_pfn_cuGetProcAddress_v2 fn = (gs_pfn_cuGetProcAddress_v2)real_cuda(real_slot);
    if (!fn)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = fn(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS && symbol && pfn && *pfn)
        *pfn = gs_route_proc_address(symbol, *pfn, cudaVersion, flags);
    return rc;
}

/* ---------------- the generated wrappers ---------------- */

#define GS_WRAP_PLAIN(name, ptsz, impl, ret, params, args)                            \
    GS_EXPORT ret name params                                                           \
    {                                                                                   \
        return impl_##impl(&gs_real_exported[GS_ID_##name], ptsz GS_AND_ARGS args);  \
    }                                                                                   \
    static ret gs_proc_##name params                                                    \
    {                                                                                   \
        return impl_##impl(&gs_real_proc[GS_ID_##name], ptsz GS_AND_ARGS args);      \
    }                                                                                   \
    static ret gs_alt_##name params                                                     \
    {                                                                                   \
        return impl_##impl(&gs_real_alt[GS_ID_##name], ptsz GS_AND_ARGS args);       \
    }

/* Fast path: real pointer loaded, gate open for this thread's slice ->
 * tail-jump to the driver. Anything else -> the slow twin (same
 * signature, so that is a tail jump too). */
#define GS_WRAP_FAST_VIA(prefix, slots, name, ptsz, impl, ret, params, args, fast_ok)   \
    static __attribute__((noinline, cold)) ret prefix##slow_##name params               \
    {                                                                                   \
        return impl_##impl(&slots[GS_ID_##name], ptsz, GS_UNPAREN args);                \
    }                                                                                   \
    static ret prefix##name params                                                      \
    {                                                                                   \
        gs_pfn_##name fn = (gs_pfn_##name)__atomic_load_n(&slots[GS_ID_##name], __ATOMIC_RELAXED); \
        if (__builtin_expect(fn != NULL, 1) && (fast_ok) && gs_gate_fast_enter())       \
            return fn args;                                                             \
        return prefix##slow_##name args;                                                \
    }

/* fast_ok: 1 for launches and copies (compiled away); for graph launches,
 * "no graph with memory nodes is known" (one relaxed load). */
#define GS_WRAP_FAST_IF(name, ptsz, impl, ret, params, args, fast_ok)                 \
    static __attribute__((noinline, cold)) ret gs_slow_##name params                    \
    {                                                                                   \
        return impl_##impl(&gs_real_exported[GS_ID_##name], ptsz, GS_UNPAREN args);     \
    }                                                                                   \
    GS_EXPORT ret name params                                                           \
    {                                                                                   \
        gs_pfn_##name fn = (gs_pfn_##name)__atomic_load_n(&gs_real_exported[GS_ID_##name], __ATOMIC_RELAXED); \
        if (__builtin_expect(fn != NULL, 1) && (fast_ok) && gs_gate_fast_enter())       \
            return fn args;                                                             \
        return gs_slow_##name args;                                                     \
    }                                                                                   \
    GS_WRAP_FAST_VIA(gs_proc_, gs_real_proc, name, ptsz, impl, ret, params, args, fast_ok) \
    GS_WRAP_FAST_VIA(gs_alt_, gs_real_alt, name, ptsz, impl, ret, params, args, fast_ok)

#define GS_WRAP_FAST(name, ptsz, impl, ret, params, args) GS_WRAP_FAST_IF(name, ptsz, impl, ret, params, args, 1)
#define GS_WRAP_GRAPH(name, ptsz, impl, ret, params, args)                            \
    GS_WRAP_FAST_IF(name, ptsz, impl, ret, params, args, !__atomic_load_n(&gs_graph_memory_execs, __ATOMIC_RELAXED))

#define GS_X_WRAPPERS(name, base, version, ptsz, lib, path, impl, ret, params, args)     \
    GS_WRAP_##path(name, ptsz, impl, ret, params, args)
GS_INTERCEPT_TABLE(GS_X_WRAPPERS)
#undef GS_X_WRAPPERS

#define GS_X_EXPORTED(name, base, version, ptsz, lib, path, impl, ret, params, args) (void *)name,
void *const gs_wrapper_exported[GS_ID_COUNT] = {GS_INTERCEPT_TABLE(GS_X_EXPORTED)};
#undef GS_X_EXPORTED

#define GS_X_PROC(name, base, version, ptsz, lib, path, impl, ret, params, args) (void *)gs_proc_##name,
void *const gs_wrapper_proc[GS_ID_COUNT] = {GS_INTERCEPT_TABLE(GS_X_PROC)};
#undef GS_X_PROC

#define GS_X_ALT(name, base, version, ptsz, lib, path, impl, ret, params, args) (void *)gs_alt_##name,
void *const gs_wrapper_alt[GS_ID_COUNT] = {GS_INTERCEPT_TABLE(GS_X_ALT)};
#undef GS_X_ALT
