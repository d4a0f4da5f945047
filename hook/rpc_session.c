/* rpc_session: a connection's session with tokend (see rpc_internal.h):
 * the Attach request, its reply, and the events on Control (Ready ends the
 * attach; Revoke and quota changes go to the shim's callbacks). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <pb.h>

#include "gslice/v1/client.pb.h"

#pragma GCC visibility push(hidden)
/* Messages are composed into fixed buffers; cutting a long one short is intended. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "rpc_internal.h"

/* Sends Attach, the connection's first call: who we are, and the memory
 * this process holds already (after a reconnect). */
void rpc_start_attach(gs_rpc *rpc, int wait_ms)
{
    rpc_call *attach = rpc_call_new(M_ATTACH, true);
    if (!attach) {
        rpc_mark_broken(rpc, false, "out of memory for Attach");
        return;
    }
    gslice_v1_AttachRequest *req = &attach->request.attach;
    snprintf(req->group, sizeof req->group, "%s", rpc->cfg.group);
    snprintf(req->secret, sizeof req->secret, "%s", rpc->cfg.secret);
    snprintf(req->gpu_uuid, sizeof req->gpu_uuid, "%s", rpc->cfg.gpu_uuid);
    snprintf(req->process_name, sizeof req->process_name, "%s", rpc->cfg.process_name);
    req->pid = (uint32_t)getpid();
    req->reserved_bytes = rpc->cfg.reserved_bytes ? rpc->cfg.reserved_bytes(rpc->cfg.ctx) : 0;
    req->protocol_version = 1;
    attach->wait_ms = wait_ms;
    rpc_start_internal(rpc, attach);
}

/* An Attach refused so will not succeed soon: retry slowly, and tell
 * whoever waits for the attach at once. */
static bool refused_status(int status)
{
    return status == GRPC_STATUS_UNAUTHENTICATED || status == GRPC_STATUS_NOT_FOUND ||
           status == GRPC_STATUS_PERMISSION_DENIED || status == GRPC_STATUS_INVALID_ARGUMENT ||
           status == GRPC_STATUS_FAILED_PRECONDITION || status == GRPC_STATUS_UNIMPLEMENTED;
}

/* Attach answered: keep what it says and open Control (and the Calls
 * stream); the attach is complete at Control's Ready. */
void rpc_on_attach_done(gs_rpc *rpc, rpc_call *call, int status, const char *message)
{
    if (status == GS_RPC_OK && !call->have_reply) {
        status = GS_RPC_PROTOCOL;
        message = "Attach reply carried no message";
    }
    if (status != GS_RPC_OK) {
        char reason[256];
        snprintf(reason, sizeof reason, "tokend refused Attach of group '%s' (status %d): %s",
                 rpc->cfg.group, status, message);
        rpc_mark_broken(rpc, refused_status(status), reason);
        return;
    }
    const gslice_v1_AttachReply *r = &call->reply.attach;
    gs_attach_info *info = &rpc->pending_info;
    memset(info, 0, sizeof *info);
    memcpy(info->client_id, r->client_id, sizeof info->client_id);
    snprintf(info->group, sizeof info->group, "%s", r->group);
    snprintf(info->gpu_uuid, sizeof info->gpu_uuid, "%s", r->gpu_uuid);
    info->memory_quota = r->memory_quota;
    info->memory_used = r->memory_used;
    info->physical_memory = r->physical_memory;
    info->quantum_min_us = r->quantum_min_us;
    info->quantum_max_us = r->quantum_max_us;
    info->grace_us = r->grace_us;
    info->priority = (int)r->priority;
    snprintf(info->public_id, sizeof info->public_id, "%s", r->public_id);
    info->on_daemon_loss = (int)r->on_daemon_loss;
    info->doorbell_slot = r->doorbell_slot;
    info->doorbell_client = r->doorbell_client;
    info->lease_at_start = r->lease_at_start;
    rpc->calls_offered = r->calls_socket;
    memcpy(rpc->client_id, r->client_id, sizeof rpc->client_id);

    rpc_call *control = rpc_call_new(M_CONTROL, true);
    if (!control) {
        rpc_mark_broken(rpc, false, "out of memory for the Control stream");
        return;
    }
    control->wait_ms = 0; /* held open for the life of the connection */
    rpc->phase = PHASE_OPENING_CONTROL;
    rpc_start_internal(rpc, control);
    if (!rpc->broken && !rpc->cfg.unary_calls_only)
        rpc_open_call_stream(rpc);
}

/* Control's Ready: attached. Opens client.calls, tells the shim, then
 * wakes the callers waiting for the attach. */
static void on_ready(gs_rpc *rpc)
{
    if (rpc->phase != PHASE_OPENING_CONTROL)
        return; /* a repeated Ready changes nothing */
    rpc->phase = PHASE_ATTACHED;
    rpc_open_calls_socket(rpc);
    rpc->pending_info.calls_transport = rpc->calls ? "client.calls"
                                        : rpc->call_stream_id > 0 ? "the Calls stream" : "unary calls";
    pthread_mutex_lock(&rpc->lock);
    bool reconnect = rpc->attach_count++ > 0;
    pthread_mutex_unlock(&rpc->lock);
    /* Before waking the callers waiting for the attach: the first
     * AcquireToken must find what the callback sets up (the doorbell). */
    if (rpc->cfg.on_attached)
        rpc->cfg.on_attached(rpc->cfg.ctx, &rpc->pending_info, reconnect);
    pthread_mutex_lock(&rpc->lock);
    rpc->attached = true;
    rpc->attach_refused = false;
    rpc->info = rpc->pending_info;
    rpc->not_attached_reason[0] = '\0';
    pthread_cond_broadcast(&rpc->attached_cond);
    pthread_mutex_unlock(&rpc->lock);
}

/* One event on Control; false: it could not be read (the stream is reset). */
bool rpc_handle_control_event(gs_rpc *rpc, const uint8_t *body, size_t len, char *err,
                                 size_t err_cap)
{
    gslice_v1_ControlEvent event = gslice_v1_ControlEvent_init_zero;
    if (!rpc_codec_decode(gslice_v1_ControlEvent_fields, &event, body, len, err, err_cap)) {
        /* Most likely a revoke reason longer than the struct holds. */
        uint64_t token_id;
        char reason[sizeof event.event.revoke.reason];
        if (!rpc_codec_read_revoke(body, len, &token_id, reason, sizeof reason))
            return false;
        if (rpc->cfg.on_revoke)
            rpc->cfg.on_revoke(rpc->cfg.ctx, token_id, reason, false);   /* as a preemption: the safe side */
        return true;
    }
    switch (event.which_event) {
    case gslice_v1_ControlEvent_ready_tag:
        on_ready(rpc);
        break;
    case gslice_v1_ControlEvent_revoke_tag:
        if (rpc->cfg.on_revoke)
            rpc->cfg.on_revoke(rpc->cfg.ctx, event.event.revoke.token_id,
                               event.event.revoke.reason, event.event.revoke.lease_reclaim);
        break;
    case gslice_v1_ControlEvent_quota_changed_tag:
        pthread_mutex_lock(&rpc->lock);
        rpc->info.memory_quota = event.event.quota_changed.memory_quota;
        pthread_mutex_unlock(&rpc->lock);
        if (rpc->cfg.on_quota_changed)
            rpc->cfg.on_quota_changed(rpc->cfg.ctx, event.event.quota_changed.memory_quota);
        break;
    default:
        break; /* an event this version does not know: ignore it */
    }
    return true;
}

#pragma GCC visibility pop
