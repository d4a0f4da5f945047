/* The shared simulated device (see sim_device.h and sim_shared.h). */
#define _GNU_SOURCE
#include "sim_device.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long an attaching process waits for another one to finish creating
 * the segment. */
#define SIM_ATTACH_WAIT_NS 5000000000ull
/* How long a gone process's memory stays used while the driver tears its
 * context down (NVML keeps listing it meanwhile): on an H100, kill -9 of a
 * process holding 3.76 GiB left it listed for 123-138 ms
 * (shared/FIELD-NOTES.md section 10). GSLICE_SIM_TEARDOWN_MS changes it. */
#define SIM_DEFAULT_TEARDOWN_MS 130.0

/* GSLICE_SIM_TEARDOWN_MS (milliseconds >= 0, fractions allowed), read by
 * the process that creates the segment. */
static uint64_t teardown_ns_from_env(void) {
    const char *text = getenv("GSLICE_SIM_TEARDOWN_MS");
    if (!text || !*text) return (uint64_t)(SIM_DEFAULT_TEARDOWN_MS * 1e6);
    char *end;
    double ms = strtod(text, &end);
    if (end == text || *end || !(ms >= 0) || ms > 3.6e6) {
        sim_log("GSLICE_SIM_TEARDOWN_MS '%.40s' is not a duration; expected milliseconds >= 0, e.g. 130; "
                "using %g", text, SIM_DEFAULT_TEARDOWN_MS);
        return (uint64_t)(SIM_DEFAULT_TEARDOWN_MS * 1e6);
    }
    return (uint64_t)(ms * 1e6);
}

uint64_t sim_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void sim_log(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gslice simgpu: %s\n", line);
}

bool sim_parse_bytes(const char *text, uint64_t *bytes) {
    static const struct { const char *suffix; uint64_t scale; } units[] = {
        {"", 1}, {"b", 1},
        {"k", 1000ull}, {"kb", 1000ull}, {"m", 1000000ull}, {"mb", 1000000ull},
        {"g", 1000000000ull}, {"gb", 1000000000ull}, {"t", 1000000000000ull}, {"tb", 1000000000000ull},
        {"ki", 1ull << 10}, {"kib", 1ull << 10}, {"mi", 1ull << 20}, {"mib", 1ull << 20},
        {"gi", 1ull << 30}, {"gib", 1ull << 30}, {"ti", 1ull << 40}, {"tib", 1ull << 40},
    };
    if (!text) return false;
    while (isspace((unsigned char)*text)) text++;
    if (!isdigit((unsigned char)*text) && *text != '.') return false;
    char *end;
    errno = 0;
    double number = strtod(text, &end);
    if (errno || end == text || !(number > 0)) return false;
    char suffix[8];
    size_t n = 0;
    while (*end && !isspace((unsigned char)*end)) {
        if (n + 1 >= sizeof suffix) return false;
        suffix[n++] = (char)tolower((unsigned char)*end++);
    }
    suffix[n] = 0;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(suffix, units[i].suffix) == 0) {
            double scaled = number * (double)units[i].scale;
            if (scaled < 1 || scaled > 1.8e19) return false;
            *bytes = (uint64_t)(scaled + 0.5);
            return true;
        }
    }
    return false;
}

/* ---- attaching ---------------------------------------------------------- */

static bool valid_name(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 200) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!(isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.')) return false;
    }
    return true;
}

/* FNV-1a, so the UUID is stable for a given simulator name. */
static uint64_t fnv1a(const char *text, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        h ^= *p;
        h *= 1099511628211ull;
    }
    return h;
}

static void init_shared_mutex(sim_shared_mutex *m) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    /* A process killed while holding it must not wedge the GPU. */
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init(&m->mutex, &attr);
    pthread_mutexattr_destroy(&attr);
}

static void initialise_device(struct sim_device_shared *dev, const char *name, uint64_t total_memory,
                              const uint32_t engine_config[3]) {
    memset(dev, 0, sizeof *dev);
    dev->magic = SIM_SHM_MAGIC;
    dev->layout_version = SIM_LAYOUT_VERSION;
    dev->slot_count = SIM_MAX_PROCESSES;
    dev->sm_count = SIM_SM_COUNT;
    dev->total_memory = total_memory;
    dev->created_ns = sim_now_ns();
    dev->teardown_ns = teardown_ns_from_env();
    snprintf(dev->name, sizeof dev->name, "%s", SIM_DEVICE_NAME);
    uint64_t hi = fnv1a(name, 0x9e3779b97f4a7c15ull), lo = fnv1a(name, 0x243f6a8885a308d3ull);
    for (int i = 0; i < 8; i++) {
        dev->uuid_bytes[i] = (unsigned char)(hi >> (56 - 8 * i));
        dev->uuid_bytes[8 + i] = (unsigned char)(lo >> (56 - 8 * i));
    }
    dev->uuid_bytes[6] = (unsigned char)((dev->uuid_bytes[6] & 0x0f) | 0x50); /* name-based UUID */
    dev->uuid_bytes[8] = (unsigned char)((dev->uuid_bytes[8] & 0x3f) | 0x80);
    const unsigned char *u = dev->uuid_bytes;
    snprintf(dev->uuid, sizeof dev->uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    dev->ctx_timeslice_ns = engine_config[0];
    dev->ctx_switch_ns = engine_config[1];
    dev->ctx_preempt = engine_config[2];
    init_shared_mutex(&dev->engine);
    init_shared_mutex(&dev->registry);
}

static void pause_1ms(void) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
}

struct sim_device_shared *sim_device_attach(char *err, size_t err_len) {
    const char *name = getenv("GSLICE_SIM_NAME");
    if (!name || !*name) name = SIM_DEFAULT_NAME;
    if (!valid_name(name)) {
        snprintf(err, err_len,
                 "GSLICE_SIM_NAME '%.60s' is not usable; expected 1-200 letters, digits, '-', '_' or '.'", name);
        return NULL;
    }
    char path[256];
    snprintf(path, sizeof path, "/gslice-sim-%s", name);
    const size_t size = sizeof(struct sim_device_shared);
    uint64_t deadline = sim_now_ns() + SIM_ATTACH_WAIT_NS;

    for (;;) {
        int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0666);
        if (fd >= 0) {
            uint64_t total = SIM_DEFAULT_MEMORY;
            const char *mem = getenv("GSLICE_SIM_MEMORY");
            if (mem && *mem && !sim_parse_bytes(mem, &total)) {
                close(fd);
                shm_unlink(path);
                snprintf(err, err_len,
                         "GSLICE_SIM_MEMORY '%.60s' is not a size; expected bytes or a size like 16GiB, 512MiB, 1.5GB",
                         mem);
                return NULL;
            }
            uint32_t engine_config[3];
            if (!sim_engine_config_from_env(&engine_config[0], &engine_config[1], &engine_config[2], err, err_len)) {
                close(fd);
                shm_unlink(path);
                return NULL;
            }
            /* Other users of the machine may share the device. */
            fchmod(fd, 0666);
            if (ftruncate(fd, (off_t)size) != 0) {
                snprintf(err, err_len, "ftruncate(/dev/shm%s, %zu) failed: %s", path, size, strerror(errno));
                close(fd);
                shm_unlink(path);
                return NULL;
            }
            struct sim_device_shared *dev = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
            close(fd);
            if (dev == MAP_FAILED) {
                snprintf(err, err_len, "mmap of /dev/shm%s failed: %s", path, strerror(errno));
                shm_unlink(path);
                return NULL;
            }
            initialise_device(dev, name, total, engine_config);
            __atomic_store_n(&dev->initialised, 1u, __ATOMIC_RELEASE);
            return dev;
        }
        if (errno != EEXIST) {
            snprintf(err, err_len, "shm_open(%s) failed: %s", path, strerror(errno));
            return NULL;
        }
        fd = shm_open(path, O_RDWR, 0);
        if (fd < 0) {
            if (errno == ENOENT) continue; /* removed between the two opens: try creating again */
            snprintf(err, err_len, "shm_open(%s) failed: %s", path, strerror(errno));
            return NULL;
        }
        struct stat st;
        while (fstat(fd, &st) == 0 && (size_t)st.st_size < size && sim_now_ns() < deadline) pause_1ms();
        if ((size_t)st.st_size != size) {
            close(fd);
            snprintf(err, err_len,
                     "/dev/shm%s is %lld bytes, expected %zu: made by another simgpu layout version, or its "
                     "creator died; remove it",
                     path, (long long)st.st_size, size);
            return NULL;
        }
        struct sim_device_shared *dev = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (dev == MAP_FAILED) {
            snprintf(err, err_len, "mmap of /dev/shm%s failed: %s", path, strerror(errno));
            return NULL;
        }
        while (!__atomic_load_n(&dev->initialised, __ATOMIC_ACQUIRE) && sim_now_ns() < deadline) pause_1ms();
        if (!__atomic_load_n(&dev->initialised, __ATOMIC_ACQUIRE)) {
            munmap(dev, size);
            snprintf(err, err_len, "/dev/shm%s was never initialised (its creator died?); remove it", path);
            return NULL;
        }
        if (dev->magic != SIM_SHM_MAGIC || dev->layout_version != SIM_LAYOUT_VERSION) {
            unsigned version = dev->layout_version;
            munmap(dev, size);
            snprintf(err, err_len, "/dev/shm%s has layout version %u, this library needs %u; remove it", path,
                     version, SIM_LAYOUT_VERSION);
            return NULL;
        }
        return dev;
    }
}

/* ---- shared mutexes ----------------------------------------------------- */

/* Lock a robust mutex; *recovered says the previous owner died holding it. */
static void lock_shared(sim_shared_mutex *m, bool *recovered) {
    int rc = pthread_mutex_lock(&m->mutex);
    *recovered = false;
    if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(&m->mutex);
        *recovered = true;
    } else if (rc != 0) {
        sim_log("locking a shared mutex failed: %s", strerror(rc));
        abort();
    }
}

static void unlock_shared(sim_shared_mutex *m) { pthread_mutex_unlock(&m->mutex); }

/* ---- process registry --------------------------------------------------- */

/* starttime (field 22) and state of /proc/<pid>/stat; false if no such pid. */
static bool read_proc_stat(int pid, uint64_t *start_ticks, char *state) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return false;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    if (!p || p[1] != ' ') return false;
    p += 2;
    *state = *p;
    /* fields after comm: 3=state ... 22=starttime */
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p) return false;
        p++;
    }
    *start_ticks = strtoull(p, NULL, 10);
    return true;
}

static bool process_alive(int pid, uint64_t start_ticks) {
    uint64_t now_ticks;
    char state;
    if (!read_proc_stat(pid, &now_ticks, &state)) return false;
    /* A zombie has already lost its GPU memory on a real driver. */
    if (state == 'Z' || state == 'X') return false;
    return start_ticks == 0 || now_ticks == start_ticks;
}

/* The context is gone: its memory goes back to the device. */
static void finish_teardown_locked(struct sim_device_shared *dev, struct sim_process_slot *slot) {
    uint64_t held = __atomic_load_n(&slot->memory_used, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&dev->memory_used, __ATOMIC_RELAXED);
    __atomic_store_n(&dev->memory_used, used >= held ? used - held : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->memory_used, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->state, (uint32_t)SIM_SLOT_EXITED, __ATOMIC_RELEASE);
}

/* The process is gone (or leaving): its context is torn down, which on a
 * real driver takes a while, so its memory stays used (and NVML lists it)
 * for dev->teardown_ns from now. The teardown starts when the simulator
 * notices the death (at the next query, allocation or claim: tokend's NVML
 * polls notice it within their period), not at the death itself. */
static void mark_gone_locked(struct sim_device_shared *dev, struct sim_process_slot *slot) {
    uint32_t waiting = __atomic_exchange_n(&slot->engine_waiting, 0, __ATOMIC_RELAXED);
    if (waiting) __atomic_fetch_sub(&dev->engine_waiters, waiting, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->exited_ns, sim_now_ns(), __ATOMIC_RELAXED);
    if (dev->teardown_ns == 0) finish_teardown_locked(dev, slot);
    else __atomic_store_n(&slot->state, (uint32_t)SIM_SLOT_TEARDOWN, __ATOMIC_RELEASE);
}

static void reap_locked(struct sim_device_shared *dev) {
    int self = getpid();
    uint64_t now = sim_now_ns();
    for (int i = 0; i < SIM_MAX_PROCESSES; i++) {
        struct sim_process_slot *slot = &dev->slots[i];
        uint32_t state = __atomic_load_n(&slot->state, __ATOMIC_ACQUIRE);
        if (state == SIM_SLOT_TEARDOWN) {
            if (now - slot->exited_ns >= dev->teardown_ns) finish_teardown_locked(dev, slot);
            continue;
        }
        if (state != SIM_SLOT_LIVE) continue;
        if (slot->pid == self) continue;
        if (!process_alive(slot->pid, slot->start_ticks)) mark_gone_locked(dev, slot);
    }
}

/* After a process died holding the registry mutex its update may be half
 * done; the slots are the truth, so recompute the total from them. */
static void lock_registry(struct sim_device_shared *dev) {
    bool recovered;
    lock_shared(&dev->registry, &recovered);
    if (recovered) {
        uint64_t sum = 0;
        for (int i = 0; i < SIM_MAX_PROCESSES; i++)
            if (dev->slots[i].state == SIM_SLOT_LIVE || dev->slots[i].state == SIM_SLOT_TEARDOWN)
                sum += dev->slots[i].memory_used;
        __atomic_store_n(&dev->memory_used, sum, __ATOMIC_RELAXED);
    }
}

struct sim_process_slot *sim_registry_claim(struct sim_device_shared *dev, int pid, const char *label) {
    lock_registry(dev);
    reap_locked(dev);
    struct sim_process_slot *chosen = NULL;
    for (int i = 0; i < SIM_MAX_PROCESSES && !chosen; i++)
        if (dev->slots[i].state == SIM_SLOT_FREE) chosen = &dev->slots[i];
    /* No never-used slot left: recycle the one that exited longest ago. */
    for (int i = 0; i < SIM_MAX_PROCESSES && !chosen; i++) {
        struct sim_process_slot *slot = &dev->slots[i];
        if (slot->state != SIM_SLOT_EXITED) continue;
        for (int j = i + 1; j < SIM_MAX_PROCESSES; j++)
            if (dev->slots[j].state == SIM_SLOT_EXITED && dev->slots[j].exited_ns < slot->exited_ns)
                slot = &dev->slots[j];
        chosen = slot;
    }
    if (chosen) {
        memset(chosen, 0, sizeof *chosen);
        chosen->pid = pid;
        char state;
        if (!read_proc_stat(pid, &chosen->start_ticks, &state)) chosen->start_ticks = 0;
        snprintf(chosen->label, sizeof chosen->label, "%s", label);
        chosen->attached_ns = sim_now_ns();
        __atomic_store_n(&chosen->state, (uint32_t)SIM_SLOT_LIVE, __ATOMIC_RELEASE);
    }
    unlock_shared(&dev->registry);
    return chosen;
}

void sim_registry_release(struct sim_device_shared *dev, struct sim_process_slot *slot) {
    lock_registry(dev);
    if (slot->state == SIM_SLOT_LIVE) mark_gone_locked(dev, slot);
    unlock_shared(&dev->registry);
}

void sim_registry_reap(struct sim_device_shared *dev) {
    lock_registry(dev);
    reap_locked(dev);
    unlock_shared(&dev->registry);
}

/* ---- memory ------------------------------------------------------------- */

bool sim_memory_reserve(struct sim_device_shared *dev, struct sim_process_slot *slot, uint64_t bytes) {
    lock_registry(dev);
    uint64_t used = dev->memory_used;
    if (bytes > dev->total_memory || used > dev->total_memory - bytes) {
        reap_locked(dev); /* a dead process may still be counted */
        used = dev->memory_used;
        if (bytes > dev->total_memory || used > dev->total_memory - bytes) {
            __atomic_fetch_add(&slot->out_of_memory, 1u, __ATOMIC_RELAXED);
            unlock_shared(&dev->registry);
            return false;
        }
    }
    __atomic_store_n(&dev->memory_used, used + bytes, __ATOMIC_RELAXED);
    uint64_t held = slot->memory_used + bytes;
    __atomic_store_n(&slot->memory_used, held, __ATOMIC_RELAXED);
    if (held > slot->memory_peak) __atomic_store_n(&slot->memory_peak, held, __ATOMIC_RELAXED);
    unlock_shared(&dev->registry);
    return true;
}

void sim_memory_release(struct sim_device_shared *dev, struct sim_process_slot *slot, uint64_t bytes) {
    lock_registry(dev);
    /* After the slot was reaped (it cannot be: we are alive) nothing is owed. */
    uint64_t held = slot->memory_used;
    uint64_t give = bytes <= held ? bytes : held;
    __atomic_store_n(&slot->memory_used, held - give, __ATOMIC_RELAXED);
    uint64_t used = dev->memory_used;
    __atomic_store_n(&dev->memory_used, used >= give ? used - give : 0, __ATOMIC_RELAXED);
    unlock_shared(&dev->registry);
}

uint64_t sim_memory_used(struct sim_device_shared *dev) {
    lock_registry(dev);
    reap_locked(dev);
    uint64_t used = dev->memory_used;
    unlock_shared(&dev->registry);
    return used;
}

/* ---- engine ------------------------------------------------------------- */

/* The GPU without MPS runs one context (here: one process) at a time. Each
 * context has its own queue (its streams' pending kernels and device-side
 * copies, slot->queued_work). The context that has the engine (ctx_owner)
 * keeps it while it has work and no other context waits; when others wait,
 * contexts take turns in time slices of ctx_timeslice_ns, the one that has
 * waited longest first, and each switch to another context costs
 * ctx_switch_ns of engine time that is nobody's work. With ctx_preempt a
 * kernel still running at its context's slice end is stopped there and
 * resumed at the context's next turn (compute preemption); without it the
 * switch waits for the kernel's end. A context whose queue is empty gives
 * the engine up at once. Within a context, kernels of all its streams run
 * one at a time, in the order their workers reach the engine.
 *
 * The state lives in the segment under the engine mutex (held briefly);
 * waiters sleep on the sched_seq futex, which every release and switch
 * bumps. A holder that died mid-kernel is found by the waiters' periodic
 * look (SIM_ENGINE_POLL_NS) and its turn ends. */

/* Calibrated against an H100 (simgpu/README.md, "Contexts on the engine"). */
#define SIM_DEFAULT_TIMESLICE_US 2090u
#define SIM_DEFAULT_CTX_SWITCH_US 450u
/* How long a waiter sleeps before looking for a dead holder or owner. */
#define SIM_ENGINE_POLL_NS 20000000ull

bool sim_engine_config_from_env(uint32_t *timeslice_ns, uint32_t *switch_ns, uint32_t *preempt, char *err,
                                size_t err_len) {
    static const struct { const char *name; uint32_t fallback, max; } knobs[] = {
        {"GSLICE_SIM_TIMESLICE_US", SIM_DEFAULT_TIMESLICE_US, 4000000u},
        {"GSLICE_SIM_CTX_SWITCH_US", SIM_DEFAULT_CTX_SWITCH_US, 4000000u},
        {"GSLICE_SIM_PREEMPT", 1u, 1u},
    };
    uint32_t values[3];
    for (int i = 0; i < 3; i++) {
        const char *text = getenv(knobs[i].name);
        values[i] = knobs[i].fallback;
        if (!text || !*text) continue;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(text, &end, 10);
        if (errno || end == text || *end || v > knobs[i].max || *text == '-') {
            snprintf(err, err_len, "%s '%.40s' is not usable; expected a whole number from 0 to %u", knobs[i].name,
                     text, knobs[i].max);
            return false;
        }
        values[i] = (uint32_t)v;
    }
    *timeslice_ns = values[0] * 1000u;
    *switch_ns = values[1] * 1000u;
    *preempt = values[2];
    return true;
}

static void futex_wait_shared(uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
    struct timespec ts = {(time_t)(timeout_ns / 1000000000ull), (long)(timeout_ns % 1000000000ull)};
    syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static void futex_wake_shared(uint32_t *word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0); }

static void timeline_add(struct sim_device_shared *dev, uint64_t start, uint64_t end) {
    for (uint64_t epoch = start / SIM_TIMELINE_BUCKET_NS; epoch <= end / SIM_TIMELINE_BUCKET_NS; epoch++) {
        uint64_t lo = epoch * SIM_TIMELINE_BUCKET_NS, hi = lo + SIM_TIMELINE_BUCKET_NS;
        uint64_t from = start > lo ? start : lo, to = end < hi ? end : hi;
        if (to <= from) continue;
        struct sim_timeline_bucket *b = &dev->timeline[epoch % SIM_TIMELINE_BUCKETS];
        if (__atomic_load_n(&b->epoch, __ATOMIC_RELAXED) != epoch) {
            __atomic_store_n(&b->busy_ns, 0, __ATOMIC_RELAXED);
            __atomic_store_n(&b->epoch, epoch, __ATOMIC_RELEASE);
        }
        __atomic_fetch_add(&b->busy_ns, to - from, __ATOMIC_RELAXED);
    }
}

/* Called with the engine held, as work of `pid` starts at `start`: if the
 * engine last ran another process's work, record the handoff. Readers in
 * other processes load the count with acquire and use only records below
 * it. */
static void note_engine_start(struct sim_device_shared *dev, int32_t pid, uint64_t start) {
    int32_t last = dev->engine_last_pid;
    if (last == 0 || last == pid) return;
    uint64_t n = dev->handoff_count;
    struct sim_handoff *record = &dev->handoffs[n % SIM_HANDOFF_RING];
    __atomic_store_n(&record->from_pid, last, __ATOMIC_RELAXED);
    __atomic_store_n(&record->to_pid, pid, __ATOMIC_RELAXED);
    __atomic_store_n(&record->from_end_ns, dev->engine_last_end_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&record->to_start_ns, start, __ATOMIC_RELAXED);
    __atomic_store_n(&dev->handoff_count, n + 1, __ATOMIC_RELEASE);
}

static void sleep_until(uint64_t deadline_ns) {
    struct timespec ts = {(time_t)(deadline_ns / 1000000000ull), (long)(deadline_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static bool pid_gone(int32_t pid) { return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH; }

/* Lock the engine state. A process that died inside the short critical
 * section leaves it as it was; its turn is ended by forget_dead_locked. */
static void lock_engine(struct sim_device_shared *dev) {
    bool recovered;
    lock_shared(&dev->engine, &recovered);
}

static void bump_locked(struct sim_device_shared *dev) {
    __atomic_add_fetch(&dev->sched_seq, 1u, __ATOMIC_SEQ_CST);
    futex_wake_shared(&dev->sched_seq);
}

static uint32_t context_of(struct sim_device_shared *dev, struct sim_process_slot *slot) {
    return (uint32_t)(slot - dev->slots) + 1u;
}

/* Does context ctx have work queued or running? */
static bool context_busy_locked(struct sim_device_shared *dev, uint32_t ctx) {
    struct sim_process_slot *s = &dev->slots[ctx - 1];
    if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SIM_SLOT_LIVE) return false;
    return dev->engine_holder_pid == s->pid || __atomic_load_n(&s->engine_waiting, __ATOMIC_RELAXED) > 0 ||
           __atomic_load_n(&s->queued_work, __ATOMIC_RELAXED) > 0;
}

/* The live context, other than `except`, whose threads have waited for the
 * engine longest; 0 if none waits. */
static uint32_t longest_waiting_locked(struct sim_device_shared *dev, uint32_t except) {
    uint32_t best = 0;
    uint64_t best_since = UINT64_MAX;
    for (uint32_t i = 0; i < SIM_MAX_PROCESSES; i++) {
        struct sim_process_slot *s = &dev->slots[i];
        if (i + 1 == except || __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SIM_SLOT_LIVE) continue;
        if (__atomic_load_n(&s->engine_waiting, __ATOMIC_RELAXED) == 0) continue;
        uint64_t since = __atomic_load_n(&s->waiting_since_ns, __ATOMIC_RELAXED);
        if (since < best_since) best = i + 1, best_since = since;
    }
    return best;
}

/* Give the engine to context `to` at `now`: a switch from another context
 * costs ctx_switch_ns before its work may start; its slice starts then. */
static void switch_locked(struct sim_device_shared *dev, uint32_t to, uint64_t now) {
    if (to == 0 || to > SIM_MAX_PROCESSES) return; /* nobody in line (a waiter was reaped meanwhile) */
    uint32_t from = dev->ctx_owner;
    uint64_t cost = from != 0 && from != to ? dev->ctx_switch_ns : 0;
    if (from != to) {
        if (from != 0) __atomic_fetch_add(&dev->ctx_switches, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&dev->slots[to - 1].slices, 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&dev->ctx_owner, to, __ATOMIC_RELAXED);
    __atomic_store_n(&dev->ctx_owner_drained, 0u, __ATOMIC_RELAXED);
    __atomic_store_n(&dev->ctx_ready_ns, now + cost, __ATOMIC_RELAXED);
    __atomic_store_n(&dev->ctx_slice_end_ns, now + cost + dev->ctx_timeslice_ns, __ATOMIC_RELAXED);
    bump_locked(dev);
}

/* When the GPU would have switched to context `to`, which waits: as soon as
 * it waited and the engine was free (not before `not_before`: the slice's
 * end), not when a worker thread got round to it. On a GPU the switch is the
 * hardware's; here it is whichever thread wakes first, tens to hundreds of
 * us late on a loaded machine, which was engine idle no GPU has (a burst's
 * first kernel started ~50-90 us late after every switch). */
static uint64_t switch_time_locked(struct sim_device_shared *dev, uint32_t to, uint64_t not_before, uint64_t now) {
    uint64_t at = not_before;
    if (at < dev->engine_last_end_ns) at = dev->engine_last_end_ns;
    if (to && to <= SIM_MAX_PROCESSES) {
        uint64_t since = __atomic_load_n(&dev->slots[to - 1].waiting_since_ns, __ATOMIC_RELAXED);
        if (at < since) at = since;
    }
    return at < now ? at : now;
}

static void begin_wait_locked(struct sim_device_shared *dev, struct sim_process_slot *slot, uint64_t now) {
    if (__atomic_fetch_add(&slot->engine_waiting, 1, __ATOMIC_RELAXED) == 0)
        __atomic_store_n(&slot->waiting_since_ns, now, __ATOMIC_RELAXED);
    __atomic_fetch_add(&dev->engine_waiters, 1, __ATOMIC_SEQ_CST);
}

static void end_wait_locked(struct sim_device_shared *dev, struct sim_process_slot *slot) {
    if (__atomic_sub_fetch(&slot->engine_waiting, 1, __ATOMIC_RELAXED) == 0)
        __atomic_store_n(&slot->waiting_since_ns, 0, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&dev->engine_waiters, 1, __ATOMIC_SEQ_CST);
}

/* After a quiet poll: a holder or owner that no longer exists loses its
 * turn (its work's end is unknown, so no handoff is recorded from it). */
static void forget_dead_locked(struct sim_device_shared *dev) {
    int32_t holder = dev->engine_holder_pid;
    if (holder && pid_gone(holder)) {
        __atomic_store_n(&dev->engine_busy_since_ns, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&dev->engine_holder_pid, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&dev->engine_last_pid, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&dev->ctx_owner, 0u, __ATOMIC_RELAXED);
    }
    uint32_t owner = dev->ctx_owner;
    if (owner && pid_gone(dev->slots[owner - 1].pid)) __atomic_store_n(&dev->ctx_owner, 0u, __ATOMIC_RELAXED);
}

/* Has the owner's slice passed only in wall time? A thread of it waits for
 * the engine, but has not run (its work back to `ready`, or after its last
 * run) up to the slice's end: the host did not schedule it. Its work starts
 * back-dated when it wakes, so the slice is still its own; switching away
 * would hand out turns nobody ran (a late process lost slices in a row and
 * its neighbour waited 6 ms for one). */
static bool owner_thread_late_locked(struct sim_device_shared *dev, uint32_t owner, uint64_t ready,
                                     uint64_t slice_end) {
    struct sim_process_slot *s = &dev->slots[owner - 1];
    if (__atomic_load_n(&s->engine_waiting, __ATOMIC_RELAXED) == 0) return false;
    uint64_t reached = dev->engine_last_pid == s->pid && dev->engine_last_end_ns > ready ? dev->engine_last_end_ns
                                                                                         : ready;
    return reached < slice_end;
}

/* Wait (engine locked) until `slot`'s context may start work; returns with
 * the engine still locked and the caller made holder. */
static uint64_t take_engine_locked(struct sim_device_shared *dev, struct sim_process_slot *slot, uint64_t earliest) {
    const uint32_t me = context_of(dev, slot);
    for (;;) {
        uint64_t now = sim_now_ns();
        uint64_t wake_at = now + SIM_ENGINE_POLL_NS;
        if (dev->engine_holder_pid == 0) {
            uint32_t owner = dev->ctx_owner;
            uint32_t slice = dev->ctx_timeslice_ns;
            if (owner == 0 || (owner != me && !context_busy_locked(dev, owner))) {
                /* The engine's context has nothing queued: the next one in line gets it
                 * (this one, if its slot was reaped as dead while it waits). */
                uint32_t next = longest_waiting_locked(dev, 0);
                if (!next) next = me;
                switch_locked(dev, next, switch_time_locked(dev, next, 0, now));
                continue;
            }
            uint64_t ready = dev->ctx_ready_ns, slice_end = dev->ctx_slice_end_ns;
            if (slice && now >= ready && now >= slice_end && !owner_thread_late_locked(dev, owner, ready, slice_end)) {
                uint32_t next = longest_waiting_locked(dev, owner);
                if (next) { /* the owner's slice is over and another context waits */
                    switch_locked(dev, next, switch_time_locked(dev, next, slice_end, now));
                    continue;
                }
            }
            if (owner == me) {
                if (now >= ready) {
                    /* The engine has been this context's since `ready`: the work starts
                     * when it could have (queued, the engine's last work ended, the
                     * switch done), not when the worker woke. */
                    uint64_t start = earliest;
                    if (start < dev->engine_last_end_ns) start = dev->engine_last_end_ns;
                    if (start < ready) start = ready;
                    if (start > now) start = now;
                    /* Work after its queue ran empty starts a new slice; alone past its
                     * slice, the next one starts where that ended (a boundary every slice). */
                    if (dev->ctx_owner_drained) {
                        __atomic_store_n(&dev->ctx_slice_end_ns, start + slice, __ATOMIC_RELAXED);
                        __atomic_store_n(&dev->ctx_owner_drained, 0u, __ATOMIC_RELAXED);
                    } else if (slice && start >= slice_end) {
                        __atomic_store_n(&dev->ctx_slice_end_ns, slice_end + ((start - slice_end) / slice + 1) * slice,
                                         __ATOMIC_RELAXED);
                    }
                    end_wait_locked(dev, slot);
                    __atomic_add_fetch(&dev->engine_acquisitions, 1, __ATOMIC_SEQ_CST);
                    note_engine_start(dev, slot->pid, start);
                    __atomic_store_n(&dev->engine_holder_pid, slot->pid, __ATOMIC_RELAXED);
                    __atomic_store_n(&dev->engine_busy_since_ns, start, __ATOMIC_RELEASE);
                    uint64_t unset = 0;
                    __atomic_compare_exchange_n(&slot->first_activity_ns, &unset, start, false, __ATOMIC_RELAXED,
                                                __ATOMIC_RELAXED);
                    return start;
                }
                wake_at = ready; /* the switch to this context is under way */
            } else if (slice) {
                wake_at = (ready > slice_end ? ready : slice_end);
                if (wake_at <= now) wake_at = now + SIM_ENGINE_POLL_NS; /* a late owner: its run's end wakes us */
            }
        }
        uint32_t seq = __atomic_load_n(&dev->sched_seq, __ATOMIC_SEQ_CST);
        unlock_shared(&dev->engine);
        if (wake_at > now) {
            uint64_t timeout = wake_at - now;
            futex_wait_shared(&dev->sched_seq, seq, timeout > SIM_ENGINE_POLL_NS ? SIM_ENGINE_POLL_NS : timeout);
        }
        lock_engine(dev);
        if (__atomic_load_n(&dev->sched_seq, __ATOMIC_SEQ_CST) == seq && sim_now_ns() >= now + SIM_ENGINE_POLL_NS)
            forget_dead_locked(dev);
    }
}

/* Account for a stretch [start, end) of this context's work on the engine
 * and give the engine back (engine locked). */
static void release_engine_locked(struct sim_device_shared *dev, struct sim_process_slot *slot, uint64_t start,
                                  uint64_t end) {
    uint64_t busy = end - start;
    __atomic_fetch_add(&slot->busy_ns, busy, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->last_activity_ns, end, __ATOMIC_RELAXED);
    __atomic_fetch_add(&dev->busy_ns, busy, __ATOMIC_RELAXED);
    timeline_add(dev, start, end);
    __atomic_store_n(&dev->engine_last_end_ns, end, __ATOMIC_RELAXED);
    __atomic_store_n(&dev->engine_last_pid, slot->pid, __ATOMIC_RELAXED);
    __atomic_store_n(&dev->engine_busy_since_ns, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&dev->engine_holder_pid, 0, __ATOMIC_RELAXED);
}

void sim_engine_run(struct sim_device_shared *dev, struct sim_process_slot *slot, uint64_t duration_ns,
                    struct sim_engine_turn *turn, bool kernel) {
    const uint32_t me = context_of(dev, slot);
    uint64_t remaining = duration_ns, first_start = 0, away = 0, stopped_at = 0, last_end = 0;
    lock_engine(dev);
    uint64_t queued_at = sim_now_ns();
    if (turn->earliest_ns && turn->earliest_ns < queued_at) queued_at = turn->earliest_ns;
    begin_wait_locked(dev, slot, queued_at);
    for (;;) {
        uint64_t start = take_engine_locked(dev, slot, stopped_at ? stopped_at : turn->earliest_ns);
        if (!first_start) first_start = start;
        if (stopped_at) away += start - stopped_at;
        bool slicing = dev->ctx_timeslice_ns && dev->ctx_preempt;
        unlock_shared(&dev->engine);

        uint64_t deadline = start + remaining, now;
        bool preempted = false;
        for (;;) {
            uint64_t stop_at = deadline;
            uint64_t slice_end = __atomic_load_n(&dev->ctx_slice_end_ns, __ATOMIC_RELAXED);
            if (slicing && slice_end < stop_at) stop_at = slice_end;
            if (stop_at > sim_now_ns()) sleep_until(stop_at);
            now = sim_now_ns();
            if (now >= deadline) break;
            if (stop_at == deadline) continue; /* woke early */
            /* A slice boundary inside the kernel: stop it there if another context
             * waited by then (or at the first boundary after it began to wait). */
            lock_engine(dev);
            uint32_t next = longest_waiting_locked(dev, me);
            uint64_t end = dev->ctx_slice_end_ns, slice = dev->ctx_timeslice_ns;
            if (next) {
                uint64_t since = __atomic_load_n(&dev->slots[next - 1].waiting_since_ns, __ATOMIC_RELAXED);
                uint64_t stop = stop_at;
                if (since > stop) stop += (since - stop + slice - 1) / slice * slice;
                now = sim_now_ns();
                if (stop <= now && stop > start && stop < deadline) {
                    now = stop;
                    preempted = true;
                    break; /* engine stays locked */
                }
                if (stop < deadline && stop > now) {
                    __atomic_store_n(&dev->ctx_slice_end_ns, stop, __ATOMIC_RELAXED);
                    unlock_shared(&dev->engine);
                    continue;
                }
            }
            if (end <= now) __atomic_store_n(&dev->ctx_slice_end_ns, end + ((now - end) / slice + 1) * slice,
                                             __ATOMIC_RELAXED);
            unlock_shared(&dev->engine);
        }
        if (!preempted) lock_engine(dev);
        if (now >= deadline) {
            preempted = false; /* it ended as the slice did */
            now = deadline;    /* when it ended, not when this thread woke */
        }
        release_engine_locked(dev, slot, start, now);
        last_end = now;
        if (!preempted) {
            if (kernel) {
                __atomic_fetch_add(&slot->kernels_completed, 1, __ATOMIC_RELAXED);
                __atomic_fetch_add(&dev->kernels, 1, __ATOMIC_RELAXED);
            }
            uint64_t queued = __atomic_load_n(&slot->queued_work, __ATOMIC_RELAXED);
            if (queued) __atomic_store_n(&slot->queued_work, queued - 1, __ATOMIC_RELAXED);
            if (queued <= 1 && __atomic_load_n(&slot->engine_waiting, __ATOMIC_RELAXED) == 0) {
                __atomic_store_n(&dev->ctx_owner_drained, 1u, __ATOMIC_RELAXED);
                /* Its queue ran empty: a GPU switches to a waiting context there. */
                uint32_t next = dev->ctx_owner == me ? longest_waiting_locked(dev, me) : 0;
                if (next) switch_locked(dev, next, switch_time_locked(dev, next, now, sim_now_ns()));
            }
            bump_locked(dev);
            unlock_shared(&dev->engine);
            break;
        }
        /* Preempted: the rest runs at this context's next turn. */
        remaining = deadline - now;
        stopped_at = now;
        __atomic_fetch_add(&dev->ctx_preemptions, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&slot->preempted, 1, __ATOMIC_RELAXED);
        begin_wait_locked(dev, slot, now);
        switch_locked(dev, longest_waiting_locked(dev, me), now); /* no-op if that one was reaped meanwhile */
    }
    turn->last_start_ns = first_start;
    turn->last_end_ns = last_end;
    turn->away_ns = away;
}

void sim_engine_queued(struct sim_process_slot *slot, int64_t items) {
    __atomic_fetch_add(&slot->queued_work, (uint64_t)items, __ATOMIC_RELAXED);
}

unsigned sim_utilisation_percent(struct sim_device_shared *dev) {
    const uint64_t window_buckets = 10; /* ~1 s */
    uint64_t now = sim_now_ns();
    uint64_t current = now / SIM_TIMELINE_BUCKET_NS;
    uint64_t first = current >= window_buckets - 1 ? current - (window_buckets - 1) : 0;
    uint64_t span_start = first * SIM_TIMELINE_BUCKET_NS;
    if (span_start < dev->created_ns) span_start = dev->created_ns;
    uint64_t busy = 0;
    for (uint64_t epoch = first; epoch <= current; epoch++) {
        struct sim_timeline_bucket *b = &dev->timeline[epoch % SIM_TIMELINE_BUCKETS];
        if (__atomic_load_n(&b->epoch, __ATOMIC_ACQUIRE) == epoch) busy += __atomic_load_n(&b->busy_ns, __ATOMIC_RELAXED);
    }
    uint64_t running_since = __atomic_load_n(&dev->engine_busy_since_ns, __ATOMIC_ACQUIRE);
    if (running_since) busy += now - (running_since > span_start ? running_since : span_start);
    uint64_t span = now > span_start ? now - span_start : 1;
    uint64_t percent = busy * 100 / span;
    return percent > 100 ? 100u : (unsigned)percent;
}
