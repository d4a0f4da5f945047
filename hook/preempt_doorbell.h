/* preempt_doorbell: a per-GPU shared page that lets a waiting client of a
 * higher class tell the token's holder to stop submitting, before tokend's
 * Revoke gets there.
 *
 * Why: a preemption's Revoke takes about 1 ms through tokend (the request's
 * gRPC call, the scheduler, the holder's Control stream). Meanwhile the
 * holder keeps its GPU queue fed, and on a GPU that runs one kernel at a
 * time the preemptor then waits for that millisecond plus the kernel
 * running when the Revoke lands, often plus the next one. With the
 * doorbell the holder stops within tens of microseconds of the request, so
 * the preemptor waits for the larger of the kernel running and its own
 * grant, not their sum.
 *
 * The page (GS_DOORBELL_FILE_NAME beside client.sock, made by tokend,
 * layout below, mirrored in tokend/preempt_doorbell.py):
 *   - tokend writes `holder_slot` (the group slot of the token's holder,
 *     slot + 1; 0: none), `contended` (another group waits or could preempt
 *     the holder: a holder alone need not pace its long kernels) and, per
 *     group slot, `may_preempt[slot]`: a client of that group asking now
 *     would preempt the holder (recomputed at every scheduler event);
 *   - a client about to ask for a token whose own flag is set rings:
 *     writes its slot + 1, its class and the time, bumps `ring_seq` and
 *     wakes every process waiting on it (a shared futex);
 *   - each process's listener thread wakes on a ring; when it holds the
 *     token, its group is `holder_slot` and the ringer's flag is set, the
 *     gate pauses (token_gate.c) until tokend's Revoke or a short bound;
 *   - a process granted a token just after a ring of a higher class than
 *     its own pauses the same way: the ringer's request was on its way, and
 *     tokend hands this token over as soon as it arrives;
 *   - when a group that would preempt the holder asks at regular periods,
 *     tokend also writes the window in which it expects that group's next
 *     request (`expected_start_ns`, `expected_end_ns`; padding in pages of
 *     older daemons, so zero: nothing expected). The holder then starts no
 *     long kernel that would still run at the window's start, pausing until
 *     the ring or the window's end (bounded, token_gate.h): on a GPU that
 *     runs one kernel at a time, the preemptor would otherwise wait for
 *     that kernel's rest, half a kernel on average;
 *   - tokend writes `next_slot`, the group it would grant if the holder
 *     released now, and `next_client`, which of its waiters; a holder
 *     whose slice ends (idle, or at its handover point) hands back: writes
 *     its slot and when its work ends, bumps `ring_seq` and wakes the
 *     listeners, then sends its ReleaseToken. The waiting process named
 *     next starts on a provisional slice at once (gate_handback.c), not
 *     after that round trip and its grant's (~0.5-1 ms of idle GPU at
 *     every handover);
 *   - tokend writes `holder_alone` when the holder is the only client
 *     attached to the GPU and its group has no limit: nobody can wait
 *     behind its queue, so it keeps more queued (queue_bound.c), and a
 *     client attaching clears it before that client's first launch.
 * Nothing here grants anything: the waiter still waits for tokend's grant,
 * and a pause is charged to the holder like any part of its slice. A ring
 * tokend does not follow with a Revoke costs the holder at most the pause
 * bound, after which it ignores rings for a while (token_gate.h): a tenant
 * that rings at will (it can write the page) slows others by a bounded
 * fraction and gains nothing. A forged handback starts only the group
 * tokend named next, for a bounded provisional slice, then that process
 * ignores handbacks for a while. */
#ifndef GSLICE_PREEMPT_DOORBELL_H
#define GSLICE_PREEMPT_DOORBELL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define GS_DOORBELL_FILE_NAME "client.doorbell"
#define GS_DOORBELL_MAGIC 0x42445347u /* "GSDB", little-endian */
#define GS_DOORBELL_VERSION 1u
#define GS_DOORBELL_SIZE 4096u
#define GS_DOORBELL_FLAGS_OFFSET 64u
/* The page's last 64 bytes carry the handback (below). A daemon older than
 * it uses them as flags for slots past 3968 (it says `slots` 4032): the
 * page is still used, without handbacks. */
#define GS_DOORBELL_HANDBACK_OFFSET 4032u
#define GS_DOORBELL_SLOTS (GS_DOORBELL_HANDBACK_OFFSET - GS_DOORBELL_FLAGS_OFFSET)
#define GS_DOORBELL_SLOTS_BEFORE_HANDBACK (GS_DOORBELL_SIZE - GS_DOORBELL_FLAGS_OFFSET)
/* A ring older than this when its listener gets to it is ignored. */
#define GS_DOORBELL_RING_FRESH_NS 5000000ull
/* A handback older than this when its listener gets to it is ignored (the
 * ReleaseToken behind it has reached tokend by then). */
#define GS_DOORBELL_HANDBACK_FRESH_NS 2000000ull

typedef struct gs_doorbell_page {
    uint32_t magic;                 /* 0  GS_DOORBELL_MAGIC */
    uint32_t version;               /* 4  GS_DOORBELL_VERSION */
    uint32_t slots;                 /* 8  flags in use: GS_DOORBELL_SLOTS */
    _Atomic uint32_t holder_outranks; /* 12 tokend: 1 when every group waiting is of a lower class than the
                                     *    holder's and no preemptor is flagged or expected: the holder need
                                     *    not bound its queue (0 from a daemon older than the field) */
    _Atomic uint32_t ring_seq;      /* 16 bumped by each ring: the futex word */
    _Atomic uint32_t ring_slot;     /* 20 the last ringer's group slot + 1 */
    _Atomic uint64_t ring_ns;       /* 24 when it rang (CLOCK_MONOTONIC) */
    _Atomic uint32_t holder_slot;   /* 32 tokend: the holder's group slot + 1, 0: none */
    _Atomic uint32_t ring_priority; /* 36 the last ringer's class (gslice.v1.Priority) */
    _Atomic uint32_t contended;     /* 40 tokend: another group waits for the token or could preempt
                                     *    its holder (0: the holder is alone) */
    _Atomic uint32_t grants_at_once; /* 44 tokend: 1 when it grants a preemptor's ask on arrival (at-once
                                     *    handover), which a head start relies on; 0 (at-release, or a daemon
                                     *    older than the field: padding): no head start */
    _Atomic uint64_t expected_start_ns; /* 48 tokend: a preemptor of the holder is expected to ask */
    _Atomic uint64_t expected_end_ns;   /* 56    in [start, end] (CLOCK_MONOTONIC; 0: none expected) */
    _Atomic uint8_t may_preempt[GS_DOORBELL_SLOTS]; /* 64 tokend: per group slot */
    _Atomic uint32_t next_slot;     /* 4032 tokend: the group slot + 1 it grants if the holder releases now
                                     *      (0: none, or not known) */
    _Atomic uint32_t handback_slot; /* 4036 the last holder to hand back: its group slot + 1 */
    _Atomic uint64_t handback_ns;   /* 4040 when it handed back (CLOCK_MONOTONIC) */
    _Atomic uint64_t handback_free_ns; /* 4048 when its queued work ends (>= handback_ns) */
    _Atomic uint32_t next_client;   /* 4056 tokend: which waiter of next_slot's group it grants (its
                                     *      AttachReply.doorbell_client; 0: any, as from an older daemon) */
    _Atomic uint32_t holder_alone;  /* 4060 tokend: 1 when the holder is the only client attached to the GPU
                                     *      and its group has no limit: nobody can wait behind what it
                                     *      queues, so it may queue deeper (queue_bound.c); 0 from an older
                                     *      daemon */
    uint8_t reserved[32];           /* 4064 zeros */
} gs_doorbell_page;

_Static_assert(sizeof(gs_doorbell_page) == GS_DOORBELL_SIZE, "doorbell page layout");

typedef struct gs_doorbell {
    _Atomic(gs_doorbell_page *) page;   /* NULL: no doorbell (old tokend, not writable) */
    _Atomic uint32_t slot;              /* this process's group slot + 1 (from Attach); 0: none */
    _Atomic uint32_t client;            /* its number for next_client (from Attach); 0: none */
    _Atomic int priority;               /* its group's class (from Attach) */
    void (*on_ring)(void *ctx);         /* run on the listener thread for every ring */
    void *ctx;
    pid_t listener_pid;                 /* the process that started the listener (fork) */
    _Atomic uint64_t rings_sent;
    _Atomic uint64_t handbacks_sent;
} gs_doorbell;

/* Map the doorbell beside socket_path (once per process; later calls only
 * update the slot, e.g. after a reconnect) and start the listener thread.
 * slot: AttachReply.doorbell_slot (0: tokend offers none: nothing is
 * mapped); client: AttachReply.doorbell_client. Returns whether the
 * doorbell is usable. */
bool gs_doorbell_attach(gs_doorbell *d, const char *socket_path, uint32_t slot, uint32_t client, int priority,
                        void (*on_ring)(void *ctx), void *ctx);
/* About to ask for a token: ring when tokend says this group would preempt
 * the holder. Returns whether it rang. wake: also wake the listeners now;
 * a ringer that launches at once (a head start) wakes them after its
 * launch (gs_doorbell_wake_listeners): the wake-up cost its first launch
 * 40 us at the median and 110 at p90 on a loaded 2-core machine, and a
 * holder's launches read the ring on the page without it
 * (gs_gate_heed_ring_locked). */
bool gs_doorbell_ring_if_preempting(gs_doorbell *d, bool wake);
/* Wake every listener (after a ring made without waking them). */
void gs_doorbell_wake_listeners(gs_doorbell *d);
/* On the listener thread: does the last ring stop this process's slice?
 * (It holds the token, its group is the holder tokend published, the
 * ringer's group may preempt it, and the ring is fresh.) */
bool gs_doorbell_ring_applies(gs_doorbell *d, uint64_t now_ns);
/* Just granted a token: did a client of a higher class than this one ring
 * in the last within_ns? (Its request may be on its way to tokend, which
 * then takes this token back at once; tokend's flags cannot say, as they
 * are cleared once that request arrives.) */
bool gs_doorbell_outranking_ring_within(gs_doorbell *d, uint64_t now_ns, uint64_t within_ns);
/* Handback (gate_handback.c): the holder, its slice ending (idle, or at
 * its handover point), tells tokend's `next_slot` group at once, before its
 * ReleaseToken's round trip: writes its slot, the time and when its queued
 * work ends, bumps `ring_seq` and wakes the listeners. Returns whether it
 * did (a page that carries the handback, this group the holder, a next). */
bool gs_doorbell_hand_back(gs_doorbell *d, uint64_t free_at_ns);
/* Would gs_doorbell_hand_back be heard now (the same checks, nothing
 * written)? */
bool gs_doorbell_may_hand_back(gs_doorbell *d);
/* On the listener thread: is there a fresh handback, newer than *seen_ns,
 * from the holder tokend still names (or to this group, granted
 * meanwhile), to this process's group as tokend's next, and to this
 * process when tokend names the waiter (the others of its group wait for
 * their grant: all starting at once, they time-sliced the GPU among
 * themselves until the grant picked one)? Then *seen_ns is
 * moved past it and *free_at_ns says when the GPU is free of its work. */
bool gs_doorbell_handed_to_this_group(gs_doorbell *d, uint64_t now_ns, uint64_t *seen_ns, uint64_t *free_at_ns);
/* Does the page carry the handback, and does someone hold the token (so an
 * ask now waits, and may be answered by a handback first)? */
bool gs_doorbell_handback_may_come(gs_doorbell *d);
/* The last ring's time (CLOCK_MONOTONIC): the listener handles each ring
 * once (a handback bumps the same futex word). */
uint64_t gs_doorbell_last_ring_ns(gs_doorbell *d);
/* Does tokend grant a preemptor's ask on arrival (at-once handover)? */
bool gs_doorbell_grants_at_once(gs_doorbell *d);
/* Does anyone else want the GPU now (tokend's `contended`)? true without a
 * doorbell (unknown). */
bool gs_doorbell_contended(gs_doorbell *d);
/* Is this process the token's holder, alone on the GPU (tokend's
 * `holder_alone`)? */
bool gs_doorbell_holder_alone(gs_doorbell *d);
/* Must this process, the holder, bound what it queues (queue_bound.c)?
 * Contended, unless tokend says it outranks every group waiting (then its
 * queue delays nobody it would not delay anyway). */
bool gs_doorbell_queue_bounded(gs_doorbell *d);
/* The window in which tokend expects a preemptor of this process's group
 * (the holder's; or, started_at_handback, of the holder that handed back
 * to it) to ask: true and [*start_ns, *end_ns] when there is one that has
 * not ended at now_ns. */
bool gs_doorbell_expected_preemption(gs_doorbell *d, uint64_t now_ns, bool started_at_handback, uint64_t *start_ns,
                                     uint64_t *end_ns);

#endif
