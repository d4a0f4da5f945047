/* Streams and events of the simulated libcuda.so.1.
 *
 * Each stream is a FIFO with its own worker thread (started on first use).
 * The worker runs items in order: kernels take the shared engine for their
 * duration, event records take a timestamp when the stream reaches them.
 * Stream objects are pooled and never freed, and their sequence numbers
 * only grow, so a waiter holding a stale pointer can never touch freed
 * memory and a "wait until sequence N" stays correct across reuse.
 *
 * Simplification: the legacy default stream does not implicitly
 * synchronise with other blocking streams. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "cuda_internal.h"
#include "kernel_trace.h"

/* Launches pending on one stream before a launch blocks, as on a real GPU. */
#define SIM_STREAM_DEPTH 1024

enum stream_state { STREAM_FREE, STREAM_ACTIVE, STREAM_CLOSING };

struct CUstream_st {
    uint32_t tag;
    uint32_t state;
    unsigned int flags;
    int priority;
    bool is_default; /* legacy or per-thread default stream: not destroyable */
    bool worker_running;
    bool worker_idle;
    pthread_mutex_t lock;
    pthread_cond_t work_ready; /* the worker waits here */
    pthread_cond_t progressed; /* synchronisers and blocked launchers wait here */
    uint64_t head;             /* items completed (index of the next to run) */
    uint64_t tail;             /* items queued */
    CUgraph capture;           /* graph being captured into, or NULL */
    int capture_mode;          /* CU_STREAM_CAPTURE_MODE_* given at begin */
    bool capture_invalid;      /* a prohibited call invalidated it */
    bool capture_owns_graph;   /* false: cuStreamBeginCaptureToGraph's graph */
    pthread_t capture_thread;  /* the thread that began it */
    uint64_t capture_id;
    struct CUstream_st *next_free;
    struct sim_stream_item ring[SIM_STREAM_DEPTH];
};

struct CUevent_st {
    uint32_t tag;
    unsigned int flags;
    uint64_t recorded_gen; /* records issued */
    uint64_t done_gen;     /* records the stream has reached */
    uint64_t timestamp_ns; /* CLOCK_MONOTONIC of the last record reached */
    uint32_t refs;         /* the user's handle + queued items naming it */
    bool destroyed;
    struct CUstream_st *captured_in; /* last recorded in this capturing stream */
    uint64_t captured_id;            /* ... during this capture sequence */
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st **all_streams;
static size_t stream_count, stream_capacity;
static struct CUstream_st *free_streams;
static struct CUstream_st *legacy_stream;

static __thread struct CUstream_st *thread_stream;
static pthread_key_t thread_stream_key;
static pthread_once_t thread_stream_key_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t event_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t event_reached = PTHREAD_COND_INITIALIZER;

/* Stream capture: captures active in the process (read unlocked as a hint
 * by the checks, so calls made without any capture stay cheap), the
 * source of capture ids, and each thread's interaction mode
 * (cuThreadExchangeStreamCaptureMode; GLOBAL by default). */
static int active_captures;   /* __atomic builtins: gcc and clang (zig cc) alike */
static uint64_t capture_ids;
static __thread int thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* ---- stream pool -------------------------------------------------------- */

static struct CUstream_st *stream_acquire(unsigned int flags, int priority, bool is_default) {
    pthread_mutex_lock(&pool_lock);
    struct CUstream_st *s = free_streams;
    if (s) {
        free_streams = s->next_free;
    } else {
        if (stream_count == stream_capacity) {
            size_t capacity = stream_capacity ? stream_capacity * 2 : 16;
            struct CUstream_st **grown = realloc(all_streams, capacity * sizeof *grown);
            if (!grown) {
                pthread_mutex_unlock(&pool_lock);
                return NULL;
            }
            all_streams = grown;
            stream_capacity = capacity;
        }
        s = calloc(1, sizeof *s);
        if (!s) {
            pthread_mutex_unlock(&pool_lock);
            return NULL;
        }
        pthread_mutex_init(&s->lock, NULL);
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&s->work_ready, &attr);
        pthread_cond_init(&s->progressed, &attr);
        pthread_condattr_destroy(&attr);
        all_streams[stream_count++] = s;
    }
    pthread_mutex_lock(&s->lock);
    s->flags = flags;
    s->priority = priority;
    s->is_default = is_default;
    s->capture = NULL;
    __atomic_store_n(&s->state, (uint32_t)STREAM_ACTIVE, __ATOMIC_RELAXED);
    __atomic_store_n(&s->tag, (uint32_t)SIM_TAG_STREAM, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&pool_lock);
    return s;
}

static void stream_release(struct CUstream_st *s) {
    pthread_mutex_lock(&pool_lock);
    s->next_free = free_streams;
    free_streams = s;
    pthread_mutex_unlock(&pool_lock);
}

/* ---- events ------------------------------------------------------------- */

/* The event behind a handle, or NULL if it is not a live event. */
static struct CUevent_st *live_event(CUevent handle) {
    struct CUevent_st *ev = (struct CUevent_st *)handle;
    if (!ev || ev->tag != SIM_TAG_EVENT || __atomic_load_n(&ev->destroyed, __ATOMIC_RELAXED)) return NULL;
    return ev;
}

/* Called with event_lock held. */
static void event_unref_locked(struct CUevent_st *ev) {
    if (--ev->refs == 0) {
        ev->tag = SIM_TAG_DEAD;
        free(ev);
    }
}

/* ---- worker ------------------------------------------------------------- */

/* One kernel on the engine, recorded in the kernel trace when it is on. */
static void run_kernel(const struct sim_stream_item *item, uint64_t duration_ns, struct sim_engine_turn *turn) {
    uint64_t ready = sim_kernel_trace_enabled() ? sim_now_ns() : 0;
    sim_engine_run(sim_process.dev, sim_process.slot, duration_ns, turn, true);
    if (ready)
        sim_kernel_trace_add(item->enqueued_ns, ready, turn->last_start_ns, turn->last_end_ns, duration_ns,
                             turn->away_ns);
}

/* Runs one item; returns when it ended on the stream's timeline (the
 * engine's end for kernels and copies, the event's time for a wait). */
static uint64_t run_item(const struct sim_stream_item *item, struct sim_engine_turn *turn) {
    switch (item->kind) {
    case SIM_ITEM_KERNEL:
        run_kernel(item, item->duration_ns, turn);
        return turn->last_end_ns;
    case SIM_ITEM_GRAPH: {
        const uint64_t *durations = item->ptr;
        for (uint32_t i = 0; i < item->count; i++) {
            run_kernel(item, durations[i], turn);
            turn->earliest_ns = turn->last_end_ns;
        }
        free(item->ptr);
        return item->count ? turn->last_end_ns : turn->earliest_ns;
    }
    case SIM_ITEM_EVENT_RECORD: {
        struct CUevent_st *ev = item->ptr;
        /* Reached when the work before it ended (stream time), so event
         * timings measure the work, not the worker's wake-ups. */
        uint64_t now = turn->earliest_ns;
        pthread_mutex_lock(&event_lock);
        ev->timestamp_ns = now;
        if (item->gen > ev->done_gen) ev->done_gen = item->gen;
        event_unref_locked(ev);
        pthread_cond_broadcast(&event_reached);
        pthread_mutex_unlock(&event_lock);
        return now;
    }
    case SIM_ITEM_WAIT_EVENT: {
        struct CUevent_st *ev = item->ptr;
        pthread_mutex_lock(&event_lock);
        while (ev->done_gen < item->gen) pthread_cond_wait(&event_reached, &event_lock);
        uint64_t reached = ev->timestamp_ns;
        event_unref_locked(ev);
        pthread_mutex_unlock(&event_lock);
        return reached > turn->earliest_ns ? reached : turn->earliest_ns;
    }
    case SIM_ITEM_FREE:
        sim_memory_free((CUdeviceptr)(uintptr_t)item->ptr);
        return turn->earliest_ns;
    case SIM_ITEM_HOST_FUNC:
        ((CUhostFn)item->ptr)(item->arg);
        return sim_now_ns();   /* host work: it ends when it returns */
    case SIM_ITEM_COPY:
        if (item->count) {
            sim_engine_run(sim_process.dev, sim_process.slot, item->duration_ns, turn, false);
            return turn->last_end_ns;
        }
        struct timespec ts = {(time_t)(item->duration_ns / 1000000000ull), (long)(item->duration_ns % 1000000000ull)};
        nanosleep(&ts, NULL);
        return sim_now_ns();
    }
    return sim_now_ns();
}

static void *stream_worker(void *arg) {
    struct CUstream_st *s = arg;
    /* Default timer slack (50 us) would stretch 20 us kernels to 70 us. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    struct sim_engine_turn turn = {0};
    uint64_t stream_time = 0; /* when the stream's last item ended (stream time) */
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == s->tail && s->state != STREAM_CLOSING) {
            s->worker_idle = true;
            pthread_cond_wait(&s->work_ready, &s->lock);
        }
        s->worker_idle = false;
        if (s->head == s->tail) { /* closing and drained */
            s->worker_running = false;
            __atomic_store_n(&s->state, (uint32_t)STREAM_FREE, __ATOMIC_RELAXED);
            __atomic_store_n(&s->tag, (uint32_t)SIM_TAG_DEAD, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&s->lock);
            stream_release(s);
            return NULL;
        }
        struct sim_stream_item item = s->ring[s->head % SIM_STREAM_DEPTH];
        pthread_mutex_unlock(&s->lock);
        turn.earliest_ns = item.enqueued_ns > stream_time ? item.enqueued_ns : stream_time;
        stream_time = run_item(&item, &turn);
        pthread_mutex_lock(&s->lock);
        s->head++;
        pthread_cond_broadcast(&s->progressed);
    }
}

/* Close a stream: its queued work still runs, then it returns to the pool. */
static void stream_close(struct CUstream_st *s) {
    pthread_mutex_lock(&s->lock);
    if (s->state != STREAM_ACTIVE) {
        pthread_mutex_unlock(&s->lock);
        return;
    }
    __atomic_store_n(&s->state, (uint32_t)STREAM_CLOSING, __ATOMIC_RELAXED);
    if (s->worker_running) {
        pthread_cond_signal(&s->work_ready);
        pthread_mutex_unlock(&s->lock);
        return;
    }
    __atomic_store_n(&s->state, (uint32_t)STREAM_FREE, __ATOMIC_RELAXED);
    __atomic_store_n(&s->tag, (uint32_t)SIM_TAG_DEAD, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&s->lock);
    stream_release(s);
}

static void thread_stream_exit(void *value) { stream_close(value); }

static void make_thread_stream_key(void) { pthread_key_create(&thread_stream_key, thread_stream_exit); }

/* ---- streams used by other parts ---------------------------------------- */

CUresult sim_stream_resolve(CUstream handle, bool per_thread_default, struct CUstream_st **out) {
    if (!handle) handle = per_thread_default ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (handle == CU_STREAM_LEGACY) {
        struct CUstream_st *s = __atomic_load_n(&legacy_stream, __ATOMIC_ACQUIRE);
        if (!s) {
            static pthread_mutex_t legacy_lock = PTHREAD_MUTEX_INITIALIZER;
            pthread_mutex_lock(&legacy_lock);
            s = legacy_stream;
            if (!s) {
                s = stream_acquire(0, 0, true);
                __atomic_store_n(&legacy_stream, s, __ATOMIC_RELEASE);
            }
            pthread_mutex_unlock(&legacy_lock);
            if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
        }
        *out = s;
        return CUDA_SUCCESS;
    }
    if (handle == CU_STREAM_PER_THREAD) {
        if (!thread_stream) {
            pthread_once(&thread_stream_key_once, make_thread_stream_key);
            thread_stream = stream_acquire(0, 0, true);
            if (!thread_stream) return CUDA_ERROR_OUT_OF_MEMORY;
            pthread_setspecific(thread_stream_key, thread_stream);
        }
        *out = thread_stream;
        return CUDA_SUCCESS;
    }
    struct CUstream_st *s = (struct CUstream_st *)handle;
    /* Unlocked check of a user handle (racing a destroy is the caller's bug). */
    if (__atomic_load_n(&s->tag, __ATOMIC_RELAXED) != SIM_TAG_STREAM ||
        __atomic_load_n(&s->state, __ATOMIC_RELAXED) != STREAM_ACTIVE)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
}

/* Called with s->lock held: put a kernel or graph into the capture graph. */
static CUresult capture_item_locked(struct CUstream_st *s, const struct sim_stream_item *item) {
    switch (item->kind) {
    case SIM_ITEM_KERNEL:
        return sim_graph_append_kernels(s->capture, &item->duration_ns, 1);
    case SIM_ITEM_GRAPH: {
        CUresult rc = sim_graph_append_kernels(s->capture, item->ptr, item->count);
        free(item->ptr);
        return rc;
    }
    case SIM_ITEM_EVENT_RECORD:
    case SIM_ITEM_WAIT_EVENT:
        /* Within one captured stream, order already implies these. */
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
}

CUresult sim_stream_enqueue(struct CUstream_st *s, const struct sim_stream_item *item) {
    pthread_mutex_lock(&s->lock);
    if (s->capture) {
        CUresult rc = s->capture_invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : capture_item_locked(s, item);
        if (rc != CUDA_SUCCESS && item->kind == SIM_ITEM_GRAPH && s->capture_invalid) free(item->ptr);
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    while (s->tail - s->head >= SIM_STREAM_DEPTH) pthread_cond_wait(&s->progressed, &s->lock);
    if (item->kind == SIM_ITEM_EVENT_RECORD || item->kind == SIM_ITEM_WAIT_EVENT) {
        pthread_mutex_lock(&event_lock);
        ((struct CUevent_st *)item->ptr)->refs++;
        pthread_mutex_unlock(&event_lock);
    }
    s->ring[s->tail % SIM_STREAM_DEPTH] = *item;
    s->ring[s->tail % SIM_STREAM_DEPTH].enqueued_ns = sim_now_ns();   /* stream time: see sim_engine_turn */
    s->tail++;
    /* Engine work on the context's queue: it keeps the engine between its kernels. */
    int64_t engine_items = item->kind == SIM_ITEM_KERNEL ? 1
                           : item->kind == SIM_ITEM_GRAPH ? (int64_t)item->count
                           : item->kind == SIM_ITEM_COPY ? (int64_t)(item->count != 0) : 0;
    if (engine_items) sim_engine_queued(sim_process.slot, engine_items);
    if (item->kind == SIM_ITEM_KERNEL)
        __atomic_fetch_add(&sim_process.slot->kernels_launched, 1, __ATOMIC_RELAXED);
    else if (item->kind == SIM_ITEM_GRAPH)
        __atomic_fetch_add(&sim_process.slot->kernels_launched, item->count, __ATOMIC_RELAXED);
    if (!s->worker_running) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        int rc = pthread_create(&thread, &attr, stream_worker, s);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            s->tail--;
            if (engine_items) sim_engine_queued(sim_process.slot, -engine_items);
            if (item->kind == SIM_ITEM_GRAPH) free(item->ptr);
            pthread_mutex_unlock(&s->lock);
            sim_log("could not start a stream worker thread: %s", strerror(rc));
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        s->worker_running = true;
    } else if (s->worker_idle) {
        pthread_cond_signal(&s->work_ready);
    }
    pthread_mutex_unlock(&s->lock);
    return CUDA_SUCCESS;
}

CUgraph sim_stream_capture_graph(struct CUstream_st *s) {
    pthread_mutex_lock(&s->lock);
    CUgraph graph = s->capture;
    pthread_mutex_unlock(&s->lock);
    return graph;
}

bool sim_stream_capturing(struct CUstream_st *s) {
    pthread_mutex_lock(&s->lock);
    bool capturing = s->capture != NULL;
    pthread_mutex_unlock(&s->lock);
    return capturing;
}

CUresult sim_stream_synchronize(struct CUstream_st *s) {
    pthread_mutex_lock(&s->lock);
    if (s->capture) {
        s->capture_invalid = true; /* waiting on a capture can never finish */
        pthread_mutex_unlock(&s->lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    uint64_t target = s->tail;
    while (s->head < target) pthread_cond_wait(&s->progressed, &s->lock);
    pthread_mutex_unlock(&s->lock);
    return CUDA_SUCCESS;
}

/* Every stream ever made (streams are pooled, never freed); free() it. */
static struct CUstream_st **snapshot_streams(size_t *count) {
    pthread_mutex_lock(&pool_lock);
    size_t n = stream_count;
    struct CUstream_st **snapshot = malloc((n ? n : 1) * sizeof *snapshot);
    if (snapshot && n) memcpy(snapshot, all_streams, n * sizeof *snapshot);
    pthread_mutex_unlock(&pool_lock);
    *count = snapshot ? n : 0;
    return snapshot;
}

void sim_streams_synchronize_all(void) {
    size_t n;
    struct CUstream_st **snapshot = snapshot_streams(&n);
    if (!snapshot) return;
    for (size_t i = 0; i < n; i++) {
        struct CUstream_st *s = snapshot[i];
        pthread_mutex_lock(&s->lock);
        uint64_t target = s->tail;
        while (s->head < target) pthread_cond_wait(&s->progressed, &s->lock);
        pthread_mutex_unlock(&s->lock);
    }
    free(snapshot);
}

/* A forked child has no worker threads; forget the parent's streams. */
static void forget_streams_after_fork(void) {
    pthread_mutex_init(&pool_lock, NULL);
    pthread_mutex_init(&event_lock, NULL);
    pthread_cond_init(&event_reached, NULL);
    all_streams = NULL;
    stream_count = stream_capacity = 0;
    free_streams = NULL;
    legacy_stream = NULL;
    thread_stream = NULL;
    active_captures = 0;
}

__attribute__((constructor)) static void register_fork_handler(void) {
    pthread_atfork(NULL, NULL, forget_streams_after_fork);
}

/* ---- capture rules ------------------------------------------------------
 * cuda.h, cuStreamBeginCapture / cuThreadExchangeStreamCaptureMode: a
 * thread in GLOBAL mode may not make a "potentially unsafe" call while it
 * has a non-relaxed capture of its own or another thread has a GLOBAL
 * capture; THREAD_LOCAL only counts its own captures; RELAXED is never
 * prohibited. A prohibited call fails with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that
 * prohibited it (cuStreamEndCapture then returns
 * CUDA_ERROR_STREAM_CAPTURE_INVALIDATED). */

bool sim_capture_active(void) { return __atomic_load_n(&active_captures, __ATOMIC_ACQUIRE) > 0; }

CUresult sim_capture_check_unsafe(void) {
    if (!sim_capture_active()) return CUDA_SUCCESS;
    int mode = thread_capture_mode;
    if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
    pthread_t me = pthread_self();
    size_t n;
    struct CUstream_st **streams = snapshot_streams(&n);
    bool prohibited = false;
    for (size_t i = 0; i < n; i++) {
        struct CUstream_st *s = streams[i];
        pthread_mutex_lock(&s->lock);
        if (s->capture && !s->capture_invalid) {
            bool mine = pthread_equal(s->capture_thread, me);
            if ((mine && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
                (!mine && mode == CU_STREAM_CAPTURE_MODE_GLOBAL && s->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
                s->capture_invalid = true;
                prohibited = true;
            }
        }
        pthread_mutex_unlock(&s->lock);
    }
    free(streams);
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

/* An event last recorded in a capture that is still active cannot be
 * waited for or queried in any mode: CUDA_ERROR_CAPTURED_EVENT, and the
 * capture is invalidated. */
static CUresult check_captured_event(struct CUevent_st *ev) {
    pthread_mutex_lock(&event_lock);
    struct CUstream_st *s = ev->captured_in;
    uint64_t id = ev->captured_id;
    pthread_mutex_unlock(&event_lock);
    if (!s) return CUDA_SUCCESS;
    pthread_mutex_lock(&s->lock);
    bool active = s->capture && s->capture_id == id;
    if (active) s->capture_invalid = true;
    pthread_mutex_unlock(&s->lock);
    return active ? CUDA_ERROR_CAPTURED_EVENT : CUDA_SUCCESS;
}

/* ---- stream API --------------------------------------------------------- */

CUresult sim_cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    if (priority > 0) priority = 0; /* clamped to the range, as the driver does */
    if (priority < -5) priority = -5;
    struct CUstream_st *s = stream_acquire(flags, priority, false);
    if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuStreamCreateWithPriority, (CUstream * phStream, unsigned int flags, int priority));

CUresult sim_cuStreamCreate(CUstream *phStream, unsigned int flags) {
    return sim_cuStreamCreateWithPriority(phStream, flags, 0);
}
CU_EXPORT(cuStreamCreate, (CUstream * phStream, unsigned int flags));

CUresult sim_cuStreamDestroy_v2(CUstream hStream) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, false, &s);
    if (rc) return rc;
    if (s->is_default) return CUDA_ERROR_INVALID_HANDLE;
    stream_close(s);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuStreamDestroy_v2, (CUstream hStream));
CUresult sim_cuStreamDestroy(CUstream hStream) { return sim_cuStreamDestroy_v2(hStream); }
CU_EXPORT(cuStreamDestroy, (CUstream hStream));

/* Synchronising or querying the legacy stream waits on every blocking
 * stream: potentially unsafe while a capture is active. */
static CUresult check_legacy_unsafe(CUstream hStream, bool ptds) {
    if (hStream == CU_STREAM_LEGACY || (!hStream && !ptds)) return sim_capture_check_unsafe();
    return CUDA_SUCCESS;
}

static CUresult stream_synchronize(CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    rc = check_legacy_unsafe(hStream, ptds);
    if (rc) return rc;
    rc = sim_stream_synchronize(s);
    if (rc == CUDA_SUCCESS) sim_pools_release_at_sync();
    return rc;
}
CUresult sim_cuStreamSynchronize(CUstream hStream) { return stream_synchronize(hStream, false); }
CU_EXPORT(cuStreamSynchronize, (CUstream hStream));
CUresult sim_cuStreamSynchronize_ptsz(CUstream hStream) { return stream_synchronize(hStream, true); }
CU_EXPORT(cuStreamSynchronize_ptsz, (CUstream hStream));

static CUresult stream_query(CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    rc = check_legacy_unsafe(hStream, ptds);
    if (rc) return rc;
    pthread_mutex_lock(&s->lock);
    if (s->capture) {
        s->capture_invalid = true;
        pthread_mutex_unlock(&s->lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    bool idle = s->head == s->tail;
    pthread_mutex_unlock(&s->lock);
    return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult sim_cuStreamQuery(CUstream hStream) { return stream_query(hStream, false); }
CU_EXPORT(cuStreamQuery, (CUstream hStream));
CUresult sim_cuStreamQuery_ptsz(CUstream hStream) { return stream_query(hStream, true); }
CU_EXPORT(cuStreamQuery_ptsz, (CUstream hStream));

static CUresult stream_get_priority(CUstream hStream, int *priority, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!priority) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    *priority = s->priority;
    return CUDA_SUCCESS;
}
CUresult sim_cuStreamGetPriority(CUstream hStream, int *priority) { return stream_get_priority(hStream, priority, false); }
CU_EXPORT(cuStreamGetPriority, (CUstream hStream, int *priority));
CUresult sim_cuStreamGetPriority_ptsz(CUstream hStream, int *priority) {
    return stream_get_priority(hStream, priority, true);
}
CU_EXPORT(cuStreamGetPriority_ptsz, (CUstream hStream, int *priority));

static CUresult stream_get_flags(CUstream hStream, unsigned int *flags, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    *flags = s->flags;
    return CUDA_SUCCESS;
}
CUresult sim_cuStreamGetFlags(CUstream hStream, unsigned int *flags) { return stream_get_flags(hStream, flags, false); }
CU_EXPORT(cuStreamGetFlags, (CUstream hStream, unsigned int *flags));
CUresult sim_cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags) {
    return stream_get_flags(hStream, flags, true);
}
CU_EXPORT(cuStreamGetFlags_ptsz, (CUstream hStream, unsigned int *flags));

static CUresult stream_wait_event(CUstream hStream, CUevent hEvent, unsigned int flags, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUevent_st *ev = live_event(hEvent);
    if (!ev) return CUDA_ERROR_INVALID_HANDLE;
    if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    pthread_mutex_lock(&event_lock);
    uint64_t gen = ev->recorded_gen;
    pthread_mutex_unlock(&event_lock);
    if (gen == 0) return CUDA_SUCCESS; /* never recorded: nothing to wait for */
    struct sim_stream_item item = {.kind = SIM_ITEM_WAIT_EVENT, .gen = gen, .ptr = ev};
    return sim_stream_enqueue(s, &item);
}
CUresult sim_cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int flags) {
    return stream_wait_event(hStream, hEvent, flags, false);
}
CU_EXPORT(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int flags));
CUresult sim_cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int flags) {
    return stream_wait_event(hStream, hEvent, flags, true);
}
CU_EXPORT(cuStreamWaitEvent_ptsz, (CUstream hStream, CUevent hEvent, unsigned int flags));

static CUresult launch_host_func(CUstream hStream, CUhostFn fn, void *user_data, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!fn) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    struct sim_stream_item item = {.kind = SIM_ITEM_HOST_FUNC, .ptr = (void *)fn, .arg = user_data};
    return sim_stream_enqueue(s, &item);
}
CUresult sim_cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *user_data) {
    return launch_host_func(hStream, fn, user_data, false);
}
CU_EXPORT(cuLaunchHostFunc, (CUstream hStream, CUhostFn fn, void *user_data));
CUresult sim_cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *user_data) {
    return launch_host_func(hStream, fn, user_data, true);
}
CU_EXPORT(cuLaunchHostFunc_ptsz, (CUstream hStream, CUhostFn fn, void *user_data));

/* ---- stream capture ----------------------------------------------------- */

static CUresult begin_capture(CUstream hStream, CUgraph into, CUstreamCaptureMode mode, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
    if (!hStream && !ptds) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (hStream == CU_STREAM_LEGACY) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    CUgraph graph = into;
    if (!graph) {
        rc = sim_graph_new(&graph);
        if (rc) return rc;
    }
    pthread_mutex_lock(&s->lock);
    if (s->capture) {
        pthread_mutex_unlock(&s->lock);
        if (!into) sim_cuGraphDestroy(graph);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    s->capture = graph;
    s->capture_mode = mode;
    s->capture_invalid = false;
    s->capture_owns_graph = into == NULL;
    s->capture_thread = pthread_self();
    s->capture_id = __atomic_add_fetch(&capture_ids, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&active_captures, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->lock);
    return CUDA_SUCCESS;
}
CUresult sim_cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode) {
    return begin_capture(hStream, NULL, mode, false);
}
CU_EXPORT(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode));
CUresult sim_cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode) {
    return begin_capture(hStream, NULL, mode, true);
}
CU_EXPORT(cuStreamBeginCapture_v2_ptsz, (CUstream hStream, CUstreamCaptureMode mode));
/* The CUDA 10.0 form has no mode argument: GLOBAL. */
CUresult sim_cuStreamBeginCapture(CUstream hStream) {
    return begin_capture(hStream, NULL, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
CU_EXPORT(cuStreamBeginCapture, (CUstream hStream));
CUresult sim_cuStreamBeginCapture_ptsz(CUstream hStream) {
    return begin_capture(hStream, NULL, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
CU_EXPORT(cuStreamBeginCapture_ptsz, (CUstream hStream));

/* Dependencies are not modelled (nodes run in the order added). */
static CUresult begin_capture_to_graph(CUstream hStream, CUgraph hGraph, CUstreamCaptureMode mode, bool ptds) {
    if (!sim_graph_live(hGraph)) return CUDA_ERROR_INVALID_VALUE;
    return begin_capture(hStream, hGraph, mode, ptds);
}
CUresult sim_cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                         const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                         CUstreamCaptureMode mode) {
    (void)dependencies, (void)dependencyData, (void)numDependencies;
    return begin_capture_to_graph(hStream, hGraph, mode, false);
}
CU_EXPORT(cuStreamBeginCaptureToGraph, (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                        const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                        CUstreamCaptureMode mode));
CUresult sim_cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                              const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                              CUstreamCaptureMode mode) {
    (void)dependencies, (void)dependencyData, (void)numDependencies;
    return begin_capture_to_graph(hStream, hGraph, mode, true);
}
CU_EXPORT(cuStreamBeginCaptureToGraph_ptsz, (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                             const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                             CUstreamCaptureMode mode));

static CUresult end_capture(CUstream hStream, CUgraph *phGraph, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!phGraph) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    pthread_mutex_lock(&s->lock);
    CUgraph graph = s->capture;
    if (!graph) {
        pthread_mutex_unlock(&s->lock);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    if (s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(s->capture_thread, pthread_self())) {
        pthread_mutex_unlock(&s->lock);
        return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    }
    bool invalid = s->capture_invalid, owned = s->capture_owns_graph;
    s->capture = NULL;
    s->capture_invalid = false;
    __atomic_fetch_sub(&active_captures, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s->lock);
    if (invalid) {
        if (owned) sim_cuGraphDestroy(graph);
        *phGraph = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *phGraph = graph;
    return CUDA_SUCCESS;
}
CUresult sim_cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) { return end_capture(hStream, phGraph, false); }
CU_EXPORT(cuStreamEndCapture, (CUstream hStream, CUgraph *phGraph));
CUresult sim_cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) {
    return end_capture(hStream, phGraph, true);
}
CU_EXPORT(cuStreamEndCapture_ptsz, (CUstream hStream, CUgraph *phGraph));

/* Status, id and graph of a stream's capture (any output may be NULL). */
static CUresult capture_info(CUstream hStream, bool ptds, CUstreamCaptureStatus *status, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
                             size_t *num_deps) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    pthread_mutex_lock(&s->lock);
    *status = !s->capture ? CU_STREAM_CAPTURE_STATUS_NONE
              : s->capture_invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id && s->capture) *id = s->capture_id;
    if (graph) *graph = *status == CU_STREAM_CAPTURE_STATUS_ACTIVE ? s->capture : NULL;
    pthread_mutex_unlock(&s->lock);
    if (deps) *deps = NULL;
    if (edges) *edges = NULL;
    if (num_deps) *num_deps = 0;
    return CUDA_SUCCESS;
}

static CUresult is_capturing(CUstream hStream, CUstreamCaptureStatus *status, bool ptds) {
    return capture_info(hStream, ptds, status, NULL, NULL, NULL, NULL, NULL);
}
CUresult sim_cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *status) {
    return is_capturing(hStream, status, false);
}
CU_EXPORT(cuStreamIsCapturing, (CUstream hStream, CUstreamCaptureStatus *status));
CUresult sim_cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *status) {
    return is_capturing(hStream, status, true);
}
CU_EXPORT(cuStreamIsCapturing_ptsz, (CUstream hStream, CUstreamCaptureStatus *status));

/* CUDA 10.1 form (status, id). */
CUresult sim_cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id) {
    return capture_info(hStream, false, status, id, NULL, NULL, NULL, NULL);
}
CU_EXPORT(cuStreamGetCaptureInfo, (CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id));
CUresult sim_cuStreamGetCaptureInfo_ptsz(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id) {
    return capture_info(hStream, true, status, id, NULL, NULL, NULL, NULL);
}
CU_EXPORT(cuStreamGetCaptureInfo_ptsz, (CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id));
/* CUDA 11.3 form (+ graph, dependencies). */
CUresult sim_cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                       CUgraph *graph, const CUgraphNode **deps, size_t *num_deps) {
    return capture_info(hStream, false, status, id, graph, deps, NULL, num_deps);
}
CU_EXPORT(cuStreamGetCaptureInfo_v2, (CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                      CUgraph *graph, const CUgraphNode **deps, size_t *num_deps));
CUresult sim_cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                            CUgraph *graph, const CUgraphNode **deps, size_t *num_deps) {
    return capture_info(hStream, true, status, id, graph, deps, NULL, num_deps);
}
CU_EXPORT(cuStreamGetCaptureInfo_v2_ptsz, (CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                           CUgraph *graph, const CUgraphNode **deps, size_t *num_deps));
/* CUDA 12.3 form (+ edge data); what cuda.h 13 calls cuStreamGetCaptureInfo. */
CUresult sim_cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                       CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
                                       size_t *num_deps) {
    return capture_info(hStream, false, status, id, graph, deps, edges, num_deps);
}
CU_EXPORT(cuStreamGetCaptureInfo_v3, (CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                      CUgraph *graph, const CUgraphNode **deps, const CUgraphEdgeData **edges,
                                      size_t *num_deps));
CUresult sim_cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                            CUgraph *graph, const CUgraphNode **deps,
                                            const CUgraphEdgeData **edges, size_t *num_deps) {
    return capture_info(hStream, true, status, id, graph, deps, edges, num_deps);
}
CU_EXPORT(cuStreamGetCaptureInfo_v3_ptsz, (CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
                                           CUgraph *graph, const CUgraphNode **deps,
                                           const CUgraphEdgeData **edges, size_t *num_deps));

CUresult sim_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    if (!mode || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    int old = thread_capture_mode;
    thread_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode * mode));

/* ---- event API ---------------------------------------------------------- */


CUresult sim_cuEventCreate(CUevent *phEvent, unsigned int flags) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    if (!phEvent || (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS)))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUevent_st *ev = calloc(1, sizeof *ev);
    if (!ev) return CUDA_ERROR_OUT_OF_MEMORY;
    ev->tag = SIM_TAG_EVENT;
    ev->flags = flags;
    ev->refs = 1;
    *phEvent = (CUevent)ev;
    return CUDA_SUCCESS;
}
CU_EXPORT(cuEventCreate, (CUevent * phEvent, unsigned int flags));

static CUresult event_record(CUevent hEvent, CUstream hStream, bool ptds) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUevent_st *ev = live_event(hEvent);
    if (!ev) return CUDA_ERROR_INVALID_HANDLE;
    struct CUstream_st *s;
    rc = sim_stream_resolve(hStream, ptds, &s);
    if (rc) return rc;
    pthread_mutex_lock(&event_lock);
    uint64_t gen = ++ev->recorded_gen;
    pthread_mutex_unlock(&event_lock);
    struct sim_stream_item item = {.kind = SIM_ITEM_EVENT_RECORD, .gen = gen, .ptr = ev};
    rc = sim_stream_enqueue(s, &item);
    if (rc != CUDA_SUCCESS) return rc;
    pthread_mutex_lock(&s->lock);
    uint64_t capture_id = s->capture ? s->capture_id : 0;
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_lock(&event_lock);
    if (capture_id) {
        /* Captured records never run: the event is "captured" until the
         * capture ends (querying or waiting for it is an error meanwhile). */
        if (gen > ev->done_gen) ev->done_gen = gen;
        ev->captured_in = s;
        ev->captured_id = capture_id;
    } else {
        ev->captured_in = NULL;
    }
    pthread_mutex_unlock(&event_lock);
    return rc;
}
CUresult sim_cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, false); }
CU_EXPORT(cuEventRecord, (CUevent hEvent, CUstream hStream));
CUresult sim_cuEventRecord_ptsz(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, true); }
CU_EXPORT(cuEventRecord_ptsz, (CUevent hEvent, CUstream hStream));
CUresult sim_cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags) {
    (void)flags;
    return event_record(hEvent, hStream, false);
}
CU_EXPORT(cuEventRecordWithFlags, (CUevent hEvent, CUstream hStream, unsigned int flags));
CUresult sim_cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags) {
    (void)flags;
    return event_record(hEvent, hStream, true);
}
CU_EXPORT(cuEventRecordWithFlags_ptsz, (CUevent hEvent, CUstream hStream, unsigned int flags));

CUresult sim_cuEventQuery(CUevent hEvent) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUevent_st *ev = live_event(hEvent);
    if (!ev) return CUDA_ERROR_INVALID_HANDLE;
    if ((rc = check_captured_event(ev)) || (rc = sim_capture_check_unsafe())) return rc;
    pthread_mutex_lock(&event_lock);
    bool reached = ev->done_gen >= ev->recorded_gen;
    pthread_mutex_unlock(&event_lock);
    return reached ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CU_EXPORT(cuEventQuery, (CUevent hEvent));

CUresult sim_cuEventSynchronize(CUevent hEvent) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUevent_st *ev = live_event(hEvent);
    if (!ev) return CUDA_ERROR_INVALID_HANDLE;
    if ((rc = check_captured_event(ev)) || (rc = sim_capture_check_unsafe())) return rc;
    pthread_mutex_lock(&event_lock);
    uint64_t target = ev->recorded_gen;
    while (ev->done_gen < target) pthread_cond_wait(&event_reached, &event_lock);
    pthread_mutex_unlock(&event_lock);
    sim_pools_release_at_sync();
    return CUDA_SUCCESS;
}
CU_EXPORT(cuEventSynchronize, (CUevent hEvent));

CUresult sim_cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    CUresult rc = sim_require_context();
    if (rc) return rc;
    struct CUevent_st *start = live_event(hStart), *end = live_event(hEnd);
    if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
    if (!start || !end) return CUDA_ERROR_INVALID_HANDLE;
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&event_lock);
    if (start->recorded_gen == 0 || end->recorded_gen == 0) rc = CUDA_ERROR_INVALID_HANDLE;
    else if (start->done_gen < start->recorded_gen || end->done_gen < end->recorded_gen) rc = CUDA_ERROR_NOT_READY;
    else *pMilliseconds = (float)(((double)end->timestamp_ns - (double)start->timestamp_ns) / 1e6);
    pthread_mutex_unlock(&event_lock);
    return rc;
}
CU_EXPORT(cuEventElapsedTime, (float *pMilliseconds, CUevent hStart, CUevent hEnd));
CUresult sim_cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd) {
    return sim_cuEventElapsedTime(pMilliseconds, hStart, hEnd);
}
CU_EXPORT(cuEventElapsedTime_v2, (float *pMilliseconds, CUevent hStart, CUevent hEnd));

CUresult sim_cuEventDestroy_v2(CUevent hEvent) {
    CUresult rc = sim_require_init();
    if (rc) return rc;
    struct CUevent_st *ev = live_event(hEvent);
    if (!ev) return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&event_lock);
    if (ev->destroyed) {
        pthread_mutex_unlock(&event_lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    ev->destroyed = true;
    event_unref_locked(ev); /* queued records still reach it, then it goes */
    pthread_mutex_unlock(&event_lock);
    return CUDA_SUCCESS;
}
CU_EXPORT(cuEventDestroy_v2, (CUevent hEvent));
CUresult sim_cuEventDestroy(CUevent hEvent) { return sim_cuEventDestroy_v2(hEvent); }
CU_EXPORT(cuEventDestroy, (CUevent hEvent));
