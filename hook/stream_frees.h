/* stream_frees: a block charged by itself (cuMemAlloc*, managed, pitch)
 * freed with cuMemFreeAsync. The free is stream-ordered: the driver frees
 * the memory when the stream reaches it, not at the call, so the charge
 * is given back only then. An event recorded right after the free says
 * when; it is queried at the shim's next memory calls and the
 * application's synchronisations (nothing to do while none is pending).
 *
 * Why an event of its own: the gate's checkpoint events sit on launch
 * streams and carry no payload, and waiting for a later synchronisation
 * of the same stream misses frees whose stream is never synchronised by
 * handle (a context synchronisation, an event wait, a destroyed stream).
 * Two driver calls at such a free (a rare pattern: stream-ordered frees
 * are usually of pool blocks, which the pools' footprints cover). */
#ifndef GSLICE_STREAM_FREES_H
#define GSLICE_STREAM_FREES_H

#include "gslice_cuda_abi.h"
#include "memory_ledger.h"

/* After a successful cuMemFreeAsync(dptr, stream) of entry (taken from the
 * ledger before the call; ptsz: the per-thread default stream's form).
 * Where no event can be recorded the entry is tracked again: given back
 * when the driver hands the address out again or its context goes (late:
 * the safe side). */
void gs_stream_free_queued(const gs_ledger_entry *entry, CUdeviceptr dptr, CUstream stream, int ptsz);
/* Give back every queued free its stream has passed. */
void gs_stream_frees_poll(void);
/* A context was destroyed or reset: its queued frees are done (the driver
 * freed its memory), and their events are gone with it. */
void gs_stream_frees_context_gone(CUcontext ctx);
/* fork(): the child has none. */
void gs_stream_frees_fork_child(void);

#endif
