/* gate_head_start: a preemptor starts its burst at its ring, not at its
 * grant.
 *
 * Why: a client whose ring stops the holder (preempt_doorbell.h: tokend's
 * flag says its group preempts the holder now) is granted at once when its
 * AcquireToken arrives (tokend's at-once handover): the round trip decides
 * nothing, yet the burst waited for it: ~0.4-1 ms on a loaded 2-core
 * machine, the largest part of a burst's added latency (issue 23). So the
 * ringer opens a provisional slice (token 0) and launches at once, while
 * the keeper thread carries the AcquireToken; the grant then makes the slice
 * a real one, charged from the head start (grant_ns), as the shim measures
 * every slice.
 *
 * Bounds: a provisional slice lasts GS_GATE_HEAD_START_MAX_NS at most; a
 * launch past that waits for the answer, as it would for any grant. If
 * the ask fails (tokend gone, the wait timed out), the gate closes and the
 * next launch asks like any other. What ran meanwhile shared the GPU with
 * the holder's tail, as at-once handover does anyway. Two clients of the
 * top class ringing together both start; tokend grants one and the other's
 * provisional slice ends within the bound. Only when tokend says on the
 * doorbell page that it grants on arrival (`grants_at_once`): with
 * `--preempt-handover at-release` the grant waits for the holder's release,
 * and one tenant submits at a time. GSLICE_HEAD_START=0 turns it off. */
#define _GNU_SOURCE
#include "gate_internal.h"

#include "config.h"
#include "log.h"
#include "rpc_client.h"

/* Called with mu held, state ACQUIRING, after this process rang (called,
 * entered: when its launch reached the shim's slow path, and the gate).
 * The caller wakes the keeper, once the launch is queued (gs_launch_end). */
bool gs_gate_head_start_locked(gs_gate *g, uint64_t called_ns, uint64_t entered_ns)
{
    if (!gs_config_get()->head_start || !g->rpc || !gs_doorbell_grants_at_once(&g->doorbell))
        return false;
    gs_gate_ensure_keeper_locked(g);
    if (!g->keeper_running)
        return false;
    gs_gate_open_slice_locked(g, 0, GS_GATE_HEAD_START_QUANTUM_US, false);
    g->head_start = true;
    g->head_start_at_handback = false;
    g->head_start_ns = g->grant_ns;
    g->keeper_ask_wanted = true;
    atomic_fetch_add_explicit(&g->n_head_starts, 1, memory_order_relaxed);
    /* How long the launch took to get here (what the holder may have fed
     * meanwhile): a trace reads it beside the application's own clock. */
    GS_DEBUG("head start: launching at the ring, %.1f us after the launch reached the shim (%.1f us in the gate); "
             "the keeper asks for the token", (double)(g->grant_ns - called_ns) / 1e3,
             (double)(g->grant_ns - entered_ns) / 1e3);
    return true;
}

/* Is this provisional slice past its bound? (mu held) */
bool gs_gate_head_start_overdue_locked(gs_gate *g, uint64_t now)
{
    return g->head_start && now - g->head_start_ns > GS_GATE_HEAD_START_MAX_NS;
}

/* Keeper: carry this process's AcquireToken: the one a provisional slice
 * runs on (a head start, or a slice started at a handback while it was on
 * its way), or a waiter's (gate_handback.c). */
void gs_gate_keeper_ask_locked(gs_gate *g)
{
    bool provisional = g->head_start && g->state == GS_GATE_HOLDING && g->token_id == 0;
    if (!provisional && !(g->ask_via_keeper && g->state == GS_GATE_ACQUIRING))
        return;
    /* The lengths as the launching thread's checkpoints took them in. The
     * keeper does not take them in itself: doing so (checkpoint_mu against
     * those checkpoints) started bursts beside 2 ms kernels 0.4-0.5 ms later
     * on the simulated GPU and left it 5-10 points less busy. */
    uint32_t work = gs_gate_work_item_us(g);
    pthread_mutex_unlock(&g->mu);
    uint64_t token_id = 0;
    uint32_t quantum_us = 0;
    /* A head start asks after its ring (tokend then grants it at once). */
    int rc = gs_rpc_acquire_sized(g->rpc, GS_GATE_ACQUIRE_TIMEOUT_MS, GS_GATE_ACQUIRE_WAIT_MS, work, provisional,
                                  &token_id, &quantum_us);
    pthread_mutex_lock(&g->mu);
    bool granted = rc == GS_RPC_OK && token_id != 0;
    bool was_waiter = g->ask_via_keeper;
    g->ask_via_keeper = false;
    if (g->state == GS_GATE_ACQUIRING && was_waiter) {
        if (granted) {
            gs_gate_granted_locked(g, token_id, quantum_us);
            return;
        }
        /* Not granted: the launching thread asks again; itself, unless the
         * wait merely timed out, so that a lost daemon is handled there. */
        g->ask_direct = rc != GS_GATE_GRPC_DEADLINE_EXCEEDED;
        g->state = GS_GATE_NO_TOKEN;
        pthread_cond_broadcast(&g->changed);
        return;
    }
    if (!g->head_start || g->state != GS_GATE_HOLDING || g->token_id != 0) {
        /* fork or stop reset the gate meanwhile: a grant goes back unused. */
        if (granted) {
            pthread_mutex_unlock(&g->mu);
            gs_rpc_release(g->rpc, token_id, 0, 0, false, GS_GATE_RELEASE_WAIT_MS);
            pthread_mutex_lock(&g->mu);
        }
        return;
    }
    g->head_start = false;
    if (granted) {
        uint64_t now = gs_gate_monotonic_ns();
        /* Past the bound its launches waited for this grant: the slice
         * starts now, as any granted one (another was granted first after
         * a handback: handbacks are then ignored for a while). */
        bool late = now - g->head_start_ns > GS_GATE_HEAD_START_MAX_NS;
        if (late) {
            g->grant_ns = now;
            if (g->head_start_at_handback) {
                g->handback_quiet_until_ns = now + GS_GATE_HANDBACK_QUIET_NS;
                atomic_fetch_add_explicit(&g->n_handback_lapses, 1, memory_order_relaxed);
            }
        }
        g->head_start_at_handback = false;
        g->token_id = token_id;
        g->quantum_us = quantum_us ? quantum_us : 1000;
        g->revoke_pending = g->revoked_before_grant == token_id;
        g->revoked_before_grant = 0;
        atomic_fetch_add_explicit(&g->n_acquired, 1, memory_order_relaxed);
        GS_DEBUG("token %llu granted to a provisional slice %.0f us after it: %u us", (unsigned long long)token_id,
                 (double)(now - g->head_start_ns) / 1e3, quantum_us);
        /* ... and its first kernel keeps out of an expected preemptor's
         * window like any (a 2 ms kernel queued at such a late grant
         * delayed the next high-priority burst by all of it). */
        if (late && !g->revoke_pending)
            gs_gate_after_grant_locked(g);
        pthread_cond_broadcast(&g->changed);
        return;
    }
    /* Not granted in time: close the gate; the next launch asks as usual
     * (and meets a lost daemon there). */
    if (g->head_start_at_handback) {
        g->handback_quiet_until_ns = gs_gate_monotonic_ns() + GS_GATE_HANDBACK_QUIET_NS;
        atomic_fetch_add_explicit(&g->n_handback_lapses, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&g->n_head_start_refusals, 1, memory_order_relaxed);
    }
    g->head_start_at_handback = false;
    g->ask_direct = rc != GS_RPC_OK && rc != GS_GATE_GRPC_DEADLINE_EXCEEDED;
    GS_DEBUG("provisional slice not granted (rc %d: %s); the gate closes", rc, gs_rpc_last_error());
    atomic_store_explicit(&g->open, 0, memory_order_release);
    g->state = GS_GATE_NO_TOKEN;
    pthread_cond_broadcast(&g->changed);
}
