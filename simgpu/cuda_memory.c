/* Device memory of the simulated libcuda.so.1.
 *
 * Every allocation is a real private anonymous mapping made with
 * MAP_NORESERVE, so device pointers are usable by memcpy and a 10 GiB
 * allocation costs nothing until touched. The bytes count against the
 * device's physical memory in the shared segment, atomically across
 * processes; sizes are counted exactly as asked (no rounding).
 * Copies are instantaneous and do not occupy the engine. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_internal.h"

#define SIM_VMM_GRANULARITY (2ull << 20)
#define SIM_PITCH_ALIGNMENT 512u

enum allocation_kind {
    ALLOC_DEVICE,   /* cuMemAlloc & co: counted against device memory */
    ALLOC_RESERVED, /* cuMemAddressReserve: address range only, not counted */
    ALLOC_HOST,     /* cuMemAllocHost: pinned host memory, not counted */
};

struct allocation {
    uintptr_t base;
    size_t size;      /* bytes mapped */
    size_t counted;   /* bytes counted against device memory */
    uint32_t kind;
};

/* Allocations sorted by base, for exact frees and range checks on copies. */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct allocation *table;
static size_t table_count, table_capacity;

struct CUarray_st {
    uint32_t tag;
    void *base;
    size_t bytes;
};

struct vmm_allocation {
    uint32_t tag;
    int fd;
    size_t size;
};

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
    struct allocation entry = {(uintptr_t)p, bytes, bytes, ALLOC_DEVICE};
    if (!p || !table_insert(entry)) {
        if (p) munmap(p, bytes);
        sim_memory_release(sim_process.dev, sim_process.slot, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = (uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult sim_memory_free(CUdeviceptr ptr) {
    struct allocation a;
    if (!table_remove((uintptr_t)ptr, ALLOC_DEVICE, &a)) return CUDA_ERROR_INVALID_VALUE;
    munmap((void *)a.base, a.size);
    sim_memory_release(sim_process.dev, sim_process.slot, a.counted);
    return CUDA_SUCCESS;
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

/* Stream-ordered allocation: the memory is taken now (so an over-quota
 * request fails at the call, which is where the driver reports it). */
static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    return alloc_device(dptr, bytesize);
}
CUresult sim_cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return alloc_async(dptr, bytesize, hStream, false);
}
CU_EXPORT(cuMemAllocAsync, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream));
CUresult sim_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream) {
    return alloc_async(dptr, bytesize, hStream, true);
}
CU_EXPORT(cuMemAllocAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUstream hStream));

CUresult sim_cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    (void)pool;
    return alloc_async(dptr, bytesize, hStream, false);
}
CU_EXPORT(cuMemAllocFromPoolAsync, (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream));
CUresult sim_cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
    (void)pool;
    return alloc_async(dptr, bytesize, hStream, true);
}
CU_EXPORT(cuMemAllocFromPoolAsync_ptsz, (CUdeviceptr * dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream));

/* Stream-ordered free: the memory returns when the stream reaches it. */
static CUresult free_async(CUdeviceptr dptr, CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct allocation a;
    if (!table_find_range((uintptr_t)dptr, 1, &a) || a.base != (uintptr_t)dptr || a.kind != ALLOC_DEVICE)
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
    struct allocation entry = {(uintptr_t)p, bytesize, 0, ALLOC_HOST};
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
    if (!sim_memory_reserve(sim_process.dev, sim_process.slot, size)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct vmm_allocation *v = calloc(1, sizeof *v);
    int fd = v ? memfd_create("gslice-sim-vmm", MFD_CLOEXEC) : -1;
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        if (fd >= 0) close(fd);
        free(v);
        sim_memory_release(sim_process.dev, sim_process.slot, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    v->tag = SIM_TAG_VMM;
    v->fd = fd;
    v->size = size;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemCreate, (CUmemGenericAllocationHandle * handle, size_t size, const CUmemAllocationProp *prop,
                        unsigned long long flags));

CUresult sim_cuMemRelease(CUmemGenericAllocationHandle handle) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct vmm_allocation *v = (struct vmm_allocation *)(uintptr_t)handle;
    if (!v || v->tag != SIM_TAG_VMM) return CUDA_ERROR_INVALID_VALUE;
    v->tag = SIM_TAG_DEAD;
    close(v->fd); /* existing mappings keep the pages alive until unmapped */
    sim_memory_release(sim_process.dev, sim_process.slot, v->size);
    free(v);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuMemRelease, (CUmemGenericAllocationHandle handle));

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
    struct allocation entry = {base, size, 0, ALLOC_RESERVED};
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
    struct vmm_allocation *v = (struct vmm_allocation *)(uintptr_t)handle;
    if (!v || v->tag != SIM_TAG_VMM || flags) return CUDA_ERROR_INVALID_VALUE;
    if (!in_reserved_range(ptr, size) || offset > v->size || size > v->size - offset) return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, v->fd, (off_t)offset);
    return p == MAP_FAILED ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}
CU_EXPORT(cuMemMap, (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                     unsigned long long flags));

CUresult sim_cuMemUnmap(CUdeviceptr ptr, size_t size) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!in_reserved_range(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                   -1, 0);
    return p == MAP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
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

static CUresult array_new(size_t bytes, struct CUarray_st **out) {
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
    size_t bytes = desc->Width * extent(desc->Height) * desc->NumChannels * cuda_abi_format_bytes(desc->Format);
    return array_new(bytes, (struct CUarray_st **)pHandle);
}
CU_EXPORT(cuArrayCreate_v2, (CUarray * pHandle, const CUDA_ARRAY_DESCRIPTOR *desc));

CUresult sim_cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc) {
    if (!pHandle || !desc || !desc->Width || !desc->NumChannels) return CUDA_ERROR_INVALID_VALUE;
    size_t bytes = desc->Width * extent(desc->Height) * extent(desc->Depth) * desc->NumChannels *
                   cuda_abi_format_bytes(desc->Format);
    return array_new(bytes, (struct CUarray_st **)pHandle);
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
    return array_new(bytes, (struct CUarray_st **)pHandle);
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

/* Async forms run in stream order: wait for the stream, then copy. */
static CUresult wait_stream(CUstream hStream, bool ptds) {
    struct CUstream_st *s;
    CUresult rc = sim_stream_resolve(hStream, ptds, &s);
    return rc ? rc : sim_stream_synchronize(s);
}

enum copy_direction { HOST_TO_DEVICE, DEVICE_TO_HOST, DEVICE_TO_DEVICE, ANY_TO_ANY };

static CUresult copy_checked(void *dst, const void *src, size_t bytes, enum copy_direction dir) {
    if (!bytes) return CUDA_SUCCESS;
    if (!dst || !src) return CUDA_ERROR_INVALID_VALUE;
    bool dst_dev = dir == HOST_TO_DEVICE || dir == DEVICE_TO_DEVICE;
    bool src_dev = dir == DEVICE_TO_HOST || dir == DEVICE_TO_DEVICE;
    if (dst_dev && !device_range((uintptr_t)dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
    if (src_dev && !device_range((uintptr_t)src, bytes)) return CUDA_ERROR_INVALID_VALUE;
    memmove(dst, src, bytes);
    return CUDA_SUCCESS;
}

static CUresult copy_sync(void *dst, const void *src, size_t bytes, enum copy_direction dir, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    rc = wait_before_sync_copy(ptds);
    return rc ? rc : copy_checked(dst, src, bytes, dir);
}

static CUresult copy_async(void *dst, const void *src, size_t bytes, enum copy_direction dir, CUstream hStream,
                           bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    rc = wait_stream(hStream, ptds);
    return rc ? rc : copy_checked(dst, src, bytes, dir);
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

/* Fill n elements of `width` bytes with value. */
static CUresult fill(CUdeviceptr dst, uint32_t value, size_t n, unsigned width, bool has_stream, CUstream hStream,
                     bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    rc = has_stream ? wait_stream(hStream, ptds) : wait_before_sync_copy(ptds);
    if (rc) return rc;
    if (!n) return CUDA_SUCCESS;
    if (n > SIZE_MAX / width || !device_range(dst, n * width) || dst % width) return CUDA_ERROR_INVALID_VALUE;
    unsigned char *p = DPTR(dst);
    if (width == 1) {
        memset(p, (int)(value & 0xff), n);
    } else if (width == 2) {
        uint16_t v = (uint16_t)value;
        for (size_t i = 0; i < n; i++) memcpy(p + 2 * i, &v, 2);
    } else {
        for (size_t i = 0; i < n; i++) memcpy(p + 4 * i, &value, 4);
    }
    return CUDA_SUCCESS;
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
