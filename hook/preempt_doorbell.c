/* preempt_doorbell: mapping the page, ringing it, and the listener thread.
 * See preempt_doorbell.h for the protocol. Slow paths only. */
#define _GNU_SOURCE
#include "preempt_doorbell.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Shared (not FUTEX_PRIVATE): the word lives in a file mapping every
 * process on the GPU shares. */
static void futex_wait(_Atomic uint32_t *word, uint32_t seen)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, seen, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static gs_doorbell_page *map_page(const char *socket_path)
{
    char path[600];
    const char *slash = strrchr(socket_path, '/');
    int dir_len = slash ? (int)(slash - socket_path) : 1;
    snprintf(path, sizeof path, "%.*s/%s", dir_len, slash ? socket_path : ".", GS_DOORBELL_FILE_NAME);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        GS_INFO("preemption doorbell %s not usable (%s); preemptions wait for tokend's Revoke", path,
                strerror(errno));
        return NULL;
    }
    struct stat st;
    void *page = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)GS_DOORBELL_SIZE)
        page = mmap(NULL, GS_DOORBELL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (page == MAP_FAILED) {
        GS_INFO("preemption doorbell %s not usable (size or mapping: %s); preemptions wait for tokend's Revoke",
                path, strerror(errno));
        return NULL;
    }
    gs_doorbell_page *p = page;
    if (p->magic != GS_DOORBELL_MAGIC || p->version != GS_DOORBELL_VERSION ||
        p->slots > GS_DOORBELL_SLOTS_BEFORE_HANDBACK) {
        GS_INFO("preemption doorbell %s has magic %#x version %u (this shim speaks %#x version %u); not used",
                path, p->magic, p->version, GS_DOORBELL_MAGIC, GS_DOORBELL_VERSION);
        munmap(page, GS_DOORBELL_SIZE);
        return NULL;
    }
    GS_DEBUG("preemption doorbell %s mapped", path);
    return p;
}

static void *listener_main(void *arg)
{
    gs_doorbell *d = arg;
    gs_doorbell_page *p = atomic_load(&d->page);
    uint32_t seen = atomic_load_explicit(&p->ring_seq, memory_order_acquire);
    for (;;) {
        futex_wait(&p->ring_seq, seen);
        uint32_t now_seq = atomic_load_explicit(&p->ring_seq, memory_order_acquire);
        if (now_seq == seen)
            continue;   /* spurious wake-up or EINTR */
        /* Rings that arrive while one is handled are folded into it: only
         * the latest matters (they all say "stop submitting"). */
        seen = now_seq;
        d->on_ring(d->ctx);
    }
    return NULL;
}

bool gs_doorbell_attach(gs_doorbell *d, const char *socket_path, uint32_t slot, uint32_t client, int priority,
                        void (*on_ring)(void *ctx), void *ctx)
{
    atomic_store(&d->slot, slot <= GS_DOORBELL_SLOTS ? slot : 0);
    atomic_store(&d->client, client);
    atomic_store(&d->priority, priority);
    if (slot == 0)
        return atomic_load(&d->page) != NULL;
    if (!atomic_load(&d->page)) {
        gs_doorbell_page *p = map_page(socket_path);
        if (!p)
            return false;
        atomic_store(&d->page, p);
    }
    if (d->listener_pid == getpid())
        return true;
    /* Set before the listener starts, never after: it reads them unlocked. */
    d->on_ring = on_ring;
    d->ctx = ctx;
    /* One listener per process (a forked child starts its own); it never
     * takes the application's signals and lives until exit. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t thread;
    int rc = pthread_create(&thread, NULL, listener_main, d);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        GS_WARN("cannot start the preemption doorbell listener (error %d); preemptions wait for tokend's Revoke",
                rc);
        return false;
    }
    pthread_detach(thread);
    d->listener_pid = getpid();
    return true;
}

bool gs_doorbell_ring_if_preempting(gs_doorbell *d, bool wake)
{
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    uint32_t slot = atomic_load_explicit(&d->slot, memory_order_relaxed);
    if (!p || slot == 0)
        return false;
    uint32_t holder = atomic_load_explicit(&p->holder_slot, memory_order_acquire);
    if (holder == 0 || holder == slot || !atomic_load_explicit(&p->may_preempt[slot - 1], memory_order_relaxed))
        return false;
    atomic_store_explicit(&p->ring_slot, slot, memory_order_relaxed);
    atomic_store_explicit(&p->ring_priority, (uint32_t)atomic_load_explicit(&d->priority, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&p->ring_ns, monotonic_ns(), memory_order_relaxed);
    atomic_fetch_add_explicit(&p->ring_seq, 1, memory_order_release);
    if (wake)
        futex_wake_all(&p->ring_seq);
    atomic_fetch_add_explicit(&d->rings_sent, 1, memory_order_relaxed);
    return true;
}

void gs_doorbell_wake_listeners(gs_doorbell *d)
{
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    if (p)
        futex_wake_all(&p->ring_seq);
}

/* The page and the last ring, when that ring came from another group within
 * within_ns of now_ns (NULL otherwise). */
static gs_doorbell_page *fresh_ring_from_another_group(gs_doorbell *d, uint64_t now_ns, uint64_t within_ns,
                                                       uint32_t *ringer)
{
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    uint32_t slot = atomic_load_explicit(&d->slot, memory_order_relaxed);
    if (!p || slot == 0)
        return NULL;
    *ringer = atomic_load_explicit(&p->ring_slot, memory_order_relaxed);
    uint64_t rang = atomic_load_explicit(&p->ring_ns, memory_order_relaxed);
    if (*ringer == 0 || *ringer > GS_DOORBELL_SLOTS || *ringer == slot || rang > now_ns || now_ns - rang > within_ns)
        return NULL;
    return p;
}

bool gs_doorbell_ring_applies(gs_doorbell *d, uint64_t now_ns)
{
    uint32_t ringer;
    gs_doorbell_page *p = fresh_ring_from_another_group(d, now_ns, GS_DOORBELL_RING_FRESH_NS, &ringer);
    return p && atomic_load_explicit(&p->holder_slot, memory_order_acquire) == atomic_load(&d->slot) &&
           atomic_load_explicit(&p->may_preempt[ringer - 1], memory_order_relaxed);
}

bool gs_doorbell_outranking_ring_within(gs_doorbell *d, uint64_t now_ns, uint64_t within_ns)
{
    uint32_t ringer;
    gs_doorbell_page *p = fresh_ring_from_another_group(d, now_ns, within_ns, &ringer);
    if (!p || (int)atomic_load_explicit(&p->ring_priority, memory_order_relaxed) <=
                  atomic_load_explicit(&d->priority, memory_order_relaxed))
        return false;
    /* The ringer was served since: it handed the token back after its ring
     * (a burst shorter than the window), so nobody is on the way. */
    return !(p->slots <= GS_DOORBELL_SLOTS && atomic_load_explicit(&p->handback_slot, memory_order_relaxed) == ringer &&
             atomic_load_explicit(&p->handback_ns, memory_order_relaxed) >=
                 atomic_load_explicit(&p->ring_ns, memory_order_relaxed));
}

bool gs_doorbell_grants_at_once(gs_doorbell *d)
{
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    return p && atomic_load_explicit(&p->grants_at_once, memory_order_relaxed) == 1;
}

bool gs_doorbell_contended(gs_doorbell *d)
{
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    return !p || atomic_load_explicit(&d->slot, memory_order_relaxed) == 0 ||
           atomic_load_explicit(&p->contended, memory_order_relaxed) != 0;
}

bool gs_doorbell_holder_alone(gs_doorbell *d)
{
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    uint32_t slot = atomic_load_explicit(&d->slot, memory_order_relaxed);
    /* (A daemon older than the handback uses that region as flags: `slots` says so.) */
    return p && slot && p->slots <= GS_DOORBELL_SLOTS &&
           atomic_load_explicit(&p->contended, memory_order_relaxed) == 0 &&
           atomic_load_explicit(&p->holder_slot, memory_order_relaxed) == slot &&
           atomic_load_explicit(&p->holder_alone, memory_order_relaxed) == 1;
}

bool gs_doorbell_queue_bounded(gs_doorbell *d)
{
    if (!gs_doorbell_contended(d))
        return false;
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    uint32_t slot = atomic_load_explicit(&d->slot, memory_order_relaxed);
    return !(p && slot && atomic_load_explicit(&p->holder_slot, memory_order_relaxed) == slot &&
             atomic_load_explicit(&p->holder_outranks, memory_order_relaxed) == 1);
}

bool gs_doorbell_expected_preemption(gs_doorbell *d, uint64_t now_ns, bool started_at_handback, uint64_t *start_ns,
                                     uint64_t *end_ns)
{
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    uint32_t slot = atomic_load_explicit(&d->slot, memory_order_relaxed);
    if (!p || slot == 0)
        return false;
    /* The window is the holder's: this group's, or, in a slice started at
     * a handback before tokend heard the release, the group that handed
     * back (a 2 ms kernel started there without looking ran into the
     * bursts it was due to keep out of: burst p50 +0.8 ms). */
    uint32_t holder = atomic_load_explicit(&p->holder_slot, memory_order_relaxed);
    if (holder != slot &&
        !(started_at_handback && p->slots <= GS_DOORBELL_SLOTS && holder != 0 &&
          atomic_load_explicit(&p->handback_slot, memory_order_relaxed) == holder))
        return false;
    uint64_t end = atomic_load_explicit(&p->expected_end_ns, memory_order_relaxed);
    uint64_t start = atomic_load_explicit(&p->expected_start_ns, memory_order_relaxed);
    if (end == 0 || end <= now_ns || start > end)
        return false;
    *start_ns = start;
    *end_ns = end;
    return true;
}

/* The page, when it carries the handback (its daemon keeps the last 64
 * bytes out of the flags) and this process has a slot. */
static gs_doorbell_page *handback_page(gs_doorbell *d, uint32_t *slot)
{
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    *slot = atomic_load_explicit(&d->slot, memory_order_relaxed);
    if (!p || *slot == 0 || p->slots > GS_DOORBELL_SLOTS)
        return NULL;
    return p;
}

/* This process's group holds the token by tokend's page, and tokend names
 * a next group: a handback would be heard. */
static gs_doorbell_page *page_to_hand_back(gs_doorbell *d, uint32_t *slot)
{
    gs_doorbell_page *p = handback_page(d, slot);
    if (!p || atomic_load_explicit(&p->holder_slot, memory_order_acquire) != *slot ||
        atomic_load_explicit(&p->next_slot, memory_order_relaxed) == 0)
        return NULL;
    return p;
}

bool gs_doorbell_may_hand_back(gs_doorbell *d)
{
    uint32_t slot;
    return page_to_hand_back(d, &slot) != NULL;
}

bool gs_doorbell_hand_back(gs_doorbell *d, uint64_t free_at_ns)
{
    uint32_t slot;
    gs_doorbell_page *p = page_to_hand_back(d, &slot);
    if (!p)
        return false;
    uint64_t now = monotonic_ns();
    atomic_store_explicit(&p->handback_slot, slot, memory_order_relaxed);
    atomic_store_explicit(&p->handback_free_ns, free_at_ns > now ? free_at_ns : now, memory_order_relaxed);
    atomic_store_explicit(&p->handback_ns, now, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->ring_seq, 1, memory_order_release);
    futex_wake_all(&p->ring_seq);
    atomic_fetch_add_explicit(&d->handbacks_sent, 1, memory_order_relaxed);
    return true;
}

bool gs_doorbell_handed_to_this_group(gs_doorbell *d, uint64_t now_ns, uint64_t *seen_ns, uint64_t *free_at_ns)
{
    uint32_t slot;
    gs_doorbell_page *p = handback_page(d, &slot);
    if (!p)
        return false;
    uint64_t at = atomic_load_explicit(&p->handback_ns, memory_order_relaxed);
    if (at == 0 || at <= *seen_ns || at > now_ns || now_ns - at > GS_DOORBELL_HANDBACK_FRESH_NS)
        return false;
    uint32_t from = atomic_load_explicit(&p->handback_slot, memory_order_relaxed);
    uint32_t holder = atomic_load_explicit(&p->holder_slot, memory_order_acquire);
    if (from == 0 || (holder != from && holder != slot) ||
        atomic_load_explicit(&p->next_slot, memory_order_relaxed) != slot)
        return false;
    uint32_t named = atomic_load_explicit(&p->next_client, memory_order_relaxed);
    if (named != 0 && named != atomic_load_explicit(&d->client, memory_order_relaxed))
        return false;
    *seen_ns = at;
    uint64_t free_at = atomic_load_explicit(&p->handback_free_ns, memory_order_relaxed);
    /* A scribbled time: the handback's own, at most the freshness bound later. */
    *free_at_ns = free_at < at ? at : free_at - at > GS_DOORBELL_HANDBACK_FRESH_NS ? at : free_at;
    return true;
}

bool gs_doorbell_handback_may_come(gs_doorbell *d)
{
    uint32_t slot;
    gs_doorbell_page *p = handback_page(d, &slot);
    if (!p)
        return false;
    return atomic_load_explicit(&p->holder_slot, memory_order_acquire) != 0;
}

uint64_t gs_doorbell_last_ring_ns(gs_doorbell *d)
{
    gs_doorbell_page *p = atomic_load_explicit(&d->page, memory_order_acquire);
    return p ? atomic_load_explicit(&p->ring_ns, memory_order_relaxed) : 0;
}
