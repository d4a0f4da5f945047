/* gate_keeper: the per-gate keeper thread, which ends slices: at quantum
 * expiry (after asking tokend to renew), on a Revoke, on connection loss,
 * or when the process went idle; it also runs the ledger's service hook
 * and asks for a lease at start (gate_lease.c). Ending a slice: close the
 * gate, let launches in flight finish submitting, synchronise (idle, lost)
 * or wait for the handover point (queue_bound.c), release with the GPU time
 * used. */
#define _GNU_SOURCE
#include "gate_internal.h"

#include <signal.h>
#include <string.h>

#include "log.h"
#include "real_driver.h"
#include "rpc_client.h"
#include "stream_capture.h"

/* RenewToken goes out this long (plus two kernels) before the quantum ends:
 * a round trip from C is ~0.3-3 ms here, and the queue must not run dry. */
#define RENEW_LEAD_NS 3000000ull
#define WRAP_UP_POLL_NS 1000000ull

static void *keeper_main(void *arg);

/* Idle check period (pure; tests call it through shim_api.h). Short, so a
 * bursty process gives the token back soon after its burst (the tail is
 * charged to it and idles the GPU), and at least two kernels' worth of GPU
 * time, so a program that synchronises after each long kernel is still
 * seen launching: max(1 ms, two kernels). 0.2 ms instead of 1 ms while
 * another group wants the GPU in a process whose idle gaps are long. */
uint64_t gs_gate_idle_period_for(uint32_t launch_gpu_us, uint64_t idle_gap_ns, bool contended)
{
    uint64_t period = 2000ull * launch_gpu_us;
    uint64_t floor = contended && idle_gap_ns >= GS_GATE_LONG_IDLE_GAP_NS ? GS_GATE_QUICK_IDLE_PERIOD_NS : 1000000ull;
    return period > floor ? period : floor;
}

/* mu held. Only the holder's keeper polls. */
uint64_t gs_gate_idle_period_ns(gs_gate *g)
{
    return gs_gate_idle_period_for(atomic_load_explicit(&g->launch_gpu_us, memory_order_relaxed), g->idle_gap_ns,
                                   gs_doorbell_contended(&g->doorbell));
}

/* mu held: a launch after an idle release; learn how long the gap was. */
void gs_gate_note_idle_gap_locked(gs_gate *g, uint64_t now)
{
    if (!g->idle_since_ns)
        return;
    uint64_t gap = now > g->idle_since_ns ? now - g->idle_since_ns : 0;
    g->idle_gap_ns = g->idle_gap_ns ? (3 * g->idle_gap_ns + gap) / 4 : gap;
    g->idle_since_ns = 0;
}

void gs_gate_ensure_keeper_locked(gs_gate *g)
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

/* Wait for everything the slice queued: push each context it launched in.
 * False when a context could not be synchronised because a capture began
 * after the caller looked (the driver refuses to wait for a capturing
 * stream): the caller then waits for the newest checkpoint instead. */
static bool synchronise_contexts(CUcontext *ctxs, int n)
{
    if (!gs_cu.cuCtxPushCurrent || !gs_cu.cuCtxSynchronize || !gs_cu.cuCtxPopCurrent)
        return true;
    bool all = true;
    for (int i = 0; i < n; i++) {
        if (gs_cu.cuCtxPushCurrent(ctxs[i]) != CUDA_SUCCESS)
            continue;
        CUresult rc = gs_cu.cuCtxSynchronize();
        if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED)
            all = false;
        else if (rc != CUDA_SUCCESS)
            GS_DEBUG("cuCtxSynchronize at slice end returned %d (the application's error, left to it)", rc);
        CUcontext popped;
        gs_cu.cuCtxPopCurrent(&popped);
    }
    return all;
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
    /* The idle gap runs from here: a launch during the release below ends
     * it (set after the release, a later slow-path entry, after a wait for
     * the next grant, read that wait as idleness, and a process
     * synchronising every step looked bursty: gate_burst_end.c). */
    if (idle)
        g->idle_since_ns = gs_gate_monotonic_ns();
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
    /* Wait for all of this process's queued work, and charge it, when:
     * - nobody else waits (a capped group alone, not renewed): no next
     *   holder to overlap, and the tail would run uncharged in the group's
     *   own pause: up to a whole long kernel that passed on its launch
     *   countdown (no fit check, no checkpoint), so a 30% cap with 12.5 ms
     *   kernels got 41% of the GPU, charged 30%;
     * - long kernels are handed over and a handback will be heard: the
     *   next group then starts the moment they end (gate_handback.c).
     *   Their handover point leads their estimated end by the release's
     *   round trip; a next group started there shared the GPU with the
     *   tail, and an estimate a little short sliced a 400 ms kernel for
     *   5-10 ms. */
    bool handover = !lost && !idle && !preempted && gs_doorbell_grants_at_once(&g->doorbell);
    bool long_handback = handover && gs_gate_work_item_us(g) && gs_gate_may_hand_back(g);
    bool drain = idle || lost || long_handback || (!preempted && !gs_doorbell_contended(&g->doorbell));
    if (drain) {
        if (gs_capture_any() || !synchronise_contexts(ctxs, n))
            gs_gate_wait_newest_checkpoint(g);
    }
    uint64_t end_ns = drain ? gs_gate_monotonic_ns() : gs_gate_wait_for_handoff_point(g, preempted);
    /* Tell the next group now, not through the release's round trip and
     * its grant's (gate_handback.c): when this process's work is done, or
     * at the handover point of short kernels while tokend hands over at
     * once (their bounded tail is what an at-once handover lets a next
     * holder meet anyway). Not at a preemption: tokend granted the
     * preemptor already; with at-release its grant waits for the tail. */
    if (!lost && (idle || long_handback || (handover && !gs_gate_work_item_us(g))))
        gs_gate_hand_back(g, end_ns);
    /* A renewed slice starts where the previous one's queued work ends,
     * which may still lie ahead when it ends at once. */
    uint64_t used_us = end_ns > grant_ns ? (end_ns - grant_ns) / 1000ull : 0;
    uint64_t overrun_us = used_us > quantum_us ? used_us - quantum_us : 0;
    bool lease = false;
    if (!lost) {
        int rc;
        if (idle)
            rc = gs_rpc_release_idle_lease(g->rpc, token_id, used_us, GS_GATE_RELEASE_WAIT_MS, &lease);
        else
            rc = gs_rpc_release(g->rpc, token_id, used_us, overrun_us, false, GS_GATE_RELEASE_WAIT_MS);
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
    uint64_t now = gs_gate_monotonic_ns();
    /* The slice so far includes the long kernel still queued in it. */
    uint64_t queued_end = __atomic_load_n(&g->newest_end_ns, __ATOMIC_RELAXED);
    uint64_t until = queued_end > now ? queued_end : now;
    uint64_t used_us = until > g->grant_ns ? (until - g->grant_ns) / 1000ull : 0;
    uint32_t work = gs_gate_work_item_us(g);
    pthread_mutex_unlock(&g->mu);
    uint64_t new_token = 0;
    uint32_t quantum_us = 0;
    int rc = gs_rpc_renew(g->rpc, token_id, used_us, work, GS_GATE_RELEASE_WAIT_MS, &new_token, &quantum_us);
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
        /* A pause (a ring's or anticipation's) stays until the Revoke or
         * its bound: a renewal says only that the ringer's ask had not
         * reached tokend yet. The ringer asks from its keeper once its
         * head-start launch is queued, 0.5-1.1 ms after its ring on an
         * H200, and tokend renewed this slice in that gap; the holder then
         * fed a 1.8 ms kernel in front of the burst (p99 4.3 ms beside
         * 8192 matmuls, latency_trace_20261128T1525Z_h200_torch). */
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
        if (g->keeper_ask_wanted) {
            g->keeper_ask_wanted = false;
            gs_gate_keeper_ask_locked(g);
            continue;
        }
        if (g->lease_wanted) {
            g->lease_wanted = false;
            if (g->state == GS_GATE_NO_TOKEN && g->rpc)
                gs_gate_lease_at_start_locked(g);
            continue;
        }
        uint64_t now = gs_gate_monotonic_ns();
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
            /* A wrap-up (the next kernel would not fit) is decided at renew_at,
             * not at once: with 1 s kernels it comes right after the grant,
             * when a capped neighbour is still in its short pause, and the
             * renewal then ran two kernels back to back every time (2 s
             * clumps: a 70% group's 10 s windows read 66-74%). Refused
             * already: nothing to wait for. */
            /* ... or once the slice's queued work is done: a quantum sized
             * on a first kernel that shared the GPU (2.11 s for a 1 s
             * kernel) put renew_at 60 ms past the kernel's end, and the
             * slice held the token idle until then, charged: a 30% cap's
             * window then lacked 11 ms of room for its next 1 s kernel,
             * which came 2.1 s late (27.2% over 30 s, long_work). */
            bool work_done = g->wrap_up && now < renew_at && !g->renew_refused && !gs_gate_gpu_work_outstanding(g);
#ifdef GSLICE_TEST_CUT_WRAP_UP_AT_WORK_END   /* test-only build (hook/build.py TEST_CUTS) */
            work_done = false;
#endif
            bool wrap_due = g->wrap_up && (now >= renew_at || g->renew_refused || work_done);
            bool renew_due = now >= renew_at && !g->renew_refused;
            /* Idle: no launch since the last idle check, none waiting for its
             * own GPU work (a checkpoint: busy, not idle) and the work done.
             * Checked at the renewal too while another group waits: a burst
             * that ended just before renew_at paid a renewal round trip
             * before its idle release (~0.7 ms more idle GPU after each
             * burst of a high-priority tenant beside others). Not when
             * alone: a renewal then idles nobody, and a 30% cap alone with
             * 12.5 ms kernels, each waited for, released between two of
             * them was charged 1 point over its GPU time. */
            bool renewal_check = renew_due && !wrap_due && now < deadline && gs_doorbell_contended(&g->doorbell);
            /* The application synchronised with nothing left (gate_burst_end.c). */
            bool burst_end = g->burst_end_ns != 0;
            g->burst_end_ns = 0;
            if ((now >= g->next_idle_check_ns || renewal_check || burst_end) &&
                !atomic_load_explicit(&g->activity, memory_order_relaxed) &&
                !atomic_load_explicit(&g->gpu_waiters, memory_order_relaxed) && !gs_gate_gpu_work_outstanding(g)) {
                if (burst_end)
                    atomic_fetch_add_explicit(&g->n_burst_ends, 1, memory_order_relaxed);
                end_slice_locked(g, true);
                continue;
            }
            if (now >= deadline || wrap_due || renew_due) {
                renew_or_end_slice_locked(g, now >= deadline || g->wrap_up);
                continue;
            }
            if (now >= g->next_idle_check_ns) {
                atomic_store_explicit(&g->activity, 0, memory_order_relaxed);
                g->next_idle_check_ns = now + gs_gate_idle_period_ns(g);
            }
            uint64_t wake = g->renew_refused ? deadline : renew_at;
            /* A pending wrap-up: look again soon for the queued work's end. */
            if (g->wrap_up && !g->renew_refused && wake > now + WRAP_UP_POLL_NS)
                wake = now + WRAP_UP_POLL_NS;
            gs_gate_wait_until_ns(&g->keeper_wake, &g->mu, wake < g->next_idle_check_ns ? wake : g->next_idle_check_ns);
        } else if (g->state == GS_GATE_UNMETERED) {
            pthread_mutex_unlock(&g->mu);
            bool attached = gs_rpc_wait_attached(g->rpc, 0, NULL);
            pthread_mutex_lock(&g->mu);
            if (attached && g->state == GS_GATE_UNMETERED) {
                GS_WARN("tokend at %s is back after %.1f s; launches are metered again", g->label,
                        (double)(gs_gate_monotonic_ns() - g->loss_since_ns) / 1e9);
                g->loss_logged = false;
                atomic_store_explicit(&g->open, 0, memory_order_release);
                g->state = GS_GATE_NO_TOKEN;
                pthread_cond_broadcast(&g->changed);
                continue;
            }
            gs_gate_wait_until_ns(&g->keeper_wake, &g->mu, now + 200000000ull);
        } else if (g->state == GS_GATE_LEASED && (g->revoke_pending || g->token_lost)) {
            gs_gate_return_lease_locked(g);
        } else {
            pthread_cond_wait(&g->keeper_wake, &g->mu);
        }
    }
    g->keeper_running = false;
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* Set one of the keeper's request flags and wake it (starting it if needed). */
void gs_gate_ask_keeper(gs_gate *g, bool *request)
{
    pthread_mutex_lock(&g->mu);
    *request = true;
    gs_gate_ensure_keeper_locked(g);
    pthread_cond_signal(&g->keeper_wake);
    pthread_mutex_unlock(&g->mu);
}

void gs_gate_lease_at_start(gs_gate *g) { gs_gate_ask_keeper(g, &g->lease_wanted); }

void gs_gate_kick_service(gs_gate *g)
{
    pthread_mutex_lock(&g->mu);
    bool keeper_waits_for_a_token = g->ask_via_keeper;
    pthread_mutex_unlock(&g->mu);
    /* The keeper may wait seconds for a grant (gate_handback.c): memory
     * given back must not wait with it. */
    if (keeper_waits_for_a_token && g->service)
        g->service(g->service_ctx);
    else
        gs_gate_ask_keeper(g, &g->service_requested);
}

