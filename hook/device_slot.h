/* device_slot: one tokend connection per GPU this process uses.
 *
 * A slot is the rpc client + token gate + memory account that serve one
 * GPU's tokend. Without GSLICE_SOCKET_DIR there is one slot, on
 * GSLICE_SOCKET, serving whatever GPU the process uses (the common case:
 * one GPU per container). With GSLICE_SOCKET_DIR each GPU gets the slot
 * for <dir>/<gpu-uuid>/client.sock, found from the launch's context
 * (cuCtxGetDevice + cuDeviceGetUuid) or NVML's device UUID. Slots are
 * created on first use and live until exit. */
#ifndef GSLICE_DEVICE_SLOT_H
#define GSLICE_DEVICE_SLOT_H

#include <pthread.h>
#include <stdbool.h>

#include "gslice_cuda_abi.h"
#include "gslice_nvml_abi.h"
#include "memory_ledger.h"
#include "process_overhead.h"
#include "rpc_client.h"
#include "token_gate.h"

#define GS_MAX_SLOTS 16
#define GS_MAX_DEVICE_ORDINALS 64

typedef struct gs_slot {
    int index;
    char gpu_uuid[96];       /* "" in single-socket mode */
    char socket_path[512];
    gs_rpc *rpc;
    gs_gate gate;
    gs_ledger_account ledger;
    gs_overhead overhead;    /* memory beyond allocations charged on ledger (process_overhead.h) */
    pthread_mutex_t info_mu;
    gs_attach_info info;
    bool attached;
    bool restart_after_fork; /* forked child: new connection on first use */
    bool first_attach_after_fork;
} gs_slot;

/* The slot serving the current context's device (created on first use);
 * *ctx gets the current context. NULL when no context is current or the
 * slot cannot be made (the call then passes through, logged). */
gs_slot *gs_slot_for_current_context(CUcontext *ctx);
gs_slot *gs_slot_for_device(CUdevice dev);
gs_slot *gs_slot_for_nvml_device(nvmlDevice_t dev);
/* Whether s serves NVML's device dev (a look-up: makes no slot). */
bool gs_slot_serves_nvml_device(gs_slot *s, nvmlDevice_t dev);

int gs_slot_count(void);
gs_slot *gs_slot_at(int index);

void gs_slots_fork_prepare(void);
void gs_slots_fork_parent(void);
void gs_slots_fork_child(void);
/* Process exit: stop keepers and detach (frees the token and memory). */
void gs_slots_shutdown(void);

#endif
