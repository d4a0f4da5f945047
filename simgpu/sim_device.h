/* The shared simulated device: attaching to the segment, the process
 * registry, memory accounting and the kernel engine. Linked into both
 * libcuda.so.1 and libnvidia-ml.so.1; nothing here is exported. */
#ifndef GSLICE_SIM_DEVICE_H
#define GSLICE_SIM_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim_shared.h"

#define SIM_DEFAULT_NAME "default"
#define SIM_DEFAULT_MEMORY (16ull << 30)
#define SIM_SM_COUNT 108
#define SIM_DEVICE_NAME "gslice simulated GPU"

#define SIM_HIDDEN __attribute__((visibility("hidden")))
#define SIM_EXPORT __attribute__((visibility("default")))

uint64_t sim_now_ns(void);

/* Write "gslice simgpu: <message>" to stderr. */
void sim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parse "17179869184", "16GiB", "512MiB", "1.5GB", "64k" into bytes.
 * Returns false (and leaves *bytes alone) on anything else or on 0. */
bool sim_parse_bytes(const char *text, uint64_t *bytes);

/* Map the segment named by GSLICE_SIM_NAME, creating and initialising it if
 * this process is the first (GSLICE_SIM_MEMORY sets its size then). On
 * failure returns NULL with a one-line reason in err. */
struct sim_device_shared *sim_device_attach(char *err, size_t err_len);

/* Claim a process slot for pid (reaping dead processes first). NULL when
 * all SIM_MAX_PROCESSES slots belong to live processes. */
struct sim_process_slot *sim_registry_claim(struct sim_device_shared *dev, int pid, const char *label);
/* The process is going away: its context's teardown begins (the memory
 * stays used for dev->teardown_ns, then the slot is exited). */
void sim_registry_release(struct sim_device_shared *dev, struct sim_process_slot *slot);
/* Begin the teardown of processes that no longer exist, and end the
 * teardowns whose time is up (their memory goes back). */
void sim_registry_reap(struct sim_device_shared *dev);

/* Physical memory accounting across all processes. Returns false when the
 * device has less than `bytes` free (after reaping dead processes). */
bool sim_memory_reserve(struct sim_device_shared *dev, struct sim_process_slot *slot, uint64_t bytes);
void sim_memory_release(struct sim_device_shared *dev, struct sim_process_slot *slot, uint64_t bytes);
/* Bytes in use on the device after reaping dead processes. */
uint64_t sim_memory_used(struct sim_device_shared *dev);

/* The engine's context model from GSLICE_SIM_TIMESLICE_US, GSLICE_SIM_CTX_SWITCH_US
 * and GSLICE_SIM_PREEMPT (defaults where unset); false with a reason in err
 * on a value that is not usable. Applied by the process that creates the
 * segment. */
bool sim_engine_config_from_env(uint32_t *timeslice_ns, uint32_t *switch_ns, uint32_t *preempt, char *err,
                                size_t err_len);

/* Per-thread state of one engine user (a stream worker). */
struct sim_engine_turn {
    /* In: when the work could have started at the earliest (its enqueue, or
     * the end of the stream's work before it). A GPU starts a context's
     * queued kernel as the one before it ends; the simulator's worker
     * thread wakes tens of us later, so its work starts at the latest of
     * earliest, the engine's last end and the end of the switch to its
     * context, not when the worker gets there (without it, 1 ms kernels back
     * to back kept the engine ~95% busy, event timings included the gaps,
     * and every switch idled the engine for a wake-up too). */
    uint64_t earliest_ns;
    uint64_t last_start_ns, last_end_ns; /* the engine time of its latest run: first start, last end */
    uint64_t away_ns; /* of that, time it was stopped at slice ends while other contexts ran */
};
/* Run one kernel (kernel: counted as one) or device-side copy/fill
 * (kernel false) of the calling process's context: wait for the context's
 * turn on the engine, hold it for duration_ns of work (stopped and resumed
 * at slice ends while other contexts wait, when preemption is on), record
 * the time actually held in the process's slot and the device totals, and
 * take the item off the context's queue (sim_engine_queued). */
void sim_engine_run(struct sim_device_shared *dev, struct sim_process_slot *slot, uint64_t duration_ns,
                    struct sim_engine_turn *turn, bool kernel);
/* Items of engine work (kernels, device-side copies) queued on the
 * context's streams (negative: taken back); a context with queued work
 * keeps its turn on the engine between its kernels. */
void sim_engine_queued(struct sim_process_slot *slot, int64_t items);

/* Percent of the last ~1 s during which the engine ran a kernel. */
unsigned sim_utilisation_percent(struct sim_device_shared *dev);

#endif
