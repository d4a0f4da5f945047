/* shim: lifecycle (lazy init, fork, exit) and the launch slow path glue
 * between the exported wrappers and the token gate / memory ledger. */
#ifndef GSLICE_SHIM_H
#define GSLICE_SHIM_H

#include <stdbool.h>

#include "device_slot.h"
#include "token_gate.h"

#define GS_EXPORT __attribute__((visibility("default")))

/* First use: read the config, register fork handlers. True when this
 * process is metered (GSLICE_GROUP set, GSLICE_DISABLE not). Never
 * connects or starts threads by itself. */
bool gs_shim_metered(void);

/* Launch slow path: waits for a token; decides on a checkpoint. A launch
 * into a capturing stream passes at once (nothing runs: not gated, not
 * charged, no checkpoint). */
void gs_launch_begin(gs_launch_ticket *t, CUstream stream, int ptsz, const void *work) __attribute__((noinline, cold));
void gs_launch_end(gs_launch_ticket *t, CUstream stream, int ptsz, CUresult rc)
    __attribute__((noinline, cold));

/* fork(): forget this process's primary-context retains (overrides.c). */
void gs_contexts_fork_child(void);

/* The memory account for an allocation in the current context (returned
 * in *ctx when not NULL); NULL when not metered. */
gs_slot *gs_shim_slot_for_allocation(CUcontext *ctx);

#endif
