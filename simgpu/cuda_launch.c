/* Modules, kernels, launches and graphs of the simulated libcuda.so.1.
 *
 * Any image loads, and any function name resolves. A kernel named
 * gslice_sim_sleep occupies the engine for the nanoseconds in its first
 * parameter (a uint64_t); any other kernel for GSLICE_SIM_KERNEL_US
 * microseconds (default 50). Grid and block sizes do not change the
 * duration: the simulated GPU runs one kernel at a time over the whole
 * device. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

#include "cuda_internal.h"

#define SIM_SLEEP_KERNEL "gslice_sim_sleep"

struct CUfunc_st {
    uint32_t tag;
    bool is_sleep;
    struct CUfunc_st *next;
    char name[];
};

/* Modules and libraries are the same object here; a CUkernel is a CUfunction. */
struct CUmod_st {
    uint32_t tag;
    pthread_mutex_t lock;
    struct CUfunc_st *functions;
};

struct CUgraphNode_st {
    uint32_t tag;
    CUgraph graph;
    CUgraphNodeType type;   /* kernel, mem alloc or mem free */
    size_t bytes;           /* mem alloc: its size */
    CUdeviceptr dptr;       /* mem alloc / free: the address */
    bool freed;             /* mem alloc: a free node in the graph frees it */
};

struct CUgraph_st {
    uint32_t tag;
    pthread_mutex_t lock;
    uint64_t *durations; /* kernel nodes in the order added (dependencies are not modelled) */
    CUgraphNode *nodes;
    uint32_t count, capacity;
};

struct CUgraphExec_st {
    uint32_t tag;
    uint64_t *durations;
    uint32_t count;
    uint64_t mem_bytes;     /* graph memory its alloc nodes take at each launch */
    uint64_t mem_kept;      /* ... of which no free node in the graph gives back */
    uint64_t mem_held;      /* kept allocations of the last launch, until the exec is destroyed */
};

/* ---- modules and functions ---------------------------------------------- */

static CUresult module_new(CUmodule *out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUmod_st *m = calloc(1, sizeof *m);
    if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
    m->tag = SIM_TAG_MODULE;
    pthread_mutex_init(&m->lock, NULL);
    *out = m;
    return CUDA_SUCCESS;
}

static CUresult module_function(CUmodule m, const char *name, CUfunction *out) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
    if (!m || m->tag != SIM_TAG_MODULE) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&m->lock);
    struct CUfunc_st *f = m->functions;
    while (f && strcmp(f->name, name) != 0) f = f->next;
    if (!f) {
        size_t len = strlen(name);
        f = calloc(1, sizeof *f + len + 1);
        if (!f) {
            pthread_mutex_unlock(&m->lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        f->tag = SIM_TAG_FUNCTION;
        f->is_sleep = strcmp(name, SIM_SLEEP_KERNEL) == 0;
        memcpy(f->name, name, len + 1);
        f->next = m->functions;
        m->functions = f;
    }
    pthread_mutex_unlock(&m->lock);
    *out = f;
    return CUDA_SUCCESS;
}

static CUresult module_unload(CUmodule m) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!m || m->tag != SIM_TAG_MODULE) return CUDA_ERROR_INVALID_HANDLE;
    /* Handles stay allocated (tagged dead) so a late use is refused rather
     * than reading freed memory; modules are loaded a handful of times. */
    m->tag = SIM_TAG_DEAD;
    for (struct CUfunc_st *f = m->functions; f; f = f->next) f->tag = SIM_TAG_DEAD;
    return CUDA_SUCCESS;
}

CUresult sim_cuModuleLoad(CUmodule *module, const char *fname) {
    if (!fname) return CUDA_ERROR_INVALID_VALUE;
    return module_new(module);
}
CU_EXPORT(cuModuleLoad, (CUmodule * module, const char *fname));

CUresult sim_cuModuleLoadData(CUmodule *module, const void *image) {
    if (!image) return CUDA_ERROR_INVALID_VALUE;
    return module_new(module);
}
CU_EXPORT(cuModuleLoadData, (CUmodule * module, const void *image));

CUresult sim_cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int num_options, CUjit_option *options,
                                void **option_values) {
    (void)num_options;
    (void)options;
    (void)option_values;
    return sim_cuModuleLoadData(module, image);
}
CU_EXPORT(cuModuleLoadDataEx, (CUmodule * module, const void *image, unsigned int num_options, CUjit_option *options,
                               void **option_values));

CUresult sim_cuModuleLoadFatBinary(CUmodule *module, const void *fat_cubin) {
    return sim_cuModuleLoadData(module, fat_cubin);
}
CU_EXPORT(cuModuleLoadFatBinary, (CUmodule * module, const void *fat_cubin));

CUresult sim_cuModuleUnload(CUmodule module) { return module_unload(module); }
CU_EXPORT(cuModuleUnload, (CUmodule module));

CUresult sim_cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
    return module_function(hmod, name, hfunc);
}
CU_EXPORT(cuModuleGetFunction, (CUfunction * hfunc, CUmodule hmod, const char *name));

CUresult sim_cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jit_options,
                               void **jit_option_values, unsigned int num_jit_options, void *library_options,
                               void **library_option_values, unsigned int num_library_options) {
    (void)jit_options, (void)jit_option_values, (void)num_jit_options;
    (void)library_options, (void)library_option_values, (void)num_library_options;
    if (!code) return CUDA_ERROR_INVALID_VALUE;
    return module_new((CUmodule *)library);
}
CU_EXPORT(cuLibraryLoadData, (CUlibrary * library, const void *code, CUjit_option *jit_options,
                              void **jit_option_values, unsigned int num_jit_options, void *library_options,
                              void **library_option_values, unsigned int num_library_options));

CUresult sim_cuLibraryLoadFromFile(CUlibrary *library, const char *file_name, CUjit_option *jit_options,
                                   void **jit_option_values, unsigned int num_jit_options, void *library_options,
                                   void **library_option_values, unsigned int num_library_options) {
    (void)jit_options, (void)jit_option_values, (void)num_jit_options;
    (void)library_options, (void)library_option_values, (void)num_library_options;
    if (!file_name) return CUDA_ERROR_INVALID_VALUE;
    return module_new((CUmodule *)library);
}
CU_EXPORT(cuLibraryLoadFromFile, (CUlibrary * library, const char *file_name, CUjit_option *jit_options,
                                  void **jit_option_values, unsigned int num_jit_options, void *library_options,
                                  void **library_option_values, unsigned int num_library_options));

CUresult sim_cuLibraryUnload(CUlibrary library) { return module_unload((CUmodule)library); }
CU_EXPORT(cuLibraryUnload, (CUlibrary library));

CUresult sim_cuLibraryGetKernel(CUkernel *kernel, CUlibrary library, const char *name) {
    return module_function((CUmodule)library, name, (CUfunction *)kernel);
}
CU_EXPORT(cuLibraryGetKernel, (CUkernel * kernel, CUlibrary library, const char *name));

CUresult sim_cuLibraryGetModule(CUmodule *module, CUlibrary library) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!module) return CUDA_ERROR_INVALID_VALUE;
    if (!library || ((CUmodule)library)->tag != SIM_TAG_MODULE) return CUDA_ERROR_INVALID_HANDLE;
    *module = (CUmodule)library;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuLibraryGetModule, (CUmodule * module, CUlibrary library));

CUresult sim_cuKernelGetFunction(CUfunction *func, CUkernel kernel) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!func) return CUDA_ERROR_INVALID_VALUE;
    if (!kernel || ((CUfunction)kernel)->tag != SIM_TAG_FUNCTION) return CUDA_ERROR_INVALID_HANDLE;
    *func = (CUfunction)kernel;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuKernelGetFunction, (CUfunction * func, CUkernel kernel));

CUresult sim_cuFuncGetAttribute(int *value, int attribute, CUfunction f) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (!f || f->tag != SIM_TAG_FUNCTION) return CUDA_ERROR_INVALID_HANDLE;
    /* 0 = CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK; the rest read as 0 */
    *value = attribute == 0 ? 1024 : 0;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuFuncGetAttribute, (int *value, int attribute, CUfunction f));

CUresult sim_cuFuncSetAttribute(CUfunction f, int attribute, int value) {
    (void)attribute, (void)value;
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!f || f->tag != SIM_TAG_FUNCTION) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuFuncSetAttribute, (CUfunction f, int attribute, int value));

/* ---- launches ----------------------------------------------------------- */

CUresult sim_kernel_duration(CUfunction f, void **kernel_params, void **extra, uint64_t *duration_ns) {
    if (!f || f->tag != SIM_TAG_FUNCTION) return CUDA_ERROR_INVALID_HANDLE;
    if (!f->is_sleep) {
        *duration_ns = sim_process.default_kernel_ns;
        return CUDA_SUCCESS;
    }
    if (kernel_params && kernel_params[0]) {
        memcpy(duration_ns, kernel_params[0], sizeof *duration_ns);
        return CUDA_SUCCESS;
    }
    /* Parameters packed in one buffer: {BUFFER_POINTER, buf, BUFFER_SIZE, &size, END} */
    for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER && extra[i + 1]) {
            memcpy(duration_ns, extra[i + 1], sizeof *duration_ns);
            return CUDA_SUCCESS;
        }
    }
    /* gslice_sim_sleep(uint64 ns) launched without its argument */
    return CUDA_ERROR_INVALID_VALUE;
}

static CUresult check_dims(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {
    if (!gx || !gy || !gz || !bx || !by || !bz) return CUDA_ERROR_INVALID_VALUE;
    if (bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
    if (gy > 65535 || gz > 65535) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       CUstream hStream, void **kernel_params, void **extra, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    uint64_t duration;
    rc = sim_kernel_duration(f, kernel_params, extra, &duration);
    if (rc) return rc;
    rc = check_dims(gx, gy, gz, bx, by, bz);
    if (rc) return rc;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    rc = sim_context_lazy_load(f);
    if (rc) return rc;
    struct sim_stream_item item = {.kind = SIM_ITEM_KERNEL, .duration_ns = duration};
    return sim_stream_enqueue(s, &item);
}

CUresult sim_cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                            unsigned int by, unsigned int bz, unsigned int shared_mem, CUstream hStream,
                            void **kernel_params, void **extra) {
    (void)shared_mem;
    return launch(f, gx, gy, gz, bx, by, bz, hStream, kernel_params, extra, false);
}
CU_EXPORT(cuLaunchKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                           unsigned int by, unsigned int bz, unsigned int shared_mem, CUstream hStream,
                           void **kernel_params, void **extra));

CUresult sim_cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                 unsigned int by, unsigned int bz, unsigned int shared_mem, CUstream hStream,
                                 void **kernel_params, void **extra) {
    (void)shared_mem;
    return launch(f, gx, gy, gz, bx, by, bz, hStream, kernel_params, extra, true);
}
CU_EXPORT(cuLaunchKernel_ptsz, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                unsigned int by, unsigned int bz, unsigned int shared_mem, CUstream hStream,
                                void **kernel_params, void **extra));

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **kernel_params, void **extra, bool ptds) {
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
                  config->blockDimZ, config->hStream, kernel_params, extra, ptds);
}
CUresult sim_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernel_params, void **extra) {
    return launch_ex(config, f, kernel_params, extra, false);
}
CU_EXPORT(cuLaunchKernelEx, (const CUlaunchConfig *config, CUfunction f, void **kernel_params, void **extra));
CUresult sim_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernel_params, void **extra) {
    return launch_ex(config, f, kernel_params, extra, true);
}
CU_EXPORT(cuLaunchKernelEx_ptsz, (const CUlaunchConfig *config, CUfunction f, void **kernel_params, void **extra));

CUresult sim_cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                       unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_mem,
                                       CUstream hStream, void **kernel_params) {
    (void)shared_mem;
    return launch(f, gx, gy, gz, bx, by, bz, hStream, kernel_params, NULL, false);
}
CU_EXPORT(cuLaunchCooperativeKernel, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                      unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_mem,
                                      CUstream hStream, void **kernel_params));

CUresult sim_cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz,
                                            unsigned int shared_mem, CUstream hStream, void **kernel_params) {
    (void)shared_mem;
    return launch(f, gx, gy, gz, bx, by, bz, hStream, kernel_params, NULL, true);
}
CU_EXPORT(cuLaunchCooperativeKernel_ptsz, (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                           unsigned int bx, unsigned int by, unsigned int bz,
                                           unsigned int shared_mem, CUstream hStream, void **kernel_params));

/* ---- graphs ------------------------------------------------------------- */

CUresult sim_graph_new(CUgraph *out) {
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
    g->tag = SIM_TAG_GRAPH;
    pthread_mutex_init(&g->lock, NULL);
    *out = g;
    return CUDA_SUCCESS;
}

/* Append kernels; the new nodes' handles go to nodes_out when given. */
static CUresult graph_append(CUgraph g, const uint64_t *durations, uint32_t count, CUgraphNode *nodes_out) {
    pthread_mutex_lock(&g->lock);
    if (g->count + count > g->capacity) {
        uint32_t capacity = g->capacity ? g->capacity : 8;
        while (capacity < g->count + count) capacity *= 2;
        uint64_t *d = realloc(g->durations, capacity * sizeof *d);
        if (d) g->durations = d;
        CUgraphNode *n = realloc(g->nodes, capacity * sizeof *n);
        if (n) g->nodes = n;
        if (!d || !n) {
            pthread_mutex_unlock(&g->lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        g->capacity = capacity;
    }
    for (uint32_t i = 0; i < count; i++) {
        struct CUgraphNode_st *node = calloc(1, sizeof *node);
        if (!node) {
            pthread_mutex_unlock(&g->lock);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        node->tag = SIM_TAG_NODE;
        node->graph = g;
        g->durations[g->count] = durations[i];
        g->nodes[g->count] = node;
        g->count++;
        if (nodes_out) nodes_out[i] = node;
    }
    pthread_mutex_unlock(&g->lock);
    return CUDA_SUCCESS;
}

bool sim_graph_live(CUgraph graph) { return graph && graph->tag == SIM_TAG_GRAPH; }

CUresult sim_graph_append_kernels(CUgraph graph, const uint64_t *durations, uint32_t count) {
    return graph_append(graph, durations, count, NULL);
}

CUresult sim_cuGraphCreate(CUgraph *phGraph, unsigned int flags) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!phGraph || flags) return CUDA_ERROR_INVALID_VALUE;
    return sim_graph_new(phGraph);
}
CU_EXPORT(cuGraphCreate, (CUgraph * phGraph, unsigned int flags));

CUresult sim_cuGraphDestroy(CUgraph graph) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!graph || graph->tag != SIM_TAG_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    graph->tag = SIM_TAG_DEAD;
    for (uint32_t i = 0; i < graph->count; i++) {
        if (graph->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
            munmap((void *)(uintptr_t)graph->nodes[i]->dptr, graph->nodes[i]->bytes);
        graph->nodes[i]->tag = SIM_TAG_DEAD;
        free(graph->nodes[i]);
    }
    free(graph->nodes);
    free(graph->durations);
    pthread_mutex_destroy(&graph->lock);
    free(graph);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuGraphDestroy, (CUgraph graph));

static CUresult add_kernel_node(CUgraphNode *phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps,
                                const CUDA_KERNEL_NODE_PARAMS *params, bool v2) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!phNode || !params || (num_deps && !deps)) return CUDA_ERROR_INVALID_VALUE;
    if (!graph || graph->tag != SIM_TAG_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < num_deps; i++)
        if (!deps[i] || deps[i]->tag != SIM_TAG_NODE || deps[i]->graph != graph) return CUDA_ERROR_INVALID_VALUE;
    /* The v1 struct ends before kern: read it only through the v2 entry. */
    CUfunction f = params->func;
    if (!f && v2) f = (CUfunction)params->kern;
    uint64_t duration;
    rc = sim_kernel_duration(f, params->kernelParams, params->extra, &duration);
    if (rc) return rc == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : rc;
    rc = check_dims(params->gridDimX, params->gridDimY, params->gridDimZ, params->blockDimX, params->blockDimY,
                    params->blockDimZ);
    if (rc) return rc;
    return graph_append(graph, &duration, 1, phNode);
}

CUresult sim_cuGraphAddKernelNode_v2(CUgraphNode *phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps,
                                     const CUDA_KERNEL_NODE_PARAMS *params) {
    return add_kernel_node(phNode, graph, deps, num_deps, params, true);
}
CU_EXPORT(cuGraphAddKernelNode_v2, (CUgraphNode * phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps,
                                    const CUDA_KERNEL_NODE_PARAMS *params));

CUresult sim_cuGraphAddKernelNode(CUgraphNode *phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps,
                                  const CUDA_KERNEL_NODE_PARAMS *params) {
    return add_kernel_node(phNode, graph, deps, num_deps, params, false);
}
CU_EXPORT(cuGraphAddKernelNode, (CUgraphNode * phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps,
                                 const CUDA_KERNEL_NODE_PARAMS *params));

CUresult sim_cuGraphGetNodes(CUgraph graph, CUgraphNode *nodes, size_t *num_nodes) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!graph || graph->tag != SIM_TAG_GRAPH || !num_nodes) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph->lock);
    if (nodes) {
        size_t n = *num_nodes < graph->count ? *num_nodes : graph->count;
        if (n) memcpy(nodes, graph->nodes, n * sizeof *nodes);
        *num_nodes = n;
    } else {
        *num_nodes = graph->count;
    }
    pthread_mutex_unlock(&graph->lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuGraphGetNodes, (CUgraph graph, CUgraphNode *nodes, size_t *num_nodes));

/* ---- graph memory -------------------------------------------------------
 * The process's graph memory pool on the device: alloc nodes take their
 * bytes from it at each launch (or upload) of their graph; memory a free
 * node in the same graph gives back stays reserved in the pool for the
 * next launch, and only cuDeviceGraphMemTrim returns what no graph uses to
 * the device. RESERVED is the pool's device footprint, USED what graphs'
 * allocations hold. Allocations a graph does not free stay used until
 * their exec is destroyed (a simplification: a real driver frees them
 * with cuMemFree / cuMemFreeAsync). */
static pthread_mutex_t graph_memory_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t graph_used, graph_used_high, graph_reserved, graph_reserved_high;

/* The pool grows by what its idle part cannot cover; used grows by the
 * allocations the launch keeps. A launch while the last one's kept
 * allocations are still held is refused (they must be freed first). */
static CUresult graph_memory_launch(struct CUgraphExec_st *exec, bool run) {
    if (!exec->mem_bytes) return CUDA_SUCCESS;
    pthread_mutex_lock(&graph_memory_lock);
    CUresult rc = CUDA_SUCCESS;
    uint64_t idle = graph_reserved - graph_used;
    uint64_t grow = exec->mem_bytes > idle ? exec->mem_bytes - idle : 0;
    if (run && exec->mem_held) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (grow && !sim_memory_reserve(sim_process.dev, sim_process.slot, grow)) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        graph_reserved += grow;
        if (graph_reserved > graph_reserved_high) graph_reserved_high = graph_reserved;
        uint64_t peak = graph_used + exec->mem_bytes;
        if (run && peak > graph_used_high) graph_used_high = peak;
        if (run) {
            graph_used += exec->mem_kept;
            exec->mem_held = exec->mem_kept;
        }
    }
    pthread_mutex_unlock(&graph_memory_lock);
    return rc;
}

static void graph_memory_unuse(uint64_t bytes) {
    pthread_mutex_lock(&graph_memory_lock);
    graph_used -= bytes < graph_used ? bytes : graph_used;
    pthread_mutex_unlock(&graph_memory_lock);
}

static CUresult check_graph_device(CUdevice dev) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult sim_cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value) {
    CUresult rc = check_graph_device(device);
    if (rc) return rc;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph_memory_lock);
    uint64_t v = attr == CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT       ? graph_used
                 : attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH        ? graph_used_high
                 : attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT ? graph_reserved
                                                                  : graph_reserved_high;
    pthread_mutex_unlock(&graph_memory_lock);
    if (attr < CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT || attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
        return CUDA_ERROR_INVALID_VALUE;
    *(cuuint64_t *)value = v;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceGetGraphMemAttribute, (CUdevice device, CUgraphMem_attribute attr, void *value));

/* Only the high watermarks can be set, and only to zero (reset to current). */
CUresult sim_cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value) {
    CUresult rc = check_graph_device(device);
    if (rc) return rc;
    if (!value || *(cuuint64_t *)value != 0 ||
        (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph_memory_lock);
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) graph_used_high = graph_used;
    else graph_reserved_high = graph_reserved;
    pthread_mutex_unlock(&graph_memory_lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceSetGraphMemAttribute, (CUdevice device, CUgraphMem_attribute attr, void *value));

/* Everything the pool holds beyond what graphs use goes back to the device. */
CUresult sim_cuDeviceGraphMemTrim(CUdevice device) {
    CUresult rc = check_graph_device(device);
    if (rc) return rc;
    pthread_mutex_lock(&graph_memory_lock);
    uint64_t idle = graph_reserved - graph_used;
    if (idle) sim_memory_release(sim_process.dev, sim_process.slot, idle);
    graph_reserved = graph_used;
    pthread_mutex_unlock(&graph_memory_lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuDeviceGraphMemTrim, (CUdevice device));

/* An alloc node's address is fixed when the node is made: a reserved
 * (inaccessible) address range of its size, so every graph allocation has
 * its own address. */
CUresult sim_graph_add_mem_alloc(CUgraph graph, size_t bytes, CUgraphNode *node_out, CUdeviceptr *dptr) {
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    void *range = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t none = 0;
    CUgraphNode node;
    CUresult rc = graph_append(graph, &none, 1, &node);
    if (rc) {
        munmap(range, bytes);
        return rc;
    }
    node->type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    node->bytes = bytes;
    node->dptr = (CUdeviceptr)(uintptr_t)range;
    *dptr = node->dptr;
    if (node_out) *node_out = node;
    return CUDA_SUCCESS;
}

/* A free node frees an allocation of an alloc node of the same graph,
 * once; anything else is refused (CUDA_ERROR_INVALID_VALUE). */
CUresult sim_graph_add_mem_free(CUgraph graph, CUdeviceptr dptr, CUgraphNode *node_out) {
    struct CUgraphNode_st *alloc = NULL;
    pthread_mutex_lock(&graph->lock);
    for (uint32_t i = 0; i < graph->count && !alloc; i++)
        if (graph->nodes[i]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && graph->nodes[i]->dptr == dptr)
            alloc = graph->nodes[i];
    bool ok = alloc && !alloc->freed;
    if (ok) alloc->freed = true;
    pthread_mutex_unlock(&graph->lock);
    if (!ok) return CUDA_ERROR_INVALID_VALUE;
    uint64_t none = 0;
    CUgraphNode node;
    CUresult rc = graph_append(graph, &none, 1, &node);
    if (rc) return rc;
    node->type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    node->dptr = dptr;
    if (node_out) *node_out = node;
    return CUDA_SUCCESS;
}

static CUresult check_node_args(CUgraphNode *phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!phNode || !graph || graph->tag != SIM_TAG_GRAPH || (num_deps && !deps)) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < num_deps; i++)
        if (!deps[i] || deps[i]->tag != SIM_TAG_NODE || deps[i]->graph != graph) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Pinned device memory only (the documented pool properties of a graph allocation). */
CUresult sim_cuGraphAddMemAllocNode(CUgraphNode *phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps,
                                    CUDA_MEM_ALLOC_NODE_PARAMS *params) {
    CUresult rc = check_node_args(phNode, graph, deps, num_deps);
    if (rc) return rc;
    if (!params || params->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        params->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE || params->poolProps.location.id != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_graph_add_mem_alloc(graph, params->bytesize, phNode, &params->dptr);
}
CU_EXPORT(cuGraphAddMemAllocNode, (CUgraphNode * phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps,
                                   CUDA_MEM_ALLOC_NODE_PARAMS *params));

CUresult sim_cuGraphAddMemFreeNode(CUgraphNode *phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps,
                                   CUdeviceptr dptr) {
    CUresult rc = check_node_args(phNode, graph, deps, num_deps);
    return rc ? rc : sim_graph_add_mem_free(graph, dptr, phNode);
}
CU_EXPORT(cuGraphAddMemFreeNode, (CUgraphNode * phNode, CUgraph graph, const CUgraphNode *deps, size_t num_deps,
                                  CUdeviceptr dptr));

CUresult sim_cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!node || node->tag != SIM_TAG_NODE || !type) return CUDA_ERROR_INVALID_VALUE;
    *type = node->type;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuGraphNodeGetType, (CUgraphNode node, CUgraphNodeType *type));

CUresult sim_cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *params_out) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!node || node->tag != SIM_TAG_NODE || node->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC || !params_out)
        return CUDA_ERROR_INVALID_VALUE;
    memset(params_out, 0, sizeof *params_out);
    params_out->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    params_out->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    params_out->bytesize = node->bytes;
    params_out->dptr = node->dptr;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuGraphMemAllocNodeGetParams, (CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *params_out));

static CUresult instantiate(CUgraphExec *phExec, CUgraph graph) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!phExec || !graph || graph->tag != SIM_TAG_GRAPH) return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *exec = calloc(1, sizeof *exec);
    if (!exec) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&graph->lock);
    exec->durations = malloc((graph->count ? graph->count : 1) * sizeof *exec->durations);
    for (uint32_t i = 0; exec->durations && i < graph->count; i++) {
        const struct CUgraphNode_st *n = graph->nodes[i];
        if (n->type == CU_GRAPH_NODE_TYPE_KERNEL) exec->durations[exec->count++] = graph->durations[i];
        if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            exec->mem_bytes += n->bytes;
            if (!n->freed) exec->mem_kept += n->bytes;
        }
    }
    pthread_mutex_unlock(&graph->lock);
    if (!exec->durations) {
        free(exec);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    exec->tag = SIM_TAG_EXEC;
    *phExec = exec;
    return CUDA_SUCCESS;
}

CUresult sim_cuGraphInstantiateWithFlags(CUgraphExec *phExec, CUgraph graph, unsigned long long flags) {
    (void)flags;
    return instantiate(phExec, graph);
}
CU_EXPORT(cuGraphInstantiateWithFlags, (CUgraphExec * phExec, CUgraph graph, unsigned long long flags));

/* The CUDA 10/11 forms, with an error node and a log buffer. */
CUresult sim_cuGraphInstantiate_v2(CUgraphExec *phExec, CUgraph graph, CUgraphNode *error_node, char *log,
                                   size_t log_size) {
    if (error_node) *error_node = NULL;
    if (log && log_size) log[0] = 0;
    return instantiate(phExec, graph);
}
CU_EXPORT(cuGraphInstantiate_v2, (CUgraphExec * phExec, CUgraph graph, CUgraphNode *error_node, char *log,
                                  size_t log_size));
CUresult sim_cuGraphInstantiate(CUgraphExec *phExec, CUgraph graph, CUgraphNode *error_node, char *log,
                                size_t log_size) {
    return sim_cuGraphInstantiate_v2(phExec, graph, error_node, log, log_size);
}
CU_EXPORT(cuGraphInstantiate, (CUgraphExec * phExec, CUgraph graph, CUgraphNode *error_node, char *log,
                               size_t log_size));

CUresult sim_cuGraphExecDestroy(CUgraphExec exec) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!exec || exec->tag != SIM_TAG_EXEC) return CUDA_ERROR_INVALID_VALUE;
    exec->tag = SIM_TAG_DEAD;
    graph_memory_unuse(exec->mem_held);
    free(exec->durations);
    free(exec);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuGraphExecDestroy, (CUgraphExec exec));

static CUresult graph_launch(CUgraphExec exec, CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!exec || exec->tag != SIM_TAG_EXEC) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    if (!sim_stream_capturing(s) && (rc = graph_memory_launch(exec, true))) return rc;
    /* The item owns a copy: the exec may be destroyed before it runs. */
    uint64_t *durations = malloc((exec->count ? exec->count : 1) * sizeof *durations);
    if (!durations) return CUDA_ERROR_OUT_OF_MEMORY;
    if (exec->count) memcpy(durations, exec->durations, exec->count * sizeof *durations);
    struct sim_stream_item item = {.kind = SIM_ITEM_GRAPH, .count = exec->count, .ptr = durations};
    return sim_stream_enqueue(s, &item); /* takes ownership of durations */
}
CUresult sim_cuGraphLaunch(CUgraphExec exec, CUstream hStream) { return graph_launch(exec, hStream, false); }
CU_EXPORT(cuGraphLaunch, (CUgraphExec exec, CUstream hStream));
CUresult sim_cuGraphLaunch_ptsz(CUgraphExec exec, CUstream hStream) { return graph_launch(exec, hStream, true); }
CU_EXPORT(cuGraphLaunch_ptsz, (CUgraphExec exec, CUstream hStream));

/* Upload puts the graph's memory in place (the pool grows) without running it. */
CUresult sim_cuGraphUpload(CUgraphExec exec, CUstream hStream) {
    (void)hStream;
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!exec || exec->tag != SIM_TAG_EXEC) return CUDA_ERROR_INVALID_VALUE;
    return graph_memory_launch(exec, false);
}
CU_EXPORT(cuGraphUpload, (CUgraphExec exec, CUstream hStream));
CUresult sim_cuGraphUpload_ptsz(CUgraphExec exec, CUstream hStream) { return sim_cuGraphUpload(exec, hStream); }
CU_EXPORT(cuGraphUpload_ptsz, (CUgraphExec exec, CUstream hStream));
