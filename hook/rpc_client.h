/* rpc_client: the shim's gRPC client for gslice.v1.ClientService.
 *
 * h2c (HTTP/2 with prior knowledge, libnghttp2) over tokend's unix socket,
 * protobuf by nanopb. One connection per process, owned by one I/O thread;
 * callers from any thread submit a unary call and block on its reply, so
 * the nghttp2 session is never touched concurrently. The I/O thread also
 * holds the Control stream open and delivers its events through callbacks.
 *
 * Lifecycle: gs_rpc_start() connects and attaches in the background. If
 * the connection breaks (daemon restart), the I/O thread reconnects with
 * backoff (10 ms doubling to 1 s), re-attaches declaring
 * cfg.reserved_bytes(), reopens Control, and calls cfg.on_reconnected
 * (the client id changed and any token is gone). After fork(), the child
 * calls gs_rpc_after_fork_child(): it drops the parent's connection
 * (without closing the parent's streams' state) and starts its own.
 *
 * Nothing here is on the kernel-launch fast path. */
#ifndef GSLICE_RPC_CLIENT_H
#define GSLICE_RPC_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Results: 0 OK; > 0 a gRPC status code from the daemon (e.g. 5 NOT_FOUND,
 * 4 DEADLINE_EXCEEDED, 9 FAILED_PRECONDITION, 16 UNAUTHENTICATED);
 * < 0 a transport failure below. gs_rpc_last_error() gives the message
 * (grpc-message or the transport reason) of the calling thread's last call. */
enum {
    GS_RPC_OK = 0,
    GS_RPC_UNAVAILABLE = -1,   /* not connected / attached (yet or any more) */
    GS_RPC_TIMEOUT = -2,       /* no reply within the call's wait */
    GS_RPC_PROTOCOL = -3,      /* malformed reply */
};

typedef struct gs_attach_info {
    char client_id[64];
    char group[128];
    char gpu_uuid[96];
    uint64_t memory_quota;
    uint64_t memory_used;
    uint64_t physical_memory;
    uint32_t quantum_min_us;
    uint32_t quantum_max_us;
    uint32_t grace_us;
    int priority;
    char public_id[32];        /* how tokend's status and logs name this client */
    int on_daemon_loss;        /* the operator's DaemonLossPolicy for the group */
    uint32_t doorbell_slot;    /* the group's preemption doorbell slot + 1; 0: none */
    uint32_t doorbell_client;  /* this client's number on the doorbell page; 0: none */
    bool lease_at_start;       /* the daemon offers a free token as a lease (AttachReply.lease_at_start) */
    /* Where the token and memory calls go: "client.calls" (calls_socket.h),
     * "the Calls stream" or "unary calls". */
    const char *calls_transport;
} gs_attach_info;

typedef struct gs_rpc_config {
    const char *socket_path;   /* tokend's client.sock */
    const char *group;
    const char *secret;
    const char *gpu_uuid;      /* may be "" */
    const char *process_name;
    /* Callbacks run on the I/O thread; keep them short and never call back
     * into gs_rpc_* from them. Any may be NULL. */
    /* lease_reclaim: a lease taken back for a client of no higher class
     * (Revoke.lease_reclaim), not a preemption. */
    void (*on_revoke)(void *ctx, uint64_t token_id, const char *reason, bool lease_reclaim);
    void (*on_quota_changed)(void *ctx, uint64_t memory_quota);
    void (*on_attached)(void *ctx, const gs_attach_info *info, bool reconnect);
    void (*on_disconnected)(void *ctx);
    uint64_t (*reserved_bytes)(void *ctx);  /* re-declared at every (re)attach */
    void *ctx;
    /* Never open the Calls stream: every call unary, as with a daemon older
     * than it (benchmarks compare the two in one run). */
    bool unary_calls_only;
    /* Never use client.calls (calls_socket.h) even when the daemon offers it:
     * the token and memory calls stay on the Calls stream. */
    bool no_calls_socket;
} gs_rpc_config;

typedef struct gs_rpc gs_rpc;

/* Copies cfg (strings included) and starts the I/O thread. Never blocks on
 * the daemon. Returns NULL only when out of memory or threads. */
gs_rpc *gs_rpc_start(const gs_rpc_config *cfg);
/* Waits until attached (true) or timeout_ms passes (false). */
bool gs_rpc_wait_attached(gs_rpc *rpc, int timeout_ms, gs_attach_info *out);

/* Calls; each waits at most wait_ms for its reply (AcquireToken's
 * own server-side timeout is timeout_ms; wait_ms should exceed it). */
int gs_rpc_acquire(gs_rpc *rpc, uint32_t timeout_ms, int wait_ms,
                   uint64_t *token_id, uint32_t *quantum_us);
int gs_rpc_release(gs_rpc *rpc, uint64_t token_id, uint64_t used_us,
                   uint64_t overrun_us, bool idle, int wait_ms);
/* AcquireToken telling the daemon the longest work item (kernel, graph) this
 * process submits, so the quantum covers it (0: unknown), and whether it
 * rang the preemption doorbell first (preempt_doorbell.h). */
int gs_rpc_acquire_sized(gs_rpc *rpc, uint32_t timeout_ms, int wait_ms, uint32_t work_item_us,
                         bool doorbell_rang, uint64_t *token_id, uint32_t *quantum_us);
/* AcquireToken(lease_if_free), at process start: *token_id is a lease on
 * the token if tokend had it free, else 0 (tokend never makes it wait). */
int gs_rpc_lease_if_free(gs_rpc *rpc, int wait_ms, uint64_t *token_id, uint32_t *quantum_us);
/* Idle release that keeps the token as a lease while nobody else waits;
 * *lease_kept says whether the daemon kept it (then token_id is still held). */
int gs_rpc_release_idle_lease(gs_rpc *rpc, uint64_t token_id, uint64_t used_us, int wait_ms,
                              bool *lease_kept);
/* RenewToken: *new_token_id is the fresh slice's token, or 0 when the daemon
 * did not renew (token_id is still held then; release it as usual). */
int gs_rpc_renew(gs_rpc *rpc, uint64_t token_id, uint64_t used_us, uint32_t work_item_us, int wait_ms,
                 uint64_t *new_token_id, uint32_t *quantum_us);
int gs_rpc_reserve(gs_rpc *rpc, uint64_t bytes, int wait_ms,
                   bool *granted, uint64_t *used, uint64_t *quota);
int gs_rpc_release_memory(gs_rpc *rpc, uint64_t bytes, int wait_ms,
                          uint64_t *used, uint64_t *quota);
int gs_rpc_memory_info(gs_rpc *rpc, int wait_ms, uint64_t *quota, uint64_t *used, uint64_t *total,
                       uint32_t *pids, int max_pids, int *n_pids);

const char *gs_rpc_last_error(void);
/* Whether the calling thread's last call failed before it was handed to the
 * connection (not attached, client stopping): tokend never saw it, and it
 * may be sent again. False once it was handed over, whatever the result:
 * after GS_RPC_TIMEOUT, or a transport failure after the send (the
 * connection or client.calls closed, GS_RPC_UNAVAILABLE), tokend may have
 * served it, or may still. */
bool gs_rpc_last_call_unsent(void);

/* fork() handlers (pthread_atfork): prepare/parent around the fork, child
 * in the child at once (closes the child's copy of the connection). */
void gs_rpc_fork_prepare(gs_rpc *rpc);
void gs_rpc_fork_parent(gs_rpc *rpc);
void gs_rpc_fork_child(gs_rpc *rpc);
/* In the child after fork(): forget the parent's connection and thread,
 * start a fresh one (a new client of the same group). */
void gs_rpc_after_fork_child(gs_rpc *rpc);
/* Detach cleanly and stop the I/O thread (process exit). The client stays
 * allocated: other threads may still be inside a call, or make one, while
 * the process exits; those calls fail with GS_RPC_UNAVAILABLE. */
void gs_rpc_stop(gs_rpc *rpc);
/* Stops (if needed) and frees the client. Only when no other thread can
 * use it any more (tests, tools; never from an exit path). */
void gs_rpc_free(gs_rpc *rpc);

#ifdef __cplusplus
}
#endif
#endif
