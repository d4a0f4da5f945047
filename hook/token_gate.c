/* token_gate: slow path, gate keeper thread and checkpoints.
 * See token_gate.h for the design; nothing here runs on the fast path. */
#define _GNU_SOURCE
#include "token_gate.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "real_driver.h"
#include "rpc_client.h"
#include "stream_capture.h"

gs_gate gs_gate_passthrough = {.open = GS_GATE_PASSTHROUGH_GENERATION, .interval = INT32_MAX / 2};
gs_gate gs_gate_closed = {.open = 0, .interval = 1};
gs_gate *gs_fast_gate = &gs_gate_closed;

/* UINT32_MAX is never a generation, so a fresh thread always starts on the
 * slow path (which registers its context). */
__thread uint32_t gs_tls_generation __attribute__((tls_model("initial-exec"))) = UINT32_MAX;
__thread int32_t gs_tls_countdown __attribute__((tls_model("initial-exec")));

/* Set when this thread's next checkpoint closes an interval during which the
 * GPU never ran dry (the previous checkpoint was still pending). */
static __thread bool tls_contiguous __attribute__((tls_model("initial-exec")));

/* This thread's start event for its next single-launch checkpoint (it
 * changes hands with the checkpoint slot's, so a recorded one is never
 * re-recorded before it is read). */
static __thread CUevent tls_start __attribute__((tls_model("initial-exec")));
static __thread CUcontext tls_start_ctx __attribute__((tls_model("initial-exec")));
static __thread bool tls_start_armed __attribute__((tls_model("initial-exec")));

static _Atomic uint32_t generation_source = GS_GATE_PASSTHROUGH_GENERATION + 1;

/* AcquireToken: the daemon's wait, and ours a little longer. */
enum { ACQUIRE_TIMEOUT_MS = 10000, ACQUIRE_WAIT_MS = 12000, RELEASE_WAIT_MS = 5000 };
/* RenewToken goes out this long (plus two kernels) before the quantum ends:
 * a round trip from C is ~0.3-3 ms here, and the queue must not run dry. */
#define RENEW_LEAD_NS 3000000ull
/* Release this long before a handed-over slice's last long kernel ends: the
 * release, the next grant and its first submission take about that long.
 * In a process preempted lately, only GS_GATE_PREEMPTED_HANDOFF_LEAD_US: the
 * next holder's first kernel then does not queue behind the last one (a
 * preempting class arriving meanwhile would wait for both). */
#define HANDOFF_LEAD_NS 1000000ull
enum { GRPC_DEADLINE_EXCEEDED = 4 };

uint32_t gs_gate_next_generation(void)
{
    uint32_t gen;
    do
        gen = atomic_fetch_add_explicit(&generation_source, 1, memory_order_relaxed);
    while (gen <= GS_GATE_PASSTHROUGH_GENERATION || gen == UINT32_MAX);
    return gen;
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void wait_until_ns(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    pthread_cond_timedwait(cv, mu, &ts);
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

/* Idle check period: max(2 ms, quantum / 4). */
static uint64_t idle_period_ns(gs_gate *g)
{
    /* Short, so a bursty process gives the token back soon after its burst
     * (the tail is charged to it and idles the GPU), and at least two
     * kernels' worth of GPU time, so a program that synchronises after each
     * long kernel is still seen launching. Only the holder's keeper polls. */
    uint64_t period = 2000ull * atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    return period > 1000000ull ? period : 1000000ull;
}

static bool newest_pending_locked(gs_gate *g);

/* newest_pending_locked from a thread without the context (the keeper):
 * push the checkpoint's context around the query. */
static bool newest_pending_any_thread_locked(gs_gate *g)
{
    if (g->queue_count == 0 || !gs_cu.cuEventQuery)
        return false;
    CUcontext ctx = g->checkpoints[g->queue[(g->queue_head + g->queue_count - 1) % GS_GATE_CHECKPOINTS]].ctx;
    CUcontext popped;
    bool pushed = gs_cu.cuCtxPushCurrent && gs_cu.cuCtxPushCurrent(ctx) == CUDA_SUCCESS;
    bool busy = newest_pending_locked(g);
    if (pushed)
        gs_cu.cuCtxPopCurrent(&popped);
    return busy;
}

/* Is GPU work this process queued still running? (The newest checkpoint not
 * reached.) A busy checkpoint lock means a launch is waiting on it: busy. */
static bool gpu_work_outstanding(gs_gate *g)
{
    if (pthread_mutex_trylock(&g->checkpoint_mu) != 0)
        return true;
    bool busy = newest_pending_any_thread_locked(g);
    pthread_mutex_unlock(&g->checkpoint_mu);
    return busy;
}

static void *keeper_main(void *arg);

static void ensure_keeper_locked(gs_gate *g)
{
    if (g->keeper_running || g->stopping)
        return;
    /* The keeper must never take the application's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&g->keeper, NULL, keeper_main, g);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        GS_ERROR("cannot start the gate keeper thread (error %d); slices end only when launches block", rc);
        return;
    }
    pthread_detach(g->keeper);
    g->keeper_running = true;
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

/* A pause ends without its answer (the Revoke after a ring; the ring in an
 * expected window): count it. The quiet period its start began stays, so a
 * forged ring or window costs one pause per quiet period, however the
 * pause ends (reopened, or the slice ended as idle meanwhile). */
static void pause_unanswered_locked(gs_gate *g)
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

static void open_slice_locked(gs_gate *g, uint64_t token_id, uint32_t quantum_us, bool wake_keeper)
{
    uint64_t now = monotonic_ns();
    g->state = GS_GATE_HOLDING;
    g->token_id = token_id;
    g->quantum_us = quantum_us ? quantum_us : 1000;
    g->grant_ns = now;
    g->next_idle_check_ns = now + idle_period_ns(g);
    g->revoke_pending = token_id != 0 && g->revoked_before_grant == token_id;
    g->revoked_before_grant = 0;
    g->token_lost = false;
    g->wrap_up = false;
    g->renew_refused = false;
    pause_unanswered_locked(g);   /* the last slice ended (idle, quantum) while paused */
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
    uint64_t now = monotonic_ns();
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
        ensure_keeper_locked(g);
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

/* The longest work item this process submits, for tokend's quanta: the
 * longer of the measured GPU time per launch and the longest per-function /
 * per-graph estimate, when that is long, else 0 (unknown or short). */
static uint32_t work_item_us(gs_gate *g)
{
    uint32_t gpu_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    uint32_t longest = atomic_load_explicit(&g->longest_work_us, memory_order_relaxed);
    if (longest > gpu_us)
        gpu_us = longest;
    return gpu_us >= GS_GATE_LONG_KERNEL_US ? gpu_us : 0;
}

/* Stop submitting in this slice until until_ns (mu held): the gate closes
 * as for a Revoke, the token is kept. A Revoke ends the slice meanwhile;
 * without one, the first launch past until_ns reopens the gate
 * (doorbell_resume_locked). */
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
static void doorbell_pause_locked(gs_gate *g, const char *why)
{
    uint64_t now = monotonic_ns();
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
    atomic_store_explicit(&g->preempted_ns, now, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->n_doorbell_pauses, 1, memory_order_relaxed);
    uint64_t queued_end = __atomic_load_n(&g->newest_end_ns, __ATOMIC_RELAXED);
    GS_DEBUG("token %llu: preemption doorbell %s, submissions paused (queued work ends in about %lld us)",
             (unsigned long long)g->token_id, why, (long long)((int64_t)(queued_end - now) / 1000));
}

/* Anticipation (mu held, HOLDING): does work ending at work_end_ns run
 * into the window in which tokend expects a preemptor of this slice to ask?
 * Then pause until the ring, the window's end or the bound; windows are
 * then ignored for GS_GATE_ANTICIPATION_QUIET_NS unless the ring comes. */
static bool anticipation_pause_locked(gs_gate *g, uint64_t now, uint64_t work_end_ns)
{
    uint64_t start, end;
    if (g->revoke_pending || g->wrap_up || now < g->anticipation_quiet_until_ns ||
        !gs_doorbell_expected_preemption(&g->doorbell, now, &start, &end) || work_end_ns <= start)
        return false;
    uint64_t bound = now + GS_GATE_ANTICIPATION_PAUSE_NS;
    if (!pause_slice_locked(g, end < bound ? end : bound))
        return false;
    g->pause_anticipated = true;
    g->anticipation_quiet_until_ns = now + GS_GATE_ANTICIPATION_QUIET_NS;
    atomic_fetch_add_explicit(&g->n_anticipation_pauses, 1, memory_order_relaxed);
    GS_DEBUG("token %llu: a preemptor is expected in %lld us; the next kernel (ending in %lld us) waits",
             (unsigned long long)g->token_id, (long long)((int64_t)(start - now) / 1000),
             (long long)((int64_t)(work_end_ns - now) / 1000));
    return true;
}

static void doorbell_resume_locked(gs_gate *g, const char *why)
{
    if (g->pause_anticipated)
        why = "no ring in the expected window after";
    pause_unanswered_locked(g);
    atomic_store_explicit(&g->open, g->doorbell_generation, memory_order_release);
    GS_DEBUG("token %llu: %s the pause; submitting again", (unsigned long long)g->token_id, why);
    pthread_cond_broadcast(&g->changed);
}

/* The process's GPU time per launch when its kernels are long, else 0. */
static uint64_t long_kernel_ns(gs_gate *g)
{
    uint32_t kernel_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    return kernel_us >= GS_GATE_LONG_KERNEL_US ? (uint64_t)kernel_us * 1000ull : 0;
}

/* This thread becomes the one that asks tokend; mu held on entry and exit. */
static void acquire_locked(gs_gate *g)
{
    g->state = GS_GATE_ACQUIRING;
    ensure_keeper_locked(g);
    pthread_mutex_unlock(&g->mu);
    uint64_t token_id = 0;
    uint32_t quantum_us = 0;
    if (!atomic_load_explicit(&g->doorbell.page, memory_order_acquire) && g->rpc &&
        atomic_load_explicit(&g->n_acquired, memory_order_relaxed) == 0)
        gs_rpc_wait_attached(g->rpc, 1000, NULL);   /* process start: the doorbell comes with the attach */
    /* A higher class than the holder: tell it to stop submitting now, not
     * when tokend's Revoke reaches it (preempt_doorbell.h). */
    bool rang = gs_doorbell_ring_if_preempting(&g->doorbell);
    GS_DEBUG("asking for a token%s", rang ? " (rang the preemption doorbell)" : "");
    int rc = gs_rpc_acquire_sized(g->rpc, ACQUIRE_TIMEOUT_MS, ACQUIRE_WAIT_MS, work_item_us(g), rang, &token_id,
                                  &quantum_us);
    pthread_mutex_lock(&g->mu);
    if (g->state != GS_GATE_ACQUIRING) {
        /* fork or stop reset the gate underneath us: start over. */
        return;
    }
    if (rc == GS_RPC_OK) {
        if (g->loss_logged) {
            GS_WARN("tokend at %s is back after %.1f s; launches are metered again", g->label,
                    (double)(monotonic_ns() - g->loss_since_ns) / 1e9);
            g->loss_logged = false;
        }
        open_slice_locked(g, token_id, quantum_us, true);
        atomic_fetch_add_explicit(&g->n_acquired, 1, memory_order_relaxed);
        GS_DEBUG("token %llu granted: %u us", (unsigned long long)token_id, quantum_us);
        /* A higher class rang while this grant was on its way: tokend hands
         * the token over as soon as that request reaches it, so do not queue
         * a kernel in front of it now. */
        uint64_t now = monotonic_ns(), kernel_ns = long_kernel_ns(g);
        if (gs_doorbell_outranking_ring_within(&g->doorbell, now, GS_GATE_DOORBELL_PAUSE_NS))
            doorbell_pause_locked(g, "rang just before this grant");
        else if (kernel_ns)
            anticipation_pause_locked(g, now, now + kernel_ns);   /* its first kernel */
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
    if (rc == GRPC_DEADLINE_EXCEEDED) {
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
    for (;;) {
        if (g->state == GS_GATE_HOLDING && g->doorbell_pause_until_ns && !g->revoke_pending) {
            if (monotonic_ns() < g->doorbell_pause_until_ns) {
                /* A thread held back by a pause is busy, not idle: the keeper
                 * must not end the slice as idle under it. */
                atomic_fetch_add_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
                wait_until_ns(&g->changed, &g->mu, g->doorbell_pause_until_ns);
                atomic_fetch_sub_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
                continue;
            }
            doorbell_resume_locked(g, "no Revoke followed");
        }
        if ((g->state == GS_GATE_HOLDING && !g->revoke_pending && !g->wrap_up) ||
            g->state == GS_GATE_UNMETERED) {
            remember_context_locked(g, ctx);
            gs_tls_generation = atomic_load_explicit(&g->open, memory_order_relaxed);
            break;
        }
        tls_contiguous = false;   /* waiting for the gate: the GPU may run dry meanwhile */
        if (g->state == GS_GATE_LEASED && !g->revoke_pending && !g->stopping) {
            /* The token was kept across the idle gap: a new slice, no RPC. */
            open_slice_locked(g, g->token_id, g->quantum_us, false);
            t->wake_keeper = true;   /* gs_gate_wake_keeper, after the launch */
            atomic_fetch_add_explicit(&g->n_lease_resumes, 1, memory_order_relaxed);
            continue;
        }
        if (g->state == GS_GATE_NO_TOKEN && !g->stopping)
            acquire_locked(g);
        else if (g->stopping) {
            /* Process exit: let remaining launches through. */
            break;
        } else
            pthread_cond_wait(&g->changed, &g->mu);
    }
    atomic_store_explicit(&g->activity, 1, memory_order_relaxed);
    int32_t interval = atomic_load_explicit(&g->interval, memory_order_relaxed);
    pthread_mutex_unlock(&g->mu);
    gs_tls_countdown = interval;
    t->gate = g;
    t->launches = (uint32_t)interval;
}


/* Wait for everything the slice queued: push each context it launched in. */
static void synchronise_contexts(CUcontext *ctxs, int n)
{
    if (!gs_cu.cuCtxPushCurrent || !gs_cu.cuCtxSynchronize || !gs_cu.cuCtxPopCurrent)
        return;
    for (int i = 0; i < n; i++) {
        if (gs_cu.cuCtxPushCurrent(ctxs[i]) != CUDA_SUCCESS)
            continue;
        CUresult rc = gs_cu.cuCtxSynchronize();
        if (rc != CUDA_SUCCESS)
            GS_DEBUG("cuCtxSynchronize at slice end returned %d (the application's error, left to it)", rc);
        CUcontext popped;
        gs_cu.cuCtxPopCurrent(&popped);
    }
}

/* Stream capture: the newest checkpoint event was recorded in a
 * stream that was not capturing, so waiting for it is allowed (the keeper
 * runs in RELAXED capture mode). */
static void wait_newest_checkpoint(gs_gate *g)
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

static void sleep_until_ns(uint64_t deadline_ns);

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
 * the tails even out. Returns the time this slice is charged up to: a long
 * kernel still running (a preempted holder releases at once) is charged to
 * this slice up to its estimated end, and work of unknown length (nothing
 * measured yet: it may be a 1 s kernel) is waited for, so it is charged
 * here, not to the next holder. */
static uint64_t wait_for_handoff_point(gs_gate *g, bool preempted)
{
    if (!gs_cu.cuEventQuery)
        return monotonic_ns();
    pthread_mutex_lock(&g->checkpoint_mu);
    bool pending = newest_pending_any_thread_locked(g);
    uint64_t queued_end = g->newest_end_ns;
    pthread_mutex_unlock(&g->checkpoint_mu);
    uint32_t kernel_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    uint32_t longest = atomic_load_explicit(&g->longest_work_us, memory_order_relaxed);
    if (longest > kernel_us)
        kernel_us = longest;
    if (!pending)
        return monotonic_ns();
    if (kernel_us == 0) {
        wait_newest_checkpoint(g);
        return monotonic_ns();
    }
    uint64_t now = monotonic_ns();
    if (kernel_us < GS_GATE_LONG_KERNEL_US)
        return now;
    if (preempted)   /* the waiter's work queues behind the tail anyway: grant it now */
        return queued_end > now ? queued_end : now;
    uint64_t lead = recently_preempted(g, now) ? GS_GATE_PREEMPTED_HANDOFF_LEAD_US * 1000ull : HANDOFF_LEAD_NS;
    if (queued_end > now + lead)
        sleep_until_ns(queued_end - lead);
    return monotonic_ns();
}

/* Close the gate, wait for the slice's work, release the token. */
static void end_slice_locked(gs_gate *g, bool idle)
{
    g->state = GS_GATE_RELEASING;
    atomic_store_explicit(&g->open, 0, memory_order_release);
    CUcontext ctxs[GS_GATE_MAX_CONTEXTS];
    int n = g->n_contexts;
    memcpy(ctxs, g->contexts, sizeof(CUcontext) * (size_t)n);
    g->n_contexts = 0;
    uint64_t token_id = g->token_id, grant_ns = g->grant_ns;
    uint64_t quantum_us = g->quantum_us;
    bool lost = g->token_lost;
    bool preempted = g->revoke_pending;
    pthread_mutex_unlock(&g->mu);

    /* A thread that passed the fast path just before the close is still
     * inside the driver's launch call: let it finish submitting, so the
     * synchronisation below covers its kernel instead of leaving it to run
     * (uncharged) in the next holder's slice. A launch call takes a few us. */
    struct timespec quiesce = {0, 20000};
    nanosleep(&quiesce, NULL);
    /* Stream capture: cuCtxSynchronize would wait on a capturing stream
     * (refused, and from a GLOBAL-mode thread it invalidates the capture):
     * while one is active, wait for the newest checkpoint only. */
    gs_capture_thread_relaxed();
    /* Nobody else waits (a capped group alone, not renewed): no next holder
     * to overlap, and the tail would run uncharged in the group's own pause:
     * up to a whole long kernel that passed on its launch countdown (no fit
     * check, no checkpoint), so a 30% cap with 12.5 ms kernels got 41% of
     * the GPU, charged 30%. Wait for all of it and charge it. */
    bool drain = idle || lost || (!preempted && !gs_doorbell_contended(&g->doorbell));
    if (drain) {
        if (gs_capture_any())
            wait_newest_checkpoint(g);
        else
            synchronise_contexts(ctxs, n);
    }
    uint64_t end_ns = drain ? monotonic_ns() : wait_for_handoff_point(g, preempted);
    /* A renewed slice starts where the previous one's queued work ends,
     * which may still lie ahead when it ends at once. */
    uint64_t used_us = end_ns > grant_ns ? (end_ns - grant_ns) / 1000ull : 0;
    uint64_t overrun_us = used_us > quantum_us ? used_us - quantum_us : 0;
    bool lease = false;
    if (!lost) {
        int rc;
        if (idle)
            rc = gs_rpc_release_idle_lease(g->rpc, token_id, used_us, RELEASE_WAIT_MS, &lease);
        else
            rc = gs_rpc_release(g->rpc, token_id, used_us, overrun_us, false, RELEASE_WAIT_MS);
        if (rc != GS_RPC_OK)
            GS_DEBUG("ReleaseToken(%llu) returned %d (%s); tokend reclaims it itself",
                     (unsigned long long)token_id, rc, gs_rpc_last_error());
    }

    GS_DEBUG("token %llu released: used %llu us of a %llu us quantum (overrun %llu us)%s",
             (unsigned long long)token_id, (unsigned long long)used_us, (unsigned long long)quantum_us,
             (unsigned long long)overrun_us, idle ? ", idle" : "");
    pthread_mutex_lock(&g->mu);
    atomic_fetch_add_explicit(&g->n_released, 1, memory_order_relaxed);
    if (idle)
        atomic_fetch_add_explicit(&g->n_idle, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->used_us_total, used_us, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->overrun_us_total, overrun_us, memory_order_relaxed);
    if (g->state == GS_GATE_RELEASING && lease && !g->token_lost) {
        /* Kept as a lease; a Revoke that raced the reply is still pending
         * and makes the keeper give it back. */
        g->state = GS_GATE_LEASED;
    } else {
        if (g->state == GS_GATE_RELEASING)
            g->state = GS_GATE_NO_TOKEN;
        g->revoke_pending = false;
        g->token_lost = false;
    }
    pthread_cond_broadcast(&g->changed);
}

/* Quantum over (or a long kernel would not fit): ask tokend to renew the
 * slice while the gate stays open; end it when tokend says no. */
static uint64_t renew_lead_ns(gs_gate *g, uint64_t deadline)
{
    /* Two of its longest kernels, not two of the GPU time per launch: a
     * program that synchronises after each long kernel never measures the
     * latter (no interval is contiguous), and asked only once the next
     * kernel did not fit (the wrap-up), with the GPU idle; a capped group,
     * never renewed, was charged that round trip on every slice (1 ms of a
     * 13 ms slice on a loaded machine). Asked while the kernel runs, a
     * refusal is known by the wrap-up, which then releases at once. */
    uint32_t kernel_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    uint32_t longest = atomic_load_explicit(&g->longest_work_us, memory_order_relaxed);
    uint64_t lead = RENEW_LEAD_NS + 2000ull * (longest > kernel_us ? longest : kernel_us);
    uint64_t half = (deadline - g->grant_ns) / 2;
    return lead < half ? lead : half;
}

static void renew_or_end_slice_locked(gs_gate *g, bool due)
{
    if (g->token_lost || g->stopping || !g->rpc || g->renew_refused) {
        end_slice_locked(g, false);   /* (tokend already said others wait) */
        return;
    }
    uint64_t token_id = g->token_id;
    uint64_t now = monotonic_ns();
    /* The slice so far includes the long kernel still queued in it. */
    uint64_t queued_end = __atomic_load_n(&g->newest_end_ns, __ATOMIC_RELAXED);
    uint64_t until = queued_end > now ? queued_end : now;
    uint64_t used_us = until > g->grant_ns ? (until - g->grant_ns) / 1000ull : 0;
    uint32_t work = work_item_us(g);
    pthread_mutex_unlock(&g->mu);
    uint64_t new_token = 0;
    uint32_t quantum_us = 0;
    int rc = gs_rpc_renew(g->rpc, token_id, used_us, work, RELEASE_WAIT_MS, &new_token, &quantum_us);
    pthread_mutex_lock(&g->mu);
    if (g->state != GS_GATE_HOLDING || g->token_id != token_id)
        return; /* fork, stop or a lost connection changed the gate meanwhile */
    if (rc == GS_RPC_OK && new_token != 0 && !g->revoke_pending) {
        g->token_id = new_token;
        g->quantum_us = quantum_us ? quantum_us : 1000;
        g->grant_ns = until;
        g->renew_refused = false;
        g->revoke_pending = g->revoked_before_grant == new_token;
        g->revoked_before_grant = 0;
        atomic_fetch_add_explicit(&g->n_renewals, 1, memory_order_relaxed);
        GS_DEBUG("token %llu renewed as %llu: %u us (due %d, wrap-up %d)", (unsigned long long)token_id,
                 (unsigned long long)new_token, g->quantum_us, due, g->wrap_up);
        g->wrap_up = false;
        if (g->doorbell_pause_until_ns && !g->pause_anticipated)   /* (the expected preemptor may still come) */
            doorbell_resume_locked(g, "renewed after");
        pthread_cond_broadcast(&g->changed);
        return;
    }
    if (rc != GS_RPC_OK)
        GS_DEBUG("RenewToken(%llu) returned %d (%s); ending the slice", (unsigned long long)token_id, rc,
                 gs_rpc_last_error());
    GS_DEBUG("token %llu not renewed (due %d, wrap-up %d, revoked %d)", (unsigned long long)token_id, due,
             g->wrap_up, g->revoke_pending);
    if (!due && rc == GS_RPC_OK && !g->revoke_pending && !g->wrap_up) {
        g->renew_refused = true;   /* others wait: use the rest of the slice, then hand over */
        return;
    }
    end_slice_locked(g, false);
}

/* A lease taken back (or its connection gone): give it back unused. */
static void return_lease_locked(gs_gate *g)
{
    uint64_t token_id = g->token_id;
    bool lost = g->token_lost;
    g->state = GS_GATE_RELEASING;
    pthread_mutex_unlock(&g->mu);
    if (!lost) {
        int rc = gs_rpc_release(g->rpc, token_id, 0, 0, false, RELEASE_WAIT_MS);
        if (rc != GS_RPC_OK)
            GS_DEBUG("ReleaseToken(%llu) of a lease returned %d (%s)", (unsigned long long)token_id, rc,
                     gs_rpc_last_error());
    }
    pthread_mutex_lock(&g->mu);
    atomic_fetch_add_explicit(&g->n_released, 1, memory_order_relaxed);
    if (g->state == GS_GATE_RELEASING)
        g->state = GS_GATE_NO_TOKEN;
    g->revoke_pending = false;
    g->token_lost = false;
    pthread_cond_broadcast(&g->changed);
}

/* Keeper, after an attach: take the token as a lease if tokend has it free
 * (nobody holds or waits), so the process's first burst starts without a
 * round trip, as its later ones do. Launches arriving meanwhile wait in
 * ACQUIRING; a Revoke racing the reply is kept in revoked_before_grant (the
 * keeper's loop then gives the lease back).
 * Only from NO_TOKEN: a launch that already asked needs no lease. */
static void lease_at_start_locked(gs_gate *g)
{
    g->state = GS_GATE_ACQUIRING;
    pthread_mutex_unlock(&g->mu);
    uint64_t token_id = 0;
    uint32_t quantum_us = 0;
    int rc = gs_rpc_lease_if_free(g->rpc, RELEASE_WAIT_MS, &token_id, &quantum_us);
    pthread_mutex_lock(&g->mu);
    if (g->state != GS_GATE_ACQUIRING)
        return;   /* fork or stop reset the gate underneath us */
    if (rc == GS_RPC_OK && token_id != 0) {
        g->state = GS_GATE_LEASED;
        g->token_id = token_id;
        g->quantum_us = quantum_us ? quantum_us : 1000;
        g->revoke_pending = g->revoked_before_grant == token_id;
        g->revoked_before_grant = 0;
        g->token_lost = false;
        atomic_fetch_add_explicit(&g->n_leases_at_start, 1, memory_order_relaxed);
        GS_DEBUG("token %llu leased at start: %u us", (unsigned long long)token_id, quantum_us);
    } else {
        if (rc != GS_RPC_OK)
            GS_DEBUG("AcquireToken(lease_if_free) returned %d (%s); the first launch asks", rc,
                     gs_rpc_last_error());
        g->state = GS_GATE_NO_TOKEN;
    }
    pthread_cond_broadcast(&g->changed);
}

static void *keeper_main(void *arg)
{
    gs_gate *g = arg;
    gs_capture_thread_relaxed();   /* its calls never invalidate a capture */
    pthread_mutex_lock(&g->mu);
    while (!g->stopping) {
        if (g->service_requested && g->service) {
            g->service_requested = false;
            pthread_mutex_unlock(&g->mu);
            g->service(g->service_ctx);
            pthread_mutex_lock(&g->mu);
            continue;
        }
        if (g->lease_wanted) {
            g->lease_wanted = false;
            if (g->state == GS_GATE_NO_TOKEN && g->rpc)
                lease_at_start_locked(g);
            continue;
        }
        uint64_t now = monotonic_ns();
        if (g->state == GS_GATE_HOLDING) {
            uint64_t deadline = g->grant_ns + (uint64_t)g->quantum_us * 1000ull;
            if (g->revoke_pending) {
                GS_DEBUG("token %llu: revoked, ending the slice", (unsigned long long)g->token_id);
                end_slice_locked(g, false);
                continue;
            }
            /* Renew a little ahead, so the reply is back before the queued
             * work runs out; when tokend says no, the slice runs to its end. */
            uint64_t renew_at = deadline - renew_lead_ns(g, deadline);
            if (now >= deadline || g->wrap_up || (now >= renew_at && !g->renew_refused)) {
                renew_or_end_slice_locked(g, now >= deadline || g->wrap_up);
                continue;
            }
            if (now >= g->next_idle_check_ns) {
                /* Waiting in a checkpoint for its own GPU work is busy, not idle. */
                if (!atomic_load_explicit(&g->activity, memory_order_relaxed) &&
                    !atomic_load_explicit(&g->gpu_waiters, memory_order_relaxed) && !gpu_work_outstanding(g)) {
                    end_slice_locked(g, true);
                    continue;
                }
                atomic_store_explicit(&g->activity, 0, memory_order_relaxed);
                g->next_idle_check_ns = now + idle_period_ns(g);
            }
            uint64_t wake = g->renew_refused ? deadline : renew_at;
            wait_until_ns(&g->keeper_wake, &g->mu, wake < g->next_idle_check_ns ? wake : g->next_idle_check_ns);
        } else if (g->state == GS_GATE_UNMETERED) {
            pthread_mutex_unlock(&g->mu);
            bool attached = gs_rpc_wait_attached(g->rpc, 0, NULL);
            pthread_mutex_lock(&g->mu);
            if (attached && g->state == GS_GATE_UNMETERED) {
                GS_WARN("tokend at %s is back after %.1f s; launches are metered again", g->label,
                        (double)(monotonic_ns() - g->loss_since_ns) / 1e9);
                g->loss_logged = false;
                atomic_store_explicit(&g->open, 0, memory_order_release);
                g->state = GS_GATE_NO_TOKEN;
                pthread_cond_broadcast(&g->changed);
                continue;
            }
            wait_until_ns(&g->keeper_wake, &g->mu, now + 200000000ull);
        } else if (g->state == GS_GATE_LEASED && (g->revoke_pending || g->token_lost)) {
            return_lease_locked(g);
        } else {
            pthread_cond_wait(&g->keeper_wake, &g->mu);
        }
    }
    g->keeper_running = false;
    pthread_mutex_unlock(&g->mu);
    return NULL;
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
                atomic_store_explicit(&g->preempted_ns, monotonic_ns(), memory_order_relaxed);
        }
        pthread_cond_signal(&g->keeper_wake);
        if (g->doorbell_pause_until_ns) {
            /* The pause was answered: its quiet period is lifted. */
            g->doorbell_quiet_until_ns = 0;
            g->anticipation_quiet_until_ns = 0;
        }
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

/* The listener thread heard a ring (preempt_doorbell.h) that stops this
 * slice: close the gate as a Revoke would, but keep the token. tokend's
 * Revoke (about 1 ms behind) ends the slice as usual. */
static void on_doorbell(void *ctx)
{
    gs_gate *g = ctx;
    pthread_mutex_lock(&g->mu);
    if (g->state == GS_GATE_HOLDING && gs_doorbell_ring_applies(&g->doorbell, monotonic_ns()))
        doorbell_pause_locked(g, "rang");
    pthread_mutex_unlock(&g->mu);
}

void gs_gate_attach_doorbell(gs_gate *g, const char *socket_path, uint32_t slot, int priority)
{
    gs_doorbell_attach(&g->doorbell, socket_path, slot, priority, on_doorbell, g);
}

void gs_gate_wake_keeper(gs_gate *g)
{
    pthread_mutex_lock(&g->mu);
    pthread_cond_signal(&g->keeper_wake);
    pthread_mutex_unlock(&g->mu);
}

/* Set one of the keeper's request flags and wake it (starting it if needed). */
static void ask_keeper(gs_gate *g, bool *request)
{
    pthread_mutex_lock(&g->mu);
    *request = true;
    ensure_keeper_locked(g);
    pthread_cond_signal(&g->keeper_wake);
    pthread_mutex_unlock(&g->mu);
}

void gs_gate_lease_at_start(gs_gate *g) { ask_keeper(g, &g->lease_wanted); }

void gs_gate_kick_service(gs_gate *g) { ask_keeper(g, &g->service_requested); }

/* ---- checkpoints: bound the GPU work queued past the token ---- */

static gs_work_estimate *estimate_slot(gs_gate *g, const void *work)
{
    uintptr_t h = (uintptr_t)work;
    h ^= h >> 17;
    h *= 0x9E3779B1u;
    return &g->estimates[(h >> 7) % GS_GATE_WORK_ESTIMATES];
}

uint32_t gs_gate_work_estimate_us(gs_gate *g, const void *work)
{
    if (!work)
        return 0;
    pthread_mutex_lock(&g->checkpoint_mu);
    gs_work_estimate *e = estimate_slot(g, work);
    uint32_t us = e->work == work ? e->gpu_us : 0;
    pthread_mutex_unlock(&g->checkpoint_mu);
    return us;
}

/* One launch of `work` took `us` from its stream reaching it to its end.
 * The first launch of a slice may have queued behind the previous holder's
 * tail (up to a whole kernel of someone else's), so its sample may only
 * shrink an estimate already measured past a slice's first launch
 * ("solid"); otherwise shrink at once, grow half way (a kernel's length
 * also follows its arguments). The first measurement is taken as is; a
 * colliding key takes the slot over. */
static void record_estimate_locked(gs_gate *g, const void *work, uint32_t us, bool first_of_slice)
{
    gs_work_estimate *e = estimate_slot(g, work);
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
    uint32_t longest = 0;
    for (int i = 0; i < GS_GATE_WORK_ESTIMATES; i++)
        if (g->estimates[i].work && g->estimates[i].gpu_us > longest)
            longest = g->estimates[i].gpu_us;
    atomic_store_explicit(&g->longest_work_us, longest, memory_order_relaxed);
}

static void adapt_interval(gs_gate *g, float ms, uint32_t launches, bool contiguous)
{
    /* Aim: one checkpoint interval ~ 1 ms of GPU timeline. */
    double per_launch_ms = (double)ms / (double)launches;
    /* GPU time per kernel only where the GPU was busy the whole interval:
     * across an idle gap (think time) the events measure the gap too. */
    if (contiguous)
        atomic_store_explicit(&g->launch_gpu_us, (uint32_t)(per_launch_ms * 1000.0), memory_order_relaxed);
    double target = per_launch_ms > 0 ? 1.0 / per_launch_ms : GS_GATE_MAX_INTERVAL;
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
        record_estimate_locked(g, cp->work, (uint32_t)(own_ms * 1000.0f), cp->first_of_slice);
        /* One launch timed alone: also the process's GPU time per launch. */
        if (atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed) == 0)
            atomic_store_explicit(&g->launch_gpu_us, (uint32_t)(own_ms * 1000.0f), memory_order_relaxed);
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


static bool newest_pending_locked(gs_gate *g)
{
    if (g->queue_count == 0)
        return false;
    gs_checkpoint *newest = &g->checkpoints[g->queue[(g->queue_head + g->queue_count - 1) % GS_GATE_CHECKPOINTS]];
    return gs_cu.cuEventQuery(newest->event) == CUDA_ERROR_NOT_READY;
}

static void sleep_until_ns(uint64_t deadline_ns)
{
    if (deadline_ns <= monotonic_ns())
        return;
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

void gs_gate_checkpoint_before_launch(gs_gate *g, const void *work)
{
    /* This kernel's or graph's own length when known: a process mixing
     * short kernels and long graphs must not start a long one that does not
     * fit because the last thing it measured was short. */
    uint32_t kernel_us = gs_gate_work_estimate_us(g, work);
    if (!kernel_us)
        kernel_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    if (kernel_us < GS_GATE_LONG_KERNEL_US || !gs_cu.cuEventQuery)
        return;
    uint64_t kernel_ns = (uint64_t)kernel_us * 1000ull;
    pthread_mutex_lock(&g->checkpoint_mu);
    bool pending = newest_pending_locked(g);
    uint64_t queued_end = g->newest_end_ns;
    pthread_mutex_unlock(&g->checkpoint_mu);
    uint64_t now = monotonic_ns();
    if (!pending || queued_end < now)
        queued_end = now;
    pthread_mutex_lock(&g->mu);
    if (g->state == GS_GATE_HOLDING && anticipation_pause_locked(g, now, queued_end + kernel_ns)) {
        pthread_mutex_unlock(&g->mu);
        return;   /* gs_gate_enter waits for the ring, the window's end or the bound */
    }
    /* Wrap-up: this kernel would end well past the slice's quantum. */
    if (g->state == GS_GATE_HOLDING && !g->revoke_pending && !g->wrap_up) {
        uint64_t deadline = g->grant_ns + (uint64_t)g->quantum_us * 1000ull;
        if (queued_end + kernel_ns > deadline + kernel_ns / GS_GATE_FEED_AHEAD_FRACTION) {
            g->wrap_up = true;
            atomic_fetch_add_explicit(&g->n_wrap_ups, 1, memory_order_relaxed);
            GS_DEBUG("token %llu: wrap-up: a %u us kernel after %lld us of queued work would end %lld us past "
                     "the quantum's end", (unsigned long long)g->token_id, kernel_us,
                     (long long)((int64_t)(queued_end - now) / 1000),
                     (long long)((int64_t)(queued_end + kernel_ns - deadline) / 1000));
            pthread_cond_signal(&g->keeper_wake);
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (!pending)
        return;
    /* Pace: submit when the running kernel is within the feed-ahead margin
     * of its end, so the GPU stays fed and at most about one kernel is
     * queued past a closing gate. Not while nobody else wants the GPU
     * (tokend's `contended` on the doorbell page): then no gate closes for
     * anyone, and a late wake-up on a busy machine would only idle the GPU
     * (a lone tenant's p99 paid about 5% for it). */
    if (!gs_doorbell_contended(&g->doorbell))
        return;
    uint64_t ahead = recently_preempted(g, now)
                         ? GS_GATE_PREEMPTED_FEED_AHEAD_US * 1000ull
                         : GS_GATE_FEED_AHEAD_US * 1000ull + kernel_ns / GS_GATE_FEED_AHEAD_FRACTION;
    if (queued_end > now + ahead) {
        /* Waiting for its own GPU work: busy, not idle (the keeper must not
         * end the slice as idle under a paced launch). */
        atomic_fetch_add_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
        sleep_until_ns(queued_end - ahead);
        atomic_fetch_sub_explicit(&g->gpu_waiters, 1, memory_order_relaxed);
    }
    /* Contiguous only if the running kernel outlasted the sleep: an
     * estimate too long lets the GPU run dry, and measuring across that gap
     * would keep the estimate too long. */
    pthread_mutex_lock(&g->checkpoint_mu);
    tls_contiguous = newest_pending_locked(g);
    pthread_mutex_unlock(&g->checkpoint_mu);
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
    while (g->queue_count > 0) {
        CUresult q = gs_cu.cuEventQuery(g->checkpoints[g->queue[g->queue_head]].event);
        if (q == CUDA_ERROR_NOT_READY)
            break;
        complete_oldest_locked(g);
    }
    bool contiguous = tls_contiguous || g->queue_count >= GS_GATE_MAX_OUTSTANDING;
    tls_contiguous = false;
    while (g->queue_count >= GS_GATE_MAX_OUTSTANDING)
        wait_oldest_locked(g);
    /* Earlier work done: this launch's kernel is running or about to. */
    uint32_t work_us = 0;
    if (work) {
        gs_work_estimate *e = estimate_slot(g, work);
        work_us = e->work == work ? e->gpu_us : 0;
    }
    if (!work_us)
        work_us = atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed);
    /* Atomic: the keeper reads it under g->mu, not checkpoint_mu. */
    __atomic_store_n(&g->newest_end_ns, monotonic_ns() + (uint64_t)work_us * 1000ull, __ATOMIC_RELAXED);
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
    g->revoke_pending = false;
    g->wrap_up = false;
    g->doorbell_pause_until_ns = 0;
    g->pause_anticipated = false;
    g->token_lost = false;
    g->revoked_before_grant = 0;
    g->newest_end_ns = 0;
    g->n_contexts = 0;
    g->loss_logged = false;
    memset(g->checkpoints, 0, sizeof g->checkpoints);
    memset(g->estimates, 0, sizeof g->estimates);
    atomic_store(&g->longest_work_us, 0);
    tls_start = NULL;
    tls_start_armed = false;
    g->queue_head = g->queue_count = 0;
    g->last_done = -1;
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
    out->interval = atomic_load(&g->interval);
    pthread_mutex_lock(&g->mu);
    out->state = g->state;
    out->quantum_us = g->quantum_us;
    pthread_mutex_unlock(&g->mu);
}
