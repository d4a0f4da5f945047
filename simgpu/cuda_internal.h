/* What the parts of the simulated libcuda.so.1 share with each other. */
#ifndef GSLICE_SIM_CUDA_INTERNAL_H
#define GSLICE_SIM_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gslice_cuda_abi.h"
#include "sim_device.h"

/* Every driver entry point is written as a hidden function sim_<name> and
 * exported under <name> as an alias. cuGetProcAddress hands out the
 * address of the hidden function, which a preloaded shim cannot interpose,
 * exactly as the real driver hands out its own addresses. */
#define CU_EXPORT(name, params) \
    CUresult name params __attribute__((visibility("default"), alias("sim_" #name)))

/* Handles carry a tag so a stale or foreign handle is refused with
 * CUDA_ERROR_INVALID_HANDLE instead of crashing. */
enum sim_handle_tag {
    SIM_TAG_CONTEXT = 0x43545831,  /* CTX1 */
    SIM_TAG_STREAM = 0x5354524d,   /* STRM */
    SIM_TAG_EVENT = 0x45564e54,    /* EVNT */
    SIM_TAG_MODULE = 0x4d4f4455,   /* MODU */
    SIM_TAG_FUNCTION = 0x46554e43, /* FUNC */
    SIM_TAG_GRAPH = 0x47525048,    /* GRPH */
    SIM_TAG_NODE = 0x4e4f4445,     /* NODE */
    SIM_TAG_EXEC = 0x45584543,     /* EXEC */
    SIM_TAG_ARRAY = 0x41525259,    /* ARRY */
    SIM_TAG_VMM = 0x564d4d48,      /* VMMH */
    SIM_TAG_POOL = 0x504f4f4c,     /* POOL */
    SIM_TAG_DEAD = 0x44454144,     /* DEAD: destroyed */
};

/* ---- process state (cuda_context.c) ---- */
struct sim_cuda_process {
    struct sim_device_shared *dev;
    struct sim_process_slot *slot;
    uint64_t default_kernel_ns; /* GSLICE_SIM_KERNEL_US, for kernels other than gslice_sim_sleep */
    uint64_t context_memory;    /* GSLICE_SIM_CONTEXT_MEMORY: each context's hidden device memory */
    uint64_t module_load_memory; /* GSLICE_SIM_MODULE_LOAD_MEMORY: each distinct function's first launch */
    int pid;
    bool initialised;
};
extern struct sim_cuda_process sim_process;

struct CUctx_st {
    uint32_t tag;
    bool primary;
    unsigned int flags;
    uint64_t lazy_loaded;   /* device memory its first launches took (GSLICE_SIM_MODULE_LOAD_MEMORY) */
};

/* CUDA_ERROR_NOT_INITIALIZED before cuInit. */
CUresult sim_require_init(void);
/* sim_require_init, then CUDA_ERROR_INVALID_CONTEXT if the calling thread
 * has no current context (as on the real driver). */
CUresult sim_require_context(void);
CUcontext sim_current_context(void);
/* Before a launch of function in the current context: its first launch
 * there takes GSLICE_SIM_MODULE_LOAD_MEMORY (lazy module loading). */
CUresult sim_context_lazy_load(const void *function);

/* ---- streams and events (cuda_streams.c) ---- */
enum sim_item_kind {
    SIM_ITEM_KERNEL,       /* duration_ns on the engine */
    SIM_ITEM_GRAPH,        /* count kernels, durations in ptr (freed after) */
    SIM_ITEM_EVENT_RECORD, /* event ptr reaches generation gen */
    SIM_ITEM_WAIT_EVENT,   /* wait until event ptr reaches generation gen */
    SIM_ITEM_FREE,         /* stream-ordered free of device pointer ptr */
    SIM_ITEM_HOST_FUNC,    /* call ptr(arg) */
    SIM_ITEM_COPY,         /* copy/fill time: duration_ns, on the engine when count is 1 */
};

struct sim_stream_item {
    uint32_t kind;
    uint32_t count;
    uint64_t duration_ns;
    uint64_t gen;
    uint64_t enqueued_ns; /* set by sim_stream_enqueue: the earliest the item may start (stream time) */
    void *ptr;
    void *arg;
};

struct CUstream_st; /* defined in cuda_streams.c */

/* Map a handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD or a created
 * stream) to a stream; per_thread_default says NULL means the calling
 * thread's default stream (the _ptsz entry points). */
CUresult sim_stream_resolve(CUstream handle, bool per_thread_default, struct CUstream_st **out);
/* Queue an item; blocks while the stream has SIM_STREAM_DEPTH pending. While
 * the stream is capturing, kernels and graphs go into the capture graph.
 * Owns a SIM_ITEM_GRAPH item's durations array from then on, even on error. */
CUresult sim_stream_enqueue(struct CUstream_st *stream, const struct sim_stream_item *item);
CUresult sim_stream_synchronize(struct CUstream_st *stream);
bool sim_stream_capturing(struct CUstream_st *stream);
/* Wait for everything queued so far on all of the process's streams. */
void sim_streams_synchronize_all(void);

/* Stream capture rules (cuda_streams.c). Any capture active in the process? */
bool sim_capture_active(void);
/* Before a "potentially unsafe" call (context/legacy-stream synchronise,
 * event query/wait, synchronous allocation): CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 * when the calling thread's capture mode prohibits it, after invalidating
 * the captures that prohibit it. */
CUresult sim_capture_check_unsafe(void);

/* ---- kernels and graphs (cuda_launch.c) ---- */
/* The duration a launch of f with these parameters occupies the engine. */
CUresult sim_kernel_duration(CUfunction f, void **kernel_params, void **extra, uint64_t *duration_ns);
/* Capture support: append kernels to a graph being captured. */
CUresult sim_graph_append_kernels(CUgraph graph, const uint64_t *durations, uint32_t count);
CUresult sim_graph_new(CUgraph *out);
/* Graph memory nodes (cuMemAllocAsync / cuMemFreeAsync into a capturing
 * stream become these): the alloc node's address goes to *dptr. */
CUresult sim_graph_add_mem_alloc(CUgraph graph, size_t bytes, CUgraphNode *node_out, CUdeviceptr *dptr);
CUresult sim_graph_add_mem_free(CUgraph graph, CUdeviceptr dptr, CUgraphNode *node_out);
/* The graph a stream is capturing into, or NULL. */
CUgraph sim_stream_capture_graph(struct CUstream_st *stream);
bool sim_graph_live(CUgraph graph);
CUresult sim_cuGraphDestroy(CUgraph graph);

/* ---- memory (cuda_memory.c) ---- */
/* Free a device allocation (used by stream-ordered frees). */
CUresult sim_memory_free(CUdeviceptr ptr);
/* Free every device allocation made while ctx was current (context
 * destroy, primary context reset or last release). */
void sim_memory_free_context(CUcontext ctx);
/* A synchronisation point: pools release memory above their threshold. */
void sim_pools_release_at_sync(void);

#endif
