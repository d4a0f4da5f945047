/* intercept_table: THE list of driver entry points gslice meters.
 *
 * One X-macro row per exported variant:
 *   X(name, base, version, ptsz, lib, path, impl, ret, params, args)
 *     name     the exported symbol (what dlsym and the linker see)
 *     base     the name cuGetProcAddress is asked for
 *     version  the lowest cudaVersion for which cuGetProcAddress(base)
 *              answers with this variant (the driver's own versioning)
 *     ptsz     1 for the per-thread-default-stream variant, chosen by
 *              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 *     lib      CUDA or NVML: which real library defines it
 *     path     FAST: the token gate's inline fast path (launches); GRAPH: the
 *              same while no graph with memory nodes is known; else PLAIN
 *     impl     the hand-written core in overrides.c both routes call
 *     ret, params, args   the C signature and the forwarded argument list
 *
 * overrides.c expands every row three times: an exported wrapper that
 * calls the pointer dlsym'd from the real library, and hidden ones that
 * call the pointers the real cuGetProcAddress returned for that row (they
 * differ from the exported one on real drivers, and a driver may answer a
 * second pointer for the same row, e.g. for other flags). Everything not
 * in this table is never seen by gslice. */
#ifndef GSLICE_INTERCEPT_TABLE_H
#define GSLICE_INTERCEPT_TABLE_H

#include "gslice_cuda_abi.h"
#include "gslice_nvml_abi.h"

#define GS_LAUNCH_PARAMS (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, \
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, \
    CUstream hStream, void **kernelParams, void **extra)
#define GS_LAUNCH_ARGS (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, \
    hStream, kernelParams, extra)
#define GS_COOP_PARAMS (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, \
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, \
    CUstream hStream, void **kernelParams)
#define GS_COOP_ARGS (f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, \
    hStream, kernelParams)
#define GS_PROC_V2_PARAMS (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, \
    CUdriverProcAddressQueryResult *symbolStatus)

#define GS_CAPTURE_TO_GRAPH_PARAMS (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, \
    const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode)
#define GS_CAPTURE_TO_GRAPH_ARGS (hStream, hGraph, dependencies, dependencyData, numDependencies, mode)

#define GS_PEER_PARAMS (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext, \
    size_t ByteCount)
#define GS_PEER_ARGS (dstDevice, dstContext, srcDevice, srcContext, ByteCount)
#define GS_PEER_ASYNC_PARAMS (CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, \
    CUcontext srcContext, size_t ByteCount, CUstream hStream)
#define GS_PEER_ASYNC_ARGS (dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream)
/* cuMemcpyBatchAsync: CUDA 12.8 (failIdx) and cuMemcpyBatchAsync_v2: CUDA 13.0 (no failIdx) */
#define GS_BATCH_PARAMS (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, \
    CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream)
#define GS_BATCH_ARGS (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream)
#define GS_BATCH_V2_PARAMS (CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, \
    CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream)
#define GS_BATCH_V2_ARGS (dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream)
/* cuMemsetD2D8/16/32: the element type T */
#define GS_FILL_2D_PARAMS(T) (CUdeviceptr dstDevice, size_t dstPitch, T value, size_t Width, size_t Height)
#define GS_FILL_2D_ARGS (dstDevice, dstPitch, value, Width, Height)
#define GS_FILL_2D_ASYNC_PARAMS(T) (CUdeviceptr dstDevice, size_t dstPitch, T value, size_t Width, size_t Height, \
    CUstream hStream)
#define GS_FILL_2D_ASYNC_ARGS (dstDevice, dstPitch, value, Width, Height, hStream)

#define GS_INTERCEPT_TABLE(X) \
    /* work on the GPU */ \
    X(cuLaunchKernel, cuLaunchKernel, 4000, 0, CUDA, FAST, launch_kernel, CUresult, GS_LAUNCH_PARAMS, GS_LAUNCH_ARGS) \
    X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, 1, CUDA, FAST, launch_kernel, CUresult, GS_LAUNCH_PARAMS, GS_LAUNCH_ARGS) \
    X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0, CUDA, FAST, launch_kernel_ex, CUresult, \
      (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), (config, f, kernelParams, extra)) \
    X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, 1, CUDA, FAST, launch_kernel_ex, CUresult, \
      (const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra), (config, f, kernelParams, extra)) \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0, CUDA, FAST, launch_cooperative, CUresult, GS_COOP_PARAMS, GS_COOP_ARGS) \
    X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, 1, CUDA, FAST, launch_cooperative, CUresult, GS_COOP_PARAMS, GS_COOP_ARGS) \
    /* graph launches: the fast path while no graph with memory nodes is known (GRAPH) */ \
    X(cuGraphLaunch, cuGraphLaunch, 10000, 0, CUDA, GRAPH, graph_launch, CUresult, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream)) \
    X(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, 1, CUDA, GRAPH, graph_launch, CUresult, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream)) \
    X(cuGraphUpload, cuGraphUpload, 11010, 0, CUDA, GRAPH, graph_upload, CUresult, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream)) \
    X(cuGraphUpload_ptsz, cuGraphUpload, 11010, 1, CUDA, GRAPH, graph_upload, CUresult, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream)) \
    /* graph memory (memory_pools.h): what an exec's alloc nodes take, the pool's trim */ \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0, CUDA, PLAIN, graph_instantiate, CUresult, \
      (CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags), (phGraphExec, hGraph, flags)) \
    X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, 0, CUDA, PLAIN, graph_exec_destroy, CUresult, \
      (CUgraphExec hGraphExec), (hGraphExec)) \
    X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040, 0, CUDA, PLAIN, graph_mem_trim, CUresult, (CUdevice device), \
      (device)) \
    /* stream capture: launches into a capturing stream are recorded, not run (stream_capture.h) */ \
    X(cuStreamBeginCapture, cuStreamBeginCapture, 10000, 0, CUDA, PLAIN, capture_begin_v1, CUresult, (CUstream hStream), (hStream)) \
    X(cuStreamBeginCapture_ptsz, cuStreamBeginCapture, 10000, 1, CUDA, PLAIN, capture_begin_v1, CUresult, (CUstream hStream), (hStream)) \
    X(cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, 0, CUDA, PLAIN, capture_begin, CUresult, \
      (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode)) \
    X(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture, 10010, 1, CUDA, PLAIN, capture_begin, CUresult, \
      (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode)) \
    X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, 12030, 0, CUDA, PLAIN, capture_begin_to_graph, CUresult, \
      GS_CAPTURE_TO_GRAPH_PARAMS, GS_CAPTURE_TO_GRAPH_ARGS) \
    X(cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph, 12030, 1, CUDA, PLAIN, capture_begin_to_graph, \
      CUresult, GS_CAPTURE_TO_GRAPH_PARAMS, GS_CAPTURE_TO_GRAPH_ARGS) \
    X(cuStreamEndCapture, cuStreamEndCapture, 10000, 0, CUDA, PLAIN, capture_end, CUresult, \
      (CUstream hStream, CUgraph *phGraph), (hStream, phGraph)) \
    X(cuStreamEndCapture_ptsz, cuStreamEndCapture, 10000, 1, CUDA, PLAIN, capture_end, CUresult, \
      (CUstream hStream, CUgraph *phGraph), (hStream, phGraph)) \
    /* the application waits for its work: a bursty holder's burst may have ended (gate_burst_end.c) */ \
    X(cuCtxSynchronize, cuCtxSynchronize, 2000, 0, CUDA, PLAIN, ctx_synchronize, CUresult, (void), ()) \
    X(cuCtxSynchronize_v2, cuCtxSynchronize, 13000, 0, CUDA, PLAIN, ctx_synchronize_v2, CUresult, \
      (CUcontext ctx), (ctx)) \
    X(cuStreamSynchronize, cuStreamSynchronize, 2000, 0, CUDA, PLAIN, stream_synchronize, CUresult, \
      (CUstream hStream), (hStream)) \
    X(cuStreamSynchronize_ptsz, cuStreamSynchronize, 7000, 1, CUDA, PLAIN, stream_synchronize, CUresult, \
      (CUstream hStream), (hStream)) \
    X(cuEventSynchronize, cuEventSynchronize, 2000, 0, CUDA, PLAIN, event_synchronize, CUresult, \
      (CUevent hEvent), (hEvent)) \
    /* device-side copies and fills: they compete with kernels for the SMs and memory bandwidth, \
     * so they are gated and their GPU time falls in the group's slices (host<->device copies \
     * run on the copy engines: not gated) */ \
    X(cuMemcpy, cuMemcpy, 4000, 0, CUDA, FAST, copy_sync, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    X(cuMemcpy_ptds, cuMemcpy, 7000, 1, CUDA, FAST, copy_sync, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    X(cuMemcpyAsync, cuMemcpyAsync, 4000, 0, CUDA, FAST, copy_async, CUresult, \
      (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    X(cuMemcpyAsync_ptsz, cuMemcpyAsync, 7000, 1, CUDA, FAST, copy_async, CUresult, \
      (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    X(cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, 0, CUDA, FAST, copy_sync, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 7000, 1, CUDA, FAST, copy_sync, CUresult, (CUdeviceptr dst, CUdeviceptr src, size_t n), (dst, src, n)) \
    X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, 0, CUDA, FAST, copy_async, CUresult, \
      (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 7000, 1, CUDA, FAST, copy_async, CUresult, \
      (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream hStream), (dst, src, n, hStream)) \
    X(cuMemsetD8_v2, cuMemsetD8, 3020, 0, CUDA, FAST, fill8, CUresult, (CUdeviceptr dst, unsigned char v, size_t n), (dst, v, n)) \
    X(cuMemsetD8_v2_ptds, cuMemsetD8, 7000, 1, CUDA, FAST, fill8, CUresult, (CUdeviceptr dst, unsigned char v, size_t n), (dst, v, n)) \
    X(cuMemsetD16_v2, cuMemsetD16, 3020, 0, CUDA, FAST, fill16, CUresult, (CUdeviceptr dst, unsigned short v, size_t n), (dst, v, n)) \
    X(cuMemsetD16_v2_ptds, cuMemsetD16, 7000, 1, CUDA, FAST, fill16, CUresult, (CUdeviceptr dst, unsigned short v, size_t n), (dst, v, n)) \
    X(cuMemsetD32_v2, cuMemsetD32, 3020, 0, CUDA, FAST, fill32, CUresult, (CUdeviceptr dst, unsigned int v, size_t n), (dst, v, n)) \
    X(cuMemsetD32_v2_ptds, cuMemsetD32, 7000, 1, CUDA, FAST, fill32, CUresult, (CUdeviceptr dst, unsigned int v, size_t n), (dst, v, n)) \
    X(cuMemsetD8Async, cuMemsetD8Async, 3020, 0, CUDA, FAST, fill8_async, CUresult, \
      (CUdeviceptr dst, unsigned char v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    X(cuMemsetD8Async_ptsz, cuMemsetD8Async, 7000, 1, CUDA, FAST, fill8_async, CUresult, \
      (CUdeviceptr dst, unsigned char v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    X(cuMemsetD16Async, cuMemsetD16Async, 3020, 0, CUDA, FAST, fill16_async, CUresult, \
      (CUdeviceptr dst, unsigned short v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    X(cuMemsetD16Async_ptsz, cuMemsetD16Async, 7000, 1, CUDA, FAST, fill16_async, CUresult, \
      (CUdeviceptr dst, unsigned short v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    X(cuMemsetD32Async, cuMemsetD32Async, 3020, 0, CUDA, FAST, fill32_async, CUresult, \
      (CUdeviceptr dst, unsigned int v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    X(cuMemsetD32Async_ptsz, cuMemsetD32Async, 7000, 1, CUDA, FAST, fill32_async, CUresult, \
      (CUdeviceptr dst, unsigned int v, size_t n, CUstream hStream), (dst, v, n, hStream)) \
    X(cuMemsetD2D8_v2, cuMemsetD2D8, 3020, 0, CUDA, FAST, fill2d8, CUresult, GS_FILL_2D_PARAMS(unsigned char), GS_FILL_2D_ARGS) \
    X(cuMemsetD2D8_v2_ptds, cuMemsetD2D8, 7000, 1, CUDA, FAST, fill2d8, CUresult, GS_FILL_2D_PARAMS(unsigned char), \
      GS_FILL_2D_ARGS) \
    X(cuMemsetD2D16_v2, cuMemsetD2D16, 3020, 0, CUDA, FAST, fill2d16, CUresult, GS_FILL_2D_PARAMS(unsigned short), GS_FILL_2D_ARGS) \
    X(cuMemsetD2D16_v2_ptds, cuMemsetD2D16, 7000, 1, CUDA, FAST, fill2d16, CUresult, GS_FILL_2D_PARAMS(unsigned short), \
      GS_FILL_2D_ARGS) \
    X(cuMemsetD2D32_v2, cuMemsetD2D32, 3020, 0, CUDA, FAST, fill2d32, CUresult, GS_FILL_2D_PARAMS(unsigned int), GS_FILL_2D_ARGS) \
    X(cuMemsetD2D32_v2_ptds, cuMemsetD2D32, 7000, 1, CUDA, FAST, fill2d32, CUresult, GS_FILL_2D_PARAMS(unsigned int), \
      GS_FILL_2D_ARGS) \
    X(cuMemsetD2D8Async, cuMemsetD2D8Async, 3020, 0, CUDA, FAST, fill2d8_async, CUresult, \
      GS_FILL_2D_ASYNC_PARAMS(unsigned char), GS_FILL_2D_ASYNC_ARGS) \
    X(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async, 7000, 1, CUDA, FAST, fill2d8_async, CUresult, \
      GS_FILL_2D_ASYNC_PARAMS(unsigned char), GS_FILL_2D_ASYNC_ARGS) \
    X(cuMemsetD2D16Async, cuMemsetD2D16Async, 3020, 0, CUDA, FAST, fill2d16_async, CUresult, \
      GS_FILL_2D_ASYNC_PARAMS(unsigned short), GS_FILL_2D_ASYNC_ARGS) \
    X(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async, 7000, 1, CUDA, FAST, fill2d16_async, CUresult, \
      GS_FILL_2D_ASYNC_PARAMS(unsigned short), GS_FILL_2D_ASYNC_ARGS) \
    X(cuMemsetD2D32Async, cuMemsetD2D32Async, 3020, 0, CUDA, FAST, fill2d32_async, CUresult, \
      GS_FILL_2D_ASYNC_PARAMS(unsigned int), GS_FILL_2D_ASYNC_ARGS) \
    X(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async, 7000, 1, CUDA, FAST, fill2d32_async, CUresult, \
      GS_FILL_2D_ASYNC_PARAMS(unsigned int), GS_FILL_2D_ASYNC_ARGS) \
    /* copies between CUDA arrays and device memory: device-side, like cuMemcpyDtoD */ \
    X(cuMemcpyAtoA_v2, cuMemcpyAtoA, 3020, 0, CUDA, FAST, copy_array_to_array, CUresult, \
      (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount), \
      (dstArray, dstOffset, srcArray, srcOffset, ByteCount)) \
    X(cuMemcpyAtoA_v2_ptds, cuMemcpyAtoA, 7000, 1, CUDA, FAST, copy_array_to_array, CUresult, \
      (CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount), \
      (dstArray, dstOffset, srcArray, srcOffset, ByteCount)) \
    X(cuMemcpyDtoA_v2, cuMemcpyDtoA, 3020, 0, CUDA, FAST, copy_device_to_array, CUresult, \
      (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount), \
      (dstArray, dstOffset, srcDevice, ByteCount)) \
    X(cuMemcpyDtoA_v2_ptds, cuMemcpyDtoA, 7000, 1, CUDA, FAST, copy_device_to_array, CUresult, \
      (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount), \
      (dstArray, dstOffset, srcDevice, ByteCount)) \
    X(cuMemcpyAtoD_v2, cuMemcpyAtoD, 3020, 0, CUDA, FAST, copy_array_to_device, CUresult, \
      (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount), \
      (dstDevice, srcArray, srcOffset, ByteCount)) \
    X(cuMemcpyAtoD_v2_ptds, cuMemcpyAtoD, 7000, 1, CUDA, FAST, copy_array_to_device, CUresult, \
      (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount), \
      (dstDevice, srcArray, srcOffset, ByteCount)) \
    /* 2D / 3D copies: gated when neither side is host memory (device, array or unified), \
     * else passed through like the host<->device copies above (PLAIN: the memory types are \
     * read before the gate) */ \
    X(cuMemcpy2D_v2, cuMemcpy2D, 3020, 0, CUDA, PLAIN, copy2d, CUresult, (const CUDA_MEMCPY2D *pCopy), (pCopy)) \
    X(cuMemcpy2D_v2_ptds, cuMemcpy2D, 7000, 1, CUDA, PLAIN, copy2d, CUresult, (const CUDA_MEMCPY2D *pCopy), (pCopy)) \
    X(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned, 3020, 0, CUDA, PLAIN, copy2d, CUresult, (const CUDA_MEMCPY2D *pCopy), (pCopy)) \
    X(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned, 7000, 1, CUDA, PLAIN, copy2d, CUresult, \
      (const CUDA_MEMCPY2D *pCopy), (pCopy)) \
    X(cuMemcpy2DAsync_v2, cuMemcpy2DAsync, 3020, 0, CUDA, PLAIN, copy2d_async, CUresult, \
      (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream)) \
    X(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync, 7000, 1, CUDA, PLAIN, copy2d_async, CUresult, \
      (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream)) \
    X(cuMemcpy3D_v2, cuMemcpy3D, 3020, 0, CUDA, PLAIN, copy3d, CUresult, (const CUDA_MEMCPY3D *pCopy), (pCopy)) \
    X(cuMemcpy3D_v2_ptds, cuMemcpy3D, 7000, 1, CUDA, PLAIN, copy3d, CUresult, (const CUDA_MEMCPY3D *pCopy), (pCopy)) \
    X(cuMemcpy3DAsync_v2, cuMemcpy3DAsync, 3020, 0, CUDA, PLAIN, copy3d_async, CUresult, \
      (const CUDA_MEMCPY3D *pCopy, CUstream hStream), (pCopy, hStream)) \
    X(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync, 7000, 1, CUDA, PLAIN, copy3d_async, CUresult, \
      (const CUDA_MEMCPY3D *pCopy, CUstream hStream), (pCopy, hStream)) \
    X(cuMemcpy3DPeer, cuMemcpy3DPeer, 4000, 0, CUDA, PLAIN, copy3d_peer, CUresult, (const CUDA_MEMCPY3D_PEER *pCopy), (pCopy)) \
    X(cuMemcpy3DPeer_ptds, cuMemcpy3DPeer, 7000, 1, CUDA, PLAIN, copy3d_peer, CUresult, \
      (const CUDA_MEMCPY3D_PEER *pCopy), (pCopy)) \
    X(cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync, 4000, 0, CUDA, PLAIN, copy3d_peer_async, CUresult, \
      (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), (pCopy, hStream)) \
    X(cuMemcpy3DPeerAsync_ptsz, cuMemcpy3DPeerAsync, 7000, 1, CUDA, PLAIN, copy3d_peer_async, CUresult, \
      (const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream), (pCopy, hStream)) \
    /* peer copies: device to device, between contexts */ \
    X(cuMemcpyPeer, cuMemcpyPeer, 4000, 0, CUDA, FAST, copy_peer, CUresult, GS_PEER_PARAMS, GS_PEER_ARGS) \
    X(cuMemcpyPeer_ptds, cuMemcpyPeer, 7000, 1, CUDA, FAST, copy_peer, CUresult, GS_PEER_PARAMS, GS_PEER_ARGS) \
    X(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000, 0, CUDA, FAST, copy_peer_async, CUresult, GS_PEER_ASYNC_PARAMS, \
      GS_PEER_ASYNC_ARGS) \
    X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync, 7000, 1, CUDA, FAST, copy_peer_async, CUresult, GS_PEER_ASYNC_PARAMS, \
      GS_PEER_ASYNC_ARGS) \
    /* batch copies (unified addresses, either side may be host): gated like cuMemcpy */ \
    X(cuMemcpyBatchAsync, cuMemcpyBatchAsync, 12080, 0, CUDA, FAST, copy_batch, CUresult, GS_BATCH_PARAMS, GS_BATCH_ARGS) \
    X(cuMemcpyBatchAsync_ptsz, cuMemcpyBatchAsync, 12080, 1, CUDA, FAST, copy_batch, CUresult, GS_BATCH_PARAMS, \
      GS_BATCH_ARGS) \
    X(cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync, 13000, 0, CUDA, FAST, copy_batch_v2, CUresult, GS_BATCH_V2_PARAMS, \
      GS_BATCH_V2_ARGS) \
    X(cuMemcpyBatchAsync_v2_ptsz, cuMemcpyBatchAsync, 13000, 1, CUDA, FAST, copy_batch_v2, CUresult, GS_BATCH_V2_PARAMS, \
      GS_BATCH_V2_ARGS) \
    /* allocations */ \
    X(cuMemAlloc, cuMemAlloc, 2000, 0, CUDA, PLAIN, mem_alloc_v1, CUresult, (unsigned int *dptr, unsigned int bytesize), (dptr, bytesize)) \
    X(cuMemAlloc_v2, cuMemAlloc, 3020, 0, CUDA, PLAIN, mem_alloc, CUresult, (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize)) \
    X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0, CUDA, PLAIN, mem_alloc_pitch, CUresult, \
      (CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes), \
      (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes)) \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0, CUDA, PLAIN, mem_alloc_managed, CUresult, \
      (CUdeviceptr *dptr, size_t bytesize, unsigned int flags), (dptr, bytesize, flags)) \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0, CUDA, PLAIN, mem_alloc_async, CUresult, \
      (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), (dptr, bytesize, hStream)) \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1, CUDA, PLAIN, mem_alloc_async, CUresult, \
      (CUdeviceptr *dptr, size_t bytesize, CUstream hStream), (dptr, bytesize, hStream)) \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0, CUDA, PLAIN, mem_alloc_from_pool, CUresult, \
      (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), (dptr, bytesize, pool, hStream)) \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1, CUDA, PLAIN, mem_alloc_from_pool, CUresult, \
      (CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream), (dptr, bytesize, pool, hStream)) \
    X(cuMemCreate, cuMemCreate, 10020, 0, CUDA, PLAIN, mem_create, CUresult, \
      (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags), \
      (handle, size, prop, flags)) \
    X(cuArrayCreate_v2, cuArrayCreate, 3020, 0, CUDA, PLAIN, array_create, CUresult, \
      (CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray), (pHandle, pAllocateArray)) \
    X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0, CUDA, PLAIN, array3d_create, CUresult, \
      (CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray), (pHandle, pAllocateArray)) \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0, CUDA, PLAIN, mipmapped_array_create, CUresult, \
      (CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pDesc, unsigned int numMipmapLevels), \
      (pHandle, pDesc, numMipmapLevels)) \
    X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020, 0, CUDA, PLAIN, mem_pool_trim, CUresult, \
      (CUmemoryPool pool, size_t minBytesToKeep), (pool, minBytesToKeep)) \
    X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0, CUDA, PLAIN, mem_pool_destroy, CUresult, (CUmemoryPool pool), \
      (pool)) \
    X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, 0, CUDA, PLAIN, mem_retain_handle, CUresult, \
      (CUmemGenericAllocationHandle *handle, void *addr), (handle, addr)) \
    X(cuMemMap, cuMemMap, 10020, 0, CUDA, PLAIN, mem_map, CUresult, \
      (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags), \
      (ptr, size, offset, handle, flags)) \
    X(cuMemUnmap, cuMemUnmap, 10020, 0, CUDA, PLAIN, mem_unmap, CUresult, (CUdeviceptr ptr, size_t size), (ptr, size)) \
    /* contexts: their hidden memory (GSLICE_CONTEXT_RESERVE_MIB) and teardown */ \
    X(cuCtxCreate_v2, cuCtxCreate, 3020, 0, CUDA, PLAIN, ctx_create, CUresult, \
      (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev)) \
    X(cuCtxCreate_v3, cuCtxCreate, 11040, 0, CUDA, PLAIN, ctx_create_v3, CUresult, \
      (CUcontext *pctx, CUexecAffinityParam *params, int numParams, unsigned int flags, CUdevice dev), \
      (pctx, params, numParams, flags, dev)) \
    X(cuCtxCreate_v4, cuCtxCreate, 12050, 0, CUDA, PLAIN, ctx_create_v4, CUresult, \
      (CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev), (pctx, params, flags, dev)) \
    X(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0, CUDA, PLAIN, ctx_destroy, CUresult, (CUcontext ctx), (ctx)) \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0, CUDA, PLAIN, primary_retain, CUresult, \
      (CUcontext *pctx, CUdevice dev), (pctx, dev)) \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0, CUDA, PLAIN, primary_release, CUresult, \
      (CUdevice dev), (dev)) \
    X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, 0, CUDA, PLAIN, primary_release, CUresult, \
      (CUdevice dev), (dev)) \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0, CUDA, PLAIN, primary_reset, CUresult, \
      (CUdevice dev), (dev)) \
    X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 11000, 0, CUDA, PLAIN, primary_reset, CUresult, \
      (CUdevice dev), (dev)) \
    /* frees */ \
    X(cuMemFree, cuMemFree, 2000, 0, CUDA, PLAIN, mem_free_v1, CUresult, (unsigned int dptr), (dptr)) \
    X(cuMemFree_v2, cuMemFree, 3020, 0, CUDA, PLAIN, mem_free, CUresult, (CUdeviceptr dptr), (dptr)) \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0, CUDA, PLAIN, mem_free_async, CUresult, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream)) \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1, CUDA, PLAIN, mem_free_async, CUresult, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream)) \
    X(cuMemRelease, cuMemRelease, 10020, 0, CUDA, PLAIN, mem_release, CUresult, (CUmemGenericAllocationHandle handle), (handle)) \
    X(cuArrayDestroy, cuArrayDestroy, 2000, 0, CUDA, PLAIN, array_destroy, CUresult, (CUarray hArray), (hArray)) \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0, CUDA, PLAIN, mipmapped_array_destroy, CUresult, \
      (CUmipmappedArray hMipmappedArray), (hMipmappedArray)) \
    /* memory queries */ \
    X(cuMemGetInfo, cuMemGetInfo, 2000, 0, CUDA, PLAIN, mem_get_info_v1, CUresult, (unsigned int *free_bytes, unsigned int *total_bytes), (free_bytes, total_bytes)) \
    X(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0, CUDA, PLAIN, mem_get_info, CUresult, (size_t *free_bytes, size_t *total_bytes), (free_bytes, total_bytes)) \
    X(cuDeviceTotalMem, cuDeviceTotalMem, 2000, 0, CUDA, PLAIN, device_total_mem_v1, CUresult, (unsigned int *bytes, CUdevice dev), (bytes, dev)) \
    X(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, 0, CUDA, PLAIN, device_total_mem, CUresult, (size_t *bytes, CUdevice dev), (bytes, dev)) \
    X(nvmlDeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo, 0, 0, NVML, PLAIN, nvml_memory_info, nvmlReturn_t, \
      (nvmlDevice_t device, nvmlMemory_t *memory), (device, memory)) \
    X(nvmlDeviceGetMemoryInfo_v2, nvmlDeviceGetMemoryInfo_v2, 0, 0, NVML, PLAIN, nvml_memory_info_v2, nvmlReturn_t, \
      (nvmlDevice_t device, nvmlMemory_v2_t *memory), (device, memory)) \
    /* NVML's process listing: inside a group, only the group's processes */ \
    X(nvmlDeviceGetComputeRunningProcesses, nvmlDeviceGetComputeRunningProcesses, 0, 0, NVML, PLAIN, nvml_processes_v1, \
      nvmlReturn_t, (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_v1_t *infos), (device, infoCount, infos)) \
    X(nvmlDeviceGetComputeRunningProcesses_v2, nvmlDeviceGetComputeRunningProcesses_v2, 0, 0, NVML, PLAIN, nvml_processes, \
      nvmlReturn_t, (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos), (device, infoCount, infos)) \
    X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlDeviceGetComputeRunningProcesses_v3, 0, 0, NVML, PLAIN, nvml_processes, \
      nvmlReturn_t, (nvmlDevice_t device, unsigned int *infoCount, nvmlProcessInfo_t *infos), (device, infoCount, infos)) \
    /* the runtime's route to everything above */ \
    X(cuGetProcAddress, cuGetProcAddress, 11030, 0, CUDA, PLAIN, get_proc_address_v1, CUresult, \
      (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags), (symbol, pfn, cudaVersion, flags)) \
    X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0, CUDA, PLAIN, get_proc_address, CUresult, GS_PROC_V2_PARAMS, \
      (symbol, pfn, cudaVersion, flags, symbolStatus))

enum gs_intercept_lib { GS_LIB_CUDA = 0, GS_LIB_NVML = 1 };

enum gs_intercept_id {
#define GS_X_ID(name, base, version, ptsz, lib, path, impl, ret, params, args) GS_ID_##name,
    GS_INTERCEPT_TABLE(GS_X_ID)
#undef GS_X_ID
    GS_ID_COUNT
};

typedef struct gs_intercept_row {
    const char *name;
    const char *base;
    int version;
    int ptsz;
    int lib;
} gs_intercept_row;

/* Metadata of every row, in table order (symbol_routes.c). */
extern const gs_intercept_row gs_intercept_rows[GS_ID_COUNT];
/* Our wrappers: the exported one and the cuGetProcAddress-route one. */
extern void *const gs_wrapper_exported[GS_ID_COUNT];
extern void *const gs_wrapper_proc[GS_ID_COUNT];
/* ... and the one for a second driver pointer of the same row. */
extern void *const gs_wrapper_alt[GS_ID_COUNT];

/* Row of an exported name, or -1 (not a hot path: dlsym only). */
int gs_intercept_find(const char *name);

#endif
