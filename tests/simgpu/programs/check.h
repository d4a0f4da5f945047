/* CHECK(call): a driver call that must succeed; otherwise print
 * "FAIL <call> = <code>" (what the tests look for) and exit 1. */
#ifndef GSLICE_SIMGPU_CHECK_H
#define GSLICE_SIMGPU_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "gslice_cuda_abi.h"

#define CHECK(call)                                                          \
    do {                                                                     \
        CUresult rc_ = (call);                                               \
        if (rc_ != CUDA_SUCCESS) {                                           \
            printf("FAIL %s = %d\n", #call, (int)rc_);                       \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#endif
