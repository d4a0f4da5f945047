/* Lazy module loading (GSLICE_SIM_MODULE_LOAD_MEMORY): the first launch of
 * each distinct function in a context grows that context's memory, seen by
 * cuMemGetInfo and NVML's per-process used memory; a second launch adds
 * nothing; destroying the context gives it back; a load that does not fit
 * fails the launch. Prints "key=value" lines (bytes beyond the context's
 * own memory). */
#include <stdio.h>
#include <unistd.h>

#include "gslice_cuda_abi.h"
#include "gslice_nvml_abi.h"
#include "gslice_cuda_driver_api.h"
#include "check.h"
#include "memory_check.h"

#define MiB (1ull << 20)

static CUresult launch(CUmodule mod, const char *name) {
    CUfunction f;
    CHECK(cuModuleGetFunction(&f, mod, name));
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
}

int main(void) {
    CUdevice dev;
    CUcontext created;
    CUmodule mod;
    check_primary_context(&dev);
    CHECK(cuModuleLoadData(&mod, "image"));
    size_t base = used_now();
    unsigned long long nvml_base = nvml_own_used();
    CHECK(launch(mod, "a"));
    printf("after_first_launch=%zu\n", used_now() - base);
    CHECK(launch(mod, "a"));
    printf("after_second_launch=%zu\n", used_now() - base);
    CHECK(launch(mod, "b"));
    printf("after_other_function=%zu\n", used_now() - base);
    printf("nvml_growth=%llu\n", nvml_own_used() - nvml_base);
    /* The same function in another context loads there again. */
    CHECK(cuCtxCreate_v2(&created, 0, dev));
    size_t with_created = used_now();
    CHECK(launch(mod, "a"));
    printf("created_context_load=%zu\n", used_now() - with_created);
    CHECK(cuCtxSynchronize());
    CHECK(cuCtxDestroy_v2(created));
    printf("after_destroy=%zu\n", used_now() - base);
    /* A load that does not fit the device fails the launch. */
    size_t free_b, total;
    CHECK(cuMemGetInfo_v2(&free_b, &total));
    CUdeviceptr fill;
    CHECK(cuMemAlloc_v2(&fill, free_b - MiB));
    printf("launch_when_full=%d\n", (int)launch(mod, "c"));
    CHECK(cuCtxSynchronize());
    return 0;
}
