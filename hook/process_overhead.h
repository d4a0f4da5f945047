/* process_overhead: device memory a process holds that no allocation call
 * shows (context state, module code loaded lazily at a kernel's first
 * launch, cuBLAS/cuDNN handles, device heap and stacks from cuCtxSetLimit,
 * pool bookkeeping). The quota promises that the process's footprint as
 * the driver sees it (NVML's per-process used memory) stays within the
 * group's quota. Three layers:
 *  - a documented reserve per context (GSLICE_CONTEXT_RESERVE_MIB, default
 *    512 MiB), charged before the context is made (overrides.c): the
 *    budget for this hidden memory while it is smaller;
 *  - reconciliation against NVML's per-process used memory on the
 *    daemon's GPU: once the hidden memory (NVML's figure minus the
 *    allocations charged) plus GSLICE_CONTEXT_GROWTH_MARGIN_MIB (default
 *    64 MiB) exceeds the context reserves, the difference is charged too
 *    (and given back when the process's use drops again; not while an
 *    allocation or free under way may be what NVML does not show yet:
 *    gs_ledger_account.in_flight). One charge per slot (GPU);
 *  - reconciliation runs before every allocation's reservation (rate
 *    limited, see gs_overhead_before_reserve), so growth the driver made
 *    since the last one is charged first, and an allocation is refused
 *    when that growth does not fit the quota. Also at context creation and
 *    memory queries; never on the launch path.
 * What can still exceed the quota: growth after the last reconciliation
 * beyond the margin (a process that fills its quota, then launches new
 * kernels whose modules take more than the margin), and growth that was
 * found but could not be charged (the allocation that found it is refused;
 * the memory is already the driver's). */
#ifndef GSLICE_PROCESS_OVERHEAD_H
#define GSLICE_PROCESS_OVERHEAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct gs_slot;

/* One slot's charge for this memory (each GPU's tokend has its own). */
typedef struct gs_overhead {
    pthread_mutex_t mu;          /* one reconciliation at a time (it may reserve: an RPC) */
    uint64_t charged;            /* charged beyond the ledger's own entries */
    uint64_t last_reconcile_ns;  /* __atomic: when NVML was last asked (0: never) */
} gs_overhead;

/* A new slot's (device_slot.c). */
void gs_overhead_init(gs_overhead *o);

/* Charge (or give back) the difference between NVML's per-process used
 * memory (plus the margin) and what the ledger holds. False when growth was
 * found that could not be charged (no room in the group's quota, or tokend
 * away): it stays uncharged. True otherwise, including when NVML cannot say. */
bool gs_overhead_reconcile(struct gs_slot *slot);
/* Before reserving bytes for an allocation on slot (what: the entry point,
 * for the log line): reconcile first when the last reconciliation is older
 * than GS_OVERHEAD_RECONCILE_INTERVAL_MS (GS_OVERHEAD_NEAR_QUOTA_INTERVAL_US
 * when the group's room after this allocation is below
 * GS_OVERHEAD_NEAR_QUOTA_MIB). False: answer
 * CUDA_ERROR_OUT_OF_MEMORY (logged). */
bool gs_overhead_before_reserve(struct gs_slot *slot, uint64_t bytes, const char *what);
/* fork(): the child has charged nothing yet (every slot's). */
void gs_overhead_fork_child(void);

#endif
