/* What a check program's process holds on the simulated GPU, two ways:
 * the device's used memory from cuMemGetInfo, and the process's own line
 * in NVML's per-process listing. */
#ifndef GSLICE_SIMGPU_MEMORY_CHECK_H
#define GSLICE_SIMGPU_MEMORY_CHECK_H

#include <unistd.h>

#include "gslice_cuda_abi.h"
#include "gslice_nvml_abi.h"
#include "gslice_cuda_driver_api.h"
#include "check.h"

static size_t used_now(void) {
    size_t free_b, total;
    CHECK(cuMemGetInfo_v2(&free_b, &total));
    return total - free_b;
}

static unsigned long long nvml_own_used(void) {
    nvmlDevice_t dev;
    nvmlProcessInfo_t infos[64];
    unsigned int n = 64;
    if (nvmlInit_v2() || nvmlDeviceGetHandleByIndex_v2(0, &dev) || nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, infos))
        return (unsigned long long)-1;
    for (unsigned i = 0; i < n; i++)
        if (infos[i].pid == (unsigned)getpid()) return infos[i].usedGpuMemory;
    return 0;
}

#endif
