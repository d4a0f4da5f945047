/* rpc_routes: which way a token or memory call goes, and how its answer
 * finds it (see rpc_internal.h).
 *
 * AcquireToken, ReleaseToken, RenewToken, ReserveMemory and ReleaseMemory
 * go, best first:
 *   - on client.calls (calls_socket.h), when the daemon offers it: written
 *     by the calling thread itself, one thread hop less; the answers come
 *     back through the I/O thread;
 *   - as messages on the Calls stream, opened beside Control (a message on
 *     an open stream costs grpcio about half the daemon CPU of a unary
 *     call);
 *   - as unary calls: a daemon without Calls answers it UNIMPLEMENTED, and
 *     the calls sent on it are started again as unary calls, as is every
 *     later one on that connection.
 * On the stream and the socket each answer carries the call_id it
 * completes. Every other method is a unary call (Control a stream of its
 * own). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <pb.h>

#include "gslice/v1/client.pb.h"

#pragma GCC visibility push(hidden)
/* Messages are composed into fixed buffers; cutting a long one short is intended. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "rpc_internal.h"

/* The calls that may go on client.calls or the Calls stream. */
bool rpc_is_stream_call(enum rpc_method method)
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
bool rpc_send_on_calls_socket(gs_rpc *rpc, rpc_call *call, bool io_thread)
{
    uint8_t framed[REQUEST_MAX_BYTES];
    bool sent = false, wake = false;
    pthread_mutex_lock(&rpc->calls_lock);
    if (rpc->calls) {
        /* rpc->client_id is the socket's connection's own: it changes only
         * after the socket is closed (calls_lock). */
        char *client_id = rpc_request_client_id(call);
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
            call->sent = true;
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
        rpc_wake_io_thread(rpc);
    return sent;
}

/* Encodes and starts call on the connection, on client.calls or the Calls
 * stream when it is one of those and one is open; false with call->message set. */
bool rpc_start_call(gs_rpc *rpc, rpc_call *call)
{
    char *client_id = rpc_request_client_id(call);
    if (client_id)
        memcpy(client_id, rpc->client_id, sizeof rpc->client_id);
    uint8_t framed[REQUEST_MAX_BYTES];
    if (rpc_is_stream_call(call->method) && rpc->calls && rpc_send_on_calls_socket(rpc, call, true))
        return true;
    /* A stream we reset (a malformed answer) takes no more calls, though
     * its close is still to come: those go unary meanwhile. */
    bool on_call_stream = rpc_is_stream_call(call->method) && rpc->call_stream_id > 0 &&
                          h2_connection_stream_open_for_messages(rpc->conn, rpc->call_stream_id);
    uint32_t call_id = 0;
    if (on_call_stream) {
        pthread_mutex_lock(&rpc->lock);
        call_id = next_call_id_locked(rpc);
        pthread_mutex_unlock(&rpc->lock);
    }
    size_t len = on_call_stream
                     ? encode_stream_call(call, call_id, framed, sizeof framed)
                     : rpc_codec_encode(rpc_methods[call->method].request, &call->request, framed,
                                        sizeof framed);
    if (len == 0) {
        snprintf(call->message, sizeof call->message, "cannot encode the %s request",
                 rpc_methods[call->method].path);
        return false;
    }
    int32_t id;
    if (on_call_stream) {
        id = h2_connection_send_message(rpc->conn, rpc->call_stream_id, framed, len, call->message,
                                        sizeof call->message)
                 ? rpc->call_stream_id
                 : -1;
    } else {
        id = h2_connection_start_call(rpc->conn, rpc_methods[call->method].path, framed, len,
                                      call->wait_ms, call, call->message, sizeof call->message);
    }
    if (id < 0)
        return false;
    pthread_mutex_lock(&rpc->lock);
    call->stream_id = id;
    call->stream_call_id = call_id;
    call->sent = true;
    call->next = rpc->in_flight;
    rpc->in_flight = call;
    pthread_mutex_unlock(&rpc->lock);
    return true;
}

/* Opens the Calls stream; without it, those calls go unary. */
void rpc_open_call_stream(gs_rpc *rpc)
{
    rpc_call *stream = rpc_call_new(M_CALL_STREAM, true);
    if (!stream)
        return;
    int32_t id = h2_connection_open_stream(rpc->conn, rpc_methods[M_CALL_STREAM].path, stream,
                                           stream->message, sizeof stream->message);
    if (id < 0) {
        rpc_call_free(stream);
        return;
    }
    stream->stream_id = id;
    rpc->call_stream_id = id;
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
void rpc_on_call_stream_closed(gs_rpc *rpc, int status, const char *message)
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
        if (again && rpc_start_call(rpc, call))
            continue;
        rpc_finish_call_io(rpc, call, again ? GS_RPC_UNAVAILABLE : status, again ? call->message : reason);
    }
}

/* One ClientAnswer: completes the call it names (sent the same way). */
bool rpc_handle_stream_answer(gs_rpc *rpc, bool on_socket, const uint8_t *body, size_t len, char *err,
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
        rpc_finish_call_io(rpc, call, status, answer.message);
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
        rpc_finish_call_io(rpc, call, GS_RPC_PROTOCOL, "ClientAnswer of another kind than its call");
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
    rpc_finish_call_io(rpc, call, GS_RPC_OK, "");
    return true;
}

/* calls_socket_read's callback: one answer read from client.calls. */
bool rpc_on_socket_answer(void *owner, const uint8_t *body, size_t len, char *err, size_t err_cap)
{
    return rpc_handle_stream_answer(owner, true, body, len, err, err_cap);
}

/* Attached, and the daemon serves client.calls: the token and memory calls
 * go there from now on. Not reached: they stay on the Calls stream. */
void rpc_open_calls_socket(gs_rpc *rpc)
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
void rpc_close_calls_socket(gs_rpc *rpc, int status, const char *reason)
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
        rpc_finish_call_io(rpc, call, status, reason);
    }
}

#pragma GCC visibility pop
