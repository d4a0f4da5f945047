/* slow_alloc_libcuda: the simulated libcuda.so.1 (linked against it), with a
 * cuMemAlloc_v2 that holds an allocation of GSLICE_TEST_SLOW_ALLOC_BYTES
 * before the driver takes the memory: it creates GATE.entered
 * (GATE = GSLICE_TEST_SLOW_ALLOC_GATE) and waits until GATE.go exists (at
 * most 60 s). GSLICE_REAL_LIBCUDA points the shim here: a large allocation
 * the shim reserved and the driver has not made yet, for as long as the
 * test wants. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "gslice_cuda_abi.h"

static void hold(void)
{
    const char *gate = getenv("GSLICE_TEST_SLOW_ALLOC_GATE");
    if (!gate)
        return;
    char entered[4096], go[4096];
    snprintf(entered, sizeof entered, "%s.entered", gate);
    snprintf(go, sizeof go, "%s.go", gate);
    int fd = open(entered, O_CREAT | O_WRONLY, 0644);
    if (fd >= 0)
        close(fd);
    struct timespec ms = {0, 1000000};
    for (int i = 0; i < 60000 && access(go, F_OK) != 0; i++)
        nanosleep(&ms, NULL);
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    const char *slow = getenv("GSLICE_TEST_SLOW_ALLOC_BYTES");
    if (slow && strtoull(slow, NULL, 10) == bytesize)
        hold();
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CUresult (*real)(CUdeviceptr *, size_t) = h ? (CUresult(*)(CUdeviceptr *, size_t))dlsym(h, "cuMemAlloc_v2") : NULL;
    return real ? real(dptr, bytesize) : CUDA_ERROR_NOT_INITIALIZED;
}
