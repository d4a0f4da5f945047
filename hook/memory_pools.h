/* memory_pools: stream-ordered pools (cuMemAllocAsync, CUDA's default and
 * explicit pools) are charged by what they really hold: the pool's
 * CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, not its live blocks. A block freed
 * with cuMemFreeAsync stays in the pool (up to its release threshold; RMM
 * and PyTorch's cudaMallocAsync backend keep everything), so it stays
 * charged until the pool gives the memory back (a synchronisation above the
 * threshold, cuMemPoolTrimTo). The charge follows the pool's footprint at
 * every pool operation and memory query ("releasing late is safe").
 *
 * Graph memory (mem alloc nodes, and cuMemAllocAsync in a capturing
 * stream) comes from the device's graph memory pool when a graph is
 * launched or uploaded, and stays there after the graph frees it until
 * cuDeviceGraphMemTrim. The same mechanism charges that pool by its
 * footprint, cuDeviceGetGraphMemAttribute(RESERVED_MEM_CURRENT): the growth
 * a launch needs before the launch (refused when over the quota), the real
 * footprint after it, at trim and at every memory query.
 *
 * Every pool in use is followed, however many (a destroyed pool is
 * forgotten). Only when host memory to follow one more runs out is an
 * allocation from it refused (CUDA_ERROR_OUT_OF_MEMORY, one warning):
 * charged per allocation instead, its charge could only go at its
 * cuMemFreeAsync, while the pool may keep the block. */
#ifndef GSLICE_MEMORY_POOLS_H
#define GSLICE_MEMORY_POOLS_H

#include <stdbool.h>
#include <stdint.h>

#include "gslice_cuda_abi.h"

struct gs_ledger_account;

/* The pool a cuMemAllocAsync in the current context draws from. */
CUmemoryPool gs_pool_current(void);

/* A call that takes bytes from a footprint (cuMemAllocAsync, a graph
 * launch), between its charge and the driver's answer: the pool has not
 * grown yet, so a reconciliation on another thread must not give the
 * growth back, and another call's growth must not count on the idle bytes
 * this one takes. Filled by the charge; hand it to gs_pool_growth_done
 * after the real call, whatever its result. */
typedef struct gs_pool_growth {
    CUmemoryPool pool;      /* the footprint: a stream-ordered pool, or NULL and ... */
    CUdevice graph_dev;     /* ... the device whose graph memory pool it is */
    uint64_t bytes;         /* what the call takes from the pool */
    uint64_t growth;        /* what the pool must grow by for it */
    bool in_flight;         /* counted in the footprint's in-flight figures */
    bool charged;           /* growth is reserved at tokend (part of the footprint's charge) */
} gs_pool_growth;

/* Before an allocation of bytes from pool: charge what the pool must grow
 * by. False: over the quota, or the pool cannot be followed (answer
 * CUDA_ERROR_OUT_OF_MEMORY). */
bool gs_pool_charge_growth(struct gs_ledger_account *account, CUmemoryPool pool, uint64_t bytes,
                           gs_pool_growth *growth);
/* After the real call (cuMemAllocAsync, graph launch / upload): the call
 * is no longer in flight; every known footprint is reconciled. */
void gs_pool_growth_done(const gs_pool_growth *growth);
/* After any pool operation or before a memory query: every known pool's
 * charge follows its footprint. Never waits for an unreachable tokend. */
void gs_pools_reconcile(void);

/* cuMemPoolDestroy: before the real call, what the pool still has
 * allocated (cuda.h: with blocks outstanding the driver keeps the pool's
 * memory until they are freed); after its success, the pool is forgotten
 * and its charge given back, or, with blocks outstanding, kept. */
uint64_t gs_pool_before_destroy(CUmemoryPool pool);
void gs_pool_destroyed(CUmemoryPool pool, uint64_t outstanding);
/* Graph memory: after cuGraphInstantiate*, remember what the exec's alloc
 * nodes take per launch (on the current context's device). */
void gs_graph_memory_instantiated(struct gs_ledger_account *account, CUgraphExec exec, CUgraph graph);
/* Before a launch / upload of exec: charge the graph pool's growth. False:
 * over the quota, or the graph pool cannot be followed (answer
 * CUDA_ERROR_OUT_OF_MEMORY). Hand growth to gs_pool_growth_done after the
 * real call. */
bool gs_graph_memory_charge(CUgraphExec exec, gs_pool_growth *growth);
/* cuGraphExecDestroy. */
void gs_graph_memory_forget(CUgraphExec exec);
/* Follow the current device's graph memory pool from now on (memory
 * queries call it): graphs instantiated by a route the table does not see
 * are charged by the pool's footprint at the next query. */
void gs_graph_pool_watch(struct gs_ledger_account *account);
/* How many execs with graph memory are known (__atomic, relaxed load): the
 * graph launch wrappers take their slow path while it is not 0. */
extern int gs_graph_memory_execs;
/* fork(): the child has no pools. */
void gs_pools_fork_child(void);

#endif
