/* ledger_driver: hook/memory_ledger.c's account over the real RPC client,
 * scripted on stdin like rpc_driver.c (test_ledger_release_unknown.py).
 *
 * Usage: ledger_driver SOCKET GROUP SECRET
 * One command per line, one result line each:
 *   wait-attached MS   -> wait-attached 1 CLIENT_ID | wait-attached 0 ERR
 *   reserve BYTES      -> reserve RESULT           (enum gs_reserve_result)
 *   give-back BYTES    -> give-back ok             (no gate: flushed at once)
 *   flush              -> flush ok
 *   stats              -> stats HELD PENDING RELEASED
 *   stop               -> stopped
 * The account's re-attach declares what it holds (gs_ledger_redeclare). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memory_ledger.h"
#include "rpc_client.h"
#include "token_gate.h"

static gs_ledger_account account;

/* The account has no gate: memory_ledger.c flushes a give-back itself. */
void gs_gate_kick_service(gs_gate *g) { (void)g; }

static uint64_t reserved_bytes(void *ctx)
{
    (void)ctx;
    return gs_ledger_redeclare(&account);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s SOCKET GROUP SECRET\n", argv[0]);
        return 2;
    }
    gs_rpc_config cfg = {
        .socket_path = argv[1],
        .group = argv[2],
        .secret = argv[3],
        .gpu_uuid = "",
        .process_name = "ledger_driver",
        .reserved_bytes = reserved_bytes,
        .no_calls_socket = getenv("RPC_DRIVER_NO_CALLS_SOCKET") != NULL,
    };
    gs_ledger_account_init(&account, NULL, NULL, argv[1]);
    gs_rpc *rpc = gs_rpc_start(&cfg);
    if (!rpc) {
        say("start-failed");
        return 1;
    }
    account.rpc = rpc;
    say("started %d", (int)getpid());

    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[64] = "";
        unsigned long long a = 0;
        if (sscanf(line, "%63s %llu", cmd, &a) < 1)
            continue;
        if (!strcmp(cmd, "wait-attached")) {
            gs_attach_info info;
            if (gs_rpc_wait_attached(rpc, (int)a, &info))
                say("wait-attached 1 %s", info.client_id);
            else
                say("wait-attached 0 '%s'", gs_rpc_last_error());
        } else if (!strcmp(cmd, "reserve")) {
            say("reserve %d", gs_ledger_reserve(&account, a, "ledger_driver"));
        } else if (!strcmp(cmd, "give-back")) {
            gs_ledger_give_back(&account, a);
            say("give-back ok");
        } else if (!strcmp(cmd, "flush")) {
            gs_ledger_flush(&account);
            say("flush ok");
        } else if (!strcmp(cmd, "stats")) {
            gs_ledger_stats st;
            gs_ledger_get_stats(&account, &st);
            say("stats %" PRIu64 " %" PRIu64 " %" PRIu64, st.held, st.pending_release, st.bytes_released);
        } else if (!strcmp(cmd, "stop")) {
            gs_rpc_free(rpc);
            say("stopped");
            return 0;
        } else {
            say("unknown-command '%s'", cmd);
        }
    }
    gs_rpc_free(rpc);
    return 0;
}
