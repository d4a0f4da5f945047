/* rpc_driver: scripts hook/rpc_client.c for the tests.
 *
 * Usage: rpc_driver SOCKET GROUP SECRET [GPU_UUID]
 * Reads one command per line on stdin and prints one result line per
 * command; callbacks print "event ..." lines from the I/O thread. Commands:
 *   wait-attached MS             -> wait-attached 1 CLIENT_ID GROUP QUOTA USED PHYS QMIN QMAX GRACE PRIO
 *                                   | wait-attached 0 ERR
 *   acquire TIMEOUT_MS WAIT_MS   -> acquire RC TOKEN QUANTUM ERR
 *   release TOKEN USED OVERRUN IDLE WAIT_MS -> release RC ERR
 *   reserve BYTES WAIT_MS        -> reserve RC GRANTED USED QUOTA ERR
 *   release-memory BYTES WAIT_MS -> release-memory RC USED QUOTA ERR
 *   memory-info WAIT_MS          -> memory-info RC QUOTA USED TOTAL ERR
 *   set-reserved BYTES           -> set-reserved BYTES (what the next Attach declares)
 *   block-next-revoke MS         -> block-next-revoke MS (the next revoke callback then
 *                                   sleeps MS, holding up the I/O thread)
 *   hammer THREADS CALLS         -> hammer OK BAD FAILED (ReserveMemory echo check, see below)
 *   fork                         -> child: "child attached ID PID" + "child memory-info RC",
 *                                   parent: "fork exit STATUS"
 *   sleep-ms MS                  -> slept
 *   stop                         -> stopped
 *   stop-during-call WAIT_MS     -> a thread blocks in AcquireToken (waiting at most WAIT_MS),
 *                                   gs_rpc_stop runs meanwhile (process exit), then that thread
 *                                   and a late call finish: "stop-during-call RC_INSIDE RC_AFTER"
 * ERR is gs_rpc_last_error() in single quotes. */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rpc_client.h"

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t reserved_to_declare;
static gs_rpc *rpc;
static int block_next_revoke_ms; /* holds the I/O thread inside a callback */

static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&out_lock);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
    va_end(ap);
}

static void on_revoke(void *ctx, uint64_t token_id, const char *reason, bool lease_reclaim)
{
    (void)ctx;
    (void)lease_reclaim;
    say("event revoke %" PRIu64 " '%s'", token_id, reason);
    int ms = __atomic_exchange_n(&block_next_revoke_ms, 0, __ATOMIC_RELAXED);
    if (ms > 0) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

static void on_quota_changed(void *ctx, uint64_t quota)
{
    (void)ctx;
    say("event quota %" PRIu64, quota);
}

static void on_attached(void *ctx, const gs_attach_info *info, bool reconnect)
{
    (void)ctx;
    say("event attached %s reconnect=%d pid=%d calls=%s", info->client_id, reconnect ? 1 : 0, (int)getpid(),
        info->calls_transport[0] == 'c' ? "socket" : info->calls_transport[4] == 'C' ? "stream" : "unary");
}

static void on_disconnected(void *ctx)
{
    (void)ctx;
    say("event disconnected pid=%d", (int)getpid());
}

static uint64_t reserved_bytes(void *ctx)
{
    (void)ctx;
    return __atomic_load_n(&reserved_to_declare, __ATOMIC_RELAXED);
}

/* Each thread reserves bytes unique to (thread, call); the test server in
 * echo mode answers used = bytes, quota = 2 * bytes, so a reply delivered to
 * the wrong caller is caught. */
typedef struct hammer_arg {
    int index, calls;
    int ok, bad, failed;
    int last_rc;
    char last_error[256];
} hammer_arg;

static void *hammer_thread(void *p)
{
    hammer_arg *a = p;
    for (int i = 0; i < a->calls; i++) {
        uint64_t bytes = ((uint64_t)(a->index + 1) << 32) | (uint64_t)(i + 1);
        bool granted = false;
        uint64_t used = 0, quota = 0;
        int rc = gs_rpc_reserve(rpc, bytes, 30000, &granted, &used, &quota);
        if (rc != GS_RPC_OK) {
            a->failed++;
            a->last_rc = rc;
            snprintf(a->last_error, sizeof a->last_error, "%s", gs_rpc_last_error());
        } else if (!granted || used != bytes || quota != 2 * bytes) {
            a->bad++;
        } else {
            a->ok++;
        }
    }
    return NULL;
}

static void hammer(int threads, int calls)
{
    pthread_t tids[64];
    hammer_arg args[64];
    if (threads > 64)
        threads = 64;
    for (int t = 0; t < threads; t++) {
        args[t] = (hammer_arg){.index = t, .calls = calls};
        pthread_create(&tids[t], NULL, hammer_thread, &args[t]);
    }
    int ok = 0, bad = 0, failed = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        ok += args[t].ok;
        bad += args[t].bad;
        failed += args[t].failed;
        if (args[t].failed)
            say("hammer-failure thread=%d rc=%d '%s'", t, args[t].last_rc, args[t].last_error);
    }
    say("hammer %d %d %d", ok, bad, failed);
}

static void *acquire_thread(void *arg)
{
    int wait_ms = *(int *)arg;
    uint64_t token = 0;
    uint32_t quantum = 0;
    *(int *)arg = gs_rpc_acquire(rpc, 60000, wait_ms, &token, &quantum);
    return NULL;
}

/* What exit does: the destructor stops the client while an application
 * thread is still inside a call (and may make another one after). */
static void stop_during_call(int wait_ms)
{
    int rc_inside = wait_ms;
    pthread_t tid;
    pthread_create(&tid, NULL, acquire_thread, &rc_inside);
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL); /* the call is in flight at the daemon */
    gs_rpc_stop(rpc);
    pthread_join(tid, NULL);
    uint64_t quota = 0, used = 0, total = 0;
    int rc_after = gs_rpc_memory_info(rpc, 2000, &quota, &used, &total, NULL, 0, NULL);
    say("stop-during-call %d %d", rc_inside, rc_after);
}

static void run_child(void)
{
    gs_rpc_after_fork_child(rpc);
    gs_attach_info info;
    if (!gs_rpc_wait_attached(rpc, 20000, &info)) {
        say("child not-attached '%s'", gs_rpc_last_error());
        _exit(3);
    }
    say("child attached %s %d", info.client_id, (int)getpid());
    uint64_t quota = 0, used = 0, total = 0;
    int rc = gs_rpc_memory_info(rpc, 10000, &quota, &used, &total, NULL, 0, NULL);
    say("child memory-info %d", rc);
    gs_rpc_free(rpc);
    _exit(rc == GS_RPC_OK ? 0 : 4);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s SOCKET GROUP SECRET [GPU_UUID]\n", argv[0]);
        return 2;
    }
    gs_rpc_config cfg = {
        .socket_path = argv[1],
        .group = argv[2],
        .secret = argv[3],
        .gpu_uuid = argc > 4 ? argv[4] : "",
        .process_name = "rpc_driver",
        .on_revoke = on_revoke,
        .on_quota_changed = on_quota_changed,
        .on_attached = on_attached,
        .on_disconnected = on_disconnected,
        .reserved_bytes = reserved_bytes,
        .no_calls_socket = getenv("RPC_DRIVER_NO_CALLS_SOCKET") != NULL,
    };
    rpc = gs_rpc_start(&cfg);
    if (!rpc) {
        say("start-failed");
        return 1;
    }
    say("started %d", (int)getpid());

    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[64] = "";
        unsigned long long a = 0, b = 0, c = 0, d = 0, e = 0;
        int n = sscanf(line, "%63s %llu %llu %llu %llu %llu", cmd, &a, &b, &c, &d, &e);
        if (n < 1)
            continue;
        if (!strcmp(cmd, "wait-attached")) {
            gs_attach_info info;
            if (gs_rpc_wait_attached(rpc, (int)a, &info))
                say("wait-attached 1 %s %s %" PRIu64 " %" PRIu64 " %" PRIu64 " %u %u %u %d",
                    info.client_id, info.group, info.memory_quota, info.memory_used,
                    info.physical_memory, info.quantum_min_us, info.quantum_max_us,
                    info.grace_us, info.priority);
            else
                say("wait-attached 0 '%s'", gs_rpc_last_error());
        } else if (!strcmp(cmd, "acquire")) {
            uint64_t token = 0;
            uint32_t quantum = 0;
            int rc = gs_rpc_acquire(rpc, (uint32_t)a, (int)b, &token, &quantum);
            say("acquire %d %" PRIu64 " %u '%s'", rc, token, quantum, gs_rpc_last_error());
        } else if (!strcmp(cmd, "release")) {
            int rc = gs_rpc_release(rpc, a, b, c, d != 0, (int)e);
            say("release %d '%s'", rc, gs_rpc_last_error());
        } else if (!strcmp(cmd, "reserve")) {
            bool granted = false;
            uint64_t used = 0, quota = 0;
            int rc = gs_rpc_reserve(rpc, a, (int)b, &granted, &used, &quota);
            say("reserve %d %d %" PRIu64 " %" PRIu64 " '%s'", rc, granted ? 1 : 0, used, quota,
                gs_rpc_last_error());
        } else if (!strcmp(cmd, "release-memory")) {
            uint64_t used = 0, quota = 0;
            int rc = gs_rpc_release_memory(rpc, a, (int)b, &used, &quota);
            say("release-memory %d %" PRIu64 " %" PRIu64 " '%s'", rc, used, quota,
                gs_rpc_last_error());
        } else if (!strcmp(cmd, "memory-info")) {
            uint64_t quota = 0, used = 0, total = 0;
            int rc = gs_rpc_memory_info(rpc, (int)a, &quota, &used, &total, NULL, 0, NULL);
            say("memory-info %d %" PRIu64 " %" PRIu64 " %" PRIu64 " '%s'", rc, quota, used, total,
                gs_rpc_last_error());
        } else if (!strcmp(cmd, "set-reserved")) {
            __atomic_store_n(&reserved_to_declare, (uint64_t)a, __ATOMIC_RELAXED);
            say("set-reserved %llu", a);
        } else if (!strcmp(cmd, "block-next-revoke")) {
            __atomic_store_n(&block_next_revoke_ms, (int)a, __ATOMIC_RELAXED);
            say("block-next-revoke %llu", a);
        } else if (!strcmp(cmd, "hammer")) {
            hammer((int)a, (int)b);
        } else if (!strcmp(cmd, "fork")) {
            pthread_mutex_lock(&out_lock); /* no half-written line in the child */
            fflush(stdout);
            pid_t pid = fork();
            pthread_mutex_unlock(&out_lock);
            if (pid == 0)
                run_child();
            int status = 0;
            waitpid(pid, &status, 0);
            say("fork exit %d", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        } else if (!strcmp(cmd, "sleep-ms")) {
            struct timespec ts = {(time_t)(a / 1000), (long)(a % 1000) * 1000000L};
            nanosleep(&ts, NULL);
            say("slept");
        } else if (!strcmp(cmd, "stop-during-call")) {
            stop_during_call((int)a);
            return 0;
        } else if (!strcmp(cmd, "stop")) {
            gs_rpc_free(rpc);
            rpc = NULL;
            say("stopped");
            return 0;
        } else {
            say("unknown-command '%s'", cmd);
        }
    }
    gs_rpc_free(rpc);
    return 0;
}
