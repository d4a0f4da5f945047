/* Memory rules of the simulated driver that real frameworks depend on:
 * virtual-memory references and mappings, host-NUMA cuMemCreate, the
 * stream-ordered pool's reserve and trim, per-context overhead and context
 * teardown, copy/fill engine time. Prints "key=value" lines. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gslice_cuda_abi.h"
#include "gslice_nvml_abi.h"
#include "gslice_cuda_driver_api.h"
#include "check.h"
#include "memory_check.h"

#define MiB (1ull << 20)

static double ms_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

int main(void) {
    CUdevice dev;
    CUcontext primary;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    size_t before_ctx = 0;
    printf("nvml_before_context=%llu\n", nvml_own_used());
    CHECK(cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(cuCtxSetCurrent(primary));
    printf("context_overhead=%zu\n", used_now() - before_ctx);
    printf("nvml_with_context=%llu\n", nvml_own_used());
    size_t base = used_now();

    /* VMM: create, map, release while mapped: freed only at unmap. */
    CUmemAllocationProp prop = {.type = 1, .location = {CU_MEM_LOCATION_TYPE_DEVICE, 0}};
    CUmemGenericAllocationHandle h, again;
    CUdeviceptr va;
    CHECK(cuMemCreate(&h, 8 * MiB, &prop, 0));
    CHECK(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CHECK(cuMemMap(va, 8 * MiB, 0, h, 0));
    CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + MiB)));
    printf("retain_same_handle=%d\n", again == h);
    CHECK(cuMemRelease(h));
    CHECK(cuMemRelease(again));
    printf("vmm_held_after_releases=%zu\n", used_now() - base);
    printf("vmm_release_again=%d\n", (int)cuMemRelease(h));
    CHECK(cuMemUnmap(va, 8 * MiB));
    printf("vmm_held_after_unmap=%zu\n", used_now() - base);
    CHECK(cuMemAddressFree(va, 8 * MiB));
    CUmemAllocationProp host = {.type = 1, .location = {CU_MEM_LOCATION_TYPE_HOST_NUMA, 0}};
    CHECK(cuMemCreate(&h, 8 * MiB, &host, 0));
    printf("host_numa_counted=%zu\n", used_now() - base);
    CHECK(cuMemRelease(h));

    /* Pool: primed, freed, kept until synchronised above the threshold / trimmed. */
    CUmemoryPool pool;
    CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
    cuuint64_t threshold = 64 * MiB, reserved = 0;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    CUdeviceptr a, b;
    CHECK(cuMemAllocAsync(&a, 32 * MiB, NULL));
    CHECK(cuMemFreeAsync(a, NULL));
    CHECK(cuStreamSynchronize(NULL));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    printf("pool_reserved_after_free=%llu pool_held_after_free=%zu\n", reserved, used_now() - base);
    CHECK(cuMemAllocAsync(&b, 16 * MiB, NULL));   /* reuses the pool's memory */
    printf("pool_reuse_held=%zu\n", used_now() - base);
    CHECK(cuMemFreeAsync(b, NULL));
    CHECK(cuStreamSynchronize(NULL));
    CHECK(cuMemPoolTrimTo(pool, 0));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    printf("pool_reserved_after_trim=%llu pool_held_after_trim=%zu\n", reserved, used_now() - base);

    /* Copies and fills take device time. */
    CUdeviceptr x, y;
    CHECK(cuMemAlloc_v2(&x, 64 * MiB));
    CHECK(cuMemAlloc_v2(&y, 64 * MiB));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(cuMemcpyDtoD_v2(y, x, 64 * MiB));
    CHECK(cuMemsetD8_v2(x, 1, 64 * MiB));
    printf("copy_fill_ms=%.3f\n", ms_since(&t0));

    /* Teardown: a created context's allocations and overhead go with it; a
     * primary reset frees the primary's allocations. */
    size_t before_created = used_now();
    CUcontext created;
    CHECK(cuCtxCreate_v2(&created, 0, dev));
    CUdeviceptr z;
    CHECK(cuMemAlloc_v2(&z, 16 * MiB));
    printf("created_context_cost=%zu\n", used_now() - before_created);
    CHECK(cuCtxDestroy_v2(created));
    CHECK(cuCtxSetCurrent(primary));
    printf("after_destroy_delta=%zu\n", used_now() - before_created);
    CHECK(cuDevicePrimaryCtxReset_v2(dev));
    printf("after_reset_held=%zu\n", used_now() - base);
    printf("free_after_reset=%d\n", (int)cuMemFree_v2(x));
    CHECK(cuDevicePrimaryCtxRelease_v2(dev));
    printf("nvml_after_last_release=%llu\n", nvml_own_used());
    return 0;
}
