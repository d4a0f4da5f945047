/* stub_libcuda: a libcuda.so.1 whose launches return at once, so
 * launch_overhead measures only what the shim adds. Just the calls
 * launch_overhead and libgslice.so make; contexts, events and modules are
 * dummies. Build: gcc -shared -fPIC -O2 -I../../include stub_libcuda.c -o libcuda.so.1
 * GSLICE_STUB_FAIL_LAUNCH=N makes launch number N (from 1) and every later
 * one return CUDA_ERROR_LAUNCH_FAILED: the test that launch_overhead checks
 * each launch's result. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "gslice_cuda_abi.h"

#define EXPORT __attribute__((visibility("default")))

static struct CUctx_st *current;
static char dummy_ctx, dummy_event;
static volatile unsigned long launches;
static unsigned long fail_from;   /* 0: never */

__attribute__((constructor)) static void read_fail_setting(void)
{
    const char *at = getenv("GSLICE_STUB_FAIL_LAUNCH");
    fail_from = at ? strtoul(at, NULL, 10) : 0;
}

EXPORT CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : CUDA_ERROR_INVALID_DEVICE; }
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) { (void)d; *c = (CUcontext)&dummy_ctx; return 0; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { current = c; return 0; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = current; return 0; }
EXPORT CUresult cuCtxGetDevice(CUdevice *d) { *d = 0; return 0; }
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c) { current = c; return 0; }
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c) { *c = current; return 0; }
EXPORT CUresult cuCtxSynchronize(void) { return 0; }
EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image) { (void)image; *m = (CUmodule)&dummy_ctx; return 0; }
EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    (void)m; (void)name;
    *f = (CUfunction)&dummy_ctx;
    return 0;
}
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shm, CUstream s, void **p, void **e)
{
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shm; (void)s; (void)p; (void)e;
    launches++;
    return fail_from && launches >= fail_from ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}
EXPORT CUresult cuEventCreate(CUevent *ev, unsigned int flags) { (void)flags; *ev = (CUevent)&dummy_event; return 0; }
EXPORT CUresult cuEventRecord(CUevent ev, CUstream s) { (void)ev; (void)s; return 0; }
EXPORT CUresult cuEventQuery(CUevent ev) { (void)ev; return 0; }
EXPORT CUresult cuEventSynchronize(CUevent ev) { (void)ev; return 0; }
EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) { (void)a; (void)b; *ms = 0; return 0; }
EXPORT CUresult cuEventDestroy_v2(CUevent ev) { (void)ev; return 0; }
EXPORT CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = *t = (size_t)16 << 30; return 0; }
