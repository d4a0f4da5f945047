/* cuGetProcAddress routes under the shim, as the CUDA runtime uses them:
 * dlopen + dlsym(cuGetProcAddress_v2), look-ups by base name, version and
 * flags. Prints which object each answer lives in and counts launches made
 * through a second driver pointer for the same row. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslice_cuda_abi.h"
#include "../../../hook/shim_api.h"

typedef CUresult (*proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);
typedef CUresult (*sync_fn)(void);

static const char *object_of(void *p)
{
    Dl_info info;
    if (!p || !dladdr(p, &info) || !info.dli_fname)
        return "?";
    const char *slash = strrchr(info.dli_fname, '/');
    return slash ? slash + 1 : info.dli_fname;
}

static void *lookup(proc_fn proc, const char *name, int version, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    CUresult rc = proc(name, &fn, version, flags, &status);
    if (rc != CUDA_SUCCESS || !fn) {
        printf("error=lookup:%s:%d:%d\n", name, rc, status);
        exit(3);
    }
    return fn;
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    proc_fn proc = (proc_fn)dlsym(h, "cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = lookup(proc, "cuInit", 2000, 0);
    CUresult (*device_get)(CUdevice *, int) = lookup(proc, "cuDeviceGet", 2000, 0);
    CUresult (*retain)(CUcontext *, CUdevice) = lookup(proc, "cuDevicePrimaryCtxRetain", 7000, 0);
    CUresult (*set_current)(CUcontext) = lookup(proc, "cuCtxSetCurrent", 4000, 0);
    CUresult (*load)(CUmodule *, const void *) = lookup(proc, "cuModuleLoadData", 2000, 0);
    CUresult (*get_function)(CUfunction *, CUmodule, const char *) = lookup(proc, "cuModuleGetFunction", 2000, 0);
    sync_fn ctx_sync = lookup(proc, "cuCtxSynchronize", 2000, 0);
    /* Below every row's version (cuCtxCreate rows start at 3020): untouched. */
    void *old_create = lookup(proc, "cuCtxCreate", 2000, 0);
    printf("below_rows_object=%s\n", object_of(old_create));
    launch_fn by_default = lookup(proc, "cuLaunchKernel", 4000, 0);
    launch_fn by_legacy_flag = lookup(proc, "cuLaunchKernel", 4000, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    printf("default_object=%s\nlegacy_flag_object=%s\npointers_differ=%d\n", object_of((void *)by_default),
           object_of((void *)by_legacy_flag), by_default != by_legacy_flag);

    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction sleep_kernel;
    if (init(0) || device_get(&dev, 0) || retain(&ctx, dev) || set_current(ctx) || load(&mod, "probe") ||
        get_function(&sleep_kernel, mod, "gslice_sim_sleep")) {
        printf("error=setup\n");
        return 3;
    }
    int (*stats)(gslice_shim_stats *) = (int (*)(gslice_shim_stats *))dlsym(RTLD_DEFAULT, "gslice_shim_stats_get");
    gslice_shim_stats before = {0}, after = {0};
    uint64_t ns = 100000;
    void *params[] = {&ns};
    /* Through the second pointer only: the shim must still meter it. */
    for (int i = 0; i < 200; i++)
        if (by_legacy_flag(sleep_kernel, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CUDA_SUCCESS) {
            printf("error=launch\n");
            return 3;
        }
    ctx_sync();
    if (stats)
        stats(&after);
    printf("second_pointer_tokens=%llu\n", (unsigned long long)(after.tokens_acquired - before.tokens_acquired));
    printf("second_pointer_slow_entries=%llu\n", (unsigned long long)(after.slow_entries - before.slow_entries));
    return 0;
}
