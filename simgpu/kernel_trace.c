/* Kernel timeline of one process (kernel_trace.h). Records stay in memory
 * (a growing array, capped) and are written once, at exit, so tracing adds
 * no file I/O to the timeline it measures. */
#include "kernel_trace.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_device.h"

/* 4 M kernels (160 MiB): hours of 1 ms kernels; beyond it, counted only. */
#define TRACE_MAX_RECORDS (4u << 20)

struct trace_record {
    uint64_t enqueued_ns, ready_ns, start_ns, end_ns, requested_ns, away_ns;
};

static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static char trace_dir[512];
static bool trace_on;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static struct trace_record *records;
static size_t n_records, capacity;
static uint64_t dropped;

static void trace_write(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/kernels-%d.tsv", trace_dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) {
        sim_log("GSLICE_SIM_KERNEL_TRACE: cannot write %s; expected a writable directory", path);
        return;
    }
    pthread_mutex_lock(&trace_lock);
    fprintf(f, "# enqueued_ns\tready_ns\tstart_ns\tend_ns\trequested_ns\taway_ns\n");
    for (size_t i = 0; i < n_records; i++) {
        const struct trace_record *r = &records[i];
        fprintf(f, "%llu\t%llu\t%llu\t%llu\t%llu\t%llu\n", (unsigned long long)r->enqueued_ns,
                (unsigned long long)r->ready_ns, (unsigned long long)r->start_ns, (unsigned long long)r->end_ns,
                (unsigned long long)r->requested_ns, (unsigned long long)r->away_ns);
    }
    if (dropped)
        fprintf(f, "# dropped %llu records past the cap of %u\n", (unsigned long long)dropped, TRACE_MAX_RECORDS);
    pthread_mutex_unlock(&trace_lock);
    fclose(f);
}

static void trace_init(void)
{
    const char *dir = getenv("GSLICE_SIM_KERNEL_TRACE");
    if (!dir || !*dir)
        return;
    if (strlen(dir) >= sizeof trace_dir) {
        sim_log("GSLICE_SIM_KERNEL_TRACE is %zu characters long; at most %zu are accepted (no trace)", strlen(dir),
                sizeof trace_dir - 1);
        return;
    }
    strcpy(trace_dir, dir);
    trace_on = true;
    atexit(trace_write);
}

bool sim_kernel_trace_enabled(void)
{
    pthread_once(&trace_once, trace_init);
    return trace_on;
}

void sim_kernel_trace_add(uint64_t enqueued_ns, uint64_t ready_ns, uint64_t start_ns, uint64_t end_ns,
                          uint64_t requested_ns, uint64_t away_ns)
{
    pthread_mutex_lock(&trace_lock);
    if (n_records == capacity) {
        size_t grown = capacity ? capacity * 2 : 4096;
        struct trace_record *more = grown <= TRACE_MAX_RECORDS ? realloc(records, grown * sizeof *records) : NULL;
        if (!more) {
            dropped++;
            pthread_mutex_unlock(&trace_lock);
            return;
        }
        records = more;
        capacity = grown;
    }
    records[n_records++] = (struct trace_record){enqueued_ns, ready_ns, start_ns, end_ns, requested_ns, away_ns};
    pthread_mutex_unlock(&trace_lock);
}
