/* memory_pools: see memory_pools.h. */
#define _GNU_SOURCE
#include "memory_pools.h"

#include <pthread.h>
#include <stdlib.h>

#include "log.h"
#include "memory_ledger.h"
#include "real_driver.h"
#include "stream_capture.h"

#define GS_MAX_POOLS 32
#define GS_MAX_GRAPH_EXECS 256

/* One footprint the group pays for: a stream-ordered pool (pool set), or
 * a device's graph memory pool (pool NULL, graph_dev the device). */
typedef struct pool_charge {
    CUmemoryPool pool;
    CUdevice graph_dev;
    struct gs_ledger_account *account;
    uint64_t charged;      /* reserved at tokend for this footprint */
} pool_charge;

/* An instantiated graph whose mem alloc nodes take bytes at each launch. */
typedef struct graph_exec_need {
    CUgraphExec exec;
    CUdevice dev;
    struct gs_ledger_account *account;
    uint64_t bytes;
} graph_exec_need;

static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;
static pool_charge pools[GS_MAX_POOLS];
static int n_pools;
static graph_exec_need graph_execs[GS_MAX_GRAPH_EXECS];
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

/* pools_mu held: the entry of a footprint, made on first use. */
static pool_charge *pool_entry_locked(struct gs_ledger_account *account, CUmemoryPool pool, CUdevice graph_dev)
{
    for (int i = 0; i < n_pools; i++)
        if (pools[i].pool == pool && (pool || pools[i].graph_dev == graph_dev))
            return &pools[i];
    if (n_pools == GS_MAX_POOLS) {
        GS_WARN("more than %d memory pools; pool %p (graph memory of device %d) is charged by its allocations only",
                GS_MAX_POOLS, (void *)pool, pool ? -1 : graph_dev);
        return NULL;
    }
    pools[n_pools] = (pool_charge){pool, pool ? -1 : graph_dev, account, 0};
    return &pools[n_pools++];
}

/* pools_mu held: the charge follows the footprint. Growth the quota does
 * not cover is charged anyway (the memory is really held) and logged. */
static void reconcile_locked(pool_charge *p)
{
    uint64_t reserved;
    if (!footprint(p, &reserved, NULL))
        return;
    if (reserved < p->charged) {
        gs_ledger_give_back(p->account, p->charged - reserved);
        p->charged = reserved;
    } else if (reserved > p->charged) {
        int r = gs_ledger_reserve(p->account, reserved - p->charged, "memory pool growth");
        if (r == GS_RESERVE_GRANTED)
            p->charged = reserved;
        else if (r != GS_RESERVE_UNMETERED)
            GS_WARN("memory pool %p (graph memory of device %d) holds %llu bytes, %llu of them beyond the group's "
                    "quota", (void *)p->pool, p->pool ? -1 : p->graph_dev, (unsigned long long)reserved,
                    (unsigned long long)(reserved - p->charged));
    }
}

/* pools_mu held: before taking bytes from the footprint, charge what it
 * must grow by (the bytes its idle part cannot cover). */
static bool charge_growth_locked(pool_charge *p, uint64_t bytes, const char *what)
{
    uint64_t reserved, used;
    reconcile_locked(p);
    if (!footprint(p, &reserved, &used))
        return true;
    uint64_t idle = reserved > used ? reserved - used : 0;
    uint64_t grow = bytes > idle ? bytes - idle : 0;
    int r = grow ? gs_ledger_reserve(p->account, grow, what) : GS_RESERVE_GRANTED;
    if (r == GS_RESERVE_REFUSED || r == GS_RESERVE_UNAVAILABLE)
        return false;
    if (r == GS_RESERVE_GRANTED)
        p->charged += grow;
    return true;
}

bool gs_pool_charge_growth(struct gs_ledger_account *account, CUmemoryPool pool, uint64_t bytes)
{
    pthread_mutex_lock(&pools_mu);
    pool_charge *p = pool_entry_locked(account, pool, -1);
    bool ok = !p || charge_growth_locked(p, bytes, "cuMemAllocAsync (pool growth)");
    pthread_mutex_unlock(&pools_mu);
    return ok;
}

void gs_pools_reconcile(void)
{
    pthread_mutex_lock(&pools_mu);
    for (int i = 0; i < n_pools; i++)
        reconcile_locked(&pools[i]);
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
    if (used == GS_MAX_GRAPH_EXECS)
        GS_WARN("more than %d graphs with memory nodes; graph %p's memory is charged after its launches only",
                GS_MAX_GRAPH_EXECS, (void *)exec);
    else {
        graph_execs[used] = (graph_exec_need){exec, dev, account, bytes};
        __atomic_store_n(&gs_graph_memory_execs, used + 1, __ATOMIC_RELEASE);
        pool_entry_locked(account, NULL, dev);
    }
    pthread_mutex_unlock(&pools_mu);
}

bool gs_graph_memory_charge(CUgraphExec exec)
{
    pthread_mutex_lock(&pools_mu);
    bool ok = true;
    int used = __atomic_load_n(&gs_graph_memory_execs, __ATOMIC_RELAXED);
    for (int i = 0; i < used; i++) {
        if (graph_execs[i].exec != exec)
            continue;
        pool_charge *p = pool_entry_locked(graph_execs[i].account, NULL, graph_execs[i].dev);
        ok = !p || charge_growth_locked(p, graph_execs[i].bytes, "graph launch (graph memory growth)");
        break;
    }
    pthread_mutex_unlock(&pools_mu);
    return ok;
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
    n_pools = 0;
    __atomic_store_n(&gs_graph_memory_execs, 0, __ATOMIC_RELAXED);
}
