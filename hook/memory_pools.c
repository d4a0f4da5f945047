/* memory_pools: see memory_pools.h. */
#define _GNU_SOURCE
#include "memory_pools.h"

#include <pthread.h>

#include "log.h"
#include "memory_ledger.h"
#include "real_driver.h"
#include "stream_capture.h"

#define GS_MAX_POOLS 32

typedef struct pool_charge {
    CUmemoryPool pool;
    struct gs_ledger_account *account;
    uint64_t charged;      /* reserved at tokend for this pool */
} pool_charge;

static pthread_mutex_t pools_mu = PTHREAD_MUTEX_INITIALIZER;
static pool_charge pools[GS_MAX_POOLS];
static int n_pools;

static bool pool_attr(CUmemoryPool pool, CUmemPool_attribute attr, uint64_t *value)
{
    if (!gs_cu.cuMemPoolGetAttribute)
        return false;
    cuuint64_t v = 0;
    int mode = gs_capture_relax();
    CUresult rc = gs_cu.cuMemPoolGetAttribute(pool, attr, &v);
    gs_capture_restore(mode);
    *value = v;
    return rc == CUDA_SUCCESS;
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

/* pools_mu held: the entry of pool, made on first use. */
static pool_charge *pool_entry_locked(struct gs_ledger_account *account, CUmemoryPool pool)
{
    for (int i = 0; i < n_pools; i++)
        if (pools[i].pool == pool)
            return &pools[i];
    if (n_pools == GS_MAX_POOLS) {
        GS_WARN("more than %d memory pools; pool %p is charged by its allocations only", GS_MAX_POOLS, (void *)pool);
        return NULL;
    }
    pools[n_pools] = (pool_charge){pool, account, 0};
    return &pools[n_pools++];
}

/* pools_mu held: the charge follows the footprint. Growth the quota does
 * not cover is charged anyway (the memory is really held) and logged. */
static void reconcile_locked(pool_charge *p)
{
    uint64_t reserved;
    if (!pool_attr(p->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved))
        return;
    if (reserved < p->charged) {
        gs_ledger_give_back(p->account, p->charged - reserved);
        p->charged = reserved;
    } else if (reserved > p->charged) {
        int r = gs_ledger_reserve(p->account, reserved - p->charged, "memory pool growth");
        if (r == GS_RESERVE_GRANTED)
            p->charged = reserved;
        else if (r != GS_RESERVE_UNMETERED)
            GS_WARN("memory pool %p holds %llu bytes, %llu of them beyond the group's quota", (void *)p->pool,
                    (unsigned long long)reserved, (unsigned long long)(reserved - p->charged));
    }
}

bool gs_pool_charge_growth(struct gs_ledger_account *account, CUmemoryPool pool, uint64_t bytes)
{
    pthread_mutex_lock(&pools_mu);
    pool_charge *p = pool_entry_locked(account, pool);
    bool ok = true;
    uint64_t reserved, used;
    if (p) {
        reconcile_locked(p);
        if (pool_attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) &&
            pool_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used)) {
            uint64_t idle = reserved > used ? reserved - used : 0;
            uint64_t grow = bytes > idle ? bytes - idle : 0;
            int r = grow ? gs_ledger_reserve(account, grow, "cuMemAllocAsync (pool growth)") : GS_RESERVE_GRANTED;
            if (r == GS_RESERVE_REFUSED || r == GS_RESERVE_UNAVAILABLE)
                ok = false;
            else if (r == GS_RESERVE_GRANTED)
                p->charged += grow;
        }
    }
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

void gs_pools_fork_child(void)
{
    pthread_mutex_init(&pools_mu, NULL);
    n_pools = 0;
}
