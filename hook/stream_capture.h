/* stream_capture: what the shim must know about CUDA stream capture.
 *
 * Work launched into a capturing stream does not run: it becomes a graph
 * node, run later by cuGraphLaunch (gated and charged there). So such a
 * launch is neither gated nor charged, and the shim never records or
 * queries an event in a capturing stream (cuda.h: that invalidates the
 * capture, CUDA_ERROR_CAPTURED_EVENT). The shim's own driver calls on
 * application threads always run in RELAXED capture mode (a GLOBAL-mode
 * event query beside another thread's GLOBAL capture is "potentially
 * unsafe" and would invalidate it), and the gate keeper thread is RELAXED
 * for good and waits only on non-captured work.
 *
 * Nothing here runs on the launch fast path: the counter is read by slow
 * paths only. */
#ifndef GSLICE_STREAM_CAPTURE_H
#define GSLICE_STREAM_CAPTURE_H

#include <stdatomic.h>
#include <stdbool.h>

#include "gslice_cuda_abi.h"

/* Captures begun and not yet ended in this process (a hint: a capture
 * abandoned without cuStreamEndCapture keeps it above 0, which only makes
 * the shim more careful). */
extern _Atomic int gs_captures_active;

static inline bool gs_capture_any(void)
{
    return atomic_load_explicit(&gs_captures_active, memory_order_acquire) > 0;
}

/* After cuStreamBeginCapture* / cuStreamEndCapture returned rc. */
void gs_capture_began(CUresult rc);
void gs_capture_ended(CUresult rc);

/* Does a launch into this stream go into a capture (or would the driver
 * refuse it because of one)? Only asks the driver while a capture is active. */
bool gs_capture_launch_is_captured(CUstream stream, int ptsz);

/* Around the shim's own driver calls on an application thread: RELAXED,
 * whether or not a capture is active now (one may begin on another thread
 * at any moment). Slow paths only: two driver calls. Returns the mode to
 * restore, or -1 when nothing was changed. */
int gs_capture_relax(void);
void gs_capture_restore(int previous);

/* For the shim's own threads (gate keeper): RELAXED from now on. */
void gs_capture_thread_relaxed(void);

#endif
