/* Per-process kernel timeline of the simulated GPU, for finding where a
 * latency tail comes from (a late submission, a wait for the engine, or the
 * simulator's own timer waking late). Off unless GSLICE_SIM_KERNEL_TRACE
 * names a directory; then each process writes
 * <dir>/kernels-<pid>.tsv at exit, one line per kernel run. */
#ifndef GSLICE_SIM_KERNEL_TRACE_H
#define GSLICE_SIM_KERNEL_TRACE_H

#include <stdbool.h>
#include <stdint.h>

/* Is tracing on for this process? (Reads the environment once.) */
bool sim_kernel_trace_enabled(void);

/* One kernel: queued on its stream at enqueued_ns, taken by the stream's
 * worker at ready_ns, on the engine from start_ns to end_ns (stream time:
 * back to back with its context's previous work, start_ns may precede
 * ready_ns; see sim_engine_turn), asked to run
 * requested_ns, of which away_ns stopped at slice ends while other
 * contexts had the engine (CLOCK_MONOTONIC). */
void sim_kernel_trace_add(uint64_t enqueued_ns, uint64_t ready_ns, uint64_t start_ns, uint64_t end_ns,
                          uint64_t requested_ns, uint64_t away_ns);

#endif
