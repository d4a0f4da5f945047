/* rpc_io_thread: the client's I/O thread (see rpc_internal.h).
 *
 * It owns the h2_connection and runs the connection's life: connect ->
 * Attach -> Control until Ready -> attached; it starts the calls callers
 * queued and completes every call from the replies. On any break it fails
 * what is pending, backs off (10 ms doubling to 1 s; 5 s after a refused
 * Attach) and starts over.
 *
 * wait_ms <= 0 on a call means: no client-side limit (until disconnect). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <pb.h>

#include "gslice/v1/client.pb.h"

#pragma GCC visibility push(hidden)
/* Messages are composed into fixed buffers; cutting a long one short is intended. */
#pragma GCC diagnostic ignored "-Wformat-truncation"
#include "rpc_internal.h"

#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 1000
/* A refused Attach (bad group/secret) will not fix itself quickly. */
#define REFUSED_RETRY_MS 5000
/* Connect -> Attach reply -> Control's Ready must not take longer. */
#define ATTACH_DEADLINE_MS 10000

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* From any thread: the I/O thread leaves its poll() and looks at the queue. */
void rpc_wake_io_thread(gs_rpc *rpc)
{
    uint64_t one = 1;
    ssize_t n = write(rpc->wake_fd, &one, sizeof one);
    (void)n; /* EAGAIN: the counter is already non-zero, the thread will wake */
}

/* The connection is to be closed (and then made again) with reason; the
 * first reason stays. */
void rpc_mark_broken(gs_rpc *rpc, bool refused, const char *reason)
{
    if (rpc->broken)
        return;
    rpc->broken = true;
    rpc->refused = refused;
    snprintf(rpc->broken_reason, sizeof rpc->broken_reason, "%s", reason);
}

/* Starts one of the I/O thread's own calls (nobody waits on it); a call
 * that cannot start is freed, and if it was Attach or Control the
 * connection is broken. */
void rpc_start_internal(gs_rpc *rpc, rpc_call *call)
{
    if (!rpc_start_call(rpc, call)) {
        if (call->method == M_ATTACH || call->method == M_CONTROL)
            rpc_mark_broken(rpc, false, call->message);
        rpc_call_free(call);
    }
}

/* Finishes a caller's call (any outcome); the I/O thread's reference goes. */
static void complete_call(gs_rpc *rpc, rpc_call *call, int status, const char *message)
{
    rpc_call *undo = NULL;
    pthread_mutex_lock(&rpc->lock);
    rpc_remove_in_flight_locked(rpc, call);
    if (status == GS_RPC_OK && !call->have_reply) {
        status = GS_RPC_PROTOCOL;
        message = "reply carried no message";
    }
    call->result = status;
    if (message != call->message)
        snprintf(call->message, sizeof call->message, "%s", message ? message : "");
    call->done = true;
    if (call->abandoned && rpc->phase != PHASE_CLOSING)
        undo = rpc_undo_for_abandoned(call, status);
    pthread_cond_signal(&call->done_cond);
    rpc_call_unref_locked(call);
    pthread_mutex_unlock(&rpc->lock);
    if (undo)
        rpc_start_internal(rpc, undo);
}

/* A call of the application's (unary, or answered on Calls) is over;
 * an internal one (an abandoned call's undo) is just forgotten. */
void rpc_finish_call_io(gs_rpc *rpc, rpc_call *call, int status, const char *message)
{
    if (call->internal) {
        pthread_mutex_lock(&rpc->lock);
        rpc_remove_in_flight_locked(rpc, call);
        pthread_mutex_unlock(&rpc->lock);
        rpc_call_free(call);
        return;
    }
    if (status == GRPC_STATUS_NOT_FOUND && rpc->phase == PHASE_ATTACHED)
        /* Our client_id is gone at the daemon: attach again. */
        rpc_mark_broken(rpc, false, message);
    complete_call(rpc, call, status, message);
}

/* h2_connection's callbacks: a message on a stream, a stream's end. */
static bool on_stream_message(void *owner, void *stream_ctx, const uint8_t *body, size_t len,
                              char *err, size_t err_cap)
{
    gs_rpc *rpc = owner;
    rpc_call *call = stream_ctx;
    if (call->method == M_CONTROL)
        return rpc_handle_control_event(rpc, body, len, err, err_cap);
    if (call->method == M_CALL_STREAM)
        return rpc_handle_stream_answer(rpc, false, body, len, err, err_cap);
    if (call->have_reply) {
        snprintf(err, err_cap, "second message on the unary reply of %s",
                 rpc_methods[call->method].path);
        return false;
    }
    if (!rpc_codec_decode(rpc_methods[call->method].reply, &call->reply, body, len, err, err_cap))
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
        rpc_finish_call_io(rpc, call, status, message);
        return;
    }
    if (call->method == M_CALL_STREAM) {
        rpc_on_call_stream_closed(rpc, status, message);
        rpc_call_free(call);
        return;
    }
    pthread_mutex_lock(&rpc->lock);
    rpc_remove_in_flight_locked(rpc, call);
    pthread_mutex_unlock(&rpc->lock);
    if (rpc->phase != PHASE_CLOSING) {
        if (call->method == M_ATTACH) {
            rpc_on_attach_done(rpc, call, status, message);
        } else if (call->method == M_CONTROL && !is_stopping(rpc)) {
            /* (While stopping, Detach ends Control; the Detach reply matters.) */
            char reason[300];
            snprintf(reason, sizeof reason, "Control stream ended (status %d): %s", status,
                     message);
            rpc_mark_broken(rpc, false, reason);
        }
    }
    rpc_call_free(call);
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
        } else if (!rpc_start_call(rpc, call)) {
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
    rpc->phase_deadline = rpc_deadline_after(ATTACH_DEADLINE_MS);

    rpc_start_attach(rpc, ATTACH_DEADLINE_MS);

    char err[256];
    while (!rpc->broken) {
        if (stop_requested(rpc)) {
            rpc_mark_broken(rpc, false, "the shim is stopping");
            break;
        }
        start_queued(rpc);
        if (rpc->broken)
            break;
        if (!h2_connection_flush(rpc->conn, err, sizeof err)) {
            rpc_mark_broken(rpc, false, err);
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
            rpc_close_calls_socket(rpc, GS_RPC_UNAVAILABLE, err);
        struct pollfd fds[3] = {
            {h2_connection_fd(rpc->conn),
             (short)(POLLIN | (h2_connection_wants_write(rpc->conn) ? POLLOUT : 0)), 0},
            {rpc->wake_fd, POLLIN, 0},
            {rpc->calls ? calls_socket_fd(rpc->calls) : -1,   /* poll skips -1 */
             (short)(POLLIN | (calls_pending ? POLLOUT : 0)), 0},
        };
        int timeout = rpc->phase == PHASE_ATTACHED ? -1 : rpc_ms_until(&rpc->phase_deadline);
        int n = poll(fds, 3, timeout);
        if (n < 0 && errno != EINTR) {
            snprintf(err, sizeof err, "poll: %s", strerror(errno));
            rpc_mark_broken(rpc, false, err);
            break;
        }
        if (fds[1].revents & POLLIN)
            drain_wake_fd(rpc);
        /* Answers first: a Revoke read in the same turn names a token whose
         * grant may be among them. */
        bool malformed;
        if (rpc->calls && (fds[2].revents & (POLLIN | POLLHUP | POLLERR)) &&
            !calls_socket_read(rpc->calls, rpc_on_socket_answer, rpc, &malformed, err, sizeof err))
            rpc_close_calls_socket(rpc, malformed ? GS_RPC_PROTOCOL : GS_RPC_UNAVAILABLE, err);
        if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            if (!h2_connection_read(rpc->conn, err, sizeof err))
                rpc_mark_broken(rpc, false, err);
        }
        if (rpc->phase != PHASE_ATTACHED && !rpc->broken && rpc_ms_until(&rpc->phase_deadline) == 0)
            rpc_mark_broken(rpc, false, "tokend did not complete Attach and Control within 10 s");
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
    rpc_close_calls_socket(rpc, GS_RPC_UNAVAILABLE, reason);
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

/* Connect, serve the connection, back off, again, until stopped. */
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

/* At start and in a forked child. */
bool rpc_start_io_thread(gs_rpc *rpc)
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

#pragma GCC visibility pop
