/* shim: lazy initialisation, fork and exit handling, launch slow path.
 *
 * Preloaded into every process of a container, the shim does nothing at
 * load time: the first intercepted CUDA/NVML call reads the config and
 * loads the real driver; the first metered call connects to tokend. */
#define _GNU_SOURCE
#include "shim.h"

#include <pthread.h>
#include <stdint.h>

#include "config.h"
#include "log.h"
#include "memory_ledger.h"
#include "memory_pools.h"
#include "process_overhead.h"
#include "real_driver.h"
#include "stream_capture.h"
#include "stream_frees.h"

static pthread_once_t shim_once = PTHREAD_ONCE_INIT;
static bool shim_metered;
static _Atomic int shim_started;

/* Launches the current checkpoint of this thread closes. */
static __thread uint32_t tls_launches_armed __attribute__((tls_model("initial-exec")));

static void fork_prepare(void)
{
    gs_slots_fork_prepare();
    gs_ledger_fork_prepare();
}

static void fork_parent(void)
{
    gs_ledger_fork_parent();
    gs_slots_fork_parent();
}

static void fork_child(void)
{
    gs_ledger_fork_child();
    gs_pools_fork_child();
    gs_stream_frees_fork_child();
    gs_overhead_fork_child();
    gs_contexts_fork_child();
    gs_slots_fork_child();
    gs_tls_slice.generation = UINT32_MAX;
    gs_tls_slice.countdown = 0;
}

static void shim_init(void)
{
    const gs_config *cfg = gs_config_get();
    shim_metered = cfg->metered;
    if (cfg->disabled) {
        GS_INFO("GSLICE_DISABLE is set: CUDA calls pass through unmetered");
    } else if (!cfg->metered) {
        GS_INFO("GSLICE_GROUP is not set: CUDA calls pass through unmetered");
    }
    if (!shim_metered) {
        __atomic_store_n(&gs_fast_gate, &gs_gate_passthrough, __ATOMIC_RELEASE);
    } else {
        pthread_atfork(fork_prepare, fork_parent, fork_child);
    }
    atomic_store(&shim_started, 1);
}

bool gs_shim_metered(void)
{
    if (__builtin_expect(!atomic_load_explicit(&shim_started, memory_order_acquire), 0))
        pthread_once(&shim_once, shim_init);
    return shim_metered;
}

void gs_launch_begin(gs_launch_ticket *t, CUstream stream, int ptsz, const void *work)
{
    t->gate = NULL;
    t->wake_keeper = false;
    t->wake_listeners = false;
    t->waited = false;
    t->paced_until_ns = 0;
    t->called_ns = gs_gate_monotonic_ns();
    t->work = work;
    t->checkpoint = false;
    t->launches = 0;
    if (!gs_shim_metered() || !gs_real_cuda_load()) {
        gs_tls_slice.generation = GS_GATE_PASSTHROUGH_GENERATION;
        gs_tls_slice.countdown = INT32_MAX / 2;
        return;
    }
    /* Recorded into a graph, not run: cuGraphLaunch is gated and charged. */
    if (gs_capture_launch_is_captured(stream, ptsz))
        return;
    CUcontext ctx = NULL;
    gs_slot *slot = gs_slot_for_current_context(&ctx);
    if (!slot)
        return;   /* no context or no tokend client: the driver decides */
    gs_gate *g = &slot->gate;
    uint32_t open = atomic_load_explicit(&g->open, memory_order_acquire);
    bool same_slice = open != 0 && open == gs_tls_slice.generation;
    /* Several GPUs: the inline path always misses, so do its job here. */
    if (same_slice && --gs_tls_slice.countdown > 0) {
        if (!atomic_load_explicit(&g->activity, memory_order_relaxed))
            atomic_store_explicit(&g->activity, 1, memory_order_relaxed);
        return;
    }
    uint32_t closing = tls_launches_armed;
    /* Long kernels: pace the submission and wrap the slice up if the kernel
     * would not fit, then pass the gate (see token_gate.h). */
    if (same_slice) {
        int mode = gs_capture_relax();   /* its event waits must not break another thread's capture */
        t->paced_until_ns = gs_gate_checkpoint_before_launch(g, work);
        gs_capture_restore(mode);
    }
    gs_gate_enter(g, ctx, t);
    tls_launches_armed = t->launches;
    /* A checkpoint after every slow-path launch: when the countdown ran out
     * (closing the launches since the last one) and for the first launch of
     * a slice, so the slice's work is tracked from its first kernel (the
     * handoff and the pacing need to know what is queued). */
    t->checkpoint = true;
    t->launches = same_slice && closing ? closing : 1;
    if (t->launches == 1 && work) {
        int mode = gs_capture_relax();
        gs_gate_mark_start(stream, ptsz);
        gs_capture_restore(mode);
    }
}

void gs_launch_end(gs_launch_ticket *t, CUstream stream, int ptsz, CUresult rc)
{
    /* First: the launch is queued, the holder must stop and tokend hear of it. */
    if (t->gate)
        gs_gate_deferred_wakes(t->gate, t);
    if (t->gate && t->paced_until_ns && !t->waited && rc == CUDA_SUCCESS)
        gs_gate_note_submit_lag(t->gate, t->paced_until_ns);
    if (t->gate && t->checkpoint && rc == CUDA_SUCCESS) {
        int mode = gs_capture_relax();
        gs_gate_checkpoint(t->gate, stream, ptsz, t->launches, t->launches == 1 ? t->work : NULL);
        gs_capture_restore(mode);
    }
}

gs_slot *gs_shim_slot_for_allocation(CUcontext *ctx)
{
    if (ctx)
        *ctx = NULL;
    if (!gs_shim_metered())
        return NULL;
    return gs_slot_for_current_context(ctx);
}

__attribute__((destructor)) static void shim_exit(void)
{
    /* No driver calls here: libcuda may already be finalised. Detach
     * (inside gs_rpc_stop) gives the token and all memory back. */
    if (atomic_load(&shim_started) && shim_metered)
        gs_slots_shutdown();
}
