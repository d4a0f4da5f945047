/* nvml_more_gpus: an NVML that lists more GPUs before the simulated one, as
 * NVML lists every GPU of the node whatever CUDA_VISIBLE_DEVICES says.
 * GSLICE_REAL_LIBNVML points the shim here; the rest of NVML is the
 * simulated libnvidia-ml.so.1 this library is linked against.
 *   GSLICE_TEST_NVML_EXTRA_UUIDS  the extra GPUs' UUIDs, comma-separated (at most 8)
 *   GSLICE_TEST_NVML_EXTRA_USED   bytes: this process is listed on each extra GPU
 *                                 using that much (unset: not listed)
 * The extra GPUs have 16 GiB, their used memory that figure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gslice_nvml_abi.h"

#define MAX_EXTRA 8
#define EXTRA_TOTAL (16ull << 30)

struct nvmlDevice_st {
    char uuid[96];
};
static struct nvmlDevice_st extra[MAX_EXTRA];

static unsigned int extra_count(void)
{
    static int n = -1;
    if (n < 0) {
        char list[1024];
        snprintf(list, sizeof list, "%s", getenv("GSLICE_TEST_NVML_EXTRA_UUIDS") ?: "");
        n = 0;
        for (char *save = NULL, *u = strtok_r(list, ",", &save); u && n < MAX_EXTRA; u = strtok_r(NULL, ",", &save))
            snprintf(extra[n++].uuid, sizeof extra[0].uuid, "%s", u);
    }
    return (unsigned int)n;
}

static unsigned long long extra_used(void)
{
    const char *text = getenv("GSLICE_TEST_NVML_EXTRA_USED");
    return text ? strtoull(text, NULL, 10) : 0;
}

static void *sim(const char *name)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_NOLOAD);
    return h ? dlsym(h, name) : NULL;
}

static bool is_extra(nvmlDevice_t dev)
{
    return dev >= extra && dev < extra + MAX_EXTRA;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    nvmlReturn_t (*real)(unsigned int *) = sim("nvmlDeviceGetCount_v2");
    nvmlReturn_t rc = real ? real(count) : NVML_ERROR_FUNCTION_NOT_FOUND;
    if (rc == NVML_SUCCESS)
        *count += extra_count();
    return rc;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (index < extra_count()) {
        *device = &extra[index];
        return NVML_SUCCESS;
    }
    nvmlReturn_t (*real)(unsigned int, nvmlDevice_t *) = sim("nvmlDeviceGetHandleByIndex_v2");
    return real ? real(index - extra_count(), device) : NVML_ERROR_FUNCTION_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    if (is_extra(device)) {
        snprintf(uuid, length, "%s", device->uuid);
        return NVML_SUCCESS;
    }
    nvmlReturn_t (*real)(nvmlDevice_t, char *, unsigned int) = sim("nvmlDeviceGetUUID");
    return real ? real(device, uuid, length) : NVML_ERROR_FUNCTION_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (is_extra(device)) {
        memory->total = EXTRA_TOTAL;
        memory->used = extra_used();
        memory->free = EXTRA_TOTAL - memory->used;
        return NVML_SUCCESS;
    }
    nvmlReturn_t (*real)(nvmlDevice_t, nvmlMemory_t *) = sim("nvmlDeviceGetMemoryInfo");
    return real ? real(device, memory) : NVML_ERROR_FUNCTION_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos)
{
    if (is_extra(device)) {
        const char *listed = getenv("GSLICE_TEST_NVML_EXTRA_USED");
        if (!listed || *count < 1) {
            *count = listed ? 1 : 0;
            return listed ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
        }
        infos[0] = (nvmlProcessInfo_t){(unsigned int)getpid(), extra_used(), 0xFFFFFFFFu, 0xFFFFFFFFu};
        *count = 1;
        return NVML_SUCCESS;
    }
    nvmlReturn_t (*real)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *) =
        sim("nvmlDeviceGetComputeRunningProcesses_v3");
    return real ? real(device, count, infos) : NVML_ERROR_FUNCTION_NOT_FOUND;
}
