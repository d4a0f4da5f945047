/* rpc_client: the shim's gslice.v1.ClientService client (see rpc_client.h):
 * the API callers use. The mechanisms behind it are in rpc_internal.h's
 * files: call objects, the routes a call takes, the session, the I/O
 * thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
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
#include "rpc_internal.h"

#define DETACH_WAIT_MS 300
#define STOP_JOIN_MS 2000

static __thread char rpc_last_error[256];
static __thread bool rpc_last_unsent;

const char *gs_rpc_last_error(void)
{
    return rpc_last_error;
}

bool gs_rpc_last_call_unsent(void)
{
    return rpc_last_unsent;
}

static void set_last_error(const char *message)
{
    snprintf(rpc_last_error, sizeof rpc_last_error, "%s", message);
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

static char *copy_string(const char *s)
{
    return strdup(s ? s : "");
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
        !rpc->cfg.process_name || rpc->wake_fd < 0 || !rpc_start_io_thread(rpc)) {
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
    struct timespec deadline = rpc_deadline_after(timeout_ms > 0 ? timeout_ms : 0);
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
    rpc_last_unsent = true;   /* until the call is handed to the connection */
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
    if (!rpc_is_stream_call(method) || !rpc_send_on_calls_socket(rpc, call, false)) {
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
        rpc_wake_io_thread(rpc);
    }

    struct timespec deadline = rpc_deadline_after(wait_ms > 0 ? wait_ms : 0);
    pthread_mutex_lock(&rpc->lock);
    while (!call->done) {
        int rv = wait_ms > 0 ? pthread_cond_timedwait(&call->done_cond, &rpc->lock, &deadline)
                             : pthread_cond_wait(&call->done_cond, &rpc->lock);
        if (rv == ETIMEDOUT && !call->done) {
            /* From here the call belongs to the I/O thread alone, which may
             * still send it: whether tokend serves it is unknown. */
            rpc_last_unsent = false;
            call->abandoned = true;
            rpc_call_unref_locked(call);
            pthread_mutex_unlock(&rpc->lock);
            rpc_wake_io_thread(rpc);
            char reason[160];
            snprintf(reason, sizeof reason, "no reply to %s within %d ms",
                     rpc_methods[method].path, wait_ms);
            set_last_error(reason);
            return GS_RPC_TIMEOUT;
        }
    }
    int result = call->result;
    rpc_last_unsent = !call->sent;
    set_last_error(call->message);
    pthread_mutex_unlock(&rpc->lock);
    return result;
}

static void finish_call(gs_rpc *rpc, rpc_call *call, int result)
{
    if (result == GS_RPC_TIMEOUT)
        return; /* reference already dropped */
    pthread_mutex_lock(&rpc->lock);
    rpc_call_unref_locked(call);
    pthread_mutex_unlock(&rpc->lock);
}

static rpc_call *new_caller_call(enum rpc_method method)
{
    rpc_last_unsent = true;
    rpc_call *call = rpc_call_new(method, false);
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
    if (rpc->wake_fd < 0 || !rpc_start_io_thread(rpc)) {
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
        rpc_call *detach = rpc_call_new(M_DETACH, false);
        if (detach) {
            int rc = run_call(rpc, detach, DETACH_WAIT_MS);
            finish_call(rpc, detach, rc);
        }
    }

    pthread_mutex_lock(&rpc->lock);
    rpc->stop = true;
    pthread_mutex_unlock(&rpc->lock);
    rpc_wake_io_thread(rpc);
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
