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
 * retries once, and Detach at exit returns everything. */
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
};

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
    uint64_t view_quota, view_used, view_physical, view_at_ns;
    bool view_valid;
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
} gs_ledger_stats;

void gs_ledger_account_init(gs_ledger_account *a, struct gs_rpc *rpc, struct gs_gate *gate, const char *label);

/* Reserve bytes before an allocation; `what` names the entry point for the
 * refusal log line. */
int gs_ledger_reserve(gs_ledger_account *a, uint64_t bytes, const char *what);
/* Give a reservation back (failed real call, excess of a worst case). */
void gs_ledger_give_back(gs_ledger_account *a, uint64_t bytes);

/* Remember a successful allocation (reserved: false when it was made
 * unmetered, so its free gives nothing back). */
void gs_ledger_track(int kind, uint64_t key, gs_ledger_account *a, uint64_t bytes, bool reserved);
/* Look up without removing (for frees: remove only once the real free worked). */
bool gs_ledger_lookup(int kind, uint64_t key, gs_ledger_account **a, uint64_t *bytes);
/* Remove an entry (before its real free); false when unknown. */
bool gs_ledger_take(int kind, uint64_t key, gs_ledger_account **a, uint64_t *bytes, bool *reserved);

/* Send pending releases now (keeper thread, exit, before queries). */
void gs_ledger_flush(gs_ledger_account *a);
/* The group's view: quota, used, physical total (false: tokend away). */
bool gs_ledger_view(gs_ledger_account *a, uint64_t *quota, uint64_t *used, uint64_t *physical);
/* Bytes this process holds (re-declared at every re-attach); forgets
 * pending releases (the new client never held them). */
uint64_t gs_ledger_redeclare(gs_ledger_account *a);

void gs_ledger_get_stats(gs_ledger_account *a, gs_ledger_stats *out);

void gs_ledger_fork_prepare(void);
void gs_ledger_fork_parent(void);
/* The child holds no device memory: forget the map and every account. */
void gs_ledger_fork_child(void);
void gs_ledger_account_fork_child(gs_ledger_account *a);

#endif
