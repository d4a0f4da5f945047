/* kernel_lengths: what the gate knows of its GPU work's length, from
 * checkpoint events. After the launch that ends a countdown (and the first
 * of a slice) an event is recorded on its stream; completed events give
 * the GPU time per launch (over intervals in which the GPU never ran dry),
 * a per-CUfunction / per-CUgraphExec estimate (launches timed alone with a
 * start event just before), and the checkpoint interval (~1 ms of GPU time
 * per interval). At most GS_GATE_MAX_OUTSTANDING checkpoints stay
 * outstanding after a launch. How much may be queued is decided in
 * queue_bound.c. */
#define _GNU_SOURCE
#include "gate_internal.h"

#include <string.h>

#include "real_driver.h"
#include "stream_capture.h"

/* Set when this thread's next checkpoint closes an interval during which the
 * GPU never ran dry (the previous checkpoint was still pending). */
static __thread bool tls_contiguous __attribute__((tls_model("initial-exec")));

/* This thread's start event for its next single-launch checkpoint (it
 * changes hands with the checkpoint slot's, so a recorded one is never
 * re-recorded before it is read). */
static __thread CUevent tls_start __attribute__((tls_model("initial-exec")));
static __thread CUcontext tls_start_ctx __attribute__((tls_model("initial-exec")));
static __thread bool tls_start_armed __attribute__((tls_model("initial-exec")));

/* Take in every checkpoint the GPU has reached (their lengths), from any
 * thread: a slice that drained its work at its end knows that work's length
 * before its process asks for the next token. Otherwise the ask went out
 * with the length unknown (the next launch's checkpoint takes it in): a 1 s
 * kernel of a 30% cap was granted a 21 ms slice, tokend's expiry let the
 * next holder's work share the GPU with it, and it ran (and was charged)
 * 2 s: the group got 9% of the GPU. */
static void complete_oldest_locked(gs_gate *g);

/* checkpoint_mu held. push: the calling thread may lack the checkpoints'
 * context (push each one's around its query). */
static void take_in_reached_locked(gs_gate *g, bool push)
{
    while (g->queue_count > 0) {
        gs_checkpoint *oldest = &g->checkpoints[g->queue[g->queue_head]];
        CUcontext popped;
        bool pushed = push && gs_cu.cuCtxPushCurrent && gs_cu.cuCtxPushCurrent(oldest->ctx) == CUDA_SUCCESS;
        bool reached = gs_cu.cuEventQuery(oldest->event) != CUDA_ERROR_NOT_READY;
        if (reached)
            complete_oldest_locked(g);
        if (pushed)
            gs_cu.cuCtxPopCurrent(&popped);
        if (!reached)
            break;
    }
}

void gs_gate_take_in_lengths_for_the_ask(gs_gate *g)
{
#ifdef GSLICE_TEST_CUT_LENGTHS_WITH_THE_ASK   /* test-only build (hook/build.py TEST_CUTS) */
    return;
#endif
    if (!gs_cu.cuEventQuery)
        return;
    /* An application thread, outside the launch's RELAXED calls: a GLOBAL
     * event query would invalidate another thread's GLOBAL capture. */
    int mode = gs_capture_relax();
    pthread_mutex_lock(&g->checkpoint_mu);
    take_in_reached_locked(g, true);
    pthread_mutex_unlock(&g->checkpoint_mu);
    gs_capture_restore(mode);
}

/* gs_gate_newest_pending_locked from a thread without the context (the keeper):
 * push the checkpoint's context around the query. */
bool gs_gate_newest_pending_any_thread_locked(gs_gate *g)
{
    if (g->queue_count == 0 || !gs_cu.cuEventQuery)
        return false;
    CUcontext ctx = g->checkpoints[g->queue[(g->queue_head + g->queue_count - 1) % GS_GATE_CHECKPOINTS]].ctx;
    CUcontext popped;
    bool pushed = gs_cu.cuCtxPushCurrent && gs_cu.cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
    bool busy = gs_gate_newest_pending_locked(g);
    if (pushed)
        gs_cu.cuCtxPopCurrent(&popped);
    return busy;
}

/* Is GPU work this process queued still running? (The newest checkpoint not
 * reached.) A busy checkpoint lock means a launch is waiting on it: busy. */
bool gs_gate_gpu_work_outstanding(gs_gate *g)
{
    if (pthread_mutex_trylock(&g->checkpoint_mu) != 0)
        return true;
    int mode = gs_capture_relax();   /* from an application's synchronisation too (gate_burst_end.c) */
    bool busy = gs_gate_newest_pending_any_thread_locked(g);
    gs_capture_restore(mode);
    pthread_mutex_unlock(&g->checkpoint_mu);
    return busy;
}

/* The longest work item this process submits, for tokend's quanta and a
 * head start's limit, when long, else 0 (unknown or short): the longest
 * per-function / per-graph / per-copy estimate, each timed by itself. The
 * GPU time per launch counts only where no item was timed, or where it is
 * well above the longest (work of no key, such as batch copies): as a mean
 * over back-to-back launches it also carries their gaps (2016 us for 2 ms
 * kernels), and read as the item it refused a 2 ms neighbour every head
 * start at a handback (limit 2 ms). */
uint32_t gs_gate_work_item_us(gs_gate *g)
{
    uint32_t gpu_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    uint32_t item = atomic_load_explicit(&g->longest_work_us, memory_order_relaxed);
    if (gpu_us > item + item / 4)
        item = gpu_us;
    return item >= GS_GATE_LONG_KERNEL_US ? item : 0;
}

/* The process's GPU time per launch when its kernels are long, else 0. */
uint64_t gs_gate_long_kernel_ns(gs_gate *g)
{
    uint32_t kernel_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    return kernel_us >= GS_GATE_LONG_KERNEL_US ? (uint64_t)kernel_us * 1000ull : 0;
}

/* Stream capture: the newest checkpoint event was recorded in a
 * stream that was not capturing, so waiting for it is allowed (the keeper
 * runs in RELAXED capture mode). */
void gs_gate_wait_newest_checkpoint(gs_gate *g)
{
    if (!gs_cu.cuEventSynchronize)
        return;
    pthread_mutex_lock(&g->checkpoint_mu);
    if (g->queue_count > 0) {
        gs_checkpoint *newest = &g->checkpoints[g->queue[(g->queue_head + g->queue_count - 1) % GS_GATE_CHECKPOINTS]];
        CUcontext popped;
        bool pushed = gs_cu.cuCtxPushCurrent && gs_cu.cuCtxPushCurrent(newest->ctx) == CUDA_SUCCESS;
        gs_cu.cuEventSynchronize(newest->event);
        if (pushed)
            gs_cu.cuCtxPopCurrent(&popped);
    }
    pthread_mutex_unlock(&g->checkpoint_mu);
}

/* Each work key has two slots (a pair): two keys whose hash meets keep
 * both estimates. With one slot, a process alternating a 2 ms fill and a
 * 30 us kernel whose keys met (1 run in 64: kernel keys are heap
 * addresses) had its fill's estimate replaced by the kernel's at every
 * kernel, and reported 30 us as its longest work. */
static gs_work_estimate *estimate_pair(gs_gate *g, const void *work)
{
    uintptr_t h = (uintptr_t)work;
    h ^= h >> 17;
    h *= 0x9E3779B1u;
    return &g->estimates[((h >> 7) % (GS_GATE_WORK_ESTIMATES / 2)) * 2];
}

/* The slot holding this work's estimate, or NULL. */
static gs_work_estimate *estimate_find(gs_gate *g, const void *work)
{
    gs_work_estimate *pair = estimate_pair(g, work);
    return pair[0].work == work ? &pair[0] : pair[1].work == work ? &pair[1] : NULL;
}

/* The slot to record this work in: its own, else a free one of its pair,
 * else the one of the pair seen least lately. */
static gs_work_estimate *estimate_slot_for(gs_gate *g, const void *work)
{
    gs_work_estimate *pair = estimate_pair(g, work);
    gs_work_estimate *own = estimate_find(g, work);
    if (own)
        return own;
    if (!pair[0].work || !pair[1].work)
        return !pair[0].work ? &pair[0] : &pair[1];
    return pair[0].seen_ns <= pair[1].seen_ns ? &pair[0] : &pair[1];
}

/* The longest estimate among the work seen lately (checkpoint_mu held). */
static void update_longest_locked(gs_gate *g, uint64_t now)
{
    uint32_t longest = 0;
    uint64_t seen = now;
    for (int i = 0; i < GS_GATE_WORK_ESTIMATES; i++) {
        const gs_work_estimate *e = &g->estimates[i];
        if (e->work && e->gpu_us > longest && now - e->seen_ns < GS_GATE_LONGEST_MEMORY_NS) {
            longest = e->gpu_us;
            seen = e->seen_ns;
        }
    }
    g->longest_seen_ns = seen;
    atomic_store_explicit(&g->longest_work_us, longest, memory_order_relaxed);
}

/* This work's own estimate (0: unknown), before a launch of it: the launch
 * keeps it among the work seen lately. */
uint32_t gs_gate_work_estimate_us(gs_gate *g, const void *work)
{
    if (!work)
        return 0;
    pthread_mutex_lock(&g->checkpoint_mu);
    gs_work_estimate *e = estimate_find(g, work);
    uint32_t us = 0;
    if (e) {
        us = e->gpu_us;
        uint64_t now = gs_gate_monotonic_ns();
        bool forgotten = now - e->seen_ns >= GS_GATE_LONGEST_MEMORY_NS;
        e->seen_ns = now;
        if (forgotten || us > atomic_load_explicit(&g->longest_work_us, memory_order_relaxed) ||
            now - g->longest_seen_ns >= GS_GATE_LONGEST_MEMORY_NS)
            update_longest_locked(g, now);
    }
    pthread_mutex_unlock(&g->checkpoint_mu);
    return us;
}

/* One launch of `work` took `us` from its stream reaching it to its end.
 * The first launch of a slice may have queued behind the previous holder's
 * tail (up to a whole kernel of someone else's), so its sample may only
 * shrink an estimate already measured past a slice's first launch
 * ("solid"); otherwise shrink at once, grow half way (a kernel's length
 * also follows its arguments). The first measurement is taken as is (a
 * key new to its slot starts afresh). */
static void record_estimate_locked(gs_gate *g, const void *work, uint32_t us, bool first_of_slice)
{
    gs_work_estimate *e = estimate_slot_for(g, work);
    if (e->work != work) {
        e->work = work;
        e->solid = false;
    } else if (us > e->gpu_us) {
        if (first_of_slice && e->solid)
            return;
        us = e->gpu_us + (us - e->gpu_us) / 2;
    }
    e->solid = e->solid || !first_of_slice;
    e->gpu_us = us ? us : 1;   /* measured, if under 1 us: 0 reads as unknown (the process's GPU time per launch) */
    e->seen_ns = gs_gate_monotonic_ns();
    update_longest_locked(g, e->seen_ns);
}

/* (1 - 1/WINDOW)^launches, by squaring (no libm in the shim). */
static double launch_weight_kept(uint32_t launches)
{
    if (launches >= 64u * GS_GATE_LAUNCH_GPU_WINDOW)
        return 0.0;
    double kept = 1.0, base = 1.0 - 1.0 / GS_GATE_LAUNCH_GPU_WINDOW;
    for (uint32_t n = launches; n; n >>= 1, base *= base)
        if (n & 1)
            kept *= base;
    return kept;
}

uint32_t gs_launch_gpu_time_add(gs_launch_gpu_time *t, double interval_us, uint32_t launches)
{
    if (launches > 0 && interval_us >= 0) {
        double kept = launch_weight_kept(launches);
        t->gpu_us = t->gpu_us * kept + interval_us;
        t->launches = t->launches * kept + launches;
    }
    return t->launches > 0 ? (uint32_t)(t->gpu_us / t->launches + 0.5) : 0;
}

/* Work keys for copies and fills: odd values, which no CUfunction or
 * CUgraphExec (pointers) takes; one per kind and power of two of size. */
const void *gs_copy_work_key(unsigned kind, size_t bytes)
{
    unsigned bucket = bytes ? 64u - (unsigned)__builtin_clzll((unsigned long long)bytes) : 0u;
    return (const void *)(uintptr_t)((((uintptr_t)bucket << 4 | kind) << 1) | 1u);
}

static void adapt_interval(gs_gate *g, float ms, uint32_t launches, bool contiguous)
{
    /* GPU time per launch only where the GPU was busy the whole interval:
     * across an idle gap (think time) the events measure the gap too. */
    if (contiguous) {
        if (g->launch_gpu_from_timed)
            g->launch_gpu_time = (gs_launch_gpu_time){0, 0};
        atomic_store_explicit(&g->launch_gpu_us,
                              gs_launch_gpu_time_add(&g->launch_gpu_time, (double)ms * 1000.0, launches),
                              memory_order_relaxed);
        g->launch_gpu_from_timed = false;
    }
    /* Aim: one checkpoint interval ~ 1 ms of GPU timeline, at the process's
     * GPU time per launch (over its mix of launches, not this interval's). */
    double per_launch_us = contiguous ? g->launch_gpu_time.gpu_us / g->launch_gpu_time.launches
                                      : (double)ms * 1000.0 / (double)launches;
    double target = per_launch_us > 0 ? 1000.0 / per_launch_us : GS_GATE_MAX_INTERVAL;
    /* Grow smoothly, shrink at once: longer kernels must not queue for
     * several intervals at the old, larger count. */
    double current = (double)atomic_load_explicit(&g->interval, memory_order_relaxed);
    double next = target < current ? target : 0.5 * current + 0.5 * target;
    if (next < GS_GATE_MIN_INTERVAL)
        next = GS_GATE_MIN_INTERVAL;
    if (next > GS_GATE_MAX_INTERVAL)
        next = GS_GATE_MAX_INTERVAL;
    atomic_store_explicit(&g->interval, (int32_t)next, memory_order_relaxed);
}

static void complete_oldest_locked(gs_gate *g)
{
    int idx = g->queue[g->queue_head];
    g->queue_head = (g->queue_head + 1) % GS_GATE_CHECKPOINTS;
    g->queue_count--;
    gs_checkpoint *cp = &g->checkpoints[idx];
    if (g->last_done >= 0) {
        gs_checkpoint *last = &g->checkpoints[g->last_done];
        float ms = 0;
        /* An interval spanning two slices holds the other holders' work
         * between them: it measures nothing of ours. */
        bool contiguous = cp->contiguous && last->generation == cp->generation;
        if (last->ctx == cp->ctx && cp->launches > 0 && gs_cu.cuEventElapsedTime &&
            gs_cu.cuEventElapsedTime(&ms, last->event, cp->event) == CUDA_SUCCESS)
            adapt_interval(g, ms, cp->launches, contiguous);
        last->state = 0;
    }
    float own_ms = 0;
    if (cp->timed && cp->work && gs_cu.cuEventElapsedTime &&
        gs_cu.cuEventElapsedTime(&own_ms, cp->start, cp->event) == CUDA_SUCCESS) {
        uint32_t own_us = (uint32_t)(own_ms * 1000.0f);
        record_estimate_locked(g, cp->work, own_us, cp->first_of_slice);
        /* One launch timed alone: also the process's GPU time per launch,
         * until an interval the GPU never ran dry measures it. Each such
         * sample is an upper bound (the launch may have waited for the
         * engine), so it shrinks at once and grows half way: a first 1 s
         * kernel slowed to 2 s by a neighbour's work kept the process at
         * "2 s per launch" for good (every slice one kernel, no interval
         * contiguous), and its slices and renewals were sized for two. */
        uint32_t current = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
        if (current == 0 || g->launch_gpu_from_timed) {
            uint32_t next = current == 0 || own_us <= current ? own_us : current + (own_us - current) / 2;
            atomic_store_explicit(&g->launch_gpu_us, next, memory_order_relaxed);
            g->launch_gpu_from_timed = true;
        }
    }
    cp->timed = false;
    cp->state = 2;
    g->last_done = idx;
}

static void wait_oldest_locked(gs_gate *g)
{
    atomic_fetch_add_explicit(&g->n_checkpoint_waits, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
    gs_cu.cuEventSynchronize(g->checkpoints[g->queue[g->queue_head]].event);
    atomic_fetch_sub_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
    complete_oldest_locked(g);
}

void gs_gate_wait_outstanding_down_to(gs_gate *g, int n)
{
    if (!gs_cu.cuEventSynchronize)
        return;
    pthread_mutex_lock(&g->checkpoint_mu);
    while (g->queue_count > n) {
        CUcontext popped;
        bool pushed = gs_cu.cuCtxPushCurrent &&
                      gs_cu.cuCtxPushCurrent(g->checkpoints[g->queue[g->queue_head]].ctx) == CUDA_SUCCESS;
        wait_oldest_locked(g);
        if (pushed)
            gs_cu.cuCtxPopCurrent(&popped);
    }
    pthread_mutex_unlock(&g->checkpoint_mu);
}

bool gs_gate_newest_pending_locked(gs_gate *g)
{
    if (g->queue_count == 0)
        return false;
    gs_checkpoint *newest = &g->checkpoints[g->queue[(g->queue_head + g->queue_count - 1) % GS_GATE_CHECKPOINTS]];
    return gs_cu.cuEventQuery(newest->event) == CUDA_ERROR_NOT_READY;
}

void gs_gate_mark_start(CUstream stream, int ptsz)
{
    tls_start_armed = false;
    CUcontext ctx = NULL;
    if (!gs_cu.cuEventCreate || !gs_cu.cuEventRecord || !gs_cu.cuEventElapsedTime || !gs_cu.cuCtxGetCurrent ||
        gs_cu.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return;
    if (tls_start && tls_start_ctx != ctx) {
        if (gs_cu.cuEventDestroy)
            gs_cu.cuEventDestroy(tls_start);
        tls_start = NULL;
    }
    if (!tls_start && gs_cu.cuEventCreate(&tls_start, 0) != CUDA_SUCCESS) {
        tls_start = NULL;
        return;
    }
    tls_start_ctx = ctx;
    CUresult (*record)(CUevent, CUstream) = ptsz ? gs_cu.cuEventRecord_ptsz : gs_cu.cuEventRecord;
    tls_start_armed = record && record(tls_start, stream) == CUDA_SUCCESS;
}

void gs_gate_checkpoint(gs_gate *g, CUstream stream, int ptsz, uint32_t launches, const void *work)
{
    if (!gs_cu.cuEventCreate || !gs_cu.cuEventRecord || !gs_cu.cuEventQuery || !gs_cu.cuEventSynchronize ||
        !gs_cu.cuCtxGetCurrent)
        return;
    CUcontext ctx = NULL;
    if (gs_cu.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx)
        return;
    pthread_mutex_lock(&g->checkpoint_mu);
    atomic_fetch_add_explicit(&g->n_checkpoints, 1, memory_order_relaxed);
    take_in_reached_locked(g, false);
    bool contiguous = tls_contiguous || g->queue_count > 0;
    tls_contiguous = false;
    while (g->queue_count >= gs_gate_outstanding_checkpoints(g))
        wait_oldest_locked(g);
    /* What this checkpoint closes is queued behind what is still
     * outstanding (a holder alone keeps several: queue_bound.c), else all
     * that is queued (running or about to): in GPU time, the launch's own
     * estimate when it closes one launch, else its launches at the
     * process's GPU time per launch (kernels, graphs, copies and fills
     * alike). */
    uint64_t work_us = 0;
    if (work && launches == 1) {
        gs_work_estimate *e = estimate_find(g, work);
        work_us = e ? e->gpu_us : 0;
    }
    if (!work_us)
        work_us = (uint64_t)(launches ? launches : 1) * atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    uint64_t queued_from = gs_gate_monotonic_ns();
    uint64_t before = __atomic_load_n(&g->newest_end_ns, __ATOMIC_RELAXED);
    if (g->queue_count > 0 && before > queued_from)
        queued_from = before;
    /* Atomic: the keeper reads it under g->mu, not checkpoint_mu. */
    __atomic_store_n(&g->newest_end_ns, queued_from + work_us * 1000ull, __ATOMIC_RELAXED);
    int idx = -1;
    for (int i = 0; i < GS_GATE_CHECKPOINTS; i++)
        if (g->checkpoints[i].state == 0) {
            idx = i;
            break;
        }
    if (idx >= 0) {
        gs_checkpoint *cp = &g->checkpoints[idx];
        if (cp->event && cp->ctx != ctx) {
            if (gs_cu.cuEventDestroy) {
                gs_cu.cuEventDestroy(cp->event);
                if (cp->start)
                    gs_cu.cuEventDestroy(cp->start);
            }
            cp->event = NULL;
            cp->start = NULL;
        }
        if (!cp->event && gs_cu.cuEventCreate(&cp->event, 0) != CUDA_SUCCESS)
            cp->event = NULL;
        if (cp->event) {
            cp->ctx = ctx;
            /* Same stream semantics as the launch: _ptsz launches record
             * on the per-thread stream. */
            CUresult (*record)(CUevent, CUstream) = ptsz ? gs_cu.cuEventRecord_ptsz : gs_cu.cuEventRecord;
            if (record(cp->event, stream) == CUDA_SUCCESS) {
                cp->state = 1;
                cp->launches = launches;
                cp->work = work;
                cp->generation = atomic_load_explicit(&g->open, memory_order_relaxed);
                cp->first_of_slice = cp->generation != g->newest_generation;
                g->newest_generation = cp->generation;
                /* The launch's start event becomes the slot's; the slot's
                 * spare (same context) becomes the thread's next one. */
                cp->timed = work && launches == 1 && tls_start_armed && tls_start_ctx == ctx;
                if (cp->timed) {
                    CUevent spare = cp->start;
                    cp->start = tls_start;
                    tls_start = spare;
                }
                cp->contiguous = contiguous;
                g->queue[(g->queue_head + g->queue_count) % GS_GATE_CHECKPOINTS] = idx;
                g->queue_count++;
            }
        }
    }
    tls_start_armed = false;
    pthread_mutex_unlock(&g->checkpoint_mu);
}

void gs_gate_note_gap(void) { tls_contiguous = false; }

void gs_gate_note_fed(gs_gate *g)
{
    /* Contiguous only if the running kernel outlasted the pacing sleep: an
     * estimate too long lets the GPU run dry, and measuring across that gap
     * would keep the estimate too long. */
    pthread_mutex_lock(&g->checkpoint_mu);
    tls_contiguous = gs_gate_newest_pending_locked(g);
    pthread_mutex_unlock(&g->checkpoint_mu);
}

/* fork(): both locks held by gs_gate_fork_prepare; the child's CUDA state is gone. */
void gs_gate_kernel_lengths_fork_child(gs_gate *g)
{
    g->newest_end_ns = 0;
    memset(g->checkpoints, 0, sizeof g->checkpoints);
    memset(g->estimates, 0, sizeof g->estimates);
    atomic_store(&g->longest_work_us, 0);
    g->longest_seen_ns = 0;
    g->launch_gpu_from_timed = false;
    g->launch_gpu_time = (gs_launch_gpu_time){0, 0};
    tls_start = NULL;
    tls_start_armed = false;
    g->queue_head = g->queue_count = 0;
    g->last_done = -1;
}
