/* stream_capture: see stream_capture.h. */
#define _GNU_SOURCE
#include "stream_capture.h"

#include "log.h"
#include "real_driver.h"

_Atomic int gs_captures_active;

static __thread bool tls_relaxed_for_good __attribute__((tls_model("initial-exec")));

void gs_capture_began(CUresult rc)
{
    if (rc == CUDA_SUCCESS)
        atomic_fetch_add_explicit(&gs_captures_active, 1, memory_order_acq_rel);
}

void gs_capture_ended(CUresult rc)
{
    /* An invalidated capture ends too (cuStreamEndCapture returns
     * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and a NULL graph). */
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
        return;
    int n = atomic_load_explicit(&gs_captures_active, memory_order_acquire);
    while (n > 0 && !atomic_compare_exchange_weak_explicit(&gs_captures_active, &n, n - 1, memory_order_acq_rel,
                                                           memory_order_acquire))
        ;
}

bool gs_capture_launch_is_captured(CUstream stream, int ptsz)
{
    if (!gs_capture_any())
        return false;
    CUresult (*is_capturing)(CUstream, CUstreamCaptureStatus *) =
        ptsz && gs_cu.cuStreamIsCapturing_ptsz ? gs_cu.cuStreamIsCapturing_ptsz : gs_cu.cuStreamIsCapturing;
    if (!is_capturing)
        return true;   /* cannot tell: never gate or checkpoint while a capture may be active */
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult rc = is_capturing(stream, &status);
    /* An error (e.g. CUDA_ERROR_STREAM_CAPTURE_IMPLICIT for the legacy
     * stream beside a capture): the launch goes to the driver untouched,
     * which refuses it the same way. */
    return rc != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Always, not only while gs_capture_any(): another thread may begin a
 * GLOBAL capture between that test and the shim's call (3-4 captures in
 * 3000 were invalidated so beside a busy gate, test_capture.py). */
int gs_capture_relax(void)
{
    if (tls_relaxed_for_good || !gs_cu.cuThreadExchangeStreamCaptureMode)
        return -1;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (gs_cu.cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
        return -1;
    return (int)mode;
}

void gs_capture_restore(int previous)
{
    if (previous < 0)
        return;
    CUstreamCaptureMode mode = previous;
    gs_cu.cuThreadExchangeStreamCaptureMode(&mode);
}

void gs_capture_thread_relaxed(void)
{
    if (tls_relaxed_for_good || !gs_cu.cuThreadExchangeStreamCaptureMode)
        return;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CUresult rc = gs_cu.cuThreadExchangeStreamCaptureMode(&mode);
    if (rc == CUDA_SUCCESS)
        tls_relaxed_for_good = true;
    else
        GS_DEBUG("cuThreadExchangeStreamCaptureMode(RELAXED) for a shim thread returned %d; retried later", rc);
}
