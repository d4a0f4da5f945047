/* gate_handback: the next group starts when the holder's slice ends, not
 * when tokend's grant reaches it.
 *
 * Why: at every handover the GPU idled for the holder's ReleaseToken round
 * trip and then the grant's way to the next process (~0.5-1 ms here, most
 * of it grpcio), before the next process's first kernel could even be
 * queued. After each burst of a high-priority tenant beside batch work that
 * was ~1.4 ms of idle GPU per burst (issue 23: the neighbours' part of the
 * idle time and the GPU's busy time). tokend already says on the doorbell
 * page which group it grants when the holder releases, and which of its
 * waiters (`next_slot`, `next_client`: preempt_doorbell.h), so:
 *   - the holder, its slice ending (idle, its work done; or at its handover
 *     point while tokend hands over at once, after long kernels have
 *     ended: gate_keeper.c), hands back on the page before it sends its
 *     ReleaseToken (gs_gate_hand_back);
 *   - a process that waits for the token lets its keeper carry the
 *     AcquireToken (gs_gate_ask_via_keeper_locked), so its launching
 *     threads wait on the gate, not inside the call;
 *   - its listener thread, woken by the handback, opens a provisional slice
 *     (token 0, as a head start: gate_head_start.c) when it is the waiter
 *     named next, charged from when the holder's work ends; the grant then
 *     makes it a real slice (gs_gate_keeper_ask_locked). Only that waiter:
 *     when every waiting process of a group started, they time-sliced the
 *     GPU among themselves until the grant, and all but one lapsed.
 * Bounds: as a head start's (GS_GATE_HEAD_START_MAX_NS; later launches wait
 * for the grant), and a process whose work items are longer than that
 * bound does not start before its grant. A start that tokend's grant does
 * not follow within it (tokend decided otherwise since the page was
 * written, or the page was scribbled on) makes the process ignore
 * handbacks for GS_GATE_HANDBACK_QUIET_NS. Off with GSLICE_HANDBACK=0. */
#define _GNU_SOURCE
#include "gate_internal.h"

#include "config.h"
#include "log.h"

void gs_gate_hand_back(gs_gate *g, uint64_t free_at_ns)
{
    if (gs_config_get()->handback && gs_doorbell_hand_back(&g->doorbell, free_at_ns))
        GS_DEBUG("handed back: the next group may start (our work ends in %lld us)",
                 (long long)((int64_t)(free_at_ns - gs_gate_monotonic_ns()) / 1000));
}

bool gs_gate_may_hand_back(gs_gate *g)
{
    return gs_config_get()->handback && gs_doorbell_may_hand_back(&g->doorbell);
}

bool gs_gate_ask_via_keeper_locked(gs_gate *g)
{
    if (g->ask_direct) {
        g->ask_direct = false;   /* the keeper's last ask failed: this one handles it */
        return false;
    }
    if (!gs_config_get()->handback || !g->rpc || !gs_doorbell_handback_may_come(&g->doorbell))
        return false;
    gs_gate_ensure_keeper_locked(g);
    if (!g->keeper_running)
        return false;
    g->ask_via_keeper = true;
    g->keeper_ask_wanted = true;
    pthread_cond_signal(&g->keeper_wake);
    return true;
}

/* Listener thread (mu held), woken by a ring or a handback. */
void gs_gate_handback_heard_locked(gs_gate *g, uint64_t now)
{
    uint64_t free_at;
    if (g->state != GS_GATE_ACQUIRING || !g->ask_via_keeper || g->stopping || now < g->handback_quiet_until_ns ||
        !gs_doorbell_handed_to_this_group(&g->doorbell, now, &g->handback_seen_ns, &free_at))
        return;
    /* Work longer than the provisional slice's bound waits for the grant:
     * a start tokend does not follow (the page's next is a hint: a cap
     * reached since the last event) would run it beside the real holder
     * for all its length (a 400 ms kernel, sliced with its neighbour). */
    if ((uint64_t)gs_gate_work_item_us(g) * 1000ull > GS_GATE_HEAD_START_MAX_NS)
        return;
    gs_gate_open_slice_locked(g, 0, GS_GATE_HEAD_START_QUANTUM_US, false);
    g->head_start = true;
    g->head_start_at_handback = true;
    g->head_start_ns = now;
    if (free_at > now)
        g->grant_ns = free_at;   /* the holder's tail is its own: charged from its end */
    atomic_fetch_add_explicit(&g->n_handback_starts, 1, memory_order_relaxed);
    gs_gate_after_grant_locked(g);
    GS_DEBUG("handback heard: launching before the grant (the holder's work ends in %lld us)",
             (long long)((int64_t)(free_at - now) / 1000));
}
