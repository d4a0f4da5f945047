/* Device memory of the simulated libcuda.so.1.
 *
 * Every allocation is a real private anonymous mapping made with
 * MAP_NORESERVE, so device pointers are usable by memcpy and a 10 GiB
 * allocation costs nothing until touched. The bytes count against the
 * device's physical memory in the shared segment, atomically across
 * processes; sizes are counted exactly as asked (no rounding).
 * Copies and fills take time in proportion to their bytes (device-side ones
 * on the engine, like kernels). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cuda_internal.h"

/* memfd_create through syscall(): the glibc wrapper appeared in 2.27, and the
 * simulated GPU ships in the manylinux2014 (glibc 2.17) wheel beside the shim. */
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef SYS_memfd_create
#define SYS_memfd_create 319 /* x86-64 */
#endif
static int anonymous_memory_file(const char *name) {
    return (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC);
}

#define SIM_VMM_GRANULARITY (2ull << 20)
#define SIM_PITCH_ALIGNMENT 512u

enum allocation_kind {
    ALLOC_DEVICE,   /* cuMemAlloc & co: counted against device memory */
    ALLOC_RESERVED, /* cuMemAddressReserve: address range only, not counted */
    ALLOC_HOST,     /* cuMemAllocHost: pinned host memory, not counted */
    ALLOC_POOL,     /* cuMemAllocAsync: counted in the pool's reserve instead */
};

struct allocation {
    uintptr_t base;
    size_t size;      /* bytes mapped */
    size_t counted;   /* bytes counted against device memory */
    uint32_t kind;
    CUcontext ctx;    /* current when it was made: its teardown frees it */
    struct CUmemPoolHandle_st *pool;   /* ALLOC_POOL: the pool it came from */
};

/* Allocations sorted by base, for exact frees and range checks on copies. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct allocation *table;
static size_t table_count, table_capacity;

struct CUarray_st {
    uint32_t tag;
    void *base;
    size_t bytes;
    size_t row_bytes;   /* one row of level 0: 2D / 3D copies address (x, y, z) as rows and slices */
    size_t rows;        /* rows per slice */
};

/* cuMemCreate's physical memory: alive while any reference (cuMemCreate,
 * cuMemRetainAllocationHandle) or any mapping (cuMemMap) remains. */
struct vmm_allocation {
    uint32_t tag;
    int fd;
    size_t size;
    size_t counted;   /* device bytes (0 for host / host-NUMA locations) */
    uint32_t refs;
    uint32_t maps;
};

/* cuMemMap mappings, for cuMemUnmap and cuMemRetainAllocationHandle. */
struct vmm_mapping {
    uintptr_t base;
    size_t size;
    struct vmm_allocation *v;
};
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vmm_mapping *vmm_maps;
static size_t vmm_map_count, vmm_map_capacity;

/* ---- allocation table --------------------------------------------------- */

/* Index of the first entry with base > ptr. Called with table_lock held. */
static size_t upper_bound(uintptr_t ptr) {
    size_t lo = 0, hi = table_count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (table[mid].base <= ptr) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static bool table_insert(struct allocation entry) {
    pthread_mutex_lock(&table_lock);
    if (table_count == table_capacity) {
        size_t capacity = table_capacity ? table_capacity * 2 : 64;
        struct allocation *grown = realloc(table, capacity * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&table_lock);
            return false;
        }
        table = grown;
        table_capacity = capacity;
    }
    size_t at = upper_bound(entry.base);
    memmove(&table[at + 1], &table[at], (table_count - at) * sizeof *table);
    table[at] = entry;
    table_count++;
    pthread_mutex_unlock(&table_lock);
    return true;
}

/* Remove the entry starting exactly at base with the given kind. */
static bool table_remove(uintptr_t base, uint32_t kind, struct allocation *out) {
    pthread_mutex_lock(&table_lock);
    size_t at = upper_bound(base);
    bool found = at > 0 && table[at - 1].base == base && table[at - 1].kind == kind;
    if (found) {
        *out = table[at - 1];
        memmove(&table[at - 1], &table[at], (table_count - at) * sizeof *table);
        table_count--;
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}

/* The allocation holding [ptr, ptr + bytes), if any. */
static bool table_find_range(uintptr_t ptr, size_t bytes, struct allocation *out) {
    pthread_mutex_lock(&table_lock);
    size_t at = upper_bound(ptr);
    bool found = false;
    if (at > 0) {
        struct allocation *a = &table[at - 1];
        found = ptr >= a->base && bytes <= a->size && ptr - a->base <= a->size - bytes;
        if (found && out) *out = *a;
    }
    pthread_mutex_unlock(&table_lock);
    return found;
}

/* ---- allocating --------------------------------------------------------- */

static void *map_anonymous(size_t bytes, bool low_32bit) {
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (low_32bit ? MAP_32BIT : 0);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Count `bytes` against the device, then back them with a mapping. */
static CUresult allocate(size_t bytes, bool low_32bit, uintptr_t *out) {
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    if (!sim_memory_reserve(sim_process.dev, sim_process.slot, bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = map_anonymous(bytes, low_32bit);
    struct allocation entry = {(uintptr_t)p, bytes, bytes, ALLOC_DEVICE, sim_current_context(), NULL};
    if (!p || !table_insert(entry)) {
        if (p) munmap(p, bytes);
        sim_memory_release(sim_process.dev, sim_process.slot, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (uintptr_t)p;
    return CUDA_SUCCESS;
}

static void pool_block_freed(struct CUmemPoolHandle_st *pool, size_t bytes);

void sim_memory_free_context(CUcontext ctx) {
    for (;;) {
        struct allocation a;
        bool found = false;
        pthread_mutex_lock(&table_lock);
        for (size_t i = 0; i < table_count && !found; i++)
            if (table[i].ctx == ctx && (table[i].kind == ALLOC_DEVICE || table[i].kind == ALLOC_POOL)) {
                a = table[i];
                found = true;
            }
        pthread_mutex_unlock(&table_lock);
        if (!found) return;
        sim_memory_free((CUdeviceptr)a.base);
    }
}

CUresult sim_memory_free(CUdeviceptr ptr) {
    struct allocation a;
    if (table_remove((uintptr_t)ptr, ALLOC_DEVICE, &a)) {
        munmap((void *)a.base, a.size);
        sim_memory_release(sim_process.dev, sim_process.slot, a.counted);
        return CUDA_SUCCESS;
    }
    if (table_remove((uintptr_t)ptr, ALLOC_POOL, &a)) {
        munmap((void *)a.base, a.size);
        pool_block_freed(a.pool, a.size); /* the pool keeps the memory */
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_VALUE;
}

/* cuMemAlloc's work, without the capture check (stream-ordered and
 * managed allocations use it too). */
static CUresult alloc_device(CUdeviceptr *dptr, size_t bytesize) {
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    CUresult rc = allocate(bytesize, false, &p);
    if (rc == CUDA_SUCCESS) *dptr = (CUdeviceptr)p;
    return rc;
}

CUresult sim_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    /* A synchronous allocation is "potentially unsafe" during capture. */
    if ((rc = sim_capture_check_unsafe())) return rc;
    return alloc_device(dptr, bytesize);
}
CU_EXPORT(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize));

/* The CUDA 2.x form with 32-bit pointers: the mapping goes below 2 GiB so
 * the address fits. */
CUresult sim_cuMemAlloc(unsigned int *dptr, unsigned int bytesize) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if ((rc = sim_capture_check_unsafe())) return rc;
    if (!dptr) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    rc = allocate(bytesize, true, &p);
    if (rc) return rc;
    if (p > 0xffffffffu) {
        sim_memory_free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (unsigned int)p;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemAlloc, (unsigned int *dptr, unsigned int bytesize));

CUresult sim_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
                                unsigned int element_size) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!dptr || !pitch || !width || !height) return CUDA_ERROR_INVALID_VALUE;
    if (element_size != 4 && element_size != 8 && element_size != 16) return CUDA_ERROR_INVALID_VALUE;
    size_t row = (width + SIM_PITCH_ALIGNMENT - 1) / SIM_PITCH_ALIGNMENT * SIM_PITCH_ALIGNMENT;
    if (height > SIZE_MAX / row) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t p;
    rc = allocate(row * height, false, &p);
    if (rc) return rc;
    *dptr = (CUdeviceptr)p;
    *pitch = row;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemAllocPitch_v2, (CUdeviceptr * dptr, size_t *pitch, size_t width, size_t height,
                               unsigned int element_size));

CUresult sim_cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_require_context();
    if (rc) return rc;
    return alloc_device(dptr, bytesize);
}
CU_EXPORT(cuMemAllocManaged, (CUdeviceptr * dptr, size_t bytesize, unsigned int flags));

CUresult sim_cuMemFree_v2(CUdeviceptr dptr) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!dptr) return CUDA_SUCCESS; /* freeing NULL is a no-op, as on the driver */
    if ((rc = sim_capture_check_unsafe())) return rc;
    return sim_memory_free(dptr);
}
CU_EXPORT(cuMemFree_v2, (CUdeviceptr dptr));

CUresult sim_cuMemFree(unsigned int dptr) { return sim_cuMemFree_v2((CUdeviceptr)dptr); }
CU_EXPORT(cuMemFree, (unsigned int dptr));

/* ---- stream-ordered pools ----------------------------------------------
 * The device's default pool and pools made by cuMemPoolCreate. A block
 * freed with cuMemFreeAsync goes back to its pool, which keeps the device
 * memory (RESERVED_MEM_CURRENT) and reuses it; at the next synchronisation
 * (stream, event, context) each pool releases what it holds above
 * max(in use, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) (default threshold 0);
 * cuMemPoolTrimTo releases down to max(in use, minBytesToKeep).
 * cuMemPoolDestroy releases a pool's memory at once, or, while blocks
 * allocated from it are not freed yet (frees still queued on a stream
 * included), when the last of them is freed (cuda.h). */
struct CUmemPoolHandle_st {
    uint32_t tag;
    pthread_mutex_t lock;
    uint64_t reserved, used, threshold, reserved_high, used_high;
    uint64_t max_size;        /* CUmemPoolProps.maxSize; 0: no limit */
    bool destroyed;           /* cuMemPoolDestroy with blocks outstanding: freed with the last one */
    struct CUmemPoolHandle_st *next;
};
static struct CUmemPoolHandle_st default_pool = {SIM_TAG_POOL, PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, 0, false, NULL};
/* Every pool not yet gone, the default one first. */
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUmemPoolHandle_st *pools = &default_pool;

/* A pool the caller may use: made and not destroyed. */
static bool pool_live(CUmemoryPool pool) {
    pthread_mutex_lock(&pools_lock);
    struct CUmemPoolHandle_st *p = pools;
    while (p && (p != pool || p->destroyed)) p = p->next;
    pthread_mutex_unlock(&pools_lock);
    return p != NULL;
}

/* Called with the pool locked: release what it holds above keep. */
static void pool_shrink_locked(struct CUmemPoolHandle_st *pool, uint64_t keep) {
    if (keep < pool->used) keep = pool->used;
    if (pool->reserved <= keep) return;
    sim_memory_release(sim_process.dev, sim_process.slot, pool->reserved - keep);
    pool->reserved = keep;
}

void sim_pools_release_at_sync(void) {
    pthread_mutex_lock(&pools_lock);
    for (struct CUmemPoolHandle_st *p = pools; p; p = p->next) {
        pthread_mutex_lock(&p->lock);
        if (!p->destroyed) pool_shrink_locked(p, p->threshold);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&pools_lock);
}

/* The pool's memory goes back to the device and the pool is gone. Called
 * with pools_lock held and the pool unlocked, nothing allocated from it. */
static void pool_free_locked(struct CUmemPoolHandle_st *pool) {
    pool_shrink_locked(pool, 0);
    struct CUmemPoolHandle_st **link = &pools;
    while (*link && *link != pool) link = &(*link)->next;
    if (*link) *link = pool->next;
    pool->tag = SIM_TAG_DEAD;
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

static void pool_block_freed(struct CUmemPoolHandle_st *pool, size_t bytes) {
    pthread_mutex_lock(&pools_lock);
    pthread_mutex_lock(&pool->lock);
    pool->used -= bytes;
    bool gone = pool->destroyed && pool->used == 0;
    pthread_mutex_unlock(&pool->lock);
    if (gone) pool_free_locked(pool);
    pthread_mutex_unlock(&pools_lock);
}

static CUresult pool_allocate(struct CUmemPoolHandle_st *pool, size_t bytes, CUdeviceptr *dptr) {
    if (!dptr || !bytes) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&pool->lock);
    uint64_t idle = pool->reserved - pool->used;
    uint64_t grow = bytes > idle ? bytes - idle : 0;
    if (grow && ((pool->max_size && pool->reserved + grow > pool->max_size) ||
                 !sim_memory_reserve(sim_process.dev, sim_process.slot, grow))) {
        pthread_mutex_unlock(&pool->lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void *p = map_anonymous(bytes, false);
    struct allocation entry = {(uintptr_t)p, bytes, 0, ALLOC_POOL, sim_current_context(), pool};
    if (!p || !table_insert(entry)) {
        if (p) munmap(p, bytes);
        if (grow) sim_memory_release(sim_process.dev, sim_process.slot, grow);
        pthread_mutex_unlock(&pool->lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->reserved += grow;
    pool->used += bytes;
    if (pool->reserved > pool->reserved_high) pool->reserved_high = pool->reserved;
    if (pool->used > pool->used_high) pool->used_high = pool->used;
    pthread_mutex_unlock(&pool->lock);
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

/* Pinned device memory of device 0 (the one device), as cuda.h allows. */
CUresult sim_cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (props->location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    p->tag = SIM_TAG_POOL;
    pthread_mutex_init(&p->lock, NULL);
    p->max_size = props->maxSize;
    pthread_mutex_lock(&pools_lock);
    p->next = pools->next;   /* after the default pool */
    pools->next = p;
    pthread_mutex_unlock(&pools_lock);
    *pool = p;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemPoolCreate, (CUmemoryPool * pool, const CUmemPoolProps *props));

/* The default pool cannot be destroyed (CUDA_ERROR_INVALID_VALUE). */
CUresult sim_cuMemPoolDestroy(CUmemoryPool pool) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (pool == &default_pool || !pool_live(pool)) return CUDA_ERROR_INVALID_VALUE;
    struct CUmemPoolHandle_st *p = pool;
    pthread_mutex_lock(&pools_lock);
    pthread_mutex_lock(&p->lock);
    p->destroyed = true;
    bool unused = p->used == 0;
    pthread_mutex_unlock(&p->lock);
    if (unused) pool_free_locked(p);
    pthread_mutex_unlock(&pools_lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemPoolDestroy, (CUmemoryPool pool));

static CUresult device_pool(CUmemoryPool *pool, CUdevice dev) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (dev != 0) return CUDA_ERROR_INVALID_DEVICE;
    *pool = &default_pool;
    return CUDA_SUCCESS;
}
CUresult sim_cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev) { return device_pool(pool, dev); }
CU_EXPORT(cuDeviceGetDefaultMemPool, (CUmemoryPool * pool, CUdevice dev));
CUresult sim_cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev) { return device_pool(pool, dev); }
CU_EXPORT(cuDeviceGetMemPool, (CUmemoryPool * pool, CUdevice dev));

CUresult sim_cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!pool_live(pool) || !value) return CUDA_ERROR_INVALID_VALUE;
    struct CUmemPoolHandle_st *p = pool;
    pthread_mutex_lock(&p->lock);
    uint64_t v = 0;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        *(int *)value = 1;
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: v = p->threshold; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: v = p->reserved; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: v = p->reserved_high; break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: v = p->used; break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: v = p->used_high; break;
    default: rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS && attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) *(cuuint64_t *)value = v;
    pthread_mutex_unlock(&p->lock);
    return rc;
}
CU_EXPORT(cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *value));

/* Settable: the release threshold; the high watermarks reset (to 0 only). */
CUresult sim_cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!pool_live(pool) || !value) return CUDA_ERROR_INVALID_VALUE;
    struct CUmemPoolHandle_st *p = pool;
    pthread_mutex_lock(&p->lock);
    cuuint64_t v = attr >= CU_MEMPOOL_ATTR_RELEASE_THRESHOLD ? *(cuuint64_t *)value : 0;
    if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) p->threshold = v;
    else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH && v == 0) p->reserved_high = p->reserved;
    else if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH && v == 0) p->used_high = p->used;
    else if (attr < CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || attr > CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
        rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&p->lock);
    return rc;
}
CU_EXPORT(cuMemPoolSetAttribute, (CUmemoryPool pool, CUmemPool_attribute attr, void *value));

CUresult sim_cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!pool_live(pool)) return CUDA_ERROR_INVALID_VALUE;
    struct CUmemPoolHandle_st *p = pool;
    pthread_mutex_lock(&p->lock);
    pool_shrink_locked(p, minBytesToKeep);
    pthread_mutex_unlock(&p->lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemPoolTrimTo, (CUmemoryPool pool, size_t minBytesToKeep));

/* Stream-ordered allocation: from the pool at the call (so an over-quota
 * request fails at the call, which is where the driver reports it). */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!pool_live(pool)) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    /* Into a capturing stream: a mem alloc node of the capture graph,
     * allocated from the graph memory pool when the graph runs. */
    CUgraph capture = sim_stream_capture_graph(s);
    if (capture) return dptr ? sim_graph_add_mem_alloc(capture, bytesize, NULL, dptr) : CUDA_ERROR_INVALID_VALUE;
    return pool_allocate(pool, bytesize, dptr);
}
CUresult sim_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return alloc_async(dptr, bytesize, &default_pool, hStream, false);
}
CU_EXPORT(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream));
CUresult sim_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return alloc_async(dptr, bytesize, &default_pool, hStream, true);
}
CU_EXPORT(cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream));

CUresult sim_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    return alloc_async(dptr, bytesize, pool, hStream, false);
}
CU_EXPORT(cuMemAllocFromPoolAsync, (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream));
CUresult sim_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    return alloc_async(dptr, bytesize, pool, hStream, true);
}
CU_EXPORT(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream));

/* Stream-ordered free: the memory returns when the stream reaches it. */
static CUresult free_async(CUdeviceptr dptr, CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUstream_st *cs;
    if ((rc = sim_stream_resolve(hStream, ptds, &cs))) return rc;
    CUgraph capture = sim_stream_capture_graph(cs);
    /* A graph allocation freed in its capture: a mem free node. */
    if (capture && sim_graph_add_mem_free(capture, dptr, NULL) == CUDA_SUCCESS) return CUDA_SUCCESS;
    struct allocation a;
    if (!table_find_range((uintptr_t)dptr, 1, &a) || a.base != (uintptr_t)dptr ||
        (a.kind != ALLOC_DEVICE && a.kind != ALLOC_POOL))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    struct sim_stream_item item = {.kind = SIM_ITEM_FREE, .ptr = (void *)(uintptr_t)dptr};
    rc = sim_stream_enqueue(s, &item);
    /* Frees are not captured into graphs here; free at once instead. */
    if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) rc = sim_memory_free(dptr);
    return rc;
}
CUresult sim_cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, false); }
CU_EXPORT(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream));
CUresult sim_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) { return free_async(dptr, hStream, true); }
CU_EXPORT(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream));

/* ---- memory queries ----------------------------------------------------- */

CUresult sim_cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
    uint64_t total = sim_process.dev->total_memory;
    uint64_t used = sim_memory_used(sim_process.dev);
    *total_bytes = total;
    *free_bytes = used < total ? total - used : 0;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemGetInfo_v2, (size_t * free_bytes, size_t *total_bytes));

CUresult sim_cuMemGetInfo(unsigned int *free_bytes, unsigned int *total_bytes) {
    size_t f, t;
    if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_cuMemGetInfo_v2(&f, &t);
    if (rc) return rc;
    *free_bytes = f > 0xffffffffu ? 0xffffffffu : (unsigned int)f;
    *total_bytes = t > 0xffffffffu ? 0xffffffffu : (unsigned int)t;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemGetInfo, (unsigned int *free_bytes, unsigned int *total_bytes));

CUresult sim_cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct allocation a;
    if (!table_find_range((uintptr_t)dptr, 1, &a) || a.kind == ALLOC_HOST) return CUDA_ERROR_NOT_FOUND;
    if (pbase) *pbase = (CUdeviceptr)a.base;
    if (psize) *psize = a.size;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemGetAddressRange_v2, (CUdeviceptr * pbase, size_t *psize, CUdeviceptr dptr));

/* ---- pinned host memory (not device memory) ----------------------------- */

CUresult sim_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
    (void)flags;
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!pp || !bytesize) return CUDA_ERROR_INVALID_VALUE;
    void *p = map_anonymous(bytesize, false);
    struct allocation entry = {(uintptr_t)p, bytesize, 0, ALLOC_HOST, NULL, NULL};
    if (!p || !table_insert(entry)) {
        if (p) munmap(p, bytesize);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int flags));

CUresult sim_cuMemAllocHost_v2(void **pp, size_t bytesize) { return sim_cuMemHostAlloc(pp, bytesize, 0); }
CU_EXPORT(cuMemAllocHost_v2, (void **pp, size_t bytesize));

CUresult sim_cuMemFreeHost(void *p) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct allocation a;
    if (!table_remove((uintptr_t)p, ALLOC_HOST, &a)) return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)a.base, a.size);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemFreeHost, (void *p));

/* ---- virtual memory management ------------------------------------------ */

CUresult sim_cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                           CUmemAllocationGranularity_flags option) {
    (void)option;
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
    *granularity = SIM_VMM_GRANULARITY;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemGetAllocationGranularity, (size_t * granularity, const CUmemAllocationProp *prop,
                                          CUmemAllocationGranularity_flags option));

/* Physical memory is a sparse memfd, so cuMemMap can map it at any
 * reserved address and the bytes are shared between the mappings. */
CUresult sim_cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                         unsigned long long flags) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!handle || !prop || flags || !size || size % SIM_VMM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    bool device = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    if (device && prop->location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
    if (!device && prop->location.type != CU_MEM_LOCATION_TYPE_HOST &&
        prop->location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA &&
        prop->location.type != CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT)
        return CUDA_ERROR_INVALID_VALUE;
    size_t counted = device ? size : 0; /* host memory is not device memory */
    if (counted && !sim_memory_reserve(sim_process.dev, sim_process.slot, counted)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct vmm_allocation *v = calloc(1, sizeof *v);
    int fd = v ? anonymous_memory_file("gslice-sim-vmm") : -1;
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0) close(fd);
        free(v);
        if (counted) sim_memory_release(sim_process.dev, sim_process.slot, counted);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v->tag = SIM_TAG_VMM;
    v->fd = fd;
    v->size = size;
    v->counted = counted;
    v->refs = 1;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemCreate, (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp *prop,
                        unsigned long long flags));

/* Called with vmm_lock held: the last reference and mapping are gone. */
static void vmm_free_if_unused_locked(struct vmm_allocation *v) {
    if (v->refs || v->maps) return;
    v->tag = SIM_TAG_DEAD;
    close(v->fd);
    if (v->counted) sim_memory_release(sim_process.dev, sim_process.slot, v->counted);
    free(v);
}

/* A handle the caller still holds a reference to, or NULL. vmm_lock held. */
static struct vmm_allocation *vmm_referenced_locked(CUmemGenericAllocationHandle handle) {
    struct vmm_allocation *v = (struct vmm_allocation *)(uintptr_t)handle;
    return v && v->tag == SIM_TAG_VMM && v->refs > 0 ? v : NULL;
}

CUresult sim_cuMemRelease(CUmemGenericAllocationHandle handle) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_allocation *v = vmm_referenced_locked(handle);
    if (v) {
        v->refs--;
        vmm_free_if_unused_locked(v); /* mapped memory lives on until unmapped */
    }
    pthread_mutex_unlock(&vmm_lock);
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CU_EXPORT(cuMemRelease, (CUmemGenericAllocationHandle handle));

/* The same handle value, one more reference (cuda.h: each call must be
 * matched by a cuMemRelease). */
CUresult sim_cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    rc = CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    for (size_t i = 0; i < vmm_map_count; i++) {
        struct vmm_mapping *m = &vmm_maps[i];
        if ((uintptr_t)addr >= m->base && (uintptr_t)addr < m->base + m->size) {
            m->v->refs++;
            *handle = (CUmemGenericAllocationHandle)(uintptr_t)m->v;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return rc;
}
CU_EXPORT(cuMemRetainAllocationHandle, (CUmemGenericAllocationHandle * handle, void *addr));

CUresult sim_cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                 unsigned long long flags) {
    (void)addr;
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!ptr || !size || flags || size % SIM_VMM_GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    if (alignment < SIM_VMM_GRANULARITY) alignment = SIM_VMM_GRANULARITY;
    if (alignment & (alignment - 1)) return CUDA_ERROR_INVALID_VALUE;
    /* Over-reserve, then trim to an aligned range. */
    size_t span = size + alignment;
    void *raw = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t base = ((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
    if (base > (uintptr_t)raw) munmap(raw, base - (uintptr_t)raw);
    uintptr_t end = (uintptr_t)raw + span;
    if (end > base + size) munmap((void *)(base + size), end - (base + size));
    struct allocation entry = {base, size, 0, ALLOC_RESERVED, NULL, NULL};
    if (!table_insert(entry)) {
        munmap((void *)base, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)base;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemAddressReserve, (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                unsigned long long flags));

CUresult sim_cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct allocation a;
    if (!table_remove((uintptr_t)ptr, ALLOC_RESERVED, &a)) return CUDA_ERROR_INVALID_VALUE;
    if (size != a.size) {
        table_insert(a);
        return CUDA_ERROR_INVALID_VALUE;
    }
    munmap((void *)a.base, a.size);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemAddressFree, (CUdeviceptr ptr, size_t size));

static bool in_reserved_range(CUdeviceptr ptr, size_t size) {
    struct allocation a;
    return size && table_find_range((uintptr_t)ptr, size, &a) && a.kind == ALLOC_RESERVED;
}

CUresult sim_cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                      unsigned long long flags) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (flags || !in_reserved_range(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&vmm_lock);
    struct vmm_allocation *v = vmm_referenced_locked(handle);
    for (size_t i = 0; v && i < vmm_map_count; i++)   /* already mapped there */
        if ((uintptr_t)ptr < vmm_maps[i].base + vmm_maps[i].size && vmm_maps[i].base < (uintptr_t)ptr + size) v = NULL;
    if (!v || offset > v->size || size > v->size - offset) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (vmm_map_count == vmm_map_capacity) {
        size_t capacity = vmm_map_capacity ? vmm_map_capacity * 2 : 16;
        struct vmm_mapping *grown = realloc(vmm_maps, capacity * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&vmm_lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        vmm_maps = grown;
        vmm_map_capacity = capacity;
    }
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, v->fd, (off_t)offset);
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    vmm_maps[vmm_map_count++] = (struct vmm_mapping){(uintptr_t)ptr, size, v};
    v->maps++;
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                     unsigned long long flags));

/* Unmaps every mapping inside [ptr, ptr + size); a mapping only partly
 * inside, or no mapping at all, is CUDA_ERROR_INVALID_VALUE. */
CUresult sim_cuMemUnmap(CUdeviceptr ptr, size_t size) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!in_reserved_range(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t lo = (uintptr_t)ptr, hi = lo + size;
    pthread_mutex_lock(&vmm_lock);
    size_t found = 0;
    for (size_t i = 0; i < vmm_map_count; i++) {
        struct vmm_mapping *m = &vmm_maps[i];
        if (m->base < hi && lo < m->base + m->size) {
            if (m->base < lo || m->base + m->size > hi) {
                pthread_mutex_unlock(&vmm_lock);
                return CUDA_ERROR_INVALID_VALUE;
            }
            found++;
        }
    }
    if (!found) {
        pthread_mutex_unlock(&vmm_lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    mmap((void *)lo, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    for (size_t i = 0; i < vmm_map_count;) {
        struct vmm_mapping m = vmm_maps[i];
        if (m.base >= lo && m.base + m.size <= hi) {
            vmm_maps[i] = vmm_maps[--vmm_map_count];
            m.v->maps--;
            vmm_free_if_unused_locked(m.v);
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&vmm_lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemUnmap, (CUdeviceptr ptr, size_t size));

CUresult sim_cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!desc || !count || !in_reserved_range(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS; /* cuMemMap already mapped it read-write */
}
CU_EXPORT(cuMemSetAccess, (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count));

/* ---- arrays ------------------------------------------------------------- */

static CUresult array_new(size_t bytes, size_t row_bytes, size_t rows, struct CUarray_st **out) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    struct CUarray_st *a = calloc(1, sizeof *a);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    if (!sim_memory_reserve(sim_process.dev, sim_process.slot, bytes)) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->base = map_anonymous(bytes, false);
    if (!a->base) {
        sim_memory_release(sim_process.dev, sim_process.slot, bytes);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->tag = SIM_TAG_ARRAY;
    a->bytes = bytes;
    a->row_bytes = row_bytes;
    a->rows = rows;
    *out = a;
    return CUDA_SUCCESS;
}

static CUresult array_destroy(struct CUarray_st *a) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!a || a->tag != SIM_TAG_ARRAY) return CUDA_ERROR_INVALID_HANDLE;
    a->tag = SIM_TAG_DEAD;
    munmap(a->base, a->bytes);
    sim_memory_release(sim_process.dev, sim_process.slot, a->bytes);
    free(a);
    return CUDA_SUCCESS;
}

static size_t extent(size_t n) { return n ? n : 1; }

CUresult sim_cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc) {
    if (!pHandle || !desc || !desc->Width || !desc->NumChannels) return CUDA_ERROR_INVALID_VALUE;
    size_t row = desc->Width * desc->NumChannels * cuda_abi_format_bytes(desc->Format);
    return array_new(row * extent(desc->Height), row, extent(desc->Height), (struct CUarray_st **)pHandle);
}
CU_EXPORT(cuArrayCreate_v2, (CUarray * pHandle, const CUDA_ARRAY_DESCRIPTOR *desc));

CUresult sim_cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    if (!pHandle || !desc || !desc->Width || !desc->NumChannels) return CUDA_ERROR_INVALID_VALUE;
    size_t row = desc->Width * desc->NumChannels * cuda_abi_format_bytes(desc->Format);
    return array_new(row * extent(desc->Height) * extent(desc->Depth), row, extent(desc->Height),
                     (struct CUarray_st **)pHandle);
}
CU_EXPORT(cuArray3DCreate_v2, (CUarray * pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc));

CUresult sim_cuArrayDestroy(CUarray hArray) { return array_destroy((struct CUarray_st *)hArray); }
CU_EXPORT(cuArrayDestroy, (CUarray hArray));

/* Levels halve each dimension down to 1; the bytes are the sum of levels. */
CUresult sim_cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                    unsigned int levels) {
    if (!pHandle || !desc || !desc->Width || !desc->NumChannels || !levels) return CUDA_ERROR_INVALID_VALUE;
    size_t element = desc->NumChannels * cuda_abi_format_bytes(desc->Format), bytes = 0;
    size_t w = desc->Width, h = desc->Height, d = desc->Depth;
    for (unsigned int l = 0; l < levels; l++) {
        bytes += extent(w) * extent(h) * extent(d) * element;
        w = w > 1 ? w / 2 : w;
        h = h > 1 ? h / 2 : h;
        d = d > 1 ? d / 2 : d;
    }
    return array_new(bytes, desc->Width * element, extent(desc->Height), (struct CUarray_st **)pHandle);
}
CU_EXPORT(cuMipmappedArrayCreate, (CUmipmappedArray * pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc,
                                   unsigned int levels));

CUresult sim_cuMipmappedArrayDestroy(CUmipmappedArray hArray) { return array_destroy((struct CUarray_st *)hArray); }
CU_EXPORT(cuMipmappedArrayDestroy, (CUmipmappedArray hArray));

/* ---- copies and fills --------------------------------------------------- */

static bool device_range(CUdeviceptr ptr, size_t bytes) {
    struct allocation a;
    return table_find_range((uintptr_t)ptr, bytes ? bytes : 1, &a) && a.kind != ALLOC_HOST;
}

/* A synchronous copy starts after the work already queued: on the legacy
 * stream that is all blocking streams (approximated as all streams), with
 * per-thread default streams only the thread's own. */
static CUresult wait_before_sync_copy(bool ptds) {
    if (!ptds) {
        sim_streams_synchronize_all();
        return CUDA_SUCCESS;
    }
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(CU_STREAM_PER_THREAD, true, &s);
    return rc ? rc : sim_stream_synchronize(s);
}

/* Async forms: the copy's time is queued on the stream at the call (the
 * bytes move at once: simulated kernels never touch memory, so no order
 * is lost). Into a capturing stream the copy takes no time (copy and
 * memset graph nodes are not modelled); *captured says so. */
static CUresult stream_capturing(CUstream hStream, bool ptds, bool *captured) {
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    *captured = sim_stream_capturing(s);
    return CUDA_SUCCESS;
}

/* Engine time of copies and fills, proportional to their bytes:
 * host<->device at GSLICE_SIM_COPY_GBPS (default 25 GB/s, PCIe; the copy
 * engines, not the SMs: no engine time), device-side copies and fills at
 * GSLICE_SIM_DEVICE_GBPS (default 1000 GB/s; they hold the engine like a
 * kernel, as they compete for SMs and memory bandwidth). */
static double gbps_from_env(const char *name, double fallback) {
    const char *text = getenv(name);
    char *end;
    double v = text && *text ? strtod(text, &end) : 0;
    return text && *text && *end == '\0' && v > 0 ? v : fallback;
}

/* Queue the copy's time on its stream (the bytes moved at the call): the
 * stream, cuStreamSynchronize and cuCtxSynchronize wait for it, as for a
 * kernel. Synchronous forms then wait for it. */
static CUresult queue_copy_time(CUstream hStream, bool ptds, size_t bytes, bool on_device, bool wait) {
    static double host_gbps, device_gbps;
    if (!host_gbps) {
        host_gbps = gbps_from_env("GSLICE_SIM_COPY_GBPS", 25.0);
        device_gbps = gbps_from_env("GSLICE_SIM_DEVICE_GBPS", 1000.0);
    }
    uint64_t ns = (uint64_t)((double)bytes / (on_device ? device_gbps : host_gbps));
    if (!ns) return CUDA_SUCCESS;
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    struct sim_stream_item item = {.kind = SIM_ITEM_COPY, .count = on_device ? 1u : 0u, .duration_ns = ns};
    rc = sim_stream_enqueue(s, &item);
    return rc || !wait ? rc : sim_stream_synchronize(s);
}


enum copy_direction { HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE, ANY_TO_ANY };

/* The time is queued before the bytes move and waited for after (for the
 * synchronous forms): like a driver, the call submits at once, so a
 * synchronisation from another thread covers it. */
static CUresult copy_checked(void *dst, const void *src, size_t bytes, enum copy_direction dir, CUstream hStream,
                             bool ptds, bool timed, bool wait) {
    if (!bytes) return CUDA_SUCCESS;
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    bool dst_dev = dir == HOST_TO_DEVICE || dir == DEVICE_TO_DEVICE;
    bool src_dev = dir == DEVICE_TO_HOST || dir == DEVICE_TO_DEVICE;
    if (dst_dev && !device_range((uintptr_t)dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
    if (src_dev && !device_range((uintptr_t)src, bytes)) return CUDA_ERROR_INVALID_VALUE;
    if (dir == ANY_TO_ANY) {
        dst_dev = device_range((uintptr_t)dst, bytes);
        src_dev = device_range((uintptr_t)src, bytes);
    }
    CUresult rc = timed ? queue_copy_time(hStream, ptds, bytes, dst_dev && src_dev, false) : CUDA_SUCCESS;
    if (rc) return rc;
    memmove(dst, src, bytes);
    return timed && wait ? wait_before_sync_copy(ptds) : CUDA_SUCCESS;
}

/* Submitted at once (its time queued behind the stream's work), then the
 * caller waits for it and for the work before it. */
static CUresult copy_sync(void *dst, const void *src, size_t bytes, enum copy_direction dir, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    return copy_checked(dst, src, bytes, dir, NULL, ptds, true, true);
}

static CUresult copy_async(void *dst, const void *src, size_t bytes, enum copy_direction dir, CUstream hStream,
                           bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    bool captured;
    rc = stream_capturing(hStream, ptds, &captured);
    return rc ? rc : copy_checked(dst, src, bytes, dir, hStream, ptds, !captured, false);
}

#define DPTR(p) ((void *)(uintptr_t)(p))

CUresult sim_cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) { return copy_sync(DPTR(dst), src, n, HOST_TO_DEVICE, false); }
CU_EXPORT(cuMemcpyHtoD_v2, (CUdeviceptr dst, const void *src, size_t n));
CUresult sim_cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n) { return copy_sync(DPTR(dst), src, n, HOST_TO_DEVICE, true); }
CU_EXPORT(cuMemcpyHtoD_v2_ptds, (CUdeviceptr dst, const void *src, size_t n));
CUresult sim_cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) { return copy_sync(dst, DPTR(src), n, DEVICE_TO_HOST, false); }
CU_EXPORT(cuMemcpyDtoH_v2, (void *dst, CUdeviceptr src, size_t n));
CUresult sim_cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n) { return copy_sync(dst, DPTR(src), n, DEVICE_TO_HOST, true); }
CU_EXPORT(cuMemcpyDtoH_v2_ptds, (void *dst, CUdeviceptr src, size_t n));
CUresult sim_cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(DPTR(dst), DPTR(src), n, DEVICE_TO_DEVICE, false); }
CU_EXPORT(cuMemcpyDtoD_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n));
CUresult sim_cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(DPTR(dst), DPTR(src), n, DEVICE_TO_DEVICE, true); }
CU_EXPORT(cuMemcpyDtoD_v2_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n));
/* Unified addressing: either side may be host or device. */
CUresult sim_cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(DPTR(dst), DPTR(src), n, ANY_TO_ANY, false); }
CU_EXPORT(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t n));
CUresult sim_cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return copy_sync(DPTR(dst), DPTR(src), n, ANY_TO_ANY, true); }
CU_EXPORT(cuMemcpy_ptds, (CUdeviceptr dst, CUdeviceptr src, size_t n));

CUresult sim_cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s) { return copy_async(DPTR(dst), src, n, HOST_TO_DEVICE, s, false); }
CU_EXPORT(cuMemcpyHtoDAsync_v2, (CUdeviceptr dst, const void *src, size_t n, CUstream s));
CUresult sim_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s) { return copy_async(DPTR(dst), src, n, HOST_TO_DEVICE, s, true); }
CU_EXPORT(cuMemcpyHtoDAsync_v2_ptsz, (CUdeviceptr dst, const void *src, size_t n, CUstream s));
CUresult sim_cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s) { return copy_async(dst, DPTR(src), n, DEVICE_TO_HOST, s, false); }
CU_EXPORT(cuMemcpyDtoHAsync_v2, (void *dst, CUdeviceptr src, size_t n, CUstream s));
CUresult sim_cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s) { return copy_async(dst, DPTR(src), n, DEVICE_TO_HOST, s, true); }
CU_EXPORT(cuMemcpyDtoHAsync_v2_ptsz, (void *dst, CUdeviceptr src, size_t n, CUstream s));
CUresult sim_cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return copy_async(DPTR(dst), DPTR(src), n, DEVICE_TO_DEVICE, s, false); }
CU_EXPORT(cuMemcpyDtoDAsync_v2, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s));
CUresult sim_cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return copy_async(DPTR(dst), DPTR(src), n, DEVICE_TO_DEVICE, s, true); }
CU_EXPORT(cuMemcpyDtoDAsync_v2_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s));
CUresult sim_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return copy_async(DPTR(dst), DPTR(src), n, ANY_TO_ANY, s, false); }
CU_EXPORT(cuMemcpyAsync, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s));
CUresult sim_cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return copy_async(DPTR(dst), DPTR(src), n, ANY_TO_ANY, s, true); }
CU_EXPORT(cuMemcpyAsync_ptsz, (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s));

/* Fill rows rows of n elements of `width` bytes with value, the rows pitch
 * bytes apart (cuMemsetD2D*; the 1D fills are one row). The pointer and
 * the pitch must be aligned to the element (cuda.h); the pitch is unused
 * for one row. */
static CUresult fill_2d(CUdeviceptr dst, size_t pitch, uint32_t value, size_t n, size_t rows, unsigned width,
                        bool has_stream, CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    bool captured = false;
    if (has_stream && (rc = stream_capturing(hStream, ptds, &captured))) return rc;
    if (!n || !rows) return CUDA_SUCCESS;
    if (n > SIZE_MAX / width || dst % width) return CUDA_ERROR_INVALID_VALUE;
    size_t row = n * width;
    if (rows > 1 && (pitch < row || pitch % width || rows - 1 > (SIZE_MAX - row) / pitch))
        return CUDA_ERROR_INVALID_VALUE;
    if (!device_range(dst, rows > 1 ? (rows - 1) * pitch + row : row)) return CUDA_ERROR_INVALID_VALUE;
    CUstream stream = has_stream ? hStream : NULL;
    if (!captured && (rc = queue_copy_time(stream, ptds, row * rows, true, false))) return rc;
    for (size_t y = 0; y < rows; y++) {
        unsigned char *p = (unsigned char *)DPTR(dst) + y * pitch;
        if (width == 1) {
            memset(p, (int)(value & 0xff), n);
        } else if (width == 2) {
            uint16_t v = (uint16_t)value;
            for (size_t i = 0; i < n; i++) memcpy(p + 2 * i, &v, 2);
        } else {
            for (size_t i = 0; i < n; i++) memcpy(p + 4 * i, &value, 4);
        }
    }
    return captured || has_stream ? CUDA_SUCCESS : wait_before_sync_copy(ptds);
}

/* Fill n elements of `width` bytes with value. */
static CUresult fill(CUdeviceptr dst, uint32_t value, size_t n, unsigned width, bool has_stream, CUstream hStream,
                     bool ptds) {
    return fill_2d(dst, 0, value, n, 1, width, has_stream, hStream, ptds);
}

CUresult sim_cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return fill(d, v, n, 1, false, NULL, false); }
CU_EXPORT(cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, size_t n));
CUresult sim_cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return fill(d, v, n, 1, false, NULL, true); }
CU_EXPORT(cuMemsetD8_v2_ptds, (CUdeviceptr d, unsigned char v, size_t n));
CUresult sim_cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return fill(d, v, n, 2, false, NULL, false); }
CU_EXPORT(cuMemsetD16_v2, (CUdeviceptr d, unsigned short v, size_t n));
CUresult sim_cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) { return fill(d, v, n, 2, false, NULL, true); }
CU_EXPORT(cuMemsetD16_v2_ptds, (CUdeviceptr d, unsigned short v, size_t n));
CUresult sim_cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return fill(d, v, n, 4, false, NULL, false); }
CU_EXPORT(cuMemsetD32_v2, (CUdeviceptr d, unsigned int v, size_t n));
CUresult sim_cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return fill(d, v, n, 4, false, NULL, true); }
CU_EXPORT(cuMemsetD32_v2_ptds, (CUdeviceptr d, unsigned int v, size_t n));
CUresult sim_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return fill(d, v, n, 1, true, s, false); }
CU_EXPORT(cuMemsetD8Async, (CUdeviceptr d, unsigned char v, size_t n, CUstream s));
CUresult sim_cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return fill(d, v, n, 1, true, s, true); }
CU_EXPORT(cuMemsetD8Async_ptsz, (CUdeviceptr d, unsigned char v, size_t n, CUstream s));
CUresult sim_cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return fill(d, v, n, 2, true, s, false); }
CU_EXPORT(cuMemsetD16Async, (CUdeviceptr d, unsigned short v, size_t n, CUstream s));
CUresult sim_cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return fill(d, v, n, 2, true, s, true); }
CU_EXPORT(cuMemsetD16Async_ptsz, (CUdeviceptr d, unsigned short v, size_t n, CUstream s));
CUresult sim_cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return fill(d, v, n, 4, true, s, false); }
CU_EXPORT(cuMemsetD32Async, (CUdeviceptr d, unsigned int v, size_t n, CUstream s));
CUresult sim_cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return fill(d, v, n, 4, true, s, true); }
CU_EXPORT(cuMemsetD32Async_ptsz, (CUdeviceptr d, unsigned int v, size_t n, CUstream s));

#define FILL_2D_PARAMS(T) CUdeviceptr d, size_t pitch, T v, size_t w, size_t h
CUresult sim_cuMemsetD2D8_v2(FILL_2D_PARAMS(unsigned char)) { return fill_2d(d, pitch, v, w, h, 1, false, NULL, false); }
CU_EXPORT(cuMemsetD2D8_v2, (FILL_2D_PARAMS(unsigned char)));
CUresult sim_cuMemsetD2D8_v2_ptds(FILL_2D_PARAMS(unsigned char)) { return fill_2d(d, pitch, v, w, h, 1, false, NULL, true); }
CU_EXPORT(cuMemsetD2D8_v2_ptds, (FILL_2D_PARAMS(unsigned char)));
CUresult sim_cuMemsetD2D16_v2(FILL_2D_PARAMS(unsigned short)) { return fill_2d(d, pitch, v, w, h, 2, false, NULL, false); }
CU_EXPORT(cuMemsetD2D16_v2, (FILL_2D_PARAMS(unsigned short)));
CUresult sim_cuMemsetD2D16_v2_ptds(FILL_2D_PARAMS(unsigned short)) { return fill_2d(d, pitch, v, w, h, 2, false, NULL, true); }
CU_EXPORT(cuMemsetD2D16_v2_ptds, (FILL_2D_PARAMS(unsigned short)));
CUresult sim_cuMemsetD2D32_v2(FILL_2D_PARAMS(unsigned int)) { return fill_2d(d, pitch, v, w, h, 4, false, NULL, false); }
CU_EXPORT(cuMemsetD2D32_v2, (FILL_2D_PARAMS(unsigned int)));
CUresult sim_cuMemsetD2D32_v2_ptds(FILL_2D_PARAMS(unsigned int)) { return fill_2d(d, pitch, v, w, h, 4, false, NULL, true); }
CU_EXPORT(cuMemsetD2D32_v2_ptds, (FILL_2D_PARAMS(unsigned int)));
CUresult sim_cuMemsetD2D8Async(FILL_2D_PARAMS(unsigned char), CUstream s) { return fill_2d(d, pitch, v, w, h, 1, true, s, false); }
CU_EXPORT(cuMemsetD2D8Async, (FILL_2D_PARAMS(unsigned char), CUstream s));
CUresult sim_cuMemsetD2D8Async_ptsz(FILL_2D_PARAMS(unsigned char), CUstream s) { return fill_2d(d, pitch, v, w, h, 1, true, s, true); }
CU_EXPORT(cuMemsetD2D8Async_ptsz, (FILL_2D_PARAMS(unsigned char), CUstream s));
CUresult sim_cuMemsetD2D16Async(FILL_2D_PARAMS(unsigned short), CUstream s) { return fill_2d(d, pitch, v, w, h, 2, true, s, false); }
CU_EXPORT(cuMemsetD2D16Async, (FILL_2D_PARAMS(unsigned short), CUstream s));
CUresult sim_cuMemsetD2D16Async_ptsz(FILL_2D_PARAMS(unsigned short), CUstream s) { return fill_2d(d, pitch, v, w, h, 2, true, s, true); }
CU_EXPORT(cuMemsetD2D16Async_ptsz, (FILL_2D_PARAMS(unsigned short), CUstream s));
CUresult sim_cuMemsetD2D32Async(FILL_2D_PARAMS(unsigned int), CUstream s) { return fill_2d(d, pitch, v, w, h, 4, true, s, false); }
CU_EXPORT(cuMemsetD2D32Async, (FILL_2D_PARAMS(unsigned int), CUstream s));
CUresult sim_cuMemsetD2D32Async_ptsz(FILL_2D_PARAMS(unsigned int), CUstream s) { return fill_2d(d, pitch, v, w, h, 4, true, s, true); }
CU_EXPORT(cuMemsetD2D32Async_ptsz, (FILL_2D_PARAMS(unsigned int), CUstream s));
#undef FILL_2D_PARAMS

/* ---- copies between arrays and device memory ----------------------------
 * cuMemcpyAtoA / DtoA / AtoD: ByteCount bytes at byte offsets into the
 * arrays' memory (the arrays' layout is not modelled beyond their bytes),
 * synchronous, device-side (engine time at the device rate). */

/* [offset, offset + bytes) of array a, or NULL. */
static unsigned char *array_bytes(CUarray array, size_t offset, size_t bytes) {
    struct CUarray_st *a = (struct CUarray_st *)array;
    if (!a || a->tag != SIM_TAG_ARRAY || offset > a->bytes || bytes > a->bytes - offset) return NULL;
    return (unsigned char *)a->base + offset;
}

static CUresult copy_with_arrays(void *dst, const void *src, size_t bytes, bool ptds) {
    CUresult rc = queue_copy_time(NULL, ptds, bytes, true, false);
    if (rc) return rc;
    memmove(dst, src, bytes);
    return wait_before_sync_copy(ptds);
}

static CUresult copy_a_to_a(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset, size_t n, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    unsigned char *d = array_bytes(dst, dst_offset, n), *s = array_bytes(src, src_offset, n);
    if (!d || !s) return CUDA_ERROR_INVALID_VALUE;
    return n ? copy_with_arrays(d, s, n, ptds) : CUDA_SUCCESS;
}

static CUresult copy_d_to_a(CUarray dst, size_t dst_offset, CUdeviceptr src, size_t n, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    unsigned char *d = array_bytes(dst, dst_offset, n);
    if (!d || !device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
    return n ? copy_with_arrays(d, DPTR(src), n, ptds) : CUDA_SUCCESS;
}

static CUresult copy_a_to_d(CUdeviceptr dst, CUarray src, size_t src_offset, size_t n, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    unsigned char *s = array_bytes(src, src_offset, n);
    if (!s || !device_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
    return n ? copy_with_arrays(DPTR(dst), s, n, ptds) : CUDA_SUCCESS;
}

CUresult sim_cuMemcpyAtoA_v2(CUarray d, size_t doff, CUarray s, size_t soff, size_t n) { return copy_a_to_a(d, doff, s, soff, n, false); }
CU_EXPORT(cuMemcpyAtoA_v2, (CUarray d, size_t doff, CUarray s, size_t soff, size_t n));
CUresult sim_cuMemcpyAtoA_v2_ptds(CUarray d, size_t doff, CUarray s, size_t soff, size_t n) { return copy_a_to_a(d, doff, s, soff, n, true); }
CU_EXPORT(cuMemcpyAtoA_v2_ptds, (CUarray d, size_t doff, CUarray s, size_t soff, size_t n));
CUresult sim_cuMemcpyDtoA_v2(CUarray d, size_t doff, CUdeviceptr s, size_t n) { return copy_d_to_a(d, doff, s, n, false); }
CU_EXPORT(cuMemcpyDtoA_v2, (CUarray d, size_t doff, CUdeviceptr s, size_t n));
CUresult sim_cuMemcpyDtoA_v2_ptds(CUarray d, size_t doff, CUdeviceptr s, size_t n) { return copy_d_to_a(d, doff, s, n, true); }
CU_EXPORT(cuMemcpyDtoA_v2_ptds, (CUarray d, size_t doff, CUdeviceptr s, size_t n));
CUresult sim_cuMemcpyAtoD_v2(CUdeviceptr d, CUarray s, size_t soff, size_t n) { return copy_a_to_d(d, s, soff, n, false); }
CU_EXPORT(cuMemcpyAtoD_v2, (CUdeviceptr d, CUarray s, size_t soff, size_t n));
CUresult sim_cuMemcpyAtoD_v2_ptds(CUdeviceptr d, CUarray s, size_t soff, size_t n) { return copy_a_to_d(d, s, soff, n, true); }
CU_EXPORT(cuMemcpyAtoD_v2_ptds, (CUdeviceptr d, CUarray s, size_t soff, size_t n));

/* ---- peer, 2D / 3D and batch copies ------------------------------------- */

/* One device: a peer copy is a device-to-device copy between two live
 * contexts' memory (NULL contexts are refused, as by the driver). */
static CUresult copy_peer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                          bool has_stream, CUstream hStream, bool ptds) {
    if (!dst_ctx || !src_ctx) return CUDA_ERROR_INVALID_CONTEXT;
    return has_stream ? copy_async(DPTR(dst), DPTR(src), n, DEVICE_TO_DEVICE, hStream, ptds)
                      : copy_sync(DPTR(dst), DPTR(src), n, DEVICE_TO_DEVICE, ptds);
}

CUresult sim_cuMemcpyPeer(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n) { return copy_peer(d, dc, s, sc, n, false, NULL, false); }
CU_EXPORT(cuMemcpyPeer, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n));
CUresult sim_cuMemcpyPeer_ptds(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n) { return copy_peer(d, dc, s, sc, n, false, NULL, true); }
CU_EXPORT(cuMemcpyPeer_ptds, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n));
CUresult sim_cuMemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st) { return copy_peer(d, dc, s, sc, n, true, st, false); }
CU_EXPORT(cuMemcpyPeerAsync, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st));
CUresult sim_cuMemcpyPeerAsync_ptsz(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st) { return copy_peer(d, dc, s, sc, n, true, st, true); }
CU_EXPORT(cuMemcpyPeerAsync_ptsz, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st));

/* One side of a 2D / 3D copy, as CUDA_MEMCPY2D / 3D name it. */
struct copy_side {
    CUmemorytype type;
    const void *host;
    CUdeviceptr device;
    CUarray array;
    size_t x, y, z, pitch, height;
};

#define COPY_SIDE(p, side, ...)                                                                             \
    ((struct copy_side){p->side##MemoryType, p->side##Host, p->side##Device, p->side##Array,                  \
                        p->side##XInBytes, p->side##Y, __VA_ARGS__})

/* Where the side's first byte is, its row and slice strides, and whether it
 * is device memory. Ranges are checked over the whole region; a pitch
 * below the width (or a height below the rows, with several slices) is
 * refused, as documented. */
static CUresult side_resolve(const struct copy_side *c, size_t width, size_t rows, size_t depth, unsigned char **start,
                             size_t *pitch, size_t *slice, bool *device) {
    size_t p = c->pitch, h = c->height;
    unsigned char *base;
    switch (c->type) {
    case CU_MEMORYTYPE_HOST:
        if (!c->host) return CUDA_ERROR_INVALID_VALUE;
        base = (unsigned char *)(uintptr_t)c->host;
        *device = false;
        break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        base = DPTR(c->device);
        *device = true;
        break;
    case CU_MEMORYTYPE_ARRAY: {
        struct CUarray_st *a = (struct CUarray_st *)c->array;
        if (!a || a->tag != SIM_TAG_ARRAY) return CUDA_ERROR_INVALID_VALUE;
        base = a->base;
        p = a->row_bytes;
        h = a->rows;
        *device = true;
        break;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    if ((rows > 1 && p < width) || (depth > 1 && h < rows)) return CUDA_ERROR_INVALID_VALUE;
    size_t sl = p * h;
    unsigned char *first = base + c->z * sl + c->y * p + c->x;
    size_t span = (depth - 1) * sl + (rows - 1) * p + width;
    if (c->type == CU_MEMORYTYPE_ARRAY) {
        struct CUarray_st *a = (struct CUarray_st *)c->array;
        if (c->x + width > a->row_bytes || (size_t)(first - base) + span > a->bytes) return CUDA_ERROR_INVALID_VALUE;
    } else if (c->type == CU_MEMORYTYPE_DEVICE && !device_range((uintptr_t)first, span)) {
        return CUDA_ERROR_INVALID_VALUE;
    } else if (c->type == CU_MEMORYTYPE_UNIFIED) {
        *device = device_range((uintptr_t)first, span);   /* a unified address may name host memory */
    }
    *start = first;
    *pitch = p;
    *slice = sl;
    return CUDA_SUCCESS;
}

/* Rows of width bytes, rows x depth of them; engine time for all their
 * bytes (device rate when both sides are device memory). */
static CUresult copy_region(const struct copy_side *src, const struct copy_side *dst, size_t width, size_t rows,
                            size_t depth, bool has_stream, CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    bool captured = false;
    if (has_stream && (rc = stream_capturing(hStream, ptds, &captured))) return rc;
    rows = extent(rows);
    depth = extent(depth);
    if (!width) return CUDA_SUCCESS;
    unsigned char *s, *d;
    size_t sp, ss, dp, ds;
    bool s_dev, d_dev;
    if ((rc = side_resolve(src, width, rows, depth, &s, &sp, &ss, &s_dev)) ||
        (rc = side_resolve(dst, width, rows, depth, &d, &dp, &ds, &d_dev)))
        return rc;
    size_t bytes = width * rows * depth;
    if (!captured && (rc = queue_copy_time(has_stream ? hStream : NULL, ptds, bytes, s_dev && d_dev, false))) return rc;
    for (size_t z = 0; z < depth; z++)
        for (size_t y = 0; y < rows; y++) memmove(d + z * ds + y * dp, s + z * ss + y * sp, width);
    return captured || has_stream ? CUDA_SUCCESS : wait_before_sync_copy(ptds);
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, bool has_stream, CUstream hStream, bool ptds) {
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    struct copy_side src = COPY_SIDE(p, src, .pitch = p->srcPitch), dst = COPY_SIDE(p, dst, .pitch = p->dstPitch);
    return copy_region(&src, &dst, p->WidthInBytes, p->Height, 1, has_stream, hStream, ptds);
}

/* CUDA_MEMCPY3D and CUDA_MEMCPY3D_PEER differ only in the pointer after
 * each side's array (reserved, must be NULL / the side's context). */
#define COPY_3D(p, has_stream, hStream, ptds)                                                                 \
    do {                                                                                                      \
        if (!p || p->srcLOD || p->dstLOD) return CUDA_ERROR_INVALID_VALUE;                                    \
        struct copy_side src = COPY_SIDE(p, src, .z = p->srcZ, .pitch = p->srcPitch, .height = p->srcHeight);  \
        struct copy_side dst = COPY_SIDE(p, dst, .z = p->dstZ, .pitch = p->dstPitch, .height = p->dstHeight);  \
        return copy_region(&src, &dst, p->WidthInBytes, p->Height, p->Depth, has_stream, hStream, ptds);      \
    } while (0)

static CUresult copy_3d(const CUDA_MEMCPY3D *p, bool has_stream, CUstream hStream, bool ptds) {
    if (p && (p->reserved0 || p->reserved1)) return CUDA_ERROR_INVALID_VALUE;
    COPY_3D(p, has_stream, hStream, ptds);
}

static CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, bool has_stream, CUstream hStream, bool ptds) {
    if (p && ((p->srcMemoryType != CU_MEMORYTYPE_ARRAY && !p->srcContext) ||
              (p->dstMemoryType != CU_MEMORYTYPE_ARRAY && !p->dstContext)))
        return CUDA_ERROR_INVALID_CONTEXT;
    COPY_3D(p, has_stream, hStream, ptds);
}

CUresult sim_cuMemcpy2D_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, false, NULL, false); }
CU_EXPORT(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *p));
CUresult sim_cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p) { return copy_2d(p, false, NULL, true); }
CU_EXPORT(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *p));
CUresult sim_cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p) { return copy_2d(p, false, NULL, false); }
CU_EXPORT(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *p));
CUresult sim_cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p) { return copy_2d(p, false, NULL, true); }
CU_EXPORT(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *p));
CUresult sim_cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, true, s, false); }
CU_EXPORT(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *p, CUstream s));
CUresult sim_cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream s) { return copy_2d(p, true, s, true); }
CU_EXPORT(cuMemcpy2DAsync_v2_ptsz, (const CUDA_MEMCPY2D *p, CUstream s));
CUresult sim_cuMemcpy3D_v2(const CUDA_MEMCPY3D *p) { return copy_3d(p, false, NULL, false); }
CU_EXPORT(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *p));
CUresult sim_cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *p) { return copy_3d(p, false, NULL, true); }
CU_EXPORT(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *p));
CUresult sim_cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream s) { return copy_3d(p, true, s, false); }
CU_EXPORT(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *p, CUstream s));
CUresult sim_cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *p, CUstream s) { return copy_3d(p, true, s, true); }
CU_EXPORT(cuMemcpy3DAsync_v2_ptsz, (const CUDA_MEMCPY3D *p, CUstream s));
CUresult sim_cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p) { return copy_3d_peer(p, false, NULL, false); }
CU_EXPORT(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *p));
CUresult sim_cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER *p) { return copy_3d_peer(p, false, NULL, true); }
CU_EXPORT(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER *p));
CUresult sim_cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream s) { return copy_3d_peer(p, true, s, false); }
CU_EXPORT(cuMemcpy3DPeerAsync, (const CUDA_MEMCPY3D_PEER *p, CUstream s));
CUresult sim_cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER *p, CUstream s) { return copy_3d_peer(p, true, s, true); }
CU_EXPORT(cuMemcpy3DPeerAsync_ptsz, (const CUDA_MEMCPY3D_PEER *p, CUstream s));

/* A batch: count unified-address copies on one stream (the stream must not
 * be the legacy NULL stream, as documented), each timed by its bytes.
 * The attributes are not modelled beyond their count (at least one). */
static CUresult copy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
                           CUmemcpyAttributes *attrs, size_t *attrs_idxs, size_t num_attrs, size_t *fail_idx,
                           CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (fail_idx) *fail_idx = SIZE_MAX;
    if (!count || !dsts || !srcs || !sizes || !attrs || !attrs_idxs || !num_attrs || num_attrs > count ||
        attrs_idxs[0] != 0 || (hStream == NULL && !ptds))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        rc = copy_async(DPTR(dsts[i]), DPTR(srcs[i]), sizes[i], ANY_TO_ANY, hStream, ptds);
        if (rc) {
            if (fail_idx) *fail_idx = i;
            return rc;
        }
    }
    return CUDA_SUCCESS;
}

#define BATCH_PARAMS CUdeviceptr *d, CUdeviceptr *s, size_t *n, size_t count, CUmemcpyAttributes *a, size_t *ai, size_t na
CUresult sim_cuMemcpyBatchAsync(BATCH_PARAMS, size_t *fail, CUstream st) { return copy_batch(d, s, n, count, a, ai, na, fail, st, false); }
CU_EXPORT(cuMemcpyBatchAsync, (BATCH_PARAMS, size_t *fail, CUstream st));
CUresult sim_cuMemcpyBatchAsync_ptsz(BATCH_PARAMS, size_t *fail, CUstream st) { return copy_batch(d, s, n, count, a, ai, na, fail, st, true); }
CU_EXPORT(cuMemcpyBatchAsync_ptsz, (BATCH_PARAMS, size_t *fail, CUstream st));
CUresult sim_cuMemcpyBatchAsync_v2(BATCH_PARAMS, CUstream st) { return copy_batch(d, s, n, count, a, ai, na, NULL, st, false); }
CU_EXPORT(cuMemcpyBatchAsync_v2, (BATCH_PARAMS, CUstream st));
CUresult sim_cuMemcpyBatchAsync_v2_ptsz(BATCH_PARAMS, CUstream st) { return copy_batch(d, s, n, count, a, ai, na, NULL, st, true); }
CU_EXPORT(cuMemcpyBatchAsync_v2_ptsz, (BATCH_PARAMS, CUstream st));
#undef BATCH_PARAMS
