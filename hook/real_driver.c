/* real_driver: lazy dlopen of the real driver libraries, real dlsym. */
#define _GNU_SOURCE
#include "real_driver.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "config.h"
#include "log.h"

void *gs_real_exported[GS_ID_COUNT];
void *gs_real_proc[GS_ID_COUNT];
void *gs_real_alt[GS_ID_COUNT];
gs_cuda_calls gs_cu;
gs_nvml_calls gs_nvml;

typedef void *(*dlsym_fn)(void *, const char *);
/* Read by the assembly entry of our dlsym (symbol_routes.c). */
void *gs_real_dlsym_fn;

static __thread int loading_here __attribute__((tls_model("initial-exec")));

bool gs_real_loading_here(void) { return loading_here != 0; }

GS_SANITIZER_START_UP void *gs_resolve_real_dlsym(void)
{
    void *fn = __atomic_load_n(&gs_real_dlsym_fn, __ATOMIC_ACQUIRE);
    if (__builtin_expect(fn == NULL, 0)) {
        /* dlvsym is not interposed, so this reaches glibc's own dlsym. */
        fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!fn)
            fn = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&gs_real_dlsym_fn, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

GS_SANITIZER_START_UP void *gs_real_dlsym(void *handle, const char *name)
{
    dlsym_fn fn = (dlsym_fn)gs_resolve_real_dlsym();
    return fn ? fn(handle, name) : NULL;
}

static void *cuda_handle;
static void *nvml_handle;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static _Atomic int cuda_loaded;  /* 1 ok, -1 missing */
static _Atomic int nvml_loaded;

void *gs_real_cuda_handle(void) { return cuda_handle; }
void *gs_real_nvml_handle(void) { return nvml_handle; }

static void *first_symbol(void *handle, const char *a, const char *b)
{
    void *p = gs_real_dlsym(handle, a);
    if (!p && b)
        p = gs_real_dlsym(handle, b);
    return p;
}

static void resolve_rows(void *handle, int lib)
{
    for (int id = 0; id < GS_ID_COUNT; id++)
        if (gs_intercept_rows[id].lib == lib)
            __atomic_store_n(&gs_real_exported[id], gs_real_dlsym(handle, gs_intercept_rows[id].name),
                             __ATOMIC_RELEASE);
}

static void load_cuda(void)
{
    const gs_config *cfg = gs_config_get();
    loading_here = 1;
    cuda_handle = dlopen(cfg->real_libcuda, RTLD_NOW | RTLD_GLOBAL);
    loading_here = 0;
    if (!cuda_handle) {
        GS_WARN("cannot load the real CUDA driver %s (%s); CUDA calls will fail as without a driver",
                cfg->real_libcuda, dlerror());
        atomic_store(&cuda_loaded, -1);
        return;
    }
    resolve_rows(cuda_handle, GS_LIB_CUDA);
    gs_cu.cuCtxGetCurrent = first_symbol(cuda_handle, "cuCtxGetCurrent", NULL);
    gs_cu.cuCtxGetDevice = first_symbol(cuda_handle, "cuCtxGetDevice", NULL);
    gs_cu.cuCtxPushCurrent = first_symbol(cuda_handle, "cuCtxPushCurrent_v2", "cuCtxPushCurrent");
    gs_cu.cuCtxPopCurrent = first_symbol(cuda_handle, "cuCtxPopCurrent_v2", "cuCtxPopCurrent");
    gs_cu.cuCtxSynchronize = first_symbol(cuda_handle, "cuCtxSynchronize", NULL);
    gs_cu.cuEventCreate = first_symbol(cuda_handle, "cuEventCreate", NULL);
    gs_cu.cuEventRecord = first_symbol(cuda_handle, "cuEventRecord", NULL);
    gs_cu.cuEventRecord_ptsz = first_symbol(cuda_handle, "cuEventRecord_ptsz", "cuEventRecord");
    gs_cu.cuEventQuery = first_symbol(cuda_handle, "cuEventQuery", NULL);
    gs_cu.cuEventSynchronize = first_symbol(cuda_handle, "cuEventSynchronize", NULL);
    gs_cu.cuEventElapsedTime = first_symbol(cuda_handle, "cuEventElapsedTime_v2", "cuEventElapsedTime");
    gs_cu.cuEventDestroy = first_symbol(cuda_handle, "cuEventDestroy_v2", "cuEventDestroy");
    gs_cu.cuDeviceGetUuid = first_symbol(cuda_handle, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
    gs_cu.cuStreamIsCapturing = first_symbol(cuda_handle, "cuStreamIsCapturing", NULL);
    gs_cu.cuStreamIsCapturing_ptsz = first_symbol(cuda_handle, "cuStreamIsCapturing_ptsz", NULL);
    gs_cu.cuThreadExchangeStreamCaptureMode = first_symbol(cuda_handle, "cuThreadExchangeStreamCaptureMode", NULL);
    gs_cu.cuMemPoolGetAttribute = first_symbol(cuda_handle, "cuMemPoolGetAttribute", NULL);
    gs_cu.cuDeviceGetMemPool = first_symbol(cuda_handle, "cuDeviceGetMemPool", NULL);
    gs_cu.cuDeviceGetGraphMemAttribute = first_symbol(cuda_handle, "cuDeviceGetGraphMemAttribute", NULL);
    gs_cu.cuGraphGetNodes = first_symbol(cuda_handle, "cuGraphGetNodes", NULL);
    gs_cu.cuGraphNodeGetType = first_symbol(cuda_handle, "cuGraphNodeGetType", NULL);
    gs_cu.cuGraphMemAllocNodeGetParams = first_symbol(cuda_handle, "cuGraphMemAllocNodeGetParams", NULL);
    if (!gs_cu.cuCtxGetCurrent || !gs_cu.cuCtxSynchronize || !gs_cu.cuCtxPushCurrent || !gs_cu.cuCtxPopCurrent)
        GS_WARN("the CUDA driver %s lacks context calls the token gate needs "
                "(cuCtxGetCurrent/cuCtxSynchronize/cuCtxPushCurrent_v2/cuCtxPopCurrent_v2)", cfg->real_libcuda);
    GS_DEBUG("real CUDA driver loaded from %s", cfg->real_libcuda);
    atomic_store_explicit(&cuda_loaded, 1, memory_order_release);
}

static void load_nvml(void)
{
    const gs_config *cfg = gs_config_get();
    loading_here = 1;
    nvml_handle = dlopen(cfg->real_libnvml, RTLD_NOW | RTLD_GLOBAL);
    loading_here = 0;
    if (!nvml_handle) {
        GS_WARN("cannot load the real NVML %s (%s)", cfg->real_libnvml, dlerror());
        atomic_store(&nvml_loaded, -1);
        return;
    }
    resolve_rows(nvml_handle, GS_LIB_NVML);
    gs_nvml.nvmlDeviceGetUUID = first_symbol(nvml_handle, "nvmlDeviceGetUUID", NULL);
    gs_nvml.nvmlDeviceGetCount = first_symbol(nvml_handle, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    gs_nvml.nvmlDeviceGetHandleByIndex =
        first_symbol(nvml_handle, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    atomic_store_explicit(&nvml_loaded, 1, memory_order_release);
}

bool gs_real_cuda_load(void)
{
    int state = atomic_load_explicit(&cuda_loaded, memory_order_acquire);
    if (__builtin_expect(state == 0, 0)) {
        if (loading_here)
            return false;   /* called back from inside our own dlopen */
        pthread_once(&cuda_once, load_cuda);
        state = atomic_load_explicit(&cuda_loaded, memory_order_acquire);
    }
    return state > 0;
}

bool gs_real_nvml_load(void)
{
    int state = atomic_load_explicit(&nvml_loaded, memory_order_acquire);
    if (__builtin_expect(state == 0, 0)) {
        if (loading_here)
            return false;
        pthread_once(&nvml_once, load_nvml);
        state = atomic_load_explicit(&nvml_loaded, memory_order_acquire);
    }
    return state > 0;
}
