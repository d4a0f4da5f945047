/* socket_echo: the floor under rpc_roundtrip, measured on the same machine
 * in the same run: round trips of a framed message (a ClientCall's size,
 * framed as on client.calls) to an echo server written like tokend's calls
 * socket (benchmarks/socket_echo_server.py: asyncio streams, readexactly),
 * which does nothing with it. What rpc_roundtrip takes beyond two of these
 * per pair is tokend's own work and the shim client's.
 *
 * Usage: socket_echo SOCKET N direct|reader-thread
 *   direct         the calling thread writes and reads the answer itself;
 *   reader-thread  it writes, and a second thread reads the answer and
 *                  wakes it through a condition variable, as the shim's
 *                  RPC client does (its I/O thread reads client.calls).
 * Prints one JSON object: n, p50_us, p99_us, mean_us, max_us. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "latency_series.h"

#define BODY_BYTES 64   /* an AcquireToken ClientCall with its client id */
#define FRAME_BYTES (5 + BODY_BYTES)

static int fd;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t answered = PTHREAD_COND_INITIALIZER;
static long answers;

static bool read_frame(void)
{
    char buf[FRAME_BYTES];
    size_t got = 0;
    while (got < sizeof buf) {
        ssize_t r = read(fd, buf + got, sizeof buf - got);
        if (r <= 0)
            return false;
        got += (size_t)r;
    }
    return true;
}

static void *reader_main(void *arg)
{
    (void)arg;
    while (read_frame()) {
        pthread_mutex_lock(&mu);
        answers++;
        pthread_cond_signal(&answered);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[3], "direct") != 0 && strcmp(argv[3], "reader-thread") != 0)) {
        fprintf(stderr, "usage: %s SOCKET N direct|reader-thread\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[2]);
    bool direct = strcmp(argv[3], "direct") == 0;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (n < 1 || strlen(argv[1]) >= sizeof addr.sun_path) {
        fprintf(stderr, "socket_echo: N must be >= 1 (got '%s') and the path under %zu bytes\n", argv[2],
                sizeof addr.sun_path);
        return 2;
    }
    strcpy(addr.sun_path, argv[1]);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        perror("socket_echo: connect");
        return 1;
    }
    pthread_t reader;
    if (!direct && pthread_create(&reader, NULL, reader_main, NULL) != 0) {
        fprintf(stderr, "socket_echo: cannot start the reader thread\n");
        return 1;
    }
    char frame[FRAME_BYTES] = {0};
    frame[4] = BODY_BYTES;   /* uncompressed, big-endian length */
    double *us = calloc((size_t)n, sizeof(double));
    for (int i = -50; i < n; i++) {
        double t0 = now_us();
        if (write(fd, frame, sizeof frame) != (ssize_t)sizeof frame) {
            perror("socket_echo: write");
            return 1;
        }
        if (direct) {
            if (!read_frame()) {
                fprintf(stderr, "socket_echo: the server closed the socket\n");
                return 1;
            }
        } else {
            pthread_mutex_lock(&mu);
            while (answers < i + 51)
                pthread_cond_wait(&answered, &mu);
            pthread_mutex_unlock(&mu);
        }
        if (i >= 0)
            us[i] = now_us() - t0;
    }
    print_latency_series(us, n);
    printf("\n");
    return 0;
}
