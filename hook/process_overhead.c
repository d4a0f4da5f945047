/* process_overhead: see process_overhead.h. */
#define _GNU_SOURCE
#include "process_overhead.h"

#include <pthread.h>
#include <unistd.h>

#include "device_slot.h"
#include "log.h"
#include "memory_ledger.h"
#include "real_driver.h"

typedef nvmlReturn_t (*processes_fn)(nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);

static pthread_mutex_t overhead_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t charged_extra;   /* charged beyond the ledger's own entries (one slot: single GPU) */

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
        if (handle_fn(i, &dev) != NVML_SUCCESS || gs_slot_for_nvml_device(dev) != slot)
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

void gs_overhead_reconcile(struct gs_slot *slot)
{
    uint64_t used;
    if (!slot || !nvml_own_used(slot, &used))
        return;
    pthread_mutex_lock(&overhead_mu);
    gs_ledger_stats st;
    gs_ledger_get_stats(&slot->ledger, &st);
    uint64_t entries = st.held > charged_extra ? st.held - charged_extra : 0;
    uint64_t want = used > entries ? used - entries : 0;
    if (want > charged_extra) {
        uint64_t more = want - charged_extra;
        int r = gs_ledger_reserve(&slot->ledger, more, "device memory beyond allocations (NVML per-process used)");
        if (r == GS_RESERVE_GRANTED)
            charged_extra += more;
        else if (r != GS_RESERVE_UNMETERED)
            GS_WARN("this process uses %llu bytes of device memory (NVML), %llu beyond what it charged; the group "
                    "is at its quota", (unsigned long long)used, (unsigned long long)more);
    } else if (want < charged_extra) {
        gs_ledger_give_back(&slot->ledger, charged_extra - want);
        charged_extra = want;
    }
    pthread_mutex_unlock(&overhead_mu);
}

void gs_overhead_fork_child(void)
{
    pthread_mutex_init(&overhead_mu, NULL);
    charged_extra = 0;
}
