/* memory_pools: stream-ordered pools (cuMemAllocAsync, CUDA's default and
 * explicit pools) are charged by what they really hold: the pool's
 * CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, not its live blocks. A block freed
 * with cuMemFreeAsync stays in the pool (up to its release threshold; RMM
 * and PyTorch's cudaMallocAsync backend keep everything), so it stays
 * charged until the pool gives the memory back (a synchronisation above the
 * threshold, cuMemPoolTrimTo). The charge follows the pool's footprint at
 * every pool operation and memory query ("releasing late is safe"). */
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
/* fork(): the child has no pools. */
void gs_pools_fork_child(void);

#endif
