/* rpc_client: the shim's gslice.v1.ClientService client (see rpc_client.h).
 *
 * Threads: callers build a call object, queue it and wait on its condvar;
 * the I/O thread owns the h2_connection, starts queued calls as streams,
 * completes them from the replies, and runs the connection lifecycle
 * (connect -> Attach -> Control until Ready -> attached; on any break:
 * fail what is pending, back off, start over).
 *
 * Call objects are on the heap and reference counted (caller + I/O thread,
 * under rpc->lock), so a caller that gives up (GS_RPC_TIMEOUT) simply drops
 * its reference; the I/O thread frees the object when the stream ends, never
 * writing into a returned stack frame. The stream is not reset: every call
 * carries grpc-timeout = wait_ms, so the daemon ends it at the same moment,
 * and a reset could lose a grant already on the wire. If the abandoned call
 * was an AcquireToken or ReserveMemory that the daemon granted anyway, the
 * I/O thread gives the token / bytes back, since nobody else will.
 *
 * AcquireToken, ReleaseToken, RenewToken, ReserveMemory and ReleaseMemory
 * travel as messages on the Calls stream, opened beside Control (a message
 * on an open stream costs grpcio about half the daemon CPU of a unary
 * call); their answers carry the call_id they complete. A daemon without
 * Calls answers it UNIMPLEMENTED: the calls sent on it are started again as
 * unary calls, and so is every later one on that connection.
 *
 * wait_ms <= 0 on a call means: no client-side limit (until disconnect). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <pb.h>

#include "gslice/v1/client.pb.h"

#pragma GCC visibility push(hidden)
/* Messages are composed into fixed buffers; cutting a long one short is intended. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "calls_socket.h"
#include "h2_connection.h"
#include "rpc_client.h"
#include "rpc_codec.h"

#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 1000
/* A refused Attach (bad group/secret) will not fix itself quickly. */
#define REFUSED_RETRY_MS 5000
/* Connect -> Attach reply -> Control's Ready must not take longer. */
#define ATTACH_DEADLINE_MS 10000
#define DETACH_WAIT_MS 300
#define STOP_JOIN_MS 2000

enum rpc_method {
    M_ATTACH,
    M_DETACH,
    M_ACQUIRE,
    M_RELEASE,
    M_RESERVE,
    M_RELEASE_MEMORY,
    M_MEMORY_INFO,
    M_CONTROL,
    M_RENEW,
    M_CALL_STREAM,
};

static const struct {
    const char *path;
    const pb_msgdesc_t *request;
    const pb_msgdesc_t *reply;
} method_table[] = {
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

/* The largest framed request of the contract. */
#define REQUEST_MAX_BYTES                                                                          \
    (GRPC_FRAME_PREFIX + 16 +                                                                      \
     (gslice_v1_AttachRequest_size > gslice_v1_ClientCall_size ? gslice_v1_AttachRequest_size        \
                                                              : gslice_v1_ClientCall_size))

typedef union rpc_request {
    gslice_v1_AttachRequest attach;
    gslice_v1_DetachRequest detach;
    gslice_v1_AcquireTokenRequest acquire;
    gslice_v1_ReleaseTokenRequest release;
    gslice_v1_ReserveMemoryRequest reserve;
    gslice_v1_ReleaseMemoryRequest release_memory;
    gslice_v1_GetMemoryInfoRequest memory_info;
    gslice_v1_ControlRequest control;
    gslice_v1_RenewTokenRequest renew;
} rpc_request;

typedef union rpc_reply {
    gslice_v1_AttachReply attach;
    gslice_v1_DetachReply detach;
    gslice_v1_AcquireTokenReply acquire;
    gslice_v1_ReleaseTokenReply release;
    gslice_v1_ReserveMemoryReply reserve;
    gslice_v1_ReleaseMemoryReply release_memory;
    gslice_v1_GetMemoryInfoReply memory_info;
    gslice_v1_RenewTokenReply renew;
} rpc_reply;

typedef struct rpc_call {
    struct rpc_call *next;      /* in rpc->queue, then rpc->in_flight */
    int refs;                   /* under rpc->lock */
    enum rpc_method method;
    bool internal;              /* the I/O thread's own (no waiter) */
    bool done, abandoned, have_reply;
    int result;
    int wait_ms;
    int32_t stream_id;          /* 0 until started */
    uint32_t stream_call_id;     /* != 0: sent on the Calls stream with this call_id */
    bool on_socket;             /* ... on client.calls instead (calls_socket.h) */
    rpc_request request;
    rpc_reply reply;
    char message[256];
    pthread_cond_t done_cond;
} rpc_call;

enum io_phase { PHASE_DOWN, PHASE_ATTACHING, PHASE_OPENING_CONTROL, PHASE_ATTACHED, PHASE_CLOSING };

struct gs_rpc {
    gs_rpc_config cfg;          /* its strings are ours (strdup) */
    pthread_mutex_t lock;
    /* Held by the I/O thread while it installs or tears down `conn`, and by
     * fork's prepare handler: a child never sees a connection half closed
     * (its fd closed, maybe reused, and its memory freed). */
    pthread_mutex_t conn_lock;
    pthread_cond_t attached_cond;
    pthread_t io_thread;
    int wake_fd;

    /* Under lock. */
    bool stop;                  /* the I/O thread must exit */
    bool stopping;              /* gs_rpc_stop began: no reconnecting */
    bool attached;
    bool attach_refused;        /* the last Attach was refused (bad group/secret) */
    bool joined;                /* gs_rpc_stop joined the I/O thread */
    unsigned attach_count;
    gs_attach_info info;
    char not_attached_reason[256];
    rpc_call *queue_head, *queue_tail;
    rpc_call *in_flight;

    /* I/O thread only (read by the forking thread in a child). */
    h2_connection *conn;
    enum io_phase phase;
    struct timespec phase_deadline;
    bool broken, refused;
    char broken_reason[256];
    char client_id[64];
    gs_attach_info pending_info;
    int32_t call_stream_id;    /* the open Calls stream; 0: calls go unary */
    uint32_t last_stream_call_id; /* under lock (callers number their calls on client.calls) */
    /* client.calls, when the daemon offers it: those calls go there, not on
     * the Calls stream, sent by the calling thread itself (one thread hop
     * less; the answers come through the I/O thread). calls_lock guards its
     * writes and, with conn_lock (fork), its install and close by the I/O
     * thread. Lock order: calls_lock, conn_lock, lock. */
    bool calls_offered;
    pthread_mutex_t calls_lock;
    calls_socket *calls;
};

static __thread char rpc_last_error[256];

const char *gs_rpc_last_error(void)
{
    return rpc_last_error;
}

static void set_last_error(const char *message)
{
    snprintf(rpc_last_error, sizeof rpc_last_error, "%s", message);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timespec deadline_after(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static int ms_until(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)(deadline->tv_sec - now.tv_sec) * 1000 +
                 (deadline->tv_nsec - now.tv_nsec) / 1000000;
    return ms < 0 ? 0 : ms > 1000000 ? 1000000 : (int)ms + 1;
}

static void init_sync(gs_rpc *rpc)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&rpc->lock, NULL);
    pthread_mutex_init(&rpc->conn_lock, NULL);
    pthread_mutex_init(&rpc->calls_lock, NULL);
    pthread_cond_init(&rpc->attached_cond, &attr);
    pthread_condattr_destroy(&attr);
}

static void wake_io_thread(gs_rpc *rpc)
{
    uint64_t one = 1;
    ssize_t n = write(rpc->wake_fd, &one, sizeof one);
    (void)n; /* EAGAIN: the counter is already non-zero, the thread will wake */
}

/* ---- call objects ---------------------------------------------------- */

static rpc_call *call_new(enum rpc_method method, bool internal)
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

static void call_free(rpc_call *call)
{
    pthread_cond_destroy(&call->done_cond);
    free(call);
}

/* Drops one reference; under rpc->lock. */
static void call_unref_locked(rpc_call *call)
{
    if (--call->refs == 0)
        call_free(call);
}

static void remove_in_flight_locked(gs_rpc *rpc, rpc_call *call)
{
    for (rpc_call **p = &rpc->in_flight; *p; p = &(*p)->next) {
        if (*p == call) {
            *p = call->next;
            call->next = NULL;
            return;
        }
    }
}

/* ---- the I/O thread: starting and completing calls -------------------- */

static void mark_broken(gs_rpc *rpc, bool refused, const char *reason)
{
    if (rpc->broken)
        return;
    rpc->broken = true;
    rpc->refused = refused;
    snprintf(rpc->broken_reason, sizeof rpc->broken_reason, "%s", reason);
}

static char *request_client_id(rpc_call *call)
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

static bool is_stream_call(enum rpc_method method)
{
    return method == M_ACQUIRE || method == M_RELEASE || method == M_RENEW || method == M_RESERVE ||
           method == M_RELEASE_MEMORY;
}

/* Encodes call as a ClientCall; its length framed, 0 if it cannot be. */
static size_t encode_stream_call(rpc_call *call, uint32_t call_id, uint8_t *framed, size_t cap)
{
    gslice_v1_ClientCall message = gslice_v1_ClientCall_init_zero;
    message.call_id = call_id;
    switch (call->method) {
    case M_ACQUIRE:
        message.which_call = gslice_v1_ClientCall_acquire_tag;
        message.call.acquire = call->request.acquire;
        message.wait_ms = call->wait_ms > 0 ? (uint32_t)call->wait_ms : 0;
        break;
    case M_RELEASE:
        message.which_call = gslice_v1_ClientCall_release_tag;
        message.call.release = call->request.release;
        break;
    case M_RENEW:
        message.which_call = gslice_v1_ClientCall_renew_tag;
        message.call.renew = call->request.renew;
        break;
    case M_RESERVE:
        message.which_call = gslice_v1_ClientCall_reserve_tag;
        message.call.reserve = call->request.reserve;
        message.wait_ms = call->wait_ms > 0 ? (uint32_t)call->wait_ms : 0;
        break;
    default:
        message.which_call = gslice_v1_ClientCall_release_memory_tag;
        message.call.release_memory = call->request.release_memory;
        break;
    }
    return rpc_codec_encode(gslice_v1_ClientCall_fields, &message, framed, cap);
}

/* Under lock: the next call_id of the Calls stream or client.calls (0
 * means "not on the stream"). */
static uint32_t next_call_id_locked(gs_rpc *rpc)
{
    uint32_t id = ++rpc->last_stream_call_id;
    return id ? id : ++rpc->last_stream_call_id;
}

/* Sends a token or memory call on client.calls, from whichever thread
 * calls (a caller: no hop through the I/O thread; its answer comes back
 * through it). false, nothing sent: no socket, or not attached (a caller's
 * call is then queued for the I/O thread as usual). */
static bool send_on_calls_socket(gs_rpc *rpc, rpc_call *call, bool io_thread)
{
    uint8_t framed[REQUEST_MAX_BYTES];
    bool sent = false, wake = false;
    pthread_mutex_lock(&rpc->calls_lock);
    if (rpc->calls) {
        /* rpc->client_id is the socket's connection's own: it changes only
         * after the socket is closed (calls_lock). */
        char *client_id = request_client_id(call);
        if (client_id)
            memcpy(client_id, rpc->client_id, sizeof rpc->client_id);
        pthread_mutex_lock(&rpc->lock);
        bool usable = io_thread || (!rpc->stop && rpc->attached);
        uint32_t call_id = usable ? next_call_id_locked(rpc) : 0;
        pthread_mutex_unlock(&rpc->lock);
        size_t len = usable ? encode_stream_call(call, call_id, framed, sizeof framed) : 0;
        if (len > 0 && calls_socket_send(rpc->calls, framed, len)) {
            pthread_mutex_lock(&rpc->lock);   /* in flight before its bytes go: its answer may come at once */
            call->stream_id = -1;   /* no HTTP/2 stream */
            call->stream_call_id = call_id;
            call->on_socket = true;
            call->next = rpc->in_flight;
            rpc->in_flight = call;
            pthread_mutex_unlock(&rpc->lock);
            char err[160];
            /* A failed write is the I/O thread's to find (its next flush or
             * read): woken, it closes the socket and ends this call. */
            wake = !io_thread && (!calls_socket_flush(rpc->calls, err, sizeof err) ||
                                  calls_socket_wants_write(rpc->calls));
            sent = true;
        }
    }
    pthread_mutex_unlock(&rpc->calls_lock);
    if (wake)
        wake_io_thread(rpc);
    return sent;
}

/* Encodes and starts call on the connection, on client.calls or the Calls
 * stream when it is one of those and one is open; false with call->message set. */
static bool start_stream(gs_rpc *rpc, rpc_call *call)
{
    char *client_id = request_client_id(call);
    if (client_id)
        memcpy(client_id, rpc->client_id, sizeof rpc->client_id);
    uint8_t framed[REQUEST_MAX_BYTES];
    if (is_stream_call(call->method) && rpc->calls && send_on_calls_socket(rpc, call, true))
        return true;
    /* A stream we reset (a malformed answer) takes no more calls, though
     * its close is still to come: those go unary meanwhile. */
    bool on_call_stream = is_stream_call(call->method) && rpc->call_stream_id > 0 &&
                          h2_connection_stream_open_for_messages(rpc->conn, rpc->call_stream_id);
    uint32_t call_id = 0;
    if (on_call_stream) {
        pthread_mutex_lock(&rpc->lock);
        call_id = next_call_id_locked(rpc);
        pthread_mutex_unlock(&rpc->lock);
    }
    size_t len = on_call_stream
                     ? encode_stream_call(call, call_id, framed, sizeof framed)
                     : rpc_codec_encode(method_table[call->method].request, &call->request, framed,
                                        sizeof framed);
    if (len == 0) {
        snprintf(call->message, sizeof call->message, "cannot encode the %s request",
                 method_table[call->method].path);
        return false;
    }
    int32_t id;
    if (on_call_stream) {
        id = h2_connection_send_message(rpc->conn, rpc->call_stream_id, framed, len, call->message,
                                        sizeof call->message)
                 ? rpc->call_stream_id
                 : -1;
    } else {
        id = h2_connection_start_call(rpc->conn, method_table[call->method].path, framed, len,
                                      call->wait_ms, call, call->message, sizeof call->message);
    }
    if (id < 0)
        return false;
    pthread_mutex_lock(&rpc->lock);
    call->stream_id = id;
    call->stream_call_id = call_id;
    call->next = rpc->in_flight;
    rpc->in_flight = call;
    pthread_mutex_unlock(&rpc->lock);
    return true;
}

static void open_calls_socket(gs_rpc *rpc);

static void start_internal(gs_rpc *rpc, rpc_call *call)
{
    if (!start_stream(rpc, call)) {
        if (call->method == M_ATTACH || call->method == M_CONTROL)
            mark_broken(rpc, false, call->message);
        call_free(call);
    }
}

/* Opens the Calls stream; without it, those calls go unary. */
static void open_call_stream(gs_rpc *rpc)
{
    rpc_call *stream = call_new(M_CALL_STREAM, true);
    if (!stream)
        return;
    int32_t id = h2_connection_open_stream(rpc->conn, method_table[M_CALL_STREAM].path, stream,
                                           stream->message, sizeof stream->message);
    if (id < 0) {
        call_free(stream);
        return;
    }
    stream->stream_id = id;
    rpc->call_stream_id = id;
}

/* A granted AcquireToken / ReserveMemory whose caller gave up: give it back. */
static rpc_call *undo_for_abandoned(const rpc_call *call, int status)
{
    if (status != GS_RPC_OK || !call->have_reply)
        return NULL;
    rpc_call *undo = NULL;
    if (call->method == M_ACQUIRE && (undo = call_new(M_RELEASE, true))) {
        undo->request.release.token_id = call->reply.acquire.token_id;
        undo->request.release.idle = true;
    } else if (call->method == M_RESERVE && call->reply.reserve.granted &&
               (undo = call_new(M_RELEASE_MEMORY, true))) {
        undo->request.release_memory.bytes = call->request.reserve.bytes;
    }
    if (undo)
        undo->wait_ms = 5000;
    return undo;
}

/* Finishes a caller's call (any outcome); the I/O thread's reference goes. */
static void complete_call(gs_rpc *rpc, rpc_call *call, int status, const char *message)
{
    rpc_call *undo = NULL;
    pthread_mutex_lock(&rpc->lock);
    remove_in_flight_locked(rpc, call);
    if (status == GS_RPC_OK && !call->have_reply) {
        status = GS_RPC_PROTOCOL;
        message = "reply carried no message";
    }
    call->result = status;
    if (message != call->message)
        snprintf(call->message, sizeof call->message, "%s", message ? message : "");
    call->done = true;
    if (call->abandoned && rpc->phase != PHASE_CLOSING)
        undo = undo_for_abandoned(call, status);
    pthread_cond_signal(&call->done_cond);
    call_unref_locked(call);
    pthread_mutex_unlock(&rpc->lock);
    if (undo)
        start_internal(rpc, undo);
}

static bool refused_status(int status)
{
    return status == GRPC_STATUS_UNAUTHENTICATED || status == GRPC_STATUS_NOT_FOUND ||
           status == GRPC_STATUS_PERMISSION_DENIED || status == GRPC_STATUS_INVALID_ARGUMENT ||
           status == GRPC_STATUS_FAILED_PRECONDITION || status == GRPC_STATUS_UNIMPLEMENTED;
}

static void on_attach_done(gs_rpc *rpc, rpc_call *call, int status, const char *message)
{
    if (status == GS_RPC_OK && !call->have_reply) {
        status = GS_RPC_PROTOCOL;
        message = "Attach reply carried no message";
    }
    if (status != GS_RPC_OK) {
        char reason[256];
        snprintf(reason, sizeof reason, "tokend refused Attach of group '%s' (status %d): %s",
                 rpc->cfg.group, status, message);
        mark_broken(rpc, refused_status(status), reason);
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

    rpc_call *control = call_new(M_CONTROL, true);
    if (!control) {
        mark_broken(rpc, false, "out of memory for the Control stream");
        return;
    }
    control->wait_ms = 0; /* held open for the life of the connection */
    rpc->phase = PHASE_OPENING_CONTROL;
    start_internal(rpc, control);
    if (!rpc->broken && !rpc->cfg.unary_calls_only)
        open_call_stream(rpc);
}

static void on_ready(gs_rpc *rpc)
{
    if (rpc->phase != PHASE_OPENING_CONTROL)
        return; /* a repeated Ready changes nothing */
    rpc->phase = PHASE_ATTACHED;
    open_calls_socket(rpc);
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

static bool handle_control_event(gs_rpc *rpc, const uint8_t *body, size_t len, char *err,
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

/* A call of the application's (unary, or answered on Calls) is over;
 * an internal one (an abandoned call's undo) is just forgotten. */
static void finish_call_io(gs_rpc *rpc, rpc_call *call, int status, const char *message)
{
    if (call->internal) {
        pthread_mutex_lock(&rpc->lock);
        remove_in_flight_locked(rpc, call);
        pthread_mutex_unlock(&rpc->lock);
        call_free(call);
        return;
    }
    if (status == GRPC_STATUS_NOT_FOUND && rpc->phase == PHASE_ATTACHED)
        /* Our client_id is gone at the daemon: attach again. */
        mark_broken(rpc, false, message);
    complete_call(rpc, call, status, message);
}

/* The calls in flight on the Calls stream (or on client.calls), taken out
 * of in_flight. */
static rpc_call *take_stream_calls(gs_rpc *rpc, bool on_socket)
{
    rpc_call *taken = NULL;
    pthread_mutex_lock(&rpc->lock);
    for (rpc_call **p = &rpc->in_flight; *p;) {
        rpc_call *call = *p;
        if (call->stream_call_id && call->on_socket == on_socket) {
            *p = call->next;
            call->next = taken;
            taken = call;
        } else {
            p = &call->next;
        }
    }
    pthread_mutex_unlock(&rpc->lock);
    return taken;
}

/* Calls ended. Refused as UNIMPLEMENTED (a daemon older than it), its
 * calls start again unary; ended otherwise, they end with its status. Later
 * such calls on this connection go unary either way. */
static void on_call_stream_closed(gs_rpc *rpc, int status, const char *message)
{
    rpc->call_stream_id = 0;
    bool again = status == GRPC_STATUS_UNIMPLEMENTED && rpc->phase != PHASE_CLOSING && !rpc->broken;
    char reason[300];
    snprintf(reason, sizeof reason, "Calls stream ended (status %d): %s", status,
             status == GRPC_STATUS_OK ? "tokend ended it before answering" : message);
    if (status == GRPC_STATUS_OK)
        status = GS_RPC_UNAVAILABLE; /* an answer that never came is no success */
    rpc_call *taken = take_stream_calls(rpc, false);
    while (taken) {
        rpc_call *call = taken;
        taken = call->next;
        call->next = NULL;
        call->stream_call_id = 0;
        if (again && start_stream(rpc, call))
            continue;
        finish_call_io(rpc, call, again ? GS_RPC_UNAVAILABLE : status, again ? call->message : reason);
    }
}

/* One ClientAnswer: completes the call it names (sent the same way). */
static bool handle_stream_answer(gs_rpc *rpc, bool on_socket, const uint8_t *body, size_t len, char *err,
                                 size_t err_cap)
{
    gslice_v1_ClientAnswer answer = gslice_v1_ClientAnswer_init_zero;
    if (!rpc_codec_decode(gslice_v1_ClientAnswer_fields, &answer, body, len, err, err_cap))
        return false;
    rpc_call *call = NULL;
    pthread_mutex_lock(&rpc->lock);
    for (rpc_call *c = rpc->in_flight; c; c = c->next) {
        if (answer.call_id != 0 && c->stream_call_id == answer.call_id && c->on_socket == on_socket) {
            call = c;
            break;
        }
    }
    pthread_mutex_unlock(&rpc->lock);
    if (!call) {
        snprintf(err, err_cap, "ClientAnswer for call_id %u, which is not in flight", answer.call_id);
        return false;
    }
    if (answer.code != GRPC_STATUS_OK) {
        /* A code beyond gRPC's own must not pass for one of GS_RPC_*. */
        int status = answer.code <= GRPC_STATUS_UNAUTHENTICATED ? (int)answer.code : GRPC_STATUS_UNKNOWN;
        finish_call_io(rpc, call, status, answer.message);
        return true;
    }
    static const pb_size_t answer_tag[] = {
        [M_ACQUIRE] = gslice_v1_ClientAnswer_acquire_tag,
        [M_RELEASE] = gslice_v1_ClientAnswer_release_tag,
        [M_RENEW] = gslice_v1_ClientAnswer_renew_tag,
        [M_RESERVE] = gslice_v1_ClientAnswer_reserve_tag,
        [M_RELEASE_MEMORY] = gslice_v1_ClientAnswer_release_memory_tag,
    };
    if (answer.which_answer != answer_tag[call->method]) {
        finish_call_io(rpc, call, GS_RPC_PROTOCOL, "ClientAnswer of another kind than its call");
        return true;
    }
    switch (call->method) {
    case M_ACQUIRE: call->reply.acquire = answer.answer.acquire; break;
    case M_RELEASE: call->reply.release = answer.answer.release; break;
    case M_RENEW: call->reply.renew = answer.answer.renew; break;
    case M_RESERVE: call->reply.reserve = answer.answer.reserve; break;
    default: call->reply.release_memory = answer.answer.release_memory; break;
    }
    call->have_reply = true;
    finish_call_io(rpc, call, GS_RPC_OK, "");
    return true;
}

static bool on_socket_answer(void *owner, const uint8_t *body, size_t len, char *err, size_t err_cap)
{
    return handle_stream_answer(owner, true, body, len, err, err_cap);
}

/* Attached, and the daemon serves client.calls: the token and memory calls
 * go there from now on. Not reached: they stay on the Calls stream. */
static void open_calls_socket(gs_rpc *rpc)
{
    char path[512], err[256];
    if (!rpc->calls_offered || rpc->cfg.unary_calls_only || rpc->cfg.no_calls_socket ||
        !calls_socket_path_beside(rpc->cfg.socket_path, path, sizeof path))
        return;
    calls_socket *calls = calls_socket_open(path, err, sizeof err);
    pthread_mutex_lock(&rpc->calls_lock);
    pthread_mutex_lock(&rpc->conn_lock);
    rpc->calls = calls;
    pthread_mutex_unlock(&rpc->conn_lock);
    pthread_mutex_unlock(&rpc->calls_lock);
}

/* The calls socket failed (or the connection is going): its calls end
 * with `status` and the reason (tokend may have served them: not sent
 * again), as on a Calls stream ended so, and later ones go on the stream. */
static void close_calls_socket(gs_rpc *rpc, int status, const char *reason)
{
    if (!rpc->calls)
        return;
    pthread_mutex_lock(&rpc->calls_lock);
    pthread_mutex_lock(&rpc->conn_lock);
    calls_socket_close(rpc->calls);
    rpc->calls = NULL;
    pthread_mutex_unlock(&rpc->conn_lock);
    pthread_mutex_unlock(&rpc->calls_lock);
    rpc_call *taken = take_stream_calls(rpc, true);
    while (taken) {
        rpc_call *call = taken;
        taken = call->next;
        call->next = NULL;
        finish_call_io(rpc, call, status, reason);
    }
}

static bool on_stream_message(void *owner, void *stream_ctx, const uint8_t *body, size_t len,
                              char *err, size_t err_cap)
{
    gs_rpc *rpc = owner;
    rpc_call *call = stream_ctx;
    if (call->method == M_CONTROL)
        return handle_control_event(rpc, body, len, err, err_cap);
    if (call->method == M_CALL_STREAM)
        return handle_stream_answer(rpc, false, body, len, err, err_cap);
    if (call->have_reply) {
        snprintf(err, err_cap, "second message on the unary reply of %s",
                 method_table[call->method].path);
        return false;
    }
    if (!rpc_codec_decode(method_table[call->method].reply, &call->reply, body, len, err, err_cap))
        return false;
    call->have_reply = true;
    return true;
}

static bool is_stopping(gs_rpc *rpc)
{
    pthread_mutex_lock(&rpc->lock);
    bool stopping = rpc->stopping;
    pthread_mutex_unlock(&rpc->lock);
    return stopping;
}

static void on_stream_close(void *owner, void *stream_ctx, int status, const char *message)
{
    gs_rpc *rpc = owner;
    rpc_call *call = stream_ctx;
    if (!call->internal) {
        finish_call_io(rpc, call, status, message);
        return;
    }
    if (call->method == M_CALL_STREAM) {
        on_call_stream_closed(rpc, status, message);
        call_free(call);
        return;
    }
    pthread_mutex_lock(&rpc->lock);
    remove_in_flight_locked(rpc, call);
    pthread_mutex_unlock(&rpc->lock);
    if (rpc->phase != PHASE_CLOSING) {
        if (call->method == M_ATTACH) {
            on_attach_done(rpc, call, status, message);
        } else if (call->method == M_CONTROL && !is_stopping(rpc)) {
            /* (While stopping, Detach ends Control; the Detach reply matters.) */
            char reason[300];
            snprintf(reason, sizeof reason, "Control stream ended (status %d): %s", status,
                     message);
            mark_broken(rpc, false, reason);
        }
    }
    call_free(call);
}

static const h2_handlers stream_handlers = {
    .on_message = on_stream_message,
    .on_close = on_stream_close,
};

/* Starts every queued call (or fails it when not attached). */
static void start_queued(gs_rpc *rpc)
{
    pthread_mutex_lock(&rpc->lock);
    rpc_call *queued = rpc->queue_head;
    rpc->queue_head = rpc->queue_tail = NULL;
    pthread_mutex_unlock(&rpc->lock);
    while (queued) {
        rpc_call *call = queued;
        queued = call->next;
        call->next = NULL;
        if (call->abandoned) {
            complete_call(rpc, call, GS_RPC_TIMEOUT, "abandoned before it was sent");
        } else if (rpc->phase != PHASE_ATTACHED || rpc->broken) {
            char reason[300];
            snprintf(reason, sizeof reason, "not attached to tokend: %s",
                     rpc->broken ? rpc->broken_reason : "attach in progress");
            complete_call(rpc, call, GS_RPC_UNAVAILABLE, reason);
        } else if (!start_stream(rpc, call)) {
            complete_call(rpc, call, GS_RPC_UNAVAILABLE, call->message);
        }
    }
}

static void drain_wake_fd(gs_rpc *rpc)
{
    uint64_t count;
    ssize_t n = read(rpc->wake_fd, &count, sizeof count);
    (void)n;
}

static bool stop_requested(gs_rpc *rpc)
{
    pthread_mutex_lock(&rpc->lock);
    bool stop = rpc->stop;
    pthread_mutex_unlock(&rpc->lock);
    return stop;
}

static void set_not_attached_reason(gs_rpc *rpc, const char *reason)
{
    pthread_mutex_lock(&rpc->lock);
    snprintf(rpc->not_attached_reason, sizeof rpc->not_attached_reason, "%s", reason);
    pthread_cond_broadcast(&rpc->attached_cond);
    pthread_mutex_unlock(&rpc->lock);
}

/* One connection's life: Attach, Control, serve calls until it breaks.
 * Returns whether it ever got attached. */
static bool serve_connection(gs_rpc *rpc)
{
    rpc->broken = rpc->refused = false;
    rpc->broken_reason[0] = '\0';
    rpc->call_stream_id = 0;
    rpc->calls_offered = false;
    rpc->phase = PHASE_ATTACHING;
    rpc->phase_deadline = deadline_after(ATTACH_DEADLINE_MS);

    rpc_call *attach = call_new(M_ATTACH, true);
    if (!attach) {
        mark_broken(rpc, false, "out of memory for Attach");
    } else {
        gslice_v1_AttachRequest *req = &attach->request.attach;
        snprintf(req->group, sizeof req->group, "%s", rpc->cfg.group);
        snprintf(req->secret, sizeof req->secret, "%s", rpc->cfg.secret);
        snprintf(req->gpu_uuid, sizeof req->gpu_uuid, "%s", rpc->cfg.gpu_uuid);
        snprintf(req->process_name, sizeof req->process_name, "%s", rpc->cfg.process_name);
        req->pid = (uint32_t)getpid();
        req->reserved_bytes = rpc->cfg.reserved_bytes ? rpc->cfg.reserved_bytes(rpc->cfg.ctx) : 0;
        req->protocol_version = 1;
        attach->wait_ms = ATTACH_DEADLINE_MS;
        start_internal(rpc, attach);
    }

    char err[256];
    while (!rpc->broken) {
        if (stop_requested(rpc)) {
            mark_broken(rpc, false, "the shim is stopping");
            break;
        }
        start_queued(rpc);
        if (rpc->broken)
            break;
        if (!h2_connection_flush(rpc->conn, err, sizeof err)) {
            mark_broken(rpc, false, err);
            break;
        }
        if (rpc->broken)
            break; /* a stream closed while flushing (e.g. a rejected Control event): don't sleep in poll */
        bool calls_failed = false, calls_pending = false;
        if (rpc->calls) {
            pthread_mutex_lock(&rpc->calls_lock);
            calls_failed = !calls_socket_flush(rpc->calls, err, sizeof err);
            calls_pending = calls_socket_wants_write(rpc->calls);
            pthread_mutex_unlock(&rpc->calls_lock);
        }
        if (calls_failed)
            close_calls_socket(rpc, GS_RPC_UNAVAILABLE, err);
        struct pollfd fds[3] = {
            {h2_connection_fd(rpc->conn),
             (short)(POLLIN | (h2_connection_wants_write(rpc->conn) ? POLLOUT : 0)), 0},
            {rpc->wake_fd, POLLIN, 0},
            {rpc->calls ? calls_socket_fd(rpc->calls) : -1,   /* poll skips -1 */
             (short)(POLLIN | (calls_pending ? POLLOUT : 0)), 0},
        };
        int timeout = rpc->phase == PHASE_ATTACHED ? -1 : ms_until(&rpc->phase_deadline);
        int n = poll(fds, 3, timeout);
        if (n < 0 && errno != EINTR) {
            snprintf(err, sizeof err, "poll: %s", strerror(errno));
            mark_broken(rpc, false, err);
            break;
        }
        if (fds[1].revents & POLLIN)
            drain_wake_fd(rpc);
        /* Answers first: a Revoke read in the same turn names a token whose
         * grant may be among them. */
        bool malformed;
        if (rpc->calls && (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) &&
            !calls_socket_read(rpc->calls, on_socket_answer, rpc, &malformed, err, sizeof err))
            close_calls_socket(rpc, malformed ? GS_RPC_PROTOCOL : GS_RPC_UNAVAILABLE, err);
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (!h2_connection_read(rpc->conn, err, sizeof err))
                mark_broken(rpc, false, err);
        }
        if (rpc->phase != PHASE_ATTACHED && !rpc->broken && ms_until(&rpc->phase_deadline) == 0)
            mark_broken(rpc, false, "tokend did not complete Attach and Control within 10 s");
    }

    bool was_attached = rpc->phase == PHASE_ATTACHED;
    char reason[300];
    snprintf(reason, sizeof reason, "connection to tokend lost: %s", rpc->broken_reason);
    pthread_mutex_lock(&rpc->lock);
    rpc->attached = false;
    rpc->attach_refused = rpc->refused;
    snprintf(rpc->not_attached_reason, sizeof rpc->not_attached_reason, "%s",
             rpc->refused ? rpc->broken_reason : reason);
    pthread_cond_broadcast(&rpc->attached_cond);
    pthread_mutex_unlock(&rpc->lock);

    rpc->phase = PHASE_CLOSING; /* handlers start nothing from here on */
    close_calls_socket(rpc, GS_RPC_UNAVAILABLE, reason);
    pthread_mutex_lock(&rpc->conn_lock);
    h2_connection_close(rpc->conn, GS_RPC_UNAVAILABLE, reason);
    rpc->conn = NULL;
    pthread_mutex_unlock(&rpc->conn_lock);
    rpc->phase = PHASE_DOWN;
    return was_attached;
}

/* Waits ms (or until stopped), failing calls queued meanwhile. */
static void back_off(gs_rpc *rpc, int ms)
{
    int64_t until = now_ms() + ms;
    while (!stop_requested(rpc)) {
        start_queued(rpc); /* phase is DOWN: fails them with the reason */
        int64_t left = until - now_ms();
        if (left <= 0)
            return;
        struct pollfd fd = {rpc->wake_fd, POLLIN, 0};
        if (poll(&fd, 1, (int)left) > 0)
            drain_wake_fd(rpc);
    }
}

static void *io_main(void *arg)
{
    gs_rpc *rpc = arg;
    int backoff_ms = BACKOFF_MIN_MS;
    while (!stop_requested(rpc)) {
        char err[256];
        rpc->broken = false;
        h2_connection *conn = h2_connection_open(rpc->cfg.socket_path, &stream_handlers, rpc, err, sizeof err);
        pthread_mutex_lock(&rpc->conn_lock);
        rpc->conn = conn;
        pthread_mutex_unlock(&rpc->conn_lock);
        int wait_ms = backoff_ms;
        if (rpc->conn) {
            bool was_attached = serve_connection(rpc);
            pthread_mutex_lock(&rpc->lock);
            bool stopping = rpc->stopping;
            pthread_mutex_unlock(&rpc->lock);
            if (stopping)
                break;
            if (was_attached) {
                backoff_ms = wait_ms = BACKOFF_MIN_MS;
                if (rpc->cfg.on_disconnected)
                    rpc->cfg.on_disconnected(rpc->cfg.ctx);
            }
            if (rpc->refused)
                wait_ms = REFUSED_RETRY_MS;
        } else {
            char reason[300];
            snprintf(reason, sizeof reason, "tokend unreachable: %s", err);
            set_not_attached_reason(rpc, reason);
        }
        rpc->broken = true; /* makes start_queued fail calls with the reason */
        snprintf(rpc->broken_reason, sizeof rpc->broken_reason, "%s",
                 rpc->not_attached_reason);
        back_off(rpc, wait_ms);
        if (backoff_ms < BACKOFF_MAX_MS)
            backoff_ms = backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff_ms * 2;
    }
    rpc->broken = true;
    snprintf(rpc->broken_reason, sizeof rpc->broken_reason, "the shim's RPC client stopped");
    start_queued(rpc);
    return NULL;
}

/* ---- public API -------------------------------------------------------- */

static char *copy_string(const char *s)
{
    return strdup(s ? s : "");
}

static bool start_io_thread(gs_rpc *rpc)
{
    /* The application's signal handlers must never run on our thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rv = pthread_create(&rpc->io_thread, NULL, io_main, rpc);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rv != 0)
        return false;
    pthread_setname_np(rpc->io_thread, "gslice-rpc");
    return true;
}

gs_rpc *gs_rpc_start(const gs_rpc_config *cfg)
{
    gs_rpc *rpc = calloc(1, sizeof *rpc);
    if (!rpc)
        return NULL;
    rpc->cfg = *cfg;
    rpc->cfg.socket_path = copy_string(cfg->socket_path);
    rpc->cfg.group = copy_string(cfg->group);
    rpc->cfg.secret = copy_string(cfg->secret);
    rpc->cfg.gpu_uuid = copy_string(cfg->gpu_uuid);
    rpc->cfg.process_name = copy_string(cfg->process_name);
    rpc->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    snprintf(rpc->not_attached_reason, sizeof rpc->not_attached_reason,
             "attach to tokend at %s in progress", rpc->cfg.socket_path);
    init_sync(rpc);
    if (!rpc->cfg.socket_path || !rpc->cfg.group || !rpc->cfg.secret || !rpc->cfg.gpu_uuid ||
        !rpc->cfg.process_name || rpc->wake_fd < 0 || !start_io_thread(rpc)) {
        if (rpc->wake_fd >= 0)
            close(rpc->wake_fd);
        free((char *)rpc->cfg.socket_path);
        free((char *)rpc->cfg.group);
        free((char *)rpc->cfg.secret);
        free((char *)rpc->cfg.gpu_uuid);
        free((char *)rpc->cfg.process_name);
        free(rpc);
        return NULL;
    }
    return rpc;
}

bool gs_rpc_wait_attached(gs_rpc *rpc, int timeout_ms, gs_attach_info *out)
{
    struct timespec deadline = deadline_after(timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&rpc->lock);
    /* A refusal returns at once: retrying takes seconds and the caller
     * wants to report the bad group/secret. */
    while (!rpc->attached && !rpc->stopping && !rpc->attach_refused) {
        if (pthread_cond_timedwait(&rpc->attached_cond, &rpc->lock, &deadline) == ETIMEDOUT)
            break;
    }
    bool attached = rpc->attached;
    if (attached && out)
        *out = rpc->info;
    if (!attached)
        set_last_error(rpc->not_attached_reason);
    pthread_mutex_unlock(&rpc->lock);
    return attached;
}

/* Queues call and waits for it. Unless the result is GS_RPC_TIMEOUT (the
 * call was abandoned, its reference dropped), the caller still holds its
 * reference: it reads the reply, then calls finish_call(). */
static int run_call(gs_rpc *rpc, rpc_call *call, int wait_ms)
{
    call->wait_ms = wait_ms;
    enum rpc_method method = call->method;
    pthread_mutex_lock(&rpc->lock);
    if (rpc->stop) {
        /* The I/O thread is gone or going (process exit): nobody would ever
         * complete the call. */
        call->refs = 1;
        pthread_mutex_unlock(&rpc->lock);
        set_last_error("the shim's RPC client stopped (process exiting)");
        return GS_RPC_UNAVAILABLE;
    }
    if (!rpc->attached && !(method == M_DETACH && rpc->stopping)) {
        char reason[300];
        snprintf(reason, sizeof reason, "not attached to tokend: %s", rpc->not_attached_reason);
        call->refs = 1; /* the I/O thread never saw it */
        pthread_mutex_unlock(&rpc->lock);
        set_last_error(reason);
        return GS_RPC_UNAVAILABLE;
    }
    pthread_mutex_unlock(&rpc->lock);
    if (!is_stream_call(method) || !send_on_calls_socket(rpc, call, false)) {
        pthread_mutex_lock(&rpc->lock);
        if (rpc->stop) {   /* stopped meanwhile: its last start_queued may have run */
            call->refs = 1;
            pthread_mutex_unlock(&rpc->lock);
            set_last_error("the shim's RPC client stopped (process exiting)");
            return GS_RPC_UNAVAILABLE;
        }
        if (rpc->queue_tail)
            rpc->queue_tail->next = call;
        else
            rpc->queue_head = call;
        rpc->queue_tail = call;
        pthread_mutex_unlock(&rpc->lock);
        wake_io_thread(rpc);
    }

    struct timespec deadline = deadline_after(wait_ms > 0 ? wait_ms : 0);
    pthread_mutex_lock(&rpc->lock);
    while (!call->done) {
        int rv = wait_ms > 0 ? pthread_cond_timedwait(&call->done_cond, &rpc->lock, &deadline)
                             : pthread_cond_wait(&call->done_cond, &rpc->lock);
        if (rv == ETIMEDOUT && !call->done) {
            /* From here the call belongs to the I/O thread alone. */
            call->abandoned = true;
            call_unref_locked(call);
            pthread_mutex_unlock(&rpc->lock);
            wake_io_thread(rpc);
            char reason[160];
            snprintf(reason, sizeof reason, "no reply to %s within %d ms",
                     method_table[method].path, wait_ms);
            set_last_error(reason);
            return GS_RPC_TIMEOUT;
        }
    }
    int result = call->result;
    set_last_error(call->message);
    pthread_mutex_unlock(&rpc->lock);
    return result;
}

static void finish_call(gs_rpc *rpc, rpc_call *call, int result)
{
    if (result == GS_RPC_TIMEOUT)
        return; /* reference already dropped */
    pthread_mutex_lock(&rpc->lock);
    call_unref_locked(call);
    pthread_mutex_unlock(&rpc->lock);
}

static rpc_call *new_caller_call(enum rpc_method method)
{
    rpc_call *call = call_new(method, false);
    if (!call)
        set_last_error("out of memory for an RPC call");
    return call;
}

int gs_rpc_acquire(gs_rpc *rpc, uint32_t timeout_ms, int wait_ms, uint64_t *token_id,
                   uint32_t *quantum_us)
{
    return gs_rpc_acquire_sized(rpc, timeout_ms, wait_ms, 0, false, token_id, quantum_us);
}

static int acquire_token(gs_rpc *rpc, uint32_t timeout_ms, int wait_ms, uint32_t work_item_us, bool doorbell_rang,
                         bool lease_if_free, uint64_t *token_id, uint32_t *quantum_us)
{
    rpc_call *call = new_caller_call(M_ACQUIRE);
    if (!call)
        return GS_RPC_UNAVAILABLE;
    call->request.acquire.timeout_ms = timeout_ms;
    call->request.acquire.work_item_us = work_item_us;
    call->request.acquire.doorbell_rang = doorbell_rang;
    call->request.acquire.lease_if_free = lease_if_free;
    int rc = run_call(rpc, call, wait_ms);
    if (rc == GS_RPC_OK) {
        if (token_id)
            *token_id = call->reply.acquire.token_id;
        if (quantum_us)
            *quantum_us = call->reply.acquire.quantum_us;
    }
    finish_call(rpc, call, rc);
    return rc;
}

int gs_rpc_acquire_sized(gs_rpc *rpc, uint32_t timeout_ms, int wait_ms, uint32_t work_item_us,
                         bool doorbell_rang, uint64_t *token_id, uint32_t *quantum_us)
{
    return acquire_token(rpc, timeout_ms, wait_ms, work_item_us, doorbell_rang, false, token_id, quantum_us);
}

int gs_rpc_lease_if_free(gs_rpc *rpc, int wait_ms, uint64_t *token_id, uint32_t *quantum_us)
{
    return acquire_token(rpc, 0, wait_ms, 0, false, true, token_id, quantum_us);
}

/* ReleaseToken; keep_lease asks to keep the token across an idle gap. */
static int release_token(gs_rpc *rpc, uint64_t token_id, uint64_t used_us, uint64_t overrun_us, bool idle,
                         bool keep_lease, int wait_ms, bool *lease_kept)
{
    rpc_call *call = new_caller_call(M_RELEASE);
    if (!call)
        return GS_RPC_UNAVAILABLE;
    call->request.release.token_id = token_id;
    call->request.release.used_us = used_us;
    call->request.release.overrun_us = overrun_us;
    call->request.release.idle = idle;
    call->request.release.keep_lease = keep_lease;
    int rc = run_call(rpc, call, wait_ms);
    if (rc == GS_RPC_OK && lease_kept)
        *lease_kept = call->reply.release.lease_kept;
    finish_call(rpc, call, rc);
    return rc;
}

int gs_rpc_release(gs_rpc *rpc, uint64_t token_id, uint64_t used_us, uint64_t overrun_us,
                   bool idle, int wait_ms)
{
    return release_token(rpc, token_id, used_us, overrun_us, idle, false, wait_ms, NULL);
}

int gs_rpc_release_idle_lease(gs_rpc *rpc, uint64_t token_id, uint64_t used_us, int wait_ms,
                              bool *lease_kept)
{
    *lease_kept = false;
    return release_token(rpc, token_id, used_us, 0, true, true, wait_ms, lease_kept);
}

int gs_rpc_renew(gs_rpc *rpc, uint64_t token_id, uint64_t used_us, uint32_t work_item_us, int wait_ms,
                 uint64_t *new_token_id, uint32_t *quantum_us)
{
    *new_token_id = 0;
    rpc_call *call = new_caller_call(M_RENEW);
    if (!call)
        return GS_RPC_UNAVAILABLE;
    call->request.renew.token_id = token_id;
    call->request.renew.used_us = used_us;
    call->request.renew.work_item_us = work_item_us;
    int rc = run_call(rpc, call, wait_ms);
    if (rc == GS_RPC_OK && call->reply.renew.renewed) {
        *new_token_id = call->reply.renew.token_id;
        *quantum_us = call->reply.renew.quantum_us;
    }
    finish_call(rpc, call, rc);
    return rc;
}

int gs_rpc_reserve(gs_rpc *rpc, uint64_t bytes, int wait_ms, bool *granted, uint64_t *used,
                   uint64_t *quota)
{
    rpc_call *call = new_caller_call(M_RESERVE);
    if (!call)
        return GS_RPC_UNAVAILABLE;
    call->request.reserve.bytes = bytes;
    int rc = run_call(rpc, call, wait_ms);
    if (rc == GS_RPC_OK) {
        if (granted)
            *granted = call->reply.reserve.granted;
        if (used)
            *used = call->reply.reserve.used;
        if (quota)
            *quota = call->reply.reserve.quota;
    }
    finish_call(rpc, call, rc);
    return rc;
}

int gs_rpc_release_memory(gs_rpc *rpc, uint64_t bytes, int wait_ms, uint64_t *used,
                          uint64_t *quota)
{
    rpc_call *call = new_caller_call(M_RELEASE_MEMORY);
    if (!call)
        return GS_RPC_UNAVAILABLE;
    call->request.release_memory.bytes = bytes;
    int rc = run_call(rpc, call, wait_ms);
    if (rc == GS_RPC_OK) {
        if (used)
            *used = call->reply.release_memory.used;
        if (quota)
            *quota = call->reply.release_memory.quota;
    }
    finish_call(rpc, call, rc);
    return rc;
}

int gs_rpc_memory_info(gs_rpc *rpc, int wait_ms, uint64_t *quota, uint64_t *used, uint64_t *total,
                       uint32_t *pids, int max_pids, int *n_pids)
{
    rpc_call *call = new_caller_call(M_MEMORY_INFO);
    if (!call)
        return GS_RPC_UNAVAILABLE;
    int rc = run_call(rpc, call, wait_ms);
    if (rc == GS_RPC_OK) {
        if (quota)
            *quota = call->reply.memory_info.quota;
        if (used)
            *used = call->reply.memory_info.used;
        if (total)
            *total = call->reply.memory_info.physical_total;
        if (pids && n_pids) {
            /* cuda7: the group's processes, for NVML's process listing */
            int n = (int)call->reply.memory_info.group_pids_count;
            *n_pids = n < max_pids ? n : max_pids;
            for (int i = 0; i < *n_pids; i++)
                pids[i] = call->reply.memory_info.group_pids[i];
        }
    }
    finish_call(rpc, call, rc);
    return rc;
}

void gs_rpc_fork_prepare(gs_rpc *rpc)
{
    if (!rpc)
        return;
    pthread_mutex_lock(&rpc->conn_lock);
}

void gs_rpc_fork_parent(gs_rpc *rpc)
{
    if (!rpc)
        return;
    pthread_mutex_unlock(&rpc->conn_lock);
}

void gs_rpc_fork_child(gs_rpc *rpc)
{
    if (!rpc)
        return;
    /* At once, in the atfork handler: the child's copy of the parent's
     * socket must not keep the parent's session alive (tokend detaches a
     * killed parent on EOF), nor be closed later when its number may have
     * been reused by the child. conn is whole here (conn_lock was held). */
    if (rpc->conn)
        h2_connection_forget(rpc->conn);
    calls_socket_forget(rpc->calls);
    pthread_mutex_init(&rpc->conn_lock, NULL);
}

void gs_rpc_after_fork_child(gs_rpc *rpc)
{
    /* Only this thread exists here. The parent's I/O thread may have held
     * the lock or been inside nghttp2 when fork() copied memory, so nothing
     * of that state is touched: the locks are made anew, the socket copy is
     * closed (the parent's connection lives on), the rest is left behind. */
    init_sync(rpc);
    if (rpc->conn)
        h2_connection_forget(rpc->conn);
    rpc->conn = NULL;
    rpc->calls = NULL;   /* its fd closed in gs_rpc_fork_child; the rest left behind */
    close(rpc->wake_fd); /* shared with the parent's: never write to it */
    rpc->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    rpc->queue_head = rpc->queue_tail = NULL;
    rpc->in_flight = NULL; /* their callers are threads of the parent */
    rpc->stop = rpc->stopping = rpc->joined = false;
    rpc->attached = false;
    rpc->phase = PHASE_DOWN;
    snprintf(rpc->not_attached_reason, sizeof rpc->not_attached_reason,
             "attach of the forked child (pid %d) in progress", (int)getpid());
    if (rpc->wake_fd < 0 || !start_io_thread(rpc)) {
        /* Without a thread every call fails fast with this reason. */
        snprintf(rpc->not_attached_reason, sizeof rpc->not_attached_reason,
                 "cannot start the RPC thread in the forked child (pid %d)", (int)getpid());
        rpc->stop = rpc->stopping = true;
    }
}

void gs_rpc_stop(gs_rpc *rpc)
{
    if (!rpc)
        return;
    pthread_mutex_lock(&rpc->lock);
    if (rpc->stopping && rpc->stop) {
        pthread_mutex_unlock(&rpc->lock);
        return; /* stopped already, or no thread to stop (failed fork restart) */
    }
    bool attached = rpc->attached;
    rpc->stopping = true;
    pthread_cond_broadcast(&rpc->attached_cond);
    pthread_mutex_unlock(&rpc->lock);

    if (attached) {
        rpc_call *detach = call_new(M_DETACH, false);
        if (detach) {
            int rc = run_call(rpc, detach, DETACH_WAIT_MS);
            finish_call(rpc, detach, rc);
        }
    }

    pthread_mutex_lock(&rpc->lock);
    rpc->stop = true;
    pthread_mutex_unlock(&rpc->lock);
    wake_io_thread(rpc);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += STOP_JOIN_MS / 1000;
    if (pthread_timedjoin_np(rpc->io_thread, NULL, &deadline) == 0) {
        pthread_mutex_lock(&rpc->lock);
        rpc->joined = true;
        pthread_mutex_unlock(&rpc->lock);
    }
    /* Nothing is freed here: at exit an application thread may still be
     * inside run_call (it wakes on the lock and cond below) or about to
     * call (rpc->stop fails it fast). The memory goes with the process. */
}

void gs_rpc_free(gs_rpc *rpc)
{
    if (!rpc)
        return;
    gs_rpc_stop(rpc);
    if (!rpc->joined)
        return; /* the I/O thread is stuck in a callback: it still uses rpc */
    close(rpc->wake_fd);
    free((char *)rpc->cfg.socket_path);
    free((char *)rpc->cfg.group);
    free((char *)rpc->cfg.secret);
    free((char *)rpc->cfg.gpu_uuid);
    free((char *)rpc->cfg.process_name);
    pthread_mutex_destroy(&rpc->lock);
    pthread_cond_destroy(&rpc->attached_cond);
    free(rpc);
}

#pragma GCC visibility pop
