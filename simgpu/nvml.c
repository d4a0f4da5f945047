/* The simulated libnvidia-ml.so.1: what nvidia-smi and pynvml read, from
 * the same shared segment the simulated libcuda.so.1 runs on. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gslice_nvml_abi.h"
#include "sim_device.h"

#define NVML_EXPORT SIM_EXPORT
#define SIM_NVML_DRIVER_VERSION "580.00.00"
#define SIM_NVML_VERSION "13.580.00"
#define SIM_NVML_CUDA_VERSION 13000

struct nvmlDevice_st {
    unsigned int index;
};

static struct nvmlDevice_st the_device = {0};
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static struct sim_device_shared *device;

static nvmlReturn_t initialise(void) {
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&init_lock);
    if (!device) {
        char err[512] = "";
        device = sim_device_attach(err, sizeof err);
        if (!device) {
            sim_log("nvmlInit: %s", err);
            rc = NVML_ERROR_DRIVER_NOT_LOADED;
        }
    }
    if (rc == NVML_SUCCESS) init_count++;
    pthread_mutex_unlock(&init_lock);
    return rc;
}

NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) { return initialise(); }
NVML_EXPORT nvmlReturn_t nvmlInit(void) { return initialise(); }
NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return initialise();
}

NVML_EXPORT nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t rc = init_count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (init_count > 0) init_count--;
    pthread_mutex_unlock(&init_lock);
    return rc; /* the mapping stays: another init may follow */
}

static nvmlReturn_t require_init(void) {
    return __atomic_load_n(&init_count, __ATOMIC_ACQUIRE) > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

static nvmlReturn_t require_device(nvmlDevice_t dev) {
    nvmlReturn_t rc = require_init();
    if (rc) return rc;
    return dev == &the_device ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

static nvmlReturn_t copy_string(char *out, unsigned int len, const char *text) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
    default: return "Unknown Error";
    }
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int len) {
    nvmlReturn_t rc = require_init();
    return rc ? rc : copy_string(version, len, SIM_NVML_DRIVER_VERSION);
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int len) {
    return copy_string(version, len, SIM_NVML_VERSION);
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    *version = SIM_NVML_CUDA_VERSION;
    return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    nvmlReturn_t rc = require_init();
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = 1;
    return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *dev) {
    nvmlReturn_t rc = require_init();
    if (rc) return rc;
    if (!dev || index != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &the_device;
    return NVML_SUCCESS;
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *dev) {
    return nvmlDeviceGetHandleByIndex_v2(index, dev);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) {
    nvmlReturn_t rc = require_init();
    if (rc) return rc;
    if (!uuid || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    if (strcmp(uuid, device->uuid) != 0) return NVML_ERROR_NOT_FOUND;
    *dev = &the_device;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int len) {
    nvmlReturn_t rc = require_device(dev);
    return rc ? rc : copy_string(uuid, len, device->uuid);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int len) {
    nvmlReturn_t rc = require_device(dev);
    return rc ? rc : copy_string(name, len, device->name);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index) {
    nvmlReturn_t rc = require_device(dev);
    if (rc) return rc;
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = dev->index;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t dev, nvmlMemory_t *memory) {
    nvmlReturn_t rc = require_device(dev);
    if (rc) return rc;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t total = device->total_memory, used = sim_memory_used(device);
    if (used > total) used = total;
    memory->total = total;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t dev, nvmlMemory_v2_t *memory) {
    nvmlReturn_t rc = require_device(dev);
    if (rc) return rc;
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    uint64_t total = device->total_memory, used = sim_memory_used(device);
    if (used > total) used = total;
    memory->total = total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t dev, nvmlUtilization_t *utilization) {
    nvmlReturn_t rc = require_device(dev);
    if (rc) return rc;
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = sim_utilisation_percent(device);
    utilization->memory = 0; /* memory bandwidth is not simulated */
    return NVML_SUCCESS;
}

/* Processes with a context on the device, in slot order: live ones, and
 * gone ones whose context is still being torn down (as the real driver
 * lists a killed process until its memory is freed). */
static nvmlReturn_t running_processes(nvmlDevice_t dev, unsigned int *count, void *out, size_t entry_size) {
    nvmlReturn_t rc = require_device(dev);
    if (rc) return rc;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    sim_registry_reap(device);
    unsigned int found = 0, capacity = *count;
    for (int i = 0; i < SIM_MAX_PROCESSES; i++) {
        struct sim_process_slot *slot = &device->slots[i];
        uint32_t state = __atomic_load_n(&slot->state, __ATOMIC_ACQUIRE);
        if (state != SIM_SLOT_LIVE && state != SIM_SLOT_TEARDOWN) continue;
        if (out && found < capacity) {
            unsigned char *entry = (unsigned char *)out + found * entry_size;
            if (entry_size == sizeof(nvmlProcessInfo_t)) {
                nvmlProcessInfo_t info = {(unsigned)slot->pid, __atomic_load_n(&slot->memory_used, __ATOMIC_RELAXED),
                                          0xffffffffu, 0xffffffffu};
                memcpy(entry, &info, sizeof info);
            } else {
                nvmlProcessInfo_v1_t info = {(unsigned)slot->pid,
                                             __atomic_load_n(&slot->memory_used, __ATOMIC_RELAXED)};
                memcpy(entry, &info, sizeof info);
            }
        }
        found++;
    }
    *count = found;
    if (found > capacity || (!out && found)) return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t dev, unsigned int *count,
                                                                 nvmlProcessInfo_t *infos) {
    return running_processes(dev, count, infos, sizeof *infos);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t dev, unsigned int *count,
                                                                 nvmlProcessInfo_t *infos) {
    return running_processes(dev, count, infos, sizeof *infos);
}
NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t dev, unsigned int *count,
                                                              nvmlProcessInfo_v1_t *infos) {
    return running_processes(dev, count, infos, sizeof *infos);
}
