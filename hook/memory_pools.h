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
 * footprint after it, at trim and at every memory query. */
#ifndef GSLICE_MEMORY_POOLS_H
#define GSLICE_MEMORY_POOLS_H

#include <stdbool.h>
#include <stdint.h>

#include "gslice_cuda_abi.h"

struct gs_ledger_account;

/* The pool a cuMemAllocAsync in the current context draws from. */
CUmemoryPool gs_pool_current(void);
/* Before an allocation of bytes from pool: charge what the pool must grow
 * by. False: over the quota (answer CUDA_ERROR_OUT_OF_MEMORY). */
bool gs_pool_charge_growth(struct gs_ledger_account *account, CUmemoryPool pool, uint64_t bytes);
/* After any pool operation or before a memory query: every known pool's
 * charge follows its footprint. */
void gs_pools_reconcile(void);
/* Graph memory: after cuGraphInstantiate*, remember what the exec's alloc
 * nodes take per launch (on the current context's device). */
void gs_graph_memory_instantiated(struct gs_ledger_account *account, CUgraphExec exec, CUgraph graph);
/* Before a launch / upload of exec: charge the graph pool's growth. False:
 * over the quota (answer CUDA_ERROR_OUT_OF_MEMORY). */
bool gs_graph_memory_charge(CUgraphExec exec);
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
