/* device_slot: creating and finding the per-GPU tokend connections. */
#define _GNU_SOURCE
#include "device_slot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "real_driver.h"

static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static gs_slot *slots[GS_MAX_SLOTS];
static _Atomic int slot_count;
/* CUDA ordinal -> slot, filled on first sight (multi-socket mode). */
static gs_slot *_Atomic slot_by_ordinal[GS_MAX_DEVICE_ORDINALS];

/* ---- rpc callbacks (I/O thread: short, no gs_rpc_* calls) ---- */

static void on_revoke(void *ctx, uint64_t token_id, const char *reason, bool lease_reclaim)
{
    gs_slot *s = ctx;
    GS_DEBUG("tokend revoked token %llu (%s)", (unsigned long long)token_id, reason ? reason : "");
    gs_gate_on_revoke(&s->gate, token_id, !lease_reclaim);
}

static void on_quota_changed(void *ctx, uint64_t quota)
{
    gs_slot *s = ctx;
    pthread_mutex_lock(&s->ledger.mu);
    s->ledger.view_valid = false;
    pthread_mutex_unlock(&s->ledger.mu);
    pthread_mutex_lock(&s->info_mu);
    s->info.memory_quota = quota;
    pthread_mutex_unlock(&s->info_mu);
    GS_INFO("group memory quota is now %llu bytes", (unsigned long long)quota);
}

static void on_attached(void *ctx, const gs_attach_info *info, bool reconnect)
{
    gs_slot *s = ctx;
    gs_config_set_daemon_loss(info->on_daemon_loss);  /* the operator's, before any later loss */
    pthread_mutex_lock(&s->info_mu);
    s->info = *info;
    s->attached = true;
    /* A forked child's first attach is a new client, not a reconnect. */
    bool forked = s->first_attach_after_fork;
    s->first_attach_after_fork = false;
    pthread_mutex_unlock(&s->info_mu);
    /* A restarted tokend may number groups differently: take the slot anew. */
    gs_gate_attach_doorbell(&s->gate, s->socket_path, info->doorbell_slot, info->doorbell_client, info->priority);
    if (reconnect && !forked) {
        GS_WARN("re-attached to tokend at %s as a new client of group %s; any token was dropped",
                s->socket_path, info->group);
        gs_gate_on_connection_lost(&s->gate);
    } else {
        GS_INFO("attached to tokend at %s: group %s, gpu %s, memory quota %llu bytes; calls on %s", s->socket_path,
                info->group, info->gpu_uuid, (unsigned long long)info->memory_quota, info->calls_transport);
    }
    if (info->lease_at_start)
        gs_gate_lease_at_start(&s->gate);
}

static void on_disconnected(void *ctx)
{
    gs_slot *s = ctx;
    GS_INFO("connection to tokend at %s lost", s->socket_path);
    gs_gate_on_connection_lost(&s->gate);
}

static uint64_t reserved_bytes(void *ctx)
{
    gs_slot *s = ctx;
    return gs_ledger_redeclare(&s->ledger);
}

static void flush_service(void *ctx) { gs_ledger_flush(ctx); }

/* ---- creation ---- */

static gs_slot *find_by_uuid_locked(const char *uuid)
{
    int n = atomic_load(&slot_count);
    for (int i = 0; i < n; i++)
        if (!strcmp(slots[i]->gpu_uuid, uuid))
            return slots[i];
    return NULL;
}

static gs_slot *create_slot_locked(const char *uuid)
{
    const gs_config *cfg = gs_config_get();
    int n = atomic_load(&slot_count);
    if (n >= GS_MAX_SLOTS) {
        GS_ERROR("more than %d GPUs in one process; GPU %s passes through unmetered", GS_MAX_SLOTS, uuid);
        return NULL;
    }
    gs_slot *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->index = n;
    snprintf(s->gpu_uuid, sizeof s->gpu_uuid, "%s", uuid);
    if (cfg->socket_dir[0] && uuid[0])
        snprintf(s->socket_path, sizeof s->socket_path, "%s/%s/client.sock", cfg->socket_dir, uuid);
    else
        snprintf(s->socket_path, sizeof s->socket_path, "%s", cfg->socket_path);
    pthread_mutex_init(&s->info_mu, NULL);
    gs_gate_init(&s->gate, NULL, s->socket_path, flush_service, &s->ledger);
    gs_ledger_account_init(&s->ledger, NULL, &s->gate, s->socket_path);
    gs_overhead_init(&s->overhead);

    gs_rpc_config rc = {
        .socket_path = s->socket_path,
        .group = cfg->group,
        .secret = cfg->secret,
        .gpu_uuid = s->gpu_uuid,
        .process_name = program_invocation_short_name,
        .on_revoke = on_revoke,
        .on_quota_changed = on_quota_changed,
        .on_attached = on_attached,
        .on_disconnected = on_disconnected,
        .reserved_bytes = reserved_bytes,
        .ctx = s,
        .unary_calls_only = !cfg->calls_stream,
        .no_calls_socket = !cfg->calls_socket,
    };
    s->rpc = gs_rpc_start(&rc);
    if (!s->rpc) {
        GS_ERROR("cannot start the tokend client for %s (out of memory or threads); this GPU passes "
                 "through unmetered", s->socket_path);
        free(s);
        return NULL;
    }
    s->gate.rpc = s->rpc;
    s->ledger.rpc = s->rpc;
    slots[n] = s;
    atomic_store(&slot_count, n + 1);
    /* One slot: the inline fast path reads its gate. Two or more: the
     * fast path always misses and the slow path looks up per launch. */
    __atomic_store_n(&gs_fast_gate, n == 0 ? &s->gate : &gs_gate_closed, __ATOMIC_RELEASE);
    GS_DEBUG("tokend client for gpu '%s' on %s started", uuid, s->socket_path);
    return s;
}

static void restart_if_forked_locked(gs_slot *s)
{
    if (s && s->restart_after_fork) {
        s->restart_after_fork = false;
        s->first_attach_after_fork = true;
        gs_rpc_after_fork_child(s->rpc);
    }
}

static gs_slot *slot_for_uuid(const char *uuid)
{
    pthread_mutex_lock(&slots_mu);
    gs_slot *s = find_by_uuid_locked(uuid);
    if (!s)
        s = create_slot_locked(uuid);
    restart_if_forked_locked(s);
    pthread_mutex_unlock(&slots_mu);
    return s;
}

static bool single_socket_mode(void) { return gs_config_get()->socket_dir[0] == 0; }

static void format_uuid(const unsigned char u[16], char out[96])
{
    snprintf(out, 96, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

gs_slot *gs_slot_for_device(CUdevice dev)
{
    if (single_socket_mode()) {
        gs_slot *s = atomic_load(&slot_count) ? slots[0] : NULL;
        if (s && !s->restart_after_fork)
            return s;
        return slot_for_uuid("");
    }
    if (dev >= 0 && dev < GS_MAX_DEVICE_ORDINALS) {
        gs_slot *s = atomic_load_explicit(&slot_by_ordinal[dev], memory_order_acquire);
        if (s && !s->restart_after_fork)
            return s;
    }
    unsigned char raw[16];
    char uuid[96];
    if (!gs_cu.cuDeviceGetUuid || gs_cu.cuDeviceGetUuid(raw, dev) != CUDA_SUCCESS) {
        GS_WARN("cannot read the UUID of CUDA device %d; with GSLICE_SOCKET_DIR set it passes through "
                "unmetered", dev);
        return NULL;
    }
    format_uuid(raw, uuid);
    gs_slot *s = slot_for_uuid(uuid);
    if (s && dev >= 0 && dev < GS_MAX_DEVICE_ORDINALS)
        atomic_store_explicit(&slot_by_ordinal[dev], s, memory_order_release);
    return s;
}

gs_slot *gs_slot_for_current_context(CUcontext *ctx)
{
    CUcontext cur = NULL;
    if (gs_cu.cuCtxGetCurrent)
        gs_cu.cuCtxGetCurrent(&cur);
    if (ctx)
        *ctx = cur;
    if (single_socket_mode())
        return gs_slot_for_device(0);
    CUdevice dev = 0;
    if (!cur || !gs_cu.cuCtxGetDevice || gs_cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return NULL;
    return gs_slot_for_device(dev);
}

/* Single socket: the daemon's GPU is the device whose UUID the daemon
 * reported; when no visible device has that UUID (a fake GPU, renamed
 * devices), the first device stands for it. Other devices show the
 * physical numbers, never the quota. */
static bool is_daemons_gpu(gs_slot *s, nvmlDevice_t dev)
{
    char daemon_uuid[96], uuid[96] = {0};
    pthread_mutex_lock(&s->info_mu);
    snprintf(daemon_uuid, sizeof daemon_uuid, "%s", s->attached ? s->info.gpu_uuid : "");
    pthread_mutex_unlock(&s->info_mu);
    if (!daemon_uuid[0] || !gs_nvml.nvmlDeviceGetUUID || !gs_nvml.nvmlDeviceGetCount ||
        !gs_nvml.nvmlDeviceGetHandleByIndex)
        return true;
    if (gs_nvml.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) == NVML_SUCCESS && !strcmp(uuid, daemon_uuid))
        return true;
    unsigned int n = 0;
    nvmlDevice_t first = NULL;
    if (gs_nvml.nvmlDeviceGetCount(&n) != NVML_SUCCESS)
        return true;
    for (unsigned int i = 0; i < n; i++) {
        nvmlDevice_t other;
        char other_uuid[96] = {0};
        if (gs_nvml.nvmlDeviceGetHandleByIndex(i, &other) != NVML_SUCCESS)
            continue;
        if (!first)
            first = other;
        if (gs_nvml.nvmlDeviceGetUUID(other, other_uuid, sizeof other_uuid) == NVML_SUCCESS &&
            !strcmp(other_uuid, daemon_uuid))
            return false;   /* another visible device is the daemon's */
    }
    return dev == first;
}

gs_slot *gs_slot_for_nvml_device(nvmlDevice_t dev)
{
    if (single_socket_mode()) {
        gs_slot *s = gs_slot_for_device(0);
        return s && is_daemons_gpu(s, dev) ? s : NULL;
    }
    char uuid[96] = {0};
    if (!gs_nvml.nvmlDeviceGetUUID || gs_nvml.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) != NVML_SUCCESS)
        return NULL;
    return slot_for_uuid(uuid);
}

bool gs_slot_serves_nvml_device(gs_slot *s, nvmlDevice_t dev)
{
    if (!s)
        return false;
    if (single_socket_mode())
        return is_daemons_gpu(s, dev);
    char uuid[96] = {0};
    return gs_nvml.nvmlDeviceGetUUID && gs_nvml.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) == NVML_SUCCESS &&
           !strcmp(uuid, s->gpu_uuid);
}

int gs_slot_count(void) { return atomic_load(&slot_count); }
gs_slot *gs_slot_at(int index) { return index >= 0 && index < gs_slot_count() ? slots[index] : NULL; }

void gs_slots_fork_prepare(void)
{
    pthread_mutex_lock(&slots_mu);
    int n = atomic_load(&slot_count);
    for (int i = 0; i < n; i++)
        gs_rpc_fork_prepare(slots[i]->rpc);
    for (int i = 0; i < n; i++)
        gs_gate_fork_prepare(&slots[i]->gate);
}

void gs_slots_fork_parent(void)
{
    int n = atomic_load(&slot_count);
    for (int i = 0; i < n; i++)
        gs_gate_fork_parent(&slots[i]->gate);
    for (int i = 0; i < n; i++)
        gs_rpc_fork_parent(slots[i]->rpc);
    pthread_mutex_unlock(&slots_mu);
}

void gs_slots_fork_child(void)
{
    int n = atomic_load(&slot_count);
    for (int i = 0; i < n; i++) {
        gs_slot *s = slots[i];
        gs_rpc_fork_child(s->rpc);
        gs_gate_fork_child(&s->gate);
        gs_ledger_account_fork_child(&s->ledger);
        pthread_mutex_init(&s->info_mu, NULL);
        s->attached = false;
        s->restart_after_fork = true;
    }
    for (int d = 0; d < GS_MAX_DEVICE_ORDINALS; d++)
        atomic_store(&slot_by_ordinal[d], NULL);
    /* The child's first launch goes to the slow path (gates are closed). */
    __atomic_store_n(&gs_fast_gate, n == 1 ? &slots[0]->gate : &gs_gate_closed, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&slots_mu);
}

void gs_slots_shutdown(void)
{
    pthread_mutex_lock(&slots_mu);
    int n = atomic_load(&slot_count);
    for (int i = 0; i < n; i++) {
        gs_slot *s = slots[i];
        /* A forked child that never used CUDA holds its parent's
         * connection: leave it alone (Detach would end the parent's client). */
        if (s->restart_after_fork)
            continue;
        gs_gate_stop(&s->gate);
        /* Detach returns the token and every byte this client holds, so
         * pending releases need no RPC of their own. */
        gs_rpc_stop(s->rpc);
    }
    pthread_mutex_unlock(&slots_mu);
}
