/* real_driver: finding the real libcuda / libnvidia-ml at run time.
 *
 * Nothing is loaded at constructor time: a process that never touches CUDA
 * (sh, python without a GPU library) never dlopens the driver. The first
 * intercepted call (or a dlsym for an intercepted name) dlopens
 * libcuda.so.1 (GSLICE_REAL_LIBCUDA overrides the path) and resolves, with
 * the real dlsym on the driver's own handle, every table row plus the few
 * driver calls the shim itself makes. After that, the launch path reads
 * plain pointers: no locks, no allocation. */
#ifndef GSLICE_REAL_DRIVER_H
#define GSLICE_REAL_DRIVER_H

#include <stdbool.h>

#include "gslice_cuda_abi.h"
#include "gslice_nvml_abi.h"
#include "intercept_table.h"

/* Code a sanitizer runtime may reach through our dlsym during its own
 * start-up, before its shadow memory exists: never instrumented
 * (GSLICE_SANITIZE builds; no effect otherwise). */
#define GS_SANITIZER_START_UP __attribute__((no_sanitize("address", "undefined", "thread")))

/* Real pointers per table row: dlsym'd from the real library, and the one
 * the real cuGetProcAddress answered (set on the cuGetProcAddress route). */
extern void *gs_real_exported[GS_ID_COUNT];
extern void *gs_real_proc[GS_ID_COUNT];
/* A second, different pointer cuGetProcAddress answered for the same row
 * (e.g. for other flags): metered through a third wrapper. */
extern void *gs_real_alt[GS_ID_COUNT];

/* Driver calls the shim itself makes (slow paths and the gate keeper). */
typedef struct gs_cuda_calls {
    CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
    CUresult (*cuCtxGetDevice)(CUdevice *dev);
    CUresult (*cuCtxPushCurrent)(CUcontext ctx);
    CUresult (*cuCtxPopCurrent)(CUcontext *ctx);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuEventCreate)(CUevent *ev, unsigned int flags);
    CUresult (*cuEventRecord)(CUevent ev, CUstream stream);
    CUresult (*cuEventRecord_ptsz)(CUevent ev, CUstream stream);
    CUresult (*cuEventQuery)(CUevent ev);
    CUresult (*cuEventSynchronize)(CUevent ev);
    CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
    CUresult (*cuEventDestroy)(CUevent ev);
    CUresult (*cuDeviceGetUuid)(unsigned char uuid[16], CUdevice dev);
    /* stream capture (stream_capture.c) */
    CUresult (*cuStreamIsCapturing)(CUstream stream, CUstreamCaptureStatus *status);
    CUresult (*cuStreamIsCapturing_ptsz)(CUstream stream, CUstreamCaptureStatus *status);
    CUresult (*cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *mode);
    /* pools (memory_pools.c) */
    CUresult (*cuMemPoolGetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
    CUresult (*cuDeviceGetMemPool)(CUmemoryPool *pool, CUdevice dev);
    /* graph memory (memory_pools.c) */
    CUresult (*cuDeviceGetGraphMemAttribute)(CUdevice dev, CUgraphMem_attribute attr, void *value);
    CUresult (*cuGraphGetNodes)(CUgraph graph, CUgraphNode *nodes, size_t *count);
    CUresult (*cuGraphNodeGetType)(CUgraphNode node, CUgraphNodeType *type);
    CUresult (*cuGraphMemAllocNodeGetParams)(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *params);
} gs_cuda_calls;
extern gs_cuda_calls gs_cu;

typedef struct gs_nvml_calls {
    nvmlReturn_t (*nvmlDeviceGetUUID)(nvmlDevice_t device, char *uuid, unsigned int length);
    nvmlReturn_t (*nvmlDeviceGetCount)(unsigned int *count);
    nvmlReturn_t (*nvmlDeviceGetHandleByIndex)(unsigned int index, nvmlDevice_t *device);
} gs_nvml_calls;
extern gs_nvml_calls gs_nvml;

/* The real dlsym (the interposed one in symbol_routes.c must not recurse). */
void *gs_real_dlsym(void *handle, const char *name);
/* glibc's dlsym itself, resolved on first use. */
extern void *gs_real_dlsym_fn;
void *gs_resolve_real_dlsym(void);

/* Load libcuda and resolve the rows once; true when the driver is there. */
bool gs_real_cuda_load(void);
bool gs_real_nvml_load(void);
/* Handles once loaded (NULL before / when missing). */
void *gs_real_cuda_handle(void);
void *gs_real_nvml_handle(void);

/* True while this thread is inside gs_real_*_load (its dlopen may run the
 * driver's constructors, which may call our dlsym). */
bool gs_real_loading_here(void);

#endif
