/* shim_api: the shim's own C API (gslice_*), exported for tests and
 * tools (the cffi module gslice._shim_api wraps it). Not for applications. */
#ifndef GSLICE_SHIM_API_H
#define GSLICE_SHIM_API_H

#include <stdint.h>

/* gslice_shim_stats.gate_state (the gate's enum gs_gate_state, token_gate.h;
 * shim_api.c checks that they agree). */
enum gslice_gate_state {
    GSLICE_GATE_NO_TOKEN = 0,
    GSLICE_GATE_ACQUIRING = 1,
    GSLICE_GATE_HOLDING = 2,
    GSLICE_GATE_RELEASING = 3,
    GSLICE_GATE_UNMETERED = 4,
    GSLICE_GATE_LEASED = 5
};

typedef struct gslice_shim_stats {
    int metered;                 /* GSLICE_GROUP set and not disabled */
    int slots;                   /* tokend connections */
    int gate_state;              /* slot 0: enum gslice_gate_state */
    int32_t checkpoint_interval; /* launches per checkpoint */
    uint32_t quantum_us;
    uint64_t tokens_acquired, tokens_released, idle_releases, revokes;
    uint64_t checkpoints, checkpoint_waits, slow_entries;
    uint64_t used_us, overrun_us, daemon_losses;
    uint64_t doorbell_pauses, doorbell_unanswered, doorbell_rings;
    uint64_t anticipation_pauses, anticipation_lapses;
    uint64_t lease_resumes;      /* slices started on a kept lease, without a round trip */
    uint64_t leases_at_start;    /* 1 when tokend gave this process a free token as a lease at attach */
    uint64_t memory_held, memory_pending_release, tracked_allocations;
    uint64_t reservations, refusals, release_flushes, bytes_released;
    uint64_t head_starts;        /* bursts started at their preemption ring, before the grant */
    uint64_t head_start_refusals;
    uint64_t paced_launches;       /* launches held back until its queued work neared its end */
    uint64_t handbacks_sent;       /* slice ends this process told the next group of, before its release */
    uint64_t handback_starts;      /* slices started at another's handback, before the grant */
    uint64_t handback_lapses;      /* ... not granted within the provisional bound */
    uint64_t burst_ends;           /* idle releases found at the application's own synchronisation */
    uint64_t renewals, wrap_ups;   /* slices renewed without a pause; launches that waited for one */
    uint64_t launch_gpu_us;        /* GPU time per launch the gate measured (0: unknown) */
    uint64_t longest_work_us;      /* its longest per-kernel / per-graph estimate */
    uint64_t submit_lag_margin_us; /* paced submissions' lag, mean + 4 deviations (0: none measured) */
} gslice_shim_stats;

const char *gslice_version(void);
/* Fills *out for slot 0 (the only one in single-socket mode); 0 ok, -1 none yet. */
int gslice_shim_stats_get(gslice_shim_stats *out);
/* Bytes the ledger tracks for a device pointer, 0 when unknown. */
uint64_t gslice_ledger_lookup_ptr(uint64_t dptr);
/* The gate's queue bound (hook/queue_bound.c), pure arithmetic, for tests:
 * when the next submission of a kernel_ns kernel may go, with the queued
 * work ending at queued_end_ns, and how many launches a batch holds. */
uint64_t gslice_queue_bound_submit_at_ns(uint64_t now_ns, uint64_t queued_end_ns, uint64_t kernel_ns, int contended,
                                         int preempted_lately, uint32_t lag_margin_us);
/* The paced submissions' lag margin after each of lags_ns[0..n) (us). */
void gslice_submit_lag_series(const uint64_t *lags_ns, int n, uint32_t *margins_us);
/* A pacing sleep until deadline_ns (CLOCK_MONOTONIC), as a paced launch sleeps. */
void gslice_pacing_sleep_until_ns(uint64_t deadline_ns);
int32_t gslice_queue_bound_batch_launches(int32_t interval, uint32_t launch_gpu_us, int contended);
/* Checkpoints a launch may leave outstanding (~1 ms of GPU work each). */
int gslice_queue_bound_outstanding(int alone, uint32_t launch_gpu_us, uint32_t work_item_us);
/* Anticipation (hook/gate_pause.c), pure: 1 when work of work_ns starting
 * at work_start_ns waits for a preemptor expected from window_start_ns, a
 * long kernel running long_overlap_pct percent of itself into the window. */
int gslice_anticipation_holds(uint64_t work_start_ns, uint64_t work_ns, uint64_t window_start_ns,
                              unsigned long_overlap_pct);
/* The gate's GPU time per launch (hook/kernel_lengths.c), pure: fed the
 * contiguous intervals interval_us[i] over launches[i] launches, in order;
 * estimates_us[i] is its value after interval i. */
void gslice_launch_gpu_time_series(const double *interval_us, const uint32_t *launches, int n, uint32_t *estimates_us);
/* The keeper's idle check period (hook/gate_keeper.c), ns. */
uint64_t gslice_gate_idle_period_ns(uint32_t launch_gpu_us, uint64_t idle_gap_ns, int contended);
/* Number of rows in the intercept table and the exported name of row i. */
int gslice_intercept_count(void);
const char *gslice_intercept_name(int i);

#endif
