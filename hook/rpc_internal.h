/* rpc_internal: what the RPC client's modules share (hidden; the rest of
 * the shim uses rpc_client.h only).
 *
 *   rpc_client.c     the API: start, wait for the attach, the calls a
 *                    caller blocks on, fork, stop
 *   rpc_call.c       call objects: the method table, references, the
 *                    in-flight list, the undo of a grant nobody waits for
 *   rpc_routes.c     which way a token or memory call goes (client.calls,
 *                    the Calls stream, or unary) and how its answer finds it
 *   rpc_session.c    Attach's reply and Control's events (Ready, Revoke,
 *                    quota changed)
 *   rpc_io_thread.c  the I/O thread: a connection's life, queued calls
 *                    started, calls completed, reconnect with back-off
 *
 * Threads: callers build a call object, queue it (or send it on
 * client.calls themselves) and wait on its condvar; the I/O thread owns
 * the h2_connection and completes every call. Lock order: calls_lock,
 * conn_lock, lock. "_locked" functions take rpc->lock held. */
#ifndef GSLICE_RPC_INTERNAL_H
#define GSLICE_RPC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include <pb.h>

#include "gslice/v1/client.pb.h"

#include "calls_socket.h"
#include "h2_connection.h"
#include "rpc_client.h"
#include "rpc_codec.h"

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
#define RPC_METHOD_COUNT (M_CALL_STREAM + 1)

typedef struct rpc_method_info {
    const char *path;
    const pb_msgdesc_t *request;
    const pb_msgdesc_t *reply;
} rpc_method_info;

extern const rpc_method_info rpc_methods[RPC_METHOD_COUNT];

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
    bool sent;                  /* handed to the connection: tokend may have served it (under rpc->lock) */
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

static inline struct timespec rpc_deadline_after(int ms)
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

static inline int rpc_ms_until(const struct timespec *deadline)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)(deadline->tv_sec - now.tv_sec) * 1000 +
                 (deadline->tv_nsec - now.tv_nsec) / 1000000;
    return ms < 0 ? 0 : ms > 1000000 ? 1000000 : (int)ms + 1;
}

/* rpc_call.c */
rpc_call *rpc_call_new(enum rpc_method method, bool internal);
void rpc_call_free(rpc_call *call);
void rpc_call_unref_locked(rpc_call *call);
void rpc_remove_in_flight_locked(gs_rpc *rpc, rpc_call *call);
char *rpc_request_client_id(rpc_call *call);
rpc_call *rpc_undo_for_abandoned(const rpc_call *call, int status);

/* rpc_routes.c */
bool rpc_is_stream_call(enum rpc_method method);
bool rpc_send_on_calls_socket(gs_rpc *rpc, rpc_call *call, bool io_thread);
bool rpc_start_call(gs_rpc *rpc, rpc_call *call);
void rpc_open_call_stream(gs_rpc *rpc);
void rpc_on_call_stream_closed(gs_rpc *rpc, int status, const char *message);
bool rpc_handle_stream_answer(gs_rpc *rpc, bool on_socket, const uint8_t *body, size_t len, char *err,
                              size_t err_cap);
bool rpc_on_socket_answer(void *owner, const uint8_t *body, size_t len, char *err, size_t err_cap);
void rpc_open_calls_socket(gs_rpc *rpc);
void rpc_close_calls_socket(gs_rpc *rpc, int status, const char *reason);

/* rpc_session.c */
void rpc_start_attach(gs_rpc *rpc, int wait_ms);
void rpc_on_attach_done(gs_rpc *rpc, rpc_call *call, int status, const char *message);
bool rpc_handle_control_event(gs_rpc *rpc, const uint8_t *body, size_t len, char *err, size_t err_cap);

/* rpc_io_thread.c */
bool rpc_start_io_thread(gs_rpc *rpc);
void rpc_wake_io_thread(gs_rpc *rpc);
void rpc_mark_broken(gs_rpc *rpc, bool refused, const char *reason);
void rpc_start_internal(gs_rpc *rpc, rpc_call *call);
void rpc_finish_call_io(gs_rpc *rpc, rpc_call *call, int status, const char *message);

#endif
