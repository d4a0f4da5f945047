/* queue_bound: how much GPU work this process keeps queued past its gate,
 * which is what the next holder (a preemptor above all) waits for. Decided
 * here: before a checkpointed launch, pacing (a long kernel is submitted
 * only when the queued work is within the feed-ahead margin of its end,
 * while another group wants the GPU), wrap-up (a kernel that would end well
 * past the quantum is not started in the slice), and at a slice's end the
 * handover point (when the release goes out relative to the queued work's
 * estimated end). The lengths come from kernel_lengths.c. */
#define _GNU_SOURCE
#include "gate_internal.h"

#include <sys/prctl.h>

#include "log.h"
#include "real_driver.h"

/* Release this long before a handed-over slice's last long kernel ends: the
 * release, the next grant and its first submission take about that long.
 * In a process preempted lately, only GS_GATE_PREEMPTED_HANDOFF_LEAD_US: the
 * next holder's first kernel then does not queue behind the last one (a
 * preempting class arriving meanwhile would wait for both). */
#define HANDOFF_LEAD_NS 1000000ull

/* A higher class preempted this process lately: keep less queued ahead. */
static bool recently_preempted(gs_gate *g, uint64_t now)
{
    uint64_t preempted = atomic_load_explicit(&g->preempted_ns, memory_order_relaxed);
    return preempted && now - preempted < GS_GATE_PREEMPTION_MEMORY_NS;
}

/* Handoff without idle GPU: a slice handed to someone else is released as
 * soon as the gate is closed, while its last work still runs, so the next
 * holder's grant and first submission overlap it. What is queued is already
 * bounded (checkpoints: ~2 ms of short kernels; pacing: a long kernel and
 * its feed-ahead); with long kernels the release waits until the last one
 * is within the handoff lead of its estimated end. A short tail runs at the
 * start of the next slice and is charged to it: handoffs go both ways, so
 * the tails even out (a deeper queue kept while alone is waited for down
 * to that bound). Returns the time this slice is charged up to: a long
 * kernel still running (a preempted holder releases at once) is charged to
 * this slice up to its estimated end, and work of unknown length (nothing
 * measured yet: it may be a 1 s kernel) is waited for, so it is charged
 * here, not to the next holder. */
uint64_t gs_gate_wait_for_handoff_point(gs_gate *g, bool preempted)
{
    if (!gs_cu.cuEventQuery)
        return gs_gate_monotonic_ns();
    pthread_mutex_lock(&g->checkpoint_mu);
    bool pending = gs_gate_newest_pending_any_thread_locked(g);
    bool deep = g->queue_count > GS_GATE_MAX_OUTSTANDING;   /* queued while alone */
    uint64_t queued_end = g->newest_end_ns;
    pthread_mutex_unlock(&g->checkpoint_mu);
    uint32_t kernel_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    uint32_t longest = atomic_load_explicit(&g->longest_work_us, memory_order_relaxed);
    if (longest > kernel_us)
        kernel_us = longest;
    if (!pending)
        return gs_gate_monotonic_ns();
    if (kernel_us == 0) {
        gs_gate_wait_newest_checkpoint(g);
        return gs_gate_monotonic_ns();
    }
    uint64_t now = gs_gate_monotonic_ns();
    if (kernel_us < GS_GATE_LONG_KERNEL_US) {
        /* What the next holder finds is the shared bound's tail, also where
         * this process queued deeper while it was alone (whoever asks now
         * attached since): the rest is waited for and charged here. A
         * preemptor is granted already: charged up to its estimated end. */
        if (!deep)
            return now;
        if (preempted)
            return queued_end > now ? queued_end : now;
        gs_gate_wait_outstanding_down_to(g, GS_GATE_MAX_OUTSTANDING);
        return gs_gate_monotonic_ns();
    }
    if (preempted)   /* the waiter's work queues behind the tail anyway: grant it now */
        return queued_end > now ? queued_end : now;
    uint64_t lead = recently_preempted(g, now) ? GS_GATE_PREEMPTED_HANDOFF_LEAD_US * 1000ull : HANDOFF_LEAD_NS;
    if (queued_end > now + lead)
        gs_gate_sleep_until_ns(queued_end - lead);
    return gs_gate_monotonic_ns();
}

/* ---- the bound's arithmetic (pure: tests call it through shim_api.h) ---- */

/* How close to the end of its queued work the holder submits more: the
 * submission must reach the GPU before it runs dry (a launch and a
 * wake-up: GS_GATE_FEED_AHEAD_US, plus a quarter of a kernel for the
 * estimate's error), but everything queued is what a preemptor waits for,
 * so a process preempted lately keeps only what its measured submission
 * lag needs (lag_margin_us, 0: none measured yet), within
 * [GS_GATE_PREEMPTED_FEED_AHEAD_MIN_US, GS_GATE_PREEMPTED_FEED_AHEAD_US]. */
uint64_t gs_queue_bound_feed_ahead_ns(uint64_t kernel_ns, bool preempted_lately, uint32_t lag_margin_us)
{
    if (preempted_lately) {
        uint64_t us = lag_margin_us ? (uint64_t)lag_margin_us + GS_GATE_GPU_PICKUP_US : GS_GATE_PREEMPTED_FEED_AHEAD_US;
        if (us < GS_GATE_PREEMPTED_FEED_AHEAD_MIN_US)
            us = GS_GATE_PREEMPTED_FEED_AHEAD_MIN_US;
        if (us > GS_GATE_PREEMPTED_FEED_AHEAD_US)
            us = GS_GATE_PREEMPTED_FEED_AHEAD_US;
        return us * 1000ull;
    }
    return GS_GATE_FEED_AHEAD_US * 1000ull + kernel_ns / GS_GATE_FEED_AHEAD_FRACTION;
}

/* One paced submission's lag (from its deadline to its launch queued) into
 * the smoothed mean (gain 1/8) and mean deviation (gain 1/4), RFC 6298's
 * estimator for round trips; returns the margin that covers nearly every
 * such lag, mean + 4 deviations, in us. A lag past 2 ms counts as 2 ms
 * (the margin is capped far below that anyway). */
uint32_t gs_submit_lag_add(gs_submit_lag *l, uint64_t lag_ns)
{
    uint32_t lag = lag_ns > 2000000ull ? 2000000u : (uint32_t)lag_ns;
    if (l->samples == 0) {
        l->mean_ns = lag;
        l->dev_ns = lag / 2;
    } else {
        uint32_t error = lag > l->mean_ns ? lag - l->mean_ns : l->mean_ns - lag;
        l->dev_ns = l->dev_ns - l->dev_ns / 4 + error / 4;
        l->mean_ns = l->mean_ns - l->mean_ns / 8 + lag / 8;
    }
    if (l->samples < UINT32_MAX)
        l->samples++;
    uint32_t margin_us = (l->mean_ns + 4 * l->dev_ns + 999) / 1000;
    return margin_us ? margin_us : 1;
}

/* When the next submission (a launch of kernel_ns, which opens a batch of
 * launches) may go: at once while nobody else wants the GPU; otherwise
 * once the work already queued (ending at queued_end_ns) is within the
 * feed-ahead margin of its end. So what is queued past the gate, in GPU
 * time, stays under feed-ahead + one batch, whatever the kernels' length. */
uint64_t gs_queue_bound_submit_at_ns(uint64_t now_ns, uint64_t queued_end_ns, uint64_t kernel_ns, bool contended,
                                     bool preempted_lately, uint32_t lag_margin_us)
{
    uint64_t ahead = gs_queue_bound_feed_ahead_ns(kernel_ns, preempted_lately, lag_margin_us);
    if (!contended || queued_end_ns <= now_ns + ahead)
        return now_ns;
    return queued_end_ns - ahead;
}

/* Launches to let through on the fast path before the next check (the
 * checkpoint interval, ~1 ms of GPU time). While another group wants the
 * GPU, a batch is at most GS_GATE_CONTENDED_BATCH_US of GPU time (at least
 * one launch): short kernels are then paced like long ones, in batches. */
int32_t gs_queue_bound_batch_launches(int32_t interval, uint32_t launch_gpu_us, bool contended)
{
    if (!contended || launch_gpu_us == 0)
        return interval;
    uint32_t batch = GS_GATE_CONTENDED_BATCH_US / launch_gpu_us;
    if (batch < 1)
        batch = 1;
    return (int32_t)batch < interval ? (int32_t)batch : interval;
}

/* Checkpoints a launch may leave outstanding, so ~1 ms of GPU work each:
 * GS_GATE_ALONE_OUTSTANDING when this process holds the token alone on the
 * GPU (tokend's page: the only client attached, no limit) and its kernels
 * are known to be short; else GS_GATE_MAX_OUTSTANDING, the ~2 ms a next
 * holder or a preemptor may find queued. (Bounded at 1 alone too, a lone
 * tenant's queue ran dry at every stall of its launching thread over ~2 ms:
 * 96-99.5% of bare on a loaded 2-core machine, where bare stays at 100.)
 * Unknown or long kernels keep one: one launch per checkpoint until the
 * first length is measured may be seconds of 1 s kernels. */
int gs_queue_bound_outstanding(bool alone, uint32_t launch_gpu_us, uint32_t work_item_us)
{
    if (alone && launch_gpu_us > 0 && launch_gpu_us < GS_GATE_LONG_KERNEL_US && work_item_us == 0)
        return GS_GATE_ALONE_OUTSTANDING;
    return GS_GATE_MAX_OUTSTANDING;
}

/* ---- applied ---- */

int gs_gate_outstanding_checkpoints(gs_gate *g)
{
#ifdef GSLICE_TEST_CUT_ALONE_QUEUE   /* test-only build (hook/build.py TEST_CUTS) */
    return GS_GATE_MAX_OUTSTANDING;
#endif
    return gs_queue_bound_outstanding(gs_doorbell_holder_alone(&g->doorbell),
                                      atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed),
                                      gs_gate_work_item_us(g));
}

/* Bound what is queued: another group wants the GPU and this process does
 * not outrank every waiter (tokend's page), or tokend expects a preemptor
 * of this holder (its window on the page) and this process runs long work;
 * not for a ringer's head start (it outranks the holder the page still
 * names: tokend has not seen its ask yet), but for a start at a handback
 * (a neighbour resuming after a burst, the next burst expected).
 * Expected counts as wanted for long work: unbounded, launches pass in
 * checkpoint intervals sized by the mean GPU time per launch, unseen by
 * anticipation, and PyTorch's matmul (a 4-byte fill, then the GEMM) halves
 * that mean. Beside 8192 matmuls on an H200, three 1.8 ms GEMMs passed in
 * one interval 3 ms before a burst, and the burst took 3.9-4.5 ms (1.9 at
 * the median). Short work only queues a ~1 ms interval; pacing it between
 * bursts cost a never-synchronising 0.2 ms neighbour 5% of its throughput
 * on the simulated GPU, for no gain in the bursts' latency. */
static bool queue_bounded(gs_gate *g)
{
    bool at_handback = __atomic_load_n(&g->head_start_at_handback, __ATOMIC_RELAXED);   /* read once */
    if (__atomic_load_n(&g->head_start, __ATOMIC_RELAXED) && !at_handback)
        return false;
    if (gs_doorbell_queue_bounded(&g->doorbell))
        return true;
    uint64_t window_start, window_end;   /* only whether a window is there matters here */
    return gs_gate_work_item_us(g) != 0 &&
           gs_doorbell_expected_preemption(&g->doorbell, gs_gate_monotonic_ns(), at_handback, &window_start,
                                           &window_end);
}

/* Sleep until a pacing deadline with a fine timer slack (its lag is what
 * the feed-ahead must cover), then put the application's back. */
void gs_gate_pacing_sleep_until_ns(uint64_t deadline_ns)
{
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    bool finer = slack > GS_GATE_PACING_TIMER_SLACK_NS &&
                 prctl(PR_SET_TIMERSLACK, GS_GATE_PACING_TIMER_SLACK_NS, 0, 0, 0) == 0;
    gs_gate_sleep_until_ns(deadline_ns);
    if (finer)
        prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
}

void gs_gate_note_submit_lag(gs_gate *g, uint64_t paced_until_ns)
{
    uint64_t now_ns = gs_gate_monotonic_ns();
    if (now_ns < paced_until_ns)
        return;
    pthread_mutex_lock(&g->checkpoint_mu);
    uint32_t margin = gs_submit_lag_add(&g->submit_lag, now_ns - paced_until_ns);
    pthread_mutex_unlock(&g->checkpoint_mu);
    atomic_store_explicit(&g->submit_lag_margin_us, margin, memory_order_relaxed);
}

int32_t gs_gate_batch_launches(gs_gate *g, int32_t interval)
{
    return gs_queue_bound_batch_launches(interval, atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed),
                                         queue_bounded(g));
}

uint64_t gs_gate_checkpoint_before_launch(gs_gate *g, const void *work)
{
    /* This kernel's or graph's own length when known: a process mixing
     * short kernels and long graphs must not start a long one that does not
     * fit because the last thing it measured was short. Copies and fills
     * (no work key) count at the process's GPU time per launch. */
    uint32_t kernel_us = gs_gate_work_estimate_us(g, work);
    if (!kernel_us)
        kernel_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    /* Nobody else wants the GPU: no pacing (no gate closes for anyone, and
     * a late wake-up on a busy machine would only idle the GPU: a lone
     * tenant's p99 paid about 5% for it). Nor when it outranks every group
     * waiting (a high-priority burst beside low-priority work: its launches
     * paced one by one came out at 1.5-2x its p99). Short kernels need no
     * wrap-up, nor anticipation while nobody else wants the GPU. */
    bool contended = queue_bounded(g);
    bool long_kernel = kernel_us >= GS_GATE_LONG_KERNEL_US;
#ifndef GSLICE_TEST_CUT_UNMEASURED_ONE_AT_A_TIME   /* test-only build (hook/build.py TEST_CUTS) */
    if (!kernel_us && gs_cu.cuEventQuery) {
        /* Nothing measured yet (the process's first launches): the work
         * queued may be a 1 s kernel. Until the first checkpoint completes,
         * one launch at a time: a lease at start then held one 1 s kernel
         * of unknown length, not two (a 2.4 s overrun of a 100 ms slice,
         * paid back by the group's next 8 s at a 30% cap). */
        pthread_mutex_lock(&g->checkpoint_mu);
        bool first = g->last_done < 0 && gs_gate_newest_pending_locked(g);
        pthread_mutex_unlock(&g->checkpoint_mu);
        if (first) {
            atomic_fetch_add_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
            gs_gate_wait_newest_checkpoint(g);
            atomic_fetch_sub_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
        }
    }
#endif
    if (!kernel_us || (!long_kernel && !contended) || !gs_cu.cuEventQuery)
        return 0;
    uint64_t kernel_ns = (uint64_t)kernel_us * 1000ull;
    pthread_mutex_lock(&g->checkpoint_mu);
    bool pending = gs_gate_newest_pending_locked(g);
    uint64_t queued_end = g->newest_end_ns;
    pthread_mutex_unlock(&g->checkpoint_mu);
    uint64_t now = gs_gate_monotonic_ns();
    if (!pending || queued_end < now)
        queued_end = now;
    if (long_kernel) {
        pthread_mutex_lock(&g->mu);
        if (g->state == GS_GATE_HOLDING && gs_gate_anticipation_pause_locked(g, now, queued_end, kernel_ns)) {
            pthread_mutex_unlock(&g->mu);
            return 0;   /* gs_gate_enter waits for the ring, the window's end or the bound */
        }
        /* Wrap-up: this kernel would end well past the slice's quantum. */
        if (g->state == GS_GATE_HOLDING && !g->revoke_pending && !g->wrap_up) {
            uint64_t deadline = g->grant_ns + (uint64_t)g->quantum_us * 1000ull;
            if (queued_end + kernel_ns > deadline + kernel_ns / GS_GATE_FEED_AHEAD_FRACTION) {
                g->wrap_up = true;
                atomic_fetch_add_explicit(&g->n_wrap_ups, 1, memory_order_relaxed);
                GS_DEBUG("token %llu: wrap-up: a %llu us kernel after %lld us of queued work would end %lld us "
                         "past the quantum's end", (unsigned long long)g->token_id,
                         (unsigned long long)(kernel_ns / 1000), (long long)((int64_t)(queued_end - now) / 1000),
                         (long long)((int64_t)(queued_end + kernel_ns - deadline) / 1000));
                pthread_cond_signal(&g->keeper_wake);
            }
        }
        pthread_mutex_unlock(&g->mu);
    } else if (contended) {
        /* Short kernels too: a burst expected soon should find the queue
         * drained, not a tail plus a context switch (p50 -0.13 ms beside
         * 0.25 ms neighbours, calibrated simulated GPU, busy unchanged).
         * Their whole batch waits: it is short, and what is queued then
         * ends about when the window opens. */
        pthread_mutex_lock(&g->mu);
        if (g->state == GS_GATE_HOLDING && gs_gate_anticipation_pause_locked(g, now, queued_end, kernel_ns)) {
            pthread_mutex_unlock(&g->mu);
            return 0;
        }
        pthread_mutex_unlock(&g->mu);
    }
    if (!pending)
        return 0;
    /* Pace: submit when the queued work is within the feed-ahead margin of
     * its end, so the GPU stays fed and a closing gate leaves about one
     * batch (one kernel, when long) queued. */
    uint64_t submit_at = gs_queue_bound_submit_at_ns(now, queued_end, kernel_ns, contended, recently_preempted(g, now),
                                                     atomic_load_explicit(&g->submit_lag_margin_us,
                                                                          memory_order_relaxed));
    bool paced = submit_at > now;
    if (paced) {
        /* Waiting for its own GPU work: busy, not idle (the keeper must not
         * end the slice as idle under a paced launch). */
        atomic_fetch_add_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g->n_paced_launches, 1, memory_order_relaxed);
        gs_gate_pacing_sleep_until_ns(submit_at);
        atomic_fetch_sub_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
    }
    gs_gate_note_fed(g);
    return paced ? submit_at : 0;
}
