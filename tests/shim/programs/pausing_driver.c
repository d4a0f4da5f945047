/* A driver in front of the simulated libcuda.so.1 that can hold a call
 * inside the driver, for tests that need a call to be in flight while
 * another thread runs (tests/shim/test_pool_charges.py). The shim loads it
 * as its real driver (GSLICE_REAL_LIBCUDA=<this library>); it defines
 * cuMemAllocAsync, cuGraphLaunch and cuMemAllocPitch_v2, and every other
 * name resolves to the simulated libcuda.so.1, its dependency.
 *
 * pausing_driver_hold_next(hold): the next call of one of those three (any
 * thread) posts hold->entered once the shim has charged it and is calling
 * the driver, and waits for hold->release before the simulated driver runs
 * it. Pitch alignment is 1024 bytes (the simulator's is 512): a pitch above
 * the 512-byte rows the shim reserves for. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <semaphore.h>
#include <stddef.h>

#include "gslice_cuda_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define PITCH_ALIGNMENT 1024u

typedef struct pausing_driver_hold {
    sem_t entered;
    sem_t release;
} pausing_driver_hold;

static pausing_driver_hold *armed;

EXPORT void pausing_driver_hold_next(pausing_driver_hold *hold)
{
    __atomic_store_n(&armed, hold, __ATOMIC_RELEASE);
}

static void hold_here(void)
{
    pausing_driver_hold *hold = __atomic_exchange_n(&armed, NULL, __ATOMIC_ACQ_REL);
    if (!hold)
        return;
    sem_post(&hold->entered);
    while (sem_wait(&hold->release) != 0) {
    }
}

/* The simulated driver's own function of that name. */
static void *simulated(const char *name)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    return lib ? dlsym(lib, name) : NULL;
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    hold_here();
    CUresult (*real)(CUdeviceptr *, size_t, CUstream) = (CUresult(*)(CUdeviceptr *, size_t, CUstream))simulated(
        "cuMemAllocAsync");
    return real ? real(dptr, bytesize, hStream) : CUDA_ERROR_NOT_INITIALIZED;
}

EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream hStream)
{
    hold_here();
    CUresult (*real)(CUgraphExec, CUstream) = (CUresult(*)(CUgraphExec, CUstream))simulated("cuGraphLaunch");
    return real ? real(exec, hStream) : CUDA_ERROR_NOT_INITIALIZED;
}

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                   unsigned int element_size)
{
    hold_here();
    CUresult (*real)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int) =
        (CUresult(*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int))simulated("cuMemAllocPitch_v2");
    size_t aligned_width = (width + PITCH_ALIGNMENT - 1) / PITCH_ALIGNMENT * PITCH_ALIGNMENT;
    return real ? real(dptr, pitch, aligned_width, height, element_size) : CUDA_ERROR_NOT_INITIALIZED;
}
