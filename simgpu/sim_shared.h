/* Layout of the shared-memory segment that IS the simulated GPU.
 *
 * Every process on the machine that loads the simulated libcuda.so.1 or
 * libnvidia-ml.so.1 maps the same POSIX shared-memory object
 * (/gslice-sim-<GSLICE_SIM_NAME>), so they all see one device: one memory
 * pool, one engine that runs kernels one at a time, and one table of the
 * processes using it.
 *
 * This header is the only definition of the layout. python/gslice/simgpu
 * mirrors it with ctypes and refuses a segment whose layout_version differs;
 * bump SIM_LAYOUT_VERSION on any change here. Counters are plain integers
 * updated with __atomic builtins so a reader in another language can load
 * them without knowing C11 atomics.
 */
#ifndef GSLICE_SIM_SHARED_H
#define GSLICE_SIM_SHARED_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_SHM_MAGIC 0x4753494d47505531ull /* "GSIMGPU1" */
#define SIM_LAYOUT_VERSION 4u
#define SIM_MAX_PROCESSES 256
#define SIM_LABEL_BYTES 64
#define SIM_NAME_BYTES 96
#define SIM_UUID_BYTES 96
/* Utilisation history: busy time per 100 ms bucket, enough for a 1 s window
 * plus slack for a reader that is late. */
#define SIM_TIMELINE_BUCKETS 32
#define SIM_TIMELINE_BUCKET_NS 100000000ull
/* Handoffs kept: the last 4096 (at ~1 per ms of alternating 1 ms kernels,
 * about 4 s of history; a reader that wants more reads more often). */
#define SIM_HANDOFF_RING 4096

enum sim_slot_state {
    SIM_SLOT_FREE = 0,   /* never used, or recycled */
    SIM_SLOT_LIVE = 1,   /* process attached and (as far as we know) alive */
    SIM_SLOT_EXITED = 2, /* process gone; its memory was given back, counters kept for readers */
    SIM_SLOT_TEARDOWN = 3, /* process gone, its context still being torn down: memory still used and
                            * NVML still lists it, until exited_ns + teardown_ns (then EXITED) */
};

/* A pthread mutex padded to a fixed size so the layout does not depend on
 * the C library's sizeof(pthread_mutex_t) (40 on x86-64 glibc). */
typedef union sim_shared_mutex {
    pthread_mutex_t mutex;
    unsigned char reserve[64];
} sim_shared_mutex;

/* One process using the device. Written only by its own process, except
 * when a dead process's slot is reaped (under the registry mutex). */
struct sim_process_slot {
    uint32_t state;             /* enum sim_slot_state */
    int32_t pid;
    uint64_t start_ticks;       /* /proc/<pid>/stat starttime: tells a reused pid apart */
    char label[SIM_LABEL_BYTES];/* GSLICE_SIM_LABEL, else GSLICE_GROUP, else comm */
    uint64_t busy_ns;           /* time this process's kernels held the engine */
    uint64_t kernels_launched;  /* launch calls accepted (graph kernels count one each) */
    uint64_t kernels_completed;
    uint64_t memory_used;       /* device bytes held now */
    uint64_t memory_peak;
    uint64_t first_activity_ns; /* CLOCK_MONOTONIC of its first kernel start, 0 if none */
    uint64_t last_activity_ns;  /* CLOCK_MONOTONIC of its last kernel end */
    uint64_t attached_ns;       /* CLOCK_MONOTONIC when the slot was claimed */
    uint64_t exited_ns;         /* CLOCK_MONOTONIC when it was seen gone (teardown began), 0 while live */
    uint32_t engine_waiting;    /* its threads now waiting for the engine */
    uint32_t out_of_memory;     /* its allocations the device refused for want of free memory */
    /* Layout version 3: its context on the engine (see sim_device.c). */
    uint64_t queued_work;       /* engine items (kernels, device-side copies) queued and not finished: the
                                 * context has work, as its channels would on a GPU */
    uint64_t waiting_since_ns;  /* CLOCK_MONOTONIC since when a thread of it waits for the engine, 0: none */
    uint64_t slices;            /* times the engine switched to this context */
    uint64_t preempted;         /* its kernels stopped at a time-slice boundary (resumed later) */
};

struct sim_timeline_bucket {
    uint64_t epoch;   /* CLOCK_MONOTONIC / SIM_TIMELINE_BUCKET_NS this bucket holds */
    uint64_t busy_ns; /* engine-busy time inside that epoch */
};

/* The engine went from a kernel (or device-side copy/fill) of process
 * from_pid to one of a different process to_pid. to_start_ns - from_end_ns
 * is the time the GPU sat idle between the two holders' work. */
struct sim_handoff {
    int32_t from_pid;
    int32_t to_pid;
    uint64_t from_end_ns;  /* CLOCK_MONOTONIC: from_pid released the engine */
    uint64_t to_start_ns;  /* CLOCK_MONOTONIC: to_pid's work started */
};

struct sim_device_shared {
    uint64_t magic;
    uint32_t layout_version;
    uint32_t initialised;       /* 0 while the creator fills the segment in, then 1 */
    uint32_t slot_count;        /* SIM_MAX_PROCESSES */
    uint32_t sm_count;
    uint64_t total_memory;      /* bytes */
    uint64_t created_ns;        /* CLOCK_MONOTONIC */
    char name[SIM_NAME_BYTES];  /* "gslice simulated GPU" */
    char uuid[SIM_UUID_BYTES];  /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    unsigned char uuid_bytes[16];
    uint64_t memory_used;       /* sum of live slots' memory_used */
    uint64_t busy_ns;           /* all processes, ever */
    uint64_t kernels;           /* kernels completed, all processes */
    int32_t engine_holder_pid;  /* pid running a kernel now, 0 when idle */
    uint32_t engine_waiters;    /* threads of live processes waiting for the engine */
    uint64_t engine_acquisitions;
    uint64_t engine_busy_since_ns; /* start of the kernel running now, 0 when idle */
    uint32_t engine_courtesy_waiters; /* unused since layout version 3 (was: releasers stepping aside) */
    uint32_t reserved32;
    uint64_t teardown_ns;       /* how long a gone process's memory stays used (GSLICE_SIM_TEARDOWN_MS) */
    /* Layout version 3: contexts take turns on the engine (sim_device.c).
     * Written under the engine mutex. */
    uint32_t ctx_owner;         /* slot index + 1 of the context that has the engine (0: none yet) */
    uint32_t sched_seq;         /* futex word: bumped on every release and switch */
    uint64_t ctx_slice_end_ns;  /* CLOCK_MONOTONIC end of the owner's time slice */
    uint64_t ctx_ready_ns;      /* the switch to the owner completes: its work may start */
    uint64_t ctx_switches;      /* switches from one context to another */
    uint64_t ctx_preemptions;   /* kernels stopped at a slice boundary */
    uint32_t ctx_timeslice_ns;  /* GSLICE_SIM_TIMESLICE_US (0: a context keeps the engine until its queue drains) */
    uint32_t ctx_switch_ns;     /* GSLICE_SIM_CTX_SWITCH_US */
    uint32_t ctx_preempt;       /* GSLICE_SIM_PREEMPT: 1: a running kernel is stopped at its slice's end */
    uint32_t ctx_owner_drained; /* the owner's queue ran empty: its next work starts a new slice */
    struct sim_timeline_bucket timeline[SIM_TIMELINE_BUCKETS];
    sim_shared_mutex engine;    /* guards the engine's state (holder, owner context, slices); held briefly */
    sim_shared_mutex registry;  /* slot claims, reaping and memory accounting */
    struct sim_process_slot slots[SIM_MAX_PROCESSES];
    /* Layout version 2: engine handoffs between processes, appended so the
     * fields above keep their offsets. Written under the engine mutex. */
    int32_t engine_last_pid;    /* pid whose work last held the engine; 0 before any, or after a holder died in it */
    uint32_t reserved_v2;
    uint64_t engine_last_end_ns;/* CLOCK_MONOTONIC: when that work ended */
    uint64_t handoff_count;     /* handoffs ever; record n is handoffs[n % SIM_HANDOFF_RING], stored before
                                 * the count passes n (release), so records below the count are complete */
    struct sim_handoff handoffs[SIM_HANDOFF_RING];
};

/* Offsets the Python mirror relies on; a change here must change it too. */
_Static_assert(sizeof(struct sim_process_slot) == 192, "slot layout changed");
_Static_assert(offsetof(struct sim_device_shared, timeline) == 368, "header layout changed");
_Static_assert(offsetof(struct sim_device_shared, engine) == 880, "header layout changed");
_Static_assert(offsetof(struct sim_device_shared, slots) == 1008, "header layout changed");
_Static_assert(sizeof(struct sim_handoff) == 24, "handoff record layout changed");
_Static_assert(offsetof(struct sim_device_shared, engine_last_pid) == 50160, "handoff fields moved");
_Static_assert(offsetof(struct sim_device_shared, handoff_count) == 50176, "handoff fields moved");
_Static_assert(offsetof(struct sim_device_shared, handoffs) == 50184, "handoff fields moved");
_Static_assert(sizeof(struct sim_device_shared) == 148488, "layout changed");

#endif
