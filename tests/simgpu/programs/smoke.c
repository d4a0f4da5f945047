/* Quick end-to-end check of the simulated driver, linked with -lcuda. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"

#define CHECK(call) do { CUresult rc_ = (call); if (rc_) { printf("FAIL %s = %d\n", #call, rc_); return 1; } } while (0)

int main(void) {
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction f; CUstream s; CUevent a, b;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUdeviceptr p;
    CHECK(cuMemAlloc_v2(&p, 1 << 20));
    char in[64] = "hello simulated gpu", out[64] = {0};
    CHECK(cuMemcpyHtoD_v2(p, in, sizeof in));
    CHECK(cuMemcpyDtoH_v2(out, p, sizeof out));
    size_t fr, tot;
    CHECK(cuMemGetInfo_v2(&fr, &tot));
    printf("copy=%s free=%zu total=%zu\n", out, fr, tot);
    CHECK(cuModuleLoadData(&mod, "x"));
    CHECK(cuModuleGetFunction(&f, mod, "gslice_sim_sleep"));
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuEventCreate(&a, 0));
    CHECK(cuEventCreate(&b, 0));
    uint64_t ns = 2000000;
    void *params[] = {&ns};
    CHECK(cuEventRecord(a, s));
    for (int i = 0; i < 10; i++) CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
    CHECK(cuEventRecord(b, s));
    CHECK(cuEventSynchronize(b));
    float ms;
    CHECK(cuEventElapsedTime(&ms, a, b));
    printf("elapsed_ms=%.3f\n", ms);
    uint64_t small = 20000;
    void *sp[] = {&small};
    CHECK(cuEventRecord(a, s));
    for (int i = 0; i < 1000; i++) CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, sp, NULL));
    CHECK(cuEventRecord(b, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuEventElapsedTime(&ms, a, b));
    printf("1000x20us elapsed_ms=%.3f\n", ms);
    CHECK(cuMemFree_v2(p));
    return 0;
}
