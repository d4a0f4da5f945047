/* symbol_routes: the two ways a program finds a driver entry point
 * without calling our exported names directly.
 *
 * 1. dlsym: libcudart dlopens libcuda.so.1 and dlsyms on that handle,
 *    which bypasses LD_PRELOAD. We export dlsym itself; when the real
 *    answer for an intercepted name is the real driver's function (or our
 *    own export), the caller gets our wrapper.
 * 2. cuGetProcAddress(_v2): the runtime asks by base name + version +
 *    flags. If the real answer is the real implementation of a table row,
 *    the caller gets that row's wrapper; a per-thread-stream request maps
 *    to the _ptsz row and stays per-thread (never the legacy stream). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include "config.h"
#include "intercept_table.h"
#include "log.h"
#include "real_driver.h"
#include "shim.h"

#define GS_X_ROW(name, base, version, ptsz, lib, path, impl, ret, params, args) \
    {#name, #base, version, ptsz, GS_LIB_##lib},
const gs_intercept_row gs_intercept_rows[GS_ID_COUNT] = {GS_INTERCEPT_TABLE(GS_X_ROW)};
#undef GS_X_ROW

int gs_intercept_find(const char *name)
{
    for (int id = 0; id < GS_ID_COUNT; id++)
        if (!strcmp(gs_intercept_rows[id].name, name))
            return id;
    return -1;
}

GS_SANITIZER_START_UP static bool maybe_intercepted(const char *name)
{
    return name && ((name[0] == 'c' && name[1] == 'u') || !strncmp(name, "nvml", 4));
}

/* The row cuGetProcAddress(base, version, flags) stands for: the highest
 * version <= cudaVersion among rows of that stream kind; -1 when the
 * request is below every row's version (an older variant, possibly with
 * another signature: it passes through untouched). */
static int row_for_request(const char *symbol, int cuda_version, cuuint64_t flags)
{
    int want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    int best = -1, has_ptsz = 0;
    for (int id = 0; id < GS_ID_COUNT; id++)
        if (!strcmp(gs_intercept_rows[id].base, symbol) && gs_intercept_rows[id].ptsz)
            has_ptsz = 1;
    for (int id = 0; id < GS_ID_COUNT; id++) {
        const gs_intercept_row *r = &gs_intercept_rows[id];
        if (strcmp(r->base, symbol) || r->lib != GS_LIB_CUDA)
            continue;
        if (r->ptsz != (want_ptsz && has_ptsz))
            continue;
        if (r->version <= cuda_version && (best < 0 || r->version > gs_intercept_rows[best].version))
            best = id;
    }
    return best;
}

void *gs_route_proc_address(const char *symbol, void *fn, int cuda_version, cuuint64_t flags)
{
    if (!maybe_intercepted(symbol) || gs_config_get()->disabled)
        return fn;
    /* Exactly a function we resolved by name: its row is certain. */
    for (int id = 0; id < GS_ID_COUNT; id++)
        if (fn == gs_real_exported[id] && !strcmp(gs_intercept_rows[id].base, symbol))
            return gs_wrapper_exported[id];
    for (int id = 0; id < GS_ID_COUNT; id++)
        if (fn == gs_wrapper_exported[id] || fn == gs_wrapper_proc[id] || fn == gs_wrapper_alt[id])
            return fn;
    int row = row_for_request(symbol, cuda_version, flags);
    if (row < 0)
        return fn;
    /* A driver-internal implementation: remember it for this row's twin;
     * a second, different one for the same row gets the third wrapper. */
    void *expected = NULL;
    if (__atomic_compare_exchange_n(&gs_real_proc[row], &expected, fn, false, __ATOMIC_RELEASE,
                                    __ATOMIC_ACQUIRE) ||
        expected == fn)
        return gs_wrapper_proc[row];
    void *first = expected;
    expected = NULL;
    if (__atomic_compare_exchange_n(&gs_real_alt[row], &expected, fn, false, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE) ||
        expected == fn)
        return gs_wrapper_alt[row];
    /* A third one: the row's exported function does the same job, metered. */
    if (gs_real_cuda_load() && __atomic_load_n(&gs_real_exported[row], __ATOMIC_ACQUIRE)) {
        GS_DEBUG("cuGetProcAddress(%s, %d, flags %llu) answered a third implementation %p; calls go through the "
                 "exported %s", symbol, cuda_version, (unsigned long long)flags, fn, gs_intercept_rows[row].name);
        return gs_wrapper_exported[row];
    }
    GS_WARN("cuGetProcAddress(%s, %d, flags %llu) answered a third implementation %p (others %p, %p); calls "
            "through it are not metered", symbol, cuda_version, (unsigned long long)flags, fn, first, expected);
    return fn;
}

/* Our dlsym for a real handle: the real answer, or our wrapper for it. */
__attribute__((used)) GS_SANITIZER_START_UP void *gs_dlsym_handle(void *handle, const char *name)
{
    void *p = gs_real_dlsym(handle, name);
    if (!p || !maybe_intercepted(name) || gs_real_loading_here())
        return p;
    int id = gs_intercept_find(name);
    if (id < 0 || p == gs_wrapper_exported[id])
        return p;
    if (gs_config_get()->disabled)
        return p;
    bool loaded = gs_intercept_rows[id].lib == GS_LIB_CUDA ? gs_real_cuda_load() : gs_real_nvml_load();
    if (loaded && p == __atomic_load_n(&gs_real_exported[id], __ATOMIC_ACQUIRE))
        return gs_wrapper_exported[id];
    return p;   /* some other library's function of that name: not ours to meter */
}

#if defined(__x86_64__)
/* dlsym(RTLD_NEXT, name) means "after the caller", and glibc finds the
 * caller from its return address. So for RTLD_NEXT our dlsym must not be a
 * new caller: it jumps to the real dlsym with the return address untouched
 * (a malloc wrapper preloaded after us still gets libc's malloc, not
 * itself). Other handles go to gs_dlsym_handle. RTLD_NEXT look-ups are
 * therefore never redirected to our wrappers. */
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    .cfi_startproc\n"
        "    endbr64\n"
        "    cmpq $-1, %rdi\n"
        "    jne gs_dlsym_handle\n"
        "    movq gs_real_dlsym_fn(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    jne 1f\n"
        "    pushq %rdi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    pushq %rsi\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    subq $8, %rsp\n"
        "    .cfi_adjust_cfa_offset 8\n"
        "    call gs_resolve_real_dlsym\n"
        "    addq $8, %rsp\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rsi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "    popq %rdi\n"
        "    .cfi_adjust_cfa_offset -8\n"
        "1:  jmp *%rax\n"
        "    .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#else
/* Elsewhere: search the objects after the real caller ourselves. */
static void *next_after(const void *caller, const char *name)
{
    Dl_info info;
    struct link_map *caller_map = NULL;
    if (!dladdr1(caller, &info, (void **)&caller_map, RTLD_DL_LINKMAP) || !caller_map)
        return gs_real_dlsym(RTLD_NEXT, name);
    for (struct link_map *l = caller_map->l_next; l; l = l->l_next) {
        void *p = gs_real_dlsym(l, name);
        if (!p)
            continue;
        struct link_map *owner = NULL;
        Dl_info where;
        if (dladdr1(p, &where, (void **)&owner, RTLD_DL_LINKMAP) && owner == l)
            return p;
    }
    return NULL;
}

GS_EXPORT void *dlsym(void *handle, const char *name)
{
    if (handle == RTLD_NEXT)
        return next_after(__builtin_return_address(0), name);
    return gs_dlsym_handle(handle, name);
}
#endif
