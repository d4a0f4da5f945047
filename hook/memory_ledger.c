/* memory_ledger: reservations against tokend + the pointer -> size map. */
#define _GNU_SOURCE
#include "memory_ledger.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "rpc_client.h"
#include "token_gate.h"

enum { RESERVE_WAIT_MS = 5000, RELEASE_WAIT_MS = 5000, VIEW_WAIT_MS = 2000 };
/* cuMemGetInfo may be polled; a few ms of staleness is harmless. */
static const uint64_t VIEW_CACHE_NS = 5000000ull;

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- bytes in flight: a driver call under way in this thread ---- */

/* Between a reservation and its allocation's return (or an entry taken and
 * its free's return) the ledger holds bytes NVML may not show yet (or may
 * no longer show): the overhead reconciliation must not read them as the
 * context's memory shrinking. One mark per thread: the thread is inside
 * that driver call until it calls into the ledger again. */
static __thread gs_ledger_account *flight_account;
static __thread uint64_t flight_bytes;
static __thread bool flight_key_set;
static pthread_key_t flight_key;
static pthread_once_t flight_once = PTHREAD_ONCE_INIT;

static void flight_settle(void)
{
    gs_ledger_account *a = flight_account;
    if (!a)
        return;
    flight_account = NULL;
    pthread_mutex_lock(&a->mu);
    a->in_flight = a->in_flight > flight_bytes ? a->in_flight - flight_bytes : 0;
    pthread_mutex_unlock(&a->mu);
    flight_bytes = 0;
}

/* A thread that ends inside nothing: its last mark goes with it. */
static void flight_thread_exit(void *unused)
{
    (void)unused;
    flight_settle();
}

static void flight_key_create(void) { pthread_key_create(&flight_key, flight_thread_exit); }

static void flight_mark(gs_ledger_account *a, uint64_t bytes)
{
    flight_settle();
    if (!a || !bytes)
        return;
    if (!flight_key_set) {
        pthread_once(&flight_once, flight_key_create);
        pthread_setspecific(flight_key, &flight_key_set);   /* non-NULL: the destructor runs */
        flight_key_set = true;
    }
    pthread_mutex_lock(&a->mu);
    a->in_flight += bytes;
    pthread_mutex_unlock(&a->mu);
    flight_account = a;
    flight_bytes = bytes;
}

void gs_ledger_call_returned(void) { flight_settle(); }

/* ---- the map: open addressing, linear probing, backward-shift delete ---- */

typedef struct map_entry {
    uint64_t key;
    uint64_t bytes;
    gs_ledger_account *account;
    int kind;          /* 0: empty */
    bool reserved;
    void *ctx;
    uint64_t link;     /* VMM mapping: its handle */
    uint32_t refs;     /* VMM handle: references held */
    uint32_t maps;     /* VMM handle: live mappings */
} map_entry;

static pthread_mutex_t map_mu = PTHREAD_MUTEX_INITIALIZER;
static map_entry *map_slots;
static size_t map_capacity;    /* power of two */
static size_t map_count;

static size_t map_hash(int kind, uint64_t key)
{
    uint64_t h = (key ^ ((uint64_t)kind << 59)) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29));
}

static map_entry *map_find_locked(int kind, uint64_t key)
{
    if (!map_capacity)
        return NULL;
    size_t mask = map_capacity - 1;
    for (size_t i = map_hash(kind, key) & mask;; i = (i + 1) & mask) {
        map_entry *e = &map_slots[i];
        if (!e->kind)
            return NULL;
        if (e->kind == kind && e->key == key)
            return e;
    }
}

static bool map_grow_locked(void)
{
    size_t cap = map_capacity ? map_capacity * 2 : 1024;
    map_entry *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    for (size_t j = 0; j < map_capacity; j++) {
        map_entry *e = &map_slots[j];
        if (!e->kind)
            continue;
        size_t i = map_hash(e->kind, e->key) & (cap - 1);
        while (slots[i].kind)
            i = (i + 1) & (cap - 1);
        slots[i] = *e;
    }
    free(map_slots);
    map_slots = slots;
    map_capacity = cap;
    return true;
}

/* A context's reserve is counted on its account while its entry is in the map. */
static void count_context_reserve(const map_entry *e, bool added)
{
    if (e->kind != GS_ALLOC_CONTEXT || !e->reserved || !e->account)
        return;
    if (added)
        __atomic_add_fetch(&e->account->context_reserves, e->bytes, __ATOMIC_RELAXED);
    else
        __atomic_sub_fetch(&e->account->context_reserves, e->bytes, __ATOMIC_RELAXED);
}

static void map_remove_locked(map_entry *e)
{
    count_context_reserve(e, false);
    size_t mask = map_capacity - 1;
    size_t hole = (size_t)(e - map_slots);
    size_t i = hole;
    for (;;) {
        i = (i + 1) & mask;
        if (!map_slots[i].kind)
            break;
        size_t home = map_hash(map_slots[i].kind, map_slots[i].key) & mask;
        /* Move i into the hole unless its home lies cyclically in (hole, i]. */
        bool stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (!stays) {
            map_slots[hole] = map_slots[i];
            hole = i;
        }
    }
    memset(&map_slots[hole], 0, sizeof map_slots[hole]);
    map_count--;
}

/* Insert a new entry; false when out of host memory. map_mu held. */
static bool map_insert_locked(const map_entry *entry)
{
    if ((map_count + 1) * 4 > map_capacity * 3 && !map_grow_locked())
        return false;
    size_t mask = map_capacity - 1;
    size_t i = map_hash(entry->kind, entry->key) & mask;
    while (map_slots[i].kind)
        i = (i + 1) & mask;
    map_slots[i] = *entry;
    map_count++;
    count_context_reserve(entry, true);
    return true;
}

void gs_ledger_track(int kind, uint64_t key, const gs_ledger_entry *entry)
{
    flight_settle();
    gs_ledger_entry replaced = {0};
    bool had = false;
    pthread_mutex_lock(&map_mu);
    map_entry *e = map_find_locked(kind, key);
    if (e) {
        /* The driver handed out a key we still track: the old allocation
         * is gone (freed by something we did not see). The new one replaces
         * it; the old reservation is given back. */
        replaced = (gs_ledger_entry){e->account, e->bytes, e->reserved, e->ctx};
        had = true;
        map_remove_locked(e);
    }
    map_entry fresh = {.key = key, .bytes = entry->bytes, .account = entry->account, .kind = kind,
                       .reserved = entry->reserved, .ctx = entry->ctx, .refs = kind == GS_ALLOC_VMM_HANDLE};
    bool ok = map_insert_locked(&fresh);
    pthread_mutex_unlock(&map_mu);
    if (had) {
        GS_WARN("allocation %#llx reported again by the driver (%llu bytes); it replaces the old entry of %llu bytes",
                (unsigned long long)key, (unsigned long long)entry->bytes, (unsigned long long)replaced.bytes);
        if (replaced.reserved && replaced.account)
            gs_ledger_give_back(replaced.account, replaced.bytes);
    }
    if (!ok)
        GS_ERROR("out of host memory tracking allocation %#llx; its free will not give back %llu bytes",
                 (unsigned long long)key, (unsigned long long)entry->bytes);
}

bool gs_ledger_lookup(int kind, uint64_t key, gs_ledger_account **a, uint64_t *bytes)
{
    pthread_mutex_lock(&map_mu);
    map_entry *e = map_find_locked(kind, key);
    if (e) {
        if (a) *a = e->account;
        if (bytes) *bytes = e->bytes;
    }
    pthread_mutex_unlock(&map_mu);
    return e != NULL;
}

bool gs_ledger_take(int kind, uint64_t key, gs_ledger_entry *out)
{
    flight_settle();
    pthread_mutex_lock(&map_mu);
    map_entry *e = map_find_locked(kind, key);
    if (e) {
        *out = (gs_ledger_entry){e->account, e->bytes, e->reserved, e->ctx};
        map_remove_locked(e);
    }
    pthread_mutex_unlock(&map_mu);
    if (e && out->reserved)
        flight_mark(out->account, out->bytes);   /* its free is next */
    return e != NULL;
}

/* Remove every entry the predicate selects and give reservations back. The
 * map may move entries while removing, so restart the scan after each. */
static uint64_t remove_matching(bool (*match)(const map_entry *e, const void *arg), const void *arg)
{
    uint64_t total = 0;
    for (;;) {
        gs_ledger_entry gone = {0};
        bool found = false;
        pthread_mutex_lock(&map_mu);
        for (size_t i = 0; i < map_capacity && !found; i++) {
            map_entry *e = &map_slots[i];
            if (e->kind && match(e, arg)) {
                gone = (gs_ledger_entry){e->account, e->bytes, e->reserved, e->ctx};
                found = true;
                map_remove_locked(e);
            }
        }
        pthread_mutex_unlock(&map_mu);
        if (!found)
            return total;
        if (gone.reserved && gone.account) {
            gs_ledger_give_back(gone.account, gone.bytes);
            total += gone.bytes;
        }
    }
}

static bool in_context(const map_entry *e, const void *ctx)
{
    /* VMM handles belong to the device, not to a context. */
    return e->ctx == ctx && (e->kind == GS_ALLOC_DEVICE_PTR || e->kind == GS_ALLOC_ARRAY ||
                             e->kind == GS_ALLOC_MIPMAPPED);
}

uint64_t gs_ledger_release_context(void *ctx)
{
    return ctx ? remove_matching(in_context, ctx) : 0;
}

bool gs_ledger_vmm_retain(uint64_t handle)
{
    pthread_mutex_lock(&map_mu);
    map_entry *e = map_find_locked(GS_ALLOC_VMM_HANDLE, handle);
    if (e)
        e->refs++;
    pthread_mutex_unlock(&map_mu);
    return e != NULL;
}

bool gs_ledger_vmm_release(uint64_t handle, bool *freed, gs_ledger_entry *entry)
{
    *freed = false;
    flight_settle();
    pthread_mutex_lock(&map_mu);
    map_entry *e = map_find_locked(GS_ALLOC_VMM_HANDLE, handle);
    if (e && e->refs > 0) {
        if (--e->refs == 0 && e->maps == 0) {
            *entry = (gs_ledger_entry){e->account, e->bytes, e->reserved, e->ctx};
            *freed = true;
            map_remove_locked(e);
        }
        pthread_mutex_unlock(&map_mu);
        if (*freed && entry->reserved)
            flight_mark(entry->account, entry->bytes);   /* cuMemRelease is next */
        return true;
    }
    pthread_mutex_unlock(&map_mu);
    return false;
}

void gs_ledger_vmm_unrelease(uint64_t handle, bool freed, const gs_ledger_entry *entry)
{
    flight_settle();
    if (freed) {
        gs_ledger_track(GS_ALLOC_VMM_HANDLE, handle, entry);
        return;
    }
    gs_ledger_vmm_retain(handle);
}

void gs_ledger_vmm_mapped(uint64_t va, uint64_t size, uint64_t handle)
{
    pthread_mutex_lock(&map_mu);
    map_entry *h = map_find_locked(GS_ALLOC_VMM_HANDLE, handle);
    if (h) {
        h->maps++;
        map_entry m = {.key = va, .bytes = size, .kind = GS_ALLOC_VMM_MAPPING, .link = handle};
        if (!map_insert_locked(&m)) {
            h->maps--;
            GS_ERROR("out of host memory tracking mapping %#llx; handle %#llx is given back at its release",
                     (unsigned long long)va, (unsigned long long)handle);
        }
    }
    pthread_mutex_unlock(&map_mu);
}

typedef struct va_range {
    uint64_t lo, hi;
} va_range;

void gs_ledger_vmm_unmapped(uint64_t va, uint64_t size)
{
    va_range r = {va, va + size};
    for (;;) {
        gs_ledger_entry gone = {0};
        bool found = false, freed = false;
        pthread_mutex_lock(&map_mu);
        for (size_t i = 0; i < map_capacity && !found; i++) {
            map_entry *e = &map_slots[i];
            if (e->kind != GS_ALLOC_VMM_MAPPING || e->key < r.lo || e->key >= r.hi)
                continue;
            found = true;
            uint64_t handle = e->link;
            map_remove_locked(e);
            map_entry *h = map_find_locked(GS_ALLOC_VMM_HANDLE, handle);
            if (h && h->maps > 0 && --h->maps == 0 && h->refs == 0) {
                gone = (gs_ledger_entry){h->account, h->bytes, h->reserved, h->ctx};
                freed = true;
                map_remove_locked(h);
            }
        }
        pthread_mutex_unlock(&map_mu);
        if (!found)
            return;
        if (freed && gone.reserved && gone.account)
            gs_ledger_give_back(gone.account, gone.bytes);
    }
}

/* ---- accounts ---- */

void gs_ledger_account_init(gs_ledger_account *a, struct gs_rpc *rpc, struct gs_gate *gate, const char *label)
{
    memset(a, 0, sizeof *a);
    pthread_mutex_init(&a->mu, NULL);
    a->rpc = rpc;
    a->gate = gate;
    a->label = label;
}

void gs_ledger_flush(gs_ledger_account *a)
{
    pthread_mutex_lock(&a->mu);
    uint64_t bytes = a->pending_release;
    uint64_t epoch = a->attach_epoch;
    a->pending_release = 0;
    pthread_mutex_unlock(&a->mu);
    if (!bytes)
        return;
    uint64_t used = 0, quota = 0;
    int rc = gs_rpc_release_memory(a->rpc, bytes, RELEASE_WAIT_MS, &used, &quota);
    bool unsent = rc < 0 && gs_rpc_last_call_unsent();
    pthread_mutex_lock(&a->mu);
    if (rc == GS_RPC_OK) {
        a->reply_quota = quota;
        a->reply_used = used;
        a->n_flushes++;
        a->bytes_released += bytes;
        a->view_valid = false;
    } else if (rc < 0 && a->attach_epoch != epoch) {
        /* A re-attach during the call declared only what is held (and
         * zeroed pending): these bytes are settled; re-adding them would
         * release them a second time from the new client. */
    } else if (unsent) {
        /* It never left this process (not attached): keep it pending. A
         * re-attach declares only what is held, so it is settled then. */
        a->pending_release += bytes;
        GS_DEBUG("ReleaseMemory(%llu) not sent (%d: %s); kept pending", (unsigned long long)bytes, rc,
                 gs_rpc_last_error());
    } else if (rc < 0) {
        /* Sent, unanswered: tokend applies a release whenever it reads it
         * (no wait, no cancel), so it may have or may yet. Sent again, it
         * could count memory free that the driver still holds; lost, tokend
         * over-counts the group until a re-attach declares what is held. */
        a->released_unknown += bytes;
        GS_WARN("ReleaseMemory(%llu bytes) to tokend at %s got no answer (%d: %s); not sent again: if tokend "
                "did not apply it, it counts these bytes held until this process re-attaches",
                (unsigned long long)bytes, a->label, rc, gs_rpc_last_error());
    } else {
        GS_WARN("tokend refused ReleaseMemory(%llu bytes): %d %s", (unsigned long long)bytes, rc,
                gs_rpc_last_error());
    }
    pthread_mutex_unlock(&a->mu);
}

/* landed: the part of bytes counted in flight (a deferred free's), taken
 * out of flight in the same step as out of held: held but out of flight
 * after the driver freed them, they would read as the context's own
 * memory shrinking (its charge given back too early). */
static void give_back(gs_ledger_account *a, uint64_t bytes, uint64_t landed)
{
    flight_settle();
    if (!bytes)
        return;
    pthread_mutex_lock(&a->mu);
    a->held = a->held > bytes ? a->held - bytes : 0;
    a->pending_release += bytes;
    a->in_flight = a->in_flight > landed ? a->in_flight - landed : 0;
    a->view_valid = false;
    pthread_mutex_unlock(&a->mu);
    if (a->gate)
        gs_gate_kick_service(a->gate);
    else
        gs_ledger_flush(a);
}

void gs_ledger_give_back(gs_ledger_account *a, uint64_t bytes) { give_back(a, bytes, 0); }

void gs_ledger_deferred_free(gs_ledger_account *a, uint64_t bytes)
{
    pthread_mutex_lock(&a->mu);
    a->in_flight += bytes;   /* before this thread's mark on them goes */
    pthread_mutex_unlock(&a->mu);
    flight_settle();
}

void gs_ledger_deferred_free_done(gs_ledger_account *a, uint64_t bytes) { give_back(a, bytes, bytes); }

static int reserve(gs_ledger_account *a, uint64_t bytes, const char *what, bool before_driver_call)
{
    const gs_config *cfg = gs_config_get();
    flight_settle();
    if (bytes == 0)
        return GS_RESERVE_GRANTED;   /* the driver rejects size 0 itself */
    uint64_t deadline = monotonic_ns() + (uint64_t)cfg->daemon_wait_ms * 1000000ull;
    bool flushed = false, loss_logged = false, waited_quietly = false;
    for (;;) {
        bool granted = false;
        uint64_t used = 0, quota = 0;
        int rc = gs_rpc_reserve(a->rpc, bytes, RESERVE_WAIT_MS, &granted, &used, &quota);
        if (rc == GS_RPC_OK) {
            pthread_mutex_lock(&a->mu);
            a->reply_quota = quota;
            a->reply_used = used;
            pthread_mutex_unlock(&a->mu);
        }
        if (rc == GS_RPC_OK && granted) {
            pthread_mutex_lock(&a->mu);
            a->held += bytes;
            a->n_reserved++;
            a->view_valid = false;
            pthread_mutex_unlock(&a->mu);
            if (before_driver_call)
                flight_mark(a, bytes);   /* the allocation's real call is next */
            if (loss_logged)
                GS_WARN("tokend at %s is back; %s of %llu bytes reserved", a->label, what,
                        (unsigned long long)bytes);
            return GS_RESERVE_GRANTED;
        }
        if (rc == GS_RPC_OK) {
            pthread_mutex_lock(&a->mu);
            bool pending = a->pending_release > 0;
            pthread_mutex_unlock(&a->mu);
            if (pending && !flushed) {
                /* Our own frees may not have reached tokend yet. */
                flushed = true;
                gs_ledger_flush(a);
                continue;
            }
#ifdef GSLICE_TEST_CUT_LEDGER_REFUSAL
            return GS_RESERVE_UNMETERED;   /* test-only build (hook/build.py TEST_CUTS): over quota goes through */
#endif
            pthread_mutex_lock(&a->mu);
            a->n_refused++;
            pthread_mutex_unlock(&a->mu);
            GS_WARN("%s of %llu bytes refused: group %s memory quota %llu bytes, used %llu, requested %llu "
                    "(CUDA_ERROR_OUT_OF_MEMORY)", what, (unsigned long long)bytes, cfg->group,
                    (unsigned long long)quota, (unsigned long long)used, (unsigned long long)bytes);
            return GS_RESERVE_REFUSED;
        }
        /* tokend did not answer (or forgot us mid-restart). A fresh
         * process may just not be attached yet: wait a moment quietly. */
        if (rc == GS_RPC_UNAVAILABLE && !waited_quietly) {
            waited_quietly = true;
            if (gs_rpc_wait_attached(a->rpc, 2000, NULL))
                continue;
        }
        if (gs_config_daemon_loss() == GS_ON_LOSS_OPEN) {
            GS_ERROR("tokend unreachable at %s (%d: %s); the group's on-daemon-loss policy open: %s of %llu bytes "
                     "allowed UNMETERED", a->label, rc, gs_rpc_last_error(), what, (unsigned long long)bytes);
            return GS_RESERVE_UNMETERED;
        }
        uint64_t now = monotonic_ns();
        if (now >= deadline) {
            GS_ERROR("tokend unreachable at %s for %d ms (GSLICE_DAEMON_WAIT_MS; last: %d %s); "
                     "%s of %llu bytes fails with CUDA_ERROR_OUT_OF_MEMORY", a->label, cfg->daemon_wait_ms,
                     rc, gs_rpc_last_error(), what, (unsigned long long)bytes);
            return GS_RESERVE_UNAVAILABLE;
        }
        if (!loss_logged) {
            loss_logged = true;
            GS_WARN("tokend unreachable at %s (%d: %s); %s of %llu bytes waits up to %d ms for it", a->label,
                    rc, gs_rpc_last_error(), what, (unsigned long long)bytes, cfg->daemon_wait_ms);
        }
        uint64_t left_ms = (deadline - now) / 1000000ull;
        if (gs_rpc_wait_attached(a->rpc, (int)(left_ms < 200 ? left_ms + 1 : 200), NULL))
            usleep(10000);
    }
}

int gs_ledger_reserve(gs_ledger_account *a, uint64_t bytes, const char *what)
{
    return reserve(a, bytes, what, true);
}

int gs_ledger_reserve_held(gs_ledger_account *a, uint64_t bytes, const char *what)
{
    return reserve(a, bytes, what, false);
}

bool gs_ledger_view(gs_ledger_account *a, uint64_t *quota, uint64_t *used, uint64_t *physical)
{
    uint64_t now = monotonic_ns();
    pthread_mutex_lock(&a->mu);
    bool fresh = a->view_valid && now - a->view_at_ns < VIEW_CACHE_NS;
    bool pending = a->pending_release > 0;
    if (fresh) {
        *quota = a->view_quota;
        *used = a->view_used;
        *physical = a->view_physical;
    }
    pthread_mutex_unlock(&a->mu);
    if (fresh)
        return true;
    if (pending)
        gs_ledger_flush(a);
    uint64_t q = 0, u = 0, p = 0;
    uint32_t pids[256];
    int n_pids = 0;
    int rc = gs_rpc_memory_info(a->rpc, VIEW_WAIT_MS, &q, &u, &p, pids, 256, &n_pids);
    if (rc == GS_RPC_UNAVAILABLE && gs_rpc_wait_attached(a->rpc, VIEW_WAIT_MS, NULL))
        rc = gs_rpc_memory_info(a->rpc, VIEW_WAIT_MS, &q, &u, &p, pids, 256, &n_pids);   /* first query of a fresh process */
    if (rc != GS_RPC_OK) {
        GS_DEBUG("GetMemoryInfo failed (%d: %s); reporting the driver's numbers", rc, gs_rpc_last_error());
        return false;
    }
    pthread_mutex_lock(&a->mu);
    a->view_quota = q;
    a->view_used = u;
    a->view_physical = p;
    memcpy(a->view_pids, pids, sizeof(uint32_t) * (size_t)n_pids);
    a->view_n_pids = n_pids;
    a->view_at_ns = monotonic_ns();
    a->view_valid = true;
    pthread_mutex_unlock(&a->mu);
    *quota = q;
    *used = u;
    *physical = p;
    return true;
}

bool gs_ledger_last_headroom(gs_ledger_account *a, uint64_t *headroom)
{
    pthread_mutex_lock(&a->mu);
    bool known = a->reply_quota > 0;
    *headroom = a->reply_quota > a->reply_used ? a->reply_quota - a->reply_used : 0;
    pthread_mutex_unlock(&a->mu);
    return known;
}

bool gs_ledger_group_has_pid(gs_ledger_account *a, uint32_t pid)
{
    bool found = false;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < a->view_n_pids && !found; i++)
        found = a->view_pids[i] == pid;
    pthread_mutex_unlock(&a->mu);
    return found;
}

uint64_t gs_ledger_redeclare(gs_ledger_account *a)
{
    pthread_mutex_lock(&a->mu);
    a->pending_release = 0;
    a->attach_epoch++;
    a->view_valid = false;
    uint64_t held = a->held;
    pthread_mutex_unlock(&a->mu);
    return held;
}

void gs_ledger_get_stats(gs_ledger_account *a, gs_ledger_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&a->mu);
    out->held = a->held;
    out->pending_release = a->pending_release;
    out->reservations = a->n_reserved;
    out->refusals = a->n_refused;
    out->flushes = a->n_flushes;
    out->bytes_released = a->bytes_released;
    out->released_unknown = a->released_unknown;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&map_mu);
    for (size_t i = 0; i < map_capacity; i++)
        if (map_slots[i].kind && map_slots[i].account == a)
            out->tracked_entries++;
    pthread_mutex_unlock(&map_mu);
}

void gs_ledger_charges(gs_ledger_account *a, uint64_t *held, uint64_t *context_reserves, uint64_t *in_flight)
{
    pthread_mutex_lock(&a->mu);
    *held = a->held;
    *in_flight = a->in_flight < a->held ? a->in_flight : a->held;
    pthread_mutex_unlock(&a->mu);
    *context_reserves = __atomic_load_n(&a->context_reserves, __ATOMIC_RELAXED);
}

void gs_ledger_fork_prepare(void) { pthread_mutex_lock(&map_mu); }
void gs_ledger_fork_parent(void) { pthread_mutex_unlock(&map_mu); }

void gs_ledger_fork_child(void)
{
    flight_account = NULL;   /* the forking thread: every account is reset below */
    flight_bytes = 0;
    if (map_slots)
        memset(map_slots, 0, map_capacity * sizeof *map_slots);
    map_count = 0;
    pthread_mutex_unlock(&map_mu);
}

void gs_ledger_account_fork_child(gs_ledger_account *a)
{
    pthread_mutex_init(&a->mu, NULL);
    a->held = 0;
    a->pending_release = 0;
    a->in_flight = 0;
    a->view_valid = false;
    a->reply_quota = a->reply_used = 0;
    a->context_reserves = 0;
}
