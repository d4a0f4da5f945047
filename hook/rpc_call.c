/* rpc_call: the client's call objects (see rpc_internal.h).
 *
 * Call objects are on the heap and reference counted (caller + I/O thread,
 * under rpc->lock), so a caller that gives up (GS_RPC_TIMEOUT) simply drops
 * its reference; the I/O thread frees the object when the stream ends, never
 * writing into a returned stack frame. The stream is not reset: every call
 * carries grpc-timeout = wait_ms, so the daemon ends it at the same moment,
 * and a reset could lose a grant already on the wire. If the abandoned call
 * was an AcquireToken or ReserveMemory that the daemon granted anyway, the
 * I/O thread gives the token / bytes back (rpc_undo_for_abandoned), since
 * nobody else will. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>

#include <pb.h>

#include "gslice/v1/client.pb.h"

#pragma GCC visibility push(hidden)
#include "rpc_internal.h"

const rpc_method_info rpc_methods[RPC_METHOD_COUNT] = {
    [M_ATTACH] = {"/gslice.v1.ClientService/Attach", gslice_v1_AttachRequest_fields,
                  gslice_v1_AttachReply_fields},
    [M_DETACH] = {"/gslice.v1.ClientService/Detach", gslice_v1_DetachRequest_fields,
                  gslice_v1_DetachReply_fields},
    [M_ACQUIRE] = {"/gslice.v1.ClientService/AcquireToken", gslice_v1_AcquireTokenRequest_fields,
                   gslice_v1_AcquireTokenReply_fields},
    [M_RELEASE] = {"/gslice.v1.ClientService/ReleaseToken", gslice_v1_ReleaseTokenRequest_fields,
                   gslice_v1_ReleaseTokenReply_fields},
    [M_RESERVE] = {"/gslice.v1.ClientService/ReserveMemory",
                   gslice_v1_ReserveMemoryRequest_fields, gslice_v1_ReserveMemoryReply_fields},
    [M_RELEASE_MEMORY] = {"/gslice.v1.ClientService/ReleaseMemory",
                          gslice_v1_ReleaseMemoryRequest_fields,
                          gslice_v1_ReleaseMemoryReply_fields},
    [M_MEMORY_INFO] = {"/gslice.v1.ClientService/GetMemoryInfo",
                       gslice_v1_GetMemoryInfoRequest_fields, gslice_v1_GetMemoryInfoReply_fields},
    [M_CONTROL] = {"/gslice.v1.ClientService/Control", gslice_v1_ControlRequest_fields,
                   gslice_v1_ControlEvent_fields},
    [M_RENEW] = {"/gslice.v1.ClientService/RenewToken", gslice_v1_RenewTokenRequest_fields,
                 gslice_v1_RenewTokenReply_fields},
    [M_CALL_STREAM] = {"/gslice.v1.ClientService/Calls", gslice_v1_ClientCall_fields,
                        gslice_v1_ClientAnswer_fields},
};

/* A caller's call holds two references (the caller's and the I/O
 * thread's); an internal one, the I/O thread's only. */
rpc_call *rpc_call_new(enum rpc_method method, bool internal)
{
    rpc_call *call = calloc(1, sizeof *call);
    if (!call)
        return NULL;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&call->done_cond, &attr);
    pthread_condattr_destroy(&attr);
    call->method = method;
    call->internal = internal;
    call->refs = internal ? 1 : 2;
    return call;
}

void rpc_call_free(rpc_call *call)
{
    pthread_cond_destroy(&call->done_cond);
    free(call);
}

/* Drops one reference; under rpc->lock. */
void rpc_call_unref_locked(rpc_call *call)
{
    if (--call->refs == 0)
        rpc_call_free(call);
}

/* Takes call out of rpc->in_flight, if it is there. */
void rpc_remove_in_flight_locked(gs_rpc *rpc, rpc_call *call)
{
    for (rpc_call **p = &rpc->in_flight; *p; p = &(*p)->next) {
        if (*p == call) {
            *p = call->next;
            call->next = NULL;
            return;
        }
    }
}

/* Where call's request carries the client id, filled in when it is sent
 * (the id changes at each attach); NULL for Attach and the Calls stream. */
char *rpc_request_client_id(rpc_call *call)
{
    switch (call->method) {
    case M_DETACH: return call->request.detach.client_id;
    case M_ACQUIRE: return call->request.acquire.client_id;
    case M_RELEASE: return call->request.release.client_id;
    case M_RESERVE: return call->request.reserve.client_id;
    case M_RELEASE_MEMORY: return call->request.release_memory.client_id;
    case M_MEMORY_INFO: return call->request.memory_info.client_id;
    case M_CONTROL: return call->request.control.client_id;
    case M_RENEW: return call->request.renew.client_id;
    case M_ATTACH:
    case M_CALL_STREAM: return NULL;
    }
    return NULL;
}

/* A granted AcquireToken / ReserveMemory whose caller gave up: give it back. */
rpc_call *rpc_undo_for_abandoned(const rpc_call *call, int status)
{
    if (status != GS_RPC_OK || !call->have_reply)
        return NULL;
    rpc_call *undo = NULL;
    if (call->method == M_ACQUIRE && (undo = rpc_call_new(M_RELEASE, true))) {
        undo->request.release.token_id = call->reply.acquire.token_id;
        undo->request.release.idle = true;
    } else if (call->method == M_RESERVE && call->reply.reserve.granted &&
               (undo = rpc_call_new(M_RELEASE_MEMORY, true))) {
        undo->request.release_memory.bytes = call->request.reserve.bytes;
    }
    if (undo)
        undo->wait_ms = 5000;
    return undo;
}

#pragma GCC visibility pop
