/* gate_burst_end: a bursty holder's slice ends when the application has
 * waited for its own work, not at the keeper's next idle check.
 *
 * Why: the keeper checks for idleness every max(0.2 ms, two kernels), and
 * on a loaded 2-core machine its timed wake-ups come 0.1-0.8 ms late, so it
 * found the end of a high-priority burst ~0.7 ms after its last kernel
 * (kernel trace, p50): GPU time a waiting neighbour could have used, at
 * every burst (issue 23). An application that synchronises
 * (cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize) and has
 * nothing left on the GPU has, if it is bursty, most likely ended its
 * burst: the keeper is woken to check at once.
 *
 * Only for a process whose idle gaps are long (an inference server between
 * requests: GS_GATE_LONG_IDLE_GAP_NS on average) while another group wants
 * the GPU. A loop that synchronises every few kernels never goes idle, so
 * it is never bursty. A bursty process that launches again before the
 * keeper gets there just keeps its slice (the check sees the launch); one
 * that launches right after asks again, through its ring and head start
 * when it is of a higher class. Off with GSLICE_BURST_END=0. */
#define _GNU_SOURCE
#include "gate_internal.h"

#include "config.h"

void gs_gate_after_app_sync(void)
{
    gs_gate *g = __atomic_load_n(&gs_fast_gate, __ATOMIC_RELAXED);
    if (g == &gs_gate_closed || g == &gs_gate_passthrough || !gs_config_get()->burst_end)
        return;   /* not metered, or several devices (their keepers check as usual), or turned off */
    pthread_mutex_lock(&g->mu);
    if (g->state == GS_GATE_HOLDING && g->token_id != 0 && !g->revoke_pending && !g->head_start &&
        !g->burst_end_ns && g->idle_gap_ns >= GS_GATE_LONG_IDLE_GAP_NS && gs_doorbell_contended(&g->doorbell) &&
        !gs_gate_gpu_work_outstanding(g)) {
        g->burst_end_ns = gs_gate_monotonic_ns();
        atomic_store_explicit(&g->activity, 0, memory_order_relaxed);   /* a launch from now on says "busy" */
        pthread_cond_signal(&g->keeper_wake);
    }
    pthread_mutex_unlock(&g->mu);
}
