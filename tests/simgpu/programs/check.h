/* CHECK(call): a driver call that must succeed; otherwise print
 * "FAIL <call> = <code>" (what the tests look for) and exit 1. */
#ifndef GSLICE_SIMGPU_CHECK_H
#define GSLICE_SIMGPU_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"

#define CHECK(call)                                                          \
    do {                                                                     \
        CUresult rc_ = (call);                                               \
        if (rc_ != CUDA_SUCCESS) {                                           \
            printf("FAIL %s = %d\n", #call, (int)rc_);                       \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

/* cuInit, then device 0's primary context retained and made current: how
 * a check program starts (dev, when not NULL, receives the device). */
static inline CUcontext check_primary_context(CUdevice *dev)
{
    CUdevice device;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&device, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, device));
    CHECK(cuCtxSetCurrent(ctx));
    if (dev)
        *dev = device;
    return ctx;
}

#endif
