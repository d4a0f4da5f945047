/* memory_ledger: the client side of the group memory quota.
 *
 * Every allocation reserves its size from tokend BEFORE the real call (an
 * all-or-nothing ReserveMemory), so concurrent processes of a group can
 * never overshoot the quota. The ledger remembers pointer/handle -> size
 * in an open-addressing map (mutex; never on the launch path) so a free
 * gives back exactly what was reserved; freeing a pointer the ledger does
 * not know is forwarded untouched and releases nothing. Releases are
 * batched (releasing late is safe, granting early is not): the gate
 * keeper flushes them right away, a refused reservation flushes and
 * retries once, and Detach at exit returns everything. A release is sent
 * once: one that may have reached tokend without an answer (timeout, the
 * transport failed after the send) is never sent again, since tokend
 * applies it whenever it reads it; if it was lost, tokend counts those
 * bytes held until the next re-attach declares what is really held. */
#ifndef GSLICE_MEMORY_LEDGER_H
#define GSLICE_MEMORY_LEDGER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct gs_rpc;
struct gs_gate;

/* What an entry in the map is: each kind has its own key space. */
enum gs_alloc_kind {
    GS_ALLOC_DEVICE_PTR = 1,   /* cuMemAlloc*, cuMemAllocManaged/Async/FromPool */
    GS_ALLOC_VMM_HANDLE = 2,   /* cuMemCreate */
    GS_ALLOC_ARRAY = 3,        /* cuArrayCreate, cuArray3DCreate */
    GS_ALLOC_MIPMAPPED = 4,    /* cuMipmappedArrayCreate */
    GS_ALLOC_VMM_MAPPING = 5,  /* cuMemMap: key = address, link = handle (charges nothing itself) */
    GS_ALLOC_CONTEXT = 6,      /* a context's reserve (GSLICE_CONTEXT_RESERVE_MIB): key = the context */
};

/* One tracked allocation. */
typedef struct gs_ledger_entry {
    struct gs_ledger_account *account;
    uint64_t bytes;
    bool reserved;    /* false: made unmetered, its free gives nothing back */
    void *ctx;        /* context current at the allocation: its teardown frees it */
} gs_ledger_entry;

enum gs_reserve_result {
    GS_RESERVE_GRANTED = 0,
    GS_RESERVE_REFUSED = 1,      /* over the group's quota */
    GS_RESERVE_UNAVAILABLE = 2,  /* tokend away past GSLICE_DAEMON_WAIT_MS */
    GS_RESERVE_UNMETERED = 3,    /* tokend away, GSLICE_ON_DAEMON_LOSS=open */
};

typedef struct gs_ledger_account {
    pthread_mutex_t mu;
    struct gs_rpc *rpc;
    struct gs_gate *gate;        /* its keeper flushes releases */
    const char *label;           /* the socket path, for log lines */
    uint64_t held;               /* reserved at tokend by this process */
    uint64_t pending_release;    /* freed here, not yet told to tokend */
    uint64_t attach_epoch;       /* bumped by each re-declaration (re-attach) */
    /* Part of held whose driver call (an allocation, or a free) is under way
     * in some thread, or whose free the driver carries out later
     * (gs_ledger_deferred_free): NVML's per-process figure may show it or not. */
    uint64_t in_flight;
    uint64_t released_unknown;   /* releases sent without an answer: not sent again (see above) */
    uint64_t view_quota, view_used, view_physical, view_at_ns;
    uint64_t reply_quota, reply_used;   /* the group's figures in tokend's last memory reply (0, 0: none yet) */
    uint64_t context_reserves;          /* __atomic: bytes of its tracked GS_ALLOC_CONTEXT entries (reserved) */
    bool view_valid;
    uint32_t view_pids[256];     /* the group's processes on this GPU (NVML listing) */
    int view_n_pids;
    uint64_t n_reserved, n_refused, n_flushes, bytes_released;
} gs_ledger_account;

typedef struct gs_ledger_stats {
    uint64_t held;
    uint64_t pending_release;
    uint64_t tracked_entries;
    uint64_t reservations;
    uint64_t refusals;
    uint64_t flushes;
    uint64_t bytes_released;
    uint64_t released_unknown;
} gs_ledger_stats;

void gs_ledger_account_init(gs_ledger_account *a, struct gs_rpc *rpc, struct gs_gate *gate, const char *label);

/* Reserve bytes before an allocation; `what` names the entry point for the
 * refusal log line. A grant is in flight (gs_ledger_account.in_flight)
 * until the same thread calls into the ledger again (track, give back,
 * ...) or gs_ledger_call_returned(): the allocation's real call is what
 * it makes in between. */
int gs_ledger_reserve(gs_ledger_account *a, uint64_t bytes, const char *what);
/* Reserve bytes for memory the driver holds already (growth found after
 * the fact: a pool's footprint, a context's own memory): nothing in flight. */
int gs_ledger_reserve_held(gs_ledger_account *a, uint64_t bytes, const char *what);
/* The calling thread's driver call (allocation or free) after its
 * reservation / gs_ledger_take returned: its bytes are no longer in
 * flight. For callers whose real call is followed by no ledger call (a
 * stream-ordered pool's allocation, a graph launch growing the graph pool). */
void gs_ledger_call_returned(void);
/* Give a reservation back (failed real call, excess of a worst case). */
void gs_ledger_give_back(gs_ledger_account *a, uint64_t bytes);
/* A free the driver carries out later (cuMemFreeAsync: when its stream
 * reaches it), after gs_ledger_take and the call: its bytes stay held and
 * in flight (NVML may show them or no longer) until
 * gs_ledger_deferred_free_done gives them back. */
void gs_ledger_deferred_free(gs_ledger_account *a, uint64_t bytes);
void gs_ledger_deferred_free_done(gs_ledger_account *a, uint64_t bytes);

/* Remember a successful allocation. A key the driver reports again (its
 * free was missed, e.g. freed by a context teardown we did not see)
 * replaces the old entry, whose reservation is given back. */
void gs_ledger_track(int kind, uint64_t key, const gs_ledger_entry *entry);
/* Look up without removing. */
bool gs_ledger_lookup(int kind, uint64_t key, gs_ledger_account **a, uint64_t *bytes);
/* Remove an entry (before its real free: its bytes are in flight until
 * this thread gives them back or tracks the entry again); false when unknown. */
bool gs_ledger_take(int kind, uint64_t key, gs_ledger_entry *out);

/* A context was destroyed (or the primary context reset / released for the
 * last time): the driver freed its allocations without free calls. Drops
 * their entries and gives their reservations back; returns the bytes. */
uint64_t gs_ledger_release_context(void *ctx);

/* Virtual memory (cuMemCreate handles): the physical memory is freed only
 * when every reference (cuMemCreate, cuMemRetainAllocationHandle) is
 * released AND every mapping is unmapped; the charge follows that. */
bool gs_ledger_vmm_retain(uint64_t handle);
/* Before cuMemRelease: drops one reference. *freed is true when that was
 * the last reference and nothing is mapped: the entry is removed and
 * returned in *entry (give it back after the real call, re-track if it
 * fails). False: unknown handle. */
bool gs_ledger_vmm_release(uint64_t handle, bool *freed, gs_ledger_entry *entry);
/* cuMemRelease failed: undo gs_ledger_vmm_release. */
void gs_ledger_vmm_unrelease(uint64_t handle, bool freed, const gs_ledger_entry *entry);
/* After a successful cuMemMap / cuMemUnmap. Unmapping the last mapping of
 * a released handle gives its reservation back. */
void gs_ledger_vmm_mapped(uint64_t va, uint64_t size, uint64_t handle);
void gs_ledger_vmm_unmapped(uint64_t va, uint64_t size);

/* Send pending releases now (keeper thread, exit, before queries). */
void gs_ledger_flush(gs_ledger_account *a);
/* The group's view: quota, used, physical total (false: tokend away). */
bool gs_ledger_view(gs_ledger_account *a, uint64_t *quota, uint64_t *used, uint64_t *physical);
/* The group's room left (quota - used) as of tokend's last reply to a
 * reservation or release of this process; false before the first. Costs
 * no RPC: other processes of the group may have used some of it since. */
bool gs_ledger_last_headroom(gs_ledger_account *a, uint64_t *headroom);
/* Is pid one of the group's processes on this GPU (as of the last view)? */
bool gs_ledger_group_has_pid(gs_ledger_account *a, uint32_t pid);
/* Bytes this process holds (re-declared at every re-attach); forgets
 * pending releases (the new client never held them). */
uint64_t gs_ledger_redeclare(gs_ledger_account *a);

void gs_ledger_get_stats(gs_ledger_account *a, gs_ledger_stats *out);
/* What this process holds at tokend, how much of it is context reserves
 * and how much is in flight (cheap: no scan of the map). */
void gs_ledger_charges(gs_ledger_account *a, uint64_t *held, uint64_t *context_reserves, uint64_t *in_flight);

void gs_ledger_fork_prepare(void);
void gs_ledger_fork_parent(void);
/* The child holds no device memory: forget the map and every account. */
void gs_ledger_fork_child(void);
void gs_ledger_account_fork_child(gs_ledger_account *a);

#endif
