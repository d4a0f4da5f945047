/* cuGetProcAddress of the simulated libcuda.so.1: look-ups by base name,
 * CUDA version and stream flavour, answered from cuda_entry_points.h with
 * the library's own (hidden, non-interposable) function addresses. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

enum entry_flavour { LEGACY, PTDS };

/* Refer to each hidden implementation sim_<impl> under a private C name,
 * so the table needs no prototypes and the reference binds locally. */
#define SIM_ENTRY(base, version, flavour, impl) \
    extern char sim_entry_##impl[] __asm__("sim_" #impl) __attribute__((visibility("hidden")));
#include "cuda_entry_points.h"
#undef SIM_ENTRY

struct proc_entry {
    const char *base;
    int version;
    int flavour;
    void *fn;
};

/* Some implementations appear in several rows; the declarations above are
 * redundant then, which C allows. */
static const struct proc_entry entries[] = {
#define SIM_ENTRY(base, version, flavour, impl) {#base, version, flavour, (void *)sim_entry_##impl},
#include "cuda_entry_points.h"
#undef SIM_ENTRY
};

/* GSLICE_SIM_PROC_ADDRESS_VARIANTS=1: an explicit legacy-stream request
 * (CU_GET_PROC_ADDRESS_LEGACY_STREAM) for cuLaunchKernel answers a second,
 * different internal function doing the same, as a real driver may answer
 * per-flags variants: an interposer must meter both. */
CUresult sim_cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            CUstream, void **, void **);
static CUresult launch_kernel_explicit_legacy(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                              unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
                                              void **extra) {
    return sim_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, s, params, extra);
}

static bool variants_mode(void) {
    static int mode = -1;
    if (mode < 0) {
        const char *v = getenv("GSLICE_SIM_PROC_ADDRESS_VARIANTS");
        mode = v && !strcmp(v, "1");
    }
    return mode == 1;
}

static CUresult lookup(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    bool want_ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct proc_entry *best_legacy = NULL, *best_ptds = NULL;
    bool known = false;
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        const struct proc_entry *e = &entries[i];
        if (strcmp(e->base, symbol) != 0) continue;
        known = true;
        if (e->version > cuda_version) continue;
        const struct proc_entry **best = e->flavour == PTDS ? &best_ptds : &best_legacy;
        if (!*best || e->version > (*best)->version) *best = e;
    }
    /* Calls with no per-thread form answer the same for either flag. */
    const struct proc_entry *chosen = want_ptds && best_ptds ? best_ptds : best_legacy;
    *pfn = NULL;
    if (!chosen) {
        if (status) *status = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = chosen->fn;
    if (variants_mode() && flags == CU_GET_PROC_ADDRESS_LEGACY_STREAM && !strcmp(symbol, "cuLaunchKernel"))
        *pfn = (void *)launch_kernel_explicit_legacy;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
}

CUresult sim_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *symbolStatus) {
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}
CU_EXPORT(cuGetProcAddress_v2, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *symbolStatus));

CUresult sim_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
CU_EXPORT(cuGetProcAddress, (const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags));
