/* calls_socket: see calls_socket.h. */
#define _GNU_SOURCE
#include "calls_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rpc_codec.h"

/* The largest answer taken: a ClientAnswer is a few hundred bytes; tokend's
 * own requests are capped at 64 KiB, so is what it sends back. */
#define ANSWER_MAX_BYTES (64u * 1024u)
#define CALLS_FILE_NAME "client.calls"

struct calls_socket {
    int fd;
    uint8_t *out;            /* framed calls not yet written */
    size_t out_len, out_cap;
    uint8_t in[GRPC_FRAME_PREFIX + ANSWER_MAX_BYTES];
    size_t in_len;
};

bool calls_socket_path_beside(const char *client_socket_path, char *out, size_t cap)
{
    const char *slash = strrchr(client_socket_path, '/');
    int dir_len = slash ? (int)(slash - client_socket_path) + 1 : 0;
    int n = snprintf(out, cap, "%.*s%s", dir_len, client_socket_path, CALLS_FILE_NAME);
    return n > 0 && (size_t)n < cap;
}

calls_socket *calls_socket_open(const char *path, char *err, size_t err_cap)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) {
        snprintf(err, err_cap, "calls socket path %s is longer than %zu bytes", path, sizeof addr.sun_path - 1);
        return NULL;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, err_cap, "socket: %s", strerror(errno));
        return NULL;
    }
    /* Blocking connect: on a unix socket it completes or fails at once. */
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        snprintf(err, err_cap, "connect %s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    calls_socket *s = calloc(1, sizeof *s);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 || !s) {
        snprintf(err, err_cap, "%s", s ? "fcntl O_NONBLOCK failed" : "out of memory");
        free(s);
        close(fd);
        return NULL;
    }
    s->fd = fd;
    return s;
}

int calls_socket_fd(const calls_socket *s) { return s->fd; }

bool calls_socket_send(calls_socket *s, const uint8_t *framed, size_t len)
{
    return rpc_codec_append(&s->out, &s->out_len, &s->out_cap, 4096, framed, len);
}

bool calls_socket_wants_write(const calls_socket *s) { return s->out_len > 0; }

bool calls_socket_flush(calls_socket *s, char *err, size_t err_cap)
{
    size_t done = 0;
    while (done < s->out_len) {
        ssize_t n = send(s->fd, s->out + done, s->out_len - done, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            snprintf(err, err_cap, "calls socket write: %s", strerror(errno));
            return false;
        }
        done += (size_t)n;
    }
    if (done > 0) {
        memmove(s->out, s->out + done, s->out_len - done);
        s->out_len -= done;
    }
    return true;
}

bool calls_socket_read(calls_socket *s,
                       bool (*on_message)(void *ctx, const uint8_t *body, size_t len, char *err, size_t err_cap),
                       void *ctx, bool *malformed, char *err, size_t err_cap)
{
    *malformed = false;
    for (;;) {
        ssize_t n = recv(s->fd, s->in + s->in_len, sizeof s->in - s->in_len, 0);
        if (n == 0) {
            snprintf(err, err_cap, "tokend closed the calls socket");
            return false;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return true;
            snprintf(err, err_cap, "calls socket read: %s", strerror(errno));
            return false;
        }
        s->in_len += (size_t)n;
        size_t at = 0;
        while (s->in_len - at >= GRPC_FRAME_PREFIX) {
            bool compressed;
            uint32_t len;
            rpc_codec_read_prefix(s->in + at, &compressed, &len);
            if (compressed || len > ANSWER_MAX_BYTES) {
                snprintf(err, err_cap, "calls socket: a %s answer of %u bytes (at most %u, uncompressed)",
                         compressed ? "compressed" : "plain", len, ANSWER_MAX_BYTES);
                *malformed = true;
                return false;
            }
            if (s->in_len - at < GRPC_FRAME_PREFIX + (size_t)len)
                break;
            if (!on_message(ctx, s->in + at + GRPC_FRAME_PREFIX, len, err, err_cap)) {
                *malformed = true;
                return false;
            }
            at += GRPC_FRAME_PREFIX + (size_t)len;
        }
        if (at > 0) {
            memmove(s->in, s->in + at, s->in_len - at);
            s->in_len -= at;
        }
    }
}

void calls_socket_close(calls_socket *s)
{
    if (!s)
        return;
    close(s->fd);
    free(s->out);
    free(s);
}

void calls_socket_forget(calls_socket *s)
{
    if (s)
        close(s->fd);
}
