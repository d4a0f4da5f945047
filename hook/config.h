/* config: the shim's environment, read once at first use (never on the
 * launch path; HAMi's getenv-per-call cost ~23% of a training step). */
#ifndef GSLICE_CONFIG_H
#define GSLICE_CONFIG_H

#include <stdbool.h>

enum gs_daemon_loss_policy {
    GS_ON_LOSS_WAIT = 0,   /* launches block until tokend is back */
    GS_ON_LOSS_OPEN = 1,   /* run unmetered while tokend is away */
};

/* How far (percent of its length) a long kernel may run into an expected
 * preemptor's window (gs_anticipation_holds, gate_pause.c). Half: on an
 * H200 beside 8192 matmuls, 0 left the GPU 0.916 busy (the issue asks
 * 0.95) for bursts p50 / p99 +0.35 / +1.36 ms over alone; 50: 0.963,
 * +0.98 / +1.47 (the bound is a kernel + 0.3 ms: +2.1); 100: 0.966, +1.07 /
 * +1.84 (benchmarks/gpu/latency_ab.py, results/gpu/latency_ab_20261128T2009Z). */
#define GS_ANTICIPATION_LONG_OVERLAP_PCT_DEFAULT 50

typedef struct gs_config {
    bool disabled;             /* GSLICE_DISABLE=1: pure pass-through */
    bool metered;              /* a group is configured and not disabled */
    char socket_path[256];     /* GSLICE_SOCKET, default /run/gslice/client.sock */
    char socket_dir[256];      /* GSLICE_SOCKET_DIR: <dir>/<gpu-uuid>/client.sock */
    char group[128];           /* GSLICE_GROUP */
    char secret[128];          /* GSLICE_GROUP_SECRET, or the content of GSLICE_GROUP_SECRET_FILE */
    char real_libcuda[256];    /* GSLICE_REAL_LIBCUDA, default libcuda.so.1 */
    char real_libnvml[256];    /* GSLICE_REAL_LIBNVML, default libnvidia-ml.so.1 */
    int log_level;             /* GSLICE_LOG_LEVEL error|warn|info|debug */
    int on_daemon_loss;        /* unused: the policy is the operator's, gs_config_daemon_loss() */
    int daemon_wait_ms;        /* GSLICE_DAEMON_WAIT_MS, default 30000 */
    unsigned long long context_reserve; /* GSLICE_CONTEXT_RESERVE_MIB (default 512): bytes charged per context */
    unsigned long long growth_margin;   /* GSLICE_CONTEXT_GROWTH_MARGIN_MIB (default 64): bytes charged above NVML's
                                           per-process figure once it exceeds the context reserves */
    bool head_start;           /* GSLICE_HEAD_START (default 1): a preemptor launches at its ring (gate_head_start.c) */
    bool handback;             /* GSLICE_HANDBACK (default 1): a slice's end is told to the next group, which
                                * starts before its grant (gate_handback.c) */
    bool burst_end;            /* GSLICE_BURST_END (default 1): a bursty holder's idle end is checked at its
                                * own synchronisation (gate_burst_end.c) */
    bool calls_stream;         /* GSLICE_CALLS_STREAM (default 1): token and memory calls on the Calls stream
                                * (rpc_client.c); 0: unary calls */
    bool calls_socket;         /* GSLICE_CALLS_SOCKET (default 1): ... on client.calls when tokend offers it
                                * (calls_socket.h); 0: on the Calls stream */
    unsigned anticipation_long_overlap_pct; /* GSLICE_ANTICIPATION_LONG_OVERLAP_PCT (0..100, default 50): how far
                                * (percent of its length) a long kernel may run into the window in which a
                                * preemptor is expected before it waits for it (gate_pause.c) */
} gs_config;

/* The process's configuration; the first call reads the environment. */
const gs_config *gs_config_get(void);
/* The daemon-loss policy in force: the operator's, from tokend's last
 * AttachReply; wait until one arrived. A tenant's environment cannot loosen
 * it (GSLICE_ON_DAEMON_LOSS is ignored with a warning). */
int gs_config_daemon_loss(void);
/* Records the operator's policy from an AttachReply (DaemonLossPolicy:
 * 0 unspecified and 1 wait, 2 open). */
void gs_config_set_daemon_loss(int daemon_loss_policy);
/* Parses an environment-like lookup into cfg (for tests); problems are
 * logged naming the variable, the bad value and what is accepted. */
void gs_config_parse(gs_config *cfg, const char *(*lookup)(const char *name));

#endif
