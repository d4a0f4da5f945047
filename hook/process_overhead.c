/* process_overhead: see process_overhead.h. */
#define _GNU_SOURCE
#include "process_overhead.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "device_slot.h"
#include "config.h"
#include "log.h"
#include "memory_ledger.h"
#include "memory_pools.h"
#include "real_driver.h"

typedef nvmlReturn_t (*processes_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);

/* How often an allocation reconciles when the group has room: NVML's
 * process list costs ~0.1-1 ms on a real GPU, so at most one call per
 * 20 ms keeps it under ~5% of a thread that does nothing but allocate
 * (frameworks cache allocations; most call the driver far less). Growth
 * found late while far from the quota cannot push the footprint over it;
 * near the quota (below 512 MiB of room after the allocation, more than a
 * context grew between allocations on an H100: cuBLAS's first matmul,
 * ~100-300 MiB beyond the reserve) allocations reconcile at most every
 * 2 ms: a stream-ordered pool (PyTorch's cudaMallocAsync backend) calls
 * the driver for every tensor, and one NVML call per tensor would slow a
 * process that runs near its quota several-fold. A context does not grow
 * faster than its margin (GSLICE_CONTEXT_GROWTH_MARGIN_MIB) in 2 ms. */
#define GS_OVERHEAD_RECONCILE_INTERVAL_MS 20
#define GS_OVERHEAD_NEAR_QUOTA_INTERVAL_US 2000
#define GS_OVERHEAD_NEAR_QUOTA_MIB 512

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* NVML's used memory of this process on the daemon's GPU; false when NVML
 * cannot say (no NVML, not initialised, not listed). */
static bool nvml_own_used(struct gs_slot *slot, uint64_t *used)
{
    static nvmlReturn_t (*init)(void);
    static processes_fn processes;
    static nvmlReturn_t (*count_fn)(unsigned int *);
    static nvmlReturn_t (*handle_fn)(unsigned int, nvmlDevice_t *);
    if (!gs_real_nvml_load())
        return false;
    void *h = gs_real_nvml_handle();
    if (!init) {
        init = h ? gs_real_dlsym(h, "nvmlInit_v2") : NULL;
        processes = h ? gs_real_dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3") : NULL;
        count_fn = gs_nvml.nvmlDeviceGetCount;
        handle_fn = gs_nvml.nvmlDeviceGetHandleByIndex;
    }
    if (!init || !processes || !count_fn || !handle_fn || init() != NVML_SUCCESS)
        return false;
    unsigned int n = 0;
    if (count_fn(&n) != NVML_SUCCESS)
        return false;
    for (unsigned int i = 0; i < n; i++) {
        nvmlDevice_t dev;
        /* A look-up, never a slot made: NVML lists every GPU of the node
         * (CUDA_VISIBLE_DEVICES does not apply to it). */
        if (handle_fn(i, &dev) != NVML_SUCCESS || !gs_slot_serves_nvml_device(slot, dev))
            continue;
        nvmlProcessInfo_t infos[256];
        unsigned int count = 256;
        if (processes(dev, &count, infos) != NVML_SUCCESS)
            return false;
        for (unsigned int j = 0; j < count; j++)
            if (infos[j].pid == (unsigned int)getpid()) {
                *used = infos[j].usedGpuMemory;
                return true;
            }
        return false;
    }
    return false;
}

/* What one reconciliation found (for the refusal's log line). */
typedef struct overhead_figures {
    uint64_t nvml_used;      /* NVML's per-process used memory */
    uint64_t allocations;    /* charged for allocations and pools */
    uint64_t reserves;       /* charged as context reserves */
    uint64_t extra;          /* charged for memory beyond both, after this reconciliation */
    uint64_t uncharged;      /* wanted but not charged */
    bool tokend_away;        /* ... because tokend did not answer (the ledger logged it) */
} overhead_figures;

/* The ledger's side of a reconciliation, read before and after NVML's. */
typedef struct ledger_snapshot {
    uint64_t allocations;   /* held for allocations and pools (beyond the overhead charge and reserves) */
    uint64_t in_flight;     /* ... of which a driver call is under way */
    uint64_t reserves;      /* held as context reserves */
} ledger_snapshot;

static ledger_snapshot snapshot(struct gs_slot *slot)
{
    uint64_t held, context_reserves, in_flight;
    gs_ledger_charges(&slot->ledger, &held, &context_reserves, &in_flight);
    uint64_t charged = slot->overhead.charged;
    uint64_t entries = held > charged ? held - charged : 0;
    uint64_t reserves = context_reserves < entries ? context_reserves : entries;
    uint64_t allocations = entries - reserves;
    return (ledger_snapshot){allocations, in_flight < allocations ? in_flight : allocations, reserves};
}

/* The charge for hidden bytes: the context reserves cover it, beyond them
 * it plus the margin. A process that shows nothing beyond its allocations
 * (the simulated GPU without context memory) gets no margin. */
static uint64_t charge_for(uint64_t hidden, uint64_t reserves, uint64_t margin)
{
    return hidden && hidden + margin > reserves ? hidden + margin - reserves : 0;
}

/* hidden = NVML's figure minus the allocations charged: the context's own
 * memory. Charged for it: the context reserves, and beyond them whatever
 * hidden + margin exceeds them, so growth up to the margin after this
 * point still fits the quota.
 * An allocation or free under way in another thread (held already, or
 * still, NVML's figure maybe not) leaves hidden between two bounds: it is
 * charged up to the lower one and given back down to the upper one only,
 * so a large allocation in flight does not read as the context's memory
 * given back (nor a finished one as growth). The ledger is read before
 * and after NVML: an allocation or free between the two is counted in
 * whichever reading makes each bound safe. */
static bool reconcile(struct gs_slot *slot, overhead_figures *f)
{
    if (!slot)
        return true;
    gs_overhead *o = &slot->overhead;
    __atomic_store_n(&o->last_reconcile_ns, monotonic_ns(), __ATOMIC_RELAXED);
    gs_ledger_call_returned();   /* this thread is in no driver call of its own */
    uint64_t margin = gs_config_get()->growth_margin;
    pthread_mutex_lock(&o->mu);
    ledger_snapshot before = snapshot(slot);
    uint64_t used;
    if (!nvml_own_used(slot, &used)) {
        pthread_mutex_unlock(&o->mu);
        return true;
    }
    ledger_snapshot after = snapshot(slot);
    uint64_t most = before.allocations > after.allocations ? before.allocations : after.allocations;
    uint64_t least_before = before.allocations - before.in_flight, least_after = after.allocations - after.in_flight;
    uint64_t least = least_before < least_after ? least_before : least_after;
    uint64_t hidden_low = used > most ? used - most : 0;
    uint64_t hidden_high = used > least ? used - least : 0;
    uint64_t want_low = charge_for(hidden_low, after.reserves, margin);
    uint64_t want_high = charge_for(hidden_high, after.reserves, margin);
    uint64_t uncharged = 0;
    bool away = false;
    if (want_low > o->charged) {
        uint64_t more = want_low - o->charged;
        int r = gs_ledger_reserve_held(&slot->ledger, more,
                                       "device memory beyond allocations (NVML per-process used + "
                                       "GSLICE_CONTEXT_GROWTH_MARGIN_MIB)");
        if (r == GS_RESERVE_GRANTED)
            o->charged += more;
        else if (r != GS_RESERVE_UNMETERED)
            uncharged = more, away = r == GS_RESERVE_UNAVAILABLE;
    } else if (want_high < o->charged) {
        gs_ledger_give_back(&slot->ledger, o->charged - want_high);
        o->charged = want_high;
    }
    *f = (overhead_figures){used, after.allocations, after.reserves, o->charged, uncharged, away};
    pthread_mutex_unlock(&o->mu);
    return uncharged == 0;
}

bool gs_overhead_reconcile(struct gs_slot *slot)
{
    overhead_figures f;
    if (reconcile(slot, &f))
        return true;
    if (!f.tokend_away)
        GS_WARN("this process uses %llu bytes of device memory (NVML); charging its growth plus the "
                "GSLICE_CONTEXT_GROWTH_MARGIN_MIB margin (%llu bytes more) does not fit the group's quota",
                (unsigned long long)f.nvml_used, (unsigned long long)f.uncharged);
    return false;
}

bool gs_overhead_before_reserve(struct gs_slot *slot, uint64_t bytes, const char *what)
{
    if (!slot)
        return true;
    uint64_t last = __atomic_load_n(&slot->overhead.last_reconcile_ns, __ATOMIC_RELAXED);
    uint64_t room;
    bool near = !gs_ledger_last_headroom(&slot->ledger, &room) ||
                room < bytes + ((uint64_t)GS_OVERHEAD_NEAR_QUOTA_MIB << 20);
    uint64_t interval_ns = near ? GS_OVERHEAD_NEAR_QUOTA_INTERVAL_US * 1000ull
                                : GS_OVERHEAD_RECONCILE_INTERVAL_MS * 1000000ull;
    if (last && monotonic_ns() - last < interval_ns)
        return true;
    gs_pools_reconcile();   /* pool growth is the pools' charge, not hidden memory */
    overhead_figures f;
    if (reconcile(slot, &f))
        return true;
    if (f.tokend_away)
        return false;   /* the ledger said why (GSLICE_DAEMON_WAIT_MS) */
    GS_WARN("%s of %llu bytes refused: this process uses %llu bytes of device memory (NVML per-process), of "
            "which %llu are charged for allocations, %llu as context reserves (GSLICE_CONTEXT_RESERVE_MIB) and %llu "
            "for earlier growth; its context grew without an allocation call (lazily loaded kernels, library "
            "state) and the group's quota has no room for the %llu bytes more that charging it takes (the growth, "
            "with GSLICE_CONTEXT_GROWTH_MARGIN_MIB kept above it) (CUDA_ERROR_OUT_OF_MEMORY)",
            what, (unsigned long long)bytes, (unsigned long long)f.nvml_used, (unsigned long long)f.allocations,
            (unsigned long long)f.reserves, (unsigned long long)f.extra, (unsigned long long)f.uncharged);
    return false;
}

void gs_overhead_init(gs_overhead *o)
{
    pthread_mutex_init(&o->mu, NULL);
    o->charged = 0;
    o->last_reconcile_ns = 0;
}

void gs_overhead_fork_child(void)
{
    for (int i = 0; i < gs_slot_count(); i++)
        gs_overhead_init(&gs_slot_at(i)->overhead);
}
