/* launch_overhead: ns per cuLaunchKernel, to measure what libgslice.so adds.
 *
 * Run the same binary with and without LD_PRELOAD=libgslice.so (with a
 * group configured, so launches hold a real token) and compare. Launches
 * are timed in batches; the minimum batch is the steady fast path, the
 * median includes token renewals (each new slice's first launch takes the
 * slow path). Works over any libcuda.so.1: the simulated GPU (kernels not
 * named gslice_sim_sleep run GSLICE_SIM_KERNEL_US, set it to 0) or
 * stub_libcuda.c here, whose launch returns at once so only the shim's
 * cost remains.
 *
 *   launch_overhead [BATCHES [BATCH]]    default 200 batches of 20000
 * Prints key=value lines: min_ns, median_ns, launches. Every launch's
 * result is checked, timed ones too (one compare, bare and shim alike): a
 * refused launch ends the run with its error and exit status 1, so that no
 * figure comes from launches that did nothing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#define CHECK(call)                                                             \
    do {                                                                        \
        CUresult rc_ = (call);                                                  \
        if (rc_ != CUDA_SUCCESS) {                                              \
            fprintf(stderr, "%s failed: %d\n", #call, rc_);                     \
            return 1;                                                           \
        }                                                                       \
    } while (0)

int main(int argc, char **argv)
{
    int batches = argc > 1 ? atoi(argv[1]) : 200;
    int batch = argc > 2 ? atoi(argv[2]) : 20000;
    if (batches < 1 || batch < 1) {
        fprintf(stderr, "BATCHES and BATCH must be positive, got %d and %d\n", batches, batch);
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, "launch_overhead"));
    CHECK(cuModuleGetFunction(&fn, mod, "empty_kernel"));
    for (int i = 0; i < batch; i++)   /* warm up: token, checkpoints, caches */
        CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CHECK(cuCtxSynchronize());
    double *per_launch = malloc(sizeof(double) * (size_t)batches);
    for (int b = 0; b < batches; b++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < batch; i++) {
            CUresult rc = cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
            if (__builtin_expect(rc != CUDA_SUCCESS, 0)) {
                fprintf(stderr, "cuLaunchKernel failed with %d at launch %d of batch %d (of %d x %d): "
                        "expected CUDA_SUCCESS (0)\n", rc, i, b, batches, batch);
                return 1;
            }
        }
        uint64_t t1 = now_ns();
        per_launch[b] = (double)(t1 - t0) / batch;
        CHECK(cuCtxSynchronize());   /* outside the timing: keep the queue short */
    }
    qsort(per_launch, (size_t)batches, sizeof(double), cmp_double);
    printf("launches=%lld\nmin_ns=%.2f\nmedian_ns=%.2f\n", (long long)batches * batch, per_launch[0],
           per_launch[batches / 2]);
    free(per_launch);
    return 0;
}
