/* gate_pause: the holder stops submitting but keeps its token, ahead of
 * tokend's Revoke: on a preemption doorbell ring (preempt_doorbell.h), at a
 * grant that follows a higher class's ring, and before a long kernel that
 * would still run when tokend expects a preemptor (anticipation). Each
 * pause is bounded, and a pause nobody answers makes the gate ignore rings
 * (windows) for a quiet period. */
#define _GNU_SOURCE
#include "gate_internal.h"

#include "config.h"
#include "log.h"

/* A pause ends without its answer (the Revoke after a ring; the ring in an
 * expected window): count it. The quiet period its start began stays, so a
 * forged ring or window costs one pause per quiet period, however the
 * pause ends (reopened, or the slice ended as idle meanwhile). */
void gs_gate_pause_unanswered_locked(gs_gate *g)
{
    if (!g->doorbell_pause_until_ns)
        return;
    if (g->pause_anticipated)
        atomic_fetch_add_explicit(&g->n_anticipation_lapses, 1, memory_order_relaxed);
    else
        atomic_fetch_add_explicit(&g->n_doorbell_unanswered, 1, memory_order_relaxed);
    g->doorbell_pause_until_ns = 0;
    g->pause_anticipated = false;
}

/* Stop submitting in this slice until until_ns (mu held): the gate closes
 * as for a Revoke, the token is kept. A Revoke ends the slice meanwhile;
 * without one, the first launch past until_ns reopens the gate
 * (gs_gate_doorbell_resume_locked). */
static bool pause_slice_locked(gs_gate *g, uint64_t until_ns)
{
    if (g->state != GS_GATE_HOLDING || g->revoke_pending || g->doorbell_pause_until_ns || g->stopping)
        return false;
    uint32_t generation = atomic_load_explicit(&g->open, memory_order_relaxed);
    if (generation == 0)
        return false;
    g->doorbell_generation = generation;
    g->doorbell_pause_until_ns = until_ns;
    atomic_store_explicit(&g->open, 0, memory_order_release);
    return true;
}

/* Preemption doorbell: a ring pauses the slice for at most
 * GS_GATE_DOORBELL_PAUSE_NS and starts GS_GATE_DOORBELL_QUIET_NS in which
 * rings are ignored, unless tokend's Revoke answers it. A ring during an
 * anticipation pause is the one expected: the pause becomes a ring's. */
void gs_gate_doorbell_pause_locked(gs_gate *g, const char *why)
{
    uint64_t now = gs_gate_monotonic_ns();
    if (now < g->doorbell_quiet_until_ns)
        return;
    if (g->pause_anticipated && g->doorbell_pause_until_ns && g->state == GS_GATE_HOLDING && !g->revoke_pending) {
        g->pause_anticipated = false;
        g->anticipation_quiet_until_ns = 0;   /* the window was right */
        if (g->doorbell_pause_until_ns < now + GS_GATE_DOORBELL_PAUSE_NS)
            g->doorbell_pause_until_ns = now + GS_GATE_DOORBELL_PAUSE_NS;
    } else if (!pause_slice_locked(g, now + GS_GATE_DOORBELL_PAUSE_NS)) {
        return;
    }
    g->doorbell_quiet_until_ns = now + GS_GATE_DOORBELL_QUIET_NS;
    g->ring_pause_ns = now;
    atomic_store_explicit(&g->preempted_ns, now, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->n_doorbell_pauses, 1, memory_order_relaxed);
    uint64_t queued_end = __atomic_load_n(&g->newest_end_ns, __ATOMIC_RELAXED);
    /* With what the estimate rests on: a checkpoint every `interval`
     * launches at `per launch` of GPU time each (the H100 trace's question:
     * 7 ms ran after rings whose estimate said 1 ms). */
    GS_DEBUG("token %llu: preemption doorbell %s, submissions paused (queued work ends in about %lld us; "
             "checkpoint every %d launches, %u us per launch, longest %u us)",
             (unsigned long long)g->token_id, why, (long long)((int64_t)(queued_end - now) / 1000),
             (int)atomic_load_explicit(&g->interval, memory_order_relaxed),
             (unsigned)atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed),
             (unsigned)atomic_load_explicit(&g->longest_work_us, memory_order_relaxed));
}

/* Does work of work_ns starting at work_start_ns wait for a preemptor
 * expected from window_start_ns? Held, it leaves the GPU idle from its
 * start to the arrival; started, it makes the arrival wait for its rest.
 * Short work waits when any of it would run past the window's opening: it
 * idles at most a short kernel, and beside 0.22 ms kernels on an H200 the
 * bursts' p50 target rests on finding the GPU drained. Long work (>=
 * GS_GATE_LONG_KERNEL_US) may run long_overlap_pct percent of its length
 * past the opening (GSLICE_ANTICIPATION_LONG_OVERLAP_PCT, default 50): 0
 * holds every one that reaches the window, which beside a neighbour whose
 * kernels fall the same way against each burst idles up to a kernel per
 * burst (the H200's 8192 matmuls: ~1.2 ms of a 12 ms cycle, the GPU 0.916
 * busy); 50 bounds both costs by half a kernel (0.963); 100 holds only one
 * that would start inside the window. */
bool gs_anticipation_holds(uint64_t work_start_ns, uint64_t work_ns, uint64_t window_start_ns,
                           unsigned long_overlap_pct)
{
    uint64_t may_run_past = 0;
    if (work_ns >= (uint64_t)GS_GATE_LONG_KERNEL_US * 1000ull)
        may_run_past = work_ns / 100 * (long_overlap_pct > 100 ? 100 : long_overlap_pct);
    return work_start_ns + work_ns > window_start_ns + may_run_past;
}

/* Anticipation (mu held, HOLDING): should work of work_ns starting at
 * work_start_ns wait for the window in which tokend expects a preemptor of
 * this slice to ask (gs_anticipation_holds)? Then pause until the ring, the
 * window's end or the bound; windows are then ignored for
 * GS_GATE_ANTICIPATION_QUIET_NS unless the ring comes. */
bool gs_gate_anticipation_pause_locked(gs_gate *g, uint64_t now, uint64_t work_start_ns, uint64_t work_ns)
{
    uint64_t start, end;
    if (g->revoke_pending || g->wrap_up || now < g->anticipation_quiet_until_ns ||
        !gs_doorbell_expected_preemption(&g->doorbell, now, g->head_start_at_handback, &start, &end) ||
        !gs_anticipation_holds(work_start_ns, work_ns, start, gs_config_get()->anticipation_long_overlap_pct))
        return false;
    uint64_t bound = now + GS_GATE_ANTICIPATION_PAUSE_NS;
    if (!pause_slice_locked(g, end < bound ? end : bound))
        return false;
    g->pause_anticipated = true;
    g->anticipation_quiet_until_ns = now + GS_GATE_ANTICIPATION_QUIET_NS;
    atomic_fetch_add_explicit(&g->n_anticipation_pauses, 1, memory_order_relaxed);
    GS_DEBUG("token %llu: a preemptor is expected in %lld us; the next kernel (ending in %lld us) waits",
             (unsigned long long)g->token_id, (long long)((int64_t)(start - now) / 1000),
             (long long)((int64_t)(work_start_ns + work_ns - now) / 1000));
    return true;
}

void gs_gate_doorbell_resume_locked(gs_gate *g, const char *why)
{
    if (g->pause_anticipated)
        why = "no ring in the expected window after";
    gs_gate_pause_unanswered_locked(g);
    atomic_store_explicit(&g->open, g->doorbell_generation, memory_order_release);
    GS_DEBUG("token %llu: %s the pause; submitting again", (unsigned long long)g->token_id, why);
    pthread_cond_broadcast(&g->changed);
}

/* A new ring that stops this slice (mu held): close the gate as a Revoke
 * would, but keep the token; tokend's Revoke (about 1 ms behind) ends the
 * slice as usual. Each ring once. The listener thread does this when the
 * ring wakes it, and a launch of the holder's when it reaches the gate
 * first: the listener's wake-up took 0.1 ms and more on a loaded machine,
 * and a ringer wakes the listeners only once its own launch is queued. */
void gs_gate_heed_ring_locked(gs_gate *g, uint64_t now, const char *why)
{
    uint64_t rang = gs_doorbell_last_ring_ns(&g->doorbell);
    if (rang == g->ring_handled_ns)
        return;
    g->ring_handled_ns = rang;
    if (g->state == GS_GATE_HOLDING && gs_doorbell_ring_applies(&g->doorbell, now))
        gs_gate_doorbell_pause_locked(g, why);
}

/* The listener thread woke (preempt_doorbell.h): a ring (above), or a
 * handback to this group: it may start before its grant (gate_handback.c). */
static void on_doorbell(void *ctx)
{
    gs_gate *g = ctx;
    pthread_mutex_lock(&g->mu);
    uint64_t now = gs_gate_monotonic_ns();
    gs_gate_heed_ring_locked(g, now, "rang");
    gs_gate_handback_heard_locked(g, now);
    pthread_mutex_unlock(&g->mu);
}

void gs_gate_attach_doorbell(gs_gate *g, const char *socket_path, uint32_t slot, uint32_t client, int priority)
{
    gs_doorbell_attach(&g->doorbell, socket_path, slot, client, priority, on_doorbell, g);
}
