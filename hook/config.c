/* config: parse GSLICE_* once; bad values fall back to the default with a
 * warning naming the variable, the value and what would be accepted. */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static gs_config process_config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static int operator_daemon_loss = GS_ON_LOSS_WAIT; /* atomic: set by the RPC thread */

int gs_config_daemon_loss(void)
{
    return __atomic_load_n(&operator_daemon_loss, __ATOMIC_ACQUIRE);
}

void gs_config_set_daemon_loss(int daemon_loss_policy)
{
    int policy = daemon_loss_policy == 2 ? GS_ON_LOSS_OPEN : GS_ON_LOSS_WAIT;
    __atomic_store_n(&operator_daemon_loss, policy, __ATOMIC_RELEASE);
}

/* GSLICE_GROUP_SECRET_FILE: the secret in a file (a mounted Secret, a 0600
 * file), so it is on no command line and in no environment listing. Trailing
 * newlines (and CRs) are stripped. */
static void read_secret_file(char *dst, size_t cap, const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        GS_WARN("GSLICE_GROUP_SECRET_FILE=%s cannot be opened; expected a readable file holding the group secret",
                path);
        return;
    }
    char buf[256];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    bool longer = len == sizeof buf - 1 && fgetc(f) != EOF;
    fclose(f);
    buf[len] = 0;
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
        buf[--len] = 0;
    if (longer || len >= cap || strlen(buf) != len) {
        GS_WARN("GSLICE_GROUP_SECRET_FILE=%s does not hold a secret of at most %zu bytes; no secret", path, cap - 1);
        return;
    }
    memcpy(dst, buf, len + 1);
}

static void copy_str(char *dst, size_t cap, const char *src, const char *name)
{
    size_t len = strlen(src);
    if (len >= cap) {
        GS_WARN("%s is %zu bytes long; at most %zu accepted, ignoring it", name, len, cap - 1);
        dst[0] = 0;
        return;
    }
    memcpy(dst, src, len + 1);
}

static const char *env_lookup(const char *name) { return getenv(name); }

/* A size in MiB (0..1048576) as bytes; the default when unset or malformed. */
static unsigned long long mib_setting(const char *(*lookup)(const char *name), const char *name,
                                      unsigned long long default_mib)
{
    const char *v = lookup(name);
    if (!v || !*v)
        return default_mib << 20;
    char *end;
    long mib = strtol(v, &end, 10);
    if (*end || mib < 0 || mib > 1048576) {
        GS_WARN("%s=%s is not a number of MiB in 0..1048576 (using %llu)", name, v, default_mib);
        return default_mib << 20;
    }
    return (unsigned long long)mib << 20;
}

/* A mechanism's switch, on unless "0"; anything but 0 or 1 warns (on). */
static bool switch_setting(const char *(*lookup)(const char *name), const char *name, const char *what_on_means)
{
    const char *v = lookup(name);
    if (!v || !*v || !strcmp(v, "1"))
        return true;
    if (!strcmp(v, "0"))
        return false;
    GS_WARN("%s=%s is not 0 or 1 (using 1: %s)", name, v, what_on_means);
    return true;
}

void gs_config_parse(gs_config *cfg, const char *(*lookup)(const char *name))
{
    memset(cfg, 0, sizeof *cfg);
    const char *v;

    /* The level first, so later warnings honour it. */
    cfg->log_level = GS_LOG_WARN;
    cfg->anticipation_long_overlap_pct = GS_ANTICIPATION_LONG_OVERLAP_PCT_DEFAULT;
    if ((v = lookup("GSLICE_LOG_LEVEL")) && *v) {
        if (!strcmp(v, "error")) cfg->log_level = GS_LOG_ERROR;
        else if (!strcmp(v, "warn")) cfg->log_level = GS_LOG_WARN;
        else if (!strcmp(v, "info")) cfg->log_level = GS_LOG_INFO;
        else if (!strcmp(v, "debug")) cfg->log_level = GS_LOG_DEBUG;
        else GS_WARN("GSLICE_LOG_LEVEL=%s is not a level; expected error, warn, info or debug (using warn)", v);
    }

    v = lookup("GSLICE_DISABLE");
    cfg->disabled = v && *v && strcmp(v, "0") != 0;

    copy_str(cfg->socket_path, sizeof cfg->socket_path, "/run/gslice/client.sock", "GSLICE_SOCKET");
    if ((v = lookup("GSLICE_SOCKET")) && *v)
        copy_str(cfg->socket_path, sizeof cfg->socket_path, v, "GSLICE_SOCKET");
    if ((v = lookup("GSLICE_SOCKET_DIR")) && *v)
        copy_str(cfg->socket_dir, sizeof cfg->socket_dir, v, "GSLICE_SOCKET_DIR");
    if ((v = lookup("GSLICE_GROUP")))
        copy_str(cfg->group, sizeof cfg->group, v, "GSLICE_GROUP");
    if ((v = lookup("GSLICE_GROUP_SECRET")))
        copy_str(cfg->secret, sizeof cfg->secret, v, "GSLICE_GROUP_SECRET");
    if ((v = lookup("GSLICE_GROUP_SECRET_FILE")) && *v)
        read_secret_file(cfg->secret, sizeof cfg->secret, v);  /* wins over GSLICE_GROUP_SECRET */

    copy_str(cfg->real_libcuda, sizeof cfg->real_libcuda, "libcuda.so.1", "GSLICE_REAL_LIBCUDA");
    if ((v = lookup("GSLICE_REAL_LIBCUDA")) && *v)
        copy_str(cfg->real_libcuda, sizeof cfg->real_libcuda, v, "GSLICE_REAL_LIBCUDA");
    copy_str(cfg->real_libnvml, sizeof cfg->real_libnvml, "libnvidia-ml.so.1", "GSLICE_REAL_LIBNVML");
    if ((v = lookup("GSLICE_REAL_LIBNVML")) && *v)
        copy_str(cfg->real_libnvml, sizeof cfg->real_libnvml, v, "GSLICE_REAL_LIBNVML");

    /* The tenant does not choose what happens when tokend is away: the
     * operator does, per group (`gslice group set G --on-daemon-loss`). */
    cfg->on_daemon_loss = GS_ON_LOSS_WAIT;
    if ((v = lookup("GSLICE_ON_DAEMON_LOSS")) && *v && strcmp(v, "wait") != 0)
        GS_WARN("GSLICE_ON_DAEMON_LOSS=%s is ignored: the daemon-loss policy is the operator's, set per group "
                "in tokend (gslice group set GROUP --on-daemon-loss open); using the group's", v);

    cfg->daemon_wait_ms = 30000;
    if ((v = lookup("GSLICE_DAEMON_WAIT_MS")) && *v) {
        char *end;
        long ms = strtol(v, &end, 10);
        if (*end || ms < 0 || ms > 3600000)
            GS_WARN("GSLICE_DAEMON_WAIT_MS=%s is not a number of milliseconds in 0..3600000 (using 30000)", v);
        else
            cfg->daemon_wait_ms = (int)ms;
    }

    /* Device memory a context costs that no allocation call shows (context
     * state, module code, device heap and stacks): hundreds of MiB on
     * recent GPUs. Charged to the group per context. */
    cfg->context_reserve = mib_setting(lookup, "GSLICE_CONTEXT_RESERVE_MIB", 512);

    /* Room kept charged above what the driver already shows for the
     * process (process_overhead.h): growth after the last allocation (a
     * kernel's first launch loading its module) up to this much stays
     * inside the quota. */
    cfg->growth_margin = mib_setting(lookup, "GSLICE_CONTEXT_GROWTH_MARGIN_MIB", 64);

    cfg->head_start = switch_setting(lookup, "GSLICE_HEAD_START", "a preemptor launches at its ring");
    cfg->handback = switch_setting(lookup, "GSLICE_HANDBACK", "a slice's end is told to the next group");
    cfg->burst_end = switch_setting(lookup, "GSLICE_BURST_END", "a burst's end is checked at its synchronisation");
    cfg->calls_stream = switch_setting(lookup, "GSLICE_CALLS_STREAM", "token and memory calls go on the Calls stream");
    cfg->calls_socket = switch_setting(lookup, "GSLICE_CALLS_SOCKET",
                                       "token and memory calls go on tokend's client.calls when it offers one");

    if ((v = lookup("GSLICE_ANTICIPATION_LONG_OVERLAP_PCT")) && *v) {
        char *end;
        long pct = strtol(v, &end, 10);
        if (*end || pct < 0 || pct > 100)
            GS_WARN("GSLICE_ANTICIPATION_LONG_OVERLAP_PCT=%s is not a percentage in 0..100 (using %u)", v,
                    GS_ANTICIPATION_LONG_OVERLAP_PCT_DEFAULT);
        else
            cfg->anticipation_long_overlap_pct = (unsigned)pct;
    }

    cfg->metered = !cfg->disabled && cfg->group[0] != 0;
}

static void load_process_config(void)
{
    /* Warnings during parsing use the default level; then apply the one asked for. */
    gs_config_parse(&process_config, env_lookup);
    gs_log_set_level(process_config.log_level);
}

const gs_config *gs_config_get(void)
{
    pthread_once(&config_once, load_process_config);
    return &process_config;
}
