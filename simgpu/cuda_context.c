/* Initialisation, the device, contexts and error strings of the simulated
 * libcuda.so.1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_internal.h"

#define SIM_DRIVER_VERSION 13000
#define SIM_CONTEXT_STACK_DEPTH 32

struct sim_cuda_process sim_process;

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;

/* The device's one primary context; retained count as on the real driver. */
static struct CUctx_st primary_context = {.tag = SIM_TAG_CONTEXT, .primary = true};
static int primary_retains;

/* Each thread's context stack; the top is the current context. */
static __thread CUcontext context_stack[SIM_CONTEXT_STACK_DEPTH];
static __thread int context_depth;

static void process_label(char *out, size_t len) {
    const char *label = getenv("GSLICE_SIM_LABEL");
    if (!label || !*label) label = getenv("GSLICE_GROUP");
    if (label && *label) {
        snprintf(out, len, "%s", label);
        return;
    }
    char comm[64] = "";
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, comm, sizeof comm - 1);
        close(fd);
        if (n > 0) comm[n] = 0;
        char *nl = strchr(comm, '\n');
        if (nl) *nl = 0;
    }
    snprintf(out, len, "%s", comm[0] ? comm : "unknown");
}

/* A size from the environment: bytes or e.g. 256MiB, "0" for none. */
static uint64_t size_from_env(const char *name, uint64_t fallback) {
    const char *text = getenv(name);
    uint64_t bytes = fallback;
    if (text && strcmp(text, "0") == 0) return 0;
    if (text && *text && !sim_parse_bytes(text, &bytes)) {
        sim_log("%s=%s is not a size (expected bytes or e.g. 256MiB); using %llu bytes", name, text,
                (unsigned long long)fallback);
        bytes = fallback;
    }
    return bytes;
}

/* Device memory each context costs that no allocation call shows (the
 * real driver's context state, module code, device heap and stacks):
 * GSLICE_SIM_CONTEXT_MEMORY, default 256 MiB. Visible in cuMemGetInfo,
 * the per-process accounting and NVML's per-process used memory. */
#define SIM_DEFAULT_CONTEXT_MEMORY (256ull << 20)
static uint64_t context_memory_bytes(void) {
    return size_from_env("GSLICE_SIM_CONTEXT_MEMORY", SIM_DEFAULT_CONTEXT_MEMORY);
}

/* Lazy module loading: the real driver (CUDA_MODULE_LOADING=LAZY, the
 * default since CUDA 12.2) puts a kernel's code in device memory at its
 * first launch, and libraries (cuBLAS, cuDNN) build state at their first
 * use, so a context keeps growing after its last allocation call.
 * GSLICE_SIM_MODULE_LOAD_MEMORY (default 0): what the first launch of each
 * distinct function in a context adds to that context's memory. The
 * context keeps it until it is destroyed. A load that does not fit the
 * device fails the launch with CUDA_ERROR_OUT_OF_MEMORY, as a real lazy
 * load does. */
struct loaded_function {
    CUcontext ctx;
    const void *function;
};
static pthread_mutex_t loaded_lock = PTHREAD_MUTEX_INITIALIZER;
static struct loaded_function *loaded;   /* a process launches a handful of distinct functions: a list */
static size_t loaded_count, loaded_capacity;

CUresult sim_context_lazy_load(const void *function) {
    uint64_t bytes = sim_process.module_load_memory;
    if (!bytes) return CUDA_SUCCESS;
    CUcontext ctx = sim_current_context();
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&loaded_lock);
    size_t i = 0;
    while (i < loaded_count && (loaded[i].ctx != ctx || loaded[i].function != function)) i++;
    if (i == loaded_count) {
        if (loaded_count == loaded_capacity) {
            size_t cap = loaded_capacity ? loaded_capacity * 2 : 64;
            struct loaded_function *grown = realloc(loaded, cap * sizeof *grown);
            if (!grown) rc = CUDA_ERROR_OUT_OF_MEMORY;
            else loaded = grown, loaded_capacity = cap;
        }
        if (rc == CUDA_SUCCESS && !sim_memory_reserve(sim_process.dev, sim_process.slot, bytes))
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        if (rc == CUDA_SUCCESS) {
            loaded[loaded_count++] = (struct loaded_function){ctx, function};
            ctx->lazy_loaded += bytes;
        }
    }
    pthread_mutex_unlock(&loaded_lock);
    return rc;
}

/* The context's lazily loaded code goes with it. */
static void lazy_loads_release(CUcontext ctx) {
    pthread_mutex_lock(&loaded_lock);
    size_t kept = 0;
    for (size_t i = 0; i < loaded_count; i++)
        if (loaded[i].ctx != ctx) loaded[kept++] = loaded[i];
    loaded_count = kept;
    uint64_t bytes = ctx->lazy_loaded;
    ctx->lazy_loaded = 0;
    pthread_mutex_unlock(&loaded_lock);
    if (bytes) sim_memory_release(sim_process.dev, sim_process.slot, bytes);
}

/* A context comes into being: take its overhead, or CUDA_ERROR_OUT_OF_MEMORY. */
static CUresult context_overhead_take(void) {
    uint64_t bytes = sim_process.context_memory;
    return !bytes || sim_memory_reserve(sim_process.dev, sim_process.slot, bytes) ? CUDA_SUCCESS
                                                                                 : CUDA_ERROR_OUT_OF_MEMORY;
}

/* A context goes away: its allocations and its overhead are freed. */
static void context_teardown(CUcontext ctx) {
    sim_memory_free_context(ctx);
    lazy_loads_release(ctx);
    if (sim_process.context_memory) sim_memory_release(sim_process.dev, sim_process.slot, sim_process.context_memory);
}

static uint64_t default_kernel_ns(void) {
    const char *text = getenv("GSLICE_SIM_KERNEL_US");
    if (!text || !*text) return 50000;
    char *end;
    double us = strtod(text, &end);
    if (end == text || *end || !(us >= 0) || us > 3.6e9) {
        sim_log("GSLICE_SIM_KERNEL_US '%.40s' is not a duration; expected microseconds >= 0, e.g. 50; using 50",
                text);
        return 50000;
    }
    return (uint64_t)(us * 1000.0);
}

/* The process is leaving: its device memory goes back to the pool, as the
 * real driver frees a context's memory at teardown. */
static void process_exit(void) {
    if (sim_process.initialised && sim_process.pid == getpid() && sim_process.slot)
        sim_registry_release(sim_process.dev, sim_process.slot);
}

/* A forked child has none of the parent's threads; it starts uninitialised
 * and must call cuInit again (the real driver refuses a child's use of the
 * parent's context outright). */
static void forget_after_fork(void) {
    pthread_mutex_init(&init_lock, NULL);
    sim_process.initialised = false;
    sim_process.slot = NULL;
    init_result = CUDA_ERROR_NOT_INITIALIZED;
    context_depth = 0;
    primary_retains = 0;
    pthread_mutex_init(&loaded_lock, NULL);
    loaded_count = 0;
    primary_context.lazy_loaded = 0;
}

__attribute__((constructor)) static void register_handlers(void) {
    pthread_atfork(NULL, NULL, forget_after_fork);
    atexit(process_exit);
}

CUresult sim_cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&init_lock);
    if (!sim_process.initialised) {
        char err[512] = "";
        struct sim_device_shared *dev = sim_process.dev ? sim_process.dev : sim_device_attach(err, sizeof err);
        if (!dev) {
            sim_log("cuInit: %s", err);
            init_result = CUDA_ERROR_NO_DEVICE;
        } else {
            char label[SIM_LABEL_BYTES];
            process_label(label, sizeof label);
            sim_process.dev = dev;
            sim_process.pid = getpid();
            sim_process.default_kernel_ns = default_kernel_ns();
            sim_process.context_memory = context_memory_bytes();
            sim_process.module_load_memory = size_from_env("GSLICE_SIM_MODULE_LOAD_MEMORY", 0);
            sim_process.slot = sim_registry_claim(dev, sim_process.pid, label);
            if (!sim_process.slot) {
                sim_log("cuInit: all %d process slots of the simulated GPU belong to live processes", SIM_MAX_PROCESSES);
                init_result = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                init_result = CUDA_SUCCESS;
                __atomic_store_n(&sim_process.initialised, true, __ATOMIC_RELEASE);
            }
        }
    }
    CUresult rc = init_result;
    pthread_mutex_unlock(&init_lock);
    return rc;
}
CU_EXPORT(cuInit, (unsigned int flags));

CUresult sim_require_init(void) {
    return __atomic_load_n(&sim_process.initialised, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

CUcontext sim_current_context(void) { return context_depth ? context_stack[context_depth - 1] : NULL; }

CUresult sim_require_context(void) {
    if (!__atomic_load_n(&sim_process.initialised, __ATOMIC_ACQUIRE)) return CUDA_ERROR_NOT_INITIALIZED;
    CUcontext ctx = sim_current_context();
    if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx->tag != SIM_TAG_CONTEXT) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return CUDA_SUCCESS;
}

CUresult sim_cuDriverGetVersion(int *version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDriverGetVersion, (int *version));

/* ---- device ------------------------------------------------------------- */

static CUresult check_device(CUdevice dev) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult sim_cuDeviceGetCount(int *count) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceGetCount, (int *count));

CUresult sim_cuDeviceGet(CUdevice *device, int ordinal) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceGet, (CUdevice * device, int ordinal));

CUresult sim_cuDeviceGetName(char *name, int len, CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", sim_process.dev->name);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceGetName, (char *name, int len, CUdevice dev));

CUresult sim_cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, sim_process.dev->uuid_bytes, 16);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceGetUuid_v2, (CUuuid * uuid, CUdevice dev));

CUresult sim_cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return sim_cuDeviceGetUuid_v2(uuid, dev); }
CU_EXPORT(cuDeviceGetUuid, (CUuuid * uuid, CUdevice dev));

CUresult sim_cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = sim_process.dev->total_memory;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev));

/* The CUDA 2.x form with a 32-bit size: saturates above 4 GiB. */
CUresult sim_cuDeviceTotalMem(unsigned int *bytes, CUdevice dev) {
    size_t total;
    CUresult rc = sim_cuDeviceTotalMem_v2(&total, dev);
    if (rc) return rc;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = total > 0xffffffffu ? 0xffffffffu : (unsigned int)total;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceTotalMem, (unsigned int *bytes, CUdevice dev));

static int attribute_value(int attribute, int *value) {
    switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = 1024; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = 1024; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = 64; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = 2147483647; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *value = 65535; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = 65535; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = 49152; return 1;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: *value = 65536; return 1;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *value = 2147483647; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *value = 65536; return 1;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *value = 1755000; return 1;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: *value = 512; return 1;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = (int)sim_process.dev->sm_count; return 1;
    case CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_MODE: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *value = 2619000; return 1;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: *value = 5120; return 1;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *value = 50 << 20; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *value = 2048; return 1;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: *value = 2; return 1;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; return 1;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: *value = 233472; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: *value = 65536; return 1;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = 232448; return 1;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: *value = 32; return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *value = 1; return 1;
    default: return 0;
    }
}

CUresult sim_cuDeviceGetAttribute(int *value, int attribute, CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (attribute <= 0 || attribute > 200) return CUDA_ERROR_INVALID_VALUE;
    /* Attributes the simulator has no opinion on read as 0 ("not
     * supported"), which is what a real driver answers for most of them. */
    if (!attribute_value(attribute, value)) *value = 0;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceGetAttribute, (int *value, int attribute, CUdevice dev));

CUresult sim_cuDeviceComputeCapability(int *major, int *minor, CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
    *major = 9;
    *minor = 0;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceComputeCapability, (int *major, int *minor, CUdevice dev));

CUresult sim_cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    if (!bus_id || len < 13) return CUDA_ERROR_INVALID_VALUE;
    snprintf(bus_id, (size_t)len, "0000:00:00.0");
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceGetPCIBusId, (char *bus_id, int len, CUdevice dev));

/* ---- primary context ---------------------------------------------------- */

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

CUresult sim_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary_lock);
    if (primary_retains == 0 && (rc = context_overhead_take()) != CUDA_SUCCESS) {
        pthread_mutex_unlock(&primary_lock);
        return rc;
    }
    primary_retains++;
    pthread_mutex_unlock(&primary_lock);
    *pctx = &primary_context;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev));

CUresult sim_cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    pthread_mutex_lock(&primary_lock);
    rc = primary_retains > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (primary_retains > 0 && --primary_retains == 0) {
        /* The last release destroys the primary context. */
        sim_streams_synchronize_all();
        context_teardown(&primary_context);
    }
    pthread_mutex_unlock(&primary_lock);
    return rc;
}
CU_EXPORT(cuDevicePrimaryCtxRelease_v2, (CUdevice dev));
CUresult sim_cuDevicePrimaryCtxRelease(CUdevice dev) { return sim_cuDevicePrimaryCtxRelease_v2(dev); }
CU_EXPORT(cuDevicePrimaryCtxRelease, (CUdevice dev));

CUresult sim_cuDevicePrimaryCtxReset_v2(CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    sim_streams_synchronize_all();
    pthread_mutex_lock(&primary_lock);
    /* Reset destroys the primary context's allocations; the context stays
     * retained (and costs its overhead again) when it was. */
    sim_memory_free_context(&primary_context);
    pthread_mutex_unlock(&primary_lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDevicePrimaryCtxReset_v2, (CUdevice dev));
CUresult sim_cuDevicePrimaryCtxReset(CUdevice dev) { return sim_cuDevicePrimaryCtxReset_v2(dev); }
CU_EXPORT(cuDevicePrimaryCtxReset, (CUdevice dev));

CUresult sim_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&primary_lock);
    *flags = primary_context.flags;
    *active = primary_retains > 0;
    pthread_mutex_unlock(&primary_lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int *flags, int *active));

CUresult sim_cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    primary_context.flags = flags;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDevicePrimaryCtxSetFlags_v2, (CUdevice dev, unsigned int flags));
CUresult sim_cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
    return sim_cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}
CU_EXPORT(cuDevicePrimaryCtxSetFlags, (CUdevice dev, unsigned int flags));

/* ---- contexts ----------------------------------------------------------- */

static CUresult push_context(CUcontext ctx) {
    if (context_depth >= SIM_CONTEXT_STACK_DEPTH) return CUDA_ERROR_INVALID_VALUE;
    context_stack[context_depth++] = ctx;
    return CUDA_SUCCESS;
}

/* Created contexts all share the device and the process's streams; the
 * simulator keeps them only as handles to make current. */
CUresult sim_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    CUresult rc = check_device(dev);
    if (rc) return rc;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = calloc(1, sizeof *ctx);
    if (!ctx) return CUDA_ERROR_OUT_OF_MEMORY;
    ctx->tag = SIM_TAG_CONTEXT;
    ctx->flags = flags;
    rc = push_context(ctx);
    if (!rc && (rc = context_overhead_take()) != CUDA_SUCCESS) context_depth--;
    if (rc) {
        free(ctx);
        return rc;
    }
    *pctx = ctx;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxCreate_v2, (CUcontext * pctx, unsigned int flags, CUdevice dev));

CUresult sim_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) {
    return sim_cuCtxCreate_v2(pctx, flags, dev);
}
CU_EXPORT(cuCtxCreate, (CUcontext * pctx, unsigned int flags, CUdevice dev));

CUresult sim_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int num_params, unsigned int flags,
                            CUdevice dev) {
    (void)params;
    (void)num_params;
    return sim_cuCtxCreate_v2(pctx, flags, dev);
}
CU_EXPORT(cuCtxCreate_v3, (CUcontext * pctx, CUexecAffinityParam *params, int num_params, unsigned int flags,
                           CUdevice dev));

CUresult sim_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev) {
    (void)params;
    return sim_cuCtxCreate_v2(pctx, flags, dev);
}
CU_EXPORT(cuCtxCreate_v4, (CUcontext * pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev));

CUresult sim_cuCtxDestroy_v2(CUcontext ctx) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!ctx || ctx->tag != SIM_TAG_CONTEXT || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
    sim_streams_synchronize_all();
    /* Pop it from this thread's stack wherever it is. */
    for (int i = 0; i < context_depth; i++) {
        if (context_stack[i] == ctx) {
            memmove(&context_stack[i], &context_stack[i + 1], (size_t)(context_depth - i - 1) * sizeof(CUcontext));
            context_depth--;
            i--;
        }
    }
    context_teardown(ctx);
    /* The handle stays readable (tagged dead) so other threads still
     * holding it get CUDA_ERROR_CONTEXT_IS_DESTROYED, not a crash. */
    ctx->tag = SIM_TAG_DEAD;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxDestroy_v2, (CUcontext ctx));
CUresult sim_cuCtxDestroy(CUcontext ctx) { return sim_cuCtxDestroy_v2(ctx); }
CU_EXPORT(cuCtxDestroy, (CUcontext ctx));

CUresult sim_cuCtxSetCurrent(CUcontext ctx) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (ctx && ctx->tag != SIM_TAG_CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx) {
        if (context_depth) context_depth--;
        return CUDA_SUCCESS;
    }
    if (context_depth)
        context_stack[context_depth - 1] = ctx;
    else
        context_stack[context_depth++] = ctx;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxSetCurrent, (CUcontext ctx));

CUresult sim_cuCtxGetCurrent(CUcontext *pctx) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    *pctx = sim_current_context();
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxGetCurrent, (CUcontext * pctx));

CUresult sim_cuCtxPushCurrent_v2(CUcontext ctx) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!ctx || ctx->tag != SIM_TAG_CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;
    return push_context(ctx);
}
CU_EXPORT(cuCtxPushCurrent_v2, (CUcontext ctx));
CUresult sim_cuCtxPushCurrent(CUcontext ctx) { return sim_cuCtxPushCurrent_v2(ctx); }
CU_EXPORT(cuCtxPushCurrent, (CUcontext ctx));

CUresult sim_cuCtxPopCurrent_v2(CUcontext *pctx) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!context_depth) return CUDA_ERROR_INVALID_CONTEXT;
    CUcontext ctx = context_stack[--context_depth];
    if (pctx) *pctx = ctx;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxPopCurrent_v2, (CUcontext * pctx));
CUresult sim_cuCtxPopCurrent(CUcontext *pctx) { return sim_cuCtxPopCurrent_v2(pctx); }
CU_EXPORT(cuCtxPopCurrent, (CUcontext * pctx));

CUresult sim_cuCtxGetDevice(CUdevice *device) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxGetDevice, (CUdevice * device));

CUresult sim_cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) {
    if (!ctx) return sim_cuCtxGetDevice(device);
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (ctx->tag != SIM_TAG_CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxGetDevice_v2, (CUdevice * device, CUcontext ctx));

CUresult sim_cuCtxGetFlags(unsigned int *flags) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    *flags = sim_current_context()->flags;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxGetFlags, (unsigned int *flags));

CUresult sim_cuCtxGetApiVersion(CUcontext ctx, unsigned int *version) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    if (ctx && ctx->tag != SIM_TAG_CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;
    *version = 3020;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxGetApiVersion, (CUcontext ctx, unsigned int *version));

CUresult sim_cuCtxGetStreamPriorityRange(int *least, int *greatest) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxGetStreamPriorityRange, (int *least, int *greatest));

/* Waiting for a stream that is capturing can never finish: refused while
 * any capture is active (after invalidating it where the thread's mode
 * makes the call prohibited, see sim_capture_check_unsafe). */
static CUresult check_synchronize_allowed(void) {
    CUresult rc = sim_capture_check_unsafe();
    if (rc) return rc;
    return sim_capture_active() ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult sim_cuCtxSynchronize(void) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if ((rc = check_synchronize_allowed())) return rc;
    sim_streams_synchronize_all();
    sim_pools_release_at_sync();
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxSynchronize, (void));

CUresult sim_cuCtxSynchronize_v2(CUcontext ctx) {
    if (!ctx) return sim_cuCtxSynchronize();
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (ctx->tag != SIM_TAG_CONTEXT) return CUDA_ERROR_INVALID_CONTEXT;
    if ((rc = check_synchronize_allowed())) return rc;
    sim_streams_synchronize_all();
    sim_pools_release_at_sync();
    return CUDA_SUCCESS;
}
CU_EXPORT(cuCtxSynchronize_v2, (CUcontext ctx));

/* ---- errors ------------------------------------------------------------- */

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} error_table[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not initiated in this stream"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

CUresult sim_cuGetErrorString(CUresult error, const char **text) {
    if (!text) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++) {
        if (error_table[i].code == error) {
            *text = error_table[i].text;
            return CUDA_SUCCESS;
        }
    }
    *text = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
CU_EXPORT(cuGetErrorString, (CUresult error, const char **text));

CUresult sim_cuGetErrorName(CUresult error, const char **name) {
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof error_table / sizeof error_table[0]; i++) {
        if (error_table[i].code == error) {
            *name = error_table[i].name;
            return CUDA_SUCCESS;
        }
    }
    *name = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}
CU_EXPORT(cuGetErrorName, (CUresult error, const char **name));

/* The runtime's private tables (and their integrity hash) are not
 * simulated; see FIELD-NOTES section 1. */
CUresult sim_cuGetExportTable(const void **table, const CUuuid *id) {
    (void)id;
    if (table) *table = NULL;
    return CUDA_ERROR_NOT_SUPPORTED;
}
CU_EXPORT(cuGetExportTable, (const void **table, const CUuuid *id));
