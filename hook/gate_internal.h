/* gate_internal: what the gate's modules share (hidden; not for the rest
 * of the shim, which uses token_gate.h only).
 *
 *   token_gate.c      the gate's state: slow path (gs_gate_enter), acquire,
 *                     Revoke and connection loss, fork, stats
 *   gate_keeper.c     the keeper thread: quantum, renewal, idle end, slice end
 *   gate_lease.c      leases: kept across an idle gap, taken at start, returned
 *   gate_head_start.c a preemptor launching at its ring while the keeper asks;
 *                     the keeper's ask behind any provisional slice
 *   gate_handback.c   a slice's end told to the next group, which starts
 *                     before its grant
 *   gate_burst_end.c  a bursty holder's idle end at its own synchronisation
 *   gate_pause.c      doorbell pauses and anticipation (preempt_doorbell.h)
 *   kernel_lengths.c  checkpoint events: GPU time per launch, per-function
 *                     estimates, checkpoint interval
 *   queue_bound.c     how much GPU work is queued past the gate: pacing,
 *                     wrap-up, the handover point
 *
 * "_locked" functions take g->mu held (kernel_lengths' take checkpoint_mu
 * where they say so). */
#ifndef GSLICE_GATE_INTERNAL_H
#define GSLICE_GATE_INTERNAL_H

#include <errno.h>
#include <time.h>

#include "token_gate.h"

/* ReleaseToken / RenewToken / a lease request: how long the keeper waits. */
#define GS_GATE_RELEASE_WAIT_MS 5000
/* AcquireToken: tokend's own wait, and ours for its reply. */
#define GS_GATE_ACQUIRE_TIMEOUT_MS 10000
#define GS_GATE_ACQUIRE_WAIT_MS 12000
/* gRPC's status when tokend's wait for a token ran out: ask again. */
#define GS_GATE_GRPC_DEADLINE_EXCEEDED 4

/* pthread_cond_timedwait on a CLOCK_MONOTONIC condvar. */
static inline void gs_gate_wait_until_ns(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    pthread_cond_timedwait(cv, mu, &ts);
}

static inline void gs_gate_sleep_until_ns(uint64_t deadline_ns)
{
    if (deadline_ns <= gs_gate_monotonic_ns())
        return;
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000ull),
                          .tv_nsec = (long)(deadline_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* gate_keeper.c */
uint64_t gs_gate_idle_period_ns(gs_gate *g);
uint64_t gs_gate_idle_period_for(uint32_t launch_gpu_us, uint64_t idle_gap_ns, bool contended);
void gs_gate_note_idle_gap_locked(gs_gate *g, uint64_t now);
void gs_gate_ensure_keeper_locked(gs_gate *g);
void gs_gate_ask_keeper(gs_gate *g, bool *request);

/* token_gate.c */
void gs_gate_open_slice_locked(gs_gate *g, uint64_t token_id, uint32_t quantum_us, bool wake_keeper);
void gs_gate_granted_locked(gs_gate *g, uint64_t token_id, uint32_t quantum_us);
void gs_gate_after_grant_locked(gs_gate *g);

/* gate_head_start.c */
bool gs_gate_head_start_locked(gs_gate *g, uint64_t called_ns, uint64_t entered_ns); /* after a ring */
bool gs_gate_head_start_overdue_locked(gs_gate *g, uint64_t now);
void gs_gate_keeper_ask_locked(gs_gate *g);               /* keeper: a provisional slice's or a waiter's ask */

/* gate_handback.c */
void gs_gate_hand_back(gs_gate *g, uint64_t free_at_ns);   /* holder, its slice ending (mu not held) */
bool gs_gate_may_hand_back(gs_gate *g);                     /* would a handback be heard now? */
bool gs_gate_ask_via_keeper_locked(gs_gate *g);           /* a waiter: the keeper carries its ask */
void gs_gate_handback_heard_locked(gs_gate *g, uint64_t now);   /* listener */

/* gate_lease.c (keeper thread) */
void gs_gate_return_lease_locked(gs_gate *g);
void gs_gate_lease_at_start_locked(gs_gate *g);

/* gate_pause.c */
void gs_gate_pause_unanswered_locked(gs_gate *g);
void gs_gate_doorbell_pause_locked(gs_gate *g, const char *why);
bool gs_gate_anticipation_pause_locked(gs_gate *g, uint64_t now, uint64_t work_start_ns, uint64_t work_ns);
bool gs_anticipation_holds(uint64_t work_start_ns, uint64_t work_ns, uint64_t window_start_ns,
                           unsigned long_overlap_pct);   /* pure */
void gs_gate_doorbell_resume_locked(gs_gate *g, const char *why);
void gs_gate_heed_ring_locked(gs_gate *g, uint64_t now, const char *why);

/* kernel_lengths.c */
bool gs_gate_newest_pending_locked(gs_gate *g);              /* checkpoint_mu held */
bool gs_gate_newest_pending_any_thread_locked(gs_gate *g);   /* checkpoint_mu held */
bool gs_gate_gpu_work_outstanding(gs_gate *g);
uint32_t gs_gate_work_item_us(gs_gate *g);
uint64_t gs_gate_long_kernel_ns(gs_gate *g);
void gs_gate_wait_newest_checkpoint(gs_gate *g);
/* Any thread: wait until at most n checkpoints are outstanding. */
void gs_gate_wait_outstanding_down_to(gs_gate *g, int n);
/* Before an ask for a token (any thread): take in the lengths of the work
 * the GPU has finished, which the ask carries (kernel_lengths.c). */
void gs_gate_take_in_lengths_for_the_ask(gs_gate *g);
/* This thread waited for the gate: the GPU may have run dry meanwhile, so
 * its next checkpoint interval does not measure GPU time per launch. */
void gs_gate_note_gap(void);
/* After pacing: the next interval is contiguous only if this process's
 * work still ran when the launch went out. */
void gs_gate_note_fed(gs_gate *g);
void gs_gate_kernel_lengths_fork_child(gs_gate *g);
/* Pure: one more interval of interval_us GPU time over `launches` launches
 * (the GPU busy throughout); returns the GPU time per launch now (us). */
uint32_t gs_launch_gpu_time_add(gs_launch_gpu_time *t, double interval_us, uint32_t launches);

/* queue_bound.c */
/* Launches the slow path lets through before the next check (the
 * checkpoint interval, shortened while another group wants the GPU). */
int32_t gs_gate_batch_launches(gs_gate *g, int32_t interval);
/* The bound's arithmetic, pure (see queue_bound.c). */
uint64_t gs_queue_bound_feed_ahead_ns(uint64_t kernel_ns, bool preempted_lately, uint32_t lag_margin_us);
uint64_t gs_queue_bound_submit_at_ns(uint64_t now_ns, uint64_t queued_end_ns, uint64_t kernel_ns, bool contended,
                                     bool preempted_lately, uint32_t lag_margin_us);
uint32_t gs_submit_lag_add(gs_submit_lag *l, uint64_t lag_ns);
int32_t gs_queue_bound_batch_launches(int32_t interval, uint32_t launch_gpu_us, bool contended);
int gs_queue_bound_outstanding(bool alone, uint32_t launch_gpu_us, uint32_t work_item_us);
/* Checkpoints a launch may leave outstanding now (a holder alone: more). */
int gs_gate_outstanding_checkpoints(gs_gate *g);
/* Sleep until a pacing deadline with a 1 us timer slack; the thread's own
 * slack is put back after. */
void gs_gate_pacing_sleep_until_ns(uint64_t deadline_ns);
uint64_t gs_gate_wait_for_handoff_point(gs_gate *g, bool preempted);

#endif
