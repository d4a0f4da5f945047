/* process_overhead: device memory a process holds that no allocation call
 * shows (context state, module code loaded lazily by cuBLAS/cuDNN/Triton,
 * device heap and stacks from cuCtxSetLimit). Two layers:
 *  - a documented reserve per context (GSLICE_CONTEXT_RESERVE_MIB, default
 *    512 MiB), charged before the context is made (overrides.c);
 *  - reconciliation against NVML's per-process used memory on the
 *    daemon's GPU: when the driver says this process uses more than the
 *    shim charged, the difference is charged too (and given back when the
 *    process's use drops again). Run at context creation and at memory
 *    queries, never on the launch path. */
#ifndef GSLICE_PROCESS_OVERHEAD_H
#define GSLICE_PROCESS_OVERHEAD_H

struct gs_slot;

void gs_overhead_reconcile(struct gs_slot *slot);
/* fork(): the child has charged nothing yet. */
void gs_overhead_fork_child(void);

#endif
