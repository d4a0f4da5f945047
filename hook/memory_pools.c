/* memory_pools: see memory_pools.h. */
#define _GNU_SOURCE
#include "memory_pools.h"

#include <pthread.h>
#include <stdlib.h>

#include "log.h"
#include "memory_ledger.h"
#include "real_driver.h"
#include "rpc_client.h"
#include "stream_capture.h"

#define GS_POOLS_FIRST_TABLE 16   /* footprints the table holds before it first grows */
#define GS_RECONCILE_BATCH 16     /* growths found per pass before they are reserved outside pools_mu */
#define GS_GRAPH_EXECS_FIRST_TABLE 16   /* graphs with memory nodes the table holds before it first grows */

/* One footprint the group pays for: a stream-ordered pool (pool set), or
 * a device's graph memory pool (pool NULL, graph_dev the device). */
typedef struct pool_charge {
    CUmemoryPool pool;
    CUdevice graph_dev;
    struct gs_ledger_account *account;
    uint64_t charged;           /* reserved at tokend for this footprint */
    /* Calls between their charge and the driver's answer (gs_pool_growth):
     * the footprint does not show them yet. */
    uint64_t in_flight_bytes;   /* what they take from the pool */
    uint64_t in_flight_growth;  /* what the pool grows by for them */
    uint64_t in_flight_charged; /* the part of in_flight_growth already in charged */
    uint64_t reserving;         /* growth seen after the fact, being reserved outside pools_mu */
} pool_charge;

/* An instantiated graph whose mem alloc nodes take bytes at each launch. */
typedef struct graph_exec_need {
    CUgraphExec exec;
    CUdevice dev;
    struct gs_ledger_account *account;
    uint64_t bytes;
} graph_exec_need;

/* Growth a reconciliation found after the fact, reserved once pools_mu is
 * released (a reservation may wait for tokend). */
typedef struct unseen_growth {
    CUmemoryPool pool;
    CUdevice graph_dev;
    struct gs_ledger_account *account;
    uint64_t bytes;
} unseen_growth;

static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;
/* Every footprint followed, in a table doubled when full: a pool left out
 * could only be charged per allocation and given back at its
 * cuMemFreeAsync, while the pool may keep the block (memory counted free
 * before the driver frees it). Entries move when the table grows and when
 * one is removed: a pointer into it is never kept across an unlock (each
 * caller finds its entry again, pool_find_locked). */
static pool_charge *pools;
static int n_pools, pools_capacity;
static bool table_full_logged;
/* Every instantiated graph with memory nodes, in a table doubled when full
 * (under pools_mu, like pools): a graph left out would be launched before
 * its memory is charged, past the quota. */
static graph_exec_need *graph_execs;
static int graph_execs_capacity;
static bool graph_table_full_logged;
int gs_graph_memory_execs;   /* __atomic: how many of graph_execs are in use (read by graph launch wrappers) */

/* The footprint's reserved and used bytes, read in relaxed capture mode
 * (the shim's own query must not invalidate a program's capture). */
static bool footprint(const pool_charge *p, uint64_t *reserved, uint64_t *used)
{
    cuuint64_t r = 0, u = 0;
    CUresult rc_r, rc_u;
    int mode = gs_capture_relax();
    if (p->pool) {
        rc_r = gs_cu.cuMemPoolGetAttribute ? gs_cu.cuMemPoolGetAttribute(p->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r)
                                           : CUDA_ERROR_NOT_INITIALIZED;
        rc_u = rc_r || !used ? rc_r : gs_cu.cuMemPoolGetAttribute(p->pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &u);
    } else {
        rc_r = gs_cu.cuDeviceGetGraphMemAttribute
                   ? gs_cu.cuDeviceGetGraphMemAttribute(p->graph_dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &r)
                   : CUDA_ERROR_NOT_INITIALIZED;
        rc_u = rc_r || !used ? rc_r
                             : gs_cu.cuDeviceGetGraphMemAttribute(p->graph_dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &u);
    }
    gs_capture_restore(mode);
    *reserved = r;
    if (used)
        *used = u;
    return rc_r == CUDA_SUCCESS && rc_u == CUDA_SUCCESS;
}

CUmemoryPool gs_pool_current(void)
{
    CUdevice dev;
    CUmemoryPool pool = NULL;
    if (!gs_cu.cuCtxGetDevice || !gs_cu.cuDeviceGetMemPool || gs_cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS ||
        gs_cu.cuDeviceGetMemPool(&pool, dev) != CUDA_SUCCESS)
        return NULL;
    return pool;
}

/* pools_mu held: the entry of a footprint, or NULL. */
static pool_charge *pool_find_locked(CUmemoryPool pool, CUdevice graph_dev)
{
    for (int i = 0; i < n_pools; i++)
        if (pools[i].pool == pool && (pool || pools[i].graph_dev == graph_dev))
            return &pools[i];
    return NULL;
}

/* pools_mu held: the entry of a footprint, made on first use; NULL only
 * when the table cannot grow (no host memory): the caller refuses the
 * allocation rather than let memory through that nothing charges. */
static pool_charge *pool_entry_locked(struct gs_ledger_account *account, CUmemoryPool pool, CUdevice graph_dev)
{
    pool_charge *p = pool_find_locked(pool, graph_dev);
    if (p)
        return p;
    if (n_pools == pools_capacity) {
        int capacity = pools_capacity ? 2 * pools_capacity : GS_POOLS_FIRST_TABLE;
        pool_charge *bigger = realloc(pools, (size_t)capacity * sizeof *pools);
        if (!bigger) {
            if (!table_full_logged)
                GS_WARN("out of host memory to follow more than %d memory pools: allocations from pool %p (graph "
                        "memory of device %d) and any other pool not followed yet are refused "
                        "(CUDA_ERROR_OUT_OF_MEMORY)", n_pools, (void *)pool, pool ? -1 : graph_dev);
            table_full_logged = true;
            return NULL;
        }
        pools = bigger;
        pools_capacity = capacity;
    }
    pools[n_pools] = (pool_charge){.pool = pool, .graph_dev = pool ? -1 : graph_dev, .account = account};
    return &pools[n_pools++];
}

/* pools_mu held: give back what the footprint no longer holds. Growth it
 * shows beyond the charge (the pool grew by more than was charged, or an
 * earlier reservation was refused) is returned to be reserved after
 * pools_mu is released (marked as being reserved meanwhile). */
static uint64_t reconcile_locked(pool_charge *p)
{
    uint64_t reserved;
    if (!footprint(p, &reserved, NULL))
        return 0;
    /* Growth charged for calls still in the driver is not in the footprint yet. */
    uint64_t keep = reserved + p->in_flight_charged;
    if (keep < p->charged) {
        gs_ledger_give_back(p->account, p->charged - keep);
        p->charged = keep;
        return 0;
    }
    if (reserved <= p->charged + p->reserving)
        return 0;
    uint64_t unseen = reserved - p->charged - p->reserving;
    p->reserving += unseen;
    return unseen;
}

/* pools_mu held: reconcile p, noting growth to reserve in *out. */
static void reconcile_into_locked(pool_charge *p, unseen_growth *out)
{
    *out = (unseen_growth){p->pool, p->graph_dev, p->account, reconcile_locked(p)};
}

/* pools_mu not held: reserve growth found after the fact. The memory is
 * the driver's already, so this only tries: not while tokend is away
 * (a free or a memory query must not wait for it; the next
 * reconciliation tries again), and a refusal is logged. */
static void reserve_unseen(const unseen_growth *u)
{
    if (!u->bytes)
        return;
    bool attached = u->account->rpc && gs_rpc_wait_attached(u->account->rpc, 0, NULL);
    int r = attached ? gs_ledger_reserve_held(u->account, u->bytes, "memory pool growth") : GS_RESERVE_UNAVAILABLE;
    pthread_mutex_lock(&pools_mu);
    pool_charge *p = pool_find_locked(u->pool, u->graph_dev);
    if (p)
        p->reserving -= u->bytes;
    if (r == GS_RESERVE_GRANTED) {
        if (p)
            p->charged += u->bytes;
        else
            gs_ledger_give_back(u->account, u->bytes);   /* the pool was destroyed meanwhile */
    } else if (r == GS_RESERVE_REFUSED) {
        GS_WARN("memory pool %p (graph memory of device %d) grew by %llu bytes beyond the group's quota",
                (void *)u->pool, u->pool ? -1 : u->graph_dev, (unsigned long long)u->bytes);
    }
    pthread_mutex_unlock(&pools_mu);
}

/* pools_mu held: p's in-flight figures without g. */
static void leave_flight_locked(pool_charge *p, const gs_pool_growth *g)
{
    p->in_flight_bytes -= g->bytes;
    p->in_flight_growth -= g->growth;
    if (g->charged)
        p->in_flight_charged -= g->growth;
}

/* pools_mu held: a call taking bytes from p is in flight from now on; the
 * growth it needs is what the pool's idle part cannot cover, net of what
 * other calls in flight take or add. p is reconciled first (*unseen). */
static void enter_flight_locked(pool_charge *p, uint64_t bytes, gs_pool_growth *g, unseen_growth *unseen)
{
    reconcile_into_locked(p, unseen);
    uint64_t reserved, used;
    if (!footprint(p, &reserved, &used))
        return;   /* the driver cannot say: nothing charged before, the footprint after */
    uint64_t have = reserved + p->in_flight_growth, taken = used + p->in_flight_bytes;
    uint64_t idle = have > taken ? have - taken : 0;
    *g = (gs_pool_growth){p->pool, p->graph_dev, bytes, bytes > idle ? bytes - idle : 0, true, false};
    p->in_flight_bytes += g->bytes;
    p->in_flight_growth += g->growth;
}

/* pools_mu not held: reserve g's growth (this may wait for tokend, as
 * any allocation does). False: refused, g is out of flight. */
static bool charge_flight(struct gs_ledger_account *account, gs_pool_growth *g, const char *what)
{
    if (!g->in_flight || !g->growth)
        return true;
    int r = gs_ledger_reserve(account, g->growth, what);
    pthread_mutex_lock(&pools_mu);
    pool_charge *p = pool_find_locked(g->pool, g->graph_dev);
    bool refused = r == GS_RESERVE_REFUSED || r == GS_RESERVE_UNAVAILABLE;
    if (r == GS_RESERVE_GRANTED && p) {
        p->charged += g->growth;
        p->in_flight_charged += g->growth;
        g->charged = true;
    } else if (r == GS_RESERVE_GRANTED) {
        gs_ledger_give_back(account, g->growth);   /* the pool was destroyed meanwhile */
    }
    if (refused && p)
        leave_flight_locked(p, g);
    if (refused || !p)
        g->in_flight = false;
    pthread_mutex_unlock(&pools_mu);
    return !refused;
}

bool gs_pool_charge_growth(struct gs_ledger_account *account, CUmemoryPool pool, uint64_t bytes,
                           gs_pool_growth *growth)
{
    *growth = (gs_pool_growth){pool, -1, 0, 0, false, false};
    unseen_growth unseen = {0};
    pthread_mutex_lock(&pools_mu);
    pool_charge *p = pool_entry_locked(account, pool, -1);
    if (p)
        enter_flight_locked(p, bytes, growth, &unseen);
    pthread_mutex_unlock(&pools_mu);
    if (!p)
        return false;   /* not followed: nothing would charge what it takes */
    reserve_unseen(&unseen);
    return charge_flight(account, growth, "cuMemAllocAsync (pool growth)");
}

void gs_pool_growth_done(const gs_pool_growth *growth)
{
    gs_ledger_call_returned();   /* the growth's reservation is no longer ahead of its driver call */
    if (growth->in_flight) {
        pthread_mutex_lock(&pools_mu);
        pool_charge *p = pool_find_locked(growth->pool, growth->graph_dev);
        if (p)
            leave_flight_locked(p, growth);
        pthread_mutex_unlock(&pools_mu);
    }
    gs_pools_reconcile();
}

/* Growth found is reserved outside pools_mu, a batch at a time (the table
 * has no fixed size; growth is rare, so nearly always one pass). Between
 * passes the table may change: an entry removed meanwhile moves one that
 * was not reached yet into a reached slot, which then waits for the next
 * reconciliation (its give-back late, the safe side); one reached twice
 * is harmless (growth being reserved is marked). */
void gs_pools_reconcile(void)
{
    int next = 0;
    bool more;
    do {
        unseen_growth unseen[GS_RECONCILE_BATCH];
        int n_unseen = 0;
        pthread_mutex_lock(&pools_mu);
        for (; next < n_pools && n_unseen < GS_RECONCILE_BATCH; next++) {
            reconcile_into_locked(&pools[next], &unseen[n_unseen]);
            n_unseen += unseen[n_unseen].bytes != 0;
        }
        more = next < n_pools;
        pthread_mutex_unlock(&pools_mu);
        for (int i = 0; i < n_unseen; i++)
            reserve_unseen(&unseen[i]);
    } while (more);
}

uint64_t gs_pool_before_destroy(CUmemoryPool pool)
{
    uint64_t reserved, used = 0;
    pthread_mutex_lock(&pools_mu);
    pool_charge *p = pool_find_locked(pool, -1);
    if (p && !footprint(p, &reserved, &used))
        used = UINT64_MAX;   /* unknown: keep the charge */
    pthread_mutex_unlock(&pools_mu);
    return used;
}

void gs_pool_destroyed(CUmemoryPool pool, uint64_t outstanding)
{
    pthread_mutex_lock(&pools_mu);
    pool_charge *p = pool_find_locked(pool, -1);
    if (p) {
        /* The handle is dead (and its value may come back for a new pool):
         * forget it. Its memory is freed now, or with blocks outstanding
         * only once they are freed, which the shim cannot see: then the
         * charge stays (releasing late is safe). */
        if (!outstanding)
            gs_ledger_give_back(p->account, p->charged);
        else if (p->charged)
            GS_INFO("memory pool %p destroyed with %s; its %llu bytes stay charged for the process's life (the "
                    "driver frees them after those blocks, unseen by the shim)", (void *)pool,
                    outstanding == UINT64_MAX ? "an unknown number of bytes allocated from it"
                                              : "blocks still allocated from it",
                    (unsigned long long)p->charged);
        *p = pools[--n_pools];
    }
    pthread_mutex_unlock(&pools_mu);
}

/* ---- graph memory ---- */

/* The bytes a graph's mem alloc nodes take per launch (0: none, or the
 * driver cannot say). */
static uint64_t graph_alloc_bytes(CUgraph graph)
{
    if (!gs_cu.cuGraphGetNodes || !gs_cu.cuGraphNodeGetType || !gs_cu.cuGraphMemAllocNodeGetParams)
        return 0;
    size_t count = 0;
    if (gs_cu.cuGraphGetNodes(graph, NULL, &count) != CUDA_SUCCESS || !count)
        return 0;
    CUgraphNode *nodes = calloc(count, sizeof *nodes);
    if (!nodes)
        return 0;
    uint64_t bytes = 0;
    if (gs_cu.cuGraphGetNodes(graph, nodes, &count) == CUDA_SUCCESS) {
        for (size_t i = 0; i < count; i++) {
            CUgraphNodeType type;
            CUDA_MEM_ALLOC_NODE_PARAMS params;
            if (gs_cu.cuGraphNodeGetType(nodes[i], &type) == CUDA_SUCCESS && type == CU_GRAPH_NODE_TYPE_MEM_ALLOC &&
                gs_cu.cuGraphMemAllocNodeGetParams(nodes[i], &params) == CUDA_SUCCESS)
                bytes += params.bytesize;
        }
    }
    free(nodes);
    return bytes;
}

void gs_graph_memory_instantiated(struct gs_ledger_account *account, CUgraphExec exec, CUgraph graph)
{
    CUdevice dev;
    uint64_t bytes = graph_alloc_bytes(graph);
    if (!bytes || !gs_cu.cuCtxGetDevice || gs_cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return;
    pthread_mutex_lock(&pools_mu);
    int used = __atomic_load_n(&gs_graph_memory_execs, __ATOMIC_RELAXED);
    if (used == graph_execs_capacity) {
        int capacity = graph_execs_capacity ? 2 * graph_execs_capacity : GS_GRAPH_EXECS_FIRST_TABLE;
        graph_exec_need *bigger = realloc(graph_execs, (size_t)capacity * sizeof *graph_execs);
        if (bigger) {
            graph_execs = bigger;
            graph_execs_capacity = capacity;
        }
    }
    if (used == graph_execs_capacity) {
        if (!graph_table_full_logged)
            GS_WARN("out of host memory to follow more than %d graphs with memory nodes: graph %p's memory is "
                    "charged after its launches only", used, (void *)exec);
        graph_table_full_logged = true;
    } else {
        graph_execs[used] = (graph_exec_need){exec, dev, account, bytes};
        __atomic_store_n(&gs_graph_memory_execs, used + 1, __ATOMIC_RELEASE);
        pool_entry_locked(account, NULL, dev);
    }
    pthread_mutex_unlock(&pools_mu);
}

bool gs_graph_memory_charge(CUgraphExec exec, gs_pool_growth *growth)
{
    *growth = (gs_pool_growth){NULL, -1, 0, 0, false, false};
    struct gs_ledger_account *account = NULL;
    unseen_growth unseen = {0};
    bool followed = true;
    pthread_mutex_lock(&pools_mu);
    int used = __atomic_load_n(&gs_graph_memory_execs, __ATOMIC_RELAXED);
    for (int i = 0; i < used; i++) {
        if (graph_execs[i].exec != exec)
            continue;
        account = graph_execs[i].account;
        pool_charge *p = pool_entry_locked(account, NULL, graph_execs[i].dev);
        if (p)
            enter_flight_locked(p, graph_execs[i].bytes, growth, &unseen);
        followed = p != NULL;
        break;
    }
    pthread_mutex_unlock(&pools_mu);
    if (!followed)
        return false;   /* the graph pool is not followed: nothing would charge its growth */
    reserve_unseen(&unseen);
    return !account || charge_flight(account, growth, "graph launch (graph memory growth)");
}

void gs_graph_memory_forget(CUgraphExec exec)
{
    pthread_mutex_lock(&pools_mu);
    int used = __atomic_load_n(&gs_graph_memory_execs, __ATOMIC_RELAXED);
    for (int i = 0; i < used; i++) {
        if (graph_execs[i].exec == exec) {
            graph_execs[i] = graph_execs[used - 1];
            __atomic_store_n(&gs_graph_memory_execs, used - 1, __ATOMIC_RELEASE);
            break;
        }
    }
    pthread_mutex_unlock(&pools_mu);
}

void gs_graph_pool_watch(struct gs_ledger_account *account)
{
    CUdevice dev;
    if (!account || !gs_cu.cuDeviceGetGraphMemAttribute || !gs_cu.cuCtxGetDevice ||
        gs_cu.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return;
    pthread_mutex_lock(&pools_mu);
    pool_entry_locked(account, NULL, dev);
    pthread_mutex_unlock(&pools_mu);
}

void gs_pools_fork_child(void)
{
    pthread_mutex_init(&pools_mu, NULL);
    /* Another thread may have been growing the table at the fork (realloc
     * returned, the new pointer not stored yet): the child, which has no
     * pools, leaves the table to the parent (leaked) rather than trust it. */
    pools = NULL;
    n_pools = pools_capacity = 0;
    table_full_logged = false;
    graph_execs = NULL;
    graph_execs_capacity = 0;
    graph_table_full_logged = false;
    __atomic_store_n(&gs_graph_memory_execs, 0, __ATOMIC_RELAXED);
}
