/* gate_lease: a token kept across an idle gap (state LEASED). An idle
 * release asks tokend to keep the token as a lease (gate_keeper.c); the
 * next launch reopens the gate locally (token_gate.c). Here: the lease
 * taken at start (right after an attach, if the token is free) and the
 * lease given back when tokend takes it back. Keeper thread only. */
#define _GNU_SOURCE
#include "gate_internal.h"

#include "log.h"
#include "rpc_client.h"

/* A lease taken back (or its connection gone): give it back unused. */
void gs_gate_return_lease_locked(gs_gate *g)
{
    uint64_t token_id = g->token_id;
    bool lost = g->token_lost;
    g->state = GS_GATE_RELEASING;
    pthread_mutex_unlock(&g->mu);
    if (!lost) {
        gs_gate_hand_back(g, gs_gate_monotonic_ns());   /* nothing of ours runs */
        int rc = gs_rpc_release(g->rpc, token_id, 0, 0, false, GS_GATE_RELEASE_WAIT_MS);
        if (rc != GS_RPC_OK)
            GS_DEBUG("ReleaseToken(%llu) of a lease returned %d (%s)", (unsigned long long)token_id, rc,
                     gs_rpc_last_error());
    }
    pthread_mutex_lock(&g->mu);
    atomic_fetch_add_explicit(&g->n_released, 1, memory_order_relaxed);
    if (g->state == GS_GATE_RELEASING)
        g->state = GS_GATE_NO_TOKEN;
    g->revoke_pending = false;
    g->token_lost = false;
    pthread_cond_broadcast(&g->changed);
}

/* Keeper, after an attach: take the token as a lease if tokend has it free
 * (nobody holds or waits), so the process's first burst starts without a
 * round trip, as its later ones do. Launches arriving meanwhile wait in
 * ACQUIRING; a Revoke racing the reply is kept in revoked_before_grant (the
 * keeper's loop then gives the lease back).
 * Only from NO_TOKEN: a launch that already asked needs no lease. */
void gs_gate_lease_at_start_locked(gs_gate *g)
{
    g->state = GS_GATE_ACQUIRING;
    pthread_mutex_unlock(&g->mu);
    uint64_t token_id = 0;
    uint32_t quantum_us = 0;
    int rc = gs_rpc_lease_if_free(g->rpc, GS_GATE_RELEASE_WAIT_MS, &token_id, &quantum_us);
    pthread_mutex_lock(&g->mu);
    if (g->state != GS_GATE_ACQUIRING)
        return;   /* fork or stop reset the gate underneath us */
    if (rc == GS_RPC_OK && token_id != 0) {
        g->state = GS_GATE_LEASED;
        g->token_id = token_id;
        g->quantum_us = quantum_us ? quantum_us : 1000;
        g->revoke_pending = g->revoked_before_grant == token_id;
        g->revoked_before_grant = 0;
        g->token_lost = false;
        atomic_fetch_add_explicit(&g->n_leases_at_start, 1, memory_order_relaxed);
        GS_DEBUG("token %llu leased at start: %u us", (unsigned long long)token_id, quantum_us);
    } else {
        if (rc != GS_RPC_OK)
            GS_DEBUG("AcquireToken(lease_if_free) returned %d (%s); the first launch asks", rc,
                     gs_rpc_last_error());
        g->state = GS_GATE_NO_TOKEN;
    }
    pthread_cond_broadcast(&g->changed);
}
