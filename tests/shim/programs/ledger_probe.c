/* ledger_probe: allocations and frees on command, for the memory ledger's
 * tests (test_ledger_outcomes.py). Linked with -lcuda (the simulated
 * libcuda.so.1). Reads one command per line on stdin, answers one line:
 *
 *   alloc BYTES        -> alloc ID RC          cuMemAlloc_v2
 *   free ID            -> free RC              cuMemFree_v2
 *   info               -> info FREE TOTAL      cuMemGetInfo_v2 (the group's view under the shim)
 *   alloc-thread BYTES -> alloc-thread started cuMemAlloc_v2 on a thread of its own
 *   join               -> join ID RC           ... its end
 *   nvml-info INDEX    -> nvml-info TOTAL FREE USED RC   nvmlDeviceGetMemoryInfo of NVML's device INDEX
 *                         (NVML: GSLICE_REAL_LIBNVML, else libnvidia-ml.so.1)
 *   stats              -> stats held=... pending=... slots=... reservations=... flushes=... released=...
 *   exit               -> (exits 0) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gslice_cuda_abi.h"
#include "gslice_cuda_driver_api.h"
#include "gslice_nvml_abi.h"
#include "../../../hook/shim_api.h"

#define MAX_ALLOCS 1024

static CUcontext ctx;
static CUdeviceptr ptrs[MAX_ALLOCS];
static int n_ptrs;
static pthread_t alloc_thread;
static unsigned long long thread_bytes;
static CUresult thread_rc;
static int thread_id = -1;

static void check(CUresult rc, const char *what)
{
    if (rc != CUDA_SUCCESS) {
        printf("error=%s:%d\n", what, rc);
        fflush(stdout);
        exit(3);
    }
}

static int remember(CUdeviceptr p)
{
    if (n_ptrs == MAX_ALLOCS)
        return -1;
    ptrs[n_ptrs] = p;
    return n_ptrs++;
}

static void *alloc_on_thread(void *unused)
{
    (void)unused;
    CUdeviceptr p = 0;
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    thread_rc = cuMemAlloc_v2(&p, (size_t)thread_bytes);
    if (thread_rc == CUDA_SUCCESS)
        thread_id = remember(p);
    return NULL;
}

static void nvml_info(unsigned int index)
{
    const char *path = getenv("GSLICE_REAL_LIBNVML");
    void *h = dlopen(path && *path ? path : "libnvidia-ml.so.1", RTLD_NOW);
    nvmlReturn_t (*init)(void) = h ? (nvmlReturn_t(*)(void))dlsym(h, "nvmlInit_v2") : NULL;
    nvmlReturn_t (*by_index)(unsigned int, nvmlDevice_t *) =
        h ? (nvmlReturn_t(*)(unsigned int, nvmlDevice_t *))dlsym(h, "nvmlDeviceGetHandleByIndex_v2") : NULL;
    nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t *) =
        h ? (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(h, "nvmlDeviceGetMemoryInfo") : NULL;
    nvmlDevice_t dev;
    nvmlMemory_t mem = {0};
    nvmlReturn_t rc = !init || !by_index || !memory_info ? NVML_ERROR_FUNCTION_NOT_FOUND : init();
    if (rc == NVML_SUCCESS)
        rc = by_index(index, &dev);
    if (rc == NVML_SUCCESS)
        rc = memory_info(dev, &mem);
    printf("nvml-info %llu %llu %llu %d\n", mem.total, mem.free, mem.used, rc);
}

static void print_stats(void)
{
    int (*stats)(gslice_shim_stats *) = (int (*)(gslice_shim_stats *))dlsym(RTLD_DEFAULT, "gslice_shim_stats_get");
    gslice_shim_stats st;
    if (!stats || stats(&st) != 0) {
        printf("stats none\n");
        return;
    }
    printf("stats held=%llu pending=%llu slots=%d reservations=%llu flushes=%llu released=%llu\n",
           (unsigned long long)st.memory_held, (unsigned long long)st.memory_pending_release, st.slots,
           (unsigned long long)st.reservations, (unsigned long long)st.release_flushes,
           (unsigned long long)st.bytes_released);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice dev;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    printf("ready\n");
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "";
        unsigned long long arg = 0;
        if (sscanf(line, "%31s %llu", cmd, &arg) < 1)
            continue;
        if (!strcmp(cmd, "alloc")) {
            CUdeviceptr p = 0;
            CUresult rc = cuMemAlloc_v2(&p, (size_t)arg);
            printf("alloc %d %d\n", rc == CUDA_SUCCESS ? remember(p) : -1, rc);
        } else if (!strcmp(cmd, "free")) {
            CUresult rc = arg < (unsigned long long)n_ptrs ? cuMemFree_v2(ptrs[arg]) : CUDA_ERROR_INVALID_VALUE;
            printf("free %d\n", rc);
        } else if (!strcmp(cmd, "info")) {
            size_t free_bytes = 0, total = 0;
            CUresult rc = cuMemGetInfo_v2(&free_bytes, &total);
            printf("info %zu %zu %d\n", free_bytes, total, rc);
        } else if (!strcmp(cmd, "alloc-thread")) {
            thread_bytes = arg;
            check(pthread_create(&alloc_thread, NULL, alloc_on_thread, NULL) ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS,
                  "pthread_create");
            printf("alloc-thread started\n");
        } else if (!strcmp(cmd, "join")) {
            pthread_join(alloc_thread, NULL);
            printf("join %d %d\n", thread_id, thread_rc);
        } else if (!strcmp(cmd, "nvml-info")) {
            nvml_info((unsigned int)arg);
        } else if (!strcmp(cmd, "stats")) {
            print_stats();
        } else if (!strcmp(cmd, "exit")) {
            return 0;
        } else {
            printf("unknown %s\n", cmd);
        }
    }
    return 0;
}
