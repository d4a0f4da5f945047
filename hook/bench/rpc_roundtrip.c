/* rpc_roundtrip: round-trip latency of the shim's RPC client (hook/rpc_client.c).
 *
 * Usage: rpc_roundtrip SOCKET GROUP SECRET N [RESERVE_BYTES]
 * Attaches, warms up, then times N uncontended AcquireToken+ReleaseToken
 * pairs and N ReserveMemory+ReleaseMemory pairs, each call on its own too.
 * RPC_ROUNDTRIP_UNARY=1 in the environment: unary calls, not the Calls
 * stream (as against a daemon older than it); RPC_ROUNDTRIP_NO_CALLS_SOCKET=1:
 * the Calls stream, not client.calls (as against a daemon without it).
 * Prints one JSON object: per series n, p50_us, p99_us, mean_us, max_us. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "latency_series.h"
#include "rpc_client.h"

#ifndef WAIT_MS
#define WAIT_MS 10000
#endif
#define WARMUP 50

typedef struct series {
    const char *name;
    double *us;
    int n;
} series;

static void print_series(const series *s, bool last)
{
    printf("  \"%s\": ", s->name);
    print_latency_series(s->us, s->n);
    printf("%s\n", last ? "" : ",");
}

static int fail(const char *what, int rc)
{
    fprintf(stderr, "rpc_roundtrip: %s failed (rc %d): %s\n", what, rc, gs_rpc_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s SOCKET GROUP SECRET N [RESERVE_BYTES]\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[4]);
    uint64_t reserve_bytes = argc > 5 ? strtoull(argv[5], NULL, 0) : (1u << 20);
    if (n < 1) {
        fprintf(stderr, "rpc_roundtrip: N must be >= 1, got '%s'\n", argv[4]);
        return 2;
    }
    gs_rpc_config cfg = {.socket_path = argv[1], .group = argv[2], .secret = argv[3],
                         .gpu_uuid = "", .process_name = "rpc_roundtrip"};
    const char *unary = getenv("RPC_ROUNDTRIP_UNARY");
    cfg.unary_calls_only = unary && strcmp(unary, "1") == 0;
    const char *no_socket = getenv("RPC_ROUNDTRIP_NO_CALLS_SOCKET");
    cfg.no_calls_socket = no_socket && strcmp(no_socket, "1") == 0;
    gs_rpc *rpc = gs_rpc_start(&cfg);
    if (!rpc || !gs_rpc_wait_attached(rpc, 20000, NULL)) {
        fprintf(stderr, "rpc_roundtrip: not attached to %s: %s\n", argv[1], gs_rpc_last_error());
        return 1;
    }

    static const char *names[6] = {"acquire_release", "acquire", "release",
                                   "reserve_release_memory", "reserve", "release_memory"};
    series all[6];
    for (int i = 0; i < 6; i++) {
        all[i] = (series){.name = names[i], .us = calloc((size_t)n, sizeof(double))};
        if (!all[i].us) {
            fprintf(stderr, "rpc_roundtrip: out of memory for %d samples\n", n);
            return 1;
        }
    }

    for (int i = -WARMUP; i < n; i++) {
        uint64_t token = 0;
        uint32_t quantum = 0;
        double t0 = now_us();
        int rc = gs_rpc_acquire(rpc, 5000, WAIT_MS, &token, &quantum);
        if (rc != GS_RPC_OK)
            return fail("AcquireToken", rc);
        double t1 = now_us();
        rc = gs_rpc_release(rpc, token, (uint64_t)(t1 - t0), 0, false, WAIT_MS);
        if (rc != GS_RPC_OK)
            return fail("ReleaseToken", rc);
        double t2 = now_us();
        if (i >= 0) {
            all[0].us[all[0].n++] = t2 - t0;
            all[1].us[all[1].n++] = t1 - t0;
            all[2].us[all[2].n++] = t2 - t1;
        }
    }
    for (int i = -WARMUP; i < n; i++) {
        bool granted = false;
        double t0 = now_us();
        int rc = gs_rpc_reserve(rpc, reserve_bytes, WAIT_MS, &granted, NULL, NULL);
        if (rc != GS_RPC_OK || !granted)
            return fail("ReserveMemory (granted)", rc);
        double t1 = now_us();
        rc = gs_rpc_release_memory(rpc, reserve_bytes, WAIT_MS, NULL, NULL);
        if (rc != GS_RPC_OK)
            return fail("ReleaseMemory", rc);
        double t2 = now_us();
        if (i >= 0) {
            all[3].us[all[3].n++] = t2 - t0;
            all[4].us[all[4].n++] = t1 - t0;
            all[5].us[all[5].n++] = t2 - t1;
        }
    }
    gs_rpc_stop(rpc);

    printf("{\n");
    for (int i = 0; i < 6; i++)
        print_series(&all[i], i == 5);
    printf("}\n");
    for (int i = 0; i < 6; i++)
        free(all[i].us);
    return 0;
}
