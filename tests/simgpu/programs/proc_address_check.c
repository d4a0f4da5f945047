/* Reaches the simulated driver the way libcudart does: dlopen("libcuda.so.1"),
 * dlsym only cuGetProcAddress_v2 and cuDriverGetVersion, then look every
 * call up by base name + version + flags.
 *
 * Prints one line per look-up: "name version flags -> result status export"
 * where export is the exported symbol whose address matched (or "-"). Then
 * runs a small workload purely through looked-up pointers. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslice_cuda_abi.h"

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static void *lib;
static get_proc_fn get_proc;

/* Exported names a look-up may resolve to. */
static const char *exports[] = {
    "cuInit", "cuMemAlloc", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo", "cuMemGetInfo_v2",
    "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4", "cuLaunchKernel", "cuLaunchKernel_ptsz",
    "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuStreamSynchronize", "cuStreamSynchronize_ptsz",
    "cuGraphLaunch", "cuGraphLaunch_ptsz", "cuGetProcAddress", "cuGetProcAddress_v2", "cuDeviceTotalMem",
    "cuDeviceTotalMem_v2", "cuEventElapsedTime", "cuEventElapsedTime_v2", "cuMemcpyHtoD_v2",
    "cuMemcpyHtoD_v2_ptds", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuModuleLoadData",
    "cuModuleGetFunction", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuStreamCreate", "cuGraphInstantiateWithFlags",
    "cuGraphInstantiate_v2", "cuDeviceGetUuid", "cuDeviceGetUuid_v2", NULL,
};

static const char *export_name(void *fn) {
    for (int i = 0; exports[i]; i++)
        if (dlsym(lib, exports[i]) == fn) return exports[i];
    return "-";
}

static void *must(const char *name, int version, cuuint64_t flags) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    CUresult rc = get_proc(name, &fn, version, flags, &status);
    if (rc || !fn) {
        printf("FAIL lookup %s %d %llu -> %d status %d\n", name, version, flags, rc, status);
        exit(1);
    }
    return fn;
}

#define CHECK(call)                                                      \
    do {                                                                 \
        CUresult rc_ = (call);                                           \
        if (rc_) {                                                       \
            printf("FAIL %s returned %d\n", #call, rc_);                 \
            exit(1);                                                     \
        }                                                                \
    } while (0)

int main(int argc, char **argv) {
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        printf("FAIL dlopen: %s\n", dlerror());
        return 1;
    }
    get_proc = (get_proc_fn)dlsym(lib, "cuGetProcAddress_v2");
    CUresult (*driver_version)(int *) = (CUresult(*)(int *))dlsym(lib, "cuDriverGetVersion");
    int version = 0;
    if (!get_proc || !driver_version || driver_version(&version)) {
        printf("FAIL dlsym\n");
        return 1;
    }
    printf("driver_version=%d\n", version);

    /* argv: triples name version flags */
    for (int i = 1; i + 2 < argc; i += 3) {
        void *fn = (void *)0x1;
        CUdriverProcAddressQueryResult status = (CUdriverProcAddressQueryResult)99;
        CUresult rc = get_proc(argv[i], &fn, atoi(argv[i + 1]), strtoull(argv[i + 2], NULL, 10), &status);
        printf("lookup %s %s %s -> %d %d %s\n", argv[i], argv[i + 1], argv[i + 2], rc, status,
               fn ? export_name(fn) : "NULL");
    }

    /* The answer is the driver's own function even when a preloaded
     * library defines the same exported name (what a shim relies on). */
    void *own = must("cuMemAlloc", 12000, 0);
    void *global = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    printf("own_is_export=%d own_differs_from_global=%d\n", own == dlsym(lib, "cuMemAlloc_v2"), own != global);

    /* A runtime-like session through looked-up pointers only, with the
     * per-thread default stream (flags = 2) as nvcc --default-stream per-thread. */
    CUresult (*init)(unsigned) = must("cuInit", 12000, 0);
    CUresult (*retain)(CUcontext *, CUdevice) = must("cuDevicePrimaryCtxRetain", 12000, 0);
    CUresult (*set_current)(CUcontext) = must("cuCtxSetCurrent", 12000, 0);
    CUresult (*alloc)(CUdeviceptr *, size_t) = must("cuMemAlloc", 12000, 0);
    CUresult (*mem_free)(CUdeviceptr) = must("cuMemFree", 12000, 0);
    CUresult (*load)(CUmodule *, const void *) = must("cuModuleLoadData", 12000, 0);
    CUresult (*get_function)(CUfunction *, CUmodule, const char *) = must("cuModuleGetFunction", 12000, 0);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                       void **, void **) = must("cuLaunchKernel", 12000, 2);
    CUresult (*sync)(CUstream) = must("cuStreamSynchronize", 12000, 2);
    CUresult (*query)(CUstream) = must("cuStreamQuery", 12000, 2);
    CUcontext ctx;
    CUmodule mod;
    CUfunction f;
    CUdeviceptr p;
    CHECK(init(0));
    CHECK(retain(&ctx, 0));
    CHECK(set_current(ctx));
    CHECK(alloc(&p, 1 << 20));
    CHECK(load(&mod, "image"));
    CHECK(get_function(&f, mod, "gslice_sim_sleep"));
    uint64_t ns = 20 * 1000 * 1000ull;
    void *params[] = {&ns};
    CHECK(launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    CUresult pending = query(NULL);
    CHECK(sync(NULL));
    CHECK(query(NULL));
    CHECK(mem_free(p));
    printf("session_ok=1 pending_before_sync=%d\n", pending);
    return 0;
}
