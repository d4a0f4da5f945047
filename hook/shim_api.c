/* shim_api: read-only views of the shim's state for tests and tools. */
#include "shim_api.h"

#include <string.h>

#include "config.h"
#include "device_slot.h"
#include "gate_internal.h"
#include "intercept_table.h"
#include "memory_ledger.h"
#include "shim.h"

/* GSLICE_VERSION comes from the build (hook/build.py: the package's version). */
#ifndef GSLICE_VERSION
#define GSLICE_VERSION "unknown"
#endif

_Static_assert(GSLICE_GATE_NO_TOKEN == GS_GATE_NO_TOKEN && GSLICE_GATE_ACQUIRING == GS_GATE_ACQUIRING &&
                   GSLICE_GATE_HOLDING == GS_GATE_HOLDING && GSLICE_GATE_RELEASING == GS_GATE_RELEASING &&
                   GSLICE_GATE_UNMETERED == GS_GATE_UNMETERED && GSLICE_GATE_LEASED == GS_GATE_LEASED,
               "shim_api.h's gate states are token_gate.h's");

GS_EXPORT const char *gslice_version(void) { return "gslice-shim " GSLICE_VERSION; }

GS_EXPORT int gslice_shim_stats_get(gslice_shim_stats *out)
{
    memset(out, 0, sizeof *out);
    out->metered = gs_config_get()->metered;
    out->slots = gs_slot_count();
    gs_slot *s = gs_slot_at(0);
    if (!s)
        return -1;
    gs_gate_stats g;
    gs_gate_get_stats(&s->gate, &g);
    out->gate_state = g.state;
    out->checkpoint_interval = g.interval;
    out->quantum_us = g.quantum_us;
    out->tokens_acquired = g.tokens_acquired;
    out->tokens_released = g.tokens_released;
    out->idle_releases = g.idle_releases;
    out->revokes = g.revokes;
    out->checkpoints = g.checkpoints;
    out->checkpoint_waits = g.checkpoint_waits;
    out->slow_entries = g.slow_entries;
    out->used_us = g.used_us;
    out->overrun_us = g.overrun_us;
    out->daemon_losses = g.daemon_losses;
    out->doorbell_pauses = g.doorbell_pauses;
    out->doorbell_unanswered = g.doorbell_unanswered;
    out->doorbell_rings = g.doorbell_rings;
    out->anticipation_pauses = g.anticipation_pauses;
    out->anticipation_lapses = g.anticipation_lapses;
    out->lease_resumes = g.lease_resumes;
    out->leases_at_start = g.leases_at_start;
    out->head_starts = g.head_starts;
    out->head_start_refusals = g.head_start_refusals;
    out->paced_launches = g.paced_launches;
    out->handbacks_sent = g.handbacks_sent;
    out->handback_starts = g.handback_starts;
    out->handback_lapses = g.handback_lapses;
    out->burst_ends = g.burst_ends;
    out->renewals = g.renewals;
    out->wrap_ups = g.wrap_ups;
    out->launch_gpu_us = g.launch_gpu_us;
    out->longest_work_us = g.longest_work_us;
    out->submit_lag_margin_us = g.submit_lag_margin_us;
    gs_ledger_stats l;
    gs_ledger_get_stats(&s->ledger, &l);
    out->memory_held = l.held;
    out->memory_pending_release = l.pending_release;
    out->tracked_allocations = l.tracked_entries;
    out->reservations = l.reservations;
    out->refusals = l.refusals;
    out->release_flushes = l.flushes;
    out->bytes_released = l.bytes_released;
    return 0;
}

GS_EXPORT uint64_t gslice_ledger_lookup_ptr(uint64_t dptr)
{
    uint64_t bytes = 0;
    return gs_ledger_lookup(GS_ALLOC_DEVICE_PTR, dptr, NULL, &bytes) ? bytes : 0;
}

GS_EXPORT int gslice_intercept_count(void) { return GS_ID_COUNT; }

GS_EXPORT const char *gslice_intercept_name(int i)
{
    return i >= 0 && i < GS_ID_COUNT ? gs_intercept_rows[i].name : NULL;
}

GS_EXPORT uint64_t gslice_queue_bound_submit_at_ns(uint64_t now_ns, uint64_t queued_end_ns, uint64_t kernel_ns,
                                                   int contended, int preempted_lately, uint32_t lag_margin_us)
{
    return gs_queue_bound_submit_at_ns(now_ns, queued_end_ns, kernel_ns, contended != 0, preempted_lately != 0,
                                       lag_margin_us);
}

GS_EXPORT void gslice_submit_lag_series(const uint64_t *lags_ns, int n, uint32_t *margins_us)
{
    gs_submit_lag l = {0, 0, 0};
    for (int i = 0; i < n; i++)
        margins_us[i] = gs_submit_lag_add(&l, lags_ns[i]);
}

GS_EXPORT void gslice_pacing_sleep_until_ns(uint64_t deadline_ns) { gs_gate_pacing_sleep_until_ns(deadline_ns); }

GS_EXPORT int32_t gslice_queue_bound_batch_launches(int32_t interval, uint32_t launch_gpu_us, int contended)
{
    return gs_queue_bound_batch_launches(interval, launch_gpu_us, contended != 0);
}

GS_EXPORT int gslice_queue_bound_outstanding(int alone, uint32_t launch_gpu_us, uint32_t work_item_us)
{
    return gs_queue_bound_outstanding(alone != 0, launch_gpu_us, work_item_us);
}

GS_EXPORT int gslice_anticipation_holds(uint64_t work_start_ns, uint64_t work_ns, uint64_t window_start_ns,
                                        unsigned long_overlap_pct)
{
    return gs_anticipation_holds(work_start_ns, work_ns, window_start_ns, long_overlap_pct);
}

GS_EXPORT void gslice_launch_gpu_time_series(const double *interval_us, const uint32_t *launches, int n,
                                             uint32_t *estimates_us)
{
    gs_launch_gpu_time t = {0, 0};
    for (int i = 0; i < n; i++)
        estimates_us[i] = gs_launch_gpu_time_add(&t, interval_us[i], launches[i]);
}

GS_EXPORT uint64_t gslice_gate_idle_period_ns(uint32_t launch_gpu_us, uint64_t idle_gap_ns, int contended)
{
    return gs_gate_idle_period_for(launch_gpu_us, idle_gap_ns, contended != 0);
}
