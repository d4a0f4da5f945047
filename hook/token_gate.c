/* token_gate: the gate's state and its slow path. The fast path is inline
 * in token_gate.h; a launch that misses it comes here (gs_gate_enter) to
 * wait for a token: resume a lease, or ask tokend (acquire), or wait for
 * the thread that asks. Also: Revoke and connection loss from the rpc
 * thread, daemon-loss policy, fork, stats. The other mechanisms are beside
 * it (gate_internal.h lists them). */
#define _GNU_SOURCE
#include "gate_internal.h"

#include <string.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "real_driver.h"
#include "rpc_client.h"

gs_gate gs_gate_passthrough = {.open = GS_GATE_PASSTHROUGH_GENERATION, .interval = INT32_MAX / 2};
gs_gate gs_gate_closed = {.open = 0, .interval = 1};
gs_gate *gs_fast_gate = &gs_gate_closed;

/* UINT32_MAX is never a generation, so a fresh thread always starts on the
 * slow path (which registers its context). */
__thread gs_tls_slice_t gs_tls_slice __attribute__((tls_model("initial-exec"))) = {.generation = UINT32_MAX};

static _Atomic uint32_t generation_source = GS_GATE_PASSTHROUGH_GENERATION + 1;

uint32_t gs_gate_next_generation(void)
{
    uint32_t gen;
    do
        gen = atomic_fetch_add_explicit(&generation_source, 1, memory_order_relaxed);
    while (gen <= GS_GATE_PASSTHROUGH_GENERATION || gen == UINT32_MAX);
    return gen;
}

static void init_conds(gs_gate *g)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->changed, &attr);
    pthread_cond_init(&g->keeper_wake, &attr);
    pthread_condattr_destroy(&attr);
}

void gs_gate_init(gs_gate *g, struct gs_rpc *rpc, const char *label,
                  void (*service)(void *ctx), void *service_ctx)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_mutex_init(&g->checkpoint_mu, NULL);
    init_conds(g);
    /* One launch per checkpoint until GPU time has been measured: a larger
     * start lets a program queue seconds of long kernels before the first
     * measurement arrives (all of it drained past the token). */
    atomic_store(&g->interval, GS_GATE_MIN_INTERVAL);
    g->rpc = rpc;
    g->label = label;
    g->service = service;
    g->service_ctx = service_ctx;
    g->last_done = -1;
}

static void remember_context_locked(gs_gate *g, CUcontext ctx)
{
    if (!ctx)
        return;
    for (int i = 0; i < g->n_contexts; i++)
        if (g->contexts[i] == ctx)
            return;
    if (g->n_contexts < GS_GATE_MAX_CONTEXTS)
        g->contexts[g->n_contexts++] = ctx;
    else
        GS_WARN("more than %d contexts launched in one slice; context %p is not synchronised at slice end",
                GS_GATE_MAX_CONTEXTS, (void *)ctx);
}

void gs_gate_open_slice_locked(gs_gate *g, uint64_t token_id, uint32_t quantum_us, bool wake_keeper)
{
    uint64_t now = gs_gate_monotonic_ns();
    g->state = GS_GATE_HOLDING;
    g->token_id = token_id;
    g->quantum_us = quantum_us ? quantum_us : 1000;
    g->grant_ns = now;
    g->next_idle_check_ns = now + gs_gate_idle_period_ns(g);
    g->revoke_pending = token_id != 0 && g->revoked_before_grant == token_id;
    g->revoked_before_grant = 0;
    g->token_lost = false;
    g->wrap_up = false;
    g->renew_refused = false;
    g->head_start = false;
    gs_gate_pause_unanswered_locked(g);   /* the last slice ended (idle, quantum) while paused */
    atomic_store_explicit(&g->activity, 1, memory_order_relaxed);
    atomic_store_explicit(&g->open, gs_gate_next_generation(), memory_order_release);
    if (wake_keeper)
        pthread_cond_signal(&g->keeper_wake);
    pthread_cond_broadcast(&g->changed);
}

/* tokend did not answer: apply GSLICE_ON_DAEMON_LOSS. Called and returns
 * with mu held, state ACQUIRING. */
static void handle_daemon_loss_locked(gs_gate *g, int rc)
{
    uint64_t now = gs_gate_monotonic_ns();
    const char *why = gs_rpc_last_error();
    if (!g->loss_logged) {
        g->loss_logged = true;
        g->loss_since_ns = now;
        g->loss_reminder_ns = now + 10000000000ull;
        atomic_fetch_add_explicit(&g->n_losses, 1, memory_order_relaxed);
        if (gs_config_daemon_loss() == GS_ON_LOSS_OPEN)
            GS_ERROR("tokend unreachable at %s (result %d: %s); the group's on-daemon-loss policy open: "
                     "launches run UNMETERED until it is back", g->label, rc, why ? why : "");
        else
            GS_WARN("tokend unreachable at %s (result %d: %s); the group's on-daemon-loss policy wait: "
                    "launches wait until it is back", g->label, rc, why ? why : "");
    } else if (now >= g->loss_reminder_ns) {
        g->loss_reminder_ns = now + 10000000000ull;
        GS_WARN("still waiting for tokend at %s after %.0f s (result %d: %s)", g->label,
                (double)(now - g->loss_since_ns) / 1e9, rc, why ? why : "");
    }
    if (gs_config_daemon_loss() == GS_ON_LOSS_OPEN) {
        g->state = GS_GATE_UNMETERED;
        g->token_id = 0;
        atomic_store_explicit(&g->open, gs_gate_next_generation(), memory_order_release);
        gs_gate_ensure_keeper_locked(g);
        pthread_cond_signal(&g->keeper_wake);
        pthread_cond_broadcast(&g->changed);
        return;
    }
    /* wait: back off (others keep waiting on `changed` meanwhile). */
    pthread_mutex_unlock(&g->mu);
    if (gs_rpc_wait_attached(g->rpc, 200, NULL))
        usleep(10000);   /* attached but refused: do not spin */
    pthread_mutex_lock(&g->mu);
    g->state = GS_GATE_NO_TOKEN;
    pthread_cond_broadcast(&g->changed);
}

/* A slice starts on the token tokend granted (mu held, ACQUIRING). */
void gs_gate_granted_locked(gs_gate *g, uint64_t token_id, uint32_t quantum_us)
{
    if (g->loss_logged) {
        GS_WARN("tokend at %s is back after %.1f s; launches are metered again", g->label,
                (double)(gs_gate_monotonic_ns() - g->loss_since_ns) / 1e9);
        g->loss_logged = false;
    }
    gs_gate_open_slice_locked(g, token_id, quantum_us, true);
    atomic_fetch_add_explicit(&g->n_acquired, 1, memory_order_relaxed);
    GS_DEBUG("token %llu granted: %u us", (unsigned long long)token_id, quantum_us);
    gs_gate_after_grant_locked(g);
}

/* A slice just started (`why`: how a ring before it reads in the log): a
 * higher class that rang while the grant was on its way, or while a lease
 * was kept, is granted as soon as its request reaches tokend, so queue no
 * kernel in front of it now; and no long first kernel into an expected
 * preemptor's window. */
static void after_slice_start_locked(gs_gate *g, const char *why)
{
    uint64_t now = gs_gate_monotonic_ns(), kernel_ns = gs_gate_long_kernel_ns(g);
    if (gs_doorbell_outranking_ring_within(&g->doorbell, now, GS_GATE_DOORBELL_PAUSE_NS))
        gs_gate_doorbell_pause_locked(g, why);
    else if (kernel_ns)
        gs_gate_anticipation_pause_locked(g, now, now, kernel_ns);   /* its first kernel */
}

void gs_gate_after_grant_locked(gs_gate *g)
{
    after_slice_start_locked(g, "rang just before this grant");
}

void gs_gate_deferred_wakes(gs_gate *g, gs_launch_ticket *t)
{
    if (t->wake_listeners)
        gs_doorbell_wake_listeners(&g->doorbell);
    if (t->wake_keeper)
        pthread_cond_signal(&g->keeper_wake);
    t->wake_listeners = t->wake_keeper = false;
}

/* This thread becomes the one that asks tokend; mu held on entry and exit.
 * entered: when its launch came to the gate. */
static void acquire_locked(gs_gate *g, gs_launch_ticket *t, uint64_t entered_ns)
{
    g->state = GS_GATE_ACQUIRING;
    gs_gate_ensure_keeper_locked(g);
    if (!atomic_load_explicit(&g->doorbell.page, memory_order_acquire) && g->rpc &&
        atomic_load_explicit(&g->n_acquired, memory_order_relaxed) == 0) {
        pthread_mutex_unlock(&g->mu);
        gs_rpc_wait_attached(g->rpc, 1000, NULL);   /* process start: the doorbell comes with the attach */
        pthread_mutex_lock(&g->mu);
    }
    /* A higher class than the holder: tell it to stop submitting now, not
     * when tokend's Revoke reaches it (preempt_doorbell.h). First: all
     * the holder feeds until then is queued in front of this launch. */
    bool rang = g->state == GS_GATE_ACQUIRING && gs_doorbell_ring_if_preempting(&g->doorbell, false);
    /* Rang: tokend grants this ask at once (its flag says so); start now,
     * the keeper carries the ask (gate_head_start.c), with the lengths the
     * last checkpoints took in. The listeners and the keeper are woken once
     * the launch is queued: each wake-up may hand this CPU to the woken
     * thread first. */
    if (rang && gs_gate_head_start_locked(g, t->called_ns, entered_ns)) {
        t->wake_listeners = t->wake_keeper = true;
        return;
    }
    if (rang)
        gs_doorbell_wake_listeners(&g->doorbell);
    pthread_mutex_unlock(&g->mu);
    gs_gate_take_in_lengths_for_the_ask(g);
    pthread_mutex_lock(&g->mu);
    if (g->state != GS_GATE_ACQUIRING)
        return;   /* fork or stop reset the gate meanwhile: start over */
    /* Another holds the token: the keeper asks, so that the holder's
     * handback can start this process before the grant (gate_handback.c). */
    if (!rang && gs_gate_ask_via_keeper_locked(g))
        return;
    pthread_mutex_unlock(&g->mu);
    uint64_t token_id = 0;
    uint32_t quantum_us = 0;
    GS_DEBUG("asking for a token%s", rang ? " (rang the preemption doorbell)" : "");
    int rc = gs_rpc_acquire_sized(g->rpc, GS_GATE_ACQUIRE_TIMEOUT_MS, GS_GATE_ACQUIRE_WAIT_MS, gs_gate_work_item_us(g),
                                  rang, &token_id, &quantum_us);
    pthread_mutex_lock(&g->mu);
    if (g->state != GS_GATE_ACQUIRING) {
        /* fork or stop reset the gate underneath us: start over. */
        return;
    }
    if (rc == GS_RPC_OK) {
        gs_gate_granted_locked(g, token_id, quantum_us);
        return;
    }
    if (rc == GS_RPC_UNAVAILABLE && !g->loss_logged) {
        /* Not attached yet (process start) or reconnecting after a daemon
         * restart: give the client a moment before calling it a loss. */
        pthread_mutex_unlock(&g->mu);
        bool attached = gs_rpc_wait_attached(g->rpc, 2000, NULL);
        pthread_mutex_lock(&g->mu);
        if (attached && g->state == GS_GATE_ACQUIRING) {
            g->state = GS_GATE_NO_TOKEN;
            pthread_cond_broadcast(&g->changed);
            return;
        }
        if (g->state != GS_GATE_ACQUIRING)
            return;
    }
    if (rc == GS_GATE_GRPC_DEADLINE_EXCEEDED) {
        /* The GPU is busy with others: just ask again. */
        g->state = GS_GATE_NO_TOKEN;
        pthread_cond_broadcast(&g->changed);
        return;
    }
    handle_daemon_loss_locked(g, rc);
}

void gs_gate_enter(gs_gate *g, CUcontext ctx, gs_launch_ticket *t)
{
#ifdef GSLICE_TEST_CUT_GATE
    return;   /* test-only build (hook/build.py TEST_CUTS): no launch waits for or takes a token */
#endif
    atomic_fetch_add_explicit(&g->n_slow, 1, memory_order_relaxed);
    pthread_mutex_lock(&g->mu);
    uint64_t entered_ns = gs_gate_monotonic_ns();
    gs_gate_note_idle_gap_locked(g, entered_ns);
    for (;;) {
#ifndef GSLICE_TEST_CUT_RING_READ_AT_LAUNCH   /* test-only build (hook/build.py TEST_CUTS) */
        /* A ring the listener has not acted on yet stops this launch too. */
        if (g->state == GS_GATE_HOLDING && !g->doorbell_pause_until_ns && !g->revoke_pending)
            gs_gate_heed_ring_locked(g, gs_gate_monotonic_ns(), "rang (read at a launch)");
#endif
        if (g->state == GS_GATE_HOLDING && g->doorbell_pause_until_ns && !g->revoke_pending) {
            if (gs_gate_monotonic_ns() < g->doorbell_pause_until_ns) {
                /* A thread held back by a pause is busy, not idle: the keeper
                 * must not end the slice as idle under it. */
                gs_gate_deferred_wakes(g, t);   /* due before this thread waits */
                t->waited = true;
                atomic_fetch_add_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
                gs_gate_wait_until_ns(&g->changed, &g->mu, g->doorbell_pause_until_ns);
                atomic_fetch_sub_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
                continue;
            }
            gs_gate_doorbell_resume_locked(g, "no Revoke followed");
        }
        if (g->state == GS_GATE_HOLDING && g->head_start && !g->revoke_pending) {
            /* A slice started at a handback begins when the last holder's
             * work ends (gate_handback.c): until then both would share the GPU. */
            uint64_t now = gs_gate_monotonic_ns();
            if (now < g->grant_ns) {
                gs_gate_deferred_wakes(g, t);
                t->waited = true;
                atomic_fetch_add_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
                gs_gate_wait_until_ns(&g->changed, &g->mu, g->grant_ns);
                atomic_fetch_sub_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
                continue;
            }
        }
        if ((g->state == GS_GATE_HOLDING && !g->revoke_pending && !g->wrap_up &&
             !gs_gate_head_start_overdue_locked(g, gs_gate_monotonic_ns())) ||
            g->state == GS_GATE_UNMETERED) {
            remember_context_locked(g, ctx);
            gs_tls_slice.generation = atomic_load_explicit(&g->open, memory_order_relaxed);
            break;
        }
        gs_gate_note_gap();   /* waiting for the gate: the GPU may run dry meanwhile */
        if (g->state == GS_GATE_LEASED && !g->revoke_pending && !g->stopping) {
            /* The token was kept across the idle gap: a new slice, no RPC.
             * A ring heard while the lease was idle paused nothing then (the
             * listener pauses a slice, and none ran); tokend's Revoke is
             * still on its way, so it pauses the slice now. Without this, a
             * low-priority neighbour resuming its lease right after a
             * burst's ring fed the GPU in front of the burst for the ~0.7 ms
             * the Revoke took (H100 trace, 2026-11-27: 107 of 300 bursts
             * beside 8192 matmuls found no pause). */
            gs_gate_open_slice_locked(g, g->token_id, g->quantum_us, false);
            t->wake_keeper = true;   /* gs_gate_deferred_wakes, after the launch */
            atomic_fetch_add_explicit(&g->n_lease_resumes, 1, memory_order_relaxed);
#ifndef GSLICE_TEST_CUT_RING_AT_LEASE_RESUME   /* test-only build (hook/build.py TEST_CUTS) */
            after_slice_start_locked(g, "rang while the lease was kept");
#endif
            continue;
        }
        if (g->state == GS_GATE_NO_TOKEN && !g->stopping) {
            t->waited = true;
            acquire_locked(g, t, entered_ns);
        }
        else if (g->stopping) {
            /* Process exit: let remaining launches through. */
            break;
        } else {
            gs_gate_deferred_wakes(g, t);
            t->waited = true;
            pthread_cond_wait(&g->changed, &g->mu);
        }
    }
    atomic_store_explicit(&g->activity, 1, memory_order_relaxed);
    int32_t interval = gs_gate_batch_launches(g, atomic_load_explicit(&g->interval, memory_order_relaxed));
    pthread_mutex_unlock(&g->mu);
    gs_tls_slice.countdown = interval;
    t->gate = g;
    t->launches = (uint32_t)interval;
}

void gs_gate_on_revoke(gs_gate *g, uint64_t token_id, bool preemption)
{
    GS_DEBUG("token %llu revoked by tokend", (unsigned long long)token_id);
    pthread_mutex_lock(&g->mu);
    atomic_fetch_add_explicit(&g->n_revokes, 1, memory_order_relaxed);
    if ((g->state == GS_GATE_HOLDING || g->state == GS_GATE_LEASED || g->state == GS_GATE_RELEASING) &&
        g->token_id == token_id) {
        g->revoke_pending = true;
        /* Stop submitting at once: the keeper drains and releases. */
        if (g->state == GS_GATE_HOLDING) {
            atomic_store_explicit(&g->open, 0, memory_order_release);
            if (preemption)
                atomic_store_explicit(&g->preempted_ns, gs_gate_monotonic_ns(), memory_order_relaxed);
        }
        pthread_cond_signal(&g->keeper_wake);
        /* The pause was answered: its quiet period is lifted. So it is when
         * a ring's pause ran out before this preemption's Revoke came (a
         * round trip slower than the pause's bound on a loaded machine):
         * the ring was right, and ignoring the next rings would let this
         * process feed the GPU in front of the next preemptors. */
        if (g->doorbell_pause_until_ns ||
            (preemption && g->ring_pause_ns &&
             gs_gate_monotonic_ns() - g->ring_pause_ns < GS_GATE_DOORBELL_QUIET_NS)) {
            g->doorbell_quiet_until_ns = 0;
            g->anticipation_quiet_until_ns = 0;
        }
        g->ring_pause_ns = 0;
        g->doorbell_pause_until_ns = 0;
        g->pause_anticipated = false;
    } else if (g->state == GS_GATE_ACQUIRING || g->state == GS_GATE_HOLDING) {
        g->revoked_before_grant = token_id;   /* a grant or renewal still on its way */
    }
    pthread_mutex_unlock(&g->mu);
}

void gs_gate_on_connection_lost(gs_gate *g)
{
    pthread_mutex_lock(&g->mu);
    if (g->state == GS_GATE_HOLDING || g->state == GS_GATE_LEASED) {
        /* The daemon forgot this client's token with the connection. */
        g->token_lost = true;
        g->revoke_pending = true;
        pthread_cond_signal(&g->keeper_wake);
    }
    pthread_mutex_unlock(&g->mu);
}

/* ---- fork and exit ---- */

void gs_gate_fork_prepare(gs_gate *g)
{
    pthread_mutex_lock(&g->mu);
    pthread_mutex_lock(&g->checkpoint_mu);
}

void gs_gate_fork_parent(gs_gate *g)
{
    pthread_mutex_unlock(&g->checkpoint_mu);
    pthread_mutex_unlock(&g->mu);
}

void gs_gate_fork_child(gs_gate *g)
{
    /* No keeper thread, no token, no CUDA state survive fork. */
    g->state = GS_GATE_NO_TOKEN;
    atomic_store(&g->open, 0);
    g->keeper_running = false;
    g->service_requested = false;
    g->lease_wanted = false;
    g->head_start = false;
    g->head_start_at_handback = false;
    g->keeper_ask_wanted = false;
    g->ask_via_keeper = false;
    g->ask_direct = false;
    g->burst_end_ns = 0;
    g->revoke_pending = false;
    g->wrap_up = false;
    g->doorbell_pause_until_ns = 0;
    g->pause_anticipated = false;
    g->token_lost = false;
    g->revoked_before_grant = 0;
    g->n_contexts = 0;
    g->loss_logged = false;
    g->idle_since_ns = 0;
    gs_gate_kernel_lengths_fork_child(g);
    init_conds(g);
    pthread_mutex_unlock(&g->checkpoint_mu);
    pthread_mutex_unlock(&g->mu);
}

void gs_gate_stop(gs_gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->stopping = true;
    pthread_cond_signal(&g->keeper_wake);
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->mu);
}

void gs_gate_get_stats(gs_gate *g, gs_gate_stats *out)
{
    memset(out, 0, sizeof *out);
    out->tokens_acquired = atomic_load(&g->n_acquired);
    out->tokens_released = atomic_load(&g->n_released);
    out->idle_releases = atomic_load(&g->n_idle);
    out->revokes = atomic_load(&g->n_revokes);
    out->checkpoints = atomic_load(&g->n_checkpoints);
    out->checkpoint_waits = atomic_load(&g->n_checkpoint_waits);
    out->slow_entries = atomic_load(&g->n_slow);
    out->used_us = atomic_load(&g->used_us_total);
    out->overrun_us = atomic_load(&g->overrun_us_total);
    out->daemon_losses = atomic_load(&g->n_losses);
    out->renewals = atomic_load(&g->n_renewals);
    out->lease_resumes = atomic_load(&g->n_lease_resumes);
    out->leases_at_start = atomic_load(&g->n_leases_at_start);
    out->wrap_ups = atomic_load(&g->n_wrap_ups);
    out->doorbell_pauses = atomic_load(&g->n_doorbell_pauses);
    out->doorbell_unanswered = atomic_load(&g->n_doorbell_unanswered);
    out->doorbell_rings = atomic_load(&g->doorbell.rings_sent);
    out->anticipation_pauses = atomic_load(&g->n_anticipation_pauses);
    out->anticipation_lapses = atomic_load(&g->n_anticipation_lapses);
    out->head_starts = atomic_load(&g->n_head_starts);
    out->head_start_refusals = atomic_load(&g->n_head_start_refusals);
    out->paced_launches = atomic_load(&g->n_paced_launches);
    out->handbacks_sent = atomic_load(&g->doorbell.handbacks_sent);
    out->handback_starts = atomic_load(&g->n_handback_starts);
    out->handback_lapses = atomic_load(&g->n_handback_lapses);
    out->burst_ends = atomic_load(&g->n_burst_ends);
    out->launch_gpu_us = atomic_load(&g->launch_gpu_us);
    out->submit_lag_margin_us = atomic_load(&g->submit_lag_margin_us);
    out->longest_work_us = atomic_load(&g->longest_work_us);
    out->interval = atomic_load(&g->interval);
    pthread_mutex_lock(&g->mu);
    out->state = g->state;
    out->quantum_us = g->quantum_us;
    pthread_mutex_unlock(&g->mu);
}
