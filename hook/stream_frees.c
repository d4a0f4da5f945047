/* stream_frees: see stream_frees.h. */
#define _GNU_SOURCE
#include "stream_frees.h"

#include <pthread.h>
#include <stdlib.h>

#include "log.h"
#include "real_driver.h"
#include "stream_capture.h"

/* A free queued on a stream, given back once its event completes. */
typedef struct queued_free {
    CUevent event;
    CUcontext ctx;
    gs_ledger_account *account;
    uint64_t bytes;
} queued_free;

static pthread_mutex_t frees_mu = PTHREAD_MUTEX_INITIALIZER;
static queued_free *frees;
static int n_frees, frees_capacity;   /* n_frees: __atomic (read unlocked by the poll's quick check) */

/* frees_mu held: room for one more; false when the table cannot grow. */
static bool room_locked(void)
{
    if (n_frees < frees_capacity)
        return true;
    int capacity = frees_capacity ? 2 * frees_capacity : 16;
    queued_free *bigger = realloc(frees, (size_t)capacity * sizeof *frees);
    if (!bigger)
        return false;
    frees = bigger;
    frees_capacity = capacity;
    return true;
}

/* frees_mu held: drop entry i (the last one moves into its place). */
static void drop_locked(int i)
{
    frees[i] = frees[n_frees - 1];
    __atomic_store_n(&n_frees, n_frees - 1, __ATOMIC_RELAXED);
}

void gs_stream_free_queued(const gs_ledger_entry *entry, CUdeviceptr dptr, CUstream stream, int ptsz)
{
    if (!entry->reserved || !entry->account) {
        gs_ledger_call_returned();   /* charged nothing: nothing to give back */
        return;
    }
    CUresult (*record)(CUevent, CUstream) = ptsz ? gs_cu.cuEventRecord_ptsz : gs_cu.cuEventRecord;
    CUevent event = NULL;
    CUcontext ctx = NULL;
    int mode = gs_capture_relax();   /* another thread may be capturing in GLOBAL mode */
    bool recorded = record && gs_cu.cuEventCreate && gs_cu.cuCtxGetCurrent &&
                    gs_cu.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx &&
                    gs_cu.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
                    record(event, stream) == CUDA_SUCCESS;
    pthread_mutex_lock(&frees_mu);
    bool queued = recorded && room_locked();
    if (queued) {
        frees[n_frees] = (queued_free){event, ctx, entry->account, entry->bytes};
        __atomic_store_n(&n_frees, n_frees + 1, __ATOMIC_RELEASE);
        gs_ledger_deferred_free(entry->account, entry->bytes);
    }
    pthread_mutex_unlock(&frees_mu);
    if (!queued && event && gs_cu.cuEventDestroy)
        gs_cu.cuEventDestroy(event);
    gs_capture_restore(mode);
    if (!queued) {
        GS_DEBUG("cuMemFreeAsync of %#llx: no event to follow its stream; its %llu bytes stay charged until the "
                 "driver hands the address out again or its context goes", (unsigned long long)dptr,
                 (unsigned long long)entry->bytes);
        gs_ledger_track(GS_ALLOC_DEVICE_PTR, (uint64_t)dptr, entry);
    }
}

void gs_stream_frees_poll(void)
{
    if (!__atomic_load_n(&n_frees, __ATOMIC_ACQUIRE) || !gs_cu.cuEventQuery)
        return;
    int mode = gs_capture_relax();   /* a GLOBAL-mode event query would invalidate another thread's capture */
    pthread_mutex_lock(&frees_mu);
    for (int i = 0; i < n_frees;) {
        queued_free f = frees[i];
        CUcontext popped;
        /* The calling thread may lack the event's context. */
        bool pushed = gs_cu.cuCtxPushCurrent && gs_cu.cuCtxPushCurrent(f.ctx) == CUDA_SUCCESS;
        /* Only a completed event says the free ran: an error (a broken
         * context, whose memory goes only with it) keeps the charge until
         * the context goes (gs_stream_frees_context_gone) or the process. */
        bool reached = gs_cu.cuEventQuery(f.event) == CUDA_SUCCESS;
        if (reached && gs_cu.cuEventDestroy)
            gs_cu.cuEventDestroy(f.event);
        if (pushed)
            gs_cu.cuCtxPopCurrent(&popped);
        if (!reached) {
            i++;
            continue;
        }
        drop_locked(i);
        gs_ledger_deferred_free_done(f.account, f.bytes);
    }
    pthread_mutex_unlock(&frees_mu);
    gs_capture_restore(mode);
}

void gs_stream_frees_context_gone(CUcontext ctx)
{
    if (!__atomic_load_n(&n_frees, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&frees_mu);
    for (int i = 0; i < n_frees;) {
        if (frees[i].ctx != ctx) {
            i++;
            continue;
        }
        queued_free f = frees[i];
        drop_locked(i);
        gs_ledger_deferred_free_done(f.account, f.bytes);
    }
    pthread_mutex_unlock(&frees_mu);
}

void gs_stream_frees_fork_child(void)
{
    pthread_mutex_init(&frees_mu, NULL);
    /* The parent's events and contexts are not the child's, and its table
     * may have been mid-growth on another thread: left to the parent. */
    frees = NULL;
    n_frees = frees_capacity = 0;
}
