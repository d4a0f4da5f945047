/* token_gate: time-slice tokens between this process and tokend.
 *
 * Fast path (every launch, inline): one acquire load of the gate's `open`
 * word (the slice's generation while a token is held, 0 when closed),
 * compare with this thread's generation, decrement this thread's launch
 * countdown, and a relaxed activity mark. Every launch that fails any of
 * these takes the slow path (token_gate.c): block for a token, remember
 * the context for the end-of-slice synchronise, and every `interval`
 * launches record a checkpoint event so at most ~2 checkpoint intervals
 * (~1 ms of GPU time each) are queued past the token.
 *
 * A per-gate "keeper" thread ends slices: at quantum expiry, on a Revoke
 * from tokend, or when no launch happened for a while (idle). A ring of the
 * preemption doorbell (preempt_doorbell.h) closes the gate ahead of the
 * Revoke but keeps the token: a pause of at most GS_GATE_DOORBELL_PAUSE_NS.
 * When tokend expects such a ring (a periodic preemptor), a long kernel
 * (or, while contended, a batch of short ones) that would run into it is
 * not started: the same pause, begun before the
 * ring ("anticipation", at most GS_GATE_ANTICIPATION_PAUSE_NS). At quantum
 * expiry it first asks tokend to renew the slice (RenewToken): when nobody
 * else would be served the slice goes on with the gate open, no drain, no
 * gap. Otherwise it closes the gate, synchronises every context that
 * launched in the slice, and releases the token with the GPU time really
 * used. An idle release keeps the token as a lease while nobody waits: the
 * next burst reopens the gate locally, with no round trip; tokend takes a
 * lease back with a Revoke when someone asks.
 *
 * While another group wants the GPU (tokend's `contended` on the doorbell
 * page), or tokend expects a preemptor and the process runs long work,
 * what is queued past the gate is bounded in GPU time (queue_bound.c):
 * launches pass in batches of at most GS_GATE_CONTENDED_BATCH_US of GPU time
 * (one launch when kernels are longer), and the next batch is submitted
 * when the queued work is within its feed-ahead margin of its estimated
 * end, so the GPU never waits for a submission and a closing gate leaves
 * about one kernel or batch queued (a narrower margin in a process recently
 * preempted by a higher class: its preemptor's latency). A long kernel that would
 * end well past the slice's quantum is not started in it: the slice is
 * renewed or ended first ("wrap-up"). The length used is the launched
 * CUfunction's / CUgraphExec's own estimate (a 64-slot table fed by
 * launches timed alone: a start event just before, the checkpoint after),
 * else the process's GPU time per launch.
 *
 * API for other launch routes (e.g. cuGraphLaunch): call
 * gs_gate_checkpoint_before_launch(g, work) then gs_gate_enter(g, ctx, &ticket)
 * before the launch, and gs_gate_checkpoint(g, stream, ptsz, launches, work) after
 * a successful one when ticket.checkpoint is set (hook/shim.c does this as
 * gs_launch_begin / gs_launch_end for every launch of stream S). */
#ifndef GSLICE_TOKEN_GATE_H
#define GSLICE_TOKEN_GATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "gslice_cuda_abi.h"
#include "preempt_doorbell.h"

struct gs_rpc;

#define GS_GATE_MAX_CONTEXTS 16
#define GS_GATE_MIN_INTERVAL 1
#define GS_GATE_MAX_INTERVAL 4096
/* Checkpoints left outstanding after a launch (older ones are waited for):
 * with intervals of ~1 ms of GPU work, at most ~2 ms is queued when the
 * gate closes, which is what the next holder waits for. */
#define GS_GATE_MAX_OUTSTANDING 1
/* ... or this many for a holder alone on the GPU with short kernels
 * (queue_bound.c): ~8-9 ms queued, so that a stall of the launching thread
 * (a collection, a data loader, a descheduled thread) shorter than that
 * does not idle the GPU, as it does not bare. */
#define GS_GATE_ALONE_OUTSTANDING 8
/* Slots: the outstanding ones, the last one done (the next interval's
 * start) and the one being recorded. */
#define GS_GATE_CHECKPOINTS (GS_GATE_ALONE_OUTSTANDING + 2)
/* Kernels at least this long (GPU time per launch, us) are "long": a
 * launch first waits for the work before it, so a closing gate leaves at
 * most one kernel to drain (a preempting client waits one kernel, not
 * three), at the price of one launch latency per kernel. */
#define GS_GATE_LONG_KERNEL_US 500
/* While another group wants the GPU, the launches let through between two
 * checks are at most this much GPU time (queue_bound.c): short kernels are
 * paced in batches, so what is queued stays ~feed-ahead + one batch. */
#define GS_GATE_CONTENDED_BATCH_US 100
/* Pacing (while another group wants the GPU): submit the next kernel or
 * batch this long before the queued work's estimated end (covers the
 * submission latency) ... */
#define GS_GATE_FEED_AHEAD_US 300
/* ... plus this fraction of a kernel (duration estimates are approximate). */
#define GS_GATE_FEED_AHEAD_FRACTION 4
/* A process preempted by a higher class in the last
 * GS_GATE_PREEMPTION_MEMORY_NS feeds only this far ahead: a preempting
 * waiter then finds at most the running kernel (plus, rarely, one submitted
 * in this margin) ahead of its work, not the running one and the next. */
#define GS_GATE_PREEMPTED_FEED_AHEAD_US 150
#define GS_GATE_PREEMPTION_MEMORY_NS 10000000000ull
/* ... or less, once its paced submissions' lag is measured (from the
 * pacing deadline to the launch queued: the wake-up and the launch call):
 * that lag's mean plus four deviations (as TCP sizes a retransmission
 * timeout from round trips) plus the GPU's pickup, at least ..._MIN_US.
 * What a preemptor finds queued is the running kernel plus, in the last
 * feed-ahead of it, the next: on an H200 beside 4096 matmuls, bursts that
 * found two neighbour units queued took 2.49 ms at the median, one 2.26,
 * none 1.88. */
#define GS_GATE_PREEMPTED_FEED_AHEAD_MIN_US 30
#define GS_GATE_GPU_PICKUP_US 10
/* A pacing sleep's timer slack: the default 50 us would make most
 * wake-ups late by about that much (the application's is put back after). */
#define GS_GATE_PACING_TIMER_SLACK_NS 1000
/* ... and releases a slice handed to another holder this long before its
 * last kernel ends (1 ms otherwise: token_gate.c, HANDOFF_LEAD_NS). */
#define GS_GATE_PREEMPTED_HANDOFF_LEAD_US 300
/* Preemption doorbell (preempt_doorbell.h): a ring pauses the holder's
 * submissions until tokend's Revoke, for at most this long (the Revoke
 * takes ~1 ms; a ring tokend does not act on costs no more) ... */
#define GS_GATE_DOORBELL_PAUSE_NS 3000000ull
/* Head start (gate_head_start.c): a ringer launches before its grant for at
 * most this long (the round trip takes ~0.1-1 ms); later launches wait for
 * the grant. Its provisional slice's quantum until the grant says more. */
#define GS_GATE_HEAD_START_MAX_NS 2000000ull
#define GS_GATE_HEAD_START_QUANTUM_US 100000u
/* Handback (gate_handback.c): a started slice that tokend did not grant
 * within the bound above makes the process ignore handbacks this long (a
 * tenant scribbling handbacks gains one bounded start per period). */
#define GS_GATE_HANDBACK_QUIET_NS 100000000ull
/* ... and rings are ignored this long from a pause's start unless its
 * Revoke comes, so a tenant ringing at will costs a holder at most 3% of
 * its time. */
#define GS_GATE_DOORBELL_QUIET_NS 100000000ull
/* Anticipation: work (a long kernel; a batch of short ones while
 * contended) that would still run when tokend expects a preemptor to ask
 * (its window on the doorbell page; a long kernel may run into it as far
 * as GSLICE_ANTICIPATION_LONG_OVERLAP_PCT allows: gs_anticipation_holds in
 * gate_pause.c) is not started; the
 * pause ends at the ring (a ring pause then), at the window's end, or
 * after this long at most ... */
#define GS_GATE_ANTICIPATION_PAUSE_NS 5000000ull
/* ... and windows are ignored this long from a pause's start unless the
 * ring (or a Revoke) comes (a page scribbled on costs a holder at most
 * about 5% of its time). */
#define GS_GATE_ANTICIPATION_QUIET_NS 100000000ull
/* Idle release: no launch for a whole check period (at least 1 ms, and two
 * kernels) and the work done. A process whose idle gaps have been long
 * (at least GS_GATE_LONG_IDLE_GAP_NS on average, e.g. an inference server
 * between requests) checks every GS_GATE_QUICK_IDLE_PERIOD_NS while another
 * group wants the GPU: it hands the token on ~0.2 ms after its work ends,
 * not ~1-2 ms, and its next launch comes much later than a round trip. */
#define GS_GATE_LONG_IDLE_GAP_NS 4000000ull
#define GS_GATE_QUICK_IDLE_PERIOD_NS 200000ull

enum gs_gate_state {
    GS_GATE_NO_TOKEN = 0,
    GS_GATE_ACQUIRING = 1,
    GS_GATE_HOLDING = 2,
    GS_GATE_RELEASING = 3,
    GS_GATE_UNMETERED = 4,   /* tokend lost and GSLICE_ON_DAEMON_LOSS=open */
    GS_GATE_LEASED = 5,      /* token kept across an idle gap; gate closed until the next launch */
};

typedef struct gs_checkpoint {
    CUevent event;
    CUcontext ctx;
    CUevent start;           /* recorded just before that one launch: its own GPU time */
    bool timed;              /* start was recorded for this checkpoint */
    bool first_of_slice;     /* its launch may have queued behind the previous holder's tail */
    const void *work;        /* the one launch it closes (CUfunction / CUgraphExec), else NULL */
    uint32_t generation;     /* the slice it was recorded in (intervals never span two) */
    uint32_t launches;       /* launches this checkpoint closes */
    bool contiguous;         /* the GPU was busy throughout its interval */
    int state;               /* 0 free, 1 outstanding, 2 last completed */
} gs_checkpoint;

/* Per-function / per-graph GPU time (slow path only, under checkpoint_mu):
 * a direct-mapped table keyed by the CUfunction or CUgraphExec, fed by
 * checkpoints that close exactly one launch, read before a long launch so
 * a kernel or graph that will not fit in the slice is not started in it. */
#define GS_GATE_WORK_ESTIMATES 64
typedef struct gs_work_estimate {
    const void *work;
    uint32_t gpu_us;
    bool solid;   /* measured at least once past the first launch of a slice */
    uint64_t seen_ns;   /* last measured or checked before a launch */
} gs_work_estimate;
/* The longest estimate (what tokend sizes quanta by, and what decides a
 * head start) counts only work seen in this long: a one-off kernel timed
 * while another context held the GPU (a 180 us GEMM's 30 ms on an H200, at
 * start-up) otherwise stayed the process's longest for good, and its group
 * never started at a handback again. */
#define GS_GATE_LONGEST_MEMORY_NS 5000000000ull

/* The process's GPU time per launch (kernel_lengths.c): decayed sums of
 * the GPU time and the launches of recent intervals in which the GPU never
 * ran dry, each launch's weight falling by 1/GS_GATE_LAUNCH_GPU_WINDOW per
 * later launch. A ratio over ~that many launches, not the last interval:
 * a PyTorch matmul on an H100/H200 is a short fill and a long GEMM, and
 * intervals of one launch alternate between the two (7 us, 1800 us). */
#define GS_GATE_LAUNCH_GPU_WINDOW 16
typedef struct gs_launch_gpu_time {
    double gpu_us;
    double launches;
} gs_launch_gpu_time;
/* Paced submissions' lag (queue_bound.c): smoothed mean and mean deviation. */
typedef struct gs_submit_lag {
    uint32_t mean_ns, dev_ns, samples;
} gs_submit_lag;

typedef struct gs_gate_stats {
    uint64_t tokens_acquired;
    uint64_t tokens_released;
    uint64_t idle_releases;
    uint64_t revokes;
    uint64_t checkpoints;
    uint64_t checkpoint_waits;
    uint64_t slow_entries;
    uint64_t used_us;
    uint64_t overrun_us;
    uint64_t daemon_losses;
    uint64_t renewals;
    uint64_t lease_resumes;
    uint64_t leases_at_start;      /* free tokens tokend leased at an attach (gs_gate_lease_at_start) */
    uint64_t wrap_ups;
    uint64_t doorbell_pauses;      /* slices paused by a ring */
    uint64_t doorbell_unanswered;  /* ... that no Revoke followed within the bound */
    uint64_t doorbell_rings;       /* rings this process sent */
    uint64_t anticipation_pauses;  /* launches held back for an expected preemptor */
    uint64_t anticipation_lapses;  /* ... that did not ring before the window's end */
    uint64_t head_starts;          /* bursts started at their ring, before the grant */
    uint64_t head_start_refusals;  /* ... whose ask then failed (the gate closed) */
    uint64_t handbacks_sent;       /* slice ends this process told the next group of (gate_handback.c) */
    uint64_t handback_starts;      /* slices started at another holder's handback, before the grant */
    uint64_t handback_lapses;      /* ... whose grant did not come within the provisional bound */
    uint64_t burst_ends;           /* idle releases found at the application's own synchronisation */
    uint64_t paced_launches;       /* launches held back until its queued work neared its end */
    uint32_t submit_lag_margin_us; /* paced submissions' lag: mean + 4 deviations (0: none measured) */
    uint32_t launch_gpu_us;        /* GPU time per launch, as measured (0: unknown) */
    uint32_t longest_work_us;      /* the longest per-kernel / per-graph estimate */
    int32_t interval;
    int state;
    uint32_t quantum_us;
} gs_gate_stats;

typedef struct gs_gate {
    /* Read on every launch: keep on their own cache line. */
    _Atomic uint32_t open;
    _Atomic uint32_t activity;
    _Atomic int32_t interval;
    char fast_pad[64 - 3 * sizeof(uint32_t)];

    pthread_mutex_t mu;
    pthread_cond_t changed;        /* state changes; app threads wait on it */
    pthread_cond_t keeper_wake;
    int state;
    uint64_t token_id;
    uint32_t quantum_us;
    uint64_t grant_ns;
    uint64_t next_idle_check_ns;
    uint64_t idle_since_ns;        /* an idle release's time, until the next launch */
    uint64_t idle_gap_ns;          /* moving average of idle releases' gaps to the next launch */
    bool revoke_pending;
    bool wrap_up;                  /* a long kernel would not fit: renew or end the slice now */
    bool renew_refused;            /* tokend would not renew this slice: hand over at its end */
    uint64_t doorbell_pause_until_ns; /* a higher class rang: no submissions until the Revoke or then */
    uint32_t doorbell_generation;  /* the paused slice's `open` value, restored if no Revoke comes */
    uint64_t ring_pause_ns;        /* when the current pause became a ring's (its ringer's request was on its way) */
    uint64_t doorbell_quiet_until_ns; /* rings ignored until then (one went unanswered) */
    bool pause_anticipated;        /* the pause began before any ring (tokend's expected window) */
    uint64_t anticipation_quiet_until_ns; /* expected windows ignored until then (one lapsed) */
    bool token_lost;               /* connection dropped: release without RPC */
    uint64_t revoked_before_grant; /* a Revoke that raced ahead of its grant */
    bool stopping;
    bool keeper_running;
    bool service_requested;
    bool lease_wanted;             /* attached: ask tokend for a free token as a lease (keeper) */
    bool head_start;               /* a provisional slice (token 0) runs before its grant: at this
                                    * process's ring (gate_head_start.c) or a handback (gate_handback.c) */
    bool head_start_at_handback;   /* ... opened at another holder's handback, not at a ring */
    bool keeper_ask_wanted;        /* the keeper is to carry this process's AcquireToken */
    bool ask_via_keeper;           /* ... it does (state ACQUIRING): a handback may start a slice meanwhile */
    bool ask_direct;               /* the keeper's last ask failed: the next one from the launching thread,
                                    * which handles a lost daemon */
    uint64_t head_start_ns;        /* when it started */
    uint64_t handback_seen_ns;     /* the newest handback acted on (each once) */
    uint64_t handback_quiet_until_ns; /* handbacks ignored until then (one was not followed by a grant) */
    uint64_t ring_handled_ns;      /* the newest ring acted on (a handback wakes the listener too) */
    uint64_t burst_end_ns;         /* the application synchronised with nothing left: check idle now */
    pthread_t keeper;
    CUcontext contexts[GS_GATE_MAX_CONTEXTS];
    int n_contexts;

    struct gs_rpc *rpc;
    gs_doorbell doorbell;          /* this GPU's preemption doorbell (unmapped: none) */
    const char *label;             /* for log lines: the socket path */
    void (*service)(void *ctx);    /* run by the keeper when kicked (ledger flush) */
    void *service_ctx;

    /* Daemon-loss bookkeeping (under mu). */
    bool loss_logged;
    uint64_t loss_since_ns;
    uint64_t loss_reminder_ns;

    pthread_mutex_t checkpoint_mu;
    _Atomic uint32_t launch_gpu_us;   /* measured GPU time per launch, slow path only */
    bool launch_gpu_from_timed;       /* ... so far only from launches timed alone (checkpoint_mu) */
    gs_launch_gpu_time launch_gpu_time; /* what launch_gpu_us is read from (checkpoint_mu) */
    gs_submit_lag submit_lag;         /* paced submissions' lag (checkpoint_mu) */
    _Atomic uint32_t submit_lag_margin_us; /* ... its margin, read by pacing (0: none measured) */
    _Atomic uint32_t gpu_waiters;     /* threads waiting in a checkpoint for this process's work, or out a pause */
    gs_checkpoint checkpoints[GS_GATE_CHECKPOINTS];
    int queue[GS_GATE_CHECKPOINTS];
    int queue_head, queue_count;
    int last_done;                 /* index of the last completed checkpoint, -1 none */
    uint64_t newest_end_ns;        /* long kernels: estimated end of the newest one queued */
    uint32_t newest_generation;    /* the slice of the newest checkpoint recorded */
    _Atomic uint64_t preempted_ns; /* when a held slice was last revoked by a preemption (or, rarely,
                                    * an expiry; a lease taken back for a client of no higher class is
                                    * not one); 0: never */
    gs_work_estimate estimates[GS_GATE_WORK_ESTIMATES];
    _Atomic uint32_t longest_work_us; /* the longest estimate of work seen lately (reported to tokend) */
    uint64_t longest_seen_ns;         /* when that work was last seen (checkpoint_mu) */

    _Atomic uint64_t n_acquired, n_released, n_idle, n_revokes, n_checkpoints, n_checkpoint_waits,
        n_slow, used_us_total, overrun_us_total, n_losses, n_renewals, n_lease_resumes, n_leases_at_start, n_wrap_ups,
        n_doorbell_pauses, n_doorbell_unanswered, n_anticipation_pauses, n_anticipation_lapses, n_head_starts,
        n_head_start_refusals, n_paced_launches, n_handback_starts, n_handback_lapses, n_burst_ends;
} gs_gate;

/* The gate the inline fast path reads: the only device's gate, or a gate
 * that is always closed (before init, or with several devices, where the
 * slow path looks the gate up per launch), or an always-open one
 * (pass-through). */
extern gs_gate *gs_fast_gate;
/* This thread's view of the gate, both words on one line and reached with
 * one thread-pointer offset: the slice generation its launches last passed
 * the gate in, and how many more launches may pass before the slow path. */
typedef struct gs_tls_slice {
    uint32_t generation;
    int32_t countdown;
} gs_tls_slice_t;
extern __thread gs_tls_slice_t gs_tls_slice __attribute__((tls_model("initial-exec")));

static inline __attribute__((always_inline)) bool gs_gate_fast_enter(void)
{
    gs_gate *g = __atomic_load_n(&gs_fast_gate, __ATOMIC_RELAXED);
    uint32_t gen = atomic_load_explicit(&g->open, memory_order_acquire);
    if (__builtin_expect(gen == gs_tls_slice.generation && --gs_tls_slice.countdown > 0, 1)) {
        /* Only write the shared line when it changes: threads launching
         * concurrently would otherwise bounce it on every launch. */
        if (!atomic_load_explicit(&g->activity, memory_order_relaxed))
            atomic_store_explicit(&g->activity, 1, memory_order_relaxed);
        return true;
    }
    return false;
}

/* What the slow path decided for one launch. */
static inline uint64_t gs_gate_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct gs_launch_ticket {
    gs_gate *gate;       /* NULL: not metered (pass-through) */
    bool checkpoint;     /* record a checkpoint after the launch */
    uint32_t launches;   /* launches the checkpoint closes */
    const void *work;    /* CUfunction / CUgraphExec launched (NULL: a copy or fill) */
    bool wake_keeper;    /* a lease resumed, a head start: wake the keeper once the launch is queued */
    bool wake_listeners; /* a head start rang: wake the doorbell's listeners once the launch is queued */
    bool waited;         /* the launch waited at the gate (a pause, a grant): not a pacing lag */
    uint64_t paced_until_ns; /* the pacing deadline it slept until (0: not paced) */
    uint64_t called_ns;  /* when the launch reached the shim's slow path (a head start's debug line) */
} gs_launch_ticket;

void gs_gate_init(gs_gate *g, struct gs_rpc *rpc, const char *label,
                  void (*service)(void *ctx), void *service_ctx);
/* Blocks until the gate is open for this thread; ctx is the launch's
 * context (remembered for the end-of-slice synchronise). */
void gs_gate_enter(gs_gate *g, CUcontext ctx, gs_launch_ticket *t);
/* The wake-ups the gate put off until the ticket's launch is queued (after
 * it, successful or not, or before its thread waits at the gate): the
 * keeper, to watch a slice resumed on a lease or carry a head start's ask;
 * the doorbell's listeners, for a head start's ring (the holder's launches
 * read it on the page before). Each wake-up may hand this CPU to the woken
 * thread first: on a 2-core machine one delayed a burst's first kernel by
 * 41 us (median). With or without mu: the keeper's predicate was set under
 * mu, so a keeper that read it before is waiting by now. */
void gs_gate_deferred_wakes(gs_gate *g, gs_launch_ticket *t);
/* After a successful launch whose countdown ran out. */
void gs_gate_checkpoint(gs_gate *g, CUstream stream, int ptsz, uint32_t launches, const void *work);
/* Before a checkpointed launch of `work` (NULL: unknown): with long kernels,
 * pace the submission (see above) and wrap the slice up when the kernel or
 * graph would not fit in it (its own estimate, else the process's). */
uint64_t gs_gate_checkpoint_before_launch(gs_gate *g, const void *work);
/* A paced launch was just queued: its lag from the pacing deadline. */
void gs_gate_note_submit_lag(gs_gate *g, uint64_t paced_until_ns);
/* The work key of a device-side copy or fill of `bytes` (kind: GS_WORK_COPY
 * or GS_WORK_FILL), as a launch's CUfunction is a kernel's: its own length
 * estimate, apart from the kernels' (a PyTorch GEMM's 7 us fill is not
 * counted as one of its 1.8 ms kernels, nor the other way round). */
enum { GS_WORK_COPY = 1, GS_WORK_FILL = 2 };
const void *gs_copy_work_key(unsigned kind, size_t bytes);
/* Just before a launch of `work` whose checkpoint closes it alone: record
 * a start event on its stream, so the checkpoint measures that launch's own
 * GPU time (the first kernel of a slice included, whatever ran before). */
void gs_gate_mark_start(CUstream stream, int ptsz);
/* The estimate for `work` in us (0: none yet). */
uint32_t gs_gate_work_estimate_us(gs_gate *g, const void *work);

/* Called from the rpc I/O thread (short, never call gs_rpc_*). */
/* preemption: false for a lease taken back for a client of no higher class
 * (then the gate does not shorten its feed-ahead as after a preemption). */
void gs_gate_on_revoke(gs_gate *g, uint64_t token_id, bool preemption);
void gs_gate_on_connection_lost(gs_gate *g);
/* Attached (again): map this GPU's preemption doorbell and take the group's
 * slot (AttachReply.doorbell_slot; 0: none) and this client's number
 * (AttachReply.doorbell_client); priority: the group's class. */
void gs_gate_attach_doorbell(gs_gate *g, const char *socket_path, uint32_t slot, uint32_t client, int priority);
/* After the application's own synchronisation returned (gate_burst_end.c):
 * a bursty holder with nothing left on the GPU is checked for idleness now. */
void gs_gate_after_app_sync(void);
/* Ask the keeper to run the service hook soon (starts it if needed). */
void gs_gate_kick_service(gs_gate *g);
/* Attached: have the keeper ask tokend for the token as a lease if it is
 * free (AcquireToken lease_if_free), so the first launch resumes it without
 * a round trip. Launches meanwhile wait for the answer, as for any acquire.
 * Called from the rpc I/O thread. */
void gs_gate_lease_at_start(gs_gate *g);

/* Process-wide generation source (unique across gates). */
uint32_t gs_gate_next_generation(void);
/* Pass-through and closed gates for gs_fast_gate. */
extern gs_gate gs_gate_passthrough;
extern gs_gate gs_gate_closed;
#define GS_GATE_PASSTHROUGH_GENERATION 1u

/* fork(): the child holds no token and has no keeper thread. */
void gs_gate_fork_prepare(gs_gate *g);
void gs_gate_fork_parent(gs_gate *g);
void gs_gate_fork_child(gs_gate *g);
/* Process exit: stop the keeper without calling the driver (it may be
 * torn down already); Detach gives the token back. */
void gs_gate_stop(gs_gate *g);

void gs_gate_get_stats(gs_gate *g, gs_gate_stats *out);

#endif
